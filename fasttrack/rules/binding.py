"""FT33x what the statement binds: nothing Python can import from the contribution escapes its digest."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from fasttrack.errors import InputError
from fasttrack.findings import Finding
from fasttrack.rules.base import Catalogue
from fasttrack.sanitize import visible

if TYPE_CHECKING:
    from fasttrack.facts.model import Facts

catalogue = Catalogue("evidence")
MAX_FINDINGS = 25


@catalogue.rule("FT330", "Every file of the contribution that Python can import must be bound by the digest.")
def unbound_importable(ctx: Facts) -> Iterator[Finding]:
    """The content digest the statement is signed over hashes every file of the contribution (typed: a
    symlink is never the file it points at). It leaves out only caches: `.pytest_cache/`, `.mypy_cache/`,
    `.ruff_cache/`, `.hypothesis/`, `.git/`, the bundle's own files in a top-level `evidence/`, and faithful
    bytecode in `__pycache__/`. A file among those that Python could import anyway (a module in a cache
    directory, a non-bytecode file in `__pycache__/`, bytecode Python would load in place of its source that
    is not that source's compiled code, hash-based bytecode that cannot be checked) would run without being
    bound: each is an error."""
    if ctx.contribution_dir is None or ctx.manifest is None:
        return
    if ctx.digest is None:
        return
    try:
        digest = ctx.digest.get()
    except InputError:
        return  # FT302 says why the contribution cannot be read
    for item in digest.unhashed[:MAX_FINDINGS]:
        path = f"{ctx.contribution_dir}/{item.path}"
        yield Finding.error(
            "FT330",
            f"{visible(path)}: {item.reason}; the evidence digest does not bind it, so what Python runs is "
            "not what the statement names",
            path=path,
            fix=f"delete it (caches: `find {ctx.contribution_dir} -name __pycache__ -prune -exec rm -rf {{}} "
                "+`); code belongs in a reviewed .py file of the contribution",
        )
    if len(digest.unhashed) > MAX_FINDINGS:
        yield Finding.error("FT330", f"and {len(digest.unhashed) - MAX_FINDINGS} more importable files the "
                                     "digest does not bind", path=ctx.contribution_dir,
                            fix="delete them")
