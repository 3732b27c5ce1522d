"""Compile every stock Triton kernel at real K3 shapes for sm_90 without a GPU, and report its resources.

    python -m kimi_k3.benchmarks.aot_stock [--tp 1] [--batch 1] [--context 4096]

Runs `stock.forward` on `meta` tensors with the Triton launch intercepted; each launch is compiled with
`triton.compile(..., target=GPUTarget("cuda", 90, 32))` (reusing
`kimi_k3.benchmarks.aot_fused.compile_launch`) and `ptxas -v` reports registers, spills and shared
memory. Costs no device time.

A developer tool, not shipping code. It swaps `JITFunction.run` (and the ops' `use_triton` switch) for one
`check` call, restored in a `finally`, for the reason given in `aot_fused.py`: run the real host code on meta
tensors without a GPU and capture each launch's arguments; fasttrack reports it as an FT120 warning.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any


def check(tp: int, batch: int, context: int) -> list[dict[str, Any]]:
    import torch
    from triton.runtime.jit import JITFunction

    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from baselines.vllm.kimi_k3.weights import K3LayerWeights, expected_shapes
    from kimi_k3 import stock
    from kimi_k3.benchmarks.aot_fused import compile_launch
    from kimi_k3.layer import DecodeBatch, DecodeMeta

    cfg = K3LayerConfig.real(tp=tp)
    meta = torch.device("meta")
    ws: dict[str, Any] = {
        n: torch.empty(
            s, dtype=torch.float32 if n == "e_score_correction_bias" else torch.bfloat16, device=meta
        )
        for n, s in expected_shapes(cfg).items()
    }
    w = K3LayerWeights(cfg=cfg, **ws)
    nb = context // cfg.block_size + 1
    b = DecodeBatch(
        hidden=torch.empty(batch, cfg.hidden, dtype=torch.bfloat16, device=meta),
        residual=torch.empty(batch, cfg.hidden, dtype=torch.bfloat16, device=meta),
        kv_cache=torch.empty(batch * nb, cfg.block_size, cfg.kv_cache_dim, dtype=torch.bfloat16, device=meta),
        block_table=torch.empty(batch, nb, dtype=torch.int32, device=meta),
        seq_lens=torch.empty(batch, dtype=torch.int32, device=meta),
        meta=DecodeMeta(batch=batch, max_context=context, tp=tp),
    )
    out: list[dict[str, Any]] = []
    orig_run = JITFunction.run

    def fake_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        r = compile_launch(self, args, kwargs)
        r["grid"] = grid
        out.append(r)

    mods = [
        importlib.import_module(f"baselines.vllm.kimi_k3.stock_ops.{m}")
        for m in ("norms", "activation", "mla_decode", "moe")
    ]
    saved = [m.use_triton for m in mods]
    JITFunction.run = fake_run
    for m in mods:
        setattr(m, "use_triton", lambda t: True)  # noqa: B010
    try:
        stock.forward(cfg, w, b)
    finally:
        JITFunction.run = orig_run
        for m, s in zip(mods, saved, strict=True):
            setattr(m, "use_triton", s)  # noqa: B010
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=4096)
    a = ap.parse_args()
    for r in check(a.tp, a.batch, a.context):
        print(
            f"{r['kernel']:<32} grid={r['grid']!s:<16} warps={r['num_warps']} regs={r['regs']:>3} "
            f"spill={r['spill_bytes']:>5}B smem={r['smem'] // 1024:>4}KB pipelined={r['pipelined']}"
        )


if __name__ == "__main__":
    main()
