"""Grouping, splitting, lost hours, the health-log join and cost, against the
hand-worked totals in tests/report/fixtures/basic.txt and prolog_requeue.txt."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkit.errors import UsageError
from slurmkit.report import sacct
from slurmkit.report.aggregate import PeriodSplitter, _hours, parse_by, reference_aggregate
from slurmkit.report.cost import PriceTable
from slurmkit.report.lost import read_health_log, reference_lost, reference_suspect
from slurmkit.report.window import resolve_window


def load(fixture_path, name="basic.txt", window=None):
    window = window or resolve_window(since="2026-11-01", until="2026-12-01")
    now = time.mktime((2026, 12, 1, 1, 30, 0, 0, 0, -1))
    attempts, _, _ = sacct.read_sacct_file(fixture_path(name), window=window, now=now)
    return attempts, window


def rows_by(report, *dims):
    return {tuple(r[d] for d in dims): r for r in report.rows}


def test_by_account_user(fixture_path):
    attempts, w = load(fixture_path)
    rep = reference_aggregate(
        attempts, ["account", "user"], window_start=w.start, lost=reference_lost(attempts)
    )
    rows = rows_by(rep, "account", "user")
    assert set(rows) == {("research", "alice"), ("ops", "bob"), ("research", "bob")}
    ar, bo, br = rows[("research", "alice")], rows[("ops", "bob")], rows[("research", "bob")]
    assert (ar["gpu_hours"], bo["gpu_hours"], br["gpu_hours"]) == (21.0, 36.0, 5.0)
    assert (ar["jobs"], bo["jobs"], br["jobs"]) == (9, 3, 3)
    assert br["attempts"] == 4
    assert (bo["rank"], ar["rank"], br["rank"]) == (1, 2, 3)
    assert bo["share_pct"] == pytest.approx(100 * 36 / 62, abs=1e-3)
    assert bo["mean_wait_s"] == 400.0
    assert (ar["lost_gpu_hours"], bo["lost_gpu_hours"], br["lost_gpu_hours"]) == (4.0, 4.0, 1.0)
    assert ar["lost_by_cause"] == {"TIMEOUT": 4.0} and bo["lost_by_cause"] == {"NODE_FAIL": 4.0}
    assert br["lost_by_cause"] == {"REQUEUED": 1.0}
    assert ar["gpu_hours_by_state"] == {"CANCELLED": 1.0, "COMPLETED": 16.0, "TIMEOUT": 4.0}
    t = rep.totals
    assert (t["gpu_hours"], t["jobs"], t["attempts"], t["lost_gpu_hours"]) == (62.0, 15, 16, 9.0)


def test_mean_wait_ignores_clipped_starts(fixture_path):
    attempts, w = load(fixture_path)
    rep = reference_aggregate(attempts, ["user"], window_start=w.start)
    alice = rows_by(rep, "user")[("alice",)]
    # alice's observable waits: 100: 600, 102_1: 0, 102_2: 1800, 108: 3600, 110+0: 0, 110+1: 0,
    # 112: 0, 115: 0 (107 started before the window: its wait is not observable)
    assert alice["mean_wait_s"] == pytest.approx((600 + 0 + 1800 + 3600) / 8, abs=0.1)


def test_by_gpu_type(fixture_path):
    attempts, w = load(fixture_path)
    rows = rows_by(reference_aggregate(attempts, ["gpu_type"], window_start=w.start), "gpu_type")
    assert {k[0]: r["gpu_hours"] for k, r in rows.items()} == {
        "h100": 57.0,
        "a100": 3.0,
        "untyped": 2.0,
        "none": 0.0,
    }


def test_by_node_splits_multi_node_jobs_evenly(fixture_path):
    attempts, w = load(fixture_path)
    rep = reference_aggregate(attempts, ["node"], window_start=w.start)
    rows = rows_by(rep, "node")
    assert rows[("node1",)]["gpu_hours"] == 41.0 and rows[("node2",)]["gpu_hours"] == 21.0
    assert rep.totals["gpu_hours"] == 62.0 and rep.totals["jobs"] == 15
    assert rows[("node1",)]["jobs"] == 9  # 100 101 105 106 107 109 110 113 115


def test_by_day_splits_at_midnight(fixture_path):
    attempts, w = load(fixture_path)
    rep = reference_aggregate(attempts, ["day"], window_start=w.start)
    got = {r["day"]: r["gpu_hours"] for r in rep.rows}
    assert got == {
        "2026-11-01": 2.0,
        "2026-11-02": 8.0,
        "2026-11-03": 16.0,
        "2026-11-04": 1.0,
        "2026-11-05": 4.0,
        "2026-11-06": 4.0,
        "2026-11-07": 4.0,
        "2026-11-08": 4.0,
        "2026-11-09": 1.0,
        "2026-11-30": 18.0,
    }
    assert rep.totals["gpu_hours"] == 62.0


def test_by_week_and_month(fixture_path):
    attempts, w = load(fixture_path)
    weeks = {
        r["week"]: r["gpu_hours"] for r in reference_aggregate(attempts, ["week"], window_start=w.start).rows
    }
    # ISO weeks: W44 = Oct 26-Nov 1 (107: 2), W45 = Nov 2-8 (8+16+1+4+4+4+4 = 41),
    # W46 = Nov 9-15 (115: 1), W49 = Nov 30-Dec 6 (18)
    assert weeks == {"2026-W44": 2.0, "2026-W45": 41.0, "2026-W46": 1.0, "2026-W49": 18.0}
    months = {
        r["month"]: r["gpu_hours"]
        for r in reference_aggregate(attempts, ["month"], window_start=w.start).rows
    }
    assert months == {"2026-11": 62.0}


def test_combined_split_dimensions(fixture_path):
    attempts, w = load(fixture_path)
    rep = reference_aggregate(attempts, ["user", "gpu_type", "day"], window_start=w.start)
    rows = rows_by(rep, "user", "gpu_type", "day")
    assert rows[("bob", "untyped", "2026-11-05")]["gpu_hours"] == 1.0
    assert rows[("bob", "untyped", "2026-11-06")]["gpu_hours"] == 1.0
    assert sum(r["gpu_hours"] for r in rep.rows) == pytest.approx(62.0)


def test_period_splitter_dst(monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    sp = PeriodSplitter("day")
    start = int(time.mktime((2026, 10, 24, 12, 0, 0, 0, 0, -1)))
    end = int(time.mktime((2026, 10, 26, 12, 0, 0, 0, 0, -1)))
    pieces = sp.split(start, end)
    # 2026-10-25 has 25 hours in Berlin (clocks go back)
    assert pieces == [("2026-10-24", 12 * 3600), ("2026-10-25", 25 * 3600), ("2026-10-26", 12 * 3600)]


def test_parse_by_errors():
    assert parse_by("account,user") == ["account", "user"]
    assert parse_by("gpu") == ["gpu_type"]
    with pytest.raises(UsageError, match="valid: user"):
        parse_by("qos")
    with pytest.raises(UsageError, match="repeated"):
        parse_by("user,user")
    with pytest.raises(UsageError, match="at most one"):
        parse_by("day,month")


def test_prolog_requeue_detection(fixture_path):
    attempts, w = load(fixture_path, "prolog_requeue.txt")
    lost = reference_lost(attempts)
    causes = {(attempts[i].job_id, attempts[i].state): c for i, c in lost.items()}
    assert causes == {
        ("300", "REQUEUED"): "REQUEUED",
        ("300", "FAILED"): "FAILED_AFTER_PROLOG_REQUEUE",
        ("301", "REQUEUED"): "REQUEUED",
        ("303", "REQUEUED"): "REQUEUED",
        ("303", "FAILED"): "FAILED_AFTER_PROLOG_REQUEUE",
        ("304", "REQUEUED"): "REQUEUED",
        ("304", "FAILED"): "FAILED_AFTER_PROLOG_REQUEUE",
    }
    rep = reference_aggregate(attempts, [], window_start=w.start, lost=lost)
    assert rep.totals["gpu_hours"] == pytest.approx(10.021111, abs=1e-5)
    assert rep.totals["lost_gpu_hours"] == pytest.approx(8.021111, abs=1e-5)
    assert rep.totals["lost_by_cause"]["FAILED_AFTER_PROLOG_REQUEUE"] == 6.0


def test_health_log_join(fixture_path, tmp_path):
    attempts, w = load(fixture_path)
    log = tmp_path / "health.jsonl"
    drain = time.mktime((2026, 11, 2, 13, 0, 0, 0, 0, -1))
    log.write_text(
        "\n".join(
            [
                json.dumps(
                    {
                        "node": "node1",
                        "timestamp": drain,
                        "status": "fail",
                        "code": "GPU_ECC_DBE",
                        "check": "gpu_ecc",
                    }
                ),
                json.dumps(
                    {"node": "node2", "timestamp": drain, "status": "ok", "code": "OK", "check": "gpu_ecc"}
                ),
                "not json",
            ]
        )
        + "\n"
    )
    hl = read_health_log(str(log))
    assert len(hl.events) == 1 and hl.bad_lines == 1 and hl.records == 3
    suspect = reference_suspect(attempts, hl.events, hours=6)
    assert {attempts[i].job_id for i in suspect} == {"100"}  # ran 10:00-12:00 on node1, drained at 13:00
    rep = reference_aggregate(attempts, ["user"], window_start=w.start, suspect=suspect)
    assert rows_by(rep, "user")[("alice",)]["suspect_gpu_hours"] == 8.0
    assert rep.totals["suspect_gpu_hours"] == 8.0
    # a 30-minute window misses it (the job ended at 12:00)
    assert reference_suspect(attempts, hl.events, hours=0.5) == set()


def test_health_log_missing_is_none(tmp_path):
    assert read_health_log(str(tmp_path / "nope.jsonl")) is None
    assert read_health_log(str(tmp_path / "nope*.jsonl")) is None


def test_cost_per_gpu_type(fixture_path):
    attempts, w = load(fixture_path)
    prices = PriceTable({"h100": 2.5, "a100": 1.0}, default=2.0)
    rep = reference_aggregate(attempts, ["account"], window_start=w.start, prices=prices)
    rows = rows_by(rep, "account")
    # research: h100 21 (alice) x 2.5 = 52.5; a100 3 x 1.0 = 3; untyped 2 x 2.0 = 4 -> 59.5
    # ops: 36 h100 x 2.5 = 90
    assert rows[("research",)]["cost"] == 59.5 and rows[("ops",)]["cost"] == 90.0
    assert rep.totals["cost"] == 149.5
    split = rows_by(
        reference_aggregate(attempts, ["gpu_type", "day"], window_start=w.start, prices=prices),
        "gpu_type",
        "day",
    )
    assert split[("untyped", "2026-11-05")]["cost"] == 2.0


def test_no_prices_no_cost_column(fixture_path):
    attempts, w = load(fixture_path)
    rep = reference_aggregate(attempts, ["user"], window_start=w.start, prices=PriceTable())
    assert "cost" not in rep.rows[0] and not rep.priced


def test_empty_input():
    rep = reference_aggregate([], ["user"])
    assert rep.rows == [] and rep.totals["gpu_hours"] == 0.0 and rep.totals["share_pct"] == 0.0


def test_health_log_written_by_the_health_hooks(fixture_path, tmp_path):
    """The join reads the records slurmkit.verdict.record writes (``time``, ``drain_reason``)."""
    from slurmkit.verdict.base import Action, CheckResult, Status
    from slurmkit.verdict.record import append_jsonl, verdict_record

    attempts, w = load(fixture_path)
    log = tmp_path / "health.jsonl"
    bad = CheckResult("gpu_ecc", Status.FAIL, "GPU_ECC_DBE", "GPU 3: 2 uncorrected errors", Action.ISOLATE)
    drained = verdict_record(
        "node2",
        "epilog",
        Status.FAIL,
        [bad],
        job_id="112",
        seconds=0.1,
        exit_code=1,
        drain_reason=bad.drain_reason(),
    )
    drained["time"] = time.mktime((2026, 11, 7, 12, 0, 0, 0, 0, -1))
    healthy = verdict_record("node1", "prolog", Status.OK, [], job_id="113", seconds=0.1, exit_code=0)
    healthy["time"] = drained["time"]
    append_jsonl(str(log), drained)
    append_jsonl(str(log), healthy)
    hl = read_health_log(str(log))
    (ev,) = hl.events
    assert (ev.node, ev.code, ev.check) == ("node2", "GPU_ECC_DBE", "gpu_ecc")
    # job 112 (TIMEOUT, node2, 11-07 10:00-11:00, 4 GPUs) ran within 6 h before the drain
    assert {attempts[i].job_id for i in reference_suspect(attempts, hl.events, 6)} == {"112"}


def test_wait_of_a_start_truncated_by_T_is_not_counted():
    """With -T sacct reports Start = -S for a job that started earlier; its wait is unknown."""
    w = resolve_window(since="2026-11-01", until="2026-12-01")
    cols = ["JobID", "State", "AllocTRES", "Submit", "Start", "End", "User"]
    rows = [
        f"1|COMPLETED|gres/gpu=1|{w.start - 7200}|{w.start}|{w.start + 3600}|u\n",  # truncated start
        f"2|COMPLETED|gres/gpu=1|{w.start + 100}|{w.start + 400}|{w.start + 500}|u\n",
    ]  # wait 300 s
    attempts, _ = sacct.parse_rows(rows, cols, sep="|", window=w)
    rep = reference_aggregate(attempts, ["user"], window_start=w.start)
    assert rep.rows[0]["mean_wait_s"] == 300.0
    assert rep.rows[0]["gpu_hours"] == pytest.approx((3600 + 100) / 3600)


_LIMIT = 1 << 39


@settings(max_examples=3000, deadline=None)
@given(
    st.one_of(
        st.integers(-_LIMIT - 10, _LIMIT + 10),
        st.integers(-(1 << 55), 1 << 55),
        st.integers(0, 10**7),
        # near a rounding boundary: s / 3600 within a few seconds of k + 1/2 millionths
        st.integers(0, 10**9)
        .map(lambda k: (2 * k + 1) * 9 // 5000)
        .flatmap(lambda s: st.integers(s - 3, s + 3)),
        st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15),
        st.integers(-(1 << 52), 1 << 52).map(float),
        st.sampled_from([0, 0.0, -0.0, 1, 1799, 1800, 3600, _LIMIT - 1, -_LIMIT + 1, 2**53, 0.5, 1e-300]),
    )
)
def test_hours_rounds_as_round_does(seconds):
    """aggregate._hours is round(s / 3600, 6) to the bit (its integer path included)."""
    got, want = _hours(seconds), round(seconds / 3600.0, 6)
    assert repr(got) == repr(want)
