"""One runner for every external command slurmkit calls.

Why one runner: every call gets a timeout (a hung ``sacct`` against a dead slurmdbd
must not hang a cron job or a prolog), no call goes through a shell, and every failure
becomes one exception type whose message names the command, its exit code and the tail
of its stderr. Tests of parsing and error paths swap the runner with
:func:`set_runner`; integration tests use the real one against the devcluster.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from slurmkit.errors import CommandNotFound, CommandTimeout, ExternalCommandError, SlurmCommandError
from slurmkit.slurm import binaries

#: Default per-call timeout in seconds. Slurm commands answer in well under a second on
#: a healthy controller; 30 s leaves room for a busy one without hanging forever.
DEFAULT_TIMEOUT = binaries.DEFAULT_TIMEOUT

SLURM_COMMANDS = frozenset(
    {
        "sbatch",
        "scontrol",
        "squeue",
        "sinfo",
        "sacct",
        "sacctmgr",
        "scancel",
        "srun",
        "salloc",
        "sprio",
        "sshare",
        "sreport",
    }
)


@dataclass
class Result:
    """What a finished command gave back."""

    argv: list
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def tail(text: str, lines: int = 3, chars: int = 400) -> str:
    """The last lines of a command's output, joined into one line for an error message."""
    tail = " | ".join(line.strip() for line in text.strip().splitlines()[-lines:] if line.strip())
    return tail[-chars:]


def _real_run(
    argv: Sequence[str], timeout: float, input: Optional[str], env: Optional[Mapping[str, str]]
) -> Result:
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise CommandNotFound(
            argv, f"{argv[0]}: command not found (is it installed and on PATH?)", returncode=127
        ) from None
    except PermissionError as exc:
        raise ExternalCommandError(
            argv, f"{argv[0]}: cannot execute: {exc.strerror}", returncode=126
        ) from None
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        # Kill the whole process group: some Slurm commands fork helpers.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        raise CommandTimeout(
            argv,
            f"`{shlex.join(argv)}` timed out after {timeout:g}s" + (f": {tail(err)}" if err.strip() else ""),
            returncode=None,
            stderr=err,
        ) from None
    return Result(list(argv), proc.returncode, out, err, time.monotonic() - start)


RunnerFn = Callable[[Sequence[str], float, Optional[str], Optional[Mapping[str, str]]], Result]
_runner: RunnerFn = _real_run


def set_runner(fn: Optional[RunnerFn]) -> RunnerFn:
    """Replace the process runner (unit tests only); ``None`` restores the real one.

    Returns the previous runner so a test can put it back.
    """
    global _runner
    previous = _runner
    _runner = fn if fn is not None else _real_run
    return previous


def spawn(
    argv: Sequence[str],
    *,
    env: Optional[Mapping[str, str]] = None,
    detach: bool = False,
    stdin=None,
    stdout=None,
    stderr=None,
) -> "subprocess.Popen[bytes]":
    """Start a process that outlives this call and return it (never through a shell).

    For the few processes that are not commands to wait for: the job's own command
    (its time limit is Slurm's to enforce), a helper that must survive its parent, and
    a daemon that does not fork itself. No timeout here: the caller owns the process's
    lifetime. ``detach`` puts it in its own session, so signals to our process group do
    not reach it. The streams are inherited unless given (``subprocess.DEVNULL``, a file).
    A missing program raises :class:`CommandNotFound`, as :func:`run` does.
    """
    if not argv:
        raise ValueError("spawn() needs a command")
    try:
        return subprocess.Popen(
            list(argv),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=dict(env) if env is not None else None,
            start_new_session=detach,
            close_fds=True,
        )
    except FileNotFoundError:
        raise CommandNotFound(
            argv, f"{argv[0]}: command not found (is it installed and on PATH?)", returncode=127
        ) from None
    except PermissionError as exc:
        raise ExternalCommandError(
            argv, f"{argv[0]}: cannot execute: {exc.strerror}", returncode=126
        ) from None


def run(
    argv: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    input: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    check: bool = True,
) -> Result:
    """Run ``argv`` (never through a shell) with a timeout.

    With ``check`` (the default) a non-zero exit raises :class:`SlurmCommandError` for
    Slurm commands and :class:`ExternalCommandError` otherwise, with the command, exit
    code and stderr tail in the message.
    """
    if not argv:
        raise ValueError("run() needs a command")
    result = _runner(list(argv), float(timeout), input, env)
    if check and result.returncode != 0:
        cls = SlurmCommandError if os.path.basename(argv[0]) in SLURM_COMMANDS else ExternalCommandError
        detail = tail(result.stderr) or tail(result.stdout) or "no output"
        raise cls(
            argv,
            f"`{shlex.join(argv)}` exited {result.returncode}: {detail}",
            returncode=result.returncode,
            stderr=result.stderr,
        )
    return result
