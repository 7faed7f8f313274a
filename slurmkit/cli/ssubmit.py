"""``ssubmit``: one YAML job spec in, a correct multi-node torchrun job on Slurm out.

Usage::

    ssubmit SPEC [--dry-run] [--parsable] [--json] [--set KEY=VALUE ...] [--wait]
    ssubmit status JOBID | cancel JOBID | logs JOBID
    ssubmit schema            # the job spec as JSON Schema (docs/job-spec.schema.json)

The first argument is a spec file unless it names a subcommand (a spec file that is
literally called ``status`` can be given as ``./status``).

Exit codes:

====  ===========================================================================
0     success (submitted; with --wait: the job completed with exit code 0)
1     with --wait: the job failed (its own exit code when non-zero, else 1)
2     usage or spec error: nothing was submitted
3     a Slurm command failed (its stderr is shown)
124   --wait gave up after --wait-timeout (the job keeps running)
====  ===========================================================================

torch is never imported here: the CLI starts in well under a second.
"""

from __future__ import annotations

import getpass
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional

import click

from slurmkit.cli.common import common_options, load_config, print_json, run_main, setup_logging
from slurmkit.core.files import write_json_atomic
from slurmkit.errors import ConfigError, SlurmCommandError, UsageError


class SsubmitGroup(click.Group):
    """A group where a first argument that is not a subcommand is a spec to submit."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help", "--version"):
            args = ["submit", *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx, formatter):
        formatter.write(
            "Usage: ssubmit SPEC [--dry-run] [--parsable] [--json] [--set K=V ...] [--wait]\n"
            "       ssubmit status|cancel|logs JOBID\n"
            "       ssubmit schema\n"
        )


@click.group(cls=SsubmitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="slurmkit", prog_name="ssubmit")
def cli() -> None:
    """Submit a multi-node torchrun job described by one YAML spec.

    \b
    ssubmit train.yaml --dry-run     show the sbatch script and resolved settings
    ssubmit train.yaml --wait        submit, follow to the end, show the log tail
    ssubmit status|cancel|logs JOBID

    Exit codes: 0 ok; 1 the job failed (--wait); 2 usage or spec error (nothing
    submitted); 3 a Slurm command failed; 124 --wait timed out. See docs/ssubmit.md.
    """


# --------------------------------------------------------------------------- helpers


def _record_dir(site: Dict[str, Any]) -> str:
    if site.get("record_dir"):
        return site["record_dir"]
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "slurmkit", "ssubmit")


def expand_output(pattern: str, job_id: str, name: str, workdir: str) -> str:
    """The log path Slurm will write: %j, %x, %u, %% expanded, relative to workdir."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "%" and i + 1 < len(pattern):
            n = pattern[i + 1]
            rep = {"j": job_id, "x": name, "u": getpass.getuser(), "%": "%", "A": job_id}.get(n)
            if rep is not None:
                out.append(rep)
                i += 2
                continue
        out.append(c)
        i += 1
    path = "".join(out)
    return path if os.path.isabs(path) else os.path.join(workdir, path)


def _load_spec_and_render(spec_path: str, sets, config_path):
    from slurmkit.submit.render import render
    from slurmkit.submit.spec import load_spec

    cfg = load_config(config_path)
    site = cfg.section("submit")
    paths = cfg.section("paths")
    spec = load_spec(spec_path, site_defaults=site["defaults"], sets=sets, site_path=cfg.path)
    rendered = render(spec, site=site, paths=paths, spec_path=spec_path)
    return cfg, site, spec, rendered


def _check_cluster(spec: Dict[str, Any], site: Dict[str, Any]) -> Optional[str]:
    """Refuse impossible GPU/node requests when sinfo can tell; tolerate sinfo failing."""
    if not site["check_partition"]:
        return None
    from slurmkit.errors import ExternalCommandError
    from slurmkit.slurm import client
    from slurmkit.submit.spec import check_against_cluster

    try:
        rows = client.nodes(spec["partition"].split(",")[0] if spec["partition"] else None)
    except ExternalCommandError as exc:
        return f"partition check skipped: {exc}"
    if not spec["partition"]:
        rows = [r for r in rows if r.get("partition", "").endswith("*")] or rows
    problem = check_against_cluster(spec, rows)
    if problem:
        raise ConfigError(f"{problem} (sinfo; set submit.check_partition: false to skip this check)")
    return None


def _log_path(job_id: str, site: Dict[str, Any]) -> Optional[str]:
    from slurmkit.slurm import client

    try:
        job = client.show_job(job_id)
    except SlurmCommandError:
        job = None
    if job and job.get("StdOut"):
        return job["StdOut"]
    record = _read_record(job_id, site)
    if record:
        return record.get("log")
    # Not ours and gone from scontrol: the default log name in the job's working dir.
    try:
        rows = client.sacct(["JobID", "WorkDir"], ["-j", job_id, "-X"])
    except SlurmCommandError:
        rows = []
    for row in rows:
        guess = os.path.join(row.get("WorkDir") or "", f"slurmkit-{job_id}.out")
        if row.get("WorkDir") and os.path.exists(guess):
            return guess
    return None


def _read_record(job_id: str, site: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    try:
        with open(os.path.join(_record_dir(site), f"{job_id}.json"), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _tail(path: Optional[str], lines: int) -> List[str]:
    if not path:
        return []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().splitlines()[-lines:]
    except OSError:
        return []


# The job-state polling lives in slurmkit.submit.follow, imported inside the commands like the
# Slurm client it uses, so `ssubmit --help` loads neither.


def _job_state(job_id: str) -> Dict[str, str]:
    from slurmkit.submit import follow

    return follow.job_state(job_id)


def _exit_from(state: Dict[str, str]) -> int:
    from slurmkit.submit import follow

    return follow.exit_code_from(state)


def _efficiency(job_id: str, state: Dict[str, str]) -> Optional[Any]:
    """The ended job's GPU efficiency from its AdminComment summary (the epilog's), or
    ``None`` while it runs, when it had no GPUs, or when sacct cannot say."""
    from slurmkit.slurm.states import ACTIVE_STATES

    if state.get("source") != "sacct" or state.get("state") in ACTIVE_STATES:
        return None
    from slurmkit.errors import ExternalCommandError
    from slurmkit.report.efficiency import job_efficiency

    try:
        return job_efficiency(job_id, timeout=30)
    except ExternalCommandError:
        return None


def wait_for_job(job_id: str, *, poll: float, timeout: float, quiet: bool) -> Dict[str, str]:
    """``--wait``: follow the job to its end (:func:`slurmkit.submit.follow.wait_for_job`), printing
    each new state on stderr unless ``quiet``."""
    from slurmkit.submit import follow

    def show(state: Dict[str, str]) -> None:
        click.echo(follow.describe(job_id, state), err=True)

    return follow.wait_for_job(job_id, poll=poll, timeout=timeout, on_change=None if quiet else show)


# --------------------------------------------------------------------------- submit


@cli.command("submit", hidden=True)
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True, help="Print the script and resolved settings; submit nothing.")
@click.option("--test-only", is_flag=True, help="Pass the script through sbatch --test-only (no submission).")
@click.option("--parsable", is_flag=True, help="Print only the job id.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a spec key (dotted path; value parsed as YAML). Repeatable.",
)
@click.option(
    "--wait", is_flag=True, help="Follow the job to its end, show the log tail, exit with its code."
)
@click.option(
    "--wait-timeout",
    type=float,
    default=24 * 3600.0,
    show_default=True,
    help="Seconds --wait follows the job before giving up (exit 124).",
)
@click.option("--log-lines", type=int, default=20, show_default=True, help="Log lines shown by --wait.")
@common_options
def submit_cmd(
    spec_path,
    dry_run,
    test_only,
    parsable,
    as_json,
    sets,
    wait,
    wait_timeout,
    log_lines,
    config_path,
    verbose,
    quiet,
) -> int:
    """Submit SPEC (the default command)."""
    setup_logging(verbose, quiet)
    if not os.path.exists(spec_path):
        raise UsageError(f"{spec_path}: no such spec file (subcommands: status, cancel, logs, schema)")
    cfg, site, spec, rendered = _load_spec_and_render(spec_path, sets, config_path)
    note = _check_cluster(spec, site)
    if note and not quiet:
        click.echo(f"ssubmit: warning: {note}", err=True)
    from slurmkit.slurm import client

    if dry_run:
        if as_json:
            print_json(
                {
                    "script": rendered.script,
                    "sbatch_args": rendered.sbatch_args,
                    "settings": rendered.settings,
                }
            )
        else:
            import yaml

            click.echo(rendered.script, nl=False)
            if not quiet:
                click.echo("# ---- resolved settings (ssubmit --dry-run; nothing was submitted)", err=True)
                click.echo(
                    yaml.safe_dump(rendered.settings, sort_keys=True, allow_unicode=True), err=True, nl=False
                )
                if rendered.sbatch_args:
                    import shlex

                    click.echo("# sbatch " + shlex.join(rendered.sbatch_args), err=True)
        return 0
    if test_only:
        message = client.submit(rendered.script, rendered.sbatch_args, test_only=True)
        if as_json:
            print_json({"test_only": message})
        else:
            click.echo(message)
        return 0
    job_id = client.submit(rendered.script, rendered.sbatch_args)
    workdir = spec["workdir"] or os.getcwd()
    log = expand_output(spec["output"], job_id, spec["name"], workdir)
    record = {
        "job_id": job_id,
        "name": spec["name"],
        "spec": os.path.abspath(spec_path),
        "log": log,
        "workdir": workdir,
        "submitted": time.time(),
        "settings": rendered.settings,
    }
    try:
        os.makedirs(_record_dir(site), exist_ok=True)
        # atomic: `ssubmit status` or a second ssubmit never reads half a record
        write_json_atomic(
            os.path.join(_record_dir(site), f"{job_id}.json"),
            json.loads(json.dumps(record, default=str)),
            indent=1,
        )
    except OSError as exc:
        click.echo(f"ssubmit: warning: cannot record job {job_id}: {exc.strerror}", err=True)
    if parsable:
        click.echo(job_id)
    elif as_json:
        if not wait:  # with --wait the one JSON object comes at the end
            print_json({"job_id": job_id, "log": log, "name": spec["name"]})
    elif not quiet:
        click.echo(f"Submitted job {job_id} ({spec['name']}); log: {log}")
    if not wait:
        return 0
    state = wait_for_job(
        job_id, poll=site["wait_poll_seconds"], timeout=wait_timeout, quiet=quiet or parsable
    )
    code = _exit_from(state)
    tail = _tail(log, log_lines)
    eff = _efficiency(job_id, state)
    if as_json:
        print_json(
            {
                "job_id": job_id,
                "log": log,
                "state": state["state"],
                "exit_code": state.get("exit_code"),
                "exit": code,
                "log_tail": tail,
                "efficiency": eff.to_dict() if eff else None,
            }
        )
    elif not quiet:
        if tail:
            click.echo(f"---- last {len(tail)} lines of {log}", err=True)
            for line in tail:
                click.echo(line, err=True)
        click.echo(
            f"ssubmit: job {job_id} ended {state['state']} (exit code {state.get('exit_code') or '?'})",
            err=True,
        )
        if eff is not None:
            from slurmkit.report.efficiency import one_line

            click.echo(f"ssubmit: job {job_id} {one_line(eff)}", err=True)
    if code:
        sys.exit(code)
    return 0


# --------------------------------------------------------------------------- status / cancel / logs


@cli.command("status")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@common_options
def status_cmd(job_id, as_json, config_path, verbose, quiet) -> None:
    """State, nodes, restarts, excludes and log of JOBID."""
    setup_logging(verbose, quiet)
    cfg = load_config(config_path)
    site = cfg.section("submit")
    from slurmkit.slurm import client

    state = _job_state(job_id)
    info: Dict[str, Any] = {"job_id": job_id, **state}
    job = client.show_job(job_id)
    if job:
        info.update(
            {
                "restarts": job.get("Restarts", ""),
                "exclude": job.get("ExcNodeList", ""),
                "time_limit": job.get("TimeLimit", ""),
                "name": job.get("JobName", ""),
            }
        )
    info["log"] = _log_path(job_id, site)
    record = _read_record(job_id, site)
    if record and record.get("settings", {}).get("checkpoint_dir"):
        ckpt = record["settings"]["checkpoint_dir"].replace("{job_id}", job_id)
        ckpt = ckpt.replace("{user}", record.get("user") or getpass.getuser())
        state_file = os.path.join(ckpt, ".slurmkit", "requeue-state.json")
        try:
            with open(state_file, encoding="utf-8") as fh:
                counts = json.load(fh)
            info["requeues"] = (
                f"time limit {counts.get('timeout', 0)}, preemption {counts.get('preempt', 0)}, "
                f"node failures {counts.get('node', 0)}"
            )
        except (OSError, ValueError):
            pass
    if state["source"] == "none" and not job:
        raise UsageError(f"job {job_id}: Slurm knows no such job")
    eff = _efficiency(job_id, state)
    if eff is not None:
        from slurmkit.report.efficiency import one_line

        info["efficiency"] = one_line(eff).split(": ", 1)[1]
    if as_json:
        if eff is not None:
            info["efficiency"] = eff.to_dict()
        print_json(info)
    else:
        for key in (
            "job_id",
            "name",
            "state",
            "reason",
            "nodes",
            "restarts",
            "requeues",
            "exclude",
            "exit_code",
            "log",
            "efficiency",
        ):
            if info.get(key) not in (None, "", "None", "(null)"):
                click.echo(f"{key:10} {info[key]}")


@cli.command("cancel")
@click.argument("job_id")
@click.option(
    "--signal",
    "sig",
    default=None,
    metavar="SIG",
    help="Send SIG to the batch shell instead of cancelling (e.g. USR2: checkpoint and requeue).",
)
@common_options
def cancel_cmd(job_id, sig, config_path, verbose, quiet) -> None:
    """Cancel JOBID (or signal its batch shell with --signal)."""
    setup_logging(verbose, quiet)
    load_config(config_path)
    from slurmkit.slurm import client

    client.cancel(job_id, signal=sig, batch_only=bool(sig))
    if not quiet:
        click.echo(
            f"sent SIG{sig} to job {job_id}'s batch shell" if sig else f"cancelled job {job_id}", err=True
        )


@cli.command("logs")
@click.argument("job_id")
@click.option("-n", "--lines", type=int, default=50, show_default=True, help="Lines from the end.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@common_options
def logs_cmd(job_id, lines, follow, config_path, verbose, quiet) -> None:
    """Print the end of JOBID's log."""
    setup_logging(verbose, quiet)
    cfg = load_config(config_path)
    site = cfg.section("submit")
    path = _log_path(job_id, site)
    if not path:
        raise UsageError(f"job {job_id}: no log path known (not in Slurm and not submitted by ssubmit here)")
    if not os.path.exists(path):
        raise UsageError(f"job {job_id}: log {path} does not exist (yet)")
    for line in _tail(path, lines):
        click.echo(line)
    if follow:
        from slurmkit.submit.follow import follow_log

        for chunk in follow_log(path, job_id, poll=site["wait_poll_seconds"]):
            click.echo(chunk, nl=False)


@cli.command("schema")
def schema_cmd() -> None:
    """Print the job spec as JSON Schema (docs/job-spec.schema.json)."""
    from slurmkit.submit.spec import spec_json_schema

    click.echo(json.dumps(spec_json_schema(), indent=2, sort_keys=True))


def main() -> None:
    run_main(cli, "ssubmit")


if __name__ == "__main__":
    main()
