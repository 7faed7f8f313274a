"""The check catalog: every check's name, tier, what it needs, and where its code lives.

The catalog is metadata only, so ``slurmkit health list`` and the prolog import it
for free; a check's module is imported when the check runs (the heavy ones import
torch, which the prolog never loads).

Where each check runs (``hooks``):

* ``prolog``: the fast tier, GPU leftovers on the job's GPUs, cached heavy verdicts;
* ``epilog``: the fast tier without ``gpu_leftover`` (the epilog kills leftovers and
  then checks memory itself) and without ``heavy_cache``;
* ``healthcheck``: the fast tier without job context (no ``gpu_leftover``);
* ``manual`` (``slurmkit health run``, ``node resume``): everything in the tier asked for.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, List, Optional

from slurmkit.health.base import Tier

ALL_HOOKS = frozenset({"prolog", "epilog", "healthcheck", "manual"})
#: heavy checks run only when asked for: sweeps and escalating epilogs call them as "manual"
HEAVY_HOOKS = frozenset({"manual"})


@dataclass(frozen=True)
class CheckSpec:
    name: str
    tier: Tier
    target: str  # "module:function"
    summary: str
    gpu: bool = True  # needs the GPU backend
    hooks: FrozenSet[str] = ALL_HOOKS
    codes: str = ""  # the codes it can return, for the docs and `health list`
    #: reads shared storage: a timeout means the store did not answer (UNKNOWN, fail open),
    #: not that this node is broken
    remote: bool = False

    def function(self) -> Callable:
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)


_G = "slurmkit.health.checks.gpu:"
_H = "slurmkit.health.checks.host:"
_HV = "slurmkit.health.heavy:"

CATALOG: Dict[str, CheckSpec] = {
    s.name: s
    for s in [
        CheckSpec(
            "gpu_count",
            Tier.FAST,
            _G + "check_gpu_count",
            "GPU count against the node's gres and the job's SLURM_JOB_GPUS (host numbering).",
            codes="GPU_COUNT_LOW, GPU_COUNT_HIGH, GPU_JOB_MISSING",
        ),
        CheckSpec(
            "gpu_ecc",
            Tier.FAST,
            _G + "check_gpu_ecc",
            "Volatile uncorrected ECC errors fail; many corrected ones warn.",
            codes="GPU_ECC_UNCORRECTED, GPU_ECC_CORRECTED",
        ),
        CheckSpec(
            "gpu_memory_errors",
            Tier.FAST,
            _G + "check_gpu_memory_errors",
            "Retired pages over the limit, pending retirement, pending or failed row remaps.",
            codes="GPU_RETIRED_PAGES, GPU_RETIREMENT_PENDING, GPU_ROW_REMAP_PENDING, GPU_ROW_REMAP_FAILED",
        ),
        CheckSpec(
            "gpu_temperature",
            Tier.FAST,
            _G + "check_gpu_temperature",
            "GPU temperature against the model's warn/fail thresholds.",
            codes="GPU_TEMPERATURE",
        ),
        CheckSpec(
            "gpu_power",
            Tier.FAST,
            _G + "check_gpu_power",
            "Power draw: warn at the model's power_warn_w (680 W on H100).",
            codes="GPU_POWER",
        ),
        CheckSpec(
            "gpu_persistence",
            Tier.FAST,
            _G + "check_gpu_persistence",
            "Persistence mode on (off: warn, or fail per config).",
            codes="GPU_PERSISTENCE_OFF",
        ),
        CheckSpec(
            "gpu_throttle",
            Tier.FAST,
            _G + "check_gpu_throttle",
            "Clock-throttle reasons other than the ignored ones warn.",
            codes="GPU_THROTTLE",
        ),
        CheckSpec(
            "nvlink_state",
            Tier.FAST,
            _G + "check_nvlink_state",
            "Every NVLink link active; an inactive link fails.",
            codes="NVLINK_DOWN",
        ),
        CheckSpec(
            "gpu_leftover",
            Tier.FAST,
            _G + "check_gpu_leftover",
            "No compute process and < leftover_memory_mib used on the GPUs handed to the job.",
            hooks=frozenset({"prolog", "manual"}),
            codes="GPU_LEFTOVER_PROCESS, GPU_LEFTOVER_MEMORY",
        ),
        CheckSpec(
            "xid",
            Tier.FAST,
            _G + "check_xid",
            "New Xid events since the node's cursor, judged by the versioned Xid->action table.",
            codes="XID_<n>",
        ),
        CheckSpec(
            "disk_space",
            Tier.FAST,
            _H + "check_disk_space",
            "Free space and inodes on configured paths.",
            gpu=False,
            codes="DISK_PATH_MISSING, DISK_FREE_LOW, DISK_INODES_LOW",
        ),
        CheckSpec(
            "memory_available",
            Tier.FAST,
            _H + "check_memory_available",
            "MemAvailable above the floor.",
            gpu=False,
            codes="MEMORY_LOW",
        ),
        CheckSpec(
            "mounts",
            Tier.FAST,
            _H + "check_mounts",
            "Required mounts present and writable.",
            gpu=False,
            codes="MOUNT_MISSING, MOUNT_READONLY, MOUNT_NOT_WRITABLE",
        ),
        CheckSpec(
            "infiniband",
            Tier.FAST,
            _H + "check_infiniband",
            "InfiniBand ports ACTIVE at the expected rate (sysfs).",
            gpu=False,
            codes="IB_PORT_DOWN, IB_RATE_LOW, IB_TOO_FEW_PORTS",
        ),
        CheckSpec(
            "services",
            Tier.FAST,
            _H + "check_services",
            "Required services running (process check, e.g. nv-fabricmanager).",
            gpu=False,
            codes="SERVICE_DOWN",
        ),
        CheckSpec(
            "heavy_cache",
            Tier.FAST,
            _H + "check_heavy_cache",
            "Still-valid heavy verdicts from the sweep store, reported not re-run; a valid FAIL fails.",
            gpu=False,
            hooks=frozenset({"prolog", "manual"}),
            codes="<the stored code>, STORE_UNREACHABLE, STORE_UNREADABLE",
            remote=True,
        ),
        CheckSpec(
            "nvlink_bandwidth",
            Tier.HEAVY,
            _HV + "check_nvlink_bandwidth",
            "GPU-to-GPU copy bandwidth for every pair (N x N); a pair below the floor or far "
            "below its row/column median fails.",
            codes="NVLINK_BW_FLOOR, NVLINK_BW_OUTLIER",
            hooks=HEAVY_HOOKS,
        ),
        CheckSpec(
            "allreduce_busbw",
            Tier.HEAVY,
            _HV + "check_allreduce_busbw",
            "Single-node all_reduce busbw (nccl-tests formula) against 90 % of expected.",
            codes="ALLREDUCE_BUSBW_LOW, ALLREDUCE_WRONG",
            hooks=HEAVY_HOOKS,
        ),
        CheckSpec(
            "gemm_tflops",
            Tier.HEAVY,
            _HV + "check_gemm_tflops",
            "Per-GPU GEMM TFLOP/s against a floor and the node's best GPU.",
            codes="GEMM_TFLOPS_LOW, GEMM_TFLOPS_SPREAD",
            hooks=HEAVY_HOOKS,
        ),
        CheckSpec(
            "hbm_bandwidth",
            Tier.HEAVY,
            _HV + "check_hbm_bandwidth",
            "Per-GPU device-memory copy bandwidth against a floor.",
            codes="HBM_BW_LOW",
            hooks=HEAVY_HOOKS,
        ),
    ]
}


def select(
    tier: Optional[Tier], hook: str, names: Optional[List[str]] = None, health_cfg: Optional[dict] = None
) -> List[CheckSpec]:
    """The checks to run: by explicit names (any tier), else the tier's checks for ``hook``,
    minus those disabled in the config."""
    from slurmkit.errors import UsageError

    if names:
        unknown = [n for n in names if n not in CATALOG]
        if unknown:
            raise UsageError(f"unknown check(s) {', '.join(unknown)}; valid: {', '.join(CATALOG)}")
        specs = [CATALOG[n] for n in names]
    else:
        specs = [s for s in CATALOG.values() if (tier is None or s.tier == tier) and hook in s.hooks]
    if health_cfg is not None:
        specs = [s for s in specs if health_cfg["checks"].get(s.name, {}).get("enabled", True)]
    return specs
