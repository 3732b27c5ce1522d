"""The tables of stdlib_effects.py beyond hostile review 24's own attacks (issue 15): the other forms a
transformer is applied in (a bound factory, `functools.partial`, `map`, a helper handed the class), the
other entries of each table, and the fail-closed edges of the name resolvers (an entry point or a
ForwardRef made elsewhere, a foreign namespace, an engine base's inherited hints, a descriptor handed in).
Each attack must be an error at the lines marked `# <-`; each honest twin must stay clean. The harness is
tests/test_escapes_hostile_flow.py's (HEAD binds contextlib, copy, functools, L and AttentionImpl)."""

from __future__ import annotations

import pytest

from fasttrack.confinement.engine_signatures import EngineSignatures
from tests.test_escapes_hostile22 import shipped_error_lines
from tests.test_escapes_hostile23 import engine  # noqa: F401  (the module-scoped fake engine tree)
from tests.test_escapes_hostile_flow import marked, scan

ATTACKS: dict[str, str] = {
    "bound-factory": "import dataclasses\ndeco = dataclasses.dataclass(frozen=True)\ndeco(L)  # <-\n",
    "partial-factory": "import dataclasses\n"
                       "functools.partial(dataclasses.dataclass, frozen=True)(L)  # <-\n",
    "partial-bound-name": "import dataclasses\np = functools.partial(dataclasses.dataclass, frozen=True)\n"
                          "p(L)  # <-\n",
    "map-transformer": "import typing\nlist(map(typing.final, [L, AttentionImpl]))  # <-\n",
    "helper-handed-engine-class": "import dataclasses\ndef mk(c):\n"
                                  "    return dataclasses.dataclass(c)\nmk(L)  # <-\n",
    "runtime-checkable": "import typing\ntyping.runtime_checkable(AttentionImpl)  # <-\n",
    "deprecated-factory": "import typing_extensions\ntyping_extensions.deprecated('x')(L)  # <-\n",
    "attrs-define": "import attrs\nattrs.define(L)  # <-\n",
    "abstractclassmethod": "import abc\nabc.abstractclassmethod(AttentionImpl.forward)  # <-\n",
    "types-coroutine": "import types\ntypes.coroutine(AttentionImpl.forward)  # <-\n",
    "final-on-param-method": "import typing\ndef f(layer: L):\n    typing.final(layer.forward)  # <-\n",
    "timeit-computed-stmt": "import timeit, os\ntimeit.timeit(os.environ.get('S', ''), number=1)  # <-\n",
    "timeit-repeat-literal": "import timeit\ntimeit.repeat('import sys; sys.path.clear()', number=1)  # <-\n",
    "doctest-testmod": "import doctest\ndoctest.testmod()  # <-\n",
    "doctest-foreign-object": "import doctest, json\ndoctest.run_docstring_examples(json.dumps, {})  # <-\n",
    "timeit-param-stmt": "import timeit\ndef bench(stmt):\n    return timeit.timeit(stmt, number=1)  # <-\n",
    "shared-codec-info": "import codecs\ncodecs.lookup('utf-8').encode = print  # <-\n",
    "table-softkwlist": "import keyword\nkeyword.softkwlist.extend(['x'])  # <-\n",
    "table-uses-netloc": "import urllib.parse\nurllib.parse.uses_netloc.append('evil')  # <-\n",
    "setter-gettext-install": "import gettext\ngettext.install('x')  # <-\n",
    "setter-register-namespace": "import xml.etree.ElementTree as ET\n"
                                 "ET.register_namespace('x', 'u')  # <-\n",
    "shared-logger-class": "import logging\nlogging.getLoggerClass().warning = print  # <-\n",
    "entrypoint-made-elsewhere": "import importlib.metadata as md\n"
                                 "ep = md.EntryPoint('x', 'vllm.v1:A', 'g')\n"
                                 "ep.load().forward = None  # <-\n",
    "forwardref-foreign-namespace": "import typing, vllm.v1.attention.backend as bm\n"
                                    "typing.ForwardRef('AttentionImpl')._evaluate(vars(bm), None, "
                                    "frozenset()).forward = None  # <-\n",
    "eval-type-named-ref": "import typing\nr = typing.ForwardRef('AttentionImpl')\n"
                           "typing._eval_type(r, globals(), None).forward = None  # <-\n",
    "evaluate-named-ref": "import typing\nr = typing.ForwardRef('AttentionImpl')\n"
                          "r._evaluate(globals(), None, frozenset()).forward = None  # <-\n",
    "hints-inherited-from-engine": "import typing\nclass K(AttentionImpl):\n    pass\n"
                                   "typing.get_type_hints(K)['impl'].forward = None  # <-\n",
    "hints-computed-key": "import typing, os\nclass K:\n    a: 'int'\n    b: 'AttentionImpl'\n"
                          "typing.get_type_hints(K)[os.environ['K']].forward = None  # <-\n",
    "hints-plain-annotation": "import inspect\nclass K:\n    x: AttentionImpl\n"
                              "inspect.get_annotations(K)['x'].forward = None  # <-\n",
    "mock-importer": "from unittest import mock\nmock._importer('vllm.v1.attention.backend').AttentionImpl."
                     "forward = None  # <-\n",
    "fd-handed-in": "import os\ndef f(fd):\n    os.close(fd)  # <-\n",
    "fd-rebound-to-stdout": "import os\nr, w = os.pipe()\nw = 1\nos.write(w, b'x')  # <-\n",
    "stdin-buffer": "import sys\nsys.stdin.buffer.read()  # <-\n",
    "stdin-open-fd-zero": "E = open(0).read()  # <-\n",
    "stdin-open-dev-path": "import io\nE = io.open('/dev/stdin').read()  # <-\n",
    "stdin-os-open-proc-fd": "import os\nfd = os.open('/proc/self/fd/0', os.O_RDONLY)  # <-\n"
                             "E = os.read(fd, 1)  # <-\n",
    "stdin-dup": "import os\nE = os.read(os.dup(0), 1)  # <-\n",
    "stdin-fdopen-fileno": "import os, sys\nE = os.fdopen(sys.stdin.fileno()).read()  # <-\n",
    "stdin-read-handed-fd": "import os\ndef f(fd):\n    return os.read(fd, 1)  # <-\n",
}

HONEST: dict[str, str] = {
    "own-partial-and-map": "import dataclasses, typing\nclass A:\n    x: int = 0\nclass B:\n    pass\n"
                           "functools.partial(dataclasses.dataclass, frozen=True)(A)\n"
                           "list(map(typing.final, [B]))\n",
    "own-helper-transforms-own": "import dataclasses\ndef mk(c):\n    return dataclasses.dataclass(c)\n"
                                 "class A:\n    x: int = 0\nmk(A)\n",
    "own-timeit-literal": "import timeit\nT = timeit.timeit('1 + 1', number=1)\n",
    "own-timeit-callables": "import timeit, codecs\nclass Own:\n    def __call__(self):\n        pass\n"
                            "    def m(self):\n        pass\ndef step(n):\n    pass\n"
                            "T = timeit.timeit(functools.partial(step, 1), number=1)\n"
                            "T2 = timeit.timeit(Own(), number=1)\nT3 = timeit.Timer(Own().m).timeit(1)\n"
                            "N = codecs.lookup('utf-8').name\n",
    "own-doctest": "import doctest\ndef f():\n    '''\n    >>> 1 + 1\n    2\n    '''\n"
                   "doctest.run_docstring_examples(f, {})\n",
    "own-hints-by-key": "import typing\nclass Own:\n    pass\nclass K:\n    a: 'Own'\n"
                        "    b: 'AttentionImpl'\nH = typing.get_type_hints(K)\nH['a'].z = 1\n"
                        "N = H['b'].__name__\n",
    "own-named-forward-ref": "import typing\nclass Own:\n    pass\nr = typing.ForwardRef('Own')\n"
                             "typing._eval_type(r, globals(), None).y = 1\n"
                             "r._evaluate(globals(), None, frozenset()).z = 2\n",
    "own-entry-point-own-target": "import importlib.metadata as md\n"
                                  "md.EntryPoint('x', 'vllm.models.kimi_k3.nvidia.model:f', 'g').load()."
                                  "y = 1\n",
    "own-fds": "import os\nfd = os.open('/dev/null', os.O_RDONLY)\nos.lseek(fd, 0, os.SEEK_SET)\n"
               "B = os.read(fd, 1)\nos.close(fd)\np = os.pipe()\nos.write(p[1], b'x')\nos.close(p[0])\n",
    "own-table-reads": "import keyword, sysconfig\nK = list(keyword.kwlist)\nK.append('x')\n"
                       "S = sysconfig.get_config_vars('EXT_SUFFIX')\nS.append('x')\n",
}


@pytest.mark.parametrize("key", list(ATTACKS))
def test_attack_is_an_error_at_its_line(key: str, engine: EngineSignatures) -> None:  # noqa: F811
    want = marked(ATTACKS[key])
    assert want, "an attack marks its lines"
    assert set(want) <= set(shipped_error_lines(scan(ATTACKS[key], engine)))


@pytest.mark.parametrize("key", list(HONEST))
def test_honest_twin_is_clean(key: str, engine: EngineSignatures) -> None:  # noqa: F811
    assert shipped_error_lines(scan(HONEST[key], engine)) == []
