"""FT10x paths, zones, hooks, multi-model, symlinks, binaries."""

from __future__ import annotations

from fasttrack.rules.base import Catalogue

catalogue = Catalogue("confinement")
