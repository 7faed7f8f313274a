"""Xid events: the versioned Xid -> action table, the judgement, and the per-node cursor.

The table is data (``etc/xid-actions.yaml``, its source cited in the file), so a site
can disagree with one entry without patching code. The cursor makes "new Xids since
the last check" exact even when two jobs' prologs run on one node at the same time:
the read-judge-advance sequence holds an exclusive ``flock`` (root-only lock file,
bounded wait). A failing event is also written to a root-only *sticky* file before the
cursor moves past it, so every prolog on the node sees the failure until an admin's
resume clears it, not only the one prolog that read it first.
"""

from __future__ import annotations

import os
import sys
import time

from slurmkit.chars import replace_others
from slurmkit.core import jsontext, trust
from slurmkit.core.files import write_json_atomic
from slurmkit.verdict.base import Action

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

_HERE = os.path.dirname(os.path.abspath(__file__))
#: Where the table is looked for, in order: the source tree, then an installed wheel's
#: share/slurmkit (see slurmkit.resources; spelled out here to keep the prolog's imports small).
TABLE_CANDIDATES = (
    os.path.join(_HERE, "..", "..", "..", "etc", "xid-actions.yaml"),
    os.path.join(sys.prefix, "share", "slurmkit", "etc", "xid-actions.yaml"),
)


class XidTable:
    def __init__(self, data: Dict[str, Any], path: str = "<table>"):
        self.path = path
        self.version = str(data.get("version", "?"))
        self.entries: Dict[int, Dict[str, Any]] = {}
        for key, entry in (data.get("xids") or {}).items():
            self.entries[int(key)] = dict(entry or {})
        #: (code or None, label, action) per Xid 154 recovery state.
        self.recovery: List[Tuple[Optional[int], str, str]] = [
            (None if r.get("code") is None else int(r["code"]), str(r.get("match", "")), str(r["action"]))
            for r in data.get("xid154_recovery_actions") or []
        ]

    def action(self, xid: int, message: str = "", unknown: str = "monitor") -> Action:
        entry = self.entries.get(xid)
        if entry is None:
            return Action(unknown)
        act = str(entry.get("action", unknown))
        if act == "from_message":
            return self.recovery_action(message, unknown)
        return Action(act)

    def recovery_action(self, message: str, unknown: str = "monitor") -> Action:
        """The action for an Xid 154 message, judged on its target state only.

        "changed from 0x2 (Node Reboot Required) to 0x0 (None)" means the reboot is no longer
        needed: the "from" part must not decide. The numeric code is NVML's
        ``nvmlDeviceGpuRecoveryAction_t`` and wins over the label when both are there.
        """
        target = xid154_target(message)
        if target is None:
            return Action(unknown)
        code, label = target
        if code is not None:
            for c, _, a in self.recovery:
                if c == code:
                    return Action(a)
        if label:
            for _, phrase, a in self.recovery:
                if phrase and phrase.lower() == label.lower():
                    return Action(a)
        return Action(unknown)

    def describe(self, xid: int) -> str:
        entry = self.entries.get(xid) or {}
        return str(entry.get("description") or entry.get("name") or "not in the Xid table")


#: "... to 0x1 (GPU Reset Required)", "... to 0x1", "... to (GPU Reset Required)". The last
#: "to" wins, so the "from" state is never read as the target.
_XID154_TARGET = (  # re imported and this compiled on first use: the prolog rarely sees an Xid 154
    r"\bto\s+(?:(0x[0-9a-fA-F]{1,8}|\d{1,10})\b\s*)?(?:\(\s*([^()]{0,80}?)\s*\))?"
)


def xid154_target(message: str) -> Optional[Tuple[Optional[int], str]]:
    """``(code, label)`` of the state an Xid 154 message changes *to*; ``None`` if it names none."""
    import re  # not at the top: a job start imports no re (slurmkit.chars)

    found = None
    for m in re.finditer(_XID154_TARGET, message or "", re.IGNORECASE):
        if m.group(1) or m.group(2):
            found = m
    if found is None:
        return None
    raw = found.group(1)
    code = None if raw is None else int(raw, 16 if raw.lower().startswith("0x") else 10)
    return code, (found.group(2) or "").strip()


def default_table_path() -> str:
    for cand in TABLE_CANDIDATES:
        if os.path.exists(cand):
            return os.path.normpath(cand)
    return os.path.normpath(TABLE_CANDIDATES[-1])


_TABLE_CACHE: Dict[str, XidTable] = {}


def table_problem(path: Optional[str]) -> Optional[str]:
    """Why the configured table cannot be used (missing, unreadable, not a file), else
    ``None``. Cheap (one open), so every Xid check runs it: a typo in the path must show
    on the first run, not on the day the first Xid arrives."""
    if not path:
        return None
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError as exc:
        return f"Xid table {path}: {exc.strerror or exc}"
    return None


def load_table(path: Optional[str] = None) -> XidTable:
    """Load (once per process) the Xid table; a missing or broken table raises ``ConfigError``."""
    from slurmkit.errors import ConfigError

    p = path or default_table_path()
    if p not in _TABLE_CACHE:
        try:
            data = _trusted_yaml(p)
        except trust.UntrustedFile as exc:
            if not path or os.path.realpath(path) == os.path.realpath(default_table_path()):
                raise ConfigError(f"not trusted: {exc.why}", path=p) from None
            return load_table(None)  # ignore a table others could write; judge by the packaged one
        if not isinstance(data, dict) or not isinstance(data.get("xids"), dict):
            raise ConfigError("expected a mapping with an 'xids' mapping", path=p)
        for key, entry in data["xids"].items():
            act = (entry or {}).get("action", "monitor")
            if act != "from_message" and act not in {a.value for a in Action}:
                raise ConfigError(
                    f"unknown action {act!r}; valid: from_message, " + ", ".join(a.value for a in Action),
                    path=p,
                    line=data["xids"].lines.get(key),
                    key=f"xids.{key}",
                )
        for i, rec in enumerate(data.get("xid154_recovery_actions") or []):
            ok = isinstance(rec, dict) and rec.get("action") in {a.value for a in Action}
            code = rec.get("code") if isinstance(rec, dict) else None
            if not ok or (code is not None and (isinstance(code, bool) or not isinstance(code, int))):
                valid = "|".join(a.value for a in Action)
                raise ConfigError(
                    "expected {code: <int>, match: <label>, action: <" + valid + ">}",
                    path=p,
                    key=f"xid154_recovery_actions[{i}]",
                )
        _TABLE_CACHE[p] = XidTable(data, p)
    return _TABLE_CACHE[p]


def _trusted_yaml(path: str) -> Any:
    """The table's YAML, read only from a root-owned file nobody else can write (it decides
    which Xids drain a node); :class:`~slurmkit.core.trust.UntrustedFile` otherwise."""
    from slurmkit.core.yamlload import load_trusted_yaml
    from slurmkit.errors import ConfigError

    try:
        return load_trusted_yaml(path)
    except FileNotFoundError:
        raise ConfigError("cannot read: No such file or directory", path=path) from None


# ---------------------------------------------------------------------- cursor


def cursor_path(state_dir: str, node: str) -> str:
    return os.path.join(state_dir, f"xid-cursor.{replace_others(node)}.json")


def lock_path(state_dir: str, node: str) -> str:
    """The cursor's lock: 0600, root's (the old ``<cursor>.lock`` was 0644, and a lock a
    user can open is a lock a user can hold)."""
    return os.path.join(state_dir, f"xid-{replace_others(node)}.lock")


def sticky_path(state_dir: str, node: str) -> str:
    return os.path.join(state_dir, f"xid-sticky.{replace_others(node)}.json")


class locked_cursor:  # lower case: it was a contextlib function, and reads as one
    """``with locked_cursor(state_dir, node, timeout) as cursor``: hold the node's Xid cursor
    exclusively.

    Entering raises ``TimeoutError`` after ``timeout`` seconds and
    :class:`~slurmkit.core.trust.UntrustedFile` when the state directory is one others can
    write (nothing is written there then). A class rather than a ``contextlib`` generator:
    the prolog takes this lock and does not import ``contextlib``.
    """

    def __init__(self, state_dir: str, node: str, timeout: float) -> None:
        self.state_dir = state_dir
        self.node = node
        self.timeout = timeout
        self.fd: Optional[int] = None

    def __enter__(self) -> Cursor:
        why = trust.writable_dir(self.state_dir)
        if why:
            raise trust.UntrustedFile(self.state_dir, why)
        self.fd = trust.lock(lock_path(self.state_dir, self.node), self.timeout)
        try:
            return Cursor(cursor_path(self.state_dir, self.node))
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc_info: object) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


def _read_json(path: str) -> Dict[str, Any]:
    """A root-owned JSON state file as a dict; missing, untrusted or broken: ``{}``."""
    try:
        raw = trust.read_trusted(path)
        data = jsontext.loads(raw) if raw else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class Cursor:
    """The last Xid timestamp judged on this node (seconds since the epoch).

    Read only from a root-owned file in a directory nobody else can write; anything
    else reads as "no cursor" (every event in the kernel log is new), never as "seen".
    """

    def __init__(self, path: str):
        self.path = path
        self.data = _read_json(path)

    @property
    def since(self) -> float:
        try:
            value = float(self.data.get("last_timestamp", 0.0))
        except (TypeError, ValueError):
            return 0.0
        return value if value == value and value not in (float("inf"), float("-inf")) else 0.0

    def advance(self, timestamp: float, seen: int) -> None:
        if timestamp <= self.since and self.data:
            return
        self.data = {
            "last_timestamp": max(timestamp, self.since),
            "updated": time.time(),
            "events_seen": int(self.data.get("events_seen", 0) or 0) + seen,
        }
        write_json_atomic(self.path, self.data, mode=0o600)


# ---------------------------------------------------------------------- sticky failures
#
# One prolog consumes an Xid from the kernel log (the cursor moves past it); every other
# prolog on the node, concurrent or later, must still see the node as failed. A failing
# Xid is therefore written to a root-only sticky file before the cursor moves, and every
# hook reads it, until `slurmkit node resume` (or `slurmkit node clear-xid`) clears it.


def sticky_events(state_dir: str, node: str) -> List[Dict[str, Any]]:
    """The failing Xid events kept for ``node`` (oldest first)."""
    events = _read_json(sticky_path(state_dir, node)).get("events")
    return [e for e in events if isinstance(e, dict) and "xid" in e] if isinstance(events, list) else []


def add_sticky(state_dir: str, node: str, events: List[Dict[str, Any]]) -> None:
    """Keep ``events`` (failing ones) for every later hook. Raises on I/O errors: the
    caller then does not advance the cursor, so the events stay new for the next hook."""
    why = trust.writable_dir(state_dir)
    if why:
        raise trust.UntrustedFile(state_dir, why)
    kept = sticky_events(state_dir, node)
    seen = {(e.get("timestamp"), e.get("xid"), e.get("pci")) for e in kept}
    kept += [e for e in events if (e.get("timestamp"), e.get("xid"), e.get("pci")) not in seen]
    doc = {"events": kept[-100:], "updated": time.time()}
    write_json_atomic(sticky_path(state_dir, node), doc, mode=0o600)


def clear_sticky(state_dir: str, node: str) -> int:
    """Forget ``node``'s sticky Xid failures (after a repair); return how many there were."""
    n = len(sticky_events(state_dir, node))
    try:
        os.unlink(sticky_path(state_dir, node))
    except FileNotFoundError:
        pass
    return n
