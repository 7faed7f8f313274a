"""Hyperparameter sweeps as one job array: the task table and each task's arguments.

A spec's ``sweep:`` section names parameter sets; ssubmit submits them as **one** job
array (``--array=0-N%max_parallel``), one array task per set. This module is the pure
part (no process, no Slurm): it expands the grid, checks it, and computes what one task
gets. The same functions run on both sides: at submit time for validation, ``--dry-run``
and the task table, and inside the job (``jobside sweep-task``) to turn the table the
script carries into the task's arguments and environment.

Task order (stable, documented in docs/ssubmit.md):

* the ``grid`` first, as :func:`itertools.product` over its axes **in the order written**,
  the last axis varying fastest (``{lr: [a, b], seed: [0, 1]}`` gives ``a0 a1 b0 b1``);
* then the ``list`` entries, in the order written.

A parameter set that appears twice (same names and values, in any order) is refused: a
repeat is what a ``seed`` axis is for.

Values reach the command as text: strings exactly as written, integers in decimal,
floats in Python's shortest round-trip form (``0.0003``), booleans ``true``/``false``.
They always travel as data (a JSON table the job-side Python reads by
``SLURM_ARRAY_TASK_ID``), never through the shell's parser, so a value with spaces,
quotes, ``$`` or newlines reaches the command as one argument.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

#: how parameters reach the command
PASS_AS = ("args", "env", "template")
#: a sweep never has more tasks than this, whatever the cluster's MaxArraySize: the table
#: travels inside the batch script, and no one runs more training runs from one spec
MAX_TASKS = 100_000
#: parameter names: identifiers (they become ``--name``, a variable name or a placeholder)
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: variables the job's own machinery sets: an env-mode parameter may not take them over
RESERVED_ENV_PREFIXES = ("SLURM_", "SLURMKIT_", "SK_")
#: ``{name}`` placeholders in template mode; ``{{`` and ``}}`` are literal braces
_PLACEHOLDER_RE = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: the version of the table the script carries (jobside refuses one it does not know)
TABLE_VERSION = 1


class SweepError(ValueError):
    """A sweep the spec cannot have; ``keys`` is the key path under ``sweep`` (for the line)."""

    def __init__(self, message: str, *keys: str):
        super().__init__(message)
        self.keys = keys


@dataclass(frozen=True)
class SweepTask:
    """One array task: its index, parameters (as text), run name, arguments and variables."""

    index: int
    params: Dict[str, str]
    run_name: str
    args: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)


def format_value(value: Any) -> str:
    """A parameter value as the text the command receives (see the module docstring)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("contains a NUL byte, which no argument or variable can hold")
        return value
    kind = "null" if value is None else type(value).__name__
    raise ValueError(f"values must be strings, numbers or booleans, got {kind}")


def _check_name(name: Any, pass_as: str, *keys: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise SweepError(
            f"parameter name {name!r} is not an identifier (letters, digits and _, not starting with a digit)",
            *keys,
        )
    if pass_as == "env" and name.upper().startswith(RESERVED_ENV_PREFIXES):
        raise SweepError(
            f"parameter {name!r}: names starting with {', '.join(RESERVED_ENV_PREFIXES)} are the job's own "
            "variables; pick another name",
            *keys,
        )
    return name


def _values(name: str, values: Any, *keys: str) -> List[str]:
    if not isinstance(values, list):
        raise SweepError(f"axis {name!r} must be a list of values, got {type(values).__name__}", *keys)
    if not values:
        raise SweepError(f"axis {name!r} is empty: a grid with an empty axis has no tasks", *keys)
    out = []
    for i, v in enumerate(values):
        try:
            out.append(format_value(v))
        except ValueError as exc:
            raise SweepError(f"axis {name!r} value {i}: {exc}", *keys) from None
    return out


def parameter_sets(sweep: Mapping[str, Any]) -> List[Dict[str, str]]:
    """Every task's parameters, in task order (grid first, then the list); checked.

    Raises :class:`SweepError` for an empty axis or sweep, a bad name or value, a repeated
    set, or more than :data:`MAX_TASKS` tasks (before expanding anything).
    """
    pass_as = sweep.get("pass_as") or "args"
    grid = sweep.get("grid") or {}
    listed = sweep.get("list") or []
    axes: List[Tuple[str, List[str]]] = []
    for name, values in grid.items():
        _check_name(name, pass_as, "grid", str(name))
        axes.append((name, _values(name, values, "grid", name)))
    size = math.prod(len(v) for _, v in axes) if axes else 0
    if size + len(listed) > MAX_TASKS:
        raise SweepError(f"{size + len(listed)} tasks is more than a sweep may have ({MAX_TASKS})")
    sets: List[Dict[str, str]] = []
    if axes:
        names = [n for n, _ in axes]
        sets.extend(dict(zip(names, combo)) for combo in itertools.product(*(v for _, v in axes)))
    for i, entry in enumerate(listed):
        if not isinstance(entry, dict) or not entry:
            raise SweepError("each entry must be a non-empty mapping of parameter: value", "list", str(i))
        one: Dict[str, str] = {}
        for name, value in entry.items():
            _check_name(name, pass_as, "list", str(i))
            try:
                one[name] = format_value(value)
            except ValueError as exc:
                raise SweepError(f"parameter {name!r}: {exc}", "list", str(i)) from None
        sets.append(one)
    if not sets:
        raise SweepError("a sweep needs a non-empty grid or list")
    seen: Dict[Tuple[Tuple[str, str], ...], int] = {}
    for index, params in enumerate(sets):
        key = tuple(sorted(params.items()))
        if key in seen:
            where = ("list", str(index - size)) if index >= size else ("grid",)
            raise SweepError(f"task {index} repeats task {seen[key]} ({describe(params)})", *where)
        seen[key] = index
    return sets


def quoted(value: str) -> str:
    """``value`` as a table shows it: plain when it is a plain token, else in JSON quotes
    (escaped newlines and control characters: one value stays on one line)."""
    return value if re.fullmatch(r"[A-Za-z0-9_.+:/@%-]+", value) else json.dumps(value)


def describe(params: Mapping[str, str]) -> str:
    """``lr=0.0001 seed=0`` (values that need it in JSON quotes, so the line stays one line)."""
    return " ".join(f"{k}={quoted(v)}" for k, v in params.items())


def substitute(template: str, params: Mapping[str, str]) -> str:
    """``--lr={lr}`` with ``params`` -> ``--lr=0.0001``; ``{{``/``}}`` are literal braces.

    A placeholder naming no parameter raises :class:`KeyError` with that name."""

    def one(m: "re.Match[str]") -> str:
        token = m.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        return params[m.group(1)]

    return _PLACEHOLDER_RE.sub(one, template)


def placeholders(template: str) -> List[str]:
    return [m.group(1) for m in _PLACEHOLDER_RE.finditer(template) if m.group(1)]


def check_template(args: Sequence[str], sets: Sequence[Mapping[str, str]]) -> None:
    """Template mode: every placeholder names a parameter of every task, every parameter is used."""
    used = {name for a in args for name in placeholders(a)}
    for index, params in enumerate(sets):
        missing = sorted(used - set(params))
        if missing:
            raise SweepError(
                f"args use {{{missing[0]}}} but task {index} ({describe(params)}) has no {missing[0]!r}"
            )
        unused = [n for n in params if n not in used]
        if unused:
            raise SweepError(
                f"pass_as: template but parameter {unused[0]!r} appears in no args item (write {{{unused[0]}}})",
                "pass_as",
            )


def task(
    index: int, params: Mapping[str, str], *, name: str, pass_as: str, base_args: Sequence[str]
) -> SweepTask:
    """What array task ``index`` runs with: arguments, variables and run name."""
    params = dict(params)
    run_name = f"{name}-{index}"
    env = {
        "SLURMKIT_RUN_NAME": run_name,
        "SLURMKIT_SWEEP_INDEX": str(index),
        "SLURMKIT_SWEEP_PARAMS": json.dumps(params, ensure_ascii=False),
    }
    if pass_as == "args":
        args = [*base_args, *itertools.chain.from_iterable((f"--{k}", v) for k, v in params.items())]
    elif pass_as == "env":
        args = list(base_args)
        env.update(params)
    elif pass_as == "template":
        args = [substitute(a, params) for a in base_args]
    else:
        raise SweepError(f"pass_as must be one of {', '.join(PASS_AS)}; got {pass_as!r}", "pass_as")
    return SweepTask(index=index, params=params, run_name=run_name, args=args, env=env)


def tasks(sweep: Mapping[str, Any], *, name: str, base_args: Sequence[str]) -> List[SweepTask]:
    """The whole task table for a validated spec's ``sweep`` section."""
    sets = parameter_sets(sweep)
    pass_as = sweep.get("pass_as") or "args"
    if pass_as == "template":
        check_template(base_args, sets)
    return [task(i, p, name=name, pass_as=pass_as, base_args=base_args) for i, p in enumerate(sets)]


# --------------------------------------------------------------------------- the table the job reads


def table_json(sweep: Mapping[str, Any], *, name: str, base_args: Sequence[str]) -> str:
    """The table the batch script carries: one line of ASCII JSON (no line of it can end a
    quoted here-document), holding the parameter sets, the mode and the base arguments."""
    data = {
        "version": TABLE_VERSION,
        "name": name,
        "pass_as": sweep.get("pass_as") or "args",
        "args": list(base_args),
        "tasks": parameter_sets(sweep),
    }
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    assert "\n" not in text  # json.dumps escapes every control character
    return text


def task_from_table(text: str, index: Optional[str]) -> SweepTask:
    """Inside the job: array task ``index`` (``$SLURM_ARRAY_TASK_ID``) from the table text.

    Raises :class:`SweepError` for a missing or out-of-range index or a table this version
    cannot read."""
    if index is None or not re.fullmatch(r"\d{1,7}", index.strip()):
        raise SweepError(f"SLURM_ARRAY_TASK_ID is {index!r}: this sweep script must run as a job array task")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SweepError(f"unreadable sweep table: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != TABLE_VERSION:
        raise SweepError("sweep table of an unknown version: render the script with this slurmkit")
    sets = data["tasks"]
    i = int(index)
    if not 0 <= i < len(sets):
        raise SweepError(f"array task {i} is not in the sweep (tasks 0-{len(sets) - 1})")
    for name in sets[i]:
        _check_name(name, data["pass_as"])
    return task(i, sets[i], name=data["name"], pass_as=data["pass_as"], base_args=data["args"])
