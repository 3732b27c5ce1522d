"""Head-side loaders of the facts stage: reading the head files, stats and symlinks the rules ask about
(which paths: `fasttrack.facts.paths`)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pathspec

from fasttrack.confinement.source_text import real_relpath
from fasttrack.context import Context
from fasttrack.facts.paths import contribution_root
from fasttrack.policy import MODEL_PLACEHOLDER
from fasttrack.verdict import ChangeStatus

MAX_TEXT_BYTES = 4 * 1024 * 1024
MAX_SOURCE_FILES = 2000
_GLOB = frozenset("*?[]!{}")


def read_head_text(head_dir: Path, path: str) -> str | None:
    """Text of a head-side file, or None if it is absent, a symlink, binary or too large."""
    from fasttrack.safe_read import NotRegular, read_regular

    try:
        data = read_regular(head_dir / path, MAX_TEXT_BYTES)
        return None if data is None else data.decode("utf-8")
    except (OSError, NotRegular, UnicodeDecodeError):
        return None


def path_kind(path: Path) -> str:
    """"file", "dir", "other" or "missing" (symlinks followed)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return "missing"
    return "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else "other"


def contribution_sources(ctx: Context) -> list[tuple[str, str]]:
    """(path, text) of the contribution's non-test Python files in the head (at most MAX_SOURCE_FILES)."""
    contrib = contribution_root(ctx)
    root = ctx.head_dir / contrib if contrib else ctx.head_dir
    tests = pathspec.GitIgnoreSpec.from_lines(ctx.policy.escapes.test_paths)
    if not root.is_dir():
        return []
    out: list[tuple[str, str]] = []
    for count, p in enumerate(sorted(root.rglob("*.py"))):
        if count >= MAX_SOURCE_FILES:
            break
        rel = p.relative_to(ctx.head_dir).as_posix()
        inner = p.relative_to(root).as_posix()
        if tests.match_file(inner) or tests.match_file(rel):
            continue
        text = read_head_text(ctx.head_dir, rel)
        if text is not None:
            out.append((rel, text))
    return out


def walk_roots(ctx: Context) -> list[str]:
    """Directories (head-relative) of the model's local roots that exist on disk."""
    if ctx.model is None:
        return []
    if ctx.mode == "contribution":
        return [ctx.contribution_dir] if ctx.contribution_dir else []
    out = []
    for root in ctx.policy.models.local_roots:
        d = root.replace(MODEL_PLACEHOLDER, ctx.model).lstrip("/")
        d = d[:-3] if d.endswith("/**") else d
        if not (_GLOB & set(d)) and (ctx.head_dir / d).is_dir():
            out.append(d)
    return out


def module_links(ctx: Context) -> list[str]:
    """Every symlink (head-relative) in the model's root directories, and every changed symlink."""
    links = {c.path for c in ctx.changes if c.is_symlink and c.status is not ChangeStatus.DELETED}
    for d in walk_roots(ctx):
        for dirpath, dirnames, filenames in os.walk(ctx.head_dir / d):
            rel_dir = Path(dirpath).relative_to(ctx.head_dir).as_posix()
            for name in (*dirnames, *filenames):
                if os.path.islink(os.path.join(dirpath, name)):
                    links.add(f"{rel_dir}/{name}")
    return sorted(links)


def real_path(ctx: Context, link: str) -> str | None:
    return real_relpath(ctx.head_dir, link)

