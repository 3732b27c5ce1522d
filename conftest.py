"""Repository-wide test setup, loaded before any test module is imported.

Triton decides at decoration time whether a kernel runs compiled or under its CPU interpreter, so
TRITON_INTERPRET must be set before the first test module imports triton (with `--dist loadfile` a worker
may import fasttrack's evidence tests, which import triton, before it reaches kernels/). On a machine without
an NVIDIA device (CI) the interpreter is the only way the kernels run; on a GPU machine nothing is changed.
"""

from __future__ import annotations

import glob
import os

if "TRITON_INTERPRET" not in os.environ and not glob.glob("/dev/nvidia[0-9]*"):
    os.environ["TRITON_INTERPRET"] = "1"
