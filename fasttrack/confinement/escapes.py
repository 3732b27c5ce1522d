"""Escapes: ways a change reaches outside its contribution at run time without editing a shared file.

A PR can stay inside the model's own directory and still change every other model: assign a new
`forward` to a shared layer class, swap a module in `sys.modules`, set an environment variable at
import time, register an op implementation over `aten`, or load a shared module by string and patch
it. This module finds those in the source of one file with `ast`; it never imports the code.

Names are resolved through the file's own bindings (imports, aliases, defs, parameters) with Python's
scoping rules, so `x.Foo.forward = f` is caught when `x` is `import vllm.layers as x`, while a write to
`self.x`, to a local object or to the contribution's own modules is not.

`find_escapes(source, path, own_packages, ...)` is pure: it returns `Escape`s and never raises on bad
input (a file that does not parse is itself an escape finding, FT128: it cannot be checked).
"""

from __future__ import annotations

import ast
import builtins
import fnmatch
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from fasttrack.policy import EscapesSpec

EscapeSeverity = Literal["error", "warning"]

MONKEYPATCH = "FT120"
SETATTR = "FT121"
INTERPRETER = "FT122"
ENVIRONMENT = "FT123"
REGISTRY = "FT124"
TORCH_LIBRARY = "FT125"
IMPORTLIB = "FT126"
DYNAMIC_CODE = "FT127"
UNPARSEABLE = "FT128"

_BUILTIN_NAMES = frozenset(dir(builtins))
# In-place container methods: called on foreign state they mutate it.
_MUTATORS = frozenset({
    "update", "setdefault", "pop", "popitem", "clear", "append", "extend", "insert", "remove", "add",
    "discard", "__setitem__", "__delitem__", "__ior__",
})
_INTERPRETER_HOOKS = frozenset({
    "sys.settrace", "sys.setprofile", "sys.addaudithook", "threading.settrace", "threading.setprofile",
    "threading.settrace_all_threads", "threading.setprofile_all_threads", "sys.monitoring.register_callback",
    "sys.monitoring.use_tool_id",
})
_IMPORT_SYSTEM = ("sys.modules", "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache")
_ENVIRON = ("os.environ", "os.environb")
# torch.library functions and the argument naming the op they define or override.
_TORCH_LIBRARY_FUNCS = frozenset({
    "define", "impl", "register_fake", "register_kernel", "register_autograd", "register_torch_dispatch",
    "register_vmap", "custom_op", "triton_op", "impl_abstract", "register_autocast",
})
_DEFINING_FUNCS = frozenset({"define", "custom_op", "triton_op"})
_LIBRARY_METHODS = frozenset({"define", "impl", "fallback", "_register_fake", "_impl_with_aoti_compile",
                              "_register_torch_dispatch_rule"})
_MOCK_PATCH = ("unittest.mock.patch", "mock.patch")
_FILE_LOADERS = frozenset({
    "importlib.util.spec_from_file_location", "importlib.machinery.SourceFileLoader",
    "importlib.machinery.SourcelessFileLoader", "importlib.machinery.ExtensionFileLoader",
    "imp.load_source", "imp.load_compiled", "imp.load_dynamic", "imp.load_module",
})
_MAX_EXEC_DEPTH = 3
# Nodes with nothing below them to bind or check (names in expressions are resolved, not visited).
_LEAVES = frozenset({
    ast.Name, ast.Constant, ast.Load, ast.Store, ast.Del, ast.Pass, ast.Break, ast.Continue,
    *(c for c in vars(ast).values() if isinstance(c, type) and issubclass(c, ast.operator | ast.unaryop |
                                                                          ast.cmpop | ast.boolop)),
})


@dataclass(frozen=True)
class Escape:
    """One escape: what the code at `path:line` does to state outside the contribution."""

    code: str
    line: int
    message: str
    severity: EscapeSeverity = "error"
    target: str | None = None  # the dotted name written, called or loaded, when known
    path: str = ""
    col: int = 0


@dataclass
class FileFacts:
    """What `analyse_source` learns about one file: its escapes and the modules it imports."""

    escapes: list[Escape] = field(default_factory=list)
    imports: set[str] = field(default_factory=set)


# --------------------------------------------------------------------------------------------------
# Bindings and scopes


@dataclass(frozen=True)
class _Import:
    qualname: str  # absolute dotted name the binding refers to


@dataclass(frozen=True)
class _Own:
    qualname: str  # a def/class in this file, or a relative import we could not place


@dataclass(frozen=True, eq=False)
class _Alias:
    value: ast.expr
    scope: _Scope


@dataclass(frozen=True)
class _Local:
    pass


_Binding = _Import | _Own | _Alias | _Local
_LOCAL = _Local()


@dataclass(eq=False)
class _Scope:
    kind: Literal["module", "function", "class", "comprehension"]
    parent: _Scope | None
    bindings: dict[str, list[_Binding]] = field(default_factory=dict)
    globals_: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)

    def bind(self, name: str, binding: _Binding) -> None:
        self.bindings.setdefault(name, []).append(binding)


@dataclass(frozen=True)
class _Ref:
    """What an expression refers to: an imported (dotted) name, the file's own thing, a local object,
    or the class of a local object (`type(x)`, `x.__class__`)."""

    origin: Literal["import", "own", "local", "classof"]
    qualname: str = ""


_LOCAL_REF = _Ref("local")
_Handler = Callable[[ast.AST, "_Scope", bool], None]


def module_name_for(path: str) -> str | None:
    """The dotted module name of a repository-relative .py path, or None if it is not importable."""
    if not path.endswith(".py"):
        return None
    parts = path[:-3].split("/")
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


@functools.lru_cache(maxsize=64)
def _pattern(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or "(?!)")


def _matches(name: str, patterns: Sequence[str]) -> bool:
    """Whether a dotted name matches any fnmatch pattern (`*` spans dots)."""
    return _pattern(tuple(patterns)).match(name) is not None


def _dotted_literal(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _string_prefix(node: ast.expr) -> str | None:
    """The constant prefix of an f-string or `"a." + x`, or the whole literal; None if none."""
    lit = _dotted_literal(node)
    if lit is not None:
        return lit
    if isinstance(node, ast.JoinedStr):
        first = node.values[0] if node.values else None
        return _dotted_literal(first) if isinstance(first, ast.Constant) else ""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _string_prefix(node.left)
    return None


def _arg(call: ast.Call, index: int, *names: str) -> ast.expr | None:
    if len(call.args) > index and not any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
        return call.args[index]
    for kw in call.keywords:
        if kw.arg in names:
            return kw.value
    return None


class _Analyser:
    def __init__(self, tree: ast.Module, path: str, own_packages: set[str], module: str | None,
                 is_package: bool, own_op_namespaces: set[str], settings: EscapesSpec,
                 exec_depth: int, foreign_op_namespaces: frozenset[str] = frozenset()) -> None:
        self.tree = tree
        self.path = path
        self.own_packages = {p for p in own_packages if p}
        self.module = module
        self.is_package = is_package
        self.own_ops = own_op_namespaces
        self.foreign_ops = foreign_op_namespaces
        self.settings = settings
        self.exec_depth = exec_depth
        self.scopes: dict[ast.AST, _Scope] = {}
        self.module_scope = _Scope("module", None)
        self.star_imports: list[str] = []
        self.facts = FileFacts()
        self._resolving: set[int] = set()
        self._memo: dict[int, _Ref | None] = {}
        self._resolving_names: set[tuple[int, str]] = set()
        self._name_memo: dict[tuple[int, str], _Ref | None] = {}
        self._found: set[tuple[str, int, int, str]] = set()
        self._stack: list[tuple[ast.AST, _Scope, bool]] = []
        self.candidates: list[tuple[ast.AST, _Scope, bool]] = []
        self._binders = self._make_binders()

    # ---------------------------------------------------------------- ownership

    def is_own(self, qualname: str) -> bool:
        return any(qualname == p or qualname.startswith(p + ".") for p in self.own_packages)

    def foreign(self, ref: _Ref | None) -> bool:
        return ref is not None and ref.origin == "import" and not self.is_own(ref.qualname)

    def _absolute(self, level: int, module: str | None) -> str | None:
        """Absolute name of a relative import, or None if the file's module is unknown."""
        if level == 0:
            return module
        if self.module is None:
            return None
        parts = self.module.split(".")
        if not self.is_package:
            parts = parts[:-1]
        if level - 1 > len(parts) - 1:
            return None
        base = parts[: len(parts) - (level - 1)]
        return ".".join(base + ([module] if module else []))

    # ---------------------------------------------------------------- binding pass

    def bind_all(self) -> None:
        """One pass over the tree: bind every name in its scope (Python's rules: functions, lambdas,
        classes and comprehensions have their own) and collect the nodes the check pass judges, with
        the scope they run in and whether they run when the module is imported."""
        self.scopes[self.tree] = self.module_scope
        stack: list[tuple[ast.AST, _Scope, bool]] = [
            (n, self.module_scope, True) for n in reversed(self.tree.body)]
        self._stack = stack
        while stack:
            node, scope, import_time = stack.pop()
            handler = self._binders.get(type(node))
            if handler is not None:
                handler(node, scope, import_time)
            else:
                self._push_children(node, scope, import_time)

    def _push(self, nodes: Sequence[ast.AST | None], scope: _Scope, import_time: bool) -> None:
        self._stack.extend((n, scope, import_time) for n in reversed(nodes)
                           if n is not None and type(n) not in _LEAVES)

    def _push_children(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        self._push(list(ast.iter_child_nodes(node)), scope, import_time)

    def _bind_target(self, target: ast.expr, scope: _Scope, value: ast.expr | None,
                     import_time: bool) -> None:
        if isinstance(target, ast.Name):
            home = self.module_scope if target.id in scope.globals_ else scope
            home.bind(target.id, _Alias(value, scope) if value is not None else _LOCAL)
        elif isinstance(target, ast.Starred):
            self._bind_target(target.value, scope, None, import_time)
        elif isinstance(target, ast.Tuple | ast.List):
            values: list[ast.expr] | None = None
            if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts):
                values = list(value.elts)
            for i, elt in enumerate(target.elts):
                self._bind_target(elt, scope, values[i] if values else None, import_time)
        else:
            self._push([target], scope, import_time)

    def _bind_loop_target(self, target: ast.expr, iterable: ast.expr, scope: _Scope,
                          import_time: bool) -> None:
        """`for m in (a, b)` binds m to each element (so `m.x = 1` is judged for a and b)."""
        if isinstance(target, ast.Name) and isinstance(iterable, ast.Tuple | ast.List | ast.Set):
            for elt in iterable.elts:
                scope.bind(target.id, _Alias(elt, scope))
            if not iterable.elts:
                scope.bind(target.id, _LOCAL)
        else:
            self._bind_target(target, scope, None, import_time)

    @staticmethod
    def _bind_args(args: ast.arguments, scope: _Scope) -> None:
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            scope.bind(a.arg, _LOCAL)
        if args.vararg:
            scope.bind(args.vararg.arg, _LOCAL)
        if args.kwarg:
            scope.bind(args.kwarg.arg, _LOCAL)

    def _b_function(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        if not isinstance(node, ast.Lambda):
            scope.bind(node.name, _Own(f"{self.module or '<file>'}.{node.name}"))
            if node.decorator_list:
                self.candidates.append((node, scope, import_time))
        child = _Scope("function", scope)
        self.scopes[node] = child
        self._bind_args(node.args, child)
        body = node.body if isinstance(node.body, list) else [node.body]
        self._push(body, child, False)
        self._push([*getattr(node, "decorator_list", []), *node.args.defaults, *node.args.kw_defaults,
                    *_annotations(node)], scope, import_time)

    def _b_class(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.ClassDef)
        scope.bind(node.name, _Own(f"{self.module or '<file>'}.{node.name}"))
        if node.decorator_list:
            self.candidates.append((node, scope, import_time))
        child = _Scope("class", scope)
        self.scopes[node] = child
        self._push(node.body, child, import_time)
        self._push([*node.decorator_list, *node.bases, *(k.value for k in node.keywords)], scope, import_time)

    def _b_comprehension(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp)
        child = _Scope("comprehension", scope)
        self.scopes[node] = child
        parts: list[ast.AST] = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        for i, gen in enumerate(node.generators):
            self._bind_loop_target(gen.target, gen.iter, child, import_time)
            parts.extend(gen.ifs)
            if i:
                parts.append(gen.iter)
        self._push(parts, child, import_time)
        if node.generators:
            self._push([node.generators[0].iter], scope, import_time)

    def _b_import(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.Import)
        for alias in node.names:
            self.facts.imports.add(alias.name)
            if alias.asname:
                scope.bind(alias.asname, _Import(alias.name))
            else:
                top = alias.name.split(".")[0]
                scope.bind(top, _Import(top))

    def _b_import_from(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.ImportFrom)
        base = self._absolute(node.level, node.module)
        if base is not None:
            self.facts.imports.add(base)
        for alias in node.names:
            if alias.name == "*":
                if base is not None:
                    self.star_imports.append(base)
                continue
            name = alias.asname or alias.name
            if base is None:
                scope.bind(name, _Own(f"<relative>.{alias.name}"))
            else:
                self.facts.imports.add(f"{base}.{alias.name}")
                scope.bind(name, _Import(f"{base}.{alias.name}"))

    def _b_assign(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                self._bind_target(t, scope, node.value, import_time)
            self._push([node.value], scope, import_time)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self._bind_target(node.target, scope, node.value, import_time)
                self._push([node.value], scope, import_time)
            elif not isinstance(node.target, ast.Name):
                self._push([node.target], scope, import_time)
        elif isinstance(node, ast.AugAssign):
            if isinstance(node.target, ast.Name):
                scope.bind(node.target.id, _LOCAL)
            else:
                self._push([node.target], scope, import_time)
            self._push([node.value], scope, import_time)
        elif isinstance(node, ast.NamedExpr):
            home = scope
            while home.kind == "comprehension" and home.parent is not None:
                home = home.parent
            home.bind(node.target.id, _Alias(node.value, scope))
            self._push([node.value], scope, import_time)

    def _b_for(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.For | ast.AsyncFor)
        self._bind_loop_target(node.target, node.iter, scope, import_time)
        self._push([node.iter, *node.body, *node.orelse], scope, import_time)

    def _b_with(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.With | ast.AsyncWith)
        for item in node.items:
            if item.optional_vars is not None:
                self._bind_target(item.optional_vars, scope, None, import_time)
        self._push([*(i.context_expr for i in node.items), *node.body], scope, import_time)

    def _b_except(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.ExceptHandler)
        if node.name:
            scope.bind(node.name, _LOCAL)
        self._push([node.type, *node.body], scope, import_time)

    def _b_global(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        if isinstance(node, ast.Global):
            scope.globals_.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            scope.nonlocals.update(node.names)

    def _b_match(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        name = getattr(node, "name", None) or getattr(node, "rest", None)
        if isinstance(name, str):
            scope.bind(name, _LOCAL)
        self._push_children(node, scope, import_time)

    def _b_if(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.If)
        if scope.kind == "module" and _is_main_guard(node.test):
            self._push(node.orelse, scope, import_time)
            self._push(node.body, scope, False)  # runs as a script, not on import
            self._push([node.test], scope, import_time)
        else:
            self._push_children(node, scope, import_time)

    def _b_candidate(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        if isinstance(node, ast.Call) or isinstance(getattr(node, "ctx", None), ast.Store | ast.Del):
            self.candidates.append((node, scope, import_time))
        self._push_children(node, scope, import_time)

    def _make_binders(self) -> dict[type[ast.AST], _Handler]:
        return {
            ast.FunctionDef: self._b_function, ast.AsyncFunctionDef: self._b_function,
            ast.Lambda: self._b_function, ast.ClassDef: self._b_class,
            ast.ListComp: self._b_comprehension, ast.SetComp: self._b_comprehension,
            ast.GeneratorExp: self._b_comprehension, ast.DictComp: self._b_comprehension,
            ast.Import: self._b_import, ast.ImportFrom: self._b_import_from,
            ast.Assign: self._b_assign, ast.AnnAssign: self._b_assign, ast.AugAssign: self._b_assign,
            ast.NamedExpr: self._b_assign, ast.For: self._b_for, ast.AsyncFor: self._b_for,
            ast.With: self._b_with, ast.AsyncWith: self._b_with, ast.ExceptHandler: self._b_except,
            ast.Global: self._b_global, ast.Nonlocal: self._b_global, ast.MatchAs: self._b_match,
            ast.MatchStar: self._b_match, ast.MatchMapping: self._b_match, ast.If: self._b_if,
            ast.Call: self._b_candidate, ast.Attribute: self._b_candidate, ast.Subscript: self._b_candidate,
        }

    # ---------------------------------------------------------------- resolution

    def _lookup(self, name: str, scope: _Scope) -> list[_Binding] | None:
        s: _Scope | None = scope
        first = True
        while s is not None:
            if s.kind == "class" and not first:
                s = s.parent
                continue
            if name in s.globals_:
                return self.module_scope.bindings.get(name)
            if name in s.nonlocals:
                s = s.parent
                first = False
                continue
            if name in s.bindings:
                return s.bindings[name]
            s = s.parent
            first = False
        return None

    def resolve(self, node: ast.expr, scope: _Scope) -> _Ref | None:
        """What `node` refers to, or None when it is not a name-like expression."""
        key = id(node)
        if key in self._memo:
            return self._memo[key]
        if key in self._resolving:
            return None  # a cycle (x = x.y): no further information
        self._resolving.add(key)
        try:
            ref = self._resolve(node, scope)
        finally:
            self._resolving.discard(key)
        self._memo[key] = ref
        return ref

    def _resolve_name(self, name: str, scope: _Scope) -> _Ref | None:
        # Flow-insensitive, so one answer per (scope, name); memoised, which also keeps a name with many
        # assignments (s = s.a; s = s.b; ...) linear instead of exponential.
        key = (id(scope), name)
        if key in self._name_memo:
            return self._name_memo[key]
        if key in self._resolving_names:
            return None
        self._resolving_names.add(key)
        try:
            ref = self._resolve_name_uncached(name, scope)
        finally:
            self._resolving_names.discard(key)
        self._name_memo[key] = ref
        return ref

    def _resolve_name_uncached(self, name: str, scope: _Scope) -> _Ref | None:
        if name == "__builtins__":
            return _Ref("import", "builtins")
        if name in ("__name__", "__package__", "__spec__"):
            return _LOCAL_REF
        bindings = self._lookup(name, scope)
        if bindings is None:
            if name in _BUILTIN_NAMES:
                return _Ref("import", f"builtins.{name}")
            for star in self.star_imports:
                return _Ref("import", f"{star}.{name}")
            return None
        refs: list[_Ref] = []
        for b in bindings:
            if isinstance(b, _Import):
                refs.append(_Ref("import", b.qualname))
            elif isinstance(b, _Own):
                refs.append(_Ref("own", b.qualname))
            elif isinstance(b, _Alias):
                r = self.resolve(b.value, b.scope)
                refs.append(r if r is not None else _LOCAL_REF)
            else:
                refs.append(_LOCAL_REF)
        # Conservative: if any binding of the name reaches a foreign object, judge it as that object.
        for r in refs:
            if self.foreign(r):
                return r
        for origin in ("import", "own", "classof"):
            for r in refs:
                if r.origin == origin:
                    return r
        return _LOCAL_REF

    def _resolve(self, node: ast.expr, scope: _Scope) -> _Ref | None:
        if isinstance(node, ast.Name):
            return self._resolve_name(node.id, scope)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value, scope)
            if base is None:
                return None
            if node.attr == "__class__" and base.origin == "local":
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    return _Ref("own", "<own class>")
                return _Ref("classof", "<class of a local object>")
            if base.origin == "local":
                return _LOCAL_REF
            return _Ref(base.origin, f"{base.qualname}.{node.attr}")
        if isinstance(node, ast.Subscript):
            base = self.resolve(node.value, scope)
            if base is None:
                return None
            key = _dotted_literal(node.slice)
            if base.origin == "import" and base.qualname == "sys.modules":
                if isinstance(node.slice, ast.Name) and node.slice.id == "__name__":
                    return _Ref("own", self.module or "<this module>")
                if key is not None:
                    return _Ref("import", key)
                return _Ref("import", "sys.modules[*]")
            if base.origin == "local":
                return _LOCAL_REF
            return _Ref(base.origin, f"{base.qualname}[{key!r}]" if key else f"{base.qualname}[...]")
        if isinstance(node, ast.Call):
            return self._resolve_call(node, scope)
        if isinstance(node, ast.NamedExpr):
            return self.resolve(node.value, scope)
        return None

    def _resolve_call(self, node: ast.Call, scope: _Scope) -> _Ref:
        callee = self.resolve(node.func, scope)
        if callee is None or callee.origin != "import":
            return _LOCAL_REF
        q = callee.qualname
        first = _arg(node, 0, "name", "o", "object")
        if q in ("importlib.import_module", "builtins.__import__"):
            loaded = self._loaded_module(node, q)
            # a relative load we cannot place is the file's own package; a placed one is judged by name
            return _Ref("own", "<relative>") if loaded is None else _Ref("import", loaded)
        if q == "builtins.getattr" and first is not None:
            base = self.resolve(first, scope)
            attr = _dotted_literal(_arg(node, 1))
            if base is None or base.origin == "local":
                return _LOCAL_REF
            return _Ref(base.origin, f"{base.qualname}.{attr if attr else '*'}")
        if q == "builtins.vars" and first is not None:
            base = self.resolve(first, scope)
            if base is None or base.origin == "local":
                return _LOCAL_REF
            return _Ref(base.origin, f"{base.qualname}.__dict__")
        if q == "builtins.globals":
            return _Ref("own", f"{self.module or '<this module>'}.__dict__")
        if q == "builtins.type" and len(node.args) == 1 and first is not None:
            base = self.resolve(first, scope)
            if isinstance(first, ast.Name) and first.id in ("self", "cls"):
                return _Ref("own", "<own class>")
            if base is None or base.origin == "local":
                return _Ref("classof", "<class of a local object>")
            return base  # type(<module or class>) is as foreign as the thing itself
        if q == "sys.modules.get" and first is not None:
            key = _dotted_literal(first)
            return _Ref("import", key) if key else _Ref("import", "sys.modules[*]")
        return _LOCAL_REF

    def _is_relative_load(self, node: ast.Call) -> bool:
        first = _arg(node, 0, "name")
        prefix = _string_prefix(first) if first is not None else None
        return bool(prefix) and prefix is not None and prefix.startswith(".")

    def _loaded_module(self, node: ast.Call, q: str) -> str | None:
        """The module an import_module/__import__ call loads ('x.*' when only a prefix is literal)."""
        first = _arg(node, 0, "name")
        if first is None:
            return None
        lit = _dotted_literal(first)
        prefix = _string_prefix(first)
        if lit is not None:
            name = lit
        elif prefix:
            name = prefix.rstrip(".") + ".*" if not prefix.endswith(".") else prefix + "*"
        else:
            return "*"
        if name.startswith("."):
            level = len(name) - len(name.lstrip("."))
            absolute = self._absolute(level, name.lstrip(".") or None)
            return absolute
        if q == "builtins.__import__":
            fromlist = _arg(node, 3, "fromlist")
            has_fromlist = fromlist is not None and not (
                isinstance(fromlist, ast.Constant) and not fromlist.value) and not (
                isinstance(fromlist, ast.Tuple | ast.List) and not fromlist.elts)
            if not has_fromlist:
                return name.split(".")[0]
        return name

    # ---------------------------------------------------------------- reporting

    def report(self, code: str, node: ast.AST, message: str, *, severity: EscapeSeverity = "error",
               target: str | None = None) -> None:
        line = getattr(node, "lineno", 1) or 1
        col = getattr(node, "col_offset", 0) or 0
        key = (code, line, col, target or message)
        if key in self._found:
            return
        self._found.add(key)
        self.facts.escapes.append(Escape(code=code, line=line, col=col, message=message,
                                         severity=severity, target=target, path=self.path))

    # ---------------------------------------------------------------- check pass

    def check(self) -> None:
        for node, scope, import_time in self.candidates:
            if isinstance(node, ast.Attribute):
                self._check_attribute_write(node, scope, import_time)
            elif isinstance(node, ast.Subscript):
                self._check_subscript_write(node, scope, import_time)
            elif isinstance(node, ast.Call):
                self._check_call(node, scope, import_time)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self._check_bare_decorators(node, scope)


    def _classify(self, target: str) -> str | None:
        """The escape family of a write to `target`, when it is more specific than a monkeypatch."""
        if target == "builtins" or target.startswith(("builtins.", "builtins[")):
            return INTERPRETER
        if any(target == m or target.startswith((m + ".", m + "[")) for m in _IMPORT_SYSTEM):
            return INTERPRETER
        if target == "sys.path" or target.startswith(("sys.path.", "sys.path[")):
            return INTERPRETER
        if any(target == e or target.startswith((e + ".", e + "[")) for e in _ENVIRON):
            return ENVIRONMENT
        if any(target.startswith(m + ".") for m in self.settings.global_flag_modules):
            return ENVIRONMENT
        return None

    def _env_severity(self, import_time: bool) -> EscapeSeverity:
        return "error" if import_time else "warning"

    def _report_write(self, node: ast.AST, target: str, verb: str, default_code: str,
                      import_time: bool, how: str) -> None:
        if _matches(target, self.settings.allowed_writes):
            return
        code = self._classify(target) or default_code
        if code == INTERPRETER:
            sev: EscapeSeverity = "warning" if target.startswith("sys.path") else "error"
            what = ("the builtins module" if target.startswith("builtins") else
                    "the import system" if not target.startswith("sys.path") else "sys.path")
            self.report(code, node, f"{verb} `{target}` ({how}): edits {what}, which every module shares",
                        severity=sev, target=target)
        elif code == ENVIRONMENT:
            when = "at import time" if import_time else "inside a function"
            self.report(code, node, f"{verb} `{target}` {when} ({how}): changes process-wide state that "
                        "every model sees", severity=self._env_severity(import_time), target=target)
        elif code == SETATTR:
            self.report(code, node, f"{verb} `{target}` ({how}) on a module or class outside the "
                        "contribution", target=target)
        else:
            self.report(code, node, f"{verb} `{target}` ({how}), an attribute of a module or class outside "
                        "the contribution: a monkeypatch that changes it for every model", target=target)

    def _check_attribute_write(self, node: ast.Attribute, scope: _Scope, import_time: bool) -> None:
        base = self.resolve(node.value, scope)
        verb = "deletes" if isinstance(node.ctx, ast.Del) else "assigns"
        if base is None:
            return
        if base.origin == "classof":
            self.report(MONKEYPATCH, node, f"{verb} `{node.attr}` on the class of an object "
                        "(`type(x)`/`x.__class__`): a class-wide patch whose class cannot be checked "
                        "statically", severity="warning", target=f"{base.qualname}.{node.attr}")
            return
        if not self.foreign(base):
            return
        self._report_write(node, f"{base.qualname}.{node.attr}", verb, MONKEYPATCH, import_time,
                           "attribute assignment" if verb == "assigns" else "del")

    def _check_subscript_write(self, node: ast.Subscript, scope: _Scope, import_time: bool) -> None:
        base = self.resolve(node.value, scope)
        if not self.foreign(base) or base is None:
            return
        key = _dotted_literal(node.slice)
        target = f"{base.qualname}[{key!r}]" if key else f"{base.qualname}[...]"
        verb = "deletes" if isinstance(node.ctx, ast.Del) else "writes"
        default = SETATTR if base.qualname.endswith(".__dict__") else MONKEYPATCH
        self._report_write(node, target, verb, default, import_time, "item assignment")

    def _check_bare_decorators(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef,
                               scope: _Scope) -> None:
        for dec in node.decorator_list:
            if isinstance(dec, ast.Call):
                continue
            ref = self.resolve(dec, scope)
            if self.foreign(ref) and ref is not None:
                self._check_registration(dec, ref.qualname, registered=_Ref("own", node.name),
                                         first_arg_local=False)

    # calls ------------------------------------------------------------------------------------

    def _check_call(self, node: ast.Call, scope: _Scope, import_time: bool) -> None:
        if isinstance(node.func, ast.Call):
            self._check_decorator_application(node, scope)
        callee = self.resolve(node.func, scope)
        if callee is None or callee.origin != "import" or self.is_own(callee.qualname):
            self._check_library_method_on_local(node, scope)
            return
        q = callee.qualname
        receiver, _, method = q.rpartition(".")
        if q in ("builtins.exec", "builtins.eval", "builtins.compile"):
            self._check_dynamic_code(node, q, scope)
            return
        if q in ("builtins.setattr", "builtins.delattr"):
            self._check_setattr(node, q, scope, import_time)
            return
        if method in ("__setattr__", "__delattr__"):
            self._check_dunder_setattr(node, receiver, scope, import_time)
            return
        if q in _MOCK_PATCH or receiver in _MOCK_PATCH:
            self._check_mock_patch(node, q, scope, import_time)
            return
        if q in _INTERPRETER_HOOKS:
            self.report(INTERPRETER, node, f"calls `{q}`: installs an interpreter-wide hook", target=q)
            return
        if _matches(q, self.settings.global_flag_calls):
            when = "at import time" if import_time else "inside a function"
            self.report(ENVIRONMENT, node, f"calls `{q}` {when}: changes process-wide state that every "
                        "model sees", severity=self._env_severity(import_time), target=q)
            return
        if method in _MUTATORS and receiver and self._check_mutator(node, receiver, method, import_time,
                                                                     scope):
            return
        if self._check_torch_library(node, q, receiver, method, scope):
            return
        if self._check_importlib(node, q, scope):
            return
        self._check_registration(node, q, registered=None,
                                 first_arg_local=self._first_arg_local(node, scope), scope=scope)

    def _first_arg_local(self, node: ast.Call, scope: _Scope) -> bool:
        if not node.args or isinstance(node.args[0], ast.Starred):
            return False
        ref = self.resolve(node.args[0], scope)
        return ref is not None and ref.origin == "local" and not isinstance(node.args[0], ast.Constant)

    def _check_dynamic_code(self, node: ast.Call, q: str, scope: _Scope) -> None:
        fn = q.split(".")[-1]
        src = _dotted_literal(_arg(node, 0, "source"))
        self.report(DYNAMIC_CODE, node, f"calls `{fn}()`: code built from strings cannot be checked for "
                    "escapes" + ("; its literal source was checked too" if src is not None else ""),
                    severity="warning", target=q)
        if src is not None and self.exec_depth < _MAX_EXEC_DEPTH:
            inner = _analyse(src, self.path, self.own_packages, self.module, self.is_package,
                             self.own_ops, self.settings, self.exec_depth + 1, self.foreign_ops)
            for esc in inner.escapes:
                if esc.code == UNPARSEABLE:
                    continue
                self.report(esc.code, node, f"in the string passed to `{fn}()`: {esc.message}",
                            severity=esc.severity, target=esc.target)

    def _check_setattr(self, node: ast.Call, q: str, scope: _Scope, import_time: bool) -> None:
        first = _arg(node, 0)
        if first is None:
            return
        obj = self.resolve(first, scope)
        name = _dotted_literal(_arg(node, 1)) or "*"
        fn = q.split(".")[-1]
        verb = "deletes" if fn == "delattr" else "sets"
        if obj is not None and obj.origin == "classof":
            self.report(SETATTR, node, f"{fn}() on the class of an object (`type(x)`/`x.__class__`): a "
                        "class-wide patch whose class cannot be checked statically", severity="warning",
                        target=f"{obj.qualname}.{name}")
        elif self.foreign(obj) and obj is not None:
            self._report_write(node, f"{obj.qualname}.{name}", verb, SETATTR, import_time, f"{fn}()")

    def _check_dunder_setattr(self, node: ast.Call, receiver: str, scope: _Scope,
                              import_time: bool) -> None:
        # object.__setattr__(target, name, value) vs. Foreign.__setattr__(name, value)
        if receiver in ("builtins.object", "builtins.type"):
            first = _arg(node, 0)
            obj = self.resolve(first, scope) if first is not None else None
            name = _dotted_literal(_arg(node, 1)) or "*"
        else:
            obj = _Ref("import", receiver)
            name = _dotted_literal(_arg(node, 0)) or "*"
        if self.foreign(obj) and obj is not None:
            self._report_write(node, f"{obj.qualname}.{name}", "sets", SETATTR, import_time, "__setattr__")

    def _check_mock_patch(self, node: ast.Call, q: str, scope: _Scope, import_time: bool) -> None:
        first = _arg(node, 0, "target")
        if first is None:
            return
        if q.endswith(".object"):
            obj = self.resolve(first, scope)
            name = _dotted_literal(_arg(node, 1, "attribute")) or "*"
            if self.foreign(obj) and obj is not None:
                self._report_write(node, f"{obj.qualname}.{name}", "patches", SETATTR, import_time,
                                   "mock.patch.object")
            return
        if q.endswith(".dict"):
            lit = _dotted_literal(first)
            obj = _Ref("import", lit) if lit else self.resolve(first, scope)
            if self.foreign(obj) and obj is not None:
                self._report_write(node, obj.qualname, "patches", SETATTR, import_time, "mock.patch.dict")
            return
        target = _dotted_literal(first)
        if target and not self.is_own(target):
            self._report_write(node, target, "patches", SETATTR, import_time, "mock.patch")

    def _check_mutator(self, node: ast.Call, receiver: str, method: str, import_time: bool,
                       scope: _Scope) -> bool:
        last = receiver.rsplit(".", 1)[-1]
        if (receiver.startswith("builtins.") and receiver != "builtins.__dict__") or (
                last[:1].isupper() and not last.isupper() and node.args):
            # An unbound method (dict.update(d, ...), OrderedDict.pop(d, k)) mutates its first argument.
            first = _arg(node, 0)
            obj = self.resolve(first, scope) if first is not None else None
            if self.foreign(obj) and obj is not None and not obj.qualname.startswith("builtins."):
                self._report_write(node, obj.qualname, "mutates", MONKEYPATCH, import_time,
                                   f"{last}.{method}()")
                return True
            if receiver.startswith("builtins.") or obj is None or obj.origin != "import":
                return receiver.startswith("builtins.")
        code = self._classify(receiver)
        how = f".{method}()"
        if code is not None:
            self._report_write(node, receiver, "mutates", code, import_time, how)
            return True
        if receiver.endswith(".__dict__"):
            self._report_write(node, receiver, "mutates", SETATTR, import_time, how)
            return True
        # Only state-like receivers: a module function named `add`/`remove` (torch.add, os.remove) is not
        # a container. Constants, classes and private names of a foreign module are.
        parts = receiver.replace("[", ".[").split(".")
        if len(parts) > 1 and any(p[:1].isupper() or p.startswith(("_", "[")) for p in parts[1:]):
            self._report_write(node, receiver, "mutates", MONKEYPATCH, import_time, how)
            return True
        return False

    # torch.library -------------------------------------------------------------------------------

    def _op_is_own(self, ns: str, name: str | None) -> bool:
        """An op is own in an own namespace (`kimi_k3`, or `kimi_k3_<anything>` unless that is another
        model's), or in a shared engine namespace when its name starts with `<own>_`."""
        if ns in self.own_ops:
            return True
        if ns not in self.foreign_ops and any(ns.startswith(own + "_") for own in self.own_ops):
            return True
        if ns in self.settings.shared_op_namespaces and name:
            return any(name.startswith(own + "_") for own in self.own_ops)
        return False

    def _string_value(self, expr: ast.expr, scope: _Scope, prefix_only: bool = False) -> str | None:
        """The text of a string built from literals and names bound to string literals (f-strings, `+`).
        With prefix_only, an unknown part ends the text (marked by a NUL) instead of giving None."""
        lit = _dotted_literal(expr)
        if lit is not None:
            return lit
        parts: list[ast.expr]
        if isinstance(expr, ast.JoinedStr):
            parts = list(expr.values)
        elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            parts = [expr.left, expr.right]
        elif isinstance(expr, ast.Name):
            for b in self._lookup(expr.id, scope) or []:
                if isinstance(b, _Alias) and id(b.value) not in self._resolving:
                    self._resolving.add(id(b.value))
                    try:
                        value = self._string_value(b.value, b.scope)
                    finally:
                        self._resolving.discard(id(b.value))
                    if value is not None:
                        return value
            return None
        else:
            return None
        out = ""
        for part in parts:
            inner = part.value if isinstance(part, ast.FormattedValue) and part.format_spec is None \
                and part.conversion == -1 else part
            text = self._string_value(inner, scope, prefix_only) if isinstance(inner, ast.expr) else None
            if text is None:
                return out + "\x00" if prefix_only else None
            out += text
            if "\x00" in text:
                return out
        return out

    def _library_namespace(self, expr: ast.expr | None, scope: _Scope) -> str | None:
        """The namespace of a torch.library.Library object expression, when it can be known."""
        if expr is None:
            return None
        if isinstance(expr, ast.Call):
            callee = self.resolve(expr.func, scope)
            if callee is not None and callee.qualname == "torch.library.Library":
                return _dotted_literal(_arg(expr, 0, "ns"))
            return None
        if isinstance(expr, ast.Name):
            for b in self._lookup(expr.id, scope) or []:
                if isinstance(b, _Alias):
                    ns = self._library_namespace(b.value, b.scope)
                    if ns is not None:
                        return ns
                elif isinstance(b, _Import) and b.qualname in self.settings.engine_libraries:
                    return self.settings.engine_libraries[b.qualname]
            return None
        ref = self.resolve(expr, scope)
        if ref is not None and ref.qualname in self.settings.engine_libraries:
            return self.settings.engine_libraries[ref.qualname]
        return None

    def _op_target(self, expr: ast.expr | None, scope: _Scope) -> tuple[str | None, str | None, bool]:
        """(namespace, op name, known) of an op named by a "ns::name" string or a torch.ops.ns.name
        expression; known=False when it cannot be determined statically."""
        if expr is None:
            return None, None, False
        lit = _dotted_literal(expr)
        if lit is None and isinstance(expr, ast.JoinedStr | ast.BinOp | ast.Name):
            text = self._string_value(expr, scope, prefix_only=True) or ""
            known, _, _ = text.partition("\x00")  # the literal prefix; the rest is computed
            if "::" not in known:
                return None, None, False
            ns, _, rest = known.partition("::")
            name = rest.split(".")[0] if rest and len(known) == len(text) else None
            return ns, name, True
        if lit is not None:
            if "::" not in lit:
                return None, lit, False
            ns, _, name = lit.partition("::")
            return ns, name.split(".")[0], True
        ref = self.resolve(expr, scope)
        if ref is not None and ref.origin == "import" and ref.qualname.startswith("torch.ops."):
            parts = ref.qualname.split(".")
            if len(parts) >= 4:
                return parts[2], parts[3], True
        if ref is not None and ref.origin == "own":
            return next(iter(sorted(self.own_ops)), None), None, True
        return None, None, False

    def _check_torch_library(self, node: ast.Call, q: str, receiver: str, method: str,
                             scope: _Scope) -> bool:
        if q == "torch.library.Library":
            ns = _dotted_literal(_arg(node, 0, "ns"))
            kind = _dotted_literal(_arg(node, 1, "kind")) or "?"
            if ns is None:
                self.report(TORCH_LIBRARY, node, "creates a torch.library.Library whose namespace is not a "
                            "literal, so it cannot be checked", target=q)
            elif ns in self.own_ops:
                pass
            elif kind == "FRAGMENT" and ns in self.settings.shared_op_namespaces:
                pass  # each define/impl on it is judged by op name
            else:
                verb = "overrides ops of" if kind == "IMPL" else "defines ops in"
                self.report(TORCH_LIBRARY, node, f"torch.library.Library({ns!r}, {kind!r}) {verb} the "
                            f"`{ns}` namespace, outside the contribution's own "
                            f"({', '.join(sorted(self.own_ops)) or 'none'})", target=f"{ns}::*")
            return True
        if receiver in ("torch.library", "torch._library.custom_ops") and method in _TORCH_LIBRARY_FUNCS:
            ns, name, known = self._op_target(_arg(node, 0, "qualname", "op", "name", "op_name"), scope)
            verb = "defines" if method in _DEFINING_FUNCS else "registers an implementation for"
            if not known:
                self.report(TORCH_LIBRARY, node, f"`{q}` {verb} an op whose namespace cannot be determined "
                            "statically", severity="warning", target=q)
            elif ns is not None and not self._op_is_own(ns, name):
                self.report(TORCH_LIBRARY, node, f"`{q}` {verb} `{ns}::{name}`, outside the contribution's "
                            f"op namespace ({', '.join(sorted(self.own_ops)) or 'none'})",
                            target=f"{ns}::{name}")
            return True
        if _matches(q, self.settings.op_registrars):
            name = _dotted_literal(_arg(node, 0, "op_name"))
            lib_expr = _arg(node, 4, "target_lib")
            ns = self.settings.engine_op_namespace if lib_expr is None else \
                self._library_namespace(lib_expr, scope)
            if ns is None:
                self.report(TORCH_LIBRARY, node, f"`{q.split('.')[-1]}` registers into a library whose "
                            "namespace cannot be determined statically", target=q)
            elif name is None or not self._op_is_own(ns, name):
                shown = name or "<non-literal name>"
                self.report(TORCH_LIBRARY, node, f"`{q.split('.')[-1]}` defines `{ns}::{shown}`, outside the "
                            "contribution's op namespace (name it "
                            f"`{sorted(self.own_ops)[0] if self.own_ops else '<model>'}_...` or use an own "
                            "Library)", target=f"{ns}::{shown}")
            return True
        if q in ("torch.ops.load_library", "torch.classes.load_library"):
            self.report(TORCH_LIBRARY, node, f"`{q}` loads a compiled library whose op registrations cannot "
                        "be checked", target=q)
            return True
        if q in ("torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline"):
            self.report(TORCH_LIBRARY, node, f"`{q}` builds and loads a C++ extension whose op registrations "
                        "cannot be checked", severity="warning", target=q)
            return True
        if method in _LIBRARY_METHODS and receiver:
            ns = self._library_namespace(node.func.value if isinstance(node.func, ast.Attribute) else None,
                                         scope)
            op_lit = _dotted_literal(_arg(node, 0, "schema", "op_name", "qualname"))
            op_name = op_lit.split("(")[0].split(".")[0] if op_lit else None
            if op_name and "::" in op_name:
                ns, _, op_name = op_name.partition("::")
            if ns is None:
                ns = "?"
            if not self._op_is_own(ns, op_name):
                self.report(TORCH_LIBRARY, node, f"`{receiver.split('.')[-1]}.{method}` on a library outside "
                            f"the contribution touches `{ns}::{op_name or '*'}`", target=f"{ns}::{op_name}")
            return True
        return False

    def _check_library_method_on_local(self, node: ast.Call, scope: _Scope) -> None:
        """`lib.define/impl` where lib is a Library created in this file on a shared namespace."""
        if not isinstance(node.func, ast.Attribute) or node.func.attr not in _LIBRARY_METHODS:
            return
        ns = self._library_namespace(node.func.value, scope)
        if ns is None or ns in self.own_ops:
            return
        op_lit = _dotted_literal(_arg(node, 0, "schema", "op_name", "qualname"))
        op_name = op_lit.split("(")[0].split(".")[0] if op_lit else None
        if op_name and "::" in op_name:
            ns, _, op_name = op_name.partition("::")
        if not self._op_is_own(ns, op_name):
            self.report(TORCH_LIBRARY, node, f"`{node.func.attr}` on a `{ns}` library touches "
                        f"`{ns}::{op_name or '*'}`, outside the contribution's op namespace",
                        target=f"{ns}::{op_name}")

    # importlib -----------------------------------------------------------------------------------

    def _check_importlib(self, node: ast.Call, q: str, scope: _Scope) -> bool:
        if q in ("importlib.import_module", "builtins.__import__"):
            if self._is_relative_load(node):
                loaded = self._loaded_module(node, q)
                if loaded is None or self.is_own(loaded) or not self.own_packages:
                    return True
            else:
                loaded = self._loaded_module(node, q)
            fn = "__import__" if q.endswith("__import__") else "importlib.import_module"
            if loaded in (None, "*"):
                self.report(IMPORTLIB, node, f"`{fn}` with a computed name: what it loads (and patches "
                            "through it) cannot be checked", severity="warning", target=q)
            elif not self.is_own(loaded) and any(
                    loaded == r or loaded.startswith(r + ".") for r in self.settings.hidden_import_roots):
                self.report(IMPORTLIB, node, f"`{fn}({loaded!r})` loads a module outside the contribution by "
                            "string, hidden from the import graph", severity="warning", target=loaded)
            return True
        if q == "importlib.reload":
            first = _arg(node, 0, "module")
            mod = self.resolve(first, scope) if first is not None else None
            if mod is None or self.foreign(mod):
                shown = mod.qualname if mod is not None else "<unknown>"
                self.report(IMPORTLIB, node, f"`importlib.reload` re-executes `{shown}`, a module outside "
                            "the contribution", target=shown)
            return True
        if q in _FILE_LOADERS:
            name = _dotted_literal(_arg(node, 0, "name", "fullname"))
            if name is not None and not self.is_own(name) and "." in name:
                self.report(IMPORTLIB, node, f"`{q}` creates module `{name}` from a file: a second copy of a "
                            "module outside the contribution", target=name)
            else:
                self.report(IMPORTLIB, node, f"`{q}` loads a module from a file path that cannot be checked "
                            "statically", severity="warning", target=name or q)
            return True
        if q == "runpy.run_module":
            name = _dotted_literal(_arg(node, 0, "mod_name"))
            if name is None or not self.is_own(name):
                self.report(IMPORTLIB, node, f"`runpy.run_module` runs `{name or '<computed>'}`, outside the "
                            "contribution", target=name or q)
            return True
        if q == "runpy.run_path":
            self.report(IMPORTLIB, node, "`runpy.run_path` runs a file that cannot be checked statically",
                        severity="warning", target=q)
            return True
        return False

    # registries ----------------------------------------------------------------------------------

    def _check_registration(self, node: ast.AST, q: str, *, registered: _Ref | None,
                            first_arg_local: bool, scope: _Scope | None = None) -> None:
        s = self.settings
        last = q.rsplit(".", 1)[-1]
        explicit = _matches(q, s.registry_callables)
        named = any(last == p or last.startswith(p + "_") for p in s.registration_prefixes)
        if not (explicit or named):
            return
        if _matches(q, s.allowed_registrations):
            return  # what a decorator registers is judged where it is applied (_check_decorator_application)
        if not explicit and first_arg_local:
            return  # registering onto a local object (a hook on an own module instance), not a registry
        what = f" `{registered.qualname}`" if registered is not None else ""
        self.report(REGISTRY, node, f"calls `{q}`{what}: a registration into a registry outside the "
                    "contribution, which changes what other models get", target=q)

    def _check_decorator_application(self, node: ast.Call, scope: _Scope) -> None:
        """`REG.register_processor(...)(Cls)`: an allowed registration applied to a foreign object."""
        assert isinstance(node.func, ast.Call)
        inner = self.resolve(node.func.func, scope)
        if inner is None or not self.foreign(inner):
            return
        if not _matches(inner.qualname, self.settings.allowed_registrations):
            return
        for a in node.args:
            ref = self.resolve(a, scope)
            if self.foreign(ref) and ref is not None:
                self.report(REGISTRY, node, f"`{inner.qualname}` is applied to `{ref.qualname}`, which is "
                            "not the contribution's own", target=inner.qualname)
                return


def _annotations(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> list[ast.expr]:
    if isinstance(node, ast.Lambda):
        return []
    args = node.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs,
             *(a for a in (args.vararg, args.kwarg) if a is not None)]
    found = [a.annotation for a in every if a.annotation is not None]
    return [*found, node.returns] if node.returns is not None else found


def _is_main_guard(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and _dotted_literal(test.comparators[0]) == "__main__")


def _analyse(source: str, path: str, own_packages: set[str], module: str | None, is_package: bool,
             own_op_namespaces: set[str], settings: EscapesSpec, exec_depth: int,
             foreign_op_namespaces: frozenset[str] = frozenset()) -> FileFacts:
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None) or 1
        msg = getattr(exc, "msg", None) or str(exc)
        return FileFacts(escapes=[Escape(UNPARSEABLE, max(int(line), 1),
                                         f"does not parse ({msg}), so it cannot be checked for escapes",
                                         path=path)])
    except RecursionError:
        return FileFacts(escapes=[Escape(UNPARSEABLE, 1, "is nested too deeply to parse, so it cannot be "
                                         "checked for escapes", path=path)])
    analyser = _Analyser(tree, path, own_packages, module, is_package, own_op_namespaces, settings,
                         exec_depth, foreign_op_namespaces)
    try:
        analyser.bind_all()
        analyser.check()
    except RecursionError:
        analyser.facts.escapes.append(Escape(UNPARSEABLE, 1, "is nested too deeply to analyse, so it cannot "
                                             "be checked for escapes", path=path))
    analyser.facts.escapes.sort(key=lambda e: (e.line, e.col, e.code))
    return analyser.facts


def analyse_source(source: str, path: str, own_packages: set[str], *, module: str | None = None,
                   own_op_namespaces: set[str] | None = None, foreign_op_namespaces: set[str] | None = None,
                   settings: EscapesSpec | None = None) -> FileFacts:
    """Escapes and imported modules of one file. `module` (the file's dotted name, defaulting to one
    derived from `path`) places relative imports; without it they count as the contribution's own."""
    if module is None:
        module = module_name_for(path)
    is_package = path.endswith("__init__.py")
    return _analyse(source, path, set(own_packages), module, is_package, set(own_op_namespaces or ()),
                    settings or EscapesSpec(), 0, frozenset(foreign_op_namespaces or ()))


def find_escapes(source: str, path: str, own_packages: set[str], *, module: str | None = None,
                 own_op_namespaces: set[str] | None = None, foreign_op_namespaces: set[str] | None = None,
                 settings: EscapesSpec | None = None) -> list[Escape]:
    """Every escape in `source` (the text of `path`), ordered by line. Never raises on bad source.

    `own_packages`: dotted packages that are the contribution's own (writes into them are fine).
    `own_op_namespaces`: torch op namespaces the contribution owns (e.g. {"kimi_k3"}); namespaces
    `<own>_*` are own too unless listed in `foreign_op_namespaces` (other models' names).
    `module`: the file's dotted module name, to place relative imports (default: from `path`).
    """
    return analyse_source(source, path, own_packages, module=module, own_op_namespaces=own_op_namespaces,
                          foreign_op_namespaces=foreign_op_namespaces, settings=settings).escapes
