"""Child side: the engine as recording stand-ins (runs inside the sandbox, never in fasttrack's process).

A meta-path finder answers every import under an engine package (`vllm.*`) with a stand-in module whose
attributes are auto-created stand-in classes; the contribution's own modules under the engine's package are
loaded from their files. Every attribute write or delete on a stand-in module, class or engine-made object,
every item assignment, every call of a registering name (`register*`, `add*`, `update`, ...) and every
subclassing of a stand-in is reported to the `Recorder` (which attributes it to the contribution's line).
Nothing of the real engine is executed.
"""

from __future__ import annotations

import abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

Recorder = Callable[[str, str, str], None]  # (kind, target, detail)

REGISTERING = ("register", "add", "update", "setdefault", "append", "extend", "insert", "set", "patch",
               "override", "install", "enable", "disable", "push", "put", "__setitem__")
_ENGINE = "_ft_engine"  # in a class's own __dict__: the dotted name of the engine object it stands for
_ABC_BOOKKEEPING = frozenset({"__abstractmethods__", "_abc_impl"})  # what ABCMeta writes on a new class
_RECORDERS: list[Recorder] = []  # the one recorder of this child process (installed once by `install`)


def _record(kind: str, target: str, detail: str = "") -> None:
    for rec in _RECORDERS:
        rec(kind, target, detail)


def _is_standin(cls: type) -> bool:
    return _ENGINE in cls.__dict__


def _registering(qualname: str) -> bool:
    last = qualname.rsplit(".", 1)[-1].split("(")[0].lower()
    return any(last.startswith(p) for p in REGISTERING)


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


class _Meta(abc.ABCMeta):
    """Metaclass of every stand-in class (and so of contribution classes that subclass one)."""

    def __init__(cls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **kw: Any) -> None:
        super().__init__(name, bases, ns, **kw)
        if _ENGINE not in ns:
            for base in bases:
                if isinstance(base, _Meta) and _is_standin(base):
                    _record("engine-subclass", base.__dict__[_ENGINE], f"class {name}")

    def __getattr__(cls, name: str) -> Any:
        if _dunder(name) or not _is_standin(cls):
            raise AttributeError(name)
        child = make_class(f"{cls.__dict__[_ENGINE]}.{name}")
        type.__setattr__(cls, name, child)
        return child

    def __setattr__(cls, name: str, value: Any) -> None:
        if _is_standin(cls) and name not in _ABC_BOOKKEEPING:
            _record("engine-write", f"{cls.__dict__[_ENGINE]}.{name}", "attribute write")
        super().__setattr__(name, value)

    def __delattr__(cls, name: str) -> None:
        if _is_standin(cls):
            _record("engine-write", f"{cls.__dict__[_ENGINE]}.{name}", "attribute delete")
        super().__delattr__(name)

    def __setitem__(cls, key: Any, value: Any) -> None:
        _record("engine-registration", f"{cls.__dict__.get(_ENGINE, cls.__qualname__)}[{key!r}]",
                "item assignment")

    def __delitem__(cls, key: Any) -> None:
        _record("engine-registration", f"{cls.__dict__.get(_ENGINE, cls.__qualname__)}[{key!r}]",
                "item delete")

    def __getitem__(cls, key: Any) -> Any:
        return make_class(f"{cls.__dict__.get(_ENGINE, cls.__qualname__)}[]")

    def __iter__(cls) -> Any:
        return iter(())

    def __len__(cls) -> int:
        return 0

    def __contains__(cls, item: Any) -> bool:
        return False

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if _is_standin(cls):
            qual = cls.__dict__[_ENGINE]
            if _registering(qual):
                _record("engine-registration", qual, "call")
            if len(args) == 1 and not kwargs and _decoratable(args[0]) and _registering(qual):
                return args[0]  # a registering decorator used bare (`@engine.register`) hands it back
            return super().__call__(*args, **kwargs)
        return super().__call__(*args, **kwargs)


def _decoratable(obj: Any) -> bool:
    return isinstance(obj, (types.FunctionType, type))


class StandIn(metaclass=_Meta):
    """Base of every stand-in class; instances made by calling a stand-in are engine objects too."""

    _ft_engine = "<engine>"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def _ft_name(self) -> str:
        return f"{type(self).__dict__.get(_ENGINE, type(self).__qualname__)}()"

    def __getattr__(self, name: str) -> Any:
        if _dunder(name):
            raise AttributeError(name)
        return make_class(f"{self._ft_name()}.{name}")

    def __setattr__(self, name: str, value: Any) -> None:
        if _is_standin(type(self)):
            _record("engine-write", f"{self._ft_name()}.{name}", "attribute write on an engine object")
        object.__setattr__(self, name, value)

    def __setitem__(self, key: Any, value: Any) -> None:
        if _is_standin(type(self)):
            _record("engine-registration", f"{self._ft_name()}[{key!r}]", "item assignment")

    def __getitem__(self, key: Any) -> Any:
        return make_class(f"{self._ft_name()}[]")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and _decoratable(args[0]):
            return args[0]  # an engine decorator (`@engine.register("x")`): recorded when it was made
        return make_class(f"{self._ft_name()}()")()

    def __iter__(self) -> Any:
        return iter(())

    def __bool__(self) -> bool:
        return True


def make_class(qualname: str) -> type:
    """A fresh stand-in class for the engine object named `qualname`."""
    short = qualname.rsplit(".", 1)[-1].replace("[]", "").replace("()", "") or "StandIn"
    if not short.isidentifier():
        short = "StandIn"
    return _Meta(short, (StandIn,), {_ENGINE: qualname, "__module__": qualname.rsplit(".", 1)[0]})


class StandInModule(types.ModuleType):
    """An engine module: every missing attribute is a stand-in class; every write is recorded."""

    def __getattr__(self, name: str) -> Any:
        if _dunder(name):
            raise AttributeError(name)
        child = make_class(f"{self.__name__}.{name}")
        types.ModuleType.__setattr__(self, name, child)
        return child

    def __setattr__(self, name: str, value: Any) -> None:
        if not _machinery(self, name, value):
            _record("engine-write", f"{self.__name__}.{name}", "module attribute write")
        types.ModuleType.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        _record("engine-write", f"{self.__name__}.{name}", "module attribute delete")
        types.ModuleType.__delattr__(self, name)


def _machinery(module: types.ModuleType, name: str, value: Any) -> bool:
    """The import system's own writes: module metadata and binding a submodule to its parent."""
    if _dunder(name):
        return True
    return (isinstance(value, types.ModuleType) and value.__name__ == f"{module.__name__}.{name}"
            and sys.modules.get(value.__name__) is value)


class _Loader:
    """Loader of stand-in modules: an empty package that invents what is asked of it."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return StandInModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        types.ModuleType.__setattr__(module, "__path__", [])


class EngineFinder:
    """Meta-path finder: the contribution's own engine-side modules from their files, the rest stand-ins."""

    def __init__(self, engine_roots: Sequence[str], own_files: dict[str, str],
                 own_dirs: dict[str, str]) -> None:
        self.engine_roots = tuple(engine_roots)
        self.own_files = dict(own_files)  # dotted name -> file (a package's __init__.py)
        self.own_dirs = dict(own_dirs)  # dotted package name -> its directory
        self.loader = _Loader()
        self.standins: set[str] = set()

    def find_spec(self, name: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name in self.own_files:
            file = self.own_files[name]
            locations = [self.own_dirs[name]] if name in self.own_dirs else None
            return importlib.util.spec_from_file_location(name, file, submodule_search_locations=locations)
        if name in self.own_dirs:  # a directory of the contribution without __init__.py
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [self.own_dirs[name]]
            return spec
        if any(name == r or name.startswith(r + ".") for r in self.engine_roots):
            self.standins.add(name)
            return importlib.machinery.ModuleSpec(name, self.loader, is_package=True)  # type: ignore[arg-type]
        return None


class MissingFinder:
    """Last on sys.meta_path: a third-party package the engine depends on but this machine lacks
    (`einops`, `flashinfer`) is a stand-in too, so honest model code still imports; it is recorded."""

    def __init__(self, engine: EngineFinder) -> None:
        self.engine = engine
        self.missing: set[str] = set()

    def find_spec(self, name: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name in self.engine.own_files or name in self.engine.own_dirs:
            return None
        top = name.split(".")[0]
        if top != name and top not in self.missing:
            return None  # a missing submodule of a real package stays an ImportError
        self.missing.add(top)
        self.engine.standins.add(name)
        return importlib.machinery.ModuleSpec(name, self.engine.loader, is_package=True)  # type: ignore[arg-type]


def install(recorder: Recorder, finder: EngineFinder) -> MissingFinder:
    """Route stand-in events to `recorder`, put the engine finder first on sys.meta_path and the finder
    of missing dependencies last."""
    _RECORDERS.clear()
    _RECORDERS.append(recorder)
    sys.meta_path.insert(0, finder)
    missing = MissingFinder(finder)
    sys.meta_path.append(missing)
    return missing
