"""Hostile review of the confinement, round 5: dynamic subclasses of registering engine bases, the decimal
context, profilers and threads started at import time. Each attack marks the line its error must point at
with `# <-`; each comes with an honest twin that must stay clean."""

from __future__ import annotations

import textwrap

import pytest

from fasttrack.confinement.escapes import Escape, find_escapes
from fasttrack.confinement.subclass_registries import registering_bases

MODEL_FILE = "vllm/models/kimi_k3/nvidia/model.py"
OWN = {"vllm.models.kimi_k3"}


def scan(src: str) -> list[Escape]:
    return find_escapes(textwrap.dedent(src), MODEL_FILE, OWN, own_op_namespaces={"kimi_k3"})


def marked(src: str) -> list[int]:
    return [i for i, line in enumerate(textwrap.dedent(src).splitlines(), start=1) if "# <-" in line]


# (name, source, code): every marked line carries an *error* of this code. Interpreter-wide hooks
# (sys.setprofile and its aliases, sys.monitoring) are FT122, the rest FT146.
ATTACKS: list[tuple[str, str, str]] = [
    ("dynamic-class-computed-bases", """
from vllm.tool_parsers.abstract_tool_parser import ToolParser
bases = [ToolParser]
K3Parser = type("K3Parser", tuple(bases), {})  # <-
""", "FT146"),
    ("new-class-starred-bases", """
import types
from vllm.tool_parsers.abstract_tool_parser import ToolParser
bases = [ToolParser]
K3Parser = types.new_class("K3Parser", (*bases,))  # <-
""", "FT146"),
    ("decimal-prec", """
import decimal
decimal.getcontext().prec = 50  # <-
""", "FT146"),
    ("decimal-rounding-alias", """
from decimal import getcontext
ctx = getcontext()
ctx.rounding = "ROUND_DOWN"  # <-
""", "FT146"),
    ("decimal-traps", """
import decimal
decimal.getcontext().traps[decimal.Inexact] = True  # <-
""", "FT146"),
    ("decimal-method", """
import decimal
decimal.getcontext().clear_flags()  # <-
""", "FT146"),
    ("cprofile-enable", """
import cProfile
cProfile.Profile().enable()  # <-
""", "FT146"),
    ("profile-enable", """
import profile
_p = profile.Profile()  # <-
""", "FT146"),
    ("sys-monitoring", """
import sys
sys.monitoring.use_tool_id(3, "k3")  # <-
""", "FT122"),
    ("setprofile-alias", """
import sys
hook = sys.setprofile
hook(lambda *a: None)  # <-
""", "FT122"),
    ("threading-setprofile", """
import threading
threading.setprofile(lambda *a: None)  # <-
""", "FT122"),
    ("import-time-thread-own-target", """
import threading
def _poll():
    return None
threading.Thread(target=_poll, daemon=True).start()  # <-
""", "FT146"),
    ("import-time-thread-by-name", """
from threading import Thread
def _poll():
    return None
_t = Thread(target=_poll)
_t.start()  # <-
""", "FT146"),
    ("import-time-pool-submit", """
import concurrent.futures
def _warm():
    return None
_pool = concurrent.futures.ThreadPoolExecutor(1)
_pool.submit(_warm)  # <-
""", "FT146"),
    ("import-time-call-of-a-starter", """
import threading
def _poll():
    return None
def _boot():
    threading.Thread(target=_poll, daemon=True).start()
def _setup():
    [_boot() for _ in range(1)]
_setup()  # <-
""", "FT146"),
    ("import-time-pool-with", """
from concurrent.futures import ThreadPoolExecutor
def _warm():
    return None
with ThreadPoolExecutor() as ex:
    ex.submit(_warm)  # <-
""", "FT146"),
]


@pytest.mark.parametrize(("source", "code"), [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_attack_is_an_error(source: str, code: str) -> None:
    found = scan(source)
    got = sorted({e.line for e in found if e.code == code and e.severity == "error"})
    assert got == marked(source), found


def test_timer_started_at_import_is_an_error_twice() -> None:
    # the Timer itself is outside the allow-list (FT146); starting it at import time is one more
    src = "import threading\ndef f():\n    return None\nthreading.Timer(1.0, f).start()\n"
    got = sorted(e.target or "" for e in scan(src) if e.code == "FT146" and e.severity == "error")
    assert got == ["<thread>.start", "threading.Timer"]


HONEST: list[tuple[str, str]] = [
    ("dynamic-class-literal-bases", """
import types
import torch
Own = type("Own", (torch.nn.Module,), {"tag": 1})
Plain = types.new_class("Plain")
kind = type(Own)
"""),
    ("decimal-local-context", """
import decimal
def fmt(x):
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        ctx.traps[decimal.Inexact] = False
        return +decimal.Decimal(x)
digits = decimal.getcontext().prec
copy = decimal.getcontext().copy()
copy.prec = 5
"""),
    ("runtime-threads-and-monitoring-reads", """
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
def _poll():
    return None
_t = threading.Thread(target=_poll, daemon=True)
def start_polling():
    threading.Thread(target=_poll, daemon=True).start()
    with ThreadPoolExecutor(2) as ex:
        ex.submit(_poll)
    _t.start()
tool = sys.monitoring.get_tool(3)
class K3:
    def __init__(self):
        start_polling()
def load():
    return K3()
if __name__ == "__main__":
    start_polling()
"""),
]


@pytest.mark.parametrize("source", [h[1] for h in HONEST], ids=[h[0] for h in HONEST])
def test_honest_code_stays_clean(source: str) -> None:
    assert scan(source) == []


# A class created with `type(name, bases, ns)` / `types.new_class` runs the bases' `__init_subclass__` like a
# class statement: the blast radius sees it as the same `registry` link (FT110/FT111).

ENGINE = {
    "vllm.plugins": "vllm/plugins.py",
    "vllm.models.kimi_k3.model": "vllm/models/kimi_k3/model.py",
}
PLUGINS = ("_PLUGINS = {}\n\nclass Plugin:\n    def __init_subclass__(cls, **kw):\n"
           "        _PLUGINS[cls.__name__] = cls\n\nclass Plain:\n    pass\n")


def hits(src: str) -> list[tuple[str, int, str]]:
    out = registering_bases(src, "vllm.models.kimi_k3.model", False, ENGINE,
                            lambda rel: PLUGINS if rel == "vllm/plugins.py" else None, "vllm",
                            "vllm.models.kimi_k3")
    return [(h.class_name, h.line, h.base) for h in out]


@pytest.mark.parametrize(("src", "name"), [
    ("from vllm.plugins import Plugin\nclass K3(Plugin):\n    pass\n", "K3"),
    ("from vllm.plugins import Plugin\nK3 = type('K3', (Plugin,), {})\n", "K3 (dynamic)"),
    ("import vllm.plugins as p\nK3 = type('K3', [p.Plugin], {})\n", "K3 (dynamic)"),
    ("import types\nfrom vllm.plugins import Plugin\nK3 = types.new_class('K3', (Plugin,))\n",
     "K3 (dynamic)"),
    ("from types import new_class as nc\nfrom vllm import plugins\nK3 = nc('K3', bases=(plugins.Plugin,))\n",
     "K3 (dynamic)"),
])
def test_dynamic_subclass_of_a_registering_base_is_a_registry_link(src: str, name: str) -> None:
    assert [(n, b) for n, _, b in hits(src)] == [(name, "vllm.plugins.Plugin")]


def test_dynamic_subclass_of_a_plain_base_is_no_link() -> None:
    assert hits("from vllm.plugins import Plain\nA = type('A', (Plain,), {})\nk = type(A)\n"
                "class B(Plain):\n    pass\n") == []
