"""The blast radius from the import graph of the head tree.

Which modules outside the target model's root import a changed module, directly or through a chain of modules
inside the model root; each is classified as another model unit (with the registered architectures it serves)
or a shared module (with its policy zone), and gets one witness chain with line numbers. The walk stops at the
first importer outside the root: past that point every chain reaches "everything" through hub modules (on
vLLM 0.33 the naive closure of any Kimi K3 module is over half the tree; see docs/blast-radius.md), which says
nothing a maintainer can act on.

Semantics in detail:

- Changed modules are the changed ``.py`` files under the root package, both sides of a rename. A module the
  head no longer has (deleted, renamed away) is named from its base-side path; its importers are the head
  modules whose source still imports it (found from their AST: grimp drops imports it cannot resolve).
  Importers that the PR edited to drop the import are changed modules themselves and count as such.
- Imports under ``if TYPE_CHECKING:`` are ignored (policy ``exclude_type_checking_imports``, default on):
  they never run.
- Function-level (lazy) imports are followed unless the policy says otherwise (``include_lazy_imports``):
  they run whenever the function does. Witness chains mark them.
- Hub modules (policy ``hub_modules``, fnmatch patterns over module names: the registry and its package) are
  call-in points that exist to reach every model: when a hub imports changed model code it is listed (marked
  hub) but not treated as a leak; when a hub is itself changed its importers are counted, not listed.
"""

from __future__ import annotations

import fnmatch
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fasttrack.changes.model import Change
from fasttrack.confinement.graph import (
    GraphBuildError,
    ImportSite,
    SourceScopes,
    default_graph_cache_dir,
    load_module_graph,
    module_name,
)
from fasttrack.confinement.model_units import (
    RegistryError,
    UnitIndex,
    architectures_through,
    model_code_modules,
    read_registry,
)
from fasttrack.confinement.zones import classify, in_model_root
from fasttrack.policy import Policy
from fasttrack.verdict import AffectedModel, AffectedShared, BlastRadius, ChangeStatus, Witness

_DEFAULT = object()


@dataclass(frozen=True)
class _Step:
    """How a module reaches a changed module: it imports `target` at `sites`."""

    target: str
    sites: tuple[ImportSite, ...]


def changed_module_paths(changes: tuple[Change, ...], package: str) -> tuple[dict[str, str], dict[str, str]]:
    """(present, removed): changed modules on the head side and modules the PR removes, each -> its path.

    A rename counts on both sides; a copy leaves its source as it was; a deletion names the base-side path.
    """
    prefix = package.replace(".", "/") + "/"
    present: dict[str, str] = {}
    removed: dict[str, str] = {}
    for c in changes:
        sides: list[tuple[str, bool]] = []
        if c.status is ChangeStatus.DELETED:
            sides.append((c.path, True))
        else:
            sides.append((c.path, False))
            if c.status is ChangeStatus.RENAMED and c.old_path and c.old_path != c.path:
                sides.append((c.old_path, True))
        for path, gone in sides:
            if not path.startswith(prefix):
                continue
            mod = module_name(path)
            if mod is None:
                continue
            (removed if gone else present)[mod] = path
    for mod in present:
        removed.pop(mod, None)  # deleted on one side, re-added on another: it exists in the head
    return present, removed


def compute_blast_radius(policy: Policy, head_dir: Path, changes: tuple[Change, ...],
                         model: str | None, *, cache_dir: Path | object | None = _DEFAULT,
                         tree_id: str | None = None) -> BlastRadius:
    """Which other model units and shared modules import what the PR changed, each with a witness chain.

    Never raises for a problem with the tree: a radius that could not be computed comes back with
    ``computed=False`` and the reason in ``note`` (FT113 turns that into an error: fail closed).
    `cache_dir` defaults to ``~/.cache/fasttrack/graphs``; ``None`` disables the graph cache. `tree_id`, when
    the caller has one that names head_dir's content (``git-tree:<sha>`` for a tree materialised from git),
    keys the graph cache instead of hashing every file.
    """
    t0 = time.perf_counter()
    graphs = default_graph_cache_dir() if cache_dir is _DEFAULT else cache_dir
    assert graphs is None or isinstance(graphs, Path)
    try:
        radius = _compute(policy, head_dir, changes, model, graphs, tree_id)
    except (GraphBuildError, RegistryError, OSError) as exc:
        radius = BlastRadius(computed=False, note=f"blast radius not computed: {exc}")
    except Exception as exc:  # fail closed with the reason, never crash the verdict
        radius = BlastRadius(computed=False,
                             note=f"blast radius not computed: internal error {type(exc).__name__}: {exc}")
    return radius.model_copy(update={"seconds": round(time.perf_counter() - t0, 3)})


def _compute(policy: Policy, head_dir: Path, changes: tuple[Change, ...], model: str | None,
             cache_dir: Path | None, tree_id: str | None) -> BlastRadius:
    spec = policy.blast_radius
    package = spec.root_package
    present, removed = changed_module_paths(changes, package)
    if not present and not removed:
        return BlastRadius(computed=True, note=f"no Python module under {package.replace('.', '/')}/ changed")
    if not head_dir.is_dir():
        raise GraphBuildError(f"the head tree {head_dir} does not exist")

    load = load_module_graph(head_dir, package, exclude_type_checking=spec.exclude_type_checking_imports,
                             cache_dir=cache_dir, tree_id=tree_id)
    graph = load.graph
    scopes = SourceScopes(head_dir)
    units = UnitIndex(policy.models, package)
    registry = read_registry(head_dir, policy.models, package)
    by_module = registry.by_module()

    def path_of(m: str) -> str:
        return graph.path_of(m) or present.get(m) or removed.get(m) or m.replace(".", "/") + ".py"

    def in_root(m: str, root: str | None) -> bool:
        return root is not None and in_model_root(policy, path_of(m), root)

    def own_root(m: str) -> str | None:
        """The root a walk from changed module `m` may cross: the target model's, or without a target
        (several models touched, or none inferred), the model package `m` itself belongs to."""
        if model is not None:
            return model
        unit = units.unit_of_module(m, path_of(m))
        return unit.name if unit is not None and unit.kind == "package" else None

    def is_hub(m: str) -> bool:
        return any(fnmatch.fnmatchcase(m, pat) for pat in spec.hub_modules)

    # Modules outside grimp's graph (deleted or renamed away; in a directory without __init__.py): their
    # importers are read from the head sources that import them.
    unseen = sorted(m for m in present if m not in graph.modules)
    starts = sorted(set(present) | set(removed))
    scanned: dict[str, dict[str, tuple[ImportSite, ...]]] = {}
    lazy_sites: set[tuple[str, int]] = set()

    def importers(m: str) -> Mapping[str, tuple[ImportSite, ...]]:
        if m in graph.modules:
            return graph.importers(m)
        if m not in scanned:
            found_by: dict[str, tuple[ImportSite, ...]] = {}
            for found in scopes.find_imports_of(m, graph.files, package):
                found_by[found.importer] = (*found_by.get(found.importer, ()),
                                            ImportSite(found.line, found.contents))
                if found.function_level:
                    lazy_sites.add((found.importer, found.line))
            scanned[m] = found_by
        return scanned[m]

    def function_level(importer: str, site: ImportSite) -> bool:
        if (importer, site.line) in lazy_sites:
            return True
        return scopes.function_level(path_of(importer), site.line)

    def edge_is_lazy(importer: str, sites: tuple[ImportSite, ...]) -> bool:
        return bool(sites) and all(function_level(importer, s) for s in sites)

    changed = set(present) | set(removed)
    # Multi-source BFS upward: expand changed modules and modules inside the model root; stop at the first
    # importer outside the root. BFS order gives each affected module a shortest witness chain.
    step: dict[str, _Step] = {}
    affected: dict[str, _Step] = {}
    visited: set[str] = set(starts)
    hubs_changed: dict[str, int] = {}
    queue = deque((m, own_root(m)) for m in starts)
    while queue:
        m, root = queue.popleft()
        if m in present and is_hub(m) and not in_root(m, root):
            hubs_changed[m] = len(importers(m))
            continue
        for importer, sites in sorted(importers(m).items()):
            if importer == m:
                continue
            if not spec.include_lazy_imports and edge_is_lazy(importer, sites):
                continue
            if in_root(importer, root):
                if importer not in visited:
                    visited.add(importer)
                    step[importer] = _Step(m, sites)
                    queue.append((importer, root))
            elif importer not in affected and importer not in changed:
                # (a changed module is walked from on its own; it is not "affected" by another change)
                affected[importer] = _Step(m, sites)

    def witness(start: str) -> Witness:
        chain = [start]
        lines: list[int | None] = []
        lazy: list[bool] = []
        cur, link = start, affected[start]
        while True:
            chain.append(link.target)
            first = link.sites[0] if link.sites else None
            lines.append(first.line if first else None)
            lazy.append(edge_is_lazy(cur, link.sites))
            cur = link.target
            if cur not in step:  # a changed module (the walk's sources have no step)
                break
            link = step[cur]
        return Witness(chain=chain, lines=lines, function_level=lazy, changed_path=path_of(chain[-1]))

    model_code = model_code_modules(graph, units)
    root_modules = frozenset(m for m in graph.modules if in_root(m, model))

    models: dict[str, AffectedModel] = {}
    shared: list[AffectedShared] = []
    for mod in affected:
        w = witness(mod)
        unit = units.unit_of_module(mod, graph.path_of(mod))
        if unit is not None:
            prev = models.get(unit.name)
            if prev is None or (prev.witness is not None and len(w.chain) < len(prev.witness.chain)):
                archs = architectures_through(graph, [mod], model_code, by_module)
                models[unit.name] = AffectedModel(name=unit.name, kind=unit.kind, module=mod, witness=w,
                                                  architectures=archs, path=path_of(mod))
        else:
            zone, zone_kind = zone_of(policy, path_of(mod), model)
            shared.append(AffectedShared(module=mod, zone=zone, zone_kind=zone_kind, witness=w,
                                         path=path_of(mod), hub=is_hub(mod)))

    def leak_first(chain: list[str]) -> tuple[int, int]:
        return (0 if in_root(chain[-1], own_root(chain[-1])) else 1, len(chain))

    model_list = sorted(models.values(), key=lambda a: (*leak_first(a.witness.chain if a.witness else []),
                                                       a.name))
    shared_list = sorted(shared, key=lambda s: (*leak_first(s.witness.chain), s.module))
    cap = spec.max_witnesses

    # Architectures run through the changed modules; for modules the head no longer has (deleted, renamed
    # away), through the head modules that still import them.
    in_graph = {m for m in starts if m in graph.modules}
    in_graph.update(i for found in scanned.values() for i in found if i in graph.modules)
    served = set(architectures_through(graph, sorted(in_graph), model_code, by_module, extra=root_modules))
    for gone in removed:
        served.update(by_module.get(gone, []))
    # A registry edit serves the architectures whose entries it adds or changes.
    for c in changes:
        if registry.path is not None and c.path == registry.path and c.status is not ChangeStatus.DELETED:
            served.update(registry.touched_by({n for h in c.hunks for n, _ in h.added}))

    naive = graph.upstream(in_graph) | (in_graph - set(starts))
    notes = [
        f"{len(changed)} changed module(s); walked to the first importer outside "
        + (f"{model}'s root" if model else "the changed modules (no target model)"),
        "lazy (function-level) imports " + ("followed" if spec.include_lazy_imports else "ignored"),
        "TYPE_CHECKING imports " + ("ignored" if spec.exclude_type_checking_imports else "followed"),
        f"graph {'from the content cache' if load.from_cache else 'built with grimp'} "
        f"({len(graph.modules)} modules, {graph.import_count} imports, {load.seconds:.2f}s)",
    ]
    if hubs_changed:
        notes.append("hub modules changed, importers counted not listed: "
                     + ", ".join(f"{h} ({n})" for h, n in sorted(hubs_changed.items())))
    if unseen:
        notes.append("changed files grimp does not see (no __init__.py on their path), importers read from "
                     "the sources: " + ", ".join(path_of(m) for m in unseen))
    if scanned:
        notes.append(f"importers of {len(scanned)} module(s) outside grimp's graph read from the sources")
    if registry.note:
        notes.append(f"registry: {registry.note}")
    return BlastRadius(
        changed_modules=sorted(changed),
        models=model_list[:cap],
        shared=shared_list[:cap],
        architectures=sorted(served),
        computed=True,
        note="; ".join(notes),
        graph_modules=len(graph.modules),
        models_total=len(model_list),
        shared_total=len(shared_list),
        changed_paths={m: path_of(m) for m in sorted(changed)},
        removed_modules=sorted(m for m in removed if m not in graph.modules),
        hubs_changed=hubs_changed,
        naive_closure=len(naive),
        graph_cached=load.from_cache,
    )


def zone_of(policy: Policy, path: str, model: str | None) -> tuple[str, str]:
    """The policy zone of an affected shared path (name, kind), as the zone rules classify it."""
    zone = classify(policy, path, model)
    return zone.name, zone.kind.value
