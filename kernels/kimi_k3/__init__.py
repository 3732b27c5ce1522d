"""Kimi K3 MLA decode layer: the reference contribution fasttrack gates.

Modules: `config` (shapes), `weights` (the one weight layout), `layer` (DecodeBatch / DecodeMeta /
KimiK3DecodeLayer), `reference` (fp32 PyTorch), `stock` (the stock-engine kernel sequence, with the engine's
one-kernel ops in `stock_ops`), `fused` (the fused Triton path), `guard` (envelope + fallback), `bench`
(benchmark cases for `fasttrack collect`), `evals` (model-level equivalence eval).
Heavy imports (torch, triton) happen inside the modules that need them; this package import is light.
"""

from baselines.vllm.kimi_k3.config import K3LayerConfig

__all__ = ["K3LayerConfig"]
