"""Which idle nodes the next sweep run checks. A pure function: no Slurm, no files.

The rule
--------
1. Candidates are nodes whose Slurm state is exactly ``idle`` (not ``mixed``,
   ``allocated``, ``drained``, ``draining``, ``down``, ``idle~`` powered off, ``idle*``
   not responding, ``reserved`` ...): a sweep job must take a whole node that nobody
   is using, and must never hold up a node an admin or the health gate took out.
2. A node that already has a sweep job queued or running is skipped.
3. A node whose last complete pass is younger than ``min_interval_s`` is skipped.
4. The rest are ordered: first nodes whose last pass *failed* and that are idle again
   (an admin repaired and resumed them; their failing verdict would otherwise stay
   valid and the prolog would keep reporting it), then never-checked nodes, then
   oldest pass first; ties by name, so the plan is deterministic. Rule 3 does not
   apply to the re-validation of a failed node.
5. Up to ``min(max_nodes, max_concurrent - sweep jobs already queued or running)`` are
   taken.

Coverage guarantee
------------------
Call ``N`` the nodes in the sweep partition, ``I`` the cron interval, ``P`` the period
and ``K`` the nodes per run. Because every run takes the ``K`` *oldest* candidates,
a node waits behind at most ``N - 1`` others, so a node that is idle whenever it
reaches the head of the queue gets a pass within ``ceil(N / K)`` runs, i.e. within
``ceil(N / K) * I``. The period is therefore met when ``K >= ceil(N * I / P)``
(:func:`required_per_run`); :func:`plan` reports that figure and whether the
configuration meets it. What no planner can guarantee is a pass on a node that is
never idle (always running real jobs); those show up as ``overdue`` in the plan and
in ``slurmkit sweep status``, and the stale-sweep alert fires for them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set

from slurmkit.slurm.parse import gpus_from_gres
from slurmkit.slurm.states import FINISHED_STATES

ELIGIBLE_STATES = frozenset({"idle"})


@dataclass
class Candidate:
    node: str
    last_pass: Optional[float]
    age_s: Optional[float]  # None: never checked
    overdue: bool
    gres: str = ""
    revalidate: bool = False  # its last pass failed; it is idle again


@dataclass
class Plan:
    """The result of :func:`plan`; ``selected`` is what the sweep submits."""

    now: float
    selected: List[Candidate]
    slots: int
    running: int
    total_nodes: int
    idle_nodes: int
    skipped: Dict[str, int] = field(default_factory=dict)
    overdue: List[str] = field(default_factory=list)
    never_checked: int = 0
    required_per_run: int = 0
    meets_period: bool = True

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["selected"] = [asdict(c) for c in self.selected]
        return d


def required_per_run(total_nodes: int, cron_interval_s: float, period_s: float) -> int:
    """The ``K`` that covers ``total_nodes`` within ``period_s`` at one run per interval."""
    if total_nodes <= 0:
        return 0
    runs = max(1, math.floor(period_s / cron_interval_s))
    return math.ceil(total_nodes / runs)


def _base_state(state: str) -> str:
    return state.strip().lower()


def plan(
    nodes: Iterable[Mapping[str, str]],
    last_pass: Mapping[str, Optional[float]],
    running: Iterable[str],
    now: float,
    *,
    max_nodes: int,
    max_concurrent: int,
    period_s: float,
    min_interval_s: float = 0.0,
    cron_interval_s: float = 4 * 3600.0,
    running_jobs: Optional[int] = None,
    revalidate: Iterable[str] = (),
) -> Plan:
    """Plan one sweep run.

    ``nodes``: sinfo rows (``name``, ``state``, optionally ``gres``), possibly one per
    partition; ``last_pass``: node -> time of its last complete pass (missing or
    ``None``: never); ``running``: nodes with a sweep job queued or running;
    ``running_jobs``: how many sweep jobs are queued or running (defaults to the
    number of distinct ``running`` nodes); ``revalidate``: nodes whose last pass
    failed.
    """
    failed = set(revalidate)
    states: Dict[str, str] = {}
    gres: Dict[str, str] = {}
    for row in nodes:
        name = row["name"]
        state = _base_state(row.get("state", ""))
        # A node listed in several partitions has the same state in each; keep the first.
        if name not in states:
            states[name] = state
            gres[name] = row.get("gres", "") or ""
    busy: Set[str] = set(running)
    n_running = len(busy) if running_jobs is None else running_jobs
    slots = max(0, min(max_nodes, max_concurrent - n_running))

    skipped = {"not_idle": 0, "sweep_running": 0, "recent_pass": 0}
    overdue: List[str] = []
    never = 0
    keyed: List[tuple] = []
    idle = 0
    for name, state in states.items():
        lp = last_pass.get(name)
        age = None if lp is None else now - lp
        is_overdue = age is None or age > period_s
        if lp is None:
            never += 1
        if is_overdue:
            overdue.append(name)
        if state not in ELIGIBLE_STATES:
            skipped["not_idle"] += 1
            continue
        idle += 1
        if name in busy:
            skipped["sweep_running"] += 1
            continue
        again = name in failed and lp is not None
        if age is not None and age < min_interval_s and not again:
            skipped["recent_pass"] += 1
            continue
        # failed-and-idle-again first (0), never-checked (1), then oldest pass first, then by name
        rank = 0 if again else (1 if lp is None else 2)
        keyed.append((rank, lp or 0.0, name, age, is_overdue))

    if slots and keyed:
        import heapq

        chosen = heapq.nsmallest(slots, keyed) if slots < len(keyed) else sorted(keyed)
    else:
        chosen = []
    selected = [
        Candidate(
            node=k[2],
            last_pass=(None if k[0] == 1 else k[1]),
            age_s=k[3],
            overdue=k[4],
            gres=gres.get(k[2], ""),
            revalidate=k[0] == 0,
        )
        for k in chosen
    ]
    need = required_per_run(len(states), cron_interval_s, period_s)
    overdue.sort()
    return Plan(
        now=now,
        selected=selected,
        slots=slots,
        running=n_running,
        total_nodes=len(states),
        idle_nodes=idle,
        skipped=skipped,
        overdue=overdue,
        never_checked=never,
        required_per_run=need,
        meets_period=max_nodes >= need,
    )


def gpu_model_from_gres(gres: str) -> Optional[str]:
    """``gpu:h100:8(S:0-1)`` -> ``h100``; ``gpu:8`` or no GPU -> ``None``."""
    return next((t.lower() for t in gpus_from_gres(gres) if t), None)


def sweep_job_nodes(job_rows: Sequence[Mapping[str, str]], prefix: str) -> Dict[str, str]:
    """``{node: job_id}`` for queued or running sweep jobs, found by their name
    ``<prefix>.<node>``, or ``<prefix>.<a>+<b>`` for a pairwise job (the name is set at
    submit time, so pending jobs count too)."""
    out: Dict[str, str] = {}
    head = prefix + "."
    for row in job_rows:
        name = row.get("name", "")
        if name.startswith(head) and row.get("state", "").upper() not in FINISHED_STATES:
            for node in name[len(head) :].split("+"):
                if node:
                    out[node] = row.get("job_id", "")
    return out
