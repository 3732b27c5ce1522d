"""The maintainer review dashboard (static HTML + Markdown) built from Verdict JSON files."""
