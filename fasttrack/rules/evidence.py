"""FT3xx evidence bundles: schema, freshness, signature, coverage, claims."""

from __future__ import annotations

from fasttrack.rules.base import Catalogue

catalogue = Catalogue("evidence")
