"""Per-job GPU efficiency on the real devcluster: the epilog reads the simulated NVML
accounting of each job's GPUs, writes one SK1: summary into the job's AdminComment
(scontrol update, one node per job), sacct returns it, and `slurmkit report efficiency`
ranks the jobs. Each test's accounting data is a fixture patch scoped to its own job id,
so other tests' jobs on the shared cluster never see it."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from slurmkit.slurm.admincomment import decode, find_token
from tests.integration.test_health_gate import (
    edited_fixture,
    env_of,
    records_for,
    show_node,
    slurmkit,
    wait_for,
)

pytestmark = pytest.mark.devcluster

JOB = "#!/bin/sh\nsleep 3\n"
#: Simulated processes start this long after the test reads the clock: the epilog counts
#: only processes that started at or after the job (its StartTime), which comes after release.
AFTER_START = 20
TEN_HOURS_MS = 36_000_000  # longer than the job: min(t, elapsed) makes the job's elapsed the time base


def scoped_many(patches):
    """Fixture patches keyed by job id (each seen only by that job's prolog and epilog)."""

    def mutate(d):
        d["scoped"] = [{"scope": str(job), "patch": patch} for job, patch in patches.items()]

    return mutate


def accounting(gpus, util, mem, start, pid_base):
    def one(i):
        return {
            "pid": pid_base + i,
            "gpu_util": util,
            "mem_util": 20,
            "max_memory_mib": mem,
            "time_ms": TEN_HOURS_MS,
            "start_time": start,
        }

    return {"gpus": {i: {"accounting": [one(i)]} for i in gpus}}


def sacct_row(dc, job):
    res = dc.run(["sacct", "-X", "-n", "-P", "-j", str(job), "--format=ElapsedRaw,AdminComment"])
    line = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
    elapsed, _, comment = line.partition("|")
    return int(elapsed or 0), comment


def admin_summary(dc, job, timeout=60):
    comment = wait_for(lambda: find_token(sacct_row(dc, job)[1]), timeout, f"job {job}'s AdminComment")
    return decode(comment)


def report(dc, *args):
    res = slurmkit(dc, "report", "efficiency", "--since", "2026-01-01", *args)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def submit_held(dc, node_args):
    return dc.submit(JOB, [*node_args, "--output=/dev/null", "--hold"], user="alice")


def test_two_jobs_summaries_ranking_and_hours_by_hand(devcluster):
    a = submit_held(devcluster, ["-w", "node1", "--gres=gpu:8"])
    b = submit_held(devcluster, ["-w", "node2", "--gres=gpu:8"])
    now = time.time() + AFTER_START
    try:
        pa = scoped_many({a: accounting(range(8), 80, 40000, now, 4_100_000)})
        pb = scoped_many({b: accounting([0], 90, 80000, now, 4_200_000)})
        with edited_fixture(devcluster, "node1", pa), edited_fixture(devcluster, "node2", pb):
            devcluster.run(["scontrol", "release", a])
            devcluster.run(["scontrol", "release", b])
            assert devcluster.wait_job(a) == "COMPLETED"
            assert devcluster.wait_job(b) == "COMPLETED"
            sa, sb = admin_summary(devcluster, a), admin_summary(devcluster, b)
    finally:
        devcluster.run(["scancel", a, b])
    ga = sa["nodes"]["node1"]["gpus"]
    assert sa["job"] == a and list(sa["nodes"]) == ["node1"] and sa["missing"] == []
    assert sorted(ga, key=int) == [str(i) for i in range(8)]
    assert all(g["u"] == 80.0 and g["p"] == 1 and g["m"] == 40000 for g in ga.values())
    gb = sb["nodes"]["node2"]["gpus"]
    assert gb["0"]["u"] == 90.0 and gb["0"]["m"] == 80000
    assert [gb[str(i)]["p"] for i in range(1, 8)] == [0] * 7  # seven GPUs never touched
    # the per-node detail is in node1's health log
    epi = wait_for(lambda: records_for(devcluster, a, "epilog"), 30, "job a's epilog record")[-1]
    assert epi["efficiency"]["accounting"] == "on" and epi["efficiency"]["admin_comment"]["written"] is True
    assert epi["efficiency"]["processes"]["3"][0]["pid"] == 4_100_003
    assert epi["efficiency"]["seconds"] < 5.0
    print(
        f"\nefficiency step in job {a}'s epilog: {epi['efficiency']['seconds']:.3f} s "
        f"(collection {epi['efficiency']['collect_seconds']:.3f} s)"
    )
    # the report: by hand, GPU-hours used = hours x utilisation
    ea, eb = sacct_row(devcluster, a)[0], sacct_row(devcluster, b)[0]
    assert ea >= 3 and eb >= 3
    res = report(devcluster, "--job", a, "--job", b, "--by", "job", "--json")
    rows = json.loads(res.stdout)["rows"]
    assert [r["job"] for r in rows] == [b, a]  # seven idle GPUs rank first
    rb, ra = rows
    assert ra["used_gpu_h"] == pytest.approx(8 * (ea / 3600) * 0.80)
    assert ra["alloc_gpu_h"] == pytest.approx(8 * ea / 3600) and ra["idle_gpu_h"] == 0
    assert rb["used_gpu_h"] == pytest.approx(1 * (eb / 3600) * 0.90)
    assert rb["idle_gpu_h"] == pytest.approx(7 * eb / 3600)
    assert (rb["gpus_touched"], rb["gpus_idle"], ra["gpus_touched"]) == (1, 7, 8)
    assert rb["util_pct"] == pytest.approx(100 * 0.9 / 8)
    assert rb["peak_mem_pct"] == pytest.approx(100 * 80000 / 81559)
    table = report(devcluster, "--job", a, "--job", b, "--by", "job").stdout.splitlines()
    assert table[3].split()[:2] == ["1", b] and table[4].split()[:2] == ["2", a]
    # ssubmit status shows it once the job has ended
    st = subprocess.run(
        [sys.executable, "-m", "slurmkit.cli.ssubmit", "status", b],
        env=env_of(devcluster),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert st.returncode == 0, st.stderr
    assert "efficiency 11.2% of 8 GPU(s), 1/8 touched, 7 idle" in st.stdout


def test_two_node_job_gets_one_merged_summary(devcluster):
    job = submit_held(devcluster, ["-N", "2", "--gres=gpu:2"])
    now = time.time() + AFTER_START
    try:
        p1 = scoped_many({job: accounting(range(8), 60, 1000, now, 4_300_000)})
        p2 = scoped_many({job: accounting(range(8), 30, 2000, now, 4_400_000)})
        with edited_fixture(devcluster, "node1", p1), edited_fixture(devcluster, "node2", p2):
            devcluster.run(["scontrol", "release", job])
            assert devcluster.wait_job(job) == "COMPLETED"
            summary = admin_summary(devcluster, job)
    finally:
        devcluster.run(["scancel", job])
    assert sorted(summary["nodes"]) == ["node1", "node2"] and summary["missing"] == []
    assert {g["u"] for g in summary["nodes"]["node1"]["gpus"].values()} == {60.0}
    assert {g["u"] for g in summary["nodes"]["node2"]["gpus"].values()} == {30.0}
    assert all(len(n["gpus"]) == 2 for n in summary["nodes"].values())

    def both():
        recs = records_for(devcluster, job, "epilog")
        return recs if len(recs) == 2 else None

    recs = wait_for(both, 30, "both epilog records")
    outcomes = sorted(r["efficiency"]["admin_comment"].get("merge", "") for r in recs)
    assert [o for o in outcomes if o.startswith("merged here")] == ["merged here"]  # exactly one node wrote
    assert sum(bool(r["efficiency"]["admin_comment"].get("written")) for r in recs) == 1
    elapsed = sacct_row(devcluster, job)[0]
    row = json.loads(report(devcluster, "--job", job, "--by", "job", "--json").stdout)["rows"][0]
    assert row["gpus"] == 4 and row["gpus_touched"] == 4
    assert row["used_gpu_h"] == pytest.approx(2 * elapsed / 3600 * 0.6 + 2 * elapsed / 3600 * 0.3)


def test_accounting_off_reads_unknown_not_zero(devcluster):
    job = submit_held(devcluster, ["-w", "node1", "--gres=gpu:2"])
    try:
        with edited_fixture(
            devcluster, "node1", scoped_many({job: {"defaults": {"accounting_mode": False}}})
        ):
            devcluster.run(["scontrol", "release", job])
            assert devcluster.wait_job(job) == "COMPLETED"
            summary = admin_summary(devcluster, job)
    finally:
        devcluster.run(["scancel", job])
    node = summary["nodes"]["node1"]
    assert node["acct"] == "off" and all(g.get("a") == "off" and "u" not in g for g in node["gpus"].values())
    row = json.loads(report(devcluster, "--job", job, "--by", "job", "--json").stdout)["rows"][0]
    assert row["util_pct"] is None and row["gpus_known"] == 0 and row["unknown_gpu_h"] == row["alloc_gpu_h"]
    line = next(
        x for x in report(devcluster, "--job", job, "--by", "job").stdout.splitlines() if f" {job} " in x
    )
    assert "unknown" in line and "accounting off" in line


def test_hung_accounting_query_does_not_hold_the_epilog(devcluster):
    job = submit_held(devcluster, ["-w", "node2", "--gres=gpu:1"])
    patch = accounting(range(8), 50, 1000, time.time() + AFTER_START, 4_500_000)
    patch["inject"] = {"hang": {"call": "accounting_stats", "seconds": 120}}
    try:
        with edited_fixture(devcluster, "node2", scoped_many({job: patch})):
            devcluster.run(["scontrol", "release", job])
            assert devcluster.wait_job(job) == "COMPLETED"
            rec = wait_for(lambda: records_for(devcluster, job, "epilog"), 60, "the epilog record")[-1]
            summary = admin_summary(devcluster, job)
    finally:
        devcluster.run(["scancel", job])
    assert rec["exit_code"] == 0
    assert rec["efficiency"]["status"] == "timeout"
    assert rec["efficiency"]["collect_seconds"] < 6.0  # half of efficiency.timeout (10 s), not the 120 s hang
    assert rec["seconds"] < 30.0  # health.epilog_deadline
    assert summary["nodes"]["node2"]["acct"] == "timeout"
    assert "DRAIN" not in show_node(devcluster, "node2").get("State", "")
    row = json.loads(report(devcluster, "--job", job, "--by", "job", "--json").stdout)["rows"][0]
    assert row["util_pct"] is None


def test_array_tasks_each_keep_their_own_summary(devcluster):
    """Slurm 22.05's epilog has no array ids (nor the start time): the epilog asks
    ``scontrol show job`` and writes ``<array>_<task>``. Before, the task that keeps the
    array's own id wrote ``jobid=<array>``, which sacctmgr applies to every task (seen on
    22.05: ``sacctmgr -i update job where jobid=<array id>`` modifies both tasks)."""
    arr = devcluster.submit(
        JOB, ["--array=1-2", "-w", "node1", "--gres=gpu:1", "--output=/dev/null", "--hold"], user="alice"
    )
    now = time.time() + AFTER_START
    try:
        # only the task that runs as the array's own id gets processes (fixture scopes are raw ids)
        with edited_fixture(
            devcluster, "node1", scoped_many({arr: accounting([0, 1], 70, 500, now, 4_600_000)})
        ):
            devcluster.run(["scontrol", "release", arr])
            for task in ("1", "2"):
                assert devcluster.wait_job(f"{arr}_{task}") == "COMPLETED"
            raw = {}
            for task in ("1", "2"):
                res = devcluster.run(["sacct", "-X", "-n", "-P", "-j", f"{arr}_{task}", "--format=JobIDRaw"])
                raw[task] = res.stdout.split()[0]
            recs = {
                task: wait_for(lambda r=r: records_for(devcluster, r, "epilog"), 60, f"{r}'s epilog record")[
                    -1
                ]
                for task, r in raw.items()
            }
            for task, rec in recs.items():
                eff_rec = rec["efficiency"]
                assert eff_rec["job"]["source"] == "scontrol", eff_rec
                assert eff_rec["job"]["array_task_id"] == task and eff_rec["job"]["array_job_id"] == arr, (
                    eff_rec
                )
                assert eff_rec["admin_comment"].get("ref") == f"{arr}_{task}", eff_rec["admin_comment"]
            s1, s2 = admin_summary(devcluster, f"{arr}_1"), admin_summary(devcluster, f"{arr}_2")
    finally:
        devcluster.run(["scancel", arr])
    assert {s1["job"], s2["job"]} == set(raw.values()), (s1, s2)  # each task its own summary
    touched = sorted(g["p"] for s in (s1, s2) for g in s["nodes"]["node1"]["gpus"].values())
    assert touched == [0, 1]
