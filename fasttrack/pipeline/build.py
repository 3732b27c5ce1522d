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

The import graph's build is started (`start_blast_radius`: grimp's Rust scan runs in a thread of its own,
holding no GIL), then this process gathers the facts (`fasttrack.facts`) and imports the rules beside the
scan, then finishes the radius; none of the facts reads the radius. So, traced or not, the Context returned
is already the Facts (with the radius and the trace), and once the trace answers only judging is left. The
rules and the renderers are imported only here and in the judge, after the prestart (numpy only where
evidence is analysed).
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

    # How a mode's loader hands back the radius: a function that starts it (the graph looked up or its build
    # started) and returns the function that finishes it.
    RadiusStart = Callable[[], Callable[[], BlastRadius]]


def trace_enabled(opts: VerifyOptions) -> bool:
    return trace_wanted(opts.trace)


# The mode's loaders are imported when called, after the prestart: the child imports the engine stack
# meanwhile.
def build_range_context(opts: VerifyOptions, cwd: Path) -> tuple[Context, RadiusStart]:
    from fasttrack.pipeline.range_mode import build_range_context as build

    return build(opts, cwd)


def build_contribution_context(opts: VerifyOptions, cwd: Path) -> tuple[Context, RadiusStart]:
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
            ctx, start_radius = build_range_context(opts, cwd)
        else:
            ctx, start_radius = build_contribution_context(opts, cwd)
        if not traced:
            return _facts_with_radius(ctx, start_radius)
        from fasttrack.confinement.trace.gather import prepare_trace, run_prepared
        from fasttrack.facts.gather import gather_facts

        # Planned, keyed and looked up here, before the graph build starts.
        prepared = prepare_trace(ctx, cache_dir=cache_dir)
    except BaseException:
        if warm is not None:
            warm.close()
        raise
    if prepared.plan is None:
        if warm is not None:
            warm.close()
        return _facts_with_radius(dataclasses.replace(ctx, trace=prepared.hit), start_radius)

    # The effect trace runs the PR's code (sandboxed): it is a fact gathered here, before any rule runs. Its
    # subprocess runs while this process builds the import graph (neither reads the other's result: the
    # trace's plan comes from the change set and the head's files, not from the blast radius).
    cancel = threading.Event()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fasttrack-trace")
    trace = pool.submit(run_prepared, prepared, cancel=cancel, warm=warm)
    pool.shutdown(wait=False)
    try:
        # Still waiting for the child (it imports the engine stack): the radius and the facts the rules read,
        # none of which depends on the trace, and the rules imported, so only judging is left once it answers.
        facts = gather_facts(_facts_with_radius(ctx, start_radius))
    except BaseException:
        cancel.set()  # the verdict will not be written: stop the child rather than wait for it
        raise
    return _carry_memo(dataclasses.replace(facts, trace=trace.result()), facts)


def _facts_with_radius(ctx: Context, start_radius: RadiusStart) -> Context:
    """The Context with its blast radius, its facts gathered: the radius is started (grimp's scan runs in its
    thread), the facts gathered and the rules imported beside the scan (none reads the radius), then the
    radius finished. The facts are left in the returned Context's memo (`gather.GATHERED`), where the judge
    finds them; a Context derived from it gathers its own."""
    from fasttrack.facts.gather import GATHERED

    finish_radius = start_radius()
    facts = _facts_beside(ctx)
    radius = finish_radius()
    gathered = _carry_memo(dataclasses.replace(facts, blast_radius=radius), facts)
    judged = _carry_memo(dataclasses.replace(ctx, blast_radius=radius), gathered)
    judged._memo[GATHERED] = gathered
    return judged


def _carry_memo(new: Context, old: Context) -> Context:
    new._memo.update(old._memo)  # the values computed once per run carry over
    return new


def _facts_beside(ctx: Context) -> Context:
    """The Context's facts (`fasttrack.facts.gather`) and the rules imported: the work a verify run does
    besides the radius and the trace, done while they run."""
    from fasttrack.facts.gather import gather_facts
    from fasttrack.rules import all_rules

    all_rules()
    return gather_facts(ctx)
