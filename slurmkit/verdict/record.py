"""Where verdicts go: JSON lines under ``paths.log_dir`` and a Prometheus textfile under
``paths.metrics_dir``.

The JSON log is appended with one ``write`` of one line under an exclusive ``flock``
on a root-only ``<log>.lock`` (0600), so two prologs on one node (two jobs starting
together) never interleave or lose a line. The lock is a separate file because the log
itself is world-readable, and a file a user can open is a file a user can ``flock``:
that used to stall the prolog until its watchdog fired. The wait is bounded, the log
is opened non-blocking without following links, and a directory others can write is
refused (:mod:`slurmkit.core.trust`). The metrics file is per hook and node
(``slurmkit_health_<hook>_<node>.prom``;
several slurmd can share a host), written atomically.
"""

from __future__ import annotations

import os
import stat
import time

from slurmkit.core import jsontext, trust
from slurmkit.verdict.base import CheckResult, Status

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

HEALTH_LOG = "health.jsonl"
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def append_jsonl(path: str, record: Dict[str, Any], timeout: float = 1.0) -> None:
    """Append one JSON line. Raises ``TimeoutError`` when the lock stays held ``timeout``
    seconds, :class:`~slurmkit.core.trust.UntrustedFile` for a directory others can write or
    a log that is not root's regular file, ``OSError`` (ENOSPC ...) otherwise."""
    directory = os.path.dirname(os.path.abspath(path))
    why = trust.writable_dir(directory)
    if why:
        raise trust.UntrustedFile(directory, why)
    line = (jsontext.dumps(record, sort_keys=True, default=str) + "\n").encode("utf-8")
    lock_fd = trust.lock(path + ".lock", timeout)
    try:
        fd = os.open(path, _APPEND, 0o644)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid not in trust.trusted_uids():
                raise trust.UntrustedFile(path, "not a regular file of a trusted account")
            os.write(fd, line)
        finally:
            os.close(fd)
    finally:
        os.close(lock_fd)


def read_jsonl(path: str, node: Optional[str] = None, limit: int = 0) -> List[Dict[str, Any]]:
    """Records of a JSON-lines log (newest last), optionally only one node's; bad lines are
    skipped, and so is a log that is not root's (:mod:`slurmkit.core.trust`)."""
    out: List[Dict[str, Any]] = []
    try:
        raw = trust.read_trusted(path, max_bytes=1 << 30)
    except OSError:
        return []
    for line in (raw or b"").decode("utf-8", "replace").splitlines():
        try:
            rec = jsontext.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and (node is None or rec.get("node") == node):
            out.append(rec)
    return out[-limit:] if limit else out


def verdict_record(
    node: str,
    hook: str,
    status: Status,
    results: List[CheckResult],
    *,
    job_id: Optional[str],
    seconds: float,
    exit_code: int,
    drain_reason: Optional[str] = None,
    internal: Optional[List[str]] = None,
    extra: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    rec = {
        "time": time.time(),
        "node": node,
        "hook": hook,
        "job_id": job_id,
        "status": status.value,
        "exit_code": exit_code,
        "seconds": round(seconds, 4),
        "drain_reason": drain_reason,
        "internal_errors": internal or [],
        "pid": os.getpid(),
        "results": [r.to_dict() for r in results],
    }
    if extra:
        rec.update(extra)
    return rec


def write_verdict_metrics(
    metrics_dir: str,
    node: str,
    hook: str,
    status: Status,
    results: List[CheckResult],
    seconds: float,
    internal_error: bool,
    untrusted_files: int = 0,
) -> str:
    from slurmkit.metrics import Sample, file_name, write_textfile

    base = {"node": node, "hook": hook}
    samples = [
        Sample(
            "slurmkit_health_status",
            "Nagios code of the last verdict: 0 ok, 1 warn, 2 fail, 3 unknown.",
            base,
            status.exit_code,
        ),
        Sample(
            "slurmkit_health_last_run_timestamp_seconds",
            "When the last verdict was written.",
            base,
            time.time(),
        ),
        Sample("slurmkit_health_duration_seconds", "How long the last run took.", base, seconds),
        Sample(
            "slurmkit_health_internal_error",
            "1 when the last run hit a slurmkit fault (bug, config, missing library) and failed open.",
            base,
            1 if internal_error else 0,
        ),
        Sample(
            "slurmkit_health_untrusted_files",
            "Files the last run ignored because a non-root account could have written them "
            "(owner, mode or directory; see docs/security.md).",
            base,
            untrusted_files,
        ),
    ]
    for r in results:
        labels = {"node": node, "hook": hook, "check": r.check}
        samples.append(
            Sample("slurmkit_health_check_status", "Nagios code per check.", labels, r.status.exit_code)
        )
        if r.value is not None:
            samples.append(
                Sample(
                    "slurmkit_health_check_value",
                    "The check's measured value (see its unit).",
                    labels,
                    float(r.value),
                )
            )
        if r.check in ("gpu_power", "gpu_temperature") and r.details:
            metric = (
                "slurmkit_gpu_power_watts" if r.check == "gpu_power" else "slurmkit_gpu_temperature_celsius"
            )
            doc = "GPU power draw." if r.check == "gpu_power" else "GPU temperature."
            for gpu, val in r.details.items():
                if isinstance(val, (int, float)):
                    samples.append(Sample(metric, doc, {"node": node, "gpu": str(gpu)}, float(val)))
    path = os.path.join(metrics_dir, file_name("slurmkit_health", hook, node))
    return write_textfile(path, samples)
