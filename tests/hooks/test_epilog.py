"""The epilog: leftovers killed (environ, GPU list), GPU memory checked, /dev/shm cleaned,
escalation. Processes here are real, run as uid 65534 (nobody)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from slurmkit.hooks import epilog as ep
from slurmkit.hooks import procs
from slurmkit.verdict.base import Action, CheckResult, Status
from tests.health.conftest import REPO, spawn_as

EPILOG = str(REPO / "epilog" / "slurmkit-epilog")
NOBODY = 65534
SLEEPER = ["/bin/sh", "-c", "trap '' TERM; exec /bin/sleep 300"]  # ignores SIGTERM: needs SIGKILL
POLITE = ["/bin/sleep", "300"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run processes as another user")


def alive(pid):
    p = procs.read_proc(pid)
    return p is not None and p.state != "Z"


def run_epilog(config, env_extra=None):
    env = {
        "SLURMKIT_CONFIG": str(config),
        "SLURMD_NODENAME": "node1",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_UID": str(NOBODY),
        "SLURM_JOB_USER": "nobody",
        "SLURM_JOB_GPUS": "0,1",
        "SLURM_JOB_EXIT_CODE2": "0:0",
    }
    env.update(env_extra or {})
    return subprocess.run([sys.executable, EPILOG], env=env, capture_output=True, text=True, timeout=60)


def test_epilog_kills_double_forked_leftover_and_gpu_holder_but_not_other_jobs(
    gpu_fixture, site, fake_scontrol, tmp_path, reap
):
    job_env = {"SLURM_JOB_ID": "4242", "PATH": "/usr/bin:/bin"}
    leftover = spawn_as(NOBODY, SLEEPER, env=job_env, double_fork=True)  # ignores SIGTERM: needs SIGKILL
    gpu_holder = spawn_as(NOBODY, POLITE, env={"PATH": "/usr/bin"})  # no job env; found via the GPU
    other_job = spawn_as(NOBODY, POLITE, env={"SLURM_JOB_ID": "4243"})  # same user, another job
    for pid in (leftover, gpu_holder, other_job):
        reap(pid)
    assert procs.read_proc(leftover).ppid != os.getpid()  # really reparented away from us
    gpu_fixture(lambda d: d["gpus"][1].update(processes=[{"pid": gpu_holder, "used_mib": 70000}]))
    cfg = site(health={"kill_grace": 1.0, "clean_dev_shm": False}, slurm={"bin_dir": fake_scontrol.bin_dir})
    res = run_epilog(cfg)
    assert res.returncode == 0, res.stderr
    time.sleep(0.2)
    assert not alive(leftover) and not alive(gpu_holder)
    assert alive(other_job)
    rec = json.loads((tmp_path / "log" / "health.jsonl").read_text().splitlines()[-1])
    by_check = {r["check"]: r for r in rec["results"]}
    assert by_check["epilog_cleanup"]["code"] == "EPILOG_KILLED_LEFTOVERS"
    assert leftover in rec["cleanup"]["killed"]  # SIGTERM was ignored
    assert gpu_holder in rec["cleanup"]["terminated"]
    assert by_check["gpu_memory_released"]["status"] == "ok"
    assert "gpu_leftover" not in by_check  # the epilog checks memory after the kill instead


def test_gpu_memory_not_released_fails_and_drains(gpu_fixture, site, fake_scontrol, tmp_path):
    gpu_fixture(lambda d: d["gpus"][0].update(memory_used_mib=2048))  # no process to kill: stuck memory
    fake_scontrol.set_node("node1", "COMPLETING")
    res = run_epilog(
        site(
            health={"memory_release_wait": 0.3, "clean_dev_shm": False},
            slurm={"bin_dir": fake_scontrol.bin_dir},
        )
    )
    assert res.returncode == 1
    upd = [c for c in fake_scontrol.calls() if c[:1] == ["update"]]
    assert upd and upd[0][3].startswith(
        "Reason=slurmkit:GPU_MEMORY_NOT_RELEASED gpu_memory_released: GPU 0: 2048 MiB"
    )


def test_clean_dev_shm_only_when_the_user_has_no_other_job(tmp_path, reap):
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "nccl-abc").write_text("x")
    os.chown(shm / "nccl-abc", NOBODY, NOBODY)
    (shm / "dir").mkdir()
    (shm / "dir" / "f").write_text("y")
    os.chown(shm / "dir", NOBODY, NOBODY)
    (shm / "root-owned").write_text("keep")
    other = spawn_as(NOBODY, POLITE, env={"SLURM_JOB_ID": "777"})
    reap(other)
    out = ep.clean_dev_shm(NOBODY, "4242", shm=str(shm))
    assert "777" in out["skipped"] and (shm / "nccl-abc").exists()
    os.kill(other, 9)
    time.sleep(0.2)
    out = ep.clean_dev_shm(NOBODY, "4242", shm=str(shm))
    assert sorted(out["removed"]) == ["dir", "nccl-abc"]
    assert (shm / "root-owned").exists() and not (shm / "dir").exists()


def test_escalation_triggers(ctx_factory):
    ctx = ctx_factory(hook="epilog", env={"SLURM_JOB_ID": "1", "SLURM_JOB_EXIT_CODE2": "0:7"})
    # the job's own exit is a hint, never evidence (a user can `kill -BUS $$`)
    assert ep.escalation_triggers(ctx, []) == []
    assert ep.exit_hints(ctx) == ["SLURM_JOB_EXIT_CODE2=0:7 (signal 7)"]
    ctx = ctx_factory(hook="epilog", env={"SLURM_JOB_ID": "1", "SLURM_JOB_EXIT_CODE2": "1:0"})
    assert ep.escalation_triggers(ctx, []) == []
    ctx.xid_events_seen = [{"xid": 79, "gpu": 3, "message": ""}, {"xid": 13, "gpu": 1, "message": ""}]
    assert ep.escalation_triggers(ctx, []) == ["Xid 79 on GPU 3 -> reboot"]
    assert ep.parse_exit("3:0") == (3, 0) and ep.parse_exit("9") == (9, 0) and ep.parse_exit("x") is None


def test_escalation_reboot_requests_scontrol_reboot(gpu_fixture, site, fake_scontrol):
    gpu_fixture(
        lambda d: d.update(xid_events=[{"xid": 79, "gpu": 2, "timestamp": time.time(), "message": "m"}])
    )
    res = run_epilog(
        site(
            health={"escalation": {"action": "reboot"}, "clean_dev_shm": False},
            slurm={"bin_dir": fake_scontrol.bin_dir},
        )
    )
    calls = fake_scontrol.calls()
    reboot = [c for c in calls if c[:1] == ["reboot"]]
    assert reboot and reboot[0][:3] == ["reboot", "ASAP", "nextstate=RESUME"] and reboot[0][-1] == "node1"
    assert reboot[0][3].startswith("reason=slurmkit:ESCALATION_REBOOT")
    # the Xid 79 itself fails the epilog, but the reboot request replaces the drain
    assert res.returncode == 1 and not [c for c in calls if c[:1] == ["update"]]


def test_escalation_heavy_runs_the_heavy_tier(ctx_factory, gpu_fixture):
    gpu_fixture()
    ctx = ctx_factory(
        hook="epilog",
        env={"SLURM_JOB_ID": "1", "SLURM_JOB_EXIT_CODE2": "0:7"},
        health={"escalation": {"action": "heavy"}},
    )
    extra = {}
    ecc = CheckResult("gpu_ecc", Status.FAIL, "GPU_ECC_UNCORRECTED", "GPU 1: 2 uncorrected", Action.RESET)
    out = ep.escalate(ctx, [ecc], extra)
    names = [r.check for r in out]
    assert names[0] == "escalation"
    assert {"nvlink_bandwidth", "allreduce_busbw", "gemm_tflops", "hbm_bandwidth"} <= set(names)
    assert all(r.status == Status.OK for r in out), out
