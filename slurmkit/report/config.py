"""The ``report`` section of ``slurmkit.yaml``: prices, lost-hour rules, health log.

Validated at load like every section: an unknown key fails with the list of valid
keys, file and line. Imports nothing heavy.
"""

from __future__ import annotations

from typing import Any, Optional

from slurmkit.core.schema import Field, Section
from slurmkit.report.aggregate import DIMENSIONS
from slurmkit.report.rules import PROLOG_REQUEUE_SECONDS


def _check_by(value: Any) -> Optional[str]:
    for d in str(value or "").split(","):
        if d.strip() and d.strip() not in DIMENSIONS:
            return f"unknown grouping {d.strip()!r}; valid: {', '.join(DIMENSIONS)}"
    return None


SITE_SCHEMA = Section(
    {
        "prices": Field(
            "dict",
            {},
            "Price per GPU-hour by GPU type (the type in gres/gpu:<type>); the key "
            "'default' prices untyped GPUs and types not listed. Empty: no cost column unless "
            "--price is given.",
            items=Field("float", None, "price per GPU-hour", min=0, nullable=False),
            nullable=False,
            examples=[{"h100": 2.5, "a100": 1.2, "default": 2.0}],
        ),
        "currency": Field("str", "USD", "Currency label printed next to costs.", nullable=False),
        "default_by": Field(
            "str",
            "user",
            "Grouping when --by is not given (comma-separated).",
            nullable=False,
            check=_check_by,
        ),
        "lost_window_hours": Field(
            "float",
            6.0,
            "Health-log join: GPU-hours of jobs that ran on a node within "
            "this many hours before slurmkit drained it count as suspect.",
            min=0,
            nullable=False,
        ),
        "health_log": Field(
            "str",
            None,
            "slurmkit's health log (JSON lines of verdicts; a glob such as "
            "'/var/log/slurmkit/health.jsonl*' includes rotated files). "
            "null: <paths.log_dir>/health.jsonl. Missing file: the join is skipped.",
        ),
        "prolog_requeue_seconds": Field(
            "float",
            PROLOG_REQUEUE_SECONDS,
            "A REQUEUED attempt this short (or whose Reason names "
            "launch_failed/Prolog) counts as a prolog-failure requeue; a FAILED "
            "attempt right after it counts as lost.",
            min=0,
            nullable=False,
        ),
        "sacct_timeout": Field(
            "float",
            600.0,
            "Seconds before the report's sacct call is killed (a month of a busy cluster takes a while).",
            min=1,
            nullable=False,
        ),
        "max_gpus": Field(
            "int",
            100_000,
            "A job row with more GPUs than this cannot be true (set it to the "
            "cluster's GPU count): it is excluded and reported with its line number, like a "
            "malformed row.",
            min=1,
            nullable=False,
        ),
        "plot_top": Field(
            "int", 20, "Bars in --plot charts (the rest are summed into 'other').", min=1, nullable=False
        ),
    },
    "slurmkit report: GPU-hour usage, cost and lost hours from sacct.",
)
