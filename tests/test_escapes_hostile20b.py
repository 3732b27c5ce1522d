"""Hostile review 20b of the cross-module summary (cross_module.py) and the generator rules of scope.py:
contribution-mode attacks that write to an engine object reached through ANOTHER own module of the
contribution, end to end through `contribution()` / `ft_errors()`. Each attack must be an error at the
lines of impl.py marked `# <-`; the honest twins (the same forms on the contribution's own objects) stay
clean. Attacks marked NEW got through when this file was written and were fixed with it; those the scan does
not catch yet are strict xfails in OPEN, with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from fasttrack.facts.gather import gather_facts
from fasttrack.policy import Policy, load_policy
from fasttrack.rules import escapes as escape_rules
from tests.test_escapes import POLICY
from tests.test_escapes_hostile20 import _cross_errors
from tests.test_escapes_hostile_flow import ENGINE
from tests.test_escapes_own_bases import contribution, write

LAYERS = "from vllm.v1.attention.backend import AttentionImpl\n"
ENG = "import vllm.v1.attention.backend as eng\n"
FT = "import functools\n" + LAYERS
AS_E = "from vllm.v1.attention.backend import AttentionImpl as E\n"
MID = "mid.py"

ATTACKS: list[tuple[str, dict[str, str], str]] = [
    # -- the other module's namespace reached by other means than `from .m import name` ------------------
    ("module-dict-item", {}, "from . import layers\nlayers.__dict__['AttentionImpl'].forward = None  # <-\n"),
    ("vars-of-the-module", {}, "from . import layers\nvars(layers)['AttentionImpl'].forward = None  # <-\n"),
    ("importlib-relative", {}, "import importlib\n"
     "importlib.import_module('.layers', __package__).AttentionImpl.forward = None  # <-\n"),
    ("importlib-relative-package-literal", {}, "import importlib\n"
     "importlib.import_module('.layers', 'vllm.models.kimi_k3.nvidia.specialized_decode.hopper')"
     ".AttentionImpl.forward = None  # <-\n"),
    ("dunder-import-fromlist", {}, "__import__('layers', globals(), None, ['AttentionImpl'], 1)"
     ".AttentionImpl.forward = None  # <-\n"),
    ("star-import", {}, "from .layers import *\nAttentionImpl.forward = None  # <-\n"),
    ("star-re-export-chain", {"mid.py": "from .layers import *\n"},
     "from .mid import AttentionImpl\nAttentionImpl.forward = None  # <-\n"),
    ("star-chain-then-star", {"mid.py": "from .layers import *\n"},
     "from .mid import *\nAttentionImpl.forward = None  # <-\n"),
    ("all-names-a-re-export", {"mid.py": LAYERS + "__all__ = ['AttentionImpl']\n"},
     "from .mid import *\nAttentionImpl.forward = None  # <-\n"),
    ("all-hides-it-but-star-of-engine", {"mid.py": "from vllm.v1.attention.backend import *\n__all__ = []\n"},
     "from .mid import AttentionImpl\nAttentionImpl.forward = None  # <-\n"),
    ("subpackage-module", {"sub/__init__.py": "", "sub/mod.py": "from vllm.v1.attention.backend import "
                           "AttentionImpl as E\n"},
     "from .sub import mod\nmod.E.forward = None  # <-\n"),
    ("subpackage-init-re-export", {"sub/__init__.py": "from .mod import E\n",
                                   "sub/mod.py": AS_E},
     "from .sub import E\nE.forward = None  # <-\n"),
    ("bound-into-a-subpackage-module", {"sub/__init__.py": "", "sub/deep.py": ""},
     "from .sub import deep\nfrom .layers import AttentionImpl as A\ndeep.A = A\n"
     "A.forward = None  # <-\n"),
    # -- how the other module binds the name ----------------------------------------------------------------
    ("type-checking-else", {"mid.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    E = object\n"
                            "else:\n    from vllm.v1.attention.backend import AttentionImpl as E\n"},
     "from . import mid\nmid.E.forward = None  # <-\n"),
    ("try-except-importerror", {MID: "try:\n    " + AS_E +
                                "except ImportError:\n    class E:\n        pass\n"},
     "from .mid import E\nE.forward = None  # <-\n"),
    ("except-branch-binds-it", {"mid.py": "try:\n    import nothing_here as E\nexcept ImportError:\n"
                                "    from vllm.v1.attention.backend import AttentionImpl as E\n"},
     "from .mid import E\nE.forward = None  # <-\n"),
    ("globals-item-assignment", {"mid.py": LAYERS + "globals()['E'] = AttentionImpl\n"},
     "from .mid import E\nE.forward = None  # <-\n"),
    ("setattr-own-module", {"mid.py": "import sys\n" + LAYERS + "setattr(sys.modules[__name__], 'E', "
                            "AttentionImpl)\n"},
     "from .mid import E\nE.forward = None  # <-\n"),
    ("globals-update", {"mid.py": LAYERS + "globals().update(E=AttentionImpl)\n"},
     "from .mid import E\nE.forward = None  # <-\n"),
    ("rebound-later-to-own-class", {"mid.py": LAYERS + "E = AttentionImpl\nclass Own:\n    pass\nE = Own\n"},
     "from . import mid\ndef f():\n    mid.E.forward = None  # <-\n"),
    ("rebound-in-a-function", {"mid.py": LAYERS + "class Own:\n    pass\nE = Own\ndef setup():\n"
                               "    global E\n    E = AttentionImpl\n"},
     "from . import mid\nmid.setup()\nmid.E.forward = None  # <-\n"),
    ("walrus-at-module-level", {"mid.py": LAYERS + "if (E := AttentionImpl):\n    pass\n"},
     "from .mid import E\nE.forward = None  # <-\n"),
    ("for-loop-target", {"mid.py": LAYERS + "for E in (AttentionImpl,):\n    pass\n"},
     "from .mid import E\nE.forward = None  # <-\n"),
    ("with-target", {MID: LAYERS + "import contextlib\nwith contextlib.nullcontext(AttentionImpl) as E:\n"
                     "    pass\n"},
     "from .mid import E\nE.forward = None  # <-\n"),
    ("unpacking", {"mid.py": LAYERS + "_, E = 1, AttentionImpl\n"},
     "from .mid import E\nE.forward = None  # <-\n"),
    # -- what a function / class of the other module gives back -----------------------------------------
    ("getattr-of-engine-module-by-name", {"mid.py": ENG + "def get(name):\n    return getattr(eng, name)\n"},
     "from .mid import get\nget('AttentionImpl').forward = None  # <-\n"),
    ("classmethod-returns-it", {"mid.py": LAYERS + "class H:\n    @classmethod\n    def make(cls):\n"
                                "        return AttentionImpl\n"},
     "from .mid import H\nH.make().forward = None  # <-\n"),
    ("method-of-an-instance", {MID: LAYERS + "class H:\n    def make(self):\n        return AttentionImpl\n"},
     "from .mid import H\nH().make().forward = None  # <-\n"),
    ("property-returns-it", {"mid.py": LAYERS + "class H:\n    @property\n    def impl(self):\n"
                             "        return AttentionImpl\n"},
     "from .mid import H\nH().impl.forward = None  # <-\n"),
    ("module-instance-method", {MID: LAYERS + "class H:\n    def make(self):\n        return AttentionImpl\n"
                                "h = H()\n"},
     "from .mid import h\nh.make().forward = None  # <-\n"),
    ("lambda", {"mid.py": LAYERS + "get = lambda: AttentionImpl\n"},
     "from .mid import get\nget().forward = None  # <-\n"),
    ("partial", {"mid.py": FT + "def ident(x):\n    return x\n"
                 "get = functools.partial(ident, AttentionImpl)\n"},
     "from .mid import get\nget().forward = None  # <-\n"),
    ("partial-args", {"mid.py": FT + "p = functools.partial(print, AttentionImpl)\n"},
     "from .mid import p\np.args[0].forward = None  # <-\n"),
    # NEW: a partial holds its function and arguments, and its call may return an argument
    ("partial-func", {"mid.py": FT + "p = functools.partial(AttentionImpl)\n"},
     "from .mid import p\np.func.forward = None  # <-\n"),
    ("partial-keywords", {"mid.py": FT + "p = functools.partial(print, c=AttentionImpl)\n"},
     "from .mid import p\np.keywords['c'].forward = None  # <-\n"),
    ("partial-of-a-partial", {MID: "from functools import partial\n" + LAYERS +
                              "def ident(x):\n    return x\np = partial(partial(ident, AttentionImpl))\n"},
     "from .mid import p\np().forward = None  # <-\n"),
    ("dataclass-default", {"mid.py": "import dataclasses\n" + LAYERS + "@dataclasses.dataclass\nclass Cfg:\n"
                           "    impl: type = AttentionImpl\n"},
     "from .mid import Cfg\nCfg().impl.forward = None  # <-\n"),
    ("enum-member-value", {MID: "import enum\n" + LAYERS + "class K(enum.Enum):\n    A = AttentionImpl\n"},
     "from .mid import K\nK.A.value.forward = None  # <-\n"),
    ("decorator-returns-it", {"mid.py": LAYERS + "def deco(f):\n    return AttentionImpl\n"},
     "from .mid import deco\n@deco\ndef f():\n    pass\nf.forward = None  # <-\n"),
    ("class-decorator-returns-it", {"mid.py": LAYERS + "def deco(c):\n    return AttentionImpl\n"},
     "from .mid import deco\n@deco\nclass C:\n    pass\nC.forward = None  # <-\n"),
    ("type-of-a-module-instance", {"mid.py": LAYERS + "inst = AttentionImpl()\n"},
     "from .mid import inst\ntype(inst).forward = None  # <-\n"),
    ("class-of-a-module-instance", {"mid.py": LAYERS + "inst = AttentionImpl()\n"},
     "from .mid import inst\ninst.__class__.forward = None  # <-\n"),
    ("lazy-cycle-broken-in-a-function", {"mid.py": LAYERS + "def get():\n    from .impl import X\n"
                                         "    return AttentionImpl\n"},
     "X = 1\ndef f():\n    from .mid import get\n    get().forward = None  # <-\n"),
    ("function-import-in-other", {"mid.py": "def get():\n    from vllm.v1.attention.backend import "
                                  "AttentionImpl\n    return AttentionImpl\n"},
     "from .mid import get\nget().forward = None  # <-\n"),
    ("generator-of-another-module", {"mid.py": LAYERS + "def gen():\n    yield AttentionImpl\n"},
     "from .mid import gen\nfor c in gen():\n    c.forward = None  # <-\n"),
    ("next-of-another-module-generator", {"mid.py": LAYERS + "def gen():\n    yield AttentionImpl\n"},
     "from .mid import gen\nnext(gen()).forward = None  # <-\n"),
    ("async-of-another-module", {"mid.py": LAYERS + "async def get():\n    return AttentionImpl\n"},
     "from .mid import get\nasync def f():\n    (await get()).forward = None  # <-\n"),
    ("dict-get-of-another-module", {"mid.py": LAYERS + "D = {'a': AttentionImpl}\n"},
     "from .mid import D\nD.get('a').forward = None  # <-\n"),
    ("module-getattr-pep562", {"mid.py": LAYERS + "def __getattr__(name):\n    return AttentionImpl\n"},
     "from .mid import Anything\nAnything.forward = None  # <-\n"),
    ("own-subclass-in-other-module-mro", {"mid.py": LAYERS + "class Sub(AttentionImpl):\n    pass\n"},
     "from .mid import Sub\nSub.__mro__[1].forward = None  # <-\n"),
    ("own-subclass-in-other-module-super", {"mid.py": LAYERS + "class Sub(AttentionImpl):\n    pass\n"},
     "from .mid import Sub\nclass C(Sub):\n    def g(self):\n"
     "        super(Sub, self).forward.__func__.__defaults__ = ()  # <-\n"),
    # NEW: an attribute an own subclass of an engine class inherits is the engine class's
    ("inherited-engine-method-through-another-module-subclass", {MID: LAYERS + "class Sub(AttentionImpl):\n"
                                                                "    pass\n"},
     "from .mid import Sub\nSub.forward.__code__ = None  # <-\n"),
    ("inherited-engine-method-through-a-local-subclass", {},
     "from .layers import AttentionImpl\nclass Sub(AttentionImpl):\n    pass\n"
     "Sub.forward.__defaults__ = ()  # <-\n"),
    # NEW: a callback handed to a function that calls it with the engine class: the error is at the
    # hand-over (as for a helper writing through its parameter; the message names the write's line)
    ("callback-called-with-it", {MID: LAYERS + "def visit(cb):\n    cb(AttentionImpl)\n"},
     "from .mid import visit\ndef cb(c):\n    c.forward = None\nvisit(cb)  # <-\n"),
    ("callback-by-keyword-in-this-file", {},
     "from .layers import AttentionImpl\ndef visit(fn):\n    fn(AttentionImpl)\n"
     "def cb(c):\n    setattr(c, 'forward', None)\nvisit(fn=cb)  # <-\n"),
    # variants of the fixes above (caught when they were written)
    ("callback-aliased-in-the-other-module",
     {MID: LAYERS + "def visit(cb):\n    f = cb\n    f(AttentionImpl)\n"},
     "from .mid import visit\ndef cb(c):\n    c.forward = None\nvisit(cb)  # <-\n"),
    ("callback-wrapped-in-a-lambda", {MID: LAYERS + "def visit(cb):\n    cb(AttentionImpl)\n"},
     "from .mid import visit\ndef cb(c):\n    c.forward = None\nvisit(lambda c: cb(c))  # <-\n"),
    ("type-of-a-returned-instance", {MID: LAYERS + "def get():\n    return AttentionImpl()\n"},
     "from .mid import get\ntype(get()).forward = None  # <-\n"),
    ("getattr-of-an-inherited-attribute", {MID: LAYERS + "class Sub(AttentionImpl):\n    pass\n"},
     "from .mid import Sub\ngetattr(Sub, 'forward').__code__ = None  # <-\n"),
    ("vars-item-assignment", {MID: LAYERS + "vars()['E'] = AttentionImpl\n"},
     "from .mid import E\nE.forward = None  # <-\n"),
    ("own-module-dict-item",
     {MID: "import sys\n" + LAYERS + "sys.modules[__name__].__dict__['E'] = AttentionImpl\n"},
     "from .mid import E\nE.forward = None  # <-\n"),
    ("class-of-an-instance-of-a-subclass", {MID: LAYERS + "class Sub(AttentionImpl):\n    pass\n"},
     "from .mid import Sub\nSub().__class__.forward.__code__ = None  # <-\n"),
    ("inherited-through-two-own-modules", {MID: LAYERS + "class A(AttentionImpl):\n    pass\n",
                                           "mid2.py": "from .mid import A\nclass B(A):\n    pass\n"},
     "from .mid2 import B\nB.forward.__code__ = None  # <-\n"),
    ("other-module-writes-through-its-param", {"mid.py": "def put(c):\n    c.forward = None\n"},
     "from .layers import AttentionImpl\nfrom .mid import put\nput(AttentionImpl)  # <-\n"),
    ("sys-modules-of-other-module", {}, "import sys\n"
     "sys.modules['vllm.models.kimi_k3.nvidia.specialized_decode.hopper.layers'].AttentionImpl.forward"
     " = None  # <-\n"),
    # NEW (esc20c): a callback's keyword-only parameter, filled by another module's function
    ("callback-keyword-only-parameter", {MID: LAYERS + "def call(f):\n    f(x=AttentionImpl)\n"},
     "from .mid import call\ndef w(*, x):\n    x.forward = None\ncall(w)  # <-\n"),
    # NEW (esc20c; was open): a property of another module's class returning `self` is the instance
    ("property-of-another-module-returning-self",
     {MID: LAYERS + "class H:\n    @property\n    def me(self):\n        return self\n"
      "    def make(self):\n        return AttentionImpl\n"},
     "from .mid import H\nH().me.make().forward = None  # <-\nh = H()\nh.me.me.make().x = 1  # <-\n"),
]


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(POLICY)


@pytest.mark.parametrize(("extra", "src"), [(a[1], a[2]) for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_cross_module_attack_is_an_error(tmp_path: Path, policy: Policy, extra: dict[str, str], src: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    want = [i for i, line in enumerate(src.splitlines(), start=1) if "# <-" in line]
    assert want, "an attack marks its lines"
    assert set(want) <= set(_cross_errors(tmp_path, policy, extra, src, monkeypatch))


# honest twins: the same forms on the contribution's own objects, held and returned by another own module
OWN_MID = ("import sys\nimport torch\nclass Own:\n    pass\nclass M(torch.nn.Module):\n    pass\n"
           "class H:\n    def make(self):\n        return Own\n    @property\n    def impl(self):\n"
           "        return M\n    @classmethod\n    def mk(cls):\n        return Own\n"
           "    @property\n    def me(self):\n        return self\n"
           "h = H()\nget = lambda: Own\nglobals()['G'] = Own\nsetattr(sys.modules[__name__], 'G2', Own)\n"
           "globals().update(G3=M)\ninst = Own()\nmod = M()\nimport functools\n"
           "from .layers import AttentionImpl\npe = functools.partial(AttentionImpl, 1)\n"
           "po = functools.partial(print, Own)\ndef visit(cb):\n    cb(Own)\n    cb(M)\n"
           "def call(f):\n    f(x=Own)\n")
HONEST = ("from .mid import H, h, get, Own, M, G, G2, G3, pe, po\npe().x = 1\npe.x = 1\npo.args[0].x = 1\n"
          "po.func.__doc__.upper()\npo().x = 1\nG.x = 1\nG2.x = 1\nG3.forward = None\n"
          "H().make().x = 1\nH().impl.forward = None\nH.mk().x = 1\nh.make().x = 1\nh.impl.forward = None\n"
          "get().x = 1\nh.own = 1\nH().make.__doc__ = 'x'\nH().me.make().x = 1\nh.me.impl.forward = None\n"
          "from .mid import inst, mod\ntype(inst).x = 1\ninst.__class__.x = 1\ntype(mod).forward = None\n"
          "from .layers import AttentionImpl\na = AttentionImpl()\na.y = 1\nsetattr(a, 'z', 1)\n"
          "class S(AttentionImpl):\n    def forward(self, *a):\n        return super().forward(*a)\n"
          "S.forward.__doc__ = 'x'\nS.extra = 1\nS.__doc__ = 'x'\nS.__name__.upper()\n"
          "class S2(S):\n    pass\nS2.forward.__doc__ = 'x'\n"
          "from .mid import visit\ndef cb(c):\n    c.forward = None\nvisit(cb)\n"
          "from .mid import call\ndef w(*, x):\n    x.forward = None\ncall(w)\n")


def test_cross_module_honest_twin(tmp_path: Path, policy: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _cross_errors(tmp_path, policy, {"mid.py": OWN_MID}, HONEST, monkeypatch) == []



@pytest.mark.parametrize("name", ["globals-item-assignment", "property-returns-it", "partial",
                                  "type-of-a-module-instance",
                                  "inherited-engine-method-through-another-module-subclass"])
def test_error_names_the_file_line_and_engine_object(tmp_path: Path, policy: Policy, name: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # what the PR author reads: the file and line of the write, and the engine object it reaches
    extra, src = next((a[1], a[2]) for a in ATTACKS if a[0] == name)
    monkeypatch.setenv("FASTTRACK_ENGINE_TREE", str(write(tmp_path / "engine", ENGINE)))
    files = {"kernels/kimi_k3/__init__.py": "", "kernels/kimi_k3/layers.py": LAYERS,
             **{f"kernels/kimi_k3/{k}": v for k, v in extra.items()}, "kernels/kimi_k3/impl.py": src}
    facts = gather_facts(contribution(tmp_path, policy, files))
    found = [f for r in escape_rules.catalogue.rules for f in r.run(facts) if f.severity == "error"]
    line = next(i for i, text in enumerate(src.splitlines(), start=1) if "# <-" in text)
    assert any(f.path == "kernels/kimi_k3/impl.py" and f.line == line and
               "vllm.v1.attention.backend.AttentionImpl" in f.message for f in found), found


OPEN: list[tuple[str, dict[str, str], str, str]] = [
]


@pytest.mark.parametrize(("extra", "src"), [
    pytest.param(o[1], o[2], id=o[0], marks=pytest.mark.xfail(strict=True, reason=o[3])) for o in OPEN])
def test_open_cross_module_attack(tmp_path: Path, policy: Policy, extra: dict[str, str], src: str,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    want = [i for i, line in enumerate(src.splitlines(), start=1) if "# <-" in line]
    assert set(want) <= set(_cross_errors(tmp_path, policy, extra, src, monkeypatch))
