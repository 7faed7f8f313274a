"""The health section's schema, threshold matching, and the Prometheus textfile writer."""

from __future__ import annotations

import os

import pytest

from slurmkit.config import load_site_config
from slurmkit.errors import ConfigError
from slurmkit.health.engine import parse_gpu_list
from slurmkit.health.thresholds import match_model, model_table, thresholds_for


def test_defaults_and_devcluster_keys(site):
    h = load_site_config(str(site())).section("health")
    assert h["backend"] == "simulated" and "{node}" in h["simulated_fixture"]
    assert h["prolog_deadline"] == 5.0 and h["fail_closed"] is False and h["drain_on_fail"] is True
    assert h["leaks"]["gpu_memory_fraction"] == 0.95
    table = model_table(h)
    assert {"H100", "H200", "B100", "A100", "default"} <= set(table)
    assert table["H100"]["power_warn_w"] == 680.0 and table["H100"]["leftover_memory_mib"] == 15.0


def test_unknown_key_names_file_line_and_valid_keys(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("health:\n  backend: simulated\n  checks:\n    gpu_ecc:\n      enabeld: false\n")
    with pytest.raises(ConfigError) as exc:
        load_site_config(str(p)).section("health")
    msg = str(exc.value)
    assert msg.startswith(
        f"{p}:5: health.checks.gpu_ecc: unknown key 'enabeld'; valid keys: enabled, timeout"
    )


def test_bad_values_are_rejected(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("health:\n  backend: cuda\n")
    with pytest.raises(ConfigError, match="must be one of auto, nvml, simulated"):
        load_site_config(str(p)).section("health")
    p.write_text("health:\n  thresholds:\n    H100: {power_warn_w: hot}\n")
    with pytest.raises(ConfigError, match=r":3: health.thresholds.H100.power_warn_w: expected a number"):
        load_site_config(str(p)).section("health")


def test_threshold_overrides_merge_over_builtin_models(site):
    over = {"thresholds": {"H200": {"power_warn_w": 650}, "L40S": {"power_warn_w": 300}}}
    h = load_site_config(str(site(health=over))).section("health")
    assert thresholds_for(h, "NVIDIA H200")["power_warn_w"] == 650
    assert thresholds_for(h, "NVIDIA H200")["allreduce_busbw_gbps"] == 480.0  # built-in H200 value kept
    assert thresholds_for(h, "NVIDIA L40S")["power_warn_w"] == 300
    assert thresholds_for(h, "Tesla V100-SXM2-32GB")["power_warn_w"] == 680.0  # default


def test_model_matching_is_by_word():
    models = ["H100", "H200", "A100", "default"]
    assert match_model(models, "NVIDIA H100 80GB HBM3") == "H100"
    assert match_model(models, "NVIDIA A100-SXM4-80GB") == "A100"
    assert match_model(models, "NVIDIA H1000") == "default"


def test_shipped_example_config_validates():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "etc", "slurmkit.yaml")
    cfg = load_site_config(path, full=True)  # every section, not just health
    assert cfg.section("health")["prolog_deadline"] <= 8.0  # below slurmd's "Prolog hung"


def test_gpu_list_parsing():
    assert parse_gpu_list("0,1,5") == [0, 1, 5]
    assert parse_gpu_list("0-3,6") == [0, 1, 2, 3, 6]
    assert parse_gpu_list("") is None and parse_gpu_list(None) is None
    assert parse_gpu_list("NoDevFiles") is None and parse_gpu_list("(null)") is None


def test_metrics_textfile_parses_with_prometheus_client(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from slurmkit.metrics import Sample, file_name, write_textfile

    path = tmp_path / "m" / file_name("slurmkit_health", "prolog", "node/1")
    assert path.name == "slurmkit_health_prolog_node_1.prom"
    write_textfile(
        str(path),
        [
            Sample("slurmkit_x", "doc", {"node": 'we"ird\nname'}, 2),
            Sample("slurmkit_x", "doc", {"node": "b"}, 3.5),
            Sample("slurmkit_y", "no labels", {}, 1),
        ],
    )
    fams = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    assert sorted(s.value for s in fams["slurmkit_x"].samples) == [2.0, 3.5]
    assert {s.labels["node"] for s in fams["slurmkit_x"].samples} == {'we"ird\nname', "b"}
    assert not [p for p in os.listdir(path.parent) if p != path.name]  # no temp file left behind
    with pytest.raises(ValueError, match="label names"):
        write_textfile(
            str(path), [Sample("slurmkit_x", "d", {"a": "1"}, 1), Sample("slurmkit_x", "d", {"b": "1"}, 1)]
        )


def test_verdict_metrics_parse(tmp_path, gpu_fixture, ctx_factory):
    from prometheus_client.parser import text_string_to_metric_families

    from slurmkit.health.catalog import select
    from slurmkit.health.engine import run_checks
    from slurmkit.verdict.base import Status, Tier
    from slurmkit.verdict.record import write_verdict_metrics

    gpu_fixture(lambda d: d["gpus"][4].update(power_w=700))
    ctx = ctx_factory()
    results = run_checks(ctx, select(Tier.FAST, "manual", health_cfg=ctx.health))
    path = write_verdict_metrics(
        str(tmp_path / "metrics"), "node1", "manual", Status.WARN, results, 0.1, False
    )
    fams = {f.name: f for f in text_string_to_metric_families(open(path).read())}
    power = {s.labels["gpu"]: s.value for s in fams["slurmkit_gpu_power_watts"].samples}
    assert power["4"] == 700.0 and len(power) == 8
    status = {s.labels["check"]: s.value for s in fams["slurmkit_health_check_status"].samples}
    assert status["gpu_power"] == 1.0 and status["gpu_ecc"] == 0.0
