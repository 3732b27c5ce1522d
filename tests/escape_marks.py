"""What the escape-scan tests compare: the lines a source marks with `# <-` (where an error must be) and the
lines the scan reported an error on."""

from __future__ import annotations

from fasttrack.confinement.escapes import Escape


def marked_lines(text: str) -> list[int]:
    """The 1-based lines of `text` marked `# <-`."""
    return [i for i, line in enumerate(text.splitlines(), start=1) if "# <-" in line]


def error_lines(found: list[Escape]) -> list[int]:
    """The lines with at least one error-severity escape, sorted, once each."""
    return sorted({e.line for e in found if e.severity == "error"})
