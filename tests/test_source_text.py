"""FT135-FT137 and the source decoder: the text analysed is the code that runs.

Each attack has a failing case and an honest case next to it; the range-mode cases use real git
repositories (symlinks checked out by git's own code) so that what is judged is what a PR ships."""

from __future__ import annotations

import codecs
from collections.abc import Callable
from pathlib import Path

import pytest
from git_helpers import GitRepo, Symlink, k3_manifest

from fasttrack.commands.verify import VerifyOptions, build_context
from fasttrack.confinement.source_text import SourceProblem, decode_python_source, read_python_source
from fasttrack.facts.escapes import analyse_escapes as analysis
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Finding
from fasttrack.rules import all_rules

pytestmark = pytest.mark.usefixtures("isolated_cache")

MakeRepo = Callable[..., GitRepo]
POLICY = Path(__file__).resolve().parent.parent / "policies" / "vllm.toml"
K3 = "vllm/models/kimi_k3"
PATCH = "import vllm.v1.sample.sampler as s\ns.sample = None\n"
# The UTF-7 reading of this line is "x = 1\ns.sample = None" on two lines; as UTF-8 it is one comment.
UTF7_PATCH = b"# coding: utf-7\nimport vllm.v1.sample.sampler as s\n#+AAo-s.sample = None\n"
BASE = {
    "vllm/__init__.py": "",
    "vllm/models/__init__.py": "",
    f"{K3}/__init__.py": "",
    f"{K3}/model.py": "class K3:\n    pass\n",
    "vllm/v1/__init__.py": "",
    "vllm/v1/sample/__init__.py": "",
    "vllm/v1/sample/sampler.py": "def sample():\n    return 0\n",
}


# ------------------------------------------------------------------------------------------- decoder


@pytest.mark.parametrize("raw", [
    b"x = 1\n",
    b"# coding: utf-8\nx = 1\n",
    b"#!/usr/bin/env python\n# -*- coding: UTF8 -*-\nx = 1\n",
    codecs.BOM_UTF8 + b"x = 1\n",
    codecs.BOM_UTF8 + b"# coding: utf-8\nx = 1\n",
    b"# coding: latin-1\nx = 1\n",  # pure ASCII: both readings are one text
    b"# coding=ascii\nx = 1\n",
    "x = 'é'\n".encode(),
    b"x = 1\n# coding: utf-7\n",  # a cookie on line 3 is no cookie
])
def test_decoder_accepts_what_reads_the_same_as_utf8(raw: bytes) -> None:
    text = decode_python_source(raw, "m.py")
    assert isinstance(text, str)
    assert text == raw.removeprefix(codecs.BOM_UTF8).decode("utf-8")


@pytest.mark.parametrize(("raw", "words"), [
    (b"# coding: utf-7\nx = 1\n", "utf-7"),
    (b"# -*- coding: utf-16 -*-\nx = 1\n", "utf-16"),
    (b"\n# vim: set fileencoding=cp037 :\nx = 1\n", "cp037"),  # line 2 after a blank line counts
    (b"# coding: rot13\nx = 1\n", "rot13"),
    (b"# coding: no-such-codec\nx = 1\n", "no-such-codec"),
    (b"# coding: latin-1\nx = '\xe9'\n", "non-ASCII"),
    (codecs.BOM_UTF8 + b"# coding: latin-1\nx = 1\n", "byte-order mark"),
    (b"x = '\xff'\n", "not valid UTF-8"),
    (b"x = 1\0\n", "NUL"),
])
def test_decoder_rejects_other_readings(raw: bytes, words: str) -> None:
    got = decode_python_source(raw, "m.py")
    assert isinstance(got, SourceProblem)
    assert words in got.reason


def test_utf7_really_runs_differently() -> None:
    """The attack is real: CPython compiles the UTF-7 reading, which has a statement the UTF-8 one lacks."""
    ns: dict[str, object] = {}
    exec(compile(b"# coding: utf-7\nx = 1\n#+AAo-x = 2\n", "m.py", "exec"), ns)
    assert ns["x"] == 2
    assert decode_python_source(b"# coding: utf-7\nx = 1\n#+AAo-x = 2\n", "m.py") != "x = 1\n"


def test_symlink_is_read_through_and_confined(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("y = 2\n")
    (tmp_path / "m.py").symlink_to("a.txt")
    (tmp_path / "out.py").symlink_to("/etc/hostname")
    assert read_python_source(tmp_path, "m.py") == "y = 2\n"
    got = read_python_source(tmp_path, "out.py")
    assert isinstance(got, SourceProblem) and got.kind == "unreadable"


# ------------------------------------------------------------------------------------- rules, range


def findings(repo: GitRepo, *codes: str) -> list[Finding]:
    ctx = build_context(VerifyOptions(repo=repo.path, base="HEAD~1", head="HEAD", policy=POLICY))
    return [f for r in all_rules() if r.code in codes for f in r.run(gather_facts(ctx))]


def test_utf7_cookie_is_an_error_and_not_analysed_as_utf8(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    repo.commit({f"{K3}/fast.py": UTF7_PATCH})
    got = findings(repo, "FT135", "FT128")
    assert {f.code for f in got} == {"FT135", "FT128"}
    assert all(f.severity == "error" for f in got)
    assert any("utf-7" in f.message for f in got)


def test_honest_utf8_file_is_clean(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    repo.commit({f"{K3}/fast.py": "# coding: utf-8\nSCALE = 'é'\n"})
    assert findings(repo, "FT135", "FT136", "FT137", "FT128") == []


def test_py_symlink_to_a_txt_file_is_analysed_and_reported(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    repo.commit({f"{K3}/payload.txt": PATCH, f"{K3}/fast.py": Symlink("payload.txt")})
    got = findings(repo, "FT137")
    assert [f.path for f in got] == [f"{K3}/fast.py"]
    assert "payload.txt is not a .py file" in got[0].message
    ctx = build_context(VerifyOptions(repo=repo.path, base="HEAD~1", head="HEAD", policy=POLICY))
    (fe,) = [f for f in analysis(ctx).files if f.path == f"{K3}/fast.py"]
    # the patch in the .txt is seen
    assert [e.target for e in fe.escapes] == ["vllm.v1.sample.sampler.sample"], fe.escapes


def test_editing_the_target_of_an_old_py_symlink_is_caught(make_repo: MakeRepo) -> None:
    repo = make_repo({**BASE, f"{K3}/payload.txt": "x = 1\n", f"{K3}/fast.py": Symlink("payload.txt")})
    repo.commit({f"{K3}/payload.txt": PATCH})  # no .py file changes
    assert [f.path for f in findings(repo, "FT137")] == [f"{K3}/fast.py"]


def test_py_symlink_inside_the_model_to_py_is_clean(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    repo.commit({f"{K3}/impl.py": "x = 1\n", f"{K3}/fast.py": Symlink("impl.py"),
                 f"{K3}/nvidia/__init__.py": "", f"{K3}/pkg": Symlink("nvidia")})
    assert findings(repo, "FT137", "FT135", "FT136") == []


def test_module_symlinked_out_through_a_chain_is_resolved_on_disk(make_repo: MakeRepo) -> None:
    """`d -> ../../v1/sample` and `fast.py -> d/../sampler.py`: as a string `d/../sampler.py` normalises
    to a file inside the model, on disk it is vllm/v1/sampler.py's neighbour in vllm/v1/."""
    repo = make_repo({**BASE, "vllm/v1/sampler.py": "x = 1\n"})
    repo.commit({f"{K3}/d": Symlink("../../v1/sample"), f"{K3}/fast.py": Symlink("d/../sampler.py")})
    got = {f.path: f.message for f in findings(repo, "FT137")}
    assert f"{K3}/d" in got and "vllm/v1/sample" in got[f"{K3}/d"]
    assert f"{K3}/fast.py" in got and "vllm/v1/sampler.py" in got[f"{K3}/fast.py"]


@pytest.mark.parametrize("name", ["fast.pyc", "__pycache__/model.cpython-311.pyc", "fast.so",
                                  "fast.cpython-311-x86_64-linux-gnu.so", "evil.pth", "x.egg-link", "lib.zip",
                                  "fast.pyd", "Fast.PY"])
def test_loadable_non_source_in_the_model_is_an_error(make_repo: MakeRepo, name: str) -> None:
    repo = make_repo(BASE)
    repo.commit({f"{K3}/{name}": b"import os\n"})
    got = findings(repo, "FT136")
    assert [f.path for f in got] == [f"{K3}/{name}"]
    assert got[0].severity == "error"


def test_data_files_in_the_model_are_not_loadable_code(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    repo.commit({f"{K3}/README.md": "# k3\n", f"{K3}/tuning.json": "{}\n", f"{K3}/fast.py": "x = 1\n"})
    assert findings(repo, "FT136") == []


# ------------------------------------------------------------------------------------- contribution mode

CONTRIB_MANIFEST = k3_manifest('k3')


def contribution_findings(repo: GitRepo, *codes: str) -> list[Finding]:
    ctx = build_context(VerifyOptions(repo=repo.path, policy=POLICY))
    return [f for r in all_rules() if r.code in codes for f in r.run(gather_facts(ctx))]


def test_contribution_symlink_to_txt_and_ignored_bytecode(make_repo: MakeRepo,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """In contribution mode a `.py` link to a `.txt` is FT137 and its text is analysed; `__pycache__`
    that git ignores is no change of the contribution, so no FT136."""
    monkeypatch.delenv("FASTTRACK_ENGINE_TREE", raising=False)
    repo = make_repo({"kernels/kimi_k3/fasttrack.toml": CONTRIB_MANIFEST,
                      "kernels/kimi_k3/layer.py": "x = 1\n", ".gitignore": "__pycache__/\n"})
    (repo.path / "kernels/kimi_k3/__pycache__").mkdir()
    (repo.path / "kernels/kimi_k3/__pycache__/layer.cpython-311.pyc").write_bytes(b"\0")
    assert contribution_findings(repo, "FT136", "FT137", "FT135") == []
    repo.commit({"kernels/kimi_k3/p.txt": PATCH, "kernels/kimi_k3/fast.py": Symlink("p.txt")})
    got = contribution_findings(repo, "FT136", "FT137")
    assert [(f.code, f.path) for f in got] == [("FT137", "kernels/kimi_k3/fast.py")]
