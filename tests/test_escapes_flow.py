"""Issue 15 follow-up: the escape scan's resolver knows statement order inside a function (which binding
of a name reaches each use; fasttrack.confinement.escapes.flow). The precision must not open a way
through: each attack below tries to hide a write to an engine object behind the ordering (a rebind after
the write, a rebind in one branch, a loop that rebinds on its second iteration, `del`, walrus, `global`,
`nonlocal`, try/except/finally, `with`, comprehensions, closures, `match`, `break`) and must stay an error
at the lines marked `# <-`; each honest twin is the shape the real vLLM tree uses (a name rebound to a
fresh `dict(...)`/`copy.copy(...)` before it is written) and must be clean."""

from __future__ import annotations

import ast
import textwrap

import pytest

from fasttrack.confinement.escapes import Escape, find_escapes
from fasttrack.confinement.escapes.flow import ENTRY, reaching
from tests.escape_marks import error_lines, marked_lines

MODEL_FILE = "vllm/models/kimi_k3/nvidia/model.py"
OWN = {"vllm.models.kimi_k3"}
HEAD = ("import contextlib\nimport copy\n"
        "from vllm.model_executor.layers.linear import RowParallelLinear as L\n")


def scan(src: str) -> list[Escape]:
    return find_escapes(HEAD + textwrap.dedent(src), MODEL_FILE, OWN, own_op_namespaces={"kimi_k3"})


def marked(src: str) -> list[int]:
    return marked_lines(HEAD + textwrap.dedent(src))



ATTACKS: list[tuple[str, str]] = [
    ("rebind-after-the-write", """
def f():
    x = L
    x.forward = None  # <-
    x = {}
"""),
    ("write-after-a-branch-that-rebinds", """
def f(c):
    x = L
    if c:
        x = {}
    x.forward = None  # <-
"""),
    ("foreign-in-one-branch-only", """
def f(c):
    x = {}
    if c:
        pass
    else:
        x = L
    x.forward = None  # <-
"""),
    ("loop-rebinds-on-the-second-iteration", """
def f():
    x = {}
    for _ in range(2):
        x.forward = None  # <-
        x = L
"""),
    ("while-continue-rebinds", """
def f(n):
    x = {}
    while n:
        n -= 1
        if n == 1:
            x = L
            continue
        x.forward = None  # <-
"""),
    ("break-leaves-the-foreign-binding", """
def f(items):
    x = {}
    for _ in items:
        x = L
        break
    x.forward = None  # <-
"""),
    ("del-then-rebind", """
def f():
    x = {}
    del x
    x = L
    x.forward = None  # <-
"""),
    ("walrus-rebinds", """
def f():
    x = {}
    if (x := L) is not None:
        pass
    x.forward = None  # <-
"""),
    ("conditional-walrus", """
def f(c):
    x = {}
    if c and (x := L):
        pass
    x.forward = None  # <-
"""),
    ("walrus-in-a-comprehension", """
def f():
    x = {}
    [x := L for _ in range(1)]
    x.forward = None  # <-
"""),
    ("global-rebound-by-another-function", """
x = {}
def g():
    global x
    x = L
def f():
    g()
    x.forward = None  # <-
"""),
    ("global-import-in-a-function", """
def g():
    global target
    from vllm.model_executor.layers.linear import ColumnParallelLinear as target
g()
target.forward = None  # <-
"""),
    ("nonlocal-rebind-by-a-nested-function", """
def f():
    def g():
        nonlocal x
        x = L
    x = {}
    g()
    x.forward = None  # <-
"""),
    ("nonlocal-loop-target", """
def f():
    x = {}
    def g():
        nonlocal x
        for x in (L,):
            pass
    g()
    x.forward = None  # <-
"""),
    ("except-sees-the-state-before-the-raise", """
def f(make):
    x = L
    try:
        x = make()
    except Exception:
        x.forward = None  # <-
"""),
    ("finally-sees-every-state", """
def f(make):
    x = L
    try:
        x = make()
    finally:
        x.forward = None  # <-
"""),
    ("try-else-and-handler-join", """
def f():
    x = {}
    try:
        x = L
    except Exception:
        x = {}
    x.forward = None  # <-
"""),
    ("with-may-swallow-the-rest", """
def f(risky):
    x = L
    with contextlib.suppress(Exception):
        risky()
        x = {}
    x.forward = None  # <-
"""),
    ("with-target-rebinds", """
def f():
    x = {}
    with contextlib.nullcontext(L) as x:
        pass
    x.forward = None  # <-
"""),
    ("generator-runs-after-the-rebind", """
def f():
    x = {}
    g = (setattr(x, "forward", None) for _ in range(1))  # <-
    x = L
    list(g)
"""),
    ("closure-called-after-the-rebind", """
def f():
    x = {}
    def g():
        x.forward = None  # <-
    x = L
    g()
"""),
    ("match-case-rebinds", """
def f(v):
    x = {}
    match v:
        case 1:
            x = L
        case _:
            pass
    x.forward = None  # <-
"""),
    ("unpacking-left-to-right", """
def f():
    x = {}
    x, x.forward = L, None  # <-
"""),
    ("helper-rebinds-its-parameter-on-one-path", """
def _patch(obj, c):
    if c:
        obj = {}
    obj.forward = None
def f():
    _patch(L, False)  # <-
"""),
    ("copy-of-a-parameter-keeps-its-items", """
def _patch(items):
    mine = items.copy()
    mine[0].forward = None
def f():
    _patch([L])  # <-
"""),
]


@pytest.mark.parametrize("source", [a[1] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_attack_is_an_error(source: str) -> None:
    assert error_lines(scan(source)) == marked(source)


HONEST: list[tuple[str, str]] = [
    ("rebound-to-a-fresh-dict-before-item-writes", """
def rope(config):
    rope_parameters = config.rope_parameters
    if isinstance(rope_parameters.get("main"), dict):
        rope_parameters = dict(rope_parameters["main"])
    else:
        rope_parameters = dict(rope_parameters)
    rope_parameters["rope_theta"] = 1.0
    if rope_parameters["rope_type"] != "default":
        rope_parameters["rope_type"] = "yarn"
"""),
    ("copied-in-a-branch-then-written-there", """
def f(vllm_config):
    cache_config = vllm_config.cache_config
    if cache_config.cache_dtype == "fp8_ds_mla":
        cache_config = copy.copy(cache_config)
        cache_config.cache_dtype = "fp8"
"""),
    ("parameter-rebound-to-a-copy", """
def widen(quant_config, name, extra):
    if not extra:
        return quant_config
    quant_config = copy.copy(quant_config)
    setattr(quant_config, name, extra)
    return quant_config
"""),
    ("list-rebound-before-append", """
def sizes(vllm_config):
    sizes = vllm_config.compilation_config.capture_sizes
    if not sizes:
        sizes = [1]
        sizes.append(2)
"""),
    ("copy-of-a-list-parameter", """
def _widen(output_sizes, ids):
    output_sizes = output_sizes.copy()
    for i in ids:
        output_sizes[i] *= 2
def f(config):
    _widen(config.linear_num_heads, (0,))
"""),
    ("rebound-inside-the-loop-before-the-write", """
def f(items):
    x = L
    for _ in items:
        x = {}
        x["k"] = 1
"""),
    ("del-then-local", """
def f():
    x = L
    del x
    x = {}
    x["k"] = 1
"""),
    ("walrus-to-a-local", """
def f():
    x = L
    if (x := {}) is not None:
        x["k"] = 1
"""),
    ("nonlocal-to-a-local", """
def f():
    x = {}
    def g():
        nonlocal x
        x = {}
    g()
    x["k"] = 1
"""),
    ("try-except-both-local", """
def f(make):
    try:
        x = dict(make())
    except Exception:
        x = {}
    x["k"] = 1
"""),
    ("match-both-local", """
def f(v):
    x = L
    match v:
        case 1:
            x = {}
        case _:
            x = {}
    x["k"] = 1
"""),
    ("with-target-local", """
def f():
    with contextlib.nullcontext({}) as x:
        x["k"] = 1
"""),
]


@pytest.mark.parametrize("source", [h[1] for h in HONEST], ids=[h[0] for h in HONEST])
def test_honest_code_stays_clean(source: str) -> None:
    assert [e for e in scan(source) if e.severity == "error"] == []


def test_reaching_bindings_of_one_function() -> None:
    fn = ast.parse("def f(p):\n    x = p\n    if p:\n        x = 1\n    x\n    p = 2\n    p\n").body[0]
    assert isinstance(fn, ast.FunctionDef)
    got = reaching(fn, {"x", "p"}, {"p"})
    loads = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    by_line = {n.lineno: got.uses[id(n)] for n in loads if n.id in ("x", "p") and n.lineno in (2, 5, 7)}
    stores = {n.lineno: id(n) for n in ast.walk(fn)
              if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    assert by_line[2] == {ENTRY}
    assert by_line[5] == {stores[2], stores[4]}
    assert by_line[7] == {stores[6]}


# Bindings the resolver cannot follow at all (issue 15 audit): a name of the module bound through its own
# namespace or by a literal `exec`/`eval` would afterwards refer to what the scan never saw.
NAMESPACE_ATTACKS: list[tuple[str, str]] = [
    ("globals-item", "x = {}\nglobals()['x'] = L  # <-\nx.forward = None\n"),
    ("globals-update", "x = {}\nglobals().update(x=L)  # <-\nx.forward = None\n"),
    ("globals-alias-setitem", "x = {}\ng = globals()\ng.__setitem__('x', L)  # <-\nx.forward = None\n"),
    ("vars-item", "x = {}\nvars()['x'] = L  # <-\nx.forward = None\n"),
    ("sys-modules-attribute", "import sys\nx = {}\nsys.modules[__name__].x = L  # <-\nx.forward = None\n"),
    ("setattr-on-sys-modules", "import sys\nx = {}\nsetattr(sys.modules[__name__], 'x', L)  # <-\n"
                               "x.forward = None\n"),
    ("globals-in-a-function", "x = {}\ndef f():\n    globals()['x'] = L  # <-\n    x.forward = None\n"),
    ("globals-from-a-parameter", "def bind(v):\n    globals()['x'] = v  # <-\nbind(L)\n"),
    ("exec-binds", "x = {}\nexec('x = L')  # <-\nx.forward = None\n"),
    ("eval-walrus-binds", "x = {}\neval('(x := L)')  # <-\nx.forward = None\n"),
]


@pytest.mark.parametrize("source", [a[1] for a in NAMESPACE_ATTACKS], ids=[a[0] for a in NAMESPACE_ATTACKS])
def test_namespace_binding_is_an_error(source: str) -> None:
    assert error_lines(scan(source)) == marked(source)


@pytest.mark.parametrize("source", [
    "import sys\ny = globals().get('x')\nz = sys.modules[__name__].__name__\nw = vars(L)\n",
    "exec('print(1)')\n",
    "import sys\ndef helper():\n    pass\nglobals()['Y'] = 2\nsetattr(sys.modules[__name__], 'h', helper)\n",
    "import sys\nd = {}\nd.update(a=1)\nsys.modules.get(__name__)\n",
])
def test_reading_the_namespace_is_fine(source: str) -> None:
    assert [e for e in scan(source) if e.severity == "error"] == []
