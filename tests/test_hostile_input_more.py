"""Issue 16, second round: hostile inputs that still broke the error contract (exit 2, one line)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ft(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    import os

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "fasttrack", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("kind", ["toml-deep-array", "toml-deep-table"])
def test_a_toml_bomb_policy_is_bad_input_not_a_bug(kind: str, tmp_path: Path) -> None:
    """Attack: a policy (or manifest) of deeply nested arrays/inline tables; tomllib recurses until
    RecursionError, which was reported as an internal error (exit 3)."""
    bomb = tmp_path / "policy.toml"
    n = 50_000
    body = "[" * n + "]" * n if kind == "toml-deep-array" else "{a=" * n + "1" + "}" * n
    bomb.write_text(f"a = {body}\n", encoding="utf-8")
    proc = _ft("verify", "--policy", str(bomb))
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "policy.toml" in proc.stderr, proc.stderr


def test_a_deeply_nested_json_input_is_bad_input(tmp_path: Path) -> None:
    from fasttrack.errors import InputError
    from fasttrack.loading import load_json_model
    from fasttrack.verdict import Verdict

    deep = tmp_path / "v.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(InputError, match="nest"):
        load_json_model(deep, Verdict, "verdict")


EVIL = "x\n::error title=pwned::forged\r\n##[error]legacy"


def _evil_verdict() -> object:
    """A verdict whose evidence strings (a contributor's own statement: kernel, candidate and backend names,
    the point's dtype) carry newlines and workflow commands."""
    from fasttrack.verdict import BenchmarkRow, EvidenceSummary, KernelGain, Verdict

    row = BenchmarkRow(point={"tp": 1, "batch": 8, "context": 32768, "dtype": EVIL},
                       median_us={"stock": 10.0, EVIL: 9.0}, speedup={EVIL: 1.1},
                       gain_from={EVIL: [KernelGain(name=EVIL, stock_us=5.0, candidate_us=4.0,
                                                    saved_us=1.0)]},
                       backends={EVIL: EVIL}, claimed=True)
    return Verdict(tool_version="0.1.0", verdict="pass", mode="contribution", contribution="kernels/x",
                   evidence=EvidenceSummary(present=True, benchmarks=[row]),
                   generated_at="2026-01-01T00:00:00Z")


def test_text_output_cannot_start_a_workflow_command() -> None:
    """Attack: the Actions runner parses stdout too. The gain lines of the text report were only escaped for
    rich's markup, so a kernel name with a newline started a line `::error ...` in the job's log."""
    from fasttrack.render.text import render

    out = render(_evil_verdict(), verbose=True)  # type: ignore[arg-type]
    assert "forged" in out  # the text is there, shown
    for line in out.splitlines():
        assert not line.lstrip().startswith("::") and not line.lstrip().startswith("##["), repr(line)


POISON = ("\n::error title=pwned::forged\r\n##[error]legacy @maintainers #12 ![i](http://evil.example/a.png) "
          "[l](https://evil.example) <img src=x onerror=alert(1)> <!-- fasttrack:sticky-comment --> "
          "\u202eevil")


def poisoned_verdict() -> object:
    """tests/data/verdict_sample.json (a real verdict, trimmed, with a blast radius) with POISON appended
    to every string the schema lets carry it, and free-form dict keys (candidates, backends) poisoned too."""
    import json

    import pydantic

    from fasttrack.verdict import Verdict

    orig = json.loads((ROOT / "tests/data/verdict_sample.json").read_text(encoding="utf-8"))

    def poison(x: object, free_keys: bool = False) -> object:
        if isinstance(x, str):
            return x + POISON
        if isinstance(x, list):
            return [poison(i) for i in x]
        if isinstance(x, dict):
            return {(k + POISON if free_keys and k not in ("stock", "compile") else k):
                    poison(v, k in ("median_us", "speedup", "gain_from", "backends", "roofline_fraction",
                                    "top_kernels", "environment"))
                    for k, v in x.items()}
        return x

    data: object = poison(orig)
    for _ in range(20):
        try:
            return Verdict.model_validate(data)
        except pydantic.ValidationError as exc:
            for e in exc.errors():  # put the original back where the schema refuses the poison
                loc, node, src = e["loc"], data, orig
                for part in loc[:-1]:
                    if not isinstance(node, dict | list) or (isinstance(src, dict) and part not in src):
                        break
                    node, src = node[part], src[part]  # type: ignore[index]
                else:
                    last = loc[-1]
                    if isinstance(src, dict | list) and (last in src if isinstance(src, dict) else True):
                        node[last] = src[last]  # type: ignore[index]
            data = json.loads(json.dumps(data))
    raise AssertionError("could not build a valid poisoned verdict")


def _no_command_lines(text: str, where: str) -> None:
    for line in text.splitlines():
        s = line.lstrip()
        assert not s.startswith("::") and "##[" not in s, (where, line)


def test_every_output_of_a_poisoned_verdict_is_inert() -> None:
    """Attack: every string of a verdict (file names, messages, evidence names, blast radius, policy path)
    carries a newline, workflow commands, mentions, references, image/link syntax, raw HTML, the sticky
    comment's marker and a bidi override. No output may execute any of it."""
    from fasttrack.github import markdown as gmd
    from fasttrack.render import markdown as vmd
    from fasttrack.render.text import render as text

    v = poisoned_verdict()
    outputs = {"text": text(v, verbose=True), "text-short": text(v),  # type: ignore[arg-type]
               "verify markdown": vmd.render(v),  # type: ignore[arg-type]
               "comment": gmd.render(v, gmd.Outcome(eligible=False), limit=gmd.COMMENT_LIMIT,  # type: ignore[arg-type]
                                     marker=gmd.STICKY_MARKER)}
    import re

    for where, out in outputs.items():
        assert "forged" in out, where  # shown, not dropped
        assert "\u202e" not in out and "\r" not in out, where
        if where.startswith("text"):  # printed to the log: no command at a line start, no legacy `##[`
            _no_command_lines(out, where)
    for where in ("verify markdown", "comment"):
        # Inside the envelope's ```json fence nothing renders (JSON strings hold no newline to close it).
        out = re.sub(r"(?ms)^```json$.*?^```$", "", outputs[where])
        for line in out.splitlines():
            assert not line.lstrip().startswith("::"), (where, line)
        for live in ("<img", "![i](", "[l](", "@maintainers", "#12", "http://evil"):
            assert live not in out, (where, live)
        # only our own marker, once: a forged one would make the sticky-comment finder pick this body
        assert out.count("<!--") == out.count(gmd.STICKY_MARKER) == (where == "comment"), where


_WARN_SCRIPT = """
import sys, warnings
import fasttrack.loading as loading
from fasttrack.cli import main
real = loading.parse_toml_text
def warn_then_parse(text, path, what):
    warnings.warn_explicit("invalid escape sequence '\\\\d'", SyntaxWarning,
                           filename="kimi_k3/x\\n::error title=pwned::forged.py", lineno=1)
    return real(text, path, what)
loading.parse_toml_text = warn_then_parse
main(["verify", "--policy", sys.argv[1]])
"""


def test_a_python_warning_naming_an_attacker_path_is_one_inert_line(tmp_path: Path) -> None:
    """Attack: Python prints warnings raw to stderr as `FILE:LINE: Category: message`. `ast.parse(text,
    filename=path)` of a PR file warns with the PR's own file name (on 3.12+ a SyntaxWarning for an invalid
    escape, shown by default), so a file named `x\\n::error::...` started a workflow command. Simulated
    with exactly that warning, raised while fasttrack loads the policy (in a subprocess: pytest records
    warnings itself)."""
    import os

    policy = tmp_path / "p.toml"
    policy.write_text("not = [valid\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", _WARN_SCRIPT, str(policy)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "SyntaxWarning" in proc.stderr and "forged" in proc.stderr, proc.stderr
    for line in proc.stderr.splitlines():
        assert not line.lstrip().startswith("::"), line


def test_report_refuses_a_verdict_with_duplicate_keys(tmp_path: Path) -> None:
    import json

    v = json.loads((ROOT / "tests/data/verdict_sample.json").read_text(encoding="utf-8"))
    text = json.dumps(v)[:-1] + ', "model": "another_model"}'
    (tmp_path / "v.json").write_text(text, encoding="utf-8")
    proc = _ft("report", "--verdict", str(tmp_path / "v.json"), "-o", str(tmp_path / "site"))
    assert proc.returncode == 2 and "duplicate key 'model'" in proc.stderr, proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_output_into_the_evidence_directory_is_refused(tmp_path: Path) -> None:
    """Attack (a CI script or Makefile with a hostile or mistaken -o): `verify -o <bundle>/statement.json`
    overwrote the signed statement it had just judged. Run on a copy of the bundle (--evidence), so a
    regression destroys only the copy."""
    import shutil

    bundle = tmp_path / "bundle"
    shutil.copytree(ROOT / "evidence/kimi_k3", bundle)
    before = (bundle / "statement.json").read_bytes()
    proc = _ft("verify", "--evidence", str(bundle), "-f", "json", "-o", str(bundle / "statement.json"))
    assert proc.returncode == 2, proc.stderr
    assert "evidence bundle" in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert (bundle / "statement.json").read_bytes() == before


def test_output_into_the_default_bundle_or_through_a_symlink_is_refused(tmp_path: Path) -> None:
    """The default bundle (no --evidence) is only known after the run: the same check on the verdict's
    bundle_path, relative to its repo; a symlink pointing into the bundle is caught too."""
    from fasttrack.commands.verify import evidence_dirs, refuse_output_in_evidence
    from fasttrack.errors import InputError
    from fasttrack.verdict import EvidenceSummary, Verdict

    (tmp_path / "evidence" / "k").mkdir(parents=True)
    v = Verdict(tool_version="0", verdict="pass", mode="contribution", repo=str(tmp_path),
                evidence=EvidenceSummary(present=True, bundle_path="evidence/k"), generated_at="now")
    dirs = evidence_dirs(v)
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "evidence" / "k" / "statement.json")
    for target in (tmp_path / "evidence" / "k" / "v.json", link):
        with pytest.raises(InputError, match="inside the evidence bundle"):
            refuse_output_in_evidence(target, dirs)
    refuse_output_in_evidence(tmp_path / "verdict.json", dirs)  # beside it is fine


def test_a_manifest_with_a_million_grid_points_is_refused_at_once(tmp_path: Path) -> None:
    """Attack: grid_batches and grid_contexts of 1000 values each (10^6 envelope points, a 20 kB manifest).
    verify expanded them for over two minutes in 1.3 GiB before answering; now the manifest is refused."""
    import shutil
    import time

    contrib = tmp_path / "kimi_k3"
    shutil.copytree(ROOT / "kernels/kimi_k3", contrib)
    toml = contrib / "fasttrack.toml"
    text = toml.read_text(encoding="utf-8")
    subs = [  # whatever the reference manifest's envelope is today
        (r"(?m)^batch = \{[^}]*\}$", "batch = { min = 1, max = 100000 }"),
        (r"(?m)^context = \{[^}]*\}$", "context = { min = 1, max = 1000000 }"),
        (r"(?m)^grid_batches = \[[^\]]*\]$", f"grid_batches = {list(range(1, 1001))}"),
        (r"(?m)^grid_contexts = \[[^\]]*\]$", f"grid_contexts = {[10 * i for i in range(1, 1001)]}"),
    ]
    for pattern, repl in subs:
        text, n = re.subn(pattern, repl, text)
        assert n == 1, pattern
    toml.write_text(text, encoding="utf-8")
    start = time.monotonic()
    proc = _ft("verify", str(contrib), "-q")
    assert time.monotonic() - start < 60
    assert proc.returncode == 2, proc.stderr
    assert "over the cap" in proc.stderr and "fasttrack.toml" in proc.stderr, proc.stderr
