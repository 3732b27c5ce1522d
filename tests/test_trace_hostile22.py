"""Hostile review 22 (issue 15): a hostile contributor against the runtime effect trace (not the static scan).

Effects the trace does not see or cannot attribute, ways out of its sandbox, and ways to make the trace pass
while the shipped code misbehaves. Attacks that leave the trace able to report are modules of one traced
contribution (RUNTIME22): each must be an ERROR at its lines marked `# <-`. Attacks on the trace itself
(forging its report, blinding or patching the tracer, killing it early) each get a trace of their own
(ALONE22): each must end in an error, at its marked line or as a failed / unattributed trace (FT131/FT132:
fail closed). Attacks that got through when this file was written are strict xfails: their id is a key of
RUNTIME22_OPEN / ALONE22_OPEN with the one-line reason. The honest twins (HONEST22) must trace clean.
Attacks already in tests/test_trace*.py and tests/test_escapes_hostile21.py are not repeated."""

from __future__ import annotations

from pathlib import Path

import pytest

from fasttrack.confinement.trace.facts import TraceFacts
from fasttrack.confinement.trace.gather import gather_trace
from fasttrack.findings import Finding
from tests.escape_marks import marked_lines
from tests.test_trace import _context, _findings

_FORGED_DONE = ('b\'{"kind": "done", "seconds": 0.1, "preimport_failed": [], "missing": [], '
                '"imports_absorbed": 0, "standins": 0, "imported": 1}\\n\'')

RUNTIME22: dict[str, str] = {
    # -- deferred: code that runs after the "after" snapshot, in the engine ---------------------------------
    # a thread started below `threading` (not in threading.enumerate(), not settled, not traced)
    "thread_raw.py": "import _thread, time, json\ndef later():\n    time.sleep(0.3)\n    json.dumps = repr\n"
                     "_thread.start_new_thread(later, ())  # <-\n",
    # a reference cycle promoted to the oldest generation: its __del__ runs at the next full collection
    "cycle_del.py": "import gc, textwrap\nclass O:\n    def __del__(self):\n"
                    "        textwrap.fill = str  # <-\n"
                    "o = O()\no.me = o\ngc.collect(1)\ndel o\n",
    # the same with a weakref callback on an object of that cycle
    "cycle_weakref.py": "import gc, weakref, html\nclass O:\n    pass\no = O()\no.me = o\n"
                        "R = weakref.ref(o, lambda _: setattr(html, 'escape', str))  # <-\n"
                        "gc.collect(1)\ndel o\n",
    # a codec search function: runs (and patches) when the engine first looks up an uncached encoding
    "codecs_search.py": "import codecs, email.utils\ndef search(name):\n    if name == 'latin9':\n"
                        "        email.utils.quote = str\n    return None\ncodecs.register(search)  # <-\n",
    # async-generator hooks: run when the engine (asyncio everywhere) first iterates an async generator
    "asyncgen_hooks.py": "import sys, json\n"
                         "sys.set_asyncgen_hooks(  # <-\n"
                         "    firstiter=lambda agen: setattr(json, 'loads', repr))\n",
    # a delayed kill of the engine: SIGVTALRM / SIGALRM's default action terminates the process
    "itimer_bomb.py": "import signal\nsignal.setitimer(signal.ITIMER_VIRTUAL, 86400)  # <-\n",
    "alarm_bomb.py": "import signal\nsignal.alarm(86400)  # <-\n",
    # SIGTERM blocked: the engine can no longer be stopped gracefully
    "sigmask.py": "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # <-\n",
    # -- process-wide state with no snapshot key ----------------------------------------------------------
    "affinity.py": "import os\nos.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # <-\n",
    "nice.py": "import os\nos.nice(1)  # <-\n",
    "decimal_context.py": "import decimal\ndecimal.getcontext().prec = 5  # <-\n",
    "decimal_default.py": "import decimal\ndecimal.DefaultContext.prec = 6  # <-\n",
    # an import hijack: a finder of its own for a sys.path entry (every later import from it goes through it)
    "path_importer_cache.py": "import sys, sysconfig\nd = sysconfig.get_paths()['purelib']\n"
                              "orig = sys.path_importer_cache.get(d)\nclass F:\n"
                              "    def find_spec(self, name, target=None):\n"
                              "        return orig.find_spec(name, target) if orig else None\n"
                              "    def invalidate_caches(self):\n        pass\n"
                              "sys.path_importer_cache[d] = F()  # <-\n",
    # -- in-place changes of containers the snapshot compares by identity only ------------------------------
    "kwdefaults_inplace.py": "import json\njson.dumps.__kwdefaults__['sort_keys'] = True  # <-\n",
    "private_dispatch.py": "import copy\ncopy._deepcopy_dispatch[complex] = lambda x, memo: 0j  # <-\n",
    "class_dispatch.py": "import pickle\npickle._Pickler.dispatch[complex] = lambda self, obj: None  # <-\n",
    # -- native memory and processes below the audit hooks ---------------------------------------------------
    "ctypes_from_address.py": "import ctypes, string, sys\ns = string.punctuation\n"
                              "off = sys.getsizeof(s) - len(s) - 1\n"
                              "(ctypes.c_char * 1).from_address(id(s) + off)[0] = b'?'  # <-\n",
    "fork_exec.py": "import _posixsubprocess, os\nr, w = os.pipe()\n"
                    "pid = _posixsubprocess.fork_exec(  # <-\n"
                    "    [b'/bin/sh', b'-c', b'exit 0'], [b'/bin/sh'], True, (w,), None, None,\n"
                    "    -1, -1, -1, -1, -1, -1, r, w, False, False, -1, None, None, None, -1, None, False)\n"
                    "os.waitpid(pid, 0)\n",
    # a gc walk through a frozen importlib helper (the contribution is not the direct caller)
    "gc_walk_hidden.py": "import gc, importlib._bootstrap as b\n"
                         "N = len(b._call_with_frames_removed(gc.get_objects))  # <-\n",
    # reaching the tracer's frame (and its locals) through a frame walk
    "frame_walk.py": "import inspect\nf = inspect.currentframe()  # <-\nwhile f.f_back is not None:\n"
                     "    f = f.f_back\nLOCALS = f.f_locals\n",
    "traceback_frame.py": "try:\n    raise ValueError\nexcept ValueError as e:\n"
                          "    F = e.__traceback__.tb_frame  # <-\n",
    # patches only outside the sandbox (its working directory's name gives it away)
    "sandbox_detect.py": "import os, keyword\nif 'fasttrack-trace-' not in os.getcwd():\n"
                         "    setattr(*(keyword, 'iskeyword', repr))  # <-\n",
    # the same, told by something a sandbox cannot hide from code that runs in it (here: `python -I`)
    "sandbox_detect_flags.py": "import sys, keyword\nif not sys.flags.isolated:\n"
                               "    setattr(*(keyword, 'issoftkeyword', repr))  # <-\n",
    # -- caught when written (variants of earlier families) -----------------------------------------------
    "proc_mem_write.py": "open('/proc/self/mem', 'r+b')  # <-\n",
    "abstract_socket.py": "import socket\nsocket.socket(socket.AF_UNIX).bind('\\0fasttrack-evil')  # <-\n",
    "threading_setprofile.py": "import threading\nthreading.setprofile(lambda *a: None)  # <-\n",
    # a forged report on stdout: stdout is a log, never parsed
    "stdout_forgery.py": "import string\nprint('{\"kind\": \"done\"}')\n"
                         "setattr(string, 'capwords', str)  # <-\n",
}
RUNTIME22_OPEN: dict[str, str] = {
    "sandbox_detect_flags.py": "code that tells it is traced (the interpreter's flags, its argv, the tracer's"
                               " own wrappers) and patches only outside is never run patching: a trace cannot"
                               " see code that refuses to run (the static scan reads the patch;"
                               " docs/verify.md)",
}

# Attacks on the trace itself: one trace each.
ALONE22: dict[str, str] = {
    # a forged `done` on the event pipe (found by fstat), then exit before the real "after" snapshot
    "forge_done.py": "import json, os, stat\nsetattr(json, 'dumps', repr)  # <-\nfor fd in range(3, 256):\n"
                     "    try:\n        if stat.S_ISFIFO(os.fstat(fd).st_mode):\n"
                     f"            os.write(fd, {_FORGED_DONE})\n"
                     "    except OSError:\n        pass\nos._exit(0)\n",
    # the tracer found on sys.meta_path and switched off: the audit hook then blocks nothing
    "blind_active.py": "import sys, subprocess\nfor f in sys.meta_path:\n"
                       "    if hasattr(f, 'active') and hasattr(f, 'hook'):\n        f.active = False\n"
                       "subprocess.run(['/bin/true'])  # <-\n",
    # the tracer's own module patched through sys.modules: the diff comes back empty
    "patch_tracer_module.py": "import sys, json\n"
                              "sys.modules['_fasttrack_trace.snapshot'].diff = lambda before, after: []\n"
                              "json.loads = repr  # <-\n",
    # the same through a tracer method's globals (the modules are not in sys.modules)
    "patch_tracer_globals.py": "import sys, json\nfor t in sys.meta_path:\n"
                               "    if hasattr(t, 'hook'):\n"
                               "        type(t).hook.__globals__['snapshot'].diff = lambda a, b: []\n"
                               "json.loads = repr  # <-\n",
    # a method of the tracer shadowed on the instance: its snapshot skips every module
    "shadow_skip.py": "import sys, json\nfor t in sys.meta_path:\n    if hasattr(t, 'hook'):\n"
                      "        t.skip = lambda name: True\njson.loads = repr  # <-\n",
    # a builtin the snapshot uses (`vars`) replaced by a liar that hides the patch (and itself)
    "builtins_liar.py": "import builtins, json\n_v = builtins.vars\n_d = json.dumps\n"
                        "def vars(o=None):\n    d = _v(o) if o is not None else {}\n"
                        "    if o is json:\n        d = dict(d, dumps=_d)\n"
                        "    if o is builtins:\n        d = dict(d, vars=_v)\n    return d\n"
                        "builtins.vars = vars\njson.dumps = repr  # <-\n",
    # the tracer's own sender made to send a `done` (not from the tracer's main: unprivileged, refused)
    "forge_via_tracer.py": "import sys, json, os\njson.dumps = repr  # <-\nfor t in sys.meta_path:\n"
                           "    if hasattr(t, 'send') and hasattr(t, 'hook'):\n"
                           "        t.send({'kind': 'done', 'seconds': 0.1, 'preimport_failed': [],\n"
                           "                'missing': [], 'imports_absorbed': 0, 'standins': 0,\n"
                           "                'imported': 1})\n"
                           "        os._exit(0)\n",
    # the locate pass told that every watched key was a library's own import-time work
    "absorbed_poison.py": "import sys, json\nfor t in sys.meta_path:\n"
                          "    if hasattr(t, 'absorbed') and hasattr(t, 'watch'):\n"
                          "        t.absorbed.update(t.watch)\n        t.watch.clear()\n"
                          "json.dumps = repr  # <-\n",
    # exit before the report: no `done`, fails closed
    "exit_early.py": "import os, json\njson.dumps = repr  # <-\nos._exit(0)\n",
    # output past the file-size limit on stdout: the child dies, fails closed
    "huge_stdout.py": "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(100):\n"
                      "    sys.stdout.write(chunk)  # <-\n",
}
ALONE22_OPEN: dict[str, str] = {}

# torch's process-wide switches in a trace of their own (torch is imported for it)
TORCH22: dict[str, str] = {
    "autocast_cpu.py": "import torch\ntorch.autocast('cpu').__enter__()  # <-\n",
    "texpr_fuser.py": "import torch\ntorch._C._jit_set_texpr_fuser_enabled(False)  # <-\n",
    "flush_denormal.py": "import torch\ntorch.set_flush_denormal(True)  # <-\n",
    "warn_always.py": "import torch\ntorch.set_warn_always(True)  # <-\n",
    "print_options.py": "import torch\ntorch.set_printoptions(precision=1)  # <-\n",
}
TORCH22_OPEN: dict[str, str] = {}
# traced beside TORCH22: torch's own work while the contribution uses it (lazily imported submodules, a
# module's parameters) is torch's bookkeeping, not a setting
TORCH22_HONEST: dict[str, str] = {
    # the honest way to build a layer at import: the global generator's state put back (fork_rng)
    "torch_use.py": "import torch\nT = torch.ones(3)\nwith torch.random.fork_rng(devices=[]):\n"
                    "    L = torch.nn.Linear(2, 2)\n"
                    "Y = L(torch.zeros(1, 2)).sum().item()\nimport torch.nn.functional as F\nZ = F.relu(T)\n",
}

HONEST22: dict[str, str] = {
    "own_raw_thread.py": "import _thread\nDONE = []\nlock = _thread.allocate_lock()\nlock.acquire()\n"
                         "def work():\n    DONE.append(1)\n    lock.release()\n"
                         "_thread.start_new_thread(work, ())\nlock.acquire()\n",
    "own_cycle.py": "import gc\nDEAD = []\nclass O:\n    def __del__(self):\n        DEAD.append(1)\n"
                    "o = O()\no.me = o\ndel o\n",
    "codecs_use.py": "import codecs\nINFO = codecs.lookup('utf-8')\nB = 'x'.encode('latin-1')\n",
    "signal_read.py": "import signal\nT = signal.getitimer(signal.ITIMER_REAL)\n"
                      "M = signal.pthread_sigmask(signal.SIG_BLOCK, [])\n",
    "affinity_read.py": "import os\nCPUS = len(os.sched_getaffinity(0))\n"
                        "PRIO = os.getpriority(os.PRIO_PROCESS, 0)\n",
    "decimal_local.py": "import decimal\nwith decimal.localcontext() as c:\n    c.prec = 5\n"
                        "    X = decimal.Decimal(1) / 3\n",
    "logs.py": "import logging, inspect, traceback\nLOG = logging.getLogger(__name__)\n"
               "LOG.warning('loaded')\n"
               "TB = traceback.format_stack()\n"
               "SIG = inspect.signature(LOG.warning)\n",
    "ctypes_size.py": "import ctypes\nN = ctypes.sizeof(ctypes.c_int)\n",
    "asyncgen_def.py": "async def gen():\n    yield 1\n",
    "sysconfig_use.py": "import sysconfig\nPURE = sysconfig.get_paths()['purelib']\n",
    # private tables used, not changed: a regex cache (data), pickle's and copy's dispatch tables read
    "private_tables.py": "import re, io, pickle, copy\nP = re.compile('ab+c')\nB = io.BytesIO()\n"
                         "pickle._Pickler(B).dump({'a': 1j})\nC = copy.deepcopy([1j, {2: 3}])\n",
    "own_dispatch.py": "import copy\nclass P:\n    def __deepcopy__(self, memo):\n        return P()\n"
                       "Q = copy.deepcopy(P())\nD = {complex: 1}\nD[int] = 2\n",
}


def _errors_at(findings: list[Finding], package: str, module: str) -> set[int]:
    return {f.line or 0 for f in findings if f.path == f"{package}/{module}" and f.severity.value == "error"}


@pytest.fixture(scope="module")
def traced22(tmp_path_factory: pytest.TempPathFactory) -> tuple[TraceFacts, list[Finding]]:
    ctx = _context(tmp_path_factory.mktemp("rt22"), "evil", RUNTIME22)
    facts = gather_trace(ctx)
    return facts, _findings(ctx, facts)


def test_open_ids_are_attacks() -> None:
    assert set(RUNTIME22_OPEN) <= set(RUNTIME22) and set(ALONE22_OPEN) <= set(ALONE22)
    assert set(TORCH22_OPEN) <= set(TORCH22)
    assert len(RUNTIME22) + len(ALONE22) + len(TORCH22) >= 30


@pytest.mark.slow
@pytest.mark.parametrize("module", [
    pytest.param(k, id=k, marks=[pytest.mark.xfail(strict=True, reason=RUNTIME22_OPEN[k])]
                 if k in RUNTIME22_OPEN else []) for k in RUNTIME22])
def test_runtime22_effect_is_an_error_at_its_line(traced22: tuple[TraceFacts, list[Finding]],
                                                  module: str) -> None:
    _, findings = traced22
    want = marked_lines(RUNTIME22[module])
    assert want and set(want) <= _errors_at(findings, "evil", module), sorted(
        (f.code, f.line, f.message[:80]) for f in findings if f.path == f"evil/{module}")


@pytest.mark.slow
@pytest.mark.parametrize("module", [
    pytest.param(k, id=k, marks=[pytest.mark.xfail(strict=True, reason=ALONE22_OPEN[k])]
                 if k in ALONE22_OPEN else []) for k in ALONE22])
def test_attack_on_the_trace_ends_in_an_error(tmp_path: Path, module: str) -> None:
    ctx = _context(tmp_path, "evil", {module: ALONE22[module]})
    facts = gather_trace(ctx)
    findings = _findings(ctx, facts)
    at_line = set(marked_lines(ALONE22[module])) <= _errors_at(findings, "evil", module)
    failed = any(f.code in ("FT131", "FT132") and f.severity.value == "error" for f in findings)
    assert at_line or failed, (facts.status, facts.reason,
                               [(f.code, f.line, f.message[:80]) for f in findings])


@pytest.fixture(scope="module")
def torch_traced22(tmp_path_factory: pytest.TempPathFactory) -> tuple[TraceFacts, list[Finding]]:
    pytest.importorskip("torch")
    ctx = _context(tmp_path_factory.mktemp("rt22t"), "evilt", {**TORCH22, **TORCH22_HONEST})
    facts = gather_trace(ctx)
    return facts, _findings(ctx, facts)


@pytest.mark.slow
@pytest.mark.parametrize("module", [
    pytest.param(k, id=k, marks=[pytest.mark.xfail(strict=True, reason=TORCH22_OPEN[k])]
                 if k in TORCH22_OPEN else []) for k in TORCH22])
def test_torch22_effect_is_an_error_at_its_line(torch_traced22: tuple[TraceFacts, list[Finding]],
                                                module: str) -> None:
    _, findings = torch_traced22
    want = marked_lines(TORCH22[module])
    assert want and set(want) <= _errors_at(findings, "evilt", module), sorted(
        (f.code, f.line, f.message[:80]) for f in findings if f.path == f"evilt/{module}")


@pytest.mark.slow
def test_torch22_honest_use_is_clean(torch_traced22: tuple[TraceFacts, list[Finding]]) -> None:
    _, findings = torch_traced22
    honest = {f"evilt/{m}" for m in TORCH22_HONEST}
    assert [(f.code, f.path, f.line) for f in findings if f.path in honest] == []


@pytest.mark.slow
def test_honest22_twin_traces_clean(tmp_path: Path) -> None:
    ctx = _context(tmp_path, "honest22", HONEST22)
    facts = gather_trace(ctx)
    found = _findings(ctx, facts)
    assert facts.status.value == "ok" and found == [], (facts.reason, found)


def test_sandbox_detect_flags_is_a_static_error() -> None:
    """`sandbox_detect_flags.py` is inherent to tracing (code that tells it is traced and then does nothing
    cannot be seen patching): the static scan is the barrier, and reports its patch as an error."""
    import textwrap

    from fasttrack.confinement.escapes import find_escapes
    from tests.escape_marks import error_lines

    src = RUNTIME22["sandbox_detect_flags.py"]
    found = find_escapes(textwrap.dedent(src), "vllm/models/kimi_k3/evil.py", {"vllm.models.kimi_k3"},
                         own_op_namespaces={"kimi_k3"})
    assert set(marked_lines(src)) <= set(error_lines(found)), [(e.line, e.severity, e.code) for e in found]
