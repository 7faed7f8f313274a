"""slurmkit_kernels: a Triton flash-attention kernel packaged for Slurm training jobs.

Public API
----------
flash_attention(q, k, v, *, causal=False, window=None, scale=None, precision="ieee", config=None)
    The kernel, differentiable, (batch, heads, seq, head_dim) like SDPA.
flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, ...)
    Packed variable-length sequences, FlashAttention-2's varlen layout.
FlashAttention
    ``nn.Module`` wrapper holding ``causal``/``scale``/``precision``.
scaled_dot_product_attention
    Drop-in with SDPA's signature, for code that calls
    ``torch.nn.functional.scaled_dot_product_attention``.
swap_sdpa
    Context manager that routes ``F.scaled_dot_product_attention`` to the kernel.
attention_flops
    The FLOP-counting rule used by the benchmark and the autotune tool.

Tools: ``python -m slurmkit_kernels.autotune`` (GPU; writes a launch-config file) and
``python -m slurmkit_kernels.compile_check`` (no GPU; compiles a config for an arch).

To run on a CPU (tests), set ``TRITON_INTERPRET=1`` before triton is first imported.
"""

from .attention import SUPPORTED_DTYPES, SUPPORTED_HEAD_DIMS, flash_attention, interpreter_active
from .config import KernelConfig, LaunchConfig, builtin_config, config_for_device, load_config
from .flops import attention_flops
from .nn import FlashAttention, scaled_dot_product_attention, swap_sdpa
from .varlen import flash_attention_varlen

__all__ = [
    "SUPPORTED_DTYPES",
    "SUPPORTED_HEAD_DIMS",
    "FlashAttention",
    "KernelConfig",
    "LaunchConfig",
    "attention_flops",
    "builtin_config",
    "config_for_device",
    "flash_attention",
    "flash_attention_varlen",
    "interpreter_active",
    "load_config",
    "scaled_dot_product_attention",
    "swap_sdpa",
]
__version__ = "0.1.0"
