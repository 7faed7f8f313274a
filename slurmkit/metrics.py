"""Prometheus textfile-collector files, written atomically (the hooks, the sweep, the leak killer).

node_exporter's textfile collector reads every ``*.prom`` file in its directory on each
scrape; a half-written file would be read as garbage, so a file is written under a
temporary name (not ``*.prom``) in the same directory and renamed over the old one, by
:func:`slurmkit.core.files.write_bytes_atomic` (a random ``O_EXCL | O_NOFOLLOW`` file, ``fchmod``
on its descriptor, ``rename``), in a directory that passes root's trust rule
(:func:`slurmkit.core.trust.writable_dir`).

The text is the Prometheus text exposition format, version 0.0.4
(https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format): a
``# HELP`` and a ``# TYPE`` line per metric, then one ``name{label="value",...} value`` line
per sample. slurmkit writes gauges only, so the writer is this module: the prolog pays for
``os`` and ``re``, not for prometheus-client's import of ``http.server``, ``email`` and ``ssl``.
The tests parse what it writes with prometheus-client's parser and with ``promtool check
metrics``.

Usage::

    from slurmkit.metrics import Sample, write_textfile
    write_textfile("/var/lib/node-exporter/slurmkit_health_node1.prom", [
        Sample("slurmkit_health_status", "Nagios code of the last verdict", {"node": "node1"}, 0),
    ])
"""

from __future__ import annotations

import os

from slurmkit.chars import ASCII_LETTERS, DIGITS, only, replace_others
from slurmkit.core import trust
from slurmkit.core.files import write_bytes_atomic
from slurmkit.values import Value, is_finite

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Dict, Iterable, List, Optional

# Prometheus' data model: metric names [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*
_NAME_FIRST = frozenset(ASCII_LETTERS + "_:")
_NAME_CHARS = frozenset(ASCII_LETTERS + DIGITS + "_:")
_LABEL_FIRST = frozenset(ASCII_LETTERS + "_")
_LABEL_CHARS = frozenset(ASCII_LETTERS + DIGITS + "_")


class Sample(Value):
    name: str
    doc: str
    labels: Dict[str, str]
    value: float

    def __init__(
        self, name: str, doc: str, labels: Optional[Dict[str, str]] = None, value: float = 0.0
    ) -> None:
        self.name = name
        self.doc = doc
        self.labels = {} if labels is None else labels
        self.value = value


def file_name(prefix: str, *parts: str) -> str:
    """``file_name("slurmkit_health", "prolog", "node1")`` -> ``slurmkit_health_prolog_node1.prom``,
    with anything unsafe in a file name replaced."""
    return "_".join([prefix, *(replace_others(p) for p in parts if p)]) + ".prom"


def _escape_help(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_value(value: float) -> str:
    """A sample value as the format spells it: ``+Inf``, ``-Inf``, ``NaN``, else Python's repr."""
    v = float(value)
    if v != v:
        return "NaN"
    if not is_finite(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def render(samples: Iterable[Sample]) -> str:
    """The exposition text of ``samples`` as gauges, one family per name in first-seen order.

    Samples with the same name must carry the same label names (Prometheus rule); a bad
    metric or label name, or a mismatch, raises ``ValueError``."""
    families: Dict[str, List[Sample]] = {}
    label_sets: Dict[str, List[str]] = {}
    for s in samples:
        if not only(s.name, _NAME_CHARS, _NAME_FIRST):
            raise ValueError(f"invalid metric name {s.name!r}")
        keys = sorted(s.labels)
        for key in keys:
            if not only(key, _LABEL_CHARS, _LABEL_FIRST) or key.startswith("__"):
                raise ValueError(f"metric {s.name}: invalid label name {key!r}")
        if s.name in label_sets and label_sets[s.name] != keys:
            raise ValueError(f"metric {s.name}: label names {keys} differ from {label_sets[s.name]}")
        label_sets[s.name] = keys
        families.setdefault(s.name, []).append(s)
    lines: List[str] = []
    for name, items in families.items():
        lines.append(f"# HELP {name} {_escape_help(items[0].doc)}")
        lines.append(f"# TYPE {name} gauge")
        for s in items:
            labels = ",".join(f'{k}="{_escape_label(s.labels[k])}"' for k in label_sets[name])
            lines.append(
                f"{name}{{{labels}}} {format_value(s.value)}" if labels else f"{name} {format_value(s.value)}"
            )
    return "\n".join(lines) + "\n" if lines else ""


def write_textfile(path: str, samples: Iterable[Sample], *, mode: Optional[int] = 0o644) -> str:
    """Write ``samples`` as gauges to ``path`` atomically; return the path.

    The text is rendered (and checked) before anything touches the disk. The temporary
    file is created with ``O_EXCL`` beside ``path`` and does not end in ``.prom``, so the
    collector never reads it half-written and nobody can plant it in advance. A directory
    that fails the trust rule raises :class:`~slurmkit.core.trust.UntrustedFile` and nothing
    is written."""
    text = render(samples)
    directory = os.path.dirname(os.path.abspath(path))
    why = trust.writable_dir(directory)
    if why:
        raise trust.UntrustedFile(directory, why)
    write_bytes_atomic(path, text.encode("utf-8"), mode=mode)
    return path
