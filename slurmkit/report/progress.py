"""Progress of long reads on a terminal: rows read, rate and time elapsed, on stderr.

``report ingest`` and the reports over a saved dump show one line that a carriage return
rewrites about four times a second, and erase it when they are done; nothing at all when
stderr is not a terminal, with ``-q``, for standard input (its size is unknown) or for a read
that ends within :data:`DELAY` seconds. Nothing is called per row: a thread polls where the
read is, every :data:`INTERVAL` seconds:

* the reference path (Python): the byte offset of the open dump (``lseek(fd, 0, SEEK_CUR)``,
  which moves nothing), over the file's size;
* the DuckDB engine and ingest: DuckDB's own progress of the running query
  (``query_progress()``, which DuckDB reads from another thread; its progress bar is
  enabled, its printing is not).

Rows are an estimate, the fraction read times the file's size over the mean length of the
lines at its head (``~``). The readers find the active meter through :func:`attach_file` and
:func:`attach_connection`, no-ops when there is none.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Any, Callable, Iterator, List, Optional, TextIO

#: seconds between two updates of the line
INTERVAL = 0.25
#: a read that ends before this many seconds shows nothing
DELAY = 0.5
#: bytes of the file's head read for the mean line length
_SAMPLE = 1 << 16

_active: List["Meter"] = []


def _mean_line(path: str) -> Optional[float]:
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SAMPLE)
    except OSError:
        return None
    lines = head.count(b"\n")
    return len(head) / lines if lines else None


class Meter:
    """The progress line of one read of ``path`` (``size`` bytes), written to ``out``."""

    def __init__(self, label: str, path: str, size: int, out: TextIO) -> None:
        self.label = label
        self.size = size
        self.out = out
        self.rows_total = size / (_mean_line(path) or 100.0)
        self.started = time.monotonic()
        self.fraction = 0.0
        self.shown = False
        self._probes: List[Callable[[], Optional[float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="slurmkit-progress", daemon=True)

    # -- what the readers attach
    def file(self, fh: Any) -> None:
        try:
            fd = fh.fileno()
        except (AttributeError, OSError, ValueError):
            return

        def where() -> Optional[float]:
            if fh.closed:  # (its descriptor's number may belong to another file by now)
                return None
            try:
                return os.lseek(fd, 0, os.SEEK_CUR) / self.size
            except OSError:
                return None

        self._probes.append(where)

    def connection(self, con: Any) -> None:
        con.execute("SET enable_progress_bar = true")
        con.execute("SET enable_progress_bar_print = false")

        def where() -> Optional[float]:
            try:
                pct = con.query_progress()
            except Exception:  # noqa: BLE001 - a closed connection, or no query: no news
                return None
            return pct / 100.0 if pct is not None and pct >= 0 else None

        self._probes.append(where)

    # -- the line
    def line(self, now: float) -> str:
        elapsed = now - self.started
        rows = int(self.fraction * self.rows_total)
        rate = rows / elapsed if elapsed > 0 else 0.0
        return (
            f"slurmkit: {self.label}: ~{rows:,} rows ({100 * self.fraction:.0f}%), "
            f"{rate:,.0f} rows/s, {elapsed:.1f} s"
        )

    def poll(self) -> None:
        for probe in list(self._probes):
            f = probe()
            if f is not None:
                self.fraction = max(self.fraction, min(f, 1.0))

    def _loop(self) -> None:
        while not self._stop.wait(INTERVAL):
            self.poll()
            now = time.monotonic()
            if now - self.started < DELAY:
                continue
            self.out.write("\r" + self.line(now) + "\x1b[K")
            self.out.flush()
            self.shown = True

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.shown:
            self.out.write("\r\x1b[K")
            self.out.flush()


def wanted(path: Optional[str], quiet: bool, out: Optional[TextIO] = None) -> bool:
    """Whether a read of ``path`` shows progress: a regular file, not ``-q``, stderr a terminal."""
    out = out or sys.stderr
    if quiet or not path or path == "-":
        return False
    try:
        return out.isatty() and os.path.isfile(path)
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def reading(path: Optional[str], *, quiet: bool, label: Optional[str] = None) -> Iterator[Optional[Meter]]:
    """The progress meter of the read of ``path`` within the block (``None``: none shown, see
    :func:`wanted`)."""
    if not wanted(path, quiet):
        yield None
        return
    assert path is not None
    meter = Meter(label or path, path, os.path.getsize(path) or 1, sys.stderr)
    _active.append(meter)
    meter.start()
    try:
        yield meter
    finally:
        _active.remove(meter)
        meter.stop()


def attach_file(fh: Any) -> None:
    """A reader opened a dump: the active meter (if any) follows its byte offset."""
    if _active:
        _active[-1].file(fh)


def attach_connection(con: Any) -> None:
    """The engine opened a DuckDB connection: the active meter (if any) follows its queries."""
    if _active:
        _active[-1].connection(con)
