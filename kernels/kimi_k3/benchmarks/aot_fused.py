"""Compile every fused kernel of a plan for sm_90 on a machine without a GPU and report its resources.

    python -m kimi_k3.benchmarks.aot_fused --tp 1 --batch 1 [--context 4096] [--override KEY=VALUE ...]

Runs `forward_planned` on `meta` tensors (real shapes, no memory), intercepts each launch, compiles it with
`triton.compile(..., target=GPUTarget("cuda", 90, 32))` using the same argument specialisation the JIT would
(16-byte aligned pointers, ints divisible by 16), then runs the bundled `ptxas -v` on the PTX. Prints
registers, spills, shared memory and whether the K loops were software-pipelined (cp.async in the IR).
Costs no device time; catches shared-memory overflows and register spills before a GPU run.

A developer tool, not shipping code (it lived in `fused/` before; it moved here so no shipping module swaps
Triton internals). Why it swaps `JITFunction.run` for the duration of one `check` call: the launches must go
through the real host code (`launch.forward_planned`, so the argument lists and constexprs are exactly the
ones the GPU sees), but on `meta` tensors with no GPU present, where launching is impossible; Triton has no
public hook that hands back a launch's bound arguments without running it. The original is restored in a
`finally`. fasttrack reports the assignment as an FT120 warning (a benchmark file no shipping file imports).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from typing import Any

_DT = {
    "torch.bfloat16": "bf16",
    "torch.float32": "fp32",
    "torch.int32": "i32",
    "torch.int64": "i64",
    "torch.float16": "fp16",
}


def _ptxas(ptx: str) -> str:
    import triton

    exe = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
        path = f.name
    try:
        r = subprocess.run(
            [exe, "-arch=sm_90a", "-v", path, "-o", os.devnull], capture_output=True, text=True
        )
    finally:
        os.unlink(path)
    return r.stderr


def compile_launch(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = [p.name for p in fn.params]
    const_names = {p.name for p in fn.params if p.is_constexpr}
    values = dict(zip(names, args, strict=False))
    opts = {k: kwargs[k] for k in ("num_warps", "num_stages", "launch_pdl") if k in kwargs}
    values.update({k: v for k, v in kwargs.items() if k not in opts})
    sig: dict[str, str] = {}
    constexprs: dict[tuple[int, ...] | str, Any] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    for i, n in enumerate(names):
        v = values[n] if n in values else fn.params[i].default
        if v is None:
            sig[n] = "constexpr"
            constexprs[n] = None
            continue
        if n in const_names:
            sig[n] = "constexpr"
            constexprs[n] = v
        elif isinstance(v, torch.Tensor):
            sig[n] = "*" + _DT[str(v.dtype)]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, bool):
            sig[n] = "i1"
        elif isinstance(v, int):
            sig[n] = "i32"
            if v % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, float):
            sig[n] = "fp32"
        else:
            raise TypeError(f"{fn.__name__}: argument {n} of type {type(v)}")
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
    info = _ptxas(c.asm["ptx"])
    regs = spill = -1
    for line in info.splitlines():
        if "Used" in line and "registers" in line:
            regs = int(line.split("Used")[1].split("registers")[0])
        if "spill stores" in line:
            spill = int(line.split("bytes spill stores")[0].split(",")[-1])
    return {
        "kernel": fn.__name__,
        "regs": regs,
        "spill_bytes": spill,
        "smem": int(c.metadata.shared),
        "num_warps": int(c.metadata.num_warps),
        "pipelined": "async_copy" in c.asm["ttgir"] or "async_tma" in c.asm["ttgir"],
        "ptx": c.asm["ptx"],
    }


def check(tp: int, batch: int, context: int, override: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    import torch
    from triton.runtime.jit import JITFunction

    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from baselines.vllm.kimi_k3.weights import K3LayerWeights, expected_shapes
    from kimi_k3.fused import launch
    from kimi_k3.layer import DecodeBatch, DecodeMeta, Workspace

    cfg = K3LayerConfig.real(tp=tp)
    meta = torch.device("meta")
    ws = {}
    for name, shape in expected_shapes(cfg).items():
        dt = torch.float32 if name == "e_score_correction_bias" else torch.bfloat16
        ws[name] = torch.empty(shape, dtype=dt, device=meta)
    w = K3LayerWeights(cfg=cfg, **ws)
    nblocks = batch * (context // cfg.block_size + 2)
    b = DecodeBatch(
        hidden=torch.empty(batch, cfg.hidden, dtype=torch.bfloat16, device=meta),
        residual=torch.empty(batch, cfg.hidden, dtype=torch.bfloat16, device=meta),
        kv_cache=torch.empty(nblocks, cfg.block_size, cfg.kv_cache_dim, dtype=torch.bfloat16, device=meta),
        block_table=torch.empty(batch, context // cfg.block_size + 2, dtype=torch.int32, device=meta),
        seq_lens=torch.empty(batch, dtype=torch.int32, device=meta),
        meta=DecodeMeta(batch=batch, max_context=context),
        workspace=Workspace(),
    )
    plan = launch.make_plan(cfg, batch, context, gpu=True, **(override or {}))
    out: list[dict[str, Any]] = []
    orig_run = JITFunction.run

    def fake_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        r = compile_launch(self, args, kwargs)
        r["grid"] = grid
        out.append(r)

    # intercept launches for this call only (see the module docstring for why); restored below
    JITFunction.run = fake_run  # type: ignore[method-assign]
    try:
        launch.forward_planned(cfg, w, b, plan)
    finally:
        JITFunction.run = orig_run  # type: ignore[method-assign]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--override", nargs="*", default=[])
    a = ap.parse_args()
    ov = {k: int(v) for k, v in (s.split("=") for s in a.override)}
    for r in check(a.tp, a.batch, a.context, ov):
        print(
            f"{r['kernel']:<20} grid={r['grid']!s:<10} warps={r['num_warps']} regs={r['regs']:>3} "
            f"spill={r['spill_bytes']:>5}B smem={r['smem'] // 1024:>4}KB pipelined={r['pipelined']}"
        )


if __name__ == "__main__":
    main()
