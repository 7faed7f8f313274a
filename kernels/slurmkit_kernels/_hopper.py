"""Hopper (sm_90+) attention kernels: TMA descriptors, warp specialisation, a 5-matmul backward.

Same algorithm and conventions as ``_kernels.py`` (log2-domain scores, one band rule
``D_LO <= j - i <= D_HI`` for every mask, the three-stage loops of ``_ranges``, empty rows
with ``lse = +inf``), with the techniques of Triton's fused-attention tutorial on Hopper
and of FlashAttention-2/3 (Dao 2023; Shah et al. 2024):

* **Tensor descriptors** (TMA) for Q, K, V, O (and dO, dK, dV in the backward): host-side
  ``triton.tools.tensor_descriptor.TensorDescriptor`` objects over the 4-D
  ``(batch, heads, seq, head_dim)`` tensors with blocks ``[1, 1, rows, head_dim]``. The TMA
  unit zero-fills rows past the sequence end on loads and drops them on stores, so the
  kernels need no bounds masks for data (only for scores).
* **Warp specialisation** of the forward's key loop (``tl.range(..., warp_specialize=)``),
  plumbed through but off by default: see ``WARP_SPECIALIZE`` for why (triton 3.7.1).
* **Longest-first order**: when the band's cost grows with the query block (causal), the
  forward visits query blocks from the last (heaviest) to the first, and the grid's fast
  axis is batch x head, so the heaviest tiles start first and the light ones fill the tail.
* **Scale folded into one FMA**: scores stay unscaled; the row max is ``max(s) * qk_scale``
  and the exponent ``s * qk_scale - m`` is a single fused multiply-add per element. This
  needs ``qk_scale > 0`` (the dispatcher sends other scales to the portable path).
* **5-matmul backward** (FlashAttention-2's Algorithm 2): one program per (key block,
  batch, query head) computes S^T, dV, dP^T, dK and the block's dQ contribution, which it
  adds to an fp32 dQ accumulator with atomics, instead of recomputing S and dP in a
  separate dQ kernel (7 matmuls). The scale enters in the exponent, ``exp2(S^T * qk_scale
  - lse)`` (one FMA per element, as in the forward), never in the operands: pre-scaling K
  by ``qk_scale`` and rounding it back to bf16/fp16 (the tutorial's trick, done here
  before) made dQ up to 2.2x torch's own error. dQ is multiplied by ``scale`` once at
  the end.
* **Deterministic dQ by default**: a semaphore per (batch x head, query block) lets the
  key blocks add their dQ contributions in ascending order, so the fp32 sums are bitwise
  reproducible (FlashAttention's ``deterministic=True``). ``deterministic=False`` drops
  the ordering (faster, run-to-run differences in the last bits).
* **GQA parallel over query heads**: the backward grid has one program per *query* head;
  with groups, each writes its dK/dV partial to an fp32 buffer and the group is summed in
  a fixed order afterwards (deterministic), instead of one program looping over the
  group's heads serially.

fp32 inputs and every layout TMA cannot address (last dim not contiguous, strides or base
not 16-byte aligned) use the portable kernels; see ``attention._use_hopper``.

Under ``TRITON_INTERPRET=1`` these kernels also run (the interpreter emulates tensor
descriptors with masked pointer loads and ignores ``warp_specialize``), which is how the
tests check their numerics on a CPU; the interpreter runs programs one at a time, so it
cannot exercise the semaphore's concurrency, only its ordering arithmetic.
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from ._kernels import _cast, _dot, _ranges


@triton.jit
def _desc_tile(desc, off_b, off_h, start, ROWS: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Load a ``[ROWS, HEAD_DIM]`` tile of one (batch, head) through a 4-D descriptor."""
    return desc.load([off_b, off_h, start, 0]).reshape(ROWS, HEAD_DIM)


@triton.jit
def _hopper_fwd_inner(
    acc,
    l_i,
    m_i,
    q,
    desc_k,
    desc_v,
    off_b,
    off_hkv,
    lo,
    hi,
    offs_m,
    N_K,
    D_LO,
    D_HI,
    qk_scale,
    MASK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
):
    """Online softmax over key blocks ``[lo, hi)``; the scale enters as one FMA."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        k = _desc_tile(desc_k, off_b, off_hkv, start_n, BLOCK_N, HEAD_DIM)
        s = _dot(q, tl.trans(k), EMULATE_BF16, "tf32")
        if MASK:
            offs_n = start_n + offs_n0
            rel = offs_n[None, :] - offs_m[:, None]
            visible = (offs_n[None, :] < N_K) & (rel >= D_LO) & (rel <= D_HI)
            s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        if MASK:
            # Rows with nothing visible yet: shift by 0 so p and alpha are exactly 0.
            m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_shift = m_new
        p = tl.math.exp2(s * qk_scale - m_shift[:, None])
        alpha = tl.math.exp2(m_i - m_shift)
        v = _desc_tile(desc_v, off_b, off_hkv, start_n, BLOCK_N, HEAD_DIM)
        acc = acc * alpha[:, None] + _dot(_cast(p, v.dtype, EMULATE_BF16), v, EMULATE_BF16, "tf32")
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _hopper_fwd(
    desc_q,
    desc_k,
    desc_v,
    desc_o,
    LSE,
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
    LONGEST_FIRST: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
):
    """One program per (batch*head, query block): O and the log2-domain lse."""
    pid_bh = tl.program_id(0)
    pid_m = tl.program_id(1)
    if LONGEST_FIRST:
        pid_m = tl.num_programs(1) - 1 - pid_m
    start_m = pid_m * BLOCK_M
    off_b = pid_bh // H_Q
    off_h = pid_bh % H_Q
    off_hkv = off_h // GROUP
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = _desc_tile(desc_q, off_b, off_h, start_m, BLOCK_M, HEAD_DIM)

    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    lo, mid_lo, mid_hi, hi = _ranges(start_m, BLOCK_M, BLOCK_N, D_LO, D_HI, N_K)
    acc, l_i, m_i = _hopper_fwd_inner(
        acc,
        l_i,
        m_i,
        q,
        desc_k,
        desc_v,
        off_b,
        off_hkv,
        lo,
        mid_lo,
        offs_m,
        N_K,
        D_LO,
        D_HI,
        qk_scale,
        True,
        BLOCK_N,
        HEAD_DIM,
        WARP_SPECIALIZE,
        EMULATE_BF16,
    )
    acc, l_i, m_i = _hopper_fwd_inner(
        acc,
        l_i,
        m_i,
        q,
        desc_k,
        desc_v,
        off_b,
        off_hkv,
        mid_lo,
        mid_hi,
        offs_m,
        N_K,
        D_LO,
        D_HI,
        qk_scale,
        False,
        BLOCK_N,
        HEAD_DIM,
        WARP_SPECIALIZE,
        EMULATE_BF16,
    )
    acc, l_i, m_i = _hopper_fwd_inner(
        acc,
        l_i,
        m_i,
        q,
        desc_k,
        desc_v,
        off_b,
        off_hkv,
        mid_hi,
        hi,
        offs_m,
        N_K,
        D_LO,
        D_HI,
        qk_scale,
        True,
        BLOCK_N,
        HEAD_DIM,
        WARP_SPECIALIZE,
        EMULATE_BF16,
    )
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse = tl.where(empty, float("inf"), m_i + tl.math.log2(l_safe))
    desc_o.store(
        [off_b, off_h, start_m, 0], _cast(out, desc_o.dtype, EMULATE_BF16).reshape(1, 1, BLOCK_M, HEAD_DIM)
    )
    tl.store(LSE + pid_bh.to(tl.int64) * N_Q + offs_m, lse, mask=offs_m < N_Q)


@triton.jit
def _hopper_bwd_inner(
    dk,
    dv,
    k,
    v,
    desc_q,
    desc_do,
    lse_base,
    delta_base,
    dq_base,
    sem_base,
    off_b,
    off_h,
    start_n,
    lo,
    hi,
    offs_n,
    N_Q,
    N_K,
    D_LO,
    D_HI,
    qk_scale,
    MASK: tl.constexpr,
    DETERMINISTIC: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
):
    """dK, dV of one key block over query blocks ``[lo, hi)``, adding each block's dQ share.

    Five matmuls per step: S^T, dV, dP^T, dK, dQ. ``k`` is unscaled: S^T enters the log2
    domain in the exponent's FMA (``qk_scale``), and the dQ share is ``dS K`` without the
    softmax scale, applied once to the finished sum.
    """
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    for start_m in tl.range(lo, hi, BLOCK_M):
        offs_m = start_m + offs_m0
        row_ok = offs_m < N_Q
        q = _desc_tile(desc_q, off_b, off_h, start_m, BLOCK_M, HEAD_DIM)
        do = _desc_tile(desc_do, off_b, off_h, start_m, BLOCK_M, HEAD_DIM)
        lse = tl.load(lse_base + offs_m, mask=row_ok, other=float("inf"))
        delta = tl.load(delta_base + offs_m, mask=row_ok, other=0.0)
        s_t = _dot(k, tl.trans(q), EMULATE_BF16, "tf32")
        p_t = tl.math.exp2(s_t * qk_scale - lse[None, :])
        if MASK:
            # Key rows past N_K hold zeros (TMA padding): zero their P so that no
            # exp2(0 - lse) overflow can reach dQ.
            rel = offs_n[:, None] - offs_m[None, :]
            p_t = tl.where((offs_n[:, None] < N_K) & (rel >= D_LO) & (rel <= D_HI), p_t, 0.0)
        dv += _dot(_cast(p_t, do.dtype, EMULATE_BF16), do, EMULATE_BF16, "tf32")
        dp_t = _dot(v, tl.trans(do), EMULATE_BF16, "tf32")
        ds_t = _cast(p_t * (dp_t - delta[None, :]), q.dtype, EMULATE_BF16)
        dk += _dot(ds_t, q, EMULATE_BF16, "tf32")
        dq = _dot(tl.trans(ds_t), k, EMULATE_BF16, "tf32")
        dq_ptrs = dq_base + offs_m.to(tl.int64)[:, None] * HEAD_DIM + offs_d[None, :]
        if DETERMINISTIC:
            # Key blocks add into this query block in ascending order: wait until the
            # blocks before this one (from the first that sees the query block) are done.
            sem = sem_base + start_m // BLOCK_M
            ticket = start_n // BLOCK_N - tl.maximum(start_m + D_LO, 0) // BLOCK_N
            while tl.atomic_add(sem, 0, sem="acquire") != ticket:
                pass
            tl.atomic_add(dq_ptrs, dq, mask=row_ok[:, None], sem="relaxed")
            tl.debug_barrier()
            tl.atomic_add(sem, 1, sem="release")
        else:
            tl.atomic_add(dq_ptrs, dq, mask=row_ok[:, None], sem="relaxed")
    return dk, dv


@triton.jit
def _hopper_bwd(
    desc_q,
    desc_k,
    desc_v,
    desc_do,
    desc_dk,
    desc_dv,
    LSE,
    DELTA,
    DQ_ACC,
    SEM,
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
    DETERMINISTIC: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
):
    """One program per (batch*query head, key block): dK, dV of this head, dQ by atomics.

    ``desc_dk``/``desc_dv`` address ``(batch, heads_q, seq_k, head_dim)`` buffers (fp32
    partials summed over the GQA group afterwards) or, without GQA, dK/dV themselves.
    ``DQ_ACC`` is a zeroed fp32 ``(batch, heads_q, seq_q, head_dim)`` buffer, ``SEM``
    zeroed int32 ``(batch * heads_q, query blocks)``. The grid's fast axis is batch x
    head, so key block 0 of every head starts first: with causal masks that is the
    heaviest block, and the semaphore's order matches the launch order.
    """
    pid_bh = tl.program_id(0)
    start_n = tl.program_id(1) * BLOCK_N
    off_b = pid_bh // H_Q
    off_h = pid_bh % H_Q
    off_hkv = off_h // GROUP
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = _desc_tile(desc_k, off_b, off_hkv, start_n, BLOCK_N, HEAD_DIM)
    v = _desc_tile(desc_v, off_b, off_hkv, start_n, BLOCK_N, HEAD_DIM)

    # Query i sees key j iff D_LO <= j - i <= D_HI, i.e. -D_HI <= i - j <= -D_LO.
    lo, mid_lo, mid_hi, hi = _ranges(start_n, BLOCK_N, BLOCK_M, -D_HI, -D_LO, N_Q)
    if start_n + BLOCK_N > N_K:
        # The ragged last key block runs every step masked (see _hopper_bwd_inner).
        mid_lo = hi
        mid_hi = hi
    bh = pid_bh.to(tl.int64)
    lse_base = LSE + bh * N_Q
    delta_base = DELTA + bh * N_Q
    dq_base = DQ_ACC + bh * N_Q * HEAD_DIM
    sem_base = SEM + bh * tl.cdiv(N_Q, BLOCK_M)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dk, dv = _hopper_bwd_inner(
        dk,
        dv,
        k,
        v,
        desc_q,
        desc_do,
        lse_base,
        delta_base,
        dq_base,
        sem_base,
        off_b,
        off_h,
        start_n,
        lo,
        mid_lo,
        offs_n,
        N_Q,
        N_K,
        D_LO,
        D_HI,
        qk_scale,
        True,
        DETERMINISTIC,
        BLOCK_M,
        BLOCK_N,
        HEAD_DIM,
        EMULATE_BF16,
    )
    dk, dv = _hopper_bwd_inner(
        dk,
        dv,
        k,
        v,
        desc_q,
        desc_do,
        lse_base,
        delta_base,
        dq_base,
        sem_base,
        off_b,
        off_h,
        start_n,
        mid_lo,
        mid_hi,
        offs_n,
        N_Q,
        N_K,
        D_LO,
        D_HI,
        qk_scale,
        False,
        DETERMINISTIC,
        BLOCK_M,
        BLOCK_N,
        HEAD_DIM,
        EMULATE_BF16,
    )
    dk, dv = _hopper_bwd_inner(
        dk,
        dv,
        k,
        v,
        desc_q,
        desc_do,
        lse_base,
        delta_base,
        dq_base,
        sem_base,
        off_b,
        off_h,
        start_n,
        mid_hi,
        hi,
        offs_n,
        N_Q,
        N_K,
        D_LO,
        D_HI,
        qk_scale,
        True,
        DETERMINISTIC,
        BLOCK_M,
        BLOCK_N,
        HEAD_DIM,
        EMULATE_BF16,
    )
    # fp32 partials (GQA) are stored as they are; EMULATE_BF16 rounding is for bf16 only.
    out_emulate: tl.constexpr = EMULATE_BF16 and desc_dk.dtype == tl.bfloat16
    desc_dk.store(
        [off_b, off_h, start_n, 0],
        _cast(dk * sm_scale, desc_dk.dtype, out_emulate).reshape(1, 1, BLOCK_N, HEAD_DIM),
    )
    desc_dv.store(
        [off_b, off_h, start_n, 0], _cast(dv, desc_dv.dtype, out_emulate).reshape(1, 1, BLOCK_N, HEAD_DIM)
    )


# ----------------------------------------------------------------------------- launch

# Warp specialisation of the forward's key loop. Off: with triton 3.7.1 on sm_90 the
# compiler's warp-specialisation pass (NVGPUWarpSpecialization) aborts on this loop at
# 4 warps ("operation destroyed but still has uses"; with the tutorial's exact loop body
# "descriptor block and tensor must have the same number of elements") and leaves the
# 8-warp kernel unchanged (identical PTX with and without), so turning it on buys nothing
# on Hopper yet. The flag is plumbed through so a newer Triton can be tried by flipping it.
WARP_SPECIALIZE = False

# Tiles and stages live in the per-GPU config files (``hopper_fwd``, ``hopper_bwd``,
# ``hopper_bwd_nondet``; see ``config.py``), chosen by the autotune tool and compiled for
# sm_90 by compile_check's ``hopper`` kernel set; the launch functions below take them as
# ``tiles = (BLOCK_M, BLOCK_N, num_warps, num_stages)``.


def _desc(t: torch.Tensor, rows: int) -> TensorDescriptor:
    """4-D descriptor over ``(batch, heads, seq, head_dim)`` with ``[1, 1, rows, d]`` blocks."""
    return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, t.shape[3]])


def tma_compatible(t: torch.Tensor) -> bool:
    """What TMA needs: contiguous last dim, 16-byte aligned base and other strides."""
    size = t.element_size()
    return (
        t.stride(3) == 1
        and t.data_ptr() % 16 == 0
        and all(s > 0 and s * size % 16 == 0 for s in t.stride()[:3])
    )


def forward_launch(q, k, v, o, lse, band, qk_scale, tiles, warp_specialize, emulate_bf16):
    """(kernel, grid, args, kwargs) of the forward; ``o`` and ``lse`` are preallocated.

    Separate from the launch so the sm_90 compile check builds the same call from meta
    tensors and compiles exactly what runs.
    """
    batch, h_q, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    block_m, block_n, num_warps, num_stages = tiles
    d_lo, d_hi = band
    # Cost per query block grows with the block index when only the upper band edge is
    # bounded (causal): visit the last blocks first.
    longest_first = d_lo <= -(2**30) and d_hi < 2**30
    grid = (batch * h_q, triton.cdiv(n_q, block_m))
    args = (
        _desc(q, block_m),
        _desc(k, block_n),
        _desc(v, block_n),
        _desc(o, block_m),
        lse,
        n_q,
        n_k,
        h_q,
        h_q // h_kv,
        d_lo,
        d_hi,
        qk_scale,
    )
    kwargs = dict(
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        HEAD_DIM=d,
        LONGEST_FIRST=longest_first,
        WARP_SPECIALIZE=warp_specialize,
        EMULATE_BF16=emulate_bf16,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return _hopper_fwd, grid, args, kwargs


def forward(*launch_args):
    kernel, grid, args, kwargs = forward_launch(*launch_args)
    kernel[grid](*args, **kwargs)


def backward_launch(
    q,
    k,
    v,
    do,
    lse,
    delta,
    dq_acc,
    sem,
    dk_out,
    dv_out,
    band,
    scale,
    qk_scale,
    tiles,
    deterministic,
    emulate_bf16,
):
    """(kernel, grid, args, kwargs) of the backward kernel; see :func:`forward_launch`."""
    batch, h_q, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    block_m, block_n, num_warps, num_stages = tiles
    grid = (batch * h_q, triton.cdiv(n_k, block_n))
    args = (
        _desc(q, block_m),
        _desc(k, block_n),
        _desc(v, block_n),
        _desc(do, block_m),
        _desc(dk_out, block_n),
        _desc(dv_out, block_n),
        lse,
        delta,
        dq_acc,
        sem,
        n_q,
        n_k,
        h_q,
        h_q // h_kv,
        *band,
        scale,
        qk_scale,
    )
    kwargs = dict(
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        HEAD_DIM=d,
        DETERMINISTIC=deterministic,
        EMULATE_BF16=emulate_bf16,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return _hopper_bwd, grid, args, kwargs


def backward(q, k, v, do, lse, delta, dq, dk, dv, band, scale, qk_scale, tiles, deterministic, emulate_bf16):
    """Launch ``_hopper_bwd`` and finish dQ (and the GQA group sums) into dq, dk, dv."""
    batch, h_q, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    group = h_q // h_kv
    block_m = tiles[0]
    dq_acc = torch.zeros((batch, h_q, n_q, d), dtype=torch.float32, device=q.device)
    sem = torch.zeros((batch * h_q, triton.cdiv(n_q, block_m)), dtype=torch.int32, device=q.device)
    if group == 1:
        dk_out, dv_out = dk, dv
    else:
        dk_out = torch.empty((batch, h_q, n_k, d), dtype=torch.float32, device=q.device)
        dv_out = torch.empty((batch, h_q, n_k, d), dtype=torch.float32, device=q.device)
    kernel, grid, args, kwargs = backward_launch(
        q,
        k,
        v,
        do,
        lse,
        delta,
        dq_acc,
        sem,
        dk_out,
        dv_out,
        band,
        scale,
        qk_scale,
        tiles,
        deterministic,
        emulate_bf16,
    )
    kernel[grid](*args, **kwargs)
    # The dQ sums are dS K without the softmax scale (see _hopper_bwd_inner).
    dq.copy_(dq_acc * scale)
    if group > 1:
        # A fixed-order reduction over the group (deterministic, unlike atomics).
        dk.copy_(dk_out.view(batch, h_kv, group, n_k, d).sum(dim=2))
        dv.copy_(dv_out.view(batch, h_kv, group, n_k, d).sum(dim=2))
