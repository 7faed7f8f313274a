"""Which processes are a job's, and signalling only the process that was judged.

Job scoping by cgroup reads ``/proc/<pid>/cgroup`` text in Slurm's own layout, anchored at
the root of each hierarchy (here from hand-made file contents, the attack names among
them); the signal step re-checks start time and uid (pidfd where the kernel has one).
Processes here are real, run as uid 65534 (nobody)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import replace

import pytest

from slurmkit.hooks import procs
from slurmkit.hooks.procs import CgroupJob, slurm_cgroup_job

NOBODY = 65534

V1_NODE1 = """12:pids:/slurm_node1/uid_1001/job_42/step_batch/task_0
11:freezer:/slurm_node1/uid_1001/job_42/step_batch/task_0
4:memory:/slurm_node1/uid_1001/job_42/step_batch/task_0
1:cpu:/
0::/
"""


@pytest.mark.parametrize(
    "text,node,expected",
    [
        # Slurm's real layouts
        (V1_NODE1, "node1", CgroupJob("42", 1001, "v1")),
        (V1_NODE1, None, CgroupJob("42", 1001, "v1")),
        ("6:freezer:/slurm/uid_1001/job_42/step_0/task_3\n", "node1", CgroupJob("42", 1001, "v1")),
        ("6:freezer:/slurm/uid_1001/job_42\n", None, CgroupJob("42", 1001, "v1")),  # the job level itself
        ("0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n", "n1", CgroupJob("42", None, "v2")),
        (
            "0::/system.slice/n1_slurmstepd.scope/job_42/step_batch/user/task_0\n",
            "n1",
            CgroupJob("42", None, "v2"),
        ),
        # a directory under the user's own step may be named anything: only the job level counts
        ("6:freezer:/slurm_node1/uid_1001/job_42/step_0/job_7/x\n", "node1", CgroupJob("42", 1001, "v1")),
        ("0::/system.slice/slurmstepd.scope/job_42/step_0/user/job_7\n", None, CgroupJob("42", None, "v2")),
    ],
)
def test_slurms_own_layout_is_read(text, node, expected):
    assert slurm_cgroup_job(text, node) == expected


@pytest.mark.parametrize(
    "text,node",
    [
        # a user-made cgroup merely named job_<other job>: delegated subtrees, anywhere not anchored
        ("6:freezer:/user/alice/job_7\n", None),
        ("6:pids:/delegated-alice/job_7/step_0\n", None),
        ("0::/user.slice/user-1001.slice/user@1001.service/job_7\n", None),
        ("0::/user.slice/user-1001.slice/user@1001.service/app.slice/job_7/x\n", None),
        # Slurm's names one level down, under a user's tree
        ("6:freezer:/alice/slurm/uid_1002/job_7/step_0\n", None),
        ("6:freezer:/alice/slurm_node1/uid_1002/job_7\n", "node1"),
        ("0::/user.slice/system.slice/slurmstepd.scope/job_7\n", None),
        ("0::/alice/system.slice/slurmstepd.scope/job_7/step_0\n", None),
        # another slurmd's level when this node's is asked for
        ("6:freezer:/slurm_node2/uid_1002/job_7/step_0\n", "node1"),
        ("0::/system.slice/node2_slurmstepd.scope/job_7\n", "node1"),
        # malformed levels
        ("6:freezer:/slurm/uid_alice/job_7\n", None),
        ("6:freezer:/slurm/uid_1002/job_7x\n", None),
        ("6:freezer:/slurm/job_7\n", None),
        ("6:freezer:/slurmx/uid_1002/job_7\n", None),
        ("6:freezer:/slurm_/uid_1002/job_7\n", None),
        ("6:freezer:slurm/uid_1002/job_7\n", None),  # not absolute
        ("0::/system.slice/slurmstepd.scope/step_0/job_7\n", None),
        ("0::/system.slice/slurmstepd.scope\n", None),
        ("", None),
        ("garbage without colons\n", None),
        # the hierarchies disagree (never Slurm's doing): no proof either way
        ("6:freezer:/slurm/uid_1001/job_42/step_0\n4:memory:/slurm/uid_1001/job_7/step_0\n", None),
        ("6:freezer:/slurm/uid_1001/job_42/step_0\n4:memory:/slurm/uid_1002/job_42/step_0\n", None),
        ("6:freezer:/slurm/uid_1001/job_42/step_0\n0::/system.slice/slurmstepd.scope/job_7\n", None),
    ],
)
def test_a_directory_merely_named_job_proves_nothing(text, node):
    assert slurm_cgroup_job(text, node) is None


def test_the_uid_level_must_be_the_processs_uid(monkeypatch):
    me = procs.read_proc(os.getpid())
    table = {me.pid: me}
    monkeypatch.setattr(procs, "cgroup_job", lambda pid, node=None: CgroupJob("7", me.uid, "v1"))
    assert procs.owning_job(me.pid, table) == "7"
    monkeypatch.setattr(procs, "cgroup_job", lambda pid, node=None: CgroupJob("7", me.uid + 1, "v1"))
    assert procs.proven_cgroup_job(me.pid, table) is None
    assert procs.owning_job(me.pid, table) is None  # no slurmstepd above a test process either
    monkeypatch.setattr(procs, "cgroup_job", lambda pid, node=None: CgroupJob("7", None, "v2"))
    assert procs.owning_job(me.pid, table) == "7"


def _tree(root, rel, pids):
    d = root / rel
    d.mkdir(parents=True)
    (d / "cgroup.procs").write_text("".join(f"{p}\n" for p in pids))


def test_job_cgroup_pids_read_only_the_anchored_directories(tmp_path):
    _tree(tmp_path, "freezer/slurm_node1/uid_1001/job_42/step_batch/task_0", [101])
    _tree(tmp_path, "memory/slurm/uid_1001/job_42/step_0/task_0", [102])
    _tree(tmp_path, "unified/system.slice/slurmstepd.scope/job_42/step_0/user/task_0", [103])
    _tree(tmp_path, "system.slice/node1_slurmstepd.scope/job_42/step_0/user/task_0", [104])
    # the attacks: a user's cgroup named job_42, Slurm's names below a user's tree, another
    # user's level, another slurmd's level
    _tree(tmp_path, "pids/alice/job_42", [201])
    _tree(tmp_path, "pids/alice/slurm/uid_1001/job_42", [202])
    _tree(tmp_path, "freezer/slurm_node1/uid_1002/job_42/step_0", [203])
    _tree(tmp_path, "freezer/slurm_node2/uid_1001/job_42/step_0", [204])
    _tree(tmp_path, "unified/user.slice/user@1001.service/job_42", [205])
    _tree(tmp_path, "freezer/slurm_node1/uid_1001/job_420/step_0", [206])
    got = procs.cgroup_job_pids("42", 1001, "node1", cgroup_root=str(tmp_path))
    assert got == {101, 102, 103, 104}
    # without the uid each uid_<number> level of this node counts (the epilog always has it)
    assert procs.cgroup_job_pids("42", None, "node1", cgroup_root=str(tmp_path)) == {101, 102, 103, 104, 203}
    assert procs.cgroup_job_pids("../42", 1001, "node1", cgroup_root=str(tmp_path)) == set()


def test_job_cgroup_pids_stop_at_the_deadline(tmp_path):
    _tree(tmp_path, "freezer/slurm/uid_1001/job_42/step_0", [101])
    assert procs.cgroup_job_pids("42", 1001, None, str(tmp_path), deadline=time.monotonic() - 1) == set()


# ---------------------------------------------------------------------- environments


def _environ_started(pid: int) -> bool:
    with open(f"/proc/{pid}/environ", "rb") as fh:
        return bool(fh.read(1))


def _sleeper(env):
    p = subprocess.Popen(["/bin/sleep", "30"], env=env)  # the environment in this order
    deadline = time.monotonic() + 5
    while not _environ_started(p.pid):  # the loader sets the environment's place after exec
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return p


def _filler(name: str, kib: int) -> dict:
    """``kib`` KiB of variables (one string may be at most 128 KiB: MAX_ARG_STRLEN)."""
    out, left, i = {}, kib * 1024, 0
    while left > 0:
        key = f"{name}{i}"
        size = min(left, 32 * 1024)
        out[key] = "x" * max(0, size - len(key) - 2)  # '=' and NUL count too
        left -= size
        i += 1
    return out


def test_environ_reads_only_the_first_chunk():
    p = _sleeper({"SLURM_JOB_ID": "77", "BIG": "x" * (100 * 1024), "LATE": "1"})
    try:
        got = procs.environ(p.pid)
        assert got == {"SLURM_JOB_ID": "77"}  # BIG is cut off mid-value: dropped, never half a value
        assert procs.environ(p.pid, max_bytes=1 << 20)["LATE"] == "1"
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize(
    "before_kib,found", [(0, True), (100, True), (127, True), (129, False), (1000, False)]
)
def test_the_job_id_is_read_up_to_itself_and_never_past_the_cap(monkeypatch, before_kib, found):
    """Slurm's variables come after the submission environment (often over 8 KiB with
    environment modules): read on to the job id, in 8 KiB reads, never past 128 KiB."""
    env = _filler("BIG", before_kib)
    env["SLURM_JOB_ID"] = "77"
    env.update(_filler("AFTER", 300))
    p = _sleeper(env)
    reads = []
    real_read = os.read

    def counting_read(fd, n):
        data = real_read(fd, n)
        reads.append(len(data))
        return data

    try:
        monkeypatch.setattr(procs.os, "read", counting_read)
        assert procs.environ_job_id(p.pid) == ("77" if found else None)
        monkeypatch.setattr(procs.os, "read", real_read)
        assert max(reads) <= procs.ENVIRON_CHUNK
        assert sum(reads) <= procs.ENVIRON_MAX_BYTES
        if found:  # stopped at the job id, not at the end of the 300 KiB after it
            assert sum(reads) <= before_kib * 1024 + 2 * procs.ENVIRON_CHUNK
    finally:
        p.kill()
        p.wait()


def test_environ_scan_stops_at_its_deadline_and_says_so():
    me = procs.read_proc(os.getpid())
    table = [replace(me, uid=4321)] * 5
    res = procs.environ_job_pids("1", 4321, table, deadline=time.monotonic() - 1)
    assert res == set() and res.out_of_time and res.looked_at == 0 and res.of == 5
    res = procs.environ_job_pids("1", 4321, table, deadline=time.monotonic() + 60)
    assert not res.out_of_time and res.looked_at == 5


# ---------------------------------------------------------------------- the signal step


def test_still_same_needs_start_time_and_uid():
    me = procs.read_proc(os.getpid())
    assert procs.still_same(me, procs.read_proc(me.pid))
    assert not procs.still_same(replace(me, start=me.start - 1), procs.read_proc(me.pid))  # pid reused
    assert not procs.still_same(replace(me, uid=me.uid + 1), procs.read_proc(me.pid))
    assert not procs.still_same(me, None)


def _nobody(argv):
    return subprocess.Popen(argv, user=NOBODY, group=NOBODY, start_new_session=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another user")
@pytest.mark.parametrize("pidfd", [True, False])
def test_a_stale_identity_is_refused_and_the_process_now_at_that_pid_lives(monkeypatch, pidfd):
    """The judged process is gone and its pid now names another process (a reused pid,
    simulated by judging an earlier start time for a live pid): nothing is signalled."""
    if not pidfd:
        monkeypatch.setattr(procs, "_pidfd_open", lambda pid: None)
    victim = _nobody(["/bin/sleep", "60"])
    try:
        time.sleep(0.1)
        now = procs.read_proc(victim.pid)
        for stale in (replace(now, start=now.start - 5), replace(now, uid=1001)):
            res = procs.kill_with_grace([stale], 0.3)
            assert res["refused"] == [victim.pid], res
            assert res["terminated"] == res["killed"] == []
            assert victim.poll() is None
        res = procs.kill_with_grace([now], 0.3)  # the judged process itself: killed
        assert res["terminated"] == [victim.pid]
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another user")
def test_a_judged_process_that_exited_is_gone_not_signalled():
    p = _nobody(["/bin/sleep", "60"])
    judged = procs.read_proc(p.pid)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()  # reaped: the pid is free for the kernel to hand out again
    res = procs.kill_with_grace([judged], 0.2)
    assert res["gone"] == [judged.pid] and res["refused"] == [] and res["terminated"] == []


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfd here")
def test_a_pidfd_signal_never_follows_the_pid():
    """Once a target holds a pidfd, a signal after the process exits reaches nobody."""
    p = subprocess.Popen(["/bin/sleep", "60"])
    target, why = procs._Target.open(procs.read_proc(p.pid))
    assert target is not None and target.fd is not None, why
    try:
        p.kill()
        p.wait()
        assert target.send(signal.SIGTERM) == "gone"
    finally:
        target.close()
