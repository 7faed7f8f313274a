"""Warp-specialised d128 attention backward for Hopper (sm_90), written in Gluon.

**Compile-only: it has never run.** No GPU has executed it and Triton's interpreter does
not run Gluon, so its numerics and its mbarrier protocol are unchecked; it is not routed
by ``flash_attention`` (nothing calls :func:`backward` but a caller that asks for it), and
``compile_check``'s ``gluon_bwd`` kernel set compiles it for sm_90 (0 spills, shared
memory, ``setmaxnreg``, async wgmma, TMA).
Same contract as ``_hopper._hopper_bwd`` with ``deterministic=False``: the band rule ``D_LO <= j - i <= D_HI``, the log2-domain ``lse``
of either Hopper forward (``+inf`` for rows that see no key), ``delta = rowsum(dO * O)``,
unscaled dQ sums into a zeroed fp32 ``(batch, heads_q, seq_q, head_dim)`` buffer (scaled
once afterwards), dK/dV per query head (fp32 partials summed over the GQA group
afterwards, or dK/dV themselves without GQA).

Structure (after FlashAttention-3's backward, Shah et al. 2024,
https://arxiv.org/abs/2407.08608): one program per (batch x query head, ``2 * BLOCK_N``
keys), 12 warps:

* **a TMA producer warp** (``_bwd_loader``): K and V of both key halves once, then Q and dO
  of each query block into a ``NUM_STAGES`` ring (a *ready* mbarrier with the transaction
  bytes, an *empty* one released by both consumers);
* **two consumer warpgroups** (``_bwd_consumer``), each owning ``BLOCK_N`` keys with K and V
  in shared memory and dK, dV in registers, walking the same ``BLOCK_M = 32`` query blocks
  with keys as rows (FlashAttention-3's swapped S/dP): ``S^T = K Q^T`` and ``dP^T = V dO^T``
  issued together as async wgmma (16 registers each), the softmax of S^T under dP^T,
  ``dV += P^T dO`` and ``dK += dS^T Q`` with P^T and dS^T from registers, dS^T written once
  to shared memory for ``dQ^T = K^T dS^T`` in two halves of the head dim;
* **dQ by TMA reduce-add**: each warpgroup's ``dQ`` share of a query block is added to the
  fp32 buffer with one ``cp.reduce.async.bulk.tensor`` (a ``tt.descriptor_reduce``; Gluon
  in triton 3.6.0 and 3.7.1 has no Python entry for it on Hopper, see :func:`_tma_reduce_add`):
  no atomics per element and no semaphore, hence **not deterministic** (fp32 adds in arrival order).
"""

from __future__ import annotations

import torch
import triton
from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

HEAD_DIM = 128
DTYPES = (torch.float16, torch.bfloat16)
# (BLOCK_M query rows per step, BLOCK_N keys per consumer warpgroup, ring stages).
TILES = (32, 64, 2)
CONSUMER_REGS = 240
LOADER_REGS = 24
MAXNREG = 168  # 12 warps x 32 x 168 <= 65536, as for the forward (hopper_ws.MAXNREG)


@builtin
def _tma_reduce_add(desc, coord, value, _semantic=None):
    """``desc[coord] += value`` by one TMA reduce-add (``tt.descriptor_reduce``, lowered by
    Triton's TMA lowering pass through shared memory to ``cp.reduce.async.bulk.tensor``).

    Private API: ``_semantic._convert_to_ir_values``, ``builder.create_descriptor_reduce``
    and ``ir.DESCRIPTOR_REDUCE_KIND`` have the same signatures in triton 3.6.0 and 3.7.1
    (``compile_check --kernel-sets gluon_bwd`` emits the four reduce-adds under both)."""
    offsets = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_descriptor_reduce(
        ir.DESCRIPTOR_REDUCE_KIND.ADD, desc.handle, value.handle, offsets
    )


@builtin
def _tma_store(desc, coord, value, _semantic=None):
    """``desc[coord] = value`` by one TMA store (``tt.descriptor_store``)."""
    offsets = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_descriptor_store(desc.handle, value.handle, offsets)


@gluon.jit
def _bwd_loader(
    desc_q,
    desc_k,
    desc_v,
    desc_do,
    k_bufs,
    v_bufs,
    q_bufs,
    do_bufs,
    kv_bar,
    ready,
    empty,
    off_b,
    off_h,
    off_hkv,
    start_n,
    lo,
    n_iter,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    NUM_STAGES: gl.constexpr,
):
    """The producer warp: K, V of both halves once, then Q_i and dO_i into the ring."""
    mbarrier.expect(kv_bar, 2 * desc_k.block_type.nbytes + 2 * desc_v.block_type.nbytes)
    for c in gl.static_range(2):
        tma.async_copy_global_to_shared(
            desc_k, [off_b, off_hkv, start_n + c * BLOCK_N, 0], kv_bar, k_bufs.index(c)
        )
        tma.async_copy_global_to_shared(
            desc_v, [off_b, off_hkv, start_n + c * BLOCK_N, 0], kv_bar, v_bufs.index(c)
        )
    for it in range(n_iter):
        stage = it % NUM_STAGES
        # Fresh mbarriers count as having completed the phase before phase 0.
        phase = ((it // NUM_STAGES) & 1) ^ 1
        start_m = lo + it * BLOCK_M
        mbarrier.wait(empty.index(stage), phase)
        mbarrier.expect(ready.index(stage), desc_q.block_type.nbytes + desc_do.block_type.nbytes)
        tma.async_copy_global_to_shared(
            desc_q, [off_b, off_h, start_m, 0], ready.index(stage), q_bufs.index(stage)
        )
        tma.async_copy_global_to_shared(
            desc_do, [off_b, off_h, start_m, 0], ready.index(stage), do_bufs.index(stage)
        )


@gluon.jit
def _bwd_consumer(
    desc_dk,
    desc_dv,
    desc_dq,
    LSE,
    DELTA,
    k_bufs,
    v_bufs,
    q_bufs,
    do_bufs,
    ds_buf,
    kv_bar,
    ready,
    empty,
    off_b,
    off_h,
    pid_bh,
    start_n,
    lo,
    n_iter,
    N_Q,
    N_K,
    D_LO,
    D_HI,
    sm_scale,
    qk_scale,
    WG: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    NUM_STAGES: gl.constexpr,
):
    """One consumer warpgroup: dK, dV of keys ``start_n + WG * BLOCK_N`` .. ``+ BLOCK_N - 1``."""
    dtype: gl.constexpr = k_bufs.dtype
    # Keys as rows throughout (FlashAttention-3's swapped S/dP): S^T, dP^T are
    # [BLOCK_N keys, BLOCK_M queries], so BLOCK_M may be 32 (wgmma's M is the key side, 64)
    # and they take 16 registers each; P^T and dS^T feed dV and dK from registers.
    # dK, dV: [BLOCK_N, HEAD_DIM]; dQ^T halves: [HEAD_DIM / 2, BLOCK_M].
    st_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_M, 16]
    )
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    DQ_ROWS: gl.constexpr = HEAD_DIM // 2
    row_st: gl.constexpr = gl.SliceLayout(1, st_layout)
    col_st: gl.constexpr = gl.SliceLayout(0, st_layout)
    key0 = start_n + WG * BLOCK_N
    key1 = key0 + BLOCK_N - 1

    k_smem = k_bufs.index(WG).reshape([BLOCK_N, HEAD_DIM])
    v_smem = v_bufs.index(WG).reshape([BLOCK_N, HEAD_DIM])
    ds_smem = ds_buf.index(WG)
    mbarrier.wait(kv_bar, 0)

    zero_st = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, st_layout)
    dk = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, acc_layout)
    dv = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, acc_layout)
    for it in range(n_iter):
        stage = it % NUM_STAGES
        phase = (it // NUM_STAGES) & 1
        start_m = lo + it * BLOCK_M
        mbarrier.wait(ready.index(stage), phase)
        q_smem = q_bufs.index(stage).reshape([BLOCK_M, HEAD_DIM])
        do_smem = do_bufs.index(stage).reshape([BLOCK_M, HEAD_DIM])
        # S^T = K Q^T and dP^T = V dO^T, both in flight; wait for S^T alone.
        st_tok = warpgroup_mma(k_smem, q_smem.permute((1, 0)), zero_st, use_acc=False, is_async=True)
        dpt_tok = warpgroup_mma(v_smem, do_smem.permute((1, 0)), zero_st, use_acc=False, is_async=True)
        offs_m = start_m + gl.arange(0, BLOCK_M, layout=col_st)
        row_ok = offs_m < N_Q
        stat_row = pid_bh.to(gl.int64) * N_Q + start_m
        # Rows past N_Q and rows that saw no key have lse = +inf: P = 0.
        lse = gl.load(LSE + stat_row + gl.arange(0, BLOCK_M, layout=col_st), mask=row_ok, other=float("inf"))
        st = warpgroup_mma_wait(1, deps=(st_tok,))
        pt = gl.exp2(st * qk_scale - gl.expand_dims(lse, 0))
        # Mask only blocks with a (key, query) pair outside the band or a key past N_K
        # (TMA zero-fills those keys; exp2(0 - lse) must not reach dV or dQ).
        inside = (key1 < N_K) & (key0 - (start_m + BLOCK_M - 1) >= D_LO) & (key1 - start_m <= D_HI)
        if not inside:
            # Keys relative to this query block (loop-variant): key - query = rows - m.
            # With absolute key indices the compiler hoisted them out of the loop and kept
            # them live across it (spills).
            rows = (key0 - start_m) + gl.arange(0, BLOCK_N, layout=row_st)
            rel = gl.expand_dims(rows, 1) - gl.expand_dims(gl.arange(0, BLOCK_M, layout=col_st), 0)
            visible = (gl.expand_dims(rows, 1) < N_K - start_m) & (rel >= D_LO) & (rel <= D_HI)
            pt = gl.where(visible, pt, 0.0)
        delta = gl.load(DELTA + stat_row + gl.arange(0, BLOCK_M, layout=col_st), mask=row_ok, other=0.0)
        dpt = warpgroup_mma_wait(0, deps=(dpt_tok,))
        dst = (pt * (dpt - gl.expand_dims(delta, 0))).to(dtype)
        # dS^T to shared memory once, the B operand of dQ^T = K^T dS^T.
        ds_smem.store(dst)
        fence_async_shared()
        # dV += P^T dO and dK += dS^T Q, A operands from registers.
        dv_tok = warpgroup_mma(gl.convert_layout(pt.to(dtype), a_layout), do_smem, dv, is_async=True)
        dk_tok = warpgroup_mma(gl.convert_layout(dst, a_layout), q_smem, dk, is_async=True)
        dv, dk = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok))
        # Q_i and dO_i are no longer read: release the stage before the dQ products.
        mbarrier.arrive(empty.index(stage), count=1)
        # dQ^T = K^T dS^T in two halves of the head dim (wgmma's M is the head dim here),
        # each transposed back and added to the fp32 buffer by one TMA reduce-add.
        # Unscaled; the host scales the finished sum.
        for c in gl.static_range(2):
            kt_half = k_smem.slice(c * DQ_ROWS, DQ_ROWS, dim=1).permute((1, 0))
            dqt_tok = warpgroup_mma(kt_half, ds_smem, zero_st, use_acc=False, is_async=True)
            dqt = warpgroup_mma_wait(0, deps=(dqt_tok,))
            _tma_reduce_add(desc_dq, [off_b, off_h, start_m, c * DQ_ROWS], gl.permute(dqt, (1, 0)))

    _tma_store(desc_dk, [off_b, off_h, key0, 0], (dk * sm_scale).to(desc_dk.dtype))
    _tma_store(desc_dv, [off_b, off_h, key0, 0], dv.to(desc_dv.dtype))


@gluon.jit
def _ws_bwd(
    desc_q,
    desc_k,
    desc_v,
    desc_do,
    desc_dk,
    desc_dv,
    desc_dq,
    LSE,
    DELTA,
    N_Q,
    N_K,
    H_Q,
    GROUP,
    D_LO,
    D_HI,
    sm_scale,
    qk_scale,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    CONSUMER_REGS: gl.constexpr,
    LOADER_REGS: gl.constexpr,
):
    """One program per (batch*query head, ``2 * BLOCK_N`` keys)."""
    pid_bh = gl.program_id(0)
    start_n = gl.program_id(1) * (2 * BLOCK_N)
    off_b = pid_bh // H_Q
    off_h = pid_bh % H_Q
    off_hkv = off_h // GROUP
    # Query i sees key j iff D_LO <= j - i <= D_HI: i in [j - D_HI, j - D_LO]. Whole query
    # blocks from the first any of the program's keys sees to the last; may be none.
    lo = gl.maximum(start_n - D_HI, 0)
    lo = (lo // BLOCK_M) * BLOCK_M
    hi = gl.minimum(gl.maximum(start_n + 2 * BLOCK_N - 1 - D_LO + 1, 0), N_Q)
    n_iter = gl.maximum(gl.cdiv(hi - lo, BLOCK_M), 0)

    dtype: gl.constexpr = desc_k.dtype
    k_bufs = gl.allocate_shared_memory(dtype, [2] + desc_k.block_type.shape, desc_k.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [2] + desc_v.block_type.shape, desc_v.layout)
    q_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + desc_q.block_type.shape, desc_q.layout)
    do_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + desc_do.block_type.shape, desc_do.layout)
    # dS^T of each consumer warpgroup, [keys, queries]: the B operand of dQ^T = K^T dS^T.
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)
    ds_buf = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M], ds_layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # both consumer warpgroups release a stage

    gl.warp_specialize(
        [
            (
                _bwd_consumer,
                (
                    desc_dk,
                    desc_dv,
                    desc_dq,
                    LSE,
                    DELTA,
                    k_bufs,
                    v_bufs,
                    q_bufs,
                    do_bufs,
                    ds_buf,
                    kv_bar,
                    ready,
                    empty,
                    off_b,
                    off_h,
                    pid_bh,
                    start_n,
                    lo,
                    n_iter,
                    N_Q,
                    N_K,
                    D_LO,
                    D_HI,
                    sm_scale,
                    qk_scale,
                    0,
                    BLOCK_M,
                    BLOCK_N,
                    HEAD_DIM,
                    NUM_STAGES,
                ),
            ),
            (
                _bwd_consumer,
                (
                    desc_dk,
                    desc_dv,
                    desc_dq,
                    LSE,
                    DELTA,
                    k_bufs,
                    v_bufs,
                    q_bufs,
                    do_bufs,
                    ds_buf,
                    kv_bar,
                    ready,
                    empty,
                    off_b,
                    off_h,
                    pid_bh,
                    start_n,
                    lo,
                    n_iter,
                    N_Q,
                    N_K,
                    D_LO,
                    D_HI,
                    sm_scale,
                    qk_scale,
                    1,
                    BLOCK_M,
                    BLOCK_N,
                    HEAD_DIM,
                    NUM_STAGES,
                ),
            ),
            (
                _bwd_loader,
                (
                    desc_q,
                    desc_k,
                    desc_v,
                    desc_do,
                    k_bufs,
                    v_bufs,
                    q_bufs,
                    do_bufs,
                    kv_bar,
                    ready,
                    empty,
                    off_b,
                    off_h,
                    off_hkv,
                    start_n,
                    lo,
                    n_iter,
                    BLOCK_M,
                    BLOCK_N,
                    NUM_STAGES,
                ),
            ),
        ],
        [4, 1],
        [CONSUMER_REGS, LOADER_REGS],
    )


# ----------------------------------------------------------------------------- launch


def supports(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """fp16/bf16 at head dim 128 (TMA layout checked by the caller)."""
    return q.shape[3] == HEAD_DIM and q.dtype in DTYPES and q.dtype == k.dtype == v.dtype


def _desc(t: torch.Tensor, rows: int, cols: int | None = None) -> TensorDescriptor:
    """4-D descriptor over ``(batch, heads, seq, head_dim)`` with ``[1, 1, rows, cols]``
    blocks (``cols`` defaults to the head dim)."""
    block = [1, 1, rows, cols or t.shape[3]]
    gl_dtype = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16, torch.float32: gl.float32}[t.dtype]
    layout = gl.NVMMASharedLayout.get_default_for(block, gl_dtype)
    return TensorDescriptor(t, list(t.shape), list(t.stride()), block, layout)


def backward_launch(q, k, v, do, lse, delta, dq_acc, dk_out, dv_out, band, scale, qk_scale, tiles=TILES):
    """(kernel, grid, args, kwargs); ``dq_acc`` zeroed fp32, ``dk_out``/``dv_out`` as for
    ``_hopper.backward_launch`` (dK/dV, or fp32 per-query-head partials with GQA)."""
    batch, h_q, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    block_m, block_n, stages = tiles
    grid = (batch * h_q, triton.cdiv(n_k, 2 * block_n))
    args = (
        _desc(q, block_m),
        _desc(k, block_n),
        _desc(v, block_n),
        _desc(do, block_m),
        _desc(dk_out, block_n),
        _desc(dv_out, block_n),
        _desc(dq_acc, block_m, d // 2),
        lse,
        delta,
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
        NUM_STAGES=stages,
        CONSUMER_REGS=CONSUMER_REGS,
        LOADER_REGS=LOADER_REGS,
        num_warps=4,
        num_stages=stages,
        maxnreg=MAXNREG,
    )
    return _ws_bwd, grid, args, kwargs


def backward(q, k, v, do, lse, delta, dq, dk, dv, band, scale, qk_scale, tiles=TILES):
    """Run ``_ws_bwd`` and finish dQ (and the GQA group sums) into dq, dk, dv. Never run."""
    batch, h_q, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    group = h_q // h_kv
    dq_acc = torch.zeros((batch, h_q, n_q, d), dtype=torch.float32, device=q.device)
    if group == 1:
        dk_out, dv_out = dk, dv
    else:
        dk_out = torch.empty((batch, h_q, n_k, d), dtype=torch.float32, device=q.device)
        dv_out = torch.empty((batch, h_q, n_k, d), dtype=torch.float32, device=q.device)
    kernel, grid, args, kwargs = backward_launch(
        q, k, v, do, lse, delta, dq_acc, dk_out, dv_out, band, scale, qk_scale, tiles
    )
    kernel[grid](*args, **kwargs)
    dq.copy_(dq_acc * scale)
    if group > 1:
        dk.copy_(dk_out.view(batch, h_kv, group, n_k, d).sum(dim=2))
        dv.copy_(dv_out.view(batch, h_kv, group, n_k, d).sum(dim=2))
