"""Host side of the fused path at TP > 1 (`batch.tp.world > 1`; kernels: `tp_kernels.py`, design: NOTES.md).

Per layer, on every rank (W = world; publish = PeerBuffer.publish):

  1 qkv_a   2 q_b   3 attn      (kernels.py, unchanged, on the rank's heads)
  4 o_proj (PARTIAL): this rank's fp32 partial -> ar_o.local                       publish(ar_o)
  5 ar_resid: sum over ranks of ar_o + h + r -> residual_out, sums of squares
  6 front_tp: router rows [rank*E/W, +E/W) | latent-down rows [rank*LAT/W, +LAT/W) -> front.local;
    shared w13 + SiTU (local slice)                                                 publish(front)
  7 route_tp: gather logits -> top-k + touched-expert list | gather the latent
  8 expert_up   (kernels.py, unchanged, on the rank's intermediate slice)
  9 down_tp: routed latent partial (fp32) | shared w2 partial -> moe.local [B, LAT + H]   publish(moe)
 10 tail_tp: reduce the latent over ranks -> routed RMSNorm -> latent_up + (shared reduced over ranks)

10 Triton kernels and 3 publishes (on "peer": 3 symmetric-memory barrier kernels; on "copy": 3 all-gathers).
Nothing reads a device value on the host; exchange buffers are created (collectively) on first use per batch
size, so call forward eagerly once per batch size before capturing a CUDA graph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from baselines.vllm.kimi_k3.config import K3LayerConfig

from . import prep
from .launch import (
    KERNELS_PER_LAYER_TP,
    PUBLISHES_PER_LAYER_TP,
    Plan,
    _cdiv,
    _check_plan,
    _tp_of,
    launch_attention,
    launch_expert_up,
    launch_o_proj,
    moe_scratch,
    route_args,
    route_consts,
)

if TYPE_CHECKING:
    import torch

    from baselines.vllm.kimi_k3.tp import PeerBuffer, TPGroup
    from baselines.vllm.kimi_k3.weights import K3LayerWeights

    from ..layer import DecodeBatch

__all__ = ["KERNELS_PER_LAYER_TP", "PUBLISHES_PER_LAYER_TP", "check_tp", "run_planned_tp"]


def check_tp(cfg: K3LayerConfig, tp: TPGroup) -> None:
    from . import tp_kernels as TK

    if tp.world != cfg.tp:
        raise ValueError(f"weights are a TP-{cfg.tp} shard but the batch's TP group has {tp.world} ranks")
    if tp.world not in (2, 4, 8) or tp.world > TK.MAX_WORLD:
        raise ValueError(f"the fused TP path supports 2, 4 or 8 ranks, not {tp.world}")
    if cfg.n_routed_experts % tp.world or cfg.latent % tp.world:
        raise ValueError("router rows and latent rows must split evenly over the ranks")


def _views8(buf: PeerBuffer, fn: Any = None) -> list[torch.Tensor]:
    """Every rank's view (optionally mapped through fn), padded to 8 kernel arguments with the local one."""
    vs = [fn(v) if fn is not None else v for v in buf.views]
    return vs + [vs[0]] * (8 - len(vs))


def run_planned_tp(
    cfg: K3LayerConfig, w: K3LayerWeights, batch: DecodeBatch, plan: Plan
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """The TP > 1 layer (10 kernels, 3 publishes); returns (hidden_out, residual_out, intermediates)."""
    import torch

    from . import tp_kernels as TK

    tp = _tp_of(batch)
    assert tp is not None
    check_tp(cfg, tp)
    _check_plan(cfg, plan)
    p = plan
    W, me = tp.world, tp.rank
    a = launch_attention(cfg, w, batch, p)  # 1-3
    ctr, resid1 = a["ctr"], a["resid1"]
    h_in = batch.hidden
    B = int(h_in.shape[0])
    dev = h_in.device
    f32, bf16 = torch.float32, torch.bfloat16
    H = cfg.hidden
    E, TOPK, LAT, NI, SI = cfg.n_routed_experts, cfg.top_k, cfg.latent, cfg.routed_inter, cfg.shared_inter
    EL, LL = E // W, LAT // W
    eps = float(cfg.rms_norm_eps)

    fw = prep.prepare(w)
    nbo = _cdiv(H, p.O_BN)
    nred = _cdiv(LAT, p.D_BN)
    PC = 64
    # exchange buffers, one set per batch size (a captured graph keeps pointing at its own)
    ar_o = tp.buffer(f"fused.ar_o.B{B}", (B, H), f32, dev)
    n_front = B * EL + _cdiv(B * LL, 2)  # logits slice fp32 | latent slice bf16 (packed in fp32 words)
    front = tp.buffer(f"fused.front.B{B}", (n_front,), f32, dev)
    moe = tp.buffer(f"fused.moe.B{B}", (B, LAT + H), f32, dev)

    def lg_view(t: torch.Tensor) -> torch.Tensor:
        return t[: B * EL].view(B, EL)

    def lat_view(t: torch.Tensor) -> torch.Tensor:
        return t[B * EL :].view(torch.bfloat16)[: B * LL].view(B, LL)

    m = moe_scratch(cfg, batch, p)
    resid_out = torch.empty((B, H), dtype=bf16, device=dev)
    hidden_out = torch.empty((B, H), dtype=bf16, device=dev)
    nw, st = p.num_warps, p.stages

    # 4 o_proj partial -> ar_o
    launch_o_proj(cfg, w, p, a, m, ar_o.local, partial=True)
    ar_o.publish()
    # 5 all-reduce + residual -> residual_out, oss
    TK.ar_resid_kernel[(nbo,)](
        *_views8(ar_o),
        resid1,
        resid_out,
        m["oss"],
        B,
        H=H,
        WORLD=W,
        BB=p.BB,
        BN=p.O_BN,
        num_warps=nw,
    )
    # 6 this rank's router / latent-down rows, shared w13
    router_me = fw.router[me * EL : (me + 1) * EL]
    down_me = fw.latent_down[me * LL : (me + 1) * LL]
    grid_f = _cdiv(EL, p.F_BN) + _cdiv(LL, p.F_BN) + _cdiv(2 * SI, p.F_BN)
    TK.front_tp_kernel[(grid_f,)](
        resid_out,
        m["oss"],
        router_me,
        down_me,
        fw.shared_w13,
        lg_view(front.local),
        lat_view(front.local),
        m["sh"],
        ctr,
        B,
        H=H,
        EL=EL,
        LL=LL,
        SI=SI,
        EPS=eps,
        BETA=float(cfg.situ_beta),
        LBETA=float(cfg.situ_linear_beta),
        BB=p.BB,
        BN=p.F_BN,
        BK=p.F_BK,
        MODE=p.MODE,
        NBO=nbo,
        PC=PC,
        num_warps=nw,
        num_stages=st,
    )
    front.publish()
    # 7 gather -> top-k + expert list | latent
    gbn = p.F_BN
    grid_r = _cdiv(B, p.TB) + W * _cdiv(LL, gbn)
    TK.route_tp_kernel[(grid_r,)](
        *_views8(front, lg_view),
        *_views8(front, lat_view),
        m["logits"],
        m["lat"],
        *route_args(cfg, w, m, ctr, B),
        E=E,
        EL=EL,
        LAT=LAT,
        LL=LL,
        WORLD=W,
        **route_consts(cfg, p, B),
        BB=p.BB,
        GBN=gbn,
        num_warps=nw,
    )
    # 8 expert up (unchanged)
    launch_expert_up(cfg, w, p, m, ctr)
    # 9 routed + shared down partials -> moe
    nbl = _cdiv(LAT, p.D_BN)
    TK.down_tp_kernel[(nbl * p.D_P + _cdiv(H, p.T_BN),)](
        m["act"],
        w.w2,
        m["slot_exp"],
        m["slot_off"],
        m["slot_cnt"],
        m["sorted_pair"],
        m["topk_weights"],
        m["ypair"],
        m["sh"],
        w.shared_w2,
        moe.local,
        ctr,
        B,
        p.D_P,
        H=H,
        LAT=LAT,
        NI=NI,
        SI=SI,
        TOPK=TOPK,
        BT=p.BT,
        BN=p.D_BN,
        BK=p.D_BK,
        MODE=p.X_MODE,
        BB=p.BB,
        BNT=p.T_BN,
        BKT=p.T_BK,
        MODE_T=p.MODE,
        RB=p.RB,
        num_warps=nw,
        num_stages=p.x_stages,
    )
    moe.publish()
    # 10 reduce -> routed norm -> latent_up + shared -> hidden_out
    TK.tail_tp_kernel[(nred + _cdiv(H, p.T_BN),)](
        *_views8(moe),
        fw.latent_up,
        m["latent"],
        m["lss"],
        hidden_out,
        ctr,
        B,
        H=H,
        LAT=LAT,
        EPS=eps,
        WORLD=W,
        RBN=p.D_BN,
        RB=p.RB,
        BB=p.BB,
        BNT=p.T_BN,
        BKT=p.T_BK,
        MODE_T=p.MODE,
        PC=PC,
        num_warps=nw,
        num_stages=p.x_stages,
    )
    bufs = {**a, **m, "ar_o": ar_o.local, "moe_part": moe.local}
    return hidden_out, resid_out, bufs
