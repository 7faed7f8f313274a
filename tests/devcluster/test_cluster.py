"""devcluster process control without starting daemons: releases, the Debian roots, refusals.
The configuration files are tested in test_render_configs.py."""

import json
import os
import stat
import subprocess
import sys

import pytest

from slurmkit.devcluster import cluster as dc
from slurmkit.devcluster import releases, rootfs
from slurmkit.errors import DevclusterError


def test_an_unknown_release_is_a_clear_error(tmp_path):
    with pytest.raises(DevclusterError, match="unknown Slurm release '23.02'; known: 22.05, 24.11, 26.05"):
        dc.DevCluster(str(tmp_path)).release(dc.ClusterSpec(slurm="23.02", release="23.02"))


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("slurm-wlm 22.05.8", "22.05"),
        ("slurm 24.11.5", "24.11"),
        ("slurm-wlm 26.05.5\n", "26.05"),
        ("slurm", None),
    ],
)
def test_release_from_slurmd_version(text, want):
    assert releases.parse_version(text) == want


def test_release_from_debian_version(tmp_path):
    f = tmp_path / "debian_version"
    for content, want in (("12.11\n", "22.05"), ("13.2\n", "24.11"), ("forky/sid\n", None)):
        f.write_text(content)
        assert releases.debian_release(str(f)) == want
    assert releases.debian_release(str(tmp_path / "missing")) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_fake_gpu_device_numbers_are_repaired(tmp_path):
    dev = tmp_path / "nvidia3"
    os.mknod(dev, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # an old /dev/null-numbered one
    dc.DevCluster._make_fake_gpu(dev, 3)
    st = os.stat(dev)
    assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (195, 3)
    assert stat.S_IMODE(st.st_mode) == 0o666


def test_rootfs_binds_the_state_dir_checkout_and_python(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "repo" / ".venv"))
    monkeypatch.setattr(sys, "base_prefix", str(tmp_path / "pyenv" / "3.11"))
    (tmp_path / "elsewhere" / "site-packages").mkdir(parents=True)
    monkeypatch.setattr(
        sys, "path", ["", "/usr/lib/python3/dist-packages", str(tmp_path / "elsewhere" / "site-packages")]
    )
    got = rootfs.binds(tmp_path / "state", tmp_path / "repo")
    # the venv is inside the checkout: one bind covers both
    # ... and what the venv imports from elsewhere; never a system directory the root has
    want = [
        tmp_path / "state",
        tmp_path / "repo",
        tmp_path / "pyenv" / "3.11",
        tmp_path / "elsewhere" / "site-packages",
    ]
    assert sorted(got) == sorted(want)
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    with pytest.raises(DevclusterError, match="outside /usr"):
        rootfs.binds(tmp_path / "state", tmp_path / "repo")


def test_rootfs_marker_names_release_and_packages(tmp_path, monkeypatch):
    monkeypatch.setenv(rootfs.CACHE_ENV, str(tmp_path))
    rel = releases.get("26.05")
    assert rootfs.path_for(rel) == tmp_path / "rootfs-26.05"
    assert not rootfs.is_built(rel)
    (tmp_path / "rootfs-26.05").mkdir()
    (tmp_path / "rootfs-26.05" / rootfs.MARKER).write_text(json.dumps(rootfs._marker(rel)))
    assert rootfs.is_built(rel)
    # an older build (other packages) is rebuilt, not reused
    (tmp_path / "rootfs-26.05" / rootfs.MARKER).write_text(json.dumps(dict(rootfs._marker(rel), build=0)))
    assert not rootfs.is_built(rel)


def test_down_refuses_a_directory_that_is_not_a_devcluster(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(DevclusterError, match="not a devcluster state directory"):
        dc.DevCluster(str(tmp_path)).down()
    assert (tmp_path / "precious.txt").exists()


def test_missing_packages_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setattr(dc, "REQUIRED_BINARIES", {str(tmp_path / "no-slurmctld"): "slurmctld"})
    with pytest.raises(DevclusterError) as exc:
        dc.DevCluster(str(tmp_path)).ensure_packages(install=False)
    assert "missing packages slurmctld" in str(exc.value)
    assert "apt-get install -y --no-install-recommends slurm-wlm" in str(exc.value)


def test_up_without_root_is_a_clear_error(tmp_path):
    code = (
        "import os; os.geteuid = lambda: 1000\n"
        "from slurmkit.devcluster import cluster as dc\n"
        "dc.DevCluster.missing_packages = staticmethod(lambda: [])\n"
        f"dc.DevCluster({str(tmp_path)!r})._check_system(dc.ClusterSpec())\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode != 0 and "devcluster needs root" in res.stderr


@pytest.mark.parametrize(
    "repo,hidden",
    [("/tmp/co", True), ("/tmp", True), ("/dev/shm/x/y", True), ("/tmpfoo/co", False), ("/work/co", False)],
)
def test_a_checkout_jobs_cannot_see_is_named(repo, hidden):
    problem = dc.hidden_checkout_problem(repo)
    assert (problem is not None) == hidden
    if hidden:
        assert repo in problem and "job_container/tmpfs" in problem


def test_up_from_a_checkout_under_tmp_is_one_clear_line(tmp_path):
    """`devcluster up` from a checkout under /tmp stops before touching anything: with a
    private /tmp per job, its jobs would fail with exit 127 (the venv is not there)."""
    code = (
        "from pathlib import Path\n"
        "from slurmkit.devcluster import cluster as dc\n"
        "dc.REPO_ROOT = Path('/tmp/slurmkit-checkout')\n"
        "def boom(*a, **k): raise AssertionError('went on past the check')\n"
        "dc.DevCluster.root_release = boom\n"
        "import sys\n"
        f"sys.argv = ['slurmkit', 'devcluster', 'up', '--state-dir', {str(tmp_path / 'state')!r}]\n"
        "from slurmkit.cli.main import main\n"
        "main()\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr and "went on" not in res.stderr, res.stderr
    assert "this checkout is under /tmp (/tmp/slurmkit-checkout)" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_the_namespace_cpu_pin_is_one_allowed_cpu_and_is_undone():
    before = os.sched_getaffinity(0)
    with rootfs.on_namespace_cpu():
        assert os.sched_getaffinity(0) == {rootfs.namespace_cpu()} <= before
    assert os.sched_getaffinity(0) == before
