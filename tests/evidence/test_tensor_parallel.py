"""Tensor-parallel (tp > 1) points in `fasttrack collect` and in verification, on CPU.

The torchrun + NCCL launch itself needs several GPUs; here: the merge of per-rank results, the grid on a
machine with too few GPUs, the command lines built for tp > 1 (not launched), collective classification on
kernel names, the topology capture with the tools absent, the lockstep decisions of the protocol, the
plugin's per-rank files, and the rules on a synthetic bundle with tp = 2 points.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from fasttrack.evidence import environment as envmod
from fasttrack.evidence.collect import benchmark_entry, build_grid, pytest_argv, sanitizer_points, worker_argv
from fasttrack.evidence.graph_count import count_nodes, is_collective, kernel_identifier
from fasttrack.evidence.ranks import (
    dist_env,
    merge_case_results,
    merge_test_lines,
    rank_path,
    torchrun_argv,
)
from fasttrack.evidence.timing import CaseResult
from fasttrack.manifest import load_manifest

pytest_plugins = ["pytester"]

POINT2 = {"gpu": "NVIDIA H200", "tp": 2, "batch": 1, "context": 128, "dtype": "bfloat16"}


# ------------------------------------------------------------------------------------------ merge: bench
def rank_result(rank: int, stock: list[float], fused: list[float], *, ok: bool = True,
                reason: str | None = None, kernels: int = 6, collectives: int = 2,
                moved: float = 1e8) -> dict[str, Any]:
    acc = {"max_abs_error": 1e-3 * (rank + 1), "atol": 1e-2, "rtol": 1e-2, "ok": ok, "checked": len(fused),
           "failures": 0 if ok else 1, "reason": reason}
    reasons = [] if ok else [f"variant 'fused': {reason}"]
    nodes = {"kernel": kernels, "collective": collectives}
    return {
        "point": POINT2, "status": "ok" if ok else "rejected", "reasons": reasons, "layers": 2,
        "world_size": 2, "rank": rank,
        "protocol": {"backend": "cuda", "timer": "cuda events", "graph_replay": True,
                     "l2_flush_bytes": 1 << 28, "persisting_l2_reset": True, "device_sync": "sync",
                     "fresh_inputs": True,
                     "orders": [["stock", "fused"], ["fused", "stock"]], "iterations": 3, "warmup": 1,
                     "seed_base": 1},
        "variants": {
            "stock": {"samples_us": stock, "graph_nodes": nodes, "kernels_per_step": -(-kernels // 2),
                      "collectives_per_step": -(-collectives // 2),
                      "collective_kernels": {"ncclDevKernel_X": 2},
                      "bytes_moved": moved},
            "fused": {"samples_us": fused, "graph_nodes": {"kernel": 2, "collective": 2},
                      "kernels_per_step": 1, "collectives_per_step": 1,
                      "collective_kernels": {"barrier_kernel": 2},
                      "bytes_moved": moved + rank},
        },
        "accuracy": {"stock": {"atol": 1e-2, "rtol": 1e-2, "ok": True, "checked": 0},
                     "fused": acc},
    }


def test_merged_samples_are_the_elementwise_max_over_ranks() -> None:
    r0 = rank_result(0, [10.0, 12.0, 11.0], [5.0, 7.0, 5.5])
    r1 = rank_result(1, [11.0, 11.5, 10.0], [6.0, 6.5, 5.0], kernels=8)
    merged = CaseResult.model_validate(merge_case_results([r0, r1], POINT2))
    assert merged.status == "ok" and merged.reasons == []
    assert merged.world_size == 2 and [r.rank for r in merged.ranks] == [0, 1]
    assert merged.variants["stock"].samples_us == [11.0, 12.0, 11.0]
    assert merged.variants["fused"].samples_us == [6.0, 7.0, 5.5]
    by_rank = merged.variants["fused"].samples()
    assert [by_rank["samples_us_rank0"], by_rank["samples_us_rank1"]] == [[5.0, 7.0, 5.5], [6.0, 6.5, 5.0]]
    assert merged.variants["stock"].graph_nodes == {"kernel": 6, "collective": 2}  # rank 0's graph
    assert merged.ranks[1].kernels_per_step == {"stock": 4, "fused": 1}  # every rank's count kept
    assert merged.variants["fused"].bytes_moved == 1e8 + 1  # the largest shard a GPU moved
    assert merged.accuracy["fused"].max_abs_error == pytest.approx(2e-3)
    assert any("element-wise max over ranks" in n for n in merged.protocol.notes)  # type: ignore[union-attr]

    b = benchmark_entry(merged.model_dump(mode="json"))
    assert b.world_size == 2 and b.not_run is None and not b.rejected
    assert b.variants["fused"].samples_us == [6.0, 7.0, 5.5]
    assert b.variants["fused"].gpus == 2 and b.variants["stock"].gpus == 2
    assert b.variants["stock"].kernels_per_step == 3 and b.variants["stock"].collectives_per_step == 1
    assert b.variants["fused"].samples()["samples_us_rank1"] == [6.0, 6.5, 5.0]
    assert b.ranks[1].kernels_per_step == {"stock": 4, "fused": 1}
    assert b.ranks[0].collectives_per_step == {"stock": 1, "fused": 1}


def test_an_accuracy_failure_on_any_rank_rejects_the_point_and_names_the_rank() -> None:
    r0 = rank_result(0, [10.0, 12.0], [5.0, 7.0])
    r1 = rank_result(1, [11.0, 11.5], [6.0, 6.5], ok=False, reason="timed output does not match stock")
    merged = CaseResult.model_validate(merge_case_results([r0, r1], POINT2))
    assert merged.status == "rejected"
    assert merged.reasons == ["rank 1: variant 'fused': timed output does not match stock"]
    assert merged.accuracy["fused"].ok is False
    assert merged.accuracy["fused"].reason == "rank 1: timed output does not match stock"
    b = benchmark_entry(merged.model_dump(mode="json"))
    assert b.rejected and "rank 1" in b.rejected[0] and b.accuracy["fused"].ok is False


def test_a_reason_on_several_ranks_is_given_once_with_all_of_them() -> None:
    r0, r1 = rank_result(0, [1.0, 2.0], [1.0, 2.0]), rank_result(1, [1.0, 2.0], [1.0, 2.0])
    for r in (r0, r1):
        r["status"], r["reasons"] = "rejected", ["time.perf_counter was replaced"]
    merged = merge_case_results([r0, r1], POINT2)
    assert merged["reasons"] == ["ranks 0,1: time.perf_counter was replaced"]


def test_ranks_out_of_lockstep_or_missing_are_never_a_clean_result() -> None:
    r0 = rank_result(0, [10.0, 12.0, 11.0], [5.0, 7.0, 5.5])
    short = rank_result(1, [11.0, 11.5], [6.0, 6.5])
    merged = merge_case_results([r0, short], POINT2)
    assert merged["status"] == "rejected"
    assert any("different numbers of samples (rank 0: 3, rank 1: 2)" in r for r in merged["reasons"])
    missing = merge_case_results([r0, None], POINT2)
    assert missing["status"] == "not_run" and "rank 1 of 2 wrote no result" in missing["reasons"][0]
    not_run = {"point": POINT2, "status": "not_run", "reasons": ["no case"], "world_size": 2, "rank": 1}
    half = merge_case_results([r0, not_run], POINT2)
    assert half["status"] == "rejected" and "rank 1: no case" in half["reasons"]
    both = merge_case_results([{**not_run, "rank": 0}, not_run], POINT2)
    assert both["status"] == "not_run" and both["reasons"] == ["ranks 0,1: no case"]
    assert benchmark_entry(both).not_run == "ranks 0,1: no case"


# ------------------------------------------------------------------------------------------ merge: tests
def line(nodeid: str, outcome: str, err: Any = 1e-3, message: str | None = None) -> dict[str, Any]:
    return {"nodeid": nodeid, "point": POINT2, "outcome": outcome, "max_error": err, "tolerance": 1e-2,
            "duration_s": 1.0, "extra": {"rows": 1}, "message": message}


def test_a_test_passes_at_a_point_only_if_it_passed_on_every_rank() -> None:
    rank0 = [line("t.py::a[x]", "passed", 1e-3), line("t.py::b[x]", "passed"), line("t.py::c[x]", "passed")]
    rank1 = [line("t.py::a[x]", "passed", 4e-3), line("t.py::b[x]", "failed", 0.5, "E  assert 0.5 <= 0.01")]
    merged = {m["nodeid"]: m for m in merge_test_lines([rank0, rank1])}
    assert merged["t.py::a[x]"]["outcome"] == "passed" and merged["t.py::a[x]"]["max_error"] == 4e-3
    assert merged["t.py::a[x]"]["extra"] == {"rows": 1, "world_size": 2, "rank0_max_error": 1e-3,
                                             "rank1_max_error": 4e-3}
    assert merged["t.py::b[x]"]["outcome"] == "failed" and merged["t.py::b[x]"]["max_error"] == 0.5
    assert merged["t.py::b[x]"]["message"] == "rank 1: E  assert 0.5 <= 0.01"
    assert merged["t.py::c[x]"]["outcome"] == "error"  # rank 1 never reported it
    assert "rank 1: no result" in merged["t.py::c[x]"]["message"]
    nan = merge_test_lines([[line("t.py::d[x]", "failed", "nan")], [line("t.py::d[x]", "passed")]])
    assert nan[0]["max_error"] == "nan" and nan[0]["outcome"] == "failed"


# ------------------------------------------------------------------------------------------ grid, argv
def toy_with_tp(tmp_path: Path, tps: str) -> Path:
    from collect_toy import make_toy

    toy = make_toy(tmp_path)
    manifest = toy / "fasttrack.toml"
    text = manifest.read_text(encoding="utf-8").replace("tp = [1]", f"tp = {tps}")
    manifest.write_text(text, encoding="utf-8")
    return toy


def test_tp2_points_on_a_machine_with_one_gpu_are_recorded_as_not_run(tmp_path: Path) -> None:
    manifest = load_manifest(toy_with_tp(tmp_path, "[1, 2]"))
    one = build_grid(manifest, "cpu", "0.0", None, gpu_count=1)
    assert {p["tp"] for p in one.here} == {1} and len(one.here) == 6
    tp2 = [(p, why) for p, why in one.elsewhere if p["tp"] == 2 and p["gpu"] == "cpu"]
    assert len(tp2) == 6  # recorded, never dropped
    assert all(why == "needs 2 x cpu (tp=2, one GPU per rank); this machine has 1: not collected here"
               for _, why in tp2)
    two = build_grid(manifest, "cpu", "0.0", None, gpu_count=2)
    assert sorted({p["tp"] for p in two.here}) == [1, 2] and len(two.here) == 12
    # the sanitizer runs at tp 1 only
    assert {p["tp"] for p in sanitizer_points(two.here)} == {1}


def test_torchrun_command_lines_for_tp_above_1(tmp_path: Path) -> None:
    spec = tmp_path / "bench.tp2.spec.json"
    assert worker_argv("bench", spec) == [sys.executable, "-m", "fasttrack.evidence.bench_worker", "bench",
                                          str(spec)]
    assert worker_argv("bench", spec, nproc=2) == [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "--max-restarts", "0", "-m", "fasttrack.evidence.bench_worker", "bench", str(spec)]
    grid, results = tmp_path / "grid.tp2.json", tmp_path / "tests.tp2.jsonl"
    argv = pytest_argv(["tests/test_a.py"], grid, results, nproc=2)
    assert argv[:9] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                        "2", "--max-restarts", "0", "-m"]
    assert argv[9] == "pytest" and argv[-1] == "--fasttrack-envelope-only"
    assert argv[argv.index("--fasttrack-grid") + 1] == str(grid)
    assert argv[argv.index("--fasttrack-results") + 1] == str(results)
    one = pytest_argv(["tests/test_a.py"], tmp_path / "grid.json", None)
    assert one[:3] == [sys.executable, "-m", "pytest"] and "--fasttrack-envelope-only" not in one
    with pytest.raises(ValueError):
        torchrun_argv(0, "x", [])


def test_rank_files_and_env() -> None:
    assert rank_path(Path("/w/bench/0003-ab.json"), 1) == Path("/w/bench/0003-ab.rank1.json")
    assert rank_path(Path("tests.tp2.jsonl"), 0) == Path("tests.tp2.rank0.jsonl")
    assert dist_env({}) == (0, 1, 0)
    assert dist_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == (3, 4, 1)


# ------------------------------------------------------------------------------------------ graph count
def mangled(*scopes: str, template: str = "", params: str = "v") -> str:
    """Itanium-mangle a (possibly namespaced) function name."""
    parts = "".join(f"{len(s)}{s}" for s in scopes)
    return f"_ZN{parts}{template}E{params}" if len(scopes) > 1 else f"_Z{parts}{template}{params}"


# Kernel names as the driver returns them (cuFuncGetName: mangled for CUDA C++, plain for Triton).
NCCL = mangled("ncclDevKernel_AllReduce_Sum_bf16_RING_LL") + "24ncclDevKernelArgsStorageILm4096EE"
SYMM_BARRIER = "_ZL14barrier_kernelPPjiiim"
SYMM_ONE_SHOT = mangled("_GLOBAL__N_1", "one_shot_all_reduce_kernel", template="IN3c108BFloat16ELi16ELi2EE",
                        params="vPPT_S4_S4_mmPPjmm")
VLLM_AR = "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*, vllm::Signal*, int)"
COMPUTE = [
    "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0",
    "_mla_decode_fused_kernel",
    mangled("at", "native", "vectorized_elementwise_kernel", template="ILi4ENS0_11FillFunctorIfEEEE"),
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel",
    "_Z17gemv2T_kernel_valIiiLi128ELi16ELi4ELi4ELb0ELb0EEvT_",
]


def test_collective_kernels_are_classified_by_name() -> None:
    assert kernel_identifier(NCCL)[1] == "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
    assert kernel_identifier(SYMM_ONE_SHOT) == (["_GLOBAL__N_1"], "one_shot_all_reduce_kernel")
    assert kernel_identifier("_ZN4c10d16symmetric_memoryL14barrier_kernelEPPjiiim") == (
        ["c10d", "symmetric_memory"], "barrier_kernel")
    for name in (NCCL, "ncclKernel_AllGather_RING_LL_Sum_int8_t", SYMM_BARRIER, SYMM_ONE_SHOT, VLLM_AR,
                 mangled("c10d", "symmetric_memory", "some_new_kernel")):
        assert is_collective(name), name
    for name in COMPUTE:
        assert not is_collective(name), name


def test_graph_count_reports_collectives_apart_from_compute_kernels() -> None:
    # node ids: 1..5 kernels in the root graph, 9 a child graph holding kernels 10 and 11
    names = {1: COMPUTE[0], 2: NCCL, 3: COMPUTE[1], 4: SYMM_BARRIER, 5: COMPUTE[2], 10: NCCL, 11: COMPUTE[3]}
    graphs = {100: [1, 2, 3, 4, 5, 6, 9], 200: [10, 11]}
    types = {6: 0x02, 9: 0x04}
    counted = count_nodes(100, graphs.__getitem__, lambda n: types.get(n, 0x00), lambda n: 200,
                          kernel_name=names.get)
    assert counted.by_type == {"collective": 3, "graph": 1, "kernel": 4, "memset": 1}
    assert counted.kernels == 4 and counted.collectives == 3 and counted.names_known
    assert counted.collective_names == {"barrier_kernel": 1, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL": 2}
    # names unreadable: every kernel counts as compute and the collective count is unknown
    blind = count_nodes(100, graphs.__getitem__, lambda n: types.get(n, 0x00), lambda n: 200,
                        kernel_name=lambda n: None)
    assert blind.by_type == {"graph": 1, "kernel": 7, "memset": 1} and not blind.names_known


# ------------------------------------------------------------------------------------------ environment
def test_topology_capture_with_the_tools_absent() -> None:
    assert envmod.capture_links(1, lambda argv: None) == (None, {})
    text, extra = envmod.capture_links(2, lambda argv: None, None)
    assert text is None
    assert extra == {"nvlink": "not available (`nvidia-smi nvlink --status` gave nothing)",
                     "topology": "not available (`nvidia-smi topo -m` gave nothing)"}

    def refuses(a: int, b: int) -> bool:
        if b == 2:
            raise RuntimeError("no")
        return True

    text, extra = envmod.capture_links(3, lambda argv: None, refuses)
    assert extra["peer_access"] == ("0->1 yes, 0->2 unknown (RuntimeError), 1->0 yes, 1->2 unknown "
                                    "(RuntimeError), 2->0 yes, 2->1 yes")
    assert text is not None and text.startswith("nvidia-smi topo -m unavailable; peer access")


def test_topology_capture_with_nvidia_smi() -> None:
    topo = "\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n"
    nvlink = "GPU 0: NVIDIA H200\n" + "\t Link 0: 26.562 GB/s\n" * 2000

    def smi(argv: list[str]) -> str | None:
        return topo if argv[1] == "topo" else nvlink

    text, extra = envmod.capture_links(2, smi, lambda a, b: True)
    assert text == topo.strip() and extra["peer_access"] == "0->1 yes, 1->0 yes"
    assert len(extra["nvlink_status"]) < envmod.NVLINK_STATUS_MAX_CHARS + 100
    assert extra["nvlink_status"].endswith(f"of {len(nvlink.strip())} chars)")


def test_missing_nvidia_smi_is_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(envmod.shutil, "which", lambda name: None)
    assert envmod._run(["nvidia-smi", "topo", "-m"]) is None
    assert envmod.capture_links(2)[0] is None


# ------------------------------------------------------------------------------------------ lockstep
def test_a_variant_that_fails_to_prepare_on_another_rank_is_dropped_on_every_rank() -> None:
    pytest.importorskip("torch")
    from fasttrack.evidence.selftest import MatmulReluCase
    from fasttrack.evidence.timing import CpuBackend, ProtocolSettings, run_case

    class OtherRankFailsFused(CpuBackend):
        """Rank 0 of 2, where rank 1 (simulated) could not prepare 'fused'."""

        world_size = 2
        preparing = ""

        def prepare(self, name: str, fn: Any, static_inputs: Any) -> Any:
            self.preparing = name
            return super().prepare(name, fn, static_inputs)

        def agree(self, ok: bool) -> bool:
            verdict = ok and self.preparing != "fused"
            self.preparing = ""
            return verdict

        def rendezvous(self) -> None:  # no other process here
            self.rendezvous_calls = getattr(self, "rendezvous_calls", 0) + 1

    backend = OtherRankFailsFused(flush_bytes=1 << 20)
    res = run_case(MatmulReluCase(m=4, k=16, n=8), backend, ProtocolSettings(iterations=2, warmup=0), POINT2)
    assert res.status == "rejected" and res.world_size == 2 and res.rank == 0
    assert backend.rendezvous_calls == 2  # one before every timed replay
    assert res.variants["fused"].samples_us == [] and len(res.variants["stock"].samples_us) == 2
    assert "variant 'fused' could not be prepared on another rank" in res.reasons[0]

    class OtherRankRejects(CpuBackend):
        world_size = 2

        def agree(self, ok: bool) -> bool:
            return False

    rejected = run_case(MatmulReluCase(m=4, k=16, n=8), OtherRankRejects(flush_bytes=1 << 20),
                        ProtocolSettings(iterations=2, warmup=0), POINT2)
    assert rejected.status == "rejected" and rejected.reasons == ["another rank rejected the case's shape"]


# ------------------------------------------------------------------------------------------ plugin
PLUGIN_TESTS = '''
def test_point(envelope_point, fasttrack_record):
    fasttrack_record(max_error=1e-3, tolerance=1e-2)

def test_plain():
    assert True
'''


def test_plugin_under_torchrun_writes_one_file_per_rank_and_runs_envelope_tests_only(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_k=PLUGIN_TESTS)
    grid = pytester.path / "grid.tp2.json"
    grid.write_text(json.dumps({"points": [POINT2], "world_size": 2}), encoding="utf-8")
    results = pytester.path / "tests.tp2.jsonl"
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    run = pytester.runpytest("--fasttrack-grid", str(grid), "--fasttrack-results", str(results),
                             "--fasttrack-envelope-only")
    run.assert_outcomes(passed=1, deselected=1)
    assert not results.exists()
    lines = [json.loads(x) for x in (pytester.path / "tests.tp2.rank1.jsonl").read_text().splitlines()]
    assert [(x["nodeid"], x["rank"], x["outcome"]) for x in lines] == [
        ("test_k.py::test_point[NVIDIA_H200-tp2-b1-c128-bfloat16]", 1, "passed")]


# ------------------------------------------------------------------------------------------ verification


def tp2_bundle(tmp_path: Path, *, fused_tp2: float = 50.0) -> Any:
    """A good bundle whose envelope has tp [1, 2], collected on 2 GPUs, with merged tp-2 results."""
    from bundle_factory import (
        GRID_BATCHES,
        GRID_CONTEXTS,
        MANIFEST,
        TEST_FUNCTIONS,
        TP2_CLAIM,
        benchmark,
        kernel_tests,
        new_fixture,
        point,
        samples,
    )

    fx = new_fixture(tmp_path)
    fx.set_manifest(MANIFEST.replace("tp = [1]", "tp = [1, 2]") + TP2_CLAIM)
    fx.data = fx.good_statement()
    pred = fx.pred
    pred["environment"].update(gpu_count=2, interconnect="\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X")
    tests = kernel_tests()
    for b in GRID_BATCHES:
        for c in GRID_CONTEXTS:
            for fn in TEST_FUNCTIONS:
                tests.append({
                    "nodeid": f"{fn}[NVIDIA_H200-tp2-b{b}-c{c}-bfloat16]", "point": point(b, c, tp=2),
                    "outcome": "passed", "max_error": 2e-3, "tolerance": 2e-2, "duration_s": 0.7,
                    "extra": {"world_size": 2, "rank0_max_error": 1e-3, "rank1_max_error": 2e-3}})
    pred["kernel_tests"] = tests
    for b in GRID_BATCHES:
        tp2 = benchmark(b, fused=fused_tp2)
        tp2["point"] = point(b, 128, tp=2)
        tp2["world_size"] = 2
        tp2["ranks"] = [{"rank": r, "status": "ok", "kernels_per_step": {"stock": 12, "fused": 3},
                         "collectives_per_step": {"stock": 2, "fused": 1}, "bytes_moved": {"fused": 1.2e8}}
                        for r in (0, 1)]
        for name, v in tp2["variants"].items():
            v.update(gpus=2, bytes_moved=1.2e8, collectives_per_step=2 if name == "stock" else 1,
                     samples_us_rank0=samples(100.0 if name == "stock" else fused_tp2, spread=0.01),
                     samples_us_rank1=list(v["samples_us"]))
        pred["benchmarks"].append(tp2)
    fx.write_and_sign()
    return fx


needs_ssh = pytest.mark.skipif(__import__("shutil").which("ssh-keygen") is None, reason="needs ssh-keygen")


@needs_ssh
def test_a_bundle_with_tp2_points_is_judged_per_point(tmp_path: Path) -> None:
    from bundle_factory import run_all

    from fasttrack.evidence import analysis as an

    fx = tp2_bundle(tmp_path)
    ctx = fx.context()
    found = run_all(ctx)
    assert found == [], [(f.code, f.message) for f in found]
    cov = {an.point_key(c.point): c for c in an.coverage(ctx)}
    assert len(cov) == 12 and cov["NVIDIA H200|tp2|b1|c128|bfloat16"].covered
    checks = {c.claim.name: c for c in an.claim_checks(ctx)}
    assert checks["fused-vs-stock-tp2-b1"].holds  # recomputed from the merged (max over ranks) samples
    assert checks["fused-vs-stock-tp2-b1"].estimate.ratio == pytest.approx(2.0, rel=0.05)  # type: ignore[union-attr]


@needs_ssh
def test_tp2_failures_are_found_at_the_tp2_points(tmp_path: Path) -> None:
    from bundle_factory import run_all, run_rule

    slow = tp2_bundle(tmp_path / "slow", fused_tp2=90.0)
    found = {(f.code, f.message.split(":")[0]) for f in run_all(slow.context())}
    assert ("FT308", "claim 'fused-vs-stock-tp2-b1' (fused vs stock >= 1.5x) does not hold") in found

    fx = tp2_bundle(tmp_path / "holes")
    pred = fx.pred
    pred["kernel_tests"] = [t for t in pred["kernel_tests"]
                            if not (t["point"]["tp"] == 2 and t["point"]["batch"] == 4)]
    one_process = next(b for b in pred["benchmarks"] if b["point"]["tp"] == 2 and b["point"]["batch"] == 2)
    del one_process["world_size"]
    fx.write_and_sign()
    ctx = fx.context()
    ft304 = [f.message for f in run_rule("FT304", ctx)]
    assert ft304 == ["NVIDIA H200 tp=2 batch=4 context=1 bfloat16: no kernel test ran",
                     "NVIDIA H200 tp=2 batch=4 context=128 bfloat16: no kernel test ran"]
    ft317 = [f.message for f in run_rule("FT317", ctx)]
    assert ft317 == ["the benchmark at NVIDIA H200 tp=2 batch=2 context=128 bfloat16 ran as one process "
                     "(no world_size recorded), not as 2 ranks"]

    few = tp2_bundle(tmp_path / "few")
    few.pred["environment"].update(gpu_count=1, interconnect=None)
    few.write_and_sign()
    msgs = [f.message for f in run_rule("FT317", few.context())]
    assert "points at tp=2 but the machine has 1 GPUs" in msgs
    assert any("does not record how the GPUs are linked" in m for m in msgs)
