"""Console-script entry points of the node health gate: ``slurmkit-prolog``,
``slurmkit-epilog`` and ``slurmkit-healthcheck`` (``[project.scripts]`` in pyproject.toml).

pip writes these scripts with the venv's interpreter on their first line, so Slurm can
run them as installed (``Prolog=/opt/slurmkit/venv/bin/slurmkit-prolog``) with no PATH,
HOME or virtualenv in the environment. Everything else lives in
``slurmkit.health.gate.main``, which the hook name parameterises.

The gate is imported when the hook runs, not with this module, because a broken
install must fail open: if slurmkit (or one of its dependencies) cannot be imported, the
hook says so on stderr (slurmd's log) and exits 0 instead of draining every node.
"""

from __future__ import annotations

import sys


def run(hook: str) -> None:
    """Run the ``hook`` gate in this process and exit with its code."""
    try:
        from slurmkit.health.gate import main
    except Exception as exc:  # ImportError, or a broken dependency failing at import: fail open
        sys.stderr.write(
            f"slurmkit-{hook}: cannot import slurmkit ({type(exc).__name__}: {exc}); failing open\n"
        )
        sys.exit(0)
    main(hook)


def prolog() -> None:
    run("prolog")


def epilog() -> None:
    run("epilog")


def healthcheck() -> None:
    run("healthcheck")
