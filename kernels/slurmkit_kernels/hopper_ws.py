"""Warp-specialised d128 attention forward for Hopper (sm_90), written in Gluon.

Opt-in and unverified on a GPU: see ``attention._use_gluon`` (``SLURMKIT_KERNELS_GLUON=1`` or
``flash_attention(..., gluon=True)``); whatever it does not take runs the Hopper kernel of
``_hopper.py`` (or the portable one). Same conventions as ``_hopper._hopper_fwd``: the band
rule ``D_LO <= j - i <= D_HI`` for every mask, log2-domain scores with the scale folded
into one FMA (``qk_scale > 0``), empty rows with ``O = 0`` and ``lse = +inf``, and the
logsumexp written to the same ``(batch, heads, seq_q)`` fp32 tensor in the same log2
domain, so either backward can follow it.

Structure (FlashAttention-3, Shah et al. 2024, "FlashAttention-3: Fast and Accurate
Attention with Asynchrony and Low-precision", https://arxiv.org/abs/2407.08608):

* **One TMA producer warp** (``_ws_loader``, 24 registers): loads the two Q tiles once,
  then K and V tiles into a ring of ``NUM_STAGES`` shared-memory stages, each guarded by a
  *ready* mbarrier (TMA transaction bytes) and an *empty* mbarrier (one arrival from each
  consumer warpgroup).
* **Two consumer warpgroups** (the default partition and one 4-warp worker, 240 registers
  each through ``setmaxnreg``), each owning ``BLOCK_M`` query rows of the program's
  ``2 * BLOCK_M`` and walking the same key blocks.
* **Pingpong**: a pair of mbarriers hands the tensor cores from one consumer to the other:
  a warpgroup issues its matrix multiplies for a step, passes the turn, and does its
  softmax while the other one's multiplies run.
* **Softmax overlapped with the matrix multiplies inside a warpgroup**: at step ``j`` the
  warpgroup issues ``S_j = Q K_j^T`` and ``O += P_{j-1} V_{j-1}`` as asynchronous wgmma,
  waits only for ``S_j`` and computes its softmax while ``P_{j-1} V_{j-1}`` runs.
  ``P`` stays in registers (wgmma's register A operand).

Masks: a key block gets the band/length mask only when some (row, key) pair in it is
outside the band or past ``N_K`` (a runtime test per block), so the non-causal body runs
unmasked except for a ragged last block.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# The one shape this kernel serves (the d128 forward); everything else falls back.
HEAD_DIM = 128
DTYPES = (torch.float16, torch.bfloat16)
# (BLOCK_M rows per consumer warpgroup, BLOCK_N keys per step, stages of the K/V ring).
# 64 query rows per warpgroup keep O (64 regs), S (64) and P (32) of a d128 step inside
# 240 registers; FlashAttention-3 uses the same split at d128.
TILES = (64, 128, 2)
CONSUMER_REGS = 240
LOADER_REGS = 24
# Registers per thread for the kernel as a whole: 12 warps (two consumer warpgroups and a
# loader warp padded to a warpgroup) x 32 threads x 168 = 64512 <= 65536, the register
# file of one SM, so one program fits; setmaxnreg then moves registers from the loader
# warpgroup (24) to the consumers (240 each).
MAXNREG = 168


@gluon.jit
def _ws_loader(
    desc_q,
    desc_k,
    desc_v,
    q_bufs,
    k_bufs,
    v_bufs,
    q_bar,
    k_ready,
    k_empty,
    v_ready,
    v_empty,
    off_b,
    off_h,
    off_hkv,
    start_m,
    lo,
    n_iter,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    NUM_STAGES: gl.constexpr,
):
    """The producer warp: both Q tiles, then K_j and V_j into the ring, as stages free up."""
    for c in gl.static_range(2):
        mbarrier.expect(q_bar.index(c), desc_q.block_type.nbytes)
        tma.async_copy_global_to_shared(
            desc_q, [off_b, off_h, start_m + c * BLOCK_M, 0], q_bar.index(c), q_bufs.index(c)
        )
    for it in range(n_iter):
        stage = it % NUM_STAGES
        # Fresh mbarriers count as having completed the phase before phase 0, so the first
        # pass over the ring does not wait.
        phase = ((it // NUM_STAGES) & 1) ^ 1
        start_n = lo + it * BLOCK_N
        mbarrier.wait(k_empty.index(stage), phase)
        mbarrier.expect(k_ready.index(stage), desc_k.block_type.nbytes)
        tma.async_copy_global_to_shared(
            desc_k, [off_b, off_hkv, start_n, 0], k_ready.index(stage), k_bufs.index(stage)
        )
        mbarrier.wait(v_empty.index(stage), phase)
        mbarrier.expect(v_ready.index(stage), desc_v.block_type.nbytes)
        tma.async_copy_global_to_shared(
            desc_v, [off_b, off_hkv, start_n, 0], v_ready.index(stage), v_bufs.index(stage)
        )


@gluon.jit
def _ws_softmax(
    s,
    m_i,
    l_i,
    start_n,
    row0,
    N_K,
    D_LO,
    D_HI,
    qk_scale,
    s_layout: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
):
    """Online-softmax step on one score tile: (p, alpha, m_new, l_new); the scale is one FMA."""
    # Mask only blocks that hold a (row, key) pair outside the band or past N_K.
    row1 = row0 + BLOCK_M - 1
    end_n = start_n + BLOCK_N - 1
    inside = (end_n < N_K) & (start_n - row1 >= D_LO) & (end_n - row0 <= D_HI)
    if not inside:
        offs_m = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
        offs_n = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        rel = gl.expand_dims(offs_n, 0) - gl.expand_dims(offs_m, 1)
        visible = (gl.expand_dims(offs_n, 0) < N_K) & (rel >= D_LO) & (rel <= D_HI)
        s = gl.where(visible, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    # Rows with nothing visible yet: shift by 0 so p and alpha are exactly 0 (and no NaN).
    m_shift = gl.where(m_new == float("-inf"), 0.0, m_new)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_shift, 1))
    alpha = gl.exp2(m_i - m_shift)
    l_new = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_new


@gluon.jit
def _ws_consumer(
    desc_o,
    LSE,
    q_bufs,
    k_bufs,
    v_bufs,
    q_bar,
    k_ready,
    k_empty,
    v_ready,
    v_empty,
    turn,
    off_b,
    off_h,
    pid_bh,
    start_m,
    lo,
    n_iter,
    N_Q,
    N_K,
    D_LO,
    D_HI,
    qk_scale,
    WG: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    NUM_STAGES: gl.constexpr,
):
    """One consumer warpgroup: rows ``start_m + WG * BLOCK_M`` .. ``+ BLOCK_M - 1``."""
    dtype: gl.constexpr = desc_o.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    row0 = start_m + WG * BLOCK_M
    # Pingpong: warpgroup 0 starts (its first wait is on the pre-completed phase).
    my_turn = turn.index(WG)
    other_turn = turn.index(1 - WG)
    turn_phase = 1 - WG

    q_smem = q_bufs.index(WG).reshape([BLOCK_M, HEAD_DIM])
    mbarrier.wait(q_bar.index(WG), 0)

    zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_s)
    l_i = gl.zeros([BLOCK_M], gl.float32, row_s)
    alpha = gl.full([BLOCK_M], 1.0, gl.float32, row_s)
    p_op = gl.zeros([BLOCK_M, BLOCK_N], dtype, p_layout)

    # Step 0: S_0 only.
    mbarrier.wait(k_ready.index(0), 0)
    mbarrier.wait(my_turn, turn_phase)
    turn_phase ^= 1
    k_t = k_bufs.index(0).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
    s_tok = warpgroup_mma(q_smem, k_t, zero_s, use_acc=False, is_async=True)
    mbarrier.arrive(other_turn, count=1)
    s = warpgroup_mma_wait(0, deps=(s_tok,))
    mbarrier.arrive(k_empty.index(0), count=1)
    p, alpha, m_i, l_i = _ws_softmax(
        s, m_i, l_i, lo, row0, N_K, D_LO, D_HI, qk_scale, s_layout, BLOCK_M, BLOCK_N
    )
    p_op = gl.convert_layout(p.to(dtype), p_layout)

    for it in range(1, n_iter):
        stage = it % NUM_STAGES
        phase = (it // NUM_STAGES) & 1
        prev = (it - 1) % NUM_STAGES
        prev_phase = ((it - 1) // NUM_STAGES) & 1
        mbarrier.wait(k_ready.index(stage), phase)
        mbarrier.wait(v_ready.index(prev), prev_phase)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
        mbarrier.wait(my_turn, turn_phase)
        turn_phase ^= 1
        # S_j = Q K_j^T, then O += P_{j-1} V_{j-1}; both asynchronous.
        k_t = k_bufs.index(stage).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
        s_tok = warpgroup_mma(q_smem, k_t, zero_s, use_acc=False, is_async=True)
        v_s = v_bufs.index(prev).reshape([BLOCK_N, HEAD_DIM])
        o_tok = warpgroup_mma(p_op, v_s, acc, is_async=True)
        mbarrier.arrive(other_turn, count=1)
        # S_j is the older group: wait for it alone, and run its softmax under P V.
        s = warpgroup_mma_wait(1, deps=(s_tok,))
        mbarrier.arrive(k_empty.index(stage), count=1)
        p, alpha, m_i, l_i = _ws_softmax(
            s, m_i, l_i, lo + it * BLOCK_N, row0, N_K, D_LO, D_HI, qk_scale, s_layout, BLOCK_M, BLOCK_N
        )
        acc = warpgroup_mma_wait(0, deps=(o_tok,))
        mbarrier.arrive(v_empty.index(prev), count=1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)

    # Last step: O += P_last V_last.
    last = (n_iter - 1) % NUM_STAGES
    mbarrier.wait(v_ready.index(last), ((n_iter - 1) // NUM_STAGES) & 1)
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
    mbarrier.wait(my_turn, turn_phase)
    v_s = v_bufs.index(last).reshape([BLOCK_N, HEAD_DIM])
    o_tok = warpgroup_mma(p_op, v_s, acc, is_async=True)
    mbarrier.arrive(other_turn, count=1)
    acc = warpgroup_mma_wait(0, deps=(o_tok,))
    mbarrier.arrive(v_empty.index(last), count=1)

    # Epilogue: O = acc / l (0 for empty rows), lse = m + log2(l) (+inf for empty rows).
    l_o = gl.convert_layout(l_i, row_o)
    empty = l_o == 0.0
    l_safe = gl.where(empty, 1.0, l_o)
    out = acc / gl.expand_dims(l_safe, 1)
    lse = gl.where(empty, float("inf"), gl.convert_layout(m_i, row_o) + gl.log2(l_safe))
    offs_m = row0 + gl.arange(0, BLOCK_M, layout=row_o)
    gl.store(LSE + pid_bh.to(gl.int64) * N_Q + offs_m, lse, mask=offs_m < N_Q)
    # Q's buffer is free (the last S wgmma finished): stage O there for the TMA store.
    q_smem.store(out.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(desc_o, [off_b, off_h, row0, 0], q_bufs.index(WG))
    tma.store_wait(0)


@gluon.jit
def _ws_fwd(
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
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    LONGEST_FIRST: gl.constexpr,
    CONSUMER_REGS: gl.constexpr,
    LOADER_REGS: gl.constexpr,
):
    """One program per (batch*head, block of ``2 * BLOCK_M`` query rows)."""
    pid_bh = gl.program_id(0)
    pid_m = gl.program_id(1)
    if LONGEST_FIRST:
        pid_m = gl.num_programs(1) - 1 - pid_m
    start_m = pid_m * (2 * BLOCK_M)
    off_b = pid_bh // H_Q
    off_h = pid_bh % H_Q
    off_hkv = off_h // GROUP
    # Keys any of the program's rows can see: j - i in [D_LO, D_HI], 0 <= j < N_K, rounded
    # out to whole key blocks (the per-block mask does the rest). At least one block, so
    # that every row is written (rows that see nothing get O = 0, lse = +inf).
    lo = gl.maximum(start_m + D_LO, 0)
    lo = (lo // BLOCK_N) * BLOCK_N
    hi = gl.minimum(start_m + 2 * BLOCK_M - 1 + D_HI + 1, N_K)
    n_iter = gl.maximum(gl.cdiv(hi - lo, BLOCK_N), 1)
    lo = gl.minimum(lo, ((N_K - 1) // BLOCK_N) * BLOCK_N)

    q_bufs = gl.allocate_shared_memory(desc_q.dtype, [2] + desc_q.block_type.shape, desc_q.layout)
    k_bufs = gl.allocate_shared_memory(desc_k.dtype, [NUM_STAGES] + desc_k.block_type.shape, desc_k.layout)
    v_bufs = gl.allocate_shared_memory(desc_v.dtype, [NUM_STAGES] + desc_v.block_type.shape, desc_v.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for c in gl.static_range(2):
        mbarrier.init(q_bar.index(c), count=1)
        mbarrier.init(turn.index(c), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        # Both consumer warpgroups release a stage.
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(v_empty.index(i), count=2)

    gl.warp_specialize(
        [
            (
                _ws_consumer,
                (
                    desc_o,
                    LSE,
                    q_bufs,
                    k_bufs,
                    v_bufs,
                    q_bar,
                    k_ready,
                    k_empty,
                    v_ready,
                    v_empty,
                    turn,
                    off_b,
                    off_h,
                    pid_bh,
                    start_m,
                    lo,
                    n_iter,
                    N_Q,
                    N_K,
                    D_LO,
                    D_HI,
                    qk_scale,
                    0,
                    BLOCK_M,
                    BLOCK_N,
                    HEAD_DIM,
                    NUM_STAGES,
                ),
            ),
            (
                _ws_consumer,
                (
                    desc_o,
                    LSE,
                    q_bufs,
                    k_bufs,
                    v_bufs,
                    q_bar,
                    k_ready,
                    k_empty,
                    v_ready,
                    v_empty,
                    turn,
                    off_b,
                    off_h,
                    pid_bh,
                    start_m,
                    lo,
                    n_iter,
                    N_Q,
                    N_K,
                    D_LO,
                    D_HI,
                    qk_scale,
                    1,
                    BLOCK_M,
                    BLOCK_N,
                    HEAD_DIM,
                    NUM_STAGES,
                ),
            ),
            (
                _ws_loader,
                (
                    desc_q,
                    desc_k,
                    desc_v,
                    q_bufs,
                    k_bufs,
                    v_bufs,
                    q_bar,
                    k_ready,
                    k_empty,
                    v_ready,
                    v_empty,
                    off_b,
                    off_h,
                    off_hkv,
                    start_m,
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
    """Shapes and dtypes this kernel serves: fp16/bf16 at head dim 128 (TMA layout checked
    by the caller, as for the Hopper path)."""
    return q.shape[3] == HEAD_DIM and q.dtype in DTYPES and q.dtype == k.dtype == v.dtype


def _desc(t: torch.Tensor, rows: int) -> TensorDescriptor:
    """4-D descriptor over ``(batch, heads, seq, head_dim)`` with ``[1, 1, rows, d]`` blocks;
    the TMA unit zero-fills rows past ``seq`` on loads and drops them on stores."""
    block = [1, 1, rows, t.shape[3]]
    layout = gl.NVMMASharedLayout.get_default_for(
        block, gl.float16 if t.dtype == torch.float16 else gl.bfloat16
    )
    return TensorDescriptor(t, list(t.shape), list(t.stride()), block, layout)


def forward_launch(q, k, v, o, lse, band, qk_scale, tiles=TILES):
    """(kernel, grid, args, kwargs) of the forward; ``o`` and ``lse`` are preallocated.

    Separate from the launch so compile_check builds the same call from meta tensors.
    """
    batch, h_q, n_q, d = q.shape
    h_kv = k.shape[1]
    block_m, block_n, stages = tiles
    d_lo, d_hi = band
    longest_first = d_lo <= -(2**30) and d_hi < 2**30
    grid = (batch * h_q, triton.cdiv(n_q, 2 * block_m))
    args = (
        _desc(q, block_m),
        _desc(k, block_n),
        _desc(v, block_n),
        _desc(o, block_m),
        lse,
        n_q,
        k.shape[2],
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
        NUM_STAGES=stages,
        LONGEST_FIRST=longest_first,
        CONSUMER_REGS=CONSUMER_REGS,
        LOADER_REGS=LOADER_REGS,
        num_warps=4,
        # Gluon does no software pipelining of its own; this only records the ring's depth
        # in the compiled kernel's metadata (compile_check's "stages" column).
        num_stages=stages,
        maxnreg=MAXNREG,
    )
    return _ws_fwd, grid, args, kwargs


def forward(q, k, v, o, lse, band, qk_scale, tiles=TILES):
    kernel, grid, args, kwargs = forward_launch(q, k, v, o, lse, band, qk_scale, tiles)
    kernel[grid](*args, **kwargs)
