"""Sweeps on real Slurm (the devcluster: slurmctld + 2 slurmd, simulated GPU fixtures).

Each test runs `slurmkit sweep` with its own site config: its own copy of the GPU
fixtures, its own verdict store, metrics and log directories (all under the
cluster's shared directory), so it neither sees nor disturbs other tests' state;
only the prolog test uses the cluster's own store, because that is what the
installed prolog reads. Nodes are left idle and undrained.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import yaml

pytestmark = pytest.mark.devcluster

REPO = Path(__file__).resolve().parents[2]
HEALTHY = REPO / "etc" / "gpu-fixtures" / "healthy-h100x8.yaml"
SLURMKIT = [sys.executable, "-m", "slurmkit.cli.main"]


class SweepEnv:
    """A private slurmkit config + fixtures for one test on the shared cluster."""

    def __init__(
        self,
        cluster,
        *,
        cluster_store: bool = False,
        sweep: Optional[Dict[str, Any]] = None,
        health: Optional[Dict[str, Any]] = None,
    ):
        self.cluster = cluster
        self.root = Path(cluster.shared_dir) / f"sweeptest-{uuid.uuid4().hex[:8]}"
        self.gpu = self.root / "gpu"
        self.gpu.mkdir(parents=True)
        self.root.chmod(0o755)  # root's, like a real store and config (docs/security.md)
        for node in cluster.nodes:
            shutil.copy(HEALTHY, self.gpu / f"{node}.yaml")
        base = yaml.safe_load(Path(cluster.config_path).read_text()) or {}
        paths = dict(base.get("paths") or {})
        if not cluster_store:
            paths["shared_dir"] = str(self.root / "store")
        paths.update(metrics_dir=str(self.root / "metrics"), log_dir=str(self.root / "log"))
        health_cfg = dict(base.get("health") or {})
        health_cfg.update(backend="simulated", simulated_fixture=str(self.gpu / "{node}.yaml"))
        health_cfg.update(health or {})
        sweep_cfg = {
            "partition": "sweep",
            "min_interval_s": 0,
            "max_concurrent": 4,
            "time_limit": "5",
            "storage": {"path": str(self.root), "size_mb": 16, "block_mb": 4},
            "outliers": {"min_peers": 1},
        }
        sweep_cfg.update(sweep or {})
        self.store_dir = Path(paths["shared_dir"])
        self.config = self.root / "slurmkit.yaml"
        self.config.write_text(yaml.safe_dump({"paths": paths, "health": health_cfg, "sweep": sweep_cfg}))

    def fixture(self, node: str) -> Dict[str, Any]:
        return yaml.safe_load((self.gpu / f"{node}.yaml").read_text())

    def set_fixture(self, node: str, data: Dict[str, Any]) -> None:
        (self.gpu / f"{node}.yaml").write_text(yaml.safe_dump(data))

    def slurmkit(self, *args: str, timeout: float = 120):
        return self.cluster.run([*SLURMKIT, *args, "--config", str(self.config)], timeout=timeout)

    def sweep(self, *args: str) -> Dict[str, Any]:
        res = self.cluster.run(
            [*SLURMKIT, "sweep", "--config", str(self.config), "--json", *args], timeout=120
        )
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    def store(self):
        from slurmkit.verdict.store import VerdictStore

        return VerdictStore(str(self.store_dir))

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def sweep_env(devcluster, request):
    envs: List[SweepEnv] = []

    def make(**kw) -> SweepEnv:
        env = SweepEnv(devcluster, **kw)
        envs.append(env)
        return env

    wait_all_idle(devcluster)
    yield make
    # leave no sweep job of ours behind, and no node drained by a test
    for env in envs:
        res = devcluster.run(["squeue", "-h", "-o", "%i %j"])
        for line in res.stdout.splitlines():
            job, _, name = line.partition(" ")
            if name.startswith("slurmkit-sweep."):
                devcluster.run(["scancel", job])
        env.cleanup()
    for node in devcluster.nodes:
        if devcluster.node_reason(node).startswith("slurmkit:"):
            devcluster.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])


def wait_all_idle(cluster, timeout: float = 180) -> None:
    """Wait until every node is plainly ``idle`` (the cluster helper also accepts mixed and
    allocated; a sweep only takes idle nodes, and other tests' jobs may hold them)."""
    cluster.wait_nodes_idle(timeout=timeout)  # resumes nodes an earlier test left drained
    deadline = time.monotonic() + timeout
    states: Dict[str, str] = {}
    while time.monotonic() < deadline:
        res = cluster.run(["sinfo", "-h", "-N", "-o", "%N %T"])
        states = dict(line.split()[:2] for line in res.stdout.splitlines() if line.strip())
        if all(states.get(n) == "idle" for n in cluster.nodes):
            return
        time.sleep(0.5)
    raise AssertionError(f"nodes not idle within {timeout:g}s: {states}")


def submitted(report: Dict[str, Any]) -> List[tuple]:
    return [(j["node"], j["job_id"]) for j in report["jobs"] if j.get("job_id")]


def wait_state(cluster, job: str, wanted: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        res = cluster.run(["squeue", "-h", "-j", job, "-o", "%T"])
        state = res.stdout.strip()
        if state == wanted:
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job} never reached {wanted} (last {state!r})")


def test_sweep_covers_idle_nodes_in_rotation(devcluster, sweep_env):
    """Successive runs pick never-checked nodes first, then the oldest pass. Tests run one
    at a time on the cluster, so once both nodes are idle every run plans with both and
    submits exactly one pass."""
    env = sweep_env()
    seen = []
    for _ in range(3):
        wait_all_idle(devcluster)
        last = {n: env.store().last_pass(n) for n in devcluster.nodes}
        expected = min(devcluster.nodes, key=lambda n: (last[n] is not None, last[n] or 0.0, n))
        report = env.sweep("--max-nodes", "1")
        assert report["plan"]["idle_nodes"] == len(devcluster.nodes), report["plan"]
        [(node, job)] = submitted(report)
        assert devcluster.wait_job(job, timeout=180) == "COMPLETED"
        assert node == expected, (last, report["plan"])
        seen.append(node)
    # never-checked first (by name), then the oldest pass: node1, node2, node1
    assert seen == ["node1", "node2", "node1"]
    store = env.store()
    assert store.last_pass("node1") > store.last_pass("node2") > 0
    entries = store.node("node2")
    assert {
        "nvlink_bandwidth",
        "allreduce_busbw",
        "gemm_tflops",
        "hbm_bandwidth",
        "storage_write",
        "storage_read",
    } <= set(entries)
    assert all(e["status"] == "ok" for c, e in entries.items() if not c.startswith("outlier.")), entries
    assert entries["storage_write"]["value"] > 0  # measured on the real shared directory
    # status shows both, valid, with their verdict
    res = env.slurmkit("sweep", "status", "--json")
    rows = {r["node"]: r for r in json.loads(res.stdout)}
    assert rows["node1"]["verdict"] == "ok" and rows["node1"]["valid"] and rows["node2"]["state"]
    # the dry run plans without submitting
    dry = env.sweep("--dry-run", "--max-nodes", "2")
    assert [j["node"] for j in dry["jobs"]] == ["node2", "node1"] and not submitted(dry)


def test_metrics_files_parse(devcluster, sweep_env):
    from prometheus_client.parser import text_string_to_metric_families

    env = sweep_env()
    report = env.sweep("--max-nodes", "1")
    [(node, job)] = submitted(report)
    assert devcluster.wait_job(job, timeout=180) == "COMPLETED"
    files = sorted((env.root / "metrics").glob("*.prom"))
    assert {f.name for f in files} == {"slurmkit_sweep.prom", f"slurmkit_sweep_node_{node}.prom"}
    names = set()
    for f in files:
        for fam in text_string_to_metric_families(f.read_text()):
            names.add(fam.name)
            assert fam.samples, fam.name
    assert {
        "slurmkit_sweep_check_value",
        "slurmkit_sweep_pass_status",
        "slurmkit_sweep_nvlink_gpu_gbps",
        "slurmkit_sweep_node_last_pass_timestamp_seconds",
        "slurmkit_sweep_run_submitted",
    } <= names


def test_real_job_preempts_a_sweep_job(devcluster, sweep_env):
    # the sweep's NVLink probe on node1 takes 90 s (an injected slow call), so it is running
    # when the real job arrives
    env = sweep_env(health={"checks": {"nvlink_bandwidth": {"timeout": 200}}})
    slow = env.fixture("node1")
    slow["inject"] = {"hang": {"call": "nvlink_bandwidth", "seconds": 90}}
    env.set_fixture("node1", slow)
    report = env.sweep("--max-nodes", "1")
    [(node, sweep_job)] = submitted(report)
    assert node == "node1"
    wait_state(devcluster, sweep_job, "RUNNING", timeout=60)
    time.sleep(2)  # inside the probe
    real = devcluster.submit(
        "#!/bin/sh\nhostname\n",
        ["-p", "debug", "-w", "node1", "--exclusive", "-o", "/dev/null"],
        user="alice",
    )
    t0 = time.monotonic()
    assert devcluster.wait_job(real, timeout=120) == "COMPLETED"
    assert time.monotonic() - t0 < 80  # it did not wait for the 90 s sweep
    final = devcluster.wait_job(sweep_job, timeout=60)
    assert final in ("PREEMPTED", "CANCELLED"), final
    # --no-requeue: it is gone, not pending again, and the pass counts as not done
    assert devcluster.run(["squeue", "-h", "-j", sweep_job]).stdout.strip() == ""
    assert env.store().last_pass("node1") is None
    # so the next run plans node1 again, once the real job has left it
    wait_all_idle(devcluster)
    assert [j["node"] for j in env.sweep("--dry-run", "--max-nodes", "1")["jobs"]] == ["node1"]


def test_outlier_flagged_by_fleet_rule_not_by_fixed_floor(devcluster, sweep_env):
    """node2's NVLink is 30% under node1's; the fixed pair floor (200 GB/s) is under both,
    so the fixed threshold passes node2 and only the fleet rule flags it."""
    env = sweep_env(health={"thresholds": {"H100": {"nvlink_pair_floor_gbps": 200.0}}})
    slow = env.fixture("node2")
    slow["nvlink_bandwidth_gbps"] = {"default": 390.0 * 0.7, "pairs": {}}
    env.set_fixture("node2", slow)
    for expected in ("node1", "node2"):  # one at a time: node2 is judged against node1's pass
        wait_all_idle(devcluster)
        [(node, job)] = submitted(env.sweep("--max-nodes", "1"))
        assert node == expected
        assert devcluster.wait_job(job, timeout=180) == "COMPLETED"
    n2 = env.store().node("node2")
    assert n2["nvlink_bandwidth"]["status"] == "ok" and n2["nvlink_bandwidth"]["value"] == pytest.approx(
        273.0
    )
    assert n2["outlier.nvlink_bandwidth"]["status"] == "warn"
    assert n2["outlier.nvlink_bandwidth"]["code"] == "OUTLIER_NVLINK_BANDWIDTH"
    assert "-30%" in n2["outlier.nvlink_bandwidth"]["reason"]
    assert not devcluster.node_reason("node2").startswith("slurmkit:")  # action: warn, no drain
    # the node that passed first is judged fine against node2 on a later pass
    wait_all_idle(devcluster)
    [(node, job)] = submitted(env.sweep("--max-nodes", "1"))
    assert node == "node1" and devcluster.wait_job(job, timeout=180) == "COMPLETED"
    assert env.store().node("node1")["outlier.nvlink_bandwidth"]["status"] == "ok"


def test_failing_sweep_drains_with_a_slurmkit_reason(devcluster, sweep_env):
    env = sweep_env(health={"thresholds": {"H100": {"nvlink_pair_floor_gbps": 300.0}}})
    bad = env.fixture("node1")
    bad["nvlink_bandwidth_gbps"] = {"default": 390.0, "pairs": {"0-1": 100.0}}
    env.set_fixture("node1", bad)
    [(node, job)] = submitted(env.sweep("--max-nodes", "1"))
    assert node == "node1" and devcluster.wait_job(job, timeout=180) == "COMPLETED"
    reason = devcluster.node_reason("node1")
    assert reason.startswith("slurmkit:NVLINK_BW_FLOOR nvlink_bandwidth:"), reason
    assert env.store().read("node1")["last_pass_status"] == "fail"
    devcluster.run(["scontrol", "update", "NodeName=node1", "State=RESUME"])


def test_failing_sweep_keeps_an_admins_drain_reason(devcluster, sweep_env):
    """An admin drains the node ("disk swap") while its sweep pass runs; the pass then
    fails: the verdict is recorded, the admin's reason stays (the one guarded drain)."""
    env = sweep_env(
        health={
            "thresholds": {"H100": {"nvlink_pair_floor_gbps": 300.0}},
            "checks": {"nvlink_bandwidth": {"timeout": 60}},
        }
    )
    bad = env.fixture("node1")
    bad["nvlink_bandwidth_gbps"] = {"default": 390.0, "pairs": {"0-1": 100.0}}
    bad["inject"] = {"hang": {"call": "nvlink_bandwidth", "seconds": 6}}
    env.set_fixture("node1", bad)
    [(node, job)] = submitted(env.sweep("--max-nodes", "1"))
    assert node == "node1"
    try:
        wait_state(devcluster, job, "RUNNING", timeout=60)
        res = devcluster.run(["scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=disk swap"])
        assert res.returncode == 0, res.stderr
        assert devcluster.wait_job(job, timeout=120) == "COMPLETED"
        assert env.store().read("node1")["last_pass_status"] == "fail"
        state, reason = devcluster.node_state("node1"), devcluster.node_reason("node1")
        assert state.startswith("drain") and reason == "disk swap", (state, reason)
    finally:
        devcluster.run(["scontrol", "update", "NodeName=node1", "State=RESUME"])


def _prolog_records(cluster, job: str) -> List[Dict[str, Any]]:
    base = yaml.safe_load(Path(cluster.config_path).read_text())
    log = Path(base["paths"]["log_dir"]) / "health.jsonl"
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if str(rec.get("job_id")) == str(job) and rec.get("hook") == "prolog":
            out.append(rec)
    return out


def test_prolog_after_a_passing_sweep_reports_the_cached_verdict(devcluster, sweep_env):
    if not (REPO / "prolog" / "slurmkit-prolog").exists():
        pytest.skip("the health gate's prolog is not installed in this checkout")
    env = sweep_env(cluster_store=True)
    # this test writes to the cluster's own store (the prolog reads it): put it back after
    files = [env.store_dir / f"{n}.json" for n in devcluster.nodes]
    files += [env.store_dir / "_notify" / f"{n}.json" for n in devcluster.nodes]
    saved = {f: f.read_bytes() if f.exists() else None for f in files}
    try:
        _prolog_reports_cached_verdict(devcluster, env)
    finally:
        for path, data in saved.items():
            if data is None:
                path.unlink(missing_ok=True)
            else:
                path.write_bytes(data)
        (env.store_dir / "_summary.json").unlink(missing_ok=True)  # a cache: rebuilt on the next read


def _prolog_reports_cached_verdict(devcluster, env) -> None:
    # pass node1 (the cluster store may hold other tests' passes: sweep until node1 has ours)
    for _ in range(2):
        wait_all_idle(devcluster)
        jobs = submitted(env.sweep("--max-nodes", "2"))
        for _, job in jobs:
            assert devcluster.wait_job(job, timeout=180) == "COMPLETED"
        if "node1" in [n for n, _ in jobs]:
            break
    valid = env.store().valid("node1")
    assert valid.get("nvlink_bandwidth", {}).get("status") == "ok", valid
    job = devcluster.submit(
        "#!/bin/sh\ntrue\n", ["-p", "debug", "-w", "node1", "-o", "/dev/null"], user="alice"
    )
    assert devcluster.wait_job(job, timeout=120) == "COMPLETED"
    deadline = time.monotonic() + 20
    records = _prolog_records(devcluster, job)
    while not records and time.monotonic() < deadline:
        time.sleep(0.5)
        records = _prolog_records(devcluster, job)
    assert records, "the prolog wrote no verdict for the job"
    results = {r["check"]: r for r in records[-1]["results"]}
    cache = results["heavy_cache"]
    assert cache["status"] == "ok" and "valid heavy verdict" in cache["reason"]
    assert "nvlink_bandwidth" in cache["reason"]
    # reported, not re-run: no heavy check ran in the prolog
    assert not {"nvlink_bandwidth", "allreduce_busbw", "gemm_tflops", "hbm_bandwidth"} & set(results)


def test_pairwise_allreduce_between_two_nodes(devcluster, sweep_env):
    """A 2-node all_reduce job (gloo on CPU: the devcluster has no CUDA) over the nodes'
    own addresses; busbw is recorded for both nodes as a pair verdict, not a full pass."""
    env = sweep_env(
        sweep={
            "max_nodes": 0,
            "pairs": {
                "enabled": True,
                "backend": "gloo",
                "size_mb": 4,
                "iterations": 3,
                "min_busbw_gbps": 0.0001,
            },
        }
    )
    report = env.sweep()
    assert report["jobs"] == []
    [pair] = report["pair_jobs"]
    assert pair["nodes"] == ["node1", "node2"] and "--nodes=2" in pair["sbatch"]
    assert "--job-name=slurmkit-sweep.node1+node2" in pair["sbatch"]
    assert devcluster.wait_job(pair["job_id"], timeout=240) == "COMPLETED"
    store = env.store()
    for node in ("node1", "node2"):
        entry = store.node(node)["pair_allreduce_busbw"]
        assert entry["status"] == "ok" and entry["value"] > 0 and entry["tier"] == "pair"
        assert store.last_pass(node) is None  # a pair test is not a complete pass


@pytest.mark.parametrize(
    "reason,resumed", [("slurmkit:XID_79 xid: test drain", True), ("admin: fan replacement", False)]
)
def test_clean_pass_resumes_only_a_slurmkit_drain(devcluster, sweep_env, reason, resumed):
    """A node drained while its sweep pass runs: a clean pass resumes it through the
    health gate's guarded resume when the drain is slurmkit's, never when it is an admin's."""
    env = sweep_env(health={"checks": {"nvlink_bandwidth": {"timeout": 60}}})
    slow = env.fixture("node1")
    slow["inject"] = {"hang": {"call": "nvlink_bandwidth", "seconds": 6}}
    env.set_fixture("node1", slow)
    [(node, job)] = submitted(env.sweep("--max-nodes", "1"))
    assert node == "node1"
    try:
        wait_state(devcluster, job, "RUNNING", timeout=60)
        res = devcluster.run(["scontrol", "update", "NodeName=node1", "State=DRAIN", f"Reason={reason}"])
        assert res.returncode == 0, res.stderr
        assert devcluster.wait_job(job, timeout=120) == "COMPLETED"
        state, got_reason = devcluster.node_state("node1"), devcluster.node_reason("node1")
        if resumed:
            assert not state.startswith("drain") and not got_reason.startswith("slurmkit:"), (
                state,
                got_reason,
            )
        else:
            assert state.startswith("drain") and got_reason == reason, (state, got_reason)
    finally:
        devcluster.run(["scontrol", "update", "NodeName=node1", "State=RESUME"])
