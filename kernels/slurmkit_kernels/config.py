"""Launch configurations (block sizes, warps, pipeline stages) for the attention kernels.

Why configs are data and not autotuned at start: autotuning when a job starts costs
minutes of cold compiles, and ranks that time candidates independently can pick
different winners, which makes a multi-rank job non-deterministic (NVIDIA/Megatron-LM
PR #6966). So each GPU model gets a JSON file in ``slurmkit_kernels/configs/``, every
rank reads the same file, and tuning is a separate, opt-in run
(``python -m slurmkit_kernels.autotune --out FILE``) that writes such a file.

File format (``configs/*.json``)::

    {
      "name": "h100",
      "match": ["H100"],                 # substrings of torch.cuda.get_device_name()
      "provenance": "how the numbers were obtained",
      "kernels": {
        "fwd":      {"default": {...}, "128": {...}, "128/float32": {...}},
        "bwd_dkdv": {...},
        "bwd_dq":   {...},
        "hopper_fwd": {...}, "hopper_bwd": {...}, "hopper_bwd_nondet": {...}   # optional
      }
    }

Each entry is ``{"BLOCK_M": int, "BLOCK_N": int, "num_warps": int, "num_stages": int}``
and is looked up as ``"<head_dim>/<dtype>/<precision>"`` (float32 only), ``"<head_dim>/<dtype>"``,
``"<dtype>/<precision>"`` (float32 only), ``"<dtype>"``, ``"<head_dim>"``, then ``"default"``.
For ``fwd`` and ``bwd_dq`` the program owns a BLOCK_M block of queries and walks keys in
BLOCK_N steps; for ``bwd_dkdv`` it owns a BLOCK_N block of keys and walks queries in
BLOCK_M steps.

The environment variable ``SLURMKIT_KERNELS_CONFIG`` names a file that replaces the
device lookup (for example the output of the autotune tool).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

KERNEL_NAMES = ("fwd", "bwd_dkdv", "bwd_dq")
# The Hopper path's kernels (``_hopper.py``): optional in a file, whose missing tables fall
# back to the shipped ``default.json`` (see :func:`hopper_entry`). For ``hopper_bwd`` and
# ``hopper_bwd_nondet`` (``deterministic=False``) the program owns BLOCK_N keys and walks
# queries in BLOCK_M steps, as ``bwd_dkdv``.
HOPPER_KERNEL_NAMES = ("hopper_fwd", "hopper_bwd", "hopper_bwd_nondet")
_ENTRY_KEYS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")
CONFIG_ENV = "SLURMKIT_KERNELS_CONFIG"


@dataclass(frozen=True)
class LaunchConfig:
    """Tile sizes and launch parameters of one kernel."""

    BLOCK_M: int
    BLOCK_N: int
    num_warps: int = 4
    num_stages: int = 2

    def __post_init__(self) -> None:
        for name in ("BLOCK_M", "BLOCK_N"):
            value = getattr(self, name)
            # tl.dot needs every dimension >= 16, and tl.arange needs powers of two.
            if not isinstance(value, int) or value < 16 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two >= 16, got {value!r}")
        if not isinstance(self.num_warps, int) or self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num_warps must be one of 1, 2, 4, 8, 16, got {self.num_warps!r}")
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            raise ValueError(f"num_stages must be a positive integer, got {self.num_stages!r}")

    def to_dict(self) -> dict[str, int]:
        return {key: getattr(self, key) for key in _ENTRY_KEYS}


@dataclass(frozen=True)
class KernelConfig:
    """A parsed config file: per kernel, a table from lookup key to :class:`LaunchConfig`."""

    name: str
    match: tuple[str, ...]
    provenance: str
    kernels: Mapping[str, Mapping[str, LaunchConfig]]

    def __post_init__(self) -> None:
        # Serialised once, here: flash_attention hands the config to its torch.library op
        # as this string, and serialising it at call time would be traced (and refused) by
        # torch.compile's Dynamo.
        object.__setattr__(self, "json", json.dumps(self.to_dict(), sort_keys=True))

    def lookup(
        self, kernel: str, head_dim: int, dtype_name: str, precision: str | None = None
    ) -> LaunchConfig:
        """Most specific entry for ``kernel`` at this head dim and dtype (e.g. ``"float16"``).

        ``precision`` (``"ieee"``/``"tf32"``, float32 only) selects ``.../<precision>`` entries:
        exact fp32 dots run on CUDA cores and need far smaller tiles than TF32 tensor-core dots.
        """
        keys = [f"{head_dim}/{dtype_name}", f"{dtype_name}", str(head_dim)]
        if precision:
            keys[1:1] = [f"{dtype_name}/{precision}"]
            keys.insert(0, f"{head_dim}/{dtype_name}/{precision}")
        table = self.kernels[kernel]
        for key in keys:
            if key in table:
                return table[key]
        return table["default"]  # parse_config guarantees it exists

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "match": list(self.match),
            "provenance": self.provenance,
            "kernels": {
                kernel: {key: entry.to_dict() for key, entry in table.items()}
                for kernel, table in self.kernels.items()
            },
        }


def parse_config(data: Mapping[str, Any], source: str = "<dict>") -> KernelConfig:
    """Validate a decoded config file; errors name the source and the valid keys."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{source}: top level must be a JSON object")
    unknown = set(data) - {"name", "match", "provenance", "kernels"}
    if unknown:
        raise ValueError(
            f"{source}: unknown key(s) {sorted(unknown)}; valid keys are name, match, provenance, kernels"
        )
    kernels_raw = data.get("kernels")
    if not isinstance(kernels_raw, Mapping):
        raise ValueError(f"{source}: 'kernels' must be an object with keys {list(KERNEL_NAMES)}")
    missing = [k for k in KERNEL_NAMES if k not in kernels_raw]
    extra = [k for k in kernels_raw if k not in KERNEL_NAMES + HOPPER_KERNEL_NAMES]
    if missing or extra:
        raise ValueError(
            f"{source}: 'kernels' must have the keys {list(KERNEL_NAMES)} and may have "
            f"{list(HOPPER_KERNEL_NAMES)} (missing {missing}, unknown {extra})"
        )
    kernels: dict[str, dict[str, LaunchConfig]] = {}
    for kernel, table in kernels_raw.items():
        if not isinstance(table, Mapping) or "default" not in table:
            raise ValueError(f"{source}: kernels.{kernel} must be an object with a 'default' entry")
        kernels[kernel] = {}
        for key, entry in table.items():
            where = f"{source}: kernels.{kernel}.{key}"
            if not isinstance(entry, Mapping) or set(entry) != set(_ENTRY_KEYS):
                raise ValueError(f"{where} must have exactly the keys {list(_ENTRY_KEYS)}")
            try:
                kernels[kernel][key] = LaunchConfig(**entry)
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from e
    match = data.get("match", [])
    if not isinstance(match, list) or not all(isinstance(m, str) for m in match):
        raise ValueError(f"{source}: 'match' must be a list of strings")
    return KernelConfig(
        name=str(data.get("name", source)),
        match=tuple(match),
        provenance=str(data.get("provenance", "")),
        kernels=kernels,
    )


def load_config(path: str | os.PathLike[str]) -> KernelConfig:
    """Read and validate a config file written by hand or by the autotune tool."""
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON: {e}") from e
    return parse_config(data, source=str(path))


def builtin_config(name: str) -> KernelConfig:
    """One of the shipped files, by stem: ``"h100"``, ``"h200"`` or ``"default"``."""
    ref = resources.files("slurmkit_kernels") / "configs" / f"{name}.json"
    if not ref.is_file():
        raise ValueError(f"no built-in config named {name!r}; available: {builtin_config_names()}")
    return parse_config(json.loads(ref.read_text(encoding="utf-8")), source=f"configs/{name}.json")


def builtin_config_names() -> list[str]:
    folder = resources.files("slurmkit_kernels") / "configs"
    return sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json"))


_cache: dict[str, KernelConfig] = {}


def config_for_device(device_name: str | None) -> KernelConfig:
    """The config every rank on this GPU model uses.

    ``SLURMKIT_KERNELS_CONFIG`` wins; otherwise the first shipped file whose ``match``
    substrings occur in ``device_name`` (``torch.cuda.get_device_name()``); otherwise
    ``default.json``. ``device_name`` is ``None`` under the CPU interpreter. Results are
    cached per process so the lookup costs nothing per call.
    """
    override = os.environ.get(CONFIG_ENV)
    cache_key = f"file:{override}" if override else f"device:{device_name}"
    if cache_key in _cache:
        return _cache[cache_key]
    if override:
        config = load_config(override)
    else:
        config = builtin_config("default")
        if device_name:
            for name in builtin_config_names():
                candidate = builtin_config(name)
                if any(m in device_name for m in candidate.match):
                    config = candidate
                    break
    _cache[cache_key] = config
    return config


def hopper_entry(config: KernelConfig, kernel: str, head_dim: int, dtype_name: str) -> LaunchConfig:
    """The Hopper path's tiles for ``kernel`` (one of :data:`HOPPER_KERNEL_NAMES`): from
    ``config``, or from the shipped ``default.json`` when the file has no such table (files
    written before the Hopper kernels had entries)."""
    if kernel not in config.kernels:
        config = builtin_config("default")
    return config.lookup(kernel, head_dim, dtype_name)
