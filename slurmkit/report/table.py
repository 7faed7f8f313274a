"""The one table renderer of every report (usage, lost, capacity, efficiency, sql): plain
text, Markdown and CSV, every cell made neutral on the way out (:mod:`.neutral`)."""

from __future__ import annotations

import csv
from typing import Any, Iterable, Optional, Sequence, TextIO

from slurmkit.report.neutral import csv_cell, markdown_cell, neutral_text


def write_text(
    out: TextIO,
    headers: Sequence[str],
    body: Sequence[Sequence[str]],
    numeric: Sequence[bool],
    *,
    foot: Optional[Sequence[str]] = None,
    title: Optional[str] = None,
    rules: bool = True,
) -> None:
    """Aligned columns (numbers right, text left), a dashed rule under the headers and above
    the ``foot`` row when ``rules``; ``title`` (when not None) on the first line."""
    heads = [neutral_text(h) for h in headers]
    rows = [[neutral_text(c) for c in r] for r in body]
    last = [neutral_text(c) for c in foot] if foot is not None else None
    widths = [
        max([len(h)] + [len(r[i]) for r in rows] + ([len(last[i])] if last is not None else []))
        for i, h in enumerate(heads)
    ]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric)
        ).rstrip()

    if title is not None:
        out.write(neutral_text(title) + "\n")
    out.write(line(heads) + "\n")
    if rules:
        out.write("  ".join("-" * w for w in widths) + "\n")
    for r in rows:
        out.write(line(r) + "\n")
    if last is not None:
        if rules:
            out.write("  ".join("-" * w for w in widths) + "\n")
        out.write(line(last) + "\n")


def write_markdown(
    out: TextIO,
    headers: Sequence[str],
    body: Sequence[Sequence[str]],
    numeric: Sequence[bool],
    *,
    foot: Optional[Sequence[str]] = None,
    bold_foot: bool = True,
) -> None:
    """A Markdown table (numbers right-aligned); the ``foot`` row in bold when ``bold_foot``."""
    out.write("| " + " | ".join(markdown_cell(h) for h in headers) + " |\n")
    out.write("|" + "|".join("---:" if n else "---" for n in numeric) + "|\n")
    for r in body:
        out.write("| " + " | ".join(markdown_cell(c) for c in r) + " |\n")
    if foot is not None:
        cells = [markdown_cell(c) for c in foot]
        if bold_foot:
            cells = [f"**{c}**" if c else "" for c in cells]
        out.write("| " + " | ".join(cells) + " |\n")


def write_csv(out: TextIO, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """CSV with one header row; ``None`` is an empty cell, numbers stay numbers, text is
    neutral and a formula start is prefixed with ``'`` (:func:`.neutral.csv_cell`)."""
    w = csv.writer(out, lineterminator="\n")
    w.writerow([csv_cell(h) for h in headers])
    w.writerows([["" if v is None else csv_cell(v) for v in r] for r in rows])


def write_rows(out: TextIO, fmt: str, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A query's result (``report sql``) as ``csv``, ``markdown`` or a plain ``table``: every
    column left-aligned, ``None`` shown as ``-`` (an empty cell in CSV)."""
    if fmt == "csv":
        write_csv(out, headers, rows)
        return
    cells = [[("-" if v is None else str(v)) for v in r] for r in rows]
    left = [False] * len(headers)
    if fmt == "markdown":
        write_markdown(out, headers, cells, left)
    else:
        write_text(out, headers, cells, left)
