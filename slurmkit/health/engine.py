"""Run a list of checks under per-check and overall deadlines; summarise the verdict.

The checks run one after another in a probe thread, each under its own deadline
(:func:`~slurmkit.health.deadline.call_each_with_deadline`). A check past its deadline is
abandoned with its thread and is a FAIL whose reason names the check (UNKNOWN for shared
storage); the checks after it go on in a new thread. After a GPU probe hangs,
the remaining GPU checks are not started (each would hang on the same driver lock);
they read UNKNOWN "not run". Checks that raise are classified:

* :class:`BackendError` marked ``hardware`` (GPU_IS_LOST ...) -> FAIL;
* :class:`BackendError` otherwise, or any other exception (a slurmkit bug, a bad
  config) -> UNKNOWN, flagged ``internal`` so the gate can fail open and raise a metric.
"""

from __future__ import annotations

import os
import time

from slurmkit.health.backends import BackendError, BackendUnavailable
from slurmkit.health.catalog import CheckSpec, select
from slurmkit.health.deadline import call_each_with_deadline
from slurmkit.health.thresholds import thresholds_for
from slurmkit.slurm.jobenv import JobEnv, this_node
from slurmkit.values import Value
from slurmkit.verdict.base import Action, CheckResult, Status, Tier

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Sequence, Tuple

    from slurmkit.health.backends import GpuBackend


def parse_gpu_list(text: Optional[str]) -> Optional[List[int]]:
    """``"0,1,5"`` -> ``[0, 1, 5]``; ranges ``"0-3"`` too; ``None``, empty or no number
    (``NoDevFiles``, ``(null)``) -> ``None``.

    Slurm writes ``SLURM_JOB_GPUS`` as a comma list of host indices; some versions
    compress runs as ranges. Tokens that are not numbers are ignored rather than
    failing the hook.
    """
    if text is None:
        return None
    out: List[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            out.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
        except ValueError:
            continue
    return out or None


def _digits(value: Optional[str]) -> Optional[str]:
    """A plain non-negative integer as text (an array job or task id), else ``None``."""
    value = (value or "").strip()
    return value if value.isdigit() and len(value) <= 20 else None


class Context(Value):
    """Everything a check may look at. Built once per run by the gate or the CLI."""

    health: Dict[str, Any]  # validated `health` section
    paths: Dict[str, Any]  # validated `paths` section
    node: str
    hook: str  # prolog | epilog | healthcheck | manual
    env: Dict[str, str]
    job: JobEnv  # Slurm's part of env, read once (slurm.jobenv)
    job_id: Optional[str]
    job_uid: Optional[int]
    job_user: Optional[str]
    job_gpus: Optional[List[int]]  # host numbering; None = not a job context
    # where the release puts them in the hook's environment (Slurm 22.05's epilog has
    # neither the start time nor the array ids; the efficiency step asks scontrol then)
    job_start: Optional[float]  # SLURM_JOB_START_TIME, epoch seconds
    array_job_id: Optional[str]  # SLURM_ARRAY_JOB_ID
    array_task_id: Optional[str]  # SLURM_ARRAY_TASK_ID
    restart_count: int  # SLURM_JOB_RESTART_COUNT: which attempt of a requeued job
    advance_xid_cursor: bool  # hooks consume Xid events; manual runs only peek
    backend_override: Optional[GpuBackend]
    _backend: Any
    _backend_error: Optional[BackendError]
    backend_hung_in: Optional[str]
    xid_events_seen: List[Dict[str, Any]]

    def __init__(
        self,
        health: Dict[str, Any],
        paths: Dict[str, Any],
        node: str,
        hook: str = "manual",
        env: Optional[Dict[str, str]] = None,
        job: Optional[JobEnv] = None,
        job_id: Optional[str] = None,
        job_uid: Optional[int] = None,
        job_user: Optional[str] = None,
        job_gpus: Optional[List[int]] = None,
        job_start: Optional[float] = None,
        array_job_id: Optional[str] = None,
        array_task_id: Optional[str] = None,
        restart_count: int = 0,
        advance_xid_cursor: bool = False,
        backend_override: Optional[GpuBackend] = None,
        _backend: Any = None,
        _backend_error: Optional[BackendError] = None,
        backend_hung_in: Optional[str] = None,
        xid_events_seen: Optional[List[Dict[str, Any]]] = None,
    ) -> None:
        self.health = health
        self.paths = paths
        self.node = node
        self.hook = hook
        self.env = dict(os.environ) if env is None else env
        self.job = JobEnv() if job is None else job
        self.job_id = job_id
        self.job_uid = job_uid
        self.job_user = job_user
        self.job_gpus = job_gpus
        self.job_start = job_start
        self.array_job_id = array_job_id
        self.array_task_id = array_task_id
        self.restart_count = restart_count
        self.advance_xid_cursor = advance_xid_cursor
        self.backend_override = backend_override
        self._backend = _backend
        self._backend_error = _backend_error
        self.backend_hung_in = backend_hung_in
        self.xid_events_seen = [] if xid_events_seen is None else xid_events_seen
        self._thresholds: Dict[str, Dict[str, Any]] = {}  # not a field: thresholds() remembers here

    @classmethod
    def from_env(
        cls,
        health: Dict[str, Any],
        paths: Dict[str, Any],
        hook: str,
        env: Optional[Dict[str, str]] = None,
        node: Optional[str] = None,
    ) -> "Context":
        env = dict(os.environ if env is None else env)
        job = JobEnv.from_env(env)
        gpus = job.job_gpus
        if gpus is None and hook in ("prolog", "epilog") and job.job_id:
            gpus = env.get("CUDA_VISIBLE_DEVICES") or env.get("GPU_DEVICE_ORDINAL") or ""
        return cls(
            health=health,
            paths=paths,
            node=node or this_node(env),
            hook=hook,
            env=env,
            job=job,
            job_id=job.job_id,
            job_uid=job.job_uid,
            job_user=job.job_user,
            job_gpus=parse_gpu_list(gpus),
            # 0 is Slurm's "unset" start; array ids are numbers or nothing
            job_start=job.start_time if job.start_time and job.start_time > 0 else None,
            array_job_id=_digits(job.array_job_id),
            array_task_id=_digits(job.array_task_id),
            restart_count=job.restart_count or 0,
            advance_xid_cursor=hook in ("prolog", "epilog", "healthcheck"),
        )

    # ------------------------------------------------------------------ backend

    def backend(self) -> GpuBackend:
        """The GPU backend, opened on first use (inside the first GPU check's deadline)."""
        if self.backend_override is not None:
            return self.backend_override
        if self._backend_error is not None:
            raise self._backend_error
        if self._backend is None:
            from slurmkit.health.backends import open_backend

            try:
                self._backend = open_backend(self.health, self.node)
            except BackendError as exc:
                self._backend_error = exc
                raise
        return self._backend

    def close(self) -> None:
        if self._backend is not None and not self.backend_hung_in:  # a hung driver would hang shutdown too
            try:
                self._backend.close()
            except Exception:
                pass

    def params(self, check: str) -> Dict[str, Any]:
        return self.health["checks"].get(check, {})

    def thresholds(self, gpu_name: str) -> Dict[str, Any]:
        """The threshold block for a GPU of this (NVML) name: the checks read it here rather than
        from the config module, which is built from their declarations."""
        found = self._thresholds.get(gpu_name)
        if found is None:  # once per GPU name and run: every GPU check asks for every GPU
            found = self._thresholds[gpu_name] = thresholds_for(self.health, gpu_name)
        return found


def check_timeout(ctx: Context, spec: CheckSpec) -> float:
    """The check's ``timeout`` when set; for one reading shared storage, its ``store_timeout``;
    else the tier's default."""
    params = ctx.params(spec.name)
    own = params.get("timeout") or (params.get("store_timeout") if spec.remote else None)
    if own:
        return float(own)
    return float(
        ctx.health["heavy_check_timeout"] if spec.tier == Tier.HEAVY else ctx.health["check_timeout"]
    )


def _not_run(ctx: Context, spec: CheckSpec, deadline: Optional[float]) -> Optional[CheckResult]:
    """Why ``spec`` is not started at all, as its result, or ``None``: the run's time budget
    is spent, or the GPU backend already hung (each GPU check would hang on the same driver lock)."""
    if deadline is not None and deadline - time.monotonic() <= 0.01:
        return CheckResult(
            spec.name,
            Status.UNKNOWN,
            "BUDGET_EXHAUSTED",
            f"not run: the {ctx.hook} time budget was spent",
            details={"skipped": True},
        )
    if spec.gpu and ctx.backend_hung_in:
        return CheckResult(
            spec.name,
            Status.UNKNOWN,
            "NOT_RUN",
            f"not run: the GPU backend hung in {ctx.backend_hung_in}",
            details={"skipped": True},
        )
    return None


def _call(ctx: Context, spec: CheckSpec) -> CheckResult:
    """Run ``spec``'s function in this (the probe) thread; classify what it raised. Its
    deadline is the caller's (:func:`run_checks`)."""
    start = time.monotonic()
    try:
        fn = spec.function()
        result = fn(ctx, ctx.params(spec.name))
        if not isinstance(result, CheckResult):
            raise TypeError(f"check {spec.name} returned {type(result).__name__}, not CheckResult")
    except BackendUnavailable as exc:
        result = CheckResult(
            spec.name,
            Status.FAIL if exc.hardware else Status.UNKNOWN,
            exc.code,
            str(exc),
            Action.REBOOT if exc.hardware else Action.NONE,
            details={"internal": not exc.hardware},
        )
    except BackendError as exc:
        result = CheckResult(
            spec.name,
            Status.FAIL if exc.hardware else Status.UNKNOWN,
            exc.code,
            str(exc),
            Action.RESET if exc.hardware else Action.NONE,
            details={"internal": not exc.hardware, "gpu": exc.gpu},
        )
    except Exception as exc:  # a slurmkit bug or a bad config: never a node fault
        import logging  # a check that raised is the rare path: the prolog does not import logging

        logging.getLogger("slurmkit.health").debug("check %s raised", spec.name, exc_info=True)
        code = "CONFIG_ERROR" if exc.__class__.__name__ == "ConfigError" else "INTERNAL_ERROR"
        result = CheckResult(
            spec.name, Status.UNKNOWN, code, f"{type(exc).__name__}: {exc}", details={"internal": True}
        )
    result.seconds = round(time.monotonic() - start, 4)
    return result


def _timed_out(ctx: Context, spec: CheckSpec, timeout: float, seconds: float) -> CheckResult:
    """The result of a check abandoned at its deadline (the caller's thread)."""
    if spec.gpu:
        ctx.backend_hung_in = spec.name
    if spec.remote:  # shared storage that does not answer is not a node fault
        result = CheckResult(
            spec.name,
            Status.UNKNOWN,
            "STORE_UNREACHABLE",
            f"{spec.name}: shared storage did not answer within {timeout:.2f}s (failing open)",
            details={"internal": True},
        )
    else:
        result = CheckResult(
            spec.name,
            Status.FAIL,
            "CHECK_TIMEOUT",
            f"{spec.name} did not finish within {timeout:.2f}s (hung probe)",
            Action.REBOOT if spec.gpu else Action.ISOLATE,
        )
    result.seconds = round(seconds, 4)
    return result


def run_checks(
    ctx: Context,
    specs: List[CheckSpec],
    deadline: Optional[float] = None,
    timeout: Optional[float] = None,
) -> List[CheckResult]:
    """Run ``specs`` in order, in one probe thread (:func:`call_each_with_deadline`); never raises
    for a check's sake. Each check gets its own timeout (``timeout`` when given, else its
    configured one); ``deadline`` (``time.monotonic()`` value) bounds the whole run: a check
    never gets more than what is left, and checks not started in time read UNKNOWN."""
    results: List[Optional[CheckResult]] = []
    running: List[Tuple[CheckSpec, float, int]] = []  # per call: its spec, timeout, place in results

    def calls():
        for spec in specs:
            skipped = _not_run(ctx, spec, deadline)
            if skipped is not None:
                results.append(skipped)
                continue
            own = check_timeout(ctx, spec) if timeout is None else timeout
            if deadline is not None:
                own = min(own, deadline - time.monotonic())
            running.append((spec, own, len(results)))
            results.append(None)
            yield (lambda spec=spec: _call(ctx, spec)), own

    def on_timeout(index: int) -> None:  # before the next check is drawn: it sees a hung backend
        spec, own, place = running[index]
        results[place] = _timed_out(ctx, spec, own, own)

    outcomes = call_each_with_deadline(calls(), on_timeout)
    for (_, _, place), (kind, value, seconds) in zip(running, outcomes):
        if kind == "value":
            results[place] = value
        elif kind == "error":  # not an Exception (those are results): KeyboardInterrupt, SystemExit
            raise value
        else:
            results[place].seconds = round(seconds, 4)
    return results  # type: ignore[return-value]  # every place is filled


def run_one(ctx: Context, spec: CheckSpec, timeout: float) -> CheckResult:
    """Run one check under ``timeout``; never raises for the check's sake."""
    return run_checks(ctx, [spec], timeout=timeout)[0]


def run_selected(
    health: Dict[str, Any],
    paths: Dict[str, Any],
    *,
    tier: Optional[Tier] = None,
    names: Optional[List[str]] = None,
    node: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
    deadline: Optional[float] = None,
    skip: Sequence[str] = (),
    only_enabled: bool = True,
    advance_xid_cursor: Optional[bool] = None,
) -> List[CheckResult]:
    """Run checks on ``node`` outside a Slurm hook: the one entry point for
    ``slurmkit health run``, the sweep's heavy pass and a resume's re-check.

    Opens a ``manual`` context, selects ``names`` (any tier) or the ``tier``'s checks,
    keeps only enabled ones unless ``only_enabled`` is false (a check named on the command
    line runs even when disabled), drops ``skip``, runs them under ``deadline``
    (``time.monotonic()`` value) and closes the context (the GPU backend) whatever happens.
    ``advance_xid_cursor`` overrides the context's default (a manual run only looks).
    """
    ctx = Context.from_env(health, paths, "manual", env=env, node=node)
    if advance_xid_cursor is not None:
        ctx.advance_xid_cursor = advance_xid_cursor
    try:
        specs = select(tier, "manual", names, health if only_enabled else None)
        specs = [s for s in specs if s.name not in skip]
        return run_checks(ctx, specs, deadline)
    finally:
        ctx.close()


def internal_problems(results: List[CheckResult]) -> List[CheckResult]:
    return [r for r in results if r.status == Status.UNKNOWN and r.details.get("internal")]
