"""Test-only workarounds for Triton 3.6's CPU interpreter (`TRITON_INTERPRET=1`), applied by `conftest.py`.

Why this exists, and why it is here: CI has no GPU, so the CPU tests run every Triton kernel of both paths
(stock and fused) under Triton's interpreter. Triton 3.6's interpreter has three bugs that make correct
kernels compute wrong values or fail, and two costs that make the suite several times slower than it needs
to be. Fixing them means assigning to attributes of `triton.runtime.interpreter` (a monkeypatch), which no
shipping module may do: fasttrack's FT120 rejects it there, rightly, because the patch would change Triton
for every model in the engine. So the patches live in the test tree only, are applied by
`kernels/kimi_k3/tests/conftest.py` for the duration of the kimi_k3 test session and only when
`TRITON_INTERPRET=1`, and are undone at its end. No shipping module imports this file. Compiled (GPU)
kernels never go through the interpreter and are untouched either way. fasttrack reports the assignments
below as FT120 warnings (an escape in a test file no shipping file imports): that is the honest label.

Correctness fixes:
1. bf16 `tl.dot`: the interpreter stores bf16 as raw uint16 bits and `create_dot` multiplies those integers
   (a bf16 dot returns ~1e10 garbage). Widen bf16 operands to fp32 first (exact: shift the bits).
2. fp32 -> bf16 casts: the interpreter truncates the mantissa (round toward zero) where the GPU rounds to
   nearest even; truncation biases every stored bf16 value toward zero (~0.2% a rounding, a few percent
   through a layer). Round to nearest even instead (NaN stays NaN).
3. Loop bounds from tensors: the interpreter turns a scalar into a Python index with `int(ndarray)`, but its
   scalars are shape-(1,) arrays, which numpy >= 2.4 refuses to convert, so any `range` whose bound comes
   from `tl.load` / `tl.program_id` (the split-KV ranges, the touched-expert loops) fails. Take the single
   element instead.

Speed only (behaviour unchanged):
4. Nested `@triton.jit` helpers (`tl.cdiv`, `tl.sigmoid`, the kernels' own helpers) re-patch
   `triton.language` on every call (an `inspect.getmembers` walk, a few ms, thousands of calls per layer)
   although the enclosing launch already patched it. Patch once per launch and module.
5. The interpreter checks every int32 add/mul for overflow (`sanitize_overflow`), which the CUDA backend
   does only in debug builds: about a fifth to a third of the run time. Tiny CPU shapes cannot overflow;
   index math that could overflow at real shapes is int64 in the kernels.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

_UNDO: list[Callable[[], None]] = []


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def applied() -> bool:
    return bool(_UNDO)


def _remember(obj: Any, name: str) -> None:
    """Record the current value of obj.name so `undo` can put it back (the assignment itself is written out
    plainly below, so fasttrack's confinement check sees every one of them)."""
    old = getattr(obj, name)
    _UNDO.append(lambda: setattr(obj, name, old))


def apply() -> bool:
    """Apply the workarounds once (no-op unless TRITON_INTERPRET=1). True when they are in place."""
    if _UNDO:
        return True
    if not interpreting():
        return False
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    # 1. bf16 tl.dot
    builder_cls = interpreter.InterpreterBuilder
    orig_dot = builder_cls.create_dot

    def widen(h: Any) -> Any:
        if h.dtype == tl.bfloat16 or getattr(h.dtype, "scalar", None) == tl.bfloat16:
            bits = np.asarray(h.data).astype(np.uint32) << np.uint32(16)
            return interpreter.TensorHandle(bits.view(np.float32), tl.float32)
        return h

    def create_dot(
        self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any
    ) -> Any:
        return orig_dot(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    _remember(builder_cls, "create_dot")
    builder_cls.create_dot = create_dot

    # 2. fp32 -> bf16 round to nearest even
    orig_cast = builder_cls.cast_impl

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            f = np.ascontiguousarray(src.data, dtype=np.float32)
            bits = f.view(np.uint32).astype(np.uint64)
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
            rounded = np.where(np.isnan(f), np.uint16(0x7FC0), rounded).astype(np.uint16)
            return interpreter.TensorHandle(rounded, dst_type.scalar)
        return orig_cast(self, src, dst_type)

    _remember(builder_cls, "cast_impl")
    builder_cls.cast_impl = cast_impl

    # 3. __index__ of interpreter scalars (numpy >= 2.4), registered through the interpreter's own patch scope
    orig_patch_tensor = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor: Any, scope: Any) -> None:
        orig_patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    _remember(interpreter, "_patch_lang_tensor")
    interpreter._patch_lang_tensor = patch_lang_tensor

    # 4. patch triton.language once per launch and globals dict, not on every nested @jit call
    depth = [0]
    patched: set[int] = set()  # ids of globals dicts whose language modules the running launch patched
    orig_grid_call = interpreter.GridExecutor.__call__

    def grid_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if depth[0] == 0:
            patched.clear()
            patched.add(id(self.fn.__globals__))
        depth[0] += 1
        try:
            return orig_grid_call(self, *args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                patched.clear()

    def fn_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        key = id(self.fn.__globals__)
        if depth[0] == 0 or key not in patched:
            interpreter._patch_lang(self.fn)
            patched.add(key)
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise interpreter.InterpreterError(repr(e)) from e

    _remember(interpreter.GridExecutor, "__call__")
    interpreter.GridExecutor.__call__ = grid_call
    _remember(interpreter.InterpretedFunction, "__call__")
    interpreter.InterpretedFunction.__call__ = fn_call

    # 5. no int32 overflow sanitizer (as compiled CUDA kernels outside debug builds)
    ib = interpreter.interpreter_builder
    _remember(ib, "options")
    ib.options = dataclasses.replace(ib.options, sanitize_overflow=False)
    return True


def undo() -> None:
    """Restore the interpreter as Triton ships it (in reverse order of application)."""
    while _UNDO:
        _UNDO.pop()()
