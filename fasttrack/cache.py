"""Where fasttrack keeps what it can rebuild: materialised trees, import graphs, overlays, engine trees,
effect-trace facts (`traces/`, keyed by content digests: fasttrack.confinement.trace.cache).

One helper for every part of the tool, so that `$FASTTRACK_CACHE_DIR` moves all of it at once.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "FASTTRACK_CACHE_DIR"


def cache_root() -> Path:
    """fasttrack's cache: $FASTTRACK_CACHE_DIR, else $XDG_CACHE_HOME/fasttrack, else ~/.cache/fasttrack."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "fasttrack"
