"""The effect trace's child started before the rest of a verify run loads (`sandbox.prestart`): its import
of the engine stack (torch and its compiler, ~3.6 s of CPU) is the cold run's floor, so the earlier it
starts the sooner the run ends. Imports only the sandbox (no pydantic, no Context), so `fasttrack verify`
on the command line starts it before the command's own modules load (~0.4 s; `cli._run`), and
`build_context` starts one itself when it was not handed one (the pure API, the GitHub stage).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from fasttrack.cache import cache_root
from fasttrack.pipeline.options import TRACE_ENV

if TYPE_CHECKING:
    from fasttrack.confinement.trace.sandbox import Warm


def trace_wanted(flag: bool | None) -> bool:
    """`--trace/--no-trace` when given, else yes unless $FASTTRACK_TRACE is "0"."""
    return flag if flag is not None else os.environ.get(TRACE_ENV, "1") != "0"


def trace_cache_dir() -> Path:
    return cache_root() / "traces"


def prestart_trace(cache_dir: Path) -> Warm | None:
    """A child importing the engine stack, when no trace is cached yet (a cold run, as in CI); on a warm
    cache the key is looked up first and a child starts only on a miss (no child is wasted on a hit)."""
    try:
        if any(cache_dir.glob("*.json")):
            return None
    except OSError:
        pass
    from fasttrack.confinement.trace.sandbox import prestart
    from fasttrack.confinement.trace.stack import ALWAYS_PREIMPORT

    return prestart(ALWAYS_PREIMPORT)


def prestart_for_verify_args(args: list[str]) -> Warm | None:
    """The child for `fasttrack verify ARGS`, read from the raw arguments before the command parses them:
    none for `--help` or `--no-trace` (or $FASTTRACK_TRACE=0 without `--trace`), else `prestart_trace`. A
    guess only decides whether a child starts early: `build_context` closes one its options do not want."""
    before = args[:args.index("--")] if "--" in args else args
    if any(a in ("-h", "--help", "--no-trace") for a in before):
        return None
    if not trace_wanted(True if "--trace" in before else None):
        return None
    return prestart_trace(trace_cache_dir())
