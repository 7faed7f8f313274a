"""The sweep's cron logic as a library (slurmkit.sweep.cron), driven from Python without click,
with canned sinfo/squeue/sbatch text (the command-line view is tests/sweep/test_sweep_cli.py)."""

from __future__ import annotations

import time

import pytest

from slurmkit.errors import SlurmCommandError
from slurmkit.sweep import cron
from slurmkit.verdict.base import CheckResult, Status
from slurmkit.verdict.store import VerdictStore

SINFO = (
    "node1|idle|gpu:h100:8(S:0-1)|sweep|64|512000|none\n"
    "node2|idle|gpu:h100:8(S:0-1)|sweep|64|512000|none\n"
    "node3|mixed|gpu:h100:8(S:0-1)|sweep|64|512000|none\n"
)


def test_plan_and_submit_returns_the_report_and_submits_the_plan(fake_slurm, site_config):
    cfg = site_config(max_nodes=1, max_concurrent=3, min_interval_s=0)
    fake_slurm.sinfo = SINFO
    VerdictStore(cfg.section("paths")["shared_dir"]).record("node1", [CheckResult("x", Status.OK)], 60)
    dry = cron.plan_and_submit(cfg, config_path=None, dry_run=True, max_nodes=None)
    assert [j["node"] for j in dry["jobs"]] == ["node2"]  # never checked before the one that passed
    assert dry["dry_run"] and "exec " in dry["jobs"][0]["script"] and fake_slurm.commands("sbatch") == []
    report = cron.plan_and_submit(cfg, config_path=None, dry_run=False, max_nodes=None)
    [call] = fake_slurm.commands("sbatch")
    assert "--nodelist=node2" in call and report["jobs"][0]["job_id"] == "1001"


def test_fleet_status_falls_back_to_the_store_when_sinfo_fails(fake_slurm, site_config, monkeypatch):
    cfg = site_config()
    VerdictStore(cfg.section("paths")["shared_dir"]).record(
        "node1", [CheckResult("nvlink_bandwidth", Status.FAIL, "NVLINK_BW_FLOOR")], 3600
    )
    fake_slurm.sinfo = SINFO
    with_slurm = {r["node"]: r for r in cron.fleet_status(cfg, time.time())}
    assert set(with_slurm) == {"node1", "node2", "node3"} and with_slurm["node3"]["state"] == "mixed"
    expected = [("node1", "", ["nvlink_bandwidth:NVLINK_BW_FLOOR"])]
    store_only = cron.fleet_status(cfg, time.time(), ask_slurm=False)
    assert [(r["node"], r["state"], r["problems"]) for r in store_only] == expected

    def sinfo_fails(partition=None):
        raise SlurmCommandError(["sinfo"], "slurm_load_partitions: Unable to contact slurm controller")

    monkeypatch.setattr(cron.client, "node_states", sinfo_fails)
    degraded = cron.fleet_status(cfg, time.time())
    assert [(r["node"], r["state"], r["problems"]) for r in degraded] == expected


def test_invalidate_reports_what_was_valid_and_dry_run_writes_nothing(fake_slurm, site_config):
    cfg = site_config()
    store = VerdictStore(cfg.section("paths")["shared_dir"])
    store.record(
        "node1",
        [
            CheckResult("nvlink_bandwidth", Status.FAIL, "NVLINK_BW_FLOOR"),
            CheckResult("gemm_tflops", Status.OK),
        ],
        3600,
    )
    dry = cron.invalidate(cfg, ["node1"], ["nvlink_bandwidth"], dry_run=True)
    assert dry == {"node1": ["nvlink_bandwidth"]}
    assert set(store.valid("node1")) == {"nvlink_bandwidth", "gemm_tflops"}
    ended = cron.invalidate(cfg, ["node1"], [], dry_run=False)
    assert ended == {"node1": ["gemm_tflops", "nvlink_bandwidth"]}
    assert not store.valid("node1")


@pytest.mark.parametrize("stored", [float("inf"), float("nan"), "2099-01-01", None, True])
def test_status_uses_the_one_validity_rule(site_config, stored):
    """``valid_until: inf`` (or any non-finite, non-numeric value) has expired for
    ``verdict.store.still_valid``; ``sweep status`` says the same."""
    import json
    import os

    from slurmkit.verdict.store import still_valid

    cfg = site_config()
    store = VerdictStore(cfg.section("paths")["shared_dir"])
    store.record("node1", [CheckResult("nvlink_bandwidth", Status.OK, value=400.0)], 3600)
    store.record("node2", [CheckResult("nvlink_bandwidth", Status.OK, value=400.0)], 3600)
    path = os.path.join(store.root, "node1.json")
    with open(path) as f:
        doc = json.load(f)
    doc["checks"]["nvlink_bandwidth"]["valid_until"] = stored
    with open(path, "w") as f:
        json.dump(doc, f)
    now = time.time()
    assert not still_valid(store.node("node1")["nvlink_bandwidth"], now)
    rows = {r["node"]: r for r in cron.status_rows(cfg, now)}
    assert rows["node1"]["valid"] is False and rows["node1"]["valid_until"] is None
    assert rows["node1"]["valid_until_iso"] == ""
    assert rows["node2"]["valid"] is True and rows["node2"]["valid_until"] > now
