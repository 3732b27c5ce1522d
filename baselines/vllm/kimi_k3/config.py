"""Shapes and constants of one Kimi K3 MLA decoder layer, per tensor-parallel rank.

Values are the model's, read off vLLM 0.33.0 (`vllm/models/kimi_k3/nvidia/model.py`, `mla.py`,
`vllm/transformers_utils/configs/kimi_linear.py`) and the public K3 write-ups summarised in
`shared/VLLM_AND_KIMI_K3.md`:

* MLA: 96 heads, q_lora 1536, kv_lora 512, nope 128, rope 64, v 128, sigmoid output gate
  (`mla_use_output_gate`). K3's MLA layers are NoPE: `KimiDecoderLayer` asserts `mla_use_nope`
  ("Kimi-K3 MLA (MultiHeadLatentAttention) is NoPE-only"), so the 64 "rope" dims of q and of the cached
  key are used as they are, with no rotary embedding. Softmax scale is 1/sqrt(nope + rope) = 1/sqrt(192)
  (`MultiHeadLatentAttention.scale = qk_head_dim ** -0.5`; the yarn mscale only applies with RoPE).
* Latent MoE: 896 routed experts, top-16, one group, sigmoid scores, fp32 e_score_correction_bias used only
  to choose experts, combine weights renormalised (`moe_renormalize`, default True) times
  `routed_scaling_factor`. The routed experts work in a 3584-wide latent (`routed_expert_hidden_size`),
  intermediate 3072, followed by a routed RMSNorm (`latent_moe_use_norm`) and an up-projection back to 7168.
  Two shared experts, intermediate 2 x 3072 = 6144, on the un-projected hidden state.
* routed_scaling_factor = 1.0. Source: `KimiLinearConfig`'s default is 1.0, and vLLM 0.33's AMD specialized
  decode for the real K3 checkpoint refuses any other value
  (`models/kimi_k3/amd/specialized_decode/runtime/guards.py`: "routed_scaling_factor ..." is a refusal
  reason), which it would not do if the checkpoint shipped another value. The checkpoint's config.json itself
  was not read. The kernels take it as a runtime scalar, so another value changes no code.
* rms_norm_eps = 1e-6: `KimiLinearConfig`'s default (the checkpoint's config.json was not read; the value
  does not change bytes, FLOPs or kernel structure).
* SiTU: beta 4.0, linear_beta 25.0 (`activation_situ_beta`, `activation_situ_linear_beta`).

Per-rank sizes at TP > 1 follow vLLM's TP layout without expert parallelism: heads, q_b, kv_b, o_proj and the
gate rows are split by heads; routed and shared expert intermediates are split; the fused q_a|kv_a
projection, the router, the latent down/up projections and the norms are replicated.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

SUPPORTED_TP = (1, 2, 4, 8)


@dataclass(frozen=True)
class K3LayerConfig:
    hidden: int = 7168
    num_heads: int = 96
    q_lora_rank: int = 1536
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    n_routed_experts: int = 896
    top_k: int = 16
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    moe_renormalize: bool = True
    moe_intermediate: int = 3072
    latent: int = 3584
    n_shared_experts: int = 2
    situ_beta: float = 4.0
    situ_linear_beta: float = 25.0
    rms_norm_eps: float = 1e-6
    use_output_gate: bool = True
    mla_use_nope: bool = True
    block_size: int = 64
    tp: int = 1

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise ValueError(f"tp must be >= 1, got {self.tp}")
        for name, total in (
            ("num_heads", self.num_heads),
            ("moe_intermediate", self.moe_intermediate),
            ("shared_intermediate", self.shared_intermediate),
        ):
            if total % self.tp:
                raise ValueError(f"{name} ({total}) is not divisible by tp ({self.tp})")
        if self.n_group != 1 or self.topk_group != 1:
            raise ValueError("only one expert group is modelled (K3 uses n_group = topk_group = 1)")
        if not self.mla_use_nope:
            raise ValueError("K3 MLA layers are NoPE (mla_use_nope); RoPE is not modelled")
        if self.top_k > self.n_routed_experts:
            raise ValueError("top_k exceeds n_routed_experts")
        if self.block_size < 1:
            raise ValueError("block_size must be >= 1")

    # ---- constructors -------------------------------------------------------------------------------
    @classmethod
    def real(cls, tp: int = 1, **overrides: object) -> K3LayerConfig:
        """The model's real shapes, as a per-rank shard for `tp` ranks."""
        if tp not in SUPPORTED_TP:
            raise ValueError(f"tp must be one of {SUPPORTED_TP}, got {tp}")
        return dataclasses.replace(cls(tp=tp), **overrides)  # type: ignore[arg-type]

    @classmethod
    def tiny(cls, tp: int = 1, **overrides: object) -> K3LayerConfig:
        """Small shapes with the same structure, for CPU tests (Triton interpreter)."""
        base = cls(
            hidden=64,
            num_heads=4,
            q_lora_rank=32,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
            n_routed_experts=16,
            top_k=4,
            moe_intermediate=32,
            latent=32,
            n_shared_experts=2,
            block_size=16,
            tp=tp,
        )
        return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]

    # ---- derived sizes (per rank) ---------------------------------------------------------------------
    @property
    def local_heads(self) -> int:
        return self.num_heads // self.tp

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def kv_cache_dim(self) -> int:
        """Width of one cached token: the normalised latent then the (un-rotated) key part."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def softmax_scale(self) -> float:
        return 1.0 / math.sqrt(self.qk_head_dim)

    @property
    def qkv_a_rows(self) -> int:
        """Rows of the fused projection that are replicated: q_a | kv_a (latent + key part)."""
        return self.q_lora_rank + self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def gate_rows(self) -> int:
        """Output-gate rows of this rank (its heads x v_head_dim)."""
        return self.local_heads * self.v_head_dim if self.use_output_gate else 0

    @property
    def qkv_a_g_rows(self) -> int:
        return self.qkv_a_rows + self.gate_rows

    @property
    def routed_inter(self) -> int:
        """Routed-expert intermediate size of this rank."""
        return self.moe_intermediate // self.tp

    @property
    def shared_intermediate(self) -> int:
        return self.moe_intermediate * self.n_shared_experts

    @property
    def shared_inter(self) -> int:
        """Shared-expert intermediate size of this rank."""
        return self.shared_intermediate // self.tp

    def describe(self) -> str:
        return (
            f"K3 MLA layer tp={self.tp}: H={self.hidden} heads={self.local_heads}/{self.num_heads} "
            f"q_lora={self.q_lora_rank} kv_lora={self.kv_lora_rank} nope={self.qk_nope_head_dim} "
            f"rope={self.qk_rope_head_dim} v={self.v_head_dim} E={self.n_routed_experts} top_k={self.top_k} "
            f"latent={self.latent} inter={self.routed_inter} shared={self.shared_inter} "
            f"block={self.block_size}"
        )
