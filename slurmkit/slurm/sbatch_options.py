"""sbatch's command-line options, parsed the way sbatch parses them.

sbatch reads its options with glibc ``getopt_long`` (Slurm's src/sbatch/opt.c with the
option table in src/common/slurm_opt.c), so one option has many spellings: ``-N2``,
``-N 2``, ``--nodes=2``, ``--nodes 2``, an unambiguous abbreviation such as ``--nod=2``,
and short options bundled behind one dash (``-HN2`` is ``--hold --nodes=2``). A check
that looks only for ``--nodes=`` misses all the others, so ``ssubmit``'s escape hatch
(``extra_sbatch``) is parsed here into ``(--long-name, value)`` pairs first, and the
checks look at those.

The tables follow ``man sbatch`` for Slurm 22.05. Where a long option is missing from
them, it is passed through, and its argument is assumed optional, so the next item is
still read as an option: a gap can refuse a valid spec, never let a forbidden option
through as another option's value.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

NO, REQUIRED, OPTIONAL = "no", "required", "optional"

#: short option -> (long name, argument)
SHORT: Dict[str, Tuple[str, str]] = {
    "A": ("account", REQUIRED),
    "a": ("array", REQUIRED),
    "B": ("extra-node-info", REQUIRED),
    "b": ("begin", REQUIRED),
    "C": ("constraint", REQUIRED),
    "c": ("cpus-per-task", REQUIRED),
    "D": ("chdir", REQUIRED),
    "d": ("dependency", REQUIRED),
    "e": ("error", REQUIRED),
    "F": ("nodefile", REQUIRED),
    "G": ("gpus", REQUIRED),
    "H": ("hold", NO),
    "h": ("help", NO),
    "i": ("input", REQUIRED),
    "J": ("job-name", REQUIRED),
    "k": ("no-kill", OPTIONAL),
    "L": ("licenses", REQUIRED),
    "M": ("clusters", REQUIRED),
    "m": ("distribution", REQUIRED),
    "N": ("nodes", REQUIRED),
    "n": ("ntasks", REQUIRED),
    "O": ("overcommit", NO),
    "o": ("output", REQUIRED),
    "p": ("partition", REQUIRED),
    "Q": ("quiet", NO),
    "q": ("qos", REQUIRED),
    "s": ("oversubscribe", NO),
    "S": ("core-spec", REQUIRED),
    "t": ("time", REQUIRED),
    "u": ("usage", NO),
    "V": ("version", NO),
    "v": ("verbose", NO),
    "W": ("wait", NO),
    "w": ("nodelist", REQUIRED),
    "x": ("exclude", REQUIRED),
}

#: long option -> argument (options with a short form are added from SHORT below)
LONG: Dict[str, str] = {
    "acctg-freq": REQUIRED,
    "batch": REQUIRED,
    "bb": REQUIRED,
    "bbf": REQUIRED,
    "cluster-constraint": REQUIRED,
    "comment": REQUIRED,
    "container": REQUIRED,
    "contiguous": NO,
    "cores-per-socket": REQUIRED,
    "cpu-freq": REQUIRED,
    "cpus-per-gpu": REQUIRED,
    "deadline": REQUIRED,
    "delay-boot": REQUIRED,
    "exclusive": OPTIONAL,
    "export": REQUIRED,
    "export-file": REQUIRED,
    "get-user-env": OPTIONAL,
    "gid": REQUIRED,
    "gpu-bind": REQUIRED,
    "gpu-freq": REQUIRED,
    "gpus-per-node": REQUIRED,
    "gpus-per-socket": REQUIRED,
    "gpus-per-task": REQUIRED,
    "gres": REQUIRED,
    "gres-flags": REQUIRED,
    "hint": REQUIRED,
    "ignore-pbs": NO,
    "kill-on-invalid-dep": REQUIRED,
    "mail-type": REQUIRED,
    "mail-user": REQUIRED,
    "mcs-label": REQUIRED,
    "mem": REQUIRED,
    "mem-bind": REQUIRED,
    "mem-per-cpu": REQUIRED,
    "mem-per-gpu": REQUIRED,
    "mincpus": REQUIRED,
    "network": REQUIRED,
    "nice": OPTIONAL,
    "no-requeue": NO,
    "ntasks-per-core": REQUIRED,
    "ntasks-per-gpu": REQUIRED,
    "ntasks-per-node": REQUIRED,
    "ntasks-per-socket": REQUIRED,
    "open-mode": REQUIRED,
    "parsable": NO,
    "power": REQUIRED,
    "priority": REQUIRED,
    "profile": REQUIRED,
    "propagate": OPTIONAL,
    "reboot": NO,
    "requeue": NO,
    "reservation": REQUIRED,
    "signal": REQUIRED,
    "sockets-per-node": REQUIRED,
    "spread-job": NO,
    "switches": REQUIRED,
    "test-only": NO,
    "thread-spec": REQUIRED,
    "threads-per-core": REQUIRED,
    "time-min": REQUIRED,
    "tmp": REQUIRED,
    "tres-per-task": REQUIRED,  # newer releases (not in 22.05's man page): allocates GRES too
    "uid": REQUIRED,
    "use-min-nodes": NO,
    "wait-all-nodes": REQUIRED,
    "wckey": REQUIRED,
    "wrap": REQUIRED,
}
LONG.update({name: arg for name, arg in SHORT.values()})

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: what a long option's name looks like; anything else (a blank, a quote) would be split or
#: re-read differently once written into an ``#SBATCH`` line
_LONG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


class SbatchOptionError(ValueError):
    """An item sbatch would not read as an option (or would read as something else)."""


def _resolve_long(name: str) -> Tuple[str, Optional[str]]:
    """getopt_long's lookup: an exact name, else the one option ``name`` abbreviates.
    Returns ``(long name, argument kind or None when unknown)``."""
    if name in LONG:
        return name, LONG[name]
    matches = sorted(o for o in LONG if o.startswith(name))
    if len(matches) == 1:
        return matches[0], LONG[matches[0]]
    if matches:
        raise SbatchOptionError(
            f"--{name} is ambiguous (sbatch would read it as one of "
            f"--{', --'.join(matches[:6])}{', ...' if len(matches) > 6 else ''})"
        )
    return name, None


def parse(items: List[str]) -> List[Tuple[str, Optional[str]]]:
    """Parse sbatch argv items into ``("--long-name", value or None)`` pairs, in order.

    Raises :class:`SbatchOptionError` for what sbatch would not take as an option here:
    newlines and control characters (an ``#SBATCH`` line ends at a newline), a bare
    ``-`` or ``--``, anything not starting with ``-`` (sbatch would take it as the
    batch script), an unknown short option, or a missing argument.
    """
    out: List[Tuple[str, Optional[str]]] = []
    i = 0
    while i < len(items):
        item = items[i]
        i += 1
        if not isinstance(item, str):
            raise SbatchOptionError(f"{item!r} is not a string")
        if _CONTROL.search(item):
            raise SbatchOptionError(f"{item!r} contains a newline or control character")
        if item in ("-", "--") or not item.startswith("-"):
            raise SbatchOptionError(
                f"{item!r} is not an sbatch option (sbatch would take it as the "
                "batch script or its arguments)"
            )
        if item.startswith("--"):
            name, sep, value = item[2:].partition("=")
            if not _LONG_NAME.fullmatch(name):
                raise SbatchOptionError(f"{item!r} is not an sbatch option name")
            long, kind = _resolve_long(name)
            if sep:
                if kind == NO:
                    raise SbatchOptionError(f"--{long} takes no value (given {item!r})")
                out.append((f"--{long}", value))
            elif kind == REQUIRED:
                if i >= len(items):
                    raise SbatchOptionError(f"--{long} needs a value")
                value = items[i]
                i += 1
                if not isinstance(value, str) or _CONTROL.search(value):
                    raise SbatchOptionError(
                        f"value {value!r} of --{long} contains a newline or control character"
                    )
                out.append((f"--{long}", value))
            else:
                out.append((f"--{long}", None))
            continue
        # one dash: a bundle of short options; one taking an argument ends the bundle
        j = 1
        while j < len(item):
            letter = item[j]
            j += 1
            if letter not in SHORT:
                raise SbatchOptionError(f"-{letter} (in {item!r}) is not an sbatch option")
            long, kind = SHORT[letter]
            rest = item[j:]
            if kind == NO:
                out.append((f"--{long}", None))
                continue
            if rest:
                out.append((f"--{long}", rest))
            elif kind == REQUIRED:
                if i >= len(items):
                    raise SbatchOptionError(f"-{letter} (--{long}) needs a value")
                value = items[i]
                i += 1
                if not isinstance(value, str) or _CONTROL.search(value):
                    raise SbatchOptionError(
                        f"value {value!r} of -{letter} contains a newline or control character"
                    )
                out.append((f"--{long}", value))
            else:
                out.append((f"--{long}", None))
            break
    return out


def to_items(pairs: List[Tuple[str, Optional[str]]]) -> List[str]:
    """``[("--nodes", "2"), ("--hold", None)]`` -> ``["--nodes=2", "--hold"]``: one item per option."""
    return [flag if value is None else f"{flag}={value}" for flag, value in pairs]
