"""FT10x paths, zones, hooks, multi-model, symlinks, binaries."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from fasttrack.changes.model import Change
from fasttrack.confinement.hooks import check_hook_change
from fasttrack.confinement.zones import changed_sides, in_model_root, zone_description
from fasttrack.facts.model import Facts
from fasttrack.findings import Finding
from fasttrack.policy import Zone, ZoneKind
from fasttrack.rules.base import Catalogue
from fasttrack.verdict import ChangeStatus

catalogue = Catalogue("confinement")

EXEC_MODE = "100755"
FILE_MODES = ("100644", EXEC_MODE)


def _roots(ctx: Facts) -> str:
    model = ctx.model or "<model>"
    return ", ".join(r.replace("{model}", model).lstrip("/") for r in ctx.policy.models.local_roots)


def _where(ctx: Facts, path: str) -> str:
    engine = ctx.engine_path(path)
    return path if engine == path else f"{path} (lands at {engine})"


def _zone_text(ctx: Facts, zone: Zone) -> str:
    desc = zone_description(ctx.policy, zone)
    return f"{zone.name} ({desc})" if desc else zone.name


@catalogue.rule("FT100", "The PR changes nothing.")
def no_changes(ctx: Facts) -> Iterator[Finding]:
    """A fast-track verdict needs something to judge: an empty change set (the same tree on both sides,
    or an empty contribution directory) cannot pass."""
    if not ctx.changes:
        where = "the contribution directory" if ctx.mode == "contribution" else f"{ctx.base}..{ctx.head}"
        yield Finding.error("FT100", f"no changed files in {where}",
                            fix="check the base and head revisions (or the contribution directory)")


@catalogue.rule("FT101", "A changed path lies in shared code outside the model's local roots.")
def shared_code(ctx: Facts) -> Iterator[Finding]:
    """Every changed path (both sides of renames and copies; deletions too) must sit in the target model's
    local roots. Paths in shared code (layers, kernels, build files, requirements, CI config, or any other
    engine code) make the PR ineligible for fast-track: it goes to normal review. The finding names the
    zone."""
    for change in ctx.changes:
        for path, how in changed_sides(change):
            zone = ctx.zone_of(path)
            if zone.kind is ZoneKind.INELIGIBLE:
                yield Finding.error(
                    "FT101",
                    f"{_where(ctx, path)} ({how}) is in {_zone_text(ctx, zone)}, outside the model's "
                    f"local roots",
                    path=path,
                    fix=f"keep the PR inside {_roots(ctx)}; send the change to {zone.name} through normal "
                        "review",
                )


@catalogue.rule("FT102", "A changed path lies in a forbidden shared zone.")
def forbidden_zone(ctx: Facts) -> Iterator[Finding]:
    """Input preparation, sampling, KV-cache management and the scheduler are shared by every model; a
    fast-track PR may never touch them (renames into or out of them count on both sides)."""
    for change in ctx.changes:
        for path, how in changed_sides(change):
            zone = ctx.zone_of(path)
            if zone.kind is ZoneKind.FORBIDDEN:
                yield Finding.error(
                    "FT102",
                    f"{_where(ctx, path)} ({how}) is {_zone_text(ctx, zone)} code, which fast-track PRs "
                    "may not change",
                    path=path,
                    fix="move the change into the model's own package, or send it for normal review",
                )


@catalogue.rule("FT103", "The PR is not confined to one model.")
def one_model(ctx: Facts) -> Iterator[Finding]:
    """A fast-track PR serves exactly one model: its changes may touch only that model's local roots. It
    fails when it touches several models' roots, when the target model cannot be inferred (no changed path
    is model-local and no --model was given), or when it touches another model than the one named."""
    if not ctx.changes:
        return
    touched = list(ctx.models_touched)
    if ctx.model is None:
        if len(touched) > 1:
            yield Finding.error("FT103", f"the PR touches several models' local roots: {', '.join(touched)}",
                                fix="split the PR into one PR per model")
        else:
            yield Finding.error("FT103", "the target model cannot be inferred: no changed path is inside a "
                                         "model's local roots",
                                fix="pass --model NAME, and keep the changes inside that model's roots")
        return
    for change in ctx.changes:
        for path, how in changed_sides(change):
            zone = ctx.zone_of(path)
            if zone.kind is ZoneKind.MODEL_LOCAL and zone.model != ctx.model:
                yield Finding.error(
                    "FT103",
                    f"{_where(ctx, path)} ({how}) belongs to model {zone.model}, not {ctx.model}",
                    path=path,
                    fix=f"send {zone.model}'s change in its own PR",
                )


def _removed_line_anchor(change: Change, base_line: int) -> int:
    for h in change.hunks:
        if any(no == base_line for no, _ in h.removed):
            return max(h.new_start, 1)
    return 1


@catalogue.rule("FT104", "A hook file is edited beyond the entries it allows.")
def hook_edits(ctx: Facts) -> Iterator[Finding]:
    """Hook files sit outside the model root but need one small edit per model (vLLM's architecture
    registry gains a line mapping an architecture to `vllm.models.<model>`). Every run of added or removed
    lines must be whole allowed entries for the target model, within the hook's line budget; the file may
    not be added, deleted, renamed, re-moded or made binary, and an added entry may not shadow another."""
    for change in ctx.changes:
        for path, _ in changed_sides(change):
            hook = ctx.policy.hook_for(ctx.engine_path(path))
            if hook is None:
                continue
            head_text = ctx.head_text(path) if change.status is not ChangeStatus.DELETED else None
            for v in check_hook_change(hook, change, ctx.model, head_text=head_text,
                                       base_text=ctx.base_texts.get(path)):
                if v.side == "removed" and v.line is not None:
                    line: int | None = _removed_line_anchor(change, v.line)
                    where = f" (base line {v.line})"
                else:
                    line, where = v.line, ""
                shown = f": {v.text.strip()!r}" if v.text is not None else ""
                yield Finding.error(
                    "FT104", f"{hook.name} hook: {v.reason}{where}{shown}", path=path, line=line,
                    fix=f"edit {hook.path} only by adding or removing whole entries for "
                        f"{ctx.model or 'the model'} ({hook.description or 'see the policy'}), at most "
                        f"{hook.max_changed_lines} lines",
                )


def _link_escapes(ctx: Facts, link_path: str, target: str) -> str | None:
    """Why a model-local symlink leaves the model root (None when it stays inside)."""
    if posixpath.isabs(target):
        return f"points to the absolute path {target}"
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(link_path), target))
    if resolved == ".." or resolved.startswith("../"):
        return f"points outside the repository ({target})"
    model = ctx.model
    assert model is not None
    real = ctx.real_paths.get(link_path)  # on disk, every link of a chain followed (range mode)
    if real is not None and real != resolved and not (
            in_model_root(ctx.policy, real, model) or in_model_root(ctx.policy, real + "/x", model)):
        return f"points to {target}, which is really {real} on disk, outside {model}'s local roots"
    if in_model_root(ctx.policy, resolved, model) or in_model_root(ctx.policy, resolved + "/x", model):
        return None
    return f"points to {resolved}, outside {model}'s local roots"


def _leaves_dir(link_path: str, target: str, directory: str) -> str | None:
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(link_path), target))
    if posixpath.isabs(target) or not resolved.startswith(directory.rstrip("/") + "/"):
        return f"points to {resolved}, outside the contribution directory {directory}"
    return None


@catalogue.rule("FT105", "A symlink in the model root points outside it.")
def symlink_escape(ctx: Facts) -> Iterator[Finding]:
    """A symlink inside the model root whose target (relative targets resolved from the link's directory)
    lies outside the model's local roots is a change outside them: it lets model code read or shadow shared
    files. Absolute targets and targets that cannot be read fail too."""
    if ctx.model is None:
        return
    for change in ctx.changes:
        if not change.is_symlink or change.status is ChangeStatus.DELETED:
            continue
        engine = ctx.engine_path(change.path)
        if not in_model_root(ctx.policy, engine, ctx.model):
            continue
        if change.symlink_target is None:
            reason: str | None = "has a target that could not be read"
        elif engine != change.path and ctx.contribution_dir is not None:
            # A contribution's link must stay inside the contribution: nothing outside it ships.
            reason = _leaves_dir(change.path, change.symlink_target, ctx.contribution_dir) or \
                _link_escapes(ctx, engine, change.symlink_target)
        else:
            reason = _link_escapes(ctx, engine, change.symlink_target)
        if reason:
            yield Finding.error("FT105", f"symlink {_where(ctx, change.path)} {reason}", path=change.path,
                                fix="replace the symlink with the file itself, inside the model root")


@catalogue.rule("FT106", "A binary file or a submodule is changed.")
def binary_or_submodule(ctx: Facts) -> Iterator[Finding]:
    """Binary files (compiled kernels, archives, anything git cannot diff as text) cannot be reviewed or
    analysed, and a submodule pulls in code from outside the repository: neither can be fast-tracked.
    Deleting a binary file is fine."""
    for change in ctx.changes:
        if change.is_submodule:
            yield Finding.error("FT106",
                                f"{_where(ctx, change.path)} is a submodule ({change.status.value})",
                                path=change.path,
                                fix="vendor the source as reviewable text files, or drop the submodule")
        elif change.binary and change.status is not ChangeStatus.DELETED:
            yield Finding.error("FT106",
                                f"{_where(ctx, change.path)} is a binary file ({change.status.value})",
                                path=change.path,
                                fix="ship sources that build or JIT at run time instead of binaries")


@catalogue.rule("FT107", "A file's executable bit changes.")
def mode_change(ctx: Facts) -> Iterator[Finding]:
    """An existing file's executable bit set or cleared (a mode change, also a contribution file laid over
    an engine file of another mode) is worth a reviewer's look: a warning, not a failure. A new file has no
    old mode, so its mode is not a change: a new executable file (a benchmark or launch script) is an info
    that lists it for the reviewer, never a warning."""
    for change in ctx.changes:
        if change.status is ChangeStatus.DELETED:
            continue
        old, new = change.old_mode, change.new_mode
        if old in FILE_MODES and new in FILE_MODES and old != new:
            what = "made executable" if new == EXEC_MODE else "no longer executable"
            yield Finding.warning("FT107", f"{_where(ctx, change.path)} is {what} ({old} -> {new})",
                                  path=change.path, fix="drop the mode change unless the file is a script")
        elif change.status is ChangeStatus.ADDED and new == EXEC_MODE:
            yield Finding.info("FT107", f"{_where(ctx, change.path)} is a new executable file (a script; "
                               "no existing file's mode changed)",
                               path=change.path, fix="nothing to do if it is meant to be run")


@catalogue.rule("FT108", "Several contribution manifests fit the PR.")
def several_manifests(ctx: Facts) -> Iterator[Finding]:
    """One fast-track PR is one contribution with one `fasttrack.toml`. When several manifests in the
    model's roots hold changed files, none is picked and the envelope and evidence cannot be judged."""
    if ctx.manifest is None and len(ctx.manifest_candidates) > 1:
        yield Finding.error("FT108", "several contribution manifests hold changed files: "
                            + ", ".join(ctx.manifest_candidates),
                            path=ctx.manifest_candidates[0],
                            fix="split the PR so that it changes one contribution")


@catalogue.rule("FT109", "The manifest disagrees with where the contribution sits.")
def manifest_placement(ctx: Facts) -> Iterator[Finding]:
    """The manifest's `contribution.model` must be the PR's model, and in a git range its
    `contribution.target_path` must be the directory that holds the manifest."""
    m = ctx.manifest
    if m is None:
        return
    if ctx.model is not None and m.contribution.model != ctx.model:
        yield Finding.error("FT109", f"the manifest names model {m.contribution.model!r}, the PR targets "
                                     f"{ctx.model!r}",
                            path=ctx.manifest_path, fix="set contribution.model to the model the PR changes")
    if ctx.mode == "range" and ctx.contribution_dir is not None and m.contribution.target_path != \
            ctx.contribution_dir:
        yield Finding.error("FT109", f"contribution.target_path is {m.contribution.target_path!r} but the "
                                     f"manifest sits in {ctx.contribution_dir!r}",
                            path=ctx.manifest_path,
                            fix=f"set contribution.target_path = \"{ctx.contribution_dir}\"")
