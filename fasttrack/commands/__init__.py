"""CLI command implementations."""
