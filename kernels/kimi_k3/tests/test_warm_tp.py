"""CPU tests of the TP warm-up (`benchmarks/measure_fused.py`: `CompileOnlyTP`, `warm_keys[_once]`).

The warm-up is only worth anything if it compiles exactly the Triton cache entries the real launches look up.
`test_warm_launches_have_the_real_cache_keys` checks that without a GPU: in a subprocess with
`TRITON_INTERPRET` unset (the interpreter has no compile cache, and the session sets it on CPU), it runs the
real host code twice per plan, with every launch intercepted (nothing runs):
- warm path: meta tensors and a `CompileOnlyTP` group, as the warm-up workers do;
- real path: CPU tensors built the way the GPU tests (`random_batch`, `_lens`, a workspace) or the bench
  (`K3BenchmarkCase`'s block table and cache layout) build them, a real `TPGroup` ("copy" transport: real
  exchange buffers, only its all-gather left out), rank 0 and rank 1; w13 / w2 are meta there too (30 GB at
  TP 2; a fresh allocation, aligned either way, only their pointer is passed),
and compares, launch by launch, the sha256 under which `triton.compile` stores / finds the kernel for sm_90
(`measure_fused.triton_cache_key`: Triton's own binder, so the same alignment / `== 1` / divisible-by-16
specialisations and constexprs as `JITFunction.run`). A control shows the key does move with such a value.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from kimi_k3.benchmarks import measure_fused as M

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS_DIR = os.path.dirname(os.path.dirname(HERE))

TP_SEQUENCE = [
    "qkv_a_kernel", "q_b_kernel", "attn_kernel", "o_proj_kernel", "ar_resid_kernel", "front_tp_kernel",
    "route_tp_kernel", "expert_up_kernel", "down_tp_kernel", "tail_tp_kernel",
]


# ---- run in the subprocess ---------------------------------------------------------------------------------
def _record(out: list[list[str]]) -> Any:
    return lambda fn, a, kw, g, i: out.append([fn.__name__, M.triton_cache_key(fn, a, kw)])


def _keys_of(call: Any) -> list[list[str]]:
    out: list[list[str]] = []
    M.intercept_launches(call, _record(out))
    return out


_WEIGHTS: dict[int, Any] = {}


def _real_keys(tp: int, bsz: int, ctx: int, rank: int, layout: str, width_extra: int = 0) -> list[list[str]]:
    import dataclasses

    import torch

    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from baselines.vllm.kimi_k3.tp import TPGroup
    from baselines.vllm.kimi_k3.weights import K3LayerWeights, expected_shapes
    from kimi_k3 import fused
    from kimi_k3.layer import DecodeBatch, DecodeMeta, Workspace, random_batch

    class NoCommTP(TPGroup):  # the real "copy" transport's buffers; its all-gather is left out (no group)
        def _make_copy(self, name: str, shape: Any, dtype: Any, device: Any) -> Any:
            buf = super()._make_copy(name, shape, dtype, device)
            buf._publish = lambda: None
            return buf

    cfg = K3LayerConfig.real(tp)
    w = _WEIGHTS.get(tp)
    if w is None:
        ws = {}
        for n, s in expected_shapes(cfg).items():
            dt = torch.float32 if n == "e_score_correction_bias" else torch.bfloat16
            ws[n] = torch.empty(s, dtype=dt, device="meta" if n in ("w13", "w2") else "cpu")
        w = _WEIGHTS[tp] = K3LayerWeights(cfg=cfg, **ws)
        # prep.prepare's folded copies are fresh `new_empty` tensors: the same without the seconds of folding
        w._derived["fused.folded"] = fused.FusedWeights(
            **{f.name: torch.empty_like(getattr(w, f.name)) for f in dataclasses.fields(fused.FusedWeights)}
        )
    if layout == "test":  # as measure_fused.check_fused_point (tests/test_fused_gpu.py) builds it
        batch = random_batch(cfg, M._lens(bsz, ctx, seed=bsz), device="cpu", seed=ctx, poison=True)
    else:  # as bench.K3BenchmarkCase builds it
        nb = -(-ctx // cfg.block_size) + width_extra
        total = bsz * nb + 1
        batch = DecodeBatch(
            torch.empty((bsz, cfg.hidden), dtype=torch.bfloat16),
            torch.empty((bsz, cfg.hidden), dtype=torch.bfloat16),
            torch.empty((total, cfg.block_size, cfg.kv_cache_dim), dtype=torch.bfloat16),
            torch.randperm(total)[: bsz * nb].view(bsz, nb).to(torch.int32).contiguous(),
            torch.full((bsz,), ctx, dtype=torch.int32),
            DecodeMeta(batch=bsz, max_context=ctx, tp=tp),
        )
    batch.workspace = Workspace()
    batch.tp = NoCommTP(rank=rank, world=tp, transport="copy") if tp > 1 else None
    # forward / forward_with_aux on a CUDA batch: the plan of (cfg, B, max_context) with gpu=True
    plan = fused.make_plan(cfg, bsz, int(batch.meta.max_context), gpu=True)
    return _keys_of(lambda: fused.run_planned(cfg, w, batch, plan))


def _warm_keys(tp: int, bsz: int, ctx: int) -> list[list[str]]:
    out: list[list[str]] = []
    M.plan_launches(tp, bsz, ctx, {}, _record(out))
    return out


CASES = [  # (tp, batch, context, rank, layout)
    (2, 1, 16384, 0, "test"),
    (2, 1, 16384, 1, "test"),
    (2, 8, 32768, 1, "test"),
    (2, 64, 16384, 0, "bench"),
    (2, 2, 32768, 1, "bench"),
    (1, 1, 16384, 0, "test"),
]


def child_main() -> None:
    res: dict[str, Any] = {"cases": []}
    for tp, b, c, rank, layout in CASES:
        res["cases"].append({"case": [tp, b, c, rank, layout], "warm": _warm_keys(tp, b, c),
                             "real": _real_keys(tp, b, c, rank, layout)})
    # control: a block table one column wider (257 vs 256: not divisible by 16) must change the keys of the
    # kernels that take its width (q_b, attn), so equal keys above are not equal by construction
    res["control"] = _real_keys(2, 64, 16384, 0, "bench", width_extra=1)
    # the warm-up's split of a plan over processes: every launch compiled by exactly one part
    seen: list[list[Any]] = []
    tasks: list[M.WarmTask] = [(2, 1, 16384, {}, p, 3) for p in range(3)]
    M.warm_tasks(tasks, lambda fn, a, kw, g, i: seen.append([fn.__name__, i]))
    res["parts"] = seen
    print("RESULT " + json.dumps(res))


# ---- the tests ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def child() -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = KERNELS_DIR + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run(
        [sys.executable, "-c", "from kimi_k3.tests.test_warm_tp import child_main; child_main()"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    out: dict[str, Any] = json.loads(line[len("RESULT "):])
    return out


def test_warm_launches_have_the_real_cache_keys(child: dict[str, Any]) -> None:
    for c in child["cases"]:
        tp = c["case"][0]
        names = [n for n, _ in c["warm"]]
        assert names == (TP_SEQUENCE if tp > 1 else [
            "qkv_a_kernel", "q_b_kernel", "attn_kernel", "o_proj_kernel", "moe_front_kernel",
            "expert_up_kernel", "expert_down_kernel"]), c["case"]
        assert c["warm"] == c["real"], c["case"]
    by_case = {tuple(c["case"]): c["warm"] for c in child["cases"]}
    # one warm-up serves both ranks; different plans are different entries
    assert by_case[(2, 1, 16384, 0, "test")] == by_case[(2, 1, 16384, 1, "test")]
    assert by_case[(2, 1, 16384, 0, "test")][4][1] != by_case[(2, 64, 16384, 0, "bench")][4][1]


def test_cache_key_sees_an_int_specialisation(child: dict[str, Any]) -> None:
    ref = next(c["real"] for c in child["cases"] if c["case"] == [2, 64, 16384, 0, "bench"])
    ctl = child["control"]
    changed = {n for (n, k), (_, k2) in zip(ref, ctl, strict=True) if k != k2}
    assert changed == {"q_b_kernel", "attn_kernel"}


def test_warm_parts_cover_each_launch_once(child: dict[str, Any]) -> None:
    seen = sorted(child["parts"], key=lambda x: x[1])
    assert [i for _, i in seen] == list(range(10))
    assert [n for n, _ in seen] == TP_SEQUENCE


# ---- warm_keys / warm_keys_once machinery (a fake worker: no torch in the pool) ----------------------------
def fake_worker(tasks: list[Any]) -> str:
    assert all(len(t) == 6 and t[0] == 2 for t in tasks), tasks
    return "ok"


def failing_worker(tasks: list[Any]) -> str:
    return "boom"


def test_warm_keys_splits_tp_plans_over_processes() -> None:
    keys = [(2, 1, 16384, "{}"), (2, 64, 16384, "{}"), (2, 1, 16384, "{}")]
    info = M.warm_keys(keys, 4, worker=fake_worker, timeout=60)
    assert info["errors"] == [] and info["jobs"] == 2 and info["tasks"] == 4  # 2 parts per plan


def test_warm_keys_once_marks_done(tmp_path: Any) -> None:
    keys = [(2, 1, 16384, "{}")]
    bad = M.warm_keys_once(keys, 2, lock_dir=str(tmp_path), worker=failing_worker, timeout=60)
    assert bad["errors"] == ["boom", "boom"]
    first = M.warm_keys_once(keys, 2, lock_dir=str(tmp_path), worker=fake_worker, timeout=60)
    assert first["errors"] == [] and not first.get("skipped")
    again = M.warm_keys_once(keys, 2, lock_dir=str(tmp_path), worker=failing_worker, timeout=60)
    assert again["skipped"] is True


def test_grid_keys_cover_the_tp2_grid() -> None:
    keys = M.grid_keys(2)
    assert all(k[0] == 2 for k in keys)
    from baselines.vllm.kimi_k3.config import K3LayerConfig
    from kimi_k3 import fused
    from kimi_k3.guard import ENVELOPE

    cfg = K3LayerConfig.real(2)
    plans = {fused.make_plan(cfg, b, c) for _, b, c, _ in keys}
    for b in (ENVELOPE.batch_min, ENVELOPE.batch_max):  # every distinct plan of the envelope's corners
        for c in (ENVELOPE.context_min, ENVELOPE.context_max):
            assert fused.make_plan(cfg, b, c) in plans
