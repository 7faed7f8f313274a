"""One-shot check of slurmkit_kernels on an H100/H200: correctness of the shipped configs,
then TFLOP/s next to SDPA's flash and cuDNN back ends. Run through ``gpu_check.sh``.

    $ bash benchmarks/gpu_check.sh                   # GPU machine; under 8 minutes
    $ python benchmarks/gpu_check.py --cpu-smoke     # same code paths, tiny shapes, CPU interpreter

Correctness: for the config the GPU selects (h100.json / h200.json) and each dtype (fp16,
bf16, fp32), head dim (64, 128), mask (full, causal) and shape (block multiple, ragged,
unequal lengths with GQA 4:1), output and dQ, dK, dV against a float64 reference by the
error budget of tests/kernels (at most 2x the error of naive PyTorch attention in the same
dtype, plus a small floor).

Throughput: forward and forward+backward, fp16 and bf16, d64 and d128, causal off/on,
sequence 1k-16k at 16k tokens per batch and H*D = 2048 (the FlashAttention-3 paper's
sizing, as benchmarks/attention.py). TFLOP/s follow ``slurmkit_kernels.attention_flops``:
forward ``4*B*H*N*N*D``, halved when causal, forward+backward 3.5x that; the ratio columns
divide the kernel's TFLOP/s by each SDPA back end's. Rows stop being started after
``--budget-s`` seconds; the table (markdown) goes to stdout and to ``--out``.

Exit code: 0 all good, 1 a correctness failure or a provider error, 2 no GPU (without
``--cpu-smoke``).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ERROR_FLOOR = {"float32": 1e-6, "float16": 1e-4, "bfloat16": 1e-3}


def _attention_bench():
    """benchmarks/attention.py (environment, make_call, time_mode), loaded by path."""
    spec = importlib.util.spec_from_file_location("attention_benchmark", HERE / "attention.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="run every code path on CPU through the Triton interpreter with tiny shapes",
    )
    p.add_argument("--out", help="markdown file for the throughput table (default: docs/kernels-<gpu>.md)")
    p.add_argument(
        "--budget-s",
        type=float,
        default=420.0,
        help="seconds for the whole run: correctness cases stop being started at 45%% of it, "
        "throughput rows at 100%%",
    )
    p.add_argument("--skip-correctness", action="store_true")
    p.add_argument("--skip-prewarm", action="store_true", help="do not compile in parallel first")
    p.add_argument("--skip-throughput", action="store_true")
    return p.parse_args(argv)


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


def correctness(
    torch, flash_attention, device, dtypes, head_dims, shapes, deadline: float = math.inf
) -> tuple[list[str], list[str]]:
    """(report lines, failures) of the error-budget check for every combination; cases not
    started by ``deadline`` (time.monotonic()) count as failures ("not run")."""
    lines, failures = [], []
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for d in head_dims:
            for causal in (False, True):
                for b, hq, hkv, nq, nk in shapes:
                    label = f"{dtype_name} d{d} {'causal' if causal else 'full'} B{b} H{hq}/{hkv} q{nq} k{nk}"
                    if time.monotonic() > deadline:
                        failures.append(f"{label}: not run (time budget)")
                        continue
                    gen = torch.Generator(device="cpu").manual_seed(nq * 31 + nk)
                    q, k, v = (
                        torch.randn(shape, generator=gen).to(device, dtype).requires_grad_()
                        for shape in ((b, hq, nq, d), (b, hkv, nk, d), (b, hkv, nk, d))
                    )
                    do = torch.randn((b, hq, nq, d), generator=gen).to(device, dtype)
                    scale = 1.0 / math.sqrt(d)
                    try:
                        out = flash_attention(q, k, v, causal=causal)
                        got = (out, *torch.autograd.grad(out, (q, k, v), do))
                        same_out = naive_attention(q, k, v, causal, scale)
                        same = (same_out, *torch.autograd.grad(same_out, (q, k, v), do))
                        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
                        ref_out = naive_attention(q64, k64, v64, causal, scale)
                        ref = (ref_out, *torch.autograd.grad(ref_out, (q64, k64, v64), do.double()))
                        floor = ERROR_FLOOR[dtype_name] * max(r.abs().max().item() for r in ref)
                        worst, before = [], len(failures)
                        for name, g, s_, r in zip(("out", "dq", "dk", "dv"), got, same, ref):
                            err = (g.double() - r).abs().max().item()
                            budget = 2 * (s_.double() - r).abs().max().item() + floor
                            if not (err <= budget and torch.isfinite(g).all()):
                                failures.append(f"{label}: {name} error {err:.3e} > budget {budget:.3e}")
                            worst.append(f"{name} {err / budget:.2f}")
                        verdict = "ok" if len(failures) == before else "FAIL"
                        lines.append(f"{verdict} {label}: error/budget {', '.join(worst)}")
                    except Exception as e:  # noqa: BLE001 (report, continue with the next case)
                        failures.append(f"{label}: {type(e).__name__}: {e}")
    return lines, failures


def throughput(
    torch,
    bench_mod,
    flash_attention,
    attention_flops,
    device,
    timer,
    dtypes,
    head_dims,
    seq_lens,
    tokens,
    hidden,
    budget_s,
) -> tuple[list[dict], list[str], list[str]]:
    """Rows of TFLOP/s per (dtype, d, causal, N, mode) for the three providers."""
    start = time.monotonic()
    rows, skipped, failures = [], [], []
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for d in head_dims:
            heads = max(1, hidden // d)
            for causal in (False, True):
                for n in seq_lens:
                    batch = max(1, tokens // n)
                    label = f"{dtype_name}-d{d}-{'causal' if causal else 'full'}-N{n}"
                    if time.monotonic() - start > budget_s:
                        skipped.append(label)
                        continue
                    gen = torch.Generator(device=device).manual_seed(0)
                    q, k, v = (
                        torch.randn(
                            (batch, heads, n, d), generator=gen, device=device, dtype=dtype
                        ).requires_grad_()
                        for _ in range(3)
                    )
                    row = {"dtype": dtype_name, "d": d, "causal": causal, "N": n, "B": batch, "H": heads}
                    for provider in bench_mod.PROVIDERS:
                        try:
                            call = bench_mod.make_call(provider, q, k, v, causal, torch, flash_attention)
                            if call is not None:
                                err = bench_mod.check_against_sdpa(call().detach(), q, k, v, causal, torch)
                                if err > 0.05:  # never time a wrong kernel
                                    raise RuntimeError(f"output differs from SDPA by {err:.3g}")
                            for mode in ("fwd", "fwd_bwd"):
                                flops = attention_flops(batch, heads, n, n, d, causal, mode)
                                if call is None:
                                    row[f"{provider}/{mode}"] = None
                                    continue
                                ms = bench_mod.time_mode(mode, call, [q, k, v], torch, timer)
                                row[f"{provider}/{mode}"] = flops / (ms * 1e-3) / 1e12
                        except Exception as e:  # noqa: BLE001
                            failures.append(f"{label} {provider}: {type(e).__name__}: {e}")
                            for mode in ("fwd", "fwd_bwd"):
                                row[f"{provider}/{mode}"] = "error"
                    rows.append(row)
                    print(f"# done {label} ({time.monotonic() - start:.0f} s)", file=sys.stderr, flush=True)
                    del q, k, v
    return rows, skipped, failures


def _compile_group(device_name: str, problems: list, arch: int) -> list[str]:
    """Worker: compile (and spill-check) every kernel launch of ``problems`` for this GPU's
    arch into the shared Triton cache, exactly as the timed run will launch them."""
    from slurmkit_kernels import compile_check, config_for_device

    # The config flash_attention will pick on this GPU (SLURMKIT_KERNELS_CONFIG included).
    config = config_for_device(device_name)
    rows = compile_check.check(compile_check.load_kernel_sets(), [config], problems, arch)
    return [compile_check.format_row(r) for r in rows]


def prewarm(device_name: str, problems: list, workers: int, arch: int) -> tuple[list[str], list[str]]:
    """Compile ``problems`` in parallel processes, one per (dtype, head dim), so the
    correctness and timing steps find every kernel in the Triton cache instead of compiling
    one after another. Returns (table lines, failures: spills, shared memory, errors)."""
    import concurrent.futures
    import multiprocessing

    groups: dict[tuple, list] = {}
    for p in problems:
        groups.setdefault((p.dtype, p.head_dim, p.precision), []).append(p)
    lines, failures = [], []
    ctx = multiprocessing.get_context("spawn")  # no CUDA state is inherited
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {
            pool.submit(_compile_group, device_name, group, arch): key for key, group in groups.items()
        }
        for future in concurrent.futures.as_completed(futures):
            try:
                rows = future.result()
            except Exception as e:  # noqa: BLE001
                failures.append(f"compile {futures[future]}: {type(e).__name__}: {e}")
                continue
            lines += rows
            failures += [f"compile: {row}" for row in rows if not row.endswith(" ok")]
    return lines, failures


def _fmt(x) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    return f"{x:.1f}" if x >= 1 else f"{x:.2g}"  # CPU smoke runs are far below 1 TFLOP/s


def _ratio(a, b) -> str:
    if isinstance(a, float) and isinstance(b, float) and b > 0:
        return f"{a / b:.2f}"
    return "-"


def format_markdown(
    rows: list[dict],
    env: dict,
    skipped: list[str],
    failures: list[str],
    correctness_failures: list[str] | None,
) -> str:
    head = [
        "dtype",
        "d",
        "causal",
        "N",
        "B",
        "H",
        "mode",
        "slurmkit",
        "sdpa-flash",
        "sdpa-cudnn",
        "x flash",
        "x cuDNN",
    ]
    out = [
        "# slurmkit_kernels on " + str(env.get("gpu", "?")),
        "",
        "Written by `bash benchmarks/gpu_check.sh`. " + ", ".join(f"{k} {v}" for k, v in env.items()) + ".",
        "",
        "TFLOP/s (FLOPs: forward `4*B*H*N*N*D`, halved when causal; forward+backward 3.5x forward); "
        "`x flash`/`x cuDNN`: slurmkit's TFLOP/s divided by that SDPA back end's.",
        "",
    ]
    if correctness_failures is None:
        out.append("Correctness of the shipped configs: not run.")
    else:
        out.append(
            f"Correctness of the shipped configs: {len(correctness_failures)} failure(s)"
            + "".join(f"\n- {f}" for f in correctness_failures)
        )
    out += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        for mode in ("fwd", "fwd_bwd"):
            ours, flash, cudnn = (r.get(f"{p}/{mode}") for p in ("slurmkit", "sdpa-flash", "sdpa-cudnn"))
            cells = [
                r["dtype"],
                str(r["d"]),
                "yes" if r["causal"] else "no",
                str(r["N"]),
                str(r["B"]),
                str(r["H"]),
                mode,
                _fmt(ours),
                _fmt(flash),
                _fmt(cudnn),
                _ratio(ours, flash),
                _ratio(ours, cudnn),
            ]
            out.append("| " + " | ".join(cells) + " |")
    if skipped:
        out += ["", f"Not run (time budget): {', '.join(skipped)}"]
    if failures:
        out += ["", "Provider errors:"] + [f"- {f}" for f in failures]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.cpu_smoke and "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"  # must precede the first triton import
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print(
            "gpu_check: no CUDA GPU available (torch.cuda.is_available() is False); use --cpu-smoke "
            "to exercise the code paths on CPU",
            file=sys.stderr,
        )
        return 2
    sys.path.insert(0, str(HERE.parent / "kernels"))  # a checkout without `pip install -e kernels/`
    import triton

    from slurmkit_kernels import attention_flops, config_for_device, flash_attention

    bench_mod = _attention_bench()
    if args.cpu_smoke:
        device = "cpu"
        env = {
            "gpu": "CPU (Triton interpreter smoke run)",
            "torch": torch.__version__,
            "triton": triton.__version__,
        }
        dtypes, head_dims, seq_lens, tokens, hidden = ["float16", "bfloat16"], [16], [32], 64, 32
        shapes = [(1, 2, 2, 33, 33), (1, 4, 1, 17, 40)]
        corr_dtypes = ["float32", "bfloat16"]

        def timer(fn, grad_to_none=None):
            t = time.perf_counter()
            fn()
            return (time.perf_counter() - t) * 1e3
    else:
        device = "cuda"
        env = bench_mod.environment(torch, triton)
        env["kernel_config"] = config_for_device(env["gpu"]).name
        dtypes, head_dims, seq_lens, tokens, hidden = (
            ["float16", "bfloat16"],
            [64, 128],
            [1024, 2048, 4096, 8192, 16384],
            16384,
            2048,
        )
        # Block multiple; ragged; unequal lengths with GQA 4:1.
        shapes = [(2, 4, 4, 1024, 1024), (1, 4, 4, 1000, 1000), (1, 8, 2, 333, 1021)]
        # The shipped config's fp32 entries are for "ieee", the default precision.
        corr_dtypes = ["float16", "bfloat16", "float32"]

        def timer(fn, grad_to_none=None):
            return triton.testing.do_bench(
                fn, warmup=25, rep=60, grad_to_none=grad_to_none, return_mode="median"
            )

    print("# " + ", ".join(f"{k}={v}" for k, v in env.items()), flush=True)
    t0 = time.monotonic()
    compile_failures: list[str] = []
    if not args.cpu_smoke and not args.skip_prewarm:
        from slurmkit_kernels.compile_check import Problem

        problems = [
            Problem(b, hq, hkv, nq, nk, d, causal, dt, "ieee")
            for dt in corr_dtypes
            for d in head_dims
            for causal in (False, True)
            for b, hq, hkv, nq, nk in shapes
        ]
        problems += [
            Problem(max(1, tokens // n), hidden // d, hidden // d, n, n, d, causal, dt, "ieee")
            for dt in dtypes
            for d in head_dims
            for causal in (False, True)
            for n in seq_lens
        ]
        major, minor = torch.cuda.get_device_capability(0)
        lines, compile_failures = prewarm(
            env["gpu"], problems, min(8, os.cpu_count() or 1), 10 * major + minor
        )
        print(
            "# compile_check (kernel set, kernel, configs, tiles, warps, stages, dtype, prec, d, group, "
            "regs, spill st/ld, smem, wgmma, tma, s, result):"
        )
        for line in sorted(lines):
            print("#   " + line)
        print(f"# compiled in {time.monotonic() - t0:.0f} s, {len(compile_failures)} failure(s)", flush=True)
    correctness_failures = None
    if not args.skip_correctness:
        start = time.monotonic()
        lines, correctness_failures = correctness(
            torch, flash_attention, device, corr_dtypes, head_dims, shapes, deadline=t0 + 0.45 * args.budget_s
        )
        for line in lines:
            print("# " + line)
        print(
            f"# correctness: {len(lines)} cases, {len(correctness_failures)} failure(s), "
            f"{time.monotonic() - start:.0f} s",
            flush=True,
        )
        for f in correctness_failures:
            print(f"# FAILED {f}", flush=True)
    rows, skipped, failures = [], [], []
    if not args.skip_throughput:
        rows, skipped, failures = throughput(
            torch,
            bench_mod,
            flash_attention,
            attention_flops,
            device,
            timer,
            dtypes,
            head_dims,
            seq_lens,
            tokens,
            hidden,
            args.budget_s - (time.monotonic() - t0),
        )
    text = format_markdown(rows, env, skipped, failures + compile_failures, correctness_failures)
    print(text)
    out = args.out
    if out is None and not args.cpu_smoke:
        sku = next((s for s in ("H200", "H100") if s in env["gpu"]), "gpu")
        out = str(HERE.parent / "docs" / f"kernels-{sku.lower()}.md")
    if out:
        Path(out).write_text(text, encoding="utf-8")
        print(f"# wrote {out}", file=sys.stderr)
    return 1 if (correctness_failures or failures or compile_failures) else 0


if __name__ == "__main__":
    sys.exit(main())
