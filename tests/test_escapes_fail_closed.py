"""Issue 15, item 2: the static scan fails closed.

Each attack is a rewrite of "patch a shared class" or "change process-wide state" that the scan used to
let through (it named no foreign target in one statement, or called something the scan had no entry for).
Each comes with an honest model-local twin that must stay clean. Snippets mark the line a finding must
point at with `# <-`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fasttrack.changes.model import Change
from fasttrack.confinement.escapes import Escape, analyse_source, find_escapes
from fasttrack.context import Context
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Finding, Severity
from fasttrack.policy import Policy, load_policy
from fasttrack.rules import escapes as escape_rules
from fasttrack.verdict import ChangeStatus

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
    assert helpers.param_writers == {"vllm.models.kimi_k3.helpers.patch": frozenset({0, "cls"})}
    caller = analyse_source(SHARED + "from .helpers import patch\npatch(RowParallelLinear, None)\n",
                            MODEL_FILE, OWN)
    assert caller.foreign_calls == [("vllm.models.kimi_k3.nvidia.helpers.patch",
                                     {0: "vllm.model_executor.layers.linear.RowParallelLinear"}, 3)]


def test_context_names_the_guard_and_function() -> None:
    src = "import vllm.envs as e\nif e.X:\n    e.Y = 1\ndef f():\n    e.Z = 1\ne.W = 1\n"
    contexts = [e.context for e in find_escapes(src, MODEL_FILE, OWN)]
    assert contexts == ["if e.X", "def f", ""]


# ------------------------------------------------------------------------------------------------------
# The rules: warnings fail closed in shipping code; test leniency follows the import graph; helpers in
# another changed file; a moved or widened patch is new.

POLICY = Path(__file__).resolve().parents[1] / "policies" / "vllm.toml"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(POLICY)


def ctx_for(tmp_path: Path, policy: Policy, files: dict[str, str], *, base: dict[str, str] | None = None,
            statuses: dict[str, ChangeStatus] | None = None,
            old_paths: dict[str, str] | None = None) -> Context:
    for rel, content in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
    changes = tuple(Change(status=(statuses or {}).get(p, ChangeStatus.ADDED if base is None else
                                                      ChangeStatus.MODIFIED),
                           path=p, old_path=(old_paths or {}).get(p), new_mode="100644") for p in files)
    return Context(policy=policy, policy_path=POLICY, mode="range", head_dir=tmp_path,  # type: ignore[arg-type]
                   changes=changes, model="kimi_k3", base_texts=base or {})


def findings(ctx: Context) -> list[Finding]:
    return [f for r in escape_rules.catalogue.rules for f in r.run(gather_facts(ctx))]


WARNING_FAMILIES = {
    "exec-computed": "def f(code):\n    exec(code)\n",
    "import-module-computed": "import importlib\ndef f(n):\n    return importlib.import_module(n)\n",
    "sys-path": "import sys\nsys.path.insert(0, '/tmp')\n",
    "environ-in-function": "import os\ndef f():\n    os.environ['A'] = '1'\n",
    "class-of-object": "def f(x):\n    x.__class__.forward = None\n",
}


@pytest.mark.parametrize("name", sorted(WARNING_FAMILIES))
def test_warning_families_are_errors_in_shipping_code(name: str, tmp_path: Path, policy: Policy) -> None:
    src = WARNING_FAMILIES[name]
    shipping = findings(ctx_for(tmp_path / "a", policy, {"vllm/models/kimi_k3/nvidia/k3.py": src}))
    assert shipping and {f.severity for f in shipping} == {Severity.ERROR}
    assert all("fails closed" in f.message for f in shipping)
    test_only = findings(ctx_for(tmp_path / "b", policy, {"tests/models/kimi_k3/test_k3.py": src}))
    assert test_only and {f.severity for f in test_only} == {Severity.WARNING}


def test_a_checked_literal_exec_stays_a_warning(tmp_path: Path, policy: Policy) -> None:
    found = findings(ctx_for(tmp_path, policy, {"vllm/models/kimi_k3/k3.py": "exec('print(1)')\n"}))
    assert [(f.code, f.severity) for f in found] == [("FT127", Severity.WARNING)]


def test_a_literal_exec_that_binds_a_name_is_an_error(tmp_path: Path, policy: Policy) -> None:
    # `exec('x = L')` rebinds a module name where the scan cannot follow it (issue 15 follow-up)
    found = findings(ctx_for(tmp_path, policy, {"vllm/models/kimi_k3/k3.py": "exec('x = 1')\n"}))
    assert ("FT127", Severity.ERROR) in [(f.code, f.severity) for f in found]


def test_test_leniency_follows_the_import_graph(tmp_path: Path, policy: Policy) -> None:
    """A test helper imported by another test helper that shipping code imports ships too; one that only
    tests import stays lenient."""
    patch = "import vllm.envs as e\ne.X = 1\n"
    files = {
        "vllm/models/kimi_k3/model.py": "from vllm.models.kimi_k3.tests import conftest_helpers\n",
        "vllm/models/kimi_k3/tests/conftest_helpers.py": "from vllm.models.kimi_k3.tests import deep\n",
        "vllm/models/kimi_k3/tests/deep.py": patch,
        "vllm/models/kimi_k3/tests/test_only.py": patch,
    }
    found = {f.path: f.severity for f in findings(ctx_for(tmp_path, policy, files))}
    assert found == {"vllm/models/kimi_k3/tests/deep.py": Severity.ERROR,
                     "vllm/models/kimi_k3/tests/test_only.py": Severity.WARNING}


def test_a_helper_in_another_changed_file(tmp_path: Path, policy: Policy) -> None:
    files = {
        "vllm/models/kimi_k3/helpers.py": "def patch(cls, fn):\n    cls.forward = fn\n",
        "vllm/models/kimi_k3/model.py":
            SHARED + "from .helpers import patch\npatch(RowParallelLinear, None)\n",
    }
    found = [(f.code, f.path, f.line, f.severity) for f in findings(ctx_for(tmp_path, policy, files))]
    assert found == [("FT120", "vllm/models/kimi_k3/model.py", 3, Severity.ERROR)]
    honest = dict(files, **{"vllm/models/kimi_k3/model.py": "from .helpers import patch\n"
                            "class C:\n    pass\npatch(C, None)\n"})
    assert findings(ctx_for(tmp_path / "b", policy, honest)) == []


def test_a_patch_moved_out_of_a_guard_is_new(tmp_path: Path, policy: Policy) -> None:
    """The base guarded the patch (`if IS_HIP:`); the head runs it at module level: not 'already in base'."""
    path = "vllm/models/kimi_k3/nvidia/k3.py"
    before = "import vllm.envs as e\nif e.IS_HIP:\n    e.X = 1\n"
    after = "import vllm.envs as e\ne.X = 1\n"
    found = findings(ctx_for(tmp_path, policy, {path: after}, base={path: before}))
    assert [(f.code, f.line, f.severity) for f in found] == [("FT120", 2, Severity.ERROR)]
    same = findings(ctx_for(tmp_path / "same", policy, {path: before}, base={path: before}))
    assert [(f.code, f.severity) for f in same] == [("FT120", Severity.INFO)]


def test_a_file_moved_in_from_another_model_brings_its_patches_as_new(tmp_path: Path, policy: Policy) -> None:
    old, new = "vllm/models/glm5next/nvidia/p.py", "vllm/models/kimi_k3/nvidia/p.py"
    src = "import vllm.envs as e\ne.X = 1\n"
    found = findings(ctx_for(tmp_path, policy, {new: src}, base={new: src},
                             statuses={new: ChangeStatus.RENAMED}, old_paths={new: old}))
    assert [(f.code, f.severity) for f in found] == [("FT120", Severity.ERROR)]


def test_ft146_rule_fails_and_passes(tmp_path: Path, policy: Policy) -> None:
    rule = next(r for r in escape_rules.catalogue.rules if r.code == "FT146")
    bad = rule.run(gather_facts(ctx_for(tmp_path / "a", policy, {"vllm/models/kimi_k3/k3.py":
                                                    "import signal\nsignal.signal(2, None)\n"})))
    assert [(f.code, f.line, f.severity) for f in bad] == [("FT146", 2, Severity.ERROR)] and bad[0].fix
    good = rule.run(gather_facts(ctx_for(tmp_path / "b", policy, {"vllm/models/kimi_k3/k3.py":
                                                     "import signal\nh = signal.getsignal(2)\n"})))
    assert good == []
