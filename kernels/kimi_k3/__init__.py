"""Kimi K3 MLA decode layer: the reference contribution fasttrack gates.

Modules: `layer` (KimiK3DecodeLayer; re-exports the engine's step API), `stock` (the guard's fallback: the
engine baseline's stock layer, re-exported), `fused` (the fused Triton path), `guard` (envelope + fallback),
`bench` (the candidates for `fasttrack collect`), `evals` (model-level equivalence eval). Config, weights,
the step API, the TP group, the stock path and the fp32 oracle are the engine's: `baselines.vllm.kimi_k3`.
Heavy imports (torch, triton) happen inside the modules that need them; this package import is light.
"""

from baselines.vllm.kimi_k3.config import K3LayerConfig

__all__ = ["K3LayerConfig"]
