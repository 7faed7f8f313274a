"""Input validation, config files, FLOP counting and the nn / SDPA drop-ins."""

import json
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import torch.nn.functional as F  # noqa: E402

import slurmkit_kernels  # noqa: E402
from slurmkit_kernels import (  # noqa: E402
    FlashAttention,
    attention_flops,
    builtin_config,
    config_for_device,
    flash_attention,
    load_config,
    scaled_dot_product_attention,
    swap_sdpa,
)
from slurmkit_kernels import config as config_mod  # noqa: E402


def rand(*shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, dtype=dtype, device=device)


def good(device):
    q = rand(1, 4, 8, 16, device=device)
    return q, like(q, 1, 2, 8, 16), like(q, 1, 2, 8, 16)


def like(t, *shape):
    """Random data on ``t``'s device, so each case fails for its own reason on any device."""
    return rand(*shape, device=t.device)


BAD_INPUTS = {
    "rank3-q": (lambda q, k, v: (q[0], k, v), {}, "4 dimensions"),
    "rank5-k": (lambda q, k, v: (q, k[None], v), {}, "4 dimensions"),
    "float64": (lambda q, k, v: (q.double(), k.double(), v.double()), {}, "dtype"),
    "int": (lambda q, k, v: (q.long(), k.long(), v.long()), {}, "dtype"),
    "mixed-dtype": (lambda q, k, v: (q.half(), k, v), {}, "share a dtype"),
    "head-dim-48": (
        lambda q, k, v: (like(q, 1, 4, 8, 48), like(q, 1, 2, 8, 48), like(q, 1, 2, 8, 48)),
        {},
        "head_dim 48",
    ),
    "head-dim-256": (lambda q, k, v: (like(q, 1, 1, 8, 256),) * 3, {}, "head_dim 256"),
    "head-dim-mismatch": (
        lambda q, k, v: (q, like(q, 1, 2, 8, 32), like(q, 1, 2, 8, 32)),
        {},
        "head dims differ",
    ),
    "non-dividing-heads": (lambda q, k, v: (like(q, 1, 3, 8, 16), k, v), {}, "multiple"),
    "more-kv-heads": (
        lambda q, k, v: (like(q, 1, 2, 8, 16), like(q, 1, 4, 8, 16), like(q, 1, 4, 8, 16)),
        {},
        "multiple",
    ),
    "batch-mismatch": (lambda q, k, v: (like(q, 2, 4, 8, 16), k, v), {}, "batch sizes differ"),
    "k-v-shape": (lambda q, k, v: (q, k, like(q, 1, 2, 9, 16)), {}, "same shape"),
    "empty-seq": (lambda q, k, v: (like(q, 1, 4, 0, 16), k, v), {}, "empty"),
    "not-a-tensor": (lambda q, k, v: (q.tolist(), k, v), {}, "torch.Tensor"),
    "scale-nan": (lambda q, k, v: (q, k, v), {"scale": math.nan}, "scale"),
    "scale-str": (lambda q, k, v: (q, k, v), {"scale": "0.1"}, "scale"),
    "precision": (lambda q, k, v: (q, k, v), {"precision": "fp8"}, "precision"),
    "causal-not-bool": (lambda q, k, v: (q, k, v), {"causal": "yes"}, "causal"),
    "window-int": (lambda q, k, v: (q, k, v), {"window": 4}, "window"),
    "window-short": (lambda q, k, v: (q, k, v), {"window": (4,)}, "window"),
    "window-negative": (lambda q, k, v: (q, k, v), {"window": (-2, 0)}, "window"),
    "window-float": (lambda q, k, v: (q, k, v), {"window": (4.0, 0)}, "window"),
    "causal-window-right": (lambda q, k, v: (q, k, v), {"causal": True, "window": (4, 2)}, "contradicts"),
    "config-dict": (lambda q, k, v: (q, k, v), {"config": {"fwd": {}}}, "KernelConfig"),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_unsupported_inputs_raise_value_error(name, device):
    make, kwargs, message = BAD_INPUTS[name]
    q, k, v = make(*good(device))
    with pytest.raises(ValueError, match=message):
        flash_attention(q, k, v, **kwargs)


def test_mismatched_devices_raise(device):
    q, k, v = good(device)
    with pytest.raises(ValueError, match="one device"):
        flash_attention(q, k.to("meta"), v)


def test_cpu_tensors_refused_outside_interpreter(monkeypatch, device):
    """Without TRITON_INTERPRET the kernels would read host pointers on the GPU."""
    monkeypatch.setattr(slurmkit_kernels.attention, "interpreter_active", lambda: False)
    q, k, v = (t.cpu() for t in good(device))
    with pytest.raises(ValueError, match="CUDA device"):
        flash_attention(q, k, v)


def test_double_backward_is_refused(device):
    q, k, v = (t.requires_grad_() for t in good(device))
    out = flash_attention(q, k, v)
    do = torch.randn_like(out).requires_grad_()
    (g,) = torch.autograd.grad(out, q, do, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        g.sum().backward()


# ---------------------------------------------------------------------------- configs


def test_builtin_configs_parse_and_cover_every_kernel():
    for name in ("default", "h100", "h200"):
        cfg = builtin_config(name)
        for kernel in config_mod.KERNEL_NAMES:
            for d in (16, 32, 64, 128):
                for dtype in ("float16", "bfloat16", "float32"):
                    entry = cfg.lookup(kernel, d, dtype)
                    assert entry.BLOCK_M >= 16 and entry.BLOCK_N >= 16


def test_lookup_prefers_specific_entries():
    cfg = builtin_config("h100")
    assert cfg.lookup("fwd", 128, "bfloat16") == cfg.kernels["fwd"]["128"]
    assert cfg.lookup("fwd", 16, "bfloat16") == cfg.kernels["fwd"]["default"]
    # float32: exact (IEEE) dots get their own small tiles, TF32 its tensor-core tiles.
    assert cfg.lookup("fwd", 128, "float32", "ieee") == cfg.kernels["fwd"]["float32"]
    assert cfg.lookup("fwd", 128, "float32", "tf32") == cfg.kernels["fwd"]["float32/tf32"]
    assert cfg.lookup("bwd_dkdv", 128, "float32", "tf32") == cfg.kernels["bwd_dkdv"]["128/float32/tf32"]


def test_lookup_order():
    keys = ["128/float32/tf32", "128/float32", "float32/tf32", "float32", "128", "default"]
    table = {key: config_mod.LaunchConfig(16 * 2**i, 16) for i, key in enumerate(keys)}
    for i, key in enumerate(keys):
        kernels = {k: dict(list(table.items())[i:]) for k in config_mod.KERNEL_NAMES}
        cfg = config_mod.KernelConfig("t", (), "", kernels)
        assert cfg.lookup("fwd", 128, "float32", "tf32") == table[key]
    assert cfg.lookup("fwd", 128, "float32", "ieee") == table["default"]
    cfg = config_mod.KernelConfig("t", (), "", {k: table for k in config_mod.KERNEL_NAMES})
    assert cfg.lookup("fwd", 128, "float32", "ieee") == table["128/float32"]
    assert cfg.lookup("fwd", 64, "float32", "ieee") == table["float32"]
    assert cfg.lookup("fwd", 128, "bfloat16") == table["128"]


@pytest.mark.parametrize(
    "device_name, expected",
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "default"),
        (None, "default"),
    ],
)
def test_config_for_device(device_name, expected, monkeypatch):
    monkeypatch.delenv(config_mod.CONFIG_ENV, raising=False)
    assert config_for_device(device_name).name == expected


def test_config_env_override_and_round_trip(tmp_path, monkeypatch):
    path = tmp_path / "tuned.json"
    data = builtin_config("h100").to_dict()
    data["name"] = "tuned"
    path.write_text(json.dumps(data))
    monkeypatch.setenv(config_mod.CONFIG_ENV, str(path))
    cfg = config_for_device("NVIDIA H100 80GB HBM3")
    assert cfg.name == "tuned"
    assert cfg.to_dict() == data


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(extra=1), "unknown key"),
        (lambda d: d["kernels"].pop("bwd_dq"), "missing"),
        (lambda d: d["kernels"]["fwd"].pop("default"), "default"),
        (lambda d: d["kernels"]["fwd"]["default"].update(BLOCK_M=48), "power of two"),
        (lambda d: d["kernels"]["fwd"]["default"].update(num_warps=3), "num_warps"),
        (lambda d: d["kernels"]["fwd"]["default"].pop("num_stages"), "exactly the keys"),
    ],
)
def test_bad_config_files_are_rejected(mutate, message, tmp_path):
    data = builtin_config("default").to_dict()
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        load_config(path)


def test_invalid_json_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{")
    with pytest.raises(ValueError, match="broken.json"):
        load_config(path)


# ---------------------------------------------------------------------------- flops


def test_flops_rule():
    base = 4 * 2 * 16 * 1024 * 1024 * 128
    assert attention_flops(2, 16, 1024, 1024, 128, False, "fwd") == base
    assert attention_flops(2, 16, 1024, 1024, 128, True, "fwd") == base / 2
    assert attention_flops(2, 16, 1024, 1024, 128, False, "bwd") == 2.5 * base
    assert attention_flops(2, 16, 1024, 1024, 128, True, "fwd_bwd") == 3.5 * base / 2
    with pytest.raises(ValueError, match="mode"):
        attention_flops(1, 1, 1, 1, 16, False, "both")


# ---------------------------------------------------------------------------- drop-ins


def test_module_and_sdpa_dropin_match_torch(device):
    q, k, v = (rand(2, 4, 24, 32, device=device) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(FlashAttention(causal=True)(q, k, v), expected, atol=1e-5)
    assert torch.allclose(scaled_dot_product_attention(q, k, v, is_causal=True), expected, atol=1e-5)
    k2, v2 = k[:, :2], v[:, :2]  # two kv heads: query heads 0,1 -> kv 0 and 2,3 -> kv 1
    expected_gqa = F.scaled_dot_product_attention(q, k2, v2, enable_gqa=True, scale=0.2)
    got = scaled_dot_product_attention(q, k2, v2, enable_gqa=True, scale=0.2)
    assert torch.allclose(got, expected_gqa, atol=1e-5)


def test_sdpa_dropin_refuses_what_it_cannot_honour(device):
    q, k, v = good(device)
    with pytest.raises(NotImplementedError, match="attn_mask"):
        scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(8, 8, dtype=torch.bool))
    with pytest.raises(NotImplementedError, match="dropout"):
        scaled_dot_product_attention(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="enable_gqa"):
        scaled_dot_product_attention(q, k, v)
    with pytest.raises(ValueError, match="top-left"):
        scaled_dot_product_attention(q, k[:, :, :5], v[:, :, :5], is_causal=True, enable_gqa=True)
    with pytest.raises(ValueError, match="precision"):
        FlashAttention(precision="bf16")


def test_swap_sdpa_routes_and_restores(device, monkeypatch):
    calls = []
    real = slurmkit_kernels.nn.flash_attention

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(slurmkit_kernels.nn, "flash_attention", counting)
    original = F.scaled_dot_product_attention
    q, k, v = (rand(1, 2, 16, 16, device=device) for _ in range(3))
    with swap_sdpa():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert calls == [1]
    assert F.scaled_dot_product_attention is original
    assert torch.allclose(out, original(q, k, v, is_causal=True), atol=1e-5)
