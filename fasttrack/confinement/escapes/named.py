"""Objects a stdlib helper makes out of a name or a string (hostile review 24): string annotations evaluated
by `typing.get_type_hints` / `inspect.get_annotations(eval_str=True)`, a `ForwardRef` evaluated, an entry
point's `module:attr` loaded, `mock`'s dotted-target resolver, `functools.reduce(getattr, names, obj)`, and
calls handing back a module's shared object (`sysconfig.get_config_vars()`). Each resolves to what it names
where the name is a literal the scan can read in this module's namespace; anything else (a computed name, a
foreign namespace, a foreign class's hints) fails closed to a foreign object, so writes through it are
judged as writes to the engine's."""

from __future__ import annotations

import ast

from fasttrack.confinement.escapes.common import _arg
from fasttrack.confinement.escapes.scope import (
    _BOUND,
    _INSTANCE,
    _LOCAL_REF,
    _OF_FOREIGN,
    KEYED,
    Resolver,
    _Alias,
    _Ref,
    _Scope,
)
from fasttrack.confinement.escapes.stdlib_effects import SHARED_RESULTS

# readers of annotations: name -> whether they evaluate string annotations (a keyword name: when it is true)
_ANNOTATION_READERS: dict[str, bool | str] = {
    "typing.get_type_hints": True, "typing_extensions.get_type_hints": True,
    "inspect.get_annotations": "eval_str", "annotationlib.get_annotations": "format",
}
# evaluators of a ForwardRef: name -> (position of the ref (None: the receiver), of the globals namespace)
_FORWARD_EVALUATORS: dict[str, tuple[int | None, int | str]] = {
    "typing.ForwardRef._evaluate": (None, 0), "typing.ForwardRef.evaluate": (None, "globals"),
    "annotationlib.ForwardRef.evaluate": (None, "globals"), "typing._eval_type": (0, 1),
    "typing.evaluate_forward_ref": (0, "globals"),
}
_FORWARD_REFS = frozenset({"typing.ForwardRef", "annotationlib.ForwardRef"})
# methods loading the `module:attr` an entry point object was made with: (maker, position of its value)
_ENTRY_POINT_LOADS: dict[str, tuple[str, int, str]] = {
    "importlib.metadata.EntryPoint.load": ("importlib.metadata.EntryPoint", 1, "value"),
    "importlib_metadata.EntryPoint.load": ("importlib_metadata.EntryPoint", 1, "value"),
}
# dotted-name importers handing back the object named (position of the name)
_IMPORTERS: dict[str, int] = {"unittest.mock._importer": 0, "mock._importer": 0,
                              "unittest.mock._dot_lookup": 2, "mock._dot_lookup": 2, "pydoc.safeimport": 0}
# resolvers handing back a tuple whose first element is the object named: (position of the name)
_PAIR_RESOLVERS: dict[str, int] = {"pydoc.resolve": 0}
_TARGET_GETTERS = frozenset({"unittest.mock._get_target", "mock._get_target"})
_ANY_MODULE = _Ref("import", "sys.modules[*]")  # a computed name: any module's object (fail closed)


class NamedResolution(Resolver):
    """`_resolve_named` for the stdlib's name and string resolvers."""

    def _resolve_named(self, node: ast.Call, callee: _Ref | None, scope: _Scope) -> _Ref | None:
        if callee is None or callee.origin not in ("import", "local"):
            return None
        name = callee.qualname
        if callee.origin == "local":
            if not name.startswith(_BOUND):
                return None
            name = name[len(_BOUND):-1]
        if name in _ANNOTATION_READERS:
            return self._annotations_read(node, _ANNOTATION_READERS[name], scope)
        if name in _FORWARD_EVALUATORS:
            return self._forward_evaluated(node, name, scope)
        if name in _ENTRY_POINT_LOADS:
            return self._entry_point_loaded(node, name, scope)
        if name in _IMPORTERS:
            return self._named_object(self.constant_string(_arg(node, _IMPORTERS[name]), scope))
        if name in _PAIR_RESOLVERS:  # `pydoc.resolve(name)` is `(object, its name)`
            first = _arg(node, _PAIR_RESOLVERS[name], "thing")  # (anything but a literal: fail closed)
            return _Ref("local", "<container>", (self._named_object(self.constant_string(first, scope)),))
        if name in _TARGET_GETTERS:  # (a getter importing the module, the attribute's name)
            target = self.constant_string(_arg(node, 0, "target"), scope)
            module = target.rpartition(".")[0] if target is not None else None
            if module and self.is_own(module):
                return _LOCAL_REF
            getter = _Ref("import", f"<importer of {module or 'a computed name'}>")
            return _Ref("local", "<container>", (getter,))
        if name == "functools.reduce":
            return self._reduced_getattr(node, scope)
        if name == "typing.get_args" and node.args and isinstance(node.args[0], ast.Subscript):
            sl = node.args[0].slice  # get_args(X[a, b]) is (a, b): what a and b are
            return self._container(sl.elts if isinstance(sl, ast.Tuple) else [sl], scope)
        if name in SHARED_RESULTS and callee.origin == "import":
            result, bare = SHARED_RESULTS[name]
            if not bare or not (node.args or node.keywords):
                return _Ref("import", result)
        return None

    # -- annotations ---------------------------------------------------------------------------------------
    def _annotations_read(self, node: ast.Call, evaluates: bool | str, scope: _Scope) -> _Ref | None:
        first = _arg(node, 0, "obj")
        if first is None:
            return None
        if isinstance(evaluates, str):
            flag = _arg(node, 99, evaluates)
            evaluates = flag is not None and not (isinstance(flag, ast.Constant) and not flag.value)
        target = self.resolve(first, scope)
        if target is not None and target.origin == "own" and target.qualname in self.functions:
            return None  # an own function's annotations and defaults (scope.py)
        cls = None if target is None else target.qualname if target.origin == "own" else \
            target.qualname[len(_INSTANCE):-1] if target.qualname.startswith(_INSTANCE) else None
        globalns = _arg(node, 1, "globalns", "globals")
        if cls is not None and cls in self.classes and self._this_namespace(globalns, scope):
            return self._class_hints(cls, bool(evaluates))
        shown = target.qualname if target is not None and target.qualname else "an object"
        return _Ref("import", f"<annotations of {shown}>")  # any class's hints may name engine objects

    def _this_namespace(self, ns: ast.expr | None, scope: _Scope) -> bool:
        """Names are looked up in this module's globals: none given, None, or `globals()`."""
        if ns is None or (isinstance(ns, ast.Constant) and ns.value is None):
            return True
        r = self.resolve(ns, scope)
        return r is not None and r.qualname == f"{self.module or '<this module>'}.__dict__"

    def _class_hints(self, cls: str, evaluates: bool) -> _Ref:
        """An own class's annotations by name, string annotations evaluated when `evaluates` (in the module's
        namespace); keys of bases the scan cannot read (a foreign base's) are any foreign object."""
        future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
                     any(a.name == "annotations" for a in n.names) for n in self.tree.body)
        fields: list[_Ref] = []
        for base in reversed(self._own_bases(cls)):
            for c_node, outer in self.classes.get(base, []):
                for st in c_node.body:
                    if not isinstance(st, ast.AnnAssign) or not isinstance(st.target, ast.Name):
                        continue
                    ann: ast.expr | None = st.annotation
                    literal = isinstance(ann, ast.Constant) and isinstance(ann.value, str)
                    if literal or future:  # a string annotation: evaluated, or left a string
                        text = str(st.annotation.value) if isinstance(st.annotation, ast.Constant) \
                            else ast.unparse(st.annotation)
                        ann = self._parsed(text) if evaluates else None
                    t = self.tainted(self.resolve(ann, outer)) if ann is not None else None
                    if t is not None:
                        fields.append(_Ref("local", f"<field {st.target.id}>", (t,)))
        foreign = [b.qualname for c_node, outer in self.classes.get(cls, [])[:1] for base in c_node.bases
                   if (b := self.tainted(self.resolve(base, outer))) is not None]
        if foreign:  # inherited hints of an engine base
            fields.append(_Ref("local", "<field *>", (_Ref("import", f"<annotations of {foreign[0]}>"),)))
        return _Ref("local", KEYED, tuple(fields))

    def _parsed(self, text: str) -> ast.expr | None:
        try:
            expr = ast.parse(text.strip(), mode="eval").body
        except (SyntaxError, ValueError, RecursionError):
            return None
        self._kept.append(expr)
        return expr

    def _text_named(self, text: str | None) -> _Ref:
        """What the expression `text` evaluates to in this module's namespace (a computed text: anything)."""
        expr = self._parsed(text) if text is not None else None
        if expr is None:
            return _ANY_MODULE
        return self.resolve(expr, self.module_scope) or _LOCAL_REF

    def _forward_evaluated(self, node: ast.Call, name: str, scope: _Scope) -> _Ref:
        ref_pos, ns_pos = _FORWARD_EVALUATORS[name]
        if ref_pos is None:
            ref_node = node.func.value if isinstance(node.func, ast.Attribute) else None
        else:
            ref_node = _arg(node, ref_pos, "forward_ref", "t")
        globalns = _arg(node, ns_pos if isinstance(ns_pos, int) else 99,
                        *(("globalns", "globals") if isinstance(ns_pos, int) else (ns_pos,)))
        if not self._this_namespace(globalns, scope):
            return _ANY_MODULE
        if ref_node is not None and name == "typing._eval_type":
            ref = self.resolve(ref_node, scope)
            if ref is not None and not any(ref.qualname == f"{_OF_FOREIGN}{f}>" for f in _FORWARD_REFS) and \
                    not (ref.origin == "local" and not ref.qualname):
                return ref  # `_eval_type(T)` of a type that is no ForwardRef: T itself
        return self._text_named(self._forward_text(ref_node, scope, 0))

    def _forward_text(self, ref_node: ast.expr | None, scope: _Scope, depth: int) -> str | None:
        """The literal a ForwardRef was made with: `ForwardRef('X')` here, or a name every binding of which
        is one made with that same literal; None when it cannot be read (fail closed)."""
        if isinstance(ref_node, ast.Call):
            maker = self.resolve(ref_node.func, scope)
            if maker is not None and maker.qualname in _FORWARD_REFS:
                return self.constant_string(_arg(ref_node, 0, "arg"), scope)
            return None
        if not isinstance(ref_node, ast.Name) or depth > 4:
            return None
        bindings = self._lookup(ref_node.id, scope) or []
        texts = {self._forward_text(b.value, b.scope, depth + 1) if isinstance(b, _Alias) else None
                 for b in bindings}
        return texts.pop() if len(texts) == 1 else None

    # -- names ---------------------------------------------------------------------------------------------
    def _named_object(self, dotted: str | None) -> _Ref:
        if not dotted:
            return _ANY_MODULE
        return _Ref("import", dotted.replace(":", ".").split("[", 1)[0].strip())

    def _entry_point_loaded(self, node: ast.Call, name: str, scope: _Scope) -> _Ref:
        maker, pos, kw = _ENTRY_POINT_LOADS[name]
        recv = node.func.value if isinstance(node.func, ast.Attribute) else None
        if isinstance(recv, ast.Call):
            made = self.resolve(recv.func, scope)
            if made is not None and made.qualname == maker:
                return self._named_object(self.constant_string(_arg(recv, pos, kw), scope))
        return _ANY_MODULE  # an entry point made elsewhere: any module's object

    def _reduced_getattr(self, node: ast.Call, scope: _Scope) -> _Ref | None:
        """`functools.reduce(getattr, names, obj)` is `obj.n1.n2...`: the attribute chain, folded where the
        names are literals (`obj.*` where they are not)."""
        if len(node.args) != 3 or any(isinstance(a, ast.Starred) for a in node.args):
            return None
        f = self.resolve(node.args[0], scope)
        if f is None or f.qualname != "builtins.getattr":
            return None
        names = node.args[1]
        parts = [self.constant_string(e, scope) for e in names.elts] \
            if isinstance(names, ast.List | ast.Tuple) else [None]
        chain: ast.expr = node.args[2]
        for part in parts:
            if part is None or not part.isidentifier():
                base = self.resolve(chain, scope)
                if base is None or base.origin == "local":
                    return base
                return _Ref(base.origin, f"{base.qualname}.*")
            chain = ast.copy_location(ast.Attribute(value=chain, attr=part, ctx=ast.Load()), node)
        self._kept.append(chain)
        return self.resolve(chain, scope)
