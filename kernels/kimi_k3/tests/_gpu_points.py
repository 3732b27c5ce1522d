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


def tp_point_setup(point: dict[str, Any]) -> tuple[Any, Any, Any]:
    """For a point with TP n > 1, run as one of n processes (`fasttrack collect` launches the kernel tests
    with torchrun at TP > 1): initialise NCCL on cuda:LOCAL_RANK if needed and return
    (full TP-1 weights, this rank's shard of them, the TPGroup). Every rank builds the same full weights
    (same seed, same generator), so the fp32 reference of the full layer is the oracle on every rank.
    Skips, with the reason, when this run does not have n processes or n GPUs."""
    import os

    import torch
    import torch.distributed as dist

    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from baselines.vllm.kimi_k3.tp import TPGroup, shard_weights
    from kimi_k3.benchmarks.bench import cached_weights

    tp = int(point["tp"])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != tp:
        pytest.skip(f"a TP {tp} point runs as {tp} processes (torchrun, as fasttrack collect launches it); "
                    f"this run has {world}")
    if torch.cuda.device_count() < tp:
        pytest.skip(f"a TP {tp} point needs {tp} GPUs; this machine has {torch.cuda.device_count()}")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    full = cached_weights(K3LayerConfig.real(1), "cuda")
    key = ("shard", tp, dist.get_rank())
    shard = full._derived.get(key)
    if shard is None:
        shard = shard_weights(full, dist.get_rank(), tp)
        full._derived[key] = shard
    return full, shard, TPGroup.from_env()
