"""FT135-FT137: the text analysed is the code that runs.

Every other FT1xx rule reads a changed file's text; these make sure that text is what the interpreter will
compile and that nothing else the import system can load sits in the model's directories:

- FT135 a changed Python file whose bytes Python would decode differently from the UTF-8 a reviewer sees
  (a PEP 263 cookie other than UTF-8, ASCII or Latin-1 over pure ASCII; an unknown codec; a BOM that
  conflicts with the cookie; bytes that are not UTF-8; a NUL byte);
- FT136 a changed file in the model's roots that the import system could load and that is not `.py`
  source: byte code (`.pyc`, `.pyo`, anything under `__pycache__/`), extension modules (`.so`, `.pyd`, every
  suffix of `importlib.machinery.EXTENSION_SUFFIXES`), `.pth` and `.egg-link` path files, importable
  archives (`.zip`, `.egg`, `.whl`), `.pyw`, or a `.py` suffix in another case;
- FT137 a module symlink in the model's roots (a `.py` link, or a link to a directory, i.e. a package)
  whose real target on disk (every link in the chain followed) is not a `.py` file, or not inside the
  model's roots, or does not exist. Links already in the tree count too: a PR that edits the `.txt` a `.py`
  link points to changes code without changing a `.py` file.
"""

from __future__ import annotations

import importlib.machinery
import posixpath
import sys
from collections.abc import Iterator

from fasttrack.confinement.zones import in_model_root
from fasttrack.facts.model import Facts
from fasttrack.facts.paths import head_paths
from fasttrack.findings import Finding
from fasttrack.rules.base import Catalogue

catalogue = Catalogue("source")

PY_SUFFIXES = (".py",)
_LOADABLE = frozenset({".pyc", ".pyo", ".pyd", ".so", ".pth", ".egg-link", ".pyw", ".zip", ".egg", ".whl",
                       *(s.lower() for s in importlib.machinery.EXTENSION_SUFFIXES),
                       *(s.lower() for s in importlib.machinery.BYTECODE_SUFFIXES)})
# Modules `site` imports by name from anywhere on sys.path, in every process.
_SITE_HOOKS = frozenset({"sitecustomize", "usercustomize"})


def _shadow_problem(ctx: Facts, path: str) -> str | None:
    """A module named like a `site` hook, or like a standard-library module in a directory with no
    `__init__.py` (a script's directory or a pytest rootdir that lands on sys.path[0]: there it replaces
    the stdlib module for the whole process, the evidence harness included)."""
    parts = path.split("/")
    stem = parts[-1][:-3] if parts[-1].endswith(".py") else parts[-1]
    if stem in _SITE_HOOKS:
        return f"is named `{stem}`, which `site` imports at start-up from any directory on sys.path"
    if stem not in sys.stdlib_module_names or stem == "__init__":
        return None
    if ctx.head_kind(posixpath.join(posixpath.dirname(path), "__init__.py")) == "file":
        return None
    return (f"is named like the standard-library module `{stem}` in a directory without `__init__.py`: "
            "when that directory is on sys.path (a script run from it, pytest's rootdir insertion) it "
            "replaces the real module for the whole process")


@catalogue.rule("FT135", "A changed Python file is not plain UTF-8 source: Python would run other text.")
def source_encoding(ctx: Facts) -> Iterator[Finding]:
    """The interpreter honours a PEP 263 coding cookie (`# coding: utf-7`), a UTF-8 byte-order mark and
    nothing else; `ast.parse` of decoded text, a diff viewer and a reviewer read UTF-8. A changed `.py` file
    (symlinks followed on disk) must be UTF-8, with no cookie or one naming UTF-8; an ASCII or Latin-1
    cookie is accepted only over pure ASCII bytes (the two readings are then the same text). Any other codec,
    an unknown one, a BOM contradicting the cookie, bytes that do not decode and NUL bytes are errors."""
    for path in head_paths(ctx):
        if not path.endswith(PY_SUFFIXES):
            continue
        change = next(c for c in ctx.changes if c.path == path)
        if change.binary and not change.is_symlink:
            continue  # FT106 reports binary files; FT128 reports that they cannot be analysed
        got = ctx.python_source(path)
        if not isinstance(got, str) and got.kind != "unreadable":  # a SourceProblem
            yield Finding.error("FT135", f"{path} {got.reason}", path=path, line=got.line,
                                fix="save the file as UTF-8 without a coding declaration (or with "
                                    "`# coding: utf-8`)")


def _suffix_problem(path: str) -> str | None:
    parts = path.split("/")
    if "__pycache__" in parts[:-1]:
        return "is in a __pycache__ directory (byte code the import system prefers over the source)"
    name = parts[-1].lower()
    for suffix in sorted(_LOADABLE, key=len, reverse=True):
        if name.endswith(suffix):
            return f"is a {suffix} file, which the import system (or site) can load instead of source"
    if name.endswith(".py") and not parts[-1].endswith(".py"):
        return "has a .py suffix in another case (a case-insensitive file system imports it)"
    return None


def _in_roots(ctx: Facts, path: str) -> bool:
    return ctx.model is not None and in_model_root(ctx.policy, ctx.engine_path(path), ctx.model)


@catalogue.rule("FT136", "A file in the model's roots is loadable code that is not Python source.")
def loadable_non_source(ctx: Facts) -> Iterator[Finding]:
    """Byte code, extension modules, `.pth` and `.egg-link` files, importable archives, `__pycache__/`
    entries and `.py` suffixes in another case can be loaded by the import system (or `site`) from the
    model's directories, and none of them is the reviewed UTF-8 `.py` text the analysis reads. A hash-based
    `.pyc` with `unchecked-hash` even replaces its `.py` whatever the source says. A module named
    `sitecustomize`/`usercustomize`, or like a standard-library module in a directory without
    `__init__.py`, replaces that module for every process whose sys.path holds the directory."""
    for path in head_paths(ctx):
        if not _in_roots(ctx, path):
            continue
        why = _suffix_problem(path) or _shadow_problem(ctx, path)
        if why is not None:
            yield Finding.error("FT136", f"{path} {why}", path=path,
                                fix="ship Python source only; drop compiled, path and archive files")


def _link_problem(ctx: Facts, link: str) -> str | None:
    assert ctx.model is not None
    name = posixpath.basename(link)
    facts = ctx.module_links[link]
    real = facts.real
    is_module = name.endswith(".py")
    if real is None:
        return ("is a symlink that does not resolve inside the tree (dangling, looping or leaving it)"
                if is_module or not facts.exists else None)
    if facts.real_kind == "dir":
        if in_model_root(ctx.policy, ctx.engine_path(real) + "/x", ctx.model) or \
                (ctx.mode == "contribution" and _under(real, ctx.contribution_dir)):
            return None
        return f"is a package symlinked out of the model's roots, to {real}"
    if not is_module:
        return None
    if not real.endswith(".py"):
        return f"is a module symlink whose real target {real} is not a .py file"
    inside = in_model_root(ctx.policy, ctx.engine_path(real), ctx.model) or \
        (ctx.mode == "contribution" and _under(real, ctx.contribution_dir))
    if not inside:
        return f"is a module symlinked out of the model's roots, to {real}"
    return None


def _under(path: str, directory: str | None) -> bool:
    return directory is not None and path.startswith(directory.rstrip("/") + "/")


@catalogue.rule("FT137", "A module symlink in the model's roots does not resolve to model-local .py source.")
def module_symlink(ctx: Facts) -> Iterator[Finding]:
    """A `.py` symlink is imported as the text it points to; a directory symlink is imported as the package
    it points to. Resolved on disk (every link of a chain followed, not normalised as a string), the target
    must be a `.py` file (or a directory) inside the model's roots. A link to a `.txt`, a module or package
    symlinked out of the model, and a dangling link are errors; links already in the tree count, since a PR
    can change what they run by editing their target."""
    if ctx.model is None:
        return
    for link in ctx.module_links:
        if not (_in_roots(ctx, link) or (ctx.mode == "contribution" and _under(link, ctx.contribution_dir))):
            continue
        why = _link_problem(ctx, link)
        if why is not None:
            yield Finding.error("FT137", f"{link} {why}", path=link,
                                fix="replace the symlink with the .py file itself, inside the model's roots")
