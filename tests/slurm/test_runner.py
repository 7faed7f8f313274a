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
        return runner.Result(
            list(argv), 1, "", "sbatch: error: Batch job submission failed: Invalid account\n", 0.01
        )

    prev = runner.set_runner(fake)
    try:
        with pytest.raises(SlurmCommandError, match="Invalid account") as exc:
            client.submit("#!/bin/sh\ntrue\n", ["-A", "nope"])
        assert exc.value.returncode == 1
    finally:
        runner.set_runner(prev)


def test_unparsable_sbatch_output_is_reported(monkeypatch):
    prev = runner.set_runner(
        lambda argv, t, i, e: runner.Result(list(argv), 0, "Submitted batch job\n", "", 0)
    )
    try:
        with pytest.raises(SlurmCommandError, match="could not make sense of sbatch output"):
            client.submit("#!/bin/sh\n")
    finally:
        runner.set_runner(prev)


def test_scontrol_record_with_spaces_in_values():
    rec = client.parse_scontrol_record(
        "NodeName=node2 Arch=x86_64 State=IDLE+DRAIN Reason=slurmkit:GPU_ECC gpu_ecc: GPU 3 has 2 DBE "
        "[root@2026-11-29T14:00:00] Comment=(null)"
    )
    assert rec["NodeName"] == "node2"
    assert rec["Reason"] == "slurmkit:GPU_ECC gpu_ecc: GPU 3 has 2 DBE [root@2026-11-29T14:00:00]"
    assert rec["Comment"] == "(null)"


def test_every_typed_client_call_takes_a_timeout():
    """The gate and jobside pass their own budgets; each call must reach the runner with it."""
    seen = []

    def fake(argv, timeout, input, env):
        seen.append((argv[0].rsplit("/", 1)[-1], timeout))
        out = "1\n" if argv[0].endswith("sbatch") else ""
        return runner.Result(list(argv), 0, out, "", 0)

    prev = runner.set_runner(fake)
    try:
        client.submit("#!/bin/sh\n", timeout=1.5)
        client.show_job("7", timeout=2.5)
        client.show_node("n1", timeout=3.5)
        client.drain_node("n1", "slurmkit:X", timeout=4.5)
        client.resume_node("n1", timeout=5.5)
        client.requeue_job("7", hold=True, timeout=6.5)
        client.release_job("7", timeout=7.5)
        client.update_job("7", ExcNodeList="n1", timeout=8.5)
        client.cancel("7", timeout=9.5)
        client.node_states(timeout=10.5)
        client.jobs(timeout=11.5)
        client.sacct(["JobID"], timeout=12.5)
        client.sacctmgr(["show", "cluster"], timeout=13.5)
    finally:
        runner.set_runner(prev)
    assert [t for _, t in seen] == [1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5]


def test_spawn_starts_without_waiting_and_names_a_missing_binary():
    proc = runner.spawn([sys.executable, "-c", "import sys; sys.exit(4)"], detach=True)
    assert proc.wait(timeout=30) == 4
    with pytest.raises(CommandNotFound, match="no-such-binary-xyz: command not found"):
        runner.spawn(["no-such-binary-xyz"])


def test_devcluster_commands_go_through_the_runner():
    """A hung setup command is a DevclusterError (exit 4) naming it; a hung readiness probe
    is "not ready yet" - both only if devcluster uses the shared runner."""
    from slurmkit.devcluster import cluster
    from slurmkit.errors import DevclusterError

    calls = []

    def hung(argv, timeout, input, env):
        calls.append((list(argv), timeout))
        raise CommandTimeout(argv, f"`{argv[0]}` timed out after {timeout:g}s")

    prev = runner.set_runner(hung)
    try:
        # A harmless command: were it run for real (not through the runner), it would succeed.
        with pytest.raises(DevclusterError, match="slurmctld timed out after 30s; read /x.log") as exc:
            cluster._run([sys.executable, "-c", "pass"], timeout=30, what="slurmctld", log="/x.log")
        assert exc.value.exit_code == 4
        assert cluster._succeeds([sys.executable, "-c", "pass"], timeout=10) is False
    finally:
        runner.set_runner(prev)
    assert [t for _, t in calls] == [30.0, 10.0]
