"""Render a :class:`~.aggregate.Report` as a table, CSV, JSON or Markdown.

Views pick the columns: ``usage`` (default: rank, GPU-hours, share, jobs, wait,
lost, cost), ``states`` (GPU-hours by final state) and ``lost`` (lost GPU-hours by
cause, and the health-log suspect hours). JSON always carries everything; CSV has
one header row, hours as plain floats and no totals row; the table and Markdown end
with a totals row. The table uses rich only when stdout is a terminal and
``NO_COLOR`` is unset; otherwise it is plain aligned text. Every cell is made neutral
(:mod:`.neutral`: control characters shown as ``\\xNN``, formulas and Markdown escaped).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Optional, TextIO, Tuple

from slurmkit.report import FORMATS, VIEWS  # noqa: F401  (re-exported)
from slurmkit.report.aggregate import Report
from slurmkit.report.lost import LOST_CAUSES
from slurmkit.report.neutral import neutral_text
from slurmkit.report.table import write_csv, write_markdown, write_text


def format_duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d{h:02d}h"
    if h:
        return f"{h}h{m:02d}m"
    return f"{m}m{s:02d}s"


def columns(report: Report, view: str) -> List[Tuple[str, str]]:
    """``[(key, header)]`` of the flat columns for ``view``."""
    cols = [(d, d) for d in report.by]
    if view == "usage":
        cols += [
            ("rank", "rank"),
            ("gpu_hours", "gpu_hours"),
            ("share_pct", "share_%"),
            ("jobs", "jobs"),
            ("attempts", "attempts"),
            ("mean_wait_s", "mean_wait"),
            ("lost_gpu_hours", "lost_gpu_hours"),
        ]
        if report.health_joined:
            cols.append(("suspect_gpu_hours", "suspect_gpu_hours"))
        if report.priced:
            cols.append(("cost", f"cost_{report.currency}"))
    elif view == "states":
        cols += [("gpu_hours", "gpu_hours")] + [(f"state:{s}", s) for s in report.states]
    elif view == "lost":
        causes = [c for c in LOST_CAUSES if c in report.causes] or list(report.causes)
        cols += [("gpu_hours", "gpu_hours"), ("lost_gpu_hours", "lost_gpu_hours"), ("lost_pct", "lost_%")] + [
            (f"cause:{c}", c) for c in causes
        ]
        if report.health_joined:
            cols.append(("suspect_gpu_hours", "suspect_gpu_hours"))
    else:
        raise ValueError(view)
    return cols


def _value(row: Dict[str, Any], key: str) -> Any:
    if key.startswith("state:"):
        return row["gpu_hours_by_state"].get(key[6:], 0.0)
    if key.startswith("cause:"):
        return row["lost_by_cause"].get(key[6:], 0.0)
    if key == "lost_pct":
        return round(100.0 * row["lost_gpu_hours"] / row["gpu_hours"], 2) if row["gpu_hours"] else 0.0
    return row.get(key)


_NUMERIC_2 = ("gpu_hours", "lost_gpu_hours", "suspect_gpu_hours", "cost")


def _human(key: str, value: Any, decimals: int = 2) -> str:
    if value is None:
        return "-"
    if key == "mean_wait_s":
        return format_duration(value)
    if key == "cost":
        return f"{value:,.2f}"
    if key in _NUMERIC_2 or key.startswith(("state:", "cause:")):
        return f"{value:,.{decimals}f}"
    if key in ("share_pct", "lost_pct"):
        return f"{value:.1f}"
    return str(value)


def _cells(report: Report, view: str) -> Tuple[List[str], List[List[str]], List[str], List[bool]]:
    cols = columns(report, view)
    headers = [h for _, h in cols]
    numeric = [k not in report.by for k, _ in cols]
    # small totals (a test cluster, a short window) need more than 2 decimals to show anything
    dec = 2 if report.totals.get("gpu_hours", 0) >= 10 else 4
    body = [[_human(k, _value(r, k), dec) for k, _ in cols] for r in report.rows]
    totals = dict(report.totals)
    foot = []
    for i, (k, _) in enumerate(cols):
        if i == 0:
            foot.append("TOTAL")
        elif k in report.by or k == "rank":
            foot.append("")
        else:
            foot.append(_human(k, _value(totals, k), dec))
    return headers, body, foot, numeric


def _excluded_note(report: Report) -> str:
    """The line under a totals row that says how many rows the totals leave out."""
    n = report.totals.get("excluded_rows") or 0
    if not n:
        return ""
    return f"(excluded: {n} malformed or impossible row(s), not in these totals; see the warning)\n"


def render_table(report: Report, view: str, out: TextIO, color: Optional[bool] = None) -> None:
    headers, body, foot, numeric = _cells(report, view)
    if color is None:
        color = out.isatty() and not os.environ.get("NO_COLOR")
    if color:
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:  # pragma: no cover - rich is optional
            color = False
    if color:
        from rich.text import Text

        # (Text, not str: rich reads "[...]" in a string as its own markup)
        title = report.meta.get("title")
        table = Table(title=Text(neutral_text(title)) if title else None, show_footer=True)
        for h, f, num in zip(headers, foot, numeric):
            table.add_column(Text(neutral_text(h)), footer=Text(f), justify="right" if num else "left")
        for row in body:
            table.add_row(*(Text(neutral_text(c)) for c in row))
        Console(file=out).print(table)
        out.write(_excluded_note(report))
        return
    write_text(out, headers, body, numeric, foot=foot, title=report.meta.get("title") or None)
    out.write(_excluded_note(report))


def render_markdown(report: Report, view: str, out: TextIO) -> None:
    headers, body, foot, numeric = _cells(report, view)
    write_markdown(out, headers, body, numeric, foot=foot)
    note = _excluded_note(report)
    if note:
        out.write("\n" + note)


def render_csv(report: Report, view: str, out: TextIO) -> None:
    cols = columns(report, view)
    write_csv(out, [h for _, h in cols], ([_value(r, k) for k, _ in cols] for r in report.rows))


def render_json(report: Report, out: TextIO) -> None:
    """One JSON document: ``by``, ``meta``, ``rows`` (one row object per line) and
    ``totals``. Rows are encoded without indentation because only then does the json
    module use its C encoder: a per-node, per-day report can have 10^5 rows. One encoder
    serves every row (``json.dumps`` with options builds a new one per call), and the
    document is written at once (a write per row is a system call per row where stdout is
    unbuffered, as under ``PYTHONUNBUFFERED``)."""
    dumps = json.JSONEncoder(sort_keys=True, default=str).encode
    rows = ",\n    ".join(map(dumps, report.rows))
    out.write(
        '{\n  "by": '
        + json.dumps(report.by)
        + ',\n  "meta": '
        + dumps(report.meta)
        + ',\n  "rows": ['
        + ("\n    " + rows + "\n  ]" if report.rows else "]")
        + ',\n  "totals": '
        + dumps(report.totals)
        + "\n}\n"
    )


def render(report: Report, fmt: str, view: str = "usage", out: Optional[TextIO] = None) -> None:
    out = out or sys.stdout
    if fmt == "json":
        render_json(report, out)
    elif fmt == "csv":
        render_csv(report, view, out)
    elif fmt == "markdown":
        render_markdown(report, view, out)
    else:
        render_table(report, view, out)
