"""The effect trace's constants that its sandbox needs before any plan exists (`sandbox.prestart`): kept
free of the plan's imports (pydantic, the Context), so that a child can be started before those load."""

from __future__ import annotations

MAX_FILE_BYTES = 4 * 1024 * 1024
# The engine stack every plan naming torch or triton imports first, in this order (`plan.ALWAYS_PREIMPORT`).
ALWAYS_PREIMPORT = ("torch", "torch.library", "torch._dynamo", "torch._inductor.config",
                    "torch._library.triton", "torch.distributed", "triton", "numpy")
