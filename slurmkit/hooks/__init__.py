"""The node-side programs that act at job boundaries, above the checks in :mod:`slurmkit.health`.

* :func:`run`, here: the one entry of the hook scripts (``prolog/slurmkit-prolog``,
  ``epilog/slurmkit-epilog``, ``prolog/slurmkit-healthcheck``), with the fail-open rule (below);
* :mod:`.gate`: Prolog, Epilog and HealthCheckProgram as functions returning an exit code;
* :mod:`.epilog`: what the epilog does besides the fast checks (leftovers, GPU memory,
  ``/dev/shm``, escalation);
* :mod:`.efficiency`: per-job GPU efficiency collected by the epilog, merged across nodes
  and written to the job's AdminComment (the codec: :mod:`slurmkit.slurm.admincomment`);
* :mod:`.leaks`: the cron leak killer (``slurmkit kill-leaks``);
* :mod:`.nodeops`: ``slurmkit node status|resume``, the guarded resume;
* :mod:`.procs`: processes, job scoping by Slurm's cgroup layout, killing with grace.

The wheel installs the hook scripts as they are (``script-files`` in pyproject.toml, not pip's
console-script wrappers, which import ``re`` first), with the venv's interpreter on their first
line, so Slurm can run them as installed (``Prolog=/opt/slurmkit/venv/bin/slurmkit-prolog``)
with no PATH, HOME or virtualenv in the environment; a site may also copy them. The entry is
here, in the package's ``__init__``, because a job start imports this package anyway and every
module it imports costs about a third of a millisecond (docs/benchmarks.md, "Prolog fast path").

The gate is imported when the hook runs, not with this package, because a broken install
must fail open: if slurmkit or one of its dependencies cannot be imported (an
``ImportError``, or any other exception a module raises while it loads), the hook writes
one line on stderr (slurmd's log) and ``slurmkit_health_internal_error 1`` in its metrics
file, and exits 0 instead of draining every node.
"""

from __future__ import annotations

import os
import sys
import time

#: node_exporter's textfile directory when even the site config cannot be read
#: (the default of ``paths.metrics_dir``).
FALLBACK_METRICS_DIR = "/var/lib/prometheus/node-exporter"


def _metrics_dir() -> str:
    try:
        from slurmkit.config import load_site_config

        return load_site_config().section("paths")["metrics_dir"]
    except Exception:
        return FALLBACK_METRICS_DIR


def _node() -> str:
    try:
        from slurmkit.slurm.jobenv import this_node

        return this_node()
    except Exception:
        return os.uname().nodename.split(".")[0]


def record_import_failure(hook: str) -> str:
    """The metrics a hook writes when it could not load: status unknown, internal error.
    Returns the file's path; raises when it cannot be written."""
    from slurmkit.metrics import Sample, file_name, write_textfile

    node = _node()
    base = {"node": node, "hook": hook}
    path = os.path.join(_metrics_dir(), file_name("slurmkit_health", hook, node))
    return write_textfile(
        path,
        [
            Sample(
                "slurmkit_health_status",
                "Nagios code of the last verdict: 0 ok, 1 warn, 2 fail, 3 unknown.",
                base,
                3,
            ),
            Sample(
                "slurmkit_health_last_run_timestamp_seconds",
                "When the last verdict was written.",
                base,
                time.time(),
            ),
            Sample(
                "slurmkit_health_internal_error",
                "1 when the last run hit a slurmkit fault (bug, config, missing library) and failed open.",
                base,
                1,
            ),
        ],
    )


def fail_open(hook: str, exc: BaseException) -> None:
    """Say why the hook could not load (one line), record the metric, exit 0."""
    message = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    try:
        record_import_failure(hook)
    except Exception as metric_exc:
        message += f" (metric not written: {type(metric_exc).__name__}: {metric_exc})"
    sys.stderr.write(f"slurmkit-{hook}: cannot import slurmkit ({message}); failing open\n")
    sys.stderr.flush()
    sys.exit(0)


def run(hook: str) -> None:
    """Run the ``hook`` gate in this process and exit with its code."""
    try:
        from slurmkit.health.deadline import prestart

        prestart()  # the probe thread comes up while the gate's modules load
        from slurmkit.hooks.gate import main
    except Exception as exc:  # ImportError, or a broken dependency failing at import: fail open
        fail_open(hook, exc)
    main(hook)
