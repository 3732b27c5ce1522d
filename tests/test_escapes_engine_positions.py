"""Issue 15 follow-up: a method overriding an engine class's method gets the engine's objects by position,
whatever its parameters are called. The engine calls `impl.forward(layer, q, k, v, kv_cache,
attn_metadata)` positionally, so renaming `attn_metadata` to `m` (and dropping the annotation) must not
make a write through it the model's own. The engine's signatures are read from its source on disk
(fasttrack.confinement.engine_signatures); an engine base that cannot be read fails closed."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fasttrack.confinement.engine_signatures import EngineSignatures, signatures_for
from fasttrack.confinement.escapes import Escape, find_escapes

MODEL_FILE = "vllm/models/kimi_k3/nvidia/attention.py"
OWN = {"vllm.models.kimi_k3"}

ENGINE = {
    "vllm/__init__.py": "",
    "vllm/v1/__init__.py": "",
    "vllm/v1/attention/__init__.py": "from vllm.v1.attention.backend import AttentionImpl as AttentionImpl\n",
    "vllm/v1/attention/backend.py": """
from abc import ABC
from typing import Generic, TypeVar
import torch
T = TypeVar("T")
class AttentionImplBase(ABC, Generic[T]):
    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output=None):
        raise NotImplementedError
class AttentionImpl(AttentionImplBase[T], Generic[T]):
    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping):
        pass
Alias = AttentionImpl
""",
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/layers/__init__.py": "",
    "vllm/model_executor/layers/quantization.py": """
import torch
class QuantizeMethodBase:
    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        return
class LinearBase(torch.nn.Module):
    def __init__(self, input_size, output_size, quant_config=None, prefix=""):
        super().__init__()
    def weight_loader(self, param, loaded_weight):
        param.data.copy_(loaded_weight)
""",
}


@pytest.fixture
def engine(tmp_path: Path) -> EngineSignatures:
    for rel, text in ENGINE.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return EngineSignatures(tmp_path)


def scan(src: str, engine: EngineSignatures) -> list[Escape]:
    return find_escapes(textwrap.dedent(src), MODEL_FILE, OWN, own_op_namespaces={"kimi_k3"},
                        signatures=engine.method_params)


def marked(src: str) -> list[int]:
    return [i for i, line in enumerate(textwrap.dedent(src).splitlines(), start=1) if "# <-" in line]


def error_lines(found: list[Escape]) -> list[int]:
    return sorted({e.line for e in found if e.severity == "error"})


ATTACKS: list[tuple[str, str]] = [
    ("renamed-attn-metadata", """
from vllm.v1.attention.backend import AttentionImpl
class K3Impl(AttentionImpl):
    def forward(self, layer, q, k, v, kv_cache, m, output=None):
        m.num_actual_tokens = 0  # <-
"""),
    ("renamed-through-a-re-export-and-an-own-base", """
from vllm.v1.attention import AttentionImpl
class _Mid(AttentionImpl):
    pass
class K3Impl(_Mid):
    def forward(self, a, b, c, d, e, f, g=None):
        f.slot_mapping.zero_()  # <-
"""),
    ("renamed-config-of-an-engine-init", """
from vllm.model_executor.layers.quantization import LinearBase
class K3Linear(LinearBase):
    def __init__(self, i, o, qc=None, prefix=""):
        super().__init__(i, o, qc, prefix)
        qc.packed_modules_mapping = {}  # <-
"""),
    ("alias-of-the-renamed-parameter", """
from vllm.v1.attention.backend import Alias
class K3Impl(Alias):
    def forward(self, layer, q, k, v, kv_cache, md, output=None):
        meta = md
        setattr(meta, "max_seq_len", 1)  # <-
"""),
    ("unreadable-engine-base-fails-closed", """
from vllm.v1.attention.missing import Hidden
class K3(Hidden):
    def forward(self, x):
        x.flag = True  # <-
"""),
]


@pytest.mark.parametrize("source", [a[1] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_attack_is_an_error(source: str, engine: EngineSignatures) -> None:
    assert error_lines(scan(source, engine)) == marked(source)


def test_the_message_names_the_engine_position(engine: EngineSignatures) -> None:
    found = scan(ATTACKS[0][1], engine)
    assert any("position of `attn_metadata`" in e.message and "AttentionImpl.forward" in e.message
               for e in found)


HONEST: list[tuple[str, str]] = [
    ("override-writes-its-own-output-and-layer", """
from vllm.v1.attention.backend import AttentionImpl
class K3Impl(AttentionImpl):
    def forward(self, layer, q, k, v, kv_cache, attn_metadata, out=None):
        out.copy_(q)
        self.scale = 1.0
        n = attn_metadata.num_actual_tokens
        return n
"""),
    ("quant-method-replaces-its-layer-weights", """
from vllm.model_executor.layers.quantization import QuantizeMethodBase
class K3Method(QuantizeMethodBase):
    def process_weights_after_loading(self, x) -> None:
        x.weight = None
"""),
    ("weight-loader-loads-its-parameter", """
from vllm.model_executor.layers.quantization import LinearBase
class K3Linear(LinearBase):
    def weight_loader(self, p, w):
        p.data.copy_(w)
"""),
    ("a-new-method-depends-on-its-callers", """
from vllm.v1.attention.backend import AttentionImpl
class K3Impl(AttentionImpl):
    def _scratch(self, a, b, c, d, e, buf):
        buf.zero_()
"""),
    ("a-staticmethod-is-judged-by-name", """
from vllm.v1.attention.backend import AttentionImpl
class K3Impl(AttentionImpl):
    @staticmethod
    def forward(a, b, c, d, e, f, g=None):
        g.zero_()
"""),
]


@pytest.mark.parametrize("source", [h[1] for h in HONEST], ids=[h[0] for h in HONEST])
def test_honest_code_stays_clean(source: str, engine: EngineSignatures) -> None:
    assert [e for e in scan(source, engine) if e.severity == "error"] == []


def test_signatures_follow_bases_re_exports_and_aliases(engine: EngineSignatures) -> None:
    assert engine.method_params("vllm.v1.attention.AttentionImpl", "forward")[5] == "attn_metadata"  # type: ignore[index]
    assert engine.method_params("vllm.v1.attention.backend.Alias", "do_kv_cache_update") == (
        "layer", "key", "value", "kv_cache", "slot_mapping")
    assert engine.method_params("vllm.v1.attention.backend.AttentionImpl", "nope") == ()
    assert engine.method_params("vllm.v1.attention.backend.Missing", "forward") is None
    assert engine.method_params("torch.nn.Module", "forward") is None


def test_without_an_engine_tree_only_names_count(tmp_path: Path) -> None:
    assert signatures_for(tmp_path, "vllm", "vllm", "0.0.0-none") is None
    src = ATTACKS[0][1]
    assert error_lines(find_escapes(textwrap.dedent(src), MODEL_FILE, OWN)) == []
