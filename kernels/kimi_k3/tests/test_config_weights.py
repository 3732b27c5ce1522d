"""Shapes of the real and tiny configs, and the one weight layout."""

from __future__ import annotations

import pytest
import torch

from baselines.vllm.kimi_k3.config import K3LayerConfig
from baselines.vllm.kimi_k3.weights import K3LayerWeights, expected_shapes


@pytest.mark.parametrize(
    ("tp", "heads", "inter", "shared", "gate"),
    [(1, 96, 3072, 6144, 12288), (2, 48, 1536, 3072, 6144), (8, 12, 384, 768, 1536)],
)
def test_real_per_rank_sizes(tp: int, heads: int, inter: int, shared: int, gate: int) -> None:
    c = K3LayerConfig.real(tp)
    assert (c.hidden, c.q_lora_rank, c.kv_lora_rank) == (7168, 1536, 512)
    assert (c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim) == (128, 64, 128)
    assert (c.n_routed_experts, c.top_k, c.latent, c.moe_intermediate) == (896, 16, 3584, 3072)
    assert (c.local_heads, c.routed_inter, c.shared_inter, c.gate_rows) == (heads, inter, shared, gate)
    assert c.kv_cache_dim == 576
    assert c.qkv_a_g_rows == 1536 + 512 + 64 + gate
    assert c.softmax_scale == pytest.approx(192**-0.5)
    shapes = expected_shapes(c)
    assert shapes["w13"] == (896, 2 * inter, 3584)
    assert shapes["w2"] == (896, 3584, inter)
    assert shapes["shared_w13"] == (2 * shared, 7168)


def test_real_rejects_unsupported_tp() -> None:
    with pytest.raises(ValueError, match="tp must be one of"):
        K3LayerConfig.real(3)
    with pytest.raises(ValueError, match="not divisible"):
        K3LayerConfig.tiny(tp=3)


def test_nope_and_one_group_are_required() -> None:
    with pytest.raises(ValueError, match="NoPE"):
        K3LayerConfig.tiny(mla_use_nope=False)
    with pytest.raises(ValueError, match="one expert group"):
        K3LayerConfig.tiny(n_group=2)


def test_random_weights_layout_and_derived_forms(tiny_cfg: K3LayerConfig) -> None:
    w = K3LayerWeights.random(tiny_cfg, seed=7)
    for name, t in w.tensors():
        assert tuple(t.shape) == expected_shapes(tiny_cfg)[name], name
        assert t.dtype == (torch.float32 if name == "e_score_correction_bias" else torch.bfloat16)
    c = tiny_cfg
    kv_b = w.w_kv_b.view(c.local_heads, c.qk_nope_head_dim + c.v_head_dim, c.kv_lora_rank)
    # W_UK_T[h] maps a head's nope query into the latent; W_UV[h] maps the latent output to the head's v
    q = torch.randn(c.qk_nope_head_dim)
    for h in range(c.local_heads):
        assert torch.equal(w.w_uk_t[h], kv_b[h, : c.qk_nope_head_dim])
        assert torch.equal(w.w_uv[h].T, kv_b[h, c.qk_nope_head_dim :])
        torch.testing.assert_close(q @ w.w_uk_t[h].float(), kv_b[h, : c.qk_nope_head_dim].float().T @ q)
    assert w.w_uk_t is w.w_uk_t  # computed once


def test_random_is_seeded_and_norm_weights_are_not_trivial(tiny_cfg: K3LayerConfig) -> None:
    a = K3LayerWeights.random(tiny_cfg, seed=3)
    b = K3LayerWeights.random(tiny_cfg, seed=3)
    c = K3LayerWeights.random(tiny_cfg, seed=4)
    assert all(torch.equal(x, y) for (_, x), (_, y) in zip(a.tensors(), b.tensors(), strict=True))
    assert not torch.equal(a.w13, c.w13)
    assert float((a.input_norm.float() - 1).abs().max()) > 0.05


def test_weights_reject_wrong_shapes(tiny_cfg: K3LayerConfig) -> None:
    w = K3LayerWeights.random(tiny_cfg, seed=0)
    with pytest.raises(ValueError, match="w_o"):
        w.replace(w_o=torch.zeros(3, 3, dtype=torch.bfloat16))
    w2 = w.replace(w_o=w.w_o.clone())
    assert w2.w_o is not w.w_o and w2.cfg == w.cfg
