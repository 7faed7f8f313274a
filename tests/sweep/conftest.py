"""Fixtures for the sweep unit tests: a site config in a temp dir, and a fake Slurm
runner that answers sinfo/squeue/sbatch/scontrol from canned text (unit tests of
parsing and control flow only; Slurm behaviour itself is tested on the devcluster)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import yaml

from slurmkit.slurm import runner
from slurmkit.slurm.runner import Result


def write_site_config(
    tmp_path: Path, sweep: Optional[Dict[str, Any]] = None, health: Optional[Dict[str, Any]] = None
) -> Path:
    data: Dict[str, Any] = {
        "paths": {
            "state_dir": str(tmp_path / "state"),
            "shared_dir": str(tmp_path / "shared"),
            "metrics_dir": str(tmp_path / "metrics"),
            "log_dir": str(tmp_path / "log"),
        },
        "sweep": sweep or {},
    }
    if health:
        data["health"] = health
    path = tmp_path / "slurmkit.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def site_config(tmp_path):
    """``site_config(**sweep_keys)`` -> a loaded SiteConfig with paths under tmp_path."""

    def make(health=None, **sweep):
        from slurmkit.config import load_site_config

        return load_site_config(str(write_site_config(tmp_path, sweep, health)))

    return make


class FakeSlurm:
    """Canned answers keyed by the command's basename; records every call."""

    def __init__(self):
        self.sinfo = ""
        self.squeue = ""
        self.nodes: Dict[str, str] = {}  # scontrol show node answers
        self.calls: List[List[str]] = []
        self.inputs: List[Optional[str]] = []
        self.next_job = 1000
        self.sbatch_fail: Optional[str] = None

    def __call__(self, argv, timeout, input, env):
        argv = list(argv)
        self.calls.append(argv)
        self.inputs.append(input)
        name = os.path.basename(argv[0])
        if name == "sinfo":
            return Result(argv, 0, self.sinfo, "", 0.0)
        if name == "squeue":
            return Result(argv, 0, self.squeue, "", 0.0)
        if name == "sbatch":
            if self.sbatch_fail:
                return Result(argv, 1, "", self.sbatch_fail, 0.0)
            self.next_job += 1
            return Result(argv, 0, f"{self.next_job}\n", "", 0.0)
        if name == "scontrol":
            if argv[1:3] == ["-o", "show"] and argv[3] == "node":
                rec = self.nodes.get(argv[4])
                return Result(argv, 0 if rec else 1, rec or "", "" if rec else "Node not found", 0.0)
            return Result(argv, 0, "", "", 0.0)
        return Result(argv, 127, "", f"{name}: unexpected in this test", 0.0)

    def commands(self, name: str) -> List[List[str]]:
        return [c for c in self.calls if os.path.basename(c[0]) == name]


@pytest.fixture
def fake_slurm():
    fake = FakeSlurm()
    previous = runner.set_runner(fake)
    try:
        yield fake
    finally:
        runner.set_runner(previous)
