"""Contribution mode: the Context of a contribution directory laid over the engine tree, and the function
that computes its blast radius on the overlay."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fasttrack.cache import cache_root
from fasttrack.changes.model import Change
from fasttrack.confinement.zones import models_touched
from fasttrack.context import Context
from fasttrack.errors import InputError
from fasttrack.manifest import MANIFEST_FILE, load_manifest
from fasttrack.pipeline.contribution_changes import (
    contribution_files,
    engine_text,
    engine_tree_for,
    file_change,
)
from fasttrack.pipeline.inputs import (
    check_evidence_option,
    check_model,
    known_models,
    load_evidence_dir,
    root_of,
)
from fasttrack.pipeline.options import DEFAULT_CONTRIBUTION, ENGINE_TREE_ENV, VerifyOptions
from fasttrack.pipeline.overlay import overlay_tree
from fasttrack.policy import load_policy
from fasttrack.trusted import TrustedJudge, trusted_judge
from fasttrack.verdict import BlastRadius, ChangeStatus


def build_contribution_context(opts: VerifyOptions,
                                cwd: Path) -> tuple[Context, Callable[[], Callable[[], BlastRadius]]]:
    """The contribution's Context without its blast radius, and the function that starts the radius (the
    overlay laid, the graph looked up or its build started) and returns the function that finishes it."""
    if opts.repo is not None and not opts.repo.is_dir():
        raise InputError("not a directory", path=opts.repo, field="--repo",
                         fix="pass the checkout that holds the contribution")
    root = root_of(opts.repo.resolve() if opts.repo is not None else cwd)
    contrib = opts.contribution if opts.contribution is not None else root / DEFAULT_CONTRIBUTION
    if not contrib.is_absolute():
        contrib = (cwd / contrib) if opts.contribution is not None else (root / contrib)
    contrib = contrib.resolve()
    if not contrib.is_dir():
        raise InputError("contribution directory not found", path=contrib, field="--contribution",
                         fix="pass --contribution DIR (a directory holding fasttrack.toml)")
    manifest_file = contrib / MANIFEST_FILE
    if not manifest_file.is_file():
        raise InputError("the contribution has no manifest", path=manifest_file, field="--contribution",
                         fix=f"write {MANIFEST_FILE} there (`fasttrack schema manifest` prints its schema)")
    manifest = load_manifest(manifest_file)
    judge_source: TrustedJudge | None = None
    if opts.policy is not None:
        if opts.trusted_ref is not None:
            raise InputError("--policy and --trusted-ref name two different judges", field="--trusted-ref",
                             fix="pass one of them")
        policy_path = opts.policy
    else:
        judge_source = trusted_judge(root, opts.trusted_ref)
        policy_path = judge_source.policy_path
    policy = load_policy(policy_path)
    model = manifest.contribution.model
    given = check_model(opts.model)
    if given is not None and given != model:
        raise InputError(f"--model {given} disagrees with the manifest's contribution.model {model!r}",
                         path=manifest_file, field="contribution.model",
                         fix="drop --model or fix the manifest")

    try:
        contrib_rel = contrib.relative_to(root.resolve()).as_posix()
    except ValueError:
        contrib_rel = contrib.as_posix()
    target = manifest.contribution.target_path
    engine = engine_tree_for(policy, opts)
    changes: list[Change] = []
    engine_paths: dict[str, str] = {}
    sources: dict[str, Path] = {}
    base_texts: dict[str, str] = {}
    for f in contribution_files(root, contrib):
        rel_in = f.relative_to(contrib).as_posix()
        repo_rel = f"{contrib_rel}/{rel_in}"
        engine_path = f"{target}/{rel_in}"
        engine_paths[repo_rel] = engine_path
        sources[engine_path] = f
        change = file_change(f, repo_rel, engine / engine_path if engine else None)
        changes.append(change)
        if engine is not None and change.status is ChangeStatus.MODIFIED and not change.binary:
            # The engine's file is this change's base: escapes it already had are not the PR's, and a hook
            # file is judged against it (as `base_texts` holds the base revision's text in range mode).
            old = engine_text(engine / engine_path)
            if old is not None:
                base_texts[repo_rel] = old
    change_set = tuple(changes)
    engine_side = sorted(engine_paths.values())
    known = tuple(sorted({model, *known_models(policy, [], engine_side)}))
    packages_dir = engine / policy.models.packages_dir if engine is not None else None
    new_models = (model,) if packages_dir is not None and packages_dir.is_dir() and \
        not (packages_dir / model).is_dir() else ()
    touched = models_touched(policy, engine_side, known)

    check_evidence_option(opts.evidence)
    if opts.evidence is not None:
        evidence_dir: Path | None = opts.evidence
    else:
        evidence_dir = root / "evidence" / manifest.contribution.name
    evidence_dir, evidence = load_evidence_dir(evidence_dir)

    def blast() -> Callable[[], BlastRadius]:
        if engine is None:
            missing = BlastRadius(computed=False, note=(
                f"contribution mode: no {policy.engine} {policy.engine_version} source tree to lay the "
                f"contribution over: fetch it with `python -m fasttrack.engine_tree {policy.engine_version}` "
                f"(it lands in {cache_root() / f'{policy.engine}-{policy.engine_version}'}), or pass "
                f"--engine-tree DIR, or set {ENGINE_TREE_ENV})"))
            return lambda: missing
        from fasttrack.confinement.blast_radius import start_blast_radius

        overlay = overlay_tree(engine, sources)
        engine_changes = tuple(Change(status=c.status, path=engine_paths[c.path], old_mode=c.old_mode,
                                      new_mode=c.new_mode, binary=c.binary, symlink_target=c.symlink_target,
                                      hunks=c.hunks, added_lines=c.added_lines, removed_lines=c.removed_lines)
                               for c in change_set)
        return start_blast_radius(policy, overlay, engine_changes, model)

    ctx = Context(
        policy=policy, policy_path=policy_path, mode="contribution", head_dir=root, changes=change_set,
        model=model, models_touched=tuple(touched), repo=root, manifest=manifest,
        manifest_path=f"{contrib_rel}/{MANIFEST_FILE}", contribution_dir=contrib_rel,
        evidence=evidence, engine_paths=engine_paths, evidence_dir=evidence_dir,
        known_models=known, base_texts=base_texts, judge_source=judge_source, new_models=new_models,
    )
    return ctx, blast

