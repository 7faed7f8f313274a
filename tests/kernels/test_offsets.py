"""Row offsets past 2**31 elements: the kernels address strided views with 64-bit offsets.

``row * stride_row`` in int32 wraps once it passes 2**31 elements and the kernel then
reads (or writes) memory before the tensor; a packed-QKV view ``(B, T, 3, H, D)`` with
``H * D = 8192`` gets there at T ~ 87k. Two tests:

* the offset helper ``_kernels._tile`` itself, with strides whose products pass 2**31
  (no memory needed: it only computes numbers);
* forward and backward through views whose rows lie more than 2**31 elements past their
  first element, for every tensor the kernels address by row (Q, K, V, O, dO, dQ, dK, dV).
  The views live in five large allocations (the inputs, then O, dQ, dK, dV each alone: a
  custom op's outputs may share storage neither with its inputs nor with each other) of
  which only a few pages are ever touched, so the test needs ~48 GB of address space but
  only kilobytes of memory on the CPU (pages that are never written are never backed;
  with SLURMKIT_TEST_DEVICE=cuda it needs ~48 GB of GPU memory and skips without). The views start 2**31 elements into each allocation, so a
  wrapped offset lands inside it: with int32 offsets the test fails on wrong values
  instead of crashing.
"""

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from slurmkit_kernels import LaunchConfig, flash_attention  # noqa: E402
from slurmkit_kernels import attention as attention_mod  # noqa: E402
from slurmkit_kernels._kernels import _tile  # noqa: E402
from slurmkit_kernels.config import KernelConfig  # noqa: E402

TWO_31 = 2**31


@triton.jit
def _tile_probe(OUT, stride_row, stride_col, ROWS: tl.constexpr, COLS: tl.constexpr):
    offs = _tile(tl.arange(0, ROWS), tl.arange(0, COLS), stride_row, stride_col)
    tl.store(OUT + tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :], offs)


#: the kernels' `_tile` behind a probe kernel (varlen had its own copy; it now shares the
#: dense kernels' block functions, and with them `_tile`)
TILE_PROBES = {"dense": _tile_probe}


@pytest.mark.parametrize("kind", sorted(TILE_PROBES))
@pytest.mark.parametrize("stride_row, stride_col", [(2**30 + 3, 1), (3 * 8192, 2**28 + 1), (7, 5)])
def test_tile_offsets_are_exact_past_2_31(kind, stride_row, stride_col, device):
    rows, cols = 16, 16
    out = torch.empty((rows, cols), dtype=torch.int64, device=device)
    TILE_PROBES[kind][(1,)](out, stride_row, stride_col, ROWS=rows, COLS=cols)
    expect = [[r * stride_row + c * stride_col for c in range(cols)] for r in range(rows)]
    assert out.cpu().tolist() == expect


# Views (1, 1, N, D) whose row stride is 2**26 elements: rows 32..39 start past 2**31.
N, D, ROW_STRIDE = 40, 16, 2**26
# slot -> (allocation, column block within a row)
SLOTS = {
    "q": ("in", 0),
    "k": ("in", 1),
    "v": ("in", 2),
    "do": ("in", 3),
    "o": ("o", 0),
    "dq": ("dq", 0),
    "dk": ("dk", 0),
    "dv": ("dv", 0),
}
ONE_BLOCK = KernelConfig(
    name="one-block",
    match=(),
    provenance="tests",
    kernels={name: {"default": LaunchConfig(64, 64)} for name in ("fwd", "bwd_dkdv", "bwd_dq")},
)


def test_forward_backward_on_views_past_2_31_elements(device, monkeypatch):
    dtype = torch.float16
    numel = TWO_31 + (N - 1) * ROW_STRIDE + 4 * D
    try:
        big = {name: torch.empty(numel, dtype=dtype, device=device) for name in ("in", "o", "dq", "dk", "dv")}
    except (RuntimeError, MemoryError) as e:  # torch.OutOfMemoryError is a RuntimeError
        pytest.skip(
            f"cannot allocate 5 x {numel * 2 / 1e9:.1f} GB for views past 2**31 elements on {device}: {e}"
        )
    assert (N - 1) * ROW_STRIDE >= TWO_31

    def view(slot: str) -> torch.Tensor:
        storage, column = SLOTS[slot]
        return big[storage].as_strided(
            (1, 1, N, D), (N * ROW_STRIDE, N * ROW_STRIDE, ROW_STRIDE, 1), TWO_31 + column * D
        )

    gen = torch.Generator().manual_seed(5)
    values = {s: torch.randn((1, 1, N, D), generator=gen).to(device, dtype) for s in ("q", "k", "v", "do")}
    for slot, t in values.items():
        view(slot).copy_(t)
    for slot in ("o", "dq", "dk", "dv"):
        view(slot).fill_(float("nan"))  # unwritten output elements fail the test

    real_empty = attention_mod._empty
    outputs = iter(["o", "dk", "dv", "dq"])  # the order _forward and _backward allocate them

    def empty_in_big(shape, dtype_, device_):
        if tuple(shape) == (1, 1, N, D) and dtype_ == dtype:
            return view(next(outputs))
        return real_empty(shape, dtype_, device_)

    monkeypatch.setattr(attention_mod, "_empty", empty_in_big)
    q, k, v = (view(s).requires_grad_() for s in ("q", "k", "v"))
    out = flash_attention(q, k, v, causal=True, config=ONE_BLOCK)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), view("do"))
    for name, got in (("o", out), ("dq", dq), ("dk", dk), ("dv", dv)):
        assert got.data_ptr() == view(name).data_ptr(), f"{name} was not written into the large view"

    q64, k64, v64 = (values[s].double().requires_grad_() for s in ("q", "k", "v"))
    s = (q64 @ k64.transpose(-1, -2)) / D**0.5
    s = s.masked_fill(torch.ones(N, N, dtype=torch.bool, device=device).triu(1), float("-inf"))
    ref = torch.softmax(s, -1) @ v64
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), values["do"].double())
    for name, got, want in zip(("o", "dq", "dk", "dv"), (out, dq, dk, dv), (ref, *ref_grads)):
        err = (got.double() - want).abs()
        # Rows past 2**31 elements are where int32 offsets go wrong: report them separately.
        assert torch.isfinite(got).all(), f"{name}: unwritten or non-finite elements"
        assert err.max().item() <= 2e-2 * want.abs().max().item(), (
            f"{name}: max error {err.max().item():.3e} (rows >= 32, past 2**31: "
            f"{err[:, :, 32:].max().item():.3e})"
        )
