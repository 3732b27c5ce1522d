"""esc21: a generator object, or its bound `send`, that reaches `.send()` other than by a direct call on a
generator of this file: stored in a container, returned from a function, re-exported through two own
modules, `functools.partial(gen.send, x)()`, `gen.send` handed to a function that calls it, `map(gen.send,
xs)`. The generator body writes through what it is sent after the yield. Each attack must be an error at
the lines marked `# <-`; the honest twins (the same forms sending the contribution's own objects) stay
clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from fasttrack.policy import Policy, load_policy
from tests.escape_marks import error_lines, marked_lines
from tests.test_escapes import POLICY
from tests.test_escapes_hostile20 import LAYERS, _cross_errors, marked, scan
from tests.test_escapes_hostile_flow import ENGINE
from tests.test_escapes_own_bases import contribution, ft_errors, write

# -- one file: a generator of this file, sent through a value the scan must follow -----------------------
GEN = "def g():\n    x = yield\n    x.forward = None  # <-\ngen = g()\nnext(gen)\n"
GEN_OWN = "def g():\n    x = yield\n    x.forward = None\ngen = g()\nnext(gen)\n"
IN_FILE: list[tuple[str, str]] = [
    ("partial-of-the-bound-send", GEN + "functools.partial(gen.send, L)()\n"),
    ("partial-of-the-bound-send-called-with-it",
     GEN + "functools.partial(gen.send)(L)\n"),
    ("bound-send-to-an-own-function", GEN + "def call(f, v):\n    f(v)\ncall(gen.send, L)\n"),
    ("bound-send-to-an-own-function-by-keyword",
     GEN + "def call(f):\n    f(L)\ncall(f=gen.send)\n"),
    ("map-of-the-bound-send", GEN + "list(map(gen.send, [L]))\n"),
    ("bound-send-forwarded-by-an-own-function",
     GEN + "def call2(f, v):\n    f(v)\ndef call(f, v):\n    call2(f, v)\ncall(gen.send, L)\n"),
    ("bound-send-in-a-list", GEN + "fs = [gen.send]\nfs[0](L)\n"),
    ("bound-send-returned", GEN + "def sender():\n    return gen.send\nsender()(L)\n"),
    ("bound-send-to-a-thread", GEN + "import threading\nthreading.Thread(target=gen.send, args=(L,))\n"),
    ("generator-in-a-list", "def g():\n    x = yield\n    x.forward = None  # <-\ngs = [g()]\nnext(gs[0])\n"
     "gs[0].send(L)\n"),
    ("generator-returned",
     "def g():\n    x = yield\n    x.forward = None  # <-\ndef make():\n    return g()\n"
     "make().send(L)\n"),
]
IN_FILE_HONEST: list[tuple[str, str]] = [
    ("partial-and-map-of-own-objects",
     GEN_OWN + "functools.partial(gen.send, K)()\nlist(map(gen.send, [K]))\n"
     "def call(f, v):\n    f(v)\ncall(gen.send, K())\nprint(L)\n"),
    ("a-bound-send-handed-on-with-no-generator-writing-its-yield",
     "import threading\ndef g():\n    x = yield\n    print(x)\ngen = g()\n"
     "threading.Thread(target=gen.send, args=(L,))\n"),
]


@pytest.mark.parametrize("src", [a[1] for a in IN_FILE], ids=[a[0] for a in IN_FILE])
def test_in_file_send_attack_is_an_error(src: str) -> None:
    want = marked(src)
    assert want, "an attack marks its lines"
    assert set(want) <= set(error_lines(scan(src)))


@pytest.mark.parametrize("src", [a[1] for a in IN_FILE_HONEST], ids=[a[0] for a in IN_FILE_HONEST])
def test_in_file_send_honest_twin_is_clean(src: str) -> None:
    assert error_lines(scan(src)) == []


# -- another own module's generator (whose body writes through what it is sent after the yield) ---------
A = "def g():\n    x = yield\n    x.forward = None\n"
LA = "from .layers import AttentionImpl as A\n"
CROSS: list[tuple[str, dict[str, str], str]] = [
    ("in-a-list", {"a.py": A}, LA + "from .a import g\ngs = [g()]\nnext(gs[0])\ngs[0].send(A)  # <-\n"),
    ("in-a-dict", {"a.py": A}, LA + "from .a import g\nd = {'k': g()}\nd['k'].send(A)  # <-\n"),
    ("in-a-tuple", {"a.py": A}, LA + "from .a import g\nt = (1, g())\nt[1].send(A)  # <-\n"),
    ("returned-by-an-own-function", {"a.py": A},
     LA + "from .a import g\ndef make():\n    return g()\nmake().send(A)  # <-\n"),
    ("returned-by-an-own-function-stored", {"a.py": A},
     LA + "from .a import g\ndef make():\n    gen = g()\n    next(gen)\n    return gen\n"
     "h = make()\nh.send(A)  # <-\n"),
    ("re-exported-by-a-second-module", {"a.py": A, "b.py": "from .a import g\n"},
     LA + "from .b import g\ngen = g()\nnext(gen)\ngen.send(A)  # <-\n"),
    ("re-exported-under-another-name", {"a.py": A, "b.py": "from .a import g as h\n"},
     LA + "from . import b\ngen = b.h()\ngen.send(A)  # <-\n"),
    ("made-by-a-second-module", {"a.py": A, "b.py": "from .a import g\ndef make():\n    return g()\n"},
     LA + "from .b import make\ngen = make()\nnext(gen)\ngen.send(A)  # <-\n"),
    ("module-global-of-a-second-module", {"a.py": A, "b.py": "from .a import g\nG = g()\n"},
     LA + "from .b import G\nG.send(A)  # <-\n"),
    ("module-global-of-the-defining-module", {"a.py": A + "G = g()\n"},
     LA + "from .a import G\nG.send(A)  # <-\n"),
    ("partial-of-its-bound-send", {"a.py": A},
     LA + "import functools\nfrom .a import g\ngen = g()\nfunctools.partial(gen.send, A)()  # <-\n"),
    ("partial-of-its-bound-send-called-with-it", {"a.py": A},
     LA + "import functools\nfrom .a import g\ngen = g()\nfunctools.partial(gen.send)(A)  # <-\n"),
    ("its-bound-send-to-an-own-function", {"a.py": A},
     LA + "from .a import g\ndef call(f, v):\n    f(v)\ngen = g()\ncall(gen.send, A)  # <-\n"),
    ("its-bound-send-to-another-module-function", {"a.py": A, "b.py": "def call(f, v):\n    f(v)\n"},
     LA + "from .a import g\nfrom .b import call\ngen = g()\ncall(gen.send, A)  # <-\n"),
    ("map-of-its-bound-send", {"a.py": A},
     LA + "from .a import g\ngen = g()\nlist(map(gen.send, [A]))  # <-\n"),
    ("its-bound-send-stored-then-called", {"a.py": A},
     LA + "from .a import g\ngen = g()\ns = gen.send\ns(A)  # <-\n"),
    ("its-bound-send-to-a-thread", {"a.py": A},
     LA + "import threading\nfrom .a import g\ngen = g()\n"
     "threading.Thread(target=gen.send, args=(A,))  # <-\n"),
]
OWN = "class Own:\n    pass\n"
CROSS_HONEST = (LA + OWN + "import functools\nfrom .a import g\nfrom .b import make, G, call\n"
                "gs = [g()]\ngs[0].send(Own)\nmake().send(Own())\nG.send(Own)\n"
                "gen = g()\nfunctools.partial(gen.send, Own)()\nlist(map(gen.send, [Own]))\n"
                "call(gen.send, Own)\n"
                "s = gen.send\ns(Own)\nprint(A)\n"
                "def mine():\n    y = yield\n    y.t = 1\nfrom .b import drive_own\ndrive_own(mine())\n")
CROSS_HONEST_MODULES = {"a.py": A, "b.py": OWN + "from .a import g\ndef make():\n    return g()\nG = g()\n"
                        "def call(f, v):\n    f(v)\ndef drive_own(gen):\n    next(gen)\n    gen.send(Own)\n"}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(POLICY)


@pytest.mark.parametrize(("extra", "src"), [(a[1], a[2]) for a in CROSS], ids=[a[0] for a in CROSS])
def test_cross_module_send_attack_is_an_error(tmp_path: Path, policy: Policy, extra: dict[str, str], src: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    want = marked_lines(src)
    assert want, "an attack marks its lines"
    assert set(want) <= set(_cross_errors(tmp_path, policy, extra, src, monkeypatch))


def test_cross_module_send_honest_twin(tmp_path: Path, policy: Policy,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    assert _cross_errors(tmp_path, policy, CROSS_HONEST_MODULES, CROSS_HONEST, monkeypatch) == []


def test_a_generator_handed_to_another_module_that_sends_it_the_engine_class(
        tmp_path: Path, policy: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    # the generator is this file's, the send is another module's (into its parameter): an error there
    monkeypatch.setenv("FASTTRACK_ENGINE_TREE", str(write(tmp_path / "engine", ENGINE)))
    drive = ("from .layers import AttentionImpl\ndef drive(gen):\n    next(gen)\n"
             "    gen.send(AttentionImpl)  # <-\n")
    impl = "def g():\n    x = yield\n    x.forward = None\nfrom .b import drive\ndrive(g())\n"
    files = {"kernels/kimi_k3/__init__.py": "", "kernels/kimi_k3/layers.py": LAYERS,
             "kernels/kimi_k3/b.py": drive, "kernels/kimi_k3/impl.py": impl}
    errors = ft_errors(contribution(tmp_path, policy, files))
    assert {line for _, path, line in errors if path == "kernels/kimi_k3/b.py"} >= set(marked_lines(drive))
