"""Every sacct caller says "is slurmdbd running and reachable?" when sacct cannot reach the
accounting database (issue 26: the hint was given by the report's own sacct call only; the
follow path and the Python API's job status called sacct without it). The hint lives in the
slurm layer's one sacct call, :func:`slurmkit.slurm.client.run_sacct`.

Error-path unit tests: sacct is replaced by a fake runner (no Slurm needed).
"""

from __future__ import annotations

import pytest

from slurmkit.errors import ExternalCommandError, SlurmCommandError
from slurmkit.slurm import client, runner

HINT = "is slurmdbd running and reachable?"


@pytest.fixture
def fake_sacct():
    """Make every command exit ``rc`` with ``stderr`` (squeue too: it knows no job)."""
    calls = []

    def install(rc, stderr, stdout=""):
        def fake(argv, timeout, input, env):
            calls.append(list(argv))
            if argv[0].endswith("squeue"):
                return runner.Result(list(argv), 0, "", "", 0.01)
            return runner.Result(list(argv), rc, stdout, stderr, 0.01)

        runner.set_runner(fake)
        return calls

    previous = runner.set_runner(None)
    runner.set_runner(previous)
    yield install
    runner.set_runner(previous)


DOWN = [
    (1, "sacct: error: slurmdbd: Connection refused"),
    (1, "sacct: error: Problem talking to the database: Connection refused"),
    (0, "sacct: error: Problem talking to the database: Connection refused"),
]


@pytest.mark.parametrize("rc, stderr", DOWN)
def test_the_typed_sacct_call_gives_the_hint(fake_sacct, rc, stderr):
    fake_sacct(rc, stderr)
    with pytest.raises(SlurmCommandError, match=HINT) as info:
        client.sacct(["JobID", "State"], ["-j", "12"])
    assert info.value.exit_code == 3


@pytest.mark.parametrize("rc, stderr", DOWN)
def test_the_follow_path_gives_the_hint(fake_sacct, rc, stderr):
    from slurmkit.submit import follow

    calls = fake_sacct(rc, stderr)
    with pytest.raises(SlurmCommandError, match=HINT):
        follow.job_state("12")
    assert any(c[0].endswith("sacct") for c in calls)


@pytest.mark.parametrize("rc, stderr", DOWN)
def test_the_api_job_status_gives_the_hint(fake_sacct, tmp_path, rc, stderr):
    from slurmkit.api import Job

    fake_sacct(rc, stderr)
    job = Job("12", site={"record_dir": str(tmp_path)}, record={})
    with pytest.raises(SlurmCommandError, match=HINT):
        job.status(efficiency=False)


def test_the_report_query_gives_the_hint_once(fake_sacct):
    from slurmkit.report import sacct
    from slurmkit.report.window import resolve_window

    fake_sacct(1, "sacct: error: slurmdbd: Connection refused")
    query = sacct.build_query(resolve_window(last="1d"))
    with pytest.raises(SlurmCommandError) as info:
        sacct.call_sacct(query, timeout=5)
    assert str(info.value).count(HINT) == 1


def test_other_failures_get_no_hint(fake_sacct):
    fake_sacct(1, "sacct: error: Invalid field requested: Bogus")
    with pytest.raises(SlurmCommandError) as info:
        client.sacct(["Bogus"])
    assert HINT not in str(info.value)


def test_a_clean_answer_is_parsed(fake_sacct):
    fake_sacct(0, "", stdout="12\x1fCOMPLETED\n")
    assert client.sacct(["JobID", "State"], ["-j", "12"]) == [{"JobID": "12", "State": "COMPLETED"}]


def test_a_missing_sacct_stays_a_missing_sacct(monkeypatch):
    def missing(argv, timeout, input, env):
        raise ExternalCommandError(argv, "sacct: command not found", returncode=127)

    previous = runner.set_runner(missing)
    try:
        with pytest.raises(ExternalCommandError) as info:
            client.sacct(["JobID"])
    finally:
        runner.set_runner(previous)
    assert HINT not in str(info.value)
