"""Helpers for the ssubmit unit tests: a fixed site config so renders are deterministic."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from slurmkit.core.schema import defaults
from slurmkit.submit.config import SITE_SCHEMA

REPO = Path(__file__).resolve().parents[2]
SPECS = Path(__file__).resolve().parent / "specs"
GOLDEN = Path(__file__).resolve().parent / "golden"


def make_site(**overrides: Any) -> Dict[str, Any]:
    site = defaults(SITE_SCHEMA)
    site.update({"python": "/opt/venv/bin/python3", "checkpoint_root": "/shared/ckpt"})
    site.update(overrides)
    return site


TEST_PATHS = {"state_dir": "/var/lib/slurmkit", "shared_dir": "/shared", "metrics_dir": "/m", "log_dir": "/l"}


def render_file(path: os.PathLike, sets=(), site: Optional[Dict[str, Any]] = None):
    from slurmkit.submit.render import render
    from slurmkit.submit.spec import load_spec

    site = site or make_site()
    spec = load_spec(str(path), site_defaults=site["defaults"], sets=sets)
    return spec, render(spec, site=site, paths=TEST_PATHS, spec_path=os.path.basename(str(path)))


def render_dict(data: Dict[str, Any], site: Optional[Dict[str, Any]] = None):
    from slurmkit.submit.render import render
    from slurmkit.submit.spec import validate_spec

    site = site or make_site()
    spec = validate_spec(data, "spec.yaml")
    return spec, render(spec, site=site, paths=TEST_PATHS, spec_path="spec.yaml")


@pytest.fixture
def write_spec(tmp_path):  # re-exported by conftest.py
    def write(text: str, name: str = "train.yaml") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p

    return write


STUB_PYTHON = r"""#!/bin/bash
# Stands in for the job's python: records what torchrun would get, runs node-launch's command.
case "$1 $2 $3" in
  "-m slurmkit.submit.jobside resolve-head") echo 10.0.0.1; exit 0 ;;
  "-m slurmkit.submit.jobside sweep-task") exec "$SK_REAL_PYTHON" "$@" ;;
  "-m slurmkit.submit.jobside node-launch")
    while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done; shift; exec "$@" ;;
  "-m slurmkit.submit.jobside "*) exit 0 ;;
  "-m torch.distributed.run "*)
    printf '%s\0' "$@" > "$SK_TEST_OUT/torchrun.argv"; env -0 > "$SK_TEST_OUT/env"; exit 0 ;;
esac
echo "stub python: unexpected call: $*" >&2; exit 99
"""
STUB_SCONTROL = '#!/bin/bash\nif [ "$1 $2" = "show hostnames" ]; then echo node1; fi\nexit 0\n'
STUB_SRUN = '#!/bin/bash\nwhile [ "$#" -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n'


class StubRun:
    def __init__(self, proc, out_dir: Path, started: float):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.started = started
        argv_file = out_dir / "torchrun.argv"
        self.torchrun_argv = argv_file.read_bytes().decode().split("\0")[:-1] if argv_file.exists() else []
        env_file = out_dir / "env"
        self.env: Dict[str, str] = {}
        if env_file.exists():
            for item in env_file.read_bytes().decode().split("\0"):
                if "=" in item:
                    k, v = item.split("=", 1)
                    self.env[k] = v


def run_with_stubs(script: str, tmp: Path, extra_env: Optional[Dict[str, str]] = None, **_ignored) -> StubRun:
    """Execute a rendered script for real, with srun/scontrol/python replaced by stubs.

    Proves the quoting end to end: what bash hands to torchrun and to the environment
    is compared with the spec's values by the caller.
    """
    import subprocess
    import time

    bindir = tmp / "stubbin"
    bindir.mkdir(exist_ok=True)
    out = tmp / "out"
    out.mkdir(exist_ok=True)
    for name, text in (("python-stub", STUB_PYTHON), ("scontrol", STUB_SCONTROL), ("srun", STUB_SRUN)):
        p = bindir / name
        p.write_text(text)
        p.chmod(0o755)
    lines = script.splitlines(True)
    for i, line in enumerate(lines):
        if line.startswith("SK_PYTHON="):
            import shlex

            lines[i] = f"SK_PYTHON={shlex.quote(str(bindir / 'python-stub'))}\n"
            break
    env = {
        "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_JOB_NUM_NODES": "1",
        "TMPDIR": str(tmp),
        "SK_TEST_OUT": str(out),
        "HOME": str(tmp),
        "SK_REAL_PYTHON": sys.executable,  # the sweep-task helper runs for real
        **(extra_env or {}),
    }
    started = time.time()
    proc = subprocess.run(
        ["bash", "-s"],
        input="".join(lines),
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp),
        timeout=60,
    )
    return StubRun(proc, out, started)
