"""The ``health`` section of ``slurmkit.yaml``: backend, checks, thresholds, budgets.

Every default is chosen for an 8-GPU HGX node and a prolog that must finish well
under slurmd's 8 s "Prolog hung" notice (slurmd_common.c: max(2, MessageTimeout - 2) s): the whole
prolog gets 5 s, each check 2 s, and a site that configures nothing still gets every
fast GPU check. Thresholds live per GPU model because a healthy B100 idles at a power
an H100 would only reach under load; a GPU whose model matches no entry uses
``default``.

This module imports nothing heavy: the prolog validates only this section and
``paths``, and only when the config file changed (on other job starts the checks read the
validated section from the cache and their thresholds through :mod:`.thresholds`, which does
not build this module's schema).
"""

from __future__ import annotations

from slurmkit.core.schema import Field, Section
from slurmkit.health.catalog import CATALOG
from slurmkit.health.thresholds import MODEL_DEFAULTS, MODEL_THRESHOLD_FIELDS

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict, Optional


def _positive_or_null(value: Any) -> Optional[str]:
    if value is not None and value <= 0:
        return "must be > 0"
    return None


def _fixture_template(value: Any) -> Optional[str]:
    if value is not None and "{node}" not in value and not value.endswith((".yaml", ".yml")):
        return "expected a YAML file path, usually with a {node} placeholder"
    return None


def _model_entry_schema() -> Field:
    """A user's threshold entry: every key optional (null = keep the built-in value)."""
    return Section(
        {
            k: Field(f.type, None, f.doc, f.choices, f.min, f.max, check=f.check)
            for k, f in MODEL_THRESHOLD_FIELDS.items()
        }
    )


THRESHOLDS_SCHEMA = Field(
    "dict",
    {},
    "Per GPU model: overrides of the built-in thresholds (keys: "
    + ", ".join(MODEL_THRESHOLD_FIELDS)
    + "). Built-in models: "
    + ", ".join(MODEL_DEFAULTS)
    + "; any other name adds a model. A GPU matches "
    "a model when the model is a word of its name ('NVIDIA H100 80GB HBM3' -> "
    "H100); unmatched GPUs use 'default'.",
    items=_model_entry_schema(),
    nullable=False,
)


def _check(enabled: bool = True, timeout: Optional[float] = None, **params: Field) -> Field:
    fields: Dict[str, Field] = {
        "enabled": Field("bool", enabled, "Run this check."),
        "timeout": Field(
            "float",
            timeout,
            "Seconds before this check is a failure (null: tier default).",
            check=_positive_or_null,
        ),
    }
    fields.update(params)
    return Section(fields)


#: ``health.checks``: one block per declared check (slurmkit.health.declare), in catalog order.
CHECKS_SCHEMA = Section(
    {name: _check(**spec.params) for name, spec in CATALOG.items()},
    "Per-check switches and parameters. Every check has enabled and timeout.",
)

ESCALATION_SCHEMA = Section(
    {
        "action": Field(
            "str",
            "none",
            "What the epilog does when the job's exit or new Xids point at "
            "hardware: none, heavy (run the heavy tier now), reboot (scontrol reboot ASAP "
            "nextstate=RESUME).",
            choices=("none", "heavy", "reboot"),
        ),
        "exit_signals": Field(
            "list",
            [7],
            "Job-ending signals (SLURM_JOB_EXIT_CODE2 'code:signal', "
            "SLURM_JOB_DERIVED_EC) that point at hardware; 7 = SIGBUS. A hint only: "
            "escalation also needs hardware evidence (Xid, ECC, NVML), since a job can end "
            "itself with any signal.",
            items=Field("int", min=1, max=64),
        ),
        "exit_codes": Field(
            "list",
            [],
            "Job exit codes that point at hardware (site convention); a hint only, like exit_signals.",
            items=Field("int", min=1, max=255),
        ),
        "xid_min_action": Field(
            "str",
            "reset",
            "New Xids whose table action is at least this escalate.",
            choices=("monitor", "reset", "reboot", "isolate"),
        ),
        "heavy_deadline": Field("float", 900.0, "Seconds the escalated heavy tier may take.", min=1),
    },
    "Epilog escalation.",
)

LEAKS_SCHEMA = Section(
    {
        "gpu_memory_fraction": Field(
            "float",
            0.95,
            "A process holding more than this fraction of one GPU's memory is a leak candidate.",
            min=0,
            max=1,
        ),
        "host_memory_fraction": Field(
            "float", 0.95, "... or more than this fraction of host memory (RSS).", min=0, max=1
        ),
        "min_uid": Field(
            "int",
            1000,
            "Processes of uids below this (system users) are never touched; root never is.",
            min=1,
        ),
        "audit_log": Field("str", None, "JSON-lines audit log; null: <paths.log_dir>/kill-leaks.jsonl."),
    },
    "The cron leak killer (slurmkit kill-leaks).",
)

EFFICIENCY_SCHEMA = Section(
    {
        "enabled": Field(
            "bool", True, "Epilog: collect the job's GPU utilisation and memory from NVML accounting."
        ),
        "timeout": Field(
            "float",
            10.0,
            "Seconds the whole efficiency step may take (half of it at most for the NVML queries).",
            min=0.5,
        ),
        "admin_comment": Field(
            "bool",
            True,
            "Write the job's summary (sk1:...) into its AdminComment with sacctmgr (one node per job).",
        ),
        "merge_wait": Field(
            "float",
            5.0,
            "Multi-node jobs: seconds the first node waits for the other nodes' summaries "
            "(paths.shared_dir) before writing a partial one.",
            min=0,
        ),
        "max_comment_chars": Field(
            "int",
            16000,
            "Longer summaries are collapsed to per-node totals (no per-GPU detail).",
            min=200,
        ),
    },
    "Per-job GPU efficiency (docs/report.md, 'GPU efficiency').",
)

SITE_SCHEMA = Section(
    {
        "backend": Field(
            "str",
            "auto",
            "GPU backend: nvml (nvidia-ml-py), simulated (YAML fixture), "
            "auto (nvml when it imports and a driver answers, else GPU checks are unknown).",
            choices=("auto", "nvml", "simulated"),
        ),
        "simulated_fixture": Field(
            "str", None, "Simulated backend fixture; '{node}' becomes the node name.", check=_fixture_template
        ),
        "prolog_deadline": Field(
            "float",
            5.0,
            "Seconds the whole prolog may take (slurmd says 'Prolog hung' at 8 s).",
            min=0.5,
            max=60,
        ),
        "epilog_deadline": Field("float", 30.0, "Seconds the epilog may take, kill grace included.", min=1),
        "healthcheck_deadline": Field(
            "float", 30.0, "Seconds HealthCheckProgram may take (Slurm kills it at 60 s).", min=1, max=59
        ),
        "check_timeout": Field(
            "float", 2.0, "Default per-check timeout in the fast tier (seconds).", min=0.05
        ),
        "heavy_check_timeout": Field("float", 300.0, "Default per-check timeout in the heavy tier.", min=1),
        "fail_closed": Field(
            "bool",
            False,
            "Treat slurmkit's own faults (bug, bad config, missing library, "
            "a check that could not run) as a failure. Default: fail open (exit 0, log, "
            "metric).",
        ),
        "drain_on_fail": Field(
            "bool",
            True,
            "On a fail verdict, set the drain reason to "
            "'slurmkit:<CODE> <check>: <detail>' with scontrol (else Slurm writes "
            "'Prolog error').",
        ),
        "drain_timeout": Field("float", 3.0, "Seconds the scontrol drain call may take.", min=0.1),
        "kill_grace": Field(
            "float", 5.0, "Seconds between SIGTERM and SIGKILL for leftovers and leaks.", min=0
        ),
        "memory_release_wait": Field(
            "float",
            3.0,
            "Epilog: seconds to wait for GPU memory to come back after killing leftovers.",
            min=0,
        ),
        "clean_dev_shm": Field(
            "bool",
            True,
            "Epilog: remove the job user's /dev/shm files when no other job of that user is on the node.",
        ),
        "use_verdict_store": Field(
            "bool", True, "Prolog: report still-valid heavy verdicts from the sweep store (paths.shared_dir)."
        ),
        "checks": CHECKS_SCHEMA,
        "thresholds": THRESHOLDS_SCHEMA,
        "escalation": ESCALATION_SCHEMA,
        "leaks": LEAKS_SCHEMA,
        "efficiency": EFFICIENCY_SCHEMA,
    },
    "Node health gate: prolog, epilog, HealthCheckProgram, kill-leaks, heavy checks.",
)
