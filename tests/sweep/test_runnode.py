"""One node's pass: store, outliers, drain/resume decisions, notify, metrics.

The heavy tier is injected (results as the health catalog would return them) and
scontrol is canned; the real path runs in tests/integration/test_sweep.py.
"""

from __future__ import annotations

from slurmkit.sweep.runnode import open_store, run_node
from slurmkit.verdict.base import Action, CheckResult, Status


def heavy_returning(**values):
    def heavy(site_cfg, node, checks):
        return [CheckResult(name, Status.OK, value=v, unit="GB/s") for name, v in values.items()]

    return heavy


def failing_heavy(site_cfg, node, checks):
    return [
        CheckResult("nvlink_bandwidth", Status.OK, value=400.0),
        CheckResult(
            "gpu_ecc", Status.FAIL, "GPU_ECC_UNCORRECTED", "2 uncorrected errors on GPU 3", Action.RESET
        ),
        CheckResult("hbm_bandwidth", Status.FAIL, "HBM_BW_LOW", "GPU 1 at 1000 GB/s", Action.MONITOR),
    ]


def scontrol_updates(fake):
    return [c for c in fake.commands("scontrol") if "update" in c]


def test_clean_pass_is_recorded_with_metrics(site_config, fake_slurm, tmp_path):
    cfg = site_config(storage={"path": str(tmp_path), "size_mb": 2, "block_mb": 1})
    fake_slurm.nodes["node1"] = "NodeName=node1 State=IDLE+ALLOCATED Reason=(null)"
    run = run_node(cfg, "node1", "r1", "H100", heavy=heavy_returning(nvlink_bandwidth=400.0))
    assert run.status is Status.OK and run.drained is None and run.resumed is None
    entries = open_store(cfg).node("node1")
    assert set(entries) == {"nvlink_bandwidth", "storage_write", "storage_read"}
    assert entries["storage_write"]["value"] > 0 and entries["nvlink_bandwidth"]["run_id"] == "r1"
    assert open_store(cfg).read("node1")["meta"] == {"gpu_model": "h100"}
    assert open_store(cfg).last_pass("node1") is not None
    assert (
        run.metrics_file and 'slurmkit_sweep_pass_status{node="node1"} 0.0' in open(run.metrics_file).read()
    )
    assert scontrol_updates(fake_slurm) == []
    assert run.outliers_skipped  # a one-node fleet has no peers to compare with


def test_fail_drains_with_the_most_severe_reason(site_config, fake_slurm):
    cfg = site_config()
    run = run_node(cfg, "node1", "r1", "h100", heavy=failing_heavy)
    assert run.status is Status.FAIL
    [call] = scontrol_updates(fake_slurm)
    assert call[1:4] == ["update", "NodeName=node1", "State=DRAIN"]
    assert call[4] == "Reason=slurmkit:GPU_ECC_UNCORRECTED gpu_ecc: 2 uncorrected errors on GPU 3"
    assert run.drained.startswith("slurmkit:GPU_ECC_UNCORRECTED")
    assert open_store(cfg).read("node1")["last_pass_status"] == "fail"
    assert run.notified == "change"


def test_drain_can_be_disabled(site_config, fake_slurm):
    cfg = site_config(drain_on_fail=False)
    run = run_node(cfg, "node1", "r1", "h100", heavy=failing_heavy)
    assert run.status is Status.FAIL and run.drained is None and scontrol_updates(fake_slurm) == []


def test_pass_resumes_only_a_slurmkit_drain(site_config, fake_slurm):
    cfg = site_config()
    calls = []

    def resume(site_cfg, node, results):
        assert all(r.status is not Status.FAIL for r in results)
        calls.append(node)
        return True, "re-checked: ok"

    fake_slurm.nodes["node1"] = "NodeName=node1 State=IDLE+DRAIN Reason=slurmkit:XID_79 xid: fell off the bus"
    run = run_node(cfg, "node1", "r1", "h100", heavy=heavy_returning(bw=1.0), resume=resume)
    assert calls == ["node1"] and run.resumed is True and run.resume_message == "re-checked: ok"
    fake_slurm.nodes["node2"] = "NodeName=node2 State=IDLE+DRAIN Reason=admin: replacing fan"
    run = run_node(cfg, "node2", "r1", "h100", heavy=heavy_returning(bw=1.0), resume=resume)
    assert calls == ["node1"] and run.resumed is None  # an admin's drain is never touched


def test_heavy_tier_crash_is_unknown_never_a_drain(site_config, fake_slurm):
    cfg = site_config()

    def broken(site_cfg, node, checks):
        raise ImportError("No module named 'torch'")

    run = run_node(cfg, "node1", "r1", "h100", heavy=broken)
    assert run.status is Status.UNKNOWN and run.drained is None
    assert open_store(cfg).node("node1")["heavy_tier"]["code"] == "HEAVY_TIER_ERROR"


def test_outlier_flagged_by_fleet_rule_not_by_fixed_floor(site_config, fake_slurm):
    """Peers at ~400 GB/s, one node at 280 (30% under); every value is above the floor of
    200 that the health check would apply, so only the fleet rule can flag it."""
    cfg = site_config(outliers={"min_peers": 3, "k": 3.0})
    for i, v in enumerate([400.0, 402.0, 398.0, 401.0], 1):
        run = run_node(cfg, f"node{i}", "r1", "h100", heavy=heavy_returning(nvlink_bandwidth=v))
        assert run.status in (Status.OK,)
    slow = run_node(cfg, "node9", "r1", "h100", heavy=heavy_returning(nvlink_bandwidth=280.0))
    flagged = {r.check: r for r in slow.results}["outlier.nvlink_bandwidth"]
    assert flagged.status is Status.WARN and flagged.details["peers"] == 4
    assert {r.check: r for r in slow.results}["nvlink_bandwidth"].status is Status.OK
    assert slow.drained is None  # action: warn
    # with action: drain the same node is drained with an OUTLIER_ reason
    cfg2 = site_config(outliers={"min_peers": 3, "k": 3.0, "action": "drain"})
    slow = run_node(cfg2, "node9", "r2", "h100", heavy=heavy_returning(nvlink_bandwidth=280.0))
    assert slow.drained.startswith("slurmkit:OUTLIER_NVLINK_BANDWIDTH outlier.nvlink_bandwidth:")


def test_run_node_cli_runs_the_health_catalogs_heavy_tier(tmp_path, fake_slurm, site_config):
    """Through the real health engine and simulated backend (a fixture with one weak
    NVLink pair): Nagios exit 2, drain issued with the health check's own code."""
    import json
    import shutil
    from pathlib import Path

    import yaml
    from click.testing import CliRunner

    from slurmkit.cli.main import cli

    healthy = Path(__file__).resolve().parents[2] / "etc" / "gpu-fixtures" / "healthy-h100x8.yaml"
    fixture = tmp_path / "node7.yaml"
    shutil.copy(healthy, fixture)
    data = yaml.safe_load(fixture.read_text())
    data["nvlink_bandwidth_gbps"] = {"default": 390.0, "pairs": {"2-5": 90.0}}
    fixture.write_text(yaml.safe_dump(data))
    cfg = site_config(health={"backend": "simulated", "simulated_fixture": str(tmp_path / "{node}.yaml")})
    res = CliRunner().invoke(
        cli, ["sweep", "run-node", "--config", cfg.path, "--node", "node7", "--gpu-model", "h100", "--json"]
    )
    assert res.exit_code == 2, res.output
    out = json.loads(res.stdout)
    checks = {r["check"]: r for r in out["results"]}
    assert {"nvlink_bandwidth", "allreduce_busbw", "gemm_tflops", "hbm_bandwidth"} <= set(checks)
    assert checks["nvlink_bandwidth"]["code"] == "NVLINK_BW_FLOOR"
    assert checks["nvlink_bandwidth"]["value"] == 90.0
    assert checks["allreduce_busbw"]["details"]["expected_gbps"] == 460.0  # reference for the 90% alert
    assert out["drained"].startswith("slurmkit:NVLINK_BW_FLOOR nvlink_bandwidth:")
    [drain] = scontrol_updates(fake_slurm)
    assert drain[4] == "Reason=" + out["drained"]
    ok = CliRunner().invoke(
        cli,
        ["sweep", "run-node", "--config", cfg.path, "--node", "node7", "--exit-zero"],
    )
    assert ok.exit_code == 0  # the job's form: verdict in the store, exit 0


def test_fail_keeps_an_admins_drain_reason(site_config, fake_slurm):
    """An admin drained the node ("disk swap"): the sweep's FAIL is recorded, the reason kept."""
    fake_slurm.nodes["node1"] = "NodeName=node1 State=IDLE+DRAIN Reason=disk swap [root@2026-12-02T08:00:00]"
    cfg = site_config()
    run = run_node(cfg, "node1", "r1", "h100", heavy=failing_heavy)
    assert run.status is Status.FAIL and run.drained is None
    assert scontrol_updates(fake_slurm) == []
    assert "disk swap" in run.drain_note and "kept" in run.drain_note
    assert open_store(cfg).read("node1")["last_pass_status"] == "fail"


def test_fail_replaces_slurmkits_own_older_reason(site_config, fake_slurm):
    fake_slurm.nodes["node1"] = "NodeName=node1 State=IDLE+DRAIN Reason=slurmkit:XID_79 xid: old"
    run = run_node(site_config(), "node1", "r1", "h100", heavy=failing_heavy)
    [call] = scontrol_updates(fake_slurm)
    assert call[4] == "Reason=" + run.drained and run.drained.startswith("slurmkit:GPU_ECC_UNCORRECTED")
