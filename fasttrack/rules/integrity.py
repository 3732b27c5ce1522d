"""FT4xx a fast-track PR may not edit its own judge."""

from __future__ import annotations

from fasttrack.rules.base import Catalogue

catalogue = Catalogue("integrity")
