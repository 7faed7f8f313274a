"""Pure parsers for Slurm's text formats. No process is spawned here.

Covered formats:

* hostlists: ``node[1-3,7]``, ``gpu-a[01-03]-b[1-2]``, ``n1,n[4-5]``;
* TRES strings: ``billing=1,cpu=1,gres/gpu:h100=2,gres/gpu=2,mem=1000M,node=1``;
* ``--parsable2`` rows, where a free-text field (job name, comment) may itself
  contain ``|``: the extra separators are folded back into that field;
* durations: ``[D-]HH:MM:SS`` (sacct ``Elapsed``), ``MM:SS.mmm`` and the time-limit
  forms sbatch accepts (``minutes``, ``D-HH``, ``UNLIMITED`` ...).
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Optional, Sequence, Tuple


class ParseError(ValueError):
    """A Slurm string could not be parsed; the message quotes it."""


# --------------------------------------------------------------------------- hostlists

_RANGE_RE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top_level(text: str, sep: str = ",") -> List[str]:
    """Split on ``sep`` outside brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ParseError(f"unbalanced ']' in hostlist {text!r}")
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise ParseError(f"unbalanced '[' in hostlist {text!r}")
    parts.append("".join(cur))
    return parts


def _expand_ranges(body: str, whole: str) -> List[str]:
    out: List[str] = []
    for item in body.split(","):
        m = _RANGE_RE.match(item.strip())
        if not m:
            raise ParseError(f"bad range {item!r} in hostlist {whole!r}")
        lo_s, hi_s = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise ParseError(f"descending range {item!r} in hostlist {whole!r}")
        if hi - lo > 1_000_000:
            raise ParseError(f"range {item!r} too large in hostlist {whole!r}")
        width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


def _expand_one(pattern: str, whole: str) -> List[str]:
    m = re.search(r"\[([^\[\]]*)\]", pattern)
    if not m:
        return [pattern]
    head, tail = pattern[: m.start()], pattern[m.end():]
    results = []
    for value in _expand_ranges(m.group(1), whole):
        results.extend(_expand_one(head + value + tail, whole))
    return results


def expand_hostlist(hostlist: str) -> List[str]:
    """Expand a Slurm hostlist expression into node names, in order.

    >>> expand_hostlist("node[1-3,7]")
    ['node1', 'node2', 'node3', 'node7']
    >>> expand_hostlist("gpu[01-02]-ib[1-2]")
    ['gpu01-ib1', 'gpu01-ib2', 'gpu02-ib1', 'gpu02-ib2']
    """
    hostlist = hostlist.strip()
    if not hostlist or hostlist in ("(null)", "None"):
        return []
    names: List[str] = []
    for part in _split_top_level(hostlist):
        part = part.strip()
        if not part:
            continue
        names.extend(_expand_one(part, hostlist))
    return names


_TRAILING_NUM = re.compile(r"^(.*?)(\d+)$")


def compress_hostlist(names: Iterable[str]) -> str:
    """Inverse of :func:`expand_hostlist` for single numeric suffixes.

    Names keep their order of first appearance per prefix; zero padding is kept.
    ``["n1", "n2", "n3", "n7"]`` gives ``"n[1-3,7]"``.
    """
    groups: Dict[Tuple[str, int], List[int]] = {}
    order: List[Tuple[str, int]] = []
    plain: List[str] = []
    for name in names:
        m = _TRAILING_NUM.match(name)
        if not m:
            plain.append(name)
            continue
        prefix, digits = m.group(1), m.group(2)
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        key = (prefix, width)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(digits))
    parts = list(dict.fromkeys(plain))
    for prefix, width in order:
        nums = sorted(set(groups[(prefix, width)]))
        if len(nums) == 1:
            parts.append(f"{prefix}{str(nums[0]).zfill(width)}")
            continue
        ranges, start, prev = [], nums[0], nums[0]
        for n in nums[1:] + [None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            a, b = str(start).zfill(width), str(prev).zfill(width)
            ranges.append(a if start == prev else f"{a}-{b}")
            if n is not None:
                start = prev = n
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)


# --------------------------------------------------------------------------- TRES

def parse_tres(text: str) -> Dict[str, str]:
    """Parse a TRES string into ``{name: value}`` (values stay strings).

    Keys are split on the first ``=`` only and key order is ignored: sacct sorts them
    alphabetically, ``scontrol`` by TRES id. Empty input gives ``{}``.
    """
    out: Dict[str, str] = {}
    text = (text or "").strip()
    if not text:
        return out
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ParseError(f"bad TRES item {item!r} in {text!r}")
        out[key.strip()] = value.strip()
    return out


_MEM_UNITS = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024 ** 3}


def parse_memory_mb(value: str) -> float:
    """``1000M`` → 1000.0, ``62.50G`` → 64000.0 (MiB); a bare number is MiB."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGTP]?)B?\s*", value or "", re.IGNORECASE)
    if not m:
        raise ParseError(f"bad memory value {value!r}")
    return float(m.group(1)) * _MEM_UNITS[m.group(2).upper()]


def _tres_count(value: str, key: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise ParseError(f"bad count {value!r} for TRES {key!r}") from None
    if n < 0:
        raise ParseError(f"negative count {value!r} for TRES {key!r}")
    return n


def gpus_from_tres(tres: Dict[str, str]) -> Tuple[int, Dict[str, int]]:
    """Return ``(total_gpus, {type: count})`` from a parsed TRES dict.

    ``gres/gpu`` is already the job total (across nodes, and across types), so it
    wins; the typed keys ``gres/gpu:<type>`` only tell the split. Adding both would
    count typed GPUs twice. When only typed keys exist (older Slurm, or a site that
    tracks only typed TRES) their sum is the total. No GPU key means 0.
    """
    typed: Dict[str, int] = {}
    total: Optional[int] = None
    for key, value in tres.items():
        if key == "gres/gpu":
            total = _tres_count(value, key)
        elif key.startswith("gres/gpu:"):
            gtype = key[len("gres/gpu:"):]
            # gres/gpumem, gres/gpuutil (23.02+) are not GPU counts.
            typed[gtype] = _tres_count(value, key)
    if total is None:
        total = sum(typed.values())
    return total, typed


_GRES_GPU = re.compile(r"(?:^|,)gpu(?::([A-Za-z0-9_.\-]+))?:(\d+)")


def gpus_from_gres(gres: str, untyped: str = "") -> Dict[str, int]:
    """``{type: count}`` from a node's Gres (sinfo ``%G``, ``scontrol show node``).

    ``gpu:h100:8(S:0-1)`` gives ``{"h100": 8}``; ``gpu:8`` gives ``{untyped: 8}``;
    ``gpu:h100:4,gpu:a100:4`` both; other gres (``shard:4``) and ``(null)`` nothing.
    Types keep their order of appearance.
    """
    out: Dict[str, int] = {}
    for m in _GRES_GPU.finditer(gres or ""):
        t = m.group(1) or untyped
        out[t] = out.get(t, 0) + int(m.group(2))
    return out


# --------------------------------------------------------------------------- parsable2

#: slurmkit's own sacct calls use the unit separator as delimiter (``--delimiter``): a user
#: cannot type it into a job name, so a ``|`` in a name never shifts the fields.
SACCT_DELIMITER = "\x1f"

def split_parsable2(line: str, nfields: int, free_field: Optional[int] = None,
                    sep: str = "|") -> List[str]:
    """Split one ``--parsable2`` row into exactly ``nfields`` fields.

    sacct does not escape ``|`` inside values, so a job named ``a|b`` yields one
    separator too many. When the row has more separators than fields, the surplus
    is folded back into ``free_field`` (default: the last field), which must be the
    only field that can hold free text. Fewer fields than expected is an error.
    """
    parts = line.rstrip("\r\n").split(sep)
    if len(parts) == nfields:
        return parts
    if len(parts) < nfields:
        raise ParseError(f"expected {nfields} fields, got {len(parts)}")
    idx = nfields - 1 if free_field is None else free_field
    if idx < 0:
        idx += nfields
    extra = len(parts) - nfields
    merged = sep.join(parts[idx: idx + extra + 1])
    return parts[:idx] + [merged] + parts[idx + extra + 1:]


def parse_parsable2(text: str, fields: Sequence[str], free_field: Optional[str] = None,
                    header: bool = False, sep: str = "|") -> List[Dict[str, str]]:
    """Parse ``--parsable2 --noheader`` output into dicts keyed by ``fields``.

    With ``header=True`` the first line is checked against ``fields`` and skipped.
    """
    idx = list(fields).index(free_field) if free_field else None
    rows = []
    lines = text.splitlines()
    if header and lines:
        lines = lines[1:]
    for line in lines:
        if not line.strip():
            continue
        rows.append(dict(zip(fields, split_parsable2(line, len(fields), idx, sep))))
    return rows


# --------------------------------------------------------------------------- durations

_ELAPSED_RE = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")


def parse_elapsed(text: str) -> float:
    """Seconds from sacct's ``[D-][HH:]MM:SS[.mmm]``.

    ``1-02:03:04`` → 93784, ``00:00:04`` → 4, ``05:30.250`` → 330.25.
    """
    t = (text or "").strip()
    m = _ELAPSED_RE.match(t)
    if not m:
        raise ParseError(f"bad elapsed time {text!r}")
    days, hours, minutes, seconds = m.groups()
    out_of_range = (float(seconds) >= 60
                    or (hours is not None and int(minutes) >= 60)
                    or (days is not None and hours is not None and int(hours) >= 24))
    if out_of_range:
        raise ParseError(f"bad elapsed time {text!r}")
    total = int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)
    return total


_UNLIMITED = {"unlimited", "infinite", "-1"}


def parse_time_limit(text: str) -> Optional[int]:
    """Minutes from a time limit in any form ``sbatch --time`` accepts.

    Accepted: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``;
    ``UNLIMITED``/``INFINITE`` give ``None``. Seconds round up to the next minute as
    Slurm does. Anything else raises :class:`ParseError` with the accepted forms.
    """
    t = str(text).strip()
    if t.lower() in _UNLIMITED:
        return None
    forms = "M, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED"
    m = re.fullmatch(r"(?:(\d+)-)?(\d+(?::\d+){0,2})", t)
    if not m:
        raise ParseError(f"bad time limit {text!r}: use {forms}")
    days = m.group(1)
    nums = [int(x) for x in m.group(2).split(":")]
    if days is not None:
        d = int(days)
        h, mi, s = (nums + [0, 0, 0])[:3]
        if h >= 24 or mi >= 60 or s >= 60:
            raise ParseError(f"bad time limit {text!r}: use {forms}")
        seconds = d * 86400 + h * 3600 + mi * 60 + s
    elif len(nums) == 1:
        seconds = nums[0] * 60
    elif len(nums) == 2:
        if nums[1] >= 60:
            raise ParseError(f"bad time limit {text!r}: use {forms}")
        seconds = nums[0] * 60 + nums[1]
    else:
        if nums[1] >= 60 or nums[2] >= 60:
            raise ParseError(f"bad time limit {text!r}: use {forms}")
        seconds = nums[0] * 3600 + nums[1] * 60 + nums[2]
    return -(-seconds // 60)


def format_minutes(minutes: Optional[int]) -> str:
    """Minutes as ``D-HH:MM:SS`` (or ``HH:MM:SS``), the canonical sbatch form."""
    if minutes is None:
        return "UNLIMITED"
    d, rem = divmod(int(minutes), 1440)
    h, m = divmod(rem, 60)
    return f"{d}-{h:02d}:{m:02d}:00" if d else f"{h:02d}:{m:02d}:00"
