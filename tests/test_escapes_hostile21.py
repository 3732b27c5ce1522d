"""Hostile review 21 (issue 15): escapes a fast-track PR to vLLM could use that earlier rounds did not try,
against the static escape scan (single file, then across own modules) and the runtime effect trace.

Each attack must be an ERROR at the lines marked `# <-` (a warning does not stop a PR). Attacks that get
through when this file was written are strict xfails: their id is a key of OPEN / CROSS_OPEN / RUNTIME_OPEN
with the one-line reason (what a fixer must handle). The honest twins are model-local code that must stay
clean; a finding on one would be in OPEN_FALSE_POSITIVES."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fasttrack.confinement.engine_signatures import EngineSignatures
from fasttrack.confinement.trace.facts import TraceFacts
from fasttrack.confinement.trace.gather import gather_trace
from fasttrack.findings import Finding
from fasttrack.policy import Policy, load_policy
from tests.escape_marks import error_lines, marked_lines
from tests.test_escapes import POLICY
from tests.test_escapes_hostile20 import _cross_errors
from tests.test_escapes_hostile_flow import ENGINE, marked, scan
from tests.test_escapes_own_bases import contribution, ft_errors, write
from tests.test_trace import _context, _findings

# -- single file: the head of tests/test_escapes_hostile_flow.py binds contextlib, copy, functools,
#    L (RowParallelLinear) and AttentionImpl (engine classes) ---------------------------------------------
ATTACKS: dict[str, str] = {
# -- exceptions / match / walrus / comprehensions / lambdas / defaults ------------------------------------
"exception-args": """
try:
    raise ValueError(AttentionImpl)
except ValueError as e:
    e.args[0].forward = None  # <-
""",
"exception-attribute": """
class Err(Exception):
    pass
def f():
    x = Err()
    x.impl = AttentionImpl
    try:
        raise x
    except Err as e:
        e.impl.forward = None  # <-
""",
"exception-context": """
def f():
    try:
        try:
            raise KeyError(AttentionImpl)
        except KeyError:
            raise ValueError()
    except ValueError as e:
        e.__context__.args[0].forward = None  # <-
""",
"match-capture": """
def f():
    match AttentionImpl:
        case c:
            c.forward = None  # <-
""",
"match-sequence": """
def f():
    match [1, AttentionImpl]:
        case [_, c]:
            c.forward = None  # <-
""",
"match-mapping": """
def f():
    match {'k': AttentionImpl}:
        case {'k': c}:
            c.forward = None  # <-
""",
"match-as-class-pattern": """
def f():
    match AttentionImpl:
        case type() as c:
            c.forward = None  # <-
""",
"match-star-rest": """
def f():
    match (AttentionImpl, 1):
        case [*rest, 1]:
            rest[0].forward = None  # <-
""",
"match-class-keyword": """
def f(obj: AttentionImpl):
    match obj:
        case AttentionImpl(forward=fw):
            fw.__func__.__defaults__ = ()  # <-
""",
"walrus-in-comprehension-leaks": """
def f():
    [(c := x) for x in (AttentionImpl,)]
    c.forward = None  # <-
""",
"comprehension-setattr": """
[setattr(x, 'forward', None) for x in (AttentionImpl,)]  # <-
""",
"generator-any-setattr": """
any(setattr(x, 'forward', None) for x in (AttentionImpl,))  # <-
""",
"dict-comprehension-values": """
d = {k: v for k, v in [('a', AttentionImpl)]}
d['a'].forward = None  # <-
""",
"lambda-default": """
f = lambda c=AttentionImpl: setattr(c, 'forward', None)  # <-
f()
""",
"def-default": """
def f(c=AttentionImpl):
    c.forward = None  # <-
""",
"kwonly-default": """
def f(*, c=AttentionImpl):
    c.forward = None  # <-
""",
"defaults-tuple-read": """
def g(c=AttentionImpl):
    pass
g.__defaults__[0].forward = None  # <-
""",
"closure-cell": """
def outer():
    c = AttentionImpl
    def inner():
        return c
    return inner
outer().__closure__[0].cell_contents.forward = None  # <-
""",
"global-rebinding": """
X = None
def g():
    global X
    X = AttentionImpl
def h():
    X.forward = None  # <-
""",
"nonlocal-rebinding": """
def outer():
    x = None
    def set_():
        nonlocal x
        x = AttentionImpl
    set_()
    x.forward = None  # <-
""",
"conditional-expression": """
(AttentionImpl if len('a') else None).forward = None  # <-
""",
"boolean-or": """
(None or AttentionImpl).forward = None  # <-
""",
"starred-list-index": """
[*[AttentionImpl]][0].forward = None  # <-
""",
"next-iter": """
next(iter([AttentionImpl])).forward = None  # <-
""",
"reduce-returns-it": """
functools.reduce(lambda a, b: b, [1, AttentionImpl]).forward = None  # <-
""",
"max-key": """
max([AttentionImpl], key=id).forward = None  # <-
""",
"sorted-index": """
sorted([AttentionImpl], key=id)[0].forward = None  # <-
""",
"dict-fromkeys-list": """
list(dict.fromkeys([AttentionImpl]))[0].forward = None  # <-
""",
"copy-of-a-class-is-the-class": """
copy.copy(AttentionImpl).forward = None  # <-
""",
"deepcopy-of-a-class": """
copy.deepcopy(AttentionImpl).forward = None  # <-
""",
"mro-call": """
AttentionImpl.mro()[0].forward = None  # <-
""",
"subclasses-of-engine": """
for s in AttentionImpl.__subclasses__():
    s.forward = None  # <-
""",
"object-subclasses-walk": """
for c in object.__subclasses__():
    if c.__name__ == 'AttentionImpl':
        c.forward = None  # <-
""",
# -- the setattr family by other names ---------------------------------------------------------------
"type-setattr": """
type.__setattr__(AttentionImpl, 'forward', None)  # <-
""",
"object-setattr-on-instance-class": """
object.__setattr__(L, 'x', 1)  # <-
""",
"setattr-alias": """
s = setattr
s(AttentionImpl, 'forward', None)  # <-
""",
"builtins-setattr": """
import builtins
builtins.setattr(AttentionImpl, 'forward', None)  # <-
""",
"getattr-builtins-setattr": """
import builtins
getattr(builtins, 'set' + 'attr')(AttentionImpl, 'forward', None)  # <-
""",
"map-setattr": """
list(map(setattr, [AttentionImpl], ['forward'], [None]))  # <-
""",
"map-lambda": """
list(map(lambda c: setattr(c, 'forward', None), [AttentionImpl]))  # <-
""",
"starmap-setattr": """
import itertools
list(itertools.starmap(setattr, [(AttentionImpl, 'forward', None)]))  # <-
""",
"operator-methodcaller": """
import operator
operator.methodcaller('__setattr__', 'x', 1)(L())
operator.methodcaller('mro')(AttentionImpl)[0].forward = None  # <-
""",
"attrgetter-of-engine-module": """
import operator
import vllm.v1.attention.backend as eng
operator.attrgetter('AttentionImpl')(eng).forward = None  # <-
""",
"delattr-engine": """
delattr(AttentionImpl, 'forward')  # <-
""",
"del-statement": """
del AttentionImpl.forward  # <-
""",
"forward-globals": """
AttentionImpl.forward.__globals__['X'] = 1  # <-
""",
"forward-globals-update": """
AttentionImpl.forward.__globals__.update(X=1)  # <-
""",
"inspect-getmodule": """
import inspect
inspect.getmodule(AttentionImpl).X = 1  # <-
""",
"sys-modules-of-module-attr": """
import sys
sys.modules[AttentionImpl.__module__].X = 1  # <-
""",
"frame-globals": """
import sys
sys._getframe(1).f_globals['X'] = 1  # <-
""",
"function-type-in-engine-globals": """
import types
import vllm.v1.attention.backend as eng
types.FunctionType((lambda: None).__code__, eng.__dict__)
g = types.FunctionType(compile('X = 1', 'x', 'exec'), vars(eng))  # <-
""",
"exec-in-engine-dict": """
import vllm.v1.attention.backend as eng
exec('AttentionImpl.forward = None', eng.__dict__)  # <-
""",
"code-replace": """
AttentionImpl.forward.__code__ = AttentionImpl.forward.__code__.replace()  # <-
""",
# -- own classes laundering: descriptors, properties, __getattr__, hooks -----------------------------
"own-getattr-returns-engine": """
class H:
    def __getattr__(self, name):
        return AttentionImpl
H().anything.forward = None  # <-
""",
"own-class-getitem": """
class H:
    def __class_getitem__(cls, item):
        return AttentionImpl
H[int].forward = None  # <-
""",
"own-descriptor-get": """
class D:
    def __get__(self, obj, owner):
        return AttentionImpl
class H:
    d = D()
H().d.forward = None  # <-
""",
"own-init-subclass-kw": """
class Base:
    def __init_subclass__(cls, impl=None, **kw):
        impl.forward = None
class Sub(Base, impl=AttentionImpl):  # <-
    pass
""",
"own-set-name-owner": """
class D:
    def __set_name__(self, owner, name):
        owner.__mro__[1].forward = None  # <-
class Sub(AttentionImpl):
    d = D()
""",
"own-iter-yields-engine": """
class H:
    def __iter__(self):
        yield AttentionImpl
for c in H():
    c.forward = None  # <-
""",
"own-enter-returns-engine": """
class H:
    def __enter__(self):
        return AttentionImpl
    def __exit__(self, *a):
        return False
with H() as c:
    c.forward = None  # <-
""",
"contextmanager-yields-engine": """
@contextlib.contextmanager
def cm():
    yield AttentionImpl
with cm() as c:
    c.forward = None  # <-
""",
"exitstack-enter-context": """
with contextlib.ExitStack() as st:
    c = st.enter_context(contextlib.nullcontext(AttentionImpl))
    c.forward = None  # <-
""",
"own-call-returns-engine": """
class H:
    def __call__(self):
        return AttentionImpl
H()().forward = None  # <-
""",
"own-getitem-returns-engine": """
class H:
    def __getitem__(self, k):
        return AttentionImpl
H()[0].forward = None  # <-
""",
"del-hook": """
class H:
    def __del__(self):
        AttentionImpl.forward = None  # <-
""",
"weakref-finalize-setattr": """
import weakref
class H:
    pass
h = H()
weakref.finalize(h, setattr, AttentionImpl, 'forward', None)  # <-
""",
"atexit-register-setattr": """
import atexit
atexit.register(setattr, AttentionImpl, 'forward', None)  # <-
""",
"dataclass-default-factory": """
import dataclasses
def patch():
    AttentionImpl.forward = None  # <-
    return 1
@dataclasses.dataclass
class C:
    x: int = dataclasses.field(default_factory=patch)
""",
"async-await-engine": """
async def get():
    return AttentionImpl
async def f():
    c = await get()
    c.forward = None  # <-
""",
"typing-get-type-hints-eval": """
import typing
def f(x: 'setattr(AttentionImpl, "forward", None)'):
    pass
typing.get_type_hints(f)  # <-
""",
"fstring-format-spec-side-effect": """
class F:
    def __format__(self, spec):
        return ''
s = f"{F():{setattr(AttentionImpl, 'forward', None)}}"  # <-
""",
"class-decorator-from-same-file-patches": """
def deco(cls):
    cls.__mro__[1].forward = None  # <-
    return cls
@deco
class Sub(AttentionImpl):
    pass
""",
# -- process-wide state ---------------------------------------------------------------------------------
"threading-settrace": "import threading\nthreading.settrace(print)  # <-\n",
"threading-setprofile": "import threading\nthreading.setprofile(print)  # <-\n",
"threading-settrace-all": "import threading\nthreading.settrace_all_threads(print)  # <-\n",
"sys-setprofile": "import sys\nsys.setprofile(print)  # <-\n",
"sys-monitoring": "import sys\nsys.monitoring.use_tool_id(3, 'x')  # <-\n",
"sys-excepthook": "import sys\nsys.excepthook = print  # <-\n",
"sys-displayhook": "import sys\nsys.displayhook = print  # <-\n",
"sys-unraisablehook": "import sys\nsys.unraisablehook = print  # <-\n",
"sys-breakpointhook": "import sys\nsys.breakpointhook = print  # <-\n",
"threading-excepthook": "import threading\nthreading.excepthook = print  # <-\n",
"sys-addaudithook": "import sys\nsys.addaudithook(lambda *a: None)  # <-\n",
"sys-setrecursionlimit": "import sys\nsys.setrecursionlimit(10)  # <-\n",
"sys-setswitchinterval": "import sys\nsys.setswitchinterval(1.0)  # <-\n",
"sys-int-max-str-digits": "import sys\nsys.set_int_max_str_digits(640)  # <-\n",
"sys-asyncgen-hooks": "import sys\nsys.set_asyncgen_hooks(firstiter=print)  # <-\n",
"sys-stdout-rebind": "import sys, io\nsys.stdout = io.StringIO()  # <-\n",
"sys-argv-append": "import sys\nsys.argv.append('--x')  # <-\n",
"sys-path-hooks": "import sys\nsys.path_hooks.insert(0, print)  # <-\n",
"sys-dont-write-bytecode": "import sys\nsys.dont_write_bytecode = True  # <-\n",
"gc-disable": "import gc\ngc.disable()  # <-\n",
"gc-callbacks": "import gc\ngc.callbacks.append(print)  # <-\n",
"gc-set-threshold": "import gc\ngc.set_threshold(1)  # <-\n",
"os-register-at-fork": "import os\nos.register_at_fork(after_in_child=print)  # <-\n",
"os-chdir": "import os\nos.chdir('/')  # <-\n",
"os-umask": "import os\nos.umask(0)  # <-\n",
"os-dup2": "import os\nos.dup2(0, 1)  # <-\n",
"os-unsetenv": "import os\nos.unsetenv('CUDA_VISIBLE_DEVICES')  # <-\n",
"os-environ-setdefault": "import os\nos.environ.setdefault('VLLM_X', '1')  # <-\n",
"os-environ-ior": "import os\nos.environ |= {'VLLM_X': '1'}  # <-\n",
"os-environb": "import os\nos.environb[b'VLLM_X'] = b'1'  # <-\n",
"os-environ-alias-pop": "import os\ne = os.environ\ne.pop('CUDA_VISIBLE_DEVICES', None)  # <-\n",
"resource-setrlimit": "import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))  # <-\n",
"signal-setitimer": "import signal\nsignal.setitimer(signal.ITIMER_REAL, 5.0)  # <-\n",
"signal-alarm": "import signal\nsignal.alarm(5)  # <-\n",
"faulthandler-enable": "import faulthandler\nfaulthandler.enable()  # <-\n",
"random-seed": "import random\nrandom.seed(0)  # <-\n",
"numpy-seed": "import numpy as np\nnp.random.seed(0)  # <-\n",
"socket-default-timeout": "import socket\nsocket.setdefaulttimeout(1)  # <-\n",
"decimal-context": "import decimal\ndecimal.getcontext().prec = 3  # <-\n",
"codecs-register": "import codecs\ncodecs.register(lambda n: None)  # <-\n",
"locale-setlocale": "import locale\nlocale.setlocale(locale.LC_ALL, 'C')  # <-\n",
"asyncio-policy": "import asyncio\nasyncio.set_event_loop_policy(None)  # <-\n",
"tempfile-tempdir": "import tempfile\ntempfile.tempdir = '/dev/shm'  # <-\n",
"threading-stack-size": "import threading\nthreading.stack_size(1 << 20)  # <-\n",
"warnings-simplefilter": "import warnings\nwarnings.simplefilter('ignore')  # <-\n",
"warnings-showwarning": "import warnings\nwarnings.showwarning = print  # <-\n",
"logging-basicconfig": "import logging\nlogging.basicConfig(level=logging.ERROR, force=True)  # <-\n",
"logging-vllm-level": "import logging\nlogging.getLogger('vllm').setLevel(logging.CRITICAL)  # <-\n",
"logging-root-handlers": "import logging\nlogging.root.handlers.clear()  # <-\n",
"logging-set-logger-class": "import logging\n"
    "logging.setLoggerClass(type('X', (logging.Logger,), {}))  # <-\n",
"stdlib-class-patch": "import json\njson.JSONEncoder.default = lambda self, o: str(o)  # <-\n",
"copyreg-dispatch-table": "import copyreg\ncopyreg.dispatch_table[AttentionImpl] = print  # <-\n",
"importlib-reload-engine": "import importlib\n"
    "import vllm.v1.attention.backend as eng\nimportlib.reload(eng)  # <-\n",
"importlib-invalidate": "import importlib, sys\nsys.modules.pop('vllm.v1.attention.backend')  # <-\n",
"builtins-via-globals": """
def f():
    pass
f.__globals__['__builtins__']['print'] = None  # <-
""",
"builtins-module-dict": "import builtins\nvars(builtins)['print'] = None  # <-\n",
"builtins-dunder-dict": "__builtins__.__dict__['len'] = None  # <-\n",
# -- torch process-wide state ---------------------------------------------------------------------------
"torch-no-grad-entered": "import torch\ntorch.no_grad().__enter__()  # <-\n",
"torch-inference-mode-entered": "import torch\ntorch.inference_mode().__enter__()  # <-\n",
"torch-set-grad-enabled": "import torch\ntorch.set_grad_enabled(False)  # <-\n",
"torch-device-context-entered": "import torch\ntorch.device('cuda').__enter__()  # <-\n",
"torch-set-default-device": "import torch\ntorch.set_default_device('cuda')  # <-\n",
"torch-matmul-precision": "import torch\ntorch.set_float32_matmul_precision('medium')  # <-\n",
"torch-cudnn-benchmark": "import torch\ntorch.backends.cudnn.benchmark = True  # <-\n",
"torch-num-threads": "import torch\ntorch.set_num_threads(1)  # <-\n",
"torch-deterministic": "import torch\ntorch.use_deterministic_algorithms(True)  # <-\n",
"torch-anomaly": "import torch\ntorch.autograd.set_detect_anomaly(True)  # <-\n",
"torch-printoptions": "import torch\ntorch.set_printoptions(precision=1)  # <-\n",
"torch-memory-fraction": "import torch\ntorch.cuda.set_per_process_memory_fraction(0.1)  # <-\n",
"torch-set-device": "import torch\ntorch.cuda.set_device(1)  # <-\n",
"torch-global-forward-hook": "import torch\n"
    "torch.nn.modules.module.register_module_forward_pre_hook(print)  # <-\n",
"torch-hook-on-engine-instance": "def f(layer: L):\n    layer.register_forward_pre_hook(print)  # <-\n",
"torch-function-mode-entered": """
import torch
from torch.overrides import TorchFunctionMode
class M(TorchFunctionMode):
    pass
M().__enter__()  # <-
""",
"torch-dispatch-mode-entered": """
from torch.utils._python_dispatch import TorchDispatchMode
class M(TorchDispatchMode):
    pass
M().__enter__()  # <-
""",
"torch-saved-tensors-hooks-entered": "import torch\n"
    "torch.autograd.graph.saved_tensors_hooks(print, print).__enter__()  # <-\n",
"torch-dynamo-config": "import torch._dynamo\ntorch._dynamo.config.cache_size_limit = 1  # <-\n",
"torch-inductor-config": "import torch._inductor.config as ic\nic.max_autotune = True  # <-\n",
"torch-library-define-foreign": "import torch\n"
    "torch.library.define('vllm::evil', '(Tensor x) -> Tensor')  # <-\n",
"torch-library-register-kernel-aten": "import torch\n"
    "torch.library.register_kernel('aten::mm', 'cuda')(print)  # <-\n",
"torch-library-register-fake-foreign": "import torch\n"
    "torch.library.register_fake('_C::rms_norm')(print)  # <-\n",
"torch-library-impl-aten": "import torch\ntorch.library.impl('aten::relu', 'CUDA')(print)  # <-\n",
"torch-library-autograd-foreign": "import torch\ntorch.library.register_autograd('vllm::x', print)  # <-\n",
"torch-library-fragment-via-var": "import torch\n"
    "ns = 'at' + 'en'\nlib = torch.library.Library(ns, 'FRAGMENT')  # <-\n",
"torch-ops-load-library": "import torch\ntorch.ops.load_library('/tmp/x.so')  # <-\n",
"torch-tensor-method-patch": "import torch\ntorch.Tensor.__add__ = lambda a, b: a  # <-\n",
"torch-functional-patch": "import torch.nn.functional as F\nF.silu = F.relu  # <-\n",
"ctypes-cdll": "import ctypes\nctypes.CDLL('libc.so.6').setenv(b'X', b'1', 1)  # <-\n",
"ctypes-pythonapi": "import ctypes\nctypes.pythonapi.PyGILState_Ensure()  # <-\n",
# -- files and processes ---------------------------------------------------------------------------------
"open-write": "open('/tmp/x', 'w').write('x')  # <-\n",
"pathlib-write-text": "import pathlib\npathlib.Path('/tmp/x').write_text('x')  # <-\n",
"os-remove": "import os\nos.remove('/tmp/x')  # <-\n",
"shutil-rmtree": "import shutil\nshutil.rmtree('/tmp/x')  # <-\n",
"os-open-flags": "import os\nos.open('/tmp/x', os.O_WRONLY | os.O_CREAT)  # <-\n",
"torch-save": "import torch\ntorch.save({}, '/tmp/x.pt')  # <-\n",
"subprocess-popen": "import subprocess\nsubprocess.Popen(['true'])  # <-\n",
"os-system": "import os\nos.system('true')  # <-\n",
"os-fork": "import os\nos.fork()  # <-\n",
"os-posix-spawn": "import os\nos.posix_spawn('/bin/true', ['true'], {})  # <-\n",
"multiprocessing-process": "import multiprocessing\nmultiprocessing.Process(target=print).start()  # <-\n",
"os-kill-parent": "import os\nos.kill(os.getppid(), 9)  # <-\n",
"threading-timer": "import threading\nthreading.Timer(1.0, print).start()  # <-\n",
"thread-start-new": "import _thread\n_thread.start_new_thread(print, ())  # <-\n",
"socket-connect": "import socket\nsocket.create_connection(('1.2.3.4', 80))  # <-\n",
# -- assignment targets that are engine attributes --------------------------------------------------
"for-target-engine-attr": "for AttentionImpl.forward in [None]:  # <-\n    pass\n",
"with-target-engine-attr": "with contextlib.nullcontext(None) as AttentionImpl.forward:  # <-\n    pass\n",
"tuple-target-engine-attr": "(AttentionImpl.forward, x) = (None, 1)  # <-\n",
"list-target-engine-attr": "[AttentionImpl.forward] = [None]  # <-\n",
"starred-target-engine-attr": "*AttentionImpl.extra, = [1, 2]  # <-\n",
"augassign-engine-attr": "AttentionImpl.counter += 1  # <-\n",
"annassign-engine-attr": "AttentionImpl.forward: object = None  # <-\n",
"comprehension-target-engine-attr": "def f():\n    return [1 for AttentionImpl.forward in [None]]  # <-\n",
# -- writable namespaces of engine objects reached by other means ------------------------------------
"gc-get-referents-class-dict": "import gc\n"
    "gc.get_referents(AttentionImpl.__dict__)[0]['forward'] = None  # <-\n",
"function-dict-item": "AttentionImpl.forward.__dict__['x'] = 1  # <-\n",
"function-vars-update": "vars(AttentionImpl.forward).update(x=1)  # <-\n",
"function-wrapped": "AttentionImpl.forward.__wrapped__ = print  # <-\n",
"kwdefaults-item": "AttentionImpl.forward.__kwdefaults__['x'] = 1  # <-\n",
"annotations-item": "AttentionImpl.forward.__annotations__['x'] = int  # <-\n",
"defaults-augassign": "AttentionImpl.forward.__defaults__ += (1,)  # <-\n",
"object-getattribute-code": "object.__getattribute__(AttentionImpl, 'forward').__code__ = None  # <-\n",
"type-getattribute": "type.__getattribute__(AttentionImpl, 'forward').__defaults__ = ()  # <-\n",
"engine-module-dict-setdefault": "import vllm.v1.attention.backend as eng\n"
    "vars(eng).setdefault('X', 1)  # <-\n",
"engine-module-dict-pop": "import vllm.v1.attention.backend as eng\n"
    "eng.__dict__.pop('AttentionImpl')  # <-\n",
"engine-module-dict-ior": "import vllm.v1.attention.backend as eng\nd = eng.__dict__\nd |= {'X': 1}  # <-\n",
"dict-setitem-unbound": "import vllm.v1.attention.backend as eng\n"
    "dict.__setitem__(vars(eng), 'X', 1)  # <-\n",
"dict-update-unbound": "import vllm.v1.attention.backend as eng\ndict.update(eng.__dict__, X=1)  # <-\n",
"abc-register-virtual-subclass": "class Own:\n    pass\nAttentionImpl.register(Own)  # <-\n",
"abstractmethods-write": "AttentionImpl.__abstractmethods__ = frozenset()  # <-\n",
"engine-instance-class-swap": "class MyL(L):\n    pass\ndef f(layer: L):\n    layer.__class__ = MyL  # <-\n",
"engine-instance-forward-patch": "def f(layer: L):\n    layer.forward = lambda x: x  # <-\n",
"engine-instance-dict-forward": "def f(layer: L):\n    layer.__dict__['forward'] = print  # <-\n",
"engine-instance-object-setattr": "def f(layer: L):\n    object.__setattr__(layer, 'forward', print)  # <-\n",
"own-subclass-bases-swap": "class Own:\n    pass\nclass Sub(AttentionImpl):\n    pass\n"
    "Sub.__bases__[0].forward = None  # <-\n",
# -- deferred calls that carry the write ---------------------------------------------------------------
"thread-target-setattr": "import threading\n"
    "threading.Thread(target=setattr, args=(AttentionImpl, 'forward', None)).start()  # <-\n",
"executor-submit-setattr": "import concurrent.futures as cf\n"
    "cf.ThreadPoolExecutor().submit(setattr, AttentionImpl, 'forward', None)  # <-\n",
"loop-call-soon-setattr": "import asyncio\n"
    "asyncio.new_event_loop().call_soon(setattr, AttentionImpl, 'forward', None)  # <-\n",
"exitstack-callback-setattr": "st = contextlib.ExitStack()\n"
    "st.callback(setattr, AttentionImpl, 'forward', None)  # <-\n",
"signal-handler-setattr": "import signal\n"
    "signal.signal(signal.SIGUSR2, lambda *a: setattr(AttentionImpl, 'forward', None))  # <-\n",
"sched-enter-setattr": "import sched, time\n"
    "sched.scheduler(time.time).enter(1, 1, setattr, (AttentionImpl, 'forward', None))  # <-\n",
"functools-singledispatch-engine": "import vllm.v1.attention.backend as eng\n"
    "eng.dispatch.register(int, print)  # <-\n",
# -- dynamic code by other names ----------------------------------------------------------------------
"pickle-loads-literal": "import pickle\npickle.loads(b'cbuiltins\\nprint\\n(S\"x\"\\ntR.')  # <-\n",
"marshal-loads-function": "import marshal, types\n"
    "types.FunctionType(marshal.loads(b''), globals())()  # <-\n",
"dunder-import-builtins-setattr": "__import__('builtins').setattr(AttentionImpl, 'forward', None)  # <-\n",
"getattr-dunder-builtins": "getattr(__builtins__, 'setattr')(AttentionImpl, 'forward', None)  # <-\n",
"runpy-run-path": "import runpy\nrunpy.run_path('/tmp/evil.py')  # <-\n",
"importlib-spec-exec-module": "import importlib.util\n"
    "s = importlib.util.spec_from_file_location('x', '/tmp/evil.py')\n"
    "s.loader.exec_module(importlib.util.module_from_spec(s))  # <-\n",
"code-interact": "import code\ncode.InteractiveInterpreter().runsource('import os')  # <-\n",
# -- environment / interpreter state ------------------------------------------------------------------
"environ-private-data": "import os\nos.environ._data[b'VLLM_X'] = b'1'  # <-\n",
"sys-dict-excepthook": "import sys\nsys.__dict__['excepthook'] = print  # <-\n",
"setattr-sys-computed": "import sys\nsetattr(sys, 'except' + 'hook', print)  # <-\n",
"sys-modules-setitem-dunder": "import sys\nsys.modules.__setitem__('json', None)  # <-\n",
"numpy-seterr": "import numpy as np\nnp.seterr(all='ignore')  # <-\n",
"numpy-printoptions": "import numpy as np\nnp.set_printoptions(precision=1)  # <-\n",
"faulthandler-later": "import faulthandler\nfaulthandler.dump_traceback_later(5)  # <-\n",
"transformers-autoconfig-register": "from transformers import AutoConfig\nclass Cfg:\n    pass\n"
    "AutoConfig.register('kimi_k3', Cfg)  # <-\n",
"transformers-verbosity": "import transformers\ntransformers.logging.set_verbosity_error()  # <-\n",
# -- torch switches by other names --------------------------------------------------------------------
"torch-enable-flash-sdp": "import torch\ntorch.backends.cuda.enable_flash_sdp(False)  # <-\n",
"torch-linalg-library": "import torch\ntorch.backends.cuda.preferred_linalg_library('magma')  # <-\n",
"torch-add-safe-globals": "import torch\ntorch.serialization.add_safe_globals([print])  # <-\n",
"torch-dynamo-allow-in-graph": "import torch\ntorch.compiler.allow_in_graph(print)  # <-\n",
"torch-dynamo-disallow": "import torch._dynamo\ntorch._dynamo.disallow_in_graph(print)  # <-\n",
"torch-fx-wrap": "import torch.fx\ntorch.fx.wrap('len')  # <-\n",
"torch-fx-side-effect": "import torch.fx\ntorch.fx.node.has_side_effect(print)  # <-\n",
"torch-c-private-toggle": "import torch\ntorch._C._set_cublas_allow_tf32(True)  # <-\n",
"torch-c-jit-toggle": "import torch\ntorch._C._jit_set_profiling_executor(False)  # <-\n",
"torch-dynamo-reset": "import torch\ntorch.compiler.reset()  # <-\n",
"torch-allocator-swap": "import torch\n"
    "torch.cuda.memory.change_current_allocator(\n"
    "    torch.cuda.memory.CUDAPluggableAllocator('x', 'a', 'f'))  # <-\n"
    "",
"torch-autocast-enabled": "import torch\ntorch.set_autocast_enabled('cuda', True)  # <-\n",
"torch-default-dtype-alias": "import torch\nsdd = torch.set_default_dtype\nsdd(torch.float16)  # <-\n",
"torch-getattr-switch": "import torch\ngetattr(torch, 'set_' + 'num_threads')(1)  # <-\n",
"torch-library-via-importlib": "import importlib\ntl = importlib.import_module('torch.library')\n"
    "tl.Library('aten', 'IMPL')  # <-\n",
# -- files and processes by other names ---------------------------------------------------------------
"open-mode-variable": "m = 'w'\nopen('/tmp/x', m)  # <-\n",
"open-mode-joined": "open('/tmp/x', mode=''.join(['w']))  # <-\n",
"open-append": "open('/tmp/x', 'a')  # <-\n",
"io-fileio": "import io\nio.FileIO('/tmp/x', 'w')  # <-\n",
"os-fdopen": "import os\nos.fdopen(3, 'w')  # <-\n",
"path-open-write": "import pathlib\npathlib.Path('/tmp/x').open('w')  # <-\n",
"path-touch": "import pathlib\npathlib.Path('/tmp/x').touch()  # <-\n",
"path-unlink": "import pathlib\npathlib.Path('/tmp/x').unlink()  # <-\n",
"os-symlink": "import os\nos.symlink('/etc/passwd', '/tmp/x')  # <-\n",
"os-chmod": "import os\nos.chmod('/tmp/x', 0o777)  # <-\n",
"shutil-copy": "import shutil\nshutil.copy('/etc/passwd', '/tmp/x')  # <-\n",
"sqlite-connect": "import sqlite3\nsqlite3.connect('/tmp/x.db')  # <-\n",
"numpy-save": "import numpy as np\nnp.save('/tmp/x.npy', np.zeros(1))  # <-\n",
"logging-filehandler": "import logging\nlogging.FileHandler('/tmp/x.log')  # <-\n",
"zipfile-write": "import zipfile\nzipfile.ZipFile('/tmp/x.zip', 'w')  # <-\n",
"tempfile-mkstemp": "import tempfile\ntempfile.mkstemp()  # <-\n",
"safetensors-save": "from safetensors.torch import save_file\nsave_file({}, '/tmp/x.st')  # <-\n",
"os-execv": "import os\nos.execv('/bin/true', ['true'])  # <-\n",
"os-popen": "import os\nos.popen('true')  # <-\n",
"subprocess-getoutput": "import subprocess\nsubprocess.getoutput('true')  # <-\n",
"asyncio-subprocess": "import asyncio\nasyncio.create_subprocess_exec('true')  # <-\n",
"pty-spawn": "import pty\npty.spawn('true')  # <-\n",
"process-pool": "import concurrent.futures as cf\ncf.ProcessPoolExecutor().submit(print)  # <-\n",
"mp-pool": "import multiprocessing\nmultiprocessing.Pool(2)  # <-\n",
"urllib-urlopen": "import urllib.request\nurllib.request.urlopen('http://x')  # <-\n",
# -- engine classes kept in own containers and objects, then taken out ----------------------------------
"own-init-attribute": "class H:\n    def __init__(self):\n        self.i = AttentionImpl\n"
    "H().i.forward = None  # <-\n",
"own-instance-dict-item": "class H:\n    pass\nh = H()\nh.__dict__['i'] = AttentionImpl\n"
    "h.i.forward = None  # <-\n",
"own-instance-setattr": "class H:\n    pass\nh = H()\nsetattr(h, 'i', AttentionImpl)\n"
    "h.i.forward = None  # <-\n",
"list-append-index": "xs = []\nxs.append(AttentionImpl)\nxs[0].forward = None  # <-\n",
"list-extend-last": "xs = []\nxs.extend([AttentionImpl])\nxs[-1].forward = None  # <-\n",
"list-insert-pop": "xs = []\nxs.insert(0, AttentionImpl)\nxs.pop().forward = None  # <-\n",
"dict-setdefault": "d = {}\nd.setdefault('a', AttentionImpl).forward = None  # <-\n",
"dict-update-item": "d = {}\nd.update(a=AttentionImpl)\nd['a'].forward = None  # <-\n",
"dict-values-iter": "d = {'a': AttentionImpl}\nfor c in d.values():\n    c.forward = None  # <-\n",
"dict-items-iter": "d = {'a': AttentionImpl}\nfor _, c in d.items():\n    c.forward = None  # <-\n",
"chainmap": "import collections\ncollections.ChainMap({'a': AttentionImpl})['a'].forward = None  # <-\n",
"simplenamespace": "import types\ntypes.SimpleNamespace(a=AttentionImpl).a.forward = None  # <-\n",
"namedtuple-field": "import collections\nN = collections.namedtuple('N', 'a')\n"
    "N(AttentionImpl).a.forward = None  # <-\n",
"own-dataclass-positional": "import dataclasses\n@dataclasses.dataclass\nclass C:\n    a: type\n"
    "C(AttentionImpl).a.forward = None  # <-\n",
"zip-iter": "for c, _ in zip([AttentionImpl], [1]):\n    c.forward = None  # <-\n",
"enumerate-iter": "for _, c in enumerate([AttentionImpl]):\n    c.forward = None  # <-\n",
"reversed-iter": "for c in reversed([AttentionImpl]):\n    c.forward = None  # <-\n",
"filter-iter": "for c in filter(None, [AttentionImpl]):\n    c.forward = None  # <-\n",
"itertools-chain": "import itertools\nfor c in itertools.chain([AttentionImpl]):\n"
    "    c.forward = None  # <-\n",
"queue-put-get": "import queue\nq = queue.Queue()\nq.put(AttentionImpl)\nq.get().forward = None  # <-\n",
"deque-popleft": "import collections\nq = collections.deque([AttentionImpl])\n"
    "q.popleft().forward = None  # <-\n",
"contextvar": "import contextvars\nv = contextvars.ContextVar('v')\nv.set(AttentionImpl)\n"
    "v.get().forward = None  # <-\n",
"threading-local": "import threading\ntl = threading.local()\ntl.x = AttentionImpl\n"
    "tl.x.forward = None  # <-\n",
"weakref-ref-call": "import weakref\nweakref.ref(AttentionImpl)().forward = None  # <-\n",
"weakref-proxy": "import weakref\nweakref.proxy(AttentionImpl).forward = None  # <-\n",
"weak-value-dict": "import weakref\n"
    "weakref.WeakValueDictionary({'a': AttentionImpl})['a'].forward = None  # <-\n",
"lru-cache-lambda": "functools.lru_cache(lambda: AttentionImpl)().forward = None  # <-\n",
"staticmethod-func": "staticmethod(lambda: AttentionImpl).__func__().forward = None  # <-\n",
"lambda-dunder-call": "(lambda: AttentionImpl).__call__().forward = None  # <-\n",
"cached-property": "class H:\n    @functools.cached_property\n    def i(self):\n"
    "        return AttentionImpl\n"
    "H().i.forward = None  # <-\n",
"staticmethod-in-class": "class H:\n    @staticmethod\n    def i():\n        return AttentionImpl\n"
    "H.i().forward = None  # <-\n",
# -- an own subclass / own instance of an engine class, back to the engine class -------------------------
"own-subclass-dunder-base": "class Sub(AttentionImpl):\n    pass\nSub.__base__.forward = None  # <-\n",
"inspect-getmro": "import inspect\nclass Sub(AttentionImpl):\n    pass\n"
    "inspect.getmro(Sub)[1].forward = None  # <-\n",
"type-mro-of-sub": "class Sub(AttentionImpl):\n    pass\ntype.mro(Sub)[1].forward = None  # <-\n",
"bound-method-func": "a = AttentionImpl()\na.forward.__func__.__code__ = None  # <-\n",
"bound-method-self-class": "a = AttentionImpl()\na.forward.__self__.__class__.forward = None  # <-\n",
"descriptor-get-func": "AttentionImpl.forward.__get__(1).__func__.__defaults__ = ()  # <-\n",
"super-of-own-subclass-instance": "class Sub(AttentionImpl):\n    def g(self):\n"
    "        super().forward.__func__.__defaults__ = ()  # <-\n",
"own-instance-class-swapped-to-engine": "class Own:\n    pass\no = Own()\no.__class__ = AttentionImpl\n"
    "type(o).forward = None  # <-\n",
"copyreg-type": "import copyreg\ncopyreg.pickle(type, print)  # <-\n",
# added by hfix21b: the same-file forms of fixed cross-module and dunder attacks
"weakref-finalize-same-file": "import weakref\nclass O:\n    pass\no = O()\ndef cb(c):\n"
                              "    c.forward = None\nweakref.finalize(o, cb, AttentionImpl)  # <-\n",
"atexit-register-callback": "import atexit\ndef cb(c):\n    c.forward = None\n"
                            "atexit.register(cb, AttentionImpl)  # <-\n",
"own-getattribute-returns-engine": "class H:\n    def __getattribute__(self, name):\n"
                                   "        return AttentionImpl\n"
                                   "H().x.forward = None  # <-\n",
"own-aenter-returns-engine": "class H:\n    async def __aenter__(self):\n        return AttentionImpl\n"
                             "    async def __aexit__(self, *a):\n        return False\n"
                             "async def f():\n    async with H() as c:\n        c.forward = None  # <-\n",
"engine-instance-setattr-forward": "def f(layer: L):\n    setattr(layer, 'forward', print)  # <-\n",
"engine-instance-hook-optional": "def f(layer: 'L | None'):\n"
                                 "    layer.register_forward_hook(print)  # <-\n",
"own-getattr-lambda-in-class-body": "class H:\n    __getattr__ = lambda self, n: AttentionImpl\n"
                                    "H().x.forward = None  # <-\n",
"engine-instance-unbound-hook": "import torch\ndef f(layer: L):\n"
                                "    torch.nn.Module.register_forward_hook(layer, print)  # <-\n",
"engine-instance-alias-forward": "def f(layer: L):\n    m = layer\n    m.forward = None  # <-\n",
"engine-instance-dict-update": "def f(layer: L):\n    layer.__dict__.update(forward=print)  # <-\n"
                               "    vars(layer)['forward'] = print  # <-\n",
"own-class-swapped-by-setattr": "class Own:\n    pass\no = Own()\nsetattr(o, '__class__', AttentionImpl)\n"
                                "type(o).forward = None  # <-\n",
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
    assert len(ATTACKS) + len(CROSS) + len(RUNTIME) + len(TORCH_RUNTIME) >= 60


@pytest.mark.parametrize("src", [
    pytest.param(s, id=k, marks=[pytest.mark.xfail(strict=True, reason=OPEN[k])] if k in OPEN else [])
    for k, s in ATTACKS.items()])
def test_attack_is_an_error_at_its_line(src: str, engine: EngineSignatures) -> None:
    want = marked(src)
    assert want, "an attack marks its lines"
    assert set(want) <= set(error_lines(scan(src, engine)))


# honest twins: the same forms on the contribution's own objects
HONEST = """
import dataclasses
import types
import typing
import torch
class Own:
    pass
class H:
    def __getattr__(self, name):
        return Own
    def __class_getitem__(cls, item):
        return Own
    def __iter__(self):
        yield Own
    def __enter__(self):
        return Own
    def __exit__(self, *a):
        return False
    def __call__(self):
        return Own
    def __getitem__(self, k):
        return Own
H().anything.x = 1
H[int].x = 1
for c in H():
    c.x = 1
with H() as c:
    c.x = 1
H()().x = 1
H()[0].x = 1
try:
    raise ValueError(Own)
except ValueError as e:
    e.args[0].x = 1
def f(v):
    match v:
        case [_, c]:
            c.x = 1
        case {'k': c}:
            c.x = 1
    [(c := x) for x in (Own,)]
    c.x = 1
def g(c=Own):
    c.x = 1
g.__defaults__[0].x = 1
copy.copy(Own).x = 1
(lambda c=Own: setattr(c, 'x', 1))()
with contextlib.ExitStack() as st:
    st.enter_context(contextlib.nullcontext(Own)).x = 1
def h(x: 'int') -> 'Own':
    return Own
typing.get_type_hints(h)
@dataclasses.dataclass
class Cfg:
    xs: list = dataclasses.field(default_factory=list)
class M(torch.nn.Module):
    pass
m = M()
m.register_forward_pre_hook(print)
with torch.no_grad():
    pass
def uses(layer: L, x):
    return layer(x)
a = AttentionImpl()
a.y = 1
class Mine(L):
    pass
mine = Mine()
mine.forward = print
mine.__dict__['extra'] = 1
import io
import pathlib
buf = io.BytesIO()
torch.save({}, buf)
with open('/etc/hostname') as fh:
    fh.read()
pathlib.Path('/etc/hostname').read_text()
open('/etc/hostname', 'rb').close()
lib = torch.library.Library('kimi_k3', 'FRAGMENT')
lib.define('double(Tensor x) -> Tensor')
lib.impl('double', print, 'CUDA')
@torch.library.custom_op('kimi_k3::triple', mutates_args=())
def triple(x: torch.Tensor) -> torch.Tensor:
    return x * 3
@contextlib.contextmanager
def cm():
    yield Own
with cm() as c:
    c.x = 1
import collections
import operator
import weakref
@dataclasses.dataclass
class Rec:
    impl: type
    n: int = 0
r = Rec(AttentionImpl)
r.n = 2
Rec(Own).impl.x = 1
collections.namedtuple('N', 'a')(Own).a.x = 1
collections.deque([Own]).popleft().x = 1
weakref.WeakValueDictionary({'a': Own})['a'].x = 1
functools.lru_cache(lambda: Own)().x = 1
staticmethod(lambda: Own).__func__().x = 1
operator.methodcaller('mro')(Own)
b = copy.copy(a)
b.y = 1
copy.deepcopy(AttentionImpl())
import vllm.v1.attention.backend as backend_module
defaults = copy.deepcopy(backend_module.DEFAULTS)
defaults.x = 1
class D:
    def __get__(self, obj, owner):
        return Own
class HD:
    d = D()
HD().d.x = 1
def load(layer: L, w):
    layer.__dict__.update(weight_scale=w)
    layer.weight_scale = w
    layer.__dict__['extra'] = 1
    setattr(layer, 'scale', w)
    object.__setattr__(layer, 'bias', None)
    return layer.forward(w)
def configure(mine: Mine):
    mine.forward = print
    mine.register_forward_pre_hook(print)
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = L()
        self.proj.register_forward_hook(print)
        self.proj.forward = print
match a:
    case AttentionImpl(y=yy):
        yy.x = 1
types.FunctionType((lambda: None).__code__, {})
types.FunctionType((lambda: None).__code__, globals())
import weakref
def own_cb(c):
    c.x = 1
weakref.finalize(m, own_cb, Own)
import multiprocessing
import sqlite3
import sys
import zipfile
import numpy as np
multiprocessing.cpu_count()
sqlite3.connect(':memory:')
zipfile.ZipFile('/etc/hostname')
pathlib.Path('/etc/hostname').open()
pathlib.Path('/etc/hostname').open('rb')
np.save(buf, np.zeros(1))
'--x' in sys.argv
class Plain:
    def __enter__(self):
        return self
    def __exit__(self, *a):
        return False
Plain().__enter__()
"""
OPEN_FALSE_POSITIVES: dict[str, str] = {}


def test_honest_twin_is_clean(engine: EngineSignatures) -> None:
    assert error_lines(scan(HONEST, engine)) == []


# -- across own modules (the harness of tests/test_escapes_hostile20.py: errors of impl.py) ---------------
LAYERS = "from vllm.v1.attention.backend import AttentionImpl\n"
CROSS: dict[str, tuple[dict[str, str], str]] = {
    "other-module-class-decorator-patches-base": (
        {"mid.py": "def deco(cls):\n    cls.__mro__[1].forward = None  # <-\n    return cls\n"},
        "from .layers import AttentionImpl\nfrom .mid import deco\n@deco\nclass Sub(AttentionImpl):\n"
        "    pass\n"),
    "other-module-decorator-patches-via-globals": (
        {"mid.py": "def deco(f):\n    f.__globals__['AttentionImpl'].forward = None  # <-\n    return f\n"},
        "from .layers import AttentionImpl\nfrom .mid import deco\n@deco\ndef g():\n    pass\n"),
    "other-module-getattr-dunder": (
        {"mid.py": LAYERS + "class H:\n    def __getattr__(self, n):\n        return AttentionImpl\n"
         "h = H()\n"},
        "from .mid import h\nh.x.forward = None  # <-\n"),
    "other-module-contextmanager": (
        {"mid.py": "import contextlib\n" + LAYERS + "@contextlib.contextmanager\ndef cm():\n"
         "    yield AttentionImpl\n"},
        "from .mid import cm\nwith cm() as c:\n    c.forward = None  # <-\n"),
    "other-module-exception-carrier": (
        {"mid.py": LAYERS + "def boom():\n    raise ValueError(AttentionImpl)\n"},
        "from .mid import boom\ntry:\n    boom()\nexcept ValueError as e:\n"
        "    e.args[0].forward = None  # <-\n"),
    "other-module-init-subclass": (
        {"mid.py": "class Base:\n    def __init_subclass__(cls, **kw):\n"
         "        cls.__mro__[2].forward = None  # <-\n"},
        "from .layers import AttentionImpl\nfrom .mid import Base\nclass Sub(Base, AttentionImpl):\n"
        "    pass\n"),
    "other-module-default-arg": (
        {"mid.py": LAYERS + "def f(c=AttentionImpl):\n    return c\n"},
        "from .mid import f\nf().forward = None  # <-\n"),
    "other-module-weakref-finalize-cb": (
        {"mid.py": "import weakref\ndef later(obj, cb, arg):\n    weakref.finalize(obj, cb, arg)\n"},
        "from .layers import AttentionImpl\nfrom .mid import later\nclass O:\n    pass\no = O()\n"
        "def cb(c):\n    c.forward = None\nlater(o, cb, AttentionImpl)  # <-\n"),
    # added by hfix21b: another own module's class whose dunders hand out an engine class
    "other-module-dunders": (
        {"mid.py": LAYERS + "class H:\n    def __call__(self):\n        return AttentionImpl\n"
         "    def __iter__(self):\n        yield AttentionImpl\n    def __getitem__(self, k):\n"
         "        return AttentionImpl\n    def __enter__(self):\n        return AttentionImpl\n"
         "    def __exit__(self, *a):\n        return False\n"},
        "from .mid import H\nH()().forward = None  # <-\nfor c in H():\n    c.forward = None  # <-\n"
        "H()[0].forward = None  # <-\nwith H() as w:\n    w.forward = None  # <-\n"),
}
CROSS_OPEN: dict[str, str] = {
}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(POLICY)


def _errors_by_file(tmp_path: Path, policy: Policy, extra: dict[str, str], src: str,
                    monkeypatch: pytest.MonkeyPatch) -> set[tuple[str, int]]:
    monkeypatch.setenv("FASTTRACK_ENGINE_TREE", str(write(tmp_path / "engine", ENGINE)))
    files = {"kernels/kimi_k3/__init__.py": "", "kernels/kimi_k3/layers.py": LAYERS,
             **{f"kernels/kimi_k3/{k}": v for k, v in extra.items()}, "kernels/kimi_k3/impl.py": src}
    return {(path, line or 0) for _, path, line in ft_errors(contribution(tmp_path, policy, files))}


@pytest.mark.parametrize(("extra", "src"), [
    pytest.param(v[0], v[1], id=k,
                 marks=[pytest.mark.xfail(strict=True, reason=CROSS_OPEN[k])] if k in CROSS_OPEN else [])
    for k, v in CROSS.items()])
def test_cross_module_attack_is_an_error(tmp_path: Path, policy: Policy, extra: dict[str, str], src: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # the marks may be in impl.py or in the other own module (a write through an unresolved parameter
    # fails closed where it is written)
    want = {(f"kernels/kimi_k3/{name}", line) for name, text in {**extra, "impl.py": src}.items()
            for line in marked_lines(text)}
    assert want, "an attack marks its lines"
    assert want <= _errors_by_file(tmp_path, policy, extra, src, monkeypatch)


CROSS_HONEST_MID = ("import contextlib\nclass Own:\n    pass\nclass H:\n    def __getattr__(self, n):\n"
                    "        return Own\nh = H()\n@contextlib.contextmanager\ndef cm():\n    yield Own\n"
                    "def boom():\n    raise ValueError(Own)\ndef f(c=Own):\n    return c\n"
                    "def deco(cls):\n    cls.tag = 1\n    return cls\n"
                    "import weakref\ndef later(obj, cb, arg):\n    weakref.finalize(obj, cb, arg)\n"
                    "class H2:\n    def __call__(self):\n        return Own\n    def __iter__(self):\n"
                    "        yield Own\n    def __enter__(self):\n        return Own\n"
                    "    def __exit__(self, *a):\n        return False\n")
CROSS_HONEST = ("from .mid import h, cm, boom, f, deco, later, Own, H2\nclass O:\n    pass\no = O()\n"
                "H2()().y = 1\nfor c2 in H2():\n    c2.y = 1\nwith H2() as w:\n    w.y = 1\n"
                "def cb(c):\n    c.y = None\nlater(o, cb, Own)\n"
                "from .layers import AttentionImpl\ntry:\n    pass\nexcept ValueError as e2:\n"
                "    e2.args[0].y = 1\n"
                "h.x.y = 1\nwith cm() as c:\n    c.y = 1\ntry:\n"
                "    boom()\nexcept ValueError as e:\n    e.args[0].y = 1\nf().y = 1\n@deco\nclass K:\n"
                "    pass\n")


def test_cross_module_honest_twin(tmp_path: Path, policy: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _cross_errors(tmp_path, policy, {"mid.py": CROSS_HONEST_MID}, CROSS_HONEST, monkeypatch) == []


# -- the runtime effect trace (the harness of tests/test_trace.py): one traced import of all the modules ---
RUNTIME: dict[str, str] = {
    # effects deferred past the import, or run where the trace does not look
    # (values differ from the other modules' writes to the same attribute: a second write of the same value
    # changes nothing, so there would be nothing to see)
    "thread_deferred.py": "import threading, time, json\ndef later():\n    time.sleep(0.2)\n"
                          "    json.dumps = repr  # <-\n"
                          "threading.Thread(target=later, daemon=True).start()\n",
    "timer_deferred.py": "import threading, json\n"
                         "threading.Timer(0.1, setattr, (json, 'loads', str)).start()  # <-\n",
    "thread_joined_patch.py": "import threading, html\n"
                              "t = threading.Thread(target=setattr, args=(html, 'escape', str))  # <-\n"
                              "t.start()\nt.join()\n",
    "weakref_second_finalize.py": "import weakref, json\nclass O:\n    pass\n_a, _b = O(), O()\n"
                                  "weakref.finalize(_a, print)\n"
                                  "weakref.finalize(_b, setattr, json, 'JSONEncoder', None)  # <-\n",
    "type_hints_setattr.py": "import typing, json\ndef f(x: 'setattr(json, \"loads\", repr)'):\n    pass\n"
                             "typing.get_type_hints(f)  # <-\n",
    "np_seterr.py": "import numpy as np\nnp.seterr(all='ignore')  # <-\n",
    "code_interact.py": "import code, json\n"
                        "code.InteractiveInterpreter().runsource('import json; json.dumps = str')  # <-\n",
    # caught when written (variants of the families above)
    "environ_private_data.py": "import os\nos.environ._data[b'VLLM_Z'] = b'1'  # <-\n",
    "type_hints_environ.py": "import typing, os\ndef f(x: 'os.environ.__setitem__(\"VLLM_X\", \"1\")'):\n"
                             "    pass\ntyping.get_type_hints(f)  # <-\n",
    "thread_environ.py": "import threading, os\ndef later():\n    os.environ['VLLM_Y'] = '1'  # <-\n"
                         "t = threading.Thread(target=later)\nt.start()\nt.join()\n",
    "atexit_deferred.py": "import atexit, json\natexit.register(setattr, json, 'JSONDecoder', None)  # <-\n",
    "del_deferred.py":
        "import textwrap\nclass O:\n    def __del__(self):\n        textwrap.dedent = str  # <-\nO()\n",
    "gc_callback.py": "import gc, html\ndef cb(phase, info):\n    html.unescape = str\n"
                      "gc.callbacks.append(cb)  # <-\n",
    "excepthook_set.py": "import sys\nsys.excepthook = lambda *a: None  # <-\n",
    "sys_argv.py": "import sys\nsys.argv.append('--evil')  # <-\n",
    "recursionlimit.py": "import sys\nsys.setrecursionlimit(500)  # <-\n",
    "audithook.py": "import sys\nsys.addaudithook(lambda *a: None)  # <-\n",
    "warn_filter.py": "import warnings\nwarnings.simplefilter('ignore')  # <-\n",
    "random_seed.py": "import random\nrandom.seed(0)  # <-\n",
    "chdir.py": "import os\nos.chdir('/')  # <-\n",
    "lambda_in_map.py": "import textwrap\nlist(map(lambda m: setattr(m, 'indent', str), [textwrap]))  # <-\n",
    "ctypes_setattr.py": "import ctypes, string\nctypes.pythonapi.PyObject_SetAttrString(  # <-\n"
                        "    ctypes.py_object(string), b'digits', ctypes.py_object('x'))\n",
    "multiprocessing_start.py": "import multiprocessing\n"
                                "multiprocessing.Process(target=print, daemon=True).start()  # <-\n",
}
RUNTIME_OPEN: dict[str, str] = {
}
# torch switches in a trace of their own (a mode entered at import would break the other modules' imports)
TORCH_RUNTIME: dict[str, str] = {
    "global_module_hook.py": "import torch\n"
                             "torch.nn.modules.module.register_module_forward_pre_hook(print)  # <-\n",
    "save_outside.py": "import torch\ntorch.save({}, {out!r})  # <-\n",
    "no_grad_entered.py": "import torch\ntorch.no_grad().__enter__()  # <-\n",
    "matmul_precision.py": "import torch\ntorch.set_float32_matmul_precision('medium')  # <-\n",
    "num_threads.py": "import torch\ntorch.set_num_threads(1)  # <-\n",
    "flash_sdp.py": "import torch\ntorch.backends.cuda.enable_flash_sdp(False)  # <-\n",
    "safe_globals.py": "import torch\ntorch.serialization.add_safe_globals([print])  # <-\n",
    "allow_in_graph.py": "import torch\ntorch.compiler.allow_in_graph(print)  # <-\n",
    "fx_side_effect.py": "import torch.fx\ntorch.fx.node.has_side_effect(print)  # <-\n",
    "fx_wrap.py": "import torch.fx\ntorch.fx.wrap('len')  # <-\n",
    "z_function_mode.py": "import torch\nfrom torch.overrides import TorchFunctionMode\n"
                          "class M(TorchFunctionMode):\n    pass\nM().__enter__()  # <-\n",
}
TORCH_OPEN: dict[str, str] = {
}
RUNTIME_HONEST: dict[str, str] = {
    "own_thread.py": "import threading\nRESULTS = []\n"
                     "t = threading.Thread(target=RESULTS.append, args=(1,))\nt.start()\nt.join()\n",
    "np_scoped.py": "import numpy as np\nwith np.errstate(all='ignore'):\n    X = np.ones(1) / 0\n",
    "hints.py": "import typing\ndef f(x: 'int') -> 'list[int]':\n    return [x]\n"
                "HINTS = typing.get_type_hints(f)\n",
    "own_hook.py": "import io\nimport torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n"
                   "        return x\nm = M()\nm.register_forward_pre_hook(lambda mod, a: None)\n"
                   "buf = io.BytesIO()\ntorch.save({'w': torch.zeros(1)}, buf)\nwith torch.no_grad():\n"
                   "    y = m(torch.ones(1))\n",
}


def _errors_at(findings: list[Finding], package: str, module: str) -> set[int]:
    return {f.line or 0 for f in findings if f.path == f"{package}/{module}" and f.severity.value == "error"}


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[TraceFacts, list[Finding]]:
    ctx = _context(tmp_path_factory.mktemp("rt21"), "evil", RUNTIME)
    facts = gather_trace(ctx)
    return facts, _findings(ctx, facts)


@pytest.fixture(scope="module")
def torch_traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[TraceFacts, list[Finding], Path]:
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("rt21t")
    out = tmp / "outside" / "evil.pt"
    out.parent.mkdir()
    files = {k: v.replace("{out!r}", repr(str(out))) for k, v in TORCH_RUNTIME.items()}
    ctx = _context(tmp, "evilt", files)
    facts = gather_trace(ctx)
    return facts, _findings(ctx, facts), out


@pytest.mark.slow
@pytest.mark.parametrize("module", [
    pytest.param(k, id=k, marks=[pytest.mark.xfail(strict=True, reason=RUNTIME_OPEN[k])] if k in RUNTIME_OPEN
                 else []) for k in RUNTIME])
def test_runtime_effect_is_an_error_at_its_line(traced: tuple[TraceFacts, list[Finding]],
                                                module: str) -> None:
    _, findings = traced
    want = marked_lines(RUNTIME[module])
    assert want and set(want) <= _errors_at(findings, "evil", module), sorted(
        (f.code, f.line, f.message[:80]) for f in findings if f.path == f"evil/{module}")


@pytest.mark.slow
@pytest.mark.parametrize("module", [
    pytest.param(k, id=k, marks=[pytest.mark.xfail(strict=True, reason=TORCH_OPEN[k])] if k in TORCH_OPEN
                 else []) for k in TORCH_RUNTIME])
def test_torch_runtime_effect_is_an_error_at_its_line(torch_traced: tuple[TraceFacts, list[Finding], Path],
                                                      module: str) -> None:
    _, findings, _ = torch_traced
    want = marked_lines(TORCH_RUNTIME[module])
    assert want and set(want) <= _errors_at(findings, "evilt", module)


@pytest.mark.slow
def test_torch_save_outside_is_blocked(torch_traced: tuple[TraceFacts, list[Finding], Path]) -> None:
    """With a read-only mount namespace the C++ writer fails; without one the file is found by the scan."""
    facts, findings, out = torch_traced
    if facts.isolation == "unshare-net-rofs":
        assert not out.exists()
    else:
        assert any(str(out) in f.message and f.severity.value == "error" for f in findings), findings


@pytest.mark.slow
def test_runtime_honest_twin_traces_clean(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    ctx = _context(tmp_path, "honest21", RUNTIME_HONEST)
    facts = gather_trace(ctx)
    found = _findings(ctx, facts)
    assert [f for f in found if f.severity.value == "error"] == [], found
