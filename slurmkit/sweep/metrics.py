"""Prometheus textfile-collector output of the sweeps.

Two files, both written atomically with prometheus-client's ``write_to_textfile``
(temporary file + rename) into ``paths.metrics_dir`` for node_exporter:

* ``slurmkit_sweep_node.prom`` on the swept node, by the sweep job: one series per
  check (value, status, outlier distance) of that node's latest pass;
* ``slurmkit_sweep.prom`` on the host that runs ``slurmkit sweep`` from cron: the
  run itself, and the last-pass time of every node in the store (so the stale-sweep
  alert also fires for a node that is never idle and therefore never swept, which a
  per-node file could not show).

Metric names (used by etc/prometheus/slurmkit-rules.yml and the Grafana dashboard):

=============================================  =====================================================
``slurmkit_sweep_check_value``                 probe value, labels ``check``, ``unit``, ``gpu_model``
``slurmkit_sweep_check_status``                0 ok, 1 warn, 2 fail, 3 unknown (Nagios), ``check``, ``code``
``slurmkit_sweep_check_reference``             the figure a value is judged against (floor or
                                               theoretical), where the check reports one
``slurmkit_sweep_outlier_mads``                MADs below the fleet median, ``check``
``slurmkit_sweep_pass_status``                 worst status of the node's latest pass
``slurmkit_sweep_pass_timestamp_seconds``      when that pass finished
``slurmkit_sweep_node_last_pass_timestamp_seconds``  per ``node`` (0 = never), from the store
``slurmkit_sweep_node_pass_status``            per ``node``, status of its last pass
``slurmkit_sweep_run_timestamp_seconds``       last ``slurmkit sweep`` run
``slurmkit_sweep_run_submitted``               jobs it submitted
``slurmkit_sweep_running_jobs``                sweep jobs queued or running then
``slurmkit_sweep_nodes_overdue``               nodes past the coverage period
``slurmkit_sweep_period_seconds``              the configured coverage period
=============================================  =====================================================

prometheus-client is the ``[metrics]`` extra: without it the sweep logs one warning
and goes on (metrics must never fail a sweep).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Iterable, Mapping, Optional

from slurmkit.health.base import CheckResult, Status

log = logging.getLogger("slurmkit.sweep.metrics")

NODE_FILE = "slurmkit_sweep_node.prom"
CONTROLLER_FILE = "slurmkit_sweep.prom"
#: detail keys a check may use for the figure its value is judged against
REFERENCE_KEYS = ("theoretical_gbps", "expected_gbps", "floor_gbps", "floor")


def _registry():
    try:
        from prometheus_client import CollectorRegistry, Gauge  # noqa: F401
    except ImportError:
        log.warning("prometheus-client is not installed (pip install 'slurmkit[metrics]'); "
                    "no metrics written")
        return None
    return CollectorRegistry()


def _write(registry, directory: str, name: str) -> Optional[str]:
    from prometheus_client import write_to_textfile

    try:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, name)
        write_to_textfile(path, registry)
        return path
    except OSError as exc:
        log.warning("cannot write metrics to %s: %s", directory, exc.strerror or exc)
        return None


def _reference(r: CheckResult) -> Optional[float]:
    for key in REFERENCE_KEYS:
        v = (r.details or {}).get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def write_node_metrics(directory: str, node: str, results: Iterable[CheckResult], *,
                       gpu_model: Optional[str], finished_at: float) -> Optional[str]:
    registry = _registry()
    if registry is None:
        return None
    from prometheus_client import Gauge

    model = gpu_model or "unknown"
    value = Gauge("slurmkit_sweep_check_value", "Latest sweep probe value.", ["check", "unit", "gpu_model"],
                  registry=registry)
    status = Gauge("slurmkit_sweep_check_status", "Latest sweep verdict: 0 ok, 1 warn, 2 fail, 3 unknown.",
                   ["check", "code"], registry=registry)
    reference = Gauge("slurmkit_sweep_check_reference", "Figure the probe value is judged against.",
                      ["check", "unit", "gpu_model"], registry=registry)
    mads = Gauge("slurmkit_sweep_outlier_mads", "MADs below (above, lower-is-better) the fleet median.",
                 ["check", "gpu_model"], registry=registry)
    pass_status = Gauge("slurmkit_sweep_pass_status", "Worst verdict of this node's latest sweep pass.",
                        registry=registry)
    pass_ts = Gauge("slurmkit_sweep_pass_timestamp_seconds", "End of this node's latest sweep pass.",
                    registry=registry)
    worst = Status.OK
    for r in results:
        if r.status.severity > worst.severity:
            worst = r.status
        status.labels(r.check, r.code).set(r.status.exit_code)
        if r.check.startswith("outlier."):
            d = r.details or {}
            if isinstance(d.get("mads"), (int, float)):
                mads.labels(r.check[len("outlier."):], model).set(d["mads"])
            continue
        if isinstance(r.value, (int, float)) and not isinstance(r.value, bool):
            value.labels(r.check, r.unit or "", model).set(float(r.value))
            ref = _reference(r)
            if ref is not None:
                reference.labels(r.check, r.unit or "", model).set(ref)
    pass_status.set(worst.exit_code)
    pass_ts.set(finished_at)
    return _write(registry, directory, NODE_FILE)


def write_controller_metrics(directory: str, *, documents: Mapping[str, Mapping[str, Any]],
                             fleet_nodes: Iterable[str], run_at: float, submitted: int, running: int,
                             overdue: int, period_s: float) -> Optional[str]:
    registry = _registry()
    if registry is None:
        return None
    from prometheus_client import Gauge

    last = Gauge("slurmkit_sweep_node_last_pass_timestamp_seconds",
                 "Last complete sweep pass per node (0: never).", ["node"], registry=registry)
    pstatus = Gauge("slurmkit_sweep_node_pass_status", "Verdict of each node's last pass "
                    "(0 ok, 1 warn, 2 fail, 3 unknown).", ["node"], registry=registry)
    names = set(fleet_nodes) | set(documents)
    codes: Dict[str, int] = {s.value: s.exit_code for s in Status}
    for node in sorted(names):
        doc = documents.get(node) or {}
        lp = doc.get("last_pass")
        last.labels(node).set(float(lp) if isinstance(lp, (int, float)) else 0.0)
        st = doc.get("last_pass_status")
        if st in codes:
            pstatus.labels(node).set(codes[st])
    Gauge("slurmkit_sweep_run_timestamp_seconds", "Last `slurmkit sweep` run.", registry=registry).set(run_at)
    Gauge("slurmkit_sweep_run_submitted", "Sweep jobs submitted by the last run.",
          registry=registry).set(submitted)
    Gauge("slurmkit_sweep_running_jobs", "Sweep jobs queued or running at the last run.",
          registry=registry).set(running)
    Gauge("slurmkit_sweep_nodes_overdue", "Nodes without a pass within the period.",
          registry=registry).set(overdue)
    Gauge("slurmkit_sweep_period_seconds", "Configured coverage period.", registry=registry).set(period_s)
    return _write(registry, directory, CONTROLLER_FILE)
