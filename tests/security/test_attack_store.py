"""Attack: the shared verdict store (issue 10, rules 1, 3 and 4).

A verdict drains a node, so only root's (or the sweep account's) verdict files are
believed. The store is shared storage: it is opened non-blocking, read under its own
short timeout, and a store that does not answer is UNKNOWN (fail open), never FAIL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from attack_helpers import REPO, as_user

VERDICT = {
    "version": 1,
    "node": "node1",
    "checks": {
        "nvlink_bandwidth": {
            "status": "fail",
            "code": "PWNED",
            "reason": "rm -rf / by order of the admin",
            "action": "isolate",
            "timestamp": 0,
            "valid_until": 4e9,
            "tier": "heavy",
        }
    },
}


def _ids(user):
    import pwd

    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


def _write_store(node, doc, mode=0o644, owner=None):
    store = node.root / "shared" / "verdicts"
    store.mkdir(parents=True, exist_ok=True)
    path = store / "node1.json"
    path.write_text(json.dumps(doc))
    os.chmod(path, mode)
    if owner:
        os.chown(path, *_ids(owner))
    return path


@pytest.mark.parametrize("how", ["owned by the attacker", "group/other-writable"])
def test_a_forged_verdict_is_ignored(node, unprivileged_users, how):
    """Old: any JSON file named <node>.json in the store failed the prolog (and drained
    the node) with a code and reason of the attacker's choice."""
    attacker, _ = unprivileged_users
    if how == "owned by the attacker":
        _write_store(node, VERDICT, owner=attacker)
    else:
        _write_store(node, VERDICT, mode=0o666)
    res = node.hook("prolog")
    rec = node.records()[-1]
    assert res.returncode == 0, res.stderr
    assert node.result(rec, "heavy_cache")["status"] == "ok"
    assert "PWNED" not in res.stderr
    assert any("node1.json" in u for u in rec["untrusted_files"])
    metrics = (node.root / "metrics" / "slurmkit_health_prolog_node1.prom").read_text()
    assert 'slurmkit_health_untrusted_files{hook="prolog",node="node1"} 1.0' in metrics


def test_a_verdict_of_the_configured_sweep_account_is_believed(node, unprivileged_users):
    """The other side of the rule: ``paths.shared_owner`` is trusted (here, for the test,
    the victim account plays the sweep account)."""
    _, sweeper = unprivileged_users
    doc = json.loads(json.dumps(VERDICT))
    doc["checks"]["nvlink_bandwidth"]["code"] = "NVLINK_BW_FLOOR"
    _write_store(node, doc, owner=sweeper)
    node.paths["shared_owner"] = sweeper
    node.write_config()
    res = node.hook("prolog")
    assert res.returncode == 1 and "slurmkit:NVLINK_BW_FLOOR heavy_cache" in res.stderr, res.stderr


def test_drain_reason_from_a_verdict_is_sanitised(node):
    """Even a trusted verdict cannot put newlines, control characters or ``key=value``
    lookalikes into the code, or anything but one printable line into the reason."""
    doc = json.loads(json.dumps(VERDICT))
    doc["checks"]["nvlink_bandwidth"].update(code="X\nState=IDLE Reason=ok", reason="a\x1b[31m\nb\x00c")
    _write_store(node, doc)
    res = node.hook("prolog")
    assert res.returncode == 1
    reason = node.records()[-1]["drain_reason"]
    assert reason.startswith("slurmkit:XStateIDLEReasonok heavy_cache: ")
    assert all(" " <= ch <= "~" for ch in reason), repr(reason)


def test_a_fifo_in_place_of_a_verdict_neither_blocks_nor_fails(node):
    """Old: open() of a FIFO blocked until the check timed out: CHECK_TIMEOUT, FAIL, drain,
    on every node that started a job."""
    store = node.root / "shared" / "verdicts"
    store.mkdir(parents=True)
    os.mkfifo(store / "node1.json")
    t0 = time.monotonic()
    res = node.hook("prolog")
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 < 10
    assert node.result(node.records()[-1], "heavy_cache")["status"] in ("ok", "unknown")


STUCK_NFS = """
import builtins, os, sys, threading
store = sys.argv[1]
forever = threading.Event()
real_open, real_os_open, real_lstat, real_stat = builtins.open, os.open, os.lstat, os.stat

def stuck(path):
    return str(getattr(path, "__fspath__", lambda: path)()).startswith(store)

def hang(real):
    def call(path, *a, **k):
        if stuck(path):
            forever.wait()  # a hard NFS mount whose server went away: the call never returns
        return real(path, *a, **k)
    return call

builtins.open, os.open = hang(real_open), hang(real_os_open)
os.lstat, os.stat = hang(real_lstat), hang(real_stat)
from slurmkit.hooks.gate import main
main("prolog")
"""


def test_a_hung_store_is_unknown_not_a_drain(node):
    """Old: a store that does not answer made heavy_cache time out, which counted as FAIL:
    every node that started a job drained itself."""
    store = node.root / "shared" / "verdicts"
    store.mkdir(parents=True)
    env = node.env()
    argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), sys.executable, "-c", STUCK_NFS, str(store)]
    t0 = time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=str(REPO))
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    r = node.result(node.records()[-1], "heavy_cache")
    assert r["status"] == "unknown" and r["code"] == "STORE_UNREACHABLE", r
    assert r["seconds"] < 1.5  # its own short timeout (store_timeout 1 s), not the 2 s check timeout
    assert took < 10


HOLD_STORE_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(120)
"""

RECORD = """
import sys
import slurmkit.verdict.store as store
from slurmkit.verdict.base import CheckResult, Status
store.LOCK_TIMEOUT = 1.0
try:
    store.VerdictStore(sys.argv[1]).record("node1", [CheckResult("x", Status.OK)], 60)
except TimeoutError as exc:
    print("timed out:", exc)
    sys.exit(3)
"""


def test_a_held_store_lock_times_out(node):
    """Old: ``lockf(LOCK_EX)`` without a timeout: a stuck holder (a crashed sweep on NFS, a
    lock manager that lost state) hung every writer for ever."""
    store = node.root / "shared" / "verdicts"
    store.mkdir(parents=True)
    hog = subprocess.Popen(
        [sys.executable, "-c", HOLD_STORE_LOCK, str(store / ".node1.lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert hog.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        res = subprocess.run(
            [sys.executable, "-c", RECORD, str(store)],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=str(REPO),
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
        assert res.returncode == 3 and "timed out" in res.stdout, (res.stdout, res.stderr)
        assert time.monotonic() - t0 < 10
    finally:
        hog.kill()
        hog.wait()


@pytest.mark.devcluster
def test_on_the_devcluster_a_user_cannot_forge_a_verdict_that_drains_a_node(devcluster, unprivileged_users):
    """Old: the devcluster's store was 1777; a user's <node>.json drained the node that ran
    the next job, with the user's reason."""
    attacker, _ = unprivileged_users
    store = devcluster.state_dir / "shared" / "verdicts"
    forged = store / "node1.json"
    code = "import json, sys; json.dump(json.loads(sys.argv[2]), open(sys.argv[1], 'w'))"
    as_user(attacker, code, str(forged), json.dumps(VERDICT))
    job = None
    try:
        job = devcluster.submit("#!/bin/sh\ntrue\n", ["-w", "node1", "-o", "/dev/null"])
        deadline = time.monotonic() + 120
        state = None
        while time.monotonic() < deadline:
            reason = devcluster.node_reason("node1")
            assert "PWNED" not in reason and "rm -rf" not in reason, f"node1 drained by the forgery: {reason}"
            state = devcluster.sacct_state(job)
            if state and state.startswith("COMPLETED"):
                break
            time.sleep(1)
        assert state == "COMPLETED", state
        assert "drain" not in devcluster.node_state("node1")
    finally:
        if job:
            devcluster.run(["scancel", job])
        if forged.exists() and forged.stat().st_uid != 0:
            forged.unlink()
        if "PWNED" in devcluster.node_reason("node1"):
            devcluster.resume_all()


def test_forged_peers_cannot_make_a_healthy_node_an_outlier(node, unprivileged_users):
    """Old: peer documents a user wrote into the store counted in the fleet median: five
    forged "peers" at 900 GB/s made a healthy node at 400 GB/s an outlier, and with
    ``outliers.action: drain`` the sweep drained it."""
    from slurmkit.config import load_site_config
    from slurmkit.slurm import runner
    from slurmkit.slurm.runner import Result
    from slurmkit.sweep.runnode import run_node
    from slurmkit.verdict.base import CheckResult, Status

    attacker, _ = unprivileged_users
    store = node.root / "shared" / "verdicts"
    store.mkdir(parents=True)
    now = time.time()
    for i in range(5):
        doc = {
            "version": 1,
            "node": f"peer{i}",
            "checks": {},
            "last_pass": now - 60,
            "history": {"nvlink_bandwidth": [[now - 60, 900.0 + i, "r0"]]},
            "meta": {"gpu_model": "h100"},
        }
        path = store / f"peer{i}.json"
        path.write_text(json.dumps(doc))
        os.chown(path, *_ids(attacker))
    cfg_path = node.root / "sweep.yaml"
    cfg_path.write_text(
        node.config.read_text() + "sweep: {storage: {enabled: false}, "
        "outliers: {min_peers: 3, action: drain}}\n"
    )
    calls = []

    def fake(argv, timeout, input, env):
        calls.append(list(argv))
        return Result(list(argv), 0, "", "", 0.0)

    def heavy(site_cfg, name, checks):
        return [CheckResult("nvlink_bandwidth", Status.OK, "OK", "fine", value=400.0, unit="GB/s")]

    previous = runner.set_runner(fake)
    try:
        run = run_node(load_site_config(str(cfg_path)), "node1", "r1", "h100", heavy=heavy)
    finally:
        runner.set_runner(previous)
    assert run.drained is None and not [c for c in calls if "State=DRAIN" in c], run.to_dict()
    metrics = open(run.metrics_file).read()
    assert 'slurmkit_sweep_untrusted_files{node="node1"} 5.0' in metrics
