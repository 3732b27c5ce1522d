"""One deliberately cheating benchmark per documented cheat, and proof that collection catches it.

The cheats are those agent-written kernels used against other harnesses (see shared/research/anchors.md §6:
KernelBench's adversarial tests, kernelbot#501, reference-kernels#162, pygpubench#49, Sakana). Each test
builds the honest `MatmulReluCase`, swaps in a cheating variant, runs fasttrack's protocol on the CPU backend
and asserts the case is rejected with a reason that names the cheat. The CUDA-only cheats (a side stream, a
persisting-L2 window) have real GPU tests in test_anti_gaming_gpu.py; here is their CPU-visible part.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from fasttrack.evidence.selftest import MatmulReluCase  # noqa: E402
from fasttrack.evidence.timing import CaseResult, CpuBackend, ProtocolSettings, TimerGuard, run_case  # noqa: E402

POINT = {"gpu": "cpu", "tp": 1, "batch": 8, "context": 64, "dtype": "float32"}
SETTINGS = ProtocolSettings(iterations=6, warmup=1)


def measure(case: Any, backend: CpuBackend | None = None, guard: TimerGuard | None = None) -> CaseResult:
    backend = backend or CpuBackend(flush_bytes=1 << 20)
    return run_case(case, backend, SETTINGS, POINT, guard=guard)


def assert_caught(result: CaseResult, *needles: str) -> None:
    assert result.status == "rejected"
    text = " | ".join(result.reasons)
    for needle in needles:
        assert needle in text, f"{needle!r} not in reasons: {text}"


def test_the_honest_case_is_not_flagged() -> None:
    result = measure(MatmulReluCase(), guard=TimerGuard().snapshot())
    assert result.status == "ok", result.reasons


# --- outputs reused from the reference run ---------------------------------------------------------------
class ReusesStockOutput(MatmulReluCase):
    """stock stashes its output; fused returns the stash (KernelBench result_reuse; Sakana's exploit)."""

    def __init__(self) -> None:
        super().__init__()
        self.stash: Any = None
        self.variants = {"stock": self._stock_stashing, "fused": self._fused_reusing}

    def _stock_stashing(self, inputs: Any) -> Any:
        out = self.stock(inputs)
        self.stash = out.clone()
        return out

    def _fused_reusing(self, inputs: Any) -> Any:
        return self.stash.clone() if self.stash is not None else self.fused(inputs)


def test_output_reused_from_the_reference_run_is_caught() -> None:
    result = measure(ReusesStockOutput())
    assert_caught(result, "variant 'fused'", "does not match stock on the same inputs")
    assert not result.accuracy["fused"].ok
    assert result.accuracy["stock"].ok


# --- results cached by input pointer ----------------------------------------------------------------------
class PointerCache(MatmulReluCase):
    """fused computes once per input pointer and replays the result (kernelbot#501)."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[int, Any] = {}
        self.variants = {"stock": self.stock, "fused": self._cached}

    def _cached(self, inputs: Any) -> Any:
        key = inputs["x"].data_ptr()
        if key not in self.cache:
            self.cache[key] = self.fused(inputs)
        return self.cache[key]


def test_results_cached_by_input_pointer_are_caught() -> None:
    result = measure(PointerCache())
    assert_caught(result, "variant 'fused'", "NaN")  # the cached tensor is the poisoned previous output
    assert result.accuracy["fused"].failures >= 1


class ContentFingerprintCache(MatmulReluCase):
    """fused keys a cache on a cheap fingerprint of the input and falls back to the last result."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[float, Any] = {}
        self.last: Any = None
        self.variants = {"stock": self.stock, "fused": self._cached}

    def _cached(self, inputs: Any) -> Any:
        key = float(inputs["x"][0, 0])
        if key in self.cache:
            return self.cache[key].clone()
        if self.last is None:
            self.last = self.fused(inputs)
        self.cache[key] = self.last
        return self.last.clone()


def test_results_cached_by_input_content_are_caught() -> None:
    assert_caught(measure(ContentFingerprintCache()), "variant 'fused'", "does not match stock")


# --- inputs mutated so the reference also matches --------------------------------------------------------
class MutatesInputs(MatmulReluCase):
    """fused zeroes its input: if the reference ran on the same buffer afterwards it would 'match'."""

    def __init__(self) -> None:
        super().__init__()
        self.variants = {"stock": self.stock, "fused": self._zeroing}

    def _zeroing(self, inputs: Any) -> Any:
        inputs["x"].zero_()
        return self.fused(inputs)


def test_inputs_mutated_so_the_reference_matches_are_caught() -> None:
    result = measure(MutatesInputs())
    assert_caught(result, "variant 'fused'", "mutated its inputs")


# --- constant outputs that match one fixed input ----------------------------------------------------------
class ConstantOutput(MatmulReluCase):
    """fused returns the answer for one input (Sakana's memset of a constant that matched the test)."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = self.stock(self.make_inputs(7))
        self.variants = {"stock": self.stock, "fused": lambda _inputs: self.answer.clone()}


def test_constant_output_matching_one_fixed_input_is_caught() -> None:
    assert_caught(measure(ConstantOutput()), "variant 'fused'", "does not match stock")


class FixedInputs(MatmulReluCase):
    """The case itself ignores the seed: every 'fresh' input is the same, so a constant would pass."""

    def make_inputs(self, seed: int) -> Any:
        return super().make_inputs(7)


def test_inputs_that_ignore_the_seed_are_rejected() -> None:
    assert_caught(measure(FixedInputs()), "identical inputs for two different seeds")


class LoadDoesNothing(MatmulReluCase):
    def load_inputs(self, fresh: Any) -> None:
        return None


def test_a_load_that_does_not_load_is_rejected() -> None:
    assert_caught(measure(LoadDoesNothing()), "load_inputs did not copy the fresh inputs")


class ConstantStock(MatmulReluCase):
    """A stock path whose output does not depend on its input (METR's low-signal filter)."""

    def __init__(self) -> None:
        super().__init__()
        self.variants = {"stock": lambda inp: torch.relu(self.bias).expand(self.m, self.n).clone(),
                         "fused": lambda inp: torch.relu(self.bias).expand(self.m, self.n).clone()}


def test_a_case_that_cannot_tell_right_from_constant_is_rejected() -> None:
    assert_caught(measure(ConstantStock()), "stock's output is the same for two different inputs")


# --- timers monkeypatched ----------------------------------------------------------------------------------
class PatchesTimer(MatmulReluCase):
    """fused replaces time.perf_counter_ns with a clock that barely moves (reference-kernels#162)."""

    def __init__(self) -> None:
        super().__init__()
        self.variants = {"stock": self.stock, "fused": self._patching}

    def _patching(self, inputs: Any) -> Any:
        frozen = time.perf_counter_ns()
        time.perf_counter_ns = lambda: frozen
        return self.fused(inputs)


def test_timer_monkeypatched_during_the_run_is_caught_and_does_not_fool_the_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "perf_counter_ns", time.perf_counter_ns)  # restored after the test
    backend = CpuBackend(flush_bytes=1 << 20)
    guard = TimerGuard().snapshot(backend.guard_targets())
    result = measure(PatchesTimer(), backend, guard)
    assert_caught(result, "time.perf_counter_ns was replaced while contribution code ran")
    # The protocol timed with its own saved clock: the samples are real, not the frozen clock's zeros.
    assert all(s > 0 for s in result.variants["fused"].samples_us)


def test_timer_monkeypatched_at_import_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    import fasttrack.evidence.timing as timing

    backend = CpuBackend(flush_bytes=1 << 20)
    guard = TimerGuard().snapshot(backend.guard_targets())
    # What a contribution module could do when it is imported, after the guard's snapshot:
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    monkeypatch.setattr(timing, "_PERF_NS", lambda: 0)
    result = measure(MatmulReluCase(), backend, guard)
    assert_caught(result, "time.perf_counter was replaced", "fasttrack.evidence.timing._PERF_NS was replaced")
    assert all(s > 0 for s in result.variants["fused"].samples_us)


# --- work moved off the timed path (CPU-visible part of the side-stream cheat) ---------------------------
class BackgroundThread(MatmulReluCase):
    """fused returns an empty buffer at once and fills it from a thread the timer does not wait for."""

    def __init__(self) -> None:
        super().__init__()
        self.variants = {"stock": self.stock, "fused": self._deferred}

    def _deferred(self, inputs: Any) -> Any:
        out = torch.empty(self.m, self.n)
        x = inputs["x"].clone()
        gate = threading.Event()

        def work() -> None:
            gate.wait(0.05)
            out.copy_(self.fused({"x": x}))

        threading.Thread(target=work, daemon=True).start()
        return out


def test_work_moved_to_a_thread_the_timer_does_not_wait_for_is_caught() -> None:
    assert_caught(measure(BackgroundThread()), "left 1 thread(s) running after it returned")


class LazyTensor(torch.Tensor):
    """A tensor subclass standing for a lazy output that computes when read (reference-kernels#161)."""


def test_lazy_tensor_subclass_outputs_are_caught() -> None:
    case = MatmulReluCase()
    case.variants = {"stock": case.stock, "fused": lambda inp: case.fused(inp).as_subclass(LazyTensor)}
    assert_caught(measure(case), "returned a tensor subclass (LazyTensor)")


# --- persisting-L2 window (CPU-visible part: the protocol turns a raised carve-out into a rejection) -----
class CarveOutBackend(CpuBackend):
    """The CPU backend plus a stand-in for the device's persisting-L2 limit, checked like the CUDA backend."""

    def __init__(self) -> None:
        super().__init__(flush_bytes=1 << 20)
        self.persisting_limit = 0

    def before_timed(self) -> list[str]:
        out = super().before_timed()
        if self.persisting_limit:
            limit = self.persisting_limit
            out.append(f"the persisting-L2 carve-out was raised to {limit} bytes during the run")
            self.persisting_limit = 0
        return out


def test_a_raised_persisting_l2_carve_out_rejects_the_case() -> None:
    backend = CarveOutBackend()
    case = MatmulReluCase()

    def fused_raising_carveout(inputs: Any) -> Any:
        backend.persisting_limit = 30 << 20  # what cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize) does
        return case.fused(inputs)

    case.variants = {"stock": case.stock, "fused": fused_raising_carveout}
    assert_caught(measure(case, backend), "persisting-L2 carve-out was raised to 31457280 bytes")
