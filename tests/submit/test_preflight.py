"""Pre-flight: attribution, and one real 2-process gloo run (the formula: tests/health/test_collective.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from slurmkit.submit.preflight import blame_slow_pairs


def test_slow_node_is_the_one_in_only_slow_pairs():
    nodes = ["a", "b", "c", "d"]
    pairs = {("a", "b"): 40.0, ("b", "c"): 2.0, ("c", "d"): 3.0, ("d", "a"): 45.0}
    assert list(blame_slow_pairs(nodes, pairs, 10.0)) == ["c"]
    # Two nodes: the one pair is slow, both are implicated (the caller reports ambiguity).
    assert set(blame_slow_pairs(["a", "b"], {("a", "b"): 1.0}, 10.0)) == {"a", "b"}
    assert blame_slow_pairs(nodes, {k: 50.0 for k in pairs}, 10.0) == {}


def run_preflight(tmp_path, *args, env=None):
    full = dict(os.environ, SLURMD_NODENAME="testnode", OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "slurmkit.submit.preflight",
            "--size-mb",
            "1",
            "--iters",
            "2",
            "--timeout",
            "60",
            "--out-dir",
            str(tmp_path),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=full,
    )


def test_real_gloo_preflight_fails_below_floor_and_names_the_node(tmp_path):
    res = run_preflight(tmp_path, "--min-busbw-gbps", "100000")
    assert res.returncode != 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ok"] is False and summary["world"] == 2 and summary["backend"] == "gloo"
    assert 0 < summary["busbw_gbps"] < 100000
    assert "testnode" in summary["bad_nodes"]
    assert "pre-flight FAILED" in res.stderr
    assert {r["node"] for r in summary["ranks"]} == {"testnode"}


def test_real_gloo_preflight_test_hook(tmp_path):
    res = run_preflight(tmp_path, env={"SLURMKIT_PREFLIGHT_FAIL_NODE": "other,testnode"})
    assert res.returncode != 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["bad_nodes"] == {"testnode": "failed by the test hook SLURMKIT_PREFLIGHT_FAIL_NODE"}
