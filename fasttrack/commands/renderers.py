"""The renderer table: format name -> function of the Verdict (each renderer imported on first use)."""

from __future__ import annotations

from collections.abc import Callable

from fasttrack.verdict import Verdict


def render_text(verdict: Verdict, *, verbose: bool = False) -> str:
    from fasttrack.render.text import render

    return render(verdict, verbose=verbose)


def _render_json(verdict: Verdict) -> str:
    from fasttrack.render.json_out import render

    return render(verdict)


def _render_markdown(verdict: Verdict) -> str:
    from fasttrack.render.markdown import render

    return render(verdict)


def _render_sarif(verdict: Verdict) -> str:
    from fasttrack.render import sarif

    text: str = sarif.render(verdict)
    return text


def renderers() -> dict[str, Callable[[Verdict], str]]:
    """format name -> renderer (a fixed table: every renderer ships with fasttrack)."""
    return {"text": render_text, "json": _render_json, "markdown": _render_markdown, "sarif": _render_sarif}
