"""Pre-flight: one short all_reduce across every rank, with the job's exact environment.

Run by the rendered script under the same ``srun`` + ``torchrun`` launch as the
training command (``-m slurmkit.submit.preflight``), so it exercises the same
rendezvous, the same NCCL/Gloo variables and the same nodes, minutes before the
model loads rather than hours into the run.

What it measures is the collective probe shared with the heavy check and the sweep
(:mod:`slurmkit.health.checks.collective`), the way nccl-tests does (doc/PERFORMANCE.md):
``algbw = bytes / t`` and ``busbw = algbw x 2(n-1)/n`` for all_reduce, with ``t`` the
slowest rank's mean time per iteration, and every element of the reduced buffer checked
against the exact sum.

Naming the bad node: every rank reports its node, init time and per-iteration time
through ``all_gather_object``. When busbw is below ``--min-busbw-gbps``, pairs of
nodes are measured one after another (local rank 0 of node i with node i+1, in a
ring) and a node is blamed when every pair it is in is slow; with two nodes that is
ambiguous, so both are named and the message says so. Ranks write their results to
``--out-dir`` (shared storage) so ``jobside verdict`` can also name nodes that never
joined.

Test hook: ``SLURMKIT_PREFLIGHT_FAIL_NODE=node2[,node3]`` makes the ranks on those
nodes report a failure. It exists so the exclude-and-requeue path can be tested on a
cluster without a broken node; it is documented in docs/ssubmit.md.

Exit codes: 0 pass, 1 fail (slow, wrong result, test hook), 2 bad arguments.
torch is imported here, inside the job; the ssubmit CLI never imports this module.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from typing import Any, Dict, List, Optional, Sequence

from slurmkit.health.checks.collective import busbw_gbps, timed_allreduce

# The same node naming and atomic JSON writes as the batch script's helpers, so the
# verdict step reads exactly what this wrote.
from slurmkit.submit.jobside import node_name as _node
from slurmkit.submit.jobside import write_json as _write

FAIL_NODE_ENV = "SLURMKIT_PREFLIGHT_FAIL_NODE"


def blame_slow_pairs(nodes: Sequence[str], pair_gbps: Dict[tuple, float], floor: float) -> Dict[str, str]:
    """Nodes in only slow pairs. ``pair_gbps`` maps (node_a, node_b) -> busbw."""
    per_node: Dict[str, List[float]] = {n: [] for n in nodes}
    for (a, b), bw in pair_gbps.items():
        per_node[a].append(bw)
        per_node[b].append(bw)
    bad: Dict[str, str] = {}
    for n, values in per_node.items():
        if values and all(v < floor for v in values):
            bad[n] = (
                f"slow: every pair test with it ran below {floor:g} GB/s ({', '.join(f'{v:.3g}' for v in values)})"
            )
    return bad


def run(args: argparse.Namespace) -> int:
    t0 = time.time()
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    node = _node()
    use_cuda = os.environ.get("SLURMKIT_DEVICE", "auto") != "cpu" and torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    out_dir = args.out_dir
    mine = {
        "rank": rank,
        "local_rank": local_rank,
        "node": node,
        "backend": backend,
        "start": t0,
        "pid": os.getpid(),
    }
    if out_dir:
        _write(os.path.join(out_dir, f"rank.{rank}.json"), mine)
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=args.timeout))
    init_s = time.time() - t0

    fail_nodes = {n.strip() for n in os.environ.get(FAIL_NODE_ENV, "").split(",") if n.strip()}
    hook_failed = node in fail_nodes

    numel = max(1, int(args.size_mb * 1024 * 1024 / 4))
    probe = timed_allreduce(numel * 4, args.iters, device=device, warmup=2)
    correct = probe.local_wrong == 0
    t = probe.seconds
    nbytes = probe.bytes
    bw = probe.busbw_gbps

    mine.update(
        {
            "init_s": round(init_s, 3),
            "seconds": probe.local_seconds,
            "correct": correct,
            "hook_failed": hook_failed,
        }
    )
    reports: List[Optional[Dict[str, Any]]] = [None] * world
    dist.all_gather_object(reports, mine)
    first_rank = {}
    for r in reports:
        if r:
            first_rank[r["node"]] = min(first_rank.get(r["node"], r["rank"]), r["rank"])
    nodes = sorted(first_rank, key=first_rank.get)

    bad: Dict[str, str] = {}
    for r in reports:
        if r and r["hook_failed"]:
            bad[r["node"]] = f"failed by the test hook {FAIL_NODE_ENV}"
        elif r and not r["correct"]:
            bad.setdefault(r["node"], f"wrong all_reduce result on rank {r['rank']}")
    slow_note = ""
    if args.min_busbw_gbps > 0 and bw < args.min_busbw_gbps and not bad:
        pair_bw = _pair_tests(dist, torch, reports, nodes, nbytes, args.iters, device)
        blamed = blame_slow_pairs(nodes, pair_bw, args.min_busbw_gbps)
        if blamed and len(blamed) < len(nodes):
            bad.update(blamed)
        elif len(nodes) == 1:
            bad[nodes[0]] = f"busbw {bw:.3g} GB/s below {args.min_busbw_gbps:g} on its own"
        else:
            slow_note = (
                " (pair tests could not single out one node: "
                + ", ".join(f"{a}-{b} {v:.3g}" for (a, b), v in sorted(pair_bw.items()))
                + ")"
            )
    ok = not bad and correct and not slow_note and not (args.min_busbw_gbps > 0 and bw < args.min_busbw_gbps)
    message = (
        f"pre-flight {'ok' if ok else 'FAILED'}: all_reduce {nbytes / 2**20:.3g} MiB x {args.iters} over "
        f"{world} ranks on {len(nodes)} nodes ({backend}): busbw {bw:.3g} GB/s, "
        f"time {t * 1e3:.3g} ms (min {args.min_busbw_gbps:g} GB/s)"
    )
    if bad:
        message += "; bad nodes: " + "; ".join(f"{n}: {why}" for n, why in sorted(bad.items()))
    message += slow_note
    if rank == 0:
        print(f"slurmkit: {message}", file=sys.stderr, flush=True)
        if out_dir:
            _write(
                os.path.join(out_dir, "summary.json"),
                {
                    "ok": ok,
                    "busbw_gbps": bw,
                    "seconds": t,
                    "bytes": nbytes,
                    "world": world,
                    "backend": backend,
                    "nodes": nodes,
                    "bad_nodes": bad,
                    "message": message,
                    "ranks": reports,
                },
            )
    if out_dir:
        _write(os.path.join(out_dir, f"rank.{rank}.json"), mine)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


def _pair_tests(
    dist, torch, reports, nodes: List[str], nbytes: int, iters: int, device
) -> Dict[tuple, float]:
    """all_reduce between local rank 0 of neighbouring nodes, one pair at a time."""
    leaders = {}
    for r in reports:
        if r and r["local_rank"] == 0 and r["node"] not in leaders:
            leaders[r["node"]] = r["rank"]
    pairs = []
    if len(nodes) == 2:
        pairs = [(nodes[0], nodes[1])]
    elif len(nodes) > 2:
        pairs = [(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))]
    groups = [dist.new_group(sorted([leaders[a], leaders[b]])) for a, b in pairs]  # every rank, same order
    rank = dist.get_rank()
    out: Dict[tuple, float] = {}
    for (a, b), group in zip(pairs, groups):
        members = {leaders[a], leaders[b]}
        t = torch.zeros(1, dtype=torch.float64, device=device)
        if rank in members:
            t[0] = timed_allreduce(nbytes, iters, device=device, group=group, warmup=2).seconds
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out[(a, b)] = busbw_gbps(nbytes, float(t.item()), 2)
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m slurmkit.submit.preflight", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--min-busbw-gbps", type=float, default=0.0)
    ap.add_argument("--size-mb", type=float, default=64.0)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--out-dir", default=None)
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    if args.size_mb <= 0 or args.iters < 1:
        print("slurmkit: error: --size-mb must be > 0 and --iters >= 1", file=sys.stderr)
        return 2
    try:
        return run(args)
    except Exception as exc:  # noqa: BLE001 - one line naming this node, not a traceback
        print(
            f"slurmkit: pre-flight error on {_node()} (rank {os.environ.get('RANK', '?')}): "
            f"{type(exc).__name__}: {exc}",
            file=sys.stderr,
            flush=True,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
