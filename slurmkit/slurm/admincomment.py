"""slurmkit's efficiency summary in a job's ``AdminComment``: the token format and its codec.

The epilog (:mod:`slurmkit.hooks.efficiency`) writes one summary per job as ``sk1:`` +
hex(gzip(compact JSON)) into the accounting database's ``AdminComment``; the report
(:mod:`slurmkit.report.efficiency`) finds and decodes it. Both sides use this module,
so the format is said once. A summary is ``{"v": 1, "job": id, "nodes": {node:
{"acct": ..., "gpus": {index: {u, t, b, m, c, p}}}}, "missing": [node, ...]}``; a node
whose detail would make the token too long is collapsed to totals (``"agg": true``).
An AdminComment may hold other tools' text beside the token (space separated).
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from typing import Any, Dict, Iterable, Optional, Tuple

PREFIX = "sk1:"
FORMAT_VERSION = 1


def finite(value: Any) -> Optional[float]:
    """A finite float or ``None`` (NaN, inf and garbage are not measurements)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def encode(summary: Dict[str, Any]) -> str:
    """``sk1:`` + hex(gzip(compact JSON)), lower case.

    jobstats' layout (prefix + compressed JSON) with slurmkit's own prefix, but hex
    instead of base64: Slurm 22.05's ``sacctmgr ... set AdminComment=`` stores the value
    lower-cased (verified on the devcluster), which would corrupt base64. Lower-case hex
    survives it and decodes in C (``bytes.fromhex``; Python's base32 decoder is pure
    Python, 40x slower, and the report decodes one summary per job).
    """
    raw = json.dumps(summary, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return PREFIX + gzip.compress(raw, mtime=0).hex()


def is_token(text: str) -> bool:
    return text[: len(PREFIX)].lower() == PREFIX


class SummaryError(ValueError):
    """An AdminComment token that claims to be ours but does not decode."""


def decode(token: str) -> Dict[str, Any]:
    """The summary from an ``sk1:`` token (any case); raises :class:`SummaryError`."""
    if not is_token(token):
        raise SummaryError(f"not an {PREFIX} token")
    try:
        # wbits 31: a gzip stream, decoded in C without the gzip module's Python header parsing
        raw = zlib.decompress(bytes.fromhex(token[len(PREFIX) :]), 31)
        data = json.loads(raw.decode("utf-8"), parse_constant=reject_constant)
    except SummaryError:
        raise
    except Exception as exc:
        raise SummaryError(f"undecodable {PREFIX} payload ({type(exc).__name__})") from None
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
        raise SummaryError(f"{PREFIX} payload is not a summary (no nodes)")
    return data


def reject_constant(name: str) -> Any:
    """``json.loads``' ``parse_constant``: NaN and infinity are not measurements."""
    raise SummaryError(f"{name} in {PREFIX} payload")


def find_token(admin_comment: str) -> Optional[str]:
    """Our token inside an AdminComment that may hold other tools' text (space separated)."""
    for part in (admin_comment or "").split():
        if is_token(part):
            return part
    return None


def foreign_text(admin_comment: str) -> str:
    """What another tool put into AdminComment (everything but our token)."""
    return " ".join(p for p in (admin_comment or "").split() if not is_token(p))


def job_summary(
    job_id: str, nodes: Dict[str, Dict[str, Any]], missing: Iterable[str] = (), max_chars: int = 16000
) -> Tuple[Dict[str, Any], str]:
    """The merged job summary and its token; collapses per-GPU detail to per-node totals
    (``"agg": true``) when the token would be longer than ``max_chars``."""
    summary = {"v": FORMAT_VERSION, "job": job_id, "nodes": nodes, "missing": sorted(missing)}
    token = encode(summary)
    if len(token) > max_chars:
        summary["nodes"] = {n: aggregate_node(s) for n, s in nodes.items()}
        token = encode(summary)
    return summary, token


def aggregate_node(node: Dict[str, Any]) -> Dict[str, Any]:
    """One node's GPUs collapsed to totals: count, touched, busy seconds, peak memory."""
    gpus = list((node.get("gpus") or {}).values())
    known = [g for g in gpus if "a" not in g and g.get("b") is not None]
    return {
        "acct": node.get("acct"),
        "agg": True,
        "n": len(gpus),
        "known": len(known),
        "touched": sum(1 for g in known if (g.get("p") or 0) > 0),
        "b": round(sum(g["b"] for g in known), 1),
        "t": max((g.get("t") or 0 for g in known), default=0),
        "m": max((g.get("m") or 0 for g in known), default=0),
        "c": max((g.get("c") or 0 for g in gpus), default=0),
    }
