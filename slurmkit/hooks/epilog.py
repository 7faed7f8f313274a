"""What the epilog does besides the fast checks: kill leftovers, check GPU memory came
back, clean ``/dev/shm``, and escalate when the job's end points at hardware.

Leftovers are found three ways, because each misses something:

* the job's cgroup (when Slurm uses proctrack/cgroup), which catches everything the
  job started, double-forked daemons included: only the directories of Slurm's own
  layout (``slurm[_<node>]/uid_<job uid>/job_<id>`` at the root of each v1 hierarchy,
  ``system.slice/[<node>_]slurmstepd.scope/job_<id>`` on v2);
* processes of the job's uid whose environment carries ``SLURM_JOB_ID=<id>`` (no
  cgroup needed; a double-forked process keeps its environment; each is read only up
  to the job id, at most :data:`~slurmkit.hooks.procs.ENVIRON_MAX_BYTES`);
* processes of the job's uid computing on the job's GPUs, per the GPU backend (even a
  process that scrubbed its environment).

Only the job's own processes are signalled. The environment is the user's to write, so
it only ever narrows the search: a process found by environment or GPU is spared when
it provably belongs to another live job (that job's cgroup, or a ``slurmstepd`` of that
job above it), and another user's process on the job's GPUs (a shared node without
``ConstrainDevices=yes``) is reported, never killed. Root's processes are reported too.
Each signal goes to the process judged, never to a process that took its pid since
(:func:`~slurmkit.hooks.procs.kill_with_grace`).

Bounded by construction: the scan may use :data:`SCAN_SHARE` of the cleanup's time and
the GPU listing :data:`GPU_SHARE`; a step that reaches its budget stops, says so in the
record (``cleanup.steps.<step>.out_of_time``, and a WARN ``EPILOG_SCAN_OUT_OF_TIME``),
and the kill of what was found still happens, with the record after it.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from typing import Any, Dict, List, Optional

from slurmkit.verdict.base import Action, CheckResult, Status, Tier

#: Shares of the cleanup's time (its start to its deadline) that the process scan and the
#: GPU process listing may use at most: whatever a user makes slow, the kill, the record
#: and the rest of the epilog keep their time.
SCAN_SHARE = 0.3
GPU_SHARE = 0.2


def _job_gpu_indices(ctx) -> List[int]:
    return list(ctx.job_gpus or [])


def cleanup(ctx, deadline: float, extra: Dict[str, Any]) -> List[CheckResult]:
    """Kill the job's leftovers and check the GPUs' memory came back. Returns one or two results."""
    from slurmkit.health.backends import BackendError
    from slurmkit.health.deadline import ProbeTimeout, call_with_deadline
    from slurmkit.hooks import procs

    out: List[CheckResult] = []
    start = time.monotonic()
    if not ctx.job_id:
        return [
            CheckResult(
                "epilog_cleanup",
                Status.UNKNOWN,
                "NO_JOB",
                "no SLURM_JOB_ID in the environment",
                details={"internal": True},
            )
        ]
    if not ctx.job_id.isdigit():  # it goes into cgroup paths: never a pattern or a '..'
        return [
            CheckResult(
                "epilog_cleanup",
                Status.UNKNOWN,
                "BAD_JOB_ID",
                f"SLURM_JOB_ID {ctx.job_id!r} is not a number",
                details={"internal": True},
            )
        ]
    total = max(0.0, deadline - start)
    steps: Dict[str, Dict[str, Any]] = {}
    # 1. scan: the job's cgroups (the kernel's word), the process table, the environments
    scan_until = start + SCAN_SHARE * total
    cg = procs.cgroup_job_pids(ctx.job_id, ctx.job_uid, ctx.node, deadline=scan_until)
    table = {p.pid: p for p in procs.iter_procs(scan_until)}
    table_done = time.monotonic() < scan_until
    for pid in cg - set(table):  # the table may have stopped at the budget: the cgroup's pids still count
        p = procs.read_proc(pid)
        if p is not None:
            table[pid] = p
    envp = procs.environ_job_pids(ctx.job_id, ctx.job_uid, list(table.values()), deadline=scan_until)
    scan_out_of_time = envp.out_of_time or not table_done
    steps["scan"] = _step_record(
        start, scan_until, scan_out_of_time, environ_read=envp.looked_at, environ_candidates=envp.of
    )
    # 2. the job's GPUs: who computes there
    gpu_start = time.monotonic()
    gpu_until = gpu_start + GPU_SHARE * total
    gpu_pids: Dict[int, int] = {}
    root_on_gpu: List[int] = []
    others_on_gpu: List[int] = []
    indices = _job_gpu_indices(ctx)
    backend = None
    timeout = max(0.2, float(ctx.health["check_timeout"]))
    if indices:
        try:
            backend, _ = call_with_deadline(
                ctx.backend, max(0.2, min(timeout, gpu_until - time.monotonic())), "gpu_backend"
            )
            for i in indices:
                plist, _ = call_with_deadline(
                    lambda i=i: backend.processes(i),
                    max(0.2, min(timeout, gpu_until - time.monotonic())),
                    "gpu_processes",
                )
                for p in plist:
                    owner = table.get(p.pid) or procs.read_proc(p.pid)
                    if owner is not None:
                        table[p.pid] = owner
                    if owner is not None and owner.uid == 0:
                        root_on_gpu.append(p.pid)
                    elif owner is not None and (ctx.job_uid is None or owner.uid != ctx.job_uid):
                        others_on_gpu.append(p.pid)  # another user's: never ours to kill
                    else:
                        gpu_pids[p.pid] = i
        except ProbeTimeout as exc:
            ctx.backend_hung_in = exc.name
            out.append(
                CheckResult(
                    "epilog_cleanup",
                    Status.FAIL,
                    "CHECK_TIMEOUT",
                    f"GPU backend hung listing processes ({exc})",
                    Action.REBOOT,
                )
            )
            backend = None
        except BackendError as exc:
            out.append(
                CheckResult(
                    "epilog_cleanup",
                    Status.FAIL if exc.hardware else Status.UNKNOWN,
                    exc.code,
                    str(exc),
                    Action.RESET if exc.hardware else Action.NONE,
                    details={"internal": not exc.hardware},
                )
            )
            backend = None
    steps["gpu_processes"] = _step_record(gpu_start, gpu_until, False)
    # The cgroup is the kernel's word; environment and GPU finds must not belong to another live job.
    other_jobs: Dict[int, str] = {}
    for pid in (envp | set(gpu_pids)) - cg:
        owner_job = procs.owning_job(pid, table)  # any slurmd's job on this host, by Slurm's layout
        if owner_job is not None and owner_job != ctx.job_id:
            other_jobs[pid] = owner_job
    found = (cg | envp | set(gpu_pids)) - set(other_jobs)
    # 3. the kill: always runs, on what was found, each signal to the process judged here
    targets = [table[pid] for pid in sorted(found) if pid in table and table[pid].uid != 0]
    kill_start = time.monotonic()
    grace = min(float(ctx.health["kill_grace"]), max(0.0, deadline - kill_start - 2.0))
    outcome = (
        procs.kill_with_grace(targets, grace)
        if targets
        else {"terminated": [], "killed": [], "survivors": [], "gone": [], "refused": []}
    )
    steps["kill"] = _step_record(kill_start, kill_start + grace + 1.5, False)
    details = {
        "cgroup_pids": sorted(cg),
        "environ_pids": sorted(envp),
        "gpu_pids": sorted(gpu_pids),
        "root_on_gpu": sorted(root_on_gpu),
        "other_users_on_gpu": sorted(others_on_gpu),
        "spared_other_jobs": {str(k): v for k, v in sorted(other_jobs.items())},
        **outcome,
        "steps": steps,
    }
    extra["cleanup"] = details
    if outcome["survivors"]:
        out.append(
            CheckResult(
                "epilog_cleanup",
                Status.FAIL,
                "EPILOG_UNKILLABLE",
                f"process(es) {','.join(map(str, outcome['survivors']))} survived SIGKILL",
                Action.REBOOT,
                value=len(outcome["survivors"]),
                details=details,
            )
        )
    else:
        n = len(outcome["terminated"]) + len(outcome["killed"])
        text = (
            f"killed {n} leftover process(es) of job {ctx.job_id}"
            + (f" ({len(outcome['killed'])} needed SIGKILL)" if outcome["killed"] else "")
            if n
            else f"no leftovers of job {ctx.job_id}"
        )
        if scan_out_of_time:  # a user can make the scan slow: a WARN to look at, never a drain
            text += (
                f"; the process scan ran out of its {SCAN_SHARE * total:.1f}s "
                f"(environments of {envp.looked_at} of {envp.of} processes read)"
            )
        code = "EPILOG_KILLED_LEFTOVERS" if n else ("EPILOG_SCAN_OUT_OF_TIME" if scan_out_of_time else "OK")
        out.append(
            CheckResult(
                "epilog_cleanup",
                Status.WARN if n or scan_out_of_time else Status.OK,
                code,
                text,
                Action.MONITOR if n or scan_out_of_time else Action.NONE,
                value=n,
                unit="processes",
                details=details,
            )
        )
    if backend is not None and indices:
        mem_start = time.monotonic()
        out.append(_memory_back(ctx, backend, indices, deadline))
        steps["gpu_memory"] = _step_record(mem_start, deadline - 0.5, False)
    if ctx.health.get("clean_dev_shm", True) and ctx.job_uid is not None and ctx.job_uid != 0:
        shm_start = time.monotonic()
        extra["dev_shm"] = clean_dev_shm(ctx.job_uid, ctx.job_id, deadline=deadline)
        steps["dev_shm"] = _step_record(shm_start, deadline, bool(extra["dev_shm"].get("out_of_time")))
    extra["cleanup_seconds"] = round(time.monotonic() - start, 3)
    return out


def _step_record(start: float, until: float, out_of_time: bool, **more: Any) -> Dict[str, Any]:
    """What a step of the cleanup leaves in the record: its seconds, its budget, whether it
    stopped at that budget."""
    now = time.monotonic()
    return {
        "seconds": round(now - start, 3),
        "budget": round(max(0.0, until - start), 3),
        "out_of_time": bool(out_of_time),
        **more,
    }


def _memory_back(ctx, backend, indices: List[int], deadline: float) -> CheckResult:
    """GPU memory on the job's GPUs must fall under the leftover threshold after the kill."""
    from slurmkit.health.deadline import ProbeTimeout, call_with_deadline
    from slurmkit.health.thresholds import thresholds_for

    names = {g.index: g.name for g in backend.gpus()}
    wait_until = min(deadline - 0.5, time.monotonic() + float(ctx.health["memory_release_wait"]))
    timeout = max(0.2, float(ctx.health["check_timeout"]))
    while True:
        used: Dict[int, float] = {}
        try:
            for i in indices:
                used[i], _ = call_with_deadline(lambda i=i: backend.memory_used_mib(i), timeout, "gpu_memory")
        except ProbeTimeout as exc:
            ctx.backend_hung_in = exc.name
            return CheckResult("gpu_memory_released", Status.FAIL, "CHECK_TIMEOUT", str(exc), Action.REBOOT)
        limit = {i: thresholds_for(ctx.health, names.get(i, ""))["leftover_memory_mib"] for i in used}
        over = {i: u for i, u in used.items() if u > limit[i]}
        if not over or time.monotonic() >= wait_until:
            break
        time.sleep(0.1)
    if over:
        return CheckResult(
            "gpu_memory_released",
            Status.FAIL,
            "GPU_MEMORY_NOT_RELEASED",
            "; ".join(f"GPU {i}: {u:.0f} MiB still in use" for i, u in sorted(over.items())),
            Action.RESET,
            value=max(over.values()),
            unit="MiB",
            details={str(k): v for k, v in used.items()},
        )
    return CheckResult(
        "gpu_memory_released",
        Status.OK,
        "OK",
        f"GPU(s) {','.join(map(str, indices))} memory released",
        value=max(used.values()) if used else 0,
        unit="MiB",
        details={str(k): v for k, v in used.items()},
    )


def other_jobs_of_user(uid: int, job_id: str, deadline: Optional[float] = None) -> Optional[List[str]]:
    """Job ids (from process environments, read up to the job id) of ``uid``'s other jobs
    still on this host; ``None`` when ``deadline`` came first (the answer is not known)."""
    from slurmkit.hooks import procs

    jobs = set()
    for p in procs.iter_procs(deadline):
        if deadline is not None and time.monotonic() >= deadline:
            return None
        if p.uid != uid or p.state == "Z":
            continue
        jid = procs.environ_job_id(p.pid)
        if jid and jid != job_id:
            jobs.add(jid)
    if deadline is not None and time.monotonic() >= deadline:
        return None
    return sorted(jobs)


def clean_dev_shm(
    uid: int, job_id: str, shm: str = "/dev/shm", deadline: Optional[float] = None
) -> Dict[str, Any]:
    """Remove ``uid``'s files and directories in ``/dev/shm`` when no other job of that user
    runs here. Only top-level entries owned by ``uid`` are touched.

    ``/dev/shm`` is writable by the user, who can swap any directory in it for a symlink
    while we walk: every step is therefore relative to a file descriptor opened without
    following links (``shutil.rmtree`` with ``dir_fd``, which Python guarantees safe
    against symlink attacks where ``shutil.rmtree.avoids_symlink_attacks``); nothing is
    ever deleted by path name. Where that guarantee is missing the cleanup is skipped, and
    so it is when ``deadline`` comes before it is known that no other job of the user runs
    here (``out_of_time``); it also stops removing at ``deadline``.
    """
    others = other_jobs_of_user(uid, job_id, deadline)
    if others is None:
        return {
            "skipped": "out of time before the user's other jobs were known",
            "removed": [],
            "out_of_time": True,
        }
    if others:
        return {"skipped": f"other job(s) of uid {uid} still here: {','.join(others)}", "removed": []}
    if not shutil.rmtree.avoids_symlink_attacks:
        return {"skipped": "shutil.rmtree is not safe against symlink attacks here", "removed": []}
    removed: List[str] = []
    errors: List[str] = []
    try:
        dfd = os.open(shm, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        return {"skipped": f"{shm}: {exc.strerror}", "removed": []}
    try:
        with os.scandir(dfd) as it:
            entries = [e.name for e in it]
        for name in entries:
            if deadline is not None and time.monotonic() >= deadline:
                return {"removed": removed, "errors": errors, "out_of_time": True}
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except OSError:
                continue
            if st.st_uid != uid:
                continue
            try:
                if stat.S_ISDIR(st.st_mode):
                    # refuses a name that became a symlink since the stat, and never leaves the tree
                    shutil.rmtree(name, dir_fd=dfd)
                else:
                    os.unlink(name, dir_fd=dfd)  # a symlink itself, never its target
                removed.append(name)
            except OSError as exc:
                errors.append(f"{name}: {exc.strerror or exc}")
    finally:
        os.close(dfd)
    return {"removed": removed, "errors": errors}


# ---------------------------------------------------------------------- escalation


def parse_exit(text: Optional[str]) -> Optional[tuple]:
    """``"3:0"`` -> ``(3, 0)`` (code, signal); ``"9"`` -> ``(9, 0)``; unparsable -> ``None``."""
    if not text:
        return None
    a, sep, b = text.strip().partition(":")
    try:
        return (int(a), int(b) if sep else 0)
    except ValueError:
        return None


#: Fast checks whose FAIL is hardware evidence a job's user cannot produce: the GPU
#: driver (NVML) reports it, not the job.
HARDWARE_EVIDENCE_CHECKS = ("gpu_ecc", "gpu_memory_errors", "gpu_count", "nvlink_state")


def exit_hints(ctx) -> List[str]:
    """The job's exit (signal or code) that the site says may point at hardware.

    Only a hint: the job's user chooses how the job ends (``kill -BUS $$`` gives
    signal 7), so it never triggers escalation by itself; see :func:`escalation_triggers`.
    """
    esc = ctx.health["escalation"]
    why = []
    for var in ("SLURM_JOB_EXIT_CODE2", "SLURM_JOB_DERIVED_EC"):
        parsed = parse_exit(ctx.env.get(var))
        if parsed is None:
            continue
        code, sig = parsed
        if sig and sig in esc["exit_signals"]:
            why.append(f"{var}={ctx.env[var]} (signal {sig})")
        elif code and code in esc["exit_codes"]:
            why.append(f"{var}={ctx.env[var]} (exit code {code})")
    return sorted(set(why))


def escalation_triggers(ctx, results: List[CheckResult]) -> List[str]:
    """Hardware evidence, from the driver and the kernel, that this node needs more than a
    drain (empty: none). Evidence is what the job's user cannot fake: new Xids at or
    above ``escalation.xid_min_action`` (kernel log), a failed ECC, retired-page, GPU
    count or NVLink check, or a GPU backend that hung (NVML)."""
    from slurmkit.health.checks import xid as xidmod

    esc = ctx.health["escalation"]
    why = []
    for r in results:
        if r.status == Status.FAIL and r.check in HARDWARE_EVIDENCE_CHECKS:
            why.append(f"{r.check}: {r.code}")
    if ctx.backend_hung_in:
        why.append(f"GPU backend hung in {ctx.backend_hung_in}")
    if ctx.xid_events_seen:
        configured = ctx.params("xid").get("table")
        table = xidmod.load_table(None if xidmod.table_problem(configured) else configured)
        floor = Action(esc["xid_min_action"]).severity
        for e in ctx.xid_events_seen:
            act = table.action(
                int(e["xid"]), e.get("message", ""), ctx.params("xid").get("unknown_action", "monitor")
            )
            if act.severity >= floor:
                why.append(f"Xid {e['xid']} on GPU {e.get('gpu')} -> {act.value}")
    return sorted(set(why))


def escalate(ctx, results: List[CheckResult], extra: Dict[str, Any]) -> List[CheckResult]:
    evidence = escalation_triggers(ctx, results)
    hints = exit_hints(ctx)
    mode = ctx.health["escalation"]["action"]
    if not evidence:
        if not hints:
            return []
        extra["escalation"] = {"why": [], "hints": hints, "action": "none"}
        return [
            CheckResult(
                "escalation",
                Status.OK,
                "ESCALATION_NO_EVIDENCE",
                f"job exit ({'; '.join(hints)}) suggests hardware, but no Xid, ECC or NVML evidence; "
                "not escalating",
                details={"hints": hints},
            )
        ]
    why = evidence + hints
    extra["escalation"] = {"why": why, "evidence": evidence, "hints": hints, "action": mode}
    if mode == "none":
        return [
            CheckResult(
                "escalation",
                Status.WARN,
                "ESCALATION_SUGGESTED",
                "hardware suspected (" + "; ".join(why) + "); escalation.action is none",
                Action.MONITOR,
            )
        ]
    if mode == "reboot":
        from slurmkit.slurm import client

        reason = f"slurmkit:ESCALATION_REBOOT epilog: {'; '.join(why)}"[:200]
        try:
            client.call(
                "scontrol",
                ["reboot", "ASAP", "nextstate=RESUME", f"reason={reason}", ctx.node],
                timeout=float(ctx.health["drain_timeout"]),
            )
            extra["reboot_requested"] = True
            return [
                CheckResult(
                    "escalation",
                    Status.WARN,
                    "ESCALATION_REBOOT",
                    f"requested scontrol reboot ASAP nextstate=RESUME ({'; '.join(why)})",
                    Action.REBOOT,
                )
            ]
        except Exception as exc:
            return [
                CheckResult(
                    "escalation",
                    Status.FAIL,
                    "ESCALATION_REBOOT_FAILED",
                    f"reboot request failed ({exc}); draining instead: {'; '.join(why)}",
                    Action.REBOOT,
                )
            ]
    # heavy: run the heavy tier now, on this node, while it is COMPLETING (no new jobs land)
    from slurmkit.health.catalog import select
    from slurmkit.health.engine import run_checks

    deadline = time.monotonic() + float(ctx.health["escalation"]["heavy_deadline"])
    heavy = run_checks(ctx, select(Tier.HEAVY, "manual", health_cfg=ctx.health), deadline)
    return [
        CheckResult(
            "escalation",
            Status.OK,
            "ESCALATION_HEAVY",
            f"ran the heavy tier ({'; '.join(why)})",
            details={"checks": [r.check for r in heavy]},
        )
    ] + heavy
