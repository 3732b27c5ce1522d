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


# ---------------------------------------------------------------------------------------------------------
# A contributor who edits and re-signs the statement (the signature proves who, not what ran): what the
# rules can still check from the statement and the judged tree.

needs_keygen = pytest.mark.skipif(__import__("shutil").which("ssh-keygen") is None, reason="needs ssh-keygen")


def _fixture(tmp_path: Any) -> Any:
    from bundle_factory import new_fixture

    return new_fixture(tmp_path)


def _bench(fx: Any, batch: int) -> dict[str, Any]:
    out: dict[str, Any] = next(b for b in fx.pred["benchmarks"] if b["point"]["batch"] == batch)
    return out


def _messages(code: str, fx: Any) -> list[str]:
    from bundle_factory import run_rule

    return [f.message for f in run_rule(code, fx.context()) if f.severity.name == "ERROR"]


@needs_keygen
def test_a_claim_against_an_engine_variant_slower_than_stock_is_an_error(tmp_path: Any) -> None:
    # "fused-vs-compile-b1" (1.3x) holds against a compile variant made slower than stock: the claimed
    # speedup is then over a yardstick the engine would not run.
    from bundle_factory import samples

    fx = _fixture(tmp_path)
    assert _messages("FT337", fx) == []
    _bench(fx, 1)["variants"]["compile"]["samples_us"] = samples(300.0)
    fx.write_and_sign()
    assert any("slower than stock" in m and "fused-vs-compile-b1" in m for m in _messages("FT337", fx))


@needs_keygen
def test_an_untimed_point_blamed_on_the_machine_that_collected_it_is_an_error(tmp_path: Any) -> None:
    # The point ran on this very GPU kind (the statement's own environment) and failed; the contributor
    # relabels it "the machine cannot run it" so FT341 lets it go.
    fx = _fixture(tmp_path)
    bench = _bench(fx, 4)
    fx.pred["benchmarks"].remove(bench)
    fx.pred["benchmarks"].append({"point": bench["point"], "not_run": "no case on this machine",
                                  "not_run_by": "machine"})
    fx.write_and_sign()
    assert any("machine" in m and "batch=4" in m for m in _messages("FT341", fx))


@needs_keygen
def test_a_decoy_test_whose_nodeid_ends_with_the_point_test_is_not_the_point_test(tmp_path: Any) -> None:
    fx = _fixture(tmp_path)
    assert _messages("FT340", fx) == []
    tests = fx.pred["kernel_tests"]
    real = [t for t in tests if t["nodeid"].startswith("tests/test_kernel.py::test_matches")]
    assert real
    for t in real:  # the real point test never runs ...
        tests.remove(t)
        # ... and a decoy in another directory, whose nodeid ends with the same text, passes and records 0
        tests.append({**t, "nodeid": "decoy/" + t["nodeid"], "outcome": "passed", "max_error": 0.0})
    fx.write_and_sign()
    assert any("tests/test_kernel.py::test_matches did not run" in m for m in _messages("FT340", fx))


@needs_keygen
def test_an_audit_signed_by_the_statements_own_signer_does_not_count(tmp_path: Any) -> None:
    import hashlib

    from bundle_factory import run_rule

    from fasttrack.evidence.audit import AuditedStatement, AuditPoint, AuditRecord, write_record
    from fasttrack.evidence.bundle import Point
    from fasttrack.evidence.signing import sign_file

    fx = _fixture(tmp_path)
    raw = (fx.bundle / "statement.json").read_bytes()
    audited = AuditedStatement(file="statement.json", sha256=hashlib.sha256(raw).hexdigest())
    rec = AuditRecord(statement=audited,
                      audited_at="2026-12-02T00:00:00Z", median_tolerance=0.1, ratio_tolerance=0.08,
                      points=[AuditPoint(point=Point.model_validate(_bench(fx, 1)["point"]), agreed=True)],
                      agreed=True)
    sign_file(write_record(fx.bundle, rec, "audit-1"), fx.key)  # the contributor's own evidence key
    found = run_rule("FT346", fx.context())
    assert not any(f.severity.name == "INFO" and "agreed" in f.message for f in found), found
    assert any(f.severity.name == "WARNING" and "signed the statement it audits" in f.message for f in found)


# The candidate that rewrites stock's records through gc (formerly a strict xfail here) is closed by the
# engine's own pass: tests/evidence/test_engine_pass.py.


def test_an_aten_kernel_replaced_through_torch_library_is_rejected() -> None:
    # stock's torch.relu dispatches to a slow CPU kernel the contribution registers; its own candidate
    # uses clamp_min. No Python function or class changed: only the dispatcher did.
    import time
    import warnings

    libs: list[Any] = []

    def cheat(baseline: Any, point: Any) -> dict[str, Any]:
        lib = torch.library.Library("aten", "IMPL")
        libs.append(lib)

        def slow_relu(t: Any) -> Any:
            time.sleep(0.002)
            return torch.clamp_min(t, 0)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lib.impl("relu", slow_relu, "CPU")
        s = baseline.state
        return {"fused": lambda inputs: torch.clamp_min(inputs["x"][:, s.lo:s.hi] @ s.weight + s.bias, 0)}

    try:
        _rejected_for(_measure(cheat), "aten::relu", "torch.library")
    finally:
        for lib in libs:
            lib._destroy()


def test_a_torch_function_mode_left_on_is_rejected() -> None:
    from torch.overrides import TorchFunctionMode

    class Slow(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return func(*args, **(kwargs or {}))

    mode = Slow()

    def cheat(baseline: Any, point: Any) -> dict[str, Any]:
        mode.__enter__()
        return _honest(baseline, point)

    try:
        _rejected_for(_measure(cheat), "_len_torch_function_stack")
    finally:
        mode.__exit__(None, None, None)


@needs_keygen
def test_an_eval_matching_a_loose_catch_all_first_is_held_to_every_bound_it_matches(tmp_path: Any) -> None:
    # With overlapping patterns the first match used to win: a catch-all listed before the specific bound
    # let "equiv.a.kl_mean" use 0.9 where its own bound is 0.3.
    fx = _fixture(tmp_path)
    fx.policy_data["evidence"]["eval_bounds"] = {"equiv.*": {"max": 1.0}, "equiv.*.kl_mean": {"max": 0.3}}
    fx.pred["evals"] = [{"name": "equiv.a.kl_mean", "value": 0.5, "threshold": 0.9, "direction": "max"}]
    fx.write_and_sign()
    assert any("above the policy's max 0.3" in m for m in _messages("FT345", fx))


def test_an_engine_side_log_that_grows_is_not_tampering() -> None:
    # The K3 baseline appends to `touched_experts` in every make_inputs: not a change of the yardstick.
    base = type("B", (), {})()
    base.log = [1, 2]
    base.dtype = "float32"
    before = yard.instance_facts(base)
    base.log.append(3)
    assert yard.instance_facts(base) == before
    base.dtype = "bfloat16"
    assert yard.instance_facts(base) != before


def test_extra_engine_variants_added_by_candidates_are_rejected() -> None:
    def cheat(baseline: Any, point: Any) -> dict[str, Any]:
        real = baseline.stock
        baseline.extra_baselines["compile"] = lambda inputs: [real(inputs) for _ in range(20)][-1]
        return _honest(baseline, point)

    _rejected_for(_measure(cheat), "extra_baselines")
