"""The hook gate (slurmkit.hooks.gate.run_hook) in this process: what test_gate.py checks
through whole processes, here where a mutation tool (and a debugger) can see the code
run. The watchdog timer is captured, never started; ``scontrol`` is the recording fake."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from slurmkit.core import trust
from slurmkit.hooks import gate
from slurmkit.slurm import drain

ENV = {"SLURMD_NODENAME": "node1", "SLURM_JOB_ID": "4242", "SLURM_JOB_UID": "65534", "SLURM_JOB_GPUS": "0,1"}


@pytest.fixture
def run(monkeypatch, site, fake_scontrol, tmp_path, capsys):
    """``run(hook="prolog", health=None, env=None)`` -> ``(exit code, stderr, records, timers)``."""
    timers = []

    class CapturedTimer:
        def __init__(self, seconds, fn):
            self.seconds, self.fn = seconds, fn
            timers.append(self)

        def start(self):
            self.started = True

    monkeypatch.setattr(gate, "Timer", CapturedTimer)
    monkeypatch.setattr(gate, "_decided", None)

    def go(hook="prolog", health=None, env=None):
        monkeypatch.setenv(
            "SLURMKIT_CONFIG", str(site(health=health, slurm={"bin_dir": fake_scontrol.bin_dir}))
        )
        capsys.readouterr()
        code = gate.run_hook(hook, env=dict(ENV, PATH=os.environ.get("PATH", ""), **(env or {})))
        log = tmp_path / "log" / "health.jsonl"
        recs = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return code, capsys.readouterr().err, recs, timers

    return go


def prom(tmp_path, hook="prolog"):
    return (tmp_path / "metrics" / f"slurmkit_health_{hook}_node1.prom").read_text()


def updates(fake_scontrol):
    return [c for c in fake_scontrol.calls() if c[:1] == ["update"]]


def test_a_healthy_prolog_passes_and_records(run, gpu_fixture, fake_scontrol, tmp_path):
    gpu_fixture()
    code, err, recs, timers = run()
    assert code == 0 and err == "" and gate._decided == 0
    (rec,) = recs
    assert (rec["node"], rec["hook"], rec["job_id"], rec["status"], rec["exit_code"]) == (
        "node1",
        "prolog",
        "4242",
        "ok",
        0,
    )
    assert rec["drain_reason"] is None and rec["internal_errors"] == [] and 0 <= rec["seconds"] < 30
    assert "untrusted_files" not in rec
    assert 'slurmkit_health_status{hook="prolog",node="node1"} 0.0' in prom(tmp_path)
    assert updates(fake_scontrol) == []
    (t,) = timers
    assert t.seconds == pytest.approx(gate.DEFAULT_DEADLINES["prolog"] + 1.0) and t.started


def test_the_watchdog_gets_the_configured_budget_plus_one(run, gpu_fixture):
    gpu_fixture()
    _, _, _, timers = run(health={"prolog_deadline": 3.5})
    assert timers[0].seconds == pytest.approx(4.5)


def test_a_failing_prolog_drains_records_and_exits_1(run, gpu_fixture, fake_scontrol, tmp_path):
    gpu_fixture(lambda d: d["gpus"][3]["ecc"].update(volatile_uncorrected=2))
    fake_scontrol.set_node("node1", "ALLOCATED")
    code, err, recs, _ = run()
    reason = "slurmkit:GPU_ECC_UNCORRECTED gpu_ecc: GPU 3: 2 uncorrected volatile ECC errors"
    assert code == 1 and gate._decided == 1
    assert updates(fake_scontrol) == [["update", "NodeName=node1", "State=DRAIN", f"Reason={reason}"]]
    assert f"slurmkit-prolog: node1: FAIL {reason}" in err
    (rec,) = recs
    assert rec["status"] == "fail" and rec["exit_code"] == 1 and rec["drain_reason"] == reason
    assert rec["drain"] == "drained"
    assert 'slurmkit_health_status{hook="prolog",node="node1"} 2.0' in prom(tmp_path)


def test_no_drain_when_drain_on_fail_is_off(run, gpu_fixture, fake_scontrol):
    gpu_fixture(lambda d: d["gpus"][3]["ecc"].update(volatile_uncorrected=2))
    code, _, recs, _ = run(health={"drain_on_fail": False})
    assert code == 1 and updates(fake_scontrol) == [] and "drain" not in recs[0]


def test_an_admins_drain_is_kept(run, gpu_fixture, fake_scontrol):
    gpu_fixture(lambda d: d["gpus"][3]["ecc"].update(volatile_uncorrected=2))
    fake_scontrol.set_node("node1", "DRAINED", "bad fan (ops)")
    code, _, recs, _ = run()
    assert code == 1 and updates(fake_scontrol) == []
    assert recs[0]["drain"] == (
        "already drained by someone else ('bad fan (ops) [root@2026-11-29T10:00:00]'); reason kept"
    )


def test_our_own_earlier_drain_is_updated(run, gpu_fixture, fake_scontrol):
    gpu_fixture(lambda d: d["gpus"][3]["ecc"].update(volatile_uncorrected=2))
    fake_scontrol.set_node("node1", "DRAINED", "slurmkit:OLD x: y")
    code, _, recs, _ = run()
    assert code == 1 and len(updates(fake_scontrol)) == 1 and recs[0]["drain"] == "drained"


def test_a_failing_drain_keeps_the_fail(run, gpu_fixture, fake_scontrol, monkeypatch):
    from slurmkit.slurm import client

    def broken(*a, **k):
        raise RuntimeError("scontrol: timed out")

    monkeypatch.setattr(client, "drain_node", broken)
    gpu_fixture(lambda d: d["gpus"][3]["ecc"].update(volatile_uncorrected=2))
    code, _, recs, _ = run()
    assert code == 1 and recs[0]["drain"] == "scontrol drain failed: scontrol: timed out"


def test_node_drain_and_is_drained(fake_scontrol, monkeypatch):
    from slurmkit.slurm import client

    client.configure(fake_scontrol.bin_dir, 10)
    assert drain.node_drain("node1", 5) is None  # the fake knows no node1 yet: an error
    fake_scontrol.set_node("node1", "IDLE+DRAIN", "why")
    assert drain.node_drain("node1", 5) == {
        "state": "IDLE+DRAIN",
        "reason": "why [root@2026-11-29T10:00:00]",
    }
    monkeypatch.setattr(client, "show_node", lambda node, timeout: None)
    assert drain.node_drain("node1", 5) is None
    assert drain.is_drained("idle+drain") and drain.is_drained("DRAINED") and not drain.is_drained("IDLE")


def test_missing_fixture_fails_open_and_fail_closed_fails(run, fake_scontrol, tmp_path):
    code, err, recs, _ = run()  # no GPU fixture: the checks cannot run
    assert code == 0 and "failing open on slurmkit fault(s)" in err
    assert recs[-1]["internal_errors"] and recs[-1]["exit_code"] == 0 and recs[-1]["drain_reason"] is None
    assert 'slurmkit_health_internal_error{hook="prolog",node="node1"} 1.0' in prom(tmp_path)
    assert updates(fake_scontrol) == []
    code, err, recs, _ = run(health={"fail_closed": True})
    assert code == 1 and recs[-1]["exit_code"] == 1 and recs[-1]["drain_reason"].startswith("slurmkit:")
    assert len(updates(fake_scontrol)) == 1


def test_a_bad_config_fails_open_and_records_under_the_defaults(run, monkeypatch, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("health:\n  prolog_deadlin: 3\n")
    monkeypatch.setattr(
        gate,
        "_default_paths",
        lambda: {"log_dir": str(tmp_path / "dlog"), "metrics_dir": str(tmp_path / "dm")},
    )
    monkeypatch.setenv("SLURMKIT_CONFIG", str(bad))
    monkeypatch.setenv("SLURM_JOB_ID", "4242")  # without a context, the job comes from the environment
    monkeypatch.setenv("SLURMD_NODENAME", "node1")
    capsys.readouterr()
    assert gate.run_hook("prolog", env=dict(ENV)) == 0
    err = capsys.readouterr().err
    assert "slurmkit-prolog: config error, failing open:" in err and "prolog_deadlin" in err
    (rec,) = [json.loads(x) for x in (tmp_path / "dlog" / "health.jsonl").read_text().splitlines()]
    assert (
        rec["status"] == "unknown" and rec["exit_code"] == 0 and rec["results"][0]["code"] == "CONFIG_ERROR"
    )
    assert rec["job_id"] == "4242" and "prolog_deadlin" in rec["internal_errors"][0]
    assert (tmp_path / "dm" / "slurmkit_health_prolog_node1.prom").exists()


def test_a_bad_config_with_broken_defaults_uses_the_fixed_ones(monkeypatch, tmp_path, capsys):
    seen = {}

    def boom():
        raise RuntimeError("no schema")

    monkeypatch.setattr(gate, "_default_paths", boom)
    monkeypatch.setattr(gate, "_record_bounded", lambda hook, secs, ctx, paths, *a: seen.update(paths=paths))
    bad = tmp_path / "bad.yaml"
    bad.write_text("health: [1]\n")
    monkeypatch.setenv("SLURMKIT_CONFIG", str(bad))
    assert gate.run_hook("prolog", env=dict(ENV)) == 0
    assert seen["paths"] == {
        "log_dir": "/var/log/slurmkit",
        "metrics_dir": "/var/lib/prometheus/node-exporter",
    }


def test_the_default_paths_are_the_schemas():
    paths = gate._default_paths()
    assert (
        paths["log_dir"] == "/var/log/slurmkit"
        and paths["metrics_dir"] == "/var/lib/prometheus/node-exporter"
    )


def test_an_internal_error_fails_open_and_is_recorded(run, gpu_fixture, monkeypatch):
    from slurmkit.health import catalog

    def broken(*a, **k):
        raise ValueError("bug")

    monkeypatch.setattr(catalog, "select", broken)
    gpu_fixture()
    code, err, recs, _ = run()
    assert code == 0 and "slurmkit-prolog: internal error, failing open: ValueError: bug" in err
    (rec,) = recs
    assert (
        rec["status"] == "unknown" and rec["exit_code"] == 0 and rec["results"][0]["code"] == "INTERNAL_ERROR"
    )
    assert rec["results"][0]["reason"] == "ValueError: bug" and rec["internal_errors"] == ["bug"]
    code, err, recs, _ = run(health={"fail_closed": True})
    assert code == 1 and "internal error, failing closed" in err and recs[-1]["exit_code"] == 1


def test_the_healthcheck_exit_code_is_nagios_and_it_drains(run, gpu_fixture, fake_scontrol):
    gpu_fixture(lambda d: d["gpus"][2].update(nvlink={"links": 18, "inactive": [0, 1]}))
    fake_scontrol.set_node("node1", "IDLE")
    code, _, recs, _ = run("healthcheck", env={"SLURM_JOB_ID": "", "SLURM_JOB_GPUS": ""})
    assert code == 2 and recs[-1]["exit_code"] == 2
    assert any("slurmkit:NVLINK_DOWN" in c[3] for c in updates(fake_scontrol))


def test_a_healthy_healthcheck_exits_0_and_unknown_is_0_unless_fail_closed(run, gpu_fixture):
    gpu_fixture()
    assert run("healthcheck", env={"SLURM_JOB_ID": ""})[0] == 0


def test_untrusted_files_are_reported_in_the_record_and_on_stderr(run, gpu_fixture, monkeypatch):
    gpu_fixture()
    real = gate.trust.REJECTED

    def rejecting_record(*args, **kwargs):
        real.extend([(f"/p{i}", "why") for i in range(25)])
        return original(*args, **kwargs)

    original = gate._record
    monkeypatch.setattr(gate, "_record", rejecting_record)
    code, err, recs, _ = run()
    assert code == 0
    assert len(recs[0]["untrusted_files"]) == 20 and recs[0]["untrusted_files"][0] == "/p0: why"
    assert err.count("ignored untrusted") == 5 and "slurmkit-prolog: ignored untrusted /p0: why" in err
    trust.REJECTED.clear()


def test_a_record_that_cannot_be_written_keeps_the_exit_code(run, gpu_fixture, monkeypatch, tmp_path):
    from slurmkit.verdict import record

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(record, "append_jsonl", full)
    monkeypatch.setattr(record, "write_verdict_metrics", full)
    gpu_fixture(lambda d: d["gpus"][3]["ecc"].update(volatile_uncorrected=2))
    code, err, _, _ = run()
    assert code == 1
    assert f"cannot write the health log under {tmp_path / 'log'}" in err
    assert f"cannot write metrics under {tmp_path / 'metrics'}" in err


def test_a_hung_record_is_abandoned_after_its_budget(gpu_fixture, monkeypatch, capsys):
    import time

    monkeypatch.setattr(gate, "_record", lambda *a, **k: time.sleep(5))
    t0 = time.monotonic()
    gate._record_bounded("prolog", 0.2, None)
    assert time.monotonic() - t0 < 2
    assert "slurmkit-prolog: recording the verdict took over 0.2s; abandoned" in capsys.readouterr().err

    def broken(*a, **k):
        raise KeyError("log_dir")

    monkeypatch.setattr(gate, "_record", broken)
    gate._record_bounded("prolog", 1.0, None)
    assert "slurmkit-prolog: cannot record the verdict: 'log_dir'" in capsys.readouterr().err


def test_hooks_get_a_path_when_slurm_gives_none(run, gpu_fixture, monkeypatch):
    gpu_fixture()
    monkeypatch.delenv("PATH")
    monkeypatch.setattr(gate, "DEFAULT_PATH", os.defpath + ":/usr/local/bin:/usr/bin:/bin")
    run()
    assert os.environ["PATH"] == gate.DEFAULT_PATH


def test_say_never_raises(monkeypatch):
    class Broken:
        def write(self, s):
            raise OSError(5, "EIO")

    monkeypatch.setattr(gate.sys, "stderr", Broken())
    gate._say("x")  # no exception


def test_a_healthy_epilog_passes_and_records(run, gpu_fixture, tmp_path):
    gpu_fixture()
    code, err, recs, timers = run("epilog", env={"SLURM_JOB_UID": "4242424", "SLURM_JOB_USER": "nobody"})
    assert code == 0, err
    assert recs[-1]["hook"] == "epilog" and recs[-1]["status"] == "ok" and recs[-1]["exit_code"] == 0
    assert timers[0].seconds == pytest.approx(gate.DEFAULT_DEADLINES["epilog"] + 1.0)
    assert 'slurmkit_health_status{hook="epilog",node="node1"} 0.0' in prom(tmp_path, "epilog")


def test_the_epilog_watchdog_allows_for_a_heavy_escalation(run, gpu_fixture):
    gpu_fixture()
    health = {"epilog_deadline": 7.0, "escalation": {"action": "heavy", "heavy_deadline": 40.0}}
    _, _, _, timers = run("epilog", health=health, env={"SLURM_JOB_UID": "4242424"})
    assert timers[0].seconds == pytest.approx(48.0)
    _, _, _, timers = run("prolog", health=health)
    assert timers[-1].seconds == pytest.approx(gate.DEFAULT_DEADLINES["prolog"] + 1.0)


def test_the_healthcheck_has_its_own_default_budget(run, gpu_fixture):
    gpu_fixture()
    _, _, _, timers = run("healthcheck", env={"SLURM_JOB_ID": ""})
    assert timers[0].seconds == pytest.approx(gate.DEFAULT_DEADLINES["healthcheck"] + 1.0)
    assert gate.DEFAULT_DEADLINES == {"prolog": 5.0, "epilog": 30.0, "healthcheck": 30.0}


def test_fail_closed_turns_the_first_internal_problem_into_an_isolating_fail(run, tmp_path):
    code, err, recs, _ = run(health={"fail_closed": True})  # no GPU fixture: the checks cannot run
    rec = recs[-1]
    assert code == 1 and rec["status"] == "unknown"  # the worst result; the exit code is the FAIL
    reason = rec["drain_reason"]
    bad = next(r for r in rec["results"] if r["status"] == "unknown")
    assert bad["reason"] and reason == drain.format_reason(bad["code"], bad["check"], bad["reason"])
    assert "slurmkit-prolog: node1: FAIL slurmkit:" in err


def test_an_unknown_healthcheck_exits_0_or_nagios_unknown_when_fail_closed(run):
    code, _, recs, _ = run("healthcheck", env={"SLURM_JOB_ID": ""})  # no fixture: unknown
    assert code == 0 and recs[-1]["exit_code"] == 0
    code, _, recs, _ = run("healthcheck", health={"fail_closed": True}, env={"SLURM_JOB_ID": ""})
    assert code == 3 and recs[-1]["exit_code"] == 3  # Nagios UNKNOWN


def test_the_config_error_record_says_why(monkeypatch, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("health:\n  prolog_deadlin: 3\n")
    seen = {}
    monkeypatch.setattr(
        gate, "_record_bounded", lambda hook, secs, *a: seen.update(hook=hook, secs=secs, args=a)
    )
    monkeypatch.setenv("SLURMKIT_CONFIG", str(bad))
    assert gate.run_hook("prolog", env=dict(ENV)) == 0
    ctx, paths, status, results, seconds, exit_code, drain_reason, internal = seen["args"]
    assert seen["hook"] == "prolog" and seen["secs"] == gate.RECORD_TIMEOUT == 1.0
    assert ctx is None and status.value == "unknown" and exit_code == 0 and drain_reason is None
    (r,) = results
    assert (r.check, r.status.value, r.code, r.details) == (
        "config",
        "unknown",
        "CONFIG_ERROR",
        {"internal": True},
    )
    assert "prolog_deadlin" in r.reason and internal == [r.reason] and 0 <= seconds < 5


def test_the_internal_error_record_says_why(run, gpu_fixture, monkeypatch):
    from slurmkit.health import catalog

    seen = {}
    monkeypatch.setattr(
        gate, "_record_bounded", lambda hook, secs, *a: seen.update(hook=hook, secs=secs, args=a)
    )

    def broken(*a, **k):
        raise ValueError("bug")

    monkeypatch.setattr(catalog, "select", broken)
    gpu_fixture()
    code, _, _, _ = run()
    ctx, paths, status, results, seconds, exit_code, drain_reason, internal = seen["args"]
    assert code == 0 and seen["secs"] == gate.RECORD_TIMEOUT and ctx is not None and exit_code == 0
    assert seen["hook"] == "prolog" and 0 <= seconds < 30  # how long the hook ran
    (r,) = results
    assert (r.check, r.code, r.details, r.reason) == (
        "internal",
        "INTERNAL_ERROR",
        {"internal": True},
        "ValueError: bug",
    )
    assert paths["log_dir"].endswith("log") and internal == ["bug"] and drain_reason is None


def test_the_watchdog_thread_never_holds_the_process_open():
    """The real timer (not captured): a process that ends normally while its watchdog still
    waits exits at once, like one with a daemon ``threading.Timer``."""
    code = "from slurmkit.health.deadline import Timer\nTimer(60, lambda: print('fired')).start()\nprint('end')\n"
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
    assert res.stdout == "end\n" and res.returncode == 0 and time.monotonic() - t0 < 30


def test_the_watchdog_says_whether_it_fails_open_or_closed(monkeypatch, capsys):
    timers = []
    monkeypatch.setattr(
        gate,
        "Timer",
        lambda s, fn: timers.append(fn) or type("T", (), {"start": lambda self: None})(),
    )
    monkeypatch.setattr(gate, "_decided", None)
    monkeypatch.setattr(gate.os, "_exit", lambda code: None)
    gate._start_watchdog(2.0, "epilog", True)
    gate._start_watchdog(2.0, "epilog", False)
    timers[0]()
    assert (
        "slurmkit-epilog: internal watchdog fired after 2.0s; failing (fail_closed)"
        in capsys.readouterr().err
    )
    timers[1]()
    assert "slurmkit-epilog: internal watchdog fired after 2.0s; failing open" in capsys.readouterr().err


def test_a_node_record_without_state_or_reason(monkeypatch):
    from slurmkit.slurm import client

    monkeypatch.setattr(client, "show_node", lambda node, timeout: {"NodeName": "node1"})
    assert drain.node_drain("node1", 5) == {"state": "", "reason": ""}


def test_drain_gives_each_call_a_bounded_share_of_its_time(monkeypatch):
    from slurmkit.slurm import client

    seen = {}
    monkeypatch.setattr(client, "show_node", lambda node, timeout: seen.update(show=timeout) or None)
    monkeypatch.setattr(
        client, "drain_node", lambda node, reason, timeout: seen.update(drain=(node, reason, timeout))
    )
    assert drain.guarded_drain("node1", "slurmkit:X c: d", 4.0) == (True, "drained")
    assert seen["show"] == 2.0 and seen["drain"][:2] == ("node1", "slurmkit:X c: d")
    assert 3.5 < seen["drain"][2] <= 4.0
    drain.guarded_drain("node1", "r", 0.1)
    assert seen["show"] == 0.2 and seen["drain"][2] == 0.2  # never less than 0.2 s each


def test_drain_says_it_did_not_drain(fake_scontrol, monkeypatch):
    from slurmkit.slurm import client

    client.configure(fake_scontrol.bin_dir, 10)
    fake_scontrol.set_node("node1", "DRAINED", "ops")
    assert drain.guarded_drain("node1", "slurmkit:X c: d", 2.0)[0] is False

    def broken(*a, **k):
        raise RuntimeError("x")

    monkeypatch.setattr(client, "drain_node", broken)
    fake_scontrol.set_node("node1", "IDLE")
    assert drain.guarded_drain("node1", "slurmkit:X c: d", 2.0) == (False, "scontrol drain failed: x")


def test_untrusted_files_join_the_other_extras_and_the_metric(run, gpu_fixture, monkeypatch, tmp_path):
    gpu_fixture(lambda d: d["gpus"][3]["ecc"].update(volatile_uncorrected=2))
    original = gate._record

    def rejecting_record(*args, **kwargs):
        trust.REJECTED.extend([("/p", "why")] * 3)
        return original(*args, **kwargs)

    monkeypatch.setattr(gate, "_record", rejecting_record)
    code, _, recs, _ = run()
    assert code == 1 and recs[0]["drain"] == "drained" and recs[0]["untrusted_files"] == ["/p: why"] * 3
    assert 'slurmkit_health_untrusted_files{hook="prolog",node="node1"} 3.0' in prom(tmp_path)
    trust.REJECTED.clear()


def test_an_existing_path_is_kept(run, gpu_fixture, monkeypatch):
    gpu_fixture()
    monkeypatch.setenv("PATH", "/custom/bin:" + os.environ["PATH"])
    run()
    assert os.environ["PATH"].startswith("/custom/bin:")


def test_without_an_env_the_process_environment_is_used(
    gpu_fixture, site, fake_scontrol, monkeypatch, tmp_path
):
    gpu_fixture()
    monkeypatch.setattr(gate, "Timer", lambda s, fn: type("T", (), {"start": lambda self: None})())
    monkeypatch.setenv("SLURMKIT_CONFIG", str(site(slurm={"bin_dir": fake_scontrol.bin_dir})))
    for k, v in dict(ENV, SLURM_JOB_ID="777").items():
        monkeypatch.setenv(k, v)
    assert gate.run_hook("prolog") == 0
    recs = [json.loads(x) for x in (tmp_path / "log" / "health.jsonl").read_text().splitlines()]
    assert recs[-1]["job_id"] == "777"


def test_main_exits_with_the_hooks_code(monkeypatch):
    calls = []
    monkeypatch.setattr(gate, "run_hook", lambda hook: calls.append(hook) or 1)

    class Exited(Exception):
        pass

    def exit_(code):
        calls.append(("exit", code))
        raise Exited

    monkeypatch.setattr(gate.os, "_exit", exit_)
    with pytest.raises(Exited):
        gate.main("epilog")
    assert calls == ["epilog", ("exit", 1)]

    def crash(hook):
        raise KeyboardInterrupt

    calls.clear()
    monkeypatch.setattr(gate, "run_hook", crash)
    with pytest.raises(Exited):
        gate.main("prolog")
    assert calls == [("exit", 0)]  # whatever escapes, the process ends (with 0: nothing decided)


def test_debug_prints_the_traceback_and_after_the_verdict_names_the_error(run, gpu_fixture, monkeypatch):
    from slurmkit.health import catalog

    def broken(*a, **k):
        raise ValueError("bug")

    monkeypatch.setattr(catalog, "select", broken)
    monkeypatch.setenv("SLURMKIT_DEBUG", "1")
    gpu_fixture()
    _, err, _, _ = run()
    assert "Traceback (most recent call last)" in err
    monkeypatch.delenv("SLURMKIT_DEBUG")
    _, err, _, _ = run()
    assert "Traceback" not in err


def test_after_the_verdict_the_error_is_named(run, gpu_fixture, monkeypatch):
    def broken_drain(*a, **k):
        raise RuntimeError("late bug")

    monkeypatch.setattr(gate, "guarded_drain", broken_drain)
    gpu_fixture(lambda d: d["gpus"][3]["ecc"].update(volatile_uncorrected=2))
    code, err, _, _ = run()
    assert code == 1 and "slurmkit-prolog: internal error after the verdict: RuntimeError: late bug" in err


def test_the_context_is_closed(run, gpu_fixture, monkeypatch):
    from slurmkit.health.engine import Context

    closed = []
    real = Context.close
    monkeypatch.setattr(Context, "close", lambda self: (closed.append(1), real(self)))
    gpu_fixture()
    run()
    assert closed == [1]


def test_failing_open_names_every_fault_in_one_bounded_line(run):
    code, err, recs, _ = run()  # no GPU fixture: every GPU check is a slurmkit fault
    internal = recs[-1]["internal_errors"]
    assert code == 0 and len(internal) >= 2
    (line,) = [x for x in err.splitlines() if "failing open on slurmkit fault(s): " in x]
    said = line.split("failing open on slurmkit fault(s): ", 1)[1]
    assert said == "; ".join(internal)[:300]


# ------------------------------------------------- the budget's arithmetic, on an injected clock
#
# The gate reads time only through ``time.monotonic`` of its own module: a fake clock there
# (``Clock``) starts at 100.0 and moves only when a stub says so, so every deadline the gate
# hands on can be computed by hand. The checks, the drain and the record are stubs that note
# what they were given.


class Clock:
    def __init__(self, now=100.0):
        self.now = now

    def monotonic(self):
        return self.now


@pytest.fixture
def clocked(monkeypatch, run):
    """``clocked(hook, health, took, fail)`` -> what the checks, the drain and the record got:
    the checks (stubbed) take ``took`` seconds of the fake clock and fail when ``fail``."""
    from slurmkit.health import engine
    from slurmkit.verdict.base import Action, CheckResult, Status

    clock = Clock()
    seen = {}
    monkeypatch.setattr(gate, "time", clock)

    def checks(ctx, specs, deadline=None):
        seen["checks"], seen["hook"], seen["ctx"] = deadline, ctx.hook, ctx
        seen["specs"] = [s.name for s in specs]
        clock.now += seen["took"]
        if seen["fail"]:
            return [CheckResult("gpu_ecc", Status.FAIL, "GPU_ECC_UNCORRECTED", "GPU 3: bad", Action.ISOLATE)]
        return [CheckResult("gpu_ecc", Status.OK)]

    monkeypatch.setattr(engine, "run_checks", checks)
    monkeypatch.setattr(
        gate, "guarded_drain", lambda node, reason, left: seen.update(drain=left) or (True, "drained")
    )
    monkeypatch.setattr(
        gate,
        "_record_bounded",
        lambda hook, secs, ctx, paths, st, res, took, *a: seen.update(record=secs, took=took),
    )

    def go(hook="prolog", health=None, took=0.0, fail=False, env=None):
        seen.clear()
        seen.update(took=took, fail=fail)
        code, *_ = run(hook, health=health, env=env)
        return code, seen

    return go


@pytest.mark.parametrize(
    "health, checks_deadline",
    [
        # reserve = min(drain_timeout, 0.3 x budget) + 0.1, before the budget's end (t0 100 + 5)
        ({"drain_timeout": 3.0}, 105.0 - (1.5 + 0.1)),  # 0.3 x 5 s is the smaller
        ({"drain_timeout": 0.5}, 105.0 - (0.5 + 0.1)),  # the drain's own timeout is
        ({"drain_timeout": 3.0, "prolog_deadline": 2.0}, 102.0 - (0.6 + 0.1)),
    ],
)
def test_the_checks_get_the_budget_less_the_drains_reserve(clocked, gpu_fixture, health, checks_deadline):
    gpu_fixture()
    code, seen = clocked(health=health)
    assert code == 0 and seen["checks"] == pytest.approx(checks_deadline) and seen["hook"] == "prolog"


@pytest.mark.parametrize(
    "health, took, left",
    [
        # the drain gets what is left of the budget less 50 ms, at most drain_timeout, at least 0.3 s
        ({"drain_timeout": 3.0}, 1.0, 3.0),  # 105 - 101 - 0.05 = 3.95: capped at 3.0
        ({"drain_timeout": 3.0}, 3.0, 1.95),  # 105 - 103 - 0.05
        ({"drain_timeout": 3.0}, 4.8, 0.3),  # 0.15 left: raised to the floor of 0.3 s
        ({"drain_timeout": 3.0}, 6.0, 0.3),  # past the deadline: still 0.3 s
    ],
)
def test_the_drain_gets_what_is_left_between_a_floor_and_its_timeout(
    clocked, gpu_fixture, health, took, left
):
    gpu_fixture()
    code, seen = clocked(health=health, took=took, fail=True)
    assert code == 1 and seen["drain"] == pytest.approx(left)


@pytest.mark.parametrize(
    "took, record",
    [
        (1.0, 4.0),  # what is left of the budget: 105 - 101
        (4.5, 1.0),  # 0.5 s left: at least RECORD_TIMEOUT (1 s)
        (7.0, 1.0),  # past the deadline: RECORD_TIMEOUT
    ],
)
def test_the_record_gets_what_is_left_of_the_budget_at_least_one_second(clocked, gpu_fixture, took, record):
    gpu_fixture()
    code, seen = clocked(took=took, health={"drain_on_fail": False}, fail=True)
    assert code == 1 and seen["record"] == pytest.approx(record) and seen["took"] == pytest.approx(took)
    code, seen = clocked(took=took)
    assert code == 0 and seen["record"] == pytest.approx(record) and seen["took"] == pytest.approx(took)


def test_the_epilog_steps_get_the_budget_less_the_reserve(clocked, gpu_fixture, monkeypatch):
    """The epilog's clean-up and efficiency step run first, under the same deadline as the
    checks (epilog budget 30 s: reserve min(3.0, 9.0) + 0.1), with the hook's context and
    one ``extra`` for the record; the escalation sees the clean-up's and the checks' results
    and the same ``extra``, and its own results are part of the verdict."""
    from slurmkit.hooks import efficiency, epilog
    from slurmkit.verdict.base import CheckResult, Status

    seen = {}

    def cleanup(ctx, deadline, extra):
        seen.update(cleanup=deadline, cleanup_ctx=ctx, extra=extra)
        return [CheckResult("cleanup", Status.OK)]

    monkeypatch.setattr(epilog, "cleanup", cleanup)
    monkeypatch.setattr(
        efficiency,
        "epilog_step",
        lambda ctx, deadline, extra: seen.update(step=deadline, step_ctx=ctx, step_extra=extra),
    )

    def escalate(ctx, results, extra):
        seen.update(escalated=[r.check for r in results], esc_ctx=ctx, esc_extra=extra)
        return [CheckResult("escalation", Status.FAIL, "ESCALATED", "x")]

    monkeypatch.setattr(epilog, "escalate", escalate)
    gpu_fixture()
    code, got = clocked("epilog", health={"drain_timeout": 3.0}, env={"SLURM_JOB_UID": "4242424"})
    assert seen["cleanup"] == pytest.approx(130.0 - 3.1) == seen["step"]
    assert got["checks"] == pytest.approx(130.0 - 3.1) and got["hook"] == "epilog"
    assert seen["cleanup_ctx"] is seen["step_ctx"] is seen["esc_ctx"] is got["ctx"]
    assert isinstance(seen["extra"], dict) and seen["extra"] is seen["step_extra"] is seen["esc_extra"]
    assert seen["escalated"] == ["cleanup", "gpu_ecc"]
    assert code == 1 and got["drain"] == pytest.approx(3.0)  # the escalation's fail drains


def test_the_prolog_runs_no_epilog_step(clocked, gpu_fixture, monkeypatch):
    from slurmkit.hooks import efficiency, epilog

    def never(*a, **k):
        raise AssertionError("an epilog step ran in the prolog")

    for mod, name in ((epilog, "cleanup"), (efficiency, "epilog_step"), (epilog, "escalate")):
        monkeypatch.setattr(mod, name, never)
    gpu_fixture()
    code, seen = clocked("prolog")
    assert code == 0 and seen["hook"] == "prolog"


@pytest.mark.parametrize("hook", ["prolog", "epilog"])
def test_the_checks_are_the_hooks_fast_tier_less_the_disabled(clocked, gpu_fixture, hook):
    from slurmkit.health.catalog import CATALOG
    from slurmkit.verdict.base import Tier

    gpu_fixture()
    env = {"SLURM_JOB_UID": "4242424"} if hook == "epilog" else None
    _, seen = clocked(hook, health={"checks": {"gpu_ecc": {"enabled": False}}}, env=env)
    expect = [
        s.name for s in CATALOG.values() if s.tier == Tier.FAST and hook in s.hooks and s.name != "gpu_ecc"
    ]
    assert seen["specs"] == expect and len(expect) > 1


def test_an_error_before_the_context_exists_fails_open_and_is_recorded(run, gpu_fixture, monkeypatch):
    """The context itself cannot be made (a bug there): no context to close, fail open,
    recorded under the node and job of the process environment (as slurmd sets it)."""
    from slurmkit.health.engine import Context

    for k in ("SLURMD_NODENAME", "SLURM_JOB_ID"):
        monkeypatch.setenv(k, ENV[k])

    def broken(*a, **k):
        raise RuntimeError("no context")

    monkeypatch.setattr(Context, "from_env", broken)
    gpu_fixture()
    code, err, recs, _ = run()
    assert code == 0 and "internal error, failing open: RuntimeError: no context" in err
    (rec,) = recs
    assert (rec["node"], rec["job_id"], rec["exit_code"]) == ("node1", "4242", 0)
    assert [r["code"] for r in rec["results"]] == ["INTERNAL_ERROR"]


@pytest.mark.parametrize("fail_closed, decided, expect", [(True, None, 1), (False, None, 0), (True, 0, 0)])
def test_the_watchdog_the_hook_starts_names_it_and_keeps_its_policy(
    run, gpu_fixture, monkeypatch, capsys, fail_closed, decided, expect
):
    """The timer ``run_hook`` starts, fired: it names the hook, fails closed only under
    ``fail_closed`` before a verdict, and exits with a decided verdict after one."""
    gpu_fixture()
    _, _, _, timers = run("epilog", health={"fail_closed": fail_closed}, env={"SLURM_JOB_UID": "4242424"})
    exits = []

    class Exited(Exception):
        pass

    def exit_(code):
        exits.append(code)
        raise Exited  # os._exit does not return

    monkeypatch.setattr(gate.os, "_exit", exit_)
    monkeypatch.setattr(gate, "_decided", decided)
    with pytest.raises(Exited):
        timers[0].fn()
    err = capsys.readouterr().err
    assert exits == [expect]
    said = (
        "exiting 0 as decided"
        if decided is not None
        else ("failing (fail_closed)" if fail_closed else "failing open")
    )
    assert err == f"slurmkit-epilog: internal watchdog fired after 31.0s; {said}\n"


def test_the_slurm_call_timeout_is_the_configured_one(monkeypatch, site, fake_scontrol, gpu_fixture):
    from slurmkit.slurm import binaries

    monkeypatch.setattr(binaries, "_timeout", binaries._timeout)  # restored after the test
    monkeypatch.setattr(binaries, "_bin_dir", binaries._bin_dir)
    monkeypatch.setattr(gate, "Timer", lambda s, fn: type("T", (), {"start": lambda self: None})())
    monkeypatch.setattr(gate, "_decided", None)
    gpu_fixture()
    cfg = site(slurm={"bin_dir": fake_scontrol.bin_dir, "timeout": 7.25})
    monkeypatch.setenv("SLURMKIT_CONFIG", str(cfg))
    assert gate.run_hook("prolog", env=dict(ENV, PATH=os.environ.get("PATH", ""))) == 0
    assert binaries.timeout() == 7.25 and binaries._bin_dir == fake_scontrol.bin_dir


def test_an_epilog_that_asked_for_a_reboot_does_not_drain_as_well(clocked, gpu_fixture, monkeypatch):
    """The escalation's reboot (``scontrol reboot``, which sets its own reason) is the node's
    way out: the gate does not drain over it."""
    from slurmkit.hooks import efficiency, epilog
    from slurmkit.verdict.base import CheckResult, Status

    monkeypatch.setattr(epilog, "cleanup", lambda ctx, deadline, extra: [])
    monkeypatch.setattr(efficiency, "epilog_step", lambda ctx, deadline, extra: None)

    def escalate(ctx, results, extra):
        extra["reboot_requested"] = True
        return [CheckResult("escalation", Status.FAIL, "ESCALATED", "x")]

    monkeypatch.setattr(epilog, "escalate", escalate)
    gpu_fixture()
    code, seen = clocked("epilog", env={"SLURM_JOB_UID": "4242424"})
    assert code == 1 and "drain" not in seen
    monkeypatch.setattr(epilog, "escalate", lambda ctx, results, extra: escalate(ctx, results, {}))
    code, seen = clocked("epilog", env={"SLURM_JOB_UID": "4242424"})
    assert code == 1 and seen["drain"] == pytest.approx(3.0)  # without it, the fail drains


def test_a_log_line_cannot_forge_another(capsys):
    """What the hooks write to slurmd's log: a newline or escape in a path is shown, on one line."""
    gate._say("prolog: ignored untrusted /tmp/x\nslurmkit-prolog: gpu01: PASS\x1b[2K: not root's")
    assert capsys.readouterr().err == (
        "slurmkit-prolog: ignored untrusted /tmp/x\\x0aslurmkit-prolog: gpu01: PASS\\x1b[2K: not root's\n"
    )
