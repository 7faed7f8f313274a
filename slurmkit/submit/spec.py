"""The ssubmit job spec: schema, loading, merging and validation.

A job spec is one YAML file. Values come from three layers, later ones winning:
the site config's ``submit.defaults``, the spec file, then ``ssubmit --set k=v``.
Everything is validated at load, before anything is rendered or submitted:

* unknown keys fail with the list of valid keys (and file:line);
* type and range errors name file:line and the key path (``requeue.grace``);
* impossible combinations are refused (``cpus_per_task`` with ``cpus_per_gpu``,
  ``device: cuda`` without GPUs, a signal grace longer than the time limit, ...);
* values Slurm would reject (a malformed ``time``, a bad ``mem``) are caught here so
  the user sees the spec line, not an sbatch message.

Hostile strings (``$(...)``, backticks, quotes, newlines) are *not* rejected in
free-text places (name, env values, args, paths): the renderer quotes them so they
come out inert and exactly preserved. Only names that must be identifiers (env
variable names) or Slurm tokens (partition, account, ...) are restricted.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any, Dict, List, Optional

from slurmkit.core.schema import Field, Section, deep_merge, parse_set_option, validate
from slurmkit.core.yamlload import load_yaml_file
from slurmkit.errors import ConfigError
from slurmkit.slurm import sbatch_options
from slurmkit.slurm.parse import ParseError, gpus_from_gres, parse_time_limit
from slurmkit.submit import hparams
from slurmkit.values import LineDict

# --------------------------------------------------------------------------- value checks

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SLURM_TOKEN_RE = re.compile(r"[A-Za-z0-9_.+:-]+")
_PARTITION_RE = re.compile(r"[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*")
_HOSTLIST_RE = re.compile(r"[A-Za-z0-9_.\-\[\],]+")
_MEM_RE = re.compile(r"\d+[KMGT]?", re.IGNORECASE)
_ARRAY_RE = re.compile(r"\d+(-\d+(:\d+)?)?(,\d+(-\d+(:\d+)?)?)*(%\d+)?")
_DEPENDENCY_RE = re.compile(
    r"(singleton|[a-z]+(:[0-9_]+(\+\d+)?)+)([,?](singleton|[a-z]+(:[0-9_]+(\+\d+)?)+))*"
)
_CONSTRAINT_RE = re.compile(r"[A-Za-z0-9_.\-&|\[\]*(),:!]+")

#: Signals a trainer can be asked to checkpoint on. USR1 is allowed but discouraged:
#: NCCL installs its own SIGUSR1 handler (submitit PR #1697).
SIGNALS = ("USR2", "USR1", "TERM", "INT", "HUP", "URG", "XCPU")
MAIL_TYPES = (
    "NONE",
    "BEGIN",
    "END",
    "FAIL",
    "REQUEUE",
    "ALL",
    "INVALID_DEPEND",
    "STAGE_OUT",
    "TIME_LIMIT",
    "TIME_LIMIT_90",
    "TIME_LIMIT_80",
    "TIME_LIMIT_50",
    "ARRAY_TASKS",
)
FABRICS = ("auto", "infiniband", "roce", "ethernet", "none")
#: sbatch options ssubmit derives from the spec, refused in extra_sbatch (long names; every
#: spelling is mapped to these by slurmkit.slurm.sbatch_options) -> the spec key to use
#: instead. Some would break the one-torchrun-per-node contract; every option that
#: allocates GPUs or other GRES is here too (``man sbatch``: --gpus/-G, --gpus-per-node,
#: --gpus-per-socket, --gpus-per-task, --gres, --tres-per-task in newer releases, and
#: --exclusive, which "is allocated all CPUs and GRES on all nodes"), and so are the
#: per-GPU amounts that go with them, so what a job gets in GPUs is what its spec says.
_GPU_KEYS = "gpus_per_node (and gpu_type)"
FORBIDDEN_EXTRA: Dict[str, str] = {
    "--ntasks-per-node": "nproc_per_node (one task per node runs torchrun)",
    "--ntasks": "nodes (one task per node runs torchrun)",
    "--signal": "requeue.signal and requeue.grace",
    "--open-mode": "output (appended across requeues)",
    "--gres": _GPU_KEYS,
    "--gpus-per-node": _GPU_KEYS,
    "--gpus": _GPU_KEYS,
    "--gpus-per-task": _GPU_KEYS,
    "--gpus-per-socket": _GPU_KEYS,
    "--tres-per-task": _GPU_KEYS + " and cpus_per_task",
    "--cpus-per-gpu": "cpus_per_gpu",
    "--mem-per-gpu": "mem (per node)",
    "--exclusive": "exclusive",
    "--ntasks-per-gpu": "nproc_per_node",
    "--ntasks-per-socket": "nproc_per_node",
    "--ntasks-per-core": "nproc_per_node",
    "--nodes": "nodes",
    "--requeue": "requeue.enabled",
    "--no-requeue": "requeue.enabled",
    "--wrap": "script, module or command",
}


def _matches(regex: "re.Pattern[str]", what: str) -> Any:
    def check(value: Any) -> Optional[str]:
        if value is None:
            return None
        if not regex.fullmatch(str(value)):
            return f"{value!r} is not {what}"
        return None

    return check


#: The spellings of "no time limit" a spec may use: Slurm also reads ``-1`` and any zero
#: total (``0``, ``00:00:00``, ``0-0``) that way, which in a spec is far more likely a
#: slip than a wish, so only the words count.
_UNLIMITED_WORDS = ("unlimited", "infinite")


def _check_time(value: Any) -> Optional[str]:
    if value is None:
        return None
    try:
        minutes = parse_time_limit(str(value))
    except ParseError as exc:
        return str(exc)
    if minutes is None and str(value).lower() not in _UNLIMITED_WORDS:
        return (
            f"{value!r} would mean no time limit to Slurm; write UNLIMITED if that is meant, "
            "else a positive limit such as 30 (minutes) or 01:00:00"
        )
    return None


def _check_env(value: Dict[str, Any]) -> Optional[str]:
    for name in value:
        if not _IDENT_RE.fullmatch(name):
            return (
                f"env name {name!r} is not a shell identifier "
                "(letters, digits and _, not starting with a digit)"
            )
    return None


def _check_module_lines(value: List[str]) -> Optional[str]:
    for line in value or []:
        try:
            if not shlex.split(line):
                return "empty module line"
        except ValueError as exc:
            return f"module line {line!r}: {exc}"
    return None


def _check_extra_sbatch(value: List[str]) -> Optional[str]:
    """Parse the items as sbatch does (every spelling of an option: ``-N2``, ``-N 2``,
    ``--nodes 2``, ``--nod=2``, bundles) and refuse options ssubmit derives."""
    try:
        pairs = sbatch_options.parse(list(value or []))
    except sbatch_options.SbatchOptionError as exc:
        return f"extra_sbatch: {exc}; items must be an sbatch option such as --reservation=foo"
    for flag, _value in pairs:
        if flag in FORBIDDEN_EXTRA:
            return (
                f"extra_sbatch may not set {flag}, in any spelling: ssubmit derives it from the spec; "
                f"set {FORBIDDEN_EXTRA[flag]} instead"
            )
    return None


def _check_command(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parts = shlex.split(value)
        except ValueError as exc:
            return f"cannot split command {value!r}: {exc}; give a list instead"
        return None if parts else "empty command"
    if isinstance(value, list):
        if not value:
            return "empty command"
        for item in value:
            if isinstance(item, (dict, list)) or item is None:
                return "command list items must be strings"
        return None
    return f"expected a string or a list of strings, got {type(value).__name__}"


def _str_scalar(value: Any) -> Optional[str]:
    if isinstance(value, (dict, list)) or value is None:
        return "env values must be strings, numbers or booleans"
    return None


# --------------------------------------------------------------------------- the schema

NCCL_SCHEMA = Section(
    {
        "profile": Field("str", None, "NCCL profile name under etc/nccl (default: the fabric's own)."),
        "hca": Field(
            "any",
            None,
            "'auto' (detect ACTIVE ports per node at run time), a list of "
            "device:port strings such as [mlx5_0:1, mlx5_1:1] (rendered with the exact-match '=' "
            "prefix), or null for the profile's choice.",
            examples=["auto", ["mlx5_0:1", "mlx5_1:1"]],
        ),
        "socket_ifname": Field(
            "str",
            None,
            "Bootstrap interface for NCCL and Gloo; 'auto' picks the "
            "interface holding the node's address at run time. Default: the profile's.",
        ),
        "ib_timeout": Field("int", None, "NCCL_IB_TIMEOUT (4.096 us x 2^value per retry).", min=1, max=31),
        "gid_index": Field("int", None, "NCCL_IB_GID_INDEX (RoCE).", min=-1, max=255),
        "min_nchannels": Field("int", None, "NCCL_MIN_NCHANNELS.", min=1, max=64),
        "expected_rate_gbps": Field(
            "number",
            None,
            "Per-port link rate every detected HCA port must "
            "reach (Gb/s); default: the majority rate across the job's nodes.",
            min=0,
        ),
        "debug": Field(
            "str",
            None,
            "NCCL_DEBUG switch (null leaves it unset).",
            choices=["VERSION", "WARN", "INFO", "TRACE"],
        ),
        "env": Field(
            "dict",
            {},
            "Any other NCCL_* variables; they override the profile.",
            items=Field("any", check=_str_scalar),
            check=_check_env,
            nullable=False,
        ),
    },
    "NCCL settings on top of the fabric profile.",
)

SPEC_FIELDS: Dict[str, Field] = {
    "name": Field(
        "str",
        None,
        "Job name (default: the spec file name without extension). Any text; "
        "it is quoted, never interpreted.",
    ),
    "nodes": Field("int", 1, "Number of nodes.", min=1, max=100000, nullable=False),
    "gpus_per_node": Field(
        "int", 0, "GPUs per node; also the default torchrun --nproc_per_node.", min=0, max=64, nullable=False
    ),
    "gpu_type": Field(
        "str",
        None,
        "GPU type for typed GRES (gpu:<type>:N), e.g. h100.",
        check=_matches(_SLURM_TOKEN_RE, "a GRES type name"),
    ),
    "gpu_flag": Field(
        "str",
        "gres",
        "How GPUs are requested: #SBATCH --gres=gpu[:type]:N or --gpus-per-node=[type:]N.",
        choices=["gres", "gpus-per-node"],
        nullable=False,
    ),
    "nproc_per_node": Field(
        "int",
        None,
        "torchrun processes per node (default: gpus_per_node, or 1 "
        "without GPUs). Lets a CPU test run e.g. 2 processes while requesting GPUs.",
        min=1,
        max=256,
    ),
    "device": Field(
        "str",
        "auto",
        "Device the job's processes use: auto (CUDA when present), cuda, or "
        "cpu (exports SLURMKIT_DEVICE=cpu and hides GPUs from torch).",
        choices=["auto", "cuda", "cpu"],
        nullable=False,
    ),
    "cpus_per_task": Field(
        "int",
        None,
        "CPUs for the one task per node (the torchrun agent and all its workers).",
        min=1,
        max=100000,
    ),
    "cpus_per_gpu": Field(
        "int", None, "CPUs per GPU; becomes --cpus-per-task = cpus_per_gpu x gpus_per_node.", min=1, max=1024
    ),
    "mem": Field(
        "str",
        None,
        "Memory per node as sbatch --mem takes it (64G, 500000M, 0 = all).",
        check=_matches(_MEM_RE, "a memory size like 64G"),
    ),
    "time": Field(
        "str",
        "01:00:00",
        "Time limit in any sbatch form (M, H:M:S, D-H:M:S, ...), more than zero; UNLIMITED "
        "(or INFINITE) for none. -1 and zero, which Slurm reads as no limit, are refused.",
        check=_check_time,
        nullable=False,
    ),
    "partition": Field(
        "str", None, "Partition (comma list allowed).", check=_matches(_PARTITION_RE, "a partition name")
    ),
    "account": Field("str", None, "Account.", check=_matches(_SLURM_TOKEN_RE, "an account name")),
    "qos": Field("str", None, "QOS.", check=_matches(_SLURM_TOKEN_RE, "a QOS name")),
    "constraint": Field(
        "str",
        None,
        "Node features (sbatch --constraint).",
        check=_matches(_CONSTRAINT_RE, "a constraint expression"),
    ),
    "exclude": Field(
        "list",
        [],
        "Nodes never to use (hostlists allowed).",
        items=Field("str", check=_matches(_HOSTLIST_RE, "a host list"), nullable=False),
        nullable=False,
    ),
    "exclusive": Field("bool", False, "Whole nodes (sbatch --exclusive).", nullable=False),
    "workdir": Field("str", None, "Working directory of the job (default: where ssubmit runs)."),
    "output": Field(
        "str",
        "slurmkit-%j.out",
        "Job log (stdout and stderr, appended across requeues); relative to workdir; %j is the job id.",
        nullable=False,
    ),
    "comment": Field("str", None, "Free-text job comment."),
    "modules": Field(
        "list",
        [],
        "`module load` lines, run in order before anything else.",
        items=Field("str", nullable=False),
        check=_check_module_lines,
        nullable=False,
    ),
    "env": Field(
        "dict",
        {},
        "Environment variables for every process; names must be identifiers, "
        "values are passed through exactly.",
        items=Field("any", check=_str_scalar),
        check=_check_env,
        nullable=False,
    ),
    "container": Section(
        {
            "image": Field("str", None, "Container image (pyxis --container-image); null = no container."),
            "mounts": Field(
                "list",
                [],
                "pyxis --container-mounts entries (src:dst[:flags]).",
                items=Field("str", nullable=False),
                nullable=False,
            ),
            "workdir": Field("str", None, "pyxis --container-workdir."),
        },
        "Optional pyxis/enroot container for the job steps.",
    ),
    "fabric": Field(
        "str",
        "auto",
        "Network fabric: infiniband, roce, ethernet, none, or auto (detect "
        "per node at run time; no InfiniBand falls back to sockets with a warning).",
        choices=list(FABRICS),
        nullable=False,
    ),
    "nccl": NCCL_SCHEMA,
    "python": Field(
        "str",
        None,
        "Python interpreter on the nodes (default: site submit.python, else the one running ssubmit).",
    ),
    "script": Field(
        "str",
        None,
        "Training script run by torchrun (relative paths are resolved "
        "against the spec file's directory when the file exists there).",
    ),
    "module": Field(
        "str",
        None,
        "Python module run by torchrun -m.",
        check=_matches(re.compile(r"[A-Za-z_][A-Za-z0-9_.]*"), "a module name"),
    ),
    "command": Field(
        "any", None, "Executable (string or list) run by torchrun --no-python.", check=_check_command
    ),
    "args": Field(
        "list",
        [],
        "Arguments for the script/module/command; each one is quoted.",
        items=Field("str", nullable=False),
        nullable=False,
    ),
    "checkpoint": Section(
        {
            "dir": Field(
                "str",
                None,
                "Shared checkpoint directory (SLURMKIT_CHECKPOINT_DIR); '{job_id}' "
                "and '{user}' are replaced by the job id and user at run time. It must be private: "
                "the job stops with exit 78 if another user owns or can write it. Default: "
                "<submit.checkpoint_root>/{user}/{job_id}.",
            ),
            "every": Field(
                "int", 0, "SLURMKIT_CHECKPOINT_EVERY (steps; 0 = only when asked).", min=0, nullable=False
            ),
        },
        "Checkpoint contract with the trainer.",
    ),
    "requeue": Section(
        {
            "enabled": Field(
                "bool", True, "Requeue on the signal and after node-attributed failures.", nullable=False
            ),
            "max_retries": Field(
                "int",
                3,
                "Requeues allowed per cause: time limit and preemption are counted separately.",
                min=0,
                max=1000,
                nullable=False,
            ),
            "max_node_failures": Field(
                "int",
                2,
                "Requeues after node-attributed failures (pre-flight, "
                "fabric mismatch), each adding the node to the exclude list.",
                min=0,
                max=1000,
                nullable=False,
            ),
            "recheck_on_failure": Field(
                "bool",
                True,
                "When the training step fails, re-run the pre-flight; "
                "a node it blames is excluded and the job requeued (counted as a node "
                "failure). A failure no node is blamed for ends the job.",
                nullable=False,
            ),
            "signal": Field(
                "str",
                "USR2",
                "Signal Slurm sends to the batch shell before the end "
                "(--signal=B:SIG@grace). Not USR1: NCCL catches it.",
                choices=list(SIGNALS),
                nullable=False,
            ),
            "grace": Field(
                "int",
                90,
                "Seconds before the time limit the signal is sent (Slurm may send it up to 60 s earlier).",
                min=1,
                max=65535,
                nullable=False,
            ),
        },
        "Checkpoint-and-requeue policy.",
    ),
    "preflight": Section(
        {
            "allreduce": Field(
                "bool", True, "Run the all_reduce pre-flight before the training command.", nullable=False
            ),
            "min_busbw_gbps": Field(
                "number",
                0,
                "Fail (and exclude the slow node) below this bus "
                "bandwidth in GB/s; 0 checks only reachability and correctness.",
                min=0,
                nullable=False,
            ),
            "size_mb": Field("number", 64, "Message size in MiB.", min=0.001, max=65536, nullable=False),
            "iters": Field(
                "int", 5, "Timed iterations (after 2 warm-up ones).", min=1, max=1000, nullable=False
            ),
            "timeout": Field(
                "int",
                300,
                "Seconds the whole pre-flight may take (rendezvous included).",
                min=10,
                max=86400,
                nullable=False,
            ),
        },
        "Multi-node all_reduce smoke test in the job's first step.",
    ),
    "rendezvous": Section(
        {
            "port_min": Field(
                "int",
                29510,
                "Lowest rendezvous port; the port is port_min + job_id mod (port_max - port_min + 1).",
                min=1024,
                max=65535,
                nullable=False,
            ),
            "port_max": Field("int", 29999, "Highest rendezvous port.", min=1024, max=65535, nullable=False),
            "join_timeout": Field(
                "int", 300, "Seconds torchrun waits for all nodes to join.", min=5, max=86400, nullable=False
            ),
            "read_timeout": Field(
                "int", 60, "Seconds a rendezvous store read may take.", min=5, max=3600, nullable=False
            ),
        },
        "c10d rendezvous settings.",
    ),
    "array": Field(
        "str",
        None,
        "Job array indices (sbatch --array), e.g. 0-9%2.",
        check=_matches(_ARRAY_RE, "an array spec like 0-9%2"),
    ),
    "dependency": Field(
        "str",
        None,
        "sbatch --dependency, e.g. afterok:1234.",
        check=_matches(_DEPENDENCY_RE, "a dependency like afterok:1234"),
    ),
    "mail": Section(
        {
            "type": Field(
                "list",
                [],
                "Mail events.",
                items=Field("str", choices=list(MAIL_TYPES), nullable=False),
                nullable=False,
            ),
            "user": Field("str", None, "Mail address."),
        },
        "Slurm mail notifications.",
    ),
    "extra_sbatch": Field(
        "list",
        [],
        "Escape hatch: extra sbatch options (--reservation=foo). Options ssubmit manages are refused.",
        items=Field("str", nullable=False),
        check=_check_extra_sbatch,
        nullable=False,
    ),
    "sweep": Section(
        {
            "grid": Field(
                "dict",
                {},
                "Axes of the grid, in order: name -> list of values. Tasks are every combination, "
                "the last axis varying fastest.",
                items=Field("any"),
                nullable=False,
                examples=[{"lr": [0.0001, 0.0003], "seed": [0, 1, 2]}],
            ),
            "list": Field(
                "list",
                [],
                "Explicit parameter sets (name -> value), run after the grid's tasks.",
                items=Field("any"),
                nullable=False,
            ),
            "pass_as": Field(
                "str",
                "args",
                "How parameters reach the command: args (appended as --name value), env "
                "(environment variables of that name), or template ({name} placeholders in args).",
                choices=list(hparams.PASS_AS),
                nullable=False,
            ),
            "max_parallel": Field(
                "int", None, "Most tasks running at once (the array's % throttle).", min=1, max=4000001
            ),
        },
        "Hyperparameter sweep: one job array, one task per parameter set (docs/ssubmit.md#sweeps).",
    ),
}

SPEC_SCHEMA = Section(
    SPEC_FIELDS, "ssubmit job spec: one YAML file describing a multi-node torchrun job on Slurm."
)


# --------------------------------------------------------------------------- load and validate


def _line_of(data: Any, *keys: str) -> Optional[int]:
    cur = data
    line = getattr(data, "line", None)
    for k in keys:
        if not isinstance(cur, dict) or k not in cur:
            break
        line = getattr(cur, "lines", {}).get(k, line)
        cur = cur[k]
    return line


def _combo_error(raw: Any, path: Optional[str], message: str, *keys: str) -> ConfigError:
    return ConfigError(message, path=path, line=_line_of(raw, *keys), key=".".join(keys) or None)


def validate_spec(raw: Any, path: Optional[str] = None, spec_dir: Optional[str] = None) -> Dict[str, Any]:
    """Validate a merged raw spec; return the plain dict with defaults filled in."""
    if raw is None:
        raw = LineDict()
    if not isinstance(raw, dict):
        raise ConfigError("a job spec must be a mapping of keys", path=path, line=1)
    spec = validate(raw, SPEC_SCHEMA, path)

    launchers = [k for k in ("script", "module", "command") if spec[k] is not None]
    if len(launchers) != 1:
        keys = launchers[1:2] or ["script"]
        raise _combo_error(
            raw,
            path,
            "give exactly one of script, module or command"
            + (f" (got {', '.join(launchers)})" if launchers else ""),
            *keys,
        )
    if spec["cpus_per_task"] is not None and spec["cpus_per_gpu"] is not None:
        raise _combo_error(raw, path, "set cpus_per_task or cpus_per_gpu, not both", "cpus_per_gpu")
    if spec["cpus_per_gpu"] is not None and spec["gpus_per_node"] == 0:
        raise _combo_error(raw, path, "cpus_per_gpu needs gpus_per_node > 0", "cpus_per_gpu")
    if spec["device"] == "cuda" and spec["gpus_per_node"] == 0:
        raise _combo_error(raw, path, "device: cuda needs gpus_per_node > 0", "device")
    if (
        spec["device"] == "cuda"
        and spec["nproc_per_node"] is not None
        and spec["nproc_per_node"] > spec["gpus_per_node"]
    ):
        raise _combo_error(
            raw,
            path,
            f"nproc_per_node {spec['nproc_per_node']} is more than "
            f"gpus_per_node {spec['gpus_per_node']} with device: cuda",
            "nproc_per_node",
        )
    if spec["gpu_type"] and spec["gpus_per_node"] == 0:
        raise _combo_error(raw, path, "gpu_type needs gpus_per_node > 0", "gpu_type")
    rdzv = spec["rendezvous"]
    if rdzv["port_max"] < rdzv["port_min"]:
        raise _combo_error(
            raw,
            path,
            f"port_max {rdzv['port_max']} is below port_min {rdzv['port_min']}",
            "rendezvous",
            "port_max",
        )
    minutes = parse_time_limit(spec["time"])
    if minutes is not None and minutes > 0 and spec["requeue"]["grace"] >= minutes * 60:
        raise _combo_error(
            raw,
            path,
            f"grace {spec['requeue']['grace']} s is not shorter than the time "
            f"limit {spec['time']} ({minutes * 60} s)",
            "requeue",
            "grace",
        )
    hca = spec["nccl"]["hca"]
    if hca is not None and hca != "auto":
        if isinstance(hca, str):
            hca = [h.strip() for h in hca.lstrip("=").split(",") if h.strip()]
        if (
            not isinstance(hca, list)
            or not hca
            or not all(isinstance(h, str) and re.fullmatch(r"[A-Za-z0-9_.-]+(:\d+)?", h) for h in hca)
        ):
            raise _combo_error(
                raw, path, "nccl.hca must be 'auto' or a list like [mlx5_0:1, mlx5_1:1]", "nccl", "hca"
            )
        spec["nccl"]["hca"] = hca
    if spec["nccl"]["socket_ifname"] is not None and spec["nccl"]["socket_ifname"] != "auto":
        if not re.fullmatch(r"[=^]?[A-Za-z0-9_.:-]+(,[A-Za-z0-9_.:-]+)*", spec["nccl"]["socket_ifname"]):
            raise _combo_error(
                raw,
                path,
                f"{spec['nccl']['socket_ifname']!r} is not an interface list",
                "nccl",
                "socket_ifname",
            )
    if spec["mail"]["type"] and not spec["mail"]["user"]:
        pass  # Slurm mails the submitting user by default; fine.

    # Normalise scalars and defaults that depend on other keys.
    # one "--long-name[=value]" item per option, whatever spelling the spec used (checked above)
    spec["extra_sbatch"] = sbatch_options.to_items(sbatch_options.parse(spec["extra_sbatch"]))
    spec["env"] = {k: _env_str(v) for k, v in spec["env"].items()}
    spec["nccl"]["env"] = {k: _env_str(v) for k, v in spec["nccl"]["env"].items()}
    if isinstance(spec["command"], str):
        spec["command"] = shlex.split(spec["command"])
    elif isinstance(spec["command"], list):
        spec["command"] = [_env_str(c) for c in spec["command"]]
    if spec["name"] is None:
        base = os.path.basename(path) if path else "job"
        spec["name"] = os.path.splitext(base)[0] or "job"
    if spec["nproc_per_node"] is None:
        spec["nproc_per_node"] = spec["gpus_per_node"] or 1
    if spec["script"] and spec_dir and not os.path.isabs(spec["script"]):
        candidate = os.path.normpath(os.path.join(spec_dir, spec["script"]))
        if os.path.exists(candidate):
            spec["script"] = candidate
    _validate_sweep(raw, spec, path)
    return spec


#: the default log of a sweep: one file per array task (%A array job id, %a task index)
SWEEP_OUTPUT = "slurmkit-%A_%a.out"
#: checkpoint.dir placeholders that only exist in a job array
ARRAY_PLACEHOLDERS = ("{array_job_id}", "{array_task_id}")


def _validate_sweep(raw: Any, spec: Dict[str, Any], path: Optional[str]) -> None:
    """A ``sweep:`` section becomes the job's ``array`` (``0-N`` with the ``%`` throttle) and a
    per-task log; its task table is checked here so every error has the spec's line."""
    ckpt = spec["checkpoint"]["dir"] or ""
    in_raw = isinstance(raw, dict) and isinstance(raw.get("sweep"), dict)
    if not in_raw:
        if spec["array"] is None and any(p in ckpt for p in ARRAY_PLACEHOLDERS):
            raise _combo_error(
                raw,
                path,
                "{array_job_id} and {array_task_id} need a job array (array or sweep)",
                "checkpoint",
                "dir",
            )
        spec["sweep"] = None
        return
    sweep = spec["sweep"]
    if spec["array"] is not None:
        raise _combo_error(raw, path, "set array or sweep, not both: the sweep makes the array", "array")
    try:
        table = hparams.tasks(sweep, name=spec["name"], base_args=spec["args"])
    except hparams.SweepError as exc:
        raise _combo_error(raw, path, str(exc), "sweep", *exc.keys) from None
    n = len(table)
    spec["array"] = f"0-{n - 1}" + (f"%{sweep['max_parallel']}" if sweep["max_parallel"] else "")
    sweep["size"] = n
    if "output" not in raw:
        spec["output"] = SWEEP_OUTPUT
    elif "%a" not in spec["output"] and "%j" not in spec["output"]:
        raise _combo_error(
            raw,
            path,
            f"{spec['output']!r} has neither %a nor %j: every task of a sweep needs its own log",
            "output",
        )
    if ckpt and "{array_task_id}" not in ckpt and "{job_id}" not in ckpt:
        raise _combo_error(
            raw,
            path,
            f"{ckpt!r} has neither {{array_task_id}} nor {{job_id}}: every task of a sweep needs its own "
            "checkpoint directory (requeue resumes the task from it)",
            "checkpoint",
            "dir",
        )


def _env_str(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def load_spec(
    path: str,
    *,
    site_defaults: Optional[Dict[str, Any]] = None,
    sets: Any = (),
    site_path: Optional[str] = None,
) -> Dict[str, Any]:
    """Load a spec file, merge site defaults under it and ``--set`` items over it, validate.

    Site defaults are validated on their own first, so an error in them names the site
    file rather than the spec.
    """
    raw = load_yaml_file(path)
    if raw is None:
        raw = LineDict()
    if not isinstance(raw, dict):
        raise ConfigError("a job spec must be a mapping of keys", path=path, line=1)
    merged: Any = LineDict()
    if site_defaults:
        check_site_defaults(site_defaults, site_path)
        merged = deep_merge(merged, site_defaults)
    merged = deep_merge(merged, raw)
    for item in sets or ():
        merged = deep_merge(merged, parse_set_option(item))
    return validate_spec(merged, path, spec_dir=os.path.dirname(os.path.abspath(path)))


def check_site_defaults(defaults: Dict[str, Any], site_path: Optional[str]) -> None:
    """Validate ``submit.defaults`` against the spec schema (all keys optional there)."""
    if not isinstance(defaults, dict):
        raise ConfigError("submit.defaults must be a mapping", path=site_path)
    validate(defaults, SPEC_SCHEMA, site_path, "submit.defaults")


def spec_json_schema() -> Dict[str, Any]:
    """The job spec as JSON Schema (docs/job-spec.schema.json is generated from this)."""
    from slurmkit.core.schema import to_json_schema

    schema = to_json_schema(SPEC_SCHEMA, title="ssubmit job spec")
    schema["$id"] = "https://github.com/slurmkit/slurmkit/docs/job-spec.schema.json"
    props = schema["properties"]
    props["command"]["type"] = ["string", "array", "null"]
    props["command"]["items"] = {"type": "string"}
    props["nccl"]["properties"]["hca"]["type"] = ["string", "array", "null"]
    props["nccl"]["properties"]["hca"]["items"] = {"type": "string"}
    for env_holder in (props["env"], props["nccl"]["properties"]["env"]):
        env_holder["additionalProperties"] = {"type": ["string", "number", "boolean"]}
        env_holder["propertyNames"] = {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}
    props["nodes"]["minimum"] = 1
    return schema


def check_against_cluster(spec: Dict[str, Any], nodes_rows: List[Dict[str, str]]) -> Optional[str]:
    """Refuse ``gpus_per_node`` above what every node of the partition has.

    ``nodes_rows`` is :func:`slurmkit.slurm.client.nodes` output for the partition.
    Returns an error message, or ``None`` when the request fits (or sinfo told nothing).
    """
    want = spec["gpus_per_node"]
    if not nodes_rows:
        return None
    best = 0
    types = set()
    for row in nodes_rows:
        by_type = gpus_from_gres(row.get("gres") or "")
        types.update(t for t in by_type if t)
        # untyped GPUs, and typed ones of the requested type (any type when none is asked for)
        count = sum(n for t, n in by_type.items() if not (spec["gpu_type"] and t and t != spec["gpu_type"]))
        best = max(best, count)
    part = spec["partition"] or "the default partition"
    if want > best:
        typed = f" of type {spec['gpu_type']}" if spec["gpu_type"] else ""
        return (
            f"gpus_per_node {want} is more than any node in {part} has{typed} "
            f"(max {best}{', types: ' + ', '.join(sorted(types)) if types else ''})"
        )
    nodes_in_part = {row["name"] for row in nodes_rows}
    if spec["nodes"] > len(nodes_in_part):
        return f"nodes {spec['nodes']} is more than {part} has ({len(nodes_in_part)})"
    return None
