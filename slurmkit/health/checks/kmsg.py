"""Xid events from the kernel log.

NVML only reports Xid events to a process subscribed when they happen
(``nvmlEventSetWait``), and a prolog lives for a second; the driver also writes every
Xid to the kernel log, which is what NVIDIA's own debugging guide, AWS's and
Azure's checkers read. ``/dev/kmsg`` gives each record with its sequence number and
its time since boot in microseconds, without running ``dmesg``.

Record format (Documentation/ABI/testing/dev-kmsg)::

    6,1234,5678901234,-;NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.

A GPU that is lost before or outside an Xid report is printed without an ``NVRM: Xid``
line: at probe time (open-gpu-kernel-modules ``RmInitAdapter``: "NVRM: The NVIDIA GPU
0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fallen off the bus and is not
responding to commands.", one record with embedded newlines, escaped ``\x0a`` in /dev/kmsg)
or as "NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.". NVIDIA's NVSentinel and
leptonai/gpud treat both as Xid 79, and so does slurmkit; when the same GPU also has a real
Xid 79 record within a minute, only that one is kept.
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

#: "NVRM: The NVIDIA GPU 0000:b3:00.0 ... fallen off the bus ..." and
#: "NVRM: GPU 0000:29:00.0: GPU has fallen off the bus." (domain optional, as gpud accepts).
FALLEN_RE = re.compile(
    r"NVRM: (?:The NVIDIA )?GPU (?:at )?(?:PCI:)?((?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
    r"(?:\.[0-7])?\b.{0,300}?fallen off the bus",
    re.DOTALL,
)

#: Xid number NVIDIA's catalog gives a lost GPU (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS).
XID_FALLEN_OFF_THE_BUS = 79
#: A "fallen off the bus" line this close to a real Xid 79 of the same GPU is the same event.
FALLEN_DEDUP_SECONDS = 60.0


def short_pci(bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` -> the kernel log's ``0000:18:00``."""
    dom, _, rest = bus_id.lower().partition(":")
    bus, _, devfn = rest.partition(":")
    return f"{dom[-4:].rjust(4, '0')}:{bus}:{devfn[:2]}"


def boot_time() -> float:
    # utf-8, not ascii: the kernel writes ASCII, and utf-8's codec is loaded at start-up
    with open("/proc/stat", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("btime "):
                return float(line.split()[1])
    return time.time() - float(open("/proc/uptime").read().split()[0])


def parse_message(message: str) -> Optional[Tuple[str, int, str, bool]]:
    """``(pci 'dddd:bb:dd', xid, rest, from_text)`` for one kernel message, else ``None``.

    ``from_text`` is true for a "fallen off the bus" message without an Xid line, reported as
    Xid 79. Works on a /dev/kmsg record's text and on a ``dmesg`` line (any prefix).
    """
    m = XID_RE.search(message)
    if m:
        return m.group(1).lower(), int(m.group(2)), (m.group(3) or "").strip(), False
    f = FALLEN_RE.search(message)
    if not f:
        return None
    addr = f.group(1).lower()
    if addr.count(":") == 1:
        addr = "0000:" + addr
    dom, bus, dev = addr.split(":")
    text = re.sub(r"(\\x0a|\n)\s*", " ", message[f.start() :]).strip()
    return f"{dom[-4:].rjust(4, '0')}:{bus}:{dev}", XID_FALLEN_OFF_THE_BUS, text, True


def _parse(record: str, btime: float) -> Optional[Tuple[float, str, int, str, bool]]:
    head, sep, message = record.partition(";")
    if not sep:
        return None
    hit = parse_message(message)
    if hit is None:
        return None
    fields = head.split(",")
    try:
        usec = int(fields[2])
    except (IndexError, ValueError):
        return None
    return (btime + usec / 1e6,) + hit


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
    """Every Xid in ``records``; a "fallen off the bus" message counts unless the same GPU has a
    real Xid 79 within ``FALLEN_DEDUP_SECONDS`` (the driver often prints both)."""
    hits = [h for h in (_parse(rec, btime) for rec in records) if h is not None]
    real79 = [
        (ts, pci) for ts, pci, xid, _, from_text in hits if xid == XID_FALLEN_OFF_THE_BUS and not from_text
    ]
    out = []
    for ts, pci, xid, rest, from_text in hits:
        if from_text and any(p == pci and abs(t - ts) <= FALLEN_DEDUP_SECONDS for t, p in real79):
            continue
        out.append((ts, pci, xid, rest))
    return out
