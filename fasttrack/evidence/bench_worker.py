"""The subprocess `fasttrack collect` runs for the environment probe, the benchmarks and the evals.

    python -m fasttrack.evidence.bench_worker env|bench|evals SPEC.json

A subprocess keeps a crashing kernel from taking the collector down and keeps contribution code out of the
collector's process. For `bench`, the order matters: the timing module (and so its saved timer references)
and the backend are set up, the timer guard takes its snapshot, and only then is the contribution imported.
Each sample goes to the collector over its result stream (`fasttrack.evidence.stream`) as it is measured, and
each point's record right after the point; the collector builds the bench part only from that stream. The
record is also written to its own file (for the work dir's record; the collector never reads it back).
Progress goes to stdout as ``FTPROGRESS {json}`` lines.

Tensor parallel: for points at tp = n > 1 the collector launches ``bench`` as n ranks under torchrun
(``python -m torch.distributed.run --standalone --nproc-per-node n -m fasttrack.evidence.bench_worker bench
SPEC``). With WORLD_SIZE > 1 each rank sets its CUDA device to LOCAL_RANK (the backend does), takes the timer
snapshot, then initialises the default process group (nccl; gloo on the CPU backend) *before* the
contribution is imported, so `benchmark_case(point)` finds it initialised. Every rank runs the same protocol
in lockstep and writes its own result (``<out>.rank<r>.json``); the collector merges them
(`fasttrack.evidence.ranks`). Only rank 0 reports progress.
"""

from __future__ import annotations

# Imported first, on purpose: these references are taken before any contribution module is imported.
import fasttrack.evidence.timing as timing  # isort: skip

import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fasttrack.evidence.baseline as yard
from fasttrack.evidence import stream as result_stream
from fasttrack.evidence.ranks import dist_env, rank_path

PROGRESS_PREFIX = "FTPROGRESS "
_QUIET = False  # set on ranks other than 0 (one progress stream per point)


def emit(**event: Any) -> None:
    if _QUIET:
        return
    sys.stdout.write(PROGRESS_PREFIX + json.dumps(event, sort_keys=True) + "\n")
    sys.stdout.flush()


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def resolve_entry(entry: str, search_dir: Path) -> Callable[..., Any]:
    """Import `module:callable` with `search_dir` (the contribution's parent) first on sys.path."""
    if ":" not in entry:
        raise ValueError(f"entry point {entry!r} must look like module:callable")
    module_name, _, attr = entry.partition(":")
    if str(search_dir) not in sys.path:
        sys.path.insert(0, str(search_dir))
    module = importlib.import_module(module_name)
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{entry} is not callable")
    return target  # type: ignore[no-any-return]


def _step_reporter(index: int) -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        emit(event="step", index=index, done=done, total=total)

    return report


def _log(message: str) -> None:
    print(message, file=sys.stderr)


def run_env(spec: dict[str, Any]) -> int:
    from fasttrack.evidence.environment import capture_environment

    info = capture_environment(measure_bandwidth=bool(spec.get("measure_bandwidth", True)))
    write_json_atomic(Path(spec["out"]), info.as_dict())
    return 0


def init_distributed(backend: timing.Backend, guard: timing.TimerGuard, rank: int, world: int,
                     local_rank: int) -> Any:
    """Initialise the default process group for this rank (nccl on CUDA, gloo on the CPU backend) and put
    the backend in lockstep with the other ranks. Runs before the contribution is imported."""
    import torch
    import torch.distributed as dist

    if backend.name == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    backend.enable_distributed(dist, rank, world, device)
    guard.watch("torch.distributed.all_reduce", dist, "all_reduce")  # the rendezvous goes through it
    return dist


def _agreed(backend: timing.Backend, why: str | None, elsewhere: str) -> str | None:
    """`why` here, or `elsewhere` when another rank failed (every rank stops at the same step)."""
    if not backend.agree(why is None) and why is None:
        return elsewhere
    return why


def _warm_engine_side(case: Any) -> None:
    """Run stock and every extra engine-side variant once (JIT builds, torch.compile, plan caches) so the
    engine's own lazy set-up happens before the yardstick guard's snapshot, not after it."""
    inputs = timing.clone_tree(case.static_inputs)
    case.stock(inputs)
    for fn in (getattr(case, "extra_baselines", {}) or {}).values():
        fn(timing.clone_tree(case.static_inputs))


def _build_point(baseline_fn: Callable[..., Any], candidates_fn: Callable[..., Any], point: dict[str, Any],
                 caps: dict[str, yard.Cap], backend: timing.Backend, guard: yard.YardstickGuard,
                 world: int, engine_pass: bool = False) -> tuple[Any, str | None, str]:
    """(composed case, why not, who): who is "machine" (the baseline has no case here), "engine" (the
    baseline broke its contract: a harness problem) or "contribution" (its candidates did)."""
    if int(point.get("tp", 1)) != world:
        return None, f"the point is at tp={point.get('tp')} but this worker runs {world} rank(s)", "harness"
    baseline: Any = None
    why: str | None = None
    who = "engine"
    try:
        baseline = baseline_fn(dict(point))
        if baseline is None:
            why, who = "the engine's baseline has no case for this point on this machine", "machine"
        else:
            yard.check_baseline(baseline, f"at {point}")
            _warm_engine_side(baseline)
    except Exception as exc:
        why = f"the engine's baseline raised {type(exc).__name__}: {exc}"
        print(traceback.format_exc(), file=sys.stderr)
    why = _agreed(backend, why, "the baseline could not be built on another rank (see that rank's result)")
    if why is not None:
        return None, why, who
    guard.snapshot(baseline)  # from here on only contribution code may have changed what the snapshot holds
    case: Any = None
    try:
        candidates = candidates_fn(baseline, dict(point))
        moved = guard.changed()  # before compose reads anything off the baseline
        if moved:
            raise yard.ContractError("building the candidates changed the yardstick: "
                                     + "; ".join(moved[:20]))
        case = yard.compose(baseline, candidates, caps, f"at {point}", engine_pass=engine_pass)
    except Exception as exc:
        why = f"the contribution's candidates entry point failed: {type(exc).__name__}: {exc}"
        print(traceback.format_exc(), file=sys.stderr)
    why = _agreed(backend, why, "the candidates could not be built on another rank (see that rank's result)")
    return (case if why is None else None), why, "contribution"


def measure_point(baseline_fn: Callable[..., Any], candidates_fn: Callable[..., Any], point: dict[str, Any],
                  caps: dict[str, yard.Cap], backend: timing.Backend, yardstick: yard.YardstickGuard,
                  guard: timing.TimerGuard, settings: timing.ProtocolSettings, world: int,
                  index: int = 0, engine_pass: bool = False,
                  recorder: timing.Recorder | None = None) -> timing.CaseResult:
    """One point: build it from both sides, time it, and reject it if contribution code moved the
    yardstick while it ran."""
    dist_info: dict[str, Any] = {"world_size": world, "rank": backend.rank if world > 1 else None}
    case, why, who = _build_point(baseline_fn, candidates_fn, point, caps, backend, yardstick, world,
                                  engine_pass)
    if case is None:
        status = "not_run" if who == "machine" else "rejected"
        return timing.CaseResult(point=point, status=status, reasons=[why or "not run"], not_run_by=who,
                                 **dist_info)
    result = timing.run_case(case, backend, settings, point, guard=guard, progress=_step_reporter(index),
                             log=_log, recorder=recorder)
    tampered = yardstick.changed()
    if tampered:
        result.reasons = [*result.reasons, *(f"while contribution code ran: {c}" for c in tampered[:50])]
        result.status = "rejected"
    return result


def run_bench(spec: dict[str, Any]) -> int:
    global _QUIET
    rank, world, local_rank = dist_env()
    _QUIET = rank != 0
    engine_pass = spec.get("engine_only") is True
    # The result stream first: connected (and its address and nonce gone from the environment) before any
    # contribution module is imported: a forger that connects (first or second) gets a hello refused, and
    # the pass rejected.
    stream = result_stream.StreamClient.from_env(rank, world, "engine" if engine_pass else "contribution")
    backend = timing.make_backend(spec["backend"], flush_bytes=spec.get("flush_bytes"),
                                  device=local_rank if world > 1 else 0)
    # The clocks and the harness's own functions, methods and saved references (the stream client's too).
    harness = [timing, result_stream, sys.modules[__name__]]
    held = [("backend", backend), *([] if stream is None else [("stream client", stream)])]
    guard = timing.TimerGuard().snapshot([*backend.guard_targets(), *timing.harness_targets(harness, held)])
    dist = init_distributed(backend, guard, rank, world, local_rank) if world > 1 else None
    settings = timing.ProtocolSettings(iterations=int(spec["iterations"]), warmup=int(spec["warmup"]))
    base = spec["baseline"]
    caps = {str(k): yard.Cap(float(v["atol"]), float(v["rtol"]), float(v["record"]))
            for k, v in base["caps"].items()}
    # The engine side first, from the engine root: its modules are imported and snapshotted before any
    # contribution module is.
    baseline_fn = yard.resolve(base["case"], Path(base["search_dir"]))
    yard.import_package_tree(base["case"].split(":", 1)[0])
    yardstick = yard.YardstickGuard(yard.engine_prefixes(base["case"])).snapshot()
    import_problem: list[str] = []
    candidates_fn: Callable[..., Any] | None = None
    if engine_pass:
        # The engine's own pass: no contribution module is imported in this process, so nothing of the
        # contribution can reach stock's timer, its records or the oracle here (docs/baseline-contract.md).
        candidates_fn = yard.no_candidates
    else:
        try:
            candidates_fn = yard.resolve(spec["entry"], Path(spec["search_dir"]))
        except Exception as exc:
            import_problem.append(f"the contribution's candidates entry {spec['entry']!r} could not be "
                                  f"imported: {type(exc).__name__}: {exc}")
            print(traceback.format_exc(), file=sys.stderr)
        import_problem += [f"importing the contribution: {c}" for c in yardstick.changed()]
    for job in spec["points"]:
        point = job["point"]
        out = rank_path(Path(job["out"]), rank) if world > 1 else Path(job["out"])
        emit(event="point", index=job["index"], point=point)
        point_id = str(job.get("id", ""))
        if stream is not None:
            stream.point(point_id)
        dist_info: dict[str, Any] = {"world_size": world, "rank": rank if world > 1 else None}
        if import_problem or candidates_fn is None:
            result = timing.CaseResult(point=point, status="rejected", reasons=import_problem[:50],
                                       not_run_by="contribution", **dist_info)
        else:
            result = measure_point(baseline_fn, candidates_fn, point, caps, backend, yardstick, guard,
                                   settings, world, int(job["index"]), engine_pass=engine_pass,
                                   recorder=None if stream is None else stream.recorder(point_id))
        late = [c for c in guard.changed() if f"{c} was replaced" not in " ".join(result.reasons)]
        if late:  # replaced after the point's own check (the last contribution code of the point ran since)
            result.reasons = [*result.reasons,
                              *(f"{c} was replaced while contribution code ran" for c in late)]
            result.status = "rejected"
        record = result.model_dump(mode="json")
        if stream is not None:
            stream.result(point_id, record)
        print(json.dumps({"point": point, "rank": rank, "result": record}, sort_keys=True), file=sys.stderr)
        write_json_atomic(out, record)
        emit(event="done", index=job["index"], status=result.status)
    if stream is not None:
        stream.end()
    if dist is not None:
        dist.barrier()
        dist.destroy_process_group()
    return 0


def run_evals(spec: dict[str, Any]) -> int:
    fn = resolve_entry(spec["entry"], Path(spec["search_dir"]))
    results = fn(spec["device"])
    if not isinstance(results, list):
        raise TypeError(f"{spec['entry']} returned {type(results).__name__}, expected a list of dicts")
    write_json_atomic(Path(spec["out"]), results)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] not in ("env", "bench", "evals"):
        print("usage: python -m fasttrack.evidence.bench_worker env|bench|evals SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(args[1]).read_text(encoding="utf-8"))
    mode = {"env": run_env, "bench": run_bench, "evals": run_evals}[args[0]]
    try:
        return mode(spec)
    except Exception:
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
