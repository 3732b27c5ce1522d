"""`fasttrack collect` end to end on CPU, over a toy contribution that follows the contract.

The toy declares two hardware kinds: `cpu` (present here, so its points are collected with the CPU backend)
and an NVIDIA B200 (absent, so its points must be recorded as not collected, never measured by proxy).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from collect_toy import make_toy, options, toy_policy

from fasttrack.errors import InputError
from fasttrack.evidence.bundle import Statement
from fasttrack.evidence.collect import NullProgress, WorkDir, build_grid, collect
from fasttrack.evidence.digest import contribution_digest, sha256_file
from fasttrack.evidence.loader import load_evidence
from fasttrack.manifest import load_manifest


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any]:
    tmp = tmp_path_factory.mktemp("collect")
    toy = make_toy(tmp)
    result = collect(options(tmp, toy), NullProgress())
    return tmp, toy, result


@pytest.mark.slow
def test_full_run_writes_a_bundle_the_loader_accepts(full_run: tuple[Path, Path, Any]) -> None:
    _, toy, result = full_run
    loaded = load_evidence(result.bundle_dir)
    assert loaded is not None and loaded.statement is not None
    assert loaded.problems == (), [p.message for p in loaded.problems]
    st = loaded.statement
    assert st.subject_digest == contribution_digest(toy).sha256
    pred = st.predicate
    assert pred.contribution == "toy" and pred.model == "toy"
    assert pred.manifest_sha256 == sha256_file(toy / "fasttrack.toml")
    assert pred.files == contribution_digest(toy).files
    assert pred.environment is not None and pred.environment.gpu_name == "cpu"
    assert {r.phase: r.status for r in result.reports} == {
        "tests": "ran", "bench": "ran", "evals": "ran", "sanitizer": "skipped"}
    for name, digest in pred.logs.items():
        assert sha256_file(result.bundle_dir / name) == digest
    assert set(pred.logs) == {"pytest.log", "bench.log", "evals.log", "sanitizer.log"} - {"sanitizer.log"}


@pytest.mark.slow
def test_kernel_tests_are_recorded_per_point(full_run: tuple[Path, Path, Any]) -> None:
    _, _, result = full_run
    st = Statement.model_validate_json(result.statement_path.read_bytes())
    tests = st.predicate.kernel_tests
    parametrized = [t for t in tests if t.point is not None]
    assert len(parametrized) == 6  # batches {1, 2, 4} x contexts {8, 16}, cpu only
    assert {(t.point.batch, t.point.context) for t in parametrized if t.point} == {
        (b, c) for b in (1, 2, 4) for c in (8, 16)}
    assert all(t.outcome == "passed" and t.tolerance == 1e-4 and t.max_error is not None
               for t in parametrized)
    assert all(t.point is not None and t.point.gpu == "cpu" for t in parametrized)
    assert [t.outcome for t in tests if t.point is None] == ["passed"]


@pytest.mark.slow
def test_benchmarks_hold_raw_samples_here_and_not_run_elsewhere(full_run: tuple[Path, Path, Any]) -> None:
    _, _, result = full_run
    st = Statement.model_validate_json(result.statement_path.read_bytes())
    here = [b for b in st.predicate.benchmarks if b.point.gpu == "cpu"]
    there = [b for b in st.predicate.benchmarks if b.point.gpu == "NVIDIA B200"]
    assert len(here) == 6 and len(there) == 6
    for b in here:
        assert b.not_run is None and b.rejected == []
        assert b.protocol is not None and b.protocol.fresh_inputs and b.protocol.iterations == 4
        assert b.protocol.orders == [["stock", "fused"], ["fused", "stock"]]
        assert b.protocol.timer == "perf_counter" and not b.protocol.graph_replay
        assert set(b.variants) == {"stock", "fused"}
        assert all(len(v.samples_us) == 4 for v in b.variants.values())
        assert all(a.ok and a.checked == 4 for a in b.accuracy.values())
    for b in there:
        assert b.variants == {} and b.not_run is not None and "needs NVIDIA B200" in b.not_run


@pytest.mark.slow
def test_evals_lm_eval_and_sanitizer_are_recorded_honestly(full_run: tuple[Path, Path, Any]) -> None:
    _, _, result = full_run
    pred = Statement.model_validate_json(result.statement_path.read_bytes()).predicate
    (ev,) = pred.evals
    assert ev.name == "toy_max_abs_error" and ev.direction == "max" and ev.passed()
    (lm,) = pred.lm_eval
    assert lm["metrics"] == {
        "gsm8k": {"exact_match,strict-match": 0.91, "exact_match_stderr,strict-match": 0.008}}
    assert lm["file"] == "lm_eval/results.json" and len(lm["sha256"]) == 64
    assert [s.tool for s in pred.sanitizer] == ["memcheck", "racecheck", "synccheck"]
    assert all(not s.ran and s.errors is None and s.reason == "no CUDA GPU on this machine"
               for s in pred.sanitizer)


@pytest.mark.slow
def test_an_interrupted_bench_phase_is_measured_whole_again(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # The bench phase is never resumed (a result file on disk could have been rewritten by contribution code
    # of a later phase: docs/evidence-collection.md, "Custody"): a run after a crash measures every point.
    toy = make_toy(tmp_path)
    log = tmp_path / "calls.log"
    monkeypatch.setenv("TOY_LOG", str(log))
    monkeypatch.setenv("TOY_CRASH_ONCE", str(tmp_path / "crashed.marker"))
    monkeypatch.setenv("TOY_NO_CASE_AT_MAX", "1")
    first = collect(options(tmp_path, toy, phases=("bench",)), NullProgress())
    (bench,) = first.reports
    assert bench.status == "failed" and "run again" in bench.detail
    st = Statement.model_validate_json(first.statement_path.read_bytes())
    unfinished = [b for b in st.predicate.benchmarks if b.point.gpu == "cpu" and b.not_run
                  and b.point.batch != 4]
    assert unfinished and all("did not finish" in (b.not_run or "") for b in unfinished)
    calls_before = log.read_text().split()
    second = collect(options(tmp_path, toy, phases=("bench",)), NullProgress())
    assert [r.status for r in second.reports] == ["ran"]
    calls_after = log.read_text().split()[len(calls_before):]
    every = {f"{b}x{c}" for b in (1, 2, 4) for c in (8, 16)}
    assert set(calls_after) == every  # measured again, whole
    st2 = Statement.model_validate_json(second.statement_path.read_bytes())
    cpu = {(b.point.batch, b.point.context): b for b in st2.predicate.benchmarks if b.point.gpu == "cpu"}
    # A candidates entry that returns nothing is the contribution's fault, not the machine's (FT341).
    assert cpu[(4, 8)].not_run_by == "contribution"
    assert "candidates entry returned NoneType" in (cpu[(4, 8)].not_run or "")
    assert all(cpu[(b, c)].not_run is None and cpu[(b, c)].variants for b in (1, 2) for c in (8, 16))
    assert st2.predicate.collector is not None and st2.predicate.collector.custody is not None
    assert st2.predicate.collector.custody["bench"] == "this-run"


def test_work_dir_resumes_only_for_the_same_code_and_settings(tmp_path: Path) -> None:
    work = WorkDir(tmp_path / "work")
    state = {"digest": "a" * 64, "iterations": 4}
    progress = NullProgress()
    assert work.prepare(state, resume=True, progress=progress) is False
    work.mark_done("evals", {"returncode": 0})
    assert work.prepare(state, resume=True, progress=progress) is True
    assert work.done("evals")
    assert work.prepare({**state, "digest": "b" * 64}, resume=True, progress=progress) is False
    assert not work.done("evals") and any("starting fresh" in m for m in progress.messages)
    work.mark_done("evals", {})
    assert work.prepare({**state, "digest": "b" * 64}, resume=False, progress=progress) is False
    assert not work.done("evals")  # --fresh discards what was there


def test_grid_keeps_batch_1_2_and_max_under_a_points_limit(tmp_path: Path) -> None:
    manifest = load_manifest(make_toy(tmp_path))
    grid = build_grid(manifest, "cpu", "0.0", points_limit=3)
    assert sorted(p["batch"] for p in grid.here) == [1, 2, 4]
    assert len(grid.elsewhere) == 6 + 3
    assert build_grid(manifest, "CPU", "0.0", None).here  # names match case-insensitively
    wrong_cc = build_grid(manifest, "cpu", "9.0", None)
    assert wrong_cc.here == [] and all("not collected here" in why for _, why in wrong_cc.elsewhere)


def test_bad_options_are_input_errors(tmp_path: Path) -> None:
    toy = make_toy(tmp_path)
    with pytest.raises(InputError, match="inside the contribution"):
        collect(options(tmp_path, toy, out=toy / "bundle"), NullProgress())
    with pytest.raises(InputError, match="unknown phase"):
        collect(options(tmp_path, toy, phases=("bench", "fuzz")), NullProgress())
    with pytest.raises(InputError, match="go together"):
        collect(options(tmp_path, toy, sign_key=tmp_path / "k"), NullProgress())
    with pytest.raises(InputError, match="at least 2"):
        collect(options(tmp_path, toy, iterations=1), NullProgress())


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")
def test_cli_collects_and_signs_with_an_ssh_key(tmp_path: Path) -> None:
    from fasttrack.evidence.signing import verify_signature

    toy = make_toy(tmp_path)
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    out = tmp_path / "evidence" / "toy"
    proc = subprocess.run(
        [sys.executable, "-m", "fasttrack", "collect", str(toy), "--out", str(out), "--phases", "evals",
         "--work-dir", str(tmp_path / "work"), "--sign-key", str(key), "--principal", "dev@example.org",
         "--policy", str(toy_policy(tmp_path))],
        capture_output=True, text=True, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "allowed-signers line" in proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("dev@example.org "))
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(line + "\n", encoding="utf-8")
    verdict = verify_signature(out / "statement.json", out / "statement.json.sig", allowed)
    assert verdict.valid and verdict.principal == "dev@example.org", verdict.reason


def test_cli_reports_a_missing_contribution_as_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "fasttrack", "collect", str(tmp_path / "nope")],
                          capture_output=True, text=True, cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("fasttrack: error:") and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_assemble_only_writes_what_was_recorded_and_runs_nothing(tmp_path: Path) -> None:
    """A lease can end mid-collection: --assemble-only bundles what the phases recorded, never more."""
    toy = make_toy(tmp_path)
    collect(options(tmp_path, toy, phases=("evals",)), NullProgress())
    progress = NullProgress()
    result = collect(options(tmp_path, toy, phases=("tests", "evals"), assemble_only=True), progress)
    statuses = {r.phase: r.status for r in result.reports}
    assert statuses == {"tests": "skipped", "evals": "resumed"}  # tests never ran, and still did not
    statement = Statement.model_validate_json(result.statement_path.read_bytes())
    assert statement.predicate.evals and not statement.predicate.kernel_tests
