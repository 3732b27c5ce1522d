"""The engine's own pass (CPU): stock is timed in a process that never imports the contribution, and the
collector makes sure nothing the contribution started is left when that pass runs (docs/baseline-contract.md).

Each test plays a contribution that reaches stock from inside its own process or from an earlier phase;
FT347's rule tests are in test_rules_yardstick.py."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from collect_toy import REPO, make_toy, options

from fasttrack.errors import InputError
from fasttrack.evidence.bundle import Benchmark, Statement
from fasttrack.evidence.collect import NullProgress, collect, engine_env

torch = pytest.importorskip("torch")


def _statement(toy: Path, tmp: Path, **kw: object) -> tuple[Statement, list[str]]:
    res = collect(options(tmp, toy, **kw), NullProgress())
    reports = [f"{r.phase}: {r.status}: {r.detail}" for r in res.reports]
    return Statement.model_validate_json(res.statement_path.read_bytes()), reports


def _timed_cpu(st: Statement) -> list[Benchmark]:
    return [b for b in st.predicate.benchmarks if b.point.gpu == "cpu" and b.not_run is None]


@pytest.mark.slow
def test_the_honest_toys_stock_is_timed_alone_and_beside_the_candidates(tmp_path: Path) -> None:
    toy = make_toy(tmp_path)
    st, _ = _statement(toy, tmp_path, phases=("bench",), points_limit=1)
    [b] = _timed_cpu(st)
    assert b.separation == "engine-process" and b.stock_beside is not None
    assert b.variants["stock"].origin == "engine" and b.variants["fused"].origin == "contribution"
    assert b.variants["stock"].samples_us and b.stock_beside.samples_us
    assert b.variants["stock"].samples_us != b.stock_beside.samples_us  # two measurements, not one copied
    assert b.oracle["stock"].ok and b.oracle["fused"].ok and not b.rejected


GC_CHEAT = '''
import gc

from fasttrack.evidence import timing


def candidates(baseline, point):
    stock = baseline.stock

    def fused(inputs):
        # find the protocol's record of stock in this process and add 10 s to each sample, once
        for obj in gc.get_objects():
            if type(obj) is timing.CaseResult and "stock" in obj.variants:
                s = obj.variants["stock"].samples_us
                s[:] = [x if x > 1e6 else x + 1e7 for x in s]
        return stock(inputs)

    return {"fused": fused}
'''


@pytest.mark.slow
def test_a_candidate_that_rewrites_stocks_records_through_gc_cannot_reach_the_engine_pass(
        tmp_path: Path) -> None:
    # The attack of the former strict xfail: the records it rewrites are in its own process; the stock the
    # ratios use was timed in another one. And every sample reached the collector over the result stream
    # as it was measured: the rewritten record no longer matches it, so the point is rejected, and the
    # statement holds the samples as streamed (the real ones), not the record's.
    toy = make_toy(tmp_path)
    (toy / "bench.py").write_text(GC_CHEAT, encoding="utf-8")
    st, _ = _statement(toy, tmp_path, phases=("bench",), points_limit=1)
    [b] = _timed_cpu(st)
    alone = b.variants["stock"].samples_us
    assert alone and max(alone) < 1e6, "the engine pass's stock was reached from the contribution's process"
    assert b.stock_beside is not None and b.stock_beside.samples_us
    assert max(b.stock_beside.samples_us) < 1e6, "the statement took the rewritten record's samples"
    assert any("differs from the samples streamed" in r and "'stock'" in r for r in b.rejected), b.rejected


DAEMON_TEST = '''
import os
import subprocess
import sys


def test_starts_a_daemon():
    # a grandchild in its own session, orphaned at once: it would outlive the tests phase
    code = ("import os, subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
            "start_new_session=True); "
            "open(os.environ['TOY_PID_FILE'], 'w').write(str(p.pid))")
    subprocess.run([sys.executable, "-c", code], check=True)
'''


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_process_an_earlier_phase_left_running_is_killed_before_the_engine_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toy = make_toy(tmp_path)
    tests = toy / "tests" / "test_toy.py"  # the test file the manifest names
    tests.write_text(tests.read_text(encoding="utf-8") + DAEMON_TEST, encoding="utf-8")
    pid_file = tmp_path / "daemon.pid"
    monkeypatch.setenv("TOY_PID_FILE", str(pid_file))
    pid = 0
    try:
        _st, _ = _statement(toy, tmp_path, phases=("tests", "bench"), points_limit=1)
        pid = int(pid_file.read_text())
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), "the daemon the kernel tests started outlived the collection"
        log = (tmp_path / "work" / "bench.log").read_text(encoding="utf-8")
        assert "were still running after the tests phase and were killed" in log
    finally:
        if pid and _alive(pid):
            os.kill(pid, 9)


EDIT_BASELINE_TEST = '''
import os
from pathlib import Path


def test_edits_the_engine():
    # an earlier phase runs contribution code with write access to the checkout: it slows the engine's
    # stock on disk (it could restore it before the collection ends)
    case = Path(os.environ["TOY_ENGINE_ROOT"]) / "baselines" / "selftest" / "case.py"
    case.write_text(case.read_text() + "\\nimport time as _t\\n_t.sleep(0)\\n")
'''


@pytest.mark.slow
def test_a_baseline_edited_on_disk_by_an_earlier_phase_stops_the_engine_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = tmp_path / "engine"
    shutil.copytree(REPO / "baselines", engine / "baselines",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("TOY_ENGINE_ROOT", str(engine))
    toy = make_toy(tmp_path)
    tests = toy / "tests" / "test_toy.py"
    tests.write_text(tests.read_text(encoding="utf-8") + EDIT_BASELINE_TEST, encoding="utf-8")
    with pytest.raises(InputError, match="the engine's baseline changed while evidence was being collected"):
        _statement(toy, tmp_path, phases=("tests", "bench"), points_limit=1, engine_root=engine)
    # nothing was timed against the edited engine: the bench phase stopped before its first pass
    bench = tmp_path / "work" / "bench"
    assert not list(bench.rglob("*.json")) if bench.exists() else True
    assert not (tmp_path / "work" / "bench.engine.spec.json").exists()
    assert "changed on disk after the collection started" in (tmp_path / "work" / "bench.log").read_text(
        encoding="utf-8")


def test_the_engine_pass_env_drops_the_contribution_and_uses_its_own_bytecode_cache(tmp_path: Path) -> None:
    # A .pyc of an engine module written into the shared bytecode cache by contribution code would be loaded
    # by the engine's process as the engine's own: that pass gets a fresh cache and no contribution path.
    contribution = tmp_path / "kernels" / "toy"
    contribution.mkdir(parents=True)
    shared = {"PYTHONPATH": os.pathsep.join([str(contribution.parent), "/engine", "/fasttrack"]),
              "PYTHONPYCACHEPREFIX": "/tmp/fasttrack-pycache", "HOME": "/root"}
    env = engine_env(shared, contribution, tmp_path / "fresh")
    assert str(contribution.parent) not in env["PYTHONPATH"].split(os.pathsep)
    assert env["PYTHONPATH"].split(os.pathsep) == ["/engine", "/fasttrack"]
    assert env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "fresh") != shared["PYTHONPYCACHEPREFIX"]
    assert shared["PYTHONPATH"].startswith(str(contribution.parent))  # the contribution's own env unchanged
