"""The escape scan of one file: the resolver and one checker per escape kind, run over the nodes the
binding pass collected; `find_escapes`/`analyse_source` are the pure entry points."""

from __future__ import annotations

import ast

from fasttrack.confinement.escapes.common import (
    _FILE_WRITE_METHODS,
    _INTERPRETER_HOOKS,
    _ITEM_WRITERS,
    _MOCK_PATCH,
    _MODULE_MUTATORS,
    _MUTATORS,
    DYNAMIC_CODE,
    ENVIRONMENT,
    GLOBAL_STATE,
    IMPORTLIB,
    INTERPRETER,
    MONKEYPATCH,
    SETATTR,
    UNPARSEABLE,
    Escape,
    FileFacts,
    _arg,
    _dotted_literal,
    _matches,
    _namespace_of,
    module_name_for,
    mutating_method,
)
from fasttrack.confinement.escapes.dynamic_code import DynamicCodeChecks, runs_source_text
from fasttrack.confinement.escapes.global_state import GlobalStateChecks
from fasttrack.confinement.escapes.monkeypatch import MonkeypatchChecks
from fasttrack.confinement.escapes.registries import RegistryChecks
from fasttrack.confinement.escapes.scope import (
    _BOUND,
    CrossModules,
    Metaclasses,
    Signatures,
    _Ref,
    _Scope,
)
from fasttrack.confinement.escapes.torch_library import TorchLibraryChecks
from fasttrack.policy import EscapesSpec


class Analyser(MonkeypatchChecks, GlobalStateChecks, RegistryChecks, TorchLibraryChecks,
               DynamicCodeChecks):
    """Every checker over one file; `check` dispatches each collected node."""

    def check(self) -> None:
        for node, scope, import_time in self.candidates:
            self._check_namespace_write(node, scope)
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
        self._link_class_keywords()
        self._link_class_getitem()
        self._check_helper_calls()
        self._check_import_time_thread_calls()

    def _link_class_getitem(self) -> None:
        """`C[x]` on an own class runs its (own bases') `__class_getitem__(x)`: an own call there."""
        for node, scope, import_time in self.subscript_loads:
            r = self.resolve(node.value, scope)
            if r is None or r.origin != "own" or r.qualname not in self.classes:
                continue
            keys = self._method_keys(r.qualname, ["__class_getitem__"])
            if not keys:
                continue
            call = ast.copy_location(ast.Call(func=ast.Attribute(value=node.value, attr="__class_getitem__",
                                                                 ctx=ast.Load()), args=[node.slice],
                                              keywords=[]), node)
            self._kept.append(call)
            self.own_calls += [(call, scope, k) for k in keys]
            if import_time:
                self.import_time_calls.add(id(call))

    def _link_class_keywords(self) -> None:
        """A class statement's keywords are arguments of implicit calls: its own bases'
        `__init_subclass__(cls, **kw)` and its own metaclass's `__new__`/`__init__(name, bases, ns, **kw)`.
        Each becomes an own call (at the class statement), so a helper writing through them is judged."""
        for cls, defs in self.classes.items():
            for node, outer in defs:
                meta = next((k.value for k in node.keywords if k.arg == "metaclass"), None)
                kws = [k for k in node.keywords if k.arg != "metaclass"]
                implicit: list[tuple[list[ast.expr], list[str]]] = []
                if kws:
                    bases = [b for b in self._own_bases(cls) if b != cls]
                    hooks = [k for b in bases for k in self._method_keys(b, ["__init_subclass__"])]
                    implicit.append(([], hooks))
                m = self.resolve(meta, outer) if meta is not None else None
                if m is not None and m.origin == "own" and m.qualname in self.classes:
                    bases_tuple = ast.Tuple(elts=list(node.bases), ctx=ast.Load())
                    implicit.append(([ast.Constant(node.name), bases_tuple, ast.Dict(keys=[], values=[])],
                                     self._method_keys(m.qualname, ["__new__", "__init__"])))
                for args, keys in implicit:
                    call = ast.copy_location(ast.Call(func=ast.Name(id=node.name, ctx=ast.Load()), args=args,
                                                      keywords=kws), node)
                    self._kept.append(call)
                    self.own_calls += [(call, outer, k) for k in dict.fromkeys(keys)]

    def _link_callbacks(self, node: ast.Call, scope: _Scope, import_time: bool) -> None:
        """`map(f, xs)`, `filter(f, xs)`, `sorted(xs, key=f)`, `functools.reduce(f, xs)`: the builtin calls
        the own function f with the elements of xs; each becomes an own call `f(*xs)` at this call, so a
        callback writing through its parameter is judged like a helper."""
        callee = self.resolve(node.func, scope)
        if callee is None or callee.origin != "import":
            return
        q = callee.qualname
        deferred = self._deferred_call(node, scope)
        if deferred is not None:  # weakref.finalize(obj, cb, *args): cb(*args), later
            call = ast.copy_location(ast.Call(func=deferred[0], args=deferred[1], keywords=[]), node)
            self._kept.append(call)
            for k in self._callee_keys(call, scope):
                self.own_calls.append((call, scope, k))
                if import_time:
                    self.import_time_calls.add(id(call))
            return
        if q in _CALLBACK_FIRST:
            fns, iterables = node.args[:1], node.args[1:]
        elif q in _CALLBACK_KEY:
            fns, iterables = [], list(node.args)
        else:
            return
        fns = [*fns, *(k.value for k in node.keywords if k.arg == "key")]
        for fn in fns:
            call = ast.copy_location(ast.Call(func=fn, args=[ast.Starred(value=i, ctx=ast.Load())
                                                             for i in iterables], keywords=[]), node)
            self._kept.append(call)
            for k in self._callee_keys(call, scope):
                self.own_calls.append((call, scope, k))
                if import_time:
                    self.import_time_calls.add(id(call))

    def _check_call(self, node: ast.Call, scope: _Scope, import_time: bool) -> None:
        if isinstance(node.func, ast.Call):
            self._check_decorator_application(node, scope)
        keys = self._callee_keys(node, scope)
        for k in keys:
            self.own_calls.append((node, scope, k))
        if keys and import_time:
            self.import_time_calls.add(id(node))
        key = keys[0] if keys else None
        self._link_callbacks(node, scope, import_time)
        self._check_writer_values(node, scope)
        self._check_manual_enter(node, scope)
        self._check_methodcaller(node, scope)
        self._check_thread_start(node, scope, import_time)
        callee = self.resolve(node.func, scope)
        self._check_source_runners(node, callee)
        if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Call):
            sup = self.resolve(node.func.value.func, scope)
            if sup is not None and sup.qualname == "builtins.super":
                return  # super().m(...) runs the base class's method on self, the model's own object
        self._check_engine_instance_call(node, callee, scope)
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
        if callee is not None and callee.origin == "import" and self.is_own(callee.qualname) and \
                isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("update", "setdefault", "__setitem__") and \
                callee.qualname.rpartition(".")[0].endswith(".__dict__"):
            # `m.__dict__.update(x=v)`, `vars(m).setdefault("x", v)`: binds names of another own module
            values = [a.value if isinstance(a, ast.Starred) else a for a in node.args] + \
                [k.value for k in node.keywords]
            self._bind_into_own_import(_Ref("import", callee.qualname.rpartition(".")[0]), values, "*",
                                       f"calls `.{node.func.attr}()` on the namespace of", node, scope)
        if callee is not None and callee.origin in ("own", "import") and \
                (callee.origin == "own" or self.is_own(callee.qualname)) and \
                self._is_metaclass_call(node, callee.qualname, scope):
            self._check_dynamic_class(node, callee.qualname, scope, metaclass=True)  # `class Reg(type)` here
        if isinstance(node.func, ast.Call) and node.args:
            wraps = self.resolve(node.func.func, scope)
            t = self.tainted(self.resolve(node.args[0], scope)) if wraps is not None and \
                wraps.qualname == "functools.wraps" else None
            if t is not None:  # `functools.wraps(g)(target)` is `update_wrapper(target, g)`
                self.report(SETATTR, node, f"`functools.wraps(...)(...)` writes `__name__`, `__doc__`, "
                            f"`__wrapped__`, ... onto `{t.qualname}`, which the contribution does not own",
                            target=t.qualname)
                return
        made = self._made_method(callee)
        if made is not None and not any(e.line == node.lineno and e.col == node.col_offset and
                                        e.code == GLOBAL_STATE for e in self.facts.escapes) and \
                self._check_global_state(node, made, scope, import_time):
            return  # a state-changing method of an object a library call made (judged once)
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

    def _check_engine_instance_call(self, node: ast.Call, callee: _Ref | None, scope: _Scope) -> None:
        """A hook registered on an engine-instance parameter (`layer.register_forward_pre_hook(f)`, also the
        unbound `nn.Module.register_forward_hook(layer, f)`), or its namespace updated with behaviour
        (`layer.__dict__.update(forward=f)`): the engine's own instance changes for every caller."""
        if callee is None or not isinstance(node.func, ast.Attribute):
            return
        method = node.func.attr
        if method.startswith("register_") and "hook" in method:
            obj = node.func.value if callee.origin == "param" else _arg(node, 0)
            cls = self.engine_instance_of(obj, scope) if obj is not None else None
            if cls is not None:
                self.report(MONKEYPATCH, node, f"calls `.{method}()` on an instance of the engine's `{cls}` "
                            "the function was given: a hook on an object the engine owns runs for every "
                            "caller of it", target=f"{cls}.{method}")
            return
        owner = _namespace_of(node.func.value)
        if callee.origin != "param" or owner is None or method not in ("update", "setdefault", "__setitem__"):
            return
        names = [k.arg or "*" for k in node.keywords]
        first = _arg(node, 0)
        if method == "update" and isinstance(first, ast.Dict):
            names += [(_dotted_literal(k) or "*") if k is not None else "*" for k in first.keys]
        elif first is not None:
            names.append("*" if method == "update" else (_dotted_literal(first) or "*"))
        for name in names:
            if self._engine_instance_patch(owner, name, node, scope, "writes"):
                return

    def _check_source_runners(self, node: ast.Call, callee: _Ref | None) -> None:
        """A loader's `exec_module`/`load_module` runs a module's code (from a file the scan cannot read);
        `code.InteractiveInterpreter().runsource(text)` runs source text: fail closed, errors."""
        if callee is None or (callee.origin == "own" and callee.qualname in self.functions):
            return
        name = callee.qualname
        if name.startswith(_BOUND):
            name = name[len(_BOUND):-1]
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("exec_module", "load_module") and \
                (callee.origin != "own"):
            self.report(IMPORTLIB, node, f"calls `.{node.func.attr}()`: a loader runs a module's code that "
                        "cannot be checked statically", target=f".{node.func.attr}")
        elif runs_source_text(name):
            self.report(DYNAMIC_CODE, node, f"calls `{name}`: the `code` module compiles and runs source "
                        "text, which cannot be checked for escapes", target=name)

    def _nested(self, source: str) -> FileFacts:
        return _analyse(source, self.path, self.own_packages, self.module, self.is_package, self.own_ops,
                        self.settings, self.exec_depth + 1, self.foreign_ops, self.signatures, self.cross,
                        self.metaclasses)

    def _check_partial(self, node: ast.Call, scope: _Scope, import_time: bool) -> None:
        """`functools.partial(f, *a, **kw)` is judged as the call `f(*a, **kw)` it prepares."""
        fake = ast.Call(func=node.args[0], args=list(node.args[1:]), keywords=list(node.keywords))
        ast.copy_location(fake, node)
        self._check_call(fake, scope, import_time)


# builtins that call their first argument with the elements of the others, or a `key=` with the elements
_CALLBACK_FIRST = frozenset({"builtins.map", "builtins.filter", "functools.reduce", "itertools.starmap",
                             "itertools.filterfalse", "itertools.takewhile", "itertools.dropwhile"})
_CALLBACK_KEY = frozenset({"builtins.sorted", "builtins.min", "builtins.max", "itertools.groupby",
                           "heapq.nsmallest", "heapq.nlargest"})


def _analyse(source: str, path: str, own_packages: set[str], module: str | None, is_package: bool,
             own_op_namespaces: set[str], settings: EscapesSpec, exec_depth: int,
             foreign_op_namespaces: frozenset[str] = frozenset(),
             signatures: Signatures | None = None, cross: CrossModules | None = None,
             metaclasses: Metaclasses | None = None) -> FileFacts:
    try:
        # the summary of the contribution's modules reads this file's tree too: parsed once
        tree = cross.parse(source) if cross is not None and exec_depth == 0 else \
            ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None) or 1
        msg = getattr(exc, "msg", None) or str(exc)
        return FileFacts(escapes=[Escape(UNPARSEABLE, max(int(line), 1),
                                         f"does not parse ({msg}), so it cannot be checked for escapes",
                                         path=path)])
    except RecursionError:
        return FileFacts(escapes=[Escape(UNPARSEABLE, 1, "is nested too deeply to parse, so it cannot be "
                                         "checked for escapes", path=path)])
    analyser = Analyser(tree, path, own_packages, module, is_package, own_op_namespaces, settings,
                         exec_depth, foreign_op_namespaces, signatures, cross, metaclasses)
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
                   settings: EscapesSpec | None = None, signatures: Signatures | None = None,
                   cross: CrossModules | None = None, metaclasses: Metaclasses | None = None) -> FileFacts:
    """Escapes and imported modules of one file. `module` (the file's dotted name, defaulting to one
    derived from `path`) places relative imports; without it they count as the contribution's own.
    `signatures`: the engine's method parameters (engine_signatures.py), so an override's parameters are
    tainted by position too; without it only by name and annotation. `cross`: the contribution's other
    modules (cross_module.py), so a name imported from one of them is what that module binds it to.
    `metaclasses`: whether a class the file calls derives from `type` (engine_signatures.py), so a plain
    class named `*Meta` is not taken for a metaclass; without it the name decides."""
    if module is None:
        module = module_name_for(path)
    is_package = path.endswith("__init__.py")
    return _analyse(source, path, set(own_packages), module, is_package, set(own_op_namespaces or ()),
                    settings or EscapesSpec(), 0, frozenset(foreign_op_namespaces or ()), signatures, cross,
                    metaclasses)


def find_escapes(source: str, path: str, own_packages: set[str], *, module: str | None = None,
                 own_op_namespaces: set[str] | None = None, foreign_op_namespaces: set[str] | None = None,
                 settings: EscapesSpec | None = None, signatures: Signatures | None = None,
                 metaclasses: Metaclasses | None = None) -> list[Escape]:
    """Every escape in `source` (the text of `path`), ordered by line. Never raises on bad source.

    `own_packages`: dotted packages that are the contribution's own (writes into them are fine).
    `own_op_namespaces`: torch op namespaces the contribution owns (e.g. {"kimi_k3"}); namespaces
    `<own>_*` are own too unless listed in `foreign_op_namespaces` (other models' names).
    `module`: the file's dotted module name, to place relative imports (default: from `path`).
    """
    return analyse_source(source, path, own_packages, module=module, own_op_namespaces=own_op_namespaces,
                          foreign_op_namespaces=foreign_op_namespaces, settings=settings,
                          signatures=signatures, metaclasses=metaclasses).escapes
