"""The sweep planner: a pure function, so every rule is tested without Slurm."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkit.sweep.planner import gpu_model_from_gres, plan, required_per_run, sweep_job_nodes

DAY = 86400.0


def rows(states):
    return [{"name": n, "state": s, "gres": "gpu:h100:8"} for n, s in states.items()]


def test_only_plain_idle_nodes_are_candidates():
    states = {
        "a": "idle",
        "b": "mixed",
        "c": "allocated",
        "d": "drained",
        "e": "draining",
        "f": "idle~",
        "g": "idle*",
        "h": "down",
        "i": "reserved",
        "j": "IDLE",
    }
    p = plan(rows(states), {}, [], 1000.0, max_nodes=10, max_concurrent=10, period_s=7 * DAY)
    assert sorted(c.node for c in p.selected) == ["a", "j"]
    assert p.skipped["not_idle"] == 8 and p.idle_nodes == 2


def test_never_checked_first_then_oldest_pass():
    now = 100 * DAY
    last = {"a": now - 2 * DAY, "b": now - 9 * DAY, "c": None, "d": now - 3 * DAY}
    p = plan(
        rows({n: "idle" for n in "abcde"}), last, [], now, max_nodes=4, max_concurrent=10, period_s=7 * DAY
    )
    assert [c.node for c in p.selected] == ["c", "e", "b", "d"]
    assert [c.overdue for c in p.selected] == [True, True, True, False]
    assert p.never_checked == 2 and p.overdue == ["b", "c", "e"]


def test_concurrency_cap_counts_queued_and_running_sweeps():
    now = 10 * DAY
    p = plan(
        rows({n: "idle" for n in "abcdef"}),
        {},
        ["a", "b"],
        now,
        max_nodes=5,
        max_concurrent=4,
        period_s=7 * DAY,
    )
    assert p.slots == 2 and p.running == 2
    assert [c.node for c in p.selected] == ["c", "d"]
    assert p.skipped["sweep_running"] == 2
    full = plan(rows({"x": "idle"}), {}, [], now, max_nodes=5, max_concurrent=3, period_s=DAY, running_jobs=3)
    assert full.selected == [] and full.slots == 0


def test_recent_pass_is_not_rechecked():
    now = 10 * DAY
    p = plan(
        rows({"a": "idle", "b": "idle"}),
        {"a": now - 3600, "b": now - 2 * DAY},
        [],
        now,
        max_nodes=5,
        max_concurrent=5,
        period_s=7 * DAY,
        min_interval_s=DAY,
    )
    assert [c.node for c in p.selected] == ["b"] and p.skipped["recent_pass"] == 1


def test_failed_node_idle_again_is_revalidated_first():
    now = 10 * DAY
    last = {"a": now - 3600, "b": now - 5 * DAY, "c": None}
    p = plan(
        rows({"a": "idle", "b": "idle", "c": "idle"}),
        last,
        [],
        now,
        max_nodes=3,
        max_concurrent=3,
        period_s=7 * DAY,
        min_interval_s=DAY,
        revalidate=["a"],
    )
    assert [(c.node, c.revalidate) for c in p.selected] == [("a", True), ("c", False), ("b", False)]


def test_node_in_two_partitions_is_planned_once():
    data = [
        {"name": "a", "state": "idle", "partition": "sweep"},
        {"name": "a", "state": "idle", "partition": "debug"},
    ]
    p = plan(data, {}, [], 0.0, max_nodes=5, max_concurrent=5, period_s=DAY)
    assert [c.node for c in p.selected] == ["a"] and p.total_nodes == 1


def test_rotation_covers_every_idle_node_within_ceil_n_over_k_runs():
    """Simulated cron: each run's picks pass; every node is checked once before any twice."""
    names = [f"n{i:03d}" for i in range(23)]
    k, interval = 4, 4 * 3600.0
    last = {}
    checked_order = []
    now = 1000 * DAY
    for _ in range(math.ceil(len(names) / k)):
        p = plan(
            rows({n: "idle" for n in names}), last, [], now, max_nodes=k, max_concurrent=k, period_s=7 * DAY
        )
        for c in p.selected:
            last[c.node] = now
            checked_order.append(c.node)
        now += interval
    assert set(checked_order) == set(names)  # every node covered within ceil(N/K) runs
    first_pass = checked_order[: len(names)]
    assert sorted(first_pass) == names  # none twice before all once
    # the spare slot of the last run, and the next run, start over with the oldest
    assert checked_order[len(names) :] == first_pass[: len(checked_order) - len(names)]


def test_required_per_run_and_meets_period():
    assert required_per_run(1000, 4 * 3600, 7 * DAY) == 24  # 42 runs a week
    assert required_per_run(0, 3600, DAY) == 0
    p = plan(
        rows({f"n{i}": "idle" for i in range(100)}),
        {},
        [],
        0.0,
        max_nodes=2,
        max_concurrent=10,
        period_s=DAY,
        cron_interval_s=4 * 3600,
    )
    assert p.required_per_run == 17 and not p.meets_period


def test_gpu_model_and_sweep_job_helpers():
    assert gpu_model_from_gres("gpu:h100:8(S:0-1)") == "h100"
    assert gpu_model_from_gres("gpu:8") is None and gpu_model_from_gres("(null)") is None
    jobs = [
        {"job_id": "1", "name": "slurmkit-sweep.node1", "state": "RUNNING"},
        {"job_id": "2", "name": "slurmkit-sweep.node2", "state": "PENDING"},
        {"job_id": "3", "name": "slurmkit-sweepy.node3", "state": "RUNNING"},
        {"job_id": "4", "name": "train", "state": "RUNNING"},
    ]
    assert sweep_job_nodes(jobs, "slurmkit-sweep") == {"node1": "1", "node2": "2"}


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from([f"n{i}" for i in range(30)]),
        st.tuples(
            st.sampled_from(["idle", "mixed", "drained", "allocated"]),
            st.one_of(st.none(), st.floats(0, 50 * DAY)),
        ),
        max_size=30,
    ),
    st.sets(st.sampled_from([f"n{i}" for i in range(30)]), max_size=10),
    st.integers(0, 12),
    st.integers(0, 12),
)
def test_plan_properties(nodes, running, k, cap):
    now = 60 * DAY
    last = {n: (None if t is None else now - t) for n, (_, t) in nodes.items()}
    p = plan(
        rows({n: s for n, (s, _) in nodes.items()}),
        last,
        running,
        now,
        max_nodes=k,
        max_concurrent=cap,
        period_s=7 * DAY,
    )
    picked = [c.node for c in p.selected]
    assert len(picked) == len(set(picked)) <= max(0, min(k, cap - len(running)))
    for n in picked:
        assert nodes[n][0] == "idle" and n not in running
    # nothing left out is older than something picked
    left = [n for n, (s, _) in nodes.items() if s == "idle" and n not in running and n not in picked]
    key = lambda n: (1 if last[n] is None else 2, last[n] or 0.0, n)  # noqa: E731
    if picked and left:
        assert max(key(n) for n in picked) <= min(key(n) for n in left)
