"""``ssubmit``: one YAML job spec in, a correct multi-node torchrun job on Slurm out.

Usage::

    ssubmit SPEC [--dry-run] [--parsable] [--json] [--set KEY=VALUE ...] [--sweep NAME=VALUES ...] [--wait]
    ssubmit status JOBID | cancel JOBID | logs JOBID   (status of a job array: one row per task)
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
from typing import Any, Dict, List, Optional

import click

from slurmkit.chars import shown
from slurmkit.cli.common import (
    common_options,
    load_config,
    message,
    message_lines,
    print_json,
    print_line,
    run_main,
    setup_logging,
)
from slurmkit.errors import UsageError


class SsubmitGroup(click.Group):
    """A group where a first argument that is not a subcommand is a spec to submit."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help", "--version"):
            args = ["submit", *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx, formatter):
        formatter.write(
            "Usage: ssubmit SPEC [--dry-run] [--parsable] [--json] [--set K=V ...] [--sweep N=V ...] [--wait]\n"
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
#
# Everything below is a front end over slurmkit.api (the Python API): loading, validation,
# rendering, submission, job records and job state are the API's, imported inside the
# commands so `ssubmit --help` loads none of it.


def _tail(path: Optional[str], lines: int) -> List[str]:
    if not path:
        return []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().splitlines()[-lines:]
    except OSError:
        return []


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


def task_table_lines(tasks) -> List[str]:
    """``--dry-run``'s task table: index, run name, parameters (one line each, JSON-quoted
    where a value needs it, so no value can break the table)."""
    from slurmkit.submit.hparams import describe, quoted

    return [f"{t.index:>5}  {quoted(t.run_name)}  {describe(t.params)}" for t in tasks]


def wait_for_job(job_id: str, *, poll: float, timeout: float, quiet: bool) -> Dict[str, str]:
    """``--wait``: follow the job to its end (:func:`slurmkit.submit.follow.wait_for_job`), printing
    each new state on stderr unless ``quiet``."""
    from slurmkit.submit import follow

    def show(state: Dict[str, str]) -> None:
        message(follow.describe(job_id, state))

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
    "--sweep",
    "sweeps",
    multiple=True,
    metavar="NAME=VALUES",
    help="Add or replace a sweep axis: lr=1e-4,3e-4 (values as written), seed=0..2 (inclusive "
    "integer range, optional :STEP), or a list [a, 'b,c']. Repeatable.",
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
    sweeps,
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
    from slurmkit import api

    spec = api.Spec.load(spec_path, config=config_path, sets=sets, sweep=sweeps)
    rendered = spec.render()
    for note in spec.check_cluster():
        if not quiet:
            message(f"ssubmit: warning: {note}")
    tasks = spec.tasks
    if dry_run:
        if as_json:
            print_json(
                {
                    "script": rendered.script,
                    "sbatch_args": rendered.sbatch_args,
                    "settings": rendered.settings,
                    "tasks": [
                        {"index": t.index, "run_name": t.run_name, "params": t.params, "args": t.args}
                        for t in tasks
                    ],
                }
            )
        else:
            import yaml

            click.echo(rendered.script, nl=False)
            if not quiet:
                message("# ---- resolved settings (ssubmit --dry-run; nothing was submitted)")
                message_lines(yaml.safe_dump(rendered.settings, sort_keys=True, allow_unicode=True))
                if rendered.sbatch_args:
                    import shlex

                    message("# sbatch " + shlex.join(rendered.sbatch_args))
                if tasks:
                    message(f"# ---- sweep: {len(tasks)} tasks, one job array --array={spec.data['array']}")
                    message("# TASK  RUN NAME  PARAMETERS")
                    for line in task_table_lines(tasks):
                        message(f"# {line}")
        return 0
    if test_only:
        answer = api.test_submit(spec)
        if as_json:
            print_json({"test_only": answer})
        else:
            print_line(answer)
        return 0
    job = api.submit(spec, check_cluster=False)
    job_id = job.job_id
    log = job.record["log"] if job.record else ""
    if parsable:
        click.echo(job_id)
    elif as_json:
        if not wait:  # with --wait the one JSON object comes at the end
            print_json({"job_id": job_id, "log": log, "name": spec.name, "tasks": len(tasks)})
    elif not quiet:
        what = (
            f"job array {job_id} ({spec.name}, {len(tasks)} tasks)"
            if tasks
            else f"job {job_id} ({spec.name})"
        )
        click.echo(f"Submitted {what}; log: {log}")
    if not wait:
        return 0
    if tasks:
        return _wait_array(job, wait_timeout, quiet or parsable, as_json)
    site = spec.site
    state = wait_for_job(
        job_id, poll=site["wait_poll_seconds"], timeout=wait_timeout, quiet=quiet or parsable
    )
    from slurmkit.submit import follow

    code = follow.exit_code_from(state)
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
            message(f"---- last {len(tail)} lines of {log}")
            for line in tail:
                message(line)
        message(f"ssubmit: job {job_id} ended {state['state']} (exit code {state.get('exit_code') or '?'})")
        if eff is not None:
            from slurmkit.report.efficiency import one_line

            message(f"ssubmit: job {job_id} {one_line(eff)}")
    if code:
        sys.exit(code)
    return 0


def _wait_array(job, timeout: float, quiet: bool, as_json: bool) -> int:
    """``--wait`` for a sweep: follow the array, then print its task table; exit 0 when every
    task completed with 0, else the first failed task's code (1 when it has none)."""

    def show(state: str) -> None:
        message(f"ssubmit: job array {job.job_id}: {state}")

    final = job.wait(timeout=timeout, on_change=None if quiet else show)
    rows = job.status()
    bad = [r for r in rows if r.state != "COMPLETED" or r.exit_code]
    code = (bad[0].exit_code or 1) if bad else 0
    if as_json:
        print_json({"job_id": job.job_id, "state": final, "exit": code, "tasks": [r.to_dict() for r in rows]})
    elif not quiet:
        _print_task_table(rows, err=True)
        message(f"ssubmit: job array {job.job_id} ended {final}")
    if code:
        sys.exit(code)
    return 0


# --------------------------------------------------------------------------- status / cancel / logs


def _print_task_table(rows, err: bool = False) -> None:
    from slurmkit.api import efficiency_text
    from slurmkit.submit.hparams import describe

    cells = [
        [
            str(r.index if r.index is not None else "-"),
            r.state,
            "-" if r.exit_code is None else f"{r.exit_code}:{r.signal or 0}",
            str(r.restarts),
            efficiency_text(r.efficiency),
            describe(r.params) if r.params else "-",
        ]
        for r in rows
    ]
    cells = [[shown(v) for v in row] for row in cells]  # (a parameter value is the user's text)
    head = ["TASK", "STATE", "EXIT", "RESTARTS", "EFFICIENCY", "PARAMETERS"]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(head)]
    for line in [head, *cells]:
        text = "  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip()
        (message if err else print_line)(text)


@cli.command("status")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@common_options
def status_cmd(job_id, as_json, config_path, verbose, quiet) -> None:
    """State, nodes, restarts, excludes and log of JOBID; one row per task for a job array."""
    setup_logging(verbose, quiet)
    from slurmkit import api
    from slurmkit.slurm import client

    job = api.Job(job_id, config=config_path)
    if job.is_array:
        rows = job.status()
        if not rows:
            raise UsageError(f"job {job_id}: Slurm knows no such job")
        if as_json:
            print_json({"job_id": job.job_id, "state": job.state(), "tasks": [r.to_dict() for r in rows]})
        else:
            _print_task_table(rows)
        return
    site = job.site
    state = _job_state(job.job_id)
    info: Dict[str, Any] = {"job_id": job.job_id, **state}
    show = client.show_job(job.job_id)
    if show:
        info.update(
            {
                "restarts": show.get("Restarts", ""),
                "exclude": show.get("ExcNodeList", ""),
                "time_limit": show.get("TimeLimit", ""),
                "name": show.get("JobName", ""),
            }
        )
    info["log"] = job.log_path()
    record = api.read_record(job.array_id, site)
    if record and record.get("settings", {}).get("checkpoint_dir"):
        if "_" in job.job_id:  # an array task: its directory needs its own job id (sacct)
            rows = job.status(efficiency=False)
            ckpt = rows[0].checkpoint_dir if rows else None
        else:
            ckpt = record["settings"]["checkpoint_dir"].replace("{job_id}", job.job_id)
            ckpt = ckpt.replace("{user}", record.get("user") or getpass.getuser())
        state_file = os.path.join(ckpt or "", ".slurmkit", "requeue-state.json")
        try:
            with open(state_file, encoding="utf-8") as fh:
                counts = json.load(fh)
            info["requeues"] = (
                f"time limit {counts.get('timeout', 0)}, preemption {counts.get('preempt', 0)}, "
                f"node failures {counts.get('node', 0)}"
            )
        except (OSError, ValueError, TypeError):
            pass
        if job.params:
            from slurmkit.submit.hparams import describe

            info["params"] = describe(job.params)
    if state["source"] == "none" and not show:
        raise UsageError(f"job {job_id}: Slurm knows no such job")
    eff = _efficiency(job.job_id, state)
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
            "params",
            "log",
            "efficiency",
        ):
            if info.get(key) not in (None, "", "None", "(null)"):
                print_line(f"{key:10} {info[key]}")  # (a job name or reason is text users wrote)


def _job_state(job_id: str) -> Dict[str, str]:
    from slurmkit.submit import follow

    return follow.job_state(job_id)


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
        message(f"sent SIG{sig} to job {job_id}'s batch shell" if sig else f"cancelled job {job_id}")


@cli.command("logs")
@click.argument("job_id")
@click.option("-n", "--lines", type=int, default=50, show_default=True, help="Lines from the end.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@common_options
def logs_cmd(job_id, lines, follow, config_path, verbose, quiet) -> None:
    """Print the end of JOBID's log."""
    setup_logging(verbose, quiet)
    from slurmkit import api

    job = api.Job(job_id, config=config_path)
    site = job.site
    path = job.log_path()
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
