"""What every escape checker shares: the state of the check pass (writes through parameters, calls to
the file's own functions, threads started) and how a write to a foreign target is classified and
reported (monkeypatch, interpreter, environment, process-wide state, engine state)."""

from __future__ import annotations

import ast
import re

from fasttrack.confinement.escapes.common import (
    _ENVIRON,
    _IMPORT_SYSTEM,
    _MUTATORS,
    _STATE_OBJECTS,
    ENGINE_PARAM,
    ENVIRONMENT,
    GLOBAL_STATE,
    INTERPRETER,
    MONKEYPATCH,
    SETATTR,
    EscapeSeverity,
    FileFacts,
    OwnImportWrite,
    _arg,
    _matches,
)
from fasttrack.confinement.escapes.scope import (
    _OF_FOREIGN,
    _SEP,
    Resolver,
    _Ref,
    _Scope,
)


class CheckBase(Resolver):
    """The resolver plus the shared state and reporting of the check pass."""

    def _record_param_write(self, ref: _Ref, node: ast.AST) -> None:
        key, _, name = ref.qualname.rpartition(_SEP)
        self.param_writes.setdefault((key, name), node)

    def _unresolved_write(self, node: ast.AST, what: str, code: str) -> None:
        self.report(code, node, f"{what} on an object the scan cannot resolve: it cannot be shown to be the "
                    "contribution's own", severity="warning", target="<unresolved>")

    def _classify(self, target: str) -> str | None:
        """The escape family of a write to `target`, when it is more specific than a monkeypatch."""
        if target == "builtins" or target.startswith(("builtins.", "builtins[")):
            return INTERPRETER
        if any(target == m or target.startswith((m + ".", m + "[")) for m in _IMPORT_SYSTEM):
            return INTERPRETER
        if target == "sys.path" or target.startswith(("sys.path.", "sys.path[")):
            return INTERPRETER
        if any(target == e or target.startswith((e + ".", e + "[")) for e in _ENVIRON):
            return ENVIRONMENT
        if any(target.startswith(m + ".") for m in self.settings.global_flag_modules):
            return ENVIRONMENT
        if any(target.startswith((o + ".", o + "[")) for o in _STATE_OBJECTS):
            return GLOBAL_STATE
        return None

    def _state_object(self, receiver: str) -> bool:
        """A receiver that is process state the classifier knows (`sys.path`, `os.environ`, a singleton),
        not a module whose functions are called (`builtins.set()`, `os.remove()`)."""
        return receiver != "builtins" and receiver not in self.module_imports and \
            self._classify(receiver) is not None

    def _env_severity(self, import_time: bool) -> EscapeSeverity:
        return "error" if import_time else "warning"

    def _report_write(self, node: ast.AST, target: str, verb: str, default_code: str,
                      import_time: bool, how: str) -> None:
        if _matches(target, self.settings.allowed_writes):
            return
        if target.startswith(ENGINE_PARAM + "."):
            shown = target[len(ENGINE_PARAM) + 1:]
            name = re.split(r"[.\[]", shown, maxsplit=1)[0]
            why = self.engine_param_why.get(name, "the engine's object")
            self.report(default_code, node, f"{verb} `{shown}` ({how}): `{name}` is a parameter the engine "
                        f"fills with its own object ({why}), which every layer and request of the engine "
                        "shares; model code may read it, not write it (copy what you need into the model's "
                        "own object, e.g. `self.x = ...`)", target=target)
            return
        accessor = self._accessor_of(target)
        if accessor is not None:
            self.report(default_code, node, f"{verb} `{target}` ({how}): state of the engine reached through "
                        f"`{accessor.rsplit('.', 1)[-1]}()` (its config, forward context or process groups), "
                        "which every layer and request of the engine shares; model code may read it, not "
                        "write it", target=target)
            return
        code = self._classify(target) or default_code
        if code == INTERPRETER:
            # sys.path itself, not sys.path_hooks / sys.path_importer_cache (the import system)
            on_path = target == "sys.path" or target.startswith(("sys.path.", "sys.path["))
            sev: EscapeSeverity = "warning" if on_path else "error"
            what = ("the builtins module" if target.startswith("builtins") else
                    "the import system" if not on_path else "sys.path")
            self.report(code, node, f"{verb} `{target}` ({how}): edits {what}, which every module shares",
                        severity=sev, target=target)
        elif code == ENVIRONMENT:
            when = "at import time" if import_time else "inside a function"
            self.report(code, node, f"{verb} `{target}` {when} ({how}): changes process-wide state that "
                        "every model sees", severity=self._env_severity(import_time), target=target)
        elif code == GLOBAL_STATE:
            self.report(code, node, f"{verb} `{target}` ({how}): process-wide state every model shares "
                        "(use a scoped form such as `with decimal.localcontext():`)", target=target)
        elif code == SETATTR:
            self.report(code, node, f"{verb} `{target}` ({how}) on a module or class outside the "
                        "contribution", target=target)
        else:
            self.report(code, node, f"{verb} `{target}` ({how}), an attribute of a module or class outside "
                        "the contribution: a monkeypatch that changes it for every model", target=target)

    def _own_import_write(self, ref: _Ref | None, code: str, what: str, how: str, node: ast.AST,
                          in_place: bool = False) -> None:
        """A write to a name imported from another of the contribution's modules: judged across files
        (a re-export of an engine object is the engine's)."""
        if ref is not None and ref.origin == "import" and self.is_own(ref.qualname) and \
                ref.qualname != self.module and not ref.elements:
            self.facts.own_import_writes.append(OwnImportWrite(code, ref.qualname, what, how,
                                                               getattr(node, "lineno", 1), in_place))

    def _bind_into_own_import(self, ref: _Ref | None, values: list[ast.expr] | None, name: str, how: str,
                              node: ast.AST, scope: _Scope) -> None:
        """`m.x = v`, `setattr(m, "x", v)`, `m.__dict__["x"] = v` on a name another of the contribution's
        modules binds (that module, or a name of it): the scan of that module reads `x` as its own global,
        so an engine object bound there from here is written through (`x.forward = f`) where neither scan
        follows it. An error (FT120) unless every value is provably plain (a constant, a value built here,
        this file's own def or class); `values` None: the value is not one the scan can read."""
        if ref is None or ref.origin != "import" or ref.elements or not self.is_own(ref.qualname):
            return
        module = ref.qualname.removesuffix(".__dict__")
        if module == self.module or not self.is_own(module):
            return
        if values is not None and all(self._plain_value(v, scope) for v in values):
            return
        self.report(MONKEYPATCH, node, f"{how} `{module}`, another of the contribution's modules, a value "
                    "the scan cannot show to be plain (an engine or torch object, a parameter, an import, "
                    "something unknown): that module reads the name as its own global, so a write through it "
                    "there is one the scan cannot follow; import or build the object in that module itself",
                    target=f"{module}.{name}")

    def _stored_values(self, node: ast.Attribute | ast.Subscript) -> list[ast.expr] | None:
        """The values a store to `node` binds: the right-hand side of a plain, annotated or augmented
        assignment that has `node` as a whole target; None for any other store (unpacking, a `for` or
        `with` target, ...), which the caller treats as unknown."""
        parent = self._parent(node)
        if isinstance(parent, ast.Assign) and any(t is node for t in parent.targets):
            return [parent.value]
        if isinstance(parent, ast.AnnAssign | ast.AugAssign) and parent.target is node:
            return [parent.value] if parent.value is not None else []
        return None

    def _own_namespace(self, ref: _Ref | None) -> bool:
        here = self.module or "<this module>"
        return ref is not None and ref.origin in ("own", "import") and not ref.elements and \
            ref.qualname in (here, f"{here}.__dict__", "<this module>", "<this module>.__dict__")

    def _check_namespace_write(self, node: ast.AST, scope: _Scope) -> None:
        """`globals()[k] = v`, `globals().update(...)`, `vars()[k] = v`, `sys.modules[__name__].k = v`,
        `setattr(sys.modules[__name__], k, v)`: binds a name of this module in a way the resolver cannot
        follow, so the name would then refer to what the scan never saw. An error (FT120) unless every value
        bound is provably a local value or the file's own thing (a constant, a def, a class)."""
        values: list[ast.expr] | None = None
        target: _Ref | None = None
        how = "assigns into"
        if isinstance(node, ast.Attribute | ast.Subscript) and isinstance(node.ctx, ast.Store):
            target = self.resolve(node.value, scope)
            if not self._own_namespace(target):
                return
            parent = self._parent(node)
            targets = parent.targets if isinstance(parent, ast.Assign) else \
                [parent.target] if isinstance(parent, ast.AnnAssign) else []
            values = [parent.value] if isinstance(parent, ast.Assign | ast.AnnAssign) and \
                parent.value is not None and node in targets else None
        elif isinstance(node, ast.Call):
            callee = self.resolve(node.func, scope)
            if callee is not None and callee.qualname == "builtins.setattr" and node.args:
                target = self.resolve(node.args[0], scope)
                value = _arg(node, 2, "value")
                values = [value] if value is not None and not any(
                    isinstance(a, ast.Starred) for a in node.args) else None
                how = "sets a name by `setattr()` in"
            elif callee is not None and callee.origin == "own" and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in _MUTATORS:
                target = _Ref("own", callee.qualname.rpartition(".")[0])
                values = [a.value if isinstance(a, ast.Starred) else a for a in node.args] + \
                    [k.value for k in node.keywords]
                how = f"calls `.{node.func.attr}()` on"
            else:
                return
        else:
            return
        if not self._own_namespace(target):
            return
        if values is not None and all(self._plain_value(v, scope) for v in values):
            return
        here = self.module or "<this module>"
        self.report(MONKEYPATCH, node, f"{how} this module's own namespace (`globals()`, `vars()`, "
                    "`sys.modules[__name__]`) a value the scan cannot show to be a plain local one: a name "
                    "bound that way is invisible to the scan, so what it refers to afterwards cannot be "
                    "checked; bind it with a plain assignment", target=f"{here}.__dict__")

    def _plain_value(self, value: ast.expr, scope: _Scope) -> bool:
        """A value built here or the file's own def/class: nothing foreign, no parameter, nothing unknown."""
        if isinstance(value, ast.Constant):
            return True
        if isinstance(value, ast.Call) and not all(
                self._plain_value(a.value if isinstance(a, ast.Starred) else a, scope)
                for a in [*value.args, *(k.value for k in value.keywords)]):
            return False  # `staticmethod(Engine.forward)`, `K(engine_obj)`: it may return its argument
        r = self.resolve(value, scope)
        return r is not None and r.origin in ("local", "own") and not r.elements and \
            (not r.qualname.startswith("<") or r.qualname.startswith(_OF_FOREIGN))  # `Engine()` built here

    def _engine_state(self, receiver: str) -> bool:
        """Whether a dotted receiver is an object of the engine's (not a module of it): reached through an
        engine parameter, an engine accessor, or a name of the engine's packages not imported as a module."""
        if receiver.startswith(ENGINE_PARAM + ".") or self._accessor_of(receiver) is not None:
            return True
        # a class, a constant or an item of the engine's (`vllm.x.Registry`, `vllm.x.TABLE[...]`); not a
        # module of it bound by `from vllm.x import ops` (`ops.rms_norm_(...)` writes its arguments)
        parts = receiver.replace("[", ".[").split(".")
        return receiver not in self.module_imports and not self.is_own(receiver) and any(
            receiver.startswith(r + ".") for r in self.settings.hidden_import_roots) and \
            any(p[:1].isupper() or p.startswith("[") for p in parts[1:])

    def _first_arg_local(self, node: ast.Call, scope: _Scope) -> bool:
        if not node.args or isinstance(node.args[0], ast.Starred):
            return False
        ref = self.resolve(node.args[0], scope)
        return ref is not None and ref.origin == "local" and not isinstance(node.args[0], ast.Constant)

    def _nested(self, source: str) -> FileFacts:
        """The facts of code given as a literal string (`exec("...")`), analysed like the file itself."""
        raise NotImplementedError

    def _check_call(self, node: ast.Call, scope: _Scope, import_time: bool) -> None:
        """Judge one call (the analyser dispatches it to every checker)."""
        raise NotImplementedError
