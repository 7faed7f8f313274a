"""The narrow, typed Slurm API the rest of slurmkit uses.

Everything goes through :func:`slurmkit.slurm.runner.run` (timeouts, errors that
name the command). Callers never build Slurm command lines themselves, so a pyslurm
backend could implement these functions later without touching them.

Binaries are found by :mod:`slurmkit.slurm.binaries` (``slurm.bin_dir`` of the site config,
then ``$PATH``, then the usual directories: Slurm's prolog and epilog run with no ``PATH``).
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

from slurmkit.errors import ExternalCommandError, SlurmCommandError
from slurmkit.slurm import binaries, runner
from slurmkit.slurm.parse import SACCT_DELIMITER, parse_parsable2

# configure() and binary() live in slurm.binaries (light enough for the hooks to apply the
# config without importing this module); they are part of this API too.
configure = binaries.configure
binary = binaries.binary


def call(
    name: str,
    args: Sequence[str],
    *,
    timeout: Optional[float] = None,
    input: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    check: bool = True,
) -> runner.Result:
    """Run one Slurm command through the shared runner.

    Every typed call below takes ``timeout`` (seconds) and passes it here: a hook with a
    budget (the prolog gate, the epilog) gives what it has left; ``None`` means the site
    config's ``slurm.timeout``."""
    return runner.run(
        [binary(name), *args],
        timeout=binaries.timeout() if timeout is None else timeout,
        input=input,
        env=env,
        check=check,
    )


# --------------------------------------------------------------------------- sbatch


def submit(
    script: str,
    args: Sequence[str] = (),
    *,
    env: Optional[Mapping[str, str]] = None,
    test_only: bool = False,
    timeout: Optional[float] = None,
) -> str:
    """Submit ``script`` (text, sent on stdin) with ``sbatch --parsable``; return the job id.

    With ``test_only`` runs ``sbatch --test-only`` and returns its message instead.
    """
    if test_only:
        res = call("sbatch", ["--test-only", *args], input=script, env=env, timeout=timeout)
        return (res.stderr or res.stdout).strip()
    res = call("sbatch", ["--parsable", *args], input=script, env=env, timeout=timeout)
    out = res.stdout.strip().splitlines()
    job = out[-1].split(";")[0].strip() if out else ""
    if not re.fullmatch(r"\d+", job):
        raise SlurmCommandError(
            res.argv,
            f"could not make sense of sbatch output {res.stdout.strip()!r}",
            returncode=res.returncode,
            stderr=res.stderr,
        )
    return job


# --------------------------------------------------------------------------- scontrol

_KV_SPLIT = re.compile(r"\s+(?=[A-Za-z][A-Za-z0-9_/:.]*=)")


def parse_scontrol_record(line: str) -> Dict[str, str]:
    """Parse one ``scontrol -o show ...`` record (``Key=Value Key=Value ...``).

    Values may contain spaces (``Reason=slurmkit:ECC gpu_ecc: ...``); a token only
    starts a new key when it looks like ``Word=``.
    """
    out: Dict[str, str] = {}
    for token in _KV_SPLIT.split(line.strip()):
        key, sep, value = token.partition("=")
        if sep:
            out[key] = value
    return out


def show_job(job_id: str, *, timeout: Optional[float] = None) -> Optional[Dict[str, str]]:
    """``scontrol -o show job``; ``None`` when Slurm no longer knows the job."""
    res = call("scontrol", ["-o", "show", "job", str(job_id)], check=False, timeout=timeout)
    if res.returncode != 0:
        if "Invalid job id" in res.stderr:
            return None
        raise SlurmCommandError(
            res.argv,
            f"`scontrol show job {job_id}` exited {res.returncode}: {runner.tail(res.stderr)}",
            returncode=res.returncode,
            stderr=res.stderr,
        )
    line = next((ln for ln in res.stdout.splitlines() if ln.strip()), "")
    return parse_scontrol_record(line) if line else None


def show_node(node: str, *, timeout: Optional[float] = None) -> Optional[Dict[str, str]]:
    """``scontrol -o show node``; ``None`` when scontrol fails (unknown node, controller down)."""
    res = call("scontrol", ["-o", "show", "node", node], check=False, timeout=timeout)
    if res.returncode != 0:
        return None
    line = next((ln for ln in res.stdout.splitlines() if ln.strip()), "")
    return parse_scontrol_record(line) if line else None


def drain_node(node: str, reason: str, *, timeout: Optional[float] = None) -> None:
    """Drain ``node`` with ``reason`` (Slurm stores it verbatim; it is one argv item).

    Unconditional: slurmkit's hooks and sweeps drain through
    :func:`slurmkit.slurm.drain.guarded_drain`, which keeps an admin's reason."""
    call("scontrol", ["update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"], timeout=timeout)


def resume_node(node: str, *, timeout: Optional[float] = None) -> None:
    call("scontrol", ["update", f"NodeName={node}", "State=RESUME"], timeout=timeout)


def requeue_job(job_id: str, hold: bool = False, *, timeout: Optional[float] = None) -> None:
    """``scontrol requeue`` (``requeuehold`` with ``hold``)."""
    call("scontrol", ["requeuehold" if hold else "requeue", str(job_id)], timeout=timeout)


def release_job(job_id: str, *, timeout: Optional[float] = None) -> None:
    """``scontrol release``: let a held job be scheduled again."""
    call("scontrol", ["release", str(job_id)], timeout=timeout)


def update_job(job_id: str, *, timeout: Optional[float] = None, **fields: str) -> None:
    """``scontrol update JobId=<id> Key=Value ...`` (each pair one argv item)."""
    call("scontrol", ["update", f"JobId={job_id}"] + [f"{k}={v}" for k, v in fields.items()], timeout=timeout)


# --------------------------------------------------------------------------- scancel


def cancel(
    job_id: str, signal: Optional[str] = None, batch_only: bool = False, *, timeout: Optional[float] = None
) -> None:
    args = []
    if signal:
        args.append(f"--signal={signal}")
    if batch_only:
        args.append("--batch")
    call("scancel", [*args, str(job_id)], timeout=timeout)


# --------------------------------------------------------------------------- sinfo / squeue

NODE_FIELDS = ("name", "state", "gres", "partition", "cpus", "memory", "reason")


def nodes(partition: Optional[str] = None, *, timeout: Optional[float] = None) -> List[Dict[str, str]]:
    """One dict per node and partition from ``sinfo -N`` (a node in two partitions
    appears twice; use :func:`node_states` for one row per node)."""
    args = ["-h", "-N", "-o", "%N|%T|%G|%P|%c|%m|%E"]
    if partition:
        args += ["-p", partition]
    res = call("sinfo", args, timeout=timeout)
    return parse_parsable2(res.stdout, NODE_FIELDS, free_field="reason")


def node_states(partition: Optional[str] = None, *, timeout: Optional[float] = None) -> Dict[str, str]:
    """``{node: state}`` with one entry per node (``idle``, ``mixed``, ``drained`` ...)."""
    return {row["name"]: row["state"] for row in nodes(partition, timeout=timeout)}


JOB_FIELDS = ("job_id", "raw_id", "state", "user", "partition", "nodelist", "reason", "name")


def jobs(
    *,
    user: Optional[str] = None,
    job_ids: Iterable[str] = (),
    states: Iterable[str] = (),
    node: Optional[str] = None,
    array_tasks: bool = False,
    timeout: Optional[float] = None,
) -> List[Dict[str, str]]:
    """Queued and running jobs from ``squeue`` (``%i`` gives array tasks as ``123_4``; ``%A``,
    the ``raw_id``, is each task's own job id, the array's id for the task that keeps it).

    ``array_tasks`` (``squeue -r``) lists every pending array task on its own row instead
    of one ``123_[4-9%2]`` row for all of them."""
    args = ["-h", "-o", "%i|%A|%T|%u|%P|%N|%r|%j"]
    if array_tasks:
        args.append("-r")
    if user:
        args += ["-u", user]
    ids = list(job_ids)
    if ids:
        args += ["-j", ",".join(ids)]
    st = list(states)
    if st:
        args += ["-t", ",".join(st)]
    if node:
        args += ["-w", node]
    res = call("squeue", args, check=False, timeout=timeout)
    if res.returncode != 0:
        if ids and "Invalid job id" in res.stderr:
            return []
        raise SlurmCommandError(
            res.argv,
            f"`squeue` exited {res.returncode}: {runner.tail(res.stderr)}",
            returncode=res.returncode,
            stderr=res.stderr,
        )
    return parse_parsable2(res.stdout, JOB_FIELDS, free_field="name")


# --------------------------------------------------------------------------- sacct


def sacct(
    fields: Sequence[str],
    args: Sequence[str] = (),
    *,
    timeout: Optional[float] = None,
    free_field: Optional[str] = None,
) -> List[Dict[str, str]]:
    """Rows of ``sacct --parsable2 --noheader --format=...`` as dicts.

    A unit-separator delimiter is used, so a ``|`` in a job name cannot shift fields.
    """
    argv = [
        "--parsable2",
        "--noheader",
        f"--delimiter={SACCT_DELIMITER}",
        "--format=" + ",".join(fields),
        *args,
    ]
    res = run_sacct(argv, timeout=timeout)
    return parse_parsable2(res.stdout, list(fields), free_field=free_field, sep=SACCT_DELIMITER)


#: what a failed sacct call's message ends with when its stderr points at the accounting daemon
SLURMDBD_HINT = " (is slurmdbd running and reachable?)"


def _points_at_slurmdbd(stderr: str) -> bool:
    low = stderr.lower()
    return "database" in low or "slurmdbd" in low or "connection refused" in low


def run_sacct(
    args: Sequence[str], *, env: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None
) -> runner.Result:
    """The one place sacct is run (:func:`sacct`, the report's queries): a failure whose stderr
    points at the accounting database (slurmdbd down or unreachable) says so, with
    :data:`SLURMDBD_HINT`, and so does an exit 0 whose stderr says sacct could not talk to the
    database (some releases print an error and an empty table)."""
    try:
        res = call("sacct", args, env=env, timeout=timeout)
    except ExternalCommandError as exc:  # (a timeout or a missing sacct too, by their message)
        if not _points_at_slurmdbd(exc.stderr or str(exc)):
            raise
        raise type(exc)(
            exc.argv, f"{exc}{SLURMDBD_HINT}", returncode=exc.returncode, stderr=exc.stderr
        ) from None
    err = res.stderr.lower()
    if "problem talking to the database" in err or ("slurmdbd" in err and "error" in err):
        raise SlurmCommandError(
            res.argv,
            f"sacct could not reach the accounting database: {runner.tail(res.stderr)}{SLURMDBD_HINT}",
            returncode=res.returncode,
            stderr=res.stderr,
        )
    return res


def sacctmgr(args: Sequence[str], *, check: bool = True, timeout: Optional[float] = None) -> runner.Result:
    return call("sacctmgr", ["-i", "-P", *args], check=check, timeout=timeout)
