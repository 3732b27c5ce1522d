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
# The recording path reads no global at run time: everything it needs is a positional default (a tuple,
# which cannot be changed in place; the tracer's guard refuses a new `__defaults__`). The module's globals
# are reachable through any of its functions' `__globals__` and can be changed without an audit event
# (tests/test_trace_reach.py, `recorders_swap.py`): a global swapped for a moment would silence it.
_CLASS_DICT = type.__dict__["__dict__"].__get__  # a class's own namespace, whatever its metaclass says
_STARTS = str.startswith
_ENDS = str.endswith


def _record(kind: str, target: str, detail: str = "", _recorders: tuple[Recorder, ...] = ()) -> None:
    for rec in _recorders:  # bound by `install`
        rec(kind, target, detail)


def _is_standin(cls: type, _engine: str = _ENGINE, _dict: Any = _CLASS_DICT) -> bool:
    return _engine in _dict(cls)


def _registering(qualname: str, _prefixes: tuple[str, ...] = REGISTERING, _starts: Any = _STARTS,
                 _any: Any = any) -> bool:
    last = qualname.rsplit(".", 1)[-1].split("(")[0].lower()
    return _any(_starts(last, p) for p in _prefixes)  # type: ignore[no-any-return]


def _dunder(name: str, _starts: Any = _STARTS, _ends: Any = _ENDS, _bool: Any = bool) -> bool:
    return _bool(_starts(name, "__") and _ends(name, "__"))  # type: ignore[no-any-return]  # str's own methods: a str subclass cannot lie


class _Meta(abc.ABCMeta):
    """Metaclass of every stand-in class (and so of contribution classes that subclass one)."""

    def __init__(cls, name: str, bases: tuple[type, ...], ns: dict[str, Any],
                 _init: Any = abc.ABCMeta.__init__, _engine: str = _ENGINE, _standin: Any = _is_standin,
                 _rec: Any = _record, _dict: Any = _CLASS_DICT, **kw: Any) -> None:
        _init(cls, name, bases, ns, **kw)
        if _engine not in ns:
            for base in bases:
                if _standin(base):
                    _rec("engine-subclass", _dict(base)[_engine], f"class {name}")

    def __getattr__(cls, name: str) -> Any:
        if _dunder(name) or not _is_standin(cls):
            raise AttributeError(name)
        child = make_class(f"{cls.__dict__[_ENGINE]}.{name}")
        type.__setattr__(cls, name, child)
        return child

    def __setattr__(cls, name: str, value: Any, _standin: Any = _is_standin, _rec: Any = _record,
                    _dict: Any = _CLASS_DICT, _engine: str = _ENGINE, _abc: Any = _ABC_BOOKKEEPING,
                    _set: Any = type.__setattr__, _str: Any = str.__str__) -> None:
        if _standin(cls) and _str(name) not in _abc:
            _rec("engine-write", f"{_dict(cls)[_engine]}.{name}", "attribute write")
        _set(cls, name, value)

    def __delattr__(cls, name: str, _standin: Any = _is_standin, _rec: Any = _record,
                    _dict: Any = _CLASS_DICT, _engine: str = _ENGINE, _del: Any = type.__delattr__) -> None:
        if _standin(cls):
            _rec("engine-write", f"{_dict(cls)[_engine]}.{name}", "attribute delete")
        _del(cls, name)

    def __setitem__(cls, key: Any, value: Any, _rec: Any = _record, _dict: Any = _CLASS_DICT,
                    _engine: str = _ENGINE) -> None:
        _rec("engine-registration", f"{_dict(cls).get(_engine, cls.__qualname__)}[{key!r}]",
             "item assignment")

    def __delitem__(cls, key: Any, _rec: Any = _record, _dict: Any = _CLASS_DICT,
                    _engine: str = _ENGINE) -> None:
        _rec("engine-registration", f"{_dict(cls).get(_engine, cls.__qualname__)}[{key!r}]", "item delete")

    def __getitem__(cls, key: Any) -> Any:
        return make_class(f"{cls.__dict__.get(_ENGINE, cls.__qualname__)}[]")

    def __iter__(cls) -> Any:
        return iter(())

    def __len__(cls) -> int:
        return 0

    def __contains__(cls, item: Any) -> bool:
        return False

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        call: Any = "_ft:call"  # `_meta_call`, a constant of this code (see `with_constants`)
        return call(cls, args, kwargs)


def _decoratable(obj: Any) -> bool:
    return isinstance(obj, (types.FunctionType, type))


def _meta_call(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any], _standin: Any = _is_standin,
               _rec: Any = _record, _dict: Any = _CLASS_DICT, _engine: str = _ENGINE,
               _reg: Any = _registering, _dec: Any = _decoratable, _call: Any = abc.ABCMeta.__call__) -> Any:
    if _standin(cls):
        qual = _dict(cls)[_engine]
        if _reg(qual):
            _rec("engine-registration", qual, "call")
        if len(args) == 1 and not kwargs and _dec(args[0]) and _reg(qual):
            return args[0]  # a registering decorator used bare (`@engine.register`) hands it back
    return _call(cls, *args, **kwargs)


def with_constants(func: Any, **deps: Any) -> Any:
    """`func` with each string constant `"_ft:<name>"` of its code replaced by `deps[name]`: what it reads
    then is no global, no closure cell and no keyword default (all changeable without an audit event), for a
    function that must take `*args` (no positional default can follow them). Its `__code__` cannot be
    replaced once the tracer's guard is in."""
    code = func.__code__
    func.__code__ = code.replace(co_consts=tuple(
        deps[c[4:]] if type(c) is str and c.startswith("_ft:") else c for c in code.co_consts))
    return func


with_constants(_Meta.__call__, call=_meta_call)


def _engine_name(obj: Any, _type: Any = type, _dict: Any = _CLASS_DICT, _engine: str = _ENGINE) -> str:
    cls = _type(obj)
    return f"{_dict(cls).get(_engine, cls.__qualname__)}()"


class StandIn(metaclass=_Meta):
    """Base of every stand-in class; instances made by calling a stand-in are engine objects too."""

    _ft_engine = "<engine>"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def _ft_name(self) -> str:
        return _engine_name(self)

    def __getattr__(self, name: str) -> Any:
        if _dunder(name):
            raise AttributeError(name)
        return make_class(f"{self._ft_name()}.{name}")

    def __setattr__(self, name: str, value: Any, _standin: Any = _is_standin, _rec: Any = _record,
                    _name: Any = _engine_name, _type: Any = type, _set: Any = object.__setattr__) -> None:
        if _standin(_type(self)):
            _rec("engine-write", f"{_name(self)}.{name}", "attribute write on an engine object")
        _set(self, name, value)

    def __setitem__(self, key: Any, value: Any, _standin: Any = _is_standin, _rec: Any = _record,
                    _name: Any = _engine_name, _type: Any = type) -> None:
        if _standin(_type(self)):
            _rec("engine-registration", f"{_name(self)}[{key!r}]", "item assignment")

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


def _module_name(module: Any, _get: Any = types.ModuleType.__getattribute__) -> Any:
    return _get(module, "__name__")


def _machinery(module: types.ModuleType, name: str, value: Any, _dunder: Any = _dunder,
               _isinstance: Any = isinstance, _module: type = types.ModuleType, _modules: Any = sys.modules,
               _name: Any = _module_name) -> bool:
    """The import system's own writes: module metadata and binding a submodule to its parent."""
    if _dunder(name):
        return True
    return (_isinstance(value, _module) and _name(value) == f"{_name(module)}.{name}"
            and _modules.get(_name(value)) is value)


class StandInModule(types.ModuleType):
    """An engine module: every missing attribute is a stand-in class; every write is recorded."""

    def __getattr__(self, name: str) -> Any:
        if _dunder(name):
            raise AttributeError(name)
        child = make_class(f"{self.__name__}.{name}")
        types.ModuleType.__setattr__(self, name, child)
        return child

    def __setattr__(self, name: str, value: Any, _machinery: Any = _machinery, _rec: Any = _record,
                    _set: Any = types.ModuleType.__setattr__, _name: Any = _module_name) -> None:
        if not _machinery(self, name, value):
            _rec("engine-write", f"{_name(self)}.{name}", "module attribute write")
        _set(self, name, value)

    def __delattr__(self, name: str, _rec: Any = _record, _del: Any = types.ModuleType.__delattr__,
                    _name: Any = _module_name) -> None:
        _rec("engine-write", f"{_name(self)}.{name}", "module attribute delete")
        _del(self, name)


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
    _record.__defaults__ = ("", (recorder,))  # what the recording path calls (see _CLASS_DICT)
    sys.meta_path.insert(0, finder)
    missing = MissingFinder(finder)
    sys.meta_path.append(missing)
    return missing
