"""The types every health check, the prolog, the sweeps and the verdict store share.

A check returns a :class:`CheckResult`: a :class:`Status` (ok, warn, fail, unknown),
a stable machine-readable ``code`` (``GPU_ECC_DBE``, ``XID_79`` ...), a one-line
``reason``, an :class:`Action` (what an admin or automation should do) and an
optional numeric ``value`` (a probe measurement, used for fleet-relative outliers).
"""

from __future__ import annotations

import enum
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Optional

# DRAIN_REASON_PREFIX, safe_code and safe_text are re-exported: the checks import them here
# with the rest of the result vocabulary.
from slurmkit.slurm.drain import (  # noqa: F401
    DRAIN_REASON_PREFIX,
    format_reason,
    safe_code,
    safe_text,
)


class Status(str, enum.Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"

    @property
    def exit_code(self) -> int:
        """Nagios convention: 0 ok, 1 warn, 2 fail (critical), 3 unknown."""
        return {"ok": 0, "warn": 1, "fail": 2, "unknown": 3}[self.value]

    @property
    def severity(self) -> int:
        return {"ok": 0, "unknown": 1, "warn": 2, "fail": 3}[self.value]


class Action(str, enum.Enum):
    NONE = "none"
    MONITOR = "monitor"
    RESET = "reset"
    REBOOT = "reboot"
    ISOLATE = "isolate"

    @property
    def severity(self) -> int:
        return ["none", "monitor", "reset", "reboot", "isolate"].index(self.value)


class Tier(str, enum.Enum):
    FAST = "fast"  # prolog/epilog: well under a second for the whole tier
    HEAVY = "heavy"  # sweeps: minutes, needs the [train] extra (torch)


@dataclass
class CheckResult:
    check: str
    status: Status
    code: str = "OK"
    reason: str = ""
    action: Action = Action.NONE
    value: Optional[float] = None
    unit: str = ""
    details: Dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    timestamp: float = field(default_factory=time.time)

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        d["action"] = self.action.value
        return d

    def drain_reason(self) -> str:
        """The machine-readable Slurm drain reason, ``slurmkit:<CODE> <check>: <detail>``
        (built and sanitised by :func:`slurmkit.slurm.drain.format_reason`)."""
        return format_reason(self.code, self.check, self.reason)


def worst(results: Iterable[CheckResult]) -> Status:
    """The most severe status of ``results`` (fail > warn > unknown > ok); OK when empty.

    The one definition of a node's overall verdict: the hooks, ``slurmkit health run``,
    the sweep's pass, its metrics and its notifications all use it."""
    st = Status.OK
    for r in results:
        if r.status.severity > st.severity:
            st = r.status
    return st


def first_failure(results: List[CheckResult]) -> Optional[CheckResult]:
    """The failure whose reason a drain carries: the most severe action first, then the
    order the checks ran in (catalog order)."""
    fails = [r for r in results if r.status == Status.FAIL]
    if not fails:
        return None
    return max(fails, key=lambda r: (r.action.severity, -fails.index(r)))
