"""`fasttrack verify` end to end on small synthetic engine repos: both modes, exit codes 0/1/2, the three
renderers, one-line input errors without tracebacks, and `fasttrack rules`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from git_helpers import Executable, GitRepo, Symlink

from fasttrack import cli
from fasttrack.commands.verify import VerifyOptions, build_context, run_verify
from fasttrack.pipeline import judge as judge_mod
from fasttrack.rules import all_rules
from fasttrack.rules.base import Rule
from fasttrack.verdict import ChangeStatus, Verdict

pytestmark = pytest.mark.usefixtures("isolated_cache", "no_engine_tree")

MakeRepo = Callable[..., GitRepo]
MP = pytest.MonkeyPatch
Cap = pytest.CaptureFixture[str]
POLICY = Path(__file__).resolve().parent.parent / "policies" / "vllm.toml"
K3 = "vllm/models/kimi_k3"
REGISTRY = "vllm/model_executor/models/registry.py"
REGISTRY_TEXT = '_MODELS = {\n    "Lfm2ForCausalLM": ("lfm2", "Lfm2ForCausalLM"),\n}\n'
ENGINE = {
    "vllm/__init__.py": "",
    "vllm/models/__init__.py": "",
    f"{K3}/__init__.py": "from vllm.models.kimi_k3.model import K3\n",
    f"{K3}/model.py": "class K3:\n    pass\n",
    "vllm/models/step5/__init__.py": "",
    "vllm/models/step5/model.py": "class S5:\n    pass\n",
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/models/__init__.py": "",
    REGISTRY: REGISTRY_TEXT,
    "vllm/v1/__init__.py": "",
    "vllm/v1/sample/__init__.py": "",
    "vllm/v1/sample/sampler.py": "def sample():\n    return 0\n",
    "setup.py": "from setuptools import setup\n",
}
MANIFEST = """schema_version = 1
[contribution]
name = "{name}"
model = "kimi_k3"
target_path = "{target}"
[envelope]
hardware = [{{ name = "NVIDIA H200", compute_capability = "9.0" }}]
tp = [1]
batch = {{ min = 1, max = 64 }}
context = {{ min = 1, max = 4096 }}
dtypes = ["bfloat16"]
cuda_graph = "full"
[fallback]
metric = "k3_fallback_total"
stock_path = "k3.stock:forward"
guard = "k3.guard:decide"
[evidence]
kernel_tests = ["tests/test_layer.py"]
"""


@pytest.fixture
def no_engine_tree(monkeypatch: MP) -> None:
    monkeypatch.delenv("FASTTRACK_ENGINE_TREE", raising=False)


@pytest.fixture
def engine(make_repo: MakeRepo) -> GitRepo:
    return make_repo(ENGINE, name="engine")


def main(monkeypatch: MP, capsys: Cap, *args: str) -> tuple[int, str, str]:
    """Run the real entry point in-process: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["fasttrack", *args])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    out = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 0), out.out, out.err


def confinement_only(monkeypatch: MP) -> None:
    """Judge with the FT1xx confinement and FT4xx integrity rules only (the exit-0 path needs no evidence)."""
    keep: list[Rule] = [r for r in all_rules() if r.family in ("confinement", "integrity")]
    monkeypatch.setattr(judge_mod, "all_rules", lambda: keep)


def range_args(repo: GitRepo, *extra: str) -> list[str]:
    return ["verify", "--repo", str(repo.path), "--base", "HEAD~1", "--head", "HEAD", "--policy", str(POLICY),
            *extra]


# ----------------------------------------------------------------------------------------- exit codes


def test_exit_0_for_a_confined_change(engine: GitRepo, monkeypatch: MP,
                                      capsys: Cap) -> None:
    confinement_only(monkeypatch)
    engine.commit({f"{K3}/model.py": "class K3:\n    fast = True\n"})
    code, out, _ = main(monkeypatch, capsys, *range_args(engine))
    assert code == 0
    assert out.rstrip().splitlines()[-1].startswith("PASS: kimi_k3")


def test_the_collector_is_off_during_verify_and_restored_after(engine: GitRepo, monkeypatch: MP,
                                                              capsys: Cap) -> None:
    """The CLI turns automatic garbage collection off for a verify run (speed) and back on when it ends, so
    an in-process caller keeps its own; a state it found off stays off; other commands leave it alone."""
    import gc

    seen: list[bool] = []
    real = judge_mod.judge
    monkeypatch.setattr(judge_mod, "judge", lambda *a, **k: (seen.append(gc.isenabled()), real(*a, **k))[1])
    engine.commit({f"{K3}/model.py": "class K3:\n    fast = True\n"})
    assert gc.isenabled()
    code, _, _ = main(monkeypatch, capsys, *range_args(engine))
    assert code in (0, 1) and seen == [False] and gc.isenabled()
    gc.disable()
    try:
        main(monkeypatch, capsys, *range_args(engine))
        assert not gc.isenabled()
    finally:
        gc.enable()
    main(monkeypatch, capsys, "rules")
    assert gc.isenabled()


def test_exit_1_for_a_forbidden_change_with_the_fix(engine: GitRepo, monkeypatch: MP,
                                                    capsys: Cap) -> None:
    engine.commit({f"{K3}/model.py": "class K3:\n    fast = True\n",
                   "vllm/v1/sample/sampler.py": "def sample():\n    return 1\n"})
    code, out, _ = main(monkeypatch, capsys, *range_args(engine))
    assert code == 1
    assert "FT102 vllm/v1/sample/sampler.py" in out and "fix: move the change" in out
    assert out.rstrip().splitlines()[-1].startswith("FAIL: kimi_k3")


def test_json_verdict_validates_and_names_zones(engine: GitRepo, monkeypatch: MP,
                                                capsys: Cap) -> None:
    engine.commit({f"{K3}/model.py": "class K3:\n    fast = True\n", "setup.py": None,
                   f"{K3}/link.py": Symlink("../../v1/sample/sampler.py")})
    code, out, _ = main(monkeypatch, capsys, *range_args(engine, "--format", "json", "--pr", "7"))
    assert code == 1
    v = Verdict.model_validate_json(out)
    assert (v.schema_version, v.verdict, v.mode, v.model, v.pr) == ("1.1", "fail", "range", "kimi_k3", 7)
    # the metadata of exactly the rules that ran travels with the verdict (groups and docs for renderers)
    assert v.catalogue is not None and [r.code for r in v.catalogue.rules] == v.rules_run
    zones = {cf.path: (cf.zone, cf.zone_kind, cf.status) for cf in v.changed_files}
    assert zones == {f"{K3}/model.py": ("model-local", "model-local", ChangeStatus.MODIFIED),
                     # a symlink is classified by its real location on disk (issue 15)
                     f"{K3}/link.py": ("sampling", "forbidden", ChangeStatus.ADDED),
                     "setup.py": ("build", "ineligible", ChangeStatus.DELETED)}
    codes = {(f.code, f.path) for f in v.findings}
    assert {("FT101", "setup.py"), ("FT105", f"{K3}/link.py"), ("FT102", f"{K3}/link.py")} <= codes
    assert v.rules_run == sorted(r.code for r in all_rules())
    assert v.base is not None and len(v.base) == 40
    assert v.policy_digest is not None and v.policy_digest.startswith("sha256:")


def test_markdown_to_a_file(engine: GitRepo, tmp_path: Path, monkeypatch: MP,
                            capsys: Cap) -> None:
    engine.commit({"vllm/v1/sample/sampler.py": "def sample():\n    return 1\n"})
    report = tmp_path / "summary.md"
    args = range_args(engine, "--format", "markdown", "--output", str(report))
    code, out, _ = main(monkeypatch, capsys, *args)
    assert code == 1 and out.count("\n") == 1 and "FAIL" in out and str(report) in out
    md = report.read_text()
    assert md.startswith("## ❌ fasttrack: **FAIL**")
    assert "| ❌ | FT102 | <code>vllm/v1/sample/sampler.py</code> |" in md and "<details>" in md


@pytest.mark.parametrize(("edit", "expect"), [
    ('    "K3X": ("vllm.models.kimi_k3", "K3X"),\n', []),
    ('    "K3X": ("vllm.models.step5", "K3X"),\n', [2]),
])
def test_registry_hook_in_range_mode(engine: GitRepo, monkeypatch: MP, edit: str,
                                     expect: list[int]) -> None:
    engine.commit({f"{K3}/model.py": "class K3:\n    fast = True\n",
                   REGISTRY: REGISTRY_TEXT.replace("_MODELS = {\n", "_MODELS = {\n" + edit)})
    v = run_verify(VerifyOptions(repo=engine.path, base="HEAD~1", head="HEAD", policy=POLICY))
    assert [f.line for f in v.findings if f.code == "FT104"] == expect
    assert not [f for f in v.findings if f.code in ("FT101", "FT102")]


def test_model_is_inferred_and_several_models_are_not_confined(engine: GitRepo) -> None:
    engine.commit({f"{K3}/model.py": "class K3:\n    fast = True\n"})
    opts = VerifyOptions(repo=engine.path, base="HEAD~1", head="HEAD", policy=POLICY)
    assert run_verify(opts).model == "kimi_k3"
    engine.commit({f"{K3}/model.py": "class K3:\n    fast = 2\n",
                   "vllm/models/step5/model.py": "class S5:\n    x = 1\n"})
    v = run_verify(VerifyOptions(repo=engine.path, base="HEAD~1", head="HEAD", policy=POLICY))
    assert v.model is None and [f.message for f in v.findings if f.code == "FT103"] == [
        "the PR touches several models' local roots: kimi_k3, step5"]


def test_manifest_found_in_the_head(engine: GitRepo) -> None:
    target = f"{K3}/nvidia/fast"
    engine.commit({f"{target}/fasttrack.toml": MANIFEST.format(name="k3_fast", target=target),
                   f"{target}/__init__.py": "", f"{target}/layer.py": "def fused():\n    return 1\n"})
    ctx = build_context(VerifyOptions(repo=engine.path, base="HEAD~1", head="HEAD", policy=POLICY))
    assert ctx.manifest is not None and ctx.manifest.contribution.name == "k3_fast"
    assert (ctx.manifest_path, ctx.contribution_dir) == (f"{target}/fasttrack.toml", target)
    assert ctx.evidence_dir == ctx.head_dir / target / "evidence"
    v = run_verify(VerifyOptions(repo=engine.path, base="HEAD~1", head="HEAD", policy=POLICY))
    assert v.contribution == "k3_fast" and v.envelope is not None and v.envelope["tp"] == [1]
    assert not [f for f in v.findings if f.code in ("FT108", "FT109")]


def test_two_manifests_holding_changes(engine: GitRepo) -> None:
    files: dict[str, Any] = {}
    for part in ("nvidia", "amd"):
        t = f"{K3}/{part}/fast"
        files |= {f"{t}/fasttrack.toml": MANIFEST.format(name=f"k3_{part}", target=t),
                  f"{t}/layer.py": "x = 1\n"}
    engine.commit(files)
    v = run_verify(VerifyOptions(repo=engine.path, base="HEAD~1", head="HEAD", policy=POLICY))
    assert v.contribution is None and [f.code for f in v.findings if f.code == "FT108"] == ["FT108"]


# ---------------------------------------------------------------------------------- bad input: exit 2


def one_line_error(code: int, err: str) -> str:
    assert code == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda t: t.replace("[models]", "[models", 1), "malformed TOML"),
    (lambda t: t.replace("max_batch = 256", "max_batch = 256\nmax_batches = 3", 1),
     "envelope.max_batches: unknown key"),
    (lambda t: t.replace("max_batch = 256", 'max_batch = "lots"', 1), "envelope.max_batch"),
    (lambda t: t.replace('kind = "forbidden"', 'kind = "sometimes"', 1), "zones[1].kind"),
])
def test_bad_policy_is_one_line_naming_file_and_field(engine: GitRepo, tmp_path: Path, monkeypatch: MP,
                                                      capsys: Cap,
                                                      mutate: Callable[[str], str], needle: str) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(mutate(POLICY.read_text()))
    engine.commit({f"{K3}/model.py": "x = 1\n"})
    args = range_args(engine)
    args[args.index(str(POLICY))] = str(bad)
    line = one_line_error(*main(monkeypatch, capsys, *args)[::2])
    assert str(bad) in line and needle in line and "fix:" in line


@pytest.mark.parametrize(("override", "needles"), [
    ({"--policy": "/nonexistent/policy.toml"}, ["/nonexistent/policy.toml", "policy not found"]),
    ({"--base": "no-such-rev"}, ["--base", "no-such-rev", "does not exist"]),
    ({"--head": "v9.9.9"}, ["--head", "v9.9.9"]),
    ({"--model": "Kimi-K3"}, ["--model", "not a model name"]),
    ({"--format": "yaml"}, ["--format", "unknown format"]),
])
def test_bad_options_are_one_line(engine: GitRepo, monkeypatch: MP,
                                  capsys: Cap, override: dict[str, str],
                                  needles: list[str]) -> None:
    engine.commit({f"{K3}/model.py": "x = 1\n"})
    opts = {"--repo": str(engine.path), "--base": "HEAD~1", "--head": "HEAD", "--policy": str(POLICY)}
    opts |= override
    line = one_line_error(*main(monkeypatch, capsys, "verify", *[x for kv in opts.items() for x in kv])[::2])
    assert all(n in line for n in needles), line


def test_not_a_repository(tmp_path: Path, monkeypatch: MP, capsys: Cap) -> None:
    args = ("verify", "--repo", str(tmp_path), "--base", "HEAD")
    line = one_line_error(*main(monkeypatch, capsys, *args)[::2])
    assert str(tmp_path) in line and "--repo" in line and "not a git repository" in line


def test_bad_manifest_in_the_head_names_revision_file_and_field(engine: GitRepo, monkeypatch: MP,
                                                                capsys: Cap) -> None:
    target = f"{K3}/nvidia/fast"
    text = MANIFEST.format(name="k3", target=target).replace("tp = [1]", "tp = [1]\ntp_max = 8")
    engine.commit({f"{target}/fasttrack.toml": text, f"{target}/a.py": "x = 1\n"})
    line = one_line_error(*main(monkeypatch, capsys, *range_args(engine))[::2])
    assert f"HEAD:{target}/fasttrack.toml" in line and "envelope.tp_max" in line


def test_entry_point_subprocess_has_no_traceback(engine: GitRepo) -> None:
    proc = subprocess.run([sys.executable, "-m", "fasttrack", "verify", "--repo", str(engine.path), "--base",
                           "nope", "--policy", str(POLICY)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("fasttrack: error: --base: revision 'nope' does not exist")


# ---------------------------------------------------------------------------------- contribution mode


def contribution_repo(make_repo: MakeRepo, target: str = f"{K3}/nvidia/fast") -> GitRepo:
    return make_repo({"kernels/kimi_k3/fasttrack.toml": MANIFEST.format(name="kimi_k3", target=target),
                      "kernels/kimi_k3/__init__.py": "",
                      "kernels/kimi_k3/layer.py": "def fused():\n    return 1\n",
                      "kernels/kimi_k3/tests/test_layer.py": "def test_x():\n    pass\n",
                      "README.md": "x\n"}, name="contrib")


def test_contribution_mode_maps_files_to_engine_paths(make_repo: MakeRepo, monkeypatch: MP,
                                                       capsys: Cap) -> None:
    repo = contribution_repo(make_repo)
    (repo.path / "kernels/kimi_k3/__pycache__").mkdir()
    (repo.path / "kernels/kimi_k3/__pycache__/layer.cpython-311.pyc").write_bytes(b"\0")
    (repo.path / ".gitignore").write_text("__pycache__/\n")
    monkeypatch.chdir(repo.path / "kernels")  # defaults come from the git top level
    code, out, _ = main(monkeypatch, capsys, "verify", "--policy", str(POLICY), "--format", "json")
    assert code == 1
    v = Verdict.model_validate_json(out)
    assert (v.mode, v.model, v.contribution) == ("contribution", "kimi_k3", "kimi_k3")
    assert {cf.path: cf.engine_path for cf in v.changed_files} == {
        f"kernels/kimi_k3/{p}": f"{K3}/nvidia/fast/{p}"
        for p in ("fasttrack.toml", "__init__.py", "layer.py", "tests/test_layer.py")}
    assert {cf.zone for cf in v.changed_files} == {"model-local"}
    assert not v.blast_radius.computed and "--engine-tree" in (v.blast_radius.note or "")
    assert v.evidence is not None and v.evidence.present is False
    assert not [f for f in v.findings if f.code.startswith("FT10") or f.code == "FT401"]


def test_contribution_laid_over_the_engine_tree(make_repo: MakeRepo, tmp_path: Path) -> None:
    engine = tmp_path / "engine-tree"
    for rel, text in ENGINE.items():
        (engine / rel).parent.mkdir(parents=True, exist_ok=True)
        (engine / rel).write_text(text)
    repo = contribution_repo(make_repo, target=K3)  # lands on the model package itself: overwrites files
    ctx = build_context(VerifyOptions(repo=repo.path, policy=POLICY, engine_tree=engine))
    status = {c.path: c.status for c in ctx.changes}
    assert status["kernels/kimi_k3/__init__.py"] is ChangeStatus.MODIFIED  # vllm/models/kimi_k3/__init__.py
    assert status["kernels/kimi_k3/layer.py"] is ChangeStatus.ADDED
    assert ctx.blast_radius.computed
    assert (engine / f"{K3}/__init__.py").read_text() == ENGINE[f"{K3}/__init__.py"]  # engine left untouched


def test_contribution_over_engine_files_judges_escapes_and_modes_against_them(make_repo: MakeRepo,
                                                                               tmp_path: Path) -> None:
    """A contribution file that replaces an engine file is judged against it: the patch the engine's file
    already had is an info (its base line named), the patch the contribution adds is an error. A new
    executable script is no mode change: FT107 lists it as an info, never a warning."""
    patch = "import vllm.v1.sample.sampler as s\ns.sample = None\n"
    engine = tmp_path / "engine-tree"
    for rel, text in {**ENGINE, f"{K3}/model.py": "class K3:\n    pass\n" + patch}.items():
        (engine / rel).parent.mkdir(parents=True, exist_ok=True)
        (engine / rel).write_text(text)
    repo = contribution_repo(make_repo, target=K3)
    repo.commit({"kernels/kimi_k3/model.py": "# faster\nclass K3:\n    fast = True\n" + patch
                 + "s.greedy = None\n",
                 "kernels/kimi_k3/bench.sh": Executable("#!/bin/sh\necho bench\n")})
    v = run_verify(VerifyOptions(repo=repo.path, policy=POLICY, engine_tree=engine))
    ft120 = [(f.line, f.severity.value, f.message) for f in v.findings if f.code == "FT120"]
    assert [(line, sev) for line, sev, _ in ft120] == [(6, "error"), (5, "info")]
    assert ft120[1][2].endswith("(already in the base revision at line 4: not introduced by this PR)")
    assert [(f.path, f.severity.value) for f in v.findings if f.code == "FT107"] == [
        ("kernels/kimi_k3/bench.sh", "info")]


def test_contribution_mode_input_errors(make_repo: MakeRepo, tmp_path: Path, monkeypatch: MP,
                                        capsys: Cap) -> None:
    repo = make_repo({"README.md": "x\n"}, name="empty")
    monkeypatch.chdir(repo.path)
    line = one_line_error(*main(monkeypatch, capsys, "verify", "--policy", str(POLICY))[::2])
    assert str(repo.path / "kernels/kimi_k3") in line and "contribution directory not found" in line
    (repo.path / "kernels/kimi_k3").mkdir(parents=True)
    line = one_line_error(*main(monkeypatch, capsys, "verify", "--policy", str(POLICY))[::2])
    assert str(repo.path / "kernels/kimi_k3/fasttrack.toml") in line and "no manifest" in line
    other = contribution_repo(make_repo)
    args = ("verify", "--repo", str(other.path), "--policy", str(POLICY), "--model", "step5")
    line = one_line_error(*main(monkeypatch, capsys, *args)[::2])
    assert "contribution.model" in line and "step5" in line


# ------------------------------------------------------------------------------------------ catalogue


def test_rules_lists_every_code(monkeypatch: MP, capsys: Cap) -> None:
    code, out, _ = main(monkeypatch, capsys, "rules")
    assert code == 0
    listed = [line.split()[0] for line in out.strip().splitlines()]
    assert listed == sorted(r.code for r in all_rules())
    mine = ("FT100", "FT101", "FT102", "FT103", "FT104", "FT105", "FT106", "FT107", "FT108", "FT109", "FT401")
    assert set(mine) <= set(listed)
    code, out, _ = main(monkeypatch, capsys, "rules", "FT104")
    assert code == 0 and out.startswith("FT104 [confinement]") and "hook" in out


def test_the_graph_cache_is_keyed_by_the_head_tree(engine: GitRepo, monkeypatch: MP) -> None:
    """In range mode the head is a git tree: its sha keys the graph cache, so no file is hashed for the key
    (a warm run reads the cached graph only)."""
    from fasttrack.confinement import graph

    engine.commit({f"{K3}/model.py": "class K3:\n    fast = True\n"})
    opts = VerifyOptions(repo=engine.path, base="HEAD~1", head="HEAD", policy=POLICY)

    def no_hashing(*a: Any, **k: Any) -> Any:
        raise AssertionError("the tree was hashed: tree_id not passed")

    monkeypatch.setattr(graph, "tree_key", no_hashing)
    first, second = run_verify(opts).blast_radius, run_verify(opts).blast_radius
    assert first.computed and not first.graph_cached and second.graph_cached


def test_copying_from_another_model_does_not_touch_it(engine: GitRepo) -> None:
    engine.commit({f"{K3}/borrowed.py": ENGINE["vllm/models/step5/model.py"]})
    v = run_verify(VerifyOptions(repo=engine.path, base="HEAD~1", head="HEAD", policy=POLICY))
    (cf,) = v.changed_files
    assert (cf.status, cf.old_path, v.model) == (ChangeStatus.COPIED, "vllm/models/step5/model.py", "kimi_k3")
    assert not [f for f in v.findings if f.code.startswith("FT10")]
