"""The engine overlay: the engine tree with a contribution's files laid over it (hard links, copies of the
laid files), kept in the cache under a digest of its content and built atomically."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

from fasttrack.cache import cache_root
from fasttrack.pipeline.options import MAX_TEXT_BYTES
from fasttrack.safe_read import hash_regular

MAX_OVERLAYS = 8
# An overlay made or reused this recently may be read by another fasttrack run (the cache is shared by all of
# a user's runs): pruning leaves it, however many newer ones there are.
IN_USE_S = 900


def overlay_tree(engine: Path, files: dict[str, Path]) -> Path:
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
        _touch(dest)
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
    _touch(dest)  # copytree gave it the engine tree's mtime
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


def _touch(path: Path) -> None:
    """Mark an overlay as used now (its mtime orders the pruning)."""
    with contextlib.suppress(OSError):  # a read-only cache: nothing is pruned there either
        os.utime(path)


def _prune(root: Path, keep: Path) -> None:
    """Keep the MAX_OVERLAYS newest overlays (a contribution under edit makes a new one per version), and
    every one made or used in the last IN_USE_S seconds: another run may be reading it."""
    now = time.time()
    aged: list[tuple[float, Path]] = []
    for p in root.iterdir():
        try:
            if p.is_dir() and not p.name.startswith("."):
                aged.append((p.stat().st_mtime, p))
        except OSError:
            continue  # removed by another run meanwhile
    aged.sort(key=lambda a: a[0], reverse=True)
    for mtime, old in aged[MAX_OVERLAYS:]:
        if old != keep and now - mtime > IN_USE_S:
            shutil.rmtree(old, ignore_errors=True)

