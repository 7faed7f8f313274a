"""A small GPT (decoder-only transformer) whose attention runs through slurmkit_kernels.

Shaped after nanoGPT's model.py (pre-norm blocks, tied embeddings, GELU MLP), written
for readability rather than speed. The attention core is pluggable so the same model
can be trained with the Triton kernel (``attention="flash"``) or with PyTorch's
``scaled_dot_product_attention`` (``attention="sdpa"``) for comparison.

On a machine without CUDA, set ``TRITON_INTERPRET=1`` before importing this module
(train.py does) so the kernel runs on the CPU through Triton's interpreter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from slurmkit_kernels import FlashAttention

VOCAB_SIZE = 256  # byte-level tokens


@dataclass
class GPTConfig:
    seq_len: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    attention: str = "flash"  # "flash" or "sdpa"

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if self.attention not in ("flash", "sdpa"):
            raise ValueError(f"attention must be 'flash' or 'sdpa', got {self.attention!r}")


class SDPAttention(nn.Module):
    """Causal attention core through torch's SDPA, same call shape as FlashAttention."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.core = FlashAttention(causal=True) if config.attention == "flash" else SDPAttention()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, embd = x.shape
        q, k, v = self.qkv(x).split(embd, dim=2)
        # (B, T, H, D) -> (B, H, T, D) as strided views; the kernel takes any strides.
        q, k, v = (t.view(batch, seq, self.n_head, embd // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = self.core(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, embd))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(VOCAB_SIZE, config.n_embd)
        self.pos_emb = nn.Embedding(config.seq_len, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, VOCAB_SIZE, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # weight tying, as GPT-2
        self.apply(self._init_weights)
        # GPT-2's scaled init of residual projections keeps the residual stream's variance flat.
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        _, seq = idx.shape
        if seq > self.config.seq_len:
            raise ValueError(f"sequence length {seq} exceeds the model's seq_len {self.config.seq_len}")
        pos = torch.arange(seq, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, VOCAB_SIZE), targets.view(-1))
        return logits, loss

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
