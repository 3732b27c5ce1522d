"""Hostile review of the confinement, round 6: writes to the engine's objects handed out by its accessors
(`get_current_vllm_config()`, `get_forward_context()`, the process groups), in-place writes through a name
another of the contribution's files re-exports, threads started from methods of own classes made at import
time, and metaclasses called directly. Each attack marks the line its error must point at with `# <-`;
each comes with an honest twin that must stay clean."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from git_helpers import GitRepo

from fasttrack.commands.verify import VerifyOptions, build_context
from fasttrack.confinement.escapes import Escape, find_escapes
from fasttrack.confinement.subclass_registries import registering_bases
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Severity
from fasttrack.policy import load_policy
from fasttrack.rules import all_rules

MakeRepo = Callable[..., GitRepo]
MODEL_FILE = "vllm/models/kimi_k3/nvidia/model.py"
OWN = {"vllm.models.kimi_k3"}
POLICY_PATH = Path(__file__).resolve().parent.parent / "policies" / "vllm.toml"
CFG = "from vllm.config import get_current_vllm_config\n"
FWD = "from vllm.forward_context import get_forward_context\n"


def scan(src: str) -> list[Escape]:
    return find_escapes(textwrap.dedent(src), MODEL_FILE, OWN, own_op_namespaces={"kimi_k3"},
                        settings=load_policy(POLICY_PATH).escapes)


def marked(src: str) -> list[int]:
    return [i for i, line in enumerate(textwrap.dedent(src).splitlines(), start=1) if "# <-" in line]


def errors(found: list[Escape], code: str) -> list[int]:
    return sorted({e.line for e in found if e.code == code and e.severity == "error"})


# ------------------------------------------------------------------------------------------------------
# 1. What an engine accessor returns is the engine's: a write to it is FT120/FT121 (reads are fine).

ACCESSOR_ATTACKS: list[tuple[str, str, str]] = [
    ("config-attribute", CFG + """
cfg = get_current_vllm_config()
cfg.model_config.max_model_len = 1  # <-
""", "FT120"),
    ("forward-context-attribute", FWD + """
get_forward_context().attn_metadata = None  # <-
""", "FT120"),
    ("dotted-module-path", """
import vllm.config
vllm.config.get_current_vllm_config().compilation_config.level = 0  # <-
""", "FT120"),
    ("defining-module", """
from vllm.config.vllm import get_current_vllm_config as current
current().parallel_config.tensor_parallel_size = 2  # <-
""", "FT120"),
    ("alias-of-the-accessor", CFG + """
g = get_current_vllm_config
cc = g().compilation_config
cc.cudagraph_capture_sizes = []  # <-
""", "FT120"),
    ("own-helper-returns-it", CFG + """
def _cfg():
    return get_current_vllm_config()
_cfg().model_config.enforce_eager = True  # <-
""", "FT120"),
    ("inside-a-layer-init", CFG + """
class K3Layer:
    def __init__(self, prefix):
        mc = get_current_vllm_config().model_config
        mc.max_model_len = 8  # <-
""", "FT120"),
    ("augmented", CFG + """
def grow():
    get_current_vllm_config().scheduler_config.max_num_seqs += 1  # <-
""", "FT120"),
    ("setattr", CFG + """
setattr(get_current_vllm_config().model_config, "dtype", "float32")  # <-
""", "FT121"),
    ("item-write", FWD + """
def f(prefix):
    get_forward_context().attn_metadata[prefix] = None  # <-
""", "FT120"),
    ("in-place-update", FWD + """
def f():
    get_forward_context().no_compile_layers.update({})  # <-
""", "FT120"),
    ("static-forward-context-other-value", CFG + """
class K3Layer:
    def __init__(self, prefix, other):
        cc = get_current_vllm_config().compilation_config
        cc.static_forward_context[prefix] = other  # <-
""", "FT120"),
    ("static-forward-context-delete", CFG + """
class K3Layer:
    def __init__(self, prefix):
        cc = get_current_vllm_config().compilation_config
        del cc.static_forward_context[prefix]  # <-
""", "FT120"),
    ("static-forward-context-clear", CFG + """
def reset():
    get_current_vllm_config().compilation_config.static_forward_context.clear()  # <-
""", "FT120"),
    ("static-forward-context-outside-a-method", CFG + """
def register(prefix, self):
    get_current_vllm_config().compilation_config.static_forward_context[prefix] = self  # <-
""", "FT120"),
    ("process-group", """
from vllm.distributed import get_tp_group
get_tp_group().world_size = 1  # <-
""", "FT120"),
    ("helper-that-writes-its-parameter", CFG + """
def _set(obj):
    obj.max_model_len = 1
_set(get_current_vllm_config().model_config)  # <-
""", "FT120"),
]


@pytest.mark.parametrize(("source", "code"), [a[1:] for a in ACCESSOR_ATTACKS],
                         ids=[a[0] for a in ACCESSOR_ATTACKS])
def test_write_to_an_accessors_object_is_an_error(source: str, code: str) -> None:
    found = scan(source)
    assert errors(found, code) == marked(source), found


def test_accessor_write_message_names_the_accessor() -> None:
    (esc,) = scan(CFG + "get_current_vllm_config().model_config.max_model_len = 1\n")
    assert "get_current_vllm_config()" in esc.message and "engine" in esc.message


ACCESSOR_HONEST: list[tuple[str, str]] = [
    ("reads", CFG + FWD + """
import torch
class K3Layer(torch.nn.Module):
    def __init__(self, prefix):
        super().__init__()
        cfg = get_current_vllm_config()
        self.max_len = cfg.model_config.max_model_len
        self.tp = cfg.parallel_config.tensor_parallel_size
        self.hidden = cfg.model_config.get_hidden_size()
    def forward(self, x, prefix):
        meta = get_forward_context().attn_metadata[prefix]
        local = dict(get_forward_context().attn_metadata)
        local[prefix] = None
        return x if meta is None else x + 1
"""),
    ("layer-registers-itself", CFG + """
class K3Attention:
    def __init__(self, prefix):
        compilation_config = get_current_vllm_config().compilation_config
        if prefix in compilation_config.static_forward_context:
            raise ValueError(f"Duplicate layer name: {prefix}")
        compilation_config.static_forward_context[prefix] = self
"""),
]


@pytest.mark.parametrize("source", [h[1] for h in ACCESSOR_HONEST], ids=[h[0] for h in ACCESSOR_HONEST])
def test_reading_an_accessors_object_is_clean(source: str) -> None:
    assert scan(source) == []


def test_the_policy_names_the_accessors() -> None:
    spec = load_policy(POLICY_PATH).escapes
    assert "vllm.forward_context.get_forward_context" in spec.engine_accessors
    assert any("static_forward_context" in p for p in spec.engine_self_registrations)


def test_an_accessor_the_policy_drops_is_not_tainted() -> None:
    # the list is policy data: without the entry the same write is not judged as the engine's
    spec = load_policy(POLICY_PATH).escapes.model_copy(update={"engine_accessors": []})
    src = CFG + "get_current_vllm_config().model_config.max_model_len = 1\n"
    assert find_escapes(src, MODEL_FILE, OWN, settings=spec) == []


# ------------------------------------------------------------------------------------------------------
# 2. A name imported directly from the engine and updated in place with `+=` / `|=` writes the engine's
#    object (the statement rebinds the name only after mutating what it held).

INPLACE_ATTACKS: list[tuple[str, str]] = [
    ("list-iadd", "from vllm.plugins import PLUGINS\nPLUGINS += ['k3']  # <-\n"),
    ("dict-ior", "from vllm.plugins import TABLE\nTABLE |= {'k3': 1}  # <-\n"),
    ("global-in-function", "from vllm.plugins import PLUGINS\ndef f():\n    global PLUGINS\n"
                           "    PLUGINS += ['k3']  # <-\n"),
]


@pytest.mark.parametrize("source", [a[1] for a in INPLACE_ATTACKS], ids=[a[0] for a in INPLACE_ATTACKS])
def test_augmented_assignment_to_an_engine_name_is_an_error(source: str) -> None:
    found = scan(source)
    assert errors(found, "FT120") == marked(source), found


def test_augmented_assignment_to_a_local_name_is_clean() -> None:
    assert scan("from vllm.plugins import PLUGINS\nmine = list(PLUGINS)\nmine += ['k3']\nn = 0\nn += 1\n"
                "def f(x):\n    x += 1\n    return x\n") == []


# Through a name another of the contribution's files re-exports (judged across files on disk).

K3 = "vllm/models/kimi_k3"
REEXPORTS = f"{K3}/common.py"
REEXPORT_TEXT = ("from vllm.model_executor.layers.linear import RowParallelLinear\n"
                 "from vllm.plugins import PLUGINS\nclass Own:\n    hooks = []\nOWN_LIST = []\n")


def escape_errors(make_repo: MakeRepo, files: dict[str, str]) -> list[tuple[str, str | None, int | None]]:
    from test_zones_registry import ENGINE

    repo = make_repo({**ENGINE, REEXPORTS: REEXPORT_TEXT})
    repo.commit(files)
    ctx = build_context(VerifyOptions(repo=repo.path, base="HEAD~1", head="HEAD", policy=POLICY_PATH))
    return sorted((f.code, f.path, f.line) for r in all_rules() if r.code in ("FT120", "FT121")
                  for f in r.run(gather_facts(ctx)) if f.severity is Severity.ERROR)


REEXPORT_ATTACKS = [
    "from .common import RowParallelLinear\nsetattr(RowParallelLinear, 'forward', None)\n",
    "from . import common\nsetattr(common.RowParallelLinear, 'forward', None)\n",
    "from .common import PLUGINS\nPLUGINS.append('k3')\n",
    "from .common import PLUGINS\nPLUGINS['k3'] = 1\n",
    "from .common import PLUGINS\ndel PLUGINS['k3']\n",
    "from .common import PLUGINS\nPLUGINS += ['k3']\n",
    "from .common import RowParallelLinear\nRowParallelLinear.hooks.append(1)\n",
    "from .common import RowParallelLinear\nRowParallelLinear.hooks['k3'] = 1\n",
    "from .common import RowParallelLinear\nRowParallelLinear.count += 1\n",
    "import operator\nfrom .common import PLUGINS\noperator.setitem(PLUGINS, 'k3', 1)\n",
    "from .common import RowParallelLinear\ntype.__setattr__(RowParallelLinear, 'forward', None)\n",
    "import vllm.models.kimi_k3.common as c\nc.PLUGINS.extend(['k3'])\n",
]


@pytest.mark.usefixtures("isolated_cache")
@pytest.mark.parametrize("src", REEXPORT_ATTACKS)
def test_in_place_write_through_a_reexport_is_an_error(make_repo: MakeRepo, src: str) -> None:
    got = escape_errors(make_repo, {f"{K3}/fast.py": src})
    lines = src.count("\n")
    assert [(p, line) for _, p, line in got] == [(f"{K3}/fast.py", lines)], got


@pytest.mark.usefixtures("isolated_cache")
def test_in_place_write_to_an_own_definition_elsewhere_is_clean(make_repo: MakeRepo) -> None:
    src = ("import operator\nfrom .common import Own, OWN_LIST\nsetattr(Own, 'tag', 1)\nOWN_LIST.append(1)\n"
           "OWN_LIST += [2]\nOwn.hooks.append(3)\noperator.setitem(OWN_LIST, 0, 4)\n"
           "from . import common\ncommon.OWN_LIST[0] = 3\nsetattr(common, 'FLAG', True)\n")
    assert escape_errors(make_repo, {f"{K3}/fast.py": src}) == []


# ------------------------------------------------------------------------------------------------------
# 3a. A thread started by a method of an own class, run at import time (instantiation runs __init__).

THREAD = "import threading\n"
THREAD_ATTACKS: list[tuple[str, str]] = [
    ("init-starts", THREAD + """
class Poller:
    def __init__(self):
        threading.Thread(target=self.run, daemon=True).start()
    def run(self):
        return None
_poller = Poller()  # <-
"""),
    ("init-calls-a-starting-method", THREAD + """
class Poller:
    def __init__(self):
        self._boot()
    def _boot(self):
        threading.Thread(target=print, daemon=True).start()
Poller()  # <-
"""),
    ("method-on-an-instance", THREAD + """
class Service:
    def boot(self):
        threading.Thread(target=print, daemon=True).start()
svc = Service()
svc.boot()  # <-
"""),
    ("method-on-a-fresh-instance", THREAD + """
class Service:
    def boot(self):
        threading.Thread(target=print, daemon=True).start()
Service().boot()  # <-
"""),
    ("classmethod", THREAD + """
class Service:
    @classmethod
    def boot(cls):
        threading.Thread(target=print, daemon=True).start()
Service.boot()  # <-
"""),
    ("inherited-init", THREAD + """
class Base:
    def __init__(self):
        threading.Thread(target=print, daemon=True).start()
class K3(Base):
    pass
K3()  # <-
"""),
    ("own-function-makes-the-instance", THREAD + """
class Poller:
    def __init__(self):
        threading.Thread(target=print, daemon=True).start()
def make():
    return Poller()
_p = make()  # <-
"""),
    ("thread-subclass", THREAD + """
class Poller(threading.Thread):
    def run(self):
        return None
Poller(daemon=True).start()  # <-
"""),
    ("thread-subclass-by-name", THREAD + """
class Poller(threading.Thread):
    def run(self):
        return None
_p = Poller(daemon=True)
_p.start()  # <-
"""),
]


@pytest.mark.parametrize("source", [a[1] for a in THREAD_ATTACKS], ids=[a[0] for a in THREAD_ATTACKS])
def test_thread_started_through_an_own_class_at_import_is_an_error(source: str) -> None:
    found = scan(source)
    assert errors(found, "FT146") == marked(source), found


def test_threads_of_own_classes_started_at_run_time_are_clean() -> None:
    src = THREAD + """
class Starts:
    def __init__(self):
        threading.Thread(target=print, daemon=True).start()
    def boot(self):
        threading.Thread(target=print, daemon=True).start()
class Quiet:
    def __init__(self):
        self.x = 1
    def boot(self):
        return self.x
class Poller(threading.Thread):
    def run(self):
        return None
q = Quiet()
q.boot()
Quiet().boot()
def load():
    Starts().boot()
    Poller(daemon=True).start()
    return Starts()
"""
    assert scan(src) == []


# 3b. A metaclass called directly creates a class like `type(name, bases, ns)`: the blast radius sees the
#     same registry link, and the escape scan judges computed bases the same way (FT146).

ENGINE_FILES = {"vllm.plugins": "vllm/plugins.py",
                "vllm.models.kimi_k3.model": "vllm/models/kimi_k3/model.py"}
PLUGINS = ("_PLUGINS = {}\n\nclass PluginMeta(type):\n    def __new__(mcs, name, bases, ns):\n"
           "        cls = super().__new__(mcs, name, bases, ns)\n        _PLUGINS[name] = cls\n"
           "        return cls\n\nclass Plugin(metaclass=PluginMeta):\n    pass\n\n"
           "class PlainMeta(type):\n    pass\n\nclass Plain:\n    pass\n\nclass Helper:\n    pass\n")


def hits(src: str) -> list[tuple[str, str]]:
    out = registering_bases(src, "vllm.models.kimi_k3.model", False, ENGINE_FILES,
                            lambda rel: PLUGINS if rel == "vllm/plugins.py" else None, "vllm",
                            "vllm.models.kimi_k3")
    return [(h.class_name, h.base) for h in out]


@pytest.mark.parametrize("src", [
    "from vllm.plugins import PluginMeta\nK3 = PluginMeta('K3', (), {})\n",
    "from vllm import plugins\nK3 = plugins.PluginMeta('K3', (plugins.Helper,), {})\n",
    "from vllm.plugins import Plugin\nK3 = type(Plugin)('K3', (), {})\n",
    "from vllm.plugins import Plugin\nK3 = Plugin.__class__('K3', (), {})\n",
])
def test_direct_metaclass_call_is_a_registry_link(src: str) -> None:
    got = hits(src)
    assert len(got) == 1 and got[0][0] == "K3 (dynamic)", got


def test_plain_classes_made_by_a_plain_metaclass_are_no_link() -> None:
    # (a metaclass of the engine's own other than type/ABCMeta/EnumMeta counts as registering, as in a class
    # statement's `metaclass=`: calling PlainMeta directly is a link too, fail closed)
    assert hits("import abc\nfrom vllm.plugins import Plain, Helper\nA = type(Plain)('A', (), {})\n"
                "B = abc.ABCMeta('B', (Helper,), {})\nh = Helper('h', (1,), {})\n") == []
    assert hits("from vllm.plugins import PlainMeta\nB = PlainMeta('B', (), {})\n") == [
        ("B (dynamic)", "vllm.plugins.PlainMeta")]


@pytest.mark.parametrize("src", [
    "from vllm.plugins import Plugin\nbases = [Plugin]\nK3 = type(Plugin)('K3', tuple(bases), {})  # <-\n",
    "from vllm.plugins import PluginMeta, Plugin\nbases = [Plugin]\n"
    "K3 = PluginMeta('K3', (*bases,), {})  # <-\n",
    "from vllm.plugins import Plugin\nmeta = Plugin.__class__\nK3 = meta('K3', tuple([Plugin]), {})  # <-\n",
])
def test_direct_metaclass_call_with_computed_bases_is_an_error(src: str) -> None:
    found = scan(src)
    assert errors(found, "FT146") == marked(src), found


def test_engine_metaclass_or_engine_base_with_literal_bases_is_an_error() -> None:
    # (issue 15 item 3: an engine metaclass called directly, or an engine base listed literally, may
    # register the new class: a class statement is what the blast radius and review read)
    src = ("from vllm.plugins import Plugin, PluginMeta, Helper\n"
           "A = PluginMeta('A', (Helper,), {})  # <-\nB = type(Plugin)('B', (), {})  # <-\n")
    found = scan(src)
    assert errors(found, "FT146") == marked(src), found


def test_metaclass_call_with_own_bases_and_ordinary_calls_are_clean() -> None:
    src = ("from vllm.plugins import Helper\nimport abc\nimport torch\nclass Own:\n    pass\n"
           "A = abc.ABCMeta('A', (Own,), {})\nB = type(Own)('B', (), {})\n"
           "x = torch.zeros(2, 3, 4)\nh = Helper('a', [1], {})\n")
    assert scan(src) == []
