"""Guards for the whole test suite (issue 30), imported by tests/conftest.py.

* ``SLURMKIT_UPDATE_GOLDENS`` rewrites golden files instead of comparing them, so with it
  every golden test passes: it is refused when ``CI`` is set.
* No test may write to the system's own slurmkit paths (the defaults of ``paths`` in
  slurmkit/config.py, which root-run hooks fall back to on a config error, and the default
  config file). Each path is fingerprinted before and after every test (existence, and
  the size and modification time of it and of the entries directly in it); a test that
  changed one fails (in CI, or with ``SLURMKIT_STRICT_PATHS=1``; elsewhere it warns, since
  on a shared machine another test run may be the writer). Tests use their temporary
  directories (``tmp_path``) instead.
* A test whose behaviour under test *is* writing to those defaults (a hook that falls back to
  them on a config error, in a new process) runs the hook through
  :func:`private_system_paths`: in a mount namespace of its own, where ``/var`` and ``/etc``
  are copy-on-write overlays whose writes land in the test's temporary directory.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

#: What a root-run hook writes when it falls back to its defaults (slurmkit.config.PATHS_SCHEMA,
#: slurmkit.config.DEFAULT_PATH): none of it is a test's to touch.
SYSTEM_PATHS = (
    "/var/log/slurmkit",
    "/var/lib/slurmkit",
    "/var/lib/prometheus/node-exporter",
    "/etc/slurmkit",
)

Fingerprint = Optional[Tuple[int, int, Dict[str, Tuple[int, int]]]]


def system_paths() -> Tuple[str, ...]:
    """:data:`SYSTEM_PATHS` plus whatever slurmkit's own defaults say today (so a changed
    default is watched without editing this list)."""
    paths = set(SYSTEM_PATHS)
    try:
        from slurmkit.config import DEFAULT_PATH, PATHS_SCHEMA
        from slurmkit.core.schema import defaults

        for key, value in defaults(PATHS_SCHEMA).items():
            if key.endswith("_dir") and isinstance(value, str) and value.startswith("/"):
                paths.add(value)
        paths.add(os.path.dirname(DEFAULT_PATH))
    except Exception:  # the guard must not break collection; the fixed list still applies
        pass
    return tuple(sorted(paths))


def fingerprint(path: str) -> Fingerprint:
    """``None`` when ``path`` does not exist; else its size, mtime and those of its entries."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    entries: Dict[str, Tuple[int, int]] = {}
    if os.path.isdir(path) and not os.path.islink(path):
        try:
            with os.scandir(path) as it:
                for entry in it:
                    try:
                        est = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    entries[entry.name] = (est.st_size, est.st_mtime_ns)
        except PermissionError:
            pass
    return st.st_size, st.st_mtime_ns, entries


def changed(before: Dict[str, Fingerprint], after: Dict[str, Fingerprint]) -> Dict[str, str]:
    """``{path: what changed}`` between two snapshots of the same paths."""
    out = {}
    for path, old in before.items():
        new = after.get(path)
        if old == new:
            continue
        if old is None:
            out[path] = "created"
        elif new is None:
            out[path] = "removed"
        else:
            names = sorted(n for n in set(old[2]) | set(new[2]) if old[2].get(n) != new[2].get(n)) or [
                "(the directory itself)"
            ]
            out[path] = "changed: " + ", ".join(names[:10])
    return out


_WATCHED = system_paths()


@pytest.fixture(autouse=True)
def no_writes_to_system_paths(request):
    """Fail any test that writes to the system's slurmkit paths (see the module docstring)."""
    before = {p: fingerprint(p) for p in _WATCHED}
    yield
    after = {p: fingerprint(p) for p in _WATCHED}
    diff = changed(before, after)
    if diff:
        message = (
            f"{request.node.nodeid} wrote outside its temporary directories: "
            + "; ".join(f"{p} {what}" for p, what in sorted(diff.items()))
            + " (give the code under test tmp_path paths, or run it through private_system_paths)"
        )
        if strict():
            pytest.fail(message, pytrace=False)
        warnings.warn(
            pytest.PytestWarning(message + "; or another test run on this machine did"), stacklevel=2
        )


def strict() -> bool:
    """Fail (in CI, alone on its machine, or with SLURMKIT_STRICT_PATHS=1) rather than warn:
    on a shared development machine another run's hook may have written meanwhile."""
    return bool(os.environ.get("CI") or os.environ.get("SLURMKIT_STRICT_PATHS"))


def pytest_configure(config):
    if os.environ.get("CI") and os.environ.get("SLURMKIT_UPDATE_GOLDENS"):
        raise pytest.UsageError(
            "SLURMKIT_UPDATE_GOLDENS is set in CI: it rewrites the golden files instead of "
            "comparing them, so every golden test would pass. Unset it (regenerate goldens locally)."
        )


#: Exit status of :func:`private_system_paths`' wrapper when it could not make the paths private
#: (the command itself was then not run).
PRIVATE_SETUP_FAILED = 97


def _tops() -> List[str]:
    """The top-level directories the system's paths live under (``/etc``, ``/var``)."""
    return sorted({"/" + p.strip("/").split("/")[0] for p in system_paths()})


def private_system_paths(argv: Sequence[str], scratch: Path) -> List[str]:
    """``argv`` wrapped so that what it writes under the system's slurmkit paths stays out of
    the system: as root, it runs in a mount namespace of its own (``unshare --mount``) where
    each top directory of those paths (``/var``, ``/etc``) is an overlay with the real one
    below and ``scratch/upper/<top>`` above, so the command sees the real tree and every
    write lands in ``scratch`` (read it back with :func:`private_view`). Unprivileged, ``argv``
    is returned as it is: those paths are root's, and such a run cannot write them."""
    if os.geteuid() != 0:
        return list(argv)
    scratch = Path(scratch).resolve()
    lines = ["set -u"]
    for top in _tops():
        if str(scratch) == top or str(scratch).startswith(top + "/"):
            raise ValueError(f"{scratch} is under {top}: an overlay's upper layer cannot lie in its lower")
        upper, work = scratch / "upper" / top.strip("/"), scratch / "work" / top.strip("/")
        upper.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        lines.append(
            f"mount -t overlay overlay -o lowerdir={top},upperdir={upper},workdir={work} {top} "
            f'|| {{ echo "private_system_paths: cannot overlay {top}" >&2; exit {PRIVATE_SETUP_FAILED}; }}'
        )
    lines.append('exec "$@"')
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        "\n".join(lines),
        "sh",
        *argv,
    ]


def private_view(scratch: Path, path: str) -> Path:
    """Where a write to the system's ``path`` by a :func:`private_system_paths` run landed."""
    return Path(scratch).resolve() / "upper" / path.strip("/")
