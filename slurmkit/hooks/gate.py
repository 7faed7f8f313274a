"""The hook programs: Prolog, Epilog and HealthCheckProgram, as functions returning an exit code.

The hook scripts (``slurmkit-prolog`` ..., the files in ``prolog/`` and ``epilog/``, installed
by the wheel or copied) all call :func:`main` through ``slurmkit.hooks.run``. What a
hook may do is dictated by Slurm (https://slurm.schedmd.com/prolog_epilog.html): a non-zero Prolog
exit drains the node and requeues+holds the job; a non-zero Epilog exit drains the
node; HealthCheckProgram's exit status is ignored, it must drain by itself.

Policy, in order:

1. **Bounded.** Everything runs under the hook's deadline (prolog 5 s by default);
   each check has its own; a watchdog thread ends the process if slurmkit itself ever
   overruns by more than a second: with the decided exit code once there is a verdict,
   failing open only before one.
2. **Fail open on our own faults.** A bad config, a bug, a missing library or a check
   that could not run is logged, counted in a metric and exits 0, unless
   ``health.fail_closed``.
3. **On a fail verdict** the hook sets the drain reason itself,
   ``slurmkit:<CODE> <check>: <detail>``, with a bounded ``scontrol update``
   (:func:`slurmkit.slurm.drain.guarded_drain`: an admin's drain is never overwritten), records the
   verdict (JSON lines + Prometheus textfile) and exits 1.
4. **A decided verdict is the exit code.** The verdict is decided first; the drain,
   the record and the metrics come after it, each best effort and bounded (a full or
   slow disk, a held lock, EACCES are logged, never turned into a pass).
"""

from __future__ import annotations

import os
import sys
import time

from slurmkit.chars import shown
from slurmkit.core import trust
from slurmkit.health.deadline import Timer
from slurmkit.slurm import binaries
from slurmkit.slurm.drain import guarded_drain
from slurmkit.slurm.jobenv import JobEnv, this_node
from slurmkit.verdict.base import Action, CheckResult, Status, Tier

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_DEADLINES = {"prolog": 5.0, "epilog": 30.0, "healthcheck": 30.0}
HOOK_EXIT_FAIL = 1
#: Seconds the record and the metrics may take after the verdict at least (they are best
#: effort; a hook gives them what is left of its budget when that is more).
RECORD_TIMEOUT = 1.0

#: The exit code once the verdict is decided; the watchdog exits with it, not with 0.
_decided: Optional[int] = None


def _say(message: str) -> None:
    """One line in slurmd's log. A path or an exception's text can hold a newline or a terminal
    escape (a file name a user chose): shown, so no line of the log can be forged."""
    try:
        sys.stderr.write(f"slurmkit-{shown(message)}\n")
        sys.stderr.flush()
    except Exception:
        pass


def _load() -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
    """The config's health, paths and slurm sections (the same for every hook)."""
    from slurmkit.config import load_hook_sections

    sections = load_hook_sections()  # from the root-only cache while the config is unchanged
    return sections["health"], sections["paths"], sections["slurm"]


def _default_paths() -> Dict[str, Any]:
    from slurmkit.config import PATHS_SCHEMA
    from slurmkit.core.schema import defaults

    return defaults(PATHS_SCHEMA)


def _start_watchdog(seconds: float, hook: str, fail_closed: bool) -> None:
    """Last resort: if slurmkit itself overruns its budget, end the process. Stuck probe
    threads cannot hold it open (``os._exit``)."""

    def fire() -> None:
        decided = _decided
        if decided is not None:
            _say(f"{hook}: internal watchdog fired after {seconds:.1f}s; exiting {decided} as decided")
            os._exit(decided)
        _say(
            f"{hook}: internal watchdog fired after {seconds:.1f}s; "
            + ("failing (fail_closed)" if fail_closed else "failing open")
        )
        os._exit(HOOK_EXIT_FAIL if fail_closed else 0)

    Timer(seconds, fire).start()


def _record(
    hook: str,
    ctx,
    paths: Dict[str, Any],
    status: Status,
    results: List[CheckResult],
    seconds: float,
    exit_code: int,
    drain_reason: Optional[str],
    internal: List[str],
    extra: Optional[Dict[str, Any]] = None,
) -> None:
    from slurmkit.verdict import record

    node = ctx.node if ctx else this_node()
    job = ctx.job_id if ctx else JobEnv.from_env().job_id
    untrusted = list(trust.REJECTED)
    if untrusted:
        extra = dict(extra or {}, untrusted_files=[f"{p}: {why}" for p, why in untrusted[:20]])
        for p, why in untrusted[:5]:
            _say(f"{hook}: ignored untrusted {p}: {why}")
    try:
        record.append_jsonl(
            os.path.join(paths["log_dir"], record.HEALTH_LOG),
            record.verdict_record(
                node,
                hook,
                status,
                results,
                job_id=job,
                seconds=seconds,
                exit_code=exit_code,
                drain_reason=drain_reason,
                internal=internal,
                extra=extra,
            ),
        )
    except Exception as exc:
        _say(f"{hook}: cannot write the health log under {paths.get('log_dir')}: {exc}")
    try:
        record.write_verdict_metrics(
            paths["metrics_dir"], node, hook, status, results, seconds, bool(internal), len(untrusted)
        )
    except Exception as exc:
        _say(f"{hook}: cannot write metrics under {paths.get('metrics_dir')}: {exc}")


def _record_bounded(hook: str, seconds: float, *args) -> None:
    """:func:`_record` in a worker thread: a stuck disk cannot hold the decided exit code."""
    from slurmkit.health.deadline import ProbeTimeout, call_with_deadline

    try:
        call_with_deadline(lambda: _record(hook, *args), seconds, "record")
    except ProbeTimeout:
        _say(f"{hook}: recording the verdict took over {seconds:.1f}s; abandoned")
    except Exception as exc:
        _say(f"{hook}: cannot record the verdict: {exc}")


def run_hook(hook: str, env: Optional[Dict[str, str]] = None) -> int:
    """Run the ``prolog``, ``epilog`` or ``healthcheck`` hook; return its exit code."""
    global _decided
    _decided = None
    trust.REJECTED.clear()
    t0 = time.monotonic()
    if not os.environ.get("PATH"):
        os.environ["PATH"] = DEFAULT_PATH  # Slurm runs hooks with no PATH at all
    env = dict(os.environ if env is None else env)
    ctx = None
    paths: Dict[str, Any] = {}
    try:
        health, paths, slurm = _load()
    except Exception as exc:  # a bad config must not drain the fleet
        try:
            paths = _default_paths()
        except Exception:
            paths = {"log_dir": "/var/log/slurmkit", "metrics_dir": "/var/lib/prometheus/node-exporter"}
        problem = CheckResult("config", Status.UNKNOWN, "CONFIG_ERROR", str(exc), details={"internal": True})
        _say(f"{hook}: config error, failing open: {exc}")
        _record_bounded(
            hook,
            RECORD_TIMEOUT,
            None,
            paths,
            Status.UNKNOWN,
            [problem],
            time.monotonic() - t0,
            0,
            None,
            [str(exc)],
        )
        return 0
    budget = float(health.get(f"{hook}_deadline", DEFAULT_DEADLINES.get(hook, 5.0)))
    deadline = t0 + budget
    watchdog = budget + 1.0
    if hook == "epilog" and health["escalation"]["action"] == "heavy":
        watchdog += float(health["escalation"]["heavy_deadline"])
    _start_watchdog(watchdog, hook, health["fail_closed"])
    # slurm.binaries, not the client: the happy path runs no Slurm command
    binaries.configure(slurm.get("bin_dir"), slurm.get("timeout"))
    try:
        from slurmkit.health.catalog import select
        from slurmkit.health.engine import Context, internal_problems, run_checks
        from slurmkit.verdict.base import first_failure, worst

        ctx = Context.from_env(health, paths, hook, env)
        extra: Dict[str, Any] = {}
        results: List[CheckResult] = []
        # keep time for the verdict: the drain call and the record
        reserve = min(float(health["drain_timeout"]), budget * 0.3) + 0.1
        if hook == "epilog":
            from slurmkit.hooks.epilog import cleanup

            results.extend(cleanup(ctx, deadline - reserve, extra))
            from slurmkit.hooks.efficiency import epilog_step

            epilog_step(ctx, deadline - reserve, extra)  # bounded; records, never fails the job
        results.extend(run_checks(ctx, select(Tier.FAST, hook, health_cfg=health), deadline - reserve))
        if hook == "epilog":
            from slurmkit.hooks.epilog import escalate

            results.extend(escalate(ctx, results, extra))
        status = worst(results)
        fail = first_failure(results)
        internal = [f"{r.check}: {r.reason}" for r in internal_problems(results)]
        if fail is None and internal and health["fail_closed"]:
            bad = internal_problems(results)[0]
            fail = CheckResult(bad.check, Status.FAIL, bad.code, bad.reason, Action.ISOLATE)
        exit_code = 0
        drain_reason = None
        if hook == "healthcheck":
            exit_code = status.exit_code if status != Status.UNKNOWN or health["fail_closed"] else 0
        if fail is not None:
            exit_code = HOOK_EXIT_FAIL if hook != "healthcheck" else exit_code
            drain_reason = fail.drain_reason()
        _decided = exit_code  # from here on nothing may change it
        if fail is not None:
            _say(f"{hook}: {ctx.node}: FAIL {drain_reason}")
            if health["drain_on_fail"] and not extra.get("reboot_requested"):
                left = max(0.3, min(float(health["drain_timeout"]), deadline - time.monotonic() - 0.05))
                ok, note = guarded_drain(ctx.node, drain_reason, left)
                extra["drain"] = note
        elif internal:
            _say(f"{hook}: {ctx.node}: failing open on slurmkit fault(s): {'; '.join(internal)[:300]}")
        _record_bounded(  # what is left of the budget, at least RECORD_TIMEOUT (the watchdog bounds both)
            hook,
            max(RECORD_TIMEOUT, deadline - time.monotonic()),
            ctx,
            paths,
            status,
            results,
            time.monotonic() - t0,
            exit_code,
            drain_reason,
            internal,
            extra,
        )
        return exit_code
    except Exception as exc:  # a slurmkit bug: fail open unless told otherwise
        import traceback

        if _decided is not None:  # the verdict was decided before the bug: keep it
            _say(f"{hook}: internal error after the verdict: {type(exc).__name__}: {exc}")
            return _decided

        _say(
            f"{hook}: internal error, failing {'closed' if health.get('fail_closed') else 'open'}: "
            f"{type(exc).__name__}: {exc}"
        )
        if os.environ.get("SLURMKIT_DEBUG"):
            traceback.print_exc()
        problem = CheckResult(
            "internal",
            Status.UNKNOWN,
            "INTERNAL_ERROR",
            f"{type(exc).__name__}: {exc}",
            details={"internal": True},
        )
        _record_bounded(
            hook,
            RECORD_TIMEOUT,
            ctx,
            paths,
            Status.UNKNOWN,
            [problem],
            time.monotonic() - t0,
            HOOK_EXIT_FAIL if health.get("fail_closed") else 0,
            None,
            [str(exc)],
        )
        return HOOK_EXIT_FAIL if health.get("fail_closed") else 0
    finally:
        if ctx is not None:
            ctx.close()


def main(hook: str) -> None:
    """Entry point for the hook scripts: never lets a stuck probe thread keep the process alive."""
    code = 0
    try:
        code = run_hook(hook)
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
