"""Hostile review of the confinement (issue 15): rewrites of "patch shared state" that the fail-closed
scan let through with no error. Each attack marks the line the error must point at with `# <-`; each
fix comes with honest model-local twins that must stay clean (no finding at all)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from git_helpers import GitRepo

from fasttrack.commands.verify import VerifyOptions, build_context
from fasttrack.confinement.escapes import Escape, find_escapes
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Severity
from fasttrack.rules import all_rules

MakeRepo = Callable[..., GitRepo]

MODEL_FILE = "vllm/models/kimi_k3/nvidia/model.py"
OWN = {"vllm.models.kimi_k3"}
SHARED = "from vllm.model_executor.layers.linear import RowParallelLinear\n"


def scan(src: str) -> list[Escape]:
    return find_escapes(textwrap.dedent(src), MODEL_FILE, OWN, own_op_namespaces={"kimi_k3"})


def marked(src: str) -> list[int]:
    return [i for i, line in enumerate(textwrap.dedent(src).splitlines(), start=1) if "# <-" in line]


# (name, source, code): every marked line carries an *error* of this code.
ATTACKS: list[tuple[str, str, str]] = [
    # taint lost through an attribute of an own object
    ("self-attribute-store", SHARED + """
class Patcher:
    def __init__(self):
        self.target = RowParallelLinear
    def apply(self):
        self.target.forward = None  # <-
""", "FT120"),
    ("own-object-attribute", SHARED + """
class Holder:
    pass
h = Holder()
h.cls = RowParallelLinear
h.cls.forward = None  # <-
""", "FT120"),
    ("nonlocal-rebinding", SHARED + """
def outer():
    c = None
    def inner():
        nonlocal c
        c = RowParallelLinear
    inner()
    c.forward = None  # <-
""", "FT120"),
    ("default-argument", SHARED + """
def patch(c=RowParallelLinear):
    c.forward = None  # <-
patch()
""", "FT120"),
    ("generator-yield", SHARED + """
def targets():
    yield RowParallelLinear
for c in targets():
    c.forward = None  # <-
""", "FT120"),
    ("yield-from", SHARED + """
def targets():
    yield from [RowParallelLinear]
for c in targets():
    c.forward = None  # <-
""", "FT120"),
    ("match-capture", SHARED + """
match RowParallelLinear:
    case c:
        c.forward = None  # <-
""", "FT120"),
    ("with-nullcontext", SHARED + """
import contextlib
with contextlib.nullcontext(RowParallelLinear) as c:
    c.forward = None  # <-
""", "FT120"),
    ("inspect-getmodule", SHARED + """
import inspect
inspect.getmodule(RowParallelLinear).torch = None  # <-
""", "FT120"),
    ("globals-builtins", """
globals()["__builtins__"]["len"] = None  # <-
""", "FT122"),
    # process-wide state entered without ever leaving
    ("no-grad-enter", """
import torch
torch.no_grad().__enter__()  # <-
""", "FT146"),
    ("inference-mode-enter", """
import torch
torch.inference_mode().__enter__()  # <-
""", "FT146"),
    ("torch-function-mode-enter", """
import torch
torch.overrides.TorchFunctionMode().__enter__()  # <-
""", "FT146"),
    ("exitstack-enter-context", """
import contextlib
import torch
_stack = contextlib.ExitStack()
_stack.enter_context(torch.no_grad())  # <-
""", "FT146"),
    # a foreign function chosen by a computed name
    ("getattr-computed-call", """
import torch
getattr(torch, "set_default" + "_device")("cuda")  # <-
""", "FT123"),  # the constant name is folded (hostile review 23): torch.set_default_device, a global switch
    # stdlib process-wide state the families had no entry for
    ("copyreg", """
import copyreg
copyreg.pickle(int, lambda x: (int, (0,)))  # <-
""", "FT146"),
    ("locale", """
import locale
locale.setlocale(locale.LC_ALL, "C")  # <-
""", "FT146"),
    ("asyncio-policy", """
import asyncio
asyncio.set_event_loop_policy(None)  # <-
""", "FT146"),
    ("root-logger-level", """
import logging
logging.getLogger().setLevel(logging.CRITICAL)  # <-
""", "FT146"),
    ("engine-logger-handlers", """
import logging
logging.getLogger("vllm").handlers.clear()  # <-
""", "FT146"),
    ("engine-logger-disabled", """
import logging
logging.getLogger("vllm").disabled = True  # <-
""", "FT120"),
    ("functools-update-wrapper", SHARED + """
import functools
class W:
    pass
functools.update_wrapper(RowParallelLinear.forward, W)  # <-
""", "FT121"),
    # round 2: code from data, other names of os, a method chosen by name, a module's __dict__
    ("pickle-loads", """
import pickle
pickle.loads(b"cos\\nsystem\\n(S'id'\\ntR.")  # <-
""", "FT146"),
    ("marshal-loads", """
import marshal
code = marshal.loads(b"")  # <-
""", "FT146"),
    ("torch-load-unsafe", """
import torch
state = torch.load("/tmp/x.pt", weights_only=False)  # <-
""", "FT146"),
    ("torch-load-hidden-kwargs", """
import torch
opts = {"weights_only": False}
state = torch.load("/tmp/x.pt", **opts)  # <-
""", "FT146"),
    ("torch-hub", """
import torch
torch.hub.load("someone/repo", "model")  # <-
""", "FT146"),
    ("posix-putenv", """
import posix
posix.putenv("CUDA_VISIBLE_DEVICES", "")  # <-
""", "FT123"),
    ("posix-system", """
from posix import system
system("id")  # <-
""", "FT146"),
    ("methodcaller-setattr", SHARED + """
import operator
operator.methodcaller("__setattr__", "forward", None)(RowParallelLinear)  # <-
""", "FT121"),
    ("builtins-dict-setattr", SHARED + """
import builtins
builtins.__dict__["setattr"](RowParallelLinear, "forward", None)  # <-
""", "FT121"),
    ("aten-py-impl", """
import torch
@torch.ops.aten.mm.default.py_impl(torch._C.DispatchKey.CUDA)  # <-
def mm(a, b):
    return a
""", "FT146"),
    ("numpy-seterr", """
import numpy as np
np.seterr(all="ignore")  # <-
""", "FT146"),
    ("stdlib-rng-state", """
import random
random.setstate(random.getstate())  # <-
""", "FT146"),
    ("engine-cache-clear", """
from vllm.platforms import current_platform
current_platform.get_device_capability.cache_clear()  # <-
""", "FT120"),
    ("stderr-redirect", """
import os
os.dup2(3, 2)  # <-
""", "FT146"),
    ("exit-at-import", """
import sys
sys.exit(0)  # <-
""", "FT146"),
    # round 3: compiler stance, triton's driver, op python kernels, an object's class swapped
    ("compiler-stance", """
import torch
torch.compiler.set_stance("force_eager")  # <-
""", "FT146"),
    ("compiler-substitute", """
import torch
torch.compiler.substitute_in_graph(len)(lambda x: 0)  # <-
""", "FT146"),
    ("triton-set-active", """
import triton
triton.runtime.driver.set_active(None)  # <-
""", "FT146"),
    ("aten-py-kernels-clear", """
import torch
torch.ops.aten.mm.default.py_kernels.clear()  # <-
""", "FT146"),
    ("class-swap-of-parameter", """
import torch
class Evil(torch.nn.Module):
    pass
def swap(module):
    module.__class__ = Evil  # <-
""", "FT120"),
    # round 4: a state-changing function handed on to be called later
    ("atexit-os-system", """
import atexit
import os
atexit.register(os.system, "id")  # <-
""", "FT146"),
    ("atexit-environ-update", """
import atexit
import os
atexit.register(os.environ.update, A="1")  # <-
""", "FT146"),
    ("thread-target", """
import os
import threading
threading.Thread(target=os.system, args=("id",)).start()  # <-
""", "FT146"),
    ("map-call", """
import os
list(map(os.system, ["id"]))  # <-
""", "FT146"),
    ("sorted-key", """
import torch
sorted([1], key=torch.set_num_threads)  # <-
""", "FT146"),
]


@pytest.mark.parametrize(("source", "code"), [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_attack_is_an_error(source: str, code: str) -> None:
    found = scan(source)
    # a line may carry more than one error (a thread started at import time whose target is foreign)
    got = sorted({(e.line, e.code) for e in found if e.code == code and e.severity == "error"})
    assert got == [(n, code) for n in marked(source)], found


HONEST: list[tuple[str, str]] = [
    ("own-attributes", SHARED + """
import torch
class K3(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = RowParallelLinear(4, 4)
        self.proj.tag = "k3"
        self.base_cls = RowParallelLinear
        self.scale = torch.ones(1)
    def forward(self, x):
        self.scale.fill_(1.0)
        if isinstance(self.proj, self.base_cls):
            self.proj.tag = "still"
        return x
"""),
    ("generator-of-own", """
import torch
def layers():
    yield torch.nn.Linear(2, 2)
for layer in layers():
    layer.tag = 1
"""),
    ("defaults-and-match", """
def f(x, scale=1.0, table=None):
    table = table or {}
    table["x"] = scale
    match x:
        case int(n):
            table["n"] = n
        case other:
            table["o"] = other
    return table
"""),
    ("own-context-managers", """
import contextlib
import torch
class Timer:
    def __init__(self):
        self.inner = contextlib.nullcontext()
    def __enter__(self):
        self.inner.__enter__()
        return self
    def __exit__(self, *exc):
        return False
def run(x):
    with torch.no_grad(), contextlib.ExitStack() as stack:
        stack.enter_context(Timer())
        return x
"""),
    ("own-loggers", """
import logging
logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)
logger.info("x")
logging.getLogger("vllm").warning("k3 loaded")
logging.getLogger("vllm.models.kimi_k3.nvidia").debug("ok")
"""),
    ("safe-loads-and-own-cache", """
import functools
import operator
import torch
@functools.lru_cache
def table(n):
    return n
table.cache_clear()
state = torch.load("/tmp/x.pt", weights_only=True, map_location="cpu")
names = list(map(operator.methodcaller("upper"), ["a"]))
"""),
    ("compiler-reads-and-own-class", """
import torch
@torch.compiler.disable
def eager(x):
    if torch.compiler.is_compiling():
        return x
    return x + 1
class K3:
    def __init__(self):
        self.__class__ = K3
"""),
    ("constants-and-reads-as-values", """
import atexit
import logging
import signal
import threading
import torch
logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)
old = signal.getsignal(signal.SIGINT)
def _cleanup():
    return None
atexit.register(_cleanup)
threading.Thread(target=_cleanup, daemon=True)
ok = list(map(torch.backends.cuda.is_flash_attention_available, []))
"""),
    ("getattr-literal-read", """
import torch
fn = getattr(torch.ops.kimi_k3, "fused_moe")
dtype = getattr(torch, "bfloat16")
"""),
]


@pytest.mark.parametrize("source", [h[1] for h in HONEST], ids=[h[0] for h in HONEST])
def test_honest_code_stays_clean(source: str) -> None:
    assert scan(source) == []


# ------------------------------------------------------------------------------------------------------
# Files that replace a module for the whole process when their directory is on sys.path (FT136).

SOURCE_POLICY = Path(__file__).resolve().parent.parent / "policies" / "vllm.toml"
K3 = "vllm/models/kimi_k3"


def source_errors(make_repo: MakeRepo, files: dict[str, str]) -> list[tuple[str, str | None]]:
    from test_zones_registry import ENGINE

    repo = make_repo(ENGINE)
    repo.commit(files)
    ctx = build_context(VerifyOptions(repo=repo.path, base="HEAD~1", head="HEAD", policy=SOURCE_POLICY))
    return [(f.code, f.path) for r in all_rules() if r.code == "FT136" for f in r.run(gather_facts(ctx))
            if f.severity is Severity.ERROR]


@pytest.mark.usefixtures("isolated_cache")
@pytest.mark.parametrize("rel", [f"{K3}/sitecustomize.py", f"{K3}/nvidia/usercustomize.py",
                                 f"{K3}/scripts/typing.py"])
def test_module_shadowing_a_site_hook_or_stdlib_is_an_error(make_repo: MakeRepo, rel: str) -> None:
    assert source_errors(make_repo, {rel: "List = None\n"}) == [("FT136", rel)]


@pytest.mark.usefixtures("isolated_cache")
def test_stdlib_named_module_inside_a_package_is_fine(make_repo: MakeRepo) -> None:
    # real vLLM ships kimi_k3/.../kda/chunk.py: inside a package it is `...kda.chunk`, never `chunk`
    assert source_errors(make_repo, {f"{K3}/kda/__init__.py": "", f"{K3}/kda/chunk.py": "X = 1\n",
                                     f"{K3}/chunking.py": "X = 1\n"}) == []


# ------------------------------------------------------------------------------------------------------
# A name imported from another of the contribution's modules is the contribution's own only if that module
# defines it: a re-export of an engine class is the engine's class (FT120, judged across files on disk).

REEXPORTS = f"{K3}/common.py"
REEXPORT_TEXT = ("import os\nfrom vllm.v1.sample.sampler import sample\n"
                 "class Own:\n    pass\n")


def ft120(make_repo: MakeRepo, files: dict[str, str],
          codes: tuple[str, ...] = ("FT120",)) -> list[tuple[str | None, int | None, str]]:
    from test_zones_registry import ENGINE

    repo = make_repo({**ENGINE, REEXPORTS: REEXPORT_TEXT})
    repo.commit(files)
    ctx = build_context(VerifyOptions(repo=repo.path, base="HEAD~1", head="HEAD", policy=SOURCE_POLICY))
    facts = gather_facts(ctx)
    return [(f.path, f.line, f.message) for r in all_rules() if r.code in codes for f in r.run(facts)
            if f.severity is Severity.ERROR]


@pytest.mark.usefixtures("isolated_cache")
@pytest.mark.parametrize("src", [
    "from vllm.models.kimi_k3.common import sample\nsample.__defaults__ = ()\n",
    "from .common import sample\nsample.__defaults__ = ()\n",
    "import vllm.models.kimi_k3.common as c\nc.os.environ.x = 1\n",
    "from .hop import sample\nsample.__defaults__ = ()\n",  # hop.py: `from .common import sample`
    "from .star import sample\nsample.__defaults__ = ()\n",  # star.py: `from vllm...sampler import *`
])
def test_write_through_a_reexport_is_an_error(make_repo: MakeRepo, src: str) -> None:
    # (the cross-module summary reads `c.os` as `os` itself: `c.os.environ.x = 1` is then the environment
    # write FT123 it would be after a direct `import os`, no longer a re-export's FT120)
    got = ft120(make_repo, {f"{K3}/fast.py": src, f"{K3}/hop.py": "from .common import sample\n",
                            f"{K3}/star.py": "from vllm.v1.sample.sampler import *\n"}, ("FT120", "FT123"))
    assert [(p, line) for p, line, _ in got] == [(f"{K3}/fast.py", 2)], got
    assert "re-exported" in got[0][2]


@pytest.mark.usefixtures("isolated_cache")
def test_write_to_an_own_definition_elsewhere_is_fine(make_repo: MakeRepo) -> None:
    assert ft120(make_repo, {f"{K3}/fast.py": "from .common import Own\nOwn.tag = 1\n"
                                              "from . import common\ncommon.FLAG = True\n"}) == []
