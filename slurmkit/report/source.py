"""The report's one source layer: where a report's jobs come from, and which engine reads them.

Every report (usage, lost, capacity, efficiency) and ``report ingest`` comes through here
from the CLI, which only parses options and prints what comes back: a report's flow goes
down once (cli -> source -> the readers and engines) and returns once. This module

* opens a saved dump (:class:`Dump`: ``--sacct-file`` with ``--sacct-columns``,
  ``--sacct-delimiter`` and ``--trust-free-text``; ``-`` is standard input) through the one
  dump reader (:func:`.sacct.read_dump_head`);
* calls sacct through the one caller (:func:`.sacct.call_sacct`, which gives the "slurmdbd
  is down" hint);
* chooses the source and engine: the archive (:mod:`.archive`), the DuckDB engine
  (:mod:`.engine`) for a large saved file, or the pure-Python reference (:mod:`.stream`),
  which also reads live sacct output and whatever the engine hands back;
* shows progress on a terminal for long reads (:mod:`.progress`).

Data times are read by one parser (:func:`.sacct.parse_time`), job states come from
:mod:`slurmkit.slurm.states`, and every table goes through :mod:`.table`.

What a caller prints comes back as text: each function returns its warnings (one line each,
without the ``slurmkit: warning:`` prefix) with its result, and raises
:class:`~slurmkit.errors.UsageError` (exit 2) or the sacct errors (exit 3) for what stops it.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import logging
import os
import stat
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from slurmkit.errors import UsageError
from slurmkit.report import progress, sacct
from slurmkit.report.window import Window, parse_when, resolve_window

log = logging.getLogger("slurmkit.report")

HEALTH_LOG_NAME = "health.jsonl"

#: ``--engine auto`` uses DuckDB for saved files at least this large (about 300,000 rows): below it
#: the reference is faster, because DuckDB's import and queries cost the same at any size; the
#: measured crossover is in docs/benchmarks.md.
AUTO_ENGINE_BYTES = 48 << 20


# --------------------------------------------------------------------------- inputs


def window(
    since: Optional[str],
    until: Optional[str],
    month: Optional[str],
    last: Optional[str],
    sacct_file: Optional[str],
    now_opt: Optional[str],
) -> Tuple[Window, Optional[float]]:
    """``(window, now)`` from the period options (a saved file with none: unbounded)."""
    now = parse_when(now_opt, "--now") if now_opt else None
    win = resolve_window(
        since=since, until=until, month=month, last=last, now=now, default_unbounded=bool(sacct_file)
    )
    return win, now


def parse_delimiter(text: Optional[str]) -> Optional[str]:
    """``--sacct-delimiter``: the character itself, or an escape such as ``\\x1f``."""
    if text is None:
        return None
    value = text
    if text.startswith("\\"):
        try:
            value = text.encode("ascii").decode("unicode_escape")
        except (UnicodeError, ValueError):
            raise UsageError(f"--sacct-delimiter {text!r}: not a valid escape") from None
    if not value or "\n" in value or "\r" in value:
        raise UsageError(f"--sacct-delimiter {text!r}: must be a non-empty string without a line break")
    return value


@dataclass(frozen=True)
class Dump:
    """A saved dump as the options name it: ``--sacct-file`` (None: call sacct; ``-``: stdin),
    ``--sacct-columns`` (a header-less dump's columns), ``--sacct-delimiter`` and
    ``--trust-free-text`` (read a dump with free-text columns all the same)."""

    path: Optional[str] = None
    columns_text: Optional[str] = None
    delimiter_text: Optional[str] = None
    trust_free_text: bool = False

    def validate(self) -> None:
        """The format options describe a file: refuse them without one."""
        if (self.columns_text or self.delimiter_text) and not self.path:
            raise UsageError("--sacct-columns and --sacct-delimiter describe a --sacct-file; give one")

    @property
    def columns(self) -> Optional[List[str]]:
        return sacct.parse_column_list(self.columns_text) if self.columns_text is not None else None

    @property
    def delimiter(self) -> Optional[str]:
        return parse_delimiter(self.delimiter_text)

    def probe(self):
        """The dump's layout for the DuckDB engine (:class:`.engine.FileSource`), None when it
        has no row."""
        from slurmkit.report import engine

        return engine.probe_file(self.path, self.columns, self.delimiter)

    def check(self, columns: Sequence[str], need: Sequence[str] = ()) -> None:
        """Refuse free text (unless trusted) and a dump that lacks a column the report needs."""
        sacct.refuse_free_text(self.path, columns, self.trust_free_text)
        lacking = sacct.missing_columns(columns, list(sacct.REQUIRED_COLUMNS) + list(need))
        if lacking:
            raise UsageError(
                f"--sacct-file {self.path}: missing column(s) {', '.join(lacking)}; {sacct.recommended_hint()}"
            )


def filters(
    users: Sequence[str] = (),
    accounts: Sequence[str] = (),
    partitions: Sequence[str] = (),
    states: Sequence[str] = (),
    names: Sequence[str] = (),
) -> sacct.Filters:
    """The row filters from the options' lists (empty: no filter; states in upper case)."""

    def one(values: Sequence[str]) -> Optional[frozenset]:
        return frozenset(values) if values else None

    return sacct.Filters(
        one(users), one(accounts), one(partitions), one([s.upper() for s in states]), one(names)
    )


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC for the body of a report: it builds 10^5-10^6 acyclic tuples, and
    generational passes over them cost more than the grouping (see sacct.parse_rows).
    Re-enabled afterwards, so in-process callers (tests) keep a normal interpreter."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _need_duckdb(what: str) -> None:
    if importlib.util.find_spec("duckdb") is None:
        raise UsageError(f"{what} needs the report extra: pip install 'slurmkit[report]'")


def use_engine(choice: str, sacct_file: Optional[str]) -> bool:
    """Whether to try the DuckDB engine: for a saved file (not stdin), when told
    ``--engine duckdb``, or for ``auto`` when the ``slurmkit[report]`` extra is installed
    and the file is large (:data:`AUTO_ENGINE_BYTES`)."""
    if choice == "python" or not sacct_file or sacct_file == "-":
        if choice == "duckdb" and (not sacct_file or sacct_file == "-"):
            raise UsageError("--engine duckdb reads a saved file: give --sacct-file FILE (not -)")
        return False
    if importlib.util.find_spec("duckdb") is None:
        if choice == "duckdb":
            raise UsageError("--engine duckdb needs the report extra: pip install 'slurmkit[report]'")
        return False
    try:
        st = os.stat(sacct_file)
    except OSError:
        return False  # the reference reports the missing file
    if not stat.S_ISREG(st.st_mode):  # a pipe cannot be read twice (the engine counts its lines too)
        if choice == "duckdb":
            raise UsageError(f"--engine duckdb reads a regular file: {sacct_file} is not one")
        return False
    return choice != "auto" or st.st_size >= AUTO_ENGINE_BYTES


# --------------------------------------------------------------------------- the sums


@dataclass(frozen=True)
class Query:
    """What a report asks of the attempts, whichever engine and source answer it: the window,
    filters and grouping, prices, the health log's drains (None: not joined) and the report
    config (``rcfg``)."""

    window: Window
    now: Optional[float]
    filters: sacct.Filters
    dims: List[str]
    prices: Any
    rcfg: Dict[str, Any]
    drains: Optional[list]
    hours: float

    def engine_sums(self, src):
        """``(groups, total, stats)`` from the DuckDB engine (raises ``NeedsReference``,
        ``duckdb.Error``)."""
        from slurmkit.report import engine

        return engine.run(
            src,
            window=self.window,
            now=self.now,
            filters=self.filters,
            by=self.dims,
            prices=self.prices,
            max_gpus=self.rcfg["max_gpus"],
            prolog_requeue_seconds=self.rcfg["prolog_requeue_seconds"],
            drains=self.drains,
            lost_window_hours=self.hours,
        )

    def aggregator(self):
        """The reference's aggregator, fed attempts as they are parsed (slurmkit.report.stream)."""
        from slurmkit.report.stream import StreamingAggregator

        return StreamingAggregator(
            self.dims,
            window_start=self.window.start,
            prices=self.prices,
            prolog_requeue_seconds=self.rcfg["prolog_requeue_seconds"],
            drains=self.drains,
            lost_window_hours=self.hours,
        )


@dataclass
class Sums:
    """The accumulators of a report's attempts (``groups``, ``total``), what the parser saw
    (``stats``), which engine answered (``engine``), the sacct command run (None: none) and the
    warnings to print."""

    groups: Any
    total: Any
    stats: sacct.ParseStats
    engine: Dict[str, Any]
    command: Optional[str] = None
    warnings: List[str] = field(default_factory=list)


def sums(
    q: Query, *, dump: Dump, archive: Optional[str], engine: str, need: Sequence[str], quiet: bool = True
) -> Sums:
    """The sums of the attempts of the archive, of a saved file (the DuckDB engine where it
    takes the file) or of a live sacct call; the reference aggregates what the engine does
    not read, rows as they are parsed. ``quiet=False`` shows progress on a terminal."""
    if archive:
        if dump.path or dump.columns_text or dump.delimiter_text:
            raise UsageError("--archive and --sacct-file are two sources: give one")
        return _archive_sums(q, archive, engine)
    dump.validate()
    with progress.reading(dump.path, quiet=quiet):
        out = _file_sums(q, dump, need, engine) if use_engine(engine, dump.path) else None
        if out is not None and out.groups is not None:
            return out
        ref = _reference_sums(q, dump, need)
    if out is not None:  # (the engine's reason for handing the file over)
        ref.engine = out.engine
    return ref


def _file_sums(q: Query, dump: Dump, need: Sequence[str], engine: str) -> Sums:
    """The DuckDB engine's sums of a saved file; ``groups`` None when the reference is to read
    it (an empty file, rows the engine hands over, or DuckDB failing under ``--engine auto``)."""
    from slurmkit.report import engine as eng
    from slurmkit.report.duck import duckdb

    src = dump.probe()
    if src is None:
        return Sums(None, None, sacct.ParseStats(), {"name": "python", "why": "empty file"})
    dump.check(src.columns, need)
    try:
        groups, total, stats = q.engine_sums(src)
    except eng.NeedsReference as exc:
        log.info("duckdb engine: %s; using the reference path", exc)
        return Sums(None, None, sacct.ParseStats(), {"name": "python", "why": str(exc)})
    except duckdb.Error as exc:
        first = str(exc).splitlines()[0]
        if engine == "duckdb":
            raise UsageError(f"--sacct-file {dump.path}: DuckDB could not read it: {first}") from None
        log.info("duckdb engine failed (%s); using the reference path", first)
        return Sums(None, None, sacct.ParseStats(), {"name": "python", "why": "duckdb: " + first})
    warning = stats.warning(dump.path)
    meta = {"name": "duckdb", "version": duckdb.__version__}
    return Sums(groups, total, stats, meta, None, [warning] if warning else [])


def _reference_sums(q: Query, dump: Dump, need: Sequence[str]) -> Sums:
    """The reference's sums of a saved file or of a live sacct call, rows as they are parsed."""
    agg = q.aggregator()
    limits = {"max_gpus": q.rcfg["max_gpus"]}
    if dump.path:
        _, stats, _ = sacct.read_sacct_file(
            dump.path,
            window=q.window,
            now=q.now,
            filters=q.filters,
            need_columns=need,
            columns=dump.columns,
            delimiter=dump.delimiter,
            sink=agg.add,
            trust_free_text=dump.trust_free_text,
            **limits,
        )
        source, command = dump.path, None
    else:
        query = sacct.build_query(q.window, q.filters)
        command = display(query)
        log.info("running %s", command)
        _, stats = sacct.run_query(
            query,
            window=q.window,
            now=q.now,
            filters=q.filters,
            timeout=q.rcfg["sacct_timeout"],
            sink=agg.add,
            names="JobName" in need,
            **limits,
        )
        source = "sacct"
    groups, total = agg.result()
    warning = stats.warning(source)
    return Sums(groups, total, stats, {"name": "python"}, command, [warning] if warning else [])


def _archive_sums(q: Query, directory: str, engine: str) -> Sums:
    """The sums of the archive's attempts, from the DuckDB engine, or from the reference over
    its rows (``--engine python``, or a report the engine hands over)."""
    _need_duckdb("--archive")
    from slurmkit.report import archive as arch
    from slurmkit.report import engine as eng

    src = arch.source(directory)
    stale = arch.stale_months(directory)
    warnings: List[str] = []
    if stale:
        listed = ", ".join(f"{m} (rules {v})" for m, v in sorted(stale.items()))
        warnings.append(
            f"archive {directory}: month(s) {listed} were ingested under other rules than "
            f"this slurmkit's ({arch.RULES_VERSION}): their rows follow the old rules; ingest them again"
        )
    why = "--engine python"
    if src.multi is None and not arch.typed(directory):  # (an archive of this slurmkit has src.multi)
        why = "months written before the typed columns (ingest them again)"
    elif engine != "python":
        try:
            groups, total, stats = q.engine_sums(src)
            return Sums(groups, total, stats, {"name": "duckdb"}, None, warnings)
        except eng.NeedsReference as exc:
            why = str(exc)
    agg = q.aggregator()
    _, stats = sacct.parse_rows(
        arch.lines(directory),
        list(sacct.FIELDS),
        sep=arch.SEP,
        window=q.window,
        now=q.now,
        filters=q.filters,
        max_gpus=q.rcfg["max_gpus"],
        sink=agg.add,
    )
    warning = stats.warning(f"archive {directory} (row numbers)")
    groups, total = agg.result()
    return Sums(
        groups, total, stats, {"name": "python", "why": why}, None, warnings + ([warning] if warning else [])
    )


def display(query: sacct.SacctQuery) -> str:
    """The sacct command of ``query`` as a shell line (with the configured sacct binary)."""
    from slurmkit.slurm import client

    return query.display(client.binary("sacct"))


# --------------------------------------------------------------------------- usage and lost


@dataclass
class UsageReport:
    """A usage or lost report (:class:`.aggregate.Report`, its ``meta`` filled) and the
    warnings to print."""

    report: Any
    warnings: List[str]


def show_command(
    win: Window, flt: sacct.Filters, dump: Dump, by: Optional[str], price: Optional[str], rcfg: Dict[str, Any]
) -> str:
    """``--show-command``: the sacct command a report runs, or the one a saved file should
    have been made with (a bad ``--by`` or ``--price`` is refused all the same)."""
    from slurmkit.report.aggregate import parse_by
    from slurmkit.report.cost import price_table

    parse_by(by if by is not None else rcfg["default_by"])
    price_table(rcfg, price)
    if dump.path:
        return sacct.recommended_command(win)
    return display(sacct.build_query(win, flt))


def usage_report(
    *,
    win: Window,
    now: Optional[float],
    flt: sacct.Filters,
    by: Optional[str],
    dump: Dump,
    archive: Optional[str],
    engine: str,
    price: Optional[str],
    health_log: Optional[str],
    no_health_log: bool,
    lost_window_hours: Optional[float],
    rcfg: Dict[str, Any],
    log_dir: str,
    quiet: bool = True,
) -> UsageReport:
    """The usage report (``slurmkit report``, ``report lost``): GPU-hours by ``by`` (default
    ``report.default_by``) over ``win``, from whichever source and engine answer."""
    from slurmkit.report.aggregate import finish, parse_by
    from slurmkit.report.cost import price_table
    from slurmkit.report.lost import read_health_log

    dims = parse_by(by if by is not None else rcfg["default_by"])
    prices = price_table(rcfg, price)
    need = [sacct.COLUMN_FOR[d] for d in dims if d in sacct.COLUMN_FOR]
    need += [
        c
        for c, active in (
            ("User", flt.users),
            ("Account", flt.accounts),
            ("Partition", flt.partitions),
            ("JobName", flt.names),
        )
        if active
    ]
    hl = None
    hours = lost_window_hours if lost_window_hours is not None else rcfg["lost_window_hours"]
    health_meta: Dict[str, Any] = {"joined": False}
    if not no_health_log:
        pattern = health_log or rcfg["health_log"] or os.path.join(log_dir, HEALTH_LOG_NAME)
        hl = read_health_log(pattern)
        if hl is not None:
            health_meta = {
                "joined": True,
                "path": pattern,
                "drain_events": len(hl.events),
                "window_hours": hours,
                "bad_lines": hl.bad_lines,
            }
        elif health_log:
            raise UsageError(f"--health-log {health_log}: no such file")
    q = Query(win, now, flt, dims, prices, rcfg, hl.events if hl is not None else None, hours)
    with gc_paused():
        s = sums(q, dump=dump, archive=archive, engine=engine, need=need, quiet=quiet)
        report = finish(
            s.groups,
            s.total,
            dims,
            priced=bool(prices and prices.enabled),
            health=hl is not None,
            currency=prices.currency if prices else "USD",
        )
    report.totals["excluded_rows"] = s.stats.malformed
    group = ", ".join(dims) if dims else "cluster"
    report.meta = {
        "title": f"GPU-hours by {group}, {win.label}",
        "window": win.to_dict(),
        "source": dump.path or (f"archive {archive}" if archive else "sacct"),
        "sacct_command": s.command,
        "generated_at": int(time.time()),
        "timezone": time.strftime("%Z"),
        "parse": s.stats.to_dict(),
        "prices": prices.to_dict() if prices.enabled else None,
        "health_log": health_meta,
        "engine": s.engine,
        "filters": {
            k: sorted(v) if v else None
            for k, v in (
                ("user", flt.users),
                ("account", flt.accounts),
                ("partition", flt.partitions),
                ("state", flt.states),
                ("name", flt.names),
            )
        },
    }
    return UsageReport(report, s.warnings)


# --------------------------------------------------------------------------- capacity


def capacity_report(
    *,
    win: Window,
    now: Optional[float],
    by: str,
    partitions: Sequence[str],
    gpus_override: Optional[int],
    dump: Dump,
    archive: Optional[str],
    engine: str,
    rcfg: Dict[str, Any],
    quiet: bool = True,
) -> Tuple[Dict[str, Any], List[str]]:
    """``(data, warnings)`` of ``report capacity``: the used GPU-hours are the usage report's
    sums (by partition or GPU type) from whichever engine reads the jobs; the installed ones
    come from sinfo (or ``gpus_override``)."""
    from slurmkit.report.capacity import capacity_rows, used_from_usage

    if not win.bounded or win.start <= 0:
        raise UsageError("capacity needs a bounded window: give --since, --month or --last")
    if gpus_override is not None and by != "total":
        raise UsageError("--gpus gives only a cluster total; use it with --by total")
    parts = frozenset(partitions) if partitions else None
    flt = sacct.Filters(partitions=parts)
    q = Query(win, now, flt, [] if by == "total" else [by], None, rcfg, None, rcfg["lost_window_hours"])
    with gc_paused():
        s = sums(
            q,
            dump=dump,
            archive=archive,
            engine=engine,
            need=["Partition"] if by == "partition" or parts else [],
            quiet=quiet,
        )
    used, used_total = used_from_usage(s.groups, s.total, by)
    if gpus_override is not None:
        inventory = None
    else:
        from slurmkit.report.cost import node_inventory
        from slurmkit.slurm import client

        inventory = node_inventory(client.nodes())
    data = capacity_rows(
        used,
        used_total,
        win,
        by=by,
        inventory=inventory,
        gpus_override=gpus_override,
        partitions=parts,
        now=now,
    )
    data["meta"]["sacct_command"] = s.command
    data["meta"]["jobs"] = dump.path or (f"archive {archive}" if archive else "sacct")
    data["meta"]["engine"] = s.engine
    data["meta"]["excluded_rows"] = s.stats.malformed  # (malformed or impossible: not counted)
    return data, s.warnings


# --------------------------------------------------------------------------- efficiency


@dataclass
class EfficiencyReport:
    """``report efficiency``'s rows (worst first), meta, warnings, and whether any job counted."""

    rows: List[Dict[str, Any]]
    meta: Dict[str, Any]
    warnings: List[str]
    jobs: int


def efficiency_report(
    *,
    win: Window,
    by: str,
    users: Sequence[str],
    accounts: Sequence[str],
    partitions: Sequence[str],
    job_ids: Sequence[str],
    idle_below: float,
    top: int,
    dump: Dump,
    rcfg: Dict[str, Any],
    quiet: bool = True,
) -> EfficiencyReport:
    """GPU efficiency from the epilog's summaries in sacct's AdminComment (:mod:`.efficiency`)."""
    import math

    from slurmkit.report.efficiency import from_file, from_sacct, group, sacct_args

    if not math.isfinite(idle_below) or not 0 <= idle_below <= 100:
        raise UsageError(f"--idle-below {idle_below}: expected a percent between 0 and 100")
    if top < 0:
        raise UsageError("--top must be >= 0")
    span = (win.start, win.end)
    dump.validate()
    if dump.path:
        with progress.reading(dump.path, quiet=quiet):
            res = from_file(
                dump.path,
                idle_below=idle_below,
                window=span,
                columns=dump.columns,
                delimiter=dump.delimiter,
                trust_free_text=dump.trust_free_text,
            )
        command = None
    else:
        args = sacct_args(span, users, accounts, partitions, job_ids)
        command = display(sacct.SacctQuery(list(args), {"SLURM_TIME_FORMAT": "%s"}))
        res = from_sacct(
            args, idle_below=idle_below, window=None if job_ids else span, timeout=rcfg["sacct_timeout"]
        )
    jobs = [
        j
        for j in res.jobs
        if (not users or j.user in users)
        and (not accounts or j.account in accounts)
        and (not partitions or j.partition in partitions)
        and (not job_ids or j.job_id in job_ids)
    ]
    rows = group(jobs, by)
    if top:
        rows = rows[:top]
    meta = {
        "title": f"GPU efficiency by {by}, {win.label} (worst first; idle < {idle_below:g}%)",
        "window": win.to_dict(),
        "source": dump.path or "sacct",
        "sacct_command": command,
        "idle_below_pct": idle_below,
        "generated_at": int(time.time()),
        "parse": {
            "rows": res.rows,
            "malformed": res.malformed,
            "bad_summaries": res.bad_comments,
            "skipped_running": res.skipped_running,
        },
    }
    return EfficiencyReport(rows, meta, res.warnings[: sacct.MAX_LISTED_LINES], len(jobs))


# --------------------------------------------------------------------------- ingest


@dataclass
class Ingested:
    """What ``report ingest`` did (:func:`.archive.ingest`'s counts; None: the dump had no row)
    and the warnings to print."""

    counts: Optional[Dict[str, Any]]
    warnings: List[str]


def ingest(
    directory: str,
    *,
    dump: Dump,
    win: Optional[Window],
    rcfg: Dict[str, Any],
    quiet: bool = True,
) -> Ingested:
    """Add a saved dump's job rows, or live sacct's over ``win``, to the archive."""
    _need_duckdb("report ingest")
    from slurmkit.report import archive as arch
    from slurmkit.report import engine as eng

    dump.validate()
    if dump.path:
        if dump.path == "-":
            raise UsageError("report ingest reads a file, not stdin")
        with progress.reading(dump.path, quiet=quiet):
            src = dump.probe()
            if src is None:
                return Ingested(None, [])
            sacct.refuse_free_text(dump.path, src.columns, dump.trust_free_text)
            out = arch.ingest(directory, src)
        warning = out.pop("bad_rows").warning(dump.path)
        return Ingested(out, [warning] if warning else [])
    assert win is not None
    query = sacct.build_query(win, truncate=False)
    log.info("running %s", display(query))
    records = sacct.live_lines(query, names=True, timeout=rcfg["sacct_timeout"])
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as tmp:
        tmp.writelines(line + "\n" for line in records)
        tmp.flush()
        src = eng.FileSource(tmp.name, list(sacct.FIELDS), sacct.SACCT_DELIMITER, False, 1)
        with progress.reading(tmp.name, quiet=quiet, label="sacct output"):
            out = arch.ingest(directory, src)
        warning = out.pop("bad_rows").warning("sacct output")
    return Ingested(out, [warning] if warning else [])


def sql(directory: Optional[str], query: str):
    """``(column names, rows)`` of a read-only query over the archive (``report sql``)."""
    _need_duckdb("report sql")
    from slurmkit.report import archive as arch

    return arch.sql(directory, query)
