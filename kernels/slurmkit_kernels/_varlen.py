"""Triton kernels for variable-length (packed) attention, FlashAttention-2's ``varlen`` layout.

Sequences are packed along the token axis: ``q`` is ``(total_q, heads_q, head_dim)`` and
sequence ``b`` owns rows ``cu_seqlens_q[b] : cu_seqlens_q[b + 1]`` (likewise ``k``/``v``
with ``cu_seqlens_k``). Each program reads its sequence's bounds from ``cu_seqlens`` and
then runs exactly the inner loops of the dense kernels in ``_kernels.py`` on base
pointers moved to the sequence start, so the two paths share one implementation of the
online softmax, the band masking and the backward's accumulation.

What differs from the dense kernels:

* The band (``D_LO <= j - i <= D_HI``) depends on each sequence's own ``seq_k - seq_q``
  (masks are aligned bottom-right per sequence, as in FlashAttention-2), so the kernels
  receive the mask itself (``CAUSAL``, ``LEFT``, ``RIGHT``) and derive the band.
* The grid is sized by the longest sequence; programs past the end of a shorter (or
  empty) sequence return at once.
* The grid is 3-D (block, head, sequence): each axis stays within CUDA's limits even for
  tens of thousands of sequences.
* ``lse`` and ``delta`` are ``(heads_q, total_q)``, so ``_attn_bwd_preprocess`` of the
  dense path serves unchanged (the packed tensors are passed as one batch).
"""

import triton
import triton.language as tl

from ._kernels import _bwd_dkdv_inner, _bwd_dq_inner, _cast, _fwd_inner, _ranges


@triton.jit
def _tile(rows, cols, stride_row, stride_col):
    """Element offsets ``rows[:, None] * stride_row + cols[None, :] * stride_col`` in int64:
    a packed batch reaches 2**31 elements soon (2M tokens x 8 heads x d128), and int32
    products would wrap. Same helper as the int64-offset change to ``_kernels.py``; import
    it from there once both are merged."""
    return rows.to(tl.int64)[:, None] * stride_row + cols.to(tl.int64)[None, :] * stride_col


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
    # 64-bit base offsets: token x stride passes 2**31 elements in long packed batches.
    q_base = Q + q_start.to(tl.int64) * stride_qm + off_h.to(tl.int64) * stride_qh
    k_base = K + k_start.to(tl.int64) * stride_kn + off_hkv.to(tl.int64) * stride_kh
    v_base = V + k_start.to(tl.int64) * stride_vn + off_hkv.to(tl.int64) * stride_vh
    o_base = O + q_start.to(tl.int64) * stride_om + off_h.to(tl.int64) * stride_oh

    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < n_q
    q = tl.load(q_base + _tile(offs_m, offs_d, stride_qm, stride_qd), mask=row_ok[:, None], other=0.0)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    # A program past its sequence's end visits no key block and stores nothing (all rows
    # masked). An early ``return`` here cost registers: the d64 kernel spilled under triton 3.6.
    n_k_visited = tl.where(start_m < n_q, n_k, 0)
    lo, mid_lo, mid_hi, hi = _ranges(start_m, BLOCK_M, BLOCK_N, d_lo, d_hi, n_k_visited)
    acc, l_i, m_i = _fwd_inner(
        acc,
        l_i,
        m_i,
        q,
        k_base,
        v_base,
        stride_kn,
        stride_kd,
        stride_vn,
        stride_vd,
        lo,
        mid_lo,
        offs_m,
        offs_d,
        n_k,
        d_lo,
        d_hi,
        qk_scale,
        True,
        BLOCK_N,
        EMULATE_BF16,
        INPUT_PRECISION,
    )
    acc, l_i, m_i = _fwd_inner(
        acc,
        l_i,
        m_i,
        q,
        k_base,
        v_base,
        stride_kn,
        stride_kd,
        stride_vn,
        stride_vd,
        mid_lo,
        mid_hi,
        offs_m,
        offs_d,
        n_k,
        d_lo,
        d_hi,
        qk_scale,
        False,
        BLOCK_N,
        EMULATE_BF16,
        INPUT_PRECISION,
    )
    acc, l_i, m_i = _fwd_inner(
        acc,
        l_i,
        m_i,
        q,
        k_base,
        v_base,
        stride_kn,
        stride_kd,
        stride_vn,
        stride_vd,
        mid_hi,
        hi,
        offs_m,
        offs_d,
        n_k,
        d_lo,
        d_hi,
        qk_scale,
        True,
        BLOCK_N,
        EMULATE_BF16,
        INPUT_PRECISION,
    )
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse = tl.where(empty, float("inf"), m_i + tl.math.log2(l_safe))
    tl.store(
        o_base + _tile(offs_m, offs_d, stride_om, stride_od),
        _cast(out, O.dtype.element_ty, EMULATE_BF16),
        mask=row_ok[:, None],
    )
    tl.store(LSE + off_h.to(tl.int64) * TOTAL_Q + q_start + offs_m, lse, mask=row_ok)


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
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    col_ok = offs_n < n_k
    k_row = k_start.to(tl.int64)
    k = tl.load(
        K
        + k_row * stride_kn
        + off_hkv.to(tl.int64) * stride_kh
        + _tile(offs_n, offs_d, stride_kn, stride_kd),
        mask=col_ok[:, None],
        other=0.0,
    )
    v = tl.load(
        V
        + k_row * stride_vn
        + off_hkv.to(tl.int64) * stride_vh
        + _tile(offs_n, offs_d, stride_vn, stride_vd),
        mask=col_ok[:, None],
        other=0.0,
    )
    # Query i sees key j iff D_LO <= j - i <= D_HI, i.e. -D_HI <= i - j <= -D_LO.
    lo, mid_lo, mid_hi, hi = _ranges(start_n, BLOCK_N, BLOCK_M, -d_hi, -d_lo, n_q)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    q_row = q_start.to(tl.int64)
    # No loop-invariant code motion out of the group loop: it hoisted the prologues of the
    # three pipelined query loops (offsets, masks) and kept them live across every head,
    # which nearly doubled the GQA kernel's registers and made it spill under triton 3.6.
    for g in tl.range(0, GROUP, disable_licm=True):
        off_h = (off_hkv * GROUP + g).to(tl.int64)
        q_base = Q + q_row * stride_qm + off_h * stride_qh
        do_base = DO + q_row * stride_dom + off_h * stride_doh
        lse_base = LSE + off_h * TOTAL_Q + q_row
        delta_base = DELTA + off_h * TOTAL_Q + q_row
        dk, dv = _bwd_dkdv_inner(
            dk,
            dv,
            k,
            v,
            q_base,
            do_base,
            lse_base,
            delta_base,
            stride_qm,
            stride_qd,
            stride_dom,
            stride_dod,
            lo,
            mid_lo,
            offs_n,
            offs_d,
            n_q,
            d_lo,
            d_hi,
            qk_scale,
            True,
            BLOCK_M,
            EMULATE_BF16,
            INPUT_PRECISION,
        )
        dk, dv = _bwd_dkdv_inner(
            dk,
            dv,
            k,
            v,
            q_base,
            do_base,
            lse_base,
            delta_base,
            stride_qm,
            stride_qd,
            stride_dom,
            stride_dod,
            mid_lo,
            mid_hi,
            offs_n,
            offs_d,
            n_q,
            d_lo,
            d_hi,
            qk_scale,
            False,
            BLOCK_M,
            EMULATE_BF16,
            INPUT_PRECISION,
        )
        dk, dv = _bwd_dkdv_inner(
            dk,
            dv,
            k,
            v,
            q_base,
            do_base,
            lse_base,
            delta_base,
            stride_qm,
            stride_qd,
            stride_dom,
            stride_dod,
            mid_hi,
            hi,
            offs_n,
            offs_d,
            n_q,
            d_lo,
            d_hi,
            qk_scale,
            True,
            BLOCK_M,
            EMULATE_BF16,
            INPUT_PRECISION,
        )
    dk = dk * sm_scale
    tl.store(
        DK
        + k_row * stride_dkn
        + off_hkv.to(tl.int64) * stride_dkh
        + _tile(offs_n, offs_d, stride_dkn, stride_dkd),
        _cast(dk, DK.dtype.element_ty, EMULATE_BF16),
        mask=col_ok[:, None],
    )
    tl.store(
        DV
        + k_row * stride_dvn
        + off_hkv.to(tl.int64) * stride_dvh
        + _tile(offs_n, offs_d, stride_dvn, stride_dvd),
        _cast(dv, DV.dtype.element_ty, EMULATE_BF16),
        mask=col_ok[:, None],
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
    off_hkv = off_h // GROUP
    q_row = q_start.to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < n_q
    q = tl.load(
        Q + q_row * stride_qm + off_h.to(tl.int64) * stride_qh + _tile(offs_m, offs_d, stride_qm, stride_qd),
        mask=row_ok[:, None],
        other=0.0,
    )
    do = tl.load(
        DO
        + q_row * stride_dom
        + off_h.to(tl.int64) * stride_doh
        + _tile(offs_m, offs_d, stride_dom, stride_dod),
        mask=row_ok[:, None],
        other=0.0,
    )
    stat = off_h.to(tl.int64) * TOTAL_Q + q_row + offs_m
    # Rows past the sequence (and rows that see no key) get lse = +inf, hence P = 0.
    lse = tl.load(LSE + stat, mask=row_ok, other=float("inf"))
    delta = tl.load(DELTA + stat, mask=row_ok, other=0.0)
    k_base = K + k_start.to(tl.int64) * stride_kn + off_hkv.to(tl.int64) * stride_kh
    v_base = V + k_start.to(tl.int64) * stride_vn + off_hkv.to(tl.int64) * stride_vh

    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    lo, mid_lo, mid_hi, hi = _ranges(start_m, BLOCK_M, BLOCK_N, d_lo, d_hi, n_k)
    dq = _bwd_dq_inner(
        dq,
        q,
        do,
        lse,
        delta,
        k_base,
        v_base,
        stride_kn,
        stride_kd,
        stride_vn,
        stride_vd,
        lo,
        mid_lo,
        offs_m,
        offs_d,
        n_k,
        d_lo,
        d_hi,
        qk_scale,
        True,
        BLOCK_N,
        EMULATE_BF16,
        INPUT_PRECISION,
    )
    dq = _bwd_dq_inner(
        dq,
        q,
        do,
        lse,
        delta,
        k_base,
        v_base,
        stride_kn,
        stride_kd,
        stride_vn,
        stride_vd,
        mid_lo,
        mid_hi,
        offs_m,
        offs_d,
        n_k,
        d_lo,
        d_hi,
        qk_scale,
        False,
        BLOCK_N,
        EMULATE_BF16,
        INPUT_PRECISION,
    )
    dq = _bwd_dq_inner(
        dq,
        q,
        do,
        lse,
        delta,
        k_base,
        v_base,
        stride_kn,
        stride_kd,
        stride_vn,
        stride_vd,
        mid_hi,
        hi,
        offs_m,
        offs_d,
        n_k,
        d_lo,
        d_hi,
        qk_scale,
        True,
        BLOCK_N,
        EMULATE_BF16,
        INPUT_PRECISION,
    )
    dq = dq * sm_scale
    tl.store(
        DQ
        + q_row * stride_dqm
        + off_h.to(tl.int64) * stride_dqh
        + _tile(offs_m, offs_d, stride_dqm, stride_dqd),
        _cast(dq, DQ.dtype.element_ty, EMULATE_BF16),
        mask=row_ok[:, None],
    )
