"""`fasttrack report`. (Being built: issue 6.)"""

from __future__ import annotations

from fasttrack.errors import InputError


def report_command() -> None:
    """Build the maintainer review dashboard."""
    raise InputError("report is not built yet")
