"""The one table renderer (slurmkit/report/table.py) of every report, worked by hand: what a
user's text (a name, an account, a SQL cell) becomes in a plain table, Markdown and CSV.

A ``|`` cannot split a Markdown row, a backslash stays a backslash, a newline or any other
control character is shown as ``\\xNN`` and never reaches the terminal, and a cell starting
like a spreadsheet formula (``=``, ``+``, ``-``, ``@``) is marked with ``'`` in CSV (where a
spreadsheet would run it) and left as it is in Markdown and the plain table (where nothing
runs it)."""

from __future__ import annotations

import io

from slurmkit.report.table import write_csv, write_markdown, write_rows, write_text

EVIL = "a|b\\c\nd\x07"  # a pipe, a backslash, a newline and BEL
SHOWN = "a|b\\c\\x0ad\\x07"  # what every format shows of it (before its own escaping)
FORMULAS = ["=SUM(A1)", "+1", "-2+3", "@x"]


def _out(write, *args, **kwargs) -> str:
    buf = io.StringIO()
    write(buf, *args, **kwargs)
    return buf.getvalue()


def test_plain_text():
    got = _out(write_text, ["user", "n"], [[EVIL, "1"], *[[f, "22"] for f in FORMULAS]], [False, True])
    assert got.split("\n") == [
        "user" + " " * 13 + "n",
        "-" * 14 + "  --",
        SHOWN + "   1",
        "=SUM(A1)" + " " * 8 + "22",
        "+1" + " " * 14 + "22",
        "-2+3" + " " * 12 + "22",
        "@x" + " " * 14 + "22",
        "",
    ]


def test_markdown():
    got = _out(write_markdown, ["user", "n"], [[EVIL, "1"], *[[f, "2"] for f in FORMULAS]], [False, True])
    assert got.split("\n") == [
        "| user | n |",
        "|---|---:|",
        "| a\\|b\\\\c\\\\x0ad\\\\x07 | 1 |",
        "| =SUM(A1) | 2 |",
        "| +1 | 2 |",
        "| -2+3 | 2 |",
        "| @x | 2 |",
        "",
    ]


def test_markdown_foot_bold_or_not():
    assert _out(write_markdown, ["a"], [], [False], foot=["T|"]).endswith("| **T\\|** |\n")
    assert _out(write_markdown, ["a"], [], [False], foot=["T|"], bold_foot=False).endswith("| T\\| |\n")


def test_csv():
    rows = [[EVIL, 1], *[[f, -2] for f in FORMULAS], ["ok", None], [True, 2.5]]
    assert _out(write_csv, ["user", "=n"], rows).split("\n") == [
        "user,'=n",
        SHOWN + ",1",
        "'=SUM(A1),-2",
        "'+1,-2",
        "'-2+3,-2",
        "'@x,-2",
        "ok,",  # None: an empty cell
        "True,2.5",  # (a bool is text, a float a number)
        "",
    ]


def test_query_results_as_report_sql_shows_them():
    rows = [(EVIL, None), ("=1", 3)]
    assert _out(write_rows, "table", ["x", "y"], rows).split("\n") == [
        "x" + " " * 15 + "y",
        "-" * 14 + "  -",
        SHOWN + "  -",
        "=1" + " " * 14 + "3",
        "",
    ]
    assert _out(write_rows, "markdown", ["x", "y"], rows).split("\n")[1:3] == [
        "|---|---|",
        "| a\\|b\\\\c\\\\x0ad\\\\x07 | - |",
    ]
    assert _out(write_rows, "csv", ["x", "y"], rows) == f"x,y\n{SHOWN},\n'=1,3\n"
