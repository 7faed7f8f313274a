"""The one runner: timeouts, missing binaries and failures named with their stderr."""

import sys

import pytest

from slurmkit.errors import CommandNotFound, CommandTimeout, ExternalCommandError, SlurmCommandError
from slurmkit.slurm import client, runner


def test_success_returns_output():
    res = runner.run([sys.executable, "-c", "print('hi')"], timeout=10)
    assert res.returncode == 0 and res.stdout.strip() == "hi"


def test_failure_names_command_exit_code_and_stderr_tail():
    with pytest.raises(ExternalCommandError) as exc:
        runner.run([sys.executable, "-c", "import sys; sys.stderr.write('one\\ntwo\\nboom\\n'); sys.exit(3)"])
    msg = str(exc.value)
    assert "exited 3" in msg and "boom" in msg and sys.executable in msg
    assert exc.value.exit_code == 3


def test_timeout_kills_and_says_so():
    with pytest.raises(CommandTimeout, match="timed out after 0.5s"):
        runner.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)


def test_missing_binary():
    with pytest.raises(CommandNotFound, match="no-such-binary-xyz: command not found"):
        runner.run(["no-such-binary-xyz"])


def test_slurm_failures_are_slurm_errors(monkeypatch):
    def fake(argv, timeout, input, env):
        return runner.Result(list(argv), 1, "", "sbatch: error: Batch job submission failed: Invalid account\n", 0.01)
    prev = runner.set_runner(fake)
    try:
        with pytest.raises(SlurmCommandError, match="Invalid account") as exc:
            client.submit("#!/bin/sh\ntrue\n", ["-A", "nope"])
        assert exc.value.returncode == 1
    finally:
        runner.set_runner(prev)


def test_unparsable_sbatch_output_is_reported(monkeypatch):
    prev = runner.set_runner(lambda argv, t, i, e: runner.Result(list(argv), 0, "Submitted batch job\n", "", 0))
    try:
        with pytest.raises(SlurmCommandError, match="could not make sense of sbatch output"):
            client.submit("#!/bin/sh\n")
    finally:
        runner.set_runner(prev)


def test_scontrol_record_with_spaces_in_values():
    rec = client.parse_scontrol_record(
        "NodeName=node2 Arch=x86_64 State=IDLE+DRAIN Reason=slurmkit:GPU_ECC gpu_ecc: GPU 3 has 2 DBE "
        "[root@2026-11-29T14:00:00] Comment=(null)")
    assert rec["NodeName"] == "node2"
    assert rec["Reason"] == "slurmkit:GPU_ECC gpu_ecc: GPU 3 has 2 DBE [root@2026-11-29T14:00:00]"
    assert rec["Comment"] == "(null)"
