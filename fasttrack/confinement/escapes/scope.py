"""The scope and taint resolver of the escape scan: one pass binds every name of a file in its scope
(Python's rules: functions, lambdas, classes and comprehensions have their own) and collects the nodes
the checkers judge; `resolve` then says what an expression refers to (an imported dotted name, the file's
own thing, a local object, a parameter, a local container holding foreign objects), following aliases,
parameters, return values, containers, conditionals, unpacking, `operator`/`functools` getters, stored
attributes and the parameters the engine fills (`ENGINE_PARAM`). It reports nothing itself but keeps the
findings list (`report`) the checkers write to."""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from fasttrack.confinement.escapes.common import (
    _BUILTIN_NAMES,
    _ELEMENT_CALLS,
    _ELEMENT_METHODS,
    _EVERYTHING_CALLS,
    _LEAVES,
    _REACH_ATTRS,
    _SINGLETON_CALLS,
    _THREAD_MAKERS,
    ENGINE_PARAM,
    Escape,
    EscapeSeverity,
    FileFacts,
    _annotations,
    _arg,
    _canonical_module,
    _dotted_literal,
    _is_main_guard,
    _matches,
    _namespace_of,
    _string_prefix,
    carried_module,
)
from fasttrack.confinement.escapes.flow import ENTRY, reaching
from fasttrack.confinement.escapes.sends import SendSite, send_sites
from fasttrack.policy import EscapesSpec


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


@dataclass(frozen=True)
class _Raised:
    """A name bound by `except ... as e`: an exception some `raise` of this file raised."""


_Binding = _Import | _Own | _Alias | _Local | _Param | _Elem | _Raised
_LOCAL = _Local()
_RAISED = _Raised()


@dataclass(eq=False)
class _Scope:
    kind: Literal["module", "function", "class", "comprehension"]
    parent: _Scope | None
    bindings: dict[str, list[_Binding]] = field(default_factory=dict)
    # the site of each binding (parallel to `bindings`): the node that binds, `flow.ENTRY` for a parameter,
    # None for one made from elsewhere (a nested function's `nonlocal`), which reaches every use
    sites: dict[str, list[int | None]] = field(default_factory=dict)
    globals_: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)
    name: str = ""  # a class scope: the class's dotted name (`<module>.<Class>`)
    # a class scope: the defs its body makes static later (`name = staticmethod(name)`), no `self` bound
    statics: set[str] = field(default_factory=set)
    noted: set[str] = field(default_factory=set)  # a class scope: names recorded as class attributes

    def bind(self, name: str, binding: _Binding, site: int | None = None) -> None:
        self.bindings.setdefault(name, []).append(binding)
        self.sites.setdefault(name, []).append(site)


@dataclass(frozen=True, eq=False)
class _Function:
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    scope: _Scope
    positional: tuple[str, ...]  # positional parameters a caller fills, in order (self/cls left out)
    keyword_only: frozenset[str]
    key: str = ""  # its key in Resolver.functions

    def returns(self) -> list[ast.expr]:
        """The expressions the function returns (nested defs and lambdas left out)."""
        if isinstance(self.node, ast.Lambda):
            return [self.node.body]
        out: list[ast.expr] = []
        for n in self._body_nodes():
            if isinstance(n, ast.Return | ast.Yield) and n.value is not None:
                out.append(n.value)
            elif isinstance(n, ast.YieldFrom):
                out.append(ast.Starred(value=n.value, ctx=ast.Load()))
        return out

    def stop_values(self) -> list[ast.expr]:
        """What a generator's or coroutine's `return v` hands to the `StopIteration` (`.value`) that ends it,
        and to a `yield from` of it; [] for a plain function."""
        if isinstance(self.node, ast.Lambda) or not (
                isinstance(self.node, ast.AsyncFunctionDef) or self.is_generator()):
            return []
        return [n.value for n in self._body_nodes() if isinstance(n, ast.Return) and n.value is not None]

    def is_generator(self) -> bool:
        """Its body yields (calling it makes a generator that `.send()` resumes)."""
        return not isinstance(self.node, ast.Lambda) and any(
            isinstance(n, ast.Yield | ast.YieldFrom) for n in self._body_nodes())

    def _body_nodes(self) -> list[ast.AST]:
        """The nodes of the function's own body (nested defs, lambdas and classes left out)."""
        if isinstance(self.node, ast.Lambda):
            return [self.node.body]
        out: list[ast.AST] = []
        todo: list[ast.AST] = list(self.node.body)
        while todo:
            n = todo.pop()
            out.append(n)
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
_NAMESPACE = "<namespace>"  # a local ref: `types.SimpleNamespace(**kw)`, whose attributes are its elements
_CONTAINER_MAKERS = frozenset({
    "builtins.list", "builtins.dict", "builtins.set", "collections.deque", "collections.OrderedDict",
    "collections.defaultdict", "collections.ChainMap", "queue.Queue", "queue.LifoQueue", "queue.SimpleQueue",
    "queue.PriorityQueue", "asyncio.Queue", "contextvars.ContextVar", "weakref.WeakValueDictionary",
    "weakref.WeakKeyDictionary", "weakref.WeakSet", "concurrent.futures.Future", "asyncio.Future",
    "asyncio.futures.Future"})
_NAMESPACE_CALLS = frozenset({"types.SimpleNamespace", "argparse.Namespace"})
# methods putting their arguments into the receiver (a container, a queue, a context variable)
_FILLERS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "__setitem__", "put",
                      "put_nowait", "appendleft", "extendleft", "set", "push", "set_result",
                      "set_exception"})
# unbound attribute lookups: `object.__getattribute__(o, "x")` is `getattr(o, "x")`
_GETATTRIBUTE_CALLS = frozenset({"builtins.object.__getattribute__", "builtins.type.__getattribute__",
                                 "types.ModuleType.__getattribute__", "builtins.object.__getattr__"})
_COPY = "<shallow copy>"  # a local ref: `copy.copy(x)`, whose `elements` are what its attributes are
# a class's attributes of its own, not its bases' (`Sub.__dict__`, `Sub.__name__`, `Sub.__bases__`)
_CLASS_OWN_DUNDERS = frozenset({"__dict__", "__name__", "__qualname__", "__module__", "__doc__", "__bases__",
                                "__mro__", "__class__", "__subclasses__", "__base__", "__annotations__",
                                "__slots__", "__weakref__", "__init_subclass__", "mro"})
# an own class's attributes that hand out its class attributes as records (dataclass fields, enum members)
_CLASS_REFLECTION = frozenset({"__dataclass_fields__", "__members__", "_member_map_", "_value2member_map_",
                               "__attrs_attrs__", "model_fields", "__fields__", "_field_defaults"})
# calls reading an own class's fields (dataclasses, attrs, pydantic)
_FIELDS_CALLS = frozenset({"dataclasses.fields", "attr.fields", "attrs.fields", "attr.fields_dict",
                           "attrs.fields_dict"})
_BOUND = "<bound "  # + a foreign function's dotted name + ">": a method of it bound to a local object
# callables registering a callback (at this position) called later with the arguments after it
_DEFERRED_CALLERS = {"weakref.finalize": 1, "atexit.register": 0}
_METHODCALLER = "<methodcaller "  # + the method's name + ">": operator.methodcaller(name)
# callables returning (a wrapper whose attributes reach) the function they are given
_RETURNS_ITS_FUNCTION = frozenset({"functools.lru_cache", "functools.cache", "builtins.staticmethod",
                                   "builtins.classmethod"})
# attributes of a function (or of its wrapper) that are the function
_FUNCTION_ITSELF = frozenset({"__func__", "__wrapped__", "__call__"})
_PARTIAL = "<partial>"  # functools.partial(f, *args): elements are its arguments; calling it may return them
# an own class's dunders consulted by iteration (`for`, `async for`, `reversed`, unpacking) and by operators
_ITERATION_DUNDERS = ("__iter__", "__next__", "__getitem__", "__aiter__", "__anext__", "__reversed__")
_OPERATOR_DUNDERS = (*(f"__{p}{op}__" for op in (
    "add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "divmod", "pow", "lshift", "rshift", "and",
    "xor", "or") for p in ("", "r", "i")), "__neg__", "__pos__", "__invert__", "__abs__")
# calls returning (a container of) what their arguments hold, by family (hostile review 22): the iterator,
# heap and bisection helpers, a record's copies and conversions, static attribute lookup
_ELEMENT_FAMILIES = ("itertools.*", "heapq.*", "bisect.*", "dataclasses.replace", "dataclasses.astuple",
                     "dataclasses.asdict", "attr.evolve", "attr.asdict", "attr.astuple", "attrs.evolve",
                     "attrs.asdict", "attrs.astuple", "inspect.getattr_static", "inspect.unwrap",
                     "inspect.getmembers*", "copy.replace", "contextvars.ContextVar")
_RECORD_COPIES = frozenset({"dataclasses.replace", "attr.evolve", "attrs.evolve", "copy.replace"})
# calls reading an own function's annotations and defaults
_INTROSPECTION_CALLS = frozenset({"typing.get_type_hints", "inspect.get_annotations", "inspect.signature",
                                  "typing_extensions.get_type_hints", "inspect.getfullargspec"})
_OF_FOREIGN = "<made by "  # + a foreign callable's dotted name + ">": a local object a foreign call made
_GENERATOR = "<generator of "  # + another own module's function + ">": what calling it makes
_INSTANCE = "<instance of "  # + an own class's dotted name + ">": a local object of an own class
# a thread or thread pool made here: starting it at import time is FT146
_THREAD_REF = _Ref("local", "<thread>")
_SEP = "\x1f"  # between a function key and a parameter name in a "param" _Ref
_Handler = Callable[[ast.AST, "_Scope", bool], None]
# (engine class, method) -> the method's positional parameters after self, () when the engine does not
# define it, None when its source cannot be read (engine_signatures.EngineSignatures.method_params)
Signatures = Callable[[str, str], "tuple[str, ...] | None"]
# a class -> it derives from `type` (True), it does not (False), not known (None): EngineSignatures.metaclass
Metaclasses = Callable[[str], "bool | None"]


# the engine's process-wide containers (and any object's namespace dict): a copy of one (`copy.copy`, a slice)
# is a new container of the same items, not the shared one (a copy of an engine class or module is the
# object itself: `copy.copy` returns a class unchanged)
_SHARED_CONTAINERS = frozenset({
    "sys.path", "sys.modules", "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache", "sys.argv",
    "sys.warnoptions", "sys.orig_argv", "os.environ", "os.environb", "sys.stdlib_module_names",
    "sys.builtin_module_names"})


# stdlib callables whose result is a fresh object of their own whatever they are handed (a bool, a number,
# a string, None): the fail-closed hand-back rule of `_resolve_call` leaves them out
_FRESH_RESULTS = frozenset({f"builtins.{n}" for n in (
    "isinstance", "issubclass", "hasattr", "callable", "len", "id", "hash", "repr", "str", "ascii", "format",
    "print", "bool", "int", "float", "complex", "bytes", "bytearray", "ord", "chr", "bin", "hex", "oct",
    "round", "divmod", "dir", "any", "all", "range", "slice", "memoryview", "object", "open", "input",
    "setattr", "delattr", "exec", "compile", "breakpoint", "help")} | {
    "dataclasses.is_dataclass", "warnings.warn", "copy.deepcopy", "typing.get_type_hints",
    "textwrap.dedent", "textwrap.indent", "json.dumps", "pickle.dumps", "operator.is_", "operator.is_not",
    "operator.contains", "operator.eq", "operator.ne", "operator.truth", "operator.not_"})
_FRESH_FAMILIES = ("inspect.is*", "inspect.getsource*", "inspect.getfile", "os.path.*", "math.*", "re.*",
                   "logging.*", "string.*", "struct.*", "time.*",
                   "pathlib.*", "os.fspath", "shlex.*", "hashlib.*", "base64.*", "uuid.*", "subprocess.*")
_STDLIB_ROOTS = frozenset(sys.stdlib_module_names)


def _stdlib(qualname: str) -> bool:
    """A callable of the standard library (or a builtin)."""
    return qualname.split(".", 1)[0] in _STDLIB_ROOTS


def _shared_container(qualname: str) -> bool:
    return qualname in _SHARED_CONTAINERS or qualname.endswith(".__dict__")


def _copy_of_container(ref: _Ref) -> _Ref:
    """A new local container holding the items of the shared container `ref`."""
    return _Ref("local", "<container>", (_Ref("import", f"{ref.qualname}[*]"),))


def _is_namespace(node: ast.expr) -> bool:
    """An attribute namespace: `x.__dict__`, `vars(x)`, or this module's own (`globals()`, `vars()`)."""
    return _namespace_of(node) is not None or (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and
        node.func.id in ("globals", "vars", "locals") and not node.args and not node.keywords)


def _is_property(node: ast.AST) -> bool:
    """A def decorated `@property` / `@cached_property` (`instance.name` runs it)."""
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
        (isinstance(d, ast.Name) and d.id in ("property", "cached_property")) or
        (isinstance(d, ast.Attribute) and d.attr == "cached_property") for d in node.decorator_list)


# what one call of a callback passes: the foreign objects by position, and by keyword ("*": any keyword)
Passed = tuple[tuple["_Ref | None", ...], dict[str, "_Ref | None"]]


class CrossModules(Protocol):
    """What the names of the contribution's other modules refer to (cross_module.py): consulted when a
    name imported from one of them is resolved, and when a function of one of them is called."""

    def member(self, qualname: str, here: str | None) -> _Ref | None:
        """The foreign object the own dotted name `qualname` is (a re-export, a class attribute, a module
        global holding one), or None when it is the contribution's own (or not one the summary reads).
        `here`: the asking file's module (its own names are its own resolver's)."""

    def parse(self, source: str) -> ast.Module:
        """The tree of a module's text, shared with the summary's own reading of it."""

    def call(self, qualname: str, node: ast.Call, scope: _Scope, caller: Resolver) -> _Ref | None:
        """The foreign object a call `node` (in `caller`) of the own function `qualname` of another
        module returns, or None."""

    def instance_attribute(self, cls: str, attr: str, here: str | None) -> _Ref | None:
        """`obj.attr` for an instance of the own class `cls` of another module: the foreign object a property
        returns or a class attribute holds, or None."""

    def raised(self, name: str, here: str | None) -> _Ref | None:
        """The foreign object an exception raised in the own module `name` (or the module of the own name
        `name`) carries, or None."""

    def dunder_result(self, cls: str, names: tuple[str, ...], here: str | None) -> _Ref | None:
        """The foreign object a dunder (the first of `names` defined) of another module's own class `cls`
        returns for an instance, or None."""

    def instance_class(self, qualname: str, here: str | None) -> str | None:
        """The own class another module's own name `qualname` holds an instance of (`k = K()`), or None."""

    def returned_maker(self, qualname: str, here: str | None) -> str | None:
        """The foreign callable whose result (or the foreign object) another module's own function
        `qualname` returns (`def quiet(): return contextlib.redirect_stdout(...)`), or None."""

    def engine_annotation(self, qualname: str, here: str | None, types: Sequence[str] | None) -> str | None:
        """The engine type the own name `qualname` of another module names when used as an annotation (an
        alias `Cls = type[Engine]`, a TypeVar bound to one), or None."""

    def callback_arguments(self, qualname: str, node: ast.Call, arg: ast.expr,
                           caller: tuple[Resolver, _Scope] | None = None) -> list[Passed]:
        """For a call `node` of another module's own function `qualname` handing it `arg`: the foreign
        objects (by position, and by keyword) each call of that parameter inside the function passes."""


class Resolver:
    """Bindings, scopes and what expressions refer to, for one parsed file."""

    def __init__(self, tree: ast.Module, path: str, own_packages: set[str], module: str | None,
                 is_package: bool, own_op_namespaces: set[str], settings: EscapesSpec,
                 exec_depth: int, foreign_op_namespaces: frozenset[str] = frozenset(),
                 signatures: Signatures | None = None, cross: CrossModules | None = None,
                 metaclasses: Metaclasses | None = None) -> None:
        self.tree = tree
        # whether a class of the engine, the baselines or another own module derives from `type`
        # (engine_signatures.py), None: not known
        self.metaclasses = metaclasses
        # the contribution's other modules (cross_module.py): what the names imported from them are
        self.cross = cross
        self.reexported: dict[str, str] = {}  # a foreign object -> the own name this file reached it by
        # the positional parameters of an engine class's method (engine_signatures.py), None: unknown
        self.signatures = signatures
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
        # id(node) -> (node, what it refers to); the node is held so that its id is never reused while the
        # memo lives (returns() makes new nodes for `yield from`)
        self._memo: dict[int, tuple[ast.expr, _Ref | None]] = {}
        self._resolving_names: set[tuple[int, str, frozenset[int] | None]] = set()
        self._name_memo: dict[tuple[int, str, frozenset[int] | None], _Ref | None] = {}
        # statement order inside functions: a use (id of a Name load) -> the binding sites reaching it, and
        # per function scope the sites the flow pass saw (flow.py)
        self.flow_uses: dict[int, frozenset[int]] = {}
        self.flow_sites: dict[int, set[int]] = {}
        self._found: set[tuple[str, int, int, str]] = set()
        self._stack: list[tuple[ast.AST, _Scope, bool]] = []
        self.candidates: list[tuple[ast.AST, _Scope, bool]] = []
        # operator syntax that runs an own class's dunders implicitly (`a == b`, `a in b`, `a + b`, `a += b`,
        # `with a:`): linked to those dunders as own calls (analyser.py `_link_protocols`)
        self.protocol_sites: list[tuple[ast.AST, _Scope, bool]] = []
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
        # attribute name ("*": computed) -> (value stored, its scope, the call storing it when a 3-argument
        # call may be `setattr(x, "name", value)`: it counts when that resolves to a setattr)
        self.attr_stores: dict[str, list[tuple[ast.expr, _Scope, ast.expr | None]]] = {}
        # values put into a container after it was made (`xs.append(v)`, `d[k] = v`, `q.put(v)`), by the
        # receiver's name (a variable or an attribute): flow- and scope-insensitive, like attr_stores
        self.item_stores: dict[str, list[tuple[ast.expr, _Scope]]] = {}
        # what `raise` statements of this file raise (an `except ... as e` may catch any of them)
        self.raised: list[tuple[ast.expr, _Scope]] = []
        # what `.send(v)` / `.asend(v)` calls of this file pass (the value of any `yield` expression here:
        # flow-, scope- and receiver-insensitive, like item_stores)
        self.sent: list[tuple[ast.expr, _Scope]] = []
        # self.sent with the calls of bound sends stored first, and the sizes it was computed at
        self._sent_memo: tuple[tuple[int, int], list[tuple[ast.expr, _Scope]]] | None = None
        # every send/throw of the file, direct or through its bound method handed on (sends.py), and the
        # number of candidates it was computed at; None while it is being computed
        self._send_sites_memo: tuple[int, list[SendSite]] | None = None
        self._send_sites_busy = False
        # `C[x]` loads: an own class's `__class_getitem__(x)` runs (linked as own calls by the analyser)
        self.subscript_loads: list[tuple[ast.Subscript, _Scope, bool]] = []
        # a function installed as a method: (the class: its dotted name for a class-body assignment, else the
        # expression the attribute is set on), the method's name, the value, the scope it is evaluated in
        self.installs: list[tuple[str | ast.expr, str, ast.expr, _Scope]] = []
        self._setattr_installs: dict[int, ast.expr] = {}  # the value of `f(a, "name", v)` -> f (setattr?)
        self._method_contexts_memo: dict[str, list[tuple[str, str, tuple[int, ...]]]] = {}
        # Model code (a module of the contribution's own packages, or one that cannot be placed: fail
        # closed): its parameters named or annotated like the engine's objects are the engine's.
        self.model_code = module is None or self.is_own(module)
        self._engine_params: dict[tuple[str, str], _Ref | None] = {}
        self.engine_param_why: dict[str, str] = {}  # parameter name -> why it is the engine's
        self._kept: list[ast.AST] = []  # parsed string annotations (memo keys are node ids: keep them alive)
        self._dunders: dict[tuple[str, tuple[str, ...]], _Ref | None] = {}  # (class, dunders) -> result
        self._applying: set[str] = set()  # callbacks being judged by `engine_instance_class` (a cycle guard)
        self._entered_nodes: dict[int, ast.expr] = {}  # a context manager's node -> what entering it gives

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

    def bind_all(self, order: bool = True) -> None:
        """One pass over the tree: bind every name in its scope (Python's rules: functions, lambdas,
        classes and comprehensions have their own) and collect the nodes the check pass judges, with
        the scope they run in and whether they run when the module is imported. `order`: also which
        binding reaches each use inside functions (without it every binding does: coarser, never laxer)."""
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
        if order:
            self._order_functions()

    def _order_functions(self) -> None:
        """Which binding reaches each use of a function's own names (statement order; flow.py)."""
        for fns in self.functions.values():
            for fn in fns:
                if isinstance(fn.node, ast.Lambda):
                    continue
                scope = fn.scope
                tracked = {n for n in scope.bindings if n not in scope.globals_ and n not in scope.nonlocals}
                a = fn.node.args
                params = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                          if x is not None}
                got = reaching(fn.node, tracked, params)
                self.flow_uses.update(got.uses)
                self.flow_sites[id(scope)] = got.sites

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
            if value is not None and scope.kind == "class":
                self.installs.append((scope.name, target.id, value, scope))  # a method of the class
                # a class attribute: `C.name` and `instance.name` read it
                self.attr_stores.setdefault(target.id, []).append((value, scope, None))
            if value is not None:
                self._bind_name(scope, target.id, _Alias(value, scope), target)
            elif element_of is not None:
                self._bind_name(scope, target.id, _Elem(element_of, scope), target)
            else:
                self._bind_name(scope, target.id, _LOCAL, target)
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
            if isinstance(target, ast.Attribute) and value is not None:
                self.installs.append((target.value, target.attr, value, scope))
            if isinstance(target, ast.Attribute) and (value is not None or element_of is not None):
                stored = value if value is not None else self._element_node(element_of)
                if stored is not None:
                    self.attr_stores.setdefault(target.attr, []).append((stored, scope, None))
            self._push([target], scope, import_time)

    def _element_node(self, container: ast.expr | None) -> ast.expr | None:
        """A node that resolves to an element of `container` (`container[0]`), kept alive."""
        if container is None:
            return None
        node = ast.Subscript(value=container, slice=ast.Constant(0), ctx=ast.Load())
        self._kept.append(node)
        return node

    def _homes(self, scope: _Scope, name: str) -> list[_Scope]:
        """The scopes a binding of `name` made in `scope` lands in: the module for a `global` name; for a
        `nonlocal` one every enclosing function scope (which one Python picks depends on bindings the
        pass may not have seen yet: all of them, fail closed)."""
        if name in scope.globals_:
            return [self.module_scope]
        if name in scope.nonlocals:
            outer = [s for s in self._enclosing(scope) if s.kind == "function"]
            return outer or [scope]
        return [scope]

    def _enclosing(self, scope: _Scope) -> list[_Scope]:
        out: list[_Scope] = []
        s = scope.parent
        while s is not None:
            out.append(s)
            s = s.parent
        return out

    def _bind_name(self, scope: _Scope, name: str, binding: _Binding, site: ast.AST | None) -> None:
        """Bind `name` in the scope it belongs to; the binding's site counts only in its own scope."""
        for home in self._homes(scope, name):
            home.bind(name, binding, id(site) if site is not None and home is scope else None)
            if home.kind == "class" and name not in home.noted:
                # every binding of a class body is a class attribute (an assignment, a `for` or `with`
                # target, an `import`, a walrus, a match capture): `K.name` is what the name is there
                home.noted.add(name)
                ref = ast.Name(id=name, ctx=ast.Load())
                self._kept.append(ref)
                self.attr_stores.setdefault(name, []).append((ref, home, None))

    def _bind_loop_target(self, target: ast.expr, iterable: ast.expr, scope: _Scope,
                          import_time: bool) -> None:
        """`for m in (a, b)` binds m to each element (so `m.x = 1` is judged for a and b)."""
        if isinstance(target, ast.Name) and isinstance(iterable, ast.Tuple | ast.List | ast.Set) and not any(
                isinstance(e, ast.Starred) for e in iterable.elts):
            for elt in iterable.elts:
                self._bind_name(scope, target.id, _Alias(elt, scope), target)
            if not iterable.elts:
                self._bind_name(scope, target.id, _LOCAL, target)
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
            self._names_staticmethod(d, outer) for d in getattr(node, "decorator_list", [])) and \
            getattr(node, "name", None) not in outer.statics
        names: list[str] = []
        for i, a in enumerate(positional):
            if i == 0 and is_method:
                scope.bind(a.arg, _LOCAL, ENTRY)
                continue
            names.append(a.arg)
            scope.bind(a.arg, _Param(key, a.arg), ENTRY)
        for a in args.kwonlyargs:
            scope.bind(a.arg, _Param(key, a.arg), ENTRY)
        # a caller that omits an argument gets the default, evaluated in the enclosing scope
        for a, d in [*zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True),
                     *zip(args.kwonlyargs, args.kw_defaults, strict=True)]:
            if d is not None and not isinstance(d, ast.Constant):
                scope.bind(a.arg, _Alias(d, outer), ENTRY)
        if args.vararg:
            scope.bind(args.vararg.arg, _Param(key, "*"), ENTRY)
        if args.kwarg:
            scope.bind(args.kwarg.arg, _Param(key, "**"), ENTRY)
        self.functions.setdefault(key, []).append(_Function(node, scope, tuple(names),
                                                            frozenset(a.arg for a in args.kwonlyargs), key))
        if outer.kind == "class":
            self.method_keys.add(key)

    def _names_staticmethod(self, d: ast.expr, scope: _Scope, depth: int = 0) -> bool:
        """Whether a decorator is `staticmethod`, `builtins.staticmethod` or a name bound to either (read
        from the bindings made so far: the decorator is evaluated where the def is)."""
        if isinstance(d, ast.Name) and d.id == "staticmethod":
            return True
        if isinstance(d, ast.Attribute) and d.attr == "staticmethod" and isinstance(d.value, ast.Name) and \
                d.value.id == "builtins":
            return True
        if isinstance(d, ast.Name) and depth < 8:
            return any(isinstance(b, _Alias) and self._names_staticmethod(b.value, b.scope, depth + 1)
                       for b in self._lookup(d.id, scope) or [])
        return False

    def _b_function(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        if not isinstance(node, ast.Lambda):
            self._bind_name(scope, node.name, _Own(f"{self.module or '<file>'}.{node.name}"), node)
            if node.decorator_list:
                self.candidates.append((node, scope, import_time))
                self._bind_decorated(node, scope, import_time)
        child = _Scope("function", scope)
        self.scopes[node] = child
        self._bind_args(node, child, scope, self._function_key(node, scope))
        body = node.body if isinstance(node.body, list) else [node.body]
        self._push(body, child, False)
        self._push([*getattr(node, "decorator_list", []), *node.args.defaults, *node.args.kw_defaults,
                    *_annotations(node)], scope, import_time)

    def _bind_decorated(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef,
                        scope: _Scope, import_time: bool) -> None:
        """A decorated def or class binds its name to what the decorators return (`@swap` returning an
        engine class makes the name that class): also bound to `d1(d2(<the def>))`, kept alive. Each
        decorator is a call made where the def is (`@sys.path.append` appends the function): judged as one,
        at the decorator's line."""
        value: ast.expr = ast.Constant(None)  # the def itself: own, nothing foreign
        for d in reversed(node.decorator_list):
            value = ast.copy_location(ast.Call(func=d, args=[value], keywords=[]), d)
            self.candidates.append((value, scope, import_time))
        self._kept.append(value)
        self._bind_name(scope, node.name, _Alias(value, scope), node)

    def _b_class(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.ClassDef)
        self._bind_name(scope, node.name, _Own(f"{self.module or '<file>'}.{node.name}"), node)
        if node.decorator_list:
            self.candidates.append((node, scope, import_time))
            self._bind_decorated(node, scope, import_time)
        child = _Scope("class", scope, name=f"{self.module or '<file>'}.{node.name}")
        child.statics = self._rebound_static(node, scope)
        self.scopes[node] = child
        self.classes.setdefault(child.name, []).append((node, scope))
        self._push(node.body, child, import_time)
        self._push([*node.decorator_list, *node.bases, *(k.value for k in node.keywords)], scope, import_time)

    def _rebound_static(self, node: ast.ClassDef, outer: _Scope) -> set[str]:
        """The names a class body rebinds to `staticmethod(name)` (`process = staticmethod(process)`):
        the def of that name gets no `self`, the engine's first argument lands on its first parameter."""
        out: set[str] = set()
        for stmt in node.body:
            value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign) else None
            targets = stmt.targets if isinstance(stmt, ast.Assign) else \
                [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
            if not isinstance(value, ast.Call) or len(value.args) != 1 or value.keywords or \
                    not isinstance(value.args[0], ast.Name) or \
                    not self._names_staticmethod(value.func, outer):
                continue
            out |= {t.id for t in targets if isinstance(t, ast.Name) and t.id == value.args[0].id}
        return out

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
                self._bind_name(scope, alias.asname, _Import(_canonical_module(alias.name)), alias)
                self.module_imports.add(alias.name)
            else:
                top = alias.name.split(".")[0]
                self._bind_name(scope, top, _Import(_canonical_module(top)), alias)
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
                self._bind_name(scope, name, _Own(f"<relative>.{alias.name}"), alias)
            else:
                self.facts.imports.add(f"{base}.{alias.name}")
                self._bind_name(scope, name, _Import(f"{base}.{alias.name}"), alias)

    def _b_assign(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                self._bind_target(t, scope, node.value, import_time)
                if isinstance(t, ast.Subscript) and scope.kind == "class" and isinstance(t.value, ast.Call) \
                        and isinstance(t.value.func, ast.Name) and t.value.func.id in ("locals", "vars") \
                        and not t.value.args:  # `locals()["forward"] = f` in a class body
                    self.installs.append((scope.name, _dotted_literal(t.slice) or "*", node.value, scope))
                if isinstance(t, ast.Subscript):
                    self._note_item_store(t.value, [node.value], scope)
                if isinstance(t, ast.Subscript) and _is_namespace(t.value):
                    # `x.__dict__["name"] = v`, `vars(x)["name"] = v`: x.name holds v
                    self.attr_stores.setdefault(_dotted_literal(t.slice) or "*", []).append(
                        (node.value, scope, None))
            self._push([node.value], scope, import_time)
        elif isinstance(node, ast.AnnAssign):
            if scope.kind in ("module", "class"):
                # a module's or class body's annotation is evaluated there (and by get_type_hints, even
                # under `from __future__ import annotations`): what it calls is judged
                self._push([node.annotation], scope, import_time)
            if node.value is not None:
                self._bind_target(node.target, scope, node.value, import_time)
                self._push([node.value], scope, import_time)
            elif not isinstance(node.target, ast.Name):
                self._push([node.target], scope, import_time)
        elif isinstance(node, ast.AugAssign):
            self.protocol_sites.append((node, scope, import_time))
            if isinstance(node.target, ast.Name):
                self.candidates.append((node, scope, import_time))  # judged before the rebinding counts
                binding: _Binding = _LOCAL
                if isinstance(node.value, ast.List | ast.Tuple | ast.Set | ast.Dict | ast.ListComp |
                              ast.SetComp | ast.DictComp | ast.GeneratorExp):
                    # `c += [E]` (also through `global c`), `d |= {"k": E}`: c now holds what it held and
                    # the elements added
                    grown = ast.List(elts=[ast.Starred(value=ast.Name(id=node.target.id, ctx=ast.Load()),
                                                       ctx=ast.Load()),
                                           ast.Starred(value=node.value, ctx=ast.Load())], ctx=ast.Load())
                    binding = _Alias(ast.copy_location(grown, node), scope)
                self._bind_name(scope, node.target.id, binding, node.target)
            else:
                self._push([node.target], scope, import_time)
            self._push([node.value], scope, import_time)
        elif isinstance(node, ast.NamedExpr):
            home = scope
            while home.kind == "comprehension" and home.parent is not None:
                home = home.parent
            # bound in the enclosing scope; from a comprehension (lazy in a generator) at no known point
            self._bind_name(home, node.target.id, _Alias(node.value, scope),
                            node.target if home is scope else None)
            self._push([node.value], scope, import_time)

    def _b_for(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.For | ast.AsyncFor)
        self._bind_loop_target(node.target, node.iter, scope, import_time)
        self._push([node.iter, *node.body, *node.orelse], scope, import_time)

    def _b_with(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.With | ast.AsyncWith)
        self.protocol_sites.append((node, scope, import_time))
        for item in node.items:
            self.with_items.add(id(item.context_expr))
            if item.optional_vars is not None:
                self._bind_target(item.optional_vars, scope, self._entered(item.context_expr), import_time)
        self._push([*(i.context_expr for i in node.items), *node.body], scope, import_time)

    def _entered(self, cm: ast.expr) -> ast.expr:
        got = self._entered_nodes.get(id(cm))
        if got is None:
            got = self._entered_nodes[id(cm)] = self._entered_uncached(cm)
        return got

    def _entered_uncached(self, cm: ast.expr) -> ast.expr:
        """What `with cm as x` binds x to: `cm.__enter__()`, which the scan cannot see. The usual answers are
        cm itself (a lock, a file, a pool) or an argument of the call that made it (`closing(obj)`,
        `nullcontext(enter_result=obj)`), so x is judged as any of them (fail closed)."""
        enters = [ast.Call(func=ast.Attribute(value=cm, attr=name, ctx=ast.Load()), args=[], keywords=[])
                  for name in ("__enter__", "__aenter__")]  # an own class's enter method: what it returns
        if not isinstance(cm, ast.Call):
            parts = [cm, *enters]
        else:
            parts = [cm, *(a.value if isinstance(a, ast.Starred) else a for a in cm.args),
                     *(k.value for k in cm.keywords), *enters]
        anyof = ast.BoolOp(op=ast.Or(), values=parts)  # resolves to the first foreign one (or cm's own)
        self._kept.append(anyof)  # memo keys are node ids: keep it alive
        return anyof

    def _b_except(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.ExceptHandler)
        if node.name:
            self._bind_name(scope, node.name, _RAISED, node)
        self._push([node.type, *node.body], scope, import_time)

    def _b_global(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        if isinstance(node, ast.Global):
            scope.globals_.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            scope.nonlocals.update(node.names)

    def _b_match(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        name = getattr(node, "name", None) or getattr(node, "rest", None)
        if isinstance(name, str):
            self._bind_name(scope, name, _LOCAL, node)
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
                value = _Alias(node.subject, scope) if whole else _Elem(node.subject, scope)
                self._bind_name(scope, name, value, sub)
            for sub in ast.walk(case.pattern):
                if not isinstance(sub, ast.MatchClass):
                    continue
                # `case Cls(forward=fw)`: fw is the subject's attribute (the subject itself, or an element of
                # it for a nested class pattern)
                top = sub is case.pattern or (isinstance(case.pattern, ast.MatchAs) and
                                              sub is case.pattern.pattern)
                subject = node.subject if top else self._element_node(node.subject)
                for attr, kp in zip(sub.kwd_attrs, sub.kwd_patterns, strict=False):
                    if isinstance(kp, ast.MatchAs) and kp.pattern is None and kp.name and subject is not None:
                        held = ast.Attribute(value=subject, attr=attr, ctx=ast.Load())
                        self._kept.append(held)
                        self._bind_name(scope, kp.name, _Alias(held, scope), kp)
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
        elif isinstance(node, ast.Subscript):
            self.subscript_loads.append((node, scope, import_time))
        if isinstance(node, ast.Call) and len(node.args) == 3 and not node.keywords:
            attr = _dotted_literal(node.args[1])  # setattr(Cls, "name", fn): judged when resolved
            self.installs.append((node.args[0], attr or "*", node.args[2], scope))  # "*": a computed name
            self._setattr_installs[id(node.args[2])] = node.func
            self.attr_stores.setdefault(attr or "*", []).append((node.args[2], scope, node.func))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("update", "setdefault", "__setitem__") and \
                _is_namespace(node.func.value):
            self._note_namespace_stores(node, scope)
        if isinstance(node, ast.Call) and ((isinstance(node.func, ast.Attribute) and node.func.attr in (
                "send", "asend")) or self._computed_getattr(node.func, ("send", "asend"))):
            self.sent.extend((a.value if isinstance(a, ast.Starred) else a, scope) for a in node.args)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("throw", "athrow"):
            # `gen.throw(exc)` raises exc inside the generator: an `except ... as e` there may catch it
            self.raised.extend((a.value if isinstance(a, ast.Starred) else a, scope) for a in node.args)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in _FILLERS:
            self._note_item_store(node.func.value, [*node.args, *(k.value for k in node.keywords)], scope)
        if isinstance(node, ast.Call) and len(node.args) >= 2 and (
                (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and
                 node.func.value.id in ("heapq", "bisect") and
                 node.func.attr.startswith(("heap", "insort"))) or
                (isinstance(node.func, ast.Name) and node.func.id.startswith(("heappush", "insort")))):
            # `heapq.heappush(h, E)` / `bisect.insort(h, E)`: puts E into h (by the names as spelled)
            self._note_item_store(node.args[0], node.args[1:], scope)
        self._push_children(node, scope, import_time)

    def _sent_values(self) -> list[tuple[ast.expr, _Scope]]:
        """What `.send(v)` calls of this file pass, also through a bound `send` stored first (`s = gen.send;
        s(v)`, `self.s = gen.send; self.s(v)`: by the name it is stored under, flow- and
        scope-insensitive)."""
        size = (len(self.sent), len(self.candidates))  # still binding: recomputed when these grow
        if self._sent_memo is not None and self._sent_memo[0] == size:
            return self._sent_memo[1]
        stored: set[str] = set()
        for node in ast.walk(self.tree):
            value = getattr(node, "value", None) \
                if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr) else None
            if not (isinstance(value, ast.Attribute) and value.attr in ("send", "asend")) and not (
                    isinstance(value, ast.expr) and self._computed_getattr(value, ("send", "asend"))):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for t in targets:
                if isinstance(t, ast.Name):
                    stored.add(t.id)
                elif isinstance(t, ast.Attribute):
                    stored.add(f".{t.attr}")
        out = list(self.sent)
        for node, scope, _ in self.candidates:
            if isinstance(node, ast.Call) and (
                    (isinstance(node.func, ast.Name) and node.func.id in stored) or
                    (isinstance(node.func, ast.Attribute) and f".{node.func.attr}" in stored)):
                out.extend((a.value if isinstance(a, ast.Starred) else a, scope) for a in node.args)
        self._sent_memo = (size, out)
        return out

    def send_sites(self) -> list[SendSite]:
        """The file's sends and throws (sends.py), memoised while the candidates stay the same."""
        if self._send_sites_memo is not None and self._send_sites_memo[0] == len(self.candidates):
            return self._send_sites_memo[1]
        if self._send_sites_busy:
            return []
        self._send_sites_busy = True
        try:
            sites = send_sites(self)
        finally:
            self._send_sites_busy = False
        self._send_sites_memo = (len(self.candidates), sites)
        return sites

    def _handed_on_sends(self, throw: bool) -> _Ref | None:
        """What a bound `send` (`throw`) handed on as a value sends, file-wide: a foreign object, a foreign
        object standing for what cannot be followed (fail closed), or None."""
        for site in self.send_sites():
            if site.throw != throw or site.direct:
                continue
            if site.sent is None:
                verb = "throw" if throw else "send"
                line = getattr(site.node, "lineno", "?")
                return _Ref("import", f"<what a generator's bound `{verb}` handed on at line {line} is "
                                      "given: the scan cannot follow it>")
            if site.sent:
                return site.sent[0]
        return None

    @staticmethod
    def _computed_getattr(func: ast.expr, names: tuple[str, ...]) -> bool:
        """`getattr(x, name)` (as written) with one of `names` or a name computed at run time."""
        if not (isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "getattr"
                and len(func.args) >= 2):
            return False
        name = _dotted_literal(func.args[1])
        return name is None or name in names

    def _note_item_store(self, receiver: ast.expr, values: Sequence[ast.expr], scope: _Scope) -> None:
        """`xs.append(v)`, `d[k] = v`, `self.q.put(v)`: the container named `xs` / `.q` now holds v."""
        name = receiver.id if isinstance(receiver, ast.Name) else \
            f".{receiver.attr}" if isinstance(receiver, ast.Attribute) else None
        if name is None:
            return
        for v in values:
            value = v.value if isinstance(v, ast.Starred) else v
            self.item_stores.setdefault(name, []).append((value, scope))

    def _filled(self, name: str) -> tuple[_Ref, ...]:
        """The foreign objects some fill of this file put into a container named `name` (a parameter put
        in is not followed: `self.data[k] = item` then `self.data[k].append(x)` would read as a write
        through `item`)."""
        held: list[_Ref] = []
        for value, scope in self.item_stores.get(name, []):
            r = self.resolve(value, scope)
            t = self.tainted(r)
            if t is not None:
                held.append(t)
            elif r is not None and r.origin == "own" and r.qualname in self.functions:
                held.append(r)  # an own function stored to be called later (`cbs.append(writer)`)
        return tuple(held)

    def _made_container(self, value: ast.expr, scope: _Scope) -> bool:
        """Whether `value` makes a container (a display, a comprehension, list()/dict()/deque()/Queue()/
        ContextVar()...): only such a container holds what is put into it later."""
        if isinstance(value, ast.List | ast.Dict | ast.Set | ast.ListComp | ast.DictComp | ast.SetComp):
            return True
        if isinstance(value, ast.Call):
            maker = self.resolve(value.func, scope)
            return maker is not None and maker.qualname in _CONTAINER_MAKERS
        return False

    def _raised_ref(self) -> _Ref:
        """What `except ... as e` binds: any exception this file raises, with the objects it carries (its
        arguments), or one the contribution's other modules it imports raise; one carrying an engine
        object is that object (fail closed)."""
        own = self.own_raised_ref()
        if own is not None:
            return own
        if self.cross is not None:
            for name in sorted(self.facts.imports):
                if self.is_own(name):
                    t = self.tainted(self.cross.raised(name, self.module))
                    if t is not None:
                        return t
        return self._handed_on_sends(True) or _LOCAL_REF

    def own_raised_ref(self) -> _Ref | None:
        """The foreign object an exception this file raises carries, or None."""
        for exc, scope in self.raised:
            parts = [a.value if isinstance(a, ast.Starred) else a for a in exc.args] + \
                [k.value for k in exc.keywords] if isinstance(exc, ast.Call) else [exc]
            while parts:
                part = parts.pop()
                t = self.tainted(self.resolve(part, scope))
                if t is not None:
                    return t
                if isinstance(part, ast.List | ast.Tuple | ast.Set):
                    parts += part.elts  # an ExceptionGroup's exceptions (`except*` hands them out)
                elif isinstance(part, ast.Call) and self._makes_exception(part, scope):
                    parts += [a.value if isinstance(a, ast.Starred) else a for a in part.args]
                    parts += [k.value for k in part.keywords]
        # a generator's (or coroutine's) `return v` raises StopIteration(v) when it ends: any of this file's
        # may be the one caught (fail closed)
        for fns in self.functions.values():
            for fn in fns:
                for value in fn.stop_values():
                    t = self.tainted(self.resolve(value, fn.scope))
                    if t is not None:
                        return t
        return None

    def _makes_exception(self, call: ast.Call, scope: _Scope) -> bool:
        """`ValueError(x)`, an own exception class: an exception nested in a raised one (a group's member,
        a cause) carries its arguments too."""
        r = self.resolve(call.func, scope)
        if r is None:
            return False
        if r.origin == "own":
            return r.qualname in self.classes
        return r.qualname.startswith("builtins.") and r.qualname.endswith(
            ("Error", "Exception", "Group", "Warning", "Exit", "Interrupt", "Iteration"))

    def _b_raise(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        assert isinstance(node, ast.Raise)
        for exc in (node.exc, node.cause):
            if exc is not None:
                self.raised.append((exc, scope))
        self._push_children(node, scope, import_time)

    def _note_namespace_stores(self, node: ast.Call, scope: _Scope) -> None:
        """`x.__dict__.update(name=v)`, `vars(x).update({"name": v})`, `.setdefault("name", v)`,
        `.__setitem__("name", v)`: x.name holds v (a name that is not a literal: every attribute may)."""
        assert isinstance(node.func, ast.Attribute)
        pairs: list[tuple[str, ast.expr]] = []
        if node.func.attr == "update":
            pairs += [(k.arg or "*", k.value) for k in node.keywords]
            for a in node.args:
                if isinstance(a, ast.Dict):
                    pairs += [(_dotted_literal(k) or "*", v) for k, v in zip(a.keys, a.values, strict=True)]
                else:
                    pairs.append(("*", a.value if isinstance(a, ast.Starred) else a))
        elif len(node.args) >= 2:
            pairs.append((_dotted_literal(node.args[0]) or "*", node.args[1]))
        for name, value in pairs:
            self.attr_stores.setdefault(name, []).append((value, scope, None))

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
            ast.Match: self._b_match_statement, ast.Raise: self._b_raise,
            ast.MatchStar: self._b_match, ast.MatchMapping: self._b_match, ast.If: self._b_if,
            ast.Call: self._b_candidate, ast.Attribute: self._b_candidate, ast.Subscript: self._b_candidate,
            ast.Compare: self._b_operator, ast.BinOp: self._b_operator,
        }

    def _b_operator(self, node: ast.AST, scope: _Scope, import_time: bool) -> None:
        self.protocol_sites.append((node, scope, import_time))
        self._push_children(node, scope, import_time)

    def constant_strings(self, node: ast.expr | None, scope: _Scope, depth: int = 0) -> frozenset[str] | None:
        """The strings `node` provably evaluates to (a set: `'r' if c else 'rb'` is either), folding literal
        concatenation (`'kimi' + '_k3'`), f-strings of such parts, conditionals (both branches) and names
        every binding of which is such an expression; None when any part is not provably constant."""
        if node is None or depth > 8:
            return None
        if isinstance(node, ast.Constant):
            return frozenset({node.value}) if isinstance(node.value, str) else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self.constant_strings(node.left, scope, depth + 1)
            right = self.constant_strings(node.right, scope, depth + 1) if left is not None else None
            if left is None or right is None or len(left) * len(right) > 16:
                return None
            return frozenset(a + b for a in left for b in right)
        if isinstance(node, ast.IfExp):
            body = self.constant_strings(node.body, scope, depth + 1)
            orelse = self.constant_strings(node.orelse, scope, depth + 1) if body is not None else None
            return body | orelse if body is not None and orelse is not None else None
        if isinstance(node, ast.JoinedStr):
            got: frozenset[str] = frozenset({""})
            for part in node.values:
                if isinstance(part, ast.FormattedValue) and (part.conversion != -1 or part.format_spec):
                    return None
                piece = self.constant_strings(part.value if isinstance(part, ast.FormattedValue) else part,
                                              scope, depth + 1)
                if piece is None or len(got) * len(piece) > 16:
                    return None
                got = frozenset(a + b for a in got for b in piece)
            return got
        if isinstance(node, ast.Name):
            bindings = self._lookup(node.id, scope)
            if not bindings or not all(isinstance(b, _Alias) for b in bindings):
                return None
            found: set[str] = set()
            for b in bindings:
                assert isinstance(b, _Alias)
                one = self.constant_strings(b.value, b.scope, depth + 1)
                if one is None:
                    return None
                found |= one
            return frozenset(found)
        return None

    def attribute_names(self, node: ast.expr | None, scope: _Scope, depth: int = 0) -> frozenset[str] | None:
        """The names a `setattr(obj, name, v)` may set: `constant_strings` of `name`, where a binding to None
        sets nothing (setattr raises on it) and a loop variable over a tuple of literal strings (or a name
        bound only to one: `for a in _ATTRS`) is each of them; None when not provably constant."""
        if node is None or depth > 8:
            return None
        if isinstance(node, ast.Constant) and node.value is None:
            return frozenset()
        if not isinstance(node, ast.Name):
            return self.constant_strings(node, scope, depth)
        bindings = self._lookup(node.id, scope)
        if not bindings:
            return None
        found: set[str] = set()
        for b in bindings:
            if isinstance(b, _Alias):
                one = self.attribute_names(b.value, b.scope, depth + 1)
            elif isinstance(b, _Elem):
                one = self._literal_tuple(b.value, b.scope, depth + 1)
            else:
                return None
            if one is None:
                return None
            found |= one
        return frozenset(found)

    def _literal_tuple(self, node: ast.expr, scope: _Scope, depth: int) -> frozenset[str] | None:
        """The strings of a tuple of literal strings, or of a name every binding of which is one (a tuple
        cannot grow: a list could be appended to)."""
        if depth > 8:
            return None
        if isinstance(node, ast.Name):
            bindings = self._lookup(node.id, scope)
            if not bindings or not all(isinstance(b, _Alias) for b in bindings):
                return None
            found: set[str] = set()
            for b in bindings:
                assert isinstance(b, _Alias)
                one = self._literal_tuple(b.value, b.scope, depth + 1)
                if one is None:
                    return None
                found |= one
            return frozenset(found)
        if not isinstance(node, ast.Tuple) or any(isinstance(e, ast.Starred) for e in node.elts):
            return None
        out: set[str] = set()
        for e in node.elts:
            one = self.constant_strings(e, scope, depth + 1)
            if one is None:
                return None
            out |= one
        return frozenset(out)

    def constant_string(self, node: ast.expr | None, scope: _Scope) -> str | None:
        """The one string `node` provably evaluates to (see `constant_strings`), else None."""
        got = self.constant_strings(node, scope)
        return next(iter(got)) if got is not None and len(got) == 1 else None

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
            return self._memo[key][1]
        if key in self._resolving:
            return None  # a cycle (x = x.y): no further information
        self._resolving.add(key)
        try:
            ref = self._cross_ref(self._resolve(node, scope))
            if ref is not None and ref.origin == "import" and not ref.elements and \
                    not self.is_own(ref.qualname):
                carried = carried_module(ref.qualname)  # `inspect.os.putenv` is `os.putenv`
                if carried != ref.qualname:
                    ref = _Ref("import", carried)
        finally:
            self._resolving.discard(key)
        self._memo[key] = (node, ref)
        return ref

    def _cross_ref(self, ref: _Ref | None) -> _Ref | None:
        """An own dotted name of another of the contribution's modules is what that module binds it to:
        the engine's object when it re-exports one (a global, a class attribute holding it)."""
        if self.cross is None or ref is None or ref.origin != "import" or ref.elements or \
                not self.is_own(ref.qualname):
            return ref
        got = self.cross.member(ref.qualname, self.module)
        if got is None:
            return ref
        if got.origin == "import":
            self.reexported.setdefault(got.qualname, ref.qualname)  # named in the report of a write
        return got

    def _resolve_name(self, name: str, scope: _Scope, reach: frozenset[int] | None = None) -> _Ref | None:
        # One answer per (scope, name, reaching sites); memoised, which also keeps a name with many
        # assignments (s = s.a; s = s.b; ...) linear instead of exponential.
        key = (id(scope), name, reach)
        if key in self._name_memo:
            return self._name_memo[key]
        if key in self._resolving_names:
            return None
        self._resolving_names.add(key)
        try:
            ref = self._resolve_name_uncached(name, scope, reach)
        finally:
            self._resolving_names.discard(key)
        self._name_memo[key] = ref
        return ref

    def _reaching(self, name: str, scope: _Scope, reach: frozenset[int] | None) -> list[_Binding] | None:
        """The bindings of `name` that reach a use in `scope`: those whose site the flow pass says reaches
        it, plus any it does not know (made from elsewhere, or a site it did not see). All of them when the
        use or the scope was not ordered, or when nothing reaches (fail closed)."""
        bindings = scope.bindings.get(name)
        known = self.flow_sites.get(id(scope))
        if reach is None or bindings is None or known is None or name in scope.globals_ or \
                name in scope.nonlocals:
            return None
        sites = scope.sites.get(name, [])
        kept = [b for b, site in zip(bindings, sites, strict=True)
                if site is None or site not in known or site in reach]
        return kept or None

    def _resolve_name_uncached(self, name: str, scope: _Scope,
                               reach: frozenset[int] | None = None) -> _Ref | None:
        if name == "__builtins__":
            return _Ref("import", "builtins")
        if name in ("__name__", "__package__", "__spec__"):
            return _LOCAL_REF
        bindings = self._reaching(name, scope, reach) or self._lookup(name, scope)
        if bindings is None:
            if name in _BUILTIN_NAMES:
                return _Ref("import", f"builtins.{name}")
            # a global no statement binds: what a store into a namespace of this file put under its name
            # (`globals()["E"] = v`, `setattr(sys.modules[__name__], "E", v)`, `globals().update(E=v)`);
            # by the name, whatever the namespace (fail closed)
            for value, sc, _ in [*self.attr_stores.get(name, []), *self.attr_stores.get("*", [])]:
                t = self.tainted(self.resolve(value, sc))
                if t is not None:
                    return t
            for star in self.star_imports:
                return _Ref("import", f"{star}.{name}")
            return None
        refs: list[_Ref] = []
        for b in bindings:
            if isinstance(b, _Import):
                refs.append(self._cross_ref(_Ref("import", b.qualname)) or _LOCAL_REF)
            elif isinstance(b, _Own):
                refs.append(_Ref("own", b.qualname))
            elif isinstance(b, _Alias):
                r = self.resolve(b.value, b.scope)
                refs.append(r if r is not None else _LOCAL_REF)
            elif isinstance(b, _Param):
                refs.append(self._engine_param(b) or _Ref("param", f"{b.function}{_SEP}{b.name}"))
            elif isinstance(b, _Elem):
                refs.append(self._element(self.resolve(b.value, b.scope)) or _LOCAL_REF)
            elif isinstance(b, _Raised):
                refs.append(self._raised_ref())
            else:
                refs.append(_LOCAL_REF)
        made = any(isinstance(b, _Alias) and self._made_container(b.value, b.scope) for b in bindings)
        filled = self._filled(name) if made else ()
        if filled and all(r.origin == "local" for r in refs):
            return _Ref("local", "<container>", filled)  # a local container some fill put engine objects in
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
        return next((r for r in refs if r.qualname.startswith((_INSTANCE, _OF_FOREIGN, _GENERATOR))),
                    _LOCAL_REF)

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
                base = next((b for c, _, _ in self._method_contexts(fn, outer)
                             for b in self._engine_bases_in_use(c)), None)
                if base is None and self.signatures is not None:  # an own base of another file
                    base = next((b for c, _, _ in self._method_contexts(fn, outer)
                                 for b in self._own_import_bases_in_use(c) if self.signatures(b, "*") != ()),
                                None)
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
            why = self._engine_position(fn, param.name, outer)
            if why is not None:
                self.engine_param_why.setdefault(param.name, why)
                return _Ref("import", f"{ENGINE_PARAM}.{param.name}")
            if node.annotation is not None:
                hit = self._engine_annotation(node.annotation, outer)
                if hit is not None:
                    self.engine_param_why.setdefault(param.name, f"annotated with the engine's `{hit}`")
                    return _Ref("import", f"{ENGINE_PARAM}.{param.name}")
        return None

    def _engine_position(self, fn: _Function, name: str, outer: _Scope) -> str | None:
        """Why a positional parameter of a method overriding an engine class's method is the engine's
        object, whatever it is called: the engine's own signature has a parameter named like its objects
        in that position (`forward(self, layer, q, k, v, kv_cache, attn_metadata)`), or the engine's
        signature cannot be read (fail closed). None otherwise. The method is a def in the class body, a
        function or lambda installed in the class (`forward = _fwd`, `Cls.forward = _fwd`, `setattr`), or
        a mixin's method when an own class puts the mixin before an engine base; a staticmethod gets the
        engine's arguments with no `self` in front."""
        if self.signatures is None or name not in fn.positional:
            return None
        every = [a.arg for a in [*fn.node.args.posonlyargs, *fn.node.args.args]]
        for cls, method, shifts in self._method_contexts(fn, outer):
            if method == "*" or not shifts:  # installed under a computed name, or wrapped: fail closed
                base = next(iter(self._engine_bases_in_use(cls)), None) or next(
                    (b for b in self._own_import_bases_in_use(cls) if self.signatures(b, "*") != ()), None)
                if base is not None and (method == "*" or self.signatures(base, method) != ()):
                    how = "under a computed name" if method == "*" else f"as `{method}` through a wrapper"
                    return (f"a parameter of a function installed {how} in a class deriving from the "
                            f"engine's `{base}`: which of the engine's objects it gets cannot be told")
                continue
            # an own base of another file is read from the tree being judged (range mode) or from the
            # contribution's own files (contribution mode), and followed to the engine classes it derives
            # from; one that cannot be read (or found) may derive from any engine class: fail closed
            for base in self._own_import_bases_in_use(cls):
                params = self.signatures(base, method)
                if params is None:
                    return (f"a parameter of a method of a class deriving from `{base}` (an own base of "
                            "another file), which the scan cannot read or follow to its bases (so it may "
                            "derive from an engine class and get any of the engine's objects)")
                hit = self._position_hit(params, every.index(name), shifts)
                if hit is not None:
                    return (f"in the position of `{hit}` in `{base.rsplit('.', 1)[-1]}.{method}` (an own "
                            "base of another file, deriving from the engine's class), which the engine fills")
            for base in self._engine_bases_in_use(cls):
                params = self.signatures(base, method)
                if params is None:
                    return (f"a parameter of a method of a class deriving from the engine's `{base}`, whose "
                            f"signature the scan cannot read (so it may be any of the engine's objects)")
                hit = self._position_hit(params, every.index(name), shifts)
                if hit is not None:
                    return (f"in the position of `{hit}` in the engine's "
                            f"`{base.rsplit('.', 1)[-1]}.{method}`, which the engine fills")
        return None

    def _position_hit(self, params: tuple[str, ...], position: int, shifts: tuple[int, ...]) -> str | None:
        """The engine-object name the engine's signature has where a parameter at `position` lands (for
        each way the call may fill it); a position the engine's definitions name differently answers
        `a|b`: any of them."""
        for shift in shifts:
            index = position - shift
            if 0 <= index < len(params):
                hit = next((n for n in params[index].split("|")
                            if _matches(n, self.settings.engine_parameter_names)), None)
                if hit is not None:
                    return hit
        return None

    def _own_import_bases_in_use(self, cls: str) -> list[str]:
        """`_own_import_bases` of `cls` and of every own class deriving from it (a mixin before them)."""
        out = self._own_import_bases(cls)
        for other in self.classes:
            if other != cls and cls in self._own_bases(other):
                out += [b for b in self._own_import_bases(other) if b not in out]
        return out

    def _own_import_bases(self, cls: str) -> list[str]:
        """The own classes of other files an own class derives from (through this file's classes)."""
        out: list[str] = []
        for c in self._own_bases(cls):
            for node, outer in self.classes.get(c, []):
                for b in node.bases:
                    r = self.resolve(b.value if isinstance(b, ast.Subscript) else b, outer)
                    if r is not None and r.origin == "import" and self.is_own(r.qualname) and \
                            r.qualname not in out:
                        out.append(r.qualname)
        return out

    def _method_contexts(self, fn: _Function, outer: _Scope) -> list[tuple[str, str, tuple[int, ...]]]:
        """The (own class, method name, how many leading parameters the call does not fill) `fn` runs as:
        1 for an instance or class method (`self`/`cls`), 0 for a staticmethod, both when a decorator the
        scan cannot judge may make it either (fail closed)."""
        if fn.key in self._method_contexts_memo:
            return self._method_contexts_memo[fn.key]
        self._method_contexts_memo[fn.key] = []  # a cycle: nothing more
        out: list[tuple[str, str, tuple[int, ...]]] = []
        if outer.kind == "class" and not isinstance(fn.node, ast.Lambda):
            first = (0,) if fn.node.name in outer.statics else self._shifts(fn.node.decorator_list, outer)
            out.append((outer.name, fn.node.name, first))
        for where, attr, value, scope in self.installs:
            if not isinstance(value, ast.Name | ast.Attribute | ast.Lambda | ast.Call):
                continue  # a constant, a container, ...: not a function
            if id(value) in self._setattr_installs:
                setter = self.resolve(self._setattr_installs[id(value)], scope)
                if setter is None or setter.qualname != "builtins.setattr":
                    continue
            inner: ast.expr = value
            shifts: tuple[int, ...] = (1,)
            if isinstance(value, ast.Call) and len(value.args) == 1:
                wrap = self.resolve(value.func, scope)
                if wrap is not None and wrap.qualname in ("builtins.staticmethod", "builtins.classmethod"):
                    inner, shifts = value.args[0], (0,) if wrap.qualname == "builtins.staticmethod" else (1,)
            if self._function_key_of(inner, scope) != fn.key:
                # wrapped in some other call (`partialmethod(f, x)`): which positions the engine's call
                # fills is unknown, `()` (fail closed)
                wrapped = isinstance(value, ast.Call) and any(
                    self._function_key_of(a, scope) == fn.key for a in
                    [*(x.value if isinstance(x, ast.Starred) else x for x in value.args),
                     *(k.value for k in value.keywords)])
                if not wrapped:
                    continue
                shifts = ()
            if isinstance(where, str):
                cls: str | None = where
            else:
                r = self.resolve(where, scope)
                own = r is not None and r.origin == "own" and r.qualname in self.classes
                cls = r.qualname if own and r is not None else None
            if cls is not None:
                out.append((cls, attr, shifts))
        self._method_contexts_memo[fn.key] = out
        return out

    def _function_key_of(self, value: ast.expr, scope: _Scope) -> str | None:
        """The key of the own function an expression is (a def of this class body by name, a module
        function, a lambda), or None."""
        if isinstance(value, ast.Name) and scope.kind == "class" and \
                any(isinstance(b, _Own) for b in scope.bindings.get(value.id, [])) and \
                f"{scope.name}.{value.id}" in self.functions:
            return f"{scope.name}.{value.id}"
        r = self.resolve(value, scope)
        return r.qualname if r is not None and r.origin == "own" and r.qualname in self.functions else None

    def _shifts(self, decorators: Sequence[ast.expr], outer: _Scope) -> tuple[int, ...]:
        """How many leading parameters the call does not fill, for a def with these decorators."""
        out: set[int] = set()
        for d in decorators:
            if isinstance(d, ast.Name) and d.id == "staticmethod":
                return (0,)
            r = self.resolve(d.func if isinstance(d, ast.Call) else d, outer)
            if r is not None and r.qualname == "builtins.staticmethod":
                return (0,)
            if r is None or r.origin != "import":
                out.add(0)  # an own or unknown decorator may return a staticmethod
        return tuple(sorted(out | {1}))

    def _engine_bases_in_use(self, cls: str) -> list[str]:
        """The engine classes whose methods the methods of own class `cls` may override: its own engine
        bases and those of every own class deriving from it (a mixin before an engine base in the MRO)."""
        out = list(self._engine_bases(cls))
        for other in self.classes:
            if other != cls and cls in self._own_bases(other):
                out += [b for b in self._engine_bases(other) if b not in out]
        return out

    def _inherited_engine_attr(self, cls: str, attr: str) -> _Ref | None:
        """`Sub.forward` of an own class deriving from an engine class that no own class body on the way
        defines: the engine class's attribute (`Sub.forward.__code__ = ...` writes the engine's function)."""
        if attr in _CLASS_OWN_DUNDERS:
            return None
        bases = self._engine_bases(cls)
        if not bases:
            return None
        for c in self._own_bases(cls):
            for node, _ in self.classes.get(c, []):
                body = self.scopes.get(node)
                if body is None or attr in body.bindings:
                    return None  # defined by the own class (or unreadable: judged as its own)
        return _Ref("import", f"{bases[0]}.{attr}")

    def _engine_bases(self, cls: str) -> list[str]:
        """The engine classes (under `hidden_import_roots`) an own class derives from, through own classes."""
        roots = self.settings.hidden_import_roots
        out: list[str] = []
        for c in self._own_bases(cls):
            for node, outer in self.classes.get(c, []):
                for b in node.bases:
                    r = self.resolve(b.value if isinstance(b, ast.Subscript) else b, outer)
                    if self.foreign(r) and r is not None and r.qualname not in out and any(
                            r.qualname == x or r.qualname.startswith(x + ".") for x in roots):
                        out.append(r.qualname)
        return out

    def engine_instance_class(self, ref: _Ref | None) -> str | None:
        """The engine class (under `hidden_import_roots`) a parameter of model code is annotated with
        (`def f(layer: RowParallelLinear)`): the function is given an instance the engine owns, not one the
        model made, so a per-instance patch or hook on it changes the engine's behaviour. None otherwise."""
        if ref is None or ref.origin != "param" or not self.model_code:
            return None
        key, _, name = ref.qualname.rpartition(_SEP)
        roots = [f"{r}.*" for r in self.settings.hidden_import_roots]
        for fn in self.functions.get(key, []):
            args = fn.node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs,
                     *filter(None, (args.vararg, args.kwarg))]
            node = next((a for a in every if a.arg == name), None)  # (`*layers: L`: each element is one)
            if node is not None and node.annotation is not None:
                hit = self._engine_annotation(node.annotation, fn.scope.parent or self.module_scope,
                                              types=roots)
                if hit is not None:
                    return hit
            if fn.positional[:1] == (name,) and key not in self._applying:
                hit = self._applied_to_engine_instance(key)
                if hit is not None:
                    return hit
        return None

    def _applied_to_engine_instance(self, key: str) -> str | None:
        """The engine class whose instance's `.apply(f)` this file calls with the own function `key`: the
        engine's `nn.Module.apply` calls f with that instance and each of its submodules."""
        self._applying.add(key)
        try:
            for call, cscope, _ in self.candidates:
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and \
                        call.func.attr == "apply" and call.args:
                    f = self.resolve(call.args[0], cscope)
                    if f is not None and f.origin == "own" and f.qualname == key:
                        hit = self.engine_instance_of(call.func.value, cscope)
                        if hit is not None:
                            return hit
            return None
        finally:
            self._applying.discard(key)

    def engine_instance_of(self, obj: ast.expr, scope: _Scope, depth: int = 0) -> str | None:
        """The engine class an object of model code is declared to be an instance of, or None: an annotated
        parameter (`engine_instance_class`), and the other ways code says so (hostile review 22): a local
        annotation (`layer: L = x`), `isinstance(x, L)` anywhere in the name's scope (flow-insensitive: fail
        closed), `typing.cast(L, x)`, an own function annotated `-> L`, an attribute some store set to such
        an object (`self.l = layer`), and a loop over `modules()`/`named_modules()`/`children()` of one."""
        hit = self.engine_instance_class(self.resolve(obj, scope))
        if hit is not None or not self.model_code or depth > 3:
            return hit
        roots = [f"{r}.*" for r in self.settings.hidden_import_roots]
        if isinstance(obj, ast.Call):
            f = self.resolve(obj.func, scope)
            if f is not None and f.qualname in ("typing.cast", "typing_extensions.cast") and obj.args:
                return self._engine_annotation(obj.args[0], scope, types=roots)
            if f is not None and f.origin == "own":
                for fn in self.functions.get(f.qualname, []):
                    ret = getattr(fn.node, "returns", None)
                    got = self._engine_annotation(ret, fn.scope.parent or self.module_scope, types=roots) \
                        if ret is not None else None
                    if got is not None:
                        return got
            return None
        if isinstance(obj, ast.Attribute):
            for value, vscope, _ in self.attr_stores.get(obj.attr, []):
                got = self.engine_instance_of(value, vscope, depth + 1)
                if got is not None:
                    return got
            return None
        if isinstance(obj, ast.Subscript):  # an element of a container declared to hold engine instances
            return self.engine_instance_of(obj.value, scope, depth + 1)
        if not isinstance(obj, ast.Name):
            return None
        home = self._scope_node(obj.id, scope)
        if home is None:
            return None
        node, outer = home
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            got = self._dispatched_class(node, obj.id, outer, roots)
            if got is not None:
                return got
        for sub in ast.walk(node):
            if isinstance(sub, ast.Match):
                got = self._matched_class(sub, obj.id, outer, roots, subject_only=True)
                if got is not None:
                    return got
            if isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name) and \
                    sub.target.id == obj.id:
                got = self._engine_annotation(sub.annotation, outer, types=roots)
            elif isinstance(sub, ast.arg) and sub.arg == obj.id and sub.annotation is not None:
                got = self._engine_annotation(sub.annotation, outer, types=roots)  # `*layers: L`
            elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and \
                    sub.func.id == "isinstance" and len(sub.args) == 2 and \
                    isinstance(sub.args[0], ast.Name) and sub.args[0].id == obj.id:
                got = self._engine_annotation(sub.args[1], outer, types=roots)
            elif isinstance(sub, ast.For | ast.AsyncFor | ast.comprehension) and \
                    any(isinstance(t, ast.Name) and t.id == obj.id for t in ast.walk(sub.target)) and \
                    isinstance(sub.iter, ast.Call) and isinstance(sub.iter.func, ast.Attribute) and \
                    sub.iter.func.attr in ("modules", "named_modules", "children", "named_children"):
                got = self.engine_instance_of(sub.iter.func.value, outer, depth + 1)
            else:
                continue
            if got is not None:
                return got
        return None

    def _dispatched_class(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str, outer: _Scope,
                          roots: list[str]) -> str | None:
        """`@f.register(L) def _(x)` (functools.singledispatch / singledispatchmethod): the implementation's
        first dispatched parameter is an instance of L whenever it runs."""
        params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args] if a.arg not in ("self", "cls")]
        if not params or params[0] != name:
            return None
        for d in fn.decorator_list:
            if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "register" \
                    and d.args:
                got = self._engine_annotation(d.args[0], outer, types=roots)
                if got is not None:
                    return got
        return None

    def matched_sub_object(self, obj: ast.expr, scope: _Scope) -> str | None:
        """The engine class whose instance holds `obj`, a name captured by a sub-pattern of a class pattern
        (`case L(quant_method=q)`: q is an object of an L instance), or None."""
        if not isinstance(obj, ast.Name) or not self.model_code:
            return None
        home = self._scope_node(obj.id, scope)
        if home is None:
            return None
        roots = [f"{r}.*" for r in self.settings.hidden_import_roots]
        for sub in ast.walk(home[0]):
            got = self._matched_class(sub, obj.id, home[1], roots, subject_only=False) \
                if isinstance(sub, ast.Match) else None
            if got is not None:
                return got
        return None

    def _matched_class(self, match: ast.Match, name: str, outer: _Scope, roots: list[str],
                       subject_only: bool) -> str | None:
        """`match x: case L(): ...`: inside the case, x is an instance of the engine's L (fail closed: any
        class pattern of the case, however nested); with `subject_only` False, a name captured by one of
        its sub-patterns (`case L(quant_method=q)`: an object that instance holds)."""
        subject = subject_only and isinstance(match.subject, ast.Name) and match.subject.id == name
        for case in match.cases:
            for p in ast.walk(case.pattern):
                if not isinstance(p, ast.MatchClass):
                    continue
                inner = [*p.patterns, *p.kwd_patterns]
                captured = not subject_only and any(isinstance(q, ast.MatchAs | ast.MatchStar) and
                                                    q.name == name for sub in inner for q in ast.walk(sub))
                if subject or captured:
                    got = self._engine_annotation(p.cls, outer, types=roots)
                    if got is not None:
                        return got
        return None

    def _scope_node(self, name: str, scope: _Scope) -> tuple[ast.AST, _Scope] | None:
        """The node of the scope `name` is bound in (searched outwards from `scope`), with that scope."""
        s: _Scope | None = scope
        while s is not None and name not in s.bindings:
            s = s.parent
        if s is None:
            return None
        node = next((n for n, sc in self.scopes.items() if sc is s), None)
        return (node, s) if node is not None else None

    def engine_method_name(self, cls: str, attr: str) -> bool:
        """Whether `attr` names behaviour of the engine class `cls` (a method its source defines, `forward`
        and its dispatch attribute, a dunder) rather than data an instance holds."""
        if attr.endswith("[...]"):  # an item of a private table of the instance (`_forward_hooks[k]`)
            return True
        if attr in ("forward", "_forward_method") or attr.startswith("forward_") or \
                (attr.startswith("__") and attr.endswith("__")):
            return True
        params = self.signatures(cls, attr) if self.signatures is not None else ()
        return params is not None and params != ()

    def _engine_annotation(self, ann: ast.expr, scope: _Scope, depth: int = 0,
                           types: Sequence[str] | None = None) -> str | None:
        """The engine type (`engine_parameter_types`, or `types`) any part of an annotation names, or None:
        `VllmConfig`, `VllmConfig | None`, `Optional["VllmConfig"]`, `"config.ModelConfig"`."""
        if depth > 6:
            return None
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            try:
                parsed = ast.parse(ann.value, mode="eval").body
            except (SyntaxError, ValueError, RecursionError):
                return None
            self._kept.append(parsed)
            return self._engine_annotation(parsed, scope, depth + 1, types)
        if isinstance(ann, ast.BinOp):
            return self._engine_annotation(ann.left, scope, depth + 1, types) or \
                self._engine_annotation(ann.right, scope, depth + 1, types)
        if isinstance(ann, ast.Subscript):
            parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            for part in [ann.value, *parts]:
                hit = self._engine_annotation(part, scope, depth + 1, types)
                if hit is not None:
                    return hit
            return None
        if isinstance(ann, ast.Call):  # `TypeVar("T", bound=L)`, `TypeVar("T", L, M)`, `NewType("N", L)`
            f = self.resolve(ann.func, scope)
            if f is None or f.qualname.rsplit(".", 1)[-1] not in ("TypeVar", "NewType", "ParamSpec"):
                return None
            for part in [*ann.args[1:], *(k.value for k in ann.keywords if k.arg == "bound")]:
                hit = self._engine_annotation(part, scope, depth + 1, types)
                if hit is not None:
                    return hit
            return None
        if isinstance(ann, ast.Attribute) and self.resolve(ann, scope) is None:
            dotted = ast.unparse(ann)  # `'vllm.x.L'` in a string annotation, `vllm` not imported here
            roots = self.settings.engine_parameter_types if types is None else types
            if dotted is not None and _matches(dotted, roots):
                return dotted
        if isinstance(ann, ast.Name | ast.Attribute):
            ref = self.resolve(ann, scope)
            if self.foreign(ref) and ref is not None and \
                    _matches(ref.qualname, self.settings.engine_parameter_types if types is None else types):
                return ref.qualname
            if isinstance(ann, ast.Name):  # an alias the file binds: `M = Optional[L]`, `T = TypeVar(...)`
                for b in self._lookup(ann.id, scope) or []:
                    if isinstance(b, _Import) and self.cross is not None and self.is_own(b.qualname):
                        hit = self.cross.engine_annotation(b.qualname, self.module, types)
                        if hit is not None:
                            return hit  # `from .mid import Cls` where mid binds `Cls = type[Engine]`
                    if isinstance(b, _Alias):
                        hit = self._engine_annotation(b.value, b.scope, depth + 1, types)
                        if hit is not None:
                            return hit
        return None

    def _stored_attr(self, attr: str, own_typed: bool = False) -> _Ref | None:
        """The foreign object some store of this file put in an attribute named `attr`, if any: `x.<attr> =
        value`, a class body's `<attr> = value`, `setattr(x, "<attr>", value)`, `x.__dict__["<attr>"] =
        value` (and `.update`), or one of those under a computed name. Flow- and receiver-insensitive: an
        attribute that at some point held an engine object is that object (fail closed). One exception
        (`own_typed`: the attribute is read on an instance of an own class, `_own_typed`): a
        `setattr(obj, <computed>, v)` on an engine object or a copy of one (hy_v4's
        `setattr(copy.copy(quant_config), exclusion_attr, ...)`) cannot have set it, the two objects'
        classes differ."""
        for value, scope, setter in [*self.attr_stores.get(attr, []), *self.attr_stores.get("*", [])]:
            if setter is not None:
                f = self.resolve(setter, scope)
                if f is None or not f.qualname.endswith(("setattr", "__setattr__")):
                    continue
                if own_typed and self._engine_typed_receiver(value, scope):
                    continue
                call = self._parent(value)
                names = self.attribute_names(call.args[1], scope) if isinstance(call, ast.Call) and \
                    len(call.args) == 3 and not any(isinstance(a, ast.Starred) for a in call.args) else None
                if names is not None and attr not in names:
                    continue  # `setattr(q, name, v)` where name is provably one of a few other literals
            r = self.resolve(value, scope)
            t = self.tainted(r)
            if t is not None:
                # a local container holding engine objects (`K.p = list(sys.path)`: a copy) stays the
                # container: its items are the engine's, writes to it are its own
                return r if r is not None and r is not t and r.origin == "local" else t
        return None

    def _engine_typed_receiver(self, value: ast.expr, scope: _Scope) -> bool:
        """`value` is what a `setattr(obj, name, value)` stores, and `obj` is an engine object or a copy of
        one (a foreign class's instance, never an own class's)."""
        call = self._parent(value)
        if not isinstance(call, ast.Call) or not call.args or isinstance(call.args[0], ast.Starred):
            return False
        r = self.resolve(call.args[0], scope)
        return self.foreign(r) or (r is not None and r.qualname == _COPY and self.tainted(r) is not None)

    def _own_typed(self, expr: ast.expr, scope: _Scope, depth: int = 0) -> bool:
        """`expr` is an instance of an own class: a method's bound `self` (unrebound), an own instance, or
        `x.a` of one whose every store of `a` in this file is an own instance (`self.model = Model(...)`)."""
        if depth > 4:
            return False
        if isinstance(expr, ast.Name):
            key = self._enclosing_function(scope)
            for fn in self.functions.get(key or "", []):
                first = [*fn.node.args.posonlyargs, *fn.node.args.args][:1]
                if first and first[0].arg == expr.id and expr.id not in fn.positional and \
                        fn.scope is scope and scope.bindings.get(expr.id) == [_LOCAL]:
                    return True
        r = self.resolve(expr, scope)
        if r is not None and r.origin == "local" and r.qualname.startswith(_INSTANCE):
            return True
        if isinstance(expr, ast.Attribute) and self._own_typed(expr.value, scope, depth + 1):
            stores = self.attr_stores.get(expr.attr, [])
            return bool(stores) and all(
                setter is None and (v := self.resolve(value, sc)) is not None and
                v.qualname.startswith(_INSTANCE) for value, sc, setter in stores)
        return False

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
        got = self._dunder_result(ref, _ITERATION_DUNDERS)
        if got is not None:
            return got
        got = self._reflected(ref)  # `for m in E`: an own Enum's members
        if got is not None:
            return got
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
            return self._resolve_name(node.id, scope, self.flow_uses.get(id(node)))
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value, scope)
            if base is None:
                return None
            if node.attr in _REACH_ATTRS:
                return _Ref("import", f"<{node.attr} of {base.qualname or 'a local object'}>")
            if node.attr == "__class__" and base.origin == "param":
                return _Ref("classof", "<class of a parameter>")
            if node.attr == "__func__" and base.origin == "param":
                cls = self.engine_instance_class(base)
                if cls is not None:  # layer.forward.__func__: the engine class's function
                    method = node.value.attr if isinstance(node.value, ast.Attribute) else "<a method>"
                    return _Ref("import", f"{cls}.{method}")
            if node.attr == "__func__" and base.origin == "local" and base.qualname.startswith(_BOUND):
                return _Ref("import", base.qualname[len(_BOUND):-1])  # Engine().forward.__func__
            if base.origin == "param":
                # an attribute some store of this file put an engine object in (`c.t = Engine` then
                # `def h(c): c.t.forward = f`): that object, whatever the parameter is (fail closed)
                return self._stored_attr(node.attr) or base
            if node.attr == "__class__" and base.origin == "local":
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    return _Ref("own", "<own class>")
                return self._class_of_local(base)
            if node.attr == "__dict__" and base.origin == "local" and not (
                    isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                return self._local_namespace(None)  # obj.__dict__ of a local object: what stores put in it
            if base.origin == "local" and base.qualname == _COPY and base.elements:
                shared = base.elements[0]  # the copy's attributes are the original's objects
                if shared.origin == "param":
                    return shared
                return _Ref(shared.origin, f"{shared.qualname}.{node.attr}")
            if base.origin == "local" and base.qualname == _NAMESPACE and base.elements:
                return base.elements[0]  # SimpleNamespace(t=Engine).t
            if base.origin == "local" and base.qualname == _PARTIAL and base.elements:
                if node.attr == "func":
                    return base.elements[0]  # partial(Engine).func
                if node.attr in ("args", "keywords"):
                    return _Ref("local", "<container>", base.elements[1:])  # partial(f, Engine).args[0]
            if base.origin == "local":
                stored = self._stored_attr(node.attr, self._own_typed(node.value, scope))
                if stored is not None:
                    return stored
                made = any(setter is None and self._made_container(v, sc)
                           for v, sc, setter in self.attr_stores.get(node.attr, []))
                filled = self._filled(f".{node.attr}") if made else ()
                if filled:
                    return _Ref("local", "<container>", filled)
                if base.qualname.startswith(_INSTANCE):
                    cls = base.qualname[len(_INSTANCE):-1]
                    keys = self._method_keys(cls, [node.attr])
                    if keys:
                        return self._method_value(keys[0])
                    fields = (f"<field {node.attr}>", "<field *>")
                    field = next((e.elements[0] for e in base.elements
                                  if e.qualname in fields and e.elements), None)
                    if field is not None:
                        return field  # C(Engine).a of an own dataclass
                    # an instance of another own module's class: what that class's attribute (or a
                    # property of it) is
                    held = self.cross.instance_attribute(cls, node.attr, self.module) if self.cross else None
                    if held is not None:
                        return held
                    got = self._dunder_result(base, ["__getattribute__", "__getattr__"]) or \
                        self._descriptor_result(node.attr)
                    if got is not None:
                        return got
                if base.qualname.startswith(_OF_FOREIGN):  # Engine().forward: a method bound to it
                    return _Ref("local", f"{_BOUND}{base.qualname[len(_OF_FOREIGN):-1]}.{node.attr}>")
                return _LOCAL_REF
            member = self._this_module_member(base, node.attr)
            if member is not None:
                return member
            if base.origin == "own" and base.qualname in self.functions:
                if node.attr in _FUNCTION_ITSELF:
                    return base  # staticmethod(f).__func__, f.__call__, lru_cache(f).__wrapped__: f
                if node.attr in ("__defaults__", "__kwdefaults__"):
                    return self._defaults(base.qualname)
                if node.attr in ("__annotations__", "__signature__", "__type_params__"):
                    return self._annotations_and_defaults(base.qualname)
            if base.origin == "own" and base.qualname in self.classes and node.attr in _CLASS_REFLECTION:
                got = self._class_namespace(base.qualname)  # R.__dataclass_fields__, E.__members__
                if got is not None:
                    return got
            if base.origin == "own" and (base.qualname in self.classes or
                                         base.qualname.rpartition(".")[0] in self.classes):
                # a class attribute holding an engine object (also of a nested class: `H.Inner.t`)
                stored = self._stored_attr(node.attr)
                if stored is not None:
                    return stored
                if self.cross is not None and base.qualname in self.classes:
                    for b in self._own_import_bases(base.qualname):  # inherited from another own module
                        held = self.cross.member(f"{b}.{node.attr}", self.module)
                        if held is not None:
                            return held
                if base.qualname in self.classes:
                    inherited = self._inherited_engine_attr(base.qualname, node.attr)
                    if inherited is not None:
                        return inherited
                    got = self._descriptor_result(node.attr) or self._metaclass_dunder(base.qualname)
                    if got is not None:
                        return got
            if node.attr == "__call__" and base.origin == "import" and base.qualname.startswith("builtins.") \
                    and base.qualname.rpartition(".")[2][:1].islower():
                return base  # `setattr.__call__` is `setattr`
            return _Ref(base.origin, f"{base.qualname}.{node.attr}")
        if isinstance(node, ast.Subscript):
            base = self.resolve(node.value, scope)
            if base is None:
                return None
            key = _dotted_literal(node.slice)
            ns = _namespace_of(node.value)
            owner = self.resolve(ns, scope) if key is not None and ns is not None else None
            if key is not None and owner is not None and (owner.origin == "local" or (
                    owner.origin == "own" and owner.qualname in self.classes)):
                # vars(k)["c"] of a local object, K.__dict__["c"] of an own class: what `k.c = v` put there
                return self._local_namespace(key)
            if key is not None and base.qualname == f"{self._this_module()}.__dict__":
                member = self._this_module_member(_Ref(base.origin, self._this_module()), key)
                if member is not None:
                    return member  # globals()["m"], vars(sys.modules[__name__])["m"]
            if key == "__builtins__" and base.qualname.endswith("__dict__"):
                return _Ref("import", "builtins")
            if base.origin == "import" and base.qualname == "builtins":
                # `__builtins__` is the builtins module's dict outside `__main__`: `__builtins__['setattr']`
                return _Ref("import", f"builtins.{key}" if key is not None else "builtins.*")
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
            if isinstance(node.slice, ast.Slice) and isinstance(node.ctx, ast.Load) and \
                    _shared_container(base.qualname) and self.foreign(base):
                return _copy_of_container(base)  # sys.path[:]: a new list of sys.path's items
            dunders = ["__class_getitem__"] if base.origin == "own" else ["__getitem__", "__missing__"]
            got = self._dunder_result(base, dunders)
            if got is not None:
                return got
            got = self._reflected(base) if isinstance(node.ctx, ast.Load) else None
            if got is not None:
                return got  # `E["A"]`: an own Enum's member by name
            if base.origin == "local":
                if base.elements:
                    return base.elements[0]
                return _LOCAL_REF
            return _Ref(base.origin, f"{base.qualname}[{key!r}]" if key else f"{base.qualname}[...]")
        if isinstance(node, ast.Call):
            return self._resolve_call(node, scope)
        if isinstance(node, ast.Yield):
            # `x = yield`: what some `.send(v)` of this file passes in (fail closed: any of them)
            sent = (self.tainted(self.resolve(v, sc)) for v, sc in self._sent_values())
            found = next((t for t in sent if t is not None), None)
            return found or self._handed_on_sends(False) or _LOCAL_REF
        if isinstance(node, ast.YieldFrom):
            # `v = yield from g`: g's return value (an own generator's `return`), or what g holds or hands
            # out, or what a `.send()` here passes (fail closed: any of them)
            source = self.resolve(node.value, scope)
            for key in self._callee_keys(node.value, scope) if isinstance(node.value, ast.Call) else []:
                for fn in self.functions.get(key, []):
                    for value in fn.stop_values():
                        t = self.tainted(self.resolve(value, fn.scope))
                        if t is not None:
                            return t
            sent = (self.tainted(self.resolve(v, sc)) for v, sc in self._sent_values())
            return self.tainted(source) or next((t for t in sent if t is not None), None) or _LOCAL_REF
        if isinstance(node, ast.Await):  # `await c`: what the coroutine returns (an own `__await__`'s)
            awaited = self.resolve(node.value, scope)
            return self._dunder_result(awaited, ["__await__"]) or awaited
        if isinstance(node, ast.NamedExpr):
            return self.resolve(node.value, scope)
        if isinstance(node, ast.BinOp | ast.UnaryOp):  # an own class's operator dunders (any of them)
            operands = [node.left, node.right] if isinstance(node, ast.BinOp) else [node.operand]
            for o in operands:
                got = self._dunder_result(self.resolve(o, scope), _OPERATOR_DUNDERS)
                if got is not None:
                    return got
            # `[E] * 2`, `[E] + xs`, `{} | {"k": E}`: a new container of a container operand's objects (an
            # operator on an engine object itself makes a new value: `layer.weight * 2`)
            holders = [r for o in operands if (r := self.resolve(o, scope)) is not None
                       and r.origin == "local" and r.qualname == "<container>" and r.elements
                       and self.tainted(r) is not None]
            if holders:
                return _Ref("local", "<container>", tuple(e for r in holders for e in r.elements))
            return _LOCAL_REF
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return self._container(node.elts, scope)
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            # a container of what its element expression is, in the comprehension's own scope
            inner = self.scopes.get(node)
            if inner is None:
                return _LOCAL_REF
            return self._container([node.value if isinstance(node, ast.DictComp) else node.elt], inner)
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
        this_dict = f"{self._this_module()}.__dict__."
        if callee is not None and callee.qualname.startswith(this_dict) and \
                callee.qualname[len(this_dict):] in ("get", "pop", "setdefault", "__getitem__"):
            key = _dotted_literal(_arg(node, 0))  # globals().get("m")
            member = self._this_module_member(_Ref(callee.origin, self._this_module()), key) if key else None
            if member is not None:
                return member
        if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and \
                node.func.value.id in ("self", "cls"):
            for key in self._callee_keys(node, scope):  # self.t(): what the own method returns
                t = self.tainted(self._own_return(node, key, scope))
                if t is not None:
                    return t
        if isinstance(node.func, ast.Attribute) and node.args and \
                node.func.attr in ("enter_context", "enter_async_context"):  # ExitStack().enter_context(cm)
            return self.resolve(self._entered(node.args[0]), scope) or _LOCAL_REF
        if callee is not None and callee.origin == "local" and callee.qualname == _PARTIAL:
            # a partial's call hands its bound arguments to the function, which may return one (fail closed)
            func = callee.elements[0] if callee.elements else _LOCAL_REF
            if self.foreign(func):
                return _Ref("local", f"{_OF_FOREIGN}{func.qualname}>")  # partial(Engine)(): an instance
            bound = _Ref("local", "<container>", callee.elements[1:])
            return self.tainted(bound) or _LOCAL_REF
        if self.cross is not None and isinstance(node.func, ast.Attribute) and callee is not None and \
                callee.origin == "local":
            base = self.resolve(node.func.value, scope)
            cls = base.qualname[len(_INSTANCE):-1] if base is not None and \
                base.qualname.startswith(_INSTANCE) else None
            if cls is not None and cls not in self.classes:  # a method of another own module's class
                returned = self.cross.call(f"{cls}.{node.func.attr}", node, scope, self)
                if returned is not None:
                    return returned
        got = self._dunder_result(callee, ["__call__"]) if callee is not None and callee.origin == "local" \
            else None
        if got is not None:
            return got  # an own instance's __call__
        if callee is not None and callee.origin == "own" and callee.qualname in self.classes:
            if self._is_thread_class(callee.qualname):
                return _THREAD_REF
            made = self._made_instead(callee.qualname, node, scope)
            if made is not None:
                return made
            fields = self._record_fields(callee.qualname, node, scope)
            if not fields and self._container_class(callee.qualname):  # `class D(dict)`: D(x=E)["x"]
                fields = self._container([*node.args, *(k.value for k in node.keywords)], scope).elements
            fields = (*fields, *self._init_stored_fields(callee.qualname, node, scope))
            return _Ref("local", f"{_INSTANCE}{callee.qualname}>", fields)
        if callee is not None and callee.origin == "own":
            return self._own_return(node, callee.qualname, scope)
        if callee is not None and callee.origin in ("local", "param") and \
                isinstance(node.func, ast.Attribute) and node.func.attr in _ELEMENT_METHODS:
            base = self.resolve(node.func.value, scope)
            if base is not None and (base.elements or base.origin == "param"):
                if node.func.attr == "copy":  # a new container (its items are the original's objects)
                    return _Ref("local", _COPY, base.elements or (base,))
                return base  # d.values() / d.get(k) of a container holding foreign objects
            if node.func.attr in ("setdefault", "get", "pop") and len(node.args) >= 2:
                default = self.tainted(self.resolve(node.args[1], scope))
                if default is not None:
                    return default  # `{}.setdefault(k, E)`, `d.get(k, E)`: the default it hands back
        if callee is not None and callee.origin == "local" and isinstance(node.func, ast.Attribute):
            base = self.resolve(node.func.value, scope)
            if base is not None and base.qualname == "<container>" and base.elements and \
                    self.tainted(base) is not None:
                return base  # a container holding engine objects: any method may hand one back (fail closed)
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("_replace", "_make"):
            # a namedtuple's `_replace(a=E)` / `N._make([E])`: a record holding the receiver's and the
            # arguments' objects (as attributes and items)
            parts = [node.func.value, *node.args, *(k.value for k in node.keywords)]
            held_by = [r for v in parts if (r := self.resolve(v, scope)) is not None]
            flat = tuple(self._flat_elements(_Ref("local", "<container>", tuple(held_by))))
            if flat:
                return _Ref("local", _NAMESPACE, flat)
        if callee is not None and callee.origin == "local" and callee.qualname in (
                f"{_OF_FOREIGN}collections.namedtuple>", f"{_OF_FOREIGN}typing.NamedTuple>"):
            held = self._container([*node.args, *(k.value for k in node.keywords)], scope)  # N(Engine).a
            return _Ref("local", _NAMESPACE, held.elements) if held.elements else _LOCAL_REF
        if callee is not None and callee.origin == "local" and callee.qualname.startswith(_METHODCALLER):
            target = self.tainted(self.resolve(node.args[0], scope)) if node.args else None
            if target is not None:  # methodcaller("mro")(Engine) is Engine.mro()
                return _Ref("import", f"{target.qualname}.{callee.qualname[len(_METHODCALLER):-1]}()")
            return _LOCAL_REF
        if callee is not None and callee.origin == "local" and callee.qualname == _NAMESPACE and \
                callee.elements and self.tainted(callee) is not None:
            return callee  # `make_dataclass(..., field(default=E))()`: an instance of what it was handed
        recv = self.resolve(node.func.value, scope) if isinstance(node.func, ast.Attribute) and \
            callee is not None and callee.origin == "local" else None
        made_by = recv.qualname[len(_OF_FOREIGN):-1] if recv is not None and \
            recv.qualname.startswith(_OF_FOREIGN) else ""
        if recv is not None and (recv == _THREAD_REF or _stdlib(made_by)):
            # a method of an object a stdlib callable made here (`loop.run_until_complete(c)`,
            # `executor.map(f, [E])`): what it is handed may come back (fail closed); a tensor's methods
            # (`x.to(torch.float32)`) make new tensors
            handed = self._handed(node, scope)
            if handed is not None:
                return handed
        if callee is None or callee.origin != "import":
            return _LOCAL_REF
        q = callee.qualname
        if self.cross is not None and self.is_own(q):
            returned = self.cross.call(q, node, scope, self)  # a function of another own module
            if returned is not None:
                return returned
        first = _arg(node, 0, "name", "o", "object")
        if q.startswith("<"):
            return _Ref("import", f"{q}()")  # called through __subclasses__, __globals__, ...
        if q.endswith(".__get__"):
            return _Ref("local", f"{_BOUND}{q.removesuffix('.__get__')}>")  # Engine.forward.__get__(o)
        if q in _EVERYTHING_CALLS or q.rsplit(".", 1)[-1] in ("__subclasses__", "mro"):
            return _Ref("import", f"{q}()")
        if _matches(q, self.settings.engine_accessors):
            return _Ref("import", f"{q}()")  # the engine's own object (its config, forward context, groups)
        if q in _RETURNS_ITS_FUNCTION and node.args:
            return self.resolve(node.args[0], scope) or _LOCAL_REF  # lru_cache(f), staticmethod(f): f
        if q == "inspect.getmro" and first is not None:
            base = self.resolve(first, scope)
            if base is not None:
                return _Ref("import", f"<__mro__ of {base.qualname or 'a local object'}>")  # is `X.__mro__`
        if q == "operator.methodcaller" and node.args:
            name = _dotted_literal(node.args[0])
            return _Ref("local", f"{_METHODCALLER}{name or '*'}>")
        if q in ("copy.copy", "copy.deepcopy") and first is not None:
            got = self._dunder_result(self.resolve(first, scope), ["__copy__", "__deepcopy__", "__reduce__",
                                                                   "__reduce_ex__"])
            if got is not None:
                return got  # an own `__copy__` returning an engine object
            same = self.tainted(self.resolve(first, scope))
            last = same.qualname.rpartition(".")[2] if same is not None else ""
            if same is not None and _shared_container(same.qualname):
                return _copy_of_container(same)  # copy.copy(sys.path): a new list of sys.path's items
            if same is not None and not same.elements and not any(c in same.qualname for c in "([<~") and \
                    not last.isupper():  # (an ALL_CAPS module constant is an object: copied)
                return same  # a copy of a class or function is the object itself
        if q == "copy.copy" and first is not None:
            # a new object (writes to it are the copy's) whose attributes and items are the original's
            return _Ref("local", _COPY, self._container([first], scope).elements)
        if q in ("functools.partial", "functools.partialmethod") and node.args:
            func = self.resolve(node.args[0], scope) or _LOCAL_REF
            held = self._container([*node.args[1:], *(k.value for k in node.keywords)], scope)
            if func.origin == "local" and func.qualname == _PARTIAL and func.elements:
                # partial(partial(f, a), b) is partial(f, a, b)
                return _Ref("local", _PARTIAL, (*func.elements, *held.elements))
            return _Ref("local", _PARTIAL, (func, *held.elements))
        if q in _FIELDS_CALLS and first is not None:
            f = self.resolve(first, scope)
            cls = f.qualname if f is not None and f.origin == "own" else \
                f.qualname[len(_INSTANCE):-1] if f is not None and f.qualname.startswith(_INSTANCE) else None
            got = self._class_namespace(cls) if cls is not None else None
            if got is not None:
                return got  # dataclasses.fields(R)[0].default: a class attribute's value
        if q in _INTROSPECTION_CALLS and first is not None:
            f = self.resolve(first, scope)
            if f is not None and f.origin == "own" and f.qualname in self.functions:
                return self._annotations_and_defaults(f.qualname)  # get_type_hints(f)["x"]: its annotation
        if q == "builtins.iter" and len(node.args) == 2:  # `iter(f, sentinel)` yields what f returns
            f = self.resolve(node.args[0], scope)
            key = f.qualname if f is not None and f.origin == "own" else None
            for fn in self.functions.get(key or "", []):
                for value in fn.returns():
                    t = self.tainted(self.resolve(value, fn.scope))
                    if t is not None:
                        return _Ref("local", "<container>", (t,))
        if q in _ELEMENT_CALLS:
            got = self._dunder_result(self.resolve(first, scope), _ITERATION_DUNDERS) \
                if first is not None else None
            if got is not None:
                return _Ref("local", "<container>", (got,))  # `reversed(H())`: what H's dunders hand out
            held = self._container([*node.args, *(k.value for k in node.keywords)], scope)
            return held
        if _matches(q, _ELEMENT_FAMILIES):
            values = [a.value if isinstance(a, ast.Starred) else a for a in node.args]
            args_held = [r for v in [*values, *(k.value for k in node.keywords)]
                         if (r := self.resolve(v, scope)) is not None]
            flat = tuple(self._flat_elements(_Ref("local", "<container>", tuple(args_held))))
            if not flat:
                return _LOCAL_REF
            # a record's copy (`dataclasses.replace(r, f=E).f`) holds them as attributes, too
            return _Ref("local", _NAMESPACE if q in _RECORD_COPIES else "<container>", flat)
        if q in _NAMESPACE_CALLS:  # SimpleNamespace(t=v).t is v
            held = self._container([*node.args, *(k.value for k in node.keywords)], scope)
            return _Ref("local", _NAMESPACE, held.elements) if held.elements else _LOCAL_REF
        receiver, _, method = q.rpartition(".")
        if receiver and method in _ELEMENT_METHODS and not self.is_own(receiver) and (
                receiver.startswith(("sys.modules", "builtins.", ENGINE_PARAM + "."))
                or receiver.endswith("__dict__")
                or _matches(receiver, ["vllm.*", "torch.*", "transformers.*"])):
            return _Ref("import", f"{receiver}[*]")
        if q in ("importlib.import_module", "builtins.__import__"):
            loaded = self._loaded_module(node, q, scope)
            # a relative load we cannot place is the file's own package; a placed one is judged by name
            return _Ref("own", "<relative>") if loaded is None else _Ref("import", loaded)
        if q in ("builtins.getattr", "builtins.vars", "builtins.type") and first is not None:
            base = self.resolve(first, scope)
            if base is not None and base.origin == "param":
                return _Ref("classof", "<class of a parameter>") if q == "builtins.type" else base
        if q == "builtins.getattr" and len(node.args) >= 3:
            default = self.tainted(self.resolve(node.args[2], scope))
            if default is not None:
                return default  # getattr(K, "missing", Engine) is Engine
        if q in _GETATTRIBUTE_CALLS and first is not None:
            q = "builtins.getattr"  # object.__getattribute__(m, "x") is getattr(m, "x")
        elif q.endswith((".__getattribute__", ".__getattr__")) and not q.startswith("builtins."):
            attr = _dotted_literal(_arg(node, 0))  # m.__getattribute__("x"): the receiver's attribute
            return _Ref("import", f"{q.rpartition('.')[0]}.{attr if attr else '*'}")
        if q == "builtins.getattr" and first is not None:
            base = self.resolve(first, scope)
            attr = self.constant_string(_arg(node, 1), scope)  # (`'_' + 'C'` is `'_C'`)
            if base is None or base.origin == "local":
                return _LOCAL_REF
            member = self._this_module_member(base, attr) if attr else None
            if member is not None:
                return member
            return _Ref(base.origin, f"{base.qualname}.{attr if attr else '*'}")
        if q == "builtins.eval" and first is not None and len(node.args) == 1 and not node.keywords:
            text = self.constant_string(first, scope)
            try:
                expr = ast.parse(text.strip(), mode="eval").body if text is not None else None
            except (SyntaxError, ValueError, RecursionError):
                expr = None
            if expr is not None:  # `eval('setattr')` is what the expression `setattr` is here
                self._kept.append(expr)
                return self.resolve(expr, scope) or _LOCAL_REF
        if q == "typing.cast" and len(node.args) >= 2:
            return self.resolve(node.args[1], scope) or _LOCAL_REF  # cast returns its value unchanged
        if q == "weakref.proxy" and first is not None:
            return self.resolve(first, scope) or _LOCAL_REF  # a proxy's attributes are the object's
        if q == "operator.getitem" and first is not None:
            base = self.resolve(first, scope)
            if base is None or base.origin == "local":
                return self._element(base) or _LOCAL_REF
            return base if base.origin == "param" else _Ref(base.origin, f"{base.qualname}[...]")
        if q == "builtins.super":
            sup = self._super_class(node, scope)
            if sup is not None:
                return sup
        if q == "builtins.vars" and first is not None:
            base = self.resolve(first, scope)
            if base is None or base.origin == "local":
                return self._local_namespace(None) if base is not None else _LOCAL_REF
            return _Ref(base.origin, f"{base.qualname}.__dict__")
        if q == "logging.getLogger" or q.endswith((".init_logger", ".get_logger")):
            # (vLLM's `init_logger(name)` and transformers' `get_logger(name)` are `getLogger(name)`)
            name = "root" if first is None else _dotted_literal(first)
            if name is not None and name != "root" and not self.is_own(name) and name != "__main__":
                return _Ref("import", f"logging.loggers.{name}")
            if name == "root" or (first is not None and isinstance(first, ast.Constant) and not first.value):
                return _Ref("import", "logging.loggers.root")
            if name is None and not (isinstance(first, ast.Name) and first.id == "__name__"):
                return _Ref("import", "logging.loggers.<computed>")  # any logger: fail closed
            return _LOCAL_REF  # getLogger(__name__) or an own name: the model's own logger
        if q in ("pkgutil.resolve_name", "pydoc.locate") and first is not None:
            # a string import: the object it names (a computed name may be any module's object)
            key = _dotted_literal(first)
            return _Ref("import", key.replace(":", ".")) if key else _Ref("import", "sys.modules[*]")
        if q == "inspect.getmodule" and first is not None:
            base = self.tainted(self.resolve(first, scope))
            if base is not None:
                return _Ref("import", f"<module of {base.qualname}>")
        if q in ("builtins.vars", "builtins.locals") and not node.args and self._function_scope(scope):
            # a function's own names (`locals()["c"]`): a container of what they are bound to
            home = self._function_scope(scope)
            assert home is not None
            names = [self._resolve_name(n, home) for n in sorted(home.bindings)]
            return self._container_of([r for r in names if r is not None])
        if q == "builtins.globals" or (q in ("builtins.vars", "builtins.locals") and not node.args):
            # (a function's vars()/locals() is a snapshot, but judged as the module's: fail closed)
            return _Ref("own", f"{self.module or '<this module>'}.__dict__")
        if q == "builtins.type" and len(node.args) == 1 and first is not None:
            base = self.resolve(first, scope)
            if isinstance(first, ast.Name) and first.id in ("self", "cls"):
                return _Ref("own", "<own class>")
            if base is None or base.origin == "local":
                return self._class_of_local(base)
            if base.origin == "import" and self.is_own(base.qualname) and self.cross is not None:
                made = self.cross.member(f"{base.qualname}.__class__", self.module)
                if made is not None:  # type(obj) of another own module's `obj = Engine()`
                    return made
            return base  # type(<module or class>) is as foreign as the thing itself
        if q == "decimal.getcontext":
            return _Ref("import", "decimal.context")  # the thread's current context, shared by everyone
        if q in _SINGLETON_CALLS:
            return _Ref("import", _SINGLETON_CALLS[q])  # the process's (thread's) one object: shared state
        if _matches(q, _THREAD_MAKERS):
            return _THREAD_REF
        if q == "sys.modules.get" and first is not None:
            key = _dotted_literal(first)
            return _Ref("import", key) if key else _Ref("import", "sys.modules[*]")
        if _stdlib(q) and q not in _FRESH_RESULTS and not _matches(q, _FRESH_FAMILIES):
            # a stdlib callable handed an engine object may hand it back (`asyncio.sleep(0, E)`,
            # `random.choice([E])`, `sum([[E]], [])`, `asyncio.gather(c)`): its result holds what it was
            # given unless it is known to make a fresh object of its own (fail closed)
            handed = self._handed(node, scope)
            if handed is not None:
                return handed
        if self.foreign(callee) and not q.startswith("builtins."):
            return _Ref("local", f"{_OF_FOREIGN}{q}>")  # `Engine()`: local, but its class is the engine's
        return _LOCAL_REF

    @staticmethod
    def _function_scope(scope: _Scope) -> _Scope | None:
        """The function scope a (comprehension inside a) function body runs in, or None."""
        s: _Scope | None = scope
        while s is not None and s.kind == "comprehension":
            s = s.parent
        return s if s is not None and s.kind == "function" else None

    def _container_of(self, refs: Sequence[_Ref]) -> _Ref:
        """A local container of the foreign objects (and parameters) `refs` are or hold."""
        held: list[_Ref] = []
        for r in refs:
            t = self.tainted(r)
            if t is not None:
                held.append(t)
            elif r.origin == "param":
                held.append(r)
        return _Ref("local", "<container>", tuple(held)) if held else _LOCAL_REF

    def _local_namespace(self, key: str | None) -> _Ref:
        """`vars(obj)` / `obj.__dict__` of a local object: what stores of this file put in attributes
        (receiver-insensitive, like `_stored_attr`): under `key`, or under any name when it is None."""
        if key is not None:
            return self._stored_attr(key) or _LOCAL_REF
        stored = [r for name in sorted(self.attr_stores)
                  for value, sc, setter in self.attr_stores[name] if setter is None
                  if (r := self.resolve(value, sc)) is not None]
        return self._container_of(stored)

    def _handed(self, node: ast.Call, scope: _Scope) -> _Ref | None:
        """A container of the engine objects a call is handed (as arguments, or held by them), or None."""
        values = [a.value if isinstance(a, ast.Starred) else a for a in node.args]
        held = self._container([*values, *(k.value for k in node.keywords)], scope)
        if self.tainted(held) is None:
            return None
        # its items, its attributes (`NewType("N", E).__supertype__`, `field(default=E).default`) and
        # what calling it makes may be any of them
        return _Ref("local", _NAMESPACE, tuple(self._flat_elements(held)))

    def _reflected(self, ref: _Ref) -> _Ref | None:
        """`_class_namespace` of an own class `ref` is, of this file or of another own module."""
        if ref.origin == "own" and ref.qualname in self.classes:
            return self._class_namespace(ref.qualname)
        if ref.origin == "import" and not ref.elements and self.cross is not None and \
                self.is_own(ref.qualname):
            got = self.cross.member(f"{ref.qualname}.__members__", self.module)  # its reflection
            return got if got is not None and got.origin == "local" else None
        return None

    def _class_namespace(self, cls: str) -> _Ref | None:
        """What the reflection of the own class `cls` hands out (its dataclass fields, its enum members,
        `K[name]`, iterating it): a record whose attributes and items are its class attributes' foreign
        objects, or None when it holds none."""
        refs: list[_Ref] = []
        for c_node, _ in self.classes.get(cls, []):
            body = self.scopes.get(c_node)
            if body is None:
                continue
            refs += [r for n in sorted(body.bindings) if (r := self._resolve_name(n, body)) is not None]
        held = self._container_of(refs)
        return _Ref("local", _NAMESPACE, held.elements) if held.elements else None

    def _class_of_local(self, base: _Ref | None) -> _Ref:
        """`type(x)` / `x.__class__` of a local object: the foreign class (or what the foreign callable)
        that made it (`x = Engine()`), a foreign class some store of this file swapped in (`o.__class__ =
        Engine`, receiver-insensitive: fail closed), else a class that cannot be checked."""
        if base is not None and base.qualname.startswith(_OF_FOREIGN):
            return _Ref("import", base.qualname[len(_OF_FOREIGN):-1])
        swapped = self._stored_attr("__class__")
        if swapped is not None:
            return swapped
        return _Ref("classof", "<class of a local object>")

    def _method_value(self, key: str) -> _Ref:
        """`instance.name` for an own method `key`: the method (calling it runs it), or for a property
        what its getter returns."""
        for fn in self.functions.get(key, []):
            if _is_property(fn.node):
                for value in fn.returns():
                    t = self.tainted(self.resolve(value, fn.scope))
                    if t is not None:
                        return t
                return _LOCAL_REF
        return _Ref("own", key)

    def _this_module(self) -> str:
        return self.module or "<this module>"

    def _this_module_member(self, base: _Ref | None, attr: str) -> _Ref | None:
        """`sys.modules[__name__].x`, `getattr(me, "x")`, `globals()["x"]` where `me` is this very file: what
        the file's module-level name `x` is (an engine object it imported stays that object)."""
        if base is None or base.origin not in ("own", "import") or base.qualname != self._this_module():
            return None
        if "." in attr:
            return None
        if attr not in self.module_scope.bindings:
            # PEP 562: an attribute the module does not bind is what its module-level __getattr__ returns
            for fn in self.functions.get(f"{self._this_module()}.__getattr__", []):
                for value in fn.returns():
                    t = self.tainted(self.resolve(value, fn.scope))
                    if t is not None:
                        return t
            return None
        return self._resolve_name(attr, self.module_scope)

    def _super_class(self, node: ast.Call, scope: _Scope) -> _Ref | None:
        """`super()` / `super(C, self)` in a method of an own class deriving from an engine class: the
        engine class (its attributes and functions are the engine's)."""
        cls = self._enclosing_class(scope)
        if node.args:
            r = self.resolve(node.args[0], scope)
            if r is not None and r.origin == "import" and self.is_own(r.qualname) and \
                    not r.qualname.startswith(self._this_module() + "."):
                return r  # super(X, self), X another own module's class: judged as X (its bases' attributes)
            cls = r.qualname if r is not None and r.origin == "own" and r.qualname in self.classes else None
        if cls is None:
            return None
        bases = self._engine_bases(cls)
        if bases:
            return _Ref("import", bases[0])
        for node_, outer in self.classes.get(cls, []):  # a base another own module binds (a re-export)
            for b in node_.bases:
                r = self.resolve(b, outer)
                if r is not None and r.origin == "import" and self.is_own(r.qualname) and \
                        not r.qualname.startswith(self._this_module() + "."):
                    return r
        return None

    def _getter_call(self, node: ast.Call, scope: _Scope) -> _Ref | None:
        """`operator.attrgetter("a.b")(obj)` / `itemgetter(k)(obj)`: the attribute or item of obj."""
        if not isinstance(node.func, ast.Call):
            return None
        maker = self.resolve(node.func.func, scope)
        if maker is not None and maker.qualname in ("weakref.ref", "weakref.WeakMethod") and node.func.args \
                and not node.args:
            return self.resolve(node.func.args[0], scope)  # weakref.ref(x)() is x
        if not node.args:
            return None
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

    def _dunder_result(self, ref: _Ref | None, names: Sequence[str]) -> _Ref | None:
        """The foreign object an own class's dunder (`__getattr__`, `__iter__`, `__call__`, ...) returns or
        yields, for an instance of it (or, for `__class_getitem__`, the class itself), or None. Fail closed:
        any of its returns, whatever the arguments (an own class whose dunder hands out an engine object
        makes every such result that object)."""
        if ref is None:
            return None
        if ref.origin == "local" and ref.qualname.startswith(_INSTANCE):
            cls = ref.qualname[len(_INSTANCE):-1]
        elif ref.origin == "own" and ref.qualname in self.classes:
            cls = ref.qualname
        else:
            return None
        if cls not in self.classes:  # a class of another own module: its dunder there
            cross = self.cross
            return cross.dunder_result(cls, tuple(names), self.module) if cross is not None else None
        memo = (cls, tuple(names))
        if memo not in self._dunders:
            self._dunders[memo] = None  # a cycle: no information
            self._dunders[memo] = self._dunder_result_uncached(cls, names)
        return self._dunders[memo]

    def _own_metaclasses(self, cls: str) -> list[str]:
        """The own metaclasses (of this file) `class cls(metaclass=M)` names, through its own bases."""
        out: list[str] = []
        for c in self._own_bases(cls):
            for node, outer in self.classes.get(c, []):
                for kw in node.keywords:
                    m = self.resolve(kw.value, outer) if kw.arg == "metaclass" else None
                    if m is not None and m.origin == "own" and m.qualname in self.classes:
                        out.append(m.qualname)
        return out

    def _made_instead(self, cls: str, node: ast.Call, scope: _Scope) -> _Ref | None:
        """`H()` where an own `__new__` of H, or an own metaclass's `__call__`, returns a foreign object (or
        hands back a foreign argument): that object, not an instance of H."""
        keys = self._method_keys(cls, ["__new__"])
        for m in self._own_metaclasses(cls):
            keys += self._method_keys(m, ["__call__"])
        for key in keys:
            t = self.tainted(self._own_return(node, key, scope))
            if t is not None:
                return t
        return None

    def _init_stored_fields(self, cls: str, node: ast.Call, scope: _Scope) -> tuple[_Ref, ...]:
        """`K(E).v` where an own `__init__` (or `__post_init__`, `__new__`) stores its parameter as
        `self.v = param`: the instance's attribute v is the foreign argument handed to it."""
        out: list[_Ref] = []
        for key in self._method_keys(cls, ["__init__", "__new__", "__post_init__"]):
            for fn in self.functions.get(key, []):
                args = self._call_arguments(node, fn)
                for sub in ast.walk(fn.node):
                    if not isinstance(sub, ast.Assign):
                        continue
                    for t in sub.targets:
                        if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and
                                t.value.id in ("self", "cls")):
                            continue
                        r = self.resolve(sub.value, fn.scope)
                        if r is None or r.origin != "param" or not r.qualname.startswith(key + _SEP):
                            continue
                        for a in args.get(r.qualname.rpartition(_SEP)[2], []):
                            held = self.tainted(self.resolve(a, scope))
                            if held is not None:
                                out.append(_Ref("local", f"<field {t.attr}>", (held,)))
        return tuple(out)

    def _metaclass_dunder(self, cls: str) -> _Ref | None:
        """What an own metaclass's `__getattr__`/`__getattribute__` returns, for an attribute of a class
        made with it (`class H(metaclass=M)`: `H.x` is what M hands out)."""
        for node, outer in self.classes.get(cls, []):
            for kw in node.keywords:
                m = self.resolve(kw.value, outer) if kw.arg == "metaclass" else None
                if m is not None and m.origin == "own" and m.qualname in self.classes:
                    # (`__prepare__` returns the namespace the class body starts from: its items are
                    # class attributes)
                    got = self._dunder_result(_Ref("local", f"{_INSTANCE}{m.qualname}>"),
                                              ["__getattr__", "__getattribute__", "__prepare__"])
                    if got is not None:
                        return got
        return None

    def _dunder_result_uncached(self, cls: str, names: Sequence[str]) -> _Ref | None:
        if self.cross is not None:  # a dunder inherited from another own module's class
            for b in self._own_import_bases(cls):
                got = self.cross.dunder_result(b, tuple(names), self.module)
                if got is not None:
                    return got
        keys = self._method_keys(cls, names)
        bases = set(self._own_bases(cls))
        for where, attr, value, scope in self.installs:  # `__getattr__ = lambda self, n: E` in a class body
            if attr not in names and attr != "*":
                continue
            if not isinstance(where, str):  # `H.__getattr__ = f` / `setattr(H, "__getitem__", f)` later
                r = self.resolve(where, scope)
                if r is None or r.origin != "own" or r.qualname not in bases:
                    continue
            elif where not in bases or attr == "*":
                continue
            key = self._function_key_of(value, scope)
            if key is not None:
                keys.append(key)
            elif isinstance(value, ast.Call):  # `functools.partialmethod(f, E)`: its bound arguments
                for a in [*value.args, *(k.value for k in value.keywords)]:
                    t = self.tainted(self.resolve(a, scope))
                    if t is not None:
                        return t
        for key in keys:
            for fn in self.functions.get(key, []):
                for value in fn.returns():
                    t = self.tainted(self.resolve(value, fn.scope))
                    if t is not None:
                        return t
        return None

    def _annotations_and_defaults(self, key: str) -> _Ref:
        """What an own function's annotations and defaults are (`f.__annotations__`, `get_type_hints(f)`,
        `inspect.signature(f)`: containers of them), as one container: fail closed on which is which."""
        held: list[_Ref] = list(self._defaults(key).elements)
        for fn in self.functions.get(key, []):
            if isinstance(fn.node, ast.Lambda):
                continue
            outer = fn.scope.parent or self.module_scope
            args = fn.node.args
            anns = [a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                                           *filter(None, (args.vararg, args.kwarg))] if a.annotation]
            for ann in [*anns, *filter(None, [fn.node.returns])]:
                if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
                    try:
                        ann = ast.parse(ann.value, mode="eval").body
                    except (SyntaxError, ValueError, RecursionError):
                        continue
                    self._kept.append(ann)
                held += self._container([ann], outer).elements
        return _Ref("local", _NAMESPACE, tuple(held)) if held else _LOCAL_REF  # (`.parameters`, items)

    def _flat_elements(self, ref: _Ref, depth: int = 0) -> list[_Ref]:
        """The foreign objects a container holds, through the records and containers it holds (a record's
        `<field f>` markers, nested containers): `dataclasses.astuple(R(E))` holds E."""
        out: list[_Ref] = []
        for e in ref.elements:
            if self.foreign(e):
                out.append(e)
            elif depth < 4:
                out += self._flat_elements(e, depth + 1)
        return out

    def _defaults(self, key: str) -> _Ref:
        """`f.__defaults__` / `f.__kwdefaults__` of an own function: a container of its default values."""
        held: list[_Ref] = []
        for fn in self.functions.get(key, []):
            outer = fn.scope.parent or self.module_scope  # defaults are evaluated where the def is
            args = fn.node.args
            held += self._container([*args.defaults, *args.kw_defaults], outer).elements
        return _Ref("local", "<container>", tuple(held)) if held else _LOCAL_REF

    def _record_fields(self, cls: str, node: ast.Call, scope: _Scope) -> tuple[_Ref, ...]:
        """The foreign arguments of a call making an own dataclass / NamedTuple instance, as `<field f>`
        markers (`C(Engine).a` is the engine's object); a positional argument past the fields read here
        (inherited ones) marks `<field *>` (fail closed)."""
        if not self._is_record_class(cls):
            return ()
        fields = [st.target.id for c_node, _ in self.classes.get(cls, [])[:1] for st in c_node.body
                  if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)]
        out: list[_Ref] = []
        named = [(fields[i] if i < len(fields) else "*", a) for i, a in enumerate(node.args)] + \
            [(k.arg or "*", k.value) for k in node.keywords]
        for name, value in named:
            t = self.tainted(self.resolve(value.value if isinstance(value, ast.Starred) else value, scope))
            if t is not None:
                out.append(_Ref("local", f"<field {'*' if isinstance(value, ast.Starred) else name}>", (t,)))
        return tuple(out)

    def _container_class(self, cls: str) -> bool:
        """An own class deriving (through own classes) from a container type: its instances hold what it
        is constructed with."""
        for c in self._own_bases(cls):
            for node, outer in self.classes.get(c, []):
                for base in node.bases:
                    r = self.resolve(base.value if isinstance(base, ast.Subscript) else base, outer)
                    if r is not None and r.origin == "import" and (
                            r.qualname in _CONTAINER_MAKERS or r.qualname in _ELEMENT_CALLS or r.qualname in (
                                "builtins.tuple", "builtins.frozenset", "collections.UserDict",
                                "collections.UserList")):
                        return True
        return False

    def _is_record_class(self, cls: str) -> bool:
        """A class whose constructor stores its arguments as attributes: a dataclass (or attrs / pydantic
        one) or a `typing.NamedTuple`."""
        for c_node, outer in self.classes.get(cls, []):
            for d in [*c_node.decorator_list, *c_node.bases]:
                r = self.resolve(d.func if isinstance(d, ast.Call) else d, outer)
                name = r.qualname.rsplit(".", 1)[-1] if r is not None else ""
                if name in ("dataclass", "define", "frozen", "attrs", "s", "NamedTuple", "BaseModel"):
                    return True
        return False

    def _descriptor_result(self, attr: str) -> _Ref | None:
        """`x.<attr>` where a class body binds `<attr>` to an instance of an own descriptor class: what its
        `__get__` returns, when that is a foreign object (receiver-insensitive: fail closed)."""
        for value, scope, setter in self.attr_stores.get(attr, []):
            if setter is None:
                t = self._dunder_result(self.resolve(value, scope), ["__get__"])
                if t is not None:
                    return t
                t = self._property_result(value, scope)
                if t is not None:
                    return t
        return None

    def _property_result(self, value: ast.expr, scope: _Scope) -> _Ref | None:
        """`p = property(lambda s: E)` (also `property(fget=f)`, `functools.cached_property(f)`): what its
        getter returns, when that is a foreign object."""
        if not isinstance(value, ast.Call):
            return None
        maker = self.resolve(value.func, scope)
        if maker is None or maker.qualname not in ("builtins.property", "functools.cached_property"):
            return None
        getter = _arg(value, 0, "fget", "func")
        key = self._function_key_of(getter, scope) if getter is not None else None
        for fn in self.functions.get(key or "", []):
            for ret in fn.returns():
                t = self.tainted(self.resolve(ret, fn.scope))
                if t is not None:
                    return t
        return None

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
        if isinstance(node.func, ast.Name):
            owns = self._name_callees(node.func, scope)
            if owns:  # every own function or class the name may be (`for cb in (a, b): cb(E)` runs both)
                made = ["__new__", "__init__", "__post_init__"]
                return [k for q in owns for k in ([q] if q in self.functions else self._method_keys(q, made))]
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

    def _name_callees(self, name: ast.Name, scope: _Scope) -> list[str]:
        """The own functions and classes a called name may be, through every binding that reaches the call
        (all of them where statement order is not followed): a def, an alias, an element of a loop over a
        literal or a container of them (`for cb in CBS`, a display or what `CBS.append(f)` put in). Inside
        the body of `for name in ...` that nothing else in the body rebinds, only that loop's bindings
        reach it, also at module level (`for cb in SAFE: cb(own)` then `for cb in READ: cb(E)`)."""
        bindings = self._reaching(name.id, scope, self.flow_uses.get(id(name))) or \
            self._lookup(name.id, scope)
        if not bindings:
            return []
        home = next((s for s in [scope] if name.id in s.bindings and s.bindings[name.id] is bindings), None)
        loop = self._enclosing_loop(name, name.id) if home is not None else None
        if loop is not None and home is not None:
            own_sites = {id(loop.target)}
            inside = self._loop_sites(loop)
            sites = home.sites.get(name.id, [])
            # a binding made from elsewhere (`global`/`nonlocal` in a nested def) or through the module's
            # namespace (`globals()[k] = v`, a computed setattr) may land inside the body: no narrowing
            elsewhere = None in sites or name.id in self.attr_stores or "*" in self.attr_stores
            if not elsewhere and not any(s in inside for s in sites if s not in own_sites):
                kept = [b for b, s in zip(bindings, sites, strict=True) if s in own_sites]
                bindings = kept or bindings
        out: list[str] = []
        for b in bindings:
            refs: list[_Ref | None] = []
            if isinstance(b, _Own):
                refs.append(_Ref("own", b.qualname))
            elif isinstance(b, _Alias):
                refs.append(self.resolve(b.value, b.scope))
            elif isinstance(b, _Elem):
                refs.extend(self._own_elements(b.value, b.scope, 0))
            for r in refs:
                if r is not None and r.origin == "own" and (r.qualname in self.functions or
                                                            r.qualname in self.classes):
                    out.append(r.qualname)
        return list(dict.fromkeys(out))

    def _own_elements(self, node: ast.expr, scope: _Scope, depth: int) -> list[_Ref | None]:
        """What a loop over `node` may bind, for own functions and classes: the elements of a display, of a
        name bound to one (and what a fill of this file put in it), of `list(x)`/`tuple(x)`/`reversed(x)`."""
        if depth > 8:
            return []
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return [self.resolve(e.value if isinstance(e, ast.Starred) else e, scope) for e in node.elts]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("list", "tuple", "reversed", "sorted", "iter", "set") and node.args:
            return self._own_elements(node.args[0], scope, depth + 1)
        if isinstance(node, ast.Name):
            out: list[_Ref | None] = []
            for b in self._lookup(node.id, scope) or []:
                if isinstance(b, _Alias):
                    out += self._own_elements(b.value, b.scope, depth + 1)
            out += [self.resolve(v, sc) for v, sc in self.item_stores.get(node.id, [])]
            return out
        return []

    def _enclosing_loop(self, node: ast.AST, name: str) -> ast.For | ast.AsyncFor | None:
        """The nearest `for <name> in ...` whose body holds `node`, in the same scope."""
        child: ast.AST = node
        parent = self._parent(node)
        while parent is not None and parent not in self.scopes:
            if isinstance(parent, ast.For | ast.AsyncFor) and any(child is s for s in parent.body) and \
                    isinstance(parent.target, ast.Name) and parent.target.id == name:
                return parent
            child, parent = parent, self._parent(parent)
        return None

    def _loop_sites(self, loop: ast.For | ast.AsyncFor) -> set[int]:
        """The ids of the nodes in a loop's body (binding sites are node ids)."""
        return {id(n) for s in loop.body for n in ast.walk(s)}

    def param_call_arguments(self, key: str, node: ast.Call, arg: ast.expr,
                             caller: tuple[Resolver, _Scope] | None = None) -> list[Passed]:
        """For a call `node` of the own function `key` handing it `arg` (a callback): the foreign objects, by
        position, that each call of that parameter in the function's body passes (`def visit(cb): cb(E)`).
        With the `caller` (its resolver and the call's scope), a parameter of the function passed on to the
        callback is what the call gives it (`def call(f, v): f(v)`)."""
        out: list[Passed] = []
        for fn in self.functions.get(key, []):
            given = self._call_arguments(node, fn)
            names = {f"{key}{_SEP}{n}" for n, exprs in given.items() if any(e is arg for e in exprs)}

            def passed(e: ast.expr, fn: _Function = fn,
                       given: dict[str, list[ast.expr]] = given) -> _Ref | None:
                r = self.resolve(e.value if isinstance(e, ast.Starred) else e, fn.scope)
                if caller is not None and r is not None and r.origin == "param" and \
                        r.qualname.startswith(key + _SEP):
                    res, scope = caller
                    exprs = given.get(r.qualname.rpartition(_SEP)[2], [])
                    found = (res.tainted(res.resolve(a, scope)) for a in exprs)
                    return next((t for t in found if t is not None), None)
                return self.tainted(r)
            for inner in ast.walk(fn.node):
                if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name):
                    r = self.resolve(inner.func, fn.scope)
                    if r is not None and r.origin == "param" and r.qualname in names:
                        out.append((tuple(passed(a) for a in inner.args),
                                    {k.arg or "*": passed(k.value) for k in inner.keywords}))
                        continue
                deferred = self._deferred_call(inner, fn.scope) if isinstance(inner, ast.Call) else None
                if deferred is not None:  # weakref.finalize(obj, cb, *args) calls cb(*args) later
                    r = self.resolve(deferred[0], fn.scope)
                    if r is not None and r.origin == "param" and r.qualname in names:
                        out.append((tuple(passed(a) for a in deferred[1]), {}))
        return out

    def _deferred_call(self, node: ast.Call, scope: _Scope) -> tuple[ast.expr, list[ast.expr]] | None:
        """A call registering a callback the interpreter calls later with the given arguments: the callback
        and those arguments (`weakref.finalize(obj, cb, *args)`, `atexit.register(cb, *args)`)."""
        callee = self.resolve(node.func, scope)
        at = _DEFERRED_CALLERS.get(callee.qualname) if callee is not None and callee.origin == "import" \
            else None
        if at is None or len(node.args) <= at:
            return None
        return node.args[at], list(node.args[at + 1:])

    def returned_maker(self, key: str) -> str | None:
        """The foreign callable whose result the own function `key` returns (`return
        contextlib.redirect_stdout(buf)`: what the object it hands out is), or the foreign object it
        returns; None when all it returns is the contribution's own."""
        for fn in self.functions.get(key, []):
            for value in fn.returns():
                r = self.resolve(value, fn.scope)
                if r is not None and r.qualname.startswith(_OF_FOREIGN):
                    return r.qualname[len(_OF_FOREIGN):-1]
                t = self.tainted(r)
                if t is not None:
                    return t.qualname
        return None

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
                if r is not None and r.origin == "own" and r.qualname in self.functions:
                    local = r  # a function it returns (`f()()` runs it)
        return local

    def _is_relative_load(self, node: ast.Call) -> bool:
        first = _arg(node, 0, "name")
        prefix = _string_prefix(first) if first is not None else None
        return bool(prefix) and prefix is not None and prefix.startswith(".")

    def _loaded_module(self, node: ast.Call, q: str, scope: _Scope | None = None) -> str | None:
        """The module an import_module/__import__ call loads ('x.*' when only a prefix up to a dot is
        literal; '*', any module, when not even that: `'o' + name` may be `os`)."""
        first = _arg(node, 0, "name")
        if first is None:
            return None
        lit = self.constant_string(first, scope) if scope is not None else _dotted_literal(first)
        prefix = _string_prefix(first)
        if lit is not None:
            name = lit
        elif prefix and "." in prefix:
            name = prefix.rpartition(".")[0] + ".*"
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

    def report(self, code: str, node: ast.AST, message: str, *, severity: EscapeSeverity = "error",
               target: str | None = None, lenient: bool = False) -> None:
        line = getattr(node, "lineno", 1) or 1
        col = getattr(node, "col_offset", 0) or 0
        key = (code, line, col, target or message)
        if key in self._found:
            return
        self._found.add(key)
        message = message.replace(f"`{ENGINE_PARAM}.", "`")
        via = next((k for k in sorted(self.reexported, key=len, reverse=True) if target and (
            target == k or target.startswith((k + ".", k + "[")))), None)
        if via is not None:
            message += f" (`{via}` is `{self.reexported[via]}`, re-exported by the contribution's module)"
        self.facts.escapes.append(Escape(code=code, line=line, col=col, message=message,
                                         severity=severity, target=target, path=self.path,
                                         context=self._context(node), lenient=lenient))

    def _parent(self, node: ast.AST) -> ast.AST | None:
        """The node `node` is a child of in this file's tree (None at the module), from one map built
        on first use."""
        if self._parents is None:
            self._parents = {id(c): p for p in ast.walk(self.tree) for c in ast.iter_child_nodes(p)}
        return self._parents.get(id(node))

    def _context(self, node: ast.AST) -> str:
        """The defs, classes and guards around `node`, outermost first (`def f > if X > else`)."""
        parts: list[str] = []
        child, parent = node, self._parent(node)
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
            child, parent = parent, self._parent(parent)
        return " > ".join(reversed(parts))

    def _enclosing_function(self, scope: _Scope) -> str | None:
        """The key of the own function whose body `scope` is (or is nested in: comprehensions)."""
        if self._function_of_scope is None:
            self._function_of_scope = {id(fn.scope): key for key, fns in self.functions.items() for fn in fns}
        s: _Scope | None = scope
        while s is not None and s.kind == "comprehension":
            s = s.parent
        return self._function_of_scope.get(id(s)) if s is not None else None

    def _accessor_of(self, target: str) -> str | None:
        """The engine accessor a dotted target was reached from (`<accessor>().x.y`), if any."""
        head, paren, _ = target.partition("()")
        return head if paren and _matches(head, self.settings.engine_accessors) else None
