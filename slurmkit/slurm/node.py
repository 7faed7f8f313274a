"""Which Slurm node this process runs on: one rule for the hooks, the CLIs and the jobs."""

from __future__ import annotations

import os

from slurmkit.chars import ASCII_LETTERS, DIGITS, NAME_CHARS, only
from slurmkit.slurm.jobenv import JobEnv

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Mapping, Optional


def this_node(env: Optional[Mapping[str, str]] = None) -> str:
    """This node's Slurm name: ``SLURMD_NODENAME`` when set, else the short hostname.

    The rule is Slurm's: a node's NodeName is "typically the string that ``/bin/hostname -s``
    returns" (slurm.conf(5), https://slurm.schedmd.com/slurm.conf.html#OPT_NodeName), and a
    slurmd started with ``-N`` (several slurmd on one host, as on the devcluster) passes its
    own name to the hooks as ``SLURMD_NODENAME``, so there the hostname says nothing."""
    return JobEnv.from_env(env).node_name or os.uname().nodename.split(".")[0]


def is_this_node(name: str, env: Optional[Mapping[str, str]] = None) -> bool:
    """Is ``name`` the Slurm node this process runs on?

    With ``SLURMD_NODENAME`` set only that name is (a host running two slurmd is neither of
    them by its hostname). Without it, the short hostname or the full one: slurmd finds its
    own NodeName the same way, trying the full hostname and then the short one."""
    given = JobEnv.from_env(env).node_name
    if given:
        return name == given
    full = os.uname().nodename
    return bool(name) and name in (full, full.split(".")[0])


_NODE_NAME_FIRST = frozenset(ASCII_LETTERS + DIGITS)


def is_node_name(name: object) -> bool:
    """Whether ``name`` is a node name slurmkit uses in file and cgroup paths: host-name
    characters, ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``, the whole string (so never ``..``, a
    slash or a newline)."""
    return isinstance(name, str) and only(name, NAME_CHARS, _NODE_NAME_FIRST, longest=128)
