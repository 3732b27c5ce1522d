"""The subprocess `fasttrack collect` runs for the environment probe, the benchmarks and the evals.

    python -m fasttrack.evidence.bench_worker env|bench|evals SPEC.json

A subprocess keeps a crashing kernel from taking the collector down and keeps contribution code out of the
collector's process. For `bench`, the order matters: the timing module (and so its saved timer references)
and the backend are set up, the timer guard takes its snapshot, and only then is the contribution imported.
Each point's result is written atomically to its own file as soon as it is measured, so an interrupted run
resumes at the next point. Progress goes to stdout as ``FTPROGRESS {json}`` lines.
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

PROGRESS_PREFIX = "FTPROGRESS "


def emit(**event: Any) -> None:
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


def run_bench(spec: dict[str, Any]) -> int:
    backend = timing.make_backend(spec["backend"], flush_bytes=spec.get("flush_bytes"))
    guard = timing.TimerGuard().snapshot(backend.guard_targets())
    settings = timing.ProtocolSettings(iterations=int(spec["iterations"]), warmup=int(spec["warmup"]))
    factory = resolve_entry(spec["entry"], Path(spec["search_dir"]))
    for job in spec["points"]:
        point, out = job["point"], Path(job["out"])
        emit(event="point", index=job["index"], point=point)
        try:
            case = factory(dict(point))
        except Exception as exc:
            why = f"the benchmark entry point raised {type(exc).__name__}: {exc}"
            result = timing.CaseResult(point=point, status="not_run", reasons=[why])
            print(traceback.format_exc(), file=sys.stderr)
        else:
            if case is None:
                why = "the contribution's benchmark has no case for this point"
                result = timing.CaseResult(point=point, status="not_run", reasons=[why])
            else:
                result = timing.run_case(case, backend, settings, point, guard=guard,
                                         progress=_step_reporter(int(job["index"])), log=_log)
            del case
        print(json.dumps({"point": point, "result": result.model_dump(mode="json")}, sort_keys=True),
              file=sys.stderr)
        write_json_atomic(out, result.model_dump(mode="json"))
        emit(event="done", index=job["index"], status=result.status)
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
