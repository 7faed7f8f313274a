"""``slurmkit health``, ``node`` and ``kill-leaks`` through click, exit codes included.
Slurm answers from a recording fake scontrol (control flow only; the devcluster tests
run the same commands against real Slurm)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurmkit.cli.main import cli


@pytest.fixture
def runner():
    return CliRunner()


def invoke(runner, cfg, *args):
    return runner.invoke(cli, list(args), env={"SLURMKIT_CONFIG": str(cfg)}, catch_exceptions=False)


def test_health_list_shows_every_check(runner, site):
    res = invoke(runner, site(), "health", "list", "--json")
    assert res.exit_code == 0
    rows = json.loads(res.stdout)
    names = {r["name"]: r for r in rows}
    assert {"gpu_ecc", "xid", "infiniband", "nvlink_bandwidth", "allreduce_busbw"} <= set(names)
    assert names["gpu_ecc"]["tier"] == "fast" and names["nvlink_bandwidth"]["tier"] == "heavy"
    assert names["gpu_ecc"]["timeout_s"] == 2.0


@pytest.mark.parametrize(
    "mutate,code",
    [
        (None, 0),
        (lambda d: d["gpus"][0].update(power_w=700), 1),
        (lambda d: d["gpus"][0]["ecc"].update(volatile_uncorrected=1), 2),
        (lambda d: d.update(inject={"nvml_error": {"call": "any", "error": "UNKNOWN"}}), 3),
    ],
)
def test_health_run_nagios_exit_codes(runner, site, gpu_fixture, mutate, code):
    gpu_fixture(mutate)
    res = invoke(runner, site(), "health", "run", "--node", "node1", "--json")
    assert res.exit_code == code, res.output
    out = json.loads(res.stdout)
    assert out["exit_code"] == code and len(out["results"]) >= 10


def test_health_run_selected_checks_and_table(runner, site, gpu_fixture):
    gpu_fixture()
    res = invoke(runner, site(), "health", "run", "--node", "node1", "--check", "gpu_ecc", "--check", "xid")
    assert res.exit_code == 0
    assert res.stdout.splitlines()[0].split()[:3] == ["CHECK", "STATUS", "CODE"]
    assert [line.split()[0] for line in res.stdout.splitlines()[1:]] == ["gpu_ecc", "xid"]


def test_unknown_check_is_a_usage_error_in_one_line(site):
    import os
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-m", "slurmkit.cli.main", "health", "run", "--check", "nope"],
        env=dict(os.environ, SLURMKIT_CONFIG=str(site())),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert res.stderr.startswith("slurmkit: error: unknown check(s) nope; valid: gpu_count")
    assert len(res.stderr.strip().splitlines()) == 1


def test_resume_refuses_an_admins_drain(runner, site, gpu_fixture, fake_scontrol):
    gpu_fixture()
    fake_scontrol.set_node("node2", "IDLE+DRAIN", "waiting for a DIMM")
    res = invoke(runner, site(slurm={"bin_dir": fake_scontrol.bin_dir}), "node", "resume", "node2")
    assert res.exit_code == 1 and "drained by someone else" in res.stdout
    assert not [c for c in fake_scontrol.calls() if c[:1] == ["update"]]


def test_resume_after_the_fault_is_cleared(runner, site, gpu_fixture, fake_scontrol):
    cfg = site(slurm={"bin_dir": fake_scontrol.bin_dir})
    fake_scontrol.set_node(
        "node2", "IDLE+DRAIN", "slurmkit:GPU_ECC_UNCORRECTED gpu_ecc: GPU 3: 2 uncorrected"
    )
    gpu_fixture(lambda d: d["gpus"][3]["ecc"].update(volatile_uncorrected=2), node="node2")
    res = invoke(runner, cfg, "node", "resume", "node2")
    assert res.exit_code == 2 and "still fails: slurmkit:GPU_ECC_UNCORRECTED" in res.stdout
    assert not [c for c in fake_scontrol.calls() if c[:1] == ["update"]]
    gpu_fixture(node="node2")  # fault cleared
    res = invoke(runner, cfg, "node", "resume", "node2", "--dry-run")
    assert res.exit_code == 0 and "would resume" in res.stdout
    res = invoke(runner, cfg, "node", "resume", "node2")
    assert res.exit_code == 0 and "resumed" in res.stdout
    assert [c for c in fake_scontrol.calls() if c[:1] == ["update"]] == [
        ["update", "NodeName=node2", "State=RESUME"]
    ]


def test_resume_of_a_node_that_is_not_drained_does_nothing(runner, site, fake_scontrol):
    fake_scontrol.set_node("node1", "IDLE")
    res = invoke(runner, site(slurm={"bin_dir": fake_scontrol.bin_dir}), "node", "resume", "node1")
    assert res.exit_code == 0 and "not drained" in res.stdout


def test_resume_elsewhere_with_nvml_refuses_with_3(runner, site, fake_scontrol):
    fake_scontrol.set_node("gpu-node-77", "IDLE+DRAIN", "slurmkit:XID_79 xid: GPU 0: Xid 79")
    from slurmkit.hooks.nodeops import NotHere

    res = runner.invoke(
        cli,
        ["node", "resume", "gpu-node-77"],
        env={
            "SLURMKIT_CONFIG": str(site(health={"backend": "nvml"}, slurm={"bin_dir": fake_scontrol.bin_dir}))
        },
    )
    assert isinstance(res.exception, NotHere) and NotHere.exit_code == 3
    assert "ssh gpu-node-77" in str(res.exception)


def test_node_status(runner, site, gpu_fixture, fake_scontrol):
    fake_scontrol.set_node("node1", "IDLE+DRAIN", "slurmkit:NVLINK_DOWN nvlink_state: GPU 2")
    res = invoke(runner, site(slurm={"bin_dir": fake_scontrol.bin_dir}), "node", "status", "node1", "--json")
    assert res.exit_code == 0
    st = json.loads(res.stdout)
    assert st["slurmkit_drain"] is True and st["state"] == "IDLE+DRAIN"


def test_kill_leaks_cli_dry_run(runner, site, gpu_fixture, fake_scontrol, tmp_path):
    squeue = tmp_path / "fakebin" / "squeue"
    squeue.write_text("#!/bin/sh\nexit 0\n")
    squeue.chmod(0o755)
    gpu_fixture()
    res = invoke(
        runner,
        site(slurm={"bin_dir": fake_scontrol.bin_dir}),
        "kill-leaks",
        "--dry-run",
        "--node",
        "node1",
        "--json",
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["leaks"] == []


@pytest.mark.parametrize("extra", [[], ["--dry-run"]])
def test_kill_leaks_as_an_ordinary_user_refuses_to_start(runner, site, gpu_fixture, monkeypatch, extra):
    """Before: it scanned and killed what it could, then ended in an internal error writing
    root's audit log. Now: one line, exit 2, nothing scanned or killed."""
    from slurmkit.hooks import leaks

    called = []
    monkeypatch.setattr(leaks, "kill_leaks", lambda *a, **k: called.append(a) or pytest.fail("it started"))
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    gpu_fixture()
    res = runner.invoke(cli, ["kill-leaks", *extra], env={"SLURMKIT_CONFIG": str(site())})
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == leaks.NOT_ROOT_MESSAGE
    assert not called
