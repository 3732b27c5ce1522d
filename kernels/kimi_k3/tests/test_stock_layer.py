"""The stock layer against the fp32 reference at tiny shapes (Triton interpreter on CPU): every batch size
the issue names, contexts from one token to several cache blocks, NaN-poisoned cache padding."""

from __future__ import annotations

import random

import pytest
import torch

from baselines.vllm.kimi_k3 import reference, stock
from baselines.vllm.kimi_k3.config import K3LayerConfig
from baselines.vllm.kimi_k3.weights import K3LayerWeights
from kimi_k3.layer import DecodeBatch, random_batch

pytestmark = pytest.mark.filterwarnings(
    "ignore::RuntimeWarning"
)  # NaN poison inside masked interpreter loads

BATCHES = [1, 2, 3, 4, 8, 16, 31, 32, 63, 64]


def run_and_compare(cfg: K3LayerConfig, w: K3LayerWeights, batch: DecodeBatch) -> reference.Comparison:
    before = batch.kv_cache.clone()
    out, residual, aux = stock.forward_with_aux(cfg, w, batch)
    return reference.compare(
        cfg, w, batch, before, out, residual, topk_ids=aux["topk_ids"], attn_out=aux["attn_out"]
    )


def assert_ok(c: reference.Comparison) -> None:
    assert c.finite, "non-finite output: a poisoned cache entry was read"
    assert c.cache_untouched, "the step wrote cache entries other than each row's new slot"
    assert c.route_mismatch_rows == 0, c.summary()
    assert c.max_ratio() <= 1.0, c.summary()


@pytest.mark.parametrize("bsz", BATCHES)
def test_stock_matches_reference_at_every_batch(
    bsz: int, tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights
) -> None:
    rng = random.Random(bsz)
    # one row at one token, one at several blocks, the rest anywhere in between
    max_ctx = 3 * tiny_cfg.block_size + 5
    lens = [rng.randint(1, max_ctx) for _ in range(bsz)]
    lens[0] = 1
    if bsz > 1:
        lens[1] = max_ctx
    batch = random_batch(tiny_cfg, lens, seed=bsz, poison=True)
    assert_ok(run_and_compare(tiny_cfg, tiny_weights, batch))


@pytest.mark.parametrize("ctx", [1, 2, 3, 4, 5, 15, 16, 17, 32, 33, 64, 100])
def test_stock_matches_reference_across_contexts(
    ctx: int, tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights
) -> None:
    # contexts below the split count (empty splits), at and around block edges, several blocks
    batch = random_batch(tiny_cfg, [ctx, max(1, ctx // 2)], seed=ctx, poison=True)
    assert_ok(run_and_compare(tiny_cfg, tiny_weights, batch))


def test_poison_is_effective(tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights) -> None:
    """The poisoned padding must be able to fail a path: a path that reads one slot too many is caught (the
    slot past a row's length holds the finite 1e4 sentinel: it swamps the softmax, or overflows)."""
    lens = [5, 20]
    batch = random_batch(tiny_cfg, lens, seed=3, poison=True)
    good, _ = stock.forward(tiny_cfg, tiny_weights, random_batch(tiny_cfg, lens, seed=3, poison=True))
    longer = DecodeBatch(
        batch.hidden, batch.residual, batch.kv_cache, batch.block_table, batch.seq_lens + 1, batch.meta
    )
    out, _ = stock.forward(tiny_cfg, tiny_weights, longer)
    assert not torch.isfinite(out).all() or float((out.float() - good.float()).abs().max()) > 1.0


def test_routing_ambiguity_is_reported_not_hidden(
    tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights
) -> None:
    # forcing other experts than the path chose must show up as an error, not be absorbed
    batch = random_batch(tiny_cfg, [9, 3, 40], seed=11, poison=True)
    before = batch.kv_cache.clone()
    out, residual, aux = stock.forward_with_aux(tiny_cfg, tiny_weights, batch)
    wrong = (aux["topk_ids"] + 1) % tiny_cfg.n_routed_experts
    c = reference.compare(tiny_cfg, tiny_weights, batch, before, out, residual, topk_ids=wrong)
    assert c.hidden_err > reference.TOLERANCES["hidden"]
    assert c.route_mismatch_rows + c.ambiguous_rows >= 1


def test_empty_batch_returns_empty(tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights) -> None:
    batch = random_batch(tiny_cfg, [3], seed=0)
    empty = DecodeBatch(
        batch.hidden[:0],
        batch.residual[:0],
        batch.kv_cache,
        batch.block_table[:0],
        batch.seq_lens[:0],
        batch.meta,
    )
    out, residual = stock.forward(tiny_cfg, tiny_weights, empty)
    assert out.shape == (0, tiny_cfg.hidden) and residual.shape == (0, tiny_cfg.hidden)


def test_tp8_shard_shapes_run(tiny_weights: K3LayerWeights) -> None:
    """A per-rank shard (fewer local heads, split intermediates) runs the same code path."""
    cfg = K3LayerConfig.tiny(tp=2)
    w = K3LayerWeights.random(cfg, seed=5)
    batch = random_batch(cfg, [7, 30], seed=5, poison=True)
    assert_ok(run_and_compare(cfg, w, batch))
