"""The facts stage: every read a rule depends on (head and base texts, stats and symlinks of the head tree,
the escape analysis, the contribution's content digest, signature checks with ssh-keygen, the harness and
baseline digests), done once, before any rule runs, into one immutable `Facts`.

A loader that raises is recorded (`Outcome`): the rules reading that fact crash, which fails the verdict
closed, as when a rule did its own reading; the other rules still run.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable, Iterator, Mapping
from dataclasses import fields
from typing import Any, TypeVar

from fasttrack.context import Context
from fasttrack.facts import head, paths
from fasttrack.facts.model import Facts, LinkFacts, Outcome, PathKind
from fasttrack.verdict import ChangeStatus

T = TypeVar("T")

_REF_FIELDS = ("guard", "stock_path")


def _outcome(load: Callable[[], T]) -> Outcome[T]:
    try:
        return Outcome(value=load())
    except Exception as exc:  # recorded: the rules that read this fact fail closed
        return Outcome(error=exc)


class _Broken(Mapping[str, Any]):
    """What a loader that raised leaves in a mapping or sequence field: reading it re-raises (the rules
    that read it crash, which fails the verdict closed, as when they did the reading themselves)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getitem__(self, key: str) -> Any:
        raise self.error

    def __iter__(self) -> Iterator[Any]:
        raise self.error

    def __len__(self) -> int:
        raise self.error


def _or_broken(load: Callable[[], Any]) -> Any:
    try:
        return load()
    except Exception as exc:
        return _Broken(exc)


def _kind(ctx: Context, path: str) -> PathKind:
    kind = head.path_kind(ctx.head_dir / path)
    assert kind in ("file", "dir", "other", "missing")
    return kind  # type: ignore[return-value]


def _head_facts(ctx: Context) -> tuple[dict[str, str | None], dict[str, PathKind]]:
    """Texts and kinds of the head-side paths the rules ask about."""
    wanted = {c.path for c in ctx.changes}
    wanted.add(paths.manifest_path(ctx))
    m = ctx.manifest
    if m is not None:
        refs = [str(getattr(m.fallback, name)) for name in _REF_FIELDS]
        if m.trace is not None:  # the entry points the trace calls (FT212 checks they exist)
            refs += [m.trace.smoke, *([m.trace.guard_input] if m.trace.guard_input else [])]
        for ref in refs:
            module, sep, _ = ref.partition(":")
            if sep:
                wanted.update(paths.module_candidates(ctx, module))
    texts = {p: head.read_head_text(ctx.head_dir, p) for p in sorted(wanted)}
    kinds: dict[str, PathKind] = {}
    for p in paths.head_paths(ctx):
        init = posixpath.join(posixpath.dirname(p), "__init__.py")
        kinds[init] = _kind(ctx, init)
    return texts, kinds


def _links(ctx: Context) -> dict[str, LinkFacts]:
    if ctx.model is None:
        return {}
    out = {}
    for link in head.module_links(ctx):
        real = head.real_path(ctx, link)
        exists = head.path_kind(ctx.head_dir / link) != "missing"
        out[link] = LinkFacts(real=real, exists=exists, real_kind=_kind(ctx, real) if real is not None
                              else "missing")
    return out


def _python_sources(ctx: Context) -> dict[str, object]:
    from fasttrack.confinement.source_text import read_python_source

    return {p: read_python_source(ctx.head_dir, p) for p in paths.head_paths(ctx) if p.endswith(".py")}


def _base_sources(ctx: Context) -> dict[str, str | None]:
    from fasttrack.facts.escapes import base_text

    return {c.path: base_text(ctx, c) for c in ctx.changes
            if c.status in (ChangeStatus.MODIFIED, ChangeStatus.RENAMED) and c.path.endswith(".py")}


def _manifest_sha256(ctx: Context) -> str | None:
    if ctx.manifest_path is None:
        return None
    try:
        return hashlib.sha256((ctx.head_dir / ctx.manifest_path).read_bytes()).hexdigest()
    except OSError:
        return None


def _policy_relpath(ctx: Context) -> str | None:
    if ctx.repo is None:
        return None
    try:
        return ctx.policy_path.resolve().relative_to(ctx.repo.resolve()).as_posix()
    except ValueError:
        return None


# The Context's memo key under which the verify pipeline leaves the facts it gathered for exactly that Context
# (`pipeline.build`: gathered while grimp scans). A Context derived with `dataclasses.replace` starts with an
# empty memo, so its facts are gathered again: they are never a copy's stale ones.
GATHERED = "facts:gathered"


def gather_facts(ctx: Context) -> Facts:
    """The Context's facts: every read the rules depend on, done now (a Facts is returned as it is, and so
    are the facts already gathered for this very Context, `GATHERED`)."""
    if isinstance(ctx, Facts):
        return ctx
    gathered = ctx._memo.get(GATHERED)
    if isinstance(gathered, Facts):
        return gathered
    from fasttrack.evidence import analysis as an
    from fasttrack.evidence import yardstick_facts as yf
    from fasttrack.evidence.digest import contribution_digest
    from fasttrack.evidence.harness import harness_digest
    from fasttrack.facts.escapes import analyse_escapes

    texts, kinds = _head_facts(ctx)
    digest = None
    if ctx.contribution_dir is not None and ctx.manifest is not None:
        root = ctx.head_dir / ctx.contribution_dir
        # The key evidence.analysis.freshness memoises it under: the contribution is hashed once per run.
        digest = _outcome(lambda: ctx.memo(f"contribution_digest:{root}", lambda: contribution_digest(root)))
    parts = [None, *an.parts(ctx)]
    base = {f.name: getattr(ctx, f.name) for f in fields(ctx) if f.init}
    facts = Facts(
        **base,
        head_texts=texts,
        head_kinds=kinds,
        python_sources=_or_broken(lambda: _python_sources(ctx)),
        base_sources=_or_broken(lambda: _base_sources(ctx)),
        module_links=_or_broken(lambda: _links(ctx)),
        # Read only for a manifest's fallback check (FT210): without one the root is the whole head tree.
        contribution_sources=_or_broken(lambda: tuple(head.contribution_sources(ctx)))
        if ctx.manifest is not None else (),
        manifest_sha256=_manifest_sha256(ctx),
        policy_relpath=_policy_relpath(ctx),
        escape_analysis=_outcome(lambda: analyse_escapes(ctx)),
        digest=digest,
        harness=_outcome(harness_digest),
        freshness_checks=tuple((p, _outcome(lambda p=p: an.freshness(ctx, p))) for p in parts),  # type: ignore[misc]
        signature_checks=tuple((p, _outcome(lambda p=p: an.signature(ctx, p))) for p in parts),  # type: ignore[misc]
        allowed_signers=_outcome(lambda: an.allowed_signers_path(ctx)),
        judged_baseline=_outcome(lambda: yf.judged_baseline_digest(ctx)) if ctx.evidence is not None
        else Outcome(value=None),
        audits=_outcome(lambda: yf.audits(ctx)),
    )
    facts._memo.update(ctx._memo)  # values computed once per run (the content digest) carry over
    return facts
