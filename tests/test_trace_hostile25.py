"""Hostile review 25 (issue 15): attacks on round 24's effect-trace fixes, written as rewrites of the effects
they key: raw memory reached without the names the sandbox fails closed on (a `py_object` Union field), an
ABC's registry cleared or filled through `_abc` rather than `register`, instances a stdlib module holds
(email's default policy's header registry, multiprocessing's spawn context and current process), the
at-fork hooks, attributes of stdlib functions (`__qualname__`, `__doc__`, their `__dict__`, all written by
`functools.update_wrapper`), a stdlib class attribute's dict edited item by item, gettext's domain table,
a module's `__all__` and a package's `__path__`, and code or callables named by strings in stdlib helpers
(`timeit.main`, `dataclasses._create_fn`, unittest's loader, `pickle._loads`).

All the attacks are modules of one traced contribution (ATTACKS25, no torch): each must be an ERROR at its
lines marked `# <-` (a failed import at that line counts: it stops the PR). Attacks that get through are
strict xfails keyed in ATTACKS25_OPEN with a one-line reason. The honest twins (HONEST25, one trace) must
trace clean; one that is flagged is a strict xfail in OPEN_FALSE_POSITIVES. Harness: tests/test_trace.py's
`_context` / `_findings` and the round-22/23 helpers."""

from __future__ import annotations

import pytest

from fasttrack.confinement.trace.facts import TraceFacts
from fasttrack.confinement.trace.gather import gather_trace
from fasttrack.findings import Finding
from tests.escape_marks import marked_lines
from tests.test_trace import _context, _findings
from tests.test_trace_hostile22 import _errors_at
from tests.test_trace_hostile23 import _finished, _lines, _params

ATTACKS25: dict[str, str] = {
    "float_const_ctypes.py": "import ctypes, math\n"
                             "ctypes.c_double.from_address(id(math.pi) + 16).value = 3.0  # <-\n",
    "str_const_ctypes.py": "import ctypes, string, sys\n"
                           "b = (ctypes.c_char * 26).from_address(id(string.ascii_uppercase) +"
                           " sys.getsizeof('') - 1)  # <-\n""b[25] = b'z'\n",
    "py_object_union.py": "import ctypes, shlex\n""class U(ctypes.Union):\n"
                          "    _fields_ = [('a', ctypes.c_ssize_t), ('o', ctypes.py_object)]\n""u = U()\n"
                          "u.a = id(shlex)\n""u.o.quote = repr  # <-\n",
    "abc_registry_clear.py": "import collections.abc\n""S = collections.abc.Sequence\n"
                             "S._abc_registry_clear(); S._abc_caches_clear()  # <-\n",
    "c_abc_register.py": "import _abc, collections.abc\n"
                         "_abc._abc_register(collections.abc.MutableSequence, dict)  # <-\n",
    "inspect_modulesbyfile.py": "import inspect\n""inspect.modulesbyfile['/h25/evil.py'] = 'json'  # <-\n",
    "domreg_registered.py": "import xml.dom.domreg\n""xml.dom.domreg.registered['h25'] = print  # <-\n",
    "calendar_mdays.py": "import calendar\n""calendar.mdays[2] = 30  # <-\n",
    "email_policy_registry.py": "import email.policy\n"
                                "email.policy.default.header_factory.map_to_type('subject',"
                                " object)  # <-\n",
    "mp_context_attr.py": "import multiprocessing\n"
                          "multiprocessing.get_context('spawn').Process = object  # <-\n",
    "mp_authkey.py": "import multiprocessing\n""multiprocessing.current_process().authkey = b'h25'  # <-\n",
    "dlopenflags.py": "import sys, os\n""sys.setdlopenflags(os.RTLD_NOW | os.RTLD_GLOBAL)  # <-\n",
    "recursionlimit.py": "import sys\n""sys.setrecursionlimit(sys.getrecursionlimit() + 7)  # <-\n",
    "register_at_fork.py": "import os, gc\n""os.register_at_fork(after_in_child=gc.disable)  # <-\n",
    "audit_hook.py": "import sys\n""sys.addaudithook(lambda e, a: None)  # <-\n",
    "gc_callback.py": "import gc\n""gc.callbacks.append(lambda p, i: None)  # <-\n",
    "environb_write.py": "import os\n""os.environb[b'H25_B'] = b'1'  # <-\n",
    "dont_write_bytecode.py": "import sys\n""sys.dont_write_bytecode = not sys.dont_write_bytecode  # <-\n",
    "pycache_prefix.py": "import sys\n""sys.pycache_prefix = '/tmp/h25_pyc'  # <-\n",
    "prctl_name.py": "import ctypes\n""ctypes.CDLL(None).prctl(15, b'h25evil', 0, 0, 0)  # <-\n",
    "prctl_dumpable.py": "import ctypes\n""ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # <-\n",
    "setpgid.py": "import os\n""try:\n""    os.setpgid(0, 0)  # <-\n""except OSError:\n""    pass\n",
    "update_wrapper_stdlib.py": "import functools, textwrap\n""def own():\n""    pass\n"
                                "functools.update_wrapper(textwrap.indent, own)  # <-\n",
    "set_new_attribute.py": "import dataclasses, textwrap\n"
                            "dataclasses._set_new_attribute(textwrap.TextWrapper, 'h25', 1)  # <-\n",
    "timeit_main.py": "import timeit\n""timeit.main(['-n', '1', '-r', '1', '-s', 'import colorsys',"
                      " 'colorsys.rgb_to_hsv = max'])  # <-\n",
    "create_fn.py": "import dataclasses\n"
                    "dataclasses._create_fn('f', [], ['import colorsys', 'colorsys.hls_to_rgb ="
                    " max'])()  # <-\n",
    "unittest_loader.py": "import unittest\n""try:\n"
                          "    unittest.TestLoader().loadTestsFromName('gc.disable')  # <-\n"
                          "except TypeError:\n""    pass\n",
    "pickle_private_loads.py": "import pickle\n"
                               "pickle._loads(b\"cos\\nputenv\\n(S'H25P'\\nS'1'\\ntR.\")  # <-\n",
    "http_server_ext_map.py": "import http.server\n"
                              "http.server.SimpleHTTPRequestHandler.extensions_map['.py'] ="
                              " 'text/html'  # <-\n",
    "gettext_localedirs.py": "import gettext\n""gettext.bindtextdomain('messages', '/tmp/h25')  # <-\n",
    "posix_shm.py": "import _posixshmem, os\n"
                    "os.close(_posixshmem.shm_open('/h25evil', os.O_CREAT | os.O_RDWR, 0o600))  # <-\n",
    "tokenize_endpats.py": "import tokenize\n""tokenize.endpats['h25'] = None  # <-\n",
    "json_default_decoder.py": "import json\n""json._default_decoder.object_hook = dict.fromkeys  # <-\n",
    "func_qualname.py": "import textwrap\n""textwrap.dedent.__qualname__ = 'h25'  # <-\n",
    "func_doc.py": "import textwrap\n""textwrap.wrap.__doc__ = 'h25'  # <-\n",
    "func_dict.py": "import textwrap\n""textwrap.fill.h25 = 1  # <-\n",
    "module_all.py": "import colorsys\n""colorsys.__all__.append('h25')  # <-\n",
    "module_loader.py": "import colorsys\n""colorsys.__loader__ = None  # <-\n",
    "package_path.py": "import json\n""json.__path__.append('/tmp/h25')  # <-\n",
    "map_setattr.py": "import shlex\n""list(map(setattr, [shlex], ['split'], [repr]))  # <-\n",
    "warnoptions.py": "import sys\n""sys.warnoptions.append('error')  # <-\n",
    "xoptions.py": "import sys\n""sys._xoptions['dev'] = True  # <-\n",
    "argv_append.py": "import sys\n""sys.argv.append('--h25')  # <-\n",
    "rlimit_nofile.py": "import resource\n""s, h = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
                        "resource.setrlimit(resource.RLIMIT_NOFILE, (s - 1, h))  # <-\n",
    "stderr_nonblock.py": "import os\n""os.set_blocking(2, not os.get_blocking(2))  # <-\n",
    "stdout_chunk.py": "import sys\n""sys.stdout._CHUNK_SIZE = 1  # <-\n",
}
ATTACKS25_OPEN: dict[str, str] = {
}
HONEST25: dict[str, str] = {
    "own_ctypes.py": "import ctypes\n""class S(ctypes.Structure):\n"
                     "    _fields_ = [('a', ctypes.c_int)]\n""s = S()\n""s.a = 2\n"
                     "B = (ctypes.c_char * 4)()\n""B[0] = b'x'\n""N = ctypes.sizeof(S)\n",
    "own_wrapper.py": "import functools, textwrap\n""def w(*a, **k):\n"
                      "    return textwrap.indent(*a, **k)\n"
                      "functools.update_wrapper(w, textwrap.indent)\n",
    "own_table_copies.py": "import inspect, calendar, http.server, xml.dom.domreg, tokenize\n"
                           "D = dict(inspect.modulesbyfile)\n""D['x'] = 'y'\n""M = list(calendar.mdays)\n"
                           "M[2] = 30\n""E = dict(http.server.SimpleHTTPRequestHandler.extensions_map)\n"
                           "E['.py'] = 'x'\n""R = dict(xml.dom.domreg.registered)\n"
                           "P = dict(tokenize.endpats)\n",
    "own_gettext.py": "import gettext\n""t = gettext.NullTranslations()\n""F = t.gettext('x')\n"
                      "G = gettext.gettext('y')\n",
    "own_mp_reads.py": "import multiprocessing\n""C = multiprocessing.get_context('spawn')\n"
                       "P = C.Process\n""N = multiprocessing.current_process().name\n"
                       "K = len(multiprocessing.current_process().authkey)\n",
    "own_code_runners.py": "import timeit, dataclasses\n""T = timeit.timeit(lambda: 1 + 1, number=2)\n"
                           "@dataclasses.dataclass\n""class Own:\n""    x: int = 0\n""O = Own(1)\n",
    "own_reads.py": "import os, sys, gc\n""V = os.environb.get(b'HOME')\n""R = sys.getrecursionlimit()\n"
                    "F = sys.getdlopenflags()\n""B = sys.dont_write_bytecode\n""C = len(gc.callbacks)\n",
}
HONEST25["own_stdlib_reads.py"] = (
    "import sys, os, fcntl, textwrap, colorsys, json, gettext, email.policy, multiprocessing, http.server\n"
    "from colorsys import *\n""A = list(colorsys.__all__) + ['own']\n""P = list(json.__path__)\n"
    "D = textwrap.dedent.__doc__\n""Q = textwrap.dedent.__qualname__\n""X = dict(sys._xoptions)\n"
    "X['dev'] = True\n""B = os.get_blocking(2)\n""F = fcntl.fcntl(2, fcntl.F_GETFL)\n"
    "C = getattr(sys.stdout, '_CHUNK_SIZE', 0)\n""H = email.policy.default.header_factory['subject']\n"
    "K = multiprocessing.get_context('spawn').get_start_method()\n""L = gettext.textdomain()\n"
    "T = multiprocessing.current_process().authkey\n"
    "E = http.server.SimpleHTTPRequestHandler.extensions_map.get('.py')\n"
    "def own_f():\n""    pass\n""own_f.__qualname__ = 'own'\n""own_f.x = 1\n")
OPEN_FALSE_POSITIVES: dict[str, str] = {
}


@pytest.fixture(scope="module")
def traced25(tmp_path_factory: pytest.TempPathFactory) -> tuple[TraceFacts, list[Finding]]:
    ctx = _context(tmp_path_factory.mktemp("rt25"), "evil", ATTACKS25)
    facts = gather_trace(ctx)
    return facts, _findings(ctx, facts)


@pytest.fixture(scope="module")
def honest25(tmp_path_factory: pytest.TempPathFactory) -> tuple[TraceFacts, list[Finding]]:
    ctx = _context(tmp_path_factory.mktemp("h25"), "honest25", HONEST25)
    facts = gather_trace(ctx)
    return facts, _findings(ctx, facts)


def test_open_ids_are_attacks() -> None:
    assert set(ATTACKS25_OPEN) <= set(ATTACKS25)
    assert set(OPEN_FALSE_POSITIVES) <= set(HONEST25)
    assert all(marked_lines(text) for text in ATTACKS25.values())


@pytest.mark.slow
def test_attack25_trace_reported(traced25: tuple[TraceFacts, list[Finding]]) -> None:
    # the trace ran to its report (an attack's failed import is a finding, not a lost trace)
    facts, findings = traced25
    assert facts.modules, (facts.status, facts.reason)
    lost = [f for f in findings if f.code == "FT132" and not (f.path or "").startswith("evil/")]
    assert not lost, (facts.reason, [(f.code, f.message[:90]) for f in lost])


@pytest.mark.slow
@pytest.mark.parametrize("module", _params(ATTACKS25, ATTACKS25_OPEN))
def test_attack25_is_an_error_at_its_line(traced25: tuple[TraceFacts, list[Finding]], module: str) -> None:
    _, findings = traced25
    want = marked_lines(ATTACKS25[module])
    assert set(want) <= _errors_at(findings, "evil", module), _lines(findings, "evil", module)


@pytest.mark.slow
def test_honest25_trace_finished(honest25: tuple[TraceFacts, list[Finding]]) -> None:
    _finished(honest25)


@pytest.mark.slow
@pytest.mark.parametrize("module", _params(HONEST25, OPEN_FALSE_POSITIVES))
def test_honest25_twin_traces_clean(honest25: tuple[TraceFacts, list[Finding]], module: str) -> None:
    _, findings = honest25
    assert _lines(findings, "honest25", module) == []
