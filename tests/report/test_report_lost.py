"""slurmkit.report.lost, rule by rule: the prolog-requeue test, the health log's drain
records, and the suspect windows. Written to kill the mutants etc/dev/mutation.sh found
surviving (docs/testing.md); the engines' agreement on the same rules is in
test_report_edges.py."""

from __future__ import annotations

import json

import pytest

from slurmkit.report import sacct
from slurmkit.report.lost import (
    PROLOG_CAUSE,
    DrainEvent,
    SuspectTest,
    _is_drain,
    is_prolog_requeue,
    read_health_log,
    reference_lost,
    reference_suspect,
)
from slurmkit.report.window import resolve_window

BASE = 1792800000


def attempts(*rows):
    """Attempts from ``(state, start, end, reason, nodes)`` rows of one job (JobIDRaw 7)."""
    lines = [
        "|".join(
            [
                "7",
                "7",
                st,
                "gres/gpu=1",
                str(BASE - 60),
                str(s),
                str(e),
                "0",
                "u",
                "a",
                "p",
                nodes,
                reason,
                "n",
            ]
        )
        for st, s, e, reason, nodes in rows
    ]
    got, _ = sacct.parse_rows(
        lines, list(sacct.FIELDS), sep="|", window=resolve_window(default_unbounded=True), now=BASE + 86400
    )
    return got


@pytest.mark.parametrize(
    "reason, seconds, expect",
    [
        ("None", 3600, False),
        ("launch_failed_requeued_held", 3600, True),
        ("Prolog", 3600, True),
        ("PROLOG error", 3600, True),
        ("ReqNodeNotAvail", 60, True),
    ],
)
def test_is_prolog_requeue_by_reason_or_duration(reason, seconds, expect):
    (a,) = attempts(("REQUEUED", BASE, BASE + seconds, reason, "node1"))
    assert is_prolog_requeue(a) is expect


def test_only_a_requeued_attempt_is_a_prolog_requeue():
    (a,) = attempts(("FAILED", BASE, BASE + 5, "Prolog", "node1"))
    assert is_prolog_requeue(a) is False


def test_reference_lost_uses_the_given_boundary():
    rows = attempts(
        ("REQUEUED", BASE, BASE + 200, "None", "node1"), ("FAILED", BASE + 300, BASE + 900, "None", "n")
    )
    assert reference_lost(rows) == {0: "REQUEUED"}
    assert reference_lost(rows, 200) == {0: "REQUEUED", 1: PROLOG_CAUSE}
    assert reference_lost(rows, 199) == {0: "REQUEUED"}


def test_a_failed_attempt_naming_a_launch_failure_follows_any_requeue():
    rows = attempts(
        ("REQUEUED", BASE, BASE + 3600, "None", "node1"),
        ("FAILED", BASE + 4000, BASE + 5000, "launch_failed_requeued_held", "node1"),
    )
    assert reference_lost(rows) == {0: "REQUEUED", 1: PROLOG_CAUSE}


def test_only_the_attempt_right_after_the_requeue_is_lost():
    rows = attempts(
        ("REQUEUED", BASE, BASE + 10, "None", "node1"),
        ("COMPLETED", BASE + 100, BASE + 200, "None", "node1"),
        ("FAILED", BASE + 300, BASE + 400, "None", "node1"),
    )
    assert reference_lost(rows) == {0: "REQUEUED"}


# --------------------------------------------------------------------------- the health log


@pytest.mark.parametrize(
    "rec, drain",
    [
        ({"drain_reason": "slurmkit:X c: d"}, True),
        ({"drained": True}, True),
        ({"drained": "yes"}, False),
        ({"drained": False, "status": "fail"}, True),  # no drain_reason key: the status decides
        ({"event": "drain"}, True),
        ({"event": "resume"}, False),
        ({"status": "fail"}, True),
        ({"status": "fail", "drain_reason": None}, False),  # the hook said: no drain
        ({"status": "fail", "drain_reason": ""}, False),
        ({"status": "ok"}, False),
        ({}, False),
    ],
)
def test_is_drain(rec, drain):
    assert _is_drain(rec) is drain


def test_read_health_log_events_counts_and_bad_lines(tmp_path, caplog):
    lines = [
        {"node": "n1", "time": 100, "status": "fail", "drain_reason": "slurmkit:XID_79 xid: GPU 3: Xid 79"},
        {"node": "n2", "timestamp": 200.5, "drained": True, "code": "C", "check": "k"},
        {"node": "n3", "time": 300, "event": "drain", "code": "OWN", "drain_reason": "slurmkit:OTHER chk: x"},
        {"node": "n4", "time": 400, "status": "fail"},
        {"node": "n5", "time": 500, "status": "ok", "drain_reason": None},
        {"node": "n6", "time": 600, "drain_reason": "admin: not ours"},
        {"time": 700, "drain_reason": "slurmkit:X c: d"},  # no node: bad
        {"node": "n8", "time": "soon", "drain_reason": "slurmkit:X c: d"},  # bad time
    ]
    path = tmp_path / "health.jsonl"
    text = "".join(json.dumps(x) + "\n" for x in lines) + "not json\n[1, 2]\n\n   \n"
    path.write_text(text)
    with caplog.at_level("WARNING", logger="slurmkit.report"):
        hl = read_health_log(str(path))
    assert hl.path == str(path)
    assert hl.records == 10 and hl.bad_lines == 4
    assert [(e.node, e.timestamp, e.code, e.check) for e in hl.events] == [
        ("n1", 100.0, "XID_79", "xid"),
        ("n2", 200.5, "C", "k"),
        ("n3", 300.0, "OWN", ""),  # its own code wins; the reason is not parsed then
        ("n4", 400.0, "", ""),
        ("n6", 600.0, "", ""),
    ]
    assert "skipped 4 unreadable line(s)" in caplog.text


def test_read_health_log_glob_takes_rotated_files(tmp_path):
    rec = json.dumps({"node": "n1", "time": 1, "status": "fail"}) + "\n"
    (tmp_path / "health.jsonl").write_text(rec)
    (tmp_path / "health.jsonl.1").write_text(rec + rec)
    (tmp_path / "other.jsonl").write_text(rec)
    assert read_health_log(str(tmp_path / "health.jsonl")).records == 1
    hl = read_health_log(str(tmp_path / "health.jsonl*"))
    assert hl.records == 3 and len(hl.events) == 3 and hl.path == str(tmp_path / "health.jsonl*")
    assert read_health_log(str(tmp_path / "health.jsonl.[0-9]")).records == 2
    assert read_health_log(str(tmp_path / "nothing*")) is None
    assert read_health_log(str(tmp_path / "missing.jsonl")) is None


def test_read_health_log_skips_an_unreadable_file_and_reads_the_rest(tmp_path):
    rec = json.dumps({"node": "n1", "time": 1, "status": "fail"}) + "\n"
    (tmp_path / "h.jsonl.0").mkdir()  # matched by the glob, cannot be opened as a file
    (tmp_path / "h.jsonl.1").write_text(rec)
    hl = read_health_log(str(tmp_path / "h.jsonl.*"))
    assert hl.records == 1 and len(hl.events) == 1


def test_read_health_log_replaces_bad_utf8(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_bytes(b'{"node": "n\xff", "time": 1, "status": "fail"}\n')
    hl = read_health_log(str(path))
    assert [e.node for e in hl.events] == ["n\ufffd"] and hl.bad_lines == 0


# --------------------------------------------------------------------------- suspect windows


def test_suspect_windows_by_node_and_hours():
    rows = attempts(
        ("COMPLETED", BASE, BASE + 100, "None", "node1"),  # 0: ends 2 h before the drain: in a 2 h window
        ("COMPLETED", BASE, BASE + 99, "None", "node1"),  # 1: one second short of it
        ("COMPLETED", BASE + 7300, BASE + 7400, "None", "node1"),  # 2: after the drain
        ("COMPLETED", BASE, BASE + 7300, "None", "node[1-2]"),  # 3: across it, on a list
        ("COMPLETED", BASE, BASE + 7300, "None", "node3"),  # 4: another node
        ("COMPLETED", BASE, BASE + 7300, "None", "bad["),  # 5: a node list that does not parse
        ("COMPLETED", BASE + 7200, BASE + 7300, "None", "node2"),  # 6: starts exactly at node2's drain
    )
    drains = [DrainEvent("node1", BASE + 7300), DrainEvent("node2", BASE + 7200)]
    assert reference_suspect(rows, drains, 2.0) == {0, 2, 3, 6}
    assert reference_suspect(rows, drains, 0.0) == {2, 3, 6}
    assert reference_suspect(rows, [], 2.0) == set()
    test = SuspectTest(drains, 2.0)
    assert test.first == BASE + 7200 - 7200 and test.last == BASE + 7300
    assert [test(a) for a in rows] == [i in {0, 2, 3, 6} for i in range(len(rows))]
    assert test.expanded["node[1-2]"] == ("node1", "node2") and test.expanded["bad["] == ()


def test_a_suspect_test_without_drains_marks_nothing():
    test = SuspectTest([], 6.0)
    assert test.first == 0.0 and test.last == -1.0
    (a,) = attempts(("COMPLETED", BASE, BASE + 10, "None", "node1"))
    assert test(a) is False


def test_an_attempt_outside_every_window_is_not_expanded():
    test = SuspectTest([DrainEvent("node1", BASE + 10_000)], 1.0)
    early, late = attempts(
        ("COMPLETED", BASE, BASE + 10, "None", "node1"),
        ("COMPLETED", BASE + 10_001, BASE + 10_002, "None", "n"),
    )
    assert test(early) is False and test(late) is False
    assert test.expanded == {}


def test_a_blank_line_in_the_middle_is_skipped_not_the_end(tmp_path):
    rec = json.dumps({"node": "n1", "time": 1, "status": "fail"}) + "\n"
    path = tmp_path / "h.jsonl"
    path.write_text(rec + "\n  \n" + rec)
    hl = read_health_log(str(path))
    assert hl.records == 2 and len(hl.events) == 2 and hl.bad_lines == 0
