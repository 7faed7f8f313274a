"""The streaming report: each attempt is aggregated the moment it is parsed, so memory
grows with the number of distinct jobs (a few dozen bytes each), not with the rows.

It gives exactly the answer of the list path (:func:`.sacct.parse_rows` into a list,
then :func:`.lost.reference_lost`, :func:`.lost.reference_suspect` and
:func:`.aggregate.reference_accumulate`), whose docstrings define every rule; only *when* each
rule is applied changes:

* What depends on one attempt alone is summed at once: GPU-seconds and their split by
  GPU type, node and period, cost, queue wait, hours by final state, suspect hours (a
  drain window test on the attempt's nodes and times) and the lost causes that are a
  final state (NODE_FAIL, PREEMPTED, REQUEUED, TIMEOUT).
* What depends on a job's other attempts is settled at the end, from one dict keyed by
  JobIDRaw that holds a compact record per attempt: an ``int`` packing the row's hash,
  the groups the attempt touched and its state (an index into a small interned table)
  and its Start and End; a REQUEUED or FAILED attempt keeps the attempt itself (the
  prolog rule needs its reason and the whole time order). Jobs with one attempt (most)
  need nothing more. For the jobs with several:

  - *distinct jobs*: each attempt counted once in every group it touched; a job whose
    attempts share a group is counted back down to one there (the total is the size of
    the dict);
  - *FAILED_AFTER_PROLOG_REQUEUE*: the rule of :func:`.lost.reference_lost` over the job's
    attempts in :func:`.rules.order_key`; an attempt that is neither REQUEUED nor FAILED
    only needs ``(Start, End, state)`` there (ties between two such attempts cannot
    change which FAILED attempt follows a REQUEUED one). A FAILED attempt that the
    rule marks has its GPU-seconds (already in its groups' hours) added to their lost
    hours, split exactly as when it was summed;
  - *exact duplicate rows*: a duplicate has the same JobIDRaw, so a row's hash is
    compared with those of the earlier attempts of its job only.

Sums of whole GPU-seconds are exact in any order. Where a split makes them fractional
(a node split over 3 nodes, scaled typed counts), the lost hours of a group that also
holds a prolog-marked attempt are added in another order than the list path's, which
may change the last bit of a float before the hours are rounded to 6 decimals.
"""

from __future__ import annotations

import operator
from typing import Any, Dict, List, Optional, Sequence, Tuple

from slurmkit.report import rules
from slurmkit.report.aggregate import FIELD_DIMS, TIME_DIMS, PeriodSplitter, _Acc, pieces_of
from slurmkit.report.cost import PriceTable
from slurmkit.report.lost import DrainEvent, SuspectTest
from slurmkit.report.sacct import Attempt

_M64 = (1 << 64) - 1
_M32 = (1 << 32) - 1
_M40 = (1 << 40) - 1
_I = {name: i for i, name in enumerate(Attempt._fields)}
_STATE, _RAW_START, _END = _I["state"], _I["raw_start"], _I["end"]


_SHARED = slice(_I["user"], _I["state"] + 1)  # the text fields that repeat across jobs
_new = tuple.__new__


def _record(a: Attempt, h: int, info: int, strings: Dict[str, str], keep: frozenset) -> Any:
    """One attempt's compact record: ``h | info << 64 | Start << 96 | End << 136`` (one
    ``int``), or ``(h, info, attempt)`` for the attempts whose state is in ``keep`` (the
    REQUEUED and FAILED ones, :data:`.rules.PROLOG_STATES`: the prolog rule reads them; and values
    that do not fit the packing), whose user, account, partition, node list, reason, name
    and state strings are shared through ``strings`` (each row split made new ones), and
    so are JobID and JobIDRaw when equal.
    Inlined in the sinks below."""
    rs = a[_RAW_START]
    if a[_STATE] in keep or rs > _M40 or info > _M32:
        shared = tuple(strings.setdefault(x, x) for x in a[_SHARED])
        ids = (a[1], a[1]) if a[0] == a[1] else a[:2]  # fields 0, 1: JobID is JobIDRaw but for array tasks
        return (h, info, _new(Attempt, ids + a[2 : _SHARED.start] + shared + a[_SHARED.stop :]))
    return h | info << 64 | (a[_END] << 40 | rs) << 96


def _hash_of(rec: Any) -> int:
    return rec & _M64 if type(rec) is int else rec[0]


def _is_dup(old: Any, h: int) -> bool:
    if type(old) is list:
        return any(_hash_of(r) == h for r in old)
    return _hash_of(old) == h


class _GroupAcc(_Acc):
    """A group of the split path; ``infos`` maps a final state to the record index of the
    attempts that touched this group only (the usual case: no interned tuple per attempt)."""

    __slots__ = ("infos",)

    def __init__(self) -> None:
        super().__init__()
        self.njobs = 0
        self.infos: Dict[str, int] = {}


class StreamingAggregator:
    """``add`` is the parser's sink (:func:`.sacct.parse_rows`); :meth:`result` gives the
    ``(groups, total)`` accumulators that :func:`.aggregate.reference_accumulate` would give for the
    same attempts with ``reference_lost`` and (when ``drains`` is not ``None``) ``reference_suspect``.
    """

    def __init__(
        self,
        by: Sequence[str],
        *,
        window_start: int = 0,
        prices: Optional[PriceTable] = None,
        prolog_requeue_seconds: float = rules.PROLOG_REQUEUE_SECONDS,
        drains: Optional[Sequence[DrainEvent]] = None,
        lost_window_hours: float = 6.0,
    ):
        self.by = list(by)
        self.lo = window_start
        self.priced = bool(prices and prices.enabled)
        self.prices = prices if self.priced else None
        self.prolog_requeue_seconds = prolog_requeue_seconds
        #: the rules, as they are when the report starts (:mod:`.rules`)
        self.keep = frozenset(rules.PROLOG_STATES)  # states whose attempts keep their whole record
        self.lost_states = rules.lost_states()
        self.wait_of = rules.queue_wait_fn(window_start)
        self.suspect = SuspectTest(drains, lost_window_hours) if drains else None
        #: JobIDRaw -> one record, or a list of records for a job with several attempts. JOB KEY:
        #: a decimal JobIDRaw without a leading zero is stored as an ``int`` (half the memory of
        #: the string); "07" and "0" stay strings, so distinct strings stay distinct keys.
        self.jobs: Dict[Any, Any] = {}
        self.multi: List[Any] = []  # keys of the jobs with several attempts
        self.strings: Dict[str, str] = {}  # shared text of the attempts kept whole
        #: ``(group keys touched, state)`` by index; records name them by index.
        self.infos: List[Tuple[Tuple[Tuple, ...], str]] = []
        self.split = any(d in ("gpu_type", "node") or d in TIME_DIMS for d in by)
        self.groups: Dict[Tuple, _Acc] = {}
        self.total: _Acc = _GroupAcc() if self.split else _Acc()  # one type: add_sums stays specialised
        self._done = False
        if self.split:
            self.add = self._split_adder()
        else:
            self.accs: Dict[Tuple, list] = {}
            self.add = self._fields_adder()

    # ------------------------------------------------------------------ per attempt

    def _store(self, k: Any, old: Any, a: Attempt, h: int, info: int) -> None:
        """Another attempt of job ``k`` (whose record(s) are ``old``)."""
        rec = _record(a, h, info, self.strings, self.keep)
        if type(old) is list:
            old.append(rec)
        else:
            self.jobs[k] = [old, rec]
            self.multi.append(k)

    def _fields_adder(self):
        """The sink for groupings by row fields only: sums per ``(dims..., state)`` key, as
        :func:`.aggregate._aggregate_fields` keeps them."""
        state_i, gpus_i, start_i, end_i = _I["state"], _I["gpus"], _I["start"], _I["end"]
        submit_i, raw_start_i, jid_i, types_i = (
            _I["submit"],
            _I["raw_start"],
            _I["job_id_raw"],
            _I["gpu_types"],
        )
        keyfn = operator.itemgetter(*[FIELD_DIMS[d] for d in self.by], state_i)
        if not self.by:
            keyfn = lambda a: (a[state_i],)  # noqa: E731  (itemgetter of one index returns a scalar)
        self._keyfn = keyfn
        accs, infos, jobs, test, store = (
            self.accs,
            self.infos,
            self.jobs,
            self.suspect,
            self._store,
        )
        prices = self.prices
        price_cache: Dict[Tuple[int, Tuple], float] = {}
        is_dup, keep, record, strings, wait_of = _is_dup, self.keep, _record, self.strings, self.wait_of

        def add(a: Attempt, row_hash: int) -> bool:
            j = a[jid_i]
            k = int(j) if j.isascii() and j.isdigit() and j[0] != "0" and len(j) < 19 else j  # JOB KEY
            h = row_hash & _M64
            old = jobs.get(k)
            if old is not None and is_dup(old, h):
                return False
            key = keyfn(a)
            acc = accs.get(key)
            if acc is None:
                acc = accs[key] = [0, 0.0, 0, 0, 0, 0, len(infos), len(infos) << 64]
                infos.append(((key[:-1],), key[-1]))
            secs = a[end_i] - a[start_i]
            gs = a[gpus_i] * secs
            acc[0] += gs
            if prices is not None:
                pk = (a[gpus_i], a[types_i])
                pg = price_cache.get(pk)
                if pg is None:
                    pg = price_cache[pk] = prices.priced_gpus(*pk)
                acc[1] += pg * secs
            acc[2] += 1
            w = wait_of(a[raw_start_i], a[submit_i])
            if w is not None:
                acc[3] += w
                acc[4] += 1
            if test is not None and test(a):
                acc[5] += gs
            if old is None:  # _record, inlined (acc[7] is acc[6] << 64)
                rs = a[raw_start_i]
                if key[-1] in keep or rs > _M40 or acc[6] > _M32:
                    jobs[k] = record(a, h, acc[6], strings, keep)
                else:
                    jobs[k] = h | acc[7] | (a[end_i] << 40 | rs) << 96
            else:
                store(k, old, a, h, acc[6])
            return True

        return add

    def _split_adder(self):
        """The sink for groupings that split an attempt (GPU type, node, period): the body
        of :func:`.aggregate._aggregate_split` for one attempt, without the job-id sets."""
        by, groups, total, prices, test = (
            self.by,
            self.groups,
            self.total,
            self.prices,
            self.suspect,
        )
        time_dim = next((d for d in by if d in TIME_DIMS), None)
        splitter = PeriodSplitter(time_dim) if time_dim else None
        pos = by.index(time_dim) if time_dim else 0
        nodes_cache: Dict[str, Tuple[str, ...]] = {}
        lost_states, wait_of = self.lost_states, self.wait_of
        infos, info_ids, jobs, store = self.infos, {}, self.jobs, self._store
        self._first_line: Dict[str, int] = {}  # each cause's first attempt: the list path's dict order
        first_line = self._first_line
        is_dup, keep, record, strings = _is_dup, self.keep, _record, self.strings
        raw_start_i, end_i = _RAW_START, _END
        # pieces_of reads only these fields: equal ones give equal pieces (a bounded cache)
        read = sorted(
            {FIELD_DIMS[d] for d in by if d in FIELD_DIMS}
            | {_I["gpus"]}
            | ({_I["gpu_types"]} if "gpu_type" in by or prices else set())
            | ({_I["nodelist"]} if "node" in by else set())
        )
        shape = operator.itemgetter(*read, *read)  # twice: always a tuple
        pieces_cache: Dict[Tuple, List[Tuple[Tuple, float, float]]] = {}

        def add(a: Attempt, row_hash: int) -> bool:
            j = a.job_id_raw
            k = int(j) if j.isascii() and j.isdigit() and j[0] != "0" and len(j) < 19 else j  # JOB KEY
            h = row_hash & _M64
            old = jobs.get(k)
            if old is not None and is_dup(old, h):
                return False
            st = a.state
            cause = st if st in lost_states else None
            sus = test is not None and test(a)
            secs_total = a.end - a.start
            tcost = (prices.priced_gpus(a.gpus, a.gpu_types) * secs_total) if prices else 0.0
            wait = wait_of(a.raw_start, a.submit)
            if cause is not None and cause not in total.lost_by_cause:
                first_line[cause] = a.line
            total.add_sums(a, a.gpus * secs_total, tcost, cause, sus, True, wait)
            sk = shape(a)
            pieces = pieces_cache.get(sk)
            if pieces is None:
                if len(pieces_cache) >= 100_000:
                    pieces_cache.clear()
                pieces = pieces_cache[sk] = pieces_of(a, by, prices, nodes_cache)
            if splitter is None:
                spans: Any = ((None, secs_total),)
            else:
                spans = splitter.split(a.start, a.end)
            if len(pieces) == 1 and len(spans) == 1:  # the usual attempt: one group
                key, g, p = pieces[0]
                label, secs = spans[0]
                if splitter is not None:
                    key = key[:pos] + (label,) + key[pos + 1 :]
                acc = groups.get(key)
                if acc is None:
                    acc = groups[key] = _GroupAcc()
                acc.add_sums(a, g * secs, p * secs, cause, sus, True, wait)
                acc.njobs += 1
                info = acc.infos.get(st)
                if info is None:
                    info = acc.infos[st] = len(infos)
                    infos.append(((key,), st))
            else:
                touched: Dict[Tuple, _Acc] = {}
                for n_period, (label, secs) in enumerate(spans):
                    for key, g, p in pieces:
                        if splitter is not None:
                            key = key[:pos] + (label,) + key[pos + 1 :]
                        acc = groups.get(key)
                        if acc is None:
                            acc = groups[key] = _GroupAcc()
                        acc.add_sums(a, g * secs, p * secs, cause, sus, n_period == 0, wait)
                        if key not in touched:
                            touched[key] = acc
                            acc.njobs += 1
                ik = (tuple(touched), st)
                info = info_ids.get(ik)
                if info is None:
                    info = info_ids[ik] = len(infos)
                    infos.append(ik)
            if old is None:  # _record, inlined
                rs = a[raw_start_i]
                if st in keep or rs > _M40 or info > _M32:
                    jobs[k] = record(a, h, info, strings, keep)
                else:
                    jobs[k] = h | info << 64 | (a[end_i] << 40 | rs) << 96
            else:
                store(k, old, a, h, info)
            return True

        self._splitter, self._pos, self._nodes_cache = splitter, pos, nodes_cache
        return add

    # ------------------------------------------------------------------ at the end

    def _records(self, k: Any) -> List[Tuple[int, int, int, Optional[Attempt]]]:
        """``(info, raw_start, end, attempt or None)`` of each attempt of job ``k``."""
        out = []
        for r in self.jobs[k]:
            if type(r) is int:
                out.append(((r >> 64) & _M32, (r >> 96) & _M40, r >> 136, None))
            else:
                a = r[2]
                out.append((r[1], a.raw_start, a.end, a))
        return out

    def _prolog_failed(self, recs: List[Tuple[int, int, int, Optional[Attempt]]]) -> List[Attempt]:
        """The FAILED attempts of one job that :func:`.lost.reference_lost` marks
        FAILED_AFTER_PROLOG_REQUEUE."""
        infos = self.infos
        keys = [
            rules.order_key(a) if a is not None else rules.order_key_partial(rs, end, infos[info][1])
            for info, rs, end, a in recs
        ]
        order = sorted(range(len(recs)), key=keys.__getitem__)
        out = []
        for prev, cur in zip(order, order[1:]):
            p, c = recs[prev][3], recs[cur][3]
            if (
                c is not None
                and p is not None
                and rules.follows_prolog_requeue(
                    p.state, p.reason, p.end - p.raw_start, c.state, c.reason, self.prolog_requeue_seconds
                )
            ):
                out.append(c)
        return out

    def result(self) -> Tuple[Dict[Tuple, _Acc], _Acc]:
        """The ``(groups, total)`` accumulators (call once, after the last row)."""
        if self._done:
            raise RuntimeError("StreamingAggregator.result() called twice")
        self._done = True
        infos = self.infos
        extra_jobs: Dict[Tuple, int] = {}  # group key -> attempts counted beyond the first of their job
        prolog: List[Attempt] = []
        for k in self.multi:
            recs = self._records(k)
            seen: Dict[Tuple, int] = {}
            for info, _, _, _ in recs:
                for key in infos[info][0]:
                    seen[key] = seen.get(key, 0) + 1
            for key, n in seen.items():
                if n > 1:
                    extra_jobs[key] = extra_jobs.get(key, 0) + n - 1
            states = {infos[r[0]][1] for r in recs}
            if rules.REQUEUED in states and rules.FAILED in states:
                prolog.extend(self._prolog_failed(recs))
        prolog.sort(key=lambda a: a.line)
        if self.split:
            self._finish_split(prolog)
        else:
            self._finish_fields(prolog)
        for key, n in extra_jobs.items():
            self.groups[key].njobs -= n
        self.total.njobs = len(self.jobs)
        return self.groups, self.total

    def _finish_fields(self, prolog: List[Attempt]) -> None:
        """Groups and totals from the ``(dims..., state)`` sums, in the order
        :func:`.aggregate._aggregate_fields` adds them."""
        groups, total = self.groups, self.total
        lost_states = self.lost_states
        for k, (gs, cost, n, wsum, wn, _sus, _info, _shifted) in self.accs.items():
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
        for k, (gs, _cost, _n, _wsum, _wn, sus, _info, _shifted) in self.accs.items():
            cause = k[-1]
            if cause in lost_states:
                for target in (groups[k[:-1]], total):
                    rules.add_lost(target, cause, gs)
            if sus:
                groups[k[:-1]].suspect += sus
                total.suspect += sus
        for a in prolog:
            gs = a.gpus * (a.end - a.start)
            for target in (groups[self._keyfn(a)[:-1]], total):
                rules.add_lost(target, rules.PROLOG_CAUSE, gs)

    def _finish_split(self, prolog: List[Attempt]) -> None:
        """Move the prolog-marked FAILED attempts' GPU-seconds into lost, piece by piece,
        and put the total's causes in the order the list path first meets them."""
        groups, total = self.groups, self.total
        splitter, pos, by = self._splitter, self._pos, self.by
        for a in prolog:
            secs_total = a.end - a.start
            gs = a.gpus * secs_total
            rules.add_lost(total, rules.PROLOG_CAUSE, gs)
            pieces = pieces_of(a, by, self.prices, self._nodes_cache)
            spans = [(None, secs_total)] if splitter is None else splitter.split(a.start, a.end)
            for label, secs in spans:
                for key, g, _p in pieces:
                    if splitter is not None:
                        key = key[:pos] + (label,) + key[pos + 1 :]
                    rules.add_lost(groups[key], rules.PROLOG_CAUSE, g * secs)
        if prolog:
            first = dict(self._first_line)
            first[rules.PROLOG_CAUSE] = prolog[0].line
            total.lost_by_cause = dict(sorted(total.lost_by_cause.items(), key=lambda kv: first[kv[0]]))
