"""The collective probe shared by the pre-flight, the heavy check and the sweep's pair test:
nccl-tests' busbw formula, the exact correctness sum, and one action per code."""

from __future__ import annotations

import math

import pytest

from slurmkit.health.checks import collective, heavy
from slurmkit.verdict.base import Action, Status


def test_busbw_matches_nccl_tests_definition():
    # NVIDIA/nccl-tests doc/PERFORMANCE.md: algbw = S/t, all_reduce busbw = algbw x 2(n-1)/n.
    assert collective.busbw_gbps(1e9, 0.004, 8) == pytest.approx(437.5)  # 250 GB/s x 7/4
    assert collective.busbw_gbps(1e9, 0.01, 2) == pytest.approx(100.0)  # 2(n-1)/n = 1
    assert collective.busbw_gbps(1e9, 0.01, 1) == 0.0  # one rank: no bus
    assert collective.algbw_gbps(2**30, 0.01) == pytest.approx(2**30 / 0.01 / 1e9)


@pytest.mark.parametrize("seconds", [0.0, -1.0, math.nan, math.inf])
def test_busbw_refuses_a_time_that_is_not_a_measurement(seconds):
    with pytest.raises(ValueError):
        collective.busbw_gbps(1e9, seconds, 8)


def test_busbw_refuses_no_ranks():
    with pytest.raises(ValueError):
        collective.busbw_gbps(1e9, 0.01, 0)


@pytest.mark.parametrize("ranks", [1, 2, 5, 7, 8, 15, 16, 17, 100, 4096, 1_000_000])
def test_expected_sum_is_exact_in_float32(ranks):
    expected = sum(r % collective.FILL_PERIOD + 1 for r in range(ranks))
    assert collective.expected_sum(ranks) == expected
    assert expected < 2**24  # every partial sum is an integer float32 holds exactly


def test_one_action_per_code_whichever_caller_judges():
    """The heavy check and the pair test used to disagree: ALLREDUCE_WRONG was isolate in
    one and none in the other, ALLREDUCE_BUSBW_LOW reset vs monitor."""
    heavy_wrong = heavy.judge_allreduce({"busbw_gbps": 470.0, "ranks": 8, "wrong": 3}, 480.0, 0.9)
    heavy_low = heavy.judge_allreduce({"busbw_gbps": 400.0, "ranks": 8}, 480.0, 0.9)
    heavy_ok = heavy.judge_allreduce({"busbw_gbps": 470.0, "ranks": 8}, 480.0, 0.9)
    pair_wrong = collective.judge("pair_allreduce_busbw", 40.0, wrong=1, floor=10.0, where=" between a and b")
    pair_low = collective.judge("pair_allreduce_busbw", 400.0, expected=460.0)  # 87 % of expected
    pair_floor = collective.judge("pair_allreduce_busbw", 9.0, floor=10.0)
    assert heavy_ok.status is Status.OK and heavy_ok.action is Action.NONE
    for r in (heavy_wrong, pair_wrong):
        assert (r.status, r.code, r.action) == (Status.FAIL, "ALLREDUCE_WRONG", Action.ISOLATE)
    for r in (heavy_low, pair_low, pair_floor):
        assert (r.status, r.code, r.action) == (Status.FAIL, "ALLREDUCE_BUSBW_LOW", Action.RESET)
    assert "90% of the expected 460 GB/s" in pair_low.reason
    assert pair_low.details["fraction_of_expected"] == pytest.approx(0.8696, abs=1e-4)
    assert pair_low.details["expected_gbps"] == 460.0  # the metrics' reference for the 90 % alert
    assert "between a and b" in pair_wrong.reason


def test_ninety_percent_rule_boundary():
    assert collective.judge("ar", 414.0, expected=460.0).status is Status.OK  # exactly 90 %
    assert collective.judge("ar", 413.9, expected=460.0).status is Status.FAIL
    assert collective.judge("ar", 5.0).status is Status.OK  # nothing to judge against: OK with the figure


def test_the_correctness_fill_survives_float32_where_powers_of_n_do_not():
    """Why the probe checks one sum of small integers instead of ``n ** (k + 1)`` after the
    timed loop: in float32, repeated sums of a healthy all_reduce drift from the power."""
    np = pytest.importorskip("numpy")

    def float32_sum(values):
        s = np.float32(0)
        for v in values:
            s = np.float32(s + np.float32(v))
        return s

    for ranks in range(2, 65):
        fill = [r % collective.FILL_PERIOD + 1 for r in range(ranks)]
        assert float32_sum(fill) == collective.expected_sum(ranks)
    x = np.float32(1)
    for _ in range(8 + 1):  # the old check: ones, 1 warm-up + 8 timed iterations, 7 ranks
        x = float32_sum([x] * 7)
    assert x != np.float32(7.0**9)
