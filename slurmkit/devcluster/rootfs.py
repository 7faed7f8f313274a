"""A Debian root filesystem per Slurm release, for releases this machine's packages are not.

Debian's own packages carry each release (bookworm 22.05, trixie 24.11, sid 26.05), so a
newer Slurm is a ``debootstrap`` of the suite that ships it plus the cluster's packages. It
is built once into the cache (:data:`CACHE_DIR`, kept by ``devcluster down``) and reused.

The cluster runs *inside* that root: ``slurmkit devcluster up --slurm 26.05`` bind-mounts
``/proc``, ``/sys`` (with the cgroup mounts), ``/dev``, the state directory, the checkout
and this Python (its home and venv, at the same paths) into a private mount namespace whose
root is the Debian root (``pivot_root``; see :func:`_holder_script`) and runs the ordinary
bring-up there, where the root's ``slurmd -V`` is the release asked for.
Every program of the cluster, the hooks slurmd runs and the Slurm clients then come from
the root; the Python is this machine's (backward compatible with the newer libc), so the
venv with torch needs no second install.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
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
#: (libffi for ctypes and torch, libsqlite3), iproute2 for the node namespaces, and the
#: root's own ``/usr/bin/python3`` with PyYAML: the interpreter that unprivileged users and
#: their jobs run slurmkit's job side with (as on a site's nodes). This machine's Python,
#: bound in for the hooks and pytest, is of no use to them: its home may sit under a
#: directory only root may enter (``/root/.pyenv``: 0700), which made every user-run
#: ``python`` in the root fail with ``Permission denied``.
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
    "python3",
    "python3-yaml",
]
#: Bumped when PACKAGES or the build changes, so a cached root is rebuilt.
BUILD_VERSION = 2
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
    # and whatever else this Python imports from (a venv may take packages from elsewhere)
    paths += [Path(p).resolve() for p in sys.path if p and os.path.isdir(p)]
    paths = [p for p in paths if not str(p).startswith(("/usr/", "/lib", "/bin", "/etc", "/sbin"))]
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


HOLDER_PID = "rootfs-ns.pid"


def _holder_script(root: Path, state_dir: Path, repo: Path) -> str:
    """What the namespace's first process runs: the binds, ``pivot_root`` into the root,
    then it waits. ``pivot_root`` (not ``chroot``) because Slurm's job_container/namespace
    plugin moves each job into a mount namespace of its own with ``setns``, which resets a
    chroot to the namespace's root: under a chroot the jobs would run on this machine's
    files, not the release's."""
    q = shlex.quote
    r = q(str(root))
    lines = ["set -e", f"mount --bind {r} {r}"]
    for sys_path in ("/proc", "/sys", "/dev"):
        lines.append(f"mount --rbind {sys_path} {r}{sys_path}")
    for host in binds(state_dir, repo):
        target = q(f"{root}{host}")
        lines += [f"mkdir -p {target}", f"mount --bind {q(str(host))} {target}"]
    lines += [
        f"[ -e {r}/etc/hosts ] || cp /etc/hosts {r}/etc/hosts",  # debootstrap leaves none
        f"mkdir -p {r}/.oldroot",
        f"cd {r}",
        "pivot_root . .oldroot",
        "cd /",
        "umount -l /.oldroot",
        "exec sleep infinity",
    ]
    return "\n".join(lines) + "\n"


def holder(state_dir: Path) -> Optional[int]:
    """The pid holding the root's mount namespace, if it is alive and inside the root."""
    try:
        pid = int((state_dir / HOLDER_PID).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if os.path.exists(f"/proc/{pid}/root/{MARKER}") else None


def namespace_cpu() -> int:
    """The one CPU on which the root's namespace and its slurmds are started.

    Slurm's job container (job_container/tmpfs, namespace/tmpfs) binds each job's new mount
    namespace onto a file, and the kernel refuses that (``EINVAL``, the extern step logs
    "ns base mount failed: Invalid argument" and the job is requeued held) when the new
    namespace's id is not above the id of the namespace slurmstepd runs in
    (``mnt_ns_loop`` in fs/namespace.c). In this machine's initial namespace that always
    holds. In the root's namespace it did not for 12 of 20 binds (kernel 6.18, 2 CPUs;
    namespace ids are handed out in per-CPU batches, so a namespace made later on the other
    CPU can have a lower id), and for none of 60 with everything started on one CPU. So
    the namespace and slurmd are started on the same CPU, and the jobs, which inherit
    slurmd's CPU, run on that one CPU too (this machine's own release is not affected)."""
    return min(os.sched_getaffinity(0))


@contextlib.contextmanager
def on_namespace_cpu():
    """This process (and what it starts meanwhile) on :func:`namespace_cpu` only."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {namespace_cpu()})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def start(root: Path, state_dir: Path, repo: Path, timeout: float = 20) -> int:
    """A mount namespace whose root is ``root``, with ``/proc``, ``/sys`` (the cgroup
    mounts with it), ``/dev``, the state directory, the checkout and this Python bound in
    at their own paths; private, so nothing mounted in it shows on this machine and it all
    goes when its last process does. Idempotent: an alive one is reused."""
    pid = holder(state_dir)
    if pid is not None:
        return pid
    state_dir.mkdir(parents=True, exist_ok=True)
    for sub in ("proc", "sys", "dev"):
        (root / sub).mkdir(exist_ok=True)
    argv = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        _holder_script(root, state_dir, repo),
    ]
    with open(state_dir / "rootfs-ns.log", "ab") as log, on_namespace_cpu():
        try:
            proc = runner.spawn(argv, detach=True, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        except ExternalCommandError as exc:
            raise DevclusterError(f"starting the namespace for {root}: {exc}") from None
    pid = proc.pid
    (state_dir / HOLDER_PID).write_text(f"{pid}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if holder(state_dir) is not None:
            return pid
        if not os.path.exists(f"/proc/{pid}"):
            break
        time.sleep(0.1)
    raise DevclusterError(f"the namespace for {root} did not come up; read {state_dir / 'rootfs-ns.log'}")


def stop(state_dir: Path, pid: Optional[int] = None) -> None:
    """End the namespace's holder (the daemons in it are stopped first by ``down``): the one
    named in the state directory, or ``pid`` when it still holds a Slurm root."""
    if pid is None or not os.path.exists(f"/proc/{pid}/root/{MARKER}"):
        pid = holder(state_dir)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    (state_dir / HOLDER_PID).unlink(missing_ok=True)


def ns_argv(state_dir: Path, root: Path, argv: List[str], cwd: Optional[str] = None) -> List[str]:
    """``argv`` inside the root's namespace (from ``cwd``, a path that exists there)."""
    pid = holder(state_dir)
    if pid is None:
        raise DevclusterError(f"no namespace holds {root}; run `slurmkit devcluster up` again")
    inner = ["env", f"{INSIDE_ENV}={root}", *argv]
    if cwd:
        # not nsenter --wd: it opens the directory before entering, outside the root
        inner = ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", cwd, *inner]
    return ["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--", *inner]
