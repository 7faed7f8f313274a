"""slurmkit.health.checks.xid function by function: the table (parsing, validation, trust, look-ups,
Xid 154 targets), the cursor and the sticky file. Written to kill the mutants
etc/dev/mutation.sh found surviving (docs/testing.md)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from slurmkit.core import trust
from slurmkit.errors import ConfigError
from slurmkit.health.checks import xid
from slurmkit.verdict.base import Action


@pytest.fixture(autouse=True)
def fresh_table_cache():
    """Each test loads its tables itself (the cache would hide the loading code)."""
    xid._TABLE_CACHE.clear()
    yield
    xid._TABLE_CACHE.clear()


def write_table(tmp_path, text, name="table.yaml"):
    d = tmp_path / "tables"
    d.mkdir(mode=0o755, exist_ok=True)
    path = d / name
    path.write_text(text)
    path.chmod(0o644)
    return str(path)


TABLE = """
version: "t-1"
xids:
  79: {action: reboot, name: FALLEN, description: "fell off"}
  13: {action: monitor, name: GR_EXC}
  48: {action: reset}
  45: {action: none, description: ""}
  7: null
  154: {action: from_message}
xid154_recovery_actions:
  - {code: 0, match: "None", action: none}
  - {code: 1, match: "GPU Reset Required", action: reset}
  - {match: "Drain Only", action: isolate}
"""


def test_a_table_parses_entries_versions_and_recovery_states(tmp_path):
    t = xid.load_table(write_table(tmp_path, TABLE))
    assert t.version == "t-1" and t.path.endswith("table.yaml")
    assert sorted(t.entries) == [7, 13, 45, 48, 79, 154]
    assert t.entries[7] == {} and t.entries[79]["name"] == "FALLEN"
    assert t.recovery == [
        (0, "None", "none"),
        (1, "GPU Reset Required", "reset"),
        (None, "Drain Only", "isolate"),
    ]
    assert xid.load_table(t.path) is t  # cached


def test_a_table_without_version_or_recovery(tmp_path):
    t = xid.XidTable({"xids": {"1": {"action": "reset"}}})
    assert (
        t.version == "?"
        and t.path == "<table>"
        and t.recovery == []
        and t.entries == {1: {"action": "reset"}}
    )
    t = xid.XidTable({"version": 3, "xids": None, "xid154_recovery_actions": None})
    assert t.version == "3" and t.entries == {} and t.recovery == []


def test_actions_and_descriptions(tmp_path):
    t = xid.load_table(write_table(tmp_path, TABLE))
    assert t.action(79) == Action.REBOOT and t.action(13) == Action.MONITOR
    assert t.action(7) == Action.MONITOR  # an entry without an action: the unknown default
    assert t.action(7, unknown="none") == Action.NONE
    assert t.action(999) == Action.MONITOR and t.action(999, unknown="reset") == Action.RESET
    assert t.describe(79) == "fell off"
    assert t.describe(13) == "GR_EXC"  # no description: the name
    assert t.describe(45) == "not in the Xid table" and t.describe(999) == "not in the Xid table"


@pytest.mark.parametrize(
    "message, action",
    [
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", Action.RESET),
        ("changed from 0x1 (GPU Reset Required) to 0x0 (None)", Action.NONE),
        ("changed to 0x1 (Something Else)", Action.RESET),  # the code wins over the label
        ("changed to 0x9 (GPU Reset Required)", Action.RESET),  # an unknown code: then the label
        ("changed to (gpu reset required)", Action.RESET),  # the label alone, any case
        ("changed to (Drain Only)", Action.ISOLATE),
        ("changed to (Nothing Known)", Action.MONITOR),
        ("changed to 1", Action.RESET),  # a decimal code
        ("nothing here", Action.MONITOR),
        ("", Action.MONITOR),
    ],
)
def test_xid154_actions_from_the_message(tmp_path, message, action):
    t = xid.load_table(write_table(tmp_path, TABLE))
    assert t.action(154, message) == action
    assert t.recovery_action(message) == action


def test_xid154_unknown_default_is_the_callers():
    t = xid.XidTable({"xids": {154: {"action": "from_message"}}})
    assert t.action(154, "nothing", unknown="reset") == Action.RESET
    assert t.recovery_action("changed to 0x5", unknown="isolate") == Action.ISOLATE
    assert t.recovery_action("changed to (Some Label)", unknown="none") == Action.NONE


@pytest.mark.parametrize(
    "message, target",
    [
        ("changed from 0x0 (None) to 0x2 (Node Reboot Required)", (2, "Node Reboot Required")),
        ("to 0X1F", (31, "")),
        ("to 17", (17, "")),
        ("to (  Drain P2P  )", (None, "Drain P2P")),
        ("TO 0x3", (3, "")),
        ("to 0x1 to 0x2", (2, "")),
        ("changed to", None),
        ("went into 0x1", None),  # "into" is not "to"
        (None, None),
    ],
)
def test_xid154_target(message, target):
    assert xid.xid154_target(message) == target


def test_default_table_path_and_its_fallback(monkeypatch, tmp_path):
    assert xid.default_table_path() == os.path.normpath(xid.TABLE_CANDIDATES[0])
    assert xid.default_table_path().endswith(os.path.join("etc", "xid-actions.yaml"))
    monkeypatch.setattr(
        xid, "TABLE_CANDIDATES", (str(tmp_path / "a" / ".." / "x.yaml"), str(tmp_path / "b.yaml"))
    )
    assert xid.default_table_path() == str(tmp_path / "b.yaml")
    (tmp_path / "a").mkdir()
    (tmp_path / "x.yaml").write_text("")
    assert xid.default_table_path() == str(tmp_path / "x.yaml")


def test_table_problem(tmp_path):
    assert xid.table_problem(None) is None and xid.table_problem("") is None
    assert xid.table_problem(write_table(tmp_path, TABLE)) is None
    missing = str(tmp_path / "missing.yaml")
    assert xid.table_problem(missing) == f"Xid table {missing}: No such file or directory"
    assert xid.table_problem(str(tmp_path)) == f"Xid table {tmp_path}: Is a directory"


@pytest.mark.parametrize(
    "text, message",
    [
        ("- 1\n- 2\n", "expected a mapping with an 'xids' mapping"),
        ("xids: [1, 2]\n", "expected a mapping with an 'xids' mapping"),
        ("version: 1\n", "expected a mapping with an 'xids' mapping"),
        ("xids:\n  79: {action: explode}\n", "unknown action 'explode'; valid: from_message, "),
        ("xids: {}\nxid154_recovery_actions:\n  - {code: 1, action: sideways}\n", "expected {code: <int>"),
        ("xids: {}\nxid154_recovery_actions:\n  - {code: true, action: reset}\n", "expected {code: <int>"),
        ("xids: {}\nxid154_recovery_actions:\n  - {code: '1', action: reset}\n", "expected {code: <int>"),
        ("xids: {}\nxid154_recovery_actions:\n  - just text\n", "expected {code: <int>"),
    ],
)
def test_a_broken_table_is_a_config_error(tmp_path, text, message):
    path = write_table(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        xid.load_table(path)
    assert message in str(err.value) and path in str(err.value)
    assert path not in xid._TABLE_CACHE


def test_config_errors_name_the_key_and_line(tmp_path):
    path = write_table(tmp_path, "xids:\n  8: {action: monitor}\n  79: {action: explode}\n")
    with pytest.raises(ConfigError) as err:
        xid.load_table(path)
    text = str(err.value)
    assert "xids.79" in text and ":3" in text
    assert "unknown action 'explode'; valid: from_message, none, monitor, reset, reboot, isolate" in text
    path = write_table(
        tmp_path, "xids: {}\nxid154_recovery_actions:\n  - {code: 1, action: reset}\n  - {action: x}\n"
    )
    with pytest.raises(ConfigError) as err:
        xid.load_table(path)
    assert "xid154_recovery_actions[1]" in str(err.value)


def test_a_table_with_no_recovery_code_and_a_valid_action_loads(tmp_path):
    t = xid.load_table(
        write_table(tmp_path, "xids: {}\nxid154_recovery_actions:\n  - {match: X, action: reboot}\n")
    )
    assert t.recovery == [(None, "X", "reboot")]


def test_an_unreadable_or_undecodable_table_is_a_config_error(tmp_path):
    path = write_table(tmp_path, "")
    with open(path, "wb") as fh:
        fh.write(b"xids: {79: {action: reboot, name: \xff\xfe}}\n")
    with pytest.raises(ConfigError) as err:
        xid.load_table(path)
    assert "not UTF-8 text" in str(err.value)
    with pytest.raises(trust.UntrustedFile):
        xid._trusted_yaml(str(tmp_path))  # a directory
    trust.REJECTED.clear()


def test_a_table_that_cannot_be_read_is_a_config_error(tmp_path, monkeypatch):
    path = write_table(tmp_path, TABLE)

    def denied(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(trust, "read_strict", denied)
    with pytest.raises(ConfigError) as err:
        xid.load_table(path)
    assert "cannot read: Permission denied" in str(err.value) and path in str(err.value)


def test_a_writable_site_table_is_ignored_for_the_packaged_one(tmp_path):
    path = write_table(tmp_path, TABLE)
    os.chmod(path, 0o666)
    trust.REJECTED.clear()
    t = xid.load_table(path)
    assert t.path == xid.default_table_path() and t.version != "t-1"
    assert trust.REJECTED and trust.REJECTED[-1][0] == path
    trust.REJECTED.clear()


def test_an_untrusted_packaged_table_is_a_config_error(tmp_path, monkeypatch):
    path = write_table(tmp_path, TABLE)
    os.chmod(path, 0o666)
    monkeypatch.setattr(xid, "TABLE_CANDIDATES", (path,))
    for arg in (None, path):
        with pytest.raises(ConfigError) as err:
            xid.load_table(arg)
        assert "not trusted" in str(err.value) and "writable by group or others" in str(err.value)
    trust.REJECTED.clear()


# --------------------------------------------------------------------------- cursor and sticky file


def _state(tmp_path):
    d = tmp_path / "state"
    d.mkdir(mode=0o755, exist_ok=True)
    return str(d)


def test_paths_are_per_node_and_safe(tmp_path):
    s = "/s"
    assert xid.cursor_path(s, "gpu-01.x") == "/s/xid-cursor.gpu-01.x.json"
    assert xid.lock_path(s, "a/b c") == "/s/xid-a_b_c.lock"
    assert xid.sticky_path(s, "n;1") == "/s/xid-sticky.n_1.json"


def test_the_cursor_advances_only_forward_and_counts(tmp_path):
    state = _state(tmp_path)
    path = xid.cursor_path(state, "n1")
    cur = xid.Cursor(path)
    assert cur.since == 0.0 and cur.data == {}
    cur.advance(100.0, 2)
    data = json.loads(open(path).read())
    assert data["last_timestamp"] == 100.0 and data["events_seen"] == 2 and data["updated"] > 0
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    cur = xid.Cursor(path)
    assert cur.since == 100.0
    cur.advance(50.0, 5)  # older: ignored
    cur.advance(100.0, 5)  # the same: ignored
    assert json.loads(open(path).read())["events_seen"] == 2
    cur.advance(150.5, 3)
    assert json.loads(open(path).read()) == {**cur.data, "last_timestamp": 150.5, "events_seen": 5}


def test_a_first_cursor_is_written_even_at_time_zero(tmp_path):
    path = xid.cursor_path(_state(tmp_path), "n1")
    xid.Cursor(path).advance(0.0, 1)
    assert json.loads(open(path).read())["events_seen"] == 1


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", '"soon"', "null", "[1]"])
def test_a_broken_cursor_value_reads_as_no_cursor(tmp_path, value):
    path = xid.cursor_path(_state(tmp_path), "n1")
    with open(path, "w") as fh:
        fh.write('{"last_timestamp": %s, "events_seen": 4}' % value)
    os.chmod(path, 0o600)
    assert xid.Cursor(path).since == 0.0


def test_an_untrusted_or_broken_cursor_file_is_no_cursor(tmp_path):
    path = xid.cursor_path(_state(tmp_path), "n1")
    with open(path, "w") as fh:
        fh.write('{"last_timestamp": 5}')
    os.chmod(path, 0o666)
    assert xid.Cursor(path).data == {}
    os.chmod(path, 0o600)
    assert xid.Cursor(path).since == 5.0
    with open(path, "w") as fh:
        fh.write("[5]")
    assert xid.Cursor(path).data == {}
    with open(path, "w") as fh:
        fh.write("{not json")
    assert xid.Cursor(path).data == {}
    trust.REJECTED.clear()


def test_sticky_events_are_kept_deduplicated_and_bounded(tmp_path):
    state = _state(tmp_path)
    e = [{"xid": 79, "timestamp": float(i), "pci": "0000:18:00"} for i in range(3)]
    assert xid.sticky_events(state, "n1") == []
    xid.add_sticky(state, "n1", e[:2])
    xid.add_sticky(state, "n1", e[1:])  # e[1] again: kept once
    assert xid.sticky_events(state, "n1") == e
    assert stat.S_IMODE(os.stat(xid.sticky_path(state, "n1")).st_mode) == 0o600
    doc = json.loads(open(xid.sticky_path(state, "n1")).read())
    assert doc["updated"] > 0
    # the same time and Xid on another GPU is another event
    other = {"xid": 79, "timestamp": 0.0, "pci": "0000:19:00"}
    xid.add_sticky(state, "n1", [other])
    assert xid.sticky_events(state, "n1")[-1] == other
    xid.add_sticky(state, "n1", [{"xid": 48, "timestamp": float(i)} for i in range(200)])
    kept = xid.sticky_events(state, "n1")
    assert len(kept) == 100 and kept[-1]["timestamp"] == 199.0 and kept[0]["timestamp"] == 100.0
    assert xid.clear_sticky(state, "n1") == 100
    assert xid.clear_sticky(state, "n1") == 0 and xid.sticky_events(state, "n1") == []


def test_sticky_events_skip_what_is_not_an_event(tmp_path):
    state = _state(tmp_path)
    path = xid.sticky_path(state, "n1")
    with open(path, "w") as fh:
        fh.write(json.dumps({"events": [{"xid": 79}, {"no": 1}, 5, "x"]}))
    os.chmod(path, 0o600)
    assert xid.sticky_events(state, "n1") == [{"xid": 79}]
    with open(path, "w") as fh:
        fh.write(json.dumps({"events": {"xid": 79}}))
    assert xid.sticky_events(state, "n1") == []


def test_sticky_refuses_a_state_dir_others_can_write(tmp_path):
    state = _state(tmp_path)
    os.chmod(state, 0o777)
    with pytest.raises(trust.UntrustedFile) as err:
        xid.add_sticky(state, "n1", [{"xid": 79, "timestamp": 1.0}])
    assert err.value.path == state and "writable by group or others" in err.value.why
    assert not os.path.exists(xid.sticky_path(state, "n1"))
    with pytest.raises(trust.UntrustedFile):
        with xid.locked_cursor(state, "n1", 0.1):
            pass


def test_the_locked_cursor_is_exclusive_and_bounded(tmp_path):
    state = _state(tmp_path)
    with xid.locked_cursor(state, "n1", 0.1) as cur:
        assert cur.path == xid.cursor_path(state, "n1")
        assert stat.S_IMODE(os.stat(xid.lock_path(state, "n1")).st_mode) == 0o600
        pid = os.fork()
        if pid == 0:
            try:
                with xid.locked_cursor(state, "n1", 0.1):
                    os._exit(0)
            except TimeoutError:
                os._exit(7)
            except BaseException:
                os._exit(9)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 7
    with xid.locked_cursor(state, "n1", 0.1):
        pass


def test_table_errors_are_one_line_naming_the_file(tmp_path, monkeypatch):
    path = write_table(tmp_path, "- 1\n")
    with pytest.raises(ConfigError) as err:
        xid.load_table(path)
    assert str(err.value) == f"{path}: expected a mapping with an 'xids' mapping"
    path = write_table(tmp_path, "xids: {}\nxid154_recovery_actions:\n  - {action: x}\n", name="r.yaml")
    with pytest.raises(ConfigError) as err:
        xid.load_table(path)
    valid = "none|monitor|reset|reboot|isolate"
    want = f"{path}: xid154_recovery_actions[0]: expected {{code: <int>, match: <label>, action: <{valid}>}}"
    assert str(err.value) == want
    path = write_table(tmp_path, "", name="u.yaml")
    with open(path, "wb") as fh:
        fh.write(b"\xff\n")
    with pytest.raises(ConfigError) as err:
        xid.load_table(path)
    assert str(err.value) == f"{path}: not UTF-8 text"
    path = write_table(tmp_path, "xids: [\n", name="y.yaml")
    with pytest.raises(ConfigError) as err:
        xid.load_table(path)
    assert str(err.value).startswith(path)
    os.chmod(write_table(tmp_path, TABLE, name="w.yaml"), 0o666)
    monkeypatch.setattr(xid, "TABLE_CANDIDATES", (str(tmp_path / "tables" / "w.yaml"),))
    with pytest.raises(ConfigError) as err:
        xid.load_table(None)
    assert str(err.value).startswith(str(tmp_path / "tables" / "w.yaml") + ": not trusted: ")
    trust.REJECTED.clear()


def test_a_recovery_state_without_a_label_matches_no_label():
    t = xid.XidTable({"xids": {}, "xid154_recovery_actions": [{"code": 1, "action": "reset"}]})
    assert t.recovery == [(1, "", "reset")]
    assert t.recovery_action("changed to (XXXX)") == Action.MONITOR
    assert t.recovery_action("changed to (None)") == Action.MONITOR


def test_a_cursor_without_a_count_starts_counting(tmp_path):
    path = xid.cursor_path(_state(tmp_path), "n1")
    with open(path, "w") as fh:
        fh.write('{"last_timestamp": 5}')
    os.chmod(path, 0o600)
    cur = xid.Cursor(path)
    cur.advance(6.0, 2)
    assert cur.data["events_seen"] == 2


def test_a_missing_table_file_is_a_config_error_naming_it(tmp_path):
    missing = str(tmp_path / "xid-table.yaml")
    with pytest.raises(ConfigError) as err:
        xid._trusted_yaml(missing)
    assert str(err.value) == f"{missing}: cannot read: No such file or directory"


def test_a_cursor_in_a_directory_others_can_write_is_refused_by_name(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    with pytest.raises(trust.UntrustedFile) as err:
        with xid.locked_cursor(str(state), "node1", 1.0):
            pass
    assert err.value.path == str(state)
    assert err.value.why == trust.writable_dir(str(state))
    assert err.value.why and "writable by group or others" in err.value.why
    assert os.listdir(state) == []  # nothing written there


def test_a_cursor_never_entered_closes_nothing_on_exit(tmp_path):
    xid.locked_cursor(str(tmp_path), "node1", 1.0).__exit__(None, None, None)
