"""The verdict artifact as stage 2 receives it: hostile input until proven otherwise.

The first stage runs on `pull_request` with whatever workflow the PR carries, so the artifact it uploads
may be anything: huge, malformed, or a well-formed verdict for another PR or another commit. Everything
here happens before any request that writes to GitHub, so a rejected artifact publishes nothing.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import TypeVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from fasttrack.errors import InputError, from_validation_error
from fasttrack.safe_read import kind_of
from fasttrack.verdict import Verdict

M = TypeVar("M", bound=BaseModel)

MAX_VERDICT_BYTES = 8 * 1024 * 1024
MAX_META_BYTES = 64 * 1024
MAX_JSON_DEPTH = 64  # the Verdict schema nests about 6 deep; a parser's own recursion limit is not a cap
SHA_PATTERN = r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$"  # SHA-1 or SHA-256 object names


class RejectedVerdict(InputError):
    """The artifact is not a verdict we may publish for this PR and commit."""


class PrMeta(BaseModel):
    """`pr.json`, written next to the verdict by stage 1: which PR and commits it claims to be about."""

    model_config = ConfigDict(extra="forbid", strict=True)

    pr: int = Field(ge=1, le=10**9)
    head_sha: str = Field(pattern=SHA_PATTERN)
    base_sha: str | None = Field(default=None, pattern=SHA_PATTERN)


def _read_capped(path: Path, max_bytes: int, what: str) -> bytes:
    try:
        st = path.lstat()
    except FileNotFoundError:
        raise RejectedVerdict(f"no {what} at this path", path=path,
                              fix="check that stage 1 uploaded it and that it was downloaded here") from None
    except OSError as exc:
        raise RejectedVerdict(f"cannot read the {what}: {exc.strerror}", path=path) from None
    if not stat.S_ISREG(st.st_mode):
        raise RejectedVerdict(f"the {what} is not a regular file (a link or a directory)", path=path)
    if st.st_size > max_bytes:
        raise RejectedVerdict(f"the {what} is {st.st_size} bytes, over the {max_bytes}-byte cap", path=path,
                              fix="a real verdict is far smaller; this artifact is not trusted")
    with path.open("rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise RejectedVerdict(f"the {what} grew past the {max_bytes}-byte cap while being read", path=path)
    return data


def json_depth(data: bytes, limit: int = MAX_JSON_DEPTH) -> int:
    """The nesting depth of JSON text (brackets outside strings), stopping as soon as it passes `limit`:
    a cheap scan before any parser sees the bytes."""
    depth = deepest = 0
    in_string = escaped = False
    for b in data:
        if in_string:
            if escaped:
                escaped = False
            elif b == 0x5C:  # backslash
                escaped = True
            elif b == 0x22:  # quote
                in_string = False
        elif b == 0x22:
            in_string = True
        elif b in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif b in (0x5D, 0x7D):
            depth -= 1
    return deepest


def parse_bounded(model: type[M], data: bytes, source: str | Path, what: str, fix: str,
                  max_bytes: int, max_depth: int = MAX_JSON_DEPTH) -> M:
    """The one loader for everything stage 1 hands to stage 2: a size cap and a nesting cap checked on the
    raw bytes, then the strict pydantic model (unknown keys forbidden). Every failure is a RejectedVerdict."""
    if len(data) > max_bytes:
        raise RejectedVerdict(f"the {what} is {len(data)} bytes, over the {max_bytes}-byte cap", path=source,
                              fix="a real one is far smaller; this artifact is not trusted")
    depth = json_depth(data, max_depth)
    if depth > max_depth:
        raise RejectedVerdict(f"the {what} nests deeper than {max_depth} levels", path=source,
                              fix="a real one is shallow; this artifact is not trusted")
    import json

    from fasttrack.loading import DuplicateKey, no_duplicate_keys

    try:  # one meaning only: a key given twice is read differently by different readers
        json.loads(data, object_pairs_hook=no_duplicate_keys)
    except DuplicateKey as exc:
        raise RejectedVerdict(f"the {what} is ambiguous: {exc}", path=source,
                              fix="a real one names each key once; this artifact is not trusted") from None
    except (ValueError, RecursionError):
        pass  # not JSON at all: the schema check below says so
    try:
        return model.model_validate_json(data)
    except pydantic.ValidationError as exc:
        err = from_validation_error(exc, source, what)
        raise RejectedVerdict(err.message, path=source, field=err.field, fix=fix) from None
    except (ValueError, RecursionError) as exc:
        raise RejectedVerdict(f"not a {what}: {type(exc).__name__}", path=source) from None


_VERDICT_FIX = "the artifact does not match the Verdict schema (`fasttrack schema verdict`)"
_META_FIX = "stage 1 writes {\"pr\": N, \"head_sha\": \"<40 hex>\"}"


def load_verdict(path: Path, max_bytes: int = MAX_VERDICT_BYTES) -> Verdict:
    """Parse and validate a Verdict JSON file against the schema, with a size and a depth cap."""
    return parse_bounded(Verdict, _read_capped(path, max_bytes, "verdict"), path, "verdict", _VERDICT_FIX,
                         max_bytes)


def load_meta(path: Path) -> PrMeta:
    """`pr.json`, through the same bounded loader as the verdict."""
    return parse_bounded(PrMeta, _read_capped(path, MAX_META_BYTES, "PR metadata"), path, "PR metadata",
                         _META_FIX, MAX_META_BYTES)


def verdict_from_bytes(data: bytes, source: str, max_bytes: int = MAX_VERDICT_BYTES) -> Verdict:
    return parse_bounded(Verdict, data, source, "verdict", _VERDICT_FIX, max_bytes)


def meta_from_bytes(data: bytes, source: str) -> PrMeta:
    return parse_bounded(PrMeta, data, source, "PR metadata", _META_FIX, MAX_META_BYTES)


# ---- the artifact's zip, inspected before anything is extracted ----

ARTIFACT_FILES = ("verdict.json", "pr.json")
MAX_ZIP_BYTES = 4 * 1024 * 1024  # the compressed artifact as downloaded
MAX_ZIP_ENTRIES = 8
MAX_RATIO = 100  # uncompressed / compressed, per entry: JSON compresses ~10x, a bomb ~1000x


def inspect_zip(data: bytes, source: str, max_bytes: int = MAX_VERDICT_BYTES) -> dict[str, bytes]:
    """The artifact's two files from its zip, read in memory (nothing touches the disk).

    The central directory is checked first: entry count, names (exactly verdict.json and pr.json at the top;
    no directory, `..`, absolute or duplicate names), declared sizes against the caps, the total, each entry's
    compression ratio, no encryption. Only then are the two entries decompressed, each read with a cap, so a
    header that lies about its size still cannot make us inflate more than the cap.
    """
    import io
    import zipfile

    if len(data) > MAX_ZIP_BYTES:
        raise RejectedVerdict(f"the artifact is {len(data)} bytes, over the {MAX_ZIP_BYTES}-byte cap",
                              path=source, fix="nothing was extracted; a real artifact is a few kB")
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        infos = zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as exc:
        raise RejectedVerdict(f"the artifact is not a readable zip ({type(exc).__name__})",
                              path=source) from None
    if len(infos) > MAX_ZIP_ENTRIES:
        raise RejectedVerdict(f"the artifact holds {len(infos)} entries, over the cap of {MAX_ZIP_ENTRIES}",
                              path=source, fix="stage 1 uploads exactly verdict.json and pr.json")
    names = [i.filename for i in infos]
    if sorted(names) != sorted(ARTIFACT_FILES):
        shown = ", ".join(repr(n[:80]) for n in names[:MAX_ZIP_ENTRIES])
        raise RejectedVerdict(f"the artifact holds {shown}, not exactly verdict.json and pr.json",
                              path=source, fix="nothing was extracted")
    caps = {"verdict.json": max_bytes, "pr.json": MAX_META_BYTES}
    total = 0
    for info in infos:
        if info.flag_bits & 0x1:
            raise RejectedVerdict(f"{info.filename} is encrypted", path=source)
        mode = info.external_attr >> 16  # the unix mode, when the zip was made on a unix (0: none recorded)
        if info.is_dir() or (stat.S_IFMT(mode) not in (0, stat.S_IFREG)):
            raise RejectedVerdict(f"{info.filename} is a {kind_of(mode) if mode else 'directory'} entry, "
                                  "not a regular file", path=source, fix="nothing was extracted")
        if info.file_size > caps[info.filename]:
            raise RejectedVerdict(f"{info.filename} would inflate to {info.file_size} bytes, over the "
                                  f"{caps[info.filename]}-byte cap", path=source, fix="nothing was extracted")
        if info.file_size > MAX_RATIO * max(info.compress_size, 1) and info.file_size > 64 * 1024:
            raise RejectedVerdict(f"{info.filename} inflates {info.file_size // max(info.compress_size, 1)}x "
                                  f"(cap {MAX_RATIO}x): a zip bomb", path=source, fix="nothing was extracted")
        total += info.file_size
    if total > max_bytes + MAX_META_BYTES:
        raise RejectedVerdict(f"the artifact would inflate to {total} bytes", path=source)
    out: dict[str, bytes] = {}
    for info in infos:
        try:
            with zf.open(info) as fh:
                blob = fh.read(caps[info.filename] + 1)
        except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError) as exc:
            raise RejectedVerdict(f"{info.filename} cannot be read from the zip ({type(exc).__name__})",
                                  path=source) from None
        if len(blob) > caps[info.filename]:
            raise RejectedVerdict(f"{info.filename} inflates past its declared size and the "
                                  f"{caps[info.filename]}-byte cap", path=source)
        out[info.filename] = blob
    return out


def check_claims(verdict: Verdict, *, pr: int, head_sha: str | None, meta: PrMeta | None = None,
                 source: str | Path = "verdict") -> None:
    """The verdict (and its metadata) must be about PR `pr` at commit `head_sha` (the trusted event's).

    A verdict that names no head cannot be tied to a commit and is rejected whenever a head is expected.
    """
    if verdict.pr is not None and verdict.pr != pr:
        raise RejectedVerdict(f"the verdict is for PR #{verdict.pr}, not PR #{pr}", path=source, field="pr",
                              fix="nothing was published; a verdict may only be published on its own PR")
    if meta is not None:
        if meta.pr != pr:
            raise RejectedVerdict(f"the artifact's metadata claims PR #{meta.pr}, not PR #{pr}", path=source,
                                  field="pr", fix="nothing was published")
        if head_sha is not None and meta.head_sha != head_sha.lower():
            raise RejectedVerdict(f"the artifact's metadata claims head {meta.head_sha[:12]}, but the "
                                  f"triggering run built {head_sha[:12]}", path=source, field="head_sha",
                                  fix="nothing was published")
    if head_sha is not None:
        if verdict.head is None:
            raise RejectedVerdict("the verdict names no head commit, so it cannot be tied to this PR",
                                  path=source, field="head",
                                  fix="run `fasttrack verify --base <sha> --head <sha>` in stage 1")
        if verdict.head.lower() != head_sha.lower():
            raise RejectedVerdict(f"the verdict is for commit {verdict.head[:40]!r}, but the triggering run "
                                  f"built {head_sha[:12]}", path=source, field="head",
                                  fix="nothing was published")
