"""The report period options (local time; the tests run with TZ=UTC)."""

from __future__ import annotations

import time

import pytest

from slurmkit.errors import UsageError
from slurmkit.report.window import UNBOUNDED_END, UNBOUNDED_START, parse_duration, parse_when, resolve_window

NOW = 1795964400  # 2026-11-29T15:00:00Z


def test_month():
    w = resolve_window(month="2026-11")
    assert (w.start, w.end) == (1793491200, 1796083200)  # 2026-11-01 .. 2026-12-01 UTC
    assert w.seconds == 30 * 86400 and w.label == "2026-11"
    dec = resolve_window(month="2026-12")
    assert dec.end == time.mktime((2027, 1, 1, 0, 0, 0, 0, 0, -1))


def test_last_counts_back_from_until_or_now():
    w = resolve_window(last="7d", now=NOW)
    assert (w.start, w.end) == (NOW - 7 * 86400, NOW)
    w2 = resolve_window(last="12h", until="2026-11-02")
    assert w2.end == 1793577600 and w2.seconds == 12 * 3600


def test_since_until_and_defaults():
    w = resolve_window(since="2026-11-02T10:30", until="@1793620000", now=NOW)
    assert w.start == 1793577600 + 10 * 3600 + 1800 and w.end == 1793620000
    assert resolve_window(since="2026-11-02", now=NOW).end == NOW
    this_month = resolve_window(now=NOW)
    assert this_month.start == 1793491200 and this_month.end == NOW
    whole = resolve_window(default_unbounded=True)
    assert (whole.start, whole.end) == (UNBOUNDED_START, UNBOUNDED_END) and not whole.bounded


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(month="2026-13"), "YYYY-MM"),
        (dict(month="11/2026"), "YYYY-MM"),
        (dict(month="2026-11", since="2026-11-01"), "cannot be combined"),
        (dict(last="7d", since="2026-11-01"), "cannot be combined"),
        (dict(last="0d"), "longer than zero"),
        (dict(last="week"), "unit s, m, h, d or w"),
        (dict(since="2026-11-31T25:00"), "out of range"),
        (dict(since="yesterday"), "expected YYYY-MM-DD"),
        (dict(since="2026-11-05", until="2026-11-05"), "window is empty"),
    ],
)
def test_bad_periods(kwargs, message):
    with pytest.raises(UsageError, match=message):
        resolve_window(now=NOW, **kwargs)


def test_duration_and_when_forms():
    assert (
        parse_duration("90s") == 90 and parse_duration("2w") == 14 * 86400 and parse_duration("1.5h") == 5400
    )
    assert parse_when("2026-11-01 00:00:00") == 1793491200 and parse_when("1793491200") == 1793491200
