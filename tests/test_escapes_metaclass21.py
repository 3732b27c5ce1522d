"""esc21: a direct metaclass call (`Meta(name, bases, ns)`) is judged by what the callee is where its
definition can be read (this file, another own module, the engine tree, the engine baselines): a class
deriving from `type` is a metaclass whatever its name (`class Reg(type)`), a plain class named `*Meta`
(a dataclass of decode metadata called with three keywords) is not. Where the definition cannot be read
the name decides, as before (fail closed). Attacks must be errors at the lines marked `# <-`; the honest
twins stay clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from fasttrack.confinement.engine_signatures import EngineSignatures
from fasttrack.confinement.escapes import Escape, find_escapes
from tests.escape_marks import error_lines, marked_lines

MODEL_FILE = "vllm/models/kimi_k3/nvidia/model.py"
OWN = {"vllm.models.kimi_k3"}
ENGINE = {
    "vllm/__init__.py": "",
    "vllm/reg.py": "import abc\nfrom dataclasses import dataclass\nfrom vllm.nothere import Unknown\n"
                   "class Reg(type):\n    pass\nclass SubReg(Reg):\n    pass\n"
                   "class AbcReg(abc.ABCMeta):\n    pass\n"
                   "@dataclass\nclass StepMeta:\n    a: int\n    b: int = 0\n    c: int = 0\n"
                   "class PlainMeta(StepMeta):\n    pass\nclass OddMeta(Unknown):\n    pass\n"
                   "class Base:\n    pass\n",
    "vllm/again.py": "from vllm.reg import Reg as Renamed\n",
}
BASELINE = {"baselines/__init__.py": "", "baselines/vllm/__init__.py": "",
            "baselines/vllm/kimi_k3/__init__.py": "",
            "baselines/vllm/kimi_k3/decode.py": "from dataclasses import dataclass\n@dataclass(frozen=True)\n"
                                                "class DecodeMeta:\n    batch: int\n    max_context: int\n"
                                                "    tp: int = 1\nclass StepReg(type):\n    pass\n"}
HEAD = "bases = [object]\n"


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture
def reader(tmp_path: Path) -> EngineSignatures:
    _write(tmp_path / "engine", ENGINE)
    _write(tmp_path / "repo", BASELINE)
    return EngineSignatures(tmp_path / "engine", extra_roots={"baselines": tmp_path / "repo"})


def scan(src: str, reader: EngineSignatures) -> list[Escape]:
    return find_escapes(HEAD + src, MODEL_FILE, OWN, own_op_namespaces={"kimi_k3"},
                        signatures=reader.method_params, metaclasses=reader.metaclass)


ATTACKS: list[tuple[str, str]] = [
    ("engine-metaclass-named-without-meta", "from vllm.reg import Reg\nReg('X', tuple(bases), {})  # <-\n"),
    ("engine-metaclass-through-an-engine-subclass",
     "from vllm.reg import SubReg\nSubReg('X', tuple(bases), {})  # <-\n"),
    ("engine-metaclass-re-exported-and-renamed",
     "from vllm.again import Renamed\nRenamed('X', tuple(bases), {})  # <-\n"),
    ("engine-abcmeta-subclass", "from vllm.reg import AbcReg\nAbcReg('X', tuple(bases), {})  # <-\n"),
    ("engine-metaclass-by-keywords",
     "from vllm.reg import Reg\nReg(name='X', bases=tuple(bases), dict={})  # <-\n"),
    ("engine-metaclass-with-an-engine-base",
     "from vllm.reg import Reg, Base\nReg('X', (Base,), {})  # <-\n"),
    ("baseline-metaclass", "from baselines.vllm.kimi_k3.decode import StepReg\n"
     "StepReg('X', tuple(bases), {})  # <-\n"),
    ("own-metaclass-in-this-file", "class Reg(type):\n    pass\nReg('X', tuple(bases), {})  # <-\n"),
    ("own-metaclass-of-an-own-metaclass",
     "import abc\nclass R1(abc.ABCMeta):\n    pass\nclass R2(R1):\n    pass\n"
     "R2('X', tuple(bases), {})  # <-\n"),
    # where the definition cannot be read, the name still decides (fail closed)
    ("unreadable-meta-named",
     "from vllm.nothere import ThingMeta\nThingMeta('X', tuple(bases), {})  # <-\n"),
    ("meta-named-with-an-unreadable-base",
     "from vllm.reg import OddMeta\nOddMeta('X', tuple(bases), {})  # <-\n"),
]
HONEST: list[tuple[str, str]] = [
    ("engine-dataclass-named-meta",
     "from vllm.reg import StepMeta\nStepMeta(a=1, b=2, c=3)\nStepMeta(1, 2, 3)\n"),
    ("engine-plain-subclass-named-meta", "from vllm.reg import PlainMeta\nPlainMeta(a=1, b=2, c=3)\n"),
    ("baseline-dataclass-named-meta", "from baselines.vllm.kimi_k3.decode import DecodeMeta\n"
     "DecodeMeta(batch=1, max_context=2, tp=1)\n"),
    ("own-dataclass-named-meta", "from dataclasses import dataclass\n@dataclass\nclass LocalMeta:\n"
     "    a: int\n    b: int\n    c: int\nLocalMeta(1, 2, 3)\n"),
    ("own-metaclass-with-literal-own-bases", "class Reg(type):\n    pass\nclass Mine:\n    pass\n"
     "Reg('X', (Mine,), {})\n"),
]


@pytest.mark.parametrize("src", [a[1] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_metaclass_call_is_an_error(src: str, reader: EngineSignatures) -> None:
    want = marked_lines(HEAD + src)
    assert want, "an attack marks its lines"
    assert set(want) <= set(error_lines(scan(src, reader)))


@pytest.mark.parametrize("src", [a[1] for a in HONEST], ids=[a[0] for a in HONEST])
def test_plain_class_named_meta_is_clean(src: str, reader: EngineSignatures) -> None:
    assert [e for e in scan(src, reader) if e.code == "FT146"] == []


def test_the_reader_tells_metaclasses_from_plain_classes(reader: EngineSignatures) -> None:
    assert reader.metaclass("vllm.reg.SubReg") is True
    assert reader.metaclass("vllm.again.Renamed") is True
    assert reader.metaclass("vllm.reg.StepMeta") is False
    assert reader.metaclass("baselines.vllm.kimi_k3.decode.DecodeMeta") is False
    assert reader.metaclass("vllm.reg.OddMeta") is None  # a base it cannot read
    assert reader.metaclass("vllm.nothere.X") is None
    # the baselines are read for this question only: the engine's method signatures do not reach them
    assert reader.method_params("baselines.vllm.kimi_k3.decode.DecodeMeta", "__init__") is None


def test_without_a_reader_the_name_decides() -> None:
    src = ("from vllm.reg import StepMeta, Reg\nStepMeta('X', tuple(bases), {})  # <-\n"
           "Reg('X', tuple(bases), {})\n")
    found = find_escapes(HEAD + src, MODEL_FILE, OWN)
    assert error_lines(found) == marked_lines(HEAD + src)


def test_contribution_mode_reads_the_engine_baselines(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # the reference contribution's case (verify kimi_k3 warned 3 times): the baseline's DecodeMeta, a
    # frozen dataclass, called with three keywords; a `*Meta` the baselines do not define stays an error
    from fasttrack.policy import load_policy
    from tests.test_escapes import POLICY
    from tests.test_escapes_hostile_flow import ENGINE as FLOW_ENGINE
    from tests.test_escapes_own_bases import contribution, ft_errors, write

    monkeypatch.setenv("FASTTRACK_ENGINE_TREE", str(write(tmp_path / "engine", FLOW_ENGINE)))
    impl = ("from baselines.vllm.kimi_k3.decode import DecodeMeta\n"
            "from baselines.vllm.kimi_k3 import nothere\n"
            "bases = [object]\nDecodeMeta(batch=1, max_context=2, tp=1)\n"
            "nothere.XMeta('X', tuple(bases), {})  # <-\n")
    files = {"kernels/kimi_k3/__init__.py": "", "kernels/kimi_k3/impl.py": impl}
    errors = ft_errors(contribution(tmp_path, load_policy(POLICY), files))
    assert [line for code, path, line in errors if path == "kernels/kimi_k3/impl.py"] == marked_lines(impl)
