"""The verdict artifact as stage 2 receives it: hostile input until proven otherwise.

The first stage runs on `pull_request` with whatever workflow the PR carries, so the artifact it uploads
may be anything: huge, malformed, or a well-formed verdict for another PR or another commit. Everything
here happens before any request that writes to GitHub, so a rejected artifact publishes nothing.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from fasttrack.errors import InputError, from_validation_error
from fasttrack.verdict import Verdict

MAX_VERDICT_BYTES = 8 * 1024 * 1024
MAX_META_BYTES = 64 * 1024
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


def load_verdict(path: Path, max_bytes: int = MAX_VERDICT_BYTES) -> Verdict:
    """Parse and validate a Verdict JSON file against the schema, with a size cap."""
    data = _read_capped(path, max_bytes, "verdict")
    try:
        return Verdict.model_validate_json(data)
    except pydantic.ValidationError as exc:
        err = from_validation_error(exc, path, "verdict")
        raise RejectedVerdict(err.message, path=path, field=err.field,
                              fix="the artifact does not match the Verdict schema "
                                  "(`fasttrack schema verdict`)") from None
    except (ValueError, RecursionError) as exc:
        raise RejectedVerdict(f"not a verdict: {type(exc).__name__}", path=path) from None


def load_meta(path: Path) -> PrMeta:
    data = _read_capped(path, MAX_META_BYTES, "PR metadata")
    try:
        return PrMeta.model_validate_json(data)
    except pydantic.ValidationError as exc:
        err = from_validation_error(exc, path, "PR metadata")
        raise RejectedVerdict(err.message, path=path, field=err.field,
                              fix="stage 1 writes {\"pr\": N, \"head_sha\": \"<40 hex>\"}") from None


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
