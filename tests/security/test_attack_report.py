"""Attacks on `slurmkit report`: forged accounting rows (issue 25).

Slurm accepts a newline in a job name and sacct prints it raw, so a job named
``innocent\\n<a complete row>`` put a row of its owner's choosing into every reader that
took a line for a record: bob's account got 4,608 GPU-hours of a job that never existed.
The readers now take records: the live query asks for no free text (names come from a
second query keyed by JobIDRaw), a saved dump with a free-text column is refused unless the
caller says it is trusted, and every job row's JobID and JobIDRaw are validated.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from slurmkit.report import sacct

SEP = "\x1f"
#: the forged job: 4,608 GPUs for one hour, billed to bob
FORGED_GPUS = 4608
#: the columns slurmkit's live query and its recommended dump asked for before (JobName last)
OLD_FIELDS = sacct.QUERY_FIELDS + ("JobName",)


def _row(fields, sep="|", **values) -> str:
    base = dict.fromkeys(fields, "")
    base.update({"ElapsedRaw": "0", "Reason": "None", "Partition": "debug", "NodeList": "node1"})
    base.update(values)
    return sep.join(base[f] for f in fields)


def _forged(fields, sep, start: int, gpus: int = FORGED_GPUS, hours: int = 1) -> str:
    """bob's forged job: ``gpus`` GPUs for ``hours`` hours (4,608 GPU-hours by default)."""
    return _row(
        fields,
        sep,
        JobID="999999",
        JobIDRaw="999999",
        State="COMPLETED",
        AllocTRES=f"gres/gpu={gpus}",
        Submit=str(start),
        Start=str(start),
        End=str(start + hours * 3600),
        User="bob",
        Account="ops",
        JobName="x",
    )


def _slurmkit(*args: str, config: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, SLURMKIT_CONFIG=str(config), TZ="UTC")
    return subprocess.run(
        [sys.executable, "-m", "slurmkit.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.fixture
def config(tmp_path) -> Path:
    (tmp_path / "log").mkdir()
    cfg = tmp_path / "slurmkit.yaml"
    cfg.write_text(f"paths:\n  log_dir: {tmp_path / 'log'}\n  state_dir: {tmp_path}\n")
    return cfg


START = 1_794_000_000  # 2026-11-06T...Z
WINDOW = ("--since", "2026-11-01T00:00:00", "--until", "2026-12-01T00:00:00", "--now", "2026-12-01T00:00:00")


def _alice_with_forged_name(fields, sep) -> str:
    """alice's one-GPU, one-minute job whose name ends in a newline and a complete row."""
    return _row(
        fields,
        sep,
        JobID="100",
        JobIDRaw="100",
        State="COMPLETED",
        AllocTRES="gres/gpu=1",
        Submit=str(START),
        Start=str(START),
        End=str(START + 60),
        User="alice",
        Account="research",
        JobName="innocent\n" + _forged(fields, sep, START),
    )


# --------------------------------------------------------------- a saved dump


@pytest.mark.parametrize("engine", ["python", "duckdb"])
def test_forged_row_in_a_saved_dump_is_refused(tmp_path, config, engine):
    """A dump in slurmkit's former recommended layout (JobName last): alice's job name holds
    bob's forged row. Before: bob had 4,608 GPU-hours, exit 0. Now the dump is refused."""
    dump = tmp_path / "usage.txt"
    dump.write_text("|".join(OLD_FIELDS) + "\n" + _alice_with_forged_name(OLD_FIELDS, "|") + "\n")
    res = _slurmkit("report", "--sacct-file", str(dump), "--engine", engine, "--json", *WINDOW, config=config)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "JobName" in res.stderr and "--format=" + ",".join(sacct.QUERY_FIELDS) in res.stderr
    assert res.stdout == ""


def test_forged_row_in_a_saved_dump_is_not_ingested(tmp_path, config):
    dump = tmp_path / "usage.txt"
    dump.write_text("|".join(OLD_FIELDS) + "\n" + _alice_with_forged_name(OLD_FIELDS, "|") + "\n")
    archive = tmp_path / "archive"
    res = _slurmkit("report", "ingest", "--archive", str(archive), "--sacct-file", str(dump), config=config)
    assert res.returncode == 2, res.stderr
    assert "JobName" in res.stderr
    assert not list(archive.glob("month=*"))


# rows of a dump without free text whose JobID or JobIDRaw cannot be sacct's (lines 2.. of the file)
_BAD_ID_ROWS = [
    ("100", "100", True),  # line 2: a plain job
    ("12x", "12", False),  # line 3: not a JobID
    ("200", "201", False),  # line 4: JobIDRaw of another job
    ("300_4", "304", True),  # line 5: an array task (its own raw id)
    ("300_4", "299", False),  # line 6: a task's raw id before its array's
    ("400+1", "401", True),  # line 7: a het component
    ("500", "5e2", False),  # line 8: JobIDRaw not a number
    ("600_[1-3]", "600", True),  # line 9: a pending array record (not started: no GPU time)
    ("700", "", False),  # line 10: no JobIDRaw
    ("８00", "800", False),  # line 11: a non-ASCII digit
]


def _bad_id_dump(tmp_path) -> Path:
    lines = ["|".join(sacct.QUERY_FIELDS)]
    for job_id, raw, _ in _BAD_ID_ROWS:
        pending = "[" in job_id
        lines.append(
            _row(
                sacct.QUERY_FIELDS,
                JobID=job_id,
                JobIDRaw=raw,
                State="PENDING" if pending else "COMPLETED",
                AllocTRES="gres/gpu=2",
                Submit=str(START),
                Start="Unknown" if pending else str(START),
                End="Unknown" if pending else str(START + 3600),
                User="bob",
                Account="ops",
            )
        )
    dump = tmp_path / "ids.txt"
    dump.write_text("\n".join(lines) + "\n")
    return dump


BAD_LINES = [i + 2 for i, (_, _, good) in enumerate(_BAD_ID_ROWS) if not good]
GOOD_HOURS = 2.0 * sum(1 for j, _, good in _BAD_ID_ROWS if good and "[" not in j)


@pytest.mark.parametrize("engine", ["python", "duckdb"])
def test_rows_with_a_bad_job_id_are_malformed_with_their_lines(tmp_path, config, engine):
    dump = _bad_id_dump(tmp_path)
    res = _slurmkit("report", "--sacct-file", str(dump), "--engine", engine, "--json", *WINDOW, config=config)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["totals"]["gpu_hours"] == GOOD_HOURS
    assert data["meta"]["parse"]["malformed"] == len(BAD_LINES)
    assert f"line(s) {', '.join(map(str, BAD_LINES))}:" in res.stderr
    assert f"{sacct.BAD_JOB_ID} ({len(BAD_LINES)})" in res.stderr


def test_rows_with_a_bad_job_id_are_not_ingested(tmp_path, config):
    dump = _bad_id_dump(tmp_path)
    archive = tmp_path / "archive"
    res = _slurmkit("report", "ingest", "--archive", str(archive), "--sacct-file", str(dump), config=config)
    assert res.returncode == 0, res.stderr
    assert f"line(s) {', '.join(map(str, BAD_LINES))}:" in res.stderr
    for engine in ("duckdb", "python"):
        res = _slurmkit(
            "report", "--archive", str(archive), "--engine", engine, "--json", *WINDOW, config=config
        )
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["totals"]["gpu_hours"] == GOOD_HOURS, engine


_ID_CASES = [(j, r) for j, r, _ in _BAD_ID_ROWS] + [
    ("123", None),
    ("123_4", None),
    ("123_[1-3%2]", None),
    ("123+0", None),
    ("123.batch", None),
    ("123_", None),
    ("1234567890123456789", "1234567890123456789"),  # 19 digits
    ("123_[1-3]", "124"),
    ("123+1", "123"),
    ("123+1", "0123"),
    (" 123", " 123"),
    ("", ""),
    ("0123", "0123"),
    ("123+1", "+124"),
    ("123_4", " 124"),
    ("123_4", "1_24"),
    ("123_4", "12e4"),
    ("123_4", "1200"),
    ("99", "99.0"),
]


def test_the_engines_job_id_rule_is_the_references():
    """The SQL of the JobID/JobIDRaw rule answers as the Python one on every case (a stricter
    SQL would only hand good dumps to the reference, which no report total would show)."""
    from slurmkit.report.duck import duckdb
    from slurmkit.report.engine import _plain_int, _q, job_id_sql

    con = duckdb.connect()
    for job_id, raw in _ID_CASES:
        sql = job_id_sql(_q(job_id), None if raw is None else _q(raw))
        assert con.execute(f"SELECT {sql}").fetchone()[0] == sacct.job_id_ok(job_id, raw), (job_id, raw)
        if raw is None:
            continue
        # as the scan asks it: JobIDRaw's cast says which are plain numbers (no regular expression)
        scan = job_id_sql("j", "r", f"({_plain_int('jid', 1, 18)}) IS NOT NULL")
        got = con.execute(
            f"""SELECT {scan} FROM (SELECT j, r, TRY_CAST(CASE WHEN length(r) BETWEEN 1 AND 18 THEN r END AS BIGINT)
                AS v_jid, length(r) AS l_jid, r AS r_jid FROM (SELECT ? AS j, ? AS r))""",
            [job_id, raw],
        ).fetchone()[0]
        assert got == sacct.job_id_ok(job_id, raw), (job_id, raw, "scan")


def test_good_ids_stay_in_the_engine(tmp_path, config):
    """Array tasks, pending arrays and het components are good rows: the DuckDB engine answers."""
    lines = ["|".join(sacct.QUERY_FIELDS)]
    for job_id, raw in [("100", "100"), ("300_4", "304"), ("400+1", "401"), ("600_[1-3]", "600")]:
        lines.append(
            _row(
                sacct.QUERY_FIELDS, JobID=job_id, JobIDRaw=raw, State="COMPLETED", AllocTRES="gres/gpu=2",
                Submit=str(START), Start=str(START), End=str(START + 3600), User="bob", Account="ops",
            )
        )  # fmt: skip
    dump = tmp_path / "good.txt"
    dump.write_text("\n".join(lines) + "\n")
    res = _slurmkit(
        "report", "--sacct-file", str(dump), "--engine", "duckdb", "--json", *WINDOW, config=config
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["meta"]["engine"]["name"] == "duckdb" and data["totals"]["gpu_hours"] == 8.0


# --------------------------------------------------------------- the names query


def test_a_name_line_that_claims_another_job_withholds_its_name():
    out = SEP.join(["100", "innocent"]) + "\n" + SEP.join(["200", "fake"]) + "\n"
    out += SEP.join(["200", "train"]) + "\n" + SEP.join(["300", "two"]) + "\nlines\n"
    out += SEP.join(["404", "nobody"]) + "\n"
    names, withheld = sacct.parse_names(out)
    assert withheld == ["200"]
    assert names["200"] == "" and names["100"] == "innocent" and names["300"] == "two\nlines"


def test_requeued_attempts_with_one_name_keep_it():
    names, withheld = sacct.parse_names(SEP.join(["7", "train"]) + "\n" + SEP.join(["7", "train"]) + "\n")
    assert names == {"7": "train"} and withheld == []


# --------------------------------------------------------------- live sacct, on the devcluster


def _devcluster_slurmkit(devcluster, *args):
    return devcluster.run(
        [sys.executable, "-m", "slurmkit.cli.main", *args],
        env={"SLURMKIT_CONFIG": str(devcluster.config_path)},
        timeout=120,
    )


@pytest.mark.devcluster
def test_forged_row_through_live_sacct(devcluster, tmp_path):
    """alice names her job ``innocent\\n<a complete row in the old query's layout>``: bob's
    forged 4,608 GPU-hours must show neither in the live report nor in the archive a live
    ingest writes."""
    attacker = "alice"  # the devcluster's ordinary user with an account (research)
    since = time.time() - 5
    start = int(since) - 1800
    tag = f"innocent-{uuid.uuid4().hex[:6]}"
    forged = _forged(OLD_FIELDS, SEP, start).replace(SEP + "x", SEP + tag)
    jid = devcluster.submit(
        "#!/bin/bash\nsleep 1\n",
        [
            "-A",
            "research",
            "-p",
            "debug",
            "-o",
            "/dev/null",
            "-t",
            "2",
            "--gres=gpu:1",
            "-J",
            f"{tag}\n{forged}",
        ],
        user=attacker,
    )
    assert devcluster.wait_job(jid, timeout=120) == "COMPLETED"
    window = ("--since", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 3600)))
    window += ("--until", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 60)))
    # Accounting reaches slurmdbd asynchronously, in parts: a job sacct -j already shows as
    # COMPLETED can still lack its eligible time, and sacct -S/-E selects by that time, so wait
    # until the window's own query lists the job.
    listed = ["sacct", "-a", "-X", "-n", "-P", "-S", window[1], "-E", window[3], "--format=JobIDRaw"]
    deadline = time.monotonic() + 60
    while jid not in devcluster.run(listed).stdout.split():
        assert time.monotonic() < deadline, "the job never reached the window's sacct query"
        time.sleep(1)
    res = _devcluster_slurmkit(devcluster, "report", "--by", "user", "--json", *window)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["totals"]["gpu_hours"] < 100, (data["rows"], res.stderr)
    assert attacker in [r["user"] for r in data["rows"]], data["rows"]  # her real job counts
    assert not any(r["user"] == "bob" and r["gpu_hours"] >= 100 for r in data["rows"]), data["rows"]
    archive = tmp_path / "archive"
    ingest = _devcluster_slurmkit(devcluster, "report", "ingest", "--archive", str(archive), *window)
    assert ingest.returncode == 0, ingest.stderr
    res = _devcluster_slurmkit(
        devcluster, "report", "--archive", str(archive), "--by", "user", "--json", *window
    )
    assert res.returncode == 0, (res.stderr, ingest.stderr)
    assert json.loads(res.stdout)["totals"]["gpu_hours"] < 100


# --------------------------------------------------------------- a killed ingest


def _two_month_dump(tmp_path, jobs: int = 30000) -> Path:
    """``jobs`` one-GPU jobs of one hour each over November and December 2026 (no free text)."""
    lines = ["|".join(sacct.QUERY_FIELDS)]
    for i in range(jobs):
        start = START + (i % 50) * 86400 // 2 + i
        lines.append(
            _row(
                sacct.QUERY_FIELDS,
                JobID=str(1000 + i),
                JobIDRaw=str(1000 + i),
                State="COMPLETED",
                AllocTRES="gres/gpu=1",
                Submit=str(start),
                Start=str(start),
                End=str(start + 3600),
                User=f"u{i % 7}",
                Account="research",
            )
        )
    dump = tmp_path / "months.txt"
    dump.write_text("\n".join(lines) + "\n")
    return dump


def _archive_total(archive: Path, config: Path) -> float:
    res = _slurmkit(
        "report", "--archive", str(archive), "--by", "user", "--json", "--since", "2026-11-01", "--until",
        "2027-01-01", "--now", "2027-01-01T00:00:00", config=config,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["totals"]["gpu_hours"]


def test_a_killed_ingest_leaves_the_archive_exact(tmp_path, config):
    """SIGKILL ``report ingest`` of the same dump at 20 random points: every report after it
    is exact (the ingest is idempotent, so the archive must read as after the first one), and
    the next complete ingest removes what the killed ones left. Before: a temporary Parquet
    file in the month directory matched the archive's glob (a partial one failed every report,
    a complete one doubled its month)."""
    import random
    import signal

    jobs = 30000
    dump = _two_month_dump(tmp_path, jobs)
    archive = tmp_path / "archive"
    argv = [sys.executable, "-m", "slurmkit.cli.main", "report", "ingest", "--archive", str(archive)]
    argv += ["--sacct-file", str(dump)]
    # (a killed run cannot remove its private DuckDB spill directory: they go here, not to /tmp)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, SLURMKIT_CONFIG=str(config), TZ="UTC", TMPDIR=str(scratch))
    began = time.monotonic()
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=300)
    full = time.monotonic() - began
    assert _archive_total(archive, config) == float(jobs)
    rng = random.Random(25)
    for _ in range(20):
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 1.0) * full)  # (python and duckdb start in the first third)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        assert _archive_total(archive, config) == float(jobs)
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert _archive_total(archive, config) == float(jobs)
    leftovers = [p.name for p in archive.rglob(".*") if p.name.startswith((".data-", ".multi-"))]
    assert leftovers == []
    spills = list(scratch.iterdir())
    assert all(p.name.startswith("slurmkit-duckdb-") and p.stat().st_mode & 0o077 == 0 for p in spills)


# --------------------------------------------------------------- neutral outputs

#: a job name that retitles the terminal and turns red, then a spreadsheet formula and Markdown
EVIL = '\x1b]0;pwned\x07\x1b[31m=HYPERLINK("http://x")|**b**<img src=x>'


def _evil_dump(tmp_path) -> Path:
    fields = sacct.FIELDS  # (a dump is data: the user names here are a test's, as a job name would be live)
    rows = [
        _row(
            fields,
            SEP,
            JobID=str(10 + i),
            JobIDRaw=str(10 + i),
            State="COMPLETED",
            AllocTRES="gres/gpu=1",
            Submit=str(START),
            Start=str(START),
            End=str(START + 3600),
            User=name,
            Account="research",
            JobName=name,
        )
        for i, name in enumerate([EVIL, "-2+3", "@SUM(A1)", "train"])
    ]
    dump = tmp_path / "evil.txt"
    dump.write_text(SEP.join(fields) + "\n" + "\n".join(rows) + "\n")
    return dump


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _assert_neutral(text: str, fmt: str) -> None:
    assert "\x1b" not in text and "\x07" not in text
    shown = "\\\\x1b\\]0;pwned\\\\x07" if fmt == "markdown" else "\\x1b]0;pwned\\x07"
    assert shown in text, text
    if fmt == "csv":  # (a plain negative number stays a number)
        cells = [c for line in text.splitlines() for c in line.split(",")]
        formulas = [c for c in cells if c.lstrip('"').startswith(("=", "+", "-", "@")) and not _number(c)]
        assert not formulas, cells
        assert any(c.lstrip('"').startswith("'-2+3") for c in cells) and any(
            c.startswith("'@SUM") for c in cells
        )
    if fmt == "markdown":
        assert "<img" not in text and "&lt;img src=x&gt;" in text and "\\*\\*b\\*\\*" in text
        lines = text.splitlines()
        pipes = [len(re.findall(r"(?<!\\)\|", line)) for line in lines if line.startswith("|")]
        assert set(pipes) == {lines[0].count("|")}, lines  # no cell split a row


@pytest.mark.parametrize("fmt", ["table", "csv", "markdown"])
@pytest.mark.parametrize("engine", ["python", "duckdb"])
def test_usage_report_outputs_are_neutral(tmp_path, config, fmt, engine):
    res = _slurmkit(
        "report", "--sacct-file", str(_evil_dump(tmp_path)), "--trust-free-text", "--engine", engine,
        "--by", "user", "--format", fmt, *WINDOW, config=config,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    _assert_neutral(res.stdout, fmt)


@pytest.mark.parametrize("fmt", ["table", "csv", "markdown"])
def test_capacity_outputs_are_neutral(fmt):
    from slurmkit.report.capacity import render_capacity

    row = {"group": EVIL, "gpus": -1, "available_gpu_hours": -2.5, "used_gpu_hours": 1.0, "used_pct": None}
    total = dict(row, group="TOTAL")
    data = {"meta": {"window": {"label": "2026-11"}}, "rows": [row, dict(row, group="-2+3")], "totals": total}
    text = render_capacity(data, fmt)
    if fmt == "csv":  # numbers stay numbers, even negative ones
        assert "\n'-2+3,-1,-2.5,1.0," in text
    _assert_neutral(text.replace("'-2+3", "'-2+3").replace("'@SUM", "'@SUM") + "\n'@SUM", fmt)


@pytest.mark.parametrize("fmt", ["table", "csv", "markdown"])
def test_efficiency_outputs_are_neutral(fmt):
    import io

    from slurmkit.report import efficiency

    keys = (
        "jobs",
        "gpus",
        "gpus_known",
        "alloc_gpu_h",
        "known_gpu_h",
        "used_gpu_h",
        "idle_gpu_h",
        "unknown_gpu_h",
    )
    base = dict.fromkeys(keys, 1)
    base.update(util_pct=50.0, rank=1, peak_mem_pct=None, gpus_touched=1, gpus_idle=0)
    rows = [dict(base, user=EVIL), dict(base, user="-2+3"), dict(base, user="@SUM(A1)")]
    out = io.StringIO()
    efficiency.render(rows, "user", fmt, {"title": "t"}, out)
    _assert_neutral(out.getvalue(), fmt)


@pytest.fixture
def evil_archive(tmp_path, config) -> Path:
    archive = tmp_path / "archive"
    res = _slurmkit(
        "report", "ingest", "--archive", str(archive), "--sacct-file", str(_evil_dump(tmp_path)),
        "--trust-free-text", config=config,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return archive


@pytest.mark.parametrize("fmt", ["table", "csv", "markdown"])
def test_sql_outputs_are_neutral(evil_archive, config, fmt):
    query = 'SELECT "JobName" AS name, "User", gpus FROM jobs ORDER BY "JobIDRaw"'
    res = _slurmkit("report", "sql", "--archive", str(evil_archive), "--format", fmt, query, config=config)
    assert res.returncode == 0, res.stderr
    _assert_neutral(res.stdout, fmt)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM read_text('/etc/shadow')",
        "SELECT * FROM read_csv('/etc/shadow', header = false, columns = {'l': 'VARCHAR'})",
        "SELECT * FROM glob('/etc/*')",
        "SET enable_external_access = true",
        "INSTALL httpfs",
        "LOAD httpfs",
        "ATTACH ':memory:' AS other",
    ],
)
def test_sql_reads_nothing_beyond_the_archive(evil_archive, config, query):
    res = _slurmkit("report", "sql", "--archive", str(evil_archive), query, config=config)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "root:" not in res.stdout and res.stderr.startswith("slurmkit: error: sql:")
    # refused by the lockdown itself, not by a missing network or extension
    assert "read-only query" in res.stderr or "disabled by configuration" in res.stderr, res.stderr


def test_sql_writes_no_file(evil_archive, config, tmp_path):
    target = tmp_path / "written.csv"
    for query in (f"COPY (SELECT 1) TO '{target}'", f"COPY jobs TO '{evil_archive}/month=2026-11/x.parquet'"):
        res = _slurmkit("report", "sql", "--archive", str(evil_archive), query, config=config)
        assert res.returncode == 2, (res.stdout, res.stderr)
    assert not target.exists() and not (evil_archive / "month=2026-11" / "x.parquet").exists()
    res = _slurmkit(
        "report", "sql", "--archive", str(evil_archive), "SELECT sum(gpus) FROM jobs", config=config
    )
    assert res.returncode == 0 and res.stdout.split()[-1] == "4", res.stdout


def test_ingest_cleans_only_its_own_private_temporary_directory(tmp_path, config):
    """The leftovers' directory is checked before anything in it is removed: a symlink in its
    place is refused (exit 2, the file it points at untouched), and a leftover that is a symlink
    is unlinked, never followed."""
    dump = _two_month_dump(tmp_path, 50)
    archive = tmp_path / "archive"
    ingest = ("report", "ingest", "--archive", str(archive), "--sacct-file", str(dump))
    assert _slurmkit(*ingest, config=config).returncode == 0
    victim_dir = tmp_path / "victim"
    victim_dir.mkdir()
    victim = victim_dir / ".data-precious.parquet"
    victim.write_text("keep me")
    tmp_dir = archive / ".tmp"
    os.symlink(victim, tmp_dir / ".data-leftover.parquet")  # a leftover that is a symlink
    (tmp_dir / ".data-partial.parquet").write_bytes(b"PAR1")  # a partial file
    res = _slurmkit(*ingest, config=config)
    assert res.returncode == 0, res.stderr
    assert "removed 2 file(s) a killed ingest left" in res.stderr
    assert victim.read_text() == "keep me" and sorted(os.listdir(tmp_dir)) == []
    os.rmdir(tmp_dir)
    os.symlink(victim_dir, tmp_dir)  # the directory itself swapped for a symlink
    res = _slurmkit(*ingest, config=config)
    assert res.returncode == 2 and ".tmp" in res.stderr, res.stderr
    assert victim.read_text() == "keep me"
    os.remove(tmp_dir)
    os.mkdir(tmp_dir, 0o777)
    os.chmod(tmp_dir, 0o777)  # writable by others: not private
    res = _slurmkit(*ingest, config=config)
    assert res.returncode == 2 and "private" in res.stderr, res.stderr
