"""Per-job GPU efficiency, collected by the epilog with no metrics stack.

What is measured: NVML's per-process accounting (``nvmlDeviceGetAccountingStats``) on
each of the job's GPUs. For every process that ran there the driver keeps the percent
of its lifetime a kernel was running, its peak memory and how long its compute context
was active. The epilog reads it after the leftovers are killed (so every process has
ended and its time is final) and turns it into one small summary per GPU:

* ``u`` utilisation while the GPU had a process (time-weighted over its processes),
* ``t`` seconds the GPU had a process (union of the processes' lifetimes),
* ``b`` busy seconds (utilisation x time, summed over processes),
* ``m`` peak memory of the largest process (MiB), ``c`` the GPU's memory (MiB),
* ``p`` how many processes ran.

Accounting must be on before the job starts (``slurmkit health accounting --enable``,
root; the driver forgets it on unload): a GPU with it off says ``"a": "off"`` and reads
as *unknown* in reports, never as 0.

Which processes are the job's: the accounting buffer is per GPU and holds previous
jobs' processes too. Only a process that started at or after the job's start counts
(``SLURM_JOB_START_TIME`` where the release sets it in the epilog; on Slurm 22.05, which
does not, ``StartTime`` from one bounded ``scontrol show job``), and never one that is
still running as another user (its ``/proc`` entry, matched by start time). A per-GPU
cursor in ``paths.state_dir`` remembers the newest process start seen by the previous
epilog on that GPU; of the rest, processes that started after it count, plus any pid the
epilog itself found belonging to the job. Slurm gives a GPU to one job at a time, so
this is exact when ``ConstrainDevices=yes`` keeps jobs off GPUs they were not given; a
process of another user that started after the job and has ended cannot be told apart
without it.

Array tasks: each task's summary is written to ``<array job>_<task>`` (``sacctmgr``
addressing the raw id of the array's first task updates every task of the array). The
ids come from ``SLURM_ARRAY_JOB_ID``/``SLURM_ARRAY_TASK_ID`` where the epilog has them,
else from the same ``scontrol show job``.

Where it goes: the per-node detail (every process's stats) into the node's JSON-lines
health log (``efficiency`` key of the epilog record), and one compact summary for the
whole job into the job's ``AdminComment`` in the accounting database as ``sk1:`` +
hex(gzip(JSON)), written by one node with one bounded ``sacctmgr`` update (see
:func:`write_admin_comment` for why not scontrol; the codec, and why lower-case hex, in
:mod:`slurmkit.slurm.admincomment`). An AdminComment that already holds another tool's
text is left alone.

Multi-node jobs: each node writes its summary to
``<paths.shared_dir>/efficiency/<job id>[.<restart>.<start>]/<node>.json`` (for a
requeued job, ``SLURM_JOB_RESTART_COUNT`` and the attempt's start time, so each attempt
merges on its own: :func:`merge_key`) (root-owned directories, files
read only when root-owned and not writable by others). The node that finds every
node's file present claims the merge with an ``O_EXCL`` marker and writes the merged
summary; epilogs run concurrently at job end, so this is normally the last node to
finish. The first node of the job's node list waits up to ``merge_wait`` seconds for
the others; if some never arrive it writes a partial summary that lists them under
``missing``.

Bounded: collection runs in a worker thread under its own deadline (an NVML call into a
wedged driver cannot be interrupted; see :mod:`slurmkit.health.deadline`), and so does publishing.
Nothing here can fail the job or drain the node: problems are recorded, never raised.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from slurmkit.core import trust
from slurmkit.health.backends import BackendError
from slurmkit.hooks import procs
from slurmkit.slurm.admincomment import finite, foreign_text, job_summary, reject_constant
from slurmkit.slurm.jobenv import JobEnv

CURSOR_FILE = "efficiency-cursor.{node}.json"
SHARED_SUBDIR = "efficiency"
CLAIM = ".merged"
_SAFE_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
#: Fraction of the efficiency step's time given to collection (the rest publishes).
COLLECT_SHARE = 0.5
#: The job facts query (``scontrol show job``, Slurm 22.05 only): at most this share of the
#: step's time and at most this many seconds.
FACTS_SHARE = 0.2
FACTS_TIMEOUT = 2.0


# ---------------------------------------------------------------------- summary maths


def _union_seconds(intervals: List[Tuple[float, float]]) -> float:
    total = 0.0
    end = -math.inf
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def summarize_gpu(stats: Iterable[Any], capacity_mib: Optional[float], now: float) -> Dict[str, Any]:
    """The compact summary of one GPU from its processes' accounting stats."""
    procs = list(stats)
    intervals: List[Tuple[float, float]] = []
    loose = 0.0  # process time whose start is unknown: cannot be placed on the timeline
    busy = 0.0
    util_known = False
    peak = None
    for p in procs:
        start = finite(p.start_time)
        dur = finite(p.time_s)
        if p.running and start is not None:
            dur = max(0.0, now - start)
        dur = max(0.0, dur or 0.0)
        if start is not None:
            intervals.append((start, start + dur))
        else:
            loose += dur
        u = finite(p.gpu_util)
        if u is not None:
            util_known = True
            busy += min(max(u, 0.0), 100.0) / 100.0 * dur
        m = finite(p.max_memory_mib)
        if m is not None:
            peak = m if peak is None else max(peak, m)
    active = _union_seconds(intervals) + loose
    out: Dict[str, Any] = {"p": len(procs), "t": round(active, 1), "c": _round(capacity_mib)}
    if not procs:
        out.update(u=0.0, b=0.0, m=0)
    else:
        out["u"] = (
            round(min(100.0, 100.0 * busy / active), 1)
            if util_known and active > 0
            else (0.0 if util_known else None)
        )
        out["b"] = round(busy, 1) if util_known else None
        out["m"] = _round(peak)
    return out


def _round(value: Optional[float]) -> Optional[int]:
    return None if value is None else int(round(value))


# ---------------------------------------------------------------------- collection


def cursor_path(state_dir: str, node: str) -> str:
    return os.path.join(state_dir, CURSOR_FILE.format(node=re.sub(r"[^A-Za-z0-9._-]", "_", node)))


def read_cursor(state_dir: str, node: str) -> Dict[str, float]:
    try:
        raw = trust.read_trusted(cursor_path(state_dir, node))
        if raw is None:
            return {}
        data = json.loads(raw.decode("utf-8"))
        return {str(k): float(v) for k, v in (data.get("gpus") or {}).items() if finite(v) is not None}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def advance_cursor(state_dir: str, node: str, newest: Dict[str, float], timeout: float) -> None:
    """Raise the per-GPU cursors to ``newest`` under an exclusive lock (two epilogs of
    two jobs on one node update different GPUs of the same file)."""
    from slurmkit.core.files import write_json_atomic

    if not newest:
        return
    os.makedirs(state_dir, exist_ok=True)
    path = cursor_path(state_dir, node)
    fd = trust.lock(path + ".lock", timeout)  # TimeoutError when it stays held
    try:
        cur = read_cursor(state_dir, node)
        for k, v in newest.items():
            cur[k] = max(v, cur.get(k, v))
        write_json_atomic(path, {"gpus": cur, "updated": time.time()})
    finally:
        os.close(fd)


def collect(
    backend,
    indices: List[int],
    *,
    cursor: Dict[str, float],
    job_start: Optional[float],
    job_pids: Iterable[int],
    now: float,
    box: Dict[str, Any],
    job_uid: Optional[int] = None,
    owner_uid: Optional[Callable[[int, Optional[float]], Optional[int]]] = None,
) -> None:
    """Read accounting for ``indices``; fills ``box`` as it goes (``gpus``, ``processes``,
    ``newest``, ``excluded``), so whatever was read before a hang is still there for the
    caller.

    A process counts when it started at or after ``job_start`` (when known), is not a live
    process of another uid than ``job_uid`` (``owner_uid(pid, start)`` says whose it is, or
    ``None`` when it is gone), and is one of ``job_pids`` or started after the GPU's cursor.
    """
    caps = {g.index: g.memory_total_mib for g in backend.gpus()}
    pids_of_job = set(job_pids)
    gpus: Dict[str, Dict[str, Any]] = box.setdefault("gpus", {})
    detail: Dict[str, List[Dict[str, Any]]] = box.setdefault("processes", {})
    newest: Dict[str, float] = box.setdefault("newest", {})
    excluded: Dict[str, Dict[str, int]] = box.setdefault("excluded", {})
    for i in indices:
        key = str(i)
        box["phase"] = f"accounting_mode GPU {i}"
        try:
            mode = backend.accounting_mode(i)
            if mode is not True:
                gpus[key] = {"a": "off" if mode is False else "unsupported", "c": _round(caps.get(i))}
                continue
            box["phase"] = f"accounting_pids GPU {i}"
            floor = cursor.get(key, -math.inf)
            if job_start is not None:
                floor = max(floor, job_start - 1.0)
            mine = []
            high = cursor.get(key)
            for pid in backend.accounting_pids(i):
                box["phase"] = f"accounting_stats GPU {i} pid {pid}"
                st = backend.accounting_stats(i, pid)
                if st is None:
                    continue
                start = finite(st.start_time)
                if start is not None:
                    high = start if high is None else max(high, start)
                if job_start is not None and (start is None or start < job_start - 1.0):
                    if start is not None or pid not in pids_of_job:
                        _count(excluded, key, "before_job")
                        continue
                if job_uid is not None and owner_uid is not None:
                    uid = owner_uid(pid, start)
                    if uid is not None and uid != job_uid:
                        _count(excluded, key, "other_user")
                        continue
                if pid in pids_of_job or (start is not None and start > floor):
                    mine.append(st)
        except BackendError as exc:  # this GPU is unknown; the GPU checks judge the GPU itself
            gpus[key] = {"a": "error", "c": _round(caps.get(i))}
            box.setdefault("errors", {})[key] = str(exc)
            continue
        gpus[key] = summarize_gpu(mine, caps.get(i), now)
        detail[key] = [s.to_dict() for s in mine]
        if high is not None:
            newest[key] = high
    box["phase"] = "done"


def _count(excluded: Dict[str, Dict[str, int]], gpu: str, why: str) -> None:
    per = excluded.setdefault(gpu, {})
    per[why] = per.get(why, 0) + 1


def node_state(gpus: Dict[str, Dict[str, Any]], fallback: str = "on") -> str:
    """The node's accounting word: ``on`` when every GPU had it, else the first other state."""
    for g in gpus.values():
        if "a" in g:
            return g["a"]
    return fallback


def accounting_setup(backend, enable: bool) -> List[Dict[str, Any]]:
    """Each GPU's accounting mode, turned on first where ``enable`` (root; the mode must be
    on before a job starts for its processes to be accounted)."""
    rows = []
    for g in backend.gpus():
        row: Dict[str, Any] = {"gpu": g.index, "name": g.name}
        try:
            mode = backend.accounting_mode(g.index)
            if enable and mode is False:
                backend.set_accounting_mode(g.index, True)
                mode = backend.accounting_mode(g.index)
                row["changed"] = True
            row["accounting"] = {True: "on", False: "off", None: "unsupported"}[mode]
        except Exception as exc:  # BackendError (NO_PERMISSION without root) and friends
            row.update(accounting="error", error=str(exc))
        rows.append(row)
    return rows


# ---------------------------------------------------------------------- shared merge


def _ensure_dir(path: str) -> None:
    why = trust.writable_dir(path, 0o755)
    if why:
        raise PermissionError(why)


def _read_trusted_json(path: str) -> Optional[Dict[str, Any]]:
    try:
        raw = trust.read_trusted(path, max_bytes=1 << 20)
        data = None if raw is None else json.loads(raw.decode("utf-8"), parse_constant=reject_constant)
    except (OSError, ValueError):  # a SummaryError is a ValueError
        return None
    return data if isinstance(data, dict) else None


def job_nodes(env: Dict[str, str], me: str) -> List[str]:
    """The job's nodes (``SLURM_NODELIST`` in the epilog; ``SLURM_JOB_NODELIST`` elsewhere)."""
    from slurmkit.slurm.parse import ParseError, expand_hostlist

    text = JobEnv.from_env(env).nodelist or ""
    try:
        nodes = expand_hostlist(text) if text else []
    except ParseError:
        nodes = []
    return nodes if me in nodes else [me]


def share_and_merge(
    shared_dir: str,
    job_id: str,
    me: str,
    nodes: List[str],
    mine: Dict[str, Any],
    merge_wait: float,
    deadline: float,
    box: Dict[str, Any],
    restart: int = 0,
    start: Optional[float] = None,
) -> Optional[Tuple[Dict[str, Any], List[str]]]:
    """Write this node's summary to the job's shared directory (one per attempt of a
    requeued job: :func:`merge_key`); return ``(per-node summaries, missing nodes)`` when
    this node is the one that merges, else ``None``."""
    from slurmkit.core.files import write_json_atomic

    if not all(_SAFE_NODE.match(n) for n in nodes):
        raise ValueError(f"unexpected node name in {nodes!r}")
    base = os.path.join(shared_dir, SHARED_SUBDIR)
    box["phase"] = f"shared directory {base}"
    os.makedirs(shared_dir, exist_ok=True)
    _ensure_dir(base)
    jobdir = os.path.join(base, merge_key(job_id, restart, start))
    _ensure_dir(jobdir)
    if os.path.lexists(os.path.join(jobdir, CLAIM)):  # a partial summary was already written
        box["merge"] = "another node merged"
        return None
    write_json_atomic(os.path.join(jobdir, f"{me}.json"), {"node": me, "summary": mine}, mode=0o644)
    first = nodes[0] == me
    wait_until = min(deadline, time.monotonic() + merge_wait)
    while True:
        have: Dict[str, Dict[str, Any]] = {}
        for n in nodes:
            data = _read_trusted_json(os.path.join(jobdir, f"{n}.json"))
            if data and data.get("node") == n and isinstance(data.get("summary"), dict):
                have[n] = data["summary"]
        missing = [n for n in nodes if n not in have]
        if not missing or (first and time.monotonic() >= wait_until):
            break
        if not first:
            box["merge"] = f"left to the last node (waiting for {','.join(missing)})"
            return None
        time.sleep(0.2)
    try:
        fd = os.open(os.path.join(jobdir, CLAIM), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        box["merge"] = "another node merged"
        return None
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps({"by": me, "time": time.time(), "missing": missing}))
    for n in have:  # merged: the per-node copies are in each node's health log
        try:
            os.unlink(os.path.join(jobdir, f"{n}.json"))
        except OSError:
            pass
    box["merge"] = "merged here" + (f" (missing {','.join(missing)})" if missing else "")
    prune(base)
    return have, missing


_MERGE_DIR_RE = re.compile(r"^\d+(?:\.\d+){0,2}$")


def merge_key(job_id: str, restart: int = 0, start: Optional[float] = None) -> str:
    """The job's shared directory name, one per attempt of a requeued job: ``<job id>`` for
    a job never requeued, else ``<job id>.<restart count>.<start>``.

    The start time is needed because the restart count alone does not tell attempts apart:
    on Slurm 22.05 (seen on the devcluster) the epilog of the attempt that was requeued
    already has ``SLURM_JOB_RESTART_COUNT=1``, like the epilog of the attempt after it,
    while each has its own ``StartTime``. Without a known start, ``<job id>.<restart>``.
    """
    if not job_id.isdigit() or int(restart) < 0:
        raise ValueError(f"unexpected job id {job_id!r} or restart count {restart!r}")
    if not restart:
        return job_id
    key = f"{job_id}.{int(restart)}"
    return key if start is None or not math.isfinite(start) or start <= 0 else f"{key}.{int(start)}"


def prune(base: str, max_age: float = 7 * 86400, limit: int = 200) -> int:
    """Remove job directories older than ``max_age`` (merged jobs keep a small marker
    so a late node does not merge again). ``base`` is root's and closed to others, so
    removing by path inside it is safe. At most ``limit`` entries are looked at."""
    removed = 0
    cutoff = time.time() - max_age
    try:
        entries = list(os.scandir(base))[:limit]
    except OSError:
        return 0
    for entry in entries:
        try:
            if (
                not entry.is_dir(follow_symlinks=False)
                or not _MERGE_DIR_RE.match(entry.name)
                or entry.stat(follow_symlinks=False).st_mtime > cutoff
            ):
                continue
            for f in os.scandir(entry.path):
                if f.is_file(follow_symlinks=False) or f.is_symlink():
                    os.unlink(f.path)
            os.rmdir(entry.path)
            removed += 1
        except OSError:
            continue
    return removed


# ---------------------------------------------------------------------- AdminComment


class CommentNotWritten(Exception):
    """The summary was deliberately not written (another tool's AdminComment, no record yet)."""


def job_ref(job_id: str, array_job_id: Optional[str], array_task_id: Optional[str]) -> str:
    """How accounting names the job: ``<array job>_<task>`` for array tasks (addressing the
    raw id of an array's first task updates every task of the array), else the job id."""
    if array_job_id and array_task_id and array_job_id.isdigit() and array_task_id.isdigit():
        return f"{array_job_id}_{array_task_id}"
    return job_id


def job_facts(ctx, timeout: float) -> Dict[str, Any]:
    """The job's start (epoch seconds), array ids and uid for the summary.

    From the epilog's environment when it holds both the start time and the array ids;
    else from one ``scontrol -o show job <id>`` with ``SLURM_TIME_FORMAT=%s`` through the
    runner, bounded by ``timeout``. Slurm 22.05 sets neither in the epilog; 24.11 and 26.05
    set ``SLURM_JOB_START_TIME`` but no ``SLURM_ARRAY_*`` (seen on the devcluster), so an
    array task is known only from scontrol there too. A failure is recorded (``error``) and
    leaves the fields unknown (a start time from the environment is kept).
    """
    from slurmkit.slurm import client

    facts: Dict[str, Any] = {
        "start": ctx.job_start,
        "array_job_id": ctx.array_job_id,
        "array_task_id": ctx.array_task_id,
        "restart": ctx.restart_count,
        "source": "environment",
    }
    if facts["start"] is not None and facts["array_job_id"] is not None:
        return facts
    facts["source"] = "scontrol"
    try:
        res = client.call(
            "scontrol",
            ["-o", "show", "job", ctx.job_id],
            timeout=max(0.2, timeout),
            env=dict(os.environ, SLURM_TIME_FORMAT="%s"),
            check=False,
        )
    except Exception as exc:  # timeout, no scontrol: the summary goes on without them
        facts["error"] = f"{type(exc).__name__}: {exc}"
        return facts
    # the record whose JobId is this job: for the id of an array's meta record, scontrol
    # prints every task of the array (seen on 22.05), in no promised order
    records = [client.parse_scontrol_record(ln) for ln in res.stdout.splitlines() if ln.strip()]
    rec = next((r for r in records if r.get("JobId") == ctx.job_id), {}) if res.returncode == 0 else {}
    if not rec:
        facts["error"] = f"scontrol show job {ctx.job_id} exited {res.returncode} without the job"
        return facts
    start = rec.get("StartTime", "")
    if start.isdigit() and int(start) > 0:
        facts["start"] = float(start)
    for key, field in (("array_job_id", "ArrayJobId"), ("array_task_id", "ArrayTaskId")):
        value = rec.get(field, "")
        if value.isdigit():
            facts[key] = value
    return facts


def write_admin_comment(ref: str, token: str, timeout: float, retry_wait: float = 1.0) -> str:
    """Store ``token`` as the job's AdminComment in the accounting database.

    Why sacctmgr and not scontrol: by the time the epilog runs, slurmctld answers
    ``scontrol update JobId=... AdminComment=...`` with "Job has already finished"
    (Slurm 22.05, verified on the devcluster); ``sacctmgr -i update job where jobid=...
    set AdminComment=...`` updates the stored record, as jobstats does. It replaces the
    whole field and lower-cases it, so a field that already holds another tool's text is
    left alone (:class:`CommentNotWritten`). A job slurmdbd has not recorded yet ("Nothing
    modified") is retried after ``retry_wait`` while ``timeout`` allows. Every call goes
    through the runner with what is left of ``timeout``.
    """
    from slurmkit.slurm import client

    deadline = time.monotonic() + timeout
    res = client.call(
        "sacct", ["-X", "-n", "-P", "-j", ref, "--format=AdminComment"], timeout=max(0.2, timeout / 3)
    )
    lines = [x for x in res.stdout.splitlines() if x.strip()]
    other = foreign_text(lines[-1]) if lines else ""
    if other:
        raise CommentNotWritten(f"AdminComment holds another tool's text ({other[:40]!r}); left alone")
    while True:
        left = deadline - time.monotonic()
        res = client.call(
            "sacctmgr",
            ["-i", "update", "job", "where", f"jobid={ref}", "set", f"AdminComment={token}"],
            timeout=max(0.2, left),
        )
        if "nothing modified" not in (res.stdout + res.stderr).lower():
            return token
        if deadline - time.monotonic() < retry_wait + 0.3:
            raise CommentNotWritten(
                f"job {ref} is not in the accounting database (sacctmgr: Nothing modified)"
            )
        time.sleep(retry_wait)


# ---------------------------------------------------------------------- the epilog step


def epilog_step(ctx, deadline: float, extra: Dict[str, Any]) -> None:
    """Collect, share and publish this job's GPU efficiency; record it in ``extra["efficiency"]``.

    Never raises and never returns a check result: efficiency is bookkeeping, and its
    failures must not drain a node or fail a job.
    """
    try:
        _epilog_step(ctx, deadline, extra)
    except Exception as exc:  # a slurmkit bug: recorded, never fatal
        extra["efficiency"] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}


def _epilog_step(ctx, deadline: float, extra: Dict[str, Any]) -> None:
    from slurmkit.health.deadline import ProbeTimeout, call_with_deadline

    cfg = ctx.health.get("efficiency") or {}
    if not cfg.get("enabled", True) or not ctx.job_id or not ctx.job_id.isdigit() or not ctx.job_gpus:
        return
    t0 = time.monotonic()
    budget = min(float(cfg.get("timeout", 10.0)), deadline - t0)
    rec: Dict[str, Any] = {"status": "ok"}
    extra["efficiency"] = rec
    if budget <= 0.1:
        rec.update(status="skipped", error="the epilog time budget was spent")
        return
    indices = sorted(set(ctx.job_gpus))
    facts = job_facts(ctx, min(FACTS_TIMEOUT, budget * FACTS_SHARE))
    rec["job"] = {k: v for k, v in facts.items() if v is not None}
    job_start = facts["start"]
    cleanup = extra.get("cleanup") or {}
    job_pids = set().union(*(cleanup.get(k) or [] for k in ("cgroup_pids", "environ_pids", "gpu_pids")))
    cursor = read_cursor(ctx.paths["state_dir"], ctx.node)
    box: Dict[str, Any] = {}

    def run_collect() -> None:
        backend = ctx.backend()
        collect(
            backend,
            indices,
            cursor=cursor,
            job_start=job_start,
            job_pids=job_pids,
            now=time.time(),
            box=box,
            job_uid=ctx.job_uid,
            owner_uid=procs.uid_of_process_started_at,
        )

    collect_budget = max(0.1, min(budget * COLLECT_SHARE, t0 + budget - time.monotonic()))
    try:
        call_with_deadline(run_collect, collect_budget, "efficiency_collect")
        state = node_state(box.get("gpus", {}))
    except ProbeTimeout:
        state = "timeout"
        rec.update(
            status="timeout",
            error=f"accounting query did not finish within {collect_budget:.2f}s (in {box.get('phase')})",
        )
    except Exception as exc:  # BackendError and friends: the GPU checks report the GPU itself
        state = "error"
        rec.update(status="error", error=f"{type(exc).__name__}: {exc}")
    snapshot = dict(box)  # the worker may still be running after a timeout
    gpus = dict(snapshot.get("gpus") or {})
    if state in ("timeout", "error"):
        for i in indices:  # what was not read is unknown, never zero
            gpus.setdefault(str(i), {"a": state})
    mine = {"acct": state, "gpus": gpus}
    rec.update(
        accounting=state,
        gpus=gpus,
        processes=snapshot.get("processes", {}),
        collect_seconds=round(time.monotonic() - t0, 3),
    )
    if snapshot.get("errors"):
        rec["gpu_errors"] = snapshot["errors"]
    if snapshot.get("excluded"):
        rec["excluded"] = snapshot["excluded"]
    if state not in ("timeout", "error") and snapshot.get("newest"):
        try:
            advance_cursor(ctx.paths["state_dir"], ctx.node, snapshot["newest"], timeout=0.5)
        except (OSError, TimeoutError) as exc:
            rec["cursor_error"] = str(exc)
    if not cfg.get("admin_comment", True):
        return
    pub: Dict[str, Any] = {}
    pub_deadline = t0 + budget

    def run_publish() -> None:
        nodes = job_nodes(ctx.env, ctx.node)
        if len(nodes) > 1:
            try:
                merged = share_and_merge(
                    ctx.paths["shared_dir"],
                    ctx.job_id,
                    ctx.node,
                    nodes,
                    mine,
                    float(cfg.get("merge_wait", 5.0)),
                    pub_deadline - 1.0,
                    pub,
                    restart=int(facts.get("restart") or 0),
                    start=facts.get("start"),
                )
            except (OSError, ValueError) as exc:  # no usable shared storage: the first node speaks alone
                pub["shared_error"] = str(exc)
                merged = ({ctx.node: mine}, nodes[1:]) if nodes[0] == ctx.node else None
            if merged is None:
                return
            per_node, missing = merged
        else:
            per_node, missing = {ctx.node: mine}, []
        _, token = job_summary(ctx.job_id, per_node, missing, int(cfg.get("max_comment_chars", 16000)))
        pub["phase"] = "sacctmgr update"
        pub["chars"] = len(token)
        ref = job_ref(ctx.job_id, facts.get("array_job_id"), facts.get("array_task_id"))
        pub["ref"] = ref
        write_admin_comment(ref, token, max(0.3, pub_deadline - time.monotonic()))
        pub["written"] = True

    try:
        call_with_deadline(run_publish, max(0.1, pub_deadline - time.monotonic()), "efficiency_publish")
    except ProbeTimeout:
        pub["error"] = f"publishing did not finish in time (in {pub.get('phase')})"
    except CommentNotWritten as exc:
        pub["skipped"] = str(exc)
    except Exception as exc:
        pub["error"] = f"{type(exc).__name__}: {exc}"
    rec["admin_comment"] = {k: v for k, v in dict(pub).items() if k != "phase"}
    rec["seconds"] = round(time.monotonic() - t0, 3)
