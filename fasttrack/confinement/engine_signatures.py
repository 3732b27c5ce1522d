"""The parameters of the engine's own methods, read from the engine's source on disk: which positional
parameters `Base.method` takes, found in the nearest class of `Base`'s bases (through re-exports and
aliases) that defines it. The escape scan uses it to taint the parameters of a model class's override by
position: the engine calls `impl.forward(layer, q, k, v, kv_cache, attn_metadata)` positionally, so an
override that renames `attn_metadata` to `m` still gets the engine's object.

`method_params` answers a tuple of names (after self), `()` when no class of the engine's MRO defines the
method (a new method: what its parameters are depends on its callers), or None when it is not defined in
what can be read and the class or one of its bases cannot be read (the scan then fails closed). Every
definition in the MRO counts: a position an engine subclass renamed, or one past a wrapper's `*args`,
answers all the names the engine's definitions give it, joined by `|` (`attn_metadata|md`). The method
`*` (a name computed at run time, or any method) answers `("*",)` when a class of the engine's, not one
of the contribution's `own_packages`, is in the MRO.

Contribution mode: the engine tree does not hold the model's package, so the contribution's own modules
are given as an overlay (`own`: dotted module -> its text, None when it cannot be read) and read before
the tree: an own base class of another file (`from vllm.models.kimi_k3.base import K3Base`) is followed
to the engine classes it derives from. An own module the overlay names but cannot read answers None
(the scan then fails closed)."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path

from fasttrack.confinement.source_text import decode_python_source

_MAX_BYTES = 4 * 1024 * 1024
_MAX_HOPS = 12
_Unknown = None
Signatures = Callable[[str, str], "tuple[str, ...] | None"]
# a dotted class name -> True when it derives from `type` (a metaclass), False when every class of its MRO
# was read and none does, None when some cannot be read
Metaclasses = Callable[[str], "bool | None"]
# dotted module -> (its text, None when it cannot be read; whether it is a package's __init__)
OwnModules = Mapping[str, "tuple[str | None, bool]"]
_BUILTINS = frozenset(n for n in dir(builtins) if isinstance(getattr(builtins, n), type))
# classes outside what the reader reads whose kind is known: metaclasses, and common plain bases
_METACLASSES = frozenset({"builtins.type", "abc.ABCMeta", "enum.EnumMeta", "enum.EnumType",
                          "typing._ProtocolMeta", "typing.NamedTupleMeta", "ctypes._CDataMeta"})
_PLAIN = frozenset({"abc.ABC", "typing.Generic", "typing.Protocol", "typing.NamedTuple", "typing.TypedDict",
                    "enum.Enum", "enum.IntEnum", "enum.StrEnum", "enum.Flag", "enum.IntFlag",
                    "torch.nn.Module", "torch.nn.modules.module.Module", "torch.autograd.Function"})


def known_metaclass(qualname: str) -> bool | None:
    """Whether a class outside what the reader reads is a metaclass, when that is known (`type`, `ABCMeta`,
    `EnumMeta`, ...: True; the builtins' other classes, `ABC`, `Enum`, `torch.nn.Module`, ...: False)."""
    if qualname in _METACLASSES:
        return True
    if qualname in _PLAIN or (qualname.startswith("builtins.") and qualname.count(".") == 1):
        return False
    return None


class EngineSignatures:
    """Method signatures of the engine package `package` under `root` (the tree the PR is judged in)."""

    def __init__(self, root: Path, package: str = "vllm", own: OwnModules | None = None,
                 own_packages: tuple[str, ...] = (), extra_roots: Mapping[str, Path] | None = None) -> None:
        self.root = root
        # other trusted top-level packages read for `metaclass` only (the engine baselines: `baselines` ->
        # the directory holding it)
        self.extra_roots = dict(extra_roots or {})
        self.package = package
        self.own = dict(own or {})
        self.own_packages = own_packages  # the contribution's packages: their classes are not the engine's
        self._trees: dict[str, tuple[ast.Module, bool] | None] = {}
        self.lookup = lru_cache(maxsize=4096)(self._method_params)
        self._kinds: dict[str, bool | None] = {}

    def method_params(self, cls: str, method: str) -> tuple[str, ...] | None:
        return self.lookup(cls, method)

    def _engine(self, qualname: str) -> bool:
        """A class the reader follows: the engine's, or one of the contribution's own modules'."""
        return qualname == self.package or qualname.startswith(self.package + ".") or \
            self._in_overlay(qualname)

    def _in_overlay(self, qualname: str) -> bool:
        """A name of one of the contribution's modules given as the overlay."""
        parts = qualname.split(".")
        return any(".".join(parts[:cut]) in self.own for cut in range(1, len(parts)))

    def _is_own(self, qualname: str) -> bool:
        return any(qualname == p or qualname.startswith(p + ".") for p in self.own_packages) or \
            self._in_overlay(qualname)

    def _module(self, module: str) -> tuple[ast.Module, bool] | None:
        """The parsed module (and whether it is a package), None when it is not a readable file."""
        if module in self._trees:
            return self._trees[module]
        got: tuple[ast.Module, bool] | None = None
        if module in self.own:
            own_text, own_pkg = self.own[module]
            try:
                got = (ast.parse(own_text), own_pkg) if own_text is not None else None
            except (SyntaxError, ValueError, RecursionError):
                got = None
            self._trees[module] = got
            return got
        stem = (self._extra_root(module) or self.root) / module.replace(".", "/")
        for cand, is_pkg in ((stem.with_name(stem.name + ".py"), False), (stem / "__init__.py", True)):
            try:
                if not cand.is_file() or cand.stat().st_size > _MAX_BYTES:
                    continue
                text = decode_python_source(cand.read_bytes(), str(cand))
                if isinstance(text, str):
                    got = (ast.parse(text), is_pkg)
            except (OSError, SyntaxError, ValueError, RecursionError):
                got = None
            break
        self._trees[module] = got
        return got

    def metaclass(self, qualname: str) -> bool | None:
        """Whether the class `qualname` derives from `type` (calling it makes a class), read from the engine
        tree, the contribution's modules and the extra roots: None when some class of its MRO cannot be
        read (the caller then falls back on what the name suggests)."""
        return self._metaclass(qualname, 0)

    def _metaclass(self, qualname: str, depth: int) -> bool | None:
        known = known_metaclass(qualname)
        if known is not None:
            return known
        if qualname in self._kinds:
            return self._kinds[qualname]
        if depth > _MAX_HOPS:
            return None
        self._kinds[qualname] = None  # a cycle reads as unknown
        got = self._find_class(qualname, extra=True)
        kind: bool | None = None
        if got is not None:
            node, module, is_pkg = got
            kinds: list[bool | None] = []
            for b in node.bases:
                base = self._dotted_in(b.value if isinstance(b, ast.Subscript) else b, module, is_pkg)
                kinds.append(None if base is None else self._metaclass(base, depth + 1))
            kind = True if True in kinds else None if None in kinds else False
        self._kinds[qualname] = kind
        return kind

    def _extra_root(self, qualname: str) -> Path | None:
        return self.extra_roots.get(qualname.split(".", 1)[0])

    def _find_class(self, qualname: str, hops: int = 0,
                    extra: bool = False) -> tuple[ast.ClassDef, str, bool] | None:
        """The class statement a dotted name refers to, with its module and whether that is a package
        (`extra`: also in the extra roots)."""
        if hops > _MAX_HOPS or not (self._engine(qualname) or (extra and self._extra_root(qualname))):
            return None
        parts = qualname.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:cut])
            got = self._module(module)
            if got is None:
                continue
            tree, is_pkg = got
            rest = parts[cut:]
            found = self._bound(tree, module, is_pkg, rest[0])
            if isinstance(found, ast.ClassDef):
                node: ast.ClassDef | None = found
                for inner in rest[1:]:  # a nested class
                    node = next((n for n in node.body if isinstance(n, ast.ClassDef) and n.name == inner),
                                None) if node is not None else None
                return (node, module, is_pkg) if node is not None else None
            if isinstance(found, str):
                return self._find_class(".".join([found, *rest[1:]]), hops + 1, extra)
            return None
        return None

    def _bound(self, tree: ast.Module, module: str, is_pkg: bool, name: str) -> ast.ClassDef | str | None:
        """What the module's top level binds `name` to: its class statement, the dotted name it imports or
        aliases, or None (not bound, or bound to something else)."""
        found: ast.ClassDef | str | None = None
        for node in tree.body:
            for n in [node, *self._guarded(node)]:
                got = self._binding(n, module, is_pkg, name)
                if got is not None:
                    found = got
        return found

    def _guarded(self, node: ast.stmt) -> list[ast.stmt]:
        """Statements of top-level `if`/`try` blocks (version guards, optional imports)."""
        out: list[ast.stmt] = []
        if isinstance(node, ast.If):
            for s in [*node.body, *node.orelse]:
                out += [s, *self._guarded(s)]
        elif isinstance(node, ast.Try):
            for s in [*node.body, *node.orelse, *node.finalbody, *(x for h in node.handlers for x in h.body)]:
                out += [s, *self._guarded(s)]
        return out

    def _binding(self, node: ast.stmt, module: str, is_pkg: bool, name: str) -> ast.ClassDef | str | None:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
        if isinstance(node, ast.ImportFrom):
            base = self._absolute(module, is_pkg, node.level, node.module)
            for a in node.names:
                if (a.asname or a.name) == name and base:
                    return f"{base}.{a.name}"
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname == name:
                    return a.name
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name
                                                for t in node.targets):
            return self._dotted_in(node.value, module, is_pkg)
        return None

    def _absolute(self, module: str, is_pkg: bool, level: int, name: str | None) -> str | None:
        if level == 0:
            return name
        parts = module.split(".") if is_pkg else module.split(".")[:-1]
        if level - 1 > len(parts):
            return None
        base = parts[: len(parts) - (level - 1)]
        return ".".join([*base, *([name] if name else [])])

    def _dotted_in(self, expr: ast.expr, module: str, is_pkg: bool) -> str | None:
        """The dotted name an expression of a module names (`Base`, `mod.Base`), resolved through the
        module's own bindings; None for anything else."""
        parts: list[str] = []
        while isinstance(expr, ast.Attribute):
            parts.insert(0, expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return None
        got = self._module(module)
        if got is None:
            return None
        tree, _ = got
        head = self._bound(tree, module, is_pkg, expr.id)
        if isinstance(head, ast.ClassDef):
            return ".".join([module, expr.id, *parts])
        if isinstance(head, str):
            return ".".join([head, *parts])
        for node in tree.body:  # `import a.b` binds `a`
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname is None and a.name.split(".")[0] == expr.id:
                        return ".".join([expr.id, *parts])
        if not parts and expr.id in _BUILTINS:  # `object`, `dict`, `Exception`: not the engine's
            return f"builtins.{expr.id}"
        return None

    def _method_params(self, cls: str, method: str) -> tuple[str, ...] | None:
        """The merged positional parameters of every definition of `method` in `cls`'s engine MRO: a
        position an engine subclass renamed (`md` for `attn_metadata`) or a definition taking `*args`
        (a wrapper passing through) keeps every name the engine's definitions give it, joined by `|`."""
        found: list[tuple[str, ...]] = []
        reached: list[str] = []
        unknown = self._definitions(cls, method, found, set(), 0, reached)
        if method == "*":  # a method under a computed name: any of the engine's, if one is in the MRO
            if any(not self._is_own(c) for c in reached):
                return ("*",)
            return _Unknown if unknown else ()
        if not found:
            return _Unknown if unknown else ()
        merged: list[str] = []
        for i in range(max(len(f) for f in found)):
            names = list(dict.fromkeys(f[i] for f in found if i < len(f)))
            merged.append("|".join(names))
        return tuple(merged)

    def _definitions(self, cls: str, method: str, found: list[tuple[str, ...]], seen: set[str],
                     depth: int, reached: list[str]) -> bool:
        """Append the positional parameters (after self) of each definition of `method` in `cls` and its
        engine bases, nearest first; whether some class on the way cannot be read."""
        if depth > _MAX_HOPS:
            return True
        if cls in seen:
            return False
        seen.add(cls)
        got = self._find_class(cls)
        if got is None:
            return True
        node, module, is_pkg = got
        reached.append(cls)
        for stmt in node.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == method:
                positional = [a.arg for a in [*stmt.args.posonlyargs, *stmt.args.args]]
                static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in stmt.decorator_list)
                found.append(tuple(positional if static else positional[1:]))
        unknown = False
        for b in node.bases:
            if isinstance(b, ast.Subscript):  # Generic[T], Base[X]
                b = b.value
            base = self._dotted_in(b, module, is_pkg)
            if base is None:
                unknown = True
                continue
            if not self._engine(base):
                continue  # torch.nn.Module, typing.Generic, abc.ABC, object: not the engine's signature
            unknown = self._definitions(base, method, found, seen, depth + 1, reached) or unknown
        return unknown


@lru_cache(maxsize=8)
def engine_signatures(root: str, package: str = "vllm", own_packages: tuple[str, ...] = (),
                      extra_roots: tuple[tuple[str, Path], ...] = ()) -> EngineSignatures:
    """One reader per engine tree (the tree is read-only while a PR is judged)."""
    return EngineSignatures(Path(root), package, own_packages=own_packages, extra_roots=dict(extra_roots))


def engine_reader_for(head_dir: Path, package: str, engine: str, version: str,
                      own: OwnModules | None = None, own_packages: tuple[str, ...] = (),
                      extra_roots: Mapping[str, Path] | None = None) -> EngineSignatures | None:
    """The reader of the engine's classes for a PR: from the head tree when it holds the engine's package
    (range mode), else from the engine tree a contribution is laid over ($FASTTRACK_ENGINE_TREE or the
    cache, as `fasttrack verify` finds it); None when neither is at hand (parameters are then judged by
    name and annotation only). `own` (contribution mode): the contribution's modules, read before the
    engine tree and never from the repository around the contribution (a `vllm/` the contributor ships
    beside it is not the engine). `extra_roots`: other trusted packages (the engine baselines), read only
    to tell a metaclass from a plain class."""
    import os

    from fasttrack.cache import cache_root

    candidates = [] if own is not None else [head_dir]
    env = os.environ.get("FASTTRACK_ENGINE_TREE")
    candidates += [Path(env)] if env else []
    candidates.append(cache_root() / f"{engine}-{version}")
    extra = dict(extra_roots or {})
    for root in candidates:
        if (root / package).is_dir():
            if own is not None:
                return EngineSignatures(root.resolve(), package, own, own_packages, extra)
            return engine_signatures(str(root.resolve()), package, own_packages, tuple(sorted(extra.items())))
    return None


def signatures_for(head_dir: Path, package: str, engine: str, version: str,
                   own: OwnModules | None = None, own_packages: tuple[str, ...] = ()) -> Signatures | None:
    """The engine's method signatures for a PR (`engine_reader_for`), or None."""
    reader = engine_reader_for(head_dir, package, engine, version, own, own_packages)
    return reader.method_params if reader is not None else None
