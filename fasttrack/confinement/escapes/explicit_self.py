"""A method's `self`/`cls` handed in by the caller (FT120): the resolver takes a method's first parameter for
the contribution's own object (an instance or subclass of its class), which it is when Python binds it.
A call can fill it instead: `Own.put(Engine, f)` (a plain method called on its class), `Own.put.__get__(
Engine)`, `types.MethodType(Own.put, Engine)`, `functools.partial(Own.put, Engine)`, `put = Own.put;
put(Engine)`, `map(Own.put, [Engine])`, `Own.cm.__func__(Engine)` (a classmethod's function). A write
through the first parameter (`self.forward = f`, `self.t[k] = v`, `setattr(self, ...)`,
`self.t.append(...)`) is recorded as a write through the pseudo-parameter `SELF`, and a call handing a
foreign object there is the write."""

from __future__ import annotations

import ast

from fasttrack.confinement.escapes.base import CheckBase
from fasttrack.confinement.escapes.common import MONKEYPATCH, mutating_method
from fasttrack.confinement.escapes.scope import _LOCAL, _Alias, _Function, _Scope

SELF = "<self>"  # the pseudo-parameter name of a method's first parameter in `param_writes`
_SETTERS = frozenset({"builtins.setattr", "builtins.delattr", "builtins.object.__setattr__",
                      "builtins.object.__delattr__", "builtins.type.__setattr__"})


class ExplicitSelfChecks(CheckBase):
    """Writes through a method's first parameter, judged where a caller fills it explicitly."""

    def _record_self_writes(self) -> None:
        for node, scope, _ in self.candidates:
            target: ast.expr | None = None
            if isinstance(node, ast.Attribute | ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
                target = node.value
            elif isinstance(node, ast.Call):
                callee = self.resolve(node.func, scope)
                if callee is not None and callee.qualname in _SETTERS and node.args:
                    target = node.args[0]
                elif isinstance(node.func, ast.Attribute) and mutating_method(node.func.attr) and \
                        isinstance(node.func.value, ast.Attribute | ast.Subscript):
                    target = node.func.value  # `self.table.append(x)` (not `self.append()`: a method)
            key = self._self_of(target, scope) if target is not None else None
            if key is not None:
                self.param_writes.setdefault((key, SELF), node)

    def _self_of(self, expr: ast.expr, scope: _Scope) -> str | None:
        """The key of the method whose unrebound first parameter `expr` is rooted at (`self`, `self.a[k]`)."""
        while isinstance(expr, ast.Attribute | ast.Subscript):
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return None
        key = self._enclosing_function(scope)
        for fn in self.functions.get(key or "", []):
            first = _first_dropped(fn)
            if first == expr.id and fn.scope is scope and scope.bindings.get(expr.id) == [_LOCAL]:
                return key
        return None

    def _check_explicit_self(self) -> None:
        written = {k for (k, n) in self.param_writes if n == SELF}
        if not written:
            return
        for call, scope, key in self.own_calls:
            if key not in written or not self._fills_self(call, scope):
                continue
            for fn in self.functions.get(key, []):
                if _plain(fn):
                    self._report_self(call, scope, key, _first_argument(call, _first_dropped(fn)))
        for node, scope, _ in self.candidates:
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("__get__", "__func__") and node.args:
                # Own.put.__get__(E), Own.cm.__func__(E)
                method = self._own_method(func.value, scope, written)
                if method is not None:
                    self._report_self(node, scope, method, node.args[0])
                continue
            for method in self._looked_up(func, scope, written):  # o.__class__.put(E), vars(Own)["put"](E)
                if any(_plain(fn) for fn in self.functions.get(method, [])):
                    self._report_self(node, scope, method, _first_argument(node, None))
            callee = self.resolve(func, scope)
            if callee is not None and callee.qualname == "types.MethodType" and len(node.args) >= 2:
                method = self._own_method(node.args[0], scope, written)
                if method is not None:
                    self._report_self(node, scope, method, node.args[1])

    def _looked_up(self, func: ast.expr, scope: _Scope, written: set[str]) -> list[str]:
        """The own methods writing through their `self` a call looks up on a class the resolver does not
        name (`type(o).put`, `o.__class__.put`: any own method of that name, fail closed) or in an own
        class's namespace by a literal key (`vars(Own)["put"]`, `Own.__dict__["put"]`)."""
        if isinstance(func, ast.Attribute):
            base = self.resolve(func.value, scope)
            if base is not None and base.origin == "classof":
                return sorted(k for k in written if k.rsplit(".", 1)[-1] == func.attr)
        if isinstance(func, ast.Subscript) and isinstance(func.slice, ast.Constant) and \
                isinstance(func.slice.value, str):
            base = self.resolve(func.value, scope)
            if base is not None and base.origin == "own" and base.qualname.endswith(".__dict__"):
                key = f"{base.qualname.removesuffix('.__dict__')}.{func.slice.value}"
                return [key] if key in written else []
        return []

    def _own_method(self, expr: ast.expr, scope: _Scope, written: set[str]) -> str | None:
        r = self.resolve(expr, scope)
        return r.qualname if r is not None and r.origin == "own" and r.qualname in written else None

    def _fills_self(self, call: ast.Call, scope: _Scope) -> bool:
        """The call names the method through its class (`Own.put(...)`, `vars(Own)["put"](...)`): the first
        argument is `self`. (Through an instance, or a name bound to either, Python binds it.)"""
        if isinstance(call.func, ast.Subscript):
            return True
        if isinstance(call.func, ast.Name):  # `put = Own.put; put(E, v)`: every binding names it on a class
            bindings = self._lookup(call.func.id, scope) or []
            return bool(bindings) and all(isinstance(b, _Alias) and isinstance(b.value, ast.Attribute) and
                                          self._on_a_class(b.value.value, b.scope) for b in bindings)
        return isinstance(call.func, ast.Attribute) and self._on_a_class(call.func.value, scope)

    def _on_a_class(self, expr: ast.expr, scope: _Scope) -> bool:
        base = self.resolve(expr, scope)
        return base is not None and ((base.origin == "own" and base.qualname in self.classes) or
                                     base.origin == "classof")

    def _report_self(self, node: ast.AST, scope: _Scope, key: str, arg: ast.expr | None) -> None:
        if arg is None:
            return
        t = self.tainted(self.resolve(arg.value if isinstance(arg, ast.Starred) else arg, scope))
        if t is None:
            return
        at = getattr(self.param_writes[(key, SELF)], "lineno", "?")
        shown = ".".join(key.rsplit(".", 2)[-2:])
        self.report(MONKEYPATCH, node, f"passes `{t.qualname}` as the `self`/`cls` of `{shown}`, which "
                    f"writes through it (line {at}): a monkeypatch of an object outside the contribution",
                    target=t.qualname)


def _first_dropped(fn: _Function) -> str | None:
    """The name of a method's first parameter when Python binds it (self or cls), else None."""
    node = fn.node
    first = [*node.args.posonlyargs, *node.args.args][:1]
    return first[0].arg if first and first[0].arg not in fn.positional else None


def _plain(fn: _Function) -> bool:
    """A method whose first parameter a call on its class fills (not a classmethod)."""
    return _first_dropped(fn) is not None and not isinstance(fn.node, ast.Lambda) and not any(
        (isinstance(d, ast.Name) and d.id == "classmethod") or
        (isinstance(d, ast.Attribute) and d.attr == "classmethod") for d in fn.node.decorator_list)


def _first_argument(call: ast.Call, name: str | None) -> ast.expr | None:
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == name), None)
