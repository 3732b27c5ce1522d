"""Hostile review 23 (issue 15): new attacks on the runtime effect trace, beyond test_trace_hostile22.py.

Families: effects hidden inside a foreign module's own import (absorbed as that library's import-time work),
effects deferred past the "after" snapshot (interpreter shutdown, threading's own exit hooks, faulthandler
timers), C-level interpreter and process state without a snapshot key, caches a later call reads (re,
encodings, linecache, importlib's finders), objects reached only through another object (a function behind
an lru_cache wrapper, an instance held by a class), shared registries changed through the owning library's
own setter (taken for its bookkeeping), native memory written through a ctypes pointer, torch's global state
without a switch key, and the tracer's own bookkeeping (reached through sys.meta_path).

Attacks that leave the trace able to report are modules of one traced contribution per group (RUNTIME23,
TORCH23): each must be an ERROR at its lines marked `# <-`. Attacks on the tracer get a trace each (ALONE23):
each must end in an error, at its marked line or as a failed / unattributed trace (FT131/FT132). Attacks that
get through are strict xfails keyed in the *_OPEN dicts with a one-line reason. The honest twins (HONEST23,
one trace, and one for torch) must trace clean; one that is flagged is a strict xfail in
OPEN_FALSE_POSITIVES."""

from __future__ import annotations

import pytest

from fasttrack.confinement.trace.facts import TraceFacts
from fasttrack.confinement.trace.gather import gather_trace
from fasttrack.findings import Finding
from tests.escape_marks import marked_lines
from tests.test_trace import _context, _findings
from tests.test_trace_hostile22 import _errors_at

RUNTIME23: dict[str, str] = {
    # -- hidden inside a foreign import: the change lands between the tracer's pre- and post-import
    # snapshots of a library imported by a computed name, so it is taken for that library's own work. The
    # trigger is deterministic: an own object with __del__ placed as the oldest entry of a full re cache is
    # evicted by the first uncached re.compile, which difflib's module body makes.
    "absorbed_by_import.py": "import re, tabnanny\nclass _D:\n    def __del__(self):\n"
                             "        tabnanny.check = print  # <-\n"
                             "old = list(re._cache.items())\nre._cache.clear()\n"
                             "re._cache[('fasttrack',)] = _D()\n"
                             "re._cache.update(old)\nfor i in range(re._MAXCACHE):\n"
                             "    if len(re._cache) >= re._MAXCACHE:\n        break\n"
                             "    re._cache[('pad', i)] = None\n"
                             "__import__('diff' + 'lib')\n",
    # -- deferred past the "after" snapshot ------------------------------------------------------------------
    # an own module global with __del__: runs when the engine's interpreter tears its modules down
    "shutdown_del.py": "import pprint\nclass _K:\n    def __del__(self):\n"
                       "        pprint.pformat = repr\n"
                       "KEEP = _K()  # <-\n",
    # threading's own exit hooks (run by threading._shutdown, before atexit; not counted by atexit)
    "threading_atexit.py": "import threading, shlex\n"
                           "threading._register_atexit(setattr, shlex, 'quote', str)  # <-\n",
    # a traceback-dump timer that ends the engine (exit=True) a day later
    "faulthandler_later.py": "import faulthandler\n"
                             "faulthandler.dump_traceback_later(86400, exit=True)  # <-\n",
    # SIGTERM taken over below the signal module (signal.getsignal still says SIG_DFL): the engine no
    # longer stops on SIGTERM
    "faulthandler_sigterm.py": "import faulthandler, signal\n"
                               "faulthandler.register(signal.SIGTERM, chain=False)  # <-\n",
    # multiprocessing's own hooks: run in every worker the engine forks, and at multiprocessing's exit
    "mp_after_fork.py": "import multiprocessing.util as u, calendar\nclass _K:\n    pass\nKEEP = _K()\n"
                        "u.register_after_fork(KEEP, lambda o: setattr(calendar, 'day_name', []))  # <-\n",
    "mp_finalize.py": "import multiprocessing.util as u, colorsys\n"
                      "u.Finalize(None, setattr, args=(colorsys, 'rgb_to_hsv', max), exitpriority=0)  # <-\n",
    # -- C-level interpreter and process state without a snapshot key ---------------------------------------
    # SA_RESTART cleared for SIGINT: the engine's blocking calls now fail with EINTR (getsignal unchanged)
    "siginterrupt.py": "import signal\nsignal.siginterrupt(signal.SIGINT, True)  # <-\n",
    "thread_stack_size.py": "import threading\nthreading.stack_size(65536)  # <-\n",
    "gc_freeze.py": "import gc\ngc.freeze()  # <-\n",
    "tracemalloc_start.py": "import tracemalloc\ntracemalloc.start(25)  # <-\n",
    "codecs_error_handler.py": "import codecs\n"
                               "codecs.register_error('namereplace', lambda e: ('?', e.end))  # <-\n",
    "wakeup_fd.py": "import os, signal\nr, w = os.pipe()\nos.set_blocking(w, False)\n"
                    "signal.set_wakeup_fd(w)  # <-\n",
    # the engine's stderr (its logs) sent to /dev/null: fd 2 replaced under sys.stderr
    "stderr_dup2.py": "import os\nnull = os.open(os.devnull, os.O_WRONLY)\nos.dup2(null, 2)  # <-\n",
    # the shared stdout stream reconfigured in place (same object, C-level fields)
    "stdout_reconfigure.py": "import sys\nsys.stdout.reconfigure(encoding='ascii', errors='strict')  # <-\n",
    # a new session: the engine leaves its terminal's process group (fails in the sandbox, whose child is
    # already a session leader; the failure is swallowed, so the trace sees nothing)
    "setsid_swallowed.py": "import os\ntry:\n    os.setsid()  # <-\nexcept OSError:\n    pass\n",
    "numpy_seed.py": "import numpy\nnumpy.random.seed(1234)  # <-\n",
    # -- caches a later call reads ------------------------------------------------------------------------
    "re_cache.py": "import re\nre._cache[(str, r'\\d+', 0)] = re.compile(r'x\\Ay')  # <-\n",
    "encodings_cache.py": "import codecs, encodings\n"
                          "encodings._cache['cp037'] = codecs.lookup('utf-8')  # <-\n",
    "linecache_poison.py": "import linecache, json\n"
                           "linecache.cache[json.__file__] = (1, None, ['# nothing to see\\n'] * 400,  # <-\n"
                           "                                  json.__file__)\n",
    # a loader of its own for .py files inside the existing finder of the stdlib's directory: every later
    # stdlib import goes through it (the finder object, which is all the snapshot compares, is the same)
    "filefinder_loaders.py": "import sys, os, importlib.machinery as m\n"
                             "class L(m.SourceFileLoader):\n    pass\n"
                             "d = os.path.dirname(os.__file__)\nf = sys.path_importer_cache.get(d)\n"
                             "if f is not None:\n"
                             "    f._loaders.insert(0, ('.py', L))  # <-\n",
    # -- objects reached only through another object (compared by identity or not at all) ----------------
    # the function behind fnmatch's lru_cache wrapper: every pattern now matches everything (caught when
    # written: the wrapper's __dict__ is an obj: key, so the __code__ write is audited on a known object)
    "lru_wrapped_code.py": "import fnmatch\n"
                           "fnmatch._compile_pattern.__wrapped__.__code__ = (  # <-\n"
                           "    lambda pat: re.compile('(?s:.*)').match).__code__\n",
    # the function a decorator's wrapper calls, in its closure cell (ChainMap.__repr__ via reprlib)
    "closure_cell.py": "import collections\nr = collections.ChainMap.__repr__\n"
                       "i = r.__code__.co_freevars.index('user_function')\n"
                       "r.__closure__[i].cell_contents = lambda self: 'ChainMap()'  # <-\n",
    # the logging Manager shared by every logger (a class attribute's instance): later loggers are silent
    "logging_manager.py": "import logging\nclass _Q(logging.Logger):\n"
                          "    def isEnabledFor(self, level):\n        return False\n"
                          "logging.Logger.manager.loggerClass = _Q  # <-\n",
    # -- shared registries changed through the owning library's own setter (taken for its bookkeeping) ---
    "copyreg_pickle.py": "import copyreg\n"
                         "copyreg.pickle(complex, lambda c: (complex, (0.0, 0.0)))  # <-\n",
    "mimetypes_add.py": "import mimetypes\nmimetypes.add_type('text/x-evil', '.json')  # <-\n",
    "asyncio_policy.py": "import asyncio\nclass _P(asyncio.DefaultEventLoopPolicy):\n    pass\n"
                         "asyncio.set_event_loop_policy(_P())  # <-\n",
    # an own class made with type() under another module's name: not taken for the contribution's value
    "logger_class_disguised.py": "import logging\n"
                                 "logging.setLoggerClass(type('Logger', (logging.Logger,), {  # <-\n"
                                 "    '__module__': 'logging',\n"
                                 "    'isEnabledFor': lambda self, level: False}))\n",
    # slot values of a module-level instance (no __dict__ to snapshot), set past its immutability guard
    "uuid_slots.py": "import uuid\nobject.__setattr__(uuid.NAMESPACE_DNS, 'int', 0)  # <-\n",
    # -- native memory through a ctypes pointer (no from_address: indexing a pointer is not audited) ----
    "ctypes_pointer_index.py": "import ctypes, string, sys\ns = string.punctuation\nc = ctypes.c_char(b'a')\n"
                               "p = ctypes.pointer(c)\n"
                               "off = id(s) + sys.getsizeof(s) - len(s) - 1 - ctypes.addressof(c)\n"
                               "p[off] = b'?'  # <-\n",
}
RUNTIME23_OPEN: dict[str, str] = {
    "ctypes_pointer_index.py": "a write through a ctypes pointer's index is not audited (nor addressof)",
}

# torch's global state without a switch key (one trace, torch imported)
TORCH23: dict[str, str] = {
    # the CPU generator's state changed with its byte sum kept (the snapshot compares only the sum)
    "rng_sum_collision.py": "import torch\ns = torch.get_rng_state()\ni = 8\n"
                            "j = next(k for k in range(9, len(s)) if s[k] != s[i])\n"
                            "s[i], s[j] = s[j].clone(), s[i].clone()\n"
                            "torch.set_rng_state(s)  # <-\n",
    "torch_function_mode.py": "import torch\nfrom torch.overrides import TorchFunctionMode\n"
                              "class M(TorchFunctionMode):\n"
                              "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
                              "        return func(*args, **(kwargs or {}))\n"
                              "M().__enter__()  # <-\n",
    "torch_dispatch_mode.py": "import torch\nfrom torch.utils._python_dispatch import TorchDispatchMode\n"
                              "class D(TorchDispatchMode):\n"
                              "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
                              "        return func(*args, **(kwargs or {}))\n"
                              "D().__enter__()  # <-\n",
    "saved_tensors_hooks.py": "import torch\n"
                              "h = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)\n"
                              "h.__enter__()  # <-\n",
    "fill_uninitialized.py": "import torch\n"
                             "torch.utils.deterministic.fill_uninitialized_memory = False  # <-\n",
    "profiling_executor.py": "import torch\ntorch._C._jit_set_profiling_executor(False)  # <-\n",
    "quantized_engine.py": "import torch\ntorch.backends.quantized.engine = 'qnnpack'  # <-\n",
    "autograd_fallback.py": "import torch\ntorch._C._set_autograd_fallback_mode('nothing')  # <-\n",
    "mha_fastpath.py": "import torch\ntorch.backends.mha.set_fastpath_enabled(False)  # <-\n",
    "autocast_dtype.py": "import torch\ntorch.set_autocast_dtype('cpu', torch.float16)  # <-\n",
    "sparse_invariants.py": "import torch\ntorch.sparse.check_sparse_tensor_invariants.enable()  # <-\n",
}
TORCH23_OPEN: dict[str, str] = {}

# The rest of torch's process-wide (or main-thread) switches the trace keys (fasttrack/confinement/trace/
# torch_state.py): one attack each, in the same trace as TORCH23.
_T = "import torch\n"
_C = "import torch\nC = torch._C\n"
_FLIP = ("cublas_allow_fp16_accumulation", "mkldnn_deterministic", "nnpack_enabled", "miopen_immediate",
         "math_sdp_allow_fp16_bf16_reduction", "backcompat_broadcast_warn", "backcompat_keepdim_warn",
         "dtensor_allow_implicit_replication")
_FLIP_IS = (("fwd_grad_enabled", "is_fwd_grad_enabled"), ("view_replay_enabled", "is_view_replay_enabled"),
            ("multithreading_enabled", "is_multithreading_enabled"),
            ("grad_layout_enforcement_enabled", "is_grad_layout_enforcement_enabled"),
            ("only_lift_cpu_tensors", "only_lift_cpu_tensors"),
            ("warn_on_accumulate_grad_stream_mismatch", "warn_on_accumulate_grad_stream_mismatch"),
            ("override_stale_capture_stream", "override_stale_capture_stream"),
            ("warnAlways", "get_warnAlways"),
            ("sdp_use_fa3", "get_fa3_sdp_enabled"), ("sdp_use_overrideable", "get_overrideable_sdp_enabled"))
_FLIP_JIT = (("llga_enabled", "llga_enabled"), ("onnx_log_enabled", "is_onnx_log_enabled"),
             ("symbolic_shapes_test_mode", "symbolic_shapes_test_mode_enabled"),
             ("te_generate_block_code", "get_te_generate_block_code"),
             ("te_must_use_llvm_cpu", "get_te_must_use_llvm_cpu"),
             ("texpr_dynamic_shape_enabled", "texpr_dynamic_shape_enabled"),
             ("texpr_reductions_enabled", "texpr_reductions_enabled"),
             ("tracer_state_warn", "get_tracer_state_warn"))
TORCH23_MORE: dict[str, str] = {
    # a draw from the global generator at import (an nn.Linear's default init) moves the random stream every
    # other model and the engine's seeded runs see (the old byte-sum key missed it: a draw moves `left` down,
    # `next` up by one); the honest form, under fork_rng, is tests/test_trace_hostile22.py's torch_use.py
    "global_rng_draw.py": "import torch\nL = torch.nn.Linear(2, 2)  # <-\n",
    **{f"flip_{n}.py": f"{_C}C._set_{n}(not C._get_{n}())  # <-\n" for n in _FLIP},
    **{f"flip_{n}.py": f"{_C}C._set_{n}(not C._{g}())  # <-\n" for n, g in _FLIP_IS},
    **{f"jit_flip_{n}.py": f"{_C}C._jit_set_{n}(not C._jit_{g}())  # <-\n" for n, g in _FLIP_JIT},
    **{f"jit_{n}.py": f"{_C}C._jit_set_{n}(7)  # <-\n" for n in (
        "te_cuda_pointwise_block_count", "te_cuda_pointwise_block_size", "te_cuda_pointwise_loop_levels",
        "num_profiled_runs")},
    "jit_texpr_fallback.py": f"{_C}C._jit_texpr_set_fallback_allowed("
                             "not C._jit_texpr_fallback_allowed())  # <-\n",
    "cudnn_depthwise_kernel.py": f"{_C}C._set_cudnn_depthwise_kernel('cudnn')  # <-\n",
    "jit_fusion_group_inlining.py": f"{_C}C._debug_set_fusion_group_inlining("
                                    "not C._debug_get_fusion_group_inlining())  # <-\n",
    "jit_logging_option.py": f"{_C}C._jit_set_logging_option('evil')  # <-\n",
    "jit_profiling_mode.py": f"{_C}C._jit_set_profiling_mode(False)  # <-\n",
    "jit_fusion_strategy.py": f"{_T}torch.jit.set_fusion_strategy([('DYNAMIC', 3)])  # <-\n",
    "jit_autocast_mode.py": f"{_C}C._jit_set_autocast_mode(False)  # <-\n",
    "jit_emit_hooks.py": f"{_C}def h(*a):\n    pass\nC._jit_set_emit_hooks(h, h)  # <-\n",
    **{f"fp32_precision_{b}_{o}.py": f"{_C}C._set_fp32_precision_setter('{b}', '{o}', '{v}')  # <-\n"
       for b, v in (("mkldnn", "bf16"), ("cuda", "ieee")) for o in ("matmul", "conv", "rnn")},
    "fp32_precision_generic.py": f"{_T}torch.backends.fp32_precision = 'tf32'  # <-\n",
    "blas_backend.py": f"{_C}C._set_blas_preferred_backend(C._BlasBackend.Ck)  # <-\n",
    # the backend is set before the build is found to lack it
    "linalg_backend.py": f"{_C}try:\n    C._set_linalg_preferred_backend(C._LinalgBackend.Magma)  # <-\n"
                         "except RuntimeError:\n    pass\n",
    "rocm_fa_backend.py": f"{_C}C._set_rocm_fa_preferred_backend(C._ROCmFABackend.Ck)  # <-\n",
    "sdp_priority.py": f"{_C}C._set_sdp_priority_order([2, 1, 0, 3, 4])  # <-\n",
    "anomaly_check_nan.py": f"{_T}torch.set_anomaly_enabled(False, False)  # <-\n",
    "profiler_left_on.py": f"{_T}P = torch.autograd.profiler.profile(use_kineto=False)\n"
                           "P.__enter__()  # <-\n",
    "autocast_cache.py": f"{_T}torch.set_autocast_cache_enabled(False)  # <-\n",
    "autocast_cpu_dtype.py": f"{_T}torch.set_autocast_cpu_dtype(torch.float32)  # <-\n",
    "autocast_gpu_dtype.py": f"{_T}torch.set_autocast_gpu_dtype(torch.bfloat16)  # <-\n",
    "autocast_xpu_on.py": f"{_T}torch.set_autocast_enabled('xpu', True)  # <-\n",
    "autocast_nesting.py": f"{_T}torch.autocast_increment_nesting()  # <-\n",
    "dispatch_exclude.py": f"{_C}G = C._DisableTorchDispatch()  # <-\nG.__enter__()\n",
    "dispatch_include.py": f"{_C}C._dispatch_tls_set_dispatch_key_included("
                           "C.DispatchKey.Negative, True)  # <-\n",
    "function_state.py": f"{_C}G = C.DisableTorchFunctionSubclass()\nG.__enter__()  # <-\n",
    "function_state_all.py": f"{_C}G = C.DisableTorchFunction()\nG.__enter__()  # <-\n",
    "functorch_allowed.py": f"{_C}C._functorch.set_inplace_requires_grad_allowed(True)  # <-\n"
                            "C._functorch.set_single_level_autograd_function_allowed(True)  # <-\n",
    # last (by name): every later torch call would make grad-tracking, then meta tensors
    "zz_functorch_level.py": f"{_C}C._functorch._grad_increment_nesting()  # <-\n",
    "zz_meta_in_tls.py": f"{_C}C._set_meta_in_tls_dispatch_include(True)  # <-\n",
    "forward_ad_level.py": f"{_C}C._enter_dual_level()  # <-\n",
    "thread_name.py": f"{_C}C._set_thread_name('evil')  # <-\n",
    "mobile_allocator.py": f"{_C}C._set_default_mobile_cpu_allocator()  # <-\n",
    "privateuse1_name.py": f"{_T}torch.utils.rename_privateuse1_backend('evil')  # <-\n",
    "sm_carveout.py": f"{_C}C._set_sm_carveout_experimental(8)  # <-\n",
    "graph_exec_group.py": f"{_C}C._set_graph_exec_group(3)  # <-\n",
    "cuda_lazy_seed.py": f"{_T}torch.cuda.manual_seed_all(1234)  # <-\n",
}
TORCH23_ALL = {**TORCH23, **TORCH23_MORE}

# The tracer's bookkeeping reached through sys.meta_path (as in hostile22's absorbed_poison): one trace each.
ALONE23: dict[str, str] = {
    # the "before" value of the patched key rewritten to the patched value: the diff comes back empty
    "base_poison.py": "import sys, string\nstring.capwords = str  # <-\nfor t in sys.meta_path:\n"
                      "    if hasattr(t, 'base') and hasattr(t, 'hook'):\n"
                      "        t.base['mod:string:capwords'] = str\n",
    # the exit hooks the tracer runs itself emptied: a weakref.finalize's patch runs only in the engine
    "exits_cleared.py": "import sys, weakref, string\nclass _K:\n    pass\nKEEP = _K()\n"
                        "weakref.finalize(KEEP, setattr, string, 'capwords', str)  # <-\n"
                        "for t in sys.meta_path:\n"
                        "    if hasattr(t, 'exits') and hasattr(t, 'hook'):\n        t.exits.clear()\n",
}
ALONE23_OPEN: dict[str, str] = {
}

HONEST23: dict[str, str] = {
    "own_cycle_import.py": "import importlib\nDEAD = []\nclass O:\n    def __del__(self):\n"
                           "        DEAD.append(1)\n"
                           "o = O()\no.me = o\ndel o\nX = importlib.import_module('xml.' + 'dom')\n",
    "own_cycle_dunder_import.py": "DEAD = []\nclass O:\n    def __del__(self):\n        DEAD.append(1)\n"
                                  "o = O()\no.me = o\ndel o\nX = __import__('email.' + 'quoprimime')\n",
    "chainmap_use.py": "import collections\nR = repr(collections.ChainMap({'a': 1}))\n"
                       "C = collections.ChainMap.__repr__.__closure__\n",
    "uuid_use.py": "import uuid\nU = uuid.uuid5(uuid.NAMESPACE_DNS, 'kimi_k3')\nI = uuid.NAMESPACE_DNS.int\n",
    "own_global_del.py": "class _K:\n    def __del__(self):\n        pass\nKEEP = _K()\n",
    "reads_c_state.py": "import gc, sys, threading, tracemalloc, faulthandler, signal\n"
                        "T = gc.get_threshold()\nF = gc.get_freeze_count()\nM = tracemalloc.is_tracing()\n"
                        "H = faulthandler.is_enabled()\nS = signal.getsignal(signal.SIGTERM)\n"
                        "R = sys.getrecursionlimit()\nE = sys.stdout.encoding\n",
    "codecs_errors_use.py": "import codecs\nH = codecs.lookup_error('strict')\nB = 'é'.encode('ascii', "
                            "'backslashreplace')\nD = b'x'.decode('cp037')\n",
    "re_fnmatch_use.py": "import re, fnmatch\nP = re.compile(r'\\d+')\nOK = fnmatch.fnmatch('a.py', '*.py')\n"
                         "N = re.match(r'\\w+', 'abc')\n",
    "linecache_use.py": "import linecache, json\nLINE = linecache.getline(json.__file__, 1)\n",
    "mimetypes_use.py": "import mimetypes\nT = mimetypes.guess_type('x.json')\n",
    "logging_own.py": "import logging\nclass MyLogger(logging.Logger):\n    pass\nL = MyLogger('kimi_k3')\n"
                      "C = logging.getLoggerClass()\n",
    "copyreg_own.py": "import copyreg, pickle\nclass P:\n    def __reduce__(self):\n        return (P, ())\n"
                      "B = pickle.dumps(P())\nT = dict(copyreg.dispatch_table)\n",
    "mp_read.py": "import multiprocessing.util as u\nE = u.is_exiting()\nL = u.get_logger()\n",
    "asyncio_read.py": "import asyncio\nPOL = asyncio.get_event_loop_policy()\n",
    "ctypes_local.py": "import ctypes\nbuf = (ctypes.c_char * 4)()\np = ctypes.pointer(buf)\n"
                       "buf[0] = b'a'\nN = ctypes.sizeof(buf)\n",
    "importer_read.py": "import sys, os\nF = sys.path_importer_cache.get(os.path.dirname(os.__file__))\n",
    "numpy_local.py": "import numpy\nRNG = numpy.random.default_rng(0)\nX = RNG.standard_normal(3)\n",
}
# the same for torch, in a trace of its own (a false positive above would make it a second pass of torch)
HONEST23_TORCH: dict[str, str] = {
    "torch_local.py": "import torch\nS = torch.get_rng_state()\ng = torch.Generator()\ng.manual_seed(0)\n"
                      "X = torch.randn(2, generator=g)\n"
                      "with torch.random.fork_rng(devices=[]):\n    torch.manual_seed(0)\n"
                      "FILL = torch.utils.deterministic.fill_uninitialized_memory\n"
                      "E = torch.backends.quantized.engine\nA = torch.get_autocast_dtype('cpu')\n",
    "torch_modes_scoped.py": "import torch\nfrom torch.overrides import TorchFunctionMode\n"
                             "class M(TorchFunctionMode):\n"
                             "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
                             "        return func(*args, **(kwargs or {}))\n"
                             "with M():\n    Y = torch.ones(2) + 1\n"
                             "with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):\n"
                             "    Z = torch.ones(2, requires_grad=True) * 2\n",
}
# torch's own scoped forms of the switches above: each puts back what it set (same trace as HONEST23_TORCH)
HONEST23_TORCH_MORE: dict[str, str] = {
    "torch_scoped_switches.py": "import torch\nx = torch.ones(3, requires_grad=True)\n"
                                "with torch.no_grad(), torch.autocast('cpu'):\n    A = x * 2\n"
                                "with torch.inference_mode():\n    B = torch.ones(2) + 1\n"
                                "with torch.sparse.check_sparse_tensor_invariants():\n    C = torch.ones(2)\n"
                                "with torch.backends.cudnn.flags(enabled=False):\n    D = torch.ones(2)\n"
                                "with torch.autograd.detect_anomaly(check_nan=False):\n"
                                "    E = (x * 3).sum()\n"
                                "with torch.autograd.forward_ad.dual_level():\n    F = torch.ones(2)\n"
                                "with torch._C.DisableTorchFunctionSubclass():\n"
                                "    G = torch.ones(2) * 2\n"
                                "with torch.jit.optimized_execution(False):\n    H = torch.ones(2)\n",
    "torch_scoped_transforms.py": "import torch\nfrom torch.utils._python_dispatch import TorchDispatchMode\n"
                                  "class D(TorchDispatchMode):\n"
                                  "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
                                  "        return func(*args, **(kwargs or {}))\n"
                                  "with D():\n    Y = torch.ones(2) + 1\n"
                                  "G = torch.func.grad(lambda t: (t * t).sum())(torch.ones(3))\n"
                                  "with torch.autograd.profiler.profile(use_kineto=False):\n"
                                  "    P = torch.ones(2) * 2\n"
                                  "E = torch.backends.mha.get_fastpath_enabled()\n"
                                  "N = torch.get_num_threads()\nT = torch._C._get_thread_name()\n",
}
HONEST23_TORCH_ALL = {**HONEST23_TORCH, **HONEST23_TORCH_MORE}
OPEN_FALSE_POSITIVES: dict[str, str] = {}


def _lines(findings: list[Finding], package: str, module: str) -> list[tuple[str, int | None, str]]:
    return sorted((f.code, f.line, f.message[:90]) for f in findings if f.path == f"{package}/{module}")


def _params(attacks: dict[str, str], open_: dict[str, str]) -> list[object]:
    return [pytest.param(k, id=k, marks=[pytest.mark.xfail(strict=True, reason=open_[k])]
                         if k in open_ else []) for k in attacks]


@pytest.fixture(scope="module")
def traced23(tmp_path_factory: pytest.TempPathFactory) -> tuple[TraceFacts, list[Finding]]:
    pytest.importorskip("numpy")
    ctx = _context(tmp_path_factory.mktemp("rt23"), "evil", RUNTIME23)
    facts = gather_trace(ctx)
    return facts, _findings(ctx, facts)


@pytest.fixture(scope="module")
def torch_traced23(tmp_path_factory: pytest.TempPathFactory) -> tuple[TraceFacts, list[Finding]]:
    pytest.importorskip("torch")
    ctx = _context(tmp_path_factory.mktemp("rt23t"), "evilt", TORCH23_ALL)
    facts = gather_trace(ctx)
    return facts, _findings(ctx, facts)


@pytest.fixture(scope="module")
def honest23(tmp_path_factory: pytest.TempPathFactory) -> tuple[TraceFacts, list[Finding]]:
    pytest.importorskip("numpy")
    ctx = _context(tmp_path_factory.mktemp("h23"), "honest23", HONEST23)
    facts = gather_trace(ctx)
    return facts, _findings(ctx, facts)


@pytest.fixture(scope="module")
def honest23_torch(tmp_path_factory: pytest.TempPathFactory) -> tuple[TraceFacts, list[Finding]]:
    pytest.importorskip("torch")
    ctx = _context(tmp_path_factory.mktemp("h23t"), "honest23t", HONEST23_TORCH_ALL)
    facts = gather_trace(ctx)
    return facts, _findings(ctx, facts)


def test_open_ids_are_attacks() -> None:
    assert set(RUNTIME23_OPEN) <= set(RUNTIME23) and set(TORCH23_OPEN) <= set(TORCH23_ALL)
    assert set(ALONE23_OPEN) <= set(ALONE23)
    assert set(OPEN_FALSE_POSITIVES) <= set(HONEST23) | set(HONEST23_TORCH_ALL)
    assert all(marked_lines(text) for group in (RUNTIME23, TORCH23_ALL, ALONE23) for text in group.values())


@pytest.mark.slow
@pytest.mark.parametrize("module", _params(RUNTIME23, RUNTIME23_OPEN))
def test_runtime23_effect_is_an_error_at_its_line(traced23: tuple[TraceFacts, list[Finding]],
                                                  module: str) -> None:
    _, findings = traced23
    want = marked_lines(RUNTIME23[module])
    assert set(want) <= _errors_at(findings, "evil", module), _lines(findings, "evil", module)


@pytest.mark.slow
@pytest.mark.parametrize("module", _params(TORCH23_ALL, TORCH23_OPEN))
def test_torch23_effect_is_an_error_at_its_line(torch_traced23: tuple[TraceFacts, list[Finding]],
                                                module: str) -> None:
    _, findings = torch_traced23
    want = marked_lines(TORCH23_ALL[module])
    assert set(want) <= _errors_at(findings, "evilt", module), _lines(findings, "evilt", module)


@pytest.mark.slow
@pytest.mark.parametrize("module", _params(ALONE23, ALONE23_OPEN))
def test_attack_on_the_tracer23_ends_in_an_error(tmp_path_factory: pytest.TempPathFactory,
                                                 module: str) -> None:
    ctx = _context(tmp_path_factory.mktemp("a23"), "evil", {module: ALONE23[module]})
    facts = gather_trace(ctx)
    findings = _findings(ctx, facts)
    at_line = set(marked_lines(ALONE23[module])) <= _errors_at(findings, "evil", module)
    failed = any(f.code in ("FT131", "FT132") and f.severity.value == "error" for f in findings)
    assert at_line or failed, (facts.status, facts.reason,
                               [(f.code, f.line, f.message[:80]) for f in findings])


def _finished(traced: tuple[TraceFacts, list[Finding]]) -> None:
    facts, findings = traced
    assert facts.status.value == "ok", (facts.reason,
                                        [(f.code, f.path, f.line, f.message[:90]) for f in findings])
    assert not [f for f in findings if f.code in ("FT131", "FT132")], findings


@pytest.mark.slow
def test_honest23_trace_finished(honest23: tuple[TraceFacts, list[Finding]]) -> None:
    _finished(honest23)


@pytest.mark.slow
def test_honest23_torch_trace_finished(honest23_torch: tuple[TraceFacts, list[Finding]]) -> None:
    _finished(honest23_torch)


@pytest.mark.slow
@pytest.mark.parametrize("module", _params(HONEST23, OPEN_FALSE_POSITIVES))
def test_honest23_twin_traces_clean(honest23: tuple[TraceFacts, list[Finding]], module: str) -> None:
    _, findings = honest23
    assert _lines(findings, "honest23", module) == []


@pytest.mark.slow
@pytest.mark.parametrize("module", _params(HONEST23_TORCH_ALL, OPEN_FALSE_POSITIVES))
def test_honest23_torch_twin_traces_clean(honest23_torch: tuple[TraceFacts, list[Finding]],
                                          module: str) -> None:
    _, findings = honest23_torch
    assert _lines(findings, "honest23t", module) == []


@pytest.mark.xfail(strict=True, reason="the static scan does not report ctypes pointers (no rule in "
                   "fasttrack/confinement/escapes/ for ctypes.pointer/POINTER or a pointer's index)")
def test_ctypes_pointer_index_is_a_static_error() -> None:
    """`ctypes_pointer_index.py` is inherent to tracing in-process (a write through a pointer's index is
    plain memory, no audit event): the static scan must be the barrier for it in shipping code."""
    import textwrap

    from fasttrack.confinement.escapes import find_escapes
    from tests.escape_marks import error_lines

    src = RUNTIME23["ctypes_pointer_index.py"]
    found = find_escapes(textwrap.dedent(src), "vllm/models/kimi_k3/evil.py", {"vllm.models.kimi_k3"},
                         own_op_namespaces={"kimi_k3"})
    assert set(marked_lines(src)) <= set(error_lines(found)), [(e.line, e.severity, e.code) for e in found]
