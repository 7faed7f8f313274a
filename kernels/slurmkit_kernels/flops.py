"""FLOP counting for attention, following the convention of published benchmarks.

Forward: ``4 * B * H * Nq * Nk * D`` (QK^T and PV, 2 FLOPs per multiply-add), halved
when causal; backward: 2.5x forward (2.0 for its four matmuls + 0.5 for recomputing
QK^T); forward+backward: 3.5x. ``H`` counts *query* heads (GQA does not reduce it).
These are useful FLOPs, identical to the Triton tutorial's ``bench_flash_attention`` and
Dao-AILab/flash-attention's ``benchmarks/benchmark_flash_attention.py``, so TFLOP/s
numbers compare with published ones. The causal halving is the convention for
``Nq == Nk``; it is kept for unequal lengths as well.
"""

MODES = ("fwd", "bwd", "fwd_bwd")
_MODE_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}


def attention_flops(
    batch: int, heads: int, seq_q: int, seq_k: int, head_dim: int, causal: bool, mode: str
) -> float:
    """Useful FLOPs of one attention call in ``mode`` (``"fwd"``, ``"bwd"``, ``"fwd_bwd"``)."""
    if mode not in _MODE_FACTOR:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    forward = 4.0 * batch * heads * seq_q * seq_k * head_dim
    if causal:
        forward *= 0.5
    return forward * _MODE_FACTOR[mode]
