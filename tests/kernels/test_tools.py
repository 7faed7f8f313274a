"""The GPU-only tools fail clearly on a machine without a GPU; their pure parts work."""

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from slurmkit_kernels import autotune, builtin_config, compile_check  # noqa: E402
from slurmkit_kernels.config import parse_config  # noqa: E402

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
        dict(
            provider="slurmkit",
            mode="fwd",
            causal=True,
            head_dim=64,
            seq_len=1024,
            batch=16,
            heads=32,
            ms=2.0,
            tflops=400.0,
            status="ok",
        ),
        dict(
            provider="sdpa-cudnn",
            mode="bwd",
            causal=False,
            head_dim=128,
            seq_len=16384,
            batch=1,
            heads=16,
            ms=None,
            tflops=None,
            status="n/a",
        ),
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
    for kernel in ("fwd", "bwd_dkdv", "bwd_dq", "hopper_fwd", "hopper_bwd", "hopper_bwd_nondet"):
        cands = autotune.candidates(kernel)
        assert len(cands) == len(set(cands)) > 1
        trial = autotune.with_entry(base, kernel, "64", cands[0])
        assert trial.lookup(kernel, 64, "bfloat16") == cands[0]
    assert base.lookup("fwd", 64, "bfloat16") == builtin_config("h100").lookup("fwd", 64, "bfloat16")
    # A file without Hopper tables gets default.json's table plus the candidate.
    old = builtin_config("h100").to_dict()
    del old["kernels"]["hopper_bwd"]
    trial = autotune.with_entry(parse_config(old), "hopper_bwd", "128", autotune.candidates("hopper_bwd")[0])
    assert trial.lookup("hopper_bwd", 128, "bfloat16") == autotune.candidates("hopper_bwd")[0]
    assert trial.lookup("hopper_bwd", 64, "bfloat16") == builtin_config("default").lookup(
        "hopper_bwd", 64, "bfloat16"
    )


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
    args = bench.parse_args(
        ["--seq-lens", "32", "--head-dims", "16", "--tokens", "64", "--hidden", "32", "--causal", "on"]
    )

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


GPU_CHECK = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


def _load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", GPU_CHECK)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    return gpu_check


@pytest.mark.timeout(900)
def test_gpu_check_cpu_smoke_runs_every_phase(tmp_path):
    """``gpu_check.py --cpu-smoke`` end to end, as the GPU run goes: every phase in its own
    process with its own timeout, results appended to the results file under ``$OUT`` as
    they come, the Hopper path measured next to the portable one, the summary printed last."""
    import json
    import os
    import subprocess

    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["OUT"] = str(out)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    proc = subprocess.run(
        [sys.executable, str(GPU_CHECK), "--cpu-smoke"], env=env, capture_output=True, text=True, timeout=850
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "== gpu_check: exit 0"
    assert any(line.startswith("gpu_check summary:") for line in lines[-8:]), proc.stdout
    records = [json.loads(line) for line in (out / "gpu_check.jsonl").read_text().splitlines()]
    phases = [r for r in records if r["kind"] == "phase"]
    assert [(p["name"], p["status"]) for p in phases] == [
        ("versions", "ok"),
        ("prewarm", "ok"),
        ("correctness", "ok"),
        ("gluon", "ok"),
        ("throughput", "ok"),
    ]
    # Each phase ran in its own process and wrote its own records before the next began.
    order = [r["phase"] for r in records if r["kind"] != "phase" and r["phase"] != "driver"]
    assert order == sorted(order, key=["versions", "prewarm", "correctness", "gluon", "throughput"].index)
    env_record = next(r for r in records if r["kind"] == "environment")
    assert "4*B*H*Nq*Nk*D" in env_record["flops"]
    compiled = [r for r in records if r["kind"] == "compile"]
    # Prewarm compiles only what the run launches: here the Hopper forward and backward
    # (deterministic dQ) and the shared preprocess kernel, and the Gluon forward (compiled
    # for sm_90 only: the interpreter cannot run it), nothing else.
    assert sorted(r["kernel"] for r in compiled) == [
        "gluon/_ws_fwd",
        "hopper/_attn_bwd_preprocess",
        "hopper/_hopper_bwd",
        "hopper/_hopper_fwd",
    ]
    notes = [r["text"] for r in records if r["kind"] == "note" and r["phase"] == "gluon"]
    assert notes == ["gluon: not run on a CPU (Triton's interpreter does not run Gluon kernels)"]
    gluon_thr = [r for r in records if r["kind"] == "throughput" and r.get("provider") == "gluon"]
    assert gluon_thr and all(r["status"] == "n/a" for r in gluon_thr)  # never timed unchecked
    assert all(r["result"] == "ok" and r["spill"] == 0 for r in compiled)
    corr = [r for r in records if r["kind"] == "correctness"]
    assert {r["path"] for r in corr} == {"hopper", "portable"} and all(r["status"] == "ok" for r in corr)
    thr = [r for r in records if r["kind"] == "throughput" and r["status"] == "ok"]
    for provider in ("hopper", "portable"):
        mine = [r for r in thr if r["provider"] == provider]
        assert len(mine) == 2 * 2 and all(r["tflops"] > 0 and r["path"] == provider for r in mine)
    table = (out / "kernels-cpu-smoke.md").read_text()
    assert "4*B*H*Nq*Nk*D" in table and "8 of 8 cases ok" in table
    assert table.count("| bfloat16 | 16 | no | 32 |") == 2


def test_gpu_check_summary_fails_on_a_timed_out_phase_and_keeps_earlier_results(tmp_path):
    """A phase killed at its deadline fails the run, and the records written before it
    (here one correctness case and one throughput measurement) still make the table."""
    import json

    gpu_check = _load_gpu_check()
    records = [
        {
            "phase": "versions",
            "kind": "environment",
            "gpu": "NVIDIA H200",
            "torch": "2.11.0",
            "triton": "3.6.0",
        },
        {"phase": "driver", "kind": "phase", "name": "versions", "status": "ok", "exit": 0, "seconds": 3.0},
        {
            "phase": "correctness",
            "kind": "correctness",
            "status": "ok",
            "path": "hopper",
            "dtype": "bfloat16",
            "d": 128,
            "causal": False,
            "B": 1,
            "Hq": 4,
            "Hkv": 4,
            "Nq": 1000,
            "Nk": 1000,
        },
        {
            "phase": "throughput",
            "kind": "throughput",
            "status": "ok",
            "provider": "hopper",
            "mode": "fwd",
            "tflops": 400.0,
            "dtype": "bfloat16",
            "d": 128,
            "causal": False,
            "N": 8192,
            "B": 2,
            "H": 16,
        },
        {
            "phase": "throughput",
            "kind": "throughput",
            "status": "ok",
            "provider": "sdpa-cudnn",
            "mode": "fwd",
            "tflops": 500.0,
            "dtype": "bfloat16",
            "d": 128,
            "causal": False,
            "N": 8192,
            "B": 2,
            "H": 16,
        },
        {
            "phase": "driver",
            "kind": "phase",
            "name": "throughput",
            "status": "timed out after 300 s",
            "exit": None,
            "seconds": 300.0,
        },
    ]
    (tmp_path / "gpu_check.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records) + '{"cut by a ki'
    )
    table, summary, status = gpu_check.summarize(gpu_check.read_results(tmp_path))
    assert status == 1
    assert "- throughput: timed out after 300 s" in table
    assert "| bfloat16 | 128 | no | 8192 | 2 | 16 | fwd | 400.0 | n/a | n/a | 500.0 | 0.80 | - | - |" in table
    assert "1 of 1 cases ok" in table
    assert any("throughput timed out after 300 s" in line for line in summary)


def test_gpu_check_script_without_gpu_exits_2(tmp_path):
    import os
    import subprocess

    script = GPU_CHECK.with_suffix(".sh")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHON"] = sys.executable
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU even on a GPU machine
    env["OUT"] = str(tmp_path / "out")
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "torch sees no CUDA GPU" in proc.stderr
    assert "== versions" in proc.stdout and "torch 2." in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "== gpu_check: exit 2"
    assert "torch sees no CUDA GPU" in (tmp_path / "out" / "versions.log").read_text()


PTXAS_LOG = """ptxas info    : Compiling entry function '_attn_bwd_dkdv' for 'sm_90a'
ptxas info    : Function properties for _attn_bwd_dkdv
    32 bytes stack frame, 172 bytes spill stores, 200 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 32 bytes cumulative stack size
"""


def test_compile_check_reads_registers_and_spills_from_ptxas():
    assert compile_check.parse_ptxas_log(PTXAS_LOG) == (255, 172, 200)
    with pytest.raises(ValueError, match="no register"):
        compile_check.parse_ptxas_log("ptxas info    : Compile time = 3 ms")


def test_compile_check_verdicts_and_markdown_section(tmp_path):
    rows = [
        compile_check.Row(
            "portable",
            "_attn_fwd",
            ["h100"],
            "bfloat16",
            64,
            "ieee",
            "128x64",
            4,
            3,
            regs=236,
            spill_stores=0,
            spill_loads=0,
            smem=65536,
            wgmma=48,
            groups={1, 4},
        ),
        compile_check.Row(
            "portable",
            "_attn_bwd_dkdv",
            ["h100"],
            "float32",
            128,
            "tf32",
            "32x64",
            4,
            2,
            regs=255,
            spill_stores=8,
            spill_loads=8,
            smem=300000,
        ),
    ]
    assert compile_check.verdict(rows[0], 232448) == "ok"
    assert compile_check.verdict(rows[1], 232448) == "SPILLS, SMEM OVER 232448"
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{compile_check.MARK_BEGIN}\nold table\n{compile_check.MARK_END}\noutro\n")
    compile_check.replace_marked_section(str(doc), compile_check.format_markdown(rows, 90, "cmd"))
    text = doc.read_text()
    assert "old table" not in text and text.startswith("intro\n") and text.endswith("outro\n")
    row = "| portable/_attn_fwd | h100 | 128x64 | 4 | 3 | bfloat16 | 64 | 1,4 | 236 | 0/0 | 65536 | 48 | 0 |"
    assert row in text
    assert "float32 (tf32)" in text
    with pytest.raises(ValueError, match="markers"):
        compile_check.replace_marked_section(str(BENCHMARK), "x")
