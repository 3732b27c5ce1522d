"""`fasttrack audit STATEMENT`: re-run points of a bundle here and write a signed audit record beside it."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer


def audit_command(
    statement: Annotated[
        Path,
        typer.Argument(
            help="The statement file to audit (evidence/<name>/statement.json "
            "or a part such as statement.tp1.json)."
        ),
    ],
    contribution: Annotated[
        Path | None,
        typer.Option(
            "--contribution",
            help="The contribution directory (default: kernels/<the statement's contribution>).",
        ),
    ] = None,
    point: Annotated[
        list[str] | None,
        typer.Option(
            "--point",
            help="A point key to re-run, e.g. 'NVIDIA H200|tp1|b1|c32768|bfloat16' (repeatable). "
            "Default: every claimed point plus --sample random timed ones.",
        ),
    ] = None,
    sample: Annotated[
        int, typer.Option("--sample", help="Random timed points to add to the claimed ones.")
    ] = 1,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random choice (recorded).")] = 0,
    policy: Annotated[
        Path | None, typer.Option("--policy", help="The engine policy (default: the installed fasttrack's).")
    ] = None,
    engine_root: Annotated[
        Path | None,
        typer.Option(
            "--engine-root",
            help="Where baselines/ are imported from (default: the installed fasttrack's checkout).",
        ),
    ] = None,
    iterations: Annotated[
        int | None, typer.Option("--iterations", help="Timed replays per variant (default: the statement's).")
    ] = None,
    sign_key: Annotated[
        Path | None, typer.Option("--sign-key", help="SSH key to sign the record with.")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Record name (default: audit-<time>).")] = None,
) -> None:
    """Re-run points of a contributor's bundle with fasttrack's harness and the policy's baseline on this
    machine, compare medians and ratios within the policy's [evidence.audit] tolerances, and write
    audits/<name>.json (and .sig with --sign-key) in the bundle directory. Exit 0: agreed; 1: disagreed;
    2: bad input."""
    from fasttrack.errors import InputError
    from fasttrack.evidence.audit import audit_name, run_audit, write_record
    from fasttrack.evidence.bundle import Statement

    if not statement.is_file():
        raise InputError(
            "no statement file there",
            path=statement,
            field="STATEMENT",
            fix="pass evidence/<name>/statement.json (or one of its parts)",
        )
    if contribution is None:
        try:
            st = Statement.model_validate_json(statement.read_bytes())
        except ValueError:
            raise InputError("not a valid statement", path=statement, field="STATEMENT") from None
        contribution = Path("kernels") / (st.predicate.contribution or "?")
    record = run_audit(
        statement,
        contribution,
        points=list(point or []),
        sample=sample,
        seed=seed,
        policy=policy,
        engine_root=engine_root,
        iterations=iterations,
        command=" ".join(shlex.quote(a) for a in ["fasttrack", *sys.argv[1:]]),
    )
    path = write_record(statement.parent, record, name or audit_name(record.audited_at.isoformat()))
    if sign_key is not None:
        from fasttrack.evidence.signing import sign_file

        sign_file(path, sign_key)
    out = typer.echo
    for p in record.points:
        out(
            f"{p.point.key()}: {'agreed' if p.agreed else 'DISAGREED'}"
            + ("" if p.agreed else " (" + "; ".join(p.reasons[:3]) + ")")
        )
    out(f"audit record: {path}" + (" (signed)" if sign_key else " (unsigned: pass --sign-key)"))
    if not record.agreed:
        raise typer.Exit(1)
