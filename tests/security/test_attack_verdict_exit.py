"""Attack: turn a decided FAIL into a pass through I/O (issue 10, rule 2).

The verdict is decided first; the state, the log, the metrics and the drain come after
it, best effort and bounded. A full disk, a held lock or a hung write may cost the
record, never the exit code, and the watchdog exits with the decided code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from attack_helpers import REPO, fill, spawn_as_user


def test_full_state_and_log_disks_keep_the_fail(node, tmpfs):
    """Old: the Xid cursor write hit ENOSPC inside the check, the check became `unknown`
    and the prolog exited 0 with an Xid 79 on the node."""
    assert node.hook("prolog").returncode == 0  # the state files exist, as on a node in service
    for key in ("state_dir", "log_dir"):
        d = node.root / (key + "-full")
        tmpfs(d, size="64k")
        node.paths[key] = str(d)
    node.write_config()
    assert node.hook("prolog").returncode == 0
    for key in ("state_dir", "log_dir"):
        fill(node.root / (key + "-full"))
    node.add_xid(79)
    t0 = time.monotonic()
    res = node.hook("prolog", job_id="4243")
    assert res.returncode == 1, res.stderr
    assert "FAIL slurmkit:XID_79" in res.stderr
    assert time.monotonic() - t0 < 10


def test_a_user_locking_the_health_log_cannot_make_the_watchdog_pass_a_fail(node, unprivileged_users):
    """Old: the verdict was appended under a flock on the world-readable log itself; a user
    holding that lock stalled the prolog until the watchdog exited 0."""
    attacker, _ = unprivileged_users
    node.health["prolog_deadline"] = 2.0
    node.write_config()
    assert node.hook("prolog").returncode == 0  # creates the log
    hold = (
        "import fcntl, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)"
    )
    hog = spawn_as_user(attacker, hold, os.path.join(node.paths["log_dir"], "health.jsonl"))
    try:
        assert hog.stdout.readline().strip() == "locked", hog.stderr.read()
        node.add_xid(79)
        res = node.hook("prolog", job_id="4243")
        assert res.returncode == 1, res.stderr
    finally:
        hog.kill()
        hog.wait()


HANGING_METRICS = """
import sys, time
import slurmkit.hooks.gate as gate
import slurmkit.verdict.record as record
record.write_verdict_metrics = lambda *a, **k: time.sleep(600)  # a disk that never answers
if sys.argv[1] == "watchdog":
    gate.RECORD_TIMEOUT = 600.0  # let the hook's own watchdog be what ends it
gate.main("prolog")
"""


def _hook_with_hanging_metrics(node, mode: str) -> subprocess.CompletedProcess:
    env = node.env()
    argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), sys.executable, "-c", HANGING_METRICS, mode]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=str(REPO))


def test_a_hung_record_and_the_watchdog_keep_the_decided_fail(node):
    """Old: a write that never returned held the prolog until the watchdog, which exited 0
    (fail open) although FAIL had been decided."""
    node.health["prolog_deadline"] = 2.0
    node.write_config()
    node.add_xid(79)
    res = _hook_with_hanging_metrics(node, "bounded")
    assert res.returncode == 1, res.stderr
    res = _hook_with_hanging_metrics(node, "watchdog")
    assert res.returncode == 1, res.stderr
    assert "watchdog fired" in res.stderr


def test_a_fifo_in_place_of_the_health_log_cannot_hang_the_verdict(node):
    """A slow or wedged log (here a FIFO nobody reads) costs the record, not the FAIL."""
    node.health["prolog_deadline"] = 2.0
    node.write_config()
    os.makedirs(node.paths["log_dir"], exist_ok=True)
    os.mkfifo(os.path.join(node.paths["log_dir"], "health.jsonl"))
    node.add_xid(79)
    t0 = time.monotonic()
    res = node.hook("prolog")
    assert res.returncode == 1, res.stderr
    assert time.monotonic() - t0 < 10


def test_the_sweep_drains_before_it_records_into_a_full_store(node, tmpfs):
    """Old: `store.record` raised ENOSPC before the drain: a node the sweep found broken
    stayed in service."""
    from slurmkit.config import load_site_config
    from slurmkit.slurm import runner
    from slurmkit.slurm.runner import Result
    from slurmkit.sweep.runnode import run_node
    from slurmkit.verdict.base import Action, CheckResult, Status

    store = tmpfs(node.root / "store", size="64k")
    node.paths["shared_dir"] = str(store)
    node.write_config()
    (node.root / "sweep.yaml").write_text(node.config.read_text() + "sweep: {storage: {enabled: false}}\n")
    fill(store)
    calls = []

    def fake(argv, timeout, input, env):
        calls.append(list(argv))
        return Result(list(argv), 0, "", "", 0.0)

    def heavy(site_cfg, name, checks):
        return [CheckResult("gpu_ecc", Status.FAIL, "GPU_ECC_UNCORRECTED", "2 errors on GPU 3", Action.RESET)]

    previous = runner.set_runner(fake)
    try:
        run = run_node(load_site_config(str(node.root / "sweep.yaml")), "node1", "r1", "h100", heavy=heavy)
    finally:
        runner.set_runner(previous)
    drains = [c for c in calls if "update" in c and "State=DRAIN" in c]
    assert drains and drains[0][-1].startswith("Reason=slurmkit:GPU_ECC_UNCORRECTED")
    assert run.record_error and run.status is Status.FAIL
