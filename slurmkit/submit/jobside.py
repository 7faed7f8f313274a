"""Commands the rendered batch script runs inside the job.

``python -m slurmkit.submit.jobside <command>``:

* ``resolve-head NODE`` - print an IPv4 address of NODE that other nodes can reach;
  exit 1 naming the problem when it only resolves to loopback (the classic "every
  node rendezvoused with itself" failure).
* ``detect --out DIR`` - on every node (one srun task each): read the InfiniBand
  ports from sysfs and write ``DIR/<node>.json``.
* ``node-launch --phase P -- CMD...`` - on every node: derive the per-node NCCL/Gloo
  variables (HCA list, bootstrap interface), create the node-local compiler caches in a
  directory private to the job's user (:func:`node_cache_dir`), record
  that the node started, run CMD, record its exit code, forward signals to it.
* ``verdict --phase fabric|preflight|postmortem`` - after a step: decide whether a
  node is to blame; if so, add it to the job's exclude list and requeue (exit 10),
  else exit 0 (all good) or 1 (failed, not requeued). ``postmortem`` is the pre-flight
  re-run after a failed training step (an NCCL error, a node that died).
* ``requeue`` - after the checkpoint signal: requeue the job if retries remain for
  the cause (time limit or preemption, counted separately); exit 10 when requeued.
* ``sweep-task --index I --out-dir DIR`` - read a sweep's task table on stdin and write
  array task I's arguments and variables NUL-separated (:mod:`slurmkit.submit.hparams`).
* ``checkpoint-dir DIR`` - create the job's checkpoint directory private (0700) and
  refuse (exit 78, one line) one that another user owns or can write into, or that
  lies under a directory where another user could swap it: a trainer unpickles what it
  finds there, so a directory someone else prepared is code run as this user.

Why Python instead of more bash: these decisions are where jobs silently go wrong, so
they are unit-tested functions. The commands import neither torch nor click.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from slurmkit.core.files import write_json_atomic
from slurmkit.core.trust import private_dir_problem
from slurmkit.errors import ExternalCommandError
from slurmkit.slurm import client, runner
from slurmkit.slurm.jobenv import JobEnv, this_node
from slurmkit.submit import hparams
from slurmkit.verdict.store import VerdictStore, still_valid

REQUEUED_EXIT = 10
#: The checkpoint directory is not private (sysexits' EX_CONFIG): the job stops before any step.
CHECKPOINT_REFUSED_EXIT = 78
STATE_FILE = "requeue-state.json"


def log(message: str) -> None:
    print(f"slurmkit: {message}", file=sys.stderr, flush=True)


node_name = this_node


def write_json(path: str, data: Any) -> None:
    """Atomic write (rename), so a reader on another node never sees half a file."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json_atomic(path, data, indent=1)


def read_json(path: str) -> Optional[Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- head address


def _is_loopback(addr: str) -> bool:
    return addr.startswith("127.") or addr in ("::1", "0.0.0.0")


def resolve_reachable(host: str, resolver=None) -> Tuple[Optional[str], str]:
    """First non-loopback IPv4 address of ``host``; ``(None, why)`` when there is none."""
    resolver = resolver or socket.getaddrinfo
    if host in ("localhost", ""):
        return None, f"{host!r} is not a name other nodes can use"
    try:
        infos = resolver(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        return None, f"cannot resolve {host}: {exc}"
    addrs: List[str] = []
    for info in infos:
        addr = info[4][0]
        if addr not in addrs:
            addrs.append(addr)
    good = [a for a in addrs if not _is_loopback(a)]
    if good:
        return good[0], ""
    return None, (
        f"{host} resolves only to loopback ({', '.join(addrs) or 'nothing'}); the other nodes "
        "cannot reach a rendezvous there. Fix /etc/hosts or DNS so the node name maps to its "
        "cluster address"
    )


def cmd_resolve_head(args: argparse.Namespace) -> int:
    addr, why = resolve_reachable(args.node)
    if addr is None:
        log(f"error: rendezvous host: {why}")
        return 1
    print(addr)
    return 0


# --------------------------------------------------------------------------- fabric detection


def detect_summary(
    fabric: str, sysfs_root: str, link_layer: Optional[str], expected_rate: Optional[float]
) -> Dict[str, Any]:
    from slurmkit.submit import nccl

    ports = nccl.detect_hca_ports(sysfs_root)
    chosen = fabric
    warnings: List[str] = []
    if fabric == "auto":
        chosen = nccl.fabric_for_ports(ports)
        link_layer = {"infiniband": "InfiniBand", "roce": "Ethernet"}.get(chosen)
        if chosen == "ethernet":
            warnings.append("no ACTIVE InfiniBand/RoCE port: falling back to TCP sockets")
    if chosen in ("ethernet", "none"):
        return {
            "node": node_name(),
            "fabric": chosen,
            "ports": [],
            "rate_gbps": 0,
            "problems": [],
            "warnings": warnings,
            "all_ports": [p.to_dict() for p in ports],
        }
    sel = nccl.select_hca_ports(ports, link_layer=link_layer, expected_rate_gbps=expected_rate)
    problems = list(sel.problems)
    if not sel.ports:
        problems.append(f"no ACTIVE {link_layer or 'HCA'} port under {sysfs_root}")
    return {
        "node": node_name(),
        "fabric": chosen,
        "ports": sel.ports,
        "rate_gbps": sel.rate_gbps,
        "problems": problems,
        "warnings": warnings + sel.warnings,
        "all_ports": [p.to_dict() for p in ports],
    }


def cmd_detect(args: argparse.Namespace) -> int:
    # {node} lets a test point every node at its own fixture tree (simulated HCAs).
    root = args.sysfs_root.replace("{node}", node_name())
    summary = detect_summary(args.fabric, root, args.link_layer, args.expected_rate_gbps)
    for w in summary["warnings"]:
        log(f"{summary['node']}: warning: {w}")
    write_json(os.path.join(args.out, f"{summary['node']}.json"), summary)
    return 0


# --------------------------------------------------------------------------- node launch


def node_env(
    args: argparse.Namespace,
    environ: Dict[str, str],
    node: str,
    if_addrs: Optional[Dict[str, List[str]]] = None,
) -> Tuple[Dict[str, str], List[str]]:
    """Per-node variables to add; never overrides a variable the user already set."""
    from slurmkit.submit import nccl

    add: Dict[str, str] = {}
    notes: List[str] = []

    def setdefault(key: str, value: str) -> None:
        if key not in environ:
            add[key] = value

    if args.device == "cpu":
        add["CUDA_VISIBLE_DEVICES"] = ""
    summary = read_json(os.path.join(args.round_dir, "fabric", f"{node}.json")) if args.round_dir else None
    if args.fabric == "auto" and summary:
        chosen = summary.get("fabric", "ethernet")
        profile = nccl.load_profile(chosen, args.profiles_dir)
        for key, value in profile["env"].items():
            setdefault(key, value)
        if chosen == "ethernet":
            notes.append("no InfiniBand: NCCL uses TCP sockets")
    if args.hca == "auto" and summary and summary.get("ports"):
        setdefault("NCCL_IB_HCA", nccl.hca_env_value(summary["ports"]))
    if args.socket_ifname == "auto" and "NCCL_SOCKET_IFNAME" not in environ:
        own, _ = resolve_reachable(node)
        addrs = [own] if own else []
        ifname, warning = nccl.pick_socket_ifname(
            addrs, if_addrs if if_addrs is not None else nccl.local_if_addrs()
        )
        if warning:
            notes.append(f"warning: {warning}")
        if ifname:
            setdefault("NCCL_SOCKET_IFNAME", "=" + ifname)
            setdefault("GLOO_SOCKET_IFNAME", ifname)
    return add, notes


#: The node-local compiler caches (never NFS $HOME) under the job's private directory.
CACHE_DIRS = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor"}


def node_cache_dir(job_id: str, environ: Dict[str, str]) -> Tuple[Optional[str], str]:
    """This job's private directory for compiler caches on this node: ``(path, note)``,
    or ``(None, why)`` when no private one can be had.

    Triton and TorchInductor load and run what they find in their caches, so a directory
    another user prepared is code run as this user. Job ids are public and sequential:
    ``${TMPDIR:-/tmp}/slurmkit-<job id>`` is used only when this job creates it, or when
    it is already this user's own private (0700) directory, as after an earlier step of
    the job on this node. Anything else there (another user's directory, a link, a 0755
    one) is left alone and a fresh ``mkdtemp`` directory is used instead, so an attacker
    can neither plant a cache nor make the job fail. With ``job_container/tmpfs``,
    ``/tmp`` is the job's own anyway; the check holds regardless.
    """
    tried = []
    for base in dict.fromkeys([environ.get("TMPDIR") or "/tmp", "/tmp"]):
        preferred = os.path.join(base, f"slurmkit-{job_id}")
        problem = private_dir_problem(preferred, forbidden=0o077)
        if problem is None:
            return preferred, "; ".join(tried)
        try:
            fresh = tempfile.mkdtemp(prefix=f"slurmkit-{job_id}-", dir=base)
        except OSError as exc:
            tried.append(
                f"not using {preferred} ({problem}) nor a fresh directory in {base} ({exc.strerror})"
            )
            continue
        again = private_dir_problem(fresh, forbidden=0o077)
        if again is None:
            return fresh, "; ".join([*tried, f"not using {preferred} ({problem}); using {fresh}"])
        tried.append(f"not using {preferred} ({problem}) nor {fresh} ({again})")
    return None, "; ".join(tried)


FORWARDED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCONT,
)


def cmd_node_launch(args: argparse.Namespace) -> int:
    node = node_name()
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        log("error: node-launch needs a command after --")
        return 2
    add, notes = node_env(args, dict(os.environ), node)
    env = dict(os.environ)
    env.update(add)
    cache, why = node_cache_dir(JobEnv.from_env(env).job_id or "nojob", env)
    if cache is None:
        log(f"{node}: error: no private directory for the compiler caches: {why}")
        return CHECKPOINT_REFUSED_EXIT
    if why:
        log(f"{node}: warning: {why}")
    env["SLURMKIT_NODE_TMP"] = cache
    for key, sub in CACHE_DIRS.items():
        env[key] = os.path.join(cache, sub)
        try:
            os.mkdir(env[key], 0o700)  # inside our private directory: nobody else can have made it
        except FileExistsError:
            pass
    shown = " ".join(f"{k}={env[k]}" for k in sorted(env) if k.startswith(("NCCL_", "GLOO_")))
    log(f"{node}: {args.phase}: {shown or 'no NCCL/Gloo variables set'}")
    for note in notes:
        log(f"{node}: {note}")
    phase_dir = os.path.join(args.round_dir, args.phase) if args.round_dir else None
    started = time.time()
    if phase_dir:
        write_json(os.path.join(phase_dir, f"launched.{node}.json"), {"node": node, "time": started})
    try:
        child = runner.spawn(command, env=env)
    except ExternalCommandError as exc:
        log(f"{node}: error: {exc}")
        if phase_dir:
            write_json(
                os.path.join(phase_dir, f"exit.{node}.json"),
                {"node": node, "rc": 127, "start": started, "end": time.time()},
            )
        return 127

    def forward(signum, _frame):
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, forward)
    rc = child.wait()
    if rc < 0:
        rc = 128 - rc
    if phase_dir:
        write_json(
            os.path.join(phase_dir, f"exit.{node}.json"),
            {"node": node, "rc": rc, "start": started, "end": time.time()},
        )
    return rc


# --------------------------------------------------------------------------- verdicts


def expand_nodes(nodelist: str) -> List[str]:
    from slurmkit.slurm.parse import expand_hostlist

    return expand_hostlist(nodelist) if nodelist else []


def fabric_verdict(
    round_dir: str, nodes: Sequence[str], expected_rate: Optional[float] = None
) -> Tuple[Dict[str, str], str]:
    from slurmkit.submit import nccl

    summaries: Dict[str, Dict[str, Any]] = {}
    bad: Dict[str, str] = {}
    for node in nodes:
        s = read_json(os.path.join(round_dir, "fabric", f"{node}.json"))
        if s is None:
            bad[node] = "fabric detection did not run (no result file)"
        else:
            summaries[node] = s
    bad.update(nccl.compare_nodes(summaries, expected_rate))
    desc = ", ".join(
        f"{n}: {s.get('fabric')} {','.join(s.get('ports') or []) or '-'}"
        for n, s in sorted(summaries.items())
    )
    return bad, desc


def preflight_verdict(
    round_dir: str, nodes: Sequence[str], step_rc: int, phase: str = "preflight"
) -> Tuple[Dict[str, str], str, bool]:
    """Attribute a pre-flight outcome to nodes.

    Returns ``(bad_nodes, summary_text, ok)``. Evidence, in order: the rank-0 summary
    (slow or failing nodes measured by the all_reduce itself); nodes where the step
    never started; nodes whose workers never started while others' did (they never
    joined the rendezvous); and when nobody got past the rendezvous, the node whose
    torchrun failed first.
    """
    pdir = os.path.join(round_dir, phase)
    summary = read_json(os.path.join(pdir, "summary.json"))
    if summary and summary.get("ok") and step_rc == 0:
        return {}, summary.get("message", "pre-flight ok"), True
    bad: Dict[str, str] = {}
    if summary:
        for node, reason in (summary.get("bad_nodes") or {}).items():
            bad[node] = reason
        if bad or not summary.get("ok"):
            return bad, summary.get("message", "pre-flight failed"), False
    launched = {n for n in nodes if os.path.exists(os.path.join(pdir, f"launched.{n}.json"))}
    ranks = [read_json(p) or {} for p in glob.glob(os.path.join(pdir, "rank.*.json"))]
    joined = {r.get("node") for r in ranks}
    for n in nodes:
        if n not in launched:
            bad[n] = "the pre-flight step never started on it"
    if joined:
        for n in nodes:
            if n in launched and n not in joined:
                bad[n] = "it never joined the rendezvous"
    elif not bad:
        exits = [read_json(os.path.join(pdir, f"exit.{n}.json")) for n in nodes]
        failed = sorted((e for e in exits if e and e.get("rc")), key=lambda e: e.get("end", 0))
        if failed and (len(failed) == 1 or failed[1]["end"] - failed[0]["end"] > 5):
            first = failed[0]
            bad[first["node"]] = (
                f"its torchrun failed first (exit {first['rc']}) before any rank "
                "started: rendezvous unreachable from there"
            )
    reasons = "; ".join(f"{n}: {r}" for n, r in sorted(bad.items()))
    return bad, f"pre-flight failed (step exit {step_rc})" + (f": {reasons}" if reasons else ""), False


def failed_verdict_nodes(
    verdict_root: Optional[str], nodes: Sequence[str], now: Optional[float] = None
) -> Dict[str, str]:
    """Nodes whose stored sweep verdict is ``fail`` and still valid (store may be absent)."""
    if not verdict_root:
        return {}
    out: Dict[str, str] = {}
    now = time.time() if now is None else now
    try:
        store = VerdictStore(verdict_root)
        for node in nodes:
            checks = store.node(node) or {}
            for check, v in checks.items():
                if str(v.get("status", "")).lower() != "fail":
                    continue
                if still_valid(v, now):
                    out[node] = f"sweep verdict {check}: {v.get('reason') or v.get('code') or 'fail'}"
                    break
    except Exception as exc:  # noqa: BLE001
        log(f"warning: cannot read the sweep verdict store at {verdict_root}: {exc}")
    return out


# --------------------------------------------------------------------------- requeue


def load_state(state_dir: str) -> Dict[str, Any]:
    state = read_json(os.path.join(state_dir, STATE_FILE)) or {}
    state.setdefault("timeout", 0)
    state.setdefault("preempt", 0)
    state.setdefault("node", 0)
    state.setdefault("excluded", [])
    state.setdefault("history", [])
    return state


def save_state(state_dir: str, state: Dict[str, Any]) -> None:
    write_json(os.path.join(state_dir, STATE_FILE), state)


def signal_cause(remaining_s: Optional[int], grace_s: int, time_limit_s: int) -> str:
    """Time limit or preemption? The time-limit signal comes ``grace`` s before the end
    (Slurm may send it up to 60 s early); any earlier signal is a preemption (or a
    manual ``scancel --signal``)."""
    if not time_limit_s or remaining_s is None:
        return "preempt"
    return "timeout" if remaining_s <= grace_s + 90 else "preempt"


#: Seconds for each scontrol call made from inside the job.
SCONTROL_TIMEOUT = 30.0


def current_excludes(job_id: str) -> List[str]:
    try:
        job = client.show_job(job_id, timeout=SCONTROL_TIMEOUT) or {}
    except Exception:  # noqa: BLE001
        return []
    value = job.get("ExcNodeList", "")
    return [] if value in ("", "(null)") else expand_nodes(value)


def exclude_and_requeue(job_id: str, exclude: Sequence[str]) -> None:
    """Requeue ``job_id`` with ``exclude`` as its exclude list.

    Slurm changes ExcNodeList only while a job is pending, so: requeue-and-hold, wait
    for the job to leave the node (our own process ignores the SIGTERM that comes with
    the requeue), set the list, release. If that cannot finish, the job stays held and
    the message says how to release it.
    """
    from slurmkit.slurm.parse import compress_hostlist

    value = compress_hostlist(sorted(set(exclude)))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        client.update_job(job_id, ExcNodeList=value, timeout=SCONTROL_TIMEOUT)
        client.requeue_job(job_id, timeout=SCONTROL_TIMEOUT)
        return
    except Exception as exc:  # noqa: BLE001 - expected: "Job is no longer pending execution"
        first_error = str(exc)
    client.requeue_job(job_id, hold=True, timeout=SCONTROL_TIMEOUT)
    # A requeued job is PENDING (still completing) at once, so the job itself can set the
    # list and release it before Slurm kills it. It must: with proctrack/cgroup (the
    # production configuration) a detached helper is in the job's cgroup and dies with it.
    if _set_exclude_and_release(job_id, value):
        log(f"requeued job {job_id} with ExcNodeList={value}")
        return
    # Fallback (a slow controller): a detached helper, which outlives the job only where
    # Slurm does not track jobs by cgroup.
    helper = [
        sys.executable,
        "-m",
        "slurmkit.submit.jobside",
        "finish-requeue",
        "--job-id",
        job_id,
        "--exclude",
        value,
    ]
    runner.spawn(
        helper, detach=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    log(
        f"requeued and held job {job_id} ({first_error.splitlines()[0][:120]}); a helper sets "
        f"ExcNodeList={value} and releases it (if it does not: scontrol update JobId={job_id} "
        f"ExcNodeList={value}; scontrol release {job_id})"
    )


def _set_exclude_and_release(job_id: str, value: str, tries: int = 3) -> bool:
    """Set ExcNodeList of the requeued and held ``job_id`` and release it; ``False`` when
    Slurm would not take the list (the job is still left held, never released without it)."""
    for attempt in range(tries):
        try:
            client.update_job(job_id, ExcNodeList=value, timeout=SCONTROL_TIMEOUT)
        except ExternalCommandError:
            time.sleep(0.5 * (attempt + 1))
            continue
        try:
            client.release_job(job_id, timeout=SCONTROL_TIMEOUT)
        except ExternalCommandError as exc:
            log(f"could not release job {job_id}: {exc}")
            return False
        return True
    return False


def cmd_finish_requeue(args: argparse.Namespace) -> int:
    deadline = time.time() + args.timeout
    while time.time() < deadline:
        job = client.show_job(args.job_id, timeout=SCONTROL_TIMEOUT)
        if job is None or job.get("JobState") in ("CANCELLED", "COMPLETED", "FAILED", "TIMEOUT"):
            return 1  # gone or ended meanwhile (e.g. cancelled): nothing to release
        if job.get("JobState") == "PENDING":
            try:
                client.update_job(args.job_id, ExcNodeList=args.exclude, timeout=SCONTROL_TIMEOUT)
            except ExternalCommandError:
                pass  # not pending any more after all, or a slow controller: try again
            else:
                try:
                    client.release_job(args.job_id, timeout=SCONTROL_TIMEOUT)
                except ExternalCommandError as exc:
                    log(f"could not release job {args.job_id}: {exc}")
                return 0
        time.sleep(1)
    return 1


def requeue_for_nodes(args: argparse.Namespace, bad: Dict[str, str], phase: str) -> int:
    state = load_state(args.state_dir)
    job_nodes = expand_nodes(args.nodelist)
    bad = dict(bad)
    for node, reason in failed_verdict_nodes(args.verdict_root, job_nodes).items():
        bad.setdefault(node, reason)
    for node, reason in sorted(bad.items()):
        log(f"{phase} failed on {node}: {reason}")
    if args.no_requeue:
        log("requeue is disabled for this job: not requeueing")
        return 1
    if state["node"] >= args.max_node_failures:
        log(
            f"not requeueing: {state['node']} node-failure requeues already (max_node_failures="
            f"{args.max_node_failures})"
        )
        return 1
    exclude = sorted(set(state["excluded"]) | set(current_excludes(args.job_id)) | set(bad))
    state["node"] += 1
    state["excluded"] = exclude
    state["history"].append({"time": time.time(), "cause": "node", "phase": phase, "nodes": bad})
    save_state(args.state_dir, state)
    log(
        f"excluding {','.join(sorted(bad))} (exclude list now {','.join(exclude)}) and requeueing "
        f"(node failure {state['node']} of {args.max_node_failures})"
    )
    exclude_and_requeue(args.job_id, exclude)
    return REQUEUED_EXIT


def cmd_verdict(args: argparse.Namespace) -> int:
    nodes = expand_nodes(args.nodelist)
    if args.phase == "fabric":
        bad, desc = fabric_verdict(args.round_dir, nodes, args.expected_rate_gbps)
        if not bad:
            log(f"fabric ok: {desc}")
            return 0
        log(f"fabric check failed: {desc}")
        return requeue_for_nodes(args, bad, "fabric check")
    bad, message, ok = preflight_verdict(args.round_dir, nodes, args.step_rc, args.phase)
    what = "pre-flight" if args.phase == "preflight" else "post-failure pre-flight"
    if ok:  # rank 0 of the pre-flight already printed its summary
        if args.phase == "postmortem":
            log("the post-failure pre-flight passed: the failure is not attributed to a node")
        return 0
    log(message)
    if not bad:
        log(f"{what} failed and no node could be blamed: not requeueing")
        return 1
    return requeue_for_nodes(args, bad, what)


def cmd_requeue(args: argparse.Namespace) -> int:
    state = load_state(args.state_dir)
    cause = signal_cause(args.signal_remaining_s, args.grace_s, args.time_limit_s)
    label = {"timeout": "time limit", "preempt": "preemption"}[cause]
    if args.no_requeue:
        log(f"checkpoint taken ({label}); requeue is disabled for this job")
        return 1
    if state[cause] >= args.max_retries:
        log(
            f"checkpoint taken ({label}); not requeueing: {state[cause]} {label} requeues already "
            f"(max_retries={args.max_retries})"
        )
        return 1
    state[cause] += 1
    state["history"].append({"time": time.time(), "cause": cause})
    save_state(args.state_dir, state)
    log(
        f"checkpoint taken ({label}); requeueing job {args.job_id} ({label} requeue {state[cause]} of "
        f"{args.max_retries})"
    )
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    client.requeue_job(args.job_id, timeout=SCONTROL_TIMEOUT)
    return REQUEUED_EXIT


# --------------------------------------------------------------------------- CLI

# --------------------------------------------------------------------------- checkpoint directory


def cmd_checkpoint_dir(args: argparse.Namespace) -> int:
    problem = private_dir_problem(args.dir)
    if problem:
        log(f"error: refusing the checkpoint directory: {problem}")
        return CHECKPOINT_REFUSED_EXIT
    return 0


# --------------------------------------------------------------------------- sweep task


def cmd_sweep_task(args: argparse.Namespace) -> int:
    """Read the sweep table on stdin, pick task ``--index`` and write its arguments
    (``sweep-args``) and variables (``sweep-env``, ``NAME=value``) NUL-separated into
    ``--out-dir``, for the batch script to read back as whole words."""
    try:
        task = hparams.task_from_table(sys.stdin.read(), args.index)
    except hparams.SweepError as exc:
        log(f"error: {exc}")
        return 1
    for name, items in (
        ("sweep-args", task.args),
        ("sweep-env", [f"{k}={v}" for k, v in task.env.items()]),
    ):
        path = os.path.join(args.out_dir, name)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("".join(item + "\0" for item in items))
    return 0


def _add_requeue_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job-id", required=True)
    p.add_argument("--state-dir", required=True)
    p.add_argument("--nodelist", default="")
    p.add_argument("--max-retries", type=int, default=3)
    p.add_argument("--max-node-failures", type=int, default=2)
    p.add_argument("--verdict-root", default=None)
    p.add_argument("--no-requeue", action="store_true")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m slurmkit.submit.jobside")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("resolve-head")
    p.add_argument("node")
    p.set_defaults(fn=cmd_resolve_head)

    p = sub.add_parser("detect")
    p.add_argument("--out", required=True)
    p.add_argument("--fabric", default="auto")
    p.add_argument("--link-layer", default=None)
    p.add_argument("--expected-rate-gbps", type=float, default=None)
    p.add_argument(
        "--sysfs-root",
        default=os.environ.get("SLURMKIT_SYSFS_INFINIBAND", "/sys/class/infiniband"),
        help="InfiniBand sysfs class dir; $SLURMKIT_SYSFS_INFINIBAND (with {node}) points it at "
        "fixture trees for tests",
    )
    p.set_defaults(fn=cmd_detect)

    p = sub.add_parser("node-launch")
    p.add_argument("--round-dir", default=None)
    p.add_argument("--phase", default="train")
    p.add_argument("--fabric", default="none")
    p.add_argument("--device", default="auto")
    p.add_argument("--profiles-dir", default=None)
    p.add_argument("--hca", default=None)
    p.add_argument("--socket-ifname", default=None)
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(fn=cmd_node_launch)

    p = sub.add_parser("verdict")
    p.add_argument("--phase", choices=["fabric", "preflight", "postmortem"], required=True)
    p.add_argument("--round-dir", required=True)
    p.add_argument("--step-rc", type=int, default=0)
    p.add_argument("--expected-rate-gbps", type=float, default=None)
    _add_requeue_args(p)
    p.set_defaults(fn=cmd_verdict)

    p = sub.add_parser("requeue")
    p.add_argument("--signal-remaining-s", type=int, default=None)
    p.add_argument("--grace-s", type=int, default=90)
    p.add_argument("--time-limit-s", type=int, default=0)
    _add_requeue_args(p)
    p.set_defaults(fn=cmd_requeue)

    p = sub.add_parser("checkpoint-dir")
    p.add_argument("dir")
    p.set_defaults(fn=cmd_checkpoint_dir)

    p = sub.add_parser("sweep-task")
    p.add_argument("--index", default=None, help="the array task ($SLURM_ARRAY_TASK_ID)")
    p.add_argument("--out-dir", required=True)
    p.set_defaults(fn=cmd_sweep_task)

    p = sub.add_parser("finish-requeue")
    p.add_argument("--job-id", required=True)
    p.add_argument("--exclude", required=True)
    p.add_argument("--timeout", type=float, default=600)
    p.set_defaults(fn=cmd_finish_requeue)
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except Exception as exc:  # noqa: BLE001 - one line in the job log, not a traceback
        if os.environ.get("SLURMKIT_DEBUG"):
            raise
        log(f"error: {args.cmd}: {type(exc).__name__}: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
