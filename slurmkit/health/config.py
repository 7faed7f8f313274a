"""The ``health`` section of ``slurmkit.yaml``: backend, checks, thresholds, budgets.

Every default is chosen for an 8-GPU HGX node and a prolog that must finish well
under slurmd's 8 s "Prolog hung" notice (slurmd_common.c: max(2, MessageTimeout - 2) s): the whole
prolog gets 5 s, each check 2 s, and a site that configures nothing still gets every
fast GPU check. Thresholds live per GPU model because a healthy B100 idles at a power
an H100 would only reach under load; a GPU whose model matches no entry uses
``default``.

This module imports nothing heavy: the prolog validates only this section and
``paths``.
"""

from __future__ import annotations

from slurmkit.core.schema import Field, Section
from slurmkit.health.catalog import CATALOG

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


#: Thresholds per GPU model. Sources: power warn 680 W (H100; the article "How to Build a GPU Cluster for AI Training (No BS Guide)"),
#: memory left on an idle GPU <= 15 MiB and retired pages 10 (Meta gcm check-nvidia-smi),
#: NVLink pair floor 335 GB/s (Azure ND H200 v5 P2P gate), all_reduce busbw 90 % of
#: 460/480 GB/s (Azure H100/H200 expectations, nccl-tests' 0.9 rule), GEMM and HBM
#: floors at about 70-75 % of measured-achievable (stas00/ml-engineering, compute/accelerator).
MODEL_THRESHOLD_FIELDS: Dict[str, Field] = {
    "temperature_warn_c": Field("float", 85.0, "GPU core temperature that warns (deg C).", min=0),
    "temperature_fail_c": Field("float", 92.0, "GPU core temperature that fails (deg C).", min=0),
    "power_warn_w": Field("float", 680.0, "Power draw that warns (W).", min=0),
    "power_fail_w": Field("float", 0.0, "Power draw that fails (W); 0: never fails.", min=0),
    "ecc_uncorrected_max": Field("int", 0, "Volatile uncorrected ECC errors allowed.", min=0),
    "ecc_corrected_warn": Field("int", 50_000_000, "Volatile corrected ECC errors that warn.", min=0),
    "retired_pages_max": Field("int", 10, "Retired pages (single + double bit) before failing.", min=0),
    "leftover_memory_mib": Field("float", 15.0, "GPU memory in use that counts as a leftover (MiB).", min=0),
    "nvlink_pair_floor_gbps": Field(
        "float",
        335.0,
        "Heavy NVLink probe: a GPU pair copying below this (GB/s, one direction) fails.",
        min=0,
    ),
    "nvlink_outlier_fraction": Field(
        "float",
        0.7,
        "Heavy NVLink probe: a pair below this fraction of its row or column median fails.",
        min=0,
        max=1,
    ),
    "allreduce_busbw_gbps": Field(
        "float",
        460.0,
        "Heavy all_reduce: expected single-node busbw (GB/s); fail below min_fraction of it.",
        min=0,
    ),
    "allreduce_min_fraction": Field(
        "float", 0.9, "nccl-tests rule: busbw must reach this fraction.", min=0, max=1
    ),
    "gemm_min_tflops": Field("float", 550.0, "Heavy GEMM: per-GPU BF16 TFLOP/s floor.", min=0),
    "gemm_max_spread": Field(
        "float", 0.10, "Heavy GEMM: fail a GPU this fraction below the node's best.", min=0, max=1
    ),
    "hbm_min_gbps": Field("float", 2300.0, "Heavy HBM copy bandwidth floor (GB/s).", min=0),
}

_MODEL_DEFAULTS: Dict[str, Dict[str, Any]] = {
    "H100": {},
    "H200": {"allreduce_busbw_gbps": 480.0, "hbm_min_gbps": 3300.0},
    "B100": {
        "temperature_warn_c": 87.0,
        "power_warn_w": 680.0,
        "nvlink_pair_floor_gbps": 650.0,
        "allreduce_busbw_gbps": 700.0,
        "gemm_min_tflops": 1200.0,
        "hbm_min_gbps": 5500.0,
    },
    "A100": {
        "power_warn_w": 380.0,
        "nvlink_pair_floor_gbps": 200.0,
        "allreduce_busbw_gbps": 230.0,
        "gemm_min_tflops": 200.0,
        "hbm_min_gbps": 1300.0,
    },
    # CPU tensors: the heavy probes' own tests and GPU-less machines. Floors are token values.
    "CPU": {
        "gemm_min_tflops": 0.001,
        "hbm_min_gbps": 0.1,
        "nvlink_pair_floor_gbps": 0.0,
        "allreduce_busbw_gbps": 0.0,
    },
    "default": {},
}


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
    + ", ".join(_MODEL_DEFAULTS)
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


def model_table(health_cfg: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Effective thresholds per model: generic defaults, then built-in model values, then the site's."""
    generic = {k: f.default for k, f in MODEL_THRESHOLD_FIELDS.items()}
    user = health_cfg.get("thresholds") or {}
    out: Dict[str, Dict[str, Any]] = {}
    for model in list(_MODEL_DEFAULTS) + [m for m in user if m not in _MODEL_DEFAULTS]:
        entry = dict(generic)
        entry.update(_MODEL_DEFAULTS.get(model, {}))
        entry.update({k: v for k, v in (user.get(model) or {}).items() if v is not None})
        out[model] = entry
    return out


def match_model(models, gpu_name: str) -> str:
    """The configured model a GPU name belongs to ('NVIDIA H100 80GB HBM3' -> 'H100'), else 'default'.

    A model matches as a whole word of the name, case-insensitively, so 'H100' never
    matches 'H1000'; longer names are tried first.
    """
    upper = gpu_name.upper()
    words = upper.replace("-", " ").replace("_", " ").split()
    for model in sorted(models, key=len, reverse=True):
        if model == "default":
            continue
        if model.upper() in words or upper == model.upper():
            return model
    return "default"


def thresholds_for(health_cfg: Dict[str, Any], gpu_name: str) -> Dict[str, Any]:
    """The effective threshold block for a GPU whose (NVML) name is ``gpu_name``."""
    table = model_table(health_cfg)
    return table[match_model(table, gpu_name)]
