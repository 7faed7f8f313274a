"""64-bit offsets of the dense kernels' per-(batch, head) bases (issue 30); varlen's own copy of
the ``_tile`` helper is probed beside the dense one in tests/kernels/test_offsets.py.

Both run on the CPU through Triton's interpreter, whose integer arithmetic is numpy's: an
``int32`` product wraps exactly as it does on a GPU.

* forward and backward run on ``(B, H, N, D)`` views whose batch (B = 3) or head (H = 3)
  stride is just over 2**30 elements, so batch or head 2 starts past 2**31 elements while
  the stride itself still fits in ``int32`` (a stride of 2**31 or more is passed as
  ``int64`` and would hide an ``int32`` product). As in test_offsets.py the views start
  2**31 elements into large, almost untouched allocations, so a wrapped offset reads and
  writes inside them and the test fails on wrong values instead of crashing.
"""

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from slurmkit_kernels import LaunchConfig, flash_attention  # noqa: E402
from slurmkit_kernels import attention as attention_mod  # noqa: E402
from slurmkit_kernels.config import KernelConfig  # noqa: E402

TWO_31 = 2**31


N, D = 8, 16
#: batch or head stride: fits int32, twice it does not
BIG_STRIDE = 2**30 + 2**20
ROW = 4 * D  # q, k, v, dO side by side in one row of the inputs' allocation
ONE_BLOCK = KernelConfig(
    name="one-block",
    match=(),
    provenance="tests",
    kernels={name: {"default": LaunchConfig(64, 64)} for name in ("fwd", "bwd_dkdv", "bwd_dq")},
)
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


@pytest.mark.parametrize("batch, heads", [(3, 1), (1, 3)], ids=["batch-stride", "head-stride"])
def test_forward_backward_with_batch_or_head_offsets_past_2_31(batch, heads, device, monkeypatch):
    assert BIG_STRIDE < TWO_31 <= 2 * BIG_STRIDE
    if batch > 1:
        strides = (BIG_STRIDE, N * ROW, ROW, 1)
    else:
        strides = (heads * BIG_STRIDE, BIG_STRIDE, ROW, 1)
    shape = (batch, heads, N, D)
    last = sum((n - 1) * s for n, s in zip(shape, strides))
    assert last >= TWO_31
    numel = TWO_31 + last + ROW
    dtype = torch.float16
    try:
        big = {name: torch.empty(numel, dtype=dtype, device=device) for name in ("in", "o", "dq", "dk", "dv")}
    except (RuntimeError, MemoryError) as e:  # torch.OutOfMemoryError is a RuntimeError
        pytest.skip(f"cannot allocate 5 x {numel * 2 / 1e9:.1f} GB of address space on {device}: {e}")

    def view(slot: str) -> torch.Tensor:
        storage, column = SLOTS[slot]
        return big[storage].as_strided(shape, strides, TWO_31 + column * D)

    gen = torch.Generator().manual_seed(11)
    values = {s: torch.randn(shape, generator=gen).to(device, dtype) for s in ("q", "k", "v", "do")}
    for slot, t in values.items():
        view(slot).copy_(t)
    for slot in ("o", "dq", "dk", "dv"):
        view(slot).fill_(float("nan"))  # unwritten output elements fail the test

    real_empty = attention_mod._empty
    outputs = iter(["o", "dk", "dv", "dq"])  # the order _forward and _backward allocate them

    def empty_in_big(shape_, dtype_, device_):
        if tuple(shape_) == shape and dtype_ == dtype:
            return view(next(outputs))
        return real_empty(shape_, dtype_, device_)

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
        got = got.detach().double()
        assert torch.isfinite(got).all(), f"{name}: unwritten or non-finite elements"
        err = (got - want).abs()
        worst = err.flatten(2).amax(-1)  # per (batch, head): index 2 is the one past 2**31
        assert err.max().item() <= 2e-2 * want.abs().max().item(), f"{name}: max error per (b, h) {worst}"
