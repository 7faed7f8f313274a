"""JSON text on the hooks' path, through the C encoder and scanner that :mod:`json` itself uses
(CPython's ``_json``), without importing :mod:`json`.

Why: ``import json`` compiles regular expressions at import (``json.decoder``, ``json.scanner``,
``json.encoder``) and so imports :mod:`re`, with the ``enum``, ``functools`` and
``collections`` that ``re`` pulls in: a measurable part of a job start
(docs/benchmarks.md, "Prolog fast path"), where a hook reads and writes only a few small
documents (the Xid cursor, the verdict record). The functions here build the same C objects
``json.dumps`` and ``json.loads`` build and give the same text and values. Anything unusual
goes to :mod:`json` itself: a malformed document (so the error is ``json``'s own
``JSONDecodeError``, with its message), options these do not take, and an interpreter whose
``_json`` is missing or has another interface. ``tests/core/test_jsontext.py`` checks that both
agree on generated documents.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Callable, Optional, Tuple

try:
    import _json
except ImportError:  # another Python implementation: json does it all
    _json = None

#: json's own whitespace between tokens
_WHITESPACE = " \t\n\r"
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _ScanOptions:
    """What ``_json.make_scanner`` reads off a ``json.JSONDecoder()`` with its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__
    memo: dict = {}


_scan: Optional[Callable[[str, int], Tuple[Any, int]]] = None
if _json is not None:
    try:
        _scan = _json.make_scanner(_ScanOptions())
    except Exception:  # another interface: json does it
        _scan = None


def _not_serializable(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def loads(document: Any) -> Any:
    """``json.loads(document)`` for a ``str``, or ``bytes`` in UTF-8 (others go to json)."""
    text = document
    if isinstance(document, (bytes, bytearray)):
        try:
            text = document.decode("utf-8")
        except UnicodeDecodeError:
            text = None  # json's own encoding detection and error
    if _scan is not None and isinstance(text, str) and not text.startswith("\ufeff"):
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            value, end = _scan(text, start)
        except (StopIteration, ValueError):
            # malformed: json raises its error below; or bytes json reads in another encoding
            # (UTF-16 or UTF-32 without a byte order mark is valid UTF-8, read wrong)
            pass
        else:
            if not text[end:].strip(_WHITESPACE):
                return value
    import json  # the rare path: a malformed document, a byte order mark, or no _json

    return json.loads(document)


def dumps(
    value: Any,
    *,
    sort_keys: bool = False,
    default: Optional[Callable[[Any], Any]] = None,
    allow_nan: bool = True,
    separators: Tuple[str, str] = (", ", ": "),
) -> str:
    """``json.dumps(value, sort_keys=..., default=..., allow_nan=..., separators=...)`` with
    json's other defaults (ASCII only, circular references refused)."""
    if _json is not None:
        try:
            encode = _json.make_encoder(
                {},  # markers: a circular reference raises ValueError, as json's check_circular
                default or _not_serializable,
                _json.encode_basestring_ascii,
                None,  # indent
                separators[1],
                separators[0],
                sort_keys,
                False,  # skipkeys
                allow_nan,
            )
        except TypeError:  # another interface: json does it
            encode = None
        if encode is not None:
            return "".join(encode(value, 0))
    import json

    return json.dumps(value, sort_keys=sort_keys, default=default, allow_nan=allow_nan, separators=separators)
