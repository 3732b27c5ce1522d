"""PTX instructions of the fused kernels a code fold touches, compiled for sm_90 without a GPU.

    cd kernels && python ../docs/results/kimi_k3-r21/ptx_check.py OUT.json [KERNEL ...]

For each plan below (TP 1, real shapes) the launches of `forward_planned` on meta tensors are intercepted
(`aot_fused.check`'s way); each launch of a named kernel is compiled with `aot_fused.compile_launch`, and its
PTX is reduced to its instructions (no `.loc` / `.file` debug lines, no comments, labels renumbered by first
use). Writes {case: sha256 of the instructions, ...} and the instruction texts beside it (OUT.ptx/...).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from typing import Any

CASES: dict[str, tuple[int, int, dict[str, Any]]] = {
    "B1-own": (1, 4096, {"ATTN": "own"}),
    "B1-fi": (1, 4096, {"ATTN": "flashinfer"}),
    "B1-fi-noqpack": (1, 4096, {"ATTN": "flashinfer", "QPACK": False}),
    "B64-own": (64, 4096, {"ATTN": "own"}),
    "B64-fi": (64, 4096, {"ATTN": "flashinfer"}),
    "B1-fi-omerge": (1, 4096, {"ATTN": "flashinfer", "OMERGE": True}),
    "B2-fi": (2, 4096, {"ATTN": "flashinfer"}),
    "B8-fi": (8, 4096, {"ATTN": "flashinfer"}),
    "B12-fi": (12, 32768, {"ATTN": "flashinfer"}),
}
if os.environ.get("K21_CASES"):  # a subset, by name
    CASES = {k: v for k, v in CASES.items() if k in os.environ["K21_CASES"].split(",")}


def instructions(ptx: str) -> str:
    out: list[str] = []
    labels: dict[str, str] = {}

    def lab(m: re.Match[str]) -> str:
        return labels.setdefault(m.group(0), f"$L{len(labels)}")

    for line in ptx.splitlines():
        s = line.split("//")[0].strip()
        if s.startswith(".section"):  # the DWARF sections follow the last function body
            break
        if not s or s.startswith((".loc", ".file", "$L__tmp", "$L__func_end", "$L__debug")):
            continue
        out.append(re.sub(r"\$L__\w+", lab, s))
    return "\n".join(out)


def main() -> None:
    import kimi_k3.benchmarks.aot_fused as aot
    from triton.runtime.jit import JITFunction

    dest, names = sys.argv[1], set(sys.argv[2:])
    res: dict[str, str] = {}
    os.makedirs(dest + ".ptx", exist_ok=True)
    orig = aot.compile_launch
    for case, (b, ctx, ov) in CASES.items():
        seen: list[dict[str, Any]] = []

        def filt(fn: Any, args: Any, kwargs: Any, _seen: list[dict[str, Any]] = seen) -> dict[str, Any]:
            if names and fn.__name__ not in names:
                return {"kernel": fn.__name__, "ptx": None}
            r = orig(fn, args, kwargs)
            _seen.append(r)
            return r

        aot.compile_launch = filt
        try:
            aot.check(1, b, ctx, ov)
        finally:
            aot.compile_launch = orig
        assert JITFunction.run is not None
        for i, r in enumerate(seen):
            key = f"{case}/{i}-{r['kernel']}"
            ins = instructions(r["ptx"])
            res[key] = hashlib.sha256(ins.encode()).hexdigest()[:16] + f" n={ins.count(chr(10))}"
            with open(os.path.join(dest + ".ptx", key.replace("/", "_") + ".ptx"), "w") as f:
                f.write(ins)
            print(key, res[key], flush=True)
    with open(dest, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
