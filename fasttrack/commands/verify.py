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

The policy never comes from the PR head: `--policy`, else `policies/vllm.toml` in the current checkout, else
the copy shipped beside the fasttrack package.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import os
import posixpath
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

import fasttrack
from fasttrack.cache import cache_root
from fasttrack.changes.git import (
    WORKTREE,
    Revision,
    check_repo,
    diff_trees,
    list_tree_files,
    materialize_revision,
    read_blob,
    resolve_revision,
    run_git,
)
from fasttrack.changes.model import Change, Hunk
from fasttrack.confinement.zones import changed_sides, in_model_root, infer_model, models_touched
from fasttrack.context import Context
from fasttrack.errors import EXIT_PASS, EXIT_POLICY_FAILURE, InputError
from fasttrack.evidence.loaded import LoadedEvidence
from fasttrack.findings import Finding, Severity
from fasttrack.manifest import MANIFEST_FILE, Manifest, load_manifest
from fasttrack.policy import MODEL_NAME_RE, Policy, load_policy
from fasttrack.rules import all_rules
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


def _build_range_context(opts: VerifyOptions, cwd: Path) -> Context:
    if opts.base is None:
        raise InputError("--head needs --base", field="--base", fix="pass --base REV (the PR's merge base)")
    policy_path = resolve_policy_path(opts, _root_of(cwd))
    policy = load_policy(policy_path)
    model_arg = _check_model(opts.model)
    top = check_repo(opts.repo or cwd)
    base = resolve_revision(top, opts.base, "--base")
    head = resolve_revision(top, opts.head or "HEAD", "--head")

    changes = diff_trees(top, base.tree, head.tree)
    head_dir = materialize_revision(top, head, reuse_checkout=True)  # the checkout itself when it is the head
    tree_files = list_tree_files(top, head.tree)
    changed = sorted({p for c in changes for p, _ in changed_sides(c)})  # a copy's source is unchanged
    known = _known_models(policy, tree_files, changed)
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
            raw = read_blob(top, base.tree, c.old_path or c.path)
            if raw is not None and len(raw) <= MAX_TEXT_BYTES:
                base_texts[c.path] = raw.decode("utf-8", "replace")

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
    blast = compute_blast_radius(policy, head_dir, changes, model, tree_id=tree_id)
    return Context(
        policy=policy, policy_path=policy_path, mode="range", head_dir=head_dir, changes=changes, model=model,
        models_touched=tuple(touched), repo=top, base=base.oid, head=head.oid, manifest=manifest,
        manifest_path=manifest_path, contribution_dir=contribution_dir, blast_radius=blast,
        evidence=evidence, manifest_candidates=tuple(candidates), evidence_dir=evidence_dir,
        known_models=known, base_texts=base_texts,
    )


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
    data = path.read_bytes() if st.st_size <= MAX_TEXT_BYTES else b""
    binary = _is_binary(data)
    text = "" if binary else data.decode("utf-8", "replace")
    if engine_file is not None and engine_file.is_file() and not engine_file.is_symlink():
        old = engine_file.read_bytes()
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


def _engine_text(path: Path) -> str | None:
    """The text of an engine file a contribution file replaces (None when it is not a readable text file)."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_TEXT_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    return None if _is_binary(data) else data.decode("utf-8", "replace")


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
    h = hashlib.sha256(str(engine.resolve()).encode())
    for engine_path, src in sorted(files.items()):
        h.update(engine_path.encode() + b"\0")
        h.update(os.readlink(src).encode() if src.is_symlink() else src.read_bytes())
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
            else:
                shutil.copyfile(src, target)
        try:
            os.rename(tmp / "t", dest)
        except OSError:
            if not dest.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _prune(root, keep=dest)
    return dest


def _prune(root: Path, keep: Path, most: int = MAX_OVERLAYS) -> None:
    """Keep the `most` newest overlays (a contribution under edit makes a new one per version)."""
    done = sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for old in done[most:]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)


def _build_contribution_context(opts: VerifyOptions, cwd: Path) -> Context:
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
    policy_path = resolve_policy_path(opts, root)
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
    touched = models_touched(policy, engine_side, known)

    if opts.evidence is not None:
        evidence_dir: Path | None = opts.evidence
    else:
        evidence_dir = root / "evidence" / manifest.contribution.name
    evidence_dir, evidence = _evidence(evidence_dir)

    if engine is None:
        blast = BlastRadius(computed=False, note=(
            f"contribution mode: no {policy.engine} {policy.engine_version} source tree to lay the "
            f"contribution over: fetch it with `python -m fasttrack.engine_tree {policy.engine_version}` "
            f"(it lands in {cache_root() / f'{policy.engine}-{policy.engine_version}'}), or pass "
            f"--engine-tree DIR, or set {ENGINE_TREE_ENV})"))
    else:
        from fasttrack.confinement.blast_radius import compute_blast_radius

        overlay = _overlay(engine, sources)
        engine_changes = tuple(Change(status=c.status, path=engine_paths[c.path], old_mode=c.old_mode,
                                      new_mode=c.new_mode, binary=c.binary, symlink_target=c.symlink_target,
                                      hunks=c.hunks, added_lines=c.added_lines, removed_lines=c.removed_lines)
                               for c in change_set)
        blast = compute_blast_radius(policy, overlay, engine_changes, model)

    return Context(
        policy=policy, policy_path=policy_path, mode="contribution", head_dir=root, changes=change_set,
        model=model, models_touched=tuple(touched), repo=root, manifest=manifest,
        manifest_path=f"{contrib_rel}/{MANIFEST_FILE}", contribution_dir=contrib_rel, blast_radius=blast,
        evidence=evidence, engine_paths=engine_paths, evidence_dir=evidence_dir,
        known_models=known, base_texts=base_texts,
    )


def build_context(opts: VerifyOptions) -> Context:
    """Load every input into the immutable Context the rules read (InputError on bad input)."""
    cwd = (opts.cwd or Path.cwd()).resolve()
    if opts.base is not None or opts.head is not None:
        ctx = _build_range_context(opts, cwd)
    else:
        ctx = _build_contribution_context(opts, cwd)
    if not (opts.trace if opts.trace is not None else os.environ.get(TRACE_ENV, "1") != "0"):
        return ctx
    from fasttrack.confinement.trace.gather import gather_trace

    # The effect trace runs the PR's code (sandboxed): it is a fact gathered here, before any rule runs.
    return dataclasses.replace(ctx, trace=gather_trace(ctx))


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
        pr=pr,
        policy=str(ctx.policy_path),
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


def _render_text(verdict: Verdict) -> str:
    from fasttrack.render.text import render

    return render(verdict)


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


def verify_command(
    repo: Annotated[Path | None, typer.Option("--repo", help="A git checkout of the engine.")] = None,
    base: Annotated[str | None, typer.Option(
        "--base", help="Base revision (the PR's merge base); selects range mode.")] = None,
    head: Annotated[str | None, typer.Option(
        "--head", help=f"Head revision (default HEAD; {WORKTREE} for the working tree).")] = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", help="Policy TOML (default policies/vllm.toml).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Target model (default: inferred).")] = None,
    contribution: Annotated[Path | None, typer.Option(
        "--contribution", help="Contribution directory (default kernels/kimi_k3).")] = None,
    evidence: Annotated[Path | None, typer.Option("--evidence", help="Evidence bundle directory.")] = None,
    engine_tree: Annotated[Path | None, typer.Option(
        "--engine-tree", help="Engine source tree for contribution mode's blast radius.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="text | json | markdown | sarif.")] = "text",
    output: Annotated[Path | None, typer.Option(
        "--output", help="Write the report here instead of stdout.")] = None,
    pr: Annotated[int | None, typer.Option("--pr", help="PR number, recorded in the verdict.")] = None,
    trace: Annotated[bool | None, typer.Option(
        "--trace/--no-trace", help=f"Run the effect trace (default: yes, unless ${TRACE_ENV}=0).")] = None,
) -> None:
    """Verify a contribution (default: the reference contribution) or a PR given as a git range."""
    table = renderers()
    if fmt not in table:
        raise InputError(f"unknown format {fmt!r}", field="--format", fix=f"use one of {', '.join(table)}")
    if output is not None and not output.parent.is_dir():
        raise InputError("the output directory does not exist", path=output.parent, field="--output",
                         fix="create the directory first")
    opts = VerifyOptions(repo=repo, base=base, head=head, policy=policy, model=model,
                         contribution=contribution, evidence=evidence, format=fmt, output=output, pr=pr,
                         engine_tree=engine_tree, trace=trace)
    verdict = run_verify(opts)
    if output is not None:
        output.write_text(table[fmt](verdict), encoding="utf-8")
        from fasttrack.render.text import headline

        typer.echo(f"{headline(verdict)} (report: {output})")
    elif fmt == "text":
        from rich.console import Console

        from fasttrack.render.text import print_verdict

        print_verdict(verdict, Console(highlight=False, soft_wrap=True))
    else:
        typer.echo(table[fmt](verdict), nl=False)
    raise typer.Exit(exit_code(verdict))
