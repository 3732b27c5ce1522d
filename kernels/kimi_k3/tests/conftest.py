"""Test setup for kimi_k3: on a machine without CUDA the Triton kernels run under Triton's interpreter.

TRITON_INTERPRET must be set before any kernel is decorated (kimi_k3's kernel modules import triton at
import time), so it is set here, at conftest import, and only when no CUDA device is present. GPU tests are
marked `gpu` and skip without CUDA (a skip is not a pass).
"""

from __future__ import annotations

import os

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


@pytest.fixture(scope="session")
def tiny_cfg():  # type: ignore[no-untyped-def]
    from kimi_k3.config import K3LayerConfig

    return K3LayerConfig.tiny()


@pytest.fixture(scope="session")
def tiny_weights(tiny_cfg):  # type: ignore[no-untyped-def]
    from kimi_k3.weights import K3LayerWeights

    return K3LayerWeights.random(tiny_cfg, seed=1234)
