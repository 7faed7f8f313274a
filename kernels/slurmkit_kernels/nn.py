"""Ways to put the kernel into a model: a module, an SDPA-signature function, a swap helper.

Models built for ``torch.nn.functional.scaled_dot_product_attention`` can switch with
one of these without rewriting their attention block:

* hold a :class:`FlashAttention` module and call it with ``(q, k, v)``;
* call :func:`scaled_dot_product_attention` where they called SDPA;
* or wrap code that calls ``F.scaled_dot_product_attention`` in :func:`swap_sdpa`.

Everything SDPA accepts that the kernel cannot honour (masks, dropout, SDPA's top-left
causal alignment when lengths differ) raises instead of being ignored.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .attention import PRECISIONS, flash_attention


class FlashAttention(nn.Module):
    """Attention core ``(q, k, v) -> out`` backed by :func:`flash_attention`.

    It has no parameters: projections stay in the caller's block, so it replaces the
    SDPA call of an existing attention layer one for one.
    """

    def __init__(
        self,
        causal: bool = False,
        window: tuple[int, int] | None = None,
        scale: float | None = None,
        precision: str = "ieee",
    ):
        super().__init__()
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        self.causal = causal
        self.window = window
        self.scale = scale
        self.precision = precision

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return flash_attention(
            q, k, v, causal=self.causal, window=self.window, scale=self.scale, precision=self.precision
        )

    def extra_repr(self) -> str:
        return f"causal={self.causal}, window={self.window}, scale={self.scale}, precision={self.precision!r}"


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """Same signature and results as ``F.scaled_dot_product_attention``, for 4-D inputs.

    Raises ``NotImplementedError`` for ``attn_mask`` and ``dropout_p > 0``, and
    ``ValueError`` for ``is_causal`` with unequal lengths (SDPA aligns that mask top-left,
    the kernel bottom-right, so silently running it would change the answer) and for
    unequal head counts without ``enable_gqa`` (as SDPA does).
    """
    if attn_mask is not None:
        raise NotImplementedError("slurmkit_kernels does not support attn_mask (use causal)")
    if dropout_p:
        raise NotImplementedError("slurmkit_kernels does not support attention dropout")
    if query.dim() == 4 and key.dim() == 4:
        if is_causal and query.shape[2] != key.shape[2]:
            raise ValueError(
                "is_causal with different query and key lengths: SDPA aligns the mask "
                "top-left but flash_attention aligns it bottom-right; call flash_attention "
                "directly if bottom-right is what you want"
            )
        if query.shape[1] != key.shape[1] and not enable_gqa:
            raise ValueError(
                f"query has {query.shape[1]} heads and key {key.shape[1]}: pass enable_gqa=True "
                "for grouped-query attention (as with SDPA)"
            )
    return flash_attention(query, key, value, causal=is_causal, scale=scale)


@contextlib.contextmanager
def swap_sdpa() -> Iterator[None]:
    """Route ``torch.nn.functional.scaled_dot_product_attention`` to the kernel inside the block.

    Affects only code that looks the function up as ``F.scaled_dot_product_attention`` at
    call time (most models, e.g. nanoGPT); a name imported with ``from ... import`` before
    the block keeps pointing at SDPA. Not thread-safe: it patches a module attribute.
    """
    original = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = scaled_dot_product_attention
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original
