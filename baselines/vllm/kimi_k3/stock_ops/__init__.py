"""The stock engine's own one-kernel ops (Triton), used by `kimi_k3.stock`.

Importing this package registers them as `torch.ops.kimi_k3_stock.*` (torch.library.triton_op), so
torch.compile can trace into them."""

from .activation import gate_sigmoid_mul, situ_and_mul
from .mla_decode import mla_decode, q_concat_cache_insert
from .moe import fused_experts, grouped_topk, moe_align_block_size
from .norms import fused_add_rms_norm, q_kv_rms_norm, rms_norm

__all__ = [
    "fused_add_rms_norm",
    "fused_experts",
    "gate_sigmoid_mul",
    "grouped_topk",
    "mla_decode",
    "moe_align_block_size",
    "q_concat_cache_insert",
    "q_kv_rms_norm",
    "rms_norm",
    "situ_and_mul",
]
