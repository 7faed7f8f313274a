"""Draining a node, and slurmkit's drain reason: built, parsed and guarded in one place.

slurmkit's reason is ``slurmkit:<CODE> <check>: <detail>``: a machine-readable code, the
check that failed and one line of text. :func:`format_reason` builds it and
:func:`parse_reason` reads it back (the report reads it from the health log); both sit here
so that a change to one is a change to the other.

The one rule for draining (the prolog gate, the epilog, HealthCheckProgram and the
sweep all go through :func:`guarded_drain`): **a reason slurmkit did not write is never
overwritten.** When an admin drained a node ("disk swap"), that reason is why the node is
out of service, and only the admin may change it; slurmkit's own verdict still goes to its
log and metrics.
"""

from __future__ import annotations

import time

from slurmkit.chars import ASCII_LETTERS, DIGITS, keep_only

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Tuple

#: Every drain reason slurmkit writes starts with this; any other reason is someone else's.
DRAIN_REASON_PREFIX = "slurmkit:"

_CODE_CHARS = frozenset(ASCII_LETTERS + DIGITS + "_")
_NAME_CHARS = frozenset(ASCII_LETTERS + DIGITS + "_.-")
# re imported and this compiled on first use: every hook imports this module, few parse a reason
_REASON = r"^slurmkit:([A-Za-z0-9_]+) ([A-Za-z0-9_.-]+): ?(.*)$"


def safe_code(value: Any, default: str) -> str:
    """A machine-readable code: letters, digits and ``_`` only, at most 64; else ``default``."""
    text = keep_only(str(value or ""), _CODE_CHARS)[:64]
    return text or default


def safe_name(value: Any, default: str) -> str:
    """A check name: letters, digits, ``_``, ``.`` and ``-`` only, at most 64; else ``default``."""
    return keep_only(str(value or ""), _NAME_CHARS)[:64] or default


def safe_text(value: Any, limit: int = 400) -> str:
    """One line of printable ASCII: control characters, newlines and non-ASCII become spaces
    or ``?`` (a drain reason is shown by ``sinfo`` and parsed from ``scontrol -o``)."""
    text = "".join(
        ch if " " <= ch <= "~" else (" " if ch.isspace() else "?") for ch in str(value or "")[:limit]
    )
    return " ".join(text.split())


class DrainReason(tuple):
    """The fields of a slurmkit drain reason, ``(code, check, detail)``, by place or by name: a
    named tuple written out (``collections.namedtuple`` and ``typing.NamedTuple`` would import
    ``collections`` or ``typing`` on the hooks' path)."""

    __slots__ = ()

    def __new__(cls, code: str, check: str, detail: str) -> DrainReason:
        return tuple.__new__(cls, (code, check, detail))

    @property
    def code(self) -> str:
        return self[0]

    @property
    def check(self) -> str:
        return self[1]

    @property
    def detail(self) -> str:
        return self[2]

    def __repr__(self) -> str:
        return f"DrainReason(code={self[0]!r}, check={self[1]!r}, detail={self[2]!r})"


def format_reason(code: Any, check: Any, detail: Any) -> str:
    """``slurmkit:<CODE> <check>: <detail>``, sanitised (codes ``[A-Za-z0-9_]``, check names
    also ``.`` and ``-``, the detail printable ASCII on one line, 180 characters at most) so
    that no text that reached a result can forge fields in ``scontrol -o`` or ``sinfo`` output."""
    return (
        f"{DRAIN_REASON_PREFIX}{safe_code(code, 'UNKNOWN')} {safe_name(check, 'check')}: "
        f"{safe_text(detail)[:180]}"
    )


def parse_reason(reason: Any) -> Optional[DrainReason]:
    """The fields of a reason :func:`format_reason` built; ``None`` for any other text."""
    import re  # not at the top: a job start imports no re (slurmkit.chars)

    m = re.match(_REASON, str(reason or ""))
    return DrainReason(m.group(1), m.group(2), m.group(3)) if m else None


def is_slurmkit_reason(reason: Any) -> bool:
    """True when slurmkit wrote this drain reason (the only ones it may replace or resume)."""
    return str(reason or "").startswith(DRAIN_REASON_PREFIX)


def is_drained(state: str) -> bool:
    """``DRAIN``, ``DRAINED``, ``DRAINING``, ``IDLE+DRAIN`` ... (scontrol's and sinfo's spellings)."""
    return "DRAIN" in str(state or "").upper()


def node_drain(node: str, timeout: Optional[float] = None) -> Optional[Dict[str, str]]:
    """``{"state": ..., "reason": ...}`` from ``scontrol show node``; ``None`` when unknown."""
    # imported on use: formatting and parsing reasons (verdict.base, the report) starts no process
    from slurmkit.slurm import client

    try:
        rec = client.show_node(node, timeout=timeout)
    except Exception:
        return None
    if rec is None:
        return None
    reason = rec.get("Reason", "")
    return {"state": rec.get("State", ""), "reason": "" if reason == "(null)" else reason}


def guarded_drain(node: str, reason: str, timeout: Optional[float] = None) -> Tuple[bool, str]:
    """Drain ``node`` with ``reason`` unless someone else's drain is already there.

    Returns ``(drained_by_us, note)`` and never raises: a hook's exit code still drains
    the node (with Slurm's own reason) when this fails. ``timeout`` bounds both calls
    together (``None``: the site config's ``slurm.timeout`` for each).
    """
    start = time.monotonic()
    cur = node_drain(node, None if timeout is None else max(0.2, timeout / 2))
    if cur and is_drained(cur["state"]) and cur["reason"] and not is_slurmkit_reason(cur["reason"]):
        return False, f"already drained by someone else ({cur['reason']!r}); reason kept"
    from slurmkit.slurm import client

    left = None if timeout is None else max(0.2, timeout - (time.monotonic() - start))
    try:
        client.drain_node(node, reason, timeout=left)
    except Exception as exc:
        return False, f"scontrol drain failed: {exc}"
    return True, "drained"
