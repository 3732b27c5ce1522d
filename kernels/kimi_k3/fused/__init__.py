"""Fused Triton path for one Kimi K3 MLA decode layer: `forward(cfg, weights, batch)`, same signature as
`kimi_k3.stock.forward`. Seven launches per layer, CUDA-graph capturable, no host sync, bit-reproducible.
Design and measurements: fused/NOTES.md."""

from .launch import (
    KERNELS_PER_LAYER,
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
    "FusedWeights",
    "Plan",
    "forward",
    "forward_planned",
    "forward_with_aux",
    "make_plan",
    "prepare",
    "run_planned",
]
