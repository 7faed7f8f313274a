"""What every slurmkit command shares: flags, output, errors and exit codes.

* ``--format`` (with ``--json`` as a shortcut for ``--format json``), ``-v/--verbose``,
  ``-q/--quiet``, ``--config``; commands with side effects also take ``--dry-run``.
* Data goes to stdout, messages to stderr.
* A :class:`~slurmkit.errors.SlurmkitError` becomes ``slurmkit: <message>`` on one line
  and its exit code; a bug becomes a short message plus the traceback with ``-v``.
* Every message and table cell is written through :func:`slurmkit.chars.shown`: a file name,
  job name or log line holding a newline or a terminal escape stays data, on one line.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import click

from slurmkit.chars import shown
from slurmkit.errors import SlurmkitError

log = logging.getLogger("slurmkit")

INTERNAL_ERROR_EXIT = 70  # EX_SOFTWARE: a slurmkit bug, not the user's fault
INTERRUPTED_EXIT = 130  # Ctrl-C: 128 + SIGINT, as a shell reports a command it interrupted


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use.

    ``lazy`` maps a command name to ``"module:attribute"``.
    """

    def __init__(self, *args, lazy: Optional[Dict[str, str]] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx, name):
        if name in self.lazy:
            module, _, attr = self.lazy[name].partition(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)

    def format_commands(self, ctx, formatter):
        # Short help without importing every subcommand module.
        rows = []
        for name in self.list_commands(ctx):
            if name in self.lazy:
                rows.append((name, LAZY_HELP.get(name, "")))
            else:
                cmd = super().get_command(ctx, name)
                if cmd is not None and not cmd.hidden:
                    rows.append((name, cmd.get_short_help_str(60)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


#: one-line help of lazily imported commands, shown by ``--help`` without importing them
LAZY_HELP: Dict[str, str] = {
    "devcluster": "A real local Slurm cluster (munge, slurmctld, slurmd, slurmdbd) in one command.",
    "health": "Run and list node health checks.",
    "node": "Node status and guarded resume of slurmkit-drained nodes.",
    "kill-leaks": "Kill processes that hold GPU or host memory but belong to no job.",
    "sweep": "Plan and submit preemptible deep checks on idle nodes (cron).",
    "report": "GPU-hours, cost and lost hours from sacct.",
    "config": "Show or validate the site configuration.",
}


def setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING
    if quiet:
        level = logging.ERROR
    elif verbose >= 2:
        level = logging.DEBUG
    elif verbose == 1:
        level = logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_ShownFormatter("slurmkit: %(levelname)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    log.setLevel(level)


class _ShownFormatter(logging.Formatter):
    """A log line with its control characters shown (a traceback, added after it, keeps its lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return shown(super().formatMessage(record))


def message(text: str) -> None:
    """One message line on stderr, its control characters shown (:func:`slurmkit.chars.shown`)."""
    click.echo(shown(text), err=True)


def print_line(text: str) -> None:
    """One line of readable output on stdout (a status line), its control characters shown."""
    click.echo(shown(text))


def message_lines(text: str) -> None:
    """A block of lines on stderr (a YAML dump, a table), each line's control characters shown.
    Only ``\n`` ends a line (``str.splitlines`` would also break at ``\x85`` or ``\x1c``)."""
    for line in text[:-1].split("\n") if text.endswith("\n") else text.split("\n"):
        message(line)


def common_options(f: Callable) -> Callable:
    """``-v``, ``-q`` and ``--config`` for any command."""
    f = click.option("-q", "--quiet", is_flag=True, help="Only print errors.")(f)
    f = click.option("-v", "--verbose", count=True, help="More detail on stderr (repeat for debug).")(f)
    f = click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        default=None,
        help="Site config (default: $SLURMKIT_CONFIG, then /etc/slurmkit/slurmkit.yaml).",
    )(f)
    return f


def format_options(choices: Sequence[str] = ("table", "json"), default: str = "table") -> Callable:
    """``--format CHOICE`` plus ``--json`` as its shortcut."""

    def deco(f: Callable) -> Callable:
        f = click.option("--json", "as_json", is_flag=True, help="Same as --format json.")(f)
        f = click.option(
            "--format",
            "fmt",
            type=click.Choice(list(choices)),
            default=default,
            show_default=True,
            help="Output format.",
        )(f)
        return f

    return deco


def dry_run_option(f: Callable) -> Callable:
    return click.option("--dry-run", is_flag=True, help="Show what would be done; change nothing.")(f)


def resolve_format(fmt: str, as_json: bool) -> str:
    return "json" if as_json else fmt


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def print_table(rows: List[Dict[str, Any]], columns: Optional[Sequence[str]] = None) -> None:
    """A plain aligned text table (no colour when stdout is not a terminal)."""
    if not rows:
        return
    cols = list(columns or rows[0].keys())
    cells = [[("" if r.get(c) is None else shown(str(r.get(c)))) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    click.echo("  ".join(c.upper().ljust(w) for c, w in zip(cols, widths)).rstrip())
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def load_config(config_path: Optional[str]):
    """Load the site config and point the Slurm layer at its settings."""
    from slurmkit.config import load_site_config
    from slurmkit.slurm import client

    cfg = load_site_config(config_path)
    s = cfg.section("slurm")
    client.configure(s["bin_dir"], s["timeout"])
    return cfg


def run_main(cli: click.Command, prog: str, args: Optional[Iterable[str]] = None) -> None:
    """Run a click command in standalone mode with slurmkit's error mapping.

    click's own usage errors already exit 2. Our errors raised inside commands exit
    with their code; an unexpected exception is a bug: a one-line message, the
    traceback only with ``SLURMKIT_DEBUG=1`` or ``-vv``.
    """
    try:
        rv = cli.main(args=list(args) if args is not None else None, prog_name=prog, standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.message = shown(exc.message)
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # (click turns Ctrl-C into an Abort)
            message(f"{prog}: interrupted")
            sys.exit(INTERRUPTED_EXIT)
        message(f"{prog}: aborted")
        sys.exit(1)
    except SlurmkitError as exc:
        message(f"{prog}: error: {exc}")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        message(f"{prog}: interrupted")
        sys.exit(INTERRUPTED_EXIT)
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        sys.exit(0)
    except Exception as exc:  # a bug in slurmkit
        if os.environ.get("SLURMKIT_DEBUG") or sum(a in ("-vv", "-vvv") for a in (args or sys.argv)):
            raise
        message(
            f"{prog}: internal error: {type(exc).__name__}: {exc} "
            f"(set SLURMKIT_DEBUG=1 for a traceback; please report it)"
        )
        sys.exit(INTERNAL_ERROR_EXIT)
    sys.exit(rv if isinstance(rv, int) else 0)
