"""Triton kernels of the fused layer at TP > 1 (host side: `tp_launch.py`; design: NOTES.md, "TP 2").

Kernels 1-3 (`qkv_a`, `q_b`, `attn`) and 6 (`expert_up`) of `kernels.py` run unchanged on the rank's shard;
`o_proj_kernel` runs with `PARTIAL=True`. The kernels here read the other ranks' exchange buffers
(`tp.PeerBuffer`) directly: every rank's view is a kernel argument (`v0`..`v7`, WORLD of them used; the
unused ones are any valid tensor and are never read). Under the "peer" transport those are symmetric-memory
mappings of the peers' buffers (NVLink loads), under "copy" local all-gathered copies; the kernels do not
know which.

- `ar_resid_kernel`: one-shot all-reduce of the o_proj partials, + h + r (residual add folded), ->
  residual_out bf16 and per-column-block sums of squares (the post-attention RMSNorm of the next kernel).
- `front_tp_kernel`: this rank's 1/WORLD of the router rows and of the latent-down rows, and its shared-w13
  slice (SiTU), all on the raw residual_out against post_norm-folded weights (`kernels._front_gemv_role`).
- `route_tp_kernel`: top-k CTAs gather their rows' logits from every rank's slice, keep a local copy and run
  the TP-1 routing (`kernels._topk_rows`: biased top-k, weights, touched-expert list); gather CTAs copy every
  rank's latent slice into the local latent [B, LAT].
- `down_tp_kernel`: routed w2 x routing weight with the TP-1 fixed-order per-token pair sum, kept in fp32
  (`kernels._down_role(PARTIAL=True)`), and this rank's shared-w2 partial, both into one exchange buffer
  [B, LAT + H] fp32.
- `tail_tp_kernel`: reduce CTAs (first in ticket order) sum the routed-latent partials over ranks, round
  to bf16 and write the latent + sums of squares locally, then release a counter; GEMV CTAs sum their
  columns of the shared partials over ranks, wait for the counter, then routed RMSNorm + latent_up + shared
  -> hidden_out (`kernels._tail_up`). Each element of a peer buffer is read once per rank.

Every sum over ranks runs in rank order 0..WORLD-1 on every rank, so all ranks produce bit-identical outputs.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import kernels as K

# Counter slots of the shared `ctr` workspace (zeroed by qkv_a_kernel) used only by the TP kernels; slots
# 22..31 are free in kernels.py's layout.
CTR_TP_TAIL_TICKET = 22
CTR_TP_RED_DONE = 23
MAX_WORLD = 8


@triton.jit
def _pick(r, v0, v1, v2, v3, v4, v5, v6, v7, WORLD: tl.constexpr):
    """Rank r's view (r a constexpr or a runtime scalar < WORLD)."""
    p = v0
    if r == 1:
        p = v1
    if WORLD > 2:
        if r == 2:
            p = v2
        if r == 3:
            p = v3
    if WORLD > 4:
        if r == 4:
            p = v4
        if r == 5:
            p = v5
        if r == 6:
            p = v6
        if r == 7:
            p = v7
    return p


@triton.jit
def _rank_sum(off, m, v0, v1, v2, v3, v4, v5, v6, v7, WORLD: tl.constexpr):
    """sum_r v_r[off] in fp32, in rank order 0..WORLD-1 (the same order on every rank)."""
    acc = tl.load(v0 + off, mask=m, other=0.0).to(tl.float32)
    for r in tl.static_range(1, WORLD):
        src = _pick(r, v0, v1, v2, v3, v4, v5, v6, v7, WORLD)
        acc += tl.load(src + off, mask=m, other=0.0).to(tl.float32)
    return acc


# ------------------------------------------------------------------------------------------------------------
# 4b. o_proj all-reduce + residual add (+ the post-attention norm's sums of squares)
# ------------------------------------------------------------------------------------------------------------
@triton.jit
def ar_resid_kernel(
    v0,
    v1,
    v2,
    v3,
    v4,
    v5,
    v6,
    v7,  # every rank's o_proj partial [B, H] fp32
    resid1_ptr,  # h + r [B, H] fp32
    resid_out_ptr,
    oss_ptr,  # out: residual_out [B, H] bf16, per-column-block sums of squares [NBO, B] fp32
    B,
    H: tl.constexpr,
    WORLD: tl.constexpr,
    BB: tl.constexpr,
    BN: tl.constexpr,
):
    nb = tl.program_id(0)
    rb = tl.arange(0, BB)
    rn = nb * BN + tl.arange(0, BN)
    m2 = (rb < B)[:, None] & (rn < H)[None, :]
    tot = _rank_sum(rb[:, None] * H + rn[None, :], m2, v0, v1, v2, v3, v4, v5, v6, v7, WORLD)
    K._o_finish(tot, nb, rb, rn, m2, resid1_ptr, resid_out_ptr, oss_ptr, B, H)


# ------------------------------------------------------------------------------------------------------------
# 5a. this rank's router rows | latent-down rows | shared w13 + SiTU
# ------------------------------------------------------------------------------------------------------------
@triton.jit
def front_tp_kernel(
    x_ptr,
    oss_ptr,  # residual_out [B, H] bf16, its per-block sums of squares [NBO, B]
    router_ptr,
    down_ptr,
    sw13_ptr,  # post_norm-folded: this rank's router rows [EL, H], latent-down rows [LL, H], shared [2*SI, H]
    logits_ptr,
    lat_ptr,
    sh_ptr,  # out: logits slice [B, EL] fp32, latent slice [B, LL] bf16 (exchange buffer), shared act [B, SI]
    ctr_ptr,
    B,
    H: tl.constexpr,
    EL: tl.constexpr,
    LL: tl.constexpr,
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
    # no dependencies inside the launch: role = program id (the router roles' CTR_ROUTER count is unused)
    K._front_gemv_role(
        tl.program_id(0),
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
        EL,
        LL,
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


# ------------------------------------------------------------------------------------------------------------
# 5b. gather logits -> top-k + touched-expert list | gather the latent
# ------------------------------------------------------------------------------------------------------------
@triton.jit
def route_tp_kernel(
    g0,
    g1,
    g2,
    g3,
    g4,
    g5,
    g6,
    g7,  # every rank's logits slice [B, EL] fp32
    l0,
    l1,
    l2,
    l3,
    l4,
    l5,
    l6,
    l7,  # every rank's latent slice [B, LL] bf16
    logits_ptr,
    lat_ptr,  # out: full logits [B, E] fp32, full latent [B, LAT] bf16 (local)
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
    EL: tl.constexpr,
    LAT: tl.constexpr,
    LL: tl.constexpr,
    WORLD: tl.constexpr,
    TOPK: tl.constexpr,
    RENORM: tl.constexpr,
    EP: tl.constexpr,
    TB: tl.constexpr,
    KP: tl.constexpr,
    PP: tl.constexpr,
    BB: tl.constexpr,
    GBN: tl.constexpr,
):
    pid = tl.program_id(0)
    NT = tl.cdiv(B, TB)
    if pid < NT:
        # top-k role: its rows' logits straight from every rank's slice (each element read once)
        rb = pid * TB + tl.arange(0, TB)
        bm = rb < B
        re = tl.arange(0, EP)
        lg = tl.zeros([TB, EP], dtype=tl.float32)
        for r in tl.static_range(WORLD):
            gsrc = _pick(r, g0, g1, g2, g3, g4, g5, g6, g7, WORLD)
            col = re - r * EL
            own = (col >= 0) & (col < EL)
            x = tl.load(gsrc + rb[:, None] * EL + col[None, :], mask=bm[:, None] & own[None, :], other=0.0)
            lg = tl.where(own[None, :], x, lg)
        tl.store(logits_ptr + rb[:, None] * E + re[None, :], lg, mask=bm[:, None] & (re < E)[None, :])
        K._topk_rows(
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
    else:
        # latent gather role: column block jb of rank r's slice -> local latent columns r*LL + ...
        NJ: tl.constexpr = (LL + GBN - 1) // GBN
        q = pid - NT
        rg = q // NJ  # names differ from the other branch's: Triton merges names bound in both branches
        jb = q % NJ
        lsrc = _pick(rg, l0, l1, l2, l3, l4, l5, l6, l7, WORLD)
        rbg = tl.arange(0, BB)
        rj = jb * GBN + tl.arange(0, GBN)
        mg = (rbg < B)[:, None] & (rj < LL)[None, :]
        xl = tl.load(lsrc + rbg[:, None] * LL + rj[None, :], mask=mg, other=0.0)
        tl.store(lat_ptr + rbg[:, None] * LAT + (rg * LL + rj)[None, :], xl, mask=mg)


# ------------------------------------------------------------------------------------------------------------
# 7a. routed w2 partial (fp32, fixed-order pair sum) | shared w2 partial -> exchange buffer [B, LAT + H]
# ------------------------------------------------------------------------------------------------------------
@triton.jit
def down_tp_kernel(
    act_ptr,
    w2_ptr,  # act [B*TOPK, NI] bf16 (sorted-pair rows), w2 [E, LAT, NI] (this rank's intermediate slice)
    slot_exp_ptr,
    slot_off_ptr,
    slot_cnt_ptr,
    sorted_pair_ptr,
    topk_w_ptr,
    ypair_ptr,  # scratch [B*TOPK, LAT] fp32
    sh_ptr,
    sw2_ptr,  # shared act [B, SI] bf16, shared_w2 [H, SI] (this rank's slice)
    part_ptr,  # out: [B, LAT + H] fp32 = routed latent partial | shared partial
    ctr_ptr,
    B,
    P,
    H: tl.constexpr,
    LAT: tl.constexpr,
    NI: tl.constexpr,
    SI: tl.constexpr,
    TOPK: tl.constexpr,
    BT: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    MODE: tl.constexpr,
    BB: tl.constexpr,
    BNT: tl.constexpr,
    BKT: tl.constexpr,
    MODE_T: tl.constexpr,
    RB: tl.constexpr,
):
    pid = tl.program_id(0)
    NBL: tl.constexpr = (LAT + BN - 1) // BN
    n_down = NBL * P
    if pid < n_down:
        K._down_role(
            pid,
            act_ptr,
            w2_ptr,
            slot_exp_ptr,
            slot_off_ptr,
            slot_cnt_ptr,
            sorted_pair_ptr,
            topk_w_ptr,
            ypair_ptr,
            part_ptr,
            part_ptr,  # lss: not written with PARTIAL
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
            True,
            LAT + H,
        )
    else:
        rb = tl.arange(0, BB)
        rn = (pid - n_down) * BNT + tl.arange(0, BNT)
        shared = K._shared_w2(rb, rn, sh_ptr, sw2_ptr, B, H, SI, BB, BNT, BKT, MODE_T)
        tl.store(
            part_ptr + rb[:, None] * (LAT + H) + (LAT + rn)[None, :],
            shared,
            mask=(rb < B)[:, None] & (rn < H)[None, :],
        )


# ------------------------------------------------------------------------------------------------------------
# 7b. reduce over ranks -> routed RMSNorm -> latent_up + shared -> hidden_out
# ------------------------------------------------------------------------------------------------------------
@triton.jit
def tail_tp_kernel(
    v0,
    v1,
    v2,
    v3,
    v4,
    v5,
    v6,
    v7,  # every rank's [B, LAT + H] fp32 partials
    up_ptr,  # routed_norm-folded latent_up [H, LAT] (replicated)
    latent_ptr,
    lss_ptr,  # scratch: reduced latent [B, LAT] bf16, its per-block sums of squares [NRED, B] fp32
    out_ptr,  # out: hidden_out [B, H] bf16
    ctr_ptr,
    B,
    H: tl.constexpr,
    LAT: tl.constexpr,
    EPS: tl.constexpr,
    WORLD: tl.constexpr,
    RBN: tl.constexpr,
    RB: tl.constexpr,
    BB: tl.constexpr,
    BNT: tl.constexpr,
    BKT: tl.constexpr,
    MODE_T: tl.constexpr,
    PC: tl.constexpr,
):
    # roles in ticket order: every GEMV CTA starts after all reduce CTAs have started (no deadlock)
    v = tl.atomic_add(ctr_ptr + 22, 1)  # CTR_TP_TAIL_TICKET
    NRED: tl.constexpr = (LAT + RBN - 1) // RBN
    LD: tl.constexpr = LAT + H
    if v < NRED:
        rn = v * RBN + tl.arange(0, RBN)
        nm = rn < LAT
        for b0 in range(0, B, RB):
            rb = b0 + tl.arange(0, RB)
            bm = rb < B
            m2 = bm[:, None] & nm[None, :]
            tot = _rank_sum(rb[:, None] * LD + rn[None, :], m2, v0, v1, v2, v3, v4, v5, v6, v7, WORLD)
            tb = tot.to(tl.bfloat16)
            tl.store(latent_ptr + rb[:, None] * LAT + rn[None, :], tb, mask=m2)
            tf = tl.where(m2, tb.to(tl.float32), 0.0)
            tl.store(lss_ptr + v * B + rb, tl.sum(tf * tf, axis=1), mask=bm)
        tl.debug_barrier()
        tl.atomic_add(ctr_ptr + 23, 1, sem="release")  # CTR_TP_RED_DONE
    else:
        rbt = tl.arange(0, BB)
        rnt = (v - NRED) * BNT + tl.arange(0, BNT)
        mt = (rbt < B)[:, None] & (rnt < H)[None, :]
        offt = rbt[:, None] * LD + (LAT + rnt)[None, :]
        shared = _rank_sum(offt, mt, v0, v1, v2, v3, v4, v5, v6, v7, WORLD)
        K._tail_up(
            shared,
            rbt,
            rnt,
            up_ptr,
            latent_ptr,
            lss_ptr,
            out_ptr,
            ctr_ptr,
            B,
            H,
            LAT,
            EPS,
            NRED,
            23,  # CTR_TP_RED_DONE
            NRED,
            BB,
            BNT,
            BKT,
            MODE_T,
            PC,
        )
