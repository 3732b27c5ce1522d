"""Build the Context: the mode's loaders, then the facts gathered before any rule runs (the blast radius and
the effect trace, side by side)."""

from __future__ import annotations

import dataclasses
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fasttrack.cache import cache_root
from fasttrack.context import Context
from fasttrack.pipeline.contribution_mode import build_contribution_context
from fasttrack.pipeline.options import TRACE_ENV, VerifyOptions
from fasttrack.pipeline.range_mode import build_range_context


def build_context(opts: VerifyOptions) -> Context:
    """Load every input into the immutable Context the rules read (InputError on bad input)."""
    cwd = (opts.cwd or Path.cwd()).resolve()
    if opts.base is not None or opts.head is not None:
        ctx, blast = build_range_context(opts, cwd)
    else:
        ctx, blast = build_contribution_context(opts, cwd)
    if not (opts.trace if opts.trace is not None else os.environ.get(TRACE_ENV, "1") != "0"):
        return dataclasses.replace(ctx, blast_radius=blast())
    from fasttrack.confinement.trace.gather import gather_trace

    # The effect trace runs the PR's code (sandboxed): it is a fact gathered here, before any rule runs. Its
    # subprocess runs while this process builds the import graph (neither reads the other's result: the
    # trace's plan comes from the change set and the head's files, not from the blast radius).
    cancel = threading.Event()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fasttrack-trace")
    trace = pool.submit(gather_trace, ctx, cache_dir=cache_root() / "traces", cancel=cancel)
    pool.shutdown(wait=False)
    try:
        radius = blast()
    except BaseException:
        cancel.set()  # the verdict will not be written: stop the child rather than wait for it
        raise
    return dataclasses.replace(ctx, blast_radius=radius, trace=trace.result())

