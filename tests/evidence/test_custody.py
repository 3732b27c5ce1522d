"""Custody of every phase's results (CPU): the statement is built from what the collecting run read right
after each phase, never from the work dir at the end, and a part resumed from an earlier run is FT349.

Each attack is contribution code of a later phase rewriting an earlier phase's results on disk: the evals
rewriting the contribution pass's benchmark files (a faster fused) or the kernel tests' results (a failing
test made to pass), within one run and across runs. Honest twins: one fresh run records custody
"this-run" for every part; `--phase-limit` bounds a phase inside the one run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from collect_toy import make_toy, options

from fasttrack.errors import InputError
from fasttrack.evidence.bundle import Statement
from fasttrack.evidence.collect import NullProgress, collect
from fasttrack.evidence.collect_cli import parse_phase_limits

pytest.importorskip("torch")

# Evals that rewrite what the earlier phases left in the work dir: every benchmark result file's fused
# samples become 1 us, every kernel test result says it passed with error 0.
REWRITING_EVALS = '''
import json
import sys
from pathlib import Path


def run_evals(device):
    spec = json.loads(Path(sys.argv[-1]).read_text())
    work = Path(spec["out"]).parent
    for f in (work / "bench").glob("*.json"):
        data = json.loads(f.read_text())
        fused = data.get("variants", {}).get("fused")
        if fused:
            fused["samples_us"] = [1.0 for _ in fused["samples_us"]]
            f.write_text(json.dumps(data))
    tests = work / "tests.jsonl"
    if tests.is_file():
        lines = [json.loads(x) for x in tests.read_text().splitlines() if x.strip()]
        for line in lines:
            line["outcome"] = "passed"
            line["max_error"] = 0.0
            line["note"] = "rewritten"
        tests.write_text("".join(json.dumps(x) + "\\n" for x in lines))
    return [{"name": "toy_max_abs_error", "value": 0.0, "threshold": 1e-4, "direction": "max"}]
'''

FAILING_TEST = '''
def test_fused_matches_stock(envelope_point, fasttrack_record):
    fasttrack_record(max_error=1.0, tolerance=1e-4, rows=envelope_point["batch"])
    assert False, "the fused kernel is wrong"
'''


def _run(toy: Path, tmp: Path, **kw: object) -> Statement:
    res = collect(options(tmp, toy, **kw), NullProgress())
    return Statement.model_validate_json(res.statement_path.read_bytes())


def _fused_medians(st: Statement) -> list[float]:
    out = []
    for b in st.predicate.benchmarks:
        if b.not_run is None and "fused" in b.variants:
            s = sorted(b.variants["fused"].samples_us)
            out.append(s[len(s) // 2])
    return out


@pytest.mark.slow
def test_evals_rewriting_benchmark_and_test_files_change_nothing_in_one_run(tmp_path: Path) -> None:
    toy = make_toy(tmp_path)
    (toy / "evals.py").write_text(REWRITING_EVALS, encoding="utf-8")
    (toy / "tests" / "test_toy.py").write_text(FAILING_TEST, encoding="utf-8")
    st = _run(toy, tmp_path, phases=("tests", "bench", "evals"), points_limit=1)
    assert _fused_medians(st) and min(_fused_medians(st)) > 1.0  # the statement's, not the rewritten file's
    assert st.predicate.kernel_tests and all(t.outcome == "failed" for t in st.predicate.kernel_tests)
    assert st.predicate.collector is not None
    assert st.predicate.collector.custody == {"bench": "this-run", "environment": "this-run",
                                              "evals": "this-run", "tests": "this-run"}
    # ... and the rewrite did happen on disk (the attack is real)
    assert "rewritten" in (tmp_path / "work" / "tests.jsonl").read_text()


@pytest.mark.slow
def test_rewritten_results_are_never_resumed_into_a_clean_looking_statement(tmp_path: Path) -> None:
    # Run 1: tests, bench, evals (the evals rewrite the files). Run 2 resumes: the benchmark is measured
    # again (never resumed), the resumed tests are marked "resumed" (FT349), never "this-run".
    toy = make_toy(tmp_path)
    (toy / "evals.py").write_text(REWRITING_EVALS, encoding="utf-8")
    (toy / "tests" / "test_toy.py").write_text(FAILING_TEST, encoding="utf-8")
    _run(toy, tmp_path, phases=("tests", "bench", "evals"), points_limit=1)
    st = _run(toy, tmp_path, phases=("tests", "bench"), points_limit=1)
    assert min(_fused_medians(st)) > 1.0
    assert st.predicate.collector is not None and st.predicate.collector.custody is not None
    assert st.predicate.collector.custody["tests"] == "resumed"
    assert st.predicate.collector.custody["environment"] == "resumed"
    assert st.predicate.collector.custody["bench"] == "this-run"
    # an assemble-only statement is resumed through and through
    st = _run(toy, tmp_path, phases=("tests", "bench"), points_limit=1, assemble_only=True)
    assert st.predicate.collector is not None and st.predicate.collector.custody is not None
    assert set(st.predicate.collector.custody.values()) == {"resumed"}
    assert not [b for b in st.predicate.benchmarks if b.not_run is None]  # no bench figures from disk


@pytest.mark.slow
def test_a_phase_limit_interrupts_the_phase_and_the_run_goes_on(tmp_path: Path) -> None:
    toy = make_toy(tmp_path)
    (toy / "evals.py").write_text("import time\n\ndef run_evals(device):\n    time.sleep(600)\n",
                                  encoding="utf-8")
    t0 = time.monotonic()
    res = collect(options(tmp_path, toy, phases=("bench", "evals"), points_limit=1,
                          phase_limits={"evals": 3.0}), NullProgress())
    assert time.monotonic() - t0 < 400  # far below the 600 s the evals would sleep (loaded 2-core CI)
    status = {r.phase: r.status for r in res.reports}
    assert status == {"bench": "ran", "evals": "failed"}
    assert "time limit" in (tmp_path / "work" / "evals.log").read_text()
    st = Statement.model_validate_json(res.statement_path.read_bytes())
    assert [b for b in st.predicate.benchmarks if b.not_run is None]  # what finished is kept


@pytest.mark.parametrize("raw", [["bench"], ["bench=0"], ["bench=-1"], ["nope=3"], ["bench=nan"], ["=4"]])
def test_a_bad_phase_limit_names_the_option(raw: list[str]) -> None:
    with pytest.raises(InputError) as err:
        parse_phase_limits(raw)
    assert err.value.field == "--phase-limit"


def test_phase_limits_parse() -> None:
    assert parse_phase_limits(["tests=130", "bench=280.5"]) == {"tests": 130.0, "bench": 280.5}
