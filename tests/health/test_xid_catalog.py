"""The Xid table against NVIDIA's Xid catalog.

``etc/xid-catalog-nvidia.yaml`` is a verbatim copy of three columns of NVIDIA's catalog
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, snapshot named in the file).
Every row of ``etc/xid-actions.yaml`` must carry NVIDIA's mnemonic and immediate-action bucket, and
its action must be slurmkit's reading of that bucket unless the row says why it departs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from slurmkit.health.checks import xid
from slurmkit.verdict.base import Action

REPO = Path(__file__).resolve().parents[2]
TABLE = yaml.safe_load((REPO / "etc" / "xid-actions.yaml").read_text())
CATALOG = yaml.safe_load((REPO / "etc" / "xid-catalog-nvidia.yaml").read_text())
ROWS = TABLE["xids"]
CAT = CATALOG["xids"]
ACTIONS = {a.value for a in Action} | {"from_message"}


def test_both_files_cite_the_catalog_and_its_date():
    url = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
    assert TABLE["source"] == url and url in CATALOG["catalog"]
    assert TABLE["catalog_date"] == CATALOG["catalog_date"] == "2025-10-29"
    assert TABLE["catalog_copy"] == "etc/xid-catalog-nvidia.yaml"
    assert "leptonai/gpud" in CATALOG["snapshot"]


@pytest.mark.parametrize("code", sorted(ROWS))
def test_row_carries_nvidias_mnemonic_and_bucket(code):
    assert code in CAT, f"Xid {code} is not in NVIDIA's catalog"
    mnemonic, bucket, _ = CAT[code]
    assert ROWS[code]["name"] == mnemonic, f"Xid {code}: name"
    assert ROWS[code]["nvidia"] == bucket, f"Xid {code}: nvidia bucket"


@pytest.mark.parametrize("code", sorted(ROWS))
def test_row_action_is_the_buckets_reading_or_a_documented_departure(code):
    row = ROWS[code]
    reading = TABLE["bucket_actions"][row["nvidia"]]["action"]
    if row["action"] == reading:
        assert "departure" not in row, f"Xid {code}: a departure that does not depart"
    else:
        assert len(str(row.get("departure", "")).strip()) > 20, (
            f"Xid {code}: action {row['action']} departs from {row['nvidia']} -> {reading} without a reason"
        )


def test_bucket_readings_are_valid_actions_with_reasons():
    for bucket, reading in TABLE["bucket_actions"].items():
        assert reading["action"] in ACTIONS, bucket
        assert len(reading["why"]) > 20, bucket


def test_every_catalog_code_in_use_has_a_row():
    """Codes NVIDIA marks unused (CONTACT_SUPPORT, "Unused") and codes without a bucket yet are
    the only ones left to ``unknown_action``; a used code without a row (46, 136, 158 before
    2026.12-1) would leave a GPU that needs a reset in service with a warning."""
    in_use = {
        c
        for c, (_, bucket, desc) in CAT.items()
        if bucket and not (desc == "Unused" and bucket == "CONTACT_SUPPORT")
    }
    assert sorted(in_use - set(ROWS)) == []
    assert {46, 136, 155, 156, 158} <= set(ROWS)


def test_the_rows_the_issue_found_wrong_now_follow_the_catalog():
    """Worked out by hand from the catalog page: 109 and 143 are RESET_GPU; 38, 43, 44, 63, 92, 121
    are IGNORE; 80 is RESTART_APP; 38 is the FECS watchdog timeout (37 is the unimplemented method)."""
    table = xid.load_table()
    assert table.action(109) == Action.RESET
    assert table.action(143) == Action.RESET
    for code in (38, 43, 44, 63, 92, 121):
        assert table.action(code) == Action.NONE, code
    assert table.action(80) == Action.MONITOR
    assert ROWS[38]["name"] == "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT"
    assert ROWS[37]["name"] == "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD"


def test_xid154_states_are_nvmls_recovery_actions():
    """nvmlDeviceGpuRecoveryAction_t: 0 NONE, 1 GPU_RESET, 2 NODE_REBOOT, 3 DRAIN_P2P, 4 DRAIN_AND_RESET;
    labels as the catalog's Xid 154 row spells them."""
    states = {r["code"]: (r["match"], r["action"]) for r in TABLE["xid154_recovery_actions"]}
    assert states == {
        0: ("None", "none"),
        1: ("GPU Reset Required", "reset"),
        2: ("Node Reboot Required", "reboot"),
        3: ("Drain P2P", "isolate"),
        4: ("Drain and Reset", "reset"),
    }
