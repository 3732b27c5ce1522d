"""The trace's file-system barrier: a read-only mount namespace where the kernel allows one, else a
before/after scan of the places a write would persist (a C++ writer such as torch.save bypasses the open
audit hook)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from fasttrack.confinement.trace import sandbox
from fasttrack.confinement.trace.gather import gather_trace
from tests.test_trace import _context, _findings


def test_scan_names_a_new_and_a_changed_file(tmp_path: Path) -> None:
    box = Path(tempfile.mkdtemp(prefix="fasttrack-test-box-"))
    try:
        old = Path(tempfile.mkdtemp(prefix="fasttrack-test-scan-")) / "old.txt"
        old.write_text("a")
        before = sandbox.persist_scan(box)
        new = old.parent / "new.txt"
        new.write_text("b")
        old.write_text("changed")
        (box / "inside.txt").write_text("the sandbox's own")
        found = {e["target"] for e in sandbox.written_events(before, sandbox.persist_scan(box))}
        assert {str(new), str(old)} <= found
        assert not any(t.startswith(str(box)) for t in found)
    finally:
        for p in (old.parent, box):
            for f in p.iterdir():
                f.unlink()
            p.rmdir()


def _one_place(place: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "persist_places", lambda: [place])


def test_scan_of_nothing_changed_is_quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _one_place(tmp_path / "place", monkeypatch)
    (tmp_path / "place" / "d").mkdir(parents=True)
    (tmp_path / "place" / "d" / "f.txt").write_text("x")
    before = sandbox.persist_scan(tmp_path / "box")
    assert before.unscanned == {}
    assert sandbox.written_events(before, before) == []


def test_scan_that_runs_out_of_budget_fails_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A place with more entries than the budget: what the scan did not read is named, with the fix (a file
    written there would not be seen), not silently skipped."""
    place = tmp_path / "place"
    for d in ("a", "b", "c"):
        (place / d / "deep").mkdir(parents=True)
        (place / d / "deep" / "f.txt").write_text("x")
    _one_place(place, monkeypatch)
    monkeypatch.setattr(sandbox, "MAX_SCAN", 4)  # the three top dirs and one `deep`: the rest is unread
    scan = sandbox.persist_scan(tmp_path / "box")
    unread = scan.unscanned[str(place)]
    assert len(unread) == 3 and all(Path(d).is_relative_to(place) for d in unread)
    hidden = Path(unread[-1]) / "g.txt"
    hidden.write_text("written where the scan does not look")
    after = sandbox.persist_scan(tmp_path / "box")
    assert str(hidden) not in after.seen  # the silent miss this fails closed on
    events = sandbox.written_events(scan, after)
    assert [e["target"] for e in events] == [str(place)]
    assert "not scanned to its end" in events[0]["detail"] and unread[0] in events[0]["detail"]
    assert "fix:" in events[0]["detail"] and events[0]["kind"] == "fs-write"


@pytest.mark.slow
def test_torch_save_outside_is_found_without_a_read_only_fs(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Forced to the fallback (a kernel without mount namespaces for unprivileged users: ubuntu-24.04's
    AppArmor default), the file torch.save writes outside is an error naming it."""
    pytest.importorskip("torch")
    monkeypatch.setattr(sandbox, "unshare_prefix", lambda: ())
    out = Path(tempfile.mkdtemp(prefix="fasttrack-test-out-")) / "evil.pt"
    try:
        ctx = _context(tmp_path, "evilfs", {"save.py": f"import torch\ntorch.save({{}}, {str(out)!r})\n"})
        facts = gather_trace(ctx)
        if facts.status.value == "failed" and "ran past" in facts.reason:  # a loaded 2-core machine: again
            facts = gather_trace(ctx)
        assert facts.isolation == "audit-only"
        errors = [f for f in _findings(ctx, facts) if f.severity.value == "error"]
        # the file is among the trace's filesystem effects and an error names it (failing first: the trace's
        # status, reason and effects, to tell a miss from a run cut short on a loaded machine)
        assert any(e.kind.value == "filesystem" and str(out) in (e.target + e.detail)
                   for e in facts.effects), (facts.status, facts.reason, facts.effects)
        assert any(str(out) in f.message for f in errors), errors
    finally:
        if out.exists():
            out.unlink()
        out.parent.rmdir()
