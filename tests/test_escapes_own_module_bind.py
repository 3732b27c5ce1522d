"""An engine object bound into another of the contribution's own modules (`m.x = L`): the scan of that
module reads `x` as its own global, so a write through it there (`x.forward = f`) is one neither scan
follows. Attacks (each marked line an error) and honest twins (own constants, own classes, plain values)."""

from __future__ import annotations

import textwrap

import pytest

from fasttrack.confinement.escapes import Escape, find_escapes
from tests.escape_marks import error_lines, marked_lines

MODEL_FILE = "vllm/models/kimi_k3/nvidia/model.py"
OWN = {"vllm.models.kimi_k3"}
HEAD = ("import torch\n"
        "import vllm.models.kimi_k3.nvidia.common as m\n"
        "from vllm.models.kimi_k3.nvidia import helpers\n"
        "from vllm.models.kimi_k3.nvidia.common import Holder\n"
        "from vllm.model_executor.layers.linear import RowParallelLinear as L\n")


def scan(src: str) -> list[Escape]:
    return find_escapes(HEAD + textwrap.dedent(src), MODEL_FILE, OWN, own_op_namespaces={"kimi_k3"})


def marked(src: str) -> list[int]:
    return marked_lines(HEAD + textwrap.dedent(src))



ATTACKS: list[tuple[str, str]] = [
    ("engine-class-into-own-module", """
m.x = L  # <-
"""),
    ("engine-class-into-own-module-in-a-function", """
def install():
    m.layer_cls = L  # <-
"""),
    ("engine-class-attribute-into-own-module", """
m.fwd = L.forward  # <-
"""),
    ("parameter-into-own-module", """
def install(layer):
    m.current = layer  # <-
"""),
    ("torch-object-into-own-module", """
m.lin = torch.nn.Linear  # <-
"""),
    ("engine-class-inside-a-container", """
m.table = [L]  # <-
"""),
    ("engine-class-into-a-module-imported-by-from", """
helpers.x = L  # <-
"""),
    ("engine-class-onto-an-own-class-of-another-module", """
Holder.target = L  # <-
"""),
    ("engine-class-by-setattr", """
setattr(m, "x", L)  # <-
"""),
    ("engine-class-by-setattr-keyword", """
setattr(m, "x", value=L)  # <-
"""),
    ("engine-class-into-the-module-dict", """
m.__dict__["x"] = L  # <-
"""),
    ("engine-class-by-unpacking", """
m.x, n = L, 1  # <-
"""),
    ("engine-class-as-a-for-target", """
for m.x in (L,):  # <-
    pass
"""),
    ("engine-class-by-walrus-alias", """
alias = L
m.x = alias  # <-
"""),
]


@pytest.mark.parametrize("source", [a[1] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_binding_a_foreign_value_into_an_own_module_is_an_error(source: str) -> None:
    found = scan(source)
    assert error_lines(found) == marked(source)
    assert any(e.code == "FT120" and "another of the contribution's modules" in e.message for e in found)


HONEST: list[tuple[str, str]] = [
    ("own-constants", """
m.BLOCK = 128
m.NAME = "kimi"
m.ENABLED = True
setattr(m, "SCALE", 0.5)
m.__dict__["LIMIT"] = 4
"""),
    ("own-class-and-function-of-this-file", """
class K3Cache:
    pass
def helper():
    return 1
m.cache_cls = K3Cache
helpers.fn = helper
Holder.kind = K3Cache
"""),
    ("plain-values-built-here", """
m.table = {}
m.sizes = [1, 2, 3]
m.count += 1
"""),
    # an instance built here is the contribution's own object, as it is in this file: a write to it in
    # the other module is a write to that instance, not to the engine's class
    ("engine-instance-built-here", """
def build():
    m.layer = L(1, 2)
"""),
    ("own-module-reads-and-calls", """
def f(x):
    return m.kernel(x) + helpers.scale
"""),
]


@pytest.mark.parametrize("source", [h[1] for h in HONEST], ids=[h[0] for h in HONEST])
def test_binding_a_plain_value_into_an_own_module_stays_clean(source: str) -> None:
    assert [e for e in scan(source) if e.severity == "error"] == []


def test_the_module_itself_is_judged_by_the_namespace_rule() -> None:
    # `me.y = L` where `me` is this very module: the namespace rule judges it, this one stays out
    src = "import vllm.models.kimi_k3.nvidia.model as me\nfrom vllm.x import L\nme.y = L\n"
    found = find_escapes(src, MODEL_FILE, OWN)
    assert [e.line for e in found if "this module's own namespace" in e.message] == [3]
    assert [e for e in found if "another of the contribution's" in e.message] == []
