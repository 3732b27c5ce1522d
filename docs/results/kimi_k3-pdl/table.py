"""Print the markdown tables of run3/results.json (python3 table.py)."""

import json
import os

R = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "run3", "results.json")))
rd = R["bandwidth"]["read_TBps"]
print(f"read {rd:.2f} TB/s, copy {R['bandwidth']['copy_TBps']:.2f} TB/s (same run)\n")
print("| TP | B | ctx | stock us (again) | fused us | fused/stock | kernels stock / fused | GB | TB/s stock / fused "
      "| fused % of read | max abs err stock / fused | bf16 cap | bit-repeatable |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for p in R["points"]:
    s, f = p["stock"], p["fused"]
    tp = "8 shard" if p["tp"] > 1 else "1"
    ctx = f"{p['context'] // 1024}k"
    rep = {True: "yes", False: "NO", None: ""}[f.get("bit_repeatable")]
    print(f"| {tp} | {p['batch']} | {ctx} | {s['time']['median_us']:.0f} ({s['time_again']['median_us']:.0f}) | "
          f"{f['time']['median_us']:.0f} | **{p['speedup']:.3f}x** | {s['kernels']} / {f['kernels']} | "
          f"{p['bytes_moved'] / 1e9:.3f} | {s['TBps']:.2f} / {f['TBps']:.2f} | {100 * f['TBps'] / rd:.0f} % | "
          f"{s['max_abs_error']:.4f} / {f['max_abs_error']:.4f} | "
          f"{'yes' if f['graph_vs_oracle']['pass_bf16_cap'] else 'NO'} | {rep} |")
print()
for sw in R["sweep"]:
    vs = "; ".join(f"{n} {v['median_us']:.0f} ({v['speedup']:.3f}x, {len(v['profile'])} kernels)"
                   for n, v in sw["variants"].items() if "median_us" in v)
    print(f"Sweep B{sw['batch']} / 4k: stock {sw['stock_us']:.0f} us (again {sw['stock_us_again']:.0f}); {vs}\n")
