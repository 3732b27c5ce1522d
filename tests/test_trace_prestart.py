"""A trace child started before its plan (`sandbox.prestart`, used by `fasttrack verify` on a cold run): it
imports the engine stack while the parent plans, then is handed the plan. Each attack checks that a
prestarted child finds what a child started with its plan finds, is never used for a plan it does not fit,
and is never left running."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest
from test_trace import POLICY, _context, _contribution

from fasttrack import cli
from fasttrack.commands.verify import VerifyOptions, build_context
from fasttrack.confinement.trace import gather, sandbox
from fasttrack.confinement.trace.facts import TraceStatus
from fasttrack.confinement.trace.plan import ALWAYS_PREIMPORT, TracePlan, build_plan
from fasttrack.confinement.trace.sandbox import Pass, Warm, prestart, run_child
from fasttrack.context import Context
from fasttrack.errors import InputError
from fasttrack.pipeline import build
from fasttrack.pipeline import prestart as prestart_mod

PATCH = "import json\njson.dumps = len\n"
CLEAN = "import math\n\ndef rms(xs):\n    return math.sqrt(sum(x * x for x in xs) / len(xs))\n"
STACK = ("decimal",)  # a small stand-in for the engine stack (ALWAYS_PREIMPORT takes seconds to import)


def _plan(tmp_path: Path, text: str, stack: tuple[str, ...] = STACK) -> TracePlan:
    plan = build_plan(_context(tmp_path, "pre", {"kernel.py": text}))
    return plan.model_copy(update={"preimport": (*stack, *plan.preimport)})


def _effects(p: Pass) -> list[tuple[Any, ...]]:
    return sorted((e.get("kind"), e.get("key") or e.get("target"), e.get("path"), e.get("line"))
                  for e in p.events if e.get("kind") != "done")


def _gone(warm: Warm, proc: Any) -> None:
    assert proc.poll() is not None, "the prestarted child is still running"
    assert not warm.box.exists(), "the prestarted child's sandbox was left behind"


def test_a_prestarted_child_traces_what_a_fresh_one_traces(tmp_path: Path) -> None:
    """Honest twin: the same plan, one child prestarted and one started with it: the same events."""
    plan = _plan(tmp_path, CLEAN)
    fresh = run_child(plan)
    warm = prestart(STACK)
    assert warm is not None and warm.child is not None
    proc = warm.child.proc
    warmed = run_child(plan, warm=warm)
    assert warm.child is None  # it was handed the plan, not closed and replaced
    assert _effects(warmed) == _effects(fresh)
    assert warmed.copied == fresh.copied and warmed.isolation == fresh.isolation
    _gone(warm, proc)


def test_a_patch_is_found_by_a_prestarted_child(tmp_path: Path) -> None:
    """Attack: a contribution patching a library at import, traced by a prestarted child: the write is
    reported at its line, as by a fresh child."""
    plan = _plan(tmp_path, PATCH)
    warm = prestart(STACK)
    assert warm is not None
    events = run_child(plan, warm=warm).events
    diffs = [e for e in events if e.get("kind") == "state-diff" and e.get("key") == "mod:json:dumps"]
    assert diffs, events


def test_a_child_is_not_used_for_a_plan_its_stack_does_not_begin(tmp_path: Path) -> None:
    """Attack: a prestarted child whose stack is not the plan's first pre-imports (a PR that does not name
    torch) is killed unused, and a child started with the plan traces it: the patch is still found."""
    plan = _plan(tmp_path, PATCH, stack=())
    warm = prestart(STACK)
    assert warm is not None and warm.child is not None
    proc = warm.child.proc
    events = run_child(plan, warm=warm).events
    assert any(e.get("key") == "mod:json:dumps" for e in events)
    _gone(warm, proc)


def test_the_child_refuses_a_plan_that_does_not_begin_with_its_stack(tmp_path: Path) -> None:
    """Fail closed: a child told another stack than it imported (the parent's check bypassed) stops before
    any code of the contribution runs: the pass fails, never a clean trace."""
    plan = _plan(tmp_path, PATCH, stack=("json",))
    warm = prestart(STACK)
    assert warm is not None
    warm.stack = ("json",)  # what the parent believes; the child imported `decimal`
    with pytest.raises(sandbox.TraceFailure, match="did not finish"):
        run_child(plan, warm=warm)


def test_closing_an_unused_child_kills_it_and_removes_its_sandbox() -> None:
    warm = prestart(STACK)
    assert warm is not None and warm.child is not None
    proc = warm.child.proc
    warm.close()
    warm.close()  # idempotent
    _gone(warm, proc)


# ---------------------------------------------------------------------------------- the pipeline's use


def _options(tmp_path: Path, text: str) -> VerifyOptions:
    engine = tmp_path / "engine"
    (engine / "vllm").mkdir(parents=True, exist_ok=True)
    (engine / "vllm" / "__init__.py").write_text("")
    pkg = _contribution(tmp_path / "repo", "pre", {"kernel.py": text})
    return VerifyOptions(contribution=pkg, repo=tmp_path / "repo", policy=POLICY, engine_tree=engine,
                         trace=True)


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[Warm | None]:
    started: list[Warm | None] = []
    real = build.prestart_trace

    def spy(cache_dir: Path) -> Warm | None:
        warm = real(cache_dir)
        started.append(warm)
        return warm

    monkeypatch.setattr(build, "prestart_trace", spy)
    return started


TORCH_PATCH = "import torch\nm = torch.backends.cuda.matmul\nm.allow_tf32 = True\n"
TORCH_CLEAN = "import torch\n\ndef double(x):\n    return x * 2\n"


def test_verify_cold_uses_the_prestarted_child_and_a_warm_cache_still_sees_a_changed_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end through build_context, with the real engine stack: a cold run prestarts a child (and it is
    the one used); the clean trace is cached; the file then swapped for a torch patch of the same size with
    its mtime put back, the warm run (cache not empty: no prestart) still traces it and reports the write."""
    monkeypatch.setenv("FASTTRACK_CACHE_DIR", str(tmp_path / "cache"))
    started = _spy(monkeypatch)
    used: list[bool] = []
    real_run = gather.run_child

    def run(plan: TracePlan, **k: Any) -> Pass:
        warm = k.get("warm")
        used.append(warm is not None and tuple(plan.preimport[:len(warm.stack)]) == warm.stack)
        return real_run(plan, **k)

    monkeypatch.setattr(gather, "run_child", run)
    clean = TORCH_CLEAN + "#" * (len(TORCH_PATCH) - len(TORCH_CLEAN) - 1) + "\n"
    assert len(clean) == len(TORCH_PATCH)
    opts = _options(tmp_path, clean)
    ctx = build_context(opts)
    assert ctx.trace is not None and ctx.trace.status is TraceStatus.OK and not ctx.trace.effects, ctx.trace
    assert len(started) == 1 and started[0] is not None and started[0].stack == ALWAYS_PREIMPORT
    assert used == [True]
    assert list((tmp_path / "cache" / "traces").glob("*.json"))

    assert opts.contribution is not None
    kernel = opts.contribution / "kernel.py"
    st = kernel.stat()
    kernel.write_text(TORCH_PATCH)
    os.utime(kernel, ns=(st.st_atime_ns, st.st_mtime_ns))
    ctx = build_context(opts)
    assert started[1] is None  # a cache with entries: the key is looked up before any child starts
    assert ctx.trace is not None
    assert any("allow_tf32" in e.target and e.line == 3 for e in ctx.trace.effects), ctx.trace


def test_a_cache_hit_runs_no_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Honest twin of the warm path: the same bytes again are read back; no child, prestarted or not."""
    monkeypatch.setenv("FASTTRACK_CACHE_DIR", str(tmp_path / "cache"))
    opts = _options(tmp_path, CLEAN)
    first = build_context(opts).trace
    started = _spy(monkeypatch)

    def no_child(*_a: Any, **_k: Any) -> Pass:
        raise AssertionError("a child ran although the trace was cached")

    monkeypatch.setattr(gather, "run_child", no_child)
    again = build_context(opts).trace
    assert started == [None] and again == first


def test_bad_input_after_the_prestart_leaves_no_child(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A prestarted child is killed when the context cannot be built (bad input): never left running."""
    monkeypatch.setenv("FASTTRACK_CACHE_DIR", str(tmp_path / "cache"))
    started = _spy(monkeypatch)

    def bad(*_a: Any) -> tuple[Context, Any]:
        raise InputError("planted", field="--contribution")

    monkeypatch.setattr(build, "build_contribution_context", bad)
    with pytest.raises(InputError):
        build_context(_options(tmp_path, CLEAN))
    (warm,) = started
    assert warm is not None and warm.child is None and not warm.box.exists()


def test_no_trace_means_no_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTTRACK_CACHE_DIR", str(tmp_path / "cache"))
    started = _spy(monkeypatch)
    ctx = build_context(dataclasses.replace(_options(tmp_path, CLEAN), trace=False))
    assert started == [] and ctx.trace is None


# ------------------------------------------------------------- started by the command line, before it loads


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """prestart_trace replaced by a recorder (no child): which calls would have started one."""
    calls: list[Path] = []

    def record(cache_dir: Path) -> None:
        calls.append(cache_dir)

    monkeypatch.setattr(prestart_mod, "prestart_trace", record)
    return calls


@pytest.mark.parametrize(("args", "env", "starts"), [
    (["--repo", "r", "--base", "b"], None, True),
    (["--no-trace", "--repo", "r"], None, False),
    (["--help"], None, False),
    (["-h"], None, False),
    (["--repo", "r"], "0", False),
    (["--trace", "--repo", "r"], "0", True),
    (["--", "--no-trace"], None, True),  # after `--` it is an argument, not the flag
])
def test_the_command_line_prestart_follows_the_trace_switches(
        monkeypatch: pytest.MonkeyPatch, args: list[str], env: str | None, starts: bool) -> None:
    if env is None:
        monkeypatch.delenv("FASTTRACK_TRACE", raising=False)
    else:
        monkeypatch.setenv("FASTTRACK_TRACE", env)
    calls = _recording(monkeypatch)
    prestart_mod.prestart_for_verify_args(args)
    assert len(calls) == int(starts)


def test_a_usage_error_after_the_command_line_prestart_leaves_no_child(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child is started before typer parses anything: a command that stops there kills it."""
    monkeypatch.setenv("FASTTRACK_CACHE_DIR", str(tmp_path / "cache"))
    started: list[tuple[Warm, Any]] = []

    def small(args: list[str]) -> Warm | None:
        warm = prestart(STACK)
        assert warm is not None and warm.child is not None
        started.append((warm, warm.child.proc))
        return warm

    monkeypatch.setattr(prestart_mod, "prestart_for_verify_args", small)
    assert cli._run(["verify", "--no-such-option"], debug=False) == cli.EXIT_INPUT_ERROR
    ((warm, proc),) = started
    _gone(warm, proc)


def test_the_command_lines_child_is_the_one_build_context_uses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`fasttrack verify` hands its prestarted child to build_context, which starts none of its own."""
    monkeypatch.setenv("FASTTRACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FASTTRACK_TRACE", raising=False)
    handed: list[Warm | None] = []
    real = prestart_mod.prestart_for_verify_args

    def spy(args: list[str]) -> Warm | None:
        warm = real(args)
        handed.append(warm)
        return warm

    def no_second(cache_dir: Path) -> Warm | None:
        raise AssertionError("build_context started a second child")

    monkeypatch.setattr(prestart_mod, "prestart_for_verify_args", spy)
    monkeypatch.setattr(build, "prestart_trace", no_second)
    used: list[bool] = []
    real_run = gather.run_child

    def run(plan: TracePlan, **k: Any) -> Pass:
        used.append(k.get("warm") is not None and k["warm"] is handed[0])
        return real_run(plan, **k)

    monkeypatch.setattr(gather, "run_child", run)
    opts = _options(tmp_path, TORCH_CLEAN)
    assert opts.contribution is not None and opts.engine_tree is not None
    rc = cli._run(["verify", str(opts.contribution), "--repo", str(opts.repo), "--policy", str(POLICY),
                   "--engine-tree", str(opts.engine_tree), "-f", "json"], debug=False)
    assert rc in (0, 1), capsys.readouterr().err
    (warm,) = handed
    assert warm is not None and warm.child is None and not warm.box.exists()
    assert used == [True]
