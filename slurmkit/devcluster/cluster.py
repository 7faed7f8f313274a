"""Bring a local Slurm cluster up and down, idempotently, under one state directory.

Process control only: installing packages, making directories and device files, writing
the configuration (its text comes from :mod:`.render`, pure functions of the
:class:`~.render.ClusterSpec`), namespaces, and starting and stopping the daemons.

Order matters and follows what was verified on Debian 12 / Slurm 22.05
(``docs/devcluster.md``): munge -> bridge and namespaces (netns mode) -> MariaDB ->
slurmdbd -> cluster registration -> slurmctld -> slurmd(s) -> accounts -> wait idle.

Two multi-node modes:

* ``netns`` (default): one network + UTS namespace per node on a bridge, so each node
  has its own hostname (``node1``) and address (``10.77.0.11``). Needed for real
  multi-node torchrun, where the rendezvous must not be localhost.
* ``ports``: several slurmd on this host, one port each; no network privileges, but
  every node shares the host's name and address.

Pitfalls handled here (all observed): count-only GPU gres is dropped in 22.05, so fake
GPUs are character device files (NVIDIA's numbers, 195:N); ``ip netns exec`` hides the
cgroup mounts, so slurmd starts through ``nsenter --net``; ``AuthInfo=cred_expire=10`` makes a requeued
job restartable after 11 s instead of 121 s; slurmdbd.conf must be mode 600 and owned
by the slurm user; a fatal start leaves a stale pid file, so liveness is ``kill -0``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import shutil
import signal
import socket
import stat
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Dict, List, Optional

from slurmkit.core.files import write_bytes_atomic, write_json_atomic
from slurmkit.devcluster import releases, render, rootfs
from slurmkit.devcluster.render import BRIDGE, BRIDGE_IP, DEFAULT_STATE_DIR, PORTS, ClusterSpec
from slurmkit.errors import CommandNotFound, CommandTimeout, DevclusterError, ExternalCommandError
from slurmkit.slurm import runner

STATE_ENV = "SLURMKIT_DEVCLUSTER_DIR"
REPO_ROOT = Path(__file__).resolve().parents[2]
#: What job_container/tmpfs (namespace/tmpfs) replaces with a private directory in every job.
JOB_PRIVATE_DIRS = ("/tmp", "/dev/shm")


def hidden_checkout_problem(repo: Path) -> Optional[str]:
    """Why jobs could not see the checkout at ``repo`` (``None``: they can).

    Every devcluster job has its own ``/tmp`` and ``/dev/shm`` (the production
    configuration's ``job_container/tmpfs``), so a checkout there, and the venv in it, do
    not exist inside a job: a job that runs the checkout's Python exits 127.
    """
    path = str(Path(repo).resolve())
    for private in JOB_PRIVATE_DIRS:
        if path == private or path.startswith(private + "/"):
            return (
                f"this checkout is under {private} ({path}), which every devcluster job sees as an "
                f"empty private directory of its own (job_container/tmpfs): jobs could not run its "
                f"hooks or venv. Clone or copy it elsewhere (e.g. under /root or /srv) and run it from there"
            )
    return None


PACKAGES = [
    "slurm-wlm",
    "slurmctld",
    "slurmd",
    "slurm-client",
    "slurmdbd",
    "munge",
    "mariadb-server",
    "iproute2",
    "util-linux",
    "procps",
]
REQUIRED_BINARIES = {
    "/usr/sbin/slurmctld": "slurmctld",
    "/usr/sbin/slurmd": "slurmd",
    "/usr/sbin/slurmdbd": "slurmdbd",
    "/usr/bin/sacctmgr": "slurm-client",
    "/usr/bin/sbatch": "slurm-client",
    "/usr/sbin/munged": "munge",
    "/usr/sbin/mariadbd": "mariadb-server",
    "/usr/bin/mariadb-install-db": "mariadb-server",
}

#: NVIDIA's character-device major: the fake GPUs' numbers (195:0..N-1).
NVIDIA_MAJOR = 195


def _log(msg: str) -> None:
    print(f"devcluster: {msg}", file=sys.stderr, flush=True)


def _run(
    argv: List[str],
    *,
    timeout: float = 60,
    check: bool = True,
    env: Optional[dict] = None,
    input: Optional[str] = None,
    what: Optional[str] = None,
    log: Optional[str] = None,
) -> runner.Result:
    """Run a setup command through slurmkit's runner; failures name the command and the log
    to read, as a :class:`DevclusterError` (exit code 4)."""
    try:
        res = runner.run(argv, timeout=timeout, env=env, input=input, check=False)
    except CommandNotFound:
        raise DevclusterError(f"{argv[0]}: not found") from None
    except CommandTimeout:
        raise DevclusterError(
            f"{what or shlex.join(argv)} timed out after {timeout:g}s" + (f"; read {log}" if log else "")
        ) from None
    except ExternalCommandError as exc:
        raise DevclusterError(f"{what or shlex.join(argv)}: {exc}") from None
    if check and res.returncode != 0:
        tail = runner.tail(res.stderr or res.stdout)
        raise DevclusterError(
            f"{what or shlex.join(argv)} failed (exit {res.returncode}): {tail}"
            + (f"; read {log}" if log else "")
        )
    return res


def _probe(
    argv: List[str], *, timeout: float, env: Optional[dict] = None, input: Optional[str] = None
) -> Optional[runner.Result]:
    """One try of a readiness probe through the runner; ``None`` when it timed out.

    A probe that hangs means "not ready yet" (the caller's wait loop holds the overall
    deadline), not an error; a missing or unrunnable program is one."""
    try:
        return runner.run(argv, timeout=timeout, env=env, input=input, check=False)
    except CommandTimeout:
        return None
    except ExternalCommandError as exc:
        raise DevclusterError(str(exc)) from None


def _succeeds(
    argv: List[str], *, timeout: float, env: Optional[dict] = None, input: Optional[str] = None
) -> bool:
    """Did ``argv`` exit 0 within ``timeout`` (see :func:`_probe`)?"""
    res = _probe(argv, timeout=timeout, env=env, input=input)
    return res is not None and res.returncode == 0


def _pid_alive(pidfile: Path) -> Optional[int]:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    # A zombie or a recycled pid is not our daemon.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return None
    except OSError:
        return None
    return pid


def _wait(
    cond: Callable[[], bool], timeout: float, what: str, log: Optional[str] = None, interval: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(interval)
        interval = min(interval * 1.5, 1.0)
    raise DevclusterError(
        f"timed out after {timeout:g}s waiting for {what}" + (f"; read {log}" if log else "")
    )


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class DevCluster:
    """One local cluster, identified by its state directory."""

    def __init__(self, state_dir: Optional[str] = None):
        self.root = Path(state_dir or os.environ.get(STATE_ENV) or DEFAULT_STATE_DIR).resolve()

    # ------------------------------------------------------------------ paths
    @property
    def spec_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def slurm_conf(self) -> Path:
        return render.slurm_conf_path(self.root)

    @property
    def slurmkit_config(self) -> Path:
        return render.slurmkit_config_path(self.root)

    @property
    def munge_socket(self) -> Path:
        return render.munge_socket(self.root)

    @property
    def mysql_socket(self) -> Path:
        return self.root / "mysql" / "mysqld.sock"

    def log(self, name: str) -> str:
        return str(self.root / "log" / name)

    def load_spec(self) -> Optional[ClusterSpec]:
        try:
            data = json.loads(self.spec_file.read_text())
        except (OSError, ValueError):
            return None
        known = set(ClusterSpec.__dataclass_fields__)
        return ClusterSpec(**{k: v for k, v in data.items() if k in known})

    def save_spec(self, spec: ClusterSpec) -> None:
        write_json_atomic(str(self.spec_file), asdict(spec), indent=2)

    def env(self) -> Dict[str, str]:
        """Environment for Slurm clients talking to this cluster."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.slurm_conf)
        env["SLURMKIT_CONFIG"] = str(self.slurmkit_config)
        env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), *render.SYSTEM_BIN_DIRS])
        return env

    def daemons(self, spec: ClusterSpec) -> Dict[str, Path]:
        """Daemon name -> pid file."""
        d = {
            "munged": self.root / "munge" / "munged.pid",
            "mariadbd": self.root / "mysql" / "mysqld.pid",
            "slurmdbd": self.root / "run" / "slurmdbd.pid",
            "slurmctld": self.root / "run" / "slurmctld.pid",
        }
        for n in spec.node_names:
            d[f"slurmd:{n}"] = self.root / "run" / f"slurmd-{n}.pid"
        return d

    # ------------------------------------------------------------------ releases
    @staticmethod
    def host_release() -> str:
        """The Slurm release of this machine's packages (``slurmd -V``), else the one its
        Debian ships (``/etc/debian_version``)."""
        if os.path.exists("/usr/sbin/slurmd"):
            res = _run(["/usr/sbin/slurmd", "-V"], timeout=20, check=False)
            found = releases.parse_version(res.stdout + res.stderr)
            if found:
                return found
        found = releases.debian_release()
        if found is None:
            raise DevclusterError(
                "cannot tell this machine's Slurm release (no /usr/sbin/slurmd, not Debian 12 or 13); "
                f"pass --slurm {'|'.join(releases.RELEASES)}"
            )
        return found

    def release(self, spec: ClusterSpec) -> releases.Release:
        """What differs on the release ``spec`` runs (resolved by ``up``; else the host's)."""
        name = spec.release or (self.host_release() if spec.slurm == "host" else spec.slurm)
        try:
            return releases.get(name)
        except KeyError as exc:
            raise DevclusterError(str(exc.args[0])) from None

    def root_release(self, spec: ClusterSpec) -> Optional[releases.Release]:
        """The release ``spec`` needs from a Debian root, ``None`` when this machine's own
        packages are that release (including inside such a root)."""
        if spec.slurm == "host":
            return None
        want = self.release(spec)
        have = self.host_release() if os.path.exists("/usr/sbin/slurmd") else None
        if have == want.name:
            return None
        if os.environ.get(rootfs.INSIDE_ENV):
            raise DevclusterError(f"inside the root for Slurm {want.name} slurmd is {have}: rebuild the root")
        return want

    def _in_root(self, spec: ClusterSpec, verb: str, timeout: float, check: bool = True) -> runner.Result:
        """Run ``python -m slurmkit.devcluster.inroot <verb>`` inside the cluster's root."""
        assert spec.rootfs
        argv = rootfs.ns_argv(
            self.root,
            Path(spec.rootfs),
            [
                sys.executable,
                "-m",
                "slurmkit.devcluster.inroot",
                verb,
                str(self.root),
                json.dumps(asdict(spec)),
            ],
        )
        return _run(argv, timeout=timeout, check=check, what=f"devcluster {verb} inside {spec.rootfs}")

    def run_argv(self, argv: List[str], user: Optional[str] = None) -> List[str]:
        """``argv`` as a client of this cluster: inside its root when it has one, as ``user``
        when given, with SLURM_CONF and SLURMKIT_CONFIG set."""
        spec = self.load_spec()
        env = [f"SLURM_CONF={self.slurm_conf}", f"SLURMKIT_CONFIG={self.slurmkit_config}"]
        path = f"PATH={os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        cmd = ["env", *env, path, *argv]
        if user:
            cmd = ["runuser", "-u", user, "--", *cmd]
        if spec is not None and spec.rootfs:
            return rootfs.ns_argv(self.root, Path(spec.rootfs), cmd, cwd=os.getcwd())
        return cmd

    def in_root_argv(self, slurm: str, argv: List[str]) -> "tuple[List[str], Callable[[], None]]":
        """``argv`` inside the root of release ``slurm`` (built if needed, binds made), and
        what undoes the binds afterwards unless a cluster of this state directory uses them.
        On this machine's own release: ``argv`` as it is."""
        spec = ClusterSpec(slurm=slurm)
        release = self.root_release(spec)
        if release is None:
            return list(argv), lambda: None
        root = rootfs.ensure(release)
        started = rootfs.holder(self.root) is None
        pid = rootfs.start(root, self.root, REPO_ROOT)

        def cleanup() -> None:
            current = self.load_spec()
            if started and (current is None or not self.running(current)):
                # by the pid started here: a `down` inside removed the state directory's pid file
                rootfs.stop(self.root, pid)
                if current is None:
                    shutil.rmtree(self.root, ignore_errors=True)

        return rootfs.ns_argv(self.root, root, list(argv), cwd=os.getcwd()), cleanup

    # ------------------------------------------------------------------ checks
    @staticmethod
    def missing_packages() -> List[str]:
        return sorted({pkg for path, pkg in REQUIRED_BINARIES.items() if not os.path.exists(path)})

    def ensure_packages(self, install: bool = True) -> None:
        missing = self.missing_packages()
        if not missing:
            return
        cmd = "apt-get install -y --no-install-recommends " + " ".join(PACKAGES)
        if not install or os.geteuid() != 0:
            raise DevclusterError(
                f"missing packages {', '.join(missing)}; as root run: apt-get update && {cmd}"
            )
        _log(f"installing {' '.join(PACKAGES)} (apt-get)")
        policy = Path("/usr/sbin/policy-rc.d")
        made_policy = not policy.exists()
        if made_policy:  # keep the packages' maintainer scripts from starting system daemons
            policy.write_text("#!/bin/sh\nexit 101\n")
            policy.chmod(0o755)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        try:
            _run(["apt-get", "update", "-q"], timeout=300, env=env, what="apt-get update")
            _run(
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES],
                timeout=900,
                env=env,
                what="apt-get install",
            )
        finally:
            if made_policy:
                policy.unlink(missing_ok=True)
        still = self.missing_packages()
        if still:
            raise DevclusterError(f"packages still missing after install: {', '.join(still)}")

    def _check_system(self, spec: ClusterSpec) -> None:
        if os.geteuid() != 0:
            raise DevclusterError(
                "devcluster needs root (it starts munged, MariaDB and Slurm daemons); run it with sudo"
            )
        if spec.mode not in ("netns", "ports"):
            raise DevclusterError(f"unknown mode {spec.mode!r}; valid modes: netns, ports")
        if spec.nodes < 1 or spec.nodes > 64:
            raise DevclusterError(f"--nodes must be between 1 and 64, got {spec.nodes}")
        for tool in ("nsenter", "unshare", "ip", "runuser") if spec.mode == "netns" else ("runuser",):
            if not shutil.which(tool):
                raise DevclusterError(f"{tool}: not found; install util-linux and iproute2")
        host = "127.0.0.1"
        for name, port in PORTS.items():
            if _port_open(host, port):
                raise DevclusterError(
                    f"port {port} (for {name}) is already in use on {host}; "
                    f"stop what holds it (ss -ltnp 'sport = :{port}')"
                )

    # ------------------------------------------------------------------ config files
    def machine(self, spec: ClusterSpec) -> render.Machine:
        """What the configuration depends on besides ``spec`` (:mod:`.render`): the state
        directory, this machine's short host name and the release ``spec`` runs."""
        return render.Machine(
            root=self.root, hostname=socket.gethostname().split(".")[0], release=self.release(spec)
        )

    def _write(self, rel: str, text: str, mode: int = 0o644, owner: Optional[str] = None) -> Path:
        """Write ``text`` to ``rel`` under the state directory atomically, with ``mode`` and
        ``owner`` set before it appears (slurmdbd.conf holds a password)."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        ids = None
        if owner:
            pw = pwd.getpwnam(owner)
            ids = (pw.pw_uid, pw.pw_gid)
        write_bytes_atomic(str(path), text.encode("utf-8"), mode=mode, owner=ids)
        return path

    def fake_gpu(self, node: str, index: int) -> Path:
        """The device file of ``node``'s fake GPU ``index`` (character device 195:index)."""
        return render.fake_gpu_dir(self.root, node) / f"nvidia{index}"

    # ------------------------------------------------------------------ bring-up steps
    def _prepare_dirs(self, spec: ClusterSpec) -> None:
        slurm = pwd.getpwnam("slurm")
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        for sub in (
            "etc",
            "run",
            "log",
            "spool/ctld",
            "hooks",
            "gpu",
            "fakegpu",
            "jobcontainer",
            "slurmkit/state",
            "slurmkit/metrics",
            "slurmkit/log",
        ):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for n in spec.node_names:
            (self.root / "spool" / "slurmd" / n).mkdir(parents=True, exist_ok=True)
            render.job_container_base(self.root, n).mkdir(parents=True, exist_ok=True)
        for sub in ("run", "log", "spool/ctld"):
            os.chown(self.root / sub, slurm.pw_uid, slurm.pw_gid)
        # Production modes (docs/security.md): root's state 0700, logs and metrics 0755, the
        # verdict store and the checkpoint root root-owned 0755 (per-user checkpoint
        # directories, 0700, are made in it for the cluster's users). Only scratch/ is 1777,
        # a user scratch area like /tmp that slurmkit never reads as root.
        (self.root / "slurmkit" / "state").chmod(0o700)
        for sub in ("slurmkit", "slurmkit/metrics", "slurmkit/log"):
            (self.root / sub).chmod(0o755)
        shared = self.root / "shared"
        shared.mkdir(exist_ok=True)
        shared.chmod(0o755)
        for sub in ("verdicts", "checkpoints"):
            (shared / sub).mkdir(exist_ok=True)
            (shared / sub).chmod(0o755)
        (shared / "scratch").mkdir(exist_ok=True)
        (shared / "scratch").chmod(0o1777)
        for n in spec.node_names:
            render.fake_gpu_dir(self.root, n).mkdir(parents=True, exist_ok=True)
            for i in range(spec.gpus_per_node):
                self._make_fake_gpu(self.fake_gpu(n, i), i)

    @staticmethod
    def _make_fake_gpu(dev: Path, index: int) -> None:
        """A character device with NVIDIA's major (195) and minor ``index``, mode 0666.

        The device cgroup (``ConstrainDevices=yes``) allows or denies a job by these numbers:
        opening a GPU the job was given reaches the (absent) driver and fails with ENXIO; one
        it was not given fails with EPERM. This machine has no NVIDIA driver, so nothing can
        reach hardware through them."""
        want = os.makedev(NVIDIA_MAJOR, index)
        try:
            st = os.lstat(dev)
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == want:
                dev.chmod(0o666)
                return
            dev.unlink()
        except FileNotFoundError:
            pass
        os.mknod(dev, 0o666 | stat.S_IFCHR, want)
        dev.chmod(0o666)

    def _write_configs(self, spec: ClusterSpec) -> None:
        """Render every file (:func:`render.config_files`) and write it; the database
        password is made once and kept across bring-ups."""
        targets = render.hook_targets(spec, REPO_ROOT)
        for name, target in targets.items():
            if target and not os.path.exists(target):
                raise DevclusterError(f"hook program for {name} not found: {target}")
        pw_file = self.root / "etc" / ".dbpass"
        if not pw_file.exists():
            self._write("etc/.dbpass", os.urandom(12).hex(), mode=0o600)
        password = pw_file.read_text().strip()
        for f in render.config_files(spec, self.machine(spec), password, targets):
            self._write(f.rel, f.text, mode=f.mode, owner=f.owner)
        fixture = REPO_ROOT / "etc" / "gpu-fixtures" / f"healthy-{spec.gpu_type}x{spec.gpus_per_node}.yaml"
        for n in spec.node_names:
            target = self.root / "gpu" / f"{n}.yaml"
            if fixture.exists() and not target.exists():
                shutil.copyfile(fixture, target)

    def _start_munge(self) -> None:
        mdir = self.root / "munge"
        pidfile = mdir / "munged.pid"
        if _pid_alive(pidfile):
            return
        munge = pwd.getpwnam("munge")
        mdir.mkdir(exist_ok=True)
        os.chown(mdir, munge.pw_uid, munge.pw_gid)
        mdir.chmod(0o755)
        key = mdir / "munge.key"
        if not key.exists():
            old = os.umask(0o077)
            try:
                key.write_bytes(os.urandom(1024))
            finally:
                os.umask(old)
        os.chown(key, munge.pw_uid, munge.pw_gid)
        key.chmod(0o400)
        log = mdir / "munged.log"
        _run(
            [
                "runuser",
                "-u",
                "munge",
                "--",
                "/usr/sbin/munged",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={pidfile}",
                f"--log-file={log}",
                f"--seed-file={mdir / 'munged.seed'}",
            ],
            timeout=20,
            what="munged",
            log=str(log),
        )

        def ready() -> bool:
            enc = _probe(["munge", "-n", "-S", str(self.munge_socket)], timeout=5)
            if enc is None or enc.returncode != 0:
                return False
            return _succeeds(["unmunge", "-S", str(self.munge_socket)], input=enc.stdout, timeout=5)

        _wait(ready, 15, "munged", str(log))

    def _setup_network(self, spec: ClusterSpec) -> None:
        if spec.mode != "netns":
            return
        if not _succeeds(["ip", "-o", "link", "show", BRIDGE], timeout=20):
            _run(["ip", "link", "add", BRIDGE, "type", "bridge"], what="creating the bridge")
            _run(["ip", "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE], what="addressing the bridge")
        _run(["ip", "link", "set", BRIDGE, "up"])
        existing = _run(["ip", "netns", "list"], timeout=20).stdout
        for i, n in enumerate(spec.node_names, start=1):
            ns = f"sk-{n}"
            if ns not in existing.split():
                # A veth left over from an interrupted run would block the new pair.
                _run(["ip", "link", "del", f"skv{i}"], timeout=20, check=False)
                _run(["ip", "netns", "add", ns], what=f"creating namespace {ns}")
                _run(
                    ["ip", "link", "add", f"skv{i}", "type", "veth", "peer", "name", "eth0", "netns", ns],
                    what=f"creating the veth pair for {n}",
                )
                _run(["ip", "link", "set", f"skv{i}", "master", BRIDGE, "up"])
                _run(["ip", "-n", ns, "addr", "add", f"{spec.node_ip(i)}/24", "dev", "eth0"])
                _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
                _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        self._write_hosts(spec)

    @staticmethod
    def _write_hosts(spec: Optional[ClusterSpec]) -> None:
        """Put ``spec``'s nodes in /etc/hosts (``None``: take them out)."""
        hosts = Path("/etc/hosts")
        # /etc/hosts may be a bind mount: rewrite in place rather than rename over it.
        hosts.write_text(render.hosts_file(hosts.read_text(), spec))

    def _start_mariadb(self) -> None:
        mdir = self.root / "mysql"
        data = mdir / "data"
        pidfile = mdir / "mysqld.pid"
        log = mdir / "mysqld.log"
        mysql = pwd.getpwnam("mysql")
        mdir.mkdir(exist_ok=True)
        os.chown(mdir, mysql.pw_uid, mysql.pw_gid)
        if _pid_alive(pidfile) and self.mysql_socket.exists():
            return
        if not (data / "mysql").exists():
            _run(
                [
                    "mariadb-install-db",
                    "--no-defaults",
                    "--user=mysql",
                    f"--datadir={data}",
                    "--auth-root-authentication-method=socket",
                    "--skip-test-db",
                ],
                timeout=180,
                what="mariadb-install-db",
                log=str(log),
            )
        args = [
            "/usr/sbin/mariadbd",
            "--no-defaults",
            "--user=mysql",
            f"--datadir={data}",
            f"--socket={self.mysql_socket}",
            f"--pid-file={pidfile}",
            f"--port={PORTS['mariadb']}",
            "--bind-address=127.0.0.1",
            f"--log-error={log}",
            "--innodb-buffer-pool-size=256M",
            "--innodb-log-file-size=64M",
            "--innodb-lock-wait-timeout=900",
            "--max-allowed-packet=16M",
            "--skip-name-resolve",
        ]
        with open(os.devnull, "rb") as devnull, open(mdir / "mysqld.out", "ab") as out:
            # mariadbd does not daemonise: detach it into its own session.
            try:
                runner.spawn(args, detach=True, stdin=devnull, stdout=out, stderr=out)
            except ExternalCommandError as exc:
                raise DevclusterError(f"mariadbd: {exc}") from None

        def ready() -> bool:
            return _succeeds(
                ["mariadb-admin", f"--socket={self.mysql_socket}", "-u", "root", "ping"], timeout=5
            )

        _wait(ready, 60, "MariaDB", str(log))
        password = (self.root / "etc" / ".dbpass").read_text().strip()
        _run(
            [
                "mariadb",
                f"--socket={self.mysql_socket}",
                "-u",
                "root",
                "-e",
                render.accounting_db_sql(password),
            ],
            timeout=30,
            what="creating the accounting database",
            log=str(log),
        )
        # MariaDB 11.8 (the 24.11 and 26.05 roots: Debian 13, sid) turns innodb_snapshot_isolation on;
        # slurmdbd 26.05 then warns it "will cause slurmdbd to fatal when a write conflicts with a
        # concurrent transaction. Set innodb_snapshot_isolation=OFF" (seen: slurmdbd gone
        # mid-suite, sacct "Connection refused"). Older MariaDB has no such variable.
        _succeeds(
            [
                "mariadb",
                f"--socket={self.mysql_socket}",
                "-u",
                "root",
                "-e",
                "SET GLOBAL innodb_snapshot_isolation=OFF",
            ],
            timeout=10,
        )

    def _start_slurmdbd(self, env: Dict[str, str]) -> None:
        pidfile = self.root / "run" / "slurmdbd.pid"
        log = self.log("slurmdbd.log")
        if not _pid_alive(pidfile):
            denv = dict(env, SLURM_CONF=str(self.slurm_conf))
            _run(["/usr/sbin/slurmdbd"], env=denv, timeout=30, what="slurmdbd", log=log)
        _wait(lambda: _port_open("127.0.0.1", PORTS["slurmdbd"]), 30, "slurmdbd to listen", log)
        # Registering the cluster needs a live slurmdbd; sacctmgr answers rc 1 when it exists.
        res = _run(
            ["sacctmgr", "-i", "-n", "-P", "show", "cluster", "format=cluster"],
            env=env,
            timeout=30,
            check=False,
        )
        if "dev" not in res.stdout.split():
            _run(
                ["sacctmgr", "-i", "add", "cluster", "dev"],
                env=env,
                timeout=30,
                what="sacctmgr add cluster",
                log=log,
            )

    def _start_slurmctld(self, env: Dict[str, str]) -> None:
        pidfile = self.root / "run" / "slurmctld.pid"
        log = self.log("slurmctld.log")
        if not _pid_alive(pidfile):
            _run(["/usr/sbin/slurmctld"], env=env, timeout=30, what="slurmctld", log=log)

        def ready() -> bool:
            return _succeeds(["scontrol", "ping"], env=env, timeout=10)

        _wait(ready, 30, "slurmctld (scontrol ping)", log)

    def _private_base_paths(self, spec: ClusterSpec) -> None:
        """Each node's job_container BasePath a private mount of its own: the plugin makes
        every job's namespace under it (added for "ns base mount failed: Invalid argument",
        whose cause was :func:`rootfs.namespace_cpu`'s; kept on every release). ``down``
        unmounts them with everything else under the state directory."""
        for n in spec.node_names:
            base = render.job_container_base(self.root, n)
            if not os.path.ismount(base):
                _run(["mount", "--bind", str(base), str(base)], timeout=20, what=f"binding {base}")
            _run(["mount", "--make-private", str(base)], timeout=20, what=f"making {base} private")

    def _start_slurmds(self, spec: ClusterSpec, env: Dict[str, str]) -> None:
        self._private_base_paths(spec)
        # inside a release's root: on the CPU its namespace was made on (rootfs.namespace_cpu)
        pin = rootfs.on_namespace_cpu() if os.environ.get(rootfs.INSIDE_ENV) else contextlib.nullcontext()
        with pin:
            self._spawn_slurmds(spec, env)
        for n in spec.node_names:
            _wait(
                lambda n=n: _pid_alive(self.root / "run" / f"slurmd-{n}.pid") is not None,
                20,
                f"slurmd {n} to write its pid file",
                self.log(f"slurmd-{n}.log"),
            )

    def _spawn_slurmds(self, spec: ClusterSpec, env: Dict[str, str]) -> None:
        for n in spec.node_names:
            pidfile = self.root / "run" / f"slurmd-{n}.pid"
            if _pid_alive(pidfile):
                continue
            log = self.log(f"slurmd-{n}.log")
            if spec.mode == "netns":
                argv = [
                    "nsenter",
                    f"--net=/run/netns/sk-{n}",
                    "unshare",
                    "--uts",
                    "--",
                    "sh",
                    "-c",
                    f"hostname {n} && exec /usr/sbin/slurmd -N {n}",
                ]
            else:
                argv = ["/usr/sbin/slurmd", "-N", n]
            _run(argv, env=env, timeout=30, what=f"slurmd for {n}", log=log)

    def _accounts(self, spec: ClusterSpec, env: Dict[str, str]) -> List[str]:
        created = []
        for user in spec.users:
            try:
                pwd.getpwnam(user)
            except KeyError:
                _run(["useradd", "-m", "-s", "/bin/bash", user], what=f"useradd {user}")
                created.append(user)
        accounts = sorted({a for accts in spec.users.values() for a in accts})
        have = _run(["sacctmgr", "-n", "-P", "show", "account", "format=account"], env=env).stdout.split()
        for a in accounts:
            if a not in have:
                _run(["sacctmgr", "-i", "add", "account", a, f"Description={a}", "Organization=dev"], env=env)
        assoc = _run(["sacctmgr", "-n", "-P", "show", "assoc", "format=user,account"], env=env).stdout.split()
        for user, accts in spec.users.items():
            for a in accts:
                if f"{user}|{a}" not in assoc:
                    _run(["sacctmgr", "-i", "add", "user", user, f"Account={a}"], env=env)
        return created

    def _checkpoint_dirs(self, spec: ClusterSpec) -> None:
        """``shared/checkpoints/<user>``, owned by the user, 0700: the checkpoint root itself
        is root's, so no user can make or take over another user's directory."""
        for user in spec.users:
            pw = pwd.getpwnam(user)
            d = self.root / "shared" / "checkpoints" / user
            d.mkdir(mode=0o700, exist_ok=True)
            os.chown(d, pw.pw_uid, pw.pw_gid, follow_symlinks=False)
            d.chmod(0o700)

    def wait_nodes_idle(self, spec: ClusterSpec, env: Dict[str, str], timeout: float = 60) -> None:
        def all_idle() -> bool:
            res = _probe(["sinfo", "-h", "-N", "-o", "%N %T"], env=env, timeout=10)
            if res is None:
                return False
            states = dict(line.split()[:2] for line in res.stdout.splitlines() if line.strip())
            bad = [
                n
                for n in spec.node_names
                if states.get(n, "").rstrip("*~#") not in ("idle", "mixed", "allocated")
            ]
            if bad:
                # A node drained by an earlier run of a test stays drained; resume what is ours.
                for n in bad:
                    if states.get(n, "").startswith(("drain", "inval")):
                        _succeeds(
                            ["scontrol", "update", f"NodeName={n}", "State=RESUME"], env=env, timeout=10
                        )
            return not bad

        _wait(all_idle, timeout, "all nodes to become idle", self.log("slurmctld.log"), interval=0.3)

    # ------------------------------------------------------------------ public API
    def up(self, spec: ClusterSpec, install: bool = True) -> ClusterSpec:
        """Bring the cluster up; a no-op when the same cluster is already running."""
        spec.state_dir = str(self.root)
        hidden = hidden_checkout_problem(REPO_ROOT)
        if hidden:
            raise DevclusterError(hidden)
        in_root = self.root_release(spec)
        if in_root is not None:
            return self._up_in_root(spec, in_root)
        spec.rootfs = spec.rootfs or os.environ.get(rootfs.INSIDE_ENV)
        current = self.load_spec()
        if current is not None and self.running(current):
            if current.comparable() != spec.comparable():
                raise DevclusterError(
                    f"a different devcluster is running from {self.root}; "
                    f"run `slurmkit devcluster down` first"
                )
            self.wait_nodes_idle(current, self.env())
            return current
        self.ensure_packages(install)
        spec.release = self.release(spec).name
        if current is not None:
            self.stop_daemons(current)
            self._unmount_under_root()
        self._check_system(spec)
        self._prepare_dirs(spec)
        self._write_configs(spec)
        spec.created_users = current.created_users if current else []
        self.save_spec(spec)
        env = self.env()
        self._start_munge()
        self._setup_network(spec)
        self._start_mariadb()
        self._start_slurmdbd(env)
        self._start_slurmctld(env)
        self._start_slurmds(spec, env)
        created = self._accounts(spec, env)
        self._checkpoint_dirs(spec)
        spec.created_users = sorted(set(spec.created_users) | set(created))
        self.save_spec(spec)
        self.wait_nodes_idle(spec, env)
        return spec

    def _up_in_root(self, spec: ClusterSpec, release: releases.Release) -> ClusterSpec:
        """Build or reuse the release's root, bind what it needs and run ``up`` inside it."""
        current = self.load_spec()
        if current is not None and current.rootfs and current.comparable() != spec.comparable():
            if self.running(current):
                raise DevclusterError(
                    f"a different devcluster is running from {self.root}; run `slurmkit devcluster down` first"
                )
        root = rootfs.ensure(release)
        spec.rootfs = str(root)
        spec.release = release.name
        rootfs.start(root, self.root, REPO_ROOT)
        if current is None:
            self.save_spec(spec)  # so `down` finds the root even if the bring-up inside fails
        self._in_root(spec, "up", timeout=900)
        loaded = self.load_spec()
        if loaded is None:
            raise DevclusterError(f"devcluster up inside {root} left no cluster.json")
        return loaded

    def running(self, spec: ClusterSpec) -> bool:
        return all(_pid_alive(p) for p in self.daemons(spec).values())

    def status(self) -> Dict[str, object]:
        spec = self.load_spec()
        if spec is None:
            return {"state_dir": str(self.root), "up": False, "daemons": {}, "sinfo": ""}
        daemons = {}
        for name, pidfile in self.daemons(spec).items():
            pid = _pid_alive(pidfile)
            daemons[name] = {
                "pid": pid,
                "state": "running" if pid else ("STALE" if pidfile.exists() else "stopped"),
            }
        sinfo = ""
        if daemons.get("slurmctld", {}).get("pid"):
            res = _run(self.run_argv(["sinfo", "-N", "-o", "%N %P %T %G %E"]), timeout=10, check=False)
            sinfo = res.stdout if res.returncode == 0 else res.stderr
        return {
            "state_dir": str(self.root),
            "slurm": spec.release,
            "rootfs": spec.rootfs,
            "mode": spec.mode,
            "nodes": spec.node_names,
            "up": all(d["pid"] for d in daemons.values()),
            "daemons": daemons,
            "sinfo": sinfo,
        }

    def stop_daemons(self, spec: ClusterSpec, timeout: float = 30) -> None:
        """TERM every daemon through its pid file (slurmds in parallel), then KILL stragglers."""
        order = [
            ["slurmctld"],
            [k for k in self.daemons(spec) if k.startswith("slurmd:")],
            ["slurmdbd"],
            ["mariadbd"],
            ["munged"],
        ]
        pidfiles = self.daemons(spec)
        for group in order:
            pids = {}
            for name in group:
                pid = _pid_alive(pidfiles[name])
                if pid:
                    try:
                        os.kill(pid, signal.SIGTERM)
                        pids[name] = pid
                    except ProcessLookupError:
                        pass
            deadline = time.monotonic() + timeout
            while pids and time.monotonic() < deadline:
                pids = {n: p for n, p in pids.items() if _pid_alive(pidfiles[n])}
                time.sleep(0.1)
            for name, pid in pids.items():
                _log(f"{name} (pid {pid}) ignored SIGTERM for {timeout:g}s; killing it")
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for name in group:
                pidfiles[name].unlink(missing_ok=True)
        # slurmstepd processes of jobs that were still running belong to the cluster too.
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
                if (
                    cmd
                    and cmd[0].endswith(b"slurmstepd")
                    and str(self.root).encode() in (proc / "environ").read_bytes()
                ):
                    os.kill(int(proc.name), signal.SIGKILL)
            except (OSError, ValueError):
                continue

    def _mounts_under_root(self) -> List[str]:
        """Mount points below the state directory, deepest first (job_container
        leaves its BasePath bind mounts and per-job namespaces behind after slurmd stops)."""
        found = []
        try:
            lines = Path("/proc/self/mountinfo").read_text().splitlines()
        except OSError:
            return []
        root = str(self.root)
        for line in lines:
            fields = line.split()
            if len(fields) < 5:
                continue
            # mountinfo escapes blanks and backslashes as octal (\040)
            point = fields[4].encode().decode("unicode_escape")
            # The state directory itself may be a bind (inside a Slurm root): keep it.
            if point.startswith(root + "/"):
                found.append(point)
        return sorted(set(found), key=lambda p: p.count("/"), reverse=True)

    def _unmount_under_root(self) -> None:
        """Detach every mount under the state directory, so removing it cannot reach into a
        mounted tree and a new cluster starts from plain directories."""
        for point in self._mounts_under_root():
            _run(["umount", "-l", point], timeout=20, check=False)
        left = self._mounts_under_root()
        if left:
            raise DevclusterError(f"could not unmount {', '.join(left)}; unmount them and run down again")

    def down(self, keep_state: bool = False) -> None:
        spec = self.load_spec()
        if spec is None:
            if self.root.exists() and any(self.root.iterdir()):
                raise DevclusterError(
                    f"{self.root} holds no cluster.json: not a devcluster state directory; "
                    f"refusing to remove it"
                )
            return
        if spec.rootfs and not os.environ.get(rootfs.INSIDE_ENV):
            # Stop it where it runs, then end the namespace (the root stays cached).
            if rootfs.holder(self.root) is not None:
                self._in_root(spec, "down", timeout=300, check=False)
            else:
                self.stop_daemons(spec)
            rootfs.stop(self.root)
            if not keep_state:
                shutil.rmtree(self.root, ignore_errors=True)
            return
        self.stop_daemons(spec)
        self._unmount_under_root()
        if spec.mode == "netns":
            for i, n in enumerate(spec.node_names, start=1):
                _run(["ip", "netns", "del", f"sk-{n}"], timeout=20, check=False)
                _run(["ip", "link", "del", f"skv{i}"], timeout=20, check=False)
            _run(["ip", "link", "del", BRIDGE], timeout=20, check=False)
            self._write_hosts(None)
        for user in spec.created_users:
            _run(["userdel", "-r", user], timeout=30, check=False)
        if not keep_state:
            shutil.rmtree(self.root, ignore_errors=True)
