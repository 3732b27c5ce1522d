"""The escape analysis of a Context's changed Python files: a loader of the facts stage.

It reads what it analyses (each changed file's text as Python runs it, the base revision's blob of a
modified file, the contribution's own modules a re-export goes through) and hands the rules
(`fasttrack.rules.escapes`) one `EscapeAnalysis`, computed once per run. The per-file analysis itself lives
in `fasttrack.confinement.escapes` (pure, one file at a time).
"""

from __future__ import annotations

import ast
import dataclasses
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pathspec

from fasttrack.changes.model import Change
from fasttrack.confinement.engine_signatures import Metaclasses, OwnModules, Signatures, engine_reader_for
from fasttrack.confinement.escapes import (
    DYNAMIC_CODE,
    GLOBAL_STATE,
    UNPARSEABLE,
    Escape,
    FileFacts,
    OwnImportWrite,
    analyse_source,
    module_name_for,
    state_like_receiver,
)
from fasttrack.confinement.escapes.common import ON_INSTANCE
from fasttrack.confinement.escapes.cross_module import ModuleReader, OwnModuleSummary
from fasttrack.confinement.harness_reach import Reach, find_reach, new_reach
from fasttrack.confinement.source_text import SourceProblem, decode_python_source, read_python_source
from fasttrack.context import Context
from fasttrack.errors import InputError
from fasttrack.findings import Severity
from fasttrack.policy import MODEL_PLACEHOLDER
from fasttrack.verdict import ChangeStatus

ANALYSED = frozenset({ChangeStatus.ADDED, ChangeStatus.MODIFIED, ChangeStatus.RENAMED, ChangeStatus.COPIED,
                      ChangeStatus.TYPE_CHANGED})
_GLOB_CHARS = frozenset("*?[]!{}")
MAX_BASE_BYTES = 4 * 1024 * 1024


def _dotted(path: str) -> str | None:
    parts = [p for p in path.strip("/").split("/") if p]
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


def _root_package(pattern: str) -> str | None:
    """`vllm/models/kimi_k3/**` -> vllm.models.kimi_k3; `.../kimi_k3.py` -> its module; else None."""
    p = pattern.lstrip("/")
    for suffix in ("/**", "/*", "/"):
        if p.endswith(suffix):
            p = p[: -len(suffix)]
            break
    if p.endswith(".py"):
        p = p[:-3]
    if any(c in _GLOB_CHARS for c in p):
        return None
    return _dotted(p)


def own_packages(ctx: Context) -> set[str]:
    """The dotted packages that are the contribution's own: writes into them are not escapes.

    Range mode: the model's package (`policy.models.package`) and every importable local root of the
    model. Contribution mode: the contribution's top-level package (its directory name) and the package
    its files land in (`contribution.target_path`)."""
    own: set[str] = set()
    if ctx.mode == "contribution":
        if ctx.contribution_dir:
            own.add(posixpath.basename(ctx.contribution_dir.rstrip("/")))
        if ctx.manifest is not None:
            target = _dotted(ctx.manifest.contribution.target_path)
            if target:
                own.add(target)
        return {p for p in own if p}
    models = [ctx.model] if ctx.model else list(ctx.models_touched)
    for model in models:
        own.add(ctx.policy.models.package.replace(MODEL_PLACEHOLDER, model))
        for root in ctx.policy.models.local_roots:
            pkg = _root_package(root.replace(MODEL_PLACEHOLDER, model))
            if pkg:
                own.add(pkg)
    return own


def own_op_namespaces(ctx: Context) -> set[str]:
    """The torch op namespaces the contribution owns: the manifest's `op_namespace`, else the model."""
    if ctx.manifest is not None:
        return {ctx.manifest.contribution.own_op_namespace}
    models = [ctx.model] if ctx.model else list(ctx.models_touched)
    return set(models)


def module_of(ctx: Context, path: str) -> str | None:
    """The dotted module a changed file will be imported as (its engine path in contribution mode)."""
    engine = ctx.engine_paths.get(path)
    if engine is not None:
        return module_name_for(engine)
    if ctx.mode == "contribution" and ctx.contribution_dir:
        parent = posixpath.dirname(ctx.contribution_dir.rstrip("/"))
        rel = posixpath.relpath(path, parent) if parent else path
        return module_name_for(rel)
    return module_name_for(path)


def import_names(ctx: Context, path: str) -> frozenset[str]:
    """Every dotted name a changed file can be imported by: its engine module and, in contribution mode,
    its name under the contribution's own package (`kimi_k3.guard`), which the contribution's code uses."""
    names = {module_of(ctx, path)}
    if ctx.contribution_dir:
        parent = posixpath.dirname(ctx.contribution_dir.rstrip("/"))
        contrib = ctx.contribution_dir.rstrip("/")
        if path.startswith(contrib + "/"):
            names.add(module_name_for(posixpath.relpath(path, parent) if parent else path))
    return frozenset(n for n in names if n)


@dataclass(frozen=True)
class FileEscapes:
    path: str
    module: str | None
    is_test: bool
    escapes: tuple[Escape, ...]
    imports: frozenset[str]
    names: frozenset[str] = frozenset()  # the dotted names other files import it by
    # Escapes the base revision of this (modified or renamed) file already had: the PR did not add them.
    preexisting: frozenset[int] = frozenset()  # indices into `escapes`
    base_lines: tuple[tuple[int, int], ...] = ()  # (index into `escapes`, its line in the base revision)
    # Own functions writing through parameters (key, positions/names) and calls into the contribution with
    # foreign arguments (callee, ((position or keyword, foreign target), ...), line): see _helper_escapes.
    param_writers: tuple[tuple[str, tuple[int | str, ...]], ...] = ()
    foreign_calls: tuple[tuple[str, tuple[tuple[int | str, str], ...], int], ...] = ()
    own_import_writes: tuple[OwnImportWrite, ...] = ()
    # In a test file: references to gc, frames, tracers, ctypes the base revision did not have (an error
    # only where `fasttrack collect` runs the file: see `_Analysis.escapes`).
    reach: tuple[Reach, ...] = ()


def _key(esc: Escape) -> tuple[str, str, str | None, str, str]:
    """What makes two escapes the same: also where they sit (`Escape.context`), so a patch moved out of
    a guard, into module level or into another function is new, not "already in the base"."""
    return (esc.code, esc.severity, esc.target, esc.message, esc.context)


def base_text(ctx: Context, change: Change) -> str | None:
    """The base-side text of a modified or renamed file: from the Context when the pipeline kept it, else
    read from the repository at the base revision (range mode); None when there is none."""
    old = change.old_path or change.path
    if change.path in ctx.base_texts:
        return ctx.base_texts[change.path]
    if ctx.mode != "range" or ctx.repo is None or not ctx.base:
        return None
    from fasttrack.changes.git import read_blob

    try:
        raw = read_blob(ctx.repo, ctx.base, old)
    except (OSError, RuntimeError, InputError):
        return None
    if raw is None or len(raw) > MAX_BASE_BYTES:
        return None
    text = decode_python_source(raw, old)
    return None if isinstance(text, SourceProblem) else text


def _preexisting(head: list[Escape], base: list[Escape]) -> frozenset[int]:
    """Head escapes matched one-for-one by an identical escape (code, severity, target, message) in the
    base: the PR carried them over. A second copy of an old patch is new."""
    return frozenset(_match_base(head, base))


def _match_base(head: list[Escape], base: list[Escape]) -> dict[int, int]:
    """`_preexisting` with the base line each carried-over escape came from (head index -> base line).
    Both lists are in line order, so the n-th copy in the head is matched with the n-th in the base."""
    queues: dict[tuple[str, str, str | None, str, str], list[int]] = {}
    for e in base:
        if e.code != UNPARSEABLE:
            queues.setdefault(_key(e), []).append(e.line)
    matched: dict[int, int] = {}
    for i, esc in enumerate(head):
        lines = queues.get(_key(esc))
        if lines:
            matched[i] = lines.pop(0)
    return matched


@dataclass(frozen=True)
class Downgrade:
    """Why an escape is reported below its own severity."""

    severity: Severity
    reason: str


_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass(frozen=True)
class _Ownership:
    packages: set[str]
    op_namespaces: set[str]


def own_modules(ctx: Context) -> OwnModules | None:
    """Contribution mode: the contribution's own Python modules under every dotted name they are imported
    by (their text, None when it cannot be read; whether each is a package), so the engine-signature
    reader follows an own base class of another file (the engine tree does not hold them). None in range
    mode: the head tree holds them."""
    if ctx.mode != "contribution":
        return None
    out: dict[str, tuple[str | None, bool]] = {}
    for change in ctx.changes:
        if change.status not in ANALYSED or not change.path.endswith(".py") or change.is_submodule:
            continue
        text = read_python_source(ctx.head_dir, change.path)
        got = (None if isinstance(text, SourceProblem) else text, change.path.endswith("/__init__.py"))
        for name in import_names(ctx, change.path):
            out[name] = got
    return out


def _module_reader(ctx: Context, own: set[str], texts: OwnModules | None) -> ModuleReader:
    """The text of one of the contribution's modules by dotted name (None: not one of them): the
    contribution's files in contribution mode (`own_modules`), the head tree's own packages in range mode."""
    if texts is not None:
        return texts.get

    def read(module: str) -> tuple[str | None, bool] | None:
        path = _own_module_file(ctx, own, module)
        if path is None:
            return None
        small = path.stat().st_size <= MAX_BASE_BYTES
        text = decode_python_source(path.read_bytes(), str(path)) if small else None
        return (text if isinstance(text, str) else None), path.name == "__init__.py"
    return read


def _baseline_roots(ctx: Context) -> dict[str, Path]:
    """The engine baselines' top-level packages (`baselines`) and the directory holding each, where the
    judged tree has them (`yardstick_facts.baseline_dir`): read to tell a metaclass from a plain class."""
    from fasttrack.evidence.yardstick_facts import baseline_dir

    out: dict[str, Path] = {}
    for spec in ctx.policy.baselines.values():
        d = baseline_dir(ctx, spec)
        parts = Path(spec.root).parts
        if d is not None and parts:
            out.setdefault(parts[0], d.resolve().parents[len(parts) - 1])
    return out


def _analyse_file(ctx: Context, change: Change, own: _Ownership, is_test: bool,
                  signatures: Signatures | None, cross: OwnModuleSummary | None = None,
                  metaclasses: Metaclasses | None = None) -> FileEscapes:
    module = module_of(ctx, change.path)
    text = read_python_source(ctx.head_dir, change.path)  # the text Python runs (cookie, symlinks on disk)
    if isinstance(text, SourceProblem):
        why = "is binary" if change.binary else text.reason
        cannot = Escape(UNPARSEABLE, text.line or 1, f"{why}, so it cannot be checked for escapes",
                        path=change.path)
        return FileEscapes(change.path, module, is_test, (cannot,), frozenset(),
                           import_names(ctx, change.path))
    foreign_ops = set(ctx.known_models) - own.op_namespaces - {ctx.model or ""}

    def analyse(source: str) -> FileFacts:
        return analyse_source(source, change.path, own.packages, module=module,
                              own_op_namespaces=own.op_namespaces, foreign_op_namespaces=foreign_ops,
                              settings=ctx.policy.escapes, signatures=signatures, cross=cross,
                              metaclasses=metaclasses)

    facts = analyse(text)
    old: dict[int, int] = {}
    if facts.escapes and change.status in (ChangeStatus.MODIFIED, ChangeStatus.RENAMED) and \
            _same_home(ctx, change.old_path or change.path, change.path):
        before = base_text(ctx, change)
        if before is not None:  # judged with the head's module name and ownership: what the text meant
            old = _match_base(facts.escapes, analyse(before).escapes)
    reach: tuple[Reach, ...] = ()
    if is_test:
        before_text = base_text(ctx, change) if change.status in (ChangeStatus.MODIFIED,
                                                                  ChangeStatus.RENAMED) else None
        reach = tuple(new_reach(find_reach(text), find_reach(before_text) if before_text else None))
    return FileEscapes(change.path, module, is_test, tuple(facts.escapes), frozenset(facts.imports),
                       import_names(ctx, change.path), frozenset(old), tuple(sorted(old.items())),
                       tuple(sorted((k, tuple(sorted(v, key=str))) for k, v in facts.param_writers.items())),
                       tuple((q, tuple(sorted(held.items(), key=lambda kv: str(kv[0]))), line)
                             for q, held, line in facts.foreign_calls),
                       tuple(facts.own_import_writes), reach)


def _same_home(ctx: Context, old: str, new: str) -> bool:
    """Whether a renamed file stays where its base escapes were judged: the same directory, or the same
    model package. A file moved in from another model brings its patches as new."""
    if posixpath.dirname(old) == posixpath.dirname(new):
        return True
    root = ctx.policy.models.packages_dir.strip("/") + "/"
    if old.startswith(root) and new.startswith(root):
        return old[len(root):].split("/")[0] == new[len(root):].split("/")[0]
    return False


def _helper_escapes(files: list[FileEscapes]) -> dict[str, list[Escape]]:
    """Calls handing a foreign object to a function of another changed file that writes through that
    parameter: FT120 at the call (the analysis of one file sees only its own helpers)."""
    writers: dict[str, tuple[FileEscapes, frozenset[int | str]]] = {}
    for f in files:
        for key, refs in f.param_writers:
            func = key[len(f.module) + 1:] if f.module and key.startswith(f.module + ".") else None
            if func:
                for name in f.names:
                    writers[f"{name}.{func}"] = (f, frozenset(refs))
    out: dict[str, list[Escape]] = {}
    for f in files:
        for callee, held, line in f.foreign_calls:
            hit = writers.get(callee)
            if hit is None:
                continue
            helper, written = hit
            for where, target in held:
                if where in written or where in ("*", "**") or (  # a keyword landing in a written **kwargs
                        isinstance(where, str) and "**" in written and f"-{where}" not in written):
                    out.setdefault(f.path, []).append(Escape(
                        "FT120", line, f"passes `{target}` to `{callee.removesuffix(ON_INSTANCE)}` "
                        f"({helper.path}), which writes "
                        "through that parameter: a monkeypatch of an object outside the contribution",
                        target=target, path=f.path))
                    break
    return out


_MAX_REEXPORT_HOPS = 6


def _own_module_file(ctx: Context, own: set[str], module: str) -> Path | None:
    """The head-tree file of one of the contribution's modules (range mode: its dotted path; contribution
    mode: under the contribution directory), or None."""
    bases: list[tuple[str, str]] = []  # (own package, its directory relative to head)
    for pkg in own:
        if ctx.mode == "contribution" and ctx.contribution_dir:
            bases.append((pkg, ctx.contribution_dir.rstrip("/")))
        else:
            bases.append((pkg, pkg.replace(".", "/")))
    for pkg, directory in bases:
        if module != pkg and not module.startswith(pkg + "."):
            continue
        rel = module[len(pkg):].lstrip(".").replace(".", "/")
        stem = Path(ctx.head_dir) / directory / rel if rel else Path(ctx.head_dir) / directory
        for cand in (stem.with_name(stem.name + ".py"), stem / "__init__.py"):
            if cand.is_file():
                return cand
    return None


def _defines(node: ast.stmt, name: str) -> bool:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == name
    targets = node.targets if isinstance(node, ast.Assign) else \
        [node.target] if isinstance(node, ast.AnnAssign) else []
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


def _top_binding(tree: ast.Module, name: str, package: str) -> str | None:
    """How a module's top level binds `name`: the dotted name it imports it from, "" when it defines it
    (def, class, assignment), None when it does not bind it. `package`: the module's package, for
    relative imports."""
    found: str | None = None
    star: str | None = None
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                if (a.asname or a.name.split(".")[0]) == name:
                    found = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            for a in node.names:
                if a.name == "*" and base and found is None:
                    star = star or f"{base}.{name}"  # `from x import *` may bind it: judged as x's
                if (a.asname or a.name) == name and base:
                    found = f"{base}.{a.name}"
        elif _defines(node, name):
            found = ""
    return found if found is not None else star


def _reexport(ctx: Context, own: set[str], target: str) -> str | None:
    """The foreign object an own-looking dotted name really is, when a module of the contribution binds
    it by importing it from outside (`from vllm...linear import RowParallelLinear` in `common.py` makes
    `kimi_k3.common.RowParallelLinear` the engine's class); None when it is the contribution's own."""
    def is_own(q: str) -> bool:
        return any(q == p or q.startswith(p + ".") for p in own)

    for _ in range(_MAX_REEXPORT_HOPS):
        if _own_module_file(ctx, own, target) is not None:
            return None  # one of the contribution's modules itself
        parts = target.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:cut])
            path = _own_module_file(ctx, own, module)
            if path is None:
                continue
            small = path.stat().st_size <= MAX_BASE_BYTES
            text = decode_python_source(path.read_bytes(), str(path)) if small else None
            if not isinstance(text, str):
                return None
            try:
                tree = ast.parse(text)
            except SyntaxError:
                return None
            package = module if path.name == "__init__.py" else module.rpartition(".")[0]
            bound = _top_binding(tree, parts[cut], package)
            if not bound:
                return None  # defined there (or a submodule / name it does not bind): the contribution's
            rest = ".".join([bound, *parts[cut + 1:]])
            if not is_own(bound):
                return rest
            target = rest
            break
        else:
            return None
    return None


def _reexport_escapes(ctx: Context, own: set[str], files: list[FileEscapes]) -> dict[str, list[Escape]]:
    """Writes through a name another of the contribution's files only re-exports (attribute, item,
    setattr, `__setattr__`, `operator.setitem`, an in-place method, `+=`): a write to the engine's object."""
    out: dict[str, list[Escape]] = {}
    roots = ctx.policy.escapes.hidden_import_roots
    for f in files:
        for w in f.own_import_writes:
            real = _reexport(ctx, own, w.obj)
            if real is None or (w.in_place and not state_like_receiver(real, roots)):
                continue
            out.setdefault(f.path, []).append(Escape(
                w.code, w.line, f"{w.how} `{w.obj}`, which is `{real}` re-exported by the contribution's "
                "module: a monkeypatch of an object outside the contribution", target=f"{real}{w.what}",
                path=f.path))
    return out


class EscapeAnalysis:
    """Every changed Python file of one Context, analysed once (by the facts stage, before any rule runs)."""

    def __init__(self, ctx: Context) -> None:
        self.op_namespaces = frozenset(own_op_namespaces(ctx))  # the torch op namespaces it owns
        self.files = self._analyse(ctx)
        self.contribution_dir = ctx.contribution_dir

    @staticmethod
    def _analyse(ctx: Context) -> list[FileEscapes]:
        scope = _Ownership(own_packages(ctx), own_op_namespaces(ctx))
        tests = pathspec.GitIgnoreSpec.from_lines(ctx.policy.escapes.test_paths)
        out: list[FileEscapes] = []
        texts = own_modules(ctx)
        reader = engine_reader_for(ctx.head_dir, ctx.policy.blast_radius.root_package, ctx.policy.engine,
                                   ctx.policy.engine_version, texts, tuple(sorted(scope.packages)),
                                   _baseline_roots(ctx))
        signatures = reader.method_params if reader is not None else None
        metaclasses = reader.metaclass if reader is not None else None
        # one summary of the contribution's modules for every file (each module is read once)
        cross = OwnModuleSummary(_module_reader(ctx, scope.packages, texts), scope.packages,
                                 ctx.policy.escapes, scope.op_namespaces, signatures)
        for change in ctx.changes:
            if change.status not in ANALYSED or not change.path.endswith(".py"):
                continue
            if change.is_submodule:
                continue  # the path rules judge submodules; a .py symlink is analysed as its target's text
            is_test = tests.match_file(change.path) or tests.match_file(ctx.engine_paths.get(change.path, ""))
            out.append(_analyse_file(ctx, change, scope, bool(is_test), signatures, cross, metaclasses))
        extra = _helper_escapes(out)
        for path, more in _reexport_escapes(ctx, scope.packages, out).items():
            extra.setdefault(path, []).extend(more)
        return [dataclasses.replace(f, escapes=f.escapes + tuple(extra[f.path])) if f.path in extra else f
                for f in out]

    @cached_property
    def imported_by_shipping_code(self) -> frozenset[str]:
        """Modules shipping code reaches through the import graph of the changed files: what non-test
        files import, what those import in turn (a test helper importing another ships it too), and the
        parent packages of each (importing a.b.c runs a/__init__ and a/b/__init__)."""
        reached: set[str] = set()
        todo = [m for f in self.files if not f.is_test for m in f.imports]
        by_name = {n: f for f in self.files for n in f.names}
        while todo:
            m = todo.pop()
            parts = m.split(".")
            for i in range(1, len(parts) + 1):
                name = ".".join(parts[:i])
                if name in reached:
                    continue
                reached.add(name)
                f = by_name.get(name)
                if f is not None:
                    todo.extend(f.imports)
        return frozenset(reached)

    def escapes(self, code: str) -> Iterator[tuple[FileEscapes, Escape, Downgrade | None]]:
        """(file, escape, how and why it is downgraded, or None) for every escape with this code.

        - An escape the base revision of the file already had (a modified or renamed file; matched
          one-for-one, see `_match_base`) is not the PR's: an info, whatever its own severity, so that a PR
          touching a shared file that already patches, registers or loads by string is not blamed (or
          flooded with warnings) for lines it did not write. It stays in the verdict, marked.
        - An escape in a test file that no shipping file reaches (through the changed files' imports) is a
          warning.
        - In shipping code every escape is an error (fail closed: a warning never stops a PR), except the
          few the analysis marks `lenient` (an `exec` whose literal text was checked like the file, a
          literal `import_module` of an engine module): those stay warnings.
        - FT128 (cannot be checked) is never downgraded."""
        shipped = self.imported_by_shipping_code
        for f in self.files:
            test = f.is_test and not (f.names & shipped)
            base_line = dict(f.base_lines)
            known = self.contribution_dir not in (None, "", ".")
            if code == GLOBAL_STATE and f.is_test and known and self._collected(f.path):
                yield from ((f, r, None) for r in self._reach_escapes(f))
            for i, esc in enumerate(f.escapes):
                if esc.code != code:
                    continue
                why = None
                if code != UNPARSEABLE and i in f.preexisting:
                    at = f" at line {base_line[i]}" if i in base_line else ""
                    why = Downgrade(Severity.INFO,
                                    f"already in the base revision{at}: not introduced by this PR")
                elif code != UNPARSEABLE and test and reaches_harness(esc, computed_exec=known) and \
                        self._collected(f.path):
                    # Not lowered: the collector runs the contribution's tests, benchmark and evals in the
                    # processes that record the evidence, where this reaches the harness's own objects.
                    esc = dataclasses.replace(esc, message=f"{esc.message} ({HARNESS_REACH_WHY})")
                elif code != UNPARSEABLE and test:
                    why = Downgrade(Severity.WARNING, "in a test file that no shipping file imports")
                yield f, esc, why

    @staticmethod
    def _reach_escapes(f: FileEscapes) -> Iterator[Escape]:
        """The file's references to gc, frames, tracers and ctypes as FT146 errors, one a line, except
        where the escape scan already reports one that reaches the harness on that line."""
        done = {e.line for e in f.escapes if e.code == GLOBAL_STATE and reaches_harness(e)}
        for r in f.reach:
            if r.line in done:
                continue
            done.add(r.line)
            yield Escape(GLOBAL_STATE, r.line, f"{r.how}: a way to reach objects this code does not own "
                         f"({HARNESS_REACH_WHY})", target=r.what, path=f.path)

    def _collected(self, path: str) -> bool:
        """Whether `fasttrack collect` may run this file: it lies in the contribution's directory (every
        file, when the directory is not known: fail closed)."""
        root = self.contribution_dir
        if root is None or root in ("", "."):
            return True
        return path == root or path.startswith(root.rstrip("/") + "/")


# Calls and attributes that reach objects the calling code does not own: every live object, the frames of
# its callers, the interpreter's tracing hooks, raw memory. In a test or benchmark file the collector runs,
# that is the harness's records, timers and comparisons (FT120/FT146 stay errors there).
HARNESS_REACH_CALLS = ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._getframe",
                       "sys._current_frames", "sys._current_exceptions", "inspect.currentframe",
                       "inspect.stack", "inspect.trace", "inspect.getouterframes", "inspect.getinnerframes",
                       "sys.settrace", "sys.setprofile", "threading.settrace", "threading.setprofile",
                       "sys.addaudithook", "sys.monitoring", "ctypes", "_ctypes")
HARNESS_REACH_ATTRS = (".f_back", ".f_locals", ".f_globals", ".f_builtins", ".tb_frame", ".gi_frame",
                       ".cr_frame", ".ag_frame")
HARNESS_REACH_WHY = ("in a file `fasttrack collect` runs (the contribution's tests, benchmark or evals): "
                     "there it reaches the evidence harness's own records and timers, so it is an error even "
                     "in a test file")


_HARNESS_REACH_RE = re.compile(
    r"(?<![\w.])(?:(?:" + "|".join(re.escape(c) for c in sorted(HARNESS_REACH_CALLS, key=len, reverse=True))
    + r")(?!\w)|gc\.(?!(?:collect|disable|enable|freeze)\b))"
    r"|(?<!\w)(?:" + "|".join(re.escape(a.lstrip(".")) for a in HARNESS_REACH_ATTRS) + r")(?!\w)")


def reaches_harness(esc: Escape, *, computed_exec: bool = False) -> bool:
    """Whether an escape's target reaches objects its code does not own (see HARNESS_REACH_CALLS): the
    name anywhere in the target (`<f_locals of sys._getframe()>.values()[*].x`), any `gc.` attribute but
    the collector's switches, a frame attribute; with `computed_exec` (the contribution's directory is
    known), an `exec` of text the scan could not read, too."""
    if computed_exec and esc.code == DYNAMIC_CODE and not esc.lenient:
        return True
    return _HARNESS_REACH_RE.search(esc.target or "") is not None


def analyse_escapes(ctx: Context) -> EscapeAnalysis:
    """The escape analysis of this Context's changed files (reads them: call it from the facts stage)."""
    return EscapeAnalysis(ctx)
