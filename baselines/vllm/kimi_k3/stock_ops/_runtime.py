"""How a stock op runs here: its Triton kernel (CUDA, or CPU under TRITON_INTERPRET=1) or a torch fallback.

On CUDA every op goes through `torch.ops.kimi_k3_stock.*`, registered with `torch.library.triton_op` and
launching its kernels through `wrap_triton`, so `torch.compile` traces into the Triton kernels instead of
breaking the graph. On CPU with `TRITON_INTERPRET=1` the same kernels run under Triton's interpreter
(launched directly: the interpreter's kernels are not JITFunctions). On CPU without the interpreter the
ops fall back to torch equivalents (a convenience for CPU callers; the tests run the kernels).

Nothing here changes Triton: the workarounds for Triton 3.6's CPU interpreter that the CPU tests need live
in the test tree (`kimi_k3/tests/_triton_interpreter.py`) and are applied by its conftest only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

LIB = "kimi_k3_stock"


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def use_triton(t: torch.Tensor) -> bool:
    """Run the Triton kernel for this tensor (else the torch fallback)."""
    return t.is_cuda or interpreting()


def launcher(kernel: Any, t: torch.Tensor) -> Any:
    """`wrap_triton(kernel)` on CUDA (traceable by torch.compile), the kernel itself elsewhere."""
    if t.is_cuda:
        from torch.library import wrap_triton

        return wrap_triton(kernel)
    return kernel


def register(name: str, mutates_args: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Any]:
    """Register a Triton-launching function as `torch.ops.kimi_k3_stock.<name>` (a triton_op)."""
    from torch.library import triton_op

    def deco(fn: Callable[..., Any]) -> Any:
        return triton_op(f"{LIB}::{name}", mutates_args=mutates_args)(fn)

    return deco


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())
