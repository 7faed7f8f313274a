"""A Debian root filesystem per Slurm release, for releases this machine's packages are not.

Debian's own packages carry each release (bookworm 22.05, trixie 24.11, sid 26.05), so a
newer Slurm is a ``debootstrap`` of the suite that ships it plus the cluster's packages. It
is built once into the cache (:data:`CACHE_DIR`, kept by ``devcluster down``) and reused.

The cluster runs *inside* that root: ``slurmkit devcluster up --slurm 26.05`` bind-mounts
``/proc``, ``/sys`` (with the cgroup mounts), ``/dev``, the state directory, the checkout
and this Python (its home and venv, at the same paths) into the root and runs the ordinary
bring-up there under ``chroot``, where the root's ``slurmd -V`` is the release asked for.
Every program of the cluster, the hooks slurmd runs and the Slurm clients then come from
the root; the Python is this machine's (backward compatible with the newer libc), so the
venv with torch needs no second install.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from slurmkit.devcluster import releases
from slurmkit.errors import CommandNotFound, CommandTimeout, DevclusterError, ExternalCommandError
from slurmkit.slurm import runner

CACHE_DIR = "/var/cache/slurmkit-devcluster"
CACHE_ENV = "SLURMKIT_DEVCLUSTER_CACHE"
#: Set by the outer ``up`` for the one that runs inside the root: the root's host path.
INSIDE_ENV = "SLURMKIT_DEVCLUSTER_ROOTFS"
MIRROR = "http://deb.debian.org/debian"
MARKER = ".slurmkit-rootfs.json"
#: The cluster's programs, plus what this machine's Python needs that minbase lacks
#: (libffi for ctypes and torch, libsqlite3) and iproute2 for the node namespaces.
PACKAGES = [
    "slurmd",
    "slurmctld",
    "slurm-client",
    "slurmdbd",
    "munge",
    "mariadb-server",
    "procps",
    "hostname",
    "iproute2",
    "libffi8",
    "libsqlite3-0",
]
#: Bumped when PACKAGES or the build changes, so a cached root is rebuilt.
BUILD_VERSION = 1
DEBOOTSTRAP_TIMEOUT = 900
INSTALL_TIMEOUT = 900


def _log(msg: str) -> None:
    print(f"devcluster: {msg}", file=sys.stderr, flush=True)


def _run(argv: List[str], *, timeout: float, what: str, env: Optional[Dict[str, str]] = None) -> str:
    try:
        res = runner.run(argv, timeout=timeout, env=env, check=False)
    except CommandNotFound:
        raise DevclusterError(f"{argv[0]}: not found") from None
    except CommandTimeout:
        raise DevclusterError(f"{what} timed out after {timeout:g}s") from None
    except ExternalCommandError as exc:
        raise DevclusterError(f"{what}: {exc}") from None
    if res.returncode != 0:
        raise DevclusterError(
            f"{what} failed (exit {res.returncode}): {runner.tail(res.stderr or res.stdout)}"
        )
    return res.stdout


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or CACHE_DIR)


def path_for(release: releases.Release) -> Path:
    return cache_dir() / f"rootfs-{release.name}"


def _marker(release: releases.Release) -> dict:
    return {"release": release.name, "suite": release.suite, "build": BUILD_VERSION, "packages": PACKAGES}


def is_built(release: releases.Release) -> bool:
    try:
        return json.loads((path_for(release) / MARKER).read_text()) == _marker(release)
    except (OSError, ValueError):
        return False


def ensure(release: releases.Release) -> Path:
    """The root for ``release``, built (debootstrap, then the packages) when the cache has
    none or an older build. The build goes to ``<root>.tmp`` and is renamed when complete,
    so an interrupted build is never taken for a root."""
    dest = path_for(release)
    if is_built(release):
        return dest
    if os.geteuid() != 0:
        raise DevclusterError("building a Slurm root filesystem needs root (debootstrap, chroot)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if not shutil.which("debootstrap"):
        _log("installing debootstrap (apt-get)")
        _run(
            ["apt-get", "install", "-y", "-q", "debootstrap"],
            timeout=300,
            what="apt-get install debootstrap",
            env=env,
        )
    tmp = dest.with_name(dest.name + ".tmp")
    if dest.exists():
        _remove_root(dest)
    if tmp.exists():
        _remove_root(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    _log(
        f"building a Debian {release.suite} root for Slurm {release.name} in {dest} (debootstrap, a few minutes)"
    )
    _run(
        ["debootstrap", "--variant=minbase", release.suite, str(tmp), MIRROR],
        timeout=DEBOOTSTRAP_TIMEOUT,
        what=f"debootstrap {release.suite}",
        env=env,
    )
    # The packages' maintainer scripts must not start daemons inside the root.
    policy = tmp / "usr" / "sbin" / "policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    _run(
        ["chroot", str(tmp), "apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES],
        timeout=INSTALL_TIMEOUT,
        what=f"apt-get install in the {release.suite} root",
        env=env,
    )
    _run(["chroot", str(tmp), "apt-get", "clean"], timeout=120, what="apt-get clean", env=env)
    (tmp / MARKER).write_text(json.dumps(_marker(release)) + "\n")
    tmp.rename(dest)
    _log(f"root for Slurm {release.name} built in {time.monotonic() - t0:.0f}s")
    return dest


def _remove_root(path: Path) -> None:
    """Remove a root that is not in use; refuse while anything is mounted in it (a bind of
    /dev or the state directory would be emptied with it)."""
    if mounts_under(path):
        raise DevclusterError(
            f"{path} has mounts in it (a devcluster is using it); run `slurmkit devcluster down`"
        )
    shutil.rmtree(path)


def mounts_under(path: Path) -> List[str]:
    """Mount points at or below ``path`` in this mount namespace, deepest first."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    root = str(path)
    found = set()
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            point = fields[4].encode().decode("unicode_escape")  # octal escapes (\040)
            if point == root or point.startswith(root + "/"):
                found.add(point)
    return sorted(found, key=lambda p: p.count("/"), reverse=True)


def binds(state_dir: Path, repo: Path) -> List[Path]:
    """Host paths the root needs at the same paths: the state directory, the checkout, and
    this Python's venv and home. An interpreter under /usr would be shadowed by the root's
    own /usr, so it is refused with what to do instead."""
    paths = [state_dir, repo, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()]
    home = Path(sys.base_prefix).resolve()
    if home == Path("/usr") or str(home).startswith(("/usr/", "/bin", "/lib", "/etc")):
        raise DevclusterError(
            f"this Python lives under {home}, which the Slurm root's own system replaces; "
            "make the venv from an interpreter outside /usr (pyenv, as on CI images)"
        )
    kept: List[Path] = []
    for p in sorted(set(paths), key=lambda p: len(p.parts)):
        if not any(p == k or k in p.parents for k in kept):
            kept.append(p)
    return kept


def mount(root: Path, state_dir: Path, repo: Path) -> None:
    """Bind what the cluster needs into ``root`` (idempotent). ``/proc``, ``/sys`` and
    ``/dev`` are recursive binds made slaves, so an unmount inside never reaches the host."""
    for sys_path in ("/proc", "/sys", "/dev"):
        target = root / sys_path.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        if not os.path.ismount(target):
            _run(["mount", "--rbind", sys_path, str(target)], timeout=20, what=f"binding {sys_path}")
            _run(["mount", "--make-rslave", str(target)], timeout=20, what=f"making {target} a slave")
    state_dir.mkdir(parents=True, exist_ok=True)
    for host in binds(state_dir, repo):
        target = root / str(host).lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        if not os.path.ismount(target):
            _run(["mount", "--bind", str(host), str(target)], timeout=20, what=f"binding {host}")


def unmount(root: Path) -> None:
    """Detach everything mounted in ``root``, deepest first (lazily: a mount a dying process
    still holds goes when it does)."""
    for point in mounts_under(root):
        if point != str(root):
            try:
                runner.run(["umount", "-l", point], timeout=20, check=False)
            except ExternalCommandError:
                pass
    left = [p for p in mounts_under(root) if p != str(root)]
    if left:
        raise DevclusterError(f"could not unmount {', '.join(left)}")


def chroot_argv(root: Path, argv: List[str], cwd: Optional[str] = None) -> List[str]:
    """``argv`` run inside ``root`` (from ``cwd``, a path that exists in the root)."""
    inner = ["env", f"{INSIDE_ENV}={root}", *argv]
    if cwd:
        inner = ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", cwd, *inner]
    return ["chroot", str(root), *inner]
