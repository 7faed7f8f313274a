"""slurmkit.report.rules function by function, with every answer worked out by hand.

test_report_rules_once.py proves that both engines take each rule from rules.py; this file
pins what each rule says, at its edges: the prolog boundary at exactly 120 s, a queue wait
starting exactly at the window's start or at its Submit, an attempt ending exactly at the
window's start or starting exactly at its end. The SQL forms are evaluated by DuckDB over
the same cases (not compared as text: DuckDB's keywords are case-insensitive).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from slurmkit.report import rules
from slurmkit.slurm import states

# --------------------------------------------------------------------------- helpers


def sql_values(expr, columns, rows):
    """``expr`` evaluated by DuckDB once per row of ``rows`` (columns named ``columns``)."""
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    try:
        values = ", ".join("(" + ", ".join(_lit(v) for v in r) + ")" for r in rows)
        # VALUES in the order given (row_number() over a constant list keeps it), read back in it
        q = (
            f"SELECT {expr}, rowid_ FROM (SELECT *, row_number() OVER () AS rowid_ "
            f"FROM (VALUES {values}) AS t({', '.join(columns)})) ORDER BY rowid_"
        )
        out = [r[:-1] for r in con.execute(q).fetchall()]
        return [r[0] if len(r) == 1 else r for r in out]
    finally:
        con.close()


def _lit(v):
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, (int, float)):
        return repr(v)
    return rules._q(v)


# --------------------------------------------------------------------------- lost states


def test_the_lost_states_are_slurms_sorted_and_each_is_its_own_cause():
    assert rules.LOST_STATES == tuple(sorted(states.LOST_STATES))
    assert rules.lost_states() == frozenset(states.LOST_STATES)
    assert isinstance(rules.lost_states(), frozenset)
    for s in rules.LOST_STATES:
        assert rules.lost_cause(s) == s
    for s in ("COMPLETED", "RUNNING", "REQUEUED", "", "failed"):
        if s not in states.LOST_STATES:
            assert rules.lost_cause(s) is None


def test_the_lost_cause_in_sql():
    cases = [*rules.LOST_STATES, "COMPLETED", "REQUEUED", "failed", ""]
    got = sql_values(rules.lost_cause_sql("s"), ["s"], [(c,) for c in cases])
    assert got == [rules.lost_cause(c) for c in cases]
    assert got[: len(rules.LOST_STATES)] == list(rules.LOST_STATES)


# --------------------------------------------------------------------------- the prolog-requeue cause


def test_the_prolog_rules_data():
    assert rules.PROLOG_CAUSE == "FAILED_AFTER_PROLOG_REQUEUE"
    assert (rules.REQUEUED, rules.FAILED) == ("REQUEUED", "FAILED")
    assert rules.PROLOG_STATES == ("REQUEUED", "FAILED")
    assert rules.PROLOG_REQUEUE_SECONDS == 120.0
    assert rules.PROLOG_SHORT_OP == "<="
    assert rules.PROLOG_REASON_WORDS == ("launch_failed", "prolog")
    assert rules.LAUNCH_REASON_WORDS == ("launch",)


@pytest.mark.parametrize(
    "op, a, b, want",
    [
        ("<", 1, 2, True),
        ("<", 2, 2, False),
        ("<=", 2, 2, True),
        ("<=", 3, 2, False),
        (">", 3, 2, True),
        (">", 2, 2, False),
        (">=", 2, 2, True),
        (">=", 1, 2, False),
    ],
)
def test_the_comparisons(op, a, b, want):
    assert rules._OPS[op](a, b) is want


def test_the_comparison_table_has_exactly_four():
    assert sorted(rules._OPS) == ["<", "<=", ">", ">="]


@pytest.mark.parametrize(
    "reason, pflag, lflag",
    [
        ("launch_failed_requeued_held", True, True),
        ("Launch_Failed_Requeued_Held", True, True),
        ("PROLOG_FAILED", True, False),
        ("job prolog error", True, False),
        ("JobLaunchFailure", False, True),
        ("launch", False, True),
        ("None", False, False),
        ("BeginTime", False, False),
        ("", False, False),
        ("launchfailed", False, True),
    ],
)
def test_the_reason_flags_in_python_and_sql(reason, pflag, lflag):
    assert rules.prolog_flag(reason) is pflag
    assert rules.launch_flag(reason) is lflag
    assert sql_values(rules.flags_sql("r"), ["r"], [(reason,)]) == [(pflag, lflag)]


def test_the_flag_columns_are_named_pflag_and_lflag():
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    cur = con.execute(f"SELECT {rules.flags_sql('r')} FROM (VALUES ('x')) AS t(r)")
    assert [d[0] for d in cur.description] == ["pflag", "lflag"]


@pytest.mark.parametrize(
    "seconds, limit, want",
    [
        (119.0, 120.0, True),
        (120.0, 120.0, True),
        (120.5, 120.0, False),
        (121.0, 120.0, False),
        (0.0, 0.0, True),
    ],
)
def test_a_short_requeue_is_at_most_the_limit(seconds, limit, want):
    assert rules.short_requeue(seconds, limit) is want


@pytest.mark.parametrize(
    "state, reason, seconds, want",
    [
        ("REQUEUED", "None", 120.0, True),  # exactly the boundary
        ("REQUEUED", "None", 119.0, True),
        ("REQUEUED", "None", 121.0, False),
        ("REQUEUED", "prolog", 5000.0, True),  # the Reason alone
        ("REQUEUED", "launch_failed_requeued_held", 5000.0, True),
        ("REQUEUED", "JobLaunchFailure", 5000.0, False),  # lflag is not pflag
        ("FAILED", "prolog", 1.0, False),  # not requeued
        ("COMPLETED", "None", 1.0, False),
    ],
)
def test_is_prolog_requeue(state, reason, seconds, want):
    assert rules.is_prolog_requeue(state, reason, seconds, 120.0) is want


@pytest.mark.parametrize(
    "prev_state, prev_reason, prev_seconds, state, reason, want",
    [
        ("REQUEUED", "None", 120.0, "FAILED", "None", True),  # short, exactly the boundary
        ("REQUEUED", "None", 121.0, "FAILED", "None", False),
        ("REQUEUED", "prolog", 9999.0, "FAILED", "None", True),  # previous pflag alone
        ("REQUEUED", "None", 9999.0, "FAILED", "launch", True),  # this attempt's lflag alone
        ("REQUEUED", "launch", 9999.0, "FAILED", "None", False),  # the previous one's lflag: no
        ("REQUEUED", "None", 9999.0, "FAILED", "prolog", False),  # this one's pflag: no
        ("FAILED", "prolog", 1.0, "FAILED", "launch", False),  # previous not requeued
        ("REQUEUED", "prolog", 1.0, "CANCELLED", "launch", False),  # this one not failed
        ("REQUEUED", "prolog", 1.0, "REQUEUED", "launch", False),
    ],
)
def test_follows_prolog_requeue_in_python_and_sql(prev_state, prev_reason, prev_seconds, state, reason, want):
    assert rules.follows_prolog_requeue(prev_state, prev_reason, prev_seconds, state, reason, 120.0) is want
    expr = rules.follows_prolog_requeue_sql("ps", "pp", "psec", "s", "lf", 120)
    got = sql_values(
        expr,
        ["ps", "pp", "psec", "s", "lf"],
        [(prev_state, rules.prolog_flag(prev_reason), prev_seconds, state, rules.launch_flag(reason))],
    )
    assert got == [want]


def test_the_prolog_limit_in_sql_is_the_argument():
    expr = rules.follows_prolog_requeue_sql("ps", "pp", "psec", "s", "lf", 60)
    rows = [("REQUEUED", False, s, "FAILED", False) for s in (59.0, 60.0, 60.5, 61.0)]
    assert sql_values(expr, ["ps", "pp", "psec", "s", "lf"], rows) == [True, True, False, False]


def test_the_reason_is_kept_for_the_prolog_states_only():
    rows = [("REQUEUED", "a"), ("FAILED", "b"), ("COMPLETED", "c"), ("CANCELLED", "d"), ("requeued", "e")]
    assert sql_values(rules.reason_kept_sql("s", "r"), ["s", "r"], rows) == ["a", "b", None, None, None]


def test_a_requeued_job_has_both_a_requeued_and_a_failed_attempt():
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    q = (
        f"SELECT j, {rules.requeued_job_sql('s')} FROM (VALUES (1, 'REQUEUED'), (1, 'FAILED'), (2, 'REQUEUED'), "
        "(2, 'COMPLETED'), (3, 'FAILED'), (4, 'REQUEUED'), (4, 'REQUEUED'), (4, 'FAILED')) AS t(j, s) GROUP BY j ORDER BY j"
    )
    assert con.execute(q).fetchall() == [(1, True), (2, False), (3, False), (4, True)]


# --------------------------------------------------------------------------- the attempt tie order


def test_the_tie_order_data():
    assert rules.TIE_ORDER == (
        ("state", False),
        ("reason", False),
        ("job_id", False),
        ("tres", False),
        ("nodelist", False),
        ("user", False),
        ("account", False),
        ("partition", False),
        ("name", False),
        ("submit", False),
    )
    assert set(rules._TIE_VALUE) == {f for f, _ in rules.TIE_ORDER}


def attempt(**kw):
    base = dict(
        raw_start=10,
        end=20,
        state="FAILED",
        reason="None",
        job_id="7",
        gpus=2,
        gpu_types=(("a100", 2),),
        nodelist="n1",
        user="alice",
        account="ops",
        partition="gpu",
        name="train",
        submit=5,
    )
    base.update(kw)
    return SimpleNamespace(**base)


def test_the_order_key_is_start_end_then_each_tie_field():
    a = attempt()
    assert rules.order_key(a) == (
        10,
        20,
        "FAILED",
        "None",
        "7",
        (2, (("a100", 2),)),
        "n1",
        "alice",
        "ops",
        "gpu",
        "train",
        5,
    )
    assert rules.order_key(attempt(submit=None))[-1] == -1
    assert rules.order_key(attempt(submit=0))[-1] == 0


@pytest.mark.parametrize(
    "field, lo, hi",
    [
        ("raw_start", 1, 2),
        ("end", 1, 2),
        ("state", "FAILED", "REQUEUED"),
        ("reason", "A", "B"),
        ("job_id", "7_1", "7_2"),
        ("gpus", 1, 2),
        ("gpu_types", (("a100", 1),), (("h100", 1),)),
        ("nodelist", "n1", "n2"),
        ("user", "alice", "bob"),
        ("account", "a", "b"),
        ("partition", "a", "b"),
        ("name", "a", "b"),
        ("submit", None, 0),
        ("submit", 1, 2),
    ],
)
def test_each_field_orders_two_attempts_tied_on_all_before_it(field, lo, hi):
    a, b = attempt(**{field: lo}), attempt(**{field: hi})
    assert sorted([b, a], key=rules.order_key) == [a, b]
    assert rules.order_key(a) < rules.order_key(b)


def test_a_descending_field_sorts_the_other_way(monkeypatch):
    monkeypatch.setattr(rules, "TIE_ORDER", (("state", True), ("user", False)))
    a, b = attempt(state="FAILED", user="bob"), attempt(state="REQUEUED", user="alice")
    assert sorted([a, b], key=rules.order_key) == [b, a]
    c = attempt(state="FAILED", user="alice")
    assert sorted([a, c], key=rules.order_key) == [c, a]  # tied on the descending field
    assert rules.order_key_partial(1, 2, "FAILED") == (1, 2, rules._Desc("FAILED"))


def test_a_descending_key():
    assert rules._Desc(2) < rules._Desc(1)
    assert not rules._Desc(1) < rules._Desc(2)
    assert not rules._Desc(1) < rules._Desc(1)
    assert rules._Desc(1) == rules._Desc(1)
    assert rules._Desc(1) != rules._Desc(2)
    assert rules._Desc(1) != 1
    assert rules._Desc.__slots__ == ("v",)
    with pytest.raises(TypeError):
        hash(rules._Desc(1))
    assert rules._tie(False, 3) == 3
    assert isinstance(rules._tie(True, 3), rules._Desc)
    assert rules._tie(True, 3).v == 3


def test_the_partial_key_is_start_end_and_state():
    assert rules.order_key_partial(1, 2, "COMPLETED") == (1, 2, "COMPLETED")
    # it ties with a full key in Start and End, and differs from it in the state
    full = rules.order_key(attempt(raw_start=1, end=2, state="REQUEUED"))
    assert full[:2] == (1, 2) and full[2] != rules.order_key_partial(1, 2, "COMPLETED")[2]


def test_the_partial_key_needs_the_state_first(monkeypatch):
    monkeypatch.setattr(rules, "TIE_ORDER", (("reason", False), ("state", False)))
    with pytest.raises(RuntimeError) as exc:
        rules.order_key_partial(1, 2, "FAILED")
    assert str(exc.value) == "rules.TIE_ORDER must begin with the state (the streaming path keeps no more)"


COLUMNS = {
    "state": "st",
    "reason": "re",
    "job_id": "ji",
    "tres": "tr",
    "nodelist": "nl",
    "user": "us",
    "account": "ac",
    "partition": "pa",
    "name": None,
    "submit": "su",
}


def test_the_tie_order_in_sql():
    assert (
        rules.tie_order_sql(COLUMNS)
        == "st ASC, re ASC, ji ASC, tr ASC, nl ASC, us ASC, ac ASC, pa ASC, su ASC"
    )
    assert rules.tie_prefix_columns(COLUMNS) == ("st", "re", "ji", "tr", "nl", "us", "ac", "pa", "su")


def test_the_tie_order_in_sql_without_a_field(monkeypatch):
    cols = {k: v for k, v in COLUMNS.items() if k != "tres"}
    with pytest.raises(KeyError, match="'tres'"):
        rules.tie_order_sql(cols)
    assert rules.tie_order_sql(cols, prefix=True) == "st ASC, re ASC, ji ASC"
    assert rules.tie_order_sql(cols, True) == "st ASC, re ASC, ji ASC"
    assert rules.tie_prefix_columns(cols) == ("st", "re", "ji")
    assert rules.tie_prefix_columns({"reason": "re"}) == ()
    assert rules.tie_prefix_columns({"state": None, "reason": "re"}) == ("re",)
    assert rules.tie_order_sql({"state": None, "reason": "re"}, prefix=True) == "re ASC"


def test_the_tie_order_in_sql_descending(monkeypatch):
    monkeypatch.setattr(rules, "TIE_ORDER", (("state", True), ("user", False)))
    assert rules.tie_order_sql({"state": "st", "user": "us"}) == "st DESC, us ASC"
    duckdb = pytest.importorskip("duckdb")
    q = f"SELECT st, us FROM (VALUES ('A', 'x'), ('B', 'y'), ('B', 'x')) AS t(st, us) ORDER BY {rules.tie_order_sql({'state': 'st', 'user': 'us'})}"
    assert duckdb.connect().execute(q).fetchall() == [("B", "x"), ("B", "y"), ("A", "x")]


# --------------------------------------------------------------------------- adding lost seconds


def test_adding_lost_seconds_adds_to_the_total_and_the_cause():
    acc = SimpleNamespace(lost=1.0, lost_by_cause={"FAILED": 1.0})
    rules.add_lost(acc, "FAILED", 2.5)
    rules.add_lost(acc, "NODE_FAIL", 4.0)
    rules.add_lost(acc, "NODE_FAIL", 0.5)
    assert acc.lost == 8.0
    assert acc.lost_by_cause == {"FAILED": 3.5, "NODE_FAIL": 4.5}


# --------------------------------------------------------------------------- queue wait

WS = 1000
# (raw_start, submit, wait): a Start exactly at the window start hides the wait; a Start
# exactly at Submit waited 0 s; a Submit after the Start does not count
WAITS = [
    (1001, 900, 101),
    (1000, 900, None),  # exactly the window start
    (999, 900, None),
    (1001, 1001, 0),  # exactly at Submit
    (1001, 1002, None),
    (1001, None, None),
    (5000, 0, 5000),
]


def test_the_queue_wait_comparisons():
    assert rules.WAIT_AFTER_WINDOW_START_OP == ">"
    assert rules.WAIT_AFTER_SUBMIT_OP == ">="


@pytest.mark.parametrize("raw_start, submit, wait", WAITS)
def test_the_queue_wait_in_python(raw_start, submit, wait):
    assert rules.queue_wait(raw_start, submit, WS) == wait
    assert rules.queue_wait_fn(WS)(raw_start, submit) == wait


def test_the_queue_wait_in_sql():
    got = sql_values(rules.queue_wait_sql("rs", "sub", WS), ["rs", "sub"], [(r, s) for r, s, _ in WAITS])
    assert got == [w for _, _, w in WAITS]


def test_the_compiled_queue_wait_follows_the_comparisons(monkeypatch):
    monkeypatch.setattr(rules, "WAIT_AFTER_WINDOW_START_OP", ">=")
    monkeypatch.setattr(rules, "WAIT_AFTER_SUBMIT_OP", ">")
    f = rules.queue_wait_fn(WS)
    assert f(1000, 900) == 100
    assert f(1001, 1001) is None
    assert rules.queue_wait(1000, 900, WS) == 100
    assert rules.queue_wait(1001, 1001, WS) is None


def test_the_compiled_queue_wait_refuses_an_unknown_comparison(monkeypatch):
    monkeypatch.setattr(rules, "WAIT_AFTER_SUBMIT_OP", "==")
    with pytest.raises(ValueError, match="queue wait comparisons"):
        rules.queue_wait_fn(WS)
    monkeypatch.setattr(rules, "WAIT_AFTER_SUBMIT_OP", ">=")
    monkeypatch.setattr(rules, "WAIT_AFTER_WINDOW_START_OP", "!=")
    with pytest.raises(ValueError, match="queue wait comparisons"):
        rules.queue_wait_fn(WS)


def test_the_compiled_queue_wait_is_named_for_its_rule():
    f = rules.queue_wait_fn(WS)
    assert f.__code__.co_filename == "<slurmkit.report.rules.queue_wait>"
    assert f.__name__ == "wait"


# --------------------------------------------------------------------------- clipping to the window

LO, HI = 100, 200
# (start, end, clipped): the window is [100, 200)
CLIPS = [
    (120, 150, (120, 150)),
    (50, 150, (100, 150)),
    (150, 250, (150, 200)),
    (50, 250, (100, 200)),
    (100, 200, (100, 200)),
    (50, 100, None),  # ends exactly at the window start
    (200, 250, None),  # starts exactly at the window end
    (10, 20, None),
    (300, 400, None),
    (150, 150, (150, 150)),  # an instant inside
    (100, 100, (100, 100)),  # an instant exactly at the window start: inside
    (200, 200, None),  # an instant exactly at the window end: outside
    (99, 99, None),
    (150, 140, None),  # ends before it starts
    (101, 101, (101, 101)),
    (199, 199, (199, 199)),
]


def test_keeping_instants():
    assert rules.KEEP_INSTANTS is True


@pytest.mark.parametrize("start, end, clipped", CLIPS)
def test_clipping_in_python(start, end, clipped):
    assert rules.clip(start, end, LO, HI) == clipped


def test_clipping_in_sql():
    outside, s, e = rules.clip_sql("a", "b", LO, HI)
    got = sql_values(f"{outside}, {s}, {e}", ["a", "b"], [(a, b) for a, b, _ in CLIPS])
    for (a, b, clipped), (out, cs, ce) in zip(CLIPS, got):
        assert out is (clipped is None), (a, b)
        if clipped is not None:
            assert (cs, ce) == clipped, (a, b)


def test_clipping_without_instants(monkeypatch):
    monkeypatch.setattr(rules, "KEEP_INSTANTS", False)
    assert rules.clip(150, 150, LO, HI) is None
    assert rules.clip(120, 150, LO, HI) == (120, 150)
    outside, _, _ = rules.clip_sql("a", "b", LO, HI)
    assert outside.endswith("AND NOT FALSE")
    duckdb = pytest.importorskip("duckdb")
    assert duckdb.connect().execute(f"SELECT {outside} FROM (VALUES (150, 150)) AS t(a, b)").fetchone() == (
        True,
    )


# --------------------------------------------------------------------------- SQL text


def test_sql_quoting():
    assert rules._q("a") == "'a'"
    assert rules._q("it's") == "'it''s'"
    assert rules._in_list(["b", "a'"]) == "('a''', 'b')"
    assert sql_values(rules._q("it's"), ["x"], [(1,)]) == ["it's"]
