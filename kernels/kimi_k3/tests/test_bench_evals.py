"""The benchmark case and the equivalence eval, exercised at tiny shapes on CPU (Triton interpreter)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from baselines.vllm.kimi_k3 import reference, stock  # noqa: E402
from kimi_k3.bench import K3BenchmarkCase, benchmark_case, weight_bytes  # noqa: E402
from baselines.vllm.kimi_k3.config import K3LayerConfig  # noqa: E402
from kimi_k3.evals import StackSpec, build_stack, divergence, evaluate, run_stack  # noqa: E402
from baselines.vllm.kimi_k3.weights import K3LayerWeights  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_benchmark_case_contract(tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights) -> None:
    from fasttrack.evidence.contract import BenchmarkCase

    case = K3BenchmarkCase(
        tiny_cfg, tiny_weights, batch=3, context=40, device="cpu", include_compile=False, include_fused=False
    )
    assert isinstance(case, BenchmarkCase)
    a, b = case.make_inputs(1), case.make_inputs(2)
    assert not torch.equal(a["hidden"], b["hidden"])
    case.load_inputs(a)
    assert torch.equal(case.static_inputs["hidden"], a["hidden"])
    pristine = {k: v.clone() for k, v in case.static_inputs.items()}
    out1 = [t.clone() for t in case.variants["stock"](case.static_inputs)]
    out2 = case.variants["stock"](case.static_inputs)
    assert all(torch.equal(x, y) for x, y in zip(out1, out2, strict=True)), "calls must be independent"
    assert all(torch.equal(case.static_inputs[k], pristine[k]) for k in pristine), "inputs must not change"
    # routing near-ties were redrawn: every row has a clear top-k gap under stock's own router logits
    _, _, aux = stock.forward_with_aux(tiny_cfg, tiny_weights, case.decode_batch(case.static_inputs))
    from kimi_k3.bench import ROUTE_GAP, _route_gap

    assert bool(
        (_route_gap(tiny_cfg, aux["router_logits"], tiny_weights.e_score_correction_bias) >= ROUTE_GAP).all()
    )


def test_bytes_moved_counts_touched_experts(tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights) -> None:
    case = K3BenchmarkCase(
        tiny_cfg, tiny_weights, batch=2, context=33, device="cpu", include_compile=False, include_fused=False
    )
    d = case.experts_touched_now()
    assert tiny_cfg.top_k <= d <= min(2 * tiny_cfg.top_k, tiny_cfg.n_routed_experts)
    per_expert = (tiny_weights.w13[0].numel() + tiny_weights.w2[0].numel()) * 2
    assert weight_bytes(tiny_weights, d + 1) - weight_bytes(tiny_weights, d) == per_expert
    kv = 2 * 33 * tiny_cfg.kv_cache_dim * 2
    assert case.bytes_moved("stock") >= weight_bytes(tiny_weights, d) + kv
    assert case.bytes_moved("stock") == case.bytes_moved("fused")  # a roofline, not a per-variant count


def test_benchmark_case_is_none_without_cuda() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert benchmark_case({"gpu": "x", "tp": 1, "batch": 1, "context": 1, "dtype": "bfloat16"}) is None


def test_compile_variant_only_at_batch_1_and_64_at_the_largest_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """benchmark_case asks for the (minutes-per-shape) torch.compile variant at two grid points only."""
    from fasttrack.manifest import load_manifest
    from kimi_k3 import bench
    from kimi_k3.guard import MANIFEST_PATH

    built: dict[tuple[int, int], bool] = {}

    def fake_case(cfg: Any, weights: Any, *, batch: int, context: int, include_compile: bool,
                  tp_group: Any = None) -> str:
        built[(batch, context)] = include_compile
        return "case"

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench, "cached_weights", lambda cfg, device, rank=0: None)
    monkeypatch.setattr(bench, "K3BenchmarkCase", fake_case)
    points = load_manifest(MANIFEST_PATH).envelope.points()
    for p in points:
        point = {"gpu": p.gpu, "tp": p.tp, "batch": p.batch, "context": p.context, "dtype": p.dtype}
        if p.tp > 1:  # needs its torchrun processes: without them, a clear error (the worker records it)
            with pytest.raises(RuntimeError, match=f"TP {p.tp} point needs {p.tp} processes"):
                bench.benchmark_case(point)
            continue
        assert bench.benchmark_case(point) == "case"
    assert len(built) == 10
    assert {k for k, v in built.items() if v} == {(1, 32768), (64, 32768)}


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
