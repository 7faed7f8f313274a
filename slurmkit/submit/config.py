"""The ``submit:`` section of the site config (``slurmkit.yaml``).

Why a separate ``defaults`` mapping instead of one key per spec field: a site sets
the same things a researcher would (partition, account, fabric, NCCL overrides,
requeue policy), with the same names and the same validation. ``defaults`` is
validated against the job-spec schema at load, so a typo in the site file is
reported with the site file's path and line, not as a mystery in every job.
"""

from __future__ import annotations

from slurmkit.core.schema import Field, Section

SITE_SCHEMA = Section(
    {
        "defaults": Field(
            "dict",
            {},
            "Job-spec keys applied under every spec (the spec overrides them, "
            "`ssubmit --set` overrides both). Same keys and validation as a job spec.",
            nullable=False,
        ),
        "python": Field(
            "str",
            None,
            "Python interpreter the job uses for torchrun, pre-flight and the "
            "job-side helpers (needs slurmkit, and torch for training). Default: the "
            "interpreter running ssubmit. A spec's `python:` key wins.",
        ),
        "template": Field(
            "str",
            None,
            "A site sbatch template (Jinja2) replacing "
            "job_templates/ssubmit.sbatch.j2; it receives the same variables.",
        ),
        "nccl_profiles_dir": Field(
            "str",
            None,
            "Directory of NCCL profiles (<fabric>.yaml); default: etc/nccl in the slurmkit source tree.",
        ),
        "checkpoint_root": Field(
            "str",
            None,
            "Shared directory under which a job without "
            "`checkpoint.dir` gets <root>/<user>/<job id> (created 0700; make the root "
            "1777 like /tmp); default: <paths.shared_dir>/ssubmit.",
        ),
        "verdict_root": Field(
            "str",
            None,
            "Root of the sweep verdict store consulted before a "
            "requeue-with-exclude; default: paths.shared_dir.",
        ),
        "record_dir": Field(
            "str",
            None,
            "Where ssubmit remembers submitted jobs (spec, log path) for "
            "`ssubmit logs`; default: $XDG_STATE_HOME/slurmkit/ssubmit or "
            "~/.local/state/slurmkit/ssubmit.",
        ),
        "wait_poll_seconds": Field(
            "float", 3.0, "Polling interval of `ssubmit --wait`.", min=0.2, nullable=False
        ),
        "check_partition": Field(
            "bool",
            True,
            "Ask sinfo whether the partition's nodes have "
            "gpus_per_node GPUs before submitting (skipped when sinfo fails).",
            nullable=False,
        ),
    },
    "ssubmit: site defaults for job specs and where ssubmit keeps its files.",
)
