"""De-duplicated notifications: announce changes, re-announce a bad state now and then.

Why: a cron job that mails every 4 hours that node17 is still drained is ignored by
the second day; that alert fatigue is why NHC ships ``nhc-wrapper -X 12h``. Here a
node's *state key* is its overall status plus the sorted codes of its non-ok checks.
A notification goes out when the key changes (including back to ok: "recovered"),
or when a non-ok key has not been announced for ``renotify_s``.

State lives in ``<store root>/_notify/<node>.json`` (same atomic-write and fcntl
rules as the verdict store), so sweep jobs on different nodes never contend and a
notification is decided once even when two runs race.

Delivery: always one log line (``slurmkit.sweep.notify`` logger, stderr); optionally a
JSON line appended to ``log_file``; optionally a hook command run through the shared
runner with a timeout, the message on stdin and ``SLURMKIT_NODE``,
``SLURMKIT_STATUS``, ``SLURMKIT_CODES``, ``SLURMKIT_PREVIOUS_STATUS`` in its
environment (never a shell: the node name and reasons cannot inject commands).
A failing or hanging hook is logged and never fails the sweep.
"""

from __future__ import annotations

import logging
import os
import shlex
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional

from slurmkit.core import trust
from slurmkit.errors import ExternalCommandError
from slurmkit.verdict import record
from slurmkit.verdict.base import CheckResult, Status, worst
from slurmkit.verdict.store import VerdictStore, check_node_name

log = logging.getLogger("slurmkit.sweep.notify")


@dataclass
class Notification:
    node: str
    status: str
    codes: List[str]
    previous_status: Optional[str]
    kind: str  # "change", "renotify" or "recovered"
    message: str

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)


def state_key(results: Iterable[CheckResult]) -> tuple:
    """(worst status, sorted codes of the non-ok results)."""
    results = list(results)
    return worst(results).value, sorted({r.code for r in results if r.status is not Status.OK})


def decide(
    previous: Optional[Mapping[str, Any]], status: str, codes: List[str], now: float, renotify_s: float
) -> Optional[str]:
    """Whether to notify: ``"change"``, ``"recovered"``, ``"renotify"`` or ``None``.

    A node seen for the first time in the ok state is not announced (a new node that
    is fine is not news); first seen in a bad state is a change.
    """
    if previous is None:
        return None if status == Status.OK.value else "change"
    if previous.get("status") != status or list(previous.get("codes") or []) != codes:
        return "recovered" if status == Status.OK.value else "change"
    if (
        status != Status.OK.value
        and renotify_s > 0
        and now - float(previous.get("notified_at") or 0) >= renotify_s
    ):
        return "renotify"
    return None


class Notifier:
    def __init__(self, store: VerdictStore, cfg: Mapping[str, Any]):
        self.root = os.path.join(store.root, "_notify")
        self.state_store = VerdictStore(self.root)  # reuse its locking and atomic writes
        self.cfg = cfg

    def _command(self) -> Optional[List[str]]:
        cmd = self.cfg.get("command")
        if not cmd:
            return None
        if isinstance(cmd, str):
            return shlex.split(cmd)
        if len(cmd) == 1 and " " in cmd[0]:
            return shlex.split(cmd[0])
        return list(cmd)

    def observe(
        self, node: str, results: Iterable[CheckResult], now: Optional[float] = None, extra: str = ""
    ) -> Optional[Notification]:
        """Record ``node``'s latest results; deliver and return a notification if due."""
        check_node_name(node)
        now = time.time() if now is None else now
        results = list(results)
        status, codes = state_key(results)
        decision: Dict[str, Any] = {}

        def apply(doc: Dict[str, Any]) -> None:
            prev = doc.get("notify")
            kind = decide(prev, status, codes, now, float(self.cfg.get("renotify_s", 43200.0)))
            decision["kind"] = kind
            decision["previous"] = (prev or {}).get("status")
            notified_at = now if kind else (prev or {}).get("notified_at", 0.0)
            doc["notify"] = {"status": status, "codes": codes, "notified_at": notified_at, "seen_at": now}

        self.state_store.update(node, apply)
        kind = decision["kind"]
        if not kind:
            return None
        bad = [r for r in results if r.status is not Status.OK]
        if kind == "recovered":
            message = f"{node}: recovered, all checks ok (was {decision['previous']})"
        else:
            detail = "; ".join(f"{r.check}: {r.status.value} {r.code} {r.reason}" for r in bad[:5])
            more = f" (+{len(bad) - 5} more)" if len(bad) > 5 else ""
            again = " (still)" if kind == "renotify" else ""
            message = f"{node}: {status}{again}: {detail}{more}"
        if extra:
            message += f" [{extra}]"
        note = Notification(node, status, codes, decision["previous"], kind, message)
        self.deliver(note)
        return note

    def deliver(self, note: Notification) -> None:
        level = logging.INFO if note.status == Status.OK.value else logging.WARNING
        log.log(level, "notify %s: %s", note.kind, note.message)
        log_file = self.cfg.get("log_file")
        if log_file:
            # root's (or the sweep account's) append: the health log's rule, so a link a user
            # planted there, or a directory others can write, is refused rather than followed
            try:
                record.append_jsonl(log_file, dict(note.to_dict(), time=time.time()))
            except (OSError, TimeoutError, trust.UntrustedFile) as exc:
                log.error("notify: cannot append to %s: %s", log_file, getattr(exc, "strerror", None) or exc)
        argv = self._command()
        if argv:
            from slurmkit.slurm import runner

            env = dict(
                os.environ,
                SLURMKIT_NODE=note.node,
                SLURMKIT_STATUS=note.status,
                SLURMKIT_CODES=",".join(note.codes),
                SLURMKIT_PREVIOUS_STATUS=note.previous_status or "",
                SLURMKIT_NOTIFY_KIND=note.kind,
            )
            try:
                runner.run(
                    argv,
                    timeout=float(self.cfg.get("timeout_s", 10.0)),
                    input=note.message + "\n",
                    env=env,
                    check=True,
                )
            except ExternalCommandError as exc:
                log.error("notify hook failed: %s", exc)
