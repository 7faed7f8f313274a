"""Fleet-relative outliers: a node compared with its peers, no baseline file.

Why: a fixed floor catches a broken link; it does not catch a node 15-30% slower
than identical nodes, which still "passes" and slows every job it joins. superbench
needs a hand-curated baseline; gpu-fryer compares GPUs only within a node. Here the
peers *are* the baseline: for each GPU model and each probe, the median and MAD of
the other nodes' recent values.

The rule, for node ``n``, check ``c`` and GPU model ``m``:

* ``v_n``: the median of ``n``'s values of ``c`` within ``window_s`` (robust to one
  noisy pass);
* peers: every other node of model ``m`` with a value of ``c`` within the window.
  The node itself is left out, so a bad node does not drag its own baseline down,
  and on a two-node fleet only the slower node is below its peer;
* ``median`` and ``MAD = median(|v_p - median|)`` over the peers' values, with
  ``MAD >= mad_floor_fraction * |median|`` so identical (simulated, or very
  uniform) peers do not turn a 0.1% difference into an infinite z-score;
* outlier when ``v_n < median - k * MAD`` (or ``>`` for checks where lower is better).

With fewer than ``min_peers`` peers the verdict is unknown, not ok.
"""

from __future__ import annotations

import statistics
from typing import Any, Dict, Iterable, List, Mapping, Optional

from slurmkit.verdict.base import Action, CheckResult, Status

OUTLIER_PREFIX = "outlier."


def recent_value(doc: Mapping[str, Any], check: str, since: float) -> Optional[float]:
    """The median of a node document's values of ``check`` measured at or after ``since``."""
    hist = (doc.get("history") or {}).get(check) or []
    values = [
        float(v)
        for ts, v, *_ in hist
        if isinstance(ts, (int, float)) and ts >= since and isinstance(v, (int, float))
    ]
    return statistics.median(values) if values else None


def gpu_model_of(doc: Mapping[str, Any]) -> str:
    return str((doc.get("meta") or {}).get("gpu_model") or "unknown").lower()


def fleet_values(
    documents: Mapping[str, Mapping[str, Any]], check: str, gpu_model: str, since: float
) -> Dict[str, float]:
    """``{node: recent value}`` for nodes of ``gpu_model`` with a recent value of ``check``."""
    out: Dict[str, float] = {}
    for name, doc in documents.items():
        if gpu_model_of(doc) != gpu_model:
            continue
        v = recent_value(doc, check, since)
        if v is not None:
            out[name] = v
    return out


def median_mad(values: Iterable[float], mad_floor_fraction: float = 0.0) -> tuple:
    vals = list(values)
    med = statistics.median(vals)
    mad = statistics.median(abs(v - med) for v in vals)
    return med, max(mad, abs(med) * mad_floor_fraction)


def judge(
    node: str,
    documents: Mapping[str, Mapping[str, Any]],
    *,
    now: float,
    k: float,
    window_s: float,
    min_peers: int,
    mad_floor_fraction: float,
    action: str = "warn",
    checks: Optional[Iterable[str]] = None,
    lower_is_better: Iterable[str] = (),
    gpu_model: Optional[str] = None,
) -> List[CheckResult]:
    """One ``outlier.<check>`` result per numeric check of ``node``.

    ``documents`` are store documents (:meth:`VerdictStore.documents`) and must
    already include the node's own latest pass.
    """
    doc = documents.get(node) or {}
    model = (gpu_model or gpu_model_of(doc)).lower()
    since = now - window_s
    lower_better = set(lower_is_better)
    names = list(checks) if checks is not None else sorted((doc.get("history") or {}).keys())
    fail_status = Status.FAIL if action == "drain" else Status.WARN
    fail_action = Action.ISOLATE if action == "drain" else Action.MONITOR
    results: List[CheckResult] = []
    for check in names:
        if check.startswith(OUTLIER_PREFIX):
            continue
        mine = recent_value(doc, check, since)
        if mine is None:
            continue
        values = fleet_values(documents, check, model, since)
        values.pop(node, None)
        name = OUTLIER_PREFIX + check
        details: Dict[str, Any] = {"gpu_model": model, "peers": len(values), "value": mine, "k": k}
        if len(values) < min_peers:
            results.append(
                CheckResult(
                    name,
                    Status.UNKNOWN,
                    "OUTLIER_FEW_PEERS",
                    f"{len(values)} {model} peer(s) with a recent {check}; need {min_peers}",
                    value=mine,
                    details=details,
                )
            )
            continue
        med, mad = median_mad(values.values(), mad_floor_fraction)
        details.update(median=med, mad=mad)
        if check in lower_better:
            distance = (mine - med) / mad if mad else 0.0
            word = "above"
        else:
            distance = (med - mine) / mad if mad else 0.0
            word = "below"
        details["mads"] = round(distance, 2)
        pct = (100.0 * (mine - med) / med) if med else 0.0
        if distance > k:
            code = "OUTLIER_" + "".join(ch if ch.isalnum() else "_" for ch in check).upper()
            results.append(
                CheckResult(
                    name,
                    fail_status,
                    code,
                    f"{check} {mine:.4g} is {distance:.1f} MAD {word} the median {med:.4g} of "
                    f"{len(values)} {model} peers ({pct:+.0f}%)",
                    fail_action,
                    value=mine,
                    details=details,
                )
            )
        else:
            results.append(
                CheckResult(
                    name,
                    Status.OK,
                    "OK",
                    f"{check} {mine:.4g} within {k:g} MAD of {len(values)} {model} "
                    f"peers (median {med:.4g}, {pct:+.0f}%)",
                    value=mine,
                    details=details,
                )
            )
    return results
