"""The report period: ``--since/--until``, ``--month YYYY-MM`` or ``--last 7d``.

Times are epoch seconds inside slurmkit. Dates typed by the user and the ISO times
sacct prints (``2026-11-29T13:43:58``, no zone) are **local time of the machine
running the report**, exactly as sacct itself interprets and prints them; set ``TZ``
to report in another zone (``TZ=UTC slurmkit report --month 2026-11``). Live sacct
calls use ``SLURM_TIME_FORMAT=%s`` so the rows carry epoch seconds and no zone
guessing happens on the way back.

A window is half-open: ``[start, end)``. ``--month 2026-11`` is
``[2026-11-01T00:00:00, 2026-12-01T00:00:00)`` local time.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Optional

from slurmkit.errors import UsageError

#: Window bounds used when reading a saved file without any period option:
#: nothing is clipped (these are far outside any real timestamp).
UNBOUNDED_START = 0
UNBOUNDED_END = 2**62


@dataclass(frozen=True)
class Window:
    """A half-open time window ``[start, end)`` in epoch seconds."""

    start: int
    end: int
    label: str

    @property
    def bounded(self) -> bool:
        return self.start > UNBOUNDED_START or self.end < UNBOUNDED_END

    @property
    def seconds(self) -> int:
        return self.end - self.start

    def to_dict(self) -> dict:
        return {
            "start": self.start if self.start > UNBOUNDED_START else None,
            "end": self.end if self.end < UNBOUNDED_END else None,
            "start_iso": iso_local(self.start) if self.start > UNBOUNDED_START else None,
            "end_iso": iso_local(self.end) if self.end < UNBOUNDED_END else None,
            "label": self.label,
        }


def iso_local(epoch: float) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` in local time: the form sacct's ``-S``/``-E`` accept."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


_ISO_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2}))?)?$")


def parse_when(text: str, option: str = "--since") -> int:
    """Epoch seconds from ``YYYY-MM-DD[THH:MM[:SS]]`` (local time), ``@EPOCH`` or
    plain epoch digits, or ``now``."""
    t = (text or "").strip()
    if t == "now":
        return int(time.time())
    if t.startswith("@"):
        t = t[1:]
    if t.isdigit() and len(t) >= 9:
        return int(t)
    m = _ISO_RE.match(t)
    if not m:
        raise UsageError(f"{option} {text!r}: expected YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS], @EPOCH or now")
    y, mo, d, hh, mi, ss = (int(g) if g else 0 for g in m.groups())
    if not (1 <= mo <= 12 and 1 <= d <= 31 and hh < 24 and mi < 60 and ss < 60):
        raise UsageError(f"{option} {text!r}: date or time out of range")
    return int(time.mktime((y, mo, d, hh, mi, ss, 0, 0, -1)))


_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str, option: str = "--last") -> int:
    """Seconds from ``90s``, ``30m``, ``12h``, ``7d`` or ``2w``."""
    m = _DURATION_RE.match((text or "").strip().lower())
    if not m:
        raise UsageError(f"{option} {text!r}: expected a number and a unit s, m, h, d or w (e.g. 7d, 12h)")
    seconds = int(float(m.group(1)) * _UNIT_SECONDS[m.group(2)])
    if seconds <= 0:
        raise UsageError(f"{option} {text!r}: must be longer than zero")
    return seconds


def month_window(text: str) -> Window:
    """``YYYY-MM`` → the whole calendar month in local time."""
    m = re.fullmatch(r"(\d{4})-(\d{1,2})", (text or "").strip())
    if not m or not 1 <= int(m.group(2)) <= 12:
        raise UsageError(f"--month {text!r}: expected YYYY-MM, e.g. 2026-11")
    y, mo = int(m.group(1)), int(m.group(2))
    start = int(time.mktime((y, mo, 1, 0, 0, 0, 0, 0, -1)))
    ny, nmo = (y + 1, 1) if mo == 12 else (y, mo + 1)
    end = int(time.mktime((ny, nmo, 1, 0, 0, 0, 0, 0, -1)))
    return Window(start, end, f"{y:04d}-{mo:02d}")


def resolve_window(
    *,
    since: Optional[str] = None,
    until: Optional[str] = None,
    month: Optional[str] = None,
    last: Optional[str] = None,
    now: Optional[float] = None,
    default_unbounded: bool = False,
) -> Window:
    """Turn the period options into a :class:`Window`.

    ``--month`` excludes the others; ``--last`` excludes ``--since`` and counts back
    from ``--until`` (default now). With no option at all the window is the current
    month up to now, or unbounded when ``default_unbounded`` (reading a saved file:
    the file's own selection is the window).
    """
    now_i = int(now if now is not None else time.time())
    if month:
        if since or until or last:
            raise UsageError("--month cannot be combined with --since, --until or --last")
        return month_window(month)
    if last:
        if since:
            raise UsageError("--last cannot be combined with --since (use --since/--until or --last)")
        end = parse_when(until, "--until") if until else now_i
        start = end - parse_duration(last)
        return Window(start, end, f"last {last}" + (f" until {until}" if until else ""))
    if since or until:
        start = parse_when(since, "--since") if since else (UNBOUNDED_START if default_unbounded else None)
        if start is None:
            lt = time.localtime(now_i)
            start = int(time.mktime((lt.tm_year, lt.tm_mon, 1, 0, 0, 0, 0, 0, -1)))
        end = (
            parse_when(until, "--until")
            if until
            else (UNBOUNDED_END if default_unbounded and not since else now_i)
        )
        if end <= start:
            raise UsageError(
                f"the window is empty: --until ({until or 'now'}) is not after --since ({since})"
            )
        label = (
            f"{iso_local(start) if start > UNBOUNDED_START else '-'} .. "
            f"{iso_local(end) if end < UNBOUNDED_END else '-'}"
        )
        return Window(start, end, label)
    if default_unbounded:
        return Window(UNBOUNDED_START, UNBOUNDED_END, "whole file")
    lt = time.localtime(now_i)
    start = int(time.mktime((lt.tm_year, lt.tm_mon, 1, 0, 0, 0, 0, 0, -1)))
    return Window(start, now_i, f"{lt.tm_year:04d}-{lt.tm_mon:02d} to date")
