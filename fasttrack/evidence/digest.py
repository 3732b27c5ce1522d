"""The content digest that binds evidence to a contribution's files, not to a commit.

Format 2 (`DIGEST_FORMAT`): sha256 over `fasttrack-content-digest-v2\\n` followed by the sorted lines
`<relpath>\\0<entry hash>\\n` of every entry under the contribution directory, where relpath uses `/` and the
entry hash is typed, so no entry of one kind can stand for an entry of another:

* a regular file: sha256(`file\\0` + its bytes);
* a symlink (never followed): sha256(`symlink\\0` + its target text);
* anything else (fifo, socket, device): sha256(`other\\0` + the kind).

No mtimes, modes, owners or commit ids enter it, so it is stable across rebases, squashes and unrelated
commits; any edit, addition, removal, rename or change of kind of a contribution file changes it.

Nothing Python can import is left out. Not hashed, because they are caches no honest run depends on:

* `.pytest_cache/`, `.mypy_cache/`, `.ruff_cache/`, `.hypothesis/`, `.git/` (names Python cannot import as
  packages); a file under one that Python could import (`.py`, `.pyc`, `.so`, `.pth`, ...) is reported in
  `ContentDigest.unhashed`;
* `__pycache__/` compiled files that are faithful: a `.pyc` this interpreter would load in place of its
  source only when its code equals the source's compiled code. A planted one (different code), a
  hash-based one that cannot be checked, or any other file under `__pycache__/` is reported in
  `unhashed`;
* the evidence bundle when it lies in `evidence/` at the top of the contribution: its regular files are
  hashed only when Python could import them (a module there is code like any other); symlinks and other
  entries there are always hashed.

Format 1 (fasttrack before issue 12) hashed a file as sha256(bytes) and a symlink as sha256(`symlink:` +
target), with no header line; `listing_format` recognises a listing of either format so an old statement is
reported as old (stale), never as tampered.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import marshal
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

from fasttrack.errors import InputError

DIGEST_FORMAT = 2
_HEADER = b"fasttrack-content-digest-v2\n"
NOISE_DIRS = frozenset({".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".git"})
PYCACHE = "__pycache__"
EVIDENCE_DIR = "evidence"
# Kept for readers of format 1 (what it left out).
EXCLUDED_DIRS = frozenset({PYCACHE, *NOISE_DIRS})
EXCLUDED_TOP_DIRS = frozenset({EVIDENCE_DIR})
# File suffixes Python loads as code (source, bytecode, extension modules) and site's path files.
IMPORTABLE_SUFFIXES = tuple(sorted({*importlib.machinery.all_suffixes(), ".pyc", ".pyo", ".pyw", ".pyd",
                                    ".so", ".pth"}, key=len, reverse=True))
MAX_PYC_BYTES = 16 * 1024 * 1024
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Unhashed:
    """A file the digest does not bind although Python could import it (a finding, never silent)."""

    path: str
    reason: str


@dataclass(frozen=True)
class ContentDigest:
    """The subject digest, the file list it was computed from ({relpath: entry hash}), and what Python
    could import that it does not bind."""

    sha256: str
    files: dict[str, str] = field(default_factory=dict)
    unhashed: tuple[Unhashed, ...] = ()
    format: int = DIGEST_FORMAT


@dataclass(frozen=True)
class FileDelta:
    """How a contribution's files differ from those a bundle was collected over."""

    changed: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    # Why the listings cannot be compared file by file (e.g. the bundle uses an older digest format).
    note: str | None = None

    def __bool__(self) -> bool:
        return bool(self.changed or self.added or self.removed or self.note)

    def describe(self, limit: int = 20) -> str:
        parts = []
        for label, paths in (("changed", self.changed), ("added", self.added), ("removed", self.removed)):
            if paths:
                shown = ", ".join(paths[:limit]) + (f" and {len(paths) - limit} more" if len(paths) > limit
                                                    else "")
                parts.append(f"{label}: {shown}")
        if self.note is not None:
            parts.append(self.note)
        return "; ".join(parts) if parts else "no file differs (the listing itself does not match)"

    def all_paths(self) -> list[str]:
        return sorted({*self.changed, *self.added, *self.removed})


def entry_hash(kind: str, payload: bytes) -> str:
    """The typed hash of one entry (`file`, `symlink` or `other`)."""
    return hashlib.sha256(kind.encode() + b"\0" + payload).hexdigest()


def digest_of_listing(files: dict[str, str]) -> str:
    """The subject digest (format 2) of a {relpath: entry hash} listing (what `contribution_digest` gives)."""
    h = hashlib.sha256(_HEADER)
    for rel in sorted(files, key=_sort_key):
        h.update(os.fsencode(rel) + b"\0" + files[rel].encode("ascii", "replace") + b"\n")
    return h.hexdigest()


def digest_of_listing_v1(files: dict[str, str]) -> str:
    """The format-1 subject digest of a listing (to recognise statements written before format 2)."""
    h = hashlib.sha256()
    for rel in sorted(files, key=_sort_key):
        h.update(os.fsencode(rel) + b"\0" + files[rel].encode("ascii", "replace") + b"\n")
    return h.hexdigest()


def listing_format(files: dict[str, str], subject: str) -> int | None:
    """Which digest format `files` hashes to `subject` under (2, 1), or None when under neither."""
    if digest_of_listing(files) == subject:
        return DIGEST_FORMAT
    if digest_of_listing_v1(files) == subject:
        return 1
    return None


def contribution_digest(directory: Path) -> ContentDigest:
    """Digest every entry under `directory` (see the module doc). Raises InputError if it can't be read."""
    root = Path(directory)
    if not root.is_dir():
        raise InputError("contribution directory not found", path=root,
                         fix="pass the directory that holds the contribution's fasttrack.toml")
    walk = _Walk(root)
    walk.dir(root, hash_all=True)
    return ContentDigest(sha256=digest_of_listing(walk.files), files=walk.files,
                         unhashed=tuple(walk.unhashed))


def compare_listings(collected: dict[str, str], current: dict[str, str], *,
                     collected_format: int | None = DIGEST_FORMAT) -> FileDelta:
    """Files changed, added and removed in `current` relative to `collected` (a listing of an older format
    is compared by path only: every entry hash differs, so none is called changed)."""
    if collected_format is not None and collected_format != DIGEST_FORMAT:
        return FileDelta(
            added=tuple(sorted(current.keys() - collected.keys(), key=_sort_key)),
            removed=tuple(sorted(collected.keys() - current.keys(), key=_sort_key)),
            note=(f"the bundle was collected with content-digest format {collected_format} (an older "
                  f"fasttrack); this fasttrack binds files with format {DIGEST_FORMAT}"))
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


def file_entry_hash(path: Path) -> str:
    """The format-2 entry hash of a regular file."""
    h = hashlib.sha256(b"file\0")
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def is_importable_name(name: str) -> bool:
    """Could Python load a file of this name as code (a module, bytecode, an extension, a .pth)?"""
    return name == "__init__.py" or name.endswith(IMPORTABLE_SUFFIXES)


def _sort_key(rel: str) -> bytes:
    return os.fsencode(rel)


class _Walk:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, str] = {}
        self.unhashed: list[Unhashed] = []

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def dir(self, current: Path, *, hash_all: bool) -> None:
        """Hash the entries of `current`: all of them, or (inside the bundle directory) importable ones."""
        for entry, st in self._entries(current):
            path = Path(entry.path)
            rel = self.rel(path)
            if stat.S_ISDIR(st.st_mode):
                if entry.name in NOISE_DIRS:
                    self._noise(path)
                elif entry.name == PYCACHE:
                    self._pycache(path)
                elif current == self.root and entry.name == EVIDENCE_DIR:
                    self.dir(path, hash_all=False)
                else:
                    self.dir(path, hash_all=hash_all)
            elif hash_all or is_importable_name(entry.name) or not stat.S_ISREG(st.st_mode):
                # In the bundle directory only its regular non-code files are left out: a symlink there
                # could stand for a package anywhere.
                self.files[rel] = self._entry(path, st)

    def _entries(self, current: Path) -> list[tuple[os.DirEntry[str], os.stat_result]]:
        try:
            entries = sorted(os.scandir(current), key=lambda e: os.fsencode(e.name))
        except OSError as exc:
            raise InputError(f"cannot list directory: {exc.strerror}", path=current) from None
        out = []
        for entry in entries:
            try:
                out.append((entry, os.lstat(entry.path)))
            except OSError as exc:
                raise InputError(f"cannot stat file: {exc.strerror}", path=Path(entry.path)) from None
        return out

    def _entry(self, path: Path, st: os.stat_result) -> str:
        if stat.S_ISLNK(st.st_mode):
            return entry_hash("symlink", os.fsencode(os.readlink(path)))
        if stat.S_ISREG(st.st_mode):
            try:
                return file_entry_hash(path)
            except OSError as exc:
                raise InputError(f"cannot read file: {exc.strerror}", path=path) from None
        kind = "fifo" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode) else "device"
        return entry_hash("other", kind.encode())

    def _noise(self, directory: Path) -> None:
        """A cache directory: not hashed, but what Python could import from it is reported."""
        for dirpath, dirnames, filenames in os.walk(directory):
            dirnames.sort()
            for name in sorted(filenames):
                if is_importable_name(name):
                    rel = self.rel(Path(dirpath) / name)
                    self.unhashed.append(Unhashed(rel, f"a Python file inside the cache directory "
                                                       f"{directory.name}/, which the digest does not hash"))

    def _pycache(self, directory: Path) -> None:
        for entry, st in self._entries(directory):
            path = Path(entry.path)
            rel = self.rel(path)
            if not stat.S_ISREG(st.st_mode) or not entry.name.endswith(".pyc"):
                what = "directory" if stat.S_ISDIR(st.st_mode) else "file"
                self.unhashed.append(Unhashed(rel, f"a {what} in __pycache__/ that is not compiled bytecode "
                                                   "(importable as a module of the package __pycache__)"))
                continue
            reason = pyc_problem(path, directory.parent)
            if reason is not None:
                self.unhashed.append(Unhashed(rel, reason))


def pyc_problem(pyc: Path, source_dir: Path) -> str | None:
    """Why a `__pycache__/<name>.<tag>[.opt-N].pyc` is not a faithful cache of its source (None when it is).

    A timestamp pyc of this interpreter is loaded in place of its source only when its recorded mtime and
    size match the source's; a hash-based one when its source hash matches (checked) or always
    (unchecked). A pyc that would be loaded must hold exactly the source's compiled code. A hash-based pyc of
    another interpreter cannot be checked here (the import system never writes one unasked). A timestamp pyc
    of another interpreter is loaded only when the source's mtime matches, which a fresh checkout never
    does: it is left alone like a stale cache."""
    parts = pyc.name.split(".")
    if len(parts) < 3:
        return "a .pyc in __pycache__/ without an interpreter tag (not written by the import system)"
    stem, tag = parts[0], parts[1]
    opt = parts[2][4:] if len(parts) == 4 and parts[2].startswith("opt-") else ""
    try:
        with open(pyc, "rb") as fh:
            data = fh.read(MAX_PYC_BYTES + 1)
    except OSError as exc:
        return f"cannot read it: {exc.strerror}"
    if len(data) < 16:
        return None  # the loader rejects a truncated header and recompiles
    flags = int.from_bytes(data[4:8], "little")
    ours = tag == sys.implementation.cache_tag and data[:4] == importlib.util.MAGIC_NUMBER
    source = source_dir / f"{stem}.py"
    if not ours:
        if flags & 0b1:
            return f"hash-based bytecode for {tag}, which this fasttrack cannot check against its source"
        return None
    try:
        src = source.read_bytes() if source.is_file() and not source.is_symlink() else None
        sst = source.stat() if src is not None else None
    except OSError:
        src = sst = None
    if src is None or sst is None:
        return None  # a pyc in __pycache__/ without its source is never imported
    if flags & 0b1:
        checked = bool(flags & 0b10)
        if checked and data[8:16] != importlib.util.source_hash(src):
            return None  # stale: the loader recompiles
    elif data[8:12] != (int(sst.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") or \
            data[12:16] != (sst.st_size & 0xFFFFFFFF).to_bytes(4, "little"):
        return None  # stale: the loader recompiles
    if len(data) > MAX_PYC_BYTES:
        return "bytecode too large to check against its source"
    try:
        code = marshal.loads(data[16:])
        want = compile(src, str(source), "exec", dont_inherit=True, optimize=int(opt) if opt else 0)
    except (ValueError, EOFError, TypeError, SyntaxError) as exc:
        return f"bytecode that cannot be checked against {stem}.py ({type(exc).__name__})"
    if code != want:
        return f"bytecode Python would load instead of {stem}.py, and it is not {stem}.py's compiled code"
    return None
