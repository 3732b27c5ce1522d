"""Plain fp32 PyTorch reference of one Kimi K3 MLA decode layer: the math as vLLM 0.33 writes it.

Readable over fast: every step is a named line. Weights are upcast to fp32 as they are used (routed experts
one touched expert at a time, so real shapes need no fp32 copy of the 59 GB expert tensors). The reference
reads the paged cache for positions < seq_len - 1 and uses its own fp32 latent for the new token; it does
not write the cache unless `write_cache=True`.

Semantics checked against vLLM 0.33 (`models/kimi_k3/nvidia/model.py` KimiDecoderLayer / KimiMoE,
`nvidia/mla.py` MultiHeadLatentAttention, `nvidia/latent_moe_runner.py`, `layers/activation.py` SituAndMul,
`fused_moe/router/grouped_topk_router.py` grouped_topk):
1. residual = hidden + residual; x = RMSNorm(residual) * input_norm
2. [q_c | kv_c | k_pe | gate] = x @ w_qkv_a_g.T; q_c = RMSNorm(q_c); kv_c = RMSNorm(kv_c)
3. q = q_c @ w_q_b.T -> [B, heads, nope | rope]; NoPE: no rotary on q_pe or k_pe
4. ql = q_nope @ W_UK_T (absorbed); scores = (ql . kv_c_cache + q_pe . k_pe_cache) / sqrt(nope + rope)
5. o_latent = softmax(scores) @ kv_c_cache; attn = o_latent @ W_UV; attn *= sigmoid(gate); a = attn @ w_o.T
6. residual = a + residual; x = RMSNorm(residual) * post_norm
7. router: logits = x @ router.T (fp32); s = sigmoid(logits); choose top-k of s + bias; weights = s[chosen],
   renormalised, times routed_scaling_factor
8. lat = x @ latent_down.T; routed = sum_k w_k * (SiTU(lat @ w13[e_k].T) @ w2[e_k].T)
   SiTU(g, u) = beta * tanh(g / beta) * sigmoid(g) * linear_beta * tanh(u / linear_beta)
9. out = RMSNorm(routed) * routed_norm @ latent_up.T + shared(x),
   shared(x) = SiTU(x @ shared_w13.T) @ shared_w2.T
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .config import K3LayerConfig
from .decode import DecodeBatch
from .weights import K3LayerWeights

if TYPE_CHECKING:
    import torch


@dataclass
class ReferenceOut:
    hidden: torch.Tensor  # [B, H] MoE output (fp32)
    residual: torch.Tensor  # [B, H] residual after the attention add (fp32)
    attn_out: torch.Tensor  # [B, H] o_proj output (fp32)
    new_latent: torch.Tensor  # [B, kv_lora + rope] the cache entry this step writes (fp32)
    topk_ids: torch.Tensor  # [B, top_k] int64, the experts used
    own_topk_ids: torch.Tensor  # [B, top_k] int64, the reference's own choice (== topk_ids unless forced)
    topk_weights: torch.Tensor  # [B, top_k] fp32
    route_margin: torch.Tensor  # [B] gap between the k-th and (k+1)-th biased score (fp32)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    import torch

    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()


def situ_and_mul(gate_up: torch.Tensor, beta: float, linear_beta: float) -> torch.Tensor:
    import torch

    d = gate_up.shape[-1] // 2
    g, u = gate_up[..., :d].float(), gate_up[..., d:].float()
    return beta * torch.tanh(g / beta) * torch.sigmoid(g) * (linear_beta * torch.tanh(u / linear_beta))


def route(
    cfg: K3LayerConfig, logits: torch.Tensor, bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sigmoid top-k with a selection-only bias (n_group = 1). Returns ids, weights, boundary margin."""
    import torch

    scores = torch.sigmoid(logits.float())
    biased = scores + bias.float().unsqueeze(0)
    k = cfg.top_k
    top = torch.topk(biased, k=min(k + 1, cfg.n_routed_experts), dim=-1)
    ids = top.indices[:, :k]
    if cfg.n_routed_experts > k:
        margin = top.values[:, k - 1] - top.values[:, k]
    else:
        margin = torch.full((logits.shape[0],), float("inf"), device=logits.device)
    weights = scores.gather(1, ids)
    if cfg.moe_renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights * cfg.routed_scaling_factor
    return ids, weights, margin


def gather_context(cfg: K3LayerConfig, batch: DecodeBatch, row: int, length: int) -> torch.Tensor:
    """Cached latents of positions 0 .. length-1 of one row, fp32 [length, kv_lora + rope]."""
    import torch

    if length == 0:
        return torch.empty(0, cfg.kv_cache_dim, device=batch.kv_cache.device)
    nblocks = (length + cfg.block_size - 1) // cfg.block_size
    blocks = batch.block_table[row, :nblocks].long()
    toks = batch.kv_cache[blocks].reshape(-1, cfg.kv_cache_dim)
    return toks[:length].float()


def forward_full(
    cfg: K3LayerConfig,
    w: K3LayerWeights,
    batch: DecodeBatch,
    write_cache: bool = False,
    topk_ids: torch.Tensor | None = None,
) -> ReferenceOut:
    """The reference layer. `topk_ids` [B, top_k] forces the routed experts (e.g. the ones a bf16 path chose,
    so a near-tie that rounding resolved the other way does not count as an error); the combine weights are
    then the reference's own renormalised sigmoid scores of those experts. `route_margin` is always the
    reference's own boundary gap, so a caller can tell which rows were ambiguous."""
    import torch

    f32 = torch.float32
    eps = cfg.rms_norm_eps
    lh, nope, rope, vdim = cfg.local_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    kvl = cfg.kv_lora_rank
    B = batch.hidden.shape[0]

    # 1. add + RMSNorm
    residual = batch.hidden.float() + batch.residual.float()
    x = rms_norm(residual, w.input_norm, eps)

    # 2. fused q_a | kv_a | gate projection, then the two latent norms
    qkvg = x @ w.w_qkv_a_g.to(f32).T
    q_c, kv_c, k_pe, gate = torch.split(qkvg, [cfg.q_lora_rank, kvl, rope, cfg.gate_rows], dim=-1)
    q_c = rms_norm(q_c, w.q_a_norm, eps)
    kv_c = rms_norm(kv_c, w.kv_a_norm, eps)

    # 3. q_b; NoPE: q_pe and k_pe are used without a rotary embedding
    q = (q_c @ w.w_q_b.to(f32).T).view(B, lh, nope + rope)
    q_nope, q_pe = q[..., :nope], q[..., nope:]

    # 4-5. absorbed MLA over the latent cache
    ql = torch.einsum("bhn,hnl->bhl", q_nope, w.w_uk_t.to(f32))
    new_latent = torch.cat([kv_c, k_pe], dim=-1)  # [B, kv_lora + rope]
    seq_lens = batch.seq_lens.tolist()
    o_lat = torch.empty(B, lh, kvl, device=x.device, dtype=f32)
    for b in range(B):
        length = int(seq_lens[b])
        ctx = torch.cat([gather_context(cfg, batch, b, length - 1), new_latent[b : b + 1]], dim=0)
        scores = (ql[b] @ ctx[:, :kvl].T + q_pe[b] @ ctx[:, kvl:].T) * cfg.softmax_scale  # [lh, L]
        probs = torch.softmax(scores, dim=-1)
        o_lat[b] = probs @ ctx[:, :kvl]
    attn = torch.einsum("bhl,hlv->bhv", o_lat, w.w_uv.to(f32)).reshape(B, lh * vdim)
    if cfg.use_output_gate:
        attn = attn * torch.sigmoid(gate)
    attn_out = attn @ w.w_o.to(f32).T

    # 6. add + RMSNorm
    residual = attn_out + residual
    x2 = rms_norm(residual, w.post_norm, eps)

    # 7. router (fp32 logits, as vLLM's GateLinear with out_dtype=float32)
    logits = x2 @ w.router.to(f32).T
    ids, weights, margin = route(cfg, logits, w.e_score_correction_bias)
    own_ids = ids
    if topk_ids is not None:
        ids = topk_ids.long().to(logits.device)
        weights = torch.sigmoid(logits).gather(1, ids)
        if cfg.moe_renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights * cfg.routed_scaling_factor

    # 8. latent routed experts, one touched expert at a time
    lat = x2 @ w.latent_down.to(f32).T
    routed = torch.zeros(B, cfg.latent, device=x.device, dtype=f32)
    for e in torch.unique(ids).tolist():
        rows, slots = (ids == e).nonzero(as_tuple=True)
        h13 = lat[rows] @ w.w13[e].to(f32).T
        act = situ_and_mul(h13, cfg.situ_beta, cfg.situ_linear_beta)
        y = act @ w.w2[e].to(f32).T
        routed.index_add_(0, rows, y * weights[rows, slots].unsqueeze(1))

    # 9. routed RMSNorm, latent up-projection, shared experts
    routed = rms_norm(routed, w.routed_norm, eps)
    shared = situ_and_mul(x2 @ w.shared_w13.to(f32).T, cfg.situ_beta, cfg.situ_linear_beta)
    out = routed @ w.latent_up.to(f32).T + shared @ w.shared_w2.to(f32).T

    if write_cache:
        for b in range(B):
            pos = int(seq_lens[b]) - 1
            blk = int(batch.block_table[b, pos // cfg.block_size])
            batch.kv_cache[blk, pos % cfg.block_size] = new_latent[b].to(batch.kv_cache.dtype)

    return ReferenceOut(
        hidden=out,
        residual=residual,
        attn_out=attn_out,
        new_latent=new_latent,
        topk_ids=ids,
        own_topk_ids=own_ids,
        topk_weights=weights,
        route_margin=margin,
    )


def forward(
    cfg: K3LayerConfig, weights: K3LayerWeights, batch: DecodeBatch
) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden_out, residual_out) in fp32; the cache is left as it was."""
    out = forward_full(cfg, weights, batch)
    return out.hidden, out.residual


# ---- comparing a path against the reference ---------------------------------------------------------------
# bf16 tolerances, as a relative L2 error per row (max over rows). bf16's unit roundoff is 2^-9 = 0.2%; a
# layer output passes through ~8-10 bf16-rounded intermediates (x, qkvg, the normed latents, q, the absorbed
# query, o_latent, attn, o_proj input, x2, lat, h13, act, the expert outputs), which gives ~0.5-1% typical row
# errors (measured: tiny CPU shapes ~0.8%, see NOTES.md for the H200 figures). The tolerances sit ~3x above
# that, and below what a real defect costs: one of `heads` heads or one of `top_k` experts dropped or
# mis-indexed moves a row by >= ~1/sqrt(heads) resp. ~1/sqrt(top_k) (>= 10% at K3's 96 heads / top-16).
TOLERANCES = {"attn": 3e-2, "residual": 1.5e-2, "hidden": 3e-2, "cache": 1e-2}


@dataclass
class Comparison:
    hidden_err: float
    residual_err: float
    cache_err: float
    attn_err: float | None
    route_mismatch_rows: int  # rows whose chosen experts differ from the reference's with a clear margin
    ambiguous_rows: int  # rows whose reference top-k boundary gap is below the routing noise
    finite: bool
    cache_untouched: bool  # nothing but each row's new slot was written

    def max_ratio(self) -> float:
        """The worst error as a fraction of its tolerance (<= 1 passes)."""
        ratios = [
            self.hidden_err / TOLERANCES["hidden"],
            self.residual_err / TOLERANCES["residual"],
            self.cache_err / TOLERANCES["cache"],
        ]
        if self.attn_err is not None:
            ratios.append(self.attn_err / TOLERANCES["attn"])
        return max(ratios)

    def ok(self) -> bool:
        return (
            self.finite and self.cache_untouched and self.route_mismatch_rows == 0 and self.max_ratio() <= 1.0
        )

    def summary(self) -> dict[str, float | int | bool | None]:
        return {
            "hidden_err": self.hidden_err,
            "residual_err": self.residual_err,
            "cache_err": self.cache_err,
            "attn_err": self.attn_err,
            "route_mismatch_rows": self.route_mismatch_rows,
            "ambiguous_rows": self.ambiguous_rows,
            "finite": self.finite,
            "cache_untouched": self.cache_untouched,
            "max_ratio": self.max_ratio(),
        }


def row_rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max over rows of ||out - ref|| / ||ref|| (NaN anywhere gives inf)."""
    import torch

    diff = (out.float() - ref.float()).norm(dim=-1)
    den = ref.float().norm(dim=-1).clamp_min(1e-30)
    err = diff / den
    if not torch.isfinite(err).all():
        return float("inf")
    return float(err.max()) if err.numel() else 0.0


# Routing noise: a bf16 path's router input x2 carries ~0.5% bf16 error, so its O(1) logits move by up to
# ~5e-3 and its sigmoid scores (slope <= 0.25) by up to ~1e-3. Rows whose reference gap between the k-th
# and (k+1)-th biased score is below ROUTE_MARGIN are "ambiguous": either choice is a correct bf16 result,
# and only rows with a clear gap must route identically. (The outputs are always checked exactly, against
# the reference evaluated with the path's own experts; the routing kernel itself is checked bit-exactly
# against torch.topk on identical logits in the op tests.)
ROUTE_MARGIN = 5e-3


def compare(
    cfg: K3LayerConfig,
    w: K3LayerWeights,
    batch: DecodeBatch,
    cache_before: torch.Tensor,
    hidden_out: torch.Tensor,
    residual_out: torch.Tensor,
    topk_ids: torch.Tensor | None = None,
    attn_out: torch.Tensor | None = None,
) -> Comparison:
    """Compare a path's outputs (after it ran on `batch`, whose cache it updated) with the reference.

    `cache_before` is a clone of the cache taken before the path ran. With `topk_ids` (the path's routing)
    the reference uses those experts, and rows where they differ from the reference's own choice while the
    reference's margin is clear count as mismatches.
    """
    import torch

    probe = DecodeBatch(
        batch.hidden, batch.residual, cache_before, batch.block_table, batch.seq_lens, batch.meta
    )
    ref = forward_full(cfg, w, probe, topk_ids=topk_ids)
    clear = ref.route_margin > ROUTE_MARGIN
    mismatch = 0
    if topk_ids is not None:
        same = (ref.own_topk_ids.sort(-1).values == topk_ids.long().sort(-1).values).all(-1)
        mismatch = int((~same & clear).sum())

    # the cache: each row's new slot holds the new latent; nothing else changed (bitwise, NaN-aware)
    seq = batch.seq_lens.long()
    pos = seq - 1
    rows = torch.arange(seq.numel(), device=seq.device)
    blk = batch.block_table[rows, pos // cfg.block_size].long()
    slot = pos % cfg.block_size
    written = batch.kv_cache[blk, slot]
    cache_err = row_rel_err(written, ref.new_latent)
    after = batch.kv_cache.clone()
    after[blk, slot] = 0
    before = cache_before.clone()
    before[blk, slot] = 0
    untouched = bool(torch.equal(after.view(torch.int16), before.view(torch.int16)))

    finite = bool(torch.isfinite(hidden_out).all() and torch.isfinite(residual_out).all())
    return Comparison(
        hidden_err=row_rel_err(hidden_out, ref.hidden),
        residual_err=row_rel_err(residual_out, ref.residual),
        cache_err=cache_err,
        attn_err=None if attn_out is None else row_rel_err(attn_out, ref.attn_out),
        route_mismatch_rows=mismatch,
        ambiguous_rows=int((~clear).sum()),
        finite=finite,
        cache_untouched=untouched,
    )
