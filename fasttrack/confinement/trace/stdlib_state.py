"""Child side: stdlib and process state no module attribute shows (the `state:` keys of hostile review 24).

- `abc.registries`: the virtual subclasses registered with the stdlib's ABCs (`collections.abc`, `numbers`,
  `io`, `os`, `contextlib`, `typing`, `importlib.abc`, ...), read from the `_abc` C state (`_get_dump`): a
  `Sequence.register(dict)` changes `isinstance` for every caller. A class of the contribution's own
  registered with one is its own business (gather: `entries_effect`).
- `logging.handlers`: every live handler of `logging._handlerList`, lastResort and the root's, by its level,
  closed flag, filters, formatter and stream, read from its own `__dict__`; a handler there before that is
  changed or dropped (`lastResort.setLevel`, `dictConfig` closing every handler) is an effect, a new one is
  not. `logging.level_names`: the level <-> name tables (`addLevelName`).
- `sysconfig.*`: the cached config vars (`get_config_vars()` returns the cache itself) and the install
  schemes, primed before the trace (`seal`) so that their lazy fill is the baseline.
- `multiprocessing.executable` (spawn's `_python_exe`), `calendar.firstweekday` (the module's own
  TextCalendar), `typing.overloads` (typing's overload registry; the contribution's own functions are its
  own).
- process state: the scheduling policy and priority, the close-on-exec flags of fds 0-2, a sentinel child
  process (`fork_sentinel`: a zombie that an `os.waitpid(-1)` reaping the engine's children would take), and
  the sandbox's stdin (`seal`: a pipe of empty lines, no writer; a read of fd 0 by any route leaves fewer).
- round 25: `sys._xoptions`, the status flags of fds 0-2 (O_NONBLOCK), the `_CHUNK_SIZE` of the standard
  streams, instances a stdlib module holds for every caller (email.policy.default's header factory and its
  registry, multiprocessing's default and concrete contexts, the current process's config and authkey), and
  tables edited item by item (`gettext._localedirs`, `SimpleHTTPRequestHandler.extensions_map`).

Every reader reads plain values only (a contribution's `str` subclass or property must not run inside the
snapshot) and costs well under a millisecond.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import importlib
import io
import os
import sys
import termios
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from .torch_state import MISSING  # one sentinel for every module

_abc: Any = importlib.import_module("_abc")  # the ABCs' C state (no stubs)
_SENTINEL_PID: list[int] = []
# Modules whose ABCs are read (collections.abc is `_collections_abc`'s classes).
ABC_MODULES = ("_collections_abc", "numbers", "io", "os", "contextlib", "typing", "abc", "importlib.abc",
               "importlib.resources.abc", "selectors", "email._policybase")


def _plain(v: Any) -> Any:
    return v if type(v) in (str, bytes, int, float, bool, type(None)) else f"<{type(v).__name__} {id(v)}>"


_TYPE_MODULE = type.__dict__["__module__"]
_TYPE_QUALNAME = type.__dict__["__qualname__"]
_TYPE_DICT = type.__dict__["__dict__"]


def _class_name(cls: Any) -> tuple[Any, Any]:
    """(module, qualname) of a class through `type`'s own descriptors (no metaclass property runs)."""
    if not isinstance(cls, type):
        return "?", f"<{type(cls).__name__}>"
    try:
        return _plain(_TYPE_MODULE.__get__(cls)), _plain(_TYPE_QUALNAME.__get__(cls))
    except Exception:
        return "?", "?"


def _abcs() -> Iterable[type]:
    seen: set[int] = set()
    for name in ABC_MODULES:
        mod = sys.modules.get(name)
        if mod is None:
            continue
        try:
            values = list(vars(mod).values())
        except TypeError:
            continue
        for v in values:
            if isinstance(v, type) and id(v) not in seen and "_abc_impl" in _TYPE_DICT.__get__(v):
                seen.add(id(v))
                yield v


def _abc_registries() -> Any:
    out = set()
    for cls in _abcs():
        owner = "{}.{}".format(*_class_name(cls))
        try:
            registry = _abc._get_dump(cls)[0]
        except TypeError:
            continue
        for ref in registry:
            sub = ref()
            if sub is not None:
                out.add((owner, *_class_name(sub), id(sub)))
    return frozenset(out)


def _handlers() -> Any:
    lg = sys.modules.get("logging")
    if lg is None:
        return MISSING
    out = set()
    live = [ref() if type(ref) is weakref.ref else None for ref in list(getattr(lg, "_handlerList", ()))]
    root = vars(lg).get("root")
    try:
        held = object.__getattribute__(root, "__dict__").get("handlers") if root is not None else None
    except (AttributeError, TypeError):
        held = None
    # lastResort and the root's handlers even when they left the list (dictConfig empties it)
    for h in [*live, vars(lg).get("lastResort"), *(held if type(held) is list else ())]:
        if h is None:
            continue
        try:
            d = object.__getattribute__(h, "__dict__")
        except (AttributeError, TypeError):
            continue
        if type(d) is not dict:
            continue
        filters = d.get("filters")
        out.add((id(h), _class_name(type(h))[1], _plain(d.get("level")), _plain(d.get("_closed")),
                 len(filters) if type(filters) is list else -1, id(d.get("formatter")), id(d.get("stream"))))
    return frozenset(out)


def _level_names() -> Any:
    lg = sys.modules.get("logging")
    if lg is None:
        return MISSING
    out = []
    for table in ("_levelToName", "_nameToLevel"):
        value = vars(lg).get(table)
        out.append(frozenset((_plain(k), _plain(v)) for k, v in value.items()) if type(value) is dict
                   else _plain(value))
    return tuple(out)


def _sysconfig_vars() -> Any:
    sc = sys.modules.get("sysconfig")
    if sc is None:
        return MISSING
    value = vars(sc).get("_CONFIG_VARS")
    if type(value) is not dict:
        return _plain(value)
    return frozenset((_plain(k), id(v)) for k, v in value.items())


def _sysconfig_schemes() -> Any:
    sc = sys.modules.get("sysconfig")
    if sc is None:
        return MISSING
    value = vars(sc).get("_INSTALL_SCHEMES")
    if type(value) is not dict:
        return _plain(value)
    return frozenset((_plain(s), id(d), *((_plain(k), id(v)) for k, v in sorted(d.items(), key=repr)))
                     if type(d) is dict else (_plain(s), id(d)) for s, d in value.items())


def _mp_executable() -> Any:
    spawn = sys.modules.get("multiprocessing.spawn")
    return _plain(vars(spawn).get("_python_exe")) if spawn is not None else MISSING


def _calendar() -> Any:
    cal = sys.modules.get("calendar")
    if cal is None:
        return MISSING
    c = vars(cal).get("c")
    try:
        d = object.__getattribute__(c, "__dict__")
    except (AttributeError, TypeError):
        return _plain(c)
    return (id(c), _plain(d.get("_firstweekday"))) if type(d) is dict else id(c)


def _overloads() -> Any:
    t = sys.modules.get("typing")
    reg = vars(t).get("_overload_registry") if t is not None else None
    if not isinstance(reg, dict):
        return MISSING
    out = set()
    for mod, by_name in list(dict.items(reg)):
        for qual, by_line in list(dict.items(by_name)) if isinstance(by_name, dict) else ():
            for line, func in list(dict.items(by_line)) if isinstance(by_line, dict) else ():
                out.add((_plain(mod), _plain(qual), _plain(line), id(func)))
    return frozenset(out)


def _scheduler() -> Any:
    return os.sched_getscheduler(0), os.sched_getparam(0).sched_priority


def _inheritable() -> Any:
    out: list[bool | None] = []
    for fd in (0, 1, 2):
        try:
            out.append(os.get_inheritable(fd))
        except OSError:
            out.append(None)
    return tuple(out)


def _children() -> Any:
    """Whether the sentinel child (a zombie from `fork_sentinel`) is still there to be reaped."""
    if not _SENTINEL_PID:
        return MISSING
    try:
        os.waitid(os.P_PID, _SENTINEL_PID[0], os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return "reaped"
    return "present"  # exited (a zombie) or about to


def _stdin_unread() -> Any:
    """Bytes waiting on fd 0 (what `seal` left there): fewer is a read of the engine's stdin."""
    buf = array.array("i", [0])
    try:
        fcntl.ioctl(0, termios.FIONREAD, buf)
    except OSError as exc:
        return f"<error {type(exc).__name__}>"
    return buf[0]


def _xoptions() -> Any:
    """`sys._xoptions` (edited in place: every spawned worker gets the -X options)."""
    xo = getattr(sys, "_xoptions", None)
    if not isinstance(xo, dict):
        return _plain(xo)
    return frozenset((_plain(k), _plain(v)) for k, v in dict.items(xo))


def _fd_flags() -> Any:
    """The file status flags of fds 0-2 (`os.set_blocking(2, False)`: O_NONBLOCK on the engine's stderr)."""
    out: list[int | None] = []
    for fd in (0, 1, 2):
        try:
            out.append(fcntl.fcntl(fd, fcntl.F_GETFL))
        except OSError:
            out.append(None)
    return tuple(out)


def _chunk_sizes() -> Any:
    """`_CHUNK_SIZE` of the standard text streams (only a real TextIOWrapper's: no property of a replaced
    stream runs)."""
    out = []
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        out.append(getattr(stream, "_CHUNK_SIZE", None) if type(stream) is io.TextIOWrapper else None)
    return tuple(out)


def _dict_ids(d: Any) -> Any:
    return frozenset((_plain(k), id(v)) for k, v in dict.items(d)) if type(d) is dict else _plain(d)


def _instance_ids(obj: Any) -> Any:
    try:
        return id(obj), _dict_ids(object.__getattribute__(obj, "__dict__"))
    except (AttributeError, TypeError):
        return id(obj)


def _email_policy() -> Any:
    """email.policy.default's header factory and its registry (`map_to_type`)."""
    pol = sys.modules.get("email.policy")
    default = vars(pol).get("default") if pol is not None else None
    if default is None:
        return MISSING
    try:
        factory = object.__getattribute__(default, "header_factory")
    except AttributeError:
        return MISSING
    try:
        registry = object.__getattribute__(factory, "__dict__").get("registry")
    except (AttributeError, TypeError):
        registry = None
    return id(factory), _dict_ids(registry)


def _mp_contexts() -> Any:
    """multiprocessing's shared contexts (the default one and `get_context(name)`'s), by their attributes."""
    ctx = sys.modules.get("multiprocessing.context")
    if ctx is None:
        return MISSING
    concrete = vars(ctx).get("_concrete_contexts")
    held = sorted(dict.items(concrete)) if type(concrete) is dict else []
    return (_instance_ids(vars(ctx).get("_default_context")),
            tuple((_plain(k), _instance_ids(v)) for k, v in held))


def _mp_process() -> Any:
    """The current process object's config (its authkey: every Connection's HMAC key)."""
    proc = sys.modules.get("multiprocessing.process")
    cur = vars(proc).get("_current_process") if proc is not None else None
    if cur is None:
        return MISSING
    try:
        config = object.__getattribute__(cur, "_config")
    except AttributeError:
        return _instance_ids(cur)
    return id(cur), tuple(sorted((_plain(k), _plain(v)) for k, v in dict.items(config))) \
        if type(config) is dict else _plain(config)


def _gettext_dirs() -> Any:
    gt = sys.modules.get("gettext")
    return _dict_ids(vars(gt).get("_localedirs")) if gt is not None else MISSING


def _http_ext_map() -> Any:
    hs = sys.modules.get("http.server")
    cls = vars(hs).get("SimpleHTTPRequestHandler") if hs is not None else None
    if not isinstance(cls, type):
        return MISSING
    return _dict_ids(_TYPE_DICT.__get__(cls).get("extensions_map"))


STATE: dict[str, Callable[[], Any]] = {
    "abc.registries": _abc_registries,
    "logging.handlers": _handlers,
    "logging.level_names": _level_names,
    "sysconfig.config_vars": _sysconfig_vars,
    "sysconfig.install_schemes": _sysconfig_schemes,
    "multiprocessing.executable": _mp_executable,
    "calendar.firstweekday": _calendar,
    "typing.overloads": _overloads,
    "os.scheduler": _scheduler,
    "os.inheritable": _inheritable,
    "os.sentinel_child": _children,
    "os.stdin_unread": _stdin_unread,
    "sys.xoptions": _xoptions,
    "os.fd_flags": _fd_flags,
    "sys.chunk_sizes": _chunk_sizes,
    "email.policy.default": _email_policy,
    "multiprocessing.contexts": _mp_contexts,
    "multiprocessing.current_process": _mp_process,
    "gettext.localedirs": _gettext_dirs,
    "http.server.extensions_map": _http_ext_map,
}
CHEAP = frozenset({"state:multiprocessing.executable", "state:calendar.firstweekday", "state:os.inheritable",
                   "state:os.sentinel_child", "state:os.stdin_unread", "state:os.scheduler",
                   "state:sys.xoptions", "state:os.fd_flags", "state:sys.chunk_sizes",
                   "state:gettext.localedirs"})


def fork_sentinel() -> None:
    """A child that exits at once and stays a zombie until reaped (started first, while the process is small):
    an `os.waitpid(-1)` of the code under trace takes it, as it would take the engine's workers."""
    if _SENTINEL_PID:
        return
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    _SENTINEL_PID.append(pid)


def seal() -> None:
    """Before the first snapshot: stdin becomes a pipe full of empty lines and with no writer (a read of fd 0
    by any route, `sys.stdin.read`, `input`, `os.read(0, n)`, takes some: fewer are left), and sysconfig's
    caches are filled (their lazy fill on first use is then the baseline, not a change)."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    with contextlib.suppress(BlockingIOError):
        os.write(w, b"\n" * 65536)  # as much as the pipe holds: a partial read (a line, a byte) shows too
    os.close(w)
    os.dup2(r, 0)
    os.close(r)
    import sysconfig

    sysconfig.get_config_vars()


# How the gather side judges the entries of a key (the parent imports this module for it): for each key, the
# index of the entry's module (an entry under the contribution's own module is its own), or "removed" (only
# an entry that was there before and is gone or changed counts).
ENTRY_RULES: dict[str, int | str] = {
    "state:abc.registries": 1,
    "state:typing.overloads": 0,
    "state:logging.handlers": "removed",
}


def entries_effect(key: str, added: list[Any], removed: list[Any], own: Callable[[str], bool]) -> str | None:
    """What a diff of an ENTRY_RULES key means, or None when it is the contribution's own business."""
    rule = ENTRY_RULES[key]
    if rule == "removed":
        gone = [e for e in removed if isinstance(e, list)]
        return f"entries there before changed or dropped: {gone[:3]}" if gone else None
    assert isinstance(rule, int)
    foreign = [e for e in added + removed if isinstance(e, list) and len(e) > rule and not own(str(e[rule]))]
    return f"entries changed: {foreign[:3]}" if foreign else None
