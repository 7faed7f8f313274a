"""The hook entry: the files in prolog/ and epilog/, run from the tree and as the venv installs them, run the
same ``slurmkit.hooks.run`` with the same fail-open rule. A dependency of the gate that
raises something other than ImportError while it loads must not drain the node: exit 0,
one line on stderr (slurmd's log), ``slurmkit_health_internal_error 1`` in the metrics."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.health.conftest import REPO

#: Installed first thing in the hook's interpreter (``sitecustomize`` on PYTHONPATH): the
#: gate's dependency ``slurmkit.slurm.drain`` raises RuntimeError when it is executed.
BROKEN_DEPENDENCY = """
import importlib.abc
import importlib.util
import sys


class _Raises(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise RuntimeError("dependency broken at import")


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "slurmkit.slurm.drain":
            return importlib.util.spec_from_loader(name, _Raises())
        return None


sys.meta_path.insert(0, _Finder())
"""

INSTALLED_SCRIPT_DIR = Path(sys.executable).parent

HOOKS = [
    pytest.param([sys.executable, str(REPO / "prolog" / "slurmkit-prolog")], "prolog", id="prolog-file"),
    pytest.param([sys.executable, str(REPO / "epilog" / "slurmkit-epilog")], "epilog", id="epilog-file"),
    pytest.param(
        [sys.executable, str(REPO / "prolog" / "slurmkit-healthcheck")], "healthcheck", id="healthcheck-file"
    ),
    pytest.param([str(INSTALLED_SCRIPT_DIR / "slurmkit-prolog")], "prolog", id="prolog-installed-script"),
    pytest.param([str(INSTALLED_SCRIPT_DIR / "slurmkit-epilog")], "epilog", id="epilog-installed-script"),
]


@pytest.mark.parametrize("argv,hook", HOOKS)
def test_a_dependency_raising_at_import_fails_open(argv, hook, site, gpu_fixture, tmp_path):
    if not os.path.exists(argv[-1]):
        pytest.skip(f"{argv[-1]} is not installed in this venv")
    gpu_fixture()
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(BROKEN_DEPENDENCY)
    env = {
        "PYTHONPATH": str(shim),
        "SLURMKIT_CONFIG": str(site()),
        "SLURMD_NODENAME": "node1",
        "SLURM_JOB_ID": "4242",
    }
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"slurmkit-{hook}: cannot import slurmkit (RuntimeError: dependency broken")
    assert lines[0].endswith("failing open")
    prom = (tmp_path / "metrics" / f"slurmkit_health_{hook}_node1.prom").read_text()
    values = {s.name: s.value for fam in text_string_to_metric_families(prom) for s in fam.samples}
    assert values["slurmkit_health_internal_error"] == 1.0 and values["slurmkit_health_status"] == 3.0


def test_without_the_shim_the_same_hook_runs_the_gate(site, gpu_fixture, tmp_path):
    """The control: the same command without the broken dependency reaches a verdict."""
    gpu_fixture()
    env = {"SLURMKIT_CONFIG": str(site()), "SLURMD_NODENAME": "node1", "SLURM_JOB_ID": "4242"}
    res = subprocess.run(
        [sys.executable, str(REPO / "prolog" / "slurmkit-prolog")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0 and res.stderr == "", res.stderr
    prom = (tmp_path / "metrics" / "slurmkit_health_prolog_node1.prom").read_text()
    assert 'slurmkit_health_internal_error{hook="prolog",node="node1"} 0.0' in prom
