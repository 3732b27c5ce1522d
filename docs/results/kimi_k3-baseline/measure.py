"""One H200 development run: the engine baseline (baselines/vllm/kimi_k3) vs the fused contribution.

Per point: both variants (and torch.compile of stock where asked) against the baseline's fp32 oracle on fresh
inputs (max abs error, the policy's bf16 check atol 0.1 + rtol 0.05), then each captured in a CUDA graph and
timed (L2 flushed before every replay, median of --reps; stock timed before and after fused to show the
spread), kernels per replay, bit-repeatability of fused (two replays, same inputs), and at the profile points
the per-kernel times of one replay. Also the device's copy bandwidth (read + write) and read bandwidth (a
Triton streaming read) in the same run. Writes $OUT/results.json after every point.

Run on the box (from the repo root):
  mkdir -p /tmp/site && tar -xJf .fi/flashinfer.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site:$PYTHONPATH
  PYTHONPATH=$PWD/kernels:$PWD:$PYTHONPATH python3 docs/results/kimi_k3-baseline/measure.py --budget 470
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path[:0] = [os.path.join(ROOT, "kernels"), ROOT]
os.environ.setdefault("KIMI_K3_BENCH_WARM", "0")  # this script warms its own plans
os.environ.setdefault("KIMI_K3_BASELINE_COMPILE", "0")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

T0 = time.time()
TP1 = [(b, c) for b in (1, 2, 8, 32, 64) for c in (4096, 16384, 32768)]
TP8 = [(1, 4096), (1, 32768), (64, 4096), (64, 32768)]
PROFILE = {(1, 1, 4096), (1, 1, 32768), (1, 64, 4096), (1, 64, 32768), (8, 1, 32768), (8, 64, 32768)}
REPEAT = {1, 2, 64}


@triton.jit
def _read_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(pid * BLOCK, N, nprog * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def bandwidth() -> dict[str, float]:
    n = 1 << 30  # 2 GiB of bf16
    a = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)
    out = torch.empty(132 * 8, dtype=torch.float32, device="cuda")

    def timed(fn: Any, reps: int = 10) -> float:
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e) / 1e3)
        return statistics.median(ts)

    t_copy = timed(lambda: b.copy_(a))
    t_read = timed(lambda: _read_kernel[(132 * 8,)](a, out, n, BLOCK=2048, num_warps=8))
    del a, b
    torch.cuda.empty_cache()
    return {"copy_TBps": 2 * n * 2 / t_copy / 1e12, "read_TBps": n * 2 / t_read / 1e12}


def graphed(fn: Any) -> tuple[Any, Any]:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = fn()
    torch.cuda.synchronize()
    return g, outs


def time_graph(g: Any, flush: torch.Tensor, n: int) -> dict[str, float]:
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
    return {"median_us": statistics.median(us), "p10_us": us[int(0.1 * (n - 1))], "p90_us": us[int(0.9 * (n - 1))]}


def profile(g: Any, flush: torch.Tensor) -> list[tuple[str, float]]:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof_ctx

    flush.zero_()
    torch.cuda.synchronize()
    with prof_ctx(activities=[ProfilerActivity.CUDA]) as prof:
        g.replay()
        torch.cuda.synchronize()
    return [
        (e.name[:90], round(e.time_range.elapsed_us(), 1))
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
    ]


def errors(out: Any, ref: Any) -> dict[str, Any]:
    worst, ok, rel = 0.0, True, 0.0
    for a, o in zip(out, ref, strict=True):
        d = (a.float() - o.float()).abs()
        worst = max(worst, float(d.max()))
        ok = ok and bool((d <= 0.1 + 0.05 * o.float().abs()).all()) and not bool(torch.isnan(a).any())
        rel = max(rel, float((a.float() - o.float()).norm() / o.float().norm()))
    return {"max_abs_error": worst, "rel_l2": rel, "pass_bf16_cap": ok}


def run_point(R: dict[str, Any], tp: int, b: int, c: int, flush: torch.Tensor, reps: int,
              compile_: bool = False) -> None:
    from kimi_k3.benchmarks import bench

    from baselines.vllm.kimi_k3.case import baseline_case

    point = {"gpu": "NVIDIA H200", "tp": tp, "batch": b, "context": c, "dtype": "bfloat16"}
    if tp > 1:
        point["shard"] = True
    rec: dict[str, Any] = {"tp": tp, "batch": b, "context": c, "shard": tp > 1}
    t = time.time()
    if compile_:
        os.environ["KIMI_K3_BASELINE_COMPILE"] = "1"
    case = baseline_case(point)
    os.environ["KIMI_K3_BASELINE_COMPILE"] = "0"
    assert case is not None
    variants: dict[str, Any] = {"stock": case.stock, **case.extra_baselines, **bench.candidates(case, point)}
    case.load_inputs(case.make_inputs(7))
    rec["bytes_moved"] = case.bytes_moved()
    rec["touched_experts"] = case.touched_experts[-1]
    ref = case.oracle(case.static_inputs)
    rec["setup_s"] = round(time.time() - t, 1)
    for name, fn in variants.items():
        v: dict[str, Any] = {}
        try:
            tv = time.time()
            out = fn(case.static_inputs)
            torch.cuda.synchronize()
            v.update(errors(out, ref))
            v["eager_first_s"] = round(time.time() - tv, 1)
            g, outs = graphed(lambda fn=fn: fn(case.static_inputs))
            v.update(errors(outs, ref) if False else {})
            v["time"] = time_graph(g, flush, reps)
            g.replay()
            torch.cuda.synchronize()
            v["graph_vs_oracle"] = errors(outs, ref)
            if name == "fused" and b in REPEAT:
                first = [o.clone() for o in outs]
                flush.zero_()
                g.replay()
                torch.cuda.synchronize()
                v["bit_repeatable"] = all(torch.equal(x, y) for x, y in zip(first, outs, strict=True))
            prof = profile(g, flush)
            v["kernels"] = len([n for n, _ in prof if "memcpy" not in n.lower() and "memset" not in n.lower()])
            if (tp, b, c) in PROFILE:
                v["profile"] = prof
            v["TBps"] = rec["bytes_moved"] / (v["time"]["median_us"] * 1e-6) / 1e12
            del g, outs
        except Exception as e:
            v["error"] = f"{type(e).__name__}: {str(e)[:600]}"
            traceback.print_exc(limit=4)
        rec[name] = v
    if "stock" in rec and "time" in rec["stock"]:  # stock again, after fused: the run-to-run spread
        g, _ = graphed(lambda: case.stock(case.static_inputs))
        rec["stock"]["time_again"] = time_graph(g, flush, reps)
        del g
    if "time" in rec.get("fused", {}) and "time" in rec.get("stock", {}):
        rec["speedup"] = rec["stock"]["time"]["median_us"] / rec["fused"]["time"]["median_us"]
    R["points"].append(rec)
    del case, variants, ref
    torch.cuda.empty_cache()
    short = {k: (rec[k]["time"]["median_us"] if "time" in rec.get(k, {}) else rec.get(k, {}).get("error"))
             for k in ("stock", "compile", "fused") if k in rec}
    print(json.dumps({"tp": tp, "b": b, "c": c, **short, "speedup": rec.get("speedup"),
                      "err": {k: rec[k].get("max_abs_error") for k in ("stock", "fused") if k in rec},
                      "t": round(time.time() - T0)}), flush=True)


def run_variants(R: dict[str, Any], b: int, c: int, variants: dict[str, dict[str, Any]], flush: torch.Tensor,
                 reps: int) -> None:
    """Stock, then the fused layer under each plan override (same case, inputs and oracle)."""
    from kimi_k3 import fused

    from baselines.vllm.kimi_k3.case import baseline_case

    case = baseline_case({"gpu": "NVIDIA H200", "tp": 1, "batch": b, "context": c, "dtype": "bfloat16"})
    assert case is not None
    case.load_inputs(case.make_inputs(7))
    ref = case.oracle(case.static_inputs)
    st = case.state
    rec: dict[str, Any] = {"batch": b, "context": c, "variants": {}}
    g, _ = graphed(lambda: case.stock(case.static_inputs))
    rec["stock_us"] = time_graph(g, flush, reps)["median_us"]
    del g
    from baselines.vllm.kimi_k3.decode import Workspace

    base_out: list[torch.Tensor] | None = None
    for name, ov in variants.items():
        v: dict[str, Any] = {"override": ov}
        try:
            ws = Workspace()
            plan = fused.make_plan(st.cfg, b, c, **ov)

            def fn(plan: Any = plan, ws: Any = ws) -> Any:
                return fused.forward_planned(st.cfg, st.weights, st.decode_batch(case.static_inputs, ws), plan)

            out = fn()
            torch.cuda.synchronize()
            v.update(errors(out, ref))
            g, outs = graphed(fn)
            v["median_us"] = time_graph(g, flush, reps)["median_us"]
            v["speedup"] = rec["stock_us"] / v["median_us"]
            g.replay()
            torch.cuda.synchronize()
            v["graph_vs_oracle"] = errors(outs, ref)
            first = [o.clone() for o in outs]
            flush.zero_()
            g.replay()
            torch.cuda.synchronize()
            v["bit_repeatable"] = all(torch.equal(x, y) for x, y in zip(first, outs, strict=True))
            if base_out is None:
                base_out = first
            else:
                v["same_bits_as_first"] = all(torch.equal(x, y) for x, y in zip(first, base_out, strict=True))
            prof = profile(g, flush)
            v["profile"] = prof
            del g, outs
        except Exception as e:
            v["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        rec["variants"][name] = v
        print(json.dumps({"b": b, "c": c, "variant": name, "us": v.get("median_us"), "x": v.get("speedup"),
                          "err": v.get("max_abs_error"), "ok": v.get("graph_vs_oracle", {}).get("pass_bf16_cap"),
                          "rep": v.get("bit_repeatable"), "same": v.get("same_bits_as_first"),
                          "k": {n[:12]: t for n, t in v.get("profile", [])}, "e": v.get("error")}), flush=True)
    g, _ = graphed(lambda: case.stock(case.static_inputs))
    rec["stock_us_again"] = time_graph(g, flush, reps)["median_us"]
    del g, case, ref
    torch.cuda.empty_cache()
    R.setdefault("sweep", []).append(rec)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget", type=float, default=470.0)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--procs", type=int, default=15)
    ap.add_argument("--compile", action="store_true", help="torch.compile of stock at B1/32k (last)")
    ap.add_argument("--tp1", default="", help="JSON [[batch, context], ...]: the TP-1 points (default: the grid)")
    ap.add_argument("--tp8", default="", help="JSON [[batch, context], ...]: the TP-8 shard points")
    ap.add_argument("--sweep", default="", help="JSON file {\"B,C\": {name: overrides}}: plan variants, first")
    a = ap.parse_args()
    R: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                         "triton": triton.__version__, "points": [], "errors": []}
    try:
        import flashinfer

        R["flashinfer"] = flashinfer.__version__
    except Exception as e:
        R["flashinfer"] = f"not importable: {e!r}"
    path = os.path.join(a.out, "results.json")

    def save() -> None:
        R["elapsed_s"] = round(time.time() - T0, 1)
        with open(path, "w") as f:
            json.dump(R, f, indent=1)

    from kimi_k3 import fused
    from kimi_k3.benchmarks.measure_fused import warm_keys

    from baselines.vllm.kimi_k3.config import K3LayerConfig

    R["fused_attention"] = fused.make_plan(K3LayerConfig.real(1), 1, 4096).ATTN
    tp1 = [tuple(x) for x in json.loads(a.tp1)] if a.tp1 else TP1
    tp8 = [tuple(x) for x in json.loads(a.tp8)] if a.tp8 else TP8
    sweep: dict[str, dict[str, dict[str, Any]]] = {}
    if a.sweep:
        with open(a.sweep) as f:
            sweep = json.load(f)
    keys = [(1, b, c, "{}") for b, c in tp1]
    keys += [(1, int(k.split(",")[0]), int(k.split(",")[1]), json.dumps(ov, sort_keys=True))
             for k, vs in sweep.items() for ov in vs.values()]
    R["warm"] = warm_keys(keys, a.procs, timeout=150)
    print(json.dumps({"warm": R["warm"], "t": round(time.time() - T0)}), flush=True)
    R["bandwidth"] = bandwidth()
    print(json.dumps(R["bandwidth"]), flush=True)
    save()
    flush = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    for k, vs in sweep.items():
        if time.time() - T0 > a.budget * 0.6:
            R["errors"].append(f"skipped sweep {k}: budget")
            continue
        try:
            run_variants(R, int(k.split(",")[0]), int(k.split(",")[1]), vs, flush, a.reps)
        except Exception as e:
            R["errors"].append(f"sweep {k}: {type(e).__name__}: {str(e)[:400]}")
            traceback.print_exc(limit=4)
        save()
    for b, c in tp1:
        if time.time() - T0 > a.budget * 0.72:
            R["errors"].append(f"skipped tp1 b{b} c{c}: budget")
            continue
        try:
            run_point(R, 1, b, c, flush, a.reps)
        except Exception as e:
            R["errors"].append(f"tp1 b{b} c{c}: {type(e).__name__}: {str(e)[:400]}")
            traceback.print_exc(limit=4)
        save()
    for b, c in tp8:
        if time.time() - T0 > a.budget * 0.9:
            R["errors"].append(f"skipped tp8 b{b} c{c}: budget")
            continue
        try:
            run_point(R, 8, b, c, flush, a.reps)
        except Exception as e:
            R["errors"].append(f"tp8 b{b} c{c}: {type(e).__name__}: {str(e)[:400]}")
            traceback.print_exc(limit=4)
        save()
    if a.compile and time.time() - T0 < a.budget - 120:
        try:
            run_point(R, 1, 1, 32768, flush, a.reps, compile_=True)
        except Exception as e:
            R["errors"].append(f"compile: {type(e).__name__}: {str(e)[:400]}")
        save()
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
