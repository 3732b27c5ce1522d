"""Registrations into shared registries (FT124): the policy's registry callables, `register*` on foreign
objects and engine parameters, and allowed registrations applied to foreign objects."""

from __future__ import annotations

import ast

from fasttrack.confinement.escapes.base import CheckBase
from fasttrack.confinement.escapes.common import (
    ENGINE_PARAM,
    REGISTRY,
    _matches,
)
from fasttrack.confinement.escapes.scope import (
    _Ref,
    _Scope,
)


class RegistryChecks(CheckBase):
    """Registrations into shared registries (FT124)."""

    def _check_registration(self, node: ast.AST, q: str, *, registered: _Ref | None,
                            first_arg_local: bool, scope: _Scope | None = None) -> None:
        s = self.settings
        last = q.rsplit(".", 1)[-1]
        explicit = _matches(q, s.registry_callables)
        named = any(last == p or last.startswith(p + "_") for p in s.registration_prefixes)
        if not (explicit or named):
            return
        if _matches(q, s.allowed_registrations):
            return  # what a decorator registers is judged where it is applied (_check_decorator_application)
        receiver = q.rpartition(".")[0]
        onto_engine = receiver.startswith(ENGINE_PARAM + ".") or self._accessor_of(receiver) is not None
        if not explicit and first_arg_local and not onto_engine:
            return  # registering onto a local object (a hook on an own module instance), not a registry
        if not explicit and scope is not None and isinstance(node, ast.Call) and node.args and \
                not isinstance(node.args[0], ast.Starred):
            first = self.resolve(node.args[0], scope)
            if first is not None and first.origin == "param":
                self._record_param_write(first, node)  # onto the caller's object: judged at the call
                return
        what = f" `{registered.qualname}`" if registered is not None else ""
        self.report(REGISTRY, node, f"calls `{q}`{what}: a registration into a registry outside the "
                    "contribution, which changes what other models get", target=q)

    def _check_decorator_application(self, node: ast.Call, scope: _Scope) -> None:
        """`REG.register_processor(...)(Cls)`: an allowed registration applied to a foreign object."""
        assert isinstance(node.func, ast.Call)
        inner = self.resolve(node.func.func, scope)
        if inner is None or not self.foreign(inner):
            return
        if not _matches(inner.qualname, self.settings.allowed_registrations):
            return
        for a in node.args:
            ref = self.resolve(a, scope)
            if self.foreign(ref) and ref is not None:
                self.report(REGISTRY, node, f"`{inner.qualname}` is applied to `{ref.qualname}`, which is "
                            "not the contribution's own", target=inner.qualname)
                return

    def _check_bare_decorators(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef,
                               scope: _Scope) -> None:
        for dec in node.decorator_list:
            if isinstance(dec, ast.Call):
                continue
            ref = self.resolve(dec, scope)
            if self.foreign(ref) and ref is not None:
                self._check_registration(dec, ref.qualname, registered=_Ref("own", node.name),
                                         first_arg_local=False)
