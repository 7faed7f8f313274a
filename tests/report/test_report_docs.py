"""docs/report.md shows real output: the sample tables are what the tool prints today,
and the sample charts exist and are PNGs."""

from __future__ import annotations

from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "report.md"
WINDOW = ("--month", "2026-11", "--now", "2026-12-01T01:30:00")


@pytest.mark.parametrize(
    "args",
    [
        ("report", "--by", "account,user", "--price", "h100=2.50,a100=1.20,default=2.00"),
        ("report", "lost", "--by", "account,user"),
    ],
)
def test_sample_tables_match_the_tool(cli, fixture_path, args):
    res = cli(*args, "--trust-free-text", "--sacct-file", fixture_path("basic.txt"), *WINDOW)
    assert res.exit_code == 0, res.stderr
    assert res.stdout.strip() in DOC.read_text(), "docs/report.md is out of date; paste the new output"


def test_sample_charts_exist():
    text = DOC.read_text()
    for name in ("img/report-by-account-user.png", "img/report-by-day.png"):
        assert f"({name})" in text
        assert (DOC.parent / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
