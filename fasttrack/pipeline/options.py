"""What `fasttrack verify` takes (`VerifyOptions`) and the defaults and environment names it reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_CONTRIBUTION = Path("kernels/kimi_k3")
DEFAULT_POLICY = Path("policies/vllm.toml")
ENGINE_TREE_ENV = "FASTTRACK_ENGINE_TREE"
TRACE_ENV = "FASTTRACK_TRACE"
MAX_TEXT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class VerifyOptions:
    """Everything `fasttrack verify` takes; the pure API (`run_verify`) used by tests and the GitHub stage."""

    repo: Path | None = None
    base: str | None = None
    head: str | None = None
    policy: Path | None = None
    model: str | None = None
    contribution: Path | None = None
    evidence: Path | None = None
    format: str = "text"
    output: Path | None = None
    pr: int | None = None
    engine_tree: Path | None = None
    # Contribution mode: the revision the policy and allowed signers are read from (None: the default).
    trusted_ref: str | None = None
    # Run the effect trace (imports the PR's changed model modules in a sandboxed subprocess); None: yes,
    # unless $FASTTRACK_TRACE is "0" (local runs; docs/effect-trace.md).
    trace: bool | None = None
    # Where relative defaults are looked up (the current directory when None).
    cwd: Path | None = field(default=None, compare=False)

