"""Issue 15 item 5: zones on real locations, git metadata files, new models and registry name capture.

Each attack with a failing case and an honest case; range-mode cases are real git repositories."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from git_helpers import GitRepo, Symlink

from fasttrack.commands.verify import VerifyOptions, build_context
from fasttrack.confinement.registry_names import captures, normalize_arch, read_registry
from fasttrack.confinement.zones import classify
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Finding, Severity
from fasttrack.policy import Policy, ZoneKind, ZoneSpec, load_policy
from fasttrack.rules import all_rules

pytestmark = pytest.mark.usefixtures("isolated_cache")

MakeRepo = Callable[..., GitRepo]
POLICY_PATH = Path(__file__).resolve().parent.parent / "policies" / "vllm.toml"
POLICY: Policy = load_policy(POLICY_PATH)
K3 = "vllm/models/kimi_k3"
REG = "vllm/model_executor/models/registry.py"
REGISTRY = '''_TEXT_GENERATION_MODELS = {
    "DeepseekV3ForCausalLM": ("deepseek_v2", "DeepseekV3ForCausalLM"),
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
}
_MULTIMODAL_MODELS = {
    "KimiK3ForConditionalGeneration": ("vllm.models.kimi_k3", "KimiK3ForConditionalGeneration"),
    "Step5ForCausalLM": ("vllm.models.step5", "Step5ForCausalLM"),
}
_VLLM_MODELS = {
    **_TEXT_GENERATION_MODELS,
    **_MULTIMODAL_MODELS,
}
'''
ANCHOR = '    "KimiK3ForConditionalGeneration": ("vllm.models.kimi_k3", "KimiK3ForConditionalGeneration"),\n'
ENGINE = {
    "vllm/__init__.py": "",
    "vllm/models/__init__.py": "",
    f"{K3}/__init__.py": "",
    f"{K3}/model.py": "class K3:\n    pass\n",
    "vllm/models/step5/__init__.py": "",
    "vllm/v1/__init__.py": "",
    "vllm/v1/sample/__init__.py": "",
    "vllm/v1/sample/sampler.py": "def sample():\n    return 0\n",
    "vllm/v1/sample/rejection_sampler.py": "def reject():\n    return 0\n",
    REG: REGISTRY,
}


def findings(repo: GitRepo, *codes: str, model: str | None = None) -> list[Finding]:
    ctx = build_context(VerifyOptions(repo=repo.path, base="HEAD~1", head="HEAD", policy=POLICY_PATH,
                                      model=model))
    return [f for r in all_rules() if r.code in codes for f in r.run(gather_facts(ctx))]


def with_entry(line: str) -> str:
    return REGISTRY.replace(ANCHOR, ANCHOR + line)


# ------------------------------------------------------------------------------------------------ zones


def test_the_models_own_file_named_like_sampling_code_is_model_local() -> None:
    own = classify(POLICY, f"{K3}/nvidia/rejection_sampler_mtp.py", "kimi_k3")
    assert own.kind is ZoneKind.MODEL_LOCAL and own.model == "kimi_k3"
    shared = classify(POLICY, "vllm/v1/spec_decode/rejection_sampler_mtp.py", "kimi_k3")
    assert shared.kind is ZoneKind.FORBIDDEN and shared.name == "sampling"


def test_judge_zones_still_win_over_the_model_root() -> None:
    judge = ZoneSpec(name="owners", kind="judge", patterns=["/**/CODEOWNERS"])
    policy = POLICY.model_copy(update={"zones": [judge, *POLICY.zones]})
    assert classify(policy, f"{K3}/CODEOWNERS", "kimi_k3").kind is ZoneKind.JUDGE


@pytest.mark.parametrize("name", [".gitattributes", ".gitmodules", ".mailmap", ".lfsconfig"])
def test_git_metadata_in_the_model_directory_is_repo_config(name: str) -> None:
    zone = classify(POLICY, f"{K3}/nvidia/{name}", "kimi_k3")
    assert (zone.name, zone.kind) == ("repo-config", ZoneKind.INELIGIBLE)


def test_gitattributes_in_the_model_directory_fails_the_pr(make_repo: MakeRepo) -> None:
    repo = make_repo(ENGINE)
    repo.commit({f"{K3}/.gitattributes": "*.so diff\n", f"{K3}/model.py": "class K3:\n    x = 1\n"})
    got = {(f.code, f.path) for f in findings(repo, "FT140", "FT101")}
    assert got == {("FT140", f"{K3}/.gitattributes"), ("FT101", f"{K3}/.gitattributes")}


def test_honest_model_files_are_no_git_metadata(make_repo: MakeRepo) -> None:
    repo = make_repo(ENGINE)
    repo.commit({f"{K3}/nvidia/rejection_sampler_mtp.py": "def r():\n    return 1\n",
                 f"{K3}/.gitignore": "*.log\n"})
    assert findings(repo, "FT140", "FT101", "FT102") == []


def test_symlink_into_sampling_is_classified_by_its_target(make_repo: MakeRepo) -> None:
    repo = make_repo(ENGINE)
    repo.commit({f"{K3}/d": Symlink("../../v1"), f"{K3}/s.py": Symlink("d/sample/sampler.py")})
    got = findings(repo, "FT102")
    assert [f.path for f in got] == [f"{K3}/s.py"] and "sampling" in got[0].message
    # FT105 no longer trusts the string normalisation (d/sample/sampler.py looks model-local)
    links = {f.path: f.message for f in findings(repo, "FT105")}
    assert "really vllm/v1/sample/sampler.py" in links[f"{K3}/s.py"]


def test_symlink_inside_the_model_keeps_the_model_zone(make_repo: MakeRepo) -> None:
    repo = make_repo(ENGINE)
    repo.commit({f"{K3}/fast.py": Symlink("model.py")})
    assert findings(repo, "FT102", "FT101", "FT105") == []


# ------------------------------------------------------------------------------------------- new models


def test_new_directory_the_registry_maps_is_a_new_model(make_repo: MakeRepo) -> None:
    repo = make_repo(ENGINE)
    repo.commit({"vllm/models/nova/__init__.py": "", "vllm/models/nova/model.py": "class N:\n    pass\n",
                 REG: with_entry('    "NovaForCausalLM": ("vllm.models.nova", "NovaForCausalLM"),\n')})
    got = findings(repo, "FT141", "FT143")
    assert [(f.code, f.severity) for f in got] == [("FT141", Severity.ERROR)]
    assert "nova" in got[0].message


def test_new_models_eligible_makes_it_an_info(make_repo: MakeRepo, tmp_path: Path) -> None:
    text = POLICY_PATH.read_text().replace('registry = "vllm/model_executor/models/registry.py"',
                                           'registry = "vllm/model_executor/models/registry.py"\n'
                                           'new_models_eligible = true')
    policy = tmp_path / "p.toml"
    policy.write_text(text)
    repo = make_repo(ENGINE)
    repo.commit({"vllm/models/nova/model.py": "class N:\n    pass\n",
                 REG: with_entry('    "NovaForCausalLM": ("vllm.models.nova", "NovaForCausalLM"),\n')})
    ctx = build_context(VerifyOptions(repo=repo.path, base="HEAD~1", head="HEAD", policy=policy))
    (rule,) = [r for r in all_rules() if r.code == "FT141"]
    assert [f.severity for f in rule.run(gather_facts(ctx))] == [Severity.INFO]


def test_new_directory_without_a_registry_entry_is_not_a_model(make_repo: MakeRepo) -> None:
    repo = make_repo(ENGINE)
    repo.commit({"vllm/models/nova/model.py": "class N:\n    pass\n"})
    ctx = build_context(VerifyOptions(repo=repo.path, base="HEAD~1", head="HEAD", policy=POLICY_PATH))
    assert ctx.model is None and "nova" not in ctx.known_models
    facts = gather_facts(ctx)
    got = {(f.code, f.path) for r in all_rules() if r.code in ("FT141", "FT143", "FT101")
           for f in r.run(facts)}
    assert got == {("FT143", "vllm/models/nova/"), ("FT101", "vllm/models/nova/model.py")}


def test_existing_model_directory_is_no_new_model(make_repo: MakeRepo) -> None:
    repo = make_repo(ENGINE)
    repo.commit({f"{K3}/fast.py": "x = 1\n"})
    assert findings(repo, "FT141", "FT143") == []


# ------------------------------------------------------------------------------ architecture-name capture


def test_registry_reader_follows_vllm_models_merge_order() -> None:
    models = read_registry(REGISTRY)
    assert models["LlamaForCausalLM"] == "vllm.model_executor.models.llama"
    assert models["KimiK3ForConditionalGeneration"] == "vllm.models.kimi_k3"


@pytest.mark.parametrize(("arch", "key"), [
    ("LlamaForCausalLM", "LlamaForCausalLM"),
    ("LlamaForConditionalGeneration", "LlamaForCausalLM"),
    ("LlamaModel", "LlamaForCausalLM"),
    ("KimiK3ForCausalLM", "KimiK3ForConditionalGeneration"),  # ForCausalLM -> ForConditionalGeneration
    ("llamaForCausalLM", None),  # no case folding
    ("Unknown", None),
])
def test_normalize_arch_mirrors_vllm(arch: str, key: str | None) -> None:
    assert normalize_arch(arch, read_registry(REGISTRY)) == key


def test_pooling_runner_only_matches_pooling_suffixes() -> None:
    models = read_registry(REGISTRY)
    assert normalize_arch("LlamaChatModel", models, "pooling", "embed") is None
    assert normalize_arch("LlamaChatModel", models, "generate", "none") == "LlamaForCausalLM"


def test_new_key_that_captures_another_models_checkpoints_is_an_error(make_repo: MakeRepo) -> None:
    repo = make_repo(ENGINE)
    line = ('    "DeepseekV3ForConditionalGeneration": ("vllm.models.kimi_k3", '
            '"KimiK3ForConditionalGeneration"),\n')
    repo.commit({REG: with_entry(line), f"{K3}/model.py": "class K3:\n    x = 1\n"})
    assert findings(repo, "FT104") == []  # the hook's line pattern allows any key name
    got = findings(repo, "FT142")
    assert len(got) == 1 and got[0].severity is Severity.ERROR
    assert "'DeepseekV3ForConditionalGeneration'" in got[0].message
    assert "DeepseekV3ForCausalLM" in got[0].message and got[0].line == 7


def test_suffix_variant_of_another_model_is_captured() -> None:
    base = read_registry(REGISTRY)
    head = {**base, "StepFiveChatModel": "vllm.models.kimi_k3", "Step5ChatModel": "vllm.models.kimi_k3"}
    got = captures(base, head, "vllm.models.kimi_k3")
    assert [(c.architecture, c.old_key) for c in got] == [("Step5ChatModel", "Step5ForCausalLM")]


def test_new_architecture_of_this_model_stays_clean(make_repo: MakeRepo) -> None:
    repo = make_repo(ENGINE)
    line = '    "KimiK3ForCausalLM": ("vllm.models.kimi_k3", "KimiK3ForConditionalGeneration"),\n'
    repo.commit({REG: with_entry(line), f"{K3}/model.py": "class K3:\n    x = 1\n"})
    assert findings(repo, "FT142", "FT104", "FT141", "FT143") == []


def test_draft_name_of_another_model_is_captured_and_own_draft_is_clean() -> None:
    """eagle.py names a draft `Eagle3{arch}`: an Eagle3 key over DeepSeek's architecture is DeepSeek's draft,
    even though no key served that name before; an Eagle3 key over kimi_k3's own architecture is clean."""
    base = read_registry(REGISTRY)
    head = {**base, "Eagle3DeepseekV3ForCausalLM": "vllm.models.kimi_k3",
            "Eagle3KimiK3ForConditionalGeneration": "vllm.models.kimi_k3"}
    got = captures(base, head, "vllm.models.kimi_k3")
    assert [(c.architecture, c.old_key, c.draft) for c in got] == [
        ("Eagle3DeepseekV3ForCausalLM", "DeepseekV3ForCausalLM", True)]


def test_contribution_for_a_model_the_engine_lacks_is_a_new_model(make_repo: MakeRepo,
                                                                   tmp_path: Path) -> None:
    from test_source_text import CONTRIB_MANIFEST

    engine = tmp_path / "engine-tree"
    for rel, text in ENGINE.items():
        (engine / rel).parent.mkdir(parents=True, exist_ok=True)
        (engine / rel).write_text(text)
    for model, expected in (("kimi_k3", []), ("nova", [("FT141", Severity.ERROR)])):
        manifest = CONTRIB_MANIFEST.replace("kimi_k3", model)
        files = {f"kernels/{model}/fasttrack.toml": manifest, f"kernels/{model}/layer.py": "x = 1\n"}
        repo = make_repo(files, name=f"contrib-{model}")
        ctx = build_context(VerifyOptions(repo=repo.path, policy=POLICY_PATH, engine_tree=engine,
                                          contribution=repo.path / f"kernels/{model}"))
        (rule,) = [r for r in all_rules() if r.code == "FT141"]
        assert [(f.code, f.severity) for f in rule.run(gather_facts(ctx))] == expected
