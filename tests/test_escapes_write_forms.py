"""Forms of a write to an engine object, an engine module or another own module's namespace that do not
look like `x.attr = v`, and attribute stores the resolver follows regardless of statement order and
receiver (an attribute that at some point held an engine object is that object: fail closed). Each attack
must be an error at the lines marked `# <-`; each honest twin (the same form on the contribution's own
objects) stays clean. Most forms were already caught when this file was written (kept as regressions);
the ones marked NEW were not."""

from __future__ import annotations

import textwrap

import pytest

from fasttrack.confinement.escapes import Escape, find_escapes
from tests.escape_marks import error_lines, marked_lines

MODEL_FILE = "vllm/models/kimi_k3/nvidia/model.py"
OWN = {"vllm.models.kimi_k3"}
HEAD = ("import operator\n"
        "import vllm.model_executor.layers.linear as m\n"
        "from vllm.model_executor.layers.linear import RowParallelLinear as L\n"
        "import vllm.models.kimi_k3.other as o\n"
        "from vllm.models.kimi_k3 import sib as o2\n"
        "class K:\n    pass\n")


def scan(src: str) -> list[Escape]:
    return find_escapes(HEAD + textwrap.dedent(src), MODEL_FILE, OWN)


def marked(src: str) -> list[int]:
    return marked_lines(HEAD + textwrap.dedent(src))



# -- gap 2: namespace, augmented, dunder and star forms on engine modules, classes and parameters ----------
NAMESPACE_WRITES: list[tuple[str, str]] = [
    ("vars-item", "vars(m)['x'] = 1  # <-\n"),
    ("dict-item", "m.__dict__['x'] = 1  # <-\n"),
    ("dict-update", "m.__dict__.update({'x': 1})  # <-\n"),
    ("vars-update", "vars(m).update(x=1)  # <-\n"),
    ("dict-setdefault", "m.__dict__.setdefault('x', 1)  # <-\n"),
    ("dict-setitem-dunder", "m.__dict__.__setitem__('x', 1)  # <-\n"),
    ("dict-pop", "m.__dict__.pop('x')  # <-\n"),
    ("del-dict-item", "del m.__dict__['x']  # <-\n"),
    ("del-vars-item", "del vars(m)['x']  # <-\n"),
    ("aliased-vars", "d = vars(m)\nd['x'] = 1  # <-\n"),
    ("aliased-dict-update", "d = m.__dict__\nd.update(x=1)  # <-\n"),
    ("operator-setitem", "operator.setitem(vars(m), 'x', 1)  # <-\n"),
    ("vars-of-a-class-in-a-function", "def f():\n    vars(L)['forward'] = None  # <-\n"),
    ("ior-module", "m.x |= {1}  # <-\n"),
    ("iadd-module", "m.x += 1  # <-\n"),
    ("ior-class", "L.x |= {1}  # <-\n"),
    ("iadd-class-in-a-function", "def f():\n    L.x += 1  # <-\n"),
    ("annotated-store", "m.x: int = 1  # <-\n"),
    ("list-target", "[m.x] = [1]  # <-\n"),
    ("for-target", "for m.x in [1]:  # <-\n    pass\n"),
    ("object-setattr", "object.__setattr__(m, 'x', 1)  # <-\n"),
    ("type-setattr", "type.__setattr__(L, 'x', 1)  # <-\n"),
    ("type-of-setattr", "type(L).__setattr__(L, 'x', 1)  # <-\n"),
    ("class-of-setattr", "L.__class__.__setattr__(L, 'x', 1)  # <-\n"),
    ("setattr-star-tuple", "args = (m, 'x', 1)\nsetattr(*args)  # <-\n"),
    ("setattr-star-list", "setattr(*[m, 'x', 1])  # <-\n"),
    ("setattr-star-parameter", "def f(*a):\n    setattr(*a)\nf(m, 'x', 1)  # <-\n"),
    ("del-module-attr", "del m.x  # <-\n"),
    ("del-class-attr-in-a-function", "def f():\n    del L.forward  # <-\n"),
    ("delattr", "delattr(L, 'forward')  # <-\n"),
    ("item-of-a-module-attr", "m.REG['k'] = 1  # <-\n"),
    ("del-item-of-a-module-attr", "del m.REG[0]  # <-\n"),
    ("engine-param-iadd", "def f(vllm_config):\n    vllm_config.x += 1  # <-\n"),
    ("engine-param-dict", "def f(vllm_config):\n    vllm_config.__dict__['x'] = 1  # <-\n"),
    ("engine-param-vars-update", "def f(vllm_config):\n    vars(vllm_config).update(x=1)  # <-\n"),
    ("engine-param-object-setattr",
     "def f(vllm_config):\n    object.__setattr__(vllm_config, 'x', 1)  # <-\n"),
    ("engine-param-del", "def f(vllm_config):\n    del vllm_config.x  # <-\n"),
]

NAMESPACE_HONEST: list[tuple[str, str]] = [
    ("own-class-namespace", "vars(K)\nK.__dict__.get('x')\nd = {}\nd['x'] = 1\nvars(o)['x'] = 1\n"),
    ("augmented-own", "K.n = 0\nK.n += 1\no.count += 1\nx = [1]\nx += [2]\n"),
    ("del-and-setattr-own", "c = K()\nc.x = 1\ndel c.x\ndelattr(K, 'y')\nobject.__setattr__(c, 'x', 1)\n"
                            "type.__setattr__(K, 'x', 1)\nvars(c).update(y=2)\n"
                            "c.__dict__.setdefault('z', 3)\n"),
    ("reading-engine-namespaces", "x = vars(m).get('x')\ny = L.__dict__['forward']\nz = m.__dict__.copy()\n"),
]


# -- gap 3: an engine object bound into another of the contribution's own modules (FT120) ----------------
OWN_MODULE_BINDS: list[tuple[str, str]] = [
    ("module-attr-engine-class", "o.x = L  # <-\n"),
    ("from-imported-module-attr", "o2.x = L  # <-\n"),
    ("module-attr-engine-function", "o.x = m.get_fn  # <-\n"),
    ("setattr-engine-function", "setattr(o, 'x', m.get_fn)  # <-\n"),
    ("augmented-with-an-engine-class", "o.x += [L]  # <-\n"),
    ("vars-item-engine-class", "vars(o)['x'] = L  # <-\n"),
    ("container-of-an-engine-class", "o.x = [L]  # <-\n"),
    ("in-a-function", "def f():\n    o.x = L  # <-\n"),
    ("own-class-wrapping-an-engine-object", "o.x = K(L)  # <-\n"),
    # NEW: a namespace update, and a call wrapping the engine's object
    ("dict-update-engine-class", "o.__dict__.update(x=L)  # <-\n"),
    ("vars-update-dict-literal", "vars(o).update({'x': L})  # <-\n"),
    ("dict-setdefault-engine-class", "o.__dict__.setdefault('x', L)  # <-\n"),
    ("wrapped-engine-function", "o.x = staticmethod(L.forward)  # <-\n"),
]

OWN_MODULE_HONEST: list[tuple[str, str]] = [
    # (an instance of an own class, `o.w = K()`, is not plain to this rule: what K() holds is not followed)
    ("constants-and-own-objects", "o.x = 1\no.y = 'a'\no.z = K\no.w = [1, 'a']\nsetattr(o, 'v', K)\n"),
    ("namespace-update-with-own-values", "o.__dict__.update(x=1, y=K)\nvars(o).setdefault('z', (1, 2))\n"
                                         "o2.__dict__.update({'a': 'b'})\n"),
    ("wrapping-own-functions", "def g():\n    pass\no.x = staticmethod(g)\no.y = dict(a=1)\n"),
]


# -- gap 4: attribute stores, whatever their order and receiver ---------------------------------------------
ATTRIBUTE_STORES: list[tuple[str, str]] = [
    ("rebound-to-own-afterwards", "class C:\n    pass\ndef f():\n    c = C()\n    c.t = L\n    c.t = C()\n"
                                  "    c.t.forward = None  # <-\n"),
    ("set-in-init-written-in-a-method", "class C:\n    def __init__(self):\n        self.t = L\n"
                                        "    def g(self):\n        self.t.forward = None  # <-\n"),
    ("set-in-a-later-method", "class C:\n    def __init__(self):\n        self.t = K()\n"
                              "    def h(self):\n        self.t.forward = None  # <-\n"
                              "    def g(self):\n        self.t = L\n"),
    ("set-on-one-branch", "def f(k):\n    c = K()\n    c.t = K()\n    if k:\n        c.t = L\n"
                          "    c.t.forward = None  # <-\n"),
    ("nested-attribute", "c = K()\nc.a = K()\nc.a.b = L\nc.a.b.forward = None  # <-\n"),
    ("augmented-through-self", "class C:\n    def __init__(self):\n        self.t = L\n"
                               "    def g(self):\n        self.t.x += 1  # <-\n"),
    # NEW: stores the resolver did not see, and receivers it did not look through
    ("stored-by-setattr", "c = K()\nsetattr(c, 't', L)\nc.t.forward = None  # <-\n"),
    ("stored-by-setattr-under-a-computed-name", "c = K()\nfor n in ('t',):\n    setattr(c, n, L)\n"
                                                "c.t.forward = None  # <-\n"),
    ("stored-by-object-setattr", "c = K()\nobject.__setattr__(c, 't', L)\nc.t.forward = None  # <-\n"),
    ("stored-in-the-instance-dict", "c = K()\nc.__dict__['t'] = L\nc.t.forward = None  # <-\n"),
    ("stored-by-vars-update", "c = K()\nvars(c).update(t=L)\nc.t.forward = None  # <-\n"),
    ("class-attribute-through-self", "class C:\n    t = L\n    def g(self):\n"
                                     "        self.t.forward = None  # <-\n"),
    ("class-attribute-through-the-class", "class C:\n    t = L\nC.t.forward = None  # <-\n"),
    ("class-attribute-deleted", "class C:\n    t = L\ndef f():\n    del C.t.forward  # <-\n"),
    ("stored-on-another-object-written-through-a-parameter",
     "class C:\n    def __init__(self):\n        self.t = K()\nc = C()\nc.t = L\n"
     "def h(c: C):\n    c.t.forward = None  # <-\n"),
]

ATTRIBUTE_HONEST: list[tuple[str, str]] = [
    ("only-own-objects", "class C:\n    pass\nclass D:\n    pass\ndef f():\n    c = C()\n    c.t = D()\n"
                         "    c.t.forward = None\n"),
    ("self-own-only", "class C:\n    def __init__(self):\n        self.t = K()\n    def g(self):\n"
                      "        self.t.forward = None\n"),
    ("engine-object-only-read", "class C:\n    def __init__(self):\n        self.t = L\n    def g(self):\n"
                                "        return self.t.forward(1)\n"),
    ("engine-instance-the-model-built", "class C:\n    def __init__(self):\n        self.t = L(1, 2)\n"
                                        "        self.t.extra = 1\n"),
    ("own-stores-by-every-form", "c = K()\nsetattr(c, 't', K())\nc.__dict__['u'] = K()\nvars(c).update(v=1)\n"
                                 "c.t.x = 1\nc.u.x = 1\nc.v = 2\n"),
    ("own-class-attribute", "class C:\n    t = K\n    u = 1\n    def g(self):\n        self.t.x = 1\n"
                            "C.t.y = 2\n"),
    ("a-three-argument-call-that-is-not-setattr", "def put(a, b, c):\n    pass\nc = K()\nput(c, 't', L)\n"
                                                  "c.t.forward = None\n"),
    ("parameter-whose-attribute-held-only-own-objects", "def h(c):\n    c.t.forward = None\n"
                                                        "x = K()\nx.t = K()\nh(x)\n"),
]


@pytest.mark.parametrize("source", [c[1] for c in NAMESPACE_WRITES + OWN_MODULE_BINDS + ATTRIBUTE_STORES],
                         ids=[c[0] for c in NAMESPACE_WRITES + OWN_MODULE_BINDS + ATTRIBUTE_STORES])
def test_write_form_is_an_error(source: str) -> None:
    assert error_lines(scan(source)) == marked(source)


@pytest.mark.parametrize("source", [c[1] for c in NAMESPACE_HONEST + OWN_MODULE_HONEST + ATTRIBUTE_HONEST],
                         ids=[c[0] for c in NAMESPACE_HONEST + OWN_MODULE_HONEST + ATTRIBUTE_HONEST])
def test_honest_twin_stays_clean(source: str) -> None:
    assert error_lines(scan(source)) == []
