"""Hostile review 24 of the static escape scan (issue 15, round static24): writes through methods of another
own module's class (a call on an instance or on the class, operator syntax running its dunders), and the
setter-rule narrowing (methods' `self`/`cls` are the contribution's own) abused by class, static and
class methods. Each attack marks its lines `# <-` (errors expected there); the honest twins must stay
clean. Attacks still open are strict xfails keyed in OPEN / CROSS_OPEN with a one-line reason."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fasttrack.confinement.engine_signatures import EngineSignatures
from fasttrack.policy import Policy, load_policy
from tests.escape_marks import marked_lines
from tests.test_escapes import POLICY
from tests.test_escapes_hostile20 import _cross_errors
from tests.test_escapes_hostile21 import _errors_by_file
from tests.test_escapes_hostile22 import shipped_error_lines
from tests.test_escapes_hostile_flow import ENGINE, marked, scan

# -- across own modules: another module's class whose methods write through their parameters -------------
_PUT = "class K:\n    def put(self, v):\n        v.forward = None\n"
CROSS: dict[str, tuple[dict[str, str], str]] = {
    "other-module-method-on-instance": ({"mid.py": _PUT},
                                        "from .layers import AttentionImpl\nfrom .mid import K\n"
                                        "K().put(AttentionImpl)  # <-\n"),
    "other-module-method-on-module-instance": ({"mid.py": _PUT + "k = K()\n"},
                                               "from .layers import AttentionImpl\nfrom .mid import k\n"
                                               "k.put(AttentionImpl)  # <-\n"),
    "other-module-method-unbound": ({"mid.py": _PUT},
                                    "from .layers import AttentionImpl\nfrom .mid import K\n"
                                    "K.put(K(), AttentionImpl)  # <-\n"),
    "other-module-staticmethod": ({"mid.py": "class K:\n    @staticmethod\n    def put(v):\n"
                                             "        v.forward = None\n"},
                                  "from .layers import AttentionImpl\nfrom .mid import K\n"
                                  "K.put(AttentionImpl)  # <-\n"),
    "other-module-classmethod": ({"mid.py": "class K:\n    @classmethod\n    def put(cls, v):\n"
                                            "        v.forward = None\n"},
                                 "from .layers import AttentionImpl\nfrom .mid import K\n"
                                 "K.put(AttentionImpl)  # <-\n"),
    "other-module-setattr-dunder": ({"mid.py": "class K:\n    def __setattr__(self, k, v):\n"
                                               "        v.forward = None\n"},
                                    "from .layers import AttentionImpl\nfrom .mid import K\n"
                                    "K().a = AttentionImpl  # <-\n"),
    "other-module-call-dunder": ({"mid.py": "class K:\n    def __call__(self, v):\n"
                                            "        v.forward = None\n"},
                                 "from .layers import AttentionImpl\nfrom .mid import K\n"
                                 "K()(AttentionImpl)  # <-\n"),
    "other-module-iadd-dunder": ({"mid.py": "class K:\n    def __iadd__(self, v):\n        v.forward = None\n"
                                            "        return self\n"},
                                 "from .layers import AttentionImpl\nfrom .mid import K\nk = K()\n"
                                 "k += AttentionImpl  # <-\n"),
    "other-module-unbound-list-append-helper": ({"mid.py": "def add(p, x):\n    list.append(p, x)\n"},
                                                "import sys\nfrom .mid import add\n"
                                                "add(sys.path, '/tmp')  # <-\n"),
    "other-module-returns-engine-cm": ({"mid.py": "import torch\ndef grad():\n    return torch.no_grad()\n"},
                                       "from .mid import grad\ngrad().__enter__()  # <-\n"),
}
CROSS_OPEN: dict[str, str] = {}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(POLICY)


def test_open_keys_are_cases() -> None:
    assert set(CROSS_OPEN) <= set(CROSS)
    assert set(OPEN) <= set(ATTACKS)


@pytest.mark.parametrize(("extra", "src"), [
    pytest.param(v[0], v[1], id=k,
                 marks=[pytest.mark.xfail(strict=True, reason=CROSS_OPEN[k])] if k in CROSS_OPEN else [])
    for k, v in CROSS.items()])
def test_cross_module_attack_is_an_error(tmp_path: Path, policy: Policy, extra: dict[str, str], src: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    want = {(f"kernels/kimi_k3/{name}", line) for name, text in {**extra, "impl.py": src}.items()
            for line in marked_lines(text)}
    assert want, "an attack marks its lines"
    assert want <= _errors_by_file(tmp_path, policy, extra, src, monkeypatch)


CROSS_HONEST_MID = ("class Own:\n    pass\nclass K:\n    def put(self, v):\n        v.y = 1\n"
                    "    def __setitem__(self, k, v):\n        v.y = 1\n    @staticmethod\n    def s(v):\n"
                    "        v.y = 1\n    @classmethod\n    def c(cls, v):\n        v.y = 1\nk = K()\n"
                    "class H:\n    def __new__(cls, *a):\n        return super().__new__(cls)\n"
                    "class G:\n    def __new__(cls):\n        return object.__new__(cls)\n"
                    "class CM:\n    def __enter__(self):\n        return self\n    def __exit__(self, *a):\n"
                    "        return False\ndef mk():\n    return CM()\n")
CROSS_HONEST = ("from .layers import AttentionImpl\nfrom .mid import K, k, H, G, Own, mk\nK().put(Own)\n"
                "k.put(Own())\nK()['x'] = Own\nK.s(Own)\nK.c(Own)\nK.put(K(), Own)\nH().y = 1\nG().y = 1\n"
                "mk().__enter__()\nK().put(1)\nK()[AttentionImpl] = 1\nK.put(AttentionImpl(), Own)\n")


def test_cross_module_honest_twin(tmp_path: Path, policy: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _cross_errors(tmp_path, policy, {"mid.py": CROSS_HONEST_MID}, CROSS_HONEST, monkeypatch) == []


# -- one file (the head of tests/test_escapes_hostile_flow.py binds L and AttentionImpl, engine classes) ---
ATTACKS: dict[str, str] = {
"unbound-setitem-param-helper": "import sys\ndef put(d, k, v):\n    dict.__setitem__(d, k, v)\n"
                                "put(sys.modules, 'x', None)  # <-\n",
"own-function-returns-redirect": "import io\ndef quiet():\n"
                                 "    return contextlib.redirect_stdout(io.StringIO())  # <-\n"
                                 "quiet().__enter__()  # <-\n",
}
OPEN: dict[str, str] = {}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> EngineSignatures:
    root = tmp_path_factory.mktemp("engine")
    for rel, text in ENGINE.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return EngineSignatures(root)


@pytest.mark.parametrize("src", [
    pytest.param(s, id=k, marks=[pytest.mark.xfail(strict=True, reason=OPEN[k])] if k in OPEN else [])
    for k, s in ATTACKS.items()])
def test_attack_is_an_error_at_its_line(src: str, engine: EngineSignatures) -> None:
    want = marked(src)
    assert want, "an attack marks its lines"
    assert set(want) <= set(shipped_error_lines(scan(src, engine)))


HONEST: dict[str, str] = {
"unbound-setitem-own": "def put(d, k, v):\n    dict.__setitem__(d, k, v)\n"
                       "put({}, 'x', None)\n",
"own-function-returns-own-cm": "class CM:\n    def __enter__(self):\n        return self\n"
                               "    def __exit__(self, *a):\n        return False\n"
                               "def mk():\n    return CM()\nmk().__enter__()\n",
}


@pytest.mark.parametrize("src", list(HONEST.values()), ids=list(HONEST))
def test_honest_twin_is_clean(src: str, engine: EngineSignatures) -> None:
    assert shipped_error_lines(scan(src, engine)) == []
