"""Guards on the test suite itself: a green CI run must not hide a broken install.

* In CI (tests/run.sh sets ``SLURMKIT_REQUIRE_TRAIN=1``) a test that would skip because
  torch or triton cannot be imported fails instead (hook in tests/conftest.py).
* No test ``importorskip``s slurmkit's own modules: that turns an import error in
  slurmkit into a skip.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# One test that importorskips torch inside the test, one module that does it at import.
TORCH_TESTS = [
    "tests/health/test_heavy.py::test_gemm_and_copy_measure_on_cpu_tensors",
    "tests/kernels/test_compile.py",
]


def _pytest_without_torch(tmp_path: Path, require: bool) -> subprocess.CompletedProcess:
    """pytest on TORCH_TESTS where ``import torch`` finds no module (importorskip skips only
    on ModuleNotFoundError; a torch that fails otherwise is already an error)."""
    shadow = tmp_path / "shadow" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        'raise ModuleNotFoundError("simulated missing torch", name="torch")\n'
    )
    env = {k: v for k, v in os.environ.items() if k not in ("SLURMKIT_REQUIRE_TRAIN", "PYTHONPATH")}
    env["PYTHONPATH"] = str(tmp_path / "shadow")
    if require:
        env["SLURMKIT_REQUIRE_TRAIN"] = "1"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rfs",
            "-p",
            "no:cacheprovider",
            "--continue-on-collection-errors",
            *TORCH_TESTS,
        ],
        cwd=str(REPO),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("require", [False, True], ids=["outside-ci", "ci"])
def test_missing_torch_skips_outside_ci_and_fails_in_ci(tmp_path, require):
    res = _pytest_without_torch(tmp_path, require)
    out = res.stdout + res.stderr
    assert "simulated missing torch" in out, out[-3000:]
    if require:
        assert res.returncode == 1, out[-3000:]
        assert "SLURMKIT_REQUIRE_TRAIN is set" in out
        # the test-level importorskip fails the test; the module-level one fails collection
        assert "1 failed" in out and "1 error" in out, out[-3000:]
    else:
        assert res.returncode == 0, out[-3000:]
        assert "2 skipped" in out and "failed" not in out, out[-3000:]


def test_run_sh_requires_the_training_stack():
    text = (REPO / "tests" / "run.sh").read_text()
    assert "export SLURMKIT_REQUIRE_TRAIN=1" in text and "export SLURMKIT_REQUIRE_DEVCLUSTER=1" in text


def _importorskip_targets(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "importorskip"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            yield node.lineno, str(node.args[0].value)


def test_no_test_importorskips_slurmkit_itself():
    bad = [
        f"{p.relative_to(REPO)}:{line}: importorskip({mod!r})"
        for p in sorted((REPO / "tests").rglob("*.py"))
        for line, mod in _importorskip_targets(p)
        if mod.split(".")[0] in ("slurmkit", "slurmkit_kernels")
    ]
    assert bad == []
