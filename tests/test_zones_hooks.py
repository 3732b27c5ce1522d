"""Zones of the real vLLM policy, model inference, and the per-hunk hook checks on the registry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from git_helpers import GitRepo

from fasttrack.changes.git import cache_root, changes_between
from fasttrack.changes.model import Change, Hunk
from fasttrack.confinement.hooks import check_hook_change, splits_into_entries
from fasttrack.confinement.zones import classify, infer_model, model_of_path, models_touched
from fasttrack.errors import InputError
from fasttrack.policy import Policy, ZoneKind, load_policy
from fasttrack.verdict import ChangeStatus

POLICY_PATH = Path(__file__).resolve().parent.parent / "policies" / "vllm.toml"
REGISTRY = "vllm/model_executor/models/registry.py"
MakeRepo = Callable[..., GitRepo]


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(POLICY_PATH)


@pytest.mark.parametrize(("path", "zone", "kind"), [
    ("vllm/models/kimi_k3/nvidia/model.py", "model-local", ZoneKind.MODEL_LOCAL),
    ("tests/models/kimi_k3/test_x.py", "model-local", ZoneKind.MODEL_LOCAL),
    ("docs/models/kimi_k3.md", "model-local", ZoneKind.MODEL_LOCAL),
    ("vllm/models/deepseek_v4/model.py", "model-local (deepseek_v4)", ZoneKind.MODEL_LOCAL),
    ("vllm/models/common/ops/gemm_rs_ar.py", "shared-model-code", ZoneKind.INELIGIBLE),
    ("vllm/models/__init__.py", "shared-model-code", ZoneKind.INELIGIBLE),
    ("vllm/v1/core/sched/scheduler.py", "scheduler", ZoneKind.FORBIDDEN),
    ("vllm/v1/core/kv_cache_manager.py", "kv-cache-management", ZoneKind.FORBIDDEN),
    ("vllm/v1/kv_cache_interface.py", "kv-cache-management", ZoneKind.FORBIDDEN),
    ("vllm/v1/kv_offload/cpu/x.py", "kv-cache-management", ZoneKind.FORBIDDEN),
    ("vllm/v1/sample/sampler.py", "sampling", ZoneKind.FORBIDDEN),
    ("vllm/v1/worker/gpu/sample/penalties.py", "sampling", ZoneKind.FORBIDDEN),
    ("vllm/v1/worker/gpu/spec_decode/rejection_sampler.py", "sampling", ZoneKind.FORBIDDEN),
    ("vllm/v1/worker/gpu/model_runner.py", "input-preparation", ZoneKind.FORBIDDEN),
    ("vllm/v1/worker/gpu_input_batch.py", "input-preparation", ZoneKind.FORBIDDEN),
    ("vllm/model_executor/layers/fused_moe/layer.py", "shared-layers", ZoneKind.INELIGIBLE),
    ("vllm/model_executor/models/deepseek_v2.py", "shared-model-code", ZoneKind.INELIGIBLE),
    ("csrc/moe/topk.cu", "shared-kernels", ZoneKind.INELIGIBLE),
    ("setup.py", "build", ZoneKind.INELIGIBLE),
    ("vllm/models/kimi_k3/setup.py", "model-local", ZoneKind.MODEL_LOCAL),  # build patterns are anchored
    ("requirements/cuda.txt", "requirements", ZoneKind.INELIGIBLE),
    (".buildkite/test-pipeline.yaml", "ci-config", ZoneKind.INELIGIBLE),
    (".github/ISSUE_TEMPLATE/bug.yml", "ci-config", ZoneKind.INELIGIBLE),
    (".github/workflows/fasttrack.yml", "judge", ZoneKind.JUDGE),
    ("policies/vllm.toml", "judge", ZoneKind.JUDGE),
    ("policies/allowed_signers", "judge", ZoneKind.JUDGE),
    ("fasttrack/cli.py", "judge", ZoneKind.JUDGE),
    (REGISTRY, "architecture-registry", ZoneKind.HOOK),
    ("vllm/engine/arg_utils.py", "shared", ZoneKind.INELIGIBLE),
    ("README.md", "shared", ZoneKind.INELIGIBLE),
])
def test_classify_real_policy(policy: Policy, path: str, zone: str, kind: ZoneKind) -> None:
    z = classify(policy, path, "kimi_k3", known_models=("kimi_k3", "deepseek_v4", "deepseek_v41"))
    assert (z.name, z.kind) == (zone, kind)


def test_model_slot_matching(policy: Policy) -> None:
    known = ("deepseek_v4", "deepseek_v41", "kimi_k3")
    assert model_of_path(policy, "vllm/models/deepseek_v41/a.py", known) == "deepseek_v41"
    assert model_of_path(policy, "vllm/models/deepseek_v4/a.py", known) == "deepseek_v4"
    assert model_of_path(policy, "docs/models/deepseek_v41.md", known) == "deepseek_v41"
    assert model_of_path(policy, "vllm/models/common/a.py") is None  # a shared package, never a model
    assert model_of_path(policy, "tests/models/language/test_x.py", known) is None
    assert model_of_path(policy, "tests/models/language/test_x.py") == "language"  # unknown names count


def test_models_touched_and_inference(policy: Policy) -> None:
    one = ["vllm/models/kimi_k3/a.py", "tests/models/kimi_k3/t.py", "setup.py"]
    assert models_touched(policy, one) == ["kimi_k3"]
    assert infer_model(models_touched(policy, one)) == "kimi_k3"
    two = [*one, "vllm/models/step5/b.py"]
    assert models_touched(policy, two) == ["kimi_k3", "step5"]
    assert infer_model(models_touched(policy, two)) is None
    assert infer_model(models_touched(policy, ["setup.py"])) is None


def test_bad_hook_regex_is_an_input_error(tmp_path: Path) -> None:
    bad = tmp_path / "p.toml"
    extra = "\n[[hooks]]\nname = 'bad'\npath = 'x.py'\nallowed_lines = ['(']\n"
    bad.write_text(POLICY_PATH.read_text() + extra)
    with pytest.raises(InputError) as err:
        load_policy(bad)
    assert err.value.field == "hooks[1].allowed_lines" and "bad regex" in err.value.message


REAL_TREE = cache_root() / "vllm-0.33.0"


@pytest.mark.vllm_tree
@pytest.mark.skipif(not (REAL_TREE / "vllm").is_dir(), reason="the vLLM 0.33.0 tree is not extracted")
def test_policy_paths_exist_in_the_real_tree(policy: Policy) -> None:
    """Measured on vLLM 0.33.0 (3,231 .py files): every forbidden zone matches files there, every
    vllm/models/<name>/ package is a model, and the registry hook names a file that exists."""
    files = [p.relative_to(REAL_TREE).as_posix() for p in REAL_TREE.rglob("*.py")]
    for zone in policy.zones:
        if zone.kind == "forbidden":
            assert any(zone.spec.match_file(f) for f in files), zone.name
    models = sorted({f.split("/")[2] for f in files if f.startswith("vllm/models/") and f.count("/") >= 3})
    assert len(models) == 15  # 14 models + common
    touched = models_touched(policy, files)
    assert touched == [m for m in models if m != "common"]
    assert (REAL_TREE / REGISTRY).is_file()
    kinds = {classify(policy, f, "kimi_k3").kind for f in files if f.startswith("vllm/models/kimi_k3/")}
    assert kinds == {ZoneKind.MODEL_LOCAL}


# ------------------------------------------------------------------------------------------ hooks

REGISTRY_TEXT = '''_TEXT_GENERATION_MODELS = {
    "KimiLinearForCausalLM": (
        "vllm.models.kimi_k3",
        "KimiLinearForCausalLM",
    ),
    "DeepseekV4ForCausalLM": ("vllm.models.deepseek_v4", "DeepseekV4ForCausalLM"),
    "Lfm2ForCausalLM": ("lfm2", "Lfm2ForCausalLM"),
}
'''


def registry_change(make_repo: MakeRepo, new_text: str) -> tuple[Change, str]:
    repo = make_repo({REGISTRY: REGISTRY_TEXT})
    repo.commit({REGISTRY: new_text})
    (c,) = changes_between(repo.path, "HEAD~1", "HEAD")
    return c, new_text


def check(policy: Policy, change: Change, head: str | None, model: str | None = "kimi_k3") -> list[str]:
    return [v.reason for v in check_hook_change(policy.hooks[0], change, model, head_text=head,
                                                base_text=REGISTRY_TEXT)]


def test_hook_allows_one_line_and_four_line_entries(policy: Policy, make_repo: MakeRepo) -> None:
    new = REGISTRY_TEXT.replace('    "Lfm2',
                                '    "KimiK3ForCausalLM": ("vllm.models.kimi_k3", "KimiK3ForCausalLM"),\n'
                                '    "K3DSparkModel": (\n        "vllm.models.kimi_k3.nvidia.dspark_mla",\n'
                                '        "K3DSparkForCausalLM",\n    ),\n    "Lfm2')
    c, head = registry_change(make_repo, new)
    assert check(policy, c, head) == []


def test_hook_allows_removing_own_entry(policy: Policy, make_repo: MakeRepo) -> None:
    new = REGISTRY_TEXT.replace('    "KimiLinearForCausalLM": (\n        "vllm.models.kimi_k3",\n'
                                '        "KimiLinearForCausalLM",\n    ),\n', "")
    c, head = registry_change(make_repo, new)
    assert check(policy, c, head) == []


@pytest.mark.parametrize(("old", "new"), [
    ('    "Lfm2', '    "Foo": ("vllm.models.deepseek_v4", "Foo"),\n    "Lfm2'),  # another model's package
    ('    "Lfm2', '    # a comment\n    "Lfm2'),  # anything that is not an entry
    ('("lfm2", "Lfm2ForCausalLM")', '("vllm.models.kimi_k3", "Lfm2ForCausalLM")'),  # re-pointing another arch
    ('"vllm.models.deepseek_v4", "DeepseekV4ForCausalLM"', '"vllm.models.kimi_k3", "DeepseekV4ForCausalLM"'),
])
def test_hook_rejects_other_edits(policy: Policy, make_repo: MakeRepo, old: str, new: str) -> None:
    c, head = registry_change(make_repo, REGISTRY_TEXT.replace(old, new, 1))
    assert any("not an allowed entry" in r for r in check(policy, c, head))


def test_hook_rejects_shadowing_an_existing_key(policy: Policy, make_repo: MakeRepo) -> None:
    new = REGISTRY_TEXT.replace("}\n", '    "Lfm2ForCausalLM": ("vllm.models.kimi_k3", "KimiK3"),\n}\n')
    c, head = registry_change(make_repo, new)
    reasons = check(policy, c, head)
    assert len(reasons) == 1 and "shadows an existing entry" in reasons[0]


def test_hook_line_budget_status_and_model(policy: Policy, make_repo: MakeRepo) -> None:
    many = "".join(f'    "K{i}": ("vllm.models.kimi_k3", "K{i}"),\n' for i in range(17))
    c, head = registry_change(make_repo, REGISTRY_TEXT.replace('    "Lfm2', many + '    "Lfm2'))
    assert any("at most 16" in r for r in check(policy, c, head))
    assert check(policy, c, head, model=None)[0].startswith("the target model is not known")
    deleted = Change(status=ChangeStatus.DELETED, path=REGISTRY, old_mode="100644")
    assert "only be modified" in check(policy, deleted, None)[0]
    binary = Change(status=ChangeStatus.MODIFIED, path=REGISTRY, old_mode="100644", new_mode="100644",
                    binary=True)
    assert "binary" in check(policy, binary, None)[0]


def test_slid_block_is_recognised_only_when_the_file_confirms_it(policy: Policy) -> None:
    """A four-line entry inserted after another that ends the same way may be shown slid up by three lines;
    that placement is accepted when the head text proves it is the same edit, and the same lines placed so
    that they split another entry are not."""
    entry = ('    "KimiLinear2ForCausalLM": (\n        "vllm.models.kimi_k3",\n'
             '        "KimiLinearForCausalLM",\n    ),\n')
    head = REGISTRY_TEXT.replace('    "DeepseekV4', entry + '    "DeepseekV4')
    lines = head.split("\n")
    # As shown slid up: lines 3..6 (1-based) of the head.
    slid = Hunk(added=tuple((i, lines[i - 1]) for i in range(3, 7)), old_start=2, old_count=0, new_start=3,
                new_count=4)
    change = Change(status=ChangeStatus.MODIFIED, path=REGISTRY, old_mode="100644", new_mode="100644",
                    hunks=(slid,), added_lines=4, removed_lines=0)
    assert check(policy, change, head) == []
    # Without the file text the slid run cannot be proven equivalent: it is judged as shown, and fails.
    assert check(policy, change, None) != []
    # The same four lines inserted inside another entry (splitting it) are not a slide of anything.
    attack = REGISTRY_TEXT.replace('        "KimiLinearForCausalLM",\n    ),',
                                   '        "vllm.models.kimi_k3",\n        "KimiLinearForCausalLM",\n'
                                   '    ),\n    "X": (\n        "KimiLinearForCausalLM",\n    ),', 1)
    a_lines = attack.split("\n")
    hunk = Hunk(added=tuple((i, a_lines[i - 1]) for i in range(4, 8)), new_start=4, new_count=4)
    bad = Change(status=ChangeStatus.MODIFIED, path=REGISTRY, old_mode="100644", new_mode="100644",
                 hunks=(hunk,), added_lines=4, removed_lines=0)
    assert check(policy, bad, attack) != []


def test_splits_into_entries(policy: Policy) -> None:
    hook = policy.hooks[0]
    singles, blocks = hook.line_patterns("kimi_k3"), hook.block_patterns("kimi_k3")
    entry = ['    "A": (', '        "vllm.models.kimi_k3",', '        "A",', "    ),"]
    one = '    "B": ("vllm.models.kimi_k3.nvidia", "B"),'
    assert splits_into_entries([*entry, one, *entry], singles, blocks, 16)
    assert not splits_into_entries(entry[:3], singles, blocks, 16)
    assert not splits_into_entries([one.replace("kimi_k3", "kimi_k3x")], singles, blocks, 16)
    assert not splits_into_entries([one.replace("kimi_k3", "kimi_k")], singles, blocks, 16)
