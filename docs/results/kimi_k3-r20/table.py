"""Markdown tables of one run's results.json (python3 table.py run2/results.json): each sweep point's
variants with the per-stage profile of one replay, then the points (fused vs the engine baseline)."""

from __future__ import annotations

import json
import sys

STAGES = [("qkv_a_kernel", "qkv_a"), ("q_b_kernel", "q_b"), ("flashinfer", "FI"),
          ("attn_kernel", "W_UV+gate"), ("o_proj_kernel", "o_proj"), ("moe_front_kernel", "moe_front"),
          ("expert_up_kernel", "exp_up"),
          ("expert_down_kernel", "exp_down")]


def stages(profile: list[list[object]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, t in profile:
        n = str(name)
        key = next((s for k, s in STAGES if k in n.lower() or n.startswith(k)), n[:12])
        out[key] = out.get(key, 0.0) + float(t)  # type: ignore[arg-type]
    return out


def main(path: str) -> None:
    with open(path) as f:
        R = json.load(f)
    print(f"read {R['bandwidth']['read_TBps']:.2f} TB/s, copy {R['bandwidth']['copy_TBps']:.2f} TB/s; "
          f"elapsed {R['elapsed_s']} s; errors {R['errors']}\n")
    for s in R.get("sweep", []):
        tp = "1" if s["tp"] == 1 else f"{s['tp']} shard"
        print(f"### TP {tp}, B{s['batch']}, ctx {s['context']}: stock {s['stock_us']:.1f} us "
              f"(again {s['stock_us_again']:.1f})\n")
        print("| variant | overrides | us | vs base | oracle | bit-rep | = first | "
              + " | ".join(s2 for _, s2 in STAGES) + " |")
        print("|---" * (7 + len(STAGES)) + "|")
        base = s["variants"].get("base", {}).get("median_us")
        for n, v in s["variants"].items():
            if "error" in v:
                print(f"| {n} | {json.dumps(v['override'])} | error: {v['error'][:80]} |")
                continue
            k = stages(v["profile"])
            rel = f"{base / v['median_us']:.3f}x" if base else ""
            ov = json.dumps(v["override"], separators=(",", ":"))
            print(f"| {n} | `{ov}` | {v['median_us']:.1f} | {rel} | "
                  f"{v['graph_vs_oracle']['pass_bf16_cap']} | {v['bit_repeatable']} | "
                  f"{v.get('same_bits_as_first', '-')} | "
                  + " | ".join(f"{k.get(s2, 0):.1f}" for _, s2 in STAGES) + " |")
        print()
    if R.get("points"):
        print("### Points: fused (the defaults of the run's code) vs the engine baseline\n")
        print("| TP | B | ctx | stock us (again) | fused us | fused/stock | kernels | GB | fused TB/s | "
              "max abs err stock / fused | bf16 cap | bit-repeatable |")
        print("|---" * 12 + "|")
        for p in R["points"]:
            st, fu = p.get("stock", {}), p.get("fused", {})
            if "time" not in st or "time" not in fu:
                err = f"{st.get('error', '')} {fu.get('error', '')}"
                print(f"| {p['tp']} | {p['batch']} | {p['context']} | {err} |")
                continue
            tp = f"{p['tp']}{' shard' if p['shard'] else ''}"
            print(f"| {tp} | {p['batch']} | {p['context'] // 1024}k | "
                  f"{st['time']['median_us']:.0f} ({st['time_again']['median_us']:.0f}) | "
                  f"{fu['time']['median_us']:.0f} | **{p['speedup']:.3f}x** | "
                  f"{st['kernels']} / {fu['kernels']} | "
                  f"{p['bytes_moved'] / 1e9:.3f} | {fu['TBps']:.2f} | {st['max_abs_error']:.4f} / "
                  f"{fu['max_abs_error']:.4f} | {fu['graph_vs_oracle']['pass_bf16_cap']} | "
                  f"{fu.get('bit_repeatable', '')} |")


if __name__ == "__main__":
    main(sys.argv[1])
