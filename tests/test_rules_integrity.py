"""FT401: a PR may not edit its own judge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fasttrack.changes.model import Change
from fasttrack.context import Context
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Finding, Severity
from fasttrack.policy import load_policy
from fasttrack.rules import all_rules
from fasttrack.verdict import ChangeStatus

POLICY_PATH = Path(__file__).resolve().parent.parent / "policies" / "vllm.toml"


def ctx(paths: list[str], *, policy_path: Path = POLICY_PATH, repo: Path | None = None, **kw: Any) -> Context:
    changes = tuple(Change(status=ChangeStatus.MODIFIED, path=p, old_mode="100644", new_mode="100644")
                    for p in paths)
    return Context(policy=load_policy(policy_path), policy_path=policy_path, mode=kw.pop("mode", "range"),
                   head_dir=Path("/nonexistent"), changes=changes, model="kimi_k3", repo=repo, **kw)


def ft401(c: Context) -> list[Finding]:
    (rule,) = [r for r in all_rules() if r.code == "FT401"]
    return rule.run(gather_facts(c))


def test_model_code_is_not_the_judge() -> None:
    assert ft401(ctx(["vllm/models/kimi_k3/a.py", "tests/models/kimi_k3/t.py", "setup.py"])) == []


@pytest.mark.parametrize("path", [
    "policies/vllm.toml", "policies/allowed_signers", ".github/workflows/ci.yml", "fasttrack/rules/base.py",
    "action.yml",
])
def test_judge_files_fail(path: str) -> None:
    (f,) = ft401(ctx([path]))
    assert f.severity is Severity.ERROR and f.path == path and "its own judge" in f.message


def test_policy_in_use_and_allowed_signers_count_wherever_they_live(tmp_path: Path) -> None:
    text = POLICY_PATH.read_text().replace('allowed_signers = "policies/allowed_signers"',
                                           'allowed_signers = "config/signers"')
    policy = tmp_path / "config" / "gate.toml"
    policy.parent.mkdir()
    policy.write_text(text)
    found = ft401(ctx(["config/gate.toml", "config/signers", "config/other.toml"], policy_path=policy,
                      repo=tmp_path))
    assert [(f.path, "policy in use" in f.message) for f in found] == [("config/gate.toml", True),
                                                                        ("config/signers", False)]


def test_contribution_landing_on_the_judge_fails() -> None:
    c = ctx(["kernels/k3/base.py"], mode="contribution",
            engine_paths={"kernels/k3/base.py": "fasttrack/base.py"})
    (f,) = ft401(c)
    assert f.path == "kernels/k3/base.py"


def test_both_sides_of_a_rename_count() -> None:
    rename = Change(status=ChangeStatus.RENAMED, path="vllm/models/kimi_k3/p.toml",
                    old_path="policies/vllm.toml")
    c = Context(policy=load_policy(POLICY_PATH), policy_path=POLICY_PATH, mode="range",
                head_dir=Path("/nonexistent"), changes=(rename,), model="kimi_k3")
    (f,) = ft401(c)
    assert f.path == "policies/vllm.toml"


def test_a_copy_leaves_its_judge_source_alone() -> None:
    copy = Change(status=ChangeStatus.COPIED, path="vllm/models/kimi_k3/p.toml",
                  old_path="policies/vllm.toml")
    c = Context(policy=load_policy(POLICY_PATH), policy_path=POLICY_PATH, mode="range",
                head_dir=Path("/nonexistent"), changes=(copy,), model="kimi_k3")
    assert ft401(c) == []
