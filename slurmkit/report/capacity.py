"""``report capacity`` and ``report build-vs-rent``: computing and rendering.

Capacity of a group = installed GPUs x window seconds, where the window ends at
``min(until, now)`` (the future has no used hours yet). The formula and the caveats
(nodes counted as available while down) are in :mod:`.cost`.
"""

from __future__ import annotations

import io
import time
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

from slurmkit.report.aggregate import NO_GPU
from slurmkit.report.cost import BuildVsRent, NodeGpus
from slurmkit.report.table import write_csv, write_markdown, write_text
from slurmkit.report.window import Window


def used_from_usage(groups: Dict[Tuple, Any], total: Any, by: str) -> Tuple[Dict[str, float], float]:
    """The used GPU-seconds per group (partition or GPU type; none for ``total``) and in all,
    from the accumulators of the usage report ``--by BY`` (``total``: no keys) over the same
    window: a group's used GPU-seconds are its usage GPU-seconds, every attempt clipped to the
    window. The usage view by GPU type puts attempts without GPUs in a group of their own,
    with no GPU-seconds, which has no row here."""
    if by == "total":
        return {}, total.gpu_seconds
    used = {
        k[0]: acc.gpu_seconds
        for k, acc in groups.items()
        if not (by == "gpu_type" and k[0] == NO_GPU and not acc.gpu_seconds)
    }
    return used, total.gpu_seconds


def capacity_rows(
    used: Dict[str, float],
    used_total: float,
    window: Window,
    *,
    by: str = "total",
    inventory: Optional[Dict[str, NodeGpus]] = None,
    gpus_override: Optional[int] = None,
    partitions: Optional[FrozenSet[str]] = None,
    now: Optional[float] = None,
) -> Dict[str, Any]:
    """``{"meta", "rows", "totals"}`` with available and used GPU-hours per group (``used``,
    ``used_total``: GPU-seconds, see :func:`used_from_usage`)."""
    end = min(window.end, int(now if now is not None else time.time()))
    seconds = max(0, end - window.start)
    available: Dict[str, int] = {}
    total_gpus = 0
    if gpus_override is not None:
        total_gpus = gpus_override
    else:
        for node in (inventory or {}).values():
            parts = [p for p in node.partitions if partitions is None or p in partitions]
            if partitions is not None and not parts:
                continue
            total_gpus += node.total
            if by == "partition":
                for p in parts:
                    available[p] = available.get(p, 0) + node.total
            elif by == "gpu_type":
                for t, n in node.gpus.items():
                    available[t] = available.get(t, 0) + n

    def row(name: str, gpus: int, used_s: float) -> Dict[str, Any]:
        avail_h = gpus * seconds / 3600.0
        return {
            "group": name,
            "gpus": gpus,
            "available_gpu_hours": round(avail_h, 3),
            "used_gpu_hours": round(used_s / 3600.0, 3),
            "used_pct": round(100.0 * used_s / 3600.0 / avail_h, 2) if avail_h else None,
        }

    rows: List[Dict[str, Any]] = []
    if by != "total":
        for name in sorted(set(available) | set(used)):
            rows.append(row(name or "-", available.get(name, 0), used.get(name, 0.0)))
    totals = row("TOTAL", total_gpus, used_total)
    return {
        "meta": {
            "window": window.to_dict(),
            "seconds": seconds,
            "by": by,
            "source": "gpus override" if gpus_override is not None else "sinfo",
        },
        "rows": rows,
        "totals": totals,
    }


def render_capacity(data: Dict[str, Any], fmt: str) -> str:
    cols = ["group", "gpus", "available_gpu_hours", "used_gpu_hours", "used_pct"]
    rows = data["rows"] + [data["totals"]]
    buf = io.StringIO()
    if fmt == "csv":
        write_csv(buf, cols, ([r[c] for c in cols] for r in data["rows"] or [data["totals"]]))
        return buf.getvalue()

    def cell(c: str, v: Any) -> str:
        if v is None:
            return "-"
        if c in ("available_gpu_hours", "used_gpu_hours"):
            return f"{v:,.2f}"
        if c == "used_pct":
            return f"{v:.1f}"
        return str(v)

    cells = [[cell(c, r[c]) for c in cols] for r in rows]
    numeric = [i > 0 for i in range(len(cols))]
    if fmt == "markdown":
        write_markdown(buf, cols, cells, numeric)
        return buf.getvalue()
    write_text(
        buf, cols, cells, numeric, title=f"GPU capacity used, {data['meta']['window']['label']}", rules=False
    )
    return buf.getvalue()


def render_build_vs_rent(model: BuildVsRent, months: int, fmt: str) -> str:
    c = model.currency
    be = model.break_even_months
    lines = [
        ("hardware (one-time)", f"{model.hardware:,.0f} {c}"),
        (
            "own per month (power + cooling + staff)",
            f"{model.own_per_month:,.0f} {c} ({model.power_per_month:,.0f} + {model.cooling_per_month:,.0f} + "
            f"{model.staff_per_month:,.0f})",
        ),
        (
            "rent per month",
            f"{model.rent_per_month:,.0f} {c} ({model.gpus} GPUs x "
            f"{model.rent_per_gpu_hour:g} {c}/GPU-h x {model.hours_per_month:g} h x "
            f"{model.utilization:g})",
        ),
        ("saving per month when owning", f"{model.saving_per_month:,.0f} {c}"),
        (
            "break-even",
            "never (renting costs no more than running your own)" if be is None else f"{be:.2f} months",
        ),
    ]
    buf = io.StringIO()
    if fmt == "markdown":
        buf.write("| item | value |\n|---|---|\n")
        for k, v in lines:
            buf.write(f"| {k} | {v} |\n")
        buf.write("\n| month | own (cumulative) | rent (cumulative) |\n|---:|---:|---:|\n")
    else:
        w = max(len(k) for k, _ in lines)
        for k, v in lines:
            buf.write(f"{k.ljust(w)}  {v}\n")
        buf.write(f"\n{'month':>5}  {'own (cumulative)':>18}  {'rent (cumulative)':>18}\n")
    step = 1 if months <= 24 else max(1, months // 24)
    for m in range(0, months + 1, step):
        own, rent = model.total_cost(m)
        if fmt == "markdown":
            buf.write(f"| {m} | {own:,.0f} | {rent:,.0f} |\n")
        else:
            buf.write(f"{m:>5}  {own:>18,.0f}  {rent:>18,.0f}\n")
    return buf.getvalue()
