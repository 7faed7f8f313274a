"""Slurm's job states, grouped the way slurmkit asks about them (one place for each set).

Names as squeue(1) and sacct(1) print them ("JOB STATE CODES",
https://slurm.schedmd.com/squeue.html#SECTION_JOB-STATE-CODES); sacct adds ``CANCELLED by
<uid>``, so callers compare the first word.
"""

from __future__ import annotations

from typing import FrozenSet

#: States in which Slurm still holds the job; any other is its end.
ACTIVE_STATES: FrozenSet[str] = frozenset(
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

#: States that end a job for good: nothing of it runs any more.
FINISHED_STATES: FrozenSet[str] = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "PREEMPTED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    }
)

#: States in which an attempt's processes may still be running (sacct's End is then
#: "Unknown", meaning "up to now").
RUNNING_STATES: FrozenSet[str] = frozenset(
    {"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING", "STAGE_OUT", "SIGNALING", "STOPPED"}
)

#: Final states of an attempt whose GPU time produced nothing the user could keep: the node
#: died under it, a higher-priority job took it, it was requeued (``sacct -D`` keeps the row
#: of each earlier attempt), or it hit its time limit (the report's lost GPU-hours,
#: slurmkit.report.rules).
LOST_STATES: FrozenSet[str] = frozenset({"NODE_FAIL", "PREEMPTED", "REQUEUED", "TIMEOUT"})
