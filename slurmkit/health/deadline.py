"""Run a probe under a deadline.

Why a thread and not a signal: an NVML call into a GPU that fell off the bus can
block inside the driver for minutes (that is what Xid 79 looks like from user
space), and a blocked C call cannot be interrupted by ``SIGALRM``. A daemon worker
thread can be abandoned: the caller stops waiting at the deadline, reports the check
as failed naming it, and the process exits with ``os._exit`` so the stuck thread
cannot hold it open. ctypes (nvidia-ml-py) and ``time.sleep`` release the GIL, so
the main thread keeps running while a probe is stuck.
"""

from __future__ import annotations

import threading
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


def call_with_deadline(fn: Callable[[], Any], timeout: float, name: str) -> Tuple[Any, float]:
    """Call ``fn()`` in a daemon thread; return ``(result, seconds)``.

    Raises :class:`ProbeTimeout` when it is not done after ``timeout`` seconds, and
    re-raises whatever ``fn`` raised otherwise.
    """
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    start = time.monotonic()
    worker = threading.Thread(target=target, name=f"probe-{name}", daemon=True)
    worker.start()
    worker.join(max(0.0, timeout))
    elapsed = time.monotonic() - start
    if worker.is_alive():
        raise ProbeTimeout(name, timeout)
    if "error" in box:
        raise box["error"]
    return box.get("value"), elapsed
