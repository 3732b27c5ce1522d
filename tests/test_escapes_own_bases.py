"""An own base class of another file in contribution mode: the engine tree does not hold the model's
package, so the contribution's own modules are an overlay the engine-signature reader reads first
(engine_signatures.py `own`, facts/escapes.py `own_modules`). An override of a method of an own base that
derives from an engine class gets the engine's objects by position; an own base that cannot be read is
treated as possibly deriving from one (fail closed). Attacks first, each with an honest twin."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fasttrack.confinement.engine_signatures import EngineSignatures
from fasttrack.confinement.escapes import Escape, find_escapes
from fasttrack.context import Context
from fasttrack.facts import escapes as escape_facts
from fasttrack.facts.gather import gather_facts
from fasttrack.manifest import Manifest
from fasttrack.policy import Policy, load_policy
from fasttrack.rules import escapes as escape_rules
from fasttrack.verdict import ChangeStatus
from tests.escape_marks import error_lines, marked_lines
from tests.test_escapes import POLICY, make_ctx, reference_manifest
from tests.test_escapes_hostile_flow import ENGINE  # the engine's AttentionImpl and two subclasses

MODEL_FILE = "vllm/models/kimi_k3/nvidia/model.py"
OWN = {"vllm.models.kimi_k3"}
BASE = "from vllm.v1.attention.backend import AttentionImpl\nclass K3Base(AttentionImpl):\n    pass\n"
OVERRIDE = """
from vllm.models.kimi_k3.nvidia.base import K3Base
class K3Impl(K3Base):
    def forward(self, a, b, c, d, e, m, g=None):
        m.num_actual_tokens = 0  # <-
"""
HONEST = OVERRIDE.replace("m.num_actual_tokens = 0  # <-", "g.zero_()")


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return root


@pytest.fixture
def engine_root(tmp_path: Path) -> Path:
    return write(tmp_path / "engine", ENGINE)


def scan(src: str, sig: EngineSignatures) -> list[Escape]:
    return find_escapes(textwrap.dedent(src), MODEL_FILE, OWN, signatures=sig.method_params)


def marked(src: str) -> list[int]:
    return marked_lines(textwrap.dedent(src))


# -- the reader, with the contribution's modules as an overlay ----------------------------------------------
def test_own_base_in_the_overlay_is_followed_to_the_engine(engine_root: Path) -> None:
    sig = EngineSignatures(engine_root, own={"vllm.models.kimi_k3.nvidia.base": (BASE, False)})
    found = scan(OVERRIDE, sig)
    assert error_lines(found) == marked(OVERRIDE)
    assert any("an own base of another file" in e.message for e in found)
    # honest twin: the parameter in a position the engine does not fill with its objects
    assert error_lines(scan(HONEST, sig)) == []


def test_own_base_chain_through_a_package_alias_is_followed(engine_root: Path) -> None:
    # the overlay names the module under the contribution's package too (`kimi_k3.base`); a chain of own
    # bases across files, through a relative import, ends at the engine class
    own = {"vllm.models.kimi_k3.nvidia.base": ("from .mid import Mid\nclass K3Base(Mid):\n    pass\n", False),
           "vllm.models.kimi_k3.nvidia.mid": (BASE.replace("K3Base", "Mid"), False)}
    found = scan(OVERRIDE, EngineSignatures(engine_root, own=own))
    assert error_lines(found) == marked(OVERRIDE)
    assert error_lines(scan(HONEST, EngineSignatures(engine_root, own=own))) == []


@pytest.mark.parametrize("own", [
    {"vllm.models.kimi_k3.nvidia.base": (None, False)},  # the file cannot be read
    {"vllm.models.kimi_k3.nvidia.base": ("class K3Base(:\n", False)},  # it does not parse
    {"vllm.models.kimi_k3.nvidia.base": ("K3Base = make()\n", False)},  # not a class statement
    {"vllm.models.kimi_k3.nvidia.base": ("class K3Base(make()):\n    pass\n", False)},  # a computed base
    {},  # not a file of the contribution nor of the engine tree
], ids=["unreadable", "unparseable", "computed-binding", "computed-base", "missing"])
def test_own_base_that_cannot_be_followed_fails_closed(engine_root: Path,
                                                       own: dict[str, tuple[str | None, bool]]) -> None:
    found = scan(HONEST, EngineSignatures(engine_root, own=own))
    assert error_lines(found) == [5]  # g may be any of the engine's objects
    assert any("cannot read or follow" in e.message for e in found)


@pytest.mark.parametrize("base", [
    "class K3Base:\n    pass\n",
    "class K3Base(object):\n    pass\n",
    "import torch\nclass K3Base(torch.nn.Module):\n    pass\n",
    "from torch import nn\nclass K3Base(nn.Module, dict):\n    pass\n",
    "from abc import ABC\nclass K3Base(ABC):\n    pass\n",
], ids=["plain", "object", "torch-module", "builtin-dict", "abc"])
def test_own_base_deriving_from_no_engine_class_stays_clean(engine_root: Path, base: str) -> None:
    sig = EngineSignatures(engine_root, own={"vllm.models.kimi_k3.nvidia.base": (base, False)})
    src = OVERRIDE.replace("  # <-", "")
    assert error_lines(scan(src, sig)) == []


# -- the pipeline: contribution mode reads the contribution's files ----------------------------------------
@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(POLICY)


def contribution(tmp_path: Path, policy: Policy, files: dict[str, str]) -> Context:
    manifest: Manifest = reference_manifest()
    target = manifest.contribution.target_path
    mine = [p for p in files if p.startswith("kernels/kimi_k3/")]
    return make_ctx(tmp_path / "repo", policy, dict(files), mode="contribution", manifest=manifest,
                    contribution_dir="kernels/kimi_k3", changed=mine,
                    statuses={p: ChangeStatus.ADDED for p in files},
                    engine_paths={p: p.replace("kernels/kimi_k3", target) for p in mine})


def ft_errors(ctx: Context) -> list[tuple[str, str, int | None]]:
    facts = gather_facts(ctx)
    return sorted((f.code, f.path or "", f.line) for r in escape_rules.catalogue.rules for f in r.run(facts)
                  if f.severity == "error")


@pytest.mark.parametrize("importer", [
    "from vllm.models.kimi_k3.nvidia.specialized_decode.hopper.base import K3Base",
    "from kimi_k3.base import K3Base",
    "from .base import K3Base",
], ids=["engine-path", "contribution-package", "relative"])
def test_contribution_mode_follows_an_own_base_of_another_file(tmp_path: Path, policy: Policy,
                                                               engine_root: Path, importer: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTTRACK_ENGINE_TREE", str(engine_root))
    attack = OVERRIDE.replace("from vllm.models.kimi_k3.nvidia.base import K3Base", importer)
    files = {"kernels/kimi_k3/__init__.py": "", "kernels/kimi_k3/base.py": BASE,
             "kernels/kimi_k3/impl.py": attack,
             # a `vllm/` the contributor ships beside the contribution is not the engine: its forward
             # has no engine objects in any position, and the scan must not read it
             "vllm/__init__.py": "", "vllm/v1/__init__.py": "", "vllm/v1/attention/__init__.py": "",
             "vllm/v1/attention/backend.py": "class AttentionImpl:\n    def forward(self, *a):\n"
                                             "        pass\n"}
    ctx = contribution(tmp_path / "attack", policy, files)
    assert ft_errors(ctx) == [("FT120", "kernels/kimi_k3/impl.py", 5)]
    honest = {**files, "kernels/kimi_k3/impl.py": HONEST.replace(
        "from vllm.models.kimi_k3.nvidia.base import K3Base", importer)}
    ctx = contribution(tmp_path / "honest", policy, honest)
    assert ft_errors(ctx) == []


def test_own_modules_is_none_in_range_mode(tmp_path: Path, policy: Policy) -> None:
    ctx = make_ctx(tmp_path, policy, {MODEL_FILE: "x = 1\n"})
    assert escape_facts.own_modules(ctx) is None


# -- every way a method runs as an override, through an own base of another file ----------------------------
OVERRIDE_FORMS: list[tuple[str, str]] = [
    ("varargs", "class K3(K3Base):\n    def forward(self, *args):\n"
                "        args[5].num_actual_tokens = 0  # <-\n"),
    ("mixin-before-the-own-base", "class Mixin:\n    def forward(self, a, b, c, d, e, m):\n"
                                  "        m.num_actual_tokens = 0  # <-\n"
                                  "class K3(Mixin, K3Base):\n    pass\n"),
    ("installed-under-a-computed-name", "def _h(self, a, b, c, d, e, m):\n    m.num_actual_tokens = 0  # <-\n"
                                        "class K3(K3Base):\n    pass\nfor n in ('forward',):\n"
                                        "    setattr(K3, n, _h)\n"),
    ("installed-by-name", "def _fwd(self, a, b, c, d, e, m):\n    m.num_actual_tokens = 0  # <-\n"
                          "class K3(K3Base):\n    forward = _fwd\n"),
    ("staticmethod", "class K3(K3Base):\n    @staticmethod\n    def forward(a, b, c, d, e, m):\n"
                     "        m.num_actual_tokens = 0  # <-\n"),
]
IMPORT = "from vllm.models.kimi_k3.nvidia.base import K3Base\n"


@pytest.mark.parametrize("src", [f[1] for f in OVERRIDE_FORMS], ids=[f[0] for f in OVERRIDE_FORMS])
def test_every_override_form_through_an_own_base_of_another_file(engine_root: Path, src: str) -> None:
    sig = EngineSignatures(engine_root, own={"vllm.models.kimi_k3.nvidia.base": (BASE, False)})
    assert error_lines(scan(IMPORT + src, sig)) == marked(IMPORT + src)
    # honest twin: the same code over an own base of another file that derives from no engine class
    torch_base = "import torch\nclass K3Base(torch.nn.Module):\n    pass\n"
    plain = EngineSignatures(engine_root, own={"vllm.models.kimi_k3.nvidia.base": (torch_base, False)})
    assert error_lines(scan(IMPORT + src, plain)) == []


def test_computed_method_name_answers_whether_an_engine_class_is_in_the_mro(engine_root: Path) -> None:
    own = {"vllm.models.kimi_k3.nvidia.base": (BASE, False),
           "vllm.models.kimi_k3.nvidia.plain": ("class P:\n    pass\n", False)}
    sig = EngineSignatures(engine_root, own=own)
    assert sig.method_params("vllm.models.kimi_k3.nvidia.base.K3Base", "*") == ("*",)
    assert sig.method_params("vllm.models.kimi_k3.nvidia.plain.P", "*") == ()
    assert sig.method_params("vllm.models.kimi_k3.nvidia.gone.G", "*") is None
    # range mode: the contribution's packages, not the overlay, say which classes are its own
    tree = write(engine_root, {"vllm/models/__init__.py": "", "vllm/models/kimi_k3/__init__.py": "",
                               "vllm/models/kimi_k3/p.py": "class P:\n    pass\n"})
    ranged = EngineSignatures(tree, own_packages=("vllm.models.kimi_k3",))
    assert ranged.method_params("vllm.models.kimi_k3.p.P", "*") == ()
    assert EngineSignatures(tree).method_params("vllm.models.kimi_k3.p.P", "*") == ("*",)  # fail closed
