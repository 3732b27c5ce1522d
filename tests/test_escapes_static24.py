"""Hostile review 24 of the static escape scan (issue 15, round static24): writes through methods of another
own module's class (a call on an instance or on the class, operator syntax running its dunders), and the
setter-rule narrowing (methods' `self`/`cls` are the contribution's own) abused by class, static and
class methods. Each attack marks its lines `# <-` (errors expected there); the honest twins must stay
clean. Attacks still open are strict xfails keyed in OPEN / CROSS_OPEN with a one-line reason."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fasttrack.confinement.engine_signatures import EngineSignatures
from fasttrack.confinement.trace.gather import gather_trace
from fasttrack.findings import Finding
from fasttrack.policy import Policy, load_policy
from tests.escape_marks import marked_lines
from tests.test_escapes import POLICY
from tests.test_escapes_hostile20 import _cross_errors
from tests.test_escapes_hostile21 import _errors_by_file
from tests.test_escapes_hostile22 import shipped_error_lines
from tests.test_escapes_hostile_flow import ENGINE, marked, scan
from tests.test_trace import _context, _findings
from tests.test_trace_hostile22 import _errors_at

# -- across own modules: another module's class whose methods write through their parameters -------------
_PUT = "class K:\n    def put(self, v):\n        v.forward = None\n"
CROSS: dict[str, tuple[dict[str, str], str]] = {
    "other-module-method-on-instance": ({"mid.py": _PUT},
                                        "from .layers import AttentionImpl\nfrom .mid import K\n"
                                        "K().put(AttentionImpl)  # <-\n"),
    "other-module-method-on-module-instance": ({"mid.py": _PUT + "k = K()\n"},
                                               "from .layers import AttentionImpl\nfrom .mid import k\n"
                                               "k.put(AttentionImpl)  # <-\n"),
    "other-module-method-unbound": ({"mid.py": _PUT},
                                    "from .layers import AttentionImpl\nfrom .mid import K\n"
                                    "K.put(K(), AttentionImpl)  # <-\n"),
    "other-module-staticmethod": ({"mid.py": "class K:\n    @staticmethod\n    def put(v):\n"
                                             "        v.forward = None\n"},
                                  "from .layers import AttentionImpl\nfrom .mid import K\n"
                                  "K.put(AttentionImpl)  # <-\n"),
    "other-module-classmethod": ({"mid.py": "class K:\n    @classmethod\n    def put(cls, v):\n"
                                            "        v.forward = None\n"},
                                 "from .layers import AttentionImpl\nfrom .mid import K\n"
                                 "K.put(AttentionImpl)  # <-\n"),
    "other-module-setattr-dunder": ({"mid.py": "class K:\n    def __setattr__(self, k, v):\n"
                                               "        v.forward = None\n"},
                                    "from .layers import AttentionImpl\nfrom .mid import K\n"
                                    "K().a = AttentionImpl  # <-\n"),
    "other-module-call-dunder": ({"mid.py": "class K:\n    def __call__(self, v):\n"
                                            "        v.forward = None\n"},
                                 "from .layers import AttentionImpl\nfrom .mid import K\n"
                                 "K()(AttentionImpl)  # <-\n"),
    "other-module-iadd-dunder": ({"mid.py": "class K:\n    def __iadd__(self, v):\n        v.forward = None\n"
                                            "        return self\n"},
                                 "from .layers import AttentionImpl\nfrom .mid import K\nk = K()\n"
                                 "k += AttentionImpl  # <-\n"),
    "other-module-unbound-list-append-helper": ({"mid.py": "def add(p, x):\n    list.append(p, x)\n"},
                                                "import sys\nfrom .mid import add\n"
                                                "add(sys.path, '/tmp')  # <-\n"),
    "other-module-returns-engine-cm": ({"mid.py": "import torch\ndef grad():\n    return torch.no_grad()\n"},
                                       "from .mid import grad\ngrad().__enter__()  # <-\n"),
}
CROSS_OPEN: dict[str, str] = {}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(POLICY)


def test_open_keys_are_cases() -> None:
    assert set(CROSS_OPEN) <= set(CROSS)
    assert set(OPEN) <= set(ATTACKS)


@pytest.mark.parametrize(("extra", "src"), [
    pytest.param(v[0], v[1], id=k,
                 marks=[pytest.mark.xfail(strict=True, reason=CROSS_OPEN[k])] if k in CROSS_OPEN else [])
    for k, v in CROSS.items()])
def test_cross_module_attack_is_an_error(tmp_path: Path, policy: Policy, extra: dict[str, str], src: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    want = {(f"kernels/kimi_k3/{name}", line) for name, text in {**extra, "impl.py": src}.items()
            for line in marked_lines(text)}
    assert want, "an attack marks its lines"
    assert want <= _errors_by_file(tmp_path, policy, extra, src, monkeypatch)


CROSS_HONEST_MID = ("class Own:\n    pass\nclass K:\n    def put(self, v):\n        v.y = 1\n"
                    "    def __setitem__(self, k, v):\n        v.y = 1\n    @staticmethod\n    def s(v):\n"
                    "        v.y = 1\n    @classmethod\n    def c(cls, v):\n        v.y = 1\nk = K()\n"
                    "class H:\n    def __new__(cls, *a):\n        return super().__new__(cls)\n"
                    "class G:\n    def __new__(cls):\n        return object.__new__(cls)\n"
                    "class CM:\n    def __enter__(self):\n        return self\n    def __exit__(self, *a):\n"
                    "        return False\ndef mk():\n    return CM()\n")
CROSS_HONEST = ("from .layers import AttentionImpl\nfrom .mid import K, k, H, G, Own, mk\nK().put(Own)\n"
                "k.put(Own())\nK()['x'] = Own\nK.s(Own)\nK.c(Own)\nK.put(K(), Own)\nH().y = 1\nG().y = 1\n"
                "mk().__enter__()\nK().put(1)\nK()[AttentionImpl] = 1\nK.put(AttentionImpl(), Own)\n")


def test_cross_module_honest_twin(tmp_path: Path, policy: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _cross_errors(tmp_path, policy, {"mid.py": CROSS_HONEST_MID}, CROSS_HONEST, monkeypatch) == []


# -- one file (the head of tests/test_escapes_hostile_flow.py binds L and AttentionImpl, engine classes) ---
_NAMES_READ_BACK = textwrap.dedent("""\
    _NAMES = ('a', 't')
    class Own:
        def __init__(self):
            name = None
            for n in _NAMES:
                name = n
            setattr(self, name, AttentionImpl)
        def f(self):
            self.t.forward = None  # <-
    """)
_NAMES_GROWN = textwrap.dedent("""\
    _NAMES = ['a']
    _NAMES.append('t')
    class Own:
        def __init__(self):
            for n in _NAMES:
                setattr(self, n, AttentionImpl)
        def f(self):
            self.t.forward = None  # <-
    """)
# hy_v4 nvidia/mtp.py's shape: a setattr on a copy of the quant config by a name from a tuple of literals
_NAMES_TUPLE = textwrap.dedent("""\
    import torch
    _ATTRS = ('ignored_layers', 'exclude_modules')
    def remap(quant_config):
        name = None
        patterns = None
        for a in _ATTRS:
            value = getattr(quant_config, a, None)
            if value:
                name = a
                patterns = list(value)
                break
        if name is None:
            return quant_config
        q = copy.copy(quant_config)
        setattr(q, name, patterns + ['x'])
        return q
    class Block:
        def __init__(self):
            self.skip = False
    class Layer(torch.nn.Module):
        def __init__(self, quant_config):
            super().__init__()
            self.block = Block()
    class Model(torch.nn.Module):
        def __init__(self, quant_config):
            super().__init__()
            self.quant_config = remap(quant_config)
            self.layers = torch.nn.ModuleDict({'0': Layer(quant_config=self.quant_config)})
        def f(self):
            for layer in self.layers.values():
                layer.block.skip = True
    """)
_OWN_PUT = "class Own:\n    def put(self, v):\n        self.forward = v\n"
ATTACKS: dict[str, str] = {
"unbound-setitem-param-helper": "import sys\ndef put(d, k, v):\n    dict.__setitem__(d, k, v)\n"
                                "put(sys.modules, 'x', None)  # <-\n",
# -- the setter-rule narrowing: a method's self/cls is the contribution's own only when Python binds it ----
"unbound-method-self-engine": _OWN_PUT + "Own.put(AttentionImpl, None)  # <-\n",
"unbound-method-self-keyword": _OWN_PUT + "Own.put(self=AttentionImpl, v=None)  # <-\n",
"method-get-engine": _OWN_PUT + "Own.put.__get__(AttentionImpl)(None)  # <-\n",
"methodtype-engine": "import types\n" + _OWN_PUT + "types.MethodType(Own.put, AttentionImpl)(None)  # <-\n",
"partial-method-engine": _OWN_PUT + "functools.partial(Own.put, AttentionImpl)(None)  # <-\n",
"vars-method-engine": _OWN_PUT + "vars(Own)['put'](AttentionImpl, None)  # <-\n",
"class-of-instance-method-engine": _OWN_PUT + "o = Own()\no.__class__.put(AttentionImpl, None)  # <-\n",
"type-of-instance-method-engine": _OWN_PUT + "type(Own()).put(AttentionImpl, None)  # <-\n",
"method-as-map-callback": _OWN_PUT + "list(map(Own.put, [AttentionImpl], [None]))  # <-\n",
"classmethod-func-engine": "class Own:\n    @classmethod\n    def put(cls, v):\n        cls.forward = v\n"
                           "Own.put.__func__(AttentionImpl, None)  # <-\n",
"self-table-append-engine": "class Own:\n    def add(self, v):\n        self.table.append(v)\n"
                            "Own.add(L, None)  # <-\n",
"setattr-self-engine": "class Own:\n    def put(self, v):\n        setattr(self, 'forward', v)\n"
                       "Own.put(AttentionImpl, None)  # <-\n",
"staticmethod-by-helper-decorator": "def deco(f):\n    return staticmethod(f)\nclass Own:\n"
                                    "    @deco\n    def put(o):\n        o.forward = None\n"
                                    "Own.put(AttentionImpl)  # <-\n",
"staticmethod-through-module-alias": "import builtins as bi\nclass Own:\n    @bi.staticmethod\n"
                                     "    def put(o):\n        o.forward = None\n"
                                     "Own.put(AttentionImpl)  # <-\n",
"super-method-func-engine": _OWN_PUT + "class Sub(Own):\n    pass\n"
                            "super(Sub, Sub()).put.__func__(AttentionImpl, None)  # <-\n",
"method-name-alias-engine": _OWN_PUT + "put = Own.put\nput(AttentionImpl, None)  # <-\n",
"engine-classmethod-register-local": "AttentionImpl.register_impl(object())  # <-\n",
# -- a computed-name setattr on an engine object's copy, read back (the own-instance exception keeps these)
"computed-setattr-on-self-read-back": "class Own:\n    def __init__(self, name):\n"
                                      "        setattr(self, name, AttentionImpl)\n"
                                      "    def f(self):\n        self.t.forward = None  # <-\n",
"computed-setattr-on-copy-read-back": "def f(cfg: L, name):\n    q = copy.copy(cfg)\n"
                                      "    setattr(q, name, AttentionImpl)\n    q.t.forward = None  # <-\n",
"computed-setattr-names-tuple-read-back": _NAMES_READ_BACK,
"computed-setattr-names-list-grown": _NAMES_GROWN,
"own-function-returns-redirect": "import io\ndef quiet():\n"
                                 "    return contextlib.redirect_stdout(io.StringIO())  # <-\n"
                                 "quiet().__enter__()  # <-\n",
}
OPEN: dict[str, str] = {
    "super-method-func-engine": "`super(...).m` is not resolved to the own method (its `__func__` hands "
                                "self)",
    "engine-classmethod-register-local": "an engine class's `register_*` with a local first argument reads "
                                         "as a hook on an own instance (unbound call): classmethod not known",
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> EngineSignatures:
    root = tmp_path_factory.mktemp("engine")
    for rel, text in ENGINE.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return EngineSignatures(root)


@pytest.mark.parametrize("src", [
    pytest.param(s, id=k, marks=[pytest.mark.xfail(strict=True, reason=OPEN[k])] if k in OPEN else [])
    for k, s in ATTACKS.items()])
def test_attack_is_an_error_at_its_line(src: str, engine: EngineSignatures) -> None:
    want = marked(src)
    assert want, "an attack marks its lines"
    assert set(want) <= set(shipped_error_lines(scan(src, engine)))


HONEST: dict[str, str] = {
"computed-setattr-names-tuple": _NAMES_TUPLE,
"computed-setattr-on-engine-copy": "def remap(quant_config, attr):\n"
                                   "    patterns = list(getattr(quant_config, attr))\n    extra = ['x']\n"
                                   "    q = copy.copy(quant_config)\n    setattr(q, attr, patterns + extra)\n"
                                   "    return q\n"
                                   "class Layer:\n    def __init__(self):\n        self.skip = False\n"
                                   "class Model:\n    def __init__(self, quant_config):\n"
                                   "        self.q = remap(quant_config, 'ignore')\n"
                                   "        self.layer = Layer()\n"
                                   "    def set_skip(self, v):\n        self.layer.skip = v\n"
                                   "        self.spec_step_idx = v\n",
"own-methods-bound-by-python": _OWN_PUT + "o = Own()\no.put(1)\nbound = o.put\nbound(AttentionImpl)\n"
                                "Own.put(o, 1)\nOwn().put(AttentionImpl)\n"
                                "class Sub(Own):\n    pass\nSub.put(Sub(), 2)\nOwn.put.__get__(o)(1)\n"
                                "functools.partial(Own.put, o)(1)\nvars(Own)['put'](o, 1)\n"
                                "type(o).put(o, AttentionImpl)\nlist(map(Own.put, [o], [AttentionImpl]))\n",
"own-classmethod-and-static": "class Own:\n    @classmethod\n    def put(cls, v):\n        cls.forward = v\n"
                              "    @staticmethod\n    def s(o):\n        o.x = 1\nOwn.put(1)\n"
                              "class Sub(Own):\n    pass\nSub.put(AttentionImpl)\nOwn.put.__func__(Sub, 1)\n"
                              "Own.s(Own())\n",
"torch-module-hook-unbound": "import torch\nm = torch.nn.Linear(1, 1)\n"
                             "torch.nn.Module.register_forward_pre_hook(m, print)\n",
"unbound-setitem-own": "def put(d, k, v):\n    dict.__setitem__(d, k, v)\n"
                       "put({}, 'x', None)\n",
"own-function-returns-own-cm": "class CM:\n    def __enter__(self):\n        return self\n"
                               "    def __exit__(self, *a):\n        return False\n"
                               "def mk():\n    return CM()\nmk().__enter__()\n",
}


@pytest.mark.parametrize("src", list(HONEST.values()), ids=list(HONEST))
def test_honest_twin_is_clean(src: str, engine: EngineSignatures) -> None:
    assert shipped_error_lines(scan(src, engine)) == []


# -- the trace's side of the narrowing (gather._setter): a class's method is spared only for what it
#    changes in a class (its instances' bookkeeping), not for a module's shared state ---------------------
TRACE_ATTACKS: dict[str, str] = {
    "mimetypes_unbound_add.py": "import mimetypes\nmimetypes.init()\n"
                                "mimetypes.MimeTypes.add_type(mimetypes._db, 'text/x-evil', '.evil')  # <-\n",
    "mimetypes_db_add.py": "import mimetypes\nmimetypes.init()\n"
                           "mimetypes._db.add_type('text/x-evil2', '.evil2')  # <-\n",
}
TRACE_HONEST: dict[str, str] = {
    "own_mimetypes.py": "import mimetypes\nm = mimetypes.MimeTypes()\nm.add_type('text/x-own', '.own')\n",
}


@pytest.fixture(scope="module")
def traced24(tmp_path_factory: pytest.TempPathFactory) -> list[Finding]:
    ctx = _context(tmp_path_factory.mktemp("t24"), "evil24", {**TRACE_ATTACKS, **TRACE_HONEST})
    return _findings(ctx, gather_trace(ctx))


@pytest.mark.slow
@pytest.mark.parametrize("module", list(TRACE_ATTACKS))
def test_trace_class_method_setter_is_an_error(traced24: list[Finding], module: str) -> None:
    assert set(marked_lines(TRACE_ATTACKS[module])) <= _errors_at(traced24, "evil24", module)


@pytest.mark.slow
@pytest.mark.parametrize("module", list(TRACE_HONEST))
def test_trace_own_instance_setter_is_clean(traced24: list[Finding], module: str) -> None:
    assert _errors_at(traced24, "evil24", module) == set()
