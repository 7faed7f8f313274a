"""The devcluster's production configuration at work on real daemons (docs/security.md):
the device cgroup refuses a fake GPU the job was not given, each job has its own /tmp and
/dev/shm that vanish with it, and the job's processes sit in Slurm's cgroup for it."""

import os
import re
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.devcluster

OPEN_ALL_GPUS = """#!/bin/sh
# open each of the node's fake GPUs (as the job's user: plain sh, strerror's words)
for i in 0 1 2 3 4 5 6 7; do
  err=$( (exec 3< {fakegpu}/$SLURMD_NODENAME/nvidia$i) 2>&1 )
  case "$err" in
    "") echo "$i OPENED" ;;
    *"not permitted"*) echo "$i EPERM" ;;
    *"No such device or address"*) echo "$i ENXIO" ;;
    *) echo "$i OTHER" ;;
  esac
done
echo "GPUS=$SLURM_JOB_GPUS"
"""


def test_a_gpu_the_job_was_not_given_is_refused_with_eperm(devcluster):
    out = devcluster.shared_dir / f"devices-{time.time_ns()}.out"
    script = OPEN_ALL_GPUS.format(fakegpu=devcluster.state_dir / "fakegpu")
    job = devcluster.submit(script, ["-w", "node1", "--gres=gpu:2", f"--output={out}"], user="alice")
    assert devcluster.wait_job(job) == "COMPLETED"
    lines = out.read_text().split("\n")
    given = {int(i) for i in next(ln for ln in lines if ln.startswith("GPUS=")).split("=")[1].split(",")}
    seen = dict(ln.split() for ln in lines if re.fullmatch(r"\d+ [A-Z]+", ln))
    assert len(given) == 2 and len(seen) == 8, out.read_text()
    for i in range(8):
        # given: the device cgroup lets it through to the (absent) driver -> ENXIO;
        # not given: the device cgroup refuses it -> EPERM
        assert seen[str(i)] == ("ENXIO" if i in given else "EPERM"), (i, given, seen)


def test_the_fake_gpus_are_nvidia_character_devices(devcluster):
    for node in devcluster.nodes:
        for i in range(8):
            st = os.stat(devcluster.state_dir / "fakegpu" / node / f"nvidia{i}")
            assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (195, i)


PRIVATE_DIRS = """#!/bin/sh
echo "{tag}" > /tmp/sk-private-{tag}
echo "{tag}" > /dev/shm/sk-private-{tag}
touch {scratch}/ready-{tag}
i=0
while [ ! -e {scratch}/ready-{other} ] && [ $i -lt 120 ]; do sleep 0.5; i=$((i+1)); done
echo "OTHER_READY=$([ -e {scratch}/ready-{other} ] && echo yes || echo no)"
echo "TMP=$(ls /tmp | tr '\\n' ' ')"
echo "SHM=$(ls /dev/shm | tr '\\n' ' ')"
echo "TMP_OWNER=$(stat -c %U /tmp)"
"""


def _fields(text):
    return dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln)


def test_each_job_has_its_own_tmp_and_dev_shm_that_vanish_with_it(devcluster):
    tag = f"{os.getpid()}-{time.time_ns()}"
    scratch = devcluster.shared_dir
    outs, jobs = {}, {}
    for user, me, other in (("alice", f"a{tag}", f"b{tag}"), ("bob", f"b{tag}", f"a{tag}")):
        outs[user] = scratch / f"private-{me}.out"
        script = PRIVATE_DIRS.format(tag=me, other=other, scratch=scratch)
        # both on node1 at the same time: one node's /tmp, two jobs
        jobs[user] = devcluster.submit(script, ["-w", "node1", f"--output={outs[user]}"], user=user)
    for user, job in jobs.items():
        assert devcluster.wait_job(job) == "COMPLETED", user
    for user, me in (("alice", f"a{tag}"), ("bob", f"b{tag}")):
        got = _fields(outs[user].read_text())
        assert got["OTHER_READY"] == "yes", got  # the two jobs really ran at the same time
        assert got["TMP"].split() == [f"sk-private-{me}"], got
        assert got["SHM"].split() == [f"sk-private-{me}"], got
        assert got["TMP_OWNER"] == user
    # nothing of either job is left: not on the machine's /tmp or /dev/shm, not under the
    # plugin's BasePath
    for name in (f"sk-private-a{tag}", f"sk-private-b{tag}"):
        assert not os.path.exists(f"/tmp/{name}") and not os.path.exists(f"/dev/shm/{name}")
    left = [
        os.path.join(d, f)
        for d, _, files in os.walk(devcluster.state_dir / "jobcontainer")
        for f in files
        if tag in f
    ]
    assert left == []


def test_the_job_runs_in_slurms_cgroup_for_it(devcluster):
    out = devcluster.shared_dir / f"cgroup-{time.time_ns()}.out"
    job = devcluster.submit(
        "#!/bin/sh\ncat /proc/self/cgroup\n", ["-w", "node2", f"--output={out}"], user="bob"
    )
    assert devcluster.wait_job(job) == "COMPLETED"
    uid = int(devcluster.run(["id", "-u", "bob"]).stdout)
    lines = {
        ln.split(":")[1]: ln.split(":", 2)[2] for ln in out.read_text().splitlines() if ln.count(":") >= 2
    }
    # cgroup v1, multiple-slurmd build: slurm_<node>/uid_<uid>/job_<id>/step_batch/...
    assert lines["devices"].startswith(f"/slurm_node2/uid_{uid}/job_{job}/step_batch"), lines
    assert lines["freezer"].startswith(f"/slurm_node2/uid_{uid}/job_{job}/step_batch"), lines


REPO = Path(__file__).resolve().parents[2]


def test_a_users_job_runs_the_nodes_python3_with_slurmkit(devcluster):
    """Users' jobs (and the attack tests' users) run slurmkit's job side with the node's
    ``/usr/bin/python3``: the test run's own interpreter may sit where only root may enter.
    A Slurm root without python3 failed the attack tests with ``Permission denied``."""
    out = devcluster.shared_dir / f"python3-{time.time_ns()}.out"
    script = (
        "#!/bin/sh\n"
        f"PYTHONPATH={REPO} exec /usr/bin/python3 -c "
        "'import os, sys, yaml, slurmkit.submit.jobside; print(\"OK\", os.getuid(), sys.version_info[:2])'\n"
    )
    job = devcluster.submit(script, ["-w", "node2", f"--output={out}"], user="alice")
    state = devcluster.wait_job(job)
    text = out.read_text(errors="replace") if out.exists() else "(no output)"
    assert state == "COMPLETED", f"{state}: {text}"
    assert text.startswith("OK ") and not text.startswith("OK 0 "), text
