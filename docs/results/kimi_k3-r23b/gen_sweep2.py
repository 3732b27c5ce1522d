"""Writes sweep2.json for the code of this branch (its defaults = the new plan): "new" = {} (the defaults),
"old" = the overrides that restore main's TP-8 plan at that batch (checked on the CPU: see plan_check.py),
both repeated, plus one candidate a point. Run: python3 gen_sweep2.py"""
import json

O1 = {"F_RBN": 0, "F_ST": 3}
O2 = {"QB_ST": 4}
O8 = {"A_BK": 128, "A_ST": 4}
out = {
    "1,4096,8": {"new": {}, "old": O1, "new_cn32": {"QB_CN": 32}, "new2": {}, "old2": O1},
    "1,32768,8": {"new": {}, "old": O1, "new_cn32": {"QB_CN": 32}, "new2": {}, "old2": O1},
    "8,4096,8": {"new": {}, "old": O8, "new_rbn16": {"F_RBN": 16}, "new2": {}, "old2": O8},
    "2,4096,8": {"new": {}, "old": O2, "new_rbn16st4": {"F_RBN": 16, "F_ST": 4}, "new2": {}, "old2": O2},
}
with open("sweep2.json", "w") as f:
    json.dump(out, f, indent=1)
print(sum(len(v) for v in out.values()), "variants")
