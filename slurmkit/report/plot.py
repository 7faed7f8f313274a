"""``--plot FILE.png|svg``: a bar chart of GPU-hours per group, stacked by final state.

matplotlib (the ``[plot]`` extra) is imported only here and in :mod:`.efficiency`'s chart, through
``matplotlib.figure.Figure`` with the Agg canvas: no pyplot, no global backend, no
display needed, safe in cron. Groups are ordered by rank (by period for
day/week/month); beyond ``top`` bars the rest are summed into one ``other`` bar.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

from slurmkit.errors import UsageError
from slurmkit.report.aggregate import TIME_DIMS, Report

#: stable colours per state, so charts of different months compare at a glance
STATE_COLORS = {
    "COMPLETED": "#4c9a2a",
    "RUNNING": "#7fb7e6",
    "FAILED": "#d9534f",
    "CANCELLED": "#999999",
    "TIMEOUT": "#f0ad4e",
    "NODE_FAIL": "#8b0000",
    "PREEMPTED": "#9b59b6",
    "REQUEUED": "#e67e22",
    "OUT_OF_MEMORY": "#c0392b",
}
MAX_STATES = 8


def _label(row: Dict[str, Any], by: List[str]) -> str:
    return " / ".join(str(row[d]) or "-" for d in by) if by else "all"


def chart_data(report: Report, top: int = 20) -> Tuple[List[str], List[str], Dict[str, List[float]]]:
    """``(labels, states, {state: hours per bar})`` for the chart."""
    rows = list(report.rows)
    if any(d in TIME_DIMS for d in report.by):
        rows.sort(key=lambda r: tuple(str(r[d]) for d in report.by))
    shown, rest = (rows[:top], rows[top:]) if len(rows) > top else (rows, [])
    states = list(report.states[:MAX_STATES])
    extra = report.states[MAX_STATES:]
    if extra:
        states.append("other states")
    labels = [_label(r, report.by) for r in shown]
    series: Dict[str, List[float]] = {s: [] for s in states}

    def add(rows_: List[Dict[str, Any]]) -> None:
        by_state: Dict[str, float] = {}
        for r in rows_:
            for s, h in r["gpu_hours_by_state"].items():
                key = s if s in report.states[:MAX_STATES] else "other states"
                by_state[key] = by_state.get(key, 0.0) + h
        for s in states:
            series[s].append(by_state.get(s, 0.0))

    for r in shown:
        add([r])
    if rest:
        labels.append(f"other ({len(rest)})")
        add(rest)
    return labels, states, series


def build_figure(report: Report, top: int = 20):
    """The matplotlib Figure (returned so tests can inspect title and axes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    labels, states, series = chart_data(report, top)
    width = max(6.0, min(0.45 * len(labels) + 2.5, 24.0))
    fig = Figure(figsize=(width, 5.0), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    x = list(range(len(labels)))
    bottom = [0.0] * len(labels)
    for s in states:
        vals = series[s]
        ax.bar(x, vals, bottom=bottom, label=s, color=STATE_COLORS.get(s), width=0.75)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(x)
    crowded = len(labels) > 6
    ax.set_xticklabels(labels, rotation=45 if crowded else 0, ha="right" if crowded else "center", fontsize=8)
    group = ", ".join(report.by) if report.by else "cluster"
    window = report.meta.get("window", {}).get("label", "")
    ax.set_title(f"GPU-hours by {group}" + (f" ({window})" if window else ""))
    ax.set_xlabel(" / ".join(report.by) if report.by else "")
    ax.set_ylabel("GPU-hours")
    if states:
        ax.legend(title="final state", fontsize=8, title_fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def write_plot(report: Report, path: str, top: int = 20) -> None:
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".png", ".svg"):
        raise UsageError(f"--plot {path}: the file name must end in .png or .svg")
    try:
        fig = build_figure(report, top)
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'slurmkit[plot]'") from None
    try:
        fig.savefig(path, format=ext[1:])
    except OSError as exc:
        raise UsageError(f"--plot {path}: {exc.strerror}") from None
