"""GitHub: PR file lists and publishing verdicts (check runs, sticky comment, labels)."""
