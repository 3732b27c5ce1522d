"""Development smoke run of the TP machinery on a multi-GPU box (not evidence: `fasttrack collect` is).

    torchrun --standalone --nproc-per-node 2 -m kimi_k3.benchmarks.tp_smoke --out DIR [--points 1:32768 ...]

Per rank: (1) the symmetric-memory peer buffers of `kimi_k3.tp` (publish + a read of every rank's view),
eagerly and replayed from a CUDA graph, and the cost of one publish (barrier); (2) at real shapes, stock at
TP 2 (and fused at TP 2 when it supports it) against the fp32 reference of the full layer; (3) per-layer
latency of the engine baseline's stock (`baselines.vllm.kimi_k3.case`) and the fused candidate at
TP 2 from CUDA-graph replays, L2 flushed, ranks
rendezvoused on the device before each sample, max over ranks. Rank 0 writes DIR/tp_smoke.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import traceback
from pathlib import Path
from typing import Any

T0 = time.monotonic()


def log(rank: int, msg: str) -> None:
    print(f"[r{rank} {time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def symm_check(torch: Any, tp: Any) -> dict[str, Any]:
    dev = torch.device("cuda", torch.cuda.current_device())
    buf = tp.buffer("smoke", (8, 1024), torch.float32, dev)
    out = torch.empty((8, 1024), dtype=torch.float32, device=dev)

    def step(v: float) -> None:
        buf.local.fill_(v * (tp.rank + 1))
        buf.publish()
        torch.sum(torch.stack(buf.views), dim=0, out=out)
        buf.publish()  # nobody overwrites its buffer before every peer has read it

    want = lambda v: v * sum(r + 1 for r in range(tp.world))  # noqa: E731
    step(1.0)
    torch.cuda.synchronize()
    eager_ok = bool((out == want(1.0)).all())
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step(2.0)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        step(3.0)
    g.replay()
    torch.cuda.synchronize()
    graph_ok = bool((out == want(3.0)).all())
    # cost of one publish (barrier), from a graph of 100
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g2):
        for _ in range(100):
            buf.publish()
    g2.replay()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    g2.replay()
    e1.record()
    torch.cuda.synchronize()
    return {"eager_ok": eager_ok, "graph_ok": graph_ok, "publish_us": e0.elapsed_time(e1) * 1e3 / 100}


def time_variants(torch: Any, dist: Any, case: Any, iters: int) -> dict[str, Any]:
    flush = torch.empty(1 << 29, dtype=torch.uint8, device="cuda")
    token = torch.zeros(1, device="cuda")
    res: dict[str, Any] = {}
    for name, fn in case.variants.items():
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    fn(case.static_inputs)
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                outs = fn(case.static_inputs)
            samples = []
            for _ in range(iters):
                flush.zero_()
                dist.all_reduce(token)  # device-side rendezvous: both ranks start the sample together
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                g.replay()
                b.record()
                torch.cuda.synchronize()
                samples.append(a.elapsed_time(b) * 1e3)
            t = torch.tensor(samples, device="cuda")
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            mx = t.tolist()
            res[name] = {"median_us": statistics.median(mx), "min_us": min(mx), "samples_us": mx,
                         "out0_finite": bool(torch.isfinite(outs[0]).all())}
            del g
        except Exception as exc:
            res[name] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
            traceback.print_exc()
    # outputs of every variant vs stock, same inputs
    return res


def check_reference(torch: Any, dist: Any, args: Any, tp: Any, rank: int, world: int, doc: dict[str, Any],
                    save: Any) -> None:
    """Stock (and fused with --fused) at TP `world` against the fp32 reference of the full layer."""
    from baselines.vllm.kimi_k3 import reference, stock
    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from baselines.vllm.kimi_k3.tp import shard_weights
    from kimi_k3.benchmarks.bench import cached_weights
    from kimi_k3.layer import Workspace, random_batch

    full = cached_weights(K3LayerConfig.real(1), "cuda")
    shard = shard_weights(full, rank, world)
    paths: dict[str, Any] = {"stock": stock.forward_with_aux}
    if args.fused:
        from kimi_k3 import fused

        paths["fused"] = fused.forward_with_aux
    for p in args.ref_points:
        b, c = (int(x) for x in p.split(":"))
        for name, fwd in paths.items():
            try:
                lens = [c] + [1 + (37 * i) % c for i in range(1, b)]
                batch = random_batch(full.cfg, lens, device="cuda", seed=c, poison=True)
                batch.tp, batch.workspace = tp, Workspace()
                before = batch.kv_cache.clone()
                o, r, aux = fwd(shard.cfg, shard, batch)
                cmp = reference.compare(full.cfg, full, batch, before, o, r, topk_ids=aux["topk_ids"])
                o_all = o.float().clone()
                dist.all_reduce(o_all, op=dist.ReduceOp.MAX)
                s = {"path": name, "batch": b, "context": c, "ok": bool(cmp.ok()),
                     "ranks_identical": bool(torch.equal(o_all, o.float())), **cmp.summary()}
            except Exception as exc:
                s = {"path": name, "batch": b, "context": c, "error": f"{type(exc).__name__}: {exc}"[:600]}
                traceback.print_exc()
            doc["reference"].append(s)
            log(rank, f"reference {s}")
            save()
    del full, shard
    torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--points", nargs="*", default=["1:32768", "64:32768"])
    ap.add_argument("--compile-points", nargs="*", default=["1:32768"])
    ap.add_argument("--ref-points", nargs="*", default=["1:32768", "64:16384"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--fused", action="store_true", help="also the fused path (needs its TP support)")
    args = ap.parse_args()

    import torch
    import torch.distributed as dist

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    from baselines.vllm.kimi_k3.case import K3BaselineCase, build_state, cached_weights
    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from baselines.vllm.kimi_k3.tp import TPGroup
    from kimi_k3.benchmarks import bench

    rank, world = dist.get_rank(), dist.get_world_size()
    doc: dict[str, Any] = {"world": world, "torch": torch.__version__, "device": torch.cuda.get_device_name()}
    out = Path(args.out)

    def save() -> None:
        if rank == 0:
            out.mkdir(parents=True, exist_ok=True)
            (out / "tp_smoke.json").write_text(json.dumps(doc, indent=1, default=str))

    tp = TPGroup.from_env()
    try:
        doc["symm"] = symm_check(torch, tp)
    except Exception as exc:
        doc["symm"] = {"error": f"{type(exc).__name__}: {exc}"[:600]}
        traceback.print_exc()
    log(rank, f"symm {doc['symm']}")
    save()

    doc["reference"] = []
    if args.ref_points:
        check_reference(torch, dist, args, tp, rank, world, doc, save)

    cfg = K3LayerConfig.real(world)
    w = cached_weights(cfg, "cuda")
    doc["timing"] = []
    for p in args.points:
        b, c = (int(x) for x in p.split(":"))
        t = time.monotonic()
        try:
            case = K3BaselineCase(build_state(cfg, w, b, c, "cuda", tp), b, c,
                                  include_compile=p in args.compile_points)
            point = {"tp": world, "batch": b, "context": c}
            case.variants = {  # type: ignore[attr-defined]
                "stock": case.stock, **case.extra_baselines,
                **(bench.candidates(case, point) if args.fused else {}),
            }
            res = time_variants(torch, dist, case, args.iters)
            res["bytes_moved"] = case.bytes_moved()
            del case
        except Exception as exc:
            res = {"error": f"{type(exc).__name__}: {exc}"[:600]}
            traceback.print_exc()
        res.update(batch=b, context=c, wall_s=round(time.monotonic() - t, 1))
        doc["timing"].append(res)
        log(rank, f"timing b{b} c{c}: " + json.dumps(
            {k: (v.get("median_us"), v.get("error")) for k, v in res.items() if isinstance(v, dict)}))
        save()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
