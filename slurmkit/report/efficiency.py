"""``slurmkit report efficiency``: which jobs held GPUs they did not use.

Input: sacct's job rows with their ``AdminComment``, where the epilog left a summary
(``SK1:`` token, :mod:`slurmkit.slurm.admincomment`), and the step rows' usage TRES
(``gres/gpuutil``, ``gres/gpumem`` in ``TRESUsageInAve``/``TRESUsageInMax``) where Slurm
itself recorded them (a Slurm built with NVML and
``AccountingStorageTRES=gres/gpumem,gres/gpuutil``). Jobs that ended in the window count
with their whole life (no clipping: an efficiency is a property of a job).

The numbers, per GPU of a job that ran ``E`` seconds (docs/report.md, "GPU efficiency"):

* utilisation over the job's life ``U = u x min(t, E) / E``, where ``u`` is the GPU's
  utilisation while it had a process and ``t`` how long it had one;
* GPU-hours used ``= U x E / 3600``; allocated ``= E / 3600``; summed over GPUs;
* an idle GPU is one with ``U`` under ``--idle-below`` percent (default 10);
  idle GPU-hours are its allocated hours; a touched GPU ran at least one process;
* peak memory is the largest process's peak against the GPU's memory.

A GPU without a measurement (accounting off, no summary, a hung query) is *unknown*:
its hours are counted as ``unknown`` and kept out of the ratios, never read as 0.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, TextIO, Tuple

from slurmkit.errors import UsageError
from slurmkit.report import DEFAULT_IDLE_BELOW
from slurmkit.report.sacct import (
    BAD_JOB_ID,
    SacctQuery,
    call_sacct,
    dump_rows,
    job_id_ok,
    missing_columns,
    open_dump,
    parse_time,
    read_dump_head,
    refuse_free_text,
)
from slurmkit.report.table import write_csv, write_markdown, write_text
from slurmkit.slurm.admincomment import SummaryError, decode, find_token, finite
from slurmkit.slurm.parse import (
    SACCT_DELIMITER,
    ParseError,
    gpus_from_tres,
    parse_memory_mb,
    parse_tres,
    split_parsable2,
)
from slurmkit.slurm.states import ACTIVE_STATES

FIELDS: Tuple[str, ...] = (
    "JobID",
    "JobIDRaw",
    "State",
    "AllocTRES",
    "Start",
    "End",
    "ElapsedRaw",
    "User",
    "Account",
    "Partition",
    "NodeList",
    "TRESUsageInAve",
    "TRESUsageInMax",
    "AdminComment",
)
REQUIRED = ("JobID", "State", "AllocTRES", "AdminComment")
FORMATS = ("table", "csv", "json", "markdown")
#: a job in one of these has not ended: no summary yet, skipped (Slurm's own set, shared with squeue's readers)
RUNNING = ACTIVE_STATES


# --------------------------------------------------------------------------- per job


@dataclass
class JobEfficiency:
    job_id: str
    user: str = ""
    account: str = ""
    partition: str = ""
    state: str = ""
    nodes: str = ""
    gpus: int = 0
    elapsed_s: float = 0.0
    source: Optional[str] = None  # slurmkit | slurm-tres | None
    note: str = ""  # why unknown, or what is partial
    gpus_known: int = 0
    gpus_touched: Optional[int] = None
    gpus_idle: Optional[int] = None
    used_gpu_s: float = 0.0
    idle_gpu_s: float = 0.0
    peak_mem_mib: Optional[float] = None
    mem_capacity_mib: Optional[float] = None
    util_pct: Optional[float] = None  # over the known GPUs' allocated time
    per_gpu: List[Dict[str, Any]] = field(default_factory=list)

    @property
    def alloc_gpu_h(self) -> float:
        return self.gpus * self.elapsed_s / 3600.0

    @property
    def known_gpu_h(self) -> float:
        return self.gpus_known * self.elapsed_s / 3600.0

    @property
    def unknown_gpu_h(self) -> float:
        return self.alloc_gpu_h - self.known_gpu_h

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d.update(
            alloc_gpu_h=self.alloc_gpu_h,
            known_gpu_h=self.known_gpu_h,
            unknown_gpu_h=self.unknown_gpu_h,
            used_gpu_h=self.used_gpu_s / 3600.0,
            idle_gpu_h=self.idle_gpu_s / 3600.0,
        )
        return d


_num = finite


def from_summary(job: JobEfficiency, summary: Dict[str, Any], idle_below: float) -> None:
    """Fill ``job`` from a decoded ``SK1:`` summary."""
    elapsed = job.elapsed_s
    known = touched = idle = 0
    used = idle_s = 0.0
    peaks: List[Tuple[float, float]] = []
    notes = set()
    seen = 0
    for node, ns in sorted((summary.get("nodes") or {}).items()):
        if not isinstance(ns, dict):
            continue
        if ns.get("agg"):
            n = int(_num(ns.get("n")) or 0)
            k = int(_num(ns.get("known")) or 0)
            seen += n
            known += k
            touched += int(_num(ns.get("touched")) or 0)
            b = _num(ns.get("b")) or 0.0
            used += min(max(b, 0.0), k * elapsed)
            idle += k - int(_num(ns.get("touched")) or 0)
            idle_s += (k - int(_num(ns.get("touched")) or 0)) * elapsed
            if _num(ns.get("m")) is not None and _num(ns.get("c")):
                peaks.append((_num(ns["m"]), _num(ns["c"])))
            continue
        for idx, g in sorted((ns.get("gpus") or {}).items()):
            if not isinstance(g, dict):
                continue
            seen += 1
            entry = {"node": node, "gpu": idx}
            u = _num(g.get("u"))
            if "a" in g or u is None:
                notes.add(f"accounting {g.get('a', 'gave no utilisation')}")
                entry["util_pct"] = None
                job.per_gpu.append(entry)
                continue
            t = _num(g.get("t")) or 0.0
            gpu_used = (min(max(u, 0.0), 100.0) / 100.0) * min(max(t, 0.0), elapsed) if elapsed > 0 else 0.0
            life = 100.0 * gpu_used / elapsed if elapsed > 0 else 0.0
            known += 1
            used += gpu_used
            if (_num(g.get("p")) or 0) > 0:
                touched += 1
            if life < idle_below:
                idle += 1
                idle_s += elapsed
            m, c = _num(g.get("m")), _num(g.get("c"))
            if m is not None and c:
                peaks.append((m, c))
            entry.update(util_pct=round(life, 2), peak_mem_mib=m, capacity_mib=c, processes=g.get("p"))
            job.per_gpu.append(entry)
    missing = summary.get("missing") or []
    if missing:
        notes.add(f"no summary from {','.join(map(str, missing))}")
    if seen < job.gpus and not missing:
        notes.add(f"{job.gpus - seen} GPU(s) not in the summary")
    known = min(known, job.gpus) if job.gpus else known
    job.source = "slurmkit"
    job.gpus_known = known
    job.gpus_touched = touched if known else None
    job.gpus_idle = idle if known else None
    job.used_gpu_s = used
    job.idle_gpu_s = idle_s
    if peaks:
        job.peak_mem_mib, job.mem_capacity_mib = max(peaks, key=lambda p: p[0] / p[1])
    job.util_pct = 100.0 * used / (known * elapsed) if known and elapsed > 0 else None
    if known == 0:
        job.util_pct = None
    job.note = "; ".join(sorted(notes))


def from_slurm_tres(job: JobEfficiency, util: Optional[float], mem_mib: Optional[float]) -> None:
    """Fill ``job`` from Slurm's own ``gres/gpuutil``/``gres/gpumem`` step usage (no per-GPU split)."""
    if util is None:
        return
    job.source = "slurm-tres"
    job.gpus_known = job.gpus
    job.util_pct = min(max(util, 0.0), 100.0)
    job.used_gpu_s = job.util_pct / 100.0 * job.gpus * job.elapsed_s
    job.peak_mem_mib = mem_mib
    job.note = "Slurm gres/gpuutil (job average; no per-GPU split)"


# --------------------------------------------------------------------------- parsing


@dataclass
class ParseResult:
    jobs: List[JobEfficiency]
    rows: int = 0
    malformed: int = 0
    bad_comments: int = 0
    skipped_running: int = 0
    warnings: List[str] = field(default_factory=list)


def _step_usage(ave: str, mx: str) -> Tuple[Optional[float], Optional[float]]:
    try:
        a = parse_tres(ave)
        m = parse_tres(mx)
    except ParseError:
        return None, None
    util = _num(a.get("gres/gpuutil"))
    mem = m.get("gres/gpumem") or a.get("gres/gpumem")
    mem_mib = None
    if mem:
        try:
            mem_mib = parse_memory_mb(mem)
        except ParseError:
            mem_mib = None
    return util, mem_mib


def parse(
    lines: Iterable[str],
    columns: Sequence[str],
    *,
    sep: str,
    idle_below: float,
    window: Optional[Tuple[int, int]] = None,
    first_line: int = 1,
) -> ParseResult:
    """Rows of ``sacct --parsable2`` (no header) -> one :class:`JobEfficiency` per ended job."""
    idx = {c.strip().lower(): i for i, c in enumerate(columns)}
    lacking = [c for c in REQUIRED if c.lower() not in idx]
    if lacking:
        raise UsageError(f"sacct data lacks column(s) {', '.join(lacking)}; {recommended_command()}")
    nf = len(columns)
    free = idx["admincomment"]
    out = ParseResult([])
    jobs: Dict[str, Tuple[JobEfficiency, str]] = {}
    steps: Dict[str, Tuple[Optional[float], Optional[float]]] = {}

    def col(f: List[str], name: str) -> str:
        i = idx.get(name.lower())
        return f[i] if i is not None else ""

    has_raw = "jobidraw" in idx

    for line_no, line in enumerate(lines, first_line):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        out.rows += 1
        if "gres/gpu" not in line:  # neither a GPU job nor a step with Slurm's GPU usage TRES
            continue
        try:
            f = split_parsable2(line, nf, free, sep)
        except ParseError:
            out.malformed += 1
            out.warnings.append(f"line {line_no}: wrong field count (expected {nf})")
            continue
        jid = col(f, "JobID").strip()
        if "." in jid:  # a step: Slurm's own GPU usage TRES live here
            util, mem = _step_usage(col(f, "TRESUsageInAve"), col(f, "TRESUsageInMax"))
            parent = jid.split(".", 1)[0]
            if util is not None or mem is not None:
                pu, pm = steps.get(parent, (None, None))
                steps[parent] = (_max(pu, util), _max(pm, mem))
            continue
        if not job_id_ok(jid, col(f, "JobIDRaw") if has_raw else None):
            out.malformed += 1
            out.warnings.append(f"line {line_no}: {BAD_JOB_ID}")
            continue
        state = col(f, "State").split(" ")[0]
        if state in RUNNING:
            out.skipped_running += 1
            continue
        try:
            gpus, _ = gpus_from_tres(parse_tres(col(f, "AllocTRES")))
        except ParseError:
            out.malformed += 1
            out.warnings.append(f"line {line_no}: garbage AllocTRES")
            continue
        if gpus <= 0:
            continue
        elapsed = _elapsed(col(f, "ElapsedRaw"), col(f, "Start"), col(f, "End"))
        if elapsed is None:
            out.malformed += 1
            out.warnings.append(f"line {line_no}: no usable ElapsedRaw or Start/End")
            continue
        end_text = col(f, "End").strip()
        end = _epoch(end_text)
        if end is None and end_text not in ("Unknown", "None", "N/A", ""):
            out.malformed += 1
            out.warnings.append(f"line {line_no}: bad End time")
            continue
        if window is not None and end is not None and not window[0] <= end < window[1]:
            continue
        job = JobEfficiency(
            job_id=jid,
            user=col(f, "User"),
            account=col(f, "Account"),
            partition=col(f, "Partition"),
            state=state,
            nodes=col(f, "NodeList"),
            gpus=gpus,
            elapsed_s=float(elapsed),
        )
        jobs[col(f, "JobIDRaw") or jid] = (job, jid)
        token = find_token(f[free])
        if token is None:
            job.note = "no slurmkit summary"
            continue
        try:
            from_summary(job, decode(token), idle_below)
        except SummaryError as exc:
            out.bad_comments += 1
            job.note = f"unreadable summary ({exc})"
            out.warnings.append(f"line {line_no}: job {jid}: {exc}")
    for raw, (job, jid) in jobs.items():
        if job.source is None:
            util, mem = steps.get(raw) or steps.get(jid) or (None, None)
            from_slurm_tres(job, util, mem)
        out.jobs.append(job)
    return out


def _max(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a if b is None else (b if a is None else max(a, b))


def _epoch(text: str) -> Optional[int]:
    """An sacct time by the report's one time parser (:func:`.sacct.parse_time`: epoch digits or
    ISO local time); ``None`` when unknown or not a time (``now`` or a date in the data is not one)."""
    try:
        return parse_time((text or "").strip())
    except ValueError:
        return None


def _elapsed(raw: str, start: str, end: str) -> Optional[int]:
    raw = (raw or "").strip()
    if raw.isdigit():
        return int(raw)
    s, e = _epoch(start), _epoch(end)
    if s is None or e is None or e < s:
        return None
    return e - s


# --------------------------------------------------------------------------- sources


def recommended_command() -> str:
    return (
        "save it with: SLURM_TIME_FORMAT=%s sacct -a -S 2026-11-01 -E 2026-12-01 --parsable2 "
        f"--format={','.join(FIELDS)} > eff.txt"
    )


def sacct_args(
    window: Tuple[int, int], users=None, accounts=None, partitions=None, job_ids: Sequence[str] = ()
) -> List[str]:
    from slurmkit.report.window import iso_local

    args = [
        "-a",
        "--parsable2",
        "--noheader",
        f"--delimiter={SACCT_DELIMITER}",
        "--format=" + ",".join(FIELDS),
    ]
    if job_ids:
        args += ["-j", ",".join(job_ids)]
    else:
        args += ["-S", iso_local(window[0]), "-E", iso_local(window[1])]
    if users:
        args += ["-u", ",".join(sorted(users))]
    if accounts:
        args += ["-A", ",".join(sorted(accounts))]
    if partitions:
        args += ["-r", ",".join(sorted(partitions))]
    return args


def from_sacct(
    args: List[str], *, idle_below: float, window: Optional[Tuple[int, int]], timeout: Optional[float] = None
) -> ParseResult:
    res = call_sacct(SacctQuery(list(args), {"SLURM_TIME_FORMAT": "%s"}), timeout)
    return parse(res.stdout.split("\n"), FIELDS, sep=SACCT_DELIMITER, idle_below=idle_below, window=window)


def from_file(
    path: str,
    *,
    idle_below: float,
    window: Optional[Tuple[int, int]],
    columns: Optional[Sequence[str]] = None,
    delimiter: Optional[str] = None,
    trust_free_text: bool = True,
) -> ParseResult:
    """A saved dump (``-``: standard input), read by the report's one dump reader
    (:func:`.sacct.read_dump_head`: ``columns``, ``delimiter``, ``--parsable`` as for usage)."""
    with open_dump(path) as fh:
        head = read_dump_head(fh, columns, delimiter, hint=recommended_command())
        if head is None:
            return ParseResult([])
        refuse_free_text(path, head.columns, trust_free_text)
        lacking = missing_columns(head.columns, REQUIRED)
        if lacking:
            raise UsageError(
                f"--sacct-file {path}: missing column(s) {', '.join(lacking)}; {recommended_command()}"
            )
        return parse(
            dump_rows(head),
            head.columns,
            sep=head.sep,
            idle_below=idle_below,
            window=window,
            first_line=head.first_row,
        )


# --------------------------------------------------------------------------- grouping


def group(jobs: List[JobEfficiency], by: str) -> List[Dict[str, Any]]:
    """One row per group, worst offenders first: most idle GPU-hours, then most GPU-hours
    allocated but not used; groups with nothing measured last."""
    rows: Dict[str, Dict[str, Any]] = {}
    for j in jobs:
        key = j.job_id if by == "job" else getattr(j, by) or "-"
        r = rows.get(key)
        if r is None:
            r = rows[key] = {
                by: key,
                "jobs": 0,
                "gpus": 0,
                "gpus_known": 0,
                "gpus_touched": 0,
                "gpus_idle": 0,
                "alloc_gpu_h": 0.0,
                "known_gpu_h": 0.0,
                "used_gpu_h": 0.0,
                "idle_gpu_h": 0.0,
                "unknown_gpu_h": 0.0,
                "peak_mem_pct": None,
                "peak_mem_mib": None,
                "mem_capacity_mib": None,
            }
            if by == "job":
                r.update(
                    user=j.user,
                    account=j.account,
                    partition=j.partition,
                    state=j.state,
                    elapsed_s=j.elapsed_s,
                    source=j.source,
                    note=j.note,
                )
        r["jobs"] += 1
        r["gpus"] += j.gpus
        r["gpus_known"] += j.gpus_known
        if j.gpus_touched is not None:  # a per-GPU split exists (not Slurm's job-wide average)
            r["_split"] = True
            r["gpus_touched"] += j.gpus_touched
            r["gpus_idle"] += j.gpus_idle or 0
            r["idle_gpu_h"] += j.idle_gpu_s / 3600.0
        r["alloc_gpu_h"] += j.alloc_gpu_h
        r["known_gpu_h"] += j.known_gpu_h
        r["used_gpu_h"] += j.used_gpu_s / 3600.0
        r["unknown_gpu_h"] += j.unknown_gpu_h
        if j.peak_mem_mib is not None and j.mem_capacity_mib:
            pct = 100.0 * j.peak_mem_mib / j.mem_capacity_mib
            if r["peak_mem_pct"] is None or pct > r["peak_mem_pct"]:
                r.update(peak_mem_pct=pct, peak_mem_mib=j.peak_mem_mib, mem_capacity_mib=j.mem_capacity_mib)
        elif j.peak_mem_mib is not None and r["peak_mem_mib"] is None:
            r["peak_mem_mib"] = j.peak_mem_mib
    out = list(rows.values())
    for r in out:
        known = r["known_gpu_h"]
        r["util_pct"] = 100.0 * r["used_gpu_h"] / known if r["gpus_known"] else None
        r["wasted_gpu_h"] = known - r["used_gpu_h"] if r["gpus_known"] else None
        if not r.pop("_split", False):
            r["gpus_touched"] = r["gpus_idle"] = r["idle_gpu_h"] = None
        if not r["gpus_known"]:
            r["used_gpu_h"] = r["idle_gpu_h"] = None
    out.sort(
        key=lambda r: (
            r["util_pct"] is None,
            -(r["idle_gpu_h"] or 0.0),
            -(r["wasted_gpu_h"] or 0.0),
            r["util_pct"] if r["util_pct"] is not None else 0.0,
            str(r[by]),
        )
    )
    for rank, r in enumerate(out, 1):
        r["rank"] = rank
    return out


def totals(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    t: Dict[str, Any] = {k: sum(r[k] or 0 for r in rows) for k in ("jobs", "gpus", "gpus_known")}
    # hours stay floats when every row's is 0 or unknown (an int 0 was printed as "0", not "0.00")
    for k in ("alloc_gpu_h", "known_gpu_h", "used_gpu_h", "idle_gpu_h", "unknown_gpu_h"):
        t[k] = sum((r[k] or 0.0 for r in rows), 0.0)
    t["util_pct"] = 100.0 * t["used_gpu_h"] / t["known_gpu_h"] if t["known_gpu_h"] > 0 else None
    return t


# --------------------------------------------------------------------------- rendering

COLUMNS = [
    ("rank", "#"),
    ("jobs", "jobs"),
    ("gpus", "GPUs"),
    ("gpus_touched", "touched"),
    ("gpus_idle", "idle GPUs"),
    ("alloc_gpu_h", "GPU-h alloc"),
    ("used_gpu_h", "GPU-h used"),
    ("idle_gpu_h", "GPU-h idle"),
    ("unknown_gpu_h", "GPU-h unknown"),
    ("util_pct", "util %"),
    ("peak_mem_pct", "peak mem %"),
]
JOB_COLUMNS = [("user", "user"), ("account", "account"), ("state", "state")]


def columns_for(by: str) -> List[Tuple[str, str]]:
    cols = [("rank", "#"), (by, by)]
    if by == "job":
        cols += JOB_COLUMNS
    cols += [c for c in COLUMNS[1:] if not (by == "job" and c[0] == "jobs")]
    if by == "job":
        cols.append(("note", "note"))
    return cols


def fmt_cell(key: str, value: Any, decimals: int) -> str:
    if value is None:
        return (
            "unknown"
            if key in ("util_pct", "gpus_touched", "gpus_idle", "peak_mem_pct", "used_gpu_h", "idle_gpu_h")
            else "-"
        )
    if isinstance(value, float):
        if key.endswith("_pct"):
            return f"{value:.1f}"
        return f"{value:,.{decimals}f}"
    return str(value)


def render(rows: List[Dict[str, Any]], by: str, fmt: str, meta: Dict[str, Any], out: TextIO) -> None:
    cols = columns_for(by)
    tot = totals(rows)
    if fmt == "json":
        out.write(
            json.dumps(
                {"by": by, "meta": meta, "rows": rows, "totals": tot}, sort_keys=True, indent=1, default=str
            )
            + "\n"
        )
        return
    if fmt == "csv":
        write_csv(out, [k for k, _ in cols], ([r.get(k) for k, _ in cols] for r in rows))
        return
    dec = 2 if tot["alloc_gpu_h"] >= 10 else 4
    body = [[fmt_cell(k, r.get(k), dec) for k, _ in cols] for r in rows]
    no_total = {"rank", by, "user", "account", "state", "note", "peak_mem_pct", "gpus_touched", "gpus_idle"}
    foot = [
        "TOTAL" if i == 0 else ("" if k in no_total else fmt_cell(k, tot.get(k), dec))
        for i, (k, _) in enumerate(cols)
    ]
    heads = [h for _, h in cols]
    text_cols = {by, "user", "account", "state", "note"}
    numeric = [k not in text_cols for k, _ in cols]
    if fmt == "markdown":
        write_markdown(out, heads, body, numeric, foot=foot, bold_foot=False)
        return
    write_text(out, heads, body, numeric, foot=foot, title=meta.get("title", ""))


def one_line(job: JobEfficiency) -> str:
    """``ssubmit --wait``'s line: GPUs touched, utilisation, idle and peak memory."""
    if job.util_pct is None:
        why = job.note or "no measurement"
        return f"GPU efficiency: unknown ({why}); {job.gpus} GPU(s), {job.alloc_gpu_h:.3f} GPU-h allocated"
    parts = [f"GPU efficiency: {job.util_pct:.1f}% of {job.gpus_known} GPU(s)"]
    if job.gpus_touched is not None:
        parts.append(f"{job.gpus_touched}/{job.gpus} touched")
    if job.gpus_idle is not None:
        parts.append(f"{job.gpus_idle} idle (<{DEFAULT_IDLE_BELOW:g}%)")
    parts.append(f"{job.used_gpu_s / 3600:.3f} of {job.alloc_gpu_h:.3f} GPU-h used")
    if job.peak_mem_mib is not None and job.mem_capacity_mib:
        parts.append(f"peak memory {job.peak_mem_mib / 1024:.1f} of {job.mem_capacity_mib / 1024:.1f} GiB")
    if job.note:
        parts.append(job.note)
    return ", ".join(parts)


def job_efficiency(job_id: str, timeout: Optional[float] = None) -> Optional[JobEfficiency]:
    """One ended job's efficiency from sacct (``ssubmit status``); ``None`` when sacct has no
    ended GPU job of that id."""
    res = from_sacct(
        sacct_args((0, 0), job_ids=[job_id]), idle_below=DEFAULT_IDLE_BELOW, window=None, timeout=timeout
    )
    mine = [j for j in res.jobs if j.job_id == job_id]
    return mine[-1] if mine else None


# --------------------------------------------------------------------------- chart


def write_chart(rows: List[Dict[str, Any]], by: str, path: str, top: int = 20) -> None:
    """Horizontal bars per group: GPU-hours allocated, used and idle (worst first)."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".png", ".svg"):
        raise UsageError(f"--plot {path}: the file name must end in .png or .svg")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'slurmkit[plot]'") from None
    shown = rows[:top]
    labels = [str(r[by]) for r in shown][::-1]
    fig = Figure(figsize=(8.0, max(2.5, 0.4 * len(shown) + 1.5)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    y = list(range(len(shown)))
    ax.barh(y, [r["alloc_gpu_h"] for r in shown][::-1], color="#cccccc", label="allocated")
    ax.barh(y, [r["used_gpu_h"] or 0.0 for r in shown][::-1], color="#4c9a2a", height=0.5, label="used")
    ax.barh(y, [r["idle_gpu_h"] or 0.0 for r in shown][::-1], color="#d9534f", height=0.2, label="idle GPUs")
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel("GPU-hours")
    ax.set_title(f"GPU efficiency by {by} (worst first)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, format=ext[1:])
    except OSError as exc:
        raise UsageError(f"--plot {path}: {exc.strerror}") from None
