"""slurmkit.submit.follow, the job-state polling behind ``ssubmit --wait`` and ``logs -f``, driven
without click: a scripted squeue/sacct answers one poll at a time (control flow only; the real
Slurm path is tests/integration/test_ssubmit.py)."""

from __future__ import annotations

import pytest

from slurmkit.slurm import runner
from slurmkit.slurm.runner import Result
from slurmkit.submit import follow


class ScriptedSlurm:
    """squeue answers the queued states in turn (then nothing: the job left the queue);
    sacct answers ``final`` once the queue is empty (``None``: no accounting record)."""

    def __init__(self, queued, final="COMPLETED|0:0"):
        self.queued = list(queued)
        self.final = final
        self.calls = []
        self.on_squeue = lambda: None  # what the job does between two polls

    def __call__(self, argv, timeout, input, env):
        name = argv[0].rsplit("/", 1)[-1]
        self.calls.append(name)
        if name == "squeue":
            self.on_squeue()
            if self.queued:
                state = self.queued.pop(0)
                return Result(argv, 0, f"4242|4242|{state}|root|debug|node[1-2]|None|job\n", "", 0)
            return Result(argv, 0, "", "", 0)
        if name == "sacct":
            if self.final is None:
                return Result(argv, 0, "", "", 0)
            state, code = self.final.split("|")
            return Result(argv, 0, f"4242\x1f{state}\x1f{code}\x1fnode[1-2]\n", "", 0)
        return Result(argv, 127, "", "unexpected", 0)


@pytest.fixture
def slurm():
    made = []

    def install(queued, final="COMPLETED|0:0"):
        fake = ScriptedSlurm(queued, final)
        made.append(runner.set_runner(fake))
        return fake

    yield install
    for prev in made[:1]:
        runner.set_runner(prev)


def test_wait_reports_each_state_once_and_returns_the_accounting_record(slurm):
    slurm(["PENDING", "PENDING", "RUNNING", "RUNNING"], final="FAILED|7:0")
    seen = []
    state = follow.wait_for_job("4242", poll=0, timeout=30, on_change=seen.append)
    assert [s["state"] for s in seen] == ["PENDING", "RUNNING", "FAILED"]
    assert state["source"] == "sacct" and state["exit_code"] == "7:0"
    assert follow.exit_code_from(state) == 7
    assert follow.describe("4242", seen[1]) == "ssubmit: job 4242: RUNNING on node[1-2]"


def test_wait_gives_up_on_a_job_slurm_never_heard_of(slurm):
    fake = slurm([], final=None)
    state = follow.wait_for_job("4242", poll=0, timeout=30)
    assert state["source"] == "none"
    assert fake.calls.count("sacct") == follow.MAX_MISSING_POLLS + 1


def test_wait_timeout_raises_with_exit_code_124(slurm):
    slurm(["RUNNING"] * 10**6)
    with pytest.raises(follow.WaitTimeout, match="still RUNNING") as err:
        follow.wait_for_job("4242", poll=0.01, timeout=0.2)
    assert err.value.exit_code == 124  # not 4: that is a devcluster failure


def test_follow_log_yields_new_text_until_the_job_ends_and_keeps_its_last_lines(slurm, tmp_path):
    log = tmp_path / "job.out"
    log.write_text("written before following began\n")
    fake = slurm(["RUNNING"] * 3, final="COMPLETED|0:0")

    def job_writes():  # between two polls the job writes a line; its last one just before it ends
        with open(log, "a") as fh:
            fh.write(f"poll {fake.calls.count('squeue')}\n")

    fake.on_squeue = job_writes
    chunks = list(follow.follow_log(str(log), "4242", poll=0))
    assert "".join(chunks) == "poll 1\npoll 2\npoll 3\npoll 4\n"
    assert fake.calls[-1] == "sacct"
