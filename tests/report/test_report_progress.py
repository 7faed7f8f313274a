"""Progress on long reads (issue 26 item 5): on a terminal, ``report ingest`` and the reports
over a saved dump show rows read, rate and time elapsed on stderr, and erase the line when
done; nothing when stderr is not a terminal, with ``-q``, or for standard input.

The terminal is a real pseudo-terminal (the pty module) given to a child process as its
stderr; the child lowers :data:`slurmkit.report.progress.DELAY` and ``INTERVAL`` so that a
small dump shows its line, then runs the real entry point."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from slurmkit.report import progress
from slurmkit.report.sacct import QUERY_FIELDS

pytest.importorskip("duckdb")

START = 1_794_000_000  # in November 2026
WINDOW = ("--since", "2026-11-01T00:00:00", "--until", "2026-12-01T00:00:00", "--now", "2026-12-01T00:00:00")


def _dump(path: Path, rows: int) -> Path:
    lines = ["|".join(QUERY_FIELDS)]
    for i in range(1, rows + 1):
        t = START + i
        lines.append(
            f"{i}|{i}|COMPLETED|billing=1,cpu=1,gres/gpu=1,node=1|{t - 60}|{t}|{t + 3600}|3600|"
            f"u{i % 7}|acct|gpu|node{i % 5}|None"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    return _dump(tmp_path_factory.mktemp("progress") / "dump.txt", 40_000)


@pytest.fixture
def config(tmp_path) -> Path:
    (tmp_path / "log").mkdir()
    cfg = tmp_path / "slurmkit.yaml"
    cfg.write_text(f"paths:\n  log_dir: {tmp_path / 'log'}\n  state_dir: {tmp_path}\n")
    return cfg


_CHILD = (
    "import sys\n"
    "from slurmkit.report import progress\n"
    "progress.DELAY = 0.0\n"
    "progress.INTERVAL = 0.005\n"
    "from slurmkit.cli.main import main\n"
    "sys.argv = ['slurmkit', *sys.argv[1:]]\n"
    "main()\n"
)


def _run(args, config: Path, *, tty: bool, stdin=None):
    """``(exit code, stdout, stderr)`` of ``slurmkit <args>`` with stderr a pseudo-terminal
    (``tty``) or a pipe."""
    env = dict(os.environ, SLURMKIT_CONFIG=str(config), TZ="UTC")
    argv = [sys.executable, "-c", _CHILD, *args]
    if not tty:
        res = subprocess.run(argv, capture_output=True, env=env, timeout=120, stdin=stdin)
        return res.returncode, res.stdout.decode(), res.stderr.decode()
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=follower, env=env, stdin=stdin)
    finally:
        os.close(follower)
    err = b""
    while True:  # read the terminal until the child closes it (EIO on Linux)
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            proc.kill()
            raise AssertionError("the child wrote nothing for 120 s")
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        err += chunk
    os.close(leader)
    out = proc.stdout.read().decode()
    proc.stdout.close()
    return proc.wait(timeout=60), out, err.decode()


def _updates(err: str) -> list:
    return [part for part in err.split("\r") if "rows/s" in part]


def test_ingest_shows_progress_on_a_terminal_and_erases_it(dump, config, tmp_path):
    code, _, err = _run(
        ["report", "ingest", "--archive", str(tmp_path / "a"), "--sacct-file", str(dump)], config, tty=True
    )
    assert code == 0, err
    updates = _updates(err)
    assert updates, err
    assert all(u.startswith(f"slurmkit: {dump}: ~") and " s\x1b[K" in u for u in updates), updates
    assert "\r\x1b[K" in err  # the line erased before the summary
    assert "ingested 40000 attempt(s)" in err.split("\r\x1b[K")[-1]


@pytest.mark.parametrize("engine", ["python", "duckdb"])
def test_a_report_over_a_dump_shows_progress_on_a_terminal(dump, config, engine):
    code, out, err = _run(
        ["report", "--sacct-file", str(dump), "--engine", engine, "--by", "user", "--json", *WINDOW],
        config,
        tty=True,
    )
    assert code == 0, err
    assert '"attempts": 40000' in out  # (stdout untouched)
    assert _updates(err), err
    assert err.endswith("\r\x1b[K"), repr(err[-200:])


def test_the_reference_path_reports_how_far_it_read(dump, config):
    """On a terminal the reference path's line moves forward as it reads (how far it gets
    before the end depends on the machine's speed; the probe's arithmetic is pinned below)."""
    code, _, err = _run(
        ["report", "--sacct-file", str(dump), "--engine", "python", "--json", *WINDOW], config, tty=True
    )
    assert code == 0, err
    pcts = [int(u.split("(")[1].split("%")[0]) for u in _updates(err)]
    assert pcts and pcts == sorted(pcts), pcts


def test_the_file_probe_is_the_byte_offset_over_the_size(tmp_path):
    """Deterministic: the fraction a meter reports for an attached file is where its
    descriptor stands over the file's size, and a closed file tells nothing."""
    path = tmp_path / "dump.txt"
    path.write_bytes(b"x" * 9 + b"\n" + b"y" * 9989 + b"\n")  # 10,000 bytes
    meter = progress.Meter("dump.txt", str(path), 10_000, io.StringIO())
    with open(path, "rb", buffering=0) as fh:
        meter.file(fh)
        meter.poll()
        assert meter.fraction == 0.0
        fh.read(2_500)
        meter.poll()
        assert meter.fraction == 0.25
        fh.seek(0)  # the line never goes back
        meter.poll()
        assert meter.fraction == 0.25
    meter.poll()  # closed: no news, the last fraction stays
    assert meter.fraction == 0.25
    assert meter.rows_total == 10_000 / 5_000  # two lines of 5,000 bytes on average


@pytest.mark.parametrize("extra", [["-q"], []])
def test_no_progress_with_q_or_without_a_terminal(dump, config, tmp_path, extra):
    args = ["report", "ingest", *extra, "--archive", str(tmp_path / "a"), "--sacct-file", str(dump)]
    code, _, err = _run(args, config, tty=bool(extra))
    assert code == 0, err
    assert "rows/s" not in err and "\r" not in err and "\x1b" not in err


def test_no_progress_for_standard_input(dump, config):
    with open(dump, "rb") as fh:
        code, out, err = _run(["report", "--sacct-file", "-", "--json", *WINDOW], config, tty=True, stdin=fh)
    assert code == 0, err
    assert '"attempts": 40000' in out
    assert "rows/s" not in err and "\r" not in err


def test_the_line(tmp_path):
    path = _dump(tmp_path / "d.txt", 100)
    meter = progress.Meter("nov.txt", str(path), path.stat().st_size, io.StringIO())
    meter.fraction = 0.5
    rows = int(0.5 * meter.rows_total)
    assert abs(rows - 50) <= 1  # the mean line length of the head gives the rows
    meter.started = 100.0
    assert meter.line(102.0) == f"slurmkit: nov.txt: ~{rows:,} rows (50%), {rows / 2:,.0f} rows/s, 2.0 s"


def test_the_file_probe_follows_the_offset_and_not_a_closed_file(tmp_path):
    path = _dump(tmp_path / "d.txt", 2000)
    size = path.stat().st_size
    meter = progress.Meter("d", str(path), size, io.StringIO())
    fh = open(path, "rb", buffering=0)
    meter.file(fh)
    fh.read(size // 2)
    meter.poll()
    assert meter.fraction == pytest.approx(0.5, abs=1e-3)
    fh.close()
    meter.fraction = 0.0
    meter.poll()  # a closed file says nothing
    assert meter.fraction == 0.0


def test_nothing_is_wanted_off_a_terminal_or_quiet(tmp_path):
    path = _dump(tmp_path / "d.txt", 1)

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert progress.wanted(str(path), False, Tty())
    assert not progress.wanted(str(path), True, Tty())
    assert not progress.wanted(str(path), False, io.StringIO())
    assert not progress.wanted("-", False, Tty())
    assert not progress.wanted(str(tmp_path), False, Tty())  # not a regular file
