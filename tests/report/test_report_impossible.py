"""Data that cannot be true is excluded and reported, never summed (fixture
tests/report/fixtures/impossible.txt; its header comments work out every row)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def max32(site_config):
    site_config.write_text(site_config.read_text() + "  max_gpus: 32\n")


def test_impossible_rows_are_excluded_with_line_numbers(cli, fixture_path, max32):
    res = cli(
        "report",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("impossible.txt"),
        "--now",
        "2026-12-01T00:00:00",
        "--by",
        "user",
        "--json",
        "--no-health-log",
    )
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    t = data["totals"]
    # 2 + 2 + 1 GPU-h; jobs 300 and 307 (300 twice: its requeue), 3 attempts
    assert t["gpu_hours"] == 5.0 and t["jobs"] == 2 and t["attempts"] == 3
    assert t["excluded_rows"] == 7
    p = data["meta"]["parse"]
    assert p["malformed"] == 7 and p["impossible"] == 6
    assert p["malformed_lines"] == [16, 17, 18, 19, 20, 21, 24]
    assert p["malformed_reasons"] == {
        "impossible: time before 2000": 2,
        "impossible: end before start": 1,
        "impossible: more GPUs than report.max_gpus": 2,
        "impossible: exact duplicate of an earlier row": 1,
        "bad time": 1,
    }
    assert "skipped 7 malformed row(s) at line(s) 16, 17, 18, 19, 20, 21, 24" in res.stderr
    assert "6 of them impossible data, excluded" in res.stderr


def test_table_total_says_how_many_were_excluded(cli, fixture_path, max32):
    res = cli(
        "report",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("impossible.txt"),
        "--now",
        "2026-12-01T00:00:00",
        "--no-health-log",
    )
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    assert lines[-2].startswith("TOTAL") and "5.0000" in lines[-2]
    assert lines[-1] == "(excluded: 7 malformed or impossible row(s), not in these totals; see the warning)"


def test_without_site_limit_only_the_absurd_gpu_count_is_excluded(cli, fixture_path):
    """Default report.max_gpus (100,000): the 64-GPU row counts (64 GPU-h), the 1e14 one does not."""
    res = cli(
        "report",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("impossible.txt"),
        "--now",
        "2026-12-01T00:00:00",
        "--json",
        "--no-health-log",
    )
    t = json.loads(res.stdout)["totals"]
    assert t["gpu_hours"] == 69.0 and t["excluded_rows"] == 6
