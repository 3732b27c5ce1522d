"""Run a function on N ranks of a real torch.distributed group, for the TP tests.

`run_ranks(fn, world=2, backend="gloo", **kwargs)` spawns `world` processes (torch.multiprocessing, spawn
start method), initialises the process group from a temporary file (no ports), calls
`fn(rank, world, **kwargs)` in each and returns the per-rank return values (picklable), in rank order.
An exception on any rank fails the call with that rank's traceback. Under `TRITON_INTERPRET=1` each child
applies the same interpreter workarounds as the test session (`_triton_interpreter`), since spawned children
do not run the conftest fixtures.

With backend "nccl", rank r uses cuda:r.
"""

from __future__ import annotations

import os
import tempfile
import traceback
from collections.abc import Callable
from typing import Any


def _child(
    rank: int,
    world: int,
    backend: str,
    init_file: str,
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    results: Any,
) -> None:
    import torch
    import torch.distributed as dist

    try:
        if os.environ.get("TRITON_INTERPRET") == "1":
            from kimi_k3.tests import _triton_interpreter

            _triton_interpreter.apply()
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
        try:
            out = fn(rank, world, **kwargs)
        finally:
            dist.barrier()
            dist.destroy_process_group()
        results[rank] = ("ok", out)
    except BaseException:  # reported to the parent
        results[rank] = ("error", traceback.format_exc())


def run_ranks(
    fn: Callable[..., Any], world: int = 2, backend: str = "gloo", timeout_s: float = 600.0, **kwargs: Any
) -> list[Any]:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp, ctx.Manager() as manager:
        results = manager.dict()
        init_file = os.path.join(tmp, "pg_init")
        procs = [
            ctx.Process(target=_child, args=(r, world, backend, init_file, fn, kwargs, results))
            for r in range(world)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout_s)
        for p in procs:
            if p.is_alive():
                p.kill()
                raise TimeoutError(f"rank process {p.pid} did not finish in {timeout_s} s")
        out: list[Any] = []
        for r in range(world):
            if r not in results:
                raise RuntimeError(f"rank {r} died without a result (exit code {procs[r].exitcode})")
            status, value = results[r]
            if status != "ok":
                raise RuntimeError(f"rank {r} failed:\n{value}")
            out.append(value)
        return out
