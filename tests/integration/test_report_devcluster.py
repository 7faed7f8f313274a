"""`slurmkit report` against the real devcluster (slurmctld + slurmdbd + MariaDB).

Several GPU jobs run as alice and bob in two accounts, one of them requeued with
`scontrol requeue` while it runs, and one on two nodes. The test knows what each job
requested (GPUs) and reads what Slurm measured (Start/End of every attempt, from a
plain `sacct -D -X -j <ids>` of its own); the report must give exactly
GPUs x seconds per account and user, and the requeued attempt must appear as lost.

What "requested" means for the requeued job: every attempt holds the GPUs it asked
for, so the expectation is GPUs x (first attempt's seconds + second attempt's
seconds). The second attempt sleeps less (it sees SLURM_RESTART_COUNT=1).

The jobs carry a job name unique to this run and the report is filtered with
`--name`, because other tests may run jobs as alice and bob on the same cluster.
"""

from __future__ import annotations

import json
import sys
import time
import uuid

import pytest

pytestmark = pytest.mark.devcluster

SCRIPT = """#!/bin/bash
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then sleep %(again)d; else sleep %(first)d; fi
"""


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def _squeue_state(devcluster, job_id):
    res = devcluster.run(["squeue", "-h", "-j", job_id, "-o", "%T"])
    return res.stdout.strip()


def _release_if_held(devcluster, job_id):
    """Another test's prolog failure may requeue-and-hold our job; let it run again."""
    res = devcluster.run(["squeue", "-h", "-j", job_id, "-o", "%r"])
    if "held" in res.stdout.lower():
        devcluster.run(["scontrol", "release", job_id])


def _slurmkit(devcluster, *args, env=None, **kwargs):
    """``slurmkit ARGS`` on the devcluster, with its site config unless ``env`` says otherwise."""
    return devcluster.run(
        [sys.executable, "-m", "slurmkit.cli.main", *args],
        env=env if env is not None else {"SLURMKIT_CONFIG": str(devcluster.config_path)},
        **kwargs,
    )


def _attempts(devcluster, ids):
    """Every attempt of our jobs as Slurm recorded it: (jobidraw, state, start, end)."""
    res = devcluster.run(
        ["sacct", "-X", "-D", "-n", "-P", "-j", ",".join(ids), "--format=JobIDRaw,State,Start,End"],
        env={"SLURM_TIME_FORMAT": "%s"},
    )
    assert res.returncode == 0, res.stderr
    out = []
    for line in res.stdout.splitlines():
        jid, state, start, end = line.split("|")
        if start.isdigit() and end.isdigit():
            out.append((jid, state.split()[0], int(start), int(end)))
    return out


def test_report_matches_requested_gpu_seconds(devcluster, tmp_path):
    name = f"skrep-{uuid.uuid4().hex[:8]}"
    since = time.time() - 2
    common = ["-p", "debug", "-J", name, "-o", "/dev/null", "-t", "5"]
    # (user, account, GPUs requested in total, sbatch args, first sleep, sleep after requeue)
    plan = [
        ("alice", "research", 2, ["--gres=gpu:2"], 3, 0),
        ("bob", "ops", 1, ["--gres=gpu:h100:1"], 4, 0),
        ("bob", "research", 3, ["--gres=gpu:3"], 2, 0),
        ("bob", "ops", 4, ["-N", "2", "--gres=gpu:2"], 2, 0),  # 2 nodes x 2 GPUs: AllocTRES says 4
        ("alice", "research", 1, ["--gres=gpu:1"], 60, 2),  # requeued while it runs
    ]
    jobs = {}
    for user, account, gpus, args, first, again in plan:
        jid = devcluster.submit(
            SCRIPT % {"first": first, "again": again}, ["-A", account, *common, *args], user=user
        )
        jobs[jid] = (user, account, gpus)
    requeued = list(jobs)[-1]

    # requeue the long job once it has run for a moment (retry: on a shared cluster another
    # test may have requeued or held it in the meantime)
    deadline = time.monotonic() + 120
    while True:
        assert time.monotonic() < deadline, f"could not requeue job {requeued} while it ran"
        _release_if_held(devcluster, requeued)
        if _squeue_state(devcluster, requeued) == "RUNNING":
            time.sleep(3)
            if devcluster.run(["scontrol", "requeue", requeued]).returncode == 0:
                break
        time.sleep(0.5)

    deadline = time.monotonic() + 300
    for jid in jobs:
        while _squeue_state(devcluster, jid):
            assert time.monotonic() < deadline, f"job {jid} did not finish"
            _release_if_held(devcluster, jid)
            time.sleep(0.5)
        assert devcluster.wait_job(jid, timeout=60) == "COMPLETED", jid

    # What Slurm measured, and what we requested: GPUs x seconds per (account, user).
    deadline = time.monotonic() + 60
    while True:  # accounting reaches slurmdbd asynchronously
        attempts = _attempts(devcluster, list(jobs))
        final = {a[0] for a in attempts if a[1] == "COMPLETED"}
        if final == set(jobs) and any(a[0] == requeued and a[1] == "REQUEUED" for a in attempts):
            break
        assert time.monotonic() < deadline, f"sacct never showed every attempt: {attempts}"
        time.sleep(1)
    expected, lost, n_attempts = {}, {}, {}
    plan_of = dict(zip(jobs, plan))
    seen = set()
    for jid, state, start, end in sorted(attempts, key=lambda a: (a[0], a[2])):
        user, account, gpus = jobs[jid]
        seconds = end - start
        if state == "COMPLETED":  # the measured time is what the job slept, plus launch overhead
            planned = plan_of[jid][5] if jid in seen else plan_of[jid][4]
            assert planned <= seconds <= planned + 4, (jid, state, seconds)
        seen.add(jid)
        expected[(account, user)] = expected.get((account, user), 0) + gpus * seconds
        n_attempts[(account, user)] = n_attempts.get((account, user), 0) + 1
        if state in ("REQUEUED", "NODE_FAIL", "PREEMPTED", "TIMEOUT"):
            lost[(account, user)] = lost.get((account, user), 0) + gpus * seconds

    until = time.time() + 5
    res = _slurmkit(
        devcluster,
        "report",
        "--since",
        _iso(since),
        "--until",
        _iso(until),
        "--by",
        "account,user",
        "--format",
        "json",
        "--name",
        name,
        "--no-health-log",
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    got = {(r["account"], r["user"]): r for r in data["rows"]}
    assert set(got) == set(expected)
    for key, gpu_seconds in expected.items():
        assert got[key]["gpu_hours"] == pytest.approx(gpu_seconds / 3600, abs=1e-5), key
        assert got[key]["lost_gpu_hours"] == pytest.approx(lost.get(key, 0) / 3600, abs=1e-5), key
        assert got[key]["attempts"] == n_attempts[key], key
    alice = got[("research", "alice")]
    assert alice["jobs"] == 2 and alice["attempts"] >= 3
    assert alice["lost_by_cause"]["REQUEUED"] > 0
    assert data["totals"]["gpu_hours"] == pytest.approx(sum(expected.values()) / 3600, abs=1e-5)
    assert "-D" in data["meta"]["sacct_command"] and "-T" in data["meta"]["sacct_command"]

    # A window that cuts through jobs: -T plus slurmkit's own clip must give GPUs x the
    # overlap of each attempt with the window.
    cut_start = min(a[2] for a in attempts) + 1
    cut_end = max(a[3] for a in attempts) - 1
    clipped = {}
    for jid, _state, start, end in attempts:
        user, account, gpus = jobs[jid]
        overlap = max(0, min(end, cut_end) - max(start, cut_start))
        clipped[(account, user)] = clipped.get((account, user), 0) + gpus * overlap
    res_cut = _slurmkit(
        devcluster,
        "report",
        "--since",
        f"@{cut_start}",
        "--until",
        f"@{cut_end}",
        "--by",
        "account,user",
        "--json",
        "--name",
        name,
        "--no-health-log",
    )
    assert res_cut.returncode == 0, res_cut.stderr
    cut = {(r["account"], r["user"]): r["gpu_hours"] for r in json.loads(res_cut.stdout)["rows"]}
    for key, gpu_seconds in clipped.items():
        assert cut.get(key, 0.0) == pytest.approx(gpu_seconds / 3600, abs=1e-5), (key, cut, clipped)

    # The same numbers from a saved dump through --sacct-file (the recommended command: no free text).
    dump = tmp_path / "dump.txt"
    rec = devcluster.run(
        [
            "sacct",
            "-a",
            "-D",
            "-T",
            "-S",
            _iso(since),
            "-E",
            _iso(until),
            "--parsable2",
            "--name",
            name,
            "--format="
            + ",".join(
                [
                    "JobID",
                    "JobIDRaw",
                    "State",
                    "AllocTRES",
                    "Submit",
                    "Start",
                    "End",
                    "ElapsedRaw",
                    "User",
                    "Account",
                    "Partition",
                    "NodeList",
                    "Reason",
                ]
            ),
        ],
        env={"SLURM_TIME_FORMAT": "%s"},
    )
    assert rec.returncode == 0, rec.stderr
    dump.write_text(rec.stdout)
    res2 = _slurmkit(
        devcluster,
        "report",
        "--sacct-file",
        str(dump),
        "--by",
        "account,user",
        "--json",
        "--no-health-log",
    )
    assert res2.returncode == 0, res2.stderr
    again = {(r["account"], r["user"]): r["gpu_hours"] for r in json.loads(res2.stdout)["rows"]}
    assert again == {k: r["gpu_hours"] for k, r in got.items()}

    # The same numbers from the accounting archive: a live ingest (sacct without -T), twice over
    # overlapping windows, then --archive (needs the report extra).
    pytest.importorskip("duckdb")
    arch = tmp_path / "archive"
    for s_, u_ in ((since, until), (since - 60, until + 60)):
        ing = _slurmkit(
            devcluster,
            "report",
            "ingest",
            "--archive",
            str(arch),
            "--since",
            _iso(s_),
            "--until",
            _iso(u_),
        )
        assert ing.returncode == 0, ing.stderr
    res3 = _slurmkit(
        devcluster,
        "report",
        "--archive",
        str(arch),
        "--since",
        _iso(since),
        "--until",
        _iso(until),
        "--by",
        "account,user",
        "--json",
        "--name",
        name,
        "--no-health-log",
    )
    assert res3.returncode == 0, res3.stderr
    archived = json.loads(res3.stdout)
    assert {(r["account"], r["user"]): r["gpu_hours"] for r in archived["rows"]} == {
        k: r["gpu_hours"] for k, r in got.items()
    }
    assert archived["totals"]["attempts"] == data["totals"]["attempts"]

    # capacity: the used GPU-hours from the archive are those from sacct (a window that has
    # ended: capacity counts the installed hours up to now)
    cap_until = _iso(min(until, time.time() - 1))
    capacities = []
    for source in ([], ["--archive", str(arch)]):
        cap = _slurmkit(
            devcluster,
            "report",
            "capacity",
            "--since",
            _iso(since),
            "--until",
            cap_until,
            "--by",
            "partition",
            "--json",
            *source,
        )
        assert cap.returncode == 0, cap.stderr
        capacities.append(json.loads(cap.stdout))
    for c in capacities:
        for k in ("jobs", "engine", "sacct_command"):
            c["meta"].pop(k)
    assert capacities[0] == capacities[1]
    assert capacities[1]["totals"]["used_gpu_hours"] > 0


def test_report_capacity_on_devcluster(devcluster):
    """sinfo's Gres column of the devcluster (2 nodes x gpu:h100:8) is the capacity."""
    since = time.time() - 3600
    res = _slurmkit(
        devcluster,
        "report",
        "capacity",
        "--since",
        _iso(since),
        "--by",
        "gpu_type",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["totals"]["gpus"] == 16
    assert {r["group"]: r["gpus"] for r in data["rows"]}["h100"] == 16
    assert 0 <= data["totals"]["used_pct"] <= 100


def test_sacct_failure_is_exit_3(devcluster, tmp_path):
    """A broken accounting connection is a clear exit-3 error, not a traceback."""
    bad_conf = tmp_path / "slurm.conf"
    text = open(devcluster.env["SLURM_CONF"]).read()
    # point sacct at a port where no slurmdbd listens
    lines = [
        ln
        for ln in text.splitlines()
        if not ln.startswith(("AccountingStoragePort", "AccountingStorageHost"))
    ]
    lines += ["AccountingStorageHost=127.0.0.1", "AccountingStoragePort=1"]
    bad_conf.write_text("\n".join(lines) + "\n")
    res = _slurmkit(
        devcluster,
        "report",
        "--last",
        "1h",
        env={"SLURM_CONF": str(bad_conf), "SLURMKIT_CONFIG": str(devcluster.config_path)},
        timeout=120,
    )
    assert res.returncode == 3, (res.returncode, res.stdout, res.stderr)
    assert "sacct" in res.stderr and "Traceback" not in res.stderr
