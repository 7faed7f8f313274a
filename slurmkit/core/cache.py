"""A root-only cache of what was derived from a trusted file (the hooks' validated site config).

A job start should not parse YAML when the config has not changed since the last one.
The derived data is kept as JSON in ``<cache dir>/<kind>-<checksum of the source path>.json``,
with the source file's identity: device, inode, size, modification and change times (in
nanoseconds), a checksum of its bytes (a rewrite within one timestamp tick, by the same
size, in place, still changes it) and the slurmkit version that derived it (a new version
may validate differently). Any difference and the entry is ignored and rewritten.

The cache is a root input like any other (:mod:`slurmkit.core.trust`): its file must be
owned by root (or the account running this process), not writable by anyone else, in
directories nobody else can write; a planted or user-owned entry is refused, logged and
counted, and the source is read again. Entries are written atomically, mode 0600, in a
0700 directory; data that JSON cannot carry exactly (tuples, non-string keys, NaN) is
never cached. Every failure to read or write the cache only means "parse the source".
"""

from __future__ import annotations

import os

from slurmkit import __version__
from slurmkit.core import files, jsontext, trust

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Optional

#: Where the hooks keep the cache: a tmpfs on systemd machines, emptied at boot.
DEFAULT_DIR = "/run/slurmkit"
#: Overrides :data:`DEFAULT_DIR` (tests, benchmarks); set by whoever starts slurmd, like
#: ``SLURMKIT_CONFIG``.
DIR_ENV = "SLURMKIT_CACHE_DIR"


def cache_dir() -> str:
    return os.environ.get(DIR_ENV) or DEFAULT_DIR


#: 2**61 - 2373, a safe prime (``(p - 1) / 2`` is prime too): the modulus of :func:`checksum`.
#: Not the Mersenne prime 2**61 - 1: modulo that, 256**61 is 1, so bytes 61 apart count
#: alike and exchanging them (or +d at one, -d at the other) would leave the checksum as it
#: was. Here 256 has order (p - 1) / 2, about 2**60: no two places in a file count alike.
_PRIME = 2305843009213691579


def checksum(data: bytes) -> int:
    """The bytes read as one little-endian number, modulo the prime :data:`_PRIME` (just under
    2**61): a change within any 7 bytes in a row always changes it (it moves the number by less
    than the prime), any other change all but surely (by chance about 2**-61); a change of
    length is the key's size. In C, at about the speed of a copy, without :mod:`zlib` (a
    shared library loaded into every job start for one CRC; docs/benchmarks.md, "Prolog fast
    path"). Not a defence against someone who can write the source: the trust rule is (only
    root's files are read)."""
    return int.from_bytes(data, "little") % _PRIME


def identity(st: os.stat_result, content: bytes) -> Dict[str, Any]:
    """The source's identity as the cache key (see the module docstring)."""
    return {
        "dev": st.st_dev,
        "ino": st.st_ino,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "checksum": checksum(content),
        "version": __version__,
    }


def entry_path(directory: str, kind: str, source: str) -> str:
    tag = format(checksum(os.path.abspath(source).encode("utf-8", "surrogateescape")), "016x")
    return os.path.join(directory, f"{kind}-{tag}.json")


def load(directory: str, kind: str, source: str, key: Dict[str, Any]) -> Optional[Any]:
    """The cached data for ``source`` when its entry is trusted and its key is ``key``; else ``None``."""
    path = entry_path(directory, kind, source)
    try:
        raw = trust.read_strict(path, max_bytes=1 << 22)
        doc = jsontext.loads(raw)
    except (OSError, trust.UntrustedFile, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("source") != os.path.abspath(source) or doc.get("key") != key:
        return None
    return doc.get("data")


def store(directory: str, kind: str, source: str, key: Dict[str, Any], data: Any) -> bool:
    """Remember ``data`` for ``source``; ``False`` (nothing written) when it cannot be kept
    exactly or the directory cannot be trusted."""
    try:
        if jsontext.loads(jsontext.dumps(data, allow_nan=False)) != data or not _plain(data):
            return False
        if trust.writable_dir(directory, 0o700) is not None:
            return False
        doc = {"source": os.path.abspath(source), "key": key, "data": data}
        files.write_json_atomic(entry_path(directory, kind, source), doc, mode=0o600)
        return True
    except (OSError, ValueError, TypeError):
        return False


def _plain(value: Any) -> bool:
    """Only dicts with string keys, lists and scalars: what JSON gives back as it was."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))


def load_derived(
    source: str, kind: str, derive: Callable[[bytes], Any], max_bytes: int = trust.MAX_BYTES
) -> Any:
    """``derive(bytes of source)``, or what it returned last time for the same file.

    ``source`` is opened under the trust rule every time (its owner, mode and directories
    may change without changing its bytes) and read whole for the key; only ``derive`` (the
    parsing, the validation) is skipped on a hit. Raises like :func:`slurmkit.core.trust.read_strict`
    (``FileNotFoundError``; :class:`~slurmkit.core.trust.UntrustedFile`, logged and counted;
    ``OSError``) and whatever ``derive`` raises."""
    try:
        fd = trust.open_trusted(source)
    except trust.UntrustedFile as exc:
        trust.reject(exc.path, exc.why)
        raise
    with os.fdopen(fd, "rb") as fh:
        content = fh.read(max_bytes + 1)
        st = os.fstat(fh.fileno())
    if len(content) > max_bytes:
        trust.reject(source, f"larger than {max_bytes} bytes")
        raise trust.UntrustedFile(source, f"larger than {max_bytes} bytes")
    key = identity(st, content)
    directory = cache_dir()
    found = load(directory, kind, source, key)
    if found is not None:
        return found
    data = derive(content)
    store(directory, kind, source, key, data)
    return data
