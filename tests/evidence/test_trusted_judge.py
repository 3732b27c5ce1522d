"""The judge comes from a trusted place (issue 12, items 4 and 5): the harness digest, the trusted revision.

End to end through `run_verify` in contribution mode on a toy git repository (the bundle_factory toy
committed with its policy, allowed signers and an engine baseline): the honest toy passes on main; a signer
added in the judged checkout, a policy edit, a baseline edit and an edited harness each fail with the right
code.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from bundle_factory import HAVE_SSH_KEYGEN, BundleFixture, make_key, session_key
from git_helpers import GitRepo

from fasttrack.commands.verify import VerifyOptions, build_context, run_verify
from fasttrack.errors import InputError
from fasttrack.evidence import harness
from fasttrack.evidence.harness import engine_base_commit, harness_digest, harness_files
from fasttrack.policy import load_policy
from fasttrack.trusted import installed_root
from fasttrack.verdict import Verdict

pytestmark = [pytest.mark.skipif(not HAVE_SSH_KEYGEN, reason="needs ssh-keygen (openssh-client)"),
              pytest.mark.usefixtures("isolated_cache", "no_engine_tree")]
MakeRepo = Callable[..., GitRepo]
REPO_POLICY = Path(__file__).resolve().parents[2] / "policies" / "vllm.toml"
BASELINE = "baselines/vllm/demo/case.py"
POLICY_TOML = """\
schema_version = 1
engine = "vllm"
engine_version = "0.33.0"

[models]
local_roots = ["vllm/models/{{model}}/**"]
package = "vllm.models.{{model}}"
packages_dir = "vllm/models"

[[zones]]
name = "judge"
kind = "judge"
patterns = ["/policies/**", "/fasttrack/**", "/baselines/**"]

[envelope]
max_hardware_kinds = 4
tp_sizes = [1, 2, 4, 8]
nvlink_domain = 8
max_batch = 256
max_context = 1048576
dtypes = ["bfloat16"]
cuda_graph_modes = ["full", "none"]

[envelope.known_hardware]
"NVIDIA H200" = "9.0"
"NVIDIA B200" = "10.0"

[evidence]
allowed_signers = "policies/allowed_signers"
min_samples = 20
bootstrap_resamples = 400
confidence = 0.95
max_plausible_speedup = 10.0
sanitizer_not_run = "warning"
max_age_days = 90
accepted_harness_digests = [{accepted}]

[evidence.peak_bandwidth]
"NVIDIA H200" = 4.8e12

[evidence.tolerance_caps.bfloat16]
atol = 0.1
rtol = 0.05
record = 0.03

[evidence.eval_bounds]
"logit_max_abs_diff" = {{ max = 0.1 }}
"greedy_token_agreement" = {{ min = 0.95 }}

[baselines.demo]
root = "baselines/demo"
case = "baselines.demo.case:baseline_case"

[[baselines.demo.stages]]
stage = "mla_decode"
compute_capability = "9.0"
accepted = [{{ name = "FLASHINFER_MLA", kernel_patterns = ["*BatchMLAPageAttention*"] }}]
rejected = [{{ name = "TRITON_MLA", kernel_patterns = ["*_decode_stage1_kernel*"] }}]
"""


@pytest.fixture
def no_engine_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FASTTRACK_ENGINE_TREE", raising=False)  # isolated_cache hides the default one


TOY_MODULES = {
    "stock.py": "def forward(x):\n    return x * 2\n",
    "guard.py": ("from prometheus_client import Counter\n\nFALLBACKS = Counter('demo_fallback', 'fallbacks', "
                 "['reason'])\n\n\ndef decide(point):\n    return True\n"),
    "bench.py": "def case(point):\n    return None\n",
    "evals.py": "def run():\n    return []\n",
}
ENGINE_FILES = ("vllm/__init__.py", "vllm/models/__init__.py", "vllm/models/demo/__init__.py")


def policy_text(*digests: str) -> str:
    return POLICY_TOML.format(accepted=", ".join(f'"{d}"' for d in digests))


def tree_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class Toy:
    """The toy contribution committed on main with its judge; `bundle` re-collects and re-signs."""

    def __init__(self, tmp_path: Path, make_repo: MakeRepo) -> None:
        self.fx = BundleFixture(tmp_path / "fx", session_key())
        for rel, text in TOY_MODULES.items():  # the callables the toy manifest names
            (self.fx.contrib / rel).write_text(text)
        self.fx.data = self.fx.good_statement()
        self.bundle()
        self.engine = tmp_path / "engine"
        for rel in ENGINE_FILES:
            (self.engine / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.engine / rel).write_text("")
        files: dict[str, str | bytes] = {**tree_of(self.fx.head),
                                         "policies/vllm.toml": policy_text(harness_digest()),
                                         BASELINE: "def baseline_case(point):\n    return None\n"}
        self.repo = make_repo(files)

    @property
    def path(self) -> Path:
        return self.repo.path

    def bundle(self, *, key: Path | None = None, harness_digest_: str | None = None,
               drop: bool = False) -> None:
        collector = self.fx.pred["collector"]
        collector["harness_digest"] = harness_digest_ or harness_digest()
        if drop:
            del collector["harness_digest"]
        self.fx.write()
        self.fx.sign(key)

    def sync_bundle(self) -> None:
        """Copy the re-signed bundle into the repository's working tree."""
        for rel, data in tree_of(self.fx.bundle).items():
            (self.path / "evidence" / "demo" / rel).write_bytes(data)

    def verify(self, **kw: object) -> Verdict:
        return run_verify(VerifyOptions(repo=self.path, contribution=self.path / "kernels" / "demo",
                                        cwd=self.path, engine_tree=self.engine, **kw))  # type: ignore[arg-type]


@pytest.fixture
def toy(tmp_path: Path, make_repo: MakeRepo) -> Toy:
    return Toy(tmp_path, make_repo)


def errors_of(v: Verdict) -> dict[str, list[str]]:
    """The verdict's errors by code, less FT212 (the toy manifest declares no `[trace]` entry points: that
    rule has its own fixtures in tests/test_rule_pairs.py; these tests are about who judges)."""
    out: dict[str, list[str]] = {}
    for f in v.findings:
        if f.severity.value == "error" and f.code != "FT212":
            out.setdefault(f.code, []).append(f"{f.path}: {f.message}")
    return out


def test_the_honest_toy_passes_on_main(toy: Toy) -> None:
    v = toy.verify()
    # its only error is FT212 (the toy declares no [trace] entry points): a fail for that alone
    assert errors_of(v) == {} and {f.code for f in v.findings if f.severity.value == "error"} == {"FT212"}
    ctx = build_context(VerifyOptions(repo=toy.path, contribution=toy.path / "kernels" / "demo",
                                      cwd=toy.path))
    assert ctx.judge_source is not None and ctx.judge_source.commit == toy.repo.head()
    assert ctx.policy_path != toy.path / "policies" / "vllm.toml"  # a copy read from git, not the file
    assert v.policy is not None and "(trusted: " in v.policy and "merge base of HEAD with main" in v.policy


def test_a_signer_added_in_the_judged_checkout_cannot_make_a_bundle_verify(toy: Toy) -> None:
    mallory = make_key(toy.path.parent / "mallory", "mallory")
    toy.repo.git("checkout", "-q", "-b", "pr")
    pub = mallory.with_name("mallory.pub").read_text().split()
    signers = toy.path / "policies" / "allowed_signers"
    signers.write_text(signers.read_text() + f'mallory namespaces="fasttrack-evidence" {pub[0]} {pub[1]}\n')
    toy.bundle(key=mallory)
    toy.sync_bundle()
    toy.repo.commit(message="add my key and my evidence")
    found = errors_of(toy.verify())
    assert set(found) == {"FT303", "FT401"}, found
    assert any("is not in allowed_signers" in m for m in found["FT303"])
    assert len(found["FT401"]) == 1 and found["FT401"][0].startswith("policies/allowed_signers: ")
    # The hole it closes: judged with the checkout's own copy, the same bundle verifies.
    own = errors_of(toy.verify(policy=toy.path / "policies" / "vllm.toml"))
    assert "FT303" not in own


def test_a_policy_edit_in_the_judged_checkout(toy: Toy) -> None:
    edited = harness_digest(_edited_harness(toy.path.parent / "h"))
    toy.repo.git("checkout", "-q", "-b", "pr")
    (toy.path / "policies" / "vllm.toml").write_text(policy_text(harness_digest(), edited))
    toy.bundle(harness_digest_=edited)
    toy.sync_bundle()
    toy.repo.commit(message="accept my harness")
    found = errors_of(toy.verify())
    assert set(found) == {"FT401", "FT402"}, found
    assert [m.split(":")[0] for m in found["FT401"]] == ["policies/vllm.toml"]
    assert edited[:16] in found["FT402"][0] and harness_digest()[:16] in found["FT402"][0]


def test_an_uncommitted_judge_edit_on_main_is_a_difference(toy: Toy) -> None:
    signers = toy.path / "policies" / "allowed_signers"
    signers.write_text(signers.read_text() + "# nothing\n")
    found = errors_of(toy.verify())
    assert set(found) == {"FT401"} and "(modified)" in found["FT401"][0]


def test_a_baseline_edit_is_ft401(toy: Toy) -> None:
    toy.repo.git("checkout", "-q", "-b", "pr")
    toy.repo.commit({BASELINE: "def baseline_case(point):\n    return 'slow'\n",
                     "baselines/vllm/demo/extra.py": "X = 1\n"})
    found = errors_of(toy.verify())
    assert set(found) == {"FT401"}
    assert sorted(m.split(" (")[0].split(": ", 1)[1] for m in found["FT401"]) == [
        BASELINE, "baselines/vllm/demo/extra.py"]


def test_a_deleted_judge_file_is_ft401(toy: Toy) -> None:
    toy.repo.git("checkout", "-q", "-b", "pr")
    toy.repo.commit({BASELINE: None})
    assert "(deleted)" in errors_of(toy.verify())["FT401"][0]


def _edited_harness(where: Path, module: str = "timing.py") -> Path:
    where.mkdir(parents=True, exist_ok=True)
    for f in harness_files():
        shutil.copy2(f, where / f.name)
    (where / module).write_bytes((where / module).read_bytes() + b"\n# faster\n")
    return where


def test_a_harness_edit_is_not_accepted(toy: Toy) -> None:
    edited = harness_digest(_edited_harness(toy.path.parent / "h"))
    toy.bundle(harness_digest_=edited)
    toy.sync_bundle()
    found = errors_of(toy.verify())
    assert set(found) == {"FT402"}
    assert f"collected by harness {edited[:16]}" in found["FT402"][0]
    assert f"it accepts {harness_digest()[:16]}" in found["FT402"][0]


def test_a_statement_without_a_harness_digest(toy: Toy) -> None:
    toy.bundle(drop=True)
    toy.sync_bundle()
    found = errors_of(toy.verify())
    assert set(found) == {"FT402"} and "records no harness digest" in found["FT402"][0]


def test_trusted_ref_pins_the_judge(toy: Toy) -> None:
    first = toy.repo.head()
    mallory = make_key(toy.path.parent / "mallory", "mallory")
    pub = mallory.with_name("mallory.pub").read_text().split()
    signers = toy.path / "policies" / "allowed_signers"
    toy.repo.commit({"policies/allowed_signers": signers.read_text()
                     + f'mallory namespaces="fasttrack-evidence" {pub[0]} {pub[1]}\n'})
    toy.bundle(key=mallory)
    toy.sync_bundle()
    toy.repo.commit(message="evidence signed by mallory, whose key main now lists")
    assert errors_of(toy.verify()) == {}
    pinned = errors_of(toy.verify(trusted_ref=first))
    assert "FT303" in pinned and "FT401" in pinned
    with pytest.raises(InputError, match="not a commit"):
        toy.verify(trusted_ref="no-such-ref")
    with pytest.raises(InputError, match="two different judges"):
        toy.verify(trusted_ref=first, policy=REPO_POLICY)


def test_without_a_default_branch_head_is_not_trusted(toy: Toy) -> None:
    toy.repo.git("branch", "-m", "main", "feature")  # e.g. a shallow clone of the PR branch alone
    ctx = build_context(VerifyOptions(repo=toy.path, contribution=toy.path / "kernels" / "demo",
                                      cwd=toy.path))
    assert ctx.judge_source is not None and ctx.judge_source.commit is None
    assert ctx.policy_path == installed_root() / "policies" / "vllm.toml"


def test_bytecode_planted_in_the_baselines_is_ft401(toy: Toy) -> None:
    import py_compile

    evil = toy.path.parent / "evil_case.py"
    evil.write_text("def baseline_case(point):\n    return 'slow'\n")
    pyc = toy.path / "baselines/vllm/demo/__pycache__" / f"case.{sys.implementation.cache_tag}.pyc"
    pyc.parent.mkdir(parents=True)
    py_compile.compile(str(evil), cfile=str(pyc), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    found = errors_of(toy.verify())
    assert set(found) == {"FT401"} and "not case.py's compiled code" in found["FT401"][0]
    py_compile.compile(str(toy.path / BASELINE), cfile=str(pyc), doraise=True)  # an honest cache
    assert errors_of(toy.verify()) == {}


def test_outside_git_the_installed_copies_judge(toy: Toy, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    shutil.copytree(toy.path, plain, ignore=shutil.ignore_patterns(".git"))
    ctx = build_context(VerifyOptions(repo=plain, contribution=plain / "kernels" / "demo", cwd=plain))
    assert ctx.judge_source is not None and ctx.judge_source.commit is None
    assert ctx.policy_path == installed_root() / "policies" / "vllm.toml"


def test_an_installed_fasttrack_inside_the_judged_tree_is_not_trusted(toy: Toy, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from fasttrack import trusted

    plain = tmp_path / "plain"
    shutil.copytree(toy.path, plain, ignore=shutil.ignore_patterns(".git"))
    monkeypatch.setattr(trusted, "installed_root", lambda: plain)  # e.g. `pip install -e .` of this checkout
    with pytest.raises(InputError, match="lies inside the tree being judged"):
        build_context(VerifyOptions(repo=plain, contribution=plain / "kernels" / "demo", cwd=plain))


def test_the_cli_takes_trusted_ref(toy: Toy) -> None:
    proc = subprocess.run([sys.executable, "-m", "fasttrack", "verify", "--contribution", "kernels/demo",
                           "--trusted-ref", "no-such-ref"], cwd=toy.path, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2
    assert "no-such-ref" in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------------------------------ the harness


def test_harness_digest_changes_with_any_harness_byte(tmp_path: Path) -> None:
    copy = tmp_path / "h"
    copy.mkdir()
    for f in harness_files():
        shutil.copy2(f, copy / f.name)
    base = harness_digest(copy)
    assert base == harness_digest()  # content, not location
    names = [f.name for f in harness_files(copy)]
    assert {"timing.py", "pytest_plugin.py", "bench_worker.py", "collect.py"} <= set(names)
    seen = {base}
    for name in names:
        path = copy / name
        data = path.read_bytes()
        for i in (0, len(data) // 2, len(data) - 1):  # flip one bit anywhere in the module
            path.write_bytes(data[:i] + bytes([data[i] ^ 1]) + data[i + 1:])
            seen.add(harness_digest(copy))
        path.write_bytes(data)
    assert len(seen) == 1 + 3 * len(names)
    assert harness_digest(copy) == base
    # a file swapped for a symlink to the same bytes, a module removed, the baseline loader added
    twin = tmp_path / "twin.py"
    shutil.copy2(copy / "timing.py", twin)
    (copy / "timing.py").unlink()
    (copy / "timing.py").symlink_to(twin)
    assert harness_digest(copy) != base
    (copy / "timing.py").unlink()
    assert harness_digest(copy) != base
    shutil.copy2(twin, copy / "timing.py")
    (copy / "baseline.py").write_text("def load(): ...\n")
    assert harness_digest(copy) != base


def test_the_cli_prints_the_digest() -> None:
    out = subprocess.run([sys.executable, "-m", "fasttrack.evidence.harness"], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    assert out == [harness_digest()]
    assert harness.main(["--bogus"]) == 2


def test_the_repository_policy_accepts_this_harness() -> None:
    """Update `[evidence] accepted_harness_digests` in policies/vllm.toml with any harness change."""
    assert harness_digest() in load_policy(REPO_POLICY).evidence.accepted_harness_digests


def test_engine_base_commit(make_repo: MakeRepo, tmp_path: Path) -> None:
    repo = make_repo({"a.txt": "a\n"})
    root = repo.head()
    assert engine_base_commit(repo.path) == root  # on main: HEAD
    repo.git("checkout", "-q", "-b", "feature")
    repo.commit({"b.txt": "b\n"})
    repo.git("checkout", "-q", "main")
    repo.commit({"c.txt": "c\n"})
    repo.git("checkout", "-q", "feature")
    assert engine_base_commit(repo.path) == root  # the merge base, not HEAD or main's tip
    (tmp_path / "plain").mkdir()
    assert engine_base_commit(tmp_path / "plain") is None
