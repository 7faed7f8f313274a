"""``slurmkit health``, ``slurmkit node`` and ``slurmkit kill-leaks``.

Exit codes (Nagios style, documented in docs/health.md):

=====================  ==================================================================
command                exit code
=====================  ==================================================================
health run             0 ok, 1 warn, 2 fail, 3 unknown (a check could not run); 2 also for
                       usage/config errors (click and slurmkit convention)
health list            0
health accounting      0 NVML accounting on for every GPU, 1 off (or unsupported) somewhere,
                       3 the GPUs cannot be asked or set (no NVML, not root)
node status            0; 3 when Slurm cannot be asked
node resume            0 resumed or not drained, 1 refused (an admin's drain), 2 the re-check
                       failed (node stays drained), 3 cannot re-check from here / unknown
kill-leaks             0 nothing found, 1 leaks found (listed or killed), 2 a leak survived
                       SIGKILL, or usage: not run as root (refused before anything is
                       done), 3 squeue failed (nothing killed)
=====================  ==================================================================
"""

from __future__ import annotations

import os
import sys
import time

import click

from slurmkit.cli.common import (
    common_options,
    dry_run_option,
    format_options,
    load_config,
    message,
    print_json,
    print_line,
    print_table,
    resolve_format,
    setup_logging,
)


def _sections(config_path):
    cfg = load_config(config_path)
    return cfg.section("health"), cfg.section("paths")


def _local_or_simulated(node, health):
    from slurmkit.hooks.nodeops import NotHere, can_check_locally
    from slurmkit.slurm.jobenv import this_node

    if node is None:
        return this_node()
    if not can_check_locally(node, health):
        raise NotHere(
            f"checks read this machine's GPUs: run them on {node} (e.g. `ssh {node} slurmkit health run`)"
        )
    return node


def _short(text, width=90):
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


@click.group("health")
def health() -> None:
    """Run and list node health checks (exit: 0 ok, 1 warn, 2 fail, 3 unknown)."""


@health.command("run")
@click.option(
    "--tier",
    type=click.Choice(["fast", "heavy"]),
    default="fast",
    show_default=True,
    help="Which tier (ignored with --check).",
)
@click.option("--check", "checks", multiple=True, metavar="NAME", help="Run only these checks (repeatable).")
@click.option(
    "--node", default=None, help="Node to check (default: this one; any node with the simulated backend)."
)
@click.option(
    "--advance-cursor", is_flag=True, help="Consume new Xid events like a hook does (default: only look)."
)
@format_options(("table", "json"))
@common_options
def health_run(tier, checks, node, advance_cursor, fmt, as_json, config_path, verbose, quiet) -> None:
    """Run the checks of a tier (or the named ones) on this node and print verdicts."""
    setup_logging(verbose, quiet)
    from slurmkit.health.engine import run_selected
    from slurmkit.verdict.base import Tier, worst

    health_cfg, paths = _sections(config_path)
    node = _local_or_simulated(node, health_cfg)
    start = time.monotonic()
    results = run_selected(
        health_cfg,
        paths,
        tier=Tier(tier),
        names=list(checks) or None,
        node=node,
        only_enabled=not checks,
        advance_xid_cursor=advance_cursor,
    )
    if not quiet:  # after the arguments were accepted: a usage error stays one line
        from slurmkit.slurm.settings import warn_lines

        for line in warn_lines() or []:  # one line per Slurm setting the kill path relies on
            message(f"slurmkit: {line}")
    status = worst(results)
    if resolve_format(fmt, as_json) == "json":
        print_json(
            {
                "node": node,
                "tier": tier,
                "status": status.value,
                "exit_code": status.exit_code,
                "seconds": round(time.monotonic() - start, 4),
                "results": [r.to_dict() for r in results],
            }
        )
    else:
        print_table(
            [
                {
                    "check": r.check,
                    "status": r.status.value.upper(),
                    "code": r.code,
                    "value": "" if r.value is None else f"{r.value:.4g}{(' ' + r.unit) if r.unit else ''}",
                    "seconds": f"{r.seconds:.3f}",
                    "reason": _short(r.reason),
                }
                for r in results
            ]
        )
        if not quiet:
            message(f"{node}: {status.value.upper()}")
    sys.exit(status.exit_code)


@health.command("accounting")
@click.option("--enable", is_flag=True, help="Turn NVML per-process accounting on where it is off (root).")
@click.option("--node", default=None, help="Node (default: this one; any node with the simulated backend).")
@format_options(("table", "json"))
@common_options
def health_accounting(enable, node, fmt, as_json, config_path, verbose, quiet) -> None:
    """Show (or turn on) NVML per-process accounting, which per-job GPU efficiency needs.

    Run it at boot on every GPU node (after persistence mode: the driver forgets the
    mode when it unloads); a job started while it was off reads "unknown" in
    `slurmkit report efficiency`.
    """
    setup_logging(verbose, quiet)
    from slurmkit.health.backends import BackendError, open_backend
    from slurmkit.hooks.efficiency import accounting_setup

    health_cfg, _ = _sections(config_path)
    node = _local_or_simulated(node, health_cfg)
    try:
        backend = open_backend(health_cfg, node)
        rows = accounting_setup(backend, enable)
        backend.close()
    except BackendError as exc:
        message(f"slurmkit: error: {node}: {exc}")
        sys.exit(3)
    if resolve_format(fmt, as_json) == "json":
        print_json({"node": node, "gpus": rows})
    else:
        print_table(
            [
                {"gpu": r["gpu"], "accounting": r["accounting"], "note": _short(r.get("error", ""))}
                for r in rows
            ]
        )
    states = {r["accounting"] for r in rows}
    sys.exit(3 if "error" in states else (0 if states <= {"on"} else 1))


@health.command("list")
@format_options(("table", "json"))
@common_options
def health_list(fmt, as_json, config_path, verbose, quiet) -> None:
    """List the check catalog with tier, switch, timeout and where each runs."""
    setup_logging(verbose, quiet)
    from slurmkit.health.catalog import CATALOG
    from slurmkit.health.engine import Context, check_timeout

    health_cfg, paths = _sections(config_path)
    ctx = Context(health=health_cfg, paths=paths, node="-")
    rows = [
        {
            "name": s.name,
            "tier": s.tier.value,
            "enabled": health_cfg["checks"].get(s.name, {}).get("enabled", True),
            "timeout_s": check_timeout(ctx, s),
            "hooks": ",".join(sorted(s.hooks)),
            "needs_gpu": s.gpu,
            "codes": s.codes,
            "summary": s.summary,
        }
        for s in CATALOG.values()
    ]
    if resolve_format(fmt, as_json) == "json":
        print_json(rows)
    else:
        print_table(
            [{k: r[k] for k in ("name", "tier", "enabled", "timeout_s", "hooks", "summary")} for r in rows]
        )


@click.group("node")
def node() -> None:
    """Node status and guarded resume of slurmkit-drained nodes."""


@node.command("status")
@click.argument("name")
@format_options(("table", "json"))
@common_options
def node_status_cmd(name, fmt, as_json, config_path, verbose, quiet) -> None:
    """Slurm state, drain reason (and whether slurmkit owns it), last verdict, sweep verdicts."""
    setup_logging(verbose, quiet)
    from slurmkit.hooks.nodeops import node_status

    health_cfg, paths = _sections(config_path)
    st = node_status(name, health_cfg, paths)
    if resolve_format(fmt, as_json) == "json":
        print_json(st)
        return
    # (a drain reason, a check's message and a job id come from outside slurmkit: shown as data)
    print_line(f"node:            {st['node']}")
    print_line(f"state:           {st['state']}")
    print_line(
        f"reason:          {st['reason'] or '-'}" + ("  (slurmkit drain)" if st["slurmkit_drain"] else "")
    )
    lv = st["last_verdict"]
    if lv:
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(lv["time"]))
        print_line(f"last verdict:    {lv['status']} ({lv['hook']}, job {lv['job_id'] or '-'}, {when})")
        for line in lv["failing"]:
            print_line(f"                 {_short(line, 100)}")
    else:
        click.echo("last verdict:    - (no health log entry for this node here)")
    for check, e in sorted(st["heavy_verdicts"].items()):
        print_line(
            f"sweep {check}: {e.get('status')} {e.get('code', '')} valid until "
            f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(float(e.get('valid_until') or 0)))}"
        )


@node.command("resume")
@click.argument("name")
@dry_run_option
@format_options(("table", "json"))
@common_options
def node_resume_cmd(name, dry_run, fmt, as_json, config_path, verbose, quiet) -> None:
    """Re-run the checks and resume NAME only if slurmkit drained it and they pass.

    Never resumes a node drained for another reason (an admin's drain). Exit: 0 resumed
    or not drained, 1 refused, 2 re-check failed, 3 cannot re-check.
    """
    setup_logging(verbose, quiet)
    from slurmkit.hooks.nodeops import guarded_resume

    health_cfg, paths = _sections(config_path)
    report = guarded_resume(name, health_cfg, paths, dry_run=dry_run)
    if resolve_format(fmt, as_json) == "json":
        print_json(report)
    else:
        print_line(report["message"])
        for r in report.get("results", []):
            if r["status"] in ("fail", "warn", "unknown"):
                print_line(f"  {r['check']}: {r['status'].upper()} {r['code']} {_short(r['reason'])}")
    sys.exit(report["exit_code"])


@click.command("kill-leaks")
@dry_run_option
@click.option("--node", default=None, help="Node whose GPUs to inspect (default: this one).")
@format_options(("table", "json"))
@common_options
def kill_leaks(dry_run, node, fmt, as_json, config_path, verbose, quiet) -> None:
    """Kill processes over 95% of a GPU's (or host) memory that belong to no running job.

    Never root, system users or processes under a live job's slurmstepd. SIGTERM, then
    SIGKILL; every action is audited. Root only. Exit: 0 none, 1 found, 2 survivor (or not
    root: refused), 3 squeue failed.
    """
    from slurmkit.hooks.leaks import NOT_ROOT_MESSAGE

    if os.geteuid() != 0:  # before any scan, kill or write: a user's run could only half work
        message(NOT_ROOT_MESSAGE)
        sys.exit(2)
    setup_logging(verbose, quiet)
    from slurmkit.health.backends import BackendError
    from slurmkit.health.engine import Context
    from slurmkit.hooks.leaks import exit_code, write_metrics
    from slurmkit.hooks.leaks import kill_leaks as run_kill

    health_cfg, paths = _sections(config_path)
    node = _local_or_simulated(node, health_cfg)
    ctx = Context(health=health_cfg, paths=paths, node=node)
    try:
        backend = ctx.backend()
    except BackendError as exc:
        message(f"slurmkit: GPU side skipped: {exc}")
        backend = None
    report = run_kill(health_cfg, paths, node, dry_run=dry_run, backend=backend)
    try:
        write_metrics(paths, report)
    except Exception as exc:
        message(f"slurmkit: cannot write metrics: {exc}")
    if resolve_format(fmt, as_json) == "json":
        print_json(report)
    else:
        if report["leaks"]:
            print_table(
                [
                    {
                        "pid": lk["pid"],
                        "user": lk["user"],
                        "comm": lk["comm"],
                        "why": lk["why"],
                        "outcome": lk["outcome"],
                        "detail": _short(lk["detail"], 70),
                    }
                    for lk in report["leaks"]
                ]
            )
        elif not quiet:
            message(f"{node}: no leaked processes")
    sys.exit(exit_code(report))
