"""FT12x escapes found in the AST of changed Python files."""

from __future__ import annotations

from fasttrack.rules.base import Catalogue

catalogue = Catalogue("escapes")
