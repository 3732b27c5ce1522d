"""Host side of the fused path: a launch plan from host facts only, workspaces, and `forward`.

The plan depends on (config, batch, max_context, device kind) alone, so a CUDA graph captured for one batch
size replays the same launches; nothing here reads a device value.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from baselines.vllm.kimi_k3.config import K3LayerConfig

from . import prep

if TYPE_CHECKING:
    import torch

    from baselines.vllm.kimi_k3.weights import K3LayerWeights

    from ..layer import DecodeBatch

NUM_SMS = 132  # H200 SXM; only used to size grids (any value is correct)
LOG2E = 1.4426950408889634


def _p2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Plan:
    B: int
    # GEMV tiles shared by the dense GEMVs: rows padded (BB), mode 0 = FMA, 1 = tensor cores
    BB: int
    MODE: int
    # 1 qkv_a
    A_BN: int
    A_BK: int
    XR: int  # rows per norm CTA of kernel 1
    # 2 q_b
    QB_CN: int
    QB_BK: int
    KVR: int
    # 3 attention
    BH: int
    BLOCK_N: int
    S: int
    MB: int
    # 4 o_proj
    O_BN: int
    O_BK: int
    O_KS: int
    # 5 moe front
    F_BN: int
    F_BK: int
    TB: int
    # 6/7 experts
    X_MODE: int  # expert_down (and the tail when MODE says so); expert_up uses U_MODE
    BT: int
    U_MODE: int
    U_BT: int
    U_BN: int
    U_BK: int
    U_P: int
    D_BN: int
    D_BK: int
    D_P: int
    T_BN: int
    T_BK: int
    RB: int
    # attention of kernel 3: "flashinfer" (the engine's FA3 MLA, between a q-pack kernel and the W_UV + gate
    # epilogue) or "own" (this path's split-KV kernel with the merge + W_UV + gate in the same launch)
    ATTN: str = "own"
    num_warps: int = 4
    attn_warps: int = 8
    stages: int = 3
    x_stages: int = 4  # expert kernels
    # Programmatic Dependent Launch for kernels 2..7 (each calls griddepcontrol.launch_dependents, then
    # prefetches PF bytes of each of its first weight rows into L2, then griddepcontrol.wait before it
    # touches anything the previous kernel wrote); kernel 1 and FlashInfer launch as usual
    PDL: bool = False
    PF: int = 0
    # value columns per W_UV + gate epilogue program (FlashInfer attention): DV / M_VC programs per head
    M_VC: int = 128
    # FlashInfer attention: the q_b kernel's last CTA per head packs the bf16 query (no attn_pack_kernel)
    QPACK: bool = True
    # FlashInfer attention at TP 1: the W_UV + gate epilogue runs inside the o_proj launch (first programs in
    # ticket order; the o_proj programs prefetch OM_PF bytes of each weight row into L2 while they wait): 7
    # kernels a layer instead of 8, but measured 3-13 us slower (B1..B64, docs/results/kimi_k3-pdl/), so off
    OMERGE: bool = False
    OM_PF: int = 0
    # per-kernel overrides of MODE / num_warps / num_stages (-1 / 0: the plan-wide value); keys a, qb, o,
    # f (moe_front), t (the tail of kernel 7), u, d (expert kernels: stages default x_stages)
    A_MODE: int = -1
    QB_MODE: int = -1
    O_MODE: int = -1
    F_MODE: int = -1
    T_MODE: int = -1
    A_NW: int = 0
    QB_NW: int = 0
    O_NW: int = 0
    F_NW: int = 0
    U_NW: int = 0
    D_NW: int = 0
    A_ST: int = 0
    QB_ST: int = 0
    O_ST: int = 0
    F_ST: int = 0
    U_ST: int = 0
    D_ST: int = 0
    # B1 gap trials (docs/results/kimi_k3-r21/), off unless measured faster: F_RBN > 0: router rows per
    # moe_front CTA (the router CTAs finish early and the top-k overlaps the other GEMVs); T_PF: bytes of
    # each latent_up row the tail CTAs of expert_down prefetch into L2 before they wait for the latent;
    # T_SLEEP: ns the waiting tail CTAs sleep between polls of the latent counter
    F_RBN: int = 0
    T_PF: int = 0
    T_SLEEP: int = 0

    def with_(self, **kw: Any) -> Plan:
        return replace(self, **kw)

    def mode(self, key: str) -> int:
        m = int(getattr(self, key.upper() + "_MODE", -1))
        return self.MODE if m < 0 else m

    def bb(self, key: str) -> int:
        """Row padding of kernel `key`'s GEMV tiles: the plan's BB for its MODE, else 16 (tensor cores) or
        the batch rounded up to a power of two (FMA)."""
        m = self.mode(key)
        if m == self.MODE:
            return self.BB
        return max(16, _p2(self.B)) if m == 1 else _p2(self.B)

    def nw(self, key: str) -> int:
        return int(getattr(self, key.upper() + "_NW", 0)) or self.num_warps

    def st(self, key: str) -> int:
        d = self.x_stages if key in ("u", "d") else self.stages
        return int(getattr(self, key.upper() + "_ST", 0)) or d

    def pdl(self) -> dict[str, Any]:
        """Launch options of kernels 2..7: Triton's `launch_pdl` when the plan asks for PDL."""
        return {"launch_pdl": True} if self.PDL else {}


def make_plan(cfg: K3LayerConfig, B: int, max_context: int, *, gpu: bool = True, **override: Any) -> Plan:
    """Block sizes and grid splits. Tiny (CPU-test) shapes get small tiles so the interpreter stays quick."""
    mode = 0 if B <= 2 else 1
    bb = _p2(B) if mode == 0 else max(16, _p2(B))
    big = cfg.hidden >= 1024
    nh = cfg.local_heads
    sms = NUM_SMS if gpu else 8

    def bk(k: int, pref: int) -> int:
        return max(16, min(pref, _p2(k)))

    # 1 qkv_a: 16-row blocks give >= 228 CTAs even at TP8 (no split-K needed)
    a_bn = 16
    a_bk = bk(cfg.hidden, 256 if mode == 0 else 128) if big else 32
    rows = cfg.qkv_a_g_rows
    # 2 q_b: nope/rope row chunks per head
    cn = 64 if nh >= 48 else (32 if nh >= 16 else 16)
    cn = min(cn, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim) if big else 8
    while cfg.qk_nope_head_dim % cn or cfg.qk_rope_head_dim % cn:
        cn //= 2
    qb_bk = bk(cfg.q_lora_rank, 128 if bb <= 16 else 64) if big else 32
    # 3 attention: head block (all local heads when they fit); splits so B x splits x head blocks fill the GPU
    bh = 32 if nh > 16 else max(16, _p2(nh))
    block_n = 64 if big else 16
    nhb = _cdiv(nh, bh)
    max_ctx = max(1, max_context)
    # splits: fill the SMs, but keep >= MIN_SPLIT_TOKENS per split (the merge reads every split's partial)
    s = max(1, min(_cdiv(2 * sms, B * nhb), _cdiv(max_ctx, 256 if big else 2 * block_n), 128))
    # 4 o_proj
    o_k = nh * cfg.v_head_dim
    o_bn = (16 if mode == 0 else (32 if B < 16 else 64)) if big else 16
    o_bk = bk(o_k, 256 if mode == 0 else 128) if big else 32
    o_ks = 1
    while _cdiv(cfg.hidden, o_bn) * o_ks < 2 * sms and o_ks < 4 and _cdiv(o_k, o_bk) >= 8 * o_ks:
        o_ks *= 2
    # 5 moe front (router | latent down | shared w13 rows side by side): wide blocks at large batch when the
    # rows still give two CTAs per SM
    f_rows = cfg.n_routed_experts + cfg.latent + 2 * cfg.shared_inter
    f_bn = (16 if mode == 0 else (64 if B >= 32 and f_rows >= 64 * 2 * sms else 32)) if big else 16
    f_bk = bk(cfg.hidden, 256 if mode == 0 else 128) if big else 32
    # 6 expert up: tensor cores (tokens padded to 16), one (slot, column block) per CTA, idle slots exit
    max_slots = min(cfg.n_routed_experts, B * cfg.top_k)
    u_mode, u_bt = 1, 16
    u_bn = 64 if big else 16
    u_bk = 128 if big else 32
    u_p = max_slots
    # 7 expert down: tensor cores (tokens padded to 16; measured faster than the FMA tile at 1-2 tokens too:
    # docs/results/kimi_k3-pdl/), persistent over slots (the last-arriver sums)
    tuned = big and cfg.tp == 1  # the TP-1 shapes the per-kernel tiles below were measured at
    x_mode = 1 if tuned else (0 if B <= 2 else 1)
    bt = 16 if x_mode == 1 else (1 if B == 1 else 2)
    d_bn = (32 if B <= 2 else 64) if big else 16
    d_bk = bk(cfg.routed_inter, 128) if big else 32
    nbl = _cdiv(cfg.latent, d_bn)
    d_p = max(1, min(max_slots, _cdiv(8 * sms, nbl)))
    t_bn = (16 if mode == 0 else 32) if big else 16
    t_bk = bk(cfg.latent, 256 if mode == 0 else 128) if big else 32
    if not big:
        # Interpreter (CPU tests): its cost is per executed op, not per element, so use whole-matrix tiles
        # (one program per role where possible). Tests override these to exercise the multi-block paths.
        a_bn, a_bk = _p2(rows), _p2(cfg.hidden)
        qb_bk = _p2(cfg.q_lora_rank)
        block_n = 64
        s = 1
        o_bn, o_bk, o_ks = _p2(cfg.hidden), _p2(o_k), 1
        f_bn, f_bk = 64, _p2(cfg.hidden)
        u_bn, u_bk = max(2, _p2(2 * cfg.routed_inter)), _p2(cfg.latent)
        d_bn, d_bk, d_p = _p2(cfg.latent), _p2(cfg.routed_inter), 1
        t_bn, t_bk = _p2(cfg.hidden), _p2(max(cfg.latent, cfg.shared_inter))
        bt = max(bt, min(16, _p2(B)) if x_mode == 0 else 16)
    # Per-kernel tiles measured on the H200 (docs/results/kimi_k3-pdl/): streaming the dense weights through
    # cp.async-pipelined tensor-core tiles (rows padded to 16) beats the FMA tile at 1-2 rows too, and 64-row
    # qkv_a blocks beat 16-row ones at every batch measured
    # M_VC 32: the folded W_UV epilogue keeps the o_proj launch's registers low (128: 255 at B >= 4)
    gpu_tiles: dict[str, Any] = dict(M_VC=32) if big else {}
    if tuned:
        gpu_tiles.update(A_MODE=1, A_BN=64, A_BK=128 if bb <= 16 else 64, A_ST=4)
        if B <= 2:  # (QB_BK 64 at 2 rows too: 0.2 % faster at 4k and 32k in runs 1-2 of kimi_k3-r20)
            gpu_tiles.update(QB_MODE=1, QB_BK=64, QB_ST=4)
            gpu_tiles.update(O_MODE=1, O_BN=64, O_BK=128, O_KS=2, O_ST=4)
        if B == 1:  # (F_RBN 32: 0.4-0.8 % faster at 4k and 32k in runs 1-2 of kimi_k3-r21)
            gpu_tiles.update(F_MODE=1, F_BN=64, F_BK=128, F_ST=4, D_ST=3, F_RBN=32)
        if B > 32:
            gpu_tiles.update(x_stages=3)
    if big and cfg.tp == 8:
        # The TP-8 per-rank shard shapes (12 heads, expert intermediate 384), measured on one H200 against
        # the older tiles side by side (docs/results/kimi_k3-r20/): 32-row tensor-core qkv_a blocks, 4 stages
        # up to 32 rows (114 CTAs beat 228 16-row ones at 1-64 rows); at 1-2 rows tensor-core tiles for q_b,
        # moe_front (32 rows) and expert_down too, and BK 256 for qkv_a and moe_front; at 3-32 rows 4 stages
        # for q_b and moe_front; from 33 rows 3-stage expert kernels. The TP-8 sequence with collectives
        # (tp_launch) inherits them, unmeasured (no 8-GPU box).
        gpu_tiles.update(A_MODE=1, A_BN=32, A_BK=256 if B <= 2 else 128, A_ST=4 if B <= 32 else 0)
        if B <= 2:
            gpu_tiles.update(QB_MODE=1, QB_BK=128, QB_ST=4, F_MODE=1, F_BN=32, F_BK=256, F_ST=3)
            gpu_tiles.update(X_MODE=1, BT=16)
        elif B <= 32:
            gpu_tiles.update(QB_ST=4, F_ST=4)
        else:
            gpu_tiles.update(x_stages=3)
        # Measured faster at exactly these batch sizes (docs/results/kimi_k3-r23b/, run 1: oracle-checked,
        # bit-repeatable, faster than both repeats of the old plan): B1 16-row router CTAs + 4-stage
        # moe_front (-2.1 / -2.7 us at 4k / 32k), B2 6-stage q_b (-2.2 us), B8 qkv_a BK 256 + 5 stages
        # (-5.0 us)
        if B == 1:
            gpu_tiles.update(F_RBN=16, F_ST=4)
        elif B == 2:
            gpu_tiles.update(QB_ST=6)
        elif B == 8:
            gpu_tiles.update(A_BK=256, A_ST=5)
    plan = Plan(
        B=B,
        BB=bb,
        MODE=mode,
        A_BN=a_bn,
        A_BK=a_bk,
        XR=8 if big else _p2(B),
        QB_CN=cn,
        QB_BK=qb_bk,
        KVR=4,
        BH=bh,
        BLOCK_N=block_n,
        S=s,
        MB=16,
        O_BN=o_bn,
        O_BK=o_bk,
        O_KS=o_ks,
        F_BN=f_bn,
        F_BK=f_bk,
        TB=min(2, _p2(B)) if big else min(8, _p2(B)),
        X_MODE=x_mode,
        BT=bt,
        U_MODE=u_mode,
        U_BT=u_bt,
        U_BN=u_bn,
        U_BK=u_bk,
        U_P=u_p,
        D_BN=d_bn,
        D_BK=d_bk,
        D_P=d_p,
        T_BN=t_bn,
        T_BK=t_bk,
        RB=16 if big else 8,
        ATTN=default_attention(gpu),
    ).with_(**gpu_tiles)
    return plan.with_(**override) if override else plan


def _pf(p: Plan, row: int) -> int:
    """Prefetch bytes per weight row under PDL: PF rounded down to a power of two, at most the bf16 row."""
    if not p.PDL or p.PF < 128:
        return 0
    b = min(int(p.PF), 2 * row)
    return max(128, 1 << (b.bit_length() - 1))


def default_attention(gpu: bool) -> str:
    """FlashInfer's FA3 MLA on a GPU where flashinfer imports (measured faster than the own kernel at every
    grid point: docs/results/kimi_k3-baseline/), else the own kernel (CPU tests run both)."""
    if not gpu:
        return "own"
    try:
        import flashinfer.mla  # noqa: F401
    except Exception:  # not installed, or no JIT toolchain: the own kernel
        return "own"
    return "flashinfer"


def _check_plan(cfg: K3LayerConfig, p: Plan) -> None:
    from . import kernels as K

    if cfg.qk_nope_head_dim % p.QB_CN or cfg.qk_rope_head_dim % p.QB_CN:
        raise ValueError("QB_CN must divide nope and rope dims")
    if _cdiv(cfg.local_heads, p.BH) > 15:
        raise ValueError("too many head blocks for the counter layout")
    if _cdiv(cfg.hidden, p.O_BN) > K.CTR_DOWN - K.CTR_O:
        raise ValueError("too many o_proj column blocks for the counter layout")
    if cfg.n_routed_experts > K.CTR_QH - K.CTR_ECNT:
        raise ValueError("too many experts for the counter layout")
    if cfg.local_heads > K.CTR_SIZE - K.CTR_QH:
        raise ValueError("too many heads for the counter layout")
    if cfg.n_routed_experts > K.CTR_SIZE - K.CTR_ECNT:
        raise ValueError("too many experts for the counter layout")
    if _cdiv(cfg.latent, p.D_BN) > K.CTR_ECNT - K.CTR_DOWN:
        raise ValueError("too many latent column blocks for the counter layout")
    if p.M_VC < 16 and cfg.hidden >= 1024:
        raise ValueError("M_VC must be >= 16 (the epilogue's dot) at real shapes")
    if p.M_VC & (p.M_VC - 1):
        raise ValueError("M_VC must be a power of two")
    if p.F_BN % 2 or p.U_BN % 2:
        raise ValueError("interleaved gate/up tiles need an even block")
    if p.F_RBN and (p.F_RBN < 16 or p.F_RBN & (p.F_RBN - 1)):
        raise ValueError("F_RBN must be 0 or a power of two >= 16")
    if p.T_PF and (p.T_PF < 128 or p.T_PF & (p.T_PF - 1)):
        raise ValueError("T_PF must be 0 or a power of two >= 128")
    if not 0 <= p.T_SLEEP <= 100_000:
        raise ValueError("T_SLEEP must be 0..100000 ns")


def launch_attention(cfg: K3LayerConfig, w: K3LayerWeights, batch: DecodeBatch, p: Plan) -> dict[str, Any]:
    """Kernels 1-3 (qkv_a, q_b, attention; shared by TP 1 and TP > 1, on the rank's shard): checks the batch,
    zeroes the sync counters and writes the new token's latent into the cache. Returns the buffers by name."""
    import torch

    from . import kernels as K

    h_in, r_in = batch.hidden, batch.residual
    B = int(h_in.shape[0])
    f32, bf16, i32 = torch.float32, torch.bfloat16, torch.int32
    H, NH, KL, DN, DR, DV = (
        cfg.hidden,
        cfg.local_heads,
        cfg.kv_lora_rank,
        cfg.qk_nope_head_dim,
        cfg.qk_rope_head_dim,
        cfg.v_head_dim,
    )
    QL = cfg.q_lora_rank
    R = cfg.qkv_a_g_rows
    eps = float(cfg.rms_norm_eps)
    kvd = cfg.kv_cache_dim
    max_blocks = int(batch.block_table.shape[1])
    if tuple(batch.kv_cache.shape[1:]) != (cfg.block_size, kvd):
        raise ValueError(
            f"kv_cache must be [blocks, {cfg.block_size}, {kvd}], got {tuple(batch.kv_cache.shape)}"
        )
    for name, t in (
        ("hidden", h_in),
        ("residual", r_in),
        ("kv_cache", batch.kv_cache),
        ("block_table", batch.block_table),
        ("seq_lens", batch.seq_lens),
    ):
        if not t.is_contiguous():
            raise ValueError(f"batch.{name} must be contiguous")

    def ws(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return batch.scratch("fused." + name, shape, dtype)

    fw = prep.prepare(w)
    nqc = _cdiv(QL, p.A_BN)
    PC = 64
    ctr = ws("ctr", (K.CTR_SIZE,), i32)
    raw = ws("raw", (B, R), bf16)
    ssq = ws("ssq", (nqc, B), f32)
    ss_in = ws("ss_in", (B,), f32)
    resid1 = ws("resid1", (B, H), f32)
    ncn = DN // p.QB_CN
    ql_part = ws("ql_part", (ncn, B, NH, KL), f32)
    qpe = ws("qpe", (B, NH, DR), f32)
    fi = p.ATTN == "flashinfer"
    if fi:
        # FlashInfer reads a packed bf16 query and writes the merged latent output
        opart = ws("fi_o", (B, NH, KL), bf16)
        lse = ws("fi_q", (B, NH, KL + DR), bf16)
    else:
        opart = ws("opart", (B, p.S, NH, KL), f32)
        lse = ws("lse", (B, p.S, NH), f32)
    attn_out = ws("attn_out", (B, NH * DV), bf16)

    klp = _p2(KL)
    drp = max(16, _p2(DR))
    lc = min(klp, 128)

    # 1
    nx = _cdiv(B, p.XR)
    K.qkv_a_kernel[(nx + _cdiv(R, p.A_BN),)](
        h_in,
        r_in,
        fw.w_qkv_a_g,
        raw,
        ssq,
        resid1,
        ss_in,
        ctr,
        B,
        H=H,
        R=R,
        QL=QL,
        CTR_N=K.CTR_SIZE,
        NX=nx,
        XR=p.XR,
        XK=min(512, _p2(H)),
        BB=p.bb("a"),
        BN=p.A_BN,
        BK=p.A_BK,
        MODE=p.mode("a"),
        num_warps=p.nw("a"),
        num_stages=p.st("a"),
    )
    # 2
    cnp = max(16, p.QB_CN)
    n_q = NH * ((DN + DR) // p.QB_CN)
    K.q_b_kernel[(n_q + _cdiv(B, p.KVR),)](
        raw,
        ssq,
        ss_in,
        w.kv_a_norm,
        fw.w_q_b,
        w.w_kv_b,
        ql_part,
        qpe,
        batch.kv_cache,
        batch.block_table,
        batch.seq_lens,
        max_blocks,
        B,
        1.0 if fi else float(cfg.softmax_scale * LOG2E),
        H=H,
        R=R,
        EPS=eps,
        QL=QL,
        KL=KL,
        DN=DN,
        DR=DR,
        DV=DV,
        NH=NH,
        BS=cfg.block_size,
        CN=p.QB_CN,
        CNP=cnp,
        BB=p.bb("qb"),
        BK=p.QB_BK,
        MODE=p.mode("qb"),
        KLP=klp,
        LC=lc,
        DRP=drp,
        KVR=p.KVR,
        NQC=nqc,
        PC=PC,
        PDL=p.PDL,
        PF=_pf(p, QL),
        PACK=fi and p.QPACK,
        q_ptr=lse,
        ctr_ptr=ctr,
        CTR_QH_SLOT=K.CTR_QH,
        num_warps=p.nw("qb"),
        num_stages=p.st("qb"),
        **p.pdl(),
    )
    # 3
    nhb = _cdiv(NH, p.BH)
    if fi:
        from baselines.vllm.kimi_k3 import attention as engine_attention

        q_mqa = lse
        if not p.QPACK:  # (QPACK: q_b_kernel packed it)
            K.attn_pack_kernel[(B * nhb,)](
                ql_part, qpe, q_mqa, B, KL=KL, DR=DR, NH=NH, NCN=ncn, BH=p.BH, KLP=klp, DRP=drp, PDL=p.PDL,
                num_warps=4, **p.pdl()
            )
        if batch.kv_cache.device.type != "meta":  # (meta: the compile-only warm-up of measure_fused)
            engine_attention.for_batch(cfg, batch).run(q_mqa, batch.kv_cache, out=opart)
    vc = min(p.M_VC, _p2(DV)) if fi else max(16, _p2(DV))  # (>= 16 at real shapes: _check_plan)
    bufs = {
        "ctr": ctr,
        "raw": raw,
        "ssq": ssq,
        "ss_in": ss_in,
        "resid1": resid1,
        "ql_part": ql_part,
        "qpe": qpe,
        "opart": opart,
        "lse": lse,
        "attn_out": attn_out,
    }
    if fi and p.OMERGE:  # the epilogue runs in the o_proj launch (`launch_o_proj`)
        return bufs
    grid_attn = (0 if fi else B * p.S * nhb) + NH * _cdiv(B, p.MB) * (_cdiv(DV, vc) if fi else 1)
    K.attn_kernel[(grid_attn,)](
        ql_part,
        qpe,
        batch.kv_cache,
        batch.block_table,
        batch.seq_lens,
        max_blocks,
        opart,
        lse,
        w.w_kv_b,
        raw,
        ss_in,
        attn_out,
        ctr,
        B,
        p.S,
        H=H,
        R=R,
        EPS=eps,
        GATE_OFF=cfg.qkv_a_rows,
        USE_GATE=bool(cfg.use_output_gate),
        KL=KL,
        DN=DN,
        DR=DR,
        DV=DV,
        NH=NH,
        BS=cfg.block_size,
        NCN=ncn,
        BH=p.BH,
        BLOCK_N=p.BLOCK_N,
        KLP=klp,
        DRP=drp,
        DVP=max(16, _p2(DV)),
        MB=p.MB,
        LC=lc,
        SP=_p2(p.S),
        SC=_p2(p.S),
        BY_ROW=p.S > 4,
        MERGE_ONLY=fi,
        PDL=p.PDL,
        PF=_pf(p, KL),
        VC=vc,
        num_warps=p.attn_warps,
        num_stages=2,
        **p.pdl(),
    )
    return bufs


def forward_planned(
    cfg: K3LayerConfig, w: K3LayerWeights, batch: DecodeBatch, plan: Plan
) -> tuple[torch.Tensor, torch.Tensor]:
    out, resid, _ = run_planned(cfg, w, batch, plan)
    return out, resid


def _tp_of(batch: DecodeBatch) -> Any:
    tp = batch.tp
    return tp if tp is not None and tp.world > 1 else None


def moe_scratch(cfg: K3LayerConfig, batch: DecodeBatch, p: Plan) -> dict[str, torch.Tensor]:
    """The o_proj and MoE buffers both layer sequences use (TP 1 and `tp_launch`'s TP > 1), by the names the
    intermediates dict returns them under."""
    import torch

    f32, bf16, i32 = torch.float32, torch.bfloat16, torch.int32
    B = int(batch.hidden.shape[0])
    H, E, TOPK, LAT = cfg.hidden, cfg.n_routed_experts, cfg.top_k, cfg.latent
    max_slots = min(E, B * TOPK)

    def ws(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return batch.scratch("fused." + name, shape, dtype)

    return {
        "o_part": ws("o_part", (p.O_KS, B, H), f32),
        "oss": ws("oss", (_cdiv(H, p.O_BN), B), f32),
        "logits": ws("logits", (B, E), f32),
        "lat": ws("lat", (B, LAT), bf16),
        "sh": ws("sh", (B, cfg.shared_inter), bf16),
        "topk_ids": ws("topk_id", (B, TOPK), i32),
        "topk_weights": ws("topk_w", (B, TOPK), f32),
        "rank": ws("rank", (B * TOPK,), i32),
        "eoff": ws("eoff", (E,), i32),
        "slot_exp": ws("slot_exp", (max_slots,), i32),
        "slot_off": ws("slot_off", (max_slots,), i32),
        "slot_cnt": ws("slot_cnt", (max_slots,), i32),
        "sorted_tok": ws("sorted_tok", (B * TOPK,), i32),
        "sorted_pair": ws("sorted_pair", (B * TOPK,), i32),
        "act": ws("act", (B * TOPK, cfg.routed_inter), bf16),
        "ypair": ws("ypair", (B * TOPK, LAT), f32),
        "latent": ws("latent", (B, LAT), bf16),
        "lss": ws("lss", (_cdiv(LAT, p.D_BN), B), f32),
    }


def route_args(
    cfg: K3LayerConfig, w: K3LayerWeights, m: dict[str, torch.Tensor], ctr: torch.Tensor, B: int
) -> tuple[Any, ...]:
    """The top-k role's positional arguments, the same in `moe_front_kernel` and `route_tp_kernel`: the
    selection bias, the routing and touched-expert buffers of `moe_scratch`, the counters, B, the scale."""
    names = ("topk_ids", "topk_weights", "rank", "eoff", "slot_exp", "slot_off", "slot_cnt", "sorted_tok",
             "sorted_pair")
    return (w.e_score_correction_bias, *(m[n] for n in names), ctr, B, float(cfg.routed_scaling_factor))


def route_consts(cfg: K3LayerConfig, p: Plan, B: int) -> dict[str, Any]:
    """The top-k role's constexprs (both kernels of `route_args`)."""
    return dict(
        TOPK=cfg.top_k,
        RENORM=bool(cfg.moe_renormalize),
        EP=_p2(cfg.n_routed_experts),
        TB=p.TB,
        KP=_p2(cfg.top_k),
        PP=_p2(B * cfg.top_k),
    )


def launch_o_proj(
    cfg: K3LayerConfig,
    w: K3LayerWeights,
    p: Plan,
    a: dict[str, torch.Tensor],
    m: dict[str, torch.Tensor],
    out: torch.Tensor,
    *,
    partial: bool,
) -> None:
    """Kernel 4 (o_proj; TP 1: + residual add into `out`; TP > 1: this rank's partial into `out`), the same
    launch at every TP size."""
    from . import kernels as K

    B = int(a["attn_out"].shape[0])
    merge = p.ATTN == "flashinfer" and p.OMERGE
    if merge and partial:
        raise ValueError("the folded W_UV epilogue is TP-1 only (plan OMERGE)")
    KL, DV, NH = cfg.kv_lora_rank, cfg.v_head_dim, cfg.local_heads
    vc = min(p.M_VC, _p2(DV))
    nm = NH * _cdiv(B, p.MB) * _cdiv(DV, vc) if merge else 0
    mk: dict[str, Any] = {}
    if merge:
        mk = dict(
            opart_ptr=a["opart"],
            wkvb_ptr=w.w_kv_b,
            raw_ptr=a["raw"],
            ssin_ptr=a["ss_in"],
            R=cfg.qkv_a_g_rows,
            EPS=float(cfg.rms_norm_eps),
            GATE_OFF=cfg.qkv_a_rows,
            USE_GATE=bool(cfg.use_output_gate),
            KL=KL,
            DN=cfg.qk_nope_head_dim,
            DV=DV,
            NH=NH,
            KLP=_p2(KL),
            MB=p.MB,
            LC=min(_p2(KL), 128),
            VC=vc,
            MPF=max(128, 1 << (min(p.OM_PF, 2 * NH * DV).bit_length() - 1)) if p.OM_PF >= 128 else 0,
        )
    K.o_proj_kernel[(nm + _cdiv(cfg.hidden, p.O_BN) * p.O_KS,)](
        a["attn_out"],
        w.w_o,
        a["resid1"],
        m["o_part"],
        out,
        m["oss"],
        a["ctr"],
        B,
        H=cfg.hidden,
        K=cfg.local_heads * cfg.v_head_dim,
        KS=p.O_KS,
        CTR_OFF=K.CTR_O,
        BB=p.bb("o"),
        BN=p.O_BN,
        BK=p.O_BK,
        MODE=p.mode("o"),
        PARTIAL=partial,
        PDL=p.PDL,
        PF=_pf(p, cfg.local_heads * cfg.v_head_dim),
        MERGE=merge,
        NM=nm,
        **mk,
        num_warps=p.nw("o"),
        num_stages=p.st("o"),
        **p.pdl(),
    )


def launch_expert_up(
    cfg: K3LayerConfig, w: K3LayerWeights, p: Plan, m: dict[str, torch.Tensor], ctr: torch.Tensor
) -> None:
    """Kernel 6 (grouped w13 + SiTU over the touched experts), the same launch at every TP size."""
    from . import kernels as K

    K.expert_up_kernel[(_cdiv(2 * cfg.routed_inter, p.U_BN) * p.U_P,)](
        m["lat"],
        w.w13,
        m["slot_exp"],
        m["slot_off"],
        m["slot_cnt"],
        m["sorted_tok"],
        m["act"],
        ctr,
        p.U_P,
        LAT=cfg.latent,
        NI=cfg.routed_inter,
        BETA=float(cfg.situ_beta),
        LBETA=float(cfg.situ_linear_beta),
        BT=p.U_BT,
        BN=p.U_BN,
        BK=p.U_BK,
        MODE=p.U_MODE,
        PDL=p.PDL,
        num_warps=p.nw("u"),
        num_stages=p.st("u"),
        **p.pdl(),
    )


def run_planned(
    cfg: K3LayerConfig, w: K3LayerWeights, batch: DecodeBatch, plan: Plan
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Launch the seven kernels (TP > 1: the TP sequence of `tp_launch`); returns (hidden_out, residual_out,
    intermediates by name)."""
    if _tp_of(batch) is not None:
        from . import tp_launch

        # no PDL across the TP publishes (barrier kernels of torch's symmetric memory)
        return tp_launch.run_planned_tp(cfg, w, batch, plan.with_(PDL=False, OMERGE=False))
    import torch

    from . import kernels as K

    _check_plan(cfg, plan)
    p = plan
    a = launch_attention(cfg, w, batch, p)
    ctr = a["ctr"]
    h_in = batch.hidden
    B = int(h_in.shape[0])
    dev = h_in.device
    bf16 = torch.bfloat16
    H = cfg.hidden
    E, TOPK, LAT, NI, SI = cfg.n_routed_experts, cfg.top_k, cfg.latent, cfg.routed_inter, cfg.shared_inter
    eps = float(cfg.rms_norm_eps)

    fw = prep.prepare(w)
    nbo = _cdiv(H, p.O_BN)
    nbl = _cdiv(LAT, p.D_BN)
    PC = 64
    m = moe_scratch(cfg, batch, p)
    resid_out = torch.empty((B, H), dtype=bf16, device=dev)
    hidden_out = torch.empty((B, H), dtype=bf16, device=dev)
    # 4
    launch_o_proj(cfg, w, p, a, m, resid_out, partial=False)
    # 5
    grid_f = _cdiv(E, p.F_RBN or p.F_BN) + _cdiv(B, p.TB) + _cdiv(LAT, p.F_BN) + _cdiv(2 * SI, p.F_BN)
    K.moe_front_kernel[(grid_f,)](
        resid_out,
        m["oss"],
        fw.router,
        fw.latent_down,
        fw.shared_w13,
        m["logits"],
        m["lat"],
        m["sh"],
        *route_args(cfg, w, m, ctr, B),
        H=H,
        E=E,
        LAT=LAT,
        SI=SI,
        EPS=eps,
        BETA=float(cfg.situ_beta),
        LBETA=float(cfg.situ_linear_beta),
        BB=p.bb("f"),
        BN=p.F_BN,
        BK=p.F_BK,
        MODE=p.mode("f"),
        **route_consts(cfg, p, B),
        NBO=nbo,
        PC=PC,
        PDL=p.PDL,
        PF=_pf(p, H),
        RBN=p.F_RBN,
        num_warps=p.nw("f"),
        num_stages=p.st("f"),
        **p.pdl(),
    )
    # 6
    launch_expert_up(cfg, w, p, m, ctr)
    # 7
    K.expert_down_kernel[(nbl * p.D_P + _cdiv(H, p.T_BN),)](
        m["act"],
        w.w2,
        m["slot_exp"],
        m["slot_off"],
        m["slot_cnt"],
        m["sorted_pair"],
        m["topk_weights"],
        m["ypair"],
        m["latent"],
        m["lss"],
        m["sh"],
        w.shared_w2,
        fw.latent_up,
        hidden_out,
        ctr,
        B,
        p.D_P,
        H=H,
        LAT=LAT,
        NI=NI,
        SI=SI,
        TOPK=TOPK,
        EPS=eps,
        BT=p.BT,
        BN=p.D_BN,
        BK=p.D_BK,
        MODE=p.X_MODE,
        BB=p.bb("t"),
        BNT=p.T_BN,
        BKT=p.T_BK,
        MODE_T=p.mode("t"),
        RB=p.RB,
        PC=PC,
        PDL=p.PDL,
        TPF=p.T_PF,
        SLEEP=p.T_SLEEP,
        num_warps=p.nw("d"),
        num_stages=p.st("d"),
        **p.pdl(),
    )
    bufs = {**a, **m}
    return hidden_out, resid_out, bufs


def forward_with_aux(
    cfg: K3LayerConfig, weights: K3LayerWeights, batch: DecodeBatch, plan: Plan | None = None
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """`forward` plus the intermediates tests look at (routing, touched-expert list, per-kernel outputs)."""
    plan = plan or make_plan(
        cfg, int(batch.hidden.shape[0]), int(batch.meta.max_context), gpu=batch.hidden.is_cuda
    )
    return run_planned(cfg, weights, batch, plan)


def forward(
    cfg: K3LayerConfig, weights: K3LayerWeights, batch: DecodeBatch
) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden_out [B, H] bf16, residual_out [B, H] bf16); writes the new token's latent into the cache."""
    B = int(batch.hidden.shape[0])
    if B == 0:
        return batch.hidden.new_empty(batch.hidden.shape), batch.residual.new_empty(batch.residual.shape)
    plan = make_plan(cfg, B, int(batch.meta.max_context), gpu=batch.hidden.is_cuda)
    return forward_planned(cfg, weights, batch, plan)


# Kernels per layer at TP 1: 7 own launches with the own attention; with FlashInfer's attention (the GPU
# default) 7 own launches (q_b packs FlashInfer's query; the W_UV + gate epilogue has its own launch) and
# FlashInfer's one MLA kernel: 8 (7 with the plan's OMERGE, measured slower).
KERNELS_PER_LAYER_OWN_ATTENTION = 7
KERNELS_PER_LAYER = 8


def kernels_per_layer(attention: str) -> int:
    """Kernels one TP-1 layer launches with attention "flashinfer" or "own"."""
    return KERNELS_PER_LAYER if attention == "flashinfer" else KERNELS_PER_LAYER_OWN_ATTENTION


# TP > 1 (`tp_launch`): Triton kernels per layer (own attention; +2 with FlashInfer's), and PeerBuffer
# publishes (barriers / all-gathers) per layer
KERNELS_PER_LAYER_TP = 10
PUBLISHES_PER_LAYER_TP = 3
