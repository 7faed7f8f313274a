"""The collective probe: one timed all_reduce, nccl-tests' bus bandwidth, one judgement.

Three callers share it, each with its own launcher (the probe runs inside a
``torch.distributed`` process group; it does not create one):

* ssubmit's pre-flight (:mod:`slurmkit.submit.preflight`): every rank of the job, under
  the job's own ``srun`` + ``torchrun``, and the node-pair tests that name a slow node;
* the heavy check ``allreduce_busbw`` (:mod:`slurmkit.health.checks.heavy`): one process per GPU
  of one node;
* the sweep's pair test (:mod:`slurmkit.sweep.pairs`): every GPU of two nodes.

Definitions, as in nccl-tests ("Performance reported by NCCL tests", NVIDIA/nccl-tests
``doc/PERFORMANCE.md``, https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
``algbw = S / t`` and, for all_reduce, ``busbw = algbw x 2(n-1)/n``, which reflects the
hardware bottleneck independently of the rank count ``n``. ``S`` is the message size in
bytes, ``t`` the slowest rank's mean time per iteration (the collective is not done until
its last rank is), GB is 10^9 bytes.

Correctness, like nccl-tests' ``#wrong`` column: before the timed loop every rank fills
the buffer with ``(rank mod 16) + 1`` and the reduced buffer is compared, element by
element, with the exact sum. Every partial sum is an integer below 2^24, so it is exact in
float32 in any reduction order (up to a million ranks). Summing a buffer of ones over the
timed iterations instead and expecting ``n ** (k + 1)`` leaves float32's exact range: with
plain float32 sums the result differs from ``float32(n ** (k + 1))`` after 8 iterations on
7 ranks, or 14 on 12 ranks (two 6-GPU nodes at the pair test's default of 20), and a
healthy node would read as wrong.

One action per code, whoever runs the probe:

* ``ALLREDUCE_WRONG`` -> ``isolate``: a wrong sum is silent data corruption; every job on
  the node would train on corrupt gradients, and no reset is known to cure it.
* ``ALLREDUCE_BUSBW_LOW`` -> ``reset``: correct but below its floor, like every other
  bandwidth floor of the heavy tier (NVLink pairs, GEMM, HBM); the node is taken out
  (nccl-tests, too, exits non-zero below ``0.9 x NCCL_TESTS_MIN_BW``) and a GPU or
  fabric reset is the first remedy.

torch is imported inside :func:`timed_allreduce` only: the CLIs and the prolog import
this module's judgement without paying for torch.
"""

from __future__ import annotations

import math
import time

from slurmkit.values import Value
from slurmkit.verdict.base import Action, CheckResult, Status

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict, Optional

GB = 1e9

CODE_WRONG = "ALLREDUCE_WRONG"
CODE_LOW = "ALLREDUCE_BUSBW_LOW"
#: The one action of each failure code (see the module docstring for why).
ACTIONS = {CODE_WRONG: Action.ISOLATE, CODE_LOW: Action.RESET}

#: Ranks contribute ``(rank % FILL_PERIOD) + 1``: the exact sum stays below 2^24.
FILL_PERIOD = 16


def algbw_gbps(n_bytes: float, seconds: float) -> float:
    """nccl-tests' algorithm bandwidth ``S / t`` in GB/s."""
    if not (math.isfinite(seconds) and seconds > 0) or not (math.isfinite(n_bytes) and n_bytes >= 0):
        raise ValueError(
            f"bandwidth needs a finite size >= 0 and a time > 0, got {n_bytes!r} B in {seconds!r} s"
        )
    return n_bytes / seconds / GB


def busbw_gbps(n_bytes: float, seconds: float, ranks: int) -> float:
    """nccl-tests' all_reduce bus bandwidth in GB/s: ``algbw x 2(n-1)/n`` (0 for one rank,
    which moves nothing over a bus)."""
    if ranks < 1:
        raise ValueError(f"all_reduce needs at least one rank, got {ranks}")
    return algbw_gbps(n_bytes, seconds) * (2.0 * (ranks - 1) / ranks)


def expected_sum(ranks: int) -> float:
    """Every element of the reduced correctness buffer over ``ranks`` ranks."""
    full, rest = divmod(ranks, FILL_PERIOD)
    return float(full * FILL_PERIOD * (FILL_PERIOD + 1) // 2 + rest * (rest + 1) // 2)


class AllReduceResult(Value):
    """One timed all_reduce, as seen by one rank (``seconds`` and ``wrong`` are the group's)."""

    bytes: int
    ranks: int
    iterations: int
    seconds: float  # slowest rank's mean time per iteration
    wrong: int  # wrong elements, summed over the group's ranks
    local_seconds: float  # this rank's mean time per iteration
    local_wrong: int  # this rank's wrong elements
    backend: str

    def __init__(
        self,
        bytes: int,
        ranks: int,
        iterations: int,
        seconds: float,
        wrong: int,
        local_seconds: float,
        local_wrong: int,
        backend: str,
    ) -> None:
        self.bytes = bytes
        self.ranks = ranks
        self.iterations = iterations
        self.seconds = seconds
        self.wrong = wrong
        self.local_seconds = local_seconds
        self.local_wrong = local_wrong
        self.backend = backend

    @property
    def algbw_gbps(self) -> float:
        return algbw_gbps(self.bytes, self.seconds)

    @property
    def busbw_gbps(self) -> float:
        return busbw_gbps(self.bytes, self.seconds, self.ranks)

    def details(self) -> Dict[str, Any]:
        return {
            "busbw_gbps": self.busbw_gbps,
            "algbw_gbps": self.algbw_gbps,
            "ranks": self.ranks,
            "seconds": self.seconds,
            "wrong": self.wrong,
            "backend": self.backend,
            "bytes": self.bytes,
            "iterations": self.iterations,
        }


def timed_allreduce(
    n_bytes: int, iterations: int, *, device: Any = None, group: Any = None, warmup: int = 1
) -> AllReduceResult:
    """Check and time ``iterations`` all_reduce calls of a float32 buffer of ``n_bytes``.

    Every rank of ``group`` (the default group when ``None``) must call it with the same
    arguments; ``device`` is where the buffer lives (``cuda:<i>`` for NCCL, CPU for gloo).
    The first all_reduce checks the sum and sets the communicator up; ``warmup`` more
    run untimed; then a barrier, the timed loop, and a device synchronisation.
    """
    import torch
    import torch.distributed as dist

    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    dev = torch.device(device) if device is not None else torch.device("cpu")
    cuda = dev.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    numel = max(1, int(n_bytes) // 4)
    buf = torch.full((numel,), float(rank % FILL_PERIOD + 1), dtype=torch.float32, device=dev)
    dist.all_reduce(buf, group=group)
    sync()
    local_wrong = int((buf != expected_sum(world)).sum().item())
    buf.zero_()  # zeros stay zeros: no overflow to inf over the timed loop
    for _ in range(warmup):
        dist.all_reduce(buf, group=group)
    sync()
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(buf, group=group)
    sync()
    local_seconds = (time.perf_counter() - start) / iterations
    slowest = torch.tensor([local_seconds], dtype=torch.float64, device=dev)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    wrong = torch.tensor([float(local_wrong)], dtype=torch.float64, device=dev)
    dist.all_reduce(wrong, group=group)
    return AllReduceResult(
        bytes=numel * 4,
        ranks=world,
        iterations=iterations,
        seconds=float(slowest.item()),
        wrong=int(wrong.item()),
        local_seconds=local_seconds,
        local_wrong=local_wrong,
        backend=str(dist.get_backend(group)),
    )


def judge(
    check: str,
    busbw: float,
    *,
    wrong: int = 0,
    floor: Optional[float] = None,
    expected: Optional[float] = None,
    min_fraction: float = 0.9,
    where: str = "",
    details: Optional[Dict[str, Any]] = None,
) -> CheckResult:
    """The verdict on one all_reduce: wrong elements first, then busbw below ``floor`` or
    below ``min_fraction`` x ``expected`` (nccl-tests' 0.9 x floor rule), else OK.

    ``where`` ends the reason (" over 8 ranks", " between node1 and node2"). ``details``
    gains the figures judged against; ``expected_gbps`` is what the metrics export as the
    reference for the 90 % alert.
    """
    d = dict(
        details or {}, busbw_gbps=busbw, floor_gbps=floor, expected_gbps=expected, min_fraction=min_fraction
    )
    if expected:
        d["fraction_of_expected"] = round(busbw / expected, 4)
    if wrong:
        return CheckResult(
            check,
            Status.FAIL,
            CODE_WRONG,
            f"{wrong} wrong element(s) after all_reduce{where}",
            ACTIONS[CODE_WRONG],
            value=busbw,
            unit="GB/s",
            details=d,
        )
    limits = []
    if floor is not None:
        limits.append((f"the floor {floor:.3g} GB/s", floor))
    if expected is not None:
        limits.append((f"{min_fraction:.0%} of the expected {expected:.3g} GB/s", min_fraction * expected))
    for label, limit in limits:
        if busbw < limit:
            return CheckResult(
                check,
                Status.FAIL,
                CODE_LOW,
                f"busbw {busbw:.3g} GB/s under {label}{where}",
                ACTIONS[CODE_LOW],
                value=busbw,
                unit="GB/s",
                details=d,
            )
    return CheckResult(
        check, Status.OK, "OK", f"busbw {busbw:.3g} GB/s{where}", value=busbw, unit="GB/s", details=d
    )
