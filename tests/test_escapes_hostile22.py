"""Hostile review 22 (issue 15): rewrites of the effects that round 21's rules (engine instances, own-class
dunders, records, copies, file writers, processes, global state) catch, in forms those rules do not name,
against the static escape scan (single file, then across own modules).

Each attack must be an ERROR at the lines marked `# <-` (a warning does not stop a PR). Attacks that get
through when this file was written are strict xfails: their id is a key of OPEN / CROSS_OPEN with the
one-line reason (what a fixer must handle). The honest twins are model-local code that must stay clean; a
finding on one would be in OPEN_FALSE_POSITIVES."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fasttrack.confinement.engine_signatures import EngineSignatures
from fasttrack.confinement.escapes import Escape
from fasttrack.policy import Policy, load_policy
from tests.escape_marks import marked_lines
from tests.test_escapes import POLICY
from tests.test_escapes_hostile20 import _cross_errors
from tests.test_escapes_hostile21 import LAYERS, _errors_by_file  # the cross-module harness
from tests.test_escapes_hostile_flow import ENGINE, marked, scan

# -- single file: the head of tests/test_escapes_hostile_flow.py binds contextlib, copy, functools,
#    L (RowParallelLinear) and AttentionImpl (engine classes) ---------------------------------------------
ATTACKS: dict[str, str] = {
# -- engine instances: annotation forms the engine-instance rule must read --------------------------------
"inst-typing-optional": "import typing\ndef f(layer: typing.Optional[L]):\n    layer.forward = print  # <-\n",
"inst-optional-name": "from typing import Optional\ndef f(layer: Optional[L]):\n"
                      "    layer.forward = print  # <-\n",
"inst-union": "from typing import Union\ndef f(layer: Union[L, None]):\n    layer.forward = print  # <-\n",
"inst-annotated": "from typing import Annotated\ndef f(layer: Annotated[L, 'tp']):\n"
                  "    layer.forward = print  # <-\n",
"inst-string-optional": "def f(layer: 'typing.Optional[L]'):\n    layer.forward = print  # <-\n",
"inst-typevar-bound": "from typing import TypeVar\nT = TypeVar('T', bound=L)\ndef f(layer: T):\n"
                      "    layer.forward = print  # <-\n",
"inst-typevar-constraints": "import typing\nT = typing.TypeVar('T', L, AttentionImpl)\ndef f(layer: T):\n"
                            "    layer.forward = print  # <-\n",
"inst-list-element": "def f(layers: list[L]):\n    layers[0].forward = print  # <-\n",
"inst-list-loop": "def f(layers: list[L]):\n    for x in layers:\n        x.forward = print  # <-\n",
"inst-sequence-typing": "import typing\ndef f(layers: typing.Sequence[L]):\n"
                        "    layers[0].forward = print  # <-\n",
"inst-dict-values": "def f(layers: dict[str, L]):\n    for x in layers.values():\n"
                    "        x.forward = print  # <-\n",
"inst-tuple-ellipsis": "def f(layers: tuple[L, ...]):\n    layers[0].forward = print  # <-\n",
"inst-star-args": "def f(*layers: L):\n    layers[0].forward = print  # <-\n",
"inst-kwonly": "def f(*, layer: L):\n    layer.forward = print  # <-\n",
"inst-alias-annotation": "Layer = L\ndef f(layer: Layer):\n    layer.forward = print  # <-\n",
"inst-typealias-optional": "import typing\nMaybeLayer = typing.Optional[L]\ndef f(layer: MaybeLayer):\n"
                           "    layer.forward = print  # <-\n",
"inst-local-annotation": "def f(x):\n    layer: L = x\n    layer.forward = print  # <-\n",
"inst-cast": "import typing\ndef f(x):\n    typing.cast(L, x).forward = print  # <-\n",
"inst-cast-string": "import typing\ndef f(x):\n    typing.cast('L', x).forward = print  # <-\n",
"inst-isinstance-narrowing": "def f(x):\n    if isinstance(x, L):\n        x.forward = print  # <-\n",
"inst-getattr-name": "def f(layer: L, name):\n    getattr(layer, name).forward = print  # <-\n",
"inst-attribute-of-instance": "def f(layer: L):\n    layer.quant_method.apply = print  # <-\n",
"inst-named-modules": "def f(layer: L):\n    for _, m in layer.named_modules():\n"
                      "        m.forward = print  # <-\n",
"inst-children": "def f(layer: L):\n    for m in layer.children():\n        m.forward = print  # <-\n",
"inst-modules-apply": "def patch(m):\n    m.forward = print  # <-\ndef f(layer: L):\n"
                      "    layer.apply(patch)\n",
"inst-class-swap": "class Mine(L):\n    pass\ndef f(layer: L):\n    layer.__class__ = Mine  # <-\n",
"inst-dict-setdefault": "def f(layer: L):\n    layer.__dict__.setdefault('forward', print)  # <-\n",
"inst-forward-method-store": "def f(layer: L):\n    layer._forward_method = print  # <-\n",
"inst-types-methodtype": "import types\ndef f(layer: L):\n"
                         "    layer.forward = types.MethodType(print, layer)  # <-\n",
"inst-register-pre-hook-kw": "def f(layer: L):\n"
                             "    layer.register_forward_pre_hook(hook=print, with_kwargs=True)  # <-\n",
"inst-hooks-dict": "def f(layer: L):\n    layer._forward_hooks[0] = print  # <-\n",
"inst-method-defaults": "def f(layer: L):\n    layer.forward.__func__.__defaults__ = (None,)  # <-\n",
"inst-return-annotation": "def get() -> L:\n    ...\ndef f():\n    get().forward = print  # <-\n",
"inst-method-self-annotation": "class K:\n    def f(self, layer: L):\n        self.l = layer\n"
                               "    def g(self):\n        self.l.forward = print  # <-\n",
# -- own-class dunders in forms hfix21b does not read ---------------------------------------------------
"dunder-inherited-own-base": "class B:\n    def __getattr__(self, n):\n        return AttentionImpl\n"
                             "class H(B):\n    pass\nH().x.forward = None  # <-\n",
"dunder-set-after-class": "class H:\n    pass\nH.__getattr__ = lambda s, n: AttentionImpl\n"
                          "H().x.forward = None  # <-\n",
"dunder-setattr-after-class": "class H:\n    pass\nsetattr(H, '__getitem__', lambda s, k: AttentionImpl)\n"
                              "H()[0].forward = None  # <-\n",
"dunder-metaclass-getattr": "class M(type):\n    def __getattr__(cls, n):\n        return AttentionImpl\n"
                            "class H(metaclass=M):\n    pass\nH.x.forward = None  # <-\n",
"dunder-missing": "class D(dict):\n    def __missing__(self, k):\n        return AttentionImpl\n"
                  "D()['x'].forward = None  # <-\n",
"dunder-binary-operator": "class H:\n    def __add__(self, o):\n        return AttentionImpl\n"
                          "(H() + 1).forward = None  # <-\n",
"dunder-unary-operator": "class H:\n    def __neg__(self):\n        return AttentionImpl\n"
                         "(-H()).forward = None  # <-\n",
"dunder-matmul-operator": "class H:\n    def __matmul__(self, o):\n        return AttentionImpl\n"
                          "(H() @ H()).forward = None  # <-\n",
"dunder-reflected-operator": "class H:\n    def __radd__(self, o):\n        return AttentionImpl\n"
                             "(1 + H()).forward = None  # <-\n",
"dunder-await": "class H:\n    def __await__(self):\n        yield\n        return AttentionImpl\n"
                "async def f():\n    c = await H()\n    c.forward = None  # <-\n",
"dunder-aiter": "class H:\n    def __aiter__(self):\n        return self\n    async def __anext__(self):\n"
                "        return AttentionImpl\nasync def f():\n    async for c in H():\n"
                "        c.forward = None  # <-\n",
"dunder-reversed": "class H:\n    def __reversed__(self):\n        return iter([AttentionImpl])\n"
                   "for c in reversed(H()):\n    c.forward = None  # <-\n",
"dunder-copy": "class H:\n    def __copy__(self):\n        return AttentionImpl\n"
               "copy.copy(H()).forward = None  # <-\n",
"dunder-partialmethod": "class H:\n"
                        "    __getattr__ = functools.partialmethod(lambda s, v, n: v, AttentionImpl)\n"
                        "H().x.forward = None  # <-\n",
"dunder-staticmethod-getitem": "class H:\n    __getitem__ = staticmethod(lambda k: AttentionImpl)\n"
                               "H()[0].forward = None  # <-\n",
"dunder-iter-lambda": "class H:\n    __iter__ = lambda self: iter([AttentionImpl])\n"
                      "for c in H():\n    c.forward = None  # <-\n",
"dunder-getattr-via-name": "def ga(self, n):\n    return AttentionImpl\nclass H:\n    __getattr__ = ga\n"
                           "H().x.forward = None  # <-\n",
"iter-callable-sentinel": "for c in iter(lambda: AttentionImpl, None):\n    c.forward = None  # <-\n"
                          "    break\n",
# -- records, containers and lookups --------------------------------------------------------------------
"dataclasses-replace": "import dataclasses\n@dataclasses.dataclass\nclass R:\n    impl: object = None\n"
                       "dataclasses.replace(R(), impl=AttentionImpl).impl.forward = None  # <-\n",
"dataclasses-astuple": "import dataclasses\n@dataclasses.dataclass\nclass R:\n    impl: object\n"
                       "dataclasses.astuple(R(AttentionImpl))[0].forward = None  # <-\n",
"dataclasses-asdict": "import dataclasses\n@dataclasses.dataclass\nclass R:\n    impl: object\n"
                      "dataclasses.asdict(R(AttentionImpl))['impl'].forward = None  # <-\n",
"attrs-evolve": "import attr\n@attr.s\nclass R:\n    impl = attr.ib(default=None)\n"
                "attr.evolve(R(), impl=AttentionImpl).impl.forward = None  # <-\n",
"namedtuple-replace": "import collections\nN = collections.namedtuple('N', 'a')\n"
                      "N(1)._replace(a=AttentionImpl).a.forward = None  # <-\n",
"namedtuple-make": "import collections\nN = collections.namedtuple('N', 'a')\n"
                   "N._make([AttentionImpl]).a.forward = None  # <-\n",
"simplenamespace-kwargs": "import types\nd = {'x': AttentionImpl}\n"
                          "types.SimpleNamespace(**d).x.forward = None  # <-\n",
"enum-value": "import enum\nclass E(enum.Enum):\n    A = AttentionImpl\nE.A.value.forward = None  # <-\n",
"userdict": "import collections\ncollections.UserDict({'a': AttentionImpl})['a'].forward = None  # <-\n",
"mappingproxy": "import types\ntypes.MappingProxyType({'a': AttentionImpl})['a'].forward = None  # <-\n",
"contextvar-default": "import contextvars\ncontextvars.ContextVar('v', default=AttentionImpl).get()"
                      ".forward = None  # <-\n",
"dict-setdefault-return": "{}.setdefault('k', AttentionImpl).forward = None  # <-\n",
"dict-popitem": "{'k': AttentionImpl}.popitem()[1].forward = None  # <-\n",
"list-pop": "[AttentionImpl].pop().forward = None  # <-\n",
"heapq-push": "import heapq\nh = []\nheapq.heappush(h, (0, AttentionImpl))\nh[0][1].forward = None  # <-\n",
"itertools-chain": "import itertools\nfor c in itertools.chain([AttentionImpl]):\n"
                   "    c.forward = None  # <-\n",
"itertools-repeat": "import itertools\nfor c in itertools.repeat(AttentionImpl, 1):\n"
                    "    c.forward = None  # <-\n",
"itertools-islice": "import itertools\nnext(itertools.islice([AttentionImpl], 1)).forward = None  # <-\n",
"max-key": "max([AttentionImpl], key=id).forward = None  # <-\n",
"reversed-list": "for c in reversed([AttentionImpl]):\n    c.forward = None  # <-\n",
"inspect-getmembers": "import inspect\nimport vllm.v1.attention.backend as bm\n"
                      "for _, v in inspect.getmembers(bm):\n    v.forward = None  # <-\n",
"inspect-getattr-static": "import inspect\ninspect.getattr_static(AttentionImpl, 'forward')"
                          ".__defaults__ = ()  # <-\n",
"pkgutil-resolve-name": "import pkgutil\npkgutil.resolve_name('vllm.v1.attention.backend:AttentionImpl')"
                        ".forward = None  # <-\n",
"pydoc-locate": "import pydoc\n"
                "pydoc.locate('vllm.v1.attention.backend.AttentionImpl').forward = None  # <-\n",
"annotations-dict": "def g(x: AttentionImpl):\n    pass\ng.__annotations__['x'].forward = None  # <-\n",
"get-type-hints-value": "import typing\ndef g(x: AttentionImpl):\n    pass\n"
                        "typing.get_type_hints(g)['x'].forward = None  # <-\n",
"signature-annotation": "import inspect\ndef g(x: AttentionImpl):\n    pass\n"
                        "inspect.signature(g).parameters['x'].annotation.forward = None  # <-\n",
"signature-default": "import inspect\ndef g(x=AttentionImpl):\n    pass\n"
                     "inspect.signature(g).parameters['x'].default.forward = None  # <-\n",
"import-module-copy": "import importlib\ncopy.copy(importlib.import_module('vllm.v1.attention.backend'))"
                      ".AttentionImpl.forward = None  # <-\n",
"dunder-import-fromlist": "__import__('vllm.v1.attention.backend', fromlist=['x']).AttentionImpl"
                          ".forward = None  # <-\n",
"weakmethod": "import weakref\n"
              "weakref.WeakMethod(AttentionImpl().forward)().__func__.__defaults__ = ()  # <-\n",
# -- file writers by other names ------------------------------------------------------------------------
"os-open-creat": "import os\nos.open('/tmp/x', os.O_CREAT | os.O_WRONLY)  # <-\n",
"os-utime": "import os\nos.utime('/etc/hostname')  # <-\n",
"os-ftruncate": "import os\nos.ftruncate(3, 0)  # <-\n",
"os-pwrite": "import os\nos.pwrite(3, b'x', 0)  # <-\n",
"os-lchown": "import os\nos.lchown('/tmp/x', 0, 0)  # <-\n",
"os-mknod": "import os\nos.mknod('/tmp/x')  # <-\n",
"os-copy-file-range": "import os\nos.copy_file_range(3, 4, 10)  # <-\n",
"os-sendfile": "import os\nos.sendfile(4, 3, 0, 10)  # <-\n",
"os-chroot": "import os\nos.chroot('/tmp')  # <-\n",
"os-fchdir": "import os\nos.fchdir(3)  # <-\n",
"os-fchmod": "import os\nos.fchmod(3, 0o777)  # <-\n",
"os-posix-fallocate": "import os\nos.posix_fallocate(3, 0, 10)  # <-\n",
"os-removexattr": "import os\nos.removexattr('/tmp/x', 'user.a')  # <-\n",
"shutil-copy": "import shutil\nshutil.copy('/etc/hostname', '/tmp/x')  # <-\n",
"pathlib-hardlink": "import pathlib\npathlib.Path('/tmp/x').hardlink_to('/etc/hostname')  # <-\n",
"pathlib-unbound-write": "import pathlib\npathlib.Path.write_text(pathlib.Path('/tmp/x'), 'x')  # <-\n",
"fcntl-flock": "import fcntl\nfcntl.flock(3, fcntl.LOCK_EX)  # <-\n",
"mmap-access-write": "import mmap\nmmap.mmap(3, 10, access=mmap.ACCESS_WRITE)  # <-\n",
"logging-filehandler": "import logging\nlogging.FileHandler('/tmp/x.log')  # <-\n",
"logging-rotating": "import logging.handlers\nlogging.handlers.RotatingFileHandler('/tmp/x.log')  # <-\n",
"torch-jit-save": "import torch\ntorch.jit.save(None, '/tmp/x.pt')  # <-\n",
"torch-onnx-export": "import torch\ntorch.onnx.export(None, (), '/tmp/x.onnx')  # <-\n",
"pickle-dump-param-handle": "import pickle\ndef dump(obj, fh):\n    pickle.dump(obj, fh)  # <-\n",
"json-dump-param-handle": "import json\ndef dump(obj, fh):\n    json.dump(obj, fh)  # <-\n",
"open-mode-keyword": "open('/tmp/x', mode='w')  # <-\n",
"open-file-keyword": "open(file='/tmp/x', mode='a')  # <-\n",
"open-mode-star": "args = ('/tmp/x', 'w')\nopen(*args)  # <-\n",
"savefig": "import matplotlib.pyplot as plt\nplt.savefig('/tmp/x.png')  # <-\n",
"pandas-to-csv": "import pandas\npandas.DataFrame().to_csv('/tmp/x.csv')  # <-\n",
"tensorboard-writer": "from torch.utils.tensorboard import SummaryWriter\nSummaryWriter('/tmp/tb')  # <-\n",
"profiler-export": "import torch\ntorch.profiler.profile().export_chrome_trace('/tmp/t.json')  # <-\n",
"zip-extractall": "import zipfile\nzipfile.ZipFile('/tmp/a.zip').extractall('/tmp/out')  # <-\n",
"tar-extractall": "import tarfile\ntarfile.open('/tmp/a.tar').extractall('/tmp/out')  # <-\n",
"py-compile": "import py_compile\npy_compile.compile('/tmp/a.py')  # <-\n",
"compileall": "import compileall\ncompileall.compile_dir('/tmp')  # <-\n",
"fileinput-inplace": "import fileinput\nfileinput.input(['/tmp/a'], inplace=True)  # <-\n",
"tempfile-spooled": "import tempfile\ntempfile.SpooledTemporaryFile()  # <-\n",
# -- processes and threads by other names ---------------------------------------------------------------
"os-fork": "import os\nos.fork()  # <-\n",
"os-posix-spawn": "import os\nos.posix_spawn('/bin/true', ['true'], {})  # <-\n",
"os-system-getattr": "import os\ngetattr(os, 'sys' + 'tem')('true')  # <-\n",
"pty-spawn": "import pty\npty.spawn('true')  # <-\n",
"process-pool-from-futures": "from concurrent import futures\nfutures.ProcessPoolExecutor()  # <-\n",
"posixsubprocess": "import _posixsubprocess\n_posixsubprocess.fork_exec()  # <-\n",
"posix-system": "import posix\nposix.system('true')  # <-\n",
"webbrowser-open": "import webbrowser\nwebbrowser.open('http://x')  # <-\n",
"pexpect-spawn": "import pexpect\npexpect.spawn('true')  # <-\n",
"thread-start-new": "import _thread\n_thread.start_new_thread(print, ())  # <-\n",
"os-abort": "import os\nos.abort()  # <-\n",
"psutil-affinity": "import psutil\npsutil.Process().cpu_affinity([0])  # <-\n",
"psutil-kill": "import psutil\npsutil.Process(1).kill()  # <-\n",
"requests-get": "import requests\nrequests.get('http://x')  # <-\n",
"asyncio-open-connection": "import asyncio\nasync def f():\n"
                           "    await asyncio.open_connection('x', 80)  # <-\n",
"urllib3-pool": "import urllib3\nurllib3.PoolManager().request('GET', 'http://x')  # <-\n",
# -- process-wide state by other names ------------------------------------------------------------------
"sys-int-max-str-digits": "import sys\nsys.set_int_max_str_digits(0)  # <-\n",
"sys-setswitchinterval": "import sys\nsys.setswitchinterval(1.0)  # <-\n",
"gc-disable": "import gc\ngc.disable()  # <-\n",
"faulthandler-enable": "import faulthandler\nfaulthandler.enable()  # <-\n",
"locale-setlocale": "import locale\nlocale.setlocale(locale.LC_ALL, 'C')  # <-\n",
"time-tzset": "import time\ntime.tzset()  # <-\n",
"time-clock-settime": "import time\ntime.clock_settime(time.CLOCK_REALTIME, 0.0)  # <-\n",
"decimal-prec": "import decimal\ndecimal.getcontext().prec = 3  # <-\n",
"decimal-default-context": "import decimal\ndecimal.DefaultContext.prec = 3  # <-\n",
"random-seed-alias": "from random import seed as s\ns(0)  # <-\n",
"random-inst-seed": "import random\nrandom._inst.seed(0)  # <-\n",
"random-class-seed": "import random\nrandom.Random.seed(random._inst, 0)  # <-\n",
"numpy-random-seed": "import numpy as np\nnp.random.seed(0)  # <-\n",
"numpy-mtrand-seed": "import numpy as np\nnp.random.mtrand._rand.seed(0)  # <-\n",
"numpy-shuffle-global": "import numpy as np\nnp.random.set_state(np.random.get_state())  # <-\n",
"torch-manual-seed-fn": "import torch\ndef f():\n    torch.manual_seed(0)  # <-\n",
"torch-default-generator": "import torch\ntorch.default_generator.manual_seed(0)  # <-\n",
"torch-cuda-default-generators": "import torch\ntorch.cuda.default_generators[0].manual_seed(0)  # <-\n",
"torch-default-generator-state": "import torch\n"
                                 "torch.default_generator.set_state(torch.ByteTensor())  # <-\n",
"torch-set-default-device": "import torch\ndef f():\n    torch.set_default_device('cuda')  # <-\n",
"torch-set-default-dtype-alias": "import torch\nsdd = torch.set_default_dtype\nsdd(torch.half)  # <-\n",
"torch-set-default-dtype-partial": "import torch\n"
                                   "functools.partial(torch.set_default_dtype, torch.half)()  # <-\n",
"transformers-set-seed": "import transformers\ntransformers.set_seed(0)  # <-\n",
"accelerate-set-seed": "from accelerate.utils import set_seed\nset_seed(0)  # <-\n",
"tf32-alias": "import torch\nm = torch.backends.cuda.matmul\ndef f():\n    m.allow_tf32 = True  # <-\n",
"tf32-from-import": "from torch.backends import cudnn\ndef f():\n    cudnn.benchmark = True  # <-\n",
"tf32-import-as": "import torch.backends.cudnn as cb\ndef f():\n    cb.allow_tf32 = False  # <-\n",
"tf32-setattr": "import torch\ndef f():\n    setattr(torch.backends.cudnn, 'allow_tf32', False)  # <-\n",
"tf32-via-param": "import torch\ndef setflag(mod):\n    mod.allow_tf32 = False\ndef f():\n"
                  "    setflag(torch.backends.cudnn)  # <-\n",
"inductor-config-alias": "from torch._inductor import config as ic\ndef f():\n"
                         "    ic.max_autotune = True  # <-\n",
"inductor-config-dict": "import torch._inductor.config\ndef f():\n"
                        "    vars(torch._inductor.config)['max_autotune'] = True  # <-\n",
"inductor-config-load": "import torch._inductor.config\ndef f():\n"
                        "    torch._inductor.config.load_config({'max_autotune': True})  # <-\n",
"dynamo-config-update": "import torch._dynamo\ndef f():\n"
                        "    torch._dynamo.config.update({'cache_size_limit': 1})  # <-\n",
"fx-experimental-config": "import torch.fx.experimental._config as fc\n"
                          "fc.translation_validation = True  # <-\n",
"triton-knobs": "import triton\ntriton.knobs.cache.dir = '/tmp'  # <-\n",
"torch-cuda-tunable": "import torch\ntorch.cuda.tunable.enable(True)  # <-\n",
"torch-cuda-change-allocator": "import torch\ntorch.cuda.change_current_allocator(None)  # <-\n",
"torch-cuda-reset-peak": "import torch\ntorch.cuda.reset_peak_memory_stats()  # <-\n",
"torch-cuda-profiler-start": "import torch\ntorch.cuda.profiler.start()  # <-\n",
"torch-cuda-cudart": "import torch\ntorch.cuda.cudart().cudaProfilerStart()  # <-\n",
"torch-profiler-start": "import torch\ntorch.profiler.profile().start()  # <-\n",
"torch-forward-ad-level": "import torch.autograd.forward_ad as fwad\nfwad.enter_dual_level()  # <-\n",
"torch-grad-mode-call": "import torch\ntorch.set_grad_enabled(False)  # <-\n",
"torch-grad-mode-module": "import torch\ntorch.autograd.grad_mode.set_grad_enabled(False)  # <-\n",
"sys-stdout-reconfigure": "import sys\nsys.stdout.reconfigure(line_buffering=True)  # <-\n",
"sys-stdin-close": "import sys\nsys.stdin.close()  # <-\n",
"sys-dont-write-bytecode": "import sys\nsys.dont_write_bytecode = True  # <-\n",
"resource-prlimit": "import resource\nresource.prlimit(0, resource.RLIMIT_NOFILE, (1, 1))  # <-\n",
"asyncio-loop-debug": "import asyncio\nasyncio.get_event_loop().set_debug(True)  # <-\n",
"asyncio-loop-handler": "import asyncio\nasyncio.get_event_loop().set_exception_handler(print)  # <-\n",
"threading-stack-size": "import threading\nthreading.stack_size(1 << 20)  # <-\n",
"logging-root-level": "import logging\nlogging.root.setLevel(logging.ERROR)  # <-\n",
"logging-torch-logger": "import logging\nlogging.getLogger('torch').setLevel(logging.ERROR)  # <-\n",
"logging-vllm-child": "import logging\n"
                      "logging.getLogger('vllm.model_executor').setLevel(logging.ERROR)  # <-\n",
"logging-kw-name": "import logging\nlogging.getLogger(name='vllm').setLevel(logging.ERROR)  # <-\n",
"logging-init-logger-vllm": "from vllm.logger import init_logger\ninit_logger('vllm').setLevel(50)  # <-\n",
"logging-propagate": "import logging\nlogging.getLogger('vllm').propagate = False  # <-\n",
"logging-manager-dict": "import logging\nlogging.Logger.manager.loggerDict['vllm'].disabled = True  # <-\n",
"environb": "import os\nos.environb[b'X'] = b'1'  # <-\n",
"environ-dunder-setitem": "import os\nos.environ.__setitem__('X', '1')  # <-\n",
"environ-type-setitem": "import os\ntype(os.environ).__setitem__(os.environ, 'X', '1')  # <-\n",
"environ-mutablemapping-update": "import os\nimport collections.abc\n"
                                 "collections.abc.MutableMapping.update(os.environ, X='1')  # <-\n",
"linecache-cache": "import linecache\nlinecache.cache['x'] = (1, None, ['x'], 'x')  # <-\n",
"abc-register": "import collections.abc\nclass Own:\n    pass\ncollections.abc.Mapping.register(Own)  # <-\n",
"warnings-showwarning": "import warnings\nwarnings.showwarning = print  # <-\n",
"sys-breakpointhook": "import sys\nsys.breakpointhook = print  # <-\n",
"datasets-disable-caching": "import datasets\ndatasets.disable_caching()  # <-\n",
# -- added after the first fixes: rewrites of the new families --------------------------------------------
"inst-dotted-string-annotation": "def f(layer: 'vllm.model_executor.layers.linear.RowParallelLinear'):\n"
                                 "    layer.forward = print  # <-\n",
"inst-union-string-part": "import typing\ndef f(layer: typing.Union['L', None]):\n"
                          "    layer.forward = print  # <-\n",
"inst-default-none": "def f(layer: L = None):\n    layer.forward = print  # <-\n",
"own-dict-subclass-kwargs": "class D(dict):\n    pass\nD(x=AttentionImpl)['x'].forward = None  # <-\n",
"own-list-subclass": "class LL(list):\n    pass\nLL([AttentionImpl])[0].forward = None  # <-\n",
"stdout-reconfigure-unbound": "import io\nimport sys\n"
                              "io.TextIOWrapper.reconfigure(sys.stdout, line_buffering=True)  # <-\n",
"stdout-via-dict": "import sys\nsys.__dict__['stdout'].reconfigure(line_buffering=True)  # <-\n",
"torch-generator-unbound-seed": "import torch\n"
                                "torch.Generator.manual_seed(torch.default_generator, 0)  # <-\n",
"random-reinit": "import random\nrandom.Random.__init__(random._inst, 0)  # <-\n",
"logging-computed-vllm-name": "import logging\n"
                              "logging.getLogger('VLLM'.lower()).setLevel(logging.ERROR)  # <-\n",
"logging-unbound-setlevel": "import logging\nlogging.Logger.setLevel(logging.getLogger('vllm'), 10)  # <-\n",
"path-open-starred-mode": "import pathlib\npathlib.Path('/tmp/x').open(*('w',))  # <-\n",
"distutils-copy-file": "from distutils.file_util import copy_file\n"
                       "copy_file('/etc/hostname', '/tmp/x')  # <-\n",
"atexit-clear": "import atexit\natexit._clear()  # <-\n",
"atexit-unregister": "import atexit\natexit.unregister(print)  # <-\n",
"tracemalloc-stop": "import tracemalloc\ntracemalloc.stop()  # <-\n",
"os-family-from-import": "from os import utime as u\nu('/tmp/x')  # <-\n",
"stdout-getattr": "import sys\ngetattr(sys.stdout, 'reconfigure')(line_buffering=True)  # <-\n",
}

OPEN: dict[str, str] = {
}


def shipped_error_lines(found: list[Escape]) -> list[int]:
    """The lines a shipping file has an error on: an error, or a warning the analysis does not mark
    `lenient` (facts.escapes raises every other escape in shipping code to an error)."""
    return sorted({e.line for e in found if e.severity == "error" or not e.lenient})


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


@pytest.mark.parametrize("src", [
    pytest.param(s, id=k, marks=[pytest.mark.xfail(strict=True, reason=OPEN[k])] if k in OPEN else [])
    for k, s in ATTACKS.items()])
def test_attack_is_an_error_at_its_line(src: str, engine: EngineSignatures) -> None:
    want = marked(src)
    assert want, "an attack marks its lines"
    assert set(want) <= set(shipped_error_lines(scan(src, engine)))


# honest twins: the same forms on the contribution's own objects
HONEST = """
import dataclasses
import io
import itertools
import logging
import os
import random
import typing
from typing import Optional, Annotated, TypeVar
import numpy as np
import torch
class Own:
    pass
class Mine(L):
    pass
T = TypeVar('T', bound=Mine)
def use(layer: typing.Optional[L], layers: list[L], m: Annotated[L, 'x'], t: T):
    layer.weight_scale = 1
    layers[0].weight_scale = 1
    m.weight_scale = 1
    t.forward = print
    for x in layers:
        x.scale = 2
    return layer(1)
class B:
    def __getattr__(self, n):
        return Own
class H(B):
    def __add__(self, o):
        return Own
    def __neg__(self):
        return Own
H().x.y = 1
(H() + 1).y = 1
(-H()).y = 1
@dataclasses.dataclass
class R:
    impl: object = None
dataclasses.replace(R(), impl=Own).impl.y = 1
dataclasses.astuple(R(Own))[0].y = 1
{}.setdefault('k', Own).y = 1
for c in itertools.chain([Own]):
    c.y = 1
for c in iter(lambda: Own, None):
    c.y = 1
    break
def g(x: Own):
    pass
g.__annotations__['x'].y = 1
import heapq
import inspect
typing.get_type_hints(g)['x'].y = 1
inspect.signature(g)
for c in itertools.islice([Own], 1):
    c.y = 1
h = []
heapq.heappush(h, (0, Own))
dataclasses.astuple(R(Own))
inspect.getattr_static(Own, 'y')
from vllm.logger import init_logger
log = init_logger(__name__)
log.setLevel(logging.DEBUG)
{}.get('k', Own).y = 1
class M2(type):
    def __getattr__(cls, n):
        return Own
class HM(metaclass=M2):
    pass
HM.x.y = 1
class OwnModule(torch.nn.Module):
    pass
def init_own(mod):
    mod.forward = print
OwnModule().apply(init_own)
def init_weights(mod):
    mod.weight_scale = 1
def build(layer: L):
    layer.apply(init_weights)
    layer.quant_method.scale = 2
    layer.quant_method.dtype = torch.float16
import collections
NT = collections.namedtuple('NT', 'a')
NT(Own)._replace(a=Own).a.y = 1
for c in reversed([Own]):
    c.y = 1
with open('/etc/hostname', mode='r') as fh:
    pass
os.stat('/etc/hostname')
os.path.exists('/tmp')
buf = io.BytesIO()
torch.save({}, buf)
rng = random.Random(0)
rng.seed(1)
gen = torch.Generator()
gen.manual_seed(0)
np.random.default_rng(0)
logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)
logging.getLogger('vllm').info('x')
os.environ.get('X')
def f():
    with torch.no_grad():
        pass
    with torch.set_grad_enabled(False):
        pass
    torch.cuda.max_memory_allocated()
import json
import sys
import zipfile
import psutil
sys.stdout.write('x')
sys.stderr.flush()
os.getenv('X')
os.cpu_count()
os.listdir('/tmp')
os.path.join('a', 'b')
fd = os.open('/etc/hostname', os.O_RDONLY | os.O_CLOEXEC)
os.read(fd, 1)
sbuf = io.StringIO()
json.dump({}, sbuf)
json.dumps({})
zipfile.ZipFile('/tmp/a.zip').namelist()
psutil.Process().memory_info()
psutil.virtual_memory()
torch.cuda.cudart().cudaHostRegister(0, 0, 0)
torch.cuda.get_device_properties(0)
torch.cuda.current_stream().synchronize()
def prof():
    with torch.profiler.profile() as p:
        with torch.profiler.record_function('x'):
            pass
    with torch.autograd.grad_mode.no_grad():
        pass
    return p
"""
# fixed by hesc22s: `os.open` is judged by its flags (was: every `os.open` is FT146)
OPEN_FALSE_POSITIVES: dict[str, str] = {
}
HONEST_FP: dict[str, str] = {
    "os-open-read-only": "import os\nos.open('/etc/hostname', os.O_RDONLY)\n",
    # found by the vLLM tree test (kv_cache_utils.py: `os.urandom(32).hex()`): a method of the plain value
    # an os read returns is judged as `os.urandom().hex`, which no pattern allowed
    "os-read-value-methods": "import os\nos.urandom(32).hex()\nos.getcwd().split('/')\n"
                             "os.environ.get('X', '').lower()\nos.path.join('a', 'b').endswith('b')\n"
                             "os.stat('/').st_size.bit_length()\nos.listdir('/').sort()\n",
}


@pytest.mark.parametrize("key", [
    pytest.param(k, id=k, marks=[pytest.mark.xfail(strict=True, reason=OPEN_FALSE_POSITIVES[k])]
                 if k in OPEN_FALSE_POSITIVES else []) for k in HONEST_FP])
def test_honest_form_is_clean(key: str, engine: EngineSignatures) -> None:
    assert shipped_error_lines(scan(HONEST_FP[key], engine)) == []


def test_honest_twin_is_clean(engine: EngineSignatures) -> None:
    assert shipped_error_lines(scan(HONEST, engine)) == []


# -- across own modules (the harness of tests/test_escapes_hostile20.py: errors of impl.py) ---------------
CROSS: dict[str, tuple[dict[str, str], str]] = {
    "other-module-pep562-getattr": (
        {"mid.py": LAYERS + "def __getattr__(name):\n    return AttentionImpl\n"},
        "from . import mid\nmid.anything.forward = None  # <-\n"),
    "other-module-pep562-from-import": (
        {"mid.py": LAYERS + "def __getattr__(name):\n    return AttentionImpl\n"},
        "from .mid import anything\nanything.forward = None  # <-\n"),
    "other-module-inherited-dunder": (
        {"mid.py": LAYERS + "class B:\n    def __getattr__(self, n):\n        return AttentionImpl\n"},
        "from .mid import B\nclass H(B):\n    pass\nH().x.forward = None  # <-\n"),
    "other-module-dunder-set-later": (
        {"mid.py": LAYERS + "class H:\n    pass\nH.__getitem__ = lambda s, k: AttentionImpl\n"},
        "from .mid import H\nH()[0].forward = None  # <-\n"),
    "other-module-operator-dunder": (
        {"mid.py": LAYERS + "class H:\n    def __add__(self, o):\n        return AttentionImpl\n"},
        "from .mid import H\n(H() + 1).forward = None  # <-\n"),
    "other-module-typevar-bound": (
        {"mid.py": "from vllm.model_executor.layers.linear import RowParallelLinear\nimport typing\n"
         "T = typing.TypeVar('T', bound=RowParallelLinear)\nOptL = typing.Optional[RowParallelLinear]\n"},
        "from .mid import T, OptL\ndef f(a: T, b: OptL):\n    a.forward = print  # <-\n"
        "    b.forward = print  # <-\n"),
    "other-module-import-module": (
        {"mid.py": "import importlib\nM = importlib.import_module('vllm.v1.attention.backend')\n"},
        "from .mid import M\nM.AttentionImpl.forward = None  # <-\n"),
    "other-module-record-replace": (
        {"mid.py": LAYERS + "import dataclasses\n@dataclasses.dataclass\nclass R:\n    impl: object = None\n"
         "def make():\n    return dataclasses.replace(R(), impl=AttentionImpl)\n"},
        "from .mid import make\nmake().impl.forward = None  # <-\n"),
    "other-module-file-writer-helper": (
        {"mid.py": "def w(p, m):\n    return open(p, m)  # <-\n"},
        "from .mid import w\nw('/tmp/x', 'w')\n"),
}
CROSS_OPEN: dict[str, str] = {
}


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


CROSS_HONEST_MID = ("class Own:\n    pass\ndef __getattr__(name):\n    return Own\n"
                    "class B:\n    def __getattr__(self, n):\n        return Own\n"
                    "class H:\n    def __add__(self, o):\n        return Own\n")
CROSS_HONEST = ("from . import mid\nfrom .mid import B, H\nmid.anything.y = 1\nclass K(B):\n    pass\n"
                "K().x.y = 1\n(H() + 1).y = 1\n")


def test_cross_module_honest_twin(tmp_path: Path, policy: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _cross_errors(tmp_path, policy, {"mid.py": CROSS_HONEST_MID}, CROSS_HONEST, monkeypatch) == []
