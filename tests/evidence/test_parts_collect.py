"""`fasttrack collect --tp N`: collect a part of the evidence (the points at some TP sizes) on CPU."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from collect_toy import make_toy, options, toy_policy

from fasttrack.errors import InputError
from fasttrack.evidence.collect import (
    CollectOptions,
    NullProgress,
    build_grid,
    bundle_files,
    collect,
    default_work_dir,
    resolve_bundle_name,
)
from fasttrack.manifest import load_manifest


def toy_tp12(tmp: Path) -> Path:
    toy = make_toy(tmp)
    manifest = toy / "fasttrack.toml"
    manifest.write_text(manifest.read_text().replace("tp = [1]", "tp = [1, 2]"))
    return toy


def test_the_tp_filter_keeps_its_points_and_records_the_others_as_elsewhere(tmp_path: Path) -> None:
    manifest = load_manifest(toy_tp12(tmp_path))
    full = build_grid(manifest, "cpu", "0.0", None, gpu_count=2)
    assert {p["tp"] for p in full.here} == {1, 2} and len(full.here) == 12
    one = build_grid(manifest, "cpu", "0.0", None, gpu_count=1, tp_filter=[1])
    assert {p["tp"] for p in one.here} == {1} and len(one.here) == 6
    filtered = [(p, why) for p, why in one.elsewhere if p["gpu"] == "cpu"]
    assert len(filtered) == 6 and {p["tp"] for p, _ in filtered} == {2}
    # The filter's reason, not "too few GPUs": the point belongs to another part.
    assert {why for _, why in filtered} == {
        "tp=2: collected in another bundle (--tp filter: this part has tp 1)"}
    two = build_grid(manifest, "cpu", "0.0", None, gpu_count=2, tp_filter=[2])
    assert {p["tp"] for p in two.here} == {2}
    assert sum("collected in another bundle" in why for _, why in two.elsewhere) == 6
    # Other hardware keeps its own reason.
    assert sum("NVIDIA B200" in why for _, why in two.elsewhere) == 12
    too_few = build_grid(manifest, "cpu", "0.0", None, gpu_count=1, tp_filter=[2])
    assert too_few.here == [] and sum("this machine has 1" in why for _, why in too_few.elsewhere) == 6
    # Which TP sizes the filter leaves to other parts (none without a filter).
    assert (full.other_parts_tp, one.other_parts_tp, two.other_parts_tp) == (
        frozenset(), frozenset({2}), frozenset({1}))


@pytest.mark.parametrize(("tp_filter", "single_process"), [([2], False), ([1], True), ([], True)],
                         ids=["tp2-part", "tp1-part", "full"])
def test_a_part_without_tp1_leaves_the_single_process_tests_to_the_tp1_part(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tp_filter: list[int], single_process: bool) -> None:
    """The one-process pytest run (every test that takes no envelope point, plus the tp-1 points) belongs to
    the part with tp 1; a tp-2 part ran it again on one GPU of its box, 57 s of the reference's 177 s."""
    from fasttrack.evidence import collect as collect_mod

    toy = toy_tp12(tmp_path)
    manifest = load_manifest(toy)
    work = collect_mod.WorkDir(tmp_path / "work")
    work.root.mkdir()
    grid = build_grid(manifest, "cpu", "0.0", None, gpu_count=2, tp_filter=tp_filter)
    run = collect_mod.Run(opts=options(tmp_path, toy), manifest=manifest, contribution=toy, work=work,
                          env={}, progress=NullProgress(), backend="cpu", grid=grid)
    calls: list[list[str]] = []

    def fake_pytest(run: Any, argv: list[str], watch: Path) -> int:
        calls.append(argv)
        return 0

    monkeypatch.setattr(collect_mod, "_run_pytest", fake_pytest)
    collect_mod.phase_tests(run, hw_count=2)
    single = [a for a in calls if "torch.distributed.run" not in " ".join(a)]
    ranked = [a for a in calls if "torch.distributed.run" in " ".join(a)]
    assert len(single) == (1 if single_process else 0)
    assert len(ranked) == (0 if tp_filter == [1] else 1)
    assert run.reports[-1].status == "ran"
    if not single_process:
        assert "tp 1 and the tests without an envelope point left to the tp-1 part" in run.reports[-1].detail


def test_part_names_and_files(tmp_path: Path) -> None:
    toy = tmp_path / "toy"
    assert bundle_files("statement") == ("statement.json", "statement.json.sig", {
        "tests": "pytest.log", "bench": "bench.log", "evals": "evals.log", "sanitizer": "sanitizer.log"})
    statement, sig, logs = bundle_files("statement.tp2")
    assert (statement, sig, logs["tests"]) == ("statement.tp2.json", "statement.tp2.json.sig",
                                                "statement.tp2.pytest.log")
    assert resolve_bundle_name(CollectOptions(contribution=toy), [1, 2]) == "statement"
    assert resolve_bundle_name(CollectOptions(contribution=toy, tp=(2,)), [1, 2]) == "statement.tp2"
    # A filter that keeps every TP size is a full bundle.
    assert resolve_bundle_name(CollectOptions(contribution=toy, tp=(2, 1)), [1, 2]) == "statement"
    assert resolve_bundle_name(CollectOptions(contribution=toy, tp=(2,), bundle_name="h200x2.json"),
                               [1, 2]) == "h200x2"
    for bad in ("../x", "a/b", ".hidden", "", "x.sig"):
        with pytest.raises(InputError, match="not a bundle name"):
            resolve_bundle_name(CollectOptions(contribution=toy, bundle_name=bad), [1])
    assert default_work_dir("kimi_k3", (2,)).name == "kimi_k3.tp2"
    assert default_work_dir("kimi_k3").name == "kimi_k3"


def test_a_tp_size_outside_the_envelope_is_an_input_error(tmp_path: Path) -> None:
    toy = toy_tp12(tmp_path)
    with pytest.raises(InputError, match=r"tp 4 is not in the envelope's tp \[1, 2\]"):
        collect(options(tmp_path, toy, tp=(4,)), NullProgress())


@pytest.mark.slow
def test_collecting_a_part_writes_its_own_files_beside_the_other_part(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from fasttrack.evidence.loader import load_evidence

    toy = toy_tp12(tmp_path)
    out = tmp_path / "evidence" / "toy"
    out.mkdir(parents=True)
    (out / "pytest.log").write_text("another part's log\n")
    progress = NullProgress()
    result = collect(options(tmp_path, toy, tp=(1,), phases=("tests", "bench")), progress)
    assert result.statement_path == out / "statement.tp1.json"
    assert (out / "pytest.log").read_text() == "another part's log\n"  # not clobbered
    loaded = load_evidence(out)
    assert loaded is not None
    (part,) = loaded.parts
    assert part.name == "statement.tp1.json" and part.problems == ()
    st = part.statement
    assert st is not None
    assert set(st.predicate.logs) == {"statement.tp1.pytest.log", "statement.tp1.bench.log"}
    assert all(part.log_digests[n] == d for n, d in st.predicate.logs.items())
    tests = [t for t in st.predicate.kernel_tests if t.point is not None]
    assert tests and {t.point.tp for t in tests if t.point} == {1}
    timed = [b for b in st.predicate.benchmarks if b.not_run is None]
    assert len(timed) == 6 and {b.point.tp for b in timed} == {1}
    elsewhere = {b.not_run for b in st.predicate.benchmarks if b.point.tp == 2 and b.point.gpu == "cpu"}
    assert elsewhere == {"tp=2: collected in another bundle (--tp filter: this part has tp 1)"}
    state = json.loads((tmp_path / "work" / "state.json").read_text())
    assert state["tp"] == [1]
    # The same work dir under another filter starts fresh (it keys on the filter).
    again = NullProgress()
    collect(options(tmp_path, toy, tp=(1, 2), phases=("evals",)), again)
    assert any("starting fresh" in m for m in again.messages)
    assert any("also holds statement.tp1.json" in m for m in again.messages)
    assert (out / "statement.json").is_file() and (out / "statement.tp1.json").is_file()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")
def test_cli_collects_a_named_part_and_signs_it(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from fasttrack.evidence.signing import verify_signature

    toy = toy_tp12(tmp_path)
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    out = tmp_path / "evidence" / "toy"
    proc = subprocess.run(
        [sys.executable, "-m", "fasttrack", "collect", str(toy), "--out", str(out), "--phases", "evals",
         "--tp", "1", "--bundle-name", "part-a", "--work-dir", str(tmp_path / "work"),
         "--sign-key", str(key), "--principal", "dev@example.org", "--policy", str(toy_policy(tmp_path))],
        capture_output=True, text=True, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("dev@example.org "))
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(line + "\n", encoding="utf-8")
    assert (out / "part-a.evals.log").is_file() and not (out / "statement.json").exists()
    verdict = verify_signature(out / "part-a.json", out / "part-a.json.sig", allowed)
    assert verdict.valid, verdict.reason
