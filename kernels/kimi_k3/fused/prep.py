"""Load-time weight preparation for the fused path: RMSNorm weights folded into the next projection.

RMSNorm(x) @ W.T = rstd(x) * (x @ (W * gamma).T), with rstd a per-row scalar, so each GEMV that follows a norm
streams a copy of its weight with gamma folded into the columns and applies rstd in its epilogue; the K loop
then feeds raw bf16 activation tiles straight to the dot. Computed once from `K3LayerWeights` (cached through
`weights.derived`, never written back into the shared tensors): input_norm into w_qkv_a_g, q_a_norm into
w_q_b, post_norm into router / latent_down / shared_w13, routed_norm into latent_up. Extra memory at TP1:
~0.55 GB (vs ~60 GB of experts). Call `prepare(weights)` at load time, before any CUDA-graph capture.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from baselines.vllm.kimi_k3.weights import K3LayerWeights


@dataclass(frozen=True)
class FusedWeights:
    w_qkv_a_g: torch.Tensor  # w_qkv_a_g * input_norm
    w_q_b: torch.Tensor  # w_q_b * q_a_norm
    router: torch.Tensor  # router * post_norm
    latent_down: torch.Tensor  # latent_down * post_norm
    shared_w13: torch.Tensor  # shared_w13 * post_norm
    latent_up: torch.Tensor  # latent_up * routed_norm


def _fold(w: torch.Tensor, gamma: torch.Tensor, rows: int = 4096) -> torch.Tensor:
    out = w.new_empty(w.shape)
    g = gamma.float()[None, :]
    for r0 in range(0, w.shape[0], rows):  # bounded fp32 temporaries
        out[r0 : r0 + rows] = (w[r0 : r0 + rows].float() * g).to(w.dtype)
    return out


def _build(w: K3LayerWeights) -> FusedWeights:
    import torch

    with torch.no_grad():
        return FusedWeights(
            w_qkv_a_g=_fold(w.w_qkv_a_g, w.input_norm),
            w_q_b=_fold(w.w_q_b, w.q_a_norm),
            router=_fold(w.router, w.post_norm),
            latent_down=_fold(w.latent_down, w.post_norm),
            shared_w13=_fold(w.shared_w13, w.post_norm),
            latent_up=_fold(w.latent_up, w.routed_norm),
        )


def prepare(weights: K3LayerWeights) -> FusedWeights:
    """The folded weights of `weights`, built on first use and cached on the weights object."""
    out = weights.derived("fused.folded", _build)
    assert isinstance(out, FusedWeights)
    return out
