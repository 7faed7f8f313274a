"""Thresholds per GPU model: their fields and built-in values, and which model a GPU name is.

Apart from the ``health`` section's schema (:mod:`.config`), which embeds these fields: a job
start reads the thresholds of a validated, cached config without building that schema.
"""

from __future__ import annotations

from slurmkit.core.schema import Field

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict


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

MODEL_DEFAULTS: Dict[str, Dict[str, Any]] = {
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


def model_table(health_cfg: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Effective thresholds per model: generic defaults, then built-in model values, then the site's."""
    generic = {k: f.default for k, f in MODEL_THRESHOLD_FIELDS.items()}
    user = health_cfg.get("thresholds") or {}
    out: Dict[str, Dict[str, Any]] = {}
    for model in list(MODEL_DEFAULTS) + [m for m in user if m not in MODEL_DEFAULTS]:
        entry = dict(generic)
        entry.update(MODEL_DEFAULTS.get(model, {}))
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
