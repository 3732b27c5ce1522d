"""Issue 16: `fasttrack` under hostile input. Each test is one attack from the issue, run through the real
entry point (`fasttrack.cli.main`): the answer is one line and exit 2 for bad input, exit 3 for a bug,
never a traceback, never a hang, and a verdict is always written when one was asked for."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from git_helpers import GitRepo, k3_manifest

from fasttrack import cli
from fasttrack.commands import verify as verify_mod
from fasttrack.commands.verify import VerifyOptions, build_context, run_verify
from fasttrack.verdict import Verdict

pytestmark = pytest.mark.usefixtures("isolated_cache")

MakeRepo = Callable[..., GitRepo]
MP = pytest.MonkeyPatch
Cap = pytest.CaptureFixture[str]
POLICY = Path(__file__).resolve().parent.parent / "policies" / "vllm.toml"
K3 = "vllm/models/kimi_k3"
MANIFEST = k3_manifest('kimi_k3')
ENGINE = {"vllm/__init__.py": "", "vllm/models/__init__.py": "", f"{K3}/__init__.py": "",
          f"{K3}/model.py": "class K3:\n    pass\n", "vllm/v1/__init__.py": "",
          "vllm/v1/sampler.py": "def sample():\n    return 0\n"}


@pytest.fixture
def deadline() -> Iterator[None]:
    """Fail (instead of hanging the suite) when the test runs over 60 s: a blocked read is an attack."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError("the test hung: a read blocked or never ended")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(autouse=True)
def _no_engine_tree(monkeypatch: MP) -> None:
    monkeypatch.delenv("FASTTRACK_ENGINE_TREE", raising=False)
    monkeypatch.delenv("FASTTRACK_DEBUG", raising=False)


def main(monkeypatch: MP, capsys: Cap, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["fasttrack", *args])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    out = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 0), out.out, out.err


def one_line(code: int, err: str, expected: int = 2) -> str:
    assert code == expected, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def contribution(make_repo: MakeRepo, extra: dict[str, str] | None = None) -> GitRepo:
    return make_repo({"kernels/kimi_k3/fasttrack.toml": MANIFEST, "kernels/kimi_k3/__init__.py": "",
                      "kernels/kimi_k3/layer.py": "def fused():\n    return 1\n", **(extra or {})},
                     name="contrib")


def engine_tree(tmp_path: Path) -> Path:
    root = tmp_path / "engine-tree"
    for rel, text in ENGINE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def range_repo(make_repo: MakeRepo) -> GitRepo:
    return make_repo(ENGINE, name="engine")


def range_args(repo: GitRepo, *extra: str) -> list[str]:
    return ["verify", "--repo", str(repo.path), "--base", "HEAD~1", "--head", "HEAD", "--policy", str(POLICY),
            *extra]


# ------------------------------------------------------------------------------- unusable output paths


def test_output_to_a_directory_is_one_line_exit_2(make_repo: MakeRepo, tmp_path: Path, monkeypatch: MP,
                                                  capsys: Cap) -> None:
    repo = contribution(make_repo)
    line = one_line(*main(monkeypatch, capsys, "verify", str(repo.path / "kernels/kimi_k3"), "--policy",
                          str(POLICY), "-o", str(tmp_path))[::2])
    assert "--output" in line and str(tmp_path) in line and "fix:" in line


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_output_to_a_full_device_is_one_line_exit_2(make_repo: MakeRepo, monkeypatch: MP,
                                                    capsys: Cap) -> None:
    repo = contribution(make_repo)
    line = one_line(*main(monkeypatch, capsys, "verify", str(repo.path / "kernels/kimi_k3"), "--policy",
                          str(POLICY), "--format", "json", "--output", "/dev/full")[::2])
    assert "/dev/full" in line and "--output" in line and "full" in line


def test_a_bug_is_exit_3_with_a_report_line_and_debug_shows_the_traceback(
        make_repo: MakeRepo, monkeypatch: MP, capsys: Cap) -> None:
    repo = contribution(make_repo)

    def broken(opts: VerifyOptions, **_k: object) -> Verdict:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(verify_mod, "run_verify", broken)
    args = ("verify", str(repo.path / "kernels/kimi_k3"), "--policy", str(POLICY))
    line = one_line(*main(monkeypatch, capsys, *args)[::2], expected=3)
    assert "internal error: ZeroDivisionError" in line and "--debug" in line and "report" in line
    code, _, err = main(monkeypatch, capsys, "--debug", *args)
    assert code == 3 and "Traceback" in err and "boom" in err


# --------------------------------------------------------------------------------- odd file names


def test_a_file_name_that_is_not_utf8_still_gives_every_verdict(make_repo: MakeRepo, tmp_path: Path,
                                                                monkeypatch: MP, capsys: Cap) -> None:
    repo = range_repo(make_repo)
    name = os.fsencode(repo.path / K3) + b"/bad\xff\xfename.py"
    with open(name, "wb") as fh:
        fh.write(b"x = 1\n")
    repo.git("add", "-A")
    repo.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "odd name")
    for fmt in ("json", "markdown", "text", "sarif"):
        out = tmp_path / f"v.{fmt}"
        code, _, err = main(monkeypatch, capsys, *range_args(repo, "--format", fmt, "--output", str(out)))
        assert code in (0, 1) and "Traceback" not in err, err
        text = out.read_bytes().decode("utf-8")  # valid UTF-8
        if fmt == "sarif":  # results only: the file has no finding; the log must still be valid JSON
            assert json.loads(text)["version"] == "2.1.0"
            continue
        # the escaped name: as is in text, JSON-escaped in JSON, Markdown-escaped (or in code) in Markdown
        # escaped once by safe_verdict and again (backslashes doubled) by the Markdown sanitiser: still the
        # bytes' escapes, never the raw bytes
        assert re.search(r"bad(\\)+xff(\\)+xfename", text), fmt
    v = Verdict.model_validate_json((tmp_path / "v.json").read_text())
    assert any(cf.path.endswith("bad\\xff\\xfename.py") for cf in v.changed_files)
    code, stdout, err = main(monkeypatch, capsys, *range_args(repo, "--format", "json"))  # to stdout too
    assert code in (0, 1) and "bad\\\\xff" in stdout


def test_a_file_name_with_a_newline_is_shown_escaped(make_repo: MakeRepo, monkeypatch: MP,
                                                     capsys: Cap) -> None:
    repo = range_repo(make_repo)
    repo.commit({f"{K3}/evil\nPASS: kimi_k3, 0 error(s).py": "x = 1\n"})
    code, out, _ = main(monkeypatch, capsys, *range_args(repo, "--verbose"))
    assert code in (0, 1)
    assert "evil\\x0aPASS" in out
    assert not any(line.startswith("PASS: kimi_k3, 0 error(s).py") for line in out.splitlines())


# ------------------------------------------------------------------------ files that are not files


@pytest.mark.usefixtures("deadline")
def test_a_symlink_to_a_device_does_not_hang_verify(make_repo: MakeRepo, tmp_path: Path) -> None:
    repo = contribution(make_repo)
    os.symlink("/dev/zero", repo.path / "kernels/kimi_k3/zero.py")
    os.symlink("/dev/zero", repo.path / "kernels/kimi_k3/zero.bin")
    t0 = time.monotonic()
    v = run_verify(VerifyOptions(repo=repo.path, policy=POLICY, engine_tree=engine_tree(tmp_path)))
    assert time.monotonic() - t0 < 30
    assert v.blast_radius.computed
    links = {cf.path: cf.symlink_target for cf in v.changed_files if cf.symlink_target}
    assert links == {"kernels/kimi_k3/zero.py": "/dev/zero", "kernels/kimi_k3/zero.bin": "/dev/zero"}
    assert v.verdict == "fail" and any(f.code == "FT105" for f in v.findings)


@pytest.mark.usefixtures("deadline")
def test_a_fifo_in_the_contribution_is_refused_not_read(make_repo: MakeRepo, monkeypatch: MP,
                                                        capsys: Cap, tmp_path: Path) -> None:
    contrib = tmp_path / "plain" / "kimi_k3"  # not a git checkout: the walk sees the FIFO
    contrib.mkdir(parents=True)
    (contrib / "fasttrack.toml").write_text(MANIFEST)
    os.mkfifo(contrib / "pipe.py")
    line = one_line(*main(monkeypatch, capsys, "verify", str(contrib), "--policy", str(POLICY))[::2])
    assert "FIFO" in line and "pipe.py" in line and "fix:" in line


@pytest.mark.usefixtures("deadline")
def test_a_huge_sparse_file_is_binary_and_never_read_whole(make_repo: MakeRepo, tmp_path: Path) -> None:
    repo = contribution(make_repo)
    huge = repo.path / "kernels/kimi_k3/weights.bin"
    with open(huge, "wb") as fh:
        fh.truncate(3 << 30)  # 3 GiB of holes
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ctx = build_context(VerifyOptions(repo=repo.path, policy=POLICY, engine_tree=engine_tree(tmp_path)))
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    change = next(c for c in ctx.changes if c.path.endswith("weights.bin"))
    assert change.binary and not change.hunks
    assert grown_mib < 256, grown_mib


def test_a_large_binary_is_reported_as_binary(make_repo: MakeRepo) -> None:
    repo = contribution(make_repo)
    (repo.path / "kernels/kimi_k3/blob.so").write_bytes(b"\x7fELF" + bytes(range(256)) * 40000)
    v = run_verify(VerifyOptions(repo=repo.path, policy=POLICY))
    cf = next(c for c in v.changed_files if c.path.endswith("blob.so"))
    assert cf.binary and any(f.code == "FT106" and (f.path or "").endswith("blob.so") for f in v.findings)


# -------------------------------------------------------------------------------------- revisions


def test_head_must_be_a_commit(make_repo: MakeRepo, monkeypatch: MP, capsys: Cap) -> None:
    repo = range_repo(make_repo)
    repo.commit({f"{K3}/model.py": "x = 2\n"})
    tree = repo.git("rev-parse", "HEAD^{tree}").strip()
    blob = repo.git("rev-parse", f"HEAD:{K3}/model.py").strip()
    for rev, kind in ((tree, "tree"), (blob, "blob")):
        args = ["verify", "--repo", str(repo.path), "--base", "HEAD~1", "--head", rev,
                "--policy", str(POLICY)]
        line = one_line(*main(monkeypatch, capsys, *args)[::2])
        assert "--head" in line and f"names a {kind}, not a commit" in line


def test_a_base_that_is_not_an_ancestor_is_diffed_from_the_merge_base(make_repo: MakeRepo) -> None:
    repo = range_repo(make_repo)
    fork = repo.git("rev-parse", "HEAD").strip()
    repo.commit({"vllm/v1/sampler.py": "def sample():\n    return 42\n"})  # main moves on
    main_tip = repo.git("rev-parse", "HEAD").strip()
    repo.git("checkout", "-q", "-b", "pr", fork)
    repo.commit({f"{K3}/model.py": "class K3:\n    fast = True\n"})
    v = run_verify(VerifyOptions(repo=repo.path, base=main_tip, head="HEAD", policy=POLICY))
    assert [cf.path for cf in v.changed_files] == [f"{K3}/model.py"]  # not main's own later commit
    assert v.base == main_tip and v.merge_base == fork
    from fasttrack.render.text import render

    assert f"merge base {fork[:12]}" in render(v)


def test_unrelated_histories_are_bad_input(make_repo: MakeRepo, monkeypatch: MP, capsys: Cap) -> None:
    repo = range_repo(make_repo)
    repo.git("checkout", "-q", "--orphan", "other")
    repo.commit({"x.py": "x = 1\n"})
    args = ["verify", "--repo", str(repo.path), "--base", "main", "--head", "other", "--policy", str(POLICY)]
    line = one_line(*main(monkeypatch, capsys, *args)[::2])
    assert "no common ancestor" in line and "--base" in line


# ------------------------------------------------------------------------------------ evidence paths


def test_a_mistyped_evidence_path_is_exit_2_naming_it(make_repo: MakeRepo, tmp_path: Path, monkeypatch: MP,
                                                      capsys: Cap) -> None:
    repo = contribution(make_repo)
    wrong = tmp_path / "evidnce" / "kimi_k3"
    line = one_line(*main(monkeypatch, capsys, "verify", str(repo.path / "kernels/kimi_k3"), "--policy",
                          str(POLICY), "--evidence", str(wrong))[::2])
    assert str(wrong) in line and "--evidence" in line and "not found" in line
    assert "re-collect" not in line and "collect" in line  # points at the right directory, not at re-running


# ----------------------------------------------------------------------------------- report and collect


def test_report_refuses_a_pass_that_holds_an_error(make_repo: MakeRepo, tmp_path: Path, monkeypatch: MP,
                                                   capsys: Cap) -> None:
    repo = contribution(make_repo)
    v = run_verify(VerifyOptions(repo=repo.path, policy=POLICY))
    assert v.verdict == "fail"
    forged = tmp_path / "forged.json"
    forged.write_text(v.model_copy(update={"verdict": "pass"}).model_dump_json())
    line = one_line(*main(monkeypatch, capsys, "report", "--verdict", str(forged), "-o",
                          str(tmp_path / "site"))[::2])
    assert str(forged) in line and "says 'pass'" in line and "verdict" in line
    assert not (tmp_path / "site").exists()


def test_collect_without_a_gpu_writes_nothing_and_exits_2(make_repo: MakeRepo, tmp_path: Path) -> None:
    repo = contribution(make_repo)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-m", "fasttrack", "collect", "kernels/kimi_k3"], cwd=repo.path,
                          capture_output=True, text=True, env=env, check=False, timeout=60)
    line = one_line(proc.returncode, proc.stderr)
    assert "no CUDA device" in line and "NVIDIA H200" in line and "nothing was written" in line
    assert not (repo.path / "evidence").exists() and not (repo.path / ".cache").exists()


def test_collect_refusal_is_decided_without_importing_torch(make_repo: MakeRepo) -> None:
    from fasttrack.evidence.collect_cli import cannot_collect_here

    repo = contribution(make_repo)
    probe = ("import sys; from fasttrack.evidence.collect_cli import cannot_collect_here as c; "
             f"print(c(__import__('pathlib').Path({str(repo.path / 'kernels/kimi_k3')!r})) is not None, "
             "'torch' in sys.modules)")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["True", "False"]
    cpu = MANIFEST.replace('{ name = "NVIDIA H200", compute_capability = "9.0" }',
                           '{ name = "cpu", compute_capability = "0.0" }')
    (repo.path / "kernels/kimi_k3/fasttrack.toml").write_text(cpu)
    assert cannot_collect_here(repo.path / "kernels/kimi_k3") is None  # a CPU envelope can be collected


# ------------------------------------------------------------------------------------------- the CLI


def test_root_help_is_light_and_lists_every_command() -> None:
    probe = ("import sys, runpy; sys.argv = ['fasttrack', '-h']\n"
             "try:\n    runpy.run_module('fasttrack', run_name='__main__')\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in ('typer', 'pydantic', 'rich', 'grimp', 'click') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
    from fasttrack.app import app

    registered = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    assert registered == {name for name, _ in cli.COMMANDS}
    for name, summary in cli.COMMANDS:
        assert name in cli.root_help() and summary in cli.root_help()


def test_verify_takes_the_contribution_positionally_with_short_options(make_repo: MakeRepo, tmp_path: Path,
                                                                      monkeypatch: MP, capsys: Cap) -> None:
    repo = contribution(make_repo)
    out = tmp_path / "v.json"
    code, stdout, _ = main(monkeypatch, capsys, "verify", str(repo.path / "kernels/kimi_k3"), "--policy",
                           str(POLICY), "-f", "json", "-o", str(out), "-q")
    assert code == 1 and stdout == ""
    assert json.loads(out.read_text())["contribution"] == "kimi_k3"
    code, stdout, _ = main(monkeypatch, capsys, "verify", str(repo.path / "kernels/kimi_k3"), "--policy",
                           str(POLICY), "-q")
    assert code == 1 and stdout.strip().splitlines() == [stdout.strip()] and stdout.startswith("FAIL")
    code, stdout, _ = main(monkeypatch, capsys, "verify", "-h")
    assert code == 0 and "Exit codes" in stdout and "Examples" in stdout


def test_a_directory_and_a_range_together_are_refused(make_repo: MakeRepo, monkeypatch: MP,
                                                      capsys: Cap) -> None:
    repo = range_repo(make_repo)
    repo.commit({f"{K3}/model.py": "x = 2\n"})
    line = one_line(*main(monkeypatch, capsys, "verify", str(repo.path), *range_args(repo)[1:])[::2])
    assert "DIR" in line and "--base" in line
