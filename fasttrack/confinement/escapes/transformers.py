"""Calls whose effect is on what they are handed, read from the tables of stdlib_effects.py (hostile review
24): a class or function transformer applied to something the contribution does not own (FT120), code in a
string run by a stdlib runner (FT127, like `exec` of that text), a stdlib module's shared table or state
edited through a method or a setter (FT120 / FT146), an archive written to a path (FT146)."""

from __future__ import annotations

import ast
import dataclasses
import doctest

from fasttrack.confinement.escapes.common import (
    _MUTATORS,
    _OBJECT_MUTATORS,
    DYNAMIC_CODE,
    GLOBAL_STATE,
    MONKEYPATCH,
    _arg,
    _matches,
)
from fasttrack.confinement.escapes.dynamic_code import DynamicCodeChecks
from fasttrack.confinement.escapes.fds import made_fd, shared_stream
from fasttrack.confinement.escapes.global_state import GlobalStateChecks
from fasttrack.confinement.escapes.scope import _BOUND, _INSTANCE, _OF_FOREIGN, _PARTIAL, _Ref, _Scope
from fasttrack.confinement.escapes.stdlib_effects import (
    CODE_RUNNERS,
    DOCTEST_RUNNERS,
    FD_OPENERS,
    FD_READS,
    MODULE_STATE_SETTERS,
    MODULE_TABLES,
    NAME_CALLERS,
    STDIN_READERS,
    TRANSFORMERS,
    Transformer,
)

# library calls writing an archive to a target path (position, keyword): FT146 unless it is a buffer made here
_ARCHIVE_WRITERS: dict[str, tuple[int, str]] = {"zipapp.create_archive": (1, "target")}


def callable_name(callee: _Ref | None) -> str | None:
    """The dotted name of what a call calls: an imported callable, or a method of an object a foreign call
    made (`<bound trace.Trace.run>` is `trace.Trace.run`)."""
    if callee is None:
        return None
    if callee.origin == "import":
        return callee.qualname
    if callee.origin == "local" and callee.qualname.startswith(_BOUND):
        return callee.qualname[len(_BOUND):-1]
    return None


class StdlibEffectChecks(GlobalStateChecks, DynamicCodeChecks):
    """The checks of calls by what they do to their arguments and to the stdlib's shared state."""

    def _check_stdlib_effects(self, node: ast.Call, callee: _Ref | None, scope: _Scope,
                              import_time: bool) -> None:
        name = callable_name(callee)
        self._check_transformer(node, name, scope)
        if name is None:
            return
        if name in CODE_RUNNERS:
            self._check_code_runner(node, name, scope)
        elif name in DOCTEST_RUNNERS:
            self._check_doctest(node, name, scope)
        elif name in NAME_CALLERS:
            self.report(DYNAMIC_CODE, node, f"calls `{name}`: it {NAME_CALLERS[name]}, code the scan cannot "
                        "check for escapes", target=name)
        elif name in _ARCHIVE_WRITERS:
            pos, kw = _ARCHIVE_WRITERS[name]
            target = _arg(node, pos, kw)
            if target is None or not self._in_memory(ast.Call(func=node.func, args=[target], keywords=[]),
                                                     scope):
                self.report(GLOBAL_STATE, node, f"calls `{name}`, which writes an archive file (to its "
                            "target, or beside its source): model code may not write files", target=name)
        if _matches(name, STDIN_READERS) or (name in FD_READS and not made_fd(self, _arg(node, 0, "fd"),
                                                                              scope)) or (
                name in FD_OPENERS and shared_stream(self, _arg(node, 0, "file", "fd", "path"), scope)):
            self.report(GLOBAL_STATE, node, f"calls `{name}` on the process's stdin (or a descriptor the "
                        "contribution did not make): it consumes input the engine shares", target=name)
        receiver, _, method = name.rpartition(".")
        if receiver in MODULE_TABLES and (method in _MUTATORS or method in _OBJECT_MUTATORS):
            self._report_write(node, receiver, "mutates", MONKEYPATCH, import_time, f".{method}()")
        setter = next((what for k, what in MODULE_STATE_SETTERS.items() if _matches(name, (k,))), None)
        if setter is not None:
            self.report(GLOBAL_STATE, node, f"calls `{name}`: it writes {setter}, process-wide state every "
                        "model shares", target=name)

    # -- transformers ---------------------------------------------------------------------------------------
    def _transformer_of(self, func: ast.expr, scope: _Scope) -> tuple[str, Transformer, bool] | None:
        """The transformer `func` calls: (name, entry, applied), `applied` when `func` is itself the
        decorator a factory returned (`dataclass(frozen=True)`, a name bound to one)."""
        if isinstance(func, ast.Call):
            inner = callable_name(self.resolve(func.func, scope))
            t = TRANSFORMERS.get(inner or "")
            if inner is not None and t is not None and (t.always_factory or (t.factory and not func.args)):
                return inner, t, True
            if t is not None:
                return None
            # else a call handing back a transformer: `getattr(dataclasses, 'data' + 'class')(C)`
        ref = self.resolve(func, scope)
        name = callable_name(ref)
        if name is not None and name in TRANSFORMERS:
            return name, TRANSFORMERS[name], False
        if ref is not None and ref.origin == "local" and ref.qualname.startswith(_OF_FOREIGN):
            made = ref.qualname[len(_OF_FOREIGN):-1]  # `deco = dataclass(frozen=True)`, then `deco(C)`
            t = TRANSFORMERS.get(made)
            if t is not None and (t.factory or t.always_factory):
                return made, t, True
        return None

    def _targets(self, node: ast.Call, scope: _Scope) -> tuple[str, Transformer, list[ast.expr | str]] | None:
        """The transformer `node` applies and the arguments it mutates (a node, or the dotted name of a
        foreign object a partial bound): called directly, as the decorator a factory made, through
        `functools.partial(T, ...)` (the partial's arguments first), or over the elements of an iterable by
        `map(T, xs)`."""
        func = node.func
        if isinstance(func, ast.Call) and func.args and \
                callable_name(self.resolve(func.func, scope)) == "functools.partial":
            inner = ast.copy_location(ast.Call(func=func.args[0], args=[*func.args[1:], *node.args],
                                               keywords=[*func.keywords, *node.keywords]), node)
            self._kept.append(inner)  # `partial(dataclass, frozen=True)(C)` is `dataclass(C, frozen=True)`
            return self._targets(inner, scope)
        callee = self.resolve(func, scope)
        if callee is not None and callee.origin == "local" and callee.qualname == _PARTIAL and \
                callee.elements and callable_name(callee.elements[0]) in TRANSFORMERS:
            what = callable_name(callee.elements[0]) or ""
            bound: list[ast.expr | str] = [t.qualname for t in callee.elements[1:] if self.foreign(t)]
            return what, TRANSFORMERS[what], bound + list(node.args[:1])
        if callable_name(callee) == "builtins.map" and len(node.args) >= 2:
            found = self._transformer_of(node.args[0], scope)
            if found is not None and (found[2] or found[1].positions):
                elems = [ast.copy_location(ast.Subscript(value=a, slice=ast.Constant(0), ctx=ast.Load()), a)
                         for a in node.args[1:2]]
                self._kept.extend(elems)  # `map(dataclass, [C])`: each element of the iterable
                return found[0], found[1], list(elems)
            return None
        found = self._transformer_of(func, scope)
        if found is None:
            return None
        what, t, applied = found
        if applied:
            return what, t, [a for a in [_arg(node, 0)] if a is not None]
        if not t.positions:
            return None  # the factory itself (`dataclass_transform()`): the decorator it makes is judged
        pos = next((p for p in t.positions if isinstance(p, int)), 0)
        target = _arg(node, pos, *(p for p in t.positions if isinstance(p, str)))
        return what, t, [target] if target is not None else []

    def _check_transformer(self, node: ast.Call, name: str | None, scope: _Scope) -> None:
        found = self._targets(node, scope)
        if found is None:
            return
        what, t, targets = found
        for target in targets:
            owner = target if isinstance(target, str) else self._not_owned(target, scope)
            if owner is not None:
                self.report(MONKEYPATCH, node, f"applies `{what}` to `{owner}`, which the contribution does "
                            f"not own: it {t.what}, rewriting the object in place for every user of it",
                            target=owner)
                return
            ref = self.resolve(target, scope) if not isinstance(target, str) else None
            if ref is not None and ref.origin == "param":
                self._record_param_write(ref, node)  # a helper transforming what it is given

    def _not_owned(self, target: ast.expr, scope: _Scope) -> str | None:
        """What `target` is when the contribution does not own it: a foreign object (an engine or stdlib
        class or function), or the class of an engine instance the function was given (`type(layer)`). A
        class made here (`type(name, bases, ns)`, `types.new_class`) is the contribution's own."""
        if isinstance(target, ast.Call) and len(target.args) + len(target.keywords) >= 3 and \
                callable_name(self.resolve(target.func, scope)) in ("builtins.type", "types.new_class"):
            return None
        t = self.tainted(self.resolve(target, scope))
        if t is not None:
            return t.qualname
        obj: ast.expr | None = None
        if isinstance(target, ast.Call) and isinstance(target.func, ast.Name) and target.func.id == "type" \
                and len(target.args) == 1:
            obj = target.args[0]
        elif isinstance(target, ast.Attribute):  # `layer.__class__`, or `layer.forward`: its class's method
            obj = target.value
        cls = self.engine_instance_of(obj, scope) if obj is not None else None
        if cls is None:
            return None
        return cls if not isinstance(target, ast.Attribute) or target.attr == "__class__" else \
            f"{cls}.{target.attr}"

    # -- code in strings ------------------------------------------------------------------------------------
    def _check_code_runner(self, node: ast.Call, name: str, scope: _Scope) -> None:
        spec = CODE_RUNNERS[name]
        pairs = [(spec[i], spec[i + 1]) for i in range(0, len(spec), 2)]
        for pos, kw in pairs:
            arg = _arg(node, int(pos), str(kw))
            if arg is None:
                continue
            if not isinstance(arg, ast.Constant | ast.JoinedStr | ast.BinOp) and \
                    self._callable_argument(arg, scope):
                continue  # a callable (own function, lambda, bound method, partial) is called, not compiled
            if isinstance(arg, ast.Constant) and not isinstance(arg.value, str):
                continue  # `setup=None`, a number: no code
            self._run_as_exec(node, arg, f"{name}`'s `{kw}", scope)

    def _callable_argument(self, arg: ast.expr, scope: _Scope) -> bool:
        """An argument that is a callable rather than code text: a lambda, an own function or class (or an
        instance of one), a bound method, a partial, a foreign callable. A parameter or an unresolved
        value may be text: fail closed."""
        if isinstance(arg, ast.Lambda):
            return True
        ref = self.resolve(arg, scope)
        if ref is None:
            return False
        if ref.origin == "own" or (ref.origin == "import" and not self.is_own(ref.qualname)):
            return True
        return ref.origin == "local" and (ref.qualname == _PARTIAL or
                                          ref.qualname.startswith((_BOUND, _INSTANCE)))

    def _run_as_exec(self, node: ast.Call, text: ast.expr, what: str, scope: _Scope) -> None:
        """Judge `text` run as code at `node` like `exec(text)`: a literal is scanned, anything else fails
        closed (a non-lenient FT127)."""
        fake = ast.copy_location(ast.Call(func=ast.Name(id="exec", ctx=ast.Load()), args=[text], keywords=[]),
                                 node)
        self._kept.append(fake)
        before = len(self.facts.escapes)
        self._check_dynamic_code(fake, "builtins.exec", scope)
        self.facts.escapes[before:] = [dataclasses.replace(e, message=e.message.replace(
            "`exec()`", f"`{what}` (run as code)")) for e in self.facts.escapes[before:]]

    def _check_doctest(self, node: ast.Call, name: str, scope: _Scope) -> None:
        """doctest runs the examples of the docstrings it finds: an own function's docstring is scanned as
        the code it is; anything else (a module, a file, a foreign object) cannot be read here."""
        pos = DOCTEST_RUNNERS[name]
        target = _arg(node, pos, "f") if pos is not None else None
        ref = self.resolve(target, scope) if target is not None else None
        doc = self._own_docstring(ref)
        if doc is None:
            self.report(DYNAMIC_CODE, node, f"calls `{name}`: it runs the examples of docstrings (or a file) "
                        "as code, which cannot be checked for escapes", target=name)
            return
        try:
            examples = doctest.DocTestParser().get_examples(doc)
        except ValueError:
            examples = []
        text = "".join(e.source for e in examples)
        if text.strip():
            const = ast.copy_location(ast.Constant(text), node)
            self._run_as_exec(node, const, f"{name}` of a docstring's examples", scope)

    def _own_docstring(self, ref: _Ref | None) -> str | None:
        """The docstring of an own function or class of this file ("" when it has none)."""
        if ref is None or ref.origin != "own":
            return None
        nodes: list[ast.AST] = [fn.node for fn in self.functions.get(ref.qualname, [])] + \
            [c for c, _ in self.classes.get(ref.qualname, [])]
        if not nodes:
            return None
        docs = [ast.get_docstring(n, clean=True) or "" for n in nodes
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
        return "\n".join(docs)
