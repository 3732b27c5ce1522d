"""FT11x blast radius from the import graph (computed by fasttrack.confinement.blast_radius)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from fasttrack.confinement.import_effects import new_acts
from fasttrack.confinement.model_units import UnitIndex
from fasttrack.confinement.zones import in_model_root
from fasttrack.facts.model import Facts
from fasttrack.findings import Finding
from fasttrack.rules.base import Catalogue
from fasttrack.verdict import AffectedModel, BlastRadius, ChangeStatus, Witness

catalogue = Catalogue("blast")

_LISTED = 5  # names spelled out in one aggregated message


_ARROWS = {"imports": " -> ", "parent-package": " -> (runs its parent package) ",
           "names-in-string": " -> (names in a string) ", "registry": " -> (a registry filled by) "}


def chain_text(w: Witness) -> str:
    """``a:12 -> b:7 (in a function) -> c``: each hop with the importer's line, lazy hops marked, and hops
    that are not imports named (``-> (runs its parent package) p``, ``-> (names in a string) m``)."""
    out = ""
    for i, mod in enumerate(w.chain):
        if i:
            kind = w.links[i - 1] if i - 1 < len(w.links) else "imports"
            out += _ARROWS.get(kind, " -> ")
        if i < len(w.lines):
            line = w.lines[i]
            lazy = i < len(w.function_level) and w.function_level[i]
            out += f"{mod}{f':{line}' if line else ''}{' (in a function)' if lazy else ''}"
        else:
            out += mod
    return out


def _verb(w: Witness) -> str:
    """"imports" for a direct import of the changed module, "reaches" for a chain through the model's code."""
    if w.link == "names-in-string" and len(w.chain) == 2:
        return "names in a string"
    if w.link == "registry" and len(w.chain) == 2:
        return "holds the registry filled by"
    return "imports" if len(w.chain) == 2 else "reaches"


def _runs_only_through_parent(w: Witness | None) -> bool:
    """The unit runs the changed code only because it imports something below a changed-code package:
    FT114 judges it (with acts_at_import), not FT110/FT111."""
    return w is not None and w.link == "parent-package"


def _changed_path(w: Witness) -> str:
    return w.changed_path or w.chain[-1].replace(".", "/") + ".py"


def _in_target_root(ctx: Facts, path: str) -> bool:
    return ctx.model is not None and in_model_root(ctx.policy, path, ctx.model)


def _is_model_code(ctx: Facts, path: str) -> bool:
    units = UnitIndex(ctx.policy.models, ctx.policy.blast_radius.root_package)
    return _in_target_root(ctx, path) or units.unit_of_path(path) is not None


def _archs(names: list[str], limit: int = 6) -> str:
    if not names:
        return "no registered architecture"
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _unit_label(a: AffectedModel) -> str:
    kind = "model package" if a.kind == "package" else "legacy model file" if a.kind == "legacy" else a.kind
    return f"{kind} {a.name} ({a.path or a.module})"


@catalogue.rule("FT110", "Another model unit imports code this PR changes.")
def other_model_affected(ctx: Facts) -> Iterator[Finding]:
    """The import graph of the head tree says another model unit (a ``vllm/models/<m>/`` package or a legacy
    ``vllm/model_executor/models/<name>.py`` file, with every registered architecture that runs through it)
    imports a changed module, directly or through the target model's own modules. A fast-track PR must
    change only its own model: when the change reaches another model, that model's users get code its
    owners never reviewed. One finding per affected model unit, with the witness import chain; when the PR
    changes shared code, one finding per changed shared module summarises the model units behind it."""
    radius = ctx.blast_radius
    if not radius.computed:
        return
    by_shared_change: dict[str, list[AffectedModel]] = defaultdict(list)
    for a in radius.models:
        if a.witness is None or _runs_only_through_parent(a.witness):
            continue
        changed = _changed_path(a.witness)
        if ctx.model is not None and not _in_target_root(ctx, changed):
            by_shared_change[changed].append(a)
            continue
        yield Finding.error(
            "FT110",
            f"{_unit_label(a)} {_verb(a.witness)} {a.witness.chain[-1]}, which this PR changes "
            f"({chain_text(a.witness)}); it serves {_archs(a.architectures)}",
            path=changed,
            fix=f"leave what {a.name} uses from {a.witness.chain[-1]} as it is (put the new code in a new "
                f"module only {ctx.model or 'the model'} imports), or send the PR to normal review with "
                f"{a.name}'s owners",
        )
    for changed, units in sorted(by_shared_change.items()):
        names = ", ".join(f"{u.name} ({_archs(u.architectures, 3)})" for u in units[:_LISTED])
        more = f" and {len(units) - _LISTED} more" if len(units) > _LISTED else ""
        example = f"; e.g. {chain_text(units[0].witness)}" if units[0].witness else ""
        yield Finding.error(
            "FT110",
            f"{changed} is outside {ctx.model}'s root and {len(units)} other model unit(s) import it: "
            f"{names}{more}{example}",
            path=changed,
            fix="keep the change inside the model's own package; a change to code other models import goes "
                "to normal review",
        )
    listed = sum(1 for a in radius.models if not _runs_only_through_parent(a.witness))
    unlisted = radius.models_total - radius.models_through_parent - listed
    if unlisted > 0:
        yield Finding.error(
            "FT110",
            f"{unlisted} more affected model unit(s) are not listed (the policy's "
            f"max_witnesses is {ctx.policy.blast_radius.max_witnesses})",
            fix="narrow the PR to the model's own package",
        )


@catalogue.rule("FT111", "Shared code imports model code this PR changes.")
def shared_imports_changed_model_code(ctx: Facts) -> Iterator[Finding]:
    """A module outside every model unit (shared layers, warmup, workers, attention backends ...) imports a
    changed module of model code, directly or through the target model's own modules, so the change runs
    inside shared code paths. Function-level imports count (the witness marks them): they run whenever the
    function does. Hub modules from the policy (the registry) are call-in points and are not reported here
    (FT112 lists them). Shared modules affected because the PR changes shared code itself are not reported
    here either: the zone rules flag that path, and FT112 counts what imports it."""
    radius = ctx.blast_radius
    if not radius.computed:
        return
    for s in radius.shared:
        if s.hub or _runs_only_through_parent(s.witness):
            continue
        changed = _changed_path(s.witness)
        if not _is_model_code(ctx, changed):
            continue
        zone = f" ({s.zone})" if s.zone else ""
        lazy = " inside a function" if s.witness.function_level[:1] == [True] else ""
        yield Finding.error(
            "FT111",
            f"shared module {s.module}{zone} {_verb(s.witness)}{lazy} {s.witness.chain[-1]}, which this PR "
            "changes "
            f"({chain_text(s.witness)})",
            path=changed,
            fix=f"leave the code {s.module} imports unchanged (add new modules instead of editing the ones "
                "shared code imports), or send the PR to normal review",
        )


def _acts_anew(ctx: Facts, path: str) -> bool:
    """The PR adds or changes import-time code of `path` (FT114): when the base revision of a modified file
    is at hand and its acting statements are the same, the import does what it did before."""
    change = next((c for c in ctx.changes if c.path == path), None)
    head = ctx.head_text(path) if change is not None else None
    if change is None or head is None:
        return True
    base = None
    if change.status in (ChangeStatus.MODIFIED, ChangeStatus.RENAMED):
        base = ctx.base_source(change.path)
        if base is None:
            return True  # no base to compare with: fail closed
    return new_acts(head, base, ctx.policy.blast_radius.inert_import_calls)


@catalogue.rule("FT114", "A unit runs changed code only through a parent package's __init__.")
def runs_through_parent_package(ctx: Facts) -> Iterator[Finding]:
    """Importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first: a unit that imports anything below
    a package whose ``__init__`` (or what it imports at module level) the PR changes runs the changed code
    without using it. It is named in the radius either way; it is an error only when the changed module
    does something at import (``BlastRadius.acts_at_import``: module-level statements other than imports,
    defs, classes, constant assignments, docstrings and the policy's ``inert_import_calls``; a runtime
    effect trace may set it) *and* the PR adds or changes such a statement (compared with the base
    revision of a modified file; a new file's are all new), otherwise an info: an honest kernel edit is not
    blocked because another model imports a sibling module."""
    radius = ctx.blast_radius
    if not radius.computed:
        return
    rows: list[tuple[str, Witness, bool]] = [
        (_unit_label(a), a.witness, False) for a in radius.models
        if a.witness is not None and _runs_only_through_parent(a.witness)]
    rows += [(f"shared module {s.module}", s.witness, s.hub) for s in radius.shared
             if _runs_only_through_parent(s.witness)]
    for label, w, hub in rows:
        changed = _changed_path(w)
        if not _is_model_code(ctx, changed):
            continue  # a change to shared code itself: the zone rules judge it
        gone = w.chain[-1] in radius.removed_modules or any(
            c.path == changed and c.status is ChangeStatus.DELETED for c in ctx.changes)
        acts = gone or (radius.acts_at_import.get(w.chain[-1], True) and _acts_anew(ctx, changed))
        text = (f"{label} runs {w.chain[-1]}, which this PR changes, only through a parent package's "
                f"__init__ ({chain_text(w)})")
        if gone and not hub:
            yield Finding.error("FT114", f"{text}; it is deleted, so importing it through the package now "
                                "fails", path=changed,
                                fix=f"keep {w.chain[-1]} (or the package's import of it), or send the PR to "
                                    "normal review")
        elif acts and not hub:
            yield Finding.error("FT114", f"{text}; the changed module does something at import, so that "
                                "unit's import now runs it", path=changed,
                                fix=f"keep {w.chain[-1]}'s module-level code to imports, defs, classes and "
                                    "constants (do the work in a function the model calls), or send the PR "
                                    "to normal review")
        else:
            why = "a hub" if hub else "the changed module only defines things at import"
            yield Finding.info("FT114", f"{text}; not an error: {why}", path=changed)


def _summary(ctx: Facts, r: BlastRadius) -> str:
    other = sorted({a for m in r.models for a in m.architectures})
    own = [a for a in r.architectures if a not in other]
    hubs = [s.module for s in r.shared if s.hub]
    hub_text = f" ({len(hubs)} of them hubs: {', '.join(hubs)})" if hubs else ""
    weak = r.models_through_parent + r.shared_through_parent
    weak_text = f"; {weak} of them only through a parent package's __init__" if weak else ""
    parts = [
        f"{len(r.changed_modules)} changed module(s) reach {r.models_total} other model unit(s) and "
        f"{r.shared_total} shared module(s){hub_text}{weak_text}",
        f"architectures served by the changed code: {_archs(own, 8)}"
        + (f"; through other model units: {_archs(other, 8)}" if other else ""),
    ]
    if r.hubs_changed:
        parts.append("changed hub(s), importers not listed: "
                     + ", ".join(f"{h} ({n})" for h, n in sorted(r.hubs_changed.items())))
    if r.naive_closure is not None and r.graph_modules:
        parts.append(f"the naive transitive closure would reach {r.naive_closure} of {r.graph_modules} "
                     "modules")
    if r.seconds is not None:
        parts.append(f"{'cached' if r.graph_cached else 'fresh'} graph, {r.seconds:.2f}s")
    return "blast radius: " + "; ".join(parts)


@catalogue.rule("FT112", "Summary of the blast radius.")
def blast_radius_summary(ctx: Facts) -> Iterator[Finding]:
    """Information, never a failure: how many changed modules, how many other model units and shared
    modules import them (before the witness cap), which registered architectures run through the changed
    files (the model's own, and those of other models reached), changed hub modules, and how far the naive
    transitive closure would have gone, for scale."""
    r = ctx.blast_radius
    if not r.computed:
        return
    if not r.changed_modules:
        yield Finding.info("FT112", f"blast radius: {r.note or 'no Python module changed'}")
        return
    yield Finding.info("FT112", _summary(ctx, r))


@catalogue.rule("FT113", "The blast radius could not be computed.")
def blast_radius_not_computed(ctx: Facts) -> Iterator[Finding]:
    """Fail closed: when the import graph of the head tree cannot be built (a file grimp cannot parse, a tree
    without the root package, a registry that cannot be read statically), nobody can say what the change
    reaches, so the verdict fails and says why."""
    r = ctx.blast_radius
    if r.computed:
        return
    yield Finding.error(
        "FT113",
        r.note or "the blast radius was not computed",
        fix="fix what the note names (e.g. a syntax error in a changed file) and run fasttrack again",
    )
