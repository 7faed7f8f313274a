"""Attacks on job scoping and on the kill step (issue 24): what makes a process "a job's"
must be Slurm's doing, and a signal must reach the process that was judged.

* A cgroup a user made and named ``job_<another user's job>`` made a process "belong" to
  that job: kill-leaks spared the attacker's leak as part of a running job, and the
  attacker's epilog spared its own leftover as "another live job's". Here the attacker
  gets a delegated cgroup (as systemd's ``Delegate=yes`` gives ``user@<uid>.service``),
  makes ``job_<victim's job>`` in it and moves the process there herself.
* Without cgroup tracking, the kill step took the pid from its judgment and signalled
  whatever process had that pid at kill time: after pid reuse, another user's process.
* The epilog read every byte of every environment of the job's user: 130 processes with
  100 KiB environments; the epilog must stay in its budget, record, and kill them all.

No Slurm needed (root, real processes of unprivileged users, a real cgroup v1 hierarchy).
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from attack_helpers import HEALTHY, Node

from slurmkit.hooks import procs

CGROUP_V1_PIDS = Path("/sys/fs/cgroup/pids")


def _alive(pid: int) -> bool:
    p = procs.read_proc(pid)
    return p is not None and p.state != "Z"


def _uid(user: str) -> int:
    return pwd.getpwnam(user).pw_uid


def _wait_for(pred, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


@pytest.fixture
def delegated_cgroup(unprivileged_users):
    """``(attacker, dir)``: a pids-controller cgroup delegated to the attacker (owned by her),
    removed afterwards with everything in it."""
    if not (CGROUP_V1_PIDS / "cgroup.procs").exists():
        pytest.skip("no cgroup v1 pids hierarchy here")
    attacker, _ = unprivileged_users
    d = CGROUP_V1_PIDS / f"sk-deleg-{secrets.token_hex(4)}"
    d.mkdir()
    uid = _uid(attacker)
    for p in (d, d / "cgroup.procs", d / "tasks"):
        os.chown(p, uid, -1)
    try:
        yield attacker, d
    finally:
        for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            for pid in (sub / "cgroup.procs").read_text().split():
                try:
                    os.kill(int(pid), 9)
                except ProcessLookupError:
                    pass
        time.sleep(0.2)
        for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            sub.rmdir()
        d.rmdir()


def _start_in_own_cgroup(user: str, cgdir: Path, env: dict) -> tuple:
    """As ``user``: make ``cgdir``, move herself into it, then become ``sleep``. Returns
    ``(runuser Popen, pid of the sleep)``."""
    script = f"mkdir -p {cgdir} && echo $$ > {cgdir}/cgroup.procs && exec /bin/sleep 300"
    argv = ["runuser", "-u", user, "--", "/usr/bin/env", "-i", *[f"{k}={v}" for k, v in env.items()]]
    proc = subprocess.Popen([*argv, "/bin/sh", "-c", script], start_new_session=True)
    box = {}

    def started() -> bool:
        for name in os.listdir("/proc"):
            if name.isdigit():
                p = procs.read_proc(int(name))
                if p is not None and p.ppid == proc.pid and p.comm == "sleep":
                    box["pid"] = p.pid
                    return True
        return False

    _wait_for(started)
    _wait_for(lambda: str(box["pid"]) in (cgdir / "cgroup.procs").read_text().split())
    return proc, box["pid"]


def test_kill_leaks_kills_a_leak_in_a_user_made_cgroup_named_after_a_running_job(
    delegated_cgroup, unprivileged_users, tmp_path
):
    """Failed before: ``.../job_<id>/`` anywhere in /proc/<pid>/cgroup counted, so the leak
    was spared as part of the victim's running job."""
    from slurmkit.core.schema import defaults
    from slurmkit.health.backends.simulated import SimulatedBackend
    from slurmkit.health.config import SITE_SCHEMA
    from slurmkit.hooks import leaks

    attacker, cgroot = delegated_cgroup
    _, victim = unprivileged_users
    victims_job = "9102"
    runner, lpid = _start_in_own_cgroup(
        attacker, cgroot / f"job_{victims_job}", {"SLURM_JOB_ID": victims_job}
    )
    try:
        assert f"/job_{victims_job}" in Path(f"/proc/{lpid}/cgroup").read_text()
        data = yaml.safe_load(HEALTHY.read_text())
        data["gpus"][0]["processes"] = [{"pid": lpid, "used_mib": 79000}]
        fixture = tmp_path / "node1.yaml"
        fixture.write_text(yaml.safe_dump(data))
        h = defaults(SITE_SCHEMA)
        h["kill_grace"] = 0.5
        paths = {"log_dir": str(tmp_path / "log"), "metrics_dir": str(tmp_path / "metrics")}
        rep = leaks.kill_leaks(
            h,
            paths,
            "node1",
            dry_run=False,
            running={victims_job: _uid(victim)},
            backend=SimulatedBackend(str(fixture)),
        )
        assert [lk["pid"] for lk in rep["leaks"]] == [lpid], rep["spared"]
        _wait_for(lambda: not _alive(lpid), 5)
    finally:
        runner.kill()


@pytest.fixture
def node_layout():
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="sk-sec-", dir="/tmp"))
    os.chmod(root, 0o755)
    try:
        yield Node(root / "node")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _epilog_record(node: Node) -> dict:
    recs = [r for r in node.records() if r.get("hook") == "epilog"]
    assert recs, "the epilog wrote no record"
    return recs[-1]


def test_the_attackers_epilog_kills_its_leftover_that_hides_in_a_cgroup_named_after_the_victims_job(
    delegated_cgroup, node_layout
):
    """Failed before: the leftover (its environment says the attacker's job) sat in a
    user-made ``job_<victim's job>`` cgroup, was taken for the victim's live job and spared."""
    attacker, cgroot = delegated_cgroup
    node = node_layout
    node.health.update(kill_grace=0.5, clean_dev_shm=False)
    node.write_config()
    runner, lpid = _start_in_own_cgroup(attacker, cgroot / "job_9202", {"SLURM_JOB_ID": "9201"})
    try:
        res = node.hook(
            "epilog",
            SLURM_JOB_ID="9201",
            SLURM_JOB_UID=str(_uid(attacker)),
            SLURM_JOB_USER=attacker,
            SLURM_JOB_GPUS="",
            SLURM_SCRIPT_CONTEXT="epilog_slurmd",
        )
        assert res.returncode == 0, res.stderr
        cleanup = _epilog_record(node)["cleanup"]
        assert cleanup["spared_other_jobs"] == {}, cleanup
        assert lpid in cleanup["terminated"] + cleanup["killed"], cleanup
        _wait_for(lambda: not _alive(lpid), 5)
    finally:
        runner.kill()


def test_the_epilog_never_signals_a_process_that_took_a_judged_pid(unprivileged_users, monkeypatch, tmp_path):
    """Pid reuse, made deterministic: the epilog judged the attacker's leftover at a pid that,
    by the time of the kill, names the victim's process (same pid, later start time, other
    uid). Failed before: the kill step re-read the pid at kill time and killed the victim."""
    from slurmkit.core.schema import defaults
    from slurmkit.health.config import SITE_SCHEMA
    from slurmkit.health.engine import Context
    from slurmkit.hooks import epilog

    attacker, victim = unprivileged_users
    vproc = subprocess.Popen(["runuser", "-u", victim, "--", "/bin/sleep", "300"], start_new_session=True)
    try:
        vpid = None

        def started() -> bool:
            nonlocal vpid
            for name in os.listdir("/proc"):
                p = procs.read_proc(int(name)) if name.isdigit() else None
                if p is not None and p.ppid == vproc.pid and p.comm == "sleep":
                    vpid = p.pid
                    return True
            return False

        _wait_for(started)
        now = procs.read_proc(vpid)
        judged = replace(now, uid=_uid(attacker), start=now.start - 100)  # the attacker's, earlier
        real_iter = procs.iter_procs

        def table_with_the_judged_process(deadline=None):
            for p in real_iter() if deadline is None else real_iter(deadline):
                yield judged if p.pid == vpid else p

        monkeypatch.setattr(procs, "iter_procs", table_with_the_judged_process)
        found = getattr(procs, "Scanned", set)  # (a plain set before the fix: the test ran there too)
        monkeypatch.setattr(procs, "environ_job_pids", lambda *a, **k: found({vpid}))
        h = defaults(SITE_SCHEMA)
        h.update(kill_grace=0.3, clean_dev_shm=False)
        ctx = Context(health=h, paths={}, node="node1", hook="epilog", job_id="9301", job_uid=_uid(attacker))
        extra: dict = {}
        epilog.cleanup(ctx, time.monotonic() + 20, extra)
        time.sleep(0.2)
        assert _alive(vpid), "the epilog killed the victim's process through a reused pid"
        assert extra["cleanup"]["refused"] == [vpid]
    finally:
        vproc.kill()
        subprocess.run(["pkill", "-9", "-P", str(vproc.pid)], timeout=10)


def _start_leftovers(user: str, n: int, job_id: str, env_kib: int = 0) -> None:
    """As ``user``: ``n`` sleeps double-forked away (like daemons a job leaves behind), each
    with ``SLURM_JOB_ID=<job_id>`` and, with ``env_kib``, a variable of that many KiB after it
    (built by the shell, not passed in argv)."""
    big = f"BIG=$(head -c {env_kib * 1024} /dev/zero | tr '\\0' B); export BIG; " if env_kib else ""
    script = big + (
        f"i=0; while [ $i -lt {n} ]; do (/bin/sleep 300 </dev/null >/dev/null 2>&1 &); i=$((i+1)); done"
    )
    res = subprocess.run(
        ["runuser", "-u", user, "--", "/usr/bin/env", "-i", f"SLURM_JOB_ID={job_id}", "PATH=/usr/bin:/bin"]
        + ["/bin/sh", "-c", script],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-500:]


N_PROCS = 130
ENV_KIB = 100


def test_130_processes_with_100_kib_environments_bounded_recorded_killed(unprivileged_users, node_layout):
    """Issue 25: the epilog must finish inside its deadline, write its record, and kill every
    leftover. Failed before when the scan was slow enough (31 s on the audit machine; the
    watchdog exited 0 with nothing recorded and 130 survivors)."""
    attacker, _ = unprivileged_users
    node = node_layout
    deadline_s = 8.0
    node.health.update(kill_grace=1.0, clean_dev_shm=True, epilog_deadline=deadline_s)
    node.write_config()
    _start_leftovers(attacker, N_PROCS, "9401", env_kib=ENV_KIB)
    uid = _uid(attacker)

    def leftovers():
        return [p.pid for p in procs.iter_procs() if p.uid == uid and p.comm == "sleep" and p.state != "Z"]

    try:
        _wait_for(lambda: len(leftovers()) == N_PROCS, 30)
        with open(f"/proc/{leftovers()[0]}/environ", "rb") as fh:
            env = dict(item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)
        assert len(env[b"BIG"]) == ENV_KIB * 1024 and env[b"SLURM_JOB_ID"] == b"9401"
        t0 = time.monotonic()
        res = node.hook(
            "epilog",
            timeout=60,
            SLURM_JOB_ID="9401",
            SLURM_JOB_UID=str(uid),
            SLURM_JOB_USER=attacker,
            SLURM_JOB_GPUS="",
            SLURM_SCRIPT_CONTEXT="epilog_slurmd",
        )
        took = time.monotonic() - t0
        assert res.returncode == 0, res.stderr
        assert took < deadline_s + 2.0, f"the epilog took {took:.1f}s with a {deadline_s}s deadline"
        rec = _epilog_record(node)
        cleanup = rec["cleanup"]
        assert len(cleanup["terminated"]) + len(cleanup["killed"]) == N_PROCS, cleanup["steps"]
        assert set(cleanup["steps"]) >= {"scan", "gpu_processes", "kill", "dev_shm"}
        print(
            f"\n{N_PROCS} leftovers with {ENV_KIB} KiB environments: the epilog took {took:.2f}s "
            f"(scan {cleanup['steps']['scan']['seconds']:.2f}s, kill {cleanup['steps']['kill']['seconds']:.2f}s)"
        )
        _wait_for(lambda: not leftovers(), 5)
    finally:
        for pid in leftovers():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


def test_a_scan_out_of_time_is_recorded_and_what_was_found_is_still_killed(unprivileged_users, monkeypatch):
    """The scan's budget runs out (a slow /proc, simulated by a slow environment read):
    the cleanup stops scanning, records it, kills what it found and returns in its time."""
    from slurmkit.core.schema import defaults
    from slurmkit.health.config import SITE_SCHEMA
    from slurmkit.health.engine import Context
    from slurmkit.hooks import epilog

    attacker, _ = unprivileged_users
    uid = _uid(attacker)
    _start_leftovers(attacker, 10, "9501")

    def leftovers():
        return [p.pid for p in procs.iter_procs() if p.uid == uid and p.comm == "sleep" and p.state != "Z"]

    try:
        _wait_for(lambda: len(leftovers()) == 10)

        def slow(read):
            def reader(pid, *args, **kwargs):
                time.sleep(0.5)
                return read(pid, *args, **kwargs)

            return reader

        # every environment read is slow (raising=False: the job-id reader is new with the fix)
        monkeypatch.setattr(procs, "environ", slow(procs.environ))
        if hasattr(procs, "environ_job_id"):
            monkeypatch.setattr(procs, "environ_job_id", slow(procs.environ_job_id))
        h = defaults(SITE_SCHEMA)
        h.update(kill_grace=0.5, clean_dev_shm=False)
        ctx = Context(health=h, paths={}, node="node1", hook="epilog", job_id="9501", job_uid=uid)
        extra: dict = {}
        t0 = time.monotonic()
        results = epilog.cleanup(ctx, t0 + 5.0, extra)
        took = time.monotonic() - t0
        assert took < 5.0, f"cleanup took {took:.1f}s of a 5s budget"
        scan = extra["cleanup"]["steps"]["scan"]
        assert scan["out_of_time"] and 0 < scan["environ_read"] < 10, scan
        killed = extra["cleanup"]["terminated"] + extra["cleanup"]["killed"]
        assert len(killed) == len(extra["cleanup"]["environ_pids"]) > 0
        assert results[0].status.value == "warn"
        assert "ran out" in results[0].reason
    finally:
        for pid in leftovers():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
