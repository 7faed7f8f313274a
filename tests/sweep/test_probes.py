"""Storage probe on a real directory, sizing rule, topology pairs."""

from __future__ import annotations

import os

import pytest

from slurmkit.errors import ConfigError
from slurmkit.sweep.probes import (
    measure_storage,
    needed_gbps,
    parse_topology_conf,
    select_pairs,
    storage_checks,
)
from slurmkit.verdict.base import Status


def test_sizing_rule_from_the_source_material():
    assert needed_gbps(200, 300) == pytest.approx(0.667, abs=1e-3)  # 200 GB in 5 min
    assert needed_gbps(280, 45) == pytest.approx(6.22, abs=1e-2)
    with pytest.raises(ValueError):
        needed_gbps(1, 0)


def test_storage_probe_measures_a_real_directory(tmp_path):
    m = measure_storage(str(tmp_path), size_mb=8, block_mb=2)
    assert m.bytes == 8 * 1024 * 1024
    assert m.write_s > 0 and m.read_s > 0 and m.write_gbps > 0 and m.read_gbps > 0
    assert os.listdir(tmp_path) == []  # the probe file is removed


def test_storage_checks_pass_and_fail_against_the_floor(tmp_path):
    ok = storage_checks({"enabled": True, "path": str(tmp_path), "size_mb": 4, "block_mb": 1})
    assert [(r.check, r.status, r.unit) for r in ok] == [
        ("storage_write", Status.OK, "GB/s"),
        ("storage_read", Status.OK, "GB/s"),
    ]
    assert all(r.value > 0 for r in ok)
    # the sizing rule as the floor: a 1 PB model in 1 s is out of reach of any disk
    slow = storage_checks(
        {
            "enabled": True,
            "path": str(tmp_path),
            "size_mb": 4,
            "block_mb": 1,
            "model_size_gb": 1e6,
            "checkpoint_window_s": 1.0,
        }
    )
    assert slow[0].status is Status.FAIL and slow[0].code == "STORAGE_WRITE_SLOW"
    assert slow[0].details["floor_gbps"] == pytest.approx(1e6)


def test_storage_probe_unusable_directory_is_a_named_failure(tmp_path):
    missing = tmp_path / "no" / "such"
    [r] = storage_checks({"enabled": True, "path": str(missing), "size_mb": 1, "block_mb": 1})
    assert r.status is Status.FAIL and r.code == "STORAGE_IO" and str(missing) in r.reason


def test_storage_probe_skipped_when_not_configured():
    assert storage_checks({"enabled": True, "path": None}) == []
    assert storage_checks({"enabled": False, "path": "/tmp"}) == []


TOPOLOGY = """
# two leaves under one spine
SwitchName=leaf1 Nodes=node[1-3]
SwitchName=leaf2 Nodes=node[4-6]
SwitchName=spine Switches=leaf[1-2]
"""


def test_topology_conf_parse():
    topo = parse_topology_conf(TOPOLOGY)
    assert topo.leaves() == {"leaf1": ["node1", "node2", "node3"], "leaf2": ["node4", "node5", "node6"]}
    assert topo.parents == {"leaf1": "spine", "leaf2": "spine"}
    with pytest.raises(ConfigError, match=r"topo.conf:1: .*bad range"):
        parse_topology_conf("SwitchName=s Nodes=n[x-y]", "topo.conf")


def test_pairs_cross_leaves_oldest_first():
    topo = parse_topology_conf(TOPOLOGY)
    last = {"node1": 50.0, "node2": None, "node3": 10.0, "node4": 40.0, "node5": 5.0, "node6": None}
    pairs = select_pairs(last.keys(), last, topo, max_pairs=3)
    assert pairs == [("node2", "node6"), ("node5", "node3"), ("node4", "node1")]
    assert all(topo.leaf_of[a] != topo.leaf_of[b] for a, b in pairs)


def test_pairs_without_topology_and_limits():
    assert select_pairs(["b", "a", "c"], {}, None, max_pairs=5) == [("a", "b")]
    assert select_pairs(["a"], {}, None, max_pairs=5) == []
    assert select_pairs(["a", "b"], {}, None, max_pairs=0) == []
