"""The report's rules over attempts, each defined once, with its Python and its SQL form.

The report has two engines: the Python path (:mod:`.stream`, and the list path of
:mod:`.lost` and :mod:`.aggregate` that the tests compare with) and the DuckDB engine
(:mod:`.engine`, and :mod:`.archive`, which stores some rule outputs). Each rule below is
data (a set of states, a number and a comparison, a list of sort keys) plus a Python
function and an SQL builder made from that data, which both engines call when a report
runs. Changing the data here changes both engines' answers
(``tests/report/test_report_rules_once.py`` proves it rule by rule).

* lost states: :data:`LOST_STATES` (taken from :data:`slurmkit.slurm.states.LOST_STATES`);
  :func:`lost_cause`, :func:`lost_cause_sql`;
* the prolog-requeue cause: :data:`PROLOG_REQUEUE_SECONDS` and :data:`PROLOG_SHORT_OP`, the
  Reason words; :func:`is_prolog_requeue`, :func:`follows_prolog_requeue`, :func:`flags_sql`,
  :func:`follows_prolog_requeue_sql`;
* the attempt tie order: :data:`TIE_ORDER`; :func:`order_key`, :func:`tie_order_sql`;
* adding lost seconds (to the lost total and to the cause together): :func:`add_lost`;
* queue wait: :data:`WAIT_AFTER_WINDOW_START_OP`, :data:`WAIT_AFTER_SUBMIT_OP`;
  :func:`queue_wait`, :func:`queue_wait_fn`, :func:`queue_wait_sql`;
* clipping to the window: :data:`KEEP_INSTANTS`; :func:`clip`, :func:`clip_sql`.

* row classes (filtered, not started, malformed or impossible by the times, outside, counted):
  :data:`ROW_CLASSES`, :data:`UNKNOWN_TIMES`, :data:`RUNNING_STATES`, :data:`EARLIEST_TIME`;
  :func:`impossible_time`, :func:`impossible_time_fn`, :func:`row_class_sql`,
  :func:`impossible_time_sql`.

The parser of the Python path (:func:`.sacct._parse_rows`) clips with :func:`clip` and tests
times with :func:`impossible_time_fn`, reading the unknown times and running states here when a
parse starts; the DuckDB engine (:meth:`.engine._Rules.derived`) and the archive's ingest build
their SQL from :func:`clip_sql`, :func:`row_class_sql` and :func:`impossible_time_sql`.

**Versions.** The archive keeps what some rules computed at ingest: in each month file the
typed columns (``start_s``, ``end_s``, ``submit_s``: the time rule; ``gpus``: the AllocTRES
rule; ``jid_i``, ``state_n``; which rows are kept at all: the malformed and impossible rules),
and in ``_multi.parquet`` each requeued job's attempt order (``tie_rank``: :data:`TIE_ORDER`)
and the Reason flags of the prolog rule (``pflag``, ``lflag``: :data:`PROLOG_REASON_WORDS`,
:data:`LAUNCH_REASON_WORDS`, :data:`PROLOG_STATES`). A report over an archive written under
another version must not answer with the old rules silently: ``_multi.parquet`` of another
version is not used (the engine recomputes order and flags from the rows), and months ingested
under another version are named in a warning (their typed columns and kept rows follow the old
rules: ingest them again). The other rules here (lost states, the prolog duration limit and
its comparison, adding lost seconds, queue wait, clipping) are applied when a report runs, over
the archive too: changing them needs no new version.

Bump :data:`RULES_VERSION` with any change to a rule whose output the archive stores.

History: 1, archives written before the stamp (none is written); 2, rows whose JobID or
JobIDRaw is not sacct's are no longer kept (issue 25).
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Dict, FrozenSet, Mapping, Optional, Sequence, Tuple

from slurmkit.slurm import states

RULES_VERSION = 2

# --------------------------------------------------------------------------- lost states

#: final states whose attempt's GPU time is lost; the cause is the state (see :mod:`.lost`)
LOST_STATES: Tuple[str, ...] = tuple(sorted(states.LOST_STATES))


def lost_states() -> frozenset:
    """:data:`LOST_STATES` as a set (read when a report starts, not when a module loads)."""
    return frozenset(LOST_STATES)


def lost_cause(state: str) -> Optional[str]:
    """The lost cause an attempt's final state gives (None: not lost by its state)."""
    return state if state in LOST_STATES else None


def lost_cause_sql(state: str) -> str:
    """SQL of :func:`lost_cause`."""
    return f"CASE WHEN {state} IN {_in_list(LOST_STATES)} THEN {state} END"


# --------------------------------------------------------------------------- the prolog-requeue cause

#: the cause of a FAILED attempt right after a prolog-failure requeue of its job
PROLOG_CAUSE = "FAILED_AFTER_PROLOG_REQUEUE"
#: the requeued state and the failed state the rule links (the engines keep the Reason of
#: rows in these states only)
REQUEUED, FAILED = "REQUEUED", "FAILED"
PROLOG_STATES: Tuple[str, ...] = (REQUEUED, FAILED)
#: a REQUEUED attempt lasting ``PROLOG_SHORT_OP`` this many seconds (by default; the
#: ``report.prolog_requeue_seconds`` setting) is a prolog failure: a failing prolog ends the
#: attempt before the user's program does any work
PROLOG_REQUEUE_SECONDS = 120.0
PROLOG_SHORT_OP = "<="
#: a REQUEUED attempt whose Reason contains one of these (case-insensitive) is a prolog failure
PROLOG_REASON_WORDS: Tuple[str, ...] = ("launch_failed", "prolog")
#: a FAILED attempt whose own Reason contains one of these follows a prolog failure (sacct's
#: Reason is the last one the job waited for: the hold lands on the attempt after the requeue)
LAUNCH_REASON_WORDS: Tuple[str, ...] = ("launch",)

_OPS: Dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def prolog_flag(reason: str) -> bool:
    """``pflag``: the Reason of a REQUEUED attempt names a launch failure or the prolog."""
    low = reason.lower()
    return any(w in low for w in PROLOG_REASON_WORDS)


def launch_flag(reason: str) -> bool:
    """``lflag``: the Reason of a FAILED attempt names a launch."""
    low = reason.lower()
    return any(w in low for w in LAUNCH_REASON_WORDS)


def short_requeue(seconds: float, max_seconds: float) -> bool:
    """A requeued attempt of ``seconds`` (its clipped End less its Start) is short enough."""
    return _OPS[PROLOG_SHORT_OP](seconds, max_seconds)


def is_prolog_requeue(state: str, reason: str, seconds: float, max_seconds: float) -> bool:
    """Whether an attempt is a prolog-failure requeue."""
    return state == REQUEUED and (prolog_flag(reason) or short_requeue(seconds, max_seconds))


def follows_prolog_requeue(
    prev_state: str, prev_reason: str, prev_seconds: float, state: str, reason: str, max_seconds: float
) -> bool:
    """Whether an attempt is lost as :data:`PROLOG_CAUSE`, given the attempt before it in
    its job's order (:func:`order_key`)."""
    return (
        state == FAILED
        and prev_state == REQUEUED
        and (prolog_flag(prev_reason) or short_requeue(prev_seconds, max_seconds) or launch_flag(reason))
    )


def _contains_any(text: str, words: Sequence[str]) -> str:
    low = f"lower({text})"
    return "(" + " OR ".join(f"contains({low}, {_q(w.lower())})" for w in words) + ")"


def flags_sql(reason: str) -> str:
    """SQL columns ``pflag`` (:func:`prolog_flag`) and ``lflag`` (:func:`launch_flag`)."""
    return f"{_contains_any(reason, PROLOG_REASON_WORDS)} AS pflag, {_contains_any(reason, LAUNCH_REASON_WORDS)} AS lflag"


def reason_kept_sql(state: str, reason: str) -> str:
    """SQL: the Reason of a row in one of :data:`PROLOG_STATES` (NULL for the others: the rule
    reads no other, and the engine keeps no other)."""
    return f"CASE WHEN {state} IN {_in_list(PROLOG_STATES)} THEN {reason} END"


def requeued_job_sql(state: str) -> str:
    """SQL aggregate: a job has both a REQUEUED and a FAILED attempt (the rule can mark one)."""
    return f"bool_or({state} = {_q(REQUEUED)}) AND bool_or({state} = {_q(FAILED)})"


def follows_prolog_requeue_sql(
    prev_state: str, prev_pflag: str, prev_seconds: str, state: str, lflag: str, max_seconds: float
) -> str:
    """SQL of :func:`follows_prolog_requeue` over the previous attempt's state, ``pflag`` and
    length and this attempt's state and ``lflag``."""
    return (
        f"({state} = {_q(FAILED)} AND {prev_state} = {_q(REQUEUED)} AND ({prev_pflag} "
        f"OR {prev_seconds} {PROLOG_SHORT_OP} {float(max_seconds)!r} OR {lflag}))"
    )


# --------------------------------------------------------------------------- the attempt tie order

#: A job's attempts are put in order by Start, then End (clipped to the window), then by
#: these fields, each ``(field, descending)``, so that the answer does not depend on the
#: order rows arrive in. ``tres`` is the parsed AllocTRES (GPU count, then typed counts);
#: ``submit`` a missing Submit as -1. The SQL forms leave out ``name`` (JobName, read by no
#: sum: two attempts tied on every field before it give the same answer in either order).
#: The streaming path keeps the whole record of REQUEUED and FAILED attempts only, so
#: ``state`` must stay the first field (:func:`order_key_partial`). Stored in the archive
#: (``tie_rank``): bump :data:`RULES_VERSION` on a change.
TIE_ORDER: Tuple[Tuple[str, bool], ...] = (
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

_TIE_VALUE: Dict[str, Callable[[Any], Any]] = {
    "state": operator.attrgetter("state"),
    "reason": operator.attrgetter("reason"),
    "job_id": operator.attrgetter("job_id"),
    "tres": operator.attrgetter("gpus", "gpu_types"),
    "nodelist": operator.attrgetter("nodelist"),
    "user": operator.attrgetter("user"),
    "account": operator.attrgetter("account"),
    "partition": operator.attrgetter("partition"),
    "name": operator.attrgetter("name"),
    "submit": lambda a: -1 if a.submit is None else a.submit,
}


class _Desc:
    """A sort key in reverse order."""

    __slots__ = ("v",)

    def __init__(self, v: Any):
        self.v = v

    def __lt__(self, other: "_Desc") -> bool:
        return other.v < self.v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.v == other.v

    __hash__ = None  # type: ignore[assignment]


def _tie(descending: bool, value: Any) -> Any:
    return _Desc(value) if descending else value


def order_key(a: Any) -> tuple:
    """Python sort key of an attempt (:class:`.sacct.Attempt`) in its job's order."""
    return (a.raw_start, a.end) + tuple(_tie(d, _TIE_VALUE[f](a)) for f, d in TIE_ORDER)


def order_key_partial(raw_start: int, end: int, state: str) -> tuple:
    """The sort key of an attempt the streaming path keeps only ``(Start, End, state)`` of (one
    neither REQUEUED nor FAILED): it differs from every kept attempt's in the state, the first
    tie field, and ties with another such attempt only where their order changes no answer."""
    if TIE_ORDER[0][0] != "state":
        raise RuntimeError("rules.TIE_ORDER must begin with the state (the streaming path keeps no more)")
    return (raw_start, end, _tie(TIE_ORDER[0][1], state))


def tie_order_sql(columns: Mapping[str, Optional[str]], prefix: bool = False) -> str:
    """SQL ``ORDER BY`` terms of :data:`TIE_ORDER` (after Start and End) over ``columns``
    (field → SQL expression; None leaves the field out). ``prefix``: only the fields before
    the first one ``columns`` lacks (a table that keeps only some)."""
    terms = []
    for field, descending in TIE_ORDER:
        if field not in columns:
            if prefix:
                break
            raise KeyError(f"tie order field {field!r} has no SQL column")
        sql = columns[field]
        if sql is not None:
            terms.append(f"{sql} {'DESC' if descending else 'ASC'}")
    return ", ".join(terms)


def tie_prefix_columns(columns: Mapping[str, Optional[str]]) -> Tuple[str, ...]:
    """The SQL columns of the leading fields of :data:`TIE_ORDER` that ``columns`` has."""
    out = []
    for field, _ in TIE_ORDER:
        if field not in columns:
            break
        if columns[field] is not None:
            out.append(columns[field])
    return tuple(out)


# --------------------------------------------------------------------------- adding lost seconds


def add_lost(acc: Any, cause: str, seconds: float) -> None:
    """Add lost GPU-seconds to an accumulator: to its lost total and to its cause."""
    acc.lost += seconds
    acc.lost_by_cause[cause] = acc.lost_by_cause.get(cause, 0.0) + seconds


# --------------------------------------------------------------------------- queue wait

#: an attempt's queue wait (Start - Submit) counts when its Start is ``>`` the window's start
#: (a Start clipped by ``sacct -T`` shows up as exactly the window start and hides the real
#: wait) and ``>=`` its Submit
WAIT_AFTER_WINDOW_START_OP = ">"
WAIT_AFTER_SUBMIT_OP = ">="


def queue_wait(raw_start: int, submit: Optional[int], window_start: int) -> Optional[int]:
    """Seconds an attempt waited in the queue, None when it does not count."""
    if (
        submit is not None
        and _OPS[WAIT_AFTER_WINDOW_START_OP](raw_start, window_start)
        and _OPS[WAIT_AFTER_SUBMIT_OP](raw_start, submit)
    ):
        return raw_start - submit
    return None


def queue_wait_fn(window_start: int) -> Callable[[int, Optional[int]], Optional[int]]:
    """:func:`queue_wait` for one window, as a function of ``(raw_start, submit)`` compiled from
    the same two comparisons (the hot loops call it once per attempt: no look-up of the
    comparisons per call)."""
    ops = (WAIT_AFTER_WINDOW_START_OP, WAIT_AFTER_SUBMIT_OP)
    if not all(op in _OPS for op in ops):
        raise ValueError(f"queue wait comparisons {ops}: each one of {sorted(_OPS)}")
    source = (
        "def wait(rs, sub):\n"
        f"    if sub is not None and rs {ops[0]} {int(window_start)} and rs {ops[1]} sub:\n"
        "        return rs - sub\n"
        "    return None\n"
    )
    scope: Dict[str, Any] = {}
    exec(compile(source, "<slurmkit.report.rules.queue_wait>", "exec"), scope)  # noqa: S102 (our own text)
    return scope["wait"]


def queue_wait_sql(start: str, submit: str, window_start: int) -> str:
    """SQL of :func:`queue_wait` (NULL when it does not count)."""
    return (
        f"CASE WHEN {submit} IS NOT NULL AND {start} {WAIT_AFTER_WINDOW_START_OP} {int(window_start)} "
        f"AND {start} {WAIT_AFTER_SUBMIT_OP} {submit} THEN {start} - {submit} END"
    )


# --------------------------------------------------------------------------- clipping to the window

#: an attempt is clipped to the window ``[lo, hi)``; one left with no length is outside it,
#: except an attempt of no length at all (Start = End) that lies inside: it is kept as an
#: instant (it counts as an attempt, with no GPU time)
KEEP_INSTANTS = True


def clip(start: int, end: int, lo: int, hi: int) -> Optional[Tuple[int, int]]:
    """The attempt ``[start, end)`` clipped to the window ``[lo, hi)``; None: outside it."""
    s = start if start > lo else lo
    e = end if end < hi else hi
    if e <= s:
        if not (KEEP_INSTANTS and start == end and lo <= start < hi):
            return None
        e = s
    return s, e


def clip_sql(start: str, end: str, lo: int, hi: int) -> Tuple[str, str, str]:
    """SQL of :func:`clip`: ``(outside, clipped start, clipped end)``."""
    s, e = f"greatest({start}, {lo})", f"least({end}, {hi})"
    instant = f"({start} = {end} AND {start} >= {lo} AND {start} < {hi})" if KEEP_INSTANTS else "FALSE"
    return f"{e} <= {s} AND NOT {instant}", s, f"greatest({e}, {s})"


# --------------------------------------------------------------------------- row classes

#: A job row's class, decided in this order (the first that applies): ``filtered`` (the
#: report's filters leave it out), ``notstarted`` (its Start is one of :data:`UNKNOWN_TIMES`:
#: pending, or cancelled before it started), ``bad`` (a time that is no time; an unknown End of
#: a state not in :data:`RUNNING_STATES`; an impossible time, :func:`impossible_time`),
#: ``outside`` (:func:`clip`), ``ok`` (counted). The reasons sacct's shape gives (a wrong field
#: count or job id) come before them, the AllocTRES and exact duplicates after.
ROW_CLASSES: Tuple[str, ...] = ("filtered", "notstarted", "bad", "outside", "ok")
#: the texts of a time sacct did not know (``Unknown`` End of a running job, ``None`` Start of
#: a pending one)
UNKNOWN_TIMES: FrozenSet[str] = frozenset({"Unknown", "None", "", "N/A"})
#: the states whose unknown End means "running up to now" (taken from
#: :data:`slurmkit.slurm.states.RUNNING_STATES`)
RUNNING_STATES: FrozenSet[str] = frozenset(states.RUNNING_STATES)
#: times before this (2000-01-01T00:00:00Z) cannot come from a Slurm accounting database
#: (slurmdbd appeared in 2008): such a row is impossible, not summed
EARLIEST_TIME = 946684800
#: the prefix of the reasons of rows that parse but cannot be true (counted with the malformed)
IMPOSSIBLE = "impossible: "
BEFORE_EARLIEST = IMPOSSIBLE + "time before 2000"
END_BEFORE_START = IMPOSSIBLE + "end before start"


def impossible_time(start: int, end: int, submit: Optional[int], running: bool) -> Optional[str]:
    """Why a row's times cannot be true (None: they can). A running row's End is the report's
    end, not data: it is not tested."""
    if (
        start < EARLIEST_TIME
        or (end < EARLIEST_TIME and not running)
        or (submit is not None and submit < EARLIEST_TIME)
    ):
        return BEFORE_EARLIEST
    if end < start and not running:
        return END_BEFORE_START
    return None


def impossible_time_fn() -> Callable[[int, int, Optional[int], bool], Optional[str]]:
    """:func:`impossible_time` compiled with :data:`EARLIEST_TIME` in it (the reference parser
    calls it once per row: no look-up of the rule's data per call)."""
    source = (
        "def impossible(start, end, submit, running):\n"
        f"    if start < {int(EARLIEST_TIME)} or (end < {int(EARLIEST_TIME)} and not running)"
        f" or (submit is not None and submit < {int(EARLIEST_TIME)}):\n"
        f"        return {BEFORE_EARLIEST!r}\n"
        "    if end < start and not running:\n"
        f"        return {END_BEFORE_START!r}\n"
        "    return None\n"
    )
    scope: Dict[str, Any] = {}
    exec(compile(source, "<slurmkit.report.rules.impossible_time>", "exec"), scope)  # noqa: S102 (our own text)
    return scope["impossible"]


def unknown_time_sql(text: str) -> str:
    """SQL: the time text is one of :data:`UNKNOWN_TIMES`."""
    return f"{text} IN {_in_list(UNKNOWN_TIMES)}"


def running_sql(state: str) -> str:
    """SQL: the state is one of :data:`RUNNING_STATES`."""
    return f"{state} IN {_in_list(RUNNING_STATES)}"


def impossible_time_sql(st: str, en: str, sub: str) -> str:
    """SQL of :func:`impossible_time` over epochs (``en`` NULL: an unknown End, tested as
    running; ``sub`` NULL: no Submit): its reason, NULL when the times can be true."""
    e = int(EARLIEST_TIME)
    return (
        f"CASE WHEN {st} < {e} OR {en} < {e} OR {sub} < {e} THEN {_q(BEFORE_EARLIEST)} "
        f"WHEN {en} < {st} THEN {_q(END_BEFORE_START)} END"
    )


def impossible_time_cond_sql(st: str, en: str, sub: str) -> str:
    """SQL: :func:`impossible_time_sql` gives a reason (the condition alone, for the scan)."""
    e = int(EARLIEST_TIME)
    return f"({st} < {e} OR {en} < {e} OR {sub} < {e} OR {en} < {st})"


def row_class_sql(
    *,
    filtered: str,
    not_started: str,
    undecided: str,
    undecided_class: str,
    unknown_end: str,
    state: str,
    st: str,
    en: str,
    sub: str,
    lo: int,
    hi: int,
) -> Tuple[str, str, str]:
    """SQL of a job row's class (:data:`ROW_CLASSES`, in their order) and its clipped Start
    and End: ``(class, s, e)``. ``filtered``, ``not_started``, ``undecided`` (a time text the
    engine has not turned into an epoch yet: class ``undecided_class``) and ``unknown_end``
    are SQL conditions; ``st``, ``en``, ``sub`` the epochs (NULL where the text was none)."""
    if ROW_CLASSES != ("filtered", "notstarted", "bad", "outside", "ok"):
        raise RuntimeError("rules.ROW_CLASSES: the SQL form knows this order only")
    running = f"({unknown_end} AND {running_sql(state)})"
    en_eff = f"(CASE WHEN {running} THEN {hi} ELSE {en} END)"
    outside, s, e = clip_sql(st, en_eff, lo, hi)
    cls = f"""CASE
            WHEN {filtered} THEN 'filtered'
            WHEN {not_started} THEN 'notstarted'
            WHEN {undecided} THEN {_q(undecided_class)}
            WHEN {en} IS NULL AND NOT {running} THEN 'bad'
            WHEN {impossible_time_cond_sql(st, en, sub)} THEN 'bad'
            WHEN {outside} THEN 'outside'
            ELSE 'ok' END"""
    return cls, s, e


# --------------------------------------------------------------------------- SQL text


def _q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _in_list(values: Sequence[str]) -> str:
    return "(" + ", ".join(_q(v) for v in sorted(values)) + ")"
