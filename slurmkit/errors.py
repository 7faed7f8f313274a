"""The small exception hierarchy every slurmkit command maps to an exit code.

User mistakes (a bad spec, a bad flag) and environment failures (a Slurm command that
failed or timed out) are different problems for the person reading the message, so
they get different exit codes. The CLI layer catches :class:`SlurmkitError`, prints its
one-line message on stderr and exits with ``exit_code``; nothing here prints a
traceback for a user mistake.

=========  =====================================================================
exit code  meaning
=========  =====================================================================
0          success
1          the job or check failed (``ssubmit --wait``, ``health run`` warn)
2          usage, config or spec error: nothing was submitted or changed
3          a Slurm command (or other external command) failed or timed out
4          devcluster could not be brought up (a daemon failed to start)
124        ``ssubmit --wait`` gave up after ``--wait-timeout``; the job keeps running
           (GNU ``timeout``'s code for "timed out")
70         an internal error (a slurmkit bug)
130        interrupted by Ctrl-C (SIGINT; 128 + 2, as a shell reports it)
=========  =====================================================================

Health commands use Nagios-style codes instead (0 ok, 1 warn, 2 fail, 3 unknown);
see :mod:`slurmkit.health`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Sequence


class SlurmkitError(Exception):
    """Base class: a failure with a one-line message and an exit code."""

    exit_code = 1

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:  # one line, always
        return self.message


class UsageError(SlurmkitError):
    """The user asked for something invalid (flag, argument)."""

    exit_code = 2


class ConfigError(UsageError):
    """A config file or job spec is invalid.

    The message carries the file, the line (when known) and the key path, e.g.
    ``train.yaml:12: requeue.max_retries: expected an integer >= 0, got -1``.
    """

    def __init__(
        self, message: str, *, path: str | None = None, line: int | None = None, key: str | None = None
    ):
        prefix = ""
        if path:
            prefix = f"{path}:{line}: " if line else f"{path}: "
        if key:
            prefix += f"{key}: "
        super().__init__(prefix + message)
        self.path, self.line, self.key = path, line, key


class ExternalCommandError(SlurmkitError):
    """An external command failed, timed out or is missing.

    The message names the command, its exit code and the tail of its stderr, which is
    usually enough to act on without re-running it by hand.
    """

    exit_code = 3

    def __init__(self, argv: Sequence[str], message: str, *, returncode: int | None = None, stderr: str = ""):
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(message)


class SlurmCommandError(ExternalCommandError):
    """A Slurm CLI call (sbatch, scontrol, squeue, sinfo, sacct, sacctmgr) failed."""


class CommandTimeout(ExternalCommandError):
    """An external command ran past its timeout and was killed."""


class CommandNotFound(ExternalCommandError):
    """The binary is not installed or not on PATH."""


class DevclusterError(SlurmkitError):
    """The local development cluster could not be started or stopped."""

    exit_code = 4


class WaitTimeout(SlurmkitError):
    """``ssubmit --wait`` ran past ``--wait-timeout``; the job itself is untouched."""

    exit_code = 124
