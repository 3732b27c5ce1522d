"""FT110-FT113 on radii computed from the fake tree: a case that passes and one that fails for each rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from blast_fake_tree import make_policy, write_tree

from fasttrack.changes.model import Change
from fasttrack.confinement.blast_radius import compute_blast_radius
from fasttrack.context import Context
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Finding, Severity
from fasttrack.rules import all_rules
from fasttrack.rules.blast import catalogue, chain_text
from fasttrack.verdict import BlastRadius, ChangeStatus, Witness

RULES = {r.code: r for r in catalogue.rules}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tree(tmp_path_factory.mktemp("blast-rules") / "head")


def ctx_for(tree: Path, *paths: str, model: str | None = "alpha", **blast: Any) -> Context:
    policy = make_policy(**blast)
    changes = tuple(Change(status=ChangeStatus.MODIFIED, path=p) for p in paths)
    radius = compute_blast_radius(policy, tree, changes, model, cache_dir=None)
    return Context(policy=policy, policy_path=Path("policy.toml"), mode="range", head_dir=tree,
                   changes=changes, model=model, blast_radius=radius)


def run(code: str, ctx: Context) -> list[Finding]:
    return RULES[code].run(gather_facts(ctx))


def test_codes_registered_with_docs() -> None:
    codes = {r.code: r for r in all_rules()}
    for code in ("FT110", "FT111", "FT112", "FT113"):
        assert code in codes and codes[code].summary and len(codes[code].doc) > 80


def test_ft110_passes_for_a_model_local_change(tree: Path) -> None:
    assert run("FT110", ctx_for(tree, "vllm/models/alpha/private.py")) == []


def test_ft110_fails_when_a_legacy_model_imports_the_change(tree: Path) -> None:
    found = run("FT110", ctx_for(tree, "vllm/models/alpha/kernels.py"))
    assert len(found) == 1
    f = found[0]
    assert f.severity is Severity.ERROR and f.path == "vllm/models/alpha/kernels.py"
    assert "legacy model file gamma" in f.message
    assert "vllm.model_executor.models.gamma:1 -> vllm.models.alpha.kernels" in f.message
    assert "GammaForCausalLM" in f.message and "DeltaForCausalLM" in f.message
    assert f.fix and "gamma" in f.fix


def test_ft110_fails_through_a_chain_into_another_package(tree: Path) -> None:
    found = run("FT110", ctx_for(tree, "vllm/models/alpha/chain_a.py"))
    assert [f.path for f in found] == ["vllm/models/alpha/chain_a.py"]
    msg = found[0].message
    assert "model package beta (vllm/models/beta/model.py) reaches vllm.models.alpha.chain_a" in msg
    assert "vllm.models.beta.model:2 -> vllm.models.alpha.chain_b:1 -> vllm.models.alpha.chain_a" in \
        found[0].message


def test_ft110_aggregates_a_shared_change_and_counts_the_unlisted(tree: Path) -> None:
    found = run("FT110", ctx_for(tree, "vllm/model_executor/layers/linear.py", max_witnesses=1))
    assert len(found) == 2
    assert found[0].path == "vllm/model_executor/layers/linear.py"
    assert "outside alpha's root and 1 other model unit(s) import it" in found[0].message
    assert "1 more affected model unit(s) are not listed" in found[1].message


def test_ft111_passes_when_only_a_model_imports_the_change(tree: Path) -> None:
    assert run("FT111", ctx_for(tree, "vllm/models/alpha/kernels.py")) == []


def test_ft111_fails_when_shared_code_imports_changed_model_code(tree: Path) -> None:
    found = run("FT111", ctx_for(tree, "vllm/models/alpha/attn.py"))
    assert len(found) == 1
    assert found[0].path == "vllm/models/alpha/attn.py"
    assert "shared module vllm.model_executor.layers.fancy (shared-layers) imports" in found[0].message


def test_ft111_marks_lazy_imports_and_respects_the_policy(tree: Path) -> None:
    found = run("FT111", ctx_for(tree, "vllm/models/alpha/lazy_ops.py"))
    assert len(found) == 1 and "imports inside a function" in found[0].message
    assert "(in a function)" in found[0].message
    assert run("FT111", ctx_for(tree, "vllm/models/alpha/lazy_ops.py", include_lazy_imports=False)) == []


def test_ft111_skips_hubs_and_shared_changes(tree: Path) -> None:
    assert run("FT111", ctx_for(tree, "vllm/models/alpha/hubbed.py")) == []
    # Shared code changed: the zone rules flag the path; FT111 is about model code leaking into shared code.
    ctx = ctx_for(tree, "vllm/models/common/ops.py")
    # beta imports it; gamma imports alpha.kernels, so it runs alpha/__init__ -> alpha.model -> ops
    assert ctx.blast_radius.models_total == 2 and ctx.blast_radius.models_through_parent == 1
    assert run("FT111", ctx) == []


def test_ft112_summarises(tree: Path) -> None:
    found = run("FT112", ctx_for(tree, "vllm/models/alpha/kernels.py"))
    assert len(found) == 1 and found[0].severity is Severity.INFO
    msg = found[0].message
    # gamma imports kernels; beta and three shared modules run it through alpha/__init__ (which imports
    # alpha.model, which imports kernels)
    assert "1 changed module(s) reach 2 other model unit(s) and 3 shared module(s) (1 of them hubs: " \
        "vllm.model_executor.warmup.hub); 4 of them only through a parent package's __init__" in msg
    assert "served by the changed code: AlphaForCausalLM" in msg
    assert "through other model units: BetaForCausalLM, DeltaForCausalLM, GammaForCausalLM, " \
        "GammaV2ForCausalLM" in msg
    assert "naive transitive closure would reach" in msg
    hub = run("FT112", ctx_for(tree, "vllm/models/alpha/hubbed.py"))[0].message
    assert "1 of them hubs: vllm.model_executor.warmup.hub" in hub


def test_ft112_silent_when_not_computed_and_ft113_fails_closed(tree: Path, tmp_path: Path) -> None:
    bad = write_tree(tmp_path / "bad", {"vllm/models/alpha/private.py": "def f(:\n"})
    ctx = ctx_for(bad, "vllm/models/alpha/private.py")
    assert run("FT112", ctx) == []
    found = run("FT113", ctx)
    assert len(found) == 1 and found[0].severity is Severity.ERROR
    assert "blast radius not computed" in found[0].message and "grimp could not build" in found[0].message


def test_ft113_passes_when_computed(tree: Path) -> None:
    assert run("FT113", ctx_for(tree, "vllm/models/alpha/private.py")) == []
    assert run("FT113", ctx_for(tree, "README.md")) == []


def test_chain_text_marks_lines_and_lazy_hops() -> None:
    w = Witness(chain=["a", "b", "c"], lines=[3, None], function_level=[True, False])
    assert chain_text(w) == "a:3 (in a function) -> b -> c"


def test_rules_do_nothing_on_a_default_radius_except_ft113(tree: Path) -> None:
    ctx = Context(policy=make_policy(), policy_path=Path("p.toml"), mode="range", head_dir=tree, changes=(),
                  model="alpha", blast_radius=BlastRadius())
    assert [run(c, ctx) for c in ("FT110", "FT111", "FT112")] == [[], [], []]
    assert [f.code for f in run("FT113", ctx)] == ["FT113"]
