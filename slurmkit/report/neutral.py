"""Output that stays data: the one neutraliser of every report's text, CSV and Markdown.

Names, accounts, partitions and a SQL result's cells come from users. Written as they are,
a terminal runs their escape sequences, a spreadsheet runs a CSV cell starting with ``=``
as a formula, and Markdown (and the HTML it may hold) renders as markup. So:

* :func:`neutral_text` (every format): control characters (C0, DEL, C1) are shown as
  ``\\xNN``, and the bidirectional overrides (which reorder what a reader sees) as
  ``\\uNNNN``.
* :func:`csv_cell`: text starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
  return gets a leading ``'`` (OWASP, "CSV Injection",
  https://owasp.org/www-community/attacks/CSV_Injection); numbers stay numbers, so a plain
  negative number in a numeric column is written as it is.
* :func:`markdown_cell`: Markdown's inline specials are escaped with ``\\`` (``|`` too, so a
  cell cannot split a table row) and HTML's ``<``, ``>``, ``&`` become entities.
"""

from __future__ import annotations

import re
from typing import Any

from slurmkit.chars import shown

#: what a spreadsheet reads as the start of a formula
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
#: Markdown's inline specials (emphasis, code, links, images, strike-through, headings' #) and the
#: table's |; block starts (- + 1.) cannot occur inside a table cell. An ``_`` between two letters
#: or digits never emphasises (CommonMark's flanking rules), so ``gpu_hours`` stays as it is.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*\[\]#!|~]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def neutral_text(value: Any) -> str:
    """``value`` as text with no control character left: each is shown as ``\\xNN``."""
    return shown(value if isinstance(value, str) else str(value))


def csv_cell(value: Any) -> Any:
    """A CSV cell: numbers (not bool) as they are; text neutral, with ``'`` before a formula start."""
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    raw = value if isinstance(value, str) else str(value)
    text = neutral_text(raw)
    # (the test is on the raw text: a tab or CR at the start is shown as \x09 or \x0d, but the
    # cell is marked all the same)
    return "'" + text if raw.startswith(FORMULA_START) else text


def markdown_cell(value: Any) -> str:
    """A Markdown table cell: neutral text with Markdown's specials and HTML escaped."""
    text = neutral_text(value)
    text = "".join(_HTML.get(c, c) for c in text)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)
