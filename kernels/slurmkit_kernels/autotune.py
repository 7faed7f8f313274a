"""Opt-in tuning run that writes a launch-config file for the current GPU.

    $ python -m slurmkit_kernels.autotune --out h100-tuned.json
    $ SLURMKIT_KERNELS_CONFIG=h100-tuned.json torchrun ... train.py   # every rank reads it

Jobs never autotune at start (see :mod:`slurmkit_kernels.config` for why). Run this once
per GPU model, on an otherwise idle GPU, and ship the result: either as the
``SLURMKIT_KERNELS_CONFIG`` file of a job or by replacing ``configs/<gpu>.json``.

Method: for each head dim, bf16, a 16k-token batch (B = 16384 // seq_len, H*D = 2048),
each kernel's candidates are timed with ``triton.testing.do_bench`` (median) on the
causal and the non-causal problem and ranked by the sum. The forward kernel is timed
alone; each backward kernel is timed through a full backward with the other backward
kernel held at the starting config. On sm_90 and newer the Hopper path's kernels
(``hopper_fwd``, ``hopper_bwd``, ``hopper_bwd_nondet``: ``flash_attention(hopper=True)``,
the last with ``deterministic=False``) are tuned the same way into their own tables; re-run
``python -m slurmkit_kernels.compile_check --config FILE`` on the result, which compiles
them for sm_90 and fails on spills. Candidates that fail to compile or run (e.g. out of
shared memory) are skipped. fp16 uses the same entries (same tile shapes and smem);
``<d>/float32`` entries are copied unchanged from the starting config. Needs a CUDA GPU;
exits with code 2 without one.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import itertools
import json
import sys

from .config import (
    HOPPER_KERNEL_NAMES,
    KERNEL_NAMES,
    KernelConfig,
    LaunchConfig,
    builtin_config,
    config_for_device,
    parse_config,
)

# Tile candidates per kernel (BLOCK_M, BLOCK_N) and launch candidates (warps, stages), from
# the ranges the Triton tutorial explores on Hopper.
TILES = {
    "fwd": [(64, 32), (64, 64), (128, 32), (128, 64), (128, 128)],
    "bwd_dkdv": [(16, 64), (32, 64), (32, 128), (64, 64), (64, 128)],
    "bwd_dq": [(64, 16), (64, 32), (64, 64), (128, 32), (128, 64)],
    "hopper_fwd": [(64, 64), (64, 128), (128, 64), (128, 128)],
    "hopper_bwd": [(16, 64), (32, 64), (32, 128), (64, 64), (64, 128)],
    "hopper_bwd_nondet": [(16, 64), (32, 64), (32, 128), (64, 64), (64, 128)],
}
WARPS = (4, 8)
STAGES = (2, 3, 4)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m slurmkit_kernels.autotune", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--out", required=True, help="config file to write (JSON)")
    p.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    p.add_argument("--seq-len", type=int, default=4096, help="sequence length to tune at (default 4096)")
    p.add_argument("--name", default=None, help="config name (default: derived from the GPU name)")
    p.add_argument(
        "--match",
        nargs="*",
        default=None,
        help="substrings of the GPU name this file applies to (default: the full GPU name)",
    )
    return p.parse_args(argv)


def candidates(kernel: str) -> list[LaunchConfig]:
    return [LaunchConfig(m, n, w, s) for (m, n), w, s in itertools.product(TILES[kernel], WARPS, STAGES)]


def with_entry(base: KernelConfig, kernel: str, key: str, entry: LaunchConfig) -> KernelConfig:
    kernels = {k: dict(v) for k, v in base.kernels.items()}
    if kernel not in kernels:  # a file without Hopper tables starts from default.json's
        kernels[kernel] = dict(builtin_config("default").kernels[kernel])
    kernels[kernel][key] = entry
    return KernelConfig(base.name, base.match, base.provenance, kernels)


def measure(torch, triton, flash_attention, config, head_dim, seq_len, kernel) -> float:
    """Milliseconds (causal + non-causal) of the part of the computation ``kernel`` runs."""
    batch, heads = max(1, 16384 // seq_len), 2048 // head_dim
    total = 0.0
    for causal in (False, True):
        q, k, v = (
            torch.randn(
                batch, heads, seq_len, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True
            )
            for _ in range(3)
        )
        run = functools.partial(
            flash_attention,
            q,
            k,
            v,
            causal=causal,
            config=config,
            hopper=kernel in HOPPER_KERNEL_NAMES,
            deterministic=kernel != "hopper_bwd_nondet",
        )
        out = run()
        if kernel in ("fwd", "hopper_fwd"):
            fn = run
        else:
            fn = functools.partial(out.backward, torch.randn_like(out), retain_graph=True)
        total += triton.testing.do_bench(fn, grad_to_none=[q, k, v], return_mode="median")
    return total


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(
            "slurmkit_kernels.autotune: no CUDA GPU available; tuning times GPU kernels and "
            "cannot run here (it is never needed at job start).",
            file=sys.stderr,
        )
        return 2
    import triton

    from .attention import flash_attention

    gpu = torch.cuda.get_device_name(0)
    base = config_for_device(gpu)
    tuned = base
    kernels = KERNEL_NAMES + (HOPPER_KERNEL_NAMES if torch.cuda.get_device_capability(0)[0] >= 9 else ())
    for head_dim in args.head_dims:
        for kernel in kernels:
            best = None
            for cand in candidates(kernel):
                trial = with_entry(tuned, kernel, str(head_dim), cand)
                try:
                    ms = measure(torch, triton, flash_attention, trial, head_dim, args.seq_len, kernel)
                except Exception as e:  # noqa: BLE001 (out of resources, compile errors: skip the candidate)
                    print(
                        f"d{head_dim} {kernel} {cand.to_dict()}: skipped ({type(e).__name__})",
                        file=sys.stderr,
                    )
                    continue
                print(f"d{head_dim} {kernel} {cand.to_dict()}: {ms:.3f} ms", file=sys.stderr)
                if best is None or ms < best[0]:
                    best = (ms, cand)
            if best is None:
                print(f"d{head_dim} {kernel}: no candidate ran; keeping {base.name}'s entry", file=sys.stderr)
                continue
            tuned = with_entry(tuned, kernel, str(head_dim), best[1])
            print(f"d{head_dim} {kernel}: best {best[1].to_dict()} ({best[0]:.3f} ms)", file=sys.stderr)

    data = tuned.to_dict()
    data["name"] = args.name or gpu.replace("NVIDIA ", "").split()[0].lower()
    data["match"] = args.match if args.match is not None else [gpu]
    data["provenance"] = (
        f"autotuned on {gpu} on {datetime.date.today().isoformat()} with torch {torch.__version__}, "
        f"triton {triton.__version__}: bf16, seq_len {args.seq_len}, 16k tokens, H*D=2048, "
        f"causal+non-causal median time; starting config {base.name}"
    )
    parse_config(data, source=args.out)  # never write a file the loader would reject
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
