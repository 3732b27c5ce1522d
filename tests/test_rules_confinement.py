"""FT10x confinement rules: each with a case that must pass and one that must fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fasttrack.changes.model import Change, Hunk
from fasttrack.confinement.zones import models_touched
from fasttrack.context import Context
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Finding, Severity
from fasttrack.manifest import Manifest
from fasttrack.policy import Policy, load_policy
from fasttrack.rules import all_rules
from fasttrack.verdict import ChangeStatus, decide

POLICY_PATH = Path(__file__).resolve().parent.parent / "policies" / "vllm.toml"
POLICY: Policy = load_policy(POLICY_PATH)
K3 = "vllm/models/kimi_k3"
REGISTRY = "vllm/model_executor/models/registry.py"

MANIFEST: dict[str, Any] = {
    "schema_version": 1,
    "contribution": {"name": "k3_decode", "model": "kimi_k3", "target_path": f"{K3}/nvidia/fast"},
    "envelope": {"hardware": [{"name": "NVIDIA H200", "compute_capability": "9.0"}], "tp": [1],
                 "batch": {"min": 1, "max": 64}, "context": {"min": 1, "max": 4096}, "dtypes": ["bfloat16"],
                 "cuda_graph": "full"},
    "fallback": {"metric": "k3_fallback_total", "stock_path": "a:b", "guard": "a:c"},
    "evidence": {"kernel_tests": ["tests/test_x.py"]},
}


def added(path: str, text: str = "x = 1\n", mode: str = "100644", **kw: Any) -> Change:
    lines = tuple(enumerate(text.splitlines(), start=1))
    return Change(status=ChangeStatus.ADDED, path=path, new_mode=mode, hunks=(Hunk(added=lines),),
                  added_lines=len(lines), removed_lines=0, **kw)


def modified(path: str, **kw: Any) -> Change:
    return Change(status=ChangeStatus.MODIFIED, path=path, old_mode="100644", new_mode="100644",
                  added_lines=1, removed_lines=1, **kw)


def make_ctx(changes: list[Change], model: str | None = "kimi_k3", tmp: Path | None = None,
             **kw: Any) -> Context:
    engine = kw.get("engine_paths", {})
    touched = models_touched(POLICY, [engine.get(p, p) for c in changes for p in c.paths()])
    fields: dict[str, Any] = {"mode": "range", "head_dir": tmp or Path("/nonexistent"), "base": "b",
                              "head": "h"}
    fields.update(kw)
    return Context(policy=POLICY, policy_path=POLICY_PATH, changes=tuple(changes), model=model,
                   models_touched=tuple(touched), **fields)


def run(code: str, ctx: Context) -> list[Finding]:
    (rule,) = [r for r in all_rules() if r.code == code]
    return rule.run(gather_facts(ctx))


def test_every_confinement_rule_is_catalogued_with_a_doc() -> None:
    rules = {r.code: r for r in all_rules()}
    for code in ("FT100", "FT101", "FT102", "FT103", "FT104", "FT105", "FT106", "FT107", "FT108", "FT109"):
        assert rules[code].family == "confinement" and rules[code].summary and rules[code].doc


def test_ft100_no_changes() -> None:
    assert run("FT100", make_ctx([added(f"{K3}/a.py")])) == []
    (f,) = run("FT100", make_ctx([]))
    assert f.severity is Severity.ERROR and "no changed files" in f.message


def test_ft101_shared_code_names_the_zone() -> None:
    assert run("FT101", make_ctx([added(f"{K3}/a.py"), modified(f"{K3}/b.py")])) == []
    found = run("FT101", make_ctx([modified("vllm/model_executor/layers/fused_moe/layer.py"),
                                   added("vllm/engine/new.py")]))
    assert [(f.path, f.severity) for f in found] == [
        ("vllm/model_executor/layers/fused_moe/layer.py", Severity.ERROR),
        ("vllm/engine/new.py", Severity.ERROR)]
    assert "shared-layers" in found[0].message and found[0].fix
    assert "shared (" in found[1].message


def test_ft101_rename_counts_both_sides_but_a_copy_source_does_not() -> None:
    rename = Change(status=ChangeStatus.RENAMED, path=f"{K3}/linear.py",
                    old_path="vllm/model_executor/layers/linear.py", old_mode="100644", new_mode="100644")
    (f,) = run("FT101", make_ctx([rename]))
    assert f.path == "vllm/model_executor/layers/linear.py" and "renamed to" in f.message
    copy = Change(status=ChangeStatus.COPIED, path=f"{K3}/linear.py",
                  old_path="vllm/model_executor/layers/linear.py", old_mode="100644", new_mode="100644")
    assert run("FT101", make_ctx([copy])) == []


def test_ft102_forbidden_zone() -> None:
    assert run("FT102", make_ctx([added(f"{K3}/sampler.py")])) == []
    found = run("FT102", make_ctx([modified("vllm/v1/sample/sampler.py"),
                                   modified("vllm/v1/core/sched/scheduler.py")]))
    assert {f.path for f in found} == {"vllm/v1/sample/sampler.py", "vllm/v1/core/sched/scheduler.py"}
    assert any("sampling" in f.message for f in found) and any("scheduler" in f.message for f in found)
    out_of = Change(status=ChangeStatus.RENAMED, path=f"{K3}/kv.py",
                    old_path="vllm/v1/core/kv_cache_utils.py")
    (f,) = run("FT102", make_ctx([out_of]))
    assert f.path == "vllm/v1/core/kv_cache_utils.py" and "kv-cache-management" in f.message


def test_ft103_one_model() -> None:
    assert run("FT103", make_ctx([added(f"{K3}/a.py"), added("tests/models/kimi_k3/t.py")])) == []
    two = [added(f"{K3}/a.py"), added("vllm/models/step5/b.py")]
    (f,) = run("FT103", make_ctx(two, model=None))
    assert "kimi_k3, step5" in f.message
    (f,) = run("FT103", make_ctx([added("vllm/engine/x.py")], model=None))
    assert "cannot be inferred" in f.message and "--model" in (f.fix or "")
    (f,) = run("FT103", make_ctx(two, model="kimi_k3"))
    assert f.path == "vllm/models/step5/b.py" and "belongs to model step5" in f.message


def test_ft104_hook_edits(tmp_path: Path) -> None:
    good = '    "KimiK3X": ("vllm.models.kimi_k3", "KimiK3X"),'
    bad = '    "KimiK3X": ("vllm.model_executor.models.deepseek_v2", "X"),'
    for line, expect in ((good, 0), (bad, 1)):
        head = tmp_path / line.count("deepseek").__str__()
        (head / REGISTRY).parent.mkdir(parents=True)
        (head / REGISTRY).write_text("M = {\n" + line + "\n}\n")
        change = modified(REGISTRY, hunks=(Hunk(added=((2, line),), new_start=2, new_count=1),))
        found = run("FT104", make_ctx([change], tmp=head))
        assert len(found) == expect
    (f,) = found
    assert f.line == 2 and f.path == REGISTRY and "not an allowed entry" in f.message


def test_ft104_removed_line_points_at_the_head_position(tmp_path: Path) -> None:
    (tmp_path / REGISTRY).parent.mkdir(parents=True)
    (tmp_path / REGISTRY).write_text("M = {\n}\n")
    change = modified(REGISTRY, hunks=(Hunk(removed=((2, '    "Lfm2": ("lfm2", "Lfm2"),'),), old_start=2,
                                            old_count=1, new_start=1, new_count=0),))
    (f,) = run("FT104", make_ctx([change], tmp=tmp_path))
    assert f.line == 1 and "base line 2" in f.message


def test_ft105_symlink_out_of_the_model_root() -> None:
    inside = added(f"{K3}/ops_link.py", mode="120000", symlink_target="nvidia/ops.py")
    assert run("FT105", make_ctx([inside])) == []
    out = added(f"{K3}/sampler.py", mode="120000", symlink_target="../../v1/sample/sampler.py")
    absolute = added(f"{K3}/etc", mode="120000", symlink_target="/etc/passwd")
    unreadable = added(f"{K3}/x", mode="120000", symlink_target=None)
    found = run("FT105", make_ctx([out, absolute, unreadable]))
    assert [f.path for f in found] == [f"{K3}/sampler.py", f"{K3}/etc", f"{K3}/x"]
    assert "vllm/v1/sample/sampler.py" in found[0].message and "absolute" in found[1].message


def test_ft105_resolves_contribution_links_from_where_they_land() -> None:
    link = added("kernels/k3/readme", mode="120000", symlink_target="../../README.md")
    ok = added("kernels/k3/alias.py", mode="120000", symlink_target="layer.py")
    engine = {"kernels/k3/readme": f"{K3}/nvidia/fast/readme",
              "kernels/k3/alias.py": f"{K3}/nvidia/fast/alias.py"}
    (f,) = run("FT105", make_ctx([link, ok], mode="contribution", engine_paths=engine,
                                  contribution_dir="kernels/k3"))
    assert f.path == "kernels/k3/readme" and "outside the contribution directory kernels/k3" in f.message


def test_ft106_binary_and_submodule() -> None:
    gone = Change(status=ChangeStatus.DELETED, path=f"{K3}/old.bin", old_mode="100644", binary=True)
    assert run("FT106", make_ctx([added(f"{K3}/a.py"), gone])) == []
    blob = Change(status=ChangeStatus.ADDED, path=f"{K3}/k.cubin", new_mode="100644", binary=True)
    sub = Change(status=ChangeStatus.ADDED, path=f"{K3}/vendor", new_mode="160000")
    found = run("FT106", make_ctx([blob, sub]))
    assert ["binary" in f.message for f in found] == [True, False]
    assert "submodule" in found[1].message


def test_ft107_mode_change_is_a_warning() -> None:
    assert run("FT107", make_ctx([modified(f"{K3}/a.py")])) == []
    flip = Change(status=ChangeStatus.MODE_CHANGED, path=f"{K3}/a.py", old_mode="100644", new_mode="100755")
    found = run("FT107", make_ctx([flip, added(f"{K3}/run.sh", mode="100755")]))
    # the flip is a change; a new executable script has no old mode: an info that lists it, no warning
    assert [(f.path, f.severity) for f in found] == [(f"{K3}/a.py", Severity.WARNING),
                                                     (f"{K3}/run.sh", Severity.INFO)]
    assert "new executable file" in found[1].message
    assert decide(found) == "pass"


def test_ft108_several_manifests() -> None:
    m = Manifest.model_validate(MANIFEST)
    one = make_ctx([added(f"{K3}/nvidia/fast/a.py")], manifest=m,
                   manifest_candidates=(f"{K3}/nvidia/fast/fasttrack.toml",))
    assert run("FT108", one) == []
    both = (f"{K3}/amd/fasttrack.toml", f"{K3}/nvidia/fast/fasttrack.toml")
    (f,) = run("FT108", make_ctx([added(f"{K3}/a.py")], manifest_candidates=both))
    assert all(c in f.message for c in both)


def test_ft109_manifest_placement() -> None:
    m = Manifest.model_validate(MANIFEST)
    good = make_ctx([added(f"{K3}/nvidia/fast/a.py")], manifest=m, contribution_dir=f"{K3}/nvidia/fast")
    assert run("FT109", good) == []
    moved = make_ctx([added(f"{K3}/amd/a.py")], manifest=m, contribution_dir=f"{K3}/amd")
    (f,) = run("FT109", moved)
    assert "target_path" in f.message and f'"{K3}/amd"' in (f.fix or "")
    other = Manifest.model_validate({**MANIFEST,
                                     "contribution": {**MANIFEST["contribution"], "model": "step5"}})
    found = run("FT109", make_ctx([added(f"{K3}/nvidia/fast/a.py")], manifest=other,
                                  contribution_dir=f"{K3}/nvidia/fast"))
    assert len(found) == 1 and "step5" in found[0].message


@pytest.mark.parametrize("code", ["FT101", "FT102", "FT103", "FT104", "FT105", "FT106", "FT107"])
def test_confinement_rules_judge_engine_paths_in_contribution_mode(code: str) -> None:
    """Contribution files are judged where they land: a clean contribution passes every FT10x rule."""
    files = [added("kernels/k3/layer.py"), added("kernels/k3/tests/test_layer.py")]
    engine = {"kernels/k3/layer.py": f"{K3}/nvidia/fast/layer.py",
              "kernels/k3/tests/test_layer.py": f"{K3}/nvidia/fast/tests/test_layer.py"}
    assert run(code, make_ctx(files, mode="contribution", engine_paths=engine)) == []
    # The same files landing in shared code are out of bounds.
    shared = {k: v.replace(f"{K3}/nvidia/fast", "vllm/model_executor/layers/k3") for k, v in engine.items()}
    found = run("FT101", make_ctx(files, mode="contribution", engine_paths=shared))
    assert [f.path for f in found] == ["kernels/k3/layer.py", "kernels/k3/tests/test_layer.py"]
