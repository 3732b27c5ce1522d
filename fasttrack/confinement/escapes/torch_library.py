"""torch ops (FT125): libraries, definitions and implementations outside the contribution's op namespace."""

from __future__ import annotations

import ast

from fasttrack.confinement.escapes.base import CheckBase
from fasttrack.confinement.escapes.common import (
    _DEFINING_FUNCS,
    _LIBRARY_METHODS,
    _TORCH_LIBRARY_FUNCS,
    TORCH_LIBRARY,
    _arg,
    _dotted_literal,
    _matches,
)
from fasttrack.confinement.escapes.scope import (
    _Alias,
    _Import,
    _Scope,
)


class TorchLibraryChecks(CheckBase):
    """torch ops outside the contribution's op namespace (FT125)."""

    def _op_is_own(self, ns: str, name: str | None) -> bool:
        """An op is own in an own namespace (`kimi_k3`, or `kimi_k3_<anything>` unless that is another
        model's), or in a shared engine namespace when its name starts with `<own>_`."""
        if ns in self.own_ops:
            return True
        if ns not in self.foreign_ops and any(ns.startswith(own + "_") for own in self.own_ops):
            return True
        if ns in self.settings.shared_op_namespaces and name:
            return any(name.startswith(own + "_") for own in self.own_ops)
        return False

    def _string_value(self, expr: ast.expr, scope: _Scope, prefix_only: bool = False) -> str | None:
        """The text of a string built from literals and names bound to string literals (f-strings, `+`).
        With prefix_only, an unknown part ends the text (marked by a NUL) instead of giving None."""
        lit = _dotted_literal(expr)
        if lit is not None:
            return lit
        parts: list[ast.expr]
        if isinstance(expr, ast.JoinedStr):
            parts = list(expr.values)
        elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            parts = [expr.left, expr.right]
        elif isinstance(expr, ast.Name):
            for b in self._lookup(expr.id, scope) or []:
                if isinstance(b, _Alias) and id(b.value) not in self._resolving:
                    self._resolving.add(id(b.value))
                    try:
                        value = self._string_value(b.value, b.scope)
                    finally:
                        self._resolving.discard(id(b.value))
                    if value is not None:
                        return value
            return None
        else:
            return None
        out = ""
        for part in parts:
            inner = part.value if isinstance(part, ast.FormattedValue) and part.format_spec is None \
                and part.conversion == -1 else part
            text = self._string_value(inner, scope, prefix_only) if isinstance(inner, ast.expr) else None
            if text is None:
                return out + "\x00" if prefix_only else None
            out += text
            if "\x00" in text:
                return out
        return out

    def _library_namespace(self, expr: ast.expr | None, scope: _Scope) -> str | None:
        """The namespace of a torch.library.Library object expression, when it can be known."""
        if expr is None:
            return None
        if isinstance(expr, ast.Call):
            callee = self.resolve(expr.func, scope)
            if callee is not None and callee.qualname == "torch.library.Library":
                return _dotted_literal(_arg(expr, 0, "ns"))
            return None
        if isinstance(expr, ast.Name):
            for b in self._lookup(expr.id, scope) or []:
                if isinstance(b, _Alias):
                    ns = self._library_namespace(b.value, b.scope)
                    if ns is not None:
                        return ns
                elif isinstance(b, _Import) and b.qualname in self.settings.engine_libraries:
                    return self.settings.engine_libraries[b.qualname]
            return None
        ref = self.resolve(expr, scope)
        if ref is not None and ref.qualname in self.settings.engine_libraries:
            return self.settings.engine_libraries[ref.qualname]
        return None

    def _op_target(self, expr: ast.expr | None, scope: _Scope) -> tuple[str | None, str | None, bool]:
        """(namespace, op name, known) of an op named by a "ns::name" string or a torch.ops.ns.name
        expression; known=False when it cannot be determined statically."""
        if expr is None:
            return None, None, False
        lit = _dotted_literal(expr)
        if lit is None and isinstance(expr, ast.JoinedStr | ast.BinOp | ast.Name):
            text = self._string_value(expr, scope, prefix_only=True) or ""
            known, _, _ = text.partition("\x00")  # the literal prefix; the rest is computed
            if "::" not in known:
                return None, None, False
            ns, _, rest = known.partition("::")
            name = rest.split(".")[0] if rest and len(known) == len(text) else None
            return ns, name, True
        if lit is not None:
            if "::" not in lit:
                return None, lit, False
            ns, _, name = lit.partition("::")
            return ns, name.split(".")[0], True
        ref = self.resolve(expr, scope)
        if ref is not None and ref.origin == "import" and ref.qualname.startswith("torch.ops."):
            parts = ref.qualname.split(".")
            if len(parts) >= 4:
                return parts[2], parts[3], True
        if ref is not None and ref.origin == "own":
            return next(iter(sorted(self.own_ops)), None), None, True
        return None, None, False

    def _check_torch_library(self, node: ast.Call, q: str, receiver: str, method: str,
                             scope: _Scope) -> bool:
        if q == "torch.library.Library":
            given = _arg(node, 0, "ns")
            ns = _dotted_literal(given)
            folded = self.constant_string(given, scope)
            if ns is None and folded in self.own_ops:
                ns = folded  # `'kimi' + '_k3'` folds to the own namespace (any other fold stays closed)
            kind = self.constant_string(_arg(node, 1, "kind"), scope) or "?"
            if ns is None:
                self.report(TORCH_LIBRARY, node, "creates a torch.library.Library whose namespace is not a "
                            "literal, so it cannot be checked", target=q)
            elif ns in self.own_ops:
                pass
            elif kind == "FRAGMENT" and ns in self.settings.shared_op_namespaces:
                pass  # each define/impl on it is judged by op name
            else:
                verb = "overrides ops of" if kind == "IMPL" else "defines ops in"
                self.report(TORCH_LIBRARY, node, f"torch.library.Library({ns!r}, {kind!r}) {verb} the "
                            f"`{ns}` namespace, outside the contribution's own "
                            f"({', '.join(sorted(self.own_ops)) or 'none'})", target=f"{ns}::*")
            return True
        if receiver in ("torch.library", "torch._library.custom_ops") and method in _TORCH_LIBRARY_FUNCS:
            ns, name, known = self._op_target(_arg(node, 0, "qualname", "op", "name", "op_name"), scope)
            verb = "defines" if method in _DEFINING_FUNCS else "registers an implementation for"
            if not known:
                self.report(TORCH_LIBRARY, node, f"`{q}` {verb} an op whose namespace cannot be determined "
                            "statically", severity="warning", target=q)
            elif ns is not None and not self._op_is_own(ns, name):
                self.report(TORCH_LIBRARY, node, f"`{q}` {verb} `{ns}::{name}`, outside the contribution's "
                            f"op namespace ({', '.join(sorted(self.own_ops)) or 'none'})",
                            target=f"{ns}::{name}")
            return True
        if _matches(q, self.settings.op_registrars):
            name = _dotted_literal(_arg(node, 0, "op_name"))
            lib_expr = _arg(node, 4, "target_lib")
            ns = self.settings.engine_op_namespace if lib_expr is None else \
                self._library_namespace(lib_expr, scope)
            if ns is None:
                self.report(TORCH_LIBRARY, node, f"`{q.split('.')[-1]}` registers into a library whose "
                            "namespace cannot be determined statically", target=q)
            elif name is None or not self._op_is_own(ns, name):
                shown = name or "<non-literal name>"
                self.report(TORCH_LIBRARY, node, f"`{q.split('.')[-1]}` defines `{ns}::{shown}`, outside the "
                            "contribution's op namespace (name it "
                            f"`{sorted(self.own_ops)[0] if self.own_ops else '<model>'}_...` or use an own "
                            "Library)", target=f"{ns}::{shown}")
            return True
        if q in ("torch.ops.load_library", "torch.classes.load_library"):
            self.report(TORCH_LIBRARY, node, f"`{q}` loads a compiled library whose op registrations cannot "
                        "be checked", target=q)
            return True
        if q in ("torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline"):
            self.report(TORCH_LIBRARY, node, f"`{q}` builds and loads a C++ extension whose op registrations "
                        "cannot be checked", severity="warning", target=q)
            return True
        if method in _LIBRARY_METHODS and receiver:
            ns = self._library_namespace(node.func.value if isinstance(node.func, ast.Attribute) else None,
                                         scope)
            op_lit = _dotted_literal(_arg(node, 0, "schema", "op_name", "qualname"))
            op_name = op_lit.split("(")[0].split(".")[0] if op_lit else None
            if op_name and "::" in op_name:
                ns, _, op_name = op_name.partition("::")
            if ns is None:
                ns = "?"
            if not self._op_is_own(ns, op_name):
                self.report(TORCH_LIBRARY, node, f"`{receiver.split('.')[-1]}.{method}` on a library outside "
                            f"the contribution touches `{ns}::{op_name or '*'}`", target=f"{ns}::{op_name}")
            return True
        return False

    def _check_library_method_on_local(self, node: ast.Call, scope: _Scope) -> None:
        """`lib.define/impl` where lib is a Library created in this file on a shared namespace."""
        if not isinstance(node.func, ast.Attribute) or node.func.attr not in _LIBRARY_METHODS:
            return
        ns = self._library_namespace(node.func.value, scope)
        if ns is None or ns in self.own_ops:
            return
        op_lit = _dotted_literal(_arg(node, 0, "schema", "op_name", "qualname"))
        op_name = op_lit.split("(")[0].split(".")[0] if op_lit else None
        if op_name and "::" in op_name:
            ns, _, op_name = op_name.partition("::")
        if not self._op_is_own(ns, op_name):
            self.report(TORCH_LIBRARY, node, f"`{node.func.attr}` on a `{ns}` library touches "
                        f"`{ns}::{op_name or '*'}`, outside the contribution's op namespace",
                        target=f"{ns}::{op_name}")
