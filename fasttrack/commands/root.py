"""The Typer app's root, shared by the full app (`fasttrack.app`) and the one `fasttrack verify` runs
through (`verify_app`): the same settings and root options (`--version`, `--debug`), so `fasttrack verify ...`
parses, helps and fails the same way in both. The verify-only app saves importing the other commands' modules
(the evidence CLIs, github, report) and converting them to click on every verify run."""

from __future__ import annotations

import typer

from fasttrack import __version__


def new_app() -> typer.Typer:
    """An app with the root settings and callback, no command yet."""
    app = typer.Typer(
        name="fasttrack",
        help="Gate fast-track kernel contributions: confinement, envelope, evidence.",
        no_args_is_help=False,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback(invoke_without_command=True)(_root)
    return app


def verify_app() -> typer.Typer:
    """The root with the verify command alone, registered as the full app registers it."""
    from fasttrack.commands.verify import VERIFY_EPILOG, verify_command

    app = new_app()
    app.command("verify", epilog=VERIFY_EPILOG)(verify_command)
    return app


def _root(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="On an internal error, show the traceback."),
) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
