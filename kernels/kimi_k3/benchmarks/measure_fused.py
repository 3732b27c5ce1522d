"""One whole GPU measurement batch for the fused path (run on the H200 through the device tool):

    python -m kimi_k3.benchmarks.measure_fused --out $OUT [--budget 300] [--no-stock]

1. compiles every kernel variant it will time in parallel worker processes first (Triton's `warmup` path on
   meta tensors: no memory, the on-disk cache is then hit by the real launches);
   `--warm-grid-tp N` does only this, for every plan of the envelope grid at TP N (TP > 1: the TP
   sequence, compile only, no process group: `CompileOnlyTP`), once per machine (a file lock and a
   done-marker in Triton's cache dir); `bench.candidates` runs it before its first point;
2. correctness at real shapes: fused vs the fp32 reference (`reference.compare`, bf16 tolerances of
   `reference.TOLERANCES`) at TP8 and TP1 points, NaN-poisoned cache padding;
3. latency under CUDA graphs, L2 flushed (512 MB write) before every timed replay, median/p10/p90 of N
   replays, fused vs stock at the same weights and inputs, plus fused plan variants at TP1 B1;
   achieved bytes/s counting the experts actually touched (the fused path's device-side slot count);
4. kernels per layer from the captured graph (profiler kernel events of one replay);
5. bit-repeatability over many eager runs and graph replays at batch 1, 2, 64.
Writes `results.json` after every step (partial results survive a timeout) and prints a table last.

A measurement tool, not shipping code (it lived in `fused/` before). `check_fused_point`, `graphed` and
`count_graph_kernels` are shared with `tests/test_fused_gpu.py`. The one Triton swap here is in
`_warm_worker`, a throw-away spawn process that only compiles: it replaces `JITFunction.run` so every launch
of the real host code becomes a `warmup=True` compile (no kernel runs, meta tensors, no memory), filling
Triton's on-disk cache in parallel before the timed run; device time is scarce and a serial first-launch
compile of every variant costs minutes. fasttrack reports it as an FT120 warning (a benchmark file).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from baselines.vllm.kimi_k3.tp import PeerBuffer, TPGroup

COPY_BW = 4.3e12  # bytes/s, measured D2D copy bandwidth on this H200 (research/h200-anchors.md: 4.21-4.3)

# (tp, batch, context) timing points; stock is timed where `stock` is True
POINTS: list[tuple[int, int, int, bool]] = [
    (1, 1, 4096, True),
    (1, 64, 4096, True),
    (1, 8, 4096, True),
    (1, 2, 4096, True),
    (1, 32, 4096, True),
    (1, 1, 32768, True),
    (1, 64, 32768, True),
    (1, 2, 32768, False),
    (1, 8, 32768, False),
    (1, 32, 32768, False),
    (8, 1, 4096, True),
    (8, 64, 4096, True),
    (8, 8, 4096, True),
    (8, 2, 4096, True),
    (8, 32, 4096, True),
    (8, 1, 32768, True),
    (8, 64, 32768, True),
    (8, 2, 32768, False),
    (8, 8, 32768, False),
    (8, 32, 32768, False),
]
COUNT_AT = {(1, 1, 4096), (1, 64, 4096)}  # kernels per layer counted from the graph here (profiler is slow)
# plan variants (name -> overrides) timed at a few points, with per-kernel profiles
DENSE_DOT = {
    "MODE": 1,
    "BB": 16,
    "A_BK": 128,
    "QB_BK": 128,
    "O_BN": 32,
    "O_BK": 128,
    "F_BN": 32,
    "F_BK": 128,
    "T_BN": 32,
    "T_BK": 128,
    "stages": 4,
}
VARIANTS: dict[tuple[int, int, int], dict[str, dict[str, Any]]] = {
    (1, 1, 4096): {"attn_n32": {"BLOCK_N": 32}, "dense_dot": DENSE_DOT},
    (1, 64, 4096): {"down_bn128": {"D_BN": 128}, "qkv_bn32": {"A_BN": 32}},
    (8, 1, 4096): {"dense_dot": DENSE_DOT},
}


# sweep (--sweep): per-kernel profiles of plan variants at a few points, to pick the defaults
G32 = {"A_BN": 32, "A_BK": 128, "O_BN": 32, "O_BK": 128, "F_BN": 32, "F_BK": 128, "T_BN": 32, "T_BK": 128}
XDOT = {"X_MODE": 1, "BT": 16, "U_BN": 64, "D_BN": 64, "x_stages": 4}
SWEEP: dict[tuple[int, int, int], dict[str, dict[str, Any]]] = {
    (1, 1, 4096): {
        "base": {},
        "g32": G32,
        "xdot": XDOT,
        "x64": {"U_BN": 64, "D_BN": 64},
        "xflat": {"flat": 1},
    },
    (1, 8, 4096): {"base": {}, "xdot": XDOT, "x64": {"U_BN": 64, "D_BN": 64}},
    (1, 64, 4096): {
        "base": {},
        "x64": {"U_BN": 64, "D_BN": 64},
        "x64s4": {"U_BN": 64, "D_BN": 64, "x_stages": 4},
        "xflat": {"flat": 1},
        "gs4": {"stages": 4},
    },
    (8, 1, 4096): {"base": {}, "g32": G32, "xdot": XDOT},
    (8, 64, 4096): {"base": {}, "x64": {"U_BN": 64, "D_BN": 64}, "d128": {"D_BN": 128}, "xflat": {"flat": 1}},
}


def _resolve(cfg: Any, bsz: int, ov: dict[str, Any]) -> dict[str, Any]:
    ov = dict(ov)
    if ov.pop("flat", None):
        ms = min(cfg.n_routed_experts, bsz * cfg.top_k)
        ov.update(U_P=ms, D_P=ms)
    return ov


def profile_kernels(g: Any, flush: Any) -> list[tuple[str, float]]:
    """(kernel name, microseconds) of every kernel in one replay, L2 flushed before it."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    flush.zero_()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        g.replay()
        torch.cuda.synchronize()
    out = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out.append((e.name[:60], round(e.time_range.elapsed_us(), 1)))
    return out


def _meta_setup(tp: int, batch: int, context: int, shard: bool = False) -> tuple[Any, Any, Any]:
    """Meta-tensor (cfg, weights, batch) of one plan at real shapes (no memory). At tp > 1: the TP shard's
    shapes, and `batch.tp` a `CompileOnlyTP` group (meta exchange buffers, no process group); with `shard`
    no group (the per-rank shard benchmark: the TP-1 sequence on the shard's shapes)."""
    import torch

    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from baselines.vllm.kimi_k3.weights import K3LayerWeights, expected_shapes
    from kimi_k3.layer import DecodeBatch, DecodeMeta, Workspace

    cfg = K3LayerConfig.real(tp=tp)
    meta = torch.device("meta")
    ws = {
        n: torch.empty(
            s, dtype=torch.float32 if n == "e_score_correction_bias" else torch.bfloat16, device=meta
        )
        for n, s in expected_shapes(cfg).items()
    }
    w = K3LayerWeights(cfg=cfg, **ws)
    nbl = -(-context // cfg.block_size)  # same block-table width as random_batch (same int specialisation)
    b = DecodeBatch(
        hidden=torch.empty(batch, cfg.hidden, dtype=torch.bfloat16, device=meta),
        residual=torch.empty(batch, cfg.hidden, dtype=torch.bfloat16, device=meta),
        kv_cache=torch.empty(
            batch * nbl, cfg.block_size, cfg.kv_cache_dim, dtype=torch.bfloat16, device=meta
        ),
        block_table=torch.empty(batch, nbl, dtype=torch.int32, device=meta),
        seq_lens=torch.empty(batch, dtype=torch.int32, device=meta),
        meta=DecodeMeta(batch=batch, max_context=context, tp=tp),
        workspace=Workspace(),
        tp=CompileOnlyTP(rank=0, world=tp) if tp > 1 and not shard else None,
    )
    return cfg, w, b


class CompileOnlyTP(TPGroup):
    """A TP group for compile-only runs of the TP host code (`fused/tp_launch.run_planned_tp`): no process
    group, no symmetric memory. Its exchange buffers are fresh tensors on the batch's device (meta in the
    warm-up) and `publish()` does nothing. Every kernel argument the TP launches get from it has the dtype,
    shape and alignment of the real transport's (symmetric-memory and all-gather buffers are fresh
    allocations, so 16-byte aligned, as a meta tensor's offset 0 is), hence the same Triton specialisation;
    tests/test_warm_tp.py checks the resulting Triton cache keys against a real `TPGroup`'s."""

    def buffer(self, name: str, shape: tuple[int, ...], dtype: Any, device: Any) -> PeerBuffer:
        import torch

        buf = self._buffers.get(name)
        if buf is None or tuple(buf.local.shape) != tuple(shape) or buf.local.dtype != dtype:
            views = [torch.empty(shape, dtype=dtype, device=device) for _ in range(self.world)]
            buf = PeerBuffer(name, views[self.rank], views, lambda: None)
            self._buffers[name] = buf
        return buf


# (kernel, positional args, keyword args, grid, launch index within the layer) -> anything
OnLaunch = Callable[[Any, tuple[Any, ...], dict[str, Any], Any, int], Any]


def intercept_launches(call: Callable[[], Any], on_launch: OnLaunch) -> None:
    """Run `call()` (real host code) with every Triton launch handed to `on_launch` instead of running; the
    launch is not made. Swaps `JITFunction.run` for the duration of the call only (restored in `finally`;
    the module docstring says why: Triton has no public hook that hands back a launch's bound arguments)."""
    from triton.runtime.jit import JITFunction

    orig = JITFunction.run
    n = [0]

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kw: Any) -> Any:
        i = n[0]
        n[0] += 1
        return on_launch(self, args, kw, grid, i)

    JITFunction.run = run  # type: ignore[method-assign]
    try:
        call()
    finally:
        JITFunction.run = orig  # type: ignore[method-assign]


def plan_launches(tp: int, bsz: int, ctx: int, ov: dict[str, Any], on_launch: OnLaunch) -> None:
    """Every launch of one layer of plan (tp, bsz, ctx, ov) through the real host code
    (`launch.run_planned`: the TP-1 sequence, or at tp > 1 the TP sequence of `tp_launch`) on meta tensors,
    each handed to `on_launch`. The pseudo-override `SHARD: True` compiles the shard benchmark's plan
    (`_meta_setup(shard=True)`)."""
    from kimi_k3.fused import launch

    ov = dict(ov)
    shard = bool(ov.pop(SHARD, False))
    cfg, w, b = _meta_setup(tp, bsz, ctx, shard=shard)
    plan = launch.make_plan(cfg, bsz, ctx, gpu=True, **ov)
    intercept_launches(lambda: launch.run_planned(cfg, w, b, plan), on_launch)


def triton_cache_key(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], target: Any = None) -> str:
    """The directory name (sha256) under Triton's on-disk cache that launching `fn[grid](*args, **kwargs)`
    compiles into / looks up on `target` (default sm_90, the H200), computed the way `JITFunction.run` and
    `triton.compile` do (Triton's own binder, so the same pointer-alignment and int specialisations), with
    no GPU. Used by tests/test_warm_tp.py to show the warm-up compiles exactly what the real launch uses."""
    import hashlib

    from triton import knobs
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.cache import get_cache_key
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(target or GPUTarget("cuda", 90, 32))
    kw = dict(kwargs)  # what JITFunction.run adds before binding
    kw["debug"] = kw.get("debug", fn.debug) or knobs.runtime.debug
    kw["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, spec, opts = binder(*args, **kw)
    options, signature, constexprs, attrs = fn._pack_args(backend, kw, bound, spec, opts)
    src = ASTSource(fn, signature, constexprs, attrs)  # JITFunction._do_compile
    full = backend.parse_options(dict(options.__dict__, **src.parse_options()))  # triton.compile
    key = get_cache_key(src, backend, full, env_vars=get_cache_invalidating_env_vars())
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


SHARD = "shard"  # pseudo-override of a warm-up key: the TP-N per-rank shard benchmark (no TP group)

# one warm-up task: (tp, batch, context, overrides, part, parts): compile launches i with i % parts == part
WarmTask = tuple[int, int, int, dict[str, Any], int, int]


def warm_tasks(tasks: list[WarmTask], compile_launch: OnLaunch) -> None:
    """Hand each task's share of its plan's launches to `compile_launch` (the rest are skipped)."""
    for tp, bsz, ctx, ov, part, parts in tasks:

        def pick(fn: Any, args: Any, kw: Any, grid: Any, i: int, part: int = part, parts: int = parts) -> Any:
            return compile_launch(fn, args, kw, grid, i) if i % parts == part else None

        plan_launches(tp, bsz, ctx, ov, pick)


def _warm_worker(tasks: list[WarmTask]) -> str:
    """Compile (no launch) the kernels of each task (`warmup=True`: Triton compiles, fills its on-disk cache
    and returns without running anything)."""
    try:
        import torch
        from triton.runtime.jit import JITFunction

        torch.cuda.init()
        orig = JITFunction.run

        def compile_launch(fn: Any, args: Any, kw: Any, grid: Any, i: int) -> Any:
            return orig(fn, *args, grid=grid, warmup=True, **kw)

        warm_tasks(tasks, compile_launch)
        return "ok"
    except Exception:
        return traceback.format_exc()


def warm_all(procs: int, sweep: bool = False) -> dict[str, Any]:
    from baselines.vllm.kimi_k3.config import K3LayerConfig

    if sweep:
        keys = [
            (tp, b, c, json.dumps(_resolve(K3LayerConfig.real(tp), b, ov), sort_keys=True))
            for (tp, b, c), vs in SWEEP.items()
            for ov in vs.values()
        ]
        return warm_keys(keys, procs)
    keys = [(tp, b, c, "{}") for tp, b, c, _ in POINTS]
    keys += [
        (tp, b, c, json.dumps(ov, sort_keys=True))
        for (tp, b, c), vs in VARIANTS.items()
        for ov in vs.values()
    ]
    return warm_keys(keys, procs)


LAUNCHES = {1: 7}  # launches per layer at TP 1; 10 at TP > 1 (fused.KERNELS_PER_LAYER[_TP])


def warm_keys(
    keys: list[tuple[int, int, int, str]],
    procs: int,
    *,
    worker: Callable[[list[WarmTask]], str] | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Compile the fused kernels of each (tp, batch, context, overrides-json) plan in `procs` spawned
    processes (also used by tests/test_fused_gpu.py before its real-shape tests). At tp > 1 the plan's TP
    sequence (kernels 1-3 on the shard, the TP kernels with WORLD = tp). With fewer plans than processes a
    plan's launches are split over several processes. Waits at most `timeout` seconds (then gives up: the
    real launches compile what is missing)."""
    jobs2 = [(tp, b, c, json.loads(ov)) for tp, b, c, ov in dict.fromkeys(keys)]
    tasks: list[WarmTask] = []
    for tp, b, c, ov in jobs2:
        parts = max(1, min(LAUNCHES.get(tp, 10), procs // max(1, len(jobs2))))
        tasks += [(tp, b, c, ov, part, parts) for part in range(parts)]
    chunks = [c for c in (tasks[i::procs] for i in range(procs)) if c]
    t = time.time()
    ctx = mp.get_context("spawn")
    with ctx.Pool(len(chunks) or 1) as pool:
        try:
            res = pool.map_async(worker or _warm_worker, chunks).get(timeout)
        except mp.TimeoutError:
            res = [f"timed out after {timeout} s"]
    errs = [r for r in res if r != "ok"]
    return {"warm_s": time.time() - t, "jobs": len(jobs2), "tasks": len(tasks), "errors": errs[:3]}


def _sources_digest() -> str:
    import hashlib

    import triton

    from kimi_k3 import fused

    h = hashlib.sha256(triton.__version__.encode())
    d = os.path.dirname(fused.__file__)
    for name in sorted(os.listdir(d)):
        if name.endswith(".py"):
            with open(os.path.join(d, name), "rb") as f:
                h.update(name.encode() + f.read())
    return h.hexdigest()


def warm_keys_once(
    keys: list[tuple[int, int, int, str]], procs: int, lock_dir: str | None = None, **kw: Any
) -> dict[str, Any]:
    """`warm_keys`, once per machine for one key set and one version of the fused sources: callers (the
    ranks of one torchrun, the tests then the bench) take an exclusive file lock in `lock_dir` (default:
    Triton's cache dir, whose entries are what this fills); the first compiles, the others wait for it and
    then find its done-marker and return at once. A run with errors leaves no marker."""
    import fcntl
    import hashlib

    if lock_dir is None:
        from triton import knobs

        lock_dir = knobs.cache.dir
    os.makedirs(lock_dir, exist_ok=True)
    tag = hashlib.sha256((json.dumps(sorted(set(keys))) + _sources_digest()).encode()).hexdigest()[:16]
    marker = os.path.join(lock_dir, f"kimi_k3_warm_{tag}.done")
    t = time.time()
    with open(os.path.join(lock_dir, "kimi_k3_warm.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if os.path.exists(marker):
                return {"warm_s": 0.0, "waited_s": time.time() - t, "skipped": True, "errors": []}
            info = warm_keys(keys, procs, **kw)
            if not info["errors"]:
                with open(marker, "w") as f:
                    json.dump(info, f)
            return info
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def grid_keys(tp: int) -> list[tuple[int, int, int, str]]:
    """(tp, batch, context, "{}") of every distinct default plan of the envelope's grid at `tp` (the grid
    `fasttrack collect` builds from fasttrack.toml: grid batches plus 1, 2 and the batch range's ends, grid
    contexts plus the context range's ends)."""
    import tomllib

    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from kimi_k3 import fused

    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "fasttrack.toml"), "rb") as f:
        env = tomllib.load(f)["envelope"]
    bmin, bmax = int(env["batch"]["min"]), int(env["batch"]["max"])
    batches = set(env.get("grid_batches", [])) | {bmin, bmax} | {b for b in (1, 2) if bmin <= b <= bmax}
    contexts = set(env.get("grid_contexts", [])) | {int(env["context"]["min"]), int(env["context"]["max"])}
    cfg = K3LayerConfig.real(tp)
    seen: set[Any] = set()
    out = []
    for b in sorted(batches):
        for c in sorted(contexts):
            plan = fused.make_plan(cfg, b, c)
            if plan not in seen:
                seen.add(plan)
                out.append((tp, b, c, "{}"))
    return out


class Results:
    def __init__(self, path: str) -> None:
        self.path = path
        self.data: dict[str, Any] = {
            "correctness": [],
            "timing": [],
            "variants": [],
            "repeat": [],
            "notes": [],
        }

    def add(self, key: str, item: Any) -> None:
        if isinstance(self.data.get(key), list):
            self.data[key].append(item)
        else:
            self.data[key] = item
        self.flush()

    def flush(self) -> None:
        with open(self.path, "w") as f:
            json.dump(self.data, f, indent=1, default=str)


def _lens(bsz: int, context: int, seed: int) -> list[int]:
    import random

    rng = random.Random(seed)
    lens = [rng.randint(1, context) for _ in range(bsz)]
    lens[0] = context
    if bsz > 1:
        lens[-1] = 1
    return lens


def check_fused_point(
    tp: int, bsz: int, context: int, weights: Any = None, cfg: Any = None, device: str = "cuda",
    tp_group: Any = None, oracle: Any = None,
) -> dict[str, Any]:
    """Fused vs the fp32 reference at real shapes, mixed row lengths, poisoned cache (also used by tests).
    At TP > 1 (`tp_group` given): `weights` is this rank's shard and `oracle` the full TP-1 weights whose
    fp32 reference the rank's (all-reduced) output is compared with."""
    import torch

    from baselines.vllm.kimi_k3 import reference
    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from kimi_k3 import fused
    from kimi_k3.benchmarks.bench import cached_weights
    from kimi_k3.layer import Workspace, random_batch

    cfg = cfg or K3LayerConfig.real(tp)
    w = weights if weights is not None else cached_weights(cfg, device)
    batch = random_batch(cfg, _lens(bsz, context, seed=bsz), device=device, seed=context, poison=True)
    batch.workspace = Workspace()
    batch.tp = tp_group
    before = batch.kv_cache.clone()
    out, resid, aux = fused.forward_with_aux(cfg, w, batch)
    ref_w = oracle if oracle is not None else w
    c = reference.compare(ref_w.cfg, ref_w, batch, before, out, resid, topk_ids=aux["topk_ids"])
    s = c.summary()
    s.update(
        tp=tp,
        batch=bsz,
        context=context,
        ok=bool(c.ok()),
        max_ratio=c.max_ratio(),
        experts_touched=int(torch.unique(aux["topk_ids"]).numel()),
    )
    return s


def count_graph_kernels(replay: Any) -> int:
    """CUDA kernel events in one replay of a captured graph (torch.profiler / CUPTI)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        replay()
        torch.cuda.synchronize()
    n = 0
    for e in prof.events():
        if (
            e.device_type == torch.autograd.DeviceType.CUDA
            and "memcpy" not in e.name.lower()
            and "memset" not in e.name.lower()
        ):
            n += 1
    return n


def graphed(fn: Any) -> tuple[Any, Any]:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = fn()
    return g, outs


def time_graph(g: Any, flush: Any, n: int) -> dict[str, float]:
    import torch

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for _ in range(3):
        flush.zero_()
        g.replay()
    for i in range(n):
        flush.zero_()
        starts[i].record()
        g.replay()
        ends[i].record()
    torch.cuda.synchronize()
    us = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=True))
    return {
        "median_us": statistics.median(us),
        "p10_us": us[int(0.1 * (n - 1))],
        "p90_us": us[int(0.9 * (n - 1))],
    }


def layer_bytes(cfg: Any, w: Any, experts: int, seq_lens: list[int]) -> float:
    per_expert = (w.w13[0].numel() + w.w2[0].numel()) * w.w13.element_size()
    dense = sum(t.numel() * t.element_size() for n, t in w.tensors() if n not in ("w13", "w2"))
    kv = sum(seq_lens) * cfg.kv_cache_dim * 2
    act = 4 * len(seq_lens) * cfg.hidden * 2
    return float(dense + experts * per_expert + kv + act)


def run_sweep(R: Results, flush: Any, a: Any, left: Any) -> None:
    import torch

    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from kimi_k3 import fused, stock
    from kimi_k3.benchmarks.bench import cached_weights
    from kimi_k3.layer import Workspace, random_batch

    R.data["sweep"] = []
    for tp in (1, 8):
        cfg = K3LayerConfig.real(tp)
        w = cached_weights(cfg, "cuda")
        for (ptp, bsz, ctx), vs in SWEEP.items():
            if ptp != tp or left() < 25:
                continue
            batch = random_batch(cfg, [ctx] * bsz, device="cuda", seed=1, poison=True)
            batch.workspace = Workspace()
            runs: dict[str, Any] = {"stock": None, **vs}
            for name, ov in runs.items():
                if left() < 20:
                    break
                try:
                    if name == "stock":
                        fn = lambda cfg=cfg, w=w, batch=batch: stock.forward(cfg, w, batch)  # noqa: E731
                    else:
                        plan = fused.make_plan(cfg, bsz, ctx, **_resolve(cfg, bsz, ov))
                        fn = lambda plan=plan, cfg=cfg, w=w, batch=batch: fused.forward_planned(  # noqa: E731
                            cfg, w, batch, plan
                        )
                    g, _ = graphed(fn)
                    row = {
                        "tp": tp,
                        "batch": bsz,
                        "context": ctx,
                        "name": name,
                        **time_graph(g, flush, 15),
                        "kernels": profile_kernels(g, flush),
                    }
                    del g
                except Exception:
                    row = {
                        "tp": tp,
                        "batch": bsz,
                        "context": ctx,
                        "name": name,
                        "error": traceback.format_exc()[-1500:],
                    }
                R.add("sweep", row)
                ks = " ".join(f"{n.split('_kernel')[0][:14]}={t:.0f}" for n, t in row.get("kernels", []))
                print(
                    f"tp{tp} b{bsz} {name:6s} {row.get('median_us', float('nan')):9.1f}us | {ks[:600]}",
                    flush=True,
                )
            del batch
        del w
        from kimi_k3.benchmarks import bench

        bench._WEIGHTS.clear()
        torch.cuda.empty_cache()
    R.add("total_s", time.time())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget", type=float, default=300.0, help="seconds; later steps are skipped past it")
    ap.add_argument("--procs", type=int, default=12)
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--no-stock", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="per-kernel profiles of plan variants instead")
    ap.add_argument("--warm-grid-tp", type=int, default=0,
                    help="only compile every plan of the envelope grid at this TP (warm_keys_once), print "
                    "the summary as JSON and exit (bench.candidates runs this before its first point)")
    ap.add_argument("--warm-timeout", type=float, default=None)
    a = ap.parse_args()
    if a.warm_grid_tp:
        info = warm_keys_once(grid_keys(a.warm_grid_tp), a.procs, timeout=a.warm_timeout)
        print(json.dumps(info, default=str), flush=True)
        return
    t0 = time.time()
    os.makedirs(a.out, exist_ok=True)
    R = Results(os.path.join(a.out, "results.json"))

    def left() -> float:
        return a.budget - (time.time() - t0)

    # watchdog: a hung kernel (a broken spin-wait) must not eat the whole device call
    def watchdog() -> None:
        while True:
            time.sleep(2)
            if left() < -20:
                R.data["notes"].append("watchdog: budget exceeded, exiting")
                R.flush()
                os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()

    import subprocess

    try:
        smi = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except Exception as e:  # pragma: no cover
        smi = repr(e)
    R.add("gpu", smi)
    print("gpu:", smi, flush=True)
    R.add("warm", warm_all(a.procs, sweep=a.sweep))
    print("warm:", R.data["warm"], f"t={time.time() - t0:.0f}s", flush=True)

    import torch

    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from kimi_k3 import fused, stock
    from kimi_k3.benchmarks.bench import cached_weights
    from kimi_k3.layer import Workspace, random_batch

    R.add("torch", torch.__version__)
    flush = torch.empty(512 * 1024 * 1024 // 4, dtype=torch.float32, device="cuda")
    if a.sweep:
        run_sweep(R, flush, a, left)
        return

    for tp in (1, 8):
        cfg = K3LayerConfig.real(tp)
        tw = time.time()
        w = cached_weights(cfg, "cuda")
        torch.cuda.synchronize()
        R.data["notes"].append(f"tp{tp} weights {w.nbytes() / 1e9:.1f} GB built in {time.time() - tw:.1f}s")
        # correctness at real shapes
        for bsz, ctx in [(1, 32768), (64, 4096)] if tp == 8 else [(1, 4096), (64, 4096)]:
            if left() < 60:
                break
            try:
                s = check_fused_point(tp, bsz, ctx, w)
            except Exception:
                s = {"tp": tp, "batch": bsz, "context": ctx, "error": traceback.format_exc()[-2000:]}
            R.add("correctness", s)
            print("check", s, flush=True)
        # timing (+ per-kernel profile of one replay)
        for ptp, bsz, ctx, with_stock in POINTS:
            if ptp != tp or left() < 45:
                continue
            row: dict[str, Any] = {"tp": tp, "batch": bsz, "context": ctx}
            try:
                batch = random_batch(cfg, [ctx] * bsz, device="cuda", seed=1, poison=True)
                batch.workspace = Workspace()
                paths = {"fused": fused.forward}
                if with_stock and not a.no_stock:
                    paths["stock"] = stock.forward
                for name, fn in paths.items():
                    g, _ = graphed(lambda fn=fn, cfg=cfg, w=w, batch=batch: fn(cfg, w, batch))
                    row[name] = time_graph(g, flush, a.reps)
                    row[name + "_profile"] = profile_kernels(g, flush)
                    if (tp, bsz, ctx) in COUNT_AT:
                        row[name + "_kernels"] = count_graph_kernels(g.replay)
                    del g
                _, _, aux = fused.forward_with_aux(cfg, w, batch)
                d = int(aux["ctr"][17])
                row["experts_touched"] = d
                row["bytes"] = layer_bytes(cfg, w, d, [ctx] * bsz)
                row["fused_TBps"] = row["bytes"] / (row["fused"]["median_us"] * 1e-6) / 1e12
                row["fused_pct_roofline"] = 100 * row["bytes"] / COPY_BW / (row["fused"]["median_us"] * 1e-6)
                if "stock" in row:
                    row["speedup_vs_stock"] = row["stock"]["median_us"] / row["fused"]["median_us"]
                del batch
            except Exception:
                row["error"] = traceback.format_exc()[-2000:]
            R.add("timing", row)
            prof = " ".join(f"{n.split('_kernel')[0][:12]}={t:.0f}" for n, t in row.get("fused_profile", []))
            print(
                f"time tp{tp} b{bsz} c{ctx}: fused {row.get('fused', {}).get('median_us', -1):.1f} us, stock "
                f"{row.get('stock', {}).get('median_us', -1):.1f} us | {prof}",
                flush=True,
            )
        # bit-repeatability
        for bsz in (1, 2, 64) if tp == 1 else (64,):
            if left() < 25:
                break
            try:
                batch = random_batch(cfg, _lens(bsz, 4096, seed=bsz), device="cuda", seed=bsz, poison=True)
                batch.workspace = Workspace()
                first = [t.clone() for t in fused.forward(cfg, w, batch)]
                diff_e = 0
                for _ in range(19):
                    o = fused.forward(cfg, w, batch)
                    diff_e += not all(
                        torch.equal(x.view(torch.int16), y.view(torch.int16))
                        for x, y in zip(first, o, strict=True)
                    )
                g, outs = graphed(lambda b=batch, cfg=cfg, w=w: fused.forward(cfg, w, b))
                diff_g = 0
                for _ in range(50):
                    g.replay()
                    diff_g += not all(
                        torch.equal(x.view(torch.int16), y.view(torch.int16))
                        for x, y in zip(first, outs, strict=True)
                    )
                R.add(
                    "repeat",
                    {
                        "tp": tp,
                        "batch": bsz,
                        "eager_runs": 20,
                        "eager_differ": diff_e,
                        "graph_replays": 50,
                        "graph_differ": diff_g,
                    },
                )
            except Exception:
                R.add("repeat", {"tp": tp, "batch": bsz, "error": traceback.format_exc()[-1500:]})
        # plan variants
        for (vtp, bsz, ctx), vs in VARIANTS.items():
            if vtp != tp or left() < 30:
                continue
            batch = random_batch(cfg, [ctx] * bsz, device="cuda", seed=1, poison=True)
            batch.workspace = Workspace()
            for name, ov in vs.items():
                try:
                    plan = fused.make_plan(cfg, bsz, ctx, **ov)
                    g, _ = graphed(
                        lambda plan=plan, cfg=cfg, w=w, batch=batch: fused.forward_planned(
                            cfg, w, batch, plan
                        )
                    )
                    R.add(
                        "variants",
                        {
                            "tp": tp,
                            "batch": bsz,
                            "context": ctx,
                            "name": name,
                            **time_graph(g, flush, a.reps),
                            "profile": profile_kernels(g, flush),
                        },
                    )
                    del g
                except Exception:
                    R.add(
                        "variants",
                        {
                            "tp": tp,
                            "batch": bsz,
                            "context": ctx,
                            "name": name,
                            "error": traceback.format_exc()[-1500:],
                        },
                    )
            del batch
        del w
        from kimi_k3.benchmarks import bench

        bench._WEIGHTS.clear()
        torch.cuda.empty_cache()

    R.add("total_s", time.time() - t0)
    # table
    print("\n| tp | B | ctx | fused us | stock us | x stock | kernels f/s | experts | TB/s | % roofline |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in R.data["timing"]:
        if "error" in r:
            print(f"| {r['tp']} | {r['batch']} | {r['context']} | error |")
            continue
        st = r.get("stock", {}).get("median_us")
        print(
            f"| {r['tp']} | {r['batch']} | {r['context']} | {r['fused']['median_us']:.1f} | "
            f"{'' if st is None else f'{st:.1f}'} | {r.get('speedup_vs_stock', 0):.2f} | "
            f"{r.get('fused_kernels', '')}/{r.get('stock_kernels', '')} | {r['experts_touched']} | "
            f"{r['fused_TBps']:.2f} | {r['fused_pct_roofline']:.0f} |"
        )
    for k in ("correctness", "repeat"):
        for r in R.data[k]:
            print(k, json.dumps(r, default=str)[:400])
    for r in R.data["variants"]:
        prof = " ".join(f"{n.split('_kernel')[0][:12]}={t:.0f}" for n, t in r.get("profile", []))
        print(
            f"variant tp{r['tp']} b{r['batch']} {r['name']}: {r.get('median_us', -1):.1f} us | {prof}"
            f"{r.get('error', '')[-300:]}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
