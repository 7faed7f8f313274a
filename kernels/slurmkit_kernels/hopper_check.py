"""Compile the Hopper kernels for sm_90 without a GPU and check what makes them fast.

    $ python -m slurmkit_kernels.hopper_check [--dtypes bfloat16 float16] [--head-dims 64 128]

For each Hopper kernel (``_hopper.py``), head dim and dtype, this builds the exact launch
of ``_hopper.forward_launch`` / ``backward_launch`` from meta tensors (no memory, no GPU),
lets Triton specialise the arguments the way its JIT does at launch (divisibility by 16,
ints equal to 1 as constants, tensor-descriptor block types), compiles to a cubin with
the ptxas bundled in the triton wheel, and reports registers per thread, spilled bytes,
shared memory, the number of wgmma and TMA instructions in the PTX, and the release
increments of the deterministic backward's dQ semaphore (0 in the non-deterministic one). Exit code 1 if
any kernel fails to compile, spills, exceeds sm_90's 227 KB of shared memory per block,
or lacks wgmma or TMA instructions (then it would not be the Hopper path it claims to
be). Must run without ``TRITON_INTERPRET=1`` (exit code 2 otherwise).
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import subprocess
import sys
import tempfile

from .compile_check import count_instructions

SMEM_LIMIT_SM90 = 232448
DTYPES = ("bfloat16", "float16")
HEAD_DIMS = (16, 32, 64, 128)
# Shape of the meta tensors: lengths that are multiples of 16 (as in the benchmark), so
# the specialisation matches a typical training call; the code is the same for others.
_SHAPE = (2, 4, 1024)


def _ptxas_stats(log: str) -> tuple[int, int]:
    """(registers, spilled bytes) from ptxas -v output."""
    regs = re.search(r"Used (\d+) registers", log)
    stores = re.search(r"(\d+) bytes spill stores", log)
    loads = re.search(r"(\d+) bytes spill loads", log)
    if not regs:
        raise RuntimeError(f"no register count in the ptxas log: {log[:300]!r}")
    return int(regs.group(1)), max(int(stores.group(1)) if stores else 0, int(loads.group(1)) if loads else 0)


def _ptxas_log(ptx: str, arch: int) -> str:
    """ptxas -v output for the PTX, with the flags Triton compiles with (also for cached kernels,
    whose compile did not run ptxas)."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.ptx")
        with open(path, "w", encoding="utf-8") as f:
            f.write(ptx)
        proc = subprocess.run(
            [
                get_ptxas(arch).path,
                "-lineinfo",
                "-v",
                "--regAllocOptLevel=2",
                f"--gpu-name={sm_arch_from_capability(arch)}",
                path,
                "-o",
                os.path.join(tmp, "kernel.cubin"),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
    return proc.stdout + proc.stderr


def compile_launch(kernel, args, kwargs, arch: int = 90) -> dict:
    """Compile ``kernel[grid](*args, **kwargs)`` for ``sm_<arch>`` as the JIT would; return stats.

    Arguments are specialised by Triton's own ``native_specialize_impl`` (what the launcher
    binder calls), so the signature, constants and alignment attributes are the launch's.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler import ASTSource
    from triton.runtime.jit import native_specialize_impl

    options = {key: kwargs[key] for key in ("num_warps", "num_stages") if key in kwargs}
    values = {key: val for key, val in kwargs.items() if key not in options}
    bound = inspect.signature(kernel.fn).bind(*args, **values)
    signature, constexprs, attrs = {}, {}, {}
    for index, param in enumerate(kernel.params):
        value = bound.arguments[param.name]
        if param.is_constexpr:
            signature[param.name] = "constexpr"
            constexprs[(index,)] = value
            continue
        kind, spec = native_specialize_impl(CUDABackend, value, False, True, True)
        signature[param.name] = kind
        if kind == "constexpr":
            constexprs[(index,)] = spec
        elif isinstance(spec, str):
            attrs[(index,)] = CUDABackend.parse_attr(spec)
    src = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    regs, spills = _ptxas_stats(_ptxas_log(compiled.asm["ptx"], arch))
    ptx = compiled.asm["ptx"]
    return {
        "registers": regs,
        "spill_bytes": spills,
        "shared": compiled.metadata.shared,
        "wgmma": count_instructions(ptx, "wgmma.mma_async"),
        "tma": count_instructions(ptx, "cp.async.bulk.tensor"),
        # Release increments of the deterministic backward's dQ semaphore.
        "sem": count_instructions(ptx, "atom.global.gpu.release.add"),
        "num_warps": compiled.metadata.num_warps,
    }


def hopper_launches(dtype_name: str, head_dim: int, config_name: str = "h100"):
    """[(name, kernel, args, kwargs)] of the Hopper kernels for one dtype and head dim with a
    shipped config's ``hopper_*`` tiles, built by the same functions the dispatcher launches
    through, on meta tensors."""
    import torch

    from . import _hopper, attention
    from .config import builtin_config

    dtype = getattr(torch, dtype_name)
    batch, heads, seq = _SHAPE

    def meta(*shape, dt=dtype):
        return torch.empty(shape, dtype=dt, device="meta")

    q, k, v, o, do = (meta(batch, heads, seq, head_dim) for _ in range(5))
    lse, delta = meta(batch, heads, seq, dt=torch.float32), meta(batch, heads, seq, dt=torch.float32)
    full, causal = (-(2**30), 2**30), (-(2**30), 0)
    qk_scale = head_dim**-0.5 * 1.4426950408889634
    config = builtin_config(config_name)
    fwd_tiles = attention._hopper_tiles(config, "hopper_fwd", q)
    out = []
    for name, band in (("fwd", full), ("fwd-causal", causal)):
        launch = _hopper.forward_launch(
            q, k, v, o, lse, band, qk_scale, fwd_tiles, _hopper.WARP_SPECIALIZE, False
        )
        out.append((name, launch[0], launch[2], launch[3]))
    dq_acc = meta(batch, heads, seq, head_dim, dt=torch.float32)
    for name, deterministic in (("bwd", True), ("bwd-nondet", False)):
        bwd_tiles = attention._hopper_tiles(config, "hopper_bwd" if deterministic else "hopper_bwd_nondet", q)
        sem = meta(batch * heads, seq // bwd_tiles[0], dt=torch.int32)
        launch = _hopper.backward_launch(
            q,
            k,
            v,
            do,
            lse,
            delta,
            dq_acc,
            sem,
            meta(*k.shape),
            meta(*v.shape),
            full,
            head_dim**-0.5,
            qk_scale,
            bwd_tiles,
            deterministic,
            False,
        )
        out.append((name, launch[0], launch[2], launch[3]))
    return out


def varlen_launches(dtype_name: str, head_dim: int, config_name: str = "h100"):
    """[(name, kernel, args, kwargs)] of the variable-length kernels (``_varlen.py``, pointer
    based) with a shipped config's tiles, on meta tensors (8 sequences, 4096 tokens, GQA 4:1,
    causal), built by the varlen path's own launch builders (``varlen.forward_launch``,
    ``varlen.backward_launches``)."""
    import torch

    from . import varlen
    from .config import builtin_config

    config = builtin_config(config_name)
    dtype = getattr(torch, dtype_name)

    def meta(*shape, dt=dtype):
        return torch.empty(shape, dtype=dt, device="meta")

    q, k, v, o, do = (
        meta(4096, 8, head_dim),
        meta(4096, 2, head_dim),
        meta(4096, 2, head_dim),
        meta(4096, 8, head_dim),
        meta(4096, 8, head_dim),
    )
    lse, delta, cu = meta(8, 4096, dt=torch.float32), meta(8, 4096, dt=torch.float32), meta(9, dt=torch.int32)
    scale, sides = head_dim**-0.5, (-1, -1)
    fwd = varlen.forward_launch(q, k, v, o, lse, cu, cu, 512, sides, True, scale, "ieee", config)
    _pre, dkdv, dq = varlen.backward_launches(
        do,
        q,
        k,
        v,
        o,
        lse,
        delta,
        meta(*q.shape),
        meta(*k.shape),
        meta(*v.shape),
        cu,
        cu,
        512,
        512,
        sides,
        True,
        scale,
        "ieee",
        config,
    )
    return [
        (name, kernel, args, kwargs)
        for name, (kernel, _grid, args, kwargs) in (
            ("varlen-fwd", fwd),
            ("varlen-dkdv", dkdv),
            ("varlen-dq", dq),
        )
    ]


def hopper_problem_launch(problem, config, arch: int) -> None:
    """Run the Hopper path's host code for one problem on ``meta`` tensors (a ``launch`` for a
    generic compile check that records the JIT launches made inside it).

    ``problem`` has ``batch, heads_q, heads_kv, seq_q, seq_k, head_dim, causal, dtype,
    precision``; nothing is launched below sm_90 or for fp32 (which keeps the portable path).
    Launches the forward and both backward modes (deterministic and atomic dQ).
    """
    import torch

    from . import attention

    if arch < 90 or problem.dtype == "float32":
        return
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
    o, lse = attention._forward(q, k, v, band, scale, problem.precision, config, True)
    for deterministic in (True, False):
        attention._backward(
            torch.empty_like(o), q, k, v, o, lse, band, scale, problem.precision, config, True, deterministic
        )


def varlen_problem_launch(problem, config, arch: int) -> None:
    """The variable-length path's host code for one problem on ``meta`` tensors: ``batch``
    sequences of ``seq_q``/``seq_k`` tokens packed (see :func:`hopper_problem_launch`)."""
    import torch

    from . import varlen

    dtype = getattr(torch, problem.dtype)
    b, d = problem.batch, problem.head_dim
    q = torch.empty((b * problem.seq_q, problem.heads_q, d), dtype=dtype, device="meta")
    k, v = (
        torch.empty((b * problem.seq_k, problem.heads_kv, d), dtype=dtype, device="meta") for _ in range(2)
    )
    cu_q, cu_k = (torch.empty((b + 1,), dtype=torch.int32, device="meta") for _ in range(2))
    sides = varlen._window_sides(problem.causal, None)
    scale = d**-0.5
    o, lse = varlen._varlen_forward(
        q, k, v, cu_q, cu_k, problem.seq_q, sides, problem.causal, scale, problem.precision, config
    )
    varlen._varlen_backward(
        torch.empty_like(o),
        q,
        k,
        v,
        o,
        lse,
        cu_q,
        cu_k,
        problem.seq_q,
        problem.seq_k,
        sides,
        problem.causal,
        scale,
        problem.precision,
        config,
    )


def check(stats: dict) -> str:
    """'ok' or what disqualifies the kernel."""
    problems = []
    if stats["spill_bytes"]:
        problems.append(f"SPILLS {stats['spill_bytes']} B")
    if stats["shared"] > SMEM_LIMIT_SM90:
        problems.append("SHARED MEMORY OVER LIMIT")
    if not stats["wgmma"]:
        problems.append("NO WGMMA")
    if not stats["tma"]:
        problems.append("NO TMA")
    return ", ".join(problems) or "ok"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m slurmkit_kernels.hopper_check", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    p.add_argument("--head-dims", type=int, nargs="+", choices=HEAD_DIMS, default=list(HEAD_DIMS))
    p.add_argument(
        "--kernels",
        nargs="+",
        choices=["fwd", "fwd-causal", "bwd", "bwd-nondet"],
        default=["fwd", "fwd-causal", "bwd", "bwd-nondet"],
    )
    args = p.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("hopper_check: unset TRITON_INTERPRET; the interpreter does not compile", file=sys.stderr)
        return 2
    failures = 0
    print(f"# Hopper kernels, sm_90, shared-memory limit {SMEM_LIMIT_SM90} bytes")
    print(
        f"{'kernel':>10} {'dtype':>9} {'d':>4} {'tiles':>8} {'warps':>5} {'stages':>6} {'regs':>5} "
        f"{'spill':>6} {'smem':>7} {'wgmma':>6} {'tma':>4} {'sem':>4}  result"
    )
    for dtype in args.dtypes:
        for head_dim in args.head_dims:
            for name, kernel, launch_args, kwargs in hopper_launches(dtype, head_dim):
                if name not in args.kernels:
                    continue
                tiles = f"{kwargs['BLOCK_M']}x{kwargs['BLOCK_N']}"
                try:
                    stats = compile_launch(kernel, launch_args, kwargs)
                    result = check(stats)
                except Exception as e:  # noqa: BLE001 (report every failing kernel)
                    first = str(e).strip().splitlines()[0][:120] if str(e).strip() else ""
                    stats = {
                        "registers": -1,
                        "spill_bytes": -1,
                        "shared": -1,
                        "wgmma": -1,
                        "tma": -1,
                        "sem": -1,
                        "num_warps": kwargs["num_warps"],
                    }
                    result = f"COMPILE ERROR: {type(e).__name__}: {first}"
                failures += result != "ok"
                print(
                    f"{name:>10} {dtype:>9} {head_dim:>4} {tiles:>8} {stats['num_warps']:>5} "
                    f"{kwargs['num_stages']:>6} {stats['registers']:>5} {stats['spill_bytes']:>6} "
                    f"{stats['shared']:>7} {stats['wgmma']:>6} {stats['tma']:>4} {stats['sem']:>4}"
                    f"  {result}",
                    flush=True,
                )
    print(f"# {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
