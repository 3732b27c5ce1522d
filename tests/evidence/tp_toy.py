"""A toy tensor-parallel contribution for the torchrun tests on CPU (gloo), built on `collect_toy`'s toy.

Its benchmark is the engine's row-parallel ``relu(x @ W + b)`` (baselines/selftest): at tp = n each rank
holds 1/n of W's rows (the K dimension) and the matching columns of x, computes its partial product and
all-reduces it over the default process group the bench worker initialised (gloo on the CPU backend). The
engine's stock adds the bias after the all-reduce; the toy's ``fused`` folds ``b / n`` into an ``addmm``
before it (a different op order, the same result). At tp = 1 the same case runs without a process group.
Environment variables make one rank misbehave at the
points of one batch size (TP_TOY_BAD_BATCH; every batch when unset): TP_TOY_WRONG_ON_RANK (``fused`` is off
by 1 on that rank only, after the all-reduce) and TP_TOY_TEST_FAIL_ON_RANK (the kernel test records an error
above its tolerance on that rank only).
"""

from __future__ import annotations

from pathlib import Path

from collect_toy import make_toy

BENCH = '''\
import os

import torch


def candidates(baseline, point):
    """The row-parallel candidate on the engine baseline's shard: b / n folded into an addmm before the
    all-reduce (a different op order, the same result)."""
    s = baseline.state
    wrong = (os.environ.get("TP_TOY_WRONG_ON_RANK") == str(s.rank)
             and os.environ.get("TP_TOY_BAD_BATCH", str(point["batch"])) == str(point["batch"]))

    def fused(inputs):
        y = torch.addmm(s.bias / s.world, inputs["x"][:, s.lo:s.hi], s.weight)
        y = s.reduce(y).clamp_min_(0)
        return y + 1.0 if wrong else y

    return {"fused": fused}
'''

TESTS = '''\
import os

import torch


def _group(tp):
    if tp == 1:
        return None
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo")  # from torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT)
    assert dist.get_world_size() == tp
    return dist


def test_all_reduce_sums_every_rank(envelope_point, fasttrack_record):
    dist = _group(envelope_point["tp"])
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist else (0, 1)
    x = torch.full((envelope_point["batch"],), float(rank + 1))
    if dist:
        dist.all_reduce(x)
    err = float((x - world * (world + 1) / 2).abs().max())
    batch = str(envelope_point["batch"])
    if (os.environ.get("TP_TOY_TEST_FAIL_ON_RANK") == str(rank)
            and os.environ.get("TP_TOY_BAD_BATCH", batch) == batch):
        err += 1.0
    fasttrack_record(max_error=err, tolerance=1e-6)


def test_not_parametrized():
    assert torch.ones(1).item() == 1.0
'''


def make_tp_toy(root: Path, tp: str = "[1, 2]") -> Path:
    """`collect_toy`'s toy (manifest and module `toy`) with the row-parallel benchmark and tests at `tp`."""
    toy = make_toy(root)
    manifest = toy / "fasttrack.toml"
    text = manifest.read_text(encoding="utf-8").replace("tp = [1]", f"tp = {tp}")
    text = text.replace("test_toy.py::test_fused_matches_stock",
                        "test_toy.py::test_all_reduce_sums_every_rank")
    manifest.write_text(text, encoding="utf-8")
    (toy / "bench.py").write_text(BENCH, encoding="utf-8")
    (toy / "tests" / "test_toy.py").write_text(TESTS, encoding="utf-8")
    return toy
