"""`fasttrack verify`: build the Context, run every rule, print the Verdict.

Two modes:

- **range** (`--base` given): the change set of `base..head` in a git checkout (`--repo`, default the
  current one), the head tree materialised, the model given or inferred from the changed paths, the
  manifest found in the head inside the model's roots, the blast radius from the head's import graph and the
  evidence next to the manifest.
- **contribution** (no range): a contribution directory (default `kernels/kimi_k3`) whose every file is a
  change landing at `<manifest.contribution.target_path>/<file>` in the engine. When the engine tree is at
  hand (`--engine-tree`, `$FASTTRACK_ENGINE_TREE`, or `<cache>/<engine>-<version>`) the contribution is laid
  over it: files that already exist there count as modified, and the blast radius is computed on the overlay.

The policy never comes from the PR head. Range mode: `--policy`, else `policies/vllm.toml` in the current
checkout, else the copy shipped beside the fasttrack package. Contribution mode: `--policy` (the operator's
explicit choice), else the policy and allowed signers of the trusted revision (`--trusted-ref REV`, default
the merge base of HEAD with the default branch; the installed fasttrack's copies outside a git checkout),
never the working tree being judged; a judged copy that differs is FT401 (`fasttrack.trusted`).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import os
import posixpath
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

import fasttrack
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
    run_git,
)
from fasttrack.changes.model import Change, Hunk
from fasttrack.confinement.source_text import SourceProblem, read_python_source, real_relpath
from fasttrack.confinement.zones import changed_sides, in_model_root, infer_model, models_touched
from fasttrack.context import Context
from fasttrack.errors import EXIT_PASS, EXIT_POLICY_FAILURE, InputError, from_os_error
from fasttrack.evidence.loaded import LoadedEvidence
from fasttrack.findings import Finding, Severity
from fasttrack.manifest import MANIFEST_FILE, Manifest, load_manifest
from fasttrack.policy import MODEL_NAME_RE, MODEL_PLACEHOLDER, Policy, load_policy
from fasttrack.rules import all_rules
from fasttrack.safe_read import NotRegular, hash_regular, read_regular
from fasttrack.sanitize import path_text
from fasttrack.trusted import TrustedJudge, trusted_judge
from fasttrack.verdict import BlastRadius, ChangedFile, ChangeStatus, EvidenceSummary, Verdict, decide

DEFAULT_CONTRIBUTION = Path("kernels/kimi_k3")
DEFAULT_POLICY = Path("policies/vllm.toml")
ENGINE_TREE_ENV = "FASTTRACK_ENGINE_TREE"
TRACE_ENV = "FASTTRACK_TRACE"
MAX_TEXT_BYTES = 4 * 1024 * 1024
MAX_OVERLAYS = 8
_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".git", ".hypothesis"}


@dataclass(frozen=True)
class VerifyOptions:
    """Everything `fasttrack verify` takes; the pure API (`run_verify`) used by tests and the GitHub stage."""

    repo: Path | None = None
    base: str | None = None
    head: str | None = None
    policy: Path | None = None
    model: str | None = None
    contribution: Path | None = None
    evidence: Path | None = None
    format: str = "text"
    output: Path | None = None
    pr: int | None = None
    engine_tree: Path | None = None
    # Contribution mode: the revision the policy and allowed signers are read from (None: the default).
    trusted_ref: str | None = None
    # Run the effect trace (imports the PR's changed model modules in a sandboxed subprocess); None: yes,
    # unless $FASTTRACK_TRACE is "0" (local runs; docs/effect-trace.md).
    trace: bool | None = None
    # Where relative defaults are looked up (the current directory when None).
    cwd: Path | None = field(default=None, compare=False)


# --------------------------------------------------------------------------------------------- loaders


def _root_of(start: Path) -> Path:
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


def _check_model(name: str | None) -> str | None:
    if name is not None and not MODEL_NAME_RE.match(name):
        raise InputError(f"{name!r} is not a model name", field="--model",
                         fix="use the lower-case name of the model package, e.g. kimi_k3")
    return name


def _digest(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def _is_binary(data: bytes) -> bool:
    return b"\0" in data[:8000]


def _all_added(text: str) -> tuple[Hunk, ...]:
    lines = text.splitlines()
    if not lines:
        return ()
    return (Hunk(added=tuple(enumerate(lines, start=1)), new_start=1, new_count=len(lines)),)


def _diff_hunks(old: str, new: str) -> tuple[Hunk, ...]:
    """Hunks (no context) between two texts, as git -U0 would give them."""
    a, b = old.splitlines(), new.splitlines()
    hunks = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        hunks.append(Hunk(removed=tuple((i + 1, a[i]) for i in range(i1, i2)),
                          added=tuple((j + 1, b[j]) for j in range(j1, j2)),
                          old_start=i1 + 1 if i2 > i1 else i1, old_count=i2 - i1,
                          new_start=j1 + 1 if j2 > j1 else j1, new_count=j2 - j1))
    return tuple(hunks)


def _known_models(policy: Policy, tree_files: list[str], changed: list[str]) -> tuple[str, ...]:
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


def _models_of_range(policy: Policy, head_dir: Path, base_files: list[str], head_files: list[str],
                     changed: list[str]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(model units, new models, new directories that are no model): a directory under packages_dir that
    the base already had is a model; a new one only when the head's registry maps an architecture to it."""
    existing = set(_known_models(policy, base_files, []))
    in_head = set(_known_models(policy, head_files, changed))
    mapped = registry_models(policy, head_dir)
    if mapped is None:
        return tuple(sorted(in_head | existing)), (), ()
    new_dirs = in_head - existing
    known = existing | (new_dirs & mapped)
    return tuple(sorted(known)), tuple(sorted(new_dirs & mapped)), tuple(sorted(new_dirs - mapped))


def _check_evidence_option(path: Path | None) -> None:
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


def _evidence(bundle_dir: Path | None) -> tuple[Path | None, LoadedEvidence | None]:
    if bundle_dir is None:
        return None, None
    from fasttrack.evidence.loader import load_evidence

    return bundle_dir, load_evidence(bundle_dir)


# ------------------------------------------------------------------------------------------ range mode


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


def _build_range_context(opts: VerifyOptions, cwd: Path) -> tuple[Context, Callable[[], BlastRadius]]:
    """The range's Context without its blast radius, and the function that computes the radius."""
    if opts.base is None:
        raise InputError("--head needs --base", field="--base", fix="pass --base REV (the PR's merge base)")
    policy_path = resolve_policy_path(opts, _root_of(cwd))
    policy = load_policy(policy_path)
    model_arg = _check_model(opts.model)
    top = check_repo(opts.repo or cwd)
    _check_evidence_option(opts.evidence)
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
    evidence_dir, evidence = _evidence(evidence_dir)

    from fasttrack.confinement.blast_radius import compute_blast_radius

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
    return ctx, lambda: compute_blast_radius(policy, head_dir, changes, model, tree_id=tree_id)


# ----------------------------------------------------------------------------------- contribution mode


def _contribution_files(root: Path, contrib: Path) -> list[Path]:
    """The contribution's files: what git would track (tracked + untracked, not ignored), else a walk."""
    proc = run_git(root, "ls-files", "-z", "-co", "--exclude-standard", "--", str(contrib), check=False)
    if proc.returncode == 0:
        files = {root / os.fsdecode(p) for p in proc.stdout.split(b"\0") if p}
        return sorted(p for p in files if os.path.lexists(p))
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(contrib):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        out.extend(Path(dirpath) / f for f in filenames if not f.endswith((".pyc", ".pyo")))
    return sorted(out)


def _file_change(path: Path, rel: str, engine_file: Path | None) -> Change:
    """One contribution file as a Change (added, or modified when it replaces an engine file)."""
    st = path.lstat()
    if path.is_symlink():
        return Change(status=ChangeStatus.ADDED, path=rel, new_mode="120000",
                      symlink_target=os.readlink(path), added_lines=1, removed_lines=0)
    mode = "100755" if st.st_mode & 0o111 else "100644"
    try:
        data = read_regular(path, MAX_TEXT_BYTES)  # None: too large to be judged as text
    except NotRegular as exc:
        raise InputError(f"a {exc.kind} in the contribution", path=path_text(str(path)), field="DIR",
                         fix="a contribution holds regular files and symlinks only: remove it") from None
    except OSError as exc:
        raise from_os_error(exc, what="contribution file", field="DIR", path=path_text(str(path))) from None
    binary = data is None or _is_binary(data)
    text = "" if data is None or binary else data.decode("utf-8", "replace")
    old = _engine_bytes(engine_file) if engine_file is not None else None
    if engine_file is not None and old is not None:
        old_mode = "100755" if engine_file.stat().st_mode & 0o111 else "100644"
        if binary or _is_binary(old):
            return Change(status=ChangeStatus.MODIFIED, path=rel, old_mode=old_mode, new_mode=mode,
                          binary=True)
        hunks = _diff_hunks(old.decode("utf-8", "replace"), text)
        return Change(status=ChangeStatus.MODIFIED, path=rel, old_mode=old_mode, new_mode=mode, hunks=hunks,
                      added_lines=sum(len(h.added) for h in hunks),
                      removed_lines=sum(len(h.removed) for h in hunks))
    if binary:
        return Change(status=ChangeStatus.ADDED, path=rel, new_mode=mode, binary=True)
    hunks = _all_added(text)
    return Change(status=ChangeStatus.ADDED, path=rel, new_mode=mode, hunks=hunks,
                  added_lines=sum(len(h.added) for h in hunks), removed_lines=0)


def _engine_bytes(path: Path) -> bytes | None:
    """The bytes of an engine file a contribution file replaces (None: absent, not a regular file, or over
    MAX_TEXT_BYTES, which counts as binary)."""
    try:
        data = read_regular(path, MAX_TEXT_BYTES)
    except (OSError, NotRegular):
        return None
    return b"\0" if data is None else data


def _engine_text(path: Path) -> str | None:
    """The text of an engine file a contribution file replaces (None when it is not a readable text file)."""
    data = _engine_bytes(path)
    return None if data is None or _is_binary(data) else data.decode("utf-8", "replace")


def engine_tree_for(policy: Policy, opts: VerifyOptions) -> Path | None:
    """The engine's source tree to lay a contribution over, if one is at hand."""
    if opts.engine_tree is not None:
        if not (opts.engine_tree / policy.blast_radius.root_package).is_dir():
            raise InputError(f"no {policy.blast_radius.root_package}/ package in the engine tree",
                             path=opts.engine_tree, field="--engine-tree",
                             fix="pass the directory that holds the engine's package (e.g. .../vllm-0.33.0)")
        return opts.engine_tree
    env = os.environ.get(ENGINE_TREE_ENV)
    default = cache_root() / f"{policy.engine}-{policy.engine_version}"
    for candidate in ([Path(env)] if env else []) + [default]:
        if (candidate / policy.blast_radius.root_package).is_dir():
            return candidate
    return None


def _overlay(engine: Path, files: dict[str, Path]) -> Path:
    """The engine tree with the contribution's files laid over it, cached by content, built atomically."""
    h = hashlib.sha256(b"overlay/2\0" + os.fsencode(engine.resolve()))
    for engine_path, src in sorted(files.items()):
        h.update(os.fsencode(engine_path) + b"\0")
        if src.is_symlink():
            h.update(b"l" + os.fsencode(os.readlink(src)))
        elif not engine_path.endswith(".py") and os.lstat(src).st_size > MAX_TEXT_BYTES:
            h.update(b"p")  # laid over as an empty placeholder: its bytes do not matter to the overlay
        else:
            h.update(b"f" + hash_regular(src).digest())  # in chunks: a file of any size, bounded memory
        h.update(b"\0")
    root = cache_root() / "overlays"
    dest = root / h.hexdigest()[:40]
    if dest.is_dir():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".overlay-", dir=root))
    try:
        def link(src: str, dst: str) -> None:
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)

        shutil.copytree(engine, tmp / "t", copy_function=link, symlinks=True, dirs_exist_ok=False)
        for engine_path, src in files.items():
            target = tmp / "t" / engine_path
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists() or target.is_symlink():
                target.unlink()  # never write through a hard link into the engine tree
            if src.is_symlink():
                os.symlink(os.readlink(src), target)
            elif engine_path.endswith(".py") or os.lstat(src).st_size <= MAX_TEXT_BYTES:
                shutil.copyfile(src, target, follow_symlinks=False)
            else:
                target.touch()  # a large non-Python file: the analysis reads only its name
        _drop_leaving_links(tmp / "t", [tmp / "t" / p for p, src in files.items() if src.is_symlink()])
        try:
            os.rename(tmp / "t", dest)
        except OSError:
            if not dest.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _prune(root, keep=dest)
    return dest


def _drop_leaving_links(top: Path, links: list[Path]) -> None:
    """Remove every contribution symlink of the overlay that leaves it or ends at anything but a regular file
    or a directory inside it (a device, a FIFO, /proc): the import graph never reads through one, and FT105
    reports the link itself."""
    real_top = os.path.realpath(top)
    for link in links:
        real = os.path.realpath(link)
        inside = real == real_top or real.startswith(real_top + os.sep)
        try:
            ok = inside and (stat.S_ISREG(os.stat(real).st_mode) or stat.S_ISDIR(os.stat(real).st_mode))
        except OSError:
            ok = False
        if not ok:
            link.unlink()


def _prune(root: Path, keep: Path, most: int = MAX_OVERLAYS) -> None:
    """Keep the `most` newest overlays (a contribution under edit makes a new one per version)."""
    done = sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for old in done[most:]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)


def _build_contribution_context(opts: VerifyOptions,
                                cwd: Path) -> tuple[Context, Callable[[], BlastRadius]]:
    """The contribution's Context without its blast radius, and the function that computes the radius."""
    if opts.repo is not None and not opts.repo.is_dir():
        raise InputError("not a directory", path=opts.repo, field="--repo",
                         fix="pass the checkout that holds the contribution")
    root = _root_of(opts.repo.resolve() if opts.repo is not None else cwd)
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
    given = _check_model(opts.model)
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
    for f in _contribution_files(root, contrib):
        rel_in = f.relative_to(contrib).as_posix()
        repo_rel = f"{contrib_rel}/{rel_in}"
        engine_path = f"{target}/{rel_in}"
        engine_paths[repo_rel] = engine_path
        sources[engine_path] = f
        change = _file_change(f, repo_rel, engine / engine_path if engine else None)
        changes.append(change)
        if engine is not None and change.status is ChangeStatus.MODIFIED and not change.binary:
            # The engine's file is this change's base: escapes it already had are not the PR's, and a hook
            # file is judged against it (as `base_texts` holds the base revision's text in range mode).
            old = _engine_text(engine / engine_path)
            if old is not None:
                base_texts[repo_rel] = old
    change_set = tuple(changes)
    engine_side = sorted(engine_paths.values())
    known = tuple(sorted({model, *_known_models(policy, [], engine_side)}))
    packages_dir = engine / policy.models.packages_dir if engine is not None else None
    new_models = (model,) if packages_dir is not None and packages_dir.is_dir() and \
        not (packages_dir / model).is_dir() else ()
    touched = models_touched(policy, engine_side, known)

    _check_evidence_option(opts.evidence)
    if opts.evidence is not None:
        evidence_dir: Path | None = opts.evidence
    else:
        evidence_dir = root / "evidence" / manifest.contribution.name
    evidence_dir, evidence = _evidence(evidence_dir)

    def blast() -> BlastRadius:
        if engine is None:
            return BlastRadius(computed=False, note=(
                f"contribution mode: no {policy.engine} {policy.engine_version} source tree to lay the "
                f"contribution over: fetch it with `python -m fasttrack.engine_tree {policy.engine_version}` "
                f"(it lands in {cache_root() / f'{policy.engine}-{policy.engine_version}'}), or pass "
                f"--engine-tree DIR, or set {ENGINE_TREE_ENV})"))
        from fasttrack.confinement.blast_radius import compute_blast_radius

        overlay = _overlay(engine, sources)
        engine_changes = tuple(Change(status=c.status, path=engine_paths[c.path], old_mode=c.old_mode,
                                      new_mode=c.new_mode, binary=c.binary, symlink_target=c.symlink_target,
                                      hunks=c.hunks, added_lines=c.added_lines, removed_lines=c.removed_lines)
                               for c in change_set)
        return compute_blast_radius(policy, overlay, engine_changes, model)

    ctx = Context(
        policy=policy, policy_path=policy_path, mode="contribution", head_dir=root, changes=change_set,
        model=model, models_touched=tuple(touched), repo=root, manifest=manifest,
        manifest_path=f"{contrib_rel}/{MANIFEST_FILE}", contribution_dir=contrib_rel,
        evidence=evidence, engine_paths=engine_paths, evidence_dir=evidence_dir,
        known_models=known, base_texts=base_texts, judge_source=judge_source, new_models=new_models,
    )
    return ctx, blast


def build_context(opts: VerifyOptions) -> Context:
    """Load every input into the immutable Context the rules read (InputError on bad input)."""
    cwd = (opts.cwd or Path.cwd()).resolve()
    if opts.base is not None or opts.head is not None:
        ctx, blast = _build_range_context(opts, cwd)
    else:
        ctx, blast = _build_contribution_context(opts, cwd)
    if not (opts.trace if opts.trace is not None else os.environ.get(TRACE_ENV, "1") != "0"):
        return dataclasses.replace(ctx, blast_radius=blast())
    from fasttrack.confinement.trace.gather import gather_trace

    # The effect trace runs the PR's code (sandboxed): it is a fact gathered here, before any rule runs. Its
    # subprocess runs while this process builds the import graph (neither reads the other's result: the
    # trace's plan comes from the change set and the head's files, not from the blast radius).
    cancel = threading.Event()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fasttrack-trace")
    trace = pool.submit(gather_trace, ctx, cache_dir=cache_root() / "traces", cancel=cancel)
    pool.shutdown(wait=False)
    try:
        radius = blast()
    except BaseException:
        cancel.set()  # the verdict will not be written: stop the child rather than wait for it
        raise
    return dataclasses.replace(ctx, blast_radius=radius, trace=trace.result())


# ---------------------------------------------------------------------------------------------- verdict

_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def _changed_files(ctx: Context) -> list[ChangedFile]:
    out = []
    for c in ctx.changes:
        zone = ctx.zone_of(c.path)
        engine = ctx.engine_path(c.path)
        out.append(ChangedFile(
            path=c.path, status=c.status, old_path=c.old_path, zone=zone.name, zone_kind=zone.kind.value,
            binary=c.binary, symlink_target=c.symlink_target, submodule=c.is_submodule, old_mode=c.old_mode,
            new_mode=c.new_mode, added_lines=c.added_lines, removed_lines=c.removed_lines,
            engine_path=engine if engine != c.path else None,
        ))
    return out


def _evidence_summary(ctx: Context) -> EvidenceSummary | None:
    """What the evidence rules learned (fasttrack.evidence.summary), for renderers and the dashboard."""
    from fasttrack.evidence.summary import summarize

    try:
        return summarize(ctx)
    except Exception:
        if ctx.evidence_dir is None:
            return None
        return EvidenceSummary(bundle_path=str(ctx.evidence_dir), present=False)


def judge(ctx: Context, *, pr: int | None = None) -> Verdict:
    """Run every rule over the Context and assemble the Verdict (a crashed rule is an error finding)."""
    rules = all_rules()
    findings: list[Finding] = []
    for rule in rules:
        findings.extend(rule.run(ctx))
    findings.sort(key=lambda f: (_RANK[f.severity], f.code, f.path or "", f.line or 0))
    m = ctx.manifest
    return Verdict(
        tool_version=fasttrack.__version__,
        verdict=decide(findings),
        mode=ctx.mode,
        model=ctx.model,
        contribution=m.contribution.name if m else None,
        repo=str(ctx.repo) if ctx.repo else None,
        base=ctx.base,
        head=ctx.head,
        merge_base=ctx.merge_base,
        pr=pr,
        policy=(str(ctx.policy_path) if ctx.judge_source is None
                else f"{ctx.policy_path} (trusted: {ctx.judge_source.source})"),
        policy_digest=_digest(ctx.policy_path),
        changed_files=_changed_files(ctx),
        findings=findings,
        blast_radius=ctx.blast_radius,
        envelope=m.envelope.model_dump(mode="json") if m else None,
        fallback=m.fallback.model_dump(mode="json") if m else None,
        evidence=_evidence_summary(ctx),
        rules_run=[r.code for r in rules],
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )


def run_verify(opts: VerifyOptions) -> Verdict:
    """Build the Context and judge it: the pure API (no printing)."""
    return judge(build_context(opts), pr=opts.pr)


# ------------------------------------------------------------------------------------------ rendering


def _render_text(verdict: Verdict, *, verbose: bool = False) -> str:
    from fasttrack.render.text import render

    return render(verdict, verbose=verbose)


def _render_json(verdict: Verdict) -> str:
    from fasttrack.render.json_out import render

    return render(verdict)


def _render_markdown(verdict: Verdict) -> str:
    from fasttrack.render.markdown import render

    return render(verdict)


def _render_sarif(verdict: Verdict) -> str:
    from fasttrack.render import sarif

    text: str = sarif.render(verdict)
    return text


def renderers() -> dict[str, Callable[[Verdict], str]]:
    """format name -> renderer; `sarif` appears when fasttrack/render/sarif.py exists."""
    table: dict[str, Callable[[Verdict], str]] = {
        "text": _render_text, "json": _render_json, "markdown": _render_markdown,
    }
    if (Path(__file__).resolve().parent.parent / "render" / "sarif.py").is_file():
        table["sarif"] = _render_sarif
    return table


def exit_code(verdict: Verdict) -> int:
    return EXIT_PASS if verdict.verdict == "pass" else EXIT_POLICY_FAILURE


VERIFY_EPILOG = """Examples:

  fasttrack verify                                  the reference contribution (kernels/kimi_k3)

  fasttrack verify kernels/kimi_k3 -f json -o verdict.json

  fasttrack verify --repo ../vllm --base origin/main --head HEAD -f markdown

Exit codes: 0 pass, 1 policy failure (a finding is an error), 2 bad input or an unusable path, \
3 a bug in fasttrack (run with --debug for the traceback)."""


def write_report(output: Path, text: str) -> None:
    """Write a rendered report; an unusable --output (a directory, a full device, no permission) is bad
    input, and text that cannot be encoded (a lone surrogate) is escaped, never an error."""
    from fasttrack.render.encoding import encodable

    try:
        with open(output, "w", encoding="utf-8", newline="") as fh:
            fh.write(encodable(text))
    except OSError as exc:
        raise from_os_error(exc, what="output file", field="--output", path=output) from None


def verify_command(
    directory: Annotated[Path | None, typer.Argument(
        metavar="[DIR]", show_default=False,
        help="Contribution directory (holds fasttrack.toml; default kernels/kimi_k3).")] = None,
    repo: Annotated[Path | None, typer.Option("--repo", help="A git checkout (a path).")] = None,
    base: Annotated[str | None, typer.Option(
        "--base", help="Base commit (the PR's target branch); selects range mode. The diff is taken from "
                       "the merge base of --base and --head.")] = None,
    head: Annotated[str | None, typer.Option(
        "--head", help=f"Head commit (default HEAD; {WORKTREE} for the working tree).")] = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", help="Policy TOML (default policies/vllm.toml).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Target model (default: inferred).")] = None,
    contribution: Annotated[Path | None, typer.Option(
        "--contribution", help="Contribution directory (the same as DIR).")] = None,
    evidence: Annotated[Path | None, typer.Option("--evidence", help="Evidence bundle directory.")] = None,
    engine_tree: Annotated[Path | None, typer.Option(
        "--engine-tree", help="Engine source tree for contribution mode's blast radius.")] = None,
    fmt: Annotated[str, typer.Option("-f", "--format", help="text | json | markdown | sarif.")] = "text",
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Write the report here instead of stdout.")] = None,
    pr: Annotated[int | None, typer.Option("--pr", help="PR number, recorded in the verdict.")] = None,
    trusted_ref: Annotated[str | None, typer.Option(
        "--trusted-ref", help="Contribution mode: read the policy and allowed signers from this revision "
                              "(default: the merge base of HEAD with the default branch).")] = None,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Print only the one-line verdict.")] = False,
    verbose: Annotated[bool, typer.Option(
        "-v", "--verbose", help="Text: every changed file and where it lands, every fix line.")] = False,
    trace: Annotated[bool | None, typer.Option(
        "--trace/--no-trace", help=f"Run the effect trace (default: yes, unless ${TRACE_ENV}=0).")] = None,
) -> None:
    """Verify a contribution directory (default kernels/kimi_k3) or a PR given as a git range."""
    table = renderers()
    if fmt not in table:
        raise InputError(f"unknown format {fmt!r}", field="--format", fix=f"use one of {', '.join(table)}")
    if directory is not None and contribution is not None and directory != contribution:
        raise InputError("DIR and --contribution name different directories", field="--contribution",
                         fix="pass the contribution once")
    if (directory or contribution) is not None and (base is not None or head is not None):
        raise InputError("a contribution directory and a git range were both given", field="DIR",
                         fix="pass DIR (contribution mode) or --base/--head (range mode), not both")
    if output is not None and not output.parent.is_dir():
        raise InputError("the output directory does not exist", path=output.parent, field="--output",
                         fix="create the directory first")
    if output is not None and output.is_dir():
        raise InputError("is a directory", path=output, field="--output",
                         fix="pass a file path (e.g. verdict.json), not a directory")
    if output is not None and evidence is not None:
        refuse_output_in_evidence(output, [evidence])
    opts = VerifyOptions(repo=repo, base=base, head=head, policy=policy, model=model,
                         contribution=directory or contribution, evidence=evidence, format=fmt, output=output,
                         pr=pr, engine_tree=engine_tree, trusted_ref=trusted_ref, trace=trace)
    from fasttrack.render.encoding import safe_verdict
    from fasttrack.render.headline import headline

    verdict = safe_verdict(run_verify(opts))  # renderable whatever file names it quotes

    if output is not None:
        refuse_output_in_evidence(output, evidence_dirs(verdict))
        text = table[fmt](verdict) if fmt != "text" else _render_text(verdict, verbose=verbose)
        write_report(output, text)
        if not quiet:
            typer.echo(encodable_line(f"{headline(verdict)} (report: {output})"))
    elif quiet:
        typer.echo(headline(verdict))
    elif fmt == "text":
        from rich.console import Console

        from fasttrack.render.text import print_verdict

        print_verdict(verdict, Console(highlight=False, soft_wrap=True), verbose=verbose)
    else:
        typer.echo(stdout_document(table[fmt](verdict), fmt), nl=False)
    raise typer.Exit(exit_code(verdict))


def evidence_dirs(verdict: Verdict) -> list[Path]:
    """The evidence bundle the verdict judged, as a path (its `bundle_path` is relative to the repo)."""
    ev = verdict.evidence
    if ev is None or not ev.bundle_path:
        return []
    p = Path(ev.bundle_path)
    return [p if p.is_absolute() or not verdict.repo else Path(verdict.repo) / p]


def refuse_output_in_evidence(output: Path, dirs: list[Path]) -> None:
    """`--output` may not land inside an evidence bundle (through a symlink neither): writing the verdict
    there would overwrite or add to the signed evidence it judges."""
    try:
        target = output.resolve()
    except OSError:
        return  # write_report names the problem
    for d in dirs:
        try:
            bundle = d.resolve()
        except OSError:
            continue
        if target == bundle or bundle in target.parents:
            raise InputError("is inside the evidence bundle the verdict judges", path=output,
                             field="--output",
                             fix=f"write the verdict outside {d} (it holds only collected, signed evidence)")


def stdout_document(text: str, fmt: str) -> str:
    """A rendered report as printed to stdout: encodable, and unable to start a workflow command in the
    Actions log that parses it (`fasttrack.sanitize.inert_document`, meaning kept)."""
    from fasttrack.render.encoding import encodable
    from fasttrack.sanitize import inert_document

    return encodable(inert_document(text, fmt))


def encodable_line(text: str) -> str:
    from fasttrack.render.encoding import encodable

    return encodable(text)
