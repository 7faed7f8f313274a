"""The etc/ deployment files: Prometheus rules (promtool when installed), Grafana JSON,
cron, systemd timer, the slurm.conf snippet, and the sweep section of etc/slurmkit.yaml.

promtool comes from Debian's ``prometheus`` package (``apt-get install prometheus``);
without it the rules are checked structurally and the promtool tests are skipped.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "etc/prometheus/slurmkit-rules.yml"
DASHBOARD = REPO / "etc/grafana/slurmkit-dashboard.json"

#: every metric name slurmkit writes (sweep + health) plus dcgm-exporter's power metric
KNOWN_METRICS = {
    "slurmkit_sweep_check_value",
    "slurmkit_sweep_check_status",
    "slurmkit_sweep_check_reference",
    "slurmkit_sweep_outlier_mads",
    "slurmkit_sweep_pass_status",
    "slurmkit_sweep_pass_timestamp_seconds",
    "slurmkit_sweep_nvlink_gpu_gbps",
    "slurmkit_sweep_node_last_pass_timestamp_seconds",
    "slurmkit_sweep_node_pass_status",
    "slurmkit_sweep_run_timestamp_seconds",
    "slurmkit_sweep_run_submitted",
    "slurmkit_sweep_running_jobs",
    "slurmkit_sweep_nodes_overdue",
    "slurmkit_sweep_period_seconds",
    "slurmkit_health_status",
    "slurmkit_health_internal_error",
    "slurmkit_gpu_power_watts",
    "DCGM_FI_DEV_POWER_USAGE",
}
PROMQL_WORDS = {
    "max",
    "min",
    "count",
    "sum",
    "by",
    "on",
    "time",
    "vector",
    "group_left",
    "or",
    "and",
    "label_values",
    "avg",
    "node",
    "gpu",
    "hook",
    "check",
    "unit",
    "gpu_model",
    "instance",
    "job",
    "code",
    "Hostname",
}


def metric_names(expr: str) -> set:
    expr = re.sub(r'"[^"]*"', '""', expr)  # label values
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    return {w for w in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr) if w not in PROMQL_WORDS}


def rules():
    return yaml.safe_load(RULES.read_text())


def test_rules_structure_and_required_alerts():
    data = rules()
    names = set()
    for group in data["groups"]:
        assert set(group) == {"name", "rules"}
        for rule in group["rules"]:
            assert {"alert", "expr", "labels", "annotations"} <= set(rule), rule
            assert rule["labels"]["severity"] in {"critical", "warning", "info"}
            assert "summary" in rule["annotations"]
            unknown = metric_names(rule["expr"]) - KNOWN_METRICS
            assert not unknown, f"{rule['alert']}: unknown metrics {unknown}"
            names.add(rule["alert"])
    # the alerts of "How to Build a GPU Cluster for AI Training (No BS Guide)"
    assert {
        "SlurmkitNvlinkBandwidthUnderFloor",
        "SlurmkitGpuPowerHigh",
        "SlurmkitAllreduceBusbwLow",
        "SlurmkitNodeFailingHealth",
        "SlurmkitSweepStale",
    } <= names
    exprs = {r["alert"]: r["expr"] for g in data["groups"] for r in g["rules"]}
    assert "< 800" in exprs["SlurmkitNvlinkBandwidthUnderFloor"] and "> 680" in exprs["SlurmkitGpuPowerHigh"]
    assert "0.9 *" in exprs["SlurmkitAllreduceBusbwLow"]


@pytest.mark.skipif(
    not shutil.which("promtool"), reason="promtool not installed (apt-get install prometheus)"
)
def test_promtool_check_rules():
    res = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


@pytest.mark.skipif(
    not shutil.which("promtool"), reason="promtool not installed (apt-get install prometheus)"
)
def test_promtool_rule_unit_tests_fire_and_stay_quiet():
    res = subprocess.run(
        ["promtool", "test", "rules", "rules_test.yml"],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_grafana_dashboard_queries_known_metrics():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["title"] and dash["uid"] and dash["panels"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    used = set()
    for panel in dash["panels"]:
        assert panel["targets"], panel["title"]
        for t in panel["targets"]:
            used |= metric_names(t["expr"])
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            used |= metric_names(var["query"]["query"])
    assert used <= KNOWN_METRICS, used - KNOWN_METRICS
    assert {
        "slurmkit_sweep_nvlink_gpu_gbps",
        "slurmkit_gpu_power_watts",
        "slurmkit_health_status",
        "slurmkit_sweep_node_last_pass_timestamp_seconds",
    } <= used


def test_cron_entry_runs_the_sweep():
    lines = [
        ln
        for ln in (REPO / "etc/cron.d/slurmkit").read_text().splitlines()
        if ln.strip() and not ln.startswith("#") and "=" not in ln.split()[0]
    ]
    assert lines
    for ln in lines:
        fields = ln.split(None, 6)
        assert len(fields) == 7 and fields[5] == "root"  # m h dom mon dow user command
        assert "slurmkit sweep" in fields[6]


def test_systemd_timer_and_service():
    import configparser

    timer = configparser.ConfigParser(strict=False)
    timer.read(REPO / "etc/systemd/slurmkit-sweep.timer")
    assert (
        timer["Timer"]["Unit"] == "slurmkit-sweep.service" and timer["Install"]["WantedBy"] == "timers.target"
    )
    service = configparser.ConfigParser(strict=False)
    service.read(REPO / "etc/systemd/slurmkit-sweep.service")
    assert service["Service"]["Type"] == "oneshot" and "slurmkit sweep" in service["Service"]["ExecStart"]


def test_slurm_snippet_has_preemption():
    text = (REPO / "etc/slurm/sweep-qos.conf.example").read_text()
    assert re.search(r"^PreemptType=preempt/partition_prio", text, re.M)
    assert re.search(r"^PreemptMode=REQUEUE", text, re.M)
    assert re.search(r"^PartitionName=sweep .*PriorityTier=1", text, re.M)
    assert "preempt/qos" in text and "sacctmgr -i add qos sweep" in text


def test_example_config_sweep_section_is_valid_and_matches_the_defaults():
    from slurmkit.config import load_site_config
    from slurmkit.core.schema import defaults
    from slurmkit.sweep.config import SITE_SCHEMA

    cfg = load_site_config(str(REPO / "etc/slurmkit.yaml"))
    assert cfg.section("sweep") == defaults(SITE_SCHEMA)
