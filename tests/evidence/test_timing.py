"""The timing protocol's bookkeeping on the CPU backend: order, sample counts, fresh inputs, checks."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from fasttrack.evidence.graph_count import CudaCallError, count_nodes  # noqa: E402
from fasttrack.evidence.selftest import MatmulReluCase  # noqa: E402
from fasttrack.evidence.timing import (  # noqa: E402
    CaseRejected,
    CpuBackend,
    ProtocolSettings,
    TimerGuard,
    check_case_shape,
    compare,
    orders_for,
    poison_tree,
    run_case,
    schedule,
    trees_equal,
)

POINT = {"gpu": "cpu", "tp": 1, "batch": 8, "context": 64, "dtype": "float32"}
FAST = ProtocolSettings(iterations=6, warmup=1)


def backend() -> CpuBackend:
    return CpuBackend(flush_bytes=1 << 20)


class Recording(MatmulReluCase):
    """The honest case, remembering the seeds it was asked for and the order variants ran in."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.seeds: list[int] = []
        self.calls: list[str] = []
        self.variants = {"stock": self._rec("stock", self.stock), "fused": self._rec("fused", self.fused)}

    def _rec(self, name: str, fn: Any) -> Any:
        def call(inputs: Any) -> Any:
            self.calls.append(name)
            return fn(inputs)
        return call

    def make_inputs(self, seed: int) -> Any:
        self.seeds.append(seed)
        return super().make_inputs(seed)


def test_schedule_interleaves_in_both_orders() -> None:
    assert orders_for(["stock", "fused"]) == [["stock", "fused"], ["fused", "stock"]]
    assert schedule(["stock", "fused"], 4) == ["stock", "fused", "fused", "stock"] * 2
    seq = schedule(["stock", "compile", "fused"], 2)
    assert seq == ["stock", "compile", "fused", "fused", "compile", "stock"]


def test_honest_case_passes_with_raw_samples_for_every_variant() -> None:
    case = Recording()
    guard = TimerGuard().snapshot()
    result = run_case(case, backend(), FAST, POINT, guard=guard)
    assert result.status == "ok", result.reasons
    assert result.reasons == []
    for name in ("stock", "fused"):
        v = result.variants[name]
        assert len(v.samples_us) == FAST.iterations
        assert all(s > 0 for s in v.samples_us)
        assert "samples_wall_us" not in v.samples()  # CPU: one clock only
        assert v.kernels_per_step is None and v.graph_nodes is None  # not measurable on CPU: not invented
        assert v.bytes_moved == case.bytes_moved(name)
        acc = result.accuracy[name]
        assert acc.ok and acc.checked == FAST.iterations and acc.failures == 0
        assert acc.max_abs_error is not None and acc.max_abs_error <= 1e-4
    assert result.protocol is not None
    assert result.protocol.orders == [["stock", "fused"], ["fused", "stock"]]
    assert result.protocol.backend == "cpu" and not result.protocol.graph_replay
    assert result.protocol.l2_flush_bytes == 1 << 20


def test_every_timed_replay_gets_inputs_from_a_new_seed() -> None:
    case = Recording()
    run_case(case, backend(), FAST, POINT)
    assert len(case.seeds) == len(set(case.seeds))
    # 2 (signal check) + 1 (first load) + warmup per variant + one per timed replay
    assert len(case.seeds) == 2 + 1 + 2 * FAST.warmup + 2 * FAST.iterations


def test_timed_calls_follow_the_interleaved_schedule() -> None:
    case = Recording()
    run_case(case, backend(), ProtocolSettings(iterations=4, warmup=0), POINT)
    # After the signal check (2 stock) and the prepare calls (stock, fused), each timed replay is followed by
    # an eager stock reference on a clone of the same inputs.
    timed = case.calls[4::2]
    refs = case.calls[5::2]
    assert timed == schedule(["stock", "fused"], 4)
    assert set(refs) == {"stock"}


class Noisy(MatmulReluCase):
    """A candidate whose error is above the tolerance: an honest bug, not a cheat."""

    def __init__(self) -> None:
        super().__init__()
        self.variants = {"stock": self.stock, "fused": lambda inp: self.fused(inp) + 1e-2}


def test_inaccurate_candidate_is_recorded_as_failed_accuracy_and_stopped() -> None:
    settings = ProtocolSettings(iterations=10, warmup=0, max_failures_per_variant=3)
    result = run_case(Noisy(), backend(), settings, POINT)
    assert result.status == "rejected"
    acc = result.accuracy["fused"]
    assert not acc.ok and acc.failures == 3 and acc.checked == 3
    assert acc.max_abs_error == pytest.approx(1e-2, rel=1e-3)
    assert "does not match stock" in (acc.reason or "")
    assert len(result.variants["fused"].samples_us) == 3  # stopped after three failed checks
    assert len(result.variants["stock"].samples_us) == 10
    assert result.accuracy["stock"].ok


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda c: setattr(c, "variants", {"fused": c.fused}), "no 'stock' variant"),
    (lambda c: setattr(c, "variants", {"stock": c.stock}), "nothing to compare"),
    (lambda c: setattr(c, "tolerance", (1e-3,)), "tolerance must be (atol, rtol)"),
    (lambda c: setattr(c, "tolerance", (float("nan"), 0.0)), "finite"),
    (lambda c: setattr(c, "layers", 0), "layers must be a positive integer"),
    (lambda c: setattr(c, "variants", {"stock": c.stock, "fused": 3}), "not a named callable"),
])
def test_malformed_cases_are_rejected_with_the_reason(mutate: Any, reason: str) -> None:
    case = MatmulReluCase()
    mutate(case)
    with pytest.raises(CaseRejected, match=None) as info:
        check_case_shape(case)
    assert reason in str(info.value)
    result = run_case(case, backend(), FAST, POINT)
    assert result.status == "rejected" and reason in result.reasons[0]


def test_a_variant_that_raises_is_recorded_not_crashed() -> None:
    case = MatmulReluCase()

    def broken(inputs: Any) -> Any:
        raise RuntimeError("illegal memory access")

    case.variants = {"stock": case.stock, "fused": broken}
    result = run_case(case, backend(), FAST, POINT)
    assert result.status == "rejected"
    assert "could not be prepared: RuntimeError: illegal memory access" in result.variants["fused"].error
    assert result.variants["fused"].samples_us == []
    assert len(result.variants["stock"].samples_us) == FAST.iterations


def test_a_stock_that_cannot_run_rejects_the_case() -> None:
    case = MatmulReluCase()
    calls = {"n": 0}

    def stock_then_break(inputs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > 2:  # runs for the signal check, then breaks
            raise RuntimeError("boom")
        return case.stock(inputs)

    case.variants = {"stock": stock_then_break, "fused": case.fused}
    result = run_case(case, backend(), FAST, POINT)
    assert result.status == "rejected"
    assert any("'stock' could not be prepared" in r for r in result.reasons)


def test_compare_reports_shape_nan_and_tolerance() -> None:
    ref = torch.tensor([1.0, 2.0, 3.0])
    assert compare(ref.clone(), ref, 0.0, 0.0).ok
    near = ref + torch.tensor([0.0, 0.0, 1e-3])
    assert compare(near, ref, 1e-3, 0.0).ok
    assert not compare(near, ref, 5e-4, 0.0).ok
    assert compare(near, ref, 0.0, 1e-3).ok  # 1e-3 <= 1e-3 * 3
    bad = compare(torch.tensor([1.0, float("nan"), 3.0]), ref, 1.0, 1.0)
    assert not bad.ok and "NaN" in (bad.reason or "")
    assert not compare(ref[:2], ref, 1.0, 1.0).ok
    assert not compare((ref, ref), ref, 1.0, 1.0).ok
    both_nan = torch.tensor([float("nan")])
    assert compare(both_nan, both_nan.clone(), 0.0, 0.0).ok  # NaN where stock has NaN too
    assert math.isinf(compare([], ref, 0, 0).max_abs_error)


def test_poison_and_bitwise_equality() -> None:
    tree = {"a": torch.ones(3), "b": [torch.arange(4, dtype=torch.int32)],
            "c": torch.ones(2, dtype=torch.bool)}
    pristine = {"a": tree["a"].clone(), "b": [tree["b"][0].clone()], "c": tree["c"].clone()}
    assert trees_equal(tree, pristine)
    poison_tree(tree)
    assert torch.isnan(tree["a"]).all()
    assert (tree["b"][0] == torch.iinfo(torch.int32).max).all()
    assert not trees_equal(tree, pristine)
    assert trees_equal({"a": tree["a"]}, {"a": tree["a"].clone()})  # NaN equals NaN bitwise here


def test_timer_guard_names_what_was_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    guard = TimerGuard().snapshot()
    assert guard.changed() == []
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    assert guard.changed() == ["time.perf_counter"]


def test_count_nodes_walks_child_graphs_and_flags_persisting_windows() -> None:
    graphs = {1: [10, 11, 12, 13], 2: [20, 21], 3: [30]}
    types = {10: 0, 11: 2, 12: 4, 13: 0, 20: 0, 21: 4, 30: 0}
    children = {12: 2, 21: 3}
    counted = count_nodes(1, graphs.__getitem__, types.__getitem__, children.__getitem__,
                          lambda node: "persisting window" if node == 30 else None)
    assert counted.by_type == {"graph": 2, "kernel": 4, "memset": 1}
    assert counted.kernels == 4
    assert counted.policy_windows == ("persisting window",)


def test_count_nodes_refuses_unbounded_nesting() -> None:
    with pytest.raises(CudaCallError):
        count_nodes(1, lambda g: [g], lambda n: 4, lambda n: n)


def test_settings_need_both_orders() -> None:
    with pytest.raises(ValueError):
        ProtocolSettings(iterations=1)


def test_cpu_flush_buffer_has_a_floor() -> None:
    assert CpuBackend(flush_bytes=10).l2_flush_bytes == 1 << 20
    assert CpuBackend(flush_bytes=3 << 20).l2_flush_bytes == 3 << 20


def test_cpu_backend_refuses_to_time_device_tensors() -> None:
    """perf_counter around asynchronous device work would time the launches only: not a measurement."""
    case = MatmulReluCase()
    case.static_inputs = {"x": torch.empty(8, 64, device="meta")}
    with pytest.raises(CaseRejected, match="cannot time inputs on meta"):
        backend().prepare("stock", case.stock, case.static_inputs)
