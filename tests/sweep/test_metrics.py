"""Textfile-collector metrics parse with prometheus-client's own parser."""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from slurmkit.sweep.metrics import CONTROLLER_FILE, node_file, write_controller_metrics, write_node_metrics
from slurmkit.verdict.base import CheckResult, Status


def samples(path):
    out = {}
    for fam in text_string_to_metric_families(path.read_text()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_node_metrics_parse_and_carry_values(tmp_path):
    results = [
        CheckResult(
            "nvlink_bandwidth",
            Status.OK,
            value=392.5,
            unit="GB/s",
            details={"floor_gbps": 335.0, "matrix_gbps": [[0, 400, 390], [400, 0, 250], [392.5, 250, 0]]},
        ),
        CheckResult(
            "allreduce_busbw",
            Status.FAIL,
            "ALLREDUCE_BUSBW_LOW",
            value=300.0,
            unit="GB/s",
            details={"expected_gbps": 460.0},
        ),
        CheckResult(
            "outlier.nvlink_bandwidth",
            Status.WARN,
            "OUTLIER_NVLINK_BANDWIDTH",
            value=392.5,
            details={"mads": 4.2},
        ),
        CheckResult("storage_write", Status.OK, value=1.25, unit="GB/s"),
    ]
    path = write_node_metrics(str(tmp_path / "m"), "node1", results, gpu_model="h100", finished_at=1234.0)
    assert path.endswith("slurmkit_sweep_node_node1.prom") and path.endswith(node_file("node1"))
    s = samples(tmp_path / "m" / node_file("node1"))
    n = ("node", "node1")
    assert (
        s[
            (
                "slurmkit_sweep_check_value",
                (("check", "nvlink_bandwidth"), ("gpu_model", "h100"), n, ("unit", "GB/s")),
            )
        ]
        == 392.5
    )
    assert (
        s[
            (
                "slurmkit_sweep_check_reference",
                (("check", "allreduce_busbw"), ("gpu_model", "h100"), n, ("unit", "GB/s")),
            )
        ]
        == 460.0
    )
    assert (
        s[("slurmkit_sweep_check_status", (("check", "allreduce_busbw"), ("code", "ALLREDUCE_BUSBW_LOW"), n))]
        == 2
    )
    assert (
        s[("slurmkit_sweep_outlier_mads", (("check", "nvlink_bandwidth"), ("gpu_model", "h100"), n))] == 4.2
    )
    assert s[("slurmkit_sweep_pass_status", (n,))] == 2
    nv = {dict(k[1])["gpu"]: v for k, v in s.items() if k[0] == "slurmkit_sweep_nvlink_gpu_gbps"}
    assert nv == {"0": 782.5, "1": 500.0, "2": 500.0}
    assert s[("slurmkit_sweep_pass_timestamp_seconds", (n,))] == 1234.0
    assert [p.name for p in (tmp_path / "m").iterdir()] == [node_file("node1")]  # atomic: no temporary left


def test_controller_metrics_include_never_swept_nodes(tmp_path):
    now = time.time()
    summary = {"node1": {"last_pass": now - 60, "status": "ok"}}
    write_controller_metrics(
        str(tmp_path),
        summary=summary,
        fleet_nodes=["node1", "node2"],
        run_at=now,
        submitted=1,
        running=2,
        overdue=1,
        period_s=604800.0,
    )
    s = samples(tmp_path / CONTROLLER_FILE)
    assert s[("slurmkit_sweep_node_last_pass_timestamp_seconds", (("node", "node1"),))] == now - 60
    assert s[("slurmkit_sweep_node_last_pass_timestamp_seconds", (("node", "node2"),))] == 0.0
    assert s[("slurmkit_sweep_node_pass_status", (("node", "node1"),))] == 0
    assert s[("slurmkit_sweep_run_submitted", ())] == 1 and s[("slurmkit_sweep_nodes_overdue", ())] == 1
    assert s[("slurmkit_sweep_period_seconds", ())] == 604800.0
