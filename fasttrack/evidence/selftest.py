"""A small honest BenchmarkCase the protocol's own tests (and its GPU smoke check) measure.

``relu(x @ w + b)`` on a fixed weight: ``stock`` in three torch ops, ``fused`` as ``addmm`` plus an in-place
clamp. It follows the contract in `fasttrack.evidence.contract` and runs on CPU or CUDA. The anti-gaming tests
derive deliberately cheating variants from it.
"""

from __future__ import annotations

from typing import Any


class MatmulReluCase:
    """relu(x @ w + b) with x fresh per iteration; w and b fixed (seeded) like a layer's weights."""

    def __init__(self, device: str = "cpu", m: int = 8, k: int = 64, n: int = 32, dtype: str = "float32",
                 layers: int = 1) -> None:
        import torch

        self._torch = torch
        self.device = torch.device(device)
        self.dtype = getattr(torch, dtype)
        self.m, self.k, self.n = m, k, n
        gen = torch.Generator(device="cpu").manual_seed(1234)
        self.weight = (torch.randn(k, n, generator=gen) / k**0.5).to(self.device, self.dtype)
        self.bias = torch.randn(n, generator=gen).to(self.device, self.dtype)
        self.static_inputs: dict[str, Any] = {"x": torch.zeros(m, k, device=self.device, dtype=self.dtype)}
        self.variants: dict[str, Any] = {"stock": self.stock, "fused": self.fused}
        self.tolerance = (1e-4, 1e-4) if self.dtype == torch.float32 else (2e-2, 2e-2)
        self.layers = layers

    def make_inputs(self, seed: int) -> dict[str, Any]:
        gen = self._torch.Generator(device="cpu").manual_seed(seed)
        x = self._torch.randn(self.m, self.k, generator=gen)
        return {"x": x.to(self.device, self.dtype)}

    def load_inputs(self, fresh: dict[str, Any]) -> None:
        self.static_inputs["x"].copy_(fresh["x"])

    def bytes_moved(self, variant: str) -> float:
        size = self.static_inputs["x"].element_size()
        return float(size * (self.m * self.k + self.k * self.n + self.n + self.m * self.n))

    def stock(self, inputs: dict[str, Any]) -> Any:
        y = inputs["x"] @ self.weight
        y = y + self.bias
        return self._torch.relu(y)

    def fused(self, inputs: dict[str, Any]) -> Any:
        return self._torch.addmm(self.bias, inputs["x"], self.weight).clamp_min_(0)
