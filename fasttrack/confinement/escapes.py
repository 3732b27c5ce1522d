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
GLOBAL_STATE = "FT146"
HELPER_WRITE = "FT147"

_BUILTIN_NAMES = frozenset(dir(builtins))
# In-place container methods: called on foreign state they mutate it.
_MUTATORS = frozenset({
    "update", "setdefault", "pop", "popitem", "clear", "append", "extend", "insert", "remove", "add",
    "discard", "__setitem__", "__delitem__", "__ior__", "cache_clear",
})
# Methods that change the object they are called on beyond a container's (a module's children, hooks,
# buffers and parameters; a descriptor or pickled state; in-place operators; deque, OrderedDict and set
# updates; a ContextVar or Event): called on the engine's objects, a write to them (FT120).
# A module's children, hooks, buffers and parameters: also recorded when called on a parameter (judged
# where a caller hands the helper a foreign object).
_MODULE_MUTATORS = frozenset({
    "add_module", "register_module", "register_buffer", "register_parameter", "register_forward_hook",
    "register_forward_pre_hook", "register_full_backward_hook", "register_full_backward_pre_hook",
    "register_backward_hook", "register_load_state_dict_post_hook", "register_load_state_dict_pre_hook",
    "register_state_dict_pre_hook", "register_state_dict_post_hook", "_register_state_dict_hook",
    "_register_load_state_dict_pre_hook", "load_state_dict", "requires_grad_", "share_memory_",
})
_OBJECT_MUTATORS = _MODULE_MUTATORS | frozenset({
    "__set__", "__set_name__", "__setstate__", "__init__", "__iadd__", "__isub__", "__imul__", "__iand__",
    "__ixor__", "__delattr__", "sort", "reverse", "appendleft", "extendleft", "rotate", "move_to_end",
    "difference_update", "intersection_update", "symmetric_difference_update", "put", "put_nowait",
    "set", "reset",
})


def mutating_method(name: str) -> bool:
    """Whether a method of that name changes its receiver: a container method, one of `_OBJECT_MUTATORS`,
    or torch's in-place convention (`zero_`, `copy_`, `fill_`: a trailing underscore, not a dunder)."""
    return name in _MUTATORS or name in _OBJECT_MUTATORS or (
        name.endswith("_") and not name.endswith("__") and name.strip("_") != "")


# The dotted head of a parameter the engine fills with its own object (policy `engine_parameter_names` /
# `engine_parameter_types`): `~param.vllm_config.model_config.hf_config` is what `vllm_config.model_config.
# hf_config` refers to in model code. Not a module name, so never the contribution's own.
ENGINE_PARAM = "~param"
# C modules that are other names for a stdlib module (`posix.putenv` is `os.putenv`).
_MODULE_ALIASES = {
    "posix": "os", "nt": "os", "_posixsubprocess": "subprocess", "_signal": "signal", "_thread": "threading",
    "_warnings": "warnings", "_locale": "locale", "_codecs": "codecs", "_pickle": "pickle",
    "_socket": "socket", "_io": "io", "_imp": "importlib", "_operator": "operator", "_functools": "functools",
}


def _canonical_module(name: str) -> str:
    top, dot, rest = name.partition(".")
    return _MODULE_ALIASES[top] + dot + rest if top in _MODULE_ALIASES else name
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
    # Where it sits: the enclosing defs, classes and guards (`def f > if X`), so a patch moved out of a
    # guard or into another function is not matched with the base revision's copy.
    context: str = ""
    # A warning that stays a warning in shipping code (its content was checked some other way); every
    # other warning is raised to an error in shipping code (fasttrack.rules.escapes).
    lenient: bool = False


@dataclass(frozen=True)
class OwnImportWrite:
    """A write to `obj`, a name another of the contribution's modules binds: the engine's object when that
    module only re-exports it (`fasttrack.rules.escapes` resolves it on disk)."""

    code: str
    obj: str  # dotted, as imported (`vllm.models.kimi_k3.common.PLUGINS`)
    what: str  # the part written: `.forward`, `[...]`, `.append()`, `` (the object itself, `+=`)
    how: str  # `assigns `forward` on`, `calls `.append()` on`, ...
    line: int
    in_place: bool = False  # a container method: judged only on state-like objects (not `torch.add`)


def state_like_receiver(receiver: str, hidden_import_roots: Sequence[str],
                        module_imports: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether a foreign dotted receiver of `.add()`/`.update()`/... is state rather than a module whose
    function happens to have that name (`torch.add`, `os.remove`): in the engine's packages anything not
    imported as a module (lower-case registries too); elsewhere constants, classes and private names."""
    if receiver.startswith(ENGINE_PARAM + "."):
        return True
    if receiver not in module_imports and any(receiver.startswith(r + ".") for r in hidden_import_roots):
        return True
    parts = receiver.replace("[", ".[").split(".")
    return len(parts) > 1 and any(p[:1].isupper() or p.startswith(("_", "[")) for p in parts[1:])


@dataclass
class FileFacts:
    """What `analyse_source` learns about one file: its escapes and the modules it imports."""

    escapes: list[Escape] = field(default_factory=list)
    imports: set[str] = field(default_factory=set)
    # Own functions (dotted name) and the parameters (position or name) they write through: a helper that
    # patches whatever it is given. Another changed file passing a foreign object there is an escape.
    param_writers: dict[str, frozenset[int | str]] = field(default_factory=dict)
    # Writes to a name imported from another of the contribution's modules: own only if that module
    # defines it; a re-export of an engine object is foreign (judged across files). Each is (code, the
    # object written, what is written on it: `.attr`, `[...]`, `.append()`, how, line).
    own_import_writes: list[OwnImportWrite] = field(default_factory=list)
    # Calls to functions of the contribution's own packages with foreign arguments:
    # (callee dotted name, {position or keyword: foreign target}, line).
    foreign_calls: list[tuple[str, dict[int | str, str], int]] = field(default_factory=list)


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


@dataclass(frozen=True)
class _Param:
    """A parameter of a function defined in this file: what it is depends on the caller."""

    function: str  # the function's key in _Analyser.functions
    name: str


@dataclass(frozen=True, eq=False)
class _Elem:
    """A name bound to an element of a container (loop target, unpacking, `*rest`)."""

    value: ast.expr
    scope: _Scope


_Binding = _Import | _Own | _Alias | _Local | _Param | _Elem
_LOCAL = _Local()


@dataclass(eq=False)
class _Scope:
    kind: Literal["module", "function", "class", "comprehension"]
    parent: _Scope | None
    bindings: dict[str, list[_Binding]] = field(default_factory=dict)
    globals_: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)
    name: str = ""  # a class scope: the class's dotted name (`<module>.<Class>`)

    def bind(self, name: str, binding: _Binding) -> None:
        self.bindings.setdefault(name, []).append(binding)


@dataclass(frozen=True, eq=False)
class _Function:
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    scope: _Scope
    positional: tuple[str, ...]  # positional parameters a caller fills, in order (self/cls left out)
    keyword_only: frozenset[str]

    def returns(self) -> list[ast.expr]:
        """The expressions the function returns (nested defs and lambdas left out)."""
        if isinstance(self.node, ast.Lambda):
            return [self.node.body]
        out: list[ast.expr] = []
        todo: list[ast.AST] = list(self.node.body)
        while todo:
            n = todo.pop()
            if isinstance(n, ast.Return | ast.Yield) and n.value is not None:
                out.append(n.value)
            elif isinstance(n, ast.YieldFrom):
                out.append(ast.Starred(value=n.value, ctx=ast.Load()))
            if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
                todo.extend(ast.iter_child_nodes(n))
        return out


@dataclass(frozen=True)
class _Ref:
    """What an expression refers to: an imported (dotted) name, the file's own thing, a local object,
    or the class of a local object (`type(x)`, `x.__class__`)."""

    origin: Literal["import", "own", "local", "classof", "param"]
    qualname: str = ""
    # A local container: the foreign objects it holds (an element, a value, an unpacked item).
    elements: tuple[_Ref, ...] = ()


_LOCAL_REF = _Ref("local")
_COPY = "<shallow copy>"  # a local ref: `copy.copy(x)`, whose `elements` are what its attributes are
_INSTANCE = "<instance of "  # + an own class's dotted name + ">": a local object of an own class
# a thread or thread pool made here: starting it at import time is FT146
_THREAD_REF = _Ref("local", "<thread>")
_THREAD_MAKERS = ("threading.Thread", "threading.Timer", "concurrent.futures.*Executor",
                  "concurrent.futures.thread.*", "multiprocessing.pool.ThreadPool", "multiprocessing.dummy.*")
_THREAD_STARTS = frozenset({"start", "submit", "map", "run", "apply_async", "map_async", "imap",
                            "imap_unordered", "starmap", "starmap_async", "apply"})
# Objects of the stdlib whose attributes are process- (or thread-) wide state: writes are FT146.
_STATE_OBJECTS = ("decimal.context",)
_SEP = "\x1f"  # between a function key and a parameter name in a "param" _Ref
# Attributes that lead from any object to objects it does not own (its bases, every subclass, the
# globals of a function's module, the interpreter's builtins): what is reached through them is foreign.
_REACH_ATTRS = frozenset({
    "__bases__", "__base__", "__mro__", "__subclasses__", "mro", "__globals__", "__builtins__",
    "__closure__", "f_globals", "f_locals", "f_back", "f_builtins", "gi_frame", "cr_frame", "tb_frame",
    "__self__", "__objclass__",
})
# Calls returning every object, module or subclass in the interpreter.
_EVERYTHING_CALLS = frozenset({
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._getframe", "inspect.currentframe",
    "inspect.stack",
})
# Builtins that return (an iterator over) their argument's elements.
_ELEMENT_CALLS = frozenset({
    "builtins.list", "builtins.tuple", "builtins.set", "builtins.frozenset", "builtins.iter", "builtins.next",
    "builtins.reversed", "builtins.sorted", "builtins.dict", "builtins.enumerate", "builtins.zip",
    "builtins.filter", "builtins.min", "builtins.max", "copy.copy", "itertools.chain", "itertools.cycle",
})
# Methods of a container returning its elements (or a view of them).
_ELEMENT_METHODS = frozenset({"values", "items", "keys", "get", "pop", "copy", "setdefault", "popitem",
                              "__getitem__", "__iter__", "__next__"})
# Callables that write to their first argument, called directly or handed on as a value.
_WRITERS = frozenset({
    "builtins.setattr", "builtins.delattr", "builtins.object.__setattr__", "builtins.object.__delattr__",
    "builtins.type.__setattr__", "builtins.type.__delattr__", "operator.setitem", "operator.delitem",
    "operator.__setitem__", "operator.__delitem__", "builtins.dict.__setitem__", "builtins.dict.update",
    "builtins.dict.setdefault", "builtins.vars",
})
_ITEM_WRITERS = frozenset({"operator.setitem", "operator.delitem", "operator.__setitem__",
                           "operator.__delitem__"})
# Methods that write files (pathlib and friends) whatever the receiver.
_FILE_WRITE_METHODS = frozenset({"write_text", "write_bytes", "symlink_to", "hardlink_to", "touch",
                                 "mkdir", "rmdir", "unlink", "chmod", "lchmod"})
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
        self.functions: dict[str, list[_Function]] = {}
        self.method_keys: set[str] = set()  # keys of functions defined in a class body
        self.classes: dict[str, list[tuple[ast.ClassDef, _Scope]]] = {}  # own class -> (node, outer scope)
        # Parameters written through ((function key, parameter) -> the write), and calls to own functions.
        self.param_writes: dict[tuple[str, str], ast.AST] = {}
        self.own_calls: list[tuple[ast.Call, _Scope, str]] = []
        self.import_time_calls: set[int] = set()  # ids of own calls made at import time
        self.thread_starts: dict[str, ast.AST] = {}  # own function key -> a thread start inside it
        self.with_items: set[int] = set()
        self.module_imports: set[str] = set()  # names bound by `import x.y`: modules, not containers
        self._parents: dict[int, ast.AST] | None = None
        self._function_of_scope: dict[int, str] | None = None
        # `x.attr = value` on any object: attribute name -> the values stored (taint by attribute name,
        # so `self.target = SharedClass; self.target.forward = f` is a write to SharedClass).
        self.attr_stores: dict[str, list[tuple[ast.expr, _Scope]]] = {}
        # Model code (a module of the contribution's own packages, or one that cannot be placed: fail
        # closed): its parameters named or annotated like the engine's objects are the engine's.
        self.model_code = module is None or self.is_own(module)
        self._engine_params: dict[tuple[str, str], _Ref | None] = {}
        self.engine_param_why: dict[str, str] = {}  # parameter name -> why it is the engine's
        self._kept: list[ast.AST] = []  # parsed string annotations (memo keys are node ids: keep them alive)

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
                     import_time: bool, element_of: ast.expr | None = None) -> None:
        """Bind `target = value`; `element_of`: the target takes an element of that container (unpacking,
        loop targets), so `a, b = pair` keeps a foreign object in `pair` foreign in `a` and `b`."""
        if isinstance(target, ast.Name):
            home = self.module_scope if target.id in scope.globals_ else scope
            if target.id in scope.nonlocals:
                outer = scope.parent
                while outer is not None and (outer.kind == "class" or target.id not in outer.bindings):
                    outer = outer.parent
                home = outer or scope
            if value is not None:
                home.bind(target.id, _Alias(value, scope))
            elif element_of is not None:
                home.bind(target.id, _Elem(element_of, scope))
            else:
                home.bind(target.id, _LOCAL)
        elif isinstance(target, ast.Starred):
            self._bind_target(target.value, scope, None, import_time, element_of or value)
        elif isinstance(target, ast.Tuple | ast.List):
            values: list[ast.expr] | None = None
            if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts) and not any(
                    isinstance(e, ast.Starred) for e in [*value.elts, *target.elts]):
                values = list(value.elts)
            for i, elt in enumerate(target.elts):
                if values:
                    self._bind_target(elt, scope, values[i], import_time)
                else:
                    self._bind_target(elt, scope, None, import_time, element_of or value)
        else:
            self._push([target], scope, import_time)

    def _bind_loop_target(self, target: ast.expr, iterable: ast.expr, scope: _Scope,
                          import_time: bool) -> None:
        """`for m in (a, b)` binds m to each element (so `m.x = 1` is judged for a and b)."""
        if isinstance(target, ast.Name) and isinstance(iterable, ast.Tuple | ast.List | ast.Set) and not any(
                isinstance(e, ast.Starred) for e in iterable.elts):
            for elt in iterable.elts:
                scope.bind(target.id, _Alias(elt, scope))
            if not iterable.elts:
                scope.bind(target.id, _LOCAL)
        else:
            self._bind_target(target, scope, None, import_time, iterable)

    def _function_key(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, scope: _Scope) -> str:
        if isinstance(node, ast.Lambda):
            return f"<lambda>@{node.lineno}:{node.col_offset}"
        if scope.kind == "class":
            return f"{scope.name}.{node.name}"
        return f"{self.module or '<file>'}.{node.name}"

    def _bind_args(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, scope: _Scope,
                   outer: _Scope, key: str) -> None:
        """Parameters are `_Param`s (what they are depends on the caller), except a method's first one
        (self/cls: an instance or subclass of the contribution's own class)."""
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        is_method = outer.kind == "class" and not any(
            isinstance(d, ast.Name) and d.id == "staticmethod" for d in getattr(node, "decorator_list", []))
        names: list[str] = []
        for i, a in enumerate(positional):
            if i == 0 and is_method:
                scope.bind(a.arg, _LOCAL)
                continue
            names.append(a.arg)
            scope.bind(a.arg, _Param(key, a.arg))
        for a in args.kwonlyargs:
            scope.bind(a.arg, _Param(key, a.arg))
        # a caller that omits an argument gets the default, evaluated in the enclosing scope
        for a, d in [*zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True),
                     *zip(args.kwonlyargs, args.kw_defaults, strict=True)]:
            if d is not None and not isinstance(d, ast.Constant):
                scope.bind(a.arg, _Alias(d, outer))
        if args.vararg:
            scope.bind(args.vararg.arg, _Param(key, "*"))
        if args.kwarg:
            scope.bind(args.kwarg.arg, _Param(key, "**"))
        self.functions.setdefault(key, []).append(_Function(node, scope, tuple(names),
                                                            frozenset(a.arg for a in args.kwonlyargs)))
        if outer.kind == "class":
            self.method_keys.add(key)

    def _b_function(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        if not isinstance(node, ast.Lambda):
            scope.bind(node.name, _Own(f"{self.module or '<file>'}.{node.name}"))
            if node.decorator_list:
                self.candidates.append((node, scope, import_time))
        child = _Scope("function", scope)
        self.scopes[node] = child
        self._bind_args(node, child, scope, self._function_key(node, scope))
        body = node.body if isinstance(node.body, list) else [node.body]
        self._push(body, child, False)
        self._push([*getattr(node, "decorator_list", []), *node.args.defaults, *node.args.kw_defaults,
                    *_annotations(node)], scope, import_time)

    def _b_class(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.ClassDef)
        scope.bind(node.name, _Own(f"{self.module or '<file>'}.{node.name}"))
        if node.decorator_list:
            self.candidates.append((node, scope, import_time))
        child = _Scope("class", scope, name=f"{self.module or '<file>'}.{node.name}")
        self.scopes[node] = child
        self.classes.setdefault(child.name, []).append((node, scope))
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
                scope.bind(alias.asname, _Import(_canonical_module(alias.name)))
                self.module_imports.add(alias.name)
            else:
                top = alias.name.split(".")[0]
                scope.bind(top, _Import(_canonical_module(top)))
                self.module_imports.update(".".join(alias.name.split(".")[:i + 1])
                                           for i in range(alias.name.count(".") + 1))

    def _b_import_from(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.ImportFrom)
        base = self._absolute(node.level, node.module)
        if base is not None:
            self.facts.imports.add(base)
            base = _canonical_module(base) if node.level == 0 else base
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
                if isinstance(t, ast.Attribute):
                    self.attr_stores.setdefault(t.attr, []).append((node.value, scope))
            self._push([node.value], scope, import_time)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self._bind_target(node.target, scope, node.value, import_time)
                self._push([node.value], scope, import_time)
            elif not isinstance(node.target, ast.Name):
                self._push([node.target], scope, import_time)
        elif isinstance(node, ast.AugAssign):
            if isinstance(node.target, ast.Name):
                self.candidates.append((node, scope, import_time))  # judged before the rebinding counts
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
            self.with_items.add(id(item.context_expr))
            if item.optional_vars is not None:
                cm = item.context_expr
                value: ast.expr | None = None
                if isinstance(cm, ast.Call) and cm.args:
                    maker = self.resolve(cm.func, scope)
                    if maker is not None and maker.qualname == "contextlib.nullcontext":
                        value = cm.args[0]  # `with nullcontext(x) as c`: c is x
                if isinstance(cm, ast.Call) and value is None and self.resolve(cm, scope) == _THREAD_REF:
                    value = cm  # `with ThreadPoolExecutor() as ex`: ex is the pool (its __enter__ returns it)
                self._bind_target(item.optional_vars, scope, value, import_time)
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

    def _b_match_statement(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        """`case c:` binds c to the subject; a name inside a sub-pattern to an element of it."""
        assert isinstance(node, ast.Match)
        for case in node.cases:
            for sub in ast.walk(case.pattern):
                name = getattr(sub, "name", None) or getattr(sub, "rest", None)
                if not isinstance(name, str):
                    continue
                whole = sub is case.pattern and isinstance(sub, ast.MatchAs)
                scope.bind(name, _Alias(node.subject, scope) if whole else _Elem(node.subject, scope))
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
            ast.Match: self._b_match_statement,
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
            elif isinstance(b, _Param):
                refs.append(self._engine_param(b) or _Ref("param", f"{b.function}{_SEP}{b.name}"))
            elif isinstance(b, _Elem):
                refs.append(self._element(self.resolve(b.value, b.scope)) or _LOCAL_REF)
            else:
                refs.append(_LOCAL_REF)
        # Conservative: if any binding of the name reaches a foreign object, judge it as that object.
        for r in refs:
            if self.foreign(r):
                return r
        for r in refs:
            if r.elements:
                return r
        for origin in ("param", "import", "own", "classof"):
            for r in refs:
                if r.origin == origin:
                    return r
        if _THREAD_REF in refs:
            return _THREAD_REF
        return next((r for r in refs if r.qualname.startswith(_INSTANCE)), _LOCAL_REF)

    def _engine_param(self, param: _Param) -> _Ref | None:
        """What a parameter of model code is when the engine fills it: the engine's object when it is named
        (`engine_parameter_names`) or annotated (`engine_parameter_types`) like one; in a method of a class
        deriving from an engine class, `*args`/`**kwargs` hold the engine's objects. None otherwise (what it
        is depends on the caller)."""
        key = (param.function, param.name)
        if key in self._engine_params:
            return self._engine_params[key]
        self._engine_params[key] = None  # a cycle (an annotation naming the parameter): no information
        ref = self._engine_param_uncached(param) if self.model_code else None
        self._engine_params[key] = ref
        return ref

    def _engine_param_uncached(self, param: _Param) -> _Ref | None:
        s = self.settings
        for fn in self.functions.get(param.function, []):
            args = fn.node.args
            outer = fn.scope.parent or self.module_scope
            if param.name in ("*", "**"):
                arg = args.vararg if param.name == "*" else args.kwarg
                if arg is None:
                    continue
                cls = outer.name if outer.kind == "class" else None
                base = self._engine_base(cls) if cls is not None else None
                if base is not None:
                    self.engine_param_why.setdefault(arg.arg, f"the `{param.name}{arg.arg}` of a method of a "
                                                     f"class deriving from the engine's `{base}`")
                    return _Ref("local", "<container>", (_Ref("import", f"{ENGINE_PARAM}.{arg.arg}[*]"),))
                continue
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
            node = next((a for a in every if a.arg == param.name), None)
            if node is None:
                continue
            if _matches(param.name, s.engine_parameter_names):
                self.engine_param_why.setdefault(param.name, "named like the engine's config objects")
                return _Ref("import", f"{ENGINE_PARAM}.{param.name}")
            if node.annotation is not None:
                hit = self._engine_annotation(node.annotation, outer)
                if hit is not None:
                    self.engine_param_why.setdefault(param.name, f"annotated with the engine's `{hit}`")
                    return _Ref("import", f"{ENGINE_PARAM}.{param.name}")
        return None

    def _engine_annotation(self, ann: ast.expr, scope: _Scope, depth: int = 0) -> str | None:
        """The engine type (`engine_parameter_types`) any part of an annotation names, or None:
        `VllmConfig`, `VllmConfig | None`, `Optional["VllmConfig"]`, `"config.ModelConfig"`."""
        if depth > 6:
            return None
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            try:
                parsed = ast.parse(ann.value, mode="eval").body
            except (SyntaxError, ValueError, RecursionError):
                return None
            self._kept.append(parsed)
            return self._engine_annotation(parsed, scope, depth + 1)
        if isinstance(ann, ast.BinOp):
            return self._engine_annotation(ann.left, scope, depth + 1) or \
                self._engine_annotation(ann.right, scope, depth + 1)
        if isinstance(ann, ast.Subscript):
            parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            for part in [ann.value, *parts]:
                hit = self._engine_annotation(part, scope, depth + 1)
                if hit is not None:
                    return hit
            return None
        if isinstance(ann, ast.Name | ast.Attribute):
            ref = self.resolve(ann, scope)
            if self.foreign(ref) and ref is not None and \
                    _matches(ref.qualname, self.settings.engine_parameter_types):
                return ref.qualname
        return None

    def _engine_base(self, cls: str) -> str | None:
        """The engine class (under `hidden_import_roots`) an own class derives from, through own classes."""
        roots = self.settings.hidden_import_roots
        for c in self._own_bases(cls):
            for node, outer in self.classes.get(c, []):
                for b in node.bases:
                    r = self.resolve(b, outer)
                    if self.foreign(r) and r is not None and any(
                            r.qualname == x or r.qualname.startswith(x + ".") for x in roots):
                        return r.qualname
        return None

    def _stored_attr(self, attr: str) -> _Ref | None:
        """The foreign object some `x.<attr> = value` of this file stored, if any (flow- and
        receiver-insensitive: fail closed)."""
        for value, scope in self.attr_stores.get(attr, []):
            t = self.tainted(self.resolve(value, scope))
            if t is not None:
                return t
        return None

    def tainted(self, ref: _Ref | None) -> _Ref | None:
        """The foreign object `ref` is or holds (a container's foreign element), or None."""
        if ref is None:
            return None
        if self.foreign(ref):
            return ref
        return next((e for e in ref.elements if self.foreign(e)), None)

    def _element(self, ref: _Ref | None) -> _Ref | None:
        """What an element of `ref` (iterated, indexed, unpacked) is: a foreign container's elements are
        foreign, a local container's are what it holds, a parameter's are the parameter."""
        if ref is None:
            return None
        if self.foreign(ref):
            return _Ref("import", f"{ref.qualname}[*]")
        if ref.elements:
            return ref.elements[0]
        if ref.origin == "param":
            return ref
        return None

    def _container(self, elts: Sequence[ast.expr | None], scope: _Scope) -> _Ref:
        held: list[_Ref] = []
        for e in elts:
            if e is None:
                continue
            r = self.resolve(e.value if isinstance(e, ast.Starred) else e, scope)
            t = self.tainted(r)
            if t is not None:
                held.append(t)
            elif r is not None and r.origin == "param":
                held.append(r)
        return _Ref("local", "<container>", tuple(held)) if held else _LOCAL_REF

    def _resolve(self, node: ast.expr, scope: _Scope) -> _Ref | None:
        if isinstance(node, ast.Name):
            return self._resolve_name(node.id, scope)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value, scope)
            if base is None:
                return None
            if node.attr in _REACH_ATTRS:
                return _Ref("import", f"<{node.attr} of {base.qualname or 'a local object'}>")
            if node.attr == "__class__" and base.origin == "param":
                return _Ref("classof", "<class of a parameter>")
            if base.origin == "param":
                return base
            if node.attr == "__class__" and base.origin == "local":
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    return _Ref("own", "<own class>")
                return _Ref("classof", "<class of a local object>")
            if base.origin == "local" and base.qualname == _COPY and base.elements:
                shared = base.elements[0]  # the copy's attributes are the original's objects
                return _Ref(shared.origin, f"{shared.qualname}.{node.attr}")
            if base.origin == "local":
                return self._stored_attr(node.attr) or _LOCAL_REF
            return _Ref(base.origin, f"{base.qualname}.{node.attr}")
        if isinstance(node, ast.Subscript):
            base = self.resolve(node.value, scope)
            if base is None:
                return None
            key = _dotted_literal(node.slice)
            if key == "__builtins__" and base.qualname.endswith("__dict__"):
                return _Ref("import", "builtins")
            if key is not None and base.origin == "import" and base.qualname.endswith(".__dict__"):
                return _Ref("import", f"{base.qualname.removesuffix('.__dict__')}.{key}")
            if base.origin == "import" and base.qualname == "sys.modules":
                if isinstance(node.slice, ast.Name) and node.slice.id == "__name__":
                    return _Ref("own", self.module or "<this module>")
                if key is not None:
                    return _Ref("import", key)
                return _Ref("import", "sys.modules[*]")
            if base.origin == "param":
                return base
            if base.origin == "local":
                if base.elements:
                    return base.elements[0]
                return _LOCAL_REF
            return _Ref(base.origin, f"{base.qualname}[{key!r}]" if key else f"{base.qualname}[...]")
        if isinstance(node, ast.Call):
            return self._resolve_call(node, scope)
        if isinstance(node, ast.NamedExpr):
            return self.resolve(node.value, scope)
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return self._container(node.elts, scope)
        if isinstance(node, ast.Dict):
            # `{**other}` merges other's values; keys are not what a write would reach
            return self._container(node.values, scope)
        if isinstance(node, ast.IfExp | ast.BoolOp):
            options = [node.body, node.orelse] if isinstance(node, ast.IfExp) else list(node.values)
            refs = [self.resolve(o, scope) for o in options]
            for r in refs:
                if self.tainted(r) is not None or (r is not None and r.origin == "param"):
                    return r
            return next((r for r in refs if r is not None), None)
        if isinstance(node, ast.Starred):
            return self.resolve(node.value, scope)
        if isinstance(node, ast.Lambda):
            return _Ref("own", self._function_key(node, scope))
        if isinstance(node, ast.Constant | ast.JoinedStr | ast.BinOp | ast.UnaryOp | ast.Compare):
            return _LOCAL_REF  # a value built here: nothing shared
        return None

    def _resolve_call(self, node: ast.Call, scope: _Scope) -> _Ref:
        getter = self._getter_call(node, scope)
        if getter is not None:
            return getter
        callee = self.resolve(node.func, scope)
        if callee is not None and callee.origin == "own" and callee.qualname in self.classes:
            if self._is_thread_class(callee.qualname):
                return _THREAD_REF
            return _Ref("local", f"{_INSTANCE}{callee.qualname}>")
        if callee is not None and callee.origin == "own":
            return self._own_return(node, callee.qualname, scope)
        if callee is not None and callee.origin in ("local", "param") and \
                isinstance(node.func, ast.Attribute) and node.func.attr in _ELEMENT_METHODS:
            base = self.resolve(node.func.value, scope)
            if base is not None and (base.elements or base.origin == "param"):
                return base  # d.values() / d.get(k) of a container holding foreign objects
        if callee is None or callee.origin != "import":
            return _LOCAL_REF
        q = callee.qualname
        first = _arg(node, 0, "name", "o", "object")
        if q.startswith("<"):
            return _Ref("import", f"{q}()")  # called through __subclasses__, __globals__, ...
        if q in _EVERYTHING_CALLS or q.rsplit(".", 1)[-1] in ("__subclasses__", "mro"):
            return _Ref("import", f"{q}()")
        if _matches(q, self.settings.engine_accessors):
            return _Ref("import", f"{q}()")  # the engine's own object (its config, forward context, groups)
        if q == "copy.copy" and first is not None:
            # a new object (writes to it are the copy's) whose attributes and items are the original's
            return _Ref("local", _COPY, self._container([first], scope).elements)
        if q in _ELEMENT_CALLS:
            held = self._container(list(node.args), scope)
            return held
        receiver, _, method = q.rpartition(".")
        if receiver and method in _ELEMENT_METHODS and not self.is_own(receiver) and (
                receiver.startswith(("sys.modules", "builtins.", ENGINE_PARAM + "."))
                or receiver.endswith("__dict__")
                or _matches(receiver, ["vllm.*", "torch.*", "transformers.*"])):
            return _Ref("import", f"{receiver}[*]")
        if q in ("importlib.import_module", "builtins.__import__"):
            loaded = self._loaded_module(node, q)
            # a relative load we cannot place is the file's own package; a placed one is judged by name
            return _Ref("own", "<relative>") if loaded is None else _Ref("import", loaded)
        if q in ("builtins.getattr", "builtins.vars", "builtins.type") and first is not None:
            base = self.resolve(first, scope)
            if base is not None and base.origin == "param":
                return _Ref("classof", "<class of a parameter>") if q == "builtins.type" else base
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
        if q == "logging.getLogger":
            name = "root" if first is None else _dotted_literal(first)
            if name is not None and name != "root" and not self.is_own(name) and name != "__main__":
                return _Ref("import", f"logging.loggers.{name}")
            if name == "root" or (first is not None and isinstance(first, ast.Constant) and not first.value):
                return _Ref("import", "logging.loggers.root")
            return _LOCAL_REF  # getLogger(__name__), an own or a computed name: the model's own logger
        if q == "inspect.getmodule" and first is not None:
            base = self.tainted(self.resolve(first, scope))
            if base is not None:
                return _Ref("import", f"<module of {base.qualname}>")
        if q == "builtins.globals":
            return _Ref("own", f"{self.module or '<this module>'}.__dict__")
        if q == "builtins.type" and len(node.args) == 1 and first is not None:
            base = self.resolve(first, scope)
            if isinstance(first, ast.Name) and first.id in ("self", "cls"):
                return _Ref("own", "<own class>")
            if base is None or base.origin == "local":
                return _Ref("classof", "<class of a local object>")
            return base  # type(<module or class>) is as foreign as the thing itself
        if q == "decimal.getcontext":
            return _Ref("import", "decimal.context")  # the thread's current context, shared by everyone
        if _matches(q, _THREAD_MAKERS):
            return _THREAD_REF
        if q == "sys.modules.get" and first is not None:
            key = _dotted_literal(first)
            return _Ref("import", key) if key else _Ref("import", "sys.modules[*]")
        return _LOCAL_REF

    def _getter_call(self, node: ast.Call, scope: _Scope) -> _Ref | None:
        """`operator.attrgetter("a.b")(obj)` / `itemgetter(k)(obj)`: the attribute or item of obj."""
        if not isinstance(node.func, ast.Call) or not node.args:
            return None
        maker = self.resolve(node.func.func, scope)
        if maker is None or maker.qualname not in ("operator.attrgetter", "operator.itemgetter"):
            return None
        base = self.resolve(node.args[0], scope)
        if base is None or base.origin == "local":
            return self._element(base) if base is not None and base.elements else base
        if base.origin == "param":
            return base
        attr = _dotted_literal(_arg(node.func, 0)) or "*"
        return _Ref(base.origin, f"{base.qualname}.{attr}")

    def _call_arguments(self, node: ast.Call, fn: _Function) -> dict[str, list[ast.expr]]:
        """Which argument expressions of a call land in which parameter of `fn` (a starred argument in every
        parameter from its position on, `**kw` in every keyword one)."""
        out: dict[str, list[ast.expr]] = {}
        pos = list(fn.positional)
        i = 0
        for a in node.args:
            if isinstance(a, ast.Starred):
                for name in [*pos[i:], "*"]:
                    out.setdefault(name, []).append(a.value)
                continue
            out.setdefault(pos[i] if i < len(pos) else "*", []).append(a)
            i += 1
        for kw in node.keywords:
            if kw.arg is None:
                for name in [*pos, *fn.keyword_only, "**"]:
                    out.setdefault(name, []).append(kw.value)
            else:
                known = kw.arg in pos or kw.arg in fn.keyword_only
                out.setdefault(kw.arg if known else "**", []).append(kw.value)
        return out

    def _own_bases(self, cls: str, depth: int = 0) -> list[str]:
        """An own class and its own base classes (this file's), nearest first."""
        out = [cls]
        if depth > 8:
            return out
        for node, outer in self.classes.get(cls, []):
            for b in node.bases:
                r = self.resolve(b, outer)
                if r is not None and r.origin == "own" and r.qualname in self.classes and r.qualname != cls:
                    out += [c for c in self._own_bases(r.qualname, depth + 1) if c not in out]
        return out

    def _is_thread_class(self, cls: str) -> bool:
        """An own class deriving (through own classes) from threading.Thread or another thread maker."""
        for c in self._own_bases(cls):
            for node, outer in self.classes.get(c, []):
                for b in node.bases:
                    r = self.resolve(b, outer)
                    if r is not None and r.origin == "import" and _matches(r.qualname, _THREAD_MAKERS):
                        return True
        return False

    def _method_keys(self, cls: str, names: Sequence[str]) -> list[str]:
        """The own functions `cls.<name>` runs, for each name: the nearest own class defining it."""
        out: list[str] = []
        for name in names:
            found = [f"{c}.{name}" for c in self._own_bases(cls) if f"{c}.{name}" in self.functions]
            out += found[:1]
        return out

    def _enclosing_class(self, scope: _Scope) -> str | None:
        s: _Scope | None = scope
        while s is not None and s.kind != "class":
            s = s.parent
        return s.name if s is not None else None

    def _callee_keys(self, node: ast.Call, scope: _Scope) -> list[str]:
        """The keys of the own functions a call runs: a def or lambda of this file, a method through
        `self`/`cls`, the class or an instance of an own class (instantiation runs `__new__`, `__init__`
        and `__post_init__`)."""
        if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and \
                node.func.value.id in ("self", "cls"):
            attr = node.func.attr
            cls = self._enclosing_class(scope)
            keys = self._method_keys(cls, [attr]) if cls is not None else []
            # a method a subclass or mixin of this file defines: any own method of that name (fail closed)
            return keys or sorted(k for k in self.method_keys if k.rsplit(".", 1)[-1] == attr)
        callee = self.resolve(node.func, scope)
        if callee is not None and callee.origin == "own" and callee.qualname in self.functions:
            return [callee.qualname]
        if callee is not None and callee.origin == "own" and callee.qualname in self.classes:
            return self._method_keys(callee.qualname, ["__new__", "__init__", "__post_init__"])
        if isinstance(node.func, ast.Attribute):
            base = self.resolve(node.func.value, scope)
            if base is not None and base.qualname.startswith(_INSTANCE):
                return self._method_keys(base.qualname[len(_INSTANCE):-1], [node.func.attr])
        return []

    def _own_return(self, node: ast.Call, key: str, scope: _Scope) -> _Ref:
        """What a call to an own function returns: a foreign object it returns (or the foreign argument
        it hands back), else a local value."""
        local: _Ref = _LOCAL_REF
        for fn in self.functions.get(key, []):
            args = self._call_arguments(node, fn)
            for value in fn.returns():
                r = self.resolve(value, fn.scope)
                if r is not None and r.origin == "param" and r.qualname.startswith(key + _SEP):
                    name = r.qualname.rpartition(_SEP)[2]
                    for a in args.get(name, []):
                        t = self.tainted(self.resolve(a, scope))
                        if t is not None:
                            return t
                    continue
                t = self.tainted(r)
                if t is not None:
                    return t
        return local

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
               target: str | None = None, lenient: bool = False) -> None:
        line = getattr(node, "lineno", 1) or 1
        col = getattr(node, "col_offset", 0) or 0
        key = (code, line, col, target or message)
        if key in self._found:
            return
        self._found.add(key)
        message = message.replace(f"`{ENGINE_PARAM}.", "`")
        self.facts.escapes.append(Escape(code=code, line=line, col=col, message=message,
                                         severity=severity, target=target, path=self.path,
                                         context=self._context(node), lenient=lenient))

    def _context(self, node: ast.AST) -> str:
        """The defs, classes and guards around `node`, outermost first (`def f > if X > else`)."""
        if self._parents is None:
            self._parents = {id(c): p for p in ast.walk(self.tree) for c in ast.iter_child_nodes(p)}
        parts: list[str] = []
        child, parent = node, self._parents.get(id(node))
        while parent is not None:
            if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                parts.append(f"{'class' if isinstance(parent, ast.ClassDef) else 'def'} {parent.name}")
            elif isinstance(parent, ast.Lambda):
                parts.append("lambda")
            elif isinstance(parent, ast.If | ast.While):
                branch = " else" if child in parent.orelse else ""
                parts.append(f"{type(parent).__name__.lower()} {ast.unparse(parent.test)[:80]}{branch}")
            elif isinstance(parent, ast.For | ast.AsyncFor):
                parts.append(f"for {ast.unparse(parent.iter)[:80]}")
            elif isinstance(parent, ast.Try | ast.TryStar):
                parts.append("try" if child in parent.body else "try-else" if child in parent.orelse else
                             "finally" if child in parent.finalbody else "except")
            elif isinstance(parent, ast.ExceptHandler):
                parts.append(f"except {ast.unparse(parent.type)[:60] if parent.type else ''}".rstrip())
            elif isinstance(parent, ast.With | ast.AsyncWith):
                parts.append("with " + ", ".join(ast.unparse(i.context_expr)[:60] for i in parent.items))
            elif isinstance(parent, ast.match_case):
                parts.append(f"case {ast.unparse(parent.pattern)[:60]}")
            child, parent = parent, self._parents.get(id(parent))
        return " > ".join(reversed(parts))

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
            elif isinstance(node, ast.AugAssign):
                self._check_aug_name(node, scope, import_time)
        self._check_helper_calls()
        self._check_import_time_thread_calls()

    # helpers that write through a parameter -------------------------------------------------------

    def _record_param_write(self, ref: _Ref, node: ast.AST) -> None:
        key, _, name = ref.qualname.rpartition(_SEP)
        self.param_writes.setdefault((key, name), node)

    def _check_helper_calls(self) -> None:
        """A call handing a foreign object to an own function that writes through that parameter (directly
        or through further own calls: propagated to a fixpoint) is the write itself."""
        changed = True
        while changed:
            changed = False
            for call, scope, key in self.own_calls:
                for fn in self.functions.get(key, []):
                    for name, exprs in self._call_arguments(call, fn).items():
                        if (key, name) not in self.param_writes:
                            continue
                        for e in exprs:
                            r = self.resolve(e, scope)
                            held = [r] if r is not None and r.origin == "param" else [
                                x for x in (r.elements if r is not None else ()) if x.origin == "param"]
                            for p in held:
                                k2, _, n2 = p.qualname.rpartition(_SEP)
                                if (k2, n2) not in self.param_writes:
                                    self.param_writes[(k2, n2)] = self.param_writes[(key, name)]
                                    changed = True
        for call, scope, key in self.own_calls:
            for fn in self.functions.get(key, []):
                for name, exprs in self._call_arguments(call, fn).items():
                    write = self.param_writes.get((key, name))
                    if write is None:
                        continue
                    for e in exprs:
                        t = self.tainted(self.resolve(e, scope))
                        if t is not None:
                            shown = key.rsplit(".", 1)[-1]
                            at = getattr(write, "lineno", "?")
                            self.report(MONKEYPATCH, call, f"passes `{t.qualname}` to `{shown}`, which "
                                        f"writes through its parameter `{name}` (line {at}): a monkeypatch "
                                        "of an object outside the contribution",
                                        target=t.qualname)
        for key, fns in self.functions.items():
            if key in self.method_keys or key.startswith("<lambda>"):
                continue
            written = frozenset(r for (k, n) in self.param_writes if k == key for fn in fns
                                for r in self._param_refs(fn, n))
            if written:
                self.facts.param_writers[key] = written

    @staticmethod
    def _param_refs(fn: _Function, name: str) -> tuple[int | str, ...]:
        """A written parameter as a caller can fill it: its position (when positional) and its name."""
        return (fn.positional.index(name), name) if name in fn.positional else (name,)

    def _unresolved_write(self, node: ast.AST, what: str, code: str) -> None:
        self.report(code, node, f"{what} on an object the scan cannot resolve: it cannot be shown to be the "
                    "contribution's own", severity="warning", target="<unresolved>")


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
        if any(target.startswith((o + ".", o + "[")) for o in _STATE_OBJECTS):
            return GLOBAL_STATE
        return None

    def _env_severity(self, import_time: bool) -> EscapeSeverity:
        return "error" if import_time else "warning"

    def _accessor_of(self, target: str) -> str | None:
        """The engine accessor a dotted target was reached from (`<accessor>().x.y`), if any."""
        head, paren, _ = target.partition("()")
        return head if paren and _matches(head, self.settings.engine_accessors) else None

    def _report_write(self, node: ast.AST, target: str, verb: str, default_code: str,
                      import_time: bool, how: str) -> None:
        if _matches(target, self.settings.allowed_writes):
            return
        if target.startswith(ENGINE_PARAM + "."):
            shown = target[len(ENGINE_PARAM) + 1:]
            name = re.split(r"[.\[]", shown, maxsplit=1)[0]
            why = self.engine_param_why.get(name, "the engine's object")
            self.report(default_code, node, f"{verb} `{shown}` ({how}): `{name}` is a parameter the engine "
                        f"fills with its own object ({why}), which every layer and request of the engine "
                        "shares; model code may read it, not write it (copy what you need into the model's "
                        "own object, e.g. `self.x = ...`)", target=target)
            return
        accessor = self._accessor_of(target)
        if accessor is not None:
            self.report(default_code, node, f"{verb} `{target}` ({how}): state of the engine reached through "
                        f"`{accessor.rsplit('.', 1)[-1]}()` (its config, forward context or process groups), "
                        "which every layer and request of the engine shares; model code may read it, not "
                        "write it", target=target)
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
        elif code == GLOBAL_STATE:
            self.report(code, node, f"{verb} `{target}` ({how}): process-wide state every model shares "
                        "(use a scoped form such as `with decimal.localcontext():`)", target=target)
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
            self._unresolved_write(node, f"{verb} `{node.attr}`", MONKEYPATCH)
            return
        if base.origin == "param" and node.attr in ("__class__", "__dict__"):
            self.report(MONKEYPATCH, node, f"{verb} `{node.attr}` of an object the function was given: "
                        "swapping an object's class or namespace changes it for everyone who holds it "
                        "(wrap or subclass it instead)", target=f"<parameter>.{node.attr}")
            return
        if base.origin == "param":
            self._record_param_write(base, node)
            return
        if base.elements and not self.foreign(base) and base.qualname != _COPY:
            base = base.elements[0]
        if base.origin == "classof":
            self.report(MONKEYPATCH, node, f"{verb} `{node.attr}` on the class of an object "
                        "(`type(x)`/`x.__class__`): a class-wide patch whose class cannot be checked "
                        "statically", severity="warning", target=f"{base.qualname}.{node.attr}")
            return
        if not self.foreign(base):
            self._own_import_write(base, MONKEYPATCH, f".{node.attr}", f"{verb} `{node.attr}` on", node)
            return
        self._report_write(node, f"{base.qualname}.{node.attr}", verb, MONKEYPATCH, import_time,
                           "attribute assignment" if verb == "assigns" else "del")

    def _own_import_write(self, ref: _Ref | None, code: str, what: str, how: str, node: ast.AST,
                          in_place: bool = False) -> None:
        """A write to a name imported from another of the contribution's modules: judged across files
        (a re-export of an engine object is the engine's)."""
        if ref is not None and ref.origin == "import" and self.is_own(ref.qualname) and \
                ref.qualname != self.module and not ref.elements:
            self.facts.own_import_writes.append(OwnImportWrite(code, ref.qualname, what, how,
                                                               getattr(node, "lineno", 1), in_place))

    def _check_aug_name(self, node: ast.AugAssign, scope: _Scope, import_time: bool) -> None:
        """`NAME += v` / `NAME |= v` on a name bound to an imported object: a list's, dict's or set's
        `__iadd__`/`__ior__` updates the object in place before the name is rebound."""
        assert isinstance(node.target, ast.Name)
        ref = self.resolve(node.target, scope)
        op = type(node.op).__name__
        if ref is None:
            return
        if ref.origin == "param":
            self._record_param_write(ref, node)
        elif self.foreign(ref):
            self._report_write(node, ref.qualname, "updates", MONKEYPATCH, import_time,
                               f"augmented assignment ({op}), in place on a list, dict or set")
        else:
            self._own_import_write(ref, MONKEYPATCH, "", "updates in place (augmented assignment)", node)

    def _check_subscript_write(self, node: ast.Subscript, scope: _Scope, import_time: bool) -> None:
        base = self.resolve(node.value, scope)
        if base is None:
            self._unresolved_write(node, "writes an item", MONKEYPATCH)
            return
        if base.origin == "param":
            self._record_param_write(base, node)
            return
        if not self.foreign(base):
            verb = "deletes an item of" if isinstance(node.ctx, ast.Del) else "writes an item of"
            self._own_import_write(base, MONKEYPATCH, "[...]", verb, node)
            return
        if self._self_registration(node, base.qualname, scope):
            return
        key = _dotted_literal(node.slice)
        target = f"{base.qualname}[{key!r}]" if key else f"{base.qualname}[...]"
        verb = "deletes" if isinstance(node.ctx, ast.Del) else "writes"
        default = SETATTR if base.qualname.endswith(".__dict__") else MONKEYPATCH
        self._report_write(node, target, verb, default, import_time, "item assignment")

    def _self_registration(self, node: ast.Subscript, container: str, scope: _Scope) -> bool:
        """`cc.static_forward_context[prefix] = self` in a method: a layer registering itself where the
        engine asks it to (policy `engine_self_registrations`). Only a plain assignment of the method's own
        instance qualifies; deletes, other values and augmented assignments do not."""
        head = f"{ENGINE_PARAM}.vllm_config."
        if container.startswith(head):  # the model's `vllm_config` is the current VllmConfig
            container = f"vllm.config.get_current_vllm_config().{container[len(head):]}"
        if not isinstance(node.ctx, ast.Store) or not _matches(container,
                                                               self.settings.engine_self_registrations):
            return False
        if self._parents is None:
            self._parents = {id(c): p for p in ast.walk(self.tree) for c in ast.iter_child_nodes(p)}
        stmt = self._parents.get(id(node))
        if not isinstance(stmt, ast.Assign) or stmt.targets != [node] or not isinstance(stmt.value, ast.Name):
            return False
        key = self._enclosing_function(scope)
        for fn in self.functions.get(key or "", []):
            node_args = fn.node.args
            first = [*node_args.posonlyargs, *node_args.args][:1]
            if fn.scope.parent is not None and fn.scope.parent.kind == "class" and first and \
                    first[0].arg == stmt.value.id and fn.scope is scope and \
                    scope.bindings.get(stmt.value.id) == [_LOCAL]:
                return True
        return False

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
        keys = self._callee_keys(node, scope)
        for k in keys:
            self.own_calls.append((node, scope, k))
        if keys and import_time:
            self.import_time_calls.add(id(node))
        key = keys[0] if keys else None
        self._check_writer_values(node, scope)
        self._check_manual_enter(node, scope)
        self._check_methodcaller(node, scope)
        self._check_thread_start(node, scope, import_time)
        callee = self.resolve(node.func, scope)
        if callee is not None and callee.origin == "param" and isinstance(node.func, ast.Attribute) \
                and (node.func.attr in _MUTATORS or node.func.attr in _MODULE_MUTATORS):
            self._record_param_write(callee, node)
        if isinstance(node.func, ast.Attribute) and node.func.attr in _FILE_WRITE_METHODS and (
                callee is None or callee.origin != "import"):
            self.report(GLOBAL_STATE, node, f"calls `.{node.func.attr}()`: writes to the file system, "
                        "outside the contribution (a `.pth` or a module file changes every process)",
                        target=f".{node.func.attr}")
        if callee is not None and callee.origin == "import" and self.is_own(callee.qualname) and \
                isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
            self._own_import_write(_Ref("import", callee.qualname.rpartition(".")[0]), MONKEYPATCH,
                                   f".{node.func.attr}()", f"calls `.{node.func.attr}()` on", node, True)
        if callee is None or callee.origin != "import" or self.is_own(callee.qualname):
            self._check_library_method_on_local(node, scope)
            if callee is not None and callee.origin == "import" and key is None:
                self._record_foreign_call(node, callee.qualname, scope)
            return
        q = callee.qualname
        receiver, _, method = q.rpartition(".")
        if method == "*" and not self.is_own(receiver):
            self.report(GLOBAL_STATE, node, f"calls an attribute of `{receiver}` chosen by a computed name "
                        "(`getattr(m, <computed>)(...)`): what it calls cannot be checked", target=q)
            return
        if q in ("torch.load", "torch.serialization.load"):
            safe = _arg(node, 99, "weights_only")
            hidden = any(k.arg is None for k in node.keywords)  # `**kw` may say weights_only=False
            if hidden or (safe is not None and not (isinstance(safe, ast.Constant) and safe.value is True)):
                self.report(GLOBAL_STATE, node, f"calls `{q}` without `weights_only=True`: unpickling runs "
                            "whatever the file says", target=q)
            return
        if q == "functools.update_wrapper" and node.args:
            t = self.tainted(self.resolve(node.args[0], scope))
            if t is not None:
                self.report(SETATTR, node, f"`functools.update_wrapper` writes `__name__`, `__doc__`, "
                            f"`__wrapped__`, ... onto `{t.qualname}`, which the contribution does not own",
                            target=t.qualname)
                return
        if q == "functools.partial" and node.args:
            self._check_partial(node, scope, import_time)
            return
        if q in _ITEM_WRITERS:
            self._check_item_writer(node, q, scope, import_time)
            return
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
        if receiver and (method in _MUTATORS or (mutating_method(method) and self._engine_state(receiver))) \
                and self._check_mutator(node, receiver, method, import_time, scope):
            return
        if self._check_torch_library(node, q, receiver, method, scope):
            return
        if self._check_importlib(node, q, scope):
            return
        if q in ("builtins.type", "types.new_class"):
            self._check_dynamic_class(node, q, scope)
        elif self._is_metaclass_call(node, q, scope):
            self._check_dynamic_class(node, q, scope, metaclass=True)
        if self._check_global_state(node, q, scope, import_time):
            return
        self._check_registration(node, q, registered=None,
                                 first_arg_local=self._first_arg_local(node, scope), scope=scope)

    def _check_thread_start(self, node: ast.Call, scope: _Scope, import_time: bool) -> None:
        """A thread (or pool) started at import time keeps running beside the engine after the import."""
        if not isinstance(node.func, ast.Attribute) or node.func.attr not in _THREAD_STARTS or \
                self.resolve(node.func.value, scope) != _THREAD_REF:
            return
        if not import_time:
            key = self._enclosing_function(scope)
            if key is not None:
                self.thread_starts.setdefault(key, node)  # judged where the function is called
        else:
            self.report(GLOBAL_STATE, node, f"starts a thread at import time (`.{node.func.attr}()` on a "
                        "thread or thread pool): it outlives the import and runs beside the engine in every "
                        "process that imports the model (start it from the model's code at run time)",
                        target=f"<thread>.{node.func.attr}")

    def _enclosing_function(self, scope: _Scope) -> str | None:
        """The key of the own function whose body `scope` is (or is nested in: comprehensions)."""
        if self._function_of_scope is None:
            self._function_of_scope = {id(fn.scope): key for key, fns in self.functions.items() for fn in fns}
        s: _Scope | None = scope
        while s is not None and s.kind == "comprehension":
            s = s.parent
        return self._function_of_scope.get(id(s)) if s is not None else None

    def _check_import_time_thread_calls(self) -> None:
        """An own function that starts a thread (itself or through further own calls), called at import
        time, starts it at import time."""
        changed = True
        while changed:
            changed = False
            for _call, scope, key in self.own_calls:
                caller = self._enclosing_function(scope)
                if key in self.thread_starts and caller is not None and caller not in self.thread_starts:
                    self.thread_starts[caller] = self.thread_starts[key]
                    changed = True
        for call, _, key in self.own_calls:
            start = self.thread_starts.get(key)
            if start is not None and id(call) in self.import_time_calls:
                shown = key.rsplit(".", 1)[-1]
                self.report(GLOBAL_STATE, call, f"calls `{shown}` at import time, which starts a thread "
                            f"(line {getattr(start, 'lineno', '?')}): it outlives the import and runs "
                            "beside the engine (start it from the model's code at run time)",
                            target="<thread>.start")

    def _is_metaclass_call(self, node: ast.Call, q: str, scope: _Scope) -> bool:
        """A foreign metaclass called directly with (name, bases, namespace): `type(X)(...)`,
        `X.__class__(...)` (also through an alias) or a class named `*Meta`/`*Metaclass`."""
        if len(node.args) + len(node.keywords) != 3:
            return False
        if self._class_of_expr(node.func, scope) is not None:
            return True
        last = q.rsplit(".", 1)[-1]
        return last == "__class__" or last.endswith(("Meta", "Metaclass", "MetaClass"))

    def _class_of_expr(self, expr: ast.expr, scope: _Scope, depth: int = 0) -> ast.expr | None:
        """X when `expr` is `type(X)` or `X.__class__`, also through names bound to either
        (`meta = type(X); meta(...)`); None otherwise."""
        if depth > 8:
            return None
        if isinstance(expr, ast.Call) and len(expr.args) == 1 and not expr.keywords:
            maker = self.resolve(expr.func, scope)
            if maker is not None and maker.qualname == "builtins.type":
                return expr.args[0]
        if isinstance(expr, ast.Attribute) and expr.attr == "__class__":
            return expr.value
        if isinstance(expr, ast.Name):
            for b in self._lookup(expr.id, scope) or []:
                if isinstance(b, _Alias):
                    found = self._class_of_expr(b.value, b.scope, depth + 1)
                    if found is not None:
                        return found
        return None

    def _engine_class(self, ref: _Ref | None) -> bool:
        """Whether a resolved class is the engine's (a name of `hidden_import_roots`, an engine parameter's,
        or one reached through `__bases__`/`__subclasses__`/...: not provably anyone else's)."""
        if ref is None or not self.foreign(ref):
            return False
        q = ref.qualname
        return q.startswith(("<", ENGINE_PARAM + ".")) or any(
            q == r or q.startswith(r + ".") for r in self.settings.hidden_import_roots)

    def _check_dynamic_class(self, node: ast.Call, q: str, scope: _Scope, metaclass: bool = False) -> None:
        """`type(name, bases, ns)` / `types.new_class(...)` / a metaclass called directly run the bases'
        `__init_subclass__` and metaclass like a class statement, out of sight of a reader: an engine base
        or an engine metaclass is an error (it may register the new class in a shared registry; write a
        class statement), and so are bases the scan cannot read."""
        if (q == "builtins.type" or metaclass) and len(node.args) + len(node.keywords) != 3:
            return
        bases = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "bases"), None)
        if metaclass:
            of = self._class_of_expr(node.func, scope)
            meta = self.resolve(of, scope) if of is not None else self.resolve(node.func, scope)
            if self._engine_class(meta) and meta is not None:
                how = f"`type({meta.qualname})`" if of is not None else f"`{meta.qualname}`"
                self.report(GLOBAL_STATE, node, f"creates a class by calling the engine's metaclass ({how}) "
                            "directly: its `__new__`/`__init__` may register the new class in a shared "
                            "registry, out of sight of a class statement (write a class statement with the "
                            "model's own bases)", target=meta.qualname)
                return
        if q == "types.new_class" and bases is None:
            return  # no bases: a plain class
        if isinstance(bases, ast.Tuple | ast.List) and \
                not any(isinstance(e, ast.Starred) for e in bases.elts):
            for e in bases.elts:
                base = self.resolve(e, scope)
                if self._engine_class(base) and base is not None:
                    maker = "a metaclass" if metaclass else f"`{q.removeprefix('builtins.')}`"
                    self.report(GLOBAL_STATE, node, f"creates a subclass of the engine's `{base.qualname}` "
                                f"dynamically (with {maker}): the base's `__init_subclass__` or metaclass "
                                "may register it in a shared registry (write a class statement, which the "
                                "blast radius and review see)", target=base.qualname)
                    return
            return  # literal bases of the contribution's own or of torch/the stdlib: a plain class
        shown = f"the metaclass `{q}`" if metaclass else f"`{q.removeprefix('builtins.')}`"
        self.report(GLOBAL_STATE, node, f"creates a class with {shown} from computed "
                    "bases: the scan cannot tell whether a base registers its subclasses in a shared "
                    "registry (write a class statement, or list the bases literally)", target=q)

    def _check_methodcaller(self, node: ast.Call, scope: _Scope) -> None:
        """`operator.methodcaller("__setattr__", "forward", f)(SharedClass)`: a method chosen by name
        called on a foreign object; only a literal, non-dunder, non-mutating name is a read."""
        if not isinstance(node.func, ast.Call) or not node.args:
            return
        maker = self.resolve(node.func.func, scope)
        if maker is None or maker.qualname != "operator.methodcaller":
            return
        target = self.tainted(self.resolve(node.args[0], scope))
        name = _dotted_literal(_arg(node.func, 0))
        if target is None or (name is not None and not name.startswith("__") and name not in _MUTATORS):
            return
        self.report(SETATTR, node, f"calls `{name or '<computed>'}` on `{target.qualname}` through "
                    "`operator.methodcaller`: a write to an object the contribution does not own",
                    target=target.qualname)

    def _check_manual_enter(self, node: ast.Call, scope: _Scope) -> None:
        """`torch.no_grad().__enter__()` or `stack.enter_context(cm)` outside a `with`: a scoped switch
        (grad mode, a TorchFunctionMode, a config patch) entered and never left is process-wide."""
        if not isinstance(node.func, ast.Attribute):
            return
        attr = node.func.attr
        if attr in ("__enter__", "__aenter__"):
            cm: ast.expr | None = node.func.value
        elif attr in ("enter_context", "enter_async_context"):
            cm = node.args[0] if node.args else None
        else:
            return
        if not isinstance(cm, ast.Call):
            return
        maker = self.resolve(cm.func, scope)
        if maker is None or not self.foreign(maker):
            return
        context = self._context(node)
        if attr.startswith("__") and any(p in context for p in ("def __enter__", "def __aenter__")):
            return  # an own context manager entering the one it wraps
        if not attr.startswith("__") and "with " in context:
            return  # an ExitStack used inside a with block is closed with it
        self.report(GLOBAL_STATE, node, f"enters `{maker.qualname}` by `.{attr}()` outside a `with` block: "
                    "what it switches on (grad mode, a dispatch mode, a config patch) is never restored "
                    "and changes every model", target=maker.qualname)

    def _check_writer_values(self, node: ast.Call, scope: _Scope) -> None:
        """`functools.reduce(setattr, ...)`, `map(setattr, mods, ...)`: a writer handed on as a value writes
        to objects the scan cannot follow."""
        callee = self.resolve(node.func, scope)
        skip_first = callee is not None and callee.qualname == "functools.partial"
        values = [*node.args, *(k.value for k in node.keywords)]
        for i, v in enumerate(values):
            if skip_first and i == 0:
                continue
            r = self.resolve(v.value if isinstance(v, ast.Starred) else v, scope)
            if r is not None and r.origin == "import" and self._deferred_state_call(r.qualname):
                to = callee.qualname if callee is not None and callee.qualname else "a call"
                self.report(GLOBAL_STATE, v, f"passes `{r.qualname}` as a value to "
                            f"`{to.removeprefix('builtins.')}`: it changes process-wide state when that "
                            "code calls it later (at exit, in a thread, per element)", target=r.qualname)
                continue
            if r is not None and r.origin == "import" and r.qualname in _WRITERS - {"builtins.vars"}:
                to = callee.qualname if callee is not None and callee.qualname else "a call"
                self.report(SETATTR, v, f"passes `{r.qualname.removeprefix('builtins.')}` as a value to "
                            f"`{to.removeprefix('builtins.')}`: what it writes to cannot be checked",
                            target=r.qualname)

    def _deferred_state_call(self, q: str) -> bool:
        """A function (snake_case last part: not a constant or a class) that changes process-wide state,
        handed on as a value instead of being called here."""
        last = q.rsplit(".", 1)[-1]
        if not last[:1].islower() or self.is_own(q):
            return False
        s = self.settings
        if q in _INTERPRETER_HOOKS or _matches(q, s.global_flag_calls):
            return True
        if q.startswith("os.environ.") and last in _MUTATORS:
            return True
        return _matches(q, s.global_state_calls) and not _matches(q, s.allowed_global_calls) \
            and not _matches(q, s.scoped_global_calls)

    def _check_partial(self, node: ast.Call, scope: _Scope, import_time: bool) -> None:
        """`functools.partial(f, *a, **kw)` is judged as the call `f(*a, **kw)` it prepares."""
        fake = ast.Call(func=node.args[0], args=list(node.args[1:]), keywords=list(node.keywords))
        ast.copy_location(fake, node)
        self._check_call(fake, scope, import_time)

    def _check_item_writer(self, node: ast.Call, q: str, scope: _Scope, import_time: bool) -> None:
        first = _arg(node, 0)
        obj = self.resolve(first, scope) if first is not None else None
        fn = q.rsplit(".", 1)[-1]
        if obj is None:
            self._unresolved_write(node, f"`{q}`", MONKEYPATCH)
        elif obj.origin == "param":
            self._record_param_write(obj, node)
        else:
            self._own_import_write(obj, MONKEYPATCH, "[...]", f"writes an item by `operator.{fn}()` of", node)
            t = self.tainted(obj)
            if t is not None:
                code = SETATTR if t.qualname.endswith(".__dict__") else MONKEYPATCH
                self._report_write(node, f"{t.qualname}[...]", "writes", code, import_time,
                                   f"operator.{fn}()")

    def _record_foreign_call(self, node: ast.Call, q: str, scope: _Scope) -> None:
        """A call into another module of the contribution with foreign arguments: judged across files
        against that module's `param_writers` (fasttrack.rules.escapes)."""
        held: dict[int | str, str] = {}
        for i, a in enumerate(node.args):
            t = self.tainted(self.resolve(a.value if isinstance(a, ast.Starred) else a, scope))
            if t is not None:
                held["*" if isinstance(a, ast.Starred) else i] = t.qualname
        for kw in node.keywords:
            t = self.tainted(self.resolve(kw.value, scope))
            if t is not None:
                held[kw.arg or "**"] = t.qualname
        if held:
            self.facts.foreign_calls.append((q, held, getattr(node, "lineno", 1)))

    def _check_global_state(self, node: ast.Call, q: str, scope: _Scope, import_time: bool) -> bool:
        """Process-wide state is an allow-list: a call the policy's `global_state_calls` recognises (torch
        switches, signals, subprocesses, native libraries, ...) is FT146 unless `allowed_global_calls`
        lists it, or it is a `scoped_global_calls` context manager used as a `with` item."""
        s = self.settings
        if q in ("builtins.open", "io.open", "codecs.open", "os.fdopen"):
            mode = _arg(node, 1, "mode")
            lit = "r" if mode is None else _dotted_literal(mode)
            if lit is None or any(c in lit for c in "wax+"):
                self.report(GLOBAL_STATE, node, f"opens a file for writing (`{q.removeprefix('builtins.')}`, "
                            f"mode {lit or '<computed>'!r}): model code may not write files (a `.pth` in "
                            "site-packages or a module file changes every process)", target=q)
            return True
        if _matches(q, s.allowed_global_calls) or not _matches(q, s.global_state_calls):
            return False
        if id(node) in self.with_items and _matches(q, s.scoped_global_calls):
            return True
        if q.startswith("warnings.") and "with warnings.catch_warnings(" in self._context(node):
            return True  # a filter inside catch_warnings() is restored when the block ends
        if q.startswith(("pickle.", "marshal.", "runpy.", "torch.hub.", "dill.", "cloudpickle.")):
            self.report(GLOBAL_STATE, node, f"calls `{q}`: runs code that comes from data (unpickled, "
                        "marshalled or downloaded), which the scan cannot check", target=q)
            return True
        scoped = " (allowed only as a `with` item)" if _matches(q, s.scoped_global_calls) else ""
        self.report(GLOBAL_STATE, node, f"calls `{q}`{scoped}: changes process-wide state that every model "
                    "shares, which the policy's allow-list does not grant model code", target=q)
        return True

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
                    severity="warning", target=q, lenient=src is not None)
        if src is not None and self.exec_depth < _MAX_EXEC_DEPTH:
            inner = _analyse(src, self.path, self.own_packages, self.module, self.is_package,
                             self.own_ops, self.settings, self.exec_depth + 1, self.foreign_ops)
            for esc in inner.escapes:
                if esc.code == UNPARSEABLE:
                    continue
                self.report(esc.code, node, f"in the string passed to `{fn}()`: {esc.message}",
                            severity=esc.severity, target=esc.target)

    def _check_setattr(self, node: ast.Call, q: str, scope: _Scope, import_time: bool) -> None:
        fn = q.split(".")[-1]
        verb = "deletes" if fn == "delattr" else "sets"
        first = _arg(node, 0)
        if first is None:
            star = next((a for a in node.args if isinstance(a, ast.Starred)), None)
            if star is None:
                return
            held = self.resolve(star.value, scope)
            t = self.tainted(held)
            if t is not None:
                self._report_write(node, f"{t.qualname}.*", verb, SETATTR, import_time, f"{fn}(*args)")
            elif held is not None and held.origin == "param":
                self._record_param_write(held, node)
            else:
                self._unresolved_write(node, f"{fn}(*args)", SETATTR)
            return
        obj = self.resolve(first, scope)
        name = _dotted_literal(_arg(node, 1)) or "*"
        if obj is None:
            self._unresolved_write(node, f"{fn}()", SETATTR)
            return
        if obj.origin == "param":
            self._record_param_write(obj, node)
            return
        self._own_import_write(obj, SETATTR, f".{name}", f"{verb} `{name}` by `{fn}()` on", node)
        if obj.elements and not self.foreign(obj) and obj.qualname != _COPY:
            obj = obj.elements[0]
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
        self._own_import_write(obj, SETATTR, f".{name}", f"sets `{name}` by `__setattr__` on", node)
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

    def _engine_state(self, receiver: str) -> bool:
        """Whether a dotted receiver is an object of the engine's (not a module of it): reached through an
        engine parameter, an engine accessor, or a name of the engine's packages not imported as a module."""
        if receiver.startswith(ENGINE_PARAM + ".") or self._accessor_of(receiver) is not None:
            return True
        # a class, a constant or an item of the engine's (`vllm.x.Registry`, `vllm.x.TABLE[...]`); not a
        # module of it bound by `from vllm.x import ops` (`ops.rms_norm_(...)` writes its arguments)
        parts = receiver.replace("[", ".[").split(".")
        return receiver not in self.module_imports and not self.is_own(receiver) and any(
            receiver.startswith(r + ".") for r in self.settings.hidden_import_roots) and \
            any(p[:1].isupper() or p.startswith("[") for p in parts[1:])

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
        # a container.
        if state_like_receiver(receiver, self.settings.hidden_import_roots, self.module_imports):
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
                            "string, hidden from the import graph", severity="warning", target=loaded,
                            lenient=True)
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
        receiver = q.rpartition(".")[0]
        onto_engine = receiver.startswith(ENGINE_PARAM + ".") or self._accessor_of(receiver) is not None
        if not explicit and first_arg_local and not onto_engine:
            return  # registering onto a local object (a hook on an own module instance), not a registry
        if not explicit and scope is not None and isinstance(node, ast.Call) and node.args and \
                not isinstance(node.args[0], ast.Starred):
            first = self.resolve(node.args[0], scope)
            if first is not None and first.origin == "param":
                self._record_param_write(first, node)  # onto the caller's object: judged at the call
                return
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
