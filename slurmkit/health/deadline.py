"""Run a probe under a deadline.

Why a thread and not a signal: an NVML call into a GPU that fell off the bus can
block inside the driver for minutes (that is what Xid 79 looks like from user
space), and a blocked C call cannot be interrupted by ``SIGALRM``. A daemon worker
thread can be abandoned: the caller stops waiting at the deadline, reports the check
as failed naming it, and the process exits with ``os._exit`` so the stuck thread
cannot hold it open. ctypes (nvidia-ml-py) and ``time.sleep`` release the GIL, so
the main thread keeps running while a probe is stuck.

The threads are started with the low-level :mod:`_thread` API: a hook is a fresh process per
job, and ``threading`` (with what it imports) is a measurable part of the prolog's start-up
(docs/benchmarks.md) while giving these threads nothing they need: each is abandoned or
finishes on its own, and the process ends with ``os._exit``. A sequence of probes (a hook's
checks) runs in one thread, :func:`call_each_with_deadline`, so that a healthy run costs one
hand-over, not one per check.
"""

from __future__ import annotations

import _thread
import os
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, List, Optional, Tuple


#: The longest one wait on a lock (a lock's wait has an upper bound; a longer timeout is waited
#: in several of these).
_LONGEST_WAIT = 3600.0


class ProbeTimeout(Exception):
    """A probe ran past its deadline; the worker thread was abandoned."""

    def __init__(self, name: str, seconds: float):
        super().__init__(f"{name} did not finish within {seconds:.2f}s")
        self.name = name
        self.seconds = seconds


class Timer:
    """``Timer(seconds, fn).start()``: call ``fn()`` in a daemon thread after ``seconds`` (the
    hooks' watchdog; ``threading.Timer`` without ``threading``, and never cancelled)."""

    def __init__(self, seconds: float, fn: Callable[[], Any]) -> None:
        self.seconds = seconds
        self.fn = fn

    def _wait_then_call(self) -> None:
        time.sleep(self.seconds)
        self.fn()

    def start(self) -> None:
        _thread.start_new_thread(self._wait_then_call, ())


class _ProbeThread:
    """A daemon thread that runs the sequences handed to it, one at a time, and parks between
    them (:func:`_hand`). A sequence it is abandoned in (a hung call) ends it."""

    def __init__(self) -> None:
        self._go = _thread.allocate_lock()
        self._go.acquire()
        self._task: Optional[Callable[[], Optional[Callable[[], None]]]] = None
        _thread.start_new_thread(self._serve, ())

    def _serve(self) -> None:
        while True:
            self._go.acquire()
            task, self._task = self._task, None
            finish = task()  # type: ignore[misc]
            if finish is None:
                return  # abandoned: the caller went on without this thread
            with _parked_guard:
                keep = not _parked
                if keep:
                    _parked.append(self)
            finish()  # parked first, so the caller's next sequence finds this thread
            if not keep:
                return

    def hand(self, task: Callable[[], Optional[Callable[[], None]]]) -> None:
        self._task = task
        self._go.release()


#: The probe thread waiting for the next sequence (at most one). Handing a sequence to a parked
#: thread is a wake-up; starting a thread is a new task, which a busy scheduler queues behind
#: the running ones (measured: docs/benchmarks.md, "Prolog fast path", every core busy).
_parked: List[_ProbeThread] = []
_parked_guard = _thread.allocate_lock()


def _forget_parked_in_child() -> None:
    """A forked child has none of its parent's threads: a parked one there would take a sequence
    and never run it (a heavy check forks its probe workers; each would wait its whole timeout)."""
    global _parked_guard
    _parked_guard = _thread.allocate_lock()  # the parent may have held it while forking
    _parked.clear()


os.register_at_fork(after_in_child=_forget_parked_in_child)


def _hand(task: Callable[[], Optional[Callable[[], None]]]) -> None:
    with _parked_guard:
        thread = _parked.pop() if _parked else None
    (thread or _ProbeThread()).hand(task)


def prestart() -> None:
    """Start a probe thread and park it, if none is: a hook calls this first, so the thread
    comes up while the hook's modules load and its first sequence is a wake-up."""
    with _parked_guard:
        if _parked:
            return
    thread = _ProbeThread()
    with _parked_guard:
        _parked.append(thread)


def call_each_with_deadline(
    calls: Iterable[Tuple[Callable[[], Any], float]],
    on_timeout: Optional[Callable[[int], None]] = None,
) -> List[Tuple[str, Any, float]]:
    """Call each ``fn`` of ``calls`` (``(fn, timeout)`` pairs, drawn one at a time) in order, in
    one probe thread (a parked one when there is one), each under its own ``timeout`` in seconds. Returns, per call,
    ``("value", result, seconds)``, ``("error", exception, seconds)`` or ``("timeout", None,
    seconds)``.

    One thread for the whole sequence, not one per call: a call handed to a thread and waited
    for costs two cross-CPU wake-ups (about 0.3 ms each on an idle machine, far more when the
    cores are busy), which for sixteen fast checks was most of a prolog's own time. Here the
    caller sleeps until the running call's deadline or the end of the sequence, whichever comes
    first; a call that starts with an earlier deadline than the one the caller sleeps until (a
    shorter timeout after a longer one) wakes it. A call past its deadline is abandoned with
    its thread; ``on_timeout(index)`` runs in the caller's thread, then the calls after it go on
    in a new thread. ``calls`` is drawn in the worker thread, after ``on_timeout``, so what it
    decides next sees what ``on_timeout`` changed; an exception raised while drawing it (or a
    timeout that is not a number) is re-raised here.
    """
    it = iter(calls)
    outcomes: List[Tuple[str, Any, float]] = []
    guard = _thread.allocate_lock()  # orders the worker's and the caller's view of the running call
    wake = _thread.allocate_lock()
    wake.acquire()  # released by the worker (under guard, see _wake) to end the caller's sleep
    # generation: which worker is current (an abandoned one drops what it gets back); call,
    # started, timeout: the running call's index, start and timeout (started is None between
    # calls); failed: what drawing ``calls`` raised; done: ``calls`` is exhausted or drawing it
    # raised; until: when the caller's sleep ends (None while it is awake); woken: ``wake`` is
    # released and not yet taken
    state: dict = {
        "generation": 0,
        "call": -1,
        "started": None,
        "timeout": 0.0,
        "failed": None,
        "done": False,
        "until": None,
        "woken": False,
    }

    def _wake() -> None:  # under guard
        if not state["woken"]:
            state["woken"] = True
            wake.release()

    def finish() -> None:  # the worker, once it is parked for the next sequence
        with guard:
            _wake()

    def work(generation: int) -> Optional[Callable[[], None]]:
        """Run the calls from where the sequence is; return :func:`finish` at its end, ``None``
        when the caller gave up on this thread (it stays in a hung call or drops the answer)."""
        while True:
            with guard:
                if state["generation"] != generation:
                    return None
                try:
                    fn, timeout = next(it)
                    timeout = float(timeout)  # not a number: raised to the caller, not lost here
                except StopIteration:
                    state["done"] = True
                    return finish
                except BaseException as exc:
                    state["failed"] = exc
                    state["done"] = True
                    return finish
                state["call"], state["timeout"] = len(outcomes), timeout
                state["started"] = time.monotonic()
                until = state["until"]
                if until is not None and state["started"] + timeout < until:
                    # the caller sleeps past this call's deadline (an earlier call's, longer):
                    # wake it to watch this one; a healthy run with no shorter timeout never does
                    _wake()
            try:
                outcome: Tuple[str, Any] = ("value", fn())
            except BaseException as exc:  # handed to the caller
                outcome = ("error", exc)
            with guard:
                if state["generation"] != generation:
                    return None  # the caller gave up on this call and went on without this thread
                outcomes.append((outcome[0], outcome[1], time.monotonic() - state["started"]))
                state["started"] = None

    _hand(lambda: work(0))
    while True:
        with guard:
            if state["done"]:
                break
            call, started, timeout = state["call"], state["started"], state["timeout"]
            # between calls (or before the first) the worker is in ``calls``' own code: look again soon
            now = time.monotonic()
            wait = min(max(0.0, 0.05 if started is None else started + timeout - now), _LONGEST_WAIT)
            state["until"] = now + wait
        woken = wake.acquire(True, wait)
        with guard:
            state["until"] = None
            if woken:
                state["woken"] = False
            if state["done"]:
                break
            if state["started"] is None or state["call"] != call:
                continue  # that call returned in time; another one may be running
            if time.monotonic() < started + timeout:
                continue  # woken a little early, or waited the longest a lock allows
            index = len(outcomes)
            outcomes.append(("timeout", None, time.monotonic() - started))
            state["generation"] += 1
            state["started"] = None
            generation = state["generation"]
        if on_timeout is not None:
            on_timeout(index)
        _hand(lambda generation=generation: work(generation))
    if state["failed"] is not None:
        raise state["failed"]
    return outcomes


def call_with_deadline(fn: Callable[[], Any], timeout: float, name: str) -> Tuple[Any, float]:
    """Call ``fn()`` in a daemon thread; return ``(result, seconds)``.

    Raises :class:`ProbeTimeout` when it is not done after ``timeout`` seconds, and
    re-raises whatever ``fn`` raised otherwise.
    """
    ((kind, value, seconds),) = call_each_with_deadline([(fn, max(0.0, timeout))])
    if kind == "timeout":
        raise ProbeTimeout(name, timeout)
    if kind == "error":
        raise value
    return value, seconds
