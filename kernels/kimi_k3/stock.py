"""The stock path: the kernel sequence a stock engine (vLLM 0.33, Hopper, bf16, TP1) runs for one K3 MLA
decode layer, written here. It is the baseline every speedup is measured against and the guard's fallback.

cuBLAS for the linears and batched matmuls; the engine's own one-kernel ops (Triton, `stock_ops`) where it
has them. Kernels per call (B <= 14 uses naive expert assignment, larger B adds one alignment kernel):

 1 fused add + RMSNorm (input_layernorm)          13 router GEMM, bf16 x bf16 -> fp32 (cuBLAS)
 2 q_a | kv_a | gate GEMM (cuBLAS)                 14 latent down-projection GEMM (cuBLAS)
 3 q_a + kv_a RMSNorm (one kernel)                 15 grouped top-k routing (one kernel)
 4 q_b GEMM (cuBLAS)                               (+ moe_align_block_size when B * top_k * 4 > E)
 5 q_nope @ W_UK_T (cuBLAS bmm)                    16 fused_moe w13    17 SiTU-and-mul
 6 decode q-concat + latent-cache insert           18 fused_moe w2 (x routing weight)   19 moe_sum
 7-8 split-KV MLA decode, stage 1 + stage 2        20 routed RMSNorm
 9 latent @ W_UV (cuBLAS bmm, into o_proj input)   21 shared w13 GEMM  22 SiTU-and-mul  23 shared w2 GEMM
10 output gate attn * sigmoid(gate)                24 latent up-projection GEMM + shared add (addmm)
11 o_proj GEMM (cuBLAS)
12 fused add + RMSNorm (post_attention_layernorm)

Where vLLM differs and why it does not flatter this baseline: vLLM runs the gate rows of the q_a|kv_a|gate
projection and the latent down-projection on an auxiliary stream at decode sizes (this path runs one
stream; the gate rows are in the same GEMM, which is one launch fewer); vLLM's Triton MLA backend zeroes its
output and LSE buffers (two memsets this path does not launch); on Hopper vLLM may pick FlashMLA / FA3 MLA
instead of the Triton backend (faster at long context; not reproduced here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import stock_ops as ops
from .config import K3LayerConfig
from .layer import DecodeBatch
from .weights import K3LayerWeights

if TYPE_CHECKING:
    import torch


def _router_logits(x: torch.Tensor, router: torch.Tensor) -> torch.Tensor:
    import torch
    import torch.nn.functional as F

    if x.is_cuda:
        # vLLM's GateLinear fast path on SM90+: cuBLAS bf16 x bf16 -> fp32 epilogue.
        return torch.mm(x, router.t(), out_dtype=torch.float32)
    return F.linear(x.float(), router.float())


def forward_with_aux(
    cfg: K3LayerConfig, w: K3LayerWeights, batch: DecodeBatch
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """`forward` plus intermediates tests look at (routing, attention output)."""
    import torch
    import torch.nn.functional as F

    eps = cfg.rms_norm_eps
    b = batch.hidden.shape[0]
    tp = batch.tp if batch.tp is not None and batch.tp.world > 1 else None
    # tp None with cfg.tp > 1: one rank's shard computed alone, without collectives (shard benchmarks only)
    if tp is not None and tp.world != cfg.tp:
        raise ValueError(f"weights are a TP-{cfg.tp} shard but the batch's TP group has {tp.world} ranks")
    lh, nope, rope, v = cfg.local_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    kvl, ql_rank = cfg.kv_lora_rank, cfg.q_lora_rank

    # ---- attention ----
    x, residual = ops.fused_add_rms_norm(batch.hidden, batch.residual, w.input_norm, eps)
    qkvg = F.linear(x, w.w_qkv_a_g)
    q_c, kv_c = ops.q_kv_rms_norm(qkvg, w.q_a_norm, w.kv_a_norm, eps)
    q = F.linear(q_c, w.w_q_b).view(b, lh, nope + rope)
    q_nope, q_pe = q[..., :nope], q[..., nope:]
    ql_nope = torch.bmm(q_nope.transpose(0, 1), w.w_uk_t).transpose(0, 1)  # [B, lh, kv_lora]
    k_pe = qkvg[:, ql_rank + kvl : ql_rank + kvl + rope]
    mqa_q = ops.q_concat_cache_insert(
        ql_nope, q_pe, kv_c, k_pe, batch.kv_cache, batch.block_table, batch.seq_lens
    )
    o_lat = ops.mla_decode(mqa_q, batch.kv_cache, batch.block_table, batch.seq_lens, kvl, cfg.softmax_scale)
    attn = torch.empty((b, lh * v), dtype=x.dtype, device=x.device)
    torch.bmm(o_lat.transpose(0, 1), w.w_uv, out=attn.view(b, lh, v).transpose(0, 1))
    if cfg.use_output_gate:
        attn = ops.gate_sigmoid_mul(attn, qkvg[:, cfg.qkv_a_rows :])
    attn_out = F.linear(attn, w.w_o)
    if tp is not None:
        tp.all_reduce_(attn_out)  # RowParallelLinear(o_proj): all-reduce of the partial sums (NCCL / gloo)

    # ---- latent MoE ----
    x2, residual = ops.fused_add_rms_norm(attn_out, residual, w.post_norm, eps)
    logits = _router_logits(x2, w.router)
    lat = F.linear(x2, w.latent_down)
    topk_w, topk_ids = ops.grouped_topk(
        logits, w.e_score_correction_bias, cfg.top_k, cfg.moe_renormalize, cfg.routed_scaling_factor
    )
    routed = ops.fused_experts(lat, w.w13, w.w2, topk_w, topk_ids, cfg.situ_beta, cfg.situ_linear_beta)
    shared_act = ops.situ_and_mul(F.linear(x2, w.shared_w13), cfg.situ_beta, cfg.situ_linear_beta)
    if tp is None:
        shared = F.linear(shared_act, w.shared_w2)
    else:
        # vLLM's LatentMoERunner at TP > 1: the routed latent partial and the shared partial are concatenated
        # and reduced in ONE all-reduce; the routed norm and the (replicated) up-projection then run locally.
        lat_dim = routed.shape[1]
        both = torch.empty((b, lat_dim + cfg.hidden), dtype=routed.dtype, device=routed.device)
        both[:, :lat_dim].copy_(routed)
        torch.mm(shared_act, w.shared_w2.t(), out=both[:, lat_dim:])
        tp.all_reduce_(both)
        routed, shared = both[:, :lat_dim], both[:, lat_dim:]
    routed = ops.rms_norm(routed.contiguous(), w.routed_norm, eps)
    out = torch.addmm(shared, routed, w.latent_up.t())
    aux = {"topk_ids": topk_ids, "topk_weights": topk_w, "attn_out": attn_out, "router_logits": logits}
    return out, residual, aux


def forward(
    cfg: K3LayerConfig, weights: K3LayerWeights, batch: DecodeBatch
) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden_out [B, H], residual_out [B, H]); writes the new token's latent into batch.kv_cache."""
    if batch.hidden.shape[0] == 0:
        return batch.hidden.new_empty(batch.hidden.shape), batch.residual.new_empty(batch.residual.shape)
    out, residual, _ = forward_with_aux(cfg, weights, batch)
    return out, residual
