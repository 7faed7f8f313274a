"""Compile the kernels ahead of time for a GPU architecture, without a GPU.

    $ python -m slurmkit_kernels.compile_check --config h100 --arch 90
    $ python -m slurmkit_kernels.compile_check --config tuned.json --arch 90 --dtypes bfloat16

For each kernel of a launch-config file and each requested head dim and dtype (one
compiled variant serves every mask: the band is a runtime argument), this runs Triton's
full compiler (TTIR -> TTGIR -> LLVM -> PTX -> ptxas cubin) for the target architecture
and checks the kernel's shared memory against the architecture's per-block limit. It
catches, on a CPU-only machine, what the interpreter cannot: code that only fails when
compiled, and tiles that do not fit. It does not check speed or numerics on hardware.

Must run without ``TRITON_INTERPRET=1`` (exit code 2 otherwise). Exit code 1 if any
kernel fails to compile or exceeds the limit; the table is printed either way.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys

# Max shared memory per block (opt-in) by compute capability, CUDA programming guide.
SMEM_LIMIT = {80: 166912, 86: 101376, 89: 101376, 90: 232448}
TRITON_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
_FLOAT_ARGS = ("qk_scale", "sm_scale")
_FP32_POINTERS = ("LSE", "DELTA")
_DATA_POINTERS = ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV")


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m slurmkit_kernels.compile_check",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="h100",
                   help="built-in config name or path to a JSON file (default h100)")
    p.add_argument("--arch", type=int, default=90, choices=sorted(SMEM_LIMIT), help="compute capability x10")
    p.add_argument("--head-dims", type=int, nargs="+", default=[16, 32, 64, 128])
    p.add_argument("--dtypes", nargs="+", choices=sorted(TRITON_DTYPE),
                   default=["bfloat16", "float16", "float32"])
    return p.parse_args(argv)


def _compile(fn, elem: str, constexprs: dict, target, num_warps: int, num_stages: int):
    import triton
    from triton.compiler import ASTSource

    names = list(inspect.signature(fn.fn).parameters)
    signature = {}
    for name in names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in _FP32_POINTERS:
            signature[name] = "*fp32"
        elif name in _FLOAT_ARGS:
            signature[name] = "fp32"
        elif name in _DATA_POINTERS:
            signature[name] = f"*{elem}"
        else:
            signature[name] = "i32"
    src = ASTSource(fn=fn, signature=signature,
                    constexprs={(names.index(k),): v for k, v in constexprs.items()})
    return triton.compile(src, target=target, options={"num_warps": num_warps, "num_stages": num_stages})


def main(argv=None) -> int:
    args = parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("compile_check: unset TRITON_INTERPRET; the interpreter does not compile", file=sys.stderr)
        return 2
    from triton.backends.compiler import GPUTarget

    from . import _kernels
    from .config import builtin_config, builtin_config_names, load_config

    if args.config in builtin_config_names():
        config = builtin_config(args.config)
    else:
        config = load_config(args.config)
    target = GPUTarget("cuda", args.arch, 32)
    limit = SMEM_LIMIT[args.arch]
    kernels = {"fwd": _kernels._attn_fwd, "bwd_dkdv": _kernels._attn_bwd_dkdv,
               "bwd_dq": _kernels._attn_bwd_dq}
    failures = 0
    print(f"# config {config.name}, sm_{args.arch}, shared-memory limit {limit} bytes")
    print(f"{'kernel':>9} {'dtype':>9} {'d':>4} {'tiles':>8} {'warps':>5} {'stages':>6} "
          f"{'smem':>7}  result")
    for dtype in args.dtypes:
        precision = "ieee" if dtype == "float32" else "tf32"
        for head_dim in args.head_dims:
            for name, fn in kernels.items():
                cfg = config.lookup(name, head_dim, dtype)
                constexprs = {"HEAD_DIM": head_dim, "EMULATE_BF16": False, "INPUT_PRECISION": precision,
                              "BLOCK_M": cfg.BLOCK_M, "BLOCK_N": cfg.BLOCK_N}
                try:
                    compiled = _compile(fn, TRITON_DTYPE[dtype], constexprs, target,
                                        cfg.num_warps, cfg.num_stages)
                    smem = compiled.metadata.shared
                    result = "ok" if smem <= limit else "EXCEEDS LIMIT"
                except Exception as e:  # noqa: BLE001 (report every failing kernel, not just the first)
                    first_line = str(e).splitlines()[0][:120] if str(e) else ""
                    smem, result = -1, f"COMPILE ERROR: {type(e).__name__}: {first_line}"
                failures += result != "ok"
                print(f"{name:>9} {dtype:>9} {head_dim:>4} "
                      f"{cfg.BLOCK_M:>3}x{cfg.BLOCK_N:<4} {cfg.num_warps:>5} {cfg.num_stages:>6} "
                      f"{smem:>7}  {result}",
                      flush=True)
    print(f"# {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
