"""FT12x escapes found in the AST of changed Python files.

The analysis is a fact (`fasttrack.facts.escapes`, computed once per run by the facts stage: it reads the
changed files, the base blobs and the contribution's own modules); these rules turn its escapes into
findings and read nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator

from fasttrack.facts.model import Facts
from fasttrack.findings import Finding, Severity
from fasttrack.rules.base import Catalogue

catalogue = Catalogue("escapes")

_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def _findings(ctx: Facts, code: str, fix: str) -> Iterator[Finding]:
    for f, esc, why in ctx.escapes.escapes(code):
        # A warning in shipping code fails closed; a test-only file is lowered below (why).
        own = Severity.WARNING if esc.severity == "warning" and esc.lenient else Severity.ERROR
        if esc.severity == "warning" and not esc.lenient and why is None:
            yield Finding(code=code, severity=Severity.ERROR, path=f.path, line=esc.line, fix=fix,
                          message=f"{esc.message} (an error in shipping code: what cannot be checked fails "
                          "closed)")
            continue
        if why is None:
            severity, message = own, esc.message
        else:
            severity = max(own, why.severity, key=_RANK.__getitem__)  # never raised, only lowered
            message = f"{esc.message} ({why.reason})" if severity is not own else esc.message
        yield Finding(code=code, severity=severity, message=message, path=f.path, line=esc.line, fix=fix)


@catalogue.rule("FT120", "A changed file monkeypatches a module or class outside the contribution.")
def monkeypatch(ctx: Facts) -> Iterator[Finding]:
    """Monkeypatching: `x.Foo.forward = f`, `del mod.attr`, `Foo.attr += 1`, `FOREIGN_TABLE[k] = v` or
    `FOREIGN_TABLE.update(...)` where the target resolves (through the file's imports and aliases, with
    Python's scoping) to a module, class or object outside the contribution, including what the policy's
    `escapes.engine_accessors` return (`get_current_vllm_config()`, `get_forward_context()`, process groups:
    the engine's own objects; only a layer's `static_forward_context[key] = self`,
    `engine_self_registrations`, is allowed), names another changed file re-exports from the engine, and, in
    model code, parameters the engine fills (`escapes.engine_parameter_names`/`engine_parameter_types`:
    `vllm_config`, `config`, `quant_config`, ... or annotated `VllmConfig`; the `*args`/`**kwargs` of a
    method of a class deriving from an engine class), also through `self.<attr>` and helpers. Mutating
    methods called on the engine's objects count as writes (`update`, `setdefault`, `add_module`,
    `register_forward_hook`, `load_state_dict`, `__setitem__`, in-place `zero_()`, ...).
    Writes to `self.x`, to local objects and to the contribution's own modules are fine. Writing to the
    class of an object whose class cannot be known statically (`type(x).f = ...`) is a warning."""
    yield from _findings(ctx, "FT120", "keep the change inside the contribution: subclass or wrap the shared "
                         "class in the model's own package and use that, instead of assigning to it; read "
                         "the engine's config and objects, never write or mutate them (copy what you need, "
                         "e.g. `copy.copy(config)`, into the model's own objects)")


@catalogue.rule("FT121", "A changed file patches a module or class outside the contribution by setattr.")
def setattr_patch(ctx: Facts) -> Iterator[Finding]:
    """The same escape as FT120 in call form: `setattr(obj, ...)`/`delattr`, `object.__setattr__(obj, ...)`,
    `vars(mod)[k] = v`, `mod.__dict__[k] = v` or `.update(...)`, and `mock.patch("pkg.mod.name")` /
    `mock.patch.object(Cls, ...)` outside tests, when the object is outside the contribution."""
    yield from _findings(ctx, "FT121", "do not patch shared modules or classes; subclass or wrap them in "
                         "the model's own package")


@catalogue.rule("FT122", "A changed file edits sys.modules, the import system or builtins.")
def interpreter_state(ctx: Facts) -> Iterator[Finding]:
    """`sys.modules[...] = m`, `sys.modules.setdefault/update/pop(...)`, `del sys.modules[...]`,
    `sys.meta_path`/`sys.path_hooks` edits, `builtins.x = ...`, `__builtins__[...] = ...`, and
    interpreter-wide hooks (`sys.settrace`, `sys.setprofile`, `sys.addaudithook`): each can replace any
    shared module for every model. `sys.path` edits are a warning."""
    yield from _findings(ctx, "FT122", "import what you need normally; never swap modules in sys.modules, "
                         "hook the import system or edit builtins")


@catalogue.rule("FT123", "A changed file changes the process environment or global torch flags.")
def environment(ctx: Facts) -> Iterator[Finding]:
    """At import time (module level, class bodies, decorators; not inside a def or under
    `if __name__ == "__main__"`): writes to `os.environ` (`[k] = v`, `setdefault`, `update`, `pop`, `del`,
    `|=`), `os.putenv`/`os.unsetenv`/`os.chdir`, writes to `torch.backends.*` and torch's dynamo/inductor
    config, and the policy's `escapes.global_flag_calls` (`torch.set_default_dtype`, ...). These change
    what every model sees: an error at import time, a warning inside functions."""
    yield from _findings(ctx, "FT123", "pass settings explicitly or document them for the deployment; do "
                         "not change the environment or global flags when the module is imported")


@catalogue.rule("FT124", "A changed file registers into a global registry outside the contribution.")
def registry(ctx: Facts) -> Iterator[Finding]:
    """Calls and decorators that register into shared registries: the policy's `escapes.registry_callables`
    (vLLM's `ModelRegistry.register_model`, `CustomOp.register`/`register_oot`, attention backends,
    quantization configs, kernels, connectors, parsers, HF Auto* classes, ...) and any `register`/
    `register_*` callable on an object imported from outside the contribution (unless its first argument is
    a local object). `escapes.allowed_registrations` (the multimodal processor registry, warm-up
    registration, `atexit`) are fine for the contribution's own classes and flagged when applied to a
    foreign one."""
    yield from _findings(ctx, "FT124", "register the model through the policy's hook points (the "
                         "architecture registry line) and keep other lookups model-local; a shared "
                         "registration needs normal review")


@catalogue.rule("FT125", "A changed file defines or overrides torch ops outside its own op namespace.")
def torch_library(ctx: Facts) -> Iterator[Finding]:
    """`torch.library.Library(ns, "DEF"|"IMPL"|"FRAGMENT")`, `torch.library.define/impl/register_fake/
    register_kernel/custom_op/triton_op("ns::name")` (calls or decorators), `.define/.impl` on a library,
    vLLM's `direct_register_custom_op`, and `torch.ops.load_library`: the op's namespace must be the
    contribution's own (`contribution.op_namespace`, default the model name). In the engine's shared
    namespace (`vllm`) a new op is accepted when its name starts with `<own namespace>_`. Building C++
    extensions at run time is a warning (their registrations cannot be seen)."""
    ns = sorted(ctx.escapes.op_namespaces)
    shown = ns[0] if ns else "<model>"
    yield from _findings(ctx, "FT125", f"define ops in the contribution's own namespace "
                         f"(torch.library.Library('{shown}', 'FRAGMENT') or op names starting '{shown}_'); "
                         "never register implementations over another namespace's ops")


@catalogue.rule("FT126", "A changed file loads shared modules by string, reloads or re-creates them.")
def importlib_tricks(ctx: Facts) -> Iterator[Finding]:
    """`importlib.reload(shared)`, `spec_from_file_location`/`SourceFileLoader`/`imp.load_source` creating a
    module under a shared name, and `runpy.run_module(shared)` are errors. `importlib.import_module`/
    `__import__` of an engine module by a literal string (hidden from the import graph and so from the
    blast radius) or by a computed name, and loading from a file path, are warnings. Patching what such a
    call returns is caught by FT120/FT121."""
    yield from _findings(ctx, "FT126", "import the module with an import statement (the import graph and "
                         "the blast radius then see it) and never reload or re-create shared modules")


@catalogue.rule("FT127", "A changed file runs code built from strings (exec, eval, compile).")
def dynamic_code(ctx: Facts) -> Iterator[Finding]:
    """`exec`, `eval` and `compile` hide everything the other FT12x rules look for, so each is a warning.
    A literal string argument is parsed and checked like the file itself."""
    yield from _findings(ctx, "FT127", "write the code out as ordinary Python")


@catalogue.rule("FT128", "A changed Python file cannot be parsed, so it cannot be checked for escapes.")
def unparseable(ctx: Facts) -> Iterator[Finding]:
    """A changed `.py` file that does not parse (with the Python running fasttrack, 3.11+), is binary, not
    UTF-8 or over 4 MiB cannot be checked for escapes: it fails closed."""
    yield from _findings(ctx, "FT128", "fix the file so it parses (Python 3.11 syntax) as UTF-8 text")


@catalogue.rule("FT146", "A changed file changes process-wide state the policy does not allow model code.")
def global_state(ctx: Facts) -> Iterator[Finding]:
    """Process-wide state is an allow-list (policy `escapes.global_state_calls`, `allowed_global_calls`,
    `scoped_global_calls`): torch's C-level setters (`torch._C._set_*`), backend and SDPA switches
    (`torch.backends.cuda.enable_flash_sdp`), compiler configs (`torch._dynamo.config.patch(...)` outside
    a `with`, its `.__enter__()`), native libraries (`ctypes.CDLL(...).setenv`),
    `multiprocessing.set_start_method`, `signal`, `logging.disable`/`basicConfig`, warnings filters
    outside `catch_warnings()`, `gc`, sockets, `subprocess`/`os.system`/`os.exec*`, and writing files
    (`open(..., "w")`, `Path.write_text`, `os.remove`, a `.pth` in site-packages): an error anywhere in
    shipping code, import time or not. Reads (`is_*`, `get*`, `logging.getLogger`) and context managers
    that restore what they change are allowed."""
    yield from _findings(ctx, "FT146", "leave process-wide settings to the deployment (or ask for the call "
                         "to be added to the policy's allowed_global_calls in normal review); use a `with` "
                         "block where a scoped switch exists")
