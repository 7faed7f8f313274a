"""What the CLIs print on stderr stays data: a file name, job name, log line or exception text
holding a newline or a terminal escape is written with it shown (``\\x1b``, ``\\x0a``), on the
one line it belongs to (:func:`slurmkit.chars.shown`, :func:`slurmkit.cli.common.message`)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import click
import pytest

from slurmkit.chars import shown
from slurmkit.cli import common
from slurmkit.errors import SlurmkitError, UsageError
from slurmkit.report.neutral import neutral_text

ESCAPE = "\x1b[2J\x1b]0;owned\x07"


@pytest.mark.parametrize(
    "code, expected",
    [
        (0x00, "\\x00"),
        (0x0A, "\\x0a"),
        (0x1F, "\\x1f"),
        (0x7F, "\\x7f"),
        (0x80, "\\x80"),
        (0x9F, "\\x9f"),
        (0x202A, "\\u202a"),
        (0x202E, "\\u202e"),
        (0x2066, "\\u2066"),
        (0x2069, "\\u2069"),
    ],
)
def test_each_control_character_is_shown_as_its_escape(code, expected):
    assert shown(f"a{chr(code)}b") == f"a{expected}b"
    assert neutral_text(f"a{chr(code)}b") == f"a{expected}b"  # the report's cells: the same rule


@pytest.mark.parametrize("code", [0x20, 0x7E, 0xA0, 0xE9, 0x2029, 0x202F, 0x2065, 0x206A, 0x4E2D])
def test_the_characters_next_to_each_range_stay_as_they_are(code):
    assert shown(f"a{chr(code)}b") == f"a{chr(code)}b"


def _run(*args: str, cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "slurmkit.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(os.environ, NO_COLOR="1"),
        timeout=120,
    )


def test_an_error_naming_a_hostile_file_name_is_one_line_with_the_escapes_shown(tmp_path):
    name = str(tmp_path / f"usage{ESCAPE}\nslurmkit: all good.txt")
    res = _run("report", "--sacct-file", name, "--no-health-log", cwd=str(tmp_path))
    assert res.returncode == UsageError.exit_code
    assert res.stderr.count("\n") == 1 and "\x1b" not in res.stderr and "\x07" not in res.stderr
    assert "usage\\x1b[2J\\x1b]0;owned\\x07\\x0aslurmkit: all good.txt" in res.stderr


def test_a_warning_about_a_hostile_file_name_is_one_line(tmp_path):
    dump = tmp_path / f"d{ESCAPE}\n.txt"
    dump.write_text(
        "JobID|JobIDRaw|State|AllocTRES|Submit|Start|End|ElapsedRaw|User\n"
        "1|1|COMPLETED|gres/gpu=1|1764678743|1764678816|1764679653|837|alice\n"
        "2|2|COMPLETED|gres/gpu=1|1764678743\n"  # one field short: the warning names the file
    )
    res = _run(
        "report", "--sacct-file", str(dump), "--no-health-log", "--trust-free-text",
        "--since", "2025-12-01", "--until", "2025-12-31", cwd=str(tmp_path),
    )  # fmt: skip
    warnings = [line for line in res.stderr.splitlines() if "warning" in line]
    assert res.returncode == 0, res.stderr
    assert (
        len(warnings) == 1
        and "d\\x1b[2J\\x1b]0;owned\\x07\\x0a.txt: skipped 1 malformed row(s) at line(s) 3" in warnings[0]
    )
    assert "\x1b" not in res.stderr


@pytest.mark.parametrize(
    "raised, code, line",
    [
        (SlurmkitError(f"bad{ESCAPE}\nline"), SlurmkitError.exit_code, "prog: error: bad\\x1b[2J"),
        (click.BadParameter(f"bad{ESCAPE}\nline"), 2, "Error: Invalid value: bad\\x1b[2J"),
        (
            RuntimeError(f"bad{ESCAPE}\nline"),
            common.INTERNAL_ERROR_EXIT,
            "prog: internal error: RuntimeError: bad\\x1b[2J",
        ),
    ],
)
def test_run_main_shows_the_control_characters_of_every_error(raised, code, line, capsys, monkeypatch):
    monkeypatch.delenv("SLURMKIT_DEBUG", raising=False)

    @click.command()
    def cmd():
        raise raised

    with pytest.raises(SystemExit) as exit_:
        common.run_main(cmd, "prog", [])
    err = capsys.readouterr().err
    assert exit_.value.code == code
    assert line in err and "\\x0aline" in err
    assert "\x1b" not in err and "\x07" not in err and "\nline" not in err


def test_log_lines_are_shown_and_a_traceback_keeps_its_lines():
    formatter = common._ShownFormatter("slurmkit: %(levelname)s: %(message)s")
    record = logging.LogRecord("slurmkit", logging.WARNING, __file__, 1, "job %s", (f"x{ESCAPE}\ny",), None)
    assert formatter.format(record) == "slurmkit: WARNING: job x\\x1b[2J\\x1b]0;owned\\x07\\x0ay"
    try:
        raise ValueError("boom")
    except ValueError:
        record.exc_info = sys.exc_info()
    assert formatter.format(record).count("\n") >= 2  # the traceback after the shown line


def test_message_lines_show_each_line_and_keep_the_breaks(capsys):
    common.message_lines(f"a: 1\nb: x{ESCAPE}\x85\x1cc\n")
    assert capsys.readouterr().err == "a: 1\nb: x\\x1b[2J\\x1b]0;owned\\x07\\x85\\x1cc\n"
    common.message_lines("no final break")
    assert capsys.readouterr().err == "no final break\n"


def test_a_table_cell_cannot_break_its_row_or_reach_the_terminal(capsys):
    common.print_table([{"node": "gpu01", "reason": f"slurmkit: x{ESCAPE}\nFAKE ROW"}])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "\x1b" not in out[1] and out[1].endswith("\\x0aFAKE ROW")


def test_node_status_shows_a_hostile_drain_reason_and_verdict_as_data(monkeypatch):
    """``health node status``: the drain reason (anyone with scontrol rights sets it) and a check's
    message are data on their own lines."""
    from click.testing import CliRunner

    from slurmkit.cli import health
    from slurmkit.hooks import nodeops

    status = {
        "node": "gpu01",
        "state": "DRAIN",
        "reason": f"maintenance{ESCAPE}\nlast verdict:    PASS",
        "slurmkit_drain": False,
        "last_verdict": {
            "status": "fail",
            "hook": "prolog",
            "job_id": "7",
            "time": 0,
            "failing": [f"xid: {ESCAPE}"],
        },
        "heavy_verdicts": {},
    }
    monkeypatch.setattr(health, "_sections", lambda config_path: ({}, {}))
    monkeypatch.setattr(nodeops, "node_status", lambda name, h, p: status)
    res = CliRunner().invoke(health.node, ["status", "gpu01"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[2] == "reason:          maintenance\\x1b[2J\\x1b]0;owned\\x07\\x0alast verdict:    PASS"
    assert lines[4] == "                 xid: \\x1b[2J\\x1b]0;owned\\x07"
    assert "\x1b" not in res.output and len(lines) == 5


@pytest.mark.parametrize(
    "raised, code, said",
    [
        (KeyboardInterrupt(), common.INTERRUPTED_EXIT, "prog: interrupted"),  # Ctrl-C
        (click.Abort(), 1, "prog: aborted"),  # (a prompt declined, no Ctrl-C)
    ],
)
def test_ctrl_c_is_an_interruption_and_a_declined_prompt_an_abort(raised, code, said, capsys):
    @click.command()
    def cmd():
        raise raised

    with pytest.raises(SystemExit) as exit_:
        common.run_main(cmd, "prog", [])
    assert exit_.value.code == code
    assert capsys.readouterr().err.strip() == said
