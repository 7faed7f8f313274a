"""devcluster config rendering and refusals, without starting daemons."""

import subprocess
import sys

import pytest

from slurmkit.devcluster import cluster as dc
from slurmkit.errors import DevclusterError


def test_slurm_conf_netns(tmp_path):
    c = dc.DevCluster(str(tmp_path))
    conf = c.render_slurm_conf(dc.ClusterSpec(nodes=3, gpu_type="h100"))
    lines = conf.splitlines()
    assert "AccountingStorageTRES=gres/gpu,gres/gpu:h100" in lines
    assert "AuthInfo=cred_expire=10,socket=" + str(tmp_path / "munge" / "munge.socket.2") in lines
    node = next(ln for ln in lines if ln.startswith("NodeName="))
    assert (
        "NodeName=node[1-3] NodeAddr=10.77.0.11,10.77.0.12,10.77.0.13" in node and "Gres=gpu:h100:8" in node
    )
    assert any(ln.startswith("PartitionName=sweep") and "PreemptMode=REQUEUE" in ln for ln in lines)
    assert f"StateSaveLocation={tmp_path}/spool/ctld" in lines
    assert not any("/etc/slurm" in ln for ln in lines)


def test_slurm_conf_ports_and_gres(tmp_path):
    c = dc.DevCluster(str(tmp_path))
    spec = dc.ClusterSpec(mode="ports", nodes=2, gpus_per_node=4, gpu_type="")
    conf = c.render_slurm_conf(spec)
    assert "Port=[17001-17002]" in conf and "NodeAddr=127.0.0.1" in conf
    assert "AccountingStorageTRES=gres/gpu\n" in conf
    assert c.render_gres_conf(spec) == f"NodeName=node[1-2] Name=gpu File={tmp_path}/fakegpu/nvidia[0-3]\n"


def test_hook_wrapper_is_valid_sh_and_injects_failures(tmp_path):
    c = dc.DevCluster(str(tmp_path))
    (tmp_path / "hooks").mkdir()
    script = tmp_path / "hooks" / "prolog"
    script.write_text(c._hook_wrapper(dc.ClusterSpec(), "prolog", None))
    script.chmod(0o755)
    env = {"SLURMD_NODENAME": "node2"}
    assert subprocess.run([str(script)], env=env).returncode == 0
    (tmp_path / "hooks" / "fail-prolog-node2").write_text("7")
    res = subprocess.run([str(script)], env=env, capture_output=True, text=True)
    assert res.returncode == 7 and "injected prolog failure" in res.stderr
    assert subprocess.run([str(script)], env={"SLURMD_NODENAME": "node1"}).returncode == 0


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
