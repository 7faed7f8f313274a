"""The check catalog: every declared check, by name, in the order they run.

Each check is declared once, on its function (:func:`slurmkit.health.declare.check`): name,
tier, summary, codes, hooks and parameters. The catalog only collects the declarations of
the check modules, so importing it costs the import of those modules, which import nothing
heavy (the heavy checks import torch inside their functions, which the prolog never calls).

Where each check runs (``hooks``):

* ``prolog``: the fast tier, GPU leftovers on the job's GPUs, cached heavy verdicts;
* ``epilog``: the fast tier without ``gpu_leftover`` (the epilog kills leftovers and
  then checks memory itself) and without ``heavy_cache``;
* ``healthcheck``: the fast tier without job context (no ``gpu_leftover``);
* ``manual`` (``slurmkit health run``, ``node resume``): everything in the tier asked for.
"""

from __future__ import annotations

from slurmkit.health.checks import gpu, heavy, host
from slurmkit.health.declare import ALL_HOOKS, HEAVY_HOOKS, CheckSpec, declared
from slurmkit.verdict.base import Tier

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Dict, List, Optional

__all__ = ["ALL_HOOKS", "CATALOG", "HEAVY_HOOKS", "CheckSpec", "build_catalog", "select"]


def build_catalog(specs: List[CheckSpec]) -> Dict[str, CheckSpec]:
    """Name -> spec, refusing two declarations of one name (the second would hide the first)."""
    catalog: Dict[str, CheckSpec] = {}
    for spec in specs:
        if spec.name in catalog:
            raise ValueError(
                f"check {spec.name!r} declared twice: {catalog[spec.name].fn.__qualname__} and "
                f"{spec.fn.__module__}.{spec.fn.__qualname__}"
            )
        catalog[spec.name] = spec
    return catalog


#: fast GPU checks, fast host checks, then the heavy tier
CATALOG: Dict[str, CheckSpec] = build_catalog(declared(gpu, host, heavy))


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
