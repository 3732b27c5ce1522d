"""Gather the trace's facts: plan, first pass (hooks, stand-ins, snapshots), a locate pass for the state
diffs the first pass saw (which line changed them), and the events turned into Effects.

Everything here fails closed: a pass that does not finish is a FAILED trace (FT132), a diff the locate pass
cannot pin to a line stays an Effect without a line (FT131).
"""

from __future__ import annotations

import fnmatch
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttrack.confinement.trace.cache import cache_key, clear, file_digests, listing, load, store
from fasttrack.confinement.trace.facts import CallResult, Effect, EffectKind, TraceFacts, TraceStatus
from fasttrack.confinement.trace.plan import TracePlan, plan_files, with_preimport
from fasttrack.confinement.trace.sandbox import TIMEOUT_S, TraceFailure, Warm, run_child
from fasttrack.confinement.trace.stdlib_state import ENTRY_RULES, entries_effect
from fasttrack.context import Context

MAX_LOCATE = 4096
_ABSORBED = ("<foreign-import>", None)  # changed only by a library's own import: not the PR's effect
_KINDS = {
    "fs-write": EffectKind.FILESYSTEM,
    "escape": EffectKind.ESCAPE,
    "interpreter": EffectKind.INTERPRETER,
    "introspection": EffectKind.INTROSPECTION,
    "dynamic-code": EffectKind.DYNAMIC_CODE,
    "foreign-write": EffectKind.FOREIGN_STATE,
    "engine-write": EffectKind.ENGINE,
    "engine-registration": EffectKind.ENGINE,
}


def _own_op(name: str, namespaces: tuple[str, ...]) -> bool:
    """`kimi_k3::op`, `kimi_k3_stock::op` and `kimi_k3/op/CPU` are own; so is `vllm::kimi_k3_op` (vLLM's
    model-op convention), as the static scan (FT125) has it."""
    ns, _, rest = name.replace("/", "::", 1).partition("::")
    return (ns in namespaces or any(ns.startswith(n + "_") for n in namespaces)
            or (ns == "vllm" and any(rest.startswith(n + "_") for n in namespaces)))


def _own_name(name: str, plan: TracePlan) -> bool:
    return any(name == p or name.startswith(p + ".") for p in plan.own_prefixes)


# State keys read from a module that may not be loaded yet (MISSING until then).
_LOADED_LATER = frozenset({"state:numpy.random.state", "state:multiprocessing.registries"})


def _state_effect(event: dict[str, Any], plan: TracePlan) -> str | None:
    """What a state diff means, or None when it is the contribution's own business."""
    key: str = event["key"]
    added = event.get("added") or []
    removed = event.get("removed") or []
    if key in ("state:torch.ops", "state:torch.library"):
        foreign = [n for n in added + removed if not _own_op(str(n), plan.own_op_namespaces)]
        return f"torch op registrations outside the contribution's namespace: {', '.join(foreign[:5])}" \
            if foreign else None
    if key in ENTRY_RULES:
        return entries_effect(key, list(added), list(removed), lambda name: _own_name(name, plan))
    if key == "state:logging.loggers":
        # A logger made with the default configuration (level NOTSET, enabled, propagating, no handler) is
        # not a change of anyone's logging; a changed or removed one is.
        foreign = [e for e in removed if isinstance(e, list) and e and not _own_name(str(e[0]), plan)]
        foreign += [e for e in added if isinstance(e, list) and e and not _own_name(str(e[0]), plan)
                    and (e[1:] != [0, False, True, 0] or any(r[0] == e[0] for r in removed))]
        return f"logger configuration changed: {foreign[:3]}" if foreign else None
    if key.startswith(("box:", "cbox:")) and (added or removed) and isinstance((added + removed)[0], list):
        # A dict registry: new entries under the contribution's own names (its op namespace, its package)
        # are its own; a replaced, removed or foreign-named entry is an effect.
        foreign = [str(e[0]) for e in removed] + [str(e[0]) for e in added
                                                   if not (_own_op(str(e[0]), plan.own_op_namespaces)
                                                           or _own_name(str(e[0]), plan))]
        return f"entries changed: {', '.join(sorted(set(foreign))[:5])}" if foreign else None
    if key == "state:sys.path_importer_cache.finders":
        # a new entry is the import system's own; a path whose finder was replaced is an import hijack
        paths = {str(e[0]) for e in added if isinstance(e, list) and e}
        hijacked = sorted({str(e[0]) for e in removed if isinstance(e, list) and e and str(e[0]) in paths})
        return f"the finder of sys.path entries replaced: {', '.join(hijacked[:3])}" if hijacked else None
    if key in _LOADED_LATER and event.get("before") == "<missing>":
        return None  # the module it reads was imported meanwhile (numpy seeds its generator from entropy)
    if key == "state:threading.threads":
        return "a thread started at import is still running" if added else None
    return f"{event.get('before', '?')} -> {event.get('after', '?')}"


def _target(key: str) -> str:
    kind, _, rest = key.partition(":")
    if kind == "mod":
        mod, _, attr = rest.rpartition(":")
        return f"{mod}.{attr}"
    if kind == "kw":
        mod, _, attr = rest.rpartition(":")
        return f"{mod}.{attr}.__kwdefaults__"
    if kind == "fn":
        mod, _, attr = rest.rpartition(":")
        return f"{mod}.{attr} (its name, doc or attributes)"
    if kind == "cell":
        mod, _, attr = rest.rpartition(":")
        return f"{mod}.{attr} (a closure cell)"
    if kind == "ccell":
        mod, holder, attr = rest.split(":", 2)
        return f"{mod}.{holder}.{attr} (a closure cell)"
    if kind == "box":
        mod, _, attr = rest.rpartition(":")
        return f"{mod}.{attr} (its contents)"
    if kind == "cbox":
        mod, holder, attr = rest.split(":", 2)
        return f"{mod}.{holder}.{attr} (its contents)"
    if kind == "cobj":
        mod, cls, holder, attr = rest.split(":", 3)
        return f"{mod}.{cls}.{holder}.{attr}"
    if kind in ("cls", "obj"):
        mod, holder, attr = rest.split(":", 2)
        return f"{mod}.{holder}.{attr}"
    if kind == "abs":
        mod, holder, attr = rest.split(":", 2)
        return f"{mod}.{holder}.{attr}.__isabstractmethod__"
    if kind == "sysmod":
        return f"sys.modules[{rest!r}]"
    return rest


def _line(value: object) -> int | None:
    """A line the child reported, or None when it names none (0 for code without a line, e.g. text a codec
    produced): an effect without a line is FT131, never a crash of the trace."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


_SETTER_PREFIXES = ("set_", "use_", "enable_", "disable_", "add_", "register")


def _setter(via: str, key: str = "") -> bool:
    """A public function that sets or registers something (the last part of the dotted name the child
    reported): `set_x`, `setX` (`logging.setLoggerClass`), `add_x` (`mimetypes.add_type`), `register*`. A
    method of a class (`torch.nn.Module.register_forward_pre_hook` on the contribution's own module, which
    counts its handles in a class attribute) is not one for what it changes in a class (`cls:`/`cbox:` keys):
    it sets something on its instance; the process-wide form is a module's function
    (`torch.nn.modules.module.register_module_forward_pre_hook`). What such a method changes in a module's
    state (`mimetypes.MimeTypes.add_type` on the module's shared `_db`: its `types_map`) is a setter's."""
    owner, _, last = via.rpartition(".")
    if owner.rpartition(".")[2][:1].isupper() and key.startswith(("cls:", "cbox:")):
        return False
    camel = len(last) > 3 and last[:3] in ("set", "add") and last[3].isupper()
    return last.startswith(_SETTER_PREFIXES) or camel or last in ("manual_seed", "seed", "manual_seed_all",
                                                                  "seed_all")


def _lazy_private(event: dict[str, Any]) -> bool:
    """A private module attribute that was None, set by a library function the contribution called: a lazy
    cache filled on first use (`urllib.parse._typeprog`, compiled by `mimetypes.guess_type`)."""
    key: str = event["key"]
    return key.startswith("mod:") and key.rpartition(":")[2].startswith("_") and event.get("before") == "None"


def _bookkeeping(key: str, via: str) -> bool:
    """A change a library function made while the contribution called it that is its own bookkeeping: its
    own package's state, or the contents of a table (a cache such as `inspect.modulesbyfile`). An attribute
    of another package rebound (`typing.get_type_hints` evaluating text that patches `json.loads`) is the
    contribution's doing. What a public setter (`torch.set_printoptions`, `set_*`, `use_*`, `enable_*`,
    `disable_*`, `manual_seed`) changes is never its bookkeeping: that is the process-wide setting it is for
    (the library's own import-time work is absorbed in the child, not here)."""
    if _setter(via, key):
        return False
    if key == "state:atexit.callbacks":
        return True  # a library function's own exit hook (one of the contribution's making is `own_value`)
    if key.startswith("state:"):
        return False
    if key.startswith(("box:", "cbox:")):
        return True
    module = key.split(":", 2)[1]
    return module.split(".")[0] == via.split(".")[0]


def _library_loggers(event: dict[str, Any], via: str, plan: TracePlan) -> bool:
    """Only new loggers, made by a library function the contribution called under that library's own name
    (`multiprocessing.util.get_logger` makes the `multiprocessing` logger, not propagating, on first use):
    its own logging's setup. A logger changed or removed, or one named for another package, stays an effect;
    so does what a setter (`logging.setLoggerClass`, ...) changes."""
    if event["key"] != "state:logging.loggers" or _setter(via, event["key"]):
        return False
    top = via.split(".")[0]
    if event.get("removed"):
        return False
    names = [str(e[0]) for e in event.get("added") or [] if isinstance(e, list) and e]
    foreign = [n for n in names if not _own_name(n, plan)]
    return bool(foreign) and all(n == top or n.startswith(top + ".") for n in foreign)


def _effects(events: list[dict[str, Any]], plan: TracePlan, located: dict[str, tuple[str | None, int | None]],
             indirect: dict[str, str], also: dict[str, list[tuple[str | None, int | None, str]]] | None = None
             ) -> tuple[list[Effect], list[Effect]]:
    effects: list[Effect] = []
    errors: list[Effect] = []
    for ev in events:
        kind = ev.get("kind")
        if kind == "import-error":
            errors.append(Effect(kind=EffectKind.INTERPRETER, target=str(ev.get("target")),
                                 detail=str(ev.get("detail", "")), path=ev.get("path"),
                                 line=_line(ev.get("line"))))
        elif kind == "state-diff":
            what = _state_effect(ev, plan)
            if what is None:
                continue
            first = located.get(ev["key"], (None, None))
            if first == _ABSORBED:
                continue
            for path, line, via in [(*first, indirect.get(ev["key"], "")), *(also or {}).get(ev["key"], [])]:
                if via and not ev.get("own_value") and (_bookkeeping(ev["key"], via) or _lazy_private(ev)
                                                        or _library_loggers(ev, via, plan)):
                    continue  # a library function's own bookkeeping, not a patch by the PR
                effects.append(Effect(kind=EffectKind.FOREIGN_STATE, target=_target(ev["key"]),
                                      detail=f"{what} (through {via})" if via else what,
                                      path=path, line=_line(line), how="snapshot"))
        elif kind in _KINDS:
            target = str(ev.get("target", ""))
            if kind == "engine-registration" and any(fnmatch.fnmatchcase(target, p)
                                                     for p in plan.allowed_registrations):
                continue
            effects.append(Effect(kind=_KINDS[kind], target=target, detail=str(ev.get("detail", "")),
                                  path=ev.get("path"), line=_line(ev.get("line")),
                                  how="standin" if kind.startswith("engine-") else "audit"))
    return effects, errors


def _calls(passes: list[list[dict[str, Any]]], plan: TracePlan) -> tuple[CallResult, ...]:
    """What the child's `done` (privileged: only the tracer's `main` sends it) says of each call the plan
    asked for, in every pass: a call is ok only when every pass says so; one a pass leaves out is not ok."""
    want = ([("smoke", None)] if plan.smoke else []) + [(name, fused) for name, fused, _ in plan.guard_points
                                                         if plan.guard]
    got: dict[str, list[dict[str, Any]]] = {}
    for events in passes:
        done: dict[str, Any] = next((e for e in reversed(events) if e.get("kind") == "done"), {})
        for c in done.get("calls") or []:
            if isinstance(c, dict) and isinstance(c.get("name"), str):
                got.setdefault(c["name"], []).append(c)
    out: list[CallResult] = []
    for name, fused in want:
        reports = got.get(name, [])
        bad = next((c for c in reports if c.get("returned") is not True
                    or (fused is not None and c.get("fused") is not fused)), None)
        if not reports or len(reports) < len(passes):
            out.append(CallResult(name=name, ok=False, detail="the trace did not report this call"))
        elif bad is not None:
            detail = str(bad.get("detail") or "")
            if bad.get("returned") is True:
                detail = (f"the guard answered {'fused' if bad.get('fused') else 'stock'} at "
                          f"{bad.get('point', '?')}, where the envelope says {'fused' if fused else 'stock'}")
            out.append(CallResult(name=name, ok=False, detail=detail[:300],
                                  path=bad.get("path") if isinstance(bad.get("path"), str) else None,
                                  line=_line(bad.get("line"))))
        else:
            out.append(CallResult(name=name, ok=True))
    return tuple(out)


def _tampered_effects(plan: TracePlan, exc: TraceFailure, timeout: float,
                      cancel: threading.Event | None) -> list[Effect]:
    """The effects of a pass whose code changed the tracer's own objects (its report authenticated, the
    objects put back when found): a first pass's diffs are located by a second, which is read whether or
    not it fails the same way. Only ever more findings: the trace stays FAILED."""
    events = exc.events
    keys = [e["key"] for e in events if e.get("kind") == "state-diff" and _state_effect(e, plan)]
    located: dict[str, tuple[str | None, int | None]] = {}
    if keys and not any(e.get("kind") == "located" for e in events):
        try:
            second = run_child(plan, locate=keys[:MAX_LOCATE], timeout=timeout, cancel=cancel).events
        except TraceFailure as again:
            second = again.events
        located = {e["key"]: (e.get("path"), e.get("line")) for e in second
                   if e.get("kind") == "located" and e.get("changed") and isinstance(e.get("key"), str)}
    return _effects(events, plan, located, {}, {})[0]


def trace_plan(plan: TracePlan, *, timeout: float = TIMEOUT_S,
               cancel: threading.Event | None = None) -> TraceFacts:
    """Run the trace for a plan (two passes at most) and return its facts."""
    facts, _ = _trace(plan, timeout=timeout, cancel=cancel)
    return facts


def _trace(plan: TracePlan, *, timeout: float, cancel: threading.Event | None,
           warm: Warm | None = None) -> tuple[TraceFacts, list[dict[str, str | None]]]:
    """The facts, and the digests of the files each pass was given (`warm`: a prestarted child for the
    first pass, consumed either way)."""
    if not plan.targets:
        if warm is not None:
            warm.close()
        return TraceFacts(status=TraceStatus.NOT_RUN,
                          reason="no changed Python module of the model to trace"), []
    started = time.monotonic()
    copied: list[dict[str, str | None]] = []
    try:
        first = run_child(plan, timeout=timeout, cancel=cancel, warm=warm)
        copied.append(first.copied)
        events, isolation = first.events, first.isolation
        reports = [events]
        passes = 1
        keys = [e["key"] for e in events if e.get("kind") == "state-diff" and _state_effect(e, plan)]
        located: dict[str, tuple[str | None, int | None]] = {}
        indirect: dict[str, str] = {}
        also: dict[str, list[tuple[str | None, int | None, str]]] = {}
        if keys:
            second = run_child(plan, locate=keys[:MAX_LOCATE], timeout=timeout, cancel=cancel)
            copied.append(second.copied)
            reports.append(second.events)
            passes = 2
            for e in second.events:
                if e.get("kind") == "located":
                    if e.get("changed"):
                        located[e["key"]] = (e.get("path"), e.get("line"))
                        if e.get("indirect"):
                            indirect[e["key"]] = str(e["indirect"])
                        also[e["key"]] = [(str(a[0]), _line(a[1]), str(a[2] or ""))
                                          for a in e.get("also") or [] if isinstance(a, list) and len(a) == 3]
                    elif e.get("absorbed"):
                        located[e["key"]] = _ABSORBED
    except TraceFailure as exc:
        # the tracer's own objects changed (and put back) under an authenticated report: what it saw stays a
        # finding at its line (a locate pass names the lines of its diffs), beside the failure
        seen = _tampered_effects(plan, exc, timeout, cancel) if exc.events else []
        return TraceFacts(status=TraceStatus.FAILED, reason=str(exc), fix=exc.fix, modules=plan.targets,
                          effects=tuple(seen), seconds=round(time.monotonic() - started, 2)), copied
    effects, errors = _effects(events, plan, located, indirect, also)
    return TraceFacts(status=TraceStatus.FAILED if errors else TraceStatus.OK,
                      reason="a changed module failed to import under the trace" if errors else "",
                      fix=("make the module importable on CPU without network, GPU or credentials"
                           if errors else ""),
                      modules=plan.targets, effects=tuple(effects), import_errors=tuple(errors),
                      isolation=isolation, seconds=round(time.monotonic() - started, 2),
                      passes=passes, calls=_calls(reports, plan)), copied


@dataclass(frozen=True)
class PreparedTrace:
    """A trace planned, keyed and looked up (`prepare_trace`): `hit` holds the cached facts, or a failure to
    plan; else `plan` is to be run (`run_prepared`)."""

    hit: TraceFacts | None = None
    plan: TracePlan | None = None
    key: str | None = None
    digests: dict[str, str] | None = None
    cache_dir: Path | None = None
    before: dict[str, tuple[int, int, int]] = field(default_factory=dict)


def prepare_trace(ctx: Context, *, cache_dir: Path | None = None) -> PreparedTrace:
    """Plan the trace of a Context, key it and look the key up (the part of `gather_trace` that runs no
    child; `fasttrack verify` does it before the graph build, the child's run beside it)."""
    try:
        plan = plan_files(ctx)
        digests = file_digests(plan) if cache_dir is not None and plan.targets else None
        key = cache_key(plan, digests, TIMEOUT_S) if cache_dir is not None and digests is not None else None
        if key is not None and cache_dir is not None and (hit := load(cache_dir, key)) is not None:
            return PreparedTrace(hit=hit)
        plan = with_preimport(plan)
    except (OSError, ValueError) as exc:
        return PreparedTrace(hit=TraceFacts(status=TraceStatus.FAILED,
                                            reason=f"the trace could not be planned: {exc}",
                                            fix="check that the contribution's files are readable"))
    return PreparedTrace(plan=plan, key=key, digests=digests, cache_dir=cache_dir,
                         before=listing(cache_dir) if cache_dir is not None else {})


def run_prepared(prepared: PreparedTrace, *, cancel: threading.Event | None = None,
                 warm: Warm | None = None) -> TraceFacts:
    """Run a prepared trace (or return its hit) and keep its facts in the cache when they may be kept.
    `warm`: a prestarted child (`sandbox.prestart`), used for the first pass when the plan's pre-imports begin
    with its stack, closed otherwise."""
    if prepared.plan is None:
        if warm is not None:
            warm.close()
        assert prepared.hit is not None
        return prepared.hit
    plan, key, digests, cache_dir = prepared.plan, prepared.key, prepared.digests, prepared.cache_dir
    facts, copied = _trace(plan, timeout=TIMEOUT_S, cancel=cancel, warm=warm)
    if cache_dir is not None and (listing(cache_dir) != prepared.before or facts.status is not TraceStatus.OK
                                  or facts.effects or facts.import_errors):
        # The traced code runs as this user and could have written to the cache directory (a planted
        # "clean" entry under the key of its next version): after a trace that had any effect, failed, or
        # during which the directory changed, every entry goes and this trace is not kept.
        clear(cache_dir)
        return facts
    # Stored only when every pass was given exactly the bytes the key names.
    if key is not None and cache_dir is not None and digests is not None and copied \
            and all(c == digests for c in copied):
        store(cache_dir, key, facts)
    return facts


def gather_trace(ctx: Context, *, cache_dir: Path | None = None,
                 cancel: threading.Event | None = None, warm: Warm | None = None) -> TraceFacts:
    """The trace's facts for a Context (fails closed: any error is a FAILED trace, never a pass).

    With `cache_dir`, a finished trace is kept there under a digest of everything the child could see
    (`fasttrack.confinement.trace.cache`) and read back by the next run with the same key. `cancel` stops
    a running trace (its facts are then FAILED). `warm`: a prestarted child (see `run_prepared`)."""
    try:
        prepared = prepare_trace(ctx, cache_dir=cache_dir)
    except BaseException:
        if warm is not None:
            warm.close()
        raise
    return run_prepared(prepared, cancel=cancel, warm=warm)
