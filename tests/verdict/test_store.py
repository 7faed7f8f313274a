"""The verdict store: the shared-state API others code against."""

from __future__ import annotations

import json
import multiprocessing
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkit.errors import UsageError
from slurmkit.verdict.base import Action, CheckResult, Status
from slurmkit.verdict.store import HISTORY_LEN, VerdictStore


def r(check, status=Status.OK, value=None, ts=None, **kw):
    return CheckResult(check, status, value=value, timestamp=ts if ts is not None else time.time(), **kw)


def test_record_then_read_every_field(tmp_path):
    store = VerdictStore(str(tmp_path))
    ts = time.time() - 10
    store.record(
        "node1",
        [
            r("nvlink_bandwidth", value=390.5, ts=ts, unit="GB/s"),
            r(
                "gpu_ecc",
                Status.FAIL,
                ts=ts,
                code="GPU_ECC_DBE",
                reason="2 DBE on GPU 3",
                action=Action.RESET,
            ),
        ],
        3600,
        run_id="run-1",
    )
    entries = store.node("node1")
    assert set(entries) == {"nvlink_bandwidth", "gpu_ecc"}
    e = entries["gpu_ecc"]
    assert e["status"] == "fail" and e["code"] == "GPU_ECC_DBE" and e["action"] == "reset"
    assert e["reason"] == "2 DBE on GPU 3" and e["tier"] == "heavy" and e["run_id"] == "run-1"
    assert e["timestamp"] == pytest.approx(ts) and e["valid_until"] == pytest.approx(ts + 3600)
    assert entries["nvlink_bandwidth"]["value"] == 390.5 and entries["nvlink_bandwidth"]["unit"] == "GB/s"
    assert store.all() == {"node1": entries}
    assert store.last_pass("node1") == pytest.approx(time.time(), abs=5)
    assert store.read("node1")["last_pass_status"] == "fail"
    assert {c for c, e in store.valid("node1").items() if e["status"] == "fail"} == {"gpu_ecc"}


def test_unknown_node_reads_empty(tmp_path):
    store = VerdictStore(str(tmp_path / "absent"))
    assert store.node("node9") == {} and store.last_pass("node9") is None and store.all() == {}
    assert store.valid("node9") == {}


def test_valid_filters_on_valid_until(tmp_path):
    store = VerdictStore(str(tmp_path))
    now = time.time()
    store.record("n1", [r("old", ts=now - 100)], 50)
    store.record("n1", [r("new", ts=now - 10)], 50)
    assert set(store.valid("n1", now=now)) == {"new"}
    assert set(store.valid("n1", now=now - 60)) == {"old", "new"}
    assert store.valid("n1", now=now + 100) == {}


def test_fast_tier_record_is_not_a_complete_pass(tmp_path):
    store = VerdictStore(str(tmp_path))
    store.record("n1", [r("gpu_ecc")], 60, tier="fast")
    assert store.last_pass("n1") is None
    assert store.node("n1")["gpu_ecc"]["tier"] == "fast"
    store.record("n1", [r("nvlink_bandwidth", value=1.0)], 60)
    assert store.last_pass("n1") is not None
    assert set(store.node("n1")) == {"gpu_ecc", "nvlink_bandwidth"}  # merged, not replaced


def test_history_is_bounded(tmp_path):
    store = VerdictStore(str(tmp_path))
    for i in range(HISTORY_LEN + 5):
        store.record("n1", [r("bw", value=float(i))], 60, run_id=str(i))
    doc = store.read("n1")
    assert [v for _, v, _ in doc["history"]["bw"]] == [float(i) for i in range(5, HISTORY_LEN + 5)]
    assert len(doc["passes"]) == HISTORY_LEN


def test_write_is_atomic_and_leaves_no_temporaries(tmp_path):
    store = VerdictStore(str(tmp_path))
    store.record("n1", [r("a")], 60)
    names = sorted(os.listdir(tmp_path))
    assert names == ["._summary.lock", ".n1.lock", "_summary.json", "n1.json"]
    json.loads((tmp_path / "n1.json").read_text())


def test_corrupt_file_reads_as_never_checked(tmp_path):
    (tmp_path / "n1.json").write_text("{not json")
    (tmp_path / "n2.json").write_text("[1, 2]")
    store = VerdictStore(str(tmp_path))
    assert store.node("n1") == {} and store.node("n2") == {}
    store.record("n1", [r("a")], 60)  # and is overwritten cleanly
    assert set(store.node("n1")) == {"a"}


def _writer(root, check, count):
    store = VerdictStore(root)
    for i in range(count):
        store.record("shared-node", [CheckResult(f"{check}{i}", Status.OK, value=float(i))], 60)


def test_concurrent_writers_lose_no_update(tmp_path):
    """Two processes read-modify-write the same node file at once; every check survives."""
    ctx = multiprocessing.get_context("spawn")  # (a fork of a threaded pytest can deadlock)
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), prefix, 25)) for prefix in ("a", "b", "c")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    checks = VerdictStore(str(tmp_path)).node("shared-node")
    assert len(checks) == 75


@pytest.mark.parametrize(
    "name", ["../etc/passwd", "a/b", ".hidden", "", "x" * 200, "a b", "a\n0", "_notify", "-x"]
)
def test_hostile_node_names_are_rejected(tmp_path, name):
    store = VerdictStore(str(tmp_path))
    with pytest.raises(UsageError):
        store.record(name, [r("a")], 60)
    assert not any(p.name.endswith(".json") for p in tmp_path.rglob("*"))


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_any_name_either_rejected_or_stays_inside_root(tmp_path_factory, name):
    root = tmp_path_factory.mktemp("store")
    store = VerdictStore(str(root))
    try:
        path = store.path(name)
    except UsageError:
        return
    assert os.path.dirname(path) == str(root)
    store.record(name, [r("a")], 60)
    assert set(store.node(name)) == {"a"} and store.nodes() == [name]


def test_invalidate_ends_validity_but_keeps_history(tmp_path):
    store = VerdictStore(str(tmp_path))
    store.record("n1", [r("a", Status.FAIL, value=1.0), r("b", value=2.0)], 3600)
    assert store.invalidate("n1", ["a"]) == 1
    assert set(store.valid("n1")) == {"b"}
    assert store.invalidate("n1") == 1 and store.valid("n1") == {}
    assert store.read("n1")["history"]["a"] and store.invalidate("never-seen") == 0


def test_foreign_json_files_in_the_directory_are_not_nodes(tmp_path):
    (tmp_path / "ssubmit-index.json").write_text('{"jobs": []}')
    (tmp_path / "other.json").write_text('{"checks": {}, "node": "someone-else"}')
    store = VerdictStore(str(tmp_path))
    store.record("n1", [r("a")], 60)
    assert list(store.documents()) == ["n1"] and list(store.all()) == ["n1"]


def test_summary_tracks_passes_and_rebuilds_when_lost(tmp_path):
    store = VerdictStore(str(tmp_path))
    store.record("n1", [r("a")], 60)
    store.record("n2", [r("a", Status.FAIL)], 60)
    store.record("n3", [r("a")], 60, tier="fast")  # not a pass: not in the summary
    s = store.summary()
    assert set(s) == {"n1", "n2"} and s["n2"]["status"] == "fail"
    assert s["n1"]["last_pass"] == store.last_pass("n1")
    (tmp_path / "_summary.json").write_text("garbage")
    assert store.summary() == s  # rebuilt from the node files
    os.unlink(tmp_path / "_summary.json")
    assert {n: e["last_pass"] for n, e in store.summary().items()} == {
        n: s[n]["last_pass"] for n in ("n1", "n2")
    }
    assert json.loads((tmp_path / "_summary.json").read_text())["nodes"] == s
