"""Prometheus textfile-collector files, written atomically (shared by health and sweeps).

node_exporter's textfile collector reads every ``*.prom`` file in its directory on
each scrape; a half-written file would be read as garbage, so files are written
atomically by :func:`slurmkit.core.files.write_bytes_atomic` (a random ``O_EXCL |
O_NOFOLLOW`` temporary file, ``fchmod`` on its descriptor, ``rename``), in a directory
that passes root's trust rule (:func:`slurmkit.core.trust.writable_dir`).
prometheus-client's own ``write_to_textfile`` is not used: its temporary name
(``<path>.<pid>.<thread>``) is predictable and opened through a symlink, and a mode
set afterwards by path follows a symlink planted at the target.
prometheus-client is imported only when a file is written: the prolog decides its
verdict first and pays for the import afterwards.

Usage::

    from slurmkit.metrics import Sample, write_textfile
    write_textfile("/var/lib/node-exporter/slurmkit_health_node1.prom", [
        Sample("slurmkit_health_status", "Nagios code of the last verdict", {"node": "node1"}, 0),
    ])
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional

from slurmkit.core import trust
from slurmkit.core.files import write_bytes_atomic

_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_SAFE_FILE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass
class Sample:
    name: str
    doc: str
    labels: Dict[str, str] = field(default_factory=dict)
    value: float = 0.0


def file_name(prefix: str, *parts: str) -> str:
    """``file_name("slurmkit_health", "prolog", "node1")`` -> ``slurmkit_health_prolog_node1.prom``,
    with anything unsafe in a file name replaced."""
    return "_".join([prefix, *(_SAFE_FILE.sub("_", p) for p in parts if p)]) + ".prom"


def write_textfile(path: str, samples: Iterable[Sample], *, mode: Optional[int] = 0o644) -> str:
    """Write ``samples`` as gauges to ``path`` atomically; return the path.

    Samples with the same name must carry the same label names (Prometheus rule);
    a mismatch raises ``ValueError`` before anything is written. A directory that fails
    the trust rule (another account could write or swap it) raises
    :class:`~slurmkit.core.trust.UntrustedFile` and nothing is written.
    """
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    registry = CollectorRegistry()
    gauges: Dict[str, Gauge] = {}
    label_sets: Dict[str, List[str]] = {}
    items = list(samples)
    for s in items:
        if not _NAME_RE.match(s.name):
            raise ValueError(f"invalid metric name {s.name!r}")
        keys = sorted(s.labels)
        if s.name in label_sets and label_sets[s.name] != keys:
            raise ValueError(f"metric {s.name}: label names {keys} differ from {label_sets[s.name]}")
        label_sets[s.name] = keys
    for s in items:
        g = gauges.get(s.name)
        if g is None:
            g = gauges[s.name] = Gauge(s.name, s.doc, label_sets[s.name], registry=registry)
        target = g.labels(**{k: str(v) for k, v in s.labels.items()}) if s.labels else g
        target.set(float(s.value))
    directory = os.path.dirname(os.path.abspath(path))
    why = trust.writable_dir(directory)
    if why:
        raise trust.UntrustedFile(directory, why)
    write_bytes_atomic(path, generate_latest(registry), mode=mode)
    return path
