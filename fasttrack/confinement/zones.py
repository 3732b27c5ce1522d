"""Path zones: where a changed path sits, as the policy sees it, and which models' local roots it is in.

Classification order (first match wins):

1. judge zones (the PR may not edit its own judge), then zones marked `wins_over_model_roots` (the
   repo-config zone: `.gitattributes` and `.gitmodules` change how git reads the PR, wherever they sit)
2. hook files (only declared small edits)
3. the target model's local roots (`model-local`): a model's own file wins over the shared-zone patterns
   that happen to match its name (`vllm/models/kimi_k3/rejection_sampler_mtp.py` is the model's code, not
   shared sampling code)
4. another model's local roots (`model-local (<other>)`, still MODEL_LOCAL but for another model)
5. forbidden zones (input preparation, sampling, KV-cache management, scheduler)
6. ineligible zones (shared layers, kernels, build, requirements, CI config)
7. anything else: `shared`, ineligible.

`classify` judges a path as a string; the Context classifies a changed symlink by its real location on disk
too (`Context.real_paths`), so a model-root link into `vllm/v1/sample/` is sampling code.

A model is the name in the `{model}` slot of a local root (e.g. `vllm/models/{model}/**`). Names listed in
`models.shared_packages` (vllm/models/common) are never models; when `known_models` is given, only those
names count (so `tests/models/language/` is not taken for a model called "language").
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from functools import lru_cache

import pathspec

from fasttrack.changes.model import Change
from fasttrack.policy import MODEL_NAME_RE, MODEL_PLACEHOLDER, Policy, Zone, ZoneKind
from fasttrack.verdict import ChangeStatus

SHARED_ZONE = "shared"
MODEL_LOCAL_ZONE = "model-local"
_NAME_RUN = re.compile(r"[a-z][a-z0-9_]*")


@lru_cache(maxsize=256)
def _local_spec(roots: tuple[str, ...], model: str) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines([r.replace(MODEL_PLACEHOLDER, model) for r in roots])


def _glob_prefix_regex(prefix: str) -> str:
    """A regex for the part of a root pattern before `{model}` (literal text, `*`, `**`, `?`)."""
    out = ""
    i = 0
    while i < len(prefix):
        if prefix.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif prefix.startswith("**", i):
            out += ".*"
            i += 2
        elif prefix[i] == "*":
            out += "[^/]*"
            i += 1
        elif prefix[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(prefix[i])
            i += 1
    return out


@lru_cache(maxsize=64)
def _slot_regexes(roots: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    regexes = []
    for root in roots:
        prefix = root.split(MODEL_PLACEHOLDER, 1)[0].lstrip("/")
        regexes.append(re.compile("^" + _glob_prefix_regex(prefix) + r"([a-z][a-z0-9_]*)"))
    return tuple(regexes)


def changed_sides(change: Change) -> list[tuple[str, str]]:
    """(path, how the change touches it) for every path a change alters: both sides of a rename. A copy
    leaves its source as it was, so only the copy counts (its source is named in the description)."""
    if change.status is ChangeStatus.RENAMED and change.old_path and change.old_path != change.path:
        return [(change.old_path, f"renamed to {change.path}"),
                (change.path, f"renamed from {change.old_path}")]
    if change.status is ChangeStatus.COPIED and change.old_path:
        return [(change.path, f"copied from {change.old_path}")]
    return [(change.path, change.status.value)]


def in_model_root(policy: Policy, path: str, model: str) -> bool:
    """Is `path` inside `model`'s local roots?"""
    if model in policy.models.shared_packages:
        return False
    return _local_spec(tuple(policy.models.local_roots), model).match_file(path)


def model_of_path(policy: Policy, path: str, known_models: Collection[str] | None = None) -> str | None:
    """The model whose local roots hold `path` (the longest name when several fit), or None."""
    found: list[str] = []
    for rx in _slot_regexes(tuple(policy.models.local_roots)):
        m = rx.match(path)
        if not m:
            continue
        run = m.group(1)
        # The slot may be followed by more name characters (e.g. "{model}.md"); try every prefix.
        for end in range(len(run), 0, -1):
            name = run[:end]
            if not MODEL_NAME_RE.match(name) or name in policy.models.shared_packages:
                continue
            if known_models is not None and name not in known_models:
                continue
            if in_model_root(policy, path, name):
                found.append(name)
    return max(found, key=len) if found else None


def models_touched(policy: Policy, paths: Iterable[str],
                   known_models: Collection[str] | None = None) -> list[str]:
    """Every model whose local roots hold one of `paths`, sorted."""
    touched = {m for p in paths if (m := model_of_path(policy, p, known_models)) is not None}
    return sorted(touched)


def infer_model(touched: list[str]) -> str | None:
    """The target model: the single model touched; None when none or several are."""
    return touched[0] if len(touched) == 1 else None


def classify(policy: Policy, path: str, model: str | None,
             known_models: Collection[str] | None = None) -> Zone:
    """The zone of `path` for a PR targeting `model` (see the module doc for the order)."""
    for zone in policy.zones:
        if zone.kind == "judge" and zone.spec.match_file(path):
            return Zone(name=zone.name, kind=ZoneKind.JUDGE)
    for zone in policy.zones:
        if zone.wins_over_model_roots and zone.spec.match_file(path):
            return Zone(name=zone.name, kind=ZoneKind(zone.kind))
    hook = policy.hook_for(path)
    if hook is not None:
        return Zone(name=hook.name, kind=ZoneKind.HOOK, model=model)
    if model is not None and in_model_root(policy, path, model):
        return Zone(name=MODEL_LOCAL_ZONE, kind=ZoneKind.MODEL_LOCAL, model=model)
    other = model_of_path(policy, path, known_models)
    if other is not None:
        return Zone(name=f"{MODEL_LOCAL_ZONE} ({other})", kind=ZoneKind.MODEL_LOCAL, model=other)
    for kind in ("forbidden", "ineligible"):
        for zone in policy.zones:
            if zone.kind == kind and zone.spec.match_file(path):
                return Zone(name=zone.name, kind=ZoneKind(kind))
    return Zone(name=SHARED_ZONE, kind=ZoneKind.INELIGIBLE)


def classify_real(policy: Policy, path: str, real: str | None, model: str | None,
                  known_models: Collection[str] | None = None) -> Zone:
    """`classify` for a path whose real location on disk (symlinks resolved) is `real`: a judge or forbidden
    zone at the real location wins over what the path's name says."""
    zone = classify(policy, path, model, known_models)
    if real is None or real == path or zone.kind in (ZoneKind.JUDGE, ZoneKind.FORBIDDEN):
        return zone
    there = classify(policy, real, model, known_models)
    if there.kind in (ZoneKind.JUDGE, ZoneKind.FORBIDDEN):
        return Zone(name=there.name, kind=there.kind)
    return zone


def zone_description(policy: Policy, zone: Zone) -> str:
    """A short human description of a zone (from the policy where it has one)."""
    for z in policy.zones:
        if z.name == zone.name and z.description:
            return z.description
    for h in policy.hooks:
        if h.name == zone.name and h.description:
            return h.description
    if zone.name == SHARED_ZONE:
        return "shared engine code outside every declared zone"
    if zone.kind is ZoneKind.MODEL_LOCAL:
        return f"{zone.model}'s own code"
    return ""
