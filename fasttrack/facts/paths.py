"""Pure path helpers of the facts stage, shared by its loaders (`fasttrack.facts.head`) and the rules, so
that the rules ask for exactly the head paths the loaders read. Nothing here touches the disk."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from fasttrack.context import Context
from fasttrack.manifest import MANIFEST_FILE
from fasttrack.verdict import ChangeStatus


def manifest_path(ctx: Context) -> str:
    """Head-relative path of the manifest (found, or where it would be)."""
    if ctx.manifest_path:
        return ctx.manifest_path
    if ctx.contribution_dir:
        return posixpath.join(ctx.contribution_dir, MANIFEST_FILE)
    return MANIFEST_FILE


def contribution_root(ctx: Context) -> str:
    """Head-relative directory of the contribution (the manifest's directory when it is not known)."""
    if ctx.contribution_dir is not None:
        return ctx.contribution_dir.rstrip("/")
    return posixpath.dirname(manifest_path(ctx))


def module_candidates(ctx: Context, module: str) -> list[str]:
    """Head-relative files a dotted module may be, in the order `fasttrack collect` imports it: from the
    contribution's parent directory, the contribution itself, the head's root, and (for
    `<contribution name>.x`) inside the contribution directory."""
    contrib = contribution_root(ctx)
    parent = posixpath.dirname(contrib)
    rel = module.replace(".", "/")
    places = [(parent, rel), (contrib, rel), ("", rel)]
    # `kimi_k3.guard` names the contribution's own package; in the engine tree (range mode) the
    # contribution directory has another name (its target_path), so look inside it as well.
    first, _, rest = module.partition(".")
    names = {posixpath.basename(contrib)} | ({ctx.manifest.contribution.name} if ctx.manifest else set())
    if rest and first in names:
        places.append((contrib, rest.replace(".", "/")))
    out: list[str] = []
    for root, stem in dict.fromkeys(places):
        for cand in (f"{stem}.py", f"{stem}/__init__.py"):
            out.append(posixpath.normpath(posixpath.join(root, cand)) if root else cand)
    return out


def head_paths(ctx: Context) -> Iterator[str]:
    """Changed paths that exist in the head (not deleted, not submodules)."""
    for c in ctx.changes:
        if c.status is not ChangeStatus.DELETED and not c.is_submodule:
            yield c.path
