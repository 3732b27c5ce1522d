"""What fasttrack's effect trace calls after importing this contribution (`[trace]` in fasttrack.toml).

`run()`: one decode step of the engine's stock layer (the `[fallback] stock_path`) through the guard's
layer object, on tiny CPU shapes (`K3LayerConfig.tiny()`, two rows), checked finite. `meta(point)`: the
guard's argument (`DecodeMeta`) for an envelope point fasttrack builds (gpu, compute_capability, tp, batch,
context, dtype, cuda_graph); the trace asks `[fallback] guard` about points inside and outside the envelope.
"""

from __future__ import annotations

from typing import Any

from .layer import DecodeMeta


def run() -> None:
    import torch

    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from baselines.vllm.kimi_k3.weights import K3LayerWeights

    from .layer import random_batch
    from .stock import forward

    cfg = K3LayerConfig.tiny()
    weights = K3LayerWeights.random(cfg, seed=0)
    batch = random_batch(cfg, [3, 9], seed=0)
    out, residual = forward(cfg, weights, batch)
    finite = bool(torch.isfinite(out).all() and torch.isfinite(residual).all())
    if out.shape != batch.hidden.shape or not finite:
        raise AssertionError(f"stock step on tiny shapes: shape {tuple(out.shape)} or non-finite values")


def meta(point: dict[str, Any]) -> DecodeMeta:
    major, minor = str(point["compute_capability"]).split(".")
    return DecodeMeta(batch=int(point["batch"]), max_context=int(point["context"]), tp=int(point["tp"]),
                      dtype=str(point["dtype"]), graph_mode=point["cuda_graph"],
                      device_capability=(int(major), int(minor)), device_name=str(point["gpu"]))
