"""Triton kernels for variable-length (packed) attention, FlashAttention-2's ``varlen`` layout.

Sequences are packed along the token axis: ``q`` is ``(total_q, heads_q, head_dim)`` and
sequence ``b`` owns rows ``cu_seqlens_q[b] : cu_seqlens_q[b + 1]`` (likewise ``k``/``v``
with ``cu_seqlens_k``). Each program reads its sequence's bounds from ``cu_seqlens`` and
then runs the same block functions as the dense kernels in ``_kernels.py``
(``_fwd_block``, ``_dkdv_block``, ``_dq_block``: pointer setup, the three-stage loops, the
online softmax, normalisation and stores), addressed at the sequence's first token instead
of a batch index, so the two paths share one implementation of everything but the grid
and the band.

What differs from the dense kernels:

* The band (``D_LO <= j - i <= D_HI``) depends on each sequence's own ``seq_k - seq_q``
  (masks are aligned bottom-right per sequence, as in FlashAttention-2), so the kernels
  receive the mask itself (``CAUSAL``, ``LEFT``, ``RIGHT``) and derive the band.
* The grid is sized by the longest sequence; backward programs past the end of a shorter
  (or empty) sequence return at once, forward ones visit no key block and store nothing.
* The grid is 3-D (block, head, sequence): each axis stays within CUDA's limits even for
  tens of thousands of sequences.
* ``lse`` and ``delta`` are ``(heads_q, total_q)``, so ``_attn_bwd_preprocess`` of the
  dense path serves unchanged (the packed tensors are passed as one batch).
"""

import triton
import triton.language as tl

from ._kernels import _base, _dkdv_block, _dq_block, _fwd_block

# A band edge beyond any index difference; equals attention._UNBOUNDED.
_UNBOUNDED = tl.constexpr(2**30)


@triton.jit
def _seq_band(n_q, n_k, CAUSAL: tl.constexpr, LEFT, RIGHT):
    """(D_LO, D_HI) of one sequence; ``LEFT``/``RIGHT`` < 0 are unbounded sides."""
    off = n_k - n_q
    d_lo = tl.where(LEFT >= 0, off - LEFT, -_UNBOUNDED)
    if CAUSAL:
        d_hi = off
    else:
        d_hi = tl.where(RIGHT >= 0, off + RIGHT, _UNBOUNDED)
    # Clamp like the dense path, so index arithmetic in _ranges stays inside int32.
    d_lo = tl.maximum(d_lo, -_UNBOUNDED)
    d_hi = tl.minimum(d_hi, _UNBOUNDED)
    return d_lo, d_hi


@triton.jit
def _varlen_fwd(
    Q,
    K,
    V,
    O,
    LSE,
    CU_Q,
    CU_K,  # noqa: E741
    stride_qm,
    stride_qh,
    stride_qd,
    stride_kn,
    stride_kh,
    stride_kd,
    stride_vn,
    stride_vh,
    stride_vd,
    stride_om,
    stride_oh,
    stride_od,
    TOTAL_Q,
    GROUP,
    LEFT,
    RIGHT,
    qk_scale,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """One program per (query block, head, sequence): O rows and the log2-domain lse."""
    start_m = tl.program_id(0) * BLOCK_M
    off_h = tl.program_id(1)
    off_b = tl.program_id(2)
    q_start = tl.load(CU_Q + off_b)
    n_q = tl.load(CU_Q + off_b + 1) - q_start
    k_start = tl.load(CU_K + off_b)
    n_k = tl.load(CU_K + off_b + 1) - k_start
    d_lo, d_hi = _seq_band(n_q, n_k, CAUSAL, LEFT, RIGHT)
    off_hkv = off_h // GROUP
    # A program past its sequence's end visits no key block and stores nothing (all rows
    # masked). An early ``return`` here cost registers: the d64 kernel spilled under triton 3.6.
    n_k_visited = tl.where(start_m < n_q, n_k, 0)
    _fwd_block(
        _base(Q, q_start, stride_qm, off_h, stride_qh),
        _base(K, k_start, stride_kn, off_hkv, stride_kh),
        _base(V, k_start, stride_vn, off_hkv, stride_vh),
        _base(O, q_start, stride_om, off_h, stride_oh),
        LSE,
        off_h,
        TOTAL_Q,
        q_start,
        stride_qm,
        stride_qd,
        stride_kn,
        stride_kd,
        stride_vn,
        stride_vd,
        stride_om,
        stride_od,
        start_m,
        n_q,
        n_k,
        n_k_visited,
        d_lo,
        d_hi,
        qk_scale,
        BLOCK_M,
        BLOCK_N,
        HEAD_DIM,
        EMULATE_BF16,
        INPUT_PRECISION,
    )


@triton.jit
def _varlen_bwd_dkdv(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
    CU_Q,
    CU_K,
    stride_qm,
    stride_qh,
    stride_qd,
    stride_kn,
    stride_kh,
    stride_kd,
    stride_vn,
    stride_vh,
    stride_vd,
    stride_dom,
    stride_doh,
    stride_dod,
    stride_dkn,
    stride_dkh,
    stride_dkd,
    stride_dvn,
    stride_dvh,
    stride_dvd,
    TOTAL_Q,
    GROUP,
    LEFT,
    RIGHT,
    sm_scale,
    qk_scale,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """One program per (key block, kv head, sequence): dK and dV, summed over the GQA group
    in a fixed order (deterministic, no atomics), as ``_attn_bwd_dkdv``."""
    start_n = tl.program_id(0) * BLOCK_N
    off_hkv = tl.program_id(1)
    off_b = tl.program_id(2)
    k_start = tl.load(CU_K + off_b)
    n_k = tl.load(CU_K + off_b + 1) - k_start
    if start_n >= n_k:
        return
    q_start = tl.load(CU_Q + off_b)
    n_q = tl.load(CU_Q + off_b + 1) - q_start
    d_lo, d_hi = _seq_band(n_q, n_k, CAUSAL, LEFT, RIGHT)
    # Rows are tokens: the row strides are the token strides, and lse/delta rows are
    # (head, token) with the sequence starting at q_start.
    _dkdv_block(
        Q,
        K,
        V,
        DO,
        LSE,
        DELTA,
        DK,
        DV,
        q_start,
        k_start,
        stride_qm,
        stride_qh,
        stride_qm,
        stride_qd,
        stride_kn,
        stride_kh,
        stride_kn,
        stride_kd,
        stride_vn,
        stride_vh,
        stride_vn,
        stride_vd,
        stride_dom,
        stride_doh,
        stride_dom,
        stride_dod,
        stride_dkn,
        stride_dkh,
        stride_dkn,
        stride_dkd,
        stride_dvn,
        stride_dvh,
        stride_dvn,
        stride_dvd,
        0,
        0,
        TOTAL_Q,
        q_start.to(tl.int64),
        start_n,
        off_hkv,
        n_q,
        n_k,
        GROUP,
        d_lo,
        d_hi,
        sm_scale,
        qk_scale,
        BLOCK_M,
        BLOCK_N,
        HEAD_DIM,
        EMULATE_BF16,
        INPUT_PRECISION,
    )


@triton.jit
def _varlen_bwd_dq(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DQ,
    CU_Q,
    CU_K,
    stride_qm,
    stride_qh,
    stride_qd,
    stride_kn,
    stride_kh,
    stride_kd,
    stride_vn,
    stride_vh,
    stride_vd,
    stride_dom,
    stride_doh,
    stride_dod,
    stride_dqm,
    stride_dqh,
    stride_dqd,
    TOTAL_Q,
    GROUP,
    LEFT,
    RIGHT,
    sm_scale,
    qk_scale,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """One program per (query block, head, sequence): dQ over the forward's key ranges."""
    start_m = tl.program_id(0) * BLOCK_M
    off_h = tl.program_id(1)
    off_b = tl.program_id(2)
    q_start = tl.load(CU_Q + off_b)
    n_q = tl.load(CU_Q + off_b + 1) - q_start
    if start_m >= n_q:
        return
    k_start = tl.load(CU_K + off_b)
    n_k = tl.load(CU_K + off_b + 1) - k_start
    d_lo, d_hi = _seq_band(n_q, n_k, CAUSAL, LEFT, RIGHT)
    _dq_block(
        Q,
        K,
        V,
        DO,
        LSE,
        DELTA,
        DQ,
        q_start,
        k_start,
        stride_qm,
        stride_qh,
        stride_qm,
        stride_qd,
        stride_kn,
        stride_kh,
        stride_kn,
        stride_kd,
        stride_vn,
        stride_vh,
        stride_vn,
        stride_vd,
        stride_dom,
        stride_doh,
        stride_dom,
        stride_dod,
        stride_dqm,
        stride_dqh,
        stride_dqm,
        stride_dqd,
        off_h,
        TOTAL_Q,
        q_start.to(tl.int64),
        start_m,
        off_h,
        off_h // GROUP,
        n_q,
        n_k,
        d_lo,
        d_hi,
        sm_scale,
        qk_scale,
        BLOCK_M,
        BLOCK_N,
        HEAD_DIM,
        EMULATE_BF16,
        INPUT_PRECISION,
    )
