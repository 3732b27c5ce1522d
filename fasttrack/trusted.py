"""Where the judge comes from in contribution mode: a trusted revision, never the working tree being judged.

The policy and the allowed-signers file that `fasttrack verify` applies to a contribution are read from
the trusted revision (`--trusted-ref REV`; by default the merge base of HEAD with the default branch:
`origin/HEAD`'s target, else `main`, else `master`) with `git cat-file blob` (raw bytes: no textconv, no
filters, no replace objects), and written to a private cache directory laid out like the repository, so the
signers path the policy names resolves beside the trusted policy. When the checkout is not a git repository
(or no default branch shares history with HEAD: HEAD alone is the tree being judged, never trusted by
default; or the trusted revision has no policy), the copies shipped with the installed fasttrack are used,
unless that installation lies inside the tree being judged.

Every judge file whose judged-tree copy differs from the trusted copy (the policy, the allowed signers, every
file under `baselines/`) is a `JudgeDifference`; FT401 reports each one. On the default branch itself the
merge base is HEAD, so the trusted and the judged copies are the same commit and only uncommitted edits
differ.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import fasttrack
from fasttrack.cache import cache_root
from fasttrack.changes.git import run_git
from fasttrack.errors import InputError
from fasttrack.evidence.digest import pyc_problem

POLICY_REL = "policies/vllm.toml"
BASELINES_REL = "baselines"
MAX_JUDGE_FILE_BYTES = 4 * 1024 * 1024
MAX_BASELINE_FILES = 2000
_GIT_ENV = {"GIT_NO_REPLACE_OBJECTS": "1", "GIT_CONFIG_NOSYSTEM": "1", "GIT_ATTR_NOSYSTEM": "1"}
_DEFAULT_BRANCHES = ("main", "master")


@dataclass(frozen=True)
class JudgeDifference:
    """A judge file of the judged checkout that is not the trusted copy."""

    path: str  # repository-relative
    how: str  # "modified", "added", "deleted", "a symlink", ...


@dataclass(frozen=True)
class TrustedJudge:
    """The judge a contribution is verified with, and how the judged checkout's copy departs from it."""

    source: str  # for people: "main@1a2b3c4d5e6f (merge base of HEAD with main)" or "the installed fasttrack"
    commit: str | None  # the trusted commit (None: the installed package's copies)
    policy_path: Path  # the trusted policy, materialised
    differences: tuple[JudgeDifference, ...] = ()


def _git(repo: Path, *args: str) -> tuple[int, bytes]:
    proc = run_git(repo, *args, env=_GIT_ENV, check=False)
    return proc.returncode, proc.stdout


def is_git_checkout(path: Path) -> bool:
    code, out = _git(path, "rev-parse", "--is-inside-work-tree")
    return code == 0 and out.strip() == b"true"


def default_branch(repo: Path) -> str | None:
    """The default branch's ref: `origin/HEAD`'s target, else a local or origin `main`/`master`."""
    code, out = _git(repo, "symbolic-ref", "--quiet", "refs/remotes/origin/HEAD")
    if code == 0 and out.strip():
        return os.fsdecode(out.strip())
    for name in _DEFAULT_BRANCHES:
        for ref in (f"refs/heads/{name}", f"refs/remotes/origin/{name}"):
            if _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")[0] == 0:
                return ref
    return None


def commit_of(repo: Path, rev: str) -> str | None:
    if not rev or rev.startswith("-") or any(c in rev for c in "\0\n"):
        return None
    code, out = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    return os.fsdecode(out.strip()) if code == 0 and out.strip() else None


def merge_base_with_default(repo: Path) -> tuple[str, str] | None:
    """(commit, description) of the merge base of HEAD with the default branch; None when there is no
    default branch, no merge base with it, no commit, or no git checkout."""
    if commit_of(repo, "HEAD") is None:
        return None
    branch = default_branch(repo)
    if branch is None:
        return None
    code, out = _git(repo, "merge-base", "HEAD", branch)
    short = branch.removeprefix("refs/heads/").removeprefix("refs/remotes/")
    if code != 0 or not out.strip():
        return None
    return os.fsdecode(out.strip()), f"merge base of HEAD with {short}"


def _blob(repo: Path, commit: str, path: str) -> tuple[str, bytes] | None:
    """(mode, bytes) of `path` at `commit` (a symlink's bytes are its target); None when absent."""
    code, out = _git(repo, "ls-tree", "-z", commit, "--", path)
    if code != 0 or not out:
        return None
    meta, _, _name = out.split(b"\0")[0].partition(b"\t")
    mode, kind, oid = os.fsdecode(meta).split(" ")
    if kind != "blob":
        return None
    code, data = _git(repo, "cat-file", "blob", oid)
    if code != 0 or len(data) > MAX_JUDGE_FILE_BYTES:
        raise InputError(f"cannot read {path} at the trusted revision {commit[:12]}", path=repo,
                         field="--trusted-ref")
    return mode, data


def _tree_files(repo: Path, commit: str, prefix: str) -> dict[str, tuple[str, bytes]]:
    code, out = _git(repo, "ls-tree", "-r", "-z", commit, "--", prefix + "/")
    files: dict[str, tuple[str, bytes]] = {}
    if code != 0:
        return files
    for record in out.split(b"\0")[:MAX_BASELINE_FILES]:
        if not record:
            continue
        meta, _, name = record.partition(b"\t")
        mode, kind, oid = os.fsdecode(meta).split(" ")
        if kind != "blob":
            continue
        code, data = _git(repo, "cat-file", "blob", oid)
        if code == 0:
            files[os.fsdecode(name)] = (mode, data)
    return files


def _materialise(files: dict[str, bytes]) -> Path:
    """Write `files` ({repo path: bytes}) to a cache directory keyed by their content; return it."""
    h = hashlib.sha256()
    for rel, data in sorted(files.items()):
        h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    root = cache_root() / "trusted"
    dest = root / h.hexdigest()[:40]
    if dest.is_dir():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".trusted-", dir=root))
    for rel, data in files.items():
        target = tmp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    with contextlib.suppress(OSError):  # another run made it first
        tmp.rename(dest)
    return dest if dest.is_dir() else tmp


def _safe(rel: str) -> bool:
    p = PurePosixPath(rel)
    return bool(rel) and not p.is_absolute() and ".." not in p.parts and "\\" not in rel


def _signers_rel(policy_bytes: bytes) -> str | None:
    """The allowed-signers path the policy names (repository-relative), read without validating all of it."""
    import tomllib

    try:
        data = tomllib.loads(policy_bytes.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    evidence = data.get("evidence")
    rel = evidence.get("allowed_signers") if isinstance(evidence, dict) else None
    return rel.lstrip("/") if isinstance(rel, str) and _safe(rel.lstrip("/")) else None


def _judged_difference(root: Path, rel: str, trusted: tuple[str, bytes] | None) -> JudgeDifference | None:
    """How the judged checkout's `rel` differs from the trusted copy (None when it is the same)."""
    path = root / rel
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return JudgeDifference(rel, "deleted") if trusted is not None else None
    except OSError as exc:
        return JudgeDifference(rel, f"unreadable ({exc.strerror})")
    if trusted is None:
        return JudgeDifference(rel, "added")
    mode, want = trusted
    if stat.S_ISLNK(st.st_mode):
        same = mode == "120000" and os.fsencode(os.readlink(path)) == want
        return None if same else JudgeDifference(rel, "a symlink in the judged checkout")
    if not stat.S_ISREG(st.st_mode) or mode == "120000":
        return JudgeDifference(rel, "not a regular file on one side")
    if st.st_size != len(want) or path.read_bytes() != want:
        return JudgeDifference(rel, "modified")
    return None


def _baseline_differences(root: Path, trusted: dict[str, tuple[str, bytes]]) -> list[JudgeDifference]:
    judged: set[str] = set()
    base = root / BASELINES_REL
    if base.is_dir() and not base.is_symlink():
        for dirpath, dirnames, filenames in os.walk(base):  # symlinked directories are listed, not entered
            links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
            dirnames[:] = sorted(d for d in dirnames if d not in links)
            for name in (*filenames, *links):
                judged.add((Path(dirpath) / name).relative_to(root).as_posix())
    elif os.path.lexists(base):
        return [JudgeDifference(BASELINES_REL, "not a directory in the judged checkout")]
    out = []
    for rel in sorted(judged | trusted.keys()):
        if "/__pycache__/" in f"/{rel}" and rel not in trusted and rel.endswith(".pyc"):
            problem = pyc_problem(root / rel, (root / rel).parent.parent)
            if problem is not None:
                out.append(JudgeDifference(rel, problem))
            continue  # otherwise a faithful (or never loaded) cache of a baseline source
        diff = _judged_difference(root, rel, trusted.get(rel))
        if diff is not None:
            out.append(diff)
    return out


def installed_root() -> Path:
    """The directory holding the installed fasttrack package (its policies/ lie beside it)."""
    return Path(fasttrack.__file__).resolve().parent.parent


def _from_installed(root: Path, why: str) -> TrustedJudge:
    inst = installed_root()
    policy = inst / POLICY_REL
    if not policy.is_file():
        raise InputError("no trusted policy: the installed fasttrack ships none", path=policy,
                         field="--trusted-ref", fix="pass --trusted-ref REV (a commit holding "
                                                     f"{POLICY_REL}) or --policy FILE")
    if inst == root.resolve() or root.resolve() in inst.parents:
        raise InputError(f"no trusted policy: {why}, and the installed fasttrack lies inside the tree being "
                         "judged", path=root, field="--trusted-ref",
                         fix="pass --trusted-ref REV (e.g. main) or --policy FILE from a trusted place")
    return TrustedJudge(source=f"the installed fasttrack ({inst})", commit=None, policy_path=policy)


def trusted_judge(root: Path, trusted_ref: str | None = None) -> TrustedJudge:
    """The trusted policy and allowed signers for judging the checkout at `root` (see the module doc)."""
    root = root.resolve()
    if not is_git_checkout(root):
        if trusted_ref is not None:
            raise InputError("--trusted-ref needs a git checkout", path=root, field="--trusted-ref",
                             fix="drop --trusted-ref or run verify inside the repository")
        return _from_installed(root, "the checkout is not a git repository")
    if trusted_ref is not None:
        commit = commit_of(root, trusted_ref)
        if commit is None:
            raise InputError(f"the trusted revision {trusted_ref!r} is not a commit here", path=root,
                             field="--trusted-ref", fix="fetch it first, or pass an existing commit")
        source = f"{trusted_ref}@{commit[:12]} (--trusted-ref)"
    else:
        found = merge_base_with_default(root)
        if found is None:  # HEAD itself would be the tree being judged: never trusted by default
            return _from_installed(root, "no default branch (origin/HEAD, main, master) shares history with "
                                         "HEAD")
        commit, how = found
        source = f"{commit[:12]} ({how})"
    policy = _blob(root, commit, POLICY_REL)
    if policy is None or policy[0] == "120000":
        if trusted_ref is not None:
            raise InputError(f"the trusted revision {trusted_ref!r} has no {POLICY_REL}", path=root,
                             field="--trusted-ref", fix="pass a revision of the repository that holds it")
        return _from_installed(root, f"{source} has no {POLICY_REL}")
    files = {POLICY_REL: policy[1]}
    differences: list[JudgeDifference] = []
    diff = _judged_difference(root, POLICY_REL, policy)
    if diff is not None:
        differences.append(diff)
    signers_rel = _signers_rel(policy[1])
    if signers_rel is not None:
        signers = _blob(root, commit, signers_rel)
        if signers is not None and signers[0] != "120000":
            files[signers_rel] = signers[1]
        diff = _judged_difference(root, signers_rel, signers)
        if diff is not None:
            differences.append(diff)
    differences.extend(_baseline_differences(root, _tree_files(root, commit, BASELINES_REL)))
    where = _materialise(files)
    return TrustedJudge(source=source, commit=commit, policy_path=where / POLICY_REL,
                        differences=tuple(differences))
