"""The escape scan of one file: the resolver and one checker per escape kind, run over the nodes the
binding pass collected; `find_escapes`/`analyse_source` are the pure entry points."""

from __future__ import annotations

import ast
import functools

from fasttrack.confinement.escapes.common import (
    _FILE_WRITE_METHODS,
    _INTERPRETER_HOOKS,
    _ITEM_WRITERS,
    _MOCK_PATCH,
    _MODULE_MUTATORS,
    _MUTATORS,
    _OPERATOR_INPLACE,
    _STDLIB,
    DYNAMIC_CODE,
    ENVIRONMENT,
    GLOBAL_STATE,
    IMPORTLIB,
    INTERPRETER,
    MONKEYPATCH,
    ON_INSTANCE,
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
from fasttrack.confinement.escapes.explicit_self import ExplicitSelfChecks
from fasttrack.confinement.escapes.global_state import GlobalStateChecks
from fasttrack.confinement.escapes.monkeypatch import MonkeypatchChecks
from fasttrack.confinement.escapes.named import NamedResolution
from fasttrack.confinement.escapes.registries import RegistryChecks
from fasttrack.confinement.escapes.scope import (
    _BOUND,
    _INSTANCE,
    CrossModules,
    Metaclasses,
    Signatures,
    _Alias,
    _Ref,
    _Scope,
)
from fasttrack.confinement.escapes.torch_library import TorchLibraryChecks
from fasttrack.confinement.escapes.transformers import StdlibEffectChecks, callable_name
from fasttrack.policy import EscapesSpec

# builtins calling a callback (the first argument, or the `key`) with each element of an iterable
_CALLBACK_TAKERS = frozenset({"builtins.map", "builtins.filter", "builtins.sorted", "builtins.min",
                              "builtins.max"})


class Analyser(StdlibEffectChecks, NamedResolution, MonkeypatchChecks, GlobalStateChecks, RegistryChecks,
               TorchLibraryChecks, DynamicCodeChecks, ExplicitSelfChecks):
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
        self._link_protocols()
        self._record_self_writes()
        self._check_helper_calls()
        self._check_explicit_self()
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

    def _own_instance_class(self, node: ast.expr, scope: _Scope) -> str | None:
        """The own class (of this file, or of another own module: `_link_dunder` judges that across files)
        `node` is an instance of, or None."""
        r = self.resolve(node, scope)
        if r is None or r.origin != "local" or not r.qualname.startswith(_INSTANCE):
            return None
        cls = r.qualname[len(_INSTANCE):-1]
        return cls if cls in self.classes or self._other_module_class(cls) else None

    def _other_module_class(self, cls: str) -> bool:
        """`cls` is a class of another of the contribution's modules (a cross-module summary made its
        instance)."""
        return self.cross is not None and cls not in self.classes and self.is_own(cls) and \
            not cls.startswith("<")

    def _check_other_module_method(self, node: ast.Call, scope: _Scope) -> None:
        """`K().put(v)` on an instance of another own module's class: judged across files against that
        module's method writers (`ON_INSTANCE`: positions as a call on an instance fills them); handed as
        the callback of `map` / `filter` or the key of `sorted` / `min` / `max`, it is called with each
        element of the iterable."""
        func = node.func
        taker = callable_name(self.resolve(func, scope)) if isinstance(func, ast.Name) else None
        if taker in _CALLBACK_TAKERS:
            cb = _arg(node, 0) if taker in ("builtins.map", "builtins.filter") else \
                next((k.value for k in node.keywords if k.arg == "key"), None)
            items = node.args[1] if taker in ("builtins.map", "builtins.filter") and len(node.args) > 1 \
                else node.args[0] if taker not in ("builtins.map", "builtins.filter") and node.args else None
            if cb is not None and items is not None and not isinstance(items, ast.Starred):
                first = ast.Subscript(value=items, slice=ast.Constant(0), ctx=ast.Load())
                elem = ast.copy_location(first, items)
                call = ast.copy_location(ast.Call(func=cb, args=[elem], keywords=[]), node)
                self._kept.append(call)
                self._check_other_module_method(call, scope)
            return
        receiver, attr = (func.value, func.attr) if isinstance(func, ast.Attribute) else (None, None)
        if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "getattr" and \
                len(func.args) >= 2 and not func.keywords and \
                callable_name(self.resolve(func.func, scope)) == "builtins.getattr":
            receiver, attr = func.args[0], self.constant_string(func.args[1], scope)  # getattr(K(), 'put')
        at = scope
        if isinstance(func, ast.Name):  # `p = K().put`, then `p(v)`: the one binding of the name
            bindings = self._lookup(func.id, scope) or []
            bound = bindings[0] if len(bindings) == 1 else None
            if isinstance(bound, _Alias) and isinstance(bound.value, ast.Attribute):
                receiver, attr, at = bound.value.value, bound.value.attr, bound.scope
        if receiver is not None and attr:
            cls = self._own_instance_class(receiver, at)
            held = self.resolve(receiver, at) if cls is None else None
            if held is not None and held.origin == "import" and self.is_own(held.qualname) and \
                    self.cross is not None:
                cls = self.cross.instance_class(held.qualname, self.module)  # its `k = K()`
            if cls is not None and cls not in self.classes:
                self._record_foreign_call(node, f"{cls}.{attr}{ON_INSTANCE}", scope)

    def _link_dunder(self, at: ast.AST, scope: _Scope, import_time: bool, cls: str | None, names: list[str],
                     args: list[ast.expr], keywords: list[ast.keyword] | None = None) -> None:
        """Operator syntax on an instance of an own class runs its dunder (the first of `names` it defines)
        with these arguments: an own call at `at`, so a dunder writing through its parameter is judged like
        any helper (FT120) where the engine object is handed to it."""
        if cls is None:
            return
        if cls not in self.classes:  # another own module's class: judged across files, as its dunders
            call = ast.copy_location(ast.Call(func=ast.Name(id=f"<{names[0]}>", ctx=ast.Load()), args=args,
                                              keywords=keywords or []), at)
            self._kept.append(call)
            for n in names:
                self._record_foreign_call(call, f"{cls}.{n}{ON_INSTANCE}", scope)
            return
        keys = next((k for n in names if (k := self._method_keys(cls, [n]))), [])
        if not keys:
            return
        call = ast.copy_location(ast.Call(func=ast.Name(id=f"<{names[0]}>", ctx=ast.Load()), args=args,
                                          keywords=keywords or []), at)
        self._kept.append(call)
        self.own_calls += [(call, scope, k) for k in keys]
        if import_time:
            self.import_time_calls.add(id(call))

    def _link_protocols(self) -> None:
        """The implicit calls of operator syntax on instances of own classes: `o[k] = v` runs
        `__setitem__(k, v)`, `o.a = v` `__setattr__('a', v)` (and an own descriptor's `__set__(o, v)`, a
        property's setter), `o += v` `__iadd__(v)`, `a == b` `__eq__` (either side), `v in o`
        `__contains__(v)`, `a + b` `__add__`/`__radd__`, `o(v)` `__call__(v)`, `with o:` `__enter__()` and
        `__exit__(t, e, tb)` (e: any exception this file raises, fail closed, linked at each raise). Each is
        linked as an own call, so a dunder that writes through its parameter makes handing it an engine
        object the write (FT120)."""
        for node, scope, import_time in self.protocol_sites:
            link = functools.partial(self._link_dunder, node, scope, import_time)
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                for a, op, b in zip(operands, node.ops, operands[1:], strict=False):
                    if isinstance(op, ast.In | ast.NotIn):
                        link(self._own_instance_class(b, scope), ["__contains__"], [a])
                    elif type(op) in _COMPARE_DUNDERS:
                        forward, reflected = _COMPARE_DUNDERS[type(op)]
                        link(self._own_instance_class(a, scope), forward, [b])
                        link(self._own_instance_class(b, scope), reflected, [a])
            elif isinstance(node, ast.BinOp | ast.AugAssign):
                name = _BINOP_NAMES.get(type(node.op))
                if name is None:
                    continue
                left, right = (node.left, node.right) if isinstance(node, ast.BinOp) else \
                    (node.target, node.value)
                names = [f"__{name}__"] if isinstance(node, ast.BinOp) else [f"__i{name}__", f"__{name}__"]
                link(self._own_instance_class(left, scope), names, [right])
                link(self._own_instance_class(right, scope), [f"__r{name}__"], [left])
            elif isinstance(node, ast.With | ast.AsyncWith):
                enter, leave = ("__enter__", "__exit__") if isinstance(node, ast.With) else \
                    ("__aenter__", "__aexit__")
                for item in node.items:
                    cls = self._own_instance_class(item.context_expr, scope)
                    if cls is None:
                        continue
                    link(cls, [enter], [])
                    for exc, exc_scope in self.raised:  # (at the raise: what it carries is handed over)
                        self._link_dunder(exc, exc_scope, import_time, cls, [leave],
                                          [ast.Constant(None), self._raised_parts(exc, exc_scope),
                                           ast.Constant(None)])
        for node, scope, import_time in self.candidates:
            link = functools.partial(self._link_dunder, node, scope, import_time)
            if isinstance(node, ast.Call) and not isinstance(node.func, ast.Attribute):
                link(self._own_instance_class(node.func, scope), ["__call__"], list(node.args),
                     list(node.keywords))
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
                values = self._stored_values(node) if isinstance(node.ctx, ast.Store) else []
                cls = self._own_instance_class(node.value, scope)
                if isinstance(node.ctx, ast.Del):
                    link(cls, ["__delitem__"], [node.slice])
                for v in values or ([] if isinstance(node.ctx, ast.Del) else [ast.Constant(None)]):
                    link(cls, ["__setitem__"], [node.slice, v])
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                values = self._stored_values(node) or []
                cls = self._own_instance_class(node.value, scope)
                if cls is None and isinstance(node.value, ast.Name) and node.value.id == "self":
                    cls = self._enclosing_class(scope)  # `self.a = v` in a method runs its `__setattr__`
                for v in values:
                    link(cls, ["__setattr__"], [ast.Constant(node.attr), v])
                    if cls is not None:  # a property's setter (any own def of that name takes `v`)
                        link(cls, [node.attr], [v])
                    for held, hscope, setter in self.attr_stores.get(node.attr, []):
                        if setter is None:  # a class body's `d = D()`: D's `__set__(o, v)`
                            link(self._own_instance_class(held, hscope), ["__set__"], [node.value, v])

    def _raised_parts(self, exc: ast.expr, scope: _Scope) -> ast.expr:
        """A tuple of what a raised exception carries (what an `__exit__` is handed as `e`, `e.args`)."""
        parts = [a.value if isinstance(a, ast.Starred) else a for a in exc.args] + \
            [k.value for k in exc.keywords] if isinstance(exc, ast.Call) else [exc]
        tup = ast.Tuple(elts=parts, ctx=ast.Load())
        self._kept.append(tup)
        return tup

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
        self._check_other_module_method(node, scope)
        self._check_writer_values(node, scope)
        self._check_manual_enter(node, scope)
        self._check_native_memory(node, scope)
        self._check_methodcaller(node, scope)
        self._check_thread_start(node, scope, import_time)
        callee = self.resolve(node.func, scope)
        self._check_source_runners(node, callee)
        self._check_stdlib_effects(node, callee, scope, import_time)
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
                # `W(v)` of another own module's class runs its `__init__(self, v)`
                instance = self.resolve(node, scope)
                if instance is not None and instance.qualname == f"{_INSTANCE}{callee.qualname}>":
                    self._record_foreign_call(node, f"{callee.qualname}.__init__{ON_INSTANCE}", scope)
            return
        q = callee.qualname
        receiver, _, method = q.rpartition(".")
        if method == "*" and not self.is_own(receiver):
            self.report(GLOBAL_STATE, node, f"calls an attribute of `{receiver}` chosen by a computed name "
                        "(`getattr(m, <computed>)(...)`): what it calls cannot be checked", target=q)
            return
        if self._computed_module_part(receiver):
            self.report(GLOBAL_STATE, node, f"calls `.{method}()` on `{receiver}`, reached through a name "
                        "the scan cannot fold (`getattr(sys, <computed>)`, a module loaded by a computed "
                        "name): what it changes cannot be checked", target=q)
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
        if q in _OPERATOR_INPLACE and len(node.args) == 2 and not any(
                isinstance(a, ast.Starred) for a in node.args):
            # `operator.iadd(sys.path, x)` is `sys.path += x`: judged as the call `sys.path.__iadd__(x)`
            dunder = ast.Attribute(value=node.args[0], attr=_OPERATOR_INPLACE[q], ctx=ast.Load())
            fake = ast.copy_location(ast.Call(func=dunder, args=[node.args[1]], keywords=[]), node)
            self._kept.append(fake)
            self._check_call(fake, scope, import_time)
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
        if receiver and (method in _MUTATORS or (mutating_method(method) and (
                self._engine_state(receiver) or self._state_object(receiver) or
                _unbound_receiver(receiver)))) and \
                self._check_mutator(node, receiver, method, import_time, scope):
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

    def _computed_module_part(self, receiver: str) -> bool:
        """`sys.*` (`getattr(sys, <computed>)`): an attribute chosen by a computed name of a module (imported
        as one, or a stdlib module), which may be any of its state. (A module loaded by a computed name is
        FT126 where it is loaded.)"""
        parts = receiver.split(".")
        if "*" not in parts[1:] or self.is_own(receiver):
            return False
        head = ".".join(parts[:parts.index("*", 1)])
        return head in self.module_imports or head.split(".")[0] in _STDLIB

    def _check_engine_instance_call(self, node: ast.Call, callee: _Ref | None, scope: _Scope) -> None:
        """A hook registered on an engine-instance parameter (`layer.register_forward_pre_hook(f)`, also the
        unbound `nn.Module.register_forward_hook(layer, f)`), or its namespace updated with behaviour
        (`layer.__dict__.update(forward=f)`): the engine's own instance changes for every caller."""
        if callee is not None and callee.origin == "import" and _matches(callee.qualname, _MODULE_REWRITERS):
            first = _arg(node, 0, "module")
            cls = self.engine_instance_of(first, scope) if first is not None else None
            if cls is not None:
                self.report(MONKEYPATCH, node, f"calls `{callee.qualname}` on an instance of the engine's "
                            f"`{cls}` the function was given: it rewrites that module in place (its "
                            "parameters, forward or class), an object the engine owns", target=f"{cls}.*")
                return
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


def _unbound_receiver(receiver: str) -> bool:
    """A class a method is looked up on (`list.__iadd__(xs, ...)`, `OrderedDict.move_to_end(d, k)`): the
    method mutates its first argument (judged by `_check_mutator`)."""
    last = receiver.rsplit(".", 1)[-1]
    return receiver.startswith("builtins.") or (last[:1].isupper() and not last.isupper())


# torch functions that rewrite the module they are given in place (its parameters, class or forward)
_MODULE_REWRITERS = ("torch.nn.utils.parametrize.*", "torch.nn.utils.parametrizations.*",
                     "torch.nn.utils.weight_norm", "torch.nn.utils.spectral_norm",
                     "torch.nn.utils.remove_*_norm", "torch.nn.utils.prune.*", "torch.nn.utils.*.weight_norm",
                     "torch.nn.utils.*.spectral_norm", "torch.ao.quantization.*", "torch.quantization.*")

# comparison operators: the dunder of the left operand, and the reflected one of the right
_COMPARE_DUNDERS: dict[type[ast.cmpop], tuple[list[str], list[str]]] = {
    ast.Eq: (["__eq__"], ["__eq__"]), ast.NotEq: (["__ne__", "__eq__"], ["__ne__", "__eq__"]),
    ast.Lt: (["__lt__"], ["__gt__"]), ast.LtE: (["__le__"], ["__ge__"]), ast.Gt: (["__gt__"], ["__lt__"]),
    ast.GtE: (["__ge__"], ["__le__"]),
}
_BINOP_NAMES: dict[type[ast.operator], str] = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.MatMult: "matmul", ast.Div: "truediv",
    ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "pow", ast.LShift: "lshift", ast.RShift: "rshift",
    ast.BitOr: "or", ast.BitXor: "xor", ast.BitAnd: "and",
}

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
