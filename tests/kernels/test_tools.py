"""The GPU-only tools fail clearly on a machine without a GPU; their pure parts work."""

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from slurmkit_kernels import autotune, builtin_config, compile_check  # noqa: E402

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "attention.py"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("attention_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_without_gpu_exits_2_with_reason(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert load_benchmark().main([]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_benchmark_table_marks_unavailable_backends():
    bench = load_benchmark()
    rows = [
        dict(provider="slurmkit", mode="fwd", causal=True, head_dim=64, seq_len=1024, batch=16, heads=32,
             ms=2.0, tflops=400.0, status="ok"),
        dict(provider="sdpa-cudnn", mode="bwd", causal=False, head_dim=128, seq_len=16384, batch=1, heads=16,
             ms=None, tflops=None, status="n/a"),
    ]
    lines = bench.format_table(rows, peak=1000.0).splitlines()
    assert lines[0].split() == ["provider", "mode", "causal", "d", "N", "B", "H", "ms", "TFLOP/s", "%peak"]
    assert lines[1].split()[-3:] == ["2.000", "400.0", "40.0"]
    assert lines[2].split()[-2:] == ["n/a", "n/a"]
    assert bench.default_peak("NVIDIA H200") == 989.0
    assert bench.default_peak("Some GPU") is None


def test_autotune_without_gpu_exits_2_and_writes_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "tuned.json"
    assert autotune.main(["--out", str(out)]) == 2
    assert not out.exists()
    assert "no CUDA GPU" in capsys.readouterr().err


def test_autotune_candidates_are_valid_and_entries_do_not_leak():
    base = builtin_config("h100")
    for kernel in ("fwd", "bwd_dkdv", "bwd_dq"):
        cands = autotune.candidates(kernel)
        assert len(cands) == len(set(cands)) > 1
        trial = autotune.with_entry(base, kernel, "64", cands[0])
        assert trial.lookup(kernel, 64, "bfloat16") == cands[0]
    assert base.lookup("fwd", 64, "bfloat16") == builtin_config("h100").lookup("fwd", 64, "bfloat16")


def test_compile_check_refuses_the_interpreter(monkeypatch, capsys):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert compile_check.main([]) == 2
    assert "TRITON_INTERPRET" in capsys.readouterr().err


def test_benchmark_sweep_runs_end_to_end_on_cpu():
    """The sweep loop (correctness gate, timing of each mode, FLOP rows) through the
    interpreter with a plain timer. On CPU, SDPA has a flash backend but no cuDNN one."""
    import time

    from slurmkit_kernels import attention_flops, flash_attention, interpreter_active

    if not interpreter_active():
        pytest.skip("runs the sweep on CPU tensors, which needs the interpreter")

    bench = load_benchmark()
    args = bench.parse_args(["--seq-lens", "32", "--head-dims", "16", "--tokens", "64", "--hidden", "32",
                             "--causal", "on"])

    def timer(fn, grad_to_none=None):
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3

    rows, skipped, failures = bench.sweep(args, "cpu", timer, torch, flash_attention, attention_flops)
    assert failures == [] and skipped == []
    ours = [r for r in rows if r["provider"] == "slurmkit"]
    assert [r["mode"] for r in ours] == ["fwd", "bwd", "fwd_bwd"]
    assert all(r["status"] == "ok" and r["ms"] > 0 and r["tflops"] > 0 for r in ours)
    assert ours[0]["batch"] == 2 and ours[0]["heads"] == 2
    status = {r["provider"]: r["status"] for r in rows}
    assert status == {"slurmkit": "ok", "sdpa-flash": "ok", "sdpa-cudnn": "n/a"}
