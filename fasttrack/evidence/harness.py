"""The harness's own identity: which fasttrack code timed, tested and collected a bundle.

`harness_digest()` hashes the modules that run at collection (typed, sorted entries), so a statement says
which harness produced it and `verify` can hold it to the policy's accepted digests. `engine_base_commit`
names the engine commit the contribution was collected against.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

HARNESS_MODULES: tuple[str, ...] = (
    "baseline", "bench_worker", "collect", "contract", "environment", "graph_count", "pytest_plugin",
    "ranks", "sanitizer", "timing",
)


def harness_files() -> list[Path]:
    here = Path(__file__).resolve().parent
    return [here / f"{name}.py" for name in HARNESS_MODULES if (here / f"{name}.py").is_file()]


def harness_digest() -> str:
    """sha256 over (name, bytes) of every harness module, in name order."""
    h = hashlib.sha256(b"fasttrack-harness-v1\0")
    for path in sorted(harness_files(), key=lambda p: p.name):
        data = path.read_bytes()
        h.update(f"file\0{path.name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def engine_base_commit(repo: Path) -> str | None:
    """The merge base of HEAD with the default branch (origin/HEAD, main, master), else HEAD; None outside
    a git checkout."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=20,
                                 check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None

    for ref in ("origin/HEAD", "main", "master"):
        base = git("merge-base", "HEAD", ref)
        if base:
            return base
    return git("rev-parse", "HEAD")


if __name__ == "__main__":
    print(harness_digest())
