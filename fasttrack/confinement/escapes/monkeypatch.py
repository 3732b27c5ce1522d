"""Monkeypatches (FT120/FT121): writes to objects outside the contribution, by attribute, item, `del`, `+=`,
`setattr`, `__setattr__`, `operator.setitem`, `mock.patch`, mutating methods, and through the file's own
helpers that write their parameters (propagated to a fixpoint, and across files via `FileFacts`)."""

from __future__ import annotations

import ast

from fasttrack.confinement.escapes.base import CheckBase
from fasttrack.confinement.escapes.common import (
    _MUTATORS,
    ENGINE_PARAM,
    MONKEYPATCH,
    ON_INSTANCE,
    SETATTR,
    _arg,
    _dotted_literal,
    _matches,
    _namespace_of,
    state_like_receiver,
)
from fasttrack.confinement.escapes.scope import (
    _COPY,
    _GENERATOR,
    _LOCAL,
    _PARTIAL,
    _SEP,
    _Function,
    _Ref,
    _Scope,
)
from fasttrack.confinement.escapes.sends import own_generator

# positions of a `*args` parameter a cross-module writer lists (a caller passing more is rare; `*xs` is "*")
_VARARG_POSITIONS = 16


class MonkeypatchChecks(CheckBase):
    """Monkeypatches (FT120/FT121): writes to objects outside the contribution."""

    def _check_helper_calls(self) -> None:
        """A call handing a foreign object to an own function that writes through that parameter (directly
        or through further own calls: propagated to a fixpoint) is the write itself."""
        changed = True
        while changed:
            changed = False
            for call, scope, key in self.own_calls:
                for fn in self.functions.get(key, []):
                    for name, exprs in self._call_arguments(call, fn).items():
                        if (key, name) not in self.param_writes:
                            continue
                        for e in exprs:
                            r = self.resolve(e, scope)
                            held = [r] if r is not None and r.origin == "param" else [
                                x for x in (r.elements if r is not None else ()) if x.origin == "param"]
                            for p in held:
                                k2, _, n2 = p.qualname.rpartition(_SEP)
                                if (k2, n2) not in self.param_writes:
                                    self.param_writes[(k2, n2)] = self.param_writes[(key, name)]
                                    changed = True
        for call, scope, key in self.own_calls:
            for fn in self.functions.get(key, []):
                for name, exprs in self._call_arguments(call, fn).items():
                    write = self.param_writes.get((key, name))
                    if write is None:
                        continue
                    for e in exprs:
                        r = self.resolve(e, scope)
                        t = self.tainted(r)
                        if t is None:
                            # a name another own module binds: the engine's object when it re-exports it
                            helper = key.rsplit(".", 1)[-1]
                            self._own_import_write(r, MONKEYPATCH, "", f"passes to `{helper}` (which writes "
                                                   f"through its parameter `{name}`)", call)
                        if t is not None:
                            shown = key.rsplit(".", 1)[-1]
                            at = getattr(write, "lineno", "?")
                            self.report(MONKEYPATCH, call, f"passes `{t.qualname}` to `{shown}`, which "
                                        f"writes through its parameter `{name}` (line {at}): a monkeypatch "
                                        "of an object outside the contribution",
                                        target=t.qualname)
        self._check_callbacks()
        self._check_foreign_sends()
        for key, fns in self.functions.items():
            if key.startswith("<lambda>"):
                continue
            names = [n for (k, n) in self.param_writes if k == key]
            written = frozenset(r for fn in fns for n in names for r in self._param_refs(fn, n))
            if not written:
                continue
            if key in self.method_keys:  # called on an instance (bound), and called on its class
                self.facts.param_writers[key + ON_INSTANCE] = written
                written = frozenset(r for fn in fns for n in names
                                    for r in self._param_refs(fn, n, _on_class(fn)))
            self.facts.param_writers[key] = written

    def _check_callbacks(self) -> None:
        """An own function that writes through a parameter, handed as a callback to a function (of this
        file or another own module) that calls it with a foreign object: the write is to that object."""
        for node, scope, _ in self.candidates:
            if not isinstance(node, ast.Call):
                continue
            callee = self.resolve(node.func, scope)
            if callee is None:
                continue
            for arg in node.args + [k.value for k in node.keywords]:
                cb = self.resolve(arg, scope)
                if cb is None or cb.origin != "own" or \
                        not any(k == cb.qualname for k, _ in self.param_writes):
                    continue
                if callee.origin == "own" and callee.qualname in self.functions:
                    passed = self.param_call_arguments(callee.qualname, node, arg, (self, scope))
                elif callee.origin == "import" and self.is_own(callee.qualname) and self.cross is not None:
                    passed = self.cross.callback_arguments(callee.qualname, node, arg, (self, scope))
                else:
                    continue
                for fn in self.functions.get(cb.qualname, []):
                    for refs, keywords in passed:
                        by_name = [*zip(fn.positional, refs, strict=False),
                                   *((n, keywords.get(n) or keywords.get("*"))
                                     for n in (*fn.positional, *fn.keyword_only))]
                        for name, t in by_name:
                            write = self.param_writes.get((cb.qualname, name))
                            if t is not None and write is not None:
                                self.report(MONKEYPATCH, node, f"hands `{cb.qualname.rsplit('.', 1)[-1]}` "
                                            f"to a function that calls it with `{t.qualname}`, and it writes "
                                            f"through its parameter `{name}` (line "
                                            f"{getattr(write, 'lineno', '?')}): a monkeypatch of an object "
                                            "outside the contribution", target=t.qualname)

    def _check_foreign_sends(self) -> None:
        """A send or throw of a foreign object (sends.py: direct, or through the bound method handed on) into
        a generator this file cannot be shown to make (another own module's, one that came back from a
        container, a return, a parameter, a re-export): the yields it resumes are in code this file's sends
        are not linked to (fail closed: an error). A bound method handed on where what it is sent cannot be
        followed is an error too, unless it is a generator of this file (then its yields fail closed)."""
        for site in self.send_sites():
            if own_generator(self, site.receiver, site.scope):
                continue
            verb = "throws" if site.throw else "sends"
            receiver = self.resolve(site.receiver, site.scope)
            what = f"a generator of another module (`{receiver.qualname[len(_GENERATOR):-1]}`)" \
                if receiver is not None and receiver.qualname.startswith(_GENERATOR) else \
                "a generator the scan cannot show this file makes"
            if site.sent is None:
                self.report(MONKEYPATCH, site.node, f"hands on the bound `{verb[:-1]}` of {what}, where what "
                            "it is given cannot be followed: a write through it would go unseen (call it "
                            "directly with the contribution's own objects)", target="<generator>")
                continue
            for t in site.sent[:1]:
                self.report(MONKEYPATCH, site.node, f"{verb} `{t.qualname}` into {what}: the scan cannot "
                            "follow it there, so a write through what it is sent would go unseen (send the "
                            "contribution's own objects, or define the generator in this file)",
                            target=t.qualname)

    @staticmethod
    def _param_refs(fn: _Function, name: str, shift: int = 0) -> tuple[int | str, ...]:
        """A written parameter as a caller can fill it: its position (when positional; `shift` more for a
        plain method called on its class, which takes self first) and its name. `*args`: every position
        after the named ones (and a starred argument); `**kwargs`: any keyword ("**") but the named
        parameters' ("-name": not through `**kwargs`)."""
        args = fn.node.args
        if args.vararg is not None and name in ("*", args.vararg.arg):
            first = len(fn.positional) + shift
            return (*range(first, first + _VARARG_POSITIONS), "*")
        if args.kwarg is not None and name in ("**", args.kwarg.arg):
            return ("**", *(f"-{n}" for n in (*fn.positional, *sorted(fn.keyword_only))))
        return (fn.positional.index(name) + shift, name) if name in fn.positional else (name,)

    def _check_attribute_write(self, node: ast.Attribute, scope: _Scope, import_time: bool) -> None:
        base = self.resolve(node.value, scope)
        verb = "deletes" if isinstance(node.ctx, ast.Del) else "assigns"
        if base is None:
            self._unresolved_write(node, f"{verb} `{node.attr}`", MONKEYPATCH)
            return
        if base.origin == "param" and node.attr in ("__class__", "__dict__"):
            self.report(MONKEYPATCH, node, f"{verb} `{node.attr}` of an object the function was given: "
                        "swapping an object's class or namespace changes it for everyone who holds it "
                        "(wrap or subclass it instead)", target=f"<parameter>.{node.attr}")
            return
        if self._sub_object_behaviour(node, scope, verb):
            return
        if base.origin == "param":
            if not self._engine_instance_patch(node.value, node.attr, node, scope, verb):
                self._record_param_write(base, node)
            return
        if not self.foreign(base) and self._engine_instance_patch(node.value, node.attr, node, scope, verb):
            return  # (declared an engine instance another way: `layer: L = x`, `isinstance`, `cast`, ...)
        if base.elements and not self.foreign(base) and base.qualname not in (_COPY, _PARTIAL):
            base = base.elements[0]
        if base.origin == "classof":
            self.report(MONKEYPATCH, node, f"{verb} `{node.attr}` on the class of an object "
                        "(`type(x)`/`x.__class__`): a class-wide patch whose class cannot be checked "
                        "statically", severity="warning", target=f"{base.qualname}.{node.attr}")
            return
        if not self.foreign(base):
            self._own_import_write(base, MONKEYPATCH, f".{node.attr}", f"{verb} `{node.attr}` on", node)
            if verb == "assigns":
                self._bind_into_own_import(base, self._stored_values(node), node.attr,
                                           f"assigns `{node.attr}` into", node, scope)
            return
        self._report_write(node, f"{base.qualname}.{node.attr}", verb, MONKEYPATCH, import_time,
                           "attribute assignment" if verb == "assigns" else "del")

    def _engine_instance_patch(self, obj: ast.expr | None, attr: str, node: ast.AST, scope: _Scope,
                               verb: str) -> bool:
        """`layer.forward = f` (also through `layer.__dict__[...]`, `setattr`, `object.__setattr__`) where
        `layer` is a parameter annotated with an engine class: the engine's own instance (the model did not
        make it) gets new behaviour for every caller; reported (True) when `attr` is behaviour, not data."""
        if obj is None:
            return False
        cls = self.engine_instance_of(obj, scope)
        if cls is None or not (attr == "*" or self.engine_method_name(cls, attr)):
            return False
        self.report(MONKEYPATCH, node, f"{verb} `{attr}` on an instance of the engine's `{cls}` the function "
                    "was given: a per-instance patch of an object the engine owns (and hands to others) "
                    "changes the engine's behaviour; subclass or wrap it in the model's own layer instead",
                    target=f"{cls}.{attr}")
        return True

    def _sub_object_behaviour(self, node: ast.Attribute, scope: _Scope, verb: str) -> bool:
        """`layer.quant_method.apply = f`: a callable (a lambda, an own function, a builtin, a bound method
        or partial made here) stored on an object an engine instance holds. Which of the sub-object's
        attributes are behaviour is not known, so a callable stored there is judged as behaviour (fail
        closed); data stores (`layer.quant_method.scale = 2`) stay the caller's business."""
        if isinstance(node.value, ast.Name):  # `case L(quant_method=q): q.apply = f`
            cls = self.matched_sub_object(node.value, scope)
            held = node.value.id
        elif not isinstance(node.value, ast.Attribute) or node.value.attr.startswith("__"):
            return False
        else:
            cls = self.engine_instance_of(node.value.value, scope)
            held = node.value.attr
        values = self._stored_values(node)
        if cls is None or not values:
            return False
        for v in values:
            r = self.resolve(v, scope)
            made = isinstance(v, ast.Call) and (f := self.resolve(v.func, scope)) is not None and \
                f.qualname in ("types.MethodType", "functools.partial", "functools.wraps")
            own_fn = r is not None and r.origin == "own" and r.qualname in self.functions
            builtin = r is not None and r.origin == "import" and r.qualname.startswith("builtins.") and \
                r.qualname[len("builtins."):][:1].islower()
            if isinstance(v, ast.Lambda) or made or own_fn or builtin:
                self.report(MONKEYPATCH, node, f"{verb} a callable to `{held}.{node.attr}` of an "
                            f"instance of the engine's `{cls}` the function was given: new behaviour on an "
                            "object the engine owns", target=f"{cls}.{held}.{node.attr}")
                return True
        return False

    def _check_aug_name(self, node: ast.AugAssign, scope: _Scope, import_time: bool) -> None:
        """`NAME += v` / `NAME |= v` on a name bound to an imported object: a list's, dict's or set's
        `__iadd__`/`__ior__` updates the object in place before the name is rebound."""
        assert isinstance(node.target, ast.Name)
        ref = self.resolve(node.target, scope)
        op = type(node.op).__name__
        if ref is None:
            return
        if ref.origin == "param":
            self._record_param_write(ref, node)
        elif self.foreign(ref):
            self._report_write(node, ref.qualname, "updates", MONKEYPATCH, import_time,
                               f"augmented assignment ({op}), in place on a list, dict or set")
        else:
            self._own_import_write(ref, MONKEYPATCH, "", "updates in place (augmented assignment)", node)

    def _check_subscript_write(self, node: ast.Subscript, scope: _Scope, import_time: bool) -> None:
        base = self.resolve(node.value, scope)
        if base is None:
            self._unresolved_write(node, "writes an item", MONKEYPATCH)
            return
        if isinstance(node.value, ast.Attribute) and node.value.attr.startswith("_") and \
                not node.value.attr.startswith("__") and self._engine_instance_patch(
                    node.value.value, f"{node.value.attr}[...]", node, scope, "writes"):
            return  # `layer._forward_hooks[k] = f`, `layer._modules[k] = m`: the instance's machinery
        if base.origin == "param":
            owner = _namespace_of(node.value)
            item = _dotted_literal(node.slice) or "*"
            if owner is None or not self._engine_instance_patch(owner, item, node, scope, "writes"):
                self._record_param_write(base, node)
            return
        if not self.foreign(base):
            verb = "deletes an item of" if isinstance(node.ctx, ast.Del) else "writes an item of"
            self._own_import_write(base, MONKEYPATCH, "[...]", verb, node)
            if base.qualname.endswith(".__dict__") and not isinstance(node.ctx, ast.Del):
                item = _dotted_literal(node.slice) or "*"
                self._bind_into_own_import(base, self._stored_values(node), item,
                                           "writes an item into the namespace of", node, scope)
            return
        if self._self_registration(node, base.qualname, scope):
            return
        key = _dotted_literal(node.slice)
        target = f"{base.qualname}[{key!r}]" if key else f"{base.qualname}[...]"
        verb = "deletes" if isinstance(node.ctx, ast.Del) else "writes"
        default = SETATTR if base.qualname.endswith(".__dict__") else MONKEYPATCH
        self._report_write(node, target, verb, default, import_time, "item assignment")

    def _self_registration(self, node: ast.Subscript, container: str, scope: _Scope) -> bool:
        """`cc.static_forward_context[prefix] = self` in a method: a layer registering itself where the
        engine asks it to (policy `engine_self_registrations`). Only a plain assignment of the method's own
        instance qualifies; deletes, other values and augmented assignments do not."""
        head = f"{ENGINE_PARAM}.vllm_config."
        if container.startswith(head):  # the model's `vllm_config` is the current VllmConfig
            container = f"vllm.config.get_current_vllm_config().{container[len(head):]}"
        if not isinstance(node.ctx, ast.Store) or not _matches(container,
                                                               self.settings.engine_self_registrations):
            return False
        stmt = self._parent(node)
        if not isinstance(stmt, ast.Assign) or stmt.targets != [node] or not isinstance(stmt.value, ast.Name):
            return False
        key = self._enclosing_function(scope)
        for fn in self.functions.get(key or "", []):
            node_args = fn.node.args
            first = [*node_args.posonlyargs, *node_args.args][:1]
            if fn.scope.parent is not None and fn.scope.parent.kind == "class" and first and \
                    first[0].arg == stmt.value.id and fn.scope is scope and \
                    scope.bindings.get(stmt.value.id) == [_LOCAL]:
                return True
        return False

    def _check_item_writer(self, node: ast.Call, q: str, scope: _Scope, import_time: bool) -> None:
        first = _arg(node, 0)
        obj = self.resolve(first, scope) if first is not None else None
        fn = q.rsplit(".", 1)[-1]
        if obj is None:
            self._unresolved_write(node, f"`{q}`", MONKEYPATCH)
        elif obj.origin == "param":
            self._record_param_write(obj, node)
        else:
            self._own_import_write(obj, MONKEYPATCH, "[...]", f"writes an item by `operator.{fn}()` of", node)
            t = self.tainted(obj)
            if t is not None:
                code = SETATTR if t.qualname.endswith(".__dict__") else MONKEYPATCH
                self._report_write(node, f"{t.qualname}[...]", "writes", code, import_time,
                                   f"operator.{fn}()")

    def _record_foreign_call(self, node: ast.Call, q: str, scope: _Scope) -> None:
        """A call into another module of the contribution with foreign arguments: judged across files
        against that module's `param_writers` (fasttrack.rules.escapes)."""
        held: dict[int | str, str] = {}
        for i, a in enumerate(node.args):
            t = self.tainted(self.resolve(a.value if isinstance(a, ast.Starred) else a, scope))
            if t is not None:
                held["*" if isinstance(a, ast.Starred) else i] = t.qualname
        for kw in node.keywords:
            t = self.tainted(self.resolve(kw.value, scope))
            if t is not None:
                held[kw.arg or "**"] = t.qualname
        if held:
            self.facts.foreign_calls.append((q, held, getattr(node, "lineno", 1)))

    def _check_setattr(self, node: ast.Call, q: str, scope: _Scope, import_time: bool) -> None:
        fn = q.split(".")[-1]
        verb = "deletes" if fn == "delattr" else "sets"
        first = _arg(node, 0)
        if first is None:
            star = next((a for a in node.args if isinstance(a, ast.Starred)), None)
            if star is None:
                return
            held = self.resolve(star.value, scope)
            t = self.tainted(held)
            if t is not None:
                self._report_write(node, f"{t.qualname}.*", verb, SETATTR, import_time, f"{fn}(*args)")
            elif held is not None and held.origin == "param":
                self._record_param_write(held, node)
            else:
                self._unresolved_write(node, f"{fn}(*args)", SETATTR)
            return
        obj = self.resolve(first, scope)
        name = _dotted_literal(_arg(node, 1)) or "*"
        if obj is None:
            self._unresolved_write(node, f"{fn}()", SETATTR)
            return
        if obj.origin == "param":
            if not self._engine_instance_patch(first, name, node, scope, verb):
                self._record_param_write(obj, node)
            return
        self._own_import_write(obj, SETATTR, f".{name}", f"{verb} `{name}` by `{fn}()` on", node)
        if fn == "setattr":
            value = _arg(node, 2, "value")
            starred = any(isinstance(a, ast.Starred) for a in node.args) or any(
                k.arg is None for k in node.keywords)
            self._bind_into_own_import(obj, [value] if value is not None and not starred else None, name,
                                       f"sets `{name}` by `setattr()` into", node, scope)
        if obj.elements and not self.foreign(obj) and obj.qualname not in (_COPY, _PARTIAL):
            obj = obj.elements[0]
        if obj is not None and obj.origin == "classof":
            self.report(SETATTR, node, f"{fn}() on the class of an object (`type(x)`/`x.__class__`): a "
                        "class-wide patch whose class cannot be checked statically", severity="warning",
                        target=f"{obj.qualname}.{name}")
        elif self.foreign(obj) and obj is not None:
            self._report_write(node, f"{obj.qualname}.{name}", verb, SETATTR, import_time, f"{fn}()")

    def _check_dunder_setattr(self, node: ast.Call, receiver: str, scope: _Scope,
                              import_time: bool) -> None:
        # object.__setattr__(target, name, value) vs. Foreign.__setattr__(name, value)
        if receiver in ("builtins.object", "builtins.type"):
            first = _arg(node, 0)
            obj = self.resolve(first, scope) if first is not None else None
            name = _dotted_literal(_arg(node, 1)) or "*"
            if obj is not None and obj.origin == "param" and \
                    self._engine_instance_patch(first, name, node, scope, "sets"):
                return
        else:
            obj = _Ref("import", receiver)
            name = _dotted_literal(_arg(node, 0)) or "*"
        self._own_import_write(obj, SETATTR, f".{name}", f"sets `{name}` by `__setattr__` on", node)
        if self.foreign(obj) and obj is not None:
            self._report_write(node, f"{obj.qualname}.{name}", "sets", SETATTR, import_time, "__setattr__")

    def _check_mock_patch(self, node: ast.Call, q: str, scope: _Scope, import_time: bool) -> None:
        first = _arg(node, 0, "target")
        if first is None:
            return
        if q.endswith(".object"):
            obj = self.resolve(first, scope)
            name = _dotted_literal(_arg(node, 1, "attribute")) or "*"
            if self.foreign(obj) and obj is not None:
                self._report_write(node, f"{obj.qualname}.{name}", "patches", SETATTR, import_time,
                                   "mock.patch.object")
            return
        if q.endswith(".dict"):
            lit = _dotted_literal(first)
            obj = _Ref("import", lit) if lit else self.resolve(first, scope)
            if self.foreign(obj) and obj is not None:
                self._report_write(node, obj.qualname, "patches", SETATTR, import_time, "mock.patch.dict")
            return
        target = _dotted_literal(first)
        if target and not self.is_own(target):
            self._report_write(node, target, "patches", SETATTR, import_time, "mock.patch")

    def _check_mutator(self, node: ast.Call, receiver: str, method: str, import_time: bool,
                       scope: _Scope) -> bool:
        last = receiver.rsplit(".", 1)[-1]
        if (receiver.startswith("builtins.") and receiver != "builtins.__dict__") or (
                last[:1].isupper() and not last.isupper() and node.args):
            # An unbound method (dict.update(d, ...), OrderedDict.pop(d, k)) mutates its first argument.
            first = _arg(node, 0)
            obj = self.resolve(first, scope) if first is not None else None
            if self.foreign(obj) and obj is not None and not obj.qualname.startswith("builtins."):
                self._report_write(node, obj.qualname, "mutates", MONKEYPATCH, import_time,
                                   f"{last}.{method}()")
                return True
            if obj is not None and obj.origin == "param":  # `dict.__setitem__(d, k, v)` in a helper: judged
                self._record_param_write(obj, node)       # where a caller hands it a foreign object
            if receiver.startswith("builtins.") or obj is None or obj.origin != "import":
                return receiver.startswith("builtins.")
        code = self._classify(receiver)
        how = f".{method}()"
        if code is not None:
            self._report_write(node, receiver, "mutates", code, import_time, how)
            return True
        if receiver.endswith(".__dict__"):
            self._report_write(node, receiver, "mutates", SETATTR, import_time, how)
            return True
        # Only state-like receivers: a module function named `add`/`remove` (torch.add, os.remove) is not
        # a container.
        if state_like_receiver(receiver, self.settings.hidden_import_roots, self.module_imports):
            self._report_write(node, receiver, "mutates", MONKEYPATCH, import_time, how)
            return True
        return False

    def _check_methodcaller(self, node: ast.Call, scope: _Scope) -> None:
        """`operator.methodcaller("__setattr__", "forward", f)(SharedClass)`: a method chosen by name
        called on a foreign object; only a literal, non-dunder, non-mutating name is a read."""
        if not isinstance(node.func, ast.Call) or not node.args:
            return
        maker = self.resolve(node.func.func, scope)
        if maker is None or maker.qualname != "operator.methodcaller":
            return
        target = self.tainted(self.resolve(node.args[0], scope))
        name = _dotted_literal(_arg(node.func, 0))
        if target is None or (name is not None and not name.startswith("__") and name not in _MUTATORS):
            return
        self.report(SETATTR, node, f"calls `{name or '<computed>'}` on `{target.qualname}` through "
                    "`operator.methodcaller`: a write to an object the contribution does not own",
                    target=target.qualname)


def _on_class(fn: _Function) -> int:
    """1 for a plain method (a call on its class, `K.put(obj, v)`, hands self first), else 0 (a static or
    class method, whose first parameter a call on its class does not fill, or is a parameter)."""
    node = fn.node
    if isinstance(node, ast.Lambda):
        return 0
    first = [*node.args.posonlyargs, *node.args.args][:1]
    bound = bool(first) and first[0].arg not in fn.positional
    classmethod = any((isinstance(d, ast.Name) and d.id == "classmethod") or
                      (isinstance(d, ast.Attribute) and d.attr == "classmethod") for d in node.decorator_list)
    return 1 if bound and not classmethod else 0
