"""Time `fasttrack verify` on a kimi_k3 PR against the real vLLM tree, side by side with `lint-imports`
checking one forbidden contract on the same tree. A benchmark, not a test.

    python benchmarks/verify_vs_lint_imports.py [--repeats 3] [--version 0.33.0] [--json OUT]

Set-up (not timed): the vLLM tree (``python -m fasttrack.engine_tree``) is committed as the base of a
temporary git repository, and a kimi_k3 PR (a new kernel module in the specialized decode plus the line that
uses it) as its head. Then, each `--repeats` times:

- fasttrack cold: ``fasttrack verify --repo R --base B --head H --model kimi_k3 --format json`` with an empty
  $FASTTRACK_CACHE_DIR (no cached graph) and the checkout at the PR head, as CI checks it out: diff, the
  checkout verified to hold the head tree byte for byte and analysed in place, grimp graph, every rule.
- fasttrack warm: the same command again on the same cache (graph found by the head's tree sha).
- fasttrack cold, copy / warm, copy: the same with the checkout at the base, so the head tree is written to
  the cache first (`git read-tree` + `checkout-index`), then found there.
- fasttrack cold, no trace: the first scenario with $FASTTRACK_TRACE=0 (no effect trace: the import graph and
  every static rule only, what one import-linter contract is the yardstick of).
- lint-imports cold: one forbidden contract, "shared model code (vllm.model_executor) may not import
  vllm.models.kimi_k3", with ``--no-cache`` on the same tree (PYTHONPATH points at the head checkout).

Each is a fresh process (wall clock, including interpreter start-up). Both tools run with Python bytecode
cached (an untimed run of each first; the cache is outside the repositories, $PYTHONPYCACHEPREFIX), as an
installed tool has: with PYTHONDONTWRITEBYTECODE set, every fasttrack run recompiles its own modules
(~0.15 s) while lint-imports' come precompiled from site-packages. Also reported: the blast radius's own time
inside the verdict (graph build or cache load plus the walk). Prints medians, minima and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fasttrack.engine_tree import ensure_tree  # noqa: E402

BIN = Path(sys.executable).parent
GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@fasttrack.invalid",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@fasttrack.invalid",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
DECODE = "vllm/models/kimi_k3/nvidia/specialized_decode/runtime/decode.py"
NEW = "vllm/models/kimi_k3/nvidia/specialized_decode/fused_new.py"
CONTRACT = """[importlinter]
root_package = vllm
include_external_packages = False
exclude_type_checking_imports = True

[importlinter:contract:kimi-k3-private]
name = Shared model code may not import Kimi K3's package
type = forbidden
source_modules =
    vllm.model_executor
forbidden_modules =
    vllm.models.kimi_k3
"""


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env={**os.environ, **GIT_ENV})
    return proc.stdout.strip()


def make_repo(tree: Path, work: Path) -> tuple[Path, str, str]:
    repo = work / "vllm-repo"
    shutil.copytree(tree / "vllm", repo / "vllm")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    (repo / NEW).write_text("def fused_step(x):\n    return x\n")
    decode = repo / DECODE
    decode.write_text(decode.read_text() + "\nfrom .. import fused_new  # noqa: E402\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "kimi_k3: fused decode step")
    return repo, base, git(repo, "rev-parse", "HEAD")


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(cmd: list[str], env: dict[str, str],
          cwd: Path) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall seconds, CPU seconds of the child, result)."""
    c0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    return time.perf_counter() - t0, _children_cpu() - c0, proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="0.33.0")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = ap.parse_args()
    tree = ensure_tree(args.version)
    load_before = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="ft-bench-"))
    try:
        repo, base, head = make_repo(tree, work)
        contract = work / ".importlinter"
        contract.write_text(CONTRACT)
        verify = [str(BIN / "fasttrack"), "verify", "--repo", str(repo), "--base", base, "--head", head,
                  "--model", "kimi_k3", "--policy", str(REPO / "policies" / "vllm.toml"), "--format", "json"]
        lint = [str(BIN / "lint-imports"), "--no-cache", "--no-logo", str(contract)]
        rows: dict[str, list[float]] = {k: [] for k in (
            "fasttrack cold", "fasttrack warm", "fasttrack cold, copy", "fasttrack warm, copy",
            "fasttrack cold, no trace",
            "lint-imports cold", "radius cold", "radius warm",
            "fasttrack cold cpu", "fasttrack warm cpu", "fasttrack cold, no trace cpu",
            "lint-imports cold cpu")}
        verdict: dict[str, object] = {}
        in_place: list[bool] = []  # whether each cold run analysed the head checkout in place
        base_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        base_env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        lint_env = {**base_env, "PYTHONPATH": str(repo)}
        # untimed: compile both tools' bytecode once
        subprocess.run([str(BIN / "fasttrack"), "rules"], capture_output=True, env=base_env, check=False)
        subprocess.run(lint, capture_output=True, env=lint_env, cwd=work, check=False)

        def run_verify(env: dict[str, str], label: str, radius_label: str | None) -> None:
            nonlocal verdict
            secs, cpu, proc = timed(verify, env, work)
            if proc.returncode not in (0, 1):
                raise SystemExit(f"fasttrack verify failed ({proc.returncode}): {proc.stderr.strip()}")
            verdict = json.loads(proc.stdout)
            br = verdict["blast_radius"]
            assert isinstance(br, dict) and br["computed"], br
            rows[label].append(secs)
            if f"{label} cpu" in rows:
                rows[f"{label} cpu"].append(cpu)
            if radius_label:
                rows[radius_label].append(float(br["seconds"]))

        for i in range(args.repeats):
            git(repo, "checkout", "-q", head)  # CI's checkout: the PR head
            env = {**base_env, "FASTTRACK_CACHE_DIR": str(work / f"cache-{i}")}
            run_verify(env, "fasttrack cold", "radius cold")
            run_verify(env, "fasttrack warm", "radius warm")
            in_place.append(not (work / f"cache-{i}" / "trees").exists())
            git(repo, "checkout", "-q", base)  # not the head: the head tree is copied out of git
            env = {**base_env, "FASTTRACK_CACHE_DIR": str(work / f"cache-copy-{i}")}
            run_verify(env, "fasttrack cold, copy", None)
            run_verify(env, "fasttrack warm, copy", None)
            assert (work / f"cache-copy-{i}" / "trees").is_dir(), "the head tree was not materialised"
            git(repo, "checkout", "-q", head)
            env = {**base_env, "FASTTRACK_CACHE_DIR": str(work / f"cache-notrace-{i}"),
                   "FASTTRACK_TRACE": "0"}
            run_verify(env, "fasttrack cold, no trace", None)
            # lint-imports reads the tree in place: point it at the PR head's checkout.
            git(repo, "checkout", "-q", head)
            secs, cpu, proc = timed(lint, lint_env, work)
            if proc.returncode not in (0, 1) or "Contracts" not in proc.stdout:
                raise SystemExit(f"lint-imports failed ({proc.returncode}): {proc.stdout[-500:]}")
            rows["lint-imports cold"].append(secs)
            rows["lint-imports cold cpu"].append(cpu)
        lint_result = "broken" if "BROKEN" in proc.stdout.upper() else "kept"
    finally:
        shutil.rmtree(work, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in rows.items()}
    low = {k: min(v) for k, v in rows.items()}
    print(f"vLLM {args.version}, kimi_k3 PR (2 files), {args.repeats} repeats, {os.cpu_count()} CPUs, "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} at the end")
    for k in rows:
        print(f"  {k:24s} median {med[k]:6.2f}s   min {low[k]:6.2f}s")
    br = verdict["blast_radius"]
    findings = verdict["findings"]
    assert isinstance(br, dict) and isinstance(findings, list)
    codes = ", ".join(sorted({str(f["code"]) for f in findings}))
    print(f"  verdict: {verdict['verdict']} ({codes}); radius: {br['models_total']} models, "
          f"{br['shared_total']} shared; lint-imports contract {lint_result}; head checkout analysed in "
          f"place in {sum(in_place)} of {len(in_place)} cold runs")
    ratios = {
        "fasttrack cold / lint-imports cold": med["fasttrack cold"] / med["lint-imports cold"],
        "fasttrack cold, copy / lint-imports": med["fasttrack cold, copy"] / med["lint-imports cold"],
        "fasttrack cold, no trace / lint-imports": med["fasttrack cold, no trace"] / med["lint-imports cold"],
        "radius cold / lint-imports cold": med["radius cold"] / med["lint-imports cold"],
        "(cpu) fasttrack cold / lint-imports": med["fasttrack cold cpu"] / med["lint-imports cold cpu"],
        "(cpu) cold, no trace / lint-imports":
            med["fasttrack cold, no trace cpu"] / med["lint-imports cold cpu"],
        "fasttrack warm / fasttrack cold": med["fasttrack warm"] / med["fasttrack cold"],
        "fasttrack warm / cold, copy": med["fasttrack warm, copy"] / med["fasttrack cold, copy"],
        "(cpu) fasttrack warm / cold": med["fasttrack warm cpu"] / med["fasttrack cold cpu"],
        "radius warm / radius cold": med["radius warm"] / med["radius cold"],
    }
    for k, v in ratios.items():
        print(f"  {k:38s} {v:5.2f}")
    if args.json:
        args.json.write_text(json.dumps({"median": med, "min": low, "ratios": ratios, "samples": rows,
                                         "cpus": os.cpu_count(), "lint_imports": lint_result}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
