"""The warp-specialised Gluon forward (hopper_ws.py): sm_90 compile proxies, dispatch, fallback.

What runs here and what does not:

* **Compiles** for sm_90 through ``python -m slurmkit_kernels.compile_check --kernel-sets
  gluon`` (Triton's own JIT specialisation, ptxas from the wheel): 0 spills, ``setmaxnreg``
  giving the consumer warpgroups 240 and the TMA producer 24 registers, async wgmma and TMA
  instructions, shared memory within 227 KB, and the rows equal docs/kernels.md's table.
* **Numerics: not here.** Triton's interpreter (``TRITON_INTERPRET=1``, triton 3.6 and
  3.7) does not run Gluon kernels (``test_interpreter_does_not_run_gluon`` pins that), so
  the Gluon forward's results are checked only on a GPU: ``benchmarks/gpu_check.py``'s
  ``gluon`` correctness cases (output, dQ, dK, dV against float64, the same budget as the
  other paths). Until such a run has passed it stays opt-in.
* Dispatch and fallback run here: who gets the Gluon kernel, that every other call keeps
  the Hopper forward, and that the Gluon launch gets the same ``o``/``lse`` buffers.
"""

import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from test_attention import ERROR_FLOOR, check_against_budget, naive_attention, run_with_grads  # noqa: E402
from test_hopper import SMALL  # noqa: E402

from slurmkit_kernels import _hopper, flash_attention, hopper_ws  # noqa: E402
from slurmkit_kernels import attention as attention_mod  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KERNELS_SRC = ROOT / "kernels"
DOCS = ROOT / "docs" / "kernels.md"


def _gluon_toolchain() -> str | None:
    """Why this Triton cannot build the kernel, or None."""
    try:
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma  # noqa: F401
    except ImportError as e:
        return f"this triton has no Gluon Hopper module ({e})"
    if not hasattr(gl, "warp_specialize"):
        return "this triton's Gluon has no warp_specialize"
    return None


def _table(stdout: str) -> list[dict]:
    lines = [line.split() for line in stdout.splitlines() if line.strip() and not line.startswith("#")]
    header, body = lines[0], lines[1:]
    last = len(header) - 1
    return [dict(zip(header, cells[:last] + [" ".join(cells[last:])])) for cells in body]


@pytest.mark.timeout(900)
def test_gluon_forward_compiles_for_sm90_with_setmaxnreg_wgmma_and_tma(tmp_path):
    """The done-when proxies of the warp-specialised forward, from the tool that reports them."""
    reason = _gluon_toolchain()
    if reason:
        pytest.skip(reason)
    from slurmkit_kernels import compile_check

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(KERNELS_SRC), env.get("PYTHONPATH", "")])
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    md = tmp_path / "table.md"
    md.write_text(f"{compile_check.MARK_BEGIN}\n{compile_check.MARK_END}\n")
    args = ["--kernel-sets", "gluon", "--dtypes", "bfloat16", "--head-dims", "128", "--seq-lens", "4096"]
    args += ["--gqa", "1", "--markdown-into", str(md)]
    proc = subprocess.run(
        [sys.executable, "-m", "slurmkit_kernels.compile_check", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=850,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _table(proc.stdout)
    assert len(rows) == 2, proc.stdout  # non-causal and causal (longest-first)
    for row in rows:
        assert row["kernel"] == "_ws_fwd" and row["result"] == "ok", row
        assert row["spill"] == "0/0", row
        assert 0 < int(row["smem"]) <= compile_check.SMEM_LIMIT[90], row
        assert int(row["wgmma"]) > 0 and int(row["tma"]) > 0, row
        count, values = row["setmaxnreg"].split(":")
        values = {int(n) for n in values.split("/")}
        assert int(count) > 0, row
        # Consumers raised to 240 registers, the TMA producer lowered to 24.
        assert {hopper_ws.CONSUMER_REGS, hopper_ws.LOADER_REGS} <= values, row
        # 12 warps: two consumer warpgroups and the producer warp's warpgroup.
        assert row["warps"] == "12", row
    # docs/kernels.md's gluon rows are what the tool prints now.
    fresh = [line for line in md.read_text().splitlines() if line.startswith("| gluon/")]
    section = DOCS.read_text(encoding="utf-8")
    section = section[section.index(compile_check.MARK_BEGIN) : section.index(compile_check.MARK_END)]
    docs = [
        line
        for line in section.splitlines()
        if line.startswith("| gluon/") and " | bfloat16 | 128 | 1 | " in line
    ]
    assert sorted(fresh) == sorted(docs), "\n".join(["docs:", *docs, "tool:", *fresh])


@pytest.mark.timeout(900)
def test_gluon_backward_compiles_for_sm90_with_setmaxnreg_wgmma_and_tma_reduce(tmp_path):
    """hopper_ws_bwd.py (compile-only: never run, not routed): the ``gluon_bwd`` kernel set
    compiles for sm_90 without spills, with ``setmaxnreg`` (consumers 240, producer 24),
    async wgmma, and TMA loads, stores and reduce-adds, within the shared-memory limit."""
    reason = _gluon_toolchain()
    if reason:
        pytest.skip(reason)
    from slurmkit_kernels import compile_check

    # It reaches the IR builder for the TMA reduce (no Gluon API for it): checked with
    # triton 3.6.0 and 3.7.1 (docs/kernels.md, "Toolchain range").
    hopper_ws_bwd = pytest.importorskip("slurmkit_kernels.hopper_ws_bwd")

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(KERNELS_SRC), env.get("PYTHONPATH", "")])
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    md = tmp_path / "table.md"
    md.write_text(f"{compile_check.MARK_BEGIN}\n{compile_check.MARK_END}\n")
    args = ["--kernel-sets", "gluon_bwd", "--dtypes", "bfloat16", "--head-dims", "128", "--seq-lens", "4096"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurmkit_kernels.compile_check",
            *args,
            "--gqa",
            "1",
            "--markdown-into",
            str(md),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=850,
    )
    rows = _table(proc.stdout)
    assert len(rows) == 1, proc.stdout + proc.stderr  # causal and non-causal: one kernel
    row = rows[0]
    assert row["kernel"] == "_ws_bwd" and row["warps"] == "12", row
    assert 0 < int(row["smem"]) <= compile_check.SMEM_LIMIT[90], row
    # TMA loads of K, V, Q, dO, the dK/dV stores and the dQ reduce-adds (counted together).
    assert int(row["wgmma"]) > 0 and int(row["tma"]) > 0, row
    count, values = row["setmaxnreg"].split(":")
    assert int(count) > 0, row
    assert {hopper_ws_bwd.CONSUMER_REGS, hopper_ws_bwd.LOADER_REGS} <= {int(n) for n in values.split("/")}, (
        row
    )
    assert row["spill"] == "0/0", row
    assert proc.returncode == 0 and row["result"] == "ok", row
    # docs/kernels.md's gluon_bwd row (bf16, MHA) is what the tool prints now.
    fresh = [line for line in md.read_text().splitlines() if line.startswith("| gluon_bwd/")]
    section = DOCS.read_text(encoding="utf-8")
    section = section[section.index(compile_check.MARK_BEGIN) : section.index(compile_check.MARK_END)]
    docs = [
        line
        for line in section.splitlines()
        if line.startswith("| gluon_bwd/") and " | bfloat16 | 128 | 1 | " in line
    ]
    assert fresh and sorted(fresh) == sorted(docs), "\n".join(["docs:", *docs, "tool:", *fresh])


def test_gluon_backward_is_never_routed():
    """No call path reaches hopper_ws_bwd: it has never run (compile-only)."""
    import inspect

    from slurmkit_kernels import _hopper

    for module in (attention_mod, _hopper, hopper_ws):
        assert "hopper_ws_bwd" not in inspect.getsource(module), module.__name__


def test_tma_reduce_adds_are_counted_as_tma():
    from slurmkit_kernels import compile_check

    ptx = "\t@%p1 cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%rd1, {%r1, %r2}], [%r3];"
    assert compile_check.count_instructions(ptx, "cp.reduce.async.bulk.tensor") == 1
    assert compile_check.count_instructions(ptx, "cp.async.bulk.tensor") == 0


def test_ptx_async_wgmma_and_setmaxnreg_are_counted():
    from slurmkit_kernels import compile_check

    ptx = "\n".join(
        [
            "\tsetmaxnreg.dec.sync.aligned.u32 \t24;",
            "\tsetmaxnreg.inc.sync.aligned.u32 \t240;",
            "\tsetmaxnreg.inc.sync.aligned.u32 \t240;",
            "\twgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f1}, %rd1, %rd2, 1, 1, 1, 0, 1;",
            "\twgmma.wait_group.sync.aligned 1;",
        ]
    )
    assert compile_check.count_instructions(ptx, "setmaxnreg") == 3
    assert compile_check.setmaxnreg_values(ptx) == (24, 240)
    row = compile_check.Row("gluon", "_ws_fwd", [], "bfloat16", 128, "ieee", "64x128", 12, 2, wgmma=1, tma=0)
    row.spill_stores = row.spill_loads = 0
    row.setmaxnreg, row.setmaxnreg_values = 3, (24, 240)
    assert compile_check.verdict(row, 232448) == "NO TMA"
    row.tma, row.setmaxnreg = 4, 0
    assert compile_check.verdict(row, 232448) == "NO SETMAXNREG"
    row.setmaxnreg = 3
    assert compile_check.verdict(row, 232448) == "ok"
    assert compile_check._setmaxnreg(row) == "3:24/240"


@pytest.mark.parametrize(
    "capability, env, dtype, head_dim, expected",
    [
        ((9, 0), "1", torch.bfloat16, 128, True),
        ((9, 0), "1", torch.float16, 128, True),
        ((9, 0), None, torch.bfloat16, 128, False),  # opt-in only
        ((9, 0), "0", torch.bfloat16, 128, False),
        ((9, 0), "1", torch.bfloat16, 64, False),  # d128 only
        ((9, 0), "1", torch.float32, 128, False),
        ((10, 0), "1", torch.bfloat16, 128, False),  # sm_90 instructions (wgmma, setmaxnreg)
        ((8, 0), "1", torch.bfloat16, 128, False),
    ],
)
def test_gluon_selection(capability, env, dtype, head_dim, expected, monkeypatch):
    fake = types.SimpleNamespace(device=torch.device("cuda", 0), dtype=dtype, shape=(1, 2, 64, head_dim))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: capability)
    if env is None:
        monkeypatch.delenv(attention_mod.GLUON_ENV, raising=False)
    else:
        monkeypatch.setenv(attention_mod.GLUON_ENV, env)
    assert attention_mod._use_gluon(fake, fake, fake) is expected


def test_gluon_launch_gets_the_forwards_buffers_and_scale(monkeypatch):
    """``_forward(..., hopper=True, gluon=True)`` hands the Gluon kernel the ``o``/``lse`` it
    returns (lse (batch, heads, seq_q) fp32, the layout the Hopper backward reads) and the
    log2-domain scale; ``gluon=True`` without ``hopper`` keeps the portable forward."""
    seen = []
    monkeypatch.setattr(hopper_ws, "forward", lambda *args: seen.append(args))
    monkeypatch.setattr(_hopper, "forward", lambda *args: pytest.fail("the Hopper forward ran"))
    q = torch.empty((2, 4, 96, 128), dtype=torch.bfloat16, device="meta")
    k = torch.empty((2, 1, 80, 128), dtype=torch.bfloat16, device="meta")
    band = attention_mod._band(True, None, 96, 80)
    o, lse = attention_mod._forward(q, k, k, band, 0.1, "ieee", SMALL, True, True)
    (args,) = seen
    assert args[3] is o and args[4] is lse
    assert lse.shape == (2, 4, 96) and lse.dtype == torch.float32
    assert args[5] == band and args[6] == pytest.approx(0.1 * 1.4426950408889634)
    kernel, grid, launch_args, kwargs = hopper_ws.forward_launch(q, k, k, o, lse, band, 0.1)
    assert grid == (2 * 4, math.ceil(96 / (2 * hopper_ws.TILES[0])))
    assert launch_args[8] == 4  # GQA group
    assert kwargs["LONGEST_FIRST"] is True and kwargs["HEAD_DIM"] == 128


@pytest.mark.timeout(600)
def test_opt_in_without_a_gpu_falls_back_to_the_hopper_forward(device, monkeypatch):
    """SLURMKIT_KERNELS_GLUON=1 with the Hopper path on a device the Gluon kernel does not
    serve (here the interpreter): the Hopper forward runs and the results are within budget."""
    monkeypatch.setenv(attention_mod.GLUON_ENV, "1")
    monkeypatch.setattr(hopper_ws, "forward", lambda *args: pytest.fail("the Gluon forward ran"))
    calls = []
    real = _hopper.forward
    monkeypatch.setattr(_hopper, "forward", lambda *args: calls.append(1) or real(*args))
    gen = torch.Generator().manual_seed(29)
    dtype = torch.bfloat16
    q, k, v = (
        torch.randn((1, 2, 40, 128), generator=gen).to(device, dtype).requires_grad_() for _ in range(3)
    )
    do = torch.randn((1, 2, 40, 128), generator=gen).to(device, dtype)
    scale = 128**-0.5
    got = run_with_grads(lambda a, b, c: flash_attention(a, b, c, hopper=True, config=SMALL), q, k, v, do)
    assert calls == [1]
    same = run_with_grads(lambda a, b, c: naive_attention(a, b, c, False, scale, None), q, k, v, do)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = run_with_grads(
        lambda a, b, c: naive_attention(a, b, c, False, scale, None), q64, k64, v64, do.double()
    )
    floor = ERROR_FLOOR[dtype] * max(r.abs().max().item() for r in ref)
    for label, g, s, r in zip(("out", "dq", "dk", "dv"), got, same, ref):
        check_against_budget(g, s, r, floor, label)


def test_interpreter_does_not_run_gluon(device):
    """Triton's interpreter cannot run the Gluon kernel (triton 3.6/3.7): its numerics are
    checked on a GPU only (gpu_check). If this starts to pass, add interpreter numerics."""
    if not attention_mod.interpreter_active():
        pytest.skip("only meaningful under TRITON_INTERPRET=1")
    q = torch.zeros((1, 1, 128, 128), dtype=torch.bfloat16)
    lse = torch.zeros((1, 1, 128), dtype=torch.float32)
    with pytest.raises(Exception):  # noqa: B017, PT011 (whatever the launcher raises)
        hopper_ws.forward(q, q, q, torch.empty_like(q), lse, (-(2**30), 2**30), 0.1)
