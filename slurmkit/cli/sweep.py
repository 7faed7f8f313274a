"""``slurmkit sweep``: plan and submit preemptible deep checks on idle nodes.

Exit codes: 0 ok (including "nothing to do"); 2 usage or config error; 3 a Slurm
command failed (sinfo, squeue, or every sbatch of the run). ``sweep run-node`` uses
Nagios codes for its pass: 0 ok, 1 warn, 2 fail, 3 unknown.
"""

from __future__ import annotations

import time
from typing import Any, Dict

import click

from slurmkit.cli.common import (
    common_options,
    dry_run_option,
    format_options,
    load_config,
    message,
    print_json,
    print_table,
    resolve_format,
    setup_logging,
)
from slurmkit.errors import UsageError
from slurmkit.slurm.jobenv import this_node


@click.group("sweep", invoke_without_command=True)
@common_options
@dry_run_option
@click.option(
    "--max-nodes", type=int, default=None, help="Nodes to check this run (default: sweep.max_nodes)."
)
@format_options(("table", "json"))
@click.pass_context
def sweep(ctx, config_path, verbose, quiet, dry_run, max_nodes, fmt, as_json) -> None:
    """Plan and submit preemptible deep checks on idle nodes (run it from cron).

    Picks up to K idle nodes, never-checked and oldest pass first, within the
    concurrency cap, and submits one exclusive, preemptible sweep job per node.
    Subcommands: status, invalidate; run-node and run-pair run inside sweep jobs.
    """
    if ctx.invoked_subcommand is not None:
        ctx.obj = {"config_path": config_path, "verbose": verbose, "quiet": quiet}
        return
    from slurmkit.sweep import cron  # here, not at the top: `sweep --help` never loads jinja2 and the store

    setup_logging(verbose, quiet)
    site_cfg = load_config(config_path)
    report = cron.plan_and_submit(site_cfg, config_path=config_path, dry_run=dry_run, max_nodes=max_nodes)
    if resolve_format(fmt, as_json) == "json":
        print_json(report)
        return
    p = report["plan"]
    if not quiet:
        verb = "would submit" if dry_run else "submitted"
        n_jobs = len(report["jobs"]) + len(report["pair_jobs"])
        message(
            f"sweep {report['run_id']}: {p['idle_nodes']} idle of {p['total_nodes']} nodes; "
            f"{p['running']} sweep job(s) already queued/running; {verb} {n_jobs} (slots {p['slots']}); "
            f"{len(p['overdue'])} overdue; K needed for the period: {p['required_per_run']}"
        )

    def job_cell(j: Dict[str, Any]) -> str:
        return j.get("job_id") or ("(dry run)" if dry_run else "ERROR: " + j.get("error", ""))

    rows = [
        {
            "node": j["node"],
            "last_pass": cron.iso_time(j["last_pass"]),
            "why": "revalidate" if j.get("revalidate") else ("overdue" if j["overdue"] else "rotation"),
            "job": job_cell(j),
            "gpu_model": j.get("gpu_model") or "",
        }
        for j in report["jobs"]
    ]
    rows += [
        {
            "node": "+".join(j["nodes"]),
            "last_pass": "",
            "why": "pair all_reduce",
            "job": job_cell(j),
            "gpu_model": j.get("gpu_model") or "",
        }
        for j in report["pair_jobs"]
    ]
    if rows:
        print_table(rows, ["node", "gpu_model", "last_pass", "why", "job"])
        if dry_run and verbose:
            for j in report["jobs"] + report["pair_jobs"]:
                click.echo(f"\n# sbatch {' '.join(j['sbatch'])}\n{j['script']}", nl=False)
    elif not quiet:
        message(f"nothing to {'plan' if dry_run else 'submit'}")


def _ctx_opts(ctx, config_path, verbose, quiet):
    parent = ctx.obj or {}
    return (
        config_path or parent.get("config_path"),
        max(verbose, parent.get("verbose") or 0),
        quiet or bool(parent.get("quiet")),
    )


@sweep.command("status")
@common_options
@format_options(("table", "json"))
@click.option("--node", "nodes", multiple=True, help="Only these nodes (repeatable).")
@click.option("--no-slurm", is_flag=True, help="Do not ask sinfo for node states (store only).")
@click.pass_context
def status_cmd(ctx, config_path, verbose, quiet, fmt, as_json, nodes, no_slurm) -> None:
    """Per node: last complete pass, its verdict, valid-until, and what failed."""
    from slurmkit.sweep import cron

    config_path, verbose, quiet = _ctx_opts(ctx, config_path, verbose, quiet)
    setup_logging(verbose, quiet)
    rows = cron.fleet_status(load_config(config_path), time.time(), ask_slurm=not no_slurm)
    if nodes:
        rows = [r for r in rows if r["node"] in set(nodes)]
    if resolve_format(fmt, as_json) == "json":
        print_json(rows)
        return
    table = [
        {
            "node": r["node"],
            "state": r["state"],
            "gpu": r["gpu_model"] or "",
            "last_pass": r["last_pass_iso"],
            "age": r["age"],
            "verdict": r["verdict"],
            "valid_until": r["valid_until_iso"],
            "overdue": "yes" if r["overdue"] else "",
            "problems": ",".join(r["problems"]),
        }
        for r in rows
    ]
    if table:
        print_table(table)
    elif not quiet:
        message("no nodes in the verdict store yet")


@sweep.command("run-node")
@common_options
@format_options(("table", "json"))
@click.option(
    "--node", default=None, help="This node's name (default: $SLURMD_NODENAME, then the host name)."
)
@click.option("--run-id", default=None, help="The sweep run that submitted this job.")
@click.option(
    "--gpu-model", default=None, help="GPU model from the node's gres (e.g. h100), for peer grouping."
)
@click.option(
    "--exit-zero",
    is_flag=True,
    help="Exit 0 once the pass is recorded, whatever its verdict "
    "(sweep jobs: the verdict lives in the store, and sacct FAILED then means a crash).",
)
@click.pass_context
def run_node_cmd(ctx, config_path, verbose, quiet, fmt, as_json, node, run_id, gpu_model, exit_zero) -> None:
    """Run one node's pass (inside a sweep job): heavy tier + storage probe,
    outliers, store, drain/resume, notify, metrics. Exit: 0 ok, 1 warn, 2 fail, 3 unknown
    (with --exit-zero: 0 whenever the pass was recorded; 3 when it could not be)."""
    from slurmkit.sweep import cron
    from slurmkit.sweep.runnode import run_node

    config_path, verbose, quiet = _ctx_opts(ctx, config_path, verbose, quiet)
    setup_logging(verbose, quiet)
    site_cfg = load_config(config_path)
    node = node or this_node()
    run_id = run_id or cron.new_run_id(time.time())
    result = run_node(site_cfg, node, run_id, gpu_model)
    if resolve_format(fmt, as_json) == "json":
        print_json(result.to_dict())
    else:
        print_table(
            [
                {
                    "check": r.check,
                    "status": r.status.value,
                    "code": r.code,
                    "value": "" if r.value is None else f"{r.value:g} {r.unit}".strip(),
                    "reason": r.reason,
                }
                for r in result.results
            ]
        )
        if not quiet:
            extra = f"; drained: {result.drained}" if result.drained else ""
            if result.resumed is not None:
                extra += f"; resume: {'yes' if result.resumed else 'no'} {result.resume_message}"
            message(f"{node}: {result.status.value} in {result.seconds:.1f}s{extra}")
    if result.record_error:  # the verdict stands (and drained); say the pass is not in the store
        message(f"slurmkit: {node}: pass not recorded: {result.record_error}")
        ctx.exit(3 if exit_zero else result.status.exit_code)
    ctx.exit(0 if exit_zero else result.status.exit_code)


@sweep.command("run-pair", hidden=False)
@common_options
@click.option("--nodes", required=True, help="The two nodes, a,b (rank 0 runs on a).")
@click.option("--run-id", default=None)
@click.pass_context
def run_pair_cmd(ctx, config_path, verbose, quiet, nodes, run_id) -> None:
    """One rank of a pairwise 2-node all_reduce job (started by srun inside it)."""
    from slurmkit.sweep import cron
    from slurmkit.sweep.pairs import run_pair
    from slurmkit.verdict.store import check_node_name

    config_path, verbose, quiet = _ctx_opts(ctx, config_path, verbose, quiet)
    setup_logging(verbose, quiet)
    site_cfg = load_config(config_path)
    pair = [check_node_name(n.strip()) for n in nodes.split(",")]
    if len(pair) != 2:
        raise UsageError(f"--nodes needs two nodes, got {nodes!r}")
    result = run_pair(site_cfg, pair, run_id or cron.new_run_id(time.time()))
    if result is not None:
        click.echo(f"{result.check}: {result.status.value} {result.code} {result.reason}")
        ctx.exit(0)


@sweep.command("invalidate")
@common_options
@dry_run_option
@click.argument("nodes", nargs=-1, required=True)
@click.option("--check", "checks", multiple=True, help="Only this check (repeatable); default: all.")
@click.pass_context
def invalidate_cmd(ctx, config_path, verbose, quiet, dry_run, nodes, checks) -> None:
    """End the validity of NODES' sweep verdicts now (after a repair), so the prolog stops
    reporting them; the next sweep re-validates a node whose last pass failed first."""
    from slurmkit.sweep import cron

    config_path, verbose, quiet = _ctx_opts(ctx, config_path, verbose, quiet)
    setup_logging(verbose, quiet)
    ended = cron.invalidate(load_config(config_path), list(nodes), list(checks), dry_run)
    for node, valid in ended.items():
        if not quiet:
            verb = "would end" if dry_run else "ended"
            listed = ": " + ", ".join(sorted(valid)) if valid else ""
            click.echo(f"{node}: {verb} {len(valid)} valid verdict(s){listed}")
