"""compute-sanitizer output parsing and the read-only environment probes, on text captured from an H200."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fasttrack.evidence import sanitizer as san
from fasttrack.evidence.environment import Hardware, parse_smi_query

# Seen on the nvidia-h200 machine (Firecracker, driver 580.159.04), 2026-11-30.
MEMCHECK_CLEAN = """========= COMPUTE-SANITIZER
..                                                                       [100%]
2 passed in 6.02s
========= ERROR SUMMARY: 0 errors
"""
RACECHECK_CLEAN = """========= COMPUTE-SANITIZER
..                                                                       [100%]
2 passed in 6.53s
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""
MEMCHECK_TWO_PROCESSES = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at oob_kernel+0x70
========= ERROR SUMMARY: 1 error
========= ERROR SUMMARY: 2 errors
"""
GVISOR_REFUSAL = """========= COMPUTE-SANITIZER
========= Error: Device not supported. Please refer to the "Supported Devices" section of the documentation
"""


def test_clean_memcheck_is_zero_errors() -> None:
    run = san.parse_output("memcheck", MEMCHECK_CLEAN, 0, ["t.py"])
    assert run.ran and run.errors == 0 and run.reason is None and run.tests == ["t.py"]


def test_racecheck_hazard_summary_counts_as_its_error_line() -> None:
    run = san.parse_output("racecheck", RACECHECK_CLEAN, 0, [])
    assert run.ran and run.errors == 0
    hazards = RACECHECK_CLEAN.replace("(0 errors, 0 warnings)", "(3 errors, 1 warnings)")
    assert san.parse_output("racecheck", hazards, 1, []).errors == 3


def test_errors_are_summed_over_processes() -> None:
    run = san.parse_output("memcheck", MEMCHECK_TWO_PROCESSES, 1, [])
    assert run.ran and run.errors == 3
    assert "over 2 process(es)" in run.summary and "Invalid __global__ write" in run.summary


def test_a_refused_device_is_not_run_with_the_reason() -> None:
    run = san.parse_output("memcheck", GVISOR_REFUSAL, 255, [])
    assert not run.ran and run.errors is None
    assert run.reason == "compute-sanitizer refused to run: Device not supported"


def test_no_summary_is_never_reported_as_clean() -> None:
    run = san.parse_output("synccheck", "Segmentation fault\n", 139, [])
    assert not run.ran and run.errors is None and "exit code 139" in (run.reason or "")


def test_not_run_lists_every_tool() -> None:
    runs = san.not_run("no CUDA GPU on this machine", ["a.py"])
    assert [r.tool for r in runs] == ["memcheck", "racecheck", "synccheck"]
    assert all(not r.ran and r.reason == "no CUDA GPU on this machine" for r in runs)


def test_find_sanitizer_looks_under_cuda_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    if Path("/usr/local/cuda/bin/compute-sanitizer").exists():
        pytest.skip("this machine has a system compute-sanitizer; the fallback order is not observable")
    assert san.find_sanitizer() is None
    tool = tmp_path / "cuda" / "bin" / "compute-sanitizer"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n", encoding="utf-8")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    assert san.find_sanitizer() == str(tool)


def test_run_tool_records_a_timeout_as_not_run(tmp_path: Path) -> None:
    fake = tmp_path / "compute-sanitizer"
    fake.write_text("#!/bin/sh\nsleep 5\n", encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    run = san.run_tool("memcheck", str(fake), ["true"], ["t.py"], tmp_path, dict(os.environ),
                       tmp_path / "sanitizer.log", timeout_s=0.5)
    assert not run.ran and "timed out after" in (run.reason or "")
    assert "memcheck" in (tmp_path / "sanitizer.log").read_text(encoding="utf-8")


def test_smi_query_rows_are_parsed() -> None:
    text = "NVIDIA H200, 580.159.04, 9.0, 345, 3201, 1980, 3201, 143771, 700.00, Enabled\n"
    (row,) = parse_smi_query(text)
    assert row["name"] == "NVIDIA H200" and row["compute_cap"] == "9.0" and row["clocks.sm"] == "345"
    assert parse_smi_query("garbage\n\n") == []


def test_hardware_matches_name_and_capability() -> None:
    hw = Hardware("NVIDIA H200", "9.0", 1, "cuda")
    assert hw.matches("nvidia h200", "9.0")
    assert not hw.matches("NVIDIA H200", "10.0")
    assert not hw.matches("NVIDIA B200", "9.0")


def test_a_sanitizer_phase_cut_short_keeps_what_ran_and_resumes(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """memcheck finishes, racecheck is killed with the phase: memcheck's clean result is kept (the rest read
    'not run'), and the resumed phase runs only racecheck and synccheck, under the kernel tests' isolation."""
    import sys as _sys

    sys_path = str(Path(__file__).resolve().parent)
    if sys_path not in _sys.path:
        _sys.path.insert(0, sys_path)
    from collect_toy import make_toy

    from fasttrack.evidence import collect as col
    from fasttrack.manifest import load_manifest

    toy = make_toy(tmp_path)
    work = col.WorkDir(tmp_path / "work")
    work.prepare({"v": 1}, resume=False, progress=col.NullProgress())
    point = {"gpu": "cpu", "tp": 1, "batch": 1, "context": 8, "dtype": "float32"}
    run = col.Run(opts=col.CollectOptions(contribution=toy), manifest=load_manifest(toy), contribution=toy,
                  work=work, env={}, progress=col.NullProgress(), backend="cuda",
                  grid=col.Grid(here=[point], elsewhere=[]))
    calls: list[tuple[str, list[str]]] = []

    def fake_tool(name: str, tool: str, argv: list[str], *rest: object) -> san.SanitizerRun:
        calls.append((name, argv))
        if name == "racecheck" and len(calls) == 2:
            raise KeyboardInterrupt  # the phase's time limit (SIGINT) arrives during racecheck
        return san.SanitizerRun(tool=name, ran=True, errors=0, summary="0 errors")

    monkeypatch.setattr(san, "find_sanitizer", lambda: "/usr/bin/compute-sanitizer")
    monkeypatch.setattr(san, "run_tool", fake_tool)
    with pytest.raises(KeyboardInterrupt):
        col.phase_sanitizer(run, 1)
    kept = col._read_json(work.path("sanitizer.json"))
    assert [(d["tool"], d["ran"]) for d in kept] == [("memcheck", True), ("racecheck", False),
                                                    ("synccheck", False)]
    assert "--confcutdir" in calls[0][1] and "-c" in calls[0][1]  # no conftest or ini outside the toy
    run.resumed_work = True  # the next collect run resumes this work dir
    col.phase_sanitizer(run, 1)
    assert [c[0] for c in calls] == ["memcheck", "racecheck", "racecheck", "synccheck"]
    assert run.reports[-1].status == "resumed"  # memcheck's result came from disk: custody "resumed"
    final = col._read_json(work.path("sanitizer.json"))
    assert all(d["ran"] and d["errors"] == 0 for d in final)
