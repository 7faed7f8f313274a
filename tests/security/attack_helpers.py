"""Attack-test helpers (a unique module name; the fixtures are in conftest.py): a node's
slurmkit files laid out as in production (root-owned, 0755 directories), and the hook
programs run as slurmd runs them.

slurmd starts Prolog/Epilog/HealthCheckProgram with an empty environment plus the job's
``SLURM_*`` variables (``env -i`` + job environment). The only additions here are
``SLURMKIT_CONFIG`` (what the devcluster's hook wrapper sets) and ``PYTHONPATH`` pinned
to this checkout, so the code under test is the one next to these tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml
from suite_guards import private_system_paths

REPO = Path(__file__).resolve().parents[2]
HEALTHY = REPO / "etc" / "gpu-fixtures" / "healthy-h100x8.yaml"
HOOKS = {
    "prolog": REPO / "prolog" / "slurmkit-prolog",
    "epilog": REPO / "epilog" / "slurmkit-epilog",
    "healthcheck": REPO / "prolog" / "slurmkit-healthcheck",
}


#: The attacker's interpreter: the node's system one, as on a site's nodes. Not this test
#: run's: its home may be under a directory only root may enter (``/root/.pyenv``), and
#: falling back to it turned a missing system python3 into ``Permission denied``
#: (tests/devcluster/test_production_config.py checks that every devcluster root has one).
USER_PYTHON = "/usr/bin/python3"


def as_user(user: str, code: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run Python ``code`` as ``user`` (an unprivileged account), with no inherited env."""
    return subprocess.run(
        ["runuser", "-u", user, "--", "env", "-i", "PATH=/usr/bin:/bin", USER_PYTHON, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def spawn_as_user(user: str, code: str, *args: str) -> subprocess.Popen:
    """Start Python ``code`` as ``user`` in the background; it prints one line when ready."""
    return subprocess.Popen(
        ["runuser", "-u", user, "--", "env", "-i", "PATH=/usr/bin:/bin", USER_PYTHON, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class Node:
    """One node's slurmkit layout under a root-owned directory, and its hooks."""

    def __init__(self, root: Path, name: str = "node1"):
        self.root = root
        self.name = name
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)
        self.gpu = root / "gpu"
        self.gpu.mkdir(exist_ok=True)
        shutil.copy(HEALTHY, self.gpu / f"{name}.yaml")
        self.paths = {
            "state_dir": str(root / "state"),
            "shared_dir": str(root / "shared" / "verdicts"),
            "metrics_dir": str(root / "metrics"),
            "log_dir": str(root / "log"),
        }
        self.health: Dict[str, Any] = {
            "backend": "simulated",
            "simulated_fixture": str(self.gpu / "{node}.yaml"),
            "drain_on_fail": False,  # no Slurm here; the devcluster tests check the drain
        }
        self.config = root / "slurmkit.yaml"
        self.write_config()

    def write_config(self, **paths: str) -> None:
        self.paths.update(paths)
        self.config.write_text(yaml.safe_dump({"paths": self.paths, "health": self.health}))
        os.chmod(self.config, 0o644)

    def fixture(self, mutate) -> None:
        path = self.gpu / f"{self.name}.yaml"
        data = yaml.safe_load(path.read_text())
        mutate(data)
        path.write_text(yaml.safe_dump(data))

    def add_xid(self, xid: int = 79, gpu: int = 3, age: float = 5.0) -> None:
        ts = time.time() - age
        self.fixture(
            lambda d: d.setdefault("xid_events", []).append(
                {"xid": xid, "gpu": gpu, "timestamp": ts, "message": "GPU has fallen off the bus."}
            )
        )

    def env(self, job_id: str = "4242", **extra: str) -> Dict[str, str]:
        env = {
            "SLURMKIT_CONFIG": str(self.config),
            "PYTHONPATH": str(REPO),
            "SLURMD_NODENAME": self.name,
            "SLURM_JOB_ID": job_id,
            "SLURM_JOB_UID": "65534",
            "SLURM_JOB_USER": "nobody",
            "SLURM_JOB_GPUS": "0,1",
            "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
        }
        env.update(extra)
        return env

    def hook(
        self, hook: str = "prolog", timeout: float = 60, private_defaults: Optional[Path] = None, **env: str
    ) -> subprocess.CompletedProcess:
        """Run a hook program exactly as slurmd would: ``env -i`` + the job's environment.
        With ``private_defaults`` (a scratch directory), the system's default paths are private
        to the run (:func:`suite_guards.private_system_paths`): for a hook that falls back to them."""
        environ = [f"{k}={v}" for k, v in self.env(**env).items()]
        argv = ["env", "-i", *environ, sys.executable, str(HOOKS[hook])]
        if private_defaults is not None:
            argv = private_system_paths(argv, private_defaults)
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd="/")

    def records(self) -> List[Dict[str, Any]]:
        path = Path(self.paths["log_dir"]) / "health.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def result(self, record: Dict[str, Any], check: str) -> Optional[Dict[str, Any]]:
        return next((r for r in record["results"] if r["check"] == check), None)


def fill(directory: Path) -> None:
    """Fill the filesystem of ``directory`` until it says ENOSPC."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while True:
            try:
                os.write(fd, b"\0" * 4096)
            except OSError:
                break
        while True:  # the last partial block
            try:
                os.write(fd, b"\0")
            except OSError:
                break
    finally:
        os.close(fd)
