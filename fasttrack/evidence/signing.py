"""SSH signatures over evidence, made and checked with `ssh-keygen -Y` exactly as git signs commits.

Signing: `ssh-keygen -Y sign -f KEY -n fasttrack-evidence FILE` writes `FILE.sig`.
Verifying: the signature's namespace must be ours (so a git commit signature cannot be replayed as evidence),
`ssh-keygen -Y find-principals` must find the signing key in the policy's allowed-signers file, and
`ssh-keygen -Y verify` must accept the data for that principal and namespace (which also applies the
file's `namespaces=`, `valid-after=` and `valid-before=` restrictions).

No shell is ever used; every call has a timeout; a missing ssh-keygen is a clear error (signing) or an
invalid result with the reason (verifying).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from fasttrack.errors import InputError
from fasttrack.evidence.bundle import SIGNATURE_NAMESPACE

TIMEOUT_S = 30.0
MAX_SIGNATURE_BYTES = 64 * 1024
_ARMOR_BEGIN = "-----BEGIN SSH SIGNATURE-----"
_ARMOR_END = "-----END SSH SIGNATURE-----"
_MISSING = "ssh-keygen (OpenSSH 8.2 or newer) is not installed or not on PATH"


@dataclass(frozen=True)
class SignatureResult:
    valid: bool
    principal: str | None = None
    reason: str = ""
    fingerprint: str | None = None  # SHA256:... of the signing key, when the signature could be read
    namespace: str | None = None


@dataclass(frozen=True)
class SshSig:
    """The fields of an armored SSHSIG blob that matter for diagnosis (no cryptography here)."""

    key_type: str
    public_key: bytes  # the SSH wire-format public key blob
    namespace: str
    hash_algorithm: str

    @property
    def fingerprint(self) -> str:
        return "SHA256:" + base64.b64encode(hashlib.sha256(self.public_key).digest()).decode().rstrip("=")

    def allowed_signers_line(self, principal: str, namespace: str = SIGNATURE_NAMESPACE) -> str:
        """The line to add to an allowed_signers file for this key."""
        key = base64.b64encode(self.public_key).decode()
        return f'{principal} namespaces="{namespace}" {self.key_type} {key}'


def ssh_keygen() -> str | None:
    return shutil.which("ssh-keygen")


def parse_signature(armored: bytes) -> SshSig:
    """Read an armored SSH signature; ValueError if it is not one."""
    try:
        text = armored.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("signature is not ASCII armor") from None
    lines = [ln.strip() for ln in text.strip().splitlines()]
    if not lines or lines[0] != _ARMOR_BEGIN or lines[-1] != _ARMOR_END:
        raise ValueError("not an SSH signature (missing BEGIN/END SSH SIGNATURE lines)")
    try:
        blob = base64.b64decode("".join(lines[1:-1]), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("SSH signature body is not base64") from None
    if not blob.startswith(b"SSHSIG"):
        raise ValueError("SSH signature lacks the SSHSIG magic")
    reader = _Reader(blob[6:])
    version = reader.uint32()
    if version != 1:
        raise ValueError(f"unsupported SSH signature version {version}")
    public_key = reader.string()
    namespace = reader.string()
    reader.string()  # reserved
    hash_algorithm = reader.string()
    reader.string()  # the signature itself
    key_type = _Reader(public_key).string()
    try:
        return SshSig(key_type=key_type.decode("ascii"), public_key=public_key,
                      namespace=namespace.decode("utf-8"), hash_algorithm=hash_algorithm.decode("ascii"))
    except UnicodeDecodeError:
        raise ValueError("SSH signature has a non-text key type, namespace or hash name") from None


def sign_file(path: Path, key: Path, namespace: str = SIGNATURE_NAMESPACE) -> Path:
    """Sign `path` with the SSH private key `key` (or a public key whose private half is in ssh-agent).

    Writes and returns `path` + ".sig". Raises InputError with the reason on any failure.
    """
    exe = ssh_keygen()
    if exe is None:
        raise InputError(_MISSING, fix="install openssh-client (it provides ssh-keygen)")
    path, key = Path(path), Path(key)
    if not path.is_file():
        raise InputError("file to sign not found", path=path)
    if not key.is_file():
        raise InputError("signing key not found", path=key,
                         fix="pass --key with your SSH private key (e.g. ~/.ssh/id_ed25519)")
    sig = path.with_name(path.name + ".sig")
    sig.unlink(missing_ok=True)
    try:
        proc = subprocess.run([exe, "-Y", "sign", "-f", str(key), "-n", namespace, str(path)],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise InputError(f"ssh-keygen did not finish signing within {TIMEOUT_S:.0f} s "
                         "(a passphrase prompt?)", path=key,
                         fix="use a key without a passphrase, or load it into ssh-agent and pass the .pub",
                         ) from None
    if proc.returncode != 0 or not sig.is_file():
        detail = _one_line(proc.stderr) or f"exit code {proc.returncode}"
        raise InputError(f"ssh-keygen could not sign: {detail}", path=path)
    return sig


def verify_signature(data_path: Path, sig_path: Path, allowed_signers: Path,
                     namespace: str = SIGNATURE_NAMESPACE, *, at: datetime | None = None) -> SignatureResult:
    """Check `sig_path` over the bytes of `data_path` (see `verify_bytes`)."""
    try:
        data = Path(data_path).read_bytes()
    except OSError as exc:
        return SignatureResult(False, reason=f"cannot read {data_path}: {exc.strerror}")
    try:
        sig = Path(sig_path).read_bytes()[: MAX_SIGNATURE_BYTES + 1]
    except OSError as exc:
        return SignatureResult(False, reason=f"cannot read {sig_path}: {exc.strerror}")
    return verify_bytes(data, sig, allowed_signers, namespace, at=at)


def verify_bytes(data: bytes, signature: bytes, allowed_signers: Path,
                 namespace: str = SIGNATURE_NAMESPACE, *, at: datetime | None = None) -> SignatureResult:
    """Verify an armored signature over `data`; never raises. `at`: the time to check key validity at."""
    if len(signature) > MAX_SIGNATURE_BYTES:
        return SignatureResult(False, reason=f"signature is larger than {MAX_SIGNATURE_BYTES} bytes")
    try:
        parsed = parse_signature(signature)
    except ValueError as exc:
        return SignatureResult(False, reason=str(exc))
    fp, ns = parsed.fingerprint, parsed.namespace
    if ns != namespace:
        return SignatureResult(False, reason=f"signed for namespace {ns!r}, not {namespace!r}",
                               fingerprint=fp, namespace=ns)
    exe = ssh_keygen()
    if exe is None:
        return SignatureResult(False, reason=_MISSING, fingerprint=fp, namespace=ns)
    allowed_signers = Path(allowed_signers)
    if not allowed_signers.is_file():
        return SignatureResult(False, reason=f"allowed signers file {allowed_signers} not found",
                               fingerprint=fp, namespace=ns)
    options: list[str] = []
    if at is not None:
        options = ["-O", "verify-time=" + at.astimezone(UTC).strftime("%Y%m%d%H%M%SZ")]
    with tempfile.TemporaryDirectory(prefix="fasttrack-sig-") as tmp:
        sig_file = Path(tmp) / "statement.sig"
        sig_file.write_bytes(signature)
        found = _run([exe, "-Y", "find-principals", *options, "-s", str(sig_file),
                      "-f", str(allowed_signers)])
        if isinstance(found, str):
            return SignatureResult(False, reason=found, fingerprint=fp, namespace=ns)
        principals = [p for p in found.stdout.decode("utf-8", "replace").splitlines() if p.strip()]
        if found.returncode != 0 or not principals:
            return SignatureResult(False, reason=f"signing key {fp} is not in {allowed_signers.name}",
                                   fingerprint=fp, namespace=ns)
        failures = []
        for principal in principals:
            checked = _run([exe, "-Y", "verify", *options, "-f", str(allowed_signers), "-I", principal,
                            "-n", namespace, "-s", str(sig_file)], stdin=data)
            if isinstance(checked, str):
                return SignatureResult(False, reason=checked, fingerprint=fp, namespace=ns)
            if checked.returncode == 0:
                return SignatureResult(True, principal=principal, reason="good signature",
                                       fingerprint=fp, namespace=ns)
            failures.append(f"{principal}: {_one_line(checked.stderr) or 'rejected'}")
    return SignatureResult(False, reason="signature does not verify (" + "; ".join(failures) + ")",
                           fingerprint=fp, namespace=ns)


def _run(argv: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes] | str:
    try:
        return subprocess.run(argv, input=stdin if stdin is not None else b"", capture_output=True,
                              timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"ssh-keygen timed out after {TIMEOUT_S:.0f} s"
    except OSError as exc:
        return f"cannot run ssh-keygen: {exc.strerror}"


def _one_line(stderr: bytes) -> str:
    lines = [ln.strip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def uint32(self) -> int:
        if self.pos + 4 > len(self.data):
            raise ValueError("truncated SSH signature")
        (value,) = struct.unpack(">I", self.data[self.pos:self.pos + 4])
        self.pos += 4
        return int(value)

    def string(self) -> bytes:
        n = self.uint32()
        if self.pos + n > len(self.data):
            raise ValueError("truncated SSH signature")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out
