"""The archive's file handling in-process (the security suite runs the same rules through the
CLI, in new processes, which kill no mutant): the private directory it writes in and the
clean-up of what a killed ingest left (issue 30, mutation testing of the ingest)."""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from slurmkit.errors import UsageError
from slurmkit.report import archive, sacct


@pytest.fixture
def umask0():
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_a_private_directory_is_made_0700_whatever_the_umask(tmp_path, umask0):
    path = tmp_path / "d"
    fd = archive._private_dir(str(path))
    try:
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o700 and os.path.samestat(os.fstat(fd), os.stat(path))
    finally:
        os.close(fd)
    fd = archive._private_dir(str(path))  # an existing one is taken as it is
    os.close(fd)


@pytest.mark.parametrize("mode", [0o770, 0o720, 0o702, 0o777])
def test_a_directory_others_can_write_is_refused(tmp_path, mode):
    path = tmp_path / "d"
    path.mkdir()
    os.chmod(path, mode)
    with pytest.raises(UsageError) as exc:
        archive._private_dir(str(path))
    assert (
        str(exc.value)
        == f"--archive: {path} is not this user's private directory: refusing to write or clean it"
    )


def test_a_symlink_or_a_file_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    os.symlink(real, link)
    with pytest.raises(UsageError) as exc:
        archive._private_dir(str(link))
    assert str(exc.value).startswith(f"--archive: {link}: ") and str(exc.value).endswith(
        " (a symlink or not a directory?)"
    )
    afile = tmp_path / "file"
    afile.write_text("")
    with pytest.raises(UsageError):
        archive._private_dir(str(afile))


def _leftovers(d, victim):
    (d / ".data-1.parquet").write_text("x")
    (d / ".multi-2.parquet").write_text("x")
    os.symlink(victim, d / ".data-link.parquet")  # unlinked, never followed
    os.symlink(d / "gone", d / ".multi-dangling.parquet")  # a dangling one too
    (d / "data.parquet").write_text("keep")
    (d / ".data-dir").mkdir()  # not a file: kept


def test_leftovers_are_removed_through_the_directory_never_followed(tmp_path):
    d = tmp_path / ".tmp"
    d.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    _leftovers(d, victim)
    assert archive._remove_leftovers(str(d)) == 4
    assert sorted(os.listdir(d)) == [".data-dir", "data.parquet"]
    assert victim.read_text() == "precious"
    assert archive._remove_leftovers(str(d)) == 0


def test_a_month_directory_that_is_not_private_is_left_alone(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    month = tmp_path / "month=2026-11"
    month.mkdir()
    _leftovers(month, victim)
    os.chmod(month, 0o777)
    assert archive._remove_leftovers(str(month), strict=False) == 0
    assert len(os.listdir(month)) == 6
    os.chmod(month, 0o700)
    assert archive._remove_leftovers(str(month), strict=False) == 4
    assert archive._remove_leftovers(str(tmp_path / "absent"), strict=False) == 0
    link = tmp_path / "month=link"
    os.symlink(month, link)
    assert archive._remove_leftovers(str(link), strict=False) == 0
    with pytest.raises(UsageError):
        os.chmod(month, 0o770)
        archive._remove_leftovers(str(month))  # the archive's own .tmp: refused, not skipped


def test_an_ingest_starts_by_cleaning_its_temporaries_and_the_months(tmp_path, capsys):
    d = tmp_path / "arch"
    (d / ".tmp").mkdir(parents=True, mode=0o700)
    (d / ".tmp" / ".data-1.parquet").write_text("x")
    for m in ("month=2026-10", "month=2026-11"):
        (d / m).mkdir(mode=0o700)
        (d / m / ".multi-1.parquet").write_text("x")
    (d / "month=2026-12").mkdir(mode=0o700)
    (d / "month=2026-12" / ".data-9.parquet").write_text("x")
    os.chmod(d / "month=2026-12", 0o770)  # not private: left alone, not refused
    (d / "other").mkdir(mode=0o700)
    (d / "other" / ".data-3.parquet").write_text("x")  # not a month: not looked into
    (d / "month=file").write_text("")
    archive._clean(str(d))
    assert capsys.readouterr().err == f"slurmkit: {d}: removed 3 file(s) a killed ingest left\n"
    assert (
        not (d / ".tmp" / ".data-1.parquet").exists()
        and not (d / "month=2026-11" / ".multi-1.parquet").exists()
    )
    assert (d / "month=2026-12" / ".data-9.parquet").exists() and (d / "other" / ".data-3.parquet").exists()
    archive._clean(str(d))
    assert capsys.readouterr().err == ""  # nothing removed, nothing said


def test_a_temporary_is_a_new_empty_parquet_name_in_the_private_directory(tmp_path):
    (tmp_path / ".tmp").mkdir(mode=0o700)
    p = archive._temporary(str(tmp_path), ".data-")
    assert os.path.dirname(p) == str(tmp_path / ".tmp") and os.path.getsize(p) == 0
    name = os.path.basename(p)
    assert name.startswith(".data-") and name.endswith(".parquet")
    assert archive._temporary(str(tmp_path), ".data-") != p


@pytest.mark.parametrize("killed_at, prefix", [("data.parquet", ".data-"), (archive.MULTI, ".multi-")])
def test_what_a_killed_ingest_leaves_is_a_temporary_the_next_one_removes(
    cli, fixture_path, tmp_path, monkeypatch, killed_at, prefix
):
    """An ingest killed just before a month file or ``_multi.parquet`` is renamed into place
    leaves its temporary in ``.tmp`` under the name the clean-up looks for; the next ingest
    removes it (and says so) and the archive is whole."""
    arch = tmp_path / "arch"
    dump = fixture_path("basic.txt")
    real = os.replace

    def killed(src, dst, *a, **k):
        if os.path.basename(dst) == killed_at:
            raise KeyboardInterrupt  # what a kill leaves: the temporary written, not renamed
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", killed)
    res = cli("report", "ingest", "--archive", str(arch), "--trust-free-text", "--sacct-file", dump)
    assert res.exit_code != 0
    monkeypatch.setattr(os, "replace", real)
    (left,) = os.listdir(arch / ".tmp")
    assert left.startswith(prefix) and left.endswith(".parquet") and (arch / ".tmp" / left).stat().st_size > 0
    res = cli("report", "ingest", "--archive", str(arch), "--trust-free-text", "--sacct-file", dump)
    assert res.exit_code == 0, res.stderr
    assert f"slurmkit: {arch}: removed 1 file(s) a killed ingest left\n" in res.stderr
    assert os.listdir(arch / ".tmp") == [] and (arch / archive.MULTI).exists()


def test_a_damaged_rules_stamp_reads_as_months_of_unknown_rules(cli, fixture_path, tmp_path):
    """``_rules.json`` is the archive's own file, but a damaged one (months not a mapping, a
    version that is not a number, not JSON) must not stop a report or an ingest: such a month
    reads as written before the stamp (rules 1), and the next ingest writes a sound stamp."""
    from slurmkit.report.rules import RULES_VERSION

    arch = tmp_path / "arch"
    dump = fixture_path("basic.txt")
    assert (
        cli("report", "ingest", "--archive", str(arch), "--trust-free-text", "--sacct-file", dump).exit_code
        == 0
    )
    months = [m[len("month=") :] for m in sorted(os.listdir(arch)) if m.startswith("month=")]
    assert months and archive.stale_months(str(arch)) == {}
    stamp = arch / archive.RULES_STAMP
    everyone_1 = dict.fromkeys(months, 1) if RULES_VERSION != 1 else {}
    for damaged in (
        {"months": months},  # a list
        {"months": dict.fromkeys(months, str(RULES_VERSION))},  # versions as text
        {"months": {**dict.fromkeys(months, None), "9": RULES_VERSION}},
        {"other": 1},
        [1, 2],
        "not json",
    ):
        stamp.write_text(damaged if isinstance(damaged, str) else json.dumps(damaged))
        assert archive.stale_months(str(arch)) == everyone_1, damaged
    res = cli("report", "ingest", "--archive", str(arch), "--trust-free-text", "--sacct-file", dump)
    assert res.exit_code == 0, res.stderr
    assert archive.stale_months(str(arch)) == {}
    assert json.loads(stamp.read_text()) == {"months": dict.fromkeys(months, RULES_VERSION)}


def test_a_dump_with_only_the_required_columns_is_ingested_with_the_rest_blank(cli, tmp_path):
    """sacct output with only JobID, State, AllocTRES, Start and End (the columns a report
    needs): JobIDRaw is the JobID, every other column is stored empty, and the rows count."""
    import duckdb

    dump = tmp_path / "min.txt"
    dump.write_text(
        "JobID|State|AllocTRES|Start|End\n"
        "700|COMPLETED|cpu=8,gres/gpu=4,node=1|2026-11-02T10:00:00|2026-11-02T12:00:00\n"
        "700.batch|COMPLETED|cpu=8,gres/gpu=4,node=1|2026-11-02T10:00:00|2026-11-02T12:00:00\n"
        "701_3|FAILED|cpu=8,gres/gpu=2,node=1|2026-11-03T10:00:00|2026-11-03T11:00:00\n"
    )
    arch = tmp_path / "arch"
    res = cli("report", "ingest", "--archive", str(arch), "--trust-free-text", "--sacct-file", str(dump))
    assert res.exit_code == 0, res.stderr
    assert res.stderr == (
        f"slurmkit: ingested 2 attempt(s) into {arch} (0 not started, 0 malformed or impossible: skipped); "
        "rows per month now: 2026-11: 2\n"
    )  # nothing skipped is 0, not blank
    rows = duckdb.sql(
        f"SELECT * FROM read_parquet('{arch}/month=*/data.parquet') ORDER BY \"JobID\""
    ).fetchall()
    cols = [
        d[0] for d in duckdb.sql(f"SELECT * FROM read_parquet('{arch}/month=*/data.parquet')").description
    ]
    got = [dict(zip(cols, r)) for r in rows]
    assert [(r["JobID"], r["JobIDRaw"], r["State"], r["gpus"]) for r in got] == [
        ("700", "700", "COMPLETED", 4),
        ("701_3", "701_3", "FAILED", 2),
    ]
    for r in got:
        assert [
            r[c]
            for c in ("Submit", "ElapsedRaw", "User", "Account", "Partition", "NodeList", "Reason", "JobName")
        ] == [""] * 8
        assert r["submit_s"] is None and r["end_s"] - r["start_s"] in (3600, 7200)


def test_a_planted_lock_symlink_is_refused_with_one_line_naming_the_archive(cli, fixture_path, tmp_path):
    arch = tmp_path / "arch"
    arch.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.symlink(victim, arch / ".ingest.lock")
    res = cli(
        "report",
        "ingest",
        "--archive",
        str(arch),
        "--trust-free-text",
        "--sacct-file",
        fixture_path("basic.txt"),
    )
    assert res.exit_code == 2
    (line,) = res.stderr.splitlines()
    assert line == f"slurmkit: error: --archive {arch}: {arch}/.ingest.lock: lock file is a symbolic link"
    assert victim.read_text() == "precious" and not any(n.startswith("month=") for n in os.listdir(arch))


def test_what_an_ingest_returns(fixture_path, tmp_path):
    """``ingest``'s answer, key for key: the attempts kept, those skipped and why, and the rows
    each month written holds now (basic.txt: its job rows, two of them never started)."""
    from slurmkit.report import engine

    src = engine.probe_file(fixture_path("basic.txt"), None, "|")
    arch = str(tmp_path / "arch")
    first = archive.ingest(arch, src)
    assert sorted(first) == ["bad_rows", "malformed", "months", "not_started", "rows", "skipped"]
    assert first["skipped"] == first["not_started"] + first["malformed"] and first["not_started"] > 0
    assert first["rows"] == sum(first["months"].values()) > 0
    again = archive.ingest(arch, src)  # idempotent: the same rows replace themselves
    assert again == first


def test_row_ids_carry_the_month_and_are_unique_across_the_archive(cli, tmp_path):
    """``rid``: the month (``year * 12 + month - 1``) in the high 32 bits, the row within the
    month (by Start) in the low ones; the engine joins rows by it, so no two rows of the
    archive may share one (January and November, the same month of two years)."""
    import duckdb

    dump = tmp_path / "months.txt"
    rows = [("801", "2026-01-05"), ("802", "2026-01-06"), ("803", "2026-11-05"), ("804", "2027-11-05")]
    dump.write_text(
        "JobID|State|AllocTRES|Start|End\n"
        + "".join(f"{j}|COMPLETED|gres/gpu=1|{d}T10:00:00|{d}T11:00:00\n" for j, d in rows)
    )
    arch = tmp_path / "arch"
    res = cli("report", "ingest", "--archive", str(arch), "--trust-free-text", "--sacct-file", str(dump))
    assert res.exit_code == 0, res.stderr
    got = duckdb.sql(
        f"SELECT \"JobID\", rid >> 32, rid & 4294967295 FROM read_parquet('{arch}/month=*/data.parquet') "
        'ORDER BY "JobID"'
    ).fetchall()
    assert got == [
        ("801", 2026 * 12 + 0, 1),
        ("802", 2026 * 12 + 0, 2),
        ("803", 2026 * 12 + 10, 1),
        ("804", 2027 * 12 + 10, 1),
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: chown to another account")
def test_a_month_directory_of_another_account_is_left_alone(tmp_path):
    """Not ours, though nobody else can write it: the clean-up of the months leaves it alone
    (the archive's own ``.tmp`` would be refused)."""
    month = tmp_path / "month=2026-11"
    month.mkdir(mode=0o755)
    (month / ".data-1.parquet").write_text("x")
    os.chown(month, 65534, 65534)
    assert archive._remove_leftovers(str(month), strict=False) == 0
    assert os.listdir(month) == [".data-1.parquet"]


def test_an_ingest_of_one_month_keeps_the_rules_stamp_of_the_others(cli, tmp_path):
    from slurmkit.report.rules import RULES_VERSION

    arch = tmp_path / "arch"
    for j, d in (("901", "2026-01-05"), ("902", "2026-11-05")):
        dump = tmp_path / f"{j}.txt"
        dump.write_text(
            f"JobID|State|AllocTRES|Start|End\n{j}|COMPLETED|gres/gpu=1|{d}T10:00:00|{d}T11:00:00\n"
        )
        res = cli("report", "ingest", "--archive", str(arch), "--trust-free-text", "--sacct-file", str(dump))
        assert res.exit_code == 0, res.stderr
    stamp = json.loads((arch / archive.RULES_STAMP).read_text())
    assert stamp == {"months": {"2026-01": RULES_VERSION, "2026-11": RULES_VERSION}}
    assert archive.stale_months(str(arch)) == {}


def test_a_reader_error_without_a_line_number_still_names_the_dump(fixture_path, tmp_path, monkeypatch):
    """DuckDB's line reader names the line of a NUL byte (``CSV Error on Line: N``); an error
    of that kind without the number is reported the same way, as ``a line``."""
    import contextlib

    import duckdb

    from slurmkit.report import engine

    real = archive.session

    class Refusing:
        def __init__(self, con):
            self.con = con

        def execute(self, query, *args):
            if query.lower().startswith("create temp table new as"):
                raise duckdb.InvalidInputException("Invalid Input Error: a NUL byte, somewhere")
            return self.con.execute(query, *args)

        def __getattr__(self, name):
            return getattr(self.con, name)

    @contextlib.contextmanager
    def session(*args, **kwargs):
        with real(*args, **kwargs) as con:
            yield Refusing(con)

    monkeypatch.setattr(archive, "session", session)
    src = engine.probe_file(fixture_path("basic.txt"), None, "|")
    arch = tmp_path / "arch"
    with pytest.raises(UsageError) as exc:
        archive.ingest(str(arch), src)
    assert str(exc.value) == (
        f"{src.path}: a line holds a NUL byte, which sacct never writes; nothing was ingested "
        "(remove it, e.g. tr -d '\\000')"
    )
    assert not any(n.startswith("month=") for n in os.listdir(arch))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a lock file owned by root")
def test_the_ingest_lock_trusts_only_the_ingesting_account(fixture_path, tmp_path, monkeypatch):
    """The archive's lock is this account's own: run as another user (here the process's
    euid as the archive sees it, 4242), a lock file root left in the archive is refused,
    although root is trusted elsewhere (trust.trusted_uids)."""
    from slurmkit.core import trust
    from slurmkit.report import engine

    arch = tmp_path / "arch"
    arch.mkdir(mode=0o700)
    (arch / ".ingest.lock").write_text("")
    os.chmod(arch / ".ingest.lock", 0o600)
    os.chown(arch, 4242, 4242)  # the archive is that account's (its directory is checked first)
    src = engine.probe_file(fixture_path("basic.txt"), None, "|")
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    assert 0 in trust.trusted_uids()
    with pytest.raises(UsageError) as exc:
        archive.ingest(str(arch), src)
    assert str(exc.value) == (
        f"--archive {arch}: {arch}/.ingest.lock: lock file is owned by uid 0, not by a trusted account"
    )


#: The archive's file format, column for column: other tools read these files (pandas,
#: polars and Spark name columns case-sensitively), so a column's spelling is part of it.
MONTH_COLUMNS = [
    *[(c, "VARCHAR") for c in sacct.FIELDS],
    ("start_s", "BIGINT"),
    ("end_s", "BIGINT"),
    ("submit_s", "BIGINT"),
    ("gpus", "BIGINT"),
    ("jid_i", "BIGINT"),
    ("state_n", "VARCHAR"),
    ("rid", "BIGINT"),
]


def test_the_archive_files_columns_names_and_types(fixture_path, tmp_path):
    """Each month file holds sacct's fields by their sacct names (text), then the typed columns
    and the row id; ``_multi.parquet`` the same rows' columns and the rule outputs. Read with
    DuckDB, which keeps a file's spelling (``hive_partitioning`` off: ``month=`` is the
    directory's name, not a column of the file)."""
    import duckdb

    from slurmkit.report import engine

    arch = tmp_path / "arch"
    archive.ingest(str(arch), engine.probe_file(fixture_path("basic.txt"), None, "|"))

    def columns(path):
        return [
            (name, kind)
            for name, kind, *_ in duckdb.sql(
                f"DESCRIBE SELECT * FROM read_parquet('{path}', hive_partitioning = false)"
            ).fetchall()
        ]

    months = sorted(arch.glob("month=*/" + archive.DATA))
    assert len(months) == 2
    for month in months:
        assert columns(month) == MONTH_COLUMNS, month
    assert columns(arch / archive.MULTI) == [
        *MONTH_COLUMNS,
        ("tie_rank", "BIGINT"),
        ("pflag", "BOOLEAN"),
        ("lflag", "BOOLEAN"),
    ]


def _ingest_cli(cli, fixture_path, arch):
    return cli(
        "report", "ingest", "--archive", str(arch), "--trust-free-text", "--sacct-file", fixture_path("basic.txt")
    )  # fmt: skip


def test_a_new_archive_and_its_months_are_readable_by_others_and_written_by_us_alone(
    cli, fixture_path, tmp_path
):
    old = os.umask(0)
    try:
        arch = tmp_path / "deep" / "arch"
        res = _ingest_cli(cli, fixture_path, arch)
    finally:
        os.umask(old)
    assert res.exit_code == 0, res.stderr
    months = [arch / n for n in os.listdir(arch) if n.startswith("month=")]
    assert months
    for d in [arch, *months]:
        assert stat.S_IMODE(os.lstat(d).st_mode) == archive.ARCHIVE_MODE == 0o755, d
    assert stat.S_IMODE(os.lstat(arch / archive.TMP_DIR).st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o775, 0o777, 0o1777])
def test_an_archive_others_can_write_is_refused_before_anything_is_written(cli, fixture_path, tmp_path, mode):
    """Another user could plant a month (a link to a directory of theirs, or their own rows)."""
    arch = tmp_path / "arch"
    arch.mkdir()
    arch.chmod(mode)
    res = _ingest_cli(cli, fixture_path, arch)
    assert res.exit_code == 2
    (line,) = res.stderr.splitlines()
    assert line == (
        f"slurmkit: error: --archive: {arch} is not this user's private directory: refusing to write or clean it"
    )
    assert os.listdir(arch) == []


def test_a_month_that_is_a_link_is_refused_and_its_target_untouched(cli, fixture_path, tmp_path):
    arch = tmp_path / "arch"
    assert _ingest_cli(cli, fixture_path, arch).exit_code == 0
    month = sorted(n for n in os.listdir(arch) if n.startswith("month="))[-1]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(arch / month)
    os.symlink(elsewhere, arch / month)
    res = _ingest_cli(cli, fixture_path, arch)
    assert res.exit_code == 2
    assert res.stderr.splitlines()[-1] == (
        f"slurmkit: error: --archive: {arch / month}: Not a directory (a symlink or not a directory?)"
    )
    assert os.listdir(elsewhere) == []
