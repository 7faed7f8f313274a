"""Processes: who belongs to a job, who is under a live slurmstepd, and killing with grace.

Everything reads ``/proc`` directly (psutil would cost the epilog an import and adds
nothing here). A process is judged once (its :class:`Proc`: pid, start time, uid) and
only that process is ever signalled: the kill step opens a pidfd for the judged pid, then
re-reads its start time and uid (a match proves the pidfd is the judged process's) and
signals through the pidfd; without pidfds it re-checks before every signal. A pid the
kernel reused for another process between the judgment and the signal is refused, not hit.

Job scoping by cgroup trusts only Slurm's own layout, anchored at the root of the
hierarchy (:func:`slurm_cgroup_job`), never a directory that is merely named ``job_<id>``.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass
from typing import Dict, Iterable, Iterator, List, Optional, Set, Tuple, Union

from slurmkit.slurm.jobenv import is_node_name


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


def boot_time() -> Optional[float]:
    """When the machine booted (``btime`` in ``/proc/stat``, epoch seconds)."""
    try:
        # utf-8, not ascii: the kernel writes ASCII, and utf-8's codec is loaded at start-up
        with open("/proc/stat", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def start_epoch(p: Proc, booted: Optional[float] = None) -> Optional[float]:
    """When ``p`` started, epoch seconds (its start in clock ticks after boot)."""
    booted = boot_time() if booted is None else booted
    return None if booted is None else booted + p.start / os.sysconf("SC_CLK_TCK")


def uid_of_process_started_at(pid: int, started: Optional[float], tolerance: float = 2.0) -> Optional[int]:
    """The uid of the live process ``pid`` if it is the one that started at ``started``
    (epoch seconds, e.g. NVML's accounting start time), else ``None`` (gone, or the pid now
    names a process that started at another time)."""
    p = read_proc(pid)
    if p is None or started is None:
        return None
    mine = start_epoch(p)
    return p.uid if mine is not None and abs(mine - started) <= tolerance else None


def iter_procs(deadline: Optional[float] = None) -> Iterator[Proc]:
    """Every process in ``/proc``; stops early at ``deadline`` (``time.monotonic()``)."""
    for name in os.listdir("/proc"):
        if deadline is not None and time.monotonic() >= deadline:
            return
        if name.isdigit():
            p = read_proc(int(name))
            if p is not None:
                yield p


#: How a process's ``/proc/<pid>/environ`` is read: in reads of :data:`ENVIRON_CHUNK`
#: bytes, stopping at the variable looked for, and never past :data:`ENVIRON_MAX_BYTES`.
#: The epilog reads it for every process of the job's user, and the user decides how large
#: it is (130 processes with 100 KiB environments once held the epilog past its deadline);
#: Slurm appends its ``SLURM_*`` variables after the submission environment, which with
#: environment modules is often over 8 KiB, so the first chunk alone is not enough. A
#: variable past the cap is not seen: the environment is only a narrowing hint.
ENVIRON_CHUNK = 8192
ENVIRON_MAX_BYTES = 128 * 1024
JOB_ID_VARS = ("SLURM_JOB_ID", "SLURM_JOBID")


def _environ_items(pid: int, max_bytes: int) -> Iterator[Tuple[str, str]]:
    """``(name, value)`` of ``pid``'s environment in order, read :data:`ENVIRON_CHUNK` bytes
    at a time, never more than ``max_bytes`` in all; a variable cut off there is dropped."""
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        pending = b""
        read = 0
        while read < max_bytes:
            try:
                chunk = os.read(fd, min(ENVIRON_CHUNK, max_bytes - read))
            except OSError:
                return
            if not chunk:
                break
            read += len(chunk)
            *complete, pending = (pending + chunk).split(b"\0")
            for item in complete:
                k, sep, v = item.partition(b"=")
                if sep:
                    yield k.decode("utf-8", "replace"), v.decode("utf-8", "replace")
    finally:
        os.close(fd)


def environ(pid: int, max_bytes: int = ENVIRON_CHUNK) -> Dict[str, str]:
    """The first ``max_bytes`` of ``pid``'s environment as a dict (a variable cut off at
    the end is dropped); ``{}`` when it cannot be read."""
    return dict(_environ_items(pid, max_bytes))


def environ_job_id(pid: int, max_bytes: int = ENVIRON_MAX_BYTES) -> Optional[str]:
    """``SLURM_JOB_ID`` (or ``SLURM_JOBID``) from ``pid``'s environment, reading no further
    than the variable and never past ``max_bytes``; ``None`` when not seen."""
    for k, v in _environ_items(pid, max_bytes):
        if k in JOB_ID_VARS:
            return v
    return None


# ---------------------------------------------------------------------- Slurm's cgroups
#
# Where Slurm puts a job (the plugins create these directories as root, at the root of
# each hierarchy, so a user cannot make one; below the step level a user may own
# directories, so nothing below ``job_<id>`` is read):
#
# * cgroup/v1 (src/plugins/cgroup/v1): ``<mount>/<controller>/slurm/uid_<uid>/job_<id>/
#   step_<step>/task_<n>``; a slurmd built for several slurmd per host (the devcluster's
#   Debian build) uses ``slurm_<node name>`` for ``slurm``. In ``/proc/<pid>/cgroup``:
#   ``4:freezer:/slurm_node1/uid_1001/job_42/step_batch/task_0``.
# * cgroup/v2 (src/plugins/cgroup/v2): ``<mount>/system.slice/slurmstepd.scope/job_<id>/
#   step_<step>/user/task_<n>`` (``<node name>_slurmstepd.scope`` with several slurmd),
#   no uid level. In ``/proc/<pid>/cgroup``: ``0::/system.slice/slurmstepd.scope/job_42/...``.
#
# https://slurm.schedmd.com/cgroups.html, https://slurm.schedmd.com/cgroup_v2.html

_UID_DIR_RE = re.compile(r"uid_(\d+)")
_JOB_DIR_RE = re.compile(r"job_(\d+)")
_V2_SLICE = "system.slice"
_V2_SCOPE = "slurmstepd.scope"


@dataclass(frozen=True)
class CgroupJob:
    """A job cgroup of Slurm's layout a process sits in."""

    job_id: str
    uid: Optional[int]  # v1's ``uid_<uid>`` level; ``None`` on v2, which has none
    layout: str  # "v1" or "v2"


def _v1_top_ok(name: str, node: Optional[str]) -> bool:
    if name == "slurm":
        return True
    if not name.startswith("slurm_"):
        return False
    rest = name[len("slurm_") :]
    return rest == node if node else is_node_name(rest)


def _v2_scope_ok(name: str, node: Optional[str]) -> bool:
    if name == _V2_SCOPE:
        return True
    suffix = "_" + _V2_SCOPE
    if not name.endswith(suffix):
        return False
    rest = name[: -len(suffix)]
    return rest == node if node else is_node_name(rest)


def slurm_cgroup_job(text: str, node: Optional[str] = None) -> Optional[CgroupJob]:
    """The Slurm job whose cgroup the ``/proc/<pid>/cgroup`` ``text`` places the process
    in, by Slurm's own layout only, anchored at the root of the hierarchy; else ``None``.

    ``node``: this slurmd's node name; when given, a multiple-slurmd level
    (``slurm_<node>``, ``<node>_slurmstepd.scope``) must name it. A ``job_<id>`` anywhere
    else (a user's delegated cgroup, a directory under a step) proves nothing. When the
    hierarchies disagree (which Slurm never does) the answer is ``None``.
    """
    found: Set[CgroupJob] = set()
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _hier, controllers, path = parts
        comps = path.split("/")
        if not comps or comps[0] != "":  # the kernel writes absolute paths
            continue
        comps = comps[1:]
        if controllers:  # a v1 hierarchy
            if len(comps) < 3 or not _v1_top_ok(comps[0], node):
                continue
            m_uid, m_job = _UID_DIR_RE.fullmatch(comps[1]), _JOB_DIR_RE.fullmatch(comps[2])
            if m_uid and m_job:
                found.add(CgroupJob(m_job.group(1), int(m_uid.group(1)), "v1"))
        else:  # the v2 (unified) hierarchy: "0::<path>"
            if len(comps) < 3 or comps[0] != _V2_SLICE or not _v2_scope_ok(comps[1], node):
                continue
            m_job = _JOB_DIR_RE.fullmatch(comps[2])
            if m_job:
                found.add(CgroupJob(m_job.group(1), None, "v2"))
    jobs = {j.job_id for j in found}
    if len(jobs) != 1:
        return None
    v1 = [j for j in found if j.layout == "v1"]
    if len({j.uid for j in v1}) > 1:
        return None
    return v1[0] if v1 else next(iter(found))


def cgroup_job(pid: int, node: Optional[str] = None) -> Optional[CgroupJob]:
    """The Slurm job cgroup holding ``pid`` (:func:`slurm_cgroup_job` on its
    ``/proc/<pid>/cgroup``, which the kernel keeps), else ``None``."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as fh:
            text = fh.read(65536)
    except OSError:
        return None
    return slurm_cgroup_job(text, node)


def job_cgroup_dirs(
    job_id: str, uid: Optional[int], node: Optional[str], cgroup_root: str = "/sys/fs/cgroup"
) -> List[str]:
    """The directories Slurm made for ``job_id`` on this node (v1: in each controller,
    ``slurm[_<node>]/uid_<uid>/job_<id>``; v2: ``system.slice/[<node>_]slurmstepd.scope/
    job_<id>``, also under a hybrid host's ``unified``). Only the exact anchored names are
    tried; with no ``uid`` each ``uid_<number>`` level is."""
    if not job_id.isdigit():
        return []
    tops = ["slurm"] + ([f"slurm_{node}"] if node and is_node_name(node) else [])
    scopes = [_V2_SCOPE] + ([f"{node}_{_V2_SCOPE}"] if node and is_node_name(node) else [])
    out: List[str] = []
    try:
        controllers = [e.name for e in os.scandir(cgroup_root) if e.is_dir(follow_symlinks=False)]
    except OSError:
        controllers = []
    for base in [cgroup_root] + [os.path.join(cgroup_root, c) for c in controllers]:
        for top in tops:
            top_dir = os.path.join(base, top)
            if uid is not None:
                uid_dirs = [f"uid_{int(uid)}"]
            else:
                try:
                    uid_dirs = [e.name for e in os.scandir(top_dir) if _UID_DIR_RE.fullmatch(e.name)]
                except OSError:
                    uid_dirs = []
            for u in uid_dirs:
                d = os.path.join(top_dir, u, f"job_{job_id}")
                if os.path.isdir(d) and not os.path.islink(d):
                    out.append(d)
        for scope in scopes:
            d = os.path.join(base, _V2_SLICE, scope, f"job_{job_id}")
            if os.path.isdir(d) and not os.path.islink(d):
                out.append(d)
    return out


def cgroup_job_pids(
    job_id: str,
    uid: Optional[int] = None,
    node: Optional[str] = None,
    cgroup_root: str = "/sys/fs/cgroup",
    deadline: Optional[float] = None,
) -> Set[int]:
    """Pids in the job's cgroups (:func:`job_cgroup_dirs`), empty when Slurm does not use
    cgroups here. Stops walking at ``deadline`` (a user may own directories below the step
    level and make many)."""
    pids: Set[int] = set()
    for d in job_cgroup_dirs(job_id, uid, node, cgroup_root):
        for root, _dirs, files in os.walk(d, followlinks=False):
            if deadline is not None and time.monotonic() >= deadline:
                return pids
            if "cgroup.procs" in files:
                try:
                    # utf-8, not ascii: the kernel writes ASCII, and utf-8's codec is loaded at start-up
                    with open(os.path.join(root, "cgroup.procs"), encoding="utf-8") as fh:
                        pids.update(int(x) for x in fh.read().split() if x.isdigit())
                except OSError:
                    continue
    return pids


class Scanned(set):
    """A set of pids that also says whether the scan that made it ran out of time."""

    out_of_time: bool = False
    looked_at: int = 0
    of: int = 0


def environ_job_pids(
    job_id: str, uid: Optional[int], procs: Optional[List[Proc]] = None, deadline: Optional[float] = None
) -> Scanned:
    """Processes of ``uid`` whose environment says ``SLURM_JOB_ID=<job_id>``: how a
    double-forked leftover is found when there is no job cgroup. Reads each environment
    only up to the job id (:func:`environ_job_id`) and stops at ``deadline``
    (``out_of_time`` on the result then says so)."""
    out = Scanned()
    candidates = [
        p
        for p in (procs if procs is not None else iter_procs(deadline))
        if p.uid != 0 and p.state != "Z" and (uid is None or p.uid == uid)
    ]
    out.of = len(candidates)
    for p in candidates:
        if deadline is not None and time.monotonic() >= deadline:
            out.out_of_time = True
            break
        out.looked_at += 1
        if environ_job_id(p.pid) == job_id:
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


_STEPD_JOB_RE = re.compile(r"\[(\d+)(?:_\d+)?\.[^\]]*\]")


def stepd_job(pid: int, table: Dict[int, Proc]) -> Optional[str]:
    """The job of the nearest live ``slurmstepd`` above ``pid`` (its command line is
    ``slurmstepd: [<job>.<step>]``), else ``None``. slurmstepd runs as root, so a user
    cannot forge the ancestor; ``"?"`` when one is there but its job cannot be read."""
    for a in ancestors(pid, table):
        if a.comm.startswith("slurmstepd") and a.uid == 0:
            try:
                with open(f"/proc/{a.pid}/cmdline", "rb") as fh:
                    cmd = fh.read(4096).replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                return "?"
            m = _STEPD_JOB_RE.search(cmd)
            return m.group(1) if m else "?"
    return None


def proven_cgroup_job(pid: int, table: Dict[int, Proc], node: Optional[str] = None) -> Optional[CgroupJob]:
    """:func:`cgroup_job`, kept only when its uid level (v1) is the process's own uid: Slurm
    puts a process under ``uid_<its job's uid>``, so anything else is not Slurm's doing."""
    cg = cgroup_job(pid, node)
    if cg is None:
        return None
    p = table.get(pid)
    if cg.uid is not None and (p is None or p.uid != cg.uid):
        return None
    return cg


def owning_job(pid: int, table: Dict[int, Proc], node: Optional[str] = None) -> Optional[str]:
    """Which live job ``pid`` provably belongs to: its job cgroup in Slurm's layout
    (:func:`proven_cgroup_job`), else the slurmstepd it runs under. Never the environment
    (``SLURM_JOB_ID`` is the user's to set), never a cgroup merely named ``job_<id>``."""
    cg = proven_cgroup_job(pid, table, node)
    return cg.job_id if cg is not None else stepd_job(pid, table)


def protected_pids() -> Set[int]:
    """This process and its ancestors: never signalled."""
    table = {p.pid: p for p in iter_procs()}
    me = os.getpid()
    return {me, 1} | {a.pid for a in ancestors(me, table)}


# ---------------------------------------------------------------------- signalling


def still_same(judged: Proc, now: Optional[Proc]) -> bool:
    """Whether ``now`` (a fresh read of ``judged.pid``) is the process that was judged:
    the same start time (``/proc/<pid>/stat`` field 22) and the same uid. A pid the
    kernel gave to a new process since has another start time."""
    return now is not None and now.start == judged.start and now.uid == judged.uid


def _pidfd_open(pid: int) -> Optional[int]:
    """A pidfd for ``pid`` (Linux 5.3+, Python 3.9+), or ``None`` where there is none."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None or not hasattr(signal, "pidfd_send_signal"):
        return None
    try:
        return opener(pid)
    except ProcessLookupError:
        raise
    except OSError:  # ENOSYS on an old kernel, EPERM under some seccomp profiles
        return None


class _Target:
    """One judged process and, where the kernel has them, a pidfd bound to it.

    With a pidfd every signal reaches the judged process or nobody (a pidfd never
    follows a reused pid). Without one, identity is re-checked right before each signal;
    the window left is between that read and ``kill(2)``.
    """

    def __init__(self, judged: Proc, fd: Optional[int]):
        self.judged = judged
        self.fd = fd

    @classmethod
    def open(cls, judged: Proc) -> Tuple[Optional["_Target"], str]:
        """``(target, "")``, or ``(None, "gone" | "refused")``."""
        try:
            fd = _pidfd_open(judged.pid)
        except ProcessLookupError:
            return None, "gone"
        now = read_proc(judged.pid)  # read after the pidfd: if it is the judged one, so is the pidfd's
        if now is None:
            if fd is not None:
                os.close(fd)
            return None, "gone"
        if not still_same(judged, now):
            if fd is not None:
                os.close(fd)
            return None, "refused"
        if now.state == "Z":
            if fd is not None:
                os.close(fd)
            return None, "gone"
        return cls(judged, fd), ""

    def send(self, sig: int) -> str:
        """``"sent"``, ``"gone"`` or ``"refused"`` (the pid now names another process)."""
        if self.fd is not None:
            try:
                signal.pidfd_send_signal(self.fd, sig)
                return "sent"
            except ProcessLookupError:
                return "gone"
        now = read_proc(self.judged.pid)
        if now is None:
            return "gone"
        if not still_same(self.judged, now):
            return "refused"
        try:
            os.kill(self.judged.pid, sig)
        except ProcessLookupError:
            return "gone"
        return "sent"

    def alive(self) -> bool:
        now = read_proc(self.judged.pid)
        return now is not None and still_same(self.judged, now) and now.state != "Z"

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def kill_with_grace(
    targets: Iterable[Union[int, Proc]], grace: float, *, poll: float = 0.05
) -> Dict[str, List[int]]:
    """SIGTERM the judged processes, wait up to ``grace`` seconds, SIGKILL survivors, wait
    up to 1 s more.

    ``targets`` are the :class:`Proc` records the caller judged (a bare pid is judged
    here, now). A process whose start time or uid no longer match its record is not the
    one judged (its pid was reused) and is never signalled.

    Returns ``{"terminated": [...], "killed": [...], "survivors": [...], "gone": [...],
    "refused": [...]}`` (``gone``: exited before we signalled; ``refused``: the pid now
    names another process).
    """
    protect = protected_pids()
    judged: Dict[int, Proc] = {}
    gone: List[int] = []
    for t in targets:
        p = t if isinstance(t, Proc) else read_proc(int(t))
        if p is None:
            gone.append(int(t))
            continue
        if p.pid not in protect:
            judged[p.pid] = p
    live: List[_Target] = []
    refused: List[int] = []
    for pid in sorted(judged):
        target, why = _Target.open(judged[pid])
        if target is not None:
            live.append(target)
        else:
            (gone if why == "gone" else refused).append(pid)
    try:
        sent: List[_Target] = []
        for t in live:
            res = t.send(signal.SIGTERM)
            if res == "sent":
                sent.append(t)
            else:
                (gone if res == "gone" else refused).append(t.judged.pid)
        deadline = time.monotonic() + grace
        pending = [t for t in sent if t.alive()]
        while pending and time.monotonic() < deadline:
            time.sleep(poll)
            pending = [t for t in pending if t.alive()]
        terminated = [t.judged.pid for t in sent if t not in pending]
        hit: List[_Target] = []
        for t in pending:
            res = t.send(signal.SIGKILL)
            if res == "sent":
                hit.append(t)
            elif res == "gone":
                terminated.append(t.judged.pid)
            else:
                refused.append(t.judged.pid)
        deadline = time.monotonic() + 1.0
        survivors = list(hit)
        while survivors and time.monotonic() < deadline:
            time.sleep(poll)
            survivors = [t for t in survivors if t.alive()]
    finally:
        for t in live:
            t.close()
    return {
        "terminated": sorted(terminated),
        "killed": sorted(t.judged.pid for t in hit if t not in survivors),
        "survivors": sorted(t.judged.pid for t in survivors),
        "gone": sorted(gone),
        "refused": sorted(refused),
    }
