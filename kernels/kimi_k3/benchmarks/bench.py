"""The contribution's candidates for `fasttrack collect` (docs/baseline-contract.md, "Candidates").

`candidates(baseline, point) -> {"fused": callable}`: the fused layer built on the engine baseline's state
(`baselines.vllm.kimi_k3.case.K3State`: its config, weights, paged cache, planned MLA decode and TP group).
Everything else a claim is measured against (stock, torch.compile of stock, the fp32 oracle, the inputs and
their route-gap redraw, the byte count, the tolerance) is the engine's, built by the collector from the
policy before this module is imported. The fused variant keeps its own workspace.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from baselines.vllm.kimi_k3.case import cached_weights
from baselines.vllm.kimi_k3.decode import Workspace

__all__ = ["cached_weights", "candidates", "warm_fused_plans"]

_WARMED: set[int] = set()  # TP sizes whose grid plans this process has pre-compiled (`warm_fused_plans`)


def warm_fused_plans(tp: int, timeout: float = 900.0) -> None:
    """Compile the fused kernels of every plan of the envelope grid at `tp` before the first point, once per
    process: `python -m kimi_k3.benchmarks.measure_fused --warm-grid-tp tp` in a subprocess (its pool of
    min(32, cpus) - 1 spawned processes compiles on meta tensors, no GPU memory, and fills Triton's on-disk
    cache, which the real launches then hit; the ranks of one torchrun share it through a file lock, so one
    compiles and the others wait). Without it every rank compiled each plan's ten TP kernels serially inside
    the timed phase (~10-20 s of CPU per plan; the first TP-2 run ran out of its lease). A subprocess, not an
    import: the warm-up swaps a Triton method in its own throw-away processes only. Any failure only costs
    time (a warning; the launches then compile on first use). KIMI_K3_BENCH_WARM=0 turns it off; under
    TRITON_INTERPRET=1 (CPU tests) it does nothing."""
    import subprocess
    import sys
    import warnings

    if tp in _WARMED or os.environ.get("KIMI_K3_BENCH_WARM", "1") == "0":
        return
    if os.environ.get("TRITON_INTERPRET") == "1":  # the interpreter compiles nothing (CPU tests)
        return
    _WARMED.add(tp)
    procs = max(1, min(32, os.cpu_count() or 2) - 1)
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # kernels/
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "kimi_k3.benchmarks.measure_fused", "--warm-grid-tp", str(tp),
           "--procs", str(procs), "--warm-timeout", str(timeout)]
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout + 120)
        last = (r.stdout.strip().splitlines() or [""])[-1]
        if r.returncode != 0 or '"errors": []' not in last:
            warnings.warn(f"fused pre-compile (tp {tp}) failed, compiling on first use: rc={r.returncode} "
                          f"{last[-300:]} {r.stderr[-500:]}", stacklevel=2)
    except Exception as e:  # only costs time
        warnings.warn(f"fused pre-compile (tp {tp}) failed, compiling on first use: {e!r}", stacklevel=2)


def _load_fused() -> Any:
    try:
        from .. import fused
    except ImportError:
        return None
    return getattr(fused, "forward", None)


def candidates(baseline: Any, point: dict[str, Any]) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """The fused variant on `baseline.state`, or nothing where the fused path does not import."""
    fused = _load_fused()
    if fused is None:
        return {}
    state = baseline.state
    if state.kv_cache.is_cuda:
        warm_fused_plans(int(point.get("tp", state.cfg.tp)))
    workspace = Workspace()

    def run(inputs: dict[str, Any]) -> tuple[Any, Any]:
        out: tuple[Any, Any] = fused(state.cfg, state.weights, state.decode_batch(inputs, workspace))
        return out

    return {"fused": run}
