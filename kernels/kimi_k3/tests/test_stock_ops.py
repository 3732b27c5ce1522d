"""The stock path's one-kernel ops, each against torch on identical inputs (Triton interpreter on CPU)."""

from __future__ import annotations

import importlib

import pytest
import torch

from baselines.vllm.kimi_k3 import reference
from baselines.vllm.kimi_k3 import stock_ops as ops
from baselines.vllm.kimi_k3.config import K3LayerConfig
from kimi_k3.layer import random_batch

moe = importlib.import_module("baselines.vllm.kimi_k3.stock_ops.moe")
mla = importlib.import_module("baselines.vllm.kimi_k3.stock_ops.mla_decode")

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN poison in masked interpreter loads


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def test_triton_runs_here() -> None:
    # The CPU suite must exercise the Triton kernels, not the torch fallbacks.
    from baselines.vllm.kimi_k3.stock_ops._runtime import use_triton

    assert use_triton(torch.zeros(1)) or torch.cuda.is_available()


def test_norms_and_activation() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 96, generator=g).bfloat16()
    r = torch.randn(5, 96, generator=g).bfloat16()
    w = (1 + 0.1 * torch.randn(96, generator=g)).bfloat16()
    y, z = ops.fused_add_rms_norm(x, r, w, 1e-6)
    zf = x.float() + r.float()
    assert _rel(z, zf) < 4e-3
    assert _rel(y, reference.rms_norm(zf, w, 1e-6)) < 4e-3
    assert _rel(ops.rms_norm(x, w, 1e-6), reference.rms_norm(x.float(), w, 1e-6)) < 4e-3
    # q/kv norm reads two column ranges of a wider row
    wq, wk = w[:40], w[40:72]
    qo, ko = ops.q_kv_rms_norm(x, wq, wk, 1e-6)
    assert _rel(qo, reference.rms_norm(x[:, :40].float(), wq, 1e-6)) < 4e-3
    assert _rel(ko, reference.rms_norm(x[:, 40:72].float(), wk, 1e-6)) < 4e-3
    # SiTU over a range that saturates both tanh's
    gu = (torch.randn(5, 96, generator=g) * 30).bfloat16()
    assert _rel(ops.situ_and_mul(gu, 4.0, 25.0), reference.situ_and_mul(gu.float(), 4.0, 25.0)) < 4e-3
    gate = torch.randn(5, 96, generator=g).bfloat16()
    assert (
        _rel(
            ops.gate_sigmoid_mul(x[:, :48], gate[:, 48:]), x[:, :48].float() * gate[:, 48:].float().sigmoid()
        )
        < 4e-3
    )


@pytest.mark.parametrize(("experts", "top_k", "renorm", "scale"), [(16, 4, True, 1.0), (40, 6, False, 2.5)])
def test_grouped_topk_matches_torch(experts: int, top_k: int, renorm: bool, scale: float) -> None:
    g = torch.Generator().manual_seed(experts)
    logits = torch.randn(9, experts, generator=g)
    bias = 0.05 * torch.randn(experts, generator=g)
    w, ids = ops.grouped_topk(logits, bias, top_k, renorm, scale)
    s = logits.sigmoid()
    ref_ids = torch.topk(s + bias, top_k, dim=-1).indices
    assert torch.equal(ids.long(), ref_ids)  # same order: descending biased score
    ref_w = s.gather(1, ref_ids)
    if renorm:
        ref_w = ref_w / ref_w.sum(-1, keepdim=True)
    torch.testing.assert_close(w, ref_w * scale, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("tokens", "experts", "top_k", "block_m"),
    [(1, 16, 4, 16), (7, 16, 4, 16), (64, 16, 4, 16), (13, 896, 16, 16), (33, 24, 5, 32)],
)
def test_moe_align_block_size(tokens: int, experts: int, top_k: int, block_m: int) -> None:
    g = torch.Generator().manual_seed(tokens)
    ids = torch.stack([torch.randperm(experts, generator=g)[:top_k] for _ in range(tokens)]).to(torch.int32)
    sorted_ids, expert_ids, num_post = ops.moe_align_block_size(ids, experts, block_m)
    pairs = ids.numel()
    n = int(num_post[0])
    assert n % block_m == 0 and n <= sorted_ids.numel()
    flat = ids.flatten()
    seen = []
    for blk in range(n // block_m):
        e = int(expert_ids[blk])
        members = sorted_ids[blk * block_m : (blk + 1) * block_m]
        valid = members[members < pairs]
        assert valid.numel() > 0, "no empty blocks inside the padded length"
        assert (flat[valid.long()] == e).all()
        seen.extend(valid.tolist())
    assert sorted(seen) == list(range(pairs)), "every pair exactly once"
    assert (sorted_ids[n:] == pairs).all(), "sentinel beyond the padded length"
    counts = torch.bincount(flat.long(), minlength=experts)
    assert n == int(((counts + block_m - 1) // block_m * block_m).sum())


@pytest.mark.parametrize("tokens", [1, 3, 8])
def test_fused_experts_both_assignments(tokens: int) -> None:
    g = torch.Generator().manual_seed(tokens)
    e, k, lat, inter = 16, 4, 32, 24
    x = torch.randn(tokens, lat, generator=g).bfloat16()
    w13 = (torch.randn(e, 2 * inter, lat, generator=g) / lat**0.5).bfloat16()
    w2 = (torch.randn(e, lat, inter, generator=g) / inter**0.5).bfloat16()
    ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(tokens)]).to(torch.int32)
    tw = torch.rand(tokens, k, generator=g)
    out = ops.fused_experts(x, w13, w2, tw, ids, 4.0, 25.0)
    ref = torch.zeros(tokens, lat)
    for t in range(tokens):
        for j in range(k):
            ex = int(ids[t, j])
            act = reference.situ_and_mul(x[t].float() @ w13[ex].float().T, 4.0, 25.0)
            ref[t] += tw[t, j] * (act @ w2[ex].float().T)
    assert moe.naive_assignment(tokens, k, e) == (tokens == 1)
    assert _rel(out, ref) < 1e-2


@pytest.mark.parametrize("lens", [[1], [2, 1, 3], [16, 17, 33, 5], [64, 1]])
def test_mla_decode_against_torch(lens: list[int]) -> None:
    cfg = K3LayerConfig.tiny()
    batch = random_batch(cfg, lens, seed=len(lens), poison=True)
    # fill each row's new slot (the layer's insert does this) so the poisoned cache is valid up to seq_len
    g = torch.Generator().manual_seed(1)
    for b, s in enumerate(lens):
        blk = int(batch.block_table[b, (s - 1) // cfg.block_size])
        batch.kv_cache[blk, (s - 1) % cfg.block_size] = torch.randn(cfg.kv_cache_dim, generator=g).bfloat16()
    q = torch.randn(len(lens), cfg.local_heads, cfg.kv_cache_dim, generator=g).bfloat16()
    out = ops.mla_decode(q, batch.kv_cache, batch.block_table, batch.seq_lens, cfg.kv_lora_rank, 0.3)
    assert torch.isfinite(out).all(), "read poisoned cache entries"
    for b, s in enumerate(lens):
        ctx = reference.gather_context(cfg, batch, b, s)
        p = torch.softmax((q[b].float() @ ctx.T) * 0.3, -1)
        assert _rel(out[b], p @ ctx[:, : cfg.kv_lora_rank]) < 1e-2
