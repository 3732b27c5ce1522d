# Triton kernels are untyped (tl types): relax mypy's strict defaults for this module only.
# mypy: disallow-untyped-defs=False, disallow-untyped-decorators=False
# mypy: disallow-incomplete-defs=False, warn-return-any=False
"""The stock MLA decode: the decode-query concat + latent-cache insert (one kernel, as vLLM's K3 layer does
with `fused_mla_decode_q_concat_kv_cache_insert`), then a two-stage split-KV decode over the 576-wide paged
latent cache like vLLM's Triton MLA backend (`triton_decode_attention.py`): stage 1 grid
(batch, cdiv(heads, BLOCK_H = 16), NUM_KV_SPLITS = 4), BLOCK_N = 32 tokens a step, one latent tile serving
as K (all 576 columns) and V (its first kv_lora columns); stage 2 merges the splits by log-sum-exp.
Written here from the algorithm, not copied.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._runtime import launcher, next_pow2, register, use_triton

NUM_KV_SPLITS = 4
BLOCK_H = 16
BLOCK_N = 32


@triton.jit
def _q_concat_cache_insert_kernel(
    QL,
    QPE,
    KVC,
    KPE,
    Q_OUT,
    CACHE,
    BLOCK_TABLE,
    SEQ_LENS,
    stride_ql_b,
    stride_ql_h,
    stride_qpe_b,
    stride_qpe_h,
    stride_kvc_b,
    stride_kpe_b,
    stride_qo_b,
    stride_qo_h,
    stride_c_blk,
    stride_c_tok,
    stride_bt,
    H,
    KVL: tl.constexpr,
    ROPE: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_L: tl.constexpr,
    BLOCK_R: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_l = tl.arange(0, BLOCK_L)
    offs_r = tl.arange(0, BLOCK_R)
    ml = offs_l < KVL
    mr = offs_r < ROPE
    if h < H:
        ql = tl.load(QL + b * stride_ql_b + h * stride_ql_h + offs_l, mask=ml)
        qpe = tl.load(QPE + b * stride_qpe_b + h * stride_qpe_h + offs_r, mask=mr)
        base = Q_OUT + b * stride_qo_b + h * stride_qo_h
        tl.store(base + offs_l, ql, mask=ml)
        tl.store(base + KVL + offs_r, qpe, mask=mr)
    else:
        pos = tl.load(SEQ_LENS + b) - 1
        blk = tl.load(BLOCK_TABLE + b * stride_bt + pos // PAGE).to(tl.int64)
        slot = CACHE + blk * stride_c_blk + (pos % PAGE) * stride_c_tok
        kvc = tl.load(KVC + b * stride_kvc_b + offs_l, mask=ml)
        kpe = tl.load(KPE + b * stride_kpe_b + offs_r, mask=mr)
        tl.store(slot + offs_l, kvc.to(CACHE.dtype.element_ty), mask=ml)
        tl.store(slot + KVL + offs_r, kpe.to(CACHE.dtype.element_ty), mask=mr)


@triton.jit
def _decode_stage1_kernel(
    Q,
    CACHE,
    BLOCK_TABLE,
    SEQ_LENS,
    MID,
    stride_q_b,
    stride_q_h,
    stride_c_blk,
    stride_c_tok,
    stride_bt,
    stride_m_b,
    stride_m_h,
    stride_m_s,
    sm_scale: tl.constexpr,
    H,
    KVL: tl.constexpr,
    ROPE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DPE: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_H: tl.constexpr,
    VALID_H: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
):
    b = tl.program_id(0)
    hb = tl.program_id(1)
    split = tl.program_id(2)
    heads = hb * VALID_H + tl.arange(0, BLOCK_H)
    mask_h = (heads < (hb + 1) * VALID_H) & (heads < H)
    offs_d = tl.arange(0, BLOCK_D)
    offs_pe = tl.arange(0, BLOCK_DPE)
    mask_d = offs_d < KVL
    mask_pe = offs_pe < ROPE

    q = tl.load(
        Q + b * stride_q_b + heads[:, None] * stride_q_h + offs_d[None, :],
        mask=mask_h[:, None] & mask_d[None, :],
        other=0.0,
    )
    qpe = tl.load(
        Q + b * stride_q_b + heads[:, None] * stride_q_h + KVL + offs_pe[None, :],
        mask=mask_h[:, None] & mask_pe[None, :],
        other=0.0,
    )

    seq_len = tl.load(SEQ_LENS + b)
    per_split = tl.cdiv(seq_len, NUM_SPLITS)
    start = per_split * split
    end = tl.minimum(start + per_split, seq_len)

    m_i = tl.zeros([BLOCK_H], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], dtype=tl.float32)
    if end > start:
        for n0 in tl.range(start, end, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            mask_n = offs_n < end
            page = tl.load(BLOCK_TABLE + b * stride_bt + offs_n // PAGE, mask=mask_n, other=0).to(tl.int64)
            tok = page * stride_c_blk + (offs_n % PAGE) * stride_c_tok
            k = tl.load(
                CACHE + tok[None, :] + offs_d[:, None], mask=mask_n[None, :] & mask_d[:, None], other=0.0
            )  # [D, N]
            kpe = tl.load(
                CACHE + tok[None, :] + KVL + offs_pe[:, None],
                mask=mask_n[None, :] & mask_pe[:, None],
                other=0.0,
            )  # [DPE, N]
            s = tl.dot(q, k) + tl.dot(qpe, kpe)
            s = s * sm_scale
            s = tl.where(mask_h[:, None] & mask_n[None, :], s, float("-inf"))
            m_new = tl.maximum(tl.max(s, 1), m_i)
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new[:, None])
            acc = acc * alpha[:, None] + tl.dot(p.to(k.dtype), tl.trans(k))
            l_i = l_i * alpha + tl.sum(p, 1)
            m_i = m_new
        out = MID + b * stride_m_b + heads[:, None] * stride_m_h + split * stride_m_s + offs_d[None, :]
        tl.store(out, acc / l_i[:, None], mask=mask_h[:, None] & mask_d[None, :])
        tl.store(
            MID + b * stride_m_b + heads * stride_m_h + split * stride_m_s + KVL,
            m_i + tl.log(l_i),
            mask=mask_h,
        )


@triton.jit
def _decode_stage2_kernel(
    MID,
    SEQ_LENS,
    OUT,
    stride_m_b,
    stride_m_h,
    stride_m_s,
    stride_o_b,
    stride_o_h,
    KVL: tl.constexpr,
    BLOCK_D: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < KVL
    seq_len = tl.load(SEQ_LENS + b)
    per_split = tl.cdiv(seq_len, NUM_SPLITS)
    m = float("-inf")
    total = 0.0
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for s in range(NUM_SPLITS):
        start = per_split * s
        end = tl.minimum(start + per_split, seq_len)
        if end > start:
            base = MID + b * stride_m_b + h * stride_m_h + s * stride_m_s
            v = tl.load(base + offs_d, mask=mask_d, other=0.0)
            lse = tl.load(base + KVL)
            m_new = tl.maximum(lse, m)
            old = tl.exp(m - m_new)
            w = tl.exp(lse - m_new)
            acc = acc * old + w * v
            total = total * old + w
            m = m_new
    tl.store(
        OUT + b * stride_o_b + h * stride_o_h + offs_d, (acc / total).to(OUT.dtype.element_ty), mask=mask_d
    )


# ---- launchers -------------------------------------------------------------------------------------------
def _concat_insert_launch(
    ql_nope: torch.Tensor,
    q_pe: torch.Tensor,
    kv_c: torch.Tensor,
    k_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
) -> torch.Tensor:
    b, h, kvl = ql_nope.shape
    rope = q_pe.shape[-1]
    q = torch.empty((b, h, kvl + rope), dtype=ql_nope.dtype, device=ql_nope.device)
    if b == 0:
        return q
    launcher(_q_concat_cache_insert_kernel, ql_nope)[(b, h + 1)](
        ql_nope,
        q_pe,
        kv_c,
        k_pe,
        q,
        kv_cache,
        block_table,
        seq_lens,
        ql_nope.stride(0),
        ql_nope.stride(1),
        q_pe.stride(0),
        q_pe.stride(1),
        kv_c.stride(0),
        k_pe.stride(0),
        q.stride(0),
        q.stride(1),
        kv_cache.stride(0),
        kv_cache.stride(1),
        block_table.stride(0),
        h,
        KVL=kvl,
        ROPE=rope,
        PAGE=kv_cache.shape[1],
        BLOCK_L=next_pow2(kvl),
        BLOCK_R=next_pow2(rope),
        num_warps=4,
    )
    return q


@register("mla_q_concat_cache_insert", mutates_args=("kv_cache",))
def _concat_insert_op(
    ql_nope: torch.Tensor,
    q_pe: torch.Tensor,
    kv_c: torch.Tensor,
    k_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
) -> torch.Tensor:
    return _concat_insert_launch(ql_nope, q_pe, kv_c, k_pe, kv_cache, block_table, seq_lens)


def _decode_launch(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    kv_lora: int,
    sm_scale: float,
) -> torch.Tensor:
    b, h, dq = q.shape
    rope = dq - kv_lora
    out = torch.empty((b, h, kv_lora), dtype=q.dtype, device=q.device)
    if b == 0:
        return out
    mid = torch.empty((b, h, NUM_KV_SPLITS, kv_lora + 1), dtype=torch.float32, device=q.device)
    valid_h = BLOCK_H if h > BLOCK_H else h
    block_d = next_pow2(kv_lora)
    launcher(_decode_stage1_kernel, q)[(b, triton.cdiv(h, valid_h), NUM_KV_SPLITS)](
        q,
        kv_cache,
        block_table,
        seq_lens,
        mid,
        q.stride(0),
        q.stride(1),
        kv_cache.stride(0),
        kv_cache.stride(1),
        block_table.stride(0),
        mid.stride(0),
        mid.stride(1),
        mid.stride(2),
        sm_scale,
        h,
        KVL=kv_lora,
        ROPE=rope,
        BLOCK_D=block_d,
        BLOCK_DPE=max(16, next_pow2(rope)),
        PAGE=kv_cache.shape[1],
        BLOCK_N=BLOCK_N,
        BLOCK_H=BLOCK_H,
        VALID_H=valid_h,
        NUM_SPLITS=NUM_KV_SPLITS,
        num_warps=4,
        num_stages=2,
    )
    launcher(_decode_stage2_kernel, q)[(b, h)](
        mid,
        seq_lens,
        out,
        mid.stride(0),
        mid.stride(1),
        mid.stride(2),
        out.stride(0),
        out.stride(1),
        KVL=kv_lora,
        BLOCK_D=block_d,
        NUM_SPLITS=NUM_KV_SPLITS,
        num_warps=4,
    )
    return out


@register("mla_decode")
def _decode_op(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    kv_lora: int,
    sm_scale: float,
) -> torch.Tensor:
    return _decode_launch(q, kv_cache, block_table, seq_lens, kv_lora, sm_scale)


# ---- public API ------------------------------------------------------------------------------------------
def q_concat_cache_insert(
    ql_nope: torch.Tensor,
    q_pe: torch.Tensor,
    kv_c: torch.Tensor,
    k_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
) -> torch.Tensor:
    """mqa_q = [ql_nope | q_pe] per head; writes [kv_c | k_pe] at position seq_len - 1 of each row."""
    if ql_nope.is_cuda:
        return torch.ops.kimi_k3_stock.mla_q_concat_cache_insert(
            ql_nope, q_pe, kv_c, k_pe, kv_cache, block_table, seq_lens
        )
    if use_triton(ql_nope):
        return _concat_insert_launch(ql_nope, q_pe, kv_c, k_pe, kv_cache, block_table, seq_lens)
    page = kv_cache.shape[1]
    kvl = kv_c.shape[-1]
    for row in range(ql_nope.shape[0]):
        pos = int(seq_lens[row]) - 1
        blk = int(block_table[row, pos // page])
        kv_cache[blk, pos % page, :kvl] = kv_c[row].to(kv_cache.dtype)
        kv_cache[blk, pos % page, kvl:] = k_pe[row].to(kv_cache.dtype)
    return torch.cat([ql_nope, q_pe], dim=-1)


def mla_decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    kv_lora: int,
    sm_scale: float,
) -> torch.Tensor:
    """Latent attention output [B, H, kv_lora] of queries [B, H, kv_lora + rope] over the paged cache."""
    if q.is_cuda:
        return torch.ops.kimi_k3_stock.mla_decode(q, kv_cache, block_table, seq_lens, kv_lora, sm_scale)
    if use_triton(q):
        return _decode_launch(q, kv_cache, block_table, seq_lens, kv_lora, sm_scale)
    page = kv_cache.shape[1]
    out = torch.empty((q.shape[0], q.shape[1], kv_lora), dtype=q.dtype, device=q.device)
    for row in range(q.shape[0]):
        length = int(seq_lens[row])
        blocks = block_table[row, : (length + page - 1) // page].long()
        ctx = kv_cache[blocks].reshape(-1, kv_cache.shape[-1])[:length].float()
        s = (q[row].float() @ ctx.T) * sm_scale
        out[row] = (torch.softmax(s, -1) @ ctx[:, :kv_lora]).to(q.dtype)
    return out
