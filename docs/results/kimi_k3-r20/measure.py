"""Issue 13 / kernel20 development runs: `../kimi_k3-baseline/measure.py` (imported, unchanged: its points,
timing, oracle check, profile) plus plan sweeps at TP-8 shard points too.

`--sweep FILE`: {"B,C": {name: overrides}} (TP 1, as the baseline script) or {"B,C,8": {...}} (the TP-8
per-rank shard on one GPU, the shapes of `baseline_case({"tp": 8, "shard": True})`). Per sweep point: stock,
then the fused layer under each override, each against the fp32 oracle (graph outputs too), bit-repeatable
(two replays), bit-equal to the first variant or not, the per-kernel profile of one replay; stock again last.
Every plan (TP 1 and shard) is compiled first in parallel (`measure_fused.warm_keys`).

Run on the box (from the repo root, FlashInfer unpacked into /tmp/site):
  PYTHONPATH=/tmp/site:$PWD/kernels:$PWD python3 docs/results/kimi_k3-r20/measure.py --sweep S.json --tp1 '[]'
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import traceback
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
_BASE = os.path.join(HERE, "..", "kimi_k3-baseline", "measure.py")
_spec = importlib.util.spec_from_file_location("k3_measure", _BASE)
assert _spec is not None and _spec.loader is not None
M = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(M)

import torch  # noqa: E402


def _key(k: str) -> tuple[int, int, int]:
    f = [int(x) for x in k.split(",")]
    return (f[2] if len(f) > 2 else 1), f[0], f[1]


def run_variants(R: dict[str, Any], tp: int, b: int, c: int, variants: dict[str, dict[str, Any]],
                 flush: torch.Tensor, reps: int) -> None:
    from kimi_k3 import fused

    from baselines.vllm.kimi_k3.case import baseline_case
    from baselines.vllm.kimi_k3.decode import Workspace

    point: dict[str, Any] = {"gpu": "NVIDIA H200", "tp": tp, "batch": b, "context": c, "dtype": "bfloat16"}
    if tp > 1:
        point["shard"] = True
    case = baseline_case(point)
    assert case is not None
    case.load_inputs(case.make_inputs(7))
    ref = case.oracle(case.static_inputs)
    st, inputs = case.state, case.static_inputs
    rec: dict[str, Any] = {"tp": tp, "batch": b, "context": c, "variants": {}}
    stock = case.stock
    g, _ = M.graphed(lambda: stock(inputs))
    rec["stock_us"] = M.time_graph(g, flush, reps)["median_us"]
    del g
    base_out: list[torch.Tensor] | None = None
    for name, ov in variants.items():
        v: dict[str, Any] = {"override": ov}
        try:
            ws = Workspace()
            plan = fused.make_plan(st.cfg, b, c, **ov)

            def fn(plan: Any = plan, ws: Any = ws) -> Any:
                return fused.forward_planned(st.cfg, st.weights, st.decode_batch(inputs, ws), plan)

            out = fn()
            torch.cuda.synchronize()
            v.update(M.errors(out, ref))
            g, outs = M.graphed(fn)
            v["median_us"] = M.time_graph(g, flush, reps)["median_us"]
            v["speedup"] = rec["stock_us"] / v["median_us"]
            g.replay()
            torch.cuda.synchronize()
            v["graph_vs_oracle"] = M.errors(outs, ref)
            first = [o.clone() for o in outs]
            flush.zero_()
            g.replay()
            torch.cuda.synchronize()
            v["bit_repeatable"] = all(torch.equal(x, y) for x, y in zip(first, outs, strict=True))
            if base_out is None:
                base_out = first
            else:
                v["same_bits_as_first"] = all(torch.equal(x, y) for x, y in zip(first, base_out, strict=True))
            v["profile"] = M.profile(g, flush)
            del g, outs
        except Exception as e:
            v["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        rec["variants"][name] = v
        print(json.dumps({"tp": tp, "b": b, "c": c, "variant": name, "us": v.get("median_us"),
                          "x": v.get("speedup"), "err": v.get("max_abs_error"),
                          "ok": v.get("graph_vs_oracle", {}).get("pass_bf16_cap"),
                          "rep": v.get("bit_repeatable"),
                          "same": v.get("same_bits_as_first"),
                          "k": {n[:12]: t for n, t in v.get("profile", [])}, "e": v.get("error")}),
              flush=True)
    g, _ = M.graphed(lambda: stock(inputs))
    rec["stock_us_again"] = M.time_graph(g, flush, reps)["median_us"]
    del g
    torch.cuda.empty_cache()
    R.setdefault("sweep", []).append(rec)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget", type=float, default=470.0)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--procs", type=int, default=15)
    ap.add_argument("--tp1", default="[]", help="JSON [[batch, context], ...]: TP-1 points after the sweeps")
    ap.add_argument("--tp8", default="[]", help="JSON [[batch, context], ...]: TP-8 shard points")
    ap.add_argument("--sweep", default="", help="JSON file {\"B,C[,TP]\": {name: overrides}}")
    ap.add_argument("--points-first", action="store_true", help="the points, then the sweeps")
    a = ap.parse_args()
    import triton
    from kimi_k3.benchmarks.measure_fused import SHARD, warm_keys

    R: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                         "triton": triton.__version__, "points": [], "errors": []}
    try:
        import flashinfer

        R["flashinfer"] = flashinfer.__version__
    except Exception as e:
        R["flashinfer"] = f"not importable: {e!r}"
    path = os.path.join(a.out, "results.json")

    def save() -> None:
        R["elapsed_s"] = round(time.time() - M.T0, 1)
        with open(path, "w") as f:
            json.dump(R, f, indent=1)

    tp1 = [tuple(x) for x in json.loads(a.tp1)]
    tp8 = [tuple(x) for x in json.loads(a.tp8)]
    sweep: dict[str, dict[str, dict[str, Any]]] = {}
    if a.sweep:
        with open(a.sweep) as f:
            sweep = json.load(f)

    def wkey(tp: int, b: int, c: int, ov: dict[str, Any]) -> tuple[int, int, int, str]:
        return (tp, b, c, json.dumps({**ov, SHARD: True} if tp > 1 else ov, sort_keys=True))

    keys = [wkey(1, b, c, {}) for b, c in tp1] + [wkey(8, b, c, {}) for b, c in tp8]
    keys += [wkey(*_key(k), ov) for k, vs in sweep.items() for ov in vs.values()]
    R["warm"] = warm_keys(keys, a.procs, timeout=240)
    print(json.dumps({"warm": R["warm"], "t": round(time.time() - M.T0)}), flush=True)
    R["bandwidth"] = M.bandwidth()
    print(json.dumps(R["bandwidth"]), flush=True)
    save()
    flush = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    def sweeps(share: float) -> None:
        for k, vs in sweep.items():
            if time.time() - M.T0 > a.budget * share:
                R["errors"].append(f"skipped sweep {k}: budget")
                continue
            try:
                run_variants(R, *_key(k), vs, flush, a.reps)
            except Exception as e:
                R["errors"].append(f"sweep {k}: {type(e).__name__}: {str(e)[:400]}")
                traceback.print_exc(limit=4)
            save()

    def points(share: float) -> None:
        for tp, pts in ((1, tp1), (8, tp8)):
            for b, c in pts:
                if time.time() - M.T0 > a.budget * share:
                    R["errors"].append(f"skipped tp{tp} b{b} c{c}: budget")
                    continue
                try:
                    M.run_point(R, tp, b, c, flush, a.reps)
                except Exception as e:
                    R["errors"].append(f"tp{tp} b{b} c{c}: {type(e).__name__}: {str(e)[:400]}")
                    traceback.print_exc(limit=4)
                save()

    if a.points_first:  # the sweeps then run with every point's weights resident, as the points did
        points(0.6)
        sweeps(0.9)
    else:
        sweeps(0.75)
        points(0.9)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
