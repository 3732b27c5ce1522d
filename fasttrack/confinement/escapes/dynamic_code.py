"""Code the scan cannot read or that loads code by name: `exec`/`eval`/`compile` (FT127), `importlib`
tricks (FT126), and classes created dynamically from engine bases or metaclasses (FT146)."""

from __future__ import annotations

import ast

from fasttrack.confinement.engine_signatures import known_metaclass
from fasttrack.confinement.escapes.base import CheckBase
from fasttrack.confinement.escapes.common import (
    _FILE_LOADERS,
    _MAX_EXEC_DEPTH,
    DYNAMIC_CODE,
    ENGINE_PARAM,
    GLOBAL_STATE,
    IMPORTLIB,
    UNPARSEABLE,
    _arg,
    _dotted_literal,
)
from fasttrack.confinement.escapes.scope import (
    _Alias,
    _Ref,
    _Scope,
)


class DynamicCodeChecks(CheckBase):
    """Code the scan cannot read or that loads code by name: `exec`/`eval`/`compile` (FT127), `importlib`"""

    def _check_importlib(self, node: ast.Call, q: str, scope: _Scope) -> bool:
        if q in ("importlib.import_module", "builtins.__import__"):
            if self._is_relative_load(node):
                loaded = self._loaded_module(node, q, scope)
                if loaded is None or self.is_own(loaded) or not self.own_packages:
                    return True
            else:
                loaded = self._loaded_module(node, q, scope)
            fn = "__import__" if q.endswith("__import__") else "importlib.import_module"
            if loaded in (None, "*"):
                self.report(IMPORTLIB, node, f"`{fn}` with a computed name: what it loads (and patches "
                            "through it) cannot be checked", severity="warning", target=q)
            elif not self.is_own(loaded) and any(
                    loaded == r or loaded.startswith(r + ".") for r in self.settings.hidden_import_roots):
                self.report(IMPORTLIB, node, f"`{fn}({loaded!r})` loads a module outside the contribution by "
                            "string, hidden from the import graph", severity="warning", target=loaded,
                            lenient=True)
            return True
        if q == "importlib.reload":
            first = _arg(node, 0, "module")
            mod = self.resolve(first, scope) if first is not None else None
            if mod is None or self.foreign(mod):
                shown = mod.qualname if mod is not None else "<unknown>"
                self.report(IMPORTLIB, node, f"`importlib.reload` re-executes `{shown}`, a module outside "
                            "the contribution", target=shown)
            return True
        if q in _FILE_LOADERS:
            name = _dotted_literal(_arg(node, 0, "name", "fullname"))
            if name is not None and not self.is_own(name) and "." in name:
                self.report(IMPORTLIB, node, f"`{q}` creates module `{name}` from a file: a second copy of a "
                            "module outside the contribution", target=name)
            else:
                self.report(IMPORTLIB, node, f"`{q}` loads a module from a file path that cannot be checked "
                            "statically", severity="warning", target=name or q)
            return True
        if q == "runpy.run_module":
            name = _dotted_literal(_arg(node, 0, "mod_name"))
            if name is None or not self.is_own(name):
                self.report(IMPORTLIB, node, f"`runpy.run_module` runs `{name or '<computed>'}`, outside the "
                            "contribution", target=name or q)
            return True
        if q == "runpy.run_path":
            self.report(IMPORTLIB, node, "`runpy.run_path` runs a file that cannot be checked statically "
                        "(fail closed: code the scan cannot read cannot be shown not to escape)", target=q)
            return True
        if q in _FUNCTION_MAKERS:
            globs = _arg(node, 1, "globals")
            ns = self.resolve(globs, scope) if globs is not None else None
            if self.foreign(ns) and ns is not None:
                self.report(DYNAMIC_CODE, node, f"`{q}` makes a function whose code runs in the namespace "
                            f"`{ns.qualname}` of a module outside the contribution: its global stores write "
                            "that module", target=ns.qualname)
            return True
        if q in _ANNOTATION_EVALUATORS:
            self._check_annotation_eval(node, q, scope)
            return True
        return False

    def _check_annotation_eval(self, node: ast.Call, q: str, scope: _Scope) -> None:
        """`typing.get_type_hints(f)` evaluates f's string annotations as code: one that is more than a type
        expression (a call, a walrus, a lambda) runs code the scan does not see as code (fail closed)."""
        first = _arg(node, 0, "obj")
        ref = self.resolve(first, scope) if first is not None else None
        if ref is None or ref.origin != "own":
            return
        anns: list[ast.expr] = []
        for fn in self.functions.get(ref.qualname, []):
            if not isinstance(fn.node, ast.Lambda):
                a = fn.node.args
                anns += [x.annotation for x in [*a.posonlyargs, *a.args, *a.kwonlyargs,
                                                *(v for v in (a.vararg, a.kwarg) if v is not None)]
                         if x.annotation is not None]
                anns += [fn.node.returns] if fn.node.returns is not None else []
        for c_node, _ in self.classes.get(ref.qualname, []):
            anns += [st.annotation for st in c_node.body if isinstance(st, ast.AnnAssign)]
        for ann in anns:
            if not (isinstance(ann, ast.Constant) and isinstance(ann.value, str)):
                continue
            try:
                parsed = ast.parse(ann.value, mode="eval")
            except (SyntaxError, ValueError, RecursionError):
                continue  # get_type_hints raises on it: nothing runs
            if any(isinstance(n, _CODE_NODES) for n in ast.walk(parsed)):
                self.report(DYNAMIC_CODE, node, f"`{q}` evaluates the string annotation {ann.value!r}, which "
                            "is code, not a type: what it runs cannot be checked", target=q)
                return

    def _check_dynamic_code(self, node: ast.Call, q: str, scope: _Scope) -> None:
        fn = q.split(".")[-1]
        src = _dotted_literal(_arg(node, 0, "source"))
        self.report(DYNAMIC_CODE, node, f"calls `{fn}()`: code built from strings cannot be checked for "
                    "escapes" + ("; its literal source was checked too" if src is not None else ""),
                    severity="warning", target=q, lenient=src is not None)
        # a literal, or the constant strings a name passed instead was bound to (`s = "x = y"; exec(s)`)
        sources = [src] if src is not None else self._constant_sources(_arg(node, 0, "source"), scope)
        for text in sources:
            bound = _names_bound(text) if fn in ("exec", "eval") else []
            if bound:
                self.report(DYNAMIC_CODE, node, f"the string passed to `{fn}()` binds `{bound[0]}` in the "
                            "namespace it runs in: a binding made by `exec`/`eval` is invisible to the scan, "
                            "so what the name refers to afterwards cannot be checked; write the statement "
                            "out",
                            target=f"{q}:{bound[0]}")
            if self.exec_depth < _MAX_EXEC_DEPTH:
                # the string runs in this module's namespace (exec/eval's default globals): it sees the
                # file's imports, so `exec("m.x = 1")` writes the engine module `m` this file imported
                prelude = self._import_prelude()
                skip = prelude.count("\n")
                inner = self._nested(prelude + text)
                for esc in inner.escapes:
                    if esc.code == UNPARSEABLE or esc.line <= skip:
                        continue
                    self.report(esc.code, node, f"in the string passed to `{fn}()`: {esc.message}",
                                severity=esc.severity, target=esc.target)

    def _import_prelude(self) -> str:
        """The file's module-level imports, one a line: what a string run by exec/eval sees of them."""
        lines = [ast.unparse(n) for n in self.tree.body if isinstance(n, ast.Import | ast.ImportFrom)
                 and not (isinstance(n, ast.ImportFrom) and n.module == "__future__")]
        return "".join(line + "\n" for line in lines)

    def _constant_sources(self, arg: ast.expr | None, scope: _Scope, depth: int = 0) -> list[str]:
        """The constant strings a name passed as source code is bound to anywhere in its scope (through
        aliases); a binding to anything else adds nothing (the call stays a warning)."""
        if not isinstance(arg, ast.Name) or depth > 8:
            return []
        out: list[str] = []
        for b in self._lookup(arg.id, scope) or []:
            if isinstance(b, _Alias):
                lit = _dotted_literal(b.value)
                out += [lit] if lit is not None else self._constant_sources(b.value, b.scope, depth + 1)
        return out

    def _is_metaclass_call(self, node: ast.Call, q: str, scope: _Scope) -> bool:
        """A metaclass called directly with (name, bases, namespace): `type(X)(...)`, `X.__class__(...)`
        (also through an alias), or a class that derives from `type` where its definition can be read
        (this file's, another own module's, the engine's or the baselines': `class Reg(type)`); where it
        cannot, a class named `*Meta`/`*Metaclass` (fail closed on the name)."""
        if len(node.args) + len(node.keywords) != 3:
            return False
        if self._class_of_expr(node.func, scope) is not None:
            return True
        kind = self._metaclass_kind(self.resolve(node.func, scope), 0)
        if kind is not None:
            return kind
        last = q.rsplit(".", 1)[-1]
        return last == "__class__" or last.endswith(("Meta", "Metaclass", "MetaClass"))

    def _metaclass_kind(self, ref: _Ref | None, depth: int) -> bool | None:
        """Whether the class `ref` derives from `type`: True, False, or None when a class of its MRO cannot
        be read."""
        if ref is None or depth > 8:
            return None
        if ref.origin == "own" and ref.qualname in self.classes:
            kinds: list[bool | None] = []
            for cls, outer in self.classes[ref.qualname]:
                for b in cls.bases:
                    base = b.value if isinstance(b, ast.Subscript) else b
                    kinds.append(self._metaclass_kind(self.resolve(base, outer), depth + 1))
            return True if True in kinds else None if None in kinds else False
        if ref.origin != "import" or ref.elements:
            return None
        known = known_metaclass(ref.qualname)
        if known is not None or self.metaclasses is None:
            return known
        return self.metaclasses(ref.qualname)

    def _class_of_expr(self, expr: ast.expr, scope: _Scope, depth: int = 0) -> ast.expr | None:
        """X when `expr` is `type(X)` or `X.__class__`, also through names bound to either
        (`meta = type(X); meta(...)`); None otherwise."""
        if depth > 8:
            return None
        if isinstance(expr, ast.Call) and len(expr.args) == 1 and not expr.keywords:
            maker = self.resolve(expr.func, scope)
            if maker is not None and maker.qualname == "builtins.type":
                return expr.args[0]
        if isinstance(expr, ast.Attribute) and expr.attr == "__class__":
            return expr.value
        if isinstance(expr, ast.Name):
            for b in self._lookup(expr.id, scope) or []:
                if isinstance(b, _Alias):
                    found = self._class_of_expr(b.value, b.scope, depth + 1)
                    if found is not None:
                        return found
        return None

    def _engine_class(self, ref: _Ref | None) -> bool:
        """Whether a resolved class is the engine's (a name of `hidden_import_roots`, an engine parameter's,
        or one reached through `__bases__`/`__subclasses__`/...: not provably anyone else's)."""
        if ref is None or not self.foreign(ref):
            return False
        q = ref.qualname
        return q.startswith(("<", ENGINE_PARAM + ".")) or any(
            q == r or q.startswith(r + ".") for r in self.settings.hidden_import_roots)

    def _check_dynamic_class(self, node: ast.Call, q: str, scope: _Scope, metaclass: bool = False) -> None:
        """`type(name, bases, ns)` / `types.new_class(...)` / a metaclass called directly run the bases'
        `__init_subclass__` and metaclass like a class statement, out of sight of a reader: an engine base
        or an engine metaclass is an error (it may register the new class in a shared registry; write a
        class statement), and so are bases the scan cannot read."""
        if (q == "builtins.type" or metaclass) and len(node.args) + len(node.keywords) != 3:
            return
        bases = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "bases"), None)
        if metaclass:
            of = self._class_of_expr(node.func, scope)
            meta = self.resolve(of, scope) if of is not None else self.resolve(node.func, scope)
            if self._engine_class(meta) and meta is not None:
                how = f"`type({meta.qualname})`" if of is not None else f"`{meta.qualname}`"
                self.report(GLOBAL_STATE, node, f"creates a class by calling the engine's metaclass ({how}) "
                            "directly: its `__new__`/`__init__` may register the new class in a shared "
                            "registry, out of sight of a class statement (write a class statement with the "
                            "model's own bases)", target=meta.qualname)
                return
        if q == "types.new_class" and bases is None:
            return  # no bases: a plain class
        if isinstance(bases, ast.Tuple | ast.List) and \
                not any(isinstance(e, ast.Starred) for e in bases.elts):
            for e in bases.elts:
                base = self.resolve(e, scope)
                if self._engine_class(base) and base is not None:
                    maker = "a metaclass" if metaclass else f"`{q.removeprefix('builtins.')}`"
                    self.report(GLOBAL_STATE, node, f"creates a subclass of the engine's `{base.qualname}` "
                                f"dynamically (with {maker}): the base's `__init_subclass__` or metaclass "
                                "may register it in a shared registry (write a class statement, which the "
                                "blast radius and review see)", target=base.qualname)
                    return
            return  # literal bases of the contribution's own or of torch/the stdlib: a plain class
        shown = f"the metaclass `{q}`" if metaclass else f"`{q.removeprefix('builtins.')}`"
        self.report(GLOBAL_STATE, node, f"creates a class with {shown} from computed "
                    "bases: the scan cannot tell whether a base registers its subclasses in a shared "
                    "registry (write a class statement, or list the bases literally)", target=q)


# make a function from a code object and a globals namespace
_FUNCTION_MAKERS = frozenset({"types.FunctionType", "types.LambdaType"})
# evaluate string annotations
_ANNOTATION_EVALUATORS = frozenset({"typing.get_type_hints", "typing_extensions.get_type_hints",
                                    "inspect.get_annotations", "annotationlib.get_annotations"})
# nodes that run code when a string annotation is evaluated
_CODE_NODES = (ast.Call, ast.NamedExpr, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
               ast.Await, ast.Yield, ast.YieldFrom)
# the `code` module: its interpreters compile and run source text
_CODE_RUNNERS = ("code.interact", "code.InteractiveInterpreter.", "code.InteractiveConsole.",
                 "code.compile_command")


def runs_source_text(name: str) -> bool:
    """A `code` module entry point that runs source text (`code.InteractiveInterpreter().runsource(s)`)."""
    return name.startswith(_CODE_RUNNERS) and not name.endswith((".__init__", "Interpreter", "Console"))


def _names_bound(src: str) -> list[str]:
    """The names a literal `exec`/`eval` source binds anywhere in it (stores, walrus, imports, defs,
    classes, global/nonlocal declarations), in order; empty when it does not parse (judged elsewhere)."""
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError, RecursionError):
        return []
    out: list[str] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del):
            out.append(n.id)
        elif isinstance(n, ast.Import | ast.ImportFrom):
            out += [a.asname or a.name.split(".")[0] for a in n.names]
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.append(n.name)
        elif isinstance(n, ast.Global | ast.Nonlocal):
            out += n.names
    return out
