"""References to the interpreter's ways of reaching objects a file does not own (every live object through
`gc`, the frames of its callers, tracing hooks, raw memory through `ctypes`), found by name, whatever is
done with what they return.

The escape scan (`fasttrack.confinement.escapes`) reports a write through what such a call returns when it
can follow the value. In a file `fasttrack collect` runs (the contribution's tests, benchmark, evals), what
they return is the evidence harness's own records, so there the mere reference is a finding: a module
handed to a helper (`f(gc)`), a name chosen at run time (`importlib.import_module(name)`,
`operator.methodcaller(name)`), or a string naming one (`getattr(gc, "get_objects")`) cannot be followed,
and fails closed. Honest benchmark calls (`gc.collect()`, `gc.disable()`, `inspect.signature`) stay clean.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass

# Modules whose every attribute reaches foreign objects, except the few listed as safe.
_WHOLE_MODULES = {"gc": frozenset({"collect", "disable", "enable", "isenabled", "get_count", "get_threshold",
                                   "set_threshold", "freeze", "unfreeze", "get_freeze_count", "get_stats",
                                   "get_debug", "set_debug", "DEBUG_STATS", "DEBUG_COLLECTABLE",
                                   "DEBUG_UNCOLLECTABLE", "DEBUG_SAVEALL", "DEBUG_LEAK"}),
                  "ctypes": frozenset(), "_ctypes": frozenset()}
# Names in other modules that reach foreign objects.
_REACH_NAMES = frozenset({
    "sys._getframe", "sys._current_frames", "sys._current_exceptions", "sys.settrace", "sys.setprofile",
    "sys.addaudithook", "sys.monitoring", "sys.exc_info", "sys.exception", "sys.last_traceback",
    "inspect.currentframe", "inspect.stack", "inspect.trace", "inspect.getouterframes",
    "inspect.getinnerframes", "threading.settrace", "threading.setprofile", "threading.settrace_all_threads",
    "threading.setprofile_all_threads", "traceback.walk_stack", "traceback.walk_tb", "asyncio.all_tasks",
    "builtins.__import__", "importlib.__import__", "importlib.import_module", "importlib.util.find_spec",
    "importlib.util.module_from_spec", "builtins.globals", "builtins.vars", "builtins.eval", "builtins.exec",
})
# Modules a file may hold as a plain value only at the cost of a finding (their attributes are picked at
# run time then): the whole-module ones and those holding one of the names above.
_VALUE_MODULES = frozenset({*_WHOLE_MODULES, "sys", "inspect", "traceback", "builtins", "importlib",
                            "importlib.util", "threading", "asyncio"})
# Attributes of frames, tracebacks, generators and coroutines leading to other code's frames and locals.
_FRAME_ATTRS = frozenset({"f_back", "f_locals", "f_globals", "f_builtins", "tb_frame", "gi_frame", "cr_frame",
                          "ag_frame", "__traceback__"})
# Calls that are fine with literal arguments naming nothing above (`importlib.import_module("json")`).
_LITERAL_OK = frozenset({"importlib.import_module", "builtins.__import__", "importlib.__import__",
                         "importlib.util.find_spec"})
# (`getattr(obj, name)` with a computed name is not one: the object it picks from had to be named first,
# and a reach module named as a value is a finding itself.)
_NAME_PICKERS = frozenset({"operator.methodcaller", "operator.attrgetter"})
_STRINGS = frozenset({n.rpartition(".")[2] for n in _REACH_NAMES if not n.startswith("builtins.")}
                     | _FRAME_ATTRS
                     | {"get_objects", "get_referrers", "get_referents", "garbage", "callbacks"}
                     | set(_WHOLE_MODULES))
_MODULE_ALIASES = {"_thread": "threading", "_imp": "importlib", "_operator": "operator"}


@dataclass(frozen=True)
class Reach:
    line: int
    what: str  # the name reached, e.g. `gc.get_objects`, `<computed import>`
    how: str


def _bindings(tree: ast.AST) -> dict[str, set[str]]:
    """Every name the file binds by import, anywhere (flow-insensitive), to the dotted names it may hold."""
    out: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                full = _canon(a.name)
                out.setdefault(a.asname or a.name.split(".")[0], set()).add(full if a.asname else
                                                                           full.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                out.setdefault(a.asname or a.name, set()).add(f"{_canon(node.module)}.{a.name}")
    return out


def _canon(name: str) -> str:
    top, dot, rest = name.partition(".")
    return _MODULE_ALIASES.get(top, top) + dot + rest


def _dotted(node: ast.AST, binds: dict[str, set[str]]) -> set[str]:
    if isinstance(node, ast.Name):
        held = binds.get(node.id)
        if held:
            return held
        return {f"builtins.{node.id}"} if node.id in ("__import__", "getattr", "globals", "vars", "eval",
                                                       "exec") else set()
    if isinstance(node, ast.Attribute):
        return {f"{d}.{node.attr}" for d in _dotted(node.value, binds)}
    return set()


def _is_reach(name: str) -> bool:
    parts = name.split(".")
    if parts[0] in _WHOLE_MODULES:
        return len(parts) == 1 or parts[1] not in _WHOLE_MODULES[parts[0]]
    return any(name == r or name.startswith(r + ".") for r in _REACH_NAMES)


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def find_reach(source: str) -> list[Reach]:
    """Every reference in `source` to a way of reaching objects it does not own (see the module doc)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # the escape scan reports the file as one it cannot check
    binds = _bindings(tree)
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    out: list[Reach] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            mod = _canon(node.module)
            for a in node.names:
                if a.name == "*" and (mod in _VALUE_MODULES):
                    out.append(Reach(line, f"{mod}.*", f"imports every name of `{mod}`"))
                elif a.name != "*" and _is_reach(f"{mod}.{a.name}"):
                    out.append(Reach(line, f"{mod}.{a.name}", f"imports `{mod}.{a.name}`"))
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                if _canon(a.name).split(".")[0] in ("ctypes", "_ctypes"):
                    out.append(Reach(line, _canon(a.name), f"imports `{a.name}`"))
            continue
        if isinstance(node, ast.Attribute) and node.attr in _FRAME_ATTRS:
            out.append(Reach(line, f"<frame>.{node.attr}", f"reads `.{node.attr}` (another frame's state)"))
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in _STRINGS:
            out.append(Reach(line, f"'{node.value}'", f"names `{node.value}` in a string (for `getattr`, "
                                                      "`methodcaller`, `sys.modules` or an import)"))
            continue
        if isinstance(node, ast.Call):
            for fn in _dotted(node.func, binds):
                first = _literal(node.args[0]) if node.args else None
                if fn in _LITERAL_OK and node.args and first is None and not _fixed_package(node.args[0]):
                    out.append(Reach(line, "<computed import>", f"calls `{fn}()` with a module name computed "
                                                                "at run time"))
                elif fn in _NAME_PICKERS and (not node.args or any(_literal(a) is None for a in node.args)):
                    out.append(Reach(line, "<computed name>", f"calls `{fn}()` with an attribute name "
                                                              "computed at run time"))
            continue
        if not isinstance(node, ast.Name | ast.Attribute):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Attribute):
            continue  # judged as part of the longer name
        for name in _dotted(node, binds):
            if name in ("builtins.getattr",):
                continue
            if _is_reach(name) and not (name in _LITERAL_OK and isinstance(parent, ast.Call)
                                        and parent.func is node):
                out.append(Reach(line, name, f"uses `{name}`"))
            elif name in _VALUE_MODULES and not (isinstance(parent, ast.Call) and parent.func is node):
                out.append(Reach(line, name, f"hands the module `{name}` on as a value (its attributes are "
                                             "then picked where they cannot be followed)"))
            elif name.startswith("sys.modules.") and not (
                    name == "sys.modules.get" and isinstance(parent, ast.Call) and parent.func is node
                    and parent.args and _literal(parent.args[0]) is not None):
                out.append(Reach(line, name, f"uses `{name}` (it reaches `gc`, `ctypes` and the harness's "
                                             "modules by a name the scan cannot read)"))
            elif name == "sys.modules" and not _literal_lookup(node, parent):
                out.append(Reach(line, name, "walks or indexes `sys.modules` with a key computed at run "
                                             "time (it holds `gc`, `ctypes` and the harness's modules)"))
    return sorted(set(out), key=lambda r: (r.line, r.what))


def _fixed_package(node: ast.AST) -> bool:
    """`f"pkg.sub.{name}"` or `"pkg.sub." + name`: a computed module name under a fixed package, which
    cannot name `gc` or `ctypes` (`importlib.import_module(f"baselines.stock_ops.{m}")`)."""
    head: ast.AST | None = None
    if isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        head = node.left
    lead = _literal(head) if head is not None else None
    return lead is not None and "." in lead and lead.split(".")[0] not in _VALUE_MODULES


def _literal_lookup(node: ast.AST, parent: ast.AST | None) -> bool:
    """`sys.modules["x"]`, `sys.modules.get("x")`, `"x" in sys.modules`: a lookup of a named module."""
    if isinstance(parent, ast.Subscript) and parent.value is node:
        return _literal(parent.slice) is not None
    if isinstance(parent, ast.Compare):
        return all(isinstance(op, ast.In | ast.NotIn) for op in parent.ops)
    return False


def new_reach(head: list[Reach], base: list[Reach] | None) -> list[Reach]:
    """The head's references the base revision did not have (matched by what they reach, one for one)."""
    if not base:
        return head
    left = Counter(r.what for r in base)
    out = []
    for r in head:
        if left[r.what]:
            left[r.what] -= 1
        else:
            out.append(r)
    return out
