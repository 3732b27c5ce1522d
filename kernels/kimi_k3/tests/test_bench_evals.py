"""The benchmark case and the equivalence eval, exercised at tiny shapes on CPU (Triton interpreter)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from baselines.vllm.kimi_k3 import reference, stock  # noqa: E402
from baselines.vllm.kimi_k3.case import (  # noqa: E402
    ROUTE_GAP,
    K3BaselineCase,
    baseline_case,
    build_state,
    route_gap,
    weight_bytes,
)
from baselines.vllm.kimi_k3.config import K3LayerConfig  # noqa: E402
from baselines.vllm.kimi_k3.weights import K3LayerWeights  # noqa: E402
from kimi_k3.evals import StackSpec, build_stack, divergence, evaluate, run_stack  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _case(cfg: K3LayerConfig, w: K3LayerWeights, batch: int, context: int) -> K3BaselineCase:
    return K3BaselineCase(build_state(cfg, w, batch, context, "cpu"), batch, context)


def test_baseline_case_contract(tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights) -> None:
    case = _case(tiny_cfg, tiny_weights, 3, 40)
    assert case.dtype == "bfloat16" and case.layers == 1 and "mla_decode" in case.stages
    assert case.extra_baselines == {}  # compile only on a GPU, at COMPILE_POINTS
    a, b = case.make_inputs(1), case.make_inputs(2)
    assert not torch.equal(a["hidden"], b["hidden"])
    case.load_inputs(a)
    assert torch.equal(case.static_inputs["hidden"], a["hidden"])
    pristine = {k: v.clone() for k, v in case.static_inputs.items()}
    out1 = [t.clone() for t in case.stock(case.static_inputs)]
    out2 = case.stock(case.static_inputs)
    assert all(torch.equal(x, y) for x, y in zip(out1, out2, strict=True)), "calls must be independent"
    assert all(torch.equal(case.static_inputs[k], pristine[k]) for k in pristine), "inputs must not change"
    ref = case.oracle(case.static_inputs)
    assert [t.shape for t in ref] == [t.shape for t in out1] and ref[0].dtype == torch.float32
    assert max(float((x.float() - y).abs().max()) for x, y in zip(out1, ref, strict=True)) < 0.1
    # routing near-ties were redrawn: every row has a clear top-k gap under stock's own router logits
    _, _, aux = stock.forward_with_aux(tiny_cfg, tiny_weights, case.state.decode_batch(case.static_inputs))
    gap = route_gap(tiny_cfg, aux["router_logits"], tiny_weights.e_score_correction_bias)
    assert bool((gap >= ROUTE_GAP).all())


def test_candidates_build_on_the_baseline_state(
    tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights
) -> None:
    """The contribution supplies only its variant: the fused layer on the engine's state, same outputs."""
    from kimi_k3.benchmarks import bench

    case = _case(tiny_cfg, tiny_weights, 2, 40)
    cands = bench.candidates(case, {"tp": 1, "batch": 2, "context": 40})
    assert set(cands) == {"fused"}
    out = cands["fused"](case.static_inputs)
    ref = case.oracle(case.static_inputs)
    assert max(float((x.float() - y).abs().max()) for x, y in zip(out, ref, strict=True)) < 0.1


def test_tiny_point_for_the_collector() -> None:
    point = {"gpu": "cpu", "tp": 1, "batch": 2, "context": 64, "dtype": "bfloat16", "tiny": True}
    case = baseline_case(point)
    assert case is not None and case.state.kv_cache.device.type == "cpu"
    assert case.state.attn.backend == "torch"
    assert baseline_case({"gpu": "cpu", "tp": 1, "batch": 2, "context": 64, "dtype": "float16",
                          "tiny": True}) is None


def test_bytes_moved_counts_touched_experts(tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights) -> None:
    case = _case(tiny_cfg, tiny_weights, 2, 33)
    d = case.experts_touched_now()
    assert tiny_cfg.top_k <= d <= min(2 * tiny_cfg.top_k, tiny_cfg.n_routed_experts)
    per_expert = (tiny_weights.w13[0].numel() + tiny_weights.w2[0].numel()) * 2
    assert weight_bytes(tiny_weights, d + 1) - weight_bytes(tiny_weights, d) == per_expert
    kv = 2 * 33 * tiny_cfg.kv_cache_dim * 2
    assert case.bytes_moved() >= weight_bytes(tiny_weights, d) + kv


def test_baseline_case_is_none_without_cuda() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert baseline_case({"gpu": "x", "tp": 1, "batch": 1, "context": 1, "dtype": "bfloat16"}) is None


def test_compile_variant_only_at_the_compile_points(monkeypatch: pytest.MonkeyPatch) -> None:
    """baseline_case asks for the (minutes-per-shape) torch.compile variant at COMPILE_POINTS only."""
    from baselines.vllm.kimi_k3 import case as C

    built: dict[tuple[int, int], bool] = {}

    def fake_case(state: Any, batch: int, context: int, *, include_compile: bool) -> str:
        built[(batch, context)] = include_compile
        return "case"

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(C, "cached_weights", lambda cfg, device: None)
    monkeypatch.setattr(C, "build_state", lambda *a, **k: None)
    monkeypatch.setattr(C, "K3BaselineCase", fake_case)
    for b in (1, 8, 12, 64):
        for c in (4096, 16384, 32768):
            point = {"gpu": "g", "tp": 1, "batch": b, "context": c, "dtype": "bfloat16"}
            assert C.baseline_case(point) == "case"
    with pytest.raises(RuntimeError, match="TP 2 point needs 2 processes"):
        C.baseline_case({"gpu": "g", "tp": 2, "batch": 1, "context": 4096, "dtype": "bfloat16"})
    assert {k for k, v in built.items() if v} == set(C.COMPILE_POINTS)


@pytest.mark.slow
def test_equivalence_eval_machinery() -> None:
    spec = StackSpec(tiny=True, experts=16, layers=2, batch=2, prompt=20, steps=2, vocab=256)
    stack = build_stack(spec, "cpu")
    results = evaluate(stack, stock.forward, stock.forward, label="stock_again")
    by = {r["name"]: r for r in results}
    floor_median = by["equiv.stock_vs_reference.hidden_rel_err_median"]["value"]
    assert 0 < floor_median < 0.1, "bf16 stock sits measurably but not far from the fp32 reference"
    floor = by["equiv.stock_again_vs_stock.hidden_rel_err_max"]["threshold"] / 2  # the max floor
    same = by["equiv.stock_again_vs_stock.hidden_rel_err_max"]
    assert same["value"] == 0.0 and same["value"] <= same["threshold"]

    # a defect (one layer's o_proj 10% off) must exceed the thresholds derived from the floor
    broken_w = {
        id(stack.layers[1]): stack.layers[1].replace(w_o=(stack.layers[1].w_o.float() * 1.1).bfloat16())
    }

    def broken(cfg: K3LayerConfig, w: K3LayerWeights, batch: Any) -> Any:
        return stock.forward(cfg, broken_w.get(id(w), w), batch)

    base = run_stack(stack, stock.forward)
    bad = divergence(base, run_stack(stack, broken))
    assert bad["hidden_rel_err"] > 2 * floor
    assert bad["hidden_rel_err_median"] > 2 * floor_median
    assert bad["kl_mean"] > 0


def test_reference_cache_write_and_forced_routing(
    tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights
) -> None:
    from kimi_k3.layer import random_batch

    batch = random_batch(tiny_cfg, [4, 17], seed=5)
    own = reference.forward_full(tiny_cfg, tiny_weights, batch)
    forced = reference.forward_full(tiny_cfg, tiny_weights, batch, topk_ids=own.topk_ids)
    assert torch.equal(own.hidden, forced.hidden)
    reference.forward_full(tiny_cfg, tiny_weights, batch, write_cache=True)
    blk = int(batch.block_table[1, 16 // tiny_cfg.block_size])
    torch.testing.assert_close(
        batch.kv_cache[blk, 16 % tiny_cfg.block_size].float(), own.new_latent[1], rtol=1e-2, atol=1e-2
    )
