"""What the trace copies into the sandbox and imports: built from the Context before any rule runs.

Contribution mode: every file of the contribution directory lands in the sandbox under its own package
name (`kimi_k3/...`), importable by that name and by its engine name (`contribution.target_path`); every
Python file is a target. Range mode: every file of the model's package in the head tree (`vllm/models/<m>/`)
and of its other local roots is copied; the changed Python modules among them are the targets. The engine
itself is never copied: it is present as recording stand-ins.
"""

from __future__ import annotations

import ast
import os
import posixpath
from pathlib import Path
from typing import Any

import pathspec
from pydantic import BaseModel, ConfigDict

from fasttrack.confinement.trace.stack import ALWAYS_PREIMPORT as ALWAYS_PREIMPORT
from fasttrack.confinement.trace.stack import MAX_FILE_BYTES as MAX_FILE_BYTES
from fasttrack.context import Context
from fasttrack.manifest import Envelope
from fasttrack.policy import MODEL_PLACEHOLDER
from fasttrack.verdict import ChangeStatus

MAX_FILES = 5000
_SKIP_DIRS = {"__pycache__", ".git", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
_TRACED = {ChangeStatus.ADDED, ChangeStatus.MODIFIED, ChangeStatus.RENAMED, ChangeStatus.COPIED,
           ChangeStatus.TYPE_CHANGED}
# ALWAYS_PREIMPORT (trace/stack.py): imported before the "before" snapshot when importable, whatever the
# contribution names: what the engine process always has loaded (vLLM imports torch's compiler stack at
# start-up), so their own import-time work is the baseline, not an effect of the PR, and torch's switches
# are read from it.


class TracePlan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    files: dict[str, str]  # sandbox-relative path -> absolute source path to copy
    display: dict[str, str]  # sandbox-relative path -> the path findings name (as the PR names it)
    own_files: dict[str, str]  # dotted module -> sandbox-relative file
    own_dirs: dict[str, str]  # dotted package -> sandbox-relative directory
    own_prefixes: tuple[str, ...]
    own_op_namespaces: tuple[str, ...]
    engine_roots: tuple[str, ...]
    targets: tuple[str, ...]  # dotted modules imported under trace, in order
    preimport: tuple[str, ...] = ()
    allowed_registrations: tuple[str, ...] = ()
    # called after the imports (`[trace]` of the manifest): module:callable, "" for none
    smoke: str = ""
    guard: str = ""
    guard_input: str = ""
    guard_points: tuple[tuple[str, bool, tuple[tuple[str, Any], ...]], ...] = ()  # (name, fused?, point)


def guard_points(envelope: Envelope) -> tuple[tuple[str, bool, tuple[tuple[str, Any], ...]], ...]:
    """Points the guard is asked about: one inside the envelope (its smallest batch and context on its first
    hardware, TP and dtype: the guard must answer fused) and, one field at a time, just outside it (stock)."""
    hw = envelope.hardware[0]
    inside: dict[str, Any] = {"gpu": hw.name, "compute_capability": hw.compute_capability,
                              "tp": envelope.tp[0], "batch": envelope.batch.min,
                              "context": envelope.context.min, "dtype": envelope.dtypes[0],
                              "cuda_graph": envelope.cuda_graph}
    outside = {"batch": envelope.batch.max + 1, "context": envelope.context.max + 1,
               "tp": max(envelope.tp) + 1}
    points = [("guard inside", True, inside)]
    points += [(f"guard outside ({k})", False, {**inside, k: v}) for k, v in outside.items()]
    return tuple((name, fused, tuple(sorted(p.items()))) for name, fused, p in points)


def _module(rel: str) -> tuple[str, bool] | None:
    """(dotted name, is package) of a sandbox-relative .py path; None when it is not importable."""
    if not rel.endswith(".py"):
        return None
    parts = rel[:-3].split("/")
    pkg = parts[-1] == "__init__"
    if pkg:
        parts = parts[:-1]
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts), pkg


def _walk(root: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        out.extend(Path(dirpath) / f for f in sorted(filenames) if not f.endswith((".pyc", ".pyo")))
        if len(out) > MAX_FILES:
            break
    return out


def _copyable(path: Path) -> bool:
    try:
        return not path.is_symlink() and path.is_file() and path.stat().st_size <= MAX_FILE_BYTES
    except OSError:
        return False


_BLOCK_NODES = (ast.stmt, ast.excepthandler, ast.match_case)


def _imports(text: str) -> set[str]:
    """Absolute module names a file's import statements name (any depth: functions, branches)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    # Import statements are statements: only statement lists (bodies, branches, handlers, match cases) can
    # hold one, never an expression (a lambda's body is an expression), so the walk skips every expression
    # node (most of a file) and finds exactly what `ast.walk` would.
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                names.add(node.module)
        else:
            for _field, value in ast.iter_fields(node):
                if isinstance(value, list):
                    todo.extend(v for v in value if isinstance(v, _BLOCK_NODES))
    return names


def _index(files: dict[str, str], engine_roots: tuple[str, ...],
           prefixes: set[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Dotted name -> file, and package -> directory. A parent without `__init__.py` is a namespace
    package when it is the contribution's own or outside the engine; the engine's own parents
    (`vllm`, `vllm.models`) stay stand-ins."""
    own_files: dict[str, str] = {}
    own_dirs: dict[str, str] = {}
    for rel in files:
        mod = _module(rel)
        if mod is None:
            continue
        name, pkg = mod
        own_files[name] = rel
        parts = name.split(".")
        if pkg:
            own_dirs[name] = posixpath.dirname(rel)
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            mine = any(parent == p or parent.startswith(p + ".") for p in prefixes)
            if mine or parts[0] not in engine_roots:
                own_dirs.setdefault(parent, "/".join(parts[:i]))
    return own_files, own_dirs


def plan_files(ctx: Context) -> TracePlan:
    """The plan for this Context without its pre-imports (`with_preimport` adds them)."""
    policy = ctx.policy
    files: dict[str, str] = {}
    display: dict[str, str] = {}
    targets: list[str] = []
    prefixes: set[str] = set()
    aliases: dict[str, str] = {}  # a second dotted root under which the same files import
    # Test and benchmark files are copied (shipping code may import them) but not imported on their own:
    # what they do at import happens in a test run, not in the engine; reached from shipping code, it is
    # traced and attributed to them.
    tests = pathspec.GitIgnoreSpec.from_lines(policy.escapes.test_paths)
    if ctx.mode == "contribution" and ctx.contribution_dir and ctx.manifest is not None:
        contrib = ctx.contribution_dir.rstrip("/")
        pkg = posixpath.basename(contrib)
        prefixes.add(pkg)
        target = ctx.manifest.contribution.target_path.strip("/").replace("/", ".")
        prefixes.add(target)
        aliases[pkg] = target
        for change in ctx.changes:
            if change.status not in _TRACED or not change.path.startswith(contrib + "/"):
                continue
            src = (ctx.head_dir / change.path)
            rel = f"{pkg}/{change.path[len(contrib) + 1:]}"
            if _copyable(src):
                files[rel] = str(src)
                display[rel] = change.path
                if rel.endswith(".py") and not tests.match_file(change.path[len(contrib) + 1:]) \
                        and not tests.match_file(change.path):
                    mod = _module(rel)
                    if mod is not None:
                        targets.append(mod[0])
    elif ctx.model is not None:
        model = ctx.model
        package = policy.models.package.replace(MODEL_PLACEHOLDER, model)
        prefixes.add(package)
        pkg_dir = package.replace(".", "/")
        roots = [pkg_dir]
        for root in policy.models.local_roots:
            r = root.replace(MODEL_PLACEHOLDER, model).lstrip("/")
            if r.endswith("/**"):
                r = r[:-3]
                if r != pkg_dir and (ctx.head_dir / r).is_dir():
                    roots.append(r)
                    prefixes.add(r.replace("/", "."))
        for root in roots:
            for src in _walk(ctx.head_dir / root):
                rel = src.relative_to(ctx.head_dir).as_posix()
                if _copyable(src):
                    files[rel] = str(src)
                    display[rel] = rel
        changed = {c.path for c in ctx.changes if c.status in _TRACED}
        for rel in sorted(files):
            mod = _module(rel)
            if rel in changed and mod is not None and not tests.match_file(rel):
                targets.append(mod[0])
    engine_roots = tuple(sorted({policy.blast_radius.root_package, *policy.escapes.hidden_import_roots}))
    own_files, own_dirs = _index(files, engine_roots, prefixes)
    for alias_from, alias_to in aliases.items():
        for name, rel in list(own_files.items()):
            if name == alias_from or name.startswith(alias_from + "."):
                own_files[alias_to + name[len(alias_from):]] = rel
        for name, rel in list(own_dirs.items()):
            if name == alias_from or name.startswith(alias_from + "."):
                own_dirs[alias_to + name[len(alias_from):]] = rel

    namespaces = {ctx.manifest.contribution.own_op_namespace} if ctx.manifest is not None else set()
    if ctx.model:
        namespaces.add(ctx.model)
    calls: dict[str, Any] = {}
    if ctx.mode == "contribution" and ctx.manifest is not None and ctx.manifest.trace is not None and targets:
        calls["smoke"] = ctx.manifest.trace.smoke
        if ctx.manifest.trace.guard_input:
            calls.update(guard=ctx.manifest.fallback.guard, guard_input=ctx.manifest.trace.guard_input,
                         guard_points=guard_points(ctx.manifest.envelope))
    return TracePlan(files=files, display=display, own_files=own_files, own_dirs=own_dirs,
                     own_prefixes=tuple(sorted(prefixes)), own_op_namespaces=tuple(sorted(namespaces)),
                     engine_roots=engine_roots, targets=tuple(dict.fromkeys(targets)),
                     allowed_registrations=tuple(policy.escapes.allowed_registrations), **calls)


def with_preimport(plan: TracePlan) -> TracePlan:
    """The plan with what the child imports before its first snapshot: a function of the plan and of its
    files' contents only (what their import statements name), so a key over both covers it."""
    named: set[str] = set()
    for rel, source in plan.files.items():
        if rel.endswith(".py"):
            try:
                named |= _imports(Path(source).read_text(encoding="utf-8", errors="replace"))
            except OSError:
                continue
    prefixes = plan.own_prefixes

    def external(name: str) -> bool:
        top = name.split(".")[0]
        return not (name in plan.own_files or name in plan.own_dirs or top in plan.engine_roots
                    or any(name == p or name.startswith(p + ".") for p in prefixes))

    # The engine's stack is pre-imported when the PR's files name torch (a PR that reaches torch only by a
    # computed name gets it imported under trace: its import-time work is absorbed as torch's own).
    stack = list(ALWAYS_PREIMPORT) if any(n.split(".")[0] in ("torch", "triton") for n in named) else []
    preimport = stack + sorted(n for n in named if external(n) and n not in stack)
    return plan.model_copy(update={"preimport": tuple(preimport)})


def build_plan(ctx: Context) -> TracePlan:
    """The plan for this Context (targets may be empty: nothing to trace)."""
    return with_preimport(plan_files(ctx))
