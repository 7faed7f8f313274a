"""The report's one source layer (slurmkit/report/source.py): the dump's format options, the
engine choice, and a flow that returns once: the layer prints nothing, its warnings come back
with the report for the CLI to print."""

from __future__ import annotations

import os

import pytest

from slurmkit.errors import UsageError
from slurmkit.report import source
from slurmkit.report.window import resolve_window

WINDOW = ("--since", "2026-11-01T00:00:00", "--until", "2026-12-01T00:00:00", "--now", "2026-12-01T00:00:00")
RCFG = {
    "max_gpus": 100_000,
    "prolog_requeue_seconds": 120,
    "sacct_timeout": 10,
    "lost_window_hours": 6.0,
    "default_by": "user",
    "health_log": None,
    "prices": None,
    "currency": "USD",
}


@pytest.mark.parametrize(
    "command",
    [["report"], ["report", "capacity", "--gpus", "8"], ["report", "efficiency"], ["report", "ingest"]],
)
@pytest.mark.parametrize("option", [["--sacct-columns", "JobID,State"], ["--sacct-delimiter", ";"]])
def test_format_options_without_a_file_are_refused_by_every_command(cli, tmp_path, command, option):
    """One dump reader, one rule: the format options describe a --sacct-file (report ingest
    ignored them before)."""
    extra = ["--archive", str(tmp_path / "a")] if command[-1] == "ingest" else []
    res = cli(*command, *option, *extra, *WINDOW)
    assert res.exit_code == 2, res.stderr
    assert "--sacct-columns and --sacct-delimiter describe a --sacct-file; give one" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(
    "text, value", [(None, None), (";", ";"), ("☃", "☃"), ("\\x1f", "\x1f"), ("\\t", "\t"), ("||", "||")]
)
def test_delimiters(text, value):
    assert source.parse_delimiter(text) == value


@pytest.mark.parametrize("text", ["", "\\x1", "\\n", "\n", "a\rb"])
def test_bad_delimiters(text):
    with pytest.raises(UsageError, match="--sacct-delimiter"):
        source.parse_delimiter(text)


def test_engine_choice(tmp_path, monkeypatch):
    pytest.importorskip("duckdb")
    small = tmp_path / "d.txt"
    small.write_text("JobID|State\n")
    assert not source.use_engine("python", str(small))
    assert not source.use_engine("auto", str(small))  # below AUTO_ENGINE_BYTES
    assert source.use_engine("duckdb", str(small))
    assert not source.use_engine("auto", None) and not source.use_engine("auto", "-")
    assert not source.use_engine("duckdb", str(tmp_path / "missing"))  # the reference names the missing file
    monkeypatch.setattr(source, "AUTO_ENGINE_BYTES", 1)
    assert source.use_engine("auto", str(small))
    for where in (None, "-"):
        with pytest.raises(UsageError, match="reads a saved file"):
            source.use_engine("duckdb", where)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert not source.use_engine("auto", str(fifo))
    with pytest.raises(UsageError, match="reads a regular file"):
        source.use_engine("duckdb", str(fifo))


@pytest.mark.parametrize("engine", ["python", "duckdb"])
def test_the_layer_prints_nothing_and_returns_its_warnings(fixture_path, tmp_path, capsys, engine):
    if engine == "duckdb":
        pytest.importorskip("duckdb")
    path = fixture_path("malformed.txt")
    out = source.usage_report(
        win=resolve_window(default_unbounded=True),
        now=1796083200,
        flt=source.filters(),
        by="user",
        dump=source.Dump(path, trust_free_text=True),
        archive=None,
        engine=engine,
        price=None,
        health_log=None,
        no_health_log=True,
        lost_window_hours=None,
        rcfg=RCFG,
        log_dir=str(tmp_path),
    )
    assert capsys.readouterr() == ("", "")
    assert len(out.warnings) == 1 and out.warnings[0].startswith(f"{path}: skipped 7 malformed row(s)")
    assert out.report.meta["engine"]["name"] == engine
    assert out.report.totals["excluded_rows"] == 7
