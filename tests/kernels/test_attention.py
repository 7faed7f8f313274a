"""Accuracy, masking, GQA, layout and determinism tests for slurmkit_kernels.flash_attention.

Accuracy rule (FlashAttention's and FlagAttention's): against a float64 reference, the
kernel's max error may be at most 2x the max error of a naive PyTorch attention computed
in the kernel's own dtype, for the output and for dQ, dK, dV. A small floor is added,
ERROR_FLOOR[dtype] times the largest magnitude among the four reference tensors (below
half an ulp for fp16/bf16, ~8 ulps for fp32): for fp32 both errors are ~1e-7 relative and
their ratio is noise, and with a single key the exact dK is 0, which PyTorch reproduces
exactly while the kernel's dP - delta leaves rounding residue.

Under the interpreter the kernels emulate the GPU's bf16 arithmetic (EMULATE_BF16 in
_kernels.py: fp32 dots, round-to-nearest-even casts); without it, bf16 errors would be
about twice the GPU's and sit right at the 2x budget.

The parameter space (dtype x mask x head dim x lengths x heads x layout x tiles) is
covered pairwise, not as a full product, to keep the suite at about a minute on 2 cores.
"""

import itertools
import math
import zlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from slurmkit_kernels import LaunchConfig, flash_attention  # noqa: E402
from slurmkit_kernels import attention as attention_mod  # noqa: E402
from slurmkit_kernels.config import KernelConfig, builtin_config  # noqa: E402

ERROR_FLOOR = {torch.float32: 1e-6, torch.float16: 1e-4, torch.bfloat16: 1e-3}

# Small, unequal tiles: many blocks per row, BLOCK_M != BLOCK_N, ragged ends everywhere.
SMALL_TILES = KernelConfig(
    name="small-tiles",
    match=(),
    provenance="tests",
    kernels={
        "fwd": {"default": LaunchConfig(16, 32)},
        "bwd_dkdv": {"default": LaunchConfig(32, 16)},
        "bwd_dq": {"default": LaunchConfig(16, 32)},
    },
)
TILES = {"default": builtin_config("default"), "small": SMALL_TILES}


def pairwise(factors: dict[str, list]) -> list[dict]:
    """Greedy all-pairs covering set: every value pair of any two factors appears once+.

    Deterministic (no randomness), so the parametrisation and test ids are stable.
    """
    names = list(factors)
    uncovered = {
        (a, va, b, vb) for a, b in itertools.combinations(names, 2) for va in factors[a] for vb in factors[b]
    }
    cases = []
    used = {(name, repr(val)): 0 for name in names for val in factors[name]}
    while uncovered:
        # Seed with an uncovered pair, then fill the other factors greedily: most newly
        # covered pairs first, then the least used value (keeps e.g. masks balanced).
        a, va, b, vb = min(uncovered, key=repr)
        case = {a: va, b: vb}
        for name in names:
            if name in case:
                continue
            case[name] = max(
                factors[name],
                key=lambda val: (
                    sum(
                        (n, case[n], name, val) in uncovered or (name, val, n, case[n]) in uncovered
                        for n in case
                    ),
                    -used[(name, repr(val))],
                ),
            )
        for name in names:
            used[(name, repr(case[name]))] += 1
        cases.append(case)
        for x, y in itertools.combinations(names, 2):
            uncovered.discard((x, case[x], y, case[y]))
    return cases


FACTORS = {
    "dtype": [torch.float32, torch.float16, torch.bfloat16],
    # (causal, window): full, causal, two-sided sliding window, causal sliding window
    "mask": [(False, None), (True, None), (False, (20, 7)), (True, (33, 0))],
    "head_dim": [16, 32, 64, 128],
    "lengths": [(1, 1), (17, 100), (100, 17), (129, 200), (200, 129), (200, 1)],
    # (batch, heads_q, heads_kv): MHA, GQA 4:1 with two groups (checks the head mapping), MQA 8:1
    "heads": [(2, 2, 2), (1, 8, 2), (1, 8, 1)],
    "layout": ["contiguous", "bnhd", "strided"],
    "tiles": ["default", "small"],
}
CASES = pairwise(FACTORS)


def mask_id(causal, window) -> str:
    name = "causal" if causal else "full"
    return name if window is None else f"{name}-window{window[0]}_{window[1]}"


def case_id(case: dict) -> str:
    b, hq, hkv = case["heads"]
    nq, nk = case["lengths"]
    return (
        f"{str(case['dtype']).removeprefix('torch.')}-{mask_id(*case['mask'])}"
        f"-d{case['head_dim']}-q{nq}k{nk}-b{b}h{hq}kv{hkv}-{case['layout']}-{case['tiles']}"
    )


def make_tensor(shape, dtype, layout, device, gen):
    """Fresh N(0,1) data in the requested memory layout (never zeros, never reused).

    "bnhd" is the transposed view a model gets from (batch, seq, heads, dim) projections;
    "strided" takes every other element of the last dim, so no stride is 1.
    """
    b, h, n, d = shape
    storage_shape = {"contiguous": (b, h, n, d), "bnhd": (b, n, h, d), "strided": (b, h, n, 2 * d)}
    base = torch.randn(storage_shape[layout], generator=gen).to(device=device, dtype=dtype)
    view = {"contiguous": base, "bnhd": base.transpose(1, 2), "strided": base[..., ::2]}[layout]
    assert view.shape == shape
    return view.requires_grad_()


def naive_attention(q, k, v, causal, scale, window=None):
    """Textbook attention in the inputs' dtype (the same-precision baseline and, in fp64,
    the reference), with the mask written out as its definition in docs/kernels.md:
    query i sees key j iff j <= i + off (causal) and i + off - left <= j <= i + off + right
    (window; -1 = unbounded), off = n_k - n_q. Rows without a visible key produce 0."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    n_q, n_k = s.shape[-2:]
    i = torch.arange(n_q, device=s.device)[:, None]
    j = torch.arange(n_k, device=s.device)[None, :]
    off = n_k - n_q
    visible = torch.ones(n_q, n_k, dtype=torch.bool, device=s.device)
    if causal:
        visible &= j <= i + off
    if window is not None:
        left, right = window
        if left >= 0:
            visible &= j >= i + off - left
        if right >= 0:
            visible &= j <= i + off + right
    has_key = visible.any(dim=-1, keepdim=True)
    # Empty rows get finite scores (so softmax has no NaN) and are zeroed afterwards.
    s = s.masked_fill(~visible & has_key, float("-inf"))
    p = torch.softmax(s, dim=-1) * has_key
    return p @ v


def run_with_grads(fn, q, k, v, do):
    out = fn(q, k, v)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), do)
    return out, dq, dk, dv


@pytest.fixture
def poison_outputs(monkeypatch):
    """Every tensor the kernels allocate starts as NaN, so an unwritten element fails."""
    real = attention_mod._empty

    def nan_empty(shape, dtype, device):
        return real(shape, dtype, device).fill_(float("nan"))

    monkeypatch.setattr(attention_mod, "_empty", nan_empty)


def check_against_budget(kernel, same_dtype, reference, floor, label):
    assert torch.isfinite(kernel).all(), f"{label}: kernel produced non-finite values"
    kernel_err = (kernel.double() - reference).abs().max().item()
    torch_err = (same_dtype.double() - reference).abs().max().item()
    assert kernel_err <= 2 * torch_err + floor, (
        f"{label}: kernel error {kernel_err:.3e} exceeds 2 x PyTorch same-dtype error "
        f"{torch_err:.3e} + floor {floor:.1e}"
    )


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_matches_reference_within_error_budget(case, device, poison_outputs):
    dtype, d = case["dtype"], case["head_dim"]
    causal, window = case["mask"]
    b, hq, hkv = case["heads"]
    nq, nk = case["lengths"]
    gen = torch.Generator().manual_seed(zlib.crc32(case_id(case).encode()))
    q = make_tensor((b, hq, nq, d), dtype, case["layout"], device, gen)
    k = make_tensor((b, hkv, nk, d), dtype, case["layout"], device, gen)
    v = make_tensor((b, hkv, nk, d), dtype, case["layout"], device, gen)
    do = torch.randn((b, hq, nq, d), generator=gen).to(device=device, dtype=dtype)
    scale = 1.0 / math.sqrt(d)
    config = TILES[case["tiles"]]

    got = run_with_grads(
        lambda q_, k_, v_: flash_attention(q_, k_, v_, causal=causal, window=window, config=config),
        q,
        k,
        v,
        do,
    )
    same = run_with_grads(lambda q_, k_, v_: naive_attention(q_, k_, v_, causal, scale, window), q, k, v, do)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = run_with_grads(
        lambda q_, k_, v_: naive_attention(q_, k_, v_, causal, scale, window), q64, k64, v64, do.double()
    )
    floor = ERROR_FLOOR[dtype] * max(r.abs().max().item() for r in ref)
    for label, g, s, r in zip(("out", "dq", "dk", "dv"), got, same, ref):
        assert g.dtype == dtype and g.shape == r.shape, label
        check_against_budget(g, s, r, floor, label)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_without_visible_keys_are_zero(dtype, device, poison_outputs):
    """Causal with seq_q > seq_k: the first seq_q - seq_k rows see nothing -> 0, not NaN."""
    gen = torch.Generator().manual_seed(1)
    nq, nk = 40, 9
    q = torch.randn((1, 2, nq, 32), generator=gen).to(device, dtype).requires_grad_()
    k = torch.randn((1, 2, nk, 32), generator=gen).to(device, dtype).requires_grad_()
    v = torch.randn((1, 2, nk, 32), generator=gen).to(device, dtype).requires_grad_()
    do = torch.randn((1, 2, nq, 32), generator=gen).to(device, dtype)
    out, dq, dk, dv = run_with_grads(
        lambda a, b_, c: flash_attention(a, b_, c, causal=True, config=SMALL_TILES), q, k, v, do
    )
    empty_rows = nq - nk
    assert torch.equal(out[:, :, :empty_rows], torch.zeros_like(out[:, :, :empty_rows]))
    assert torch.equal(dq[:, :, :empty_rows], torch.zeros_like(dq[:, :, :empty_rows]))
    # The last row sees every key, so it is a genuine weighted average of v.
    assert out[:, :, -1].abs().sum() > 0
    for t in (out, dq, dk, dv):
        assert torch.isfinite(t).all()


def test_backward_is_bitwise_deterministic(device):
    """Two backward passes over the same inputs give identical bits (GQA sums included)."""
    gen = torch.Generator().manual_seed(2)
    q = torch.randn((1, 8, 70, 32), generator=gen).to(device, torch.bfloat16).requires_grad_()
    k = torch.randn((1, 2, 90, 32), generator=gen).to(device, torch.bfloat16).requires_grad_()
    v = torch.randn((1, 2, 90, 32), generator=gen).to(device, torch.bfloat16).requires_grad_()
    do = torch.randn((1, 8, 70, 32), generator=gen).to(device, torch.bfloat16)
    fn = lambda a, b_, c: flash_attention(a, b_, c, causal=True, config=SMALL_TILES)  # noqa: E731
    first = run_with_grads(fn, q, k, v, do)
    second = run_with_grads(fn, q, k, v, do)
    for a, b_ in zip(first, second):
        assert torch.equal(a.view(torch.int16), b_.view(torch.int16))


def test_custom_scale_and_tf32_flag(device):
    """``scale`` reaches the kernel; ``precision="tf32"`` is accepted (same result on CPU)."""
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn((1, 2, 33, 16), generator=gen).to(device) for _ in range(3))
    ref = naive_attention(q.double(), k.double(), v.double(), False, 0.3)
    out = flash_attention(q, k, v, scale=0.3, precision="tf32")
    assert (out.double() - ref).abs().max().item() < 1e-5
    default = flash_attention(q, k, v)
    ref_default = naive_attention(q.double(), k.double(), v.double(), False, 0.25)
    assert (default.double() - ref_default).abs().max().item() < 1e-5


def test_pairwise_cover_is_complete():
    """The generator really covers every pair (so a bug there cannot shrink the suite)."""
    seen = {(a, case[a], b, case[b]) for case in CASES for a, b in itertools.combinations(FACTORS, 2)}
    for a, b in itertools.combinations(FACTORS, 2):
        for va in FACTORS[a]:
            for vb in FACTORS[b]:
                assert (a, va, b, vb) in seen
    assert len(CASES) < 40


@pytest.mark.parametrize(
    "window, causal, n_q, n_k",
    [
        ((0, 0), False, 50, 50),  # only the diagonal: narrower than any tile
        ((5, -1), False, 40, 70),  # left edge only
        ((-1, 3), False, 70, 40),  # right edge only
        ((3, 2), False, 70, 30),  # first rows see no key at all
        ((0, -1), True, 33, 33),  # causal + left 0: each query sees only its own key
    ],
)
def test_window_edges(window, causal, n_q, n_k, device, poison_outputs):
    """Windows narrower than a tile, one-sided windows and windows that leave rows empty."""
    gen = torch.Generator().manual_seed(zlib.crc32(repr((window, causal, n_q, n_k)).encode()))
    q = torch.randn((1, 4, n_q, 16), generator=gen).to(device).requires_grad_()
    k = torch.randn((1, 2, n_k, 16), generator=gen).to(device).requires_grad_()
    v = torch.randn((1, 2, n_k, 16), generator=gen).to(device).requires_grad_()
    do = torch.randn((1, 4, n_q, 16), generator=gen).to(device)
    got = run_with_grads(
        lambda a, b_, c: flash_attention(a, b_, c, causal=causal, window=window, config=SMALL_TILES),
        q,
        k,
        v,
        do,
    )
    same = run_with_grads(lambda a, b_, c: naive_attention(a, b_, c, causal, 0.25, window), q, k, v, do)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = run_with_grads(
        lambda a, b_, c: naive_attention(a, b_, c, causal, 0.25, window), q64, k64, v64, do.double()
    )
    floor = ERROR_FLOOR[torch.float32] * max(r.abs().max().item() for r in ref)
    for label, g, s, r in zip(("out", "dq", "dk", "dv"), got, same, ref):
        check_against_budget(g, s, r, floor, label)
