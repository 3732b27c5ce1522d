"""The CUDA backend of the timing protocol on a real GPU: graphs, L2 flush, persisting-L2 reset, kernel count.

Skipped without CUDA (a skip is not a pass). The case is element-wise so its kernel count is exact: stock is
three torch kernels per layer (mul, add, relu), fused one Triton kernel per layer. With FASTTRACK_GPU_OUT set,
the measured numbers are also written there as JSON.
"""

from __future__ import annotations

import statistics

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from gpu_cases import AffineReluCase, export  # noqa: E402

from fasttrack.evidence.timing import CudaBackend, ProtocolSettings, TimerGuard, run_case  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

POINT = {"gpu": "gpu", "tp": 1, "batch": 1, "context": 1, "dtype": "float32"}


@pytest.fixture(scope="module")
def backend() -> CudaBackend:
    return CudaBackend()


def test_backend_flushes_l2_and_resets_the_persisting_window(backend: CudaBackend) -> None:
    assert backend.l2_bytes > 0
    assert backend.l2_flush_bytes >= 2 * backend.l2_bytes
    assert backend.persisting_l2_reset, backend.notes
    assert backend.before_timed() == []
    assert backend._rt.persisting_l2_limit() == 0


def test_honest_case_timed_through_graphs_with_exact_kernel_counts(backend: CudaBackend) -> None:
    case = AffineReluCase(layers=2)
    guard = TimerGuard().snapshot(backend.guard_targets())
    result = run_case(case, backend, ProtocolSettings(iterations=20, warmup=2), POINT, guard=guard)
    assert result.status == "ok", result.reasons
    stock, fused = result.variants["stock"], result.variants["fused"]
    assert stock.graph_nodes == {"kernel": 6} and stock.kernels_per_step == 3
    assert fused.graph_nodes == {"kernel": 2} and fused.kernels_per_step == 1
    assert len(stock.samples_us) == len(fused.samples_us) == 20
    walls = stock.samples().get("samples_wall_us")
    assert walls is not None and len(walls) == 20
    assert all(a.ok and a.checked == 20 for a in result.accuracy.values())
    med = {k: statistics.median(v.samples_us) for k, v in result.variants.items()}
    # Prediction: stock moves 3x the bytes of fused (6 vs 2 passes over 64 MiB): about 3x slower.
    speedup = med["stock"] / med["fused"]
    gbps = {k: result.variants[k].bytes_moved / (med[k] * 1e-6) / 1e9 for k in med}  # type: ignore[operator]
    export("honest_case", {"median_us": med, "speedup": speedup, "achieved_GBps": gbps,
                           "l2_bytes": backend.l2_bytes, "flush_bytes": backend.l2_flush_bytes,
                           "graph_nodes": {k: v.graph_nodes for k, v in result.variants.items()},
                           "samples_us": {k: v.samples_us for k, v in result.variants.items()},
                           "notes": backend.notes})
    assert 1.5 < speedup < 6.0
    # Timed event durations never exceed the host's wall time around the same replay.
    assert all(d <= w + 1.0 for d, w in zip(stock.samples_us, walls, strict=True))


def test_graph_count_agrees_with_the_profiler(backend: CudaBackend) -> None:
    case = AffineReluCase(n=1 << 20, layers=3)
    case.load_inputs(case.make_inputs(1))
    for name, expected in (("stock", 9), ("fused", 3)):
        prep = backend.prepare(name, case.variants[name], case.static_inputs)
        nodes, problems = backend.kernel_count(prep)
        assert problems == []
        assert nodes == {"kernel": expected}
        assert backend._profiler_count(prep) == {"kernel": expected}
        backend.release(prep)


def test_flush_makes_an_l2_resident_input_slower(backend: CudaBackend) -> None:
    """A 16 MiB input fits in L2: without the flush a replay reads it from L2, with the flush from HBM."""
    case = AffineReluCase(n=1 << 22)
    case.load_inputs(case.make_inputs(3))
    prep = backend.prepare("fused", case.fused, case.static_inputs)
    warm, cold = [], []
    for _ in range(30):
        backend.replay_untimed(prep, case.static_inputs)
        warm.append(backend.timed(prep, case.static_inputs).device_us)
        backend.before_timed()
        cold.append(backend.timed(prep, case.static_inputs).device_us)
    backend.release(prep)
    export("flush_effect", {"warm_median_us": statistics.median(warm),
                            "cold_median_us": statistics.median(cold)})
    assert statistics.median(cold) > statistics.median(warm)
