"""The fused path at TP 2 (`fused/tp_launch.py`, `fused/tp_kernels.py`).

CPU (two gloo ranks, "copy" transport, Triton interpreter, tiny shapes): each rank holds its shard of one
set of full weights (`tp.shard_weights`) and the same replicated activations and NaN-poisoned latent cache.
Every rank must return the same bits, and that result is checked against
- the stock path at TP 2 (vLLM's collectives) and at TP 1 on the full weights,
- the fused path at TP 1 on the full weights,
- the fp32 reference (`reference.compare`: hidden / residual / cache tolerances, the cache untouched
  outside each row's new slot, no routing mismatch with a clear margin),
at batch 1, 2 and 33 with the default (whole-matrix) plan and at batch 5 with small tiles, so every
multi-block path of the TP kernels runs (split-K o_proj partials, several all-reduce column blocks, several
router / latent blocks and gather blocks per rank, several top-k CTAs, reduce CTAs before GEMV CTAs in the
tail). All cases run in one two-process group (one spawn: the interpreter start-up dominates).

GPU (marker `gpu`, two CUDA devices, NCCL + the "peer" transport: torch symmetric memory): the same checks
at tiny shapes and at real TP 2 shapes, and a CUDA-graph capture of the TP 2 layer whose replays must be
bit-identical to eager.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from kimi_k3.tests._dist import run_ranks
from kimi_k3.tests.test_fused import SMALL_TILES  # tensor-core tiles >= 16 wide: also compile on a GPU

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN poison inside masked loads

# CUDA-core (FMA) tiles everywhere but expert_up, narrow enough that each rank's router slice (8 rows at tiny
# shapes), latent slice (16) and the latent reduce (32 columns) span several blocks
SMALL_FMA: dict[str, Any] = dict(SMALL_TILES, MODE=0, X_MODE=0, F_BN=4, D_BN=8, T_BN=8, RB=2)


def _lens(bsz: int, seed: int, most: int = 80) -> list[int]:
    rng = random.Random(seed)
    lens = [rng.randint(1, most) for _ in range(bsz)]
    lens[0] = 1
    if bsz > 1:
        lens[1] = most
    return lens


# name -> (seq_lens, batch seed, plan overrides)
CASES: dict[str, tuple[list[int], int, dict[str, Any]]] = {
    "B1": ([1], 1, {}),
    "B2": ([40, 17], 2, {}),
    "B33": (_lens(33, 33), 33, {}),
    "B5_small_tiles": ([1, 80, 17, 40, 3], 5, SMALL_TILES),
    "B4_small_fma": ([33, 1, 64, 9], 4, SMALL_FMA),
}


def _bits(t: Any) -> Any:
    import torch

    return t.contiguous().view(torch.int16).clone() if t.dtype == torch.bfloat16 else t.clone()


def _tp_rank(
    rank: int,
    world: int,
    cases: dict[str, tuple[list[int], int, dict[str, Any]]],
    cfg_name: str = "tiny",
    device: str = "cpu",
    graph: bool = False,
) -> dict[str, Any]:
    """One rank: for every case run fused TP, stock TP, stock / fused TP 1 on the full weights and the
    reference; return scalar metrics and the bits the parent compares across ranks."""
    import torch

    from baselines.vllm.kimi_k3 import reference, stock
    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from baselines.vllm.kimi_k3.tp import TPGroup, shard_weights
    from baselines.vllm.kimi_k3.weights import K3LayerWeights
    from kimi_k3 import fused
    from kimi_k3.layer import Workspace, random_batch

    cfg = K3LayerConfig.tiny() if cfg_name == "tiny" else K3LayerConfig.real(1)
    full = K3LayerWeights.random(cfg, device=device, seed=7)
    shard = shard_weights(full, rank, world)
    scfg = shard.cfg
    tp = TPGroup.from_env()
    gpu = device != "cpu"
    res: dict[str, Any] = {"transport": tp.transport}
    for name, (lens, seed, over) in cases.items():
        bsz, ctx = len(lens), max(lens)
        r: dict[str, Any] = {}
        # fused TP
        batch = random_batch(scfg, lens, device=device, seed=seed)
        batch.tp = tp
        batch.workspace = Workspace()
        before = batch.kv_cache.clone()
        plan = fused.make_plan(scfg, bsz, ctx, gpu=gpu, **over)
        out, resid, aux = fused.run_planned(scfg, shard, batch, plan)
        cmp = reference.compare(cfg, full, batch, before, out, resid, topk_ids=aux["topk_ids"])
        r["ref_ok"] = bool(
            cmp.finite and cmp.cache_untouched and cmp.route_mismatch_rows == 0 and cmp.max_ratio() <= 1.0
        )
        r["ref_summary"] = cmp.summary()
        n = int(aux["ctr"][17])
        r["slots_ok"] = sorted(aux["slot_exp"][:n].tolist()) == sorted(
            set(aux["topk_ids"].flatten().tolist())
        )
        # again on the same batch (exchange buffers and workspaces reused; the cache write is idempotent)
        out2, resid2, _ = fused.run_planned(scfg, shard, batch, plan)
        r["repeat_same"] = bool(
            torch.equal(_bits(out), _bits(out2)) and torch.equal(_bits(resid), _bits(resid2))
        )
        if graph:
            from kimi_k3.benchmarks.measure_fused import graphed

            g, gouts = graphed(lambda b=batch, p=plan: fused.run_planned(scfg, shard, b, p)[:2])
            same = 0
            for _ in range(10):
                g.replay()
                same += int(
                    torch.equal(_bits(gouts[0]), _bits(out)) and torch.equal(_bits(gouts[1]), _bits(resid))
                )
            r["graph_same"] = same == 10
            del g
        # stock TP (vLLM's collectives) on the same shard
        sb = random_batch(scfg, lens, device=device, seed=seed)
        sb.tp = tp
        s_out, s_resid, s_aux = stock.forward_with_aux(scfg, shard, sb)
        # TP 1 on the full weights: stock and fused
        b1 = random_batch(cfg, lens, device=device, seed=seed)
        o1, _, s1_aux = stock.forward_with_aux(cfg, full, b1)
        f1 = random_batch(cfg, lens, device=device, seed=seed)
        fo1, fr1, faux1 = fused.run_planned(cfg, full, f1, fused.make_plan(cfg, bsz, ctx, gpu=gpu))
        scale = max(1.0, float(o1.float().abs().max()))
        r["scale"] = scale

        def dmax(x: Any, y: Any) -> float:
            return float((x.float() - y.float()).abs().max())

        # Another path rounds the router input differently (stock: bf16 o_proj output and all-reduce; TP 1:
        # no reduction over ranks), so on a near-tie it may pick another expert, which changes that row's
        # hidden output entirely. Outputs are compared on the rows routed alike; the others must be no more
        # than the rows the reference calls ambiguous (checked in _check).
        mine = aux["topk_ids"].long().sort(-1).values
        r["ambiguous_rows"] = int(cmp.ambiguous_rows)
        for key, o_other, ids_other in (
            ("stock_tp", s_out, s_aux["topk_ids"]),
            ("stock_tp1", o1, s1_aux["topk_ids"]),
            ("fused_tp1", fo1, faux1["topk_ids"]),
        ):
            alike = (mine == ids_other.long().sort(-1).values).all(-1)
            r[f"other_routes_{key}"] = int((~alike).sum())
            r[f"out_vs_{key}"] = dmax(out[alike], o_other[alike]) if bool(alike.any()) else 0.0
        r["resid_vs_stock_tp"] = dmax(resid, s_resid)
        r["resid_vs_fused_tp1"] = dmax(resid, fr1)
        # the cache this rank wrote vs stock TP 1's and fused TP 1's (NaN-aware, bitwise)
        r["cache_vs_stock_tp1"] = dmax(batch.kv_cache.nan_to_num(123.0), b1.kv_cache.nan_to_num(123.0))
        # same kernels on the same replicated q_a|kv_a rows: bitwise under the interpreter; on a GPU the tile
        # widths differ with the gate rows (TP 1: 96 heads' worth), so allow rounding there
        r["cache_vs_fused_tp1"] = dmax(batch.kv_cache.nan_to_num(123.0), f1.kv_cache.nan_to_num(123.0))
        r["cache_exact"] = not gpu
        r["bits"] = {
            "out": _bits(out).cpu(),
            "resid": _bits(resid).cpu(),
            "cache": _bits(batch.kv_cache).cpu(),
            "topk_ids": aux["topk_ids"].cpu(),
            "topk_w": aux["topk_weights"].cpu(),
        }
        res[name] = r
        del batch, sb, b1, f1
    return res


def _check(results: list[dict[str, Any]], name: str, *, tol: float = 0.03) -> None:
    import torch

    r0 = results[0][name]
    for rank, rr in enumerate(results):
        r = rr[name]
        tag = f"{name} rank {rank}"
        assert r["ref_ok"], f"{tag}: {r['ref_summary']}"
        assert r["slots_ok"], f"{tag}: the touched-expert list does not cover the chosen experts"
        assert r["repeat_same"], f"{tag}: a second call on the same inputs differs"
        for k in ("stock_tp", "stock_tp1", "fused_tp1"):
            n = r[f"other_routes_{k}"]
            assert n <= r["ambiguous_rows"], (
                f"{tag}: {n} rows routed unlike {k} ({r['ambiguous_rows']} ambiguous)"
            )
        # bf16 outputs through a different (but fixed) reduction order: rounding differences only
        for k in ("out_vs_stock_tp", "out_vs_stock_tp1", "out_vs_fused_tp1"):
            assert r[k] <= tol * r["scale"], f"{tag}: {k} = {r[k]} (scale {r['scale']})"
        for k in ("resid_vs_stock_tp", "resid_vs_fused_tp1"):
            assert r[k] <= tol * r["scale"], f"{tag}: {k} = {r[k]}"
        assert r["cache_vs_stock_tp1"] <= 0.05, (
            f"{tag}: cache differs from stock TP 1 by {r['cache_vs_stock_tp1']}"
        )
        lim = 0.0 if r["cache_exact"] else 0.05
        assert r["cache_vs_fused_tp1"] <= lim, f"{tag}: cache vs fused TP 1: {r['cache_vs_fused_tp1']}"
        if "graph_same" in r:
            assert r["graph_same"], f"{tag}: graph replays differ from eager"
        for k, v in r["bits"].items():
            assert torch.equal(v, r0["bits"][k]), f"{tag}: {k} differs from rank 0's"


# ---------------------------------------------------------------------------------------------------------
# CPU: two gloo ranks, copy transport
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_results() -> list[dict[str, Any]]:
    return run_ranks(_tp_rank, world=2, backend="gloo", cases=CASES)


@pytest.mark.parametrize("name", list(CASES))
def test_fused_tp2_matches_stock_tp1_and_reference(name: str, cpu_results: list[dict[str, Any]]) -> None:
    assert all(r["transport"] == "copy" for r in cpu_results)
    _check(cpu_results, name)


def test_tp_plan_and_counts() -> None:
    """Host only: kernel / publish counts, the plans at real TP 2 shapes, and the TP checks."""
    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from baselines.vllm.kimi_k3.tp import TPGroup
    from kimi_k3 import fused
    from kimi_k3.fused.launch import KERNELS_PER_LAYER_TP, PUBLISHES_PER_LAYER_TP, _check_plan
    from kimi_k3.fused.tp_launch import check_tp

    assert (KERNELS_PER_LAYER_TP, PUBLISHES_PER_LAYER_TP) == (10, 3)
    cfg = K3LayerConfig.real(2)
    for bsz in (1, 2, 8, 33, 64):
        for ctx in (1, 4096, 32768):
            _check_plan(cfg, fused.make_plan(cfg, bsz, ctx))
    check_tp(cfg, TPGroup(rank=1, world=2))
    with pytest.raises(ValueError):
        check_tp(cfg, TPGroup(rank=0, world=4))  # a TP-2 shard in a 4-rank group
    with pytest.raises(ValueError):
        check_tp(K3LayerConfig.tiny(tp=2, n_routed_experts=17), TPGroup(rank=0, world=2))


# ---------------------------------------------------------------------------------------------------------
# GPU: two CUDA devices, NCCL, peer transport (symmetric memory)
# ---------------------------------------------------------------------------------------------------------
def _need_two_gpus() -> None:
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")


GPU_TINY_CASES: dict[str, tuple[list[int], int, dict[str, Any]]] = {
    "B1": ([1], 1, {}),
    "B2": ([40, 17], 2, {}),
    "B33": (_lens(33, 33), 33, {}),
    "B64": (_lens(64, 64), 64, {}),
    "B5_small_tiles": ([1, 80, 17, 40, 3], 5, SMALL_TILES),
    "B4_small_fma": ([33, 1, 64, 9], 4, SMALL_FMA),
}


@pytest.mark.gpu
def test_fused_tp2_gpu_tiny_peer() -> None:
    _need_two_gpus()
    res = run_ranks(_tp_rank, world=2, backend="nccl", cases=GPU_TINY_CASES, device="cuda")
    assert all(r["transport"] == "peer" for r in res)
    for name in GPU_TINY_CASES:
        _check(res, name)


@pytest.mark.gpu
def test_fused_tp2_gpu_graph_replay() -> None:
    """CUDA-graph capture of the TP 2 fused layer (the symmetric-memory barriers inside the graph): replays
    bit-identical to eager, on both ranks."""
    _need_two_gpus()
    cases = {k: GPU_TINY_CASES[k] for k in ("B1", "B33")}
    res = run_ranks(_tp_rank, world=2, backend="nccl", cases=cases, device="cuda", graph=True)
    for name in cases:
        _check(res, name)


def _real_rank(rank: int, world: int, cases: dict[str, list[int]]) -> dict[str, Any]:
    """Real TP 2 shapes: each rank builds the full TP-1 weights on its GPU (~60 GB), shards them, and checks
    fused TP 2 against stock TP 2 and the fp32 reference on the full weights (then frees them)."""
    import torch

    from baselines.vllm.kimi_k3 import reference, stock
    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from baselines.vllm.kimi_k3.tp import TPGroup, shard_weights
    from baselines.vllm.kimi_k3.weights import K3LayerWeights
    from kimi_k3 import fused
    from kimi_k3.layer import Workspace, random_batch

    cfg = K3LayerConfig.real(1)
    full = K3LayerWeights.random(cfg, device="cuda", seed=7)
    shard = shard_weights(full, rank, world)
    scfg = shard.cfg
    tp = TPGroup.from_env()
    res: dict[str, Any] = {"transport": tp.transport}
    for name, lens in cases.items():
        batch = random_batch(scfg, lens, device="cuda", seed=len(lens))
        batch.tp = tp
        batch.workspace = Workspace()
        before = batch.kv_cache.clone()
        out, resid, aux = fused.forward_with_aux(scfg, shard, batch)
        cmp = reference.compare(cfg, full, batch, before, out, resid, topk_ids=aux["topk_ids"])
        sb = random_batch(scfg, lens, device="cuda", seed=len(lens))
        sb.tp = tp
        s_out, s_resid, _ = stock.forward_with_aux(scfg, shard, sb)
        res[name] = {
            "ok": bool(cmp.ok()),
            "summary": cmp.summary(),
            "hidden_vs_stock": float(
                (
                    (out.float() - s_out.float()).norm(dim=-1) / s_out.float().norm(dim=-1).clamp_min(1e-30)
                ).max()
            ),
            "resid_vs_stock": float(
                ((resid.float() - s_resid.float()).norm(dim=-1) / s_resid.float().norm(dim=-1)).max()
            ),
            "out": _bits(out).cpu(),
            "resid": _bits(resid).cpu(),
        }
        del batch, sb, before
    del full, shard
    torch.cuda.empty_cache()
    return res


@pytest.mark.gpu
def test_fused_tp2_gpu_real_shapes() -> None:
    import torch

    from baselines.vllm.kimi_k3 import reference

    _need_two_gpus()
    cases = {"B1_4k": [4096], "B8_mixed": [4096] + [1 + 517 * i for i in range(1, 8)], "B64_4k": [4096] * 64}
    res = run_ranks(_real_rank, world=2, backend="nccl", timeout_s=1800.0, cases=cases)
    for name in cases:
        for rank, rr in enumerate(res):
            r = rr[name]
            assert r["ok"], f"{name} rank {rank}: {r['summary']}"
            assert r["hidden_vs_stock"] <= reference.TOLERANCES["hidden"], (name, rank, r["hidden_vs_stock"])
            assert r["resid_vs_stock"] <= reference.TOLERANCES["residual"], (name, rank, r["resid_vs_stock"])
            assert torch.equal(r["out"], res[0][name]["out"]) and torch.equal(
                r["resid"], res[0][name]["resid"]
            )
