"""Heavy checks (sweeps, escalating epilogs): NVLink pair matrix, all_reduce busbw, GEMM, HBM.

They need torch (the ``[train]`` extra), imported inside the functions so nothing
else pays for it. Each probe has two halves, so the judgement is tested without GPUs:

* a *measurement* (:func:`nvlink_matrix`, :func:`allreduce_busbw`, :func:`gemm_tflops`,
  :func:`hbm_bandwidth`) that uses CUDA when there are GPUs, the simulated fixture's
  numbers when the backend is simulated, and CPU tensors otherwise (GEMM and HBM
  only: a CPU has no NVLink);
* a *judgement* (``judge_*``) that turns numbers into a :class:`CheckResult`.

Formulas: copy bandwidth = bytes / seconds (one direction per ordered pair); HBM copy
bandwidth counts read + write (2 x bytes / s, as nvbandwidth and STREAM copy do);
all_reduce busbw = (bytes / s) x 2(n-1)/n (nccl-tests doc/PERFORMANCE.md), measured and
judged by :mod:`slurmkit.health.checks.collective`, the probe the pre-flight and the sweep's pair
test share; GEMM TFLOP/s = 2 n^3 / s / 1e12.
"""

from __future__ import annotations

import time

from slurmkit.core.schema import Field
from slurmkit.health import declare
from slurmkit.verdict.base import Action, CheckResult, Status, Tier

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Sequence

GB = 1e9


def _collective():
    """The collective probe's module, imported when a heavy check runs: every prolog imports
    this module (the catalog holds the heavy declarations) but never runs a heavy check."""
    from slurmkit.health.checks import collective

    return collective


# ---------------------------------------------------------------------- helpers


def _torch():
    try:
        import torch
    except ImportError:
        from slurmkit.health.backends import BackendUnavailable

        raise BackendUnavailable(
            "heavy checks need torch (pip install 'slurmkit[train]')", code="NO_TORCH"
        ) from None
    return torch


def _cuda_devices(torch) -> List[int]:
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def _simulated(ctx) -> bool:
    try:
        return ctx.backend().name == "simulated"
    except Exception:
        return False


def _model_name(ctx, device_index: Optional[int] = None) -> str:
    """GPU name for thresholds: the backend's (simulated), CUDA's, or 'CPU'."""
    if _simulated(ctx):
        gpus = ctx.backend().gpus()
        if gpus:
            return gpus[0].name
    try:
        torch = _torch()
        if torch.cuda.is_available():
            return torch.cuda.get_device_name(device_index or 0)
    except Exception:
        pass
    return "CPU"


# ---------------------------------------------------------------------- NVLink matrix


def nvlink_matrix(
    ctx=None, devices: Optional[Sequence[int]] = None, size_mb: int = 256, iterations: int = 5
) -> List[List[float]]:
    """The N x N GPU-to-GPU copy bandwidth matrix in GB/s (row = source, column = destination;
    the diagonal is 0). From the backend when it has one (simulated fixture), else
    measured with CUDA peer copies."""
    if ctx is not None:
        m = ctx.backend().nvlink_bandwidth_matrix() if _simulated(ctx) else None
        if m is not None:
            return m
    torch = _torch()
    devs = list(devices) if devices is not None else _cuda_devices(torch)
    if len(devs) < 2:
        from slurmkit.health.backends import BackendUnavailable

        raise BackendUnavailable("NVLink probe needs at least 2 CUDA GPUs", code="NO_CUDA")
    n_bytes = size_mb * 1024 * 1024
    bufs = {d: torch.empty(n_bytes, dtype=torch.uint8, device=f"cuda:{d}") for d in devs}
    out = [[0.0] * len(devs) for _ in devs]
    for a, i in enumerate(devs):
        for b, j in enumerate(devs):
            if i == j:
                continue
            src, dst = bufs[i], torch.empty(n_bytes, dtype=torch.uint8, device=f"cuda:{j}")
            dst.copy_(src, non_blocking=True)  # warm-up: peer mapping, allocator
            torch.cuda.synchronize(i)
            torch.cuda.synchronize(j)
            start = time.perf_counter()
            for _ in range(iterations):
                dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize(i)
            torch.cuda.synchronize(j)
            out[a][b] = n_bytes * iterations / (time.perf_counter() - start) / GB
            del dst
    return out


def judge_nvlink_matrix(
    matrix: List[List[float]], floor_gbps: float, outlier_fraction: float, check: str = "nvlink_bandwidth"
) -> CheckResult:
    """Fail a pair below ``floor_gbps``, or below ``outlier_fraction`` x the median of its
    row or of its column (off-diagonal). One weak link hides under a global floor
    but stands out against its own row and column; a whole slow GPU pulls its row
    median down but not its peers' column medians, so it is still caught."""
    # statistics pulls in fractions, decimal and random; the catalog imports this module
    # for its declarations on every prolog, which never judges a matrix
    import statistics

    n = len(matrix)
    if n < 2:
        return CheckResult(check, Status.OK, "OK", "fewer than 2 GPUs: no pairs", value=None, unit="GB/s")

    def off(seq, k):  # noqa: E306
        return [v for idx, v in enumerate(seq) if idx != k]

    row_med = [statistics.median(off(matrix[i], i)) for i in range(n)]
    col_med = [statistics.median(off([matrix[r][j] for r in range(n)], j)) for j in range(n)]
    below_floor, outliers = [], []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            v = matrix[i][j]
            if v < floor_gbps:
                below_floor.append((i, j, v))
            elif v < outlier_fraction * max(row_med[i], col_med[j]):
                outliers.append((i, j, v, max(row_med[i], col_med[j])))
    pairs = [matrix[i][j] for i in range(n) for j in range(n) if i != j]
    worst_pair = min(pairs)
    details = {
        "matrix": matrix,
        "row_median": row_med,
        "col_median": col_med,
        "floor_gbps": floor_gbps,
        "outlier_fraction": outlier_fraction,
        "min_gbps": worst_pair,
        "median_gbps": statistics.median(pairs),
    }
    if below_floor:
        desc = ", ".join(f"{i}->{j} {v:.0f}" for i, j, v in below_floor[:6])
        return CheckResult(
            check,
            Status.FAIL,
            "NVLINK_BW_FLOOR",
            f"{len(below_floor)} pair(s) below {floor_gbps:g} GB/s: {desc}",
            Action.RESET,
            value=worst_pair,
            unit="GB/s",
            details=details,
        )
    if outliers:
        desc = ", ".join(f"{i}->{j} {v:.0f} (median {m:.0f})" for i, j, v, m in outliers[:6])
        return CheckResult(
            check,
            Status.FAIL,
            "NVLINK_BW_OUTLIER",
            f"{len(outliers)} pair(s) below {outlier_fraction:.0%} of their row/column median: {desc}",
            Action.RESET,
            value=worst_pair,
            unit="GB/s",
            details=details,
        )
    return CheckResult(
        check,
        Status.OK,
        "OK",
        f"{n}x{n} pairs, min {worst_pair:.0f} GB/s, median {details['median_gbps']:.0f} GB/s",
        value=worst_pair,
        unit="GB/s",
        details=details,
    )


@declare.check(
    "nvlink_bandwidth",
    Tier.HEAVY,
    "GPU-to-GPU copy bandwidth for every pair (N x N); a pair below the floor or far "
    "below its row/column median fails.",
    codes="NVLINK_BW_FLOOR, NVLINK_BW_OUTLIER",
    hooks=declare.HEAVY_HOOKS,
    params={
        "size_mb": Field("int", 256, "Bytes per pair copy (MiB).", min=1),
        "iterations": Field("int", 5, "Timed copies per pair.", min=1),
    },
)
def check_nvlink_bandwidth(ctx, params) -> CheckResult:
    m = nvlink_matrix(
        ctx, size_mb=int(params.get("size_mb", 256)), iterations=int(params.get("iterations", 5))
    )
    th = ctx.thresholds(_model_name(ctx))
    return judge_nvlink_matrix(m, th["nvlink_pair_floor_gbps"], th["nvlink_outlier_fraction"])


# ---------------------------------------------------------------------- all_reduce


def _allreduce_worker(
    rank: int, world: int, port: int, n_bytes: int, iterations: int, backend: str, queue
) -> None:
    import os

    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        dev = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
        if backend == "nccl":
            torch.cuda.set_device(rank)
        res = _collective().timed_allreduce(n_bytes, iterations, device=dev)
        if rank == 0:
            queue.put((res.seconds, res.wrong))
    finally:
        dist.destroy_process_group()


def allreduce_busbw(
    ctx=None,
    size_mb: int = 1024,
    iterations: int = 10,
    ranks: Optional[int] = None,
    backend: Optional[str] = None,
    timeout: float = 300.0,
    cpu_size_mb: int = 8,
) -> Dict[str, Any]:
    """Single-node all_reduce: ``{"busbw_gbps", "algbw_gbps", "ranks", "seconds", "wrong", "backend"}``.

    NCCL over every CUDA GPU when there are at least 2; gloo over ``ranks`` CPU
    processes otherwise (plumbing and formula only: CPU numbers mean nothing); the
    simulated fixture's ``heavy.allreduce_busbw_gbps`` when the backend is simulated.
    """
    if ctx is not None and _simulated(ctx):
        val = ctx.backend().heavy_value("allreduce_busbw_gbps")
        if val is not None:
            return {
                "busbw_gbps": float(val),
                "ranks": len(ctx.backend().gpus()),
                "backend": "simulated",
                "wrong": 0,
            }
    torch = _torch()
    import socket

    import torch.multiprocessing as mp

    gpus = _cuda_devices(torch)
    if backend is None:
        backend = "nccl" if len(gpus) >= 2 else "gloo"
    world = ranks or (len(gpus) if backend == "nccl" else 2)
    n_bytes = (size_mb if backend == "nccl" else cpu_size_mb) * 1024 * 1024
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctxmp = mp.get_context("spawn")
    queue = ctxmp.SimpleQueue()
    procs = [
        ctxmp.Process(
            target=_allreduce_worker, args=(r, world, port, n_bytes, iterations, backend, queue), daemon=True
        )
        for r in range(world)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
    if alive or queue.empty():
        raise RuntimeError(
            f"all_reduce probe did not finish ({len(alive)} rank(s) stuck, exit codes "
            f"{[p.exitcode for p in procs]})"
        )
    seconds, wrong = queue.get()
    return {
        "busbw_gbps": _collective().busbw_gbps(n_bytes, seconds, world),
        "algbw_gbps": _collective().algbw_gbps(n_bytes, seconds),
        "ranks": world,
        "seconds": seconds,
        "wrong": wrong,
        "backend": backend,
        "bytes": n_bytes,
    }


def judge_allreduce(result: Dict[str, Any], expected_gbps: float, min_fraction: float) -> CheckResult:
    """The collective probe's judgement (:func:`slurmkit.health.checks.collective.judge`) of a
    single-node result from :func:`allreduce_busbw`."""
    return _collective().judge(
        "allreduce_busbw",
        float(result["busbw_gbps"]),
        wrong=int(result.get("wrong") or 0),
        expected=expected_gbps,
        min_fraction=min_fraction,
        where=f" over {result.get('ranks')} ranks",
        details=result,
    )


@declare.check(
    "allreduce_busbw",
    Tier.HEAVY,
    "Single-node all_reduce busbw (nccl-tests formula) against 90 % of expected.",
    codes="ALLREDUCE_BUSBW_LOW, ALLREDUCE_WRONG",
    hooks=declare.HEAVY_HOOKS,
    params={
        "size_mb": Field("int", 1024, "all_reduce message size (MiB).", min=1),
        "cpu_size_mb": Field("int", 8, "Message size with the gloo/CPU fallback (MiB).", min=1),
        "iterations": Field("int", 10, "Timed all_reduce calls.", min=1),
    },
)
def check_allreduce_busbw(ctx, params) -> CheckResult:
    res = allreduce_busbw(
        ctx,
        int(params.get("size_mb", 1024)),
        int(params.get("iterations", 10)),
        cpu_size_mb=int(params.get("cpu_size_mb", 8)),
    )
    th = ctx.thresholds(_model_name(ctx) if res["backend"] != "gloo" else "CPU")
    return judge_allreduce(res, th["allreduce_busbw_gbps"], th["allreduce_min_fraction"])


# ---------------------------------------------------------------------- GEMM and HBM


def gemm_tflops(
    device: str = "cpu", size: int = 256, iterations: int = 10, dtype: Optional[str] = None
) -> float:
    """TFLOP/s of ``size`` x ``size`` matmuls on ``device`` (bf16 on CUDA, fp32 on CPU)."""
    torch = _torch()
    dt = getattr(torch, dtype) if dtype else (torch.bfloat16 if device.startswith("cuda") else torch.float32)
    a = torch.randn(size, size, dtype=dt, device=device)
    b = torch.randn(size, size, dtype=dt, device=device)
    a @ b  # warm-up
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(iterations):
        c = a @ b
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    del c
    return 2.0 * size**3 * iterations / seconds / 1e12


def hbm_bandwidth(device: str = "cpu", size_mb: int = 32, iterations: int = 10) -> float:
    """Device-memory copy bandwidth in GB/s, read + write counted (2 x bytes / s)."""
    torch = _torch()
    n = size_mb * 1024 * 1024
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    dst.copy_(src)
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(iterations):
        dst.copy_(src)
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    return 2.0 * n * iterations / (time.perf_counter() - start) / GB


def judge_per_device(
    check: str,
    values: Dict[str, float],
    floor: float,
    max_spread: Optional[float],
    unit: str,
    low_code: str,
    spread_code: Optional[str],
) -> CheckResult:
    """Fail a device below ``floor``, or more than ``max_spread`` below the node's best device."""
    best = max(values.values())
    low = {d: v for d, v in values.items() if v < floor}
    details = {"per_device": values, "floor": floor, "best": best}
    if low:
        return CheckResult(
            check,
            Status.FAIL,
            low_code,
            ", ".join(f"{d}: {v:.1f} {unit} < {floor:g}" for d, v in sorted(low.items())),
            Action.RESET,
            value=min(values.values()),
            unit=unit,
            details=details,
        )
    if max_spread is not None and spread_code:
        slow = {d: v for d, v in values.items() if v < (1 - max_spread) * best}
        if slow:
            return CheckResult(
                check,
                Status.FAIL,
                spread_code,
                ", ".join(
                    f"{d}: {v:.1f} {unit} > {max_spread:.0%} below best {best:.1f}"
                    for d, v in sorted(slow.items())
                ),
                Action.RESET,
                value=min(values.values()),
                unit=unit,
                details=details,
            )
    return CheckResult(
        check,
        Status.OK,
        "OK",
        f"{len(values)} device(s), min {min(values.values()):.1f} {unit}",
        value=min(values.values()),
        unit=unit,
        details=details,
    )


def _per_device(ctx, fixture_key: str, measure) -> Dict[str, float]:
    if _simulated(ctx):
        vals = ctx.backend().heavy_value(fixture_key)
        if vals is not None:
            return {f"gpu{i}": float(v) for i, v in enumerate(vals)}
    torch = _torch()
    gpus = _cuda_devices(torch)
    if gpus:
        return {f"gpu{i}": measure(f"cuda:{i}", True) for i in gpus}
    return {"cpu": measure("cpu", False)}


@declare.check(
    "gemm_tflops",
    Tier.HEAVY,
    "Per-GPU GEMM TFLOP/s against a floor and the node's best GPU.",
    codes="GEMM_TFLOPS_LOW, GEMM_TFLOPS_SPREAD",
    hooks=declare.HEAVY_HOOKS,
    params={
        "size": Field("int", 8192, "Square matrix size (CPU runs use cpu_size).", min=64),
        "cpu_size": Field("int", 256, "Matrix size on CPU tensors.", min=16),
        "iterations": Field("int", 10, "Timed matmuls.", min=1),
    },
)
def check_gemm_tflops(ctx, params) -> CheckResult:
    vals = _per_device(
        ctx,
        "gemm_tflops",
        lambda dev, gpu: gemm_tflops(
            dev, int(params.get("size" if gpu else "cpu_size", 256)), int(params.get("iterations", 10))
        ),
    )
    th = ctx.thresholds("CPU" if "cpu" in vals else _model_name(ctx))
    return judge_per_device(
        "gemm_tflops",
        vals,
        th["gemm_min_tflops"],
        th["gemm_max_spread"],
        "TFLOP/s",
        "GEMM_TFLOPS_LOW",
        "GEMM_TFLOPS_SPREAD",
    )


@declare.check(
    "hbm_bandwidth",
    Tier.HEAVY,
    "Per-GPU device-memory copy bandwidth against a floor.",
    codes="HBM_BW_LOW",
    hooks=declare.HEAVY_HOOKS,
    params={
        "size_mb": Field("int", 2048, "Bytes copied per iteration (MiB).", min=1),
        "cpu_size_mb": Field("int", 32, "Bytes per copy on CPU tensors (MiB).", min=1),
        "iterations": Field("int", 10, "Timed copies.", min=1),
    },
)
def check_hbm_bandwidth(ctx, params) -> CheckResult:
    vals = _per_device(
        ctx,
        "hbm_gbps",
        lambda dev, gpu: hbm_bandwidth(
            dev, int(params.get("size_mb" if gpu else "cpu_size_mb", 32)), int(params.get("iterations", 10))
        ),
    )
    th = ctx.thresholds("CPU" if "cpu" in vals else _model_name(ctx))
    return judge_per_device("hbm_bandwidth", vals, th["hbm_min_gbps"], None, "GB/s", "HBM_BW_LOW", None)
