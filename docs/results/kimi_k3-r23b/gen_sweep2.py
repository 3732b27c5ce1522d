"""Writes sweep2.json: the run-1 winners combined, old vs new side by side, repeated. Run: python3 gen_sweep2.py"""
import json

N1 = {"F_RBN": 16, "F_ST": 4}
N2 = {"QB_ST": 6, "F_RBN": 16, "F_ST": 4}
N8 = {"A_BK": 256, "A_ST": 5}
# "old" = {} is main's plan; the combos are overrides on top of it
b1 = {"old": {}, "new": N1, "new_cn32": {**N1, "QB_CN": 32}, "old2": {}, "new2": N1}
out = {
    "1,4096,8": b1,
    "1,32768,8": b1,
    "8,4096,8": {"old": {}, "new": N8, "new_rbn16": {**N8, "F_RBN": 16}, "old2": {}, "new2": N8},
    "2,4096,8": {"old": {}, "new": N2, "new_a5": {**N2, "A_ST": 5}, "old2": {}, "new2": N2},
}
with open("sweep2.json", "w") as f:
    json.dump(out, f, indent=1)
print(sum(len(v) for v in out.values()), "variants")
