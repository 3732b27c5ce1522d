"""FT11x blast radius from the import graph."""

from __future__ import annotations

from fasttrack.rules.base import Catalogue

catalogue = Catalogue("blast")
