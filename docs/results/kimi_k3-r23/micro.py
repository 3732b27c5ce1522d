"""Issue 13 / kernel23: can the output-gate GEMV of qkv_a (12288 x 7168 bf16, 176 MB) hide under the
latency-bound attention stretch? Microbenchmark at TP-1 B1 (4k, 32k), real shapes, CUDA graphs, L2 flushed
before each of 20 replays (median), `../kimi_k3-baseline/measure.py`'s timing:

  fi          FlashInfer's FA3 MLA alone (the fused path's packed query)
  gate        the gate rows alone: qkv_a_kernel with NX 0, rows [GATE_OFF, R) (the plan's tiles)
  fi+gate     both in one graph: gate on a side stream forked before FlashInfer, joined after
  qkv_a       kernel 1 as today (every row), and qkv_a-nogate (rows [0, GATE_OFF) + the norm CTAs)
  stretch     kernels 1-3 of the fused path (qkv_a, q_b, FlashInfer, W_UV + gate), A_GS 0 / 1 / 2
Each graph also gets a one-replay profile with kernel start offsets (us from the first kernel's start).
`--extra` (run 2) adds, to see how many SMs FlashInfer leaves to a concurrent GEMV:
  gate/N      the gate rows as sequential launches of N CTAs each (at most N gate CTAs resident: a
              persistent N-CTA gate GEMV's footprint), N 16 / 33 / 66
  fi+gate/N   FlashInfer with gate/N on a side stream (forked before FlashInfer, joined after)
  gate+fi     the gate forked after FlashInfer was enqueued (FlashInfer first in capture order)
and the grid, block, registers, shared memory and blocks per SM of FlashInfer's and the gate's kernel from
the profiler's trace (chrome trace "args").

  PYTHONPATH=/tmp/site:$PWD:$PWD/kernels python3 docs/results/kimi_k3-r23/micro.py --out $OUT
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
_BASE = os.path.join(HERE, "..", "kimi_k3-baseline", "measure.py")
_spec = importlib.util.spec_from_file_location("k3_measure", _BASE)
assert _spec is not None and _spec.loader is not None
M = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(M)

import torch  # noqa: E402


def timeline(g: Any, flush: torch.Tensor) -> list[tuple[str, float, float]]:
    """(kernel, start us from the first start, duration us) of one replay."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof_ctx

    flush.zero_()
    torch.cuda.synchronize()
    with prof_ctx(activities=[ProfilerActivity.CUDA]) as prof:
        g.replay()
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    t0 = min(e.time_range.start for e in ev) if ev else 0
    return [(e.name[:60], round(e.time_range.start - t0, 1), round(e.time_range.elapsed_us(), 1)) for e in ev]


EXTRA = False


def launch_args(g: Any, flush: torch.Tensor) -> list[dict[str, Any]]:
    """Grid, block, registers, shared memory, blocks per SM of each kernel of one replay (chrome trace)."""
    import tempfile

    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof_ctx

    flush.zero_()
    torch.cuda.synchronize()
    with prof_ctx(activities=[ProfilerActivity.CUDA]) as prof:
        g.replay()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        with open(f.name) as fh:
            tr = json.load(fh)
    keys = ("grid", "block", "registers per thread", "shared memory", "blocks per SM", "warps per SM",
            "est. achieved occupancy %")
    return [{"name": e.get("name", "")[:60], **{k: e.get("args", {}).get(k) for k in keys}}
            for e in tr.get("traceEvents", []) if e.get("cat") == "kernel"]


def run_context(R: dict[str, Any], c: int, flush: torch.Tensor, reps: int) -> None:
    from kimi_k3 import fused
    from kimi_k3.fused import kernels as K
    from kimi_k3.fused import launch as L
    from kimi_k3.fused import prep

    from baselines.vllm.kimi_k3 import attention as engine_attention
    from baselines.vllm.kimi_k3.case import baseline_case
    from baselines.vllm.kimi_k3.decode import Workspace

    case = baseline_case({"gpu": "NVIDIA H200", "tp": 1, "batch": 1, "context": c, "dtype": "bfloat16"})
    assert case is not None
    case.load_inputs(case.make_inputs(7))
    st, inputs = case.state, case.static_inputs
    cfg, w = st.cfg, st.weights
    ws = Workspace()
    batch = st.decode_batch(inputs, ws)
    plan = fused.make_plan(cfg, 1, c)
    rec: dict[str, Any] = {"context": c, "plan_attn": plan.ATTN, "graphs": {}}
    _, _, aux = fused.run_planned(cfg, w, batch, plan)
    torch.cuda.synchronize()
    q, opart = aux["lse"], aux["opart"]
    fw = prep.prepare(w)
    attn = engine_attention.for_batch(cfg, batch)
    R_, g0 = cfg.qkv_a_g_rows, cfg.qkv_a_rows
    H = cfg.hidden
    raw = torch.empty((1, R_), dtype=torch.bfloat16, device="cuda")
    ssq = torch.empty((L._cdiv(cfg.q_lora_rank, plan.A_BN), 1), dtype=torch.float32, device="cuda")
    resid1 = torch.empty((1, H), dtype=torch.float32, device="cuda")
    ss_in = torch.empty((1,), dtype=torch.float32, device="cuda")
    ctr = torch.zeros((K.CTR_SIZE,), dtype=torch.int32, device="cuda")
    a_args = (batch.hidden, batch.residual, fw.w_qkv_a_g, raw, ssq, resid1, ss_in, ctr, 1)
    a_kw = dict(H=H, R=R_, QL=cfg.q_lora_rank, CTR_N=K.CTR_SIZE, XR=plan.XR, XK=min(512, L._p2(H)),
                BB=plan.bb("a"), BN=plan.A_BN, BK=plan.A_BK, MODE=plan.mode("a"), num_warps=plan.nw("a"),
                num_stages=plan.st("a"))
    nx = L._cdiv(1, plan.XR)
    side = torch.cuda.Stream()

    def fi() -> Any:
        return attn.run(q, batch.kv_cache, out=opart)

    def gate() -> Any:
        K.qkv_a_kernel[(L._cdiv(R_ - g0, plan.A_BN),)](*a_args, NX=0, R0=g0, RN=R_ - g0, **a_kw)
        return raw

    def fi_gate() -> Any:
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            gate()
        fi()
        main.wait_stream(side)
        return opart

    def qkv_a() -> Any:
        K.qkv_a_kernel[(nx + L._cdiv(R_, plan.A_BN),)](*a_args, NX=nx, **a_kw)
        return raw

    def qkv_a_nogate() -> Any:
        K.qkv_a_kernel[(nx + L._cdiv(g0, plan.A_BN),)](*a_args, NX=nx, RN=g0, **a_kw)
        return raw

    def stretch(gs: int) -> Any:
        p = plan.with_(A_GS=gs)

        def f() -> Any:
            b = st.decode_batch(inputs, ws)
            return L.launch_attention(cfg, w, b, p)["attn_out"]
        return f

    def gate_n(n: int) -> Any:
        def f() -> Any:
            rows = n * plan.A_BN
            for r0 in range(g0, R_, rows):
                rn = min(rows, R_ - r0)
                K.qkv_a_kernel[(L._cdiv(rn, plan.A_BN),)](*a_args, NX=0, R0=r0, RN=rn, **a_kw)
            return raw
        return f

    def fi_gate_n(n: int) -> Any:
        def f() -> Any:
            main = torch.cuda.current_stream()
            side.wait_stream(main)
            with torch.cuda.stream(side):
                gate_n(n)()
            fi()
            main.wait_stream(side)
            return opart
        return f

    def gate_after_fi() -> Any:
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        fi()
        with torch.cuda.stream(side):
            gate()
        main.wait_stream(side)
        return opart

    extra: dict[str, Any] = {}
    if EXTRA:
        for n in (16, 33, 66):
            extra[f"gate/{n}"] = gate_n(n)
            extra[f"fi+gate/{n}"] = fi_gate_n(n)
        extra["gate+fi"] = gate_after_fi
    fns = {**extra, "fi": fi, "gate": gate, "fi+gate": fi_gate, "qkv_a": qkv_a,
           "qkv_a-nogate": qkv_a_nogate, "stretch0": stretch(0), "stretch1": stretch(1),
           "stretch2": stretch(2), "stretch0_again": stretch(0)}
    outs0: Any = None
    for name, fn in fns.items():
        r: dict[str, Any] = {}
        try:
            g, outs = M.graphed(fn)
            r.update(M.time_graph(g, flush, reps))
            r["timeline"] = timeline(g, flush)
            if EXTRA and name in ("fi", "gate"):
                r["launch"] = launch_args(g, flush)
            if name.startswith("stretch"):
                g.replay()
                torch.cuda.synchronize()
                if outs0 is None:
                    outs0 = outs.clone()
                else:
                    r["same_bits_as_stretch0"] = bool(torch.equal(outs, outs0))
            del g
        except Exception as e:
            r["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        rec["graphs"][name] = r
        print(json.dumps({"c": c, "graph": name, "us": r.get("median_us"), "p10": r.get("p10_us"),
                          "p90": r.get("p90_us"), "same": r.get("same_bits_as_stretch0"),
                          "tl": r.get("timeline"), "launch": r.get("launch"), "e": r.get("error")}),
              flush=True)
    R["contexts"].append(rec)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--contexts", default="[4096, 32768]")
    ap.add_argument("--extra", action="store_true")
    a = ap.parse_args()
    global EXTRA
    EXTRA = a.extra
    R: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "contexts": []}
    R["bandwidth"] = M.bandwidth()
    print(json.dumps(R["bandwidth"]), flush=True)
    flush = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    for c in json.loads(a.contexts):
        run_context(R, c, flush, a.reps)
        torch.cuda.empty_cache()
    R["elapsed_s"] = round(time.time() - M.T0, 1)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "micro.json"), "w") as f:
        json.dump(R, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
