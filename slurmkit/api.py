"""slurmkit's Python API: load a job spec, submit it, follow the job (docs/api.md).

``ssubmit`` is a click front end over these same functions, so a script or a notebook gets
the CLI's validation (same messages, with file and line), rendering, Slurm access (every
call through the runner, with a timeout) and errors, as exceptions instead of exit codes:

=====================================  ====  =========================================
exception (:mod:`slurmkit.errors`)     exit  when
=====================================  ====  =========================================
:class:`~slurmkit.errors.ConfigError`  2     the spec or site config is invalid
:class:`~slurmkit.errors.UsageError`   2     a bad argument (a job id, an override)
``SlurmCommandError``/``CommandTimeout`` 3   a Slurm command failed or timed out
:class:`WaitTimeout`                   4     :meth:`Job.wait` ran past its timeout
=====================================  ====  =========================================

All of them are :class:`~slurmkit.errors.SlurmkitError`; none is a bare
``CalledProcessError``. Importing this module imports neither click nor torch.

Example::

    import slurmkit.api as sk

    spec = sk.Spec.load("train.yaml").with_overrides({"nodes": 2, "env.WANDB_MODE": "offline"})
    print(spec.render().script)          # what `ssubmit train.yaml --dry-run` prints
    job = sk.submit(spec)
    job.wait(timeout=3600)               # 'COMPLETED', 'FAILED', ...
    print(job.exit_code, job.logs(tail=20))
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import re
import stat
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from slurmkit.config import SiteConfig, load_site_config
from slurmkit.core.files import write_bytes_atomic
from slurmkit.core.schema import deep_merge, parse_set_option
from slurmkit.core.yamlload import load_yaml_file
from slurmkit.errors import ConfigError, ExternalCommandError, SlurmkitError, UsageError
from slurmkit.report import DEFAULT_IDLE_BELOW
from slurmkit.report.efficiency import JobEfficiency, from_sacct, job_efficiency, one_line, sacct_args
from slurmkit.slurm import client, settings
from slurmkit.submit import follow, hparams
from slurmkit.submit.follow import ACTIVE_STATES, WaitTimeout
from slurmkit.submit.render import Rendered, render
from slurmkit.submit.spec import check_against_cluster, check_site_defaults, validate_spec
from slurmkit.values import LineDict

__all__ = [
    "Spec",
    "Job",
    "TaskStatus",
    "submit",
    "test_submit",
    "load_config",
    "parse_sweep_option",
    "WaitTimeout",
    "Rendered",
]

log = logging.getLogger("slurmkit")

#: what a job id may look like: ``1234`` or an array task ``1234_5``
_JOB_ID_RE = re.compile(r"\d{1,12}(_\d{1,7})?")
#: Slurm calls a status query may take (each; the client's timeout applies to the others)
STATUS_TIMEOUT = 30.0


# --------------------------------------------------------------------------- site config


def load_config(path: Optional[str] = None) -> SiteConfig:
    """The site config (``--config``, then ``$SLURMKIT_CONFIG``, then /etc/slurmkit/slurmkit.yaml),
    with the Slurm layer pointed at its ``slurm`` section (binaries, timeout)."""
    cfg = load_site_config(path)
    s = cfg.section("slurm")
    client.configure(s["bin_dir"], s["timeout"])
    return cfg


def record_dir(site: Mapping[str, Any]) -> str:
    """Where submitted jobs are remembered (``submit.record_dir``)."""
    if site.get("record_dir"):
        return site["record_dir"]
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "slurmkit", "ssubmit")


def read_record(job_id: str, site: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """The record ``submit`` wrote for ``job_id``, or ``None``: a record that is not a regular
    file of the caller's own (a link, another user's file in a shared ``record_dir``) is not read."""
    try:
        fd = os.open(os.path.join(record_dir(site), f"{job_id}.json"), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, encoding="utf-8") as fh:
            st = os.fstat(fh.fileno())
            if st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode):
                return None
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def expand_output(
    pattern: str, job_id: str, name: str, workdir: str, *, task: Optional[int] = None, raw_id: str = ""
) -> str:
    """The log path Slurm writes: ``%j`` (the job's own id: an array task's raw id), ``%A`` (the
    array job id), ``%a`` (the task index), ``%x``, ``%u``, ``%%``; relative to ``workdir``."""
    table = {
        "j": raw_id or job_id,
        "A": job_id,
        "a": "%a" if task is None else str(task),  # the whole array: one log per task
        "x": name,
        "u": getpass.getuser(),
        "%": "%",
    }
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "%" and i + 1 < len(pattern) and pattern[i + 1] in table:
            out.append(table[pattern[i + 1]])
            i += 2
            continue
        out.append(c)
        i += 1
    path = "".join(out)
    return path if os.path.isabs(path) else os.path.join(workdir, path)


# --------------------------------------------------------------------------- sweep option

_RANGE_RE = re.compile(r"(-?\d{1,9})\.\.(-?\d{1,9})(?::(\d{1,9}))?")


def parse_sweep_option(item: str) -> Tuple[str, List[Any]]:
    """``--sweep NAME=VALUES`` -> ``(name, values)``.

    VALUES is ``a,b,c`` (each value kept as the text written), an inclusive integer range
    ``0..2`` or ``0..10:5`` (step), or a YAML flow list ``[a, "b,c"]`` for values with commas.
    Anything else raises :class:`UsageError` naming the item."""
    name, sep, raw = item.partition("=")
    name = name.strip()
    where = f"--sweep {item!r}"
    if not sep or not hparams.NAME_RE.fullmatch(name):
        raise UsageError(
            f"{where}: expected NAME=VALUES with NAME an identifier (e.g. lr=1e-4,3e-4 or seed=0..2)"
        )
    raw = raw.strip()
    if not raw:
        raise UsageError(f"{where}: no values (an empty axis has no tasks)")
    if raw.startswith("["):
        values = parse_set_option(f"v={raw}")["v"]
        if not isinstance(values, list) or not values:
            raise UsageError(f"{where}: expected a non-empty list like [a, 'b,c']")
        return name, values
    m = _RANGE_RE.fullmatch(raw)
    if m:
        lo, hi, step = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
        if hi < lo or step < 1:
            raise UsageError(f"{where}: a range is LOW..HIGH[:STEP] with LOW <= HIGH and STEP >= 1")
        if (hi - lo) // step + 1 > hparams.MAX_TASKS:
            raise UsageError(f"{where}: more than {hparams.MAX_TASKS} values")
        return name, list(range(lo, hi + 1, step))
    if ".." in raw:
        raise UsageError(f"{where}: a range is LOW..HIGH[:STEP] of integers (e.g. 0..2)")
    values = raw.split(",")
    if any(not v.strip() for v in values):
        raise UsageError(f"{where}: empty value between commas")
    return name, [v.strip() for v in values]


# --------------------------------------------------------------------------- Spec


def _nested(dotted: str, value: Any) -> Dict[str, Any]:
    parts = dotted.split(".")
    if any(not p for p in parts):
        raise UsageError(f"override {dotted!r}: empty component in the key")
    out: Dict[str, Any] = {}
    cur = out
    for p in parts[:-1]:
        cur[p] = {}
        cur = cur[p]
    cur[parts[-1]] = value
    return out


class Spec:
    """A validated job spec (site defaults, the spec, then overrides; later layers win).

    Build one with :meth:`load` or :meth:`from_dict`; every method returns a new Spec. ``data``
    is the validated spec (defaults filled in); :meth:`render` gives the sbatch script.
    Invalid input raises :class:`~slurmkit.errors.ConfigError` with the message ``ssubmit``
    prints (``train.yaml:12: requeue.grace: ...``).
    """

    def __init__(self, raw: Any, *, path: Optional[str], config: SiteConfig, spec_dir: Optional[str]):
        self._raw = raw
        self._config = config
        self.path = path
        self._spec_dir = spec_dir
        site = config.section("submit")
        merged: Any = LineDict()
        if site["defaults"]:
            check_site_defaults(site["defaults"], config.path)
            merged = deep_merge(merged, site["defaults"])
        self.data: Dict[str, Any] = validate_spec(deep_merge(merged, raw), path, spec_dir=spec_dir)

    # ---- construction
    @classmethod
    def load(
        cls,
        path: str,
        *,
        config: Optional[str] = None,
        sets: Sequence[str] = (),
        sweep: Sequence[str] = (),
    ) -> "Spec":
        """Load a spec file; ``sets`` are ``--set KEY=VALUE`` items, ``sweep`` ``--sweep NAME=VALUES``."""
        cfg = load_config(config)
        if not os.path.exists(path):
            raise UsageError(f"{path}: no such spec file")
        raw = load_yaml_file(path)
        if raw is None:
            raw = LineDict()
        if not isinstance(raw, dict):
            raise ConfigError("a job spec must be a mapping of keys", path=path, line=1)
        for item in sets or ():
            raw = deep_merge(raw, parse_set_option(item))
        raw = _with_axes(raw, [parse_sweep_option(s) for s in sweep or ()])
        return cls(raw, path=path, config=cfg, spec_dir=os.path.dirname(os.path.abspath(path)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, config: Optional[str] = None) -> "Spec":
        """A spec from a mapping (the YAML file's content as Python data)."""
        if not isinstance(data, Mapping):
            raise ConfigError("a job spec must be a mapping of keys")
        return cls(dict(data), path=None, config=load_config(config), spec_dir=None)

    def with_overrides(self, overrides: Mapping[str, Any]) -> "Spec":
        """Override keys by dotted path, as ``--set`` does: ``{"nodes": 2, "requeue.grace": 300}``."""
        raw = self._raw
        for key, value in overrides.items():
            raw = deep_merge(raw, _nested(str(key), value))
        return Spec(raw, path=self.path, config=self._config, spec_dir=self._spec_dir)

    def with_sweep(self, axes: Mapping[str, Sequence[Any]]) -> "Spec":
        """Add or replace grid axes, as ``--sweep`` does: ``{"lr": [1e-4, 3e-4], "seed": range(3)}``."""
        items = [(str(k), list(v)) for k, v in axes.items()]
        raw = _with_axes(self._raw, items)
        return Spec(raw, path=self.path, config=self._config, spec_dir=self._spec_dir)

    # ---- what it gives
    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def site(self) -> Dict[str, Any]:
        return self._config.section("submit")

    @property
    def tasks(self) -> List[hparams.SweepTask]:
        """A sweep's task table (index, parameters, run name, args, env); ``[]`` for one job."""
        sweep = self.data.get("sweep")
        if not sweep:
            return []
        return hparams.tasks(sweep, name=self.name, base_args=self.data["args"])

    def render(self) -> Rendered:
        """The sbatch script, its extra sbatch arguments and the resolved settings."""
        return render(self.data, site=self.site, paths=self._config.section("paths"), spec_path=self.path)

    def check_cluster(self, timeout: float = STATUS_TIMEOUT) -> List[str]:
        """What the cluster says against the spec: GPUs and nodes per partition (``sinfo``) and a
        sweep's size against ``MaxArraySize`` (``scontrol show config``). Raises
        :class:`ConfigError` when the job cannot run; returns warnings when a query failed."""
        notes: List[str] = []
        spec = self.data
        if self.site["check_partition"]:
            try:
                rows = client.nodes(
                    spec["partition"].split(",")[0] if spec["partition"] else None, timeout=timeout
                )
            except ExternalCommandError as exc:
                notes.append(f"partition check skipped: {exc}")
            else:
                if not spec["partition"]:
                    rows = [r for r in rows if r.get("partition", "").endswith("*")] or rows
                problem = check_against_cluster(spec, rows)
                if problem:
                    raise ConfigError(
                        f"{problem} (sinfo; set submit.check_partition: false to skip this check)"
                    )
        sweep = spec.get("sweep")
        if sweep:
            try:
                limit = settings.max_array_size(timeout=timeout)
            except ExternalCommandError as exc:
                notes.append(f"MaxArraySize check skipped: {exc}")
            else:
                if sweep["size"] > limit:
                    raise ConfigError(
                        f"{sweep['size']} tasks is more than the cluster's MaxArraySize {limit} "
                        "(scontrol show config); split the sweep",
                        path=self.path,
                        key="sweep",
                    )
        return notes

    def __repr__(self) -> str:
        extra = f", sweep of {self.data['sweep']['size']} tasks" if self.data.get("sweep") else ""
        return f"Spec({self.name!r}, nodes={self.data['nodes']}, gpus_per_node={self.data['gpus_per_node']}{extra})"


def _with_axes(raw: Any, axes: Sequence[Tuple[str, List[Any]]]) -> Any:
    """``raw`` with grid axes added (at the end) or replaced (in place)."""
    for name, values in axes:
        raw = deep_merge(raw, {"sweep": {"grid": {name: values}}})
    return raw


# --------------------------------------------------------------------------- submit


def submit(spec: Spec, *, check_cluster: bool = True) -> "Job":
    """Submit ``spec`` (one ``sbatch``, a job array for a sweep) and return its :class:`Job`.

    With ``check_cluster`` the spec is first checked against ``sinfo`` and ``MaxArraySize``
    (:meth:`Spec.check_cluster`; a failing query only logs a warning)."""
    if check_cluster:
        for note in spec.check_cluster():
            log.warning(note)
    rendered = spec.render()
    job_id = client.submit(rendered.script, rendered.sbatch_args)
    data = spec.data
    workdir = data["workdir"] or os.getcwd()
    record = {
        "job_id": job_id,
        "name": data["name"],
        "spec": os.path.abspath(spec.path) if spec.path else None,
        "log": expand_output(data["output"], job_id, data["name"], workdir),
        "output": data["output"],
        "workdir": workdir,
        "user": getpass.getuser(),
        "submitted": time.time(),
        "settings": rendered.settings,
        "tasks": [{"index": t.index, "params": t.params, "run_name": t.run_name} for t in spec.tasks],
    }
    site = spec.site
    try:
        os.makedirs(record_dir(site), mode=0o700, exist_ok=True)
        # atomic and private: `ssubmit status` never reads half a record, and a planted link at
        # a shared record_dir's predictable name is replaced, not followed; unsorted keys keep
        # the parameters in their order
        text = json.dumps(record, indent=1, default=str)
        write_bytes_atomic(os.path.join(record_dir(site), f"{job_id}.json"), text.encode("utf-8"), mode=0o600)
    except OSError as exc:
        log.warning(f"cannot record job {job_id}: {exc.strerror}")
    return Job(job_id, site=site, record=record)


def test_submit(spec: Spec) -> str:
    """``sbatch --test-only`` with the rendered script: Slurm's answer, nothing submitted."""
    rendered = spec.render()
    return client.submit(rendered.script, rendered.sbatch_args, test_only=True)


# --------------------------------------------------------------------------- Job


@dataclass
class TaskStatus:
    """One row of ``ssubmit status ARRAY_ID``: an array task (or the one job)."""

    job_id: str
    index: Optional[int]
    state: str
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    restarts: int = 0
    nodes: str = ""
    raw_id: str = ""
    params: Dict[str, str] = field(default_factory=dict)
    efficiency: Optional[JobEfficiency] = None
    log: Optional[str] = None
    checkpoint_dir: Optional[str] = None

    @property
    def done(self) -> bool:
        return self.state not in ACTIVE_STATES

    def to_dict(self) -> Dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "efficiency"}
        out["efficiency"] = self.efficiency.to_dict() if self.efficiency else None
        return out


def _exit_parts(text: str) -> Tuple[Optional[int], Optional[int]]:
    """sacct's ``ExitCode`` ``2:0`` -> (2, 0); empty -> (None, None)."""
    code, _, sig = (text or "").partition(":")
    if not code.strip().isdigit():
        return None, None
    return int(code), int(sig) if sig.strip().isdigit() else 0


class Job:
    """A submitted job, or an array (a sweep) and its tasks, followed through Slurm.

    ``Job("1234")`` attaches to any job Slurm knows, ``Job("1234_5")`` to one array task.
    Parameters of a sweep's tasks come from the record ``submit`` keeps
    (``submit.record_dir``); a job submitted elsewhere has its states but no parameters.
    """

    def __init__(
        self,
        job_id: Any,
        *,
        config: Optional[str] = None,
        site: Optional[Mapping[str, Any]] = None,
        record: Optional[Dict[str, Any]] = None,
    ):
        job_id = str(job_id).strip()
        if not _JOB_ID_RE.fullmatch(job_id):
            raise UsageError(f"{job_id!r} is not a job id (1234, or 1234_5 for an array task)")
        self.job_id = job_id
        self._site = dict(site) if site is not None else load_config(config).section("submit")
        self._record = record if record is not None else read_record(job_id.split("_")[0], self._site)
        self._is_array: Optional[bool] = None
        self._last_state = "UNKNOWN"

    @property
    def site(self) -> Dict[str, Any]:
        """The site config's ``submit`` section this Job uses (record dir, poll interval)."""
        return self._site

    @property
    def record(self) -> Optional[Dict[str, Any]]:
        """What ``submit`` recorded about the job (log, settings, a sweep's tasks), if it ran here."""
        return self._record

    # ---- what kind of job
    @property
    def array_id(self) -> str:
        return self.job_id.split("_")[0]

    @property
    def task_index(self) -> Optional[int]:
        return int(self.job_id.split("_")[1]) if "_" in self.job_id else None

    @property
    def is_array(self) -> bool:
        """A whole job array (a sweep), as opposed to one job or one task."""
        if self._is_array is None:
            if "_" in self.job_id:
                self._is_array = False
            elif self._record is not None and self._record.get("job_id") == self.job_id:
                self._is_array = bool(self._record.get("tasks")) or bool(
                    (self._record.get("settings") or {}).get("sweep")
                )
            else:
                self._is_array = any(r.job_id.startswith(f"{self.job_id}_") for r in self._slurm_rows())
        return self._is_array

    @property
    def params(self) -> Dict[str, str]:
        """This task's sweep parameters (``{}`` for a plain job or when unknown)."""
        idx = self.task_index
        for t in (self._record or {}).get("tasks") or []:
            if t.get("index") == idx:
                return dict(t.get("params") or {})
        return {}

    @property
    def tasks(self) -> List["Job"]:
        """An array's tasks, one :class:`Job` each (``[]`` for a plain job)."""
        if not self.is_array:
            return []
        indices = sorted({r.index for r in self.status(efficiency=False) if r.index is not None})
        return [Job(f"{self.job_id}_{i}", site=self._site, record=self._record) for i in indices]

    # ---- Slurm's view
    def _slurm_rows(self) -> List[TaskStatus]:
        """One row per task (or the one job) from squeue (while queued) and sacct (after)."""
        rows: Dict[str, TaskStatus] = {}
        acct = client.sacct(
            ["JobID", "JobIDRaw", "State", "ExitCode", "NodeList"],
            ["-D", "-X", "-j", self.job_id],
            timeout=STATUS_TIMEOUT,
        )
        for r in acct:
            jid = r["JobID"]
            if "[" in jid:  # pending tasks not split off yet: squeue -r lists them one by one
                continue
            code, sig = _exit_parts(r["ExitCode"])
            state = (r["State"] or "UNKNOWN").split()[0]
            prev = rows.get(jid)
            rows[jid] = TaskStatus(
                job_id=jid,
                index=int(jid.split("_")[1]) if "_" in jid else None,
                state=state,
                exit_code=code,
                signal=sig,
                # sacct -D lists every run of a requeued job: the runs before the last are restarts
                restarts=(prev.restarts + 1) if prev else 0,
                nodes=r["NodeList"],
                raw_id=r["JobIDRaw"],
            )
        for q in client.jobs(job_ids=[self.job_id], array_tasks=True, timeout=STATUS_TIMEOUT):
            jid = q["job_id"]
            if "[" in jid:
                continue
            row = rows.get(jid) or TaskStatus(
                job_id=jid, index=int(jid.split("_")[1]) if "_" in jid else None, state=""
            )
            row.state, row.nodes, row.exit_code, row.signal = q["state"], q["nodelist"], None, None
            row.raw_id = q["raw_id"] or row.raw_id
            rows[jid] = row
        if any(k.startswith(f"{self.job_id}_") for k in rows):
            # slurmdbd can still hold the array's meta record under the bare array id for a
            # moment after its last task split off (sacct prints ``42`` beside ``42_1``): the
            # task rows are the array; the bare row would hide them
            rows.pop(self.job_id, None)
        if self.job_id in rows or "_" in self.job_id:
            return [rows[k] for k in rows if k == self.job_id] or list(rows.values())[:1]
        return sorted(rows.values(), key=lambda r: (r.index is None, r.index or 0))

    def status(self, *, efficiency: bool = True) -> List[TaskStatus]:
        """One :class:`TaskStatus` per task (per job): state, exit code, restarts, nodes, the
        task's parameters, log, checkpoint directory, and (``efficiency``) the GPU efficiency
        the epilog recorded for an ended GPU job. This is ``ssubmit status``'s table."""
        rows = self._slurm_rows()
        if self._is_array is None and "_" not in self.job_id:
            self._is_array = any(r.index is not None for r in rows)
        rec = self._record or {}
        by_index = {t.get("index"): t for t in rec.get("tasks") or []}
        effs: Dict[str, JobEfficiency] = {}
        if efficiency and any(r.done for r in rows):
            try:
                found = from_sacct(
                    sacct_args((0, 0), job_ids=[self.job_id]),
                    idle_below=DEFAULT_IDLE_BELOW,
                    window=None,
                    timeout=STATUS_TIMEOUT,
                )
                effs = {j.job_id: j for j in found.jobs}
            except ExternalCommandError as exc:
                log.warning(f"efficiency of job {self.job_id} unknown: {exc}")
        for r in rows:
            if r.index is not None and r.index in by_index:
                r.params = dict(by_index[r.index].get("params") or {})
            r.efficiency = effs.get(r.job_id)
            r.log, r.checkpoint_dir = self._paths_of(r)
        return rows

    def _paths_of(self, row: TaskStatus) -> Tuple[Optional[str], Optional[str]]:
        rec = self._record
        if not rec:
            return None, None
        log_path = expand_output(
            rec.get("output") or "slurmkit-%j.out",
            self.array_id,
            rec.get("name") or "",
            rec.get("workdir") or "",
            task=row.index,
            raw_id=row.raw_id,
        )
        ckpt = (rec.get("settings") or {}).get("checkpoint_dir")
        if ckpt:
            values = {
                "{user}": rec.get("user") or getpass.getuser(),
                "{array_job_id}": self.array_id,
                "{array_task_id}": "" if row.index is None else str(row.index),
                "{job_id}": row.raw_id or row.job_id,
            }
            if "{job_id}" in ckpt and not row.raw_id:
                ckpt = None  # not started yet: its own job id is not known
            else:
                for k, v in values.items():
                    ckpt = ckpt.replace(k, v)
        return log_path, ckpt

    def state(self) -> str:
        """Slurm's state now. For an array: an active state while any task is queued or running
        (RUNNING when one runs), then COMPLETED when every task completed, else the state of
        the first task (by index) that did not."""
        rows = self._slurm_rows()
        if not rows:
            self._last_state = "UNKNOWN"
        elif not self.is_array:
            self._last_state = rows[0].state
        else:
            active = [r.state for r in rows if not r.done]
            if active:
                self._last_state = "RUNNING" if "RUNNING" in active else active[0]
            else:
                bad = [r.state for r in rows if r.state != "COMPLETED"]
                self._last_state = bad[0] if bad else "COMPLETED"
        return self._last_state

    def done(self) -> bool:
        """Whether the job (every task of an array) has left Slurm's queue."""
        state = self.state()
        return state != "UNKNOWN" and state not in ACTIVE_STATES

    def wait(
        self,
        timeout: Optional[float] = None,
        poll: Optional[float] = None,
        on_change: Optional[Callable[[str], None]] = None,
    ) -> str:
        """Poll until the job (every task of an array) has ended; return the final :meth:`state`.

        ``poll`` defaults to ``submit.wait_poll_seconds``; ``on_change`` gets each new state. Raises
        :class:`WaitTimeout` after ``timeout`` seconds (the job keeps running), or
        :class:`UsageError` when Slurm never shows the job."""
        poll = self._site.get("wait_poll_seconds", 3.0) if poll is None else poll
        if not self.is_array:  # one job: the loop `ssubmit --wait` runs
            changed = None if on_change is None else (lambda st: on_change(st["state"]))
            end = follow.wait_for_job(
                self.job_id,
                poll=poll,
                timeout=float("inf") if timeout is None else timeout,
                on_change=changed,
            )
            if end["source"] == "none":
                raise UsageError(f"job {self.job_id}: Slurm knows no such job")
            self._last_state = end["state"]
            return end["state"]
        deadline = None if timeout is None else time.monotonic() + timeout
        last, missing = None, 0
        while True:
            state = self.state()
            if state != last and on_change is not None:
                on_change(state)
            last = state
            if state == "UNKNOWN":
                missing += 1
                if missing > follow.MAX_MISSING_POLLS:
                    raise UsageError(f"job {self.job_id}: Slurm knows no such job")
            elif state not in ACTIVE_STATES:
                return state
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeout(
                    f"job {self.job_id} still {state} after {timeout:g}s; it keeps running "
                    f"(ssubmit status {self.job_id})"
                )
            time.sleep(poll)

    @property
    def exit_code(self) -> Optional[int]:
        """The job's own exit code once it ended (``None`` before, or when Slurm does not say).
        For an array: the first non-zero code of a task, by index, else 0."""
        rows = self._slurm_rows()
        if not rows or any(not r.done for r in rows):
            return None
        codes = [r.exit_code for r in rows]
        if not self.is_array:
            return codes[0]
        return next((c for c in codes if c), 0 if all(c is not None for c in codes) else None)

    @property
    def nodes(self) -> str:
        """The nodes (Slurm hostlist) the job runs or ran on; an array's tasks' joined."""
        unset = ("None", "None assigned", "(null)")
        return ",".join(r.nodes for r in self._slurm_rows() if r.nodes and r.nodes not in unset)

    @property
    def restarts(self) -> int:
        """How many times the job was requeued (an array: all its tasks together)."""
        return sum(r.restarts for r in self._slurm_rows())

    def efficiency(self) -> Optional[JobEfficiency]:
        """The ended GPU job's efficiency (the epilog's summary, as ``ssubmit status`` shows), or
        ``None`` while it runs, without GPUs, or when sacct has nothing. For an array use
        :meth:`status` (one per task)."""
        if self.is_array:
            raise UsageError(
                f"job {self.job_id} is an array: each task has its own efficiency (Job.status())"
            )
        if not self.done():
            return None
        return job_efficiency(self.job_id, timeout=STATUS_TIMEOUT)

    def log_path(self) -> Optional[str]:
        """Where the job writes its log: ``scontrol show job``'s StdOut, else the record's."""
        if self.is_array:
            raise UsageError(f"job {self.job_id} is an array: each task has its own log (Job.tasks)")
        job = client.show_job(self.job_id, timeout=STATUS_TIMEOUT)
        if job and job.get("StdOut"):
            return job["StdOut"]
        if self._record and self._record.get("job_id") == self.job_id and self._record.get("log"):
            return self._record["log"]
        rows = self._slurm_rows() if self._record else []
        if rows:
            path, _ = self._paths_of(rows[0])
            if path:
                return path
        # Not submitted from here and gone from scontrol: the default log name in its working dir.
        for row in client.sacct(["JobID", "WorkDir"], ["-j", self.job_id, "-X"], timeout=STATUS_TIMEOUT):
            guess = os.path.join(row.get("WorkDir") or "", f"slurmkit-{self.job_id}.out")
            if row.get("WorkDir") and os.path.exists(guess):
                return guess
        return None

    def logs(self, tail: Optional[int] = 50) -> str:
        """The end of the job's log (``tail`` lines; ``None`` for all of it); ``""`` when none yet."""
        path = self.log_path()
        if not path:
            return ""
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError:
            return ""
        return "\n".join(lines if tail is None else lines[-tail:] if tail > 0 else [])

    def cancel(self, signal: Optional[str] = None) -> None:
        """Cancel the job (the whole array, or this task); with ``signal`` (e.g. ``"USR2"``: checkpoint
        and requeue) signal the batch shell instead."""
        if signal is not None and not re.fullmatch(r"(SIG)?[A-Z0-9]{1,10}", str(signal)):
            raise UsageError(f"{signal!r} is not a signal name (e.g. USR2)")
        client.cancel(self.job_id, signal=signal, batch_only=bool(signal), timeout=STATUS_TIMEOUT)

    def __repr__(self) -> str:
        try:
            state = self.state()
        except SlurmkitError as exc:
            state = f"state unknown: {exc}"
        kind = " array" if self._is_array else ""
        return f"<slurmkit Job{kind} {self.job_id}: {state}>"


def efficiency_text(eff: Optional[JobEfficiency]) -> str:
    """The efficiency as ``ssubmit status`` prints it (``-`` when there is none)."""
    return one_line(eff).split(": ", 1)[1] if eff is not None else "-"
