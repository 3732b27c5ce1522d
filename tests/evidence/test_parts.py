"""Evidence collected in parts: several signed statements in one evidence directory, judged together.

The envelope is tp [1, 2] on one GPU kind. Part 1 (`statement.json`, a 1-GPU machine) holds the tp-1
kernel tests and benchmarks, the evals and the sanitizer runs, and records the tp-2 points as collected in
another bundle; part 2 (`statement.tp2.json`, a 2-GPU machine) holds the tp-2 points only. Each part is
signed on its own; coverage, claims and plausibility are judged over both.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from bundle_factory import (
    GRID_BATCHES,
    GRID_CONTEXTS,
    HAVE_SSH_KEYGEN,
    MANIFEST,
    TEST_FUNCTIONS,
    TP2_CLAIM,
    BundleFixture,
    benchmark,
    codes,
    errors,
    kernel_tests,
    new_fixture,
    point,
    run_all,
    run_rule,
    samples,
)
from typer.testing import CliRunner

from fasttrack.cli import app
from fasttrack.evidence import analysis as an
from fasttrack.evidence.digest import contribution_digest
from fasttrack.evidence.loader import load_evidence
from fasttrack.evidence.signing import sign_file, verify_signature
from fasttrack.evidence.summary import summarize
from fasttrack.findings import Severity
from fasttrack.github import markdown as github_md
from fasttrack.render import markdown as verify_md
from fasttrack.verdict import EvidenceSummary, Verdict

pytestmark = pytest.mark.skipif(not HAVE_SSH_KEYGEN, reason="needs ssh-keygen (openssh-client)")

PART2 = "statement.tp2.json"
PART2_LOG = "statement.tp2.pytest.log"
FILTERED = "tp={tp}: collected in another bundle (--tp filter: this part has tp {mine})"
TP2_POINTS = [f"NVIDIA H200 tp=2 batch={b} context={c} bfloat16" for b in GRID_BATCHES for c in GRID_CONTEXTS]
TP1_POINTS = [p.replace("tp=2", "tp=1") for p in TP2_POINTS]


class Parts:
    """Two parts of one bundle: `one` (statement.json) and `two` (statement.tp2.json), as dicts."""

    def __init__(self, tmp_path: Path) -> None:
        fx = new_fixture(tmp_path, signed=False)
        fx.set_manifest(MANIFEST.replace("tp = [1]", "tp = [1, 2]") + TP2_CLAIM)
        self.fx: BundleFixture = fx
        base = fx.good_statement()  # digest and manifest sha of the tp [1, 2] manifest
        one = copy.deepcopy(base)
        p1 = one["predicate"]
        p1["collector"]["command"] = "fasttrack collect kernels/demo --tp 1"
        p1["benchmarks"] += [{"point": point(b, c, tp=2), "not_run": FILTERED.format(tp=2, mine=1)}
                             for b in GRID_BATCHES for c in GRID_CONTEXTS]
        two = copy.deepcopy(base)
        p2 = two["predicate"]
        p2["collector"].update(command="fasttrack collect kernels/demo --tp 2 --phases tests,bench",
                               hostname="gpu-box-2")
        p2["environment"].update(gpu_count=2, interconnect="\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X")
        p2["kernel_tests"] = [
            {"nodeid": f"{fn}[NVIDIA_H200-tp2-b{b}-c{c}-bfloat16]", "point": point(b, c, tp=2),
             "outcome": "passed", "max_error": 2e-3, "tolerance": 2e-2, "duration_s": 0.7,
             "extra": {"world_size": 2}}
            for b in GRID_BATCHES for c in GRID_CONTEXTS for fn in TEST_FUNCTIONS]
        p2["benchmarks"] = [self.tp2_benchmark(b) for b in GRID_BATCHES]
        p2["benchmarks"] += [{"point": point(b, c), "not_run": FILTERED.format(tp=1, mine=2)}
                             for b in GRID_BATCHES for c in GRID_CONTEXTS]
        p2["evals"], p2["sanitizer"], p2["lm_eval"] = [], [], []
        log = b"===== 12 passed (tp=2, 2 ranks) =====\n"
        (fx.bundle / PART2_LOG).write_bytes(log)
        p2["logs"] = {PART2_LOG: hashlib.sha256(log).hexdigest()}
        self.one, self.two = one, two

    @staticmethod
    def tp2_benchmark(batch: int) -> dict[str, Any]:
        b = benchmark(batch)
        b["point"] = point(batch, 128, tp=2)
        b["world_size"] = 2
        for v in b["variants"].values():
            v.update(gpus=2, bytes_moved=1.2e8, samples_us_rank0=samples(50.0),
                     samples_us_rank1=samples(50.0))
        return b

    def write(self, data: dict[str, Any], name: str, *, sign: bool = True) -> Path:
        path = self.fx.bundle / name
        path.write_bytes((json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
        if sign:
            sign_file(path, self.fx.key)
        return path

    def write_both(self) -> None:
        self.write(self.one, "statement.json")
        self.write(self.two, PART2)


@pytest.fixture
def parts(tmp_path: Path) -> Parts:
    p = Parts(tmp_path)
    p.write_both()
    return p


def by_code(found: list[Any], code: str) -> list[Any]:
    return [f for f in found if f.code == code]


# ------------------------------------------------------------------------------------------ loading

def test_every_statement_in_the_directory_is_a_part(parts: Parts) -> None:
    (parts.fx.bundle / "notes.json").write_text('{"not": "a statement"}\n')
    ev = load_evidence(parts.fx.bundle)
    assert ev is not None
    assert [p.name for p in ev.parts] == ["statement.json", PART2]
    assert all(p.problems == () and p.statement is not None for p in ev.parts)
    assert ev.statement_path == parts.fx.bundle / "statement.json"  # the primary part
    assert ev.merged is not None
    assert len(ev.merged.predicate.kernel_tests) == 2 * 12
    assert ev.part_of(ev.merged.predicate.kernel_tests[-1]).name == PART2  # type: ignore[union-attr]
    assert ev.unlisted_files == ("notes.json",)  # not a statement: a file the bundle does not bind


def test_a_broken_statement_part_is_reported_not_ignored(parts: Parts) -> None:
    (parts.fx.bundle / "statement.tp4.json").write_text('{"_type": ')
    found = run_rule("FT301", parts.fx.context())
    assert [f.evidence_file for f in found] == ["evidence/demo/statement.tp4.json"]
    assert "statement.tp4.json is not valid JSON" in found[0].message


# ------------------------------------------------------------------------------------------ judged together

def test_two_signed_parts_that_cover_the_envelope_pass_every_rule(parts: Parts) -> None:
    ctx = parts.fx.context()
    found = run_all(ctx)
    assert found == [], [(f.code, f.message, f.evidence_file) for f in found]
    assert all(c.covered for c in an.coverage(ctx)) and len(an.coverage(ctx)) == 12
    checks = {c.claim.name: c for c in an.claim_checks(ctx)}
    assert checks["fused-vs-stock-tp2-b1"].holds and checks["fused-vs-stock-b1"].holds
    summary = summarize(ctx)
    assert summary is not None and summary.signature_valid and summary.fresh
    assert summary.signer == "alice@example.com"
    assert len(summary.benchmarks) == 6


def test_a_missing_part_fails_coverage_for_exactly_its_points(parts: Parts) -> None:
    (parts.fx.bundle / PART2).unlink()
    (parts.fx.bundle / (PART2 + ".sig")).unlink()
    (parts.fx.bundle / PART2_LOG).unlink()
    found = run_all(parts.fx.context())
    assert codes(errors(found)) == {"FT304", "FT305", "FT308"}
    ft304 = by_code(found, "FT304")
    assert [f.message.split(":")[0] for f in ft304] == TP2_POINTS
    assert all(f"statement.json: {FILTERED.format(tp=2, mine=1)}" in f.message for f in ft304)
    assert all(f.evidence_file == "evidence/demo/statement.json" for f in ft304)
    ft305 = [f.message for f in by_code(found, "FT305")]
    assert [m.split(" (")[0] for m in ft305] == [
        "no accepted timed benchmark at batch 1 on NVIDIA H200 tp=2 bfloat16",
        "no accepted timed benchmark at batch 2 on NVIDIA H200 tp=2 bfloat16"]
    assert all("collected in another bundle (--tp filter" in m for m in ft305)
    assert [f.message.split(":")[0] for f in by_code(found, "FT308")] == [
        "claim 'fused-vs-stock-tp2-b1' cannot be recomputed"]


def test_the_other_part_missing_fails_its_points_and_the_evals(parts: Parts) -> None:
    for name in ("statement.json", "statement.json.sig", "pytest.log"):
        (parts.fx.bundle / name).unlink()
    found = run_all(parts.fx.context())
    assert [f.message.split(":")[0] for f in by_code(found, "FT304")] == TP1_POINTS
    assert all(f"{PART2}: {FILTERED.format(tp=1, mine=2)}" in f.message for f in by_code(found, "FT304"))
    assert {f.message.split(" (")[0] for f in by_code(found, "FT305")} == {
        f"no accepted timed benchmark at batch {b} on NVIDIA H200 tp=1 bfloat16" for b in (1, 2)}
    assert any("declares evals" in f.message for f in by_code(found, "FT314"))
    assert codes(found, Severity.WARNING) >= {"FT316"}  # no part ran the sanitizers
    assert codes(errors(found)) == {"FT304", "FT305", "FT308", "FT314"}


def test_a_tampered_part_fails_its_own_signature_only(parts: Parts) -> None:
    parts.two["predicate"]["benchmarks"][0]["variants"]["fused"]["samples_us"][0] = 1.0
    parts.write(parts.two, PART2, sign=False)  # edited after signing: the old signature stays
    found = run_all(parts.fx.context())
    assert codes(errors(found)) == {"FT303"}
    ft303 = by_code(found, "FT303")
    assert len(ft303) == 1 and ft303[0].evidence_file == f"evidence/demo/{PART2}.sig"
    assert ft303[0].message.startswith(f"{PART2}: evidence signature not accepted")
    assert f"fasttrack sign evidence/demo/{PART2}" in (ft303[0].fix or "")


def test_an_unsigned_part_fails_the_signature(parts: Parts) -> None:
    (parts.fx.bundle / (PART2 + ".sig")).unlink()
    found = run_rule("FT303", parts.fx.context())
    assert [(f.evidence_file, f.message) for f in found] == [
        (f"evidence/demo/{PART2}.sig", f"{PART2}: evidence signature not accepted: {PART2}.sig is missing")]


def test_a_stale_part_is_named(parts: Parts) -> None:
    kernel = parts.fx.contrib / "kernel.py"
    current = kernel.read_text()
    kernel.write_text("def fused(x):\n    return x + x\n")  # part 2 was collected over older code
    old = contribution_digest(parts.fx.contrib)
    kernel.write_text(current)
    parts.two["subject"][0]["digest"]["sha256"] = old.sha256
    parts.two["predicate"]["files"] = old.files
    parts.write(parts.two, PART2)
    found = run_all(parts.fx.context())
    assert codes(errors(found)) == {"FT302"}
    (stale,) = by_code(found, "FT302")
    assert stale.evidence_file == f"evidence/demo/{PART2}"
    assert f"part {PART2} was collected over" in stale.message and "kernel.py" in stale.message
    summary = summarize(parts.fx.context())
    assert summary is not None and summary.fresh is False and summary.changed_since == ["kernel.py"]


def test_a_point_in_two_parts_is_an_error_naming_both(parts: Parts) -> None:
    p2 = parts.two["predicate"]
    p2["kernel_tests"] += [t for t in kernel_tests() if t["point"] == point(1, 1)]
    p2["benchmarks"] = [b for b in p2["benchmarks"] if b["point"] != point(1, 128)] + [benchmark(1)]
    parts.write(parts.two, PART2)
    found = run_all(parts.fx.context())
    assert codes(errors(found)) == {"FT301"}
    assert sorted(f.message for f in by_code(found, "FT301")) == [
        "NVIDIA H200 tp=1 batch=1 context=1 bfloat16: kernel tests in 2 parts (statement.json, "
        "statement.tp2.json); each point must be evidenced by exactly one part",
        "NVIDIA H200 tp=1 batch=1 context=128 bfloat16: a timed benchmark in 2 parts (statement.json, "
        "statement.tp2.json); each point must be evidenced by exactly one part"]


def test_parts_collected_under_different_manifests_fail_ft321(parts: Parts) -> None:
    parts.two["predicate"]["manifest_sha256"] = hashlib.sha256(b"another fasttrack.toml").hexdigest()
    parts.write(parts.two, PART2)
    found = run_all(parts.fx.context())
    assert codes(errors(found)) == {"FT321"}
    (f,) = by_code(found, "FT321")
    assert f.evidence_file == f"evidence/demo/{PART2}"
    assert f.message.startswith(f"{PART2} was collected under")


def test_each_part_is_judged_against_its_own_machine(parts: Parts) -> None:
    # Part 1 ran on one GPU: fine for its tp-1 points. Part 2's machine with one GPU cannot have run tp 2.
    parts.two["predicate"]["environment"].update(gpu_count=1, interconnect=None)
    # Part 2's L2 is larger than the flush it recorded: judged against part 2's environment only.
    parts.two["predicate"]["environment"]["l2_bytes"] = 512 << 20
    parts.write(parts.two, PART2)
    found = run_all(parts.fx.context())
    assert codes(errors(found)) == {"FT317", "FT319"}
    assert {f.evidence_file for f in by_code(found, "FT317")} == {f"evidence/demo/{PART2}"}
    assert "points at tp=2 but the machine has 1 GPUs" in {f.message for f in by_code(found, "FT317")}
    ft319 = by_code(found, "FT319")
    assert len(ft319) == 3 and all(f.point["tp"] == 2 and f.evidence_file == f"evidence/demo/{PART2}"
                                   for f in ft319)


def test_findings_about_a_record_name_its_part(parts: Parts) -> None:
    parts.two["predicate"]["kernel_tests"][0]["outcome"] = "failed"
    parts.two["predicate"]["benchmarks"][1]["variants"]["fused"]["samples_us"] = samples(150.0)
    parts.write(parts.two, PART2)
    found = run_all(parts.fx.context())
    # FT340 too: the failed record was a point test (it must pass at every point)
    assert {f.code for f in errors(found)} == {"FT304", "FT307", "FT310", "FT340"}
    for code in ("FT307", "FT310"):
        assert {f.evidence_file for f in by_code(found, code)} == {f"evidence/demo/{PART2}"}
    # Coverage is judged over the merged parts: the finding names the evidence directory.
    assert {f.evidence_file for f in by_code(found, "FT304")} == {"evidence/demo/"}


def test_a_part_log_edited_after_signing_is_found(parts: Parts) -> None:
    (parts.fx.bundle / PART2_LOG).write_text("edited\n")
    found = run_all(parts.fx.context())
    assert [(f.code, f.message) for f in errors(found)] == [
        ("FT320", f"log {PART2_LOG} does not match its sha256 in {PART2} (edited after signing)")]


def test_a_point_benchmarked_twice_in_one_bundle_is_an_error(tmp_path: Path) -> None:
    """A collector writes one benchmark record per point; a second one (e.g. a slower run dropped in favour
    of a faster copy, or both kept) is an edited bundle, and neither record is chosen."""
    fx = new_fixture(tmp_path, signed=False)
    fx.data = fx.good_statement()
    fast = benchmark(2, fused=20.0)
    fx.pred["benchmarks"].append(fast)
    fx.write_and_sign()
    found = by_code(run_all(fx.context()), "FT301")
    assert [f.message for f in found] == [
        "NVIDIA H200 tp=1 batch=2 context=128 bfloat16: 2 benchmark records in statement.json; "
        "a bundle holds one benchmark record per point"]


def test_a_single_bundle_is_unchanged(tmp_path: Path) -> None:
    fx = new_fixture(tmp_path)
    ev = load_evidence(fx.bundle)
    assert ev is not None and [p.name for p in ev.parts] == ["statement.json"]
    assert ev.merged is ev.statement
    assert an.statement_file(fx.context()) == "evidence/demo/statement.json"
    assert run_all(fx.context()) == []



# -------------------------------------------------------------------------------------- same stack (FT322)

def test_parts_on_the_same_stack_raise_no_ft322(parts: Parts) -> None:
    assert run_rule("FT322", parts.fx.context()) == []


def test_parts_on_different_torch_are_one_warning_naming_both(parts: Parts) -> None:
    parts.one["predicate"]["environment"]["torch"] = "2.11.0+cu130"
    parts.write(parts.one, "statement.json")
    found = run_all(parts.fx.context())
    assert errors(found) == [], [(f.code, f.message) for f in errors(found)]
    (f,) = by_code(found, "FT322")
    assert f.severity is Severity.WARNING
    assert f.message == ("parts were collected on different software: torch is 2.11.0+cu130 in "
                         f"statement.json but 2.13.0 in {PART2}")
    assert f.evidence_file == "evidence/demo/"
    assert f.fix and "same GPU kind, driver, CUDA, torch and triton" in f.fix


def test_each_differing_field_is_its_own_ft322_finding(parts: Parts) -> None:
    parts.two["predicate"]["environment"].update(driver="580.65", cuda="13.0", triton="3.5.0")
    parts.write(parts.two, PART2)
    found = run_rule("FT322", parts.fx.context())
    assert [f.message for f in found] == [
        f"parts were collected on different software: {name} is {a} in statement.json but {b} in {PART2}"
        for name, a, b in (("driver", "570.86", "580.65"), ("cuda", "12.8", "13.0"),
                           ("triton", "3.6.0", "3.5.0"))]
    assert all(f.severity is Severity.WARNING for f in found)


def test_a_field_one_part_does_not_record_is_not_compared(parts: Parts) -> None:
    parts.two["predicate"]["environment"]["triton"] = None
    parts.write(parts.two, PART2)
    assert run_rule("FT322", parts.fx.context()) == []
    parts.one["predicate"]["environment"]["triton"] = "3.7.0"  # one value recorded: nothing to compare
    parts.write(parts.one, "statement.json")
    assert run_rule("FT322", parts.fx.context()) == []


def test_a_bundle_of_one_part_never_raises_ft322(parts: Parts) -> None:
    parts.two["predicate"]["environment"]["torch"] = "2.11.0+cu130"
    parts.write(parts.two, PART2)
    assert len(run_rule("FT322", parts.fx.context())) == 1
    for name in (PART2, PART2 + ".sig", PART2_LOG):
        (parts.fx.bundle / name).unlink()
    assert run_rule("FT322", parts.fx.context()) == []


# ------------------------------------------------------------------------------------- the summary's parts

def verdict_with(summary: EvidenceSummary | None) -> Verdict:
    return Verdict(tool_version="0.1.0", verdict="pass", mode="contribution", contribution="kernels/demo",
                   evidence=summary, generated_at="2026-11-30T12:00:00Z")


def test_the_summary_lists_each_part_with_its_machine_and_points(parts: Parts) -> None:
    summary = summarize(parts.fx.context())
    assert summary is not None
    assert [p.file for p in summary.parts] == ["statement.json", PART2]
    one, two = summary.parts
    for p in (one, two):
        assert (p.signer, p.signature_valid, p.fresh) == ("alice@example.com", True, True)
        assert p.collected_at is not None and p.collected_at.startswith("20")
        assert p.machine is not None and (p.machine.gpu_name, p.machine.driver, p.machine.torch) == (
            "NVIDIA H200", "570.86", "2.13.0")
    assert one.machine is not None and (one.machine.gpu_count, one.machine.interconnect) == (1, None)
    assert two.machine is not None
    assert (two.machine.gpu_count, two.machine.interconnect) == (2, "GPU0-GPU1 NV18")
    # The tp-1 points in part 1 only, the tp-2 points in part 2 only (points left to the other part are not
    # evidenced by it).
    assert one.points_by_tp == {"1": 6} and two.points_by_tp == {"2": 6}
    assert one.points == sorted(f"NVIDIA H200|tp1|b{b}|c{c}|bfloat16"
                                for b in GRID_BATCHES for c in GRID_CONTEXTS)
    assert two.points == [k.replace("|tp1|", "|tp2|") for k in one.points]
    assert (one.kernel_tests, one.benchmarks, two.kernel_tests, two.benchmarks) == (12, 3, 12, 3)
    # The Verdict carries them through its JSON.
    v = verdict_with(summary)
    assert Verdict.model_validate_json(v.model_dump_json()) == v


def test_each_part_shows_its_own_signature_and_freshness(parts: Parts) -> None:
    (parts.fx.bundle / (PART2 + ".sig")).unlink()
    summary = summarize(parts.fx.context())
    assert summary is not None and summary.signature_valid is False
    one, two = summary.parts
    assert (one.signature_valid, one.signer) == (True, "alice@example.com")
    assert (two.signature_valid, two.signer) == (None, None)  # unsigned: no principal to show


def test_markdown_shows_a_table_of_the_parts(parts: Parts) -> None:
    summary = summarize(parts.fx.context())
    assert summary is not None
    when = [p.collected_at for p in summary.parts]
    text = verify_md.render(verdict_with(summary))
    assert "**Evidence in 2 parts** (<code>evidence/demo</code>)" in text
    signer = "alice@\u200bexample.com"  # @mentions broken, as everywhere
    assert [line for line in text.splitlines() if line.startswith("| <code>statement")] == [
        f"| <code>statement.json</code> | 1 × NVIDIA H200<br>driver 570.86, torch 2.13.0 | {signer} | valid "
        f"| fresh | {when[0]} | tp1: 6 |",
        f"| <code>statement.tp2.json</code> | 2 × NVIDIA H200 (GPU0-GPU1 NV18)<br>"
        "driver 570.86, torch 2.13.0 | "
        f"{signer} | valid | fresh | {when[1]} | tp2: 6 |"]


def test_the_pr_comment_shows_the_same_parts_table(parts: Parts) -> None:
    summary = summarize(parts.fx.context())
    assert summary is not None
    v = verdict_with(summary)
    rows = [line for line in verify_md.render(v).splitlines() if line.startswith("| <code>statement")]
    assert len(rows) == 2
    comment = github_md.render(v, github_md.Outcome(eligible=True), limit=github_md.COMMENT_LIMIT)
    assert [line for line in comment.splitlines() if line.startswith("| <code>statement")] == rows
    assert "**Evidence in 2 parts** (<code>evidence/demo</code>)" in comment


def test_a_single_bundle_has_one_part_and_the_same_markdown(tmp_path: Path) -> None:
    fx = new_fixture(tmp_path)
    summary = summarize(fx.context())
    assert summary is not None and [p.file for p in summary.parts] == ["statement.json"]
    (only,) = summary.parts
    assert only.machine is not None and (only.machine.gpu_name, only.machine.gpu_count) == ("NVIDIA H200", 1)
    assert only.points_by_tp == {"1": 6} and len(only.points) == 6
    assert (only.signer, only.signature_valid, only.fresh) == ("alice@example.com", True, True)
    # Nothing new in the Markdown for one part: the report is what it was before parts were listed.
    text = verify_md.render(verdict_with(summary))
    assert text == verify_md.render(verdict_with(summary.model_copy(update={"parts": []})))
    assert "parts" not in text


def test_a_verdict_without_parts_still_loads() -> None:
    old = verdict_with(EvidenceSummary(bundle_path="evidence/demo", present=True)).model_dump(mode="json")
    del old["evidence"]["parts"]  # a verdict written before the field existed
    assert Verdict.model_validate(old).evidence.parts == []  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------------ fasttrack sign

def test_sign_command_signs_a_given_statement_file(tmp_path: Path) -> None:
    p = Parts(tmp_path)
    p.write(p.one, "statement.json")
    path = p.write(p.two, PART2, sign=False)
    out = CliRunner().invoke(app, ["sign", str(path), "--key", str(p.fx.key), "--principal",
                                   "alice@example.com", "--allowed-signers",
                                   str(p.fx.policies / "allowed_signers")])
    assert out.exit_code == 0, out.output
    assert f"{PART2}.sig" in out.output and "verified:" in out.output
    assert verify_signature(path, path.with_name(PART2 + ".sig"), p.fx.policies / "allowed_signers").valid
    assert run_all(p.fx.context()) == []


TOPO_H200X2 = (  # `nvidia-smi topo -m` as recorded on the 2 x H200 box (underlined header included)
    "\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\t0-31\t0\t\tN/A\nGPU1\tNV18\t X \t0-31\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n"
)
TOPO_4 = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\n"
    "GPU0\t X \tNV4\tPIX\tSYS\t0-15\nGPU1\tNV4\t X \tPHB\tSYS\t0-15\n"
    "GPU2\tPIX\tPHB\t X \tNV2\t16-31\nGPU3\tSYS\tSYS\tNV2\t X \t16-31\n"
)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (TOPO_H200X2, "GPU0-GPU1 NV18"),
        (TOPO_4, "GPU0-GPU1 NV4, GPU0-GPU2 PIX, GPU0-GPU3 SYS, GPU1-GPU2 PHB, GPU1-GPU3 SYS, GPU2-GPU3 NV2"),
        ("nvidia-smi topo -m unavailable; peer access: [[true, true]]\n",
         "nvidia-smi topo -m unavailable; peer access: [[true, true]]"),
        ("\n  \n", None),
        (None, None),
    ],
    ids=["h200x2", "four-gpus", "peer-access-fallback", "blank", "none"],
)
def test_link_summary_reads_the_topology_matrix(text: str | None, want: str | None) -> None:
    from fasttrack.evidence.summary import link_summary

    assert link_summary(text) == want
