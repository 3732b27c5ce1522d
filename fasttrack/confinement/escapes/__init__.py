"""Escapes: ways a change reaches outside its contribution at run time without editing a shared file.

A PR can stay inside the model's own directory and still change every other model: assign a new
`forward` to a shared layer class, swap a module in `sys.modules`, set an environment variable at
import time, register an op implementation over `aten`, or load a shared module by string and patch
it. This module finds those in the source of one file with `ast`; it never imports the code.

Names are resolved through the file's own bindings (imports, aliases, defs, parameters) with Python's
scoping rules, so `x.Foo.forward = f` is caught when `x` is `import vllm.layers as x`, while a write to
`self.x`, to a local object or to the contribution's own modules is not.

`find_escapes(source, path, own_packages, ...)` is pure: it returns `Escape`s and never raises on bad
input (a file that does not parse is itself an escape finding, FT128: it cannot be checked).
"""

from fasttrack.confinement.escapes.analyser import analyse_source, find_escapes
from fasttrack.confinement.escapes.common import (
    DYNAMIC_CODE,
    ENGINE_PARAM,
    ENVIRONMENT,
    GLOBAL_STATE,
    HELPER_WRITE,
    IMPORTLIB,
    INTERPRETER,
    MONKEYPATCH,
    REGISTRY,
    SETATTR,
    TORCH_LIBRARY,
    UNPARSEABLE,
    Escape,
    EscapeSeverity,
    FileFacts,
    OwnImportWrite,
    module_name_for,
    mutating_method,
    state_like_receiver,
)

__all__ = [
    "DYNAMIC_CODE", "ENGINE_PARAM", "ENVIRONMENT", "GLOBAL_STATE", "HELPER_WRITE", "IMPORTLIB",
    "INTERPRETER", "MONKEYPATCH", "REGISTRY", "SETATTR", "TORCH_LIBRARY", "UNPARSEABLE", "Escape",
    "EscapeSeverity", "FileFacts", "OwnImportWrite", "analyse_source", "find_escapes", "module_name_for",
    "mutating_method", "state_like_receiver",
]
