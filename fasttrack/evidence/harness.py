"""The harness that produces evidence, named by one digest the statement records and the policy accepts.

The harness is the fixed list of modules in `HARNESS_MODULES` (timing, the pytest plugin, the bench worker,
the collector and what they call to rank, count graphs, sanitise, read the environment and check the
contract), plus the engine-baseline loader `baseline.py` when this fasttrack has one. `harness_digest()` is
sha256 over `fasttrack-harness-digest-v1\\n` and the lines `<name>\\0<entry hash>\\n` in name order, each
entry typed as in `fasttrack.evidence.digest` (a file: sha256(`file\\0` + bytes); a symlink:
sha256(`symlink\\0` + target); a module of the fixed list that is missing: sha256(`missing\\0`)), so any
byte of any harness module, a swap of a file for a symlink, or a removed module changes it.

The collector records it as `predicate.collector.harness_digest`; verify (FT402) accepts a statement only
when that digest is one of the policy's `[evidence] accepted_harness_digests` (the released fasttrack's).
`python -m fasttrack.evidence.harness` prints the digest of this installation (`--list`: per module).

`engine_base_commit(repo)` is the engine commit the collection was based on: the merge base of HEAD with
the default branch when it can be determined, else HEAD; None outside a git checkout.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from pathlib import Path

from fasttrack.evidence.digest import entry_hash, file_entry_hash

HARNESS_FORMAT = 1
_HEADER = b"fasttrack-harness-digest-v1\n"
HARNESS_MODULES: tuple[str, ...] = (
    "timing", "pytest_plugin", "bench_worker", "collect", "ranks", "graph_count", "sanitizer", "environment",
    "contract", "baseline", "backends", "audit", "reaper", "digest", "isolation", "stream", "measurement",
)
OPTIONAL_MODULES: tuple[str, ...] = ()


def package_dir() -> Path:
    return Path(__file__).resolve().parent


def harness_files(directory: Path | None = None) -> list[Path]:
    """The harness modules (fixed list, then the optional ones that exist), in `directory` (default: this
    installation's fasttrack/evidence/)."""
    where = Path(directory) if directory is not None else package_dir()
    files = [where / f"{name}.py" for name in HARNESS_MODULES]
    files += [where / f"{name}.py" for name in OPTIONAL_MODULES if os.path.lexists(where / f"{name}.py")]
    return files


def harness_entries(directory: Path | None = None) -> dict[str, str]:
    """{`fasttrack/evidence/<module>.py`: typed entry hash} for every harness module."""
    out: dict[str, str] = {}
    for path in harness_files(directory):
        name = f"fasttrack/evidence/{path.name}"
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            out[name] = entry_hash("missing", b"")
            continue
        if stat.S_ISLNK(st.st_mode):
            out[name] = entry_hash("symlink", os.fsencode(os.readlink(path)))
        elif stat.S_ISREG(st.st_mode):
            out[name] = file_entry_hash(path)
        else:
            out[name] = entry_hash("other", b"not a regular file")
    return out


def harness_digest(directory: Path | None = None) -> str:
    """sha256 over the typed, sorted (name, content) entries of the harness modules (see the module doc)."""
    h = hashlib.sha256(_HEADER)
    for name, value in sorted(harness_entries(directory).items()):
        h.update(name.encode() + b"\0" + value.encode() + b"\n")
    return h.hexdigest()


def engine_base_commit(repo: Path) -> str | None:
    """The merge base of HEAD with the default branch (`origin/HEAD`, `main`, `master`), else HEAD; None when
    `repo` is not a git checkout with a commit."""
    from fasttrack.trusted import commit_of, is_git_checkout, merge_base_with_default

    try:
        if not is_git_checkout(Path(repo)):
            return None
        found = merge_base_with_default(Path(repo))
        return found[0] if found else commit_of(Path(repo), "HEAD")
    except Exception:  # a missing git binary, an unreadable repository: no commit to record
        return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] not in ("--list",):
        print("usage: python -m fasttrack.evidence.harness [--list]", file=sys.stderr)
        return 2
    if args:
        for name, value in sorted(harness_entries().items()):
            print(f"{value}  {name}")
    print(harness_digest())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
