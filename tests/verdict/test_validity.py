"""One validity rule for stored verdicts (verdict.store.still_valid), used by the
prolog's heavy_cache, ssubmit's requeue-with-exclude and the sweep. The copies used to
disagree on a verdict without ``valid_until``: expired for the prolog, valid for ever for
the requeue (a node excluded from every requeue until someone edited the file)."""

from __future__ import annotations

import json
import os
import time

import pytest

from slurmkit.submit.jobside import failed_verdict_nodes
from slurmkit.verdict.store import VerdictStore, still_valid


@pytest.mark.parametrize(
    "valid_until, expected",
    [
        (None, False),
        ("2099-01-01T00:00:00", False),
        (True, False),
        (float("nan"), False),
        (float("inf"), False),
        (-1, False),
        (999, False),
        (1001, True),
        (1e12, True),
    ],
)
def test_still_valid(valid_until, expected):
    entry = {} if valid_until is None else {"valid_until": valid_until}
    assert still_valid(entry, now=1000.0) is expected


def _store_with(tmp_path, entries):
    root = tmp_path / "verdicts"
    root.mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)
    doc = {"version": 1, "node": "node1", "checks": entries}
    (root / "node1.json").write_text(json.dumps(doc))
    os.chmod(root / "node1.json", 0o644)
    return str(root)


def test_every_reader_applies_the_same_rule(tmp_path):
    now = time.time()
    root = _store_with(
        tmp_path,
        {
            "gpu_ecc": {"status": "fail", "code": "GPU_ECC", "reason": "old, no expiry"},
            "gemm_tflops": {
                "status": "fail",
                "code": "GEMM_LOW",
                "reason": "expired",
                "valid_until": now - 5,
            },
        },
    )
    assert VerdictStore(root).valid("node1", now=now) == {}
    # the requeue must not exclude a node for a verdict that has no expiry (old code: excluded for ever)
    assert failed_verdict_nodes(root, ["node1"], now=now) == {}


def test_a_valid_failure_still_excludes(tmp_path):
    now = time.time()
    root = _store_with(
        tmp_path,
        {"gpu_ecc": {"status": "fail", "code": "GPU_ECC", "reason": "ECC", "valid_until": now + 600}},
    )
    assert set(VerdictStore(root).valid("node1", now=now)) == {"gpu_ecc"}
    assert failed_verdict_nodes(root, ["node1"], now=now) == {"node1": "sweep verdict gpu_ecc: ECC"}
