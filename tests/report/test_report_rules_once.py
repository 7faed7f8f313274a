"""Each rule of the report is defined once, in slurmkit.report.rules (issue 26, item 3).

The proof, rule by rule: change the one definition (monkeypatch its data: the prolog
comparison, the Reason words, the tie order, the lost states, how lost seconds are added,
the queue wait comparisons, clipping to the window) and every engine's answer on a small hand-made dump changes
to the value worked out by hand: the list path (the reference), the streaming path, the
DuckDB engine over the dump and over the archive (ingested under the changed rule where the
archive stores the rule's output). A copy of a rule left in any engine keeps that engine's
answer where it was, and its test fails.
"""

from __future__ import annotations

import os

import pytest

from slurmkit.report import rules, sacct
from slurmkit.report.aggregate import finish, reference_accumulate
from slurmkit.report.lost import reference_lost
from slurmkit.report.stream import StreamingAggregator
from slurmkit.report.window import Window, resolve_window
from slurmkit.slurm import states

BASE = 1792800000
NOW = BASE + 10 * 86400
UNBOUNDED = resolve_window(default_unbounded=True)
PROLOG = rules.PROLOG_CAUSE


def row(jid="7", state="COMPLETED", tres="gres/gpu=2", start=BASE, end=BASE + 3600, reason="None", **kw):
    """One sacct line in :data:`~slurmkit.report.sacct.FIELDS` order (epoch times)."""
    submit = kw.get("submit", BASE - 60)
    fields = [kw.get("job_id", jid), jid, state, tres, str(submit), str(start), str(end), "0"]
    return "|".join(fields + [kw.get("user", "alice"), "ops", "gpu", "node1", reason, "train"])


def dump(tmp_path, *lines):
    path = tmp_path / "dump.txt"
    path.write_text("|".join(sacct.FIELDS) + "\n" + "".join(line + "\n" for line in lines))
    return str(path)


def _list_path(path, by, window):
    attempts, _, _ = sacct.read_sacct_file(path, window=window, now=NOW)
    lost = reference_lost(attempts, rules.PROLOG_REQUEUE_SECONDS)
    groups, total = reference_accumulate(attempts, by, window_start=window.start, lost=lost, suspect=None)
    return finish(groups, total, by, priced=False, health=False)


def _stream(path, by, window):
    agg = StreamingAggregator(
        by, window_start=window.start, prolog_requeue_seconds=rules.PROLOG_REQUEUE_SECONDS
    )
    sacct.read_sacct_file(path, window=window, now=NOW, sink=agg.add)
    return finish(*agg.result(), by, priced=False, health=False)


def _duckdb_run(src, by, window):
    from slurmkit.report import engine

    groups, total, _ = engine.run(
        src,
        window=window,
        now=NOW,
        filters=None,
        by=by,
        prices=None,
        max_gpus=sacct.DEFAULT_MAX_GPUS,
        prolog_requeue_seconds=rules.PROLOG_REQUEUE_SECONDS,
    )
    return finish(groups, total, by, priced=False, health=False)


def _duckdb(path, by, window):
    pytest.importorskip("duckdb")
    from slurmkit.report import engine

    return _duckdb_run(engine.probe_file(path), by, window)


def _archive(path, by, window):
    """Ingested under the rules in force now (a fresh directory per test)."""
    pytest.importorskip("duckdb")
    from slurmkit.report import archive, engine

    directory = os.path.join(os.path.dirname(path), "archive")
    archive.ingest(directory, engine.probe_file(path))
    return _duckdb_run(archive.source(directory), by, window)


ENGINES = {"list": _list_path, "stream": _stream, "duckdb": _duckdb, "archive": _archive}
BYS = {"total": [], "user": ["user"], "day": ["day"], "gpu_type": ["gpu_type"]}


def report(path, engine_name, by=(), window=UNBOUNDED):
    """The report's totals, and its one row when it has one (checked equal to the totals'
    sums: the group path applies the rule too)."""
    rep = ENGINES[engine_name](path, list(by), window)
    return rep.totals, rep.rows


# --------------------------------------------------------------------------- where the data comes from


def test_the_lost_states_are_slurms_and_the_default_limit_is_the_settings():
    from slurmkit.report.config import SITE_SCHEMA

    assert set(rules.LOST_STATES) == states.LOST_STATES
    assert states.LOST_STATES <= states.FINISHED_STATES | states.ACTIVE_STATES
    assert SITE_SCHEMA.fields["prolog_requeue_seconds"].default == rules.PROLOG_REQUEUE_SECONDS == 120


# --------------------------------------------------------------------------- the prolog-requeue cause


def _requeued_for(tmp_path, seconds, reason="None"):
    """A 2-GPU job requeued after ``seconds``, then FAILED after an hour."""
    return dump(
        tmp_path,
        row(state="REQUEUED", end=BASE + seconds, reason=reason),
        row(state="FAILED", start=BASE + 600, end=BASE + 4200),
    )


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("op, lost", [("<=", 2.0), ("<", None)])
def test_the_prolog_comparison_is_defined_once(tmp_path, monkeypatch, engine_name, op, lost):
    """Exactly 120 s: lost with ``<=`` (the rule), not with ``<``, in every engine."""
    monkeypatch.setattr(rules, "PROLOG_SHORT_OP", op)
    totals, _ = report(_requeued_for(tmp_path, 120), engine_name)
    assert totals["lost_by_cause"].get(PROLOG) == lost
    assert totals["lost_by_cause"]["REQUEUED"] == pytest.approx(2 * 120 / 3600, abs=1e-6)


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("limit, lost", [(120.0, 2.0), (60.0, None)])
def test_the_prolog_limit_comes_from_the_definition(tmp_path, monkeypatch, engine_name, limit, lost):
    """A 90 s requeue: a prolog failure under 120 s, not under 60 s."""
    monkeypatch.setattr(rules, "PROLOG_REQUEUE_SECONDS", limit)
    totals, _ = report(_requeued_for(tmp_path, 90), engine_name)
    assert totals["lost_by_cause"].get(PROLOG) == lost


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize(
    "words, lost", [(("launch_failed", "prolog"), 2.0), (("launch_failed",), None), (("ror",), 2.0)]
)
def test_the_prolog_reason_words_are_defined_once(tmp_path, monkeypatch, engine_name, words, lost):
    """An hour-long requeue whose Reason is ``Prolog error``: a prolog failure only while a
    word of the rule is in it (the archive stores the flag: ingested under the rule)."""
    monkeypatch.setattr(rules, "PROLOG_REASON_WORDS", words)
    totals, _ = report(_requeued_for(tmp_path, 3600, reason="Prolog error"), engine_name)
    assert totals["lost_by_cause"].get(PROLOG) == lost


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("words, lost", [(("launch",), 2.0), (("held",), None)])
def test_the_launch_reason_words_are_defined_once(tmp_path, monkeypatch, engine_name, words, lost):
    """An hour-long requeue, then a FAILED attempt whose own Reason is ``launch_failed_requeued``."""
    monkeypatch.setattr(rules, "LAUNCH_REASON_WORDS", words)
    path = dump(
        tmp_path,
        row(state="REQUEUED", end=BASE + 3600),
        row(state="FAILED", start=BASE + 3700, end=BASE + 7300, reason="launch_failed_requeued"),
    )
    monkeypatch.setattr(rules, "PROLOG_REASON_WORDS", ("prolog",))  # (the FAILED row's own flag only)
    totals, _ = report(path, engine_name)
    assert totals["lost_by_cause"].get(PROLOG) == lost


# --------------------------------------------------------------------------- the attempt tie order


def _reversed(field):
    return tuple((f, not d) if f == field else (f, d) for f, d in rules.TIE_ORDER)


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("descending, lost", [(False, None), (True, 2 * 60 / 3600)])
def test_the_tie_order_of_states_is_defined_once(tmp_path, monkeypatch, engine_name, descending, lost):
    """A REQUEUED and a FAILED attempt of one job with the same Start and End (60 s, 2 GPUs):
    by state ascending FAILED comes first and nothing follows a requeue; descending, the
    FAILED attempt follows a 60 s requeue and is lost. (Two JobIDs, so that the archive, which
    identifies an attempt by JobIDRaw, JobID and Start, keeps both.)"""
    if descending:
        monkeypatch.setattr(rules, "TIE_ORDER", _reversed("state"))
    path = dump(
        tmp_path,
        row(jid="8", job_id="8", state="REQUEUED", end=BASE + 60),
        row(jid="8", job_id="7_1", state="FAILED", end=BASE + 60),
    )
    totals, _ = report(path, engine_name)
    if lost is None:
        assert PROLOG not in totals["lost_by_cause"]
    else:
        assert totals["lost_by_cause"][PROLOG] == pytest.approx(lost, abs=1e-6)


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("descending, lost", [(False, 4.0), (True, 1.0)])
def test_the_tie_order_past_state_and_reason_is_defined_once(
    tmp_path, monkeypatch, engine_name, descending, lost
):
    """A 60 s requeue, then two FAILED attempts tied in Start, End, State and Reason (the DuckDB
    engine reads the dump again with every text field): by JobID ascending ``7_1`` (4 GPUs)
    follows the requeue, descending ``8`` (1 GPU) does."""
    if descending:
        monkeypatch.setattr(rules, "TIE_ORDER", _reversed("job_id"))
    path = dump(
        tmp_path,
        row(jid="8", job_id="8", state="REQUEUED", end=BASE + 60),
        row(jid="8", job_id="8", state="FAILED", tres="gres/gpu=1", start=BASE + 60, end=BASE + 3660),
        row(jid="8", job_id="7_1", state="FAILED", tres="gres/gpu=4", start=BASE + 60, end=BASE + 3660),
    )
    totals, _ = report(path, engine_name)
    assert totals["lost_by_cause"][PROLOG] == lost


# --------------------------------------------------------------------------- lost states


@pytest.mark.parametrize("by", sorted(BYS))
@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("patched", [False, True])
def test_the_lost_states_are_defined_once(tmp_path, monkeypatch, engine_name, by, patched):
    """A CANCELLED attempt (2 GPUs, an hour) and a TIMEOUT one (1 GPU, an hour): with the
    rule, TIMEOUT is lost; with CANCELLED added and TIMEOUT taken out, CANCELLED is."""
    if patched:
        monkeypatch.setattr(rules, "LOST_STATES", ("CANCELLED", "NODE_FAIL", "PREEMPTED", "REQUEUED"))
    path = dump(tmp_path, row(state="CANCELLED"), row(jid="9", state="TIMEOUT", tres="gres/gpu=1"))
    totals, rows = report(path, engine_name, BYS[by])
    expected = {"CANCELLED": 2.0} if patched else {"TIMEOUT": 1.0}
    assert totals["lost_by_cause"] == expected
    assert totals["lost_gpu_hours"] == sum(expected.values())
    assert sum(r["lost_gpu_hours"] for r in rows) == pytest.approx(sum(expected.values()))


# --------------------------------------------------------------------------- adding lost seconds


def _add_lost_twice(acc, cause, seconds):
    acc.lost += 2 * seconds
    acc.lost_by_cause[cause] = acc.lost_by_cause.get(cause, 0.0) + 2 * seconds


@pytest.mark.parametrize("by", sorted(BYS))
@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("patched", [False, True])
def test_adding_lost_seconds_is_defined_once(tmp_path, monkeypatch, engine_name, by, patched):
    """A TIMEOUT attempt (2 GPUs, an hour) and a prolog-requeue pair (2 GPUs: 60 s requeued,
    an hour failed): every lost second goes through rules.add_lost, here made to count twice."""
    if patched:
        monkeypatch.setattr(rules, "add_lost", _add_lost_twice)
    path = dump(
        tmp_path,
        row(state="TIMEOUT"),
        row(jid="9", state="REQUEUED", end=BASE + 60),
        row(jid="9", state="FAILED", start=BASE + 600, end=BASE + 4200),
    )
    totals, rows = report(path, engine_name, BYS[by])
    f = 2 if patched else 1
    expected = {"TIMEOUT": 2.0 * f, "REQUEUED": round(f * 120 / 3600, 6), PROLOG: 2.0 * f}
    assert totals["lost_by_cause"] == pytest.approx(expected, abs=1e-6)
    assert totals["lost_gpu_hours"] == pytest.approx(sum(expected.values()), abs=1e-6)
    assert sum(r["lost_gpu_hours"] for r in rows) == pytest.approx(sum(expected.values()), abs=1e-5)


# --------------------------------------------------------------------------- queue wait


@pytest.mark.parametrize("by", sorted(BYS))
@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("op, wait", [(">", None), (">=", 600.0)])
def test_the_queue_wait_at_the_window_start_is_defined_once(tmp_path, monkeypatch, engine_name, by, op, wait):
    """An attempt starting exactly at the window's start, submitted 600 s before: its wait is
    hidden with ``>`` (the rule: a Start clipped by ``-T`` looks the same), counted with ``>=``."""
    monkeypatch.setattr(rules, "WAIT_AFTER_WINDOW_START_OP", op)
    window = Window(BASE, NOW, "test")
    path = dump(tmp_path, row(submit=BASE - 600))
    totals, rows = report(path, engine_name, BYS[by], window)
    assert totals["mean_wait_s"] == wait
    assert [r["mean_wait_s"] for r in rows if r["attempts"]] == [wait]


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("op, wait", [(">=", 150.0), (">", 300.0)])
def test_the_queue_wait_against_submit_is_defined_once(tmp_path, monkeypatch, engine_name, op, wait):
    """Two attempts: one started the second it was submitted (a wait of 0), one 300 s after:
    the mean is 150 s with ``>=`` (the rule), 300 s when a zero wait is not counted."""
    monkeypatch.setattr(rules, "WAIT_AFTER_SUBMIT_OP", op)
    path = dump(tmp_path, row(submit=BASE), row(jid="9", submit=BASE - 300))
    totals, _ = report(path, engine_name)
    assert totals["mean_wait_s"] == wait


# --------------------------------------------------------------------------- the forms themselves


def test_each_sql_form_reads_the_same_data_as_its_python_form(monkeypatch):
    """The SQL builders follow the data they share with the Python forms (text, no engine)."""
    monkeypatch.setattr(rules, "PROLOG_SHORT_OP", "<")
    assert "pdur < 120.0" in rules.follows_prolog_requeue_sql("p", "pf", "pdur", "s", "lf", 120)
    monkeypatch.setattr(rules, "TIE_ORDER", (("state", True), ("name", False), ("submit", False)))
    assert rules.tie_order_sql({"state": "st8", "name": None, "submit": "sb"}) == "st8 DESC, sb ASC"
    assert rules.tie_prefix_columns({"state": "st8"}) == ("st8",)
    monkeypatch.setattr(rules, "LOST_STATES", ("X'Y",))
    assert rules.lost_cause_sql("s") == "CASE WHEN s IN ('X''Y') THEN s END"
    assert rules.lost_cause("X'Y") == "X'Y" and rules.lost_cause("TIMEOUT") is None
    monkeypatch.setattr(rules, "WAIT_AFTER_WINDOW_START_OP", "<")  # (not a sensible rule: data)
    assert rules.queue_wait_fn(10)(5, 1) == 4 and rules.queue_wait_fn(10)(11, 1) is None
    assert rules.queue_wait(5, 1, 10) == 4
    monkeypatch.setattr(rules, "WAIT_AFTER_SUBMIT_OP", "== 0 or")
    with pytest.raises(ValueError):
        rules.queue_wait_fn(0)


# --------------------------------------------------------------------------- clipping to the window

LO, HI = BASE, BASE + 86400
EDGES = (LO - 10, LO - 1, LO, LO + 1, HI - 1, HI, HI + 1)


def test_the_parser_clips_as_the_rule_does():
    """The parser (the list and streaming paths) clips with rules.clip: its answer at every
    edge of the window, attempts of no length included."""
    cases = [(s, e) for s in EDGES for e in EDGES if e >= s]
    lines = [row(jid=str(100 + i), start=s, end=e) for i, (s, e) in enumerate(cases)]
    attempts, stats = sacct.parse_rows(
        lines, list(sacct.FIELDS), sep="|", window=Window(LO, HI, "t"), now=NOW
    )
    got = {int(a.job_id_raw): (a.start, a.end) for a in attempts}
    expected = {100 + i: rules.clip(s, e, LO, HI) for i, (s, e) in enumerate(cases)}
    assert got == {k: v for k, v in expected.items() if v is not None}
    assert stats.outside_window == sum(v is None for v in expected.values()) > 0
    assert rules.clip(LO + 5, LO + 5, LO, HI) == (LO + 5, LO + 5) and rules.clip(HI, HI, LO, HI) is None


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("keep, attempts", [(True, 2), (False, 1)])
def test_clipping_is_defined_once(tmp_path, monkeypatch, engine_name, keep, attempts):
    """Every engine clips by the rule (the parser by rules.clip, the DuckDB engine by SQL built
    from rules.clip_sql): an attempt of no length inside the window counts while instants are
    kept, and is outside when they are not."""
    monkeypatch.setattr(rules, "KEEP_INSTANTS", keep)
    path = dump(tmp_path, row(start=LO + 5, end=LO + 5), row(jid="9", start=LO + 5, end=LO + 3605))
    totals, _ = report(path, engine_name, window=Window(LO, HI, "t"))
    assert totals["attempts"] == attempts
    assert totals["gpu_hours"] == 2.0


def _clip_to_day_start(start, end, lo, hi):
    """A different clipping rule (not a sensible one: data): every attempt starts at ``lo``."""
    return (lo, max(lo, min(end, hi))) if end > lo else None


@pytest.mark.parametrize("engine_name", ["list", "stream"])
@pytest.mark.parametrize("patched, gpu_hours", [(False, 2.0), (True, 4.0)])
def test_the_parser_clips_by_the_function(tmp_path, monkeypatch, engine_name, patched, gpu_hours):
    """The Python engines call rules.clip itself (no copy of it): an hour-long attempt (2 GPUs)
    starting an hour into the window counts 2 hours clipped by a rule that moves every Start
    to the window's start."""
    if patched:
        monkeypatch.setattr(rules, "clip", _clip_to_day_start)
    path = dump(tmp_path, row(start=LO + 3600, end=LO + 7200))
    totals, _ = report(path, engine_name, window=Window(LO, HI, "t"))
    assert totals["gpu_hours"] == gpu_hours


# --------------------------------------------------------------------------- row classes


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("patched, gpu_hours", [(False, 3.0), (True, 1.0)])
def test_the_earliest_time_is_defined_once(tmp_path, monkeypatch, engine_name, patched, gpu_hours):
    """A row starting at BASE (2 GPUs, an hour) and one submitted and started an hour later (1
    GPU): with the earliest possible time moved past BASE, the first is impossible in every
    engine (the archive keeps only the rows the rule allows: ingested under it)."""
    if patched:
        monkeypatch.setattr(rules, "EARLIEST_TIME", BASE + 1)
    path = dump(
        tmp_path,
        row(),
        row(jid="9", tres="gres/gpu=1", submit=BASE + 3600, start=BASE + 3600, end=BASE + 7200),
    )
    totals, _ = report(path, engine_name)
    assert totals["gpu_hours"] == gpu_hours


def _running(tmp_path):
    """A RUNNING row (2 GPUs) with an unknown End, counted up to NOW; a finished one (1 GPU, an hour)."""
    return dump(tmp_path, row(state="RUNNING", end="Unknown"), row(jid="9", tres="gres/gpu=1"))


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("patched", [False, True])
def test_the_unknown_times_are_defined_once(tmp_path, monkeypatch, engine_name, patched):
    """``Unknown`` is a time sacct did not know (the running row counts up to now); taken out
    of the rule, it is a bad time in every engine."""
    if patched:
        monkeypatch.setattr(rules, "UNKNOWN_TIMES", frozenset({"None", "", "N/A"}))
    totals, _ = report(_running(tmp_path), engine_name)
    assert totals["gpu_hours"] == (1.0 if patched else 1.0 + 2 * (NOW - BASE) / 3600)


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("patched", [False, True])
def test_the_running_states_are_defined_once(tmp_path, monkeypatch, engine_name, patched):
    """An unknown End of a RUNNING row means "up to now"; with RUNNING out of the running
    states, the row is malformed (an unknown End of a finished state) in every engine."""
    if patched:
        monkeypatch.setattr(rules, "RUNNING_STATES", rules.RUNNING_STATES - {"RUNNING"})
    totals, _ = report(_running(tmp_path), engine_name)
    assert totals["gpu_hours"] == (1.0 if patched else 1.0 + 2 * (NOW - BASE) / 3600)


@pytest.mark.parametrize("engine_name", ["list", "stream", "duckdb"])
@pytest.mark.parametrize("patched", [False, True])
def test_the_impossible_reasons_are_defined_once(tmp_path, monkeypatch, engine_name, patched):
    """The reasons of impossible times, as the engines report them, come from the rule."""
    if patched:
        monkeypatch.setattr(rules, "END_BEFORE_START", rules.IMPOSSIBLE + "ends before it starts")
        monkeypatch.setattr(rules, "BEFORE_EARLIEST", rules.IMPOSSIBLE + "too early")
    path = dump(tmp_path, row(start=BASE + 10, end=BASE), row(jid="9", submit=100), row(jid="10"))
    reasons = _reasons(path, engine_name)
    assert reasons == {rules.END_BEFORE_START: 1, rules.BEFORE_EARLIEST: 1}


def _reasons(path, engine_name):
    if engine_name == "duckdb":
        pytest.importorskip("duckdb")
        from slurmkit.report import engine

        _, _, stats = engine.run(
            engine.probe_file(path),
            window=UNBOUNDED,
            now=NOW,
            filters=None,
            by=[],
            prices=None,
            max_gpus=sacct.DEFAULT_MAX_GPUS,
            prolog_requeue_seconds=rules.PROLOG_REQUEUE_SECONDS,
        )
    elif engine_name == "stream":
        agg = StreamingAggregator([], window_start=UNBOUNDED.start, prolog_requeue_seconds=120.0)
        _, stats, _ = sacct.read_sacct_file(path, window=UNBOUNDED, now=NOW, sink=agg.add)
    else:
        _, stats, _ = sacct.read_sacct_file(path, window=UNBOUNDED, now=NOW)
    return dict(stats.malformed_reasons)


def test_the_row_class_forms_read_the_same_data(monkeypatch):
    """The compiled Python form and the SQL forms follow the rule's data (text, no engine)."""
    monkeypatch.setattr(rules, "EARLIEST_TIME", 50)
    check = rules.impossible_time_fn()
    for args in [(49, 60, None, False), (60, 49, None, True), (60, 70, 10, False), (70, 60, None, False),
                 (70, 60, None, True), (60, 70, 55, False)]:  # fmt: skip
        assert check(*args) == rules.impossible_time(*args)
    assert "st < 50 OR" in rules.impossible_time_sql("st", "en", "sub")
    monkeypatch.setattr(rules, "UNKNOWN_TIMES", frozenset({"x'y"}))
    assert rules.unknown_time_sql("t") == "t IN ('x''y')"
    monkeypatch.setattr(rules, "ROW_CLASSES", ("notstarted", "filtered", "bad", "outside", "ok"))
    with pytest.raises(RuntimeError):
        rules.row_class_sql(
            filtered="f", not_started="n", undecided="u", undecided_class="bad", unknown_end="x",
            state="s", st="st", en="en", sub="sub", lo=0, hi=1,
        )  # fmt: skip
