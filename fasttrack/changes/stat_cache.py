"""Blob ids of a checkout's files, remembered by their stat data (as git's index does), so a warm run proves
that the checkout holds the head tree without reading every file again.

One record per checkout (keyed by its path) in `<cache>/checkouts/`: relpath -> (size, mtime_ns, ctime_ns,
inode, device, mode, blob id). A record is reused only when every one of those stat fields is the same and the
file's ctime is more than RACY_NS older than when the record was written: any write to a file after that
changes its ctime (the kernel sets it; no system call sets it back), so a file edited since, even to the same
size and mtime, is hashed again. A file changed within RACY_NS of the write is "racily clean" and never
recorded. The record lives in fasttrack's own cache: whoever can write there can change fasttrack's graphs
too, so it adds no trust the cache did not already have.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fasttrack.cache import cache_root

RACY_NS = 2_000_000_000
_FORMAT = 1
StatKey = tuple[int, int, int, int, int, int]


def _key(st: os.stat_result) -> StatKey:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, st.st_mode)


class BlobIdCache:
    """`blob_id(relpath, compute)`: the remembered id when the file's stat data still match, else `compute()`
    (and remember it); `save()` writes the record back."""

    def __init__(self, checkout: Path, fmt: str) -> None:
        digest = hashlib.sha256(os.fsencode(checkout.resolve()) + b"\0" + fmt.encode()).hexdigest()[:40]
        self.path = cache_root() / "checkouts" / f"{digest}.marshal"
        self.base = os.fsencode(checkout)
        self.old: dict[str, tuple[StatKey, str]] = self._load()
        self.new: dict[str, tuple[StatKey, str]] = {}

    def _load(self) -> dict[str, tuple[StatKey, str]]:
        try:
            data = marshal.loads(self.path.read_bytes())
        except (OSError, EOFError, ValueError, TypeError):
            return {}
        if not (isinstance(data, tuple) and len(data) == 2 and data[0] == _FORMAT
                and isinstance(data[1], dict)):
            return {}
        out: dict[str, tuple[StatKey, str]] = {}
        for rel, rec in data[1].items():
            if (isinstance(rel, str) and isinstance(rec, tuple) and len(rec) == 2 and isinstance(rec[1], str)
                    and isinstance(rec[0], tuple) and len(rec[0]) == 6
                    and all(isinstance(x, int) for x in rec[0])):
                out[rel] = (rec[0], rec[1])
        return out

    def blob_id(self, rel: str, compute: Callable[[], str | None]) -> str | None:
        try:
            st = os.lstat(self.base + b"/" + os.fsencode(rel))
        except OSError:
            return compute()
        key = _key(st)
        hit = self.old.get(rel)
        if hit is not None and hit[0] == key:
            self.new[rel] = hit
            return hit[1]
        oid = compute()
        try:
            after = _key(os.lstat(self.base + b"/" + os.fsencode(rel)))
        except OSError:
            return oid
        if oid is not None and after == key:
            self.new[rel] = (key, oid)
        return oid

    def save(self) -> None:
        """Write the record (atomically), leaving out racily clean files."""
        now = time.time_ns()
        keep = {rel: rec for rel, rec in self.new.items() if rec[0][2] < now - RACY_NS}
        if keep == self.old:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".checkout-", dir=self.path.parent)
            with os.fdopen(fd, "wb") as fh:
                fh.write(marshal.dumps((_FORMAT, keep)))
            os.replace(tmp, self.path)
        except OSError:
            pass  # a cache that cannot be written costs a re-hash next time, nothing else
