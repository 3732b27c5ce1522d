"""FT2xx the manifest's envelope against the policy."""

from __future__ import annotations

from fasttrack.rules.base import Catalogue

catalogue = Catalogue("envelope")
