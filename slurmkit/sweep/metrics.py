"""Prometheus textfile-collector output of the sweeps.

Two kinds of file, both written atomically through :func:`slurmkit.metrics.write_textfile`
(prometheus-client's ``write_to_textfile``: temporary file + rename) into
``paths.metrics_dir`` for node_exporter:

* ``slurmkit_sweep_node_<node>.prom`` on the swept node, by the sweep job: one series
  per check (value, status, outlier distance) of that node's latest pass. The node is
  in the file name and in a ``node`` label, so nodes sharing one metrics directory
  (the devcluster, or a shared textfile directory) never overwrite each other;
* ``slurmkit_sweep.prom`` on the host that runs ``slurmkit sweep`` from cron: the
  run itself, and the last-pass time of every node in the store (so the stale-sweep
  alert also fires for a node that is never idle and therefore never swept, which a
  per-node file could not show).

Metric names (used by etc/prometheus/slurmkit-rules.yml and the Grafana dashboard):

=============================================  =====================================================
``slurmkit_sweep_check_value``                 probe value; ``node``, ``check``, ``unit``, ``gpu_model``
``slurmkit_sweep_check_status``                0 ok, 1 warn, 2 fail, 3 unknown (Nagios), ``check``, ``code``
``slurmkit_sweep_check_reference``             the figure a value is judged against (floor or
                                               theoretical), where the check reports one
``slurmkit_sweep_outlier_mads``                MADs below the fleet median, ``check``
``slurmkit_sweep_nvlink_gpu_gbps``             per ``gpu``: weakest peer's a->b + b->a GB/s
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
from typing import Any, Dict, Iterable, List, Mapping, Optional

from slurmkit.verdict.base import CheckResult, Status, worst

log = logging.getLogger("slurmkit.sweep.metrics")

NODE_FILE_PREFIX = "slurmkit_sweep_node"
CONTROLLER_FILE = "slurmkit_sweep.prom"
#: detail keys a check may use for the figure its value is judged against
REFERENCE_KEYS = ("theoretical_gbps", "expected_gbps", "floor_gbps", "floor")


def node_file(node: str) -> str:
    from slurmkit.metrics import file_name

    return file_name(NODE_FILE_PREFIX, node)


def _write(directory: str, name: str, samples) -> Optional[str]:
    try:
        from slurmkit.metrics import write_textfile
    except ImportError:  # pragma: no cover - slurmkit.metrics is part of the package
        return None
    try:
        return write_textfile(os.path.join(directory, name), samples)
    except ImportError:
        log.warning(
            "prometheus-client is not installed (pip install 'slurmkit[metrics]'); no metrics written"
        )
    except OSError as exc:
        log.warning("cannot write metrics to %s: %s", directory, exc.strerror or exc)
    return None


def _reference(r: CheckResult) -> Optional[float]:
    for key in REFERENCE_KEYS:
        v = (r.details or {}).get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def nvlink_matrix(r: CheckResult) -> Optional[List[List[float]]]:
    """The N x N GB/s matrix of an NVLink result's details, whatever key holds it."""
    for key in ("matrix_gbps", "matrix", "bandwidth_matrix"):
        m = (r.details or {}).get(key)
        if isinstance(m, list) and m and all(isinstance(row, list) and len(row) == len(m) for row in m):
            try:
                return [[float(v) for v in row] for row in m]
            except (TypeError, ValueError):
                return None
    return None


def weakest_bidirectional(matrix: List[List[float]]) -> List[float]:
    """Per GPU: its weakest peer's ``a->b + b->a`` bandwidth (the article
    "How to Build a GPU Cluster for AI Training (No BS Guide)"'s
    "800 GB/s on H100" reads as bidirectional per GPU: NVLink4 is 900 GB/s that way)."""
    n = len(matrix)
    return [min((matrix[i][j] + matrix[j][i] for j in range(n) if j != i), default=0.0) for i in range(n)]


def node_samples(
    node: str, results: Iterable[CheckResult], *, gpu_model: Optional[str], finished_at: float
) -> List[Any]:
    from slurmkit.metrics import Sample

    model = gpu_model or "unknown"
    samples: List[Any] = []
    results = list(results)
    for r in results:
        samples.append(
            Sample(
                "slurmkit_sweep_check_status",
                "Latest sweep verdict per check: 0 ok, 1 warn, 2 fail, 3 unknown.",
                {"node": node, "check": r.check, "code": r.code},
                r.status.exit_code,
            )
        )
        if r.check.startswith("outlier."):
            mads = (r.details or {}).get("mads")
            if _number(mads):
                samples.append(
                    Sample(
                        "slurmkit_sweep_outlier_mads",
                        "MADs below (above, for lower-is-better "
                        "checks) the fleet median of the node's GPU model.",
                        {"node": node, "check": r.check[len("outlier.") :], "gpu_model": model},
                        float(mads),
                    )
                )
            continue
        labels = {"node": node, "check": r.check, "unit": r.unit or "", "gpu_model": model}
        matrix = nvlink_matrix(r) if r.check == "nvlink_bandwidth" else None
        if matrix is not None and len(matrix) > 1:
            for gpu, gbps in enumerate(weakest_bidirectional(matrix)):
                samples.append(
                    Sample(
                        "slurmkit_sweep_nvlink_gpu_gbps",
                        "Per GPU: weakest peer's bidirectional "
                        "NVLink copy bandwidth (GB/s) in the latest sweep.",
                        {"node": node, "gpu": str(gpu), "gpu_model": model},
                        gbps,
                    )
                )
        if _number(r.value):
            samples.append(
                Sample("slurmkit_sweep_check_value", "Latest sweep probe value.", labels, float(r.value))
            )
            ref = _reference(r)
            if ref is not None:
                samples.append(
                    Sample(
                        "slurmkit_sweep_check_reference",
                        "Figure the probe value is judged against (theoretical, expected or floor).",
                        labels,
                        ref,
                    )
                )
    samples.append(
        Sample(
            "slurmkit_sweep_pass_status",
            "Worst verdict of this node's latest sweep pass.",
            {"node": node},
            worst(results).exit_code,
        )
    )
    samples.append(
        Sample(
            "slurmkit_sweep_pass_timestamp_seconds",
            "End of this node's latest sweep pass.",
            {"node": node},
            finished_at,
        )
    )
    return samples


def write_node_metrics(
    directory: str,
    node: str,
    results: Iterable[CheckResult],
    *,
    gpu_model: Optional[str],
    finished_at: float,
    untrusted_files: int = 0,
) -> Optional[str]:
    try:
        samples = node_samples(node, results, gpu_model=gpu_model, finished_at=finished_at)
        from slurmkit.metrics import Sample
    except ImportError:
        return None
    samples = list(samples) + [
        Sample(
            "slurmkit_sweep_untrusted_files",
            "Files the pass ignored because a non-trusted account could have written them "
            "(a forged verdict; see docs/security.md).",
            {"node": node},
            untrusted_files,
        )
    ]
    return _write(directory, node_file(node), samples)


def write_controller_metrics(
    directory: str,
    *,
    summary: Mapping[str, Mapping[str, Any]],
    fleet_nodes: Iterable[str],
    run_at: float,
    submitted: int,
    running: int,
    overdue: int,
    period_s: float,
) -> Optional[str]:
    from slurmkit.metrics import Sample

    samples: List[Any] = []
    codes: Dict[str, int] = {s.value: s.exit_code for s in Status}
    for node in sorted(set(fleet_nodes) | set(summary)):
        entry = summary.get(node) or {}
        lp = entry.get("last_pass")
        samples.append(
            Sample(
                "slurmkit_sweep_node_last_pass_timestamp_seconds",
                "Last complete sweep pass per node (0: never).",
                {"node": node},
                float(lp) if _number(lp) else 0.0,
            )
        )
        st = entry.get("status")
        if st in codes:
            samples.append(
                Sample(
                    "slurmkit_sweep_node_pass_status",
                    "Verdict of each node's last pass (0 ok, 1 warn, 2 fail, 3 unknown).",
                    {"node": node},
                    codes[st],
                )
            )
    samples += [
        Sample("slurmkit_sweep_run_timestamp_seconds", "Last `slurmkit sweep` run.", {}, run_at),
        Sample("slurmkit_sweep_run_submitted", "Sweep jobs submitted by the last run.", {}, submitted),
        Sample(
            "slurmkit_sweep_running_jobs", "Sweep jobs queued or running after the last run.", {}, running
        ),
        Sample("slurmkit_sweep_nodes_overdue", "Nodes without a pass within the period.", {}, overdue),
        Sample("slurmkit_sweep_period_seconds", "Configured coverage period.", {}, period_s),
    ]
    return _write(directory, CONTROLLER_FILE, samples)
