"""The streaming report (slurmkit.report.stream) gives the list path's answer exactly: the
attempts parsed into a list, then reference_lost, reference_suspect and reference_accumulate. Checked on the
hand-worked fixtures and on hypothesis-generated dumps (the engine tests' generators:
requeued attempts, prolog requeues, duplicates, `|` in names, running jobs, garbage and
impossible rows, epoch and ISO times across a DST change), for every kind of grouping,
priced or not, with and without a health-log join."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmkit.report import sacct
from slurmkit.report.aggregate import finish, reference_accumulate
from slurmkit.report.cost import PriceTable
from slurmkit.report.lost import DrainEvent, reference_lost, reference_suspect
from slurmkit.report.stream import StreamingAggregator
from slurmkit.report.window import Window, resolve_window

try:
    from test_report_engine import BASE, _row  # the engine tests' dump generators
except pytest.skip.Exception:  # that module needs duckdb (the report extra)
    BASE, _row = 0, None

BYS = [
    [],
    ["user"],
    ["account", "user"],
    ["state"],
    ["day"],
    ["week"],
    ["month"],
    ["node"],
    ["gpu_type"],
    ["user", "gpu_type", "day"],
    ["partition", "node", "month"],
]


def _list_path(path, window, now, by, prices, drains, hours=6.0, filters=None, **read):
    attempts, stats, _ = sacct.read_sacct_file(path, window=window, now=now, filters=filters, **read)
    lost = reference_lost(attempts, 120)
    suspect = reference_suspect(attempts, drains, hours) if drains is not None else None
    groups, total = reference_accumulate(
        attempts, by, window_start=window.start, lost=lost, suspect=suspect, prices=prices
    )
    return finish(groups, total, by, priced=bool(prices and prices.enabled), health=drains is not None), stats


def _streamed(path, window, now, by, prices, drains, hours=6.0, filters=None, **read):
    agg = StreamingAggregator(
        by,
        window_start=window.start,
        prices=prices,
        prolog_requeue_seconds=120,
        drains=drains,
        lost_window_hours=hours,
    )
    attempts, stats, _ = sacct.read_sacct_file(
        path, window=window, now=now, filters=filters, sink=agg.add, **read
    )
    assert attempts == []  # nothing kept
    groups, total = agg.result()
    return finish(groups, total, by, priced=bool(prices and prices.enabled), health=drains is not None), stats


def _same(path, window, now, by, prices, drains, **kw):
    ref, ref_stats = _list_path(path, window, now, by, prices, drains, **kw)
    got, got_stats = _streamed(path, window, now, by, prices, drains, **kw)
    assert got_stats.to_dict() == ref_stats.to_dict()
    assert got.rows == ref.rows
    assert got.totals == ref.totals
    assert got.states == ref.states
    assert got.causes == ref.causes  # the table's column order, ties included
    return ref


FIXTURE_WINDOWS = {
    "basic.txt": (dict(since="2026-11-01", until="2026-12-01"), (2026, 12, 1, 1, 30, 0)),
    "prolog_requeue.txt": ({}, None),
    "malformed.txt": ({}, None),
    "impossible.txt": ({}, (2026, 12, 1, 0, 0, 0)),
}


@pytest.mark.parametrize("fixture", sorted(FIXTURE_WINDOWS))
@pytest.mark.parametrize("by", BYS, ids=lambda b: ",".join(b) or "cluster")
@pytest.mark.parametrize("priced", [False, True])
@pytest.mark.parametrize("drained", [False, True])
def test_fixtures_same_answer(fixture_path, fixture, by, priced, drained):
    opts, now_t = FIXTURE_WINDOWS[fixture]
    window = resolve_window(default_unbounded=True, **opts)
    now = time.mktime(now_t + (0, 0, -1)) if now_t else None
    prices = PriceTable({"h100": 2.5, "a100": 1.2}, 2.0) if priced else None
    drains = (
        [DrainEvent("node1", time.mktime((2026, 11, 2, 13, 0, 0, 0, 0, -1))), DrainEvent("node2", 1.8e9)]
        if drained
        else None
    )
    ref = _same(fixture_path(fixture), window, now, by, prices, drains)
    assert ref.totals["attempts"] > 0


def test_prolog_fixture_is_hand_worked(fixture_path):
    """The prolog rule moved the FAILED attempts' hours after the fact: 4 + 1 + 1 GPU-h (the
    fixture's header), in the FAILED jobs' groups and in the total."""
    window = resolve_window(default_unbounded=True)
    rep = _same(fixture_path("prolog_requeue.txt"), window, None, ["user"], None, None)
    assert rep.totals["lost_by_cause"]["FAILED_AFTER_PROLOG_REQUEUE"] == 6.0
    assert sum(r["lost_by_cause"].get("FAILED_AFTER_PROLOG_REQUEUE", 0) for r in rep.rows) == 6.0
    assert rep.totals["lost_gpu_hours"] == 8.021111


def _dump(tmp_path, lines):
    path = tmp_path / "dump.txt"
    path.write_text("|".join(sacct.FIELDS) + "\n" + "".join(line + "\n" for line in lines))
    return str(path)


def _line(jid, state, start, end, *, reason="None", nodes="node1", user="alice", tres="gres/gpu=2"):
    return f"{jid}|{jid}|{state}|{tres}|{start - 60}|{start}|{end}|0|{user}|research|gpu|{nodes}|{reason}|x"


def test_multi_attempt_jobs_and_duplicates(tmp_path):
    """Attempts of one job far apart in the file, a duplicate of an earlier attempt after
    other rows, an attempt between a prolog requeue and its FAILED successor (which breaks
    the rule), and a job in two groups: all as the list path says."""
    t = 1_800_000_000
    lines = [
        _line(1, "REQUEUED", t, t + 5),  # prolog requeue (5 s) ...
        _line(2, "COMPLETED", t, t + 100, user="bob"),
        _line(3, "REQUEUED", t, t + 5),
        _line(4, "COMPLETED", t, t + 3600, nodes="node[1-3]"),
        _line(2, "FAILED", t + 200, t + 300, user="alice"),  # job 2 in two groups
        _line(1, "FAILED", t + 10, t + 1000),  # ... then FAILED: FAILED_AFTER_PROLOG_REQUEUE
        _line(3, "COMPLETED", t + 7, t + 8),  # between 3's requeue and its FAILED attempt
        _line(3, "FAILED", t + 10, t + 1000),  # not after the requeue: plain FAILED
        _line(2, "COMPLETED", t, t + 100, user="bob"),  # exact duplicate, far from its original
        _line("07", "COMPLETED", t, t + 10),  # "07" and "7" are two jobs
        _line(7, "COMPLETED", t, t + 10),
    ]
    path = _dump(tmp_path, lines)
    window = resolve_window(default_unbounded=True)
    for by in BYS:
        ref = _same(path, window, t + 9000, by, None, [DrainEvent("node2", t + 3000)])
        assert ref.totals["jobs"] == 6
        assert ref.totals["lost_by_cause"]["FAILED_AFTER_PROLOG_REQUEUE"] == round(2 * 990 / 3600, 6)
    rep = _same(path, window, t + 9000, ["user"], None, None)
    assert {r["user"]: r["jobs"] for r in rep.rows} == {"alice": 6, "bob": 1}


def test_tied_causes_keep_the_list_paths_order(tmp_path):
    """Equal lost hours of two causes are listed (table columns) in the order the list path
    first meets them: FAILED_AFTER_PROLOG_REQUEUE is settled at the end, yet in a split view
    it comes before a TIMEOUT of the same hours that lies later in the file."""
    t = 1_800_000_000
    lines = [
        _line(1, "REQUEUED", t, t + 5),
        _line(1, "FAILED", t + 10, t + 1000),  # 2 GPUs x 990 s, FAILED_AFTER_PROLOG_REQUEUE
        _line(9, "TIMEOUT", t + 10, t + 1000),  # 2 GPUs x 990 s, TIMEOUT: a tie
    ]
    path = _dump(tmp_path, lines)
    window = resolve_window(default_unbounded=True)
    for by in BYS:
        ref = _same(path, window, t + 9000, by, None, None)
        assert ref.causes[:2] == (
            ["FAILED_AFTER_PROLOG_REQUEUE", "TIMEOUT"]
            if any(d in ("day", "week", "month", "node", "gpu_type") for d in by)
            else ["TIMEOUT", "FAILED_AFTER_PROLOG_REQUEUE"]  # the fields path adds the prolog cause last
        )


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    data=st.data(),
    iso=st.booleans(),
    clean=st.booleans(),
    by=st.sampled_from(BYS),
    windowed=st.booleans(),
    priced=st.booleans(),
    drained=st.booleans(),
    user_filter=st.booleans(),
)
@pytest.mark.skipif(_row is None, reason="the dump generators live in the engine tests (need duckdb)")
def test_generated_dumps_same_answer(
    tmp_path_factory, monkeypatch, data, iso, clean, by, windowed, priced, drained, user_filter
):
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    sacct.clear_time_caches()
    rows = data.draw(st.lists(_row(iso, clean), max_size=60))
    lines = [line for group in rows for line in group]
    path = _dump(tmp_path_factory.mktemp("gen"), lines)
    now = BASE + 3 * 86400
    window = (
        Window(BASE + 3600, BASE + 2 * 86400 + 7, "w") if windowed else resolve_window(default_unbounded=True)
    )
    prices = PriceTable({"h100": 2.5}, 1.25) if priced else None
    drains = [DrainEvent("node2", BASE + 86400), DrainEvent("gpu03", BASE + 2 * 86400)] if drained else None
    filters = sacct.Filters(users=frozenset({"alice"})) if user_filter else None
    _same(path, window, now, by, prices, drains, filters=filters)
