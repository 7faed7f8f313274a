"""flash_attention_varlen against per-sequence dense attention in float64.

The reference splits the packed tensors at ``cu_seqlens`` and runs the textbook attention
of test_attention.py on each sequence alone (so masks are aligned bottom-right per
sequence, as FlashAttention-2's varlen API does), then concatenates. Accuracy uses the
same budget as the dense tests: at most 2x the error of that naive attention computed in
the kernel's dtype, plus a small floor, for the output and dQ, dK, dV.

Batches mix empty sequences (query side, key side, both), length-1 sequences, lengths
around the tile sizes and seq_q != seq_k in both directions.
"""

import math
import zlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from test_attention import (  # noqa: E402
    ERROR_FLOOR,
    SMALL_TILES,
    check_against_budget,
    naive_attention,
    run_with_grads,
)

from slurmkit_kernels import attention as attention_mod  # noqa: E402
from slurmkit_kernels import flash_attention, flash_attention_varlen  # noqa: E402

# (len_q, len_k) per sequence: ragged, empty on either side or both, length 1, q != k.
LENGTHS = {
    "mixed": [(17, 40), (0, 5), (1, 1), (33, 33), (40, 9), (5, 0), (0, 0), (70, 70)],
    "equal": [(1, 1), (31, 31), (48, 48), (0, 0), (65, 65)],
}
MASKS = {
    "full": (False, None),
    "causal": (True, None),
    "window": (False, (6, 3)),
    "causal-window": (True, (9, 0)),
}
CASES = [
    # (dtype, mask, lengths, heads (q, kv), head_dim)
    (torch.float32, "full", "mixed", (4, 2), 16),
    (torch.float32, "causal", "mixed", (4, 1), 32),
    (torch.float16, "window", "mixed", (2, 2), 16),
    (torch.bfloat16, "causal-window", "mixed", (4, 2), 16),
    (torch.float16, "causal", "equal", (3, 1), 64),
    (torch.bfloat16, "full", "equal", (2, 1), 32),
]


@pytest.fixture
def poison_outputs(monkeypatch):
    """Every tensor the kernels allocate starts as NaN, so an unwritten element fails."""
    real = attention_mod._empty

    def nan_empty(shape, dtype, device):
        return real(shape, dtype, device).fill_(float("nan"))

    # varlen.py imported _empty by name, so patch it there.
    monkeypatch.setattr("slurmkit_kernels.varlen._empty", nan_empty)


def cu_seqlens(lengths, device):
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32, device=device)


def per_sequence(q, k, v, lens, causal, scale, window):
    """Dense attention of each packed sequence alone, concatenated back to (total, H, D)."""
    outs = []
    qs, ks = 0, 0
    for n_q, n_k in lens:
        qi = q[qs : qs + n_q].transpose(0, 1)[None]
        ki = k[ks : ks + n_k].transpose(0, 1)[None]
        vi = v[ks : ks + n_k].transpose(0, 1)[None]
        outs.append(naive_attention(qi, ki, vi, causal, scale, window)[0].transpose(0, 1))
        qs, ks = qs + n_q, ks + n_k
    return torch.cat(outs, dim=0)


def case_id(case):
    dtype, mask, lengths, heads, d = case
    return f"{str(dtype).removeprefix('torch.')}-{mask}-{lengths}-h{heads[0]}kv{heads[1]}-d{d}"


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_varlen_matches_per_sequence_reference(case, device, poison_outputs):
    dtype, mask, lengths, (h_q, h_kv), d = case
    causal, window = MASKS[mask]
    lens = LENGTHS[lengths]
    total_q, total_k = sum(n for n, _ in lens), sum(n for _, n in lens)
    gen = torch.Generator().manual_seed(zlib.crc32(case_id(case).encode()))
    # q as a strided view (every other element of the last dim), k/v contiguous.
    q = torch.randn((total_q, h_q, 2 * d), generator=gen).to(device, dtype)[..., ::2].requires_grad_()
    k = torch.randn((total_k, h_kv, d), generator=gen).to(device, dtype).requires_grad_()
    v = torch.randn((total_k, h_kv, d), generator=gen).to(device, dtype).requires_grad_()
    do = torch.randn((total_q, h_q, d), generator=gen).to(device, dtype)
    cu_q = cu_seqlens([n for n, _ in lens], device)
    cu_k = cu_seqlens([n for _, n in lens], device)
    max_q, max_k = max(n for n, _ in lens), max(n for _, n in lens)
    scale = 1.0 / math.sqrt(d)

    got = run_with_grads(
        lambda a, b, c: flash_attention_varlen(
            a, b, c, cu_q, cu_k, max_q, max_k, causal=causal, window=window, config=SMALL_TILES
        ),
        q,
        k,
        v,
        do,
    )
    same = run_with_grads(lambda a, b, c: per_sequence(a, b, c, lens, causal, scale, window), q, k, v, do)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = run_with_grads(
        lambda a, b, c: per_sequence(a, b, c, lens, causal, scale, window), q64, k64, v64, do.double()
    )
    floor = ERROR_FLOOR[dtype] * max(r.abs().max().item() for r in ref)
    for label, g, s, r in zip(("out", "dq", "dk", "dv"), got, same, ref):
        assert g.dtype == dtype and g.shape == r.shape, label
        check_against_budget(g, s, r, floor, label)
    # A sequence with queries but no keys outputs exactly 0 with zero gradient.
    if lengths == "mixed":
        start = sum(n for n, _ in lens[:5])  # sequence 5 is (5, 0)
        assert torch.equal(got[0][start : start + 5], torch.zeros_like(got[0][start : start + 5]))
        assert torch.equal(got[1][start : start + 5], torch.zeros_like(got[1][start : start + 5]))


def test_varlen_equals_dense_kernel_per_sequence(device):
    """Same tiles, same inner loops: each sequence's output is bitwise the dense kernel's."""
    gen = torch.Generator().manual_seed(7)
    lens = [(37, 50), (20, 20)]
    q = torch.randn((57, 2, 32), generator=gen).to(device)
    k = torch.randn((70, 2, 32), generator=gen).to(device)
    v = torch.randn((70, 2, 32), generator=gen).to(device)
    cu_q, cu_k = cu_seqlens([37, 20], device), cu_seqlens([50, 20], device)
    out = flash_attention_varlen(q, k, v, cu_q, cu_k, 37, 50, causal=True, config=SMALL_TILES)
    qs = ks = 0
    for n_q, n_k in lens:
        dense = flash_attention(
            q[qs : qs + n_q].transpose(0, 1)[None],
            k[ks : ks + n_k].transpose(0, 1)[None],
            v[ks : ks + n_k].transpose(0, 1)[None],
            causal=True,
            config=SMALL_TILES,
        )
        assert torch.equal(out[qs : qs + n_q], dense[0].transpose(0, 1))
        qs, ks = qs + n_q, ks + n_k


def test_varlen_backward_is_bitwise_deterministic(device):
    gen = torch.Generator().manual_seed(8)
    q = torch.randn((45, 4, 16), generator=gen).to(device, torch.bfloat16).requires_grad_()
    k = torch.randn((45, 1, 16), generator=gen).to(device, torch.bfloat16).requires_grad_()
    v = torch.randn((45, 1, 16), generator=gen).to(device, torch.bfloat16).requires_grad_()
    do = torch.randn((45, 4, 16), generator=gen).to(device, torch.bfloat16)
    cu = cu_seqlens([30, 15], device)

    def fn(a, b, c):
        return flash_attention_varlen(a, b, c, cu, cu, 30, 30, causal=True, config=SMALL_TILES)

    first, second = run_with_grads(fn, q, k, v, do), run_with_grads(fn, q, k, v, do)
    for a, b in zip(first, second):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))


def _good(device):
    q = torch.randn((10, 4, 16), device=device)
    k = torch.randn((12, 2, 16), device=device)
    return q, k, k.clone(), cu_seqlens([4, 6], device), cu_seqlens([5, 7], device), 6, 7


BAD_VARLEN = {
    "rank4": (lambda a: (a[0][None], *a[1:]), {}, "3 dimensions"),
    "empty": (lambda a: (a[0][:0], *a[1:]), {}, "empty"),
    "cu-int64": (lambda a: (*a[:3], a[3].long(), *a[4:]), {}, "int32"),
    "cu-2d": (lambda a: (*a[:3], a[3][None], *a[4:]), {}, "1-D"),
    "cu-not-from-zero": (lambda a: (*a[:3], a[3] + 1, *a[4:]), {}, "start at 0"),
    "cu-short-total": (lambda a: (*a[:3], cu_seqlens([4, 5], a[0].device), *a[4:]), {}, "end at"),
    "cu-decreasing": (
        lambda a: (*a[:3], torch.tensor([0, 7, 5, 10], dtype=torch.int32, device=a[0].device), *a[4:]),
        {},
        "non-decreasing|batch",
    ),
    "batch-mismatch": (lambda a: (*a[:4], cu_seqlens([5, 5, 2], a[0].device), a[5], a[6]), {}, "sequences"),
    "max-too-small": (lambda a: (*a[:5], 5, a[6]), {}, "longest"),
    "max-float": (lambda a: (*a[:6], 7.0), {}, "longest"),
    "dtype": (lambda a: (a[0].double(), a[1].double(), a[2].double(), *a[3:]), {}, "dtype"),
    "heads": (lambda a: (torch.randn(10, 3, 16, device=a[0].device), *a[1:]), {}, "multiple"),
    "window": (lambda a: a, {"window": (1, 2, 3)}, "window"),
    "causal-right": (lambda a: a, {"causal": True, "window": (2, 2)}, "contradicts"),
}


@pytest.mark.parametrize("name", list(BAD_VARLEN))
def test_varlen_bad_inputs_raise_value_error(name, device):
    make, kwargs, message = BAD_VARLEN[name]
    args = make(_good(device))
    with pytest.raises(ValueError, match=message):
        flash_attention_varlen(*args, **kwargs)


def test_varlen_fp32_launches_the_tiles_of_its_precision(device, monkeypatch):
    """fp32 has separate tiles for exact (IEEE) and TF32 dots, as in flash_attention; the
    varlen path looked its tiles up without the precision, so TF32 ran the IEEE tiles."""
    from slurmkit_kernels import varlen as varlen_mod
    from slurmkit_kernels.config import KernelConfig, LaunchConfig

    tiles = {
        "ieee": (LaunchConfig(16, 16), LaunchConfig(16, 16), LaunchConfig(16, 16)),
        "tf32": (LaunchConfig(32, 16), LaunchConfig(16, 32), LaunchConfig(32, 16)),
    }
    config = KernelConfig(
        name="per-precision",
        match=(),
        provenance="tests",
        kernels={
            kernel: {"default": LaunchConfig(64, 64), **{f"float32/{p}": t[i] for p, t in tiles.items()}}
            for i, kernel in enumerate(("fwd", "bwd_dkdv", "bwd_dq"))
        },
    )
    launched = []
    real_meta = varlen_mod.portable_meta

    def recording_meta(*args):
        cfg, meta = real_meta(*args)
        launched.append(cfg)
        return cfg, meta

    monkeypatch.setattr(varlen_mod, "portable_meta", recording_meta)
    lens = [5, 9]
    cu = cu_seqlens(lens, device)
    for precision, expected in tiles.items():
        launched.clear()
        q, k, v = (torch.randn((sum(lens), 2, 16), device=device).requires_grad_() for _ in range(3))
        out = flash_attention_varlen(q, k, v, cu, cu, 9, 9, precision=precision, config=config)
        out.sum().backward()
        assert launched == list(expected), precision


def test_dense_and_varlen_kernels_share_one_body_per_pass():
    """The varlen kernels only read their sequence's bounds and band and call the dense
    kernels' block functions: pointer setup, the three-stage loops, normalisation and the
    stores exist once (issue 29, item 6; they were ~74% repeated lines before)."""
    import inspect

    from slurmkit_kernels import _kernels, _varlen

    blocks = {
        "_fwd_block": (_kernels._attn_fwd, _varlen._varlen_fwd),
        "_dkdv_block": (_kernels._attn_bwd_dkdv, _varlen._varlen_bwd_dkdv),
        "_dq_block": (_kernels._attn_bwd_dq, _varlen._varlen_bwd_dq),
    }
    for block, kernels in blocks.items():
        for kernel in kernels:
            src = kernel.src if hasattr(kernel, "src") else inspect.getsource(kernel.fn)
            assert f"{block}(" in src, (kernel.fn.__name__, block)
            assert "tl.store(" not in src and "_inner(" not in src, kernel.fn.__name__
    dense_src = inspect.getsource(_kernels)
    # Each inner loop is called once, by its block (inside its three-stage static_range).
    for inner in ("_fwd_inner(", "_bwd_dkdv_inner(", "_bwd_dq_inner("):
        assert dense_src.count(f"= {inner}") == 1, inner
    assert "_inner(" not in inspect.getsource(_varlen)
