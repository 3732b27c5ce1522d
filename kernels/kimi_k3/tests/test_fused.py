"""The fused Triton path at tiny shapes (Triton interpreter on CPU; natively on a GPU box).

- the whole layer against `reference.forward` at every batch the issue names, rows from 1 token to several
  cache blocks, NaN-poisoned cache padding, each row's new slot checked and the rest of the cache untouched;
- the same through plans that force every multi-block code path (split-K partials with the last-arriver
  sum, several KV splits including empty ones, many column blocks, token chunks, several CTAs per expert);
- each of the seven kernels against a plain fp32 torch computation fed with the fused path's own inputs to
  that kernel (so a kernel's error is not hidden by, or blamed on, the kernels before it).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from baselines.vllm.kimi_k3 import reference
from baselines.vllm.kimi_k3.config import K3LayerConfig
from baselines.vllm.kimi_k3.weights import K3LayerWeights
from kimi_k3 import fused
from kimi_k3.layer import DecodeBatch, Workspace, random_batch

pytestmark = pytest.mark.filterwarnings(
    "ignore::RuntimeWarning"
)  # NaN poison inside masked interpreter loads

BATCHES = [1, 2, 3, 4, 8, 16, 31, 32, 63, 64]

# Plan overrides that put every multi-block path to work at tiny shapes.
SMALL_TILES: dict[str, Any] = dict(
    A_BN=16,
    A_BK=32,
    XR=2,
    QB_BK=16,
    BLOCK_N=16,
    S=3,
    O_BN=16,
    O_BK=32,
    O_KS=2,
    F_BN=16,
    F_BK=32,
    U_BN=16,
    U_BK=16,
    U_P=3,
    D_BN=16,
    D_BK=16,
    D_P=2,
    T_BN=16,
    T_BK=16,
    RB=4,
    KVR=2,
    TB=2,
    BT=2,
)


def _lens(bsz: int, cfg: K3LayerConfig, seed: int) -> list[int]:
    rng = random.Random(seed)
    most = 5 * cfg.block_size  # several blocks
    lens = [rng.randint(1, most) for _ in range(bsz)]
    lens[0] = 1
    if bsz > 1:
        lens[1] = most
    return lens


def _batch(cfg: K3LayerConfig, lens: list[int], seed: int) -> DecodeBatch:
    b = random_batch(cfg, lens, seed=seed, poison=True)
    b.workspace = Workspace()
    return b


def _run(
    cfg: K3LayerConfig, w: K3LayerWeights, batch: DecodeBatch, **override: Any
) -> tuple[reference.Comparison, dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    before = batch.kv_cache.clone()
    plan = fused.make_plan(cfg, batch.batch, batch.meta.max_context, gpu=False, **override)
    out, resid, aux = fused.run_planned(cfg, w, batch, plan)
    c = reference.compare(cfg, w, batch, before, out, resid, topk_ids=aux["topk_ids"])
    return c, aux, out, resid


def _assert_ok(c: reference.Comparison) -> None:
    assert c.finite, "non-finite output: a poisoned cache entry was read"
    assert c.cache_untouched, "the step wrote cache entries other than each row's new slot"
    assert c.route_mismatch_rows == 0, c.summary()
    assert c.max_ratio() <= 1.0, c.summary()


@pytest.mark.parametrize("bsz", BATCHES)
def test_fused_matches_reference_at_every_batch(
    bsz: int, tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights
) -> None:
    batch = _batch(tiny_cfg, _lens(bsz, tiny_cfg, seed=bsz), seed=bsz)
    c, aux, _, _ = _run(tiny_cfg, tiny_weights, batch)
    _assert_ok(c)
    # the touched-expert list covers exactly the experts the rows chose
    n = int(aux["ctr"][17])
    assert sorted(aux["slot_exp"][:n].tolist()) == sorted(set(aux["topk_ids"].flatten().tolist()))


@pytest.mark.parametrize("bsz", [2, 5, 17])
def test_fused_multiblock_paths(bsz: int, tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights) -> None:
    lens = _lens(bsz, tiny_cfg, seed=100 + bsz)
    batch = _batch(tiny_cfg, lens, seed=100 + bsz)
    c, _, out, resid = _run(tiny_cfg, tiny_weights, batch, **SMALL_TILES)
    _assert_ok(c)
    # the default (whole-matrix) plan computes the same function
    again = _batch(tiny_cfg, lens, seed=100 + bsz)
    _, _, out2, resid2 = _run(tiny_cfg, tiny_weights, again)
    assert torch.allclose(out.float(), out2.float(), rtol=2e-2, atol=2e-2)
    assert torch.allclose(resid.float(), resid2.float(), rtol=2e-2, atol=2e-2)


# per-kernel GEMV modes against the plan-wide one (the B1 GPU plan mixes FMA and tensor-core tiles)
MIXED_MODES: dict[str, Any] = dict(A_MODE=1, QB_MODE=1, O_MODE=1, F_MODE=1, T_MODE=1, X_MODE=1, BT=16)


@pytest.mark.parametrize("bsz", [1, 2])
def test_fused_mixed_kernel_modes(bsz: int, tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights) -> None:
    lens = _lens(bsz, tiny_cfg, seed=300 + bsz)
    batch = _batch(tiny_cfg, lens, seed=300 + bsz)
    mixed = {**SMALL_TILES, **MIXED_MODES}
    plan = fused.make_plan(tiny_cfg, bsz, max(lens), gpu=False, **mixed)
    assert plan.MODE == 0 and plan.mode("a") == 1 and plan.bb("a") == 16 and plan.bb("qb") == 16
    c, _, out, resid = _run(tiny_cfg, tiny_weights, batch, **mixed)
    _assert_ok(c)
    again = _batch(tiny_cfg, lens, seed=300 + bsz)
    _, _, out2, resid2 = _run(tiny_cfg, tiny_weights, again, **SMALL_TILES)
    assert torch.allclose(out.float(), out2.float(), rtol=2e-2, atol=2e-2)
    assert torch.allclose(resid.float(), resid2.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("splits", [7, 16])
def test_fused_many_kv_splits(splits: int, tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights) -> None:
    """More splits than a row has tiles (empty splits) and the merge's split-vectorised path (S > 4)."""
    batch = _batch(tiny_cfg, [80, 1, 33], seed=splits)
    c, _, _, _ = _run(tiny_cfg, tiny_weights, batch, BLOCK_N=16, S=splits, MB=16)
    _assert_ok(c)


def test_fused_tp_shard_shapes(tiny_weights: K3LayerWeights) -> None:
    """Per-rank shard shapes (fewer local heads, a split intermediate) at tiny size."""
    cfg = K3LayerConfig.tiny(tp=4)
    w = K3LayerWeights.random(cfg, seed=7)
    batch = _batch(cfg, [7, 30, 1], seed=5)
    c, _, _, _ = _run(cfg, w, batch)
    _assert_ok(c)


def test_fused_empty_batch(tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights) -> None:
    batch = _batch(tiny_cfg, [3], seed=1)
    empty = DecodeBatch(
        batch.hidden[:0],
        batch.residual[:0],
        batch.kv_cache,
        batch.block_table[:0],
        batch.seq_lens[:0],
        batch.meta,
    )
    out, resid = fused.forward(tiny_cfg, tiny_weights, empty)
    assert out.shape == (0, tiny_cfg.hidden) and resid.shape == (0, tiny_cfg.hidden)


def _rms(x: torch.Tensor, g: torch.Tensor, eps: float) -> torch.Tensor:
    return reference.rms_norm(x, g, eps)


def test_each_kernel_against_torch(tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights) -> None:
    """Every kernel's output against fp32 torch on that kernel's own (fused) inputs. SMALL_TILES so the
    split-K and multi-split paths are the ones checked."""
    cfg, w = tiny_cfg, tiny_weights
    eps = cfg.rms_norm_eps
    lens = [1, 40, 17, 80, 3]
    batch = _batch(cfg, lens, seed=21)
    cache0 = batch.kv_cache.clone()
    plan = fused.make_plan(cfg, len(lens), max(lens), gpu=False, **SMALL_TILES)
    out, resid_out, a = fused.run_planned(cfg, w, batch, plan)
    f = torch.float32
    B, H, NH = len(lens), cfg.hidden, cfg.local_heads
    QL, KL, DN, DR, DV = (
        cfg.q_lora_rank,
        cfg.kv_lora_rank,
        cfg.qk_nope_head_dim,
        cfg.qk_rope_head_dim,
        cfg.v_head_dim,
    )

    def rel(x: torch.Tensor, y: torch.Tensor) -> float:
        return float((x.float() - y.float()).norm() / y.float().norm().clamp_min(1e-30))

    # 1 qkv_a: h + r and its sum of squares; GEMV on raw h, r against norm-folded weights (bf16 out);
    #   per-block sums of squares of the q_a columns
    res1 = batch.hidden.float() + batch.residual.float()
    assert torch.equal(a["resid1"], res1)
    assert rel(a["ss_in"], res1.pow(2).sum(-1)) < 1e-5
    rstd = torch.rsqrt(a["ss_in"] / H + eps)
    qkvg = a["raw"].float() * rstd[:, None]
    ref_qkvg = _rms(res1, w.input_norm, eps) @ w.w_qkv_a_g.to(f).T
    assert rel(qkvg, ref_qkvg) < 1e-2
    assert rel(a["ssq"].sum(0), a["raw"][:, :QL].float().pow(2).sum(-1)) < 1e-5

    # 2 q_b: q_a norm + q_b + absorbed W_UK; kv_a norm + cache write
    scale = cfg.softmax_scale * 1.4426950408889634
    q_c = _rms(qkvg[:, :QL], w.q_a_norm, eps)
    q = (q_c @ w.w_q_b.to(f).T).view(B, NH, DN + DR)
    ql = torch.einsum("bhn,hnl->bhl", q[..., :DN], w.w_uk_t.to(f)) * scale
    assert rel(a["ql_part"].sum(0), ql) < 1e-2
    assert rel(a["qpe"], q[..., DN:] * scale) < 1e-2
    kv_new = torch.cat([_rms(qkvg[:, QL : QL + KL], w.kv_a_norm, eps), qkvg[:, QL + KL : QL + KL + DR]], -1)
    for b, L in enumerate(lens):
        blk = int(batch.block_table[b, (L - 1) // cfg.block_size])
        assert rel(batch.kv_cache[blk, (L - 1) % cfg.block_size], kv_new[b]) < 1e-2

    # 3 attention (split-KV, log2 domain) + merge + W_UV + output gate, from the fused q and the cache
    qlf, qpef = a["ql_part"].sum(0), a["qpe"]
    att = torch.empty(B, NH * DV)
    for b, L in enumerate(lens):
        nb = (L + cfg.block_size - 1) // cfg.block_size
        ctx = batch.kv_cache[batch.block_table[b, :nb].long()].reshape(-1, KL + DR)[:L].float()
        s = qlf[b].bfloat16().float() @ ctx[:, :KL].T + qpef[b].bfloat16().float() @ ctx[:, KL:].T
        o = torch.softmax(s * 0.6931471805599453, -1) @ ctx[:, :KL]
        v = torch.einsum("hl,hlv->hv", o, w.w_uv.to(f))
        gate = qkvg[b, cfg.qkv_a_rows :].view(NH, DV)
        att[b] = (v * torch.sigmoid(gate)).reshape(-1)
    assert rel(a["attn_out"], att) < 1e-2

    # 4 o_proj + residual (split-K partials summed by the last arriver)
    ref_resid = a["attn_out"].float() @ w.w_o.to(f).T + a["resid1"]
    assert rel(resid_out, ref_resid) < 1e-2
    assert rel(a["oss"].sum(0), resid_out.float().pow(2).sum(-1)) < 1e-5

    # 5 front: post norm folded into router / latent down / shared w13 + SiTU; top-k; expert list
    x2 = _rms(resid_out.float(), w.post_norm, eps)
    assert rel(a["logits"], x2 @ w.router.to(f).T) < 1e-2
    assert rel(a["lat"], x2 @ w.latent_down.to(f).T) < 1e-2
    sh_ref = reference.situ_and_mul(x2 @ w.shared_w13.to(f).T, cfg.situ_beta, cfg.situ_linear_beta)
    assert rel(a["sh"], sh_ref) < 1e-2
    ids, wts, _ = reference.route(cfg, a["logits"], w.e_score_correction_bias)
    assert torch.equal(a["topk_ids"].long(), ids)
    assert rel(a["topk_weights"], wts) < 1e-5
    n = int(a["ctr"][17])
    slots = a["slot_exp"][:n].tolist()
    assert slots == sorted(set(ids.flatten().tolist()))
    pairs = a["sorted_pair"][: B * cfg.top_k]
    assert sorted(pairs.tolist()) == list(range(B * cfg.top_k))  # every (token, k) pair exactly once
    for s_i, e in enumerate(slots):
        off, cnt = int(a["slot_off"][s_i]), int(a["slot_cnt"][s_i])
        for p in pairs[off : off + cnt].tolist():
            assert int(ids.flatten()[p]) == e
            assert int(a["sorted_tok"][off + pairs[off : off + cnt].tolist().index(p)]) == p // cfg.top_k

    # 6 expert w13 + SiTU per pair (rows in sorted-pair order)
    latf = a["lat"].float()
    for s_i, e in enumerate(slots):
        off, cnt = int(a["slot_off"][s_i]), int(a["slot_cnt"][s_i])
        toks = a["sorted_tok"][off : off + cnt].long()
        h = reference.situ_and_mul(latf[toks] @ w.w13[e].to(f).T, cfg.situ_beta, cfg.situ_linear_beta)
        assert rel(a["act"][off : off + cnt], h) < 1e-2

    # 7 expert w2 x weight, per-token k-ordered sum; tail: routed norm + latent_up + shared w2
    lat_ref = torch.zeros(B, cfg.latent)
    for s_i, e in enumerate(slots):
        off, cnt = int(a["slot_off"][s_i]), int(a["slot_cnt"][s_i])
        prs = a["sorted_pair"][off : off + cnt].long()
        y = a["act"][off : off + cnt].float() @ w.w2[e].to(f).T
        lat_ref.index_add_(0, prs // cfg.top_k, y * a["topk_weights"].flatten()[prs][:, None])
    assert rel(a["latent"], lat_ref) < 1e-2
    assert rel(a["lss"].sum(0), a["latent"].float().pow(2).sum(-1)) < 1e-5
    hid = (
        _rms(a["latent"].float(), w.routed_norm, eps) @ w.latent_up.to(f).T
        + a["sh"].float() @ w.shared_w2.to(f).T
    )
    assert rel(out, hid) < 1e-2
    assert torch.isfinite(out).all()
    del cache0


def test_plans_for_the_envelope_are_valid() -> None:
    """Host-only: every envelope batch at real TP1/TP8 shapes gets a plan the kernels accept."""
    from kimi_k3.fused.launch import _check_plan

    for tp in (1, 8):
        cfg = K3LayerConfig.real(tp=tp)
        for bsz in BATCHES:
            for ctx in (1, 4096, 32768):
                p = fused.make_plan(cfg, bsz, ctx)
                _check_plan(cfg, p)
                assert p.S >= 1 and bsz <= p.BB
                assert (p.MODE == 0) == (bsz <= 2)
                if tp == 8:
                    assert cfg.local_heads <= p.BH  # all local heads in one attention CTA


@pytest.mark.parametrize("bsz", [1, 3, 17])
def test_fused_with_engine_attention(bsz: int, tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights) -> None:
    """ATTN="flashinfer": the q-pack kernel, the engine's MLA decode (torch reference attention on CPU,
    FlashInfer's FA3 MLA on a GPU) and the merge-only W_UV + gate epilogue, against the fp32 reference."""
    batch = _batch(tiny_cfg, _lens(bsz, tiny_cfg, seed=200 + bsz), seed=200 + bsz)
    c, aux, out, resid = _run(tiny_cfg, tiny_weights, batch, ATTN="flashinfer")
    _assert_ok(c)
    assert aux["opart"].shape == (bsz, tiny_cfg.local_heads, tiny_cfg.kv_lora_rank)
    # the epilogue split over value columns (M_VC = 8: two programs per head) gives the same bits
    again = _batch(tiny_cfg, _lens(bsz, tiny_cfg, seed=200 + bsz), seed=200 + bsz)
    c2, _, out2, resid2 = _run(tiny_cfg, tiny_weights, again, ATTN="flashinfer", M_VC=8)
    _assert_ok(c2)
    assert torch.equal(out, out2) and torch.equal(resid, resid2)
    # the query packed by q_b_kernel's last CTA per head (QPACK, the default) = attn_pack_kernel's bits
    third = _batch(tiny_cfg, _lens(bsz, tiny_cfg, seed=200 + bsz), seed=200 + bsz)
    c3, aux3, out3, resid3 = _run(tiny_cfg, tiny_weights, third, ATTN="flashinfer", QPACK=False)
    _assert_ok(c3)
    assert torch.equal(aux["lse"], aux3["lse"])  # the packed query buffer
    assert torch.equal(out, out3) and torch.equal(resid, resid3)
    # the W_UV + gate epilogue folded into o_proj's launch (OMERGE=True) = in its own launch (the default)
    fourth = _batch(tiny_cfg, _lens(bsz, tiny_cfg, seed=200 + bsz), seed=200 + bsz)
    c4, aux4, out4, resid4 = _run(tiny_cfg, tiny_weights, fourth, ATTN="flashinfer", OMERGE=True, QPACK=False)
    _assert_ok(c4)
    assert torch.equal(aux["attn_out"], aux4["attn_out"])
    assert torch.equal(out, out4) and torch.equal(resid, resid4)
    # the folded epilogue with several value-column programs per head and split-K o_proj programs
    fifth = _batch(tiny_cfg, _lens(bsz, tiny_cfg, seed=200 + bsz), seed=200 + bsz)
    c5, _, _, _ = _run(tiny_cfg, tiny_weights, fifth, ATTN="flashinfer", M_VC=8, OMERGE=True, **SMALL_TILES)
    _assert_ok(c5)


# the B1 trial plan fields of docs/results/kimi_k3-r21 (router rows per moe_front CTA; the tail's latent_up
# L2 prefetch is inline PTX, which the interpreter does not run, so only its plan check is tested here)
@pytest.mark.parametrize("bsz", [1, 3])
def test_fused_router_row_blocks(bsz: int, tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights) -> None:
    lens = _lens(bsz, tiny_cfg, seed=400 + bsz)
    tiles = {**SMALL_TILES, "F_BN": 32}
    batch = _batch(tiny_cfg, lens, seed=400 + bsz)
    c, aux, out, resid = _run(tiny_cfg, tiny_weights, batch, F_RBN=16, **tiles)
    _assert_ok(c)
    n = int(aux["ctr"][17])
    assert sorted(aux["slot_exp"][:n].tolist()) == sorted(set(aux["topk_ids"].flatten().tolist()))
    _, _, out2, resid2 = _run(tiny_cfg, tiny_weights, _batch(tiny_cfg, lens, seed=400 + bsz), **tiles)
    assert torch.allclose(out.float(), out2.float(), rtol=2e-2, atol=2e-2)
    assert torch.equal(resid, resid2)  # moe_front does not touch the residual


@pytest.mark.parametrize(
    "bad", [dict(F_RBN=8), dict(F_RBN=24), dict(T_PF=64), dict(T_PF=3000), dict(T_SLEEP=-1)]
)
def test_trial_plan_fields_are_checked(bad: dict[str, int], tiny_cfg: K3LayerConfig,
                                       tiny_weights: K3LayerWeights) -> None:
    batch = _batch(tiny_cfg, _lens(1, tiny_cfg, seed=5), seed=5)
    with pytest.raises(ValueError, match=r"F_RBN|T_PF|T_SLEEP"):
        _run(tiny_cfg, tiny_weights, batch, **bad)
