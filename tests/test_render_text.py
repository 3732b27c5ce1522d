"""The terminal report (fasttrack/render/text.py): the README's three questions in order, one summary line for
the files that land in the model's own zone, a fix once per rule, and untrusted text escaped."""

from __future__ import annotations

from fasttrack.findings import Finding
from fasttrack.render.text import render
from fasttrack.verdict import ChangedFile, ChangeStatus, ClaimResult, EvidencePart, EvidenceSummary, Verdict

FIX = "move the change into the model's own package"


def verdict() -> Verdict:
    files = [ChangedFile(path=f"kernels/kimi_k3/f{i}.py", status=ChangeStatus.ADDED, zone="model-local",
                         zone_kind="model-local", engine_path=f"vllm/models/kimi_k3/nvidia/fast/f{i}.py")
             for i in range(73)]
    files.append(ChangedFile(path="vllm/v1/sampler.py", status=ChangeStatus.MODIFIED, zone="shared-core",
                             zone_kind="forbidden"))
    files.append(ChangedFile(path="kernels/kimi_k3/evil\nPASS: all good", status=ChangeStatus.ADDED,
                             zone="model-local", zone_kind="model-local"))
    findings = [Finding.error("FT102", f"change {i} outside the model", path=f"vllm/v1/x{i}.py", fix=FIX)
                for i in range(3)]
    findings += [Finding.error("FT201", "tp 8 is outside the policy's bound", fix="declare tp <= 2"),
                 Finding.error("FT302", "the evidence is stale", fix="re-collect"),
                 Finding.warning("FT120", "patches \x1b[2Jtriton", path="kernels/kimi_k3/conftest.py")]
    evidence = EvidenceSummary(
        bundle_path="evidence/kimi_k3", present=True, fresh=False, signer="dev@example.org",
        collected_at="2026-11-30", parts=[EvidencePart(file="statement.tp1.json", signer="dev@example.org",
                                                       fresh=False, points_by_tp={"1": 10})],
        claims=[ClaimResult(name="b1-32k", claimed=1.5, median_ratio=2.3, ci_low=2.2, ci_high=2.4, holds=True,
                            point={"batch": 1, "context": 32768})])
    return Verdict(tool_version="0", verdict="fail", mode="contribution", model="kimi_k3",
                   contribution="kimi_k3", changed_files=files, findings=findings, evidence=evidence,
                   envelope={"tp": [1, 2], "batch": {"min": 1, "max": 64}}, generated_at="2026-12-01")


def test_sections_come_in_the_readme_order_with_their_findings() -> None:
    text = render(verdict())
    at = {name: text.index(name) for name in ("1. Confinement", "2. Envelope", "3. Evidence")}
    assert at["1. Confinement"] < at["2. Envelope"] < at["3. Evidence"]
    assert at["1. Confinement"] < text.index("FT102") < at["2. Envelope"]
    assert at["2. Envelope"] < text.index("FT201") < at["3. Evidence"]
    assert at["3. Evidence"] < text.index("FT302")
    assert "claim b1-32k: 1.50x claimed, 2.30x (CI 2.20-2.40) measured" in text
    assert "part statement.tp1.json: dev@example.org, STALE" in text and "TP 1: 10 points" in text
    assert "batch: min=1, max=64" in text


def test_lands_at_lines_become_one_summary_line_unless_verbose() -> None:
    text = render(verdict())
    assert "lands at" not in text
    assert "73 in [model-local], landing under vllm/models/kimi_k3/nvidia/fast/" in text
    assert "vllm/v1/sampler.py" in text  # a file outside the model's zone keeps its own line
    verbose = render(verdict(), verbose=True)
    assert verbose.count("lands at") == 73


def test_a_fix_is_shown_once_per_rule() -> None:
    assert render(verdict()).count(f"fix: {FIX}") == 1
    assert render(verdict(), verbose=True).count(f"fix: {FIX}") == 3


def test_untrusted_text_is_escaped() -> None:
    text = render(verdict())
    assert "evil\\x0aPASS: all good" in text  # an odd name is shown even in the summary view, escaped
    assert not any(line.startswith("PASS: all good") for line in text.splitlines())
    assert "\x1b" not in text and "patches \\x1b[2Jtriton" in text
