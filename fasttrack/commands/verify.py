"""`fasttrack verify`: build the Context, run every rule, print the Verdict. (Being built: issue 2.)"""

from __future__ import annotations

import typer

from fasttrack.errors import InputError


def verify_command() -> None:
    """Verify a contribution (default: the reference contribution) or a PR given as a git range."""
    raise InputError("verify is not built yet")
