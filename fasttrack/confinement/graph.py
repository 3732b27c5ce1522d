"""The import graph of an engine tree: built with grimp (never importing the code), cached by content.

The cache key is a digest over the sorted (module path, content hash) pairs of the package's ``.py``
files, the grimp version and the graph options, so a copy of the same tree in another directory, or the
same tree with new mtimes, hits the cache, and any edit misses it. A cached graph is a marshal file of edges
with their line numbers and line contents under ``~/.cache/fasttrack/graphs/``
(``$FASTTRACK_CACHE_DIR/graphs`` when that is set).

A build is two steps (`start_module_graph`): the first finds the files and starts grimp's Rust scan in a
thread, so the caller's Python work runs beside it; the second waits for it and assembles the graph.

Queries run on :class:`ModuleGraph`, a small adjacency built from either source, so a warm run never needs
grimp at all.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib
import importlib.util
import marshal
import os
import re
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from fasttrack.cache import cache_root as cache_root  # re-exported (engine_tree imports it from here)

GRAPH_FORMAT = 3  # 3: with string references; 2: marshal (1 was JSON)
MAX_CACHED_GRAPHS = 24
_SYS_PATH_LOCK = threading.Lock()


class GraphBuildError(Exception):
    """The import graph could not be built (the message says why, for FT113)."""


def default_graph_cache_dir() -> Path:
    return cache_root() / "graphs"


class ImportSite(NamedTuple):
    """Where one import statement sits in the importer: its line number and (stripped) first line."""

    line: int
    contents: str


@dataclass
class ModuleGraph:
    """Direct imports between the modules of one package, indexed by the imported module."""

    package: str
    files: dict[str, str]  # module -> path relative to the tree root, for every .py file (grimp's or not)
    importers_of: dict[str, dict[str, tuple[ImportSite, ...]]]  # imported -> importer -> sites
    modules: frozenset[str] = field(default_factory=frozenset)
    # Modules named in string literals (`import_module("vllm.a.b")`, `sys.modules.get("vllm.a.b")`, a
    # table of module names): named -> namer -> sites. grimp sees no edge there, but the code runs it.
    namers_of: dict[str, dict[str, tuple[ImportSite, ...]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.modules:
            mods = set(self.files)
            for imported, importers in self.importers_of.items():
                mods.add(imported)
                mods.update(importers)
            self.modules = frozenset(mods)

    @property
    def import_count(self) -> int:
        return sum(len(v) for v in self.importers_of.values())

    def importers(self, module: str) -> Mapping[str, tuple[ImportSite, ...]]:
        return self.importers_of.get(module, {})

    def path_of(self, module: str) -> str | None:
        return self.files.get(module)

    def namers(self, module: str) -> Mapping[str, tuple[ImportSite, ...]]:
        return self.namers_of.get(module, {})

    def upstream(self, modules: Iterable[str], *, skip: frozenset[str] = frozenset()) -> set[str]:
        """The naive transitive closure: every module that imports any of `modules`, however indirectly.

        Modules in `skip` are reached but not expanded (used to measure cutting the graph at hubs).
        """
        start = set(modules)
        seen: set[str] = set(start)
        queue = deque(start)
        while queue:
            m = queue.popleft()
            if m in skip and m not in start:
                continue
            for importer in self.importers(m):
                if importer not in seen:
                    seen.add(importer)
                    queue.append(importer)
        return seen - start


@dataclass(frozen=True)
class GraphLoad:
    graph: ModuleGraph
    key: str
    from_cache: bool
    seconds: float
    files_hashed: int
    cache_file: Path | None = None


# --------------------------------------------------------------------------------------------- files, keys


def module_name(relpath: str) -> str | None:
    """``vllm/a/b.py`` -> ``vllm.a.b``; ``vllm/a/__init__.py`` -> ``vllm.a``; None if not a Python module."""
    if not relpath.endswith(".py"):
        return None
    parts = relpath[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


def iter_package_files(root: Path, package: str) -> Iterator[str]:
    """Paths (relative to `root`, "/"-separated, sorted) of the package's ``.py`` files, symlinks included."""
    base = root / package.replace(".", "/")
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        out.extend(f"{rel_dir}/{name}" for name in filenames if name.endswith(".py"))
    yield from sorted(out)


def _file_digest(path: str) -> str:
    """SHA-256 of a file's bytes (through symlinks), read with plain os calls: this runs for every file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
        return h.hexdigest()[:32]
    finally:
        os.close(fd)


def tree_key(root: Path, package: str, *, exclude_type_checking: bool) -> tuple[str, dict[str, str], int]:
    """The content key of a tree (and the module -> path map found on the way, and the file count).

    The digest covers each file's path and a hash of its bytes (through symlinks; a dangling link is keyed by
    its target text), the grimp version and the options, never mtimes.
    """
    h = hashlib.sha256()
    h.update(f"fasttrack-graph/{GRAPH_FORMAT}/{_grimp_version()}/{package}/tc={exclude_type_checking}\n".encode())
    files: dict[str, str] = {}
    count = 0
    base = str(root)
    for rel in iter_package_files(root, package):
        p = f"{base}/{rel}"
        try:
            digest = _file_digest(p)
        except OSError:
            try:
                digest = "link:" + os.readlink(p)
            except OSError:
                digest = "unreadable"
        h.update(f"{rel}\0{digest}\n".encode())
        count += 1
        mod = module_name(rel)
        if mod is not None:
            files[mod] = rel
    return h.hexdigest(), files, count


@functools.cache
def _grimp_version() -> str:
    """The installed grimp's version, for the cache key, read without importing grimp (a warm run never
    does) or `importlib.metadata` (~25 ms of imports): the `Version:` of the one `grimp-*.dist-info` beside
    the package `import grimp` would load; `importlib.metadata` when there is not exactly one."""
    try:
        spec = importlib.util.find_spec("grimp")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        return _grimp_version_from_metadata()
    site = Path(spec.origin).parent.parent
    try:
        infos = [e.path for e in os.scandir(site)
                 if e.name.startswith("grimp-") and e.name.endswith(".dist-info")]
        if len(infos) == 1:
            with open(os.path.join(infos[0], "METADATA"), encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith("Version:"):
                        return line[len("Version:"):].strip()
                    if not line.strip():
                        break  # the headers end at the first blank line
    except OSError:
        pass
    return _grimp_version_from_metadata()


def _grimp_version_from_metadata() -> str:
    from importlib import metadata

    try:
        return metadata.version("grimp")
    except metadata.PackageNotFoundError:
        return "absent"


# ------------------------------------------------------------------------------------------------- building


def build_module_graph(root: Path, package: str, *, exclude_type_checking: bool,
                       files: dict[str, str] | None = None) -> ModuleGraph:
    """Build the graph with grimp from the tree at `root` (put first on sys.path; nothing is imported)."""
    build = start_module_graph_build(root, package, exclude_type_checking=exclude_type_checking, files=files)
    return build()[0]


def start_module_graph_build(root: Path, package: str, *, exclude_type_checking: bool,
                             files: dict[str, str] | None = None) -> Callable[[], tuple[ModuleGraph, float]]:
    """`build_module_graph` in two steps: this call finds the package's files (grimp's `_find_packages`,
    with `root` first on sys.path) and starts grimp's Rust scan of their imports in a thread (the scan
    releases the GIL: the caller's Python work runs beside it); calling the result reads the files' string
    references (still beside the scan), waits for the scan and assembles the graph. It returns the graph and
    the build's own seconds (this call, the scan's wall time, and the assembly after it: what the build took
    whatever the caller did meanwhile). GraphBuildError from either step."""
    t0 = time.perf_counter()
    try:
        import grimp
    except ImportError as exc:  # pragma: no cover - grimp is a dependency
        raise GraphBuildError(f"grimp is not installed ({exc})") from None
    pkg_dir = (root / package.replace(".", "/")).resolve()
    if not (pkg_dir / "__init__.py").is_file():
        raise GraphBuildError(f"{package.replace('.', '/')}/__init__.py is missing from the tree at {root}")
    top = package.split(".")[0]
    with _SYS_PATH_LOCK:
        if top in sys.modules:
            raise GraphBuildError(f"package {top!r} is imported in this process; its graph would be the "
                                  "imported copy's, not the tree's")
        entry = str(root.resolve())
        sys.path.insert(0, entry)
        importlib.invalidate_caches()
        try:
            spec = importlib.util.find_spec(package)
            origin = Path(spec.origin).resolve() if spec and spec.origin else None
            if origin is None or pkg_dir not in origin.parents:
                raise GraphBuildError(f"package {package!r} resolves to {origin}, not to the tree at {root}")
            try:
                # The package's files are found here, with the tree on sys.path; the scan that follows reads
                # the files found (it needs no sys.path) and runs in a thread.
                pending = _scan_direct(grimp, package, exclude_type_checking)
                if pending is None:
                    public = _scan_public(grimp, package, exclude_type_checking)
                    pending = lambda: (public, 0.0)  # noqa: E731
            except Exception as exc:  # grimp reports syntax errors and odd layouts with its own exceptions
                raise _grimp_failed(package, exc) from None
        finally:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)
            importlib.invalidate_caches()
    started = time.perf_counter() - t0
    given = dict(files) if files is not None else None

    def finish() -> tuple[ModuleGraph, float]:
        t1 = time.perf_counter()
        # Listed and searched beside the scan, if it still runs.
        tree_files = given if given is not None else {
            m: r for r in iter_package_files(root, package) if (m := module_name(r)) is not None}
        named = collect_string_names(root, tree_files, package)
        t2 = time.perf_counter()
        try:
            (module_set, edges), scan_seconds = pending()
        except Exception as exc:  # the scan's own exception, raised in its thread
            raise _grimp_failed(package, exc) from None
        t3 = time.perf_counter()
        # Most edges have one import statement (18,829 of vLLM's 19,421): nothing to sort or deduplicate.
        importers_of = {imported: {importer: tuple(found) if len(found) == 1
                                   else tuple(sorted(set(found), key=_site_line))
                                   for importer, found in row.items()}
                        for imported, row in edges.items()}
        modules = frozenset(module_set)
        graph = ModuleGraph(package=package, files=tree_files, importers_of=importers_of, modules=modules,
                            namers_of=resolve_string_names(named, package, modules))
        # The build's own time: finding the files, the scan (wall), the string search when the scan was
        # already done by then, the assembly.
        own = started + max(scan_seconds, t2 - t1) + (time.perf_counter() - t3)
        return graph, own

    return finish


def _grimp_failed(package: str, exc: Exception) -> GraphBuildError:
    return GraphBuildError(f"grimp could not build the graph of {package}: {type(exc).__name__}: {exc}")


# What a scan gives: the graph's modules, and imported -> importer -> the import statements' sites (a list,
# duplicates possible: `start_module_graph_build` deduplicates and sorts them).
_Scanned = tuple[set[str], dict[str, dict[str, list[ImportSite]]]]


def _site_line(site: ImportSite) -> int:
    return site.line


def _scan_public(grimp: Any, package: str, exclude_type_checking: bool) -> _Scanned:
    """grimp's public API: `build_graph`, then the details of every import read back from its graph."""
    g = grimp.build_graph(package, cache_dir=None, exclude_type_checking_imports=exclude_type_checking)
    edges: dict[str, dict[str, list[ImportSite]]] = {}
    for importer in g.modules:
        for imported in g.find_modules_directly_imported_by(importer):
            details = g.get_import_details(importer=importer, imported=imported)
            edges.setdefault(imported, {})[importer] = [
                ImportSite(int(d["line_number"]), str(d["line_contents"])) for d in details]
    return set(g.modules), edges


def _scan_direct(grimp: Any, package: str,
                 exclude_type_checking: bool) -> Callable[[], tuple[_Scanned, float]] | None:
    """The same modules and imports as `_scan_public`, from the two steps `build_graph` runs before it
    assembles its graph (find the package's files, scan their imports: grimp's Rust scanner), without that
    graph: `build_graph` adds every module and import to it one call at a time, and reading the details back
    costs one call per edge (about 0.25 s of CPU on vLLM's tree, a tenth of a cold verify). Those steps are
    grimp's own (`grimp.application.usecases`), private: None when this grimp has not got them as 3.20 has
    them (then the public path runs). `tests/test_blast_graph.py` checks that both give the same graph.

    The files are found now; the scan runs in a thread of its own (grimp's Rust scanner holds no GIL while it
    parses: the caller's Python runs beside it), and the result waits for it and returns the scan with the
    scan's wall seconds (its exception, if it raised)."""
    if not _GRIMP_DIRECT.match(str(getattr(grimp, "__version__", ""))):
        return None
    from grimp.application import usecases as uc
    from grimp.application.config import settings

    fs = settings.FILE_SYSTEM
    found = uc._find_packages(file_system=fs, package_names=[package])
    basic = fs.convert_to_basic()

    def scan() -> tuple[Any, float]:
        t0 = time.perf_counter()
        by_module = uc._scan_packages(found_packages=found, file_system=basic,
                                      include_external_packages=False,
                                      exclude_type_checking_imports=exclude_type_checking, cache_dir=None)
        return by_module, time.perf_counter() - t0

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fasttrack-grimp")
    future = pool.submit(scan)
    pool.shutdown(wait=False)

    def result() -> tuple[_Scanned, float]:
        by_module, seconds = future.result()
        modules: set[str] = {ns for f in found for ns in f.namespace_packages}
        add = modules.add
        edges: dict[str, dict[str, list[ImportSite]]] = {}
        site = ImportSite
        for module, direct in by_module.items():
            add(module.name)
            for d in direct:
                imported = d.imported.name
                importer = d.importer.name
                at = site(int(d.line_number), str(d.line_contents))
                row = edges.get(imported)
                if row is None:
                    add(imported)
                    edges[imported] = {importer: [at]}
                elif (sites := row.get(importer)) is None:
                    row[importer] = [at]
                else:
                    sites.append(at)
        return (modules, edges), seconds

    return result


# The grimp versions whose private build steps `_scan_direct` was checked against (the others: public API).
_GRIMP_DIRECT = re.compile(r"^3\.20(\.|$)")


_STRING_NAME = re.compile(
    rb"""["']([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?::[A-Za-z_][\w.]*)?["']""")


def find_string_references(root: Path, files: Mapping[str, str], package: str,
                           modules: frozenset[str]) -> dict[str, dict[str, tuple[ImportSite, ...]]]:
    """Modules of the package that other modules name in a string literal: `"pkg.a.b"`, `"pkg.a.b:Cls"`
    or `"pkg.a.b.Cls"` (the longest prefix that is a module). Read as bytes with one pattern (only files
    holding a quoted `pkg.` are searched), never parsed: a module name in a string is there to be loaded
    (`import_module`, `__import__`, `sys.modules.get`, a table of module names); a name in a comment or
    docstring is kept too (fail closed: a false edge is named in the radius, a missed one is not).
    Two steps (`collect_string_names`, which needs no graph, then `resolve_string_names`), so the graph
    build reads the files while grimp's scan runs."""
    return resolve_string_names(collect_string_names(root, files, package), package, modules)


# namer -> the dotted names it quotes that start with the package, each with its line and the line's text
_Named = list[tuple[str, list[tuple[str, int, str]]]]


def collect_string_names(root: Path, files: Mapping[str, str], package: str) -> _Named:
    """The first step of `find_string_references`: every quoted dotted name under `package` in each file,
    with its line (the modules they name are decided once the graph's modules are known)."""
    prefix = package.encode() + b"."
    prefix_str = package + "."
    out: _Named = []
    base = os.fsencode(root) + b"/"
    for namer, rel in sorted(files.items()):
        try:
            with open(base + os.fsencode(rel), "rb", buffering=0) as fh:
                raw = fh.readall()
        except OSError:
            continue
        if not _quoted_at(raw, prefix):
            continue
        lines: list[bytes] | None = None
        found: list[tuple[str, int, str]] = []
        line, at = 1, 0  # the line number of offset `at` (matches come in order: counted incrementally)
        for m in _STRING_NAME.finditer(raw):
            name = m.group(1).decode()
            if not name.startswith(prefix_str):
                continue
            if lines is None:
                lines = raw.splitlines()
            line += raw.count(b"\n", at, m.start())
            at = m.start()
            text = lines[line - 1].decode("utf-8", "replace").strip() if line <= len(lines) else ""
            found.append((name, line, text[:200]))
        if found:
            out.append((namer, found))
    return out


def resolve_string_names(named: _Named, package: str,
                         modules: frozenset[str]) -> dict[str, dict[str, tuple[ImportSite, ...]]]:
    """The second step of `find_string_references`: each quoted name's longest prefix that is a module of
    the graph (not the package itself, not the namer), named -> namer -> sites."""
    out: dict[str, dict[str, tuple[ImportSite, ...]]] = {}
    for namer, found in named:
        for name, line, text in found:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if not name or name in (package, namer):
                continue
            sites = out.setdefault(name, {}).get(namer, ())
            if all(s.line != line for s in sites):
                out[name][namer] = (*sites, ImportSite(line, text))
    return out


def _quoted_at(raw: bytes, prefix: bytes) -> bool:
    """Whether `raw` holds `prefix` right after a quote (`"pkg.` or `'pkg.`): one pass over the file for the
    prefix (most files name the package in their imports, unquoted), not one per quote."""
    at = raw.find(prefix)
    while at >= 0:
        if at and raw[at - 1] in b"\"'":
            return True
        at = raw.find(prefix, at + 1)
    return False


# ------------------------------------------------------------------------------------------------ the cache


# The cache file is `marshal` data (a tuple of str, int, tuple, list and dict only: marshal cannot encode
# objects, and loading it runs no code), about ten times faster to load than JSON validated by pydantic.
# Its shape is checked while it is turned back into a ModuleGraph; anything else (a truncated file, another
# format, another key) is a miss: the graph is rebuilt and the file overwritten.
#   (GRAPH_FORMAT, key, package, modules: tuple[str], files: dict[str, str],
#    imports: tuple[(importer, imported, ((line, contents), ...)), ...],
#    names: tuple[(namer, named, ((line, contents), ...)), ...])
_CACHE_SUFFIX = ".graph"


class _BadCache(Exception):
    pass


def _to_bytes(graph: ModuleGraph, key: str) -> bytes:
    """The cache file's bytes (the shape described above, checked by `_from_bytes`)."""
    def rows(edges: dict[str, dict[str, tuple[ImportSite, ...]]]) -> tuple[
            tuple[str, str, tuple[tuple[int, str], ...]], ...]:
        # In the graph's order, not sorted (~7 ms): a graph built by grimp has its scan's order, which no
        # reader depends on (the walk sorts what it reports).
        return tuple((src, dst, tuple((s.line, s.contents) for s in sites)) for dst, srcs in edges.items()
                     for src, sites in srcs.items())

    return marshal.dumps((GRAPH_FORMAT, key, graph.package, tuple(sorted(graph.modules)), dict(graph.files),
                          rows(graph.importers_of), rows(graph.namers_of)))


def _str_seq(value: object) -> bool:
    return isinstance(value, tuple) and all(type(v) is str for v in value)


def _from_bytes(raw: bytes, key: str) -> ModuleGraph:
    try:
        data = marshal.loads(raw)
    except (EOFError, ValueError, TypeError) as exc:
        raise _BadCache(str(exc)) from None
    if not (isinstance(data, tuple) and len(data) == 7 and data[0] == GRAPH_FORMAT and data[1] == key):
        raise _BadCache("another format or key")
    _, _, package, modules, files, imports, names = data
    if not (type(package) is str and _str_seq(modules) and isinstance(files, dict)
            and all(type(k) is str and type(v) is str for k, v in files.items())
            and isinstance(imports, tuple) and isinstance(names, tuple)):
        raise _BadCache("malformed header")
    return ModuleGraph(package=package, files=files, importers_of=_edges(imports),
                       modules=frozenset(modules), namers_of=_edges(names))


def _edges(rows: tuple[Any, ...]) -> dict[str, dict[str, tuple[ImportSite, ...]]]:
    edges: dict[str, dict[str, tuple[ImportSite, ...]]] = {}
    make = ImportSite._make
    src: Any
    dst: Any
    sites: Any
    try:
        for src, dst, sites in rows:
            if not (type(src) is str and type(dst) is str and isinstance(sites, tuple)):
                raise _BadCache("malformed import")
            row = tuple(map(make, sites))
            for site in row:
                if type(site.line) is not int or type(site.contents) is not str:
                    raise _BadCache("malformed import site")
            edges.setdefault(dst, {})[src] = row
    except (TypeError, ValueError) as exc:  # a row or site of the wrong length
        raise _BadCache(str(exc)) from None
    return edges


def _read_cache(path: Path, key: str) -> ModuleGraph | None:
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    try:
        return _from_bytes(raw, key)
    except _BadCache:
        return None  # corrupt or from another format: rebuild and overwrite


def _write_cache(path: Path, graph: ModuleGraph, key: str) -> None:
    """Write atomically (a temporary file in the same directory, then rename); a failure only costs speed."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = _to_bytes(graph, key)
        fd, tmp = tempfile.mkstemp(prefix=".graph-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(payload)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _prune(path.parent)
    except OSError:
        return


def _prune(directory: Path) -> None:
    for stale in directory.glob("*.json"):  # the JSON cache files of format 1
        stale.unlink(missing_ok=True)
    graphs = sorted(directory.glob(f"*{_CACHE_SUFFIX}"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in graphs[MAX_CACHED_GRAPHS:]:
        old.unlink(missing_ok=True)


def _id_key(tree_id: str, package: str, *, exclude_type_checking: bool) -> str:
    h = hashlib.sha256()
    h.update(f"fasttrack-graph/{GRAPH_FORMAT}/{_grimp_version()}/{package}/tc={exclude_type_checking}\n".encode())
    h.update(f"id\0{tree_id}\n".encode())
    return h.hexdigest()


def load_module_graph(root: Path, package: str, *, exclude_type_checking: bool, cache_dir: Path | None,
                      tree_id: str | None = None) -> GraphLoad:
    """The graph of the tree at `root`: from the content-keyed cache when present, else built with grimp.

    The key is a digest of every file's content, or, when the caller vouches for one, `tree_id`: an id that
    already names the tree's content (a git tree sha, for a tree materialised from it), which saves reading
    the files on a warm run. `cache_dir=None` disables the cache (always build, never write).
    """
    return start_module_graph(root, package, exclude_type_checking=exclude_type_checking, cache_dir=cache_dir,
                              tree_id=tree_id)()


def start_module_graph(root: Path, package: str, *, exclude_type_checking: bool, cache_dir: Path | None,
                       tree_id: str | None = None) -> Callable[[], GraphLoad]:
    """`load_module_graph` in two steps: the cache is looked up now and, on a miss, the build started
    (`start_module_graph_build`: grimp's scan runs in a thread); calling the result waits for the build,
    writes the cache and returns the load. A GraphBuildError is raised by either step."""
    t0 = time.perf_counter()
    files: dict[str, str] | None = None
    count = 0
    if tree_id is not None:
        key = _id_key(tree_id, package, exclude_type_checking=exclude_type_checking)
    else:
        key, files, count = tree_key(root, package, exclude_type_checking=exclude_type_checking)
    cache_file = cache_dir / f"{key[:40]}{_CACHE_SUFFIX}" if cache_dir is not None else None
    if cache_file is not None:
        cached = _read_cache(cache_file, key)
        if cached is not None:
            load = GraphLoad(cached, key, True, time.perf_counter() - t0, count, cache_file)
            return lambda: load
    keyed = time.perf_counter() - t0
    build = start_module_graph_build(root, package, exclude_type_checking=exclude_type_checking, files=files)

    def finish() -> GraphLoad:
        graph, own = build()
        t1 = time.perf_counter()
        if cache_file is not None:
            _write_cache(cache_file, graph, key)
        seconds = keyed + own + (time.perf_counter() - t1)
        return GraphLoad(graph, key, False, seconds, count or len(graph.files), cache_file)

    return finish


# ----------------------------------------------------------------------------------------- source scopes


@dataclass(frozen=True)
class FoundImport:
    """An import statement found by reading one file's AST (used for modules the head no longer has)."""

    importer: str
    line: int
    contents: str
    function_level: bool


class SourceScopes:
    """Reads head files (only those a query needs) to tell function-level imports from module-level ones.

    grimp gives line numbers; an import whose line is not indented runs at import time. Only for indented
    lines is the file's AST read, to see whether the line sits inside a function (``def``/``lambda``) body,
    which runs only when called, or merely under an ``if``/``try``/``with``/``class`` at module level.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lines: dict[str, list[str]] = {}
        self._trees: dict[str, ast.Module | None] = {}
        self._func_spans: dict[tuple[str, int], list[tuple[int, int]]] = {}  # (file, top-level statement)

    def _text_lines(self, relpath: str) -> list[str]:
        if relpath not in self._lines:
            try:
                text = (self.root / relpath).read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = ""
            self._lines[relpath] = text.splitlines()
        return self._lines[relpath]

    def tree(self, relpath: str) -> ast.Module | None:
        if relpath not in self._trees:
            try:
                self._trees[relpath] = ast.parse("\n".join(self._text_lines(relpath)), filename=relpath)
            except (SyntaxError, ValueError):
                self._trees[relpath] = None
        return self._trees[relpath]

    def _spans(self, relpath: str, line: int) -> list[tuple[int, int]]:
        """The body spans of the functions and lambdas inside the module's top-level statements whose text
        holds `line` (a node lies within the text of the top-level statement it belongs to, decorators
        included): every span that can hold `line`, without walking the rest of a big module."""
        tree = self.tree(relpath)
        if tree is None:
            return []
        spans: list[tuple[int, int]] = []
        for i, stmt in enumerate(tree.body):
            first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])
            if not first <= line <= (stmt.end_lineno or stmt.lineno):
                continue
            key = (relpath, i)
            if key not in self._func_spans:
                self._func_spans[key] = self._walk_spans(stmt)
            spans.extend(self._func_spans[key])
        return spans

    @staticmethod
    def _walk_spans(top: ast.AST) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        for node in ast.walk(top):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = node.body[0].lineno if node.body else node.lineno
                spans.append((first, node.end_lineno or node.lineno))
            elif isinstance(node, ast.Lambda):
                spans.append((node.body.lineno, node.body.end_lineno or node.body.lineno))
        return spans

    def function_level(self, relpath: str, line: int) -> bool:
        lines = self._text_lines(relpath)
        if not 1 <= line <= len(lines):
            return False
        raw = lines[line - 1]
        if raw[:1] not in (" ", "\t"):
            return False
        return any(a <= line <= b for a, b in self._spans(relpath, line))

    def find_imports_of(self, module: str, files: Mapping[str, str], package: str) -> list[FoundImport]:
        """Head modules whose source imports `module`, a module grimp's graph does not have.

        grimp drops imports it cannot resolve to a module of its graph, so for a deleted or renamed-away
        module, or one in a directory without ``__init__.py`` (grimp skips those), the graph has no edges to
        it; this reads the ASTs of just the files that can name it.
        """
        parent, _, leaf = module.rpartition(".")
        word = re.compile(rb"\b" + re.escape(leaf.encode()) + rb"\b")
        out: list[FoundImport] = []
        for importer, rel in sorted(files.items()):
            if importer == module:
                continue
            try:
                raw = (self.root / rel).read_bytes()
            except OSError:
                continue
            # An absolute import names the parent package in full; a relative one needs "from ." and the leaf.
            if not ((parent and parent.encode() in raw and word.search(raw))
                    or (b"from ." in raw and word.search(raw))):
                continue
            tree = self.tree(rel)
            if tree is None:
                continue
            is_pkg = rel.endswith("/__init__.py")
            for node in ast.walk(tree):
                if not isinstance(node, ast.Import | ast.ImportFrom):
                    continue
                for target in _absolute_targets(node, importer, is_pkg):
                    if target == module or target.startswith(module + "."):
                        text = self._text_lines(rel)[node.lineno - 1].strip()
                        out.append(FoundImport(importer, node.lineno, text,
                                               self.function_level(rel, node.lineno)))
                        break
        return out


def _absolute_targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool) -> list[str]:
    """The absolute dotted names an ``import``/``from ... import`` statement may refer to."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        parts = importer.split(".") if is_package else importer.split(".")[:-1]
        if node.level - 1 > len(parts):
            return []
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    if not base:
        return []
    return [base] + [f"{base}.{a.name}" for a in node.names if a.name != "*"]
