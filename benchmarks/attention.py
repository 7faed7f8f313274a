"""Attention throughput: slurmkit's Triton kernel vs PyTorch SDPA (flash and cuDNN backends).

    $ python benchmarks/attention.py                 # full sweep, table on stdout
    $ python benchmarks/attention.py --json out.json # also write every row as JSON

Sweep (the FlashAttention-3 paper's sizing, so numbers compare with published ones):
bf16, head dim 64 and 128, causal off/on, sequence 1k..16k with 16k tokens per batch
(B = 16384 // N) and hidden size H*D = 2048; forward, backward and forward+backward.
Time is the median of ``triton.testing.do_bench``. FLOPs follow
``slurmkit_kernels.attention_flops``: forward 4*B*H*N*N*D, halved when causal, backward
2.5x and fwd+bwd 3.5x of that; H counts query heads.

Needs a CUDA GPU: without one it prints why and exits with code 2. Each provider's
output is checked against SDPA before it is timed; a mismatch or any other failure marks
that provider's rows "error", is listed on stderr, and makes the exit code 1 after the
table is printed. The whole sweep stops adding rows after --budget-s seconds (default 270) so it always
finishes in under 5 minutes; skipped rows are listed. The table is printed last.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}  # dense, see docs/kernels.md
PROVIDERS = ("slurmkit", "sdpa-flash", "sdpa-cudnn")
MODES = ("fwd", "bwd", "fwd_bwd")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq-lens", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    p.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    p.add_argument("--causal", choices=("both", "on", "off"), default="both")
    p.add_argument("--providers", nargs="+", choices=PROVIDERS, default=list(PROVIDERS))
    p.add_argument("--tokens", type=int, default=16384, help="B * N (default 16384)")
    p.add_argument("--hidden", type=int, default=2048, help="H * D (default 2048)")
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="dense bf16 peak for the %%peak column (default: looked up from the GPU name)",
    )
    p.add_argument(
        "--budget-s", type=float, default=270.0, help="stop starting new rows after this many seconds"
    )
    p.add_argument("--json", metavar="OUT", help="write rows and environment as JSON to OUT")
    return p.parse_args(argv)


def environment(torch, triton) -> dict:
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": torch.cuda.get_device_name(0),
        "sm_count": props.multi_processor_count,
        "capability": f"{props.major}.{props.minor}",
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
    }


def default_peak(gpu_name: str) -> float | None:
    for key, peak in PEAK_BF16_TFLOPS.items():
        if key in gpu_name:
            return peak
    return None


def make_call(provider, q, k, v, causal, torch, flash_attention):
    """A zero-argument forward for the provider, or None if the backend is unavailable."""
    if provider == "slurmkit":
        return lambda: flash_attention(q, k, v, causal=causal)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}[provider]

    def call():
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    try:
        call()
    except RuntimeError:
        return None
    return call


def time_mode(mode, call, grads, torch, bench) -> float:
    """Median milliseconds of one forward, one backward, or one forward+backward."""
    if mode == "fwd":
        return bench(call)
    do = torch.randn_like(call())
    if mode == "bwd":
        out = call()
        return bench(lambda: out.backward(do, retain_graph=True), grad_to_none=grads)
    return bench(lambda: call().backward(do), grad_to_none=grads)


def check_against_sdpa(out, q, k, v, causal, torch) -> float:
    """Max |out - SDPA(default backend)|, to refuse timing a wrong kernel."""
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return (out.float() - ref.float()).abs().max().item()


def format_table(rows: list[dict], peak: float | None) -> str:
    header = ["provider", "mode", "causal", "d", "N", "B", "H", "ms", "TFLOP/s", "%peak"]
    lines = [header]
    for r in rows:
        lines.append(
            [
                r["provider"],
                r["mode"],
                "yes" if r["causal"] else "no",
                str(r["head_dim"]),
                str(r["seq_len"]),
                str(r["batch"]),
                str(r["heads"]),
                r["status"] if r["ms"] is None else f"{r['ms']:.3f}",
                r["status"] if r["tflops"] is None else f"{r['tflops']:.1f}",
                "" if r["tflops"] is None or not peak else f"{100 * r['tflops'] / peak:.1f}",
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(line, widths)) for line in lines)


def sweep(args, device: str, bench, torch, flash_attention, attention_flops):
    """Check and time every (head dim, causal, length, provider); returns rows, skipped, failures.

    ``bench(fn, grad_to_none=None) -> ms`` is ``triton.testing.do_bench`` on a GPU; the
    tests pass a plain timer and run the loop on a CPU through the interpreter.
    """
    start = time.monotonic()
    rows, skipped, failures = [], [], []
    causal_values = {"both": (False, True), "on": (True,), "off": (False,)}[args.causal]
    for head_dim in args.head_dims:
        heads = args.hidden // head_dim
        for causal in causal_values:
            for seq_len in args.seq_lens:
                batch = max(1, args.tokens // seq_len)
                gen = torch.Generator(device=device).manual_seed(0)
                q, k, v = (
                    torch.randn(
                        (batch, heads, seq_len, head_dim), device=device, dtype=torch.bfloat16, generator=gen
                    ).requires_grad_()
                    for _ in range(3)
                )
                for provider in args.providers:
                    label = f"{provider}-d{head_dim}-causal={causal}-N{seq_len}"
                    if time.monotonic() - start > args.budget_s:
                        skipped.append(label)
                        continue
                    try:
                        call = make_call(provider, q, k, v, causal, torch, flash_attention)
                        if call is not None:
                            err = check_against_sdpa(call().detach(), q, k, v, causal, torch)
                            if err > 0.05:  # never time a wrong kernel
                                raise RuntimeError(f"output differs from SDPA by {err:.3g}")
                        timings = {
                            m: None if call is None else time_mode(m, call, [q, k, v], torch, bench)
                            for m in MODES
                        }
                        status = "ok" if call is not None else "n/a"
                    except Exception as e:  # noqa: BLE001 (report it, keep the rest of the sweep)
                        failures.append(f"{label}: {type(e).__name__}: {e}")
                        timings, status = dict.fromkeys(MODES), "error"
                    for mode, ms in timings.items():
                        flops = attention_flops(batch, heads, seq_len, seq_len, head_dim, causal, mode)
                        rows.append(
                            {
                                "provider": provider,
                                "mode": mode,
                                "causal": causal,
                                "head_dim": head_dim,
                                "seq_len": seq_len,
                                "batch": batch,
                                "heads": heads,
                                "ms": ms,
                                "status": status,
                                "tflops": None if ms is None else flops / (ms * 1e-3) / 1e12,
                            }
                        )
                    print(f"done {label} ({time.monotonic() - start:.0f} s)", file=sys.stderr)
                del q, k, v
    return rows, skipped, failures


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(
            "benchmarks/attention.py: no CUDA GPU available (torch.cuda.is_available() is False); "
            "this benchmark times GPU kernels and cannot run here.",
            file=sys.stderr,
        )
        return 2
    import triton

    from slurmkit_kernels import attention_flops, config_for_device, flash_attention

    env = environment(torch, triton)
    peak = args.peak_tflops or default_peak(env["gpu"])
    env["kernel_config"] = config_for_device(env["gpu"]).name
    env["peak_tflops"] = peak
    print("# " + ", ".join(f"{k}={v}" for k, v in env.items()), file=sys.stderr)

    def bench(fn, grad_to_none=None):
        return triton.testing.do_bench(fn, grad_to_none=grad_to_none, return_mode="median")

    rows, skipped, failures = sweep(args, "cuda", bench, torch, flash_attention, attention_flops)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {"environment": env, "rows": rows, "skipped": skipped, "failures": failures}, f, indent=2
            )
    if skipped:
        print(
            f"# time budget of {args.budget_s:.0f} s reached; skipped: {', '.join(skipped)}", file=sys.stderr
        )
    for failure in failures:
        print(f"# FAILED {failure}", file=sys.stderr)
    print(
        f"# {env['gpu']}, torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, "
        f"cuDNN {env['cudnn']}, bf16, B*N={args.tokens}, H*D={args.hidden}, peak={peak} TFLOP/s; "
        "n/a = backend unavailable, error = see FAILED lines"
    )
    print(format_table(rows, peak))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
