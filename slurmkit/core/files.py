"""Atomic file writes shared by every writer of state that another process reads.

Readers on other nodes (the verdict store on shared storage, the job-side helpers'
round files) and the next prolog (the Xid cursor) must never see half a file, so every
such write goes to a temporary file in the same directory and is renamed over the
target. Only ``os`` and :mod:`slurmkit.core.jsontext` are imported: the prolog calls this on its hot
path.
"""

from __future__ import annotations

import os

from slurmkit.core import jsontext

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Optional, Tuple

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def write_bytes_atomic(
    path: str,
    data: bytes,
    *,
    fsync: bool = False,
    mode: Optional[int] = None,
    owner: Optional[Tuple[int, int]] = None,
) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in the same directory,
    renamed over ``path``.

    ``fsync`` flushes the data to disk before the rename (shared storage, where a crash
    must not leave an empty file behind). ``mode`` sets the file's permissions (default:
    0644 less the umask), for files that other users must read whatever the writer's
    umask, or that nobody else may read (0600). ``owner`` (uid, gid) gives the file to
    another user before it appears (root writing a daemon's 0600 configuration).

    The temporary file has a random name and is created with ``O_EXCL | O_NOFOLLOW``
    (as ``mkstemp`` does), so nobody can prepare that name in advance: a symlink there
    is never followed and an existing file is never reused. The mode is set with
    ``fchmod`` on that descriptor, never by path: a ``chmod(path)`` after the rename
    would follow a symlink someone planted at ``path`` meanwhile (a root-only file
    became 0644 that way). A symlink at ``path`` itself is replaced, not followed.
    """
    directory, name = os.path.split(os.path.abspath(path))
    while True:
        tmp = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, _CREATE, 0o600 if mode is not None else 0o644)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as fh:
            if owner is not None:
                os.fchown(fh.fileno(), *owner)
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json_atomic(
    path: str, data: Any, *, indent: Optional[int] = None, fsync: bool = False, mode: Optional[int] = None
) -> None:
    """Write ``data`` as JSON (sorted keys) to ``path`` atomically (:func:`write_bytes_atomic`).

    ``indent=None`` writes compact JSON; ``fsync`` and ``mode`` as for :func:`write_bytes_atomic`.
    """
    if indent is None:
        text = jsontext.dumps(data, sort_keys=True, separators=(",", ":"))
    else:  # for people to read, off the hooks' path
        import json

        text = json.dumps(data, sort_keys=True, indent=indent)
    write_bytes_atomic(path, text.encode("utf-8"), fsync=fsync, mode=mode)
