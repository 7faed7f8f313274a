"""The node health gate under a real slurmd (devcluster with --hooks, simulated GPU fixture
per node). Each test edits only its own node's fixture, restores it, and resumes what it
drained, so the next test finds the cluster as it was (tests run one at a time on it)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.devcluster

SLURMKIT = [sys.executable, "-m", "slurmkit.cli.main"]


# ---------------------------------------------------------------- helpers


def env_of(dc):
    return dict(dc.env, SLURMKIT_CONFIG=str(dc.config_path))


def slurmkit(dc, *args, timeout=120):
    return subprocess.run([*SLURMKIT, *args], env=env_of(dc), capture_output=True, text=True, timeout=timeout)


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


@contextlib.contextmanager
def edited_fixture(dc, node, mutate):
    path = dc.gpu_fixture(node)
    original = path.read_text()
    data = yaml.safe_load(original)
    mutate(data)
    write_atomic(path, yaml.safe_dump(data))
    try:
        yield path
    finally:
        write_atomic(path, original)


def show_node(dc, node):
    res = dc.run(["scontrol", "-o", "show", "node", node])
    from slurmkit.slurm.client import parse_scontrol_record

    return parse_scontrol_record(res.stdout.strip())


def show_job(dc, job):
    res = dc.run(["scontrol", "-o", "show", "job", str(job)])
    from slurmkit.slurm.client import parse_scontrol_record

    return parse_scontrol_record(res.stdout.strip()) if res.returncode == 0 else {}


def wait_for(pred, timeout, what, interval=0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def health_log(dc):
    path = dc.state_dir / "slurmkit" / "log" / "health.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def records_for(dc, job, hook="prolog"):
    return [r for r in health_log(dc) if r.get("job_id") == str(job) and r.get("hook") == hook]


def cancel(dc, job):
    dc.run(["scancel", str(job)])


def force_resume(dc, node):
    dc.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])


JOB = "#!/bin/sh\necho on $(hostname) gpus=$SLURM_JOB_GPUS\n"


# ---------------------------------------------------------------- tests


def test_healthy_node_runs_the_job_through_prolog_and_epilog(devcluster):
    job = devcluster.submit(JOB, ["-w", "node1", "--gres=gpu:2", "--output=/dev/null"], user="alice")
    assert devcluster.wait_job(job) == "COMPLETED"
    pro = wait_for(lambda: records_for(devcluster, job, "prolog"), 30, "the prolog's record")[-1]
    assert pro["node"] == "node1" and pro["status"] == "ok" and pro["exit_code"] == 0
    assert pro["seconds"] < 5.0
    assert {r["check"] for r in pro["results"]} >= {
        "gpu_count",
        "gpu_ecc",
        "xid",
        "gpu_leftover",
        "heavy_cache",
    }
    count = next(r for r in pro["results"] if r["check"] == "gpu_count")
    assert count["details"]["expected"] == 8 and count["details"]["expected_from"] == "gres.conf"
    epi = wait_for(lambda: records_for(devcluster, job, "epilog"), 60, "the epilog's record")[-1]
    assert epi["exit_code"] == 0
    prom = (devcluster.state_dir / "slurmkit" / "metrics" / "slurmkit_health_prolog_node1.prom").read_text()
    assert 'slurmkit_health_status{hook="prolog",node="node1"}' in prom


def scoped(job, patch):
    """A fixture fault seen only by ``job``'s prolog/epilog (and re-checks run with
    SLURMKIT_SIM_SCOPE=job): other tests' jobs on the shared cluster never see it."""

    def mutate(d):
        d["scoped"] = [{"scope": str(job), "patch": patch}]

    return mutate


def held_job(dc, job):
    j = show_job(dc, job)
    held = j.get("JobState") == "PENDING" and j.get("Reason", "").startswith("launch_failed_requeued_held")
    return j if held else None


def drained(dc, node):
    n = show_node(dc, node)
    return n if "DRAIN" in n.get("State", "") else None


def test_ecc_fault_drains_node2_holds_the_job_then_resume_after_clearing(devcluster):
    job = devcluster.submit(
        JOB, ["-w", "node2", "--gres=gpu:1", "--output=/dev/null", "--hold"], user="alice"
    )
    try:
        with edited_fixture(
            devcluster, "node2", scoped(job, {"gpus": {3: {"ecc": {"volatile_uncorrected": 2}}}})
        ):
            devcluster.run(["scontrol", "release", job])
            # the job may wait for node2 behind other tests' jobs: key on its own prolog
            pro = wait_for(lambda: records_for(devcluster, job, "prolog"), 180, "the job's prolog")
            assert [r["node"] for r in pro] == ["node2"] and pro[0]["exit_code"] == 1
            reason = pro[0]["drain_reason"]
            assert reason.startswith("slurmkit:GPU_ECC_UNCORRECTED gpu_ecc: GPU 3: 2 uncorrected"), reason
            held = wait_for(lambda: held_job(devcluster, job), 120, "the job to be requeued and held")
            assert held["Restarts"] == "1"
            n1 = [r for r in health_log(devcluster) if r.get("job_id") == job and r["node"] == "node1"]
            assert n1 == []  # node1 was never involved
            # node2 is drained, and Slurm's own 'Prolog error' did not replace the reason
            # (tests run one at a time on the cluster: nothing else resumes node2 meanwhile)
            now = drained(devcluster, "node2")
            assert now and now["Reason"].startswith("slurmkit:GPU_ECC_UNCORRECTED"), now
            # the guarded resume re-checks (seeing the job's fault) and keeps the node drained
            res = subprocess.run(
                [*SLURMKIT, "node", "resume", "node2"],
                env=dict(env_of(devcluster), SLURMKIT_SIM_SCOPE=job),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert res.returncode == 2, res.stdout + res.stderr
            assert "still fails: slurmkit:GPU_ECC_UNCORRECTED" in res.stdout
            assert "DRAIN" in show_node(devcluster, "node2")["State"]
        # fault cleared (fixture restored), node2 still drained: the guarded resume brings it back
        assert drained(devcluster, "node2")["Reason"].startswith("slurmkit:GPU_ECC_UNCORRECTED")
        res = subprocess.run(
            [*SLURMKIT, "node", "resume", "node2"],
            env=dict(env_of(devcluster), SLURMKIT_SIM_SCOPE=job),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stdout + res.stderr
        assert "resumed" in res.stdout
        wait_for(
            lambda: "DRAIN" not in show_node(devcluster, "node2").get("State", "DRAIN"), 30, "node2 resumed"
        )
    finally:
        cancel(devcluster, job)
        if show_node(devcluster, "node2").get("Reason", "").startswith("slurmkit:"):
            force_resume(devcluster, "node2")


def test_an_admins_drain_is_never_resumed(devcluster):
    reason = "admin: replacing a fan"
    devcluster.run(["scontrol", "update", "NodeName=node1", "State=DRAIN", f"Reason={reason}"])
    try:
        res = slurmkit(devcluster, "node", "resume", "node1")
        assert res.returncode == 1 and "drained by someone else" in res.stdout
        node = show_node(devcluster, "node1")
        assert "DRAIN" in node["State"] and node["Reason"].startswith(reason)
        st = json.loads(slurmkit(devcluster, "node", "status", "node1", "--json").stdout)
        assert st["slurmkit_drain"] is False
    finally:
        force_resume(devcluster, "node1")


def test_nvml_hang_ends_the_prolog_within_its_budget(devcluster):
    job = devcluster.submit(
        JOB, ["-w", "node2", "--gres=gpu:1", "--output=/dev/null", "--hold"], user="alice"
    )
    try:
        with edited_fixture(
            devcluster, "node2", scoped(job, {"inject": {"hang": {"call": "ecc", "seconds": 60}}})
        ):
            devcluster.run(["scontrol", "release", job])
            rec = wait_for(lambda: records_for(devcluster, job, "prolog"), 180, "the prolog record")[-1]
            assert rec["exit_code"] == 1 and rec["node"] == "node2"
            assert rec["drain_reason"].startswith("slurmkit:CHECK_TIMEOUT gpu_ecc: gpu_ecc did not finish")
            assert rec["seconds"] <= 5.0 + 0.5  # prolog_deadline, never slurmd's 8 s "Prolog hung"
            wait_for(lambda: held_job(devcluster, job), 120, "the job to be requeued and held")
            node = drained(devcluster, "node2")
            assert node and node["Reason"].startswith("slurmkit:CHECK_TIMEOUT gpu_ecc"), node
    finally:
        cancel(devcluster, job)
        if show_node(devcluster, "node2").get("Reason", "").startswith("slurmkit:"):
            force_resume(devcluster, "node2")
    log = devcluster.state_dir / "log"
    hung = [p.name for p in log.glob("slurmd*") if "Prolog hung" in p.read_text(errors="replace")]
    assert hung == []


def test_epilog_kills_a_double_forked_leftover(devcluster):
    marker = devcluster.shared_dir / f"leftover-{os.getpid()}-{time.time_ns()}.pid"
    script = f"#!/bin/sh\nsetsid sh -c 'sleep 600 & echo $! > {marker}' </dev/null >/dev/null 2>&1\nsleep 1\n"
    job = devcluster.submit(script, ["-w", "node1", "--gres=gpu:1", "--output=/dev/null"], user="alice")
    assert devcluster.wait_job(job) == "COMPLETED"
    pid = int(wait_for(lambda: marker.read_text().strip() if marker.exists() else None, 10, "the pid file"))
    epi = wait_for(lambda: records_for(devcluster, job, "epilog"), 60, "the epilog record")[-1]
    # The devcluster runs proctrack/cgroup (production): Slurm kills every process of the job's
    # cgroup, this double-forked one included, when the job ends; whatever the epilog still
    # finds it kills. Either way it must be dead and nothing may survive. (The epilog's own
    # environ-scan kill, the fallback without cgroup tracking, is tests/health/test_epilog.py.)
    killed_by_epilog = pid in epi["cleanup"]["terminated"] + epi["cleanup"]["killed"]
    assert killed_by_epilog or pid not in epi["cleanup"]["environ_pids"]
    assert epi["cleanup"]["survivors"] == []
    assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split(")")[-1][:3]
    marker.unlink()


def test_leak_killer_dry_run_then_real_spares_the_live_job(devcluster):
    """Uses a fixture of its own (node name 'leaktest', no slurmd reads it), so registering
    fake GPU memory cannot fail another test's prolog on node1/node2."""
    marker = devcluster.shared_dir / f"livejob-{os.getpid()}-{time.time_ns()}.pid"
    job = devcluster.submit(
        f"#!/bin/sh\nsleep 300 &\necho $! > {marker}\nwait\n",
        ["-w", "node1", "--output=/dev/null"],
        user="alice",
    )
    leak = subprocess.Popen(["runuser", "-u", "alice", "--", "setsid", "sleep", "300"])
    fixture = devcluster.gpu_fixture("leaktest")
    try:
        live = int(
            wait_for(lambda: marker.read_text().strip() if marker.exists() else None, 60, "the job's pid")
        )
        leaked = int(
            wait_for(
                lambda: next(
                    (
                        p
                        for p in subprocess.run(
                            ["pgrep", "-u", "alice", "-f", "^sleep 300$"], capture_output=True, text=True
                        ).stdout.split()
                        if int(p) != live
                    ),
                    None,
                ),
                10,
                "the leaked pid",
            )
        )
        data = yaml.safe_load(devcluster.gpu_fixture("node1").read_text())
        data["gpus"][0]["processes"] = [{"pid": leaked, "used_mib": 79000}]
        data["gpus"][1]["processes"] = [{"pid": live, "used_mib": 80000}]
        write_atomic(fixture, yaml.safe_dump(data))
        dry = slurmkit(devcluster, "kill-leaks", "--dry-run", "--node", "leaktest", "--json")
        assert dry.returncode == 1, dry.stderr
        rep = json.loads(dry.stdout)
        assert [lk["pid"] for lk in rep["leaks"]] == [leaked]
        assert any(s["pid"] == live for s in rep["spared"])
        assert os.path.exists(f"/proc/{leaked}")
        real = slurmkit(devcluster, "kill-leaks", "--node", "leaktest", "--json")
        assert real.returncode == 1, real.stderr
        assert json.loads(real.stdout)["leaks"][0]["outcome"] in ("terminated", "killed")
        leak.wait(timeout=15)
        assert os.path.exists(f"/proc/{live}")  # the live job's process survived
        assert show_job(devcluster, job).get("JobState") == "RUNNING"
        audit = (devcluster.state_dir / "slurmkit" / "log" / "kill-leaks.jsonl").read_text().splitlines()
        acted = [json.loads(a) for a in audit]
        assert any(a["pid"] == leaked and a["action"] in ("terminated", "killed") for a in acted)
    finally:
        cancel(devcluster, job)
        leak.kill()
        fixture.unlink(missing_ok=True)
        marker.unlink(missing_ok=True)


def test_two_prologs_on_one_node_at_once_lose_no_state(devcluster):
    start = time.time()

    def xid13(d):
        d["xid_events"] = [{"xid": 13, "gpu": 1, "timestamp": start, "message": "Graphics Engine Exception"}]

    with edited_fixture(devcluster, "node1", xid13):
        jobs = [
            devcluster.submit(JOB, ["-w", "node1", "--gres=gpu:1", "--output=/dev/null"], user=u)
            for u in ("alice", "bob")
        ]
        states = [devcluster.wait_job(j) for j in jobs]
    assert states == ["COMPLETED", "COMPLETED"]
    log = health_log(devcluster)  # every line parses: no torn or interleaved writes
    mine = [r for r in log if r.get("job_id") in jobs and r["hook"] == "prolog"]
    assert sorted(r["job_id"] for r in mine) == sorted(jobs)
    saw = [
        r
        for r in log
        if r.get("node") == "node1"
        and r["time"] >= start
        and any(x["check"] == "xid" and x["code"] == "XID_13" for x in r["results"])
    ]
    assert len(saw) == 1, [(r["hook"], r["job_id"]) for r in saw]  # judged exactly once, on node1
    cursor = json.loads((devcluster.state_dir / "slurmkit" / "state" / "xid-cursor.node1.json").read_text())
    assert cursor["last_timestamp"] >= start
