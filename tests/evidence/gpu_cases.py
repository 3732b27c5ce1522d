"""Cases for the GPU tests of the timing protocol (helpers, not tests; imported by test_*_gpu.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def _affine_relu(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x * 2.0 + 1.0, 0.0), mask=mask)


def fused_affine_relu(x: Any) -> Any:
    out = torch.empty_like(x)
    n = x.numel()
    _affine_relu[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096)
    return out


class AffineReluCase:
    """relu(2x + 1) applied `layers` times: stock in 3 torch kernels per layer, fused in 1 Triton kernel."""

    def __init__(self, n: int = 1 << 24, layers: int = 1) -> None:
        self.n = n
        self.layers = layers
        self.static_inputs = {"x": torch.zeros(n, device="cuda")}
        self.variants = {"stock": self.stock, "fused": self.fused}
        self.tolerance = (1e-5, 1e-6)

    def make_inputs(self, seed: int) -> Any:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        return {"x": torch.randn(self.n, generator=gen, device="cuda")}

    def load_inputs(self, fresh: Any) -> None:
        self.static_inputs["x"].copy_(fresh["x"])

    def bytes_moved(self, variant: str) -> float:
        per_pass = 2 * 4 * self.n  # read and write fp32
        return float(per_pass * self.layers * (3 if variant == "stock" else 1))

    def stock(self, inputs: Any) -> Any:
        y = inputs["x"]
        for _ in range(self.layers):
            y = torch.relu(y * 2.0 + 1.0)
        return y

    def fused(self, inputs: Any) -> Any:
        y = inputs["x"]
        for _ in range(self.layers):
            y = fused_affine_relu(y)
        return y


def export(name: str, data: dict[str, Any]) -> None:
    """Add `data` under `name` to $FASTTRACK_GPU_OUT/gpu_numbers.json (one file: the GPU box returns few)."""
    out = os.environ.get("FASTTRACK_GPU_OUT")
    if not out:
        return
    path = Path(out) / "gpu_numbers.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    merged = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    merged[name] = data
    path.write_text(json.dumps(merged, indent=1, sort_keys=True, default=str), encoding="utf-8")
