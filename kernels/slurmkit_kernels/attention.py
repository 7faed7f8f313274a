"""Public attention API: input validation, launch logic and the autograd wrapper.

See :func:`flash_attention`. The Triton kernels themselves live in ``_kernels.py``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os

import torch
from triton.runtime.interpreter import InterpretedFunction

from . import _hopper, _kernels, hopper_ws
from .config import KernelConfig, LaunchConfig, config_for_device, hopper_entry, parse_config

SUPPORTED_HEAD_DIMS = (16, 32, 64, 128)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
PRECISIONS = ("ieee", "tf32")
_LOG2E = 1.4426950408889634
# A band edge beyond any index difference (sequence lengths are far below 2**30), small
# enough that the kernels' index arithmetic stays inside int32.
_UNBOUNDED = 2**30
# Feature flag for the Hopper kernels (_hopper.py): "1" uses them on sm_90+ GPUs where
# eligible, anything else keeps the portable kernels. The ``hopper=`` argument overrides it.
HOPPER_ENV = "SLURMKIT_KERNELS_HOPPER"
# Feature flag for the warp-specialised Gluon forward (hopper_ws.py), on top of the Hopper
# path: "1" runs it for the Hopper path's d128 forwards on sm_90; it has not yet been run on
# a GPU, so it stays off by default and the Hopper forward (_hopper.py) serves otherwise.
GLUON_ENV = "SLURMKIT_KERNELS_GLUON"


def interpreter_active() -> bool:
    """True when Triton was imported with ``TRITON_INTERPRET=1`` (kernels run on the CPU).

    Decided by what ``@triton.jit`` actually produced, not by the current environment:
    setting the variable after Triton was imported has no effect.
    """
    return isinstance(_kernels._attn_fwd, InterpretedFunction)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _validate(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None, precision: str
) -> float:
    """Raise ValueError for anything the kernels do not support; return the softmax scale."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(
                f"{name} must have 4 dimensions (batch, heads, seq, head_dim), got shape {tuple(t.shape)}"
            )
        if t.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"{name} has dtype {t.dtype}; supported dtypes are float16, bfloat16, float32")
        if t.numel() == 0:
            raise ValueError(f"{name} is empty (shape {tuple(t.shape)}); all sizes must be >= 1")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if not interpreter_active() and q.device.type != "cuda":
        raise ValueError(
            f"tensors are on {q.device}; the Triton kernels need a CUDA device. To run on the "
            "CPU, set TRITON_INTERPRET=1 before triton is first imported (slow; for tests)."
        )
    batch, h_q, _, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if k.shape[0] != batch:
        raise ValueError(f"batch sizes differ: q has {batch}, k/v have {k.shape[0]}")
    if k.shape[3] != d:
        raise ValueError(f"head dims differ: q has {d}, k/v have {k.shape[3]}")
    if d not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim {d} is not supported; supported head dims are {SUPPORTED_HEAD_DIMS}")
    h_kv = k.shape[1]
    if h_q % h_kv:
        raise ValueError(
            f"q has {h_q} heads and k/v have {h_kv}: the number of query heads must be a "
            "multiple of the number of key/value heads (GQA/MQA)"
        )
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ValueError(f"scale must be a finite float or None, got {scale!r}")
    return float(scale)


def _band(causal: bool, window, n_q: int, n_k: int) -> tuple[int, int]:
    """(D_LO, D_HI): query i sees key j iff D_LO <= j - i <= D_HI (bottom-right aligned)."""
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be a bool, got {causal!r}")
    if window is None:
        left, right = -1, -1
    else:
        if (
            not isinstance(window, (tuple, list))
            or len(window) != 2
            or not all(isinstance(w, int) and not isinstance(w, bool) and w >= -1 for w in window)
        ):
            raise ValueError(
                f"window must be None or (left, right) with ints >= -1 (-1 = unbounded), got {window!r}"
            )
        left, right = window
    if causal and right > 0:
        raise ValueError(
            f"causal=True contradicts window right={right}: a causal mask sees no key to the right"
        )
    offset = n_k - n_q
    d_lo = max(offset - left, -_UNBOUNDED) if left >= 0 else -_UNBOUNDED
    d_hi = offset if causal else (min(offset + right, _UNBOUNDED) if right >= 0 else _UNBOUNDED)
    return d_lo, d_hi


def _select_config(q: torch.Tensor, config: KernelConfig | None) -> KernelConfig:
    if config is not None:
        return config
    name = torch.cuda.get_device_name(q.device) if q.device.type == "cuda" else None
    return config_for_device(name)


def _kernel_flags(dtype: torch.dtype, precision: str) -> tuple[bool, str]:
    """(EMULATE_BF16, INPUT_PRECISION) constexprs; see the interpreter notes in ``_kernels``."""
    emulate_bf16 = dtype == torch.bfloat16 and interpreter_active()
    # input_precision only changes fp32 dots; 16-bit dots always use tensor cores.
    input_precision = precision if dtype == torch.float32 else "tf32"
    return emulate_bf16, input_precision


def _lookup_precision(dtype: torch.dtype, precision: str) -> str | None:
    """The precision part of a config lookup: only float32 dots depend on it."""
    return precision if dtype == torch.float32 else None


def _empty(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Allocate a kernel output. The tests replace this to fill outputs with NaN, which
    proves that the kernels write every element instead of leaving stale memory."""
    return torch.empty(shape, dtype=dtype, device=device)


def _on_device(t: torch.Tensor):
    """Triton launches on the *current* CUDA device; make it the tensors' device."""
    return torch.cuda.device(t.device) if t.device.type == "cuda" else contextlib.nullcontext()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _launch(cfg: LaunchConfig) -> dict[str, int]:
    return {
        "BLOCK_M": cfg.BLOCK_M,
        "BLOCK_N": cfg.BLOCK_N,
        "num_warps": cfg.num_warps,
        "num_stages": cfg.num_stages,
    }


def _hopper_tiles(config: KernelConfig, kernel: str, q: torch.Tensor) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of a Hopper kernel, from the config file."""
    cfg = hopper_entry(config, kernel, q.shape[3], _dtype_name(q.dtype))
    return cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps, cfg.num_stages


def _use_hopper(q, k, v, scale: float, hopper: bool | None) -> bool:
    """Whether this call runs the Hopper kernels (TMA, warp specialisation, 5-matmul backward).

    Called inside the custom ops' implementations, on the real tensors: the alignment
    check reads ``data_ptr()``, which Dynamo's fake tensors do not have, so deciding in
    :func:`flash_attention` itself broke ``torch.compile(fullgraph=True)``.

    ``hopper=None`` follows ``SLURMKIT_KERNELS_HOPPER``; ``True`` uses them regardless of
    it, also under the interpreter (tests); ``False`` never. On CUDA they need compute
    capability 9.0 or newer. Either way the inputs must suit them: fp16/bf16 (fp32 keeps the
    portable IEEE/TF32 path), a positive scale (the folded FMA takes the row max of
    unscaled scores), and layouts TMA can address; anything else uses the portable kernels.
    """
    if hopper is False or (hopper is None and os.environ.get(HOPPER_ENV) != "1"):
        return False
    if q.device.type == "cuda":
        if torch.cuda.get_device_capability(q.device)[0] < 9:  # no TMA or wgmma before Hopper
            return False
    elif hopper is None:
        return False  # the interpreter runs them only when asked to (tests)
    return (
        q.dtype in (torch.float16, torch.bfloat16)
        and scale > 0
        and all(_hopper.tma_compatible(t) for t in (q, k, v))
    )


def _use_gluon(q, k, v) -> bool:
    """Whether a forward that takes the Hopper path runs the Gluon warp-specialised kernel.

    Only with ``SLURMKIT_KERNELS_GLUON=1`` (read at each call), on a CUDA device of compute
    capability 9.x (wgmma and ``setmaxnreg`` as it uses them are sm_90 instructions), for
    fp16/bf16 at head dim 128. Never under the interpreter: Triton's interpreter does not
    run Gluon kernels (triton 3.6/3.7). Everything else keeps the Hopper forward, and the
    backward is the Hopper backward either way (same lse).
    """
    if os.environ.get(GLUON_ENV) != "1" or q.device.type != "cuda":
        return False
    if torch.cuda.get_device_capability(q.device)[0] != 9:
        return False
    return hopper_ws.supports(q, k, v)


def run_launch(launch) -> None:
    """Launch a ``(kernel, grid, args, kwargs)`` tuple built by a ``*_launch`` function."""
    kernel, grid, args, kwargs = launch
    kernel[grid](*args, **kwargs)


def portable_meta(config: KernelConfig, kernel: str, q: torch.Tensor, precision: str):
    """(LaunchConfig, keyword arguments) of a portable kernel, dense or varlen: the config
    file's tiles for ``kernel`` at this head dim, dtype and fp32 precision, and the constexprs
    both paths pass (head dim, the interpreter's bf16 emulation, the dots' input precision)."""
    d = q.shape[-1]
    cfg = config.lookup(kernel, d, _dtype_name(q.dtype), _lookup_precision(q.dtype, precision))
    emulate_bf16, input_precision = _kernel_flags(q.dtype, precision)
    return cfg, dict(HEAD_DIM=d, EMULATE_BF16=emulate_bf16, INPUT_PRECISION=input_precision, **_launch(cfg))


def preprocess_launch(o, do, delta, rows: int, heads: int, batch_heads: int, o_strides, do_strides):
    """``delta = rowsum(dO * O)`` for ``batch_heads`` (batch x head) slices of ``rows`` rows
    (the dense and the varlen backward: varlen passes its packed tensors as one batch)."""
    pre_block = 64
    grid = (_cdiv(rows, pre_block), batch_heads)
    args = (o, do, delta, *o_strides, *do_strides, rows, heads)
    return _kernels._attn_bwd_preprocess, grid, args, dict(BLOCK_M=pre_block, HEAD_DIM=o.shape[-1])


def forward_launch(q, k, v, o, lse, band, scale, precision, config):
    """The portable forward's launch: (kernel, grid, args, kwargs); ``o``, ``lse`` preallocated."""
    batch, h_q, n_q, _ = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    cfg, meta = portable_meta(config, "fwd", q, precision)
    grid = (_cdiv(n_q, cfg.BLOCK_M), batch * h_q)
    args = (
        q,
        k,
        v,
        o,
        lse,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *o.stride(),
        n_q,
        n_k,
        h_q,
        h_q // h_kv,
        *band,
        scale * _LOG2E,
    )
    return _kernels._attn_fwd, grid, args, meta


def backward_launches(do, q, k, v, o, lse, delta, dq, dk, dv, band, scale, precision, config):
    """The portable backward's three launches (delta, dK/dV, dQ), in order; outputs preallocated."""
    batch, h_q, n_q, _ = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    qk_scale = scale * _LOG2E
    pre = preprocess_launch(o, do, delta, n_q, h_q, batch * h_q, o.stride(), do.stride())
    common = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    cfg, meta = portable_meta(config, "bwd_dkdv", q, precision)
    dkdv = (
        _kernels._attn_bwd_dkdv,
        (_cdiv(n_k, cfg.BLOCK_N), batch * h_kv),
        (q, k, v, do, lse, delta, dk, dv, *common, *dk.stride(), *dv.stride(), n_q, n_k, h_q, h_kv)
        + (h_q // h_kv, *band, scale, qk_scale),
        meta,
    )
    cfg, meta = portable_meta(config, "bwd_dq", q, precision)
    dq_launch = (
        _kernels._attn_bwd_dq,
        (_cdiv(n_q, cfg.BLOCK_M), batch * h_q),
        (
            q,
            k,
            v,
            do,
            lse,
            delta,
            dq,
            *common,
            *dq.stride(),
            n_q,
            n_k,
            h_q,
            h_q // h_kv,
            *band,
            scale,
            qk_scale,
        ),
        meta,
    )
    return [pre, dkdv, dq_launch]


def _forward(q, k, v, band, scale, precision, config, hopper=False, gluon=False):
    """O and lse; ``hopper`` picks the Hopper kernels, ``gluon`` (with ``hopper``) the Gluon
    warp-specialised forward (callers decide both: :func:`_use_hopper`, :func:`_use_gluon`)."""
    o = _empty(q.shape, q.dtype, q.device)
    lse = _empty(q.shape[:3], torch.float32, q.device)
    if hopper and gluon:
        hopper_ws.forward(q, k, v, o, lse, band, scale * _LOG2E)
    elif hopper:
        emulate_bf16, _ = _kernel_flags(q.dtype, precision)
        _hopper.forward(
            q,
            k,
            v,
            o,
            lse,
            band,
            scale * _LOG2E,
            _hopper_tiles(config, "hopper_fwd", q),
            _hopper.WARP_SPECIALIZE,
            emulate_bf16,
        )
    else:
        run_launch(forward_launch(q, k, v, o, lse, band, scale, precision, config))
    return o, lse


def _backward(do, q, k, v, o, lse, band, scale, precision, config, hopper=False, deterministic=True):
    delta = _empty(lse.shape, torch.float32, q.device)
    dk = _empty(k.shape, k.dtype, k.device)
    dv = _empty(v.shape, v.dtype, v.device)
    if hopper:
        batch, h_q, n_q, _ = q.shape
        run_launch(preprocess_launch(o, do, delta, n_q, h_q, batch * h_q, o.stride(), do.stride()))
        if not _hopper.tma_compatible(do):
            do = do.contiguous()
        dq = _empty(q.shape, q.dtype, q.device)
        emulate_bf16, _ = _kernel_flags(q.dtype, precision)
        _hopper.backward(
            q,
            k,
            v,
            do,
            lse,
            delta,
            dq,
            dk,
            dv,
            band,
            scale,
            scale * _LOG2E,
            _hopper_tiles(config, "hopper_bwd" if deterministic else "hopper_bwd_nondet", q),
            deterministic,
            emulate_bf16,
        )
        return dq, dk, dv
    dq = _empty(q.shape, q.dtype, q.device)
    for launch in backward_launches(do, q, k, v, o, lse, delta, dq, dk, dv, band, scale, precision, config):
        run_launch(launch)
    return dq, dk, dv


def _config_from_json(config_json: str | None, q: torch.Tensor) -> KernelConfig:
    """The op's ``config`` argument: the caller's config as JSON, or None for the device's."""
    if config_json is None:
        return _select_config(q, None)
    return _parsed_config(config_json)


@functools.lru_cache(maxsize=32)
def _parsed_config(config_json: str) -> KernelConfig:
    return parse_config(json.loads(config_json), source="flash_attention(config=...)")


# The kernels as torch.library custom ops, so torch.compile sees one opaque node per pass
# (with fake implementations giving output shapes) instead of tracing into the Triton
# launches, and a compiled model has no graph break. Their CPU path is the same kernel
# run by Triton's interpreter (TRITON_INTERPRET=1); elsewhere _validate refuses CPU tensors.
@torch.library.custom_op("slurmkit::flash_attention_fwd", mutates_args=())
def _flash_attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    d_lo: int,
    d_hi: int,
    scale: float,
    precision: str,
    config_json: str | None,
    hopper: bool | None,
    deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    config = _config_from_json(config_json, q)
    use_hopper = _use_hopper(q, k, v, scale, hopper)
    use_gluon = use_hopper and _use_gluon(q, k, v)
    with _on_device(q):
        return _forward(q, k, v, (d_lo, d_hi), scale, precision, config, use_hopper, use_gluon)


@_flash_attention_fwd.register_fake
def _(q, k, v, d_lo, d_hi, scale, precision, config_json, hopper, deterministic):
    batch, h_q, n_q, d = q.shape
    return q.new_empty((batch, h_q, n_q, d)), q.new_empty((batch, h_q, n_q), dtype=torch.float32)


@torch.library.custom_op("slurmkit::flash_attention_bwd", mutates_args=())
def _flash_attention_bwd(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    d_lo: int,
    d_hi: int,
    scale: float,
    precision: str,
    config_json: str | None,
    hopper: bool | None,
    deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if do.dtype != q.dtype or do.device != q.device:
        raise ValueError(f"grad_output has dtype {do.dtype} on {do.device}; expected {q.dtype} on {q.device}")
    config = _config_from_json(config_json, q)
    # The same inputs as the forward's, so the same decision (both paths keep the lse in
    # the same log2 domain, so either backward matches either forward).
    use_hopper = _use_hopper(q, k, v, scale, hopper)
    with _on_device(q):
        return _backward(
            do, q, k, v, o, lse, (d_lo, d_hi), scale, precision, config, use_hopper, deterministic
        )


@_flash_attention_bwd.register_fake
def _(do, q, k, v, o, lse, d_lo, d_hi, scale, precision, config_json, hopper, deterministic):
    # The kernels write fresh contiguous tensors of the inputs' shapes.
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, d_lo, d_hi, scale, precision, config_json, hopper, deterministic = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.args = (d_lo, d_hi, scale, precision, config_json, hopper, deterministic)
    ctx.mark_non_differentiable(lse)


def _backward_rule(ctx, do, _dlse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = _flash_attention_bwd(do, q, k, v, o, lse, *ctx.args)
    return dq, dk, dv, None, None, None, None, None, None, None


def _no_double_backward(ctx, *grads):
    raise RuntimeError(
        "flash_attention supports first-order gradients only: its backward is "
        "once_differentiable (double backward is not implemented)"
    )


_flash_attention_fwd.register_autograd(_backward_rule, setup_context=_setup_context)
_flash_attention_bwd.register_autograd(_no_double_backward, setup_context=lambda ctx, inputs, output: None)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    window: tuple[int, int] | None = None,
    scale: float | None = None,
    precision: str = "ieee",
    config: KernelConfig | None = None,
    hopper: bool | None = None,
    deterministic: bool = True,
) -> torch.Tensor:
    """Exact softmax attention ``softmax(scale * q @ k^T) @ v``, FlashAttention-2 style.

    Memory is O(seq) instead of O(seq^2): the score matrix is never materialised, the
    forward saves only the per-row logsumexp, and the backward recomputes scores.

    Parameters
    ----------
    q : Tensor (batch, heads_q, seq_q, head_dim)
    k, v : Tensor (batch, heads_kv, seq_k, head_dim)
        Same layout as ``torch.nn.functional.scaled_dot_product_attention``. ``heads_kv``
        may be smaller than ``heads_q`` if it divides it (GQA; 1 is MQA): query head ``h``
        uses key/value head ``h // (heads_q // heads_kv)``. Any strides are accepted
        (no copies are made). ``seq_q`` and ``seq_k`` may differ.
    causal : bool
        Bottom-right aligned causal mask, as in FlashAttention-2: query ``i`` attends to
        key ``j`` iff ``j <= i + (seq_k - seq_q)``. With ``seq_q == seq_k`` this is the
        usual lower-triangular mask. With ``seq_q > seq_k`` the first ``seq_q - seq_k``
        query rows see no key at all; their output (and gradient) is 0, not NaN.
        Note that SDPA's ``is_causal`` is aligned top-left instead.
    window : (int, int), optional
        Sliding-window (local) attention as in FlashAttention-2: query ``i`` attends to keys
        ``j`` with ``i + off - left <= j <= i + off + right``, ``off = seq_k - seq_q``; ``-1``
        leaves that side unbounded. Combined with ``causal=True`` the right side is 0
        (``right`` must be 0 or -1). Blocks outside the window are skipped, so the cost
        grows with the window, not the sequence.
    scale : float, optional
        Softmax scale; default ``1 / sqrt(head_dim)``.
    precision : {"ieee", "tf32"}
        Only for float32 inputs: ``"ieee"`` (default, like PyTorch's default fp32 matmul)
        computes exact fp32 products on CUDA cores with small tiles (the config's
        ``float32`` entries; larger tiles spill registers); ``"tf32"`` opts in to the
        faster, less accurate TF32 tensor-core path (``float32/tf32`` entries). fp16/bf16
        always multiply on tensor cores with fp32 accumulation.
    config : KernelConfig, optional
        Launch configuration; default: the shipped file for this GPU model (see
        :mod:`slurmkit_kernels.config`).
    hopper : bool, optional
        Use the Hopper kernels (TMA descriptors, warp specialisation, 5-matmul backward;
        see ``_hopper.py``). ``None`` (default) follows the environment variable
        ``SLURMKIT_KERNELS_HOPPER=1`` on GPUs of compute capability >= 9.0; ``False`` always
        uses the portable kernels. Inputs the Hopper kernels cannot take (fp32, layouts
        TMA cannot address, a non-positive scale) use the portable kernels either way.
        With ``SLURMKIT_KERNELS_GLUON=1`` as well, a Hopper-path forward at head dim 128
        on sm_90 runs the warp-specialised Gluon kernel (``hopper_ws.py``; opt-in until a
        GPU run has checked it); the backward stays the Hopper backward.
    deterministic : bool
        Hopper backward only: add dQ contributions in a fixed order (default), making the
        backward bitwise reproducible; ``False`` lets them race (faster). The portable
        backward is always deterministic.

    Returns
    -------
    Tensor of ``q``'s shape and dtype, contiguous. Differentiable w.r.t. q, k and v
    (once; double backward is not supported). The backward is deterministic.

    Raises
    ------
    ValueError
        Wrong rank, empty tensors, unsupported dtype (only fp16, bf16, fp32) or head dim
        (only 16, 32, 64, 128), mismatched dtypes/devices/batch/head dims, heads_q not a
        multiple of heads_kv, non-CUDA tensors outside the Triton interpreter, bad scale,
        precision, window or config.
    """
    scale = _validate(q, k, v, scale, precision)
    band = _band(causal, window, q.shape[2], k.shape[2])
    if config is not None and not isinstance(config, KernelConfig):
        raise ValueError(f"config must be a KernelConfig (see load_config), got {type(config).__name__}")
    if hopper is not None and not isinstance(hopper, bool):
        raise ValueError(f"hopper must be None, True or False, got {hopper!r}")
    if not isinstance(deterministic, bool):
        raise ValueError(f"deterministic must be a bool, got {deterministic!r}")
    config_json = None if config is None else config.json
    # Which kernels run (portable or Hopper) is decided inside the op, on real tensors.
    out, _lse = _flash_attention_fwd(
        q, k, v, band[0], band[1], scale, precision, config_json, hopper, deterministic
    )
    return out
