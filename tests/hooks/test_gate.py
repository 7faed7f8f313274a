"""The prolog/epilog/healthcheck entry points as whole processes, the way slurmd runs them:
as root, with no PATH or HOME. ``scontrol`` is a recording fake here (the real drain
is exercised on the devcluster)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.health.conftest import REPO

PROLOG = str(REPO / "prolog" / "slurmkit-prolog")
EPILOG = str(REPO / "epilog" / "slurmkit-epilog")
HEALTHCHECK = str(REPO / "prolog" / "slurmkit-healthcheck")


def hook(script, config, env_extra=None, timeout=30):
    env = {
        "SLURMKIT_CONFIG": str(config),
        "SLURMKIT_CACHE_DIR": str(Path(config).parent / "cache"),  # the hooks' config cache
        "SLURMD_NODENAME": "node1",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_UID": "65534",
        "SLURM_JOB_USER": "nobody",
        "SLURM_JOB_GPUS": "0,1",
    }
    env.update(env_extra or {})
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=timeout)
    return res, time.monotonic() - t0


def log_records(tmp_path):
    path = tmp_path / "log" / "health.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_healthy_node_passes_and_records(gpu_fixture, site, fake_scontrol, tmp_path):
    gpu_fixture()
    res, _ = hook(PROLOG, site(slurm={"bin_dir": fake_scontrol.bin_dir}))
    assert res.returncode == 0, res.stderr
    rec = log_records(tmp_path)[-1]
    assert rec["status"] == "ok" and rec["hook"] == "prolog" and rec["job_id"] == "4242"
    assert fake_scontrol.calls() == []  # no Slurm command on the happy path
    prom = (tmp_path / "metrics" / "slurmkit_health_prolog_node1.prom").read_text()
    assert 'slurmkit_health_status{hook="prolog",node="node1"} 0.0' in prom


def test_ecc_fault_exits_nonzero_and_sets_a_machine_readable_drain_reason(
    gpu_fixture, site, fake_scontrol, tmp_path
):
    gpu_fixture(lambda d: d["gpus"][3]["ecc"].update(volatile_uncorrected=2))
    fake_scontrol.set_node("node1", "ALLOCATED")
    res, _ = hook(PROLOG, site(slurm={"bin_dir": fake_scontrol.bin_dir}))
    assert res.returncode == 1
    update = [c for c in fake_scontrol.calls() if c[:1] == ["update"]]
    assert update == [
        [
            "update",
            "NodeName=node1",
            "State=DRAIN",
            "Reason=slurmkit:GPU_ECC_UNCORRECTED gpu_ecc: GPU 3: 2 uncorrected volatile ECC errors",
        ]
    ]
    rec = log_records(tmp_path)[-1]
    assert rec["status"] == "fail" and rec["exit_code"] == 1
    assert rec["drain_reason"].startswith("slurmkit:GPU_ECC_UNCORRECTED")
    assert "slurmkit:GPU_ECC_UNCORRECTED" in res.stderr  # slurmd logs the hook's stderr
    prom = (tmp_path / "metrics" / "slurmkit_health_prolog_node1.prom").read_text()
    assert 'slurmkit_health_status{hook="prolog",node="node1"} 2.0' in prom


def test_an_admins_drain_reason_is_never_overwritten(gpu_fixture, site, fake_scontrol):
    gpu_fixture(lambda d: d["gpus"][0]["ecc"].update(volatile_uncorrected=1))
    fake_scontrol.set_node("node1", "IDLE+DRAIN", "bios update")
    res, _ = hook(PROLOG, site(slurm={"bin_dir": fake_scontrol.bin_dir}))
    assert res.returncode == 1  # still a failing prolog
    assert not [c for c in fake_scontrol.calls() if c[:1] == ["update"]]


#: The prolog with its default paths (where a bad config sends the record) moved under a
#: temporary directory: a test must never write to the system's /var/log/slurmkit.
PROLOG_WITH_DEFAULTS_UNDER = """
import sys
import slurmkit.hooks.gate as gate
root = sys.argv[1]
gate._default_paths = lambda: {"log_dir": root + "/log", "metrics_dir": root + "/metrics"}
gate.main("prolog")
"""


def test_bad_config_fails_open(gpu_fixture, tmp_path):
    gpu_fixture()
    bad = tmp_path / "bad.yaml"
    bad.write_text("health:\n  backend: simulated\n  prolog_deadlin: 3\n")
    res = subprocess.run(
        [sys.executable, "-c", PROLOG_WITH_DEFAULTS_UNDER, str(tmp_path / "defaults")],
        env={"SLURMKIT_CONFIG": str(bad), "SLURMD_NODENAME": "node1", "SLURM_JOB_ID": "4242"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 0
    assert "config error, failing open" in res.stderr and "prolog_deadlin" in res.stderr
    # the fail-open verdict is recorded where the defaults point
    rec = json.loads((tmp_path / "defaults" / "log" / "health.jsonl").read_text().splitlines()[-1])
    assert (
        rec["status"] == "unknown" and rec["exit_code"] == 0 and "prolog_deadlin" in rec["internal_errors"][0]
    )


def test_missing_fixture_fails_open_but_fail_closed_fails(site, fake_scontrol, tmp_path):
    res, _ = hook(PROLOG, site(slurm={"bin_dir": fake_scontrol.bin_dir}))  # no GPU fixture at all
    assert res.returncode == 0 and "failing open" in res.stderr
    rec = log_records(tmp_path)[-1]
    assert rec["internal_errors"] and rec["exit_code"] == 0
    prom = (tmp_path / "metrics" / "slurmkit_health_prolog_node1.prom").read_text()
    assert 'slurmkit_health_internal_error{hook="prolog",node="node1"} 1.0' in prom
    res, _ = hook(PROLOG, site(health={"fail_closed": True}, slurm={"bin_dir": fake_scontrol.bin_dir}))
    assert res.returncode == 1


def test_nvml_hang_ends_the_prolog_within_its_budget(gpu_fixture, site, fake_scontrol, tmp_path):
    gpu_fixture(lambda d: d.update(inject={"hang": {"call": "ecc", "seconds": 120}}))
    res, seconds = hook(
        PROLOG,
        site(health={"prolog_deadline": 3.0, "check_timeout": 1.0}, slurm={"bin_dir": fake_scontrol.bin_dir}),
    )
    assert res.returncode == 1
    assert seconds < 3.0 + 1.0  # budget, plus interpreter start
    rec = log_records(tmp_path)[-1]
    assert rec["drain_reason"].startswith("slurmkit:CHECK_TIMEOUT gpu_ecc: gpu_ecc did not finish")


def test_a_hang_in_init_is_bounded_too(gpu_fixture, site, fake_scontrol):
    gpu_fixture(lambda d: d.update(inject={"hang": {"call": "init", "seconds": 120}}))
    res, seconds = hook(
        PROLOG,
        site(health={"prolog_deadline": 2.0, "check_timeout": 0.5}, slurm={"bin_dir": fake_scontrol.bin_dir}),
    )
    assert res.returncode == 1 and seconds < 3.0


def assert_healthy_pass(res, tmp_path, hook, job_id):
    """Exit 0 alone does not tell a healthy pass from a fail-open one (slurmkit not
    importable, a config error, an internal error): the recorded verdict does."""
    assert res.returncode == 0, res.stderr
    assert "failing open" not in res.stderr, res.stderr
    recs = [r for r in log_records(tmp_path) if r["hook"] == hook and r["job_id"] == job_id]
    assert len(recs) == 1, (recs, res.stderr)
    assert recs[0]["status"] == "ok" and recs[0]["exit_code"] == 0 and not recs[0]["internal_errors"]
    assert {r["check"] for r in recs[0]["results"]} >= {"gpu_count", "gpu_ecc", "xid"}
    prom = (tmp_path / "metrics" / f"slurmkit_health_{hook}_node1.prom").read_text()
    assert f'slurmkit_health_status{{hook="{hook}",node="node1"}} 0.0' in prom
    assert f'slurmkit_health_internal_error{{hook="{hook}",node="node1"}} 0.0' in prom


def test_hooks_run_without_path_or_home(gpu_fixture, site, fake_scontrol, tmp_path):
    gpu_fixture()
    cfg = site(slurm={"bin_dir": fake_scontrol.bin_dir})
    res = subprocess.run(
        [sys.executable, PROLOG],
        env={"SLURMKIT_CONFIG": str(cfg), "SLURMD_NODENAME": "node1", "SLURM_JOB_ID": "1"},
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert_healthy_pass(res, tmp_path, "prolog", "1")


def test_the_installed_hook_script_runs_from_an_empty_environment(gpu_fixture, site, fake_scontrol, tmp_path):
    """``Prolog=<venv>/bin/slurmkit-prolog`` as slurmd runs it: ``env -i`` plus only the
    variables Slurm sets (and the config path), no PATH, HOME, VIRTUAL_ENV or PYTHONPATH,
    started from / ."""
    script = Path(sys.executable).parent / "slurmkit-prolog"
    assert script.exists(), f"{script} missing: reinstall slurmkit (pip install -e .) for the hook scripts"
    gpu_fixture()
    cfg = site(slurm={"bin_dir": fake_scontrol.bin_dir})
    res = subprocess.run(
        ["env", "-i", f"SLURMKIT_CONFIG={cfg}", "SLURMD_NODENAME=node1", "SLURM_JOB_ID=7", str(script)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert_healthy_pass(res, tmp_path, "prolog", "7")


@pytest.mark.parametrize("entry", ["hook-file", "entry-function"])
def test_a_hook_that_cannot_import_the_gate_fails_open_without_a_verdict(
    gpu_fixture, site, fake_scontrol, tmp_path, entry
):
    """What assert_healthy_pass tells apart: a broken install exits 0 too (it must not drain
    the node), but says so on stderr and records no verdict."""
    gpu_fixture()
    cfg = site(slurm={"bin_dir": fake_scontrol.bin_dir})
    run = (
        f"runpy.run_path({PROLOG!r}, run_name='__main__')"
        if entry == "thin-file"
        else "from slurmkit.hooks import run; run('prolog')"
    )
    code = f"import runpy, sys\nsys.modules['slurmkit.hooks.gate'] = None  # import fails\n{run}\n"
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
        env={"SLURMKIT_CONFIG": str(cfg), "SLURMD_NODENAME": "node1", "SLURM_JOB_ID": "8"},
    )
    assert res.returncode == 0, res.stderr
    assert "cannot import slurmkit" in res.stderr and "failing open" in res.stderr
    assert log_records(tmp_path) == []


def test_concurrent_prologs_lose_no_log_line(gpu_fixture, site, fake_scontrol, tmp_path):
    now = time.time()
    gpu_fixture(lambda d: d.update(xid_events=[{"xid": 13, "gpu": 1, "timestamp": now - 1, "message": "x"}]))
    cfg = site(slurm={"bin_dir": fake_scontrol.bin_dir})
    with ThreadPoolExecutor(8) as pool:
        runs = list(pool.map(lambda i: hook(PROLOG, cfg, {"SLURM_JOB_ID": str(1000 + i)})[0], range(8)))
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    recs = log_records(tmp_path)
    assert sorted(r["job_id"] for r in recs) == [str(1000 + i) for i in range(8)]
    warned = [r for r in recs if r["status"] == "warn"]
    assert len(warned) == 1  # the Xid 13 was judged by exactly one of the prologs


def test_healthcheck_drains_itself_on_failure(gpu_fixture, site, fake_scontrol):
    gpu_fixture(lambda d: d["gpus"][2].update(nvlink={"links": 18, "inactive": [0, 1]}))
    fake_scontrol.set_node("node1", "IDLE")
    res, _ = hook(
        HEALTHCHECK,
        site(slurm={"bin_dir": fake_scontrol.bin_dir}),
        {"SLURM_JOB_ID": "", "SLURM_JOB_GPUS": ""},
    )
    assert res.returncode == 2  # Nagios: fail
    assert any(
        c[:3] == ["update", "NodeName=node1", "State=DRAIN"] and "slurmkit:NVLINK_DOWN" in c[3]
        for c in fake_scontrol.calls()
    )


@settings(max_examples=40, deadline=None)
@given(st.text(min_size=0, max_size=300))
def test_drain_reason_is_one_prefixed_line_for_any_text(text):
    from slurmkit.verdict.base import CheckResult, Status

    reason = CheckResult("gpu_ecc", Status.FAIL, "GPU_ECC_UNCORRECTED", text).drain_reason()
    assert reason.startswith("slurmkit:GPU_ECC_UNCORRECTED gpu_ecc: ")
    assert "\n" not in reason and "\r" not in reason and len(reason) < 260


def test_hostile_reason_reaches_scontrol_as_one_argument(gpu_fixture, site, fake_scontrol):
    hostile = 'a\'; touch /tmp/slurmkit-pwned; echo "$(id)" `x`'
    gpu_fixture(
        lambda d: d.update(
            xid_events=[
                {"xid": 79, "gpu": None, "timestamp": time.time(), "message": hostile, "pci": hostile}
            ]
        )
    )
    res, _ = hook(PROLOG, site(slurm={"bin_dir": fake_scontrol.bin_dir}))
    assert res.returncode == 1
    upd = [c for c in fake_scontrol.calls() if c[:1] == ["update"]][0]
    assert len(upd) == 4 and upd[3].startswith("Reason=slurmkit:XID_79 xid: " + hostile)
    assert not os.path.exists("/tmp/slurmkit-pwned")
