"""Range mode: the Context of a git range `base..head` (diffed from the merge base), the head tree found in
the checkout or materialised, and the function that computes its blast radius."""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fasttrack.cache import cache_root
from fasttrack.changes.git import (
    SYMLINK_MODE,
    WORKTREE,
    Revision,
    check_repo,
    checkout_holds_tree,
    diff_trees,
    list_tree,
    list_tree_files,
    materialize_revision,
    merge_base,
    read_blob,
    resolve_commit,
)
from fasttrack.confinement.source_text import real_relpath
from fasttrack.confinement.zones import changed_sides, in_model_root, infer_model, models_touched
from fasttrack.context import Context
from fasttrack.errors import InputError
from fasttrack.manifest import MANIFEST_FILE, Manifest, load_manifest
from fasttrack.pipeline.inputs import (
    check_evidence_option,
    check_model,
    known_models,
    load_evidence_dir,
    registry_models,
    resolve_policy_path,
    root_of,
)
from fasttrack.pipeline.options import MAX_TEXT_BYTES, VerifyOptions
from fasttrack.policy import Policy, load_policy
from fasttrack.verdict import BlastRadius, ChangeStatus


def _models_of_range(policy: Policy, head_dir: Path, base_files: list[str], head_files: list[str],
                     changed: list[str]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(model units, new models, new directories that are no model): a directory under packages_dir that
    the base already had is a model; a new one only when the head's registry maps an architecture to it."""
    existing = set(known_models(policy, base_files, []))
    in_head = set(known_models(policy, head_files, changed))
    mapped = registry_models(policy, head_dir)
    if mapped is None:
        return tuple(sorted(in_head | existing)), (), ()
    new_dirs = in_head - existing
    known = existing | (new_dirs & mapped)
    return tuple(sorted(known)), tuple(sorted(new_dirs & mapped)), tuple(sorted(new_dirs - mapped))



def _find_manifest(policy: Policy, model: str | None, tree_files: list[str],
                   changed: list[str]) -> list[str]:
    """fasttrack.toml files in the model's roots whose directory holds a changed path."""
    if model is None:
        return []
    found = [f for f in tree_files
             if posixpath.basename(f) == MANIFEST_FILE and in_model_root(policy, f, model)]
    holding = []
    for f in sorted(found):
        d = posixpath.dirname(f)
        if any(p == f or p.startswith(d + "/") for p in changed):
            holding.append(f)
    return holding


def _load_head_manifest(head_dir: Path, rel: str, head: Revision) -> Manifest:
    try:
        return load_manifest(head_dir / rel)
    except InputError as exc:
        raise InputError(exc.message, path=f"{head.name}:{rel}", field=exc.field, fix=exc.fix) from None


def _head_dir_async(top: Path, head: Revision) -> Callable[[], Path]:
    """Where the head tree's files are, decided in a thread: the checkout itself when it holds the head tree
    byte for byte (`checkout_holds_tree` hashes every file, which runs while the caller diffs), else the
    tree's copy in the cache. Call the result to wait for it."""
    if head.name == WORKTREE:
        if any(e[0] == SYMLINK_MODE for e in list_tree(top, head.tree)):
            # The checkout may hold links that leave it (to a device, a FIFO): analyse a copy of its tree,
            # from which every such link is dropped (FT105 reports them), never the links themselves.
            copy = materialize_revision(top, Revision(name=head.tree, oid=head.tree, tree=head.tree))
            return lambda: copy
        return lambda: top
    cached = cache_root() / "trees" / head.tree
    if cached.is_dir():
        return lambda: cached
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fasttrack-hash")
    holds = pool.submit(checkout_holds_tree, top, head.tree)
    pool.shutdown(wait=False)

    def wait() -> Path:
        return top if holds.result() else materialize_revision(top, head)

    return wait


def build_range_context(opts: VerifyOptions,
                        cwd: Path) -> tuple[Context, Callable[[], Callable[[], BlastRadius]]]:
    """The range's Context without its blast radius, and the function that starts the radius (the graph
    looked up or its build started; `start_blast_radius`) and returns the function that finishes it."""
    if opts.base is None:
        raise InputError("--head needs --base", field="--base", fix="pass --base REV (the PR's merge base)")
    # The checkout's top level is looked up only when the policy is not given (one git run less).
    policy_path = opts.policy if opts.policy is not None else resolve_policy_path(opts, root_of(cwd))
    policy = load_policy(policy_path)
    model_arg = check_model(opts.model)
    top = check_repo(opts.repo or cwd)
    check_evidence_option(opts.evidence)
    base = resolve_commit(top, opts.base, "--base")
    head = resolve_commit(top, opts.head or "HEAD", "--head")
    head_commit = resolve_commit(top, "HEAD", "--head").oid if head.name == WORKTREE else head.oid
    # The diff is taken from the merge base: a base that is not an ancestor of the head (a branch that moved
    # on) would otherwise count the base's own later commits, reverted, as the PR's changes.
    mb = merge_base(top, base.oid, head_commit)
    if mb is None:
        raise InputError(f"{opts.base!r} and {opts.head or 'HEAD'!r} have no common ancestor", field="--base",
                         fix="pass the branch the PR targets (fetch its history: in CI, fetch-depth 0)")
    diff_from = base.tree if mb == base.oid else resolve_commit(top, mb, "--base").tree

    head_dir_of = _head_dir_async(top, head)  # the checkout is hashed while the diff is taken
    changes = diff_trees(top, diff_from, head.tree)
    tree_files = list_tree_files(top, head.tree)
    changed = sorted({p for c in changes for p, _ in changed_sides(c)})  # a copy's source is unchanged
    head_dir = head_dir_of()  # the head's registry decides which new directories are models
    known, new_models, unregistered = _models_of_range(policy, head_dir, list_tree_files(top, base.tree),
                                                       tree_files, changed)
    touched = models_touched(policy, changed, known)
    model = model_arg or infer_model(touched)

    candidates = _find_manifest(policy, model, tree_files, changed)
    manifest = manifest_path = contribution_dir = None
    if len(candidates) == 1:
        manifest_path = candidates[0]
        manifest = _load_head_manifest(head_dir, manifest_path, head)
        contribution_dir = posixpath.dirname(manifest_path)

    base_texts: dict[str, str] = {}
    for c in changes:
        if c.status is ChangeStatus.MODIFIED and policy.hook_for(c.path) is not None:
            raw = read_blob(top, diff_from, c.old_path or c.path)
            if raw is not None and len(raw) <= MAX_TEXT_BYTES:
                base_texts[c.path] = raw.decode("utf-8", "replace")

    real_paths = {c.path: real for c in changes
                  if c.is_symlink and c.status is not ChangeStatus.DELETED
                  and (real := real_relpath(head_dir, c.path)) is not None}

    if opts.evidence is not None:
        evidence_dir: Path | None = opts.evidence
    elif contribution_dir is not None:
        evidence_dir = head_dir / contribution_dir / "evidence"
    else:
        evidence_dir = None
    evidence_dir, evidence = load_evidence_dir(evidence_dir)

    from fasttrack.confinement.blast_radius import start_blast_radius

    # A tree materialised from git is named by its tree sha: the graph cache is keyed by it without reading
    # every file. The working tree (WORKTREE) may hold ignored files grimp would see: it is hashed.
    tree_id = None if head.name == WORKTREE else f"git-tree:{head.tree}"
    ctx = Context(
        policy=policy, policy_path=policy_path, mode="range", head_dir=head_dir, changes=changes, model=model,
        models_touched=tuple(touched), repo=top, base=base.oid, head=head.oid, merge_base=mb,
        manifest=manifest,
        manifest_path=manifest_path, contribution_dir=contribution_dir,
        evidence=evidence, manifest_candidates=tuple(candidates), evidence_dir=evidence_dir,
        known_models=known, base_texts=base_texts, real_paths=real_paths, new_models=new_models,
        unregistered_dirs=unregistered,
    )
    return ctx, lambda: start_blast_radius(policy, head_dir, changes, model, tree_id=tree_id)

