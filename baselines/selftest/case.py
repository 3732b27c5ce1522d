"""`baseline_case(point)`: the self-test baseline (the package docstring; docs/baseline-contract.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

N_OUT = 8


@dataclass
class MatmulReluState:
    """What a candidate builds on: this rank's weight rows, the bias, the rank's slice and its group."""

    weight: Any  # [k / world, n] this rank's rows of W
    bias: Any  # [n]
    lo: int
    hi: int
    world: int
    rank: int
    dist: Any  # torch.distributed at tp > 1, else None
    device: Any
    dtype: Any
    # Derived forms computed once from the weights (stock's own `bias_row`; a candidate may add its own keys,
    # as a real engine's weights cache lets it; replacing stock's is tampering).
    derived: dict[str, Any] = field(default_factory=dict)

    def cached(self, name: str, fn: Any) -> Any:
        if name not in self.derived:
            self.derived[name] = fn()
        return self.derived[name]

    def reduce(self, y: Any) -> Any:
        if self.dist is not None:
            self.dist.all_reduce(y)
        return y


@dataclass
class MatmulReluBaseline:
    state: MatmulReluState
    m: int
    k: int
    dtype: str
    layers: int = 1
    static_inputs: dict[str, Any] = field(default_factory=dict)
    extra_baselines: dict[str, Any] = field(default_factory=dict)
    stages: dict[str, list[str]] = field(default_factory=dict)

    def make_inputs(self, seed: int) -> dict[str, Any]:
        import torch

        gen = torch.Generator(device="cpu").manual_seed(int(seed))
        x = torch.randn(self.m, self.k, generator=gen)
        return {"x": x.to(self.state.device, self.state.dtype)}

    def load_inputs(self, fresh: dict[str, Any]) -> None:
        self.static_inputs["x"].copy_(fresh["x"])

    def bytes_moved(self) -> float:
        s = self.state
        size = self.static_inputs["x"].element_size()
        return float(size * (self.m * (s.hi - s.lo) + s.weight.numel() + s.bias.numel() + self.m * N_OUT))

    def stock(self, inputs: dict[str, Any]) -> Any:
        import torch

        s = self.state
        y = s.reduce(inputs["x"][:, s.lo:s.hi] @ s.weight)
        return torch.relu(y + s.cached("bias_row", lambda: s.bias.view(1, -1)))

    def oracle(self, inputs: dict[str, Any]) -> Any:
        import torch

        s = self.state
        x = inputs["x"][:, s.lo:s.hi].double()
        y = x @ s.weight.double()
        if s.dist is not None:
            s.dist.all_reduce(y)
        return torch.relu(y + s.bias.double()).to(s.dtype)


def baseline_case(point: dict[str, Any]) -> MatmulReluBaseline | None:
    """The baseline at `point` (`batch` rows, `context` as the inner dimension, `dtype` float32 or
    bfloat16); None for another dtype. Runs on CUDA when present, else on CPU."""
    import torch

    dtype_name = str(point.get("dtype", "float32"))
    if dtype_name not in ("float32", "bfloat16"):
        return None
    tp = int(point.get("tp", 1))
    dist: Any = None
    rank, world = 0, 1
    if tp > 1:
        import torch.distributed

        if not torch.distributed.is_initialized() or torch.distributed.get_world_size() != tp:
            raise RuntimeError(f"tp={tp} needs {tp} processes with the default process group initialised")
        dist = torch.distributed
        rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else \
        torch.device("cpu")
    dtype = getattr(torch, dtype_name)
    m, k = int(point["batch"]), int(point["context"])
    shard = k // world
    lo, hi = rank * shard, (rank + 1) * shard
    gen = torch.Generator(device="cpu").manual_seed(1234)  # the same full W on every rank
    weight = (torch.randn(k, N_OUT, generator=gen) / k**0.5)[lo:hi].contiguous().to(device, dtype)
    bias = torch.randn(N_OUT, generator=gen).to(device, dtype)
    state = MatmulReluState(weight=weight, bias=bias, lo=lo, hi=hi, world=world, rank=rank, dist=dist,
                            device=device, dtype=dtype)
    case = MatmulReluBaseline(state=state, m=m, k=k, dtype=dtype_name)
    case.static_inputs = {"x": torch.zeros(m, k, device=device, dtype=dtype)}
    case.stages = {"gemm": ["*gemm*", "*addmm*", "*mm*"]}
    return case
