"""SSH signing and verification with throwaway ed25519 keys (ssh-keygen -Y sign/find-principals/verify)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from bundle_factory import HAVE_SSH_KEYGEN, make_key, new_fixture
from typer.testing import CliRunner

from fasttrack.cli import app
from fasttrack.errors import InputError
from fasttrack.evidence import signing
from fasttrack.evidence.signing import parse_signature, sign_file, verify_bytes, verify_signature

pytestmark = pytest.mark.skipif(not HAVE_SSH_KEYGEN, reason="needs ssh-keygen (openssh-client)")


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    return make_key(tmp_path / "k", "alice"), make_key(tmp_path / "k", "mallory")


def allowed(tmp_path: Path, key: Path, principal: str = "alice@example.com", options: str = "") -> Path:
    pub = key.with_name(key.name + ".pub").read_text().split()
    path = tmp_path / "allowed_signers"
    opts = options or 'namespaces="fasttrack-evidence"'
    path.write_text(f"# maintainers\n{principal} {opts} {pub[0]} {pub[1]}\n")
    return path


def data_file(tmp_path: Path, text: str = '{"hello": 1}\n') -> Path:
    p = tmp_path / "statement.json"
    p.write_text(text)
    return p


def test_sign_and_verify_roundtrip(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    alice, _ = keys
    data = data_file(tmp_path)
    sig = sign_file(data, alice)
    assert sig == tmp_path / "statement.json.sig"
    parsed = parse_signature(sig.read_bytes())
    assert parsed.namespace == "fasttrack-evidence" and parsed.key_type == "ssh-ed25519"
    # The fingerprint we compute equals ssh-keygen's own.
    listing = subprocess.run(["ssh-keygen", "-l", "-f", str(alice) + ".pub"], capture_output=True, text=True,
                             check=True).stdout
    assert parsed.fingerprint in listing
    result = verify_signature(data, sig, allowed(tmp_path, alice))
    assert result.valid and result.principal == "alice@example.com", result


def test_resigning_overwrites_old_signature(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    alice, mallory = keys
    data = data_file(tmp_path)
    sign_file(data, mallory)
    sig = sign_file(data, alice)
    assert verify_signature(data, sig, allowed(tmp_path, alice)).valid


def test_edited_data_fails(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    alice, _ = keys
    data = data_file(tmp_path)
    sig = sign_file(data, alice)
    data.write_text('{"hello": 2}\n')
    result = verify_signature(data, sig, allowed(tmp_path, alice))
    assert not result.valid and "does not verify" in result.reason


def test_key_not_in_allowed_signers(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    alice, mallory = keys
    data = data_file(tmp_path)
    sig = sign_file(data, mallory)
    result = verify_signature(data, sig, allowed(tmp_path, alice))
    assert not result.valid and "is not in allowed_signers" in result.reason
    assert result.fingerprint == parse_signature(sig.read_bytes()).fingerprint


def test_wrong_namespace_is_rejected_even_for_a_listed_key(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    alice, _ = keys
    data = data_file(tmp_path)
    sig = sign_file(data, alice, namespace="git")  # a commit signature replayed as evidence
    both = allowed(tmp_path, alice, options='namespaces="git,fasttrack-evidence"')
    result = verify_signature(data, sig, both)
    assert not result.valid and "namespace 'git'" in result.reason


def test_allowed_signers_namespace_restriction_is_applied(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    alice, _ = keys
    data = data_file(tmp_path)
    sig = sign_file(data, alice)
    # The key is listed, but only for git signatures: ssh-keygen -Y verify must refuse it for evidence.
    result = verify_signature(data, sig, allowed(tmp_path, alice, options='namespaces="git"'))
    assert not result.valid


def test_expired_key_is_rejected_and_verify_time_is_honoured(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    alice, _ = keys
    data = data_file(tmp_path)
    sig = sign_file(data, alice)
    signers = allowed(tmp_path, alice, options='namespaces="fasttrack-evidence",valid-before="20200101"')
    assert not verify_signature(data, sig, signers).valid
    assert verify_signature(data, sig, signers, at=datetime(2019, 6, 1, tzinfo=UTC)).valid
    later = allowed(tmp_path, alice,
                    options='namespaces="fasttrack-evidence",valid-after="'
                            + (datetime.now(UTC) + timedelta(days=30)).strftime("%Y%m%d") + '"')
    assert not verify_signature(data, sig, later).valid


@pytest.mark.parametrize("garbage", [b"", b"not a signature", b"-----BEGIN SSH SIGNATURE-----\n!!!\n"
                                     b"-----END SSH SIGNATURE-----\n",
                                     b"-----BEGIN SSH SIGNATURE-----\nU1NIU0lHAAAAAQ==\n"
                                     b"-----END SSH SIGNATURE-----\n", b"\xff\xfe" * 10, b"A" * 70000])
def test_garbage_signatures_are_invalid_not_errors(tmp_path: Path, keys: tuple[Path, Path],
                                                    garbage: bytes) -> None:
    result = verify_bytes(b"data", garbage, allowed(tmp_path, keys[0]))
    assert not result.valid and result.reason


def test_missing_allowed_signers_file(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    data = data_file(tmp_path)
    sig = sign_file(data, keys[0])
    result = verify_signature(data, sig, tmp_path / "nope")
    assert not result.valid and "not found" in result.reason


def test_missing_ssh_keygen_is_a_clear_error(tmp_path: Path, keys: tuple[Path, Path],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    data = data_file(tmp_path)
    sig = sign_file(data, keys[0])
    monkeypatch.setattr(signing, "ssh_keygen", lambda: None)
    with pytest.raises(InputError, match="ssh-keygen"):
        sign_file(data, keys[0])
    result = verify_signature(data, sig, allowed(tmp_path, keys[0]))
    assert not result.valid and "ssh-keygen" in result.reason


def test_sign_errors_name_the_file(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    with pytest.raises(InputError, match="file to sign not found"):
        sign_file(tmp_path / "missing.json", keys[0])
    with pytest.raises(InputError, match="signing key not found"):
        sign_file(data_file(tmp_path), tmp_path / "no_key")
    bad_key = tmp_path / "bad_key"
    bad_key.write_text("not a key\n")
    with pytest.raises(InputError, match="could not sign"):
        sign_file(data_file(tmp_path), bad_key)


# ------------------------------------------------------------------------------------------ fasttrack sign

def test_sign_command_signs_a_bundle_and_prints_the_allowed_signers_line(tmp_path: Path) -> None:
    fx = new_fixture(tmp_path, signed=False)
    runner = CliRunner()
    out = runner.invoke(app, ["sign", str(fx.bundle), "--key", str(fx.key), "--principal",
                              "alice@example.com", "--allowed-signers", str(fx.policies / "allowed_signers")])
    assert out.exit_code == 0, out.output
    assert 'alice@example.com namespaces="fasttrack-evidence" ssh-ed25519 ' in out.output
    assert "verified:" in out.output
    assert (fx.bundle / "statement.json.sig").is_file()


def test_sign_command_refuses_a_broken_bundle(tmp_path: Path) -> None:
    fx = new_fixture(tmp_path, signed=False)
    fx.write(b'{"_type": ')
    with pytest.raises(InputError, match="refusing to sign"):
        CliRunner().invoke(app, ["sign", str(fx.bundle), "--key", str(fx.key), "--principal", "a"],
                           catch_exceptions=False)
    fx.write()
    (fx.bundle / "pytest.log").write_text("edited\n")
    with pytest.raises(InputError, match="raw logs"):
        CliRunner().invoke(app, ["sign", str(fx.bundle), "--key", str(fx.key), "--principal", "a"],
                           catch_exceptions=False)
    assert not (fx.bundle / "statement.json.sig").exists()


def test_sign_command_reports_an_unlisted_key(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    fx = new_fixture(tmp_path / "b", signed=False)
    out = CliRunner().invoke(app, ["sign", str(fx.bundle), "--key", str(keys[1]), "--principal", "mallory",
                                   "--allowed-signers", str(fx.policies / "allowed_signers")])
    assert out.exit_code == 0, out.output
    assert "does not accept it yet" in out.output
