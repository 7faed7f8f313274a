"""The foundation on real daemons: typed GPU gres, multi-node srun, drain/resume,
accounting of gres/gpu, and Slurm's prolog-failure semantics."""

import time

import pytest

pytestmark = pytest.mark.devcluster


def test_status_shows_all_daemons_running(devcluster):
    st = devcluster.cluster.status()
    assert st["up"] is True
    assert set(st["daemons"]) == {
        "munged",
        "mariadbd",
        "slurmdbd",
        "slurmctld",
        "slurmd:node1",
        "slurmd:node2",
    }
    assert "node1" in st["sinfo"] and "gpu:h100:8" in st["sinfo"]


def test_gres_job_on_typed_nodes_sees_its_gpus(devcluster):
    out = devcluster.shared_dir / f"gres-{time.time_ns()}.out"
    job = devcluster.submit(
        '#!/bin/sh\necho "GPUS=$SLURM_JOB_GPUS CUDA=$CUDA_VISIBLE_DEVICES"\n',
        ["--gres=gpu:2", f"--output={out}"],
        user="alice",
    )
    assert devcluster.wait_job(job) == "COMPLETED"
    text = out.read_text()
    gpus = text.split("GPUS=")[1].split()[0].split(",")
    assert len(gpus) == 2, text
    res = devcluster.run(["sacct", "-X", "-n", "-P", "-j", job, "--format=User,Account,AllocTRES"])
    user, account, tres = res.stdout.strip().split("|")
    assert (user, account) == ("alice", "research")
    assert "gres/gpu=2" in tres.split(",") and "gres/gpu:h100=2" in tres.split(",")


def test_two_node_srun_has_distinct_hostnames_and_addresses(devcluster):
    res = devcluster.run(
        [
            "srun",
            "-N",
            "2",
            "--ntasks-per-node=1",
            "-l",
            "sh",
            "-c",
            'echo "$SLURMD_NODENAME $(hostname) $(hostname -I)"',
        ],
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    lines = sorted(line.split(": ", 1)[1].split() for line in res.stdout.strip().splitlines())
    assert [ln[0] for ln in lines] == ["node1", "node2"]
    assert [ln[1] for ln in lines] == ["node1", "node2"]
    assert [ln[2] for ln in lines] == ["10.77.0.11", "10.77.0.12"]


def test_multinode_gres_gpu_is_the_job_total_in_sacct(devcluster):
    job = devcluster.submit(
        "#!/bin/sh\nsrun true\n", ["-N", "2", "--gpus-per-node=3", "-o", "/dev/null"], user="bob"
    )
    assert devcluster.wait_job(job) == "COMPLETED"
    res = devcluster.run(["sacct", "-X", "-n", "-P", "-j", job, "--format=Account,AllocTRES,NNodes"])
    account, tres, nnodes = res.stdout.strip().split("|")
    assert account in ("ops", "research") and nnodes == "2"
    assert "gres/gpu=6" in tres.split(",")


def test_drain_and_resume(devcluster):
    devcluster.wait_nodes_idle()
    res = devcluster.run(["scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=foundation test"])
    assert res.returncode == 0, res.stderr
    try:
        assert devcluster.node_state("node2").startswith("drain")
        assert devcluster.node_reason("node2") == "foundation test"
        job = devcluster.submit("#!/bin/sh\nhostname\n", ["-w", "node2", "-o", "/dev/null"])
        time.sleep(1)
        reason = devcluster.run(["squeue", "-h", "-j", job, "-o", "%r"]).stdout.strip()
        assert "ReqNodeNotAvail" in reason or "Unavailable" in reason, reason
        devcluster.run(["scontrol", "update", "NodeName=node2", "State=RESUME"])
        assert devcluster.wait_job(job) == "COMPLETED"
    finally:
        devcluster.run(["scontrol", "update", "NodeName=node2", "State=RESUME"])
    devcluster.wait_nodes_idle()


def test_failing_prolog_drains_node_and_holds_job(devcluster):
    marker = devcluster.state_dir / "hooks" / "fail-prolog-node2"
    devcluster.wait_nodes_idle()
    marker.write_text("1")
    try:
        job = devcluster.submit("#!/bin/sh\ntrue\n", ["-w", "node2", "-o", "/dev/null"], user="alice")
        deadline = time.monotonic() + 60
        info = ""
        while time.monotonic() < deadline:
            info = devcluster.run(["scontrol", "-o", "show", "job", job]).stdout
            if "JobState=PENDING" in info and "Priority=0" in info:
                break
            time.sleep(0.5)
        assert "JobState=PENDING" in info and "Priority=0" in info, info  # requeued and held
        assert "Restarts=1" in info
        assert devcluster.node_state("node2").startswith("drain")
        assert "Prolog error" in devcluster.node_reason("node2")
        assert not devcluster.node_state("node1").startswith("drain")
    finally:
        marker.unlink(missing_ok=True)
        devcluster.run(["scontrol", "update", "NodeName=node2", "State=RESUME"])
    devcluster.run(["scontrol", "release", job])
    assert devcluster.wait_job(job, timeout=120) == "COMPLETED"


def test_up_twice_is_a_fast_no_op(devcluster):
    t0 = time.monotonic()
    spec = devcluster.cluster.up(devcluster.spec)
    assert time.monotonic() - t0 < 5
    assert spec.comparable() == devcluster.spec.comparable()


def test_a_different_cluster_is_refused_while_one_runs(devcluster):
    import dataclasses

    from slurmkit.errors import DevclusterError

    other = dataclasses.replace(devcluster.spec, nodes=3)
    with pytest.raises(DevclusterError, match="a different devcluster is running"):
        devcluster.cluster.up(other)


def test_taken_port_is_a_one_line_error(devcluster):
    from slurmkit.errors import DevclusterError

    # The running cluster holds the ports: the pre-start check must name one of them.
    with pytest.raises(DevclusterError, match=r"port 16817 \(for slurmctld\) is already in use"):
        devcluster.cluster._check_system(devcluster.spec)


def test_status_and_env_commands(devcluster):
    import json
    import sys

    res = devcluster.run(
        [
            sys.executable,
            "-m",
            "slurmkit.cli.main",
            "devcluster",
            "status",
            "--json",
            "--state-dir",
            str(devcluster.state_dir),
        ]
    )
    assert res.returncode == 0, res.stderr
    st = json.loads(res.stdout)
    assert st["up"] and st["daemons"]["slurmctld"]["state"] == "running"
    res = devcluster.run(
        [
            sys.executable,
            "-m",
            "slurmkit.cli.main",
            "devcluster",
            "env",
            "--state-dir",
            str(devcluster.state_dir),
        ]
    )
    assert f"export SLURM_CONF={devcluster.state_dir}/etc/slurm.conf" in res.stdout
