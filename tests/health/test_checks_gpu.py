"""Every fast GPU check against simulated fixtures: good, warn, fail and hang."""

from __future__ import annotations

import os
import time

import pytest

from slurmkit.health.catalog import CATALOG
from slurmkit.health.engine import run_checks, run_one
from slurmkit.verdict.base import Action, Status


def run(ctx, name, timeout=2.0):
    return run_one(ctx, CATALOG[name], timeout)


def gpu(data, i):
    return data["gpus"][i]


GPU_CHECKS = [
    "gpu_count",
    "gpu_ecc",
    "gpu_memory_errors",
    "gpu_temperature",
    "gpu_power",
    "gpu_persistence",
    "gpu_throttle",
    "nvlink_state",
    "gpu_leftover",
    "xid",
]


@pytest.mark.parametrize("name", GPU_CHECKS)
def test_healthy_fixture_passes_every_gpu_check(gpu_fixture, ctx_factory, name):
    gpu_fixture()
    r = run(ctx_factory(), name)
    assert r.status == Status.OK, r
    assert r.code == "OK"


# (check, mutate, expected status, expected code, expected action)
CASES = [
    (
        "gpu_ecc",
        lambda d: gpu(d, 3)["ecc"].update(volatile_uncorrected=2),
        Status.FAIL,
        "GPU_ECC_UNCORRECTED",
        Action.RESET,
    ),
    (
        "gpu_ecc",
        lambda d: gpu(d, 1)["ecc"].update(volatile_corrected=60_000_000),
        Status.WARN,
        "GPU_ECC_CORRECTED",
        Action.MONITOR,
    ),
    (
        "gpu_memory_errors",
        lambda d: gpu(d, 0)["retired_pages"].update(single_bit=6, double_bit=4),
        Status.FAIL,
        "GPU_RETIRED_PAGES",
        Action.ISOLATE,
    ),
    (
        "gpu_memory_errors",
        lambda d: gpu(d, 2)["retired_pages"].update(pending=True),
        Status.FAIL,
        "GPU_RETIREMENT_PENDING",
        Action.RESET,
    ),
    (
        "gpu_memory_errors",
        lambda d: gpu(d, 5)["remapped_rows"].update(pending=True),
        Status.FAIL,
        "GPU_ROW_REMAP_PENDING",
        Action.RESET,
    ),
    (
        "gpu_memory_errors",
        lambda d: gpu(d, 5)["remapped_rows"].update(failed=True),
        Status.FAIL,
        "GPU_ROW_REMAP_FAILED",
        Action.ISOLATE,
    ),
    (
        "gpu_temperature",
        lambda d: gpu(d, 4).update(temperature_c=87),
        Status.WARN,
        "GPU_TEMPERATURE",
        Action.MONITOR,
    ),
    (
        "gpu_temperature",
        lambda d: gpu(d, 4).update(temperature_c=95),
        Status.FAIL,
        "GPU_TEMPERATURE",
        Action.ISOLATE,
    ),
    ("gpu_power", lambda d: gpu(d, 6).update(power_w=690), Status.WARN, "GPU_POWER", Action.MONITOR),
    (
        "gpu_persistence",
        lambda d: gpu(d, 7).update(persistence=False),
        Status.WARN,
        "GPU_PERSISTENCE_OFF",
        Action.MONITOR,
    ),
    (
        "gpu_throttle",
        lambda d: gpu(d, 1).update(throttle_reasons=["gpu_idle", "hw_thermal_slowdown"]),
        Status.WARN,
        "GPU_THROTTLE",
        Action.MONITOR,
    ),
    (
        "nvlink_state",
        lambda d: gpu(d, 2).update(nvlink={"links": 18, "inactive": [4]}),
        Status.FAIL,
        "NVLINK_DOWN",
        Action.RESET,
    ),
    (
        "gpu_leftover",
        lambda d: gpu(d, 0).update(memory_used_mib=900),
        Status.FAIL,
        "GPU_LEFTOVER_MEMORY",
        Action.RESET,
    ),
    ("gpu_count", lambda d: d["gpus"].pop(), Status.FAIL, "GPU_COUNT_LOW", Action.REBOOT),
]


@pytest.mark.parametrize(
    "name,mutate,status,code,action", CASES, ids=[f"{c[0]}-{c[3]}-{c[2].value}" for c in CASES]
)
def test_fault_is_caught(gpu_fixture, ctx_factory, name, mutate, status, code, action):
    gpu_fixture(mutate)
    health = {"checks": {"gpu_count": {"expected": 8}}}
    r = run(ctx_factory(health=health), name)
    assert (r.status, r.code, r.action) == (status, code, action), r
    assert r.reason and "\n" not in r.reason


def test_power_threshold_is_per_model(gpu_fixture, ctx_factory):
    def a100(d):
        for g in d["gpus"]:
            g.update(model="A100", name="NVIDIA A100-SXM4-80GB", power_w=390)

    gpu_fixture(a100)
    r = run(ctx_factory(), "gpu_power")
    assert r.status == Status.WARN and "380" in r.reason  # A100's built-in warn, not H100's 680
    r = run(ctx_factory(health={"thresholds": {"A100": {"power_warn_w": 400}}}), "gpu_power")
    assert r.status == Status.OK


def test_persistence_can_be_configured_to_fail(gpu_fixture, ctx_factory):
    gpu_fixture(lambda d: gpu(d, 0).update(persistence=False))
    r = run(ctx_factory(health={"checks": {"gpu_persistence": {"severity": "fail"}}}), "gpu_persistence")
    assert r.status == Status.FAIL


def test_gpu_count_against_job_gpus_and_gres_conf(gpu_fixture, ctx_factory, tmp_path):
    gpu_fixture(lambda d: d["gpus"].pop(5))  # GPU 5 fell off
    (tmp_path / "gres.conf").write_text(
        "# comment\nNodeName=node[1-2] Name=gpu Type=h100 File=/dev/nvidia[0-7]\n"
        "NodeName=other Name=gpu Count=4\n"
    )
    env = {"SLURM_CONF": str(tmp_path / "slurm.conf"), "SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "4,5"}
    r = run(ctx_factory(hook="prolog", env=env), "gpu_count")
    assert r.status == Status.FAIL and r.code == "GPU_COUNT_LOW"
    assert r.details["expected"] == 8 and r.details["expected_from"] == "gres.conf"
    # with the count satisfied by config, the job-GPU test still fails on GPU 5
    r = run(
        ctx_factory(hook="prolog", env=env, health={"checks": {"gpu_count": {"expected": 7}}}), "gpu_count"
    )
    assert r.status == Status.FAIL and r.code == "GPU_JOB_MISSING" and "5" in r.reason


def test_leftover_only_looks_at_the_jobs_gpus_in_the_prolog(gpu_fixture, ctx_factory):
    gpu_fixture(lambda d: gpu(d, 6).update(memory_used_mib=5000))
    env = {"SLURM_JOB_ID": "9", "SLURM_JOB_GPUS": "0,1"}
    assert run(ctx_factory(hook="prolog", env=env), "gpu_leftover").status == Status.OK
    env["SLURM_JOB_GPUS"] = "5,6"
    r = run(ctx_factory(hook="prolog", env=env), "gpu_leftover")
    assert r.status == Status.FAIL and "GPU 6" in r.reason


def test_leftover_process_tied_to_a_real_pid(gpu_fixture, ctx_factory, reap):
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    reap(proc.pid)
    gpu_fixture(lambda d: gpu(d, 2).update(processes=[{"pid": proc.pid, "used_mib": 70000}]))
    r = run(ctx_factory(), "gpu_leftover")
    assert r.code == "GPU_LEFTOVER_PROCESS" and str(proc.pid) in r.reason
    proc.kill()
    proc.wait()
    r = run(ctx_factory(), "gpu_leftover")  # the pid is gone: its memory is free again
    assert r.status == Status.OK


@pytest.mark.parametrize("name", GPU_CHECKS)
def test_hang_in_a_probe_fails_within_its_deadline_naming_the_check(gpu_fixture, ctx_factory, name):
    call = {
        "gpu_count": "gpus",
        "gpu_ecc": "ecc",
        "gpu_memory_errors": "retired_pages",
        "gpu_temperature": "temperature",
        "gpu_power": "power",
        "gpu_persistence": "persistence",
        "gpu_throttle": "throttle",
        "nvlink_state": "nvlink",
        "gpu_leftover": "processes",
        "xid": "xid",
    }[name]
    gpu_fixture(lambda d: d.update(inject={"hang": {"call": call, "seconds": 30}}))
    t0 = time.monotonic()
    r = run(ctx_factory(), name, timeout=0.3)
    assert time.monotonic() - t0 < 1.0
    assert r.status == Status.FAIL and r.code == "CHECK_TIMEOUT" and name in r.reason


def test_after_a_hang_other_gpu_checks_are_not_started(gpu_fixture, ctx_factory):
    gpu_fixture(lambda d: d.update(inject={"hang": {"call": "ecc", "seconds": 30}}))
    ctx = ctx_factory()
    specs = [CATALOG[n] for n in ("gpu_ecc", "gpu_temperature", "memory_available")]
    t0 = time.monotonic()
    results = run_checks(ctx, specs, deadline=time.monotonic() + 5)
    assert time.monotonic() - t0 < 3.0
    assert [r.status for r in results] == [Status.FAIL, Status.UNKNOWN, Status.OK]
    assert "hung in gpu_ecc" in results[1].reason


def test_nvml_error_gpu_lost_fails_other_errors_are_unknown(gpu_fixture, ctx_factory):
    gpu_fixture(
        lambda d: d.update(inject={"nvml_error": {"call": "temperature", "error": "GPU_IS_LOST", "gpu": 2}})
    )
    r = run(ctx_factory(), "gpu_temperature")
    assert r.status == Status.FAIL and r.code == "NVML_GPU_IS_LOST"
    gpu_fixture(lambda d: d.update(inject={"nvml_error": {"call": "power", "error": "UNKNOWN"}}))
    r = run(ctx_factory(), "gpu_power")
    assert r.status == Status.UNKNOWN and r.details["internal"]


def test_missing_fixture_is_unknown_not_a_failure(ctx_factory):
    r = run(ctx_factory(), "gpu_ecc")  # no fixture written
    assert r.status == Status.UNKNOWN and r.code == "FIXTURE" and r.details["internal"]


def test_auto_backend_without_nvml_driver_is_unknown(ctx_factory):
    r = run(ctx_factory(health={"backend": "auto"}), "gpu_ecc")
    assert r.status == Status.UNKNOWN and r.code.startswith(("NVML_", "NO_NVML"))


def test_scoped_fault_is_seen_only_by_its_job(gpu_fixture, ctx_factory, monkeypatch):
    patch = {"gpus": {3: {"ecc": {"volatile_uncorrected": 5}}}}
    gpu_fixture(lambda d: d.update(scoped=[{"scope": "777", "patch": patch}]))
    monkeypatch.setenv("SLURM_JOB_ID", "778")
    assert run(ctx_factory(), "gpu_ecc").status == Status.OK
    monkeypatch.setenv("SLURM_JOB_ID", "777")
    r = run(ctx_factory(), "gpu_ecc")
    assert r.code == "GPU_ECC_UNCORRECTED" and "GPU 3: 5" in r.reason
    monkeypatch.delenv("SLURM_JOB_ID")
    monkeypatch.setenv("SLURMKIT_SIM_SCOPE", "777")
    assert run(ctx_factory(), "gpu_ecc").status == Status.FAIL


def test_fixture_read_through_the_trusted_yaml_loader(tmp_path, gpu_fixture):
    """Root reads the fixture in the prolog: a file another account could have written is
    refused, and bad YAML is named with its line."""
    from slurmkit.core import trust
    from slurmkit.health.backends import BackendUnavailable
    from slurmkit.health.backends.simulated import SimulatedBackend

    path = gpu_fixture()
    assert len(SimulatedBackend(str(path)).gpus()) == 8
    os.chmod(path, 0o666)  # anyone may rewrite it: planted
    with pytest.raises(BackendUnavailable, match="not trusted"):
        SimulatedBackend(str(path))
    assert any(p == str(path) for p, _ in trust.REJECTED)
    os.chmod(path, 0o644)
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)  # nobody's file
        with pytest.raises(BackendUnavailable, match="not trusted"):
            SimulatedBackend(str(path))
        os.chown(path, 0, 0)
    path.write_text("gpus:\n  - model: H100\n  bad: [\n")
    with pytest.raises(
        BackendUnavailable, match=r"invalid simulated GPU fixture: .*node1\.yaml:\d+: invalid YAML"
    ):
        SimulatedBackend(str(path))
