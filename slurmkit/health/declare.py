"""How a health check is declared: one decorator on the check function.

A check used to be described three times: an entry in the catalog (name, tier, hooks,
codes), a block in the ``health.checks`` config schema (its parameters), and the
function. They drifted apart silently (a parameter documented but never read, a check in
the catalog with no switch). Now the function carries all of it, as NHC keeps one
function per check::

    @check(
        "memory_available",
        Tier.FAST,
        "MemAvailable above the floor.",
        codes="MEMORY_LOW",
        gpu=False,
        params={"min_available_gb": Field("float", 1.0, "MemAvailable floor (GB).", min=0)},
    )
    def check_memory_available(ctx, params) -> CheckResult: ...

:mod:`slurmkit.health.catalog` collects the declarations and
:mod:`slurmkit.health.config` builds ``health.checks.<name>`` from ``params`` (plus the
``enabled`` and ``timeout`` keys every check has). This module imports nothing but the
verdict vocabulary and :mod:`slurmkit.core.values` at run time (the schema only for type
checking), so the check modules can use it without a cycle.
"""

from __future__ import annotations

from slurmkit.values import FrozenValue
from slurmkit.verdict.base import Tier

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Callable, Dict, FrozenSet, List, Mapping, Optional

    from slurmkit.core.schema import Field
    from slurmkit.verdict.base import CheckResult

    CheckFunction = Callable[..., CheckResult]  # (ctx, params) -> CheckResult

ALL_HOOKS = frozenset({"prolog", "epilog", "healthcheck", "manual"})
#: heavy checks run only when asked for: sweeps and escalating epilogs call them as "manual"
HEAVY_HOOKS = frozenset({"manual"})


class CheckSpec(FrozenValue):
    """One check: what ``health list`` shows, where it runs, its parameters and its code.
    Two specs are equal (and hash alike) when all but their ``params`` are."""

    name: str
    tier: Tier
    fn: CheckFunction
    summary: str
    gpu: bool  # needs the GPU backend
    hooks: FrozenSet[str]
    codes: str  # the codes it can return, for the docs and `health list`
    #: reads shared storage: a timeout means the store did not answer (UNKNOWN, fail open),
    #: not that this node is broken; its ``store_timeout`` parameter, when it has one, is its
    #: default timeout (a store gets a shorter wait than a check of the node itself)
    remote: bool
    #: the check's own keys under ``health.checks.<name>`` (``enabled``/``timeout`` are added for all)
    params: Mapping[str, Field]

    def __init__(
        self,
        name: str,
        tier: Tier,
        fn: CheckFunction,
        summary: str,
        gpu: bool = True,
        hooks: FrozenSet[str] = ALL_HOOKS,
        codes: str = "",
        remote: bool = False,
        params: Optional[Mapping[str, Field]] = None,
    ) -> None:
        self._set(
            name=name,
            tier=tier,
            fn=fn,
            summary=summary,
            gpu=gpu,
            hooks=hooks,
            codes=codes,
            remote=remote,
            params={} if params is None else params,
        )

    def _values(self) -> tuple:
        return tuple(getattr(self, f) for f in self._fields if f != "params")

    def function(self) -> CheckFunction:
        return self.fn


def check(
    name: str,
    tier: Tier,
    summary: str,
    *,
    codes: str = "",
    gpu: bool = True,
    hooks: FrozenSet[str] = ALL_HOOKS,
    remote: bool = False,
    params: Optional[Dict[str, Field]] = None,
) -> Callable[[CheckFunction], CheckFunction]:
    """Declare the decorated ``(ctx, params) -> CheckResult`` function as the check ``name``."""

    def declare(fn: CheckFunction) -> CheckFunction:
        fn.check_spec = CheckSpec(  # type: ignore[attr-defined]
            name,
            tier,
            fn,
            summary,
            gpu=gpu,
            hooks=frozenset(hooks),
            codes=codes,
            remote=remote,
            params=dict(params or {}),
        )
        return fn

    return declare


def declared(*modules: ModuleType) -> List[CheckSpec]:
    """The checks declared in ``modules``, in module order and then definition order."""
    specs: List[CheckSpec] = []
    for module in modules:
        for obj in vars(module).values():
            spec = getattr(obj, "check_spec", None)
            if isinstance(spec, CheckSpec) and spec.fn is obj and obj.__module__ == module.__name__:
                specs.append(spec)
    return specs
