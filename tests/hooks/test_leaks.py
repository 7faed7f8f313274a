"""The leak killer against real processes: dry-run lists, a real run kills only the leak;
root, live job steps (under slurmstepd) and running jobs' processes survive."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from slurmkit.health.backends.simulated import SimulatedBackend
from slurmkit.hooks import leaks, procs
from tests.health.conftest import spawn_as

NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run processes as another user")


def alive(pid):
    p = procs.read_proc(pid)
    return p is not None and p.state != "Z"


JOB_CGROUP = f"/sys/fs/cgroup/pids/slurm_sktest{os.getpid()}/uid_{NOBODY}/job_555"


@pytest.fixture
def job_cgroup():
    """A real cgroup v1 directory laid out as Slurm's proctrack/cgroup makes it; removed after."""
    if not os.path.isdir("/sys/fs/cgroup/pids"):
        pytest.skip("no cgroup v1 pids hierarchy here")
    os.makedirs(JOB_CGROUP)
    yield JOB_CGROUP
    for d in (JOB_CGROUP, os.path.dirname(JOB_CGROUP), os.path.dirname(os.path.dirname(JOB_CGROUP))):
        for _ in range(50):
            try:
                os.rmdir(d)
                break
            except OSError:
                time.sleep(0.1)


@pytest.fixture
def scene(tmp_path, gpu_fixture, job_cgroup, reap):  # reap (kill) before the cgroup goes
    leaked = spawn_as(NOBODY, ["/bin/sleep", "300"], double_fork=True)
    small = spawn_as(NOBODY, ["/bin/sleep", "301"])
    running_job = spawn_as(NOBODY, ["/bin/sleep", "302"], env={"SLURM_JOB_ID": "555"})
    with open(os.path.join(job_cgroup, "cgroup.procs"), "w") as fh:  # a live job's process: in its cgroup
        fh.write(str(running_job))
    root_proc = subprocess.Popen(["/bin/sleep", "303"]).pid
    # a fake slurmstepd (a copy of sh, so its comm is "slurmstepd") with a nobody child: a live job step
    stepd = tmp_path / "slurmstepd"
    shutil.copy("/bin/sh", stepd)
    step = subprocess.Popen(
        [str(stepd), "-c", f"setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups /bin/sleep 304 & wait"]
    )
    for pid in (leaked, small, running_job, root_proc, step.pid):
        reap(pid)
    deadline = time.monotonic() + 5
    step_child = None
    while step_child is None and time.monotonic() < deadline:
        kids = [p for p in procs.iter_procs() if p.ppid == step.pid and p.uid == NOBODY and p.comm == "sleep"]
        step_child = kids[0].pid if kids else None
        time.sleep(0.05)
    assert step_child, "fake step child did not start"
    reap(step_child)
    procs_by_gpu = {
        0: (leaked, 79000),
        1: (small, 1000),
        2: (step_child, 79500),
        3: (running_job, 80000),
        4: (root_proc, 80000),
    }

    def mutate(d):
        for gpu, (pid, mib) in procs_by_gpu.items():
            d["gpus"][gpu]["processes"] = [{"pid": pid, "used_mib": mib}]

    path = gpu_fixture(mutate)
    return {
        "leaked": leaked,
        "small": small,
        "running_job": running_job,
        "root": root_proc,
        "step": step_child,
        "backend": SimulatedBackend(str(path)),
    }


def health_cfg(**over):
    from slurmkit.core.schema import defaults
    from slurmkit.health.config import SITE_SCHEMA

    h = defaults(SITE_SCHEMA)
    h["kill_grace"] = 1.0
    h.update(over)
    return h


def test_dry_run_lists_only_the_leak_and_kills_nothing(scene, tmp_path):
    paths = {"log_dir": str(tmp_path / "log"), "metrics_dir": str(tmp_path / "metrics")}
    report = leaks.kill_leaks(
        health_cfg(), paths, "node1", dry_run=True, running={"555"}, backend=scene["backend"]
    )
    assert [lk["pid"] for lk in report["leaks"]] == [scene["leaked"]]
    leak = report["leaks"][0]
    assert (
        leak["why"] == "gpu"
        and leak["gpu"] == 0
        and leak["user"] == "nobody"
        and leak["outcome"] == "dry_run"
    )
    spared = {s["pid"]: s["why"] for s in report["spared"]}
    assert spared[scene["step"]].startswith("under slurmstepd")
    assert spared[scene["running_job"]] == "in the cgroup of running job 555"
    assert spared[scene["root"]] == "root"
    assert scene["small"] not in spared  # 1000 MiB is not a leak candidate at all
    assert all(alive(scene[k]) for k in ("leaked", "small", "running_job", "root", "step"))
    audit = [json.loads(x) for x in (tmp_path / "log" / "kill-leaks.jsonl").read_text().splitlines()]
    assert [(a["pid"], a["action"], a["dry_run"]) for a in audit] == [(scene["leaked"], "dry_run", True)]
    assert leaks.exit_code(report) == 1


def test_real_run_kills_only_the_leak(scene, tmp_path):
    paths = {"log_dir": str(tmp_path / "log"), "metrics_dir": str(tmp_path / "metrics")}
    report = leaks.kill_leaks(
        health_cfg(), paths, "node1", dry_run=False, running={"555"}, backend=scene["backend"]
    )
    time.sleep(0.2)
    assert not alive(scene["leaked"])
    assert all(alive(scene[k]) for k in ("small", "running_job", "root", "step"))
    assert report["leaks"][0]["outcome"] == "terminated"
    leaks.write_metrics(paths, report)
    prom = (tmp_path / "metrics" / "slurmkit_kill_leaks_node1.prom").read_text()
    assert 'slurmkit_kill_leaks_killed{node="node1"} 1.0' in prom
    # a second run finds nothing
    again = leaks.kill_leaks(
        health_cfg(), paths, "node1", dry_run=False, running={"555"}, backend=scene["backend"]
    )
    assert again["leaks"] == [] and leaks.exit_code(again) == 0


def test_job_no_longer_running_makes_its_process_a_leak(scene, tmp_path):
    paths = {"log_dir": str(tmp_path / "log"), "metrics_dir": str(tmp_path / "metrics")}
    report = leaks.kill_leaks(
        health_cfg(), paths, "node1", dry_run=True, running=set(), backend=scene["backend"]
    )
    assert sorted(lk["pid"] for lk in report["leaks"]) == sorted([scene["leaked"], scene["running_job"]])


def test_min_uid_protects_system_users(scene, tmp_path):
    paths = {"log_dir": str(tmp_path / "log"), "metrics_dir": str(tmp_path / "metrics")}
    h = health_cfg()
    h["leaks"] = dict(h["leaks"], min_uid=70000)
    report = leaks.kill_leaks(h, paths, "node1", dry_run=True, running={"555"}, backend=scene["backend"])
    assert report["leaks"] == []


def test_squeue_failure_kills_nothing(monkeypatch):
    from slurmkit.errors import ExternalCommandError
    from slurmkit.slurm import runner

    def failing(argv, timeout, input, env):
        return runner.Result(
            list(argv), 1, "", "slurm_load_jobs error: Unable to contact slurm controller", 0.01
        )

    prev = runner.set_runner(failing)
    try:
        with pytest.raises(ExternalCommandError, match="Unable to contact"):
            leaks.running_job_ids()
    finally:
        runner.set_runner(prev)


def test_running_job_ids_carry_each_jobs_uid():
    """squeue's ``%i|%A|%U``: both ids of an array task, each with its user's uid (the cgroup's
    ``uid_<uid>`` level must match it to spare a process)."""
    from slurmkit.slurm import runner

    seen = []

    def fake(argv, timeout, input, env):
        seen.append(list(argv))
        return runner.Result(list(argv), 0, "77|77|1001\n80_3|83|1002\n  \nbad line\n90|90|x\n", "", 0.01)

    prev = runner.set_runner(fake)
    try:
        ids = leaks.running_job_ids()
    finally:
        runner.set_runner(prev)
    assert seen[0][-1] == "%i|%A|%U"
    assert ids == {"77": 1001, "80_3": 1002, "83": 1002, "90": None}
