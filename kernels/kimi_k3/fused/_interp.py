"""Triton-interpreter compatibility shim (CPU tests only; a no-op unless TRITON_INTERPRET=1).

Triton 3.6's interpreter turns a scalar tensor into a Python index with `int(handle.data)`, but its scalars
are 1-element 1-d numpy arrays, which numpy >= 2.4 refuses to convert. Any kernel whose `range`/`tl.range`
bounds come from `tl.program_id` or `tl.load` (data-dependent loops) then fails under the interpreter only.
This patches the interpreter's tensor `__index__` to take the single element; compiled kernels are untouched.
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
    _APPLIED = True
