"""The vocabulary of the escape scan: stable FT codes, what a finding is (`Escape`, `FileFacts`), the tables
of names the checkers judge, and small pure helpers over `ast` nodes and dotted names."""

from __future__ import annotations

import ast
import builtins
import fnmatch
import functools
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

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
}) | frozenset(f"__i{op}__" for op in ("add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow",
                                        "lshift", "rshift", "and", "xor", "or", "concat"))
# The operator module's in-place functions: `operator.iadd(a, b)` is `a += b`, judged as `a.__iadd__(b)`.
_OPERATOR_INPLACE = {f"operator.{p}{op}{s}": f"__i{'add' if op == 'concat' else op}__"
                     for op in ("add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow", "lshift",
                                "rshift", "and", "xor", "or", "concat")
                     for p, s in (("i", ""), ("__i", "__"))}




# The dotted head of a parameter the engine fills with its own object (policy `engine_parameter_names` /
# `engine_parameter_types`): `~param.vllm_config.model_config.hf_config` is what `vllm_config.model_config.
# hf_config` refers to in model code. Not a module name, so never the contribution's own.
ENGINE_PARAM = "~param"
# Appended to a method's key in `FileFacts.param_writers`/`foreign_calls`: the positions are as a call on an
# instance fills them (`K().put(v)`, `K()[k] = v` running `__setitem__(k, v)`), self left out. The bare key
# of a method is how a call on its class fills it (`K.put(obj, v)`; a static or class method: as is).
ON_INSTANCE = "@"
# C modules that are other names for a stdlib module (`posix.putenv` is `os.putenv`).
_MODULE_ALIASES = {
    "posix": "os", "nt": "os", "_posixsubprocess": "subprocess", "_signal": "signal", "_thread": "threading",
    "_warnings": "warnings", "_locale": "locale", "_codecs": "codecs", "_pickle": "pickle",
    "_socket": "socket", "_io": "io", "_imp": "importlib", "_operator": "operator", "_functools": "functools",
}


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



_THREAD_MAKERS = ("threading.Thread", "threading.Timer", "concurrent.futures.*Executor",
                  "concurrent.futures.thread.*", "multiprocessing.pool.ThreadPool", "multiprocessing.dummy.*")
_THREAD_STARTS = frozenset({"start", "submit", "map", "run", "apply_async", "map_async", "imap",
                            "imap_unordered", "starmap", "starmap_async", "apply"})
# Objects of the stdlib whose attributes are process- (or thread-) wide state: writes are FT146.
_STATE_OBJECTS = ("decimal.context", "threading.current_thread()", "threading.main_thread()",
                  "asyncio.get_event_loop()", "asyncio.get_running_loop()", "asyncio.get_event_loop_policy()",
                  "multiprocessing.current_process()")
# Calls returning a process-wide (or thread-wide) singleton: the object they return is shared state, so an
# attribute or item written on it (`threading.current_thread().name = ...`, a loop's
# `slow_callback_duration`) is FT146. Each is named `<call>()` (the policy's `*().method` patterns).
_SINGLETON_CALLS = {
    "threading.current_thread": "threading.current_thread()", "threading.currentThread":
    "threading.current_thread()", "threading.main_thread": "threading.main_thread()",
    "asyncio.get_event_loop": "asyncio.get_event_loop()", "asyncio.events.get_event_loop":
    "asyncio.get_event_loop()", "asyncio.get_running_loop": "asyncio.get_running_loop()",
    "asyncio.events.get_running_loop": "asyncio.get_running_loop()",
    "asyncio.get_event_loop_policy": "asyncio.get_event_loop_policy()",
    "multiprocessing.current_process": "multiprocessing.current_process()",
}
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
    "builtins.dict.fromkeys", "collections.ChainMap", "collections.OrderedDict", "collections.defaultdict",
    "collections.deque", "collections.UserDict", "collections.UserList", "functools.reduce",
    "types.MappingProxyType", "weakref.WeakValueDictionary", "weakref.WeakKeyDictionary", "weakref.WeakSet",
})
# Methods of a container returning its elements (or a view of them).
_ELEMENT_METHODS = frozenset({"values", "items", "keys", "get", "pop", "copy", "setdefault", "popitem",
                              "__getitem__", "__iter__", "__next__", "popleft", "get_nowait"})
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


def mutating_method(name: str) -> bool:
    """Whether a method of that name changes its receiver: a container method, one of `_OBJECT_MUTATORS`,
    or torch's in-place convention (`zero_`, `copy_`, `fill_`: a trailing underscore, not a dunder)."""
    return name in _MUTATORS or name in _OBJECT_MUTATORS or (
        name.endswith("_") and not name.endswith("__") and name.strip("_") != "")


# Modules other modules import and so carry as an attribute (`inspect.os`, `torch.os`, `tempfile._os`): a
# dotted name through one of them is that module's (`inspect.os.putenv` is `os.putenv`). The first set
# re-roots under any foreign package, the second only under a stdlib module (torch.signal is torch's own).
_CARRIED_ANYWHERE = frozenset({"os", "sys", "builtins", "_os", "_sys", "posix", "importlib"})
_CARRIED_BY_STDLIB = frozenset({"subprocess", "signal", "ctypes", "gc", "threading", "shutil", "socket",
                                "atexit", "warnings", "_thread", "_warnings", "multiprocessing", "site"})
_STDLIB = frozenset(sys.stdlib_module_names)
# Callables that are other names of one another (`importlib.__import__` is `__import__`).
_SAME_CALLABLE = {"importlib.__import__": "builtins.__import__",
                  "importlib._bootstrap.__import__": "builtins.__import__"}


def carried_module(name: str) -> str:
    """`name` re-rooted at a module it reaches as another module's attribute (see `_CARRIED_ANYWHERE`)."""
    if name in _SAME_CALLABLE:
        return _SAME_CALLABLE[name]
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        p = parts[i]
        if p in _CARRIED_ANYWHERE or (p in _CARRIED_BY_STDLIB and parts[0] in _STDLIB):
            if p == "importlib" and parts[0] == "importlib":
                continue
            if parts[i - 1].lstrip("_") == p.lstrip("_"):
                continue  # the module's own attribute of its name (`signal.signal`, `socket.socket`)
            top = p.lstrip("_") if p in ("_os", "_sys") else p
            return _canonical_module(".".join([top, *parts[i + 1:]]))
    return name


def _canonical_module(name: str) -> str:
    top, dot, rest = name.partition(".")
    return _MODULE_ALIASES[top] + dot + rest if top in _MODULE_ALIASES else name


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


@functools.lru_cache(maxsize=1024)
def _one_pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(pattern))


class _PatternSet:
    """A list of fnmatch patterns, matched as `fnmatch.fnmatchcase` against any of them would, without
    compiling all of them into one regex up front (the policy's lists hold up to 239 patterns: compiling
    them was ~0.1 s of a cold verify). A pattern without `*`, `?` or `[` is the name itself; a pattern with
    one is compiled on first use, and tried only on names that start with its literal prefix (the text
    before its first wildcard, which fnmatch matches literally), found by the prefix's first dotted part."""

    __slots__ = ("by_head", "exact", "loose")

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.exact: set[str] = set()
        self.by_head: dict[str, list[tuple[str, str]]] = {}  # first dotted part of the prefix -> patterns
        self.loose: list[tuple[str, str]] = []  # prefixes without a dot: tried on every name
        for p in patterns:
            cut = next((i for i, c in enumerate(p) if c in "*?["), -1)
            if cut < 0:
                self.exact.add(p)
                continue
            prefix = p[:cut]
            head, dot, _ = prefix.partition(".")
            (self.by_head.setdefault(head, []) if dot else self.loose).append((prefix, p))

    def match(self, name: str) -> bool:
        if name in self.exact:
            return True
        for prefix, p in (*self.by_head.get(name.partition(".")[0], ()), *self.loose):
            if name.startswith(prefix) and _one_pattern(p).match(name) is not None:
                return True
        return False


@functools.lru_cache(maxsize=64)
def _pattern(patterns: tuple[str, ...]) -> _PatternSet:
    return _PatternSet(patterns)


def _matches(name: str, patterns: Sequence[str]) -> bool:
    """Whether a dotted name matches any fnmatch pattern (`*` spans dots)."""
    return _pattern(tuple(patterns)).match(name)


def _namespace_of(node: ast.expr) -> ast.expr | None:
    """The object whose attribute namespace `node` is (`x.__dict__`, `vars(x)`), or None."""
    if isinstance(node, ast.Attribute) and node.attr == "__dict__":
        return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars" and \
            len(node.args) == 1 and not node.keywords:
        return node.args[0]
    return None


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

