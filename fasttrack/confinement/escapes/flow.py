"""Which binding of a name reaches each use inside one function body (reaching definitions, statement
order aware). Branches join, loops iterate to a fixed point, every point of a `try` or `with` body can
leave for its handler or past the block, `break`/`continue`/`return`/`raise` end a path, `del` unbinds.
Anything this pass cannot decide is left to the flow-insensitive answer (fail closed): a use it did not
see, a binding site it does not know, or an empty answer.

A binding site is the id of the node that binds: the `Name` of a store (assignment, loop, `with`, walrus,
augmented assignment), an `alias` of an import, a `def`/`class`, an `except ... as` handler, a capture
pattern of `match`; `ENTRY` is the function's parameters (and their defaults)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

ENTRY = 0  # the site of a parameter (bound on entry)
_State = dict[str, frozenset[int]]


def _join(a: _State | None, b: _State | None) -> _State | None:
    if a is None:
        return None if b is None else dict(b)
    if b is None:
        return dict(a)
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, frozenset()) | v
    return out


@dataclass
class _Loop:
    breaks: _State | None = None
    continues: _State | None = None


@dataclass
class Reaching:
    """The answer for one function: use (id of a `Name` load) -> the sites that reach it; and every site
    the pass saw bind (a binding whose site is not here is taken to reach every use)."""

    uses: dict[int, frozenset[int]] = field(default_factory=dict)
    sites: set[int] = field(default_factory=set)


class _Flow:
    def __init__(self, tracked: set[str]) -> None:
        self.tracked = tracked
        self.out = Reaching()
        self.collectors: list[list[_State | None]] = []  # states seen inside try/with bodies
        self.loops: list[_Loop] = []

    # -- states -------------------------------------------------------------------------------------
    def observe(self, st: _State | None) -> None:
        if self.collectors and st is not None:
            self.collectors[-1][0] = _join(self.collectors[-1][0], st)

    def push_collector(self) -> None:
        self.collectors.append([None])

    def pop_collector(self) -> _State | None:
        got = self.collectors.pop()[0]
        self.observe(got)  # an exception not handled here reaches the enclosing handler too
        return got

    def bind(self, st: _State, name: str, site: int, kill: bool = True) -> _State:
        if name not in self.tracked:
            return st
        self.out.sites.add(site)
        out = dict(st)
        out[name] = frozenset({site}) if kill else out.get(name, frozenset()) | {site}
        self.observe(out)
        return out

    def unbind(self, st: _State, name: str) -> _State:
        if name not in self.tracked:
            return st
        out = dict(st)
        out[name] = frozenset()
        self.observe(out)
        return out

    def use(self, node: ast.Name, st: _State | None) -> None:
        if node.id not in self.tracked:
            return
        got = (st or {}).get(node.id, frozenset())
        self.out.uses[id(node)] = self.out.uses.get(id(node), frozenset()) | got

    # -- expressions --------------------------------------------------------------------------------
    def _expr_nodes(self, node: ast.AST) -> Iterable[tuple[ast.AST, bool]]:
        """The nodes of an expression evaluated here (not inside lambdas or comprehensions, but their
        defaults and first iterable), each with whether it runs only on some paths (`a and b`, `x if c
        else y`: the right-hand operands and branches)."""
        todo: list[tuple[ast.AST, bool]] = [(node, False)]
        while todo:
            n, maybe = todo.pop()
            yield n, maybe
            if isinstance(n, ast.Lambda):
                todo.extend((d, maybe) for d in [*n.args.defaults, *n.args.kw_defaults] if d is not None)
            elif isinstance(n, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
                if n.generators:
                    todo.append((n.generators[0].iter, maybe))
            elif isinstance(n, ast.BoolOp):
                todo.extend((v, maybe or i > 0) for i, v in enumerate(n.values))
            elif isinstance(n, ast.IfExp):
                todo += [(n.test, maybe), (n.body, True), (n.orelse, True)]
            else:
                todo.extend((c, maybe) for c in ast.iter_child_nodes(n))

    def expr(self, node: ast.AST | None, st: _State | None) -> _State | None:
        """Record the uses in an expression. A walrus binds (a conditional one keeps what was bound before
        too); every use in the same expression sees both (order inside one expression is not modelled)."""
        if node is None:
            return st
        nodes = list(self._expr_nodes(node))
        if st is not None:
            before = st
            walrus = [(n.target.id, n.target, maybe) for n, maybe in nodes if isinstance(n, ast.NamedExpr)]
            names = [w[0] for w in walrus]
            for name, target, maybe in walrus:  # (two of one name: which runs last is not modelled)
                st = self.bind(st, name, id(target), kill=not maybe and names.count(name) == 1)
            seen = _join(before, st)
        else:
            seen = None
        for n, _ in nodes:
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                self.use(n, seen)
        return st

    def exprs(self, nodes: Sequence[ast.AST | None], st: _State | None) -> _State | None:
        for n in nodes:
            st = self.expr(n, st)
        return st

    def target(self, t: ast.expr, st: _State | None) -> _State | None:
        """Assign to a target, left to right (`a, a.x = ...` writes `.x` on the new `a`)."""
        if st is None:
            return self.expr(t, None)
        if isinstance(t, ast.Name):
            return self.bind(st, t.id, id(t))
        if isinstance(t, ast.Starred):
            return self.target(t.value, st)
        if isinstance(t, ast.Tuple | ast.List):
            for e in t.elts:
                st = self.target(e, st)
            return st
        return self.expr(t, st)  # an attribute or subscript: its base and key are loaded now

    # -- statements ---------------------------------------------------------------------------------
    def body(self, stmts: Sequence[ast.stmt], st: _State | None) -> _State | None:
        for s in stmts:
            self.observe(st)
            st = self.stmt(s, st)
        self.observe(st)
        return st

    def stmt(self, s: ast.stmt, st: _State | None) -> _State | None:
        if st is None:  # unreachable: its uses get no answer (the flow-insensitive one is used)
            for n in ast.walk(s):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                    self.use(n, None)
            return None
        if isinstance(s, ast.Assign):
            st = self.expr(s.value, st)
            for t in s.targets:
                st = self.target(t, st)
            return st
        if isinstance(s, ast.AnnAssign):
            st = self.exprs([s.value, s.annotation], st)
            return self.target(s.target, st) if s.value is not None else self.expr(
                None if isinstance(s.target, ast.Name) else s.target, st)
        if isinstance(s, ast.AugAssign):
            if isinstance(s.target, ast.Name):
                st = self.expr(s.value, st)
                return self.bind(st, s.target.id, id(s.target)) if st is not None else None
            return self.exprs([s.target, s.value], st)
        if isinstance(s, ast.For | ast.AsyncFor):
            return self.loop(s, self.expr(s.iter, st))
        if isinstance(s, ast.While):
            return self.loop(s, st)
        if isinstance(s, ast.If):
            st = self.expr(s.test, st)
            return _join(self.body(s.body, st), self.body(s.orelse, st))
        if isinstance(s, ast.With | ast.AsyncWith):
            for item in s.items:
                st = self.expr(item.context_expr, st)
                if item.optional_vars is not None:
                    st = self.target(item.optional_vars, st)
            self.push_collector()
            end = self.body(s.body, st)
            seen = self.pop_collector()
            return _join(end, seen)  # __exit__ may swallow an exception raised anywhere in the body
        if isinstance(s, ast.Try | ast.TryStar):
            return self.try_(s, st)
        if isinstance(s, ast.Match):
            return self.match(s, st)
        if isinstance(s, ast.Return):
            self.expr(s.value, st)
            return None
        if isinstance(s, ast.Raise):
            self.exprs([s.exc, s.cause], st)
            return None
        if isinstance(s, ast.Break | ast.Continue):
            if self.loops:
                loop = self.loops[-1]
                if isinstance(s, ast.Break):
                    loop.breaks = _join(loop.breaks, st)
                else:
                    loop.continues = _join(loop.continues, st)
            return None
        if isinstance(s, ast.Delete):
            for t in s.targets:
                st = self.delete(t, st)
            return st
        if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            parts: list[ast.AST | None] = list(s.decorator_list)
            if isinstance(s, ast.ClassDef):
                parts += [*s.bases, *(k.value for k in s.keywords)]
            else:
                a = s.args
                parts += [*a.defaults, *a.kw_defaults, s.returns,
                          *(x.annotation for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                            if x is not None)]
            st = self.exprs(parts, st)
            return self.bind(st, s.name, id(s)) if st is not None else None
        if isinstance(s, ast.Import | ast.ImportFrom):
            for alias in s.names:
                if alias.name != "*" and st is not None:
                    top = alias.name.split(".")[0] if isinstance(s, ast.Import) else alias.name
                    name = alias.asname or top
                    st = self.bind(st, name, id(alias))
            return st
        # anything else (expression statements, assert, global, pass, ...): the expressions it evaluates
        return self.exprs([c for c in ast.iter_child_nodes(s) if isinstance(c, ast.expr)], st)

    def delete(self, t: ast.expr, st: _State | None) -> _State | None:
        if st is None:
            return None
        if isinstance(t, ast.Name):
            return self.unbind(st, t.id)
        if isinstance(t, ast.Tuple | ast.List):
            for e in t.elts:
                st = self.delete(e, st)
            return st
        return self.expr(t, st)

    def loop(self, s: ast.For | ast.AsyncFor | ast.While, entry: _State | None) -> _State | None:
        head = entry
        for _ in range(64):
            loop = _Loop()
            self.loops.append(loop)
            st = self.expr(s.test, head) if isinstance(s, ast.While) else self.target(s.target, head) \
                if head is not None else None
            end = self.body(s.body, st)
            self.loops.pop()
            new_head = _join(_join(entry, end), loop.continues)
            if new_head == head:
                break
            head = new_head
        else:  # no fixed point (cannot happen: states only grow); nothing is decided inside
            self.out.uses.clear()
        normal = self.expr(s.test, head) if isinstance(s, ast.While) else head
        return _join(self.body(s.orelse, normal), loop.breaks)

    def try_(self, s: ast.Try | ast.TryStar, st: _State | None) -> _State | None:
        self.push_collector()
        end = self.body(s.body, st)
        raised = _join(self.pop_collector(), st)  # any point of the body may raise
        self.push_collector()
        ends: _State | None = self.body(s.orelse, end)
        for h in s.handlers:
            hs = self.expr(h.type, raised)
            if h.name and hs is not None:
                hs = self.bind(hs, h.name, id(h))
            hs = self.body(h.body, hs)
            if h.name and hs is not None:
                hs = self.unbind(hs, h.name)  # Python deletes the name when the handler ends
            ends = _join(ends, hs)
        later = self.pop_collector()
        if not s.finalbody:
            return ends
        # the finally block runs after every way out: normal, an exception anywhere, break/continue/return
        out = self.body(s.finalbody, _join(_join(ends, raised), later))
        if self.loops and out is not None:
            self.loops[-1].breaks = _join(self.loops[-1].breaks, out)
            self.loops[-1].continues = _join(self.loops[-1].continues, out)
        return out if ends is not None else None

    def match(self, s: ast.Match, st: _State | None) -> _State | None:
        st = self.expr(s.subject, st)
        pending = st  # a failed pattern may have bound some of its names
        ends: _State | None = None
        for case in s.cases:
            cs = pending
            for sub in ast.walk(case.pattern):
                if isinstance(sub, ast.expr):
                    cs = self.expr(sub, cs)
            for sub in ast.walk(case.pattern):
                name = getattr(sub, "name", None) or getattr(sub, "rest", None)
                if isinstance(name, str) and cs is not None and pending is not None:
                    cs = self.bind(cs, name, id(sub))
                    pending = self.bind(pending, name, id(sub), kill=False)
            cs = self.expr(case.guard, cs)
            if case.guard is not None and cs is not None and pending is not None:
                pending = _join(pending, cs)  # a failed guard: the next case sees what its walrus bound
            ends = _join(ends, self.body(case.body, cs))
            if case.guard is None and isinstance(case.pattern, ast.MatchAs) and case.pattern.pattern is None:
                return ends  # `case _:` / `case name:` always matches: no way past the cases
        return _join(ends, pending)


def reaching(fn: ast.FunctionDef | ast.AsyncFunctionDef, tracked: set[str], params: set[str]) -> Reaching:
    """The reaching bindings of every use of a `tracked` name (the names local to `fn`) in `fn`'s body."""
    flow = _Flow(tracked)
    entry: _State = {n: frozenset({ENTRY}) if n in params else frozenset() for n in tracked}
    flow.out.sites.add(ENTRY)
    flow.body(fn.body, entry)
    return flow.out
