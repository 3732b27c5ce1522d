"""Hostile review 24 (issue 15): attacks on the static escape scan in families rounds 20-23 did not write:
stdlib decorators and class transformers applied to engine (or stdlib) classes, which rewrite them in place
(`dataclasses.dataclass(L)`, `functools.total_ordering`, `typing.final`, `typing.no_type_check`,
`abc.update_abstractmethods`, `typing.overload`'s registry); engine objects and code reached by a dotted
name or a code string handed to a stdlib helper (string annotations, `ForwardRef`, entry points,
`logging.config` factories, `timeit` / `trace` / `doctest` / profilers, `mock`'s target resolver); the
file descriptors, terminal and stdin the engine shares; other processes and the scheduler; interpreter and
library knobs set through their own setters; stdlib module tables written item by item.

Each attack must be an ERROR at the lines marked `# <-` (a warning does not stop a PR). Attacks that get
through are strict xfails keyed in OPEN with the one-line reason. The honest twins are model-local code
that must stay clean; a finding on one is a strict xfail in OPEN_FALSE_POSITIVES. The harness (HEAD binds
contextlib, copy, functools, L = RowParallelLinear and AttentionImpl) is
tests/test_escapes_hostile_flow.py's."""

from __future__ import annotations

import pytest

from fasttrack.confinement.engine_signatures import EngineSignatures
from tests.test_escapes_hostile22 import shipped_error_lines
from tests.test_escapes_hostile23 import engine  # noqa: F401  (the module-scoped fake engine tree)
from tests.test_escapes_hostile_flow import marked, scan

ATTACKS: dict[str, str] = {
# -- stdlib decorators / class transformers applied to engine classes: they rewrite the class in place ----
"xform-dataclass-engine-class": "import dataclasses\ndataclasses.dataclass(L)  # <-\n",
"xform-dataclass-frozen-partial": "import dataclasses\ndataclasses.dataclass(frozen=True)(L)  # <-\n",
"xform-dataclass-alias": "import dataclasses\ndc = dataclasses.dataclass\ndc(eq=False)(L)  # <-\n",
"xform-dataclass-type-of-param": "import dataclasses\ndef f(layer: L):\n"
                                 "    dataclasses.dataclass(type(layer))  # <-\n",
"xform-dataclass-process-class": "import dataclasses\ndataclasses._process_class(L, True, False, True, "
                                 "False, False, False, False, False, False, False, False)  # <-\n",
"xform-update-abstractmethods": "import abc\nabc.abstractmethod(AttentionImpl.forward)  # <-\n"
                                "abc.update_abstractmethods(AttentionImpl)  # <-\n",
"xform-abstractmethod-on-engine-func": "import abc\nabc.abstractmethod(AttentionImpl.forward)  # <-\n",
"xform-typing-final-class": "import typing\ntyping.final(AttentionImpl)  # <-\n",
"xform-typing-final-method": "import typing\ntyping.final(AttentionImpl.forward)  # <-\n",
"xform-no-type-check": "import typing\ntyping.no_type_check(AttentionImpl)  # <-\n",
"xform-dataclass-transform": "import typing\ntyping.dataclass_transform()(L)  # <-\n",
"xform-overload-registry": "import typing\ntyping.overload(AttentionImpl.forward)  # <-\n",
# the same transformers on stdlib classes (json.JSONDecoder's methods get __no_type_check__, textwrap's
# TextWrapper an __eq__ and __hash__ = None, EntryPoint three new ordering methods)
"xform-dataclass-stdlib-class": "import dataclasses, textwrap\n"
                                "dataclasses.dataclass(textwrap.TextWrapper)  # <-\n",
"xform-total-ordering-stdlib": "import importlib.metadata as md\n"
                               "functools.total_ordering(md.EntryPoint)  # <-\n",
"xform-no-type-check-stdlib": "import typing, json\ntyping.no_type_check(json.JSONDecoder)  # <-\n",
"xform-global-enum-stdlib": "import enum, http\nenum.global_enum(http.HTTPStatus)  # <-\n",
"xform-abstractmethod-stdlib": "import abc, json\njson.JSONEncoder.default = abc.abstractmethod(json."
                               "JSONEncoder.default)  # <-\n",
"xform-typing-final-stdlib": "import typing, shlex\ntyping.final(shlex.shlex)  # <-\n",
"xform-update-abstractmethods-stdlib": "import abc, fractions\n"
                                       "abc.abstractmethod(fractions.Fraction.limit_denominator)  # <-\n"
                                       "abc.update_abstractmethods(fractions.Fraction)  # <-\n",
"xform-overload-stdlib": "import typing, json\ntyping.overload(json.dumps)  # <-\n",
"xform-abcmeta-register-unbound": "import abc, collections.abc\n"
                                  "abc.ABCMeta.register(collections.abc.Sequence, dict)  # <-\n",
# -- engine objects by a dotted name or a string annotation handed to a stdlib resolver ------------------
"named-string-annotation-hints": "import typing\nclass K:\n    x: 'AttentionImpl'\n"
                                 "typing.get_type_hints(K)['x'].forward = None  # <-\n",
"named-get-annotations-eval": "import inspect\nclass K:\n    x: 'AttentionImpl'\n"
                              "inspect.get_annotations(K, eval_str=True)['x'].forward = None  # <-\n",
"named-forwardref-evaluate": "import typing\ntyping.ForwardRef('AttentionImpl')._evaluate(globals(), None, "
                             "frozenset()).forward = None  # <-\n",
"named-eval-type": "import typing\ntyping._eval_type(typing.ForwardRef('AttentionImpl'), globals(), None)."
                   "forward = None  # <-\n",
"named-namedtuple-hints": "import typing\ntyping.get_type_hints(typing.NamedTuple('T', [('x', "
                          "'AttentionImpl')]), globals())['x'].forward = None  # <-\n",
"named-entrypoint-engine": "import importlib.metadata as md\n"
                           "md.EntryPoint('x', 'vllm.v1.attention.backend:AttentionImpl', 'g').load()."
                           "forward = None  # <-\n",
"named-entrypoint-call": "import importlib.metadata as md\n"
                         "md.EntryPoint('x', 'os:system', 'g').load()('true')  # <-\n",
"named-mock-get-target": "from unittest import mock\n"
                         "mock._get_target('vllm.v1.attention.backend.AttentionImpl')[0]().AttentionImpl."
                         "forward = None  # <-\n",
"named-logging-config-resolve": "import logging.config\nlogging.config._resolve('vllm.v1.attention.backend."
                                "AttentionImpl').forward = None  # <-\n",
"named-configurator-resolve": "import logging.config\nlogging.config.BaseConfigurator({}).resolve('vllm.v1."
                              "attention.backend.AttentionImpl').forward = None  # <-\n",
"named-unpickler-find-class": "import pickle, io\npickle.Unpickler(io.BytesIO()).find_class('vllm.v1."
                              "attention.backend', 'AttentionImpl').forward = None  # <-\n",
"named-formatter-get-field": "import string\nstring.Formatter().get_field('0.forward', [AttentionImpl], "
                             "{})[0].__defaults__ = ()  # <-\n",
"named-reduce-getattr": "import vllm\nfunctools.reduce(getattr, ['v1', 'attention', 'backend', "
                        "'AttentionImpl'], vllm).forward = None  # <-\n",
"named-dir-getattr-loop": "import vllm.v1.attention.backend as bm\nfor n in dir(bm):\n"
                          "    if n == 'AttentionImpl':\n        getattr(bm, n).forward = None  # <-\n",
"named-find-spec-load-module": "import importlib.util\nimportlib.util.find_spec('vllm.v1.attention."
                               "backend').loader.load_module().AttentionImpl.forward = None  # <-\n",
"named-entrypoint-putenv": "import importlib.metadata as md\n"
                           "md.EntryPoint('x', 'os:putenv', 'g').load()('X', '1')  # <-\n",
"named-pkgutil-call": "import pkgutil\npkgutil.resolve_name('os:system')('true')  # <-\n",
"named-pydoc-call": "import pydoc\npydoc.locate('os.system')('true')  # <-\n",
# -- callables and code named by strings in a stdlib helper's data ------------------------------------------
"named-dictconfig-factory": "import logging.config\nlogging.config.dictConfig({'version': 1, 'handlers': "
                            "{'h': {  # <-\n    '()': 'subprocess.Popen', 'args': 'true', 'shell': "
                            "True}}})\n",
"named-dictconfig-factory-split": "import logging.config\ncfg = {'version': 1, 'handlers': {'h': {'()': 'os."
                                  "sys' + 'tem', 'command': 'true'}}}\n"
                                  "logging.config.dictConfig(cfg)  # <-\n",
"named-dictconfig-reset": "import logging.config\nlogging.config.dictConfig({'version': 1, "
                          "'disable_existing_loggers': True})  # <-\n",
"named-timeit-stmt": "import timeit\ntimeit.timeit('import os; os.environ.clear()', number=1)  # <-\n",
"named-timeit-setup": "import timeit\ntimeit.Timer(setup='import sys; sys.path.clear()').timeit(1)  # <-\n",
"named-cprofile-run": "import cProfile\ncProfile.run('import sys; sys.path.clear()')  # <-\n",
"named-profile-runctx": "import profile\nprofile.runctx('p.clear()', {'p': __import__('sys').path}, "
                        "{})  # <-\n",
"named-pdb-run": "import pdb\npdb.run('import sys; sys.path.clear()')  # <-\n",
"named-trace-run": "import trace\ntrace.Trace(count=False, trace=False).run('import sys; sys.path."
                   "clear()')  # <-\n",
"named-doctest-examples": "import doctest\ndef f():\n    '''\n    >>> import sys; sys.path.clear()\n"
                          "    '''\ndoctest.run_docstring_examples(f, {})  # <-\n",
"named-codeop-compile": "import codeop\nexec(codeop.compile_command('import sys; sys.path.clear()'))  # <-\n",
"named-mock-patch-string-target": "from unittest import mock\np = mock.patch('os.environ', {})  # <-\n"
                                  "p.start()\n",
# -- files written by archivers and registries of stdlib helpers ---------------------------------------------
"file-zipapp-outside": "import os, zipapp\nzipapp.create_archive(os.path.dirname(__file__), "
                       "'/usr/local/bin/evil', main='json.tool:main')  # <-\n",
"registry-shutil-unpack-format": "import shutil\nshutil.register_unpack_format('evil', ['.tar'], "
                                 "print)  # <-\n",
"registry-shutil-archive-format": "import shutil\nshutil.register_archive_format('zip', print)  # <-\n",
"registry-logging-level-name": "import logging\nlogging.addLevelName(logging.WARNING, 'INFO')  # <-\n",
# -- the file descriptors, terminal and stdin the engine shares ---------------------------------------------
"fd-close-stdout": "import os\nos.close(1)  # <-\n",
"fd-fcntl-nonblock": "import fcntl, os\nfcntl.fcntl(2, fcntl.F_SETFL, os.O_NONBLOCK)  # <-\n",
"fd-lseek-stdin": "import os\nos.lseek(0, 0, os.SEEK_END)  # <-\n",
"fd-set-inheritable": "import os\nos.set_inheritable(2, False)  # <-\n",
"fd-ioctl-tiocsti": "import fcntl, termios\nfcntl.ioctl(0, termios.TIOCSTI, b'x')  # <-\n",
"fd-tcsetattr": "import termios\ntermios.tcsetattr(0, termios.TCSANOW, termios.tcgetattr(0))  # <-\n",
"fd-tty-setraw": "import tty\ntty.setraw(0)  # <-\n",
"fd-write-stdout-fileno": "import os, sys\nos.write(sys.stdout.fileno(), b'x')  # <-\n",
"stream-stdout-close": "import sys\nsys.stdout.close()  # <-\n",
"stream-stderr-detach": "import sys\nsys.stderr.detach()  # <-\n",
"stdin-read": "import sys\nsys.stdin.read()  # <-\n",
"stdin-input": "input()  # <-\n",
"stdin-os-read": "import os\nos.read(0, 1024)  # <-\n",
# -- other processes and the scheduler -------------------------------------------------------------------
"proc-pthread-kill-main": "import signal, threading\nsignal.pthread_kill(threading.main_thread().ident, "
                          "signal.SIGTERM)  # <-\n",
"proc-raise-signal": "import signal\nsignal.raise_signal(signal.SIGINT)  # <-\n",
"proc-pidfd-send": "import os, signal\nsignal.pidfd_send_signal(os.pidfd_open(os.getppid()), signal."
                   "SIGTERM)  # <-\n",
"proc-waitpid-any": "import os\nos.waitpid(-1, os.WNOHANG)  # <-\n",
"proc-wait3": "import os\nos.wait3(os.WNOHANG)  # <-\n",
"proc-setpriority": "import os\nos.setpriority(os.PRIO_PROCESS, 0, 19)  # <-\n",
"proc-sched-setscheduler": "import os\nos.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # <-\n",
"proc-setpgid": "import os\nos.setpgid(0, 0)  # <-\n",
"proc-setuid": "import os\nos.setuid(65534)  # <-\n",
"proc-sethostname": "import socket\nsocket.sethostname('x')  # <-\n",
# -- interpreter and library knobs set through their own setters ----------------------------------------
"knob-coroutine-origin": "import sys\nsys.set_coroutine_origin_tracking_depth(50)  # <-\n",
"knob-mp-set-executable": "import multiprocessing\nmultiprocessing.set_executable('/bin/true')  # <-\n",
"knob-mp-forkserver-preload": "import multiprocessing\n"
                              "multiprocessing.set_forkserver_preload(['evil'])  # <-\n",
"knob-calendar-firstweekday": "import calendar\ncalendar.setfirstweekday(6)  # <-\n",
"knob-logger-add-filter": "import logging\nlogging.getLogger('vllm').addFilter(lambda r: False)  # <-\n",
"knob-json-default-encoder": "import json\njson._default_encoder.sort_keys = True  # <-\n",
"knob-abc-register-builtin": "import collections.abc\ncollections.abc.Sequence.register(dict)  # <-\n",
"knob-numbers-register": "import numbers\nnumbers.Integral.register(float)  # <-\n",
# -- stdlib module tables written item by item --------------------------------------------------------------
"table-html5-entities": "import html.entities\nhtml.entities.html5['lt;'] = '>'  # <-\n",
"table-http-responses": "import http.client\nhttp.client.responses[200] = 'Nope'  # <-\n",
"table-locale-alias": "import locale\nlocale.locale_alias['c'] = 'tr_TR.ISO8859-9'  # <-\n",
"table-sysconfig-vars": "import sysconfig\nsysconfig.get_config_vars()['EXT_SUFFIX'] = '.evil.so'  # <-\n",
"table-sysconfig-schemes": "import sysconfig\nsysconfig._INSTALL_SCHEMES['posix_prefix']['purelib'] = "
                           "'/tmp/evil'  # <-\n",
"table-source-suffixes": "import importlib.machinery\n"
                         "importlib.machinery.SOURCE_SUFFIXES.append('.txt')  # <-\n",
"table-mimetypes-types-map": "import mimetypes\nmimetypes.types_map['.json'] = 'text/html'  # <-\n",
"table-errno-errorcode": "import errno\nerrno.errorcode[2] = 'EOK'  # <-\n",
"table-keyword-kwlist": "import keyword\nkeyword.kwlist.append('kimi')  # <-\n",
"table-email-charsets": "import email.charset\nemail.charset.CHARSETS['utf-8'] = (None, None, None)  # <-\n",
}

# every attack of this review is closed (hostile review 24 fix: transformers.py, named.py, fds.py)
OPEN: dict[str, str] = {}


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


# -- honest twins: the same helpers on the contribution's own classes, scoped settings, reads and copies ---
HONEST: dict[str, str] = {
"own-transformers": "import dataclasses, typing, abc\n@functools.total_ordering\n"
                    "@dataclasses.dataclass(frozen=True)\nclass Own:\n    x: int = 0\n"
                    "    def __lt__(self, o):\n        return self.x < o.x\n@typing.final\nclass F:\n"
                    "    @typing.final\n    def m(self):\n        pass\nclass A(abc.ABC):\n"
                    "    @abc.abstractmethod\n    def m(self): ...\nabc.update_abstractmethods(A)\n"
                    "Own2 = dataclasses.dataclass(type('Own2', (), {'__annotations__': {'y': int}}))\n"
                    "@typing.overload\ndef h(x: int) -> int: ...\n@typing.overload\n"
                    "def h(x: str) -> str: ...\ndef h(x):\n    return x\n",
"own-engine-subclass-transformed": "import dataclasses\n@dataclasses.dataclass\n"
                                   "class MyImpl(AttentionImpl):\n    scale: float = 1.0\n"
                                   "@functools.total_ordering\nclass Cmp(L):\n    def __lt__(self, o):\n"
                                   "        return False\n    def __eq__(self, o):\n        return True\n",
"own-forward-refs": "import typing, inspect\nclass Own:\n    pass\nclass K:\n    x: 'Own'\n"
                    "    y: 'AttentionImpl'\ntyping.get_type_hints(K)['x'].y = 1\n"
                    "inspect.get_annotations(K, eval_str=True)['x'].z = 2\n"
                    "typing.ForwardRef('Own')._evaluate(globals(), None, frozenset()).w = 3\n"
                    "T = typing.get_type_hints(K)['y'].__name__\n",
"own-generic-args": "import typing\nclass Own:\n    pass\nN = typing.get_args(list[Own])[0]\nN.v = 4\n",
"own-reduce-getattr": "class Own:\n    class Inner:\n        pass\n"
                      "functools.reduce(getattr, ['Inner'], Own).y = 1\n",
"own-timeit-callable": "import timeit\nclass Own:\n    n = 0\ndef step():\n    Own.n += 1\n"
                       "T = timeit.timeit(step, number=3)\nT2 = timeit.Timer(lambda: 1 + 1).timeit(2)\n",
"own-pipe-fds": "import os\nr, w = os.pipe()\nos.set_blocking(w, False)\nos.write(w, b'x')\n"
                "B = os.read(r, 1)\nos.close(r)\nos.close(w)\n",
"own-streams-and-reads": "import io, os, sys\nbuf = io.StringIO()\nbuf.write('x')\nbuf.close()\n"
                         "I = os.isatty(0)\nE = sys.stdout.encoding\n"
                         "P = os.getpriority(os.PRIO_PROCESS, 0)\n",
"own-scoped-settings": "import warnings, numpy, logging, reprlib, json, calendar, multiprocessing\n"
                       "with warnings.catch_warnings():\n    warnings.simplefilter('ignore')\n"
                       "with numpy.errstate(all='ignore'):\n    Z = numpy.ones(1) / 0\n"
                       "log = logging.getLogger(__name__)\nlog.setLevel(logging.DEBUG)\n"
                       "log.addFilter(lambda r: True)\nr = reprlib.Repr()\nr.maxstring = 3\n"
                       "E = json.JSONEncoder(sort_keys=True)\n"
                       "C = calendar.TextCalendar(firstweekday=6)\n"
                       "CTX = multiprocessing.get_context('spawn')\n",
"own-table-copies": "import encodings.aliases, sysconfig, html.entities, http.client\n"
                    "A = dict(encodings.aliases.aliases)\nA['utf8'] = 'cp037'\n"
                    "V = dict(sysconfig.get_config_vars())\nV['EXT_SUFFIX'] = '.so'\n"
                    "S = sysconfig.get_config_var('EXT_SUFFIX')\nH = html.entities.html5['lt;']\n"
                    "R = {**http.client.responses, 200: 'x'}\n",
"own-entry-points-read": "import importlib.metadata as md\n"
                         "EPS = md.entry_points(group='vllm.general_plugins')\nN = [e.name for e in EPS]\n",
}

OPEN_FALSE_POSITIVES: dict[str, str] = {}


@pytest.mark.parametrize("key", [
    pytest.param(k, id=k, marks=[pytest.mark.xfail(strict=True, reason=OPEN_FALSE_POSITIVES[k])]
                 if k in OPEN_FALSE_POSITIVES else []) for k in HONEST])
def test_honest_twin_is_clean(key: str, engine: EngineSignatures) -> None:  # noqa: F811
    assert shipped_error_lines(scan(HONEST[key], engine)) == []
