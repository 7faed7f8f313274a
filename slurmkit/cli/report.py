"""``slurmkit report``: GPU-hours, cost and lost hours from sacct.

``slurmkit report [OPTIONS]`` is the usage report; ``slurmkit report lost`` the lost
view; ``slurmkit report capacity`` the share of installed GPU-hours used;
``slurmkit report build-vs-rent`` the break-even calculator.

Exit codes: 0 with data, and 0 with "no jobs in window" on stderr; 2 a bad flag,
window or config; 3 sacct or sinfo failed (missing, timed out, slurmdbd down).
"""

from __future__ import annotations

import io
import logging
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

import click

from slurmkit.cli.common import common_options, load_config, message, print_json, setup_logging
from slurmkit.errors import UsageError
from slurmkit.report import DEFAULT_IDLE_BELOW, EFFICIENCY_BY, FORMATS, VIEWS

log = logging.getLogger("slurmkit.report")


def _csv_list(values: Tuple[str, ...]) -> List[str]:
    """Repeated and comma-separated option values as one list."""
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


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


def _warn(warnings: List[str]) -> None:
    for w in warnings:
        message(f"slurmkit: warning: {w}")


def _dump(sacct_file, sacct_columns=None, sacct_delimiter=None, trust_free_text=False):
    from slurmkit.report.source import Dump

    return Dump(sacct_file, sacct_columns, sacct_delimiter, trust_free_text)


def run_usage(**kwargs: Any) -> int:
    """``slurmkit report`` and ``report lost``; returns the exit code. The cyclic GC is paused
    for the whole command (see :func:`slurmkit.report.source.gc_paused`)."""
    from slurmkit.report.source import gc_paused

    with gc_paused():
        return _run_usage(**kwargs)


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
    from slurmkit.report import source
    from slurmkit.report.render import render

    setup_logging(verbose, quiet)
    cfg, rcfg, paths = _load(config_path)
    window, now = source.window(since, until, month, last, sacct_file, now_opt)
    flt = source.filters(
        _csv_list(users), _csv_list(accounts), _csv_list(partitions), _csv_list(states), _csv_list(names)
    )
    dump = _dump(sacct_file, sacct_columns, sacct_delimiter, trust_free_text)
    if show_command:
        click.echo(source.show_command(window, flt, dump, by, price, rcfg))
        return 0
    out = source.usage_report(
        win=window,
        now=now,
        flt=flt,
        by=by,
        dump=dump,
        archive=archive,
        engine=engine,
        price=price,
        health_log=health_log,
        no_health_log=no_health_log,
        lost_window_hours=lost_window_hours,
        rcfg=rcfg,
        log_dir=paths["log_dir"],
        quiet=quiet,
    )
    _warn(out.warnings)
    report, fmt = out.report, "json" if as_json else fmt
    if not report.totals["attempts"]:
        message(f"slurmkit: no jobs in window ({window.label})")
    if report.totals["attempts"] or fmt in ("json", "csv"):
        render(report, fmt, view or default_view, sys.stdout)
    if plot_path:
        from slurmkit.report.plot import write_plot

        write_plot(report, plot_path, rcfg["plot_top"])
        if not quiet:
            message(f"slurmkit: wrote {plot_path}")
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
    from slurmkit.report import source

    setup_logging(verbose, quiet)
    cfg, rcfg, _ = _load(config_path)
    window = None if sacct_file else source.window(since, until, month, last, None, now_opt)[0]
    done = source.ingest(
        archive,
        dump=_dump(sacct_file, sacct_columns, sacct_delimiter, trust_free_text),
        win=window,
        rcfg=rcfg,
        quiet=quiet,
    )
    if done.counts is None:
        message(f"slurmkit: {sacct_file}: no rows")
        return
    _warn(done.warnings)
    out = done.counts
    if not quiet:
        months = ", ".join(f"{m}: {n}" for m, n in out["months"].items()) or "none"
        message(
            f"slurmkit: ingested {out['rows']} attempt(s) into {archive} ({out['not_started']} not started, "
            f"{out['malformed']} malformed or impossible: skipped); rows per month now: {months}"
        )


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
    from slurmkit.report import source
    from slurmkit.report.table import write_rows

    setup_logging(verbose, quiet)
    names, rows = source.sql(archive, query)
    fmt = "json" if as_json else fmt
    if fmt == "json":
        print_json([dict(zip(names, r)) for r in rows])
    else:
        write_rows(sys.stdout, fmt, names, rows)


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
    from slurmkit.report import source
    from slurmkit.report.capacity import render_capacity

    setup_logging(verbose, quiet)
    cfg, rcfg, _ = _load(config_path)
    window, now = source.window(since, until, month, last, sacct_file, now_opt)
    data, warnings = source.capacity_report(
        win=window,
        now=now,
        by=by,
        partitions=_csv_list(partitions),
        gpus_override=gpus_override,
        dump=_dump(sacct_file, sacct_columns, sacct_delimiter, trust_free_text),
        archive=archive,
        engine=engine,
        rcfg=rcfg,
        quiet=quiet,
    )
    _warn(warnings)
    if as_json or fmt == "json":
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
    from slurmkit.core.yamlload import load_yaml_file
    from slurmkit.report.capacity import render_build_vs_rent
    from slurmkit.report.cost import build_vs_rent_from_mapping
    from slurmkit.values import LineDict

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
    from slurmkit.report import source
    from slurmkit.report.efficiency import render, write_chart

    setup_logging(verbose, quiet)
    rcfg = load_config(config_path).section("report")
    window, _ = source.window(since, until, month, last, sacct_file, now_opt)
    out = source.efficiency_report(
        win=window,
        by=by,
        users=_csv_list(users),
        accounts=_csv_list(accounts),
        partitions=_csv_list(partitions),
        job_ids=_csv_list(job_ids),
        idle_below=idle_below,
        top=top,
        dump=_dump(sacct_file, sacct_columns, sacct_delimiter, trust_free_text),
        rcfg=rcfg,
        quiet=quiet,
    )
    _warn(out.warnings)
    if not out.jobs:
        message(f"slurmkit: no ended GPU jobs in window ({window.label})")
    fmt = "json" if as_json else fmt
    if out.jobs or fmt in ("json", "csv"):
        buf = io.StringIO()
        render(out.rows, by, fmt, out.meta, buf)
        sys.stdout.write(buf.getvalue())
    if plot_path:
        write_chart(out.rows, by, plot_path)
        if not quiet:
            message(f"slurmkit: wrote {plot_path}")
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
