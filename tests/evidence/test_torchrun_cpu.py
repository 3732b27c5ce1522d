"""The tensor-parallel (tp = 2) launches of `fasttrack collect`, end to end on CPU: real torchrun, real gloo.

The collector's own command lines (`_run_worker` / `worker_argv` for the bench worker, `pytest_argv` for the
kernel tests) are launched as 2 ranks over `tp_toy`'s row-parallel contribution; the per-rank files they
write are merged the way the collector merges them. What stays GPU-only: NCCL, CUDA-graph capture of
collectives, the device-side rendezvous on the timing stream and the graph's collective-kernel count.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from collect_toy import toy_baseline_spec
from tp_toy import make_tp_toy

from fasttrack.evidence.collect import (
    _run_worker,
    _subprocess_env,
    bench_case_files,
    benchmark_entry,
    build_grid,
    merge_rank_files,
    pytest_argv,
)
from fasttrack.evidence.ranks import merge_test_lines, rank_path
from fasttrack.evidence.timing import CaseResult
from fasttrack.manifest import load_manifest

torch = pytest.importorskip("torch")

BAD_BATCH = 2  # the points where one rank misbehaves
needs_gloo = pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="needs torch.distributed with gloo")


def tp2_points(toy: Path) -> list[dict[str, Any]]:
    """The tp-2 points `fasttrack collect` would run on a machine with 2 devices of the kind (context 16)."""
    grid = build_grid(load_manifest(toy), "cpu", "0.0", None, gpu_count=2, tp_filter=[2])
    points = [p for p in grid.here if p["context"] == 16]
    assert [p["batch"] for p in points] == [1, 2, 4] and all(p["tp"] == 2 for p in points)
    return points


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.slow  # launches torchrun (2 ranks)
@needs_gloo
def test_bench_worker_under_torchrun_writes_rank_files_that_merge(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    toy = make_tp_toy(tmp_path, tp="[2]")
    work = tmp_path / "work"
    (work / "bench").mkdir(parents=True)
    points = tp2_points(toy)
    jobs = [{"index": i, "point": p, "out": str(work / "bench" / f"{i:04d}-tp2b{p['batch']}.json")}
            for i, p in enumerate(points)]
    spec = {"backend": "cpu", "entry": load_manifest(toy).evidence.benchmark,
            "search_dir": str(toy.parent), "iterations": 4, "warmup": 1, "points": jobs,
            "flush_bytes": 1 << 20, "world_size": 2, "baseline": toy_baseline_spec()}
    # fused is wrong on rank 1 only, at batch 2 (rank 0's all-reduced output is right there)
    monkeypatch.setenv("TP_TOY_WRONG_ON_RANK", "1")
    monkeypatch.setenv("TP_TOY_BAD_BATCH", str(BAD_BATCH))
    events: list[dict[str, Any]] = []
    rc = _run_worker("bench", spec, work / "bench.tp2.spec.json", _subprocess_env(toy), toy,
                     work / "bench.log", events.append, nproc=2)
    log = (work / "bench.log").read_text(encoding="utf-8", errors="replace")
    assert rc == 0, log[-4000:]
    assert "torch.distributed.run --standalone --nproc-per-node 2" in log
    assert [e["index"] for e in events if e["event"] == "done"] == [0, 1, 2]  # rank 0 reports, once

    for job in jobs:  # every rank wrote its own, complete result; nothing was written as the merged file
        out = Path(job["out"])
        assert not out.exists()
        for r in (0, 1):
            own = CaseResult.model_validate(read(rank_path(out, r)))
            assert own.rank == r and own.world_size == 2 and own.point == job["point"]
            assert own.protocol is not None and own.protocol.backend == "cpu"
            assert any(f"rank {r} of 2 (torchrun); a host-side (gloo all_reduce) rendezvous" in n
                       for n in own.protocol.notes)
            assert all(len(v.samples_us) == 4 for v in own.variants.values())

    assert merge_rank_files([Path(j["out"]) for j in jobs], points, 2) == 3
    # the bundle is built from the merged results only, never from a rank's own file
    assert bench_case_files(work / "bench") == sorted(Path(j["out"]) for j in jobs)

    for job in jobs:
        out = Path(job["out"])
        per_rank = [read(rank_path(out, r)) for r in (0, 1)]
        merged = CaseResult.model_validate(read(out))
        assert merged.world_size == 2 and [s.rank for s in merged.ranks] == [0, 1]
        for name, v in merged.variants.items():
            own = [pr["variants"][name]["samples_us"] for pr in per_rank]
            assert v.samples_us == [max(a, b) for a, b in zip(*own, strict=True)]
            assert [v.samples()[f"samples_us_rank{r}"] for r in (0, 1)] == own and v.gpus == 2
        entry = benchmark_entry(merged.model_dump(mode="json"))
        assert entry.world_size == 2 and entry.not_run is None
        assert entry.variants["fused"].samples()["samples_us_rank1"] == per_rank[1]["variants"]["fused"][
            "samples_us"]
        if job["point"]["batch"] != BAD_BATCH:
            assert all(pr["status"] == "ok" and pr["accuracy"]["fused"]["ok"] for pr in per_rank)
            assert merged.status == "ok" and merged.reasons == []
            assert merged.accuracy["fused"].ok and merged.accuracy["fused"].checked == 4
            assert not entry.rejected and entry.accuracy["fused"].ok
        else:  # right on rank 0, wrong on rank 1: the point is rejected, and the reason names rank 1
            assert per_rank[0]["status"] == "ok" and per_rank[0]["accuracy"]["fused"]["ok"]
            assert per_rank[1]["status"] == "rejected" and not per_rank[1]["accuracy"]["fused"]["ok"]
            assert merged.status == "rejected" and not merged.accuracy["fused"].ok
            assert merged.reasons and all(r.startswith("rank 1: variant 'fused': timed output does not "
                                                       "match stock") for r in merged.reasons)
            assert (merged.accuracy["fused"].reason or "").startswith("rank 1: ")
            assert entry.rejected == merged.reasons and not entry.accuracy["fused"].ok
            assert [s.status for s in merged.ranks] == ["ok", "rejected"]


@pytest.mark.slow  # launches torchrun (2 ranks)
@needs_gloo
def test_kernel_tests_under_torchrun_fail_a_point_that_failed_on_one_rank(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toy = make_tp_toy(tmp_path, tp="[1, 2]")
    points = tp2_points(toy)
    grid = tmp_path / "grid.tp2.json"
    grid.write_text(json.dumps({"points": points, "backend": "cpu", "gpu_count": 2, "world_size": 2}),
                    encoding="utf-8")
    raw = tmp_path / "tests.tp2.jsonl"
    argv = pytest_argv(load_manifest(toy).evidence.kernel_tests, grid, raw, nproc=2)
    env = {**_subprocess_env(toy), "TP_TOY_TEST_FAIL_ON_RANK": "1", "TP_TOY_BAD_BATCH": str(BAD_BATCH)}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run([*argv, "-q", "-rfEs"], cwd=toy, env=env, capture_output=True, text=True,
                          timeout=240, check=False)
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 1, output  # a test failed (on rank 1); torchrun reports it as 1
    assert not raw.exists()

    per_rank = [[json.loads(x) for x in rank_path(raw, r).read_text().splitlines()] for r in (0, 1)]
    for r, lines in enumerate(per_rank):  # only the envelope tests ran, over the tp-2 points
        assert len(lines) == 3 and {x["rank"] for x in lines} == {r}
        assert all("test_all_reduce_sums_every_rank[cpu-tp2-b" in x["nodeid"] for x in lines)
        assert sorted(x["point"]["batch"] for x in lines) == [1, 2, 4]
        bad = r == 1
        assert [x["outcome"] for x in sorted(lines, key=lambda x: x["point"]["batch"])] == (
            ["passed", "failed", "passed"] if bad else ["passed"] * 3)

    merged = {m["point"]["batch"]: m for m in merge_test_lines(per_rank)}
    assert set(merged) == {1, 2, 4}
    for batch, line in merged.items():
        assert line["extra"]["world_size"] == 2 and line["extra"]["rank0_max_error"] == 0.0
        if batch == BAD_BATCH:
            assert line["outcome"] == "failed" and line["max_error"] == 1.0
            assert line["message"].startswith("rank 1: ") and "rank 0" not in line["message"]
        else:
            assert line["outcome"] == "passed" and line["max_error"] == 0.0 and line["message"] is None


def test_rank_files_are_told_from_results() -> None:
    from fasttrack.evidence.ranks import is_rank_path

    assert is_rank_path(rank_path(Path("bench/0003-ab12.json"), 1))
    assert is_rank_path(Path("tests.tp2.rank0.jsonl"))
    assert not is_rank_path(Path("bench/0003-ab12.json")) and not is_rank_path(Path("ranked.json"))
    assert not is_rank_path(Path("x.rank.json"))
