"""The benchmark case at TP 2 on a real two-process gloo group (CPU, tiny shapes, Triton interpreter).

The engine baseline's `K3BaselineCase.make_inputs` redraws input rows whose routing is ambiguous, running
stock (with its all-reduces) once per round. The ranks must agree on every round, or one rank waits in an
all-reduce its peer never joins: the first TP-2 benchmark runs on two H200s hung exactly there. Here rank 1
sees every row as ambiguous and rank 0 none, so only the agreement keeps the ranks in step.
"""

from __future__ import annotations

from typing import Any

import pytest

from kimi_k3.tests._dist import run_ranks

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _case_rank(rank: int, world: int, gaps: list[float]) -> dict[str, Any]:
    from baselines.vllm.kimi_k3 import case as C
    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from baselines.vllm.kimi_k3.tp import TPGroup

    C.ROUTE_GAP = gaps[rank]
    cfg = K3LayerConfig.tiny(tp=world)
    weights = C.cached_weights(cfg, "cpu")
    case = C.K3BaselineCase(C.build_state(cfg, weights, 3, 40, "cpu", TPGroup.from_env()), 3, 40)
    return {
        "hidden": case.static_inputs["hidden"].float(),
        "residual": case.static_inputs["residual"].float(),
        "touched": list(case.touched_experts),
        "router": weights.router.float(),
    }


def test_make_inputs_keeps_ranks_in_step() -> None:
    import torch

    r0, r1 = run_ranks(_case_rank, world=2, timeout_s=300, gaps=[0.0, 1e9])
    assert torch.equal(r0["router"], r1["router"]), "replicated weights differ across ranks"
    assert torch.equal(r0["hidden"], r1["hidden"]) and torch.equal(r0["residual"], r1["residual"])
    assert r0["touched"] == r1["touched"]
