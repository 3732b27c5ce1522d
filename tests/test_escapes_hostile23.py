"""Hostile review 23: attacks on the static escape scan in forms rounds 20-22 did not write: match patterns,
walrus bindings, `global`/`nonlocal`, `del`, augmented assignment, unbound-method spellings, module and
builtins dicts, MRO walks, class bodies, def-time expressions (defaults, annotations, decorators),
f-strings, frames, importlib, stdlib modules reached through other modules, contextlib and mock stacks,
async results, typing constructs, dataclass and enum records, stdlib registries, the operator module,
torch namespaces and `torch._C`, vLLM state and registries, and files by other spellings.

Each attack must be an ERROR at the lines marked `# <-` (a warning does not stop a PR). Attacks that get
through when this file was written are strict xfails: their id is a key of OPEN / CROSS_OPEN with the
one-line reason (what a fixer must handle). The honest twins are model-local code that must stay clean; a
finding on one is in OPEN_FALSE_POSITIVES."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fasttrack.confinement.engine_signatures import EngineSignatures
from fasttrack.policy import Policy, load_policy
from tests.escape_marks import marked_lines
from tests.test_escapes import POLICY
from tests.test_escapes_hostile20 import _cross_errors
from tests.test_escapes_hostile21 import LAYERS, _errors_by_file  # the cross-module harness
from tests.test_escapes_hostile22 import shipped_error_lines
from tests.test_escapes_hostile_flow import ENGINE, marked, scan

# -- single file: the head of tests/test_escapes_hostile_flow.py binds contextlib, copy, functools,
#    L (RowParallelLinear) and AttentionImpl (engine classes) ---------------------------------------------
ATTACKS: dict[str, str] = {
# -- match statements: patterns that bind engine objects ---------------------------------------------------
"match-class-pattern-as": "match AttentionImpl:\n    case type() as c:\n        c.forward = None  # <-\n",
"match-sequence-star-tail": "match [1, AttentionImpl]:\n    case [*_, c]:\n        c.forward = None  # <-\n",
"match-mapping-value": "match {'k': AttentionImpl}:\n    case {'k': c}:\n        c.forward = None  # <-\n",
"match-mapping-rest": "match {'k': AttentionImpl}:\n    case {**rest}:\n        rest['k'].forward = None  # "
                      "<-\n",
"match-or-pattern": "match (2, AttentionImpl):\n    case (1, c) | (2, c):\n        c.forward = None  # <-\n",
"match-class-narrowing": "def f(x):\n    match x:\n        case L():\n            x.forward = print  # <-\n",
"match-class-keyword-attr": "def f(x):\n    match x:\n        case L(quant_method=q):\n"
                            "            q.apply = print  # <-\n",
"match-module-keyword": "import vllm.v1.attention.backend as bm\nmatch bm:\n"
                        "    case object(AttentionImpl=c):\n        c.forward = None  # <-\n",
"match-subject-tuple-capture": "match AttentionImpl, 1:\n    case (c, _):\n        c.forward = None  # <-\n",
"match-nested-as": "match [[AttentionImpl]]:\n    case [[_ as c]]:\n        c.forward = None  # <-\n",
"match-capture-leaks-after": "match AttentionImpl:\n    case c:\n        pass\nc.forward = None  # <-\n",
# -- walrus in places a binding is not expected -------------------------------------------------------------
"walrus-if-test": "if (c := AttentionImpl):\n    c.forward = None  # <-\n",
"walrus-while-test": "while (c := AttentionImpl):\n    c.forward = None  # <-\n    break\n",
"walrus-comprehension-condition": "[0 for _ in [1] if (c := AttentionImpl)]\nc.forward = None  # <-\n",
"walrus-genexp-any": "any((c := AttentionImpl) for _ in [1])\nc.forward = None  # <-\n",
"walrus-fstring": "f'{(c := AttentionImpl)}'\nc.forward = None  # <-\n",
"walrus-call-argument": "print(c := AttentionImpl)\nc.forward = None  # <-\n",
"walrus-nested-comprehension": "[[(c := x) for x in [AttentionImpl]] for _ in [1]]\nc.forward = None  # <-\n",
"walrus-in-function-comprehension": "def f():\n    [(c := x) for x in [AttentionImpl]]\n"
                                    "    c.forward = None  # <-\n",
"walrus-subscript": "d = {}\nd[(c := AttentionImpl)] = 1\nc.forward = None  # <-\n",
# -- global / nonlocal rebinding ----------------------------------------------------------------------------
"global-in-method": "c = None\nclass K:\n    def m(self):\n        global c\n        c = AttentionImpl\n"
                    "def g():\n    c.forward = None  # <-\n",
"global-for-target": "c = None\ndef f():\n    global c\n    for c in [AttentionImpl]:\n        pass\n"
                     "def g():\n    c.forward = None  # <-\n",
"global-import-in-function": "bm = None\ndef f():\n    global bm\n    import vllm.v1.attention.backend as "
                             "bm\n"
                             "def g():\n    bm.AttentionImpl.forward = None  # <-\n",
"global-with-target": "c = None\ndef f():\n    global c\n    with contextlib.nullcontext(AttentionImpl) as "
                      "c:\n"
                      "        pass\ndef g():\n    c.forward = None  # <-\n",
"global-walrus": "c = None\ndef f():\n    global c\n    (c := AttentionImpl)\ndef g():\n"
                 "    c.forward = None  # <-\n",
"global-tuple-unpack": "c = None\ndef f():\n    global c\n    _, c = 1, AttentionImpl\ndef g():\n"
                       "    c.forward = None  # <-\n",
"global-from-import-in-function": "c = None\ndef f():\n    global c\n"
                                  "    from vllm.v1.attention.flash import FlashImpl as c\n"
                                  "def g():\n    c.forward = None  # <-\n",
"nonlocal-inner-rebinds": "def outer():\n    c = object\n    def inner():\n        nonlocal c\n"
                          "        c = AttentionImpl\n    inner()\n    c.forward = None  # <-\n",
"nonlocal-loop-target": "def outer():\n    c = object\n    def inner():\n        nonlocal c\n"
                        "        for c in [AttentionImpl]:\n            pass\n    inner()\n    c.forward = "
                        "None  # <-\n",
"global-augassign-container": "c = []\ndef f():\n    global c\n    c += [AttentionImpl]\n"
                              "def g():\n    c[0].forward = None  # <-\n",
# -- del of engine attributes / items -----------------------------------------------------------------------
"del-attr-class": "del AttentionImpl.forward  # <-\n",
"del-module-attr": "import vllm.v1.attention.backend as bm\ndel bm.AttentionImpl  # <-\n",
"del-module-dict-item": "import vllm.v1.attention.backend as bm\ndel bm.__dict__['AttentionImpl']  # <-\n",
"del-vars-item": "import vllm.v1.attention.backend as bm\ndel vars(bm)['AttentionImpl']  # <-\n",
"del-sys-modules": "import sys\ndel sys.modules['vllm']  # <-\n",
"del-environ": "import os\ndel os.environ['PATH']  # <-\n",
"del-builtins-attr": "import builtins\ndel builtins.print  # <-\n",
"del-sys-path-item": "import sys\ndel sys.path[0]  # <-\n",
"del-sys-path-slice": "import sys\ndel sys.path[:]  # <-\n",
"del-list-target": "del [AttentionImpl.forward]  # <-\n",
"del-tuple-target": "x = 1\ndel x, AttentionImpl.forward  # <-\n",
"del-type-delattr": "type.__delattr__(AttentionImpl, 'forward')  # <-\n",
"del-operator-delitem": "import operator\nimport sys\noperator.delitem(sys.modules, 'vllm')  # <-\n",
"del-operator-delattr": "import operator\noperator.delitem(vars(__import__('sys')), 'excepthook')  # <-\n",
"del-func-defaults": "del AttentionImpl.forward.__defaults__  # <-\n",
"del-alias-attr": "X = AttentionImpl\ndel X.forward  # <-\n",
"del-in-function-param": "def f(layer: L):\n    del layer.forward  # <-\n",
# -- augmented assignment on engine containers --------------------------------------------------------------
"aug-sys-path-iadd": "import sys\nsys.path += ['/tmp']  # <-\n",
"aug-sys-path-imul": "import sys\nsys.path *= 0  # <-\n",
"aug-sys-meta-path-alias": "import sys\nmp = sys.meta_path\nmp += [None]  # <-\n",
"aug-environ-alias-ior": "import os\ne = os.environ\ne |= {'X': '1'}  # <-\n",
"aug-abstractmethods": "AttentionImpl.__abstractmethods__ |= {'x'}  # <-\n",
"aug-logging-handlers-imul": "import logging\nlogging.root.handlers *= 0  # <-\n",
"aug-global-forward-hooks": "import torch\n"
                            "torch.nn.modules.module._global_forward_hooks |= {1: print}  # <-\n",
"aug-sys-argv": "import sys\nsys.argv += ['--x']  # <-\n",
"aug-warnoptions": "import sys\nsys.warnoptions += ['ignore']  # <-\n",
"aug-slice-assign": "import sys\nsys.meta_path[:0] = [None]  # <-\n",
"aug-engine-module-list": "import vllm.v1.attention.backend as bm\nbm.__all__ += ['x']  # <-\n",
"aug-subscript-of-engine-dict": "import sys\nsys.modules['x'] = []\nsys.modules['x'] += [1]  # <-\n",
# -- unbound method spellings -------------------------------------------------------------------------------
"unbound-type-append": "import sys\ntype(sys.path).append(sys.path, '/tmp')  # <-\n",
"unbound-list-append": "import sys\nlist.append(sys.path, '/tmp')  # <-\n",
"unbound-list-insert": "import sys\nlist.insert(sys.meta_path, 0, None)  # <-\n",
"unbound-list-extend": "import sys\nlist.extend(sys.path, ['/tmp'])  # <-\n",
"unbound-list-pop": "import sys\nlist.pop(sys.path)  # <-\n",
"unbound-list-clear": "import sys\nlist.clear(sys.path_hooks)  # <-\n",
"unbound-list-iadd": "import sys\nlist.__iadd__(sys.path, ['/tmp'])  # <-\n",
"unbound-list-setitem": "import sys\nlist.__setitem__(sys.path, 0, '/tmp')  # <-\n",
"unbound-dict-setitem-modules": "import sys\ndict.__setitem__(sys.modules, 'x', None)  # <-\n",
"unbound-dict-update-modules": "import sys\ndict.update(sys.modules, x=None)  # <-\n",
"unbound-dict-setdefault-vars": "import vllm.v1.attention.backend as bm\n"
                                "dict.setdefault(vars(bm), 'X', 1)  # <-\n",
"unbound-dict-pop-modules": "import sys\ndict.pop(sys.modules, 'vllm')  # <-\n",
"unbound-dict-clear-vars": "import vllm.v1.attention.backend as bm\ndict.clear(vars(bm))  # <-\n",
"unbound-dict-ior": "import sys\ndict.__ior__(sys.modules, {})  # <-\n",
"unbound-type-of-modules-delitem": "import sys\ntype(sys.modules).__delitem__(sys.modules, 'vllm')  # <-\n",
"unbound-mutablesequence-append": "import sys\nimport collections.abc\n"
                                  "collections.abc.MutableSequence.append(sys.path, '/tmp')  # <-\n",
"unbound-vars-of-type": "import sys\nvars(type(sys.modules))['__setitem__'](sys.modules, 'x', None)  # <-\n",
"unbound-bound-method-alias": "import sys\nap = sys.path.append\nap('/tmp')  # <-\n",
"unbound-partial-of-bound": "import sys\nfunctools.partial(sys.path.append, '/tmp')()  # <-\n",
"unbound-list-map": "import sys\nlist(map(sys.path.append, ['/tmp']))  # <-\n",
"unbound-set-add-sys": "import sys\nset.add(sys.stdlib_module_names, 'x')  # <-\n",
# -- vars / __dict__ of engine modules ----------------------------------------------------------------------
"dict-module-update": "import vllm.v1.attention.backend as bm\n"
                      "bm.__dict__.update(AttentionImpl=None)  # <-\n",
"dict-vars-alias": "import vllm.v1.attention.backend as bm\nd = vars(bm)\nd['AttentionImpl'] = None  # <-\n",
"dict-torch-vars": "import torch\nvars(torch)['compile'] = print  # <-\n",
"dict-torch-dunder": "import torch\ntorch.__dict__['compile'] = print  # <-\n",
"dict-builtins-vars": "import builtins\nvars(builtins)['print'] = None  # <-\n",
"dict-dunder-builtins-item": "__builtins__['print'] = None  # <-\n",
"dict-sys-vars": "import sys\nvars(sys)['excepthook'] = print  # <-\n",
"dict-sys-modules-dict": "import sys\n"
                         "sys.modules['vllm.v1.attention.backend'].__dict__['AttentionImpl'] = None  # <-\n",
"dict-print-self": "print.__self__.print = None  # <-\n",
"dict-len-self-dict": "len.__self__.__dict__['len'] = None  # <-\n",
"dict-module-of-class": "import sys\nsys.modules[AttentionImpl.__module__].AttentionImpl = None  # <-\n",
"dict-inspect-getmodule": "import inspect\ninspect.getmodule(L).RowParallelLinear = None  # <-\n",
# -- object.__setattr__ / type.__setattr__ / MRO walks ------------------------------------------------------
"setattr-type-of-class": "type(AttentionImpl).__setattr__(AttentionImpl, 'forward', None)  # <-\n",
"setattr-object-on-module": "import vllm.v1.attention.backend as bm\n"
                            "object.__setattr__(bm, 'AttentionImpl', None)  # <-\n",
"setattr-moduletype": "import types\nimport vllm.v1.attention.backend as bm\n"
                      "types.ModuleType.__setattr__(bm, 'AttentionImpl', None)  # <-\n",
"setattr-class-dunder-class": "AttentionImpl.__class__.__setattr__(AttentionImpl, 'forward', None)  # <-\n",
"setattr-dunder-call": "setattr.__call__(AttentionImpl, 'forward', None)  # <-\n",
"setattr-list-index": "[setattr][0](AttentionImpl, 'forward', None)  # <-\n",
"setattr-conditional": "f = setattr if True else print\nf(AttentionImpl, 'forward', None)  # <-\n",
"setattr-identity-lambda": "(lambda s: s)(setattr)(AttentionImpl, 'forward', None)  # <-\n",
"setattr-vars-type": "vars(type)['__setattr__'](AttentionImpl, 'forward', None)  # <-\n",
"setattr-eval-name": "eval('setattr')(AttentionImpl, 'forward', None)  # <-\n",
"setattr-builtins-dict": "import builtins\nbuiltins.__dict__['setattr'](AttentionImpl, 'forward', None)  # "
                         "<-\n",
"setattr-dunder-builtins-dict": "__builtins__['setattr'](AttentionImpl, 'forward', None)  # <-\n",
"setattr-computed-name-torch": "import torch\nsetattr(torch.backends.cudnn, 'bench' + 'mark', True)  # <-\n",
"mro-dunder-base": "class Mine(AttentionImpl):\n    pass\nMine.__base__.forward = None  # <-\n",
"mro-dunder-bases": "class Mine(AttentionImpl):\n    pass\nMine.__bases__[0].forward = None  # <-\n",
"mro-instance-type": "class Mine(AttentionImpl):\n    pass\ntype(Mine()).__mro__[1].forward = None  # <-\n",
"mro-super-class-attr": "class Mine(AttentionImpl):\n    @classmethod\n    def f(cls):\n"
                        "        super().forward.__defaults__ = ()  # <-\n",
"mro-super-thisclass": "class Mine(AttentionImpl):\n    def f(self):\n"
                       "        super().__thisclass__.__mro__[1].forward = None  # <-\n",
"mro-self-class-base": "class Mine(AttentionImpl):\n    def f(self):\n"
                       "        self.__class__.__base__.forward = None  # <-\n",
# -- class bodies: names a class body binds -----------------------------------------------------------------
"classbody-for-target": "class K:\n    for c in [AttentionImpl]:\n        pass\nK.c.forward = None  # <-\n",
"classbody-import": "class K:\n    import vllm.v1.attention.backend as bm\n"
                    "K.bm.AttentionImpl.forward = None  # <-\n",
"classbody-with-target": "class K:\n    with contextlib.nullcontext(AttentionImpl) as c:\n        pass\n"
                         "K.c.forward = None  # <-\n",
"classbody-locals-item": "class K:\n    locals()['c'] = AttentionImpl\nK.c.forward = None  # <-\n",
"classbody-vars-item": "class K:\n    vars()['c'] = AttentionImpl\nK().c.forward = None  # <-\n",
"classbody-from-import": "class K:\n    from vllm.v1.attention.flash import FlashImpl as c\n"
                         "K.c.forward = None  # <-\n",
"classbody-tuple-unpack": "class K:\n    c, d = AttentionImpl, 1\nK.c.forward = None  # <-\n",
"classbody-rebinds-method": "class K:\n    def c(self):\n        pass\n    c = AttentionImpl\n"
                            "K.c.forward = None  # <-\n",
"classbody-try-except": "class K:\n    try:\n        raise ValueError\n    except ValueError:\n"
                        "        c = AttentionImpl\nK.c.forward = None  # <-\n",
"classbody-match": "class K:\n    match 1:\n        case _:\n            c = AttentionImpl\nK.c.forward = "
                   "None  # <-\n",
"classbody-dict-of-class": "class K:\n    c = AttentionImpl\nK.__dict__['c'].forward = None  # <-\n",
"classbody-vars-of-class": "class K:\n    c = AttentionImpl\nvars(K)['c'].forward = None  # <-\n",
# -- def-time expressions: defaults, annotations, decorators ------------------------------------------------
"deftime-default-call": "import sys\ndef f(x=sys.path.append('/tmp')):  # <-\n    pass\n",
"deftime-lambda-default-call": "import sys\ng = lambda x=sys.path.append('/tmp'): x  # <-\n",
"deftime-annotation-call": "def f(x: setattr(AttentionImpl, 'forward', None)):  # <-\n    pass\n",
"deftime-module-annassign": "import sys\nx: sys.path.append('/tmp') = 1  # <-\n",
"deftime-class-annotation": "import sys\nclass K:\n    x: sys.path.append('/tmp')  # <-\n",
"deftime-return-annotation": "import sys\ndef f() -> sys.path.append('/tmp'):  # <-\n    pass\n",
"deco-partial-setattr": "@functools.partial(setattr, AttentionImpl, 'forward')  # <-\ndef g():\n    pass\n",
"deco-sys-path-append": "import sys\n@sys.path.append  # <-\ndef g():\n    pass\n",
"deco-vars-setdefault": "import vllm.v1.attention.backend as bm\n@vars(bm).setdefault  # <-\ndef g():\n    "
                        "pass\n",
"deco-lambda-setattr": "@(lambda f: setattr(AttentionImpl, 'forward', f))  # <-\ndef g():\n    pass\n",
"deco-wraps-wrapped": "@functools.wraps(AttentionImpl.forward)\ndef g():\n    pass\n"
                      "g.__wrapped__.__defaults__ = ()  # <-\n",
"update-wrapper-onto-engine": "def g():\n    pass\n"
                              "functools.update_wrapper(AttentionImpl.forward, g)  # <-\n",
"wraps-onto-engine": "def g():\n    pass\nfunctools.wraps(g)(AttentionImpl.forward)  # <-\n",
"deco-class-partial-setattr": "@functools.partial(setattr, L, 'forward')  # <-\nclass K:\n    pass\n",
# -- f-strings / format -------------------------------------------------------------------------------------
"fstring-call": "import sys\nf'{sys.path.append(\"/tmp\")}'  # <-\n",
"fstring-setattr": "f'{setattr(AttentionImpl, \"forward\", None)}'  # <-\n",
"format-argument-call": "import sys\n'{}'.format(sys.path.append('/tmp'))  # <-\n",
"fstring-spec-call": "import sys\nf'{1:{sys.path.append(\"/tmp\") or \"\"}}'  # <-\n",
# -- frames and tracebacks ----------------------------------------------------------------------------------
"frame-getframe-back": "import sys\nsys._getframe(1).f_globals['X'] = 1  # <-\n",
"frame-getframe-f-back": "import sys\nsys._getframe().f_back.f_globals['X'] = 1  # <-\n",
"frame-inspect-currentframe": "import inspect\ninspect.currentframe().f_back.f_globals['X'] = 1  # <-\n",
"frame-inspect-stack": "import inspect\ninspect.stack()[1].frame.f_globals['X'] = 1  # <-\n",
"frame-outer-frames": "import inspect\n"
                      "inspect.getouterframes(inspect.currentframe())[1][0].f_globals['X'] = 1  # <-\n",
"frame-traceback-back": "try:\n    raise ValueError\nexcept ValueError as e:\n"
                        "    e.__traceback__.tb_frame.f_back.f_globals['X'] = 1  # <-\n",
"frame-f-builtins": "import sys\nsys._getframe().f_builtins['print'] = None  # <-\n",
"frame-globals-builtins": "def g():\n    pass\ng.__globals__['__builtins__']['len'] = None  # <-\n",
"frame-function-builtins": "def g():\n    pass\ng.__builtins__['len'] = None  # <-\n",
"frame-current-frames": "import sys\nfor fr in sys._current_frames().values():\n"
                        "    fr.f_globals['X'] = 1  # <-\n",
"frame-exc-info": "import sys\ntry:\n    raise ValueError\nexcept ValueError:\n"
                  "    sys.exc_info()[2].tb_frame.f_back.f_globals['X'] = 1  # <-\n",
"loader-class-patch": "type(__loader__).exec_module = print  # <-\n",
"spec-loader-class-patch": "__spec__.loader.__class__.get_code = print  # <-\n",
# -- importlib / __import__ ---------------------------------------------------------------------------------
"reload-from-import": "from importlib import reload\nimport torch\nreload(torch)  # <-\n",
"reload-sys-modules": "import importlib as il\nimport sys\nil.reload(sys.modules['vllm'])  # <-\n",
"import-fromlist-package": "__import__('vllm', fromlist=['v1']).v1.attention.backend.AttentionImpl"
                           ".forward = None  # <-\n",
"import-builtins-dunder-import": "import builtins\nbuiltins.__import__('vllm.v1.attention.flash', "
                                 "fromlist=['x'])"
                                 ".FlashImpl.forward = None  # <-\n",
"import-importlib-dunder-import": "import importlib\nimportlib.__import__('vllm.v1.attention.flash', "
                                  "fromlist=['x']).FlashImpl.forward = None  # <-\n",
"import-module-getattr-string": "import importlib\n"
                                "getattr(importlib.import_module('vllm.v1.attention.flash'), 'Flash' + "
                                "'Impl')"
                                ".forward = None  # <-\n",
"modules-from-import": "from sys import modules\nmodules['torch'] = None  # <-\n",
"modules-from-import-as": "from sys import modules as mm\nmm.setdefault('torch.x', None)  # <-\n",
"path-from-import": "from sys import path\npath.insert(0, '/tmp')  # <-\n",
"meta-path-from-import": "from sys import meta_path\nmeta_path.append(None)  # <-\n",
"environ-from-import": "from os import environ\nenviron['X'] = '1'  # <-\n",
"environ-from-import-as": "from os import environ as e\ne.update(X='1')  # <-\n",
"modules-update-moduletype": "import sys\nimport types\nsys.modules.update({'vllm.x': "
                             "types.ModuleType('x')})  # <-\n",
"modules-ior": "import sys\nsys.modules |= {'vllm.x': None}  # <-\n",
"engine-module-class-swap": "import types\nimport vllm\nclass M(types.ModuleType):\n    pass\n"
                            "vllm.__class__ = M  # <-\n",
"star-import-flash": "from vllm.v1.attention.flash import *\nFlashImpl.forward = None  # <-\n",
"star-import-rebind": "from vllm.v1.attention.flash import *\nX = Wrapped\nX.forward = None  # <-\n",
"star-import-in-try": "try:\n    from vllm.v1.attention.flash import *\nexcept ImportError:\n    pass\n"
                      "FlashImpl.forward = None  # <-\n",
# -- stdlib modules reached through other stdlib modules ----------------------------------------------------
"os-via-os-path": "import os.path\nos.path.os.environ['X'] = '1'  # <-\n",
"os-via-shutil": "import shutil\nshutil.os.system('true')  # <-\n",
"os-via-torch": "import torch\ntorch.os.environ['X'] = '1'  # <-\n",
"os-via-inspect": "import inspect\ninspect.os.putenv('X', '1')  # <-\n",
"sys-via-typing": "import typing\ntyping.sys.modules['x'] = None  # <-\n",
"os-via-dunder-import-concat": "_os = __import__('o' + 's')\n_os.system('true')  # <-\n",
"os-via-import-module": "import importlib\nimportlib.import_module('os').putenv('X', '1')  # <-\n",
"os-via-sys-modules": "import sys\nsys.modules['os'].environ['X'] = '1'  # <-\n",
"os-partial-putenv": "import os\nfunctools.partial(os.putenv, 'X')('1')  # <-\n",
"os-putenv": "import os\nos.putenv('X', '1')  # <-\n",
"os-close-stdin": "import os\nos.close(0)  # <-\n",
"os-closerange": "import os\nos.closerange(3, 100)  # <-\n",
"os-setsid": "import os\nos.setsid()  # <-\n",
"os-nice": "import os\nos.nice(1)  # <-\n",
"os-sched-setaffinity": "import os\nos.sched_setaffinity(0, {0})  # <-\n",
"os-set-blocking": "import os\nos.set_blocking(1, False)  # <-\n",
"os-makedirs": "import os\nos.makedirs('/tmp/x', exist_ok=True)  # <-\n",
"os-replace": "import os\nos.replace('/tmp/a', '/tmp/b')  # <-\n",
"os-write-stdout": "import os\nos.write(1, b'x')  # <-\n",
"os-killpg": "import os\nos.killpg(0, 9)  # <-\n",
# -- contextlib / mock stacks -------------------------------------------------------------------------------
"redirect-stdout-entered": "import io\ncontextlib.redirect_stdout(io.StringIO()).__enter__()  # <-\n",
"redirect-stderr-with": "import io\nwith contextlib.redirect_stderr(io.StringIO()):  # <-\n    pass\n",
"contextlib-chdir": "with contextlib.chdir('/tmp'):  # <-\n    pass\n",
"contextlib-closing-stdout": "import sys\nwith contextlib.closing(sys.stdout):  # <-\n    pass\n",
"exitstack-push-setattr": "s = contextlib.ExitStack()\n"
                          "s.push(functools.partial(setattr, AttentionImpl, 'forward'))  # <-\ns.close()\n",
"mock-patch-string-started": "from unittest import mock\n"
                             "mock.patch('vllm.v1.attention.backend.AttentionImpl.forward', "
                             "new=print).start()  # <-\n",
"mock-patch-dict-environ": "import os\nfrom unittest import mock\nmock.patch.dict(os.environ, X='1').start() "
                           " # <-\n",
"mock-patch-dict-string": "from unittest import mock\nmock.patch.dict('os.environ', {'X': '1'}).start()  # "
                          "<-\n",
"mock-patch-multiple": "from unittest import mock\n"
                       "mock.patch.multiple('vllm.v1.attention.backend', AttentionImpl=None).start()  # <-\n",
"mock-patch-with": "from unittest import mock\nwith mock.patch.object(AttentionImpl, 'forward', print):  # "
                   "<-\n"
                   "    pass\n",
# -- async / generators / futures carrying engine objects ---------------------------------------------------
"asyncio-sleep-result": "import asyncio\nasync def f():\n    c = await asyncio.sleep(0, AttentionImpl)\n"
                        "    c.forward = None  # <-\n",
"asyncio-run-result": "import asyncio\nasyncio.run(asyncio.sleep(0, AttentionImpl)).forward = None  # <-\n",
"future-set-result": "import concurrent.futures\nfu = concurrent.futures.Future()\n"
                     "fu.set_result(AttentionImpl)\n"
                     "fu.result().forward = None  # <-\n",
"stopiteration-value": "def g():\n    return AttentionImpl\n    yield\ntry:\n    next(g())\n"
                       "except StopIteration as e:\n    e.value.forward = None  # <-\n",
"yield-from-return": "def inner():\n    return AttentionImpl\n    yield\ndef outer():\n    c = yield from "
                     "inner()\n"
                     "    c.forward = None  # <-\n",
"asyncio-gather": "import asyncio\nasync def one():\n    return AttentionImpl\nasync def f():\n"
                  "    (c,) = await asyncio.gather(one())\n    c.forward = None  # <-\n",
"async-anext": "async def gen():\n    yield AttentionImpl\nasync def f():\n    c = await anext(gen())\n"
               "    c.forward = None  # <-\n",
"asyncio-create-task": "import asyncio\nasync def one():\n    return AttentionImpl\nasync def f():\n"
                       "    c = await asyncio.create_task(one())\n    c.forward = None  # <-\n",
"executor-map": "import concurrent.futures\nwith concurrent.futures.ThreadPoolExecutor() as ex:\n"
                "    for c in ex.map(lambda x: x, [AttentionImpl]):\n        c.forward = None  # <-\n",
# -- typing constructs --------------------------------------------------------------------------------------
"typing-type-annotation": "def f(cls: type[L]):\n    cls.forward = print  # <-\n",
"typing-Type-annotation": "import typing\ndef f(cls: typing.Type[L]):\n    cls.forward = print  # <-\n",
"typing-newtype-supertype": "import typing\nN = typing.NewType('N', L)\nN.__supertype__.forward = None  # "
                            "<-\n",
"typing-get-args": "import typing\ntyping.get_args(typing.Optional[L])[0].forward = None  # <-\n",
"typing-annotated-origin": "import typing\ntyping.Annotated[L, 'x'].__origin__.forward = None  # <-\n",
"typing-generic-alias-args": "list[L].__args__[0].forward = None  # <-\n",
"typing-typevar-bound-attr": "import typing\nT = typing.TypeVar('T', bound=L)\nT.__bound__.forward = None  # "
                             "<-\n",
"typing-checking-else": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    c = object\nelse:\n"
                        "    c = AttentionImpl\nc.forward = None  # <-\n",
"typing-not-checking": "import typing\nif not typing.TYPE_CHECKING:\n    from vllm.v1.attention.flash import "
                       "FlashImpl\n"
                       "    FlashImpl.forward = None  # <-\n",
"typing-classvar-annotation": "import typing\nclass K:\n    c: typing.ClassVar[type] = AttentionImpl\n"
                              "K.c.forward = None  # <-\n",
# -- dataclasses / enums ------------------------------------------------------------------------------------
"dataclass-factory-partial-setattr": "import dataclasses\n@dataclasses.dataclass\nclass R:\n"
                                     "    x: object = dataclasses.field(default_factory=functools.partial("
                                     "setattr, AttentionImpl, 'forward', None))  # <-\nR()\n",
"dataclass-fields-default": "import dataclasses\n@dataclasses.dataclass\nclass R:\n    x: object = "
                            "AttentionImpl\n"
                            "dataclasses.fields(R)[0].default.forward = None  # <-\n",
"dataclass-dunder-fields": "import dataclasses\n@dataclasses.dataclass\nclass R:\n    x: object = "
                           "AttentionImpl\n"
                           "R.__dataclass_fields__['x'].default.forward = None  # <-\n",
"make-dataclass-default": "import dataclasses\n"
                          "R = dataclasses.make_dataclass('R', [('x', object, "
                          "dataclasses.field(default=AttentionImpl))])\n"
                          "R().x.forward = None  # <-\n",
"enum-private-value": "import enum\nclass E(enum.Enum):\n    A = AttentionImpl\nE.A._value_.forward = None  "
                      "# <-\n",
"enum-members-map": "import enum\nclass E(enum.Enum):\n    A = AttentionImpl\n"
                    "E.__members__['A'].value.forward = None  # <-\n",
"enum-iterate": "import enum\nclass E(enum.Enum):\n    A = AttentionImpl\nfor m in E:\n    m.value.forward = "
                "None  # <-\n",
"enum-lookup-by-name": "import enum\nclass E(enum.Enum):\n    A = AttentionImpl\nE['A'].value.forward = None "
                       " # <-\n",
# -- registries: stdlib, codecs, copyreg, pytree, weakref callbacks -----------------------------------------
"codecs-register-error": "import codecs\ncodecs.register_error('strict', print)  # <-\n",
"encodings-aliases": "import encodings.aliases\nencodings.aliases.aliases['x'] = 'rot_13'  # <-\n",
"copyreg-pickle-engine": "import copyreg\ncopyreg.pickle(L, lambda o: (L, ()))  # <-\n",
"copyreg-add-extension": "import copyreg\ncopyreg.add_extension('m', 'n', 1234)  # <-\n",
"pytree-register-node": "import torch.utils._pytree as pt\nclass Own:\n    pass\n"
                        "pt.register_pytree_node(Own, lambda o: ([], None), lambda c, x: Own())  # <-\n",
"weakref-ref-callback-partial": "import weakref\nclass Own:\n    pass\no = Own()\n"
                                "r = weakref.ref(o, functools.partial(setattr, AttentionImpl, 'forward'))  # "
                                "<-\n",
"atexit-path-append": "import atexit\nimport sys\natexit.register(sys.path.append, '/tmp')  # <-\n",
"weakref-finalize-path-append": "import sys\nimport weakref\nclass Own:\n    pass\no = Own()\n"
                                "weakref.finalize(o, sys.path.append, '/tmp')  # <-\n",
"mimetypes-add-type": "import mimetypes\nmimetypes.add_type('x/y', '.xy')  # <-\n",
"sys-modules-via-getattr-string": "import sys\ngetattr(sys, 'mod' + 'ules')['x'] = None  # <-\n",
"path-via-getattr-chr": "import sys\ngetattr(sys, chr(112) + 'ath').append('/tmp')  # <-\n",
"getattr-joined-method": "import sys\ngetattr(sys.path, ''.join(['app', 'end']))('/tmp')  # <-\n",
"getattr-type-setattr": "getattr(type, '__set' + 'attr__')(AttentionImpl, 'forward', None)  # <-\n",
# -- operator module ----------------------------------------------------------------------------------------
"operator-methodcaller-update": "import operator\nimport os\noperator.methodcaller('update', "
                                "X='1')(os.environ)  # <-\n",
"operator-methodcaller-setitem": "import operator\nimport os\n"
                                 "operator.methodcaller('__setitem__', 'X', '1')(os.environ)  # <-\n",
"operator-attrgetter-path": "import operator\nimport sys\noperator.attrgetter('path')(sys).append('/tmp')  # "
                            "<-\n",
"operator-attrgetter-modules-item": "import operator\nimport sys\noperator.attrgetter('modules')(sys)['x'] = "
                                    "None  # <-\n",
"operator-itemgetter-module": "import operator\nimport sys\n"
                              "operator.itemgetter('vllm')(sys.modules).x = 1  # <-\n",
"operator-setitem-modules": "import operator\nimport sys\noperator.setitem(sys.modules, 'x', None)  # <-\n",
"operator-iadd-path": "import operator\nimport sys\noperator.iadd(sys.path, ['/tmp'])  # <-\n",
"operator-ior-environ": "import operator\nimport os\noperator.ior(os.environ, {'X': '1'})  # <-\n",
"operator-call-setattr": "import operator\noperator.call(setattr, AttentionImpl, 'forward', None)  # <-\n",
# -- torch: other namespaces, _C through getattr chains -----------------------------------------------------
"torch-custom-op-foreign": "import torch\n@torch.library.custom_op('vllm::my_op', mutates_args=())  # <-\n"
                           "def my_op(x: torch.Tensor) -> torch.Tensor:\n    return x\n",
"torch-library-define-foreign": "import torch\ntorch.library.define('vllm::x', '(Tensor a) -> Tensor')  # "
                                "<-\n",
"torch-register-autocast-aten": "import torch\ntorch.library.register_autocast('aten::mm', 'cuda', "
                                "torch.float16)  # <-\n",
"torch-register-torch-dispatch": "import torch\n"
                                 "torch.library.register_torch_dispatch('aten::mm', object, print)  # <-\n",
"torch-register-vmap-aten": "import torch\ntorch.library.register_vmap('aten::mm', print)  # <-\n",
"torch-ops-py-impl": "import torch\n"
                     "torch.ops.aten.mm.default.py_impl(torch._C.DispatchKey.CUDA)(print)  # <-\n",
"torch-ops-py-kernels": "import torch\ntorch.ops.aten.mm.default.py_kernels[0] = print  # <-\n",
"torch-c-getattr": "import torch\ngetattr(torch, '_C')._set_cublas_allow_tf32(True)  # <-\n",
"torch-c-getattr-concat": "import torch\ngetattr(getattr(torch, '_' + 'C'), "
                          "'_set_deterministic_algorithms')(True)  # <-\n",
"torch-c-dict": "import torch\ntorch._C.__dict__['_set_cublas_allow_tf32'](True)  # <-\n",
"torch-c-from-import": "from torch._C import _set_cublas_allow_tf32 as f\nf(True)  # <-\n",
"torch-c-jit-fuser": "import torch\ntorch._C._jit_override_can_fuse_on_gpu(True)  # <-\n",
"torch-memory-record-history": "import torch\ntorch.cuda.memory._record_memory_history()  # <-\n",
"torch-memory-dump-snapshot": "import torch\ntorch.cuda.memory._dump_snapshot('/tmp/x.pickle')  # <-\n",
"torch-overrides-patch": "import torch\ntorch.overrides.has_torch_function = lambda *a: False  # <-\n",
"torch-tensor-class-dict": "import torch\nsetattr(torch.Tensor, 'add', print)  # <-\n",
"torch-nn-functional-alias": "import torch.nn.functional as F\nF.silu = print  # <-\n",
"torch-set-float32-via-getattr": "import torch\ngetattr(torch, 'set_float32_' + 'matmul_precision')('high')  "
                                 "# <-\n",
# -- vllm state and registries ------------------------------------------------------------------------------
"vllm-envs-write": "import vllm.envs as envs\nenvs.VLLM_X = 1  # <-\n",
"vllm-envs-dict": "import vllm.envs as envs\nenvs.environment_variables['VLLM_X'] = lambda: '1'  # <-\n",
"vllm-current-platform": "from vllm.platforms import current_platform\ncurrent_platform.device_name = 'x'  # "
                         "<-\n",
"vllm-customop-registry-item": "from vllm.model_executor.custom_op import CustomOp\n"
                               "CustomOp.op_registry['silu_and_mul'] = object  # <-\n",
"vllm-customop-register-oot": "from vllm.model_executor.custom_op import CustomOp\nclass Own:\n    pass\n"
                              "CustomOp.register_oot(name='SiluAndMul')(Own)  # <-\n",
"vllm-quant-register": "from vllm.model_executor.layers.quantization import register_quantization_config\n"
                       "class Own:\n    pass\nregister_quantization_config('fp8')(Own)  # <-\n",
"vllm-quant-methods-append": "from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS\n"
                             "QUANTIZATION_METHODS.append('x')  # <-\n",
"vllm-model-registry-foreign": "from vllm import ModelRegistry\n"
                               "ModelRegistry.register_model('DeepseekV3ForCausalLM', 'x:y')  # <-\n",
# -- files by other spellings -------------------------------------------------------------------------------
"file-io-open": "import io\nio.open('/tmp/x', 'w')  # <-\n",
"file-codecs-open": "import codecs\ncodecs.open('/tmp/x', 'w')  # <-\n",
"file-open-rplus": "open('/tmp/x', 'r+')  # <-\n",
"file-open-exclusive": "open('/tmp/x', 'x')  # <-\n",
"file-open-kwargs-dict": "open('/tmp/x', **{'mode': 'w'})  # <-\n",
"file-open-partial": "functools.partial(open, mode='w')('/tmp/x')  # <-\n",
"file-open-alias": "o = open\no('/tmp/x', 'w')  # <-\n",
"file-builtins-open": "import builtins\ngetattr(builtins, 'open')('/tmp/x', 'w')  # <-\n",
"file-gzip-open": "import gzip\ngzip.open('/tmp/x.gz', 'wb')  # <-\n",
"file-shelve-open": "import shelve\nshelve.open('/tmp/x')  # <-\n",
"file-dbm-open": "import dbm\ndbm.open('/tmp/x', 'c')  # <-\n",
"file-np-memmap": "import numpy as np\nnp.memmap('/tmp/x', mode='w+', shape=(1,))  # <-\n",
"file-np-tofile": "import numpy as np\nnp.zeros(1).tofile('/tmp/x')  # <-\n",
"file-torch-from-file-shared": "import torch\ntorch.from_file('/tmp/x', shared=True, size=8)  # <-\n",
"file-torch-save-kwarg": "import torch\ntorch.save({}, f='/tmp/x')  # <-\n",
"file-path-write-bytes": "import pathlib\npathlib.Path('/tmp/x').write_bytes(b'')  # <-\n",
"file-path-mkdir": "import pathlib\npathlib.Path('/tmp/x').mkdir()  # <-\n",
"file-shutil-move": "import shutil\nshutil.move('/tmp/a', '/tmp/b')  # <-\n",
"file-tempfile-mkdtemp": "import tempfile\ntempfile.mkdtemp()  # <-\n",
"file-tempfile-named-nodelete": "import tempfile\ntempfile.NamedTemporaryFile(delete=False)  # <-\n",
"file-os-fdopen-write": "import os\nos.fdopen(1, 'w')  # <-\n",
"file-print-file": "print('x', file=open('/tmp/x', 'a'))  # <-\n",
"file-stdout-rebind-open": "import sys\nsys.stdout = open('/dev/null')  # <-\n",
# -- exceptions carrying engine objects ---------------------------------------------------------------------
"except-star-group": "try:\n    raise ExceptionGroup('g', [ValueError(AttentionImpl)])\nexcept* ValueError "
                     "as eg:\n"
                     "    eg.exceptions[0].args[0].forward = None  # <-\n",
"exception-cause": "try:\n    raise ValueError() from KeyError(AttentionImpl)\nexcept ValueError as e:\n"
                   "    e.__cause__.args[0].forward = None  # <-\n",
"generator-throw-caught-args": "def g():\n    try:\n        yield\n    except ValueError as e:\n"
                               "        e.args[0].forward = None  # <-\ngen = g()\nnext(gen)\n"
                               "gen.throw(ValueError(AttentionImpl))\n",
"contextmanager-exit-sees-exception": "@contextlib.contextmanager\ndef cm():\n    try:\n        yield\n"
                                      "    except ValueError as e:\n        e.args[0].forward = None  # <-\n"
                                      "with cm():\n    raise ValueError(AttentionImpl)\n",
"exception-add-note-args": "e = ValueError(1)\ne.args = (AttentionImpl,)\ne.args[0].forward = None  # <-\n",
# -- containers and builtins returning their elements --------------------------------------------------------
"sum-of-lists": "sum([[AttentionImpl]], [])[0].forward = None  # <-\n",
"list-repeat": "([AttentionImpl] * 2)[1].forward = None  # <-\n",
"zip-dict": "dict(zip(['k'], [AttentionImpl]))['k'].forward = None  # <-\n",
"dict-double-star-merge": "{**{'k': AttentionImpl}}['k'].forward = None  # <-\n",
"dict-or-merge": "({} | {'k': AttentionImpl})['k'].forward = None  # <-\n",
"next-filter": "next(filter(None, [AttentionImpl])).forward = None  # <-\n",
"itertools-accumulate": "import itertools\nfor c in itertools.accumulate([AttentionImpl], lambda a, b: b):\n"
                        "    c.forward = None  # <-\n",
"itertools-product": "import itertools\nfor (c,) in itertools.product([AttentionImpl]):\n    c.forward = "
                     "None  # <-\n",
"itertools-zip-longest": "import itertools\nfor c, _ in itertools.zip_longest([AttentionImpl], []):\n"
                         "    c.forward = None  # <-\n",
"itertools-groupby": "import itertools\nfor c, _ in itertools.groupby([AttentionImpl]):\n    c.forward = "
                     "None  # <-\n",
"itertools-tee": "import itertools\na, b = itertools.tee([AttentionImpl])\nnext(a).forward = None  # <-\n",
"itertools-cycle": "import itertools\nnext(itertools.cycle([AttentionImpl])).forward = None  # <-\n",
"functools-cache-lambda": "functools.cache(lambda: AttentionImpl)().forward = None  # <-\n",
"operator-itemgetter-list": "import operator\noperator.itemgetter(0)([AttentionImpl]).forward = None  # <-\n",
"tuple-negative-index": "(1, AttentionImpl)[-1].forward = None  # <-\n",
"list-reverse-slice": "[AttentionImpl, 1][::-1][1].forward = None  # <-\n",
"random-choice": "import random\nrandom.choice([AttentionImpl]).forward = None  # <-\n",
"locals-item-in-function": "def f():\n    c = AttentionImpl\n    locals()['c'].forward = None  # <-\n",
"vars-no-arg-in-function": "def f():\n    c = AttentionImpl\n    vars()['c'].forward = None  # <-\n",
"type-three-arg-base": "type('X', (AttentionImpl,), {}).__base__.forward = None  # <-\n",
"new-class-mro": "import types\ntypes.new_class('X', (AttentionImpl,)).__mro__[1].forward = None  # <-\n",
"or-chain": "((None and 1) or AttentionImpl).forward = None  # <-\n",
"list-index-literal": "[None, AttentionImpl][1].forward = None  # <-\n",
"getattr-then-defaults": "getattr(AttentionImpl, 'forward').__defaults__ = ()  # <-\n",
"collections-counter": "import collections\nfor c in collections.Counter([AttentionImpl]):\n    c.forward = "
                       "None  # <-\n",
"sorted-dict-keys": "for c in sorted({AttentionImpl: 1}, key=id):\n    c.forward = None  # <-\n",
"set-pop": "{AttentionImpl}.pop().forward = None  # <-\n",
"frozenset-iter": "for c in frozenset([AttentionImpl]):\n    c.forward = None  # <-\n",
"instance-vars-item": "class K:\n    pass\nk = K()\nk.c = AttentionImpl\nvars(k)['c'].forward = None  # <-\n",
# -- unpacking forms ----------------------------------------------------------------------------------------
"unpack-star-rest": "a, *b = 1, AttentionImpl\nb[0].forward = None  # <-\n",
"unpack-list-target": "[a] = [AttentionImpl]\na.forward = None  # <-\n",
"unpack-nested": "(a, (b,)) = (1, (AttentionImpl,))\nb.forward = None  # <-\n",
"unpack-for-enumerate-nested": "for _, (c,) in enumerate([(AttentionImpl,)]):\n    c.forward = None  # <-\n",
"unpack-with-tuple": "with contextlib.nullcontext((AttentionImpl,)) as (c,):\n    c.forward = None  # <-\n",
"unpack-chained-assign": "a = b = AttentionImpl\nb.forward = None  # <-\n",
"unpack-swap": "a, b = AttentionImpl, 1\na, b = b, a\nb.forward = None  # <-\n",
"unpack-dict-items-loop": "for _, c in {'k': AttentionImpl}.items():\n    c.forward = None  # <-\n",
"unpack-star-in-call": "def g(a, b):\n    b.forward = None\ng(*[1, AttentionImpl])  # <-\n",
# -- threads, signals, loops: process state -----------------------------------------------------------------
"thread-rename-current": "import threading\nthreading.current_thread().name = 'x'  # <-\n",
"thread-main-daemon": "import threading\nthreading.main_thread().daemon = True  # <-\n",
"asyncio-task-factory": "import asyncio\nasyncio.get_event_loop().set_task_factory(None)  # <-\n",
"asyncio-set-event-loop": "import asyncio\nasyncio.set_event_loop(asyncio.new_event_loop())  # <-\n",
"asyncio-slow-callback": "import asyncio\nasyncio.get_event_loop().slow_callback_duration = 0  # <-\n",
"signal-set-wakeup-fd": "import signal\nsignal.set_wakeup_fd(-1)  # <-\n",
"signal-siginterrupt": "import signal\nsignal.siginterrupt(2, True)  # <-\n",
"sys-setdlopenflags": "import sys\nsys.setdlopenflags(0)  # <-\n",
"os-exit": "import os\nos._exit(0)  # <-\n",
"sys-flags-via-vars": "import sys\nvars(sys)['dont_write_bytecode'] = True  # <-\n",
"gc-referrers-dict": "import gc\ngc.get_referrers(AttentionImpl)[0]['AttentionImpl'] = None  # <-\n",
"gc-freeze": "import gc\ngc.freeze()  # <-\n",
"io-default-buffer": "import io\nio.DEFAULT_BUFFER_SIZE = 1  # <-\n",
"copy-deepcopy-dispatch": "import copy as cp\nclass Own:\n    pass\ncp._deepcopy_dispatch[Own] = lambda x, "
                          "m: x  # <-\n",
"json-escape-table": "import json.encoder\njson.encoder.ESCAPE_DCT['a'] = 'b'  # <-\n",
"re-cache-clear": "import re\nre.purge()  # <-\n",
"string-constant-rebind": "import string\nstring.digits = '1'  # <-\n",
"reprlib-repr-limits": "import reprlib\nreprlib.aRepr.maxstring = 1  # <-\n",
"pickle-default-protocol": "import pickle\npickle.DEFAULT_PROTOCOL = 2  # <-\n",
"socket-setdefaulttimeout-alias": "from socket import setdefaulttimeout as t\nt(1.0)  # <-\n",
"sys-stdout-via-dunder": "import sys\nsys.__stdout__.reconfigure(line_buffering=True)  # <-\n",
"builtins-open-rebind": "import builtins\nbuiltins.open = print  # <-\n",
"dunder-builtins-attr-of-module": "import torch\ntorch.__builtins__['print'] = None  # <-\n",
"function-globals-builtins-engine": "AttentionImpl.forward.__globals__['__builtins__']['len'] = None  # <-\n",
# -- torch: more process-wide toggles and registries ---------------------------------------------------------
"torch-set-stream": "import torch\ntorch.cuda.set_stream(torch.cuda.Stream())  # <-\n",
"torch-sync-debug-mode": "import torch\ntorch.cuda.set_sync_debug_mode(1)  # <-\n",
"torch-preferred-blas": "import torch\ntorch.backends.cuda.preferred_blas_library('cublaslt')  # <-\n",
"torch-enable-math-sdp": "import torch\ntorch.backends.cuda.enable_math_sdp(False)  # <-\n",
"torch-sdpa-kernel-entered": "import torch\nfrom torch.nn.attention import sdpa_kernel, SDPBackend\n"
                             "sdpa_kernel(SDPBackend.MATH).__enter__()  # <-\n",
"torch-logging-set-logs": "import torch\nimport logging\ntorch._logging.set_logs(dynamo=logging.DEBUG)  # "
                          "<-\n",
"torch-dynamo-register-backend": "import torch._dynamo\n@torch._dynamo.register_backend(name='x')  # <-\n"
                                 "def be(gm, inputs):\n    return gm\n",
"torch-flush-denormal-alias": "import torch\nfd = torch.set_flush_denormal\nfd(True)  # <-\n",
"torch-interop-threads": "import torch\ntorch.set_num_interop_threads(1)  # <-\n",
"torch-multithreading": "import torch\ntorch.autograd.set_multithreading_enabled(False)  # <-\n",
"torch-default-tensor-type": "import torch\ntorch.set_default_tensor_type(torch.DoubleTensor)  # <-\n",
"torch-warn-always-getattr": "import torch\ngetattr(torch, 'set_warn_always')(True)  # <-\n",
"torch-parametrize-engine-instance": "import torch\nfrom torch.nn.utils import parametrize\nclass "
                                     "P(torch.nn.Module):\n"
                                     "    def forward(self, x):\n        return x\ndef f(layer: L):\n"
                                     "    parametrize.register_parametrization(layer, 'weight', P())  # <-\n",
"torch-module-register-forward-hook-fn": "import torch\n"
                                         "torch.nn.modules.module.register_module_forward_pre_hook(print)  # "
                                         "<-\n",
"torch-compiler-reset-alias": "import torch\nr = torch.compiler.reset\nr()  # <-\n",
"torch-jit-state-disable": "import torch\ntorch.jit._state.disable()  # <-\n",
"torch-ops-load-library-alias": "import torch\nld = torch.ops.load_library\nld('/tmp/x.so')  # <-\n",
"torch-library-fragment-foreign": "import torch\nns = 'vl' + 'lm'\ntorch.library.Library(ns, 'FRAGMENT')  # "
                                  "<-\n",
"torch-library-impl-kw": "import torch\ntorch.library.impl(qualname='aten::mm', types='CUDA', func=print)  # "
                         "<-\n",
"torch-library-register-fake-kw": "import torch\ntorch.library.register_fake(op='vllm::x', func=print)  # "
                                  "<-\n",
"triton-driver-active": "import triton\ntriton.runtime.driver.active = None  # <-\n",
# -- vllm: config contexts and forward context --------------------------------------------------------------
"vllm-set-current-config-entered": "from vllm.config import set_current_vllm_config\n"
                                   "set_current_vllm_config(None).__enter__()  # <-\n",
"vllm-forward-context-global": "import vllm.forward_context as fc\nfc._forward_context = None  # <-\n",
"vllm-parallel-state-global": "from vllm.distributed import parallel_state\n"
                              "parallel_state._TP = None  # <-\n",
"vllm-logger-disabled": "from vllm.logger import init_logger\ninit_logger('vllm').disabled = True  # <-\n",
"vllm-envs-setattr": "import vllm.envs\nsetattr(vllm.envs, 'VLLM_USE_V1', False)  # <-\n",
"vllm-envs-getattr-dunder": "import vllm.envs as envs\nenvs.__getattr__ = lambda n: '1'  # <-\n",
"vllm-registry-models-dict": "from vllm.model_executor.models import registry\n"
                              "registry._TEXT_GENERATION_MODELS['X'] = ('a', 'b')  # <-\n",
# -- files: more writers -------------------------------------------------------------------------------------
"file-os-open-append-flags": "import os\nflags = os.O_APPEND | os.O_WRONLY\nos.open('/tmp/x', flags)  # <-\n",
"file-open-mode-from-dict": "modes = {'w': 'w'}\nopen('/tmp/x', modes['w'])  # <-\n",
"file-open-mode-ternary": "open('/tmp/x', 'w' if True else 'r')  # <-\n",
"file-open-mode-fstring": "m = 'w'\nopen('/tmp/x', f'{m}b')  # <-\n",
"file-csv-writer-open": "import csv\ncsv.writer(open('/tmp/x', 'w'))  # <-\n",
"file-wave-open": "import wave\nwave.open('/tmp/x.wav', 'wb')  # <-\n",
"file-bz2-open": "import bz2\nbz2.BZ2File('/tmp/x.bz2', 'w')  # <-\n",
"file-lzma-open": "import lzma\nlzma.open('/tmp/x.xz', 'w')  # <-\n",
"file-sqlite-backup": "import sqlite3\nsqlite3.connect(':memory:').backup(sqlite3.connect('/tmp/x.db'))  # "
                      "<-\n",
"file-np-savez": "import numpy as np\nnp.savez('/tmp/x.npz', a=1)  # <-\n",
"file-np-savetxt": "import numpy as np\nnp.savetxt('/tmp/x.txt', [1])  # <-\n",
"file-torch-storage-from-file": "import torch\ntorch.UntypedStorage.from_file('/tmp/x', shared=True, "
                                "nbytes=8)  # <-\n",
"file-safetensors-save-file": "from safetensors.torch import save_file\nsave_file({}, '/tmp/x.st')  # <-\n",
"file-path-rename": "import pathlib\npathlib.Path('/tmp/a').rename('/tmp/b')  # <-\n",
"file-path-symlink": "import pathlib\npathlib.Path('/tmp/a').symlink_to('/etc/hostname')  # <-\n",
"file-path-chmod": "import pathlib\npathlib.Path('/tmp/a').chmod(0o777)  # <-\n",
"file-shutil-copytree": "import shutil\nshutil.copytree('/tmp/a', '/tmp/b')  # <-\n",
"file-shutil-make-archive": "import shutil\nshutil.make_archive('/tmp/x', 'zip', '/tmp')  # <-\n",
"file-tempfile-mkstemp-alias": "from tempfile import mkstemp as mk\nmk()  # <-\n",
"file-logging-basicconfig-filename": "import logging\nlogging.basicConfig(filename='/tmp/x.log')  # <-\n",
"file-inductor-cache-dir-env": "import os\nos.environ.setdefault('TORCHINDUCTOR_CACHE_DIR', '/tmp')  # <-\n",
"file-pickle-pickler": "import pickle\npickle.Pickler(open('/tmp/x', 'wb'))  # <-\n",
"file-open-fd-write": "open(1, 'w')  # <-\n",
# -- own-class protocols the scan must follow (values handed to or returned by own dunders) ---------------
"own-new-returns-engine": 'class H:\n    def __new__(cls):\n        return AttentionImpl\nH().forward = None '
                          ' # <-\n',
"own-next-returns-engine": 'class It:\n    def __iter__(self):\n        return self\n    def '
                           '__next__(self):\n        return AttentionImpl\nnext(It()).forward = None  # <-\n',
"own-getattribute-returns-engine": 'class H:\n    def __getattribute__(self, n):\n        return '
                                   'AttentionImpl\nH().x.forward = None  # <-\n',
"own-reduce-copied": "class H:\n    def __reduce__(self):\n        return (getattr, (AttentionImpl, "
                     "'forward'))\ncopy.copy(H()).__defaults__ = ()  # <-\n",
"own-deepcopy-returns-engine": 'class H:\n    def __deepcopy__(self, memo):\n        return AttentionImpl\n'
                               'copy.deepcopy(H()).forward = None  # <-\n',
"own-aenter-returns-engine": 'class H:\n    async def __aenter__(self):\n        return AttentionImpl\n    '
                             'async def __aexit__(self, *a):\n        pass\nasync def f():\n    async with '
                             'H() as c:\n        c.forward = None  # <-\n',
"own-property-lambda": 'class K:\n    p = property(lambda s: AttentionImpl)\nK().p.forward = None  # <-\n',
"own-cached-property": 'class K:\n    @functools.cached_property\n    def p(self):\n        return '
                       'AttentionImpl\nK().p.forward = None  # <-\n',
"own-mro-entries": 'class B:\n    def __mro_entries__(self, bases):\n        return (AttentionImpl,)\nclass '
                   'K(B()):\n    pass\nK.__mro__[1].forward = None  # <-\n',
"own-metaclass-prepare": "class M(type):\n    @classmethod\n    def __prepare__(mcs, name, bases):\n        "
                         "return {'c': AttentionImpl}\nclass K(metaclass=M):\n    pass\nK.c.forward = None  "
                         "# <-\n",
"own-metaclass-call": 'class M(type):\n    def __call__(cls):\n        return AttentionImpl\nclass '
                      'K(metaclass=M):\n    pass\nK().forward = None  # <-\n',
"own-property-setter-param": 'class K:\n    @property\n    def p(self):\n        return 1\n    @p.setter\n   '
                             ' def p(self, v):\n        v.forward = None\nK().p = AttentionImpl  # <-\n',
"own-setitem-param": "class K:\n    def __setitem__(self, k, v):\n        v.forward = None\nK()['x'] = "
                     "AttentionImpl  # <-\n",
"own-setattr-param": 'class K:\n    def __setattr__(self, n, v):\n        v.forward = None\nK().x = '
                     'AttentionImpl  # <-\n',
"own-iadd-param": 'class K:\n    def __iadd__(self, o):\n        o.forward = None\n        return self\nk = '
                  'K()\nk += AttentionImpl  # <-\n',
"own-eq-param": 'class K:\n    def __eq__(self, o):\n        o.forward = None\n        return True\nK() == '
                'AttentionImpl  # <-\n',
"own-contains-param": 'class K:\n    def __contains__(self, o):\n        o.forward = None\n        return '
                      'True\nAttentionImpl in K()  # <-\n',
"own-exit-exception": 'class K:\n    def __enter__(self):\n        return self\n    def __exit__(self, t, e, '
                      'tb):\n        e.args[0].forward = None\n        return True\nwith K():\n    raise '
                      'ValueError(AttentionImpl)  # <-\n',
"own-descriptor-set-param": 'class D:\n    def __set__(self, o, v):\n        v.forward = None\nclass K:\n    '
                            'd = D()\nK().d = AttentionImpl  # <-\n',
"own-call-param": 'class K:\n    def __call__(self, v):\n        v.forward = None\n'
                  'K()(AttentionImpl)  # <-\n',
"own-init-param-stored": 'class K:\n    def __init__(self, v):\n        self.v = v\n'
                         'K(AttentionImpl).v.forward = None  # <-\n',
"singledispatch-register-engine": '@functools.singledispatch\ndef f(x):\n    pass\n@f.register(L)\ndef '
                                  '_(x):\n    x.forward = print  # <-\n',
"singledispatchmethod-register": 'class K:\n    @functools.singledispatchmethod\n    def f(self, x):\n       '
                                 ' pass\n    @f.register(L)\n    def _(self, x):\n        x.forward = print  '
                                 '# <-\n',
"own-classmethod-cls-of-engine-sub": 'class Mine(AttentionImpl):\n    @classmethod\n    def f(cls):\n        '
                                     'cls.__mro__[1].forward = None  # <-\n',
"own-init-subclass-base-write": 'class B:\n    def __init_subclass__(cls, **kw):\n        '
                                'cls.__base__.__base__.forward = None  # <-\nclass Mid(AttentionImpl):\n    '
                                'pass\nclass K(Mid, B):\n    pass\n',
}

OPEN: dict[str, str] = {
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> EngineSignatures:
    root = tmp_path_factory.mktemp("engine")
    for rel, text in ENGINE.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return EngineSignatures(root)


def test_open_ids_are_attacks() -> None:
    assert set(OPEN) <= set(ATTACKS)
    assert set(CROSS_OPEN) <= set(CROSS)
    assert set(OPEN_FALSE_POSITIVES) <= set(HONEST)


@pytest.mark.parametrize("src", [
    pytest.param(s, id=k, marks=[pytest.mark.xfail(strict=True, reason=OPEN[k])] if k in OPEN else [])
    for k, s in ATTACKS.items()])
def test_attack_is_an_error_at_its_line(src: str, engine: EngineSignatures) -> None:
    want = marked(src)
    assert want, "an attack marks its lines"
    assert set(want) <= set(shipped_error_lines(scan(src, engine)))


# -- honest twins: the same forms on the contribution's own objects, copies, and reads of engine state -----
HONEST: dict[str, str] = {
"match-own-objects": "class Own:\n    pass\nmatch [Own]:\n    case [c]:\n        c.y = 1\nmatch {'k': Own}:\n"
                     "    case {'k': d, **rest}:\n        d.y = 1\n        rest['z'] = 1\n",
"match-engine-instance-read": "def f(x):\n    match x:\n        case L(quant_method=q):\n"
                              "            return q.apply\n",
"walrus-own": "class Own:\n    pass\nif (c := Own):\n    c.y = 1\n[(d := x) for x in [Own]]\nd.y = 1\n",
"global-own": "c = None\nclass Own:\n    pass\ndef f():\n    global c\n    c = Own\ndef g():\n    c.y = 1\n",
"nonlocal-own": "def outer():\n    c = None\n    def inner():\n        nonlocal c\n        c = {}\n    "
                "inner()\n"
                "    c['k'] = 1\n",
"del-own": "class Own:\n    y = 1\nd = {'k': 1}\ndel d['k']\ndel Own.y\nx = [1]\ndel x[0]\n"
           "def f(layer: L):\n    v = layer.weight\n    del v\n",
"augassign-own": "xs = []\nxs += [AttentionImpl]\nd = {}\nd |= {'k': AttentionImpl}\nn = 0\nn += 1\n",
"unbound-own-containers": "xs = []\nlist.append(xs, 1)\nd = {}\ndict.__setitem__(d, 'k', 1)\n"
                          "type(d).update(d, k=2)\n",
"copies-of-engine-state": "import os\nimport sys\np = list(sys.path)\np.append('/tmp')\ne = "
                          "dict(os.environ)\n"
                          "e['X'] = '1'\nm = dict(vars(sys))\nm['x'] = 1\n",
"reading-engine-state": "import sys\nimport os\nimport inspect\nimport vllm.v1.attention.backend as bm\n"
                        "x = vars(bm)['AttentionImpl']\ny = sys.modules['vllm'].__name__\nz = "
                        "os.environ.get('X')\n"
                        "w = sys._getframe().f_code.co_name\nv = inspect.signature(AttentionImpl.forward)\n",
"subclass-engine-normally": "class Mine(AttentionImpl):\n    scale = 1\n    def forward(self, *a, **k):\n"
                            "        self.scale = 2\n        return super().forward(*a, **k)\nMine.scale = "
                            "3\n",
"class-body-own": "class K:\n    for c in [1, 2]:\n        pass\n    d = {}\n"
                  "K.c = 3\nK.d['k'] = 1\nvars(K)\n",
"defaults-and-annotations-own": "class Own:\n    pass\ndef f(x: Own = Own()) -> Own:\n    x.y = 1\n    "
                                "return x\n"
                                "x: int = 1\nclass K:\n    y: Own\n",
"decorators-own": "import functools\ndef deco(f):\n    @functools.wraps(f)\n    def w(*a):\n        return "
                  "f(*a)\n"
                  "    return w\n@deco\ndef g():\n    pass\ng.y = 1\n@functools.lru_cache\ndef h():\n    "
                  "return 1\n",
"fstrings-own": "x = 1\ns = f'{x:>{4}}'\nt = '{}'.format(x)\n",
"frames-read": "import sys\nimport inspect\nf = sys._getframe()\nname = f.f_code.co_name\n"
               "loc = inspect.currentframe().f_lineno\n",
"imports-read": "import importlib\nimport sys\nm = importlib.import_module('vllm.v1.attention.backend')\n"
                "c = m.AttentionImpl\nfrom sys import path\nok = '/tmp' in path\n",
"star-import-read": "from vllm.v1.attention.flash import *\nclass Mine(FlashImpl):\n    pass\nMine.forward = "
                    "print\n",
"contextlib-own": "import io\nbuf = io.StringIO()\nwith contextlib.ExitStack() as s:\n    s.callback(print, "
                  "'x')\n"
                  "with contextlib.suppress(ValueError):\n    pass\n",
"async-own": "import asyncio\nclass Own:\n    pass\nasync def f():\n    c = await asyncio.sleep(0, Own)\n    "
             "c.y = 1\n",
"generators-own": "class Own:\n    pass\ndef g():\n    return Own\n    yield\ndef outer():\n    c = yield "
                  "from g()\n"
                  "    c.y = 1\n",
"typing-own": "import typing\nclass Own:\n    pass\nN = typing.NewType('N', int)\nT = typing.TypeVar('T', "
              "bound=Own)\n"
              "def f(cls: type[Own], t: T):\n    cls.y = 1\n    t.y = 2\n",
"typing-engine-read": "import typing\ndef f(cls: type[L]) -> int:\n    return cls.__name__.count('x')\n"
                      "if typing.TYPE_CHECKING:\n    from vllm.v1.attention.flash import FlashImpl\n",
"dataclass-own": "import dataclasses\n@dataclasses.dataclass\nclass R:\n    x: list = "
                 "dataclasses.field(default_factory=list)\n"
                 "    def __post_init__(self):\n        self.x.append(1)\nr = R()\nr.x.append(2)\n"
                 "dataclasses.fields(R)[0].name\n",
"enum-own": "import enum\nclass E(enum.Enum):\n    A = 1\nfor m in E:\n    m.name\nE['A'].value\n",
"operator-own": "import operator\nd = {}\noperator.setitem(d, 'k', 1)\nxs = []\noperator.iadd(xs, [1])\n"
                "operator.attrgetter('real')(1)\n",
"torch-own-namespace": "import torch\n@torch.library.custom_op('kimi_k3::my_op', mutates_args=())\n"
                       "def my_op(x: torch.Tensor) -> torch.Tensor:\n    return x.clone()\n"
                       "lib = torch.library.Library('kimi_k3', 'FRAGMENT')\n"
                       "def run(x):\n    return torch.ops.kimi_k3.my_op(x)\n",
"torch-reads": "import torch\nok = torch.backends.cuda.matmul.allow_tf32\np = "
               "torch.get_float32_matmul_precision()\n"
               "d = torch.get_default_dtype()\n",
"files-read": "import io\nimport pathlib\nimport gzip\nwith open('/etc/hostname') as fh:\n    fh.read()\n"
              "pathlib.Path('/etc/hostname').read_text()\n",
"gzip-into-memory": "import io\nimport gzip\nbuf = io.BytesIO()\n"
                    "with gzip.GzipFile(fileobj=buf, mode='wb') as g:\n    g.write(b'x')\n",
"weakref-own": "import weakref\nclass Own:\n    pass\no = Own()\nr = weakref.ref(o)\nr().y = 1\n",
# -- copies and look-alikes: the value is the contribution's own, whatever it was copied from --------------
"classattr-copy-of-modules": "import sys\nclass K:\n    m = dict(sys.modules)\nK.m['x'] = None\n",
"classattr-copy-of-path": "import sys\nclass K:\n    p = list(sys.path)\nK.p.append('/tmp')\n",
"self-copy-of-environ": "import os\nclass K:\n    def __init__(self):\n        self.env = dict(os.environ)\n"
                       "    def f(self):\n        self.env['X'] = '1'\n",
"copy-copy-of-path": "import sys\ncopy.copy(sys.path).append('/tmp')\n",
"slice-copy-of-path": "import sys\nsys.path[:].append('/tmp')\n",
"star-copy-of-path": "import sys\n[*sys.path].append('/tmp')\n",
"sorted-copy-of-path": "import sys\nsorted(sys.path).append('/tmp')\n",
"environ-copy-method": "import os\nos.environ.copy()['X'] = '1'\n",
"environ-double-star-copy": "import os\n{**os.environ}['X'] = '1'\n",
"dict-comprehension-of-modules": "import sys\n{k: v for k, v in sys.modules.items()}['x'] = None\n",
"deepcopy-of-engine-default": "import copy as cp\nd = cp.deepcopy(AttentionImpl.forward.__defaults__)\nx = "
                              "list(d)\nx.append(1)\n",
"own-list-of-engine-classes": "xs = [AttentionImpl, L]\nxs.append(int)\nxs.clear()\n",
"own-dict-of-engine-modules": "import sys\nmods = {'s': sys}\nmods['t'] = None\ndel mods['s']\n",
"local-shadowing-sys-name": "def f():\n    path = []\n    path.append('/tmp')\n    environ = {}\n    "
                            "environ['X'] = '1'\n",
"own-class-named-like-engine": "class AttentionImplCfg:\n    forward = None\nAttentionImplCfg.forward = "
                               "print\n",
"engine-instance-own-attribute-read": "def f(layer: L):\n    w = layer.weight\n    s = w.shape\n    return "
                                      "s\n",
"own-module-global-rebinding": "import torch\n_cache = {}\ndef f(x):\n    global _cache\n    _cache = {}\n"
                               "    _cache['k'] = torch.zeros(1)\n",
"own-enum-with-callable-value": "import enum\nclass E(enum.Enum):\n    A = 1\n    B = 2\nvals = [m.value for "
                                "m in E]\n"
                                "vals.append(3)\n",
"own-dataclass-fields-read": "import dataclasses\n@dataclasses.dataclass\nclass R:\n    x: int = 0\n"
                             "names = [f.name for f in dataclasses.fields(R)]\nnames.append('y')\n",
"torch-tensor-inplace": "import torch\ndef f(x: torch.Tensor):\n    x.add_(1)\n    x[0] = 2\n    y = "
                        "x.clone()\n"
                        "    y += 1\n",
"own-nn-module-attrs": "import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n        "
                       "super().__init__()\n"
                       "        self.lin = torch.nn.Linear(2, 2)\n        self.register_buffer('b', "
                       "torch.zeros(1))\n"
                       "        self.lin.weight.data.zero_()\n",
# -- round-two forms on own objects, scoped contexts and reads ---------------------------------------------
"exceptions-own": "class Own:\n    pass\ntry:\n    raise ValueError(Own)\nexcept ValueError as e:\n    "
                  "e.args[0].y = 1\n"
                  "try:\n    raise ExceptionGroup('g', [ValueError(Own)])\nexcept* ValueError as eg:\n"
                  "    eg.exceptions[0].args[0].y = 1\n",
"exception-args-rebound-own": "e = ValueError(1)\ne.args = ('x',)\ne.add_note('n')\n",
"container-builtins-own": "import random\nimport collections\nclass Own:\n    pass\nsum([[Own]], [])[0].y = "
                          "1\n"
                          "([Own] * 2)[1].y = 1\n({} | {'k': Own})['k'].y = 1\nrandom.choice([Own]).y = 1\n"
                          "for c in collections.Counter([Own]):\n    c.y = 1\n",
"locals-own": "class Own:\n    pass\ndef f():\n    c = Own\n    locals()['c'].y = 1\n    vars()['c'].y = 2\n",
"unpacking-own": "class Own:\n    pass\na, *b = 1, Own\nb[0].y = 1\n[c] = [Own]\nc.y = 1\nx = y = Own\ny.z = "
                 "1\n",
"threading-reads-and-own-locals": "import threading\nname = threading.current_thread().name\n"
                                  "loc = threading.local()\nloc.x = 1\n",
"torch-stream-context": "import torch\ndef f(x):\n    s = torch.cuda.Stream()\n    with "
                        "torch.cuda.stream(s):\n"
                        "        y = x * 2\n    torch.cuda.current_stream().wait_stream(s)\n    return y\n",
"torch-sdpa-scoped": "import torch\nfrom torch.nn.attention import sdpa_kernel, SDPBackend\ndef f(q, k, v):\n"
                     "    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):\n"
                     "        return torch.nn.functional.scaled_dot_product_attention(q, k, v)\n",
"torch-own-library-folded-namespace": "import torch\nns = 'kimi' + '_k3'\nlib = torch.library.Library(ns, "
                                      "'FRAGMENT')\n"
                                      "lib.define('my_op2(Tensor a) -> Tensor')\n",
"own-parametrization": "import torch\nfrom torch.nn.utils import parametrize\nclass P(torch.nn.Module):\n"
                       "    def forward(self, x):\n        return x\nclass Own(torch.nn.Module):\n"
                       "    def __init__(self):\n        super().__init__()\n        self.lin = "
                       "torch.nn.Linear(2, 2)\n"
                       "        parametrize.register_parametrization(self.lin, 'weight', P())\n",
"file-open-mode-ternary-read": "open('/etc/hostname', 'r' if True else 'rb')\n",
"file-reads": "import csv\nimport numpy as np\nimport torch\nwith open('/etc/hostname') as fh:\n"
              "    csv.reader(fh)\nnp.load('/tmp/x.npy')\ntorch.load('/tmp/x.pt', weights_only=True)\n",
"vllm-config-reads": "import vllm.envs as envs\nfrom vllm.platforms import current_platform\n"
                     "flag = envs.VLLM_USE_V1\ncap = current_platform.get_device_capability()\n",
"own-dunders-with-own-values": "class Own:\n    pass\nclass K:\n    def __setitem__(self, k, v):\n        "
                               "v.y = 1\n"
                               "    def __call__(self, v):\n        v.y = 2\n    def __init__(self, "
                               "v=None):\n"
                               "        self.v = v\nK()['x'] = Own()\nK()(Own())\nK(Own()).v.y = 3\n",
"own-new-returns-own": "class Own:\n    pass\nclass H:\n    def __new__(cls):\n        return Own()\nH().y = "
                       "1\n",
"own-property-own": "class Own:\n    pass\nclass K:\n    p = property(lambda s: Own)\n"
                    "    @functools.cached_property\n    def q(self):\n        return Own()\nK().p.y = 1\n"
                    "K().q.y = 2\n",
"singledispatch-own": "class Own:\n    pass\n@functools.singledispatch\ndef f(x):\n    pass\n"
                      "@f.register(Own)\n"
                      "def _(x):\n    x.y = 1\n@f.register(L)\ndef _(x):\n    return x.weight\n",
"own-metaclass-own": "class Own:\n    pass\nclass M(type):\n    @classmethod\n    def __prepare__(mcs, name, "
                     "bases):\n"
                     "        return {'c': Own}\nclass K(metaclass=M):\n    pass\nK.c.y = 1\n",
"asyncio-own-loop": "import asyncio\nasync def main():\n    return 1\nloop = asyncio.new_event_loop()\n"
                    "loop.slow_callback_duration = 1\nloop.run_until_complete(main())\nloop.close()\n",
}

OPEN_FALSE_POSITIVES: dict[str, str] = {
}


@pytest.mark.parametrize("key", [
    pytest.param(k, id=k, marks=[pytest.mark.xfail(strict=True, reason=OPEN_FALSE_POSITIVES[k])]
                 if k in OPEN_FALSE_POSITIVES else []) for k in HONEST])
def test_honest_twin_is_clean(key: str, engine: EngineSignatures) -> None:
    assert shipped_error_lines(scan(HONEST[key], engine)) == []


# -- across own modules (the harness of tests/test_escapes_hostile21.py: errors by file) -------------------
CROSS: dict[str, tuple[dict[str, str], str]] = {
    "other-module-sys-path-alias": ({"mid.py": "import sys\npath = sys.path\n"},
                                    "from .mid import path\npath.append('/tmp')  # <-\n"),
    "other-module-environ-from-import": ({"mid.py": "from os import environ\n"},
                                         "from .mid import environ\nenviron['X'] = '1'  # <-\n"),
    "other-module-sys-as-attribute": ({"mid.py": "import sys as s\n"},
                                      "from . import mid\nmid.s.modules['x'] = None  # <-\n"),
    "other-module-classbody-for-target": ({"mid.py": LAYERS + "class K:\n    for c in [AttentionImpl]:\n"
                                           "        pass\n"},
                                          "from .mid import K\nK.c.forward = None  # <-\n"),
    "other-module-stopiteration-value": ({"mid.py": LAYERS + "def g():\n    return AttentionImpl\n"
                                                    "    yield\n"},
                                         "from .mid import g\ntry:\n    next(g())\nexcept StopIteration as "
                                         "e:\n"
                                         "    e.value.forward = None  # <-\n"),
    "other-module-newtype": ({"mid.py": LAYERS + "import typing\nN = typing.NewType('N', AttentionImpl)\n"},
                             "from .mid import N\nN.__supertype__.forward = None  # <-\n"),
    "other-module-enum-iterated": ({"mid.py": LAYERS + "import enum\nclass E(enum.Enum):\n    A = "
                                                       "AttentionImpl\n"},
                                   "from .mid import E\nfor m in E:\n    m.value.forward = None  # <-\n"),
    "other-module-match-returns": ({"mid.py": LAYERS + "def pick(x):\n    match x:\n        case _:\n"
                                    "            return AttentionImpl\n"},
                                   "from .mid import pick\npick(1).forward = None  # <-\n"),
    "other-module-bound-append": ({"mid.py": "ap = __import__('sys').path.append\n"},
                                  "from .mid import ap\nap('/tmp')  # <-\n"),
    "other-module-partial-unbound-append": ({"mid.py": "import functools\nimport sys\n"
                                             "add = functools.partial(list.append, sys.path)  # <-\n"},
                                            "from .mid import add\nadd('/tmp')\n"),
    "other-module-os-alias": ({"mid.py": "import os\nos_ = os\n"},
                              "from .mid import os_\nos_.system('true')  # <-\n"),
    "other-module-builtins-vars": ({"mid.py": "import builtins\nB = vars(builtins)\n"},
                                   "from .mid import B\nB['print'] = None  # <-\n"),
    "other-module-returns-environ": ({"mid.py": "def env():\n    import os\n    return os.environ\n"},
                                     "from .mid import env\nenv()['X'] = '1'  # <-\n"),
    "other-module-unbound-setitem-helper": ({"mid.py": "def put(d, k, v):\n    dict.__setitem__(d, k, v)\n"},
                                            "import sys\nfrom .mid import put\nput(sys.modules, 'x', None)  "
                                            "# <-\n"),
    "other-module-classattr-modules": ({"mid.py": "import sys\nclass K:\n    m = sys.modules\n"},
                                       "from .mid import K\nK.m['x'] = None  # <-\n"),
    "other-module-global-rebound-by-call": ({"mid.py": LAYERS + "c = None\ndef init():\n    global c\n"
                                             "    c = AttentionImpl\n"},
                                            "from . import mid\nmid.init()\nmid.c.forward = None  # <-\n"),
    "other-module-dataclass-fields": ({"mid.py": LAYERS + "import dataclasses\n@dataclasses.dataclass\nclass "
                                                          "R:\n"
                                       "    x: object = AttentionImpl\n"},
                                      "from .mid import R\nR.__dataclass_fields__['x'].default.forward = "
                                      "None  # <-\n"),
    "other-module-type-annotation": ({"mid.py": LAYERS + "Cls = type[AttentionImpl]\n"},
                                     "from .mid import Cls\ndef f(c: Cls):\n    c.forward = print  # <-\n"),
    "other-module-asyncio-sleep": ({"mid.py": LAYERS + "import asyncio\ndef later():\n"
                                    "    return asyncio.sleep(0, AttentionImpl)\n"},
                                   "from .mid import later\nasync def f():\n    (await later()).forward = "
                                   "None  # <-\n"),
    "other-module-decorator-path-append": ({"mid.py": "import sys\nreg = sys.path.append\n"},
                                           "from .mid import reg\n@reg  # <-\ndef g():\n    pass\n"),
    "other-module-setitem-dunder": ({"mid.py": "class K:\n    def __setitem__(self, k, v):\n        "
                                               "v.forward = None\n"},
                                    "from .layers import AttentionImpl\nfrom .mid import K\n"
                                    "K()['x'] = AttentionImpl  # <-\n"),
    "other-module-new-returns-engine": ({"mid.py": LAYERS + "class H:\n    def __new__(cls):\n"
                                         "        return AttentionImpl\n"},
                                        "from .mid import H\nH().forward = None  # <-\n"),
    "other-module-list-repeat": ({"mid.py": LAYERS + "S = [AttentionImpl] * 2\n"},
                                 "from .mid import S\nS[1].forward = None  # <-\n"),
    "other-module-modules-from-import": ({"mid.py": "from sys import modules\n"},
                                         "from .mid import modules\nmodules['x'] = None  # <-\n"),
    "other-module-current-thread": ({"mid.py": "import threading\nT = threading.current_thread()\n"},
                                    "from .mid import T\nT.name = 'x'  # <-\n"),
    "other-module-redirect-stdout": ({"mid.py": "import contextlib\nimport io\ndef quiet():\n"
                                      "    return contextlib.redirect_stdout(io.StringIO())\n"},
                                     "from .mid import quiet\nquiet().__enter__()  # <-\n"),
    "other-module-singledispatch-register": ({"mid.py": "import functools\n@functools.singledispatch\n"
                                              "def f(x):\n    pass\n"},
                                             "from .layers import AttentionImpl\nfrom .mid import f\n"
                                             "@f.register(AttentionImpl)\ndef _(x):\n    x.forward = None  # "
                                             "<-\n"),
    "other-module-putenv-alias": ({"mid.py": "import os\nputenv = os.putenv\n"},
                                  "from .mid import putenv\nputenv('X', '1')  # <-\n"),
    "other-module-getframe-alias": ({"mid.py": "import sys\nget = sys._getframe\n"},
                                    "from .mid import get\nget(1).f_globals['X'] = 1  # <-\n"),
    "other-module-global-rebound-to-environ": ({"mid.py": "E = {}\ndef init():\n    global E\n    import os\n"
                                                "    E = os.environ\n"},
                                               "from . import mid\nmid.init()\nmid.E['X'] = '1'  # <-\n"),
    "other-module-builtins-alias": ({"mid.py": "import builtins as b\n"},
                                    "from . import mid\nmid.b.print = None  # <-\n"),
    "other-module-classbody-import": ({"mid.py": "class K:\n    import sys\n"},
                                      "from .mid import K\nK.sys.path.append('/tmp')  # <-\n"),
}
CROSS_OPEN: dict[str, str] = {}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(POLICY)


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


CROSS_HONEST_MID = (LAYERS + "import sys\nimport enum\nclass Own:\n    pass\nclass K:\n    for c in [Own]:\n"
                    "        pass\n    m = {}\nclass E(enum.Enum):\n    A = Own\n"
                    "def g():\n    return Own\n    yield\nPATH = list(sys.path)\n")
CROSS_HONEST = ("from .mid import K, E, g, PATH\nK.c.y = 1\nK.m['x'] = None\nfor m in E:\n    m.value.y = 1\n"
                "PATH.append('/tmp')\ntry:\n    next(g())\nexcept StopIteration as e:\n    e.value.y = 1\n")


def test_cross_module_honest_twin(tmp_path: Path, policy: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _cross_errors(tmp_path, policy, {"mid.py": CROSS_HONEST_MID}, CROSS_HONEST, monkeypatch) == []
