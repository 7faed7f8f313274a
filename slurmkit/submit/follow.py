"""Following a submitted job to its end: its state (squeue, then sacct), polling, the exit code.

``ssubmit --wait``, ``ssubmit status`` and ``ssubmit logs --follow`` are click commands over
these functions; a script can call :func:`wait_for_job` the same way (as submitit's
``Job.wait`` polls its watcher). All Slurm access goes through the typed client, so every
call has the client's timeout.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Dict, Iterator, Optional

from slurmkit.errors import WaitTimeout
from slurmkit.slurm import client
from slurmkit.slurm.states import ACTIVE_STATES

#: polls without any trace of the job (neither squeue nor sacct) before giving up: accounting
#: lags by seconds, not by ten polls
MAX_MISSING_POLLS = 10


def job_state(job_id: str) -> Dict[str, str]:
    """Current state: squeue while Slurm holds the job, else sacct's final record."""
    rows = client.jobs(job_ids=[job_id])
    if rows:
        row = rows[0]
        return {
            "state": row["state"],
            "nodes": row["nodelist"],
            "reason": row["reason"],
            "exit_code": "",
            "source": "squeue",
        }
    acct = client.sacct(["JobID", "State", "ExitCode", "NodeList"], ["-j", job_id, "-X"])
    acct = [r for r in acct if r["JobID"] == job_id] or acct
    if acct:
        r = acct[-1]
        return {
            "state": r["State"].split()[0] if r["State"] else "UNKNOWN",
            "nodes": r["NodeList"],
            "reason": "",
            "exit_code": r["ExitCode"],
            "source": "sacct",
        }
    return {"state": "UNKNOWN", "nodes": "", "reason": "", "exit_code": "", "source": "none"}


def exit_code_from(state: Dict[str, str]) -> int:
    """The exit status ``--wait`` returns for a finished job: its own exit code when COMPLETED,
    else that code, or 1 when Slurm recorded 0 (a cancelled or timed-out job did not succeed)."""
    code = 0
    ec = state.get("exit_code") or "0:0"
    try:
        code = int(ec.split(":")[0])
    except ValueError:
        code = 0
    if state["state"] == "COMPLETED":
        return code
    return code or 1


def describe(job_id: str, state: Dict[str, str]) -> str:
    """One line for a state change: ``ssubmit: job 12: RUNNING on node[1-2]``."""
    return (
        f"ssubmit: job {job_id}: {state['state']}"
        + (f" on {state['nodes']}" if state.get("nodes") and state["state"] == "RUNNING" else "")
        + (f" ({state['reason']})" if state.get("reason") not in ("", "None", None) else "")
    )


def wait_for_job(
    job_id: str, *, poll: float, timeout: float, on_change: Optional[Callable[[Dict[str, str]], None]] = None
) -> Dict[str, str]:
    """Follow a job (through requeues) until it leaves Slurm's queue; sacct gives the end.

    ``on_change`` is called with each new state. Raises :class:`WaitTimeout` after ``timeout``
    seconds; returns the ``source: none`` state when the job never shows up.
    """
    deadline = time.monotonic() + timeout
    last = None
    missing = 0
    while True:
        state = job_state(job_id)
        if state["state"] != last and on_change is not None:
            on_change(state)
        last = state["state"]
        if state["source"] == "sacct" and state["state"] not in ACTIVE_STATES:
            return state
        if state["source"] == "none":
            missing += 1
            if missing > MAX_MISSING_POLLS:
                return state
        if time.monotonic() > deadline:
            raise WaitTimeout(
                f"job {job_id} still {state['state']} after {timeout:g}s; it keeps running "
                f"(ssubmit status {job_id})"
            )
        time.sleep(poll)


def follow_log(path: str, job_id: str, *, poll: float) -> Iterator[str]:
    """Text appended to ``path`` from now on, until the job has left Slurm's queue (``tail -f``
    that stops with the job). What the job wrote between the last read and its end is read once
    more after the end is seen, so its last lines are not lost."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        fh.seek(0, os.SEEK_END)
        while True:
            chunk = fh.read()
            if chunk:
                yield chunk
            elif job_state(job_id)["state"] not in ACTIVE_STATES:
                last = fh.read()
                if last:
                    yield last
                return
            else:
                time.sleep(poll)
