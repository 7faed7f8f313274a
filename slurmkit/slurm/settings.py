"""The Slurm settings slurmkit's node side relies on, read from ``scontrol show config``.

The epilog and ``kill-leaks`` kill only processes proven to belong to a job, and the
proof is strongest with Slurm's cgroup plugins: ``ProctrackType=proctrack/cgroup``
puts every process of a job in ``.../job_<id>/`` (double-forked daemons included),
``TaskPlugin=task/cgroup`` confines tasks, and ``ConstrainDevices=yes`` (cgroup.conf)
keeps one job off another job's GPUs. Without them a shared node leaves only process
ancestry and GPU lists as evidence. ``slurmkit health run`` and ``slurmkit config
validate`` print one warning line per missing setting.

``scontrol show config`` prints slurm.conf and, after a ``Cgroup Support
Configuration:`` header, the cgroup.conf values, as ``Name = value`` lines.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from slurmkit.errors import SlurmkitError

#: name -> (what it must contain, why), per https://slurm.schedmd.com/cgroup.conf.html and
#: https://slurm.schedmd.com/slurm.conf.html
REQUIRED = {
    "ProctrackType": ("proctrack/cgroup", "the epilog finds every process of the job by its cgroup"),
    "TaskPlugin": ("task/cgroup", "tasks are confined to the job's cgroup"),
    "ConstrainDevices": ("yes", "a job sees only its own GPUs, so no other job's process holds them"),
}


def parse_show_config(text: str) -> Dict[str, str]:
    """``Name = value`` lines of ``scontrol show config`` -> ``{Name: value}`` (first wins)."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        name = name.strip()
        if sep and name and " " not in name and name not in out:
            out[name] = value.strip()
    return out


def missing_required(conf: Dict[str, str]) -> List[str]:
    """One line per required setting the configuration lacks (empty: all present)."""
    out = []
    for name, (want, why) in REQUIRED.items():
        have = conf.get(name)
        if have is None or want not in [v.strip().lower() for v in have.split(",")]:
            shown = have if have is not None else "unset"
            out.append(f"{name}={shown}: slurmkit needs {want} ({why}); see docs/security.md")
    return out


def required_settings_warnings(timeout: float = 5.0) -> List[str]:
    """Warnings about this node's Slurm settings, read with ``scontrol show config``.

    No Slurm here (scontrol not installed): nothing to say. scontrol failing or timing
    out: one warning saying so, never an exception.
    """
    from slurmkit.slurm import client
    from slurmkit.slurm.runner import CommandNotFound

    try:
        res = client.call("scontrol", ["show", "config"], timeout=timeout)
    except CommandNotFound:
        return []
    except SlurmkitError as exc:
        return [f"cannot check the Slurm settings slurmkit needs: {exc}"]
    return missing_required(parse_show_config(res.stdout))


def warn_lines(timeout: float = 5.0) -> Optional[List[str]]:
    """Formatted ``warning:`` lines for a CLI (``None`` when there is nothing to say)."""
    lines = required_settings_warnings(timeout)
    out = [f"warning: Slurm setting {w}" if "=" in w.split(":")[0] else f"warning: {w}" for w in lines]
    return out or None


#: Slurm's default MaxArraySize (slurm.conf(5)): array indices run from 0 to MaxArraySize - 1
DEFAULT_MAX_ARRAY_SIZE = 1001


def max_array_size(timeout: float = 10.0) -> int:
    """The cluster's ``MaxArraySize`` from ``scontrol show config`` (through the runner, with
    ``timeout``): a job array may have at most this many tasks, indices 0 to this - 1.

    A failing or timed-out scontrol raises its :class:`~slurmkit.errors.ExternalCommandError`;
    a configuration that does not print the value gives Slurm's default."""
    from slurmkit.slurm import client

    res = client.call("scontrol", ["show", "config"], timeout=timeout)
    value = parse_show_config(res.stdout).get("MaxArraySize", "")
    return int(value) if value.isdigit() else DEFAULT_MAX_ARRAY_SIZE
