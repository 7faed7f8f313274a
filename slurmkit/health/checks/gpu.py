"""Fast GPU checks. Each takes ``(ctx, params)`` and returns one :class:`CheckResult` for
the node: the worst GPU decides, the per-GPU numbers go to ``details``.

Data gathering (the backend) is separate from judgement (here), NHC-style, so every
check runs unchanged against NVML or a fixture.
"""

from __future__ import annotations

from slurmkit.chars import DIGITS, keep_only
from slurmkit.core.schema import Field
from slurmkit.health import declare
from slurmkit.verdict.base import Action, CheckResult, Status, Tier

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple


class _Verdicts:
    """Collects per-GPU findings; the worst one becomes the result."""

    def __init__(self, check: str):
        self.check = check
        self.findings: List[Tuple[Status, str, str, Action]] = []
        self.details: Dict[str, Any] = {}

    def add(self, status: Status, code: str, reason: str, action: Action = Action.NONE) -> None:
        self.findings.append((status, code, reason, action))

    def result(self, ok_reason: str, value: Optional[float] = None, unit: str = "") -> CheckResult:
        bad = [f for f in self.findings if f[0] != Status.OK]
        if not bad:
            return CheckResult(
                self.check, Status.OK, "OK", ok_reason, value=value, unit=unit, details=self.details
            )
        top = max(bad, key=lambda f: (f[0].severity, f[3].severity))
        same = [f for f in bad if f[1] == top[1]]
        reason = "; ".join(f[2] for f in same[:4]) + (f"; +{len(same) - 4} more" if len(same) > 4 else "")
        return CheckResult(
            self.check, top[0], top[1], reason, top[3], value=value, unit=unit, details=self.details
        )


_DIGIT_SET = frozenset(DIGITS)


def _gpus(ctx):
    return ctx.backend().gpus()


# ---------------------------------------------------------------- gpu_count


def gres_gpu_count(node: str, gres_conf: str) -> Optional[int]:
    """GPUs configured for ``node`` in gres.conf (``Count=`` or the ``File=`` list), or ``None``
    when the file is missing or only ``AutoDetect`` is used."""
    from slurmkit.core import trust

    try:
        raw = trust.read_trusted(gres_conf)  # root's file only: it sets how many GPUs must be there
    except OSError:
        return None
    if raw is None:
        return None
    from slurmkit.slurm.parse import (  # imports re: only with a gres.conf
        ParseError,
        conf_records,
        expand_hostlist,
    )

    text = raw.decode("utf-8", "replace")
    total, seen = 0, False
    for _, kv in conf_records(text):
        if kv.get("name", "").lower() != "gpu":
            continue
        try:
            if "nodename" in kv and node not in expand_hostlist(kv["nodename"]):
                continue
            if "count" in kv:
                count = int(keep_only(kv["count"], _DIGIT_SET) or 0)
            elif "file" in kv:
                count = len(expand_hostlist(kv["file"]))
            else:
                continue
        except (ParseError, ValueError):
            return None
        total += count
        seen = True
    return total if seen else None


@declare.check(
    "gpu_count",
    Tier.FAST,
    "GPU count against the node's gres and the job's SLURM_JOB_GPUS (host numbering).",
    codes="GPU_COUNT_LOW, GPU_COUNT_HIGH, GPU_JOB_MISSING",
    params={
        "expected": Field(
            "int",
            None,
            "GPUs this node must show; null: the node's gres "
            "count from gres.conf next to SLURM_CONF, when it can be read.",
            min=0,
        )
    },
)
def check_gpu_count(ctx, params) -> CheckResult:
    gpus = _gpus(ctx)
    found = len(gpus)
    expected = params.get("expected")
    source = "config"
    if expected is None:
        expected = gres_gpu_count(ctx.node, ctx.job.conf_file("gres.conf"))
        source = "gres.conf"
    v = _Verdicts("gpu_count")
    v.details = {
        "found": found,
        "expected": expected,
        "expected_from": source if expected is not None else None,
        "indices": [g.index for g in gpus],
    }
    if expected is not None and found < expected:
        v.add(
            Status.FAIL,
            "GPU_COUNT_LOW",
            f"{found} GPUs visible, {expected} expected ({source})",
            Action.REBOOT,
        )
    elif expected is not None and found > expected:
        v.add(
            Status.WARN,
            "GPU_COUNT_HIGH",
            f"{found} GPUs visible, only {expected} configured ({source})",
            Action.MONITOR,
        )
    if ctx.job_gpus:
        present = {g.index for g in gpus}
        missing = [i for i in ctx.job_gpus if i not in present]
        v.details["job_gpus"] = ctx.job_gpus
        if missing:
            v.add(
                Status.FAIL,
                "GPU_JOB_MISSING",
                f"job GPU(s) {','.join(map(str, missing))} not visible "
                f"(SLURM_JOB_GPUS={','.join(map(str, ctx.job_gpus))})",
                Action.REBOOT,
            )
    return v.result(
        f"{found} GPUs" + (f" (expected {expected})" if expected is not None else ""), found, "gpus"
    )


# ---------------------------------------------------------------- counters


@declare.check(
    "gpu_ecc",
    Tier.FAST,
    "Volatile uncorrected ECC errors fail; many corrected ones warn.",
    codes="GPU_ECC_UNCORRECTED, GPU_ECC_CORRECTED",
)
def check_gpu_ecc(ctx, params) -> CheckResult:
    b = ctx.backend()
    v = _Verdicts("gpu_ecc")
    total_unc = 0
    for g in _gpus(ctx):
        th = ctx.thresholds(g.name)
        ecc = b.ecc(g.index)
        v.details[str(g.index)] = ecc
        if not ecc:
            continue
        unc, cor = ecc["volatile_uncorrected"], ecc["volatile_corrected"]
        total_unc += unc
        if unc > th["ecc_uncorrected_max"]:
            v.add(
                Status.FAIL,
                "GPU_ECC_UNCORRECTED",
                f"GPU {g.index}: {unc} uncorrected volatile ECC errors",
                Action.RESET,
            )
        elif cor > th["ecc_corrected_warn"]:
            v.add(
                Status.WARN,
                "GPU_ECC_CORRECTED",
                f"GPU {g.index}: {cor} corrected volatile ECC errors",
                Action.MONITOR,
            )
    return v.result("no uncorrected ECC errors", total_unc, "errors")


@declare.check(
    "gpu_memory_errors",
    Tier.FAST,
    "Retired pages over the limit, pending retirement, pending or failed row remaps.",
    codes="GPU_RETIRED_PAGES, GPU_RETIREMENT_PENDING, GPU_ROW_REMAP_PENDING, GPU_ROW_REMAP_FAILED",
)
def check_gpu_memory_errors(ctx, params) -> CheckResult:
    b = ctx.backend()
    v = _Verdicts("gpu_memory_errors")
    worst_pages = 0
    for g in _gpus(ctx):
        th = ctx.thresholds(g.name)
        rp = b.retired_pages(g.index)
        rr = b.remapped_rows(g.index)
        v.details[str(g.index)] = {"retired_pages": rp, "remapped_rows": rr}
        if rp:
            pages = rp["single_bit"] + rp["double_bit"]
            worst_pages = max(worst_pages, pages)
            if pages >= th["retired_pages_max"]:
                v.add(
                    Status.FAIL,
                    "GPU_RETIRED_PAGES",
                    f"GPU {g.index}: {pages} retired pages (limit {th['retired_pages_max']})",
                    Action.ISOLATE,
                )
            if rp["pending"]:
                v.add(
                    Status.FAIL,
                    "GPU_RETIREMENT_PENDING",
                    f"GPU {g.index}: page retirement pending (reset to apply)",
                    Action.RESET,
                )
        if rr:
            if rr["failed"]:
                v.add(
                    Status.FAIL,
                    "GPU_ROW_REMAP_FAILED",
                    f"GPU {g.index}: row remapping failed",
                    Action.ISOLATE,
                )
            if rr["pending"]:
                v.add(
                    Status.FAIL,
                    "GPU_ROW_REMAP_PENDING",
                    f"GPU {g.index}: row remap pending (reset to apply)",
                    Action.RESET,
                )
    return v.result("no retired-page or row-remap problems", worst_pages, "pages")


@declare.check(
    "gpu_temperature",
    Tier.FAST,
    "GPU temperature against the model's warn/fail thresholds.",
    codes="GPU_TEMPERATURE",
)
def check_gpu_temperature(ctx, params) -> CheckResult:
    b = ctx.backend()
    v = _Verdicts("gpu_temperature")
    hottest = None
    for g in _gpus(ctx):
        th = ctx.thresholds(g.name)
        t = b.temperature(g.index)
        v.details[str(g.index)] = t
        hottest = t if hottest is None else max(hottest, t)
        if t >= th["temperature_fail_c"]:
            v.add(
                Status.FAIL,
                "GPU_TEMPERATURE",
                f"GPU {g.index}: {t:.0f} C >= {th['temperature_fail_c']:.0f} C",
                Action.ISOLATE,
            )
        elif t >= th["temperature_warn_c"]:
            v.add(
                Status.WARN,
                "GPU_TEMPERATURE",
                f"GPU {g.index}: {t:.0f} C >= {th['temperature_warn_c']:.0f} C",
                Action.MONITOR,
            )
    return v.result(f"hottest GPU {hottest:.0f} C" if hottest is not None else "no GPUs", hottest, "celsius")


@declare.check(
    "gpu_power",
    Tier.FAST,
    "Power draw: warn at the model's power_warn_w (680 W on H100).",
    codes="GPU_POWER",
)
def check_gpu_power(ctx, params) -> CheckResult:
    b = ctx.backend()
    v = _Verdicts("gpu_power")
    top = None
    for g in _gpus(ctx):
        th = ctx.thresholds(g.name)
        w = b.power(g.index)
        v.details[str(g.index)] = w
        top = w if top is None else max(top, w)
        if th["power_fail_w"] and w >= th["power_fail_w"]:
            v.add(
                Status.FAIL,
                "GPU_POWER",
                f"GPU {g.index}: {w:.0f} W >= {th['power_fail_w']:.0f} W",
                Action.ISOLATE,
            )
        elif w >= th["power_warn_w"]:
            v.add(
                Status.WARN,
                "GPU_POWER",
                f"GPU {g.index}: {w:.0f} W >= {th['power_warn_w']:.0f} W",
                Action.MONITOR,
            )
    return v.result(f"highest draw {top:.0f} W" if top is not None else "no GPUs", top, "watts")


@declare.check(
    "gpu_persistence",
    Tier.FAST,
    "Persistence mode on (off: warn, or fail per config).",
    codes="GPU_PERSISTENCE_OFF",
    params={
        "severity": Field("str", "warn", "Verdict when persistence mode is off.", choices=("warn", "fail"))
    },
)
def check_gpu_persistence(ctx, params) -> CheckResult:
    b = ctx.backend()
    v = _Verdicts("gpu_persistence")
    status = Status.FAIL if params.get("severity") == "fail" else Status.WARN
    off = []
    for g in _gpus(ctx):
        on = b.persistence(g.index)
        v.details[str(g.index)] = on
        if not on:
            off.append(g.index)
    if off:
        v.add(
            status,
            "GPU_PERSISTENCE_OFF",
            f"persistence mode off on GPU(s) {','.join(map(str, off))}",
            Action.RESET if status == Status.FAIL else Action.MONITOR,
        )
    return v.result("persistence mode on", len(off), "gpus")


@declare.check(
    "gpu_throttle",
    Tier.FAST,
    "Clock-throttle reasons other than the ignored ones warn.",
    codes="GPU_THROTTLE",
    params={
        "ignore": Field(
            "list",
            ["gpu_idle", "applications_clocks_setting", "sw_power_cap"],
            "Throttle reasons that are normal and never warn.",
            items=Field("str"),
        )
    },
)
def check_gpu_throttle(ctx, params) -> CheckResult:
    b = ctx.backend()
    v = _Verdicts("gpu_throttle")
    ignore = set(params.get("ignore") or [])
    count = 0
    for g in _gpus(ctx):
        reasons = [r for r in b.throttle(g.index) if r not in ignore]
        v.details[str(g.index)] = reasons
        if reasons:
            count += 1
            v.add(Status.WARN, "GPU_THROTTLE", f"GPU {g.index}: {','.join(reasons)}", Action.MONITOR)
    return v.result("no clock throttling", count, "gpus")


@declare.check(
    "nvlink_state",
    Tier.FAST,
    "Every NVLink link active; an inactive link fails.",
    codes="NVLINK_DOWN",
)
def check_nvlink_state(ctx, params) -> CheckResult:
    b = ctx.backend()
    v = _Verdicts("nvlink_state")
    down_total = 0
    for g in _gpus(ctx):
        states = b.nvlink(g.index)
        down = [i for i, up in enumerate(states) if not up]
        v.details[str(g.index)] = {"links": len(states), "inactive": down}
        if down:
            down_total += len(down)
            v.add(
                Status.FAIL,
                "NVLINK_DOWN",
                f"GPU {g.index}: NVLink link(s) {','.join(map(str, down))} inactive",
                Action.RESET,
            )
    return v.result("all NVLink links active", down_total, "links")


@declare.check(
    "gpu_leftover",
    Tier.FAST,
    "No compute process and < leftover_memory_mib used on the GPUs handed to the job.",
    hooks=frozenset({"prolog", "manual"}),
    codes="GPU_LEFTOVER_PROCESS, GPU_LEFTOVER_MEMORY",
)
def check_gpu_leftover(ctx, params) -> CheckResult:
    """Processes or memory left on the GPUs handed to the job (all GPUs outside a job)."""
    b = ctx.backend()
    v = _Verdicts("gpu_leftover")
    gpus = {g.index: g for g in _gpus(ctx)}
    if ctx.hook == "prolog" and ctx.job_id:
        indices = [i for i in (ctx.job_gpus or []) if i in gpus]
        if not indices:
            return CheckResult(
                "gpu_leftover", Status.OK, "OK", "the job has no GPUs on this node", value=0, unit="MiB"
            )
    else:
        indices = sorted(gpus)
    most = 0.0
    for i in indices:
        th = ctx.thresholds(gpus[i].name)
        procs = b.processes(i)
        used = b.memory_used_mib(i)
        most = max(most, used)
        v.details[str(i)] = {"used_mib": used, "pids": [p.pid for p in procs]}
        if procs:
            v.add(
                Status.FAIL,
                "GPU_LEFTOVER_PROCESS",
                f"GPU {i}: process(es) {','.join(str(p.pid) for p in procs)} hold {used:.0f} MiB",
                Action.RESET,
            )
        elif used > th["leftover_memory_mib"]:
            v.add(
                Status.FAIL,
                "GPU_LEFTOVER_MEMORY",
                f"GPU {i}: {used:.0f} MiB in use with no process (> {th['leftover_memory_mib']:.0f} MiB)",
                Action.RESET,
            )
    return v.result(f"GPU(s) {','.join(map(str, indices))} free", most, "MiB")


# ---------------------------------------------------------------- xid


@declare.check(
    "xid",
    Tier.FAST,
    "New Xid events since the node's cursor, judged by the versioned Xid->action table.",
    codes="XID_<n>",
    params={
        "table": Field("str", None, "Xid->action table (YAML); null: the packaged etc/xid-actions.yaml."),
        "unknown_action": Field(
            "str",
            "monitor",
            "Action for an Xid not in the table.",
            choices=("none", "monitor", "reset", "reboot", "isolate"),
        ),
    },
)
def check_xid(ctx, params) -> CheckResult:
    """New Xid events since the node's cursor, plus the node's sticky Xid failures.

    Hooks advance the cursor under a root-only lock with a bounded wait. A failing event
    is written to the sticky file before the cursor moves past it, so every hook on the
    node (concurrent prologs included) fails on it until ``slurmkit node resume`` clears
    it. The verdict is decided from the events first: a held lock, an untrusted or full
    state directory cost only the cursor (noted in ``details``), never the FAIL. Manual
    runs only look."""
    from slurmkit.core.trust import UntrustedFile
    from slurmkit.health.checks import xid as xidmod

    b = ctx.backend()
    state_dir = ctx.paths["state_dir"]
    lock_wait = max(0.1, float(ctx.health["check_timeout"]) / 2)
    unknown = params.get("unknown_action", "monitor")
    # A configured table that cannot be read is reported on every run (UNKNOWN, counted as
    # slurmkit's own fault: log line and metric), and events are judged with the packaged
    # table meanwhile, so an Xid 79 still fails the node.
    table_error = xidmod.table_problem(params.get("table"))
    table_path = None if table_error else params.get("table")

    def judge(events, sticky):
        v = _Verdicts("xid")
        if not events and not sticky:
            return v.result("no new Xid events", 0, "events"), []
        table = xidmod.load_table(table_path)
        v.details = {"table_version": table.version, "events": [e.to_dict() for e in events]}
        failing = []
        for e in events:
            act = table.action(e.xid, e.message, unknown)
            where = f"GPU {e.gpu}" if e.gpu is not None else (e.pci or "GPU ?")
            reason = f"{where}: Xid {e.xid} ({table.describe(e.xid)}) -> {act.value}"
            if act.severity >= Action.RESET.severity:
                v.add(Status.FAIL, f"XID_{e.xid}", reason, act)
                failing.append(e.to_dict())
            elif act == Action.MONITOR:
                v.add(Status.WARN, f"XID_{e.xid}", reason, act)
            else:
                v.add(Status.OK, f"XID_{e.xid}", reason, act)
        new = {(e.timestamp, e.xid, e.pci) for e in events}
        kept = [e for e in sticky if (e.get("timestamp"), e.get("xid"), e.get("pci")) not in new]
        for e in kept:
            try:
                xid = int(e["xid"])
            except (TypeError, ValueError):
                continue
            act = table.action(xid, str(e.get("message", "")), unknown)
            if act.severity < Action.RESET.severity:
                continue
            gpu = e.get("gpu")
            where = f"GPU {gpu}" if isinstance(gpu, int) else (str(e.get("pci") or "") or "GPU ?")
            v.add(
                Status.FAIL,
                f"XID_{xid}",
                f"{where}: Xid {xid} ({table.describe(xid)}) -> {act.value} (kept until resume)",
                act,
            )
        if kept:
            v.details["sticky"] = kept
        return v.result(f"{len(events)} new Xid event(s), none actionable", len(events), "events"), failing

    def flag_table(result: CheckResult) -> CheckResult:
        if table_error is None or result.status == Status.FAIL:
            return result
        return CheckResult(
            "xid",
            Status.UNKNOWN,
            "CONFIG_ERROR",
            f"{table_error}; judging with the packaged table ({result.reason})",
            details={"internal": True, **result.details},
        )

    if not ctx.advance_xid_cursor:
        cur = xidmod.Cursor(xidmod.cursor_path(state_dir, ctx.node))
        return flag_table(judge(b.xid_events(cur.since), xidmod.sticky_events(state_dir, ctx.node))[0])
    try:
        with xidmod.locked_cursor(state_dir, ctx.node, lock_wait) as cur:
            events = b.xid_events(cur.since)
            result, failing = judge(events, xidmod.sticky_events(state_dir, ctx.node))
            if events:
                ctx.xid_events_seen.extend(e.to_dict() for e in events)
                try:  # sticky first: if it cannot be kept, the cursor stays and the next hook re-reads
                    if failing:
                        xidmod.add_sticky(state_dir, ctx.node, failing)
                    cur.advance(max(e.timestamp for e in events), len(events))
                except (OSError, UntrustedFile) as exc:
                    result.details["state_error"] = f"cursor not advanced: {exc}"
            return flag_table(result)
    except (TimeoutError, UntrustedFile) as exc:
        # The cursor cannot be held: judge what is new since it without moving it. Read the cursor, then the sticky file: the lock holder writes sticky before it
        # moves the cursor, so an event it consumed meanwhile is in one or the other.
        cur = xidmod.Cursor(xidmod.cursor_path(state_dir, ctx.node))
        events = b.xid_events(cur.since)
        result, _ = judge(events, xidmod.sticky_events(state_dir, ctx.node))
        ctx.xid_events_seen.extend(e.to_dict() for e in events)
        result.details["state_error"] = f"cursor not advanced: {exc}"
        return flag_table(result)
