"""Loaders both modes share: the checkout root, the policy path, the model name, the evidence bundle, the
model units a tree holds and the ones its architecture registry maps."""

from __future__ import annotations

import os
from pathlib import Path

import fasttrack
from fasttrack.changes.git import (
    run_git,
)
from fasttrack.confinement.source_text import SourceProblem, read_python_source
from fasttrack.errors import InputError
from fasttrack.evidence.loaded import LoadedEvidence
from fasttrack.pipeline.options import DEFAULT_POLICY, VerifyOptions
from fasttrack.policy import MODEL_NAME_RE, MODEL_PLACEHOLDER, Policy


def root_of(start: Path) -> Path:
    """The git top level of `start`, else `start` itself."""
    proc = run_git(start, "rev-parse", "--show-toplevel", check=False)
    if proc.returncode == 0 and proc.stdout.strip():
        return Path(os.fsdecode(proc.stdout.strip()))
    return start


def packaged_policy() -> Path:
    """The policy shipped beside the fasttrack package's source tree."""
    return Path(fasttrack.__file__).resolve().parent.parent / DEFAULT_POLICY


def resolve_policy_path(opts: VerifyOptions, root: Path) -> Path:
    if opts.policy is not None:
        return opts.policy
    for candidate in (root / DEFAULT_POLICY, packaged_policy()):
        if candidate.is_file():
            return candidate
    raise InputError("no policy found", path=root / DEFAULT_POLICY, field="--policy",
                     fix="pass --policy FILE (e.g. policies/vllm.toml from the fasttrack repository)")


def check_model(name: str | None) -> str | None:
    if name is not None and not MODEL_NAME_RE.match(name):
        raise InputError(f"{name!r} is not a model name", field="--model",
                         fix="use the lower-case name of the model package, e.g. kimi_k3")
    return name


def known_models(policy: Policy, tree_files: list[str], changed: list[str]) -> tuple[str, ...]:
    """Names that are model units: directories under packages_dir in the head, or in the changed paths."""
    prefix = policy.models.packages_dir.strip("/") + "/"
    names = set()
    for p in (*tree_files, *changed):
        if p.startswith(prefix):
            rest = p[len(prefix):]
            if "/" in rest:
                name = rest.split("/", 1)[0]
                if MODEL_NAME_RE.match(name) and name not in policy.models.shared_packages:
                    names.add(name)
    return tuple(sorted(names))


def registry_models(policy: Policy, tree: Path) -> set[str] | None:
    """Model package names the architecture registry in `tree` maps some architecture to (None when the
    policy names no registry; empty when the file is missing or cannot be read as Python)."""
    from fasttrack.confinement.registry_names import models_mapped, read_registry

    if policy.models.registry is None:
        return None
    text = read_python_source(tree, policy.models.registry)
    if isinstance(text, SourceProblem):
        return set()
    try:
        models = read_registry(text)
    except SyntaxError:
        return set()
    return models_mapped(models, policy.models.package.split(MODEL_PLACEHOLDER, 1)[0].rstrip("."))



def check_evidence_option(path: Path | None) -> None:
    """A bundle directory given with --evidence must exist: a mistyped path is bad input, not missing
    evidence (which would tell the contributor to re-collect)."""
    if path is None:
        return
    if not path.exists():
        raise InputError("evidence directory not found", path=path, field="--evidence",
                         fix="pass the bundle directory `fasttrack collect` wrote (e.g. evidence/kimi_k3), "
                             "or drop --evidence to use the default")
    if not path.is_dir():
        raise InputError("not a directory", path=path, field="--evidence",
                         fix="pass the bundle directory (it holds statement*.json), not a file in it")


def load_evidence_dir(bundle_dir: Path | None) -> tuple[Path | None, LoadedEvidence | None]:
    if bundle_dir is None:
        return None, None
    from fasttrack.evidence.loader import load_evidence

    return bundle_dir, load_evidence(bundle_dir)

