"""``slurmkit report``: GPU-hours, cost and lost hours from sacct.

``slurmkit report [OPTIONS]`` is the usage report; ``slurmkit report lost`` the lost
view; ``slurmkit report capacity`` the share of installed GPU-hours used;
``slurmkit report build-vs-rent`` the break-even calculator.

Exit codes: 0 with data, and 0 with "no jobs in window" on stderr; 2 a bad flag,
window or config; 3 sacct or sinfo failed (missing, timed out, slurmdbd down).
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import math
import os
import stat
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple

import click

from slurmkit.cli.common import common_options, load_config, print_json, setup_logging
from slurmkit.errors import UsageError
from slurmkit.report import DEFAULT_IDLE_BELOW, EFFICIENCY_BY, FORMATS, VIEWS

log = logging.getLogger("slurmkit.report")

HEALTH_LOG_NAME = "health.jsonl"


def _csv_set(values: Tuple[str, ...]) -> Optional[FrozenSet[str]]:
    items = [v.strip() for value in values for v in value.split(",") if v.strip()]
    return frozenset(items) if items else None


def period_options(f: Callable) -> Callable:
    for opt in reversed(
        [
            click.option(
                "--since", help="Start of the window: YYYY-MM-DD[THH:MM[:SS]] (local time) or @EPOCH."
            ),
            click.option("--until", help="End of the window (exclusive); default now."),
            click.option("--month", help="A calendar month, YYYY-MM (local time)."),
            click.option("--last", help="The last period up to --until/now: 12h, 7d, 2w."),
            click.option(
                "--sacct-file",
                type=click.Path(dir_okay=False, allow_dash=True),
                help="Read saved `sacct --parsable2` output (with header) instead of calling sacct; "
                "- reads stdin.",
            ),
            click.option("--now", "now_opt", hidden=True, help="Pretend the time is this (tests)."),
        ]
    ):
        f = opt(f)
    return f


def dump_format_options(f: Callable) -> Callable:
    """How to read a saved dump that has no header or another delimiter (kept apart from
    :func:`period_options` so commands built on that keep their signature)."""
    for opt in reversed(
        [
            click.option(
                "--sacct-columns",
                help="The file has no header: its columns in order, as its sacct "
                "--format list (JobID,JobName,User,...).",
            ),
            click.option(
                "--sacct-delimiter", help="The file's sacct --delimiter (default: | or \\x1f, recognised)."
            ),
            click.option(
                "--trust-free-text",
                is_flag=True,
                help="Read a dump that has free-text columns (JobName, Comment, ...) all the same: a "
                "newline in a job name can forge whole rows, so only for a dump you checked.",
            ),
        ]
    ):
        f = opt(f)
    return f


#: ``--engine``: usage, lost and capacity reports read saved files (and the archive) with it
engine_option = click.option(
    "--engine",
    type=click.Choice(["auto", "duckdb", "python"]),
    default="auto",
    show_default=True,
    help="Saved files: duckdb (the slurmkit[report] extra; auto uses it for files of "
    "48 MiB or more) or the pure-Python reference.",
)


def usage_options(f: Callable) -> Callable:
    for opt in reversed(
        [
            click.option(
                "--by",
                help="Group by user, account, partition, state, gpu_type, node, day, week or "
                "month; comma-separated to combine (account,user).",
            ),
            click.option(
                "--user", "users", multiple=True, help="Only these users (comma-separated or repeated)."
            ),
            click.option("--account", "accounts", multiple=True, help="Only these accounts."),
            click.option("--partition", "partitions", multiple=True, help="Only these partitions."),
            click.option(
                "--state",
                "states",
                multiple=True,
                help="Only attempts that ended in these states (COMPLETED, FAILED, TIMEOUT ...).",
            ),
            click.option("--name", "names", multiple=True, help="Only jobs with these exact job names."),
            click.option(
                "--format",
                "fmt",
                type=click.Choice(FORMATS),
                default="table",
                show_default=True,
                help="Output format.",
            ),
            click.option("--json", "as_json", is_flag=True, help="Same as --format json."),
            click.option(
                "--view",
                type=click.Choice(VIEWS),
                default=None,
                help="Columns: usage (default), states (GPU-hours by final state), lost.",
            ),
            click.option(
                "--plot",
                "plot_path",
                type=click.Path(dir_okay=False),
                help="Also write a bar chart of GPU-hours per group (FILE.png or FILE.svg).",
            ),
            click.option(
                "--price",
                help="Price per GPU-hour (2.50) or per type (h100=3.1,default=2); "
                "default: report.prices in the site config.",
            ),
            click.option(
                "--health-log",
                help="slurmkit health log (JSON lines) to join for suspect hours; "
                "default: report.health_log or <paths.log_dir>/health.jsonl.",
            ),
            click.option("--no-health-log", is_flag=True, help="Do not join the health log."),
            click.option(
                "--lost-window-hours",
                type=float,
                default=None,
                help="Health join: hours before a drain that make a job suspect (default 6).",
            ),
            click.option(
                "--show-command",
                is_flag=True,
                help="Print the exact sacct command and exit without running it.",
            ),
            click.option(
                "--archive",
                type=click.Path(file_okay=False),
                help="Read the accounting archive made by `slurmkit report ingest` instead of sacct.",
            ),
            engine_option,
        ]
    ):
        f = opt(f)
    return f


def _load(config_path: Optional[str]):
    cfg = load_config(config_path)
    return cfg, cfg.section("report"), cfg.section("paths")


def _window(since, until, month, last, sacct_file, now_opt):
    from slurmkit.report.window import parse_when, resolve_window

    now = parse_when(now_opt, "--now") if now_opt else None
    return resolve_window(
        since=since, until=until, month=month, last=last, now=now, default_unbounded=bool(sacct_file)
    ), now


@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic GC for the body of a report command: it builds 10^5-10^6
    acyclic tuples, and generational passes over them cost more than the grouping
    (see sacct.parse_rows). Re-enabled afterwards, so in-process callers (tests)
    keep a normal interpreter."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _delimiter(text: Optional[str]) -> Optional[str]:
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


def load_attempts(
    *,
    window,
    now,
    filters,
    sacct_file: Optional[str],
    need_columns=(),
    timeout: float,
    sacct_columns: Optional[str] = None,
    sacct_delimiter: Optional[str] = None,
    max_gpus: Optional[int] = None,
    sink=None,
    trust_free_text: bool = False,
    names: bool = False,
):
    """Attempts from a saved file or a live sacct call; prints the malformed-row warning.
    With ``sink`` each attempt goes there as it is parsed and none is kept (see
    :func:`slurmkit.report.sacct.parse_rows`)."""
    from slurmkit.report import sacct

    limits = {"max_gpus": max_gpus} if max_gpus is not None else {}
    if (sacct_columns or sacct_delimiter) and not sacct_file:
        raise UsageError("--sacct-columns and --sacct-delimiter describe a --sacct-file; give one")
    if sacct_file:
        columns = sacct.parse_column_list(sacct_columns) if sacct_columns is not None else None
        attempts, stats, _ = sacct.read_sacct_file(
            sacct_file,
            window=window,
            now=now,
            filters=filters,
            need_columns=need_columns,
            columns=columns,
            delimiter=_delimiter(sacct_delimiter),
            sink=sink,
            trust_free_text=trust_free_text,
            **limits,
        )
        source = sacct_file
        command = None
    else:
        query = sacct.build_query(window, filters)
        from slurmkit.slurm import client

        command = query.display(client.binary("sacct"))
        log.info("running %s", command)
        attempts, stats = sacct.run_query(
            query, window=window, now=now, filters=filters, timeout=timeout, sink=sink, names=names, **limits
        )
        source = "sacct"
    warning = stats.warning(source)
    if warning:
        click.echo(f"slurmkit: warning: {warning}", err=True)
    return attempts, stats, command


def run_usage(**kwargs: Any) -> int:
    with gc_paused():
        return _run_usage(**kwargs)


#: ``--engine auto`` uses DuckDB for saved files at least this large (about 300,000 rows): below it
#: the reference is faster, because DuckDB's import and queries cost the same at any size; the
#: measured crossover is in docs/benchmarks.md.
AUTO_ENGINE_BYTES = 48 << 20


def _use_engine(choice: str, sacct_file: Optional[str]) -> bool:
    """Whether to try the DuckDB engine: for a saved file (not stdin), when told
    ``--engine duckdb``, or for ``auto`` when the ``slurmkit[report]`` extra is installed
    and the file is large (:data:`AUTO_ENGINE_BYTES`)."""
    if choice == "python" or not sacct_file or sacct_file == "-":
        if choice == "duckdb" and (not sacct_file or sacct_file == "-"):
            raise UsageError("--engine duckdb reads a saved file: give --sacct-file FILE (not -)")
        return False
    import importlib.util

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


@dataclass(frozen=True)
class _Query:
    """What a report asks of the attempts, whichever engine and source answer it: the window,
    filters and grouping, prices, the health log's drains (None: not joined) and the report
    config (``rcfg``)."""

    window: Any
    now: Optional[float]
    filters: Any
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


def _sums(
    q: _Query,
    *,
    archive,
    sacct_file,
    sacct_columns,
    sacct_delimiter,
    engine: str,
    need,
    trust_free_text=False,
):
    """``(groups, total, stats, engine meta, sacct command)``: the accumulators of the attempts
    of the archive (see :func:`_archive_sums`), of a saved file (the DuckDB engine where it
    takes the file, see :func:`_file_sums`) or of a live sacct call; the reference
    aggregates what the engine does not read, rows as they are parsed."""
    if archive:
        if sacct_file or sacct_columns or sacct_delimiter:
            raise UsageError("--archive and --sacct-file are two sources: give one")
        return (*_archive_sums(q, archive, engine), None)
    meta: Dict[str, Any] = {"name": "python"}
    if _use_engine(engine, sacct_file):
        groups, total, stats, meta = _file_sums(
            q,
            sacct_file,
            sacct_columns,
            sacct_delimiter,
            need,
            explicit=engine == "duckdb",
            trust=trust_free_text,
        )
        if groups is not None:
            return groups, total, stats, meta, None
    agg = q.aggregator()
    _, stats, command = load_attempts(
        window=q.window,
        now=q.now,
        filters=q.filters,
        sacct_file=sacct_file,
        need_columns=need,
        timeout=q.rcfg["sacct_timeout"],
        sacct_columns=sacct_columns,
        sacct_delimiter=sacct_delimiter,
        max_gpus=q.rcfg["max_gpus"],
        sink=agg.add,
        trust_free_text=trust_free_text,
        names="JobName" in need,
    )
    groups, total = agg.result()
    return groups, total, stats, meta, command


def _file_sums(
    q: _Query, sacct_file: str, sacct_columns, sacct_delimiter, need, *, explicit: bool, trust: bool = False
):
    """``(groups, total, stats, engine meta)``: the DuckDB engine's accumulators of a saved
    file, or ``(None, None, None, meta)`` when the input needs the reference path (rows to
    report with line numbers)."""
    from slurmkit.report import engine, sacct
    from slurmkit.report.duck import duckdb

    columns = sacct.parse_column_list(sacct_columns) if sacct_columns is not None else None
    src = engine.probe_file(sacct_file, columns, _delimiter(sacct_delimiter))
    if src is None:
        return None, None, None, {"name": "python", "why": "empty file"}
    sacct.refuse_free_text(sacct_file, src.columns, trust)
    lacking = sacct.missing_columns(src.columns, list(sacct.REQUIRED_COLUMNS) + list(need))
    if lacking:
        raise UsageError(
            f"--sacct-file {sacct_file}: missing column(s) {', '.join(lacking)}; {sacct.recommended_hint()}"
        )
    try:
        groups, total, stats = q.engine_sums(src)
    except engine.NeedsReference as exc:
        log.info("duckdb engine: %s; using the reference path", exc)
        return None, None, None, {"name": "python", "why": str(exc)}
    except duckdb.Error as exc:
        if explicit:
            raise UsageError(
                f"--sacct-file {sacct_file}: DuckDB could not read it: {str(exc).splitlines()[0]}"
            ) from None
        log.info("duckdb engine failed (%s); using the reference path", str(exc).splitlines()[0])
        return None, None, None, {"name": "python", "why": "duckdb: " + str(exc).splitlines()[0]}
    warning = stats.warning(sacct_file)
    if warning:
        click.echo(f"slurmkit: warning: {warning}", err=True)
    return groups, total, stats, {"name": "duckdb", "version": duckdb.__version__}


def _archive_sums(q: _Query, directory: str, engine: str):
    """``(groups, total, stats, engine meta)``: the accumulators of the archive's attempts, from
    the DuckDB engine, or from the reference over its rows (``--engine python``, or a report
    the engine hands over)."""
    import importlib.util

    if importlib.util.find_spec("duckdb") is None:
        raise UsageError("--archive needs the report extra: pip install 'slurmkit[report]'")
    from slurmkit.report import archive as arch
    from slurmkit.report import engine as eng
    from slurmkit.report import sacct

    src = arch.source(directory)
    stale = arch.stale_months(directory)
    if stale:
        listed = ", ".join(f"{m} (rules {v})" for m, v in sorted(stale.items()))
        click.echo(
            f"slurmkit: warning: archive {directory}: month(s) {listed} were ingested under other rules than "
            f"this slurmkit's ({arch.RULES_VERSION}): their rows follow the old rules; ingest them again",
            err=True,
        )
    why = "--engine python"
    if src.multi is None and not arch.typed(directory):  # (an archive of this slurmkit has src.multi)
        why = "months written before the typed columns (ingest them again)"
    elif engine != "python":
        try:
            groups, total, stats = q.engine_sums(src)
            return groups, total, stats, {"name": "duckdb"}
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
    if warning:
        click.echo(f"slurmkit: warning: {warning}", err=True)
    groups, total = agg.result()
    return groups, total, stats, {"name": "python", "why": why}


def _finish(groups, total, dims, prices, *, health: bool):
    """The report from accumulators (every engine's last step)."""
    from slurmkit.report.aggregate import finish

    return finish(
        groups,
        total,
        dims,
        priced=bool(prices and prices.enabled),
        health=health,
        currency=prices.currency if prices else "USD",
    )


def _run_usage(
    *,
    config_path,
    verbose,
    quiet,
    since,
    until,
    month,
    last,
    sacct_file,
    sacct_columns,
    sacct_delimiter,
    now_opt,
    by,
    users,
    accounts,
    partitions,
    states,
    names,
    fmt,
    as_json,
    view,
    plot_path,
    price,
    health_log,
    no_health_log,
    lost_window_hours,
    show_command,
    engine="auto",
    archive=None,
    default_view: str = "usage",
    trust_free_text: bool = False,
) -> int:
    from slurmkit.report import sacct
    from slurmkit.report.aggregate import parse_by
    from slurmkit.report.cost import price_table
    from slurmkit.report.lost import read_health_log
    from slurmkit.report.render import render

    setup_logging(verbose, quiet)
    cfg, rcfg, paths = _load(config_path)
    window, now = _window(since, until, month, last, sacct_file, now_opt)
    filters = sacct.Filters(
        _csv_set(users),
        _csv_set(accounts),
        _csv_set(partitions),
        frozenset(s.upper() for s in _csv_set(states)) if _csv_set(states) else None,
        _csv_set(names),
    )
    dims = parse_by(by if by is not None else rcfg["default_by"])
    fmt = "json" if as_json else fmt
    view = view or default_view
    prices = price_table(rcfg, price)

    if show_command:
        if sacct_file:
            click.echo(sacct.recommended_command(window))
        else:
            from slurmkit.slurm import client

            click.echo(sacct.build_query(window, filters).display(client.binary("sacct")))
        return 0

    need = [sacct.COLUMN_FOR[d] for d in dims if d in sacct.COLUMN_FOR]
    need += [
        c
        for c, active in (
            ("User", filters.users),
            ("Account", filters.accounts),
            ("Partition", filters.partitions),
            ("JobName", filters.names),
        )
        if active
    ]
    hl = None
    hours = lost_window_hours if lost_window_hours is not None else rcfg["lost_window_hours"]
    health_meta: Dict[str, Any] = {"joined": False}
    if not no_health_log:
        pattern = health_log or rcfg["health_log"] or os.path.join(paths["log_dir"], HEALTH_LOG_NAME)
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
    q = _Query(window, now, filters, dims, prices, rcfg, hl.events if hl is not None else None, hours)
    groups, total, stats, engine_meta, command = _sums(
        q,
        archive=archive,
        sacct_file=sacct_file,
        sacct_columns=sacct_columns,
        sacct_delimiter=sacct_delimiter,
        engine=engine,
        need=need,
        trust_free_text=trust_free_text,
    )
    report = _finish(groups, total, dims, prices, health=hl is not None)
    report.totals["excluded_rows"] = stats.malformed
    group = ", ".join(dims) if dims else "cluster"
    report.meta = {
        "title": f"GPU-hours by {group}, {window.label}",
        "window": window.to_dict(),
        "source": sacct_file or (f"archive {archive}" if archive else "sacct"),
        "sacct_command": command,
        "generated_at": int(time.time()),
        "timezone": time.strftime("%Z"),
        "parse": stats.to_dict(),
        "prices": prices.to_dict() if prices.enabled else None,
        "health_log": health_meta,
        "engine": engine_meta,
        "filters": {
            k: sorted(v) if v else None
            for k, v in (
                ("user", filters.users),
                ("account", filters.accounts),
                ("partition", filters.partitions),
                ("state", filters.states),
                ("name", filters.names),
            )
        },
    }
    if not report.totals["attempts"]:
        click.echo(f"slurmkit: no jobs in window ({window.label})", err=True)
    if report.totals["attempts"] or fmt in ("json", "csv"):
        render(report, fmt, view, sys.stdout)
    if plot_path:
        from slurmkit.report.plot import write_plot

        write_plot(report, plot_path, rcfg["plot_top"])
        if not quiet:
            click.echo(f"slurmkit: wrote {plot_path}", err=True)
    return 0


@click.group("report", invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@common_options
@period_options
@dump_format_options
@usage_options
@click.pass_context
def report(ctx: click.Context, **kwargs: Any) -> None:
    """GPU-hours, cost and lost hours from sacct (every requeued attempt, clipped
    to the window).

    \b
    Examples:
      slurmkit report --month 2026-11 --by account,user
      slurmkit report --last 7d --by day --plot usage.png
      slurmkit report --sacct-file nov.txt --by gpu_type --price h100=2.5
      slurmkit report lost --month 2026-11 --by user
      slurmkit report capacity --last 30d --by partition
      slurmkit report build-vs-rent --config etc/build-vs-rent.yaml

    Times are local (as sacct prints them); set TZ to change. Exit codes: 0 ok
    (also "no jobs in window"); 2 usage/config error; 3 sacct failed.
    """
    if ctx.invoked_subcommand is None:
        ctx.exit(run_usage(**kwargs))


@report.command("lost")
@common_options
@period_options
@dump_format_options
@usage_options
def report_lost(**kwargs: Any) -> None:
    """Lost GPU-hours by cause (NODE_FAIL, PREEMPTED, REQUEUED, TIMEOUT, FAILED after a
    prolog requeue) and health-log suspect hours; same options as `report`."""
    sys.exit(run_usage(default_view="lost", **_with_parent_options(kwargs)))


def _with_parent_options(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """``slurmkit report --month 2026-11 lost`` works like ``report lost --month 2026-11``:
    options given before the subcommand fill those the subcommand left at default."""
    ctx = click.get_current_context()
    parent = ctx.parent
    if parent is None:
        return kwargs
    from click.core import ParameterSource

    merged = dict(kwargs)
    for name, value in parent.params.items():
        if (
            name in merged
            and ctx.get_parameter_source(name) in (ParameterSource.DEFAULT, None)
            and parent.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)
        ):
            merged[name] = value
    return merged


# --------------------------------------------------------------------------- archive


@report.command("ingest")
@common_options
@period_options
@dump_format_options
@click.option(
    "--archive",
    required=True,
    type=click.Path(file_okay=False),
    help="The archive directory (Parquet files, one per month: month=YYYY-MM/data.parquet).",
)
def report_ingest(
    config_path,
    verbose,
    quiet,
    since,
    until,
    month,
    last,
    sacct_file,
    sacct_columns,
    sacct_delimiter,
    now_opt,
    archive,
    trust_free_text=False,
) -> None:
    """Add sacct job rows to the accounting archive (incremental and idempotent).

    \b
    From cron, e.g. daily with an overlapping window:
      slurmkit report ingest --archive /var/lib/slurmkit/accounting --last 2d
    From a dump saved WITHOUT -T (each attempt's real Start/End):
      slurmkit report ingest --archive DIR --sacct-file nov.txt
    """
    import importlib.util

    if importlib.util.find_spec("duckdb") is None:
        raise UsageError("report ingest needs the report extra: pip install 'slurmkit[report]'")
    from slurmkit.report import archive as arch
    from slurmkit.report import engine as eng
    from slurmkit.report import sacct

    setup_logging(verbose, quiet)
    cfg, rcfg, _ = _load(config_path)
    if sacct_file:
        if sacct_file == "-":
            raise UsageError("report ingest reads a file, not stdin")
        columns = sacct.parse_column_list(sacct_columns) if sacct_columns is not None else None
        src = eng.probe_file(sacct_file, columns, _delimiter(sacct_delimiter))
        if src is None:
            click.echo(f"slurmkit: {sacct_file}: no rows", err=True)
            return
        sacct.refuse_free_text(sacct_file, src.columns, trust_free_text)
        out = arch.ingest(archive, src)
        if out["malformed"]:
            _warn_malformed(sacct_file, src)
    else:
        window, _ = _window(since, until, month, last, None, now_opt)
        from slurmkit.slurm import client

        query = sacct.build_query(window, truncate=False)
        log.info("running %s", query.display(client.binary("sacct")))
        records = sacct.live_lines(query, names=True, timeout=rcfg["sacct_timeout"])
        import tempfile

        with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as tmp:
            tmp.writelines(line + "\n" for line in records)
            tmp.flush()
            src = eng.FileSource(tmp.name, list(sacct.FIELDS), sacct.SACCT_DELIMITER, False, 1)
            out = arch.ingest(archive, src)
            if out["malformed"]:
                _warn_malformed(tmp.name, src, label="sacct output")
    if not quiet:
        months = ", ".join(f"{m}: {n}" for m, n in out["months"].items()) or "none"
        click.echo(
            f"slurmkit: ingested {out['rows']} attempt(s) into {archive} ({out['not_started']} not started, "
            f"{out['malformed']} malformed or impossible: skipped); rows per month now: {months}",
            err=True,
        )


def _warn_malformed(path: str, src, label: Optional[str] = None) -> None:
    """The reference parser's warning (line numbers, reasons) for rows ingest skipped."""
    from slurmkit.report import sacct
    from slurmkit.report.window import resolve_window

    lines = open(path, encoding="utf-8", errors="replace", newline=None)
    with lines:
        for _ in range(src.first_row - 1):
            next(lines, None)
        rows = sacct._strip_trailing(lines, src.sep) if src.trailing else lines
        seen: set = set()

        def count_only(_attempt, row_hash: int) -> bool:
            # keep no attempt (a dump may hold millions), only what tells an exact duplicate
            if row_hash in seen:
                return False
            seen.add(row_hash)
            return True

        _, stats = sacct.parse_rows(
            rows,
            src.columns,
            sep=src.sep,
            window=resolve_window(default_unbounded=True),
            first_line=src.first_row,
            sink=count_only,
        )
    warning = stats.warning(label or path)
    if warning:
        click.echo(f"slurmkit: warning: {warning}", err=True)


@report.command("sql")
@click.argument("query")
@click.option("--archive", type=click.Path(file_okay=False), help="The archive: queried as the view `jobs`.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json", "markdown"]),
    default="table",
    show_default=True,
)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("-v", "--verbose", count=True, hidden=True)
@click.option("-q", "--quiet", is_flag=True, hidden=True)
def report_sql(query, archive, fmt, as_json, verbose, quiet) -> None:
    """Run an ad-hoc SQL query (DuckDB) over the archive, e.g.

    \b
      slurmkit report sql --archive DIR "SELECT month, count(*) FROM jobs GROUP BY month ORDER BY month"
    """
    import importlib.util

    if importlib.util.find_spec("duckdb") is None:
        raise UsageError("report sql needs the report extra: pip install 'slurmkit[report]'")
    from slurmkit.report import archive as arch
    from slurmkit.report.table import write_csv, write_markdown, write_text

    setup_logging(verbose, quiet)
    names, rows = arch.sql(archive, query)
    fmt = "json" if as_json else fmt
    if fmt == "json":
        print_json([dict(zip(names, r)) for r in rows])
    elif fmt == "csv":
        write_csv(sys.stdout, names, rows)
    else:
        cells = [[("-" if v is None else str(v)) for v in r] for r in rows]
        left = [False] * len(names)  # (sql's table has always been left-aligned)
        if fmt == "markdown":
            write_markdown(sys.stdout, names, cells, left)
        else:
            write_text(sys.stdout, names, cells, left)


# --------------------------------------------------------------------------- capacity


@report.command("capacity")
@common_options
@period_options
@dump_format_options
@click.option(
    "--by",
    type=click.Choice(["total", "partition", "gpu_type"]),
    default="total",
    show_default=True,
    help="One row for the cluster, or per partition / GPU type.",
)
@click.option("--partition", "partitions", multiple=True, help="Only these partitions.")
@click.option(
    "--gpus", "gpus_override", type=int, default=None, help="Installed GPUs (skip sinfo; only --by total)."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json", "markdown"]),
    default="table",
    show_default=True,
)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option(
    "--archive",
    type=click.Path(file_okay=False),
    help="Read the jobs from the accounting archive made by `slurmkit report ingest` instead of sacct.",
)
@engine_option
def report_capacity(
    config_path,
    verbose,
    quiet,
    since,
    until,
    month,
    last,
    sacct_file,
    now_opt,
    by,
    partitions,
    gpus_override,
    fmt,
    as_json,
    archive=None,
    engine="auto",
    sacct_columns=None,
    sacct_delimiter=None,
    trust_free_text=False,
) -> None:
    """Fraction of the installed GPU-hours (sinfo GPU counts x window) that jobs used.

    The used GPU-hours of a group are those of `slurmkit report --by partition` (or
    gpu_type) over the same window: each attempt clipped to it."""
    from slurmkit.report import sacct
    from slurmkit.report.capacity import capacity_rows, render_capacity, used_from_usage

    setup_logging(verbose, quiet)
    cfg, rcfg, _ = _load(config_path)
    window, now = _window(since, until, month, last, sacct_file, now_opt)
    if not window.bounded or window.start <= 0:
        raise UsageError("capacity needs a bounded window: give --since, --month or --last")
    if gpus_override is not None and by != "total":
        raise UsageError("--gpus gives only a cluster total; use it with --by total")
    parts = _csv_set(partitions)
    filters = sacct.Filters(partitions=parts)
    # the used GPU-seconds are the usage report's sums, from whichever engine reads the jobs
    q = _Query(
        window, now, filters, [] if by == "total" else [by], None, rcfg, None, rcfg["lost_window_hours"]
    )
    with gc_paused():
        groups, total, stats, engine_meta, command = _sums(
            q,
            archive=archive,
            sacct_file=sacct_file,
            sacct_columns=sacct_columns,
            sacct_delimiter=sacct_delimiter,
            engine=engine,
            need=["Partition"] if by == "partition" or parts else [],
            trust_free_text=trust_free_text,
        )
    used, used_total = used_from_usage(groups, total, by)
    if gpus_override is not None:
        inventory = None
    else:
        from slurmkit.report.cost import node_inventory
        from slurmkit.slurm import client

        inventory = node_inventory(client.nodes())
    data = capacity_rows(
        used,
        used_total,
        window,
        by=by,
        inventory=inventory,
        gpus_override=gpus_override,
        partitions=parts,
        now=now,
    )
    data["meta"]["sacct_command"] = command
    data["meta"]["jobs"] = sacct_file or (f"archive {archive}" if archive else "sacct")
    data["meta"]["engine"] = engine_meta
    data["meta"]["excluded_rows"] = stats.malformed  # (malformed or impossible: not counted)
    fmt = "json" if as_json else fmt
    if fmt == "json":
        print_json(data)
    else:
        sys.stdout.write(render_capacity(data, fmt))


# --------------------------------------------------------------------------- build vs rent


@report.command("build-vs-rent")
@click.option(
    "--config",
    "bvr_config",
    type=click.Path(dir_okay=False),
    help="YAML with the inputs (see etc/build-vs-rent.yaml); flags override it.",
)
@click.option("--hardware", type=float, help="Purchase cost of the cluster (one-time).")
@click.option("--power", type=float, help="Power per month.")
@click.option("--cooling", type=float, help="Cooling per month.")
@click.option("--staff", type=float, help="Staff per month.")
@click.option("--gpus", type=int, help="GPUs you would rent instead.")
@click.option("--rent", type=float, help="Rental price per GPU-hour.")
@click.option(
    "--utilization", type=float, help="Fraction of hours the rented GPUs are paid for (0-1], default 1."
)
@click.option("--months", type=int, default=24, show_default=True, help="Horizon of the cumulative table.")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True
)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("-v", "--verbose", count=True, hidden=True)
@click.option("-q", "--quiet", is_flag=True, hidden=True)
def report_build_vs_rent(
    bvr_config, hardware, power, cooling, staff, gpus, rent, utilization, months, fmt, as_json, verbose, quiet
) -> None:
    """Break-even in months of buying a cluster versus renting the same GPUs.

    break_even = hardware / (GPUs x rent x 730 h x utilisation - (power + cooling + staff))
    """
    from slurmkit.core.yamlload import LineDict, load_yaml_file
    from slurmkit.report.capacity import render_build_vs_rent
    from slurmkit.report.cost import build_vs_rent_from_mapping

    setup_logging(verbose, quiet)
    data: Any = LineDict()
    if bvr_config:
        if not os.path.exists(bvr_config):
            raise UsageError(f"--config {bvr_config}: no such file")
        data = load_yaml_file(bvr_config) or LineDict()
    flags = {
        "hardware": hardware,
        "power_per_month": power,
        "cooling_per_month": cooling,
        "staff_per_month": staff,
        "gpus": gpus,
        "rent_per_gpu_hour": rent,
        "utilization": utilization,
    }
    for k, v in flags.items():
        if v is not None:
            data[k] = v
    if not data:
        raise UsageError(
            "give --config FILE (e.g. etc/build-vs-rent.yaml) or at least --hardware, --gpus and --rent"
        )
    if months < 1:
        raise UsageError("--months must be >= 1")
    model = build_vs_rent_from_mapping(data, bvr_config or "")
    fmt = "json" if as_json else fmt
    out = model.to_dict()
    out["by_month"] = [
        {"month": m, "own": round(model.total_cost(m)[0], 2), "rent": round(model.total_cost(m)[1], 2)}
        for m in range(0, months + 1)
    ]
    if fmt == "json":
        print_json(out)
    else:
        sys.stdout.write(render_build_vs_rent(model, months, fmt))


# --------------------------------------------------------------------------- efficiency


def efficiency_options(f: Callable) -> Callable:
    for opt in reversed(
        [
            click.option(
                "--by",
                type=click.Choice(EFFICIENCY_BY),
                default="user",
                show_default=True,
                help="One row per job, user, account or partition.",
            ),
            click.option(
                "--user", "users", multiple=True, help="Only these users (comma-separated or repeated)."
            ),
            click.option("--account", "accounts", multiple=True, help="Only these accounts."),
            click.option("--partition", "partitions", multiple=True, help="Only these partitions."),
            click.option("--job", "job_ids", multiple=True, help="Only these job ids (sacct -j)."),
            click.option(
                "--idle-below",
                type=float,
                default=DEFAULT_IDLE_BELOW,
                show_default=True,
                help="A GPU whose utilisation over the job's life is under this percent is idle.",
            ),
            click.option("--top", type=int, default=0, help="Only the first N rows (worst offenders)."),
            click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True),
            click.option("--json", "as_json", is_flag=True, help="Same as --format json."),
            click.option(
                "--plot",
                "plot_path",
                type=click.Path(dir_okay=False),
                help="Also write a bar chart (FILE.png or FILE.svg).",
            ),
        ]
    ):
        f = opt(f)
    return f


def _csv_list(values: Tuple[str, ...]) -> List[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def run_efficiency(
    *,
    config_path,
    verbose,
    quiet,
    since,
    until,
    month,
    last,
    sacct_file,
    now_opt,
    by,
    users,
    accounts,
    partitions,
    job_ids,
    idle_below,
    top,
    fmt,
    as_json,
    plot_path,
    sacct_columns=None,
    sacct_delimiter=None,
    trust_free_text=False,
) -> int:
    """``slurmkit report efficiency``; returns the exit code."""
    from slurmkit.report.efficiency import (
        SACCT_DELIMITER,
        from_file,
        from_sacct,
        group,
        render,
        sacct_args,
        write_chart,
    )
    from slurmkit.report.window import parse_when, resolve_window

    setup_logging(verbose, quiet)
    cfg = load_config(config_path)
    rcfg = cfg.section("report")
    if not math.isfinite(idle_below) or not 0 <= idle_below <= 100:
        raise UsageError(f"--idle-below {idle_below}: expected a percent between 0 and 100")
    if top < 0:
        raise UsageError("--top must be >= 0")
    now = parse_when(now_opt, "--now") if now_opt else None
    win = resolve_window(
        since=since, until=until, month=month, last=last, now=now, default_unbounded=bool(sacct_file)
    )
    window = (win.start, win.end)
    users_l, accounts_l, parts_l, jobs_l = (
        _csv_list(users),
        _csv_list(accounts),
        _csv_list(partitions),
        _csv_list(job_ids),
    )
    if (sacct_columns or sacct_delimiter) and not sacct_file:
        raise UsageError("--sacct-columns and --sacct-delimiter describe a --sacct-file; give one")
    if sacct_file:
        from slurmkit.report.sacct import parse_column_list

        res = from_file(
            sacct_file,
            idle_below=idle_below,
            window=window,
            columns=parse_column_list(sacct_columns) if sacct_columns is not None else None,
            delimiter=_delimiter(sacct_delimiter),
            trust_free_text=trust_free_text,
        )
        command = None
    else:
        args = sacct_args(window, users_l, accounts_l, parts_l, jobs_l)
        from slurmkit.slurm import client

        command = "SLURM_TIME_FORMAT=%s " + " ".join([client.binary("sacct"), *args]).replace(
            SACCT_DELIMITER, "$'\\x1f'"
        )
        res = from_sacct(
            args, idle_below=idle_below, window=None if jobs_l else window, timeout=rcfg["sacct_timeout"]
        )
    jobs = [
        j
        for j in res.jobs
        if (not users_l or j.user in users_l)
        and (not accounts_l or j.account in accounts_l)
        and (not parts_l or j.partition in parts_l)
        and (not jobs_l or j.job_id in jobs_l)
    ]
    for w in res.warnings[:20]:
        click.echo(f"slurmkit: warning: {w}", err=True)
    rows = group(jobs, by)
    if top:
        rows = rows[:top]
    meta = {
        "title": f"GPU efficiency by {by}, {win.label} (worst first; idle < {idle_below:g}%)",
        "window": win.to_dict(),
        "source": sacct_file or "sacct",
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
    if not jobs:
        click.echo(f"slurmkit: no ended GPU jobs in window ({win.label})", err=True)
    fmt = "json" if as_json else fmt
    if jobs or fmt in ("json", "csv"):
        buf = io.StringIO()
        render(rows, by, fmt, meta, buf)
        sys.stdout.write(buf.getvalue())
    if plot_path:
        write_chart(rows, by, plot_path)
        if not quiet:
            click.echo(f"slurmkit: wrote {plot_path}", err=True)
    return 0


@report.command("efficiency")
@common_options
@period_options
@dump_format_options
@efficiency_options
def report_efficiency(**kwargs: Any) -> None:
    """GPU efficiency per job, user, account or partition from the epilog's AdminComment
    summaries (worst offenders first): GPU-hours allocated, used and idle, GPUs touched,
    peak memory. GPUs without a measurement read "unknown", never 0 (docs/report.md)."""
    sys.exit(run_efficiency(**kwargs))
