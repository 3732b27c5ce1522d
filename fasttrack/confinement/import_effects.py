"""Does a module do something when it is imported? The static half of the answer.

A unit that imports a module below a changed package runs the package's ``__init__`` (and what it imports at
module level) without using any of it. That is harmless when the changed code only defines things, and a
real effect when it acts at import: a module-level call, a registration, a patch. The blast radius names
such units either way; FT114 makes them an error only when the changed module acts at import.

Static facts: a module acts at import when its module-level code has a statement other than an import, a
``def``/``class`` (their decorators and class bodies count as code that runs), a docstring, a constant
assignment (a literal, a name, an attribute, a type alias, an inert call such as ``init_logger(__name__)``),
``pass``, or an ``if``/``try``/``with`` whose branches hold only those. The runtime effect trace (issue 15,
item 1) may later replace this with what an import really did (``BlastRadius.acts_at_import``).
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ImportEffect:
    acts: bool
    line: int | None = None  # the first statement that acts
    reason: str = ""


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


class _Judge:
    def __init__(self, inert_calls: Sequence[str]) -> None:
        self.inert = tuple(inert_calls)

    def inert_call(self, node: ast.Call) -> bool:
        name = _dotted(node.func)
        return name is not None and any(fnmatch.fnmatchcase(name, p) for p in self.inert) and all(
            self.inert_value(a) for a in [*node.args, *(k.value for k in node.keywords)])

    def inert_value(self, node: ast.expr | None) -> bool:
        """A value whose evaluation changes nothing: literals, names, attributes, subscripts of those (type
        aliases like dict[str, int]), operators over them, and inert calls."""
        if node is None:
            return True
        if isinstance(node, ast.Constant | ast.Name):
            return True
        if isinstance(node, ast.Attribute):
            return self.inert_value(node.value)
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return all(self.inert_value(e) for e in node.elts)
        if isinstance(node, ast.Dict):
            return all(self.inert_value(e) for e in [*node.keys, *node.values])
        if isinstance(node, ast.Subscript):
            return self.inert_value(node.value) and self.inert_value(node.slice)
        if isinstance(node, ast.BinOp):
            return self.inert_value(node.left) and self.inert_value(node.right)
        if isinstance(node, ast.UnaryOp):
            return self.inert_value(node.operand)
        if isinstance(node, ast.BoolOp):
            return all(self.inert_value(v) for v in node.values)
        if isinstance(node, ast.Compare):
            return self.inert_value(node.left) and all(self.inert_value(c) for c in node.comparators)
        if isinstance(node, ast.IfExp):
            return all(self.inert_value(v) for v in (node.test, node.body, node.orelse))
        if isinstance(node, ast.JoinedStr):
            return all(self.inert_value(v) for v in node.values)
        if isinstance(node, ast.FormattedValue):
            return self.inert_value(node.value)
        if isinstance(node, ast.Lambda):
            return True
        if isinstance(node, ast.Call):
            return self.inert_call(node)
        return False

    def inert_decorator(self, node: ast.expr) -> bool:
        """Applying a decorator calls it: a bare one must be listed as inert, a factory call too."""
        if isinstance(node, ast.Call):
            return self.inert_call(node)
        name = _dotted(node)
        return name is not None and any(fnmatch.fnmatchcase(name, p) for p in self.inert)

    def first_act(self, body: Sequence[ast.stmt]) -> ast.stmt | None:
        for stmt in body:
            if self.acts(stmt):
                return stmt
        return None

    def acts(self, stmt: ast.stmt) -> bool:
        if isinstance(stmt, ast.Import | ast.ImportFrom | ast.Pass | ast.Global | ast.Nonlocal):
            return False
        if isinstance(stmt, ast.Expr):
            return not isinstance(stmt.value, ast.Constant)  # a docstring or a bare constant
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            return any(not self.inert_decorator(d) for d in stmt.decorator_list) or not all(
                self.inert_value(d) for d in [*stmt.args.defaults, *stmt.args.kw_defaults])
        if isinstance(stmt, ast.ClassDef):
            return (any(not self.inert_decorator(d) for d in stmt.decorator_list)
                    or any(not self.inert_value(b) for b in stmt.bases)
                    or any(k.arg == "metaclass" or not self.inert_value(k.value) for k in stmt.keywords)
                    or self.first_act(stmt.body) is not None)
        if isinstance(stmt, ast.Assign):
            return not all(isinstance(t, ast.Name | ast.Tuple | ast.List) for t in stmt.targets) \
                or not self.inert_value(stmt.value)
        if isinstance(stmt, ast.AnnAssign):
            return not isinstance(stmt.target, ast.Name) or not self.inert_value(stmt.value)
        if isinstance(stmt, ast.If):
            return not self.inert_value(stmt.test) or self.first_act([*stmt.body, *stmt.orelse]) is not None
        if isinstance(stmt, ast.Try | ast.TryStar):
            bodies = [*stmt.body, *stmt.orelse, *stmt.finalbody, *(s for h in stmt.handlers for s in h.body)]
            return self.first_act(bodies) is not None
        return True  # calls, loops, with, del, augmented assignment, attribute or item writes, ...


def acting_statements(source: str, inert_calls: Sequence[str] = ()) -> list[str] | None:
    """The module-level statements of `source` that act at import, as position-free AST dumps (so the same
    statement moved down a line compares equal); None when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return None
    judge = _Judge(inert_calls)
    return [ast.dump(s) for s in tree.body if judge.acts(s)]


def new_acts(head: str, base: str | None, inert_calls: Sequence[str] = ()) -> bool:
    """Whether the head's import-time code acts in a way the base's did not: an acting statement added or
    changed (compared one for one). Without a base (a new file) every acting statement is new; a side that
    does not parse counts as acting (fail closed)."""
    now = acting_statements(head, inert_calls)
    if now is None:
        return True
    if base is None:
        return bool(now)
    before = acting_statements(base, inert_calls)
    if before is None:
        return bool(now)
    left = list(before)
    for stmt in now:
        if stmt in left:
            left.remove(stmt)
        else:
            return True
    return False


def import_effect(source: str, inert_calls: Sequence[str] = ()) -> ImportEffect:
    """Whether `source` does something at import time, and the first statement that does. A file that does
    not parse acts (fail closed)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return ImportEffect(True, None, "does not parse")
    stmt = _Judge(inert_calls).first_act(tree.body)
    if stmt is None:
        return ImportEffect(False)
    text = ast.unparse(stmt).splitlines()[0][:80] if not isinstance(stmt, ast.ClassDef | ast.FunctionDef) \
        else f"{type(stmt).__name__} {stmt.name}"
    return ImportEffect(True, stmt.lineno, text)
