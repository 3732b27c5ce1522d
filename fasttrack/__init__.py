"""fasttrack: the gate for fast-track kernel contributions to inference engines."""

__version__ = "0.1.0"
