"""make_plan of this branch vs main's at every TP / batch / context (CPU).

    PYTHONPATH=$PWD:$PWD/kernels python3 docs/results/kimi_k3-r21/plan_check.py MAIN_LAUNCH_PY
"""
import dataclasses
import sys
import types

from kimi_k3.fused import launch as new

from baselines.vllm.kimi_k3.config import K3LayerConfig

mod = types.ModuleType("kimi_k3.fused.main_launch")
mod.__package__ = "kimi_k3.fused"
sys.modules[mod.__name__] = mod
with open(sys.argv[1]) as f:
    exec(compile(f.read(), "main_launch.py", "exec"), mod.__dict__)
n = same = 0
for tp in (1, 2, 8):
    cfg = K3LayerConfig.real(tp=tp)
    for B in range(1, 65):
        for c in (4096, 8192, 16384, 32768):
            a = dataclasses.asdict(new.make_plan(cfg, B, c, gpu=True, ATTN="flashinfer"))
            b = dataclasses.asdict(mod.make_plan(cfg, B, c, gpu=True, ATTN="flashinfer"))
            b.update({k: 0 for k in ("F_RBN", "T_PF", "T_SLEEP")})  # (fields main does not have: off)
            n += 1
            if a == b:
                same += 1
            else:
                d = {k: (b[k], a[k]) for k in a if a[k] != b[k]}
                assert tp == 1 and B == 1 and d == {"F_RBN": (0, 32)}, (tp, B, c, d)
print(f"{n} plans (TP 1/2/8, B 1..64, ctx 4k/8k/16k/32k): {same} equal to main's; the other {n - same} are"
      " TP-1 B1, where the one difference is F_RBN 0 -> 32 (the measured rbn32 override)")
