"""The rules the node side depends on, each pinned by a test that runs without root
(tests/security repeats the hostile-user versions as root, on the devcluster).

Every test here was written against a one-line mutation that the rest of the suite let
through (issue 30): the trust rule checking only the file's own directory, the lock
following a planted symlink, a decided FAIL turned into 0 by a later exception or by the
watchdog, the Xid cursor moving before the sticky FAIL is written, and the kernel log's
"fallen off the bus" de-duplication window.
"""

from __future__ import annotations

import os
import stat
import time

import pytest

from slurmkit.core import trust
from slurmkit.health.catalog import CATALOG
from slurmkit.health.checks import kmsg, xid
from slurmkit.health.engine import run_one
from slurmkit.hooks import gate
from slurmkit.verdict.base import Status

# --------------------------------------------------------------------------- the trust rule


def _trusted_tree(tmp_path):
    """``tmp_path/anc/mid/state.json``: every directory 0755, the file 0644, all ours."""
    mid = tmp_path / "anc" / "mid"
    mid.mkdir(parents=True)
    for d in (tmp_path / "anc", mid):
        d.chmod(0o755)
    f = mid / "state.json"
    f.write_text('{"ok": 1}')
    f.chmod(0o644)
    return tmp_path / "anc", mid, f


def test_a_sound_tree_is_trusted(tmp_path):
    _, _, f = _trusted_tree(tmp_path)
    assert trust.read_trusted(str(f)) == b'{"ok": 1}'


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_a_group_or_world_writable_ancestor_is_refused(tmp_path, mode):
    """Not only the file's own directory: anyone who can write an ancestor can rename the
    sound subtree away and put their own in its place."""
    anc, _, f = _trusted_tree(tmp_path)
    anc.chmod(mode)
    with pytest.raises(trust.UntrustedFile) as err:
        trust.open_trusted(str(f))
    assert str(anc) in err.value.why and "writable by group or others" in err.value.why
    assert trust.read_trusted(str(f)) is None
    assert trust.dir_problem(str(f.parent)) is not None


def test_a_sticky_ancestor_is_sound_only_above_a_trusted_entry(tmp_path):
    """``/tmp/<root's dir>/state``: the sticky bit keeps others from swapping the entry."""
    anc, mid, f = _trusted_tree(tmp_path)
    anc.chmod(0o1777)
    assert trust.read_trusted(str(f)) == b'{"ok": 1}'
    # the file's own directory is never allowed to be writable, sticky or not
    mid.chmod(0o1777)
    with pytest.raises(trust.UntrustedFile) as err:
        trust.open_trusted(str(f))
    assert str(mid) in err.value.why


def test_a_writable_ancestor_is_refused_through_a_symlinked_path(tmp_path):
    """A trusted link is followed, and every directory on the way to its target is judged."""
    anc, _, f = _trusted_tree(tmp_path)
    anc.chmod(0o777)
    link = tmp_path / "link"
    link.symlink_to(f.parent)
    assert trust.read_trusted(str(link / f.name)) is None


def test_the_writable_dir_check_judges_ancestors_too(tmp_path):
    anc, mid, _ = _trusted_tree(tmp_path)
    assert trust.writable_dir(str(mid / "new")) is None
    anc.chmod(0o777)
    assert str(anc) in (trust.writable_dir(str(mid / "new2")) or "")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: chown to another account")
def test_an_ancestor_owned_by_another_account_is_refused_as_root(tmp_path):
    """Second layer (root only): an ancestor owned by an ordinary account."""
    anc, _, f = _trusted_tree(tmp_path)
    os.chown(anc, 65534, 65534)
    with pytest.raises(trust.UntrustedFile) as err:
        trust.open_trusted(str(f))
    assert "owned by uid 65534" in err.value.why


# --------------------------------------------------------------------------- locks


def test_a_lock_is_never_taken_through_a_planted_symlink(tmp_path):
    """``O_NOFOLLOW``: a symlink planted where the lock goes is refused, and its target is
    neither created nor locked (without it, root would create any file the link names)."""
    target = tmp_path / "victim"
    link = tmp_path / "xid-node1.lock"
    link.symlink_to(target)
    with pytest.raises(trust.UntrustedFile) as err:
        trust.lock(str(link), 0.1)
    assert "symbolic link" in err.value.why
    assert not target.exists()
    # an existing target: still refused, and its mode untouched
    target.write_text("")
    target.chmod(0o644)
    with pytest.raises(trust.UntrustedFile):
        trust.lock(str(link), 0.1)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_a_symlinked_state_dir_lock_refuses_the_xid_cursor(tmp_path):
    """The Xid check's own lock (0600, root's) through the same rule."""
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    elsewhere = tmp_path / "elsewhere.lock"
    os.symlink(elsewhere, xid.lock_path(str(state), "node1"))
    with pytest.raises(trust.UntrustedFile):
        with xid.locked_cursor(str(state), "node1", 0.1):
            pass
    assert not elsewhere.exists()


def test_a_lock_is_created_private_and_held(tmp_path):
    path = tmp_path / "x.lock"
    fd = trust.lock(str(path), 0.1)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        with pytest.raises(TimeoutError):
            os.close(trust.lock(str(path), 0.05))
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- the gate's decided exit code


def _capture_timers(monkeypatch):
    """Replace the watchdog's ``Timer`` by one that never starts; return the list
    the timers made land in (``.fn`` is the watchdog's function)."""
    timers = []

    class CapturedTimer:
        def __init__(self, seconds, fn):
            self.seconds, self.fn = seconds, fn
            self.daemon = True
            timers.append(self)

        def start(self):
            pass

    monkeypatch.setattr(gate, "Timer", CapturedTimer)
    return timers


@pytest.fixture
def in_process_gate(monkeypatch, gpu_fixture, site, fake_scontrol):
    """Run ``gate.run_hook`` in this process. The watchdog timer is captured, not started (it
    would ``os._exit`` the test run), and handed back for the test to fire by hand."""
    timers = _capture_timers(monkeypatch)
    # a failing node: an uncorrected ECC error on GPU 3
    gpu_fixture(lambda d: d["gpus"][3]["ecc"].update(volatile_uncorrected=2))
    fake_scontrol.set_node("node1", "ALLOCATED")
    monkeypatch.setenv("SLURMKIT_CONFIG", str(site(slurm={"bin_dir": fake_scontrol.bin_dir})))
    env = {"SLURMD_NODENAME": "node1", "SLURM_JOB_ID": "4242", "PATH": os.environ.get("PATH", "")}
    monkeypatch.setattr(gate, "_decided", None)
    return lambda hook="prolog": (gate.run_hook(hook, env=env), timers)


def test_a_failing_node_fails_in_process(in_process_gate):
    code, timers = in_process_gate()
    assert code == 1 and gate._decided == 1 and len(timers) == 1


def test_an_exception_after_the_fail_is_decided_keeps_the_fail(in_process_gate, monkeypatch, capsys):
    """A bug in the drain (or anything after the verdict) must not turn FAIL into 0."""

    def broken_drain(*args, **kwargs):
        raise RuntimeError("bug after the verdict")

    monkeypatch.setattr(gate, "guarded_drain", broken_drain)
    code, _ = in_process_gate()
    assert code == 1
    assert "internal error after the verdict" in capsys.readouterr().err


def test_an_exception_before_the_verdict_fails_open(in_process_gate, monkeypatch):
    """The other side of the rule: a bug before any verdict fails open (0)."""
    from slurmkit.health import catalog

    def broken_select(*args, **kwargs):
        raise RuntimeError("bug before the verdict")

    monkeypatch.setattr(catalog, "select", broken_select)
    code, _ = in_process_gate()
    assert code == 0 and gate._decided is None


class _Exited(Exception):
    def __init__(self, code):
        self.code = code


def _fire(timer, monkeypatch) -> int:
    def fake_exit(code):
        raise _Exited(code)

    monkeypatch.setattr(gate.os, "_exit", fake_exit)
    with pytest.raises(_Exited) as ex:
        timer.fn()
    return ex.value.code


def test_the_watchdog_exits_with_the_decided_fail(in_process_gate, monkeypatch, capsys):
    """The watchdog fired after the verdict (a hung drain or record) exits 1, not 0."""
    code, timers = in_process_gate()
    assert code == 1
    assert _fire(timers[0], monkeypatch) == 1
    assert "exiting 1 as decided" in capsys.readouterr().err


@pytest.mark.parametrize("fail_closed, expect", [(False, 0), (True, 1)])
def test_the_watchdog_before_a_verdict_fails_open_or_closed(monkeypatch, fail_closed, expect):
    timers = _capture_timers(monkeypatch)
    monkeypatch.setattr(gate, "_decided", None)
    gate._start_watchdog(1.0, "prolog", fail_closed)

    def fake_exit(code):
        raise _Exited(code)

    monkeypatch.setattr(gate.os, "_exit", fake_exit)
    with pytest.raises(_Exited) as ex:
        timers[0].fn()
    assert ex.value.code == expect
    monkeypatch.setattr(gate, "_decided", 1)
    with pytest.raises(_Exited) as ex:
        timers[0].fn()
    assert ex.value.code == 1  # decided: fail_closed or not


# --------------------------------------------------------------------------- the Xid cursor and the sticky file


def _xid_events(*items):
    return [{"xid": x, "gpu": g, "timestamp": ts, "message": "m"} for x, g, ts in items]


def test_the_cursor_does_not_move_when_the_sticky_fail_cannot_be_written(
    gpu_fixture, ctx_factory, tmp_path, monkeypatch
):
    """Sticky first, cursor second: if the sticky file cannot be written, the event must
    stay new for the next hook (otherwise the node passes the next prolog with an Xid 79)."""
    now = time.time()
    gpu_fixture(lambda d: d.update(xid_events=_xid_events((79, 3, now - 10))))
    state = str(tmp_path / "state")
    real_add = xid.add_sticky

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(xid, "add_sticky", full_disk)
    r = run_one(ctx_factory(hook="prolog"), CATALOG["xid"], 2)
    assert (r.status, r.code) == (Status.FAIL, "XID_79")
    assert "cursor not advanced" in r.details["state_error"]
    assert xid.Cursor(xid.cursor_path(state, "node1")).since == 0.0
    assert not os.path.exists(xid.cursor_path(state, "node1"))
    # the next hook, with a working disk, still sees the event as new and keeps it
    monkeypatch.setattr(xid, "add_sticky", real_add)
    r = run_one(ctx_factory(hook="prolog"), CATALOG["xid"], 2)
    assert (r.status, r.code, r.value) == (Status.FAIL, "XID_79", 1)
    assert xid.Cursor(xid.cursor_path(state, "node1")).since == pytest.approx(now - 10)
    assert [e["xid"] for e in xid.sticky_events(state, "node1")] == [79]


def test_the_sticky_file_is_written_before_the_cursor_moves(gpu_fixture, ctx_factory, tmp_path, monkeypatch):
    """The order itself: when the cursor is written, the sticky file already holds the event."""
    now = time.time()
    gpu_fixture(lambda d: d.update(xid_events=_xid_events((79, 3, now - 10))))
    state = str(tmp_path / "state")
    seen_at_advance = []
    real_advance = xid.Cursor.advance

    def advance(self, timestamp, seen):
        seen_at_advance.append([e["xid"] for e in xid.sticky_events(state, "node1")])
        return real_advance(self, timestamp, seen)

    monkeypatch.setattr(xid.Cursor, "advance", advance)
    r = run_one(ctx_factory(hook="prolog"), CATALOG["xid"], 2)
    assert r.status == Status.FAIL
    assert seen_at_advance == [[79]]


# --------------------------------------------------------------------------- kmsg: fallen off the bus

BTIME = 1_000_000.0


def _records(fallen_at: float, xid79_at: float, pci: str = "0000:18:00"):
    """A "fallen off the bus" text line and a real Xid 79 line, ``*_at`` seconds after boot."""
    return [
        f"3,1,{int(fallen_at * 1e6)},-;NVRM: GPU {pci}.0: GPU has fallen off the bus.",
        f"3,2,{int(xid79_at * 1e6)},-;NVRM: Xid (PCI:{pci}): 79, pid=1, name=x, GPU has fallen off the bus.",
    ]


@pytest.mark.parametrize(
    "gap, kept",
    [(0.0, 1), (59.0, 1), (60.0, 1), (-60.0, 1), (60.5, 2), (61.0, 2), (-61.0, 2), (3600.0, 2)],
)
def test_fallen_off_the_bus_is_one_event_within_exactly_60_seconds(gap, kept):
    """Within 60 s (inclusive, either side) of a real Xid 79 of the same GPU the text line is
    the same event; 60.5 s or more apart, two events."""
    assert kmsg.FALLEN_DEDUP_SECONDS == 60.0
    got = kmsg.xid_records(_records(500.0, 500.0 + gap), BTIME)
    assert len(got) == kept, got
    assert all(x == 79 for _, _, x, _ in got)


def test_fallen_off_the_bus_of_another_gpu_is_never_merged():
    recs = _records(500.0, 500.0)
    recs[1] = recs[1].replace("0000:18:00", "0000:19:00")
    assert len(kmsg.xid_records(recs, BTIME)) == 2
