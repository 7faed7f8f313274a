"""Atomic file writes shared by every writer of state that another process reads.

Readers on other nodes (the verdict store on shared storage, the job-side helpers'
round files) and the next prolog (the Xid cursor) must never see half a file, so every
such write goes to a temporary file in the same directory and is renamed over the
target. Only ``json`` and ``os`` are imported: the prolog calls this on its hot path.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Optional


def write_json_atomic(path: str, data: Any, *, indent: Optional[int] = None, fsync: bool = False,
                      mode: Optional[int] = None) -> None:
    """Write ``data`` as JSON (sorted keys) to ``path`` atomically.

    ``indent=None`` writes compact JSON. ``fsync`` flushes the data to disk before the
    rename (shared storage, where a crash must not leave an empty file behind). ``mode``
    sets the file's permissions, for files that other users must read whatever the
    writer's umask.
    """
    directory, name = os.path.split(os.path.abspath(path))
    # Unique per process and thread, in the target's directory so the rename is atomic.
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, sort_keys=True, indent=indent,
                      separators=(",", ":") if indent is None else None)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
