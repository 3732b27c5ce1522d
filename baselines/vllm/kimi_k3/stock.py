"""The stock path: the kernel sequence vLLM 0.33 runs for one Kimi K3 MLA decode layer on an H200 (bf16).

The baseline every speedup is measured against (named by `policies/vllm.toml`) and, re-exported, the
guard's fallback. cuBLAS for the linears and batched matmuls; FlashInfer's FA3 MLA for the decode attention
(`attention.py`: the first backend of vLLM's sm90 list that runs on the box); the engine's one-kernel ops
(Triton, `stock_ops`) for the norms, the concat + cache insert, the routing, the grouped fused_moe and the
activations. Kernels per call (B <= 14 uses naive expert assignment, larger B adds one alignment kernel):

 1 fused add + RMSNorm (input_layernorm)          12 fused add + RMSNorm (post_attention_layernorm)
 2 q_a | kv_a | gate GEMM (cuBLAS)                 13 router GEMM, bf16 x bf16 -> fp32 (cuBLAS), main stream
 3 q_a + kv_a RMSNorm (one kernel)                 14 latent down-projection GEMM (cuBLAS), aux stream
 4 q_b GEMM (cuBLAS)                               15 grouped top-k routing (one kernel)
 5 q_nope @ W_UK_T (cuBLAS bmm)                    (+ moe_align_block_size when B * top_k * 4 > E)
 6 decode q-concat + latent-cache insert           16 fused_moe w13    17 SiTU-and-mul
 7 FlashInfer FA3 MLA decode (planned per step)    18 fused_moe w2 (x routing weight)   19 moe_sum
 8 latent @ W_UV (cuBLAS bmm, into o_proj input)   20 routed RMSNorm
 9 output gate attn * sigmoid(gate)                21 shared w13 GEMM  22 SiTU-and-mul  23 shared w2 GEMM
10 o_proj GEMM (cuBLAS)                            24 latent up-projection GEMM + shared add (addmm)

Stage by stage against vLLM, and where this differs: README.md beside this file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch as _torch

from . import attention as mla_attention
from . import stock_ops as ops
from .config import K3LayerConfig
from .decode import DecodeBatch
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


def _attention_eager(attn: Any, q: torch.Tensor, kv_cache: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = attn.run(q, kv_cache)
    return out


# FlashInfer's planned wrapper is opaque to Dynamo: the "compile" baseline calls it as an eager op (a graph
# break), as vLLM's torch.compile integration treats its attention backends (a splitting op).
_run_attention = _torch.compiler.disable(_attention_eager)  # type: ignore[no-untyped-call]

_AUX: dict[str, Any] = {}


def _aux_stream(device: torch.device) -> Any:
    import torch

    key = str(device)
    if key not in _AUX:
        _AUX[key] = torch.cuda.Stream(device=device)  # type: ignore[no-untyped-call]
    return _AUX[key]


def _router_and_latent_down(x2: torch.Tensor, w: K3LayerWeights) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's `_maybe_overlap_router_and_down_proj`: the router GEMM on the main stream and the routed
    latent down-projection on an auxiliary stream (<= 256 tokens), joined before the routing. Under
    torch.compile (the "compile" baseline) and on CPU they run in sequence."""
    import torch
    import torch.nn.functional as F

    if not x2.is_cuda or x2.shape[0] > 256 or torch.compiler.is_compiling():
        return _router_logits(x2, w.router), F.linear(x2, w.latent_down)
    main = torch.cuda.current_stream(x2.device)
    aux = _aux_stream(x2.device)
    aux.wait_stream(main)
    # the output is allocated on the main stream, which waits for the aux stream before any use or free
    lat = torch.empty((x2.shape[0], w.latent_down.shape[0]), dtype=x2.dtype, device=x2.device)
    logits = _router_logits(x2, w.router)
    with torch.cuda.stream(aux):
        torch.mm(x2, w.latent_down.t(), out=lat)
    main.wait_stream(aux)
    return logits, lat


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
    o_lat = _run_attention(mla_attention.for_batch(cfg, batch), mqa_q, batch.kv_cache)
    attn = torch.empty((b, lh * v), dtype=x.dtype, device=x.device)
    torch.bmm(o_lat.transpose(0, 1), w.w_uv, out=attn.view(b, lh, v).transpose(0, 1))
    if cfg.use_output_gate:
        attn = ops.gate_sigmoid_mul(attn, qkvg[:, cfg.qkv_a_rows :])
    attn_out = F.linear(attn, w.w_o)
    if tp is not None:
        tp.all_reduce_(attn_out)  # RowParallelLinear(o_proj): all-reduce of the partial sums (NCCL / gloo)

    # ---- latent MoE ----
    x2, residual = ops.fused_add_rms_norm(attn_out, residual, w.post_norm, eps)
    logits, lat = _router_and_latent_down(x2, w)
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
