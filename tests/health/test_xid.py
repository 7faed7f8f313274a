"""The Xid table, the Xid check with its cursor, and kernel-log parsing."""

from __future__ import annotations

import json
import multiprocessing
import time

import pytest

from slurmkit.errors import ConfigError
from slurmkit.health.catalog import CATALOG
from slurmkit.health.checks import kmsg, xid
from slurmkit.health.engine import run_one
from slurmkit.verdict.base import Action, Status


def test_packaged_table_loads_cites_its_source_and_maps_the_anchor_xids():
    table = xid.load_table()
    text = open(xid.default_table_path()).read()
    assert "docs.nvidia.com/deploy/xid-errors" in text and table.version
    assert table.action(79) == Action.REBOOT
    for x in (48, 64, 95):
        assert table.action(x) == Action.RESET, x
    for x in (13, 31, 94):  # NVIDIA: RESTART_APP
        assert table.action(x) == Action.MONITOR, x
    for x in (43, 45, 63):  # NVIDIA: IGNORE (45: follow the other Xid)
        assert table.action(x) == Action.NONE, x
    assert table.action(99999) == Action.MONITOR
    assert table.action(99999, unknown="isolate") == Action.ISOLATE


def test_xid_154_action_comes_from_its_message():
    table = xid.load_table()
    assert (
        table.action(154, "Recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)")
        == Action.REBOOT
    )
    assert (
        table.action(154, "Recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)")
        == Action.RESET
    )


def test_bad_table_is_a_config_error_naming_the_key(tmp_path):
    bad = tmp_path / "xid.yaml"
    bad.write_text("version: x\nxids:\n  79: {action: explode}\n")
    with pytest.raises(ConfigError, match=r"xid.yaml:3: xids.79: unknown action 'explode'"):
        xid.load_table(str(bad))


def test_bad_xid154_state_is_a_config_error(tmp_path):
    bad = tmp_path / "xid.yaml"
    bad.write_text(
        "version: x\nxids: {}\nxid154_recovery_actions:\n  - {code: two, match: x, action: reboot}\n"
    )
    with pytest.raises(ConfigError, match=r"xid.yaml: xid154_recovery_actions\[0\]: expected"):
        xid.load_table(str(bad))


def events(*items):
    return [{"xid": x, "gpu": g, "timestamp": ts, "message": "m"} for x, g, ts in items]


def test_new_xids_are_judged_once_then_the_cursor_moves(gpu_fixture, ctx_factory, tmp_path):
    now = time.time()
    gpu_fixture(lambda d: d.update(xid_events=events((13, 1, now - 50), (79, 3, now - 10))))
    r = run_one(ctx_factory(hook="prolog"), CATALOG["xid"], 2)
    assert (r.status, r.code, r.action) == (Status.FAIL, "XID_79", Action.REBOOT)
    assert "GPU 3" in r.reason and r.value == 2
    # the events are consumed (value 0 new), but the failing one stays until it is cleared
    r = run_one(ctx_factory(hook="prolog"), CATALOG["xid"], 2)
    assert (r.status, r.code, r.value) == (Status.FAIL, "XID_79", 0) and "kept until resume" in r.reason
    assert xid.clear_sticky(str(tmp_path / "state"), "node1") == 1
    r = run_one(ctx_factory(hook="prolog"), CATALOG["xid"], 2)
    assert r.status == Status.OK and r.value == 0


def test_manual_runs_only_peek(gpu_fixture, ctx_factory):
    gpu_fixture(lambda d: d.update(xid_events=events((13, 0, time.time() - 5))))
    for _ in range(2):
        r = run_one(ctx_factory(hook="manual"), CATALOG["xid"], 2)
        assert (r.status, r.code) == (Status.WARN, "XID_13")


def _judge_in_process(args):
    cfg_path, node = args
    from slurmkit.config import load_site_config
    from slurmkit.health.catalog import CATALOG
    from slurmkit.health.engine import Context, run_one

    cfg = load_site_config(cfg_path)
    ctx = Context.from_env(cfg.section("health"), cfg.section("paths"), "prolog", env={}, node=node)
    r = run_one(ctx, CATALOG["xid"], 5)
    return r.value or 0


def test_concurrent_prologs_judge_each_event_exactly_once(gpu_fixture, site, tmp_path):
    now = time.time()
    gpu_fixture(lambda d: d.update(xid_events=events(*[(13, i % 8, now - 100 + i) for i in range(20)])))
    cfg = str(site())
    # spawn, not fork: a fork of pytest while another thread holds a lock can hang for ever
    with multiprocessing.get_context("spawn").Pool(6) as pool:
        seen = pool.map(_judge_in_process, [(cfg, "node1")] * 12)
    assert sum(seen) == 20  # no event judged twice, none lost
    cursor = json.loads((tmp_path / "state" / "xid-cursor.node1.json").read_text())
    assert cursor["last_timestamp"] == pytest.approx(now - 100 + 19)
    assert cursor["events_seen"] == 20


def test_kmsg_xid_records_parse_and_map_pci():
    recs = [
        "6,1234,5000000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
        "4,1235,6000000,-;usb 1-1: new device",
        "3,1236,7000000,-;NVRM: Xid (PCI:0000:9a:00): 48, pid='<unknown>', name=<unknown>, DBE (0x1)",
    ]
    parsed = kmsg.xid_records(recs, btime=1000.0)
    assert parsed == [
        (1005.0, "0000:18:00", 79, "pid=1234, name=python, GPU has fallen off the bus."),
        (1007.0, "0000:9a:00", 48, "pid='<unknown>', name=<unknown>, DBE (0x1)"),
    ]
    assert kmsg.short_pci("00000000:9A:00.0") == "0000:9a:00"


def test_reading_dev_kmsg_never_blocks():
    t0 = time.monotonic()
    kmsg.read_kmsg_records()  # may be empty without privileges; must return promptly
    assert time.monotonic() - t0 < 5
