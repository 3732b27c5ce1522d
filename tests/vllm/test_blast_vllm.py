"""The blast radius and the confinement findings on the real vLLM 0.33.0 tree, for synthetic PRs.

What the import graph of vLLM 0.33.0 looks like (grimp, TYPE_CHECKING imports excluded; measured with
``benchmarks/blast_radius_measurements.py``; see docs/blast-radius.md):

- 3,231 ``.py`` files; 3,154 modules in grimp's graph (77 files sit in directories without ``__init__.py``
  under ``vllm/third_party`` and ``vllm/vllm_flash_attn``); 19,420 imports (20,160 with TYPE_CHECKING blocks),
  1,432 of them only inside functions. The registry names 423 architectures over 275 modules, by string.
- Model packages that import each other: deepseek_v41 -> deepseek_v4 (14 imports), dots3_note ->
  deepseek_v32 (3), minimax_m3 -> deepseek_v41 (9, two lazy); deepseek_v32, deepseek_v4, deepseek_v41,
  glm5next, kimi_k3, muse_spark, qwen4_exp and step5 import the shared package vllm/models/common.
- Model packages imported by shared code (outside every model unit): deepseek_v4 (quantization, its config
  utils, deep_gemm_warmup, the sparse_swa MLA backend, llm_base_proposer, the V2 runner's eplb_utils and
  dspark utils), deepseek_v41 (quantization, config utils), kimi_k3 (kimi_gdn_linear_attn lazily,
  kimi_k3_triton_warmup lazily), minimax_m3 (mxfp8_native_moe lazily, minimax_m3_msa_warmup,
  llm_base_proposer lazily), qwen4_exp (qwen4_exp_qsa_warmup, lazily), step5 (step5_dsa_warmup, lazily).
  Legacy model files importing a model package: alice_ai -> kimi_k3.nvidia.ops.attn_res (module level).
  vllm/models/common is imported by vllm/model_executor/layers/mla.py.
- The naive transitive closure of kimi_k3's 133 modules reaches 2,301 of the 3,154 modules (1 without
  function-level imports); fasttrack's radius for all of them is 3 modules: alice_ai,
  kimi_gdn_linear_attn and kimi_k3_triton_warmup. 120 of kimi_k3's 133 modules reach nothing outside it.
- deepseek_v2.py (DeepseekV3ForCausalLM: DeepSeek V3 and Kimi K2) is imported by 14 other model units, among
  them vllm/models/deepseek_v32 (GlmMoeDsaForCausalLM: GLM-5); 32 registered architectures run through it.

Each PR is a commit on a base holding the real tree; `run_verify` judges the range (cold caches). Timings on
the 2-core development VM: 2.3-3.5 s a PR (materialising the head tree, then one grimp build), 4.3 s of
session set-up, 45 s for the whole file when the machine is quiet (66-170 s with other jobs running).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from vllm_repo_support import POLICY, VllmRepo

from fasttrack.changes.model import Change
from fasttrack.commands.verify import VerifyOptions, run_verify
from fasttrack.confinement.blast_radius import compute_blast_radius
from fasttrack.confinement.graph import iter_package_files
from fasttrack.findings import Severity
from fasttrack.policy import load_policy
from fasttrack.rules.blast import catalogue as blast_catalogue
from fasttrack.rules.confinement import catalogue as confinement_catalogue
from fasttrack.rules.escapes import catalogue as escapes_catalogue
from fasttrack.verdict import ChangeStatus, Verdict

pytestmark = pytest.mark.vllm_tree

# Zones/hooks (FT10x), the blast radius (FT11x) and escapes (FT12x) are asserted exactly. Escapes scan whole
# changed files; those the base revision of a modified or renamed file already had are infos, not the PR's:
# FT125 on the torch op registration already in deepseek_v2.py (line 945), FT124 on the PluggableLayer
# registration in the renamed kimi_gdn_linear_attn (line 155), FT126 on the computed import_module in
# registry.py (base line 1137, 1138 after a one-line registry edit). Before the fix these were warnings on
# lines the PR never touched (FT126 at 1138 was already a warning, so it was not even marked).
CONFINEMENT_CODES = {r.code for c in (confinement_catalogue, blast_catalogue) for r in c.rules}
ESCAPE_CODES = {r.code for r in escapes_catalogue.rules}
KIMI_ARCHS = ["K3DSparkModel", "KimiK3ForConditionalGeneration", "KimiK3MTPModel", "KimiLinearForCausalLM"]
DECODE = "vllm/models/kimi_k3/nvidia/specialized_decode/runtime/decode.py"
ATTN_RES = "vllm/models/kimi_k3/nvidia/ops/attn_res.py"
TRITON_WARMUP = "vllm.model_executor.warmup.kimi_k3_triton_warmup"
KIMI_GDN = "vllm.model_executor.layers.mamba.gdn.kimi_gdn_linear_attn"


def verify(repo: VllmRepo, head: str, model: str | None = "kimi_k3") -> Verdict:
    return run_verify(VerifyOptions(repo=repo.path, base=repo.base, head=head, model=model, policy=POLICY))


def confinement(v: Verdict) -> list[tuple[str, str | None]]:
    """The FT10x/FT11x findings (zones, hooks, blast radius) as (code, path), in verdict order, without the
    FT114 infos (units that run the change only through a parent package's __init__: `through_parent`)."""
    return [(f.code, f.path) for f in v.findings if f.code in CONFINEMENT_CODES
            and not (f.code == "FT114" and f.severity is Severity.INFO)]


def through_parent(v: Verdict) -> list[str]:
    """What FT114 names (as infos): the units and shared modules reached only through a parent package."""
    return sorted(f.message.split(" runs ")[0].split(" (")[0].split(" ")[-1] for f in v.findings
                  if f.code == "FT114" and f.severity is Severity.INFO)


def strong(units: list[Any]) -> list[Any]:
    return [u for u in units if u.link != "parent-package"]


def escapes(v: Verdict) -> list[tuple[str, str | None, int | None]]:
    """The FT12x findings the PR is blamed for (errors and warnings)."""
    return [(f.code, f.path, f.line) for f in v.findings
            if f.code in ESCAPE_CODES and f.severity is not Severity.INFO]


def carried(v: Verdict) -> list[tuple[str, str | None, int | None]]:
    """The FT12x infos: escapes the base revision of a changed file already had."""
    found = [f for f in v.findings if f.code in ESCAPE_CODES and f.severity is Severity.INFO]
    assert all("already in the base revision" in f.message for f in found)
    return [(f.code, f.path, f.line) for f in found]


def message(v: Verdict, code: str) -> str:
    found = [f.message for f in v.findings if f.code == code]
    assert len(found) == 1, (code, found)
    return found[0]


def test_model_local_change(vllm_repo: VllmRepo) -> None:
    """A new kernel module in kimi_k3's specialized decode, wired into its decode runtime: nothing outside
    kimi_k3 imports either, so the radius is empty; it serves kimi_k3's four registered architectures."""
    head = vllm_repo.pr(
        append={DECODE: "\n\ndef _fused_decode_step(x):\n    return x\n"},
        write={"vllm/models/kimi_k3/nvidia/specialized_decode/fused_new.py":
               "from vllm.models.kimi_k3.nvidia.specialized_decode.runtime import decode\n\nSTEP = decode\n"})
    v = verify(vllm_repo, head, model=None)  # the model is inferred from the paths
    assert v.model == "kimi_k3"
    assert confinement(v) == [("FT112", None)] and escapes(v) == []
    r = v.blast_radius
    assert r.computed and strong(r.models) == [] and strong(r.shared) == []
    # kimi_k3/__init__ imports nvidia.model, which imports the decode runtime (in a function): whoever
    # imports anything below kimi_k3 runs it. Named (FT114 infos), not blocked: decode only defines things.
    assert through_parent(v) == ["alice_ai", KIMI_GDN, TRITON_WARMUP]
    assert r.acts_at_import == {m: False for m in r.changed_modules}
    assert r.changed_modules == ["vllm.models.kimi_k3.nvidia.specialized_decode.fused_new",
                                 "vllm.models.kimi_k3.nvidia.specialized_decode.runtime.decode"]
    assert r.architectures == KIMI_ARCHS
    assert r.graph_modules == 3155 and r.graph_cached is False


def test_change_to_a_module_another_model_imports(vllm_repo: VllmRepo) -> None:
    """attn_res is imported at module level by the legacy model file alice_ai (line 69) and inside a
    function by the shared kimi_k3_triton_warmup (line 49): FT110 and FT111, each with its chain."""
    v = verify(vllm_repo, vllm_repo.pr(append={ATTN_RES: "\n\ndef _new_helper():\n    return 0\n"}))
    assert confinement(v) == [("FT110", ATTN_RES), ("FT111", ATTN_RES), ("FT112", None)]
    assert escapes(v) == []
    r = v.blast_radius
    assert [(m.name, m.kind, m.architectures) for m in strong(r.models)] == [
        ("alice_ai", "legacy", ["AliceAIForCausalLM"])]
    assert through_parent(v) == [KIMI_GDN]  # imports kimi_k3.amd...: runs kimi_k3/__init__ -> ... -> attn_res
    w = r.models[0].witness
    assert w is not None and w.chain == ["vllm.model_executor.models.alice_ai",
                                         "vllm.models.kimi_k3.nvidia.ops.attn_res"]
    assert w.lines == [69] and w.function_level == [False]
    assert [(s.module, s.zone, s.witness.lines, s.witness.function_level) for s in strong(r.shared)] == [
        (TRITON_WARMUP, "shared", [49], [True])]
    assert r.architectures == sorted(["AliceAIForCausalLM", *KIMI_ARCHS])
    assert r.naive_closure == 2352  # of 3,154: what a plain transitive closure would have reported
    assert "vllm.model_executor.models.alice_ai:69 -> vllm.models.kimi_k3.nvidia.ops.attn_res" in \
        message(v, "FT110")


def test_change_to_a_shared_model_file_that_serves_many_architectures(vllm_repo: VllmRepo) -> None:
    """deepseek_v2.py serves DeepseekV3ForCausalLM (DeepSeek V3, Kimi K2) and, through the deepseek_v32
    package that imports it, GlmMoeDsaForCausalLM (GLM-5): 14 other model units import it directly."""
    v = verify(vllm_repo, vllm_repo.pr(append={"vllm/model_executor/models/deepseek_v2.py": "\n_Z = 1\n"}))
    path = "vllm/model_executor/models/deepseek_v2.py"
    assert confinement(v) == [("FT101", path), ("FT110", path), ("FT112", None)]
    assert escapes(v) == [] and carried(v) == [("FT125", path, 945)]
    r = v.blast_radius
    assert r.models_total == 14 and r.shared_total == 0
    names = {m.name: m for m in r.models}
    assert {"deepseek_v32", "deepseek_mtp", "deepseek_v4", "dots3_note", "glm5next", "hy_v4"} <= set(names)
    assert "GlmMoeDsaForCausalLM" in names["deepseek_v32"].architectures
    assert {"DeepseekV3ForCausalLM", "GlmMoeDsaForCausalLM", "KimiK3ForConditionalGeneration"} \
        - set(r.architectures) == {"KimiK3ForConditionalGeneration"}
    assert len(r.architectures) == 32
    assert "14 other model unit(s) import it" in message(v, "FT110")


def test_change_to_the_shared_models_common_package(vllm_repo: VllmRepo) -> None:
    """vllm/models/common is shared (policy shared_packages): eight model packages import its
    sequence_parallel module; kimi_k3 is the target (walked through), the other seven are reported."""
    path = "vllm/models/common/ops/sequence_parallel.py"
    v = verify(vllm_repo, vllm_repo.pr(append={path: "\n_X = 1\n"}))
    assert confinement(v) == [("FT101", path), ("FT110", path), ("FT112", None)]
    assert escapes(v) == []
    assert sorted(m.name for m in strong(v.blast_radius.models)) == [
        "deepseek_v32", "deepseek_v4", "deepseek_v41", "glm5next", "muse_spark", "qwen4_exp", "step5"]
    # kimi_k3 (walked through) imports it from its own modules, which kimi_k3/__init__ imports: alice_ai
    # runs it through that parent package (no FT114 here: the changed file is shared code, FT101's)
    assert [m.name for m in v.blast_radius.models if m.link == "parent-package"] == ["alice_ai"]


def test_change_hidden_in_sampling_next_to_model_files(vllm_repo: VllmRepo) -> None:
    """A kimi_k3 edit plus one line in the sampler: FT102 names the sampling zone; the sampler's first
    importers are two other model units (FT110) and three shared modules (rejection sampler, the spec-decode
    proposer, the V1 model runner)."""
    sampler = "vllm/v1/sample/sampler.py"
    v = verify(vllm_repo, vllm_repo.pr(append={DECODE: "\n_Y = 1\n", sampler: "\n_GREEDY_FAST = True\n"}))
    assert confinement(v) == [("FT102", sampler), ("FT110", sampler), ("FT112", None)]
    assert escapes(v) == [] and carried(v) == []
    r = v.blast_radius
    assert sorted(m.name for m in strong(r.models)) == ["hy_v3_mtp", "hy_v4"]
    assert [(s.module, s.zone) for s in strong(r.shared)] == [
        ("vllm.v1.sample.rejection_sampler", "sampling"),
        ("vllm.v1.spec_decode.llm_base_proposer", "shared"),
        ("vllm.v1.worker.gpu_model_runner", "input-preparation")]


def test_change_hidden_in_kv_cache_code_next_to_model_files(vllm_repo: VllmRepo) -> None:
    """kv_cache_utils is imported by 28 shared modules (KV connectors, offloading, the core); no model."""
    kv = "vllm/v1/core/kv_cache_utils.py"
    v = verify(vllm_repo, vllm_repo.pr(append={DECODE: "\n_Y = 1\n", kv: "\n_BLOCK = 64\n"}))
    assert confinement(v) == [("FT102", kv), ("FT112", None)]
    assert escapes(v) == [] and carried(v) == []
    r = v.blast_radius
    # (the kimi_k3 edit reaches alice_ai and two shared modules through kimi_k3/__init__: FT114 infos)
    assert (r.models_total, r.models_through_parent, r.shared_total, r.shared_through_parent) == (1, 1, 30, 2)
    assert all(s.witness.chain[-1] == "vllm.v1.core.kv_cache_utils" for s in strong(r.shared))


def test_monkeypatch_from_a_model_file(vllm_repo: VllmRepo) -> None:
    """Patching the sampler from a kimi_k3 module: the import graph only shows kimi_k3 importing the
    sampler (the radius of the kimi_k3 module stays empty); FT120 (escapes) names the assignment's line."""
    patch = "\nimport vllm.v1.sample.sampler as _s\n_s.Sampler.forward = lambda self, *a, **k: None\n"
    base_lines = len(vllm_repo.read(DECODE).splitlines())
    v = verify(vllm_repo, vllm_repo.pr(append={DECODE: patch}))
    # The patch also makes decode act at import, new in this PR: the three units that run it through
    # kimi_k3/__init__ (alice_ai, kimi_gdn_linear_attn, the triton warm-up) are FT114 errors now.
    assert confinement(v) == [("FT114", DECODE)] * 3 + [("FT112", None)]
    assert escapes(v) == [("FT120", DECODE, base_lines + 3)]
    r = v.blast_radius
    assert r.computed and strong(r.models) == [] and strong(r.shared) == [] and r.architectures == KIMI_ARCHS
    assert r.acts_at_import == {"vllm.models.kimi_k3.nvidia.specialized_decode.runtime.decode": True}


def test_renamed_shared_file(vllm_repo: VllmRepo) -> None:
    """Renaming kimi_gdn_linear_attn.py: both sides count (FT101 twice); the old module is gone from the
    head, so its importers come from the sources that still import it: alice_ai (line 29) and three
    kimi_k3 modules (inside the root, walked through)."""
    old = "vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py"
    new = "vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn_v2.py"
    v = verify(vllm_repo, vllm_repo.pr(rename={old: new}))
    assert confinement(v) == [("FT101", old), ("FT101", new), ("FT110", old), ("FT112", None)]
    assert escapes(v) == [] and carried(v) == [("FT124", new, 155)]
    r = v.blast_radius
    assert r.removed_modules == ["vllm.model_executor.layers.mamba.gdn.kimi_gdn_linear_attn"]
    assert [(m.name, m.witness.lines if m.witness else None) for m in r.models] == [("alice_ai", [29])]
    assert r.architectures == sorted(["AliceAIForCausalLM", *KIMI_ARCHS])


def test_out_of_root_symlink(vllm_repo: VllmRepo) -> None:
    """A symlink in kimi_k3 pointing at the sampler: FT105, and FT102 since a symlink is classified by its
    real location on disk (sampling code); the link is a module nobody imports."""
    link = "vllm/models/kimi_k3/nvidia/ops/sampler_link.py"
    v = verify(vllm_repo, vllm_repo.pr(symlink={link: "../../../../v1/sample/sampler.py"}))
    assert confinement(v) == [("FT102", link), ("FT105", link), ("FT112", None)]
    assert escapes(v) == [] and carried(v) == []
    r = v.blast_radius
    assert r.changed_modules == ["vllm.models.kimi_k3.nvidia.ops.sampler_link"]
    assert r.models == [] and r.shared == []


REGISTRY_CARRIED = [("FT126", "vllm/model_executor/models/registry.py", 1138),
                    ("FT146", "vllm/model_executor/models/registry.py", 1081),
                    # json.dump into the atomic_writer's handle (a file writer, hesc22s's family)
                    ("FT146", "vllm/model_executor/models/registry.py", 1084),
                    # methods called on `getattr(transformers, architecture, None)`: an attribute of a module
                    # fetched by a computed name, which the scan cannot fold (sfix23b's fail-closed rule)
                    ("FT146", "vllm/model_executor/models/registry.py", 1329),
                    ("FT146", "vllm/model_executor/models/registry.py", 1330),
                    # tempfile.TemporaryDirectory() (a file creator, hfix21a's file-writer family)
                    ("FT146", "vllm/model_executor/models/registry.py", 1598),
                    ("FT146", "vllm/model_executor/models/registry.py", 1608),
                    # the model-inspection subprocess unpickles its result and its task (pickle.load*)
                    ("FT146", "vllm/model_executor/models/registry.py", 1622),
                    ("FT146", "vllm/model_executor/models/registry.py", 1631),
                    # ... read from the process's stdin (`sys.stdin.buffer.read()`, hostile review 24's
                    # stdin readers: the same line as its pickle.loads)
                    ("FT146", "vllm/model_executor/models/registry.py", 1631),
                    ("FT146", "vllm/model_executor/models/registry.py", 1635)]


def test_registry_hook_edit(vllm_repo: VllmRepo) -> None:
    """One allowed registry line: no FT104; the registry is a hub (its one importer, the legacy models
    package, is counted, not listed) and the edit serves exactly the architecture it adds."""
    reg = "vllm/model_executor/models/registry.py"
    anchor = '    "KimiK3MTPModel": ("vllm.models.kimi_k3", "KimiK3MTP"),\n'
    text = vllm_repo.read(reg)
    assert anchor in text
    added = anchor + '    "KimiK3FastMTPModel": ("vllm.models.kimi_k3", "KimiK3MTP"),\n'
    v = verify(vllm_repo, vllm_repo.pr(write={reg: text.replace(anchor, added)}))
    assert confinement(v) == [("FT112", None)]
    # The registry's own computed import_module (base line 1137) is not the edit's: an info. The only
    # error is the missing manifest (FT200): this PR carries no contribution.
    # So are its cache directory, model-inspection subprocess and result file (FT146, fail closed since
    # issue 15: errors in a PR that adds them).
    assert escapes(v) == [] and sorted(carried(v)) == REGISTRY_CARRIED
    assert [f.code for f in v.findings if f.severity is Severity.ERROR] == ["FT200"]
    r = v.blast_radius
    assert r.hubs_changed == {"vllm.model_executor.models.registry": 1}
    assert r.models == [] and r.shared == [] and r.architectures == ["KimiK3FastMTPModel"]


def test_new_escapes_in_modified_shared_files_are_errors(vllm_repo: VllmRepo) -> None:
    """What the PR adds to a shared file is its own: a monkeypatch appended to the registry (beside an
    allowed registry line) is FT120 at its line (and FT104: not an allowed entry), and a second torch op
    registration in deepseek_v2.py is FT125, while the escapes both files already had stay infos."""
    reg = "vllm/model_executor/models/registry.py"
    anchor = '    "KimiK3MTPModel": ("vllm.models.kimi_k3", "KimiK3MTP"),\n'
    text = vllm_repo.read(reg)
    patch = "\nimport vllm.v1.sample.sampler as _s\n_s.Sampler.forward = None\n"
    added = anchor + '    "KimiK3FastMTPModel": ("vllm.models.kimi_k3", "KimiK3MTP"),\n'
    v = verify(vllm_repo, vllm_repo.pr(write={reg: text.replace(anchor, added) + patch}))
    last = len(text.splitlines()) + 1 + 3  # one registry line, then the blank line, import and assignment
    assert escapes(v) == [("FT120", reg, last)] and sorted(carried(v)) == REGISTRY_CARRIED
    assert ("FT104", reg) in confinement(v)
    ds2 = "vllm/model_executor/models/deepseek_v2.py"
    op = ("\nfrom vllm.utils.torch_utils import direct_register_custom_op\n\n\n"
          "def _fast(x):\n    return x\n\n\ndirect_register_custom_op('fast_qkv', _fast, mutates_args=[])\n")
    v = verify(vllm_repo, vllm_repo.pr(append={ds2: op}))
    end = len(vllm_repo.read(ds2).splitlines()) + op.count("\n")
    assert escapes(v) == [("FT125", ds2, end)] and carried(v) == [("FT125", ds2, 945)]


def test_build_file_edit(vllm_repo: VllmRepo) -> None:
    """setup.py and a requirements pin: FT101 (build, requirements zones); no Python module of vllm/ changed,
    so no graph is built."""
    v = verify(vllm_repo, vllm_repo.pr(append={"setup.py": "# fast path\n",
                                               "requirements/cuda.txt": "flashinfer-python==0.5.3\n"}))
    assert confinement(v) == [("FT101", "requirements/cuda.txt"), ("FT101", "setup.py"), ("FT112", None)]
    assert escapes(v) == []
    r = v.blast_radius
    assert r.computed and r.changed_modules == [] and r.graph_modules is None


def test_deleted_model_module_still_imported_elsewhere(vllm_repo: VllmRepo) -> None:
    """Deleting attn_res: named from the base path; alice_ai and the triton warmup still import it."""
    v = verify(vllm_repo, vllm_repo.pr(delete=(ATTN_RES,)))
    # kimi_gdn_linear_attn imports kimi_k3.amd...: kimi_k3/__init__ -> ... -> attn_res, which is gone (FT114)
    assert confinement(v) == [("FT110", ATTN_RES), ("FT111", ATTN_RES), ("FT114", ATTN_RES), ("FT112", None)]
    assert "is deleted" in message(v, "FT114")
    assert escapes(v) == []
    r = v.blast_radius
    assert r.removed_modules == ["vllm.models.kimi_k3.nvidia.ops.attn_res"]
    assert [m.name for m in strong(r.models)] == ["alice_ai"]
    assert [s.module for s in strong(r.shared)] == [TRITON_WARMUP]


def test_second_run_uses_the_content_cache(vllm_repo: VllmRepo) -> None:
    head = vllm_repo.pr(append={DECODE: "\n_W = 2\n"})
    first = verify(vllm_repo, head).blast_radius
    second = verify(vllm_repo, head).blast_radius
    assert first.graph_cached is False and second.graph_cached is True
    assert first.model_dump(exclude={"seconds", "note", "graph_cached"}) == \
        second.model_dump(exclude={"seconds", "note", "graph_cached"})


# What each model package reaches when all of its modules change (policy defaults: lazy imports followed,
# TYPE_CHECKING ignored). Measured on vLLM 0.33.0; packages not listed reach nothing outside themselves.
QUANT = "vllm.model_executor.layers.quantization"
ATTN_REGISTRY = "vllm.v1.attention.backends.registry"
PACKAGE_RADII: dict[str, tuple[list[str], list[str]]] = {
    "deepseek_v32": (["dots3_note"], ["vllm.config.model"]),
    "deepseek_v4": (["deepseek_v41"], [ATTN_REGISTRY,
        QUANT, f"{QUANT}.utils.config_utils", "vllm.model_executor.warmup.deep_gemm_warmup",
        "vllm.v1.attention.backends.mla.sparse_swa",
        "vllm.v1.spec_decode.llm_base_proposer", "vllm.v1.worker.gpu.eplb_utils",
        "vllm.v1.worker.gpu.spec_decode.dspark.utils"]),
    "deepseek_v41": (["minimax_m3"], [
        QUANT, f"{QUANT}.utils.config_utils", ATTN_REGISTRY]),
    "flint": ([], ["vllm.transformers_utils.configs"]),
    "inkling": ([], ["vllm.transformers_utils.configs"]),
    "kimi_k3": (["alice_ai"], ["vllm.model_executor.layers.mamba.gdn.kimi_gdn_linear_attn",
                               "vllm.model_executor.warmup.deep_gemm_warmup",
                               "vllm.model_executor.warmup.kernel_warmup", TRITON_WARMUP]),
    "minimax_m3": ([], ["vllm.model_executor.layers.fused_moe.experts.mxfp8_native_moe",
                        "vllm.model_executor.warmup.minimax_m3_msa_warmup",
                        "vllm.v1.spec_decode.llm_base_proposer", ATTN_REGISTRY]),
    "qwen4_exp": ([], ["vllm.model_executor.warmup.qwen4_exp_qsa_warmup"]),
    "step5": ([], ["vllm.model_executor.warmup.step5_dsa_warmup", ATTN_REGISTRY]),
}
# Of those, named in a string (issue 15): vLLM's attention-backend registry maps backend names to model
# modules, transformers_utils.configs and config.model name model config modules, and the kimi_k3 warm-ups
# look modules up in sys.modules (kernel_warmup: low_latency_gemm; deep_gemm_warmup: nvidia.model).
NAMED_IN_STRINGS = {
    "deepseek_v32": ["vllm.config.model"], "deepseek_v4": [ATTN_REGISTRY], "deepseek_v41": [ATTN_REGISTRY],
    "flint": ["vllm.transformers_utils.configs"], "inkling": ["vllm.transformers_utils.configs"],
    "kimi_k3": ["vllm.model_executor.warmup.deep_gemm_warmup", "vllm.model_executor.warmup.kernel_warmup"],
    "minimax_m3": [ATTN_REGISTRY], "qwen4_exp": [], "step5": [ATTN_REGISTRY],
}
PACKAGES = ["beam", "deepseek_v32", "deepseek_v4", "deepseek_v41", "dots3_note", "flint", "glm5next", "hy_v4",
            "inkling", "kimi_k3", "minimax_m3", "muse_spark", "qwen4_exp", "step5"]


def test_every_model_package_radius_on_the_pristine_tree(vllm_tree: Path, vllm_repo: VllmRepo) -> None:
    """All 14 model packages, each changed as a whole, on the extracted tree (one graph, then cached)."""
    policy = load_policy(POLICY)
    files = list(iter_package_files(vllm_tree, "vllm"))
    found = sorted({p.split("/")[2] for p in files if p.startswith("vllm/models/") and p.count("/") >= 3}
                   - {"common"})
    assert found == PACKAGES
    for pkg in PACKAGES:
        changes = tuple(Change(status=ChangeStatus.MODIFIED, path=p) for p in files
                        if p.startswith(f"vllm/models/{pkg}/"))
        r = compute_blast_radius(policy, vllm_tree, changes, pkg)
        assert r.computed, r.note
        got = (sorted(m.name for m in r.models), sorted(s.module for s in r.shared))
        want = PACKAGE_RADII.get(pkg, ([], []))
        assert got == (sorted(want[0]), sorted(want[1])), pkg
        assert sorted(s.module for s in r.shared if s.link == "names-in-string") == \
            NAMED_IN_STRINGS.get(pkg, []), pkg
        assert all(a.link != "parent-package" for a in [*r.models, *r.shared]), pkg  # every module changed
        if pkg == "kimi_k3":
            assert len(changes) == 133 and r.naive_closure == 2301 and r.graph_modules == 3154


# What each model package root (`vllm/models/<m>/__init__.py`) and kimi_k3's nvidia/model.py reach when
# changed, by link kind (issue 15: what Python runs, not only what is imported). Measured on the extracted
# tree with `compute_blast_radius` (docs/blast-radius.md, "Links"): a module below a package runs the
# package's __init__ first, so importers of anything below a root are named "parent-package"; shared code
# naming the module in a string (deep_gemm_warmup's sys.modules.get) is "names-in-string".
ROOT_RADII: dict[str, dict[str, list[str]]] = {
    "vllm/models/deepseek_v32/__init__.py": {"parent-package": ["dots3_note"]},
    "vllm/models/deepseek_v4/__init__.py": {
        "imports": [QUANT],
        "parent-package": ["deepseek_v41", f"{QUANT}.utils.config_utils",
                           "vllm.model_executor.warmup.deep_gemm_warmup",
                           "vllm.v1.attention.backends.mla.sparse_swa",
                           "vllm.v1.spec_decode.llm_base_proposer", "vllm.v1.worker.gpu.eplb_utils",
                           "vllm.v1.worker.gpu.spec_decode.dspark.utils"]},
    "vllm/models/deepseek_v41/__init__.py": {
        "imports": [QUANT], "parent-package": ["minimax_m3", f"{QUANT}.utils.config_utils"]},
    "vllm/models/kimi_k3/__init__.py": {
        "parent-package": ["alice_ai", KIMI_GDN, TRITON_WARMUP]},
    "vllm/models/minimax_m3/__init__.py": {
        "parent-package": ["vllm.model_executor.layers.fused_moe.experts.mxfp8_native_moe",
                           "vllm.model_executor.warmup.minimax_m3_msa_warmup",
                           "vllm.v1.spec_decode.llm_base_proposer"]},
    "vllm/models/qwen4_exp/__init__.py": {
        "parent-package": ["vllm.model_executor.warmup.qwen4_exp_qsa_warmup"]},
    "vllm/models/step5/__init__.py": {"parent-package": ["vllm.model_executor.warmup.step5_dsa_warmup"]},
    "vllm/models/kimi_k3/nvidia/model.py": {
        "names-in-string": ["vllm.model_executor.warmup.deep_gemm_warmup"],
        "parent-package": ["alice_ai", KIMI_GDN, TRITON_WARMUP]},
}
# Roots whose module-level code does something at import beyond imports, defs, classes and constants
# (glm5next and hy_v4 call into the platform at import; kimi_k3's model.py registers its multimodal
# processor with a class decorator).
ACTING = {"vllm/models/glm5next/__init__.py", "vllm/models/hy_v4/__init__.py",
          "vllm/models/kimi_k3/nvidia/model.py"}


def test_radius_of_each_model_package_root_and_of_kimi_k3_model(vllm_tree: Path) -> None:
    policy = load_policy(POLICY)
    targets = [f"vllm/models/{pkg}/__init__.py" for pkg in PACKAGES] + ["vllm/models/kimi_k3/nvidia/model.py"]
    for path in targets:
        model = path.split("/")[2]
        r = compute_blast_radius(policy, vllm_tree, (Change(status=ChangeStatus.MODIFIED, path=path),), model)
        assert r.computed, r.note
        got: dict[str, list[str]] = {}
        for a in r.models:
            got.setdefault(a.link, []).append(a.name)
        for s in r.shared:
            got.setdefault(s.link, []).append(s.module)
        assert {k: sorted(v) for k, v in got.items()} == ROOT_RADII.get(path, {}), path
        assert all(a.witness is not None and a.witness.link == a.link for a in r.models)
        assert set(r.acts_at_import.values()) == {path in ACTING}, path
    # the kimi_k3 root: every chain runs through the package's __init__, with the module imported below it
    r = compute_blast_radius(policy, vllm_tree, (Change(status=ChangeStatus.MODIFIED,
                                                       path="vllm/models/kimi_k3/__init__.py"),), "kimi_k3")
    alice = r.models[0].witness
    assert alice is not None and alice.chain == [
        "vllm.model_executor.models.alice_ai", "vllm.models.kimi_k3.nvidia.ops.attn_res",
        "vllm.models.kimi_k3"]
    assert alice.links == ["imports", "parent-package"] and alice.lines == [69, None]
