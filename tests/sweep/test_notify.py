"""De-duplicated notifications: only changes, a re-notify period, a hook with a timeout."""

from __future__ import annotations

import json
import sys
import time

from slurmkit.sweep.notify import Notifier, decide
from slurmkit.verdict.base import CheckResult, Status
from slurmkit.verdict.store import VerdictStore

OK = [CheckResult("nvlink_bandwidth", Status.OK, value=400.0)]
BAD = [CheckResult("nvlink_bandwidth", Status.FAIL, "NVLINK_BW_FLOOR", "pair 0-1 at 100 GB/s")]
WORSE = BAD + [CheckResult("gpu_ecc", Status.FAIL, "GPU_ECC_UNCORRECTED", "2 errors")]


def notifier(tmp_path, **cfg):
    base = {"command": None, "timeout_s": 5.0, "renotify_s": 3600.0, "log_file": str(tmp_path / "n.jsonl")}
    base.update(cfg)
    return Notifier(VerdictStore(str(tmp_path / "store")), base)


def test_only_changes_and_renotify_period(tmp_path):
    n = notifier(tmp_path)
    t = 1_000_000.0
    assert n.observe("node1", OK, now=t) is None  # first seen, fine: not news
    assert n.observe("node1", BAD, now=t + 10).kind == "change"
    assert n.observe("node1", BAD, now=t + 20) is None  # unchanged: silent
    assert n.observe("node1", WORSE, now=t + 30).kind == "change"  # a new failing code is a change
    assert n.observe("node1", WORSE, now=t + 100) is None
    assert n.observe("node1", WORSE, now=t + 30 + 3600).kind == "renotify"
    assert n.observe("node1", WORSE, now=t + 40 + 3600) is None
    note = n.observe("node1", OK, now=t + 5000)
    assert note.kind == "recovered" and note.previous_status == "fail"
    assert n.observe("node1", OK, now=t + 100000) is None  # ok is never re-announced
    lines = [json.loads(x) for x in (tmp_path / "n.jsonl").read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["change", "change", "renotify", "recovered"]
    assert "NVLINK_BW_FLOOR" in lines[0]["message"]


def test_first_seen_bad_is_announced():
    assert decide(None, "fail", ["X"], 0.0, 10.0) == "change"
    assert decide(None, "ok", [], 0.0, 10.0) is None
    assert decide({"status": "warn", "codes": ["X"], "notified_at": 0.0}, "warn", ["X"], 5.0, 0.0) is None


def test_hook_command_gets_message_and_environment(tmp_path):
    out = tmp_path / "hook.out"
    script = (
        "import os,sys; open(sys.argv[1],'w').write(sys.stdin.read() + '|' + "
        "os.environ['SLURMKIT_NODE'] + '|' + os.environ['SLURMKIT_STATUS'] + '|' + "
        "os.environ['SLURMKIT_CODES'])"
    )
    n = notifier(tmp_path, command=[sys.executable, "-c", script, str(out)])
    hostile = "node-1"  # node names are validated; the reason text is hostile instead
    bad = [CheckResult("x", Status.FAIL, "CODE_A", "$(touch pwned); `id`; 'q\"")]
    assert n.observe(hostile, bad, now=1.0).kind == "change"
    msg, node, status, codes = out.read_text().split("|")
    assert "$(touch pwned)" in msg and node == "node-1" and status == "fail" and codes == "CODE_A"
    assert not (tmp_path / "pwned").exists()


def test_hanging_hook_is_killed_and_does_not_fail(tmp_path):
    n = notifier(tmp_path, command=[sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)
    t0 = time.monotonic()
    assert n.observe("node1", BAD, now=1.0).kind == "change"
    assert time.monotonic() - t0 < 10


def test_string_command_is_split_like_a_shell(tmp_path):
    out = tmp_path / "o"
    n = notifier(
        tmp_path, command=[f'{sys.executable} -c \'import sys; open(sys.argv[1],"w").write("hi")\' {out}']
    )
    n.observe("node1", BAD, now=1.0)
    assert out.read_text() == "hi"


def test_the_notification_log_is_never_appended_through_a_link_in_a_shared_dir(tmp_path):
    """Old: ``open(log_file, "a")`` followed a symlink: with the log in a directory users can
    write, a user's link made the sweep append to any file it could write (issue 25 audit)."""
    import os

    import pytest

    if os.geteuid() != 0:
        pytest.skip("a link owned by another user needs lchown (root)")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    link = shared / "n.jsonl"
    link.symlink_to(victim)
    os.lchown(link, 65534, 65534)
    n = notifier(tmp_path, log_file=str(link))
    assert n.observe("node1", BAD, now=1.0).kind == "change"  # announced; the log line is refused
    assert victim.read_text() == "root's\n"
