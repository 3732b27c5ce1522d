"""The content digest that binds evidence to a contribution's files, not to a commit.

sha256 over the sorted lines `<relpath>\\0<sha256 of the entry>\\n` of every file under the contribution
directory, where relpath uses `/` and the entry hash is the sha256 of the file's bytes (a symlink is hashed
as the bytes `symlink:<target>` and not followed; any other non-regular file as `special:<kind>`). No
mtimes, modes, owners or commit ids enter it, so it is stable across rebases, squashes and unrelated
commits; any edit, addition, removal or rename of a contribution file changes it.

Excluded (caches, and the bundle itself): `__pycache__/`, `.pytest_cache/`, `.mypy_cache/`, `.ruff_cache/`,
`.hypothesis/` directories at any depth, and an `evidence/` directory at the top of the contribution. A
stray `*.pyc` outside `__pycache__/` is *not* excluded: Python imports such a file, so it is code.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from fasttrack.errors import InputError

EXCLUDED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"})
EXCLUDED_TOP_DIRS = frozenset({"evidence"})
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ContentDigest:
    """The subject digest and the file list it was computed from ({relpath: sha256})."""

    sha256: str
    files: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FileDelta:
    """How a contribution's files differ from those a bundle was collected over."""

    changed: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.changed or self.added or self.removed)

    def describe(self, limit: int = 20) -> str:
        parts = []
        for label, paths in (("changed", self.changed), ("added", self.added), ("removed", self.removed)):
            if paths:
                shown = ", ".join(paths[:limit]) + (f" and {len(paths) - limit} more" if len(paths) > limit
                                                    else "")
                parts.append(f"{label}: {shown}")
        return "; ".join(parts) if parts else "no file differs (the listing itself does not match)"

    def all_paths(self) -> list[str]:
        return sorted({*self.changed, *self.added, *self.removed})


def digest_of_listing(files: dict[str, str]) -> str:
    """The subject digest of a {relpath: sha256} listing (what `contribution_digest` computes)."""
    h = hashlib.sha256()
    for rel in sorted(files, key=_sort_key):
        h.update(os.fsencode(rel) + b"\0" + files[rel].encode("ascii", "replace") + b"\n")
    return h.hexdigest()


def contribution_digest(directory: Path) -> ContentDigest:
    """Digest every file under `directory` (see the module doc). Raises InputError if it can't be read."""
    root = Path(directory)
    if not root.is_dir():
        raise InputError("contribution directory not found", path=root,
                         fix="pass the directory that holds the contribution's fasttrack.toml")
    files: dict[str, str] = {}
    _walk(root, root, files)
    return ContentDigest(sha256=digest_of_listing(files), files=files)


def compare_listings(collected: dict[str, str], current: dict[str, str]) -> FileDelta:
    """Files changed, added and removed in `current` relative to `collected`."""
    return FileDelta(
        changed=tuple(sorted((p for p in collected.keys() & current.keys() if collected[p] != current[p]),
                             key=_sort_key)),
        added=tuple(sorted(current.keys() - collected.keys(), key=_sort_key)),
        removed=tuple(sorted(collected.keys() - current.keys(), key=_sort_key)),
    )


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _sort_key(rel: str) -> bytes:
    return os.fsencode(rel)


def _walk(root: Path, current: Path, files: dict[str, str]) -> None:
    try:
        entries = sorted(os.scandir(current), key=lambda e: os.fsencode(e.name))
    except OSError as exc:
        raise InputError(f"cannot list directory: {exc.strerror}", path=current) from None
    for entry in entries:
        path = Path(entry.path)
        rel = path.relative_to(root).as_posix()
        try:
            st = os.lstat(path)
        except OSError as exc:
            raise InputError(f"cannot stat file: {exc.strerror}", path=path) from None
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(path)
            files[rel] = hashlib.sha256(b"symlink:" + os.fsencode(target)).hexdigest()
        elif stat.S_ISDIR(st.st_mode):
            if entry.name in EXCLUDED_DIRS or (current == root and entry.name in EXCLUDED_TOP_DIRS):
                continue
            _walk(root, path, files)
        elif stat.S_ISREG(st.st_mode):
            try:
                files[rel] = sha256_file(path)
            except OSError as exc:
                raise InputError(f"cannot read file: {exc.strerror}", path=path) from None
        else:
            kind = "fifo" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode) else "dev"
            files[rel] = hashlib.sha256(b"special:" + kind.encode()).hexdigest()
