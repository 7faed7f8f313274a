"""Which Slurm node this process runs on."""

from __future__ import annotations

import os
from typing import Mapping, Optional


def this_node(env: Optional[Mapping[str, str]] = None) -> str:
    """This node's Slurm name: ``SLURMD_NODENAME`` when set (several slurmd may share one
    host, as on the devcluster, so the hostname is not enough), else the short hostname."""
    env = os.environ if env is None else env
    return env.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
