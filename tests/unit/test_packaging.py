"""Packaging a site can install as it is: library dependencies are ranges, the exact versions
live in etc/dev/constraints.txt (which the bootstrap installs with, and whose change
reinstalls), and the hooks are installed as the plain scripts they are."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / "etc" / "dev" / "constraints.txt"
BOOTSTRAP = REPO / "etc" / "dev" / "bootstrap.sh"


def pins() -> dict:
    out = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            out[name.strip().lower().replace("_", "-")] = version.strip()
    return out


def library_requirements():
    for path in (REPO / "pyproject.toml", REPO / "kernels" / "pyproject.toml"):
        project = tomllib.loads(path.read_text())["project"]
        reqs = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            reqs.extend(extra)
        for text in reqs:
            yield path.relative_to(REPO), Requirement(text)


#: Lower bounds below the pinned version, each checked on that older version: triton 3.6.0 is
#: what the lent GPU machines run (compile_check for sm_90 and the interpreter tests ran on it;
#: docs/kernels.md, "Toolchain range"), with numpy 2.3.5, since triton 3.6's interpreter fails
#: on numpy 2.4.
OLDEST_CHECKED = {"triton": "3.6.0", "numpy": "2.3.5"}


def test_library_dependencies_are_ranges_with_the_tested_versions_as_lower_bounds():
    pinned = pins()
    exact = [
        f"{p}: {r}"
        for p, r in library_requirements()
        if any(s.operator in ("==", "===") for s in r.specifier)
    ]
    assert exact == []
    for path, req in library_requirements():
        if req.name in ("torch", "triton", "numpy"):
            lower = [s.version for s in req.specifier if s.operator == ">="]
            assert len(lower) == 1 and lower[0] in (pinned[req.name], OLDEST_CHECKED.get(req.name)), (
                f"{path}: {req}"
            )


def test_constraints_pin_torch_and_match_the_installed_versions():
    pinned = pins()
    assert pinned["torch"] == "2.13.0" and pinned["triton"] == "3.7.1" and "numpy" in pinned
    drift = []
    for name, version in pinned.items():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        if have.split("+")[0] != version:
            drift.append(f"{name}: constraints.txt {version}, installed {have}")
    assert drift == [], "re-run etc/dev/bootstrap.sh, or update etc/dev/constraints.txt"


HOOK_FILES = {
    "slurmkit-prolog": "prolog/slurmkit-prolog",
    "slurmkit-epilog": "epilog/slurmkit-epilog",
    "slurmkit-healthcheck": "prolog/slurmkit-healthcheck",
}


def test_hooks_are_installed_as_the_plain_scripts_not_pip_wrappers():
    """pip's console-script wrapper imports ``re`` before slurmkit; the hook files do not. The
    wheel installs them as they are, with the venv's interpreter on the first line."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert sorted(project["tool"]["setuptools"]["script-files"]) == sorted(HOOK_FILES.values())
    hooks_as_wrappers = [n for n in project["project"]["scripts"] if n in HOOK_FILES]
    assert hooks_as_wrappers == [], "a hook must not also be a [project.scripts] wrapper"
    wrappers = {e.name for e in metadata.entry_points(group="console_scripts")}
    assert not wrappers & set(HOOK_FILES), "an old install's wrapper: pip install -e . again"
    bin_dir = Path(sys.executable).parent  # the venv the tests run in
    for name, source in HOOK_FILES.items():
        installed = bin_dir / name
        if not installed.exists():
            pytest.skip(f"{installed} missing: run etc/dev/bootstrap.sh")
        first, _, body = installed.read_text().partition("\n")
        assert first.startswith("#!") and "python" in first and os.access(installed, os.X_OK)
        assert body == (REPO / source).read_text().partition("\n")[2], f"{installed} is not {source}"
        assert "import re" not in body


def _apt_packages_installed() -> bool:
    names = re.search(r"APT_PACKAGES=\(([^)]*)\)", BOOTSTRAP.read_text()).group(1).split()
    res = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}\n", *names], capture_output=True, text=True, timeout=60
    )
    return res.returncode == 0 and res.stdout.count("install ok installed") == len(names)


def test_bootstrap_installs_with_the_constraints_and_reinstalls_when_they_change(tmp_path):
    """The bootstrap in a copy of the repository, with a stub venv python that records the
    pip calls: a second run only checks; a changed constraints file reinstalls."""
    if os.geteuid() != 0 or not shutil.which("dpkg-query") or not _apt_packages_installed():
        pytest.skip("needs root and the Debian packages bootstrap.sh installs (it must not run apt-get here)")
    repo = tmp_path / "repo"
    for rel in (
        "etc/dev/bootstrap.sh",
        "etc/dev/constraints.txt",
        "pyproject.toml",
        "kernels/pyproject.toml",
    ):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, repo / rel)
    venv, calls = tmp_path / "venv", tmp_path / "pip-calls.txt"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    (venv / "bin" / "python").chmod(0o755)

    def bootstrap() -> list:
        before = calls.read_text().splitlines() if calls.exists() else []
        res = subprocess.run(
            ["bash", "-c", 'source "$1"', "bash", str(repo / "etc/dev/bootstrap.sh")],
            env=dict(os.environ, SLURMKIT_VENV=str(venv)),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        return calls.read_text().splitlines()[len(before) :] if calls.exists() else []

    (first,) = bootstrap()
    assert f"-c {repo}/etc/dev/constraints.txt " in first
    assert f"-e {repo}[train,gpu,plot,metrics,report,test] -e {repo}/kernels" in first
    assert bootstrap() == []  # stamp unchanged: nothing installed
    with open(repo / "etc/dev/constraints.txt", "a") as fh:
        fh.write("example-new-pin==1.0\n")
    assert len(bootstrap()) == 1


@pytest.mark.parametrize(
    "pyproject,module",
    [
        ("pyproject.toml", "slurmkit/__init__.py"),
        ("kernels/pyproject.toml", "kernels/slurmkit_kernels/__init__.py"),
    ],
)
def test_one_version_source_per_distribution(pyproject, module):
    """The version is written once, as ``__version__`` in the package; the build reads it."""
    data = tomllib.loads((REPO / pyproject).read_text())
    assert "version" not in data["project"] and data["project"]["dynamic"] == ["version"]
    attr = data["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    package = attr.rsplit(".", 1)[0]
    assert module.endswith(f"{package}/__init__.py") and attr.endswith(".__version__")
    written = re.findall(r'^__version__ = "([^"]+)"$', (REPO / module).read_text(), re.M)
    assert len(written) == 1
    try:
        installed = metadata.version(data["project"]["name"])
    except metadata.PackageNotFoundError:
        pytest.skip(f"{data['project']['name']} is not installed")
    assert installed == written[0], "pip install -e . again"
