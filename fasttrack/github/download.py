"""Stage 1's artifact, fetched through the API and inspected in memory before anything is extracted.

`actions/download-artifact` extracts whatever the zip holds before any check of ours runs, so a hostile
stage 1 (the PR's own workflow) could fill the runner's disk with a zip bomb. Here the artifact's listing
is read first (its declared size), then the zip is downloaded with a byte cap and its central directory
checked by `artifact.inspect_zip` (entries, names, sizes, ratio); only the two expected files are
decompressed, in memory, each with its own cap. Nothing is written to disk.
"""

from __future__ import annotations

from typing import Any

from fasttrack.github.artifact import MAX_VERDICT_BYTES, MAX_ZIP_BYTES, RejectedVerdict, inspect_zip
from fasttrack.github.client import split_repo

ARTIFACT_NAME = "fasttrack-verdict"


def _get(gh: Any, url: str, what: str, **kw: Any) -> Any:
    from fasttrack.errors import InputError

    try:
        resp = gh.session.get(url, **kw)
    except OSError as exc:  # requests' errors derive from OSError
        raise InputError(f"could not reach GitHub while {what}: {type(exc).__name__}") from None
    if resp.status_code in (401, 403, 404):
        raise InputError(f"GitHub answered {resp.status_code} while {what}",
                         fix="the download token needs actions: read on this repository (docs/github.md)")
    if resp.status_code != 200:
        raise InputError(f"GitHub answered {resp.status_code} while {what}", fix="run again later")
    return resp


def fetch_artifact(gh: Any, repo: str, run_id: int, head_sha: str | None, name: str = ARTIFACT_NAME,
                   max_bytes: int = MAX_VERDICT_BYTES) -> dict[str, bytes]:
    """`verdict.json` and `pr.json` of artifact `name` of workflow run `run_id`, as bytes.

    RejectedVerdict (the artifact is not one we may read) when it is missing, duplicated, expired, of
    another commit, declared or downloaded larger than the cap, or its zip fails `inspect_zip`."""
    owner, repo_name = split_repo(repo)
    source = f"artifact {name!r} of run {run_id}"
    listing = _get(gh, gh._build_url("repos", owner, repo_name, "actions", "runs", str(run_id), "artifacts"),
                   f"listing the artifacts of run {run_id}", params={"name": name, "per_page": 100})
    try:
        payload = listing.json()
        found = [a for a in payload.get("artifacts", []) if isinstance(a, dict) and a.get("name") == name]
    except (ValueError, AttributeError):
        raise RejectedVerdict("GitHub's artifact listing is not JSON", path=source) from None
    if not found:
        raise RejectedVerdict("stage 1 uploaded no verdict", path=source,
                              fix="stage 1 failed before its upload step; see its log")
    if len(found) > 1:
        raise RejectedVerdict(f"the run has {len(found)} artifacts named {name!r}", path=source)
    art = found[0]
    if art.get("expired"):
        raise RejectedVerdict("the artifact has expired", path=source, fix="re-run stage 1")
    size = art.get("size_in_bytes")
    if not isinstance(size, int) or size < 0 or size > MAX_ZIP_BYTES:
        raise RejectedVerdict(f"the artifact is declared {size!r} bytes, over the {MAX_ZIP_BYTES}-byte cap",
                              path=source, fix="nothing was downloaded")
    run_sha = (art.get("workflow_run") or {}).get("head_sha")
    if head_sha is not None and isinstance(run_sha, str) and run_sha.lower() != head_sha.lower():
        raise RejectedVerdict(f"the artifact was built from {run_sha[:12]!r}, not {head_sha[:12]}",
                              path=source)
    art_id = art.get("id")
    if not isinstance(art_id, int):
        raise RejectedVerdict("the artifact listing has no id", path=source)
    # GitHub answers with a redirect to blob storage; requests drops the Authorization header on the
    # cross-host hop. The body is read with a cap, whatever Content-Length says.
    resp = _get(gh, gh._build_url("repos", owner, repo_name, "actions", "artifacts", str(art_id), "zip"),
                f"downloading artifact {art_id}", stream=True, allow_redirects=True)
    data = bytearray()
    try:
        for chunk in resp.iter_content(64 * 1024):
            data += chunk
            if len(data) > MAX_ZIP_BYTES:
                raise RejectedVerdict(f"the artifact's download passed the {MAX_ZIP_BYTES}-byte cap",
                                      path=source, fix="nothing was extracted")
    finally:
        resp.close()
    return inspect_zip(bytes(data), source, max_bytes)
