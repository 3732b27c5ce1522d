"""The effect trace's cache (`fasttrack.confinement.trace.cache`): a finished trace is read back only for the
same contents. Each attack tries to get a clean trace replayed for code that is not what was traced."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from test_trace import _context

from fasttrack.confinement.trace import gather
from fasttrack.confinement.trace.facts import TraceFacts, TraceStatus
from fasttrack.confinement.trace.gather import gather_trace
from fasttrack.confinement.trace.sandbox import Pass
from fasttrack.context import Context

HONEST = "import math\n\ndef rms(xs):\n    return math.sqrt(sum(x * x for x in xs) / len(xs))\n"
# The same length as HONEST, so that a size-and-mtime stamp could not tell them apart.
EVIL = "import json\njson.dumps = len\n"
EVIL = EVIL + "#" * (len(HONEST) - len(EVIL) - 1) + "\n"


def _no_child(*_a: Any, **_k: Any) -> Pass:
    raise AssertionError("the trace ran although its facts were cached")


def _traced(tmp_path: Path, text: str) -> tuple[Context, Path]:
    ctx = _context(tmp_path, "cached", {"kernel.py": text})
    return ctx, tmp_path / "repo" / "cached" / "kernel.py"


def test_same_contents_are_read_back_without_running_the_child(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Honest twin: a second trace of the same files is a cache hit and equals the first."""
    ctx, _ = _traced(tmp_path, HONEST)
    cache = tmp_path / "traces"
    first = gather_trace(ctx, cache_dir=cache)
    assert first.status is TraceStatus.OK and not first.effects
    assert len(list(cache.glob("*.json"))) == 1
    monkeypatch.setattr(gather, "run_child", _no_child)
    assert gather_trace(ctx, cache_dir=cache) == first


def test_changed_bytes_with_the_same_size_and_mtime_are_traced_again(tmp_path: Path) -> None:
    """Attack: the traced file is swapped for a patching one of the same size, its mtime put back."""
    ctx, kernel = _traced(tmp_path, HONEST)
    cache = tmp_path / "traces"
    assert gather_trace(ctx, cache_dir=cache).status is TraceStatus.OK
    st = kernel.stat()
    kernel.write_text(EVIL)
    os.utime(kernel, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert kernel.stat().st_size == st.st_size
    facts = gather_trace(ctx, cache_dir=cache)
    assert any(e.target == "json.dumps" for e in facts.effects), facts


def test_a_file_edited_while_the_trace_runs_is_not_cached(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: the file is honest when the key is computed and patching when the child copies it: the child's
    facts must not be stored under the honest file's key."""
    ctx, kernel = _traced(tmp_path, HONEST)
    cache = tmp_path / "traces"
    real = gather.run_child

    def swap_then_run(*a: Any, **k: Any) -> Pass:
        kernel.write_text(EVIL)
        return real(*a, **k)

    monkeypatch.setattr(gather, "run_child", swap_then_run)
    facts = gather_trace(ctx, cache_dir=cache)
    assert any(e.target == "json.dumps" for e in facts.effects)
    assert not list(cache.glob("*.json"))


def test_a_failed_trace_is_never_replayed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack (fail closed): a trace that timed out is not kept; the next run traces again."""
    ctx, _ = _traced(tmp_path, HONEST)
    cache = tmp_path / "traces"
    monkeypatch.setattr(gather, "TIMEOUT_S", 0.001)
    assert gather_trace(ctx, cache_dir=cache).status is TraceStatus.FAILED
    assert not list(cache.glob("*.json"))


@pytest.mark.parametrize("garbage", [b"", b"{", b'{"status": "ok", "extra": 1}', b"\xff\xfe", b"[]"])
def test_a_garbled_entry_is_a_miss(tmp_path: Path, garbage: bytes) -> None:
    """Attack: a truncated or foreign cache file is traced again, never trusted and never a crash."""
    ctx, kernel = _traced(tmp_path, HONEST)
    cache = tmp_path / "traces"
    assert gather_trace(ctx, cache_dir=cache).status is TraceStatus.OK
    (entry,) = cache.glob("*.json")
    entry.write_bytes(garbage)
    kernel.write_text(HONEST)  # same bytes: the same key
    facts = gather_trace(ctx, cache_dir=cache)
    assert facts.status is TraceStatus.OK
    assert TraceFacts.model_validate_json(entry.read_bytes()) == facts  # rewritten by the new trace


def test_a_stored_failure_is_not_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: an entry that says FAILED (planted, or from another version) is a miss: the trace runs."""
    ctx, _ = _traced(tmp_path, HONEST)
    cache = tmp_path / "traces"
    assert gather_trace(ctx, cache_dir=cache).status is TraceStatus.OK
    (entry,) = cache.glob("*.json")
    entry.write_text(TraceFacts(status=TraceStatus.FAILED, reason="planted").model_dump_json())
    ran: list[bool] = []
    real = gather.run_child

    def counting(*a: Any, **k: Any) -> Pass:
        ran.append(True)
        return real(*a, **k)

    monkeypatch.setattr(gather, "run_child", counting)
    assert gather_trace(ctx, cache_dir=cache).status is TraceStatus.OK and ran


def test_an_entry_planted_by_traced_code_is_never_read_back(tmp_path: Path) -> None:
    """Attack: the traced code runs as the same user; at import it writes a "clean" entry into the cache
    directory (under the key of its next, patching version). Every entry goes after such a trace."""
    cache = tmp_path / "traces"
    cache.mkdir()
    (cache / "old.json").write_text("{}")
    planted = cache / ("ab" * 32 + ".json")
    plant = (f"from pathlib import Path\nPath({str(planted)!r}).write_text('{{}}')\n"
             "def rms(xs):\n    return xs\n")
    ctx, _ = _traced(tmp_path, plant)
    gather_trace(ctx, cache_dir=cache)
    assert not planted.exists() and not list(cache.iterdir())


def test_a_write_the_audit_hooks_do_not_see_still_empties_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: the child writes into the cache by a path no audit event shows (played here by the run
    itself): the directory changed during the trace, so nothing in it is kept."""
    ctx, _ = _traced(tmp_path, HONEST)
    cache = tmp_path / "traces"
    cache.mkdir()
    real = gather.run_child

    def run_and_plant(*a: Any, **k: Any) -> Pass:
        (cache / ("cd" * 32 + ".json")).write_text("{}")
        return real(*a, **k)

    monkeypatch.setattr(gather, "run_child", run_and_plant)
    facts = gather_trace(ctx, cache_dir=cache)
    assert facts.status is TraceStatus.OK and not facts.effects  # a clean trace, yet nothing is kept
    assert not list(cache.iterdir())
