"""Hostile review of the engine yardstick (CPU, in-process, fast): candidates that try to move the baseline
from inside `candidates(baseline, point)` or from inside a candidate's own calls, and statement edits.

Each test plays the contribution against the real bench-worker point path (`bench_worker.measure_point`)
with the self-test baseline (baselines/selftest) on the CPU backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from collect_toy import REPO, toy_baseline_spec

import fasttrack.evidence.baseline as yard
from fasttrack.evidence import bench_worker, timing

torch = pytest.importorskip("torch")

POINT = {"gpu": "cpu", "tp": 1, "batch": 4, "context": 16, "dtype": "float32"}


def _measure(candidates: Callable[..., Any], point: dict[str, Any] | None = None) -> timing.CaseResult:
    spec = toy_baseline_spec()
    backend = timing.make_backend("cpu", flush_bytes=1 << 20)
    guard = timing.TimerGuard().snapshot(backend.guard_targets())
    caps = {k: yard.Cap(v["atol"], v["rtol"], v["record"]) for k, v in spec["caps"].items()}
    baseline_fn = yard.resolve(spec["case"], REPO)
    yard.import_package_tree(spec["case"].split(":", 1)[0])
    yardstick = yard.YardstickGuard(yard.engine_prefixes(spec["case"])).snapshot()
    settings = timing.ProtocolSettings(iterations=3, warmup=1)
    return bench_worker.measure_point(baseline_fn, candidates, dict(point or POINT), caps, backend, yardstick,
                                      guard, settings, 1)


def _honest(baseline: Any, point: Any) -> dict[str, Any]:
    s = baseline.state

    def fused(inputs: Any) -> Any:
        return torch.relu(inputs["x"][:, s.lo:s.hi] @ s.weight + s.bias)

    return {"fused": fused}


def _rejected_for(result: timing.CaseResult, *words: str) -> None:
    assert result.status == "rejected", result.reasons
    text = " ".join(result.reasons)
    assert all(w in text for w in words), result.reasons


def test_the_honest_candidate_is_measured() -> None:
    result = _measure(_honest)
    assert result.status == "ok", result.reasons
    assert result.variants["stock"].origin == "engine" and result.oracle["fused"].ok


def test_a_stock_rebound_on_the_instance_is_not_what_is_timed() -> None:
    # The contribution gives the baseline *instance* a slow stock (the class is untouched, so the module
    # guard sees nothing) and compose would have timed it as the engine's stock.
    def cheat(baseline: Any, point: Any) -> dict[str, Any]:
        real = baseline.stock

        def slow(inputs: Any) -> Any:
            for _ in range(50):
                real(inputs)
            return real(inputs)

        baseline.stock = slow
        return _honest(baseline, point)

    _rejected_for(_measure(cheat), "baseline.stock", "instance")


def test_a_class_swap_on_the_instance_is_rejected() -> None:
    def cheat(baseline: Any, point: Any) -> dict[str, Any]:
        cls = type(baseline)

        class Slow(cls):  # type: ignore[misc, valid-type]
            def stock(self, inputs: Any) -> Any:
                for _ in range(50):
                    super().stock(inputs)
                return super().stock(inputs)

        baseline.__class__ = Slow
        return _honest(baseline, point)

    _rejected_for(_measure(cheat), "baseline")


def test_a_precomputing_input_loader_is_rejected() -> None:
    # The candidate's work moved into the (untimed) input load: the timed replay returns a buffer the
    # loader filled. Its output is right, so only the yardstick guard can see it.
    def cheat(baseline: Any, point: Any) -> dict[str, Any]:
        s = baseline.state
        real_load = baseline.load_inputs
        box: dict[str, Any] = {}

        def load(fresh: Any) -> None:
            real_load(fresh)
            box["y"] = torch.relu(fresh["x"][:, s.lo:s.hi] @ s.weight + s.bias)

        baseline.load_inputs = load

        def fused(inputs: Any) -> Any:
            if "y" in box and torch.equal(inputs["x"], baseline.static_inputs["x"]):
                return box["y"].clone()
            return torch.relu(inputs["x"][:, s.lo:s.hi] @ s.weight + s.bias)

        return {"fused": fused}

    _rejected_for(_measure(cheat), "baseline.load_inputs")


def test_a_loosened_dtype_is_rejected() -> None:
    # A float32 point relabelled bfloat16 would be checked under the bf16 cap (1000x looser).
    def cheat(baseline: Any, point: Any) -> dict[str, Any]:
        baseline.dtype = "bfloat16"
        return _honest(baseline, point)

    _rejected_for(_measure(cheat), "baseline.dtype")


def test_stock_given_worse_weights_is_rejected() -> None:
    # Same values, a transposed (strided) layout for stock; the candidate keeps a contiguous copy.
    def cheat(baseline: Any, point: Any) -> dict[str, Any]:
        s = baseline.state
        mine = s.weight.clone()
        s.weight = s.weight.t().contiguous().t()

        def fused(inputs: Any) -> Any:
            return torch.relu(inputs["x"][:, s.lo:s.hi] @ mine + s.bias)

        return {"fused": fused}

    _rejected_for(_measure(cheat), "baseline.state.weight")


def test_a_state_method_bound_on_the_instance_is_rejected() -> None:
    def cheat(baseline: Any, point: Any) -> dict[str, Any]:
        s = baseline.state
        real = s.reduce
        s.reduce = lambda y: real(y.clone().clone())
        return _honest(baseline, point)

    _rejected_for(_measure(cheat), "baseline.state.reduce")


def test_a_static_input_swapped_for_another_tensor_is_rejected() -> None:
    def cheat(baseline: Any, point: Any) -> dict[str, Any]:
        baseline.static_inputs["x"] = baseline.static_inputs["x"].clone()
        return _honest(baseline, point)

    _rejected_for(_measure(cheat), "static_inputs")
