"""`fasttrack collect`: run the evidence suite on a GPU machine. (Being built: issue 3.)"""

from __future__ import annotations

from fasttrack.errors import InputError


def collect_command() -> None:
    """Collect evidence for a contribution on this machine's GPUs."""
    raise InputError("collect is not built yet")
