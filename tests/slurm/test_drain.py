"""The drain reason's format and parser side by side, and the guarded drain's rule
(an admin's reason is never overwritten). scontrol is canned here; the real one is in
tests/integration/test_sweep.py and tests/integration/test_health_gate.py."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkit.slurm import drain, runner
from slurmkit.slurm.runner import Result


@given(code=st.text(max_size=80), check=st.text(max_size=80), detail=st.text(max_size=300))
def test_every_formatted_reason_parses_back(code, check, detail):
    reason = drain.format_reason(code, check, detail)
    parsed = drain.parse_reason(reason)
    assert parsed is not None and drain.is_slurmkit_reason(reason)
    assert parsed.code == drain.safe_code(code, "UNKNOWN")
    assert parsed.check == drain.safe_name(check, "check")
    assert parsed.detail == drain.safe_text(detail)[:180]
    assert "\n" not in reason and reason.isascii()


def test_format_and_parse_known_values():
    reason = drain.format_reason("GPU_ECC_UNCORRECTED", "gpu_ecc", "2 errors\non GPU 3")
    assert reason == "slurmkit:GPU_ECC_UNCORRECTED gpu_ecc: 2 errors on GPU 3"
    assert drain.parse_reason(reason) == ("GPU_ECC_UNCORRECTED", "gpu_ecc", "2 errors on GPU 3")


@pytest.mark.parametrize("reason", ["disk swap", "", None, "slurmkit", "Slurmkit:X y: z", "slurmkit:X"])
def test_other_reasons_do_not_parse(reason):
    assert drain.parse_reason(reason) is None


class Scontrol:
    def __init__(self, show: str, show_rc: int = 0, update_rc: int = 0):
        self.show, self.show_rc, self.update_rc = show, show_rc, update_rc
        self.updates = []

    def __call__(self, argv, timeout, input, env):
        assert os.path.basename(argv[0]) == "scontrol" and timeout is not None
        if "show" in argv:
            return Result(list(argv), self.show_rc, self.show, "", 0.0)
        self.updates.append(list(argv[1:]))
        return Result(list(argv), self.update_rc, "", "" if not self.update_rc else "denied", 0.0)


@pytest.fixture
def scontrol():
    made = []

    def make(show, **kw):
        fake = Scontrol(show, **kw)
        runner.set_runner(fake)
        made.append(fake)
        return fake

    yield make
    runner.set_runner(None)


@pytest.mark.parametrize(
    "show,drains",
    [
        ("NodeName=n1 State=IDLE", True),
        ("NodeName=n1 State=IDLE+DRAIN Reason=disk swap", False),  # an admin's: kept
        ("NodeName=n1 State=MIXED+DRAIN Reason=admin: fan", False),  # draining with a job on it
        ("NodeName=n1 State=IDLE+DRAIN Reason=slurmkit:XID_79 xid: old", True),  # ours: replaced
        ("NodeName=n1 State=IDLE Reason=disk swap", True),  # a stale reason on a resumed node
        ("NodeName=n1 State=IDLE+DRAIN Reason=(null)", True),
    ],
)
def test_guarded_drain_keeps_only_someone_elses_drain(scontrol, show, drains):
    fake = scontrol(show)
    ok, note = drain.guarded_drain("n1", "slurmkit:X c: d", timeout=2.0)
    assert ok is drains
    if drains:
        assert fake.updates == [["update", "NodeName=n1", "State=DRAIN", "Reason=slurmkit:X c: d"]]
    else:
        assert fake.updates == [] and "reason kept" in note


def test_guarded_drain_never_raises(scontrol):
    scontrol("", show_rc=1, update_rc=1)  # scontrol cannot read the node, and the update fails
    ok, note = drain.guarded_drain("n1", "slurmkit:X c: d", timeout=1.0)
    assert ok is False and note.startswith("scontrol drain failed")
