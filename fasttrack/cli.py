"""The `fasttrack` command line. Each command's options live next to its implementation:

verify  -> fasttrack.commands.verify      collect -> fasttrack.evidence.collect_cli
report  -> fasttrack.report.cli           github  -> fasttrack.github.cli
"""

from __future__ import annotations

import json
import sys

import typer

from fasttrack import __version__
from fasttrack.commands.verify import verify_command
from fasttrack.errors import EXIT_INPUT_ERROR, InputError
from fasttrack.evidence.audit_cli import audit_command
from fasttrack.evidence.collect_cli import collect_command
from fasttrack.evidence.sign_cli import sign_command
from fasttrack.github.cli import github_app
from fasttrack.report.cli import report_command
from fasttrack.rules import all_rules
from fasttrack.sanitize import log_line

app = typer.Typer(
    name="fasttrack",
    help="Gate fast-track kernel contributions: confinement, envelope, evidence.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("verify")(verify_command)
app.command("collect")(collect_command)
app.command("sign")(sign_command)
app.command("audit")(audit_command)
app.command("report")(report_command)
app.add_typer(github_app, name="github")


@app.command("rules")
def rules_command(
    as_json: bool = typer.Option(False, "--json", help="Print the catalogue as JSON."),
    code: str | None = typer.Argument(None, help="Show one rule's full doc."),
) -> None:
    """List every rule code with its one-line doc."""
    rules = all_rules()
    if code:
        match = [r for r in rules if r.code == code.upper()]
        if not match:
            raise InputError(f"no rule with code {code!r}", field="CODE",
                             fix="run `fasttrack rules` for the list")
        r = match[0]
        typer.echo(f"{r.code} [{r.family}] {r.summary}\n\n{r.doc}")
        return
    if as_json:
        typer.echo(json.dumps([{"code": r.code, "family": r.family, "summary": r.summary, "doc": r.doc}
                               for r in rules], indent=2))
        return
    for r in rules:
        typer.echo(f"{r.code}  {r.summary}")


@app.command("schema")
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


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


def main() -> None:
    """Entry point: input errors become one line on stderr and exit code 2, never a traceback."""
    try:
        # Without standalone mode click returns a typer.Exit's code instead of exiting: pass it on.
        rc = app(standalone_mode=False)
    except InputError as exc:
        # One line that cannot start a workflow command, whatever the error quotes (sanitize.log_line).
        typer.echo(log_line(f"fasttrack: error: {exc.render()}"), err=True)
        sys.exit(EXIT_INPUT_ERROR)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("fasttrack: aborted", err=True)
        sys.exit(EXIT_INPUT_ERROR)
    except Exception as exc:  # usage errors: click's, or the copy of click that newer typer vendors
        if any(k.__name__ == "ClickException" for k in type(exc).__mro__):
            exc.show()  # type: ignore[attr-defined]
            sys.exit(EXIT_INPUT_ERROR)
        raise
    sys.exit(rc if isinstance(rc, int) else 0)
