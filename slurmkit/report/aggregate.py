"""Group attempts into report rows: GPU-hours, share, rank, jobs, queue wait, hours
by final state, lost and suspect hours, cost.

Groupings (``--by``, combinable, e.g. ``account,user``):

* ``user``, ``account``, ``partition``, ``state``: a field of the job row;
* ``gpu_type``: a job's GPU-hours are split by its typed AllocTRES
  (``gres/gpu:h100=4,gres/gpu:a100=4`` → 4 GPUs of each); untyped GPUs go to
  ``untyped``, jobs without GPUs to ``none``;
* ``node``: a multi-node job's GPU-hours are split **evenly** across the nodes of its
  NodeList. The job row does not say how many GPUs each node held; an even split is
  exact for the usual ``--gpus-per-node`` jobs and the best estimate otherwise;
* ``day``, ``week`` (ISO, ``2026-W48``), ``month``: a job's hours are split at local
  midnight (week: Monday 00:00; month: the 1st) so a job running 22:00-02:00 gives
  2 hours to each day. At most one of these per report.

Per group:

* ``gpu_hours`` = sum of GPUs x clipped seconds / 3600 (split as above);
* ``share_pct`` = 100 x gpu_hours / total; ``rank`` 1 = largest;
* ``jobs`` = distinct JobIDRaw (array tasks and het components are distinct);
  ``attempts`` counts every requeued run separately;
* ``mean_wait_s`` = mean of Start - Submit over attempts whose Start lies strictly
  inside the window (a start clipped by ``-T`` shows up as exactly the window start
  and hides the real wait; sacct resets Submit on
  requeue, so each attempt's wait is its own). Attributed to the period/group where
  the attempt started;
* ``gpu_hours_by_state`` keyed by the attempt's final state (``CANCELLED by 0`` →
  ``CANCELLED``); ``lost_gpu_hours`` and ``lost_by_cause`` (see :mod:`.lost`);
  ``suspect_gpu_hours`` when a health log was joined; ``cost`` when prices exist.

Totals are computed over the attempts directly, not by adding rows: ``jobs`` in the
totals counts each job once even when it appears in several groups.
"""

from __future__ import annotations

import operator
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from slurmkit.errors import UsageError
from slurmkit.report import rules
from slurmkit.report.cost import UNTYPED, PriceTable
from slurmkit.report.sacct import Attempt
from slurmkit.slurm.parse import ParseError, expand_hostlist

FIELD_DIMS = {
    "user": Attempt._fields.index("user"),
    "account": Attempt._fields.index("account"),
    "partition": Attempt._fields.index("partition"),
    "state": Attempt._fields.index("state"),
}
TIME_DIMS = ("day", "week", "month")
DIMENSIONS = ("user", "account", "partition", "state", "gpu_type", "node") + TIME_DIMS
NO_GPU = "none"


def parse_by(text: Optional[str]) -> List[str]:
    """``"account,user"`` → ``["account", "user"]``; validates names and duplicates."""
    if not text:
        return []
    dims = [d.strip().lower().replace("-", "_") for d in text.split(",") if d.strip()]
    aliases = {"gpu": "gpu_type", "gputype": "gpu_type", "type": "gpu_type", "nodes": "node"}
    dims = [aliases.get(d, d) for d in dims]
    for d in dims:
        if d not in DIMENSIONS:
            raise UsageError(f"--by {text!r}: unknown grouping {d!r}; valid: {', '.join(DIMENSIONS)}")
    if len(set(dims)) != len(dims):
        raise UsageError(f"--by {text!r}: a grouping is repeated")
    if sum(d in TIME_DIMS for d in dims) > 1:
        raise UsageError(f"--by {text!r}: use at most one of day, week, month")
    return dims


# --------------------------------------------------------------------------- time periods

_FORMATS = {"day": "%Y-%m-%d", "week": "%G-W%V", "month": "%Y-%m"}


class PeriodSplitter:
    """Splits ``[start, end)`` at local day/week/month boundaries, caching each
    period's bounds by its label (one ``mktime`` per period, not per job)."""

    def __init__(self, unit: str):
        self.unit = unit
        self.fmt = _FORMATS[unit]
        self._bounds: Dict[str, Tuple[int, int]] = {}
        self._buckets: Dict[int, Tuple[str, int, int]] = {}

    def period(self, t: int) -> Tuple[str, int, int]:
        # Every UTC offset in use is a multiple of 15 minutes, so local midnights fall
        # on multiples of 900 s and all instants of one 900-s bucket share a period.
        b = self._buckets.get(t // 900)
        if b is None:
            b = self._buckets[t // 900] = self._period(t)
        return b

    def _period(self, t: int) -> Tuple[str, int, int]:
        lt = time.localtime(t)
        label = time.strftime(self.fmt, lt)
        b = self._bounds.get(label)
        if b is None:
            y, m, d = lt.tm_year, lt.tm_mon, lt.tm_mday
            if self.unit == "day":
                b = (_mk(y, m, d), _mk(y, m, d + 1))
            elif self.unit == "week":
                b = (_mk(y, m, d - lt.tm_wday), _mk(y, m, d - lt.tm_wday + 7))
            else:
                b = (_mk(y, m, 1), _mk(y + (m == 12), 1 if m == 12 else m + 1, 1))
            self._bounds[label] = b
        return label, b[0], b[1]

    def split(self, start: int, end: int) -> List[Tuple[str, int]]:
        """``[(label, seconds), ...]`` covering ``[start, end)``; a zero-length
        attempt gives one zero-second piece in its period."""
        out = []
        t = start
        while True:
            label, _, stop = self.period(t)
            if end <= stop:
                out.append((label, end - t))
                return out
            out.append((label, stop - t))
            t = stop


def _mk(y: int, m: int, d: int) -> int:
    # mktime normalises day overflow (d = 32 → next month) and applies local DST.
    return int(time.mktime((y, m, d, 0, 0, 0, 0, 0, -1)))


# --------------------------------------------------------------------------- accumulators


class _Acc:
    __slots__ = (
        "gpu_seconds",
        "cost",
        "lost",
        "lost_by_cause",
        "suspect",
        "wait_sum",
        "wait_n",
        "jobs",
        "attempts",
        "by_state",
        "njobs",
    )

    def __init__(self) -> None:
        self.gpu_seconds = 0.0
        self.cost = 0.0
        self.lost = 0.0
        self.lost_by_cause: Dict[str, float] = {}
        self.suspect = 0.0
        self.wait_sum = 0
        self.wait_n = 0
        self.jobs: Set[str] = set()
        self.attempts = 0
        self.by_state: Dict[str, float] = {}
        self.njobs: Optional[int] = None  # set by the fast path instead of filling ``jobs``

    def add(
        self,
        a: Attempt,
        gpu_seconds: float,
        cost_seconds: float,
        cause: Optional[str],
        suspect: bool,
        count_wait: bool,
        wait: Optional[int],
    ) -> None:
        self.add_sums(a, gpu_seconds, cost_seconds, cause, suspect, count_wait, wait)
        self.jobs.add(a.job_id_raw)

    def add_sums(
        self,
        a: Attempt,
        gpu_seconds: float,
        cost_seconds: float,
        cause: Optional[str],
        suspect: bool,
        count_wait: bool,
        wait: Optional[int],
    ) -> None:
        """:meth:`add` without the set of job ids (the streaming path counts jobs itself).
        ``wait``: the attempt's queue wait (:func:`.rules.queue_wait`), counted with the
        attempt when ``count_wait``."""
        self.gpu_seconds += gpu_seconds
        self.cost += cost_seconds
        st = a.state
        self.by_state[st] = self.by_state.get(st, 0.0) + gpu_seconds
        if cause is not None:
            rules.add_lost(self, cause, gpu_seconds)
        if suspect:
            self.suspect += gpu_seconds
        if count_wait:
            self.attempts += 1
            if wait is not None:
                self.wait_sum += wait
                self.wait_n += 1


@dataclass
class Report:
    """The aggregated result, ready for rendering."""

    by: List[str]
    rows: List[Dict[str, Any]]
    totals: Dict[str, Any]
    states: List[str]
    causes: List[str]
    priced: bool
    health_joined: bool
    currency: str = "USD"
    meta: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {"meta": self.meta, "by": self.by, "rows": self.rows, "totals": self.totals}


#: whole seconds below this (5.5e11, 150 million GPU-hours) are rounded in integers by _hours
_EXACT_SECONDS = 1 << 39


def _hours(seconds: float) -> float:
    """``round(seconds / 3600, 6)``: the same float, twice as fast for whole seconds (a year's
    report by account and user rounds ~55,000 values). For whole ``s`` with ``|s| <``
    :data:`_EXACT_SECONDS`, ``s / 3600`` is ``2500 s / 9`` millionths, a ninth away from a
    whole number and so never within 1/18 of a half, and the double that ``round`` rounds is
    within 2^-25 of it: both round to the same ``q`` millionths, and ``q / 1e6`` is the float
    nearest ``q`` millionths, which ``round`` returns. (0.0 keeps ``round``: -0.0 stays.)"""
    if type(seconds) is float and seconds and seconds.is_integer():
        seconds = int(seconds)
    if type(seconds) is int and -_EXACT_SECONDS < seconds < _EXACT_SECONDS:
        return (seconds * 5000 + 9) // 18 / 1e6
    return round(seconds / 3600.0, 6)


def _finish(acc: _Acc, total_seconds: float, priced: bool, health: bool) -> Dict[str, Any]:
    row: Dict[str, Any] = {
        "gpu_hours": _hours(acc.gpu_seconds),
        "share_pct": round(100.0 * acc.gpu_seconds / total_seconds, 3) if total_seconds else 0.0,
        "jobs": acc.njobs if acc.njobs is not None else len(acc.jobs),
        "attempts": acc.attempts,
        "mean_wait_s": round(acc.wait_sum / acc.wait_n, 1) if acc.wait_n else None,
        "lost_gpu_hours": _hours(acc.lost),
        "lost_by_cause": {k: _hours(v) for k, v in sorted(acc.lost_by_cause.items())},
        "gpu_hours_by_state": {k: _hours(v) for k, v in sorted(acc.by_state.items())},
    }
    if health:
        row["suspect_gpu_hours"] = _hours(acc.suspect)
    if priced:
        row["cost"] = round(acc.cost / 3600.0, 2)
    return row


def reference_aggregate(
    attempts: Sequence[Attempt],
    by: Sequence[str],
    *,
    window_start: int = 0,
    lost: Optional[Dict[int, str]] = None,
    suspect: Optional[Set[int]] = None,
    prices: Optional[PriceTable] = None,
) -> Report:
    """Group ``attempts`` by ``by`` (see the module docstring for the rules): the list path, the
    reference the tests compare the engines with (no report runs it)."""
    groups, total = reference_accumulate(
        attempts, by, window_start=window_start, lost=lost, suspect=suspect, prices=prices
    )
    return finish(
        groups,
        total,
        by,
        priced=bool(prices and prices.enabled),
        health=suspect is not None,
        currency=prices.currency if prices else "USD",
    )


def reference_accumulate(
    attempts: Sequence[Attempt],
    by: Sequence[str],
    *,
    window_start: int = 0,
    lost: Optional[Dict[int, str]] = None,
    suspect: Optional[Set[int]] = None,
    prices: Optional[PriceTable] = None,
) -> Tuple[Dict[Tuple, "_Acc"], "_Acc"]:
    """The per-group and total accumulators behind :func:`reference_aggregate`: the reference. Every
    field of an accumulator is a sum over attempts, so accumulators of attempts of disjoint
    sets of jobs add up. The streaming aggregator (:mod:`.stream`) and the DuckDB engine
    (:mod:`.engine`) build the same accumulators their own way; their tests compare them
    with these."""
    lost = lost or {}
    suspect = suspect or set()
    priced = bool(prices and prices.enabled)
    lo = window_start
    groups: Dict[Tuple, _Acc] = {}
    total = _Acc()
    price_cache: Dict[Tuple[int, Tuple], float] = {}

    def priced_gpus(a: Attempt) -> float:
        key = (a.gpus, a.gpu_types)
        v = price_cache.get(key)
        if v is None:
            v = price_cache[key] = prices.priced_gpus(a.gpus, a.gpu_types) if priced else 0.0
        return v

    splitting = [d for d in by if d in ("gpu_type", "node") or d in TIME_DIMS]
    if not splitting:
        total = _aggregate_fields(attempts, by, groups, lost, suspect, priced_gpus if priced else None, lo)
    else:
        _aggregate_split(attempts, by, groups, total, lost, suspect, prices if priced else None, lo)
    return groups, total


def finish(
    groups: Dict[Tuple, _Acc],
    total: _Acc,
    by: Sequence[str],
    *,
    priced: bool,
    health: bool,
    currency: str = "USD",
) -> Report:
    """Rows, ranks and totals from accumulators."""
    total_seconds = total.gpu_seconds
    rows = []
    for key, acc in groups.items():
        row = dict(zip(by, key))
        row.update(_finish(acc, total_seconds, priced, health))
        rows.append(row)
    rows.sort(key=lambda r: (-r["gpu_hours"], tuple(str(r[d]) for d in by)))
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank
    if any(d in TIME_DIMS for d in by):  # a time series reads in time order; rank stays
        rows.sort(key=lambda r: tuple(str(r[d]) for d in by))
    totals = _finish(total, total_seconds, priced, health)
    totals["groups"] = len(rows)
    states = sorted(total.by_state, key=lambda s: -total.by_state[s])
    causes = sorted(total.lost_by_cause, key=lambda c: -total.lost_by_cause[c])
    return Report(list(by), rows, totals, states, causes, priced, health, currency)


_I = {name: i for i, name in enumerate(Attempt._fields)}


def _aggregate_fields(
    attempts: Sequence[Attempt],
    by: Sequence[str],
    groups: Dict[Tuple, _Acc],
    lost: Dict[int, str],
    suspect: Set[int],
    priced_gpus: Optional[Callable[[Attempt], float]],
    lo: int,
) -> _Acc:
    """The fast path for groupings by row fields only (each attempt in one group).

    One pass keyed by ``(dims..., state)`` with list accumulators; lost, suspect and
    duplicate-job bookkeeping run afterwards over the (few) attempts concerned, and
    the totals are the sum of the groups. This is what keeps a million-row report
    near awk speed.
    """
    state_i, gpus_i, start_i, end_i = _I["state"], _I["gpus"], _I["start"], _I["end"]
    submit_i, raw_start_i, jid_i = _I["submit"], _I["raw_start"], _I["job_id_raw"]
    keyfn = operator.itemgetter(*[FIELD_DIMS[d] for d in by], state_i)
    if len(by) == 0:
        keyfn = lambda a: (a[state_i],)  # noqa: E731  (itemgetter of one index returns a scalar)
    accs: Dict[Tuple, list] = defaultdict(lambda: [0, 0.0, 0, 0, 0])
    wait_of = rules.queue_wait_fn(lo)
    for a in attempts:
        acc = accs[keyfn(a)]
        secs = a[end_i] - a[start_i]
        acc[0] += a[gpus_i] * secs
        if priced_gpus is not None:
            acc[1] += priced_gpus(a) * secs
        acc[2] += 1
        w = wait_of(a[raw_start_i], a[submit_i])
        if w is not None:
            acc[3] += w
            acc[4] += 1
    seen: Set[str] = set()
    duplicated: Set[str] = set()
    for a in attempts:  # distinct jobs: one set, and the (few) jobs seen twice
        j = a[jid_i]
        if j in seen:
            duplicated.add(j)
        else:
            seen.add(j)
    total = _Acc()
    # groups from (dims, state) keys
    for k, (gs, cost, n, wsum, wn) in accs.items():
        gk = k[:-1]
        acc = groups.get(gk)
        if acc is None:
            acc = groups[gk] = _Acc()
            acc.njobs = 0
        for target in (acc, total):
            target.gpu_seconds += gs
            target.cost += cost
            target.by_state[k[-1]] = target.by_state.get(k[-1], 0.0) + gs
            target.attempts += n
            target.wait_sum += wsum
            target.wait_n += wn
        acc.njobs += n
    # a job with several attempts in one group counts once there
    if duplicated:
        per_job_n: Dict[Tuple[str, Tuple], int] = {}
        for a in attempts:
            if a[jid_i] in duplicated:
                gk = keyfn(a)[:-1]
                per_job_n[(a[jid_i], gk)] = per_job_n.get((a[jid_i], gk), 0) + 1
        for (_jid, gk), n in per_job_n.items():
            groups[gk].njobs -= n - 1
    total.njobs = len(seen)
    for i, cause in lost.items():
        a = attempts[i]
        gs = a[gpus_i] * (a[end_i] - a[start_i])
        for target in (groups[keyfn(a)[:-1]], total):
            rules.add_lost(target, cause, gs)
    for i in suspect:
        a = attempts[i]
        gs = a[gpus_i] * (a[end_i] - a[start_i])
        groups[keyfn(a)[:-1]].suspect += gs
        total.suspect += gs
    return total


def _nodes_of(nodelist: str, cache: Dict[str, Tuple[str, ...]]) -> Tuple[str, ...]:
    v = cache.get(nodelist)
    if v is None:
        try:
            v = tuple(expand_hostlist(nodelist)) if nodelist not in ("None assigned", "") else ()
        except ParseError:
            v = ()
        v = cache[nodelist] = v or ("(unknown)",)
    return v


def pieces_of(
    a: Attempt, by: Sequence[str], prices: Optional[PriceTable], nodes_cache: Dict[str, Tuple[str, ...]]
) -> List[Tuple[Tuple, float, float]]:
    """``[(group key, GPUs, priced GPUs)]`` of one attempt: its split by GPU type and
    node; the time dimension's slot holds ``None`` (the caller splits the time)."""
    pieces: List[Tuple[Tuple, float, float]] = [
        ((), float(a.gpus), prices.priced_gpus(a.gpus, a.gpu_types) if prices else 0.0)
    ]
    for d in by:
        if d in FIELD_DIMS:
            v = a[FIELD_DIMS[d]]
            pieces = [(k + (v,), g, p) for k, g, p in pieces]
        elif d == "gpu_type":
            split = _type_split(a)
            pieces = [
                (
                    k + (t,),
                    float(n) * (g / a.gpus if a.gpus else 1.0),
                    (n * (prices.price(t) if prices else 0.0)) * (g / a.gpus if a.gpus else 1.0),
                )
                for k, g, p in pieces
                for t, n in split
            ]
        elif d == "node":
            ns = _nodes_of(a.nodelist, nodes_cache)
            share = 1.0 / len(ns)
            pieces = [(k + (n,), g * share, p * share) for k, g, p in pieces for n in ns]
        else:  # time dimension: placeholder
            pieces = [(k + (None,), g, p) for k, g, p in pieces]
    return pieces


def _aggregate_split(
    attempts: Sequence[Attempt],
    by: Sequence[str],
    groups: Dict[Tuple, _Acc],
    total: _Acc,
    lost: Dict[int, str],
    suspect: Set[int],
    prices: Optional[PriceTable],
    lo: int,
) -> None:
    """The general path: each attempt becomes pieces (GPU type x node x period)."""
    time_dim = next((d for d in by if d in TIME_DIMS), None)
    splitter = PeriodSplitter(time_dim) if time_dim else None
    nodes_cache: Dict[str, Tuple[str, ...]] = {}
    pos = by.index(time_dim) if time_dim else 0
    wait_of = rules.queue_wait_fn(lo)

    for i, a in enumerate(attempts):
        cause = lost.get(i)
        sus = i in suspect
        secs_total = a.end - a.start
        wait = wait_of(a.raw_start, a.submit)
        # totals: whole attempt, once
        tcost = (prices.priced_gpus(a.gpus, a.gpu_types) * secs_total) if prices else 0.0
        total.add(a, a.gpus * secs_total, tcost, cause, sus, True, wait)
        pieces = pieces_of(a, by, prices, nodes_cache)
        if splitter is None:
            for key, g, p in pieces:
                acc = groups.get(key)
                if acc is None:
                    acc = groups[key] = _Acc()
                acc.add(a, g * secs_total, p * secs_total, cause, sus, True, wait)
        else:
            for n_period, (label, secs) in enumerate(splitter.split(a.start, a.end)):
                for key, g, p in pieces:
                    key = key[:pos] + (label,) + key[pos + 1 :]
                    acc = groups.get(key)
                    if acc is None:
                        acc = groups[key] = _Acc()
                    acc.add(a, g * secs, p * secs, cause, sus, n_period == 0, wait)


def _type_split(a: Attempt) -> List[Tuple[str, float]]:
    """GPUs per type for one attempt, summing to ``a.gpus`` (gres/gpu is the total;
    typed counts that exceed it are scaled down, a shortfall is ``untyped``)."""
    if not a.gpus:
        return [(NO_GPU, 0)]
    out: List[Tuple[str, float]] = list(a.gpu_types)
    typed = sum(n for _, n in out)
    if typed > a.gpus:
        return [(t, n * a.gpus / typed) for t, n in out]
    if a.gpus > typed:
        out.append((UNTYPED, a.gpus - typed))
    return out
