"""Bounded reads of untrusted files: regular files only, never through a final symlink, at most a limit.

A contribution is hostile: a FIFO blocks a reader forever, `/dev/zero` never ends, a sparse file of many GiB
costs nothing to make. Every read of a contribution's file goes through here: the file is `lstat`ed, opened
with `O_NOFOLLOW | O_NONBLOCK` (a FIFO opens at once, a symlink does not open), checked again with `fstat`
(a file swapped between the two calls is caught) and read up to `limit + 1` bytes.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

_CHUNK = 1 << 20


class NotRegular(Exception):
    """The path is not a regular file (`kind` says what it is)."""

    def __init__(self, path: str | Path, kind: str) -> None:
        self.path = str(path)
        self.kind = kind
        super().__init__(f"{path}: {kind}, not a regular file")


def kind_of(mode: int) -> str:
    """A file type in words, from a stat mode."""
    for test, name in ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "directory"),
                       (stat.S_ISLNK, "symlink"), (stat.S_ISFIFO, "FIFO (named pipe)"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def _open_regular(path: str | Path) -> tuple[int, os.stat_result]:
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(path, kind_of(st.st_mode))
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(path, kind_of(st.st_mode))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular(path: str | Path, limit: int) -> bytes | None:
    """The bytes of a regular file, or None when it holds more than `limit` bytes (nothing more is read).
    Raises NotRegular for anything else (symlink, FIFO, device, socket, directory) and OSError."""
    fd, st = _open_regular(path)
    try:
        if st.st_size > limit:
            return None
        chunks: list[bytes] = []
        got = 0
        while got <= limit and (chunk := os.read(fd, min(_CHUNK, limit + 1 - got))):
            chunks.append(chunk)
            got += len(chunk)
        return None if got > limit else b"".join(chunks)
    finally:
        os.close(fd)


def regular_size(path: str | Path) -> int:
    """The size of a regular file (NotRegular otherwise), without reading it."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(path, kind_of(st.st_mode))
    return st.st_size


def hash_regular(path: str | Path, h: hashlib._Hash | None = None) -> hashlib._Hash:
    """A sha256 (or `h`, updated) over a regular file's bytes, read in chunks: bounded memory at any size."""
    out = h if h is not None else hashlib.sha256()
    fd, _ = _open_regular(path)
    try:
        while chunk := os.read(fd, _CHUNK):
            out.update(chunk)
    finally:
        os.close(fd)
    return out
