# Triton kernels are untyped (tl types): relax mypy's strict defaults for this module only.
# mypy: disallow-untyped-defs=False, disallow-untyped-decorators=False
# mypy: disallow-incomplete-defs=False, warn-return-any=False
"""The stock fused-MoE path, like vLLM's Triton `fused_experts` for bf16 (written here from the algorithm):

1. `grouped_topk`: one routing kernel (sigmoid scores, selection-only correction bias, top-k, renormalise,
   times routed_scaling_factor); n_group = 1, so the group stage is the identity.
2. Expert assignment: when `tokens * top_k * 4 <= experts` vLLM skips alignment ("naive block assignment":
   every (token, expert) pair gets its own M block, only row 0 valid); otherwise `moe_align_block_size`
   sorts the pairs by expert and pads each expert's run to BLOCK_M (one kernel here).
3. `fused_moe_kernel` for w13 over the (token, expert) pairs -> [pairs, 2I]; `situ_and_mul`;
   `fused_moe_kernel` for w2 with the routing weight multiplied in -> [pairs, latent];
   `moe_sum` -> [B, latent].
Tile sizes follow vLLM 0.33's `get_default_config` for bf16 (BLOCK_M 16 up to 32 tokens, 32 up to 96;
BLOCK_N 64; BLOCK_K 128; 4 warps; 4 stages up to 32 tokens, else 3).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._runtime import launcher, next_pow2, register, use_triton


# ---- routing ---------------------------------------------------------------------------------------------
@triton.jit
def _grouped_topk_kernel(
    LOGITS,
    BIAS,
    W_OUT,
    ID_OUT,
    E,
    stride_l,
    stride_w,
    stride_i,
    scale: tl.constexpr,
    K: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_K: tl.constexpr,
    RENORM: tl.constexpr,
):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_E)
    mask = offs < E
    logit = tl.load(LOGITS + row * stride_l + offs, mask=mask, other=0.0).to(tl.float32)
    s = tl.sigmoid(logit)
    biased = tl.where(mask, s + tl.load(BIAS + offs, mask=mask, other=0.0), float("-inf"))
    offs_k = tl.arange(0, BLOCK_K)
    ws = tl.zeros([BLOCK_K], dtype=tl.float32)
    ids = tl.zeros([BLOCK_K], dtype=tl.int32)
    for k in tl.static_range(K):
        idx = tl.argmax(biased, 0)
        sel = offs == idx
        ws = tl.where(offs_k == k, tl.sum(tl.where(sel, s, 0.0), 0), ws)
        ids = tl.where(offs_k == k, idx.to(tl.int32), ids)
        biased = tl.where(sel, float("-inf"), biased)
    if RENORM:
        ws = ws / tl.sum(ws, 0)
    ws = ws * scale
    tl.store(W_OUT + row * stride_w + offs_k, ws, mask=offs_k < K)
    tl.store(ID_OUT + row * stride_i + offs_k, ids, mask=offs_k < K)


def _topk_launch(
    logits: torch.Tensor, bias: torch.Tensor, top_k: int, renormalize: bool, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    b, e = logits.shape
    w = torch.empty((b, top_k), dtype=torch.float32, device=logits.device)
    ids = torch.empty((b, top_k), dtype=torch.int32, device=logits.device)
    if b == 0:
        return w, ids
    launcher(_grouped_topk_kernel, logits)[(b,)](
        logits,
        bias,
        w,
        ids,
        e,
        logits.stride(0),
        w.stride(0),
        ids.stride(0),
        scale,
        K=top_k,
        BLOCK_E=next_pow2(e),
        BLOCK_K=next_pow2(top_k),
        RENORM=renormalize,
        num_warps=4,
    )
    return w, ids


@register("grouped_topk")
def _topk_op(
    logits: torch.Tensor, bias: torch.Tensor, top_k: int, renormalize: bool, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return _topk_launch(logits, bias, top_k, renormalize, scale)


def grouped_topk(
    logits: torch.Tensor, bias: torch.Tensor, top_k: int, renormalize: bool, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights fp32 [B, k], ids int32 [B, k]) for fp32 router logits [B, E]."""
    if logits.is_cuda:
        out = torch.ops.kimi_k3_stock.grouped_topk(logits, bias, top_k, renormalize, scale)
        return out[0], out[1]
    if use_triton(logits):
        return _topk_launch(logits, bias, top_k, renormalize, scale)
    s = torch.sigmoid(logits.float())
    ids = torch.topk(s + bias.float(), top_k, dim=-1).indices
    w = s.gather(1, ids)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    return w * scale, ids.to(torch.int32)


# ---- expert assignment (moe_align_block_size) -----------------------------------------------------------
@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def _moe_align_kernel(
    TOPK_IDS,
    SORTED,
    EXPERT_IDS,
    NUM_POST_PAD,
    SCRATCH,
    P,
    E,
    MAX_PADDED,
    BLOCK_P: tl.constexpr,
    BM: tl.constexpr,
    FILL: tl.constexpr,
):
    # Single program: fill the padded list with the sentinel P, then sort pairs by expert and scatter
    # each expert's run to a BM-aligned segment.
    for start in range(0, MAX_PADDED, FILL):
        offs_f = start + tl.arange(0, FILL)
        tl.store(SORTED + offs_f, tl.zeros([FILL], dtype=tl.int32) + P, mask=offs_f < MAX_PADDED)
    offs = tl.arange(0, BLOCK_P)
    valid = offs < P
    e = tl.load(TOPK_IDS + offs, mask=valid, other=E).to(tl.int32)
    key = tl.sort(e * BLOCK_P + offs)
    se = key // BLOCK_P
    sidx = key % BLOCK_P
    tl.store(SCRATCH + offs, se)
    tl.debug_barrier()
    prev = tl.load(SCRATCH + offs - 1, mask=offs > 0, other=-1)
    nxt = tl.load(SCRATCH + offs + 1, mask=offs < BLOCK_P - 1, other=-1)
    is_start = se != prev
    is_end = se != nxt
    start_idx = tl.associative_scan(tl.where(is_start, offs, 0), 0, _max_combine)
    rank = offs - start_idx
    ok = se < E
    pad = tl.where(is_end & ok, (BM - (rank + 1) % BM) % BM, 0)
    ppos = offs + tl.cumsum(pad, 0) - pad
    tl.store(SORTED + ppos, sidx, mask=ok)
    tl.store(EXPERT_IDS + ppos // BM, se, mask=ok)
    tl.store(NUM_POST_PAD, P + tl.sum(pad, 0))


def _max_padded(pairs: int, experts: int, block_m: int) -> int:
    padded = pairs + experts * (block_m - 1)
    if pairs < experts:
        padded = min(pairs * block_m, padded)
    return padded


def _align_launch(
    topk_ids: torch.Tensor, num_experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    pairs = topk_ids.numel()
    max_padded = _max_padded(pairs, num_experts, block_m)
    dev = topk_ids.device
    sorted_ids = torch.empty((max_padded,), dtype=torch.int32, device=dev)
    expert_ids = torch.empty((triton.cdiv(max_padded, block_m),), dtype=torch.int32, device=dev)
    num_post = torch.empty((1,), dtype=torch.int32, device=dev)
    block_p = next_pow2(pairs)
    scratch = torch.empty((block_p,), dtype=torch.int32, device=dev)
    launcher(_moe_align_kernel, topk_ids)[(1,)](
        topk_ids,
        sorted_ids,
        expert_ids,
        num_post,
        scratch,
        pairs,
        num_experts,
        max_padded,
        BLOCK_P=block_p,
        BM=block_m,
        FILL=1024,
        num_warps=8,
    )
    return sorted_ids, expert_ids, num_post


@register("moe_align_block_size")
def _align_op(
    topk_ids: torch.Tensor, num_experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _align_launch(topk_ids, num_experts, block_m)


def moe_align_block_size(
    topk_ids: torch.Tensor, num_experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(pair ids sorted by expert, each run padded to block_m with sentinel = pairs; expert id per block;
    [padded length])."""
    if topk_ids.is_cuda:
        out = torch.ops.kimi_k3_stock.moe_align_block_size(topk_ids, num_experts, block_m)
        return out[0], out[1], out[2]
    if use_triton(topk_ids):
        return _align_launch(topk_ids, num_experts, block_m)
    flat = topk_ids.flatten().long()
    pairs = flat.numel()
    max_padded = _max_padded(pairs, num_experts, block_m)
    sorted_ids = torch.full((max_padded,), pairs, dtype=torch.int32)
    expert_ids = torch.zeros((triton.cdiv(max_padded, block_m),), dtype=torch.int32)
    pos = 0
    for e in torch.unique(flat).tolist():
        members = (flat == e).nonzero().flatten()
        sorted_ids[pos : pos + members.numel()] = members.to(torch.int32)
        nblk = triton.cdiv(members.numel(), block_m)
        expert_ids[pos // block_m : pos // block_m + nblk] = e
        pos += nblk * block_m
    return sorted_ids, expert_ids, torch.tensor([pos], dtype=torch.int32)


# ---- grouped expert GEMM ---------------------------------------------------------------------------------
@triton.jit
def _fused_moe_kernel(
    A,
    W,
    C,
    TOPK_W,
    SORTED,
    EXPERT_IDS,
    NUM_POST_PAD,
    N,
    K,
    num_pairs,
    stride_am,
    stride_we,
    stride_wn,
    stride_wk,
    stride_cm,
    TOP_K: tl.constexpr,
    A_PER_TOKEN: tl.constexpr,
    MUL_WEIGHT: tl.constexpr,
    NAIVE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_n
    pid_n = pid % num_n
    offs_m = tl.arange(0, BLOCK_M)
    if NAIVE:
        # One (token, expert) pair per M block; only row 0 is valid.
        pair = tl.where(offs_m == 0, pid_m, num_pairs)
        expert = tl.load(EXPERT_IDS + pid_m).to(tl.int64)
    else:
        if pid_m * BLOCK_M >= tl.load(NUM_POST_PAD):
            return
        pair = tl.load(SORTED + pid_m * BLOCK_M + offs_m)
        expert = tl.load(EXPERT_IDS + pid_m).to(tl.int64)
    row_ok = pair < num_pairs
    a_row = pair // TOP_K if A_PER_TOKEN else pair
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptr = A + a_row.to(tl.int64)[:, None] * stride_am + offs_k[None, :]
    w_ptr = W + expert * stride_we + offs_n.to(tl.int64)[None, :] * stride_wn + offs_k[:, None] * stride_wk
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BLOCK_K)):
        k_ok = offs_k < K - k0 * BLOCK_K
        a = tl.load(a_ptr, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_ptr, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc += tl.dot(a, w)
        a_ptr += BLOCK_K
        w_ptr += BLOCK_K * stride_wk
    if MUL_WEIGHT:
        rw = tl.load(TOPK_W + pair, mask=row_ok, other=0.0)
        acc = acc * rw[:, None]
    c_ptr = C + pair.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptr, acc.to(C.dtype.element_ty), mask=row_ok[:, None] & n_ok[None, :])


@triton.jit
def _moe_sum_kernel(X, Y, D, stride_x_pair, stride_y, TOP_K: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < D
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in tl.static_range(TOP_K):
        acc += tl.load(X + (row * TOP_K + k) * stride_x_pair + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride_y + offs, acc.to(Y.dtype.element_ty), mask=mask)


def moe_config(num_tokens: int) -> dict[str, int]:
    """vLLM 0.33 `get_default_config` for bf16 at decode sizes."""
    block_m = 16 if num_tokens <= 32 else 32 if num_tokens <= 96 else 64
    return {
        "BLOCK_M": block_m,
        "BLOCK_N": 64 if num_tokens <= 64 else 128,
        "BLOCK_K": 128 if num_tokens <= 64 else 64,
        "num_warps": 4 if num_tokens <= 128 else 8,
        "num_stages": 4 if num_tokens <= 32 else 3,
    }


def naive_assignment(num_tokens: int, top_k: int, num_experts: int) -> bool:
    return num_tokens * top_k * 4 <= num_experts


def _grouped_gemm_launch(
    a: torch.Tensor,
    w: torch.Tensor,
    topk_weights: torch.Tensor,
    sorted_ids: torch.Tensor,
    expert_ids: torch.Tensor,
    num_post_pad: torch.Tensor,
    top_k: int,
    a_per_token: bool,
    mul_weight: bool,
    naive: bool,
    num_tokens: int,
) -> torch.Tensor:
    pairs = topk_weights.numel()
    n, k = w.shape[1], w.shape[2]
    c = torch.empty((pairs, n), dtype=a.dtype, device=a.device)
    if pairs == 0:
        return c
    cfg = moe_config(num_tokens)
    m_blocks = pairs if naive else triton.cdiv(sorted_ids.numel(), cfg["BLOCK_M"])
    grid = (m_blocks * triton.cdiv(n, cfg["BLOCK_N"]),)
    launcher(_fused_moe_kernel, a)[grid](
        a,
        w,
        c,
        topk_weights,
        sorted_ids,
        expert_ids,
        num_post_pad,
        n,
        k,
        pairs,
        a.stride(0),
        w.stride(0),
        w.stride(1),
        w.stride(2),
        c.stride(0),
        TOP_K=top_k,
        A_PER_TOKEN=a_per_token,
        MUL_WEIGHT=mul_weight,
        NAIVE=naive,
        BLOCK_M=cfg["BLOCK_M"],
        BLOCK_N=cfg["BLOCK_N"],
        BLOCK_K=cfg["BLOCK_K"],
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
    )
    return c


def _moe_sum_launch(x: torch.Tensor, top_k: int) -> torch.Tensor:
    pairs, d = x.shape
    b = pairs // top_k
    y = torch.empty((b, d), dtype=x.dtype, device=x.device)
    if b == 0:
        return y
    launcher(_moe_sum_kernel, x)[(b, triton.cdiv(d, 1024))](
        x, y, d, x.stride(0), y.stride(0), TOP_K=top_k, BLOCK=1024, num_warps=4
    )
    return y


def _experts_launch(
    lat: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    beta: float,
    linear_beta: float,
) -> torch.Tensor:
    from .activation import _situ_launch

    b, top_k = topk_ids.shape
    e = w13.shape[0]
    cfg = moe_config(b)
    naive = naive_assignment(b, top_k, e)
    if naive:
        flat = topk_ids.view(-1)
        sorted_ids, expert_ids, num_post = flat, flat, flat  # sorted/num_post unused when naive
    else:
        sorted_ids, expert_ids, num_post = _align_launch(topk_ids, e, cfg["BLOCK_M"])
    h13 = _grouped_gemm_launch(
        lat, w13, topk_weights, sorted_ids, expert_ids, num_post, top_k, True, False, naive, b
    )
    act = _situ_launch(h13, beta, linear_beta)
    y = _grouped_gemm_launch(
        act, w2, topk_weights, sorted_ids, expert_ids, num_post, top_k, False, True, naive, b
    )
    return _moe_sum_launch(y, top_k)


@register("fused_experts")
def _experts_op(
    lat: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    beta: float,
    linear_beta: float,
) -> torch.Tensor:
    return _experts_launch(lat, w13, w2, topk_weights, topk_ids, beta, linear_beta)


def fused_experts(
    lat: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    beta: float,
    linear_beta: float,
) -> torch.Tensor:
    """sum_k w[b,k] * w2[e] @ SiTU(w13[e] @ lat[b]) for e = ids[b,k]: [B, latent] in lat's dtype."""
    if lat.is_cuda:
        return torch.ops.kimi_k3_stock.fused_experts(lat, w13, w2, topk_weights, topk_ids, beta, linear_beta)
    if use_triton(lat):
        return _experts_launch(lat, w13, w2, topk_weights, topk_ids, beta, linear_beta)
    from .activation import situ_and_mul

    b, top_k = topk_ids.shape
    ids = topk_ids.long().view(-1)
    rows = lat.repeat_interleave(top_k, dim=0)
    h13 = torch.bmm(w13[ids], rows.unsqueeze(-1)).squeeze(-1)
    act = situ_and_mul(h13, beta, linear_beta)
    y = torch.bmm(w2[ids], act.unsqueeze(-1)).squeeze(-1).float() * topk_weights.reshape(-1, 1)
    return y.to(lat.dtype).view(b, top_k, -1).float().sum(1).to(lat.dtype)
