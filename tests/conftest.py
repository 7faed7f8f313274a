"""Shared fixtures. The ``devcluster`` fixture brings the real local Slurm up once per
test session (netns mode, 2 nodes, 8 fake H100 per node, slurmkit's prolog and epilog
wired in) and tears it down at the end, even when tests fail.

Set ``SLURMKIT_TEST_KEEP_CLUSTER=1`` to leave it running after the session (handy while
developing); a cluster that was already running when the session started is reused and
left running. Tests that need it are marked ``devcluster``; without root or without the
Slurm packages they are skipped with the reason, unless ``SLURMKIT_REQUIRE_DEVCLUSTER=1``
(CI) turns that into a failure.

The same holds for the training stack: kernel, trainer and heavy-check tests
``pytest.importorskip`` torch and triton so that a node-side checkout can run the rest,
but ``SLURMKIT_REQUIRE_TRAIN=1`` (set by tests/run.sh, whose bootstrap installs them)
turns such a skip into a failure, so a missing torch or triton cannot pass CI; the same
holds for DuckDB, which the report engine and archive tests import or skip.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

import pytest

# --- suite guards (issue 30; self-contained, see tests/suite_guards.py): no test writes to the
# system's slurmkit paths, and SLURMKIT_UPDATE_GOLDENS is refused in CI. pytest finds the
# fixture and the hook through these names.
from suite_guards import no_writes_to_system_paths, pytest_configure  # noqa: E402, F401

REPO = Path(__file__).resolve().parents[1]
TERMINAL_STATES = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
)


#: The ``[train]`` extra, and the ``[report]`` extra's DuckDB (the engine and archive tests
#: importorskip it): in CI a test skipped because one of these cannot be imported fails.
TRAIN_MODULES = ("torch", "triton", "numpy", "duckdb")
_IMPORT_SKIP = re.compile(r"could not import '([\w.]+)'")


def _train_import_skip(report) -> Optional[str]:
    """The skip message when ``report`` is an importorskip of a training module that CI requires."""
    if not report.skipped or not os.environ.get("SLURMKIT_REQUIRE_TRAIN"):
        return None
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    m = _IMPORT_SKIP.search(reason)
    return reason if m and m.group(1).split(".")[0] in TRAIN_MODULES else None


def _fail_train_import_skip(report) -> None:
    reason = _train_import_skip(report)
    if reason:
        report.outcome = "failed"
        report.longrepr = (
            f"SLURMKIT_REQUIRE_TRAIN is set (tests/run.sh) but a required module is missing: {reason}"
        )


#: ``--slurm-release``: which Slurm the devcluster fixture brings up. ``host`` is this
#: machine's packages; another release runs only inside its Debian root, so tests/run.sh
#: starts pytest there (``slurmkit devcluster in-root --slurm 26.05 -- python -m pytest ...``).
SLURM_RELEASE_ENV = "SLURMKIT_TEST_SLURM"


def pytest_addoption(parser):
    parser.addoption(
        "--slurm-release",
        default=os.environ.get(SLURM_RELEASE_ENV, "host"),
        choices=("host", "22.05", "24.11", "26.05"),
        help="Slurm release of the devcluster (default: $SLURMKIT_TEST_SLURM or host).",
    )


def _slurmd_version() -> str:
    try:
        res = subprocess.run(["/usr/sbin/slurmd", "-V"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return "no slurmd"
    return (res.stdout or res.stderr).strip() or "no slurmd"


def pytest_report_header(config):
    asked = config.getoption("--slurm-release")
    return f"devcluster: Slurm release {asked}; this root's slurmd -V: {_slurmd_version()}"


def pytest_terminal_summary(terminalreporter, config):
    spec = getattr(config, "_slurmkit_devcluster_spec", None)
    if spec is not None:
        where = f" (Debian root {spec.rootfs})" if spec.rootfs else " (this machine's packages)"
        terminalreporter.write_line(
            f"devcluster tests of this run ran on Slurm {spec.release}{where}: {_slurmd_version()}"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_train_import_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_train_import_skip(outcome.get_result())


class ClusterHandle:
    """What tests get: paths, an environment for Slurm clients, and small helpers
    that always carry a timeout."""

    def __init__(self, cluster, spec):
        self.cluster = cluster
        self.spec = spec
        self.state_dir: Path = cluster.root
        self.nodes: List[str] = spec.node_names
        self.env: Dict[str, str] = cluster.env()
        self.config_path: Path = cluster.slurmkit_config
        # where tests and their users' jobs write: the cluster's 1777 scratch area (the verdict
        # store and the checkpoint root are root's, as in production)
        self.shared_dir: Path = cluster.root / "shared" / "scratch"

    def gpu_fixture(self, node: str) -> Path:
        return self.state_dir / "gpu" / f"{node}.yaml"

    def run(
        self,
        argv: Sequence[str],
        user: Optional[str] = None,
        timeout: float = 60,
        input: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
    ) -> subprocess.CompletedProcess:
        full_env = dict(self.env, **(env or {}))
        cmd = list(argv)
        if user:
            keep = ",".join(sorted(k for k in full_env if k.startswith(("SLURM", "PATH"))))
            cmd = ["runuser", "-u", user, f"--whitelist-environment={keep}", "--", *cmd]
        return subprocess.run(
            cmd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            cwd=str(self.shared_dir),
        )

    def submit(self, script: str, args: Iterable[str] = (), user: Optional[str] = None) -> str:
        res = self.run(["sbatch", "--parsable", *args], user=user, input=script)
        if res.returncode != 0:
            raise AssertionError(f"sbatch failed ({res.returncode}): {res.stderr.strip()}")
        return res.stdout.strip().split(";")[0]

    def associate(self, *users: str, account: str = "research") -> None:
        """Give each user an association with ``account`` (idempotent). Asked first, then
        added: sacctmgr's answer to a user it already has differs between releases (22.05:
        rc 0 and "Nothing new added"; 26.05: rc 1 and "Nothing added")."""
        for user in users:
            show = ["sacctmgr", "-n", "-P", "show", "assoc", "where", f"user={user}", f"account={account}"]
            res = self.run([*show, "format=user"])
            assert res.returncode == 0, f"sacctmgr show assoc: {res.stderr.strip()}"
            if user in res.stdout.split():
                continue
            res = self.run(["sacctmgr", "-i", "add", "user", user, f"Account={account}"])
            assert res.returncode == 0, f"sacctmgr add user {user}: {(res.stdout + res.stderr).strip()}"

    def sacct_state(self, job_id: str) -> Optional[str]:
        res = self.run(["sacct", "-X", "-n", "-P", "-j", str(job_id), "--format=State"])
        states = [s.split()[0] for s in res.stdout.split() if s.strip()]
        return states[-1] if states else None

    def wait_job(self, job_id: str, timeout: float = 180) -> str:
        """Wait until the job has left the queue and sacct shows a terminal state."""
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            q = self.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"])
            if q.returncode == 0 and not q.stdout.strip() or "Invalid job id" in q.stderr:
                state = self.sacct_state(job_id)
                if state and state.startswith(TERMINAL_STATES):
                    return state
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} did not finish within {timeout:g}s (last sacct state {state})")

    def node_state(self, node: str) -> str:
        res = self.run(["sinfo", "-h", "-n", node, "-o", "%T"])
        return (res.stdout.split() or ["unknown"])[0]

    def node_reason(self, node: str) -> str:
        res = self.run(["sinfo", "-h", "-n", node, "-o", "%E"])
        return res.stdout.strip().splitlines()[0] if res.stdout.strip() else ""

    def wait_nodes_idle(self, timeout: float = 60) -> None:
        self.cluster.wait_nodes_idle(self.spec, self.env, timeout=timeout)

    def resume_all(self) -> None:
        for n in self.nodes:
            self.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"])


def _devcluster_unavailable() -> Optional[str]:
    if os.geteuid() != 0:
        return "needs root"
    from slurmkit.devcluster.cluster import DevCluster

    missing = DevCluster.missing_packages()
    if missing and not shutil.which("apt-get"):
        return f"Slurm packages missing ({', '.join(missing)}) and no apt-get"
    return None


@pytest.fixture(scope="session")
def devcluster(pytestconfig):
    reason = _devcluster_unavailable()
    if reason:
        if os.environ.get("SLURMKIT_REQUIRE_DEVCLUSTER"):
            pytest.fail(f"devcluster required but unavailable: {reason}")
        pytest.skip(f"devcluster unavailable: {reason}")
    from slurmkit.devcluster.cluster import ClusterSpec, DevCluster

    cluster = DevCluster(os.environ.get("SLURMKIT_TEST_STATE_DIR"))
    hooks = (REPO / "prolog" / "slurmkit-prolog").exists() and (REPO / "epilog" / "slurmkit-epilog").exists()
    release = pytestconfig.getoption("--slurm-release")
    spec = ClusterSpec(mode="netns", nodes=2, hooks=hooks, slurm=release)
    spec.state_dir = str(cluster.root)
    if release != "host" and cluster.root_release(spec) is not None:
        pytest.fail(
            f"--slurm-release {release}: this machine's Slurm is {cluster.host_release()}; run pytest inside "
            f"the release's root: slurmkit devcluster in-root --slurm {release} -- python -m pytest ..."
        )
    current = cluster.load_spec()
    reused = current is not None and cluster.running(current) and current.comparable() == spec.comparable()
    if current is not None and not reused:
        cluster.down()
    t0 = time.monotonic()
    spec = cluster.up(spec)
    pytestconfig._slurmkit_devcluster_spec = spec
    if not reused:
        print(f"\ndevcluster (Slurm {spec.release}) up in {time.monotonic() - t0:.1f}s")
    try:
        yield ClusterHandle(cluster, spec)
    finally:
        if not reused and not os.environ.get("SLURMKIT_TEST_KEEP_CLUSTER"):
            cluster.down()


# Two ordinary accounts for attack tests (tests/security): the hostile user and the
# victim. Created once per machine (idempotent), never given a home directory or a shell.
ATTACKER = "sk-mallory"
VICTIM = "sk-alice"


def _ensure_user(name: str) -> None:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
            timeout=30,
        )


@pytest.fixture(scope="session")
def unprivileged_users():
    """``(attacker, victim)``: two unprivileged accounts that exist on this machine (and so,
    with the shared /etc/passwd, on every devcluster node). Needs root."""
    if os.geteuid() != 0:
        if os.environ.get("SLURMKIT_REQUIRE_DEVCLUSTER"):
            pytest.fail("attack tests need root to create the unprivileged test users")
        pytest.skip("attack tests need root to create the unprivileged test users")
    for name in (ATTACKER, VICTIM):
        _ensure_user(name)
    return ATTACKER, VICTIM
