"""The workflows and the action: linters with no findings, and a policy of our own for every workflow.

The policy (checked on every file under .github/workflows plus action.yml):
- no `pull_request_target` or `workflow_run` workflow checks out, fetches or runs the PR's head;
- each job's effective permissions are declared and within the allow-list of its stage (trigger);
- every action is pinned by a full commit SHA, and every checkout drops its credentials.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
ACTION = ROOT / "action.yml"

# What a job may hold, by the event that starts it. A workflow with several triggers gets the strictest.
ALLOW: dict[str, dict[str, str]] = {
    "pull_request": {"contents": "read"},
    "push": {"contents": "read"},
    # Stage 2 writes with the fasttrack App's token: its GITHUB_TOKEN only reads (the artifact, the checkout).
    "workflow_run": {"actions": "read", "contents": "read"},
    "pull_request_target": {"contents": "read", "checks": "write", "pull-requests": "write"},
}
DEFAULT_ALLOW = {"contents": "read"}
RANK = {"none": 0, "read": 1, "write": 2}
# Suppressions reviewed once, with the reason in the file; a new one must be added here deliberately.
ALLOWED_ZIZMOR_IGNORES = {
    ("fasttrack-publish.yml", "dangerous-triggers"),
    ("fasttrack-verify.yml", "self-repository"),
}

PR_HEAD_REFS = re.compile(
    r"github\.event\.pull_request\.head|github\.head_ref|refs/pull/|"
    r"github\.event\.workflow_run\.head_(sha|branch|commit|repository)|"
    r"github\.event\.pull_request\.merge_commit_sha"
)
PR_HEAD_RUN = re.compile(r"gh\s+pr\s+checkout|git\s+fetch\b.*\bpull/|git\s+(checkout|switch)\b.*(head|pull)")
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def _yaml() -> Any:
    yaml = pytest.importorskip(
        "ruamel.yaml",
        reason="ruamel.yaml (from the dev extra, via check-jsonschema) is needed to read the workflows",
    )
    return yaml.YAML(typ="safe")  # YAML 1.2: `on` stays a string


def load(path_or_text: Path | str) -> dict[str, Any]:
    text = path_or_text.read_text(encoding="utf-8") if isinstance(path_or_text, Path) else path_or_text
    data = _yaml().load(text)
    assert isinstance(data, dict)
    return data


def triggers(wf: dict[str, Any]) -> list[str]:
    on: Any = wf["on"] if "on" in wf else dict(wf).get(True)  # type: ignore[call-overload]
    if isinstance(on, str):
        return [on]
    if isinstance(on, list):
        return [str(x) for x in on]
    return [str(k) for k in (on or {})]


def _perms(value: Any) -> dict[str, str] | None:
    """A permissions block as {scope: level}; None when absent (GitHub's default token, maybe write-all)."""
    if value is None:
        return None
    if value in ("read-all", "write-all"):
        return {"*": value.split("-")[0]}
    if value == {}:
        return {}
    assert isinstance(value, dict), value
    return {str(k): str(v) for k, v in value.items()}


def _steps(wf: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name, job in (wf.get("jobs") or {}).items():
        out += [(str(name), s) for s in job.get("steps") or []]
    out += [("<action>", s) for s in (wf.get("runs") or {}).get("steps") or []]
    return out


def policy_violations(wf: dict[str, Any], name: str = "workflow") -> list[str]:
    out: list[str] = []
    trig = triggers(wf)
    privileged = {"pull_request_target", "workflow_run"} & set(trig)
    allow: dict[str, str] | None = None
    for t in trig:
        a = ALLOW.get(t, DEFAULT_ALLOW)
        allow = (
            a if allow is None else {k: min(allow[k], a[k], key=RANK.__getitem__) for k in allow if k in a}
        )
    allow = allow or {}
    top = _perms(wf.get("permissions"))
    for job_name, job in (wf.get("jobs") or {}).items():
        effective = _perms(job.get("permissions"))
        if effective is None:
            effective = top
        if effective is None:
            out.append(
                f"{name}: job {job_name}: no permissions declared (the default token may be write-all)"
            )
            continue
        for scope, level in effective.items():
            if RANK.get(level, 2) > RANK[allow.get(scope, "none")]:
                out.append(
                    f"{name}: job {job_name}: {scope}: {level} is more than {'/'.join(trig)} allows "
                    f"({allow.get(scope, 'none')})"
                )
    for job_name, step in _steps(wf):
        uses = str(step.get("uses", ""))
        with_ = step.get("with") or {}
        if uses and not uses.startswith("./") and not PINNED.match(uses.split("#")[0].strip()):
            out.append(f"{name}: {job_name}: {uses} is not pinned by a full commit SHA")
        if uses.startswith("actions/checkout@"):
            if str(with_.get("persist-credentials", "true")).lower() != "false":
                out.append(f"{name}: {job_name}: checkout without persist-credentials: false")
            if privileged and any(PR_HEAD_REFS.search(str(with_.get(k, ""))) for k in ("ref", "repository")):
                out.append(f"{name}: {job_name}: {'/'.join(sorted(privileged))} checks out the PR head")
        if privileged and PR_HEAD_RUN.search(str(step.get("run", ""))):
            out.append(
                f"{name}: {job_name}: {'/'.join(sorted(privileged))} fetches or checks out the PR head"
            )
    return out


def test_the_workflows_exist() -> None:
    names = {p.name for p in WORKFLOWS}
    assert {"fasttrack-verify.yml", "fasttrack-publish.yml"} <= names and ACTION.is_file()


@pytest.mark.parametrize("path", [*WORKFLOWS, ACTION], ids=lambda p: p.name)
def test_policy(path: Path) -> None:
    assert policy_violations(load(path), path.name) == []


def test_stages_hold_exactly_what_they_need() -> None:
    verify = load(ROOT / ".github/workflows/fasttrack-verify.yml")
    publish = load(ROOT / ".github/workflows/fasttrack-publish.yml")
    assert triggers(verify) == ["pull_request"] and verify["permissions"] == {"contents": "read"}
    assert triggers(publish) == ["workflow_run"] and publish["permissions"] == {}
    assert publish["jobs"]["publish"]["permissions"] == ALLOW["workflow_run"]
    checkout = [s for _, s in _steps(publish) if str(s.get("uses", "")).startswith("actions/checkout@")]
    assert checkout and all("ref" not in (s.get("with") or {}) for s in checkout)  # the default branch only
    # stage 1 installs fasttrack from the base revision, not from the PR's checkout
    base = [s for _, s in _steps(verify) if (s.get("with") or {}).get("path") == "_fasttrack"]
    assert base and base[0]["with"]["ref"] == "${{ github.event.pull_request.base.sha }}"
    assert any(s.get("uses") == "./_fasttrack" for _, s in _steps(verify))


BAD_TARGET = """
on: pull_request_target
permissions: {contents: read}
jobs:
  j:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683
        with: {ref: "${{ github.event.pull_request.head.sha }}", persist-credentials: false}
      - run: gh pr checkout ${{ github.event.number }}
"""
TOO_MUCH = """
on: [pull_request]
permissions: {contents: write}
jobs:
  a: {runs-on: ubuntu-latest, permissions: {contents: read, pull-requests: write}, steps: [{run: "true"}]}
  b: {runs-on: ubuntu-latest, steps: [{uses: actions/checkout@v4}]}
  c: {runs-on: ubuntu-latest, permissions: write-all, steps: [{run: "true"}]}
"""
NO_PERMS = """
on: workflow_run
jobs:
  j: {runs-on: ubuntu-latest, steps: [{run: "true"}]}
"""


def test_the_policy_catches_what_it_must() -> None:
    target = policy_violations(load(BAD_TARGET), "bad")
    assert any("pull_request_target checks out the PR head" in v for v in target)
    assert any("fetches or checks out the PR head" in v for v in target)
    much = policy_violations(load(TOO_MUCH), "much")
    assert "much: job a: pull-requests: write is more than pull_request allows (none)" in much
    assert "much: job b: contents: write is more than pull_request allows (read)" in much
    assert "much: job c: *: write is more than pull_request allows (none)" in much
    assert any("actions/checkout@v4 is not pinned" in v for v in much)
    assert any("persist-credentials" in v for v in much)
    assert policy_violations(load(NO_PERMS), "np") == [
        "np: job j: no permissions declared (the default token may be write-all)"
    ]


# ---- the linters ----


def _tool(name: str) -> str:
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]' provides it)")
    return found


def _lint_targets() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in WORKFLOWS] + [str(ACTION.relative_to(ROOT))]


def test_zizmor_offline_has_no_findings() -> None:
    proc = subprocess.run(
        [_tool("zizmor"), "--offline", "--no-progress", "--format", "json", *_lint_targets()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    findings = json.loads(proc.stdout or "[]")
    assert findings == [] and proc.returncode == 0, proc.stdout[:4000] + proc.stderr[-2000:]


def test_zizmor_ignores_are_the_reviewed_ones() -> None:
    seen = set()
    for p in [*WORKFLOWS, ACTION]:
        for m in re.finditer(r"zizmor: ignore\[([\w-]+)\]", p.read_text(encoding="utf-8")):
            seen.add((p.name, m.group(1)))
    assert seen <= ALLOWED_ZIZMOR_IGNORES, seen - ALLOWED_ZIZMOR_IGNORES


def test_actionlint_has_no_findings() -> None:
    proc = subprocess.run(
        [_tool("actionlint"), "-no-color", *[str(p.relative_to(ROOT)) for p in WORKFLOWS]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


def test_workflows_and_action_match_github_schemas() -> None:
    tool = _tool("check-jsonschema")
    for schema, files in (
        ("vendor.github-workflows", [str(p) for p in WORKFLOWS]),
        ("vendor.github-actions", [str(ACTION)]),
    ):
        proc = subprocess.run(
            [tool, "--builtin-schema", schema, *files], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_action_scripts_pass_shellcheck(tmp_path: Path) -> None:
    """actionlint lints workflow scripts with shellcheck; the composite action's are checked here."""
    tool = _tool("shellcheck")
    action = load(ACTION)
    scripts = [s["run"] for s in action["runs"]["steps"] if "run" in s]
    assert scripts
    for i, script in enumerate(scripts):
        f = tmp_path / f"step{i}.sh"
        f.write_text(
            "#!/usr/bin/env bash\nset -euo pipefail\n" + re.sub(r"\$\{\{[^}]*\}\}", "x", script),
            encoding="utf-8",
        )
        proc = subprocess.run([tool, "-s", "bash", str(f)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout
    # inputs reach scripts through env only, never as ${{ }} inside a script (template injection)
    assert not any("${{" in s for s in scripts)


# ---- stage 2: the App's check, every conclusion, the pinned install, no PR code ----

PUBLISH = ROOT / ".github/workflows/fasttrack-publish.yml"
LOCK = ROOT / "requirements/publish.lock"
DOCS = ROOT / "docs/github.md"
APP_TOKEN_ACTION = "actions/create-github-app-token@"


def stage2_violations(wf: dict[str, Any]) -> list[str]:
    """What stage 2 must hold to, beyond the generic policy (issue 18)."""
    out: list[str] = []
    on = wf.get("on") or {}
    if (on.get("workflow_run") or {}).get("types") != ["completed"]:
        out.append("stage 2 must run on workflow_run: completed")
    for job_name, job in (wf.get("jobs") or {}).items():
        cond = str(job.get("if", ""))
        if "conclusion" in cond:
            out.append(f"job {job_name}: runs only on some conclusions of stage 1 ({cond.strip()})")
    steps = [s for _, s in _steps(wf)]
    runs = [str(s.get("run", "")) for s in steps]
    for script in runs:
        for cmd in re.findall(r"pip install[^\n]*", script.replace("\\\n", " ")):
            if not all(flag in cmd for flag in ("--require-hashes", "--no-deps", "-r ")):
                out.append(f"unpinned install: {' '.join(cmd.split())}")
            if "_fasttrack" not in cmd and "LOCK" not in cmd:
                out.append(f"install not from the default branch's lock: {' '.join(cmd.split())}")
    # No PR code runs: every command a script starts is the runner's python or the venv's (fasttrack from the
    # default branch's checkout); nothing downloaded is ever executed or even written to disk.
    trusted_cmds = {"python", '"$RUNNER_TEMP/fasttrack-venv/bin/python"'}
    for script in runs:
        for line in script.replace("\\\n", " ").splitlines():
            words = line.strip().split()
            if words and not words[0].startswith("#") and words[0] not in trusted_cmds:
                out.append(f"stage 2 runs {words[0]!r}, not fasttrack from the default branch")
    if any(str(s.get("uses", "")).startswith("actions/download-artifact@") for s in steps):
        out.append("actions/download-artifact extracts the artifact before any check")
    app = [s for s in steps if str(s.get("uses", "")).startswith(APP_TOKEN_ACTION)]
    if not app:
        out.append("no GitHub App token: the check run would be the Actions app's, forgeable by the PR")
    else:
        w = app[0].get("with") or {}
        if not str(w.get("app-id", "")).startswith("${{ secrets.") or not str(
            w.get("private-key", "")
        ).startswith("${{ secrets."):
            out.append("the App's id and private key must come from secrets")
    publish = [s for s in steps if "github publish" in str(s.get("run", ""))]
    if len(publish) != 1:
        out.append("exactly one publish step expected")
    else:
        env = publish[0].get("env") or {}
        script = str(publish[0]["run"])
        app_id = str(app[0].get("id")) if app else "?"
        if env.get("FASTTRACK_APP_TOKEN") != f"${{{{ steps.{app_id}.outputs.token }}}}":
            out.append("the publish step does not write with the App's token")
        if "--token-env FASTTRACK_APP_TOKEN" not in script:
            out.append("publish does not use the App's token")
        for flag in ("--artifact-run-id", "--stage1-conclusion", "--head-sha", "--head-label"):
            if flag not in script:
                out.append(f"publish is not given {flag}")
        if env.get("CONCLUSION") != "${{ github.event.workflow_run.conclusion }}":
            out.append("publish is not told stage 1's conclusion")
        if "_fasttrack" not in str(env.get("PYTHONPATH", "")):
            out.append("fasttrack does not run from the default branch's checkout")
    return out


def test_stage2_holds_to_issue_18() -> None:
    assert stage2_violations(load(PUBLISH)) == []


BAD_STAGE2 = """
on: {workflow_run: {workflows: [fasttrack verify], types: [completed]}}
permissions: {}
jobs:
  publish:
    if: github.event.workflow_run.conclusion == 'success'
    runs-on: ubuntu-latest
    permissions: {actions: read, contents: read}
    steps:
      - run: python -m pip install "$SRC"
      - uses: actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093
      - env: {GITHUB_TOKEN: "${{ github.token }}"}
        run: fasttrack github publish --verdict v.json --github-repo o/n --pr 1
      - run: bash "$RUNNER_TEMP/verdict/post.sh"
"""


def test_stage2_checks_catch_what_they_must() -> None:
    found = stage2_violations(load(BAD_STAGE2))
    assert any("runs only on some conclusions" in v for v in found)
    assert any(v.startswith("unpinned install") for v in found)
    assert any("download-artifact" in v for v in found)
    assert any("no GitHub App token" in v for v in found)
    assert any("--stage1-conclusion" in v for v in found)
    assert "stage 2 runs 'bash', not fasttrack from the default branch" in found
    assert "stage 2 runs 'fasttrack', not fasttrack from the default branch" in found


def test_the_lock_pins_every_dependency_by_hash() -> None:
    """requirements/publish.lock: exact versions, sha256 hashes, and it covers pyproject's dependencies."""
    import tomllib

    text = LOCK.read_text(encoding="utf-8")
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2].strip())
    names = set()
    for entry in entries:
        head = entry.split()[0]
        assert re.fullmatch(r"[a-z0-9][a-z0-9.-]*==[0-9][\w.+-]*", head), head
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", entry), head
        names.add(head.split("==")[0])
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    wanted = {re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0]).lower() for d in deps}
    assert wanted <= names, wanted - names


def test_the_docs_say_which_app_the_required_check_must_come_from() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for needle in (
        "expected source",
        "create-github-app-token",
        "FASTTRACK_APP_ID",
        "FASTTRACK_APP_PRIVATE_KEY",
        "pending",
        "requirements/publish.lock",
        "lock_publish.py",
    ):
        assert needle in text, needle


VERIFY_RUN = re.compile(r"\bverify\b")


def test_pr_code_runs_only_in_the_unprivileged_stage() -> None:
    """`fasttrack verify` runs the effect trace, which imports the PR's modules: it may run only in the
    `pull_request` stage (read-only token), never in a stage whose token can write. The publishing stage runs
    `fasttrack github publish` and nothing that verifies, traces or imports a PR."""
    ran_verify = []
    for path in WORKFLOWS:
        wf = load(path)
        privileged = {"pull_request_target", "workflow_run"} & set(triggers(wf))
        for _, step in _steps(wf):
            runs = VERIFY_RUN.search(str(step.get("run", ""))) and "fasttrack" in str(step.get("run", ""))
            uses_action = str(step.get("uses", "")) in ("./_fasttrack", "./")
            if runs or uses_action:
                ran_verify.append(path.name)
                assert not privileged, f"{path.name} runs fasttrack verify in a privileged stage"
    assert ran_verify == ["fasttrack-verify.yml"]
    verify = load(ROOT / ".github/workflows/fasttrack-verify.yml")
    assert triggers(verify) == ["pull_request"] and verify["permissions"] == {"contents": "read"}
    publish_runs = " ".join(str(s.get("run", "")) for _, s in _steps(load(
        ROOT / ".github/workflows/fasttrack-publish.yml")))
    assert "github publish" in publish_runs and not VERIFY_RUN.search(publish_runs)
