"""The CUDA-only cheats, on a real GPU: work on a side stream, a persisting-L2 window, an output the graph
does not write, a patched CUDA event timer. Skipped without CUDA (a skip is not a pass)."""

from __future__ import annotations

import ctypes
import os
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from gpu_cases import AffineReluCase, export, fused_affine_relu  # noqa: E402

from fasttrack.evidence.graph_count import (  # noqa: E402
    CUDA_DEV_ATTR_L2_CACHE_SIZE,
    CUDA_DEV_ATTR_PERSISTING_L2_CACHE_MAX_SIZE,
    CudaRuntime,
)
from fasttrack.evidence.timing import (  # noqa: E402
    CaseResult,
    CudaBackend,
    ProtocolSettings,
    TimerGuard,
    run_case,
)

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

POINT = {"gpu": "gpu", "tp": 1, "batch": 1, "context": 1, "dtype": "float32"}
SETTINGS = ProtocolSettings(iterations=6, warmup=1)
CUDA_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1


@pytest.fixture(scope="module")
def backend() -> CudaBackend:
    return CudaBackend()


def measure(case: Any, backend: CudaBackend, guard: TimerGuard | None = None) -> CaseResult:
    return run_case(case, backend, SETTINGS, POINT, guard=guard)


def reasons(result: CaseResult) -> str:
    return " | ".join(result.reasons)


def test_honest_case_is_not_flagged(backend: CudaBackend) -> None:
    result = measure(AffineReluCase(n=1 << 20), backend, TimerGuard().snapshot(backend.guard_targets()))
    assert result.status == "ok", result.reasons


def test_work_forked_to_a_side_stream_and_never_joined_is_caught(backend: CudaBackend) -> None:
    case = AffineReluCase(n=1 << 20)
    side = torch.cuda.Stream()

    def fused_on_side_stream(inputs: Any) -> Any:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            return fused_affine_relu(inputs["x"])  # the caller's stream never waits for it

    case.variants = {"stock": case.stock, "fused": fused_on_side_stream}
    result = measure(case, backend)
    export("cheat_side_stream_unjoined", {"status": result.status, "reasons": result.reasons})
    assert result.status == "rejected"
    assert "variant 'fused'" in reasons(result)


def test_work_on_an_independent_stream_is_caught(backend: CudaBackend) -> None:
    case = AffineReluCase(n=1 << 20)
    other = torch.cuda.Stream()

    def fused_elsewhere(inputs: Any) -> Any:
        with torch.cuda.stream(other):  # not forked from the timed stream at all
            return fused_affine_relu(inputs["x"])

    case.variants = {"stock": case.stock, "fused": fused_elsewhere}
    result = measure(case, backend)
    export("cheat_side_stream_independent", {"status": result.status, "reasons": result.reasons})
    assert result.status == "rejected"
    assert "variant 'fused'" in reasons(result)


def test_an_output_the_graph_does_not_write_is_caught(backend: CudaBackend) -> None:
    case = AffineReluCase(n=1 << 20)
    cached: dict[str, Any] = {}

    def fused_once(inputs: Any) -> Any:
        if "out" not in cached:  # computed during warm-up, then handed back from the cache
            cached["out"] = fused_affine_relu(inputs["x"])
        return cached["out"]

    case.variants = {"stock": case.stock, "fused": fused_once}
    result = measure(case, backend)
    export("cheat_cached_output", {"status": result.status, "reasons": result.reasons,
                                   "graph_nodes": result.variants["fused"].graph_nodes})
    assert result.status == "rejected"
    assert "NaN" in reasons(result)  # the poisoned buffer was never rewritten


class _Window(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int), ("pad", ctypes.c_char * 36)]


def _set_window(rt: CudaRuntime, stream: Any, ptr: int, nbytes: int) -> int:
    """cudaStreamSetAttribute(accessPolicyWindow): persisting hits, streaming misses; nbytes=0 clears it."""
    win = _Window(ptr or None, nbytes, 1.0 if nbytes else 0.0, 2 if nbytes else 0, 1 if nbytes else 0)
    attr = ctypes.c_int(CUDA_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW)
    return int(rt._lib.cudaStreamSetAttribute(ctypes.c_void_p(stream.cuda_stream), attr, ctypes.byref(win)))


def test_a_persisting_l2_window_is_caught(backend: CudaBackend) -> None:
    rt = CudaRuntime.load()
    max_persist = rt.device_attribute(CUDA_DEV_ATTR_PERSISTING_L2_CACHE_MAX_SIZE)
    case = AffineReluCase(n=1 << 20)
    calls: dict[str, Any] = {"window_rc": []}

    def fused_persisting(inputs: Any) -> Any:
        stream = torch.cuda.current_stream()
        if not torch.cuda.is_current_stream_capturing():
            rt.set_persisting_l2_limit(max_persist)  # what pygpubench#49's kernels did
        x = inputs["x"]
        calls["window_rc"].append(_set_window(rt, stream, x.data_ptr(), x.numel() * 4))
        return fused_affine_relu(x)

    case.variants = {"stock": case.stock, "fused": fused_persisting}
    try:
        result = measure(case, backend)
    finally:
        _set_window(rt, torch.cuda.current_stream(), 0, 0)
        rt.set_persisting_l2_limit(0)
        rt.reset_persisting_l2()
    text = reasons(result)
    export("cheat_persisting_l2", {"status": result.status, "reasons": result.reasons,
                                   "max_persisting_bytes": max_persist, "window_rc": calls["window_rc"]})
    assert result.status == "rejected"
    assert "persisting-L2 carve-out" in text or "persisting access-policy window" in text
    assert rt.persisting_l2_limit() == 0


def test_a_patched_cuda_event_timer_is_caught_and_ignored(backend: CudaBackend,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    case = AffineReluCase(n=1 << 22)
    guard = TimerGuard().snapshot(backend.guard_targets())
    original = torch.cuda.Event.elapsed_time
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", original)  # restored after the test

    def fused_patching(inputs: Any) -> Any:
        torch.cuda.Event.elapsed_time = lambda self, end: 1e-6  # type: ignore[method-assign]
        return fused_affine_relu(inputs["x"])

    case.variants = {"stock": case.stock, "fused": fused_patching}
    result = measure(case, backend, guard)
    assert result.status == "rejected"
    assert "torch.cuda.Event.elapsed_time was replaced" in reasons(result)
    assert min(result.variants["fused"].samples_us) > 1.0  # real event times, not the patched 1 ns


@pytest.mark.skipif(not os.environ.get("FASTTRACK_GPU_OUT"), reason="records numbers only for the GPU report")
def test_record_device_facts(backend: CudaBackend) -> None:
    rt = CudaRuntime.load()
    facts = {"runtime_library": rt.path, "l2_bytes": rt.device_attribute(CUDA_DEV_ATTR_L2_CACHE_SIZE),
             "persisting_l2_max_bytes": rt.device_attribute(CUDA_DEV_ATTR_PERSISTING_L2_CACHE_MAX_SIZE),
             "torch": torch.__version__,
             "device": torch.cuda.get_device_name(0)}
    export("device_facts", facts)
    assert facts["l2_bytes"] == backend.l2_bytes
