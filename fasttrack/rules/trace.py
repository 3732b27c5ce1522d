"""FT13x: the effect trace (what the PR's modules did when imported in the sandbox, not what they spell).

The trace itself runs before the rules (`fasttrack.confinement.trace.gather`); these rules only read its
facts from the Context. The static scan (FT12x) runs as well: the trace catches what syntax hides.
"""

from __future__ import annotations

from collections.abc import Iterator

from fasttrack.confinement.trace.facts import Effect, EffectKind, TraceStatus
from fasttrack.facts.model import Facts
from fasttrack.findings import Finding
from fasttrack.rules.base import Catalogue
from fasttrack.sanitize import visible

catalogue = Catalogue("trace")

_WHAT = {
    EffectKind.FOREIGN_STATE: "changes shared state",
    EffectKind.ENGINE: "changes the engine",
    EffectKind.FILESYSTEM: "writes outside the sandbox",
    EffectKind.INTERPRETER: "changes interpreter-wide state",
    EffectKind.ESCAPE: "reaches outside the process",
    EffectKind.DYNAMIC_CODE: "runs code made at run time",
    EffectKind.INTROSPECTION: "reaches objects it was not handed",
}
_FIX = {
    EffectKind.FOREIGN_STATE: "keep the change in the model's own package: subclass or wrap shared classes, "
                              "pass settings explicitly; never assign to another package's modules, classes "
                              "or global switches",
    EffectKind.ENGINE: "do not write to, register into or patch engine objects from model code; registry "
                       "entries go through the registry hook file the policy allows",
    EffectKind.FILESYSTEM: "do not write files at import (no .pth, no caches outside the temp directory)",
    EffectKind.INTERPRETER: "do not change the environment, tracing hooks, the working directory or start "
                            "threads when the module is imported",
}
_TRACE_KINDS = {EffectKind.FOREIGN_STATE, EffectKind.ENGINE, EffectKind.FILESYSTEM, EffectKind.INTERPRETER}


def _effects(ctx: Facts, kinds: set[EffectKind], attributed: bool) -> Iterator[Effect]:
    if ctx.trace is None or ctx.trace.status is TraceStatus.NOT_RUN:
        return
    seen: set[tuple[str | None, int | None, str]] = set()
    for effect in ctx.trace.effects:
        if effect.kind not in kinds or (effect.path is not None and effect.line is not None) != attributed:
            continue
        key = (effect.path, effect.line, effect.target)
        if key in seen:
            continue
        seen.add(key)
        yield effect


def _message(effect: Effect) -> str:
    detail = f" ({visible(effect.detail)})" if effect.detail else ""
    return f"at import, this {_WHAT[effect.kind]}: {visible(effect.target)}{detail}"


@catalogue.rule("FT130", "The effect trace saw a changed module change what the contribution does not own.")
def foreign_effect(ctx: Facts) -> Iterator[Finding]:
    """Imported in the sandbox (engine as recording stand-ins, real torch), a changed module wrote to a
    module, class or global switch outside the contribution (seen by before/after snapshots, whichever
    spelling did it: `setattr(*args)`, `operator.setitem`, `functools.partial`, a loop over
    `sys.modules` or `gc.get_objects()`, `exec` of computed text, an alias of `torch.backends`), wrote,
    registered into or subclassed-with-registration an engine object, wrote a file outside the sandbox,
    or changed interpreter-wide state (environment, `sys.settrace`, audit hooks, cwd, threads, signal
    handlers, logging, warnings filters, `sys.modules`, `sys.path`, torch op registrations outside the
    model's namespace). The finding names the contribution's line that did it."""
    for effect in _effects(ctx, _TRACE_KINDS, attributed=True):
        yield Finding.error("FT130", _message(effect), path=effect.path, line=effect.line,
                            fix=_FIX[effect.kind])


@catalogue.rule("FT131", "The effect trace saw an effect it cannot attribute to a line of the contribution.")
def unattributed_effect(ctx: Facts) -> Iterator[Finding]:
    """Something changed shared state while the PR's modules were imported, but no line of the
    contribution can be named (a thread, a finaliser, a change that did not reproduce in the locate pass).
    Fail closed: an effect nobody can explain is an effect."""
    for effect in _effects(ctx, set(EffectKind), attributed=False):
        yield Finding.error("FT131", f"{_message(effect)}; no line of the contribution could be named",
                            path=ctx.manifest_path, fix="do nothing at import but define names; move side "
                            "effects into functions the engine calls")


@catalogue.rule("FT132", "The effect trace could not run to its end (timeout, crash, import error, sandbox).")
def trace_failed(ctx: Facts) -> Iterator[Finding]:
    """A changed module that cannot be imported in the sandbox (CPU only, empty environment, no network,
    time and memory limits, engine as stand-ins) cannot be shown confined: fail closed."""
    if ctx.trace is None:
        return
    if ctx.trace.status is TraceStatus.FAILED:
        for err in ctx.trace.import_errors:
            yield Finding.error("FT132", f"{visible(err.target)} failed to import under the effect trace: "
                                f"{visible(err.detail)}", path=err.path, line=err.line,
                                fix=ctx.trace.fix or "make the module importable on CPU without side effects")
        if not ctx.trace.import_errors:
            yield Finding.error("FT132", f"the effect trace did not finish: {visible(ctx.trace.reason)}",
                                path=ctx.manifest_path, fix=ctx.trace.fix or "rerun; report to fasttrack")


@catalogue.rule("FT138", "An entry point the trace called failed, or the guard contradicted the envelope.")
def entry_calls(ctx: Facts) -> Iterator[Finding]:
    """After the imports the trace calls what the manifest's `[trace]` names, in the sandbox, with effects
    recorded and attributed as at import (a patch made only when a function is called is FT130 too): the
    zero-argument `smoke` callable, and the `[fallback] guard` at points fasttrack builds from the envelope
    (`guard_input(point)` makes the guard's argument): fused at a point inside, stock just outside it (batch,
    context, TP). A call that raised, that the trace could not report, or a wrong answer is an error."""
    if ctx.trace is None or ctx.trace.status is TraceStatus.NOT_RUN:
        return
    for call in ctx.trace.calls:
        if call.ok:
            continue
        yield Finding.error("FT138", f"the trace's call of {visible(call.name)} failed: "
                            f"{visible(call.detail)}",
                            path=call.path or ctx.manifest_path, line=call.line if call.path else None,
                            fix="make [trace] smoke run on tiny CPU inputs without effects, and the guard "
                                "answer fused inside the envelope and stock outside it")


@catalogue.rule("FT133", "The effect trace saw a changed module reach the network, a process or native code.")
def escape_attempt(ctx: Facts) -> Iterator[Finding]:
    """Sockets, `subprocess`, `os.system`/`exec*`/`fork`, signals to other processes, `ctypes` loading or
    calling native code (`setenv` behind `os.environ`'s back), rlimit changes: blocked in the sandbox and
    an error."""
    for effect in _effects(ctx, {EffectKind.ESCAPE}, attributed=True):
        yield Finding.error("FT133", _message(effect), path=effect.path, line=effect.line,
                            fix="model code may not open sockets, start processes or load native code at "
                                "import; ship kernels as Python/Triton or through the engine's build")


@catalogue.rule("FT134", "The effect trace saw a changed module run generated code or walk the interpreter.")
def dynamic_code(ctx: Facts) -> Iterator[Finding]:
    """`exec`/`eval`/`compile` of text, `marshal.loads`, code objects made at run time, and `gc`/frame
    walks (`gc.get_objects()`, `sys._current_frames()`) called from the contribution's own lines: the
    ways to reach or build what the static scan cannot read."""
    for effect in _effects(ctx, {EffectKind.DYNAMIC_CODE, EffectKind.INTROSPECTION}, attributed=True):
        yield Finding.error("FT134", _message(effect), path=effect.path, line=effect.line,
                            fix="write the code out as source; reach objects through imports, not the "
                                "garbage collector or frames")
