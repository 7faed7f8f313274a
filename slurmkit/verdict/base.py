"""The types every health check, the prolog, the sweeps and the verdict store share.

A check returns a :class:`CheckResult`: a :class:`Status` (ok, warn, fail, unknown),
a stable machine-readable ``code`` (``GPU_ECC_DBE``, ``XID_79`` ...), a one-line
``reason``, an :class:`Action` (what an admin or automation should do) and an
optional numeric ``value`` (a probe measurement, used for fleet-relative outliers).
"""

from __future__ import annotations

import time

# DRAIN_REASON_PREFIX, safe_code and safe_text are re-exported: the checks import them here
# with the rest of the result vocabulary.
from slurmkit.slurm.drain import (  # noqa: F401
    DRAIN_REASON_PREFIX,
    format_reason,
    safe_code,
    safe_text,
)
from slurmkit.values import Value, Words

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Optional


class Status(Words):
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


class Action(Words):
    NONE = "none"
    MONITOR = "monitor"
    RESET = "reset"
    REBOOT = "reboot"
    ISOLATE = "isolate"

    @property
    def severity(self) -> int:
        return ["none", "monitor", "reset", "reboot", "isolate"].index(self.value)


class Tier(Words):
    FAST = "fast"  # prolog/epilog: well under a second for the whole tier
    HEAVY = "heavy"  # sweeps: minutes, needs the [train] extra (torch)


class CheckResult(Value):
    check: str
    status: Status
    code: str
    reason: str
    action: Action
    value: Optional[float]
    unit: str
    details: Dict[str, Any]
    seconds: float
    timestamp: float

    def __init__(
        self,
        check: str,
        status: Status,
        code: str = "OK",
        reason: str = "",
        action: Action = Action.NONE,
        value: Optional[float] = None,
        unit: str = "",
        details: Optional[Dict[str, Any]] = None,
        seconds: float = 0.0,
        timestamp: Optional[float] = None,
    ) -> None:
        self.check = check
        self.status = status
        self.code = code
        self.reason = reason
        self.action = action
        self.value = value
        self.unit = unit
        self.details = {} if details is None else details
        self.seconds = seconds
        self.timestamp = time.time() if timestamp is None else timestamp

    def to_dict(self) -> Dict[str, Any]:
        """Every field, in order, with the status and action as their strings; ``details`` is
        copied (nested dicts and lists too), so the dict can be changed without changing the result."""
        d = {f: getattr(self, f) for f in self._fields}
        d["details"] = _copy(self.details)
        d["status"] = self.status.value
        d["action"] = self.action.value
        return d

    def drain_reason(self) -> str:
        """The machine-readable Slurm drain reason, ``slurmkit:<CODE> <check>: <detail>``
        (built and sanitised by :func:`slurmkit.slurm.drain.format_reason`)."""
        return format_reason(self.code, self.check, self.reason)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v) for v in value)
    return value


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
