"""Xid events from the kernel log.

NVML only reports Xid events to a process subscribed when they happen
(``nvmlEventSetWait``), and a prolog lives for a second; the driver also writes every
Xid to the kernel log, which is what NVIDIA's own debugging guide, AWS's and
Azure's checkers read. ``/dev/kmsg`` gives each record with its sequence number and
its time since boot in microseconds, without running ``dmesg``.

Record format (Documentation/ABI/testing/dev-kmsg)::

    6,1234,5678901234,-;NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.
"""

from __future__ import annotations

import errno
import os
import re
import time
from typing import Iterable, List, Optional, Tuple

XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})[^)]*\):\s*(\d+)"
    r"(?:,\s*(.*))?"
)


def short_pci(bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` -> the kernel log's ``0000:18:00``."""
    dom, _, rest = bus_id.lower().partition(":")
    bus, _, devfn = rest.partition(":")
    return f"{dom[-4:].rjust(4, '0')}:{bus}:{devfn[:2]}"


def boot_time() -> float:
    with open("/proc/stat", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("btime "):
                return float(line.split()[1])
    return time.time() - float(open("/proc/uptime").read().split()[0])


def parse_record(record: str, btime: float) -> Optional[Tuple[float, str, int, str]]:
    """``(wall_timestamp, pci 'dddd:bb:dd', xid, rest)`` for an Xid record, else ``None``."""
    head, sep, message = record.partition(";")
    if not sep:
        return None
    m = XID_RE.search(message)
    if not m:
        return None
    fields = head.split(",")
    try:
        usec = int(fields[2])
    except (IndexError, ValueError):
        return None
    return btime + usec / 1e6, m.group(1).lower(), int(m.group(2)), (m.group(3) or "").strip()


def read_kmsg_records(path: str = "/dev/kmsg", max_records: int = 200_000) -> List[str]:
    """Every record currently in the kernel ring buffer (non-blocking, one read per record)."""
    out: List[str] = []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return out
    try:
        while len(out) < max_records:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten while reading: skip ahead
                    continue
                break
            if not chunk:
                break
            out.append(chunk.decode("utf-8", "replace").rstrip("\n"))
    finally:
        os.close(fd)
    return out


def xid_records(records: Iterable[str], btime: float) -> List[Tuple[float, str, int, str]]:
    return [r for r in (parse_record(rec, btime) for rec in records) if r is not None]
