"""One measurement batch for the Kimi K3 decode layer on one GPU (run on the H200 through the device tool).

For every point (TP x batch x context) and variant (stock, compile, fused when importable):
- capture one layer step in a CUDA graph (after warm-up calls that JIT-compile / autotune outside it),
- count the graph's nodes by type (cudaGraphGetNodes via fasttrack.evidence.graph_count; torch.profiler
  as a fallback),
- time `--iters` replays with CUDA events, flushing the L2 (a 512 MB write) and synchronising before each
  replay, outside the timed region; report the median and p10 / p90,
- bytes moved = all weights but the routed experts + the experts the inputs actually touch + the latent
  cache read + activations; achieved TB/s and its share of the copy bandwidth measured in the same run,
- each non-stock variant's output against stock's on the same inputs (max abs error, the case's tolerance).

Usage: python -m kimi_k3.benchmarks.measure --out DIR [--tp 1 8] [--batches ...] [--contexts ...]
       [--compile-points tp:b:c ...] [--budget-s S] [--tiny]   (--tiny: CPU dry run of the bookkeeping)
Writes DIR/measure.json (every sample) and DIR/measure.md (the table), and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def copy_bandwidth(torch: Any) -> float:
    """Device-to-device copy, bytes read + written per second (median of 10, 4 GiB buffers)."""
    n = 1 << 31
    a = torch.empty(n, dtype=torch.uint16, device="cuda")
    b = torch.empty_like(a)
    a.fill_(1)
    times = []
    for _ in range(12):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    del a, b
    torch.cuda.empty_cache()
    return float(2 * n * 2 / statistics.median(times[2:]))


class GraphTimer:
    def __init__(self, torch: Any, iters: int) -> None:
        self.torch = torch
        self.iters = iters
        self.flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
        try:
            from fasttrack.evidence.graph_count import CudaRuntime

            self.rt: Any = CudaRuntime.load()
        except Exception as exc:  # counted with the profiler instead
            log(f"graph node count via ctypes unavailable: {exc}")
            self.rt = None

    def capture(self, fn: Any, inputs: Any) -> tuple[Any, Any]:
        torch = self.torch
        for _ in range(2):
            fn(inputs)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(graph):
            out = fn(inputs)
        if hasattr(graph, "instantiate"):
            graph.instantiate()
        torch.cuda.synchronize()
        return graph, out

    def nodes(self, graph: Any) -> dict[str, int]:
        if self.rt is not None:
            return dict(self.rt.count(int(graph.raw_cuda_graph())).by_type)
        return {"kernel": len(self.kernel_names(graph))}

    def kernel_names(self, graph: Any) -> list[tuple[str, float]]:
        from torch.profiler import ProfilerActivity, profile

        torch = self.torch
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            graph.replay()
            torch.cuda.synchronize()
        out = []
        for e in prof.events():
            if str(getattr(e, "device_type", "")).endswith("CUDA"):
                out.append((e.name, float(getattr(e, "device_time", 0.0) or getattr(e, "cuda_time", 0.0))))
        return out

    def time(self, graph: Any) -> list[float]:
        torch = self.torch
        samples = []
        graph.replay()
        for i in range(self.iters):
            self.flush.fill_(i % 250 + 1)
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            graph.replay()
            e.record()
            torch.cuda.synchronize()
            samples.append(s.elapsed_time(e) * 1e3)
        return samples


def measure_point(
    torch: Any, timer: GraphTimer, case: Any, names: Sequence[str], profile: bool, copy_bw: float
) -> dict[str, Any]:
    res: dict[str, Any] = {"variants": {}}
    seed = 1000 * case.batch + case.context
    case.load_inputs(case.make_inputs(seed))
    ref = [t.clone() for t in case.variants["stock"](case.static_inputs)]
    bytes_moved = case.bytes_moved("stock")
    res["experts_touched"] = case.experts_touched_now()
    res["bytes_moved"] = bytes_moved
    for name in names:
        fn = case.variants.get(name)
        if fn is None:
            continue
        v: dict[str, Any] = {}
        try:
            t = time.monotonic()
            graph, out = timer.capture(fn, case.static_inputs)
            v["capture_s"] = round(time.monotonic() - t, 2)
            v["nodes"] = timer.nodes(graph)
            samples = timer.time(graph)
            med = statistics.median(samples)
            v.update(
                samples_us=[round(x, 2) for x in samples],
                median_us=med,
                p10_us=pct(samples, 0.1),
                p90_us=pct(samples, 0.9),
                tbps=bytes_moved / med / 1e6,
                pct_copy_bw=100 * bytes_moved / (med * 1e-6) / copy_bw,
            )
            graph.replay()
            torch.cuda.synchronize()
            diffs = [float((a.float() - b.float()).abs().max()) for a, b in zip(out, ref, strict=True)]
            atol, rtol = case.tolerance
            ok = all(
                bool(((a.float() - b.float()).abs() <= atol + rtol * b.float().abs()).all())
                for a, b in zip(out, ref, strict=True)
            )
            v.update(max_abs_vs_stock=max(diffs), within_tolerance=ok)
            if profile:
                v["kernels"] = timer.kernel_names(graph)
            graph.reset()
            del graph, out
        except Exception as exc:
            v["error"] = f"{type(exc).__name__}: {exc}"
            log(traceback.format_exc(limit=4))
        res["variants"][name] = v
    return res


def stock_vs_reference(torch: Any, tp: int, batch: int, context: int) -> dict[str, Any]:
    from kimi_k3.tests.test_gpu_layer import check_stock_point

    c = check_stock_point({"tp": tp, "batch": batch, "context": context, "dtype": "bfloat16"})
    return c.summary()


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| TP | B | ctx | experts | variant | median us | p10-p90 us | kernels | TB/s | % copy BW "
        "| max abs vs stock |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for name, v in r["variants"].items():
            if "error" in v:
                lines.append(
                    f"| {r['tp']} | {r['batch']} | {r['context']} | {r.get('experts_touched')} | {name} "
                    f"| error: {v['error'][:60]} | | | | | |"
                )
                continue
            k = v.get("nodes", {}).get("kernel")
            lines.append(
                f"| {r['tp']} | {r['batch']} | {r['context']} | {r['experts_touched']} | {name} | "
                f"{v['median_us']:.1f} | {v['p10_us']:.1f}-{v['p90_us']:.1f} | {k} | {v['tbps']:.2f} | "
                f"{v['pct_copy_bw']:.0f} | {v.get('max_abs_vs_stock', 0):.3g}"
                f"{'' if v.get('within_tolerance', True) else ' (OUT OF TOL)'} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--tp", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 8, 32, 64])
    ap.add_argument("--contexts", type=int, nargs="+", default=[4096, 32768])
    ap.add_argument("--compile-points", nargs="*", default=["1:1:4096", "1:64:4096", "8:1:4096"])
    ap.add_argument("--ref-points", nargs="*", default=["1:1:4096", "1:64:32768", "8:8:4096"])
    ap.add_argument("--profile-points", nargs="*", default=["1:1:4096", "1:64:4096"])
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--budget-s", type=float, default=330.0)
    ap.add_argument("--no-fused", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch

    from kimi_k3.bench import K3BenchmarkCase, cached_weights
    from baselines.vllm.kimi_k3.config import K3LayerConfig

    env: dict[str, Any] = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "capability": torch.cuda.get_device_capability(),
    }
    try:
        import triton

        env["triton"] = triton.__version__
        env["nvidia_smi"] = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    except Exception as exc:
        env["nvidia_smi"] = f"unavailable: {exc}"
    env["copy_bw_Bps"] = copy_bandwidth(torch)
    log(f"env {env}")
    doc: dict[str, Any] = {"env": env, "points": [], "reference": [], "notes": []}

    def save() -> None:
        (out / "measure.json").write_text(json.dumps(doc, indent=1))
        (out / "measure.md").write_text(f"{json.dumps(env)}\n\n{table(doc['points'])}\n")

    timer = GraphTimer(torch, args.iters)
    compile_points = {tuple(int(x) for x in p.split(":")) for p in args.compile_points}
    profile_points = {tuple(int(x) for x in p.split(":")) for p in args.profile_points}
    for tp in args.tp:
        cfg = K3LayerConfig.real(tp)
        t = time.monotonic()
        w = cached_weights(cfg, "cuda")
        torch.cuda.synchronize()
        log(f"tp{tp} weights {w.nbytes() / 1e9:.1f} GB built in {time.monotonic() - t:.1f}s")
        for b in args.batches:
            for ctx in args.contexts:
                if time.monotonic() - T0 > args.budget_s:
                    doc["notes"].append(f"budget reached before tp{tp} b{b} c{ctx}")
                    log(doc["notes"][-1])
                    save()
                    continue
                key = (tp, b, ctx)
                with_compile = key in compile_points and time.monotonic() - T0 < args.budget_s - 90
                t = time.monotonic()
                try:
                    case = K3BenchmarkCase(
                        cfg, w, b, ctx, include_compile=with_compile, include_fused=not args.no_fused
                    )
                    names = [n for n in ("stock", "compile", "fused") if n in case.variants]
                    r = measure_point(torch, timer, case, names, key in profile_points, env["copy_bw_Bps"])
                except Exception as exc:
                    r = {"variants": {}, "error": f"{type(exc).__name__}: {exc}"}
                    log(traceback.format_exc(limit=6))
                r.update(tp=tp, batch=b, context=ctx, wall_s=round(time.monotonic() - t, 1))
                doc["points"].append(r)
                summary = {
                    n: (round(v["median_us"], 1) if "median_us" in v else v.get("error", "?")[:80])
                    for n, v in r["variants"].items()
                }
                log(f"tp{tp} b{b} c{ctx}: {summary} ({r['wall_s']}s)")
                save()
                del case
        for p in args.ref_points:
            ptp, pb, pc = (int(x) for x in p.split(":"))
            if ptp != tp or time.monotonic() - T0 > args.budget_s:
                continue
            try:
                s = stock_vs_reference(torch, ptp, pb, pc)
            except Exception as exc:
                s = {"error": f"{type(exc).__name__}: {exc}"}
            s.update(tp=ptp, batch=pb, context=pc)
            doc["reference"].append(s)
            log(f"stock vs fp32 reference {p}: {s}")
            save()
        torch.cuda.empty_cache()
    save()
    print(table(doc["points"]))
    print(json.dumps(doc["reference"], indent=1))


if __name__ == "__main__":
    main()
