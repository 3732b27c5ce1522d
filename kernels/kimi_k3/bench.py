"""Benchmark cases for `fasttrack collect` (contract: `fasttrack/evidence/contract.py`).

`benchmark_case(point)` returns one `K3BenchmarkCase` for an envelope point (`gpu`, `tp`, `batch`,
`context`, `dtype`), or None where the point cannot run here (no CUDA, not bf16). Real K3 shapes: at TP1 the
full layer (896 routed experts, ~59 GB of bf16 expert weights: fits one H200); at TP 2 / 8 the per-rank
shard shapes (benchmark only; outside the envelope). Weights are built once per (tp, device) and cached
across points.

Variants, all on the same weights, the same paged cache and the same inputs:
- "stock": `kimi_k3.stock.forward` (cuBLAS + the stock engine's one-kernel Triton ops).
- "compile": `torch.compile(stock, mode="max-autotune-no-cudagraphs")`. That is `mode="max-autotune"`
  minus Inductor's own CUDA graphs: the harness captures every variant in one full CUDA graph itself, and
  Inductor's cudagraph trees cannot run inside an outer capture. Dynamo traces through the stock Triton
  kernels (they are `torch.library.triton_op`s launched with `wrap_triton`), so Inductor sees and may fuse
  around them; the GEMMs are autotuned (Triton templates vs cuBLAS).
- "fused": `kimi_k3.fused.forward`, when that module imports.

TP 2: "compile" is not built. In the first two-GPU run (`benchmarks/tp_smoke.py`, 2 x H200, torch 2.11) the
max-autotune build of the stock layer with its two NCCL all-reduces did not finish within the run's 150 s,
where the TP-1 build takes 20-40 s; until that is understood it would put the whole TP-2 benchmark phase at
risk. At TP 1 and on the TP-8 shard, compile measured within 1% of stock (benchmarks/measure.py, run 0 of
the TP session: NOTES.md), so stock is the baseline that matters.

Device time: the "compile" variant is built only at batch 1 and batch 64 at the envelope's largest context
(`COMPILE_POINTS`). Inductor's max-autotune benchmarks every GEMM shape of the layer (~10 shapes, Triton
templates vs cuBLAS) for each new batch size: measured 1-2 minutes per shape set on the H200, and ~110 s for
one failed build at batch 64 in run 1. Building it at all 10 grid points would spend most of a 30-minute
device session on autotuning. Batch 1 and 64 are the issue's goal points (1.3x torch.compile at batch 1) and
the two ends of the batch range; the largest context is where the claims are. Elsewhere the case has stock
and fused only, which is what FT310 (candidate vs stock at every point) needs.
Weights: real-shape weights (60 GB at TP1) are built once per (tp, device) per process (`cached_weights`)
and shared by every point the bench worker runs, and by the GPU tests in one pytest process.

Inputs: `static_inputs` = {"hidden", "residual"} (bf16 [B, 7168]); the paged cache, block table and
sequence lengths are the case's own state (every row at `context` tokens including the new one; blocks
scattered over the pool). A step writes only the new token's slot, which it also reads, so repeated calls
are independent of each other and the inputs are never mutated.

Routing near-ties: a token whose 16th and 17th biased router scores are closer than the two bf16 paths'
rounding noise may legitimately pick a different 16th expert on each path, and then the outputs differ by
far more than any elementwise tolerance. `make_inputs` therefore redraws such rows (up to 24 rounds) until
every token's top-k boundary gap is >= ROUTE_GAP under stock's own fp32 router logits. This changes which
tokens are drawn, not how many experts they touch (the count of distinct experts is logged by
`touched_experts`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .config import K3LayerConfig
from .guard import ENVELOPE
from .layer import DecodeBatch, DecodeMeta, Workspace
from .weights import K3LayerWeights

if TYPE_CHECKING:
    import torch

ROUTE_GAP = 2e-3
# Elementwise tolerance of a variant against stock on the same inputs (both bf16). Outputs are O(1) (hidden
# std ~1, residual std ~1.5); two bf16 implementations of the layer differ by ~0.5-1% of a row's RMS per
# element (measured stock vs fp32 reference on the H200: see NOTES.md), whose maximum over 64 x 14336
# elements is ~5 sigma ~= 0.05. atol 0.1 + rtol 0.05 leaves ~2x headroom; one wrong expert or head moves
# elements by O(0.3-1).
TOLERANCE = (0.1, 0.05)

# (batch, context) points that get the torch.compile variant (module docstring says why only these)
COMPILE_POINTS = frozenset({(1, ENVELOPE.context_max), (ENVELOPE.batch_max, ENVELOPE.context_max)})

_WEIGHTS: dict[tuple[int, int, str], K3LayerWeights] = {}
_WARMED: set[int] = set()  # TP sizes whose grid plans this process has pre-compiled (`warm_fused_plans`)


def warm_fused_plans(tp: int, timeout: float = 900.0) -> None:
    """Compile the fused kernels of every plan of the envelope grid at `tp` before the first point, once per
    process: `python -m kimi_k3.benchmarks.measure_fused --warm-grid-tp tp` in a subprocess (its pool of
    min(32, cpus) - 1 spawned processes compiles on meta tensors, no GPU memory, and fills Triton's on-disk
    cache, which the real launches then hit; the ranks of one torchrun share it through a file lock, so one
    compiles and the others wait). Without it every rank compiled each plan's ten TP kernels serially inside
    the timed phase (~10-20 s of CPU per plan; the first TP-2 run ran out of its lease). A subprocess, not an
    import: the warm-up swaps a Triton method in its own throw-away processes only. Any failure only costs
    time (a warning; the launches then compile on first use). KIMI_K3_BENCH_WARM=0 turns it off; under
    TRITON_INTERPRET=1 (CPU tests) it does nothing."""
    import subprocess
    import sys
    import warnings

    if tp in _WARMED or os.environ.get("KIMI_K3_BENCH_WARM", "1") == "0":
        return
    if os.environ.get("TRITON_INTERPRET") == "1":  # the interpreter compiles nothing (CPU tests)
        return
    _WARMED.add(tp)
    procs = max(1, min(32, os.cpu_count() or 2) - 1)
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "kimi_k3.benchmarks.measure_fused", "--warm-grid-tp", str(tp),
           "--procs", str(procs), "--warm-timeout", str(timeout)]
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout + 120)
        last = (r.stdout.strip().splitlines() or [""])[-1]
        if r.returncode != 0 or '"errors": []' not in last:
            warnings.warn(f"fused pre-compile (tp {tp}) failed, compiling on first use: rc={r.returncode} "
                          f"{last[-300:]} {r.stderr[-500:]}", stacklevel=2)
    except Exception as e:  # only costs time
        warnings.warn(f"fused pre-compile (tp {tp}) failed, compiling on first use: {e!r}", stacklevel=2)


def cached_weights(cfg: K3LayerConfig, device: str, seed: int = 0) -> K3LayerWeights:
    """Real-shape weights, built once per (tp, experts, device) and reused across points. At TP > 1 every
    rank draws the same seed, so the weights a real checkpoint replicates (norms, router, latent projections)
    agree across ranks, as they must: ranks with different routers route differently, and then stock's
    ranks disagree on how many input redraws `make_inputs` needs and their collectives stop pairing up (the
    first TP-2 benchmark runs hung there). The sharded weights are then equal on every rank, which changes
    no shape, byte count or timing. (The TP tests use `tp.shard_weights` of one full layer instead.)"""
    key = (cfg.tp, cfg.n_routed_experts, device)
    w = _WEIGHTS.get(key)
    if w is None or w.cfg != cfg:
        w = K3LayerWeights.random(cfg, device=device, seed=seed + cfg.tp)
        _WEIGHTS[key] = w
    return w


def weight_bytes(w: K3LayerWeights, experts_touched: int, split_router_latent: bool = False) -> float:
    """Bytes of weights one step must read on this rank: everything but the routed experts, plus the touched
    experts. With `split_router_latent` (the fused TP path) the replicated router and latent-down weights
    are read 1/tp per rank, since each rank computes only its rows of them."""
    per_expert = (w.w13[0].numel() + w.w2[0].numel()) * w.w13.element_size()
    dense = w.nbytes() - (w.w13.numel() + w.w2.numel()) * w.w13.element_size()
    if split_router_latent and w.cfg.tp > 1:
        split = (w.router.numel() + w.latent_down.numel()) * w.router.element_size()
        dense -= split - split / w.cfg.tp
    return float(dense + experts_touched * per_expert)


def _load_fused() -> Any:
    try:
        from . import fused
    except ImportError:
        return None
    return getattr(fused, "forward", None)


@dataclass
class K3BenchmarkCase:
    cfg: K3LayerConfig
    weights: K3LayerWeights
    batch: int
    context: int
    device: str = "cuda"
    include_fused: bool = True
    include_compile: bool = True
    tolerance: tuple[float, float] = TOLERANCE
    layers: int = 1
    tp_group: Any = None  # kimi_k3.tp.TPGroup at TP > 1 (one process per rank), else None
    variants: dict[str, Any] = field(default_factory=dict)
    static_inputs: dict[str, Any] = field(default_factory=dict)
    touched_experts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        import torch

        cfg, dev = self.cfg, torch.device(self.device)
        page = cfg.block_size
        nb = (self.context + page - 1) // page
        gen = torch.Generator(device=dev)
        gen.manual_seed(self.batch * 100_003 + self.context)
        total = self.batch * nb + 1
        perm = torch.randperm(total, generator=gen, device=dev)
        self.block_table = perm[: self.batch * nb].view(self.batch, nb).to(torch.int32).contiguous()
        self.kv_cache = torch.empty((total, page, cfg.kv_cache_dim), dtype=torch.bfloat16, device=dev)
        self.kv_cache.normal_(0.0, 1.0, generator=gen)
        self.seq_lens = torch.full((self.batch,), self.context, dtype=torch.int32, device=dev)
        self.meta = DecodeMeta.for_device(self.batch, self.context, dev, tp=cfg.tp)
        self.workspace = Workspace()
        self.static_inputs = {
            "hidden": torch.empty((self.batch, cfg.hidden), dtype=torch.bfloat16, device=dev),
            "residual": torch.empty((self.batch, cfg.hidden), dtype=torch.bfloat16, device=dev),
        }
        self.variants = {"stock": self._runner(_stock_forward())}
        if self.include_compile:
            self.variants["compile"] = self._compiled_stock()
        fused = _load_fused() if self.include_fused else None
        if fused is not None:
            self.variants["fused"] = self._runner(fused)
        self.load_inputs(self.make_inputs(0))

    # ---- variants ----------------------------------------------------------------------------------------
    def decode_batch(self, inputs: dict[str, Any]) -> DecodeBatch:
        return DecodeBatch(
            inputs["hidden"],
            inputs["residual"],
            self.kv_cache,
            self.block_table,
            self.seq_lens,
            self.meta,
            self.workspace,
            self.tp_group,
        )

    def _runner(self, forward: Any) -> Any:
        cfg, w = self.cfg, self.weights

        def run(inputs: dict[str, Any]) -> tuple[Any, Any]:
            out: tuple[Any, Any] = forward(cfg, w, self.decode_batch(inputs))
            return out

        return run

    def _compiled_stock(self) -> Any:
        import torch

        from . import stock

        cfg, w, meta, tp_group = self.cfg, self.weights, self.meta, self.tp_group

        def layer(hidden: Any, residual: Any, kv_cache: Any, block_table: Any, seq_lens: Any) -> Any:
            return stock.forward(
                cfg, w, DecodeBatch(hidden, residual, kv_cache, block_table, seq_lens, meta, None, tp_group)
            )

        compiled = torch.compile(layer, mode="max-autotune-no-cudagraphs", dynamic=False)

        def run(inputs: dict[str, Any]) -> tuple[Any, Any]:
            out: tuple[Any, Any] = compiled(
                inputs["hidden"], inputs["residual"], self.kv_cache, self.block_table, self.seq_lens
            )
            return out

        return run

    # ---- inputs --------------------------------------------------------------------------------------------
    def make_inputs(self, seed: int) -> dict[str, Any]:
        import torch

        from . import stock

        dev = torch.device(self.device)
        gen = torch.Generator(device=dev)
        gen.manual_seed(int(seed))
        shape = (self.batch, self.cfg.hidden)
        hidden = torch.randn(shape, generator=gen, device=dev).to(torch.bfloat16)
        residual = torch.randn(shape, generator=gen, device=dev).to(torch.bfloat16)
        ids = None
        for _ in range(24):
            _, _, aux = stock.forward_with_aux(
                self.cfg, self.weights, self.decode_batch({"hidden": hidden, "residual": residual})
            )
            ids = aux["topk_ids"]
            gap = _route_gap(self.cfg, aux["router_logits"], self.weights.e_score_correction_bias)
            bad = gap < ROUTE_GAP
            if self.tp_group is not None:  # every rank redraws the same rows, or stock's collectives diverge
                votes = bad.to(torch.int32)
                self.tp_group.all_reduce_(votes)
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

    # ---- roofline ------------------------------------------------------------------------------------
    def experts_touched_now(self) -> int:
        import torch

        from . import stock

        _, _, aux = stock.forward_with_aux(self.cfg, self.weights, self.decode_batch(self.static_inputs))
        return int(torch.unique(aux["topk_ids"]).numel())

    def bytes_moved(self, variant: str) -> float:
        """The fewest bytes one step must move, whatever the variant: weights read (the experts the current
        inputs actually route to), the latent cache read (every row's context), the new cache slot written,
        and the activations in and out."""
        cfg = self.cfg
        kv = self.batch * self.context * cfg.kv_cache_dim * 2
        act = 4 * self.batch * cfg.hidden * 2 + self.batch * cfg.kv_cache_dim * 2
        split = variant == "fused" and self.tp_group is not None
        return weight_bytes(self.weights, self.experts_touched_now(), split_router_latent=split) + kv + act


def _route_gap(cfg: K3LayerConfig, logits: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    import torch

    biased = torch.sigmoid(logits.float()) + bias.float()
    top = torch.topk(biased, cfg.top_k + 1, dim=-1).values
    return top[:, cfg.top_k - 1] - top[:, cfg.top_k]


def _stock_forward() -> Any:
    from . import stock

    return stock.forward


def benchmark_case(point: dict[str, Any]) -> K3BenchmarkCase | None:
    """The case for one envelope point, or None when it cannot run on this machine."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or str(point.get("dtype", "bfloat16")) != "bfloat16":
        return None
    tp = int(point.get("tp", 1))
    batch, context = int(point["batch"]), int(point["context"])
    cfg = K3LayerConfig.real(tp)
    tp_group = None
    if tp > 1:
        # one process per rank (fasttrack collect launches the bench worker with torchrun at TP > 1 and
        # initialises NCCL before importing this module)
        import torch.distributed as dist

        from .tp import TPGroup

        if not dist.is_initialized() or dist.get_world_size() != tp:
            have = dist.get_world_size() if dist.is_initialized() else 1
            raise RuntimeError(f"a TP {tp} point needs {tp} processes with torch.distributed initialised; "
                               f"this worker has {have}")
        tp_group = TPGroup.from_env()
    if _load_fused() is not None:
        warm_fused_plans(tp)  # before the weights: compile every plan of this TP's grid in parallel, once
    weights = cached_weights(cfg, "cuda")
    # KIMI_K3_BENCH_COMPILE=0 leaves the torch.compile variant out (its autotuning costs minutes of a lease);
    # the bundle then simply has no "compile" samples, and nothing is reported for it.
    with_compile = os.environ.get("KIMI_K3_BENCH_COMPILE", "1") != "0"
    return K3BenchmarkCase(
        cfg, weights, batch=batch, context=context,
        include_compile=with_compile and tp == 1 and (batch, context) in COMPILE_POINTS,
        tp_group=tp_group,
    )
