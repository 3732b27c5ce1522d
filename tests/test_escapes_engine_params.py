"""Issue 15, review follow-up: the escape scan fails closed on what the engine hands model code.

1. Parameters the engine fills (`def __init__(self, vllm_config, prefix)`, the HF `config` and sub-configs
   handed down to layers, anything annotated `VllmConfig`/`ModelConfig`/`PretrainedConfig`, and the
   `*args`/`**kwargs` of a method of a class deriving from an engine class) are the engine's objects in
   model code: writes through them, their aliases, `self.<attr>` holding them and helpers are errors.
2. Mutating calls on the engine's objects that are not container methods (`add_module`,
   `register_forward_hook`, `load_state_dict`, `__setitem__`, `__dict__.update`, in-place `zero_()`, ...).
3. A class made dynamically from an engine base or with an engine metaclass (`type(X)` called through an
   alias too).

Each attack marks the lines its error must point at with `# <-`; each comes with an honest twin.
"""

from __future__ import annotations

import textwrap

import pytest

from fasttrack.confinement.escapes import Escape, find_escapes

MODEL_FILE = "vllm/models/kimi_k3/nvidia/model.py"
OWN = {"vllm.models.kimi_k3"}


def scan(src: str, path: str = MODEL_FILE) -> list[Escape]:
    return find_escapes(textwrap.dedent(src), path, OWN, own_op_namespaces={"kimi_k3"})


def marked(src: str) -> list[int]:
    return [i for i, line in enumerate(textwrap.dedent(src).splitlines(), start=1) if "# <-" in line]


def error_lines(found: list[Escape], codes: tuple[str, ...]) -> list[int]:
    return sorted({e.line for e in found if e.code in codes and e.severity == "error"})


ATTACKS: list[tuple[str, str, tuple[str, ...]]] = [
    ("init-vllm-config-chain", """
import torch.nn as nn
class K3(nn.Module):
    def __init__(self, *, vllm_config, prefix=""):
        super().__init__()
        vllm_config.model_config.hf_config.x = 1  # <-
""", ("FT120",)),
    ("alias-of-sub-config", """
class K3:
    def __init__(self, vllm_config, prefix=""):
        cfg = vllm_config.parallel_config
        cfg.foo = 2  # <-
        del cfg.bar  # <-
""", ("FT120",)),
    ("setattr-computed-name", """
def build(vllm_config, name, v):
    setattr(vllm_config.cache_config, name, v)  # <-
""", ("FT121",)),
    ("item-write-hf-config", """
def tweak(config):
    config.rope_parameters["rope_type"] = "yarn"  # <-
""", ("FT120",)),
    ("annotated-renamed", """
from vllm.config import VllmConfig
def tweak(c: VllmConfig) -> None:
    c.scheduler_config.max_num_seqs = 1  # <-
""", ("FT120",)),
    ("annotated-string-optional", """
from typing import Optional
from vllm.config import ModelConfig
def tweak(mc: "Optional[ModelConfig]") -> None:
    mc.max_model_len = 4  # <-
""", ("FT120",)),
    ("stored-on-self-then-written", """
class K3:
    def __init__(self, config, prefix=""):
        self.config = config
    def load(self):
        self.config.num_hidden_layers = 1  # <-
""", ("FT120",)),
    ("handed-to-own-helper", """
def _patch(obj):
    obj.x = 1
class K3:
    def __init__(self, quant_config=None):
        _patch(quant_config)  # <-
""", ("FT120",)),
    ("kwargs-of-engine-subclass", """
from vllm.model_executor.models.interfaces import SupportsPP
class K3(SupportsPP):
    def __init__(self, **kw):
        kw["vllm_config"].model_config.x = 1  # <-
""", ("FT120",)),
    ("getattr-then-write", """
def f(vllm_config):
    getattr(vllm_config, "cache_config").block_size = 1  # <-
""", ("FT120",)),
    # 2. mutating calls that are not container methods
    ("update-and-setdefault", """
def f(vllm_config, config):
    vllm_config.additional_config.update(a=1)  # <-
    config.__dict__.update(b=2)  # <-
    vllm_config.compilation_config.static_forward_context.setdefault("k", 1)  # <-
""", ("FT120", "FT121")),
    ("module-mutators-on-engine-objects", """
from vllm.forward_context import get_forward_context
from vllm.model_executor.layers.linear import SHARED_LAYER
def f(vllm_config):
    SHARED_LAYER.add_module("x", None)  # <-
    SHARED_LAYER.register_forward_hook(f)  # <-
    get_forward_context().attn_metadata.load_state_dict({})  # <-
    vllm_config.model_config.__setitem__("k", 1)  # <-
    SHARED_LAYER.weight.zero_()  # <-
""", ("FT120", "FT124")),
    ("register-hook-onto-engine-object", """
class K3:
    def _hook(self, *a):
        return None
    def __init__(self, vllm_config):
        vllm_config.model_config.register_hook(self._hook)  # <-
""", ("FT124",)),
    # 3. classes made dynamically from the engine's bases or metaclass
    ("metaclass-through-alias", """
from vllm.plugins import Plugin
m = type(Plugin)
K3 = m("K3", (), {})  # <-
""", ("FT146",)),
    ("metaclass-of-class-attr-alias", """
from vllm.plugins import Plugin
meta = Plugin.__class__
K3 = meta("K3", (object,), {"x": 1})  # <-
""", ("FT146",)),
    ("type-with-engine-base", """
from vllm.plugins import Plugin
K3 = type("K3", (Plugin,), {})  # <-
""", ("FT146",)),
    ("new-class-with-engine-base", """
import types
import vllm.plugins as p
K3 = types.new_class("K3", (p.Plugin,))  # <-
""", ("FT146",)),
]


@pytest.mark.parametrize(("source", "codes"), [(a[1], a[2]) for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_attack_is_an_error(source: str, codes: tuple[str, ...]) -> None:
    found = scan(source)
    assert error_lines(found, codes) == marked(source), found


def test_the_message_names_the_parameter_and_why() -> None:
    found = scan("def f(vllm_config):\n    vllm_config.model_config.hf_config.x = 1\n")
    assert len(found) == 1
    msg = found[0].message
    assert "`vllm_config.model_config.hf_config.x`" in msg and "~param" not in msg
    assert "named like the engine's config objects" in msg and "self.x = ..." in msg
    ann = scan("from vllm.config import VllmConfig\ndef f(c: VllmConfig):\n    c.x = 1\n")
    assert "annotated with the engine's `vllm.config.VllmConfig`" in ann[0].message


HONEST: list[tuple[str, str]] = [
    ("module-init-and-reads", """
import copy
import torch
import torch.nn as nn
from vllm.config import VllmConfig
class K3(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.config = config
        self.quant_config = vllm_config.quant_config
        self.hidden = config.hidden_size
        self.proj = nn.Linear(config.hidden_size, 4)
        self.register_buffer("b", torch.zeros(1))
        self.add_module("extra", nn.Identity())
        self.cache = {}
        self.cache["k"] = config.vocab_size
        block_config = copy.copy(config)
        block_config.attn_res_block_size = None
        plan = dict(vllm_config.additional_config)
        plan["x"] = 1
        method = self.quant_config.get_quant_method(self, prefix) if self.quant_config else None
        self.method = method
    def forward(self, x, out):
        out[:] = x
        out.zero_()
        return self.proj(x)
"""),
    ("layer-self-registration-through-the-parameter", """
class K3Attention:
    def __init__(self, vllm_config, prefix):
        compilation_config = vllm_config.compilation_config
        if prefix in compilation_config.static_forward_context:
            raise ValueError(prefix)
        compilation_config.static_forward_context[prefix] = self
"""),
    ("own-kwargs-and-locals", """
from vllm.model_executor.models.interfaces import SupportsPP
class K3(SupportsPP):
    def embed(self, **kwargs):
        pixel_values = kwargs.pop("pixel_values", None)
        kwargs["seen"] = True
        return pixel_values
def helper(sizes, n):
    sizes = list(sizes)
    sizes[0] *= n
    return sizes
"""),
    ("own-dynamic-classes", """
import types
import torch
class Own:
    pass
A = type("A", (Own,), {})
B = type(Own)("B", (), {})
C = types.new_class("C", (torch.nn.Module,))
k = type(A)
"""),

]


@pytest.mark.parametrize("source", [h[1] for h in HONEST], ids=[h[0] for h in HONEST])
def test_honest_code_stays_clean(source: str) -> None:
    assert scan(source) == []


def test_engine_parameters_are_judged_only_in_model_code() -> None:
    # the engine's own modules configure the engine (shared files are judged by the zone rules)
    src = "def f(vllm_config):\n    vllm_config.model_config.x = 1\n"
    assert scan(src, path="vllm/config/helpers.py") == []
    assert [e.code for e in scan(src)] == ["FT120"]
