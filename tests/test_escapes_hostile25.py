"""Hostile review 25 (issue 15): attacks on round 24's static fixes, written as rewrites of the same effects
that the new hand-maintained tables do not list: transformers and ABC / overload registries outside
`TRANSFORMERS` (dataclasses' private helpers, `typing.clear_overloads`, `_abc`, pydantic's config writers, a
transformer reached by a computed getattr), code runners outside `CODE_RUNNERS` (`timeit.main`,
`dataclasses._create_fn`, unittest's loaders that call what a dotted name names), name resolvers outside
named.py (`pydoc.resolve` / `safeimport`, pickle's pure-Python twins), foreign calls whose result is the
object handed in, lower-case module tables outside `MODULE_TABLES`, an own method run with a foreign `self`,
own protocol methods returning engine objects, and raw memory without pointer / cast / addressof /
from_address (a `py_object` or pointer-typed field of a ctypes Union, and writes through the object that
the new copy-out spare lets by: `W() + T.from_address(n)`). CROSS: another own module's methods and
dunders (`__init__`, `__set__`, `__enter__` / `__exit__`, `__init_subclass__`, ...) writing what the
caller hands them, all pairs scanned as one contribution.

Each attack must be an ERROR at the lines marked `# <-`. Attacks that get through are strict xfails keyed in
OPEN with a one-line reason; the honest twins must stay clean (a finding is a strict xfail in
OPEN_FALSE_POSITIVES). Harness: tests/test_escapes_hostile_flow.py's (HEAD binds contextlib, copy,
functools, L = RowParallelLinear and AttentionImpl) and round 23's module-scoped fake engine tree."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fasttrack.confinement.engine_signatures import EngineSignatures
from fasttrack.policy import load_policy
from tests.escape_marks import marked_lines
from tests.test_escapes import POLICY
from tests.test_escapes_hostile21 import LAYERS
from tests.test_escapes_hostile22 import shipped_error_lines
from tests.test_escapes_hostile23 import engine  # noqa: F401  (the module-scoped fake engine tree)
from tests.test_escapes_hostile_flow import ENGINE, marked, scan
from tests.test_escapes_own_bases import contribution, ft_errors, write

ATTACKS: dict[str, str] = {
# -- class / function transformers and ABC / overload registries not in TRANSFORMERS (stdlib_effects.py) --
"xform-update-wrapper-engine": "def own():\n""    pass\n"
                               "functools.update_wrapper(AttentionImpl.forward, own)  # <-\n",
"xform-wraps-applied-engine": "def own():\n""    pass\n"
                              "functools.wraps(own)(AttentionImpl.forward)  # <-\n",
"xform-dataclass-set-new-attr": "import dataclasses\n"
                                "dataclasses._set_new_attribute(L, 'kimi', 1)  # <-\n",
"xform-dataclass-set-qualname": "import dataclasses\n"
                                "dataclasses._set_qualname(L, AttentionImpl.forward)  # <-\n",
"xform-dataclass-by-getattr": "import dataclasses\n""getattr(dataclasses, 'data' + 'class')(L)  # <-\n",
"xform-dataclass-by-vars": "import dataclasses\n""vars(dataclasses)['dataclass'](L)  # <-\n",
"xform-pydantic-with-config": "import pydantic\n""pydantic.with_config({'extra': 'allow'})(L)  # <-\n",
"xform-pydantic-rebuild-dc": "import pydantic.dataclasses\n"
                             "pydantic.dataclasses.rebuild_dataclass(L, force=True)  # <-\n",
"xform-typing-clear-overloads": "import typing\n""typing.clear_overloads()  # <-\n",
"xform-abc-registry-clear": "import collections.abc\n"
                            "collections.abc.Sequence._abc_registry_clear()  # <-\n",
"xform-c-abc-register": "import _abc, collections.abc\n"
                        "_abc._abc_register(collections.abc.Sequence, dict)  # <-\n",
"xform-type-of-abc-register": "import collections.abc\n""S = collections.abc.Sequence\n"
                              "type(S).register(S, dict)  # <-\n",
"xform-enum-unique-member-map": "import http\n"
                                "http.HTTPStatus._member_map_['OK2'] = http.HTTPStatus.OK  # <-\n",
"xform-total-ordering-map": "import collections\n""list(map(functools.total_ordering, [L]))  # <-\n",
# -- code run from strings (or callables named by strings) by stdlib helpers not in CODE_RUNNERS ------------
"code-timeit-main": "import timeit\n""timeit.main(['-n', '1', 'import os; os.environ.clear()'])  # <-\n",
"code-dataclasses-create-fn": "import dataclasses\n""dataclasses._create_fn('f', [], ['import os',"
                              " 'os.environ.clear()'])()  # <-\n",
"code-doctest-script": "import doctest\n""exec(doctest.script_from_examples('>>> import os'))  # <-\n",
"code-unittest-load-name": "import unittest\n"
                           "unittest.TestLoader().loadTestsFromName('gc.disable')  # <-\n",
"code-unittest-default-loader": "import unittest\n"
                                "unittest.defaultTestLoader.loadTestsFromNames(['gc.freeze'])  # <-\n",
"code-timer-computed-stmt": "import timeit\n""s = ''.join(map(chr, [105, 109, 112]))\n"
                            "timeit.Timer(stmt=s).timeit(1)  # <-\n",
"code-bdb-runeval": "import bdb\n""bdb.Bdb().runeval('__import__(\"gc\").disable()')  # <-\n",
# -- objects and callables resolved from dotted strings by stdlib helpers named.py does not list -----------
"named-attrgetter-dotted": "import operator, vllm\n"
                           "operator.attrgetter('v1.attention.backend.AttentionImpl')(vllm).forwa"
                           "rd = None  # <-\n",
"named-reduce-lambda-getattr": "import vllm\n"
                               "functools.reduce(lambda o, n: getattr(o, n), ['v1', 'attention',"
                               " 'backend', 'AttentionImpl'], vllm).forward = None  # <-\n",
"named-configurator-ext-convert": "import logging.config\n"
                                  "logging.config.BaseConfigurator({}).convert('ext://vllm.v1.att"
                                  "ention.backend.AttentionImpl').forward = None  # <-\n",
"named-configurator-importer": "import logging.config\n"
                               "logging.config.BaseConfigurator({}).importer('vllm.v1.attention.b"
                               "ackend').AttentionImpl.forward = None  # <-\n",
"named-pydoc-resolve": "import pydoc\n"
                       "pydoc.resolve('vllm.v1.attention.backend.AttentionImpl')[0].forward ="
                       " None  # <-\n",
"named-pydoc-safeimport": "import pydoc\n"
                          "pydoc.safeimport('vllm.v1.attention.backend').AttentionImpl.forward ="
                          " None  # <-\n",
"named-mock-importer": "from unittest import mock\n"
                       "mock._importer('vllm.v1.attention.backend').AttentionImpl.forward = None  # <-\n",
"named-mock-dot-lookup": "from unittest import mock\n""import vllm\n"
                         "mock._dot_lookup(vllm, 'v1', 'vllm.v1').attention = None  # <-\n",
"named-pickle-private-unpickler": "import pickle, io\n""pickle._Unpickler(io.BytesIO()).find_class('os',"
                                  " 'system')('true')  # <-\n",
"named-pickle-private-loads": "import pickle\n""pickle._loads(b\"cos\\nsystem\\n(S'true'\\ntR.\")  # <-\n",
"named-c-pickle-loads": "import _pickle\n""_pickle.loads(b\"cos\\nsystem\\n(S'true'\\ntR.\")  # <-\n",
"named-forking-pickler-loads": "from multiprocessing.reduction import ForkingPickler\n"
                               "ForkingPickler.loads(b\"cos\\nsystem\\n(S'true'\\ntR.\")  # <-\n",
"named-signature-eval-str": "import inspect\n""def f(x: 'AttentionImpl'):\n""    pass\n"
                            "inspect.signature(f, eval_str=True).parameters['x'].annotation.forwa"
                            "rd = None  # <-\n",
"named-hints-of-function": "import typing\n""def f(x: 'AttentionImpl'):\n""    pass\n"
                           "typing.get_type_hints(f)['x'].forward = None  # <-\n",
"named-hints-of-module": "import typing, sys\n""x: 'AttentionImpl'\n"
                         "typing.get_type_hints(sys.modules[__name__])['x'].forward = None  # <-\n",
"named-inspect-getmodule": "import inspect\n"
                           "inspect.getmodule(AttentionImpl).AttentionImpl.forward = None  # <-\n",
"named-importlib-util-module": "import importlib\n"
                               "importlib.import_module('vllm.v1.attention.backend').AttentionImp"
                               "l.forward = None  # <-\n",
# -- foreign calls whose result is the very object handed in, or a shared singleton (not a copy) ------------
"result-copy-of-class": "copy.copy(AttentionImpl).forward = None  # <-\n",
"result-deepcopy-of-class": "copy.deepcopy(L).forward = None  # <-\n",
"result-copy-of-function": "copy.copy(AttentionImpl.forward).__defaults__ = ()  # <-\n",
"result-weakref-deref": "import weakref\n""weakref.ref(AttentionImpl)().forward = None  # <-\n",
"result-weakref-proxy": "import weakref\n""weakref.proxy(L).forward = None  # <-\n",
"result-partial-func": "functools.partial(AttentionImpl).func.forward = None  # <-\n",
"result-lru-wrapped": "functools.lru_cache()(AttentionImpl).__wrapped__.forward = None  # <-\n",
"result-staticmethod-func": "staticmethod(AttentionImpl.forward).__func__.__kwdefaults__ = {}  # <-\n",
"result-set-pop": "{AttentionImpl}.pop().forward = None  # <-\n",
"result-max-key": "max([AttentionImpl], key=id).forward = None  # <-\n",
"result-simplenamespace": "import types\n""types.SimpleNamespace(k=AttentionImpl).k.forward = None  # <-\n",
"result-chainmap": "import collections\n"
                   "collections.ChainMap({'k': AttentionImpl})['k'].forward = None  # <-\n",
"result-main-thread-attr": "import threading\n""threading.main_thread().name = 'evil'  # <-\n",
"result-current-process-authkey": "import multiprocessing\n"
                                  "multiprocessing.current_process().authkey = b'x'  # <-\n",
"result-mp-context-attr": "import multiprocessing\n"
                          "multiprocessing.get_context('spawn').Process = object  # <-\n",
"result-decimal-getcontext": "import decimal\n""decimal.getcontext().prec = 2  # <-\n",
"result-email-policy-registry": "import email.policy\n"
                                "email.policy.default.header_factory.map_to_type('subject',"
                                " object)  # <-\n",
"result-asyncio-policy-attr": "import asyncio\n"
                              "asyncio.get_event_loop_policy().new_event_loop = None  # <-\n",
# -- lower-case stdlib module tables not in MODULE_TABLES, edited through their methods -------------------
"table-os-supports-dir-fd": "import os\n""os.supports_dir_fd.clear()  # <-\n",
"table-linecache-cache": "import linecache\n""linecache.cache.clear()  # <-\n",
"table-inspect-modulesbyfile": "import inspect\n""inspect.modulesbyfile.update({'x': 'y'})  # <-\n",
"table-domreg-registered": "import xml.dom.domreg\n"
                           "xml.dom.domreg.registered.update({'x': print})  # <-\n",
"table-http-server-ext-map": "import http.server\n"
                             "http.server.SimpleHTTPRequestHandler.extensions_map.update({'.py':"
                             " 'text/html'})  # <-\n",
"table-calendar-mdays": "import calendar\n""calendar.mdays.reverse()  # <-\n",
"table-tokenize-endpats": "import tokenize\n""tokenize.endpats.clear()  # <-\n",
# -- an own method run with a foreign `self` (explicit_self.py: own only where Python binds it) -------------
"self-methodtype-bind": "import types\n""class Own:\n""    def m(self):\n""        self.forward = None\n"
                        "types.MethodType(Own.m, AttentionImpl)()  # <-\n",
"self-dunder-get-bind": "class Own:\n""    def m(self):\n""        self.forward = None\n"
                        "Own.m.__get__(AttentionImpl)()  # <-\n",
"self-partial-bind": "class Own:\n""    def m(self):\n""        self.forward = None\n"
                     "functools.partial(Own.m, AttentionImpl)()  # <-\n",
"self-map-unbound": "class Own:\n""    def m(self):\n""        self.forward = None\n"
                    "list(map(Own.m, [AttentionImpl]))  # <-\n",
"self-star-args": "class Own:\n""    def m(self):\n""        self.forward = None\n"
                  "Own.m(*[AttentionImpl])  # <-\n",
"self-kwarg": "class Own:\n""    def m(self):\n""        self.forward = None\n"
              "Own.m(self=AttentionImpl)  # <-\n",
"self-class-dict": "class Own:\n""    def m(self):\n""        self.forward = None\n"
                   "Own.__dict__['m'](AttentionImpl)  # <-\n",
# -- own objects whose protocol methods (__getitem__, __get__, __reduce__ ...) hand back engine objects ------
"proto-class-getitem": "class Own:\n""    def __class_getitem__(cls, k):\n""        return AttentionImpl\n"
                       "Own[0].forward = None  # <-\n",
"proto-call-returns": "class F:\n""    def __call__(self):\n""        return AttentionImpl\n"
                      "F()().forward = None  # <-\n",
"proto-getitem": "class F:\n""    def __getitem__(self, k):\n""        return AttentionImpl\n"
                 "F()[0].forward = None  # <-\n",
"proto-iter": "class F:\n""    def __iter__(self):\n""        yield AttentionImpl\n""for x in F():\n"
              "    x.forward = None  # <-\n",
"proto-descriptor-get": "class D:\n""    def __get__(self, o, t):\n""        return AttentionImpl\n"
                        "class H:\n""    d = D()\n""H.d.forward = None  # <-\n",
"proto-property": "class H:\n""    @property\n""    def p(self):\n""        return AttentionImpl\n"
                  "H().p.forward = None  # <-\n",
"proto-metaclass-call": "class M(type):\n""    def __call__(cls):\n""        return AttentionImpl\n"
                        "class H(metaclass=M):\n""    pass\n""H().forward = None  # <-\n",
"proto-reduce-copy": "import vllm.v1.attention.backend as bm\n""class R:\n""    def __reduce__(self):\n"
                     "        return (getattr, (bm, 'AttentionImpl'))\n"
                     "copy.copy(R()).forward = None  # <-\n",
"proto-getattr-own": "class G:\n""    def __getattr__(self, n):\n""        return AttentionImpl\n"
                     "G().anything.forward = None  # <-\n",
"proto-next": "class N:\n""    def __next__(self):\n""        return AttentionImpl\n"
              "next(N()).forward = None  # <-\n",
# -- raw memory without ctypes.pointer / cast / addressof / from_address (global_state.py) ----------------
"mem-wintypes-pointer-field": "import ctypes, ctypes.wintypes\n""class U(ctypes.Union):\n"
                              "    _fields_ = [('a', ctypes.c_void_p), ('p', ctypes.wintypes.PBYTE)]\n"
                              "u = U()\n""u.a = id(AttentionImpl)\n""u.p[8] = 0  # <-\n",
"mem-pointer-type-cache": "import ctypes\n""P = ctypes._pointer_type_cache.get(ctypes.c_char)  # <-\n"
                          "class U(ctypes.Union):\n""    _fields_ = [('a', ctypes.c_void_p), ('p', P)]\n"
                          "u = U()\n""u.a = id(AttentionImpl)\n""u.p[8] = b'x'\n",
"mem-py-object-union": "import ctypes\n""class U(ctypes.Union):\n"
                       "    _fields_ = [('a', ctypes.c_ssize_t), ('o', ctypes.py_object)]\n""u = U()\n"
                       "u.a = id(AttentionImpl)\n""u.o.forward = None  # <-\n",
"mem-getattr-computed": "import ctypes\n""m = 'from_' + 'address'\n"
                        "getattr(ctypes.c_ssize_t, m)(id(L))  # <-\n",
"mem-methodcaller": "import ctypes, operator\n"
                    "operator.methodcaller('from_address', id(L))(ctypes.c_ssize_t)  # <-\n",
"mem-attrgetter": "import ctypes, operator\n"
                  "operator.attrgetter('from_address')(ctypes.c_ssize_t)(id(L))  # <-\n",
"mem-proc-self-mem": "f = open('/proc/self/mem', 'r+b')  # <-\n",
"mem-from-address-init": "import ctypes\n""ctypes.c_ssize_t.from_address(id(L)).__init__(0)  # <-\n",
"mem-from-address-setattr-dunder": "import ctypes\n"
                                   "ctypes.c_ssize_t.from_address(id(L)).__setattr__('value', 0)  # <-\n",
"mem-from-address-setattr": "import ctypes\n"
                            "setattr(ctypes.c_ssize_t.from_address(id(L)), 'value', 0)  # <-\n",
"mem-from-address-in-list": "import ctypes\n""[ctypes.c_ssize_t.from_address(id(L))][0].value = 0  # <-\n",
"mem-array-slice-assign": "import ctypes\n""(ctypes.c_char * 8).from_address(id(L))[0:1] = b'x'  # <-\n",
"mem-from-address-augassign": "import ctypes\n""(ctypes.c_ssize_t * 1).from_address(id(L))[0] += 1  # <-\n",
"mem-binop-radd-writes": "import ctypes\n""class W:\n""    def __radd__(self, o):\n""        o.value = 0\n"
                         "        return 0\n""ctypes.c_ssize_t.from_address(id(L)) + W()  # <-\n",
"mem-binop-add-writes": "import ctypes\n""class W:\n""    def __add__(self, o):\n""        o[0] = b'x'\n"
                        "        return 0\n""W() + (ctypes.c_char * 8).from_address(id(L))  # <-\n",
"mem-augassign-iadd-writes": "import ctypes\n""class W:\n""    def __iadd__(self, o):\n"
                             "        o.value = 0\n""        return self\n""acc = W()\n"
                             "acc += ctypes.c_ssize_t.from_address(id(L))  # <-\n",
}

OPEN: dict[str, str] = {
    "result-lru-wrapped": "lru_cache()(C).__wrapped__ is C itself: the wrapper's attribute is"
                          " taken as own",
    "result-mp-context-attr": "multiprocessing.get_context('spawn') is the shared context"
                              " singleton, not a SHARED_RESULTS entry",
    "result-email-policy-registry": "email.policy.default's header_factory.map_to_type writes"
                                    " the shared registry (a method of a stdlib instance)",
    "mem-wintypes-pointer-field": "a pointer type that is no call (ctypes.wintypes.PBYTE) as a"
                                  " Union field over an int: a raw write by index",
    "mem-py-object-union": "a Union of c_ssize_t and py_object turns id(engine class) back into"
                           " the class: its write is own",
}


def test_open_ids_are_attacks() -> None:
    assert set(OPEN) <= set(ATTACKS)
    assert set(OPEN_FALSE_POSITIVES) <= set(HONEST)


@pytest.mark.parametrize("src", [
    pytest.param(s, id=k, marks=[pytest.mark.xfail(strict=True, reason=OPEN[k])] if k in OPEN else [])
    for k, s in ATTACKS.items()])
def test_attack_is_an_error_at_its_line(src: str, engine: EngineSignatures) -> None:  # noqa: F811
    want = marked(src)
    assert want, "an attack marks its lines"
    assert set(want) <= set(shipped_error_lines(scan(src, engine)))


# -- honest twins: the same helpers on the contribution's own objects, and reads --------------------------
HONEST: dict[str, str] = {
"own-update-wrapper": "def w(*a, **k):\n""    pass\n""functools.update_wrapper(w, AttentionImpl.forward)\n"
                      "W = functools.wraps(AttentionImpl.forward)(lambda *a: None)\n",
"own-ctypes-values": "import ctypes\n""class S(ctypes.Structure):\n"
                     "    _fields_ = [('a', ctypes.c_int), ('b', ctypes.c_double)]\n""s = S()\n""s.a = 1\n"
                     "N = ctypes.sizeof(S)\n""V = ctypes.c_int(3).value\n",
"own-bound-methods": "import types\n""class Own:\n""    def m(self):\n""        self.x = 1\n""o = Own()\n"
                     "types.MethodType(Own.m, o)()\n""Own.m.__get__(o)()\n"
                     "functools.partial(Own.m, o)()\n""list(map(Own.m, [o]))\n",
"own-copies-and-refs": "import weakref\n""class Own:\n""    pass\n""o = Own()\n""copy.copy(o).x = 1\n"
                       "weakref.ref(o)().y = 2\n""functools.partial(Own).func.z = 3\n"
                       "functools.lru_cache()(Own).__wrapped__.w = 4\n",
"own-protocol-returns": "class Own:\n""    pass\n""class F:\n""    def __getitem__(self, k):\n"
                        "        return Own()\n""    def __call__(self):\n""        return Own\n"
                        "F()[0].x = 1\n""F()().y = 2\n",
"own-stdlib-reads": "import linecache, inspect, calendar, typing, pydoc\n"
                    "T = linecache.getline(__file__, 1)\n""M = inspect.getmodule(AttentionImpl).__name__\n"
                    "D = list(calendar.mdays)\n""D.reverse()\n""O = typing.get_overloads(print)\n"
                    "S = pydoc.describe(AttentionImpl)\n",
"own-dataclass-by-name": "import dataclasses\n""class Own:\n""    x: int = 0\n"
                         "Own = getattr(dataclasses, 'dataclass')(Own)\n",
"own-ctypes-copy-out": "import ctypes\n""b = (ctypes.c_ubyte * 8)()\n""A = ctypes.addressof(b)\n"
                       "enc = b''\n""enc += (ctypes.c_ubyte * 8).from_address(A)\n"
                       "C = bytes((ctypes.c_ubyte * 8).from_address(A))\n",
}

OPEN_FALSE_POSITIVES: dict[str, str] = {

}


@pytest.mark.parametrize("key", [
    pytest.param(k, id=k, marks=[pytest.mark.xfail(strict=True, reason=OPEN_FALSE_POSITIVES[k])]
                 if k in OPEN_FALSE_POSITIVES else []) for k in HONEST])
def test_honest_twin_is_clean(key: str, engine: EngineSignatures) -> None:  # noqa: F811
    assert shipped_error_lines(scan(HONEST[key], engine)) == []


# -- another own module's methods and dunders writing what the caller hands them (cross_module.py) --------
# each case is a pair (other own module, caller); all pairs are modules of one contribution, scanned once
CROSS: dict[str, tuple[str, str]] = {
    "cross-staticmethod-param": (
        "class W:\n""    @staticmethod\n""    def put(obj):\n""        obj.forward = None\n",
        "W.put(AttentionImpl)  # <-\n"),
    "cross-classmethod-setattr": (
        "class W:\n""    @classmethod\n""    def put(cls, obj):\n"
        "        setattr(obj, 'forward', None)\n",
        "W.put(AttentionImpl)  # <-\n"),
    "cross-kwargs-param": (
        "class W:\n""    def put(self, **kw):\n""        kw['o'].forward = None\n",
        "W().put(o=AttentionImpl)  # <-\n"),
    "cross-varargs-param": (
        "class W:\n""    def put(self, *a):\n""        a[0].forward = None\n",
        "W().put(AttentionImpl)  # <-\n"),
    "cross-bound-method-stored": (
        "class W:\n""    def put(self, obj):\n""        obj.forward = None\n",
        "p = W().put\n""p(AttentionImpl)  # <-\n"),
    "cross-getattr-method": (
        "class W:\n""    def put(self, obj):\n""        obj.forward = None\n",
        "getattr(W(), 'put')(AttentionImpl)  # <-\n"),
    "cross-map-method": (
        "class W:\n""    def put(self, obj):\n""        obj.forward = None\n",
        "list(map(W().put, [AttentionImpl]))  # <-\n"),
    "cross-param-attribute-chain": (
        "class W:\n""    def put(self, h):\n""        h.x.forward = None\n",
        "import types\n""W().put(types.SimpleNamespace(x=AttentionImpl))  # <-\n"),
    "cross-init-writes-param": (
        "class W:\n""    def __init__(self, v):\n""        v.forward = None\n",
        "W(AttentionImpl)  # <-\n"),
    "cross-descriptor-set": (
        "class D:\n""    def __set__(self, inst, v):\n""        v.forward = None\n""class W:\n"
        "    d = D()\n",
        "W().d = AttentionImpl  # <-\n"),
    "cross-setattr-dunder": (
        "class W:\n""    def __setattr__(self, k, v):\n""        v.forward = None\n",
        "W().x = AttentionImpl  # <-\n"),
    "cross-iadd-dunder": (
        "class W:\n""    def __iadd__(self, v):\n""        v.forward = None\n""        return self\n",
        "w = W()\n""w += AttentionImpl  # <-\n"),
    "cross-eq-dunder": (
        "class W:\n""    def __eq__(self, v):\n""        v.forward = None\n""        return False\n",
        "B = W() == AttentionImpl  # <-\n"),
    "cross-contains-dunder": (
        "class W:\n""    def __contains__(self, v):\n""        v.forward = None\n""        return False\n",
        "B = AttentionImpl in W()  # <-\n"),
    "cross-init-subclass-kw": (
        "class W:\n""    def __init_subclass__(cls, target=None):\n""        target.forward = None\n",
        "class X(W, target=AttentionImpl):  # <-\n""    pass\n"),
    "cross-class-getitem-writes": (
        "class W:\n""    def __class_getitem__(cls, v):\n""        v.forward = None\n"
        "        return cls\n",
        "W[AttentionImpl]  # <-\n"),
    "cross-enter-writes-held": (
        "class C:\n""    def __init__(self, o):\n""        self.o = o\n""    def __enter__(self):\n"
        "        self.o.forward = None\n""    def __exit__(self, *a):\n""        pass\n",
        "with C(AttentionImpl):  # <-\n""    pass\n"),
    "cross-exitstack-enter": (
        "class C:\n""    def __init__(self, o):\n""        self.o = o\n""    def __enter__(self):\n"
        "        self.o.forward = None\n""    def __exit__(self, *a):\n""        pass\n",
        "import contextlib\n""contextlib.ExitStack().enter_context(C(AttentionImpl))  # <-\n"),
    "cross-exit-writes-held": (
        "class C:\n""    def __init__(self, o):\n""        self.o = o\n""    def __enter__(self):\n"
        "        return self\n""    def __exit__(self, *a):\n""        self.o.forward = None\n",
        "with C(AttentionImpl):  # <-\n""    pass\n"),
    "cross-sorted-key-method": (
        "class W:\n""    def key(self, v):\n""        v.forward = None\n""        return 0\n",
        "S = sorted([AttentionImpl], key=W().key)  # <-\n"),
    "cross-held-then-method": (
        "class W:\n""    def __init__(self):\n""        self.o = None\n""    def hold(self, o):\n"
        "        self.o = o\n""    def fire(self):\n""        self.o.forward = None\n",
        "w = W()\n""w.hold(AttentionImpl)\n""w.fire()  # <-\n"),
    "cross-new-returns-param": (
        "class W:\n""    def __new__(cls, v):\n""        return v\n",
        "W(AttentionImpl).forward = None  # <-\n"),
}
CROSS_OPEN: dict[str, str] = {
    "cross-descriptor-set": "an own __set__ in another module writing the value assigned is not followed",
    "cross-init-subclass-kw": "a class keyword argument written by another own module's __init_subclass__",
    "cross-class-getitem-writes": "W[x]: another own module's __class_getitem__ writing its item"
                                  " is not followed",
    "cross-enter-writes-held": "`with C(x)`: __enter__ writing what __init__ stored (self.o), in"
                               " another own module",
    "cross-exitstack-enter": "ExitStack().enter_context(C(x)): the same __enter__ write through the stack",
    "cross-exit-writes-held": "`with C(x)`: __exit__ writing what __init__ stored (self.o), in"
                              " another own module",
    "cross-held-then-method": "w.hold(x); w.fire(): a method writing what another method stored"
                              " from its parameter",
}
CROSS_HONEST: dict[str, tuple[str, str]] = {
    "mid": (
        "class W:\n""    @staticmethod\n""    def put(obj):\n""        obj.forward = None\n"
        "    def __init__(self, v=None):\n""        self.o = v\n""    def __enter__(self):\n"
        "        self.o.y = 1\n""        return self\n""    def __exit__(self, *a):\n"
        "        self.o.z = 2\n""    def __iadd__(self, v):\n""        v.w = 3\n""        return self\n",
        "class Own:\n""    pass\n""W.put(Own)\n""with W(Own()):\n""    pass\n""w = W()\n""w += Own()\n"
        "import contextlib\n""with contextlib.ExitStack() as s:\n""    s.enter_context(W(Own()))\n"),
}


def _cross_files(cases: dict[str, tuple[str, str]]) -> tuple[dict[str, str], dict[str, set[tuple[str, int]]]]:
    """The contribution's files (mid<i>.py, impl<i>.py per case; impl imports mid's classes) and the
    (file, line) pairs each case marks."""
    files = {"kernels/kimi_k3/__init__.py": "", "kernels/kimi_k3/layers.py": LAYERS}
    want: dict[str, set[tuple[str, int]]] = {}
    for i, (key, (mid, src)) in enumerate(cases.items()):
        names = ", ".join(n.name for n in ast.parse(mid).body if isinstance(n, ast.ClassDef))
        impl = f"from .layers import AttentionImpl\nfrom .mid{i} import {names}\n" + src
        files[f"kernels/kimi_k3/mid{i}.py"] = mid
        files[f"kernels/kimi_k3/impl{i}.py"] = impl
        want[key] = {(f"kernels/kimi_k3/impl{i}.py", line) for line in marked_lines(impl)}
    return files, want


def _cross_scan(tmp: Path, cases: dict[str, tuple[str, str]]) -> tuple[set[tuple[str, int]],
                                                                          dict[str, set[tuple[str, int]]]]:
    files, want = _cross_files(cases)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FASTTRACK_ENGINE_TREE", str(write(tmp / "engine", ENGINE)))
        errors = {(path, line or 0) for _, path, line in ft_errors(contribution(tmp, load_policy(POLICY),
                                                                                 files))}
    return errors, want


@pytest.fixture(scope="module")
def cross25(tmp_path_factory: pytest.TempPathFactory) -> tuple[set[tuple[str, int]],
                                                                dict[str, set[tuple[str, int]]]]:
    return _cross_scan(tmp_path_factory.mktemp("cross25"), CROSS)


def test_cross_open_ids_are_attacks() -> None:
    assert set(CROSS_OPEN) <= set(CROSS)
    assert all(marked_lines(src) for _, src in CROSS.values())


@pytest.mark.parametrize("key", [
    pytest.param(k, id=k, marks=[pytest.mark.xfail(strict=True, reason=CROSS_OPEN[k])] if k in CROSS_OPEN
                 else []) for k in CROSS])
def test_cross_module_attack_is_an_error(cross25: tuple[set[tuple[str, int]],
                                                        dict[str, set[tuple[str, int]]]], key: str) -> None:
    errors, want = cross25
    assert want[key] and want[key] <= errors


def test_cross_module_honest_twin(tmp_path: Path) -> None:
    errors, _ = _cross_scan(tmp_path, CROSS_HONEST)
    assert not {e for e in errors if "/impl" in e[0] or "/mid" in e[0]}
