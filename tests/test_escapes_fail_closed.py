"""Issue 15, item 2: the static scan fails closed.

Each attack is a rewrite of "patch a shared class" or "change process-wide state" that the scan used to
let through (it named no foreign target in one statement, or called something the scan had no entry for).
Each comes with an honest model-local twin that must stay clean. Snippets mark the line a finding must
point at with `# <-`.
"""

from __future__ import annotations

import textwrap

import pytest

from fasttrack.confinement.escapes import Escape, analyse_source, find_escapes

MODEL_FILE = "vllm/models/kimi_k3/nvidia/model.py"
OWN = {"vllm.models.kimi_k3"}
SHARED = "from vllm.model_executor.layers.linear import RowParallelLinear\n"


def scan(src: str) -> list[Escape]:
    return find_escapes(textwrap.dedent(src), MODEL_FILE, OWN, own_op_namespaces={"kimi_k3"})


def marked(src: str) -> list[int]:
    return [i for i, line in enumerate(textwrap.dedent(src).splitlines(), start=1) if "# <-" in line]


# (name, source, code) -- every marked line must carry exactly this code; severity error unless stated.
ATTACKS: list[tuple[str, str, str]] = [
    ("helper-parameter", SHARED + """
def patch(cls, fn):
    cls.forward = fn
patch(RowParallelLinear, None)  # <-
""", "FT120"),
    ("helper-parameter-keyword", SHARED + """
def patch(*, target):
    setattr(target, "forward", None)
patch(target=RowParallelLinear)  # <-
""", "FT120"),
    ("helper-through-helper", SHARED + """
def inner(c):
    c.forward = None
def outer(k):
    inner(k)
outer(RowParallelLinear)  # <-
""", "FT120"),
    ("method-helper", SHARED + """
class K3:
    def _patch(self, cls):
        cls.forward = None
    def __init__(self):
        self._patch(RowParallelLinear)  # <-
""", "FT120"),
    ("decorator-factory", SHARED + """
def replaces(target):
    def deco(fn):
        target.forward = fn
        return fn
    return deco
@replaces(RowParallelLinear)  # <-
def forward(self, x):
    return x
""", "FT120"),
    ("lambda-helper", SHARED + """
p = lambda c: setattr(c, "forward", None)
p(RowParallelLinear)  # <-
""", "FT120"),
    ("return-value", SHARED + """
def target():
    return RowParallelLinear
target().forward = None  # <-
""", "FT120"),
    ("identity-return", SHARED + """
def same(x):
    return x
same(RowParallelLinear).forward = None  # <-
""", "FT120"),
    ("list-element", SHARED + """
targets = [RowParallelLinear]
targets[0].forward = None  # <-
""", "FT120"),
    ("dict-value", SHARED + """
table = {"row": RowParallelLinear}
table["row"].forward = None  # <-
""", "FT120"),
    ("dict-values-loop", SHARED + """
table = {"row": RowParallelLinear}
for cls in table.values():
    cls.forward = None  # <-
""", "FT120"),
    ("tuple-unpacking", SHARED + """
pair = (RowParallelLinear, 1)
cls, _ = pair
cls.forward = None  # <-
""", "FT120"),
    ("starred-unpacking", SHARED + """
first, *rest = [1, RowParallelLinear]
rest[0].forward = None  # <-
""", "FT120"),
    ("loop-over-list", SHARED + """
for cls in [1, RowParallelLinear][1:]:
    cls.forward = None  # <-
""", "FT120"),
    ("ternary", SHARED + """
(RowParallelLinear if flag else object).forward = None  # <-
""", "FT120"),
    ("boolop", SHARED + """
(None or RowParallelLinear).forward = None  # <-
""", "FT120"),
    ("starred-setattr", SHARED + """
setattr(*[RowParallelLinear, "forward", None])  # <-
""", "FT121"),
    ("starred-setattr-name", SHARED + """
args = (RowParallelLinear, "forward", None)
setattr(*args)  # <-
""", "FT121"),
    ("operator-setitem", SHARED + """
import operator
operator.setitem(vars(RowParallelLinear), "forward", None)  # <-
""", "FT121"),
    ("operator-attrgetter", SHARED + """
import operator
operator.attrgetter("forward")(RowParallelLinear).__code__ = None  # <-
""", "FT120"),
    ("functools-partial", SHARED + """
import functools
functools.partial(setattr, RowParallelLinear)("forward", None)  # <-
""", "FT121"),
    ("functools-reduce", SHARED + """
import functools
functools.reduce(setattr, [], RowParallelLinear)  # <-
""", "FT121"),
    ("map-setattr", SHARED + """
list(map(setattr, [RowParallelLinear], ["forward"], [None]))  # <-
""", "FT121"),
    ("alias-of-setattr", SHARED + """
s = setattr
s(RowParallelLinear, "forward", None)  # <-
""", "FT121"),
    ("sys-modules-loop", """
import sys
for name, mod in sys.modules.items():
    mod.X = 1  # <-
""", "FT122"),
    ("gc-get-objects", """
import gc
for obj in gc.get_objects():
    setattr(obj, "forward", None)  # <-
""", "FT121"),
    ("subclasses-walk", """
for c in object.__subclasses__():
    c.forward = None  # <-
""", "FT120"),
    ("bases-of-own-class", SHARED + """
class Mine(RowParallelLinear):
    pass
Mine.__bases__[0].forward = None  # <-
""", "FT120"),
    ("vars-dict-values", SHARED + """
import vllm.model_executor.layers.linear as lin
for v in vars(lin).values():
    v.forward = None  # <-
""", "FT120"),
    ("unresolved-name", """
Undefined.forward = None  # <-
""", "FT120"),
    ("class-of-parameter", """
def f(layer):
    type(layer).forward = None  # <-
""", "FT120"),
    ("lower-case-registry-pop", """
from vllm.model_executor.layers.quantization import method_to_config
method_to_config.pop("fp8")  # <-
""", "FT120"),
    # global state the scan had no entry for
    ("torch-c-setter", """
import torch
torch._C._set_sdp_use_flash(False)  # <-
""", "FT146"),
    ("sdpa-switch", """
import torch
torch.backends.cuda.enable_flash_sdp(False)  # <-
""", "FT146"),
    ("dynamo-patch-enter", """
import torch
torch._dynamo.config.patch(suppress_errors=True).__enter__()  # <-
""", "FT146"),
    ("ctypes-setenv", """
import ctypes
ctypes.CDLL(None).setenv(b"A", b"1", 1)  # <-
""", "FT146"),
    ("set-start-method", """
import multiprocessing
multiprocessing.set_start_method("fork", force=True)  # <-
""", "FT146"),
    ("signal", """
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # <-
""", "FT146"),
    ("logging-disable", """
import logging
logging.disable(logging.CRITICAL)  # <-
""", "FT146"),
    ("pth-file", """
import site
with open(site.getsitepackages()[0] + "/x.pth", "w") as f:  # <-
    f.write("import os")
""", "FT146"),
    ("pathlib-write", """
from pathlib import Path
Path("/usr/lib/python3/site-packages/x.pth").write_text("import os")  # <-
""", "FT146"),
    ("subprocess", """
import subprocess
subprocess.run(["pip", "install", "x"])  # <-
""", "FT146"),
    ("os-system-in-function", """
import os
def warm():
    os.system("echo")  # <-
""", "FT146"),
    ("warnings-filter-module-level", """
import warnings
warnings.filterwarnings("ignore")  # <-
""", "FT146"),
]


@pytest.mark.parametrize(("source", "code"), [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_attack_is_found(source: str, code: str) -> None:
    found = scan(source)
    assert [(e.line, e.code) for e in found if e.code == code] == [(n, code) for n in marked(source)], found


# Honest model-local code: must produce no finding at all.
HONEST: list[tuple[str, str]] = [
    ("kernel-edit", """
import torch
import triton
import triton.language as tl
from vllm.model_executor.layers.linear import RowParallelLinear

@triton.jit
def _k(x_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    tl.store(x_ptr + pid, tl.load(x_ptr + pid) * 2)

class K3Linear(RowParallelLinear):
    def __init__(self, *args):
        super().__init__(*args)
        self.scale = torch.ones(1)
        self.cache = {}
        self.cache["x"] = 1

    def forward(self, x):
        out = torch.empty_like(x)
        _k[(x.numel(),)](out, x.numel(), BLOCK=128)
        return out
"""),
    ("helper-writing-own-objects", """
from vllm.model_executor.layers.linear import RowParallelLinear
class Cfg:
    pass
def configure(c, v):
    c.value = v
configure(Cfg(), 1)
def init(layer: RowParallelLinear):
    layer.weight_loader = None
"""),
    ("own-op-namespace", """
import torch
lib = torch.library.Library("kimi_k3", "FRAGMENT")
lib.define("fused_moe(Tensor x) -> Tensor")
@torch.library.impl("kimi_k3::fused_moe", "CUDA")
def _fused_moe(x):
    return x
"""),
    ("own-registry-dict", """
_KERNELS = {}
def register_kernel(name):
    def deco(fn):
        _KERNELS[name] = fn
        return fn
    return deco
@register_kernel("decode")
def decode(x):
    return x
for name, fn in _KERNELS.items():
    fn.tag = name
"""),
    ("scoped-switches", """
import torch
import warnings
def attention(q, k, v):
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        with torch._dynamo.config.patch(suppress_errors=True):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)
def load(x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return x
"""),
    ("reads-are-fine", """
import os
import logging
import torch
logger = logging.getLogger(__name__)
flag = os.environ.get("K3_FLAG", "0")
ok = torch.backends.cuda.is_flash_attention_available()
with open(__file__) as f:
    text = f.read()
"""),
    ("loop-over-own-layers", """
import torch
class M(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)
        for layer in self.layers:
            layer.tag = 1
        for i, layer in enumerate(self.layers):
            layer.index = i
"""),
]


@pytest.mark.parametrize("source", [h[1] for h in HONEST], ids=[h[0] for h in HONEST])
def test_honest_code_stays_clean(source: str) -> None:
    assert scan(source) == []


def test_a_helper_in_another_file_is_judged_across_files() -> None:
    """The analysis exports which own functions write through which parameters, and which calls hand
    foreign objects to functions of the contribution's own packages (joined in fasttrack.rules.escapes)."""
    helpers = analyse_source("def patch(cls, fn):\n    cls.forward = fn\n",
                             "vllm/models/kimi_k3/helpers.py", OWN)
    assert helpers.param_writers == {"vllm.models.kimi_k3.helpers.patch": frozenset({0})}
    caller = analyse_source(SHARED + "from .helpers import patch\npatch(RowParallelLinear, None)\n",
                            MODEL_FILE, OWN)
    assert caller.foreign_calls == [("vllm.models.kimi_k3.nvidia.helpers.patch",
                                     {0: "vllm.model_executor.layers.linear.RowParallelLinear"}, 3)]


def test_context_names_the_guard_and_function() -> None:
    src = "import vllm.envs as e\nif e.X:\n    e.Y = 1\ndef f():\n    e.Z = 1\ne.W = 1\n"
    contexts = [e.context for e in find_escapes(src, MODEL_FILE, OWN)]
    assert contexts == ["if e.X", "def f", ""]
