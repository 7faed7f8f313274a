"""The one ``worst``, the one drain-culprit rule and the one run-checks entry point that the
hooks, ``slurmkit health run``, a resume's re-check and the sweep's heavy pass share."""

from __future__ import annotations

from slurmkit.config import load_site_config
from slurmkit.health import engine
from slurmkit.verdict.base import Action, CheckResult, Status, Tier, first_failure, worst


def r(check, status, action=Action.NONE):
    return CheckResult(check, status, "X", "", action)


def test_worst_orders_fail_warn_unknown_ok():
    assert worst([]) is Status.OK
    assert worst([r("a", Status.OK), r("b", Status.UNKNOWN)]) is Status.UNKNOWN
    assert worst([r("a", Status.UNKNOWN), r("b", Status.WARN), r("c", Status.OK)]) is Status.WARN
    assert worst(iter([r("a", Status.WARN), r("b", Status.FAIL), r("c", Status.UNKNOWN)])) is Status.FAIL


def test_first_failure_is_the_most_severe_action_then_the_first():
    results = [
        r("a", Status.WARN, Action.ISOLATE),
        r("b", Status.FAIL, Action.RESET),
        r("c", Status.FAIL, Action.ISOLATE),
        r("d", Status.FAIL, Action.ISOLATE),
    ]
    assert first_failure(results).check == "c"
    assert first_failure([r("a", Status.WARN, Action.ISOLATE)]) is None


def test_sweep_and_gate_share_the_definitions():
    """The copies that disagreed in spelling are gone: the sweep's pass and metrics use base's."""
    from slurmkit.sweep import metrics, notify, runnode

    assert runnode.worst is worst and runnode.first_failure is first_failure
    assert metrics.worst is worst and notify.worst is worst
    assert not hasattr(engine, "worst") and not hasattr(runnode, "worst_status")


def _cfg(site, gpu_fixture, health=None):
    gpu_fixture()
    cfg = load_site_config(str(site(health=health)))
    return cfg.section("health"), cfg.section("paths")


def test_run_selected_names_skip_enabled_and_closes_the_context(site, gpu_fixture, monkeypatch):
    health, paths = _cfg(site, gpu_fixture, {"checks": {"gpu_power": {"enabled": False}}})
    closed = []
    monkeypatch.setattr(engine.Context, "close", lambda self: closed.append(self.node))
    names = ["gpu_count", "gpu_power", "gpu_ecc"]
    # Disabled checks are dropped unless named on the command line (only_enabled=False).
    got = engine.run_selected(health, paths, names=names, node="node1", env={}, skip=("gpu_ecc",))
    assert [x.check for x in got] == ["gpu_count"]
    got = engine.run_selected(health, paths, names=names, node="node1", env={}, only_enabled=False)
    assert [x.check for x in got] == names and worst(got) is Status.OK
    assert closed == ["node1", "node1"]


def test_run_selected_tier_and_deadline(site, gpu_fixture):
    health, paths = _cfg(site, gpu_fixture)
    got = engine.run_selected(health, paths, tier=Tier.FAST, node="node1", env={}, deadline=0.0)
    assert got and all(x.code == "BUDGET_EXHAUSTED" for x in got)
