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


def test_scan_of_nothing_changed_is_quiet() -> None:
    box = Path(tempfile.mkdtemp(prefix="fasttrack-test-box-"))
    try:
        before = sandbox.persist_scan(box)
        assert [e for e in sandbox.written_events(before, before)] == []
    finally:
        box.rmdir()


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
        assert facts.isolation == "audit-only"
        errors = [f for f in _findings(ctx, facts) if f.severity.value == "error"]
        assert any(str(out) in f.message for f in errors), errors
    finally:
        if out.exists():
            out.unlink()
        out.parent.rmdir()
