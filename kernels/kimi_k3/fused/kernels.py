"""Triton kernels of the fused Kimi K3 MLA decode layer (design and figures: fused/NOTES.md).

Seven launches per layer (on a GPU, with FlashInfer's attention: kernel 3 is FlashInfer's FA3 MLA, whose
query `q_b_kernel` packs, then the W_UV + gate epilogue `attn_kernel(MERGE_ONLY)`, optionally folded into
`o_proj_kernel(MERGE)`; see fused/NOTES.md):

1 `qkv_a_kernel`: norm CTAs compute h + r and its sum of squares (input RMSNorm) and zero the layer's
  sync counters; GEMV CTAs run q_a|kv_a|gate on the raw h and r tiles against input_norm-folded weights
  (rstd is a per-row scalar the consumers apply), bf16 out, plus per-block sums of squares of the q_a
  columns (for the q_a RMSNorm).
2 `q_b_kernel`: q role: q_b on the raw q_a columns against q_a_norm-folded weights, both norms applied as
  one per-row scale, then the absorbed W_UK for its nope rows (partials over row chunks, summed in a fixed
  order by the attention kernel) or the raw rope rows; kv role: kv_a RMSNorm + the new token's latent
  written into the paged cache.
3 `attn_kernel`: split-KV MLA decode over the 576-wide latent cache, a head block per CTA (all local heads
  at TP8); merge CTAs (later in launch order) wait for their head block and do the LSE merge + W_UV +
  sigmoid output gate -> attn_out.
4 `o_proj_kernel`: o_proj GEMV + residual add -> residual_out (bf16, the layer's second output) plus
  per-block sums of squares of it (for the post-attention RMSNorm).
5 `moe_front_kernel`: three GEMVs side by side on the raw residual_out against post_norm-folded weights
  (router, latent down, shared w13 with SiTU in registers); top-k CTAs (launched right after the router
  CTAs) wait for the router and do sigmoid + bias top-k + renorm; the last one builds the device-side
  touched-expert list (slots, token lists). No host sync.
6 `expert_up_kernel`: grouped w13 GEMV over touched experts: each expert's rows are read once for all its
  tokens, gate/up rows of a block side by side, SiTU in registers.
7 `expert_down_kernel`: grouped w2 GEMV x routing weight per (token, k) pair; the last CTA of each latent
  column block sums each token's pairs in k order (deterministic) -> latent (bf16) + per-block sums of
  squares; tail CTAs (later in launch order) do shared w2 first, wait for the latent, then latent_up
  against routed_norm-folded weights, + shared -> hidden_out.

Every GEMV K loop streams raw bf16 tiles into the dot: no activation math and no cross-warp reduction inside
the loop (measured on the H200, loops with them streamed 2-6x slower). Norm weights live in prepared weight
copies (`fused.prep`); each RMSNorm's rstd comes from fixed-order partial sums of squares that the previous
kernel wrote.

Cross-CTA dependencies inside one launch never rely on the hardware's dispatch order: a CTA takes its role
index from an atomic ticket, so every CTA a waiter depends on has already started (and will finish) before
the waiter exists. Producers store, barrier, then release-increment a counter; consumers acquire-poll it and
read with `.cg` (L2) loads. No float atomics: every sum has a fixed order, so outputs are bit-reproducible.

GEMV tiles: `MODE == 0` is a CUDA-core FMA tile (activations broadcast over a [BN, BK] weight tile, reduced
once at the end); `MODE == 1` is `tl.dot` with the rows padded to 16 (cp.async-pipelined; the plan picks per
kernel, tensor cores at every batch at TP-1 real shapes). Kernels 2-7 take an optional PDL constexpr
(griddepcontrol; off by default, measured slower).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

# Counter slots in the per-layer int32 `ctr` workspace (zeroed by CTA 0 of qkv_a_kernel every call).
CTR_ATTN_TICKET = 0
CTR_ATTN_HB = 1  # + head block (<= 15 head blocks)
CTR_ROUTER = 16
CTR_NSLOTS = 17
CTR_DOWN_TICKET = 18
CTR_LAT_DONE = 19
CTR_TOPK_DONE = 20
CTR_FRONT_TICKET = 21
CTR_OM_TICKET = 22  # o_proj launch with the W_UV + gate epilogue folded in: role ticket
CTR_OM_DONE = 23  # epilogue programs done
CTR_O = 32  # + o_proj column block (split-K arrivals), up to 480 blocks
CTR_DOWN = 512  # + latent column block, up to 512 blocks
CTR_ECNT = 1024  # + expert: pairs routed to each expert (up to 1024 experts)
CTR_QH = 2048  # + head: q_b CTAs of that head done (the last packs FlashInfer's query), up to 2048 heads
CTR_SIZE = 4096


@triton.jit
def _tanh(x):
    t = tl.exp(-2.0 * tl.abs(x))
    r = (1.0 - t) / (1.0 + t)
    return tl.where(x < 0, -r, r)


@triton.jit
def _situ(g, u, BETA: tl.constexpr, LBETA: tl.constexpr):
    return (BETA * _tanh(g / BETA)) * tl.sigmoid(g) * (LBETA * _tanh(u / LBETA))


@triton.jit
def _mac(acc, x, w, MODE: tl.constexpr):
    """acc += x @ w.T.  x [BB, BK] (any float), w [BN, BK] bf16.

    MODE 0: acc is [BB, BN, BK] fp32 (reduced by `_fin`); MODE 1: acc is [BB, BN] fp32 (tensor cores)."""
    if MODE == 0:
        acc += x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :]
    else:
        acc = tl.dot(x.to(tl.bfloat16), tl.trans(w), acc)
    return acc


@triton.jit
def _acc_init(BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, MODE: tl.constexpr):
    acc = tl.zeros([BB, BN, BK], dtype=tl.float32) if MODE == 0 else tl.zeros([BB, BN], dtype=tl.float32)
    return acc


@triton.jit
def _fin(acc, MODE: tl.constexpr):
    out = tl.sum(acc, axis=2) if MODE == 0 else acc
    return out


@triton.jit
def _small_mm(a, b, MODE: tl.constexpr):
    """a [M, K] fp32 @ b [K, N] bf16 -> [M, N] fp32 (whole operands in registers)."""
    if MODE == 0:
        out = tl.sum(a[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)
    else:
        out = tl.dot(a.to(tl.bfloat16), b)
    return out


@triton.jit
def _sum_parts(ptr, B, rb, NP: tl.constexpr, PC: tl.constexpr):
    """sum over p < NP of ptr[p, rb] (partials stored [NP, B]), in a fixed order."""
    acc = tl.zeros([rb.shape[0], PC], dtype=tl.float32)
    rp = tl.arange(0, PC)
    for p0 in tl.static_range(0, NP, PC):
        pm = (p0 + rp) < NP
        acc += tl.load(
            ptr + (p0 + rp)[None, :] * B + rb[:, None],
            mask=pm[None, :] & (rb < B)[:, None],
            other=0.0,
            cache_modifier=".cg",
        )
    return tl.sum(acc, axis=1)


@triton.jit
def _pdl_enter(PDL: tl.constexpr):
    """PDL (kernels 2..7): let the next kernel launch now (its CTAs take SMs this kernel's tail frees; they
    wait in `_pdl_wait`), so its launch and its L2 prefetch overlap this kernel's drain."""
    if PDL:
        gdc_launch_dependents()


@triton.jit
def _pdl_wait(PDL: tl.constexpr):
    """PDL: block until the previous kernel has completed and its writes are visible. Every CTA of a PDL
    kernel calls this before its first access to anything but static weights (so completion is transitive:
    a kernel completes only after the one before it did)."""
    if PDL:
        gdc_wait()


@triton.jit
def _l2_prefetch(base, rows, NROWS: tl.constexpr, LD: tl.constexpr, k0, PF: tl.constexpr):
    """Before `_pdl_wait`: prefetch into L2 the PF bytes of bf16 weight rows `rows` (clamped to the matrix)
    from column k0: one `prefetch.global.L2` per 128-byte line. Static weights only; a hint, no result."""
    if PF > 0:
        NL: tl.constexpr = PF // 128
        rr = tl.minimum(rows, NROWS - 1)
        cols = tl.minimum(k0 + tl.arange(0, NL) * 64, LD - 1)
        ptrs = base + rr[:, None] * LD + cols[None, :]
        tl.inline_asm_elementwise(
            "prefetch.global.L2 [$1]; // $0", "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1
        )


# ------------------------------------------------------------------------------------------------------------
# 1. add + RMSNorm -> q_a | kv_a | gate GEMV
# ------------------------------------------------------------------------------------------------------------
@triton.jit
def qkv_a_kernel(
    h_ptr,
    r_ptr,
    w_ptr,  # hidden [B,H] bf16, residual [B,H] bf16, W' = w_qkv_a_g * input_norm [R,H] bf16
    raw_ptr,
    ssq_ptr,
    resid_ptr,
    ssin_ptr,  # out: raw [B,R] bf16, q_a-column sum sq [NQC,B], h+r [B,H], sum sq [B]
    ctr_ptr,  # int32 [CTR_N]: zeroed here
    B,
    H: tl.constexpr,
    R: tl.constexpr,
    QL: tl.constexpr,
    CTR_N: tl.constexpr,
    NX: tl.constexpr,
    XR: tl.constexpr,
    XK: tl.constexpr,
    BB: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    MODE: tl.constexpr,
):
    pid = tl.program_id(0)
    if pid < NX:
        # norm CTA: residual = h + r and its sum of squares for rows [pid*XR, pid*XR + XR)
        if pid == 0:
            rc = tl.arange(0, CTR_N)
            tl.store(ctr_ptr + rc, tl.zeros([CTR_N], dtype=tl.int32))
        rr = pid * XR + tl.arange(0, XR)
        rm = rr < B
        sq = tl.zeros([XR, XK], dtype=tl.float32)
        for k0 in range(0, H, XK):
            rk = k0 + tl.arange(0, XK)
            m2 = rm[:, None] & (rk < H)[None, :]
            x = tl.load(h_ptr + rr[:, None] * H + rk[None, :], mask=m2, other=0.0).to(tl.float32)
            x += tl.load(r_ptr + rr[:, None] * H + rk[None, :], mask=m2, other=0.0).to(tl.float32)
            tl.store(resid_ptr + rr[:, None] * H + rk[None, :], x, mask=m2)
            sq += x * x
        tl.store(ssin_ptr + rr, tl.sum(sq, axis=1), mask=rm)
    else:
        nb = pid - NX
        rb = tl.arange(0, BB)
        bm = rb < B
        rn = nb * BN + tl.arange(0, BN)
        nm = rn < R
        acc = _acc_init(BB, BN, BK, MODE)
        for k0 in range(0, H, BK):
            rk = k0 + tl.arange(0, BK)
            km = rk < H
            m2 = bm[:, None] & km[None, :]
            hx = tl.load(h_ptr + rb[:, None] * H + rk[None, :], mask=m2, other=0.0)
            rx = tl.load(r_ptr + rb[:, None] * H + rk[None, :], mask=m2, other=0.0)
            w = tl.load(w_ptr + rn[:, None] * H + rk[None, :], mask=nm[:, None] & km[None, :], other=0.0)
            if MODE == 0:
                acc = _mac(acc, hx.to(tl.float32) + rx.to(tl.float32), w, MODE)
            else:
                acc = tl.dot(hx, tl.trans(w), acc)  # (h + r) W' as two dots on the raw tiles
                acc = tl.dot(rx, tl.trans(w), acc)
        y = _fin(acc, MODE).to(tl.bfloat16)
        m2 = bm[:, None] & nm[None, :]
        tl.store(raw_ptr + rb[:, None] * R + rn[None, :], y, mask=m2)
        NQC: tl.constexpr = (QL + BN - 1) // BN
        if nb < NQC:
            yf = tl.where(m2 & (rn < QL)[None, :], y.to(tl.float32), 0.0)
            tl.store(ssq_ptr + nb * B + rb, tl.sum(yf * yf, axis=1), mask=bm)


# ------------------------------------------------------------------------------------------------------------
# 2. q_a norm -> q_b -> absorbed W_UK (q role) | kv_a norm -> paged cache write (kv role)
# ------------------------------------------------------------------------------------------------------------
@triton.jit
def _q_role(
    pid,
    raw_ptr,
    ssq_ptr,
    ssin_ptr,
    wqb_ptr,
    wkvb_ptr,
    ql_ptr,
    qpe_ptr,
    B,
    q_scale,
    H: tl.constexpr,
    R: tl.constexpr,
    EPS: tl.constexpr,
    QL: tl.constexpr,
    KL: tl.constexpr,
    DN: tl.constexpr,
    DR: tl.constexpr,
    DV: tl.constexpr,
    NH: tl.constexpr,
    CN: tl.constexpr,
    CNP: tl.constexpr,
    BB: tl.constexpr,
    BK: tl.constexpr,
    MODE: tl.constexpr,
    KLP: tl.constexpr,
    LC: tl.constexpr,
    NQC: tl.constexpr,
    PC: tl.constexpr,
):
    NCN: tl.constexpr = DN // CN
    NCH: tl.constexpr = (DN + DR) // CN
    rb = tl.arange(0, BB)
    bm = rb < B
    h = pid // NCH
    c = pid % NCH
    ri = tl.arange(0, CNP)
    rmask = ri < CN
    rows = h * (DN + DR) + c * CN + ri  # nope rows then rope rows, CN at a time
    acc = _acc_init(BB, CNP, BK, MODE)
    for k0 in range(0, QL, BK):
        rk = k0 + tl.arange(0, BK)
        km = rk < QL
        x = tl.load(raw_ptr + rb[:, None] * R + rk[None, :], mask=bm[:, None] & km[None, :], other=0.0)
        w = tl.load(wqb_ptr + rows[:, None] * QL + rk[None, :], mask=rmask[:, None] & km[None, :], other=0.0)
        acc = _mac(acc, x, w, MODE)
    # q_c = rstd_in * raw; RMSNorm(q_c) = q_c * rsqrt(mean(q_c^2) + eps): one per-row scale on raw @ W'
    rstd_in = tl.rsqrt(tl.load(ssin_ptr + rb, mask=bm, other=0.0) / H + EPS)
    sraw = _sum_parts(ssq_ptr, B, rb, NQC, PC)
    scale = rstd_in * tl.rsqrt(rstd_in * rstd_in * sraw / QL + EPS) * q_scale
    q = _fin(acc, MODE) * scale[:, None]  # [BB, CNP]
    if c >= NCN:
        cp = (c - NCN) * CN + ri
        tl.store(
            qpe_ptr + rb[:, None] * (NH * DR) + h * DR + cp[None, :], q, mask=bm[:, None] & rmask[None, :]
        )
    else:
        # absorbed query: ql[b, l] (partial over this chunk) = sum_p q[b, p] * W_UK[h][c*CN + p, l]
        wrow = h * (DN + DV) + c * CN + ri
        for l0 in tl.static_range(0, KLP, LC):
            rl = l0 + tl.arange(0, LC)
            lm = rl < KL
            wuk = tl.load(
                wkvb_ptr + wrow[:, None] * KL + rl[None, :], mask=rmask[:, None] & lm[None, :], other=0.0
            )
            part = _small_mm(q, wuk, MODE)  # [BB, LC]
            tl.store(
                ql_ptr + c * B * NH * KL + rb[:, None] * (NH * KL) + h * KL + rl[None, :],
                part,
                mask=bm[:, None] & lm[None, :],
            )


@triton.jit
def _pack_head(
    h,
    ql_ptr,
    qpe_ptr,
    q_ptr,
    B,
    BB: tl.constexpr,
    KL: tl.constexpr,
    DR: tl.constexpr,
    NH: tl.constexpr,
    NCN: tl.constexpr,
    KLP: tl.constexpr,
    LC: tl.constexpr,
    DRP: tl.constexpr,
):
    """q[b, h] = [sum_c ql_part[c, b, h] (c = 0, 1, .. in order) | q_pe[b, h]] as bf16, rows b < B (<= BB)."""
    rb = tl.arange(0, BB)
    bm = rb < B
    base = q_ptr + (rb[:, None] * NH + h) * (KL + DR)
    for l0 in tl.static_range(0, KLP, LC):
        rl = l0 + tl.arange(0, LC)
        m2 = bm[:, None] & (rl < KL)[None, :]
        ql = tl.zeros([BB, LC], dtype=tl.float32)
        for c in tl.static_range(NCN):
            ql += tl.load(
                ql_ptr + c * B * NH * KL + rb[:, None] * (NH * KL) + h * KL + rl[None, :],
                mask=m2,
                other=0.0,
                cache_modifier=".cg",
            )
        tl.store(base + rl[None, :], ql.to(tl.bfloat16), mask=m2)
    rp = tl.arange(0, DRP)
    pm = bm[:, None] & (rp < DR)[None, :]
    qpe = tl.load(
        qpe_ptr + rb[:, None] * (NH * DR) + h * DR + rp[None, :], mask=pm, other=0.0, cache_modifier=".cg"
    )
    tl.store(base + KL + rp[None, :], qpe.to(tl.bfloat16), mask=pm)


@triton.jit
def _kv_role(
    r0,
    raw_ptr,
    ssin_ptr,
    kva_norm_ptr,
    kv_cache_ptr,
    block_table_ptr,
    seq_lens_ptr,
    max_blocks,
    B,
    H: tl.constexpr,
    R: tl.constexpr,
    EPS: tl.constexpr,
    QL: tl.constexpr,
    KL: tl.constexpr,
    DR: tl.constexpr,
    BS: tl.constexpr,
    KLP: tl.constexpr,
    DRP: tl.constexpr,
    KVR: tl.constexpr,
):
    rr = r0 + tl.arange(0, KVR)
    rm = rr < B
    rstd_in = tl.rsqrt(tl.load(ssin_ptr + rr, mask=rm, other=0.0) / H + EPS)
    rl = tl.arange(0, KLP)
    lm = rl < KL
    m2 = rm[:, None] & lm[None, :]
    kv = (
        tl.load(raw_ptr + rr[:, None] * R + QL + rl[None, :], mask=m2, other=0.0).to(tl.float32)
        * rstd_in[:, None]
    )
    rstd_kv = tl.rsqrt(tl.sum(kv * kv, axis=1) / KL + EPS)
    gk = tl.load(kva_norm_ptr + rl, mask=lm, other=0.0).to(tl.float32)
    kvn = kv * rstd_kv[:, None] * gk[None, :]
    rp = tl.arange(0, DRP)
    pm = rm[:, None] & (rp < DR)[None, :]
    kpe = tl.load(raw_ptr + rr[:, None] * R + QL + KL + rp[None, :], mask=pm, other=0.0).to(tl.float32)
    kpe = kpe * rstd_in[:, None]
    pos = tl.load(seq_lens_ptr + rr, mask=rm, other=1) - 1
    blk = tl.load(block_table_ptr + rr * max_blocks + pos // BS, mask=rm, other=0).to(tl.int64)
    row = (blk * BS + pos % BS) * (KL + DR)
    tl.store(kv_cache_ptr + row[:, None] + rl[None, :], kvn.to(tl.bfloat16), mask=m2)
    tl.store(kv_cache_ptr + row[:, None] + KL + rp[None, :], kpe.to(tl.bfloat16), mask=pm)


@triton.jit
def q_b_kernel(
    raw_ptr,
    ssq_ptr,
    ssin_ptr,  # from qkv_a_kernel
    kva_norm_ptr,
    wqb_ptr,
    wkvb_ptr,  # kv_a_norm, W' = w_q_b * q_a_norm, w_kv_b
    ql_ptr,
    qpe_ptr,  # out: ql partials [NCN, B, NH, KL] fp32, q_pe [B, NH, DR] fp32 (both pre-scaled)
    kv_cache_ptr,
    block_table_ptr,
    seq_lens_ptr,
    max_blocks,
    B,
    q_scale,
    H: tl.constexpr,
    R: tl.constexpr,
    EPS: tl.constexpr,
    QL: tl.constexpr,
    KL: tl.constexpr,
    DN: tl.constexpr,
    DR: tl.constexpr,
    DV: tl.constexpr,
    NH: tl.constexpr,
    BS: tl.constexpr,
    CN: tl.constexpr,
    CNP: tl.constexpr,  # w_q_b rows per q CTA (divides nope and rope), padded to >= 16
    BB: tl.constexpr,
    BK: tl.constexpr,
    MODE: tl.constexpr,
    KLP: tl.constexpr,
    LC: tl.constexpr,
    DRP: tl.constexpr,  # KL padded, KL chunk for the absorb, DR padded
    KVR: tl.constexpr,
    NQC: tl.constexpr,
    PC: tl.constexpr,
    PDL: tl.constexpr = False,
    PF: tl.constexpr = 0,
    PACK: tl.constexpr = False,  # FlashInfer attention: also write the packed bf16 query q_ptr [B, NH, KL+DR]
    q_ptr=None,
    ctr_ptr=None,
    CTR_QH_SLOT: tl.constexpr = 2048,
):
    pid = tl.program_id(0)
    NQ: tl.constexpr = NH * ((DN + DR) // CN)
    _pdl_enter(PDL)
    if PF > 0:
        # this q CTA's w_q_b rows (CN rows of head pid // ((DN + DR) // CN)), from column 0
        _l2_prefetch(wqb_ptr, tl.minimum(pid, NQ - 1) * CN + tl.arange(0, CNP), NH * (DN + DR), QL, 0, PF)
    _pdl_wait(PDL)
    if pid < NQ:
        _q_role(
            pid,
            raw_ptr,
            ssq_ptr,
            ssin_ptr,
            wqb_ptr,
            wkvb_ptr,
            ql_ptr,
            qpe_ptr,
            B,
            q_scale,
            H,
            R,
            EPS,
            QL,
            KL,
            DN,
            DR,
            DV,
            NH,
            CN,
            CNP,
            BB,
            BK,
            MODE,
            KLP,
            LC,
            NQC,
            PC,
        )
        if PACK:
            # FlashInfer's packed bf16 query: the head's last q CTA to finish sums the absorbed-query partials
            # in chunk order and packs [ql | q_pe] (the former attn_pack_kernel, same sums, same bits)
            NCH: tl.constexpr = (DN + DR) // CN
            h = pid // NCH
            tl.debug_barrier()
            arrived = tl.atomic_add(ctr_ptr + CTR_QH_SLOT + h, 1, sem="acq_rel")
            if arrived == NCH - 1:
                _pack_head(h, ql_ptr, qpe_ptr, q_ptr, B, BB, KL, DR, NH, DN // CN, KLP, LC, DRP)
    else:
        _kv_role(
            (pid - NQ) * KVR,
            raw_ptr,
            ssin_ptr,
            kva_norm_ptr,
            kv_cache_ptr,
            block_table_ptr,
            seq_lens_ptr,
            max_blocks,
            B,
            H,
            R,
            EPS,
            QL,
            KL,
            DR,
            BS,
            KLP,
            DRP,
            KVR,
        )


# ------------------------------------------------------------------------------------------------------------
# 3. split-KV MLA decode + (merge, W_UV, output gate)
# ------------------------------------------------------------------------------------------------------------
@triton.jit
def _attn_role(
    v,
    ql_ptr,
    qpe_ptr,
    kv_cache_ptr,
    block_table_ptr,
    seq_lens_ptr,
    max_blocks,
    opart_ptr,
    lse_ptr,
    ctr_ptr,
    B,
    S,
    KL: tl.constexpr,
    DR: tl.constexpr,
    NH: tl.constexpr,
    BS: tl.constexpr,
    NCN: tl.constexpr,
    BH: tl.constexpr,
    BLOCK_N: tl.constexpr,
    KLP: tl.constexpr,
    DRP: tl.constexpr,
):
    NHB: tl.constexpr = (NH + BH - 1) // BH
    hb = v % NHB
    s = (v // NHB) % S
    b = v // (NHB * S)
    rh = hb * BH + tl.arange(0, BH)
    hm = rh < NH
    rl = tl.arange(0, KLP)
    lm = rl < KL
    rp = tl.arange(0, DRP)
    pm = rp < DR
    ql = tl.zeros([BH, KLP], dtype=tl.float32)
    for c in tl.static_range(NCN):  # fixed order over the q_b row chunks
        ql += tl.load(
            ql_ptr + c * B * NH * KL + b * NH * KL + rh[:, None] * KL + rl[None, :],
            mask=hm[:, None] & lm[None, :],
            other=0.0,
        )
    qlb = ql.to(tl.bfloat16)
    qpe = tl.load(
        qpe_ptr + b * NH * DR + rh[:, None] * DR + rp[None, :], mask=hm[:, None] & pm[None, :], other=0.0
    ).to(tl.bfloat16)
    seq_len = tl.load(seq_lens_ptr + b)
    per = tl.cdiv(tl.cdiv(seq_len, S), BLOCK_N) * BLOCK_N
    t_start = s * per
    t_end = tl.minimum(seq_len, t_start + per)
    m_i = tl.full([BH], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BH], dtype=tl.float32)
    acc = tl.zeros([BH, KLP], dtype=tl.float32)
    for t0 in range(t_start, t_end, BLOCK_N):
        rt = t0 + tl.arange(0, BLOCK_N)
        tm = rt < t_end
        blk = tl.load(block_table_ptr + b * max_blocks + rt // BS, mask=tm, other=0).to(tl.int64)
        row = (blk * BS + rt % BS) * (KL + DR)
        # masked loads: cache slots past seq_len (poisoned in the tests) are never read
        kv = tl.load(kv_cache_ptr + row[:, None] + rl[None, :], mask=tm[:, None] & lm[None, :], other=0.0)
        kpe = tl.load(
            kv_cache_ptr + row[:, None] + KL + rp[None, :], mask=tm[:, None] & pm[None, :], other=0.0
        )
        sc = tl.dot(qlb, tl.trans(kv))
        sc = tl.dot(qpe, tl.trans(kpe), sc)  # log2-domain scores (q pre-scaled by scale * log2 e)
        sc = tl.where(tm[None, :], sc, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(sc, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(sc - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(tl.bfloat16), kv, acc)  # V = the first KL columns of the same tile
        m_i = m_new
    has = l_i > 0.0
    o = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    base = (b * S + s) * NH
    tl.store(opart_ptr + (base + rh[:, None]) * KL + rl[None, :], o, mask=hm[:, None] & lm[None, :])
    tl.store(lse_ptr + base + rh, lse, mask=hm)
    tl.debug_barrier()
    tl.atomic_add(ctr_ptr + 1 + hb, 1, sem="release")  # CTR_ATTN_HB + hb


@triton.jit
def _merge_row(
    opart_ptr,
    lse_ptr,
    b,
    h,
    l0,
    S,
    NH: tl.constexpr,
    KL: tl.constexpr,
    LC: tl.constexpr,
    SP: tl.constexpr,
    SC: tl.constexpr,
):
    """One row's LSE-merged latent columns [l0, l0 + LC) of head h, splits read SC at a time (vectorised)."""
    rs = tl.arange(0, SP)
    ls = tl.load(lse_ptr + (b * S + rs) * NH + h, mask=rs < S, other=float("-inf"), cache_modifier=".cg")
    mx = tl.max(ls, axis=0)
    mx = tl.where(mx == float("-inf"), 0.0, mx)
    den = tl.sum(tl.exp2(ls - mx), axis=0)
    den = tl.where(den > 0.0, den, 1.0)
    rl = l0 + tl.arange(0, LC)
    lm = rl < KL
    acc = tl.zeros([LC], dtype=tl.float32)
    for s0 in range(0, S, SC):
        rc = s0 + tl.arange(0, SC)
        cm = rc < S
        lc = tl.load(lse_ptr + (b * S + rc) * NH + h, mask=cm, other=float("-inf"), cache_modifier=".cg")
        wc = tl.exp2(lc - mx) / den
        o = tl.load(
            opart_ptr + ((b * S + rc[:, None]) * NH + h) * KL + rl[None, :],
            mask=cm[:, None] & lm[None, :],
            other=0.0,
            cache_modifier=".cg",
        )
        acc += tl.sum(wc[:, None] * o, axis=0)
    return acc


@triton.jit
def _wuv_dot(out, lat, wkvb_ptr, wrow, rl, lm, vm, KL: tl.constexpr):
    """out += lat (latent columns rl, bf16-rounded) @ W_UV^T (rows wrow of w_kv_b, columns rl)."""
    wuv = tl.load(wkvb_ptr + wrow[None, :] * KL + rl[:, None], mask=lm[:, None] & vm[None, :], other=0.0)
    return tl.dot(lat.to(tl.bfloat16), wuv, out)


@triton.jit
def _wuv_merged(
    out, opart_ptr, rb, bm, h, wkvb_ptr, wrow, vm, NH: tl.constexpr, KL: tl.constexpr, KLP: tl.constexpr,
    LC: tl.constexpr
):
    """out += the merged latent of head h (bf16 [B, NH, KL] at opart_ptr, rows rb, e.g. FlashInfer's)
    @ W_UV^T, LC latent columns at a time (`_merge_role`'s ONE case and `_merge_one`)."""
    for l0 in tl.static_range(0, KLP, LC):
        rl = l0 + tl.arange(0, LC)
        lm = rl < KL
        lat = tl.load(
            opart_ptr + (rb[:, None] * NH + h) * KL + rl[None, :],
            mask=bm[:, None] & lm[None, :],
            other=0.0,
        )
        out = _wuv_dot(out, lat, wkvb_ptr, wrow, rl, lm, vm, KL)
    return out


@triton.jit
def _gate_store(
    out,
    rb,
    bm,
    rv,
    vm,
    h,
    raw_ptr,
    ssin_ptr,
    attn_out_ptr,
    H: tl.constexpr,
    R: tl.constexpr,
    EPS: tl.constexpr,
    GATE_OFF: tl.constexpr,
    USE_GATE: tl.constexpr,
    DV: tl.constexpr,
    NH: tl.constexpr,
):
    """The W_UV epilogue's tail: attn * sigmoid(gate) (the gate rows of q_a | kv_a | gate, normed by the input
    rstd), stored bf16 into attn_out [B, NH * DV] at rows rb, head h, value columns rv."""
    if USE_GATE:
        rstd_in = tl.rsqrt(tl.load(ssin_ptr + rb, mask=bm, other=0.0) / H + EPS)
        g = tl.load(
            raw_ptr + rb[:, None] * R + GATE_OFF + h * DV + rv[None, :],
            mask=bm[:, None] & vm[None, :],
            other=0.0,
        ).to(tl.float32)
        out = out * tl.sigmoid(g * rstd_in[:, None])
    tl.store(
        attn_out_ptr + rb[:, None] * (NH * DV) + h * DV + rv[None, :],
        out.to(tl.bfloat16),
        mask=bm[:, None] & vm[None, :],
    )


@triton.jit
def _merge_role(
    m,
    opart_ptr,
    lse_ptr,
    wkvb_ptr,
    raw_ptr,
    ssin_ptr,
    attn_out_ptr,
    ctr_ptr,
    B,
    S,
    H: tl.constexpr,
    R: tl.constexpr,
    EPS: tl.constexpr,
    GATE_OFF: tl.constexpr,
    USE_GATE: tl.constexpr,
    KL: tl.constexpr,
    DN: tl.constexpr,
    DV: tl.constexpr,
    NH: tl.constexpr,
    BH: tl.constexpr,
    KLP: tl.constexpr,
    DVP: tl.constexpr,
    MB: tl.constexpr,
    LC: tl.constexpr,
    SP: tl.constexpr,
    SC: tl.constexpr,
    BY_ROW: tl.constexpr,
    ONE: tl.constexpr = False,
):
    h = m % NH
    b0 = (m // NH) * MB
    hb = h // BH
    if not ONE:
        need = B * S
        cnt = tl.atomic_add(ctr_ptr + 1 + hb, 0, sem="acquire")
        while cnt < need:
            cnt = tl.atomic_add(ctr_ptr + 1 + hb, 0, sem="acquire")
        tl.debug_barrier()
    rb = b0 + tl.arange(0, MB)
    bm = rb < B
    rv = tl.arange(0, DVP)
    vm = rv < DV
    out = tl.zeros([MB, DVP], dtype=tl.float32)
    wrow = h * (DN + DV) + DN + rv  # W_UV rows of head h inside w_kv_b
    if ONE:
        # the latent output is already merged (bf16 [B, NH, KL], e.g. FlashInfer's): W_UV + gate only
        out = _wuv_merged(out, opart_ptr, rb, bm, h, wkvb_ptr, wrow, vm, NH, KL, KLP, LC)  # [MB, DVP]
    elif BY_ROW:
        # many splits, few rows: splits vectorised, rows one at a time
        n_rows = tl.minimum(B - b0, MB)
        for l0 in tl.static_range(0, KLP, LC):
            rl = l0 + tl.arange(0, LC)
            lm = rl < KL
            lat = tl.zeros([MB, LC], dtype=tl.float32)
            for i in range(0, n_rows):
                r = _merge_row(opart_ptr, lse_ptr, b0 + i, h, l0, S, NH, KL, LC, SP, SC)
                lat = tl.where((tl.arange(0, MB) == i)[:, None], r[None, :], lat)
            out = _wuv_dot(out, lat, wkvb_ptr, wrow, rl, lm, vm, KL)  # [MB, DVP]
    else:
        # few splits, many rows: rows vectorised, splits one at a time
        mx = tl.full([MB], float("-inf"), dtype=tl.float32)
        for s in range(0, S):
            ls = tl.load(lse_ptr + (rb * S + s) * NH + h, mask=bm, other=float("-inf"), cache_modifier=".cg")
            mx = tl.maximum(mx, ls)
        mx = tl.where(mx == float("-inf"), 0.0, mx)
        den = tl.zeros([MB], dtype=tl.float32)
        for s in range(0, S):
            ls = tl.load(lse_ptr + (rb * S + s) * NH + h, mask=bm, other=float("-inf"), cache_modifier=".cg")
            den += tl.exp2(ls - mx)
        den = tl.where(den > 0.0, den, 1.0)
        for l0 in tl.static_range(0, KLP, LC):
            rl = l0 + tl.arange(0, LC)
            lm = rl < KL
            lat = tl.zeros([MB, LC], dtype=tl.float32)
            for s in range(0, S):
                ls = tl.load(
                    lse_ptr + (rb * S + s) * NH + h, mask=bm, other=float("-inf"), cache_modifier=".cg"
                )
                wgt = tl.exp2(ls - mx) / den
                o = tl.load(
                    opart_ptr + ((rb[:, None] * S + s) * NH + h) * KL + rl[None, :],
                    mask=bm[:, None] & lm[None, :],
                    other=0.0,
                    cache_modifier=".cg",
                )
                lat += wgt[:, None] * o
            out = _wuv_dot(out, lat, wkvb_ptr, wrow, rl, lm, vm, KL)  # [MB, DVP]
    _gate_store(
        out, rb, bm, rv, vm, h, raw_ptr, ssin_ptr, attn_out_ptr, H, R, EPS, GATE_OFF, USE_GATE, DV, NH
    )


@triton.jit
def _merge_one(
    m,
    opart_ptr,
    wkvb_ptr,
    raw_ptr,
    ssin_ptr,
    attn_out_ptr,
    B,
    H: tl.constexpr,
    R: tl.constexpr,
    EPS: tl.constexpr,
    GATE_OFF: tl.constexpr,
    USE_GATE: tl.constexpr,
    KL: tl.constexpr,
    DN: tl.constexpr,
    DV: tl.constexpr,
    NH: tl.constexpr,
    KLP: tl.constexpr,
    MB: tl.constexpr,
    LC: tl.constexpr,
    VC: tl.constexpr,
    PDL: tl.constexpr,
    PF: tl.constexpr,
):
    """W_UV + output gate on an already merged latent output (bf16 [B, NH, KL], FlashInfer's) for head
    m % NH, value columns [vs*VC, vs*VC + VC) and a block of MB rows (the same per-element sums as the ONE
    path of `_merge_role`: one dot over KL per output element, in LC chunks)."""
    NV: tl.constexpr = (DV + VC - 1) // VC
    h = m % NH
    vs = (m // NH) % NV
    b0 = (m // (NH * NV)) * MB
    rv = vs * VC + tl.arange(0, VC)
    vm = rv < DV
    wrow = h * (DN + DV) + DN + rv  # W_UV rows of head h inside w_kv_b
    _pdl_enter(PDL)
    _l2_prefetch(wkvb_ptr, wrow, NH * (DN + DV), KL, 0, PF)
    _pdl_wait(PDL)
    rb = b0 + tl.arange(0, MB)
    bm = rb < B
    out = tl.zeros([MB, VC], dtype=tl.float32)
    out = _wuv_merged(out, opart_ptr, rb, bm, h, wkvb_ptr, wrow, vm, NH, KL, KLP, LC)  # [MB, VC]
    _gate_store(
        out, rb, bm, rv, vm, h, raw_ptr, ssin_ptr, attn_out_ptr, H, R, EPS, GATE_OFF, USE_GATE, DV, NH
    )


@triton.jit
def attn_kernel(
    ql_ptr,
    qpe_ptr,
    kv_cache_ptr,
    block_table_ptr,
    seq_lens_ptr,
    max_blocks,
    opart_ptr,
    lse_ptr,  # scratch: [B, S, NH, KL] fp32, [B, S, NH] fp32
    wkvb_ptr,
    raw_ptr,
    ssin_ptr,  # W_UV rows live in w_kv_b; gate columns in the qkv_a output
    attn_out_ptr,  # out: [B, NH*DV] bf16
    ctr_ptr,
    B,
    S,
    H: tl.constexpr,
    R: tl.constexpr,
    EPS: tl.constexpr,
    GATE_OFF: tl.constexpr,
    USE_GATE: tl.constexpr,
    KL: tl.constexpr,
    DN: tl.constexpr,
    DR: tl.constexpr,
    DV: tl.constexpr,
    NH: tl.constexpr,
    BS: tl.constexpr,
    NCN: tl.constexpr,
    BH: tl.constexpr,
    BLOCK_N: tl.constexpr,
    KLP: tl.constexpr,
    DRP: tl.constexpr,
    DVP: tl.constexpr,
    MB: tl.constexpr,
    LC: tl.constexpr,
    SP: tl.constexpr,
    SC: tl.constexpr,
    BY_ROW: tl.constexpr,
    MERGE_ONLY: tl.constexpr = False,
    PDL: tl.constexpr = False,
    PF: tl.constexpr = 0,
    VC: tl.constexpr = 128,
):
    if MERGE_ONLY:
        # the attention ran elsewhere (FlashInfer FA3 MLA into opart_ptr = [B, NH, KL] bf16): only the
        # W_UV + output-gate epilogue, one program per (head, VC value columns, row block)
        _merge_one(
            tl.program_id(0), opart_ptr, wkvb_ptr, raw_ptr, ssin_ptr, attn_out_ptr, B, H, R, EPS, GATE_OFF,
            USE_GATE, KL, DN, DV, NH, KLP, MB, LC, VC, PDL, PF,
        )
        return
    _pdl_enter(PDL)
    _pdl_wait(PDL)
    # role from a ticket taken at start: every merge CTA starts after all attention CTAs have started
    v = tl.atomic_add(ctr_ptr + 0, 1)  # CTR_ATTN_TICKET
    NHB: tl.constexpr = (NH + BH - 1) // BH
    n_attn = B * S * NHB
    if v < n_attn:
        _attn_role(
            v,
            ql_ptr,
            qpe_ptr,
            kv_cache_ptr,
            block_table_ptr,
            seq_lens_ptr,
            max_blocks,
            opart_ptr,
            lse_ptr,
            ctr_ptr,
            B,
            S,
            KL,
            DR,
            NH,
            BS,
            NCN,
            BH,
            BLOCK_N,
            KLP,
            DRP,
        )
    else:
        _merge_role(
            v - n_attn,
            opart_ptr,
            lse_ptr,
            wkvb_ptr,
            raw_ptr,
            ssin_ptr,
            attn_out_ptr,
            ctr_ptr,
            B,
            S,
            H,
            R,
            EPS,
            GATE_OFF,
            USE_GATE,
            KL,
            DN,
            DV,
            NH,
            BH,
            KLP,
            DVP,
            MB,
            LC,
            SP,
            SC,
            BY_ROW,
            False,
        )


@triton.jit
def attn_pack_kernel(
    ql_ptr,
    qpe_ptr,  # [NCN, B, NH, KL] fp32 partials, [B, NH, DR] fp32 (unscaled: q_b ran with q_scale 1)
    q_ptr,  # out: [B, NH, KL + DR] bf16, the packed MQA query FlashInfer's MLA reads
    B,
    KL: tl.constexpr,
    DR: tl.constexpr,
    NH: tl.constexpr,
    NCN: tl.constexpr,
    BH: tl.constexpr,
    KLP: tl.constexpr,
    DRP: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """Sum the q_b kernel's absorbed-query partials in a fixed order and pack [ql | q_pe] as bf16."""
    _pdl_enter(PDL)
    _pdl_wait(PDL)
    NHB: tl.constexpr = (NH + BH - 1) // BH
    v = tl.program_id(0)
    hb = v % NHB
    b = v // NHB
    rh = hb * BH + tl.arange(0, BH)
    hm = rh < NH
    rl = tl.arange(0, KLP)
    lm = rl < KL
    rp = tl.arange(0, DRP)
    pm = rp < DR
    ql = tl.zeros([BH, KLP], dtype=tl.float32)
    for c in tl.static_range(NCN):
        ql += tl.load(
            ql_ptr + c * B * NH * KL + b * NH * KL + rh[:, None] * KL + rl[None, :],
            mask=hm[:, None] & lm[None, :],
            other=0.0,
        )
    qpe = tl.load(
        qpe_ptr + b * NH * DR + rh[:, None] * DR + rp[None, :], mask=hm[:, None] & pm[None, :], other=0.0
    )
    base = q_ptr + (b * NH + rh[:, None]) * (KL + DR)
    tl.store(base + rl[None, :], ql.to(tl.bfloat16), mask=hm[:, None] & lm[None, :])
    tl.store(base + KL + rp[None, :], qpe.to(tl.bfloat16), mask=hm[:, None] & pm[None, :])


# ------------------------------------------------------------------------------------------------------------
# 4. o_proj + residual add
# ------------------------------------------------------------------------------------------------------------
@triton.jit
def o_proj_kernel(
    x_ptr,
    w_ptr,
    resid1_ptr,  # attn_out [B, K] bf16, w_o [H, K], h + r [B, H] fp32
    part_ptr,  # scratch [KS, B, H] fp32 (split-K partials)
    resid_out_ptr,
    oss_ptr,  # out [B, H] bf16, per-column-block sums of squares of it [NBO, B]
    ctr_ptr,
    B,
    H: tl.constexpr,
    K: tl.constexpr,
    KS: tl.constexpr,
    CTR_OFF: tl.constexpr,
    BB: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    MODE: tl.constexpr,
    PARTIAL: tl.constexpr,  # TP > 1: the rank's fp32 o_proj partial -> resid_out_ptr (no residual, no oss)
    PDL: tl.constexpr = False,
    PF: tl.constexpr = 0,
    # MERGE: the W_UV + output-gate epilogue of FlashInfer's attention runs in this launch: the first NM
    # programs in ticket order (`_merge_one`, writing x_ptr = attn_out), the o_proj programs after them
    # prefetch their first weight rows into L2 (MPF bytes a row), wait for all NM, then read attn_out (.cg)
    MERGE: tl.constexpr = False,
    NM: tl.constexpr = 0,
    opart_ptr=None,
    wkvb_ptr=None,
    raw_ptr=None,
    ssin_ptr=None,
    R: tl.constexpr = 1,
    EPS: tl.constexpr = 1e-6,
    GATE_OFF: tl.constexpr = 0,
    USE_GATE: tl.constexpr = False,
    KL: tl.constexpr = 1,
    DN: tl.constexpr = 1,
    DV: tl.constexpr = 1,
    NH: tl.constexpr = 1,
    KLP: tl.constexpr = 1,
    MB: tl.constexpr = 16,
    LC: tl.constexpr = 1,
    VC: tl.constexpr = 16,
    MPF: tl.constexpr = 0,
):
    if MERGE:
        _pdl_enter(PDL)
        _pdl_wait(PDL)
        v = tl.atomic_add(ctr_ptr + 22, 1)  # CTR_OM_TICKET
        if v < NM:
            _merge_one(
                v, opart_ptr, wkvb_ptr, raw_ptr, ssin_ptr, x_ptr, B, H, R, EPS, GATE_OFF, USE_GATE,
                KL, DN, DV, NH, KLP, MB, LC, VC, False, 0,
            )
            tl.debug_barrier()
            tl.atomic_add(ctr_ptr + 23, 1, sem="release")  # CTR_OM_DONE
        else:
            _o_role(
                v - NM, x_ptr, w_ptr, resid1_ptr, part_ptr, resid_out_ptr, oss_ptr, ctr_ptr, B, H, K, KS,
                CTR_OFF, BB, BN, BK, MODE, PARTIAL, PDL, PF, True, NM, MPF,
            )
    else:
        _o_role(
            tl.program_id(0), x_ptr, w_ptr, resid1_ptr, part_ptr, resid_out_ptr, oss_ptr, ctr_ptr, B, H, K,
            KS, CTR_OFF, BB, BN, BK, MODE, PARTIAL, PDL, PF, False, 0, 0,
        )


@triton.jit
def _o_role(
    pid,
    x_ptr,
    w_ptr,
    resid1_ptr,
    part_ptr,
    resid_out_ptr,
    oss_ptr,
    ctr_ptr,
    B,
    H: tl.constexpr,
    K: tl.constexpr,
    KS: tl.constexpr,
    CTR_OFF: tl.constexpr,
    BB: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    MODE: tl.constexpr,
    PARTIAL: tl.constexpr,
    PDL: tl.constexpr,
    PF: tl.constexpr,
    MERGE: tl.constexpr,
    NM: tl.constexpr,
    MPF: tl.constexpr,
):
    ks = pid % KS
    nb = pid // KS
    rb = tl.arange(0, BB)
    bm = rb < B
    rn = nb * BN + tl.arange(0, BN)
    nm = rn < H
    n_tiles: tl.constexpr = (K + BK - 1) // BK
    per: tl.constexpr = (n_tiles + KS - 1) // KS
    _pdl_enter(PDL)
    _l2_prefetch(w_ptr, rn, H, K, ks * per * BK, PF)
    _pdl_wait(PDL)
    if MERGE:
        _l2_prefetch(w_ptr, rn, H, K, ks * per * BK, MPF)
        cnt = tl.atomic_add(ctr_ptr + 23, 0, sem="acquire")
        while cnt < NM:
            cnt = tl.atomic_add(ctr_ptr + 23, 0, sem="acquire")
        tl.debug_barrier()
    acc = _acc_init(BB, BN, BK, MODE)
    for t in range(0, per):
        rk = (ks * per + t) * BK + tl.arange(0, BK)
        km = rk < K
        if MERGE:  # attn_out was written by other programs of this launch
            x = tl.load(
                x_ptr + rb[:, None] * K + rk[None, :],
                mask=bm[:, None] & km[None, :],
                other=0.0,
                cache_modifier=".cg",
            )
        else:
            x = tl.load(x_ptr + rb[:, None] * K + rk[None, :], mask=bm[:, None] & km[None, :], other=0.0)
        w = tl.load(w_ptr + rn[:, None] * K + rk[None, :], mask=nm[:, None] & km[None, :], other=0.0)
        acc = _mac(acc, x, w, MODE)
    out = _fin(acc, MODE)
    m2 = bm[:, None] & nm[None, :]
    if KS == 1:
        if PARTIAL:
            tl.store(resid_out_ptr + rb[:, None] * H + rn[None, :], out, mask=m2)
        else:
            _o_finish(out, nb, rb, rn, m2, resid1_ptr, resid_out_ptr, oss_ptr, B, H)
    else:
        tl.store(part_ptr + ks * B * H + rb[:, None] * H + rn[None, :], out, mask=m2)
        tl.debug_barrier()
        arrived = tl.atomic_add(ctr_ptr + CTR_OFF + nb, 1, sem="acq_rel")
        if arrived == KS - 1:
            tot = tl.zeros([BB, BN], dtype=tl.float32)
            for j in tl.static_range(KS):  # fixed order: bit-reproducible
                tot += tl.load(
                    part_ptr + j * B * H + rb[:, None] * H + rn[None, :],
                    mask=m2,
                    other=0.0,
                    cache_modifier=".cg",
                )
            if PARTIAL:
                tl.store(resid_out_ptr + rb[:, None] * H + rn[None, :], tot, mask=m2)
            else:
                _o_finish(tot, nb, rb, rn, m2, resid1_ptr, resid_out_ptr, oss_ptr, B, H)


@triton.jit
def _o_finish(out, nb, rb, rn, m2, resid1_ptr, resid_out_ptr, oss_ptr, B, H: tl.constexpr):
    out += tl.load(resid1_ptr + rb[:, None] * H + rn[None, :], mask=m2, other=0.0)
    ob = out.to(tl.bfloat16)
    tl.store(resid_out_ptr + rb[:, None] * H + rn[None, :], ob, mask=m2)
    of = tl.where(m2, ob.to(tl.float32), 0.0)
    tl.store(oss_ptr + nb * B + rb, tl.sum(of * of, axis=1), mask=rb < B)


# ------------------------------------------------------------------------------------------------------------
# 5. post RMSNorm -> router | latent down | shared w13 + SiTU; last router CTA: top-k + touched-expert list
# ------------------------------------------------------------------------------------------------------------
@triton.jit
def _topk_role(
    t,
    logits_ptr,
    bias_ptr,
    topk_id_ptr,
    topk_w_ptr,
    rank_ptr,
    eoff_ptr,
    slot_exp_ptr,
    slot_off_ptr,
    slot_cnt_ptr,
    sorted_tok_ptr,
    sorted_pair_ptr,
    ctr_ptr,
    B,
    route_scale,
    E: tl.constexpr,
    TOPK: tl.constexpr,
    RENORM: tl.constexpr,
    NR: tl.constexpr,
    NT: tl.constexpr,
    EP: tl.constexpr,
    TB: tl.constexpr,
    KP: tl.constexpr,
    PP: tl.constexpr,
):
    """Rows [t*TB, t*TB + TB): sigmoid, biased top-k, renormalised weights; per-expert pair counts (atomic
    ranks). The last top-k CTA turns the counts into the touched-expert list and the per-expert pair lists."""
    cnt = tl.atomic_add(ctr_ptr + 16, 0, sem="acquire")  # CTR_ROUTER: all router CTAs done?
    while cnt < NR:
        cnt = tl.atomic_add(ctr_ptr + 16, 0, sem="acquire")
    tl.debug_barrier()
    re = tl.arange(0, EP)
    em = re < E
    rb = t * TB + tl.arange(0, TB)
    bm = rb < B
    lg = tl.load(
        logits_ptr + rb[:, None] * E + re[None, :],
        mask=bm[:, None] & em[None, :],
        other=0.0,
        cache_modifier=".cg",
    )
    _topk_rows(
        lg,
        rb,
        bias_ptr,
        topk_id_ptr,
        topk_w_ptr,
        rank_ptr,
        eoff_ptr,
        slot_exp_ptr,
        slot_off_ptr,
        slot_cnt_ptr,
        sorted_tok_ptr,
        sorted_pair_ptr,
        ctr_ptr,
        B,
        route_scale,
        E,
        TOPK,
        RENORM,
        NT,
        EP,
        TB,
        KP,
        PP,
    )


@triton.jit
def _topk_rows(
    lg,
    rb,
    bias_ptr,
    topk_id_ptr,
    topk_w_ptr,
    rank_ptr,
    eoff_ptr,
    slot_exp_ptr,
    slot_off_ptr,
    slot_cnt_ptr,
    sorted_tok_ptr,
    sorted_pair_ptr,
    ctr_ptr,
    B,
    route_scale,
    E: tl.constexpr,
    TOPK: tl.constexpr,
    RENORM: tl.constexpr,
    NT,
    EP: tl.constexpr,
    TB: tl.constexpr,
    KP: tl.constexpr,
    PP: tl.constexpr,
):
    """Routing of the rows `rb` from their fp32 logits `lg` [TB, EP] (shared by TP 1 and the TP gather):
    sigmoid, biased top-k, renormalised weights, per-expert pair counts; the last of the NT top-k CTAs builds
    the touched-expert list."""
    ecnt_ptr = ctr_ptr + 1024  # CTR_ECNT: per-expert pair counts, zeroed with the counters
    re = tl.arange(0, EP)
    em = re < E
    bm = rb < B
    bias = tl.load(bias_ptr + re, mask=em, other=0.0)
    rkk = tl.arange(0, KP)
    sc = tl.sigmoid(lg)
    sel = tl.where(em[None, :], sc + bias[None, :], float("-inf"))
    ids = tl.zeros([TB, KP], dtype=tl.int32)
    wts = tl.zeros([TB, KP], dtype=tl.float32)
    for k in range(TOPK):
        best = tl.max(sel, axis=1)
        cand = tl.where(sel == best[:, None], re[None, :], EP)
        idx = tl.minimum(tl.min(cand, axis=1), E - 1)  # lowest index among ties (NaN-safe)
        hit = re[None, :] == idx[:, None]
        wk = tl.sum(tl.where(hit, sc, 0.0), axis=1)
        sel = tl.where(hit, float("-inf"), sel)
        ids = tl.where(rkk[None, :] == k, idx[:, None], ids)
        wts = tl.where(rkk[None, :] == k, wk[:, None], wts)
    if RENORM:
        wts = wts / tl.sum(wts, axis=1)[:, None]
    wts = wts * route_scale
    km = bm[:, None] & (rkk < TOPK)[None, :]
    tl.store(topk_id_ptr + rb[:, None] * TOPK + rkk[None, :], ids, mask=km)
    tl.store(topk_w_ptr + rb[:, None] * TOPK + rkk[None, :], wts, mask=km)
    # rank of each pair among its expert's pairs; the order is arbitrary but every pair's math is independent
    # of its position, so outputs stay bit-identical run to run
    rk = tl.atomic_add(ecnt_ptr + ids, tl.full([TB, KP], 1, dtype=tl.int32), mask=km, sem="relaxed")
    tl.store(rank_ptr + rb[:, None] * TOPK + rkk[None, :], rk, mask=km)
    tl.debug_barrier()
    arrived = tl.atomic_add(ctr_ptr + 20, 1, sem="acq_rel")  # CTR_TOPK_DONE
    if arrived == NT - 1:
        ec = tl.load(ecnt_ptr + re, mask=em, other=0, cache_modifier=".cg")
        used = (ec > 0).to(tl.int32)
        slot = tl.cumsum(used, axis=0) - 1
        off = tl.cumsum(ec, axis=0) - ec
        tl.store(eoff_ptr + re, off, mask=em)
        um = em & (used > 0)
        tl.store(slot_exp_ptr + slot, re, mask=um)
        tl.store(slot_off_ptr + slot, off, mask=um)
        tl.store(slot_cnt_ptr + slot, ec, mask=um)
        tl.debug_barrier()
        pp = tl.arange(0, PP)
        pm = pp < B * TOPK
        pid_ = tl.load(topk_id_ptr + pp, mask=pm, other=0, cache_modifier=".cg")
        prk = tl.load(rank_ptr + pp, mask=pm, other=0, cache_modifier=".cg")
        pos = tl.load(eoff_ptr + pid_, mask=pm, other=0, cache_modifier=".cg") + prk
        tl.store(sorted_tok_ptr + pos, pp // TOPK, mask=pm)
        tl.store(sorted_pair_ptr + pos, pp, mask=pm)
        tl.store(ctr_ptr + 17, tl.sum(used, axis=0))  # CTR_NSLOTS (read by the next kernels)


@triton.jit
def moe_front_kernel(
    x_ptr,
    oss_ptr,  # residual_out [B, H] bf16 (x2 before the norm), its per-block sums of squares [NBO, B]
    router_ptr,
    down_ptr,
    sw13_ptr,  # post_norm-folded [E, H], [LAT, H], [2*SI, H]
    logits_ptr,
    lat_ptr,
    sh_ptr,  # out: [B, E] fp32, [B, LAT] bf16, [B, SI] bf16
    bias_ptr,
    topk_id_ptr,
    topk_w_ptr,
    rank_ptr,
    eoff_ptr,
    slot_exp_ptr,
    slot_off_ptr,
    slot_cnt_ptr,
    sorted_tok_ptr,
    sorted_pair_ptr,
    ctr_ptr,
    B,
    route_scale,
    H: tl.constexpr,
    E: tl.constexpr,
    LAT: tl.constexpr,
    SI: tl.constexpr,
    EPS: tl.constexpr,
    TOPK: tl.constexpr,
    RENORM: tl.constexpr,
    BETA: tl.constexpr,
    LBETA: tl.constexpr,
    BB: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    MODE: tl.constexpr,
    EP: tl.constexpr,
    TB: tl.constexpr,
    KP: tl.constexpr,
    PP: tl.constexpr,
    NBO: tl.constexpr,
    PC: tl.constexpr,
    PDL: tl.constexpr = False,
    PF: tl.constexpr = 0,
    RBN: tl.constexpr = 0,  # > 0: router rows per CTA (plan F_RBN; 0: BN, as the other roles)
):
    RN: tl.constexpr = BN if RBN == 0 else RBN
    NR: tl.constexpr = (E + RN - 1) // RN
    NT = tl.cdiv(B, TB)
    _pdl_enter(PDL)
    if PF > 0:
        # the weight rows this CTA will most likely get (roles follow the ticket, which follows launch order
        # closely; a wrong guess only wastes the prefetch)
        NL: tl.constexpr = (LAT + BN - 1) // BN
        pid = tl.program_id(0)
        ri = tl.arange(0, BN)
        gp = tl.where(pid < NR, pid, pid - NT)
        if pid < NR:
            _l2_prefetch(router_ptr, pid * BN + ri, E, H, 0, PF)
        elif (pid >= NR + NT) & (gp < NR + NL):
            _l2_prefetch(down_ptr, (gp - NR) * BN + ri, LAT, H, 0, PF)
        elif gp >= NR + NL:
            jj = (gp - NR - NL) * (BN // 2) + ri // 2
            _l2_prefetch(sw13_ptr, jj + (ri % 2) * SI, 2 * SI, H, 0, PF)
    _pdl_wait(PDL)
    # roles in ticket order: router CTAs, top-k CTAs (wait for the router), latent-down CTAs, shared-w13 CTAs
    v = tl.atomic_add(ctr_ptr + 21, 1)  # CTR_FRONT_TICKET
    if (v >= NR) & (v < NR + NT):
        _topk_role(
            v - NR,
            logits_ptr,
            bias_ptr,
            topk_id_ptr,
            topk_w_ptr,
            rank_ptr,
            eoff_ptr,
            slot_exp_ptr,
            slot_off_ptr,
            slot_cnt_ptr,
            sorted_tok_ptr,
            sorted_pair_ptr,
            ctr_ptr,
            B,
            route_scale,
            E,
            TOPK,
            RENORM,
            NR,
            NT,
            EP,
            TB,
            KP,
            PP,
        )
    elif RBN > 0:
        # router CTAs of RBN rows (they finish early, so the top-k overlaps the latent / shared GEMVs); the
        # other roles keep BN-row tiles, indexed as `_front_gemv_role` counts them for BN
        g = tl.where(v < NR, v, v - NT)
        if g < NR:
            _front_gemv_role(g, x_ptr, oss_ptr, router_ptr, down_ptr, sw13_ptr, logits_ptr, lat_ptr, sh_ptr,
                             ctr_ptr, B, H, E, LAT, SI, EPS, BETA, LBETA, BB, RBN, BK, MODE, NBO, PC)
        else:
            _front_gemv_role(g - NR + (E + BN - 1) // BN, x_ptr, oss_ptr, router_ptr, down_ptr, sw13_ptr,
                             logits_ptr, lat_ptr, sh_ptr, ctr_ptr, B, H, E, LAT, SI, EPS, BETA, LBETA, BB, BN,
                             BK, MODE, NBO, PC)
    else:
        g = tl.where(v < NR, v, v - NT)  # GEMV role index: [0, NR) router, [NR, NR+NL) latent, then shared
        _front_gemv_role(
            g,
            x_ptr,
            oss_ptr,
            router_ptr,
            down_ptr,
            sw13_ptr,
            logits_ptr,
            lat_ptr,
            sh_ptr,
            ctr_ptr,
            B,
            H,
            E,
            LAT,
            SI,
            EPS,
            BETA,
            LBETA,
            BB,
            BN,
            BK,
            MODE,
            NBO,
            PC,
        )


@triton.jit
def _front_gemv_role(
    g,
    x_ptr,
    oss_ptr,
    router_ptr,
    down_ptr,
    sw13_ptr,
    logits_ptr,
    lat_ptr,
    sh_ptr,
    ctr_ptr,
    B,
    H: tl.constexpr,
    E: tl.constexpr,
    LAT: tl.constexpr,
    SI: tl.constexpr,
    EPS: tl.constexpr,
    BETA: tl.constexpr,
    LBETA: tl.constexpr,
    BB: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    MODE: tl.constexpr,
    NBO: tl.constexpr,
    PC: tl.constexpr,
):
    NR: tl.constexpr = (E + BN - 1) // BN
    NL: tl.constexpr = (LAT + BN - 1) // BN
    HALF: tl.constexpr = BN // 2
    rb = tl.arange(0, BB)
    bm = rb < B
    ri = tl.arange(0, BN)
    j0 = (g - NR - NL) * HALF
    if g < NR:
        rows = g * BN + ri
        nm = rows < E
        w_base = router_ptr
    elif g < NR + NL:
        rows = (g - NR) * BN + ri
        nm = rows < LAT
        w_base = down_ptr
    else:
        # interleaved gate / up rows: column 2i is gate row j0+i, column 2i+1 is up row SI+j0+i
        jj = j0 + ri // 2
        rows = jj + (ri % 2) * SI
        nm = jj < SI
        w_base = sw13_ptr
    acc = _acc_init(BB, BN, BK, MODE)
    for k0 in range(0, H, BK):
        rk = k0 + tl.arange(0, BK)
        km = rk < H
        x = tl.load(x_ptr + rb[:, None] * H + rk[None, :], mask=bm[:, None] & km[None, :], other=0.0)
        w = tl.load(w_base + rows[:, None] * H + rk[None, :], mask=nm[:, None] & km[None, :], other=0.0)
        acc = _mac(acc, x, w, MODE)
    rstd2 = tl.rsqrt(_sum_parts(oss_ptr, B, rb, NBO, PC) / H + EPS)
    y = _fin(acc, MODE) * rstd2[:, None]
    if g < NR:
        tl.store(logits_ptr + rb[:, None] * E + rows[None, :], y, mask=bm[:, None] & nm[None, :])
        tl.debug_barrier()
        tl.atomic_add(ctr_ptr + 16, 1, sem="release")  # CTR_ROUTER
    elif g < NR + NL:
        tl.store(
            lat_ptr + rb[:, None] * LAT + rows[None, :], y.to(tl.bfloat16), mask=bm[:, None] & nm[None, :]
        )
    else:
        gt, up = tl.split(tl.reshape(y, [BB, HALF, 2]))
        a = _situ(gt, up, BETA, LBETA)
        rj = j0 + tl.arange(0, HALF)
        tl.store(
            sh_ptr + rb[:, None] * SI + rj[None, :], a.to(tl.bfloat16), mask=bm[:, None] & (rj < SI)[None, :]
        )


# ------------------------------------------------------------------------------------------------------------
# 6. routed experts: w13 + SiTU over touched experts
# ------------------------------------------------------------------------------------------------------------
@triton.jit
def expert_up_kernel(
    lat_ptr,
    w13_ptr,  # lat [B, LAT] bf16, w13 [E, 2*NI, LAT]
    slot_exp_ptr,
    slot_off_ptr,
    slot_cnt_ptr,
    sorted_tok_ptr,
    act_ptr,  # out: [B*TOPK, NI] bf16, rows in sorted-pair order
    ctr_ptr,
    P,  # CTAs per column block (slot stride)
    LAT: tl.constexpr,
    NI: tl.constexpr,
    BETA: tl.constexpr,
    LBETA: tl.constexpr,
    BT: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    MODE: tl.constexpr,
    PDL: tl.constexpr = False,
):
    _pdl_enter(PDL)
    _pdl_wait(PDL)
    pid = tl.program_id(0)
    NJ: tl.constexpr = (2 * NI + BN - 1) // BN
    HALF: tl.constexpr = BN // 2
    jb = pid % NJ
    p = pid // NJ
    n_slots = tl.load(ctr_ptr + 17)  # CTR_NSLOTS
    ri = tl.arange(0, BN)
    j0 = jb * HALF
    jj = j0 + ri // 2
    wrow = jj + (ri % 2) * NI
    nm = jj < NI
    rt = tl.arange(0, BT)
    rj = j0 + tl.arange(0, HALF)
    for sl in range(p, n_slots, P):
        e = tl.load(slot_exp_ptr + sl).to(tl.int64)
        off = tl.load(slot_off_ptr + sl)
        cnt = tl.load(slot_cnt_ptr + sl)
        wbase = w13_ptr + e * (2 * NI * LAT)
        for c0 in range(0, cnt, BT):
            tm = c0 + rt < cnt
            tok = tl.load(sorted_tok_ptr + off + c0 + rt, mask=tm, other=0)
            acc = _acc_init(BT, BN, BK, MODE)
            for k0 in range(0, LAT, BK):
                rk = k0 + tl.arange(0, BK)
                km = rk < LAT
                x = tl.load(
                    lat_ptr + tok[:, None] * LAT + rk[None, :], mask=tm[:, None] & km[None, :], other=0.0
                )
                w = tl.load(
                    wbase + wrow[:, None] * LAT + rk[None, :], mask=nm[:, None] & km[None, :], other=0.0
                )
                acc = _mac(acc, x, w, MODE)
            y = _fin(acc, MODE)
            g, u = tl.split(tl.reshape(y, [BT, HALF, 2]))
            a = _situ(g, u, BETA, LBETA)
            tl.store(
                act_ptr + (off + c0 + rt)[:, None] * NI + rj[None, :],
                a.to(tl.bfloat16),
                mask=tm[:, None] & (rj < NI)[None, :],
            )


# ------------------------------------------------------------------------------------------------------------
# 7. routed experts: w2 x routing weight, deterministic per-token sum; tail: routed norm -> latent_up + shared
# ------------------------------------------------------------------------------------------------------------
@triton.jit
def _down_role(
    v,
    act_ptr,
    w2_ptr,
    slot_exp_ptr,
    slot_off_ptr,
    slot_cnt_ptr,
    sorted_pair_ptr,
    topk_w_ptr,
    ypair_ptr,
    latent_ptr,
    lss_ptr,
    ctr_ptr,
    B,
    P,
    LAT: tl.constexpr,
    NI: tl.constexpr,
    TOPK: tl.constexpr,
    BT: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    MODE: tl.constexpr,
    RB: tl.constexpr,
    PARTIAL: tl.constexpr,  # TP > 1: fp32 per-token sums -> latent_ptr, row stride LDO (no rounding, no lss)
    LDO: tl.constexpr,
):
    NBL: tl.constexpr = (LAT + BN - 1) // BN
    nb = v % NBL
    p = v // NBL
    n_slots = tl.load(ctr_ptr + 17)  # CTR_NSLOTS
    rn = nb * BN + tl.arange(0, BN)
    nm = rn < LAT
    rt = tl.arange(0, BT)
    for sl in range(p, n_slots, P):
        e = tl.load(slot_exp_ptr + sl).to(tl.int64)
        off = tl.load(slot_off_ptr + sl)
        cnt = tl.load(slot_cnt_ptr + sl)
        wbase = w2_ptr + e * (LAT * NI)
        for c0 in range(0, cnt, BT):
            tm = c0 + rt < cnt
            rows = off + c0 + rt
            acc = _acc_init(BT, BN, BK, MODE)
            for k0 in range(0, NI, BK):
                rk = k0 + tl.arange(0, BK)
                km = rk < NI
                x = tl.load(
                    act_ptr + rows[:, None] * NI + rk[None, :], mask=tm[:, None] & km[None, :], other=0.0
                )
                w = tl.load(wbase + rn[:, None] * NI + rk[None, :], mask=nm[:, None] & km[None, :], other=0.0)
                acc = _mac(acc, x, w, MODE)
            y = _fin(acc, MODE)
            pair = tl.load(sorted_pair_ptr + rows, mask=tm, other=0)
            wt = tl.load(topk_w_ptr + pair, mask=tm, other=0.0)
            tl.store(
                ypair_ptr + pair[:, None] * LAT + rn[None, :], y * wt[:, None], mask=tm[:, None] & nm[None, :]
            )
    tl.debug_barrier()
    arrived = tl.atomic_add(ctr_ptr + 512 + nb, 1, sem="acq_rel")  # CTR_DOWN + nb
    if arrived == P - 1:
        # every pair of every token has landed for this column block: sum each token's pairs in k order
        for b0 in range(0, B, RB):
            rb = b0 + tl.arange(0, RB)
            bm = rb < B
            m2 = bm[:, None] & nm[None, :]
            tot = tl.zeros([RB, BN], dtype=tl.float32)
            for k in tl.static_range(TOPK):
                tot += tl.load(
                    ypair_ptr + (rb * TOPK + k)[:, None] * LAT + rn[None, :],
                    mask=m2,
                    other=0.0,
                    cache_modifier=".cg",
                )
            if PARTIAL:
                tl.store(latent_ptr + rb[:, None] * LDO + rn[None, :], tot, mask=m2)
            else:
                tb = tot.to(tl.bfloat16)
                tl.store(latent_ptr + rb[:, None] * LAT + rn[None, :], tb, mask=m2)
                tf = tl.where(m2, tb.to(tl.float32), 0.0)
                tl.store(lss_ptr + nb * B + rb, tl.sum(tf * tf, axis=1), mask=bm)
        tl.debug_barrier()
        tl.atomic_add(ctr_ptr + 19, 1, sem="release")  # CTR_LAT_DONE


@triton.jit
def _tail_role(
    nt,
    sh_ptr,
    sw2_ptr,
    up_ptr,
    latent_ptr,
    lss_ptr,
    out_ptr,
    ctr_ptr,
    B,
    H: tl.constexpr,
    LAT: tl.constexpr,
    SI: tl.constexpr,
    EPS: tl.constexpr,
    NBL: tl.constexpr,
    BB: tl.constexpr,
    BNT: tl.constexpr,
    BKT: tl.constexpr,
    MODE_T: tl.constexpr,
    PC: tl.constexpr,
    TPF: tl.constexpr = 0,
    SLEEP: tl.constexpr = 0,
):
    rb = tl.arange(0, BB)
    rn = nt * BNT + tl.arange(0, BNT)
    # shared expert down-projection first: it does not depend on the routed experts
    shared = _shared_w2(rb, rn, sh_ptr, sw2_ptr, B, H, SI, BB, BNT, BKT, MODE_T)
    # plan T_PF: the first TPF bytes of this CTA's latent_up rows into L2 while the routed experts finish
    _l2_prefetch(up_ptr, rn, H, LAT, 0, TPF)
    # waits for CTR_LAT_DONE == NBL
    _tail_up(
        shared,
        rb,
        rn,
        up_ptr,
        latent_ptr,
        lss_ptr,
        out_ptr,
        ctr_ptr,
        B,
        H,
        LAT,
        EPS,
        NBL,
        19,
        NBL,
        BB,
        BNT,
        BKT,
        MODE_T,
        PC,
        SLEEP,
    )


@triton.jit
def _shared_w2(
    rb,
    rn,
    sh_ptr,
    sw2_ptr,
    B,
    H: tl.constexpr,
    SI: tl.constexpr,
    BB: tl.constexpr,
    BNT: tl.constexpr,
    BKT: tl.constexpr,
    MODE_T: tl.constexpr,
):
    """shared act [B, SI] @ shared_w2[rn].T -> [BB, BNT] fp32 (this rank's partial at TP > 1)."""
    bm = rb < B
    nm = rn < H
    acc = _acc_init(BB, BNT, BKT, MODE_T)
    for k0 in range(0, SI, BKT):
        rk = k0 + tl.arange(0, BKT)
        km = rk < SI
        x = tl.load(sh_ptr + rb[:, None] * SI + rk[None, :], mask=bm[:, None] & km[None, :], other=0.0)
        w = tl.load(sw2_ptr + rn[:, None] * SI + rk[None, :], mask=nm[:, None] & km[None, :], other=0.0)
        acc = _mac(acc, x, w, MODE_T)
    return _fin(acc, MODE_T)


@triton.jit
def _tail_up(
    shared,
    rb,
    rn,
    up_ptr,
    latent_ptr,
    lss_ptr,
    out_ptr,
    ctr_ptr,
    B,
    H: tl.constexpr,
    LAT: tl.constexpr,
    EPS: tl.constexpr,
    NBL: tl.constexpr,
    WSLOT: tl.constexpr,
    WN: tl.constexpr,
    BB: tl.constexpr,
    BNT: tl.constexpr,
    BKT: tl.constexpr,
    MODE_T: tl.constexpr,
    PC: tl.constexpr,
    SLEEP: tl.constexpr = 0,
):
    """Wait until ctr[WSLOT] >= WN (the latent [B, LAT] bf16 and its NBL per-block sums of squares are
    complete), then hidden_out[:, rn] = routed-RMSNorm(latent) @ latent_up'[rn].T + shared (TP 1 and TP).
    SLEEP > 0 (plan T_SLEEP): `nanosleep` SLEEP ns between polls (fewer atomics on the counter's L2 line)."""
    bm = rb < B
    nm = rn < H
    cnt = tl.atomic_add(ctr_ptr + WSLOT, 0, sem="acquire")
    while cnt < WN:
        if SLEEP > 0:
            tl.inline_asm_elementwise(
                "nanosleep.u32 $1; // $0", "=r,r", [cnt * 0 + SLEEP], dtype=tl.int32, is_pure=False, pack=1
            )
        cnt = tl.atomic_add(ctr_ptr + WSLOT, 0, sem="acquire")
    tl.debug_barrier()
    acc2 = _acc_init(BB, BNT, BKT, MODE_T)
    for k0 in range(0, LAT, BKT):
        rk = k0 + tl.arange(0, BKT)
        km = rk < LAT
        x = tl.load(
            latent_ptr + rb[:, None] * LAT + rk[None, :],
            mask=bm[:, None] & km[None, :],
            other=0.0,
            cache_modifier=".cg",
        )
        w = tl.load(up_ptr + rn[:, None] * LAT + rk[None, :], mask=nm[:, None] & km[None, :], other=0.0)
        acc2 = _mac(acc2, x, w, MODE_T)
    rstd_r = tl.rsqrt(_sum_parts(lss_ptr, B, rb, NBL, PC) / LAT + EPS)
    out = _fin(acc2, MODE_T) * rstd_r[:, None] + shared
    tl.store(out_ptr + rb[:, None] * H + rn[None, :], out.to(tl.bfloat16), mask=bm[:, None] & nm[None, :])


@triton.jit
def expert_down_kernel(
    act_ptr,
    w2_ptr,  # act [B*TOPK, NI] bf16 (sorted-pair rows), w2 [E, LAT, NI]
    slot_exp_ptr,
    slot_off_ptr,
    slot_cnt_ptr,
    sorted_pair_ptr,
    topk_w_ptr,
    ypair_ptr,
    latent_ptr,
    lss_ptr,  # scratch [B*TOPK, LAT] fp32, [B, LAT] bf16, [NBL, B] fp32
    sh_ptr,
    sw2_ptr,
    up_ptr,  # shared act [B, SI] bf16, shared_w2 [H, SI], routed_norm-folded latent_up [H, LAT]
    out_ptr,  # out: hidden_out [B, H] bf16
    ctr_ptr,
    B,
    P,
    H: tl.constexpr,
    LAT: tl.constexpr,
    NI: tl.constexpr,
    SI: tl.constexpr,
    TOPK: tl.constexpr,
    EPS: tl.constexpr,
    BT: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    MODE: tl.constexpr,
    BB: tl.constexpr,
    BNT: tl.constexpr,
    BKT: tl.constexpr,
    MODE_T: tl.constexpr,
    RB: tl.constexpr,
    PC: tl.constexpr,
    PDL: tl.constexpr = False,
    TPF: tl.constexpr = 0,
    SLEEP: tl.constexpr = 0,
):
    _pdl_enter(PDL)
    _pdl_wait(PDL)
    # role from a ticket taken at start: every tail CTA starts after all down CTAs have started
    v = tl.atomic_add(ctr_ptr + 18, 1)  # CTR_DOWN_TICKET
    NBL: tl.constexpr = (LAT + BN - 1) // BN
    n_down = NBL * P
    if v < n_down:
        _down_role(
            v,
            act_ptr,
            w2_ptr,
            slot_exp_ptr,
            slot_off_ptr,
            slot_cnt_ptr,
            sorted_pair_ptr,
            topk_w_ptr,
            ypair_ptr,
            latent_ptr,
            lss_ptr,
            ctr_ptr,
            B,
            P,
            LAT,
            NI,
            TOPK,
            BT,
            BN,
            BK,
            MODE,
            RB,
            False,
            LAT,
        )
    else:
        _tail_role(
            v - n_down,
            sh_ptr,
            sw2_ptr,
            up_ptr,
            latent_ptr,
            lss_ptr,
            out_ptr,
            ctr_ptr,
            B,
            H,
            LAT,
            SI,
            EPS,
            NBL,
            BB,
            BNT,
            BKT,
            MODE_T,
            PC,
            TPF,
            SLEEP,
        )
