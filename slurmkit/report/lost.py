"""Lost GPU-hours: attempts whose GPU time produced nothing the user could keep.

An attempt is **lost** when its final state says the time was wasted by the system or
cut short before the job could finish:

=============================  ==============================================================
cause                          rule
=============================  ==============================================================
``NODE_FAIL``                  the attempt ended NODE_FAIL (a node died under it)
``PREEMPTED``                  the attempt ended PREEMPTED (a higher-priority job took it)
``REQUEUED``                   the attempt ended REQUEUED (``scontrol requeue``, a prolog
                               failure, a preemption with PreemptMode=REQUEUE); with
                               ``sacct -D`` every such earlier attempt has its own row
``TIMEOUT``                    the attempt hit its time limit
``FAILED_AFTER_PROLOG_REQUEUE`` the attempt ended FAILED and the previous attempt of the
                               same JobIDRaw was a prolog-failure requeue (below)
=============================  ==============================================================

A prolog-failure requeue is recognised from the data sacct keeps: an attempt that
ended ``REQUEUED`` and either ran for at most ``prolog_requeue_seconds`` (a prolog
failure ends the attempt before the user's program does any work) or whose
``Reason`` mentions ``launch_failed`` or ``Prolog``; or the FAILED attempt's own
``Reason`` mentions ``launch`` (sacct's Reason is the last reason the job waited for,
so the hold ``launch_failed_requeued_held`` lands on the attempt after the requeue).
Observed on 22.05: the REQUEUED row of a prolog failure kept the job's earlier
pending reason (``ReqNodeNotAvail``) and lasted 2 s, so the duration rule is the
one that fires in practice. The previous attempt must be in the same sacct output;
one that lies before the report window is not seen.

These rules are defined once, in :mod:`.rules` (the states, the duration limit and its
comparison, the Reason words, the order of a job's attempts), for this list path, the
streaming path and the DuckDB engine alike.

Health-log join ("suspect" GPU-hours): where slurmkit's health log is available
(``<paths.log_dir>/health.jsonl``, JSON lines written by :mod:`slurmkit.verdict.record`:
``node``, ``time`` (or ``timestamp``) in epoch seconds, ``status``, ``drain_reason``
``slurmkit:<CODE> <check>: ...``; or ``code``/``check`` keys), every record that
drained a node (see :func:`_is_drain`) marks the GPU-hours of every attempt
that ran on that node within ``N`` hours before the drain as *suspect*: the node was
probably already sick. A whole attempt counts (a multi-node job with one bad node is
usually lost entirely), once, however many drains touch it. Suspect hours are a
separate column and may overlap the lost ones.
"""

from __future__ import annotations

import glob
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

from slurmkit.report import rules
from slurmkit.report.sacct import Attempt
from slurmkit.slurm.drain import parse_reason
from slurmkit.slurm.parse import ParseError, expand_hostlist

log = logging.getLogger("slurmkit.report")

# (the rules are defined in slurmkit.report.rules; these names stay for the callers)
LOST_STATES = rules.LOST_STATES
PROLOG_CAUSE = rules.PROLOG_CAUSE
LOST_CAUSES = LOST_STATES + (PROLOG_CAUSE,)
DEFAULT_PROLOG_REQUEUE_SECONDS = rules.PROLOG_REQUEUE_SECONDS


def is_prolog_requeue(attempt: Attempt, max_seconds: float = DEFAULT_PROLOG_REQUEUE_SECONDS) -> bool:
    """Whether a REQUEUED attempt looks like a prolog (launch) failure
    (:func:`.rules.is_prolog_requeue`)."""
    return rules.is_prolog_requeue(
        attempt.state, attempt.reason, attempt.end - attempt.raw_start, max_seconds
    )


def reference_lost(
    attempts: Sequence[Attempt], prolog_requeue_seconds: float = DEFAULT_PROLOG_REQUEUE_SECONDS
) -> Dict[int, str]:
    """``{attempt index: cause}`` for every lost attempt: the list path, the reference the tests
    compare the streaming path and the DuckDB engine with (no report runs it)."""
    lost_states = rules.lost_states()
    state_i = Attempt._fields.index("state")
    jid_i = Attempt._fields.index("job_id_raw")
    lost: Dict[int, str] = {i: a[state_i] for i, a in enumerate(attempts) if a[state_i] in lost_states}
    requeued_jobs: Set[str] = {a[jid_i] for a in attempts if a[state_i] == rules.REQUEUED}
    if not requeued_jobs:
        return lost
    by_job: Dict[str, List[int]] = {}
    for i in [i for i, a in enumerate(attempts) if a[jid_i] in requeued_jobs]:
        by_job.setdefault(attempts[i][jid_i], []).append(i)
    for indices in by_job.values():
        indices.sort(key=lambda j: rules.order_key(attempts[j]))
        for prev, cur in zip(indices, indices[1:]):
            p, c = attempts[prev], attempts[cur]
            if rules.follows_prolog_requeue(
                p.state, p.reason, p.end - p.raw_start, c.state, c.reason, prolog_requeue_seconds
            ):
                lost[cur] = rules.PROLOG_CAUSE
    return lost


# --------------------------------------------------------------------------- health log


@dataclass
class DrainEvent:
    node: str
    timestamp: float
    code: str = ""
    check: str = ""


@dataclass
class HealthLog:
    path: str
    events: List[DrainEvent] = field(default_factory=list)
    records: int = 0
    bad_lines: int = 0


def _is_drain(rec: dict) -> bool:
    """A record that drained its node. slurmkit's hooks (slurmkit.hooks.gate) write a
    ``drain_reason`` whenever a check failed: the hook then drains the node itself or
    exits non-zero, which makes Slurm drain it. Other writers may say ``drained: true``
    or ``event: "drain"``; a record without any of these keys counts when its
    ``status`` is ``fail``."""
    if rec.get("drain_reason") or rec.get("drained") is True or rec.get("event") == "drain":
        return True
    return "drain_reason" not in rec and rec.get("status") == "fail"


def _event(rec: dict) -> DrainEvent:
    ts = rec.get("timestamp", rec.get("time"))
    code, check = str(rec.get("code", "")), str(rec.get("check", ""))
    parsed = parse_reason(rec.get("drain_reason"))
    if parsed and not code:
        code, check = parsed.code, parsed.check
    return DrainEvent(str(rec["node"]), float(ts), code, check)


def read_health_log(pattern: str) -> Optional[HealthLog]:
    """Read the drain events of slurmkit's health log (a path or a glob, so rotated
    files ``health.jsonl.1`` can be included). ``None`` when no file matches.
    Unreadable lines are counted and skipped: the log is an extra, not a requirement.
    """
    paths = (
        sorted(glob.glob(pattern))
        if any(c in pattern for c in "*?[")
        else ([pattern] if os.path.exists(pattern) else [])
    )
    if not paths:
        return None
    hl = HealthLog(path=pattern)
    for path in paths:
        try:
            fh = open(path, encoding="utf-8", errors="replace")
        except OSError as exc:
            log.warning("health log %s: %s", path, exc.strerror)
            continue
        with fh:
            for line in fh:
                if not line.strip():
                    continue
                hl.records += 1
                try:
                    rec = json.loads(line)
                    if not isinstance(rec, dict):
                        raise ValueError
                    if not _is_drain(rec):
                        continue
                    hl.events.append(_event(rec))
                except (ValueError, KeyError, TypeError):
                    hl.bad_lines += 1
    if hl.bad_lines:
        log.warning("health log %s: skipped %d unreadable line(s)", pattern, hl.bad_lines)
    return hl


class SuspectTest:
    """Whether one attempt ran on a node within ``hours`` before that node was drained:
    the per-attempt rule of :func:`reference_suspect`, usable while rows stream past (an
    attempt is tested alone; node lists are expanded once per distinct string)."""

    def __init__(self, events: Sequence[DrainEvent], hours: float):
        span = hours * 3600.0
        self.by_node: Dict[str, List[Tuple[float, float]]] = {}
        for ev in events:
            self.by_node.setdefault(ev.node, []).append((ev.timestamp - span, ev.timestamp))
        self.first = min((a for lst in self.by_node.values() for a, _ in lst), default=0.0)
        self.last = max((b for lst in self.by_node.values() for _, b in lst), default=-1.0)
        self.expanded: Dict[str, Tuple[str, ...]] = {}

    def __call__(self, a: Attempt) -> bool:
        if not self.by_node or a.end < self.first or a.raw_start > self.last:
            return False
        nodes = self.expanded.get(a.nodelist)
        if nodes is None:
            try:
                nodes = tuple(expand_hostlist(a.nodelist))
            except ParseError:
                nodes = ()
            self.expanded[a.nodelist] = nodes
        for node in nodes:
            windows = self.by_node.get(node)
            if windows and any(a.raw_start <= b and a.end >= lo for lo, b in windows):
                return True
        return False


def reference_suspect(attempts: Sequence[Attempt], events: Sequence[DrainEvent], hours: float) -> Set[int]:
    """Indices of attempts that ran on a node within ``hours`` before it was drained: the list
    path, the reference the tests compare the engines with (no report runs it)."""
    if not events:
        return set()
    test = SuspectTest(events, hours)
    return {i for i, a in enumerate(attempts) if test(a)}
