"""Attack: slip a job onto a GPU with a fresh Xid (issue 10, rule 9).

An Xid is read from the kernel log once (the cursor moves past it), but every prolog on
the node must fail on it until an admin's resume: a user who starts several jobs at
once, or simply the next job, must never get the node because another prolog consumed
the event.
"""

from __future__ import annotations

import concurrent.futures

import pytest


def test_the_next_prolog_still_fails_after_another_consumed_the_xid(node):
    """Old: the second prolog found no new event past the cursor and passed."""
    node.add_xid(79)
    assert node.hook("prolog", job_id="100").returncode == 1
    res = node.hook("prolog", job_id="101")
    assert res.returncode == 1, res.stderr
    assert "XID_79" in node.records()[-1]["drain_reason"]
    assert node.hook("healthcheck").returncode != 0  # HealthCheckProgram agrees


def test_every_concurrent_prolog_fails(node):
    """Old: of several prologs started together, exactly one judged the Xid (the one that
    took the cursor lock first); the others let their jobs onto the broken GPU."""
    node.add_xid(79)
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        codes = list(pool.map(lambda j: node.hook("prolog", job_id=str(200 + j)).returncode, range(6)))
    assert codes == [1] * 6, codes


def test_resume_clears_the_sticky_xid(node):
    """The sticky failure lasts until `slurmkit node resume` (the admin's word that the GPU
    was repaired), and no longer."""
    from slurmkit.config import load_site_config
    from slurmkit.hooks.nodeops import guarded_resume
    from slurmkit.slurm import runner
    from slurmkit.slurm.runner import Result

    node.add_xid(79)
    assert node.hook("prolog", job_id="300").returncode == 1
    assert node.hook("prolog", job_id="301").returncode == 1
    drained = "NodeName=node1 State=IDLE+DRAIN Reason=slurmkit:XID_79_xid"
    calls = []

    def fake(argv, timeout, input, env):
        calls.append(list(argv))
        if "show" in argv:
            return Result(list(argv), 0, drained, "", 0.0)
        return Result(list(argv), 0, "", "", 0.0)

    cfg = load_site_config(str(node.config))
    previous = runner.set_runner(fake)
    try:
        report = guarded_resume("node1", cfg.section("health"), cfg.section("paths"))
    finally:
        runner.set_runner(previous)
    assert report["action"] == "resumed", report
    assert report["xid_cleared"] == 1
    assert node.hook("prolog", job_id="302").returncode == 0


@pytest.mark.parametrize("hook", ["epilog", "healthcheck"])
def test_other_hooks_see_the_sticky_xid_too(node, hook):
    node.add_xid(79)
    assert node.hook("prolog", job_id="400").returncode == 1
    assert node.hook(hook, job_id="400").returncode != 0
