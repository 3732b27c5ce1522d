"""Build the Context: the mode's loaders, then the facts gathered before any rule runs (the blast radius and
the effect trace, side by side).

The effect trace's child spends most of its time importing the engine's stack (torch and its compiler, a
fixed list: `ALWAYS_PREIMPORT`), which does not depend on the PR. On a cold run (no trace cached yet) that
child is started first (`sandbox.prestart`): by the command line before the command's modules load
(`fasttrack.pipeline.prestart`, handed in as `warm`), else here, before the mode's loaders. It imports the
stack while this process diffs, plans and builds the import graph, and is handed its plan when the plan is
ready. It is used only when the plan's pre-imports begin with exactly that stack (a PR naming torch), else it
is killed and a child started with its plan runs, as without the prestart. Until it is handed its plan it has
run nothing but those imports, in the same sandbox, interpreter, environment and limits.

While the child runs, this process builds the import graph, then gathers the facts (`fasttrack.facts`) and
imports the rules, so that once the trace answers only judging is left; on that path the Context returned is
already the Facts (with the trace). The rules and the renderers are imported only here and in the judge,
after the prestart (numpy only where evidence is analysed).
"""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from fasttrack.context import Context
from fasttrack.pipeline.options import VerifyOptions
from fasttrack.pipeline.prestart import prestart_trace, trace_cache_dir, trace_wanted

if TYPE_CHECKING:
    from collections.abc import Callable

    from fasttrack.confinement.trace.sandbox import Warm
    from fasttrack.verdict import BlastRadius


def trace_enabled(opts: VerifyOptions) -> bool:
    return trace_wanted(opts.trace)


# The mode's loaders are imported when called, after the prestart: the child imports the engine stack
# meanwhile.
def build_range_context(opts: VerifyOptions, cwd: Path) -> tuple[Context, Callable[[], BlastRadius]]:
    from fasttrack.pipeline.range_mode import build_range_context as build

    return build(opts, cwd)


def build_contribution_context(opts: VerifyOptions,
                               cwd: Path) -> tuple[Context, Callable[[], BlastRadius]]:
    from fasttrack.pipeline.contribution_mode import build_contribution_context as build

    return build(opts, cwd)


def build_context(opts: VerifyOptions, *, warm: Warm | None = None) -> Context:
    """Load every input into the immutable Context the rules read (InputError on bad input). `warm`: a child
    prestarted by the caller (`prestart.prestart_for_verify_args`), now this function's to use or close;
    without one, one is started here when the trace runs."""
    cwd = (opts.cwd or Path.cwd()).resolve()
    traced = trace_enabled(opts)
    cache_dir = trace_cache_dir()
    if warm is not None and not traced:
        warm.close()
        warm = None
    elif warm is None and traced:
        warm = prestart_trace(cache_dir)
    try:
        if opts.base is not None or opts.head is not None:
            ctx, blast = build_range_context(opts, cwd)
        else:
            ctx, blast = build_contribution_context(opts, cwd)
        if not traced:
            return dataclasses.replace(ctx, blast_radius=blast())
        from fasttrack.confinement.trace.gather import prepare_trace, run_prepared

        # Planned, keyed and looked up here, before the graph build (grimp holds the GIL: Python work in a
        # thread beside it slows both).
        prepared = prepare_trace(ctx, cache_dir=cache_dir)
    except BaseException:
        if warm is not None:
            warm.close()
        raise
    if prepared.plan is None:
        if warm is not None:
            warm.close()
        return dataclasses.replace(ctx, blast_radius=blast(), trace=prepared.hit)

    # The effect trace runs the PR's code (sandboxed): it is a fact gathered here, before any rule runs. Its
    # subprocess runs while this process builds the import graph (neither reads the other's result: the
    # trace's plan comes from the change set and the head's files, not from the blast radius).
    cancel = threading.Event()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fasttrack-trace")
    trace = pool.submit(run_prepared, prepared, cancel=cancel, warm=warm)
    pool.shutdown(wait=False)
    try:
        radius = blast()
        # Still waiting for the child (it imports the engine stack): gather the facts the rules read, none of
        # which depends on the trace, and import the rules, so that only judging is left once it answers.
        facts = _facts_beside(dataclasses.replace(ctx, blast_radius=radius))
    except BaseException:
        cancel.set()  # the verdict will not be written: stop the child rather than wait for it
        raise
    traced_facts = dataclasses.replace(facts, trace=trace.result())
    traced_facts._memo.update(facts._memo)  # the values computed once per run carry over
    return traced_facts


def _facts_beside(ctx: Context) -> Context:
    """The Context's facts (`fasttrack.facts.gather`) and the rules imported: the work a verify run does
    after the trace, done while the trace's child still runs."""
    from fasttrack.facts.gather import gather_facts
    from fasttrack.rules import all_rules

    all_rules()
    return gather_facts(ctx)
