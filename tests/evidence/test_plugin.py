"""fasttrack's pytest plugin: grid parametrization, recorded lines, skips without a grid, inert by default."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fasttrack.evidence.pytest_plugin import GridFileError, load_grid, point_id

pytest_plugins = ["pytester"]

POINTS = [
    {"gpu": "NVIDIA H200", "tp": 1, "batch": 1, "context": 4096, "dtype": "bfloat16"},
    {"gpu": "NVIDIA H200", "tp": 1, "batch": 2, "context": 4096, "dtype": "bfloat16"},
    {"gpu": "NVIDIA H200", "tp": 2, "batch": 64, "context": 32768, "dtype": "bfloat16"},
]

KERNEL_TESTS = '''
import pytest

def test_error_within_tolerance(envelope_point, fasttrack_record):
    err = 1e-4 * envelope_point["batch"]
    fasttrack_record(max_error=err, tolerance=1e-2, rows=envelope_point["batch"], kind="mla")

def test_error_over_tolerance(envelope_point, fasttrack_record):
    if envelope_point["batch"] == 64:
        fasttrack_record(max_error=0.5, tolerance=1e-2)
    else:
        fasttrack_record(max_error=0.0, tolerance=1e-2)

def test_plain():
    assert 1 + 1 == 2

@pytest.fixture
def broken():
    raise RuntimeError("setup broke")

def test_setup_error(broken):
    pass
'''


def write_grid(path: Path, points: list[dict[str, Any]], **meta: Any) -> Path:
    path.write_text(json.dumps({"points": points, **meta}), encoding="utf-8")
    return path


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_grid_parametrizes_and_records_one_line_per_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kernels=KERNEL_TESTS)
    grid = write_grid(pytester.path / "grid.json", POINTS, gpu_count=1)
    results = pytester.path / "out" / "results.jsonl"
    run = pytester.runpytest("--fasttrack-grid", str(grid), "--fasttrack-results", str(results), "-v")
    # 3 points x 2 envelope tests + plain + setup error
    run.assert_outcomes(passed=6 - 1 + 1, failed=1, errors=1)
    run.stdout.fnmatch_lines(["*test_error_within_tolerance?NVIDIA_H200-tp1-b1-c4096-bfloat16? PASSED*",
                              "*test_error_within_tolerance?NVIDIA_H200-tp2-b64-c32768-bfloat16? PASSED*"])
    lines = read_lines(results)
    assert len(lines) == 8
    by_id = {ln["nodeid"]: ln for ln in lines}
    ok = by_id["test_kernels.py::test_error_within_tolerance[NVIDIA_H200-tp1-b2-c4096-bfloat16]"]
    assert ok["point"] == POINTS[1]
    assert ok["outcome"] == "passed"
    assert ok["max_error"] == pytest.approx(2e-4)
    assert ok["tolerance"] == 1e-2
    assert ok["extra"] == {"rows": 2, "kind": "mla"}
    assert ok["duration_s"] >= 0
    bad = by_id["test_kernels.py::test_error_over_tolerance[NVIDIA_H200-tp2-b64-c32768-bfloat16]"]
    assert bad["outcome"] == "failed"
    assert bad["max_error"] == 0.5
    assert "exceeds tolerance" in bad["message"]
    plain = by_id["test_kernels.py::test_plain"]
    assert plain["point"] is None and plain["outcome"] == "passed" and plain["max_error"] is None
    err = by_id["test_kernels.py::test_setup_error"]
    assert err["outcome"] == "error" and "setup broke" in err["message"]


def test_without_grid_envelope_tests_are_skipped_with_a_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kernels=KERNEL_TESTS)
    run = pytester.runpytest("-rs")
    run.assert_outcomes(passed=1, skipped=2, errors=1)
    run.stdout.fnmatch_lines(
        ["*SKIPPED*needs an envelope grid: run the kernel tests through `fasttrack collect`*"])
    assert not list(pytester.path.rglob("*.jsonl"))  # inert: nothing written without --fasttrack-results


def test_empty_grid_skips_with_its_own_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kernels=KERNEL_TESTS)
    grid = write_grid(pytester.path / "grid.json", [])
    results = pytester.path / "r.jsonl"
    run = pytester.runpytest("--fasttrack-grid", str(grid), "--fasttrack-results", str(results), "-rs")
    run.assert_outcomes(passed=1, skipped=2, errors=1)
    run.stdout.fnmatch_lines(["*no envelope point for this machine's hardware*"])
    skipped = [ln for ln in read_lines(results) if ln["outcome"] == "skipped"]
    assert len(skipped) == 2 and all("no envelope point" in ln["message"] for ln in skipped)


def test_bad_grid_is_a_usage_error_naming_the_field(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kernels=KERNEL_TESTS)
    bad = {"gpu": "x", "tp": 0, "batch": 1, "context": 1, "dtype": "f"}
    grid = write_grid(pytester.path / "grid.json", [bad])
    run = pytester.runpytest("--fasttrack-grid", str(grid))
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    run.stderr.fnmatch_lines(["*--fasttrack-grid:*points[[]0[]].tp: expected a positive integer*"])


def test_nan_error_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nan='''
def test_nan(envelope_point, fasttrack_record):
    fasttrack_record(max_error=float("nan"), tolerance=1.0)
''')
    grid = write_grid(pytester.path / "grid.json", POINTS[:1])
    results = pytester.path / "r.jsonl"
    run = pytester.runpytest("--fasttrack-grid", str(grid), "--fasttrack-results", str(results))
    run.assert_outcomes(failed=1)
    (line,) = read_lines(results)
    assert line["outcome"] == "failed" and line["max_error"] == "nan"


def test_worst_of_several_records_is_kept(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_multi='''
def test_multi(envelope_point, fasttrack_record):
    fasttrack_record(max_error=1e-3, tolerance=1e-2, part="a")
    fasttrack_record(max_error=4e-3, tolerance=5e-3, part="b")
    fasttrack_record(max_error=1e-6, tolerance=1e-2, part="c")
''')
    grid = write_grid(pytester.path / "grid.json", POINTS[:1])
    results = pytester.path / "r.jsonl"
    pytester.runpytest("--fasttrack-grid", str(grid), "--fasttrack-results", str(results)).assert_outcomes(
        passed=1)
    (line,) = read_lines(results)
    assert (line["max_error"], line["tolerance"]) == (4e-3, 5e-3)
    assert line["extra"] == {"part": "c"}


def test_point_ids_are_readable_and_shell_safe() -> None:
    assert point_id(POINTS[0]) == "NVIDIA_H200-tp1-b1-c4096-bfloat16"
    assert point_id({"gpu": "cpu", "tp": 1, "batch": 3, "context": 7, "dtype": "torch.float32"}) == (
        "cpu-tp1-b3-c7-torch.float32")


@pytest.mark.parametrize(("content", "message"), [
    ("not json", "unreadable grid file"),
    ('{"points": 3}', "expected an object with a list under 'points'"),
    ('{"points": [{"gpu": "x"}]}', "missing key(s) tp, batch, context, dtype"),
    ('{"points": [{"gpu": "x", "tp": 1, "batch": 1, "context": 1, "dtype": "f", "zz": 1}]}',
     "unknown key(s) zz"),
    ('{"points": [{"gpu": "", "tp": 1, "batch": 1, "context": 1, "dtype": "f"}]}', "points[0].gpu"),
])
def test_load_grid_rejects_malformed_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "grid.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(GridFileError, match=None) as info:
        load_grid(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_load_grid_accepts_a_good_file(tmp_path: Path) -> None:
    points, meta = load_grid(write_grid(tmp_path / "g.json", POINTS, backend="cuda"))
    assert points == POINTS and meta == {"backend": "cuda"}
