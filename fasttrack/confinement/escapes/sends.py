"""Where a file resumes a generator with a value: `gen.send(v)` / `gen.asend(v)` (what any `yield` expression
evaluates to) and `gen.throw(e)` / `gen.athrow(e)` (what an `except ... as e` in it catches), called directly
or through the bound method handed on as a value: stored (`s = gen.send; s(v)`), `functools.partial(gen.send,
v)()`, `map(gen.send, xs)`, given to an own function that calls it (`call(gen.send, v)`). Each site says the
foreign objects it sends, or that they cannot be followed (the bound method went somewhere the scan does not
model: a container, a return, a foreign callee). One walk of the file, memoised by the resolver.

The resolver links what a site sends to every `yield` of this file (receiver-insensitive); the check
(monkeypatch.py) fails closed for a site whose receiver is not provably a generator of this file."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fasttrack.confinement.escapes.common import _dotted_literal

if TYPE_CHECKING:
    from fasttrack.confinement.escapes.scope import Resolver, _Ref, _Scope

SENDS = ("send", "asend")
THROWS = ("throw", "athrow")
_DEPTH = 8


@dataclass(frozen=True, eq=False)
class SendSite:
    node: ast.AST  # where it is reported: the call, or the bound method handed on
    receiver: ast.expr  # the object whose `send`/`throw` it is
    scope: _Scope  # the scope the receiver is evaluated in
    throw: bool  # `.throw`/`.athrow` (an exception raised at the yield) rather than `.send`/`.asend`
    direct: bool  # `gen.send(v)` as written (already in `Resolver.sent` / `.raised`)
    sent: tuple[_Ref, ...] | None  # the foreign objects it sends; None: they cannot be followed


def _args(call: ast.Call) -> list[ast.expr]:
    return [a.value if isinstance(a, ast.Starred) else a for a in call.args] + \
        [k.value for k in call.keywords]


def _enclosing_scope(r: Resolver, node: ast.AST) -> _Scope:
    p = r._parent(node)
    while p is not None:
        s = r.scopes.get(p)
        if s is not None:
            return s
        p = r._parent(p)
    return r.module_scope


def _bound_method(node: ast.expr, r: Resolver) -> tuple[ast.expr, bool, bool] | None:
    """`x.send` / `getattr(x, "send")` (or a computed name): (x, whether it is a throw, whether the name is
    computed)."""
    if isinstance(node, ast.Attribute) and node.attr in (*SENDS, *THROWS):
        return node.value, node.attr in THROWS, False
    if r._computed_getattr(node, (*SENDS, *THROWS)):
        assert isinstance(node, ast.Call)
        name = _dotted_literal(node.args[1])
        return node.args[0], name in THROWS, name is None
    return None


def send_sites(r: Resolver) -> list[SendSite]:
    """Every send or throw of the file (see the module doc)."""
    out: list[SendSite] = []
    callers: dict[str, list[ast.Call]] = {}  # a name / `.attr` -> the calls made through it
    loads: dict[str, int] = {}  # a name / `.attr` -> how often it is read other than to call it
    nodes = list(ast.walk(r.tree))
    for n in nodes:
        if isinstance(n, ast.Call):
            key = n.func.id if isinstance(n.func, ast.Name) else \
                f".{n.func.attr}" if isinstance(n.func, ast.Attribute) else None
            if key is not None:
                callers.setdefault(key, []).append(n)
        elif isinstance(n, ast.Name | ast.Attribute) and isinstance(n.ctx, ast.Load):
            parent = r._parent(n)
            if not (isinstance(parent, ast.Call) and parent.func is n):
                key = n.id if isinstance(n, ast.Name) else f".{n.attr}"
                loads[key] = loads.get(key, 0) + 1
    for n in nodes:
        if not isinstance(n, ast.expr):
            continue
        bound = _bound_method(n, r)
        if bound is None:
            continue
        receiver, throw, computed = bound
        scope = _enclosing_scope(r, n)
        parent = r._parent(n)
        if isinstance(parent, ast.Call) and parent.func is n:
            if not computed:  # `getattr(x, name)(v)`: linked to this file's yields (Resolver.sent) only
                out.append(SendSite(parent, receiver, scope, throw, True, _tainted(r, _args(parent), scope)))
            continue
        handed = _handed_on(r, n, scope, callers, loads)
        if handed is None and not computed:  # a computed getattr is most often not a send: only followed
            out.append(SendSite(n, receiver, scope, throw, False, None))
        out.extend(SendSite(at, receiver, scope, throw, False, sent) for at, sent in handed or ())
    return out


def _tainted(r: Resolver, exprs: list[ast.expr], scope: _Scope) -> tuple[_Ref, ...]:
    found = (r.tainted(r.resolve(e, scope)) for e in exprs)
    return tuple(t for t in found if t is not None)


Sent = list[tuple[ast.AST, tuple["_Ref", ...]]]  # where it is sent, and the foreign objects sent there


def _through(r: Resolver, value: ast.expr, scope: _Scope, callers: dict[str, list[ast.Call]],
             loads: dict[str, int]) -> Sent | None:
    """What the calls of `value` (a bound send, or a partial of one with nothing bound) pass: called at
    once, or stored under a name / attribute that is only ever called; None when it goes elsewhere."""
    parent = r._parent(value)
    if isinstance(parent, ast.Call) and parent.func is value:
        return [(parent, _tainted(r, _args(parent), scope))]
    if isinstance(parent, ast.Assign | ast.AnnAssign | ast.NamedExpr) and parent.value is value:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        keys = [t.id if isinstance(t, ast.Name) else f".{t.attr}" if isinstance(t, ast.Attribute) else None
                for t in targets]
        if not keys or any(k is None or loads.get(k, 0) for k in keys):
            return None
        return [(call, _tainted(r, _args(call), _enclosing_scope(r, call)))
                for k in keys if k is not None for call in callers.get(k, [])]
    return None


def _handed_on(r: Resolver, node: ast.expr, scope: _Scope, callers: dict[str, list[ast.Call]],
               loads: dict[str, int]) -> Sent | None:
    """The foreign objects a bound send handed on as a value is sent, or None when the scan cannot say."""
    parent = r._parent(node)
    if not isinstance(parent, ast.Call):
        return _through(r, node, scope, callers, loads)
    callee = r.resolve(parent.func, scope)
    q = callee.qualname if callee is not None else ""
    if q in ("functools.partial",) and parent.args and parent.args[0] is node:
        bound = [*parent.args[1:], *(k.value for k in parent.keywords)]
        if bound:  # send takes one argument: what the partial binds is what it sends
            values = [b.value if isinstance(b, ast.Starred) else b for b in bound]
            return [(parent, _tainted(r, values, scope))]
        return _through(r, parent, scope, callers, loads)
    if q == "builtins.map" and parent.args and parent.args[0] is node:
        return [(parent, _tainted(r, _args(parent)[1:], scope))]  # the iterables' foreign elements
    if callee is not None and callee.origin == "own" and callee.qualname in r.functions:
        if _forwarded(r, callee.qualname, parent, node):
            return None  # the function hands it on in turn (`def call(f, v): other(f, v)`): not followed
        passed = r.param_call_arguments(callee.qualname, parent, node, (r, scope))
    elif callee is not None and callee.origin == "import" and r.is_own(q) and r.cross is not None:
        passed = r.cross.callback_arguments(q, parent, node, (r, scope))
    else:
        return None
    return [(parent, tuple(t for refs, keywords in passed for t in (*refs, *keywords.values())
                           if t is not None))]


def _forwarded(r: Resolver, key: str, call: ast.Call, arg: ast.expr) -> bool:
    """The own function `key`, given `arg` by `call`, uses that parameter other than by calling it."""
    for fn in r.functions.get(key, []):
        names = {n for n, exprs in r._call_arguments(call, fn).items() if any(e is arg for e in exprs)}
        for n in ast.walk(fn.node):
            if isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load):
                parent = r._parent(n)
                if not (isinstance(parent, ast.Call) and parent.func is n):
                    return True
    return False


def own_generator(r: Resolver, node: ast.expr, scope: _Scope, depth: int = 0) -> bool:
    """`node` is provably a generator this file makes: a call of an own generator function, a generator
    expression, or a name / attribute every binding or store of which is one."""
    from fasttrack.confinement.escapes.scope import _Alias
    if depth > _DEPTH:
        return False
    if isinstance(node, ast.GeneratorExp):
        return True
    if isinstance(node, ast.Call):
        callee = r.resolve(node.func, scope)
        fns = r.functions.get(callee.qualname, []) if callee is not None and callee.origin == "own" else []
        return bool(fns) and all(fn.is_generator() for fn in fns)
    if isinstance(node, ast.Name):
        bindings = r._lookup(node.id, scope)
        return bool(bindings) and all(isinstance(b, _Alias) and own_generator(r, b.value, b.scope, depth + 1)
                                      for b in bindings or ())
    if isinstance(node, ast.Attribute):
        stores = r.attr_stores.get(node.attr, [])
        return bool(stores) and not r.attr_stores.get("*") and all(
            own_generator(r, v, sc, depth + 1) for v, sc, _ in stores)
    return False
