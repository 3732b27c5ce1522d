"""`fasttrack sign BUNDLE_DIR|STATEMENT --key KEY --principal NAME`: sign (or re-sign) an evidence bundle.

Given a directory, signs its statement.json; given a statement file (a part of a bundle collected in
parts, e.g. evidence/kimi_k3/statement.tp2.json), signs that file (`<file>.sig`).
Checks the statement first (it parses cleanly and every raw log it lists matches its hash: a signature
over a broken bundle helps nobody), signs it with `ssh-keygen -Y sign -n fasttrack-evidence`,
prints the allowed-signers line a maintainer adds for this key, and, when an allowed-signers file is given
(or `policies/allowed_signers` exists here), verifies the new signature against it for NAME.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from fasttrack.errors import InputError
from fasttrack.evidence.bundle import SIGNATURE_NAMESPACE, STATEMENT_FILE
from fasttrack.evidence.loaded import LoadedEvidence, LoadedPart
from fasttrack.evidence.loader import load_evidence, load_part
from fasttrack.evidence.signing import parse_signature, sign_file, verify_signature

DEFAULT_ALLOWED_SIGNERS = Path("policies/allowed_signers")


def sign_command(
    bundle_dir: Annotated[Path, typer.Argument(
        help="The evidence directory (signs its statement.json), e.g. evidence/kimi_k3, or one statement "
             "file, e.g. evidence/kimi_k3/statement.tp2.json.")],
    key: Annotated[Path, typer.Option("--key", help="SSH private key (or .pub, key in ssh-agent).")],
    principal: Annotated[str, typer.Option("--principal", help="Your name in allowed_signers.")],
    namespace: Annotated[str, typer.Option("--namespace", help="Signature namespace.")] = SIGNATURE_NAMESPACE,
    allowed_signers: Annotated[Path | None, typer.Option(
        "--allowed-signers", help="Check the new signature against this file (default: "
                                  "policies/allowed_signers when it exists).")] = None,
) -> None:
    """Sign an evidence bundle's statement.json (or one given statement file) with an SSH key."""
    if not principal.strip() or any(c.isspace() for c in principal):
        raise InputError("the principal must be one word (e.g. an email address)", field="--principal")
    loaded: LoadedEvidence | LoadedPart | None
    if bundle_dir.is_file():
        statement = bundle_dir
        loaded = load_part(statement)
        if loaded is None:
            raise InputError("cannot read the statement", path=statement)
    else:
        loaded = load_evidence(bundle_dir)
        if loaded is None:
            raise InputError("evidence directory not found", path=bundle_dir,
                             fix="run `fasttrack collect` first, or pass the directory it wrote")
        statement = bundle_dir / STATEMENT_FILE
        if not os.path.lexists(statement):
            parts = ", ".join(p.name for p in loaded.parts)
            raise InputError(f"no {STATEMENT_FILE} in the evidence directory"
                             + (f" (it holds {parts}: pass the statement file to sign)" if parts else ""),
                             path=bundle_dir)
    if loaded.problems or loaded.statement is None:
        first = loaded.problems[0].message if loaded.problems else "unreadable"
        more = f" (and {len(loaded.problems) - 1} more)" if len(loaded.problems) > 1 else ""
        raise InputError(f"refusing to sign a bundle that does not parse: {first}{more}", path=statement,
                         fix="re-run `fasttrack collect` to write a complete bundle")
    bad_logs = [name for name, want in loaded.statement.predicate.logs.items()
                if loaded.log_digests.get(name) != want]
    if bad_logs:
        raise InputError("refusing to sign: raw logs missing or changed since collection: "
                         + ", ".join(bad_logs), path=bundle_dir, fix="re-run `fasttrack collect`")
    sig = sign_file(statement, key, namespace)
    parsed = parse_signature(sig.read_bytes())
    typer.echo(f"signed {statement} -> {sig.name} with {parsed.key_type} key {parsed.fingerprint}")
    typer.echo("allowed-signers line for this key (a maintainer adds it to policies/allowed_signers):")
    typer.echo("  " + parsed.allowed_signers_line(principal, namespace))

    signers = allowed_signers if allowed_signers is not None else (
        DEFAULT_ALLOWED_SIGNERS if DEFAULT_ALLOWED_SIGNERS.is_file() else None)
    if signers is None:
        return
    result = verify_signature(statement, sig, signers, namespace)
    if result.valid and result.principal == principal:
        typer.echo(f"verified: {signers} accepts this signature for {principal}")
    elif result.valid:
        typer.echo(f"note: {signers} accepts this key, but as {result.principal!r}, not {principal!r}")
    else:
        typer.echo(f"note: {signers} does not accept it yet: {result.reason}")
