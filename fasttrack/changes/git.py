"""The change set between two revisions of a git checkout, from git's plumbing (subprocess, no GitPython).

One `git diff-tree` run over the pair of trees with three outputs, joined by path:

- `--raw -z` for the structure (status, both modes, both object ids, both sides of renames and copies);
- `--numstat -z` for line counts and binary detection (`-` counts);
- `-p -U0` for the hunks of text files, with line numbers (the hook checks need them).

Renames and copies are detected with `-M -C --find-copies-harder`, so a file copied out of shared code is
visible as a copy of it. `diff-tree` is plumbing: the user's diff configuration (external diff drivers,
prefixes, colour) does not change what is parsed here.

No file in a PR and no repository setting changes how fasttrack's git sees the PR: every git command starts
in `_spawn_git` (attributes file, fsmonitor, hooks, external diff and conversions off; `$GIT_CONFIG_*`,
`$GIT_EXTERNAL_DIFF`, replace refs and the system attributes file ignored), and the commands that consult
attributes (`diff-tree`, the `add` behind `WORKTREE`, `checkout-index`) run in a scratch repository that
borrows the objects, whose own info/attributes outrank every `.gitattributes` (`!diff`: binary is decided by
content) and where the repository's info/attributes and config are never read.

`materialize_tree` writes a tree's files to `<cache>/trees/<tree-sha>/` with git's own checkout code
(`read-tree` into a temporary index of a scratch repository that borrows the objects, then
`checkout-index -a`; not `git archive`, so no export-ignore attribute can hide a file, and the scratch
repository's attributes switch off every conversion and filter a PR's `.gitattributes` could ask for),
atomically, and reuses the directory when it is already there. The working tree is the revision `WORKTREE`:
its files (tracked and untracked, not ignored) are written to a tree object through a temporary index, and
the checkout itself is the head directory.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fasttrack.cache import cache_root as cache_root  # re-exported for older callers
from fasttrack.changes.model import Change, Hunk
from fasttrack.domain import ChangeStatus
from fasttrack.errors import InputError

WORKTREE = "WORKTREE"
NULL_MODE = "000000"
SYMLINK_MODE = "120000"
GITLINK_MODE = "160000"
EXEC_MODE = "100755"
MAX_SYMLINK_TARGET = 4096

_DIFF_FLAGS = ("-r", "-M", "-C", "--find-copies-harder", "--no-commit-id", "--no-ext-diff", "--no-textconv")
_HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_STATUS = {
    "A": ChangeStatus.ADDED,
    "D": ChangeStatus.DELETED,
    "M": ChangeStatus.MODIFIED,
    "T": ChangeStatus.TYPE_CHANGED,
    "R": ChangeStatus.RENAMED,
    "C": ChangeStatus.COPIED,
}


# Settings for every git command fasttrack runs, on top of whatever configuration git reads: attributes from
# the user's global file off (the PR's own .gitattributes and the repository's info/attributes are out of
# play because every command that consults attributes runs in a scratch repository, below), no fsmonitor
# daemon or hook, no hooks, no external diff driver, no conversions on `add`.
_HARDENING = ("-c", f"core.attributesFile={os.devnull}", "-c", "core.fsmonitor=false",
              "-c", f"core.hooksPath={os.devnull}", "-c", "diff.external=", "-c", "core.untrackedCache=false",
              "-c", "core.autocrlf=false", "-c", "core.safecrlf=false", "-c", "core.splitIndex=false")
# Environment that would point git elsewhere, add configuration or run a program: never inherited.
_SCRUBBED_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
                 "GIT_NAMESPACE", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
                 "GIT_ATTR_SOURCE", "GIT_CEILING_DIRECTORIES", "GIT_EXTERNAL_DIFF", "GIT_DIFF_OPTS",
                 "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_REPLACE_REF_BASE", "GIT_SHALLOW_FILE",
                 "GIT_GRAFT_FILE", "GIT_ASKPASS", "GIT_EDITOR", "GIT_PAGER", "GIT_SSH", "GIT_SSH_COMMAND",
                 "GIT_TRACE", "GIT_TRACE2", "GIT_TRACE2_EVENT", "GIT_TRACE2_PERF")


def _git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in _SCRUBBED_ENV and not k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_OPTIONAL_LOCKS"] = "0"  # never refresh the user's index as a side effect of reading
    env["GIT_ATTR_NOSYSTEM"] = "1"  # no /etc/gitattributes
    env["GIT_NO_REPLACE_OBJECTS"] = "1"  # refs/replace/ cannot swap the objects a revision names
    if extra:
        env.update(extra)
    return env


def _spawn_git(args: Sequence[str], *, cwd: Path | None = None, stdin: bytes | None = None,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """The one place fasttrack starts git: `_HARDENING` on every command, the environment scrubbed."""
    try:
        return subprocess.run(["git", *_HARDENING, *args], input=stdin, capture_output=True, cwd=cwd,
                              env=_git_env(env), check=False)
    except FileNotFoundError:
        raise InputError("git is not installed or not on PATH", fix="install git (2.28 or newer)") from None


def run_git(repo: Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None,
            check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """Run git in `repo`; a missing git becomes an InputError, a failing command a RuntimeError (if check)."""
    proc = _spawn_git(["-C", str(repo), *args], stdin=stdin, env=env)
    if check and proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise RuntimeError(f"git {' '.join(args[:3])} failed in {repo}: {err}")
    return proc


def _decode(raw: bytes) -> str:
    return os.fsdecode(raw)


# --------------------------------------------------------------------------- revisions


@dataclass(frozen=True)
class Revision:
    """A revision as given (`name`), the object it names (`oid`: commit or tree) and its tree."""

    name: str
    oid: str
    tree: str


def check_repo(repo: Path, option: str = "--repo") -> Path:
    """The repository's top level (the repo itself when bare); InputError when `repo` is not a git repo."""
    if not repo.exists():
        raise InputError("repository path does not exist", path=repo, field=option,
                         fix="pass the path of a git checkout")
    if not repo.is_dir():
        raise InputError("repository path is not a directory", path=repo, field=option,
                         fix="pass the path of a git checkout")
    proc = run_git(repo, "rev-parse", "--is-bare-repository", "--show-toplevel", check=False)
    if proc.returncode != 0:
        raise InputError("not a git repository", path=repo, field=option,
                         fix="pass the root of a git checkout (a clone of the engine)")
    lines = _decode(proc.stdout).splitlines()
    if lines and lines[0] == "true":
        return repo.resolve()
    return Path(lines[1]) if len(lines) > 1 else repo.resolve()


def resolve_revision(repo: Path, rev: str, option: str) -> Revision:
    """Resolve `rev` (commit, tag, branch, tree or `WORKTREE`); InputError naming `option` if it is absent."""
    if rev == WORKTREE:
        wt = worktree_tree(repo)
        return Revision(name=rev, oid=wt, tree=wt)
    if not rev or rev.startswith("-") or any(c in rev for c in "\0\n"):
        raise InputError(f"{rev!r} is not a revision", field=option, fix="pass a commit, branch, tag or sha")
    oid = run_git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{object}}", check=False)
    tree = run_git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{tree}}", check=False)
    if oid.returncode != 0 or tree.returncode != 0:
        raise InputError(f"revision {rev!r} does not exist in {repo}", field=option,
                         fix=f"fetch it first (e.g. `git fetch origin {rev}`; in CI check out with "
                             "fetch-depth 0) or pass an existing commit")
    return Revision(name=rev, oid=_decode(oid.stdout).strip(), tree=_decode(tree.stdout).strip())


def resolve_commit(repo: Path, rev: str, option: str) -> Revision:
    """`resolve_revision` for a revision that must name a commit (`rev^{commit}`: a tag is peeled to its
    commit; a tree or a blob is refused). `WORKTREE` is allowed: the working tree."""
    if rev == WORKTREE or not rev or rev.startswith("-") or any(c in rev for c in "\0\n"):
        return resolve_revision(repo, rev, option)
    fast = _commit_and_tree(repo, rev)
    if fast is not None:
        return Revision(name=rev, oid=fast[0], tree=fast[1])
    proc = run_git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if proc.returncode != 0:
        obj = run_git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{object}}", check=False)
        if obj.returncode != 0:
            return resolve_revision(repo, rev, option)  # raises: it does not exist
        oid = _decode(obj.stdout).strip()
        kind = _decode(run_git(repo, "cat-file", "-t", oid, check=False).stdout).strip() or "object"
        raise InputError(f"{rev!r} names a {kind}, not a commit", field=option,
                         fix="pass a commit (a sha, branch or tag of the PR)")
    resolved = resolve_revision(repo, rev, option)
    return Revision(name=rev, oid=_decode(proc.stdout).strip(), tree=resolved.tree)


_OID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


def _commit_and_tree(repo: Path, rev: str) -> tuple[str, str] | None:
    """`rev^{commit}` and `rev^{tree}` from one `rev-parse` (the three `--verify` runs of the path below each
    cost a git start): only when it prints exactly two object ids of one length and nothing else, else None
    (a name that is no commit, a range such as `a..b`, anything odd), and the careful path decides and
    words the error."""
    proc = run_git(repo, "rev-parse", f"{rev}^{{commit}}", f"{rev}^{{tree}}", check=False)
    if proc.returncode != 0:
        return None
    lines = _decode(proc.stdout).split("\n")
    if len(lines) != 3 or lines[2] != "" or not all(_OID.match(x) for x in lines[:2]) \
            or len(lines[0]) != len(lines[1]):
        return None
    return lines[0], lines[1]


def merge_base(repo: Path, base: str, head: str) -> str | None:
    """The best common ancestor of two commits (None when their histories are unrelated)."""
    proc = run_git(repo, "merge-base", "--end-of-options", base, head, check=False)
    out = _decode(proc.stdout).strip()
    return out.splitlines()[0] if proc.returncode == 0 and out else None


def worktree_tree(repo: Path) -> str:
    """Write the working tree (tracked and untracked files that are not ignored) to a tree object.

    Uses a temporary copy of the index, so the user's index is never touched.
    """
    top = check_repo(repo)
    index_out = run_git(top, "rev-parse", "--git-path", "index").stdout
    index = Path(_decode(index_out).strip())
    if not index.is_absolute():
        index = top / index
    objects, _ = _object_store(top)
    exclude = Path(_decode(run_git(top, "rev-parse", "--git-path", "info/exclude").stdout).strip())
    exclude = exclude if exclude.is_absolute() else top / exclude
    with tempfile.TemporaryDirectory(prefix="fasttrack-index-") as tmp:
        # The files are hashed in a scratch repository over the checkout (its info/attributes switch off
        # every conversion and filter the checkout's .gitattributes ask for), written to the checkout's own
        # object store: the tree holds the bytes on disk. Ignore rules are the checkout's .gitignore files and
        # info/exclude.
        git_dir = _scratch_repository(top, Path(tmp))
        tmp_index = git_dir / "index"
        if index.is_file():
            shutil.copyfile(index, tmp_index)
        env = {"GIT_OBJECT_DIRECTORY": str(objects)}
        excl = ("-c", f"core.excludesFile={exclude}") if exclude.is_file() else ()
        _run_scratch(git_dir, top, *excl, "add", "-A", "--", ".", env=env)
        _run_scratch(git_dir, top, *excl, "add", "--renormalize", "--", ".", env=env)  # stale index entries
        return _decode(_run_scratch(git_dir, top, "write-tree", env=env)).strip()


# --------------------------------------------------------------------------- diff parsing


@dataclass(frozen=True)
class _RawEntry:
    status: str
    old_mode: str
    new_mode: str
    old_oid: str
    new_oid: str
    path: str
    old_path: str | None


def _parse_raw(out: bytes) -> list[_RawEntry]:
    tokens = out.split(b"\0")
    entries: list[_RawEntry] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok:
            continue
        if not tok.startswith(b":"):
            raise RuntimeError(f"unexpected git diff --raw output: {tok[:80]!r}")
        old_mode, new_mode, old_oid, new_oid, status = _decode(tok[1:]).split(" ")
        letter = status[0]
        if letter in "RC":
            src, dst = _decode(tokens[i]), _decode(tokens[i + 1])
            i += 2
            entries.append(_RawEntry(letter, old_mode, new_mode, old_oid, new_oid, dst, src))
        else:
            path = _decode(tokens[i])
            i += 1
            entries.append(_RawEntry(letter, old_mode, new_mode, old_oid, new_oid, path, None))
    return entries


def _parse_numstat(out: bytes) -> dict[str, tuple[int | None, int | None]]:
    """path (new side) -> (added, removed); None counts mean binary."""
    tokens = out.split(b"\0")
    stats: dict[str, tuple[int | None, int | None]] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok:
            continue
        added, removed, rest = tok.split(b"\t", 2)
        if rest:
            path = _decode(rest)
        else:  # rename or copy: the two paths follow
            path = _decode(tokens[i + 1])
            i += 2
        a = None if added == b"-" else int(added)
        r = None if removed == b"-" else int(removed)
        prev = stats.get(path)
        if prev is not None and None not in prev and a is not None and r is not None:
            a, r = a + (prev[0] or 0), r + (prev[1] or 0)
        stats[path] = (a, r)
    return stats


_C_ESCAPES = {ord("a"): 7, ord("b"): 8, ord("t"): 9, ord("n"): 10, ord("v"): 11, ord("f"): 12,
              ord("r"): 13, ord('"'): 34, ord("\\"): 92}


def unquote_c_path(raw: bytes) -> str:
    """Undo git's C-style quoting of a path ("a\\tb", octal escapes for non-ASCII bytes)."""
    if not (raw.startswith(b'"') and raw.endswith(b'"') and len(raw) >= 2):
        return _decode(raw)
    body = raw[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c != 92:  # backslash
            out.append(c)
            i += 1
            continue
        nxt = body[i + 1]
        if 48 <= nxt <= 55:  # octal
            out.append(int(body[i + 1:i + 4], 8))
            i += 4
        else:
            out.append(_C_ESCAPES.get(nxt, nxt))
            i += 2
    return _decode(bytes(out))


def _header_path(line: bytes, prefix: bytes) -> str | None:
    """Path from a `--- a/x` or `+++ b/x` line; None for /dev/null."""
    rest = line[4:]
    if rest.endswith(b"\t"):
        rest = rest[:-1]
    if rest == b"/dev/null":
        return None
    path = unquote_c_path(rest)
    return path[len(prefix):] if path.startswith(prefix.decode()) else path


def parse_hunks(lines: Sequence[bytes]) -> tuple[Hunk, ...]:
    """Parse unified-diff hunks (any context size) from the lines after a file's header."""
    hunks: list[Hunk] = []
    i = 0
    while i < len(lines):
        m = _HUNK_RE.match(lines[i])
        if not m:
            i += 1
            continue
        old_start, new_start = int(m.group(1)), int(m.group(3))
        old_count = int(m.group(2)) if m.group(2) is not None else 1
        new_count = int(m.group(4)) if m.group(4) is not None else 1
        i += 1
        old_no, new_no = old_start, new_start
        added: list[tuple[int, str]] = []
        removed: list[tuple[int, str]] = []
        seen_old = seen_new = 0
        while i < len(lines) and (seen_old < old_count or seen_new < new_count or
                                  lines[i].startswith(b"\\")):
            line = lines[i]
            i += 1
            tag, text = line[:1], line[1:].decode("utf-8", "replace")
            if tag == b"+":
                added.append((new_no, text))
                new_no += 1
                seen_new += 1
            elif tag == b"-":
                removed.append((old_no, text))
                old_no += 1
                seen_old += 1
            elif tag == b" " or line == b"":
                old_no += 1
                new_no += 1
                seen_old += 1
                seen_new += 1
            elif tag == b"\\":  # "\ No newline at end of file"
                continue
            else:
                break
        hunks.append(Hunk(added=tuple(added), removed=tuple(removed), old_start=old_start,
                          old_count=old_count, new_start=new_start, new_count=new_count))
    return tuple(hunks)


def _parse_patch(out: bytes) -> dict[str, list[Hunk]]:
    """new-side path (old side for deletions) -> hunks, from `diff-tree -p` output."""
    result: dict[str, list[Hunk]] = {}
    lines = out.split(b"\n")
    starts = [i for i, line in enumerate(lines) if line.startswith(b"diff --git ")]
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        section = lines[start:end]
        old = new = None
        body_at = None
        for j, line in enumerate(section):
            if line.startswith(b"--- "):
                old = _header_path(line, b"a/")
            elif line.startswith(b"+++ "):
                new = _header_path(line, b"b/")
                body_at = j + 1
                break
            elif line.startswith(b"@@"):
                break
        if body_at is None:
            continue
        key = new if new is not None else old
        if key is None:
            continue
        result.setdefault(key, []).extend(parse_hunks(section[body_at:]))
    return result


def _mode(mode: str) -> str | None:
    return None if mode == NULL_MODE else mode


def _status(entry: _RawEntry) -> ChangeStatus:
    if entry.status == "M" and entry.old_oid == entry.new_oid and entry.old_mode != entry.new_mode:
        return ChangeStatus.MODE_CHANGED
    status = _STATUS.get(entry.status)
    if status is None:
        raise RuntimeError(f"unexpected git diff status {entry.status!r} for {entry.path}")
    return status


def _split_diff_output(out: bytes) -> tuple[bytes, bytes, bytes]:
    """Split one `diff-tree --raw --numstat -p -z` run (rename and copy detection done once, not three
    times): git writes the raw records, then the numstat records (NUL-terminated, no empty record among
    them: paths are never empty), then an empty record, then the patch text."""
    cut = out.find(b"\0\0")
    head, patch = (out, b"") if cut < 0 else (out[: cut + 1], out[cut + 2:])
    tokens = head.split(b"\0")
    i = 0
    while i < len(tokens) and tokens[i].startswith(b":"):
        status = tokens[i].rsplit(b" ", 1)[-1][:1]
        i += 3 if status in (b"R", b"C") else 2  # a rename or copy record names both paths
    return b"\0".join(tokens[:i]), b"\0".join(tokens[i:]), patch


def diff_trees(repo: Path, base_tree: str, head_tree: str) -> tuple[Change, ...]:
    """Every change from `base_tree` to `head_tree` (both sides of renames and copies, modes, symlinks...)."""
    # In a bare scratch repository that borrows the objects: no work tree, config or info/attributes of the
    # user's repository (so no .gitattributes of the PR's checkout) decides what is binary or how it diffs.
    with tempfile.TemporaryDirectory(prefix="fasttrack-diff-") as scratch:
        git_dir = _scratch_repository(repo, Path(scratch))
        out = _run_scratch(git_dir, None, "diff-tree", "--raw", "--numstat", "-p", "-z", "-U0", "--abbrev=40",
                           "--src-prefix=a/", "--dst-prefix=b/", *_DIFF_FLAGS, base_tree, head_tree)
    raw_part, numstat_part, patch_part = _split_diff_output(out)
    raw = _parse_raw(raw_part)
    if not raw:
        return ()
    stats = _parse_numstat(numstat_part)
    patch = _parse_patch(patch_part)
    changes: list[Change] = []
    for e in raw:
        old_mode, new_mode = _mode(e.old_mode), _mode(e.new_mode)
        submodule = GITLINK_MODE in (old_mode, new_mode)
        added, removed = stats.get(e.path, (0, 0))
        binary = (added is None or removed is None) and not submodule
        hunks = () if binary or submodule else tuple(patch.get(e.path, ()))
        target = None
        if new_mode == SYMLINK_MODE and e.status != "D":
            target = _read_blob_text(repo, e.new_oid)
        changes.append(Change(
            status=_status(e), path=e.path, old_path=e.old_path, old_mode=old_mode, new_mode=new_mode,
            binary=binary, symlink_target=target, hunks=hunks,
            added_lines=None if binary else added, removed_lines=None if binary else removed,
        ))
    return tuple(changes)


def changes_between(repo: Path, base: str, head: str) -> tuple[Change, ...]:
    """The change set of `base..head` in `repo` (head may be `WORKTREE`)."""
    check_repo(repo)
    b = resolve_revision(repo, base, "--base")
    h = resolve_revision(repo, head, "--head")
    return diff_trees(repo, b.tree, h.tree)


def _read_blob_text(repo: Path, oid: str) -> str | None:
    proc = run_git(repo, "cat-file", "blob", oid, check=False)
    if proc.returncode != 0 or len(proc.stdout) > MAX_SYMLINK_TARGET:
        return None
    return _decode(proc.stdout)


def read_blob(repo: Path, tree: str, path: str) -> bytes | None:
    """The bytes of `path` in `tree` (None when it is absent or not a file)."""
    proc = run_git(repo, "cat-file", "blob", f"{tree}:{path}", check=False)
    return proc.stdout if proc.returncode == 0 else None


def list_tree(repo: Path, tree: str) -> list[tuple[str, str, str, str]]:
    """Every entry of `tree`, recursively: (mode, type, oid, path)."""
    return list(_list_tree(repo, tree))


@functools.lru_cache(maxsize=8)
def _list_tree(repo: Path, tree: str) -> tuple[tuple[str, str, str, str], ...]:
    # A tree sha names its content: the listing is read once per process (the pipeline asks twice).
    out = run_git(repo, "ls-tree", "-r", "-z", "--full-tree", tree).stdout
    entries = []
    for rec in out.split(b"\0"):
        if not rec:
            continue
        meta, path = rec.split(b"\t", 1)
        mode, kind, oid = _decode(meta).split(" ")
        entries.append((mode, kind, oid, _decode(path)))
    return tuple(entries)


def list_tree_files(repo: Path, tree: str) -> list[str]:
    """Paths of every file (blob, symlink, submodule) in `tree`."""
    return [path for _, _, _, path in list_tree(repo, tree)]


# --------------------------------------------------------------------------- materialising a tree

# Written as the scratch repository's info/attributes, which outranks every .gitattributes in the tree: no
# end-of-line conversion, no $Id$ expansion, no smudge filter, no re-encoding. The files land byte for byte
# as the blobs hold them, whatever the PR's .gitattributes say.
_NEUTRAL_ATTRIBUTES = "* -text -eol -crlf -ident -filter -working-tree-encoding !diff !merge\n"
# Settings for every command run in the scratch repository (on top of its own config file and `_HARDENING`,
# with the user's global and system config switched off): no sparse patterns, no submodule recursion, real
# symlinks, one checkout worker per core.
_SCRATCH_CONFIG = ("-c", "core.symlinks=true", "-c", "core.sparseCheckout=false",
                   "-c", "submodule.recurse=false", "-c", "checkout.workers=0")


def _safe_relpath(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and all(p not in ("", ".", "..", ".git") for p in parts)


def _object_store(repo: Path) -> tuple[Path, str]:
    """The repository's object directory (absolute; the common one for a linked worktree) and hash."""
    out = _decode(run_git(repo, "rev-parse", "--git-path", "objects", "--show-object-format").stdout)
    lines = out.splitlines()
    objects = Path(lines[0].strip())
    if not objects.is_absolute():
        objects = repo / objects
    fmt = lines[1].strip() if len(lines) > 1 and lines[1].strip() else "sha1"
    return objects.resolve(), fmt


def _scratch_repository(repo: Path, where: Path) -> Path:
    """A throw-away git directory that borrows `repo`'s objects (alternates) and has a config and
    attributes of our own: nothing from the user's or the PR's configuration applies to a checkout there."""
    objects, fmt = _object_store(repo)
    git_dir = where / "git"
    for sub in ("objects/info", "refs/heads", "info"):
        (git_dir / sub).mkdir(parents=True)
    (git_dir / "HEAD").write_text("ref: refs/heads/fasttrack\n")
    (git_dir / "objects/info/alternates").write_text(f"{objects}\n")
    (git_dir / "info/attributes").write_text(_NEUTRAL_ATTRIBUTES)
    version = 1 if fmt != "sha1" else 0
    extensions = f"[extensions]\n\tobjectformat = {fmt}\n" if fmt != "sha1" else ""
    (git_dir / "config").write_text(
        f"[core]\n\trepositoryformatversion = {version}\n\tbare = false\n\tsymlinks = true\n"
        f"\tautocrlf = false\n\tfilemode = true\n{extensions}")
    return git_dir


def _run_scratch(git_dir: Path, work_tree: Path | None, *args: str,
                 env: dict[str, str] | None = None) -> bytes:
    """Run git in the scratch repository `git_dir`: over `work_tree`, or bare (no work tree, so no
    attributes from any directory) when it is None."""
    scratch_env = {"GIT_DIR": str(git_dir), "GIT_INDEX_FILE": str(git_dir / "index"),
                   "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    bare: tuple[str, ...] = ()
    if work_tree is not None:
        scratch_env["GIT_WORK_TREE"] = str(work_tree)
    else:
        bare = ("-c", "core.bare=true")
    scratch_env.update(env or {})
    proc = _spawn_git([*_SCRATCH_CONFIG, *bare, *args], cwd=work_tree or git_dir, env=scratch_env)
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise RuntimeError(f"git {args[0]} failed: {err}")
    return proc.stdout


def _index_entries(out: bytes) -> list[tuple[str, str]]:
    """(mode, path) from `git ls-files -s -z`."""
    entries = []
    for rec in out.split(b"\0"):
        if rec:
            meta, path = rec.split(b"\t", 1)
            entries.append((_decode(meta.split(b" ", 1)[0]), _decode(path)))
    return entries


def _leaves_tree(path: str, target: str) -> bool:
    """Whether a symlink at `path` (in the tree) with this target points outside the tree."""
    resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
    return os.path.isabs(target) or resolved == ".." or resolved.startswith("../")


def _write_tree(repo: Path, tree: str, dest: Path) -> None:
    """Check out `tree` into the empty directory `dest` with git's own C code: `read-tree` into a temporary
    index of a scratch repository, then `checkout-index -a`.

    What keeps it faithful and safe (tests/test_changes_git.py checks each):

    - the PR's `.gitattributes` cannot change a byte: the scratch repository's info/attributes unsets
      text/eol/ident/filter/working-tree-encoding for every path, and no filter driver is configured there
      anyway (the user's global and system config and `$GIT_CONFIG_*` are off), so no smudge command runs;
      no hooks (`core.hooksPath=/dev/null`; checkout-index runs none anyway), no fsmonitor, no sparse
      checkout, no submodule recursion; export-ignore means nothing to checkout-index;
    - unsafe paths (`..`, `.git`, absolute): git refuses them when reading the tree into the index, and the
      index is checked again here before anything is written;
    - symlinks are written as links (`core.symlinks=true`) and then every link whose target leaves the tree
      (absolute, `../..`, or through a chain of in-tree links) is removed: FT105 reports them;
    - a submodule (gitlink) is an empty directory: its commit is never fetched or checked out.
    """
    with tempfile.TemporaryDirectory(prefix="fasttrack-checkout-") as scratch:
        git_dir = _scratch_repository(repo, Path(scratch))
        try:
            _run_scratch(git_dir, dest, "read-tree", tree)
        except RuntimeError as exc:
            if "invalid path" in str(exc) or "unsafe" in str(exc):
                raise InputError(f"tree {tree} holds an unsafe path ({exc})", field="--head",
                                 fix="such trees cannot be analysed; reject the PR") from None
            raise
        entries = _index_entries(_run_scratch(git_dir, dest, "ls-files", "-s", "-z"))
        for _, path in entries:
            if not _safe_relpath(path):
                raise InputError(f"tree {tree} holds an unsafe path {path!r}", field="--head",
                                 fix="such trees cannot be analysed; reject the PR")
        _run_scratch(git_dir, dest, "checkout-index", "-a", "-f")
    links = [dest / path for mode, path in entries if mode == SYMLINK_MODE]
    for mode, path in entries:
        if mode == GITLINK_MODE:  # a submodule: an empty directory where it would be checked out
            (dest / path).mkdir(parents=True, exist_ok=True)
    for link_path in links:
        if _leaves_tree(link_path.relative_to(dest).as_posix(), os.readlink(link_path)):
            link_path.unlink()  # an out-of-tree symlink is never kept (FT105 reports it)
    # Chains of in-tree links can still leave the tree (a -> s/.., s -> .); drop any that do.
    real_dest = os.path.realpath(dest)
    for link_path in links:
        if not os.path.lexists(link_path):
            continue
        real = os.path.realpath(link_path)
        if real != real_dest and not real.startswith(real_dest + os.sep):
            link_path.unlink()


def materialize_tree(repo: Path, rev: str) -> Path:
    """The files of `rev`'s tree on disk, under `<cache>/trees/<tree-sha>/`, reused when already there.

    `rev` may be `WORKTREE`: the checkout itself is returned. Extraction goes to a temporary directory that is
    renamed into place, so a half-written tree is never seen and concurrent runs do not collide.
    """
    if rev == WORKTREE:
        return check_repo(repo)
    return materialize_revision(repo, resolve_revision(repo, rev, "--head"))


def _blob_id(path: bytes, fmt: str) -> str | None:
    """The git blob id of a regular file's bytes (None for a symlink or anything else). Python's hashlib
    (OpenSSL) reads and hashes the vLLM tree about three times faster than `git hash-object`."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        h = hashlib.new(fmt, b"blob %d\0" % st.st_size)
        left = st.st_size
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            h.update(chunk)
            left -= len(chunk)
        return None if left or os.read(fd, 1) else h.hexdigest()  # the file changed size under us
    finally:
        os.close(fd)


def _only_bytecode(repo: Path, other: str) -> bool:
    """An untracked entry that cannot change the analysis: a `__pycache__/` directory of .pyc files."""
    if other.rstrip("/").rsplit("/", 1)[-1] != "__pycache__":
        return False
    for _, dirs, names in os.walk(repo / other):
        if dirs or not all(n.endswith(".pyc") for n in names):
            return False
    return True


def checkout_holds_tree(repo: Path, tree: str) -> bool:
    """Whether the checkout at `repo` (its top level) holds exactly `tree`'s files, byte for byte, and no
    other file but `__pycache__` directories, so that it can be analysed in place instead of a copy.

    Conservative: HEAD's tree is `tree`; the index tracks exactly the tree's paths (nothing staged on top);
    every file is a regular file whose bytes, as they are on disk (no attribute, eol conversion or filter
    applies), have the tree's blob id; the tree has no symlink and no submodule (a copy drops links that leave
    the tree and empties submodules; a checkout would not); no untracked or ignored file (`ls-files -o`,
    without exclude rules) except `__pycache__/` directories of `.pyc` files. Any doubt (a bare repository, an
    odd path, an error) is False.
    The check is made once, before the analysis: a file edited while fasttrack runs may be analysed as
    edited (as with `--head WORKTREE`), so do not edit the checkout under a running verify.
    """
    try:
        inside = run_git(repo, "rev-parse", "--is-inside-work-tree", "--show-toplevel", check=False)
        lines = _decode(inside.stdout).splitlines()
        if inside.returncode != 0 or len(lines) < 2 or lines[0] != "true" or \
                Path(lines[1]).resolve() != repo.resolve():
            return False
        at = run_git(repo, "rev-parse", "-q", "--verify", "HEAD^{tree}", check=False)
        if at.returncode != 0 or _decode(at.stdout).strip() != tree:
            return False  # checked out elsewhere: do not read every file to find out
        entries = _list_tree(repo, tree)
        index = run_git(repo, "ls-files", "-z").stdout
        if sorted(_decode(p) for p in index.split(b"\0") if p) != sorted(e[3] for e in entries):
            return False
        _, fmt = _object_store(repo)
        base = os.fsencode(repo)
        for mode, kind, _, path in entries:
            if kind != "blob" or mode == SYMLINK_MODE or not _safe_relpath(path):
                return False  # submodules and symlinks: the copy drops or empties them, the checkout may not

        from fasttrack.changes.stat_cache import BlobIdCache

        known = BlobIdCache(repo, fmt)  # a file whose stat data did not change since it was hashed is not

        def same(entry: tuple[str, str, str, str]) -> bool:
            path = base + b"/" + os.fsencode(entry[3])
            return known.blob_id(entry[3], lambda: _blob_id(path, fmt)) == entry[2]

        # hashlib and os.read release the GIL: a few threads hash the tree in about 1/cores of the time. One
        # task per thread, each a slice of the entries (a future per file cost more CPU than the hashing).
        workers = max(1, min(8, os.cpu_count() or 1))
        slices = [entries[i::workers] for i in range(workers)]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            if not all(pool.map(lambda part: all(map(same, part)), slices)):
                return False
        known.save()
        others = run_git(repo, "ls-files", "-o", "-z", "--directory", "--no-empty-directory").stdout
        return all(_only_bytecode(repo, _decode(o)) for o in others.split(b"\0") if o)
    except (OSError, RuntimeError, ValueError, InputError):
        return False


def materialize_revision(repo: Path, revision: Revision, *, reuse_checkout: bool = False) -> Path:
    """`materialize_tree` for an already resolved revision.

    With `reuse_checkout`, a checkout that already holds the revision's tree exactly
    (`checkout_holds_tree`: CI checks out the PR head) is returned itself: nothing is written. A tree
    already in the cache is used first.
    """
    if revision.name == WORKTREE:
        return check_repo(repo)
    tree = revision.tree
    root = cache_root() / "trees"
    dest = root / tree
    if dest.is_dir():
        return dest
    if reuse_checkout:
        top = check_repo(repo)
        if checkout_holds_tree(top, tree):
            return top
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{tree[:12]}-", dir=root))
    try:
        try:
            _write_tree(repo, tree, tmp)
        except RuntimeError as exc:
            raise InputError(f"cannot check out the head tree {tree[:12]}: {exc}", field="--head",
                             fix="make sure every object of the head is present (a partial or shallow "
                                 "clone may lack them: fetch the PR's commits in full)") from None
        tmp.chmod(0o755)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not dest.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
