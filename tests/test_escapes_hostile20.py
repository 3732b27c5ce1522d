"""Hostile review 20 of the escape scan: ways shipping model code reaches an engine object, an engine
module or interpreter-wide state that the existing hostile suites (test_escapes_hostile_flow.py,
test_escapes_write_forms.py, test_escapes_own_bases.py) do not write. Each attack must be an error at the
lines marked `# <-`; each honest twin (the same form on the contribution's own objects) stays clean.
Attacks marked NEW got through (no error) when this file was written and were fixed with it; attacks the
scan does not catch yet are strict xfails in OPEN, with the reason."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fasttrack.confinement.escapes import Escape, find_escapes
from fasttrack.policy import Policy, load_policy
from tests.escape_marks import error_lines, marked_lines
from tests.test_escapes import POLICY
from tests.test_escapes_hostile_flow import ENGINE
from tests.test_escapes_own_bases import contribution, ft_errors, write

MODEL_FILE = "vllm/models/kimi_k3/nvidia/model.py"
OWN = {"vllm.models.kimi_k3"}
HEAD = ("import functools\nimport importlib\nimport operator\nimport sys\nimport typing\n"
        "import vllm.model_executor.layers.linear as m\n"
        "from vllm.model_executor.layers.linear import RowParallelLinear as L\n"
        "class K:\n    pass\n")


def scan(src: str) -> list[Escape]:
    return find_escapes(HEAD + textwrap.dedent(src), MODEL_FILE, OWN, own_op_namespaces={"kimi_k3"})


def marked(src: str) -> list[int]:
    return marked_lines(HEAD + textwrap.dedent(src))



ATTACKS: list[tuple[str, str]] = [
    # -- laundering an engine object through a value the resolver must follow --------------------------
    ("generator-yield", "def g():\n    yield L\nfor x in g():\n    x.forward = None  # <-\n"),
    ("generator-yield-from", "def g():\n    yield from (L,)\nfor x in g():\n    x.forward = None  # <-\n"),
    ("next-of-a-generator", "def g():\n    yield L\nnext(g()).forward = None  # <-\n"),
    ("await-of-an-own-coroutine",  # NEW: `await c` is what the coroutine returns
     "async def g():\n    return L\nasync def f():\n    x = await g()\n    x.forward = None  # <-\n"),
    ("nested-function-returns-the-engine-module",  # NEW: f() is g, g() is m
     "def f():\n    def g():\n        return m\n    return g\nf()().X = 1  # <-\n"),
    ("getattr-default-is-the-engine-class",  # NEW: the third argument is what getattr returns
     "getattr(K, 'nope', L).forward = None  # <-\n"),
    ("object-getattribute-of-the-engine-module",  # NEW
     "object.__getattribute__(m, 'RowParallelLinear').forward = None  # <-\n"),
    ("moduletype-getattribute",  # NEW
     "import types\ntypes.ModuleType.__getattribute__(m, 'RowParallelLinear').forward = None  # <-\n"),
    ("bound-getattribute-of-the-engine-module",  # NEW
     "m.__getattribute__('RowParallelLinear').forward = None  # <-\n"),
    ("typing-cast",  # NEW: cast returns its second argument
     "typing.cast(typing.Any, L).forward = None  # <-\n"),
    ("weakref-proxy",  # NEW: a proxy's attributes are the object's
     "import weakref\nweakref.proxy(L).forward = None  # <-\n"),
    ("weakref-ref-called",  # NEW: ref(x)() is x
     "import weakref\nweakref.ref(L)().forward = None  # <-\n"),
    ("operator-getitem",  # NEW
     "operator.getitem([L], 0).forward = None  # <-\n"),
    ("attrgetter-of-the-engine-class", "operator.attrgetter('forward')(L).__doc__ = 'x'  # <-\n"),
    ("walrus-in-a-comprehension-leaks", "[(x := L) for _ in (1,)]\nx.forward = None  # <-\n"),
    ("match-capture", "match L:\n    case x:\n        x.forward = None  # <-\n"),
    ("match-sequence-capture", "match (L,):\n    case (x,):\n        x.forward = None  # <-\n"),
    ("global-rebound-in-a-function",
     "x = None\ndef f():\n    global x\n    x = L\ndef h():\n    x.forward = None  # <-\n"),
    ("min-with-a-key", "max([L], key=id).forward = None  # <-\n"),
    ("dict-values", "d = {'a': L}\nfor v in d.values():\n    v.forward = None  # <-\n"),
    # NEW (esc20b; was a strict xfail of review 20): a yield expression's value is what `.send()` passes
    ("generator-send",
     "def g():\n    x = yield\n    x.forward = None  # <-\ngen = g()\nnext(gen)\ngen.send(L)\n"),
    ("generator-send-with-a-yielded-value",
     "def g():\n    x = yield 1\n    x.forward = None  # <-\ngen = g()\nnext(gen)\ngen.send(m.X)\n"),
    ("generator-send-from-a-method", "class C:\n    def __init__(self):\n        self.gen = self.g()\n"
     "    def g(self):\n        while True:\n            x = (yield)\n"
     "            setattr(x, 'forward', None)  # <-\n"
     "    def f(self):\n        self.gen.send(L)\n"),
    ("async-generator-asend", "async def g():\n    x = yield\n    x.forward = None  # <-\n"
     "async def f():\n    a = g()\n    await a.asend(None)\n    await a.asend(L)\n"),
    ("generator-send-in-a-computed-call",  # NEW (esc20b): getattr with a computed name may be send
     "def g():\n    x = yield\n    x.forward = None  # <-\ngen = g()\nnext(gen)\n"
     "getattr(gen, 'se' + 'nd')(L)\n"),
    ("generator-throw-carries-the-engine-class",
     "def g():\n    try:\n        yield\n    except ValueError as e:\n"
     "        e.args[0].forward = None  # <-\n"
     "gen = g()\nnext(gen)\ngen.throw(ValueError(L))\n"),
    ("generator-send-of-a-container", "def g():\n    xs = yield\n    xs[0].forward = None  # <-\n"
     "gen = g()\nnext(gen)\ngen.send([L])\n"),
    # NEW (esc20c): a callback stored in a container first and called later (an own function put in a
    # container filled after it was made is held by it)
    ("callback-stored-in-a-list-then-called",
     "def writer(c):\n    c.forward = None\ncbs = []\ncbs.append(writer)\nfor c in cbs:\n    c(L)  # <-\n"),
    ("callback-stored-in-a-dict-then-called",
     "def writer(c):\n    c.forward = None\nd = {}\nd['a'] = writer\nd['a'](L)  # <-\n"),
    ("callback-stored-on-self-then-called", "def writer(c):\n    c.forward = None\nclass R:\n"
     "    def __init__(self):\n        self.cbs = []\n    def add(self, f):\n        self.cbs.append(f)\n"
     "    def run(self):\n        for c in self.cbs:\n            c(L)  # <-\n"
     "r = R()\nr.cbs.append(writer)\n"),
    # NEW (esc20c): a callback's keyword-only parameter filled by keyword, or through `**kw`
    ("callback-keyword-only-parameter",
     "def w(*, x):\n    x.forward = None\ndef call(f):\n    f(x=L)\ncall(w)  # <-\n"),
    ("callback-keyword-only-parameter-through-double-star",
     "def w(*, x):\n    x.forward = None\ndef call(f):\n    f(**{'x': L})\ncall(w)  # <-\n"),
    ("callback-positional-parameter-by-keyword",
     "def w(c):\n    c.forward = None\ndef call(f):\n    f(c=m.X)\ncall(f=w)  # <-\n"),
    # NEW (esc20c; was open): a bound `send` stored first, under a name or on an attribute
    ("generator-send-through-a-stored-bound-method",
     "def g():\n    x = yield\n    x.forward = None  # <-\ngen = g()\nnext(gen)\ns = gen.send\ns(L)\n"),
    ("generator-send-through-a-bound-method-on-self",
     "def g():\n    x = yield\n    x.forward = None  # <-\nclass C:\n    def __init__(self):\n"
     "        gen = g()\n        next(gen)\n        self.push = gen.send\n    def f(self):\n"
     "        self.push(m.X)\n"),
    ("nested-class-attribute",  # NEW (esc20b): `H.Inner` is no class of `self.classes` by that name
     "class H:\n    class Inner:\n        t = L\nH.Inner.t.forward = None  # <-\n"),
    # -- this module's own namespace as a way back to the engine objects it imported --------------------
    ("globals-item-is-the-engine-module",  # NEW: globals()['m'] is m
     "globals()['m'].X = 1  # <-\n"),
    ("globals-get-is-the-engine-module",  # NEW
     "globals().get('m').X = 1  # <-\n"),
    ("sys-modules-of-this-module",  # NEW: sys.modules[__name__].L is L
     "me = sys.modules[__name__]\nme.L.forward = None  # <-\n"),
    ("getattr-of-this-module",  # NEW
     "me = sys.modules[__name__]\ngetattr(me, 'L').forward = None  # <-\n"),
    ("import-of-this-module",  # NEW: importing the file itself gives its namespace
     "import vllm.models.kimi_k3.nvidia.model as me\nme.L.forward = None  # <-\n"),
    # -- super() in a subclass of an engine class reaches the engine class -------------------------------
    ("super-method-function-defaults",  # NEW
     "class C(L):\n    def f(self):\n        super().forward.__func__.__defaults__ = ()  # <-\n"),
    ("super-two-argument-form",  # NEW
     "class C(L):\n    def f(self):\n        super(C, self).forward.__func__.__defaults__ = ()  # <-\n"),
    # -- interpreter-wide import machinery that is not sys.path ----------------------------------------
    ("sys-path-hooks",  # NEW: was a warning, read as sys.path
     "sys.path_hooks.insert(0, object)  # <-\n"),
    ("sys-path-importer-cache",  # NEW: was a warning, read as sys.path
     "sys.path_importer_cache.clear()  # <-\n"),
    ("importlib-sys-modules", "importlib.sys.modules['vllm.config'] = None  # <-\n"),
    ("sys-modules-via-os", "import os\nos.sys.modules['vllm.config'] = None  # <-\n"),
    ("sys-modules-via-sys-dict", "sys.__dict__['modules']['vllm.config'] = None  # <-\n"),
    ("sys-via-a-computed-import", "s = importlib.import_module('s' + 'ys')\ns.modules['x'] = None  # <-\n"),
    ("import-module-constant-folded", "mm = importlib.import_module('vllm.' + 'config')\nmm.X = 1  # <-\n"),
    ("dunder-import-fromlist", "mm = __import__('vllm.config', fromlist=['x'])\nmm.X = 1  # <-\n"),
    ("builtins-through-dunder-import", "b = __import__('builtins')\nb.len = None  # <-\n"),
    # -- deferred or indirect writers ------------------------------------------------------------------
    ("atexit-setattr", "import atexit\natexit.register(setattr, L, 'forward', None)  # <-\n"),
    ("threading-timer-setattr",
     "import threading\nthreading.Timer(1.0, setattr, (L, 'forward', None)).start()  # <-\n"),
    ("weakref-finalize-setattr", "import weakref\nweakref.finalize(K, setattr, L, 'forward', None)  # <-\n"),
    ("dunder-del-writes-the-engine", "class C:\n    def __del__(self):\n        L.forward = None  # <-\n"),
    ("itertools-starmap-setattr",
     "import itertools\nlist(itertools.starmap(setattr, [(L, 'forward', None)]))  # <-\n"),
    ("map-setattr", "list(map(setattr, [L], ['forward'], [None]))  # <-\n"),
    ("methodcaller-setattr", "operator.methodcaller('__setattr__', 'forward', None)(L)  # <-\n"),
    ("mock-patch-object-started",
     "from unittest import mock\nmock.patch.object(L, 'forward', None).start()  # <-\n"),
    ("exitstack-enters-a-patch", "import contextlib\nfrom unittest import mock\n"
     "contextlib.ExitStack().enter_context(mock.patch.object(L, 'forward', None))  # <-\n"),
    # -- interpreter and torch switches --------------------------------------------------------------
    ("sys-setprofile", "sys.setprofile(lambda *a: None)  # <-\n"),
    ("threading-settrace", "import threading\nthreading.settrace(lambda *a: None)  # <-\n"),
    ("sys-excepthook", "sys.excepthook = lambda *a: None  # <-\n"),
    ("threading-excepthook", "import threading\nthreading.excepthook = lambda a: None  # <-\n"),
    ("sys-addaudithook", "sys.addaudithook(lambda *a: None)  # <-\n"),
    ("builtins-dict-item", "__builtins__['print'] = None  # <-\n"),
    ("torch-backends-tf32-from-import",
     "from torch.backends import cuda\ncuda.matmul.allow_fp16_reduced_precision_reduction = False  # <-\n"),
    ("torch-backends-setattr",
     "import torch\nsetattr(torch.backends.cuda.matmul, 'allow_tf32', True)  # <-\n"),
    ("torch-set-default-dtype", "import torch\ntorch.set_default_dtype(torch.float16)  # <-\n"),
    ("torch-dynamo-config", "import torch\ntorch._dynamo.config.suppress_errors = True  # <-\n"),
    ("torch-library-define-in-another-namespace",
     "import torch\ntorch.library.define('_C::evil', '(Tensor x) -> Tensor')  # <-\n"),
    ("torch-library-namespace-constant-folded",
     "import torch\nns = '_' + 'C'\nlib = torch.library.Library(ns, 'IMPL')  # <-\n"),
    ("global-module-forward-hook",
     "from torch.nn.modules.module import register_module_forward_pre_hook as r\nr(lambda *a: None)  # <-\n"),
    ("copyreg-dispatch-table", "import copyreg\ncopyreg.dispatch_table[L] = None  # <-\n"),
    # -- round 2: values the resolver lost (NEW unless noted) ------------------------------------------
    ("exception-carries-the-engine-class",
     "try:\n    raise ValueError(L)\nexcept ValueError as e:\n    e.args[0].forward = None  # <-\n"),
    ("exception-raised-by-a-helper", "def g():\n    raise ValueError(L)\ntry:\n    g()\n"
     "except ValueError as e:\n    e.args[0].forward = None  # <-\n"),
    ("dict-fromkeys", "d = dict.fromkeys(['a'], L)\nd['a'].forward = None  # <-\n"),
    ("dict-of-keywords", "dict(a=L)['a'].forward = None  # <-\n"),
    ("simple-namespace", "import types\nns = types.SimpleNamespace(t=L)\nns.t.forward = None  # <-\n"),
    ("chainmap", "import collections\ncollections.ChainMap({'a': L})['a'].forward = None  # <-\n"),
    ("ordereddict-of-keywords",
     "import collections\ncollections.OrderedDict(a=L)['a'].forward = None  # <-\n"),
    ("deque", "import collections\ncollections.deque([L])[0].forward = None  # <-\n"),
    ("functools-reduce-returns-an-element",
     "functools.reduce(lambda a, b: b, [1, L]).forward = None  # <-\n"),
    ("list-filled-after-it-was-made", "xs = []\nxs.append(L)\nxs[0].forward = None  # <-\n"),
    ("list-filled-in-another-function",
     "xs = []\ndef f():\n    xs.append(L)\ndef h():\n    for x in xs:\n        x.forward = None  # <-\n"),
    ("attribute-list-filled-in-init", "class C:\n    def __init__(self):\n        self.xs = []\n"
     "        self.xs.append(m)\n    def f(self):\n        self.xs[0].X = 1  # <-\n"),
    ("dict-item-stored-then-read", "d = {}\nd['a'] = L\nd['a'].forward = None  # <-\n"),
    ("context-variable", "import contextvars\nv = contextvars.ContextVar('v')\nv.set(L)\n"
     "v.get().forward = None  # <-\n"),
    ("queue", "import queue\nq = queue.Queue()\nq.put(L)\nq.get().forward = None  # <-\n"),
    ("property-returns-the-engine-class",
     "class C:\n    @property\n    def t(self):\n        return L\nC().t.forward = None  # <-\n"),
    ("instance-method-returns-the-engine-class",
     "class C:\n    def t(self):\n        return L\nC().t().forward = None  # <-\n"),
    ("self-method-returns-the-engine-class", "class C:\n    def t(self):\n        return L\n"
     "    def f(self):\n        self.t().forward = None  # <-\n"),
    ("exec-of-a-constant-sees-the-file-imports", "exec('m.X = 1')  # <-\n"),
    ("eval-of-a-constant-sees-the-file-imports", "eval('setattr(L, \"forward\", None)')  # <-\n"),
    ("filter-callback-writes-its-element",
     "list(filter(lambda c: setattr(c, 'forward', None), [L]))  # <-\n"),
    ("sorted-key-writes-its-element", "sorted([L], key=lambda c: setattr(c, 'forward', None))  # <-\n"),
    ("map-of-an-own-function", "def w(c):\n    c.forward = None\nlist(map(w, [L]))  # <-\n"),
    ("pep562-module-getattr",  # NEW: an attribute this module does not bind is what its __getattr__ returns
     "def __getattr__(n):\n    return L\nimport vllm.models.kimi_k3.nvidia.model as me\n"
     "me.anything.forward = None  # <-\n"),
    ("class-getitem-gets-the-subscript",  # NEW: `C[x]` runs the own `__class_getitem__(x)`
     "class C:\n    def __class_getitem__(cls, item):\n        item.forward = None\n"
     "        return cls\nC[L]  # <-\n"),
    # already caught (at the call handing the engine object on): kept as regressions
    ("star-unpacked-into-a-helper", "def g(a, b):\n    b.forward = None\ng(*[1, L])  # <-\n"),
    ("keyword-unpacked-into-a-helper", "def g(a=None, b=None):\n    b.forward = None\ng(**{'b': L})  # <-\n"),
    ("metaclass-new-writes-the-bases", "class Meta(type):\n    def __new__(mcs, name, bases, ns):\n"
     "        for b in bases:\n            b.forward = None\n"
     "        return super().__new__(mcs, name, bases, ns)\n"
     "class C(L, metaclass=Meta):  # <-\n    pass\n"),
    ("set-name-reaches-the-owner-base", "class D:\n    def __set_name__(self, owner, name):\n"
     "        owner.__base__.forward = None  # <-\nclass C(L):\n    d = D()\n"),
    ("init-subclass-walks-the-mro", "class B:\n    def __init_subclass__(cls, **kw):\n"
     "        for b in cls.__mro__:\n            b.x = 1  # <-\nclass C(B, L):\n    pass\n"),
    ("abc-register-on-an-engine-class",
     "from vllm.v1.attention.backend import AttentionImpl\nAttentionImpl.register(K)  # <-\n"),
]

HONEST: list[tuple[str, str]] = [
    ("await-of-an-own-coroutine",
     "async def g():\n    return K()\nasync def f():\n    x = await g()\n    x.t = 1\n"),
    ("nested-function-returns-a-local",
     "def f():\n    def g():\n        return K()\n    return g\nf()().X = 1\nf().tag = 1\n"),
    ("getattr-default-is-own", "getattr(K, 'nope', K).t = 1\ngetattr(K(), 'nope', None)\n"),
    ("getattribute-of-own-objects",
     "c = K()\nobject.__getattribute__(c, 't').x = 1\nc.__getattribute__('t').y = 1\n"),
    ("cast-proxy-getitem-of-own", "import weakref\nc = K()\ntyping.cast(K, c).t = 1\n"
     "weakref.proxy(c).t = 1\nweakref.ref(c)().t = 1\noperator.getitem([c], 0).t = 1\n"),
    ("own-names-through-this-module", "globals()['K'].t = 1\nglobals().get('K').t = 1\n"
     "me = sys.modules[__name__]\nme.K.t = 1\ngetattr(me, 'K').t = 1\n"
     "import vllm.models.kimi_k3.nvidia.model as me2\nme2.K.t = 1\n"),
    ("super-calls-in-an-engine-subclass", "class C(L):\n    def __init__(self):\n        super().__init__()\n"
     "        self.t = super().forward(1)\n        self.u = 1\n"),
    ("super-methods-act-on-self",
     "class C(L):\n    def f(self, t):\n        super().register_buffer('b', t)\n"
     "        super().register_forward_hook(self.f)\n        super().__setattr__('u', 1)\n"
     "        super().weight_loader(t, t)\n"),
    ("containers-filled-with-own-objects", "xs = []\nxs.append(K())\nxs[0].t = 1\nd = {}\nd['a'] = K()\n"
     "d['a'].t = 1\nimport queue\nq = queue.Queue()\nq.put(K())\nq.get().t = 1\n"),
    # a results object of unknown type given a value read from torch by `.add()`: not a container made
    # here, so what a helper writes onto it is not a write to torch (kernels/kimi_k3/benchmarks/
    # measure_fused.py); nor is a parameter put into a container one (`self.data[k] = item` then
    # `self.data[k].append(x)` does not write through `item`)
    ("add-onto-an-object-that-is-not-a-container",
     "import torch\ndef run(r):\n    r.data['x'] = []\ndef main(r):\n    r.add('torch', torch.__version__)\n"
     "    r.set('k', m.X)\n    run(r)\n"),
    ("parameter-put-into-an-own-container",
     "import torch\nclass R:\n    def __init__(self):\n        self.data = {'a': []}\n"
     "    def add(self, key, item):\n        if isinstance(self.data.get(key), list):\n"
     "            self.data[key].append(item)\n        else:\n            self.data[key] = item\n"
     "R().add('torch', torch.__version__)\n"),
    ("exception-carrying-own-objects", "try:\n    raise ValueError(K())\nexcept ValueError as e:\n"
     "    e.args[0].t = 1\n    e.note = 1\n"),
    ("namespace-and-dicts-of-own-objects", "import types\ntypes.SimpleNamespace(t=K()).t.x = 1\n"
     "dict(a=K())['a'].t = 1\ndict.fromkeys(['a'], K())['a'].t = 1\n"),
    ("methods-returning-own-objects", "class C:\n    @property\n    def p(self):\n        return K()\n"
     "    def t(self):\n        return K()\n    def f(self):\n        self.t().x = 1\n"
     "C().p.x = 1\nC().t().x = 1\n"),
    ("exec-and-eval-of-harmless-constants", "eval('len([1])')\nexec('print(sorted([2, 1]))')\n"),
    ("pep562-module-getattr-of-own-objects", "def __getattr__(n):\n    return K\n"
     "me = sys.modules[__name__]\nme.anything.t = 1\nme.K.t = 1\n"),
    ("class-getitem-of-own-objects", "class C:\n    def __class_getitem__(cls, item):\n        item.t = 1\n"
     "        return cls\nC[K]\nC[K()]\nx = [L]\nx[0]\n"),
    ("callbacks-over-own-objects", "list(filter(lambda c: setattr(c, 't', 1), [K()]))\n"
     "sorted([K()], key=lambda c: setattr(c, 't', 1))\nlist(map(lambda c: setattr(c, 't', 1), [K()]))\n"),
    ("super-of-an-own-base", "class B:\n    t = K\nclass C(B):\n    def f(self):\n        super().t.x = 1\n"),
    ("generator-send-of-own-objects", "def g():\n    x = yield\n    x.t = 1\ngen = g()\nnext(gen)\n"
     "gen.send(K())\ngen.send(K)\nclass Pipe:\n    def send(self, b):\n        pass\nPipe().send(b'x')\n"),
    ("stored-callbacks-given-own-objects-or-only-reading",  # NEW (esc20c)
     "def writer(c):\n    c.forward = None\ndef reader(c):\n    print(c.forward)\ncbs = []\n"
     "cbs.append(writer)\nfor c in cbs:\n    c(K)\n    c(K())\nrs = []\nrs.append(reader)\n"
     "for r in rs:\n    r(L)\nd = {}\nd['a'] = reader\nd['a'](L)\nd['a'].__doc__ = 'x'\n"),
    ("callback-keyword-only-parameter-given-own-objects",  # NEW (esc20c)
     "def w(*, x):\n    x.forward = None\ndef call(f):\n    f(x=K)\n    f(x=K())\ncall(w)\n"
     "def r(*, x):\n    print(x.forward)\ndef call2(f):\n    f(x=L)\ncall2(r)\n"),
    ("engine-class-sent-into-a-generator-of-this-file-that-only-reads-it",  # NEW (esc20c)
     "def g():\n    x = yield\n    print(x.forward)\ngen = g()\nnext(gen)\ngen.send(L)\n"),
    ("generator-send-of-own-objects-through-a-stored-bound-method",  # NEW (esc20c)
     "def g():\n    x = yield\n    x.t = 1\ngen = g()\nnext(gen)\ns = gen.send\ns(K())\ns(K)\nprint(L)\n"
     "w = L\nw(1)\n"),
    ("nested-class-attribute-of-own",
     "class H:\n    class Inner:\n        t = K\nH.Inner.t.x = 1\nH.Inner.u = 1\n"),
]


def test_sys_path_itself_stays_a_warning() -> None:
    # honest twin of sys-path-hooks: sys.path is a warning (a model may add its own kernels' directory)
    found = scan("sys.path.insert(0, '/opt/k3')\n")
    assert error_lines(found) == []
    assert any(e.severity == "warning" and "sys.path" in e.message for e in found)


@pytest.mark.parametrize("src", [a[1] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_attack_is_an_error(src: str) -> None:
    want = marked(src)
    assert want, "an attack marks its lines"
    assert set(want) <= set(error_lines(scan(src)))


@pytest.mark.parametrize("src", [h[1] for h in HONEST], ids=[h[0] for h in HONEST])
def test_honest_twin_is_clean(src: str) -> None:
    assert error_lines(scan(src)) == []


OPEN: list[tuple[str, str, str]] = [
]

@pytest.mark.parametrize("src", [
    pytest.param(o[1], id=o[0], marks=pytest.mark.xfail(strict=True, reason=o[2])) for o in OPEN])
def test_open_attack(src: str) -> None:
    assert set(marked(src)) <= set(error_lines(scan(src)))


# -- contribution mode: an engine class another own module re-exports, laundered on the way -------------
# (`_reexport_escapes` judges a write to a name another own module binds; these hand that name on first)
LAYERS = "from vllm.v1.attention.backend import AttentionImpl\n"
HOLDER = LAYERS + "def get():\n    return AttentionImpl\nclass Holder:\n    t = AttentionImpl\n"
REEXPORTS: list[tuple[str, str]] = [
    ("attribute-through-the-module", "from . import layers\nlayers.AttentionImpl.forward = None\n"),
    ("getattr-of-the-module", "from . import layers\ngetattr(layers, 'AttentionImpl').forward = None\n"),
    ("class-bases", "from .layers import AttentionImpl\nclass C(AttentionImpl):\n    pass\n"
     "C.__bases__[0].forward = None\n"),
    ("importlib-of-the-module", "import importlib\nlay = importlib.import_module("
     "'vllm.models.kimi_k3.nvidia.specialized_decode.hopper.layers')\nlay.AttentionImpl.forward = None\n"),
    # NEW: handed to an own helper that writes through its parameter
    ("handed-to-a-helper", "from .layers import AttentionImpl\ndef put(c):\n    c.forward = None\n"
     "def f():\n    put(AttentionImpl)\n"),
    # NEW: super() of a class deriving from the re-exported engine class
    ("super-of-a-re-exported-base", "from .layers import AttentionImpl\nclass C(AttentionImpl):\n"
     "    def g(self):\n        super().forward.__func__.__defaults__ = ()\n"),
    # NEW (were strict xfails of review 20; fixed by the cross-module summary, cross_module.py): a name
    # another own module binds is what that module binds it to, wherever the resolver meets it
    ("in-a-container", "from .layers import AttentionImpl\nx = [AttentionImpl]\nx[0].forward = None\n"),
    ("returned-by-another-own-module", "from .holder import get\nget().forward = None\n"),
    ("class-attribute-of-another-own-module", "from .holder import Holder\nHolder.t.forward = None\n"),
]
REEXPORT_HONEST = ("from .layers import AttentionImpl\nfrom .holder import Holder\nimport torch\n"
                   "class C(AttentionImpl):\n    def __init__(self):\n        super().__init__()\n"
                   "        self.t = super().forward(1)\n"
                   "        super().register_buffer('b', torch.zeros(1))\n"
                   "def put(c):\n    c.t = 1\nput(C())\nput(Holder())\n")
@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(POLICY)


def _reexport_errors(tmp_path: Path, policy: Policy, src: str, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    monkeypatch.setenv("FASTTRACK_ENGINE_TREE", str(write(tmp_path / "engine", ENGINE)))
    files = {"kernels/kimi_k3/__init__.py": "", "kernels/kimi_k3/layers.py": LAYERS,
             "kernels/kimi_k3/holder.py": HOLDER, "kernels/kimi_k3/impl.py": src}
    ctx = contribution(tmp_path, policy, files)
    return [line or 0 for code, path, line in ft_errors(ctx) if path == "kernels/kimi_k3/impl.py"]


@pytest.mark.parametrize("src", [r[1] for r in REEXPORTS], ids=[r[0] for r in REEXPORTS])
def test_re_exported_engine_class_is_an_error(tmp_path: Path, policy: Policy, src: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    assert _reexport_errors(tmp_path, policy, src, monkeypatch)


def test_re_exported_engine_class_honest_twin(tmp_path: Path, policy: Policy,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    holder = "class Holder:\n    t = 1\n"
    monkeypatch.setenv("FASTTRACK_ENGINE_TREE", str(write(tmp_path / "engine", ENGINE)))
    files = {"kernels/kimi_k3/__init__.py": "", "kernels/kimi_k3/layers.py": LAYERS,
             "kernels/kimi_k3/holder.py": holder, "kernels/kimi_k3/impl.py": REEXPORT_HONEST}
    assert ft_errors(contribution(tmp_path, policy, files)) == []


# -- the cross-module summary (cross_module.py): variants of the three families above, each an error at
# the lines marked `# <-` of impl.py; the other modules are given beside it (LAYERS re-exports the engine)
THIRD = "from .layers import AttentionImpl as E\n"
CROSS: list[tuple[str, dict[str, str], str]] = [
    # a container another own module holds the engine class in, or one this file puts the re-export in
    ("dict-in-another-module", {"holder.py": LAYERS + "D = {'a': AttentionImpl}\n"},
     "from .holder import D\nD['a'].forward = None  # <-\n"),
    ("tuple-of-a-two-hop-re-export", {"third.py": THIRD, "holder.py": "from .third import E\n"},
     "from .holder import E\nx = (E,)\nx[0].forward = None  # <-\n"),
    ("loop-over-re-exports", {}, "from .layers import AttentionImpl as A\nfor c in [A]:\n"
     "    c.forward = None  # <-\n"),
    ("dict-of-keywords-of-a-re-export", {}, "from .layers import AttentionImpl as A\n"
     "dict(a=A)['a'].forward = None  # <-\n"),
    ("list-in-another-module-appended", {"holder.py": LAYERS + "XS = []\nXS.append(AttentionImpl)\n"},
     "from .holder import XS\nXS[0].forward = None  # <-\n"),
    # what a function of another own module returns
    ("returns-a-module-global", {"holder.py": LAYERS + "_E = AttentionImpl\ndef get():\n    return _E\n"},
     "from .holder import get\nget().forward = None  # <-\n"),
    ("identity-helper-hands-back-the-argument", {"holder.py": "def ident(x):\n    return x\n"},
     "from vllm.v1.attention.backend import AttentionImpl\nfrom .holder import ident\n"
     "ident(AttentionImpl).forward = None  # <-\n"),
    ("staticmethod-of-another-module", {"holder.py": LAYERS + "class H:\n    @staticmethod\n"
                                        "    def make():\n        return AttentionImpl\n"},
     "from .holder import H\nH.make().forward = None  # <-\n"),
    ("two-hop-function", {"third.py": LAYERS + "def get():\n    return AttentionImpl\n",
                          "holder.py": "from .third import get as g3\ndef get():\n    return g3()\n"},
     "from .holder import get\nget().forward = None  # <-\n"),
    ("getattr-of-the-module-then-called", {},
     "from . import holder\ngetattr(holder, 'get')().forward = None  # <-\n"),
    ("returned-then-stored", {}, "from .holder import get\ndef f():\n    c = get()\n"
     "    setattr(c, 'forward', None)  # <-\n"),
    # a class attribute of another own module's class
    ("getattr-of-the-class-attribute", {}, "from .holder import Holder\n"
     "getattr(Holder, 't').forward = None  # <-\n"),
    ("through-the-module", {}, "from . import holder\nholder.Holder.t.forward = None  # <-\n"),
    ("nested-class", {"holder.py": LAYERS + "class Holder:\n    class Inner:\n        t = AttentionImpl\n"},
     "from .holder import Holder\nHolder.Inner.t.forward = None  # <-\n"),
    # NEW (esc20b): an instance of another module's class, an own subclass of it, an attribute its
    # __init__ stores on self
    ("class-attribute-through-an-instance", {},
     "from .holder import Holder\nHolder().t.forward = None  # <-\n"),
    ("class-attribute-of-a-subclass", {}, "from .holder import Holder\nclass S(Holder):\n    pass\n"
     "S.t.forward = None  # <-\n"),
    ("attribute-set-in-another-module-init", {"holder.py": LAYERS + "class Holder:\n    def __init__(self):\n"
                                              "        self.impl = AttentionImpl\n"},
     "from .holder import Holder\nh = Holder()\nh.impl.forward = None  # <-\n"),
    ("getattr-of-the-module-two-hop", {"third.py": THIRD, "holder.py": "from . import third\n"},
     "from .holder import third\ngetattr(third, 'E').forward = None  # <-\n"),
    # NEW (esc20c; was open): a generator of another own module sent an engine object (fail closed at the
    # send: its yields are not linked to this file's sends)
    ("generator-of-another-module-sent-the-engine-class",
     {"holder.py": "def g():\n    x = yield\n    x.forward = None\n"},
     "from .layers import AttentionImpl\nfrom .holder import g\ngen = g()\nnext(gen)\n"
     "gen.send(AttentionImpl)  # <-\n"),
    ("async-generator-of-another-module-asent-in-a-list",
     {"holder.py": "async def g():\n    x = yield\n    x[0].forward = None\n"},
     "from .layers import AttentionImpl\nfrom . import holder\nasync def f():\n    a = holder.g()\n"
     "    await a.asend(None)\n    await a.asend([AttentionImpl])  # <-\n"),
    ("import-cycle", {"a.py": "from .b import E\n", "b.py": "from .a import E\n"},
     "from .a import E\nE.forward = None  # <-\n"),
    ("unparseable-module", {"holder.py": "def get(:\n"},
     "from .holder import get\nget().forward = None  # <-\n"),
]
CROSS_OPEN: list[tuple[str, dict[str, str], str, str]] = [
]
# honest twins: other own modules returning, holding and re-exporting the contribution's own objects
OWN_THINGS = ("import torch\nclass Own:\n    pass\nclass M(torch.nn.Module):\n    pass\n"
              "def fn():\n    pass\ndef get():\n    return Own\ndef get_m():\n    return M\n"
              "def get_fn():\n    return fn\ndef ident(x):\n    return x\nclass Holder:\n    t = Own\n"
              "    m = M\n    class Inner:\n        t = Own\nD = {'a': Own}\nXS = [M]\n"
              "def gen_of():\n    x = yield\n    x.y = 1\n")
CROSS_HONEST = ("from .holder import get, get_m, get_fn, ident, Holder, D, XS, Own, M\nfrom . import holder\n"
                "get().x = 1\nget_m().forward = None\nget_fn().__doc__ = 'x'\nident(Own).x = 1\n"
                "Holder.t.x = 1\nHolder.m.forward = None\nHolder.Inner.t.x = 1\nD['a'].x = 1\n"
                "XS[0].forward = None\nx = [Own, M]\nx[0].y = 1\nx[1].forward = None\n"
                "getattr(holder, 'get')().x = 1\nholder.Holder.t.x = 1\nfor c in (Own, M):\n    c.z = 1\n"
                "class S(M):\n    def forward(self, t):\n        return t\nS.extra = 1\n"
                "Holder().t.x = 1\nHolder().m.forward = None\nclass S2(Holder):\n    pass\nS2.t.x = 1\n"
                "h = Holder()\nh.own = 1\nh.t.y = 1\n"
                "from .holder import gen_of\ngen = gen_of()\nnext(gen)\ngen.send(Own)\ngen.send(M())\n")


def _cross_errors(tmp_path: Path, policy: Policy, extra: dict[str, str], src: str,
                  monkeypatch: pytest.MonkeyPatch) -> list[int]:
    monkeypatch.setenv("FASTTRACK_ENGINE_TREE", str(write(tmp_path / "engine", ENGINE)))
    files = {"kernels/kimi_k3/__init__.py": "", "kernels/kimi_k3/layers.py": LAYERS,
             "kernels/kimi_k3/holder.py": HOLDER, **{f"kernels/kimi_k3/{k}": v for k, v in extra.items()},
             "kernels/kimi_k3/impl.py": src}
    return sorted({line or 0 for code, path, line in ft_errors(contribution(tmp_path, policy, files))
                   if path == "kernels/kimi_k3/impl.py"})


@pytest.mark.parametrize(("extra", "src"), [(c[1], c[2]) for c in CROSS], ids=[c[0] for c in CROSS])
def test_cross_module_laundering_is_an_error(tmp_path: Path, policy: Policy, extra: dict[str, str], src: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    want = [i for i, line in enumerate(src.splitlines(), start=1) if "# <-" in line]
    assert want, "an attack marks its lines"
    assert set(want) <= set(_cross_errors(tmp_path, policy, extra, src, monkeypatch))


@pytest.mark.parametrize(("extra", "src"), [
    pytest.param(o[1], o[2], id=o[0], marks=pytest.mark.xfail(strict=True, reason=o[3])) for o in CROSS_OPEN])
def test_open_cross_module_laundering(tmp_path: Path, policy: Policy, extra: dict[str, str], src: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    want = [i for i, line in enumerate(src.splitlines(), start=1) if "# <-" in line]
    assert set(want) <= set(_cross_errors(tmp_path, policy, extra, src, monkeypatch))


def test_cross_module_honest_twin(tmp_path: Path, policy: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    # the same forms on the contribution's own objects (own class, own function, an nn.Module subclass
    # defined in the contribution), held, returned and re-exported by other own modules, stay clean
    extra = {"holder.py": OWN_THINGS, "third.py": "from .holder import Own as E\n"}
    src = CROSS_HONEST + "from .third import E\nE.x = 1\n(E,)[0].x = 1\n"
    assert _cross_errors(tmp_path, policy, extra, src, monkeypatch) == []
