"""compute-sanitizer over the contribution's declared sanitizer tests (memcheck, racecheck, synccheck).

Each tool runs the tests in a pytest subprocess under ``compute-sanitizer --tool T --target-processes all``.
The result is parsed from the ``ERROR SUMMARY: N errors`` lines (summed over processes). Where the tool is
absent, the machine has no GPU, the device is refused (gVisor says "Device not supported") or no summary
line appears, the result says ``ran: false`` with the reason: a sanitizer that did not run is never
reported as clean.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = ("memcheck", "racecheck", "synccheck")
SUMMARY_RE = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?", re.IGNORECASE)
# racecheck ends with its own line instead: "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
RACECHECK_RE = re.compile(
    r"RACECHECK SUMMARY:\s*\d+\s+hazards? displayed\s*\((\d+)\s+errors?,\s*(\d+)\s+warnings?\)",
    re.IGNORECASE)
REFUSALS = ("Device not supported", "Unable to find injection library",
            "Target application terminated before", "no CUDA-capable device")


@dataclass
class SanitizerRun:
    tool: str
    ran: bool
    errors: int | None = None
    summary: str = ""
    tests: list[str] = field(default_factory=list)
    reason: str | None = None


def find_sanitizer() -> str | None:
    """compute-sanitizer on PATH, under CUDA_HOME, or in the usual install locations."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    for root in roots:
        if root:
            cand = Path(root) / "bin" / "compute-sanitizer"
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
            cand = Path(root) / "compute-sanitizer" / "compute-sanitizer"
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
    return None


def parse_output(tool: str, text: str, returncode: int, tests: list[str]) -> SanitizerRun:
    """Turn compute-sanitizer's output into a result; no summary line means it did not run.

    Errors are summed over processes. racecheck's hazard summary counts its errors (warnings are kept in
    the summary text, not counted).
    """
    counts = [int(m.group(1)) for m in SUMMARY_RE.finditer(text)]
    counts += [int(m.group(1)) for m in RACECHECK_RE.finditer(text)]
    lines = [ln for ln in text.splitlines() if ln.startswith("=========")]
    tail = "\n".join(lines[-20:])
    if not counts:
        refusal = next((r for r in REFUSALS if r.lower() in text.lower()), None)
        reason = (f"compute-sanitizer refused to run: {refusal}" if refusal else
                  f"no ERROR SUMMARY line in compute-sanitizer's output (exit code {returncode})")
        return SanitizerRun(tool=tool, ran=False, summary=tail, tests=tests, reason=reason)
    total = sum(counts)
    summary = f"ERROR SUMMARY: {total} error{'s' if total != 1 else ''} over {len(counts)} process(es)"
    if tail:
        summary += "\n" + tail
    return SanitizerRun(tool=tool, ran=True, errors=total, summary=summary[:60000], tests=tests)


def run_tool(tool: str, sanitizer: str, pytest_argv: list[str], tests: list[str], cwd: Path,
             env: dict[str, str], log_path: Path, timeout_s: float) -> SanitizerRun:
    argv = [sanitizer, "--tool", tool, "--target-processes", "all", "--print-limit", "50", *pytest_argv]
    with log_path.open("ab") as log:
        log.write(f"\n===== {tool}: {' '.join(argv)}\n".encode())
        log.flush()
        try:
            proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout or b""
            log.write(out)
            return SanitizerRun(tool=tool, ran=False, tests=tests,
                                reason=f"timed out after {timeout_s:.0f} s (partial output in the log)")
        except OSError as exc:
            return SanitizerRun(tool=tool, ran=False, tests=tests, reason=f"could not start: {exc}")
        log.write(proc.stdout)
    return parse_output(tool, proc.stdout.decode("utf-8", "replace"), proc.returncode, tests)


def not_run(reason: str, tests: list[str], tools: tuple[str, ...] = TOOLS) -> list[SanitizerRun]:
    return [SanitizerRun(tool=t, ran=False, tests=tests, reason=reason) for t in tools]
