"""One-shot check of slurmkit_kernels on an H100/H200, built to survive a single GPU run.

    $ bash benchmarks/gpu_check.sh                    # GPU machine; under 8 minutes
    $ python benchmarks/gpu_check.py --cpu-smoke      # the same phases on CPU (interpreter, tiny shapes)

Phases, each a **separate process with its own deadline** (``timeout``), so a hang or a
crash loses only the phase it happens in:

1. ``versions``: GPU, driver, Python, torch, triton, CUDA, cuDNN (exit 2 without a GPU).
2. ``prewarm``: compiles, in parallel processes, exactly the kernels the next two phases
   launch (the portable kernels and the Hopper kernels with ``deterministic=True``, for
   their shapes and dtypes: nothing else), through ``slurmkit_kernels.compile_check``,
   which also reports spills, so the measured phases find every kernel in the Triton cache.
3. ``correctness``: its budget starts after the prewarm. Output, dQ, dK, dV of the
   portable path (fp16, bf16, fp32) and the Hopper path (fp16, bf16), d64 and d128, full
   and causal, on a block-multiple, a ragged and an unequal-length GQA 4:1 shape, against
   float64 by the tests' error budget (at most 2x naive same-dtype attention + a floor).
4. ``gluon``: the same check for the opt-in warp-specialised Gluon forward
   (``SLURMKIT_KERNELS_GLUON=1`` with ``hopper=True``; fp16, bf16, d128, the three shapes,
   full and causal; its backward is the Hopper one). A phase of its own, because this
   kernel has never run on a GPU before: a hang (mbarrier deadlock) costs only this phase.
   The CPU smoke run cannot run it (Triton's interpreter does not run Gluon kernels) and
   records that instead.
5. ``throughput``: forward and forward+backward TFLOP/s of the Hopper path next to the
   portable one and SDPA's flash and cuDNN back ends, most important rows first (bf16,
   d128, non-causal, 8k and 16k tokens: the issue's goal), then the rest of bf16/fp16 x
   d64/d128 x causal x 1k-16k at 16k tokens per batch and ``H * D = 2048``. The Gluon
   forward is timed too (d128 rows), but only if every ``gluon`` correctness case passed.
6. ``summary``: a markdown table ``kernels-<gpu>.md`` and a short summary, printed last.

Every result is appended to ``<out-dir>/gpu_check.jsonl`` (one JSON object a line, flushed)
the moment it is measured; each phase's own output goes to ``<out-dir>/<phase>.log``.
``<out-dir>`` is ``--out-dir``, else ``$OUT`` (the folder a lent GPU machine sends back),
else ``./out``.

FLOPs (``slurmkit_kernels.attention_flops``, the convention of Triton's tutorial and
FlashAttention's benchmarks): forward ``4 * B * H * Nq * Nk * D``, x 0.5 when causal;
forward+backward 3.5x the forward; ``H`` counts query heads.

Exit code: 0 everything passed; 1 a check failed, a phase timed out or crashed; 2 no GPU
(without ``--cpu-smoke``) or bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNELS_SRC = HERE.parent / "kernels"
RESULTS = "gpu_check.jsonl"
ERROR_FLOOR = {"float32": 1e-6, "float16": 1e-4, "bfloat16": 1e-3}
FLOP_RULE = (
    "FLOPs: forward 4*B*H*Nq*Nk*D (x0.5 when causal), forward+backward 3.5x forward, "
    "H = query heads (slurmkit_kernels.attention_flops)"
)
PHASES = ("versions", "prewarm", "correctness", "gluon", "throughput")
# Seconds each phase may use at most (a phase ends earlier when done; the rest carries
# over to the next). Throughput gets whatever is left, minus the summary's reserve.
PHASE_CAP_S = {"versions": 60, "prewarm": 200, "correctness": 100, "gluon": 60}
SUMMARY_RESERVE_S = 15
PROVIDERS = ("hopper", "portable", "sdpa-flash", "sdpa-cudnn", "gluon")
# The opt-in Gluon forward's switch (slurmkit_kernels.attention.GLUON_ENV), set only
# around the calls that measure or check it.
GLUON_ENV = "SLURMKIT_KERNELS_GLUON"


class Plan:
    """Shapes of one run: the GPU's or the CPU smoke run's."""

    def __init__(self, cpu_smoke: bool):
        self.cpu_smoke = cpu_smoke
        if cpu_smoke:
            self.device = "cpu"
            self.corr = [
                ("portable", "float32", 16, (1, 2, 2, 33, 33)),
                ("portable", "bfloat16", 16, (1, 4, 1, 17, 40)),
                ("hopper", "bfloat16", 16, (1, 4, 1, 17, 40)),
                ("hopper", "float16", 16, (1, 2, 2, 33, 33)),
            ]
            self.rows = [("bfloat16", 16, False, 32), ("float16", 16, True, 32)]
            self.tokens, self.hidden = 64, 32
            # The interpreter does not run Gluon kernels: nothing to check on a CPU.
            self.gluon_corr = []
        else:
            self.device = "cuda"
            shapes = [(2, 4, 4, 1024, 1024), (1, 4, 4, 1000, 1000), (1, 8, 2, 333, 1021)]
            self.corr = [
                (path, dtype, d, shape)
                for d in (128, 64)
                for path, dtypes in (("hopper", ("bfloat16", "float16")), ("portable", DTYPES_PORTABLE))
                for dtype in dtypes
                for shape in shapes
            ]
            self.gluon_corr = [
                ("gluon", dtype, 128, shape) for dtype in ("bfloat16", "float16") for shape in shapes
            ]
            # The goal's rows first (bf16 d128 non-causal, 8k-16k), then by importance.
            self.rows = [("bfloat16", 128, False, n) for n in (8192, 16384, 4096, 2048, 1024)]
            self.rows += [("bfloat16", 128, True, n) for n in (8192, 16384, 4096, 2048, 1024)]
            self.rows += [
                ("bfloat16", 64, c, n) for c in (False, True) for n in (8192, 16384, 4096, 2048, 1024)
            ]
            self.rows += [
                ("float16", d, c, n) for d in (128, 64) for c in (False, True) for n in (8192, 2048)
            ]
            self.tokens, self.hidden = 16384, 2048

    def row_shape(self, d: int, n: int) -> tuple[int, int]:
        """(batch, heads) of a throughput row: ``tokens`` per batch and ``H * D = hidden``."""
        return max(1, self.tokens // n), max(1, self.hidden // d)


DTYPES_PORTABLE = ("bfloat16", "float16", "float32")


# ----------------------------------------------------------------------------- records


class Results:
    """Appends one JSON object per line to ``<out-dir>/gpu_check.jsonl``, flushed at once."""

    def __init__(self, out_dir: Path, phase: str):
        self.path = out_dir / RESULTS
        self.phase = phase

    def add(self, kind: str, **fields) -> None:
        record = {"phase": self.phase, "kind": kind, "t": round(time.time(), 1), **fields}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())


def read_results(out_dir: Path) -> list[dict]:
    path = out_dir / RESULTS
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a line cut by a kill
            records.append(json.loads(line))
    return records


# ----------------------------------------------------------------------------- phases


def _import_torch(cpu_smoke: bool):
    if cpu_smoke and "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"  # must precede the first triton import
    import torch

    if str(KERNELS_SRC) not in sys.path:
        sys.path.insert(0, str(KERNELS_SRC))  # a checkout without `pip install -e kernels/`
    return torch


def phase_versions(plan: Plan, results: Results, deadline: float) -> int:
    torch = _import_torch(plan.cpu_smoke)
    import platform

    import triton

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }
    if plan.cpu_smoke:
        env["gpu"] = "CPU (Triton interpreter smoke run)"
    elif not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA GPU", file=sys.stderr)
        results.add("environment", no_gpu=True, **env)
        return 2
    else:
        props = torch.cuda.get_device_properties(0)
        env.update(
            gpu=torch.cuda.get_device_name(0),
            capability=f"{props.major}.{props.minor}",
            sm_count=props.multi_processor_count,
        )
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            env["nvidia_smi"] = subprocess.run(
                [
                    "nvidia-smi",
                    "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit",
                    "--format=csv,noheader",
                ],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
        from slurmkit_kernels import config_for_device

        env["kernel_config"] = config_for_device(env["gpu"]).name
    env["flops"] = FLOP_RULE
    results.add("environment", **env)
    print(", ".join(f"{k} {v}" for k, v in env.items()), flush=True)
    return 0


def launches_of(path: str, problem, config, arch: int) -> None:
    """Run ``flash_attention``'s host code for ``problem`` on meta tensors exactly as the
    measured phases call it: ``path`` "portable" (``hopper=False``) or "hopper"
    (``hopper=True``, ``deterministic=True``, the defaults of a Hopper run), or "gluon"
    (the Gluon forward alone: its backward is the Hopper path's, prewarmed there)."""
    import torch

    from slurmkit_kernels import attention

    dtype = getattr(torch, problem.dtype)
    q = torch.empty(
        (problem.batch, problem.heads_q, problem.seq_q, problem.head_dim), dtype=dtype, device="meta"
    )
    k, v = (
        torch.empty(
            (problem.batch, problem.heads_kv, problem.seq_k, problem.head_dim), dtype=dtype, device="meta"
        )
        for _ in range(2)
    )
    band = attention._band(problem.causal, None, problem.seq_q, problem.seq_k)
    scale = problem.head_dim**-0.5
    if path == "gluon":
        attention._forward(q, k, v, band, scale, problem.precision, config, True, True)
        return
    hopper = path == "hopper"
    o, lse = attention._forward(q, k, v, band, scale, problem.precision, config, hopper)
    attention._backward(
        torch.empty_like(o), q, k, v, o, lse, band, scale, problem.precision, config, hopper, True
    )


def _prewarm_group(device_name: str | None, path: str, problems: list, arch: int) -> list[dict]:
    """Worker: compile every launch of ``problems`` on ``path`` into the shared Triton cache."""
    if str(KERNELS_SRC) not in sys.path:
        sys.path.insert(0, str(KERNELS_SRC))
    from slurmkit_kernels import compile_check, config_for_device

    config = config_for_device(device_name)  # what flash_attention picks on this GPU
    kset = compile_check.KernelSet(path, lambda p, c, a: launches_of(path, p, c, a))
    rows = compile_check.check([kset], [config], problems, arch)
    return [
        {
            "kernel": f"{r.kernel_set}/{r.kernel}",
            "dtype": r.dtype,
            "d": r.head_dim,
            "tiles": r.tiles,
            "warps": r.num_warps,
            "stages": r.num_stages,
            "regs": r.regs,
            "spill": r.spill_stores + r.spill_loads,
            "smem": r.smem,
            "wgmma": r.wgmma,
            "tma": r.tma,
            "seconds": round(r.seconds, 1),
            "result": r.result,
        }
        for r in rows
    ]


def prewarm_problems(plan: Plan) -> dict[tuple[str, str, int], list]:
    """{(path, dtype, head dim): [compile_check.Problem]} of every call the next phases make."""
    sys.path.insert(0, str(KERNELS_SRC))
    from slurmkit_kernels.compile_check import Problem

    groups: dict[tuple[str, str, int], list] = {}
    for path, dtype, d, (b, hq, hkv, nq, nk) in plan.corr + plan.gluon_corr:
        for causal in (False, True):
            groups.setdefault((path, dtype, d), []).append(
                Problem(b, hq, hkv, nq, nk, d, causal, dtype, "ieee")
            )
    for dtype, d, causal, n in plan.rows:
        b, h = plan.row_shape(d, n)
        for path in ("hopper", "portable") + (("gluon",) if d == 128 else ()):
            groups.setdefault((path, dtype, d), []).append(Problem(b, h, h, n, n, d, causal, dtype, "ieee"))
    if plan.cpu_smoke:
        # The compiler is slow on a shared CPU: one group shows the phase works, and one
        # Gluon forward that the sm_90 compile of the warp-specialised kernel works (it is
        # compiled here, never run: the interpreter does not run Gluon).
        gluon = Problem(1, 2, 2, 256, 256, 128, False, "bfloat16", "ieee")
        return {
            ("hopper", "bfloat16", 16): groups[("hopper", "bfloat16", 16)][:1],
            ("gluon", "bfloat16", 128): [gluon],
        }
    return groups


def phase_prewarm(plan: Plan, results: Results, deadline: float) -> int:
    """Compile, in parallel processes, what the correctness and throughput phases launch."""
    import concurrent.futures
    import multiprocessing

    if plan.cpu_smoke:
        os.environ.pop("TRITON_INTERPRET", None)
        device_name, arch = None, 90
    else:
        torch = _import_torch(False)
        major, minor = torch.cuda.get_device_capability(0)
        device_name, arch = torch.cuda.get_device_name(0), 10 * major + minor
    groups = prewarm_problems(plan)
    workers = max(1, min(len(groups), os.cpu_count() or 1, 16))
    failures = 0
    ctx = multiprocessing.get_context("spawn")  # no CUDA state is inherited
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {
            pool.submit(_prewarm_group, device_name, *key[:1], problems, arch): key
            for key, problems in groups.items()
        }
        for future in concurrent.futures.as_completed(futures):
            path, dtype, d = futures[future]
            try:
                rows = future.result()
            except Exception as e:  # noqa: BLE001 (record, go on with the other groups)
                failures += 1
                results.add("compile_error", path=path, dtype=dtype, d=d, error=f"{type(e).__name__}: {e}")
                continue
            for row in rows:
                failures += row["result"] != "ok"
                results.add("compile", **row)
                print(json.dumps(row), flush=True)
    print(f"prewarm: {len(groups)} groups, {failures} failure(s)", flush=True)
    return 1 if failures else 0


def naive_attention(q, k, v, causal, scale):
    """Plain attention in the inputs' dtype; bottom-right causal mask as flash_attention's."""
    import torch

    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        n_q, n_k = s.shape[-2:]
        i = torch.arange(n_q, device=s.device)[:, None]
        j = torch.arange(n_k, device=s.device)[None, :]
        s = s.masked_fill(j > i + (n_k - n_q), float("-inf"))
    return torch.softmax(s, -1) @ v


@contextlib.contextmanager
def gluon_switch(on: bool):
    """``SLURMKIT_KERNELS_GLUON=1`` inside the block when ``on`` (the Gluon forward's opt-in),
    unset otherwise, so the Hopper rows never pick it up; the previous value is restored."""
    previous = os.environ.get(GLUON_ENV)
    if on:
        os.environ[GLUON_ENV] = "1"
    else:
        os.environ.pop(GLUON_ENV, None)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(GLUON_ENV, None)
        else:
            os.environ[GLUON_ENV] = previous


def path_taken(attention, q, k, v, scale: float, path: str) -> str:
    """Which kernels ``flash_attention`` runs for ``path`` ("portable", "hopper", "gluon")."""
    hopper = path != "portable"
    if not attention._use_hopper(q, k, v, scale, hopper):
        return "portable"
    with gluon_switch(path == "gluon"):
        return "gluon" if attention._use_gluon(q, k, v) else "hopper"


def phase_correctness(plan: Plan, results: Results, deadline: float) -> int:
    return check_cases(plan, results, deadline, plan.corr)


def phase_gluon(plan: Plan, results: Results, deadline: float) -> int:
    """The Gluon forward's correctness cases (see the module docstring)."""
    if plan.cpu_smoke:
        results.add("note", text="gluon: not run on a CPU (Triton's interpreter does not run Gluon kernels)")
        print("gluon: not run on a CPU (Triton's interpreter does not run Gluon kernels)", flush=True)
        return 0
    return check_cases(plan, results, deadline, plan.gluon_corr)


def check_cases(plan: Plan, results: Results, deadline: float, cases: list) -> int:
    """Output, dQ, dK, dV of each (path, dtype, d, shape) case, full and causal, vs float64."""
    torch = _import_torch(plan.cpu_smoke)
    from slurmkit_kernels import attention, flash_attention
    from slurmkit_kernels.config import HOPPER_KERNEL_NAMES, builtin_config, parse_config

    config = None  # the GPU's shipped config, as a job gets it
    if plan.cpu_smoke:
        # Small Hopper tiles: several key blocks per query block (the staged loops and the
        # dQ semaphore run) at the smoke run's lengths.
        data = builtin_config("default").to_dict()
        small = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 2}
        data["kernels"].update({name: {"default": small} for name in HOPPER_KERNEL_NAMES})
        config = parse_config(data, source="gpu_check --cpu-smoke")
    failures = 0
    for path, dtype_name, d, (b, hq, hkv, nq, nk) in cases:
        dtype = getattr(torch, dtype_name)
        for causal in (False, True):
            case = dict(path=path, dtype=dtype_name, d=d, causal=causal, B=b, Hq=hq, Hkv=hkv, Nq=nq, Nk=nk)
            if time.monotonic() > deadline:
                failures += 1
                results.add("correctness", status="not run (time budget)", **case)
                continue
            gen = torch.Generator(device="cpu").manual_seed(nq * 31 + nk)
            q, k, v = (
                torch.randn(shape, generator=gen).to(plan.device, dtype).requires_grad_()
                for shape in ((b, hq, nq, d), (b, hkv, nk, d), (b, hkv, nk, d))
            )
            do = torch.randn((b, hq, nq, d), generator=gen).to(plan.device, dtype)
            scale = 1.0 / math.sqrt(d)
            hopper = path != "portable"
            try:
                ran = path_taken(attention, q, k, v, scale, path)
                with gluon_switch(path == "gluon"):
                    out = flash_attention(q, k, v, causal=causal, hopper=hopper, config=config)
                    got = (out, *torch.autograd.grad(out, (q, k, v), do))
                    if plan.device == "cuda":
                        torch.cuda.synchronize()
                same_out = naive_attention(q, k, v, causal, scale)
                same = (same_out, *torch.autograd.grad(same_out, (q, k, v), do))
                q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
                ref_out = naive_attention(q64, k64, v64, causal, scale)
                ref = (ref_out, *torch.autograd.grad(ref_out, (q64, k64, v64), do.double()))
                floor = ERROR_FLOOR[dtype_name] * max(r.abs().max().item() for r in ref)
                ratios, ok = {}, ran == path
                for name, g, s_, r in zip(("out", "dq", "dk", "dv"), got, same, ref):
                    err = (g.double() - r).abs().max().item()
                    torch_err = (s_.double() - r).abs().max().item()
                    ratios[name] = round(err / (2 * torch_err + floor), 3)
                    ok &= bool(err <= 2 * torch_err + floor and torch.isfinite(g).all())
                status = "ok" if ok else ("FAIL" if ran == path else f"FAIL (ran {ran})")
            except Exception as e:  # noqa: BLE001 (record, continue with the next case)
                ratios, status = {}, f"FAIL {type(e).__name__}: {e}"
            failures += status != "ok"
            results.add("correctness", status=status, error_over_budget=ratios, **case)
            print(f"{status} {case} {ratios}", flush=True)
    return 1 if failures else 0


def _ours(flash_attention, q, k, v, causal: bool, path: str):
    """A zero-argument forward of slurmkit's kernels on one path ("hopper", "portable",
    "gluon": the Hopper path with the Gluon forward switched on for the call)."""

    def call():
        with gluon_switch(path == "gluon"):
            return flash_attention(q, k, v, causal=causal, hopper=path != "portable")

    return call


def gluon_checked(records: list[dict]) -> bool:
    """Whether the ``gluon`` phase checked the Gluon forward and every case passed."""
    cases = [r for r in records if r["kind"] == "correctness" and r.get("path") == "gluon"]
    return bool(cases) and all(r["status"] == "ok" for r in cases)


def phase_throughput(plan: Plan, results: Results, deadline: float) -> int:
    torch = _import_torch(plan.cpu_smoke)
    import triton

    from slurmkit_kernels import attention, attention_flops, flash_attention

    spec = importlib.util.spec_from_file_location("attention_benchmark", HERE / "attention.py")
    bench_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_mod)
    if plan.cpu_smoke:

        def timer(fn, grad_to_none=None):
            t = time.perf_counter()
            fn()
            return (time.perf_counter() - t) * 1e3
    else:

        def timer(fn, grad_to_none=None):
            return triton.testing.do_bench(
                fn, warmup=25, rep=60, grad_to_none=grad_to_none, return_mode="median"
            )

    failures = 0
    # Never time a kernel whose results no run has checked.
    gluon_ok = gluon_checked(read_results(results.path.parent))
    for dtype_name, d, causal, n in plan.rows:
        b, h = plan.row_shape(d, n)
        row = dict(dtype=dtype_name, d=d, causal=causal, N=n, B=b, H=h)
        if time.monotonic() > deadline:
            results.add("throughput", provider="-", status="not run (time budget)", **row)
            continue
        gen = torch.Generator(device=plan.device).manual_seed(0)
        q, k, v = (
            torch.randn(
                (b, h, n, d), generator=gen, device=plan.device, dtype=getattr(torch, dtype_name)
            ).requires_grad_()
            for _ in range(3)
        )
        for provider in PROVIDERS:
            record = dict(provider=provider, **row)
            try:
                if provider == "gluon" and not gluon_ok:
                    results.add("throughput", status="n/a", reason="gluon correctness not passed", **record)
                    continue
                if provider in ("hopper", "portable", "gluon"):
                    record["path"] = path_taken(attention, q, k, v, 1.0 / math.sqrt(d), provider)
                    if provider == "gluon" and record["path"] != "gluon":
                        results.add("throughput", status="n/a", **record)  # not a d128 fp16/bf16 row
                        continue
                    call = _ours(flash_attention, q, k, v, causal, provider)
                else:
                    call = bench_mod.make_call(provider, q, k, v, causal, torch, flash_attention)
                if call is None:
                    results.add("throughput", status="n/a", **record)
                    continue
                err = bench_mod.check_against_sdpa(call().detach(), q, k, v, causal, torch)
                if not err <= 0.05:  # never time a wrong kernel (NaN fails too)
                    raise RuntimeError(f"output differs from SDPA by {err:.3g}")
                for mode in ("fwd", "fwd_bwd"):
                    ms = bench_mod.time_mode(mode, call, [q, k, v], torch, timer)
                    flops = attention_flops(b, h, n, n, d, causal, mode)
                    tflops = flops / (ms * 1e-3) / 1e12
                    results.add("throughput", status="ok", mode=mode, ms=ms, tflops=tflops, **record)
                    print(f"{provider} {mode} {row}: {tflops:.4g} TFLOP/s", flush=True)
            except Exception as e:  # noqa: BLE001 (record, go on with the other providers)
                failures += 1
                results.add("throughput", status=f"error {type(e).__name__}: {e}", **record)
        del q, k, v
    return 1 if failures else 0


# ----------------------------------------------------------------------------- summary


def _fmt(x) -> str:
    if not isinstance(x, float):
        return "n/a" if x is None else str(x)
    return f"{x:.1f}" if x >= 1 else f"{x:.2g}"  # CPU smoke runs are far below 1 TFLOP/s


def _ratio(a, b) -> str:
    return f"{a / b:.2f}" if isinstance(a, float) and isinstance(b, float) and b > 0 else "-"


def summarize(records: list[dict]) -> tuple[str, list[str], int]:
    """(markdown table, short summary lines, exit status) from the results file."""
    env = next((r for r in records if r["kind"] == "environment"), {})
    phases = {r["name"]: r for r in records if r["kind"] == "phase"}
    compiles = [r for r in records if r["kind"] in ("compile", "compile_error")]
    corr = [r for r in records if r["kind"] == "correctness"]
    thr = [r for r in records if r["kind"] == "throughput"]
    cells: dict[tuple, dict] = {}
    for r in thr:
        key = (r["dtype"], r["d"], r["causal"], r["N"], r["B"], r["H"])
        entry = cells.setdefault(key, {})
        if r["status"] == "ok":
            entry[(r["provider"], r["mode"])] = float(r["tflops"])
        elif r["provider"] != "-":
            for mode in ("fwd", "fwd_bwd"):
                entry.setdefault((r["provider"], mode), "n/a" if r["status"] == "n/a" else "error")
    failed_compiles = [r for r in compiles if r.get("result") != "ok"]
    failed_corr = [r for r in corr if r["status"] != "ok"]
    failed_thr = [r for r in thr if r["status"].startswith("error")]
    skipped = [r for r in thr if r["status"].startswith("not run")]
    bad_phases = [p for p in phases.values() if p["status"] != "ok"]
    # Throughput rows the budget left out are listed, not failures; everything else fails.
    status = 1 if (failed_compiles or failed_corr or failed_thr or bad_phases) else 0
    if any(p.get("exit") == 2 for p in phases.values()):
        status = 2

    gpu = env.get("gpu", "?")
    head = ["dtype", "d", "causal", "N", "B", "H", "mode", "hopper", "portable", "sdpa-flash", "sdpa-cudnn"]
    head += ["hopper x cuDNN", "hopper x flash", "hopper x portable", "gluon", "gluon x cuDNN"]
    md = [
        f"# slurmkit_kernels on {gpu}",
        "",
        "Written by `bash benchmarks/gpu_check.sh` (results file `gpu_check.jsonl`). "
        + ", ".join(
            f"{k} {env[k]}" for k in ("torch", "triton", "cuda", "cudnn", "python", "nvidia_smi") if k in env
        )
        + ".",
        "",
        f"TFLOP/s. {FLOP_RULE}. `x`: the Hopper path's TFLOP/s divided by the other's.",
        "",
        f"Correctness (portable, Hopper and Gluon paths, output/dQ/dK/dV vs float64, 2x torch's error): "
        f"{len(corr) - len(failed_corr)} of {len(corr)} cases ok.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for key, entry in cells.items():
        dtype, d, causal, n, b, h = key
        for mode in ("fwd", "fwd_bwd"):
            hop, port, flash, cudnn, gluon = (entry.get((p, mode)) for p in PROVIDERS)
            row = [dtype, str(d), "yes" if causal else "no", str(n), str(b), str(h), mode]
            row += [_fmt(hop), _fmt(port), _fmt(flash), _fmt(cudnn)]
            row += [
                _ratio(hop, cudnn),
                _ratio(hop, flash),
                _ratio(hop, port),
                _fmt(gluon),
                _ratio(gluon, cudnn),
            ]
            md.append("| " + " | ".join(row) + " |")
    for title, items in (
        (
            "Compile failures",
            [
                f"{r.get('kernel', r.get('path'))} {r.get('dtype')} d{r.get('d')}: {r.get('result', r.get('error'))}"
                for r in failed_compiles
            ],
        ),
        (
            "Correctness failures",
            [
                f"{r['path']} {r['dtype']} d{r['d']} {'causal' if r['causal'] else 'full'} {r['B']}x{r['Hq']}/{r['Hkv']}x{r['Nq']}/{r['Nk']}: {r['status']} {r.get('error_over_budget', '')}"
                for r in failed_corr
            ],
        ),
        (
            "Throughput errors",
            [f"{r['provider']} {r['dtype']} d{r['d']} N{r['N']}: {r['status']}" for r in failed_thr],
        ),
        (
            "Not run (time budget)",
            [f"{r['dtype']} d{r['d']} {'causal' if r['causal'] else 'full'} N{r['N']}" for r in skipped],
        ),
        ("Phases not ok", [f"{p['name']}: {p['status']}" for p in bad_phases]),
    ):
        if items:
            md += ["", f"{title}:"] + [f"- {i}" for i in items]

    summary = [f"gpu_check summary: {gpu}, torch {env.get('torch', '?')}, triton {env.get('triton', '?')}"]
    summary.append(
        "phases: " + ", ".join(f"{p['name']} {p['status']} ({p['seconds']:.0f} s)" for p in phases.values())
    )
    summary.append(
        f"compiled {len(compiles)} kernels ({len(failed_compiles)} failed); correctness "
        f"{len(corr) - len(failed_corr)}/{len(corr)} ok; throughput rows {len(cells)} measured, "
        f"{len(skipped)} not run, {len(failed_thr)} provider errors"
    )
    for key, entry in list(cells.items())[:4]:
        dtype, d, causal, n, _, _ = key
        parts = [f"{p} {_fmt(entry.get((p, 'fwd')))}" for p in PROVIDERS]
        summary.append(f"{dtype} d{d} {'causal' if causal else 'full'} N{n} fwd TFLOP/s: " + ", ".join(parts))
    summary.append(FLOP_RULE)
    return "\n".join(md) + "\n", summary, status


# ----------------------------------------------------------------------------- driver


def out_dir_default() -> str:
    return os.environ.get("OUT") or "out"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-smoke", action="store_true", help="every phase on CPU: interpreter, tiny shapes")
    p.add_argument("--out-dir", default=None, help="results folder (default: $OUT, else ./out)")
    p.add_argument("--budget-s", type=float, default=450.0, help="seconds for all phases together")
    p.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)  # one phase (run by the driver)
    p.add_argument("--deadline", type=float, help=argparse.SUPPRESS)  # time.time() the phase must end by
    return p.parse_args(argv)


def run_phase(args, out_dir: Path) -> int:
    plan = Plan(args.cpu_smoke)
    results = Results(out_dir, args.phase)
    # The phase's own soft deadline (stop starting work), on the monotonic clock; the
    # driver's timeout is the hard one.
    deadline = time.monotonic() + max(0.0, (args.deadline or math.inf) - time.time())
    return {
        "versions": phase_versions,
        "prewarm": phase_prewarm,
        "correctness": phase_correctness,
        "gluon": phase_gluon,
        "throughput": phase_throughput,
    }[args.phase](plan, results, deadline)


def main(argv=None) -> int:
    args = parse_args(argv)
    out_dir = Path(args.out_dir or out_dir_default())
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.phase:
        return run_phase(args, out_dir)

    start = time.time()
    end = start + args.budget_s
    driver = Results(out_dir, "driver")
    driver.add(
        "start", budget_s=args.budget_s, cpu_smoke=args.cpu_smoke, argv=sys.argv[1:] if argv is None else argv
    )
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(KERNELS_SRC), env.get("PYTHONPATH")]))
    for phase in PHASES:
        left = end - SUMMARY_RESERVE_S - time.time()
        hard = left if phase == "throughput" else min(PHASE_CAP_S[phase], left)
        if hard < 5:
            driver.add("phase", name=phase, status="not run (time budget)", seconds=0.0)
            continue
        # The phase stops starting work 10% (at least 5 s) before its hard timeout.
        soft_deadline = time.time() + hard - max(5.0, 0.1 * hard)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--phase", phase, "--out-dir", str(out_dir)]
        cmd += ["--deadline", f"{soft_deadline:.1f}"] + (["--cpu-smoke"] if args.cpu_smoke else [])
        print(f"== {phase} (at most {hard:.0f} s; log {out_dir / (phase + '.log')})", flush=True)
        t0 = time.time()
        with open(out_dir / f"{phase}.log", "a", encoding="utf-8") as log:
            try:
                rc = subprocess.run(
                    cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=hard
                ).returncode
                status = "ok" if rc == 0 else f"exit {rc}"
            except subprocess.TimeoutExpired:
                rc, status = None, f"timed out after {hard:.0f} s"
        driver.add("phase", name=phase, status=status, exit=rc, seconds=round(time.time() - t0, 1))
        print(f"   {phase}: {status} ({time.time() - t0:.0f} s)", flush=True)
        if phase == "versions" and rc == 2:
            print((out_dir / "versions.log").read_text(encoding="utf-8")[-2000:], file=sys.stderr)
            break
    table, summary, status = summarize(read_results(out_dir))
    records = read_results(out_dir)
    gpu = next((r.get("gpu", "") for r in records if r["kind"] == "environment"), "")
    sku = next((s for s in ("H200", "H100") if s in gpu), "cpu-smoke" if args.cpu_smoke else "gpu")
    table_path = out_dir / f"kernels-{sku.lower()}.md"
    table_path.write_text(table, encoding="utf-8")
    print(f"== results: {out_dir / RESULTS}, table: {table_path}")
    print("\n".join(summary))
    print(f"== gpu_check: exit {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())
