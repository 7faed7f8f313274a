"""Character-set tests and replacements for names (node names, metric and label names, the
parts of a file name), written with ``str`` methods instead of regular expressions.

Why not :mod:`re`: these run on every job start, and ``re`` (with the ``enum``, ``functools``
and ``collections`` it imports) is a measurable part of the prolog's start-up
(docs/benchmarks.md, "Prolog fast path"). Each rule here is the full-string match of the
pattern its docstring gives (no ``$`` that also matches before a final newline).
"""

from __future__ import annotations

ASCII_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
DIGITS = "0123456789"
#: What a file-name part and a Slurm node name may hold: letters, digits, ``.``, ``_``, ``-``.
NAME_CHARS = frozenset(ASCII_LETTERS + DIGITS + "._-")


def only(text: str, allowed: frozenset, first: frozenset = frozenset(), longest: int = -1) -> bool:
    """Whether ``text`` is non-empty, every character is in ``allowed``, the first one (when
    ``first`` is given) in ``first``, and it is at most ``longest`` characters (when not -1)."""
    if not text or (longest >= 0 and len(text) > longest):
        return False
    if first and text[0] not in first:
        return False
    return allowed.issuperset(text)


def replace_others(text: str, allowed: frozenset = NAME_CHARS, replacement: str = "_") -> str:
    """``text`` with every character outside ``allowed`` replaced by ``replacement``
    (``re.sub("[^A-Za-z0-9._-]", "_", text)`` for the default set)."""
    if allowed.issuperset(text):
        return text
    return "".join(c if c in allowed else replacement for c in text)


def keep_only(text: str, allowed: frozenset) -> str:
    """``text`` without the characters outside ``allowed``."""
    if allowed.issuperset(text):
        return text
    return "".join(c for c in text if c in allowed)


#: Each character a terminal or a reader would not show as itself, and what stands for it:
#: C0 controls, DEL and C1 controls as ``\xNN``; the bidirectional embedding, override and
#: isolate marks (which reorder what a reader sees, "Trojan Source", CVE-2021-42574) as ``\uNNNN``.
_SHOWN = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_SHOWN.update({c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))})


def shown(text: str) -> str:
    """``text`` with each control character written as its escape (``\\x1b`` for ESC, ``\\x0a``
    for a newline), so that what users wrote stays data on a terminal and one line stays one."""
    return text.translate(_SHOWN)
