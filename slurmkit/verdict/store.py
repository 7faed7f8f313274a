"""The verdict store: per-node health results on shared storage.

Why a store: a prolog has seconds, a sweep has minutes. The sweep writes what it
measured (value, verdict, when, valid until when) so that

* the prolog can report a heavy verdict that is still valid instead of re-running it,
* ``ssubmit``'s requeue-with-exclude can avoid nodes with a failing valid verdict,
* the usage report can join node health to job failures,
* the sweep planner can rotate by "time since the last complete pass",
* the outlier rule can compare a node with its peers without a baseline file.

Layout: one JSON file per node, ``<root>/<node>.json``, so writers on different
nodes never contend, and a reader sees either the old or the new file (each write is
a temporary file in the same directory, fsync'd, then ``rename``d over the old one).
A read-modify-write of one node's file holds an exclusive ``fcntl`` lock on
``<root>/.<node>.lock``; fcntl (POSIX) locks work on local filesystems and on NFS
with a lock manager (NFSv4, or NFSv3 with lockd), unlike ``flock`` on some NFS
clients. Readers take no lock.

Node file format (``version`` 1)::

    {"version": 1, "node": "node1",
     "checks": {"<check>": {"status", "code", "value", "unit", "reason", "action",
                            "timestamp", "valid_until", "tier", "run_id"}},
     "last_pass": 1764400000.0,           # time of the last complete (heavy) pass
     "last_pass_status": "ok",            # worst status of that pass
     "passes": [{"run_id", "timestamp", "status", "tier", "checks"}],   # newest last
     "history": {"<check>": [[timestamp, value, run_id], ...]},         # newest last
     "meta": {"gpu_model": "h100"}}

A summary, ``<root>/_summary.json`` (``{node: {"last_pass", "status"}}``), is
updated after every complete pass under its own lock. It is a cache: the planner
reads one file instead of one per node (docs/benchmarks.md, "Sweep planning"), and a
missing or unreadable summary is rebuilt from the node files.

The store never raises on a corrupt or foreign file when reading: a node whose file
cannot be parsed reads as "never checked" (and is logged), so one bad file cannot stop
every prolog on the cluster.

Trust (docs/security.md): every file is read through :mod:`slurmkit.core.trust`, opened
``O_NONBLOCK | O_NOFOLLOW`` and believed only if it is a regular file owned by root or
the store's owner (``paths.shared_owner``, the account the sweep jobs run as), not
writable by group or others, in a directory chain nobody else can write. A forged
verdict (any other owner, a 1777 directory) is ignored with a log line and counted; a
FIFO in place of a verdict cannot block the reader. Locks wait at most
``lock_timeout`` seconds (:class:`StoreLockTimeout`), so a stuck lock holder or NFS
lock manager cannot hang a sweep for ever. Callers on a deadline (the prolog) wrap
reads in their own short timeout: a hung server is "unknown", never "fail".
"""

from __future__ import annotations

import fcntl
import os
import time

from slurmkit.core import jsontext, trust
from slurmkit.core.files import write_json_atomic
from slurmkit.errors import ConfigError, UsageError
from slurmkit.slurm.jobenv import is_node_name
from slurmkit.values import is_finite
from slurmkit.verdict.base import CheckResult, Tier, worst

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Optional


def _log():
    """The store's logger, imported on use: it speaks only on rare paths (an unreadable or
    foreign document), and the prolog reads the store without importing ``logging``."""
    import logging

    return logging.getLogger("slurmkit.verdict.store")


FORMAT_VERSION = 1
#: Passes and per-check values kept per node: enough for a robust "recent" median,
#: small enough that 10,000 node files load in well under a second.
HISTORY_LEN = 10
COMPLETE_PASS_TIERS = frozenset({Tier.HEAVY.value})
SUMMARY_FILE = "_summary.json"
SUMMARY_LOCK = "._summary.lock"  # node names cannot start with "_", so no node shares it

#: Seconds a writer waits for a node's (or the summary's) lock before giving up.
LOCK_TIMEOUT = 30.0
#: Largest node document read (history is capped, so a real one is a few KiB).
MAX_DOC_BYTES = 4 * 1024 * 1024


class StoreLockTimeout(TimeoutError):
    """A store lock stayed held past ``lock_timeout``: the write is skipped, not hung."""


_ENTRY_KEYS = ("status", "code", "value", "unit", "reason", "action", "timestamp", "valid_until", "tier")


def check_node_name(name: str) -> str:
    """Reject names that could escape the store directory or collide with its own files.

    Slurm node names are host names: letters, digits, ``-``, ``_`` and ``.``.
    """
    if not isinstance(name, str) or not is_node_name(name) or name in (".", ".."):
        raise UsageError(f"invalid node name {name!r}: expected letters, digits, '.', '-' or '_'")
    return name


def empty_doc(name: str) -> Dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "node": name,
        "checks": {},
        "last_pass": None,
        "last_pass_status": None,
        "passes": [],
        "history": {},
        "meta": {},
    }


def for_paths(paths: Dict[str, Any]) -> "VerdictStore":
    """The store of a validated ``paths`` section (``shared_dir`` owned by ``shared_owner``)."""
    return VerdictStore(paths["shared_dir"], owner=paths.get("shared_owner"))


def still_valid(entry: Dict[str, Any], now: float) -> bool:
    """The one validity rule for a stored verdict (the prolog's ``heavy_cache``, ssubmit's
    requeue-with-exclude, :meth:`VerdictStore.valid` and ``slurmkit sweep status`` use it):
    ``valid_until`` is a finite number of
    seconds after ``now``. A verdict without one, or with anything else there, has expired:
    no verdict is valid for ever."""
    value = entry.get("valid_until")
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and is_finite(value) and value > now
    )


class _StoreLock:
    """``with``: the store's exclusive ``lockf`` lock on ``lock_path`` (a class rather than a
    ``contextlib`` generator: the prolog reads the store and does not import ``contextlib``)."""

    def __init__(self, store: VerdictStore, lock_path: str) -> None:
        self.store = store
        self.lock_path = lock_path
        self.fd: Optional[int] = None

    def __enter__(self) -> None:
        self.store._ensure_root()
        try:
            self.fd = trust.lock(
                self.lock_path, self.store.lock_timeout, posix=True, owners=self.store.owners
            )
        except TimeoutError as exc:
            raise StoreLockTimeout(str(exc)) from None

    def __exit__(self, *exc_info: object) -> None:
        fd, self.fd = self.fd, None
        if fd is None:
            return
        try:
            fcntl.lockf(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


class VerdictStore:
    """A directory of per-node JSON verdict files (see the module docstring).

    ``owner``: the account (name or uid) besides root and the caller whose files are
    believed, i.e. the one the sweep jobs run as.
    """

    def __init__(self, root: str, owner: Any = None, lock_timeout: Optional[float] = None):
        self.root = os.path.abspath(os.fspath(root))
        uid = trust.uid_of(owner)
        self.owners = trust.trusted_uids(() if uid is None else (uid,))
        self.lock_timeout = LOCK_TIMEOUT if lock_timeout is None else lock_timeout

    # ----------------------------------------------------------------- paths, io

    def path(self, name: str) -> str:
        return os.path.join(self.root, check_node_name(name) + ".json")

    def _lock_path(self, name: str) -> str:
        return os.path.join(self.root, "." + check_node_name(name) + ".lock")

    def _ensure_root(self) -> None:
        why = trust.writable_dir(self.root, 0o755, self.owners)
        if why:
            raise ConfigError(f"refusing to write the verdict store: {why}", path=self.root)

    def locked(self, name: str):
        """Hold the exclusive lock for one node's read-modify-write."""
        return self._lock(self._lock_path(name))

    def _lock(self, lock_path: str) -> _StoreLock:
        return _StoreLock(self, lock_path)

    def _read_existing(self, name: str) -> Optional[Dict[str, Any]]:
        """The node document, or ``None`` when there is none (or it is not one of ours)."""
        path = self.path(name)
        doc = self._load(path)
        if doc is None:
            return None
        if not isinstance(doc, dict) or not isinstance(doc.get("checks"), dict) or doc.get("node") != name:
            _log().debug("verdict store: ignoring %s: not a slurmkit node document", path)
            return None
        base = empty_doc(name)
        base.update(doc)
        return base

    def _load(self, path: str) -> Any:
        """A trusted JSON file of the store, or ``None`` (missing, refused, unreadable)."""
        try:
            raw = trust.read_strict(path, self.owners, MAX_DOC_BYTES)
        except FileNotFoundError:
            return None
        except trust.UntrustedFile:
            return None  # logged and counted by trust
        except OSError as exc:
            _log().warning("verdict store: ignoring unreadable %s: %s", path, exc)
            return None
        try:
            return jsontext.loads(raw)
        except ValueError as exc:
            _log().warning("verdict store: ignoring unreadable %s: %s", path, exc)
            return None

    def read(self, name: str) -> Dict[str, Any]:
        """The whole node document; an empty one for a node never checked."""
        return self._read_existing(name) or empty_doc(name)

    def _write(self, name: str, doc: Dict[str, Any]) -> None:
        self._ensure_root()
        write_json_atomic(self.path(name), doc, fsync=True, mode=0o644)

    def update(self, name: str, fn) -> Dict[str, Any]:
        """Apply ``fn(doc) -> None`` to a node document under its lock; return the new doc."""
        with self.locked(name):
            doc = self.read(name)
            fn(doc)
            self._write(name, doc)
            return doc

    # ----------------------------------------------------------------- shared API

    def record(
        self,
        node: str,
        results: Iterable[CheckResult],
        valid_for_s: float,
        *,
        tier: str = "heavy",
        run_id: Optional[str] = None,
    ) -> None:
        """Merge ``results`` into ``node``'s verdicts, each valid for ``valid_for_s``
        seconds after it was measured.

        A record of the heavy tier is a complete pass: it sets ``last_pass`` (which the
        planner rotates by) and appends to the pass history. Numeric values also go to
        the per-check history used by the fleet outlier rule.
        """
        tier = tier.value if isinstance(tier, Tier) else str(tier)
        results = list(results)
        now = time.time()
        if valid_for_s < 0:
            raise ValueError("valid_for_s must be >= 0")

        def apply(doc: Dict[str, Any]) -> None:
            checks = doc.setdefault("checks", {})
            history = doc.setdefault("history", {})
            for r in results:
                ts = float(r.timestamp or now)
                checks[r.check] = {
                    "status": r.status.value,
                    "code": r.code,
                    "value": r.value,
                    "unit": r.unit,
                    "reason": r.reason,
                    "action": r.action.value,
                    "timestamp": ts,
                    "valid_until": ts + float(valid_for_s),
                    "tier": tier,
                    "run_id": run_id,
                }
                if r.value is not None and not isinstance(r.value, bool):
                    try:
                        value = float(r.value)
                    except (TypeError, ValueError):
                        continue
                    h = history.setdefault(r.check, [])
                    h.append([ts, value, run_id])
                    del h[:-HISTORY_LEN]
            if tier in COMPLETE_PASS_TIERS:
                status = worst(results).value
                doc["last_pass"] = now
                doc["last_pass_status"] = status
                passes = doc.setdefault("passes", [])
                passes.append(
                    {
                        "run_id": run_id,
                        "timestamp": now,
                        "status": status,
                        "tier": tier,
                        "checks": sorted(r.check for r in results),
                    }
                )
                del passes[:-HISTORY_LEN]

        doc = self.update(node, apply)
        if tier in COMPLETE_PASS_TIERS:
            self._update_summary(
                {node: {"last_pass": doc.get("last_pass"), "status": doc.get("last_pass_status")}}
            )

    # ----------------------------------------------------------------- summary cache

    @property
    def summary_path(self) -> str:
        return os.path.join(self.root, SUMMARY_FILE)

    def _read_summary(self) -> Optional[Dict[str, Dict[str, Any]]]:
        data = self._load(self.summary_path)
        if (
            not isinstance(data, dict)
            or data.get("version") != FORMAT_VERSION
            or not isinstance(data.get("nodes"), dict)
        ):
            return None
        return data["nodes"]

    def _write_json(self, path: str, data: Any) -> None:
        write_json_atomic(path, data, fsync=True, mode=0o644)

    def _update_summary(self, entries: Dict[str, Dict[str, Any]]) -> None:
        with self._lock(os.path.join(self.root, SUMMARY_LOCK)):
            nodes = self._read_summary()
            if nodes is None:
                nodes = self._scan_summary()
            nodes.update(entries)
            self._write_json(self.summary_path, {"version": FORMAT_VERSION, "nodes": nodes})

    def _scan_summary(self) -> Dict[str, Dict[str, Any]]:
        return {
            n: {"last_pass": d.get("last_pass"), "status": d.get("last_pass_status")}
            for n, d in self.documents().items()
            if d.get("last_pass") is not None
        }

    def summary(self) -> Dict[str, Dict[str, Any]]:
        """``{node: {"last_pass": ts, "status": worst status}}`` for every node with a
        complete pass; from the summary cache, rebuilt from the node files if needed."""
        nodes = self._read_summary()
        if nodes is None:
            nodes = self._scan_summary()
            if os.path.isdir(self.root):
                try:
                    with self._lock(os.path.join(self.root, SUMMARY_LOCK)):
                        self._write_json(self.summary_path, {"version": FORMAT_VERSION, "nodes": nodes})
                except (OSError, ConfigError) as exc:  # a read-only reader still gets the answer
                    _log().debug("verdict store: cannot write the summary: %s", exc)
        return nodes

    def node(self, name: str) -> Dict[str, Dict[str, Any]]:
        """``{check: {status, code, value, unit, reason, action, timestamp, valid_until, tier}}``."""
        checks = self.read(name).get("checks") or {}
        return {
            c: {k: e.get(k) for k in (*_ENTRY_KEYS, "run_id")}
            for c, e in checks.items()
            if isinstance(e, dict)
        }

    def nodes(self) -> List[str]:
        """Names of the nodes that have a file in the store."""
        try:
            entries = os.scandir(self.root)
        except FileNotFoundError:
            return []
        with entries:
            names = [
                e.name[:-5] for e in entries if e.name.endswith(".json") and not e.name.startswith((".", "_"))
            ]
        return sorted(n for n in names if is_node_name(n))

    def all(self) -> Dict[str, Dict[str, Dict[str, Any]]]:
        return {n: self.node(n) for n in self.documents()}

    def documents(self) -> Dict[str, Dict[str, Any]]:
        """Every node's full document (planner, outliers, status). Other JSON files that
        share the directory are skipped."""
        out = {}
        for n in self.nodes():
            doc = self._read_existing(n)
            if doc is not None:
                out[n] = doc
        return out

    def last_pass(self, name: str) -> Optional[float]:
        lp = self.read(name).get("last_pass")
        return float(lp) if isinstance(lp, (int, float)) else None

    def valid(self, name: str, now: Optional[float] = None) -> Dict[str, Dict[str, Any]]:
        """Only the entries that are :func:`still_valid` at ``now``."""
        now = time.time() if now is None else now
        return {c: e for c, e in self.node(name).items() if still_valid(e, now)}

    # ----------------------------------------------------------------- extras

    def invalidate(
        self, name: str, checks: Optional[Iterable[str]] = None, now: Optional[float] = None
    ) -> int:
        """End the validity of ``name``'s entries (all, or only ``checks``) now.

        For a repaired node: an admin who resumed it does not want the prolog to keep
        reporting (and failing on) the verdict that got it drained. Returns how many
        entries were cut short. The history used by the outlier rule is kept.
        """
        now = time.time() if now is None else now
        wanted = None if checks is None else set(checks)
        count = [0]

        def apply(doc: Dict[str, Any]) -> None:
            for check, entry in (doc.get("checks") or {}).items():
                if (wanted is None or check in wanted) and float(entry.get("valid_until") or 0) > now:
                    entry["valid_until"] = now
                    count[0] += 1

        if self._read_existing(name) is not None:
            self.update(name, apply)
        return count[0]

    def set_meta(self, name: str, **fields: Any) -> None:
        """Remember facts about a node (its GPU model) next to its verdicts."""
        self.update(name, lambda doc: doc.setdefault("meta", {}).update(fields))
