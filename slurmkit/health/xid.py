"""Xid events: the versioned Xid -> action table, the judgement, and the per-node cursor.

The table is data (``etc/xid-actions.yaml``, its source cited in the file), so a site
can disagree with one entry without patching code. The cursor makes "new Xids since
the last check" exact even when two jobs' prologs run on one node at the same time:
the read-judge-advance sequence holds an exclusive ``flock`` on the cursor file, so
each event is judged by exactly one prolog (or epilog, or health check).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import sys
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from slurmkit.core.files import write_json_atomic
from slurmkit.health.base import Action

_HERE = os.path.dirname(os.path.abspath(__file__))
#: Where the table is looked for, in order: the source tree, then an installed wheel's
#: share/slurmkit (see slurmkit.resources; spelled out here to keep the prolog's imports small).
TABLE_CANDIDATES = (
    os.path.join(_HERE, "..", "..", "etc", "xid-actions.yaml"),
    os.path.join(sys.prefix, "share", "slurmkit", "etc", "xid-actions.yaml"),
)


class XidTable:
    def __init__(self, data: Dict[str, Any], path: str = "<table>"):
        self.path = path
        self.version = str(data.get("version", "?"))
        self.entries: Dict[int, Dict[str, Any]] = {}
        for key, entry in (data.get("xids") or {}).items():
            self.entries[int(key)] = dict(entry or {})
        self.recovery: List[Tuple[str, str]] = [
            (str(r["match"]), str(r["action"])) for r in data.get("xid154_recovery_actions") or []
        ]

    def action(self, xid: int, message: str = "", unknown: str = "monitor") -> Action:
        entry = self.entries.get(xid)
        if entry is None:
            return Action(unknown)
        act = str(entry.get("action", unknown))
        if act == "from_message":
            for phrase, a in self.recovery:
                if phrase.lower() in message.lower():
                    return Action(a)
            return Action(unknown)
        return Action(act)

    def describe(self, xid: int) -> str:
        entry = self.entries.get(xid) or {}
        return str(entry.get("description") or entry.get("name") or "not in the Xid table")


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
    from slurmkit.core.yamlload import load_yaml_file
    from slurmkit.errors import ConfigError

    p = path or default_table_path()
    if p not in _TABLE_CACHE:
        data = load_yaml_file(p)
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
        _TABLE_CACHE[p] = XidTable(data, p)
    return _TABLE_CACHE[p]


# ---------------------------------------------------------------------- cursor

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def cursor_path(state_dir: str, node: str) -> str:
    return os.path.join(state_dir, f"xid-cursor.{_SAFE.sub('_', node)}.json")


@contextlib.contextmanager
def locked_cursor(state_dir: str, node: str, timeout: float) -> Iterator["Cursor"]:
    """Hold the node's Xid cursor exclusively; ``TimeoutError`` after ``timeout`` seconds."""
    os.makedirs(state_dir, exist_ok=True)
    path = cursor_path(state_dir, node)
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"Xid cursor {path} is locked by another check") from None
                time.sleep(0.01)
        yield Cursor(path)
    finally:
        os.close(fd)


class Cursor:
    """The last Xid timestamp judged on this node (seconds since the epoch)."""

    def __init__(self, path: str):
        self.path = path
        try:
            with open(path, encoding="utf-8") as fh:
                self.data = json.load(fh)
        except (OSError, ValueError):
            self.data = {}

    @property
    def since(self) -> float:
        return float(self.data.get("last_timestamp", 0.0))

    def advance(self, timestamp: float, seen: int) -> None:
        if timestamp <= self.since and self.data:
            return
        self.data = {
            "last_timestamp": max(timestamp, self.since),
            "updated": time.time(),
            "events_seen": int(self.data.get("events_seen", 0)) + seen,
        }
        write_json_atomic(self.path, self.data)
