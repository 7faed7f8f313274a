"""Triton kernels for FlashAttention-2 style attention: forward, backward preprocess, dK/dV, dQ.

Algorithm: Dao, "FlashAttention-2" (2023), following the structure of Triton's
``python/tutorials/06-fused-attention.py`` (OpenAI kernel team), rewritten for slurmkit:
pointer arithmetic instead of ``tl.make_block_ptr`` (removed in Triton 3.9), any
sequence length, unequal query/key lengths, GQA, sliding windows, and a non-causal
backward.

Notation follows the paper: ``m_i`` running row maximum, ``l_i`` running row sum,
``acc`` unnormalised output. Scores live in the log2 domain: ``qk_scale = scale *
log2(e)`` is folded into QK^T so every exponential is an ``exp2``, and the saved
logsumexp ``lse`` is ``m_i + log2(l_i)`` in the same domain.

Masking is one rule for every mode: query ``i`` sees key ``j`` iff
``D_LO <= j - i <= D_HI``. The wrapper derives the band from the mask, aligned
bottom-right as in FlashAttention-2 (``off = N_K - N_Q``): full attention is an unbounded
band, causal is ``D_HI = off``, a window ``(left, right)`` is ``[off - left, off + right]``;
"unbounded" is a bound beyond any index. Rows that see no key output 0; their ``lse`` is
stored as ``+inf`` so the backward's ``exp2(s - lse)`` is exactly 0 for them without a
special case.

Every loop over key (or query) blocks runs in three stages (``_ranges``): blocks that
every row of the program's block sees, in bounds, run without any mask; only the blocks
straddling an edge of the band or the ragged end run with ``MASK=True``. Blocks outside
the band are never visited, so causal and windowed attention skip the masked-out work.

The backward is deterministic and uses no atomics: one program per K/V block computes
dK and dV (summing over the query heads of its GQA group in a fixed order), and a
separate kernel, one program per Q block, computes dQ.

Interpreter workarounds (``TRITON_INTERPRET=1``, verified with Triton 3.7.1):

* ``tl.dot`` on bf16 operands returns garbage (errors ~1e10): the interpreter keeps bf16
  as raw uint16 and multiplies the bit patterns.
* fp32->bf16 casts truncate instead of rounding to nearest even, which doubles bf16
  rounding error compared with a GPU.

Both are handled by the constexpr ``EMULATE_BF16``, set only for bf16 inputs under the
interpreter (so the compiled GPU path is unchanged): ``_dot`` converts operands to fp32
(exact) before multiplying, and ``_cast`` rounds to nearest even in integer arithmetic
before the (then exact) truncating cast, reproducing the GPU's bf16 numerics.
"""

import triton
import triton.language as tl


@triton.jit
def _dot(a, b, EMULATE_BF16: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """``a @ b`` with an fp32 result; see the module docstring for ``EMULATE_BF16``."""
    if EMULATE_BF16:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, input_precision=INPUT_PRECISION)


@triton.jit
def _cast(x, dtype: tl.constexpr, EMULATE_BF16: tl.constexpr):
    """``x.to(dtype)``; see the module docstring for ``EMULATE_BF16``."""
    if EMULATE_BF16:
        # Round the fp32 bit pattern to nearest even at bit 16; the truncating cast is then exact.
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def _tile(rows, cols, stride_row, stride_col):
    """Element offsets ``rows[:, None] * stride_row + cols[None, :] * stride_col`` in int64.

    int32 would wrap once ``row * stride`` passes 2**31 elements and address memory
    before the tensor: a packed-QKV view ``(B, T, 3, H, D)`` has a row stride of
    ``3 * H * D``, so with ``H * D = 8192`` that happens at T ~ 87k.
    The indices themselves stay int32 (masks and band arithmetic are cheaper in 32 bits);
    only the products are widened.
    """
    return rows.to(tl.int64)[:, None] * stride_row + cols.to(tl.int64)[None, :] * stride_col


@triton.jit
def _ranges(start, BLOCK_OWN: tl.constexpr, BLOCK_STEP: tl.constexpr, d_lo, d_hi, N_OTHER):
    """Loop bounds over the other axis for the block ``[start, start + BLOCK_OWN)``.

    Index ``t`` of the other axis is visible from index ``s`` of the own axis iff
    ``d_lo <= t - s <= d_hi``. Returns ``lo <= mid_lo <= mid_hi <= hi``: steps in
    ``[lo, mid_lo)`` and ``[mid_hi, hi)`` need masks, steps in ``[mid_lo, mid_hi)`` are
    visible from every own index and in bounds. ``mid_lo``/``mid_hi`` lie on the
    ``BLOCK_STEP`` grid started at ``lo`` (so stages never overlap) unless clamped to ``hi``.
    """
    last = start + BLOCK_OWN - 1
    # Clamp before dividing: the band offsets can make these negative.
    lo = tl.minimum(tl.maximum(start + d_lo, 0), N_OTHER) // BLOCK_STEP * BLOCK_STEP
    hi = tl.minimum(tl.maximum(last + d_hi + 1, 0), N_OTHER)
    all_lo = tl.minimum(tl.maximum(last + d_lo, 0), N_OTHER)
    all_hi = tl.minimum(tl.maximum(start + d_hi + 1, 0), N_OTHER)
    mid_lo = tl.minimum(lo + tl.cdiv(tl.maximum(all_lo - lo, 0), BLOCK_STEP) * BLOCK_STEP, hi)
    mid_hi = tl.maximum(lo + tl.maximum(all_hi - lo, 0) // BLOCK_STEP * BLOCK_STEP, mid_lo)
    return lo, mid_lo, mid_hi, hi


@triton.jit
def _fwd_inner(
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
    hi,
    offs_m,
    offs_d,
    N_K,
    D_LO,
    D_HI,
    qk_scale,
    MASK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """Online-softmax accumulation over key blocks ``[lo, hi)``."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        k_ptrs = k_base + _tile(offs_n, offs_d, stride_kn, stride_kd)
        v_ptrs = v_base + _tile(offs_n, offs_d, stride_vn, stride_vd)
        if MASK:
            k = tl.load(k_ptrs, mask=offs_n[:, None] < N_K, other=0.0)
        else:
            k = tl.load(k_ptrs)
        s = _dot(q, tl.trans(k), EMULATE_BF16, INPUT_PRECISION) * qk_scale
        if MASK:
            rel = offs_n[None, :] - offs_m[:, None]
            visible = (offs_n[None, :] < N_K) & (rel >= D_LO) & (rel <= D_HI)
            s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        if MASK:
            # A row with nothing visible yet has m_new = -inf; exp2(-inf - -inf) would be
            # NaN, so shift by 0 instead (p and alpha then come out as exactly 0).
            m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_shift = m_new
        p = tl.math.exp2(s - m_shift[:, None])
        alpha = tl.math.exp2(m_i - m_shift)
        l_i = l_i * alpha + tl.sum(p, 1)
        if MASK:
            v = tl.load(v_ptrs, mask=offs_n[:, None] < N_K, other=0.0)
        else:
            v = tl.load(v_ptrs)
        acc = acc * alpha[:, None] + _dot(_cast(p, v.dtype, EMULATE_BF16), v, EMULATE_BF16, INPUT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _base(ptr, row, stride_row, head, stride_head):
    """``ptr`` moved to a (batch or first token, head) pair, with 64-bit offsets.

    Dense kernels pass (batch, batch stride), varlen kernels (the sequence's first token,
    token stride). int32 products overflow at long sequences / long packed batches.
    """
    return ptr + row.to(tl.int64) * stride_row + head.to(tl.int64) * stride_head


@triton.jit
def _load_rows(base, offs, offs_d, stride_row, stride_d, ok):
    """A ``[rows, HEAD_DIM]`` tile at ``base``; rows where ``ok`` is false read 0."""
    return tl.load(base + _tile(offs, offs_d, stride_row, stride_d), mask=ok[:, None], other=0.0)


@triton.jit
def _store_rows(base, offs, offs_d, stride_row, stride_d, x, ok, EMULATE_BF16: tl.constexpr):
    """Store the fp32 tile ``x`` at ``base`` in the tensor's dtype, rows where ``ok``."""
    tl.store(
        base + _tile(offs, offs_d, stride_row, stride_d),
        _cast(x, base.dtype.element_ty, EMULATE_BF16),
        mask=ok[:, None],
    )


@triton.jit
def _fwd_block(
    q_base,
    k_base,
    v_base,
    o_base,
    LSE,
    lse_row,
    lse_len,
    lse_first,
    stride_qm,
    stride_qd,
    stride_kn,
    stride_kd,
    stride_vn,
    stride_vd,
    stride_om,
    stride_od,
    start_m,
    N_Q,
    N_K,
    N_VISIT,
    D_LO,
    D_HI,
    qk_scale,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """The forward of one query block, shared by the dense and varlen kernels.

    Bases point at the block's (batch or sequence, head). Its lse row starts at
    ``LSE + lse_row * lse_len + lse_first`` (added at the store, where the dense kernel
    computed it before: computing it up front moved instructions in the PTX). Keys ``[0, N_K)`` exist; key blocks are visited up to ``N_VISIT`` (``N_K``, or 0
    for a varlen program past its sequence's end, which then stores nothing).
    """
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < N_Q
    q = _load_rows(q_base, offs_m, offs_d, stride_qm, stride_qd, row_ok)

    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    lo, mid_lo, mid_hi, hi = _ranges(start_m, BLOCK_M, BLOCK_N, D_LO, D_HI, N_VISIT)
    # Three stages: masked band edge, unmasked interior, masked band edge / ragged end.
    bounds = (lo, mid_lo, mid_hi, hi)
    for stage in tl.static_range(3):
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
            bounds[stage],
            bounds[stage + 1],
            offs_m,
            offs_d,
            N_K,
            D_LO,
            D_HI,
            qk_scale,
            stage != 1,
            BLOCK_N,
            EMULATE_BF16,
            INPUT_PRECISION,
        )
    # Normalise once; a row that saw no key writes 0 and lse = +inf (see the module docstring).
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse = tl.where(empty, float("inf"), m_i + tl.math.log2(l_safe))
    _store_rows(o_base, offs_m, offs_d, stride_om, stride_od, out, row_ok, EMULATE_BF16)
    tl.store(LSE + lse_row.to(tl.int64) * lse_len + lse_first + offs_m, lse, mask=row_ok)


@triton.jit
def _attn_fwd(
    Q,
    K,
    V,
    O,
    LSE,  # noqa: E741 (Q, K, V, O as in the paper)
    stride_qb,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_ob,
    stride_oh,
    stride_om,
    stride_od,
    N_Q,
    N_K,
    H_Q,
    GROUP,
    D_LO,
    D_HI,
    qk_scale,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """One program per (query block, batch*head): writes O and the log2-domain lse."""
    start_m = tl.program_id(0) * BLOCK_M
    pid_bh = tl.program_id(1)
    off_b = pid_bh // H_Q
    off_h = pid_bh % H_Q
    off_hkv = off_h // GROUP
    _fwd_block(
        _base(Q, off_b, stride_qb, off_h, stride_qh),
        _base(K, off_b, stride_kb, off_hkv, stride_kh),
        _base(V, off_b, stride_vb, off_hkv, stride_vh),
        _base(O, off_b, stride_ob, off_h, stride_oh),
        LSE,
        pid_bh,
        N_Q,
        0,
        stride_qm,
        stride_qd,
        stride_kn,
        stride_kd,
        stride_vn,
        stride_vd,
        stride_om,
        stride_od,
        start_m,
        N_Q,
        N_K,
        N_K,
        D_LO,
        D_HI,
        qk_scale,
        BLOCK_M,
        BLOCK_N,
        HEAD_DIM,
        EMULATE_BF16,
        INPUT_PRECISION,
    )


@triton.jit
def _attn_bwd_preprocess(
    O,
    DO,
    DELTA,  # noqa: E741
    stride_ob,
    stride_oh,
    stride_om,
    stride_od,
    stride_dob,
    stride_doh,
    stride_dom,
    stride_dod,
    N_Q,
    H_Q,
    BLOCK_M: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    """``delta = rowsum(dO * O)``, the softmax-backward correction term, in fp32."""
    start_m = tl.program_id(0) * BLOCK_M
    pid_bh = tl.program_id(1)
    off_b = pid_bh // H_Q
    off_h = pid_bh % H_Q
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < N_Q
    o = tl.load(
        O
        + off_b.to(tl.int64) * stride_ob
        + off_h.to(tl.int64) * stride_oh
        + _tile(offs_m, offs_d, stride_om, stride_od),
        mask=row_ok[:, None],
        other=0.0,
    )
    do = tl.load(
        DO
        + off_b.to(tl.int64) * stride_dob
        + off_h.to(tl.int64) * stride_doh
        + _tile(offs_m, offs_d, stride_dom, stride_dod),
        mask=row_ok[:, None],
        other=0.0,
    )
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + pid_bh.to(tl.int64) * N_Q + offs_m, delta, mask=row_ok)


@triton.jit
def _bwd_dkdv_inner(
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
    hi,
    offs_n,
    offs_d,
    N_Q,
    D_LO,
    D_HI,
    qk_scale,
    MASK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """Accumulate dK, dV of one key block over query blocks ``[lo, hi)`` of one head.

    Works on transposed tiles (keys as rows) so dK/dV accumulate without transposes.
    Rows past N_Q load lse = +inf, which makes their P exactly 0, so only the band's
    edges need an explicit mask.
    """
    offs_m0 = tl.arange(0, BLOCK_M)
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + offs_m0
        row_ok = offs_m < N_Q
        q = tl.load(q_base + _tile(offs_m, offs_d, stride_qm, stride_qd), mask=row_ok[:, None], other=0.0)
        do = tl.load(do_base + _tile(offs_m, offs_d, stride_dom, stride_dod), mask=row_ok[:, None], other=0.0)
        lse = tl.load(lse_base + offs_m, mask=row_ok, other=float("inf"))
        delta = tl.load(delta_base + offs_m, mask=row_ok, other=0.0)
        s_t = _dot(k, tl.trans(q), EMULATE_BF16, INPUT_PRECISION) * qk_scale
        p_t = tl.math.exp2(s_t - lse[None, :])
        if MASK:
            rel = offs_n[:, None] - offs_m[None, :]
            p_t = tl.where((rel >= D_LO) & (rel <= D_HI), p_t, 0.0)
        dv += _dot(_cast(p_t, do.dtype, EMULATE_BF16), do, EMULATE_BF16, INPUT_PRECISION)
        dp_t = _dot(v, tl.trans(do), EMULATE_BF16, INPUT_PRECISION)
        ds_t = p_t * (dp_t - delta[None, :])
        dk += _dot(_cast(ds_t, q.dtype, EMULATE_BF16), q, EMULATE_BF16, INPUT_PRECISION)
    return dk, dv


@triton.jit
def _dkdv_block(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
    q_row,
    k_row,
    stride_q_row,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_k_row,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_v_row,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_do_row,
    stride_doh,
    stride_dom,
    stride_dod,
    stride_dk_row,
    stride_dkh,
    stride_dkn,
    stride_dkd,
    stride_dv_row,
    stride_dvh,
    stride_dvn,
    stride_dvd,
    lse_b,
    lse_heads,
    lse_len,
    lse_first,
    start_n,
    off_hkv,
    N_Q,
    N_K,
    GROUP,
    D_LO,
    D_HI,
    sm_scale,
    qk_scale,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """dK and dV of one key block, summed over the GQA group; shared by dense and varlen.

    Tensors are addressed at (``row``, head) through ``_base``: dense kernels pass the batch
    index and batch strides as ``q_row``/``k_row`` and ``stride_*_row``, varlen kernels the
    sequence's first token and token strides. Query head ``h``'s lse and delta rows start at
    ``(lse_b * lse_heads + h) * lse_len + lse_first``.
    """
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    col_ok = offs_n < N_K
    k = _load_rows(
        _base(K, k_row, stride_k_row, off_hkv, stride_kh), offs_n, offs_d, stride_kn, stride_kd, col_ok
    )
    v = _load_rows(
        _base(V, k_row, stride_v_row, off_hkv, stride_vh), offs_n, offs_d, stride_vn, stride_vd, col_ok
    )

    # Query i sees key j iff D_LO <= j - i <= D_HI, i.e. -D_HI <= i - j <= -D_LO.
    lo, mid_lo, mid_hi, hi = _ranges(start_n, BLOCK_N, BLOCK_M, -D_HI, -D_LO, N_Q)
    bounds = (lo, mid_lo, mid_hi, hi)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    # No loop-invariant code motion out of the group loop: it hoisted the prologues of the
    # three pipelined query loops (offsets, masks) and kept them live across every head,
    # which nearly doubled the GQA kernel's registers and made it spill under triton 3.6.
    for g in tl.range(0, GROUP, disable_licm=True):
        off_h = off_hkv * GROUP + g
        bh = lse_b * lse_heads + off_h
        q_base = _base(Q, q_row, stride_q_row, off_h, stride_qh)
        do_base = _base(DO, q_row, stride_do_row, off_h, stride_doh)
        lse_base = LSE + bh.to(tl.int64) * lse_len + lse_first
        delta_base = DELTA + bh.to(tl.int64) * lse_len + lse_first
        for stage in tl.static_range(3):  # masked edge, unmasked interior, masked edge
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
                bounds[stage],
                bounds[stage + 1],
                offs_n,
                offs_d,
                N_Q,
                D_LO,
                D_HI,
                qk_scale,
                stage != 1,
                BLOCK_M,
                EMULATE_BF16,
                INPUT_PRECISION,
            )
    dk = dk * sm_scale
    _store_rows(
        _base(DK, k_row, stride_dk_row, off_hkv, stride_dkh),
        offs_n,
        offs_d,
        stride_dkn,
        stride_dkd,
        dk,
        col_ok,
        EMULATE_BF16,
    )
    _store_rows(
        _base(DV, k_row, stride_dv_row, off_hkv, stride_dvh),
        offs_n,
        offs_d,
        stride_dvn,
        stride_dvd,
        dv,
        col_ok,
        EMULATE_BF16,
    )


@triton.jit
def _attn_bwd_dkdv(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_dob,
    stride_doh,
    stride_dom,
    stride_dod,
    stride_dkb,
    stride_dkh,
    stride_dkn,
    stride_dkd,
    stride_dvb,
    stride_dvh,
    stride_dvn,
    stride_dvd,
    N_Q,
    N_K,
    H_Q,
    H_KV,
    GROUP,
    D_LO,
    D_HI,
    sm_scale,
    qk_scale,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """One program per (key block, batch*kv_head): dK and dV, summed over the GQA group.

    The program owns its dK/dV rows exclusively and visits the group's query heads in
    a fixed order, so the sum is race-free and bitwise reproducible.
    """
    start_n = tl.program_id(0) * BLOCK_N
    pid_bh = tl.program_id(1)
    off_b = pid_bh // H_KV
    off_hkv = pid_bh % H_KV
    _dkdv_block(
        Q,
        K,
        V,
        DO,
        LSE,
        DELTA,
        DK,
        DV,
        off_b,
        off_b,
        stride_qb,
        stride_qh,
        stride_qm,
        stride_qd,
        stride_kb,
        stride_kh,
        stride_kn,
        stride_kd,
        stride_vb,
        stride_vh,
        stride_vn,
        stride_vd,
        stride_dob,
        stride_doh,
        stride_dom,
        stride_dod,
        stride_dkb,
        stride_dkh,
        stride_dkn,
        stride_dkd,
        stride_dvb,
        stride_dvh,
        stride_dvn,
        stride_dvd,
        off_b,
        H_Q,
        N_Q,
        0,
        start_n,
        off_hkv,
        N_Q,
        N_K,
        GROUP,
        D_LO,
        D_HI,
        sm_scale,
        qk_scale,
        BLOCK_M,
        BLOCK_N,
        HEAD_DIM,
        EMULATE_BF16,
        INPUT_PRECISION,
    )


@triton.jit
def _bwd_dq_inner(
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
    hi,
    offs_m,
    offs_d,
    N_K,
    D_LO,
    D_HI,
    qk_scale,
    MASK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """Accumulate dQ of one query block over key blocks ``[lo, hi)``."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        k_ptrs = k_base + _tile(offs_n, offs_d, stride_kn, stride_kd)
        v_ptrs = v_base + _tile(offs_n, offs_d, stride_vn, stride_vd)
        if MASK:
            k = tl.load(k_ptrs, mask=offs_n[:, None] < N_K, other=0.0)
            v = tl.load(v_ptrs, mask=offs_n[:, None] < N_K, other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        s = _dot(q, tl.trans(k), EMULATE_BF16, INPUT_PRECISION) * qk_scale
        p = tl.math.exp2(s - lse[:, None])
        if MASK:
            rel = offs_n[None, :] - offs_m[:, None]
            p = tl.where((offs_n[None, :] < N_K) & (rel >= D_LO) & (rel <= D_HI), p, 0.0)
        dp = _dot(do, tl.trans(v), EMULATE_BF16, INPUT_PRECISION)
        ds = p * (dp - delta[:, None])
        dq += _dot(_cast(ds, k.dtype, EMULATE_BF16), k, EMULATE_BF16, INPUT_PRECISION)
    return dq


@triton.jit
def _dq_block(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DQ,
    q_row,
    k_row,
    stride_q_row,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_k_row,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_v_row,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_do_row,
    stride_doh,
    stride_dom,
    stride_dod,
    stride_dq_row,
    stride_dqh,
    stride_dqm,
    stride_dqd,
    lse_row,
    lse_len,
    lse_first,
    start_m,
    off_h,
    off_hkv,
    N_Q,
    N_K,
    D_LO,
    D_HI,
    sm_scale,
    qk_scale,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """dQ of one query block over the forward's key ranges; shared by dense and varlen.

    Addressing as in ``_dkdv_block``; the head's lse and delta rows start at
    ``lse_row * lse_len + lse_first``.
    """
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < N_Q
    q = _load_rows(
        _base(Q, q_row, stride_q_row, off_h, stride_qh), offs_m, offs_d, stride_qm, stride_qd, row_ok
    )
    do = _load_rows(
        _base(DO, q_row, stride_do_row, off_h, stride_doh), offs_m, offs_d, stride_dom, stride_dod, row_ok
    )
    # Rows past N_Q (and rows that see no key) get lse = +inf, hence P = 0.
    lse = tl.load(LSE + lse_row.to(tl.int64) * lse_len + lse_first + offs_m, mask=row_ok, other=float("inf"))
    delta = tl.load(DELTA + lse_row.to(tl.int64) * lse_len + lse_first + offs_m, mask=row_ok, other=0.0)
    k_base = _base(K, k_row, stride_k_row, off_hkv, stride_kh)
    v_base = _base(V, k_row, stride_v_row, off_hkv, stride_vh)

    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    lo, mid_lo, mid_hi, hi = _ranges(start_m, BLOCK_M, BLOCK_N, D_LO, D_HI, N_K)
    bounds = (lo, mid_lo, mid_hi, hi)
    for stage in tl.static_range(3):  # masked edge, unmasked interior, masked edge / ragged end
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
            bounds[stage],
            bounds[stage + 1],
            offs_m,
            offs_d,
            N_K,
            D_LO,
            D_HI,
            qk_scale,
            stage != 1,
            BLOCK_N,
            EMULATE_BF16,
            INPUT_PRECISION,
        )
    dq = dq * sm_scale
    _store_rows(
        _base(DQ, q_row, stride_dq_row, off_h, stride_dqh),
        offs_m,
        offs_d,
        stride_dqm,
        stride_dqd,
        dq,
        row_ok,
        EMULATE_BF16,
    )


@triton.jit
def _attn_bwd_dq(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DQ,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_dob,
    stride_doh,
    stride_dom,
    stride_dod,
    stride_dqb,
    stride_dqh,
    stride_dqm,
    stride_dqd,
    N_Q,
    N_K,
    H_Q,
    GROUP,
    D_LO,
    D_HI,
    sm_scale,
    qk_scale,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """One program per (query block, batch*head): dQ, with the forward's key ranges."""
    start_m = tl.program_id(0) * BLOCK_M
    pid_bh = tl.program_id(1)
    off_b = pid_bh // H_Q
    off_h = pid_bh % H_Q
    off_hkv = off_h // GROUP
    _dq_block(
        Q,
        K,
        V,
        DO,
        LSE,
        DELTA,
        DQ,
        off_b,
        off_b,
        stride_qb,
        stride_qh,
        stride_qm,
        stride_qd,
        stride_kb,
        stride_kh,
        stride_kn,
        stride_kd,
        stride_vb,
        stride_vh,
        stride_vn,
        stride_vd,
        stride_dob,
        stride_doh,
        stride_dom,
        stride_dod,
        stride_dqb,
        stride_dqh,
        stride_dqm,
        stride_dqd,
        pid_bh,
        N_Q,
        0,
        start_m,
        off_h,
        off_hkv,
        N_Q,
        N_K,
        D_LO,
        D_HI,
        sm_scale,
        qk_scale,
        BLOCK_M,
        BLOCK_N,
        HEAD_DIM,
        EMULATE_BF16,
        INPUT_PRECISION,
    )
