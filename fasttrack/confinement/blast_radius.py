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
- What Python runs, not only what is imported (issue 15). Each step of a witness has a kind
  (``Witness.links``): ``imports``; ``parent-package`` (importing ``a.b.c`` runs ``a/__init__`` and
  ``a/b/__init__`` first, so a module importing anything below a changed package runs that package's
  ``__init__``); ``names-in-string`` (shared code names the module in a string: ``import_module``,
  ``sys.modules.get``, a table of module names; found when the graph is built and cached with it; a string
  that is not imported on its line, e.g. ``sys.modules.get``, links only to a changed module itself, since
  looking a module up does not run what it imports); and
  ``registry`` (a changed class subclasses an engine base whose ``__init_subclass__`` or metaclass
  registers it: the module holding the base, and its importers naming the registry, read what the change
  fills). The walk prefers chains without a parent-package step, then the shortest, so a unit reached
  only through a parent package is marked so (FT114 judges it with ``acts_at_import``).
"""

from __future__ import annotations

import fnmatch
import heapq
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from fasttrack.changes.model import Change
from fasttrack.confinement.graph import (
    GraphBuildError,
    GraphLoad,
    ImportSite,
    ModuleGraph,
    SourceScopes,
    default_graph_cache_dir,
    module_name,
    start_module_graph,
)
from fasttrack.confinement.import_effects import import_effect
from fasttrack.confinement.model_units import RegistryError, UnitIndex, architectures_through, read_registry
from fasttrack.confinement.subclass_registries import registering_bases
from fasttrack.confinement.zones import classify, in_model_root
from fasttrack.policy import Policy
from fasttrack.verdict import AffectedModel, AffectedShared, BlastRadius, ChangeStatus, LinkKind, Witness

_DEFAULT = object()
_IMPORTING = re.compile(r"\b(import_module|__import__|run_module|load_module|exec_module)\b")


@dataclass(frozen=True)
class _Step:
    """How a module reaches a changed module: it imports (or names) `target` at `sites`; for a
    parent-package step it imports `via`, a module below the package `target`."""

    target: str
    sites: tuple[ImportSite, ...]
    kind: LinkKind = "imports"
    via: str | None = None


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
    return start_blast_radius(policy, head_dir, changes, model, cache_dir=cache_dir, tree_id=tree_id)()


def start_blast_radius(policy: Policy, head_dir: Path, changes: tuple[Change, ...],
                       model: str | None, *, cache_dir: Path | object | None = _DEFAULT,
                       tree_id: str | None = None) -> Callable[[], BlastRadius]:
    """`compute_blast_radius` in two steps, so that the caller's own work runs while grimp scans: this call
    looks the graph up and, on a miss, starts its build (`graph.start_module_graph`); calling the result
    finishes the build, walks it and returns the radius (never raises, as `compute_blast_radius`). Its
    `seconds` are the radius's own time: the graph's (`GraphLoad.seconds`: the lookup, the build's steps
    and the scan's wall time) and the walk's, not the caller's work in between."""
    t0 = time.perf_counter()
    graphs = default_graph_cache_dir() if cache_dir is _DEFAULT else cache_dir
    assert graphs is None or isinstance(graphs, Path)
    try:
        pending = _start(policy, head_dir, changes, model, graphs, tree_id)
    except Exception as exc:
        failed = _failed(exc)
        pending = lambda: (failed, None)  # noqa: E731
    started = time.perf_counter() - t0

    def finish() -> BlastRadius:
        t1 = time.perf_counter()
        try:
            radius, own = pending()
        except Exception as exc:
            radius, own = _failed(exc), None
        seconds = own if own is not None else started + (time.perf_counter() - t1)
        return radius.model_copy(update={"seconds": round(seconds, 3)})

    return finish


def _failed(exc: Exception) -> BlastRadius:
    if isinstance(exc, GraphBuildError | RegistryError | OSError):
        return BlastRadius(computed=False, note=f"blast radius not computed: {exc}")
    # fail closed with the reason, never crash the verdict
    return BlastRadius(computed=False,
                       note=f"blast radius not computed: internal error {type(exc).__name__}: {exc}")


def _start(policy: Policy, head_dir: Path, changes: tuple[Change, ...], model: str | None,
           cache_dir: Path | None,
           tree_id: str | None) -> Callable[[], tuple[BlastRadius, float | None]]:
    """The radius's first step (the graph looked up or its build started) and the rest as a function, which
    returns the radius and its own seconds (the graph's and the walk's; None without a graph)."""
    spec = policy.blast_radius
    present, removed = changed_module_paths(changes, spec.root_package)
    if not present and not removed:
        done = BlastRadius(computed=True,
                           note=f"no Python module under {spec.root_package.replace('.', '/')}/ changed")
        return lambda: (done, None)
    if not head_dir.is_dir():
        raise GraphBuildError(f"the head tree {head_dir} does not exist")
    graph_of = start_module_graph(head_dir, spec.root_package,
                                  exclude_type_checking=spec.exclude_type_checking_imports,
                                  cache_dir=cache_dir, tree_id=tree_id)

    def rest() -> tuple[BlastRadius, float | None]:
        load = graph_of()
        t0 = time.perf_counter()
        walk = _Walk(policy, head_dir, model, load.graph, present, removed, cache_dir)
        walk.run()
        radius = walk.radius(changes, load)
        return radius, load.seconds + (time.perf_counter() - t0)

    return rest


class _Walk:
    """One blast-radius computation over a loaded graph (the steps of the module doc, one method each)."""

    def __init__(self, policy: Policy, head_dir: Path, model: str | None, graph: ModuleGraph,
                 present: dict[str, str], removed: dict[str, str], cache_dir: Path | None = None) -> None:
        self.policy = policy
        self.spec = policy.blast_radius
        self.model = model
        self.graph = graph
        self.present = present
        self.removed = removed
        self.changed = set(present) | set(removed)
        self.starts = sorted(self.changed)
        self.scopes = SourceScopes(head_dir)
        self.units = UnitIndex(policy.models, self.spec.root_package)
        self.registry = read_registry(head_dir, policy.models, self.spec.root_package, cache_dir=cache_dir)
        self.by_module = self.registry.by_module()
        # Importers of modules grimp's graph lacks (deleted, renamed away, in a directory without
        # __init__.py), read from the head sources; and which of those imports sit in a function.
        self.scanned: dict[str, dict[str, tuple[ImportSite, ...]]] = {}
        self.lazy_sites: set[tuple[str, int]] = set()
        # The walk's result: how each module inside a root reaches a change, and the affected modules.
        self.step: dict[str, _Step] = {}
        self.affected: dict[str, _Step] = {}
        self.hubs_changed: dict[str, int] = {}
        self._model_code: dict[str, bool] = {}
        # (parent-package steps, length, steps that are not imports) of the best chain to each module
        self.best: dict[str, tuple[int, int, int]] = {}
        self.registry_step: dict[str, _Step] = {}  # a registry-holding module -> the changed module
        self._below: dict[str, list[str]] | None = None
        self.head_dir = head_dir

    # ---------------------------------------------------------------------------------------- lookups

    def path_of(self, m: str) -> str:
        return (self.graph.path_of(m) or self.present.get(m) or self.removed.get(m)
                or m.replace(".", "/") + ".py")

    def in_root(self, m: str, root: str | None) -> bool:
        return root is not None and in_model_root(self.policy, self.path_of(m), root)

    def own_root(self, m: str) -> str | None:
        """The root a walk from changed module `m` may cross: the target model's, or without a target
        (several models touched, or none inferred), the model package `m` itself belongs to."""
        if self.model is not None:
            return self.model
        unit = self.units.unit_of_module(m, self.path_of(m))
        return unit.name if unit is not None and unit.kind == "package" else None

    def is_model_code(self, m: str) -> bool:
        """`m` belongs to a model unit (memoised: the architecture walks ask about the same modules)."""
        if m not in self._model_code:
            self._model_code[m] = self.units.unit_of_module(m, self.path_of(m)) is not None
        return self._model_code[m]

    def is_hub(self, m: str) -> bool:
        return any(fnmatch.fnmatchcase(m, pat) for pat in self.spec.hub_modules)

    def importers(self, m: str) -> Mapping[str, tuple[ImportSite, ...]]:
        if m in self.graph.modules:
            return self.graph.importers(m)
        if m not in self.scanned:
            found_by: dict[str, tuple[ImportSite, ...]] = {}
            for found in self.scopes.find_imports_of(m, self.graph.files, self.spec.root_package):
                site = ImportSite(found.line, found.contents)
                found_by[found.importer] = (*found_by.get(found.importer, ()), site)
                if found.function_level:
                    self.lazy_sites.add((found.importer, found.line))
            self.scanned[m] = found_by
        return self.scanned[m]

    def edge_is_lazy(self, importer: str, sites: tuple[ImportSite, ...]) -> bool:
        """Every import of the edge sits inside a function body."""
        path = self.path_of(importer)
        return bool(sites) and all((importer, s.line) in self.lazy_sites
                                   or self.scopes.function_level(path, s.line) for s in sites)

    def below(self, package: str) -> list[str]:
        """Graph modules below `package` (its submodules, at any depth)."""
        if self._below is None:
            index: dict[str, list[str]] = {}
            for mod in sorted(self.graph.modules):
                parts = mod.split(".")
                for i in range(1, len(parts)):
                    index.setdefault(".".join(parts[:i]), []).append(mod)
            self._below = index
        return self._below.get(package, [])

    def is_package(self, m: str) -> bool:
        return self.path_of(m).endswith("/__init__.py")

    def links(self, m: str) -> list[tuple[str, tuple[ImportSite, ...], LinkKind, str | None]]:
        """Every module that runs `m` one step away: its importers, the shared modules naming it in a string,
        and, for a package, the importers of anything below it (outside it), which run its __init__."""
        out: list[tuple[str, tuple[ImportSite, ...], LinkKind, str | None]] = [
            (i, sites, "imports", None) for i, sites in sorted(self.importers(m).items())]
        # A string that imports (import_module, __import__) runs the module and what it imports, like an
        # import; any other (sys.modules.get, a table of names) reaches the module itself: an edge only to a
        # changed module.
        for n, sites in sorted(self.graph.namers(m).items()):
            imports = any(_IMPORTING.search(x.contents) for x in sites)
            if not self.is_hub(n) and (m in self.changed or imports):
                out.append((n, sites, "names-in-string", None))
        if self.is_package(m):
            prefix = m + "."
            for sub in self.below(m):
                for importer, sites in sorted(self.graph.importers(sub).items()):
                    if importer != m and not importer.startswith(prefix):
                        out.append((importer, sites, "parent-package", sub))
        return out

    # ------------------------------------------------------------------------------------------- walk

    def run(self) -> None:
        """A multi-source search upward from the changed modules, through modules inside the root, stopping at
        the first importer outside it. Chains are ranked by how many parent-package steps they take, then by
        length, so each affected module gets the strongest, shortest witness chain."""
        heap: list[tuple[int, int, int, str, str]] = []
        for m in self.starts:
            self.best[m] = (0, 0, 0)
            heapq.heappush(heap, (0, 0, 0, m, self.own_root(m) or ""))
        best_affected: dict[str, tuple[int, int, int]] = {}
        while heap:
            weak, depth, other, m, root_name = heapq.heappop(heap)
            root = root_name or None
            if self.best.get(m, (weak, depth, other)) < (weak, depth, other):
                continue
            if m in self.present and self.is_hub(m) and not self.in_root(m, root):
                self.hubs_changed[m] = len(self.importers(m))
                continue
            for importer, sites, kind, via in self.links(m):
                if importer == m:
                    continue
                if not self.spec.include_lazy_imports and self.edge_is_lazy(importer, sites):
                    continue
                # fewest parent-package steps, then shortest, then an import over any other kind of step
                rank = (weak + (kind == "parent-package"), depth + 1, other + (kind != "imports"))
                if self.in_root(importer, root):
                    if importer not in self.best or rank < self.best[importer]:
                        self.best[importer] = rank
                        self.step[importer] = _Step(m, sites, kind, via)
                        heapq.heappush(heap, (*rank, importer, root_name))
                elif importer not in self.changed and (importer not in best_affected
                                                       or rank < best_affected[importer]):
                    # (a changed module is walked from on its own; it is not "affected" by another change)
                    best_affected[importer] = rank
                    self.affected[importer] = _Step(m, sites, kind, via)
        self.add_registries(best_affected)
        order = sorted(self.affected, key=lambda a: (best_affected.get(a, (0, 1, 0)), a))
        self.affected = {a: self.affected[a] for a in order}

    def add_registries(self, best_affected: dict[str, tuple[int, int, int]]) -> None:
        """Changed classes whose engine base registers its subclasses: the module holding the base reads
        what the change fills (and so do its importers that name the registry)."""
        package = self.spec.root_package
        for m, path in sorted(self.present.items()):
            if not self.is_model_code(m):
                continue
            text = self.read(path)
            if text is None:
                continue
            unit = self.units.unit_of_module(m, path)
            for hit in registering_bases(text, m, path.endswith("/__init__.py"), self.graph.files, self.read,
                                         package, unit.module if unit is not None else None):
                holder = hit.module
                if holder in self.changed or holder in self.affected:
                    continue
                self.registry_step[holder] = _Step(m, (ImportSite(hit.line, f"class {hit.class_name}"),),
                                                   "registry")
                self.affected[holder] = self.registry_step[holder]
                best_affected[holder] = (0, 1, 1)
                if hit.registry is None:
                    continue
                for reader, sites in sorted(self.importers(holder).items()):
                    if reader not in self.affected and reader not in self.changed and any(
                            hit.registry in s.contents for s in sites):
                        self.affected[reader] = _Step(holder, sites, "imports")
                        best_affected[reader] = (0, 2, 1)

    def read(self, rel: str) -> str | None:
        try:
            return (self.head_dir / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def acts_at_import(self) -> dict[str, bool]:
        """Per changed module of the head: does its module-level code do something (import_effects)?"""
        out: dict[str, bool] = {}
        for m, path in sorted(self.present.items()):
            text = self.read(path)
            out[m] = True if text is None else import_effect(text, self.spec.inert_import_calls).acts
        return out

    def witness(self, start: str) -> Witness:
        chain = [start]
        lines: list[int | None] = []
        lazy: list[bool] = []
        links: list[LinkKind] = []
        cur, link = start, self.affected[start]
        while True:
            if link.kind == "parent-package" and link.via is not None:
                chain.append(link.via)
                lines.append(link.sites[0].line if link.sites else None)
                lazy.append(self.edge_is_lazy(cur, link.sites))
                links.append("imports")
                chain.append(link.target)
                lines.append(None)
                lazy.append(False)
                links.append("parent-package")
            else:
                chain.append(link.target)
                lines.append(link.sites[0].line if link.sites else None)
                lazy.append(link.kind != "registry" and self.edge_is_lazy(cur, link.sites))
                links.append(link.kind)
            cur = link.target
            nxt = self.step.get(cur) or self.registry_step.get(cur)
            if nxt is None:  # a changed module (the walk's sources have no step)
                break
            link = nxt
        kind: LinkKind = "parent-package" if "parent-package" in links else next(
            (k for k in links if k != "imports"), "imports")
        return Witness(chain=chain, lines=lines, function_level=lazy, changed_path=self.path_of(chain[-1]),
                       links=links if kind != "imports" else [], link=kind)

    # --------------------------------------------------------------------------------------- results

    def classify(self) -> tuple[list[AffectedModel], list[AffectedShared]]:
        """Affected modules as model units (one per unit, with its architectures) or shared modules, leaks
        from changed model code first, then by chain length and name."""
        models: dict[str, AffectedModel] = {}
        shared: list[AffectedShared] = []
        for mod in self.affected:  # BFS order: the first module of a unit has its shortest chain
            w = self.witness(mod)
            path = self.path_of(mod)
            unit = self.units.unit_of_module(mod, path)
            if unit is not None:
                if unit.name not in models:
                    archs = architectures_through(self.graph, [mod], self.is_model_code, self.by_module)
                    models[unit.name] = AffectedModel(name=unit.name, kind=unit.kind, module=mod, witness=w,
                                                      architectures=archs, path=path, link=w.link)
            else:
                zone, zone_kind = zone_of(self.policy, path, self.model)
                shared.append(AffectedShared(module=mod, zone=zone, zone_kind=zone_kind, witness=w, path=path,
                                             hub=self.is_hub(mod), link=w.link))

        def order(w: Witness | None, name: str) -> tuple[int, int, int, str]:
            chain = w.chain if w is not None else []
            leak = bool(chain) and self.in_root(chain[-1], self.own_root(chain[-1]))
            weak = w is not None and w.link == "parent-package"
            return (int(weak), 0 if leak else 1, len(chain), name)

        return (sorted(models.values(), key=lambda a: order(a.witness, a.name)),
                sorted(shared, key=lambda s: order(s.witness, s.module)))

    def served(self, changes: tuple[Change, ...]) -> tuple[list[str], set[str]]:
        """Architectures running through the changed code, and the graph modules the changes start from
        (for modules the head no longer has: the head modules that still import them)."""
        in_graph = {m for m in self.starts if m in self.graph.modules}
        in_graph.update(i for found in self.scanned.values() for i in found if i in self.graph.modules)

        def allowed(m: str) -> bool:
            return self.is_model_code(m) or self.in_root(m, self.model)

        archs = set(architectures_through(self.graph, sorted(in_graph), allowed, self.by_module))
        for gone in self.removed:
            archs.update(self.by_module.get(gone, []))
        reg = self.registry.path
        for c in changes:  # a registry edit serves the architectures whose entries it adds or changes
            if reg is not None and c.path == reg and c.status is not ChangeStatus.DELETED:
                archs.update(self.registry.touched_by({n for h in c.hunks for n, _ in h.added}))
        return sorted(archs), in_graph

    def notes(self, load: GraphLoad) -> str:
        spec, graph = self.spec, self.graph
        notes = [
            f"{len(self.changed)} changed module(s); walked to the first importer outside "
            + (f"{self.model}'s root" if self.model else "the changed modules (no target model)"),
            "lazy (function-level) imports " + ("followed" if spec.include_lazy_imports else "ignored"),
            "TYPE_CHECKING imports " + ("ignored" if spec.exclude_type_checking_imports else "followed"),
            f"graph {'from the content cache' if load.from_cache else 'built with grimp'} "
            f"({len(graph.modules)} modules, {graph.import_count} imports, {load.seconds:.2f}s)",
        ]
        if self.hubs_changed:
            notes.append("hub modules changed, importers counted not listed: "
                         + ", ".join(f"{h} ({n})" for h, n in sorted(self.hubs_changed.items())))
        unseen = sorted(m for m in self.present if m not in graph.modules)
        if unseen:
            notes.append("changed files grimp does not see (no __init__.py on their path), importers read "
                         "from the sources: " + ", ".join(self.path_of(m) for m in unseen))
        if self.scanned:
            notes.append(f"importers of {len(self.scanned)} module(s) outside grimp's graph read from the "
                         "sources")
        if self.registry.note:
            notes.append(f"registry: {self.registry.note}")
        return "; ".join(notes)

    def radius(self, changes: tuple[Change, ...], load: GraphLoad) -> BlastRadius:
        models, shared = self.classify()
        archs, in_graph = self.served(changes)
        naive = self.graph.upstream(in_graph) | (in_graph - set(self.starts))
        cap = self.spec.max_witnesses
        return BlastRadius(
            changed_modules=self.starts,
            models=models[:cap],
            shared=shared[:cap],
            architectures=archs,
            computed=True,
            note=self.notes(load),
            graph_modules=len(self.graph.modules),
            models_total=len(models),
            shared_total=len(shared),
            models_through_parent=sum(1 for a in models if a.link == "parent-package"),
            shared_through_parent=sum(1 for s in shared if s.link == "parent-package"),
            changed_paths={m: self.path_of(m) for m in self.starts},
            removed_modules=sorted(m for m in self.removed if m not in self.graph.modules),
            hubs_changed=self.hubs_changed,
            naive_closure=len(naive),
            graph_cached=load.from_cache,
            acts_at_import=self.acts_at_import(),
        )


def zone_of(policy: Policy, path: str, model: str | None) -> tuple[str, str]:
    """The policy zone of an affected shared path (name, kind), as the zone rules classify it."""
    zone = classify(policy, path, model)
    return zone.name, zone.kind.value
