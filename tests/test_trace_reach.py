"""Reaching the tracer's bookkeeping (issue 15, after hostile review 22's `absorbed_poison.py`).

The tracer's state (what it watches, what it took for a library's own import-time work, the baselines of
the first pass) decides what the report says; code under trace that reaches it can clear its own findings.
Each trace here is one family of ways to it. An attack that poisons the state when it finds it and then
patches at a line marked `# <-`: that line must stay an ERROR. An attack whose way in is itself an error (a
frame or a gc walk: FT134, reported before the object is handed over, so it cannot be taken back) marks
that line. Open ones are strict xfails (REACH_OPEN) with the reason.
"""

from __future__ import annotations

import pytest

from fasttrack.confinement.trace.facts import TraceFacts
from fasttrack.confinement.trace.gather import gather_trace
from fasttrack.findings import Finding
from tests.escape_marks import marked_lines
from tests.test_trace import _context, _findings

# What an attack does to the tracer when it finds it: every table that could clear a finding.
_POISON = ("def poison(t):\n"
           "    import json, html, string\n"
           "    for k in ('watch', 'absorbed', 'base', 'pending', 'baselines', 'blame'):\n"
           "        if not hasattr(t, k):\n"
           "            return False\n"
           "    t.absorbed.update(t.watch)\n    t.watch.clear()\n    t.blame.clear()\n"
           "    for m in (json, html, string):\n"
           "        for a, v in vars(m).items():\n"
           "            t.base['mod:%s:%s' % (m.__name__, a)] = v\n"
           "            t.baselines['mod:%s:%s' % (m.__name__, a)] = v\n"
           "            t.pending.pop('mod:%s:%s' % (m.__name__, a), None)\n"
           "    return True\n")

# Walks that take no audited step: attributes, closures' cells, bound methods' __self__, functions'
# globals and defaults, containers, from everything the tracer installed into shared state.
_WALK = ("import sys, types, functools, threading, atexit, codecs, _thread, weakref, json, string\n"
         + _POISON +
         "roots = [sys.meta_path, sys.path_hooks, sys.gettrace(), getattr(threading, '_trace_hook', None),\n"
         "         threading.Thread.__init__, threading.Thread.start, atexit.register,\n"
         "         _thread.start_new_thread,\n"
         "         weakref.finalize.__init__, codecs.register, sys.getprofile()]\n"
         "for m in list(sys.modules.values()):\n"
         "    roots += [getattr(m, '__spec__', None), getattr(m, '__loader__', None)]\n"
         "    for v in list(getattr(m, '__dict__', {}).values()):\n"
         "        if callable(v) and getattr(v, '__module__', '') in (None, '') or \\\n"
         "                str(getattr(v, '__module__', '')).startswith('_fasttrack'):\n"
         "            roots.append(v)\n"
         "seen, todo, found = set(), list(roots), []\n"
         "while todo and len(seen) < 20000:\n"
         "    o = todo.pop()\n"
         "    if id(o) in seen or isinstance(o, (str, bytes, int, float, type(None), types.ModuleType,\n"
         "                                       types.FrameType, types.CodeType)):\n"
         "        continue\n"
         "    seen.add(id(o))\n"
         "    try:\n        d = object.__getattribute__(o, '__dict__')\n"
         "    except Exception:\n        d = None\n"
         "    if d is not None:\n"
         "        if 'absorbed' in d or 'watch' in d:\n            found.append(o)\n"
         "        todo.extend(list(d.values()))\n"
         "    for a in ('__closure__', '__self__', '__func__', '__wrapped__', '__defaults__',\n"
         "              '__kwdefaults__'):\n"
         "        try:\n            todo.append(object.__getattribute__(o, a))\n        except Exception:\n"
         "            pass\n"
         "    if isinstance(o, types.FunctionType) and o.__module__ not in sys.modules:  # the tool's own\n"
         "        todo.append(o.__globals__)\n"
         "    if isinstance(o, types.CellType):\n"
         "        try:\n            todo.append(o.cell_contents)\n"
         "        except ValueError:\n            pass\n"
         "    if isinstance(o, functools.partial):\n        todo += [o.func, o.args, o.keywords]\n"
         "    if isinstance(o, property):\n        todo += [o.fget, o.fset]\n"
         "    if isinstance(o, (list, tuple, set, frozenset)):\n        todo.extend(list(o))\n"
         "    elif isinstance(o, dict):\n        todo.extend(list(o.values()))\n"
         "json.dumps = repr  # <-\n"
         "POISONED = [poison(t) for t in found]\n")

REACH_ALONE: dict[str, dict[str, str]] = {
    "walk": {"reach_walk.py": _WALK},
    # the finder's tables: a name added to its stand-ins would be skipped by every snapshot
    "finder": {"standins_poison.py": "import sys, json\nfor f in sys.meta_path:\n"
                                     "    for a in ('standins', 'missing'):\n"
                                     "        if isinstance(getattr(f, a, None), set):\n"
                                     "            getattr(f, a).update({'json', 'string'})\n"
                                     "    if isinstance(getattr(f, 'engine_roots', None), tuple):\n"
                                     "        f.engine_roots += ('json', 'string')\n"
                                     "json.dumps = repr  # <-\n"},
    # ways that take an audited step (a frame, a gc walk): reported before the object is handed over
    "audited": {
        "reach_frame.py": "import sys\n" + _POISON + "f = sys._getframe()  # <-\nwhile f is not None:\n"
                          "    for v in list(f.f_locals.values()):\n        poison(v)\n    f = f.f_back\n",
        "reach_tb.py": "import os\n" + _POISON + "try:\n    os.system('true')  # <-\n"
                       "except PermissionError as e:\n    tb = e.__traceback__\n    while tb is not None:\n"
                       "        for v in list(tb.tb_frame.f_locals.values()):  # <-\n            poison(v)\n"
                       "        tb = tb.tb_next\n",
        "reach_gc.py": "import sys, gc\n" + _POISON + "for f in list(sys.meta_path):\n"
                       "    for r in gc.get_referrers(f):  # <-\n"
                       "        poison(r)\n",
    },
    # the tracer describes a changed value while it is busy (its last snapshot's events): that value's
    # __repr__ runs then and walks the frames of the tracer's own code (refused while the tracer is busy);
    # had it got them, it would drop what the tracer has yet to report (html.escape, sorted after base64)
    "busy": {
        "reach_busy.py": "import sys, html, base64\n" + _POISON + "class E:\n"
                         "    def __call__(self, *a, **k):\n        return b''\n"
                         "    def __repr__(self):\n"
                         "        f = sys._getframe()  # <-\n"
                         "        while f is not None:\n"
                         "            for k, v in list(f.f_locals.items()):\n"
                         "                poison(v)\n"
                         "                if k in ('after', 'base') and isinstance(v, dict):\n"
                         "                    v.pop('mod:html:escape', None)\n"
                         "            f = f.f_back\n"
                         "        return 'E'\n"
                         "base64.b64encode = E()  # <-\n"
                         "html.escape = str  # <-\n",
    },
}
# the tool's own module globals, reached through a gate's `__globals__` (no audit event), changed for a
# moment and put back before the end-of-trace integrity check
REACH_ALONE["globals"] = {
    "recorders_swap.py": "import sys, vllm\n"
                         "g = type(sys.modules['vllm']).__setattr__.__globals__\n"
                         "saved = list(g['_RECORDERS'])\ng['_RECORDERS'].clear()\n"
                         "vllm.evil_switch = True  # <-\n"
                         "g['_RECORDERS'].extend(saved)\n",
    # the same through the stand-ins' recording function itself
    "record_fn_swap.py": "import sys, vllm\n"
                         "g = type(sys.modules['vllm']).__setattr__.__globals__\n"
                         "real = g.get('_record')\ng['_record'] = lambda *a, **k: None\n"
                         "vllm.evil_switch2 = True  # <-\n"
                         "g['_record'] = real\n",
    # the child's own globals through a wrapper it installed: the gates' event name, the hook's tables
    "gate_name_swap.py": "import threading, vllm\n"
                         "g = threading.Thread.start.__globals__\n"
                         "real = g.get('GATE')\ng['GATE'] = 'cpython.nothing'\n"
                         "vllm.evil_switch3 = True  # <-\n"
                         "g['GATE'] = real\n",
    "escapes_swap.py": "import os, threading\n"
                       "g = threading.Thread.start.__globals__\n"
                       "real = g.get('ESCAPES')\ng['ESCAPES'] = ()\n"
                       "try:\n    os.system('true')  # <-\nexcept PermissionError:\n    pass\n"
                       "g['ESCAPES'] = real\n",
    # a method of the tracer's class, replaced for a moment (a class's attribute write raises no audit event)
    "method_swap.py": "import threading, vllm\n"
                      "T = threading.Thread.start.__globals__.get('Tracer')\n"
                      "real = T.__dict__.get('record') if T is not None else None\n"
                      "if T is not None:\n    T.record = lambda *a, **k: None\n"
                      "vllm.evil_switch4 = True  # <-\n"
                      "if T is not None:\n    T.record = real\n",
    # the tracer's table of deferred work: a finalizer it would not run, registered while the entry is gone
    "deferred_swap.py": "import json, threading, weakref\n"
                        "d = threading.Thread.start.__globals__.get('_DEFERRED', {})\n"
                        "real = d.get('exit')\nd['exit'] = lambda *a, **k: None\n"
                        "class Keep:\n    pass\nKEEP = Keep()\n"
                        "def later():\n    json.dumps = repr  # <-\n"
                        "weakref.finalize(KEEP, later)\n"
                        "if real is not None:\n    d['exit'] = real\n",
    # the tool's modules left sys.modules: a fresh import of one is a copy, not the live one
    "sysmodules_swap.py": "import sys, importlib, vllm\n"
                          "name = type(sys.modules['vllm']).__module__\n"
                          "m = sys.modules.get(name)\n"
                          "if m is None:\n    try:\n        m = importlib.import_module(name)\n"
                          "    except ImportError:\n        m = None\n"
                          "saved = list(getattr(m, '_RECORDERS', []))\n"
                          "getattr(m, '_RECORDERS', []).clear()\n"
                          "vllm.evil_switch5 = True  # <-\n"
                          "getattr(m, '_RECORDERS', []).extend(saved)\n",
    # a builtin the recording path would call (whether a stand-in's name registers), swapped for a moment
    "builtin_swap.py": "import builtins, vllm\n"
                       "real = builtins.any\nbuiltins.any = lambda *a, **k: False\n"
                       "vllm.register_evil('x')  # <-\n"
                       "builtins.any = real\n",
    # a stand-in class's own method swapped for a moment (no audit event at all: in-process tracing cannot see
    # it; the static scan reports both writes, `test_class_swap_is_a_static_error`)
    "class_swap.py": "import sys, vllm\n"
                     "T = type(sys.modules['vllm'])\n"
                     "real = T.__dict__['__setattr__']\n"
                     "type.__setattr__(T, '__setattr__', type(sys).__setattr__)  # <-\n"
                     "vllm.evil_switch7 = True  # <-\n"
                     "type.__setattr__(T, '__setattr__', real)  # <-\n",
    # gc: the globals of a gate through its referents (an audited walk: reported before it is handed over)
    "gc_swap.py": "import gc, sys, vllm\n"
                  "f = type(sys.modules['vllm']).__setattr__\n"
                  "gs = [r for r in gc.get_referents(f) if isinstance(r, dict)]  # <-\n"
                  "for g in gs:\n    g.get('_RECORDERS', []).clear()\n"
                  "vllm.evil_switch6 = True  # <-\n",
}
# code of the contribution the tracer itself calls while it takes its last snapshot (the names of loggers it
# sorts and compares: a new logger is no effect) puts a liar into the snapshot's table of getters after the
# first tamper check and takes it out again before the second
REACH_ALONE["liar"] = {
    "getter_liar.py": "import logging, threading, warnings\n"
                      "snap = threading.Thread.start.__globals__.get('snapshot')\n"
                      "real = dict(snap.STATE) if snap is not None else {}\n"
                      "FROZEN = real['warnings.filters']() if real else None\n"
                      "class P(str):\n"
                      "    def __lt__(self, other):\n"
                      "        if snap is not None:\n"
                      "            snap.STATE['warnings.filters'] = lambda: FROZEN\n"
                      "        return str.__lt__(self, other)\n"
                      "    def __eq__(self, other):\n"
                      "        if snap is not None:\n"
                      "            snap.STATE.update(real)\n"
                      "        return str.__eq__(self, other)\n"
                      "    __gt__ = __lt__\n"
                      "    __hash__ = str.__hash__\n"
                      "logging.getLogger(P('zz.liar'))\nlogging.getLogger(P('aa.liar'))\n"
                      "warnings.simplefilter('ignore', UserWarning)  # <-\n",
}
REACH_OPEN: dict[str, str] = {
    "class_swap.py": "a method of the tracer's own class (a stand-in's __setattr__) swapped with"
                     " type.__setattr__ and put back raises no audit event: in-process, nothing runs to see"
                     " it (the static scan reports the writes)",
}


def _errors_at(findings: list[Finding], package: str, module: str) -> set[int]:
    return {f.line or 0 for f in findings if f.path == f"{package}/{module}" and f.severity.value == "error"}


@pytest.fixture(scope="module")
def reach_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[TraceFacts, list[Finding]]]:
    """One trace per family, run when a test of that family first asks for it."""
    return {}


def _traced(cache: dict[str, tuple[TraceFacts, list[Finding]]], family: str,
            factory: pytest.TempPathFactory) -> tuple[TraceFacts, list[Finding]]:
    if family not in cache:
        ctx = _context(factory.mktemp(f"reach-{family}"), "evil", REACH_ALONE[family])
        facts = gather_trace(ctx)
        cache[family] = (facts, _findings(ctx, facts))
    return cache[family]


@pytest.mark.slow
@pytest.mark.parametrize(("family", "module"), [
    pytest.param(f, m, id=m, marks=[pytest.mark.xfail(strict=True, reason=REACH_OPEN[m])]
                 if m in REACH_OPEN else []) for f in REACH_ALONE for m in REACH_ALONE[f]])
def test_reach_attack_is_an_error_at_its_lines(reach_traces: dict[str, tuple[TraceFacts, list[Finding]]],
                                               tmp_path_factory: pytest.TempPathFactory, family: str,
                                               module: str) -> None:
    facts, findings = _traced(reach_traces, family, tmp_path_factory)
    want = set(marked_lines(REACH_ALONE[family][module]))
    assert want and want <= _errors_at(findings, "evil", module), (
        facts.status, facts.reason, sorted((f.code, f.path, f.line, f.message[:90]) for f in findings))


def test_open_ids_are_attacks() -> None:
    assert set(REACH_OPEN) <= {m for f in REACH_ALONE.values() for m in f}


def test_sandbox_paths_do_not_name_the_trace() -> None:
    """The cheapest "am I traced?" test (the cwd, HOME or TMPDIR naming fasttrack or its trace) says no."""
    from fasttrack.confinement.trace.sandbox import _cleanup, _env, _new_box

    box = _new_box()
    try:
        seen = [str(box), *_env(box).values()]
        assert not [p for p in seen if "fasttrack" in p.lower() or "trace" in p.lower()], seen
    finally:
        _cleanup(box)


def test_class_swap_is_a_static_error() -> None:
    """`class_swap.py` is inherent to tracing in-process (a class's attribute write raises no audit event, and
    nothing of the tracer runs between the swap and its undoing): the static scan is the barrier, and reports
    each of its writes as an error in shipping code."""
    import textwrap

    from fasttrack.confinement.escapes import find_escapes
    from tests.escape_marks import error_lines

    src = REACH_ALONE["globals"]["class_swap.py"]
    found = find_escapes(textwrap.dedent(src), "vllm/models/kimi_k3/evil.py", {"vllm.models.kimi_k3"},
                         own_op_namespaces={"kimi_k3"})
    assert set(marked_lines(src)) <= set(error_lines(found)), [(e.line, e.severity, e.code) for e in found]
