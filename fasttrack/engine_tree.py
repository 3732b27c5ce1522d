"""Download and cache the real vLLM source tree (``vllm/**/*.py``) for the blast radius tests and benchmark.

``python -m fasttrack.engine_tree 0.33.0`` fetches the wheel with pip (``pip download --no-deps --only-binary
:all: vllm==0.33.0``; the sdist cannot build its metadata without torch), extracts only ``vllm/**/*.py`` into
``~/.cache/fasttrack/vllm-0.33.0/`` and prints that directory. It is idempotent (a finished tree carries a
marker file and is reused) and atomic (extraction goes to a temporary sibling directory that is renamed into
place), so concurrent or interrupted runs never leave a half tree behind. vLLM's code is never committed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from fasttrack.confinement.graph import cache_root

MARKER = ".fasttrack-tree.json"
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+){1,3}([a-z0-9.+-]*)$")
# The published wheel is abi3 for manylinux x86_64; naming the platform lets pip fetch it from any host.
_PLATFORM_ARGS = ("--platform", "manylinux_2_28_x86_64", "--implementation", "cp", "--abi", "abi3",
                  "--python-version", "3.11")


class EngineTreeError(Exception):
    """The tree could not be fetched or extracted (the message says what to do)."""


def tree_dir(version: str) -> Path:
    """Where the extracted tree of `version` lives (the directory holding ``vllm/``)."""
    return cache_root() / f"vllm-{version}"


def wheels_dir() -> Path:
    return cache_root() / "wheels"


def _check_version(version: str) -> None:
    if not _VERSION_RE.match(version):
        raise EngineTreeError(f"bad vLLM version {version!r} (expected something like 0.33.0)")


def find_wheel(version: str) -> Path | None:
    """A cached wheel of `version`, if one was downloaded before."""
    found = sorted(wheels_dir().glob(f"vllm-{version}-*.whl"))
    return found[0] if found else None


def download_wheel(version: str) -> Path:
    """The wheel of `version` from the package index (via pip), cached under ``~/.cache/fasttrack/wheels``."""
    _check_version(version)
    cached = find_wheel(version)
    if cached is not None and zipfile.is_zipfile(cached):
        return cached
    dest = wheels_dir()
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", *_PLATFORM_ARGS,
           "--disable-pip-version-check", "-d", str(dest), f"vllm=={version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheel = find_wheel(version)
    if proc.returncode != 0 or wheel is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise EngineTreeError(f"pip could not download vllm=={version}: {tail[0]} "
                              "(check network access to the package index)")
    return wheel


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _safe_member(name: str) -> PurePosixPath | None:
    """A wheel member that belongs in the tree: ``vllm/**/*.py``, no absolute paths or ``..``."""
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or not p.parts or p.parts[0] != "vllm" or p.suffix != ".py":
        return None
    return p


def extract_tree(wheel: Path, dest: Path) -> int:
    """Extract ``vllm/**/*.py`` from `wheel` into `dest` atomically; returns the number of files."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        count = 0
        try:
            with zipfile.ZipFile(wheel) as zf:
                for info in zf.infolist():
                    member = _safe_member(info.filename)
                    if member is None or info.is_dir():
                        continue
                    target = tmp.joinpath(*member.parts)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(info) as src, open(target, "wb") as out:
                        shutil.copyfileobj(src, out)
                    count += 1
        except (zipfile.BadZipFile, OSError) as exc:
            raise EngineTreeError(f"{wheel}: cannot extract: {exc} (delete it and run again)") from None
        if count == 0:
            raise EngineTreeError(f"{wheel} holds no vllm/**/*.py files")
        tmp.chmod(0o755)  # mkdtemp makes it private; the tree is read by other users' test runs too
        (tmp / MARKER).write_text(json.dumps({"wheel": wheel.name, "sha256": _sha256(wheel), "files": count}))
        if dest.exists():
            # Replace an unfinished or stale tree: move it aside first so the swap is one rename.
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}-old-", dir=dest.parent))
            os.replace(dest, old / "tree")
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
        return count
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def is_complete(path: Path) -> bool:
    return (path / MARKER).is_file() and (path / "vllm" / "__init__.py").is_file()


def ensure_tree(version: str) -> Path:
    """The directory holding ``vllm/`` for `version`: reused when complete, else downloaded and extracted."""
    _check_version(version)
    dest = tree_dir(version)
    if is_complete(dest):
        return dest
    extract_tree(download_wheel(version), dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python -m fasttrack.engine_tree VERSION   (e.g. 0.33.0)", file=sys.stderr)
        return 2
    try:
        path = ensure_tree(args[0])
    except EngineTreeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
