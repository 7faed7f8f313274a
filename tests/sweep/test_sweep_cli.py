"""``slurmkit sweep`` through click, with canned sinfo/squeue/sbatch text (control flow
and output only; the real Slurm path is tests/integration/test_sweep*.py)."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from slurmkit.cli.main import cli
from slurmkit.verdict.base import CheckResult, Status
from slurmkit.verdict.store import VerdictStore

SINFO = (
    "\n".join(
        [
            "node1|idle|gpu:h100:8(S:0-1)|sweep|64|512000|none",
            "node2|idle|gpu:h100:8(S:0-1)|sweep|64|512000|none",
            "node3|mixed|gpu:h100:8(S:0-1)|sweep|64|512000|none",
            "node4|drained|gpu:h100:8(S:0-1)|sweep|64|512000|slurmkit:GPU_ECC_UNCORRECTED gpu_ecc: 2 errors",
            "node5|idle|gpu:h100:8(S:0-1)|sweep|64|512000|none",
        ]
    )
    + "\n"
)


@pytest.fixture
def env(tmp_path, fake_slurm, site_config):
    cfg = site_config(max_nodes=2, max_concurrent=3, min_interval_s=0)
    fake_slurm.sinfo = SINFO
    fake_slurm.squeue = "77|77|RUNNING|root|sweep|node5|None|slurmkit-sweep.node5\n"
    return cfg, fake_slurm


def invoke(cfg, *args):
    return CliRunner().invoke(cli, ["sweep", "--config", cfg.path, *args], catch_exceptions=False)


def test_dry_run_plans_and_submits_nothing(env):
    cfg, fake = env
    store = VerdictStore(cfg.section("paths")["shared_dir"])
    store.record("node1", [CheckResult("x", Status.OK)], 60)  # node1 passed, node2 never: node2 first
    res = invoke(cfg, "--dry-run", "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert [j["node"] for j in report["jobs"]] == ["node2", "node1"]
    assert report["plan"]["slots"] == 2 and report["plan"]["running"] == 1
    assert report["running_sweep_jobs"] == {"node5": "77"}
    assert "--nodelist=node2" in report["jobs"][0]["sbatch"] and "exec " in report["jobs"][0]["script"]
    assert fake.commands("sbatch") == []


def test_submit_passes_args_and_script(env):
    cfg, fake = env
    res = invoke(cfg, "--max-nodes", "1")
    assert res.exit_code == 0, res.output
    [call] = fake.commands("sbatch")
    assert "--nodelist=node1" in call and "--partition=sweep" in call and "--exclusive" in call
    assert "--no-requeue" in call and "--job-name=slurmkit-sweep.node1" in call
    script = fake.inputs[fake.calls.index(call)]
    assert "sweep run-node --exit-zero --node node1" in script and "--gpu-model h100" in script
    assert "1001" in res.stdout
    metrics = (cfg.section("paths")["metrics_dir"]) + "/slurmkit_sweep.prom"
    assert "slurmkit_sweep_run_submitted 1.0" in open(metrics).read()


def test_every_sbatch_failing_exits_3(env):
    cfg, fake = env
    fake.sbatch_fail = "sbatch: error: Invalid partition name specified"
    res = CliRunner().invoke(cli, ["sweep", "--config", cfg.path], standalone_mode=False)
    from slurmkit.errors import SlurmCommandError

    assert isinstance(res.exception, SlurmCommandError) and res.exception.exit_code == 3
    assert "Invalid partition" in str(res.exception)


def test_bad_config_key_is_exit_2_with_valid_keys(tmp_path, fake_slurm):
    path = tmp_path / "bad.yaml"
    path.write_text("sweep:\n  max_nodez: 3\n")
    res = CliRunner().invoke(cli, ["sweep", "--config", str(path), "--dry-run"], standalone_mode=False)
    assert res.exception.exit_code == 2
    assert "bad.yaml:2: sweep: unknown key 'max_nodez'; valid keys:" in str(res.exception)
    assert "max_nodes" in str(res.exception)


def test_status_json_and_table(env):
    cfg, fake = env
    store = VerdictStore(cfg.section("paths")["shared_dir"])
    store.record(
        "node1", [CheckResult("nvlink_bandwidth", Status.FAIL, "NVLINK_BW_FLOOR", value=100.0)], 3600
    )
    res = invoke(cfg, "status", "--json")
    assert res.exit_code == 0, res.output
    rows = {r["node"]: r for r in json.loads(res.stdout)}
    assert set(rows) == {"node1", "node2", "node3", "node4", "node5"}
    assert rows["node1"]["verdict"] == "fail" and rows["node1"]["problems"] == [
        "nvlink_bandwidth:NVLINK_BW_FLOOR"
    ]
    assert rows["node1"]["valid"] and rows["node1"]["valid_until"] > time.time()
    assert rows["node2"]["verdict"] == "never" and rows["node2"]["overdue"]
    assert rows["node4"]["state"] == "drained"
    table = invoke(cfg, "status")
    assert table.exit_code == 0 and "NVLINK_BW_FLOOR" in table.stdout and "never" in table.stdout


def test_negative_max_nodes_is_a_usage_error(env):
    cfg, _ = env
    res = CliRunner().invoke(cli, ["sweep", "--config", cfg.path, "--max-nodes", "-1"], standalone_mode=False)
    assert res.exception.exit_code == 2


def test_unknown_partition_is_a_config_error(env):
    cfg, fake = env
    fake.sinfo = ""  # what `sinfo -p bogus` answers: nothing, exit 0
    res = CliRunner().invoke(cli, ["sweep", "--config", cfg.path, "--dry-run"], standalone_mode=False)
    assert res.exception.exit_code == 2
    assert "sweep.partition: partition 'sweep' has no nodes" in str(res.exception)


def test_unusable_node_names_from_sinfo_are_skipped(env):
    cfg, fake = env
    fake.sinfo = (
        "node1|idle|gpu:h100:8|sweep|1|1|none\n"
        "$(reboot)|idle|gpu:8|sweep|1|1|none\n"
        "../x|idle||sweep|1|1|none\n"
    )
    res = invoke(cfg, "--dry-run", "--json")
    assert res.exit_code == 0, res.output
    assert [j["node"] for j in json.loads(res.stdout)["jobs"]] == ["node1"]


def test_invalidate_command(env):
    cfg, _ = env
    store = VerdictStore(cfg.section("paths")["shared_dir"])
    store.record(
        "node1",
        [
            CheckResult("nvlink_bandwidth", Status.FAIL, "NVLINK_BW_FLOOR"),
            CheckResult("gemm_tflops", Status.OK),
        ],
        3600,
    )
    dry = invoke(cfg, "invalidate", "node1", "--check", "nvlink_bandwidth", "--dry-run")
    assert dry.exit_code == 0 and "would end 1 valid verdict(s): nvlink_bandwidth" in dry.stdout
    assert set(store.valid("node1")) == {"nvlink_bandwidth", "gemm_tflops"}
    res = invoke(cfg, "invalidate", "node1", "--check", "nvlink_bandwidth")
    assert res.exit_code == 0 and set(store.valid("node1")) == {"gemm_tflops"}
    bad = CliRunner().invoke(
        cli, ["sweep", "--config", cfg.path, "invalidate", "../etc"], standalone_mode=False
    )
    assert bad.exception.exit_code == 2
