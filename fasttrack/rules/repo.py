"""FT140-FT143: files that change how the PR is read, new models, and registry keys that capture others.

- FT140 a changed `.gitattributes`, `.gitmodules`, `.mailmap`, `.lfsconfig` or `.git` file, at any depth
  (inside the model directory too): git reads them to decide what a diff, a checkout or a blob is;
- FT141 the PR adds a model package (a new directory under `vllm/models/` that the head's registry maps an
  architecture to): reported as a new model, not fast-track eligible unless the policy's
  `models.new_models_eligible` says so;
- FT142 an added registry key that vLLM's architecture-name fallback would use for checkpoints another
  model served before (fasttrack/confinement/registry_names.py mirrors `_normalize_arch`);
- FT143 a new directory under `vllm/models/` that no architecture in the head's registry maps to: it is
  not a model, so its files are shared code.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from fasttrack.confinement.registry_names import captures, read_registry
from fasttrack.confinement.zones import changed_sides
from fasttrack.facts.model import Facts
from fasttrack.findings import Finding
from fasttrack.policy import MODEL_PLACEHOLDER
from fasttrack.rules.base import Catalogue
from fasttrack.verdict import ChangeStatus

catalogue = Catalogue("repo")

GIT_META = frozenset({".gitattributes", ".gitmodules", ".mailmap", ".lfsconfig", ".git"})


@catalogue.rule("FT140", "A changed file changes how git reads the repository (.gitattributes, ...).")
def git_metadata(ctx: Facts) -> Iterator[Finding]:
    """`.gitattributes` (at any depth: they apply to the directory they sit in) decide what git calls binary,
    which diff, merge and filter drivers run and how bytes are converted; `.gitmodules` where submodules come
    from; `.mailmap` who wrote what; `.lfsconfig` where LFS objects come from. fasttrack runs git with all of
    them off, but the engine's own tooling does not: a fast-track PR may not add, change or remove one, not
    even inside the model directory."""
    for change in ctx.changes:
        for path, how in changed_sides(change):
            if posixpath.basename(path) in GIT_META:
                yield Finding.error(
                    "FT140", f"{path} ({how}) is git configuration that changes how the repository is read",
                    path=path, fix="drop the file from the PR; send repository configuration for normal "
                                   "review")


@catalogue.rule("FT141", "The PR adds a new model package.")
def new_model(ctx: Facts) -> Iterator[Finding]:
    """A new directory under the models directory that the head's architecture registry maps an
    architecture to is a new model: a new model needs a full review (its weights loading, its config, its
    registry entries), so it is not fast-track eligible unless the policy sets
    `models.new_models_eligible = true`, in which case it is listed as an info."""
    eligible = ctx.policy.models.new_models_eligible
    for name in ctx.new_models:
        where = ctx.policy.models.package.replace(MODEL_PLACEHOLDER, name)
        msg = f"the PR adds a new model, {name} ({where})"
        if eligible:
            yield Finding.info("FT141", msg + "; the policy lets new models be fast-tracked",
                               fix="nothing to do")
        else:
            yield Finding.error("FT141", msg + ": new models are not fast-track eligible",
                                fix="send the new model for normal review; fast-track its kernels once it is "
                                    "merged")


@catalogue.rule("FT142", "An added registry key would capture checkpoints of another model.")
def registry_capture(ctx: Facts) -> Iterator[Finding]:
    """vLLM resolves a checkpoint's declared architecture by exact key first and then by swapping its suffix
    (`...ForConditionalGeneration` is served by `...ForCausalLM`, `...Model` by either, in the order of
    `_SUFFIX_TO_DEFAULTS`). An added key for this model that a checkpoint of another model would now resolve
    to (its own name, or a suffix variant of another model's key) takes that model's checkpoints: an error
    naming the architecture it captures. A key for a new architecture of this model stays clean."""
    registry = ctx.policy.models.registry
    if registry is None or ctx.model is None:
        return
    change = next((c for c in ctx.changes if ctx.engine_path(c.path) == registry
                   and c.status is ChangeStatus.MODIFIED), None)
    if change is None:
        return
    before, after = ctx.base_texts.get(change.path), ctx.head_text(change.path)
    if before is None or after is None:
        return  # FT104 judges a hook file it cannot read
    try:
        base, head = read_registry(before), read_registry(after)
    except SyntaxError:
        return  # FT104 reports a hook file that no longer parses
    package = ctx.policy.models.package.replace(MODEL_PLACEHOLDER, ctx.model)
    lines = {text.split(":", 1)[0].strip().strip("\"'"): no for h in change.hunks for no, text in h.added}
    for cap in captures(base, head, package):
        what = (f"names the speculative drafts of {cap.old_key!r} ({cap.old_module}): it captures draft "
                f"checkpoints that declare {cap.architecture!r}") if cap.draft else (
            f"captures checkpoints that declare {cap.architecture!r}, which vLLM served with {cap.old_key!r} "
            f"({cap.old_module}) before")
        yield Finding.error(
            "FT142", f"added registry key {cap.new_key!r} {what}",
            path=change.path, line=lines.get(cap.new_key),
            fix=f"name the architecture {ctx.model}'s checkpoints declare (a key no other model's "
                "checkpoints resolve to)")


@catalogue.rule("FT143", "A new directory under the models directory is not a registered model.")
def unregistered_dir(ctx: Facts) -> Iterator[Finding]:
    """Only the head's architecture registry makes a directory under `vllm/models/` a model: a new
    directory that no architecture maps to is shared code under a model-like name, so it is not the
    model's own root."""
    for name in ctx.unregistered_dirs:
        d = f"{ctx.policy.models.packages_dir.rstrip('/')}/{name}/"
        yield Finding.error("FT143", f"{d} is new, and no architecture in the registry maps to it: it is not "
                                     "a model package", path=d,
                            fix="add the model's registry entry (a new model goes to normal review), or move "
                                "the files into the model's own package")
