"""The job environment Slurm gives a hook or a task, read in one place, and which node this is.

Every ``SLURM_*`` variable slurmkit reads is read here, by :meth:`JobEnv.from_env`,
with the spellings Slurm uses in each context (https://slurm.schedmd.com/prolog_epilog.html
lists what the Prolog and Epilog see; https://slurm.schedmd.com/sbatch.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES
what a job sees): ``SLURM_JOB_ID`` (``SLURM_JOBID`` in older releases), ``SLURM_NODELIST``
in the epilog and ``SLURM_JOB_NODELIST`` elsewhere.

A value that does not parse (a uid that is not a number, a start time that is not a finite
number) reads as ``None``: the environment is Slurm's in a hook, but a user's in a job, and
bad text must not crash a hook. Which variables a *user* can set is the caller's concern:
the job's uid in the prolog comes from slurmd, the one in a job's own shell from the user.
"""

from __future__ import annotations

import os

from slurmkit.chars import ASCII_LETTERS, DIGITS, NAME_CHARS, only
from slurmkit.values import FrozenValue, is_finite

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Mapping, Optional

#: Where Slurm keeps slurm.conf when ``SLURM_CONF`` is unset (the packages' default).
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"


def _int(text: Optional[str]) -> Optional[int]:
    text = (text or "").strip()
    return int(text) if text.isdigit() else None


def _finite(text: Optional[str]) -> Optional[float]:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and is_finite(value) else None


class JobEnv(FrozenValue):
    """What Slurm's environment says about the job and the node (``None``: not said)."""

    job_id: Optional[str]  # SLURM_JOB_ID, else SLURM_JOBID
    job_uid: Optional[int]  # SLURM_JOB_UID
    job_user: Optional[str]  # SLURM_JOB_USER
    job_gpus: Optional[str]  # SLURM_JOB_GPUS as written (host numbering)
    node_name: Optional[str]  # SLURMD_NODENAME: this slurmd's NodeName
    nodelist: Optional[str]  # SLURM_NODELIST (epilog), else SLURM_JOB_NODELIST
    start_time: Optional[float]  # SLURM_JOB_START_TIME (epoch seconds)
    array_job_id: Optional[str]  # SLURM_ARRAY_JOB_ID
    array_task_id: Optional[str]  # SLURM_ARRAY_TASK_ID
    restart_count: Optional[int]  # SLURM_JOB_RESTART_COUNT (requeues so far)
    slurm_conf: Optional[str]  # SLURM_CONF
    procid: Optional[int]  # SLURM_PROCID (a task's global rank)
    ntasks: Optional[int]  # SLURM_NTASKS
    localid: Optional[int]  # SLURM_LOCALID (a task's rank on its node)

    def __init__(
        self,
        job_id: Optional[str] = None,
        job_uid: Optional[int] = None,
        job_user: Optional[str] = None,
        job_gpus: Optional[str] = None,
        node_name: Optional[str] = None,
        nodelist: Optional[str] = None,
        start_time: Optional[float] = None,
        array_job_id: Optional[str] = None,
        array_task_id: Optional[str] = None,
        restart_count: Optional[int] = None,
        slurm_conf: Optional[str] = None,
        procid: Optional[int] = None,
        ntasks: Optional[int] = None,
        localid: Optional[int] = None,
    ) -> None:
        self._set(
            job_id=job_id,
            job_uid=job_uid,
            job_user=job_user,
            job_gpus=job_gpus,
            node_name=node_name,
            nodelist=nodelist,
            start_time=start_time,
            array_job_id=array_job_id,
            array_task_id=array_task_id,
            restart_count=restart_count,
            slurm_conf=slurm_conf,
            procid=procid,
            ntasks=ntasks,
            localid=localid,
        )

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "JobEnv":
        """Read ``env`` (default ``os.environ``)."""
        env = os.environ if env is None else env

        def text(*names: str) -> Optional[str]:
            for name in names:
                value = env.get(name)
                if value:
                    return value
            return None

        return cls(
            job_id=text("SLURM_JOB_ID", "SLURM_JOBID"),
            job_uid=_int(env.get("SLURM_JOB_UID")),
            job_user=text("SLURM_JOB_USER"),
            job_gpus=env.get("SLURM_JOB_GPUS"),
            node_name=text("SLURMD_NODENAME"),
            nodelist=text("SLURM_NODELIST", "SLURM_JOB_NODELIST"),
            start_time=_finite(env.get("SLURM_JOB_START_TIME")),
            array_job_id=text("SLURM_ARRAY_JOB_ID"),
            array_task_id=text("SLURM_ARRAY_TASK_ID"),
            restart_count=_int(env.get("SLURM_JOB_RESTART_COUNT")),
            slurm_conf=text("SLURM_CONF"),
            procid=_int(env.get("SLURM_PROCID")),
            ntasks=_int(env.get("SLURM_NTASKS")),
            localid=_int(env.get("SLURM_LOCALID")),
        )

    @property
    def conf_path(self) -> str:
        """slurm.conf's path: ``SLURM_CONF`` or Slurm's default."""
        return self.slurm_conf or DEFAULT_SLURM_CONF

    def conf_file(self, name: str) -> str:
        """A file next to slurm.conf (``gres.conf``, ``topology.conf``), where Slurm looks for it."""
        return os.path.join(os.path.dirname(self.conf_path), name)

    @property
    def job_ref(self) -> Optional[str]:
        """How accounting names the job: ``<array job>_<task>`` for an array's task whose
        raw id is the array's id (addressing that id would address every task), else the job id."""
        array, task = self.array_job_id or "", self.array_task_id or ""
        if array.isdigit() and task.isdigit() and array == self.job_id:
            return f"{array}_{task}"
        return self.job_id


def this_node(env: Optional[Mapping[str, str]] = None) -> str:
    """This node's Slurm name: ``SLURMD_NODENAME`` when set, else the short hostname.

    The rule is Slurm's: a node's NodeName is "typically the string that ``/bin/hostname -s``
    returns" (slurm.conf(5), https://slurm.schedmd.com/slurm.conf.html#OPT_NodeName), and a
    slurmd started with ``-N`` (several slurmd on one host, as on the devcluster) passes its
    own name to the hooks as ``SLURMD_NODENAME``, so there the hostname says nothing."""
    return JobEnv.from_env(env).node_name or os.uname().nodename.split(".")[0]


def is_this_node(name: str, env: Optional[Mapping[str, str]] = None) -> bool:
    """Is ``name`` the Slurm node this process runs on?

    With ``SLURMD_NODENAME`` set only that name is (a host running two slurmd is neither of
    them by its hostname). Without it, the short hostname or the full one: slurmd finds its
    own NodeName the same way, trying the full hostname and then the short one."""
    given = JobEnv.from_env(env).node_name
    if given:
        return name == given
    full = os.uname().nodename
    return bool(name) and name in (full, full.split(".")[0])


_NODE_NAME_FIRST = frozenset(ASCII_LETTERS + DIGITS)


def is_node_name(name: object) -> bool:
    """Whether ``name`` is a node name slurmkit uses in file and cgroup paths: host-name
    characters, ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``, the whole string (so never ``..``, a
    slash or a newline)."""
    return isinstance(name, str) and only(name, NAME_CHARS, _NODE_NAME_FIRST, longest=128)
