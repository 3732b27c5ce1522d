"""The effect trace on the real vLLM 0.33.0 tree: a kimi_k3-sized PR (the four modules of the K3 NVIDIA
path) imports clean with the engine as stand-ins, and a patch hidden in one of them is named at its line.

Measured on the 2-core development VM (benchmarks/trace_cost.py): 19 s a PR quiet, 42-46 s loaded, two passes.
"""

from __future__ import annotations

import pytest
from vllm_repo_support import POLICY, VllmRepo

from fasttrack.commands.verify import VerifyOptions, build_context
from fasttrack.confinement.trace.facts import TraceStatus
from fasttrack.confinement.trace.gather import gather_trace

pytestmark = [pytest.mark.vllm_tree, pytest.mark.slow]
NVIDIA = "vllm/models/kimi_k3/nvidia"
HIDDEN = "\nimport functools as _ft\n_ft.partial(setattr, _ft, 'reduce')(len)\n"


def test_kimi_k3_pr_traces_clean_and_a_hidden_patch_is_named(vllm_repo: VllmRepo) -> None:
    files = ("model.py", "mla.py", "latent_moe_runner.py", "low_latency_gemm.py")
    head = vllm_repo.pr(append={f"{NVIDIA}/{f}": ("\n# faster\n" if f != "mla.py" else HIDDEN)
                                for f in files})
    ctx = build_context(VerifyOptions(repo=vllm_repo.path, base=vllm_repo.base, head=head, model="kimi_k3",
                                      policy=POLICY, trace=False))
    facts = gather_trace(ctx)
    assert facts.status is TraceStatus.OK, facts.reason
    lines = len(vllm_repo.read(f"{NVIDIA}/mla.py").splitlines())
    assert [(e.path, e.line, e.target) for e in facts.effects] == [
        (f"{NVIDIA}/mla.py", lines + 3, "functools.reduce")]
