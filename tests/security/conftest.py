"""Fixtures for the attack tests (helpers in attack_helpers.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import List

import pytest
from attack_helpers import Node


@pytest.fixture
def node():
    """A node layout in a root-owned 0755 directory under /tmp: like /var/lib/slurmkit, every
    user can walk into it (pytest's own tmp dir is 0700, which would hide the attacks)."""
    if os.geteuid() != 0:
        pytest.skip("hook attack tests run the hooks as root, as slurmd does")
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="sk-sec-", dir="/tmp"))
    os.chmod(root, 0o755)
    try:
        yield Node(root / "node")
    finally:
        subprocess.run(["umount", "-R", "-l", str(root)], capture_output=True, timeout=30)
        for sub in sorted(root.rglob("*"), reverse=True):  # leave no mount behind before removing
            if os.path.ismount(sub):
                subprocess.run(["umount", "-l", str(sub)], capture_output=True, timeout=30)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def tmpfs():
    """``tmpfs(path, size)``: mount a small tmpfs (root's, 0755) at ``path``; unmounted after."""
    mounted: List[Path] = []

    def mount(path: Path, size: str = "64k") -> Path:
        path.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


@pytest.fixture
def shared_dropbox(devcluster):
    """A 1777 directory both test users and their jobs can see: under the devcluster's shared
    scratch area. Not under /tmp: with ``job_container/tmpfs`` (the production configuration)
    every job has a private /tmp of its own, so a job never sees what a test left there."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="sk-sec-", dir=devcluster.shared_dir))
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)
