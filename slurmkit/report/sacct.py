"""The sacct command line and the streaming row parser behind ``slurmkit report``.

What the command asks for, and why (sacct(1), https://slurm.schedmd.com/sacct.html):

* ``-a`` every user; ``-D`` every attempt of a requeued job (without it sacct shows
  only the last one, but the earlier attempts held GPUs too); ``-T`` clip each row's
  Start/End to ``-S``/``-E`` (without it a job spanning the boundary is counted in
  full); always an explicit ``-S`` and ``-E`` (sacct's default window starts at
  midnight today).
* ``SLURM_TIME_FORMAT=%s``: Submit/Start/End come back as epoch seconds, so no
  timezone guessing on the way back. Saved files with ISO local times are accepted
  too (see :mod:`.window` for the timezone rule).
* Duration is computed here as ``End - Start`` of the truncated times, clipped to the
  window again: with ``-T`` Slurm 22.05 truncates Start/End but not
  ``Elapsed``/``ElapsedRaw``, and a running job has ``End=Unknown`` and counts up to
  ``min(now, until)``.
* Only **job rows** carry the allocation (``AllocTRES`` with ``gres/gpu``); step rows
  (``123.batch``, ``123.0``, ``123.extern``) repeat part of it and are skipped before
  the line is even split. Array tasks (``123_4``) and heterogeneous components
  (``123+0``) are job rows and count individually.
* **No free text in the main query.** sacct prints fields raw: a job name may hold a
  newline, and ``innocent\n<a complete row>`` would be read as a second record (a forged
  job). The main query (:data:`QUERY_FIELDS`) asks only for fields users cannot write, so
  every line is one record; names, when a view needs them, come from a second query keyed by
  JobIDRaw (:func:`fetch_names`), where a forged line can only claim a job that already has a
  line of its own, and such a job's name is withheld. Every job row is also validated
  (:func:`job_id_ok`: the JobID's shape, JobIDRaw a number that matches it).
* A saved dump with a free-text column (:data:`FREE_TEXT_COLUMNS`) cannot be trusted for
  the same reason: the CLI refuses it unless told the dump is trusted
  (``--trust-free-text``); :func:`recommended_command` saves one without.

A malformed row (wrong field count, bad time, ``Unknown``/``None`` end on a finished
job, garbage TRES) is counted and skipped with its line number; one bad row never
aborts a month's report.
"""

from __future__ import annotations

import gc
import io
import itertools
import logging
import operator
import os
import re
import shlex
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.errors import UsageError
from slurmkit.report import progress, rules
from slurmkit.report.neutral import neutral_text
from slurmkit.report.window import Window, iso_local
from slurmkit.slurm.parse import SACCT_DELIMITER, ParseError, gpus_from_tres, parse_tres, split_parsable2

log = logging.getLogger("slurmkit.report")

#: The columns slurmkit asks sacct for, in this order (free-text JobName last).
FIELDS: Tuple[str, ...] = (
    "JobID",
    "JobIDRaw",
    "State",
    "AllocTRES",
    "Submit",
    "Start",
    "End",
    "ElapsedRaw",
    "User",
    "Account",
    "Partition",
    "NodeList",
    "Reason",
    "JobName",
)
#: The columns of the live main query: :data:`FIELDS` without the free text (see the module
#: docstring); JobName comes from :func:`fetch_names` when a view needs it.
QUERY_FIELDS: Tuple[str, ...] = tuple(c for c in FIELDS if c != "JobName")
#: sacct columns whose text users write (job name, comments, paths, the submit line, feature
#: constraints): a newline in one breaks a saved dump's records. AdminComment is not among
#: them: only operators and root (the epilog's summaries) can set it.
FREE_TEXT_COLUMNS: FrozenSet[str] = frozenset(
    {"jobname", "comment", "systemcomment", "workdir", "submitline", "constraints", "extra", "container"}
)
#: Without these a saved file cannot be reported at all.
REQUIRED_COLUMNS: Tuple[str, ...] = ("JobID", "State", "AllocTRES", "Start", "End")
#: Columns a grouping or feature needs (checked against a saved file's header).
COLUMN_FOR = {
    "user": "User",
    "account": "Account",
    "partition": "Partition",
    "node": "NodeList",
    "name": "JobName",
}

MAX_LISTED_LINES = 20
#: Default for ``report.max_gpus``: more GPUs than any cluster holds (set it to your own count).
DEFAULT_MAX_GPUS = 100_000


class Attempt(NamedTuple):
    """One run of one job (or array task, or het component) inside the window.

    ``start``/``end`` are clipped to the window (and to now); ``raw_start`` is the
    start as sacct reported it, used to tell whether the queue wait is observable.
    ``gpu_types`` is the typed split, e.g. ``(("h100", 8),)``; empty when untyped.
    The text fields come first so the parser can take them from a row in one
    ``itemgetter`` call; ``name`` may keep the row's newline (use :attr:`job_name`).
    """

    job_id: str
    job_id_raw: str
    user: str
    account: str
    partition: str
    nodelist: str
    reason: str
    name: str
    state: str
    gpus: int
    gpu_types: Tuple[Tuple[str, int], ...]
    submit: Optional[int]
    start: int
    end: int
    raw_start: int
    line: int
    running: bool

    @property
    def seconds(self) -> int:
        return self.end - self.start

    @property
    def gpu_seconds(self) -> int:
        return self.gpus * (self.end - self.start)

    @property
    def job_name(self) -> str:
        return self.name.rstrip("\r\n")


_new_attempt = tuple.__new__  # C-level constructor: NamedTuple's own __new__ is a Python function

#: Receives each attempt as it is parsed, with the hash of its row; returns ``False`` when the
#: row is an exact duplicate of an earlier one of the same job (see :func:`parse_rows`).
Sink = Callable[[Attempt, int], bool]


@dataclass
class Filters:
    """Row filters (exact names). ``None`` means no filter."""

    users: Optional[FrozenSet[str]] = None
    accounts: Optional[FrozenSet[str]] = None
    partitions: Optional[FrozenSet[str]] = None
    states: Optional[FrozenSet[str]] = None
    names: Optional[FrozenSet[str]] = None

    @property
    def active(self) -> bool:
        return any(
            x is not None for x in (self.users, self.accounts, self.partitions, self.states, self.names)
        )


@dataclass
class ParseStats:
    """What the parser saw; the malformed list is capped, the count is not."""

    rows: int = 0
    job_rows: int = 0
    step_rows: int = 0
    not_started: int = 0
    outside_window: int = 0
    filtered_out: int = 0
    malformed: int = 0
    impossible: int = 0
    malformed_lines: List[int] = field(default_factory=list)
    malformed_reasons: Counter = field(default_factory=Counter)

    def bad(self, line_no: int, reason: str) -> None:
        """Count a skipped row; reasons starting with :data:`.rules.IMPOSSIBLE` are rows that
        parse but cannot be true (they are excluded exactly like malformed ones)."""
        self.malformed += 1
        if reason.startswith(rules.IMPOSSIBLE):
            self.impossible += 1
        self.malformed_reasons[reason] += 1
        if len(self.malformed_lines) < MAX_LISTED_LINES:
            self.malformed_lines.append(line_no)

    def warning(self, source: str) -> Optional[str]:
        """The one-line warning about skipped rows, or ``None`` when there were none."""
        if not self.malformed:
            return None
        lines = ", ".join(map(str, self.malformed_lines))
        more = (
            f" and {self.malformed - len(self.malformed_lines)} more"
            if self.malformed > len(self.malformed_lines)
            else ""
        )
        why = "; ".join(f"{r} ({n})" for r, n in self.malformed_reasons.most_common())
        impossible = f"; {self.impossible} of them impossible data, excluded" if self.impossible else ""
        return (
            f"{source}: skipped {self.malformed} malformed row(s) at line(s) {lines}{more}: {why}{impossible}"
        )

    def to_dict(self) -> dict:
        return {
            "rows": self.rows,
            "job_rows": self.job_rows,
            "step_rows": self.step_rows,
            "not_started": self.not_started,
            "outside_window": self.outside_window,
            "filtered_out": self.filtered_out,
            "malformed": self.malformed,
            "impossible": self.impossible,
            "malformed_lines": list(self.malformed_lines),
            "malformed_reasons": dict(self.malformed_reasons),
        }


# --------------------------------------------------------------------------- time parsing

_hour_cache: Dict[str, int] = {}
#: "YYYY-MM-DDTHH:MM" -> epoch of that minute, filled by parse_time and read by the
#: parser's ISO fast path (a month has 43,200 minutes: small).
_minute_cache: Dict[str, int] = {}


def clear_time_caches() -> None:
    """Forget cached local-time conversions (after changing ``TZ`` in-process)."""
    _hour_cache.clear()
    _minute_cache.clear()


def hour_epoch(y: int, mo: int, d: int, h: int) -> int:
    """Epoch of the local hour ``y-mo-d h:00`` (``mktime``, which normalises a day past the
    month's end). An hour that local time passes twice (the end of DST) is its first one, and
    an hour it skips is read with the offset before the change: glibc's ``mktime`` guesses an
    ambiguous hour's offset from its own previous call, so the hour three hours before is
    converted first, and the answer does not depend on the order rows come in. The one rule
    of local time for both engines (the DuckDB engine's offset table is built from it)."""
    time.mktime((y, mo, d, h - 3, 0, 0, 0, 0, -1))
    return int(time.mktime((y, mo, d, h, 0, 0, 0, 0, -1)))


def parse_time(text: str) -> Optional[int]:
    """Epoch seconds from an sacct time: epoch digits (``SLURM_TIME_FORMAT=%s``) or
    ISO local time ``YYYY-MM-DDTHH:MM:SS``; ``None`` for ``Unknown``/``None``/empty.

    ISO times are converted through a cache keyed by the hour (``YYYY-MM-DDTHH``):
    one ``mktime`` per distinct hour instead of a datetime per row. DST shifts happen
    on hour boundaries, so adding minutes and seconds to the hour's epoch is exact.
    Each minute seen is also remembered for the parser's ISO fast path. The caches
    assume ``TZ`` does not change in the process (see :func:`clear_time_caches`).
    Raises :class:`ValueError` for anything else.
    """
    if text.isdigit() and text.isascii():  # int() alone would take " 12", "+12", "1_2" and other digits
        return int(text)
    if text in rules.UNKNOWN_TIMES:
        return None
    if (
        len(text) != 19
        or text[4] != "-"
        or text[7] != "-"
        or text[10] not in "T "
        or text[13] != ":"
        or text[16] != ":"
    ):
        raise ValueError(text)
    key = text[:13]
    base = _hour_cache.get(key)
    if base is None:
        if not (key[0:4] + key[5:7] + key[8:10] + key[11:13]).isdigit() or not key.isascii():
            raise ValueError(text)
        y, mo, d, h = int(key[0:4]), int(key[5:7]), int(key[8:10]), int(key[11:13])
        if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24):
            raise ValueError(text)
        base = hour_epoch(y, mo, d, h)
        _hour_cache[key] = base
    mi, s = text[14:16], text[17:19]
    if not (mi + s).isdigit() or not text.isascii() or int(mi) > 59 or int(s) > 60:
        raise ValueError(text)
    minute = base + int(mi) * 60
    _minute_cache[text[:16]] = minute
    return minute + int(s)


def parse_gpu_tres(text: str) -> Tuple[int, Tuple[Tuple[str, int], ...]]:
    """``(total GPUs, typed split)`` from an AllocTRES string; raises ParseError."""
    total, typed = gpus_from_tres(parse_tres(text))
    return total, tuple(sorted(typed.items()))


#: A job row's JobID: ``123``, an array task ``123_4``, a pending array ``123_[1-3%2]``, a
#: heterogeneous component ``123+1`` (step rows, ``123.batch``, are skipped before this test).
#: ASCII digits only, at most 18 (the engine's SQL applies the same pattern).
JOB_ID_PATTERN = r"([0-9]{1,18})(_\[[0-9,%-]+\]|[_+][0-9]{1,18})?"
_job_id_re = re.compile(JOB_ID_PATTERN + r"\Z")
_raw_re = re.compile(r"[0-9]{1,18}\Z")
#: why a row failing :func:`job_id_ok` is skipped
BAD_JOB_ID = "bad JobID or JobIDRaw"
GARBAGE_TRES = "garbage AllocTRES"
DUPLICATE_ROW = rules.IMPOSSIBLE + "exact duplicate of an earlier row"


def job_id_ok(job_id: str, raw: Optional[str]) -> bool:
    """Whether a job row's JobID has one of sacct's shapes and its JobIDRaw (``None``: the
    dump has no such column) matches it: the same number for a plain job or a pending array,
    a number at least the array's or het job's own for a task or a component (their raw ids
    are their own job ids, allocated after it)."""
    m = _job_id_re.match(job_id)
    if m is None:
        return False
    if raw is None:
        return True
    if _raw_re.match(raw) is None:
        return False
    base, suffix = m.group(1), m.group(2)
    if suffix is None or suffix.startswith("_["):
        return raw == base
    return int(raw) >= int(base)


# --------------------------------------------------------------------------- the parser


def _column_index(columns: Sequence[str]) -> Dict[str, int]:
    return {c.strip().lower(): i for i, c in enumerate(columns)}


def missing_columns(columns: Sequence[str], needed: Iterable[str]) -> List[str]:
    have = _column_index(columns)
    return [c for c in needed if c.lower() not in have]


def parse_rows(
    lines: Iterable[str],
    columns: Sequence[str],
    *,
    sep: str,
    window: Window,
    now: Optional[float] = None,
    filters: Optional[Filters] = None,
    first_line: int = 1,
    stats: Optional[ParseStats] = None,
    max_gpus: int = DEFAULT_MAX_GPUS,
    sink: Optional[Sink] = None,
) -> Tuple[List[Attempt], ParseStats]:
    """Parse ``--parsable2`` data rows (no header) into attempts inside ``window``.

    ``columns`` names the fields of each row (sacct's header names, any order, any
    case); ``first_line`` is the file line number of the first row, for warnings.
    The cyclic garbage collector is paused meanwhile: the parser only creates
    acyclic tuples, and generational passes over hundreds of thousands of live
    tuples cost a quarter of the run time.

    Rows that parse but cannot be true are skipped and counted with the malformed
    ones under reasons starting ``impossible:``: a time before 2000, an End before
    its Start, more GPUs than ``max_gpus``, an exact duplicate of an earlier job row.

    With ``sink`` no list is kept: each attempt goes to ``sink(attempt, row_hash)`` as it is
    parsed (the streaming report, :mod:`.stream`), which decides about duplicates (an exact
    duplicate has the same JobIDRaw, so the sink compares hashes within one job), and the
    returned list is empty.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse_rows(
            lines,
            columns,
            sep=sep,
            window=window,
            now=now,
            filters=filters,
            first_line=first_line,
            stats=stats,
            max_gpus=max_gpus,
            sink=sink,
        )
    finally:
        if was_enabled:
            gc.enable()


def _parse_rows(
    lines: Iterable[str],
    columns: Sequence[str],
    *,
    sep: str,
    window: Window,
    now: Optional[float],
    filters: Optional[Filters],
    first_line: int,
    stats: Optional[ParseStats],
    max_gpus: int,
    sink: Optional[Sink] = None,
) -> Tuple[List[Attempt], ParseStats]:
    """The hot loop of the report: no per-row datetime, no regular expression,
    step rows rejected before splitting, AllocTRES parses cached per distinct string.
    """
    stats = stats or ParseStats()
    filters = filters or Filters()
    now_i = int(now if now is not None else time.time())
    idx = _column_index(columns)
    lacking = [c for c in REQUIRED_COLUMNS if c.lower() not in idx]
    if lacking:
        raise UsageError(f"sacct data lacks column(s) {', '.join(lacking)}; {recommended_hint()}")
    nf = len(columns)
    i_jobid = idx["jobid"]
    i_raw = idx.get("jobidraw", i_jobid)
    has_raw = "jobidraw" in idx
    i_state, i_tres = idx["state"], idx["alloctres"]
    i_submit = idx.get("submit")
    i_start, i_end = idx["start"], idx["end"]
    blank_i = nf  # index of an always-empty slot appended for absent optional columns
    i_user = idx.get("user", blank_i)
    i_account = idx.get("account", blank_i)
    i_part = idx.get("partition", blank_i)
    i_nodes = idx.get("nodelist", blank_i)
    i_reason = idx.get("reason", blank_i)
    i_name = idx.get("jobname", blank_i)
    free_last = i_name == nf - 1
    last = nf - 1
    has_submit = i_submit is not None
    if not has_submit:
        i_submit = blank_i
    free_idx = i_name if i_name < nf else None
    jobid_first = i_jobid == 0
    need_pad = blank_i in (i_user, i_account, i_part, i_nodes, i_reason, i_name, i_submit)

    lo = window.start
    hi = min(window.end, now_i)
    users, accounts, parts_f, states_f = filters.users, filters.accounts, filters.partitions, filters.states
    names = filters.names
    any_filter = filters.active

    tres_cache: Dict[str, object] = {}
    running_states = rules.RUNNING_STATES  # the row-class rule's data, read when the parse starts
    impossible = rules.impossible_time_fn()
    slow_time = parse_time
    new_attempt = _new_attempt
    clip = rules.clip  # read when the parse starts (the rule's data too)
    minute_of = _minute_cache
    epoch_times = True
    out: List[Attempt] = []
    append = out.append
    bad = stats.bad
    job_rows = step_rows = not_started = outside = filtered = 0
    seen_rows: set = set()  # hashes of the job rows summed so far: exact duplicates are flagged

    text_fields = operator.itemgetter(i_jobid, i_raw, i_user, i_account, i_part, i_nodes, i_reason, i_name)
    line_no = first_line - 1
    blank = 0
    # Per-line work is kept to the minimum: no row counter (derived from the line
    # number), blank lines detected only when a row does not split right.
    for line_no, line in enumerate(lines, first_line):
        # Step rows: reject on the first field before paying for a split.
        # (+1: "no separator" is -1 -> an empty range, so such a line is malformed, not a step)
        if jobid_first and line.find(".", 0, line.find(sep) + 1) >= 0:
            step_rows += 1
            continue
        if free_last:
            f = line.split(sep, last)
            if len(f) != nf:
                if not line.strip():
                    blank += 1
                else:
                    bad(line_no, f"wrong field count (expected {nf})")
                continue
        else:
            f = line.rstrip("\r\n").split(sep)
            if len(f) != nf:
                if not line.strip():
                    blank += 1
                elif len(f) < nf or free_idx is None:
                    bad(line_no, f"wrong field count (expected {nf})")
                else:
                    f = split_parsable2(line.rstrip("\r\n"), nf, free_idx, sep)
                if len(f) != nf:
                    continue
        if not jobid_first and "." in f[i_jobid]:
            step_rows += 1
            continue
        jid = f[i_jobid]
        if not (jid == f[i_raw] and jid.isdigit() and jid.isascii() and len(jid) <= 18) and not job_id_ok(
            jid, f[i_raw] if has_raw else None
        ):
            bad(line_no, BAD_JOB_ID)
            continue
        job_rows += 1
        if need_pad:
            f.append("")
        state = f[i_state]
        if " " in state:  # "CANCELLED by 0"
            state = state.partition(" ")[0]
        if any_filter:
            if (
                (users is not None and f[i_user] not in users)
                or (accounts is not None and f[i_account] not in accounts)
                or (parts_f is not None and f[i_part] not in parts_f)
                or (states_f is not None and state not in states_f)
                or (names is not None and f[i_name].rstrip("\r\n") not in names)
            ):
                filtered += 1
                continue
        # --- times: the fast path is three epoch integers (slurmkit's own sacct call) or,
        # once a file has shown ISO times, three ISO times looked up by their minute;
        # anything else (Unknown, None, a new minute, garbage) takes the slow path.
        running = False
        try:
            if epoch_times:
                t1, t2 = f[i_start], f[i_end]
                if not (t1.isdigit() and t2.isdigit()):  # int() would also take " 12" or "+12"
                    raise ValueError
                start = int(t1)
                end = int(t2)
                if has_submit:
                    t3 = f[i_submit]
                    if not t3.isdigit():
                        raise ValueError
                    submit = int(t3)
                else:
                    submit = None
            else:
                t1, t2 = f[i_start], f[i_end]
                if len(t1) != 19 or len(t2) != 19:
                    raise ValueError
                s1, s2 = t1[17:], t2[17:]
                if t1[16] != ":" or t2[16] != ":" or not (s1 + s2).isdigit():
                    raise ValueError
                start = minute_of[t1[:16]] + int(s1)
                end = minute_of[t2[:16]] + int(s2)
                if has_submit:
                    t3 = f[i_submit]
                    if len(t3) != 19 or t3[16] != ":" or not t3[17:].isdigit():
                        raise ValueError
                    submit = minute_of[t3[:16]] + int(t3[17:])
                else:
                    submit = None
        except (ValueError, KeyError):
            s_txt = f[i_start]
            if len(s_txt) == 19 and s_txt[4] == "-":
                epoch_times = False
            elif s_txt.isdigit():
                epoch_times = True
            try:
                start = slow_time(f[i_start])
                if start is None:
                    not_started += 1  # pending, or cancelled before it started: no GPU time
                    continue
                e_txt = f[i_end].rstrip("\r\n")
                end = slow_time(e_txt)
                if end is None:
                    if state in running_states:
                        end = hi
                        running = True
                    else:
                        bad(line_no, f"{e_txt.strip() or 'empty'} end time for a {state} job")
                        continue
                submit = slow_time(f[i_submit]) if has_submit else None
            except ValueError:
                bad(line_no, "bad time")
                continue
        why = impossible(start, end, submit, running)
        if why is not None:
            bad(line_no, why)
            continue
        # --- clip to the window (again: -T is not trusted, and files may lack it)
        se = clip(start, end, lo, hi)
        if se is None:
            outside += 1
            continue
        s, e = se
        # --- GPUs
        tres = f[i_tres]
        g = tres_cache.get(tres)
        if g is None:
            try:
                g = parse_gpu_tres(tres.strip())
                if max(g[0], sum(n for _, n in g[1])) > max_gpus:
                    g = ()  # falsy, but not False: "impossible", not "garbage"
            except ParseError:
                g = False
            tres_cache[tres] = g
        if not g:
            bad(
                line_no,
                GARBAGE_TRES if g is False else rules.IMPOSSIBLE + "more GPUs than report.max_gpus",
            )
            continue
        row_hash = hash(line.rstrip("\r\n"))
        if sink is not None:
            if not sink(
                new_attempt(
                    Attempt, text_fields(f) + (state, g[0], g[1], submit, s, e, start, line_no, running)
                ),
                row_hash,
            ):
                bad(line_no, DUPLICATE_ROW)
            continue
        if row_hash in seen_rows:
            bad(line_no, DUPLICATE_ROW)
            continue
        seen_rows.add(row_hash)
        append(
            new_attempt(Attempt, text_fields(f) + (state, g[0], g[1], submit, s, e, start, line_no, running))
        )

    rows = line_no - first_line + 1 - blank
    stats.rows += rows
    stats.job_rows += job_rows
    stats.step_rows += step_rows
    stats.not_started += not_started
    stats.outside_window += outside
    stats.filtered_out += filtered
    return out, stats


# --------------------------------------------------------------------------- saved files


def recommended_command(window: Optional[Window] = None) -> str:
    """The sacct command whose output ``--sacct-file`` expects."""
    s = iso_local(window.start) if window and window.bounded else "2026-11-01"
    e = iso_local(window.end) if window and window.bounded else "2026-12-01"
    return (
        f"SLURM_TIME_FORMAT=%s sacct -a -D -T -S {s} -E {e} --parsable2 "
        f"--format={','.join(QUERY_FIELDS)} > usage.txt"
    )


def recommended_hint() -> str:
    return f"save it with: {recommended_command()}"


def read_header(
    first_line: str, delimiter: Optional[str] = None, hint: Optional[str] = None
) -> Tuple[List[str], str, bool]:
    """``(columns, separator, trailing)`` from a saved file's header line.

    Both ``|`` and the unit separator (``--delimiter=$'\\x1f'``) are recognised, or
    ``delimiter`` when given; ``trailing`` is true for ``--parsable`` output (a
    separator after the last field).
    """
    line = first_line.rstrip("\r\n")
    sep = delimiter or (SACCT_DELIMITER if SACCT_DELIMITER in line else "|")
    cols = line.split(sep)
    trailing = len(cols) > 1 and cols[-1] == ""
    if trailing:
        cols = cols[:-1]
    if "jobid" not in {c.strip().lower() for c in cols}:
        raise UsageError(
            f"the first line is not an sacct --parsable2 header (no JobID column); {hint or recommended_hint()}"
        )
    return [c.strip() for c in cols], sep, trailing


def refuse_free_text(path: str, columns: Sequence[str], trusted: bool) -> None:
    """Refuse a saved dump with a free-text column (:data:`FREE_TEXT_COLUMNS`) unless
    ``trusted``: a newline in a job name makes a line that reads as a whole row, which no
    reader can tell from a real one."""
    found = [c for c in columns if c.strip().lower() in FREE_TEXT_COLUMNS]
    if found and not trusted:
        raise UsageError(
            f"--sacct-file {path}: column(s) {', '.join(found)} hold text users write, where a newline "
            f"can forge whole rows, so this dump cannot be trusted; {recommended_hint()} "
            "(or give --trust-free-text for a dump you checked)"
        )


def parse_column_list(text: str) -> List[str]:
    """``--sacct-columns``: the ``--format`` list a header-less dump was made with
    (``JobID,JobName,User,...``; ``%N`` widths are ignored, as in sacct's own list)."""
    cols = [c.strip().split("%")[0] for c in (text or "").split(",")]
    cols = [c for c in cols if c]
    if not cols:
        raise UsageError(
            "--sacct-columns: give the dump's column names, comma-separated (its sacct --format list)"
        )
    lowered = [c.lower() for c in cols]
    dup = sorted({c for c in lowered if lowered.count(c) > 1})
    if dup:
        raise UsageError(f"--sacct-columns: column(s) listed twice: {', '.join(dup)}")
    if "jobid" not in lowered:
        raise UsageError("--sacct-columns: no JobID column")
    return cols


def _strip_trailing(lines: Iterable[str], sep: str) -> Iterator[str]:
    for line in lines:
        line = line.rstrip("\r\n")
        yield line[: -len(sep)] if line.endswith(sep) else line


@dataclass
class DumpHead:
    """A saved dump's layout, read from its head by :func:`read_dump_head`: its columns,
    delimiter, whether each row ends with one (``--parsable``), the file line number of the
    first data row, and the data rows that follow (the open file, or its first line again
    when the dump has no header)."""

    columns: List[str]
    sep: str
    trailing: bool
    first_row: int
    rows: Iterable[str]


def open_dump(path: str):
    """The saved dump ``path`` (``-``: standard input) as text; a file that cannot be opened
    is a usage error naming it."""
    try:
        if path == "-":
            return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline=None)
        fh = open(path, "r", encoding="utf-8", errors="replace", newline=None)
    except OSError as exc:
        raise UsageError(f"--sacct-file {path}: {exc.strerror}") from None
    progress.attach_file(fh)  # (a no-op unless a progress line is shown)
    return fh


def read_dump_head(
    fh: Iterable[str],
    columns: Optional[Sequence[str]] = None,
    delimiter: Optional[str] = None,
    hint: Optional[str] = None,
) -> Optional[DumpHead]:
    """The one reader of a saved dump's head (usage, capacity, efficiency and ingest, both
    engines): blank and leading ``#`` lines are skipped; the header line names the columns
    unless ``columns`` does (a dump made with ``--noheader``, any column order:
    ``--sacct-columns``); ``delimiter`` is sacct's ``--delimiter`` (default: the unit
    separator or ``|``, recognised); ``--parsable`` output (a delimiter after the last field)
    is recognised from the header, or for a header-less dump from its first row having one
    more field. ``None`` for a dump without any row."""
    header = ""
    first_line = 1
    for header in fh:
        if header.strip() and not header.startswith("#"):
            break
        first_line += 1
    if not header.strip() or header.startswith("#"):
        return None
    if columns is not None:
        first = header.rstrip("\r\n")
        sep = delimiter or (SACCT_DELIMITER if SACCT_DELIMITER in first else "|")
        trailing = first.endswith(sep) and len(first.split(sep)) == len(columns) + 1
        return DumpHead(list(columns), sep, trailing, first_line, itertools.chain([header], fh))
    cols, sep, trailing = read_header(header, delimiter, hint)
    return DumpHead(cols, sep, trailing, first_line + 1, fh)


def dump_rows(head: DumpHead) -> Iterable[str]:
    """The data rows of a dump, a trailing delimiter removed."""
    return _strip_trailing(head.rows, head.sep) if head.trailing else head.rows


def read_sacct_file(
    path: str,
    *,
    window: Window,
    now: Optional[float] = None,
    filters: Optional[Filters] = None,
    need_columns: Iterable[str] = (),
    columns: Optional[Sequence[str]] = None,
    delimiter: Optional[str] = None,
    max_gpus: int = DEFAULT_MAX_GPUS,
    sink: Optional[Sink] = None,
    trust_free_text: bool = True,
) -> Tuple[List[Attempt], ParseStats, List[str]]:
    """Parse a saved ``sacct --parsable2`` file, streaming.
    ``-`` reads standard input (``sacct ... | slurmkit report --sacct-file -``).

    ``columns`` and ``delimiter``: see :func:`read_dump_head`. ``sink``: see
    :func:`parse_rows`. ``trust_free_text=False`` refuses a dump with a free-text column
    (:func:`refuse_free_text`; the CLI's default).
    """
    with open_dump(path) as fh:
        head = read_dump_head(fh, columns, delimiter)
        if head is None:
            return [], ParseStats(), list(columns or FIELDS)
        refuse_free_text(path, head.columns, trust_free_text)
        lacking = missing_columns(head.columns, list(REQUIRED_COLUMNS) + list(need_columns))
        if lacking:
            raise UsageError(
                f"--sacct-file {path}: missing column(s) {', '.join(lacking)}; {recommended_hint()}"
            )
        attempts, stats = parse_rows(
            dump_rows(head),
            head.columns,
            sep=head.sep,
            window=window,
            now=now,
            filters=filters,
            first_line=head.first_row,
            max_gpus=max_gpus,
            sink=sink,
        )
    return attempts, stats, head.columns


# --------------------------------------------------------------------------- live sacct


@dataclass
class SacctQuery:
    """One sacct invocation: its argv (without the binary) and environment additions."""

    args: List[str]
    env: Dict[str, str]

    def display(self, binary: str = "sacct") -> str:
        """The command as a shell line that can be pasted (the unit separator is
        shown as bash's ``$'\\x1f'``)."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        words = []
        for arg in [binary, *self.args]:
            if SACCT_DELIMITER in arg:
                words.append(shlex.quote(arg.split(SACCT_DELIMITER)[0]) + "$'\\x1f'")
            else:
                words.append(shlex.quote(arg))
        return f"{env} {' '.join(words)}".strip()


def build_query(window: Window, filters: Optional[Filters] = None, truncate: bool = True) -> SacctQuery:
    """The sacct command for ``window``. User/account/partition/name filters are passed
    to sacct (less data) and applied again by the parser; the state filter is only
    applied by the parser, because ``sacct -s`` changes the meaning of ``-S/-E``
    ("jobs in this state during the window"). ``truncate=False`` leaves out ``-T``
    (the archive keeps each attempt's real Start and End)."""
    filters = filters or Filters()
    args = (
        ["-a", "-D"]
        + (["-T"] if truncate else [])
        + [
            "-S",
            iso_local(window.start),
            "-E",
            iso_local(window.end),
            "--parsable2",
            "--noheader",
            f"--delimiter={SACCT_DELIMITER}",
            "--format=" + ",".join(QUERY_FIELDS),
        ]
    )
    if filters.users is not None:
        args += ["-u", ",".join(sorted(filters.users))]
    if filters.accounts is not None:
        args += ["-A", ",".join(sorted(filters.accounts))]
    if filters.partitions is not None:
        args += ["-r", ",".join(sorted(filters.partitions))]
    if filters.names is not None:
        args += ["--name", ",".join(sorted(filters.names))]
    return SacctQuery(args, {"SLURM_TIME_FORMAT": "%s"})


def name_query(query: SacctQuery) -> SacctQuery:
    """The names query that goes with ``query``: the same window and filters, job rows only
    (``-X``), ``JobIDRaw`` then the free text, so that each record starts with a number."""
    args = [a for a in query.args if a != "-T" and not a.startswith("--format=")]
    return SacctQuery(["-X", *args, "--format=JobIDRaw,JobName"], dict(query.env))


def parse_names(text: str, sep: str = SACCT_DELIMITER) -> Tuple[Dict[str, str], List[str]]:
    """``({JobIDRaw: name}, withheld ids)`` from the names query's output.

    A line that starts with a number and the separator starts a record; any other line
    continues the previous name (a newline in it). A name may still hold a line that looks
    like a record (``innocent\n999<sep>fake``): it can only claim a job that has its own
    line too, so a JobIDRaw given two different names is withheld (its name is empty and
    the id is listed), and one that no main-query row has is never looked up."""
    names: Dict[str, str] = {}
    withheld: set = set()
    key: Optional[str] = None
    buf: List[str] = []

    def commit() -> None:
        if key is None:
            return
        name = "\n".join(buf)
        if names.setdefault(key, name) != name:
            withheld.add(key)

    for line in text.rstrip("\n").split("\n"):
        head, found, rest = line.partition(sep)
        if found and _raw_re.match(head):
            commit()
            key, buf = head, [rest]
        elif key is not None:
            buf.append(line)
    commit()
    for k in withheld:
        names[k] = ""
    return names, sorted(withheld, key=int)


def call_sacct(query: SacctQuery, timeout: Optional[float]):
    """Run sacct through the slurm layer's one sacct call (:func:`slurmkit.slurm.client.run_sacct`:
    a missing sacct or an unreachable slurmdbd raises an exit-3 error that says so)."""
    from slurmkit.slurm import client

    env = dict(os.environ)
    env.update(query.env)
    return client.run_sacct(query.args, env=env, timeout=timeout)


def live_lines(query: SacctQuery, *, names: bool, timeout: Optional[float] = None) -> List[str]:
    """sacct's records for ``query`` (made by :func:`build_query`: :data:`QUERY_FIELDS`, no
    free text) as lines in the layout of :data:`FIELDS`: JobName appended, from
    :func:`fetch_names`' query when ``names`` is true (made neutral: no control character,
    so no separator or line break, survives in it), else empty. Step rows get no name."""
    # str.split, not io.StringIO: StringIO keeps a 4-byte-per-character copy of the
    # whole output (600 MB for a million-row month); the line list costs a third of that.
    lines = call_sacct(query, timeout).stdout.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not names:
        return [line + SACCT_DELIMITER for line in lines]
    table, withheld = parse_names(call_sacct(name_query(query), timeout).stdout)
    if withheld:
        log.warning(
            "sacct: job name(s) of %d job(s) withheld: a name holds a line that claims another job "
            "(JobIDRaw %s)",
            len(withheld),
            ", ".join(withheld[:MAX_LISTED_LINES]),
        )
    get = table.get
    out = []
    for line in lines:
        parts = line.split(SACCT_DELIMITER, 2)
        name = get(parts[1], "") if len(parts) > 2 else ""
        out.append(line + SACCT_DELIMITER + (neutral_text(name) if name else ""))
    return out


def run_query(
    query: SacctQuery,
    *,
    window: Window,
    now: Optional[float] = None,
    filters: Optional[Filters] = None,
    timeout: Optional[float] = None,
    max_gpus: int = DEFAULT_MAX_GPUS,
    sink: Optional[Sink] = None,
    names: bool = False,
) -> Tuple[List[Attempt], ParseStats]:
    """Run sacct and parse its records (``sink``: see :func:`parse_rows`; ``names``: fetch the
    job names too, see :func:`live_lines`; a name filter always does)."""
    names = names or bool(filters and filters.names is not None)
    return parse_rows(
        live_lines(query, names=names, timeout=timeout),
        FIELDS,
        sep=SACCT_DELIMITER,
        window=window,
        now=now,
        filters=filters,
        max_gpus=max_gpus,
        sink=sink,
    )
