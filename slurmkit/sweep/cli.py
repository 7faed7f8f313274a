"""``slurmkit sweep``: plan and submit preemptible deep checks on idle nodes.

Exit codes: 0 ok (including "nothing to do"); 2 usage or config error; 3 a Slurm
command failed (sinfo, squeue, or every sbatch of the run). ``sweep run-node`` uses
Nagios codes for its pass: 0 ok, 1 warn, 2 fail, 3 unknown.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import time
from typing import Any, Dict, List, Optional

import click

from slurmkit.cli.common import (
    common_options,
    dry_run_option,
    format_options,
    load_config,
    print_json,
    print_table,
    resolve_format,
    setup_logging,
)
from slurmkit.errors import SlurmCommandError, UsageError
from slurmkit.slurm.node import this_node
from slurmkit.slurm.parse import gpus_from_gres

log = logging.getLogger("slurmkit.sweep")


def _iso(ts: Optional[float]) -> str:
    if not isinstance(ts, (int, float)):
        return "never"
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _submit_or_show(entry: Dict[str, Any], script: str, args: List[str], dry_run: bool,
                    errors: List[str], label: str) -> None:
    """Submit one sweep job and note its id in ``entry``; with ``dry_run`` note the
    script instead. A failed sbatch is recorded (entry and ``errors``), not raised, so
    one bad node does not stop the rest of the run."""
    from slurmkit.slurm import client

    if dry_run:
        entry["script"] = script
        return
    try:
        entry["job_id"] = client.submit(script, args)
    except SlurmCommandError as exc:
        entry["error"] = str(exc)
        errors.append(f"{label}: {exc}")
        log.error("sbatch for %s failed: %s", label, exc)


def _age(seconds: Optional[float]) -> str:
    if seconds is None:
        return "never"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def new_run_id(now: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)) + f"-{os.getpid()}"


def _sweep_cfg(site_cfg, max_nodes: Optional[int]) -> Dict[str, Any]:
    cfg = dict(site_cfg.section("sweep"))
    if max_nodes is not None:
        if max_nodes < 0:
            raise UsageError(f"--max-nodes must be >= 0, got {max_nodes}")
        cfg["max_nodes"] = max_nodes
    return cfg


def plan_and_submit(
    site_cfg,
    *,
    config_path: Optional[str],
    dry_run: bool,
    max_nodes: Optional[int],
    now: Optional[float] = None,
) -> Dict[str, Any]:
    """One cron run: read Slurm and the store, plan, submit. Returns the report."""
    from slurmkit.slurm import client
    from slurmkit.sweep import jobscript, planner
    from slurmkit.sweep.runnode import open_store
    from slurmkit.sweep.store import check_node_name

    cfg = _sweep_cfg(site_cfg, max_nodes)
    paths = site_cfg.section("paths")
    now = time.time() if now is None else now
    run_id = new_run_id(now)
    store = open_store(site_cfg)

    rows = client.nodes(partition=cfg.get("partition"))
    if not rows:
        from slurmkit.errors import ConfigError

        where = f"partition {cfg.get('partition')!r} has" if cfg.get("partition") else "the cluster has"
        raise ConfigError(
            f"{where} no nodes (sinfo returned none); check the partition name",
            path=site_cfg.path,
            key="sweep.partition",
        )
    bad = [r["name"] for r in rows if not _valid_name(r["name"])]
    rows = [r for r in rows if _valid_name(r["name"])]
    for name in bad:
        log.warning("skipping node with an unusable name %r", name)
    sweep_jobs = planner.sweep_job_nodes(client.jobs(), cfg["job_name"])
    summary = store.summary()  # one file, not one per node: planning stays fast at 10,000 nodes
    last = {
        n: (e.get("last_pass") if isinstance(e.get("last_pass"), (int, float)) else None)
        for n, e in summary.items()
    }
    p = planner.plan(
        rows,
        last,
        sweep_jobs.keys(),
        now,
        running_jobs=len(set(sweep_jobs.values())),
        max_nodes=cfg["max_nodes"],
        max_concurrent=cfg["max_concurrent"],
        period_s=cfg["period_s"],
        min_interval_s=cfg["min_interval_s"],
        cron_interval_s=cfg["cron_interval_s"],
        revalidate=[n for n, e in summary.items() if e.get("status") == "fail"],
    )
    output = cfg.get("output") or os.path.join(paths["log_dir"], "sweep-%j.out")
    jobs: List[Dict[str, Any]] = []
    errors: List[str] = []
    if not dry_run and (p.selected or cfg["pairs"]["enabled"]):
        # Slurm fails a job whose --output directory is missing (exit 0:53, no log at all)
        try:
            os.makedirs(os.path.dirname(output) or ".", exist_ok=True)
        except OSError as exc:
            log.warning("cannot create %s: %s", os.path.dirname(output), exc.strerror)
    for cand in p.selected:
        node = check_node_name(cand.node)
        model = planner.gpu_model_from_gres(cand.gres)
        args = jobscript.sbatch_args(node, cfg, run_id, output)
        argv = jobscript.run_node_argv(
            node, run_id, python=cfg.get("python"), config_path=site_cfg.path or config_path, gpu_model=model
        )
        script = jobscript.render_script(node, run_id, argv)
        entry: Dict[str, Any] = {
            "node": node,
            "gpu_model": model,
            "last_pass": cand.last_pass,
            "overdue": cand.overdue,
            "revalidate": cand.revalidate,
            "sbatch": args,
        }
        _submit_or_show(entry, script, args, dry_run, errors, node)
        jobs.append(entry)
    pair_jobs = _submit_pairs(
        site_cfg,
        cfg,
        store,
        rows,
        sweep_jobs,
        p,
        run_id,
        output,
        config_path=site_cfg.path or config_path,
        dry_run=dry_run,
        errors=errors,
    )
    submitted = sum(1 for j in jobs + pair_jobs if j.get("job_id"))
    if not dry_run and cfg["write_metrics"]:
        try:
            from slurmkit.sweep.metrics import write_controller_metrics

            write_controller_metrics(
                paths["metrics_dir"],
                summary=summary,
                fleet_nodes=[r["name"] for r in rows],
                run_at=now,
                submitted=submitted,
                running=p.running + submitted,
                overdue=len(p.overdue),
                period_s=cfg["period_s"],
            )
        except Exception as exc:  # metrics never fail a sweep
            log.error("metrics failed: %s: %s", type(exc).__name__, exc)
    if not p.meets_period:
        log.warning(
            "max_nodes=%d cannot cover %d nodes within period_s=%gs at one run every %gs; need %d per run",
            cfg["max_nodes"],
            p.total_nodes,
            cfg["period_s"],
            cfg["cron_interval_s"],
            p.required_per_run,
        )
    report = {
        "run_id": run_id,
        "dry_run": dry_run,
        "plan": p.to_dict(),
        "jobs": jobs,
        "pair_jobs": pair_jobs,
        "errors": errors,
        "running_sweep_jobs": sweep_jobs,
    }
    if errors and not submitted:
        raise SlurmCommandError(["sbatch"], f"every sweep submission failed; first: {errors[0]}")
    return report


def _submit_pairs(
    site_cfg, cfg, store, rows, sweep_jobs, p, run_id, output, *, config_path, dry_run, errors
) -> List[Dict[str, Any]]:
    """Pairwise 2-node all_reduce jobs on idle nodes the single-node plan left free."""
    from slurmkit.sweep import jobscript, pairs, planner

    if not cfg["pairs"]["enabled"]:
        return []
    taken = {c.node for c in p.selected} | set(sweep_jobs)
    gres = {}
    idle = []
    for r in rows:
        if r["state"].strip().lower() == "idle" and r["name"] not in taken and r["name"] not in gres:
            idle.append(r["name"])
        gres.setdefault(r["name"], r.get("gres", ""))
    out: List[Dict[str, Any]] = []
    # pair jobs share the concurrency cap with single-node jobs, not max_nodes
    for a, b in pairs.plan_pairs(store, idle, cfg, cfg["max_concurrent"] - p.running - len(p.selected)):
        tasks = 1
        if cfg["pairs"]["backend"] in ("auto", "nccl"):
            tasks = sum(gpus_from_gres(gres.get(a, "")).values()) or 1
        args = pairs.pair_sbatch_args(a, b, cfg, run_id, output, tasks)
        argv = pairs.pair_argv(
            a, b, run_id, python=cfg.get("python"), config_path=config_path, tasks=2 * tasks
        )
        script = jobscript.render_script(a, run_id, argv)
        entry: Dict[str, Any] = {
            "nodes": [a, b],
            "sbatch": args,
            "gpu_model": planner.gpu_model_from_gres(gres.get(a)),
        }
        _submit_or_show(entry, script, args, dry_run, errors, f"{a}+{b}")
        out.append(entry)
    return out


def _valid_name(name: str) -> bool:
    from slurmkit.sweep.store import _NODE_NAME_RE

    return bool(_NODE_NAME_RE.match(name or ""))


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
    setup_logging(verbose, quiet)
    site_cfg = load_config(config_path)
    report = plan_and_submit(site_cfg, config_path=config_path, dry_run=dry_run, max_nodes=max_nodes)
    if resolve_format(fmt, as_json) == "json":
        print_json(report)
        return
    p = report["plan"]
    if not quiet:
        verb = "would submit" if dry_run else "submitted"
        n_jobs = len(report["jobs"]) + len(report["pair_jobs"])
        click.echo(
            f"sweep {report['run_id']}: {p['idle_nodes']} idle of {p['total_nodes']} nodes; "
            f"{p['running']} sweep job(s) already queued/running; {verb} {n_jobs} (slots {p['slots']}); "
            f"{len(p['overdue'])} overdue; K needed for the period: {p['required_per_run']}",
            err=True,
        )

    def job_cell(j: Dict[str, Any]) -> str:
        return j.get("job_id") or ("(dry run)" if dry_run else "ERROR: " + j.get("error", ""))

    rows = [
        {
            "node": j["node"],
            "last_pass": _iso(j["last_pass"]),
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
        click.echo(f"nothing to {'plan' if dry_run else 'submit'}", err=True)


def _ctx_opts(ctx, config_path, verbose, quiet):
    parent = ctx.obj or {}
    return (
        config_path or parent.get("config_path"),
        max(verbose, parent.get("verbose") or 0),
        quiet or bool(parent.get("quiet")),
    )


def status_rows(site_cfg, now: float, node_states: Optional[Dict[str, str]] = None) -> List[Dict[str, Any]]:
    from slurmkit.sweep.runnode import open_store

    store = open_store(site_cfg)
    cfg = site_cfg.section("sweep")
    documents = store.documents()
    names = sorted(set(documents) | set(node_states or {}))
    rows = []
    for name in names:
        doc = documents.get(name) or {}
        checks = doc.get("checks") or {}
        heavy = {c: e for c, e in checks.items() if e.get("tier") == "heavy"}
        valid_until = min(
            (e.get("valid_until") for e in heavy.values() if isinstance(e.get("valid_until"), (int, float))),
            default=None,
        )
        bad = sorted(f"{c}:{e.get('code')}" for c, e in heavy.items() if e.get("status") not in ("ok", None))
        lp = doc.get("last_pass")
        age = now - lp if isinstance(lp, (int, float)) else None
        rows.append(
            {
                "node": name,
                "state": (node_states or {}).get(name, ""),
                "gpu_model": (doc.get("meta") or {}).get("gpu_model"),
                "last_pass": lp,
                "last_pass_iso": _iso(lp),
                "age": _age(age),
                "verdict": doc.get("last_pass_status") or "never",
                "valid_until": valid_until,
                "valid_until_iso": _iso(valid_until) if valid_until else "",
                "valid": bool(valid_until and valid_until > now),
                "overdue": age is None or age > cfg["period_s"],
                "problems": bad,
            }
        )
    return rows


@sweep.command("status")
@common_options
@format_options(("table", "json"))
@click.option("--node", "nodes", multiple=True, help="Only these nodes (repeatable).")
@click.option("--no-slurm", is_flag=True, help="Do not ask sinfo for node states (store only).")
@click.pass_context
def status_cmd(ctx, config_path, verbose, quiet, fmt, as_json, nodes, no_slurm) -> None:
    """Per node: last complete pass, its verdict, valid-until, and what failed."""
    config_path, verbose, quiet = _ctx_opts(ctx, config_path, verbose, quiet)
    setup_logging(verbose, quiet)
    site_cfg = load_config(config_path)
    states: Optional[Dict[str, str]] = None
    if not no_slurm:
        from slurmkit.slurm import client

        try:
            states = client.node_states(site_cfg.section("sweep").get("partition"))
        except SlurmCommandError as exc:
            log.warning("node states unavailable (%s); showing the store only", exc)
    rows = status_rows(site_cfg, time.time(), states)
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
        click.echo("no nodes in the verdict store yet", err=True)


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
    from slurmkit.sweep.runnode import run_node

    config_path, verbose, quiet = _ctx_opts(ctx, config_path, verbose, quiet)
    setup_logging(verbose, quiet)
    site_cfg = load_config(config_path)
    node = node or this_node()
    run_id = run_id or new_run_id(time.time())
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
            click.echo(f"{node}: {result.status.value} in {result.seconds:.1f}s{extra}", err=True)
    if result.record_error:  # the verdict stands (and drained); say the pass is not in the store
        click.echo(f"slurmkit: {node}: pass not recorded: {result.record_error}", err=True)
        ctx.exit(3 if exit_zero else result.status.exit_code)
    ctx.exit(0 if exit_zero else result.status.exit_code)


@sweep.command("run-pair", hidden=False)
@common_options
@click.option("--nodes", required=True, help="The two nodes, a,b (rank 0 runs on a).")
@click.option("--run-id", default=None)
@click.pass_context
def run_pair_cmd(ctx, config_path, verbose, quiet, nodes, run_id) -> None:
    """One rank of a pairwise 2-node all_reduce job (started by srun inside it)."""
    from slurmkit.sweep.pairs import run_pair
    from slurmkit.sweep.store import check_node_name

    config_path, verbose, quiet = _ctx_opts(ctx, config_path, verbose, quiet)
    setup_logging(verbose, quiet)
    site_cfg = load_config(config_path)
    pair = [check_node_name(n.strip()) for n in nodes.split(",")]
    if len(pair) != 2:
        raise UsageError(f"--nodes needs two nodes, got {nodes!r}")
    result = run_pair(site_cfg, pair, run_id or new_run_id(time.time()))
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
    from slurmkit.sweep.runnode import open_store
    from slurmkit.sweep.store import check_node_name

    config_path, verbose, quiet = _ctx_opts(ctx, config_path, verbose, quiet)
    setup_logging(verbose, quiet)
    store = open_store(load_config(config_path))
    for node in nodes:
        check_node_name(node)
        wanted = set(checks) if checks else None
        valid = [c for c in store.valid(node) if wanted is None or c in wanted]
        if not dry_run:
            store.invalidate(node, checks or None)
        if not quiet:
            verb = "would end" if dry_run else "ended"
            listed = ": " + ", ".join(sorted(valid)) if valid else ""
            click.echo(f"{node}: {verb} {len(valid)} valid verdict(s){listed}")
