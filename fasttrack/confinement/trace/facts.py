"""The effect trace's facts: what the sandboxed import of the PR's modules did (read by the FT13x rules)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class EffectKind(StrEnum):
    FOREIGN_STATE = "foreign-state"  # a module, class or global switch the contribution does not own
    ENGINE = "engine"  # a write, registration or subclassing on an engine stand-in
    FILESYSTEM = "filesystem"  # a write outside the sandbox's temp directories
    INTERPRETER = "interpreter"  # tracing, audit hooks, environment, cwd, threads
    ESCAPE = "escape"  # network, processes, signals to others, native code
    DYNAMIC_CODE = "dynamic-code"  # exec/compile of text, marshal, code objects
    INTROSPECTION = "introspection"  # gc / frame walks that reach objects the contribution was not handed


class Effect(BaseModel):
    """One thing the traced code did, with the contribution's line that did it (None: not attributable)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: EffectKind
    target: str  # what it touched: `vllm.config.X.attr`, `state:torch.backends...`, a path, an audit event
    detail: str = ""
    path: str | None = None  # path as the PR names it
    line: int | None = Field(default=None, ge=1)
    how: Literal["audit", "standin", "snapshot"] = "audit"


class CallResult(BaseModel):
    """One call the trace made of an entry point the manifest names (`[trace] smoke`, the guard at a point):
    whether it did what it must (returned; the guard answered fused inside the envelope and stock outside)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str  # "smoke", "guard inside", "guard outside (batch)", ...
    ok: bool
    detail: str = ""
    path: str | None = None  # the contribution's line where it failed, when it raised there
    line: int | None = Field(default=None, ge=1)


class TraceStatus(StrEnum):
    OK = "ok"
    NOT_RUN = "not-run"  # nothing to trace (no changed Python module of the model)
    FAILED = "failed"  # timeout, crash, sandbox unavailable, a module that would not import


class TraceFacts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    status: TraceStatus
    reason: str = ""  # why the trace did not run or failed, and what to do
    fix: str = ""
    modules: tuple[str, ...] = ()  # the modules imported under trace
    effects: tuple[Effect, ...] = ()
    import_errors: tuple[Effect, ...] = ()
    isolation: str = ""  # "unshare-net-rofs", "unshare-net" or "audit-only"
    seconds: float = 0.0
    passes: int = 0
    calls: tuple[CallResult, ...] = ()  # the manifest's entry points called after the imports
