"""Pure parsers for Slurm's text formats. No process is spawned here.

Covered formats:

* hostlists: ``node[1-3,7]``, ``gpu-a[01-03]-b[1-2]``, ``n1,n[4-5] n9`` (Slurm's rules);
* TRES strings: ``billing=1,cpu=1,gres/gpu:h100=2,gres/gpu=2,mem=1000M,node=1``;
* ``--parsable2`` rows, where a free-text field (job name, comment) may itself
  contain ``|``: the extra separators are folded back into that field;
* time limits in the forms sbatch accepts (``minutes``, ``D-HH``, ``0:90:00``,
  ``UNLIMITED`` ...).
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple


class ParseError(ValueError):
    """A Slurm string could not be parsed; the message quotes it."""


# --------------------------------------------------------------------------- hostlists
#
# Slurm's rules (src/common/hostlist.h and hostlist.c, SchedMD/slurm): hostnames and bracketed
# lists are separated by ',' or whitespace; "[lo-hi]" keeps the width of ``lo`` (a leading zero
# means a fixed number of digits: "linux[0000-1023]"); a range of more than MAX_RANGE (64 * 1024)
# hosts is an error ("Too many hosts in range"); order and duplicates are kept.

#: Slurm's limit on one range (hostlist.c MAX_RANGE): "anything larger will be assumed to be an error".
MAX_RANGE = 64 * 1024
#: slurmkit's own guard on a whole expression (several brackets multiply): no cluster is bigger,
#: and it keeps a hostile string from expanding for minutes.
MAX_HOSTS = 16 * MAX_RANGE
#: strtoul's range, with room to spare: a longer number is an error, not a silent wrap.
_MAX_DIGITS = 18

# Patterns are compiled on first use (``re`` caches them), not at import: the prolog imports
# this module and uses at most one of them.
_RANGE_RE = r"^(\d{1,%d})(?:-(\d{1,%d}))?$" % (_MAX_DIGITS, _MAX_DIGITS)
_SEPARATORS = frozenset(", \t\n\r\v\f")


def _split_top_level(text: str) -> List[str]:
    """Split on ',' and whitespace outside brackets (Slurm's separators)."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ParseError(f"unbalanced ']' in hostlist {text!r}")
        if ch in _SEPARATORS and depth == 0:
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
        m = re.match(_RANGE_RE, item.strip())
        if not m:
            raise ParseError(f"bad range {item!r} in hostlist {whole!r}")
        lo_s, hi_s = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise ParseError(f"descending range {item!r} in hostlist {whole!r}")
        if hi - lo + 1 > MAX_RANGE:
            raise ParseError(
                f"range {item!r} in hostlist {whole!r} has {hi - lo + 1} hosts; "
                f"Slurm allows at most {MAX_RANGE} in one range"
            )
        width = len(lo_s)  # Slurm: the width of lo; "9-10" -> 9, 10 and "08-10" -> 08, 09, 10
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
        if len(out) > MAX_HOSTS:
            raise ParseError(f"hostlist {whole!r} names more than {MAX_HOSTS} hosts")
    return out


_BRACKET_RE = r"\[([^\[\]]*)\]"


def _expand_one(pattern: str, whole: str, budget: int) -> List[str]:
    m = re.search(_BRACKET_RE, pattern)
    if not m:
        return [pattern]
    head, tail = pattern[: m.start()], pattern[m.end() :]
    if "[" not in tail and "]" not in tail and "[" not in head:  # one bracket: no recursion
        results = [head + value + tail for value in _expand_ranges(m.group(1), whole)]
        if len(results) > budget:
            raise ParseError(f"hostlist {whole!r} names more than {MAX_HOSTS} hosts")
        return results
    results: List[str] = []
    for value in _expand_ranges(m.group(1), whole):
        results.extend(_expand_one(head + value + tail, whole, budget - len(results)))
        if len(results) > budget:
            raise ParseError(f"hostlist {whole!r} names more than {MAX_HOSTS} hosts")
    return results


def expand_hostlist(hostlist: str) -> List[str]:
    """Expand a Slurm hostlist expression into node names, in order (duplicates kept).

    >>> expand_hostlist("node[1-3,7]")
    ['node1', 'node2', 'node3', 'node7']
    >>> expand_hostlist("gpu[01-02]-ib[1-2] login")
    ['gpu01-ib1', 'gpu01-ib2', 'gpu02-ib1', 'gpu02-ib2', 'login']

    Raises :class:`ParseError` for unbalanced brackets, a bad or descending range, a range
    of more than :data:`MAX_RANGE` hosts (Slurm's limit) or more than :data:`MAX_HOSTS` in all.
    """
    hostlist = hostlist.strip()
    if not hostlist or hostlist in ("(null)", "None"):
        return []
    names: List[str] = []
    for part in _split_top_level(hostlist):
        if not part:
            continue
        names.extend(_expand_one(part, hostlist, MAX_HOSTS - len(names)))
    return names


_TRAILING_NUM = r"^(.*?)(\d{1,%d})$" % _MAX_DIGITS


def _ranges(nums: List[int], width: int) -> str:
    out, start, prev = [], nums[0], nums[0]
    for n in nums[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        a, b = str(start).zfill(width), str(prev).zfill(width)
        out.append(a if start == prev else f"{a}-{b}")
        if n is not None:
            start = prev = n
    return ",".join(out)


def compress_hostlist(names: Iterable[str]) -> str:
    """Inverse of :func:`expand_hostlist` for names ending in a number: the shortest bracketed
    form Slurm expands back to the same names.

    Prefixes keep their order of first appearance; within a prefix numbers are sorted and
    de-duplicated. Zero padding follows Slurm (a range keeps the width of its low end): a
    zero-padded number (``08``) needs its exact width, an unpadded one (``10``) fits any width
    up to its own length, so ``gpu08, gpu09, gpu10`` give ``gpu[08-10]``, ``gpu9, gpu10`` give
    ``gpu[9-10]`` and ``gpu009, gpu010`` give ``gpu[009-010]``.
    """
    # prefix -> [(number, digits, position)] in input order
    by_prefix: Dict[str, List[Tuple[int, str, int]]] = {}
    plain: List[str] = []
    for pos, name in enumerate(names):
        m = re.match(_TRAILING_NUM, name)
        if not m:
            plain.append(name)
            continue
        by_prefix.setdefault(m.group(1), []).append((int(m.group(2)), m.group(2), pos))
    parts = list(dict.fromkeys(plain))
    for prefix, entries in by_prefix.items():
        # width -> {number: first position}; width 0 is "no padding"
        classes: Dict[int, Dict[int, int]] = {}
        loose = []
        for n, digits, pos in entries:
            if len(digits) > 1 and digits.startswith("0"):
                classes.setdefault(len(digits), {}).setdefault(n, pos)
            else:
                loose.append((n, len(digits), pos))
        padded_widths = list(classes)
        for n, length, pos in loose:
            fits = [w for w in padded_widths if w <= length]
            # join the padded group it touches (n-1 or n+1 there), else the widest that fits
            touching = [w for w in fits if n - 1 in classes[w] or n + 1 in classes[w]]
            width = max(touching or fits) if fits else 0
            classes.setdefault(width, {}).setdefault(n, pos)
        for width, members in sorted(classes.items(), key=lambda kv: min(kv[1].values())):
            nums = sorted(members)
            if len(nums) == 1:
                parts.append(f"{prefix}{str(nums[0]).zfill(width)}")
            else:
                parts.append(f"{prefix}[{_ranges(nums, width)}]")
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


_MEM_UNITS = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024**3}


def parse_memory_mb(value: str) -> float:
    """``1000M`` → 1000.0, ``62.50G`` → 64000.0 (MiB); a bare number is MiB (sacct's TRES memory values)."""
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
            gtype = key[len("gres/gpu:") :]
            # gres/gpumem, gres/gpuutil (23.02+) are not GPU counts.
            typed[gtype] = _tres_count(value, key)
    if total is None:
        total = sum(typed.values())
    return total, typed


_GRES_GPU = r"(?:^|,)gpu(?::([A-Za-z0-9_.\-]+))?:(\d+)"


def gpus_from_gres(gres: str, untyped: str = "") -> Dict[str, int]:
    """``{type: count}`` from a node's Gres (sinfo ``%G``, ``scontrol show node``).

    ``gpu:h100:8(S:0-1)`` gives ``{"h100": 8}``; ``gpu:8`` gives ``{untyped: 8}``;
    ``gpu:h100:4,gpu:a100:4`` both; other gres (``shard:4``) and ``(null)`` nothing.
    Types keep their order of appearance.
    """
    out: Dict[str, int] = {}
    for m in re.finditer(_GRES_GPU, gres or ""):
        t = m.group(1) or untyped
        out[t] = out.get(t, 0) + int(m.group(2))
    return out


# --------------------------------------------------------------------------- parsable2

#: slurmkit's own sacct calls use the unit separator as delimiter (``--delimiter``): a user
#: cannot type it into a job name, so a ``|`` in a name never shifts the fields.
SACCT_DELIMITER = "\x1f"


def split_parsable2(line: str, nfields: int, free_field: Optional[int] = None, sep: str = "|") -> List[str]:
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
    merged = sep.join(parts[idx : idx + extra + 1])
    return parts[:idx] + [merged] + parts[idx + extra + 1 :]


def parse_parsable2(
    text: str, fields: Sequence[str], free_field: Optional[str] = None, header: bool = False, sep: str = "|"
) -> List[Dict[str, str]]:
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

_UNLIMITED = {"unlimited", "infinite", "-1"}
#: Slurm's time_str2secs grammar (src/common/parse_time.c): "days-[hours[:minutes[:seconds]]]",
#: else "hours:minutes:seconds" or "minutes[:seconds]"; every field present, any size.
_DAYS_RE = r"(\d{1,10})-(?:(\d{1,10})(?::(\d{1,10})(?::(\d{1,10}))?)?)?"
_CLOCK_RE = r"(\d{1,10})(?::(\d{1,10})(?::(\d{1,10}))?)?"
#: Slurm keeps the limit in an int of seconds; beyond that its parser wraps around.
_MAX_SECONDS = 2**31 - 1


def parse_time_limit(text: str) -> Optional[int]:
    """Minutes from a time limit in any form ``sbatch --time`` accepts (Slurm's ``time_str2mins``).

    Accepted: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S`` and ``D-``; a field may
    exceed its clock range (``0:90:00`` is 90 minutes, ``1-24`` two days) as Slurm's own unit
    tests require (testsuite/slurm_unit/common/parse_time-test.c). Seconds round up to the next
    minute as Slurm does. ``UNLIMITED``/``INFINITE``/``-1`` and a total of zero (sbatch: "a time
    limit of zero requests that no time limit be imposed") give ``None``. Surrounding blanks,
    signs and empty fields are refused, as by Slurm. Anything else raises :class:`ParseError`
    with the accepted forms. :func:`format_minutes` gives the normalised form.
    """
    t = str(text)
    if t.lower() in _UNLIMITED:
        return None
    forms = "M, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED"
    m = re.fullmatch(_DAYS_RE, t)
    if m:
        d, h, mi, sec = (int(x or 0) for x in m.groups())
    else:
        m = re.fullmatch(_CLOCK_RE, t)
        if not m:
            raise ParseError(f"bad time limit {text!r}: use {forms}")
        a, b, c = m.groups()
        if c is not None:
            d, h, mi, sec = 0, int(a), int(b), int(c)
        else:  # minutes[:seconds]
            d, h, mi, sec = 0, 0, int(a), int(b or 0)
    seconds = d * 86400 + h * 3600 + mi * 60 + sec
    if seconds > _MAX_SECONDS:
        raise ParseError(f"bad time limit {text!r}: longer than Slurm can hold ({_MAX_SECONDS} s)")
    if seconds == 0:
        return None
    return -(-seconds // 60)


def format_minutes(minutes: Optional[int]) -> str:
    """Minutes as ``D-HH:MM:SS`` (or ``HH:MM:SS``), the canonical sbatch form."""
    if minutes is None:
        return "UNLIMITED"
    d, rem = divmod(int(minutes), 1440)
    h, m = divmod(rem, 60)
    return f"{d}-{h:02d}:{m:02d}:00" if d else f"{h:02d}:{m:02d}:00"


# --------------------------------------------------------------------------- config files

_CONF_TOKEN = r"(\w+)=(\S+)"


def conf_records(text: str) -> Iterator[Tuple[int, Dict[str, str]]]:
    """``(line number, {key: value})`` for each line of a Slurm config file that has any
    ``Key=Value`` token (gres.conf, topology.conf, slurm.conf's node lines).

    Keys are lower-cased (Slurm's keys are case-insensitive, slurm.conf(5)); a ``#`` starts a
    comment; a line without a ``Key=Value`` token but with text comes back with no keys,
    so that a caller can say which line it could not read."""
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if line:
            yield lineno, {k.lower(): v for k, v in re.findall(_CONF_TOKEN, line)}
