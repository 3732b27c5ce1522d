"""Model units of an engine tree, from both layouts, and the architecture registry read statically.

A *model unit* is one model's code:

- a package under ``packages_dir`` (``vllm/models/<model>/``), except the shared packages the policy names
  (``vllm/models/common``);
- an older single file (or small package) under ``legacy_dir`` (``vllm/model_executor/models/<name>.py``),
  except the helper modules the policy names (``utils``, ``interfaces``, ``registry``, ...).

The registry (``vllm/model_executor/models/registry.py``) is read with :mod:`ast`, never imported: every
module-level dict literal whose entries look like ``"Arch": ("module", "Class")`` contributes; a module name
that does not start with the root package is relative to the legacy directory, as vLLM resolves it.
"""

from __future__ import annotations

import ast
import hashlib
import marshal
import os
import tempfile
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fasttrack.confinement.graph import ModuleGraph
from fasttrack.policy import ModelLayout


class RegistryError(Exception):
    """The registry file exists but cannot be read (syntax error, not UTF-8)."""


@dataclass(frozen=True)
class ModelUnit:
    name: str
    kind: Literal["package", "legacy"]
    module: str  # the unit's top module: vllm.models.kimi_k3, vllm.model_executor.models.deepseek_v2
    path: str  # its directory (package) or file (legacy) relative to the tree root


@dataclass(frozen=True)
class RegistryEntry:
    architecture: str
    module: str  # absolute module name
    class_name: str
    line: int  # the key's line
    end_line: int  # the value's last line (entries may span several lines)


@dataclass(frozen=True)
class Registry:
    path: str | None
    entries: tuple[RegistryEntry, ...] = ()
    note: str | None = None

    def touched_by(self, lines: set[int]) -> list[str]:
        """Architectures whose entry spans any of `lines` (added or changed lines of a registry edit)."""
        return sorted({e.architecture for e in self.entries if any(e.line <= n <= e.end_line for n in lines)})

    def by_module(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for e in self.entries:
            archs = out.setdefault(e.module, [])
            if e.architecture not in archs:
                archs.append(e.architecture)
        return out


def _dir_module(path: str) -> str:
    return path.strip("/").replace("/", ".")


@dataclass
class UnitIndex:
    """Classifies modules and paths into model units (or None for shared code)."""

    layout: ModelLayout
    package: str
    _packages_mod: str = field(init=False)
    _legacy_mod: str | None = field(init=False)

    def __post_init__(self) -> None:
        self._packages_mod = _dir_module(self.layout.packages_dir)
        self._legacy_mod = _dir_module(self.layout.legacy_dir) if self.layout.legacy_dir else None

    def unit_of_path(self, path: str) -> ModelUnit | None:
        parts = path.strip("/").split("/")
        pk = self.layout.packages_dir.strip("/").split("/")
        if len(parts) > len(pk) + 1 and parts[: len(pk)] == pk:
            name = parts[len(pk)]
            if name not in self.layout.shared_packages and name.isidentifier():
                return ModelUnit(name, "package", f"{self._packages_mod}.{name}", "/".join([*pk, name]))
        if self.layout.legacy_dir:
            lg = self.layout.legacy_dir.strip("/").split("/")
            if len(parts) > len(lg) and parts[: len(lg)] == lg:
                first = parts[len(lg)]
                single_file = len(parts) == len(lg) + 1
                if single_file and not first.endswith(".py"):
                    return None
                name = first[:-3] if single_file else first
                if name == "__init__" or name in self.layout.legacy_shared or not name.isidentifier():
                    return None
                return ModelUnit(name, "legacy", f"{self._legacy_mod}.{name}", "/".join([*lg, first]))
        return None

    def unit_of_module(self, module: str, path: str | None = None) -> ModelUnit | None:
        """The unit of `module` (at `path` when known; else read as a package, which both layouts accept)."""
        if path is None:
            path = module.replace(".", "/") + "/__init__.py"
        return self.unit_of_path(path)


MAX_REGISTRY_BYTES = 16 * 1024 * 1024  # the registry is read whole: a file larger than this is refused
_REGISTRY_CACHE_FORMAT = 1


def _registry_key(raw: bytes, legacy_mod: str, package: str) -> str:
    h = hashlib.sha256(f"fasttrack-registry/{_REGISTRY_CACHE_FORMAT}/{legacy_mod}/{package}\n".encode())
    h.update(raw)
    return h.hexdigest()


def _cached_entries(path: Path, key: str) -> tuple[RegistryEntry, ...] | None:
    """The entries stored under `path` for `key` (marshal: a tuple of (str, str, str, int, int) rows), or
    None for a miss, a corrupt file or another key."""
    try:
        data = marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if not (isinstance(data, tuple) and len(data) == 2 and data[0] == key and isinstance(data[1], tuple)):
        return None
    out = []
    for row in data[1]:
        if not (isinstance(row, tuple) and len(row) == 5 and all(type(v) is str for v in row[:3])
                and all(type(v) is int for v in row[3:])):
            return None
        out.append(RegistryEntry(*row))
    return tuple(out)


def _store_entries(path: Path, key: str, entries: tuple[RegistryEntry, ...]) -> None:
    """Write atomically; a failure only costs speed."""
    rows = tuple((e.architecture, e.module, e.class_name, e.line, e.end_line) for e in entries)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".registry-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(marshal.dumps((key, rows)))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return


def read_registry(root: Path, layout: ModelLayout, package: str, *,
                  cache_dir: Path | None = None) -> Registry:
    """Architectures -> modules from the registry file, read with ast. A missing file is an empty registry.

    With `cache_dir`, the entries are kept there keyed by a digest of the file's bytes (and the package
    names), so an unchanged registry is not parsed again (about 30 ms for vLLM's); `None` never caches.
    """
    if not layout.registry:
        return Registry(path=None, note="the policy names no registry")
    rel = layout.registry
    p = root / rel
    if p.is_symlink() or not p.is_file():
        return Registry(path=rel, note=f"{rel} is not in the tree")
    legacy_mod = _dir_module(layout.legacy_dir) if layout.legacy_dir else package
    from fasttrack.safe_read import NotRegular, read_regular

    try:
        data = read_regular(p, MAX_REGISTRY_BYTES)
    except NotRegular:
        return Registry(path=rel, note=f"{rel} is not a regular file")
    if data is None:
        raise RegistryError(f"{rel} is over {MAX_REGISTRY_BYTES} bytes: not read")
    raw = data
    digest = _registry_key(raw, legacy_mod, package)
    cache_file = cache_dir / f"registry-{digest[:40]}.bin" if cache_dir is not None else None
    if cache_file is not None and (hit := _cached_entries(cache_file, digest)) is not None:
        return Registry(path=rel, entries=hit)
    try:
        tree = ast.parse(raw.decode("utf-8"), filename=rel)
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        raise RegistryError(f"{rel}: cannot read the registry statically: {exc}") from None
    entries: list[RegistryEntry] = []
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if not isinstance(value, ast.Dict):
            continue
        for key, val in zip(value.keys, value.values, strict=True):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                continue
            if not (isinstance(val, ast.Tuple) and len(val.elts) == 2 and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in val.elts)):
                continue
            mod_name = str(val.elts[0].value)  # type: ignore[attr-defined]
            cls_name = str(val.elts[1].value)  # type: ignore[attr-defined]
            if not (mod_name == package or mod_name.startswith(package + ".")):
                mod_name = f"{legacy_mod}.{mod_name}"
            entries.append(RegistryEntry(key.value, mod_name, cls_name, key.lineno,
                                         val.end_lineno or key.lineno))
    if cache_file is not None:
        _store_entries(cache_file, digest, tuple(entries))
    return Registry(path=rel, entries=tuple(entries))


def model_code_modules(graph: ModuleGraph, units: UnitIndex) -> frozenset[str]:
    """Every module of the graph that belongs to some model unit."""
    return frozenset(m for m in graph.modules if units.unit_of_module(m, graph.path_of(m)) is not None)


def architectures_through(graph: ModuleGraph, start: Iterable[str], allowed: Callable[[str], bool],
                          by_module: dict[str, list[str]]) -> list[str]:
    """Registered architectures whose module reaches any of `start` through `allowed` modules only.

    Walks importers upward from `start`, stepping only into modules `allowed` accepts (model code: modules of
    model units, and the target model's root), never into shared code: an architecture "runs through" a file
    if its registered module imports it directly or through other models' code (deepseek_v2.py serves
    DeepseekV3ForCausalLM, and also every registered model whose file imports deepseek_v2).
    """
    seen = set(start)
    queue = deque(seen)
    while queue:
        m = queue.popleft()
        for importer in graph.importers(m):
            if importer not in seen and allowed(importer):
                seen.add(importer)
                queue.append(importer)
    archs: set[str] = set()
    for m in seen:
        archs.update(by_module.get(m, []))
    return sorted(archs)
