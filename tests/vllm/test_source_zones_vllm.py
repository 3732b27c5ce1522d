"""Issue 15 items 3 and 5 on the real vLLM 0.33.0 tree: the text analysed is the code that runs, zones on
real locations, git metadata, new models and architecture-name capture in the real registry."""

from __future__ import annotations

import pytest
from vllm_repo_support import POLICY, VllmRepo

from fasttrack.commands.verify import VerifyOptions, run_verify
from fasttrack.findings import Severity
from fasttrack.verdict import Verdict

pytestmark = pytest.mark.vllm_tree

K3 = "vllm/models/kimi_k3"
REG = "vllm/model_executor/models/registry.py"
ANCHOR = '    "KimiK3MTPModel": ("vllm.models.kimi_k3", "KimiK3MTP"),\n'
NEW_CODES = {"FT135", "FT136", "FT137", "FT140", "FT141", "FT142", "FT143"}


def verify(repo: VllmRepo, head: str, model: str | None = "kimi_k3") -> Verdict:
    return run_verify(VerifyOptions(repo=repo.path, base=repo.base, head=head, model=model, policy=POLICY))


def new(v: Verdict) -> list[tuple[str, str | None]]:
    return sorted((f.code, f.path) for f in v.findings
                  if f.code in NEW_CODES and f.severity is Severity.ERROR)


def registry_with(repo: VllmRepo, line: str) -> str:
    text = repo.read(REG)
    assert ANCHOR in text
    return text.replace(ANCHOR, ANCHOR + line)


def test_registry_key_capturing_deepseek_checkpoints(vllm_repo: VllmRepo) -> None:
    line = '    "DeepseekV3ForConditionalGeneration": ("vllm.models.kimi_k3", "KimiK3MTP"),\n'
    v = verify(vllm_repo, vllm_repo.pr(write={REG: registry_with(vllm_repo, line)}))
    assert not [f for f in v.findings if f.code == "FT104"]  # the hook pattern alone lets it through
    (f,) = [f for f in v.findings if f.code == "FT142"]
    assert f.severity is Severity.ERROR and "'DeepseekV3ForConditionalGeneration'" in f.message
    assert "DeepseekV3ForCausalLM" in f.message and "deepseek_v2" in f.message


def test_registry_key_for_a_new_kimi_architecture_is_clean(vllm_repo: VllmRepo) -> None:
    line = '    "KimiK3ForCausalLM": ("vllm.models.kimi_k3", "KimiK3ForConditionalGeneration"),\n'
    v = verify(vllm_repo, vllm_repo.pr(write={REG: registry_with(vllm_repo, line)}))
    assert new(v) == []


def test_model_own_rejection_sampler_and_utf7_and_gitattributes(vllm_repo: VllmRepo) -> None:
    """One PR, three files: the model's own rejection_sampler_mtp.py is its code (no FT102), a UTF-7
    cookie is FT135 (and FT128: not analysable), a .gitattributes in the model directory FT140 + FT101."""
    head = vllm_repo.pr(write={
        f"{K3}/nvidia/rejection_sampler_mtp.py": "def accept(p):\n    return p > 0.5\n",
        f"{K3}/nvidia/fast.py": "# coding: utf-7\nimport os\n#+AAo-os.environ['X'] = '1'\n",
        f"{K3}/.gitattributes": "*.py -diff\n",
    })
    v = verify(vllm_repo, head)
    codes = {(f.code, f.path) for f in v.findings if f.severity is Severity.ERROR}
    assert not any(c == "FT102" for c, _ in codes)
    assert {("FT135", f"{K3}/nvidia/fast.py"), ("FT128", f"{K3}/nvidia/fast.py"),
            ("FT140", f"{K3}/.gitattributes"), ("FT101", f"{K3}/.gitattributes")} <= codes
    by_path = {cf.path: cf.zone for cf in v.changed_files}
    assert by_path[f"{K3}/nvidia/rejection_sampler_mtp.py"] == "model-local"


def test_new_model_directories(vllm_repo: VllmRepo) -> None:
    """A new directory under vllm/models/ is a model only with a registry entry: with one, FT141 (new models
    are not fast-track eligible); without, FT143 and its files are shared code."""
    line = '    "NovaForCausalLM": ("vllm.models.nova", "NovaForCausalLM"),\n'
    files = {"vllm/models/nova/__init__.py": "",
             "vllm/models/nova/model.py": "class NovaForCausalLM:\n    pass\n"}
    v = verify(vllm_repo, vllm_repo.pr(write={**files, REG: registry_with(vllm_repo, line)}), model=None)
    assert v.model == "nova" and new(v) == [("FT141", None)]
    v = verify(vllm_repo, vllm_repo.pr(write=files), model=None)
    assert v.model is None and new(v) == [("FT143", "vllm/models/nova/")]
