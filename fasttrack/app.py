"""The `fasttrack` Typer app (the entry point and its error contract are in fasttrack.cli). Each command's
options live next to its implementation:

verify  -> fasttrack.commands.verify      collect -> fasttrack.evidence.collect_cli
report  -> fasttrack.report.cli           github  -> fasttrack.github.cli
"""

from __future__ import annotations

import json

import typer

from fasttrack.commands.root import verify_app
from fasttrack.errors import InputError
from fasttrack.evidence.audit_cli import audit_command
from fasttrack.evidence.collect_cli import COLLECT_EPILOG, collect_command
from fasttrack.evidence.sign_cli import sign_command
from fasttrack.github.cli import github_app
from fasttrack.report.cli import REPORT_EPILOG, report_command

app = verify_app()  # the root and verify (fasttrack.commands.root), then every other command
app.command("collect", epilog=COLLECT_EPILOG)(collect_command)
app.command("sign", epilog="Example: fasttrack sign evidence/kimi_k3 --key ~/.ssh/id_ed25519 --principal "
            "you@example.com. Exit codes: 0 signed, 2 bad input or an unusable path, 3 a bug in fasttrack.")(
    sign_command)
app.command("audit", epilog="Example: fasttrack audit evidence/kimi_k3/statement.json --sample 2 --sign-key "
            "~/.ssh/id_ed25519. Exit codes: 0 agreed, 1 disagreed, 2 bad input, 3 a bug in fasttrack.")(
    audit_command)
app.command("report", epilog=REPORT_EPILOG)(report_command)
app.add_typer(github_app, name="github")


@app.command("rules", epilog="Examples: fasttrack rules; fasttrack rules FT105; fasttrack rules --json. "
             "Exit codes: 0, 2 for an unknown code.")
def rules_command(
    as_json: bool = typer.Option(False, "--json", help="Print the catalogue as JSON."),
    code: str | None = typer.Argument(None, help="Show one rule's full doc."),
) -> None:
    """List every rule code with its one-line doc."""
    from fasttrack.rules import all_rules

    rules = all_rules()
    if code:
        match = [r for r in rules if r.code == code.upper()]
        if not match:
            raise InputError(f"no rule with code {code!r}", field="CODE",
                             fix="run `fasttrack rules` for the list")
        r = match[0]
        typer.echo(f"{r.code} [{r.family}] {r.summary}\n\n{r.doc}")
        if r.info is not None:
            typer.echo(f"\nWhy: {r.info.doc.why}\nExample: {r.info.doc.example}\nGroup: {r.info.group} · "
                       f"default severity: {r.info.severity.value}"
                       + (f" · tags: {', '.join(r.info.tags)}" if r.info.tags else ""))
        return
    if as_json:
        typer.echo(json.dumps([{"code": r.code, "family": r.family, "summary": r.summary, "doc": r.doc,
                                **({"metadata": r.info.model_dump(mode="json")} if r.info else {})}
                               for r in rules], indent=2))
        return
    for r in rules:
        typer.echo(f"{r.code}  {r.summary}")


@app.command("schema", epilog="Example: fasttrack schema verdict > verdict.schema.json. Exit codes: 0, 2 for "
             "an unknown schema.")
def schema_command(
    which: str = typer.Argument(..., help="verdict | manifest | policy | evidence"),
) -> None:
    """Print the JSON schema of the Verdict, the manifest, the policy or the evidence statement."""
    from pydantic import BaseModel

    from fasttrack.evidence.bundle import Statement
    from fasttrack.manifest import Manifest
    from fasttrack.policy import Policy
    from fasttrack.verdict import Verdict

    models: dict[str, type[BaseModel]] = {"verdict": Verdict, "manifest": Manifest, "policy": Policy,
                                          "evidence": Statement}
    if which not in models:
        raise InputError(f"unknown schema {which!r}", field="WHICH", fix=f"use one of {sorted(models)}")
    typer.echo(json.dumps(models[which].model_json_schema(), indent=2))
