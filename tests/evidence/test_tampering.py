"""Tampering after signing is caught: edited numbers, added files, removed points, swapped parts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from bundle_factory import HAVE_SSH_KEYGEN, BundleFixture, make_key, new_fixture, run_all

from fasttrack.evidence.digest import contribution_digest
from fasttrack.findings import Finding, Severity

pytestmark = pytest.mark.skipif(not HAVE_SSH_KEYGEN, reason="needs ssh-keygen (openssh-client)")


@pytest.fixture
def fx(tmp_path: Path) -> BundleFixture:
    return new_fixture(tmp_path)


def error_codes(found: list[Finding]) -> set[str]:
    return {f.code for f in found if f.severity is Severity.ERROR}


def edit_bytes(fx: BundleFixture, old: bytes, new: bytes) -> None:
    path = fx.bundle / "statement.json"
    raw = path.read_bytes()
    assert old in raw
    path.write_bytes(raw.replace(old, new, 1))


def test_untouched_bundle_passes(fx: BundleFixture) -> None:
    assert error_codes(run_all(fx.context())) == set()


def test_number_edited_after_signing(fx: BundleFixture) -> None:
    # Make the candidate look faster than measured by editing one raw sample in place.
    sample = json.dumps(fx.pred["benchmarks"][0]["variants"]["fused"]["samples_us"][0]).encode()
    edit_bytes(fx, sample, b"1.0")
    found = run_all(fx.context())
    assert error_codes(found) == {"FT303"}
    assert any("does not verify" in f.message for f in found)


def test_claim_inflated_then_resigned_with_an_unlisted_key(fx: BundleFixture) -> None:
    fx.pred["benchmarks"][0]["variants"]["fused"]["samples_us"] = [10.0] * 30
    fx.write()
    fx.sign(make_key(fx.root / "attacker", "attacker"))
    found = run_all(fx.context())
    assert "FT303" in error_codes(found)
    assert any("is not in allowed_signers" in f.message for f in found if f.code == "FT303")


def test_file_added_to_the_contribution_after_collection(fx: BundleFixture) -> None:
    (fx.contrib / "sneaky.py").write_text("import os\n")
    found = run_all(fx.context())
    assert error_codes(found) == {"FT302"}
    [stale] = [f for f in found if f.code == "FT302"]
    assert "added: sneaky.py" in stale.message


def test_point_removed_after_signing(fx: BundleFixture) -> None:
    data = json.loads((fx.bundle / "statement.json").read_bytes())
    data["predicate"]["kernel_tests"] = [t for t in data["predicate"]["kernel_tests"]
                                         if t["point"]["batch"] != 2]
    fx.write(json.dumps(data, indent=2, sort_keys=True).encode())
    found = run_all(fx.context())
    assert {"FT303", "FT304"} <= error_codes(found)
    uncovered = {f.point["context"] for f in found if f.code == "FT304" and f.point}  # type: ignore[index]
    assert uncovered == {1, 128}


def test_point_removed_and_envelope_shrunk_is_stale(fx: BundleFixture) -> None:
    # Shrinking the envelope after collection edits fasttrack.toml, which is part of the content digest.
    toml = (fx.contrib / "fasttrack.toml").read_text()
    toml = toml.replace("grid_batches = [1, 2, 4]", "grid_batches = [1, 2]")
    (fx.contrib / "fasttrack.toml").write_text(toml)
    found = run_all(fx.context())
    assert "FT302" in error_codes(found)
    assert any("changed: fasttrack.toml" in f.message for f in found if f.code == "FT302")


def test_subject_digest_rewritten_to_match_new_code_without_resigning(fx: BundleFixture) -> None:
    (fx.contrib / "kernel.py").write_text("def fused(x):\n    return x  # now wrong\n")
    new = contribution_digest(fx.contrib)
    data = json.loads((fx.bundle / "statement.json").read_bytes())
    data["subject"][0]["digest"]["sha256"] = new.sha256
    data["predicate"]["files"] = new.files
    fx.write(json.dumps(data, indent=2, sort_keys=True).encode())
    found = run_all(fx.context())
    assert error_codes(found) == {"FT303"}  # fresh now, but no longer signed


def test_logs_edited_or_removed(fx: BundleFixture) -> None:
    (fx.bundle / "pytest.log").write_text("===== 12 passed =====\n(edited)\n")
    assert error_codes(run_all(fx.context())) == {"FT320"}
    (fx.bundle / "pytest.log").unlink()
    assert error_codes(run_all(fx.context())) == {"FT320"}


def test_signature_swapped_from_another_bundle(tmp_path: Path) -> None:
    a = new_fixture(tmp_path / "a")
    b = new_fixture(tmp_path / "b")
    (b.contrib / "kernel.py").write_text("different = True\n")
    b.data = b.good_statement()
    b.write_and_sign()
    shutil.copy(b.bundle / "statement.json.sig", a.bundle / "statement.json.sig")
    assert "FT303" in error_codes(run_all(a.context()))


def test_old_validly_signed_statement_replayed_for_new_code(fx: BundleFixture) -> None:
    # A bundle honestly signed for yesterday's code is presented with today's (changed) kernel.
    (fx.contrib / "kernel.py").write_text("def fused(x):\n    return x * 2  # faster, untested\n")
    found = run_all(fx.context())
    assert error_codes(found) == {"FT302"}
    assert any("changed: kernel.py" in f.message for f in found)


def test_git_commit_signature_replayed_as_evidence(fx: BundleFixture) -> None:
    fx.sign(namespace="git")
    found = run_all(fx.context())
    assert error_codes(found) == {"FT303"}
    assert any("namespace 'git'" in f.message for f in found)


def test_statement_swapped_for_another_contributions_bundle(tmp_path: Path) -> None:
    fx = new_fixture(tmp_path)
    fx.pred["contribution"] = "other_model"
    fx.data["subject"][0]["name"] = "other_model"
    fx.write_and_sign()
    assert "FT321" in error_codes(run_all(fx.context()))
