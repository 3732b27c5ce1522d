"""make_plan of this branch vs main's at every TP / batch / context (CPU), ATTN flashinfer and own.

    PYTHONPATH=$PWD:$PWD/kernels python3 docs/results/kimi_k3-r23b/plan_check.py MAIN_LAUNCH_PY
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
EXPECT = {
    1: {"F_RBN": (0, 16), "F_ST": (3, 4)},
    2: {"QB_ST": (4, 6)},
    8: {"A_BK": (128, 256), "A_ST": (4, 5)},
}
n = same = 0
diffs = set()
for tp in (1, 2, 8):
    cfg = K3LayerConfig.real(tp=tp)
    for B in range(1, 65):
        for c in (4096, 8192, 16384, 32768):
            for attn in ("flashinfer", "own"):
                for gpu in (True, False):
                    a = dataclasses.asdict(new.make_plan(cfg, B, c, gpu=gpu, ATTN=attn))
                    b = dataclasses.asdict(mod.make_plan(cfg, B, c, gpu=gpu, ATTN=attn))
                    n += 1
                    if a == b:
                        same += 1
                        continue
                    d = {k: (b[k], a[k]) for k in a if a[k] != b[k]}
                    assert tp == 8 and d == EXPECT.get(B), (tp, B, c, d)
                    diffs.add((tp, B))
tiny = 0
for tp in (1, 2):  # (the TP-8 branch of make_plan needs the real shapes: hidden >= 1024)
    cfg = K3LayerConfig.tiny(tp=tp)
    for B in range(1, 17):
        for gpu in (True, False):
            pa, pb = (m.make_plan(cfg, B, 256, gpu=gpu, ATTN="own") for m in (new, mod))
            assert dataclasses.asdict(pa) == dataclasses.asdict(pb), (tp, B)
            tiny += 1
print(f"{n} real-shape plans (TP 1/2/8, B 1..64, ctx 4k/8k/16k/32k, ATTN flashinfer/own, gpu True/False):"
      f" {same} equal to main's; the other {n - same} are TP-8 at B {sorted(b for _, b in diffs)},"
      " each differing"
      f" exactly by {EXPECT}; {tiny} tiny-shape plans equal")
