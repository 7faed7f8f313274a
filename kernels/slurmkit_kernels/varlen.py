"""Variable-length (packed) attention: FlashAttention-2's ``flash_attn_varlen_func`` layout.

Batches of sequences with different lengths are packed along the token axis instead of
padded, so no work or memory goes to padding. See :func:`flash_attention_varlen`; the
kernels are in ``_varlen.py`` and share their inner loops with the dense kernels.
"""

from __future__ import annotations

import torch

from . import _varlen
from .attention import (
    _LOG2E,
    _UNBOUNDED,
    _band,
    _cdiv,
    _config_from_json,
    _empty,
    _on_device,
    _validate,
    portable_meta,
    preprocess_launch,
    run_launch,
)
from .config import KernelConfig

# CUDA's limit on grid axes 1 and 2 (heads and sequences).
_MAX_GRID_YZ = 65535


def _check_offsets_tensor(name: str, cu: torch.Tensor, max_seqlen, device) -> None:
    """The checks of :func:`_validate_cu_seqlens` that need no values (so they run while
    ``torch.compile`` traces with fake tensors)."""
    if not isinstance(cu, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(cu).__name__}")
    if cu.dtype != torch.int32 or cu.dim() != 1 or cu.numel() < 2:
        raise ValueError(
            f"{name} must be a 1-D int32 tensor of batch + 1 offsets, "
            f"got {cu.dtype} of shape {tuple(cu.shape)}"
        )
    if cu.device != device:
        raise ValueError(f"{name} is on {cu.device}; q, k, v are on {device}")
    if isinstance(max_seqlen, bool) or not isinstance(max_seqlen, int):
        raise ValueError(f"max_seqlen for {name} must be an int >= the longest sequence, got {max_seqlen!r}")


def _validate_cu_seqlens(name: str, cu: torch.Tensor, total: int, max_seqlen, device) -> list[int]:
    """Raise ValueError unless ``cu`` is a valid offsets vector for ``total`` packed tokens.

    Reads the offsets to the host (one small copy): a wrong offset would make the kernels
    read another sequence's rows or leave output rows unwritten, silently. Runs inside the
    custom op (on real tensors: the values are data, which Dynamo's fake tensors lack).
    """
    _check_offsets_tensor(name, cu, max_seqlen, device)
    offsets = cu.tolist()
    if offsets[0] != 0 or offsets[-1] != total:
        raise ValueError(
            f"{name} must start at 0 and end at the number of packed tokens ({total}), "
            f"got {offsets[0]} ... {offsets[-1]}"
        )
    lengths = [b - a for a, b in zip(offsets, offsets[1:])]
    if min(lengths) < 0:
        first = lengths.index(min(lengths))
        raise ValueError(f"{name} must be non-decreasing (sequence {first} has a negative length)")
    if isinstance(max_seqlen, bool) or not isinstance(max_seqlen, int) or max_seqlen < max(lengths):
        raise ValueError(
            f"max_seqlen for {name} must be an int >= the longest sequence ({max(lengths)}), "
            f"got {max_seqlen!r}"
        )
    return lengths


def _window_sides(causal: bool, window) -> tuple[int, int]:
    """(LEFT, RIGHT) for the kernels, -1 = unbounded, validated by the dense path's rules."""
    d_lo, d_hi = _band(causal, window, 0, 0)  # with equal lengths the band is (-left, right)
    left = -d_lo if d_lo > -_UNBOUNDED else -1
    right = d_hi if d_hi < _UNBOUNDED else -1
    return left, right


def forward_launch(q, k, v, o, lse, cu_q, cu_k, max_q, sides, causal, scale, precision, config):
    """The varlen forward's launch, (kernel, grid, args, kwargs); ``o``, ``lse`` preallocated."""
    total_q, h_q, _ = q.shape
    cfg, meta = portable_meta(config, "fwd", q, precision)
    grid = (_cdiv(max_q, cfg.BLOCK_M), h_q, cu_q.numel() - 1)
    args = (q, k, v, o, lse, cu_q, cu_k, *q.stride(), *k.stride(), *v.stride(), *o.stride())
    args += (total_q, h_q // k.shape[1], *sides, scale * _LOG2E)
    return _varlen._varlen_fwd, grid, args, dict(CAUSAL=causal, **meta)


def backward_launches(
    do, q, k, v, o, lse, delta, dq, dk, dv, cu_q, cu_k, max_q, max_k, sides, causal, scale, precision, config
):
    """The varlen backward's three launches (delta, dK/dV, dQ), in order; outputs preallocated."""
    total_q, h_q, _ = q.shape
    h_kv = k.shape[1]
    batch = cu_q.numel() - 1
    # The dense preprocess kernel, with the packed tensors seen as one batch of total_q rows.
    o_strides = (0, o.stride(1), o.stride(0), o.stride(2))
    do_strides = (0, do.stride(1), do.stride(0), do.stride(2))
    pre = preprocess_launch(o, do, delta, total_q, h_q, h_q, o_strides, do_strides)
    common = (cu_q, cu_k, *q.stride(), *k.stride(), *v.stride(), *do.stride())
    tail = (total_q, h_q // h_kv, *sides, scale, scale * _LOG2E)
    cfg, meta = portable_meta(config, "bwd_dkdv", q, precision)
    dkdv = (
        _varlen._varlen_bwd_dkdv,
        (_cdiv(max_k, cfg.BLOCK_N), h_kv, batch),
        (q, k, v, do, lse, delta, dk, dv, *common, *dk.stride(), *dv.stride(), *tail),
        dict(CAUSAL=causal, **meta),
    )
    cfg, meta = portable_meta(config, "bwd_dq", q, precision)
    dq_launch = (
        _varlen._varlen_bwd_dq,
        (_cdiv(max_q, cfg.BLOCK_M), h_q, batch),
        (q, k, v, do, lse, delta, dq, *common, *dq.stride(), *tail),
        dict(CAUSAL=causal, **meta),
    )
    return [pre, dkdv, dq_launch]


def _varlen_forward(q, k, v, cu_q, cu_k, max_q, sides, causal, scale, precision, config):
    total_q, h_q, d = q.shape
    o = _empty((total_q, h_q, d), q.dtype, q.device)
    lse = _empty((h_q, total_q), torch.float32, q.device)
    run_launch(forward_launch(q, k, v, o, lse, cu_q, cu_k, max_q, sides, causal, scale, precision, config))
    return o, lse


def _varlen_backward(do, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, sides, causal, scale, precision, config):
    delta = _empty(lse.shape, torch.float32, q.device)
    dk = _empty(k.shape, k.dtype, k.device)
    dv = _empty(v.shape, v.dtype, v.device)
    dq = _empty(q.shape, q.dtype, q.device)
    launches = backward_launches(
        do,
        q,
        k,
        v,
        o,
        lse,
        delta,
        dq,
        dk,
        dv,
        cu_q,
        cu_k,
        max_q,
        max_k,
        sides,
        causal,
        scale,
        precision,
        config,
    )
    for launch in launches:
        run_launch(launch)
    return dq, dk, dv


# The varlen kernels as torch.library custom ops (as flash_attention's), so torch.compile
# records one opaque node per pass: the offsets' values are checked inside the forward op.
@torch.library.custom_op("slurmkit::flash_attention_varlen_fwd", mutates_args=())
def _varlen_fwd_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_q: torch.Tensor,
    cu_k: torch.Tensor,
    max_q: int,
    max_k: int,
    left: int,
    right: int,
    causal: bool,
    scale: float,
    precision: str,
    config_json: str | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    _validate_cu_seqlens("cu_seqlens_q", cu_q, q.shape[0], max_q, q.device)
    _validate_cu_seqlens("cu_seqlens_k", cu_k, k.shape[0], max_k, q.device)
    config = _config_from_json(config_json, q)
    with _on_device(q):
        return _varlen_forward(
            q, k, v, cu_q, cu_k, max(max_q, 1), (left, right), causal, scale, precision, config
        )


@_varlen_fwd_op.register_fake
def _(q, k, v, cu_q, cu_k, max_q, max_k, left, right, causal, scale, precision, config_json):
    total_q, h_q, d = q.shape
    return q.new_empty((total_q, h_q, d)), q.new_empty((h_q, total_q), dtype=torch.float32)


@torch.library.custom_op("slurmkit::flash_attention_varlen_bwd", mutates_args=())
def _varlen_bwd_op(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    cu_q: torch.Tensor,
    cu_k: torch.Tensor,
    max_q: int,
    max_k: int,
    left: int,
    right: int,
    causal: bool,
    scale: float,
    precision: str,
    config_json: str | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if do.dtype != q.dtype or do.device != q.device:
        raise ValueError(f"grad_output has dtype {do.dtype} on {do.device}; expected {q.dtype} on {q.device}")
    config = _config_from_json(config_json, q)
    with _on_device(q):
        return _varlen_backward(
            do,
            q,
            k,
            v,
            o,
            lse,
            cu_q,
            cu_k,
            max(max_q, 1),
            max(max_k, 1),
            (left, right),
            causal,
            scale,
            precision,
            config,
        )


@_varlen_bwd_op.register_fake
def _(do, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, left, right, causal, scale, precision, config_json):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _varlen_setup_context(ctx, inputs, output):
    q, k, v, cu_q, cu_k, *args = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k)
    ctx.args = tuple(args)
    ctx.mark_non_differentiable(lse)


def _varlen_backward_rule(ctx, do, _dlse):
    q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
    dq, dk, dv = _varlen_bwd_op(do, q, k, v, o, lse, cu_q, cu_k, *ctx.args)
    return (dq, dk, dv) + (None,) * 10


def _varlen_no_double_backward(ctx, *grads):
    raise RuntimeError("flash_attention_varlen supports first-order gradients only")


_varlen_fwd_op.register_autograd(_varlen_backward_rule, setup_context=_varlen_setup_context)
_varlen_bwd_op.register_autograd(_varlen_no_double_backward, setup_context=lambda ctx, inputs, output: None)


def flash_attention_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool = False,
    window: tuple[int, int] | None = None,
    scale: float | None = None,
    precision: str = "ieee",
    config: KernelConfig | None = None,
) -> torch.Tensor:
    """Attention over a batch of packed sequences of different lengths.

    The layout and arguments are those of FlashAttention-2's ``flash_attn_varlen_func``.
    Sequence ``b`` owns query rows ``cu_seqlens_q[b]:cu_seqlens_q[b+1]`` and key/value rows
    ``cu_seqlens_k[b]:cu_seqlens_k[b+1]``; it attends only within itself, exactly as
    :func:`flash_attention` on that sequence alone.

    Parameters
    ----------
    q : Tensor (total_q, heads_q, head_dim)
    k, v : Tensor (total_k, heads_kv, head_dim)
        Packed tokens of all sequences; any strides. GQA/MQA as in :func:`flash_attention`.
    cu_seqlens_q, cu_seqlens_k : int32 Tensor (batch + 1,)
        Cumulative sequence lengths on the tensors' device: ``0, len_0, len_0 + len_1, ...``,
        ending at ``total_q`` / ``total_k``. Sequences may be empty (length 0).
    max_seqlen_q, max_seqlen_k : int
        At least the longest query / key sequence; they size the launch grid.
    causal, window, scale, precision, config
        As in :func:`flash_attention`; masks are aligned bottom-right *per sequence*
        (query ``i`` of a sequence sees key ``j`` of the same sequence iff
        ``j <= i + len_k - len_q`` for causal), so a sequence with ``len_q > len_k`` has
        empty first rows (output and gradient 0), and a sequence with no keys outputs 0.

    Returns
    -------
    Tensor (total_q, heads_q, head_dim), contiguous, differentiable w.r.t. q, k, v (once);
    the backward is deterministic.

    Raises
    ------
    ValueError
        Everything :func:`flash_attention` refuses, plus tensors that are not 3-D,
        ``cu_seqlens`` that are not int32 offsets from 0 to the token count, do not
        increase, or differ in batch size, and ``max_seqlen`` below the longest sequence.
        Checking the offsets copies them to the host once per call.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 3:
            raise ValueError(
                f"{name} must have 3 dimensions (total_tokens, heads, head_dim), got shape {tuple(t.shape)}"
            )
        if t.numel() == 0:
            raise ValueError(f"{name} is empty (shape {tuple(t.shape)}); pack at least one token")
    # The dense checks, on (1, heads, tokens, head_dim) views of the packed tensors.
    scale = _validate(*(t.transpose(0, 1)[None] for t in (q, k, v)), scale, precision)
    sides = _window_sides(causal, window)
    # The offsets' values are checked inside the op (see _varlen_fwd_op); their type here.
    _check_offsets_tensor("cu_seqlens_q", cu_seqlens_q, max_seqlen_q, q.device)
    _check_offsets_tensor("cu_seqlens_k", cu_seqlens_k, max_seqlen_k, q.device)
    batch = cu_seqlens_q.numel() - 1
    if cu_seqlens_k.numel() - 1 != batch:
        raise ValueError(
            f"cu_seqlens_q describes {batch} sequences and cu_seqlens_k {cu_seqlens_k.numel() - 1} "
            "(the batch sizes differ)"
        )
    if batch > _MAX_GRID_YZ or q.shape[1] > _MAX_GRID_YZ:
        raise ValueError(f"at most {_MAX_GRID_YZ} sequences and heads per call, got {batch} and {q.shape[1]}")
    if config is not None and not isinstance(config, KernelConfig):
        raise ValueError(f"config must be a KernelConfig (see load_config), got {type(config).__name__}")
    out, _lse = _varlen_fwd_op(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        *sides,
        causal,
        scale,
        precision,
        None if config is None else config.json,
    )
    return out
