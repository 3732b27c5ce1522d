"""Change sets: what a PR changes, from git (base..head) or from a PR's file list."""
