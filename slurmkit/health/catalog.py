"""The check catalog: every declared check, by name, in the order they run.

Each check is declared once, on its function (:func:`slurmkit.health.declare.check`): name,
tier, summary, codes, hooks and parameters. The catalog only collects the declarations of
the check modules, which import nothing heavy (the heavy checks import torch inside their
functions, which the prolog never calls). A job start selects only the fast tier, declared
in :data:`FAST_MODULES`; :data:`CATALOG`, every check, is built when it is first asked for,
so that the heavy tier's module (its declarations and helpers, the largest of the check
modules) is not read on every job start. A test keeps the two in agreement.

Where each check runs (``hooks``):

* ``prolog``: the fast tier, GPU leftovers on the job's GPUs, cached heavy verdicts;
* ``epilog``: the fast tier without ``gpu_leftover`` (the epilog kills leftovers and
  then checks memory itself) and without ``heavy_cache``;
* ``healthcheck``: the fast tier without job context (no ``gpu_leftover``);
* ``manual`` (``slurmkit health run``, ``node resume``): everything in the tier asked for.
"""

from __future__ import annotations

from slurmkit.health.checks import gpu, host
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


#: The modules that declare the fast tier, in the order their checks run.
FAST_MODULES = (gpu, host)
_FAST: Dict[str, CheckSpec] = build_catalog(declared(*FAST_MODULES))
CATALOG: Dict[str, CheckSpec]  # every check: set by __getattr__ on first use


def __getattr__(name: str):
    """``CATALOG``: fast GPU checks, fast host checks, then the heavy tier (built on first use)."""
    if name != "CATALOG":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from slurmkit.health.checks import heavy  # only when every check is asked for

    catalog = build_catalog(declared(*FAST_MODULES, heavy))
    globals()["CATALOG"] = catalog
    return catalog


def _every_check() -> Dict[str, CheckSpec]:
    return globals()["CATALOG"] if "CATALOG" in globals() else __getattr__("CATALOG")


def select(
    tier: Optional[Tier], hook: str, names: Optional[List[str]] = None, health_cfg: Optional[dict] = None
) -> List[CheckSpec]:
    """The checks to run: by explicit names (any tier), else the tier's checks for ``hook``,
    minus those disabled in the config."""
    from slurmkit.errors import UsageError

    if names:
        catalog = _every_check()
        unknown = [n for n in names if n not in catalog]
        if unknown:
            raise UsageError(f"unknown check(s) {', '.join(unknown)}; valid: {', '.join(catalog)}")
        specs = [catalog[n] for n in names]
    else:
        catalog = _FAST if tier == Tier.FAST else _every_check()  # a hook's fast tier: its modules only
        specs = [s for s in catalog.values() if (tier is None or s.tier == tier) and hook in s.hooks]
    if health_cfg is not None:
        specs = [s for s in specs if health_cfg["checks"].get(s.name, {}).get("enabled", True)]
    return specs
