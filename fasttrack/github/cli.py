"""`fasttrack github ...`. (Being built: issue 5.)"""

from __future__ import annotations

import typer

github_app = typer.Typer(help="Publish verdicts to GitHub.", no_args_is_help=True)


@github_app.command("publish")
def publish_command() -> None:
    """Publish a Verdict JSON to a PR."""
    raise typer.Exit(2)
