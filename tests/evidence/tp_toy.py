"""A toy tensor-parallel contribution for the torchrun tests on CPU (gloo), built on `collect_toy`'s toy.

Its benchmark is a row-parallel ``relu(x @ W + b)``: at tp = n each rank holds 1/n of W's rows (the K
dimension) and the matching columns of x, computes its partial product and all-reduces it over the default
process group the bench worker initialised (gloo on the CPU backend). ``stock`` adds the bias after the
all-reduce; ``fused`` folds ``b / n`` into an ``addmm`` before it (a different op order, the same result). At
tp = 1 the same case runs without a process group. Environment variables make one rank misbehave at the
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


def _group():
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


class RowParallelCase:
    def __init__(self, tp, m, k, n):
        self.dist = _group() if tp > 1 else None
        if tp > 1 and self.dist is None:
            raise RuntimeError(f"tp={tp} but no default process group is initialised")
        self.rank = self.dist.get_rank() if self.dist else 0
        self.world = self.dist.get_world_size() if self.dist else 1
        if self.world != tp:
            raise RuntimeError(f"tp={tp} but the process group has {self.world} rank(s)")
        shard = k // self.world
        self.lo, self.hi = self.rank * shard, (self.rank + 1) * shard
        gen = torch.Generator().manual_seed(1234)  # the same full weight on every rank; each keeps its rows
        self.weight = (torch.randn(k, n, generator=gen) / k**0.5)[self.lo:self.hi].contiguous()
        self.bias = torch.randn(n, generator=gen)
        self.m, self.k, self.n = m, k, n
        self.static_inputs = {"x": torch.zeros(m, k)}
        self.variants = {"stock": self.stock, "fused": self.fused}
        self.tolerance = (1e-4, 1e-4)
        self.layers = 1
        self.wrong_here = (os.environ.get("TP_TOY_WRONG_ON_RANK") == str(self.rank)
                           and os.environ.get("TP_TOY_BAD_BATCH", str(m)) == str(m))

    def make_inputs(self, seed):
        gen = torch.Generator().manual_seed(seed)
        return {"x": torch.randn(self.m, self.k, generator=gen)}

    def load_inputs(self, fresh):
        self.static_inputs["x"].copy_(fresh["x"])

    def bytes_moved(self, variant):
        return float(4 * (self.m * (self.hi - self.lo) + self.weight.numel() + self.n + self.m * self.n))

    def _reduce(self, y):
        if self.dist is not None:
            self.dist.all_reduce(y)
        return y

    def stock(self, inputs):
        y = self._reduce(inputs["x"][:, self.lo:self.hi] @ self.weight)
        return torch.relu(y + self.bias)

    def fused(self, inputs):
        y = torch.addmm(self.bias / self.world, inputs["x"][:, self.lo:self.hi], self.weight)
        y = self._reduce(y).clamp_min_(0)
        return y + 1.0 if self.wrong_here else y


def benchmark_case(point):
    return RowParallelCase(tp=int(point["tp"]), m=point["batch"], k=point["context"], n=8)
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
    manifest.write_text(manifest.read_text(encoding="utf-8").replace("tp = [1]", f"tp = {tp}"),
                        encoding="utf-8")
    (toy / "bench.py").write_text(BENCH, encoding="utf-8")
    (toy / "tests" / "test_toy.py").write_text(TESTS, encoding="utf-8")
    return toy
