"""The ``sweep`` section of ``slurmkit.yaml``.

Every default is chosen so that ``slurmkit sweep`` from cron every 4 hours, with
nothing configured, checks 4 idle nodes per run, never has more than 8 sweep jobs in
the queue, and tells you (``slurmkit sweep status``, the stale-sweep alert) when the
fleet is not covered within a week.
"""

from __future__ import annotations

from typing import Any, Optional

from slurmkit.core.schema import Field, Section


def _time_limit(value: Any) -> Optional[str]:
    from slurmkit.slurm.parse import ParseError, parse_time_limit

    try:
        minutes = parse_time_limit(str(value))
    except (ParseError, ValueError) as exc:
        return f"not a Slurm time limit ({exc})"
    if minutes is None:
        return "a sweep job needs a finite time limit"
    return None


STORAGE_SCHEMA = Section(
    {
        "enabled": Field("bool", True, "Run the checkpoint-storage probe in each sweep job."),
        "path": Field(
            "str",
            None,
            "Directory to write the probe file in: the checkpoint filesystem. Unset: the probe is skipped.",
        ),
        "size_mb": Field(
            "int",
            1024,
            "Bytes written then read back, in MiB. Use more than the "
            "filesystem's client cache to measure the filesystem, not the page cache.",
            min=1,
        ),
        "block_mb": Field("int", 16, "Write/read block size in MiB.", min=1, max=1024),
        "min_write_gbps": Field(
            "float",
            None,
            "Fail below this write throughput (GB/s). Unset: "
            "derived from model_size_gb / checkpoint_window_s when both are set.",
            min=0,
        ),
        "min_read_gbps": Field("float", None, "Fail below this read throughput (GB/s).", min=0),
        "model_size_gb": Field("float", None, "Checkpoint size per node in GB, for the sizing rule.", min=0),
        "checkpoint_window_s": Field(
            "float",
            300.0,
            "Time a checkpoint may take (the sizing rule's denominator; 200 GB in 300 s needs 0.67 GB/s).",
            min=1,
        ),
        "drop_cache": Field(
            "bool",
            True,
            "Ask the kernel to drop the probe file's cached pages "
            "(posix_fadvise DONTNEED) before reading it back.",
        ),
    },
    "Checkpoint write/read throughput probe.",
)

OUTLIER_SCHEMA = Section(
    {
        "enabled": Field("bool", True, "Apply the fleet-relative outlier rule after each pass."),
        "k": Field("float", 3.0, "A node more than k x MAD below its peers' median is an outlier.", min=0),
        "action": Field(
            "str",
            "warn",
            "What an outlier verdict does: warn (report, keep the node) or drain.",
            choices=("warn", "drain"),
        ),
        "min_peers": Field(
            "int",
            3,
            "Peers (same GPU model, recent pass) needed before the rule "
            "judges a node; fewer and the outlier verdict is unknown.",
            min=1,
        ),
        "window_s": Field("float", 14 * 86400.0, "Only passes this recent count as the fleet's.", min=1),
        "mad_floor_fraction": Field(
            "float",
            0.02,
            "MAD is at least this fraction of the median, so "
            "identical peers (MAD 0) do not flag a 0.1% difference.",
            min=0,
        ),
        "checks": Field(
            "list",
            None,
            "Checks whose values are compared; unset: every check that records a numeric value.",
            items=Field("str"),
        ),
        "exclude": Field(
            "list",
            ["storage_write", "storage_read"],
            "Checks never compared: shared-"
            "filesystem throughput depends on what every other client does at that moment, "
            "not on the node.",
            items=Field("str"),
        ),
        "lower_is_better": Field(
            "list",
            [],
            "Checks where a low value is good (latencies); those are flagged when k x MAD above their peers.",
            items=Field("str"),
        ),
    },
    "Fleet-relative outliers (median and MAD per GPU model, no baseline file).",
)

PAIRS_SCHEMA = Section(
    {
        "enabled": Field("bool", False, "Also submit 2-node all_reduce jobs that exercise inter-node links."),
        "topology_conf": Field("str", None, "Slurm topology.conf; unset: next to $SLURM_CONF, if present."),
        "max_pairs": Field("int", 1, "Pair jobs per sweep run.", min=0),
        "min_busbw_gbps": Field("float", None, "Fail a pair below this all_reduce busbw (GB/s).", min=0),
        "theoretical_busbw_gbps": Field(
            "float",
            None,
            "The fabric's per-node figure; the pair fails below 90% of it (nccl-tests rule).",
            min=0,
        ),
        "size_mb": Field("int", 256, "all_reduce message size in MiB.", min=1),
        "iterations": Field("int", 20, "Timed all_reduce iterations.", min=1),
        "backend": Field(
            "str",
            "auto",
            "torch.distributed backend: nccl with GPUs, gloo without.",
            choices=("auto", "nccl", "gloo"),
        ),
    },
    "Pairwise 2-node all_reduce from topology.conf.",
)

NOTIFY_SCHEMA = Section(
    {
        "command": Field(
            "list",
            None,
            "Hook command (argv list, or one string split like a shell "
            "would) run with the message on stdin and SLURMKIT_NODE, SLURMKIT_STATUS, "
            "SLURMKIT_CODES in its environment.",
            items=Field("str"),
        ),
        "timeout_s": Field("float", 10.0, "Seconds before the hook command is killed.", min=0.1),
        "renotify_s": Field(
            "float",
            12 * 3600.0,
            "Announce an unchanged bad state again after this long (nhc-wrapper's -X 12h).",
            min=0,
        ),
        "log_file": Field("str", None, "Also append each notification as a JSON line here."),
    },
    "De-duplicated notifications: only changes, plus a re-notify period.",
)

SITE_SCHEMA = Section(
    {
        "partition": Field(
            "str",
            "sweep",
            "Partition the sweep jobs go to: a low-priority partition (or use qos) that real jobs preempt.",
        ),
        "qos": Field(
            "str", None, "QOS for sweep jobs (a preemptible QOS; see etc/slurm/sweep-qos.conf.example)."
        ),
        "account": Field("str", None, "Account charged for sweep jobs."),
        "max_nodes": Field("int", 4, "Nodes checked per sweep run (K).", min=0),
        "max_concurrent": Field("int", 8, "Cap on sweep jobs queued or running at once.", min=0),
        "period_s": Field(
            "float", 7 * 86400.0, "Every node should get a complete pass within this period.", min=60
        ),
        "min_interval_s": Field("float", 86400.0, "Never re-check a node that passed more recently.", min=0),
        "cron_interval_s": Field(
            "float",
            4 * 3600.0,
            "How often cron runs `slurmkit sweep`; used to tell "
            "whether max_nodes can cover the fleet within period_s.",
            min=60,
        ),
        "valid_for_s": Field(
            "float", 7 * 86400.0, "How long a sweep verdict stays valid for the prolog.", min=0
        ),
        "time_limit": Field("str", "60", "sbatch --time of a sweep job.", check=_time_limit),
        "job_name": Field(
            "str",
            "slurmkit-sweep",
            "Job-name prefix; sweep jobs are counted by it. Each job is named <prefix>.<node>.",
        ),
        "requeue": Field(
            "bool",
            False,
            "Requeue a preempted sweep job (default: --no-requeue, so "
            "preemption cancels it and it counts as not done; the next run re-plans).",
        ),
        "python": Field(
            "str",
            None,
            "Python that runs slurmkit inside the job; default: the one "
            "running `slurmkit sweep` (a shared venv path).",
        ),
        "extra_sbatch_args": Field(
            "list", [], "More sbatch arguments, e.g. [--reservation=maint].", items=Field("str")
        ),
        "output": Field("str", None, "sbatch --output for sweep jobs; default: <paths.log_dir>/sweep-%j.out"),
        "checks": Field(
            "list", None, "Heavy checks to run; unset: the whole heavy tier.", items=Field("str")
        ),
        "drain_on_fail": Field("bool", True, "Drain a node whose pass fails (reason slurmkit:<CODE> ...)."),
        "resume_on_pass": Field(
            "bool",
            True,
            "Resume a slurmkit-drained node whose pass is clean, "
            "through `slurmkit node resume` (never an admin's drain).",
        ),
        "write_metrics": Field("bool", True, "Write Prometheus textfile metrics to paths.metrics_dir."),
        "storage": STORAGE_SCHEMA,
        "outliers": OUTLIER_SCHEMA,
        "pairs": PAIRS_SCHEMA,
        "notify": NOTIFY_SCHEMA,
    },
    "Cron node sweeps: preemptible deep checks on idle nodes.",
)
