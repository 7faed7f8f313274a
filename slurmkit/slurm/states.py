"""Slurm's job states, as sets the readers of squeue and sacct share (squeue(1) and sacct(1),
"JOB STATE CODES": https://slurm.schedmd.com/squeue.html#SECTION_JOB-STATE-CODES)."""

from __future__ import annotations

from typing import FrozenSet

#: states in which Slurm still holds the job (it has not ended; its accounting may change)
ACTIVE_JOB_STATES: FrozenSet[str] = frozenset(
    {
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SUSPENDED",
        "STAGE_OUT",
        "SIGNALING",
        "STOPPED",
        "RESV_DEL_HOLD",
        "SPECIAL_EXIT",
    }
)
#: states of an attempt that started and may still hold its allocation: an ``Unknown`` End
#: means "up to now" (a pending, held or requeued-and-waiting job holds nothing)
ALLOCATED_JOB_STATES: FrozenSet[str] = frozenset(
    {"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING", "STAGE_OUT", "SIGNALING", "STOPPED"}
)
