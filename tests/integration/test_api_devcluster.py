"""slurmkit.api and sweeps on the real 2-node devcluster.

* a 2 x 3 sweep with ``max_parallel: 2`` as one job array, one task failing on purpose:
  at most 2 tasks at once (sacct start/end times), each task gets its own parameters (one
  of them hostile: spaces, quotes, ``$( )``, backticks, a newline) as single arguments, its
  own log, checkpoint directory and efficiency summary; ``ssubmit status ARRAY`` and
  ``Job.wait()``/``Job.status()`` agree on 5 COMPLETED and 1 FAILED with its exit code;
* a job submitted and followed through the API only;
* ``Job(id)`` attached to a job the CLI submitted.

The jobs are tiny (a bash command under torchrun, no pre-flight), so the cluster is held
for about a minute.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

import pytest

import slurmkit.api as sk

pytestmark = pytest.mark.devcluster

#: the hostile sweep value: it must arrive as one argument, never evaluated
HOSTILE = 'it\'s $(touch PWNED) `touch PWNED2` "q" $HOME\nline two'
#: the task body: record argv (NUL-separated) and the sweep variables in the task's checkpoint
#: directory, hold the slot a few seconds, fail for tag=plain seed=2 (torchrun turns the 7 into
#: its own 1, which is the task's exit code)
TASK = r"""
printf '%s\0' "$@" > "$SLURMKIT_CHECKPOINT_DIR/argv"
printf '%s\0' "$SLURMKIT_RUN_NAME" "$SLURMKIT_SWEEP_INDEX" "$SLURMKIT_SWEEP_PARAMS" > "$SLURMKIT_CHECKPOINT_DIR/vars"
echo "task $SLURMKIT_SWEEP_INDEX running"
sleep 4
if [ "$2" = plain ] && [ "$4" = 2 ]; then echo "failing on purpose"; exit 7; fi
echo "task $SLURMKIT_SWEEP_INDEX done"
"""
FAST = {
    "fabric": "none",
    "preflight": {"allreduce": False},
    "requeue": {"recheck_on_failure": False},
    "time": "5",
    "device": "cpu",
}


@pytest.fixture
def cluster_env(devcluster, monkeypatch, tmp_path):
    """This process talks to the devcluster (the API runs in-process)."""
    for key, value in devcluster.env.items():
        if key.startswith(("SLURM", "PATH")):
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("SLURMKIT_CONFIG", str(devcluster.config_path))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(devcluster.shared_dir)
    return devcluster


def ssubmit(devcluster, tmp_path, *args, timeout=120):
    env = {"SLURMKIT_CONFIG": str(devcluster.config_path), "XDG_STATE_HOME": str(tmp_path / "state")}
    return devcluster.run([sys.executable, "-m", "slurmkit.cli.ssubmit", *args], env=env, timeout=timeout)


def _epoch(devcluster, array_id):
    res = devcluster.run(
        ["sacct", "-X", "-n", "-P", "-j", array_id, "--format=JobID,Start,End"],
        env={"SLURM_TIME_FORMAT": "%s"},
    )
    out = {}
    for line in res.stdout.split():
        jid, start, end = line.split("|")
        if "_" in jid and start.isdigit() and end.isdigit():
            out[int(jid.split("_")[1])] = (int(start), int(end))
    return out


def test_sweep_is_one_throttled_array_with_per_task_params_dirs_and_summaries(cluster_env, tmp_path):
    dc = cluster_env
    root = dc.shared_dir / f"api-sweep-{uuid.uuid4().hex[:8]}"
    spec_file = tmp_path / "sweep.yaml"
    spec_file.write_text(
        json.dumps(
            {
                "name": "api-sweep",
                "command": ["bash", "-c", TASK, "task"],
                "gpus_per_node": 1,  # a GPU job, so the epilog leaves an efficiency summary per task
                "nproc_per_node": 1,
                "checkpoint": {"dir": str(root) + "/{array_job_id}_{array_task_id}"},
                "workdir": str(dc.shared_dir),
                "output": str(root) + "/log-%A_%a.out",
                "sweep": {"grid": {"tag": ["plain"], "seed": [0, 1, 2]}, "max_parallel": 2},
                **FAST,
            }
        )
    )
    root.mkdir(mode=0o700)
    # --sweep replaces the tag axis (keeping its place): the grid becomes 2 x 3
    res = ssubmit(
        dc, tmp_path, str(spec_file), "--parsable", "--sweep", f"tag={json.dumps(['plain', HOSTILE])}"
    )
    assert res.returncode == 0, res.stderr
    array_id = res.stdout.strip()
    job = sk.Job(array_id)
    try:
        assert job.is_array
        final = job.wait(timeout=240, poll=1)
    finally:
        dc.run(["scancel", array_id])
    # the epilog writes each task's summary as the task ends: give the last ones a moment
    deadline = time.monotonic() + 60
    rows = job.status()
    while any(r.efficiency is None for r in rows) and time.monotonic() < deadline:
        time.sleep(2)
        rows = job.status()
    assert final == "FAILED"
    assert [r.index for r in rows] == [0, 1, 2, 3, 4, 5]
    states = [r.state for r in rows]
    assert states.count("COMPLETED") == 5 and states.count("FAILED") == 1, states
    failed = rows[2]  # tag=plain seed=2: the grid's order, last axis fastest
    assert (
        failed.state == "FAILED" and failed.exit_code == 1 and failed.params == {"tag": "plain", "seed": "2"}
    )
    assert "failing on purpose" in Path(failed.log).read_text(errors="replace")
    assert "training step ended with exit code 1" in Path(failed.log).read_text(errors="replace")
    assert job.exit_code == 1
    assert [t.job_id for t in job.tasks] == [f"{array_id}_{i}" for i in range(6)]
    assert sk.Job(f"{array_id}_2").state() == "FAILED" and sk.Job(f"{array_id}_2").exit_code == 1

    # at most 2 tasks at once (the %2 throttle), by sacct's start and end times
    spans = _epoch(dc, array_id)
    assert sorted(spans) == list(range(6))
    for t in range(min(s for s, _ in spans.values()), max(e for _, e in spans.values())):
        running = [i for i, (s, e) in spans.items() if s <= t < e]
        assert len(running) <= 2, f"{running} ran at once at {t}"

    expected = [{"tag": tag, "seed": str(seed)} for tag in ("plain", HOSTILE) for seed in range(3)]
    for r, params in zip(rows, expected):
        assert r.params == params
        # its own checkpoint directory, holding exactly its own arguments, each one whole
        ckpt = Path(r.checkpoint_dir)
        assert ckpt == root / f"{array_id}_{r.index}"
        argv = (ckpt / "argv").read_bytes().decode().split("\0")[:-1]
        assert argv == ["--tag", params["tag"], "--seed", params["seed"]]
        name, index, blob = (ckpt / "vars").read_bytes().decode().split("\0")[:-1]
        assert (name, index, json.loads(blob)) == (f"api-sweep-{r.index}", str(r.index), params)
        # its own log
        log = Path(r.log).read_text(errors="replace")
        assert r.log == str(root / f"log-{array_id}_{r.index}.out")
        assert f"task {r.index} running" in log
        assert f"sweep task {r.index} (api-sweep-{r.index})" in log
        # its own efficiency summary (the epilog's AdminComment, read like `ssubmit status` does)
        assert r.efficiency is not None and r.efficiency.job_id == r.job_id
        assert r.efficiency.source == "slurmkit", r.efficiency
    assert not list(dc.shared_dir.glob("PWNED*")) and not list(root.glob("**/PWNED*"))

    # the CLI's table: one row per task, the failed one with its exit code and parameters
    st = ssubmit(dc, tmp_path, "status", array_id)
    assert st.returncode == 0, st.stderr
    lines = st.stdout.splitlines()
    assert lines[0].split() == ["TASK", "STATE", "EXIT", "RESTARTS", "EFFICIENCY", "PARAMETERS"]
    assert len(lines) == 7
    assert lines[3].split()[:4] == ["2", "FAILED", "1:0", "0"] and lines[3].endswith("tag=plain seed=2")
    assert sum(line.split()[1] == "COMPLETED" for line in lines[1:]) == 5
    assert "\\n" in lines[4] and "line two" in lines[4]  # the newline shown escaped, on one line
    data = json.loads(ssubmit(dc, tmp_path, "status", array_id, "--json").stdout)
    assert [t["state"] for t in data["tasks"]].count("COMPLETED") == 5


def test_submit_and_wait_through_the_api_only(cluster_env, tmp_path):
    dc = cluster_env
    spec = sk.Spec.from_dict(
        {"name": "api-only", "command": ["bash", "-c", "echo from the api: $1", "x"], "args": ["a b"], **FAST}
    ).with_overrides({"env.GREETING": "hi there", "workdir": str(dc.shared_dir)})
    assert "#SBATCH --job-name=api-only" in spec.render().script
    job = sk.submit(spec)
    try:
        assert job.wait(timeout=120, poll=1) == "COMPLETED"
    finally:
        dc.run(["scancel", job.job_id])
    assert job.done() and job.exit_code == 0 and not job.is_array
    assert job.nodes in dc.nodes
    assert job.restarts == 0
    assert "from the api: a b" in job.logs(tail=50)
    assert job.efficiency() is None  # no GPUs: nothing to measure
    assert repr(job) == f"<slurmkit Job {job.job_id}: COMPLETED>"


def test_job_attaches_to_a_cli_submitted_job(cluster_env, tmp_path):
    dc = cluster_env
    spec_file = tmp_path / "cli.yaml"
    spec_file.write_text(
        json.dumps({"name": "cli-job", "command": ["bash", "-c", "sleep 2; echo cli job; exit 3"], **FAST})
    )
    res = ssubmit(dc, tmp_path, str(spec_file), "--parsable")
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    job = sk.Job(job_id)
    try:
        assert job.state() in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "FAILED")
        assert job.wait(timeout=120, poll=1) == "FAILED"
    finally:
        dc.run(["scancel", job_id])
    assert job.exit_code == 1 and job.done()  # torchrun's code for the command's 3
    assert "cli job" in job.logs()


#: a task that runs until asked to checkpoint (then "saves" and exits 0) or until the test says go
REQUEUE_TASK = r"""
if [ "$SLURMKIT_RESTART_COUNT" -gt 0 ]; then echo "resumed task $SLURMKIT_SWEEP_INDEX restart $SLURMKIT_RESTART_COUNT"; exit 0; fi
: > "$SLURMKIT_CHECKPOINT_DIR/started"
for i in $(seq 1 240); do
  if [ -e "$SLURMKIT_CHECKPOINT_NOW" ]; then echo "checkpoint saved"; exit 0; fi
  if [ -e "$GO_FILE" ]; then echo "finished"; exit 0; fi
  sleep 0.5
done
echo "never told"; exit 1
"""


def test_requeue_of_one_task_resumes_that_task_only(cluster_env, tmp_path):
    """USR2 to the array's meta task (raw job id = array id): only that task requeues; were the
    requeue addressed by the raw id, every task of the array would."""
    dc = cluster_env
    root = dc.shared_dir / f"api-requeue-{uuid.uuid4().hex[:8]}"
    root.mkdir(mode=0o700)
    go = root / "go"
    spec = sk.Spec.from_dict(
        {
            "name": "api-requeue",
            "command": ["bash", "-c", REQUEUE_TASK],
            "env": {"GO_FILE": str(go)},
            "checkpoint": {"dir": str(root) + "/{array_job_id}_{array_task_id}"},
            "output": str(root) + "/log-%A_%a.out",
            "sweep": {"list": [{"n": 0}, {"n": 1}]},
            **FAST,
        }
    )
    job = sk.submit(spec)
    array_id = job.job_id
    try:

        def both_started():
            return all((root / f"{array_id}_{i}" / "started").exists() for i in (0, 1))

        def logs():
            return "\n".join(p.read_text(errors="replace")[-1500:] for p in sorted(root.glob("log-*")))

        deadline = time.monotonic() + 120
        while not both_started():
            states = [r.state for r in job.status(efficiency=False)]
            assert time.monotonic() < deadline and "FAILED" not in states, f"{states}\n{logs()}"
            time.sleep(0.5)
        rows = job.status(efficiency=False)
        # the array's meta task keeps the array's id as its own job id
        meta = next(r for r in rows if r.raw_id == array_id)
        other = next(r for r in rows if r.index != meta.index)
        sk.Job(meta.job_id).cancel(signal="USR2")
        meta_log = Path(root / f"log-{array_id}_{meta.index}.out")
        deadline = time.monotonic() + 120
        while f"resumed task {meta.index} restart 1" not in meta_log.read_text(errors="replace"):
            assert time.monotonic() < deadline, meta_log.read_text(errors="replace")
            time.sleep(0.5)
        go.touch()
        assert job.wait(timeout=120, poll=1) == "COMPLETED"
    finally:
        dc.run(["scancel", array_id])
    rows = {r.index: r for r in job.status(efficiency=False)}
    assert rows[meta.index].restarts == 1 and rows[other.index].restarts == 0
    other_log = (root / f"log-{array_id}_{other.index}.out").read_text(errors="replace")
    assert "finished" in other_log and "resumed" not in other_log
    counts = json.loads((root / f"{array_id}_{meta.index}" / ".slurmkit" / "requeue-state.json").read_text())
    assert (counts["preempt"], counts["timeout"], counts["node"]) == (1, 0, 0)
    assert not (root / f"{array_id}_{other.index}" / ".slurmkit" / "requeue-state.json").exists()
