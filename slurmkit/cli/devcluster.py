"""``slurmkit devcluster up|down|status|env``."""

from __future__ import annotations

import shlex
import time

import click

from slurmkit.cli.common import common_options, format_options, message, print_json, resolve_format


def _cluster(state_dir):
    from slurmkit.devcluster.cluster import DevCluster

    return DevCluster(state_dir)


state_dir_option = click.option(
    "--state-dir",
    default=None,
    metavar="DIR",
    help="Where every file of the cluster lives "
    "(default: $SLURMKIT_DEVCLUSTER_DIR or /var/lib/slurmkit-devcluster).",
)


@click.group()
def devcluster() -> None:
    """A real local Slurm cluster: munge, MariaDB, slurmdbd, slurmctld and N slurmd.

    All config, spool, logs and pid files live under one state directory; clients
    find the cluster through SLURM_CONF (see `slurmkit devcluster env`). Nothing under
    /etc/slurm is read or written.
    """


@devcluster.command()
@state_dir_option
@click.option("--nodes", type=click.IntRange(1, 64), default=2, show_default=True, help="Compute nodes.")
@click.option(
    "--mode",
    type=click.Choice(["netns", "ports"]),
    default="netns",
    show_default=True,
    help="netns: one network+UTS namespace per node (own hostname and IP); "
    "ports: several slurmd on this host.",
)
@click.option(
    "--gpus",
    "gpus_per_node",
    type=click.IntRange(1, 64),
    default=8,
    show_default=True,
    help="Fake GPUs per node.",
)
@click.option("--gpu-type", default="h100", show_default=True, help="GPU gres type ('' for untyped).")
@click.option("--hooks", is_flag=True, help="Wire in slurmkit's prolog and epilog (prolog/, epilog/).")
@click.option("--healthcheck", is_flag=True, help="Wire in slurmkit's HealthCheckProgram.")
@click.option("--prolog", type=click.Path(exists=True, dir_okay=False), help="Use this Prolog program.")
@click.option("--epilog", type=click.Path(exists=True, dir_okay=False), help="Use this Epilog program.")
@click.option("--no-install", is_flag=True, help="Fail instead of apt-get installing missing packages.")
@click.option(
    "--slurm",
    "slurm",
    type=click.Choice(["host", "22.05", "24.11", "26.05"]),
    default="host",
    show_default=True,
    help="Slurm release: this machine's packages, or one from Debian's archive run in a "
    "debootstrapped root (built once into /var/cache/slurmkit-devcluster).",
)
@common_options
def up(
    state_dir,
    nodes,
    mode,
    gpus_per_node,
    gpu_type,
    hooks,
    healthcheck,
    prolog,
    epilog,
    no_install,
    slurm,
    config_path,
    verbose,
    quiet,
) -> None:
    """Start the cluster (idempotent: running it twice is safe)."""
    from slurmkit.devcluster.cluster import ClusterSpec

    cluster = _cluster(state_dir)
    spec = ClusterSpec(
        mode=mode,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        gpu_type=gpu_type,
        hooks=hooks,
        healthcheck=healthcheck,
        prolog=prolog,
        epilog=epilog,
        slurm=slurm,
    )
    t0 = time.monotonic()
    spec = cluster.up(spec, install=not no_install)
    if not quiet:
        where = f" in {spec.rootfs}" if spec.rootfs else ""
        message(
            f"devcluster up in {time.monotonic() - t0:.1f}s: Slurm {spec.release}{where}, "
            f"{nodes} nodes ({mode}), state in {cluster.root}"
        )
        message(
            f'use it with: eval "$(slurmkit devcluster env --state-dir {shlex.quote(str(cluster.root))})"'
        )


@devcluster.command()
@state_dir_option
@click.option("--keep-state", is_flag=True, help="Stop the daemons but keep the state directory.")
@common_options
def down(state_dir, keep_state, config_path, verbose, quiet) -> None:
    """Stop every daemon through its pid file and remove what `up` created."""
    t0 = time.monotonic()
    _cluster(state_dir).down(keep_state=keep_state)
    if not quiet:
        message(f"devcluster down in {time.monotonic() - t0:.1f}s")


@devcluster.command()
@state_dir_option
@common_options
@format_options(("table", "json"))
def status(state_dir, config_path, verbose, quiet, fmt, as_json) -> None:
    """Show the daemons (running, STALE pid file, stopped) and sinfo. Exit 1 if not up."""
    st = _cluster(state_dir).status()
    if resolve_format(fmt, as_json) == "json":
        print_json(st)
    else:
        click.echo(f"state dir: {st['state_dir']}")
        for name, d in st["daemons"].items():
            click.echo(f"  {name:<16} {d['state']:<8} {d['pid'] or ''}")
        if not st["daemons"]:
            click.echo("  no cluster here")
        if st["sinfo"]:
            click.echo(st["sinfo"].rstrip())
    raise SystemExit(0 if st["up"] else 1)


@devcluster.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@state_dir_option
@click.option("--user", default=None, metavar="USER", help="Run as this user (runuser).")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def run(state_dir, user, argv) -> None:
    """Run a command as a client of the cluster: inside its Slurm root when it has one
    (`up --slurm 26.05`), with SLURM_CONF and SLURMKIT_CONFIG set. Exit: the command's."""
    import os

    cmd = _cluster(state_dir).run_argv(list(argv), user=user)
    os.execvp(cmd[0], cmd)


@devcluster.command(
    "in-root", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@state_dir_option
@click.option(
    "--slurm",
    "slurm",
    type=click.Choice(["22.05", "24.11", "26.05"]),
    required=True,
    help="The release whose Debian root to run in (built once, then reused).",
)
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def in_root(state_dir, slurm, argv) -> None:
    """Run a command inside a Slurm release's root, from the current directory, with the
    state directory, the checkout and this Python bound in: how the tests run on a release
    this machine's packages are not (a devcluster `up` in there is that release's).
    Exit: the command's."""
    cmd, cleanup = _cluster(state_dir).in_root_argv(slurm, list(argv))
    import subprocess

    try:
        rc = subprocess.call(cmd)
    finally:
        cleanup()
    raise SystemExit(rc)


@devcluster.command()
@state_dir_option
def env(state_dir) -> None:
    """Print the exports that point Slurm clients and slurmkit at this cluster."""
    c = _cluster(state_dir)
    click.echo(f"export SLURM_CONF={shlex.quote(str(c.slurm_conf))}")
    click.echo(f"export SLURMKIT_CONFIG={shlex.quote(str(c.slurmkit_config))}")
