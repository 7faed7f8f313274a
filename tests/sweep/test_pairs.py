"""Pairwise 2-node all_reduce: job naming, planning through the CLI, and a real gloo
all_reduce between two local processes standing in for the two nodes' ranks."""

from __future__ import annotations

import json
import multiprocessing
import socket

import pytest
from click.testing import CliRunner

from slurmkit.cli.main import cli
from slurmkit.sweep.pairs import PAIR_CHECK, pair_job_name
from slurmkit.sweep.planner import sweep_job_nodes
from slurmkit.verdict.base import Status


def test_pair_job_name_round_trips_through_the_planner():
    name = pair_job_name("slurmkit-sweep", "node1", "node2")
    assert name == "slurmkit-sweep.node1+node2"
    assert sweep_job_nodes([{"job_id": "5", "name": name, "state": "RUNNING"}], "slurmkit-sweep") == {
        "node1": "5",
        "node2": "5",
    }


def test_dry_run_plans_pairs_across_leaves(tmp_path, fake_slurm, site_config):
    topo = tmp_path / "topology.conf"
    topo.write_text("SwitchName=l1 Nodes=n[1-2]\nSwitchName=l2 Nodes=n[3-4]\nSwitchName=s Switches=l[1-2]\n")
    cfg = site_config(
        max_nodes=1,
        max_concurrent=4,
        pairs={"enabled": True, "max_pairs": 2, "topology_conf": str(topo), "backend": "gloo"},
    )
    fake_slurm.sinfo = "".join(f"n{i}|idle|gpu:h100:8|sweep|64|1000|none\n" for i in range(1, 5))
    res = CliRunner().invoke(
        cli, ["sweep", "--config", cfg.path, "--dry-run", "--json"], catch_exceptions=False
    )
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert [j["node"] for j in report["jobs"]] == ["n1"]
    pairs = [p["nodes"] for p in report["pair_jobs"]]
    assert pairs == [["n2", "n3"]]  # n1 is taken; n2 (leaf l1) pairs across to n3; n4 is left alone
    args = report["pair_jobs"][0]["sbatch"]
    assert "--nodelist=n2,n3" in args and "--nodes=2" in args and "--ntasks-per-node=1" in args
    assert "srun --ntasks=2" in report["pair_jobs"][0]["script"]


def _rank(cfg_path, rank, port, queue):
    from slurmkit.config import load_site_config
    from slurmkit.sweep.pairs import run_pair

    env = {
        "SLURM_PROCID": str(rank),
        "SLURM_NTASKS": "2",
        "SLURM_LOCALID": "0",
        "SLURM_JOB_ID": str(port - 20000),
    }
    result = run_pair(load_site_config(cfg_path), ["node1", "node2"], "r1", env=env, master="127.0.0.1")
    queue.put((rank, None if result is None else result.to_dict()))


def test_gloo_allreduce_between_two_ranks_records_both_nodes(site_config):
    pytest.importorskip("torch")
    cfg = site_config(
        pairs={"enabled": True, "backend": "gloo", "size_mb": 1, "iterations": 2, "min_busbw_gbps": 1e-6}
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = 20000 + s.getsockname()[1] % 20000
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=_rank, args=(cfg.path, r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    results = dict(queue.get() for _ in range(2))
    assert results[1] is None
    r0 = results[0]
    assert r0["status"] == Status.OK.value and r0["value"] > 0 and r0["details"]["ranks"] == 2
    from slurmkit.sweep.runnode import open_store

    store = open_store(cfg)
    for node in ("node1", "node2"):
        entry = store.node(node)[PAIR_CHECK]
        assert entry["tier"] == "pair" and entry["value"] == r0["value"]
        assert store.last_pass(node) is None
