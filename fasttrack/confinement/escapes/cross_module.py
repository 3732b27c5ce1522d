"""What the names of the contribution's other modules refer to, for the escape scan of one of them.

A model file that imports a name from another of the contribution's modules gets whatever that module
binds it to: an engine class it re-exports (`from vllm.x import Engine`), a class attribute holding one
(`class Holder: E = Engine`), what one of its functions returns (`def get(): return Engine`), a module
global holding one in a container. The resolver of the importing file asks `OwnModuleSummary` (through
`scope.CrossModules`), which reads the other module with a resolver of its own (the same rules: aliases,
containers, conditionals, return values, the engine's parameters), once per module, and answers the
foreign object or None (the contribution's own). It fails closed: a module that cannot be read or parsed,
or a name whose resolution comes back to itself (an import cycle), is a foreign object of its own name,
so a write through it is an error."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence

from fasttrack.confinement.escapes.scope import (
    _GENERATOR,
    _INSTANCE,
    _LOCAL_REF,
    _PARTIAL,
    _SEP,
    Passed,
    Resolver,
    Signatures,
    _is_property,
    _Ref,
    _Scope,
)
from fasttrack.policy import EscapesSpec

# dotted module -> (its text, None when it cannot be read; whether it is a package's __init__), or None
# when no module of the contribution has that name
ModuleReader = Callable[[str], "tuple[str | None, bool] | None"]


def _failed(qualname: str, why: str) -> _Ref:
    """A foreign object standing for what cannot be read: every write through it is an error."""
    return _Ref("import", f"<{qualname}: {why}>")


class OwnModuleSummary:
    """The contribution's own modules, read on demand through `read`, each resolved once."""

    def __init__(self, read: ModuleReader, own_packages: set[str], settings: EscapesSpec,
                 own_op_namespaces: set[str] | None = None, signatures: Signatures | None = None) -> None:
        self._read = read
        self._own = {p for p in own_packages if p}
        self._settings = settings
        self._ops = set(own_op_namespaces or ())
        self._signatures = signatures
        self._modules: dict[str, tuple[str | None, bool] | None] = {}
        self._resolvers: dict[str, Resolver | None] = {}
        self._members: dict[str, _Ref | None] = {}
        self._busy: set[tuple[str, str]] = set()
        self._trees: dict[str, ast.Module] = {}  # source text -> its tree (the analysis of a file shares it)

    def parse(self, source: str) -> ast.Module:
        """`ast.parse(source)`, once per text (raises like it). Resolvers only read the tree."""
        tree = self._trees.get(source)
        if tree is None:
            tree = self._trees[source] = ast.parse(source)
        return tree

    def _module(self, name: str) -> tuple[str | None, bool] | None:
        if name not in self._modules:
            self._modules[name] = self._read(name)
        return self._modules[name]

    def _split(self, qualname: str) -> tuple[str, list[str]] | None:
        """The own module `qualname` is in (the longest dotted prefix that is one) and the names after it;
        None when it is a module itself or in none the summary reads."""
        if self._module(qualname) is not None:
            return None
        parts = qualname.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:cut])
            if not any(module == p or module.startswith(p + ".") for p in self._own):
                return None
            if self._module(module) is not None:
                return module, parts[cut:]
        return None

    def _resolver(self, module: str) -> Resolver | None:
        if module in self._resolvers:
            return self._resolvers[module]
        got = self._module(module)
        resolver: Resolver | None = None
        if got is not None and got[0] is not None:
            try:
                tree = self.parse(got[0])
                resolver = Resolver(tree, f"<{module}>", self._own, module, got[1], self._ops, self._settings,
                                    0, signatures=self._signatures, cross=self)
                resolver.bind_all(order=False)  # statement order: precision the summary does without
            except (SyntaxError, ValueError, RecursionError):
                resolver = None
        self._resolvers[module] = resolver
        return resolver

    def member(self, qualname: str, here: str | None) -> _Ref | None:
        split = self._split(qualname)
        if split is None or split[0] == here:
            return None
        if qualname in self._members:
            return self._members[qualname]
        module, rest = split
        key = ("member", qualname)
        if key in self._busy:
            return _failed(qualname, "its own modules import it in a cycle")
        self._busy.add(key)
        try:
            got = self._member(module, rest, qualname)
        except RecursionError:
            got = _failed(qualname, "too deep to follow")
        finally:
            self._busy.discard(key)
        self._members[qualname] = got
        return got

    def _member(self, module: str, rest: list[str], qualname: str) -> _Ref | None:
        r = self._resolver(module)
        if r is None:
            return _failed(qualname, "an own module that cannot be read or parsed")
        expr: ast.expr = ast.Name(id=rest[0], ctx=ast.Load())
        for attr in rest[1:]:
            expr = ast.Attribute(value=expr, attr=attr, ctx=ast.Load())
        r._kept.append(expr)  # the resolver's memo is keyed by node id: keep the node alive
        if rest[0] in r.module_scope.bindings or not r.functions.get(f"{module}.__getattr__"):
            ref = r.resolve(expr, r.module_scope)
        else:  # PEP 562: a name the module does not bind is what its __getattr__ returns
            head = r._this_module_member(_Ref("own", module), rest[0])
            ref = None if head is None else _Ref(head.origin, ".".join([head.qualname, *rest[1:]]))
        return self._foreign(r, ref)

    @staticmethod
    def _foreign(r: Resolver, ref: _Ref | None) -> _Ref | None:
        """What of `ref` (a value in module `r`) is foreign in any file: the object itself, or the foreign
        elements of a container; None for the contribution's own."""
        if ref is None:
            return None
        if r.foreign(ref):
            return ref
        if ref.qualname == _PARTIAL and any(r.foreign(e) for e in ref.elements):
            # a partial's elements are positional (its function, then its arguments): keep the layout
            return _Ref("local", _PARTIAL, tuple(e if r.foreign(e) else _LOCAL_REF for e in ref.elements))
        held = tuple(e for e in ref.elements if r.foreign(e))
        return _Ref("local", ref.qualname or "<container>", held) if held else None

    def call(self, qualname: str, node: ast.Call, scope: _Scope, caller: Resolver) -> _Ref | None:
        split = self._split(qualname)
        if split is None or split[0] == caller.module:
            return None
        module, _ = split
        r = self._resolver(module)
        if r is None:
            return _failed(f"{qualname}()", "an own module that cannot be read or parsed")
        key = ("call", qualname)
        if key in self._busy:
            return _failed(f"{qualname}()", "its own modules call it in a cycle")
        self._busy.add(key)
        try:
            if qualname in r.classes:
                # `H()` runs an own `__new__` (or an own metaclass's `__call__`): what it returns when that is
                # foreign, else an instance, whose attributes are what the class's are (`member`)
                keys = r._method_keys(qualname, ["__new__"]) + [
                    k for m in r._own_metaclasses(qualname) for k in r._method_keys(m, ["__call__"])]
                made = next((t for k in keys if (t := self._returned(r, k, node, scope, caller)) is not None),
                            None)
                return made if made is not None else _Ref("local", f"{_INSTANCE}{qualname}>")
            target = self._function_key(r, qualname, split[1])
            got = self._returned(r, target, node, scope, caller)
            if got is not None:
                return got
            generator = any(fn.is_generator() for fn in r.functions.get(target, []))
        except RecursionError:
            return _failed(f"{qualname}()", "too deep to follow")
        finally:
            self._busy.discard(key)
        # a generator of that module: what `.send()` hands it is judged where it is sent (monkeypatch.py)
        return _Ref("local", f"{_GENERATOR}{qualname}>") if generator else None

    def _returned(self, r: Resolver, target: str, node: ast.Call, scope: _Scope,
                  caller: Resolver) -> _Ref | None:
        """The foreign object the own function `target` of module `r` returns for the call `node` of the
        caller's (one it returns, or a foreign argument of the caller's it hands back), or None."""
        for fn in r.functions.get(target, []):
            args = r._call_arguments(node, fn)
            for value in fn.returns():
                ref = r.resolve(value, fn.scope)
                if ref is not None and ref.origin == "param" and ref.qualname.startswith(target + _SEP):
                    name = ref.qualname.rpartition(_SEP)[2]  # it hands back an argument of the caller's
                    for a in args.get(name, []):
                        t = caller.tainted(caller.resolve(a, scope))
                        if t is not None:
                            return t
                    continue
                t = self._foreign(r, ref)
                if t is not None:
                    return t
        return None

    @staticmethod
    def _function_key(r: Resolver, qualname: str, rest: list[str]) -> str:
        """The own function of module `r` a call of `qualname` runs: itself when it is a def, else what the
        name is bound to there (a lambda `get = lambda: E`, an alias, a method of a module-level instance
        `h = H()` called as `h.make()`)."""
        if qualname in r.functions:
            return qualname
        expr: ast.expr = ast.Name(id=rest[0], ctx=ast.Load())
        for attr in rest[1:]:
            expr = ast.Attribute(value=expr, attr=attr, ctx=ast.Load())
        r._kept.append(expr)
        ref = r.resolve(expr, r.module_scope)
        return ref.qualname if ref is not None and ref.origin == "own" and ref.qualname in r.functions \
            else qualname

    def instance_attribute(self, cls: str, attr: str, here: str | None) -> _Ref | None:
        """`obj.attr` for an instance of the own class `cls` of another module: the foreign object a property
        of it returns, or a class attribute holding one (`member`); None for the contribution's own."""
        split = self._split(cls)
        if split is None or split[0] == here:
            return None
        r = self._resolver(split[0])
        if r is None:
            return _failed(f"{cls}.{attr}", "an own module that cannot be read or parsed")
        keys = r._method_keys(cls, [attr])
        if keys:
            key = ("attr", f"{cls}.{attr}")
            if key in self._busy:
                return _failed(f"{cls}.{attr}", "its own modules read it in a cycle")
            self._busy.add(key)
            try:
                if self._returns_self(r, keys[0]):  # `@property def me(self): return self`: the instance
                    return _Ref("local", f"{_INSTANCE}{cls}>")
                return self._foreign(r, r._method_value(keys[0]))
            except RecursionError:
                return _failed(f"{cls}.{attr}", "too deep to follow")
            finally:
                self._busy.discard(key)
        return self.member(f"{cls}.{attr}", here)

    def raised(self, name: str, here: str | None) -> _Ref | None:
        """The foreign object an exception raised in the own module `name` (or the module of the own name
        `name`) carries (`raise ValueError(Engine)`), or None."""
        module = name if self._module(name) is not None else (self._split(name) or ("", []))[0]
        if not module or module == here:
            return None
        key = ("raised", module)
        if key in self._busy:
            return None
        r = self._resolver(module)
        if r is None:
            return None
        self._busy.add(key)
        try:
            return self._foreign(r, r.own_raised_ref())
        except RecursionError:
            return _failed(f"{module}: raise", "too deep to follow")
        finally:
            self._busy.discard(key)

    def dunder_result(self, cls: str, names: tuple[str, ...], here: str | None) -> _Ref | None:
        """The foreign object a dunder (`__call__`, `__iter__`, `__enter__`, ...) of the own class `cls` of
        another module returns for an instance of it, or None."""
        split = self._split(cls)
        if split is None or split[0] == here:
            return None
        r = self._resolver(split[0])
        if r is None:
            return _failed(f"{cls}.{names[0]}", "an own module that cannot be read or parsed")
        key = ("dunder", f"{cls}.{'/'.join(names)}")
        if key in self._busy:
            return None
        self._busy.add(key)
        try:
            return self._foreign(r, r._dunder_result(_Ref("local", f"{_INSTANCE}{cls}>"), names))
        except RecursionError:
            return _failed(f"{cls}.{names[0]}", "too deep to follow")
        finally:
            self._busy.discard(key)

    def instance_class(self, qualname: str, here: str | None) -> str | None:
        split = self._split(qualname)
        if split is None or split[0] == here:
            return None
        r = self._resolver(split[0])
        key = ("instance", qualname)
        if r is None or key in self._busy:
            return None
        self._busy.add(key)
        try:
            ref = r.resolve(self._expr(r, split[1]), r.module_scope)
        except RecursionError:
            return None
        finally:
            self._busy.discard(key)
        if ref is None or ref.origin != "local" or not ref.qualname.startswith(_INSTANCE):
            return None
        return ref.qualname[len(_INSTANCE):-1]

    def returned_maker(self, qualname: str, here: str | None) -> str | None:
        split = self._split(qualname)
        if split is None or split[0] == here:
            return None
        r = self._resolver(split[0])
        if r is None:
            return f"<{qualname}: an own module that cannot be read or parsed>"
        key = ("maker", qualname)
        if key in self._busy:
            return None
        self._busy.add(key)
        try:
            return r.returned_maker(self._function_key(r, qualname, split[1]))
        except RecursionError:
            return f"<{qualname}: too deep to follow>"
        finally:
            self._busy.discard(key)

    @staticmethod
    def _expr(r: Resolver, rest: list[str]) -> ast.expr:
        """The expression `a.b.c` for the names `rest` of module `r` (kept alive: the memo is by node id)."""
        expr: ast.expr = ast.Name(id=rest[0], ctx=ast.Load())
        for attr in rest[1:]:
            expr = ast.Attribute(value=expr, attr=attr, ctx=ast.Load())
        r._kept.append(expr)
        return expr

    @staticmethod
    def _returns_self(r: Resolver, key: str) -> bool:
        """The own method `key` of module `r` is a property whose getter may return its `self`."""
        for fn in r.functions.get(key, []):
            first = [*fn.node.args.posonlyargs, *fn.node.args.args][:1]
            if _is_property(fn.node) and first and any(
                    isinstance(v, ast.Name) and v.id == first[0].arg for v in fn.returns()):
                return True
        return False

    def engine_annotation(self, qualname: str, here: str | None, types: Sequence[str] | None) -> str | None:
        """The engine type another module's own name `qualname` names as an annotation (`Cls =
        type[Engine]`, `T = TypeVar("T", bound=Engine)`), read by that module's resolver; None otherwise."""
        split = self._split(qualname)
        if split is None or split[0] == here:
            return None
        r = self._resolver(split[0])
        key = ("annotation", qualname)
        if r is None or key in self._busy:
            return None
        expr: ast.expr = ast.Name(id=split[1][0], ctx=ast.Load())
        for attr in split[1][1:]:
            expr = ast.Attribute(value=expr, attr=attr, ctx=ast.Load())
        r._kept.append(expr)
        self._busy.add(key)
        try:
            return r._engine_annotation(expr, r.module_scope, types=types)
        except RecursionError:
            return None
        finally:
            self._busy.discard(key)

    def callback_arguments(self, qualname: str, node: ast.Call, arg: ast.expr,
                           caller: tuple[Resolver, _Scope] | None = None) -> list[Passed]:
        """What another module's function `qualname` passes, by position, to the callback `arg` a call `node`
        hands it (the foreign objects; `_failed` for each position of a module that cannot be read)."""
        split = self._split(qualname)
        if split is None:
            return []
        r = self._resolver(split[0])
        if r is None:
            failed = _failed(f"{qualname}()", "an own module that cannot be read or parsed")
            return [((failed,) * 8, {"*": failed})]
        key = ("callback", qualname)
        if key in self._busy:
            return []
        self._busy.add(key)
        try:
            return r.param_call_arguments(self._function_key(r, qualname, split[1]), node, arg, caller)
        except RecursionError:
            failed = _failed(f"{qualname}()", "too deep to follow")
            return [((failed,) * 8, {"*": failed})]
        finally:
            self._busy.discard(key)
