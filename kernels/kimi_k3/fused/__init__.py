"""Fused Triton path for one Kimi K3 MLA decode layer: `forward(cfg, weights, batch)`, same signature as the
engine's `baselines.vllm.kimi_k3.stock.forward`. Nine kernels per layer at TP 1 on a GPU: seven own launches
with the engine's FlashInfer FA3 MLA decode between a q-pack kernel and the W_UV + gate epilogue (seven
with the own attention kernel, `Plan.ATTN = "own"`; ten kernels and three peer-memory barriers at TP 2:
fused/NOTES.md, "TP 2"), CUDA-graph capturable, no host sync, bit-reproducible.
Design and measurements: fused/NOTES.md."""

from .launch import (
    KERNELS_PER_LAYER,
    KERNELS_PER_LAYER_OWN_ATTENTION,
    KERNELS_PER_LAYER_TP,
    PUBLISHES_PER_LAYER_TP,
    Plan,
    default_attention,
    forward,
    forward_planned,
    forward_with_aux,
    kernels_per_layer,
    make_plan,
    run_planned,
)
from .prep import FusedWeights, prepare

__all__ = [
    "KERNELS_PER_LAYER",
    "KERNELS_PER_LAYER_OWN_ATTENTION",
    "KERNELS_PER_LAYER_TP",
    "PUBLISHES_PER_LAYER_TP",
    "FusedWeights",
    "Plan",
    "default_attention",
    "forward",
    "forward_planned",
    "forward_with_aux",
    "kernels_per_layer",
    "make_plan",
    "prepare",
    "run_planned",
]
