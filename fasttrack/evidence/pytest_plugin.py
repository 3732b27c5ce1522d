"""fasttrack's pytest plugin: run a contribution's kernel tests over the envelope grid and record each result.

Registered as a ``pytest11`` entry point, so it loads in every pytest run of an environment where fasttrack is
installed. It is inert unless its options are used: it adds two options, one fixture pair and a
parametrization for tests that ask for ``envelope_point``; it imports nothing heavy (no pydantic, no torch).

* ``--fasttrack-grid FILE``: a JSON grid written by ``fasttrack collect``
  (``{"points": [{"gpu", "tp", "batch", "context", "dtype"}, ...], ...}``). Every test that takes the
  ``envelope_point`` fixture is parametrized over those points, with readable ids
  (``NVIDIA_H200-tp1-b2-c4096-bfloat16``). Without a grid such tests are skipped with a reason that says how
  to run them.
* ``--fasttrack-results FILE``: one JSON line is appended per test (nodeid, point, outcome, max_error,
  tolerance, duration_s, extra, message). Lines are written with one ``write`` on an ``O_APPEND`` descriptor,
  so several xdist workers can share the file.
* ``fasttrack_record(max_error=..., tolerance=..., **extra)``: a test reports the error it measured and the
  tolerance it holds it to. Recording is also an assertion: an error above its tolerance (or NaN) fails the
  test, so a test cannot pass while its own numbers say it should not.
* ``--fasttrack-envelope-only``: deselect every test that does not take ``envelope_point`` (the tp > 1 runs:
  the other tests already ran in the tp-1 run).

Tensor parallel: under torchrun (``WORLD_SIZE`` > 1) every rank writes its own results file,
``<stem>.rank<RANK><suffix>`` beside the ``--fasttrack-results`` path, and each line carries ``rank``; the
collector merges them (a test passes at a point only if it passed on every rank).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

GRID_KEYS = ("gpu", "tp", "batch", "context", "dtype")
SKIP_NO_GRID = (
    "needs an envelope grid: run the kernel tests through `fasttrack collect` "
    "(or pass --fasttrack-grid FILE with the grid it writes)"
)
SKIP_EMPTY_GRID = "the fasttrack grid has no envelope point for this machine's hardware"
MAX_MESSAGE_CHARS = 2000


@dataclass
class _Record:
    """What a test reported through ``fasttrack_record`` (the worst of several calls)."""

    max_error: float | None = None
    tolerance: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    calls: int = 0


@dataclass
class _Outcome:
    outcome: str = "passed"
    duration_s: float = 0.0
    message: str | None = None


@dataclass
class _State:
    points: list[dict[str, Any]] | None
    results_path: Path | None
    grid_meta: dict[str, Any] = field(default_factory=dict)
    rank: int | None = None  # under torchrun (WORLD_SIZE > 1)


_STATE_KEY = pytest.StashKey[_State]()
_RECORD_KEY = pytest.StashKey[_Record]()
_OUTCOME_KEY = pytest.StashKey[_Outcome]()


class GridFileError(Exception):
    """The grid file named by --fasttrack-grid cannot be used."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fasttrack", "fasttrack evidence collection")
    group.addoption(
        "--fasttrack-grid",
        action="store",
        default=None,
        metavar="FILE",
        help="JSON envelope grid (from `fasttrack collect`): parametrize tests taking `envelope_point`.",
    )
    group.addoption(
        "--fasttrack-results",
        action="store",
        default=None,
        metavar="FILE",
        help="Append one JSON line per test (point, outcome, max_error, tolerance) to FILE "
             "(under torchrun: one file per rank, FILE's stem + .rank<RANK>).",
    )
    group.addoption(
        "--fasttrack-envelope-only",
        action="store_true",
        default=False,
        help="Run only the tests that take `envelope_point` (deselect the others).",
    )


def load_grid(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Read and check a grid file; returns (points, other top-level keys). Raises GridFileError."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GridFileError(f"{path}: grid file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GridFileError(f"{path}: unreadable grid file: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        raise GridFileError(f"{path}: points: expected an object with a list under 'points'")
    points: list[dict[str, Any]] = []
    for i, raw in enumerate(data["points"]):
        if not isinstance(raw, dict):
            raise GridFileError(f"{path}: points[{i}]: expected an object")
        missing = [k for k in GRID_KEYS if k not in raw]
        if missing:
            raise GridFileError(f"{path}: points[{i}]: missing key(s) {', '.join(missing)}")
        unknown = sorted(set(raw) - set(GRID_KEYS))
        if unknown:
            raise GridFileError(f"{path}: points[{i}]: unknown key(s) {', '.join(unknown)}")
        for k in ("tp", "batch", "context"):
            if not isinstance(raw[k], int) or isinstance(raw[k], bool) or raw[k] < 1:
                raise GridFileError(f"{path}: points[{i}].{k}: expected a positive integer")
        for k in ("gpu", "dtype"):
            if not isinstance(raw[k], str) or not raw[k]:
                raise GridFileError(f"{path}: points[{i}].{k}: expected a non-empty string")
        points.append({k: raw[k] for k in GRID_KEYS})
    meta = {k: v for k, v in data.items() if k != "points"}
    return points, meta


def point_id(point: Mapping[str, Any]) -> str:
    """A readable, shell-safe test id for a point, e.g. ``NVIDIA_H200-tp1-b2-c4096-bfloat16``."""
    gpu = re.sub(r"[^A-Za-z0-9.]+", "_", str(point["gpu"])).strip("_") or "gpu"
    dtype = re.sub(r"[^A-Za-z0-9.]+", "_", str(point["dtype"])).strip("_")
    return f"{gpu}-tp{point['tp']}-b{point['batch']}-c{point['context']}-{dtype}"


def pytest_configure(config: pytest.Config) -> None:
    grid_opt = config.getoption("fasttrack_grid", default=None)
    results_opt = config.getoption("fasttrack_results", default=None)
    points: list[dict[str, Any]] | None = None
    meta: dict[str, Any] = {}
    if grid_opt:
        try:
            points, meta = load_grid(Path(grid_opt))
        except GridFileError as exc:
            raise pytest.UsageError(f"--fasttrack-grid: {exc}") from None
    results_path = Path(results_opt) if results_opt else None
    rank, world = _rank_and_world()
    if results_path is not None and world > 1:
        results_path = results_path.with_name(f"{results_path.stem}.rank{rank}{results_path.suffix}")
    if results_path is not None:
        results_path.parent.mkdir(parents=True, exist_ok=True)
    config.stash[_STATE_KEY] = _State(points=points, results_path=results_path, grid_meta=meta,
                                      rank=rank if world > 1 else None)


def _rank_and_world() -> tuple[int, int]:
    """(RANK, WORLD_SIZE) as torchrun sets them; (0, 1) outside torchrun."""
    try:
        return int(os.environ.get("RANK", "0")), max(int(os.environ.get("WORLD_SIZE", "1")), 1)
    except ValueError:
        return 0, 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("fasttrack_envelope_only", default=False):
        return
    keep = [i for i in items if "envelope_point" in getattr(i, "fixturenames", ())]
    dropped = [i for i in items if "envelope_point" not in getattr(i, "fixturenames", ())]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "envelope_point" not in metafunc.fixturenames:
        return
    state = metafunc.config.stash.get(_STATE_KEY, None)
    if state is None or state.points is None:
        metafunc.parametrize(
            "envelope_point", [pytest.param(None, marks=pytest.mark.skip(reason=SKIP_NO_GRID))],
            ids=["no-grid"],
        )
        return
    if not state.points:
        metafunc.parametrize(
            "envelope_point", [pytest.param(None, marks=pytest.mark.skip(reason=SKIP_EMPTY_GRID))],
            ids=["empty-grid"],
        )
        return
    metafunc.parametrize(
        "envelope_point", [dict(p) for p in state.points], ids=[point_id(p) for p in state.points]
    )


@pytest.fixture
def fasttrack_grid_meta(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The grid file's other keys (e.g. ``device``, ``gpu_count``), empty without a grid."""
    state = request.config.stash.get(_STATE_KEY, None)
    return dict(state.grid_meta) if state is not None else {}


def _as_float(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"fasttrack_record: {name} must be a number, got {type(value).__name__}") from None


def _plain(value: Any) -> Any:
    """Make an extra value JSON-friendly: numbers, strings, bools, None, lists and dicts of those."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    try:  # numpy / torch scalars
        return _plain(float(value))
    except (TypeError, ValueError):
        return str(value)


def _badness(err: float, tol: float | None) -> float:
    """How far an error is from its tolerance (NaN is the worst); used to keep the worst of several calls."""
    if math.isnan(err):
        return math.inf
    if not tol:
        return math.inf if err > 0 else 0.0
    return err / tol


@pytest.fixture
def fasttrack_record(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Report ``max_error`` and ``tolerance`` (and extra numbers); an error over its tolerance fails."""
    record = _Record()
    request.node.stash[_RECORD_KEY] = record

    def _record(*, max_error: Any, tolerance: Any, **extra: Any) -> None:
        err = _as_float("max_error", max_error)
        tol = _as_float("tolerance", tolerance)
        if not math.isfinite(tol) or tol < 0:
            raise ValueError(f"fasttrack_record: tolerance must be a finite number >= 0, got {tol}")
        record.calls += 1
        if record.max_error is None or _badness(err, tol) >= _badness(record.max_error, record.tolerance):
            record.max_error, record.tolerance = err, tol
        record.extra.update({str(k): _plain(v) for k, v in extra.items()})
        if math.isnan(err) or err > tol:
            raise AssertionError(
                f"fasttrack_record: max_error {err!r} exceeds tolerance {tol!r}"
                + (f" ({', '.join(f'{k}={v}' for k, v in extra.items())})" if extra else "")
            )

    return _record


@pytest.hookimpl(hookwrapper=True)  # old-style wrapper: works on every pytest a GPU box may have
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    state = item.config.stash.get(_STATE_KEY, None)
    if state is None or state.results_path is None:
        return
    acc = item.stash.setdefault(_OUTCOME_KEY, _Outcome())
    acc.duration_s += float(report.duration)
    if report.failed:
        acc.outcome = "failed" if report.when == "call" else "error"
        acc.message = _message(report)
    elif report.skipped and acc.outcome == "passed":
        acc.outcome = "skipped"
        acc.message = _message(report)
    if report.when == "teardown":
        line = _line(item, acc)
        if state.rank is not None:
            line["rank"] = state.rank
        _write_line(state.results_path, line)


def _message(report: pytest.TestReport) -> str | None:
    longrepr = report.longrepr
    if longrepr is None:
        return None
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # skip: (file, line, reason)
        text = str(longrepr[2])
    else:
        text = getattr(report, "longreprtext", None) or str(longrepr)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("E ")]
    picked = "\n".join(errors[:10]) if errors else "\n".join(lines[-5:])
    if getattr(report, "wasxfail", None) is not None:
        picked = f"xfail: {report.wasxfail}".rstrip(": ")
    return picked[:MAX_MESSAGE_CHARS] or None


def _line(item: pytest.Item, acc: _Outcome) -> dict[str, Any]:
    callspec = getattr(item, "callspec", None)
    point = None
    if callspec is not None:
        raw = callspec.params.get("envelope_point")
        if isinstance(raw, Mapping):
            point = {k: raw[k] for k in GRID_KEYS if k in raw}
    record = item.stash.get(_RECORD_KEY, None)
    max_error = record.max_error if record is not None and record.calls else None
    tolerance = record.tolerance if record is not None and record.calls else None
    return {
        "nodeid": item.nodeid,
        "point": point,
        "outcome": acc.outcome,
        "max_error": max_error if max_error is None or math.isfinite(max_error) else str(max_error),
        "tolerance": tolerance,
        "duration_s": round(acc.duration_s, 6),
        "extra": dict(record.extra) if record is not None else {},
        "message": acc.message,
    }


def _write_line(path: Path, line: Mapping[str, Any]) -> None:
    data = (json.dumps(line, sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
