"""What the effect trace costs a PR: seconds for the reference contribution and for a kimi_k3-sized range
on the real vLLM 0.33.0 tree (docs/effect-trace.md quotes the figures).

    python benchmarks/trace_cost.py            # both
    python benchmarks/trace_cost.py reference  # only kernels/kimi_k3 (contribution mode)
    python benchmarks/trace_cost.py range      # only the real-tree range

The range PR edits the four modules of the K3 NVIDIA path (`vllm/models/kimi_k3/nvidia/{model,mla,
latent_moe_runner,low_latency_gemm}.py`), so the trace imports them, and through them the rest of the
model package, with the engine as stand-ins and the real torch.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fasttrack.commands.verify import VerifyOptions, build_context
from fasttrack.confinement.trace.gather import gather_trace
from fasttrack.confinement.trace.plan import build_plan
from fasttrack.engine_tree import ensure_tree

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "policies" / "vllm.toml"
K3_NVIDIA = ("model.py", "mla.py", "latent_moe_runner.py", "low_latency_gemm.py")
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


def reference() -> None:
    ctx = build_context(VerifyOptions(cwd=ROOT, policy=POLICY, trace=False))
    t0 = time.perf_counter()
    facts = gather_trace(ctx)
    print(f"reference contribution: {len(facts.modules)} modules, {facts.passes} pass(es), "
          f"{time.perf_counter() - t0:.1f} s, {len(facts.effects)} effects, status {facts.status.value}")


def real_range() -> None:
    tree = ensure_tree("0.33.0")
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "vllm"
        shutil.copytree(tree / "vllm", repo / "vllm")
        _git(repo, "init", "-q", "-b", "main")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "--no-verify", "-m", "base")
        base = _git(repo, "rev-parse", "HEAD").strip()
        for name in K3_NVIDIA:
            p = repo / "vllm/models/kimi_k3/nvidia" / name
            p.write_text(p.read_text() + "\n# faster\n")
        _git(repo, "commit", "-qam", "pr")
        ctx = build_context(VerifyOptions(repo=repo, base=base, head="HEAD", model="kimi_k3", policy=POLICY,
                                          trace=False))
        plan = build_plan(ctx)
        t0 = time.perf_counter()
        facts = gather_trace(ctx)
        print(f"kimi_k3 range on vLLM 0.33.0: {len(plan.targets)} changed modules, {len(plan.files)} files "
              f"copied, {facts.passes} pass(es), {time.perf_counter() - t0:.1f} s, status "
              f"{facts.status.value}")
        for e in facts.effects + facts.import_errors:
            print(f"  {e.kind.value} {e.path}:{e.line} {e.target} {e.detail[:120]}")
        if facts.reason:
            print(f"  {facts.reason[:400]}")


if __name__ == "__main__":
    which = sys.argv[1:] or ["reference", "range"]
    if "reference" in which:
        reference()
    if "range" in which:
        real_range()
