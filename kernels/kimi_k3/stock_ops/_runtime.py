"""How a stock op runs here: its Triton kernel (CUDA, or CPU under TRITON_INTERPRET=1) or a torch fallback.

On CUDA every op goes through `torch.ops.kimi_k3_stock.*`, registered with `torch.library.triton_op` and
launching its kernels through `wrap_triton`, so `torch.compile` traces into the Triton kernels instead of
breaking the graph. On CPU with `TRITON_INTERPRET=1` the same kernels run under Triton's interpreter
(launched directly: the interpreter's kernels are not JITFunctions). On CPU without the interpreter the
ops fall back to torch equivalents (a convenience for CPU callers; the tests run the kernels).
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


def _patch_interpreter_index() -> None:
    """Triton 3.6's interpreter turns a scalar into a loop bound with `int(ndarray)`, but it holds scalars
    as shape-(1,) arrays, which numpy >= 2.x refuses to convert. Loop bounds loaded from memory (the split-KV
    ranges, as vLLM's kernel has them) then fail under TRITON_INTERPRET=1 only. Re-register `__index__`
    through the interpreter's own patch scope (so it is restored with the rest) to read the single element.
    """
    import numpy as np
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_kimi_k3_index_fix", False):
        return

    def patched(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    patched._kimi_k3_index_fix = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patched


def _patch_interpreter_bf16_dot() -> None:
    """Triton 3.6's interpreter stores bf16 as raw uint16 and `tl.dot` multiplies those integers. Widen bf16
    operands to fp32 first (exactly, by shifting the bits), so a bf16 `tl.dot` computes what it does on GPU
    up to accumulation order."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    original = builder.create_dot
    if getattr(original, "_kimi_k3_bf16_fix", False):
        return

    def widen(h: Any) -> Any:
        if h.dtype.scalar == tl.bfloat16 or h.dtype == tl.bfloat16:
            data = (h.data.astype(np.uint32) << 16).view(np.float32)
            return interpreter.TensorHandle(data, tl.float32)
        return h

    def create_dot(
        self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any
    ) -> Any:
        return original(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    create_dot._kimi_k3_bf16_fix = True  # type: ignore[attr-defined]
    builder.create_dot = create_dot


def _patch_interpreter_nested_calls() -> None:
    """Speed only: the interpreter re-patches `triton.language` (an `inspect.getmembers` walk, ~7 ms) on
    every call of a nested @jit function (`tl.cdiv`, `tl.sum`, `tl.sigmoid`, ... are such functions), although
    the enclosing launch has already patched it. Skip the walk when the function's language modules are
    already patched; behaviour is unchanged."""
    import inspect

    import triton.language as tl
    from triton.runtime import interpreter

    cls = interpreter.InterpretedFunction
    original = cls.__call__
    if getattr(original, "_kimi_k3_nested_fix", False):
        return

    def already_patched(fn: Any) -> bool:
        langs = [v for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core)]
        return bool(langs) and all(not tl.core.is_builtin(getattr(m, "load", None)) for m in langs)

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not already_patched(self.fn):
            return original(self, *args, **kwargs)
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise interpreter.InterpreterError(repr(e)) from e

    call._kimi_k3_nested_fix = True  # type: ignore[attr-defined]
    cls.__call__ = call


def _interpreter_like_gpu() -> None:
    """Speed: the interpreter checks every 32-bit integer add/mul for overflow (`sanitize_overflow`),
    which the CUDA backend only does in debug builds; it costs about a fifth of the interpreter's time.
    Index arithmetic that could overflow int32 uses int64 in these kernels (page numbers, expert offsets)."""
    import dataclasses

    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    builder.options = dataclasses.replace(builder.options, sanitize_overflow=False)


def _patch_interpreter_bf16_rounding() -> None:
    """Triton 3.6's interpreter converts fp32 -> bf16 by truncating the mantissa (round toward zero), where
    the GPU rounds to nearest even. Truncation biases every stored bf16 value toward zero (~0.2% per rounding,
    compounding through a layer to a few percent). Round to nearest even instead (NaN stays NaN)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    original = builder.cast_impl
    if getattr(original, "_kimi_k3_rne_fix", False):
        return

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            f = np.ascontiguousarray(src.data, dtype=np.float32)
            bits = f.view(np.uint32).astype(np.uint64)
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
            rounded = np.where(np.isnan(f), np.uint16(0x7FC0), rounded).astype(np.uint16)
            return interpreter.TensorHandle(rounded, dst_type.scalar)
        return original(self, src, dst_type)

    cast_impl._kimi_k3_rne_fix = True  # type: ignore[attr-defined]
    builder.cast_impl = cast_impl


if interpreting():
    _interpreter_like_gpu()
    _patch_interpreter_bf16_rounding()
    _patch_interpreter_index()
    _patch_interpreter_bf16_dot()
    _patch_interpreter_nested_calls()
