"""ISO times (what plain ``sacct -P`` prints) in the DuckDB engine: converted in its one scan by
a table of UTC offsets (engine.utc_offsets), by the reference's rule (sacct.hour_epoch), around
DST changes in zones that keep it by an hour, by half an hour, at midnight, and not at all."""

from __future__ import annotations

import time

import pytest

duckdb = pytest.importorskip("duckdb")

from slurmkit.report import engine, sacct  # noqa: E402
from slurmkit.report.aggregate import finish, reference_accumulate  # noqa: E402
from slurmkit.report.lost import reference_lost  # noqa: E402
from slurmkit.report.window import resolve_window  # noqa: E402

ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Asia/Kolkata",
]


@pytest.fixture
def zone(monkeypatch, request):
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    sacct.clear_time_caches()
    yield request.param
    monkeypatch.undo()
    time.tzset()
    sacct.clear_time_caches()


def _iso(local_seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(local_seconds))


def _changes(year_from: int = 2024, year_to: int = 2026):
    """The local seconds where the offset changes, by the engine's table."""
    table = engine.utc_offsets(int(time.time()))
    lo = engine._civil_days(year_from, 1, 1) * 86400
    hi = engine._civil_days(year_to, 1, 1) * 86400
    return [t for t, _ in table[1:-1] if lo <= t < hi]


@pytest.mark.parametrize("zone", ZONES, indirect=True)
def test_offset_table_gives_the_reference_epoch_at_every_quarter_hour_around_changes(zone):
    times = [t + k for t in _changes() for k in range(-3 * 3600, 3 * 3600, 900)]
    times += [engine._civil_days(2025, m, 1) * 86400 + 12 * 3600 + 7 for m in range(1, 13)]
    texts = [_iso(t) for t in times] + ["2025-02-31T10:00:00", "2025-01-01 23:59:60"]
    table = engine.utc_offsets(int(time.time()))
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT unnest(?) AS x", [texts])
    loc = engine._iso_local_sql("x")
    got = dict(
        con.execute(
            f"SELECT x, o - ({engine._offset_sql('o', table)}) FROM (SELECT x, {loc} AS o FROM t)"
        ).fetchall()
    )
    for text in texts:
        sacct.clear_time_caches()  # each text converted alone: the rule, not the cache
        if text in ("2025-02-31T10:00:00", "2025-01-01 23:59:60"):  # taken by mktime, not strptime:
            assert got[text] is None  # left to the second step (see the report test below)
        else:
            assert got[text] == sacct.parse_time(text), text


def test_an_hour_passed_twice_is_its_first_whatever_came_before(monkeypatch):
    """glibc's mktime guesses an ambiguous hour's offset from its previous call: the rule fixes it."""
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        first = []
        for before in ((2018, 7, 1, 2), (2018, 12, 1, 2), (2018, 10, 28, 3)):
            time.mktime((*before, 0, 0, 0, 0, -1))
            first.append(sacct.hour_epoch(2018, 10, 28, 2))
        assert first == [1540684800] * 3  # 02:00 CEST, the first of the two
    finally:
        monkeypatch.undo()
        time.tzset()
        sacct.clear_time_caches()


@pytest.mark.parametrize("zone", ZONES, indirect=True)
def test_report_over_iso_times_across_changes_same_as_reference(zone, tmp_path, monkeypatch):
    """Attempts that start or end in the hours around each change: the same statistics and sums,
    with no row left to the second step (every time decided in the scan)."""
    fields = list(sacct.FIELDS)
    rows = []
    jid = 100
    for t in _changes():
        for k in range(-2 * 3600, 2 * 3600, 1800):
            jid += 1
            row = dict.fromkeys(fields, "")
            row.update(
                JobID=str(jid), JobIDRaw=str(jid), State="COMPLETED", AllocTRES="gres/gpu=1",
                Submit=_iso(t + k - 600), Start=_iso(t + k), End=_iso(t + k + 2700), User="u",
                Account="a", Partition="p", NodeList="n1", Reason="None", JobName="x",
            )  # fmt: skip
            rows.append("|".join(row[f] for f in fields))
    path = tmp_path / "dump.txt"
    path.write_text("|".join(fields) + "\n" + "\n".join(rows) + "\n")
    odd = dict.fromkeys(fields, "")
    odd.update(
        JobID="99", JobIDRaw="99", State="COMPLETED", AllocTRES="gres/gpu=1", Submit="2025-02-28T09:00:00",
        Start="2025-02-31T10:00:00", End="2025-03-03T11:00:00", User="u", Account="a", Partition="p",
        NodeList="n1", Reason="None", JobName="x",
    )  # fmt: skip
    window = resolve_window(default_unbounded=True)
    now = int(time.time())
    attempts, ref_stats, _ = sacct.read_sacct_file(str(path), window=window, now=now)
    groups, total = reference_accumulate(
        attempts, ["user"], window_start=window.start, lost=reference_lost(attempts, 120)
    )
    ref = finish(groups, total, ["user"], priced=False, health=False)
    second_steps = []
    real = engine._convert_iso
    monkeypatch.setattr(engine, "_convert_iso", lambda *a: second_steps.append(1) or real(*a))
    g, tot, stats = engine.run(
        engine.probe_file(str(path)), window=window, now=now, filters=None, by=["user"], prices=None,
        max_gpus=sacct.DEFAULT_MAX_GPUS, prolog_requeue_seconds=120,
    )  # fmt: skip
    got = finish(g, tot, ["user"], priced=False, health=False)
    assert stats.to_dict() == ref_stats.to_dict()
    assert got.totals == ref.totals and got.rows == ref.rows
    assert second_steps == []
    # a day past the month's end (mktime runs on into March): only that row in the second step
    path.write_text("|".join(fields) + "\n" + "\n".join(rows + ["|".join(odd[f] for f in fields)]) + "\n")
    attempts, ref_stats, _ = sacct.read_sacct_file(str(path), window=window, now=now)
    g, tot, stats = engine.run(
        engine.probe_file(str(path)), window=window, now=now, filters=None, by=["user"], prices=None,
        max_gpus=sacct.DEFAULT_MAX_GPUS, prolog_requeue_seconds=120,
    )  # fmt: skip
    assert stats.to_dict() == ref_stats.to_dict() and second_steps == [1]
    groups, total = reference_accumulate(
        attempts, ["user"], window_start=window.start, lost=reference_lost(attempts, 120)
    )
    assert (
        finish(g, tot, ["user"], priced=False, health=False).totals
        == finish(groups, total, ["user"], priced=False, health=False).totals
    )
    if zone != "UTC" and zone != "Asia/Kolkata":
        assert len(rows) >= 8


@pytest.mark.parametrize("zone", ["UTC"], indirect=True)
def test_the_scan_converts_only_what_the_reference_reads_the_same(zone):
    """Every one-character change of a few ISO times (whitespace, which DuckDB's cast skips; an
    hour of 24, which it takes as the next day; signs, letters, non-ASCII digits, separators):
    the scan's value, where it gives one, is the reference's; anything else is NULL, left to the
    second step (which is the reference's own ``parse_time``)."""
    base = ["2026-11-03T10:05:09", "2026-11-03 23:59:59", "2024-02-29T00:00:00"]
    chars = [
        " ",
        "\t",
        "\n",
        "\r",
        "\x0b",
        "\x0c",
        "+",
        "-",
        "a",
        "\u0663",
        "0",
        "9",
        "2",
        "4",
        "T",
        "t",
        ":",
        "/",
    ]
    texts = set(base) | {"2026-11-03T24:00:00", "2026-11-03 24:00:00", "2026-11-03T10:60:00"}
    for b in base:
        for i in range(len(b)):
            for c in chars:
                texts.add(b[:i] + c + b[i + 1 :])  # replaced
                texts.add((b[:i] + c + b[i:])[:19])  # inserted, the end cut
                texts.add(c + b[:i] + b[i + 1 :])  # one left out, one in front
    texts = sorted(texts)
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT unnest(?) AS x", [texts])
    got = dict(con.execute(f"SELECT x, {engine._iso_local_sql('x')} FROM t").fetchall())
    converted = 0
    for text in texts:
        if got[text] is None:
            continue
        converted += 1
        sacct.clear_time_caches()
        assert got[text] == sacct.parse_time(text), repr(text)
    assert got["2026-11-03T24:00:00"] is None and got["2026-11-03 24:00:00"] is None
    assert converted > len(base) * 10
