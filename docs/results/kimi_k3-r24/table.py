"""Markdown tables from table/results.json and sweep2/results.json (python3 table.py > tables.md)."""
import json

T = json.load(open("table/results.json"))
S = json.load(open("sweep2/results.json"))
bw = T["bandwidth"]
print(f"Bandwidth measured in the table run: read {bw['read_TBps']:.2f} TB/s, copy {bw['copy_TBps']:.2f} TB/s.\n")
print("| TP | B | ctx | stock us (again) | compile us | fused us | fused/stock | kernels stock / fused | GB moved | "
      "TB/s stock / fused | % of read BW fused | max abs err vs fp32 stock / fused | bf16 cap | fused bit-repeatable |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for p in sorted(T["points"], key=lambda p: (p["tp"], p["batch"], p["context"], "compile" in p)):
    s, f = p["stock"], p["fused"]
    c = p.get("compile", {})
    ct = f"{c['time']['median_us']:.0f}" if "time" in c else ""
    pct = 100 * f["TBps"] / bw["read_TBps"]
    print(f"| {p['tp']}{' shard' if p['shard'] else ''} | {p['batch']} | {p['context'] // 1024}k | "
          f"{s['time']['median_us']:.0f} ({s['time_again']['median_us']:.0f}) | {ct} | {f['time']['median_us']:.0f} | "
          f"**{p['speedup']:.3f}x** | {s['kernels']} / {f['kernels']} | {p['bytes_moved'] / 1e9:.3f} | "
          f"{s['TBps']:.2f} / {f['TBps']:.2f} | {pct:.0f} % | {s['max_abs_error']:.4f} / {f['max_abs_error']:.4f} | "
          f"{'yes' if s['pass_bf16_cap'] and f['pass_bf16_cap'] else 'NO'} | "
          f"{ {True: 'yes', False: 'NO', None: ''}[f.get('bit_repeatable')] } |")
print("\nTP-8 shard plan sweep (`../kimi_k3-r23b/sweep2.json`): fused us per variant, stock us first\n")
print("| point | stock us | " + " | ".join(["new", "old", "candidate", "new2", "old2"]) + " |")
print("|---|---|---|---|---|---|---|")
for r in S["sweep"]:
    v = r["variants"]
    names = list(v)
    cand = [n for n in names if n not in ("new", "old", "new2", "old2")][0]
    cells = [f"{v[n]['median_us']:.1f}" for n in ("new", "old")] + [f"{cand}: {v[cand]['median_us']:.1f}"] + \
        [f"{v[n]['median_us']:.1f}" for n in ("new2", "old2")]
    print(f"| TP8 shard B{r['batch']}/{r['context'] // 1024}k | {r['stock_us']:.1f} | " + " | ".join(cells) + " |")
