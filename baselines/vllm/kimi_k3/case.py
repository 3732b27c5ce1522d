"""The engine's benchmark case for one Kimi K3 point (docs/baseline-contract.md: `BaselineCase`).

`baseline_case(point)` -> `K3BaselineCase`, or None where the point cannot run here. Point keys: `gpu`,
`tp` (1; 2 / 8 at TP > 1 with torch.distributed initialised, one process per rank), `batch`, `context`,
`dtype` ("bfloat16" only), and, for CPU tests of the collector, `"tiny": True`: the tiny config
(`K3LayerConfig.tiny(tp)`) on the CPU, torch reference attention in place of FlashInfer, the Triton ops under
the interpreter (TRITON_INTERPRET=1) or their torch fallbacks. `"shard": True` with tp > 1 builds one rank's
shard shapes on one GPU without collectives (the TP-8 per-rank benchmark; not an envelope point).

Everything here is the engine's: weights (random, seeded, real shapes; at TP > 1 every rank draws the same
seed), the paged latent cache (every row at `context` tokens including the new one, blocks scattered over
the pool), the planned MLA decode (`attention.MLADecodeAttention`, planned once per point), the inputs
(`make_inputs`: hidden and residual, redrawing rows whose 16th/17th router scores are nearer than
ROUTE_GAP under stock's own fp32 logits, so that a bf16 rounding difference cannot legitimately pick another
expert), the byte count and the oracle. A step writes only the new token's slot, which it also reads, so
repeated calls are independent and the inputs are never mutated.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .config import K3LayerConfig
from .decode import DecodeBatch, DecodeMeta, Workspace
from .weights import K3LayerWeights

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

ROUTE_GAP = 2e-3
# torch.compile of stock is built only here (max-autotune costs 1-2 minutes of a lease per batch size)
COMPILE_POINTS = frozenset({(1, 32768), (64, 32768)})
STAGES: dict[str, list[str]] = {
    "mla_decode": ["*BatchMLAPageAttention*", "*flashinfer*mla*"],  # = attention.KERNEL_PATTERNS
    "norms": ["*rms_norm*"],
    "cache_insert": ["*q_concat_cache_insert*"],
    "routing": ["*grouped_topk*", "*moe_align*"],
    "moe": ["*fused_moe*", "*moe_sum*"],
    "activation": ["*situ_and_mul*", "*gate_mul*"],
    "linears": ["*gemm*", "*gemv*", "*nvjet*", "*cublas*", "*xmma*", "*cutlass*", "*splitKreduce*"],
}

_WEIGHTS: dict[tuple[int, int, str], K3LayerWeights] = {}


def cached_weights(cfg: K3LayerConfig, device: str, seed: int = 0) -> K3LayerWeights:
    """Real-shape weights (60 GB at TP 1), built once per (tp, experts, device) per process. At TP > 1 every
    rank draws the same seed, so the replicated weights (norms, router, latent projections) agree across
    ranks, as they must for the ranks to route alike and redraw the same inputs."""
    key = (cfg.tp, cfg.n_routed_experts, device)
    w = _WEIGHTS.get(key)
    if w is None or w.cfg != cfg:
        _WEIGHTS.clear()  # one real layer at a time fits
        w = K3LayerWeights.random(cfg, device=device, seed=seed + cfg.tp)
        _WEIGHTS[key] = w
    return w


def weight_bytes(w: K3LayerWeights, experts_touched: int) -> float:
    """Bytes of weights one step must read on this rank: everything but the routed experts, plus the touched
    experts."""
    per_expert = (w.w13[0].numel() + w.w2[0].numel()) * w.w13.element_size()
    dense = w.nbytes() - (w.w13.numel() + w.w2.numel()) * w.w13.element_size()
    return float(dense + experts_touched * per_expert)


@dataclass
class K3State:
    """What every variant runs on: config, weights, the paged cache and its planned attention, TP group."""

    cfg: K3LayerConfig
    weights: K3LayerWeights
    kv_cache: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    meta: DecodeMeta
    attn: Any
    tp_group: Any = None

    def decode_batch(self, inputs: dict[str, Any], workspace: Workspace | None = None) -> DecodeBatch:
        return DecodeBatch(
            inputs["hidden"], inputs["residual"], self.kv_cache, self.block_table, self.seq_lens, self.meta,
            workspace, self.tp_group, self.attn,
        )


@dataclass
class K3BaselineCase:
    state: K3State
    batch: int
    context: int
    include_compile: bool = False
    dtype: str = "bfloat16"
    layers: int = 1
    stages: dict[str, list[str]] = field(default_factory=lambda: dict(STAGES))
    static_inputs: dict[str, Any] = field(default_factory=dict)
    extra_baselines: dict[str, Callable[[dict[str, Any]], Any]] = field(default_factory=dict)
    touched_experts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        import torch

        cfg, dev = self.state.cfg, self.state.kv_cache.device
        self.static_inputs = {
            "hidden": torch.empty((self.batch, cfg.hidden), dtype=torch.bfloat16, device=dev),
            "residual": torch.empty((self.batch, cfg.hidden), dtype=torch.bfloat16, device=dev),
        }
        if self.include_compile:
            self.extra_baselines["compile"] = self._compiled_stock()
        self.load_inputs(self.make_inputs(0))

    # ---- variants ----------------------------------------------------------------------------------------
    def stock(self, inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        from . import stock

        st = self.state
        return stock.forward(st.cfg, st.weights, st.decode_batch(inputs))

    def oracle(self, inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """The fp32 reference on the same weights, cache and inputs (its own routing; the cache untouched)."""
        from . import reference

        st = self.state
        return reference.forward(st.cfg, st.weights, st.decode_batch(inputs))

    def _compiled_stock(self) -> Callable[[dict[str, Any]], Any]:
        import torch

        from . import stock

        st = self.state

        def layer(hidden: Any, residual: Any, kv_cache: Any, block_table: Any, seq_lens: Any) -> Any:
            return stock.forward(
                st.cfg, st.weights,
                DecodeBatch(hidden, residual, kv_cache, block_table, seq_lens, st.meta, None, st.tp_group,
                            st.attn),
            )

        compiled = torch.compile(layer, mode="max-autotune-no-cudagraphs", dynamic=False)

        def run(inputs: dict[str, Any]) -> Any:
            return compiled(inputs["hidden"], inputs["residual"], st.kv_cache, st.block_table, st.seq_lens)

        return run

    # ---- inputs ------------------------------------------------------------------------------------------
    def make_inputs(self, seed: int) -> dict[str, Any]:
        import torch

        from . import stock

        st = self.state
        dev = st.kv_cache.device
        gen = torch.Generator(device=dev)
        gen.manual_seed(int(seed))
        shape = (self.batch, st.cfg.hidden)
        hidden = torch.randn(shape, generator=gen, device=dev).to(torch.bfloat16)
        residual = torch.randn(shape, generator=gen, device=dev).to(torch.bfloat16)
        ids = None
        for _ in range(24):
            _, _, aux = stock.forward_with_aux(
                st.cfg, st.weights, st.decode_batch({"hidden": hidden, "residual": residual})
            )
            ids = aux["topk_ids"]
            bad = route_gap(st.cfg, aux["router_logits"], st.weights.e_score_correction_bias) < ROUTE_GAP
            if st.tp_group is not None:  # every rank redraws the same rows, or stock's collectives diverge
                votes = bad.to(torch.int32)
                st.tp_group.all_reduce_(votes)
                bad = votes > 0
            if not bool(bad.any()):
                break
            n = int(bad.sum())
            hidden[bad] = torch.randn((n, shape[1]), generator=gen, device=dev).to(torch.bfloat16)
            residual[bad] = torch.randn((n, shape[1]), generator=gen, device=dev).to(torch.bfloat16)
        if ids is not None:
            self.touched_experts.append(int(torch.unique(ids).numel()))
        return {"hidden": hidden, "residual": residual}

    def load_inputs(self, fresh: dict[str, Any]) -> None:
        self.static_inputs["hidden"].copy_(fresh["hidden"])
        self.static_inputs["residual"].copy_(fresh["residual"])

    # ---- roofline ----------------------------------------------------------------------------------------
    def experts_touched_now(self) -> int:
        import torch

        from . import stock

        st = self.state
        _, _, aux = stock.forward_with_aux(st.cfg, st.weights, st.decode_batch(self.static_inputs))
        return int(torch.unique(aux["topk_ids"]).numel())

    def bytes_moved(self) -> float:
        """The fewest HBM bytes one step must move on this rank, whatever the variant: the weights (the
        experts the current inputs route to), the latent cache read (every row's context), the new cache
        slot written, and the activations in and out."""
        cfg = self.state.cfg
        kv = self.batch * self.context * cfg.kv_cache_dim * 2
        act = 4 * self.batch * cfg.hidden * 2 + self.batch * cfg.kv_cache_dim * 2
        return weight_bytes(self.state.weights, self.experts_touched_now()) + kv + act


def route_gap(cfg: K3LayerConfig, logits: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Per token: the biased score gap between its top_k-th and (top_k + 1)-th expert."""
    import torch

    biased = torch.sigmoid(logits.float()) + bias.float()
    top = torch.topk(biased, cfg.top_k + 1, dim=-1).values
    return top[:, cfg.top_k - 1] - top[:, cfg.top_k]


def build_state(
    cfg: K3LayerConfig, weights: K3LayerWeights, batch: int, context: int, device: str, tp_group: Any = None
) -> K3State:
    import torch

    from .attention import MLADecodeAttention

    dev = torch.device(device)
    page = cfg.block_size
    nb = (context + page - 1) // page
    gen = torch.Generator(device=dev)
    gen.manual_seed(batch * 100_003 + context)
    total = batch * nb + 1
    perm = torch.randperm(total, generator=gen, device=dev)
    block_table = perm[: batch * nb].view(batch, nb).to(torch.int32).contiguous()
    kv_cache = torch.empty((total, page, cfg.kv_cache_dim), dtype=torch.bfloat16, device=dev)
    kv_cache.normal_(0.0, 1.0, generator=gen)
    seq_lens = torch.full((batch,), context, dtype=torch.int32, device=dev)
    meta = DecodeMeta.for_device(batch, context, dev, tp=cfg.tp)
    attn = MLADecodeAttention.for_batch(cfg, block_table, seq_lens)
    return K3State(cfg, weights, kv_cache, block_table, seq_lens, meta, attn, tp_group)


def baseline_case(point: dict[str, Any]) -> K3BaselineCase | None:
    """The engine's case for one point, or None when it cannot run on this machine."""
    try:
        import torch
    except ImportError:
        return None
    if str(point.get("dtype", "bfloat16")) != "bfloat16":
        return None
    tp = int(point.get("tp", 1))
    batch, context = int(point["batch"]), int(point["context"])
    if bool(point.get("tiny", False)):
        cfg = K3LayerConfig.tiny(tp)
        weights = K3LayerWeights.random(cfg, device="cpu", seed=tp)
        return K3BaselineCase(build_state(cfg, weights, batch, context, "cpu"), batch, context)
    if not torch.cuda.is_available():
        return None
    cfg = K3LayerConfig.real(tp)
    tp_group = None
    if tp > 1 and not bool(point.get("shard", False)):
        import torch.distributed as dist

        from .tp import TPGroup

        if not dist.is_initialized() or dist.get_world_size() != tp:
            have = dist.get_world_size() if dist.is_initialized() else 1
            raise RuntimeError(f"a TP {tp} point needs {tp} processes with torch.distributed initialised; "
                               f"this worker has {have}")
        tp_group = TPGroup.from_env()
    weights = cached_weights(cfg, "cuda")
    # KIMI_K3_BASELINE_COMPILE=0 leaves torch.compile out (its autotuning costs minutes of a lease)
    with_compile = os.environ.get("KIMI_K3_BASELINE_COMPILE", "1") != "0"
    return K3BaselineCase(
        build_state(cfg, weights, batch, context, "cuda", tp_group), batch, context,
        include_compile=with_compile and tp == 1 and (batch, context) in COMPILE_POINTS,
    )
