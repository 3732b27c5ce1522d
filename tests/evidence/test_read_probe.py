"""The read-bandwidth probe of the environment (fasttrack.evidence.environment): its Triton streaming kernel
must compile for the H200 (sm_90). It did not (an annotation naming a module global, which @triton.jit
refuses), so every statement's read roofline came from torch.sum, a slower reader. Compiled here on the CPU,
no GPU needed (Triton lowers to PTX without a device), in a fresh process: the CPU suite runs Triton's
interpreter, which decorates triton's own helpers differently."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

COMPILE = """
import triton
from triton.backends.compiler import GPUTarget
from fasttrack.evidence.environment import _read_kernel
src = triton.compiler.ASTSource(
    fn=_read_kernel(),
    signature={"x_ptr": "*bf16", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr", "ITERS": "constexpr"},
    constexprs={"BLOCK": 4096, "ITERS": 16})
print("ld.global" in triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ptx"])
"""


def test_the_read_kernel_compiles_for_sm90(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True"
