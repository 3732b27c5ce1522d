"""Effect-trace facts kept between runs, keyed by a digest of everything the traced child can see.

The trace is the slowest fact of `fasttrack verify` (a fresh interpreter importing torch and its compiler
stack, seconds); a second verify of the same contribution on the same machine reads the facts back instead.
The key is a SHA-256 over, and only over, contents (never a file's mtime or a path's name alone):

- the plan (what is copied where, the targets, the own names and namespaces, the engine roots, the
  allowed registrations), with each copied file named by the SHA-256 of its bytes;
- the pass timeout;
- the trace's own code (every module of `fasttrack.confinement.trace`, the child included);
- the interpreter the child runs (`sys.executable`, `sys.version`) and the sandbox's isolation
  (`unshare -rn` available or not);
- what that interpreter can import from site-packages: every entry's name, each installed distribution's
  `RECORD` (which lists the SHA-256 of every file pip installed), and the bytes of every `.pth` and
  top-level module there (a `.pth` runs at start-up even under `-I`).

Only a finished trace (status `ok`) is stored, and only when the bytes the child was given are the bytes
the key was computed from (a file edited while the trace ran is not cached): a timeout or a crash under a
loaded machine is never replayed. An entry is JSON validated by the TraceFacts model on load; anything else
(truncated, another schema) is a miss, rebuilt. Written atomically; the newest MAX_ENTRIES are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import site
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

from pydantic import ValidationError

from fasttrack.confinement.trace.facts import TraceFacts, TraceStatus
from fasttrack.confinement.trace.plan import MAX_FILE_BYTES, TracePlan
from fasttrack.confinement.trace.sandbox import unshare_prefix
from fasttrack.safe_read import NotRegular, read_regular

FORMAT = b"fasttrack-trace-cache/1\0"
MAX_ENTRIES = 64
MAX_ENTRY_BYTES = 16 * 1024 * 1024


def file_digests(plan: TracePlan) -> dict[str, str] | None:
    """sandbox path -> SHA-256 of the bytes of each file the plan copies; None when one cannot be read whole
    as a regular file (such a trace is not cached)."""
    out: dict[str, str] = {}
    for rel, source in plan.files.items():
        try:
            data = read_regular(source, MAX_FILE_BYTES)
        except (NotRegular, OSError):
            return None
        if data is None:
            return None
        out[rel] = hashlib.sha256(data).hexdigest()
    return out


def _update_file(h: hashlib._Hash, path: Path) -> None:
    try:
        data = read_regular(path, MAX_ENTRY_BYTES)
    except (NotRegular, OSError):
        data = None
    h.update(b"?" if data is None else b"=" + hashlib.sha256(data).digest())


@lru_cache(maxsize=1)
def environment_digest() -> bytes:
    """The trace's code, the child's interpreter and isolation, and what it can import (see above)."""
    h = hashlib.sha256(FORMAT)
    here = Path(__file__).resolve().parent
    for module in sorted(here.glob("*.py")):
        h.update(b"code\0" + module.name.encode() + b"\0")
        _update_file(h, module)
    h.update(b"python\0" + os.fsencode(sys.executable) + b"\0" + sys.version.encode() + b"\0")
    h.update(b"isolation\0" + "\0".join(unshare_prefix()).encode() + b"\0")
    for sp in sorted(set(site.getsitepackages())):
        h.update(b"site\0" + os.fsencode(sp) + b"\0")
        try:
            names = sorted(os.listdir(sp))
        except OSError:
            h.update(b"unreadable\0")
            continue
        for name in names:
            h.update(b"entry\0" + os.fsencode(name) + b"\0")
            path = Path(sp) / name
            if name.endswith(".dist-info"):
                _update_file(h, path / "RECORD")
            elif name.endswith((".pth", ".py")):
                _update_file(h, path)
    return h.digest()


def cache_key(plan: TracePlan, digests: dict[str, str], timeout: float) -> str:
    """The key of a trace of `plan` (pre-imports left out: they follow from the files' contents)."""
    fields = plan.model_dump(mode="json", exclude={"files", "preimport"})
    fields["files"] = dict(sorted(digests.items()))
    h = hashlib.sha256(environment_digest())
    h.update(json.dumps({"plan": fields, "timeout": timeout}, sort_keys=True).encode())
    return h.hexdigest()


def load(cache_dir: Path, key: str) -> TraceFacts | None:
    """The facts stored under `key`, or None (missing or unreadable: a miss)."""
    try:
        data = read_regular(cache_dir / f"{key}.json", MAX_ENTRY_BYTES)
    except (NotRegular, OSError):
        return None
    if data is None:
        return None
    try:
        facts = TraceFacts.model_validate_json(data)
    except ValidationError:
        return None
    return facts if facts.status is TraceStatus.OK else None


def store(cache_dir: Path, key: str, facts: TraceFacts) -> None:
    """Keep a finished trace's facts under `key` (best effort: a cache that cannot be written is no error)."""
    if facts.status is not TraceStatus.OK:
        return
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".trace-", dir=cache_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(facts.model_dump_json())
            os.replace(tmp, cache_dir / f"{key}.json")
        except BaseException:
            os.unlink(tmp)
            raise
        _prune(cache_dir)
    except OSError:
        return


def _prune(cache_dir: Path) -> None:
    entries = sorted((p for p in cache_dir.glob("*.json")), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[MAX_ENTRIES:]:
        old.unlink(missing_ok=True)


def listing(cache_dir: Path) -> dict[str, tuple[int, int, int]]:
    """Name -> (inode, size, mtime in ns) of every entry in the cache directory ({} when there is none)."""
    out: dict[str, tuple[int, int, int]] = {}
    try:
        with os.scandir(cache_dir) as it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                out[entry.name] = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        return {}
    return out


def clear(cache_dir: Path) -> None:
    """Remove every entry (and anything else) in the cache directory: used when traced code may have written
    there, so that nothing it planted is ever read back as a finished trace."""
    try:
        with os.scandir(cache_dir) as it:
            names = [e.name for e in it]
    except OSError:
        return
    for name in names:
        path = cache_dir / name
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        except OSError:
            continue
