"""Markdown tables from run1/results.json and run2/results.json (python3 table.py > tables.md)."""
import json

R1 = json.load(open("run1/results.json"))
R2 = json.load(open("run2/results.json"))
pts = {}
for R, tag in ((R1, "run1"), (R2, "run2")):
    for p in R["points"]:
        key = (p["tp"], p["batch"], p["context"], "compile" in p)
        pts.setdefault(key, []).append((tag, p))


def row(p, tag):
    s, f = p["stock"], p["fused"]
    c = p.get("compile", {})
    ct = f"{c['time']['median_us']:.0f}" if "time" in c else ""
    return (f"| {p['tp']}{' shard' if p['shard'] else ''} | {p['batch']} | {p['context'] // 1024}k | "
            f"{s['time']['median_us']:.0f} ({s['time_again']['median_us']:.0f}) | {ct} | {f['time']['median_us']:.0f} | "
            f"**{p['speedup']:.3f}x** | {s['kernels']} / {f['kernels']} | {p['bytes_moved'] / 1e9:.3f} | "
            f"{s['TBps']:.2f} / {f['TBps']:.2f} | {s['max_abs_error']:.4f} / {f['max_abs_error']:.4f} | "
            f"{'yes' if s['pass_bf16_cap'] and f['pass_bf16_cap'] else 'NO'} | "
            f"{ {True: 'yes', False: 'NO', None: ''}[f.get('bit_repeatable')] } | {tag} |")


print("| TP | B | ctx | stock us (again) | compile us | fused us | fused/stock | kernels stock / fused | "
      "GB moved | TB/s stock / fused | max abs err vs fp32 stock / fused | bf16 cap | fused bit-repeatable | run |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for key in sorted(pts):
    for tag, p in pts[key]:
        print(row(p, tag))
print()
for sw in R2.get("sweep", []):
    print(f"Sweep B{sw['batch']} / {sw['context'] // 1024}k: stock {sw['stock_us']:.0f} us "
          f"(again {sw['stock_us_again']:.0f}); fused variants: " + "; ".join(
              f"{n} {v['median_us']:.0f} ({v['speedup']:.3f}x)" for n, v in sw["variants"].items() if "median_us" in v))
    print()
print(f"Bandwidth, run 1: copy {R1['bandwidth']['copy_TBps']:.2f} TB/s (read + write), Triton streaming read "
      f"{R1['bandwidth']['read_TBps']:.2f} TB/s; run 2: copy {R2['bandwidth']['copy_TBps']:.2f}, read "
      f"{R2['bandwidth']['read_TBps']:.2f}.")
