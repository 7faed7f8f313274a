"""Trust only root's files: the one check every root-run reader of state, verdicts, tables
and configs goes through, and the one way root-run code creates its own files and locks.

The prolog, epilog, health check and sweeps run as root on every node. Whatever they
read steers what root does (drain a node, skip a check, judge an Xid), so a file any
ordinary user could have written must never be believed. The rule is sshd's
``StrictModes``:

* the file is opened with ``O_NOFOLLOW | O_NONBLOCK`` (a symlink is refused, a FIFO
  cannot block the open) and checked with ``fstat`` on that descriptor: a regular
  file, owned by a trusted account (root, the account running slurmkit, or one the
  caller names, such as the sweep account for verdicts), not writable by group or
  others;
* the path is walked from ``/`` one component at a time with ``lstat``, as the kernel
  resolves it, never ``realpath`` first (that judges a link's target without asking
  who made the link): every entry on the way, symbolic links included, is owned by a
  trusted account, and every directory is not writable by group or others. The one
  exception is a sticky directory such as ``/tmp`` *above* the file's directory: the
  sticky bit stops anyone but the owner from renaming or removing the trusted-owned
  entry below it, so ``/tmp/<root's 0700 dir>/state`` is sound, and a user's link in
  ``/tmp`` is refused, wherever it points. The file's own directory is never
  allowed to be group- or other-writable, sticky or not (anyone could pre-create
  names there).

Anything else is ignored: a log line on ``slurmkit.trust`` and an entry in
:data:`REJECTED`, which the hooks turn into the ``slurmkit_health_untrusted_files``
metric. Files slurmkit creates are 0600 (state, locks) or 0644 (logs, metrics,
verdicts) in directories created 0700 or 0755.

Only ``os``, ``stat``, ``errno``, ``fcntl`` and ``time`` are imported: the prolog calls this
on its hot path. ``logging`` is imported by :func:`reject`, when a file is refused (the rare
case; the module and what it pulls in cost a prolog several milliseconds).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Iterable, List, Optional, Tuple

#: ``(path, why)`` of every file this process refused to trust, for the hooks' metric.
REJECTED: List[Tuple[str, str]] = []

#: The most a state, verdict or table file may hold; a bigger one is not ours.
MAX_BYTES = 16 * 1024 * 1024
#: The most any YAML document slurmkit reads may hold (configs, job specs, tables: a spec is a
#: few KiB; :mod:`slurmkit.core.yamlload`): here, so that a job start, which reads the config's
#: bytes but parses no YAML, need not import the YAML loader for it.
MAX_YAML_BYTES = 1 << 20

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class UntrustedFile(Exception):
    """A file or directory that a non-trusted account could have written."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


def trusted_uids(extra: Iterable[int] = ()) -> frozenset:
    """Root, the account running this process, and ``extra`` (e.g. the sweep account)."""
    return frozenset({0, os.geteuid(), *extra})


def uid_of(account) -> Optional[int]:
    """A user name or numeric uid -> uid; ``None`` for an unknown name (trust nobody extra)."""
    if account is None or account == "":
        return None
    if isinstance(account, int) or str(account).isdigit():
        return int(account)
    if account == "root":  # the default: no NSS lookup (LDAP) on the prolog's path
        return 0
    import pwd

    try:
        return pwd.getpwnam(str(account)).pw_uid
    except KeyError:
        return None


def reject(path: str, why: str) -> None:
    """Remember and log one refused file (the caller then ignores it)."""
    REJECTED.append((path, why))
    import logging  # only on this rare path: see the module docstring

    logging.getLogger("slurmkit.trust").warning("ignoring untrusted %s: %s", path, why)


def _mode_problem(st: os.stat_result, owners: frozenset, what: str) -> Optional[str]:
    if st.st_uid not in owners:
        return f"{what} is owned by uid {st.st_uid}, not by a trusted account (uids {sorted(owners)})"
    if st.st_mode & 0o022:
        return f"{what} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


#: The most symbolic links one path may pass through (the kernel's own limit).
_MAX_LINKS = 40


def _resolve(path: str, owners: frozenset) -> Tuple[str, os.stat_result, os.stat_result]:
    """Walk ``path`` from ``/`` one component at a time, as the kernel does, checking each
    step with ``lstat`` before taking it (never ``realpath`` first, then checking the
    result: that trusts a link's target without asking who made the link).

    Every entry on the way (directory, file, or symbolic link) must be owned by a
    trusted account, and every directory it sits in must not be writable by group or
    others unless it is sticky (the sticky bit stops anyone but the entry's trusted
    owner from renaming or replacing it). A symbolic link passes only then, and its
    target is walked the same way. Returns ``(resolved path, its lstat, the lstat of its
    directory)``. Raises :class:`UntrustedFile`, or ``FileNotFoundError`` for a missing
    component (nothing there to trust or distrust).
    """
    path = os.path.abspath(path)
    root_st = os.lstat("/")
    if root_st.st_uid not in owners:
        raise UntrustedFile(path, f"directory / is owned by uid {root_st.st_uid}, not by a trusted account")
    chain: List[Tuple[str, os.stat_result]] = [("/", root_st)]
    pending = [p for p in reversed(path.split(os.sep)) if p]
    links = 0
    while pending:
        name = pending.pop()
        if name == ".":
            continue
        if name == "..":
            if len(chain) > 1:
                chain.pop()
            continue
        cur, cur_st = chain[-1]
        if not stat.S_ISDIR(cur_st.st_mode):
            raise UntrustedFile(path, f"{cur} is not a directory")
        entry = os.path.join(cur, name)
        try:
            st = os.lstat(entry)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise UntrustedFile(path, f"{entry}: {exc.strerror}") from None
        is_link = stat.S_ISLNK(st.st_mode)
        if st.st_uid not in owners:
            kind = "symbolic link" if is_link else "directory" if stat.S_ISDIR(st.st_mode) else "file"
            raise UntrustedFile(path, f"{kind} {entry} is owned by uid {st.st_uid}, not by a trusted account")
        if cur_st.st_mode & 0o022 and not cur_st.st_mode & stat.S_ISVTX:
            raise UntrustedFile(
                path,
                f"directory {cur} is writable by group or others (mode {stat.S_IMODE(cur_st.st_mode):04o})",
            )
        if is_link:
            links += 1
            if links > _MAX_LINKS:
                raise UntrustedFile(path, "too many levels of symbolic links")
            target = os.readlink(entry)
            if target.startswith(os.sep):
                del chain[1:]
            pending.extend(p for p in reversed(target.split(os.sep)) if p)
            continue
        chain.append((entry, st))
    real, st = chain[-1]
    parent_st = chain[-2][1] if len(chain) > 1 else st
    return real, st, parent_st


def dir_problem(directory: str, owners: Optional[frozenset] = None) -> Optional[str]:
    """Why ``directory`` cannot hold trusted files; ``None`` if it can (:func:`_resolve`'s
    walk, and the directory itself not writable by group or others, sticky or not:
    anyone could pre-create names in it). A missing component raises
    ``FileNotFoundError`` (nothing there to trust or distrust)."""
    owners = trusted_uids() if owners is None else owners
    try:
        real, st, _ = _resolve(directory, owners)
    except UntrustedFile as exc:
        return exc.why
    if not stat.S_ISDIR(st.st_mode):
        return f"{real} is not a directory"
    if st.st_mode & 0o022:
        return f"directory {real} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def open_trusted(path: str, owners: Optional[frozenset] = None) -> int:
    """Open ``path`` read-only for a trusted read; return the descriptor.

    Raises ``FileNotFoundError`` when it does not exist (callers treat that as "none")
    and :class:`UntrustedFile` when it, a link on the way, or a directory above it
    fails the rule.
    """
    owners = trusted_uids() if owners is None else owners
    real, lst, parent_st = _resolve(path, owners)
    if parent_st.st_mode & 0o022:
        raise UntrustedFile(
            path,
            f"directory {os.path.dirname(real)} is writable by group or others "
            f"(mode {stat.S_IMODE(parent_st.st_mode):04o})",
        )
    try:
        fd = os.open(real, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedFile(path, "is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedFile(path, "is not a regular file")
        if (st.st_dev, st.st_ino) != (lst.st_dev, lst.st_ino):
            raise UntrustedFile(path, "was replaced while it was being checked")
        problem = _mode_problem(st, owners, "the file")
        if problem:
            raise UntrustedFile(path, problem)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_strict(path: str, owners: Optional[frozenset] = None, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of ``path`` if it passes the rule. Raises ``FileNotFoundError`` when it is
    missing and :class:`UntrustedFile` (logged and counted) when it is refused."""
    try:
        fd = open_trusted(path, owners)
    except UntrustedFile as exc:
        reject(exc.path, exc.why)
        raise
    try:
        chunks = []
        size = 0
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:  # a regular file never says this; do not spin if it does
                break
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                reject(path, f"larger than {max_bytes} bytes")
                raise UntrustedFile(path, f"larger than {max_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_trusted(
    path: str, owners: Optional[frozenset] = None, max_bytes: int = MAX_BYTES
) -> Optional[bytes]:
    """The bytes of ``path`` if it passes the rule; ``None`` when it is missing or refused
    (a refusal is logged and counted). Other I/O errors propagate."""
    try:
        return read_strict(path, owners, max_bytes)
    except (FileNotFoundError, UntrustedFile):
        return None


def writable_dir(directory: str, mode: int = 0o755, owners: Optional[frozenset] = None) -> Optional[str]:
    """Create ``directory`` (``mode``; missing parents 0755) if missing, then say why root
    must not write in it (``None``: it may). An existing directory's mode is not changed."""
    try:
        if not os.path.isdir(directory):
            os.makedirs(os.path.dirname(os.path.abspath(directory)), mode=0o755, exist_ok=True)
            try:
                os.mkdir(directory, mode)
            except FileExistsError:
                pass
        return dir_problem(os.path.abspath(directory), owners)
    except OSError as exc:
        return f"{directory}: {exc.strerror}"


def lock(
    path: str, timeout: float, *, posix: bool = False, mode: int = 0o600, owners: Optional[frozenset] = None
) -> int:
    """Take an exclusive lock on ``path`` (created ``mode``, never through a symlink),
    waiting at most ``timeout`` seconds; return the descriptor (close it to unlock).

    ``posix`` uses ``fcntl`` record locks (``lockf``: NFS with a lock manager) instead of
    ``flock``. Raises ``TimeoutError`` when the lock stays held, :class:`UntrustedFile`
    when the lock file is not a regular file of a trusted account with ``mode``'s
    permissions at most (a lock any user can open is a lock any user can hold).
    """
    try:
        fd = os.open(path, _LOCK_FLAGS, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedFile(path, "lock file is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedFile(path, "lock file is not a regular file")
        if st.st_uid not in (trusted_uids() if owners is None else owners):
            raise UntrustedFile(path, f"lock file is owned by uid {st.st_uid}, not by a trusted account")
        if stat.S_IMODE(st.st_mode) & ~mode and st.st_uid == os.geteuid():
            os.fchmod(fd, mode)  # an older, wider lock file of ours: narrow it
        deadline = time.monotonic() + max(0.0, timeout)
        delay = 0.002
        while True:
            try:
                if posix:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                else:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{path} is locked by another process (waited {timeout:.2f}s)")
            time.sleep(delay)
            delay = min(0.05, delay * 2)
    except BaseException:
        os.close(fd)
        raise


def private_dir_problem(path: str, uid: Optional[int] = None, *, forbidden: int = 0o022) -> Optional[str]:
    """Create ``path`` (each missing level ``mkdir`` 0700) and check it is private to
    ``uid`` (default: this process's user); ``None`` when it is, else a one-line reason.

    For the places a job keeps what it will later load or run (checkpoints, compiler
    caches): what another user prepared there is code run as this user. ``mkdir`` never
    reuses a name; an existing entry (pre-created by anyone, a link, the job's own from
    an earlier step) is then judged with the walk of :func:`_resolve` (owners: root and
    ``uid``; a link or directory of another user's on the way, or a directory they can
    write that is not sticky, is refused) and the directory itself must be ``uid``'s,
    with none of the ``forbidden`` mode bits (0o022: nobody else can write; 0o077:
    nobody else can even look).
    """
    uid = os.geteuid() if uid is None else uid
    path = os.path.abspath(path)
    missing: List[str] = []
    cur = path
    while not os.path.lexists(cur):
        missing.append(cur)
        parent = os.path.dirname(cur)
        if parent == cur:
            break
        cur = parent
    owners = frozenset({0, uid})
    if missing:  # judge what exists before creating in it: never mkdir through someone's link
        try:
            _, top, _ = _resolve(cur, owners)
        except UntrustedFile as exc:
            return exc.why
        except OSError as exc:
            return f"{cur}: {exc.strerror}"
        if top.st_mode & 0o022 and not top.st_mode & stat.S_ISVTX:
            return f"directory {cur} is writable by group or others (mode {stat.S_IMODE(top.st_mode):04o})"
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass  # made meanwhile (another node, a racing user): judged below like any existing one
        except OSError as exc:
            return f"cannot create {d}: {exc.strerror}"
    try:
        _, st, _ = _resolve(path, owners)
    except UntrustedFile as exc:
        return exc.why
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != uid:
        return f"{path} belongs to uid {st.st_uid}, not to uid {uid} (this job's user)"
    if st.st_mode & forbidden:
        return f"{path} is open to group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None
