"""Hostile review of custody and the reaper (CPU): attacks nobody wrote in test_custody.py or
test_engine_pass.py.

Each test plays a contribution whose code (its kernel tests, its candidates, its evals) runs in subprocesses
of the collector and tries to get a signed statement that shows more than really happened: a process that
outlives the reaper and rewrites a pass's result file before the collector takes custody of it, a result
planted in the work dir for a later phase to pick up, a phase cut short that looks complete. Each attack is
followed by its fix's honest twin."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import pytest
from collect_toy import make_toy, options

from fasttrack.errors import InputError
from fasttrack.evidence import reaper
from fasttrack.evidence.bundle import Benchmark, Statement
from fasttrack.evidence.collect import NullProgress, collect

pytest.importorskip("torch")

SLOW = 1e7  # what the attacks add to stock's samples (us): far above any real CPU sample of the toy
LINUX = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def _statement(toy: Path, tmp: Path, **kw: object) -> Statement:
    res = collect(options(tmp, toy, **kw), NullProgress())
    return Statement.model_validate_json(res.statement_path.read_bytes())


def _timed(st: Statement) -> list[Benchmark]:
    return [b for b in st.predicate.benchmarks if b.point.gpu == "cpu" and b.not_run is None]


# A process that never sits still: each generation forks the next and exits at once, so the pid the reaper
# saw in /proc is gone by the time it is killed (or is never listed at all), and its child is re-parented to
# the collector, a new pid again. Between hops it watches the work dir and slows stock in every bench result
# file (the engine pass's and the contribution pass's alike, so FT347 sees two agreeing stocks) between the
# worker writing it and the collector reading it back.
HOPPER = r'''
import json, os, sys, time
from pathlib import Path

work, stop = Path(sys.argv[1]), Path(sys.argv[2])
SLOW = 1e7
end = time.time() + 120
seen = {}
while True:
    if os.fork():
        os._exit(0)
    if time.time() > end or stop.exists():
        os._exit(0)
    for d in (work / "bench" / "engine", work / "bench"):
        try:
            files = [f for f in d.iterdir() if f.suffix == ".json"]
        except OSError:
            continue
        for f in files:
            try:
                m = f.stat().st_mtime_ns
                if seen.get(f) == m:
                    continue
                data = json.loads(f.read_text())
                s = data["variants"]["stock"]
                if min(s["samples_us"]) < 1e6:
                    s["samples_us"] = [x + SLOW for x in s["samples_us"]]
                    tmp = f.with_name(f.name + ".hop")
                    tmp.write_text(json.dumps(data))
                    os.replace(tmp, f)
                    (stop.parent / "hopper.hits").open("a").write(f.name + "\n")
                seen[f] = f.stat().st_mtime_ns
            except (OSError, ValueError, KeyError, TypeError):
                pass
'''

HOPPER_TEST = '''
import os
import subprocess
import sys
from pathlib import Path


def test_starts_a_hopper():
    grid = Path(sys.argv[sys.argv.index("--fasttrack-grid") + 1])
    subprocess.Popen([sys.executable, "-c", os.environ["TOY_HOPPER"], str(grid.parent),
                      os.environ["TOY_STOP"]], start_new_session=True)
'''


def _stop_hopper(stop: Path) -> None:
    stop.write_text("stop")
    time.sleep(0.3)
    reaper.reap()


@pytest.mark.slow
@LINUX
def test_a_hopping_process_cannot_outlive_the_reaper_and_rewrite_the_bench_results(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toy = make_toy(tmp_path)
    tests = toy / "tests" / "test_toy.py"
    tests.write_text(tests.read_text(encoding="utf-8") + HOPPER_TEST, encoding="utf-8")
    stop = tmp_path / "stop"
    monkeypatch.setenv("TOY_HOPPER", HOPPER)
    monkeypatch.setenv("TOY_STOP", str(stop))
    try:
        try:
            st = _statement(toy, tmp_path, phases=("tests", "bench"), points_limit=1)
        except InputError as exc:  # the fix: a process that keeps re-spawning refuses the collection
            assert "re-spawn" in str(exc) or "still running" in str(exc)
            return
        hits = (tmp_path / "hopper.hits").read_text() if (tmp_path / "hopper.hits").exists() else ""
        [b] = _timed(st)
        alone = b.variants["stock"].samples_us
        assert max(alone) < 1e6, f"the hopper slowed the engine pass's stock (files it rewrote: {hits!r})"
        assert not hits, f"the hopper outlived the reaper and rewrote {hits!r}"
    finally:
        _stop_hopper(stop)



def _hop(tmp: Path) -> Path:
    """Start the hopper (detached from its starter, which exits at once): returns its stop file."""
    import subprocess
    import sys

    stop = tmp / "stop"
    (tmp / "bench").mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-c", "import subprocess, sys; subprocess.Popen(sys.argv[1:], "
                    "start_new_session=True)", sys.executable, "-c", HOPPER, str(tmp), str(stop)], check=True)
    return stop


def _hopper_alive(tmp: Path) -> bool:
    """Whether the hopper still runs: it rewrites a planted result file within a second."""
    f = tmp / "bench" / "probe.json"
    f.write_text('{"variants": {"stock": {"samples_us": [1.0]}}}')
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        if "1000000" in f.read_text():
            return True
        time.sleep(0.02)
    return False


@LINUX
def test_the_reaper_kills_a_process_that_forks_its_successor_and_exits(tmp_path: Path) -> None:
    assert reaper.become_subreaper()
    stop = _hop(tmp_path)
    try:
        time.sleep(0.3)
        assert _hopper_alive(tmp_path)  # the attack is real: it runs, re-parented to us at a new pid
        got = reaper.reap()
        assert got.problem("tests") is None
        assert got.killed, "the reaper saw nothing: the hopper was never at a pid it listed"
        assert not _hopper_alive(tmp_path), "the hopper outlived the reaper"
    finally:
        _stop_hopper(stop)


@LINUX
def test_a_leftover_the_reaper_cannot_finish_refuses_the_collection(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    from types import SimpleNamespace

    from fasttrack.evidence.collect import reap_after

    assert reaper.become_subreaper()
    proc = subprocess.Popen(["sleep", "30"])
    try:
        got = reaper.reap(timeout_s=0.0)  # gives up at once: what a re-spawning process makes it do
        assert got.remaining and "re-spawning" in (got.problem("tests") or "")
        run = SimpleNamespace(keep_pids=frozenset(), work=SimpleNamespace(root=tmp_path),
                              log=lambda _phase: tmp_path / "bench.log", progress=NullProgress())
        monkeypatch.setattr(reaper, "reap", lambda keep=frozenset(), **_kw: got)
        with pytest.raises(InputError) as err:
            reap_after(run, "tests")  # type: ignore[arg-type]
        assert "could not all be killed" in str(err.value)
        assert "refused" in (tmp_path / "bench.log").read_text()
    finally:
        proc.kill()
        proc.wait()


# The sanitizer phase keeps each tool's result as soon as it finishes and, on a resume, runs only the tools
# still missing. The kernel tests run before it with write access to the work dir (the grid they are given
# lies there): they plant a sanitizer.json in which every tool ran clean, and the phase used to take those
# as "done" in a fresh run too, under custody "this-run" (FT349 blind), while the real tools found errors.
def _sanitizer_run(tmp: Path, monkeypatch: pytest.MonkeyPatch, resumed: bool) -> tuple[object, list[str]]:
    from fasttrack.evidence import collect as col
    from fasttrack.evidence import sanitizer as san
    from fasttrack.manifest import load_manifest

    toy = make_toy(tmp)
    work = col.WorkDir(tmp / "work")
    work.prepare({"v": 1}, resume=False, progress=col.NullProgress())
    point = {"gpu": "cpu", "tp": 1, "batch": 1, "context": 8, "dtype": "float32"}
    run = col.Run(opts=col.CollectOptions(contribution=toy), manifest=load_manifest(toy), contribution=toy,
                  work=work, env={}, progress=col.NullProgress(), backend="cuda",
                  grid=col.Grid(here=[point], elsewhere=[]), resumed_work=resumed)
    planted = [{"tool": t, "ran": True, "errors": 0, "summary": "ERROR SUMMARY: 0 errors", "tests": [],
                "reason": None, "tp": 1} for t in san.TOOLS]
    col._write_json(work.path("sanitizer.json"), planted)  # what the kernel tests wrote
    ran: list[str] = []

    def real_tool(name: str, *_rest: object) -> san.SanitizerRun:
        ran.append(name)
        return san.SanitizerRun(tool=name, ran=True, errors=7, summary="ERROR SUMMARY: 7 errors")

    monkeypatch.setattr(san, "find_sanitizer", lambda: "/usr/bin/compute-sanitizer")
    monkeypatch.setattr(san, "run_tool", real_tool)
    col.phase_sanitizer(run, 1)
    col.take_custody(run, "sanitizer", resumed=run.reports[-1].status == "resumed")
    return run, ran


def test_a_sanitizer_result_planted_in_a_fresh_work_dir_is_never_taken_as_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, ran = _sanitizer_run(tmp_path, monkeypatch, resumed=False)
    assert ran == ["memcheck", "racecheck", "synccheck"]  # every tool ran in this run
    assert [s.errors for s in run.sanitizer] == [7, 7, 7]  # type: ignore[attr-defined]
    assert run.custody["sanitizer"] == "this-run"  # type: ignore[attr-defined]


def test_a_sanitizer_result_taken_from_a_resumed_work_dir_is_custody_resumed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the honest resume (an earlier run was cut short after some tools): what is reused from disk is
    # resumed, so FT349 says the part does not come from the run that wrote the statement
    run, ran = _sanitizer_run(tmp_path, monkeypatch, resumed=True)
    assert ran == []
    assert run.custody["sanitizer"] == "resumed"  # type: ignore[attr-defined]


# The environment probe is the collector's own reading of the machine (what GPU and driver the statement
# claims), run before any contribution code. It ran with the contribution as its working directory, which
# `python -m` puts first on sys.path: a module of the contribution named like one the probe imports (json)
# ran inside the probe, and could write any environment.json (and leave a process that the collector then
# took for one of its own).
SHADOW_JSON = '''
import os
import sys

with open(os.environ["TOY_MARK"], "a") as fh:
    fh.write(" ".join(sys.argv) + "\\n")
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
del sys.modules["json"]
import json as _real  # noqa: E402

sys.modules["json"] = _real
globals().update({k: getattr(_real, k) for k in dir(_real) if not k.startswith("__")})
'''


@pytest.mark.slow
def test_the_environment_probe_runs_no_module_of_the_contribution(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toy = make_toy(tmp_path)
    (toy / "json.py").write_text(SHADOW_JSON, encoding="utf-8")
    mark = tmp_path / "mark"
    monkeypatch.setenv("TOY_MARK", str(mark))
    _statement(toy, tmp_path, phases=("evals",), points_limit=1)
    seen = mark.read_text() if mark.exists() else ""
    assert "env.spec.json" not in seen, f"the contribution's json.py ran in the environment probe: {seen!r}"
    # nor in the evals worker: no contribution process has its working directory on sys.path
    # (PYTHONSAFEPATH; tests/evidence/test_hostile_stream.py plays the bench worker's case)
    assert "evals.spec.json" not in seen, seen
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    subprocess.run([sys.executable, "-c", "import json", "evals.spec.json"], cwd=toy, env=env, check=True)
    assert "evals.spec.json" in mark.read_text()  # the attack is real where the working dir is on sys.path


# The contribution pass's results are produced by a process that hosts contribution code (its candidates
# entry). The candidates entry registers an exit hook that rewrites its own pass's result file (the fused
# candidate 100x faster; stock beside untouched, so FT347 agrees). It used to work: the collector read the
# file after the process exited. The collector now builds the bench part only from what the worker
# streamed to it during the pass (fasttrack.evidence.stream); the file is never read back.
ATEXIT_BENCH = '''
import atexit
import json
import sys
from pathlib import Path

import torch


def _faster():
    spec = json.loads(Path(sys.argv[-1]).read_text())
    for job in spec.get("points", []):
        f = Path(job["out"])
        if f.is_file() and not spec.get("engine_only"):
            data = json.loads(f.read_text())
            fused = data["variants"]["fused"]
            fused["samples_us"] = [x / 100 for x in fused["samples_us"]]
            f.write_text(json.dumps(data))
            f.with_name(f.name + ".hooked").write_text("rewritten at exit")


def candidates(baseline, point):
    atexit.register(_faster)
    s = baseline.state

    def fused(inputs):
        y = s.reduce(torch.mm(inputs["x"][:, s.lo:s.hi], s.weight))
        return (y + s.bias).clamp_min_(0)

    return {"fused": fused}
'''


def _medians(b: Benchmark) -> tuple[float, float]:
    return (statistics.median(b.variants["fused"].samples_us),
            statistics.median(b.variants["stock"].samples_us))


@pytest.mark.slow
def test_the_contribution_pass_cannot_rewrite_its_own_result_at_exit(tmp_path: Path) -> None:
    toy = make_toy(tmp_path)
    (toy / "bench.py").write_text(ATEXIT_BENCH, encoding="utf-8")
    st = _statement(toy, tmp_path, phases=("bench",), points_limit=1)
    assert list((tmp_path / "work" / "bench").glob("*.hooked")), "the attack is real: the exit hook ran"
    [b] = _timed(st)
    fused, stock = _medians(b)
    assert fused > stock / 20, f"fused {fused:.3g} us vs stock {stock:.3g} us: the exit hook's figures"
    assert not b.rejected, b.rejected  # nothing in memory was touched: the streamed record is accepted


# The same, in memory: the candidate finds the protocol's record through gc while it runs (its last
# replays) and divides its own samples by 100 before the worker sends the record. Every sample went to the
# collector the moment it was measured, so the record no longer matches the stream: rejected, and the
# statement holds the streamed samples.
GC_FASTER = '''
import gc

import torch

from fasttrack.evidence import timing


def candidates(baseline, point):
    s = baseline.state

    def fused(inputs):
        for obj in gc.get_objects():
            if type(obj) is timing.CaseResult and "fused" in obj.variants:
                f = obj.variants["fused"].samples_us
                f[:] = [x / 100 for x in f]
        y = s.reduce(torch.mm(inputs["x"][:, s.lo:s.hi], s.weight))
        return (y + s.bias).clamp_min_(0)

    return {"fused": fused}
'''


@pytest.mark.slow
def test_a_record_rewritten_in_the_workers_memory_is_rejected_and_the_streamed_samples_kept(
        tmp_path: Path) -> None:
    toy = make_toy(tmp_path)
    (toy / "bench.py").write_text(GC_FASTER, encoding="utf-8")
    st = _statement(toy, tmp_path, phases=("bench",), points_limit=1)
    [b] = _timed(st)
    assert any("differs from the samples streamed" in r and "'fused'" in r for r in b.rejected), b.rejected
    fused, stock = _medians(b)
    assert fused > stock / 20, "the statement took the rewritten record's samples"


@pytest.mark.slow
def test_an_honest_contribution_pass_is_accepted_from_its_stream(tmp_path: Path) -> None:
    # Honest twin of both: the toy's own candidates, no hook: the streamed record is the statement's, and
    # the work dir's record is what the statement was built from.
    import json

    toy = make_toy(tmp_path)
    st = _statement(toy, tmp_path, phases=("bench",), points_limit=1)
    [b] = _timed(st)
    assert not b.rejected and b.separation == "engine-process", b.rejected
    assert len(b.variants["fused"].samples_us) == len(b.variants["stock"].samples_us) > 0
    [rec] = [f for f in (tmp_path / "work" / "bench").glob("*.json")]
    saved = json.loads(rec.read_text(encoding="utf-8"))
    assert saved["variants"]["fused"]["samples_us"] == b.variants["fused"].samples_us
