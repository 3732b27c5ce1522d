"""Shared by the GPU test files: which envelope points this machine runs, and why it skips the others.

`fasttrack collect` hands the kernel tests a grid of the envelope's points for the hardware present, but a
grid file can be passed by hand too, so each point test checks it can honestly run the point here and
otherwise skips with the reason (a skip is recorded as not run, never as a pass).
"""

from __future__ import annotations

from typing import Any

import pytest

# TP degrees with per-rank shard shapes (`K3LayerConfig.real`): a shard runs on one GPU without all-reduce.
SHARD_TPS = (1, 2, 4, 8)


def skip_unless_runnable_here(point: dict[str, Any], *, path: str) -> None:
    """Skip (with the reason) a point of other hardware, another dtype, or a TP the path does not serve."""
    import torch

    from kimi_k3.guard import ENVELOPE

    if point["dtype"] != "bfloat16":
        pytest.skip(f"the {path} path is bf16 only; point dtype {point['dtype']}")
    here = torch.cuda.get_device_name(0)
    if str(point["gpu"]).lower() != here.lower():
        pytest.skip(f"point is for {point['gpu']}; this machine has {here}: not run here")
    tp = int(point["tp"])
    if tp not in SHARD_TPS:
        pytest.skip(f"no per-rank shard shapes for TP {tp}")
    if path == "fused" and tp not in ENVELOPE.tp:
        pytest.skip(f"TP {tp} is outside the envelope's TP {sorted(ENVELOPE.tp)}: the guard runs stock there")
