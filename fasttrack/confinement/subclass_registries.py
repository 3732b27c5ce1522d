"""Engine base classes that register their subclasses: defining a subclass fills a shared registry.

A model class `class K3Parser(ToolParser)` runs `ToolParser.__init_subclass__` (or the metaclass of the base)
when the model's module is imported. When that hook writes anywhere but the new class itself (a registry
dict, a list of plugins), the model's code now changes what the registry's readers see: a `registry` link in
the blast radius, from the module holding the base class (and those of its importers that name the
registry) to the changed module.

Read from the sources with `ast`; bases are followed through the tree's files (re-exports too), a few levels
deep. A metaclass other than the standard ones (ABCMeta, EnumMeta, type) counts as registering (fail closed).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass

_PLAIN_METACLASSES = frozenset({"type", "ABCMeta", "abc.ABCMeta", "EnumMeta", "enum.EnumMeta", "EnumType",
                                "enum.EnumType", "typing.Protocol", "Protocol"})
_MUTATORS = frozenset({"append", "add", "update", "setdefault", "__setitem__", "insert", "extend"})
_MAX_DEPTH = 4


@dataclass(frozen=True)
class RegisteringBase:
    """Class `class_name` (line `line` of the changed module) subclasses `base`, whose `how` (defined in
    `module`) writes into `registry` (a name in that module; `None` when it cannot be named)."""

    class_name: str
    line: int
    base: str
    module: str
    how: str
    registry: str | None


def _imports(tree: ast.Module, module: str, is_package: bool) -> dict[str, str]:
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    names[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)] if node.level - 1 <= len(parts) else []
                base = ".".join(parts + ([node.module] if node.module else []))
            for a in node.names:
                if a.name != "*" and base:
                    names[a.asname or a.name] = f"{base}.{a.name}"
    return names


def _dotted(node: ast.expr, names: Mapping[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, names)
        return f"{base}.{node.attr}" if base else None
    if isinstance(node, ast.Subscript):  # Generic[T]-style bases
        return _dotted(node.value, names)
    return None


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _hook_writes(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[bool, str | None]:
    """Whether `__init_subclass__` writes to something other than the class it is given, and the name."""
    first = [*fn.args.posonlyargs, *fn.args.args]
    cls = first[0].arg if first else "cls"
    for node in ast.walk(fn):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [t for t in node.targets if isinstance(t, ast.Subscript | ast.Attribute)]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign) and isinstance(node.target,
                                                                           ast.Subscript | ast.Attribute):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr in _MUTATORS or node.func.attr.startswith("register")):
            targets = [node.func.value]
        for t in targets:
            root = _root(t)
            if root != cls and root not in ("super", None):
                return True, root
            if root == cls and isinstance(t, ast.Attribute) and t.attr in ("__bases__", "__mro__"):
                return True, None
    return False, None


class _Finder:
    def __init__(self, files: Mapping[str, str], read: Callable[[str], str | None], package: str) -> None:
        self.files = files
        self.read = read
        self.package = package
        self._trees: dict[str, tuple[ast.Module, dict[str, str]] | None] = {}

    def parsed(self, module: str) -> tuple[ast.Module, dict[str, str]] | None:
        if module not in self._trees:
            rel = self.files.get(module)
            text = self.read(rel) if rel else None
            entry = None
            if text is not None:
                try:
                    tree = ast.parse(text)
                    entry = (tree, _imports(tree, module, bool(rel and rel.endswith("__init__.py"))))
                except (SyntaxError, ValueError, RecursionError):
                    entry = None
            self._trees[module] = entry
        return self._trees[module]

    def locate(self, dotted: str, depth: int = 0) -> tuple[str, ast.ClassDef, dict[str, str]] | None:
        """The module and ClassDef a dotted class name refers to, following re-exports."""
        mod, _, name = dotted.rpartition(".")
        if not mod or depth > _MAX_DEPTH or mod not in self.files:
            return None
        parsed = self.parsed(mod)
        if parsed is None:
            return None
        tree, names = parsed
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return mod, node, names
        if name in names and names[name] != dotted:
            return self.locate(names[name], depth + 1)
        return None

    def registering(self, dotted: str, depth: int = 0) -> tuple[str, str, str | None] | None:
        """(module, how, registry) for the first class in `dotted`'s ancestry that registers subclasses."""
        if depth > _MAX_DEPTH or not dotted.startswith(self.package + "."):
            return None
        found = self.locate(dotted)
        if found is None:
            return None
        mod, cls, names = found
        for kw in cls.keywords:
            if kw.arg == "metaclass":
                meta = _dotted(kw.value, names) or ast.unparse(kw.value)
                short = meta.rsplit(".", 1)[-1]
                if meta not in _PLAIN_METACLASSES and short not in _PLAIN_METACLASSES:
                    return mod, f"metaclass {short}", short
        for node in cls.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "__init_subclass__":
                writes, registry = _hook_writes(node)
                if writes:
                    return mod, "__init_subclass__", registry
        for base in cls.bases:
            b = _dotted(base, names)
            if b is None and isinstance(base, ast.Name):
                b = f"{mod}.{base.id}"
            hit = self.registering(b, depth + 1) if b else None
            if hit is not None:
                return hit
        return None

    def _bases(self, mod: str, cls: ast.ClassDef, names: Mapping[str, str]) -> list[str]:
        out: list[str] = []
        for base in cls.bases:
            b = _dotted(base, names)
            if b is None and isinstance(base, ast.Name):
                b = base.id if base.id in ("type", "object") else f"{mod}.{base.id}"
            if b is not None:
                out.append(b)
        return out

    def metaclass_of(self, dotted: str, depth: int = 0) -> tuple[str, str, str | None] | None:
        """(module, how, registry) for the first non-standard metaclass in `dotted`'s ancestry: what
        `type(cls)(name, bases, ns)` / `cls.__class__(...)` runs."""
        if depth > _MAX_DEPTH or not dotted.startswith(self.package + "."):
            return None
        found = self.locate(dotted)
        if found is None:
            return None
        mod, cls, names = found
        for kw in cls.keywords:
            if kw.arg == "metaclass":
                meta = _dotted(kw.value, names) or ast.unparse(kw.value)
                short = meta.rsplit(".", 1)[-1]
                if meta not in _PLAIN_METACLASSES and short not in _PLAIN_METACLASSES:
                    return mod, f"metaclass {short}", short
        for b in self._bases(mod, cls, names):
            hit = self.metaclass_of(b, depth + 1)
            if hit is not None:
                return hit
        return None

    def is_metaclass(self, dotted: str, depth: int = 0) -> bool:
        """Whether an engine class derives from `type` (or a standard metaclass): calling it makes a class."""
        if depth > _MAX_DEPTH:
            return False
        if dotted in _PLAIN_METACLASSES or dotted in ("builtins.type",):
            return True
        found = self.locate(dotted) if dotted.startswith(self.package + ".") else None
        if found is None:
            return False
        mod, cls, names = found
        return any(self.is_metaclass(b, depth + 1) for b in self._bases(mod, cls, names))


def _metaclass_call(node: ast.Call, names: Mapping[str, str]) -> tuple[str, str] | None:
    """A metaclass called directly, as `type(X)(...)` / `X.__class__(...)` ("of", X) or `M(...)` with M a
    dotted engine name ("meta", M); None for other calls. Judged only with three arguments."""
    if len(node.args) + len(node.keywords) != 3:
        return None
    f = node.func
    if isinstance(f, ast.Call) and isinstance(f.func, ast.Name) and f.func.id == "type" and \
            "type" not in names and len(f.args) == 1 and not f.keywords:
        of = _dotted(f.args[0], names)
        return ("of", of) if of else None
    if isinstance(f, ast.Attribute) and f.attr == "__class__":
        of = _dotted(f.value, names)
        return ("of", of) if of else None
    meta = _dotted(f, names)
    return ("meta", meta) if meta and meta not in ("type", "builtins.type", "types.new_class") else None


def _created_class(node: ast.AST, names: Mapping[str, str]) -> tuple[str, list[ast.expr]] | None:
    """(name, bases) of a class the node creates: a class statement, or the dynamic forms that run the same
    `__init_subclass__` and metaclass (`type(name, bases, ns)`, `types.new_class(name, bases, ...)`, a
    metaclass called directly: `Meta(name, bases, ns)`, `type(X)(...)`)."""
    if isinstance(node, ast.ClassDef):
        return node.name, list(node.bases)
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Name) and node.func.id == "type" and "type" not in names:
        maker = "type"
    else:
        maker = _dotted(node.func, names) or ""
    if _metaclass_call(node, names) is not None:
        maker = "type"  # judged like type(name, bases, ns); the metaclass itself in registering_bases
    if maker not in ("type", "builtins.type", "types.new_class") or (maker != "types.new_class" and (
            len(node.args) + len(node.keywords) != 3)):
        return None
    given = node.args[1] if len(node.args) > 1 else next(
        (k.value for k in node.keywords if k.arg == "bases"), None)
    if not isinstance(given, ast.Tuple | ast.List):
        return None  # computed bases: the escape scan reports those (FT146)
    first = node.args[0] if node.args else None
    name = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else "<dynamic>"
    return f"{name} (dynamic)", [b.value if isinstance(b, ast.Starred) else b for b in given.elts]


def _direct_metaclass(finder: _Finder, dotted: str) -> tuple[str, str, str | None] | None:
    """(module, how, registry) when `dotted` is an engine metaclass other than the standard ones (counted as
    registering, like a class statement's `metaclass=`); None for a plain one or an ordinary class."""
    if not finder.is_metaclass(dotted):
        return None  # an ordinary call with three arguments
    short = dotted.rsplit(".", 1)[-1]
    if dotted in _PLAIN_METACLASSES or short in _PLAIN_METACLASSES:
        return None
    located = finder.locate(dotted)
    return (located[0] if located is not None else dotted.rpartition(".")[0]), f"metaclass {short}", short


def registering_bases(source: str, module: str, is_package: bool, files: Mapping[str, str],
                      read: Callable[[str], str | None], package: str,
                      own_prefix: str | None) -> list[RegisteringBase]:
    """Classes of `source` (module `module`) whose engine base (outside `own_prefix`) registers them."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    names = _imports(tree, module, is_package)
    finder = _Finder(files, read, package)
    out: list[RegisteringBase] = []
    for node in ast.walk(tree):
        created = _created_class(node, names)
        if created is None or not isinstance(node, ast.ClassDef | ast.Call):
            continue
        class_name, bases = created
        meta = _metaclass_call(node, names) if isinstance(node, ast.Call) else None
        if meta is not None and not (own_prefix is not None and (
                meta[1] == own_prefix or meta[1].startswith(own_prefix + "."))):
            kind, maker = meta
            made = finder.metaclass_of(maker) if kind == "of" else _direct_metaclass(finder, maker)
            if made is not None:
                out.append(RegisteringBase(class_name, node.lineno, maker, made[0], made[1], made[2]))
                continue
        for base in bases:
            dotted = _dotted(base, names)
            if dotted is None or (own_prefix is not None and (
                    dotted == own_prefix or dotted.startswith(own_prefix + "."))):
                continue
            hit = finder.registering(dotted)
            if hit is not None:
                out.append(RegisteringBase(class_name, node.lineno, dotted, hit[0], hit[1], hit[2]))
                break
    return out
