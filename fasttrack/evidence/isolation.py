"""What the engine's own pass may import and run at start-up, fixed before any contribution code runs.

The phases before the engine pass (the environment probe, the kernel tests, the contribution's pass of a
smaller TP size) run contribution code with write access to the checkout. Whatever of its files the engine's
process imports or runs at start-up is code in that process: a module added to the engine's baseline package
(`import_package_tree` imports every one before the guard's snapshot), an edited `fasttrack/__init__.py`, a
`sitecustomize.py` or a module named like a standard library one in a directory on its `PYTHONPATH` (which
comes before the standard library), a `.pth` file in site-packages. So (docs/baseline-contract.md):

* `surface(...)`, taken when the collection starts, lists the two package trees the engine pass imports
  from the checkout (the baseline's top package, e.g. `baselines/`, and `fasttrack/`) and the start-up files
  of the interpreter's site and standard library directories (`*.pth`, `sitecustomize`, `usercustomize`);
* the library directories of the collector's `PYTHONPATH` outside the checkout (FlashInfer carried onto
  the box) are listed in the surface too, and follow the copies on the engine's path (`engine_pythonpath`);
* `import_root(...)`, right before each engine pass (after every earlier process is gone), copies those two
  trees into a fresh directory, the only entry of the engine process's `PYTHONPATH`, and compares the copies
  and the start-up files with the surface: any file added, removed or changed stops the pass, named.

The engine process also runs without the user site-packages (`PYTHONNOUSERSITE`) and with fresh cache
directories for the compilers that keep one (`engine_cache_env`): a kernel binary left in a shared cache by
contribution code is never loaded as the engine's.
"""

from __future__ import annotations

import os
import shutil
import site
import sysconfig
from pathlib import Path

from fasttrack.evidence.digest import compare_listings, contribution_digest, entry_hash, file_entry_hash

STARTUP_NAMES = ("sitecustomize", "usercustomize")
# Caches of compiled kernels the engine's libraries keep outside the process (env var -> sub-directory).
CACHE_VARS = {
    "XDG_CACHE_HOME": "xdg", "TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "CUDA_CACHE_PATH": "cuda", "FLASHINFER_WORKSPACE_BASE": "flashinfer", "VLLM_CACHE_ROOT": "vllm",
}


def fasttrack_package() -> Path:
    return Path(__file__).resolve().parents[1]


def startup_dirs() -> list[Path]:
    """The directories whose start-up files every Python process of this interpreter reads: site-packages
    (`.pth`, `sitecustomize`) and the standard library (`sitecustomize`). The user site is off in the engine
    pass."""
    dirs = [*site.getsitepackages(), sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]]
    out: list[Path] = []
    for d in dirs:
        p = Path(d)
        if p not in out:
            out.append(p)
    return out


def startup_files(dirs: list[Path]) -> dict[str, str]:
    """{path: entry hash} of the `.pth` files and the `sitecustomize`/`usercustomize` modules or packages in
    `dirs` (a package by its tree's digest)."""
    out: dict[str, str] = {}
    for d in dirs:
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            stem = e.name.split(".", 1)[0]
            if not (e.name.endswith(".pth") or stem in STARTUP_NAMES):
                continue
            path = Path(e.path)
            if path.is_symlink():
                out[str(path)] = entry_hash("symlink", os.fsencode(os.readlink(path)))
            elif path.is_dir():
                out[str(path)] = entry_hash("dir", contribution_digest(path).sha256.encode())
            elif path.is_file():
                out[str(path)] = file_entry_hash(path)
            else:
                out[str(path)] = entry_hash("other", b"not a regular file")
    return out


def package_trees(engine_root: Path, case_entry: str) -> dict[str, Path]:
    """{top package name: its directory} the engine pass imports from the checkout."""
    top = case_entry.split(":", 1)[0].split(".")[0]
    trees = {top: engine_root / top}
    trees.setdefault("fasttrack", fasttrack_package())
    return trees


LIBRARY_PREFIX = "library:"


def library_dirs(pythonpath: str, checkout: Path) -> list[Path]:
    """The collector's `PYTHONPATH` entries outside the checkout (third-party libraries carried onto the
    box, e.g. FlashInfer unpacked into /tmp/site): the engine pass needs them, so they are on its path
    after the copied trees, checked against the surface like the trees. Entries inside the checkout (the
    checkout root, `kernels/`) are the contribution's side and never on the engine's path."""
    root = checkout.resolve()
    out: list[Path] = []
    for entry in pythonpath.split(os.pathsep):
        if not entry:
            continue
        p = Path(entry).resolve()
        if p == root or root in p.parents or not p.is_dir() or p in out:
            continue
        out.append(p)
    return out


def surface(engine_root: Path, case_entry: str, pythonpath: str = "") -> dict[str, dict[str, str]]:
    """The engine pass's import surface now: {package: its file listing, "library:<dir>": the listing of
    each library directory of `pythonpath` outside the checkout, "startup": start-up files}."""
    trees = package_trees(engine_root, case_entry)
    out = {name: contribution_digest(path).files for name, path in trees.items()}
    for d in library_dirs(pythonpath, engine_root):
        out[LIBRARY_PREFIX + str(d)] = contribution_digest(d).files
    out["startup"] = startup_files(startup_dirs())
    return out


def engine_pythonpath(root: Path, recorded: dict[str, dict[str, str]]) -> str:
    """The engine process's whole `PYTHONPATH`: the fresh import root, then the recorded library dirs."""
    libs = [k[len(LIBRARY_PREFIX):] for k in recorded if k.startswith(LIBRARY_PREFIX)]
    return os.pathsep.join([str(root), *libs])


def _named(delta_files: tuple[str, ...], prefix: str) -> str:
    shown = ", ".join(f"{prefix}{p}" for p in delta_files[:5])
    return shown + (f" and {len(delta_files) - 5} more" if len(delta_files) > 5 else "")


def import_root(dest: Path, engine_root: Path, case_entry: str,
                recorded: dict[str, dict[str, str]]) -> str | None:
    """Build the engine pass's import directory at `dest` (fresh: copies of the package trees, symlinks
    followed, no bytecode) and check it and the start-up files against `recorded`; None when they agree,
    else why the engine pass may not start."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    problems: list[str] = []
    for name, src in package_trees(engine_root, case_entry).items():
        try:
            shutil.copytree(src, dest / name, symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))
        except (OSError, shutil.Error) as exc:
            problems.append(f"{name}/ could not be copied for the engine pass ({exc})")
            continue
        delta = compare_listings(recorded.get(name, {}), contribution_digest(dest / name).files)
        for what, files in (("changed", delta.changed), ("added", delta.added), ("removed", delta.removed)):
            if files:
                problems.append(f"{_named(files, name + '/')} {what}")
    for key, listing in recorded.items():
        if not key.startswith(LIBRARY_PREFIX):
            continue
        lib = Path(key[len(LIBRARY_PREFIX):])
        delta = compare_listings(listing, contribution_digest(lib).files if lib.is_dir() else {})
        for what, files in (("changed", delta.changed), ("added", delta.added), ("removed", delta.removed)):
            if files:
                problems.append(f"library {_named(files, str(lib) + '/')} {what}")
    now = startup_files(startup_dirs())
    before = recorded.get("startup", {})
    moved = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
    if moved:
        problems.append(f"start-up file(s) {', '.join(moved[:5])} added, removed or changed")
    if not problems:
        return None
    return ("files the engine's own pass would import or run at start-up changed after the collection "
            "started (contribution code ran in an earlier phase): " + "; ".join(problems)[:1500])


def engine_cache_env(cache: Path) -> dict[str, str]:
    """Fresh directories for the compiled-kernel caches of the engine pass (created here)."""
    out: dict[str, str] = {"PYTHONNOUSERSITE": "1"}
    for var, sub in CACHE_VARS.items():
        d = cache / sub
        d.mkdir(parents=True, exist_ok=True)
        out[var] = str(d)
    return out
