"""Processes: who belongs to a job, who is under a live slurmstepd, and killing with grace.

Everything reads ``/proc`` directly (psutil would cost the epilog an import and adds
nothing here). A process is identified by ``(pid, start time)`` so a pid reused
between SIGTERM and SIGKILL is never hit.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import time
from dataclasses import dataclass
from typing import Dict, Iterable, Iterator, List, Optional, Set, Tuple


@dataclass
class Proc:
    pid: int
    ppid: int
    uid: int
    comm: str
    state: str
    start: int  # clock ticks since boot: (pid, start) identifies a process
    rss_kb: int = 0


def read_proc(pid: int) -> Optional[Proc]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("utf-8", "replace")
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as fh:
            status = fh.read()
    except OSError:
        return None
    lpar, rpar = stat.find("("), stat.rfind(")")
    comm = stat[lpar + 1 : rpar]
    fields = stat[rpar + 2 :].split()
    uid, rss = -1, 0
    for line in status.splitlines():
        if line.startswith("Uid:"):
            uid = int(line.split()[1])
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return Proc(
        pid=pid, ppid=int(fields[1]), uid=uid, comm=comm, state=fields[0], start=int(fields[19]), rss_kb=rss
    )


def iter_procs() -> Iterator[Proc]:
    for name in os.listdir("/proc"):
        if name.isdigit():
            p = read_proc(int(name))
            if p is not None:
                yield p


def environ(pid: int) -> Dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return out


def cgroup_job_pids(job_id: str, cgroup_root: str = "/sys/fs/cgroup") -> Set[int]:
    """Pids in the job's cgroup (v1: ``<ctrl>/slurm*/uid_*/job_<id>/``; v2:
    ``.../job_<id>/``), empty when Slurm does not use cgroups here."""
    patterns = [
        f"{cgroup_root}/*/slurm*/uid_*/job_{job_id}",
        f"{cgroup_root}/slurm*/uid_*/job_{job_id}",
        f"{cgroup_root}/system.slice/slurmstepd.scope/job_{job_id}",
        f"{cgroup_root}/**/slurmstepd.scope/job_{job_id}",
    ]
    pids: Set[int] = set()
    for pat in patterns:
        for d in glob.glob(pat):
            for root, _dirs, files in os.walk(d):
                if "cgroup.procs" in files:
                    try:
                        with open(os.path.join(root, "cgroup.procs"), encoding="ascii") as fh:
                            pids.update(int(x) for x in fh.read().split() if x.isdigit())
                    except OSError:
                        continue
    return pids


def environ_job_pids(job_id: str, uid: Optional[int], procs: Optional[List[Proc]] = None) -> Set[int]:
    """Processes of ``uid`` whose environment says ``SLURM_JOB_ID=<job_id>``: how a
    double-forked leftover is found when there is no job cgroup."""
    out: Set[int] = set()
    for p in procs if procs is not None else iter_procs():
        if uid is not None and p.uid != uid:
            continue
        if p.uid == 0:
            continue
        env = environ(p.pid)
        if env.get("SLURM_JOB_ID") == job_id or env.get("SLURM_JOBID") == job_id:
            out.add(p.pid)
    return out


def ancestors(pid: int, table: Dict[int, Proc]) -> List[Proc]:
    out, seen = [], set()
    cur = table.get(pid)
    while cur is not None and cur.ppid not in seen and cur.ppid > 0:
        seen.add(cur.ppid)
        cur = table.get(cur.ppid)
        if cur is not None:
            out.append(cur)
    return out


def under_slurmstepd(pid: int, table: Dict[int, Proc]) -> bool:
    """Under a live job step: a root-owned ``slurmstepd`` ancestor (a user can name a
    program of their own ``slurmstepd``, not run it as root)."""
    return any(a.comm.startswith("slurmstepd") and a.uid == 0 for a in ancestors(pid, table))


_CGROUP_JOB_RE = re.compile(r"/job_(\d+)(?:/|$)")
_STEPD_JOB_RE = re.compile(r"\[(\d+)(?:_\d+)?\.[^\]]*\]")


def cgroup_job(pid: int) -> Optional[str]:
    """The Slurm job whose cgroup holds ``pid`` (``.../job_<id>/...`` in ``/proc/<pid>/cgroup``,
    cgroup v1 or v2), else ``None``. The kernel keeps this file; a user cannot edit it, and
    only root can move a process into another user's job cgroup."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    for line in text.splitlines():
        m = _CGROUP_JOB_RE.search(line.split(":", 2)[-1])
        if m:
            return m.group(1)
    return None


def stepd_job(pid: int, table: Dict[int, Proc]) -> Optional[str]:
    """The job of the nearest live ``slurmstepd`` above ``pid`` (its command line is
    ``slurmstepd: [<job>.<step>]``), else ``None``. slurmstepd runs as root, so a user
    cannot forge the ancestor; ``"?"`` when one is there but its job cannot be read."""
    for a in ancestors(pid, table):
        if a.comm.startswith("slurmstepd") and a.uid == 0:
            try:
                with open(f"/proc/{a.pid}/cmdline", "rb") as fh:
                    cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                return "?"
            m = _STEPD_JOB_RE.search(cmd)
            return m.group(1) if m else "?"
    return None


def owning_job(pid: int, table: Dict[int, Proc]) -> Optional[str]:
    """Which live job ``pid`` provably belongs to: its job cgroup, else the slurmstepd it
    runs under. Never the environment (``SLURM_JOB_ID`` is the user's to set)."""
    return cgroup_job(pid) or stepd_job(pid, table)


def protected_pids() -> Set[int]:
    """This process and its ancestors: never signalled."""
    table = {p.pid: p for p in iter_procs()}
    me = os.getpid()
    return {me, 1} | {a.pid for a in ancestors(me, table)}


def _alive(ident: Tuple[int, int]) -> bool:
    p = read_proc(ident[0])
    return p is not None and p.start == ident[1] and p.state != "Z"


def kill_with_grace(pids: Iterable[int], grace: float, *, poll: float = 0.05) -> Dict[str, List[int]]:
    """SIGTERM ``pids``, wait up to ``grace`` seconds, SIGKILL survivors, wait up to 1 s more.

    Returns ``{"terminated": [...], "killed": [...], "survivors": [...], "gone": [...]}``
    (``gone``: exited before we signalled).
    """
    protect = protected_pids()
    idents: List[Tuple[int, int]] = []
    gone: List[int] = []
    for pid in sorted(set(pids)):
        if pid in protect:
            continue
        p = read_proc(pid)
        if p is None or p.state == "Z":
            gone.append(pid)
            continue
        idents.append((pid, p.start))
    for pid, _ in idents:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    pending = [i for i in idents if _alive(i)]
    while pending and time.monotonic() < deadline:
        time.sleep(poll)
        pending = [i for i in pending if _alive(i)]
    terminated = [pid for pid, st in idents if (pid, st) not in pending]
    for pid, _start in pending:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 1.0
    survivors = list(pending)
    while survivors and time.monotonic() < deadline:
        time.sleep(poll)
        survivors = [i for i in survivors if _alive(i)]
    return {
        "terminated": terminated,
        "killed": [pid for pid, st in pending if (pid, st) not in survivors],
        "survivors": [pid for pid, _ in survivors],
        "gone": gone,
    }
