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
