"""Every TP rank takes the same guard decision: one rank failing its own check makes all ranks fall back.

Two real processes on gloo (CPU, tiny shapes). The per-call host facts are in the envelope on both ranks;
rank 1's device facts are not (capability 8.0), which it reports at set-up (`agree_across_ranks`, a MIN
all-reduce). Both ranks must then run stock (so no rank waits in a fused collective the other never joins),
with the fallback counted: reason "gpu" on rank 1, "peer_rank" on rank 0. With agreement both take fused.
"""

from __future__ import annotations

from typing import Any

import pytest

from kimi_k3.tests._dist import run_ranks

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _guard_rank(rank: int, world: int, fail_rank: int | None) -> dict[str, Any]:
    import dataclasses

    from prometheus_client import CollectorRegistry

    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from baselines.vllm.kimi_k3.tp import TPGroup, shard_weights
    from baselines.vllm.kimi_k3.weights import K3LayerWeights
    from kimi_k3.guard import ENVELOPE, METRIC_NAME, REASONS, Guard
    from kimi_k3.layer import DecodeMeta, KimiK3DecodeLayer, random_batch

    cfg = K3LayerConfig.tiny()
    shard = shard_weights(K3LayerWeights.random(cfg, seed=5), rank, world)
    reg = CollectorRegistry()
    # the envelope with TP 2 in it, whatever the manifest says today: this tests the agreement, not the bounds
    guard = Guard(envelope=dataclasses.replace(ENVELOPE, tp=frozenset({1, 2})), registry=reg)
    tp = TPGroup.from_env()
    layer = KimiK3DecodeLayer(shard.cfg, shard, guard=guard, tp=tp)
    env = guard.envelope
    meta = DecodeMeta(
        batch=env.batch_min,
        max_context=env.context_min,
        tp=world,
        device_capability=(9, 0),
        device_name=sorted(env.gpu_names)[0],
    )
    device_meta = dataclasses.replace(meta, device_capability=(8, 0)) if rank == fail_rank else meta
    before = layer.last_path
    agreed = layer.agree_across_ranks(device_meta)
    batch = random_batch(shard.cfg, [5, 17, 1], seed=3)
    out, _ = layer(
        batch.hidden, batch.residual, batch.kv_cache, batch.block_table, batch.seq_lens, device_meta
    )
    counts = {r: reg.get_sample_value(METRIC_NAME, {"reason": r}) or 0.0 for r in REASONS}
    return {"agreed": agreed, "path": layer.last_path, "before": before, "counts": counts, "out": out.float()}


def test_one_rank_failing_makes_every_rank_fall_back() -> None:
    r0, r1 = run_ranks(_guard_rank, world=2, fail_rank=1)
    assert (r0["agreed"], r1["agreed"]) == (False, False)
    assert (r0["path"], r1["path"]) == ("stock", "stock")
    assert r0["counts"]["peer_rank"] == 1.0 and sum(r0["counts"].values()) == 1.0, r0["counts"]
    assert r1["counts"]["gpu"] == 1.0 and sum(r1["counts"].values()) == 1.0, r1["counts"]
    assert (r0["out"] == r1["out"]).all()


def test_agreeing_ranks_take_fused_together() -> None:
    r0, r1 = run_ranks(_guard_rank, world=2, fail_rank=None)
    assert (r0["agreed"], r1["agreed"]) == (True, True)
    assert (r0["path"], r1["path"]) == ("fused", "fused")
    assert sum(r0["counts"].values()) == sum(r1["counts"].values()) == 0.0
    assert (r0["out"] == r1["out"]).all()


def test_tp_layer_without_agreement_falls_back() -> None:
    """A TP>1 layer that never ran `agree_across_ranks` does not take the fused path (reason peer_rank)."""
    import dataclasses

    from prometheus_client import CollectorRegistry

    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from baselines.vllm.kimi_k3.tp import TPGroup
    from baselines.vllm.kimi_k3.weights import K3LayerWeights
    from kimi_k3.guard import ENVELOPE, METRIC_NAME, Guard
    from kimi_k3.layer import DecodeMeta, KimiK3DecodeLayer

    cfg = K3LayerConfig.tiny(tp=2)
    reg = CollectorRegistry()
    guard = Guard(envelope=dataclasses.replace(ENVELOPE, tp=frozenset({1, 2})), registry=reg)
    layer = KimiK3DecodeLayer(
        cfg, K3LayerWeights.random(cfg, seed=1), guard=guard, tp=TPGroup(rank=0, world=2)
    )
    env = guard.envelope
    meta = DecodeMeta(
        batch=env.batch_min, max_context=env.context_min, tp=2, device_name=sorted(env.gpu_names)[0]
    )
    decision = guard.check(meta, peers_agree=layer.peers_agree)
    assert decision == (False, "peer_rank")
    assert reg.get_sample_value(METRIC_NAME, {"reason": "peer_rank"}) is None  # check() counts nothing
    guard.decide(meta, peers_agree=layer.peers_agree)
    assert reg.get_sample_value(METRIC_NAME, {"reason": "peer_rank"}) == 1.0
