"""Renderers: read only the Verdict (text, Markdown, JSON, SARIF)."""
