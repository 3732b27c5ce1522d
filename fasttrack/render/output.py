"""Writing a rendered report: to a file (an unusable --output is bad input) or to stdout (encodable, inert
in an Actions log). Shared by `fasttrack verify` and `fasttrack github` (the renderers' layer)."""

from __future__ import annotations

from pathlib import Path

from fasttrack.errors import from_os_error


def write_report(output: Path, text: str) -> None:
    """Write a rendered report; an unusable --output (a directory, a full device, no permission) is bad
    input, and text that cannot be encoded (a lone surrogate) is escaped, never an error."""
    from fasttrack.render.encoding import encodable

    try:
        with open(output, "w", encoding="utf-8", newline="") as fh:
            fh.write(encodable(text))
    except OSError as exc:
        raise from_os_error(exc, what="output file", field="--output", path=output) from None


def stdout_document(text: str, fmt: str) -> str:
    """A rendered report as printed to stdout: encodable, and unable to start a workflow command in the
    Actions log that parses it (`fasttrack.sanitize.inert_document`, meaning kept)."""
    from fasttrack.render.encoding import encodable
    from fasttrack.sanitize import inert_document

    return encodable(inert_document(text, fmt))


def encodable_line(text: str) -> str:
    from fasttrack.render.encoding import encodable

    return encodable(text)
