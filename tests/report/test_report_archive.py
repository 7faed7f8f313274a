"""The accounting archive: `report ingest` (incremental, idempotent, requeued attempts
kept apart), every usage view with `--archive`, and `report sql`."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("duckdb")

from slurmkit.report import sacct  # noqa: E402

NOW = ("--now", "2026-12-01T01:30:00")


def _ingest(cli, arch, dump):
    """``report ingest`` of a trusted fixture dump into the archive ``arch``."""
    return cli("report", "ingest", "--archive", str(arch), "--trust-free-text", "--sacct-file", str(dump))


def _json(res):
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    for k in ("engine", "generated_at", "source"):
        data["meta"].pop(k, None)
    return data


def _split(path, tmp_path):
    """Two overlapping dumps of the same rows: the first 2/3 and the last 2/3."""
    lines = open(path).read().splitlines(keepends=True)
    header = next(i for i, line in enumerate(lines) if line.startswith("JobID"))
    rows = lines[header + 1 :]
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(lines[header] + "".join(rows[: 2 * len(rows) // 3]))
    b.write_text(lines[header] + "".join(rows[len(rows) // 3 :]))
    return str(a), str(b)


@pytest.mark.parametrize("by", ["account,user", "day", "node", "gpu_type", "state"])
def test_archive_report_equals_file_report(cli, fixture_path, tmp_path, by):
    arch = str(tmp_path / "arch")
    res = cli(
        "report", "ingest", "--archive", arch, "--trust-free-text", "--sacct-file", fixture_path("basic.txt")
    )
    assert res.exit_code == 0
    args = ["--month", "2026-11", *NOW, "--by", by, "--json"]
    from_file = _json(cli("report", "--trust-free-text", "--sacct-file", fixture_path("basic.txt"), *args))
    from_archive = _json(cli("report", "--archive", arch, *args))
    # the archive keeps job rows only: the step and not-started rows are not there to count
    for data in (from_file, from_archive):
        data["meta"].pop("parse")
    assert from_archive == from_file
    lost = _json(cli("report", "lost", "--archive", arch, *args))
    assert lost["totals"]["lost_gpu_hours"] == from_file["totals"]["lost_gpu_hours"] == 9.0


def test_ingest_is_idempotent_for_overlapping_windows(cli, fixture_path, tmp_path):
    arch = str(tmp_path / "arch")
    a, b = _split(fixture_path("basic.txt"), tmp_path)
    for f in (a, b, a, b):  # overlapping, and each twice
        assert (
            cli("report", "ingest", "--archive", arch, "--trust-free-text", "--sacct-file", f).exit_code == 0
        )
    args = ["--month", "2026-11", *NOW, "--by", "account,user", "--json"]
    whole = _json(cli("report", "--trust-free-text", "--sacct-file", fixture_path("basic.txt"), *args))
    got = _json(cli("report", "--archive", arch, *args))
    assert got["totals"] == whole["totals"] and got["rows"] == whole["rows"]
    assert got["totals"]["gpu_hours"] == 62.0 and got["totals"]["attempts"] == 16
    # job 106 was requeued: two attempts, two rows
    res = cli(
        "report",
        "sql",
        "--archive",
        arch,
        "--json",
        'SELECT "State", "Start" FROM jobs WHERE "JobIDRaw" = \'106\' ORDER BY "Start"',
    )
    assert [r["State"] for r in json.loads(res.stdout)] == ["REQUEUED", "COMPLETED"]


def test_a_running_job_is_updated_not_doubled(cli, tmp_path):
    head = "|".join(sacct.FIELDS) + "\n"
    first, later = tmp_path / "1.txt", tmp_path / "2.txt"
    first.write_text(head + "7|7|RUNNING|gres/gpu=2|1795000000|1795000000|Unknown|0|a|x|p|n1|None|j\n")
    later.write_text(
        head + "7|7|COMPLETED|gres/gpu=2|1795000000|1795000000|1795003600|3600|a|x|p|n1|None|j\n"
    )
    arch = str(tmp_path / "arch")
    for f in (first, later):
        assert (
            cli("report", "ingest", "--archive", arch, "--trust-free-text", "--sacct-file", str(f)).exit_code
            == 0
        )
    res = cli("report", "sql", "--archive", arch, "--format", "csv", 'SELECT "State", "End" FROM jobs')
    assert res.stdout == "State,End\nCOMPLETED,1795003600\n"
    t = _json(
        cli("report", "--archive", arch, "--json", "--month", "2026-11", "--now", "2026-12-01T00:00:00")
    )["totals"]
    assert t["gpu_hours"] == 2.0 and t["jobs"] == 1


def test_running_jobs_and_unknown_submits_are_read_by_the_engine(cli, tmp_path):
    """A running job (End Unknown: NULL ``end_s``) and a Submit sacct did not know are
    counted by the engine itself, not handed to the reference as unreadable rows."""
    dump = tmp_path / "d.txt"
    dump.write_text(
        "|".join(sacct.FIELDS)
        + "\n"
        + "7|7|RUNNING|gres/gpu=2|1795000000|1795000000|Unknown|0|a|x|p|n1|None|j\n"
        + "8|8|COMPLETED|gres/gpu=2|Unknown|1795000000|1795003600|3600|a|x|p|n1|None|j\n"
        + "9|9|COMPLETED|gres/gpu=1|1794999400|1795000000|1795003600|3600|b|x|p|n2|None|j\n"
    )
    arch = str(tmp_path / "arch")
    assert (
        cli("report", "ingest", "--archive", arch, "--trust-free-text", "--sacct-file", str(dump)).exit_code
        == 0
    )
    args = ["--month", "2026-11", "--now", "1795007200", "--json"]  # two hours after the Starts
    res = cli("report", "--archive", arch, *args)
    assert json.loads(res.stdout)["meta"]["engine"] == {"name": "duckdb"}
    got = _json(res)
    # job 7: 2 GPUs until now, 4 h, no wait; job 8: 2 GPUs for 1 h, wait unknown (not averaged);
    # job 9: 1 GPU for 1 h after a 600 s wait
    assert got["totals"]["gpu_hours"] == 7.0 and got["totals"]["attempts"] == 3
    assert got["totals"]["gpu_hours_by_state"] == {"COMPLETED": 3.0, "RUNNING": 4.0}
    assert got["totals"]["mean_wait_s"] == 300.0
    reference = _json(
        cli("report", "--trust-free-text", "--sacct-file", str(dump), "--engine", "python", *args)
    )
    assert got["rows"] == reference["rows"] and got["totals"] == reference["totals"]


def test_ingest_skips_malformed_rows_with_line_numbers(cli, fixture_path, tmp_path):
    """Rows the reference would not count are not archived: ingest reports them by line, and
    the archive's report is the file's (the DuckDB engine, nothing left to report by line)."""
    arch = str(tmp_path / "arch")
    res = _ingest(cli, arch, fixture_path("malformed.txt"))
    assert res.exit_code == 0
    from_file = cli(
        "report",
        "--trust-free-text",
        "--sacct-file",
        fixture_path("malformed.txt"),
        "--json",
        "--month",
        "2026-11",
    )
    # the same warning as the file's report, line numbers and reasons included
    warning = next(line for line in from_file.stderr.splitlines() if "malformed row(s)" in line)
    assert warning in res.stderr
    assert "malformed or impossible: skipped" in res.stderr
    res = cli("report", "--archive", arch, "--json", "--month", "2026-11")
    data = json.loads(res.stdout)
    assert data["meta"]["engine"]["name"] == "duckdb"
    assert data["totals"]["gpu_hours"] == 4.0  # as from the file (tests/report/fixtures/malformed.txt header)
    file_totals = json.loads(from_file.stdout)["totals"]
    # the archive never held the 7 rows: ingest reported them, the report has none to exclude
    assert file_totals.pop("excluded_rows") == 7 and data["totals"].pop("excluded_rows") == 0
    assert data["totals"] == file_totals


def _dirty(fixture_path, tmp_path):
    """malformed.txt with more bad rows after it: exact copies of earlier kept rows (lines 15
    and 22), a bad job id, a Start before 2000, a Submit that is no time, a row never started,
    a "CANCELLED by UID" row without an End (the reason names the state, not the text), and 20
    more truncated rows (the warning lists 20 lines and says how many more)."""
    lines = open(fixture_path("malformed.txt")).read().splitlines()
    good = [line for line in lines if line.startswith(("200|", "207|"))]
    assert len(good) == 2
    base = good[0].split("|")

    def row(**fields):
        f = list(base)
        for i, v in fields.items():
            f[int(i[1:])] = v
        return "|".join(f)

    more = [
        good[0],
        good[1],
        row(f0="300x", f1="300x"),
        row(f0="301", f1="301", f5="1999-12-31T23:00:00"),
        row(f0="302", f1="302", f4="soon"),
        row(f0="303", f1="303", f5="Unknown", f6="Unknown", f2="PENDING"),
        row(f0="304", f1="304", f2="CANCELLED by 1000", f6=""),
        good[0],
    ] + [f"{400 + i}|{400 + i}|COMPLETED" for i in range(20)]
    path = tmp_path / "dirty.txt"
    path.write_text("\n".join(lines + more) + "\n")
    return str(path)


def test_ingest_warns_of_each_bad_row_as_the_reference_does(cli, fixture_path, tmp_path):
    """Line numbers, reasons, their counts and order, the "and N more", the impossible ones:
    the same warning as a report of the file by the reference (``--engine python``), though
    ingest found them in SQL; exact copies of a kept row are in it (the archive keeps the row
    once), the row never started is not."""
    dump = _dirty(fixture_path, tmp_path)
    res = _ingest(cli, tmp_path / "arch", dump)
    assert res.exit_code == 0, res.stderr
    ref = cli("report", "--trust-free-text", "--sacct-file", dump, "--engine", "python", "--json")
    assert ref.exit_code == 0, ref.stderr
    expected = next(line for line in ref.stderr.splitlines() if "malformed row(s)" in line)
    got = [line for line in res.stderr.splitlines() if "malformed row(s)" in line]
    assert got == [expected]
    assert (
        "and 14 more" in expected
        and "empty end time for a CANCELLED job (1)" in expected
        and "exact duplicate of an earlier row (3)" in expected
    )
    # 7 of the fixture, the bad job id, the three bad times and the 20 truncated rows; 1 not started
    assert "(1 not started, 31 malformed or impossible: skipped)" in res.stderr


def test_ingest_reads_a_dump_once_however_many_rows_are_bad(fixture_path, tmp_path, monkeypatch):
    """The warning comes from the ingest's own SQL: the reference's parser never reads the
    dump again (it did, all of it, whenever one row was bad)."""
    from slurmkit.report import source

    def no_reference(*args, **kwargs):
        raise AssertionError("the reference parser read the dump")

    monkeypatch.setattr(sacct, "parse_rows", no_reference)
    monkeypatch.setattr(sacct, "_parse_rows", no_reference)
    dump = source.Dump(_dirty(fixture_path, tmp_path), None, None, True)
    done = source.ingest(str(tmp_path / "arch"), dump=dump, win=None, rcfg={})
    assert done.counts["malformed"] == 31 and len(done.warnings) == 1
    assert "skipped 34 malformed row(s) at line(s) 16, 17, 18, 19, 20, 21, 23, 26," in done.warnings[0]


def test_a_nul_byte_in_a_dump_is_one_line_naming_it_and_the_archive_is_untouched(cli, fixture_path, tmp_path):
    """DuckDB's line reader refuses a NUL byte (sacct never writes one): ingest says which line,
    exits 2, and the archive keeps exactly what it had (no internal error, no partial month)."""
    arch = tmp_path / "arch"
    assert _ingest(cli, str(arch), fixture_path("malformed.txt")).exit_code == 0
    before = {p.relative_to(arch): p.read_bytes() for p in arch.rglob("*") if p.is_file()}
    dump = tmp_path / "nul.txt"
    lines = open(fixture_path("malformed.txt"), "rb").read().split(b"\n")
    lines[16] = lines[16][:5] + b"\x00" + lines[16][5:]  # line 17, a data row
    dump.write_bytes(b"\n".join(lines))
    res = cli("report", "ingest", "--archive", str(arch), "--trust-free-text", "--sacct-file", str(dump))
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        f"slurmkit: error: {dump}: line 17 holds a NUL byte, which sacct never writes; nothing was ingested "
        "(remove it, e.g. tr -d '\\000')"
    ]
    assert {p.relative_to(arch): p.read_bytes() for p in arch.rglob("*") if p.is_file()} == before


def test_sql_errors_and_missing_archive_are_usage_errors(cli, tmp_path):
    res = cli("report", "sql", "--archive", str(tmp_path / "none"), "SELECT 1")
    assert res.exit_code == 2 and "no archive" in res.stderr
    res = cli("report", "sql", "SELEC nonsense")
    assert res.exit_code == 2 and res.stderr.startswith("slurmkit: error: sql:")
    res = cli("report", "--archive", str(tmp_path / "none"))
    assert res.exit_code == 2


def test_multi_attempt_list_is_used_only_when_current(cli, fixture_path, tmp_path):
    """The archive's list of jobs with several rows spares a report from grouping every job;
    a month file changed after it was written (another tool, a restore) makes it stale, and
    the report then groups all rows, with the same answer."""
    import os

    from slurmkit.report import archive

    arch = str(tmp_path / "arch")
    assert _ingest(cli, arch, fixture_path("basic.txt")).exit_code == 0
    assert archive.source(arch).multi is not None
    args = ["--month", "2026-11", *NOW, "--by", "account,user", "--json"]
    fresh = _json(cli("report", "--archive", arch, *args))
    month = os.path.join(arch, "month=2026-11", "data.parquet")
    st = os.stat(month)
    os.utime(month, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert archive.source(arch).multi is None
    assert _json(cli("report", "--archive", arch, *args)) == fresh
    assert fresh["totals"]["jobs"] < fresh["totals"]["attempts"]  # the fixture has requeued jobs


def test_concurrent_ingest_waits_then_gives_a_clear_error(cli, fixture_path, tmp_path, monkeypatch):
    from slurmkit.core import trust
    from slurmkit.report import archive

    arch = tmp_path / "arch"
    arch.mkdir()
    held = trust.lock(str(arch / ".ingest.lock"), 1.0, owners=frozenset({os.geteuid()}))
    try:
        monkeypatch.setattr(archive, "LOCK_TIMEOUT", 0.2)
        res = _ingest(cli, str(arch), fixture_path("basic.txt"))
        assert res.exit_code == 2 and "another `report ingest` is still running" in res.stderr
    finally:
        os.close(held)
    assert _ingest(cli, str(arch), fixture_path("basic.txt")).exit_code == 0


def test_a_month_from_an_older_slurmkit_is_read_then_upgraded(cli, tmp_path):
    """A month file with sacct's text only (slurmkit before the typed columns) is reported by
    the reference path over its rows; the next ingest into that month gives it typed columns."""
    import duckdb

    head = "|".join(sacct.FIELDS) + "\n"
    arch = tmp_path / "arch"
    (arch / "month=2026-11").mkdir(parents=True)
    old = "8|8|COMPLETED|gres/gpu=4|1795000000|1795000000|1795003600|3600|a|x|p|n1|None|j"
    cols = ", ".join(f"'{v}' AS \"{c}\"" for c, v in zip(sacct.FIELDS, old.split("|")))
    duckdb.execute(f"COPY (SELECT {cols}) TO '{arch}/month=2026-11/data.parquet' (FORMAT parquet)")
    args = ["--json", "--month", "2026-11", "--now", "2026-12-01T00:00:00"]
    data = json.loads(cli("report", "--archive", str(arch), *args).stdout)
    assert data["meta"]["engine"]["name"] == "python" and data["totals"]["gpu_hours"] == 4.0
    new = tmp_path / "new.txt"
    new.write_text(head + "9|9|COMPLETED|gres/gpu=2|1795000000|1795000000|1795003600|3600|b|x|p|n2|None|k\n")
    assert (
        cli(
            "report", "ingest", "--archive", str(arch), "--trust-free-text", "--sacct-file", str(new)
        ).exit_code
        == 0
    )
    data = json.loads(cli("report", "--archive", str(arch), *args).stdout)
    assert data["meta"]["engine"]["name"] == "duckdb"
    assert data["totals"]["gpu_hours"] == 6.0 and data["totals"]["jobs"] == 2


def _encodings(path: str) -> dict:
    import duckdb

    rows = duckdb.execute(f"SELECT path_in_schema, encodings FROM parquet_metadata('{path}')").fetchall()
    return dict(rows)


def test_months_are_delta_encoded_and_read_beside_plain_ones(cli, tmp_path):
    """Ingest writes Parquet's version 2 encodings (the epochs as deltas); a month written
    with plain encodings (an earlier slurmkit) is read by the engine beside them."""
    import duckdb

    head = "|".join(sacct.FIELDS) + "\n"
    october, november = tmp_path / "oct.txt", tmp_path / "nov.txt"
    october.write_text(
        head + "5|5|COMPLETED|gres/gpu=4|1792000000|1792000000|1792003600|3600|a|x|p|n1|None|j\n"
    )
    november.write_text(
        head + "9|9|COMPLETED|gres/gpu=2|1795000000|1795000000|1795003600|3600|b|x|p|n2|None|k\n"
    )
    arch = tmp_path / "arch"
    assert (
        cli(
            "report", "ingest", "--archive", str(arch), "--trust-free-text", "--sacct-file", str(october)
        ).exit_code
        == 0
    )
    oct_file = str(arch / "month=2026-10" / "data.parquet")
    assert _encodings(oct_file)["start_s"] == "DELTA_BINARY_PACKED"
    plain = str(tmp_path / "plain.parquet")
    duckdb.execute(f"COPY (SELECT * FROM '{oct_file}') TO '{plain}' (FORMAT parquet, COMPRESSION zstd)")
    os.replace(plain, oct_file)
    assert _encodings(oct_file)["start_s"] == "PLAIN"
    # the next ingest (another month) writes the list of jobs with several rows again
    assert (
        cli(
            "report", "ingest", "--archive", str(arch), "--trust-free-text", "--sacct-file", str(november)
        ).exit_code
        == 0
    )
    assert _encodings(str(arch / "month=2026-11" / "data.parquet"))["end_s"] == "DELTA_BINARY_PACKED"
    res = cli(
        "report", "--archive", str(arch), "--json", "--since", "2026-10-01", "--until", "2026-12-01", *NOW
    )
    data = json.loads(res.stdout)
    assert data["meta"]["engine"] == {"name": "duckdb"}
    assert data["totals"]["gpu_hours"] == 6.0 and data["totals"]["jobs"] == 2


def _ingest_prolog_fixture(cli, fixture_path, tmp_path) -> str:
    arch = str(tmp_path / "arch")
    res = _ingest(cli, arch, fixture_path("prolog_requeue.txt"))
    assert res.exit_code == 0, res.stderr
    return arch


def _rewrite_multi(arch: str, version: int) -> None:
    """What an archive of another rule version holds: ``_multi.parquet`` with the prolog flags of
    another rule (here: every flag inverted), stamped with ``version``."""
    from slurmkit.core import files
    from slurmkit.report import archive
    from slurmkit.report.duck import duckdb

    multi = os.path.join(arch, archive.MULTI)
    con = duckdb.connect()
    con.execute(
        f"COPY (SELECT * REPLACE (NOT pflag AS pflag, NOT lflag AS lflag) FROM read_parquet('{multi}')) "
        f"TO '{multi}.new' (FORMAT parquet)"
    )
    con.close()
    os.replace(multi + ".new", multi)
    stamp_path = os.path.join(arch, archive.MULTI_STAMP)
    stamp = json.load(open(stamp_path))
    files.write_json_atomic(stamp_path, dict(stamp, rules=version))


def test_rule_outputs_of_another_rule_version_are_not_used(cli, fixture_path, tmp_path):
    """The archive stamps the rule version its stored rule outputs were computed under; a report
    over outputs of another version recomputes them from the rows (the same answer as a fresh
    archive), and only outputs of this version are used (shown by tampering with them)."""
    from slurmkit.report import archive
    from slurmkit.report.rules import RULES_VERSION

    args = ["--since", "2026-11-01", "--until", "2026-12-01", *NOW, "--by", "account,user", "--json"]
    arch = _ingest_prolog_fixture(cli, fixture_path, tmp_path)
    truth = _json(cli("report", "lost", "--archive", arch, *args))
    assert truth["totals"]["lost_by_cause"].get(
        "FAILED_AFTER_PROLOG_REQUEUE"
    )  # the fixture has prolog requeues

    _rewrite_multi(arch, RULES_VERSION)  # this version's (tampered) outputs are used...
    assert archive.source(arch).multi is not None
    assert _json(cli("report", "lost", "--archive", arch, *args))["totals"] != truth["totals"]

    _rewrite_multi(arch, RULES_VERSION - 1)  # ...another version's are not
    assert archive.source(arch).multi is None
    assert _json(cli("report", "lost", "--archive", arch, *args)) == truth


def test_months_of_another_rule_version_are_named(cli, fixture_path, tmp_path):
    from slurmkit.core import files
    from slurmkit.report import archive
    from slurmkit.report.rules import RULES_VERSION

    arch = _ingest_prolog_fixture(cli, fixture_path, tmp_path)
    args = ["--since", "2026-11-01", "--until", "2026-12-01", *NOW, "--json"]
    res = cli("report", "--archive", arch, *args)
    assert res.exit_code == 0 and "other rules" not in res.stderr
    files.write_json_atomic(
        os.path.join(arch, archive.RULES_STAMP), {"months": {"2026-11": RULES_VERSION - 1}}
    )
    res = cli("report", "--archive", arch, *args)
    assert res.exit_code == 0
    assert f"month(s) 2026-11 (rules {RULES_VERSION - 1}) were ingested under other rules" in res.stderr
    os.remove(os.path.join(arch, archive.RULES_STAMP))  # an archive from before the stamp: rules 1
    assert "month(s) 2026-11 (rules 1)" in cli("report", "--archive", arch, *args).stderr
