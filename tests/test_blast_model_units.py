"""Model units from both layouts, and the architecture registry read statically."""

from __future__ import annotations

import marshal
from pathlib import Path

import pytest
from blast_fake_tree import make_policy, write_tree

from fasttrack.confinement.graph import build_module_graph
from fasttrack.confinement.model_units import (
    ModelUnit,
    RegistryError,
    UnitIndex,
    architectures_through,
    model_code_modules,
    read_registry,
)


@pytest.fixture
def units() -> UnitIndex:
    return UnitIndex(make_policy().models, "vllm")


ALPHA = ModelUnit("alpha", "package", "vllm.models.alpha", "vllm/models/alpha")


@pytest.mark.parametrize(("path", "expected"), [
    ("vllm/models/alpha/nvidia/ops.py", ALPHA),
    ("vllm/models/alpha/__init__.py", ALPHA),
    ("vllm/model_executor/models/gamma.py",
     ModelUnit("gamma", "legacy", "vllm.model_executor.models.gamma", "vllm/model_executor/models/gamma.py")),
    ("vllm/model_executor/models/multi/part.py",
     ModelUnit("multi", "legacy", "vllm.model_executor.models.multi", "vllm/model_executor/models/multi")),
    ("vllm/models/common/ops.py", None),          # a shared package
    ("vllm/models/__init__.py", None),
    ("vllm/model_executor/models/registry.py", None),  # legacy_shared
    ("vllm/model_executor/models/__init__.py", None),
    ("vllm/model_executor/layers/linear.py", None),
    ("vllm/model_executor/models/README.md", None),
])
def test_unit_of_path(units: UnitIndex, path: str, expected: ModelUnit | None) -> None:
    assert units.unit_of_path(path) == expected


def test_unit_of_module_without_a_path(units: UnitIndex) -> None:
    unit = units.unit_of_module("vllm.models.beta")
    assert unit is not None and unit.name == "beta"
    assert units.unit_of_module("vllm.models") is None


def test_registry_read_statically(tmp_path: Path) -> None:
    tree = write_tree(tmp_path)
    reg = read_registry(tree, make_policy().models, "vllm")
    assert reg.note is None
    assert [(e.architecture, e.module) for e in reg.entries] == [
        ("AlphaForCausalLM", "vllm.models.alpha"),
        ("BetaForCausalLM", "vllm.models.beta"),
        ("GammaForCausalLM", "vllm.model_executor.models.gamma"),
        ("GammaV2ForCausalLM", "vllm.model_executor.models.gamma"),
        ("DeltaForCausalLM", "vllm.model_executor.models.delta"),
    ]
    assert reg.by_module()["vllm.model_executor.models.gamma"] == ["GammaForCausalLM", "GammaV2ForCausalLM"]
    assert reg.entries[0].line == 2


def test_registry_cache_is_keyed_by_content_and_survives_corruption(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "t")
    layout = make_policy().models
    cache = tmp_path / "cache"
    plain = read_registry(tree, layout, "vllm")
    cold = read_registry(tree, layout, "vllm", cache_dir=cache)
    stored = list(cache.glob("registry-*.bin"))
    assert cold == plain and len(stored) == 1
    # A hit reads the stored entries, not the source: swap in a marker row under the same key and see it.
    key, _rows = marshal.loads(stored[0].read_bytes())
    stored[0].write_bytes(marshal.dumps((key, (("MarkerForCausalLM", "vllm.models.alpha", "M", 1, 1),))))
    hit = read_registry(tree, layout, "vllm", cache_dir=cache)
    assert [e.architecture for e in hit.entries] == ["MarkerForCausalLM"]
    stored[0].write_bytes(b"\x00garbage")  # corrupt: parsed again, rewritten
    assert read_registry(tree, layout, "vllm", cache_dir=cache) == plain
    assert read_registry(tree, layout, "vllm", cache_dir=cache) == plain
    # An edit is a miss: the new entry is seen, and a second file is written.
    reg = tree / "vllm/model_executor/models/registry.py"
    reg.write_text(reg.read_text().replace("DeltaForCausalLM", "EpsilonForCausalLM"))
    edited = read_registry(tree, layout, "vllm", cache_dir=cache)
    assert "EpsilonForCausalLM" in {e.architecture for e in edited.entries}
    assert "DeltaForCausalLM" not in {e.architecture for e in edited.entries}
    assert len(list(cache.glob("registry-*.bin"))) == 2
    # A broken registry is an error whether or not a cache is given (errors are never cached).
    reg.write_text("_X = {\n")
    with pytest.raises(RegistryError, match="cannot read the registry"):
        read_registry(tree, layout, "vllm", cache_dir=cache)


def test_registry_missing_or_broken(tmp_path: Path) -> None:
    policy = make_policy()
    assert read_registry(tmp_path, policy.models, "vllm").entries == ()
    assert "not in the tree" in (read_registry(tmp_path, policy.models, "vllm").note or "")
    reg = tmp_path / "vllm/model_executor/models/registry.py"
    reg.parent.mkdir(parents=True)
    reg.write_text("_X = {\n")
    with pytest.raises(RegistryError, match="cannot read the registry"):
        read_registry(tmp_path, policy.models, "vllm")


def test_architectures_run_through_model_code_only(tmp_path: Path, units: UnitIndex) -> None:
    tree = write_tree(tmp_path)
    g = build_module_graph(tree, "vllm", exclude_type_checking=True)
    by_module = read_registry(tree, make_policy().models, "vllm").by_module()
    code = model_code_modules(g, units)
    assert "vllm.model_executor.layers.linear" not in code and "vllm.models.alpha.kernels" in code
    allowed = code.__contains__
    # gamma.py serves its own two architectures and Delta's (delta imports gamma).
    assert architectures_through(g, ["vllm.model_executor.models.gamma"], allowed, by_module) == [
        "DeltaForCausalLM", "GammaForCausalLM", "GammaV2ForCausalLM"]
    # linear.py is shared: the walk starts there but steps only into model code (alpha, gamma, delta).
    assert architectures_through(g, ["vllm.model_executor.layers.linear"], allowed, by_module) == [
        "AlphaForCausalLM", "DeltaForCausalLM", "GammaForCausalLM", "GammaV2ForCausalLM"]
    # The walk never steps through shared code: the logger reaches models only via vllm.models.common
    # (shared), so no architecture is counted for it (by design: "through model code").
    assert architectures_through(g, ["vllm.logger"], allowed, by_module) == []
