"""Fast host checks: disk, memory, mounts, InfiniBand, services, cached heavy verdicts."""

from __future__ import annotations

import errno
import os
import time

from slurmkit.core.schema import Field
from slurmkit.health import declare
from slurmkit.verdict.base import Action, CheckResult, Status, Tier, safe_code, safe_text
from slurmkit.verdict.store import for_paths, still_valid

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional


def user_fillable(path: str) -> Optional[str]:
    """Why ordinary users can fill the filesystem holding ``path`` (one line), or ``None``.

    Decided from modes and owners alone, cheaply: ``path`` or a directory above it on the
    same filesystem is not root's, or is writable by group or others (sticky or not, like
    ``/tmp``). What it cannot see: a root-only path on a filesystem users fill through
    another directory (``/var/lib/x`` on the root filesystem that also holds ``/tmp``);
    for that, set ``user_fillable: true`` on the path (docs/health.md).
    """
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    here = os.path.abspath(path)
    while True:
        try:
            st = os.stat(here)
        except OSError:
            return None
        if st.st_dev != dev:
            return None
        if st.st_uid != 0:
            return f"{here} belongs to uid {st.st_uid}"
        if st.st_mode & 0o022:
            return f"{here} is writable by {'others' if st.st_mode & 0o002 else 'its group'} (mode {st.st_mode & 0o7777:04o})"
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _nearest_existing(path: str) -> str:
    here = os.path.abspath(path)
    while not os.path.lexists(here) and os.path.dirname(here) != here:
        here = os.path.dirname(here)
    return here


#: What a problem on a user-fillable path is: a warning, never a drain (issue 25).
_FILLABLE_PARAM = Field(
    "bool",
    False,
    "FAIL (drain) even when ordinary users can fill or remove the path; by default a problem "
    "there is a WARN, so one user cannot drain a node (docs/health.md).",
)


def _fillable(path: str, limits: Dict[str, Any]) -> Optional[str]:
    """:func:`user_fillable`, unless the path's ``user_fillable`` says otherwise."""
    forced = limits.get("user_fillable")
    if forced is None:
        return user_fillable(path)
    return f"{path} is configured user_fillable" if forced else None


def _fillable_status(fillable: Optional[str], params) -> Status:
    return Status.FAIL if not fillable or params.get("fail_when_user_fillable") else Status.WARN


@declare.check(
    "disk_space",
    Tier.FAST,
    "Free space and inodes on configured paths.",
    gpu=False,
    codes="DISK_PATH_MISSING, DISK_FREE_LOW, DISK_INODES_LOW",
    params={
        "paths": Field(
            "dict",
            {"/tmp": {"min_free_gb": 1.0, "min_free_inodes_pct": 1.0}},
            "Path -> {min_free_gb, min_free_inodes_pct, user_fillable}; user_fillable (true/false) "
            "overrides the detection from modes and owners.",
            items=Field("dict"),
        ),
        "fail_when_user_fillable": _FILLABLE_PARAM,
    },
)
def check_disk_space(ctx, params) -> CheckResult:
    problems: List[tuple] = []
    details: Dict[str, Any] = {}
    least = None
    for path, limits in (params.get("paths") or {}).items():
        limits = limits or {}
        try:
            st = os.statvfs(path)
        except OSError as exc:
            # a user can remove or rename what sits in a directory they can write
            fillable = _fillable(_nearest_existing(path), limits)
            status = _fillable_status(fillable, params)
            note = f" (user-fillable: {fillable}; not draining)" if status is Status.WARN else ""
            problems.append((status, "DISK_PATH_MISSING", f"{path}: {exc.strerror}{note}"))
            continue
        fillable = _fillable(path, limits)
        status = _fillable_status(fillable, params)
        note = f" (user-fillable: {fillable}; not draining)" if status is Status.WARN else ""
        free_gb = st.f_bavail * st.f_frsize / 1e9
        inodes_pct = 100.0 * st.f_favail / st.f_files if st.f_files else 100.0
        details[path] = {
            "free_gb": round(free_gb, 3),
            "free_inodes_pct": round(inodes_pct, 2),
            "user_fillable": bool(fillable),
        }
        least = free_gb if least is None else min(least, free_gb)
        if free_gb < float(limits.get("min_free_gb", 0)):
            problems.append(
                (
                    status,
                    "DISK_FREE_LOW",
                    f"{path}: {free_gb:.2f} GB free < {float(limits['min_free_gb']):g} GB{note}",
                )
            )
        if inodes_pct < float(limits.get("min_free_inodes_pct", 0)):
            problems.append(
                (
                    status,
                    "DISK_INODES_LOW",
                    f"{path}: {inodes_pct:.2f}% inodes free < {float(limits['min_free_inodes_pct']):g}%{note}",
                )
            )
    if problems:
        # the worst problem leads (a root-only path's FAIL before a user-fillable WARN)
        problems.sort(key=lambda p: p[0] is not Status.FAIL)
        st, code, _ = problems[0]
        return CheckResult(
            "disk_space",
            st,
            code,
            "; ".join(p[2] for p in problems if p[1] == code and p[0] is st),
            Action.MONITOR,
            value=least,
            unit="GB",
            details=details,
        )
    return CheckResult(
        "disk_space",
        Status.OK,
        "OK",
        f"{len(details)} path(s) have room",
        value=least,
        unit="GB",
        details=details,
    )


def meminfo() -> Dict[str, int]:
    out = {}
    # utf-8, not ascii: the kernel writes ASCII, and utf-8's codec is loaded at start-up
    with open("/proc/meminfo", encoding="utf-8") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                out[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


@declare.check(
    "memory_available",
    Tier.FAST,
    "MemAvailable above the floor.",
    gpu=False,
    codes="MEMORY_LOW",
    params={"min_available_gb": Field("float", 1.0, "MemAvailable floor (GB).", min=0)},
)
def check_memory_available(ctx, params) -> CheckResult:
    info = meminfo()
    avail_gb = info.get("MemAvailable", info.get("MemFree", 0)) / 1e9
    floor = float(params.get("min_available_gb", 0))
    if avail_gb < floor:
        return CheckResult(
            "memory_available",
            Status.FAIL,
            "MEMORY_LOW",
            f"{avail_gb:.2f} GB available < {floor:g} GB",
            Action.MONITOR,
            value=avail_gb,
            unit="GB",
        )
    return CheckResult(
        "memory_available", Status.OK, "OK", f"{avail_gb:.1f} GB available", value=avail_gb, unit="GB"
    )


def _mount_table() -> Dict[str, List[str]]:
    table: Dict[str, List[str]] = {}
    with open("/proc/self/mounts", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 4:
                # octal escapes for spaces etc. (\040)
                mp = parts[1].encode().decode("unicode_escape")
                table[mp] = parts[3].split(",")
    return table


@declare.check(
    "mounts",
    Tier.FAST,
    "Required mounts present and writable.",
    gpu=False,
    codes="MOUNT_MISSING, MOUNT_READONLY, MOUNT_NOT_WRITABLE",
    params={
        "required": Field("list", [], "Mount points that must be mounted and writable.", items=Field("str")),
        "write_test": Field("bool", True, "Create and delete a file to prove writability."),
        "fail_when_user_fillable": _FILLABLE_PARAM,
    },
)
def check_mounts(ctx, params) -> CheckResult:
    required = params.get("required") or []
    if not required:
        return CheckResult("mounts", Status.OK, "OK", "no required mounts configured", value=0)
    table = _mount_table()
    warnings: List[str] = []
    for mp in required:
        norm = os.path.normpath(mp)
        if norm not in table:
            return CheckResult("mounts", Status.FAIL, "MOUNT_MISSING", f"{mp} is not mounted", Action.MONITOR)
        if "ro" in table[norm]:
            return CheckResult(
                "mounts", Status.FAIL, "MOUNT_READONLY", f"{mp} is mounted read-only", Action.MONITOR
            )
        if params.get("write_test", True):
            # a random name (mkstemp: O_EXCL, never through a link): a predictable one could be
            # pre-created by any user of a world-writable mount, failing the check on purpose
            import tempfile

            try:
                fd, probe = tempfile.mkstemp(prefix=".slurmkit-write-test.", dir=norm)
                os.close(fd)
                os.unlink(probe)
            except OSError as exc:
                # out of space or inodes on a mount users write: any user can cause that
                fillable = user_fillable(norm) if exc.errno in (errno.ENOSPC, errno.EDQUOT) else None
                status = _fillable_status(fillable, params)
                if status is Status.WARN:
                    warnings.append(f"{mp}: {exc.strerror} (user-fillable: {fillable}; not draining)")
                    continue
                return CheckResult(
                    "mounts", Status.FAIL, "MOUNT_NOT_WRITABLE", f"{mp}: {exc.strerror}", Action.MONITOR
                )
    if warnings:
        return CheckResult(
            "mounts",
            Status.WARN,
            "MOUNT_NOT_WRITABLE",
            "; ".join(warnings),
            Action.MONITOR,
            value=len(required),
        )
    return CheckResult(
        "mounts", Status.OK, "OK", f"{len(required)} mount(s) present and writable", value=len(required)
    )


@declare.check(
    "infiniband",
    Tier.FAST,
    "InfiniBand ports ACTIVE at the expected rate (sysfs).",
    gpu=False,
    codes="IB_PORT_DOWN, IB_RATE_LOW, IB_TOO_FEW_PORTS",
    params={
        "expected_rate_gbps": Field(
            "float", None, "Rate every port must run at (e.g. 400); null: any rate.", min=0
        ),
        "min_active_ports": Field(
            "int",
            0,
            "Fewer ACTIVE ports than this fails; 0 with no HCA present is ok (GPU nodes without IB).",
            min=0,
        ),
        "devices": Field("list", [], "Only these HCAs (e.g. mlx5_0); empty: all.", items=Field("str")),
        "sysfs_root": Field("str", "/sys", "sysfs root (tests point it at a fixture tree)."),
    },
)
def check_infiniband(ctx, params) -> CheckResult:
    from slurmkit.hw import ib_ports

    ports = ib_ports(params.get("sysfs_root") or "/sys", params.get("devices") or ())
    expected = params.get("expected_rate_gbps")
    need = int(params.get("min_active_ports") or 0)
    details = {
        p.hca_spec: {"state": p.state, "rate_gbps": p.rate_gbps, "link_layer": p.link_layer} for p in ports
    }
    if not ports and need == 0:
        return CheckResult(
            "infiniband", Status.OK, "OK", "no InfiniBand HCA (none required)", value=0, unit="ports"
        )
    down = [p for p in ports if not p.active]
    slow = [p for p in ports if p.active and expected and (p.rate_gbps or 0) < expected]
    active = [p for p in ports if p.active]
    if down:
        return CheckResult(
            "infiniband",
            Status.FAIL,
            "IB_PORT_DOWN",
            ", ".join(f"{p.hca_spec} {p.state}" for p in down),
            Action.MONITOR,
            value=len(active),
            unit="ports",
            details=details,
        )
    if slow:
        return CheckResult(
            "infiniband",
            Status.FAIL,
            "IB_RATE_LOW",
            ", ".join(f"{p.hca_spec} at {p.rate_gbps:g} Gb/s < {expected:g}" for p in slow),
            Action.MONITOR,
            value=len(active),
            unit="ports",
            details=details,
        )
    if len(active) < need:
        return CheckResult(
            "infiniband",
            Status.FAIL,
            "IB_TOO_FEW_PORTS",
            f"{len(active)} ACTIVE port(s), {need} required",
            Action.MONITOR,
            value=len(active),
            unit="ports",
            details=details,
        )
    return CheckResult(
        "infiniband",
        Status.OK,
        "OK",
        f"{len(active)} port(s) ACTIVE" + (f" at >= {expected:g} Gb/s" if expected else ""),
        value=len(active),
        unit="ports",
        details=details,
    )


def running_process_names() -> set:
    names = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
                names.add(fh.read().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv0 = fh.read().split(b"\0", 1)[0]
            if argv0:
                names.add(os.path.basename(argv0.decode("utf-8", "replace")))
        except OSError:
            continue
    return names


@declare.check(
    "services",
    Tier.FAST,
    "Required services running (process check, e.g. nv-fabricmanager).",
    gpu=False,
    codes="SERVICE_DOWN",
    params={
        "required": Field(
            "list",
            [],
            "Process names that must be running (e.g. nv-fabricmanager, nvidia-persistenced).",
            items=Field("str"),
        )
    },
)
def check_services(ctx, params) -> CheckResult:
    required = params.get("required") or []
    if not required:
        return CheckResult("services", Status.OK, "OK", "no required services configured", value=0)
    # comm is truncated to 15 characters by the kernel: compare on that prefix too
    names = running_process_names()
    missing = [s for s in required if s not in names and s[:15] not in names]
    if missing:
        return CheckResult(
            "services",
            Status.FAIL,
            "SERVICE_DOWN",
            f"not running: {', '.join(missing)}",
            Action.RESET,
            value=len(required) - len(missing),
        )
    return CheckResult(
        "services", Status.OK, "OK", f"{len(required)} service(s) running", value=len(required)
    )


def _iso(ts) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(float(ts or 0)))


def _stored_action(value) -> Action:
    try:
        return Action(value or "isolate")
    except ValueError:
        return Action.ISOLATE


@declare.check(
    "heavy_cache",
    Tier.FAST,
    "Still-valid heavy verdicts from the sweep store, reported not re-run; a valid FAIL fails.",
    gpu=False,
    hooks=frozenset({"prolog", "manual"}),
    codes="<the stored code>, STORE_UNREACHABLE, STORE_UNREADABLE",
    remote=True,
    params={
        "store_timeout": Field(
            "float",
            1.0,
            "Seconds the shared verdict store may take to answer; past it the check is "
            "unknown (fails open), never a failure.",
            min=0.05,
        )
    },
)
def check_heavy_cache(ctx, params) -> CheckResult:
    """Report (never re-run) heavy verdicts from the sweep store that are still valid.

    A still-valid heavy FAIL fails the prolog: the node was found broken by a sweep and
    has not been re-checked since. Expired verdicts (:func:`~slurmkit.verdict.store.still_valid`)
    are ignored, and a node the sweep never reached has none: OK, because the absence of
    a sweep is not a node fault.

    The store is shared storage (``remote``): the engine gives this check its own short
    timeout (``store_timeout``) and reads a store that does not answer in time (a hung NFS
    server, a FIFO in place of a file) as UNKNOWN, which fails open; it never drains the node.
    The read runs in the engine's probe thread, not in a thread of its own. Only
    verdict files owned by root or ``paths.shared_owner`` are believed, and what goes
    into the drain reason (code, action, text) is sanitised.
    """
    if not ctx.health.get("use_verdict_store", True):
        return CheckResult("heavy_cache", Status.OK, "OK", "verdict store disabled", value=0)
    root = ctx.paths["shared_dir"]
    try:
        entries = for_paths(ctx.paths).node(ctx.node) or {}
    except Exception as exc:
        return CheckResult(
            "heavy_cache", Status.UNKNOWN, "STORE_UNREADABLE", f"{root}: {exc}", details={"internal": True}
        )
    now = time.time()
    valid = {
        name: e for name, e in entries.items() if e.get("tier", "heavy") == "heavy" and still_valid(e, now)
    }
    details = {
        name: {k: e.get(k) for k in ("status", "code", "value", "timestamp", "valid_until")}
        for name, e in valid.items()
    }
    fails = {n: e for n, e in valid.items() if e.get("status") == "fail"}
    warns = {n: e for n, e in valid.items() if e.get("status") == "warn"}
    if fails:
        name, e = sorted(fails.items())[0]
        return CheckResult(
            "heavy_cache",
            Status.FAIL,
            safe_code(e.get("code"), "HEAVY_FAIL"),
            f"{safe_text(name)} (sweep, valid until {_iso(e['valid_until'])}): "
            f"{safe_text(e.get('reason', ''))}",
            _stored_action(e.get("action")),
            value=len(valid),
            details=details,
        )
    if warns:
        name, e = sorted(warns.items())[0]
        return CheckResult(
            "heavy_cache",
            Status.WARN,
            safe_code(e.get("code"), "HEAVY_WARN"),
            f"{safe_text(name)} (sweep): {safe_text(e.get('reason', ''))}",
            Action.MONITOR,
            value=len(valid),
            details=details,
        )
    if valid:
        return CheckResult(
            "heavy_cache",
            Status.OK,
            "OK",
            f"{len(valid)} valid heavy verdict(s) pass: " + ", ".join(sorted(valid)),
            value=len(valid),
            details=details,
        )
    return CheckResult(
        "heavy_cache", Status.OK, "OK", "no valid heavy verdicts (no recent sweep)", value=0, details=details
    )
