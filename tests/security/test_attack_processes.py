"""Attacks on the process killers: the epilog and ``kill-leaks`` run as root and signal
processes, so what makes a process "the job's" must be something its user cannot fake.

* The epilog killed every non-root process on the job's GPUs: on a shared node (no
  ``ConstrainDevices=yes``) another user's job that touched those GPUs died with it.
* ``kill-leaks`` spared any process carrying a running job's ``SLURM_JOB_ID`` in its
  environment, which its user sets at will.

Each attack runs once as the hook program under ``env -i`` (fast, no Slurm) and once on
the devcluster with real jobs of two unprivileged users.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.health.conftest import REPO, site_dict

EPILOG = str(REPO / "epilog" / "slurmkit-epilog")
SLURMKIT = [sys.executable, "-m", "slurmkit.cli.main"]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _spawn(user: str, argv, env=None) -> subprocess.Popen:
    """``argv`` as ``user`` in a session of its own (no slurmstepd, no job cgroup)."""
    full = [
        "runuser",
        "-u",
        user,
        "--",
        "/usr/bin/env",
        "-i",
        *[f"{k}={v}" for k, v in (env or {}).items()],
        *argv,
    ]
    return subprocess.Popen(
        full, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _child_pid(parent: subprocess.Popen, comm: str, timeout: float = 10) -> int:
    """The pid of ``comm`` that runuser started (runuser stays as its parent)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                stat = open(f"/proc/{name}/stat").read()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == parent.pid and stat.split("(", 1)[1].rsplit(")", 1)[0] == comm:
                return int(name)
        time.sleep(0.05)
    raise AssertionError(f"{comm} under {parent.pid} did not start")


def _gpu_fixture(tmp_path: Path, procs_on_gpu) -> Path:
    data = yaml.safe_load((REPO / "etc" / "gpu-fixtures" / "healthy-h100x8.yaml").read_text())
    for g in data["gpus"]:
        g["processes"] = list(procs_on_gpu)
    (tmp_path / "gpu").mkdir(exist_ok=True)
    path = tmp_path / "gpu" / "node1.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# --------------------------------------------------------------- hook program, env -i


def test_epilog_does_not_kill_another_users_process_on_the_jobs_gpus(unprivileged_users, tmp_path):
    attacker, victim = unprivileged_users
    holder = _spawn(victim, ["/bin/sleep", "300"], env={"SLURM_JOB_ID": "8002"})
    try:
        vpid = _child_pid(holder, "sleep")
        _gpu_fixture(tmp_path, [{"pid": vpid, "used_mib": 1}])
        cfg = tmp_path / "slurmkit.yaml"
        cfg.write_text(yaml.safe_dump(site_dict(tmp_path, {"kill_grace": 0.5, "clean_dev_shm": False})))
        env = {
            "SLURMKIT_CONFIG": str(cfg),
            "SLURMD_NODENAME": "node1",
            "SLURM_JOB_ID": "8001",
            "SLURM_JOB_UID": str(pwd.getpwnam(attacker).pw_uid),
            "SLURM_JOB_USER": attacker,
            "SLURM_JOB_GPUS": "0,1",
            "SLURM_JOB_EXIT_CODE2": "0:0",
        }
        res = subprocess.run([sys.executable, EPILOG], env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        time.sleep(0.3)
        assert _alive(vpid), "the attacker's epilog killed the victim's process on a shared GPU"
    finally:
        holder.kill()
        subprocess.run(["pkill", "-9", "-P", str(holder.pid)], timeout=10)


def test_kill_leaks_kills_a_leak_that_fakes_a_running_jobs_id(unprivileged_users, tmp_path):
    """No Slurm here: the running job ids are given as squeue would list them."""
    from slurmkit.core.schema import defaults
    from slurmkit.health.backends.simulated import SimulatedBackend
    from slurmkit.health.config import SITE_SCHEMA
    from slurmkit.hooks import leaks

    attacker, _ = unprivileged_users
    leak = _spawn(attacker, ["/bin/sleep", "300"], env={"SLURM_JOB_ID": "9001"})
    try:
        lpid = _child_pid(leak, "sleep")
        path = _gpu_fixture(tmp_path, [{"pid": lpid, "used_mib": 79000}])
        h = defaults(SITE_SCHEMA)
        h["kill_grace"] = 0.5
        paths = {"log_dir": str(tmp_path / "log"), "metrics_dir": str(tmp_path / "metrics")}
        rep = leaks.kill_leaks(
            h, paths, "node1", dry_run=False, running={"9001"}, backend=SimulatedBackend(str(path))
        )
        assert [lk["pid"] for lk in rep["leaks"]] == [lpid], rep["spared"]
        time.sleep(0.2)
        assert not _alive(lpid)
    finally:
        leak.kill()
        subprocess.run(["pkill", "-9", "-P", str(leak.pid)], timeout=10)


# --------------------------------------------------------------- devcluster, real jobs


def _wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last {last!r})")


def _job_state(dc, job: str) -> str:
    res = dc.run(["squeue", "-h", "-j", job, "-o", "%T"])
    return res.stdout.strip()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _epilog_records(dc, job: str, hook: str = "epilog"):
    path = dc.state_dir / "slurmkit" / "log" / "health.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("hook") == hook and str(rec.get("job_id")) == str(job):
            out.append(rec)
    return out


@pytest.fixture
def dropbox():
    """A directory both test users can write (markers with the jobs' pids)."""
    d = tempfile.mkdtemp(prefix="sk-sec-a-")
    os.chmod(d, 0o1777)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.devcluster
def test_victims_job_survives_the_attackers_epilog_on_a_shared_node(
    devcluster, unprivileged_users, shared_dropbox
):
    dc = devcluster
    attacker, victim = unprivileged_users
    dc.associate(attacker, victim)
    marker = shared_dropbox / "victim.pid"  # where the job can write (its /tmp is private)
    vjob = dc.submit(
        f"#!/bin/sh\nsleep 300 &\necho $! > {marker}\nwait\n",
        ["-w", "node1", "--gres=gpu:1", "--output=/dev/null"],
        user=victim,
    )
    fixture = dc.gpu_fixture("node1")
    original = fixture.read_text()
    ajob = None
    try:
        vpid = int(_wait(lambda: marker.read_text().strip() if marker.exists() else None, 60, "victim pid"))
        ajob = dc.submit(
            "#!/bin/sh\nsleep 6\n", ["-w", "node1", "--gres=gpu:1", "--output=/dev/null"], user=attacker
        )
        _wait(lambda: _job_state(dc, ajob) == "RUNNING", 60, "the attacker's job to run")
        # RUNNING is shown while the prolog (PrologFlags=Alloc) still runs: wait for its verdict,
        # or it would see the victim's process as a leftover on the GPU and drain the node.
        _wait(lambda: _epilog_records(dc, ajob, "prolog"), 60, "the attacker's prolog record")
        # The backend lists the victim's process on the attacker's GPU too, as NVML does where
        # devices are not constrained (a node without ConstrainDevices=yes; the devcluster's
        # GPU listing is a fixture). 1 MiB: below the leftover threshold.
        data = yaml.safe_load(original)
        for g in data["gpus"]:
            g["processes"] = [{"pid": vpid, "used_mib": 1}]
        _write_atomic(fixture, yaml.safe_dump(data))
        assert dc.wait_job(ajob, timeout=120) == "COMPLETED"
        rec = _wait(lambda: _epilog_records(dc, ajob), 60, "the attacker's epilog record")[-1]
        time.sleep(0.5)
        assert _alive(vpid), f"the attacker's epilog killed the victim's job: {rec.get('cleanup')}"
        assert _job_state(dc, vjob) == "RUNNING"
    finally:
        _write_atomic(fixture, original)
        dc.run(["scancel", vjob])
        if ajob:
            dc.run(["scancel", ajob])
        if dc.node_reason("node1").startswith("slurmkit:"):  # never leave the shared node drained
            dc.run(["scontrol", "update", "NodeName=node1", "State=RESUME"])


@pytest.mark.devcluster
def test_leak_with_a_forged_slurm_job_id_is_still_killed(devcluster, unprivileged_users, shared_dropbox):
    """The leak carries the victim's running job id; kill-leaks asks squeue, and must still kill
    it, while the victim's real job process (under its slurmstepd) survives. Uses a fixture
    of its own node name so no prolog reads it."""
    dc = devcluster
    attacker, victim = unprivileged_users
    dc.associate(victim)
    marker = shared_dropbox / "victim.pid"  # where the job can write (its /tmp is private)
    vjob = dc.submit(
        f"#!/bin/sh\nsleep 300 &\necho $! > {marker}\nwait\n",
        ["-w", "node1", "--output=/dev/null"],
        user=victim,
    )
    leak = None
    node = f"sktest{os.getpid()}"
    fixture = dc.gpu_fixture(node)
    try:
        vpid = int(_wait(lambda: marker.read_text().strip() if marker.exists() else None, 60, "victim pid"))
        _wait(lambda: _job_state(dc, vjob) == "RUNNING", 30, "the victim's job to run")
        leak = _spawn(attacker, ["/bin/sleep", "300"], env={"SLURM_JOB_ID": vjob, "SLURM_JOBID": vjob})
        lpid = _child_pid(leak, "sleep")
        data = yaml.safe_load(dc.gpu_fixture("node1").read_text())
        data["gpus"][0]["processes"] = [{"pid": lpid, "used_mib": 79000}]
        data["gpus"][1]["processes"] = [{"pid": vpid, "used_mib": 80000}]
        _write_atomic(fixture, yaml.safe_dump(data))
        env = dict(dc.env, SLURMKIT_CONFIG=str(dc.config_path))
        res = subprocess.run(
            [*SLURMKIT, "kill-leaks", "--node", node, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode in (0, 1, 2), res.stderr
        rep = json.loads(res.stdout)
        time.sleep(0.3)
        assert not _alive(lpid), f"a leak that set SLURM_JOB_ID={vjob} was spared: {rep['spared']}"
        assert _alive(vpid) and _job_state(dc, vjob) == "RUNNING"
    finally:
        fixture.unlink(missing_ok=True)
        dc.run(["scancel", vjob])
        if leak is not None:
            leak.kill()
            subprocess.run(["pkill", "-9", "-P", str(leak.pid)], timeout=10)


def test_kill_leaks_is_not_fooled_by_a_users_own_slurmstepd(unprivileged_users, tmp_path, dropbox):
    """A user can name a program ``slurmstepd`` and run the leak under it; only a root-owned
    slurmstepd is a live job step."""
    from slurmkit.core.schema import defaults
    from slurmkit.health.backends.simulated import SimulatedBackend
    from slurmkit.health.config import SITE_SCHEMA
    from slurmkit.hooks import leaks

    attacker, _ = unprivileged_users
    fake = dropbox / "slurmstepd"
    shutil.copy("/bin/sh", fake)
    os.chmod(fake, 0o755)
    stepd = _spawn(attacker, [str(fake), "-c", "/bin/sleep 300 & wait"])
    try:
        sh = _child_pid(stepd, "slurmstepd")
        lpid = None
        deadline = time.monotonic() + 10
        while lpid is None and time.monotonic() < deadline:
            kids = [int(n) for n in os.listdir("/proc") if n.isdigit() and _ppid(int(n)) == sh]
            lpid = kids[0] if kids else None
            time.sleep(0.05)
        assert lpid, "the leak did not start"
        path = _gpu_fixture(tmp_path, [{"pid": lpid, "used_mib": 79000}])
        h = defaults(SITE_SCHEMA)
        h["kill_grace"] = 0.5
        paths = {"log_dir": str(tmp_path / "log"), "metrics_dir": str(tmp_path / "metrics")}
        rep = leaks.kill_leaks(
            h, paths, "node1", dry_run=False, running=set(), backend=SimulatedBackend(str(path))
        )
        assert lpid in [lk["pid"] for lk in rep["leaks"]], rep["spared"]
    finally:
        stepd.kill()
        subprocess.run(["pkill", "-9", "-P", str(stepd.pid)], timeout=10)


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


# --------------------------------------------------------------- required Slurm settings

SHOW_CONFIG_LINUXPROC = """Configuration data as of 2026-12-01T13:00:00
ProctrackType           = proctrack/linuxproc
TaskPlugin              = task/none
SlurmctldPort           = 6817

Cgroup Support Configuration:
ConstrainDevices        = no
"""
SHOW_CONFIG_CGROUP = (
    SHOW_CONFIG_LINUXPROC.replace("proctrack/linuxproc", "proctrack/cgroup")
    .replace("task/none", "task/affinity,task/cgroup")
    .replace("ConstrainDevices        = no", "ConstrainDevices        = yes")
)


@pytest.mark.parametrize(
    "text,warned",
    [(SHOW_CONFIG_LINUXPROC, 3), (SHOW_CONFIG_CGROUP, 0), ("ProctrackType = proctrack/cgroup\n", 2)],
)
def test_config_validate_warns_once_per_missing_slurm_setting(tmp_path, text, warned):
    """Canned ``scontrol show config`` output through the runner (parsing only; the devcluster
    test below reads the real one)."""
    from click.testing import CliRunner

    from slurmkit.cli.main import cli
    from slurmkit.slurm import runner

    def fake(argv, timeout, input, env):
        assert argv[-2:] == ["show", "config"] and timeout <= 10
        return runner.Result(list(argv), 0, text, "", 0.01)

    cfg = tmp_path / "c.yaml"
    cfg.write_text("slurm:\n  bin_dir: /usr/bin\n")
    previous = runner.set_runner(fake)
    try:
        res = CliRunner().invoke(cli, ["config", "validate", "--config", str(cfg)])
    finally:
        runner.set_runner(previous)
    assert res.exit_code == 0, res.output
    warnings = [line for line in res.output.splitlines() if "warning:" in line]
    assert len(warnings) == warned, res.output
    if warned == 3:
        assert all(
            any(name in w for w in warnings) for name in ("ProctrackType", "TaskPlugin", "ConstrainDevices")
        )


@pytest.mark.devcluster
def test_config_validate_is_quiet_on_the_devclusters_production_settings(devcluster):
    """The devcluster runs the production configuration (proctrack/cgroup, task/cgroup,
    ConstrainDevices=yes): the real ``scontrol show config`` output parses to those values,
    and ``config validate`` warns about none of them. (That each missing one is warned
    about: the canned-output test above; the real daemons never run without them here.)"""
    from slurmkit.slurm import settings

    shown = devcluster.run(["scontrol", "show", "config"])
    assert shown.returncode == 0, shown.stderr
    conf = settings.parse_show_config(shown.stdout)
    assert conf.get("ProctrackType") == "proctrack/cgroup", conf.get("ProctrackType")
    assert "task/cgroup" in conf.get("TaskPlugin", ""), conf.get("TaskPlugin")
    assert conf.get("ConstrainDevices", "").lower() == "yes", conf.get("ConstrainDevices")
    assert settings.missing_required(conf) == []
    env = dict(devcluster.env, SLURMKIT_CONFIG=str(devcluster.config_path))
    res = subprocess.run(
        [*SLURMKIT, "config", "validate"], env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert not [x for x in res.stderr.splitlines() if "Slurm setting" in x], res.stderr
