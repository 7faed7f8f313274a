"""``slurmkit``: the admins' command."""

from __future__ import annotations

import click

from slurmkit import __version__
from slurmkit.cli.common import (
    LazyGroup,
    common_options,
    format_options,
    load_config,
    message,
    print_json,
    resolve_format,
    run_main,
)

LAZY = {
    "devcluster": "slurmkit.cli.devcluster:devcluster",
    "health": "slurmkit.cli.health:health",
    "node": "slurmkit.cli.health:node",
    "kill-leaks": "slurmkit.cli.health:kill_leaks",
    "sweep": "slurmkit.cli.sweep:sweep",
    "report": "slurmkit.cli.report:report",
}


@click.group(cls=LazyGroup, lazy=LAZY, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurmkit")
def cli() -> None:
    """slurmkit: the operations layer between Slurm and PyTorch on GPU clusters.

    Exit codes: 0 ok; 1 failed; 2 usage or config error; 3 a Slurm (or other
    external) command failed; 4 devcluster failure. Health commands use Nagios
    codes: 0 ok, 1 warn, 2 fail, 3 unknown.
    """


@cli.group("config")
def config_group() -> None:
    """Show or validate the site configuration."""


@config_group.command("validate")
@common_options
def config_validate(config_path, verbose, quiet) -> None:
    """Validate every section of the site config, and open every file it names; exit 2
    naming file:line:key on error."""
    from slurmkit.config import load_site_config, named_file_problems
    from slurmkit.errors import ConfigError

    cfg = load_site_config(config_path, full=True)
    if not quiet:
        from slurmkit.slurm import client
        from slurmkit.slurm.settings import warn_lines

        client.configure(cfg.section("slurm")["bin_dir"], cfg.section("slurm")["timeout"])
        for line in warn_lines() or []:
            message(f"slurmkit: {line}")
    problems = named_file_problems(cfg)
    table = cfg.section("health")["checks"]["xid"]["table"]
    if table and not problems:
        from slurmkit.health.checks.xid import load_table

        try:
            load_table(table)
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        for first in problems[:-1]:
            message(f"slurmkit: error: {first}")
        raise ConfigError(problems[-1])
    if not quiet:
        click.echo(f"{cfg.path or '(built-in defaults)'}: ok")


@config_group.command("show")
@common_options
@format_options(("yaml", "json"), default="yaml")
def config_show(config_path, verbose, quiet, fmt, as_json) -> None:
    """Print the effective config, defaults filled in."""
    from slurmkit.config import VALID_SECTIONS

    cfg = load_config(config_path)
    data = {name: cfg.section(name) for name in VALID_SECTIONS}
    if resolve_format(fmt, as_json) == "json":
        print_json(data)
    else:
        import yaml

        click.echo(yaml.safe_dump(data, sort_keys=True), nl=False)


def main() -> None:
    run_main(cli, "slurmkit")


if __name__ == "__main__":
    main()
