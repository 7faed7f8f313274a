"""torch.compile coverage: the kernels are ``torch.library`` custom ops with fake kernels.

``flash_attention`` calls ``slurmkit::flash_attention_fwd`` (autograd registered, backward
``slurmkit::flash_attention_bwd``), so Dynamo records one opaque node per pass instead of
tracing into the Triton launch, and ``fullgraph=True`` compiles without a graph break.
On the CPU the op runs the same Triton kernel through the interpreter (no reference
fallback), so compiled and eager outputs come from the same kernel.

Backend ``aot_eager``: Dynamo + AOTAutograd (which traces forward and backward with the
fake kernels) without Inductor's C++ code generation, which would add minutes of compiling
on a 2-core CI machine and exercises nothing of the op: Inductor calls a custom op as an
opaque extern kernel.
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from slurmkit_kernels import LaunchConfig, flash_attention  # noqa: E402
from slurmkit_kernels.config import KernelConfig  # noqa: E402

TILES = KernelConfig(
    name="tiles-16x32",
    match=(),
    provenance="tests",
    kernels={
        "fwd": {"default": LaunchConfig(16, 32)},
        "bwd_dkdv": {"default": LaunchConfig(32, 16)},
        "bwd_dq": {"default": LaunchConfig(16, 32)},
    },
)


class TinyBlock(torch.nn.Module):
    """Projections around the kernel, GQA 4:2, causal: a transformer attention block."""

    def __init__(self, dim=64, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = torch.nn.Linear(dim, dim)
        self.kv = torch.nn.Linear(dim, 2 * kv_heads * self.head_dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, self.kv_heads, self.head_dim).unbind(2)
        y = flash_attention(q, k.transpose(1, 2), v.transpose(1, 2), causal=True, config=TILES)
        return self.out(y.transpose(1, 2).reshape(b, t, -1))


def test_compiled_model_has_no_graph_break_and_matches_eager(device):
    torch.manual_seed(0)
    model = TinyBlock().to(device)
    x = torch.randn(2, 40, 64, device=device)

    def step(fn):
        model.zero_grad()
        y = fn(x)
        y.square().mean().backward()
        return y.detach(), [p.grad.clone() for p in model.parameters()]

    eager_y, eager_grads = step(model)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    got_y, got_grads = step(compiled)
    torch.testing.assert_close(got_y, eager_y, rtol=1e-5, atol=1e-6)
    for got, want in zip(got_grads, eager_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_ops_pass_opcheck(device):
    """Schema, fake-kernel shapes/strides/dtypes and autograd registration agree with the
    real kernels (torch.library.opcheck runs both and compares)."""
    from slurmkit_kernels import attention

    gen = torch.Generator().manual_seed(1)
    q = torch.randn((1, 4, 24, 16), generator=gen).to(device).requires_grad_()
    k = torch.randn((1, 2, 40, 16), generator=gen).to(device).requires_grad_()
    v = torch.randn((1, 2, 40, 16), generator=gen).to(device).requires_grad_()
    args = (q, k, v, -(2**30), 16, 0.25, "ieee", None, False, True)
    torch.library.opcheck(
        attention._flash_attention_fwd,
        args,
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
    )
    o, lse = attention._flash_attention_fwd(*args)
    do = torch.randn_like(o)
    bwd_args = (
        do,
        q.detach(),
        k.detach(),
        v.detach(),
        o.detach(),
        lse,
        -(2**30),
        16,
        0.25,
        "ieee",
        None,
        False,
        True,
    )
    torch.library.opcheck(
        attention._flash_attention_bwd, bwd_args, test_utils=("test_schema", "test_faketensor")
    )


def test_hopper_path_compiles_in_one_graph(device, monkeypatch):
    """``hopper=True`` under ``torch.compile(fullgraph=True)``: the choice between the Hopper
    and the portable kernels reads ``data_ptr()`` (TMA alignment), which Dynamo's fake
    tensors lack, so it must happen inside the custom op, on real tensors. Here the op runs
    the Hopper kernels through the interpreter (counted), forward and backward, and matches
    eager bitwise; an unaligned layout, decided at run time inside the same compiled graph,
    takes the portable kernels."""
    from slurmkit_kernels import _hopper
    from slurmkit_kernels.config import HOPPER_KERNEL_NAMES, parse_config

    data = TILES.to_dict()
    data["kernels"].update(
        {name: {"default": LaunchConfig(16, 32).to_dict()} for name in HOPPER_KERNEL_NAMES}
    )
    small = parse_config(data)
    seen = {"forward": 0, "backward": 0}
    for name in seen:
        real = getattr(_hopper, name)

        def counting(*args, _real=real, _name=name, **kwargs):
            seen[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(_hopper, name, counting)

    def attend(q, k, v):
        return flash_attention(q, k, v, causal=True, hopper=True, config=small).float().square().sum()

    gen = torch.Generator().manual_seed(2)
    q, k, v = (
        torch.randn((1, h, 40, 16), generator=gen).to(device, torch.float16).requires_grad_()
        for h in (4, 2, 2)
    )
    eager_loss = attend(q, k, v)
    eager_grads = torch.autograd.grad(eager_loss, (q, k, v))
    assert seen == {"forward": 1, "backward": 1}

    torch._dynamo.reset()
    explanation = torch._dynamo.explain(attend)(q, k, v)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    compiled = torch.compile(attend, fullgraph=True, backend="aot_eager")
    seen.update(forward=0, backward=0)
    loss = compiled(q, k, v)
    grads = torch.autograd.grad(loss, (q, k, v))
    assert seen == {"forward": 1, "backward": 1}
    assert torch.equal(loss, eager_loss)
    for got, want in zip(grads, eager_grads):
        assert torch.equal(got, want)

    # Every other element of a wider tensor: TMA cannot address it, the op falls back.
    wide = torch.randn((1, 4, 40, 32), generator=gen).to(device, torch.float16)[..., ::2]
    seen.update(forward=0, backward=0)
    unaligned = compiled(wide.requires_grad_(), k, v)
    torch.testing.assert_close(unaligned, attend(wide, k, v), rtol=0, atol=0)
    assert seen == {"forward": 0, "backward": 0}


def test_varlen_compiles_in_one_graph(device):
    """``flash_attention_varlen`` is a pair of custom ops too: the offsets' values (read to
    the host to validate them) are checked inside the op, so Dynamo records one graph with
    no break, and compiled forward and gradients equal eager's bitwise."""
    from slurmkit_kernels import flash_attention_varlen

    gen = torch.Generator().manual_seed(3)
    q = torch.randn((37, 4, 16), generator=gen).to(device).requires_grad_()
    k = torch.randn((29, 2, 16), generator=gen).to(device).requires_grad_()
    v = torch.randn((29, 2, 16), generator=gen).to(device).requires_grad_()
    cu_q = torch.tensor([0, 20, 20, 37], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 9, 17, 29], dtype=torch.int32, device=device)

    def attend(q, k, v):
        return flash_attention_varlen(q, k, v, cu_q, cu_k, 20, 12, causal=True, config=TILES).square().sum()

    eager = attend(q, k, v)
    eager_grads = torch.autograd.grad(eager, (q, k, v))
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(attend)(q, k, v)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    compiled = torch.compile(attend, fullgraph=True, backend="aot_eager")
    loss = compiled(q, k, v)
    assert torch.equal(loss, eager)
    for got, want in zip(torch.autograd.grad(loss, (q, k, v)), eager_grads):
        assert torch.equal(got, want)


def test_varlen_ops_pass_opcheck(device):
    from slurmkit_kernels import varlen

    gen = torch.Generator().manual_seed(4)
    q = torch.randn((21, 4, 16), generator=gen).to(device).requires_grad_()
    k = torch.randn((15, 2, 16), generator=gen).to(device).requires_grad_()
    v = torch.randn((15, 2, 16), generator=gen).to(device).requires_grad_()
    cu_q = torch.tensor([0, 0, 21], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 6, 15], dtype=torch.int32, device=device)
    args = (q, k, v, cu_q, cu_k, 21, 9, -1, 0, True, 0.25, "ieee", TILES.json)
    torch.library.opcheck(
        varlen._varlen_fwd_op,
        args,
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
    )
    o, lse = varlen._varlen_fwd_op(*args)
    bwd_args = (torch.randn_like(o), q.detach(), k.detach(), v.detach(), o.detach(), lse, *args[3:])
    torch.library.opcheck(varlen._varlen_bwd_op, bwd_args, test_utils=("test_schema", "test_faketensor"))
