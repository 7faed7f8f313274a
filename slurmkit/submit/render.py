"""Render a validated job spec into an sbatch script (Jinja2, StrictUndefined).

Why the split between ``#SBATCH`` lines and sbatch arguments: sbatch reads its
``#SBATCH`` lines itself (not through a shell) and has no escape for quotes or
newlines, so a free-text value such as a job name with a newline cannot be written
there safely. Values made only of characters that need no quoting go into
``#SBATCH`` lines (sorted by option name, so output is deterministic); anything else
is passed as one argv item on the sbatch command line, where no shell or parser can
split it. The script notes which options were passed that way.

Everything that reaches bash goes through the ``shquote`` filter (``shlex.quote``);
the only strings built in Python are joins of already-quoted parts (the checkpoint
directory with ``$SLURM_JOB_ID`` substituted), marked as such where built.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import jinja2

from slurmkit import __version__
from slurmkit.slurm.parse import format_minutes, parse_time_limit
from slurmkit.submit import hparams
from slurmkit.submit import nccl as nccl_mod

TEMPLATE_NAME = "ssubmit.sbatch.j2"

#: characters an #SBATCH value may contain without quoting (sbatch splits on blanks,
#: treats quotes specially and stops at '#').
_SBATCH_SAFE = re.compile(r"[A-Za-z0-9_@%:.,/+=\-\[\]*&|()!~^]+")


def default_template_dir() -> str:
    from slurmkit.resources import data_path

    return str(data_path("job_templates"))


def shquote(value: Any) -> str:
    """Quote one value for bash (``shlex.quote``); non-strings are stringified first."""
    return shlex.quote(str(value))


def oneline(value: Any) -> str:
    """A value made safe for a ``#`` comment line: escapes newlines and controls."""
    text = str(value)
    return text.encode("unicode_escape").decode("ascii")


def _env_name(value: Any) -> str:
    name = str(value)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):  # validated at load; belt and braces
        raise ValueError(f"not an identifier: {name!r}")
    return name


@dataclass
class Rendered:
    """The outcome of rendering: the script, the extra sbatch argv and a summary."""

    script: str
    sbatch_args: List[str]
    settings: Dict[str, Any] = field(default_factory=dict)


def _gres(spec: Dict[str, Any]) -> Optional[Tuple[str, str]]:
    n = spec["gpus_per_node"]
    if not n:
        return None
    typed = f"{spec['gpu_type']}:" if spec["gpu_type"] else ""
    if spec["gpu_flag"] == "gpus-per-node":
        return ("--gpus-per-node", f"{typed}{n}")
    return ("--gres", f"gpu:{typed}{n}")


def sbatch_options(spec: Dict[str, Any]) -> List[Tuple[str, Optional[str]]]:
    """(option, value) pairs for the job; ``None`` value = bare flag. Sorted by option."""
    opts: List[Tuple[str, Optional[str]]] = [
        ("--job-name", spec["name"]),
        ("--nodes", str(spec["nodes"])),
        ("--ntasks-per-node", "1"),
        ("--open-mode", "append"),
        ("--output", spec["output"]),
    ]
    cpus = spec["cpus_per_task"]
    if spec["cpus_per_gpu"] is not None:
        cpus = spec["cpus_per_gpu"] * spec["gpus_per_node"]
    if cpus is not None:
        opts.append(("--cpus-per-task", str(cpus)))
    gres = _gres(spec)
    if gres:
        opts.append(gres)
    minutes = parse_time_limit(spec["time"])
    opts.append(("--time", format_minutes(minutes)))
    for key, flag in (
        ("mem", "--mem"),
        ("partition", "--partition"),
        ("account", "--account"),
        ("qos", "--qos"),
        ("constraint", "--constraint"),
        ("workdir", "--chdir"),
        ("array", "--array"),
        ("dependency", "--dependency"),
        ("comment", "--comment"),
    ):
        if spec[key] is not None:
            opts.append((flag, str(spec[key])))
    if spec["exclude"]:
        opts.append(("--exclude", ",".join(spec["exclude"])))
    if spec["exclusive"]:
        opts.append(("--exclusive", None))
    req = spec["requeue"]
    opts.append(("--signal", f"B:{req['signal']}@{req['grace']}"))
    opts.append(("--requeue", None) if req["enabled"] else ("--no-requeue", None))
    if spec["mail"]["type"]:
        opts.append(("--mail-type", ",".join(spec["mail"]["type"])))
    if spec["mail"]["user"]:
        opts.append(("--mail-user", spec["mail"]["user"]))
    opts.sort(key=lambda kv: (kv[0], kv[1] or ""))
    for item in spec["extra_sbatch"]:  # escape hatch last: later options win in sbatch
        flag, sep, value = item.partition("=")
        opts.append((flag, value if sep else None))
    return opts


def split_sbatch_options(opts: List[Tuple[str, Optional[str]]]) -> Tuple[List[str], List[str], List[str]]:
    """Split options into ``#SBATCH`` lines and argv items (for unquotable values)."""
    lines: List[str] = []
    argv: List[str] = []
    notes: List[str] = []
    for flag, value in opts:
        if value is None:
            lines.append(flag)
        elif _SBATCH_SAFE.fullmatch(value):
            lines.append(f"{flag}={value}")
        else:
            argv.append(f"{flag}={value}")
            notes.append(flag)
    return lines, argv, notes


def _launch_argv(spec: Dict[str, Any]) -> List[str]:
    """What torchrun runs on every rank (after torchrun's own options).

    ``--`` ends torchrun's options before the program: torchrun's argparse accepts abbreviated
    options and classifies every item first, so a program argument such as ``--n 4`` (a sweep
    parameter ``n``) would otherwise stop torchrun with "ambiguous option: --n could match
    --nnodes, ..." and ``--nnodes=2`` would be taken for torchrun's own."""
    if spec["script"]:
        head = ["--", spec["script"]]
    elif spec["module"]:
        head = ["-m", "--", spec["module"]]
    else:
        head = ["--no-python", "--", *spec["command"]]
    return [*head, *spec["args"]]


_CKPT_PLACEHOLDERS = {
    "{job_id}": '"${SLURM_JOB_ID}"',
    "{user}": '"${SK_USER}"',
    # only in job arrays (validated at load): set by Slurm for every array task
    "{array_job_id}": '"${SLURM_ARRAY_JOB_ID}"',
    "{array_task_id}": '"${SLURM_ARRAY_TASK_ID}"',
}


def _checkpoint_dir_expr(template: str) -> str:
    """Quoted bash expression for the checkpoint dir: ``{job_id}`` -> ``$SLURM_JOB_ID``,
    ``{user}`` -> ``$SK_USER`` (the job's user, from ``id -un`` at run time).

    Built from ``shlex.quote``d literal parts joined by the unquoted-but-double-quoted
    variable references: no part of the user's string is ever outside single quotes.
    """
    parts = re.split(r"(\{job_id\}|\{user\}|\{array_job_id\}|\{array_task_id\})", template)
    return "".join(_CKPT_PLACEHOLDERS.get(p) or shlex.quote(p) for p in parts if p) or "''"


def resolve_python(spec: Dict[str, Any], site: Dict[str, Any]) -> str:
    return spec["python"] or site.get("python") or sys.executable


def build_context(
    spec: Dict[str, Any], *, site: Dict[str, Any], paths: Dict[str, Any], spec_path: Optional[str]
) -> Dict[str, Any]:
    """All template variables (plain data; quoting happens in the template)."""
    profiles_dir = site.get("nccl_profiles_dir") or nccl_mod.default_profiles_dir()
    resolved_nccl = nccl_mod.resolve_nccl(spec, profiles_dir)
    runtime = resolved_nccl["runtime"]
    # The user's own env wins over profile values: leave those out of the NCCL block.
    nccl_env = {k: v for k, v in resolved_nccl["env"].items() if k not in spec["env"]}
    ckpt_root = site.get("checkpoint_root") or os.path.join(paths["shared_dir"], "ssubmit")
    # per user: a shared root is world-writable, so <root>/<job id> could be prepared by anyone
    # a sweep's tasks: <array job>_<task>, the name sacct and `ssubmit status` show for the task
    own_dir = "{array_job_id}_{array_task_id}" if spec.get("sweep") else "{job_id}"
    ckpt_template = spec["checkpoint"]["dir"] or os.path.join(ckpt_root, "{user}", own_dir)
    sweep = spec.get("sweep")
    base_args = list(spec["args"])
    minutes = parse_time_limit(spec["time"])
    rdzv = spec["rendezvous"]
    opts = sbatch_options(spec)
    lines, argv, notes = split_sbatch_options(opts)
    pre = spec["preflight"]
    node_launch_args = [
        "--fabric",
        runtime["fabric"],
        "--device",
        spec["device"],
        "--profiles-dir",
        profiles_dir,
    ]
    if runtime["hca"] == "auto":
        node_launch_args += ["--hca", "auto"]
    if runtime["socket_ifname"] == "auto":
        node_launch_args += ["--socket-ifname", "auto"]
    detect_args: List[str] = ["--fabric", runtime["fabric"]]
    if runtime["link_layer"]:
        detect_args += ["--link-layer", runtime["link_layer"]]
    if runtime["expected_rate_gbps"]:
        detect_args += ["--expected-rate-gbps", f"{runtime['expected_rate_gbps']:g}"]
    requeue_args = [
        "--max-retries",
        str(spec["requeue"]["max_retries"]),
        "--max-node-failures",
        str(spec["requeue"]["max_node_failures"]),
        "--verdict-root",
        site.get("verdict_root") or paths["shared_dir"],
    ]
    if not spec["requeue"]["enabled"]:
        requeue_args.append("--no-requeue")
    container = spec["container"]
    srun_extra: List[str] = []
    if container["image"]:
        srun_extra.append(f"--container-image={container['image']}")
        if container["mounts"]:
            srun_extra.append("--container-mounts=" + ",".join(container["mounts"]))
        if container["workdir"]:
            srun_extra.append(f"--container-workdir={container['workdir']}")
    preflight_minutes = -(-pre["timeout"] // 60) + 1
    return {
        "version": __version__,
        "spec_path": spec_path or "<stdin>",
        "name": spec["name"],
        "sbatch_lines": lines,
        "argv_notes": notes,
        "sbatch_argv": argv,
        "python": resolve_python(spec, site),
        "device": spec["device"],
        "nodes": spec["nodes"],
        "nproc_per_node": spec["nproc_per_node"],
        "time_limit_s": (minutes or 0) * 60,
        "signal": spec["requeue"]["signal"],
        "grace": spec["requeue"]["grace"],
        "modules": [shlex.split(m) for m in spec["modules"]],
        "nccl_profile": resolved_nccl["profile"],
        "nccl_env": sorted(nccl_env.items()),
        "nccl_runtime": runtime,
        "user_env": sorted(spec["env"].items()),
        "checkpoint_dir_expr": _checkpoint_dir_expr(ckpt_template),
        "checkpoint_dir_template": ckpt_template,
        "checkpoint_every": spec["checkpoint"]["every"],
        "port_min": rdzv["port_min"],
        "port_span": rdzv["port_max"] - rdzv["port_min"] + 1,
        "rdzv_conf": f"join_timeout={rdzv['join_timeout']},read_timeout={rdzv['read_timeout']}",
        "preflight_rdzv_conf": (
            f"join_timeout={min(rdzv['join_timeout'], pre['timeout'])},read_timeout={rdzv['read_timeout']}"
        ),
        "node_launch_args": node_launch_args,
        "needs_fabric_check": runtime["hca"] == "auto" or runtime["fabric"] == "auto",
        "detect_args": detect_args,
        "requeue_args": requeue_args,
        "srun_extra": srun_extra,
        "preflight": pre["allreduce"],
        "recheck_on_failure": spec["requeue"]["enabled"] and spec["requeue"]["recheck_on_failure"],
        "preflight_args": [
            "--min-busbw-gbps",
            f"{pre['min_busbw_gbps']:g}",
            "--size-mb",
            f"{pre['size_mb']:g}",
            "--iters",
            str(pre["iters"]),
            "--timeout",
            str(pre["timeout"]),
        ],
        "preflight_minutes": preflight_minutes,
        "launch": _launch_argv(spec),
        # a sweep: the task's own arguments come from the table at run time, after the head
        "launch_head": _launch_argv({**spec, "args": []}),
        "sweep_table": hparams.table_json(sweep, name=spec["name"], base_args=base_args) if sweep else "",
    }


def make_environment(template_dirs: List[str]) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dirs),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["shquote"] = shquote
    env.filters["oneline"] = oneline
    env.filters["envname"] = _env_name
    env.filters["shwords"] = lambda items: " ".join(shquote(i) for i in items)
    return env


def render(
    spec: Dict[str, Any], *, site: Dict[str, Any], paths: Dict[str, Any], spec_path: Optional[str] = None
) -> Rendered:
    """Render the sbatch script for ``spec`` (validated) with site settings."""
    ctx = build_context(spec, site=site, paths=paths, spec_path=spec_path)
    template_path = site.get("template")
    if template_path:
        env = make_environment([os.path.dirname(os.path.abspath(template_path))])
        template = env.get_template(os.path.basename(template_path))
    else:
        env = make_environment([default_template_dir()])
        template = env.get_template(TEMPLATE_NAME)
    script = template.render(**ctx)
    settings = {
        "name": spec["name"],
        "nodes": spec["nodes"],
        "gpus_per_node": spec["gpus_per_node"],
        "nproc_per_node": spec["nproc_per_node"],
        "device": spec["device"],
        "python": ctx["python"],
        "time": format_minutes(parse_time_limit(spec["time"])),
        "fabric": spec["fabric"],
        "nccl_profile": ctx["nccl_profile"],
        "nccl_env": dict(ctx["nccl_env"]),
        "nccl_runtime": {k: v for k, v in ctx["nccl_runtime"].items() if v is not None},
        "env": dict(ctx["user_env"]),
        "checkpoint_dir": ctx["checkpoint_dir_template"],
        "checkpoint_every": ctx["checkpoint_every"],
        "requeue": spec["requeue"],
        "preflight": spec["preflight"],
        "rendezvous": {**spec["rendezvous"], "port": f"{ctx['port_min']} + job_id % {ctx['port_span']}"},
        "launch": ["torchrun", f"--nproc_per_node={spec['nproc_per_node']}", *ctx["launch"]],
        "sbatch_args": ctx["sbatch_argv"],
    }
    if spec.get("sweep"):
        settings["sweep"] = {
            "array": spec["array"],
            "pass_as": spec["sweep"]["pass_as"],
            "max_parallel": spec["sweep"]["max_parallel"],
            "tasks": spec["sweep"]["size"],
            "output": spec["output"],
        }
    return Rendered(script=script, sbatch_args=ctx["sbatch_argv"], settings=settings)
