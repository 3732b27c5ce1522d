"""compute_blast_radius on the tiny fake `vllm` of blast_fake_tree (see its docstring for the layout)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from blast_fake_tree import make_policy, write_tree

from fasttrack.changes.model import Change, Hunk
from fasttrack.confinement.blast_radius import changed_module_paths, compute_blast_radius
from fasttrack.verdict import BlastRadius, ChangeStatus

M = ChangeStatus.MODIFIED


def radius(tree: Path, *changes: Change, model: str | None = "alpha", **blast: Any) -> BlastRadius:
    return compute_blast_radius(make_policy(**blast), tree, tuple(changes), model, cache_dir=None)


def mod(path: str) -> Change:
    return Change(status=M, path=path)


def strong(units: list[Any]) -> list[Any]:
    """The affected units that import (or name) the changed code, without those that run it only through
    a parent package's __init__ (issue 15: named in the radius, judged by FT114)."""
    return [u for u in units if u.link != "parent-package"]


def through_parent(units: list[Any]) -> list[str]:
    return sorted(getattr(u, "name", None) or u.module for u in units if u.link == "parent-package")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "head")


def test_model_local_change_reaches_nothing_outside(tree: Path) -> None:
    r = radius(tree, mod("vllm/models/alpha/private.py"))
    assert r.computed, r.note
    assert r.changed_modules == ["vllm.models.alpha.private"]
    assert strong(r.models) == [] and strong(r.shared) == []
    # alpha/__init__ imports .model, which imports private: whoever imports anything below alpha runs it.
    assert through_parent(r.models) == ["beta", "gamma"]
    beta = next(m for m in r.models if m.name == "beta")
    assert beta.witness is not None and beta.witness.chain == [
        "vllm.models.beta.model", "vllm.models.alpha.chain_b", "vllm.models.alpha", "vllm.models.alpha.model",
        "vllm.models.alpha.private"]
    assert beta.witness.links == ["imports", "parent-package", "imports", "imports"]
    assert beta.witness.lines == [2, None, 1, 3]
    assert r.acts_at_import == {"vllm.models.alpha.private": False}
    # private <- model <- alpha/__init__, which the registry names for AlphaForCausalLM.
    assert r.architectures == ["AlphaForCausalLM"]
    assert r.graph_modules is not None and r.graph_modules > 30


def test_legacy_model_importing_changed_kernel_is_affected_with_its_architectures(tree: Path) -> None:
    r = radius(tree, mod("vllm/models/alpha/kernels.py"))
    assert [(m.name, m.kind, m.link) for m in r.models] == [("gamma", "legacy", "imports"),
                                                           ("beta", "package", "parent-package")]
    gamma = r.models[0]
    assert gamma.witness is not None
    assert gamma.witness.chain == ["vllm.model_executor.models.gamma", "vllm.models.alpha.kernels"]
    assert gamma.witness.lines == [1]
    assert gamma.witness.function_level == [False]
    assert gamma.witness.changed_path == "vllm/models/alpha/kernels.py"
    assert gamma.witness.link == "imports" and gamma.witness.links == []
    # delta imports gamma, so DeltaForCausalLM runs through gamma's file too.
    assert gamma.architectures == ["DeltaForCausalLM", "GammaForCausalLM", "GammaV2ForCausalLM"]
    assert strong(r.shared) == []
    assert set(r.architectures) == {"AlphaForCausalLM", "GammaForCausalLM", "GammaV2ForCausalLM",
                                    "DeltaForCausalLM"}


def test_chain_through_the_model_root_reaches_another_package(tree: Path) -> None:
    r = radius(tree, mod("vllm/models/alpha/chain_a.py"))
    assert [m.name for m in strong(r.models)] == ["beta"] and through_parent(r.models) == ["gamma"]
    w = r.models[0].witness
    assert w is not None
    assert w.chain == ["vllm.models.beta.model", "vllm.models.alpha.chain_b", "vllm.models.alpha.chain_a"]
    assert w.lines == [2, 1]
    assert r.models[0].architectures == ["BetaForCausalLM"]


def test_shared_module_importing_model_code_is_affected_with_its_zone(tree: Path) -> None:
    r = radius(tree, mod("vllm/models/alpha/attn.py"))
    assert r.models == []
    assert [(s.module, s.zone, s.zone_kind, s.hub) for s in r.shared] == [
        ("vllm.model_executor.layers.fancy", "shared-layers", "ineligible", False)]


def test_lazy_import_followed_by_default_and_marked(tree: Path) -> None:
    r = radius(tree, mod("vllm/models/alpha/lazy_ops.py"))
    assert [s.module for s in r.shared] == ["vllm.model_executor.layers.lazy_user"]
    assert r.shared[0].witness.function_level == [True]
    assert r.shared[0].witness.lines == [7]


def test_lazy_import_ignored_when_the_policy_says_so(tree: Path) -> None:
    r = radius(tree, mod("vllm/models/alpha/lazy_ops.py"), include_lazy_imports=False)
    assert r.shared == [] and r.models == []
    assert "lazy (function-level) imports ignored" in (r.note or "")


def test_type_checking_imports_ignored_unless_configured(tree: Path) -> None:
    assert radius(tree, mod("vllm/models/alpha/typing_only.py")).shared == []
    r = radius(tree, mod("vllm/models/alpha/typing_only.py"), exclude_type_checking_imports=False)
    assert [s.module for s in r.shared] == ["vllm.model_executor.layers.typed"]


def test_hub_importing_model_code_is_listed_as_hub(tree: Path) -> None:
    r = radius(tree, mod("vllm/models/alpha/hubbed.py"))
    assert [(s.module, s.hub) for s in r.shared] == [("vllm.model_executor.warmup.hub", True)]


def test_changed_hub_counts_importers_without_listing_them(tree: Path) -> None:
    r = radius(tree, mod("vllm/model_executor/models/registry.py"))
    assert r.hubs_changed == {"vllm.model_executor.models.registry": 1}
    assert r.shared == [] and r.models == []
    assert r.naive_closure is not None and r.naive_closure >= 1


def test_changed_modules_are_not_listed_as_affected(tree: Path) -> None:
    r = radius(tree, mod("vllm/models/alpha/kernels.py"), mod("vllm/model_executor/models/gamma.py"))
    # gamma imports the changed kernel but is changed itself: walked from, not reported (delta imports it).
    assert [m.name for m in strong(r.models)] == ["delta"]


def test_shared_change_lists_its_first_importers_only(tree: Path) -> None:
    r = radius(tree, mod("vllm/model_executor/layers/linear.py"))
    # alpha.model is inside the root: walked through (alpha/__init__), not reported; beta imports a module
    # below alpha, so it runs alpha/__init__ -> alpha.model -> linear: named, through the parent package.
    assert sorted(m.name for m in strong(r.models)) == ["delta", "gamma"]
    assert through_parent(r.models) == ["beta"]
    assert strong(r.shared) == []
    assert r.models_total == 3


def test_witness_cap_keeps_counts(tree: Path) -> None:
    r = radius(tree, mod("vllm/model_executor/layers/linear.py"), max_witnesses=1)
    assert len(r.models) == 1 and r.models_total == 3


def test_deleted_module_uses_base_path_and_head_importers(tree: Path) -> None:
    (tree / "vllm/models/alpha/kernels.py").unlink()
    r = radius(tree, Change(status=ChangeStatus.DELETED, path="vllm/models/alpha/kernels.py"))
    assert r.computed, r.note
    assert r.removed_modules == ["vllm.models.alpha.kernels"]
    # gamma still imports it (a broken import now); alpha.model does too, and is inside the root.
    assert [m.name for m in strong(r.models)] == ["gamma"]
    assert r.models[0].witness is not None and r.models[0].witness.lines == [1]


def test_rename_counts_both_sides(tree: Path) -> None:
    linear = tree / "vllm/model_executor/layers/linear.py"
    linear.rename(tree / "vllm/model_executor/layers/linear2.py")
    ch = Change(status=ChangeStatus.RENAMED, path="vllm/model_executor/layers/linear2.py",
                old_path="vllm/model_executor/layers/linear.py")
    r = radius(tree, ch)
    assert r.changed_modules == ["vllm.model_executor.layers.linear", "vllm.model_executor.layers.linear2"]
    assert r.removed_modules == ["vllm.model_executor.layers.linear"]
    assert sorted(m.name for m in strong(r.models)) == ["delta", "gamma"]


def test_changed_modules_from_changes() -> None:
    present, removed = changed_module_paths((
        Change(status=ChangeStatus.RENAMED, path="vllm/a/new.py", old_path="vllm/a/old.py"),
        Change(status=ChangeStatus.COPIED, path="vllm/a/copy.py", old_path="vllm/a/src.py"),
        Change(status=ChangeStatus.DELETED, path="vllm/b/__init__.py"),
        Change(status=M, path="setup.py"),
        Change(status=M, path="vllm/c/data.json"),
    ), "vllm")
    assert present == {"vllm.a.new": "vllm/a/new.py", "vllm.a.copy": "vllm/a/copy.py"}
    assert removed == {"vllm.a.old": "vllm/a/old.py", "vllm.b": "vllm/b/__init__.py"}


def test_module_outside_grimps_graph_found_from_sources(tree: Path) -> None:
    r = radius(tree, mod("vllm/models/alpha/nsdir/hidden.py"))
    assert r.computed, r.note
    assert [s.module for s in r.shared] == ["vllm.model_executor.layers.ns_user"]
    assert "grimp does not see" in (r.note or "")


def test_without_a_target_model_each_change_walks_its_own_package(tree: Path) -> None:
    # Several models touched (no target): alpha's change still walks through alpha to reach beta, and beta's
    # own change reports what imports it outside beta (nothing here).
    r = radius(tree, mod("vllm/models/alpha/chain_a.py"), mod("vllm/models/beta/__init__.py"), model=None)
    assert [m.name for m in strong(r.models)] == ["beta"]
    assert r.models[0].witness is not None
    assert r.models[0].witness.chain[-1] == "vllm.models.alpha.chain_a"
    # A changed shared module has no root: its direct importers are the radius.
    r = radius(tree, mod("vllm/model_executor/layers/linear.py"), model=None)
    assert sorted(m.name for m in r.models) == ["alpha", "delta", "gamma"]


def test_no_python_change_needs_no_graph(tmp_path: Path) -> None:
    r = radius(tmp_path / "does-not-exist", mod("CMakeLists.txt"))
    assert r.computed and r.changed_modules == []


def test_fails_closed_on_a_syntax_error(tree: Path) -> None:
    (tree / "vllm/models/alpha/private.py").write_text("def broken(:\n")
    r = radius(tree, mod("vllm/models/alpha/private.py"))
    assert not r.computed
    assert "private.py" in (r.note or "") or "syntax" in (r.note or "").lower()


def test_fails_closed_without_the_package(tmp_path: Path) -> None:
    (tmp_path / "head").mkdir()
    r = radius(tmp_path / "head", mod("vllm/models/alpha/private.py"))
    assert not r.computed and "vllm/__init__.py is missing" in (r.note or "")


def test_copy_of_the_tree_gives_the_same_radius(tree: Path, tmp_path: Path) -> None:
    other = tmp_path / "copy"
    shutil.copytree(tree, other)
    a = radius(tree, mod("vllm/models/alpha/kernels.py"))
    b = radius(other, mod("vllm/models/alpha/kernels.py"))
    assert a.model_dump(exclude={"seconds", "note"}) == b.model_dump(exclude={"seconds", "note"})


def test_registry_edit_serves_the_architectures_it_adds(tree: Path) -> None:
    reg = tree / "vllm/model_executor/models/registry.py"
    lines = reg.read_text().splitlines(keepends=True)
    new = '    "AlphaV2ForCausalLM": ("vllm.models.alpha", "AlphaV2"),\n'
    lines.insert(5, new)  # becomes line 6
    reg.write_text("".join(lines))
    ch = Change(status=M, path="vllm/model_executor/models/registry.py", hunks=(Hunk(added=((6, new),)),))
    r = radius(tree, ch)
    assert r.architectures == ["AlphaV2ForCausalLM"]
    assert r.hubs_changed == {"vllm.model_executor.models.registry": 1}
