"""Fused Triton path for one Kimi K3 MLA decode layer: `forward(cfg, weights, batch)`, same signature as
`kimi_k3.stock.forward`. Seven launches per layer at TP 1 (ten kernels and
three peer-memory barriers at TP 2: fused/NOTES.md, "TP 2"), CUDA-graph capturable, no host sync,
bit-reproducible.
Design and measurements: fused/NOTES.md."""

from .launch import (
    KERNELS_PER_LAYER,
    KERNELS_PER_LAYER_TP,
    PUBLISHES_PER_LAYER_TP,
    Plan,
    forward,
    forward_planned,
    forward_with_aux,
    make_plan,
    run_planned,
)
from .prep import FusedWeights, prepare

__all__ = [
    "KERNELS_PER_LAYER",
    "KERNELS_PER_LAYER_TP",
    "PUBLISHES_PER_LAYER_TP",
    "FusedWeights",
    "Plan",
    "forward",
    "forward_planned",
    "forward_with_aux",
    "make_plan",
    "prepare",
    "run_planned",
]
