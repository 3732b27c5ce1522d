"""Measure the import graph of the real vLLM tree: the numbers behind docs/blast-radius.md.

    python benchmarks/blast_radius_measurements.py [--version 0.33.0] [--json OUT]

Prints: the graph's size; how many imports are TYPE_CHECKING-only and function-level (lazy); which model
packages import each other and which are imported by shared code or legacy model files; and, for every model
package, the naive transitive closure of its modules (all edges / without lazy edges / cut at the policy's hub
modules) against the blast radius fasttrack reports (lazy imports followed or not). Nothing is imported from
vLLM; the graph comes from grimp.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fasttrack.changes.model import Change  # noqa: E402
from fasttrack.confinement.blast_radius import compute_blast_radius  # noqa: E402
from fasttrack.confinement.graph import (  # noqa: E402
    ImportSite,
    ModuleGraph,
    SourceScopes,
    build_module_graph,
)
from fasttrack.confinement.model_units import UnitIndex, read_registry  # noqa: E402
from fasttrack.engine_tree import ensure_tree  # noqa: E402
from fasttrack.policy import Policy, load_policy  # noqa: E402
from fasttrack.verdict import ChangeStatus  # noqa: E402


def _lazy_filtered(graph: ModuleGraph, scopes: SourceScopes) -> tuple[ModuleGraph, int]:
    """The graph without function-level edges, and how many edges were dropped."""
    kept: dict[str, dict[str, tuple[ImportSite, ...]]] = {}
    dropped = 0
    for imported, importers in graph.importers_of.items():
        for importer, sites in importers.items():
            path = graph.path_of(importer)
            if path and sites and all(scopes.function_level(path, s.line) for s in sites):
                dropped += 1
                continue
            kept.setdefault(imported, {})[importer] = sites
    return ModuleGraph(graph.package, graph.files, kept, graph.modules), dropped


def _radius(policy: Policy, tree: Path, model: str, paths: list[str], lazy: bool) -> tuple[int, int, int]:
    spec = policy.blast_radius.model_copy(update={"include_lazy_imports": lazy, "max_witnesses": 10_000})
    pol = policy.model_copy(update={"blast_radius": spec})
    changes = tuple(Change(status=ChangeStatus.MODIFIED, path=p) for p in paths)
    r = compute_blast_radius(pol, tree, changes, model)
    assert r.computed, r.note
    return r.models_total, r.shared_total, r.models_total + r.shared_total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="0.33.0")
    ap.add_argument("--policy", type=Path, default=REPO / "policies" / "vllm.toml")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = ap.parse_args()
    policy = load_policy(args.policy)
    tree = ensure_tree(args.version)
    out: dict[str, object] = {"version": args.version}

    t0 = time.perf_counter()
    full = build_module_graph(tree, "vllm", exclude_type_checking=False)
    t_full = time.perf_counter() - t0
    graph = build_module_graph(tree, "vllm", exclude_type_checking=True)
    scopes = SourceScopes(tree)
    eager, lazy_dropped = _lazy_filtered(graph, scopes)
    print(f"vLLM {args.version}: {len(graph.files)} .py files, {len(graph.modules)} modules in grimp's graph "
          f"(built in {t_full:.2f}s)")
    print(f"  imports: {full.import_count} with TYPE_CHECKING blocks, {graph.import_count} without; "
          f"{lazy_dropped} of those are function-level only")
    out["graph"] = {"files": len(graph.files), "modules": len(graph.modules),
                    "imports_with_type_checking": full.import_count, "imports": graph.import_count,
                    "function_level_imports": lazy_dropped, "build_seconds": round(t_full, 2)}

    units = UnitIndex(policy.models, "vllm")
    registry = read_registry(tree, policy.models, "vllm")
    by_module = registry.by_module()
    print(f"  registry: {len(registry.entries)} architectures over {len(by_module)} modules")

    def unit_name(m: str) -> str | None:
        u = units.unit_of_module(m, graph.path_of(m))
        return None if u is None else f"{u.kind}:{u.name}"

    # Who imports model packages (vllm/models/<m>/ and vllm/models/common) from outside them.
    pkg_prefix = "vllm.models."
    cross: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for imported, importers in graph.importers_of.items():
        if not imported.startswith(pkg_prefix):
            continue
        target = imported.split(".")[2]
        for importer, sites in importers.items():
            if importer.startswith(pkg_prefix) and importer.split(".")[2] == target:
                continue
            path = graph.path_of(importer) or ""
            lazy = all(scopes.function_level(path, s.line) for s in sites)
            src = unit_name(importer) or f"shared:{importer}"
            lines = ",".join(str(s.line) for s in sites)
            cross[target][src].append(f"{importer} -> {imported} l.{lines}{' (lazy)' if lazy else ''}")
    print("\nimports INTO model packages from outside them (TYPE_CHECKING excluded):")
    for target in sorted(cross):
        print(f"  vllm/models/{target}/")
        for src in sorted(cross[target]):
            for edge in sorted(cross[target][src]):
                print(f"    {src:32s} {edge}")
    out["imports_into_model_packages"] = {t: {s: sorted(v) for s, v in d.items()} for t, d in cross.items()}

    hubs = frozenset(m for m in graph.modules
                     if any(__import__("fnmatch").fnmatchcase(m, p) for p in policy.blast_radius.hub_modules))
    packages = sorted({m.split(".")[2] for m in graph.modules
                       if m.startswith(pkg_prefix) and m.count(".") >= 2}
                      - set(policy.models.shared_packages))
    print("\nper model package: naive transitive closure vs fasttrack's radius "
          f"(of {len(graph.modules)} modules)")
    print(f"  {'package':14s} {'mods':>4s} {'naive':>6s} {'-lazy':>6s} {'-hubs':>6s} {'-both':>6s}   "
          f"{'radius(lazy on)':>16s} {'radius(lazy off)':>17s}")
    rows = []
    for pkg in packages:
        top = f"vllm.models.{pkg}"
        mods = sorted(m for m in graph.modules if m == top or m.startswith(top + "."))
        paths = [graph.path_of(m) or "" for m in mods]
        inside = set(mods)
        naive = len(graph.upstream(mods) - inside)
        naive_eager = len(eager.upstream(mods) - inside)
        naive_hubs = len(graph.upstream(mods, skip=hubs) - inside)
        naive_both = len(eager.upstream(mods, skip=hubs) - inside)
        r_on = _radius(policy, tree, pkg, paths, True)
        r_off = _radius(policy, tree, pkg, paths, False)
        rows.append({"package": pkg, "modules": len(mods), "naive": naive, "naive_without_lazy": naive_eager,
                     "naive_hubs_cut": naive_hubs, "naive_without_lazy_hubs_cut": naive_both,
                     "radius_lazy_on": {"models": r_on[0], "shared": r_on[1]},
                     "radius_lazy_off": {"models": r_off[0], "shared": r_off[1]}})
        print(f"  {pkg:14s} {len(mods):4d} {naive:6d} {naive_eager:6d} {naive_hubs:6d} {naive_both:6d}   "
              f"{r_on[0]:>5d} models {r_on[1]:>3d} sh {r_off[0]:>6d} models {r_off[1]:>3d} sh")
    out["per_package"] = rows

    # Per-module figures for kimi_k3: what one changed file reaches.
    k3 = sorted(m for m in graph.modules if m.startswith("vllm.models.kimi_k3"))
    naive_sizes = [len(graph.upstream([m]) - set(k3)) for m in k3]
    radius_sizes = [_radius(policy, tree, "kimi_k3", [graph.path_of(m) or ""], True)[2] for m in k3]
    nonzero = [m for m, r in zip(k3, radius_sizes, strict=True) if r]
    print(f"\nkimi_k3, one changed module at a time ({len(k3)} modules):")
    print(f"  naive closure: min {min(naive_sizes)}, median {statistics.median(naive_sizes)}, "
          f"max {max(naive_sizes)}")
    short = ", ".join(m.removeprefix("vllm.models.kimi_k3.") for m in nonzero)
    print(f"  radius (lazy on): {len(k3) - len(nonzero)} modules reach nothing outside kimi_k3; "
          f"max {max(radius_sizes)}; non-empty for: {short}")
    out["kimi_k3_per_module"] = {
        "modules": len(k3), "naive_min": min(naive_sizes), "naive_median": statistics.median(naive_sizes),
        "naive_max": max(naive_sizes), "radius_max": max(radius_sizes),
        "radius_empty": len(k3) - len(nonzero)}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
