"""Hostile review of the engine's own pass (CPU): attacks nobody wrote in test_engine_pass.py.

Each test plays a contribution that tries to get a speedup past the engine pass: a stock that looks slower
than it is (code of its own in the engine's process, a result file it rewrites or plants), or a statement
that passes FT347 without a real engine pass. Each attack is followed by the fix's honest twin where one is
needed."""

from __future__ import annotations

import json
import os
import shutil
import statistics
from pathlib import Path

import pytest
from collect_toy import REPO, make_toy, options

from fasttrack.evidence import isolation
from fasttrack.evidence.bundle import Benchmark, Statement
from fasttrack.evidence.collect import NullProgress, collect, engine_env

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
    # its own stock record, rewritten in memory, no longer matches the samples it streamed: rejected, and
    # the statement holds the streamed (real) samples
    assert max(b.stock_beside.samples_us) < 1e6
    assert any("differs from the samples streamed" in r for r in b.rejected), b.rejected


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
    # both passes ran again (neither is ever resumed)
    assert reports[0].startswith("bench: ran") and "the engine's pass and the contribution's" in reports[0]


# The kernel tests run before the bench phase, with write access to the checkout. What they leave for the
# engine's process to import is code in that process: a module in the engine's baseline package outside the
# model's own directory (`import_package_tree` imports every module of the package before the guard's
# snapshot, in both passes, so the slowed stock is "the engine's" and the two stock medians agree), or a
# sitecustomize.py in a directory on the engine's PYTHONPATH (run at the start of every Python process).
SLOW_STOCK = """
import time as _time

from baselines.selftest import case as _case

_orig = _case.MatmulReluBaseline.stock


def _slow_stock(self, inputs):
    _time.sleep(0.05)
    return _orig(self, inputs)


_case.MatmulReluBaseline.stock = _slow_stock
"""

PLANT_TEST = '''
import os
from pathlib import Path

SLOW_STOCK = {code!r}


def test_plants_code_for_the_engine():
    root = Path(os.environ["TOY_ENGINE_ROOT"])
    (root / {where!r}).write_text(SLOW_STOCK)
'''


def _engine_copy(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    engine = tmp / "engine"
    shutil.copytree(REPO / "baselines", engine / "baselines", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("TOY_ENGINE_ROOT", str(engine))
    return engine


def _plant(toy: Path, where: str, code: str = SLOW_STOCK) -> None:
    tests = toy / "tests" / "test_toy.py"
    tests.write_text(tests.read_text(encoding="utf-8") + PLANT_TEST.format(code=code, where=where),
                     encoding="utf-8")


def _stock_not_slowed(b: Benchmark) -> None:
    alone = statistics.median(b.variants["stock"].samples_us)
    assert alone < 2e4, f"the engine pass's stock took {alone:.0f} us: planted code slowed it"


@pytest.mark.slow
def test_a_module_planted_in_the_engines_baseline_package_stops_the_engine_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _engine_copy(tmp_path, monkeypatch)
    toy = make_toy(tmp_path)
    _plant(toy, "baselines/zz_planted.py")
    st, reports = _statement(toy, tmp_path, phases=("tests", "bench"), points_limit=1, engine_root=engine)
    assert (engine / "baselines" / "zz_planted.py").is_file()  # the plant is there (and outside the model's)
    for b in _timed_cpu(st):
        _stock_not_slowed(b)
    assert any(r.startswith("bench: failed") and "baselines/zz_planted.py" in r for r in reports), reports
    assert not _timed_cpu(st)


@pytest.mark.slow
def test_a_sitecustomize_planted_on_the_engines_path_is_not_run_by_the_engine_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _engine_copy(tmp_path, monkeypatch)
    toy = make_toy(tmp_path)
    _plant(toy, "sitecustomize.py")
    st, _ = _statement(toy, tmp_path, phases=("tests", "bench"), points_limit=1, engine_root=engine)
    [b] = _timed_cpu(st)
    _stock_not_slowed(b)
    # the contribution's own process still runs it (its PYTHONPATH has the engine root): FT347 sees that
    assert b.stock_beside is not None and statistics.median(b.stock_beside.samples_us) > 4e4


def _fake_engine(tmp: Path) -> Path:
    engine = tmp / "engine"
    shutil.copytree(REPO / "baselines", engine / "baselines", ignore=shutil.ignore_patterns("__pycache__"))
    return engine


def test_a_pth_file_planted_in_site_packages_stops_the_engine_pass(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # A .pth line that starts with `import` runs in every Python process of the interpreter, the engine's too.
    fake_site = tmp_path / "site-packages"
    fake_site.mkdir()
    monkeypatch.setattr(isolation, "startup_dirs", lambda: [fake_site])
    engine, case = _fake_engine(tmp_path), "baselines.selftest.case:baseline_case"
    recorded = isolation.surface(engine, case)
    (fake_site / "zz-speedup.pth").write_text("import baselines.zz_planted\n", encoding="utf-8")
    why = isolation.import_root(tmp_path / "root", engine, case, recorded)
    assert why is not None and "zz-speedup.pth" in why and "start-up file" in why


def test_an_unchanged_surface_gives_the_engine_pass_copies_of_the_checked_trees(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_site = tmp_path / "site-packages"
    fake_site.mkdir()
    (fake_site / "honest.pth").write_text("/some/dir\n", encoding="utf-8")
    monkeypatch.setattr(isolation, "startup_dirs", lambda: [fake_site])
    engine, case = _fake_engine(tmp_path), "baselines.selftest.case:baseline_case"
    recorded = isolation.surface(engine, case)
    root = tmp_path / "root"
    assert isolation.import_root(root, engine, case, recorded) is None
    assert sorted(p.name for p in root.iterdir()) == ["baselines", "fasttrack"]
    assert (root / "baselines" / "selftest" / "case.py").read_bytes() == (
        engine / "baselines" / "selftest" / "case.py").read_bytes()
    # an edit of the original after the copy is not what the engine pass imports
    (engine / "baselines" / "selftest" / "case.py").write_text("raise SystemExit\n", encoding="utf-8")
    assert b"SystemExit" not in (root / "baselines" / "selftest" / "case.py").read_bytes()


def test_an_edited_fasttrack_module_outside_the_harness_list_stops_the_engine_pass(tmp_path: Path) -> None:
    # fasttrack/__init__.py (and every module the worker imports that the harness digest does not list)
    # runs in the engine process: the whole package tree is compared (here against a recorded listing with
    # one file changed, so the real checkout is never edited).
    engine, case = _fake_engine(tmp_path), "baselines.selftest.case:baseline_case"
    recorded = isolation.surface(engine, case)
    recorded["fasttrack"] = {**recorded["fasttrack"], "__init__.py": "0" * 64}
    why = isolation.import_root(tmp_path / "root", engine, case, recorded)
    assert why is not None and "fasttrack/__init__.py changed" in why


def test_the_engine_env_has_only_the_import_root_on_its_path_and_fresh_caches(tmp_path: Path) -> None:
    contribution = tmp_path / "kernels" / "toy"
    contribution.mkdir(parents=True)
    shared = {"PYTHONPATH": os.pathsep.join([str(contribution.parent), str(REPO), "/user/dir"]),
              "TRITON_CACHE_DIR": "/shared/triton"}
    env = engine_env(shared, contribution, tmp_path / "pyc", tmp_path / "root", tmp_path / "cache")
    assert env["PYTHONPATH"] == str(tmp_path / "root")  # no checkout root (sitecustomize.py, json.py ...)
    assert env["PYTHONNOUSERSITE"] == "1"
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "cache" / "triton")
    assert all(Path(env[v]).is_dir() and Path(env[v]).is_relative_to(tmp_path / "cache")
               for v in isolation.CACHE_VARS)


def test_a_library_dir_on_the_collectors_path_follows_the_copies_and_is_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Honest twin: FlashInfer carried onto the GPU box in /tmp/site is on the engine's path (after the
    # copies); the checkout root and kernels/ (the contribution's side) are not.
    monkeypatch.setattr(isolation, "startup_dirs", lambda: [])
    engine, case = _fake_engine(tmp_path), "baselines.selftest.case:baseline_case"
    lib = tmp_path / "site"
    (lib / "flashinfer").mkdir(parents=True)
    (lib / "flashinfer" / "__init__.py").write_text("", encoding="utf-8")
    path = os.pathsep.join([str(lib), str(engine), str(engine / "kernels")])
    (engine / "kernels").mkdir()
    recorded = isolation.surface(engine, case, path)
    assert isolation.import_root(tmp_path / "root", engine, case, recorded) is None
    env = engine_env({"PYTHONPATH": path}, engine / "kernels" / "toy", tmp_path / "pyc", tmp_path / "root",
                     tmp_path / "cache", recorded)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path / "root"), str(lib.resolve())]


def test_a_module_planted_in_a_library_dir_stops_the_engine_pass(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Attack: a kernel test writes json.py (shadowing the standard library: PYTHONPATH comes first) or
    # edits flashinfer in the carried library dir the engine pass imports from.
    monkeypatch.setattr(isolation, "startup_dirs", lambda: [])
    engine, case = _fake_engine(tmp_path), "baselines.selftest.case:baseline_case"
    lib = tmp_path / "site"
    (lib / "flashinfer").mkdir(parents=True)
    (lib / "flashinfer" / "__init__.py").write_text("", encoding="utf-8")
    recorded = isolation.surface(engine, case, str(lib))
    (lib / "json.py").write_text("import baselines.zz_planted\n", encoding="utf-8")
    (lib / "flashinfer" / "__init__.py").write_text("SLOW = True\n", encoding="utf-8")
    why = isolation.import_root(tmp_path / "root", engine, case, recorded)
    assert why is not None and "json.py added" in why and "flashinfer/__init__.py changed" in why
