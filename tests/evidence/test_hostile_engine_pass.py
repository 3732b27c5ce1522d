"""Hostile review of the engine's own pass (CPU): attacks nobody wrote in test_engine_pass.py.

Each test plays a contribution that tries to get a speedup past the engine pass: a stock that looks slower
than it is (code of its own in the engine's process, a result file it rewrites or plants), or a statement
that passes FT347 without a real engine pass. Each attack is followed by the fix's honest twin where one is
needed."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from collect_toy import make_toy, options

from fasttrack.evidence.bundle import Benchmark, Statement
from fasttrack.evidence.collect import NullProgress, collect

torch = pytest.importorskip("torch")

SLOW = 1e7  # what the attacks add to stock's samples (us): far above any real CPU sample of the toy


def _statement(toy: Path, tmp: Path, **kw: object) -> tuple[Statement, list[str]]:
    res = collect(options(tmp, toy, **kw), NullProgress())
    reports = [f"{r.phase}: {r.status}: {r.detail}" for r in res.reports]
    return Statement.model_validate_json(res.statement_path.read_bytes()), reports


def _timed_cpu(st: Statement) -> list[Benchmark]:
    return [b for b in st.predicate.benchmarks if b.point.gpu == "cpu" and b.not_run is None]


def _engine_stock_is_clean(b: Benchmark) -> None:
    alone = b.variants["stock"].samples_us
    assert alone and max(alone) < 1e6, "the engine pass's stock figures were reached by contribution code"


# The candidates entry runs after the engine pass of its TP size has written its results; it finds them
# through the worker's spec (sys.argv) and slows stock there, and (as the gc attack does) in its own records
# too, so the two stock medians agree and FT347 sees nothing.
REWRITE_ENGINE_FILE = '''
import gc
import json
import sys
from pathlib import Path

from fasttrack.evidence import timing

SLOW = 1e7


def _slow_engine_files():
    spec = json.loads(Path(sys.argv[-1]).read_text())
    for job in spec["points"]:
        out = Path(job["out"])
        engine = out.parent / "engine" / out.name
        if not engine.is_file():
            continue
        data = json.loads(engine.read_text())
        st = data["variants"]["stock"]
        st["samples_us"] = [x if x > 1e6 else x + SLOW for x in st["samples_us"]]
        engine.write_text(json.dumps(data))


def candidates(baseline, point):
    _slow_engine_files()
    stock = baseline.stock

    def fused(inputs):
        for obj in gc.get_objects():
            if type(obj) is timing.CaseResult and "stock" in obj.variants:
                s = obj.variants["stock"].samples_us
                s[:] = [x if x > 1e6 else x + SLOW for x in s]
        return stock(inputs)

    return {"fused": fused}
'''


@pytest.mark.slow
def test_the_contribution_pass_cannot_rewrite_the_engine_pass_result_file(tmp_path: Path) -> None:
    toy = make_toy(tmp_path)
    (toy / "bench.py").write_text(REWRITE_ENGINE_FILE, encoding="utf-8")
    st, _ = _statement(toy, tmp_path, phases=("bench",), points_limit=1)
    [b] = _timed_cpu(st)
    _engine_stock_is_clean(b)
    assert b.stock_beside is not None
    beside = statistics.median(b.stock_beside.samples_us)
    ref = statistics.median(b.variants["stock"].samples_us)
    assert beside / ref > 1.05  # FT347 sees the contribution's process slowed its stock


def _slow_files(directory: Path) -> int:
    """What contribution code of an earlier run (or an earlier phase) can do to the work dir: slow stock in
    every result file there. Returns how many it rewrote."""
    n = 0
    for f in sorted(directory.glob("*.json")):
        data = json.loads(f.read_text(encoding="utf-8"))
        stock = data["variants"]["stock"]
        stock["samples_us"] = [x + SLOW for x in stock["samples_us"]]
        f.write_text(json.dumps(data), encoding="utf-8")
        n += 1
    return n


@pytest.mark.slow
def test_a_resumed_run_never_takes_the_engine_figures_from_disk(tmp_path: Path) -> None:
    # An earlier run's engine results sit in the work dir, where contribution code of that run (its
    # contribution pass, its evals) or of this one (the kernel tests) can rewrite or plant them; a resumed
    # run used to skip the engine pass for every point with a valid file there.
    toy = make_toy(tmp_path)
    _statement(toy, tmp_path, phases=("bench",), points_limit=1)
    assert _slow_files(tmp_path / "work" / "bench" / "engine") == 1
    st, reports = _statement(toy, tmp_path, phases=("bench",), points_limit=1)
    [b] = _timed_cpu(st)
    _engine_stock_is_clean(b)
    assert b.separation == "engine-process"
    assert any("the engine's own pass ran again at 1 point(s)" in r for r in reports), reports
    # the contribution's own result was resumed (not measured twice); only the engine pass re-ran
    assert reports[0].startswith("bench: resumed")
