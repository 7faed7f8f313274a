"""The one probe runner (``deadline.call_each_with_deadline``): a hook's checks run in one
probe thread, each under its own deadline; a hung one is abandoned with its thread and the
rest go on in a new one. What a hung probe must never do: hold the caller past its deadline,
let its late answer replace the timeout, or let a GPU check start on a hung driver."""

from __future__ import annotations

import _thread
import time

import pytest

from slurmkit.health.catalog import CATALOG
from slurmkit.health.deadline import ProbeTimeout, call_each_with_deadline, call_with_deadline
from slurmkit.health.engine import check_timeout, run_checks
from slurmkit.verdict.base import Status


def test_healthy_calls_run_in_order_in_one_thread_not_one_each():
    seen = []

    def probe(i):
        seen.append((i, _thread.get_ident()))
        return i * 10

    outcomes = call_each_with_deadline([(lambda i=i: probe(i), 1.0) for i in range(16)])
    assert [(kind, value) for kind, value, _ in outcomes] == [("value", i * 10) for i in range(16)]
    assert [i for i, _ in seen] == list(range(16))
    threads = {ident for _, ident in seen}
    assert len(threads) == 1 and _thread.get_ident() not in threads
    assert all(0 <= seconds < 1.0 for _, _, seconds in outcomes)


def test_a_hung_call_is_abandoned_at_its_deadline_and_the_rest_go_on_in_a_new_thread():
    release = _thread.allocate_lock()
    release.acquire()
    threads, timed_out, drawn_after = [], [], []

    def hang():
        threads.append(_thread.get_ident())
        release.acquire(True, 10)  # stuck until the test lets it go
        return "late"

    def quick(name):
        threads.append(_thread.get_ident())
        return name

    def calls():
        yield (lambda: quick("a")), 1.0
        yield hang, 0.2
        drawn_after.append(list(timed_out))  # drawn after on_timeout ran
        yield (lambda: quick("c")), 1.0

    t0 = time.monotonic()
    outcomes = call_each_with_deadline(calls(), timed_out.append)
    elapsed = time.monotonic() - t0
    assert 0.2 <= elapsed < 1.5
    assert [(k, v) for k, v, _ in outcomes] == [("value", "a"), ("timeout", None), ("value", "c")]
    assert outcomes[1][2] >= 0.2
    assert timed_out == [1] and drawn_after == [[1]]
    assert threads[0] == threads[1] != threads[2]
    release.release()  # the abandoned call now returns: its "late" must not show up anywhere
    time.sleep(0.05)
    assert [(k, v) for k, v, _ in outcomes] == [("value", "a"), ("timeout", None), ("value", "c")]


def test_a_call_that_ends_just_before_its_deadline_is_a_value():
    outcomes = call_each_with_deadline([(lambda: time.sleep(0.15) or "ok", 0.6)])
    assert [(k, v) for k, v, _ in outcomes] == [("value", "ok")]


def test_a_zero_timeout_times_out_a_call_that_blocks():
    gate = _thread.allocate_lock()
    gate.acquire()
    outcomes = call_each_with_deadline([(lambda: gate.acquire(True, 5), 0.0)])
    assert outcomes[0][0] == "timeout"
    gate.release()


def test_what_a_call_raises_is_its_outcome_and_the_next_call_still_runs():
    boom = ValueError("boom")

    def bad():
        raise boom

    outcomes = call_each_with_deadline([(bad, 1.0), (lambda: 2, 1.0)])
    assert outcomes[0][:2] == ("error", boom) and outcomes[1][:2] == ("value", 2)


def test_what_drawing_the_calls_raises_is_raised_to_the_caller():
    def calls():
        yield (lambda: 1), 1.0
        raise RuntimeError("bad plan")

    with pytest.raises(RuntimeError, match="bad plan"):
        call_each_with_deadline(calls())


def test_call_with_deadline_is_the_one_call_case():
    assert call_with_deadline(lambda: 7, 1.0, "seven")[0] == 7
    with pytest.raises(KeyError):
        call_with_deadline(lambda: {}["x"], 1.0, "missing")
    gate = _thread.allocate_lock()
    gate.acquire()
    with pytest.raises(ProbeTimeout, match="stuck did not finish within 0.10s"):
        call_with_deadline(lambda: gate.acquire(True, 5), 0.1, "stuck")
    gate.release()


def test_checks_after_a_hung_gpu_probe_the_gpu_ones_are_not_started_the_rest_run(gpu_fixture, ctx_factory):
    gpu_fixture(lambda d: d.update(inject={"hang": {"call": "ecc", "seconds": 30}}))
    ctx = ctx_factory()
    names = ("memory_available", "gpu_ecc", "gpu_temperature", "gpu_count", "memory_available")
    t0 = time.monotonic()
    results = run_checks(ctx, [CATALOG[n] for n in names], deadline=time.monotonic() + 5)
    assert time.monotonic() - t0 < 3.0
    assert [(r.check, r.status, r.code) for r in results] == [
        ("memory_available", Status.OK, results[0].code),
        ("gpu_ecc", Status.FAIL, "CHECK_TIMEOUT"),
        ("gpu_temperature", Status.UNKNOWN, "NOT_RUN"),
        ("gpu_count", Status.UNKNOWN, "NOT_RUN"),
        ("memory_available", Status.OK, results[4].code),
    ]
    assert ctx.backend_hung_in == "gpu_ecc"
    assert results[1].seconds >= check_timeout(ctx, CATALOG["gpu_ecc"])  # held to its own deadline


def test_checks_past_the_runs_deadline_are_not_started(gpu_fixture, ctx_factory):
    gpu_fixture()
    ctx = ctx_factory()
    results = run_checks(ctx, [CATALOG["gpu_count"], CATALOG["gpu_ecc"]], deadline=time.monotonic())
    assert [(r.status, r.code) for r in results] == [(Status.UNKNOWN, "BUDGET_EXHAUSTED")] * 2


def test_a_store_that_does_not_answer_is_unknown_at_its_store_timeout_never_a_failure(
    gpu_fixture, ctx_factory, monkeypatch
):
    """heavy_cache reads the shared store in the probe thread (no thread of its own): the engine
    holds it to ``store_timeout`` and reads a hang as the store's fault, failing open."""
    from slurmkit.health.checks import host

    gate = _thread.allocate_lock()
    gate.acquire()

    class HungStore:
        def node(self, name):
            gate.acquire(True, 10)  # a hard-mounted NFS server that went away
            return {}

    monkeypatch.setattr(host, "for_paths", lambda paths: HungStore())
    ctx = ctx_factory(hook="prolog", health={"checks": {"heavy_cache": {"store_timeout": 0.2}}})
    spec = CATALOG["heavy_cache"]
    assert check_timeout(ctx, spec) == 0.2  # the store's wait, not the 2 s of a node check
    t0 = time.monotonic()
    (result,) = run_checks(ctx, [spec], deadline=time.monotonic() + 5)
    assert 0.2 <= time.monotonic() - t0 < 1.5
    assert (result.status, result.code, result.details.get("internal")) == (
        Status.UNKNOWN,
        "STORE_UNREACHABLE",
        True,
    )
    gate.release()
    ctx.health["checks"]["heavy_cache"]["timeout"] = 0.7  # an explicit timeout still wins
    assert check_timeout(ctx, spec) == 0.7


def _bounded(fn, seconds):
    """``fn()`` in a thread, waited for at most ``seconds``: ``("value", v)``, ``("raised", exc)``
    or ``("hung", None)`` (so a test of a hang cannot hang the suite)."""
    box = []
    done = _thread.allocate_lock()
    done.acquire()

    def run():
        try:
            box.append(("value", fn()))
        except BaseException as exc:
            box.append(("raised", exc))
        done.release()

    _thread.start_new_thread(run, ())
    return box[0] if done.acquire(True, seconds) else ("hung", None)


@pytest.mark.parametrize("bad", ["soon", None, object(), 10**400], ids=["text", "none", "object", "huge-int"])
def test_a_timeout_that_is_no_number_is_raised_to_the_caller_not_a_hang(bad):
    """The timeout was made a float in the worker outside the guarded draw: the worker died,
    ``finished`` was never released and the caller polled for ever (no deadline at all)."""
    kind, exc = _bounded(lambda: call_each_with_deadline([(lambda: 1, 1.0), (lambda: 2, bad)]), 3.0)
    assert kind == "raised" and isinstance(exc, (TypeError, ValueError, OverflowError)), (kind, exc)


@pytest.mark.parametrize("timeout", [-5.0, float("-inf")])
def test_a_negative_timeout_is_a_zero_one(timeout):
    gate = _thread.allocate_lock()
    gate.acquire()
    t0 = time.monotonic()
    outcomes = call_each_with_deadline([(lambda: gate.acquire(True, 5), timeout)])
    assert outcomes[0][0] == "timeout" and time.monotonic() - t0 < 1.0
    gate.release()


def test_a_nan_timeout_times_out_at_once_never_waits_for_ever():
    gate = _thread.allocate_lock()
    gate.acquire()
    kind, outcomes = _bounded(
        lambda: call_each_with_deadline([(lambda: gate.acquire(True, 5), float("nan"))]), 3.0
    )
    gate.release()
    assert kind == "value" and outcomes[0][0] == "timeout"


@pytest.mark.parametrize("timeout", [float("inf"), 1e300, 10**30, 7200])
def test_a_huge_timeout_waits_for_the_call(timeout):
    """Past the longest one lock wait (or infinite): waited in pieces, the answer comes."""
    outcomes = call_each_with_deadline([(lambda: time.sleep(0.05) or "done", timeout)])
    assert [(k, v) for k, v, _ in outcomes] == [("value", "done")]


def test_base_exceptions_of_a_call_are_its_outcome_and_do_not_stop_the_rest():
    stop, interrupt = SystemExit(3), KeyboardInterrupt()

    def raise_(exc):
        raise exc

    outcomes = call_each_with_deadline(
        [(lambda: raise_(stop), 1.0), (lambda: raise_(interrupt), 1.0), (lambda: "after", 1.0)]
    )
    assert [(k, v) for k, v, _ in outcomes] == [("error", stop), ("error", interrupt), ("value", "after")]


def test_many_hung_calls_in_a_row_each_time_out_at_its_own_deadline_and_late_answers_are_dropped():
    gates = [_thread.allocate_lock() for _ in range(5)]
    for g in gates:
        g.acquire()
    timed_out = []
    calls = [(lambda g=g: g.acquire(True, 10) and "late", 0.1) for g in gates] + [(lambda: "last", 1.0)]
    t0 = time.monotonic()
    outcomes = call_each_with_deadline(calls, timed_out.append)
    assert 0.5 <= time.monotonic() - t0 < 3.0
    assert [k for k, _, _ in outcomes] == ["timeout"] * 5 + ["value"] and outcomes[-1][1] == "last"
    assert timed_out == [0, 1, 2, 3, 4]
    for g in gates:
        g.release()  # every abandoned call now answers "late"
    time.sleep(0.1)
    assert [k for k, _, _ in outcomes] == ["timeout"] * 5 + ["value"] and len(outcomes) == 6


def test_an_abandoned_call_answering_while_the_next_one_runs_changes_nothing():
    gate, second = _thread.allocate_lock(), _thread.allocate_lock()
    gate.acquire()
    second.acquire()

    def late():
        gate.acquire(True, 10)
        return "late"

    def next_call():
        gate.release()  # the abandoned call answers now, while this one runs
        time.sleep(0.1)
        return "second"

    outcomes = call_each_with_deadline([(late, 0.1), (next_call, 2.0), (lambda: "third", 1.0)])
    assert [(k, v) for k, v, _ in outcomes] == [("timeout", None), ("value", "second"), ("value", "third")]


def test_drawing_that_raises_after_a_timeout_is_raised():
    gate = _thread.allocate_lock()
    gate.acquire()

    def calls():
        yield (lambda: gate.acquire(True, 5)), 0.05
        raise RuntimeError("plan broke after the hang")

    kind, exc = _bounded(lambda: call_each_with_deadline(calls()), 3.0)
    gate.release()
    assert kind == "raised" and isinstance(exc, RuntimeError)


def test_what_on_timeout_raises_is_raised_to_the_caller():
    gate = _thread.allocate_lock()
    gate.acquire()

    def on_timeout(index):
        raise LookupError(index)

    kind, exc = _bounded(
        lambda: call_each_with_deadline([(lambda: gate.acquire(True, 5), 0.05)], on_timeout), 3.0
    )
    gate.release()
    assert kind == "raised" and isinstance(exc, LookupError) and exc.args == (0,)


def test_a_call_ending_at_about_its_deadline_is_one_outcome_never_two():
    """Value or timeout, whichever the guard saw first, but exactly one per call, in order."""
    for _ in range(20):
        outcomes = call_each_with_deadline([(lambda: time.sleep(0.02) or "v", 0.02), (lambda: "next", 1.0)])
        assert (
            len(outcomes) == 2
            and outcomes[0][0] in ("value", "timeout")
            and outcomes[1][:2] == ("value", "next")
        )


def test_an_empty_sequence_returns_at_once():
    t0 = time.monotonic()
    assert call_each_with_deadline([]) == [] and time.monotonic() - t0 < 0.5


@pytest.mark.parametrize("first", [0.1, 0.3])
def test_a_hung_call_with_a_shorter_timeout_than_the_one_before_is_held_to_its_own(first):
    """The caller slept until the running call's deadline and was not told when the next call
    started: a call that hung with a shorter timeout than what was left of the one before it
    (heavy_cache's 1 s store wait after a 2 s GPU check) was held to that earlier deadline."""
    gate = _thread.allocate_lock()
    gate.acquire()
    calls = [(lambda: time.sleep(first) or "slow but in time", 5.0), (lambda: gate.acquire(True, 10), 0.2)]
    t0 = time.monotonic()
    kind, outcomes = _bounded(lambda: call_each_with_deadline(calls), 8.0)
    elapsed = time.monotonic() - t0
    gate.release()
    assert kind == "value" and [k for k, _, _ in outcomes] == ["value", "timeout"]
    assert elapsed < first + 0.2 + 2.0, elapsed  # not the first call's 5 s
    assert 0.2 <= outcomes[1][2] < 2.5


def test_a_shorter_timeout_after_healthy_longer_ones_still_returns_at_once():
    outcomes = call_each_with_deadline(
        [(lambda i=i: time.sleep(0.08) or i, t) for i, t in enumerate((3.0, 0.5, 2.0, 0.3))]
    )
    assert [(k, v) for k, v, _ in outcomes] == [("value", i) for i in range(4)]


def test_a_hung_store_after_a_slow_check_is_unknown_at_its_store_timeout(ctx_factory, monkeypatch):
    from slurmkit.health.checks import host
    from slurmkit.health.declare import CheckSpec
    from slurmkit.verdict.base import CheckResult, Tier

    gate = _thread.allocate_lock()
    gate.acquire()

    class HungStore:
        def node(self, name):
            gate.acquire(True, 10)
            return {}

    monkeypatch.setattr(host, "for_paths", lambda paths: HungStore())
    slow = CheckSpec(
        "slow_probe",
        Tier.FAST,
        lambda ctx, params: time.sleep(0.15) or CheckResult("slow_probe", Status.OK),
        "a check that takes its time, within its timeout",
        gpu=False,
    )
    ctx = ctx_factory(hook="prolog", health={"checks": {"heavy_cache": {"store_timeout": 0.2}}})
    ctx.health["checks"]["slow_probe"] = {"timeout": 4.0}
    t0 = time.monotonic()
    results = run_checks(ctx, [slow, CATALOG["heavy_cache"]], deadline=time.monotonic() + 6)
    elapsed = time.monotonic() - t0
    gate.release()
    assert [(r.check, r.status) for r in results] == [
        ("slow_probe", Status.OK),
        ("heavy_cache", Status.UNKNOWN),
    ]
    assert results[1].code == "STORE_UNREACHABLE" and results[1].seconds < 2.0
    assert elapsed < 2.5, elapsed  # not slow_probe's 4 s


def _spec(name, fn, gpu=False):
    from slurmkit.health.declare import CheckSpec
    from slurmkit.verdict.base import Tier

    return CheckSpec(name, Tier.FAST, fn, f"{name} (test)", gpu=gpu)


def test_a_hung_host_check_is_an_isolating_failure_and_its_late_answer_changes_nothing(ctx_factory):
    from slurmkit.verdict.base import Action, CheckResult

    gate = _thread.allocate_lock()
    gate.acquire()
    late = []

    def hung(ctx, params):
        gate.acquire(True, 10)
        ctx.backend_hung_in = "written late by the abandoned check"
        late.append(True)
        return CheckResult("hung_host", Status.OK)

    ctx = ctx_factory(hook="prolog")
    ctx.health["checks"]["hung_host"] = {"timeout": 0.2}
    specs = [_spec("hung_host", hung), _spec("after", lambda ctx, params: CheckResult("after", Status.OK))]
    results = run_checks(ctx, specs, deadline=time.monotonic() + 5)
    assert [(r.check, r.status, r.code, r.action) for r in results] == [
        ("hung_host", Status.FAIL, "CHECK_TIMEOUT", Action.ISOLATE),
        ("after", Status.OK, "OK", Action.NONE),
    ]
    assert ctx.backend_hung_in is None  # a host check's hang is not the GPU driver's
    gate.release()
    deadline = time.monotonic() + 2
    while not late and time.monotonic() < deadline:
        time.sleep(0.01)
    assert late and results[0].status == Status.FAIL and results[0].code == "CHECK_TIMEOUT"


def test_an_exception_from_a_check_is_its_result_but_a_base_exception_is_raised(ctx_factory):
    from slurmkit.verdict.base import CheckResult

    def raises(exc):
        def fn(ctx, params):
            raise exc

        return fn

    ctx = ctx_factory(hook="prolog")
    ok = _spec("fine", lambda ctx, params: CheckResult("fine", Status.OK))
    results = run_checks(ctx, [_spec("buggy", raises(ZeroDivisionError("x"))), ok])
    assert [(r.status, r.code) for r in results] == [(Status.UNKNOWN, "INTERNAL_ERROR"), (Status.OK, "OK")]
    wrong = _spec("wrong_type", lambda ctx, params: "ok")
    assert run_checks(ctx, [wrong])[0].code == "INTERNAL_ERROR"
    with pytest.raises(KeyboardInterrupt):
        run_checks(ctx, [ok, _spec("interrupted", raises(KeyboardInterrupt())), ok])


def test_run_one_with_a_zero_or_negative_timeout_never_waits_on_a_hung_check(ctx_factory):
    from slurmkit.health.engine import run_one

    gate = _thread.allocate_lock()
    gate.acquire()
    ctx = ctx_factory(hook="prolog")
    for timeout in (0.0, -1.0):
        t0 = time.monotonic()
        result = run_one(ctx, _spec("stuck", lambda ctx, params: gate.acquire(True, 5)), timeout)
        assert result.code == "CHECK_TIMEOUT" and time.monotonic() - t0 < 2.0
    gate.release()


def test_a_finished_sequence_parks_its_thread_for_the_next_and_a_hung_one_does_not():
    """A hook's second sequence (the record after the checks) goes to the parked probe thread:
    a wake-up, not a new thread. A thread abandoned in a hung call is never handed work again."""
    from slurmkit.health import deadline

    deadline.prestart()
    parked = list(deadline._parked)
    assert len(parked) == 1
    first = call_each_with_deadline([(_thread.get_ident, 1.0)] * 3)
    second = call_each_with_deadline([(_thread.get_ident, 1.0)])
    idents = {value for _, value, _ in first + second}
    assert len(idents) == 1 and _thread.get_ident() not in idents
    assert deadline._parked == parked  # the same thread, parked again
    deadline.prestart()  # one is parked already: no second one
    assert deadline._parked == parked

    gate = _thread.allocate_lock()
    gate.acquire()
    hung = call_each_with_deadline([(lambda: gate.acquire(True, 5) and _thread.get_ident(), 0.1)])
    assert hung[0][0] == "timeout"
    after = call_each_with_deadline([(_thread.get_ident, 1.0)])
    assert after[0][1] not in idents  # the stuck thread is not reused
    gate.release()
    time.sleep(0.05)  # the abandoned call returns now: its thread ends, it does not park
    assert len(deadline._parked) == 1 and deadline._parked[0] is not parked[0]


def test_a_forked_child_does_not_hand_its_sequence_to_the_parents_parked_thread():
    """The parent's parked thread does not exist in a fork: the child starts its own, and its
    sequence runs at once (not after the call's whole timeout)."""
    import os

    from slurmkit.health import deadline

    deadline.prestart()
    assert deadline._parked
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one call with a long timeout must still answer at once
        try:
            t0 = time.monotonic()
            ((kind, value, _),) = call_each_with_deadline([(lambda: 42, 30.0)])
            os.write(write, f"{kind} {value} {time.monotonic() - t0:.3f}".encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    kind, value, seconds = os.read(read, 100).decode().split()
    os.close(read)
    assert (kind, value) == ("value", "42") and float(seconds) < 5.0
