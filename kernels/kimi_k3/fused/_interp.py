"""Triton-interpreter compatibility shim (CPU tests only; a no-op unless TRITON_INTERPRET=1).

Triton 3.6's interpreter turns a scalar tensor into a Python index with `int(handle.data)`, but its scalars
are 1-element 1-d numpy arrays, which numpy >= 2.4 refuses to convert. Any kernel whose `range`/`tl.range`
bounds come from `tl.program_id` or `tl.load` (data-dependent loops) then fails under the interpreter only.
This patches the interpreter's tensor `__index__` to take the single element.

It also fixes the interpreter's `tl.dot` on bf16 operands: bf16 is stored as raw uint16 bits there and
`create_dot` multiplies those integers (a bf16 dot returns ~1e10 garbage). The patch widens bf16 operands to
fp32 (exact) before the matmul.

Speed: the interpreter re-patches `triton.language` on every call of a nested `@triton.jit` helper (a few ms
each, thousands of calls per layer). Inside a running kernel the language is already patched (the helpers
see the same `triton.language` module), so the re-patch is skipped there. The interpreter's integer-overflow
sanitizer (an int64 recomputation and an assert around every int32 add/mul, a third of the run time) is
switched off: tiny CPU shapes cannot overflow, and real-shape index math is int64 where it matters.
Compiled kernels are untouched by all of these patches.
"""

from __future__ import annotations

import os
from typing import Any

_APPLIED = False


def apply() -> None:
    global _APPLIED
    if _APPLIED or os.environ.get("TRITON_INTERPRET", "0") != "1":
        return
    import numpy as np
    from triton.runtime import interpreter

    orig = interpreter._patch_lang_tensor

    def patched(tensor: Any, scope: Any) -> None:
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched

    builder_cls = interpreter.InterpreterBuilder
    orig_dot = builder_cls.create_dot

    def _widen(h: Any) -> Any:
        import triton.language as tl

        if h.dtype == tl.bfloat16:
            bits = np.asarray(h.data).astype(np.uint32) << np.uint32(16)
            return interpreter.TensorHandle(bits.view(np.float32), tl.float32)
        return h

    def create_dot(
        self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any
    ) -> Any:
        return orig_dot(self, _widen(a), _widen(b), d, input_precision, max_num_imprecise_acc)

    builder_cls.create_dot = create_dot

    depth = [0]
    patched: set[int] = set()  # globals dicts whose language modules are patched in the running kernel
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

    interpreter.GridExecutor.__call__ = grid_call
    interpreter.InterpretedFunction.__call__ = fn_call
    import dataclasses

    ib = interpreter.interpreter_builder
    ib.options = dataclasses.replace(ib.options, sanitize_overflow=False)
    _APPLIED = True
