"""Run a probe under a deadline.

Why a thread and not a signal: an NVML call into a GPU that fell off the bus can
block inside the driver for minutes (that is what Xid 79 looks like from user
space), and a blocked C call cannot be interrupted by ``SIGALRM``. A daemon worker
thread can be abandoned: the caller stops waiting at the deadline, reports the check
as failed naming it, and the process exits with ``os._exit`` so the stuck thread
cannot hold it open. ctypes (nvidia-ml-py) and ``time.sleep`` release the GIL, so
the main thread keeps running while a probe is stuck.

The threads are started with the low-level :mod:`_thread` API: a hook is a fresh process per
job and runs a probe thread per check, and ``threading`` (with what it imports) is a
measurable part of the prolog's start-up (docs/benchmarks.md) while giving these threads
nothing they need: each is abandoned or finishes on its own, and the process ends with
``os._exit``.
"""

from __future__ import annotations

import _thread
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Callable, Tuple


class ProbeTimeout(Exception):
    """A probe ran past its deadline; the worker thread was abandoned."""

    def __init__(self, name: str, seconds: float):
        super().__init__(f"{name} did not finish within {seconds:.2f}s")
        self.name = name
        self.seconds = seconds


def _run(target: Callable[[], None], done) -> None:
    try:
        target()
    finally:
        done.release()


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


def call_with_deadline(fn: Callable[[], Any], timeout: float, name: str) -> Tuple[Any, float]:
    """Call ``fn()`` in a daemon thread; return ``(result, seconds)``.

    Raises :class:`ProbeTimeout` when it is not done after ``timeout`` seconds, and
    re-raises whatever ``fn`` raised otherwise.
    """
    box: dict = {}
    done = _thread.allocate_lock()
    done.acquire()  # released by the worker when fn has returned or raised

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    start = time.monotonic()
    _thread.start_new_thread(_run, (target, done))
    finished = done.acquire(True, max(0.0, timeout))
    elapsed = time.monotonic() - start
    if not finished:
        raise ProbeTimeout(name, timeout)
    if "error" in box:
        raise box["error"]
    return box.get("value"), elapsed
