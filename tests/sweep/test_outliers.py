"""Fleet-relative outliers: median/MAD of peers per GPU model, no baseline file."""

from __future__ import annotations

import statistics
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkit.sweep.outliers import judge, median_mad
from slurmkit.verdict.base import Status


def doc(model, **values):
    now = time.time()
    return {
        "meta": {"gpu_model": model},
        "history": {check: [[now - 60, v, "r"]] for check, v in values.items()},
    }


def judge_default(node, docs, **kw):
    opts = dict(now=time.time(), k=3.0, window_s=86400, min_peers=3, mad_floor_fraction=0.02)
    opts.update(kw)
    return {r.check: r for r in judge(node, docs, **opts)}


def fleet(slow_value=280.0, n=6):
    docs = {f"node{i}": doc("h100", nvlink_bandwidth=400.0 + (i % 3)) for i in range(1, n)}
    docs["slow"] = doc("h100", nvlink_bandwidth=slow_value)
    return docs


def test_node_30_percent_under_peers_is_flagged():
    r = judge_default("slow", fleet(400 * 0.7))["outlier.nvlink_bandwidth"]
    assert r.status is Status.WARN and r.code == "OUTLIER_NVLINK_BANDWIDTH"
    assert r.details["peers"] == 5 and r.details["median"] == 401.0
    assert "below the median" in r.reason and "-30%" in r.reason


def test_drain_action_makes_it_a_fail():
    r = judge_default("slow", fleet(), action="drain")["outlier.nvlink_bandwidth"]
    assert r.status is Status.FAIL and r.action.value == "isolate"


def test_peers_are_not_outliers_and_faster_is_fine():
    docs = fleet()
    assert judge_default("node1", docs)["outlier.nvlink_bandwidth"].status is Status.OK
    docs["fast"] = doc("h100", nvlink_bandwidth=600.0)
    assert judge_default("fast", docs)["outlier.nvlink_bandwidth"].status is Status.OK


def test_lower_is_better_flags_high_values():
    docs = {f"n{i}": doc("h100", latency_us=10.0 + i * 0.1) for i in range(5)}
    docs["laggy"] = doc("h100", latency_us=20.0)
    r = judge_default("laggy", docs, lower_is_better=["latency_us"])["outlier.latency_us"]
    assert r.status is Status.WARN and "above" in r.reason


def test_other_gpu_models_are_not_peers():
    docs = fleet()
    docs.update({f"a{i}": doc("a100", nvlink_bandwidth=200.0) for i in range(10)})
    r = judge_default("slow", docs)["outlier.nvlink_bandwidth"]
    assert r.details["peers"] == 5 and r.status is Status.WARN


def test_too_few_peers_is_unknown_not_ok():
    docs = {"a": doc("h100", bw=100.0), "b": doc("h100", bw=50.0)}
    r = judge_default("b", docs)["outlier.bw"]
    assert r.status is Status.UNKNOWN and r.code == "OUTLIER_FEW_PEERS"


def test_two_node_fleet_with_min_peers_one_flags_only_the_slow_node():
    docs = {"a": doc("h100", bw=100.0), "b": doc("h100", bw=70.0)}
    assert judge_default("b", docs, min_peers=1)["outlier.bw"].status is Status.WARN
    assert judge_default("a", docs, min_peers=1)["outlier.bw"].status is Status.OK


def test_mad_floor_keeps_identical_peers_from_flagging_noise():
    docs = {f"n{i}": doc("h100", bw=100.0) for i in range(5)}
    docs["x"] = doc("h100", bw=99.0)  # 1% under identical peers: within 3 x 2%
    assert judge_default("x", docs)["outlier.bw"].status is Status.OK
    docs["x"] = doc("h100", bw=90.0)
    assert judge_default("x", docs)["outlier.bw"].status is Status.WARN


def test_old_passes_do_not_count():
    docs = fleet()
    old = time.time() - 30 * 86400
    for name in ("node1", "node2", "node3"):
        docs[name]["history"]["nvlink_bandwidth"][0][0] = old
    r = judge_default("slow", docs)["outlier.nvlink_bandwidth"]
    assert r.status is Status.UNKNOWN and r.details["peers"] == 2


def test_median_mad():
    assert median_mad([1, 2, 3, 4, 100]) == (3, 1)
    assert median_mad([5, 5, 5], 0.1) == (5, 0.5)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(1.0, 1000.0), min_size=3, max_size=12), st.floats(0.0, 1.0))
def test_a_node_at_or_above_its_peers_median_is_never_flagged(peers, above):
    docs = {f"p{i}": doc("h100", bw=v) for i, v in enumerate(peers)}
    med = statistics.median(peers)
    docs["me"] = doc("h100", bw=med * (1 + above))
    r = judge_default("me", docs)["outlier.bw"]
    assert r.status is Status.OK


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(100.0, 1000.0), min_size=3, max_size=12))
def test_a_node_far_below_tight_peers_is_always_flagged(peers):
    spread = list(peers)
    med = statistics.median(spread)
    docs = {f"p{i}": doc("h100", bw=v) for i, v in enumerate(spread)}
    mad = statistics.median(abs(v - med) for v in spread)
    docs["me"] = doc("h100", bw=med - 3.5 * max(mad, 0.02 * med) - 1e-6)
    assert judge_default("me", docs)["outlier.bw"].status is Status.WARN
