"""Issue 18, second round: more attacks of a hostile fork on stage 2, each against the fake GitHub on
loopback (assertions on the requests it received). See test_github_hostile.py for the first round."""

from __future__ import annotations

import io
import json
import stat
import sys
import zipfile
from typing import Any

import pytest

from fasttrack.cli import main
from fasttrack.findings import Finding
from fasttrack.github.publish import LABEL_ELIGIBLE

KIMI = "vllm/model_executor/models/kimi_k3/fused_moe.py"
RUN_ID = 4343
APP_TOKEN = "ghs_fasttrack_app_installation"


def _run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
         ) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["fasttrack", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _zip(entries: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for info, data in entries:
            zf.writestr(info, data)
    return buf.getvalue()


def _meta(verdicts: Any) -> bytes:
    return json.dumps({"pr": verdicts.pr, "head_sha": verdicts.head, "base_sha": verdicts.base}).encode()


def _good(verdicts: Any, v: Any = None) -> bytes:
    return (v if v is not None else verdicts.make([])).model_dump_json().encode()


@pytest.fixture
def stage2(fake_github: Any, pr_file: Any, verdicts: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    fake_github.files = [pr_file(KIMI)]
    fake_github.labels = [LABEL_ELIGIBLE]
    fake_github.token = APP_TOKEN
    fake_github.download_token = verdicts.token
    monkeypatch.setenv("FASTTRACK_APP_TOKEN", APP_TOKEN)
    monkeypatch.setenv("ACTIONS_TOKEN", verdicts.token)
    return fake_github


def _args(fake: Any, verdicts: Any, *extra: str) -> list[str]:
    return ["github", "publish", "--github-repo", verdicts.repo, "--artifact-run-id", str(RUN_ID),
            "--head-sha", verdicts.head, "--head-label", fake.head_label, "--base-url", fake.web,
            "--token-env", "FASTTRACK_APP_TOKEN", "--artifact-token-env", "ACTIONS_TOKEN",
            "--comment-author", verdicts.bot, *extra]


def _writes(httpserver: Any) -> list[tuple[str, str, Any]]:
    return [(req.method, req.path.split("/engine", 1)[1], req.get_json(silent=True))
            for req, _ in httpserver.log if req.method in {"POST", "PATCH", "PUT", "DELETE"}]


def _only_a_failing_check(fake: Any, httpserver: Any, verdicts: Any) -> dict[str, Any]:
    w = _writes(httpserver)
    assert [(m, p) for m, p, _ in w] == [
        ("POST", "/check-runs"), ("DELETE", f"/issues/{verdicts.pr}/labels/{LABEL_ELIGIBLE}")], w
    body: dict[str, Any] = w[0][2]
    assert body["head_sha"] == verdicts.head and body["conclusion"] == "failure"
    assert fake.labels == [] and fake.comments == []
    return body


def _no_workflow_command(err: str) -> None:
    for line in err.splitlines():
        assert not line.lstrip().startswith("::") and "##[" not in line, line


# ---- zips that are not what they say ----


def _symlink(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


@pytest.mark.parametrize("case", ["symlink-verdict", "dir-named-file", "nfd-duplicate", "dup-name",
                                  "dir-entry", "stored-lies"])
def test_odd_zip_entries_are_refused(case: str, stage2: Any, verdicts: Any, httpserver: Any,
                                     monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                     tmp_path: Any) -> None:
    """A symlink entry named verdict.json (its 'content' is a link target), a directory entry named like a
    file, a name that only normalises to verdict.json, a duplicated name: refused, nothing extracted."""
    good, meta = _good(verdicts), _meta(verdicts)
    entries: list[tuple[zipfile.ZipInfo | str, bytes]]
    if case == "symlink-verdict":
        entries = [(_symlink("verdict.json"), b"/proc/self/environ"), ("pr.json", meta)]
    elif case == "dir-named-file":
        d = zipfile.ZipInfo("verdict.json/")
        d.external_attr = (stat.S_IFDIR | 0o755) << 16 | 0x10
        entries = [(d, b""), ("pr.json", meta)]
    elif case == "nfd-duplicate":
        entries = [("verdict.json", good), ("pr.json", meta), ("verdict\u0301.json", good)]
    elif case == "dup-name":
        entries = [("verdict.json", good), ("pr.json", meta), ("verdict.json", good)]
    elif case == "dir-entry":
        entries = [("verdict.json", good), ("pr.json", meta), (zipfile.ZipInfo("x/"), b"")]
    else:  # a symlink mode on pr.json, content still JSON
        entries = [("verdict.json", good), (_symlink("pr.json"), meta)]
    if case == "dup-name":
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = _zip(entries)
    else:
        data = _zip(entries)
    stage2.add_artifact(RUN_ID, data)
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(monkeypatch, capsys, *_args(stage2, verdicts))
    assert code == 2, err
    assert list(tmp_path.iterdir()) == []
    _only_a_failing_check(stage2, httpserver, verdicts)


# ---- verdict.json bytes the schema accepts but GitHub or the renderer may not ----


def _raw_verdict(verdicts: Any, mutate: Any) -> bytes:
    data = json.loads(_good(verdicts, verdicts.make([Finding.warning("FT102", "w", path=KIMI, line=3)])))
    text = mutate(data)
    return text.encode() if isinstance(text, str) else json.dumps(text).encode()


@pytest.mark.parametrize("case", ["lone-surrogate", "nan-claim", "huge-line", "huge-int-digits"])
def test_hostile_values_never_crash_stage2(case: str, stage2: Any, verdicts: Any, httpserver: Any,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever the verdict holds, stage 2 either publishes it or leaves exactly a failing check: a crash
    (exit 3) would leave the previous push's eligible label on a head nobody verified."""
    def mutate(d: dict[str, Any]) -> Any:
        if case == "lone-surrogate":
            return json.dumps(d).replace('"w"', '"\\ud800 x"')
        if case == "nan-claim":
            d["evidence"] = {"present": True, "claims": [{"name": "c", "claimed": 1.0, "holds": True}]}
            return json.dumps(d).replace('"claimed": 1.0', '"claimed": NaN')
        if case == "huge-line":
            d["findings"][0]["line"] = 10**30
            return d
        return json.dumps(d).replace('"line": 3', '"line": ' + "9" * 5000)
    stage2.add_artifact(RUN_ID, _zip([("verdict.json", _raw_verdict(verdicts, mutate)),
                                      ("pr.json", _meta(verdicts))]))
    code, _, err = _run(monkeypatch, capsys, *_args(stage2, verdicts))
    assert code in (0, 2), err
    _no_workflow_command(err)
    if code == 2:
        _only_a_failing_check(stage2, httpserver, verdicts)
    else:
        (rid,) = stage2.check_runs
        for note in stage2.annotations[rid]:
            assert 1 <= note["start_line"] <= 2**31 - 1


# ---- a crash in stage 2 must not leave the previous push's state ----


def test_a_crash_while_publishing_still_leaves_a_failing_check(stage2: Any, verdicts: Any, httpserver: Any,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Attack (any input that hits a bug in the renderer or the client): before, the exception went past
    the rejection path, exit 3 with nothing written, so `fast-track: eligible` of the previous push stayed on
    a head nobody verified. Now it is exit 3 (a bug) and still exactly a failing check."""
    from fasttrack.github import markdown as md

    def boom(*_a: Any, **_k: Any) -> str:
        raise RuntimeError("renderer bug\n::error::x")

    monkeypatch.setattr(md, "render", boom)
    stage2.add_artifact(RUN_ID, _zip([("verdict.json", _good(verdicts)), ("pr.json", _meta(verdicts))]))
    code, _, err = _run(monkeypatch, capsys, *_args(stage2, verdicts))
    assert code == 3, err
    _no_workflow_command(err)
    body = _only_a_failing_check(stage2, httpserver, verdicts)
    assert "internal error" in body["output"]["summary"]


# ---- one reading of the artifact's JSON ----


def test_duplicate_keys_are_refused(stage2: Any, verdicts: Any, httpserver: Any,
                                    monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Attack: `findings` twice, the errors first and an empty list last. pydantic keeps the last (eligible);
    a reader that keeps the first (or a person reading the file) sees the errors. JSON with duplicate keys
    has no one meaning, so it is refused."""
    v = json.loads(_good(verdicts, verdicts.make([Finding.error("FT101", "escapes", path=KIMI, line=1)])))
    text = json.dumps(v)
    text = text.replace('"verdict": "fail"', '"verdict": "pass"')
    text = text[:-1] + ', "findings": []}'
    stage2.add_artifact(RUN_ID, _zip([("verdict.json", text.encode()), ("pr.json", _meta(verdicts))]))
    code, _, err = _run(monkeypatch, capsys, *_args(stage2, verdicts))
    assert code == 2 and "duplicate key" in err, err
    _only_a_failing_check(stage2, httpserver, verdicts)


# ---- GitHub's limits, at hostile sizes ----


def test_huge_verdicts_stay_within_githubs_limits(stage2: Any, verdicts: Any, httpserver: Any,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """2000 findings with long multi-byte messages, 500 of them on paths outside the PR: every check-run
    request carries at most 50 annotations and a summary within 65535 characters, the comment too, and
    the conclusion comes with the last request only."""
    import random

    rnd = random.Random(7)  # varied text, so the zip does not look like a bomb

    def long() -> str:
        return "".join(rnd.choice("€abc¥def") for _ in range(300)) + " @team #1"

    findings = [Finding.warning("FT102", f"{i} {long()}", path=KIMI, line=i + 1, fix=long())
                for i in range(1500)]
    findings += [Finding.warning("FT102", long(), path=f"vllm/other_{i}.py", line=1) for i in range(500)]
    stage2.add_artifact(RUN_ID, _zip([("verdict.json", _good(verdicts, verdicts.make(findings))),
                                      ("pr.json", _meta(verdicts))]))
    code, _, err = _run(monkeypatch, capsys, *_args(stage2, verdicts))
    assert code == 0, err
    runs = [(m, body) for m, p, body in _writes(httpserver) if "/check-runs" in p]
    assert len(runs) == 20  # 1000 annotations (the cap), 50 a request
    for i, (_m, body) in enumerate(runs):
        out = body["output"]
        assert len(out["annotations"]) <= 50 and len(out["summary"]) <= 65535
        assert ("conclusion" in body) == (i == len(runs) - 1)
        for note in out["annotations"]:
            assert len(note["message"]) <= 4000 and "@team" not in note["message"]
    assert len(stage2.comments[0]["body"]) <= 65535
