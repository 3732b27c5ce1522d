"""Test setup for kimi_k3: on a machine without CUDA the Triton kernels run under Triton's interpreter.

TRITON_INTERPRET must be set before any kernel is decorated (kimi_k3's kernel modules import triton at
import time), so it is set here, at conftest import, and only when no CUDA device is present (the repo-root
conftest does the same for the whole suite; this one keeps the contribution's tests self-contained where it
sits without that root, e.g. inside vLLM). fasttrack reports this as an FT123 warning: it is test setup.

Under the interpreter, `_triton_interpreter` works around Triton 3.6 interpreter bugs (bf16 tl.dot, fp32 ->
bf16 rounding, numpy >= 2.4 loop bounds) and two slow spots. It is applied by the session fixture below for
the kimi_k3 tests only, and undone when the session ends; no shipping module imports it. GPU tests are
marked `gpu` and skip without CUDA (a skip is not a pass).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


HAS_CUDA = _has_cuda()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (marker gpu); this machine has none")
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        if "gpu" in item.keywords and str(item.path).startswith(here):
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _bind_rank_to_its_gpu() -> None:
    """Under torchrun (TP > 1 points, one process per rank) bind this process to cuda:LOCAL_RANK before any
    fixture or test allocates: otherwise every rank's first allocation lands on cuda:0 (measured on the
    2 x H200 box: rank 1 built its 60 GB of weights on GPU 0 and both ranks ran out of memory)."""
    local = os.environ.get("LOCAL_RANK")
    if local is not None and HAS_CUDA:
        import torch

        torch.cuda.set_device(int(local))


@pytest.fixture(scope="session", autouse=True)
def _triton_interpreter_workarounds() -> Iterator[bool]:
    """The Triton 3.6 interpreter workarounds, for the kimi_k3 tests only (a no-op unless interpreting)."""
    from kimi_k3.tests import _triton_interpreter

    applied = _triton_interpreter.apply()
    yield applied
    _triton_interpreter.undo()


@pytest.fixture(scope="session")
def tiny_cfg():  # type: ignore[no-untyped-def]
    from baselines.vllm.kimi_k3.config import K3LayerConfig

    return K3LayerConfig.tiny()


@pytest.fixture(scope="session")
def tiny_weights(tiny_cfg):  # type: ignore[no-untyped-def]
    from baselines.vllm.kimi_k3.weights import K3LayerWeights

    return K3LayerWeights.random(tiny_cfg, seed=1234)
