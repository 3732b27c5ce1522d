"""Child side: the interpreter's shared state as a flat map `key -> value`, taken before and after.

Keys:
- `mod:<module>:<attr>`: an attribute of a module the contribution does not own (compared by identity),
- `cls:<module>:<class>:<attr>`: an attribute in the `__dict__` of a class such a module defines,
- `box:<module>:<attr>` / `cbox:<module>:<class>:<attr>`: a container's contents (a public one, or a private
  or class-held one that holds behaviour: a dispatch table),
- `state:<name>`: a global switch read through a getter (compared by equality): sys.path, meta_path,
  path_hooks, os.environ and the C environment, signal handlers, logging, warnings filters, threads,
  atexit, gc, the torch switches, op registrations and config modules, ...

`value_of(key)` re-reads one key (the locate pass checks a few keys on every traced line).
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import gc
import os
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any

from . import stdlib_state, torch_state

MISSING: Any = torch_state.MISSING  # one sentinel for both modules
Snapshot = dict[str, Any]


def _mp_start() -> Any:
    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return None
    return mp.get_start_method(allow_none=True)


def _logging() -> Any:
    lg = sys.modules.get("logging")
    if lg is None:
        return (30, 0, (), False)
    root = lg.getLogger()
    return (root.level, lg.root.manager.disable, tuple(map(id, root.handlers)), root.disabled)


def _exact(text: str) -> str:
    """A plain copy of a text (a `str` subclass's own `__lt__`, `__eq__` or `__hash__` would run code of the
    contribution inside the snapshot, where it could change the tracer's tables between two checks)."""
    return text if type(text) is str else str.__getitem__(text, slice(None))


def _loggers() -> Any:
    lg = sys.modules.get("logging")
    if lg is None:
        return ()
    out = []
    for name, logger in list(lg.root.manager.loggerDict.items()):
        if isinstance(logger, lg.Logger) and isinstance(name, str):
            # read from the instance's own dict, as plain values: a property or an int subclass of a
            # contribution's Logger class would run its code inside the snapshot too
            d = object.__getattribute__(logger, "__dict__")
            handlers = d.get("handlers")
            out.append((_exact(name), *(_plain(d.get(k)) for k in ("level", "disabled", "propagate")),
                        len(handlers) if type(handlers) is list else -1))
    return tuple(sorted(out, key=lambda e: e[0]))


def _warnings() -> Any:
    w = sys.modules.get("warnings")
    return tuple(repr(f) for f in w.filters) if w is not None else ()


def _threads() -> Any:
    return tuple(sorted(t.ident or 0 for t in threading.enumerate()))


def _signals() -> Any:
    out = []
    for sig in sorted(signal.valid_signals()):
        try:
            out.append((int(sig), signal.getsignal(sig)))
        except (ValueError, OSError):
            continue
    return tuple(out)


def _environ_pointer() -> Any:
    try:
        return ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ")
    except (ImportError, OSError, ValueError):
        return None


# Looked up once, before any code under trace runs (and before the audit hook, which blocks loading native
# code from then on): the object lives at the C variable `environ`, so each read sees its current value.
_ENVIRON = _environ_pointer()


def _c_environ() -> Any:
    """The C library's environment (what `ctypes` `setenv` changes behind os.environ's back)."""
    env = _ENVIRON
    if env is None:
        return MISSING
    out = []
    i = 0
    while env[i] is not None and i < 100_000:
        out.append(env[i])
        i += 1
    return tuple(sorted(out))


def _umask() -> Any:
    old = os.umask(0o022)
    os.umask(old)
    return old


def _atexit() -> Any:
    return atexit._ncallbacks()


def _random() -> Any:
    r = sys.modules.get("random")
    return hash(r.getstate()) if r is not None else None


def _locale() -> Any:
    lc = sys.modules.get("locale")
    return lc.setlocale(lc.LC_ALL) if lc is not None else "C"


def _socket_timeout() -> Any:
    s = sys.modules.get("socket")
    return s.getdefaulttimeout() if s is not None else None


def _faulthandler() -> Any:
    f = sys.modules.get("faulthandler")
    return f.is_enabled() if f is not None else False


def _itimers() -> Any:
    """Which interval timers are armed (a pending alarm or ITIMER_VIRTUAL/PROF: their default action ends the
    process), and their intervals; the time left runs down, so only whether one is set is compared."""
    return tuple((signal.getitimer(w)[0] > 0, signal.getitimer(w)[1])
                 for w in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF))


def _sigmask() -> Any:
    return tuple(sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))


def _decimal(default: bool) -> Any:
    dec = sys.modules.get("decimal")
    if dec is None:
        return MISSING
    return repr(dec.DefaultContext if default else dec.getcontext())


def _path_importer_cache() -> Any:
    """Which finder answers for each sys.path entry (by identity): a new entry is the import system's own
    bookkeeping, an entry whose finder was replaced is an import hijack (see gather)."""
    return frozenset((k if isinstance(k, str) else repr(k), id(v),
                      tuple((str(e[0]), id(e[1])) for e in getattr(v, "_loaders", ()) if type(e) is tuple
                            and len(e) == 2))  # a FileFinder's loaders changed in place
                     for k, v in list(sys.path_importer_cache.items()))


def _numpy_errstate() -> Any:
    np = sys.modules.get("numpy")
    return tuple(sorted(np.geterr().items())) if np is not None else MISSING


def _numpy_printoptions() -> Any:
    np = sys.modules.get("numpy")
    return repr(sorted(np.get_printoptions().items())) if np is not None else MISSING


# torch's process-wide registries kept in private module attributes (not boxed like public ones): global
# module hooks, fx's side-effect set and wrapped globals, the weights_only unpickler's allow-list, dynamo's
# allow/disallow lists.
TORCH_REGISTRIES = (
    *(f"torch.nn.modules.module:_global_{n}" for n in (
        "backward_hooks", "backward_pre_hooks", "buffer_registration_hooks", "forward_hooks",
        "forward_hooks_always_called", "forward_hooks_with_kwargs", "forward_pre_hooks",
        "is_full_backward_hook", "module_registration_hooks", "parameter_registration_hooks")),
    "torch.fx.node:_side_effectful_functions", "torch.fx._symbolic_trace:_wrapped_fns_to_patch",
    "torch.fx._symbolic_trace:_wrapped_methods_to_patch",
    "torch._weights_only_unpickler:_marked_safe_globals_set", "torch._weights_only_unpickler:_safe_globals",
    "torch._dynamo.trace_rules:_allowed_callable_ids", "torch._dynamo.trace_rules:_disallowed_callable_ids",
    "torch._dynamo.trace_rules:_nonstrict_trace_callable_ids",
)


def _plain(v: Any) -> Any:
    return v if type(v) in (str, int, float, bool, type(None)) else f"<{type(v).__name__} {id(v)}>"


def _registry(where: str) -> Callable[[], Any]:
    """A container's contents (what was added or removed can be named), read when its module is loaded."""
    name, _, attr = where.partition(":")

    def get() -> Any:
        mod = sys.modules.get(name)
        if mod is None:
            return MISSING
        value = vars(mod).get(attr, MISSING)
        value = getattr(value, "function_ids", value)  # dynamo's FunctionIdSet holds a set (or None)
        try:
            if isinstance(value, dict):
                return frozenset((_plain(k) if not isinstance(k, tuple) else tuple(map(_plain, k)), id(v))
                                 for k, v in value.items())
            if isinstance(value, (set, frozenset, list, tuple)):
                return frozenset(_plain(v) for v in value)
        except Exception as exc:
            return f"<error {type(exc).__name__}>"
        return repr(value)

    return get


def _torch_ops() -> Any:
    t = sys.modules.get("torch")
    if t is None:
        return frozenset()
    return frozenset(t._C._dispatch_get_all_op_names())


def _torch_impls() -> Any:
    lib = sys.modules.get("torch.library")
    if lib is None:
        return frozenset()
    return frozenset(getattr(lib, "_impls", ())) | frozenset(getattr(lib, "_defs", ()))


def _fds() -> Any:
    """What file descriptors 0-2 are (`os.dup2` under sys.std* changes them and keeps the stream objects)."""
    out: list[tuple[int, int | None, int | None, int | None]] = []
    for fd in (0, 1, 2):
        try:
            st = os.fstat(fd)
            out.append((fd, st.st_dev, st.st_ino, st.st_mode))
        except OSError:
            out.append((fd, None, None, None))
    return tuple(out)


def _streams() -> Any:
    """How the shared std streams encode (`reconfigure` changes them in place)."""
    out = []
    for name in ("stdin", "stdout", "stderr"):
        f = getattr(sys, name, None)
        out.append((name, *(_plain(getattr(f, a, None)) for a in ("encoding", "errors", "line_buffering",
                                                                  "write_through"))))
    return tuple(out)


def _numpy_random() -> Any:
    r = sys.modules.get("numpy.random")
    if r is None:
        return MISSING
    state = r.get_state()
    return (state[0], hash(state[1].tobytes()), state[2], state[3], state[4])


_ERROR_HANDLERS = ("strict", "ignore", "replace", "xmlcharrefreplace", "backslashreplace", "namereplace",
                   "surrogateescape", "surrogatepass")


def _codec_error_handlers() -> Any:
    import codecs

    return tuple(id(codecs.lookup_error(n)) for n in _ERROR_HANDLERS)


def _wakeup_fd() -> Any:
    if threading.current_thread() is not threading.main_thread():
        return MISSING
    old = signal.set_wakeup_fd(-1)
    if old != -1:
        signal.set_wakeup_fd(old)
    return old


def _tracemalloc() -> Any:
    t = sys.modules.get("tracemalloc")
    return t.is_tracing() if t is not None else False


def _mp_registries() -> Any:
    """multiprocessing.util's own hook tables (run in every forked worker, at its exit)."""
    u = sys.modules.get("multiprocessing.util")
    if u is None:
        return MISSING
    return (len(getattr(u, "_afterfork_registry", ())), len(getattr(u, "_finalizer_registry", ())))


def _func(f: Any) -> Any:
    return getattr(f, "__func__", f)  # a codec's bound method: made anew by each getregentry()


def _codec_of(enc: Any, key: str, info: Any) -> bool:
    """Whether `info` is what the encodings package's own search would give for `key` (its module's
    getregentry(): the same encode and decode)."""
    norm = enc.normalize_encoding(key)
    alias = enc.aliases.aliases.get(norm) or enc.aliases.aliases.get(norm.replace(".", "_"))
    for name in ([alias] if alias else []) + [norm]:
        mod = sys.modules.get(f"encodings.{name}")
        if mod is not None and callable(getattr(mod, "getregentry", None)):
            try:
                real = mod.getregentry()
            except Exception:
                return False
            return all(_func(getattr(real, a, None)) is _func(getattr(info, a, MISSING))
                       for a in ("encode", "decode"))
    return False


def _forged_caches() -> Any:
    """Entries of the stdlib's lookup caches that are not what the library would have put there: a compiled
    pattern under another pattern's key (re), a codec under another name (encodings), source lines for an
    existing file that are not its own (linecache: no mtime, or another size)."""
    out: list[str] = []
    re_mod = sys.modules.get("re")
    for k, v in list(getattr(re_mod, "_cache", {}).items()) if re_mod is not None else []:
        if isinstance(k, tuple) and len(k) == 3 and (getattr(v, "pattern", MISSING) != k[1]):
            out.append(f"re._cache[{k[1]!r}]")
    enc: Any = sys.modules.get("encodings")
    for k, v in list(getattr(enc, "_cache", {}).items()) if enc is not None else []:
        if v is not None and isinstance(k, str) and not _codec_of(enc, k, v):
            out.append(f"encodings._cache[{k!r}]")
    lc = sys.modules.get("linecache")
    for k, v in list(getattr(lc, "cache", {}).items())[:5000] if lc is not None else []:
        if type(v) is tuple and len(v) == 4 and isinstance(v[3], str) and os.path.isfile(v[3]):
            try:
                forged = v[1] is None or os.stat(v[3]).st_size != v[0]
            except OSError:
                forged = False
            if forged:
                out.append(f"linecache.cache[{k!r}]")
    return tuple(sorted(out))


STATE: dict[str, Callable[[], Any]] = {
    "sys.path": lambda: tuple(sys.path),
    "sys.meta_path": lambda: tuple(map(id, sys.meta_path)),
    "sys.path_hooks": lambda: tuple(map(id, sys.path_hooks)),
    "sys.path_importer_cache": lambda: len(sys.path_importer_cache) and None,
    "sys.gettrace": lambda: id(sys.gettrace()),
    "sys.getprofile": lambda: id(sys.getprofile()),
    "sys.recursionlimit": sys.getrecursionlimit,
    "sys.switchinterval": sys.getswitchinterval,
    "sys.dlopenflags": sys.getdlopenflags,
    "sys.int_max_str_digits": sys.get_int_max_str_digits,
    "os.environ": lambda: tuple(sorted(os.environ.items())),
    "libc.environ": _c_environ,
    "os.cwd": os.getcwd,
    "os.umask": _umask,
    "signal.handlers": _signals,
    "logging.root": _logging,
    "logging.loggers": _loggers,
    "warnings.filters": _warnings,
    "threading.threads": _threads,
    "atexit.callbacks": _atexit,
    "gc.enabled": gc.isenabled,
    "gc.threshold": gc.get_threshold,
    "gc.debug": gc.get_debug,
    "gc.callbacks": lambda: tuple(map(id, gc.callbacks)),
    "multiprocessing.start_method": _mp_start,
    "random.state": _random,
    "locale": _locale,
    "socket.default_timeout": _socket_timeout,
    "faulthandler": _faulthandler,
    "torch.ops": _torch_ops,
    "torch.library": _torch_impls,
    **torch_state.STATE,
    "signal.itimers": _itimers,
    "signal.mask": _sigmask,
    "os.affinity": lambda: tuple(sorted(os.sched_getaffinity(0))),
    "os.priority": lambda: os.getpriority(os.PRIO_PROCESS, 0),
    "decimal.context": lambda: _decimal(False),
    "decimal.default_context": lambda: _decimal(True),
    "sys.asyncgen_hooks": lambda: tuple(map(id, sys.get_asyncgen_hooks())),
    "sys.coroutine_origin_tracking_depth": sys.get_coroutine_origin_tracking_depth,
    "sys.path_importer_cache.finders": _path_importer_cache,
    "numpy.errstate": _numpy_errstate,
    "numpy.printoptions": _numpy_printoptions,
    **{f"registry:{r}": _registry(r) for r in TORCH_REGISTRIES},
    "threading.stack_size": lambda: threading.stack_size(),
    "gc.freeze_count": gc.get_freeze_count,
    "tracemalloc": _tracemalloc,
    "os.std_fds": _fds,
    "sys.std_streams": _streams,
    "numpy.random.state": _numpy_random,
    "codecs.error_handlers": _codec_error_handlers,
    "signal.wakeup_fd": _wakeup_fd,
    "threading.atexits": lambda: tuple(map(id, getattr(threading, "_threading_atexits", ()))),
    "multiprocessing.registries": _mp_registries,
    "caches.forged": _forged_caches,
    **stdlib_state.STATE,
}


CHEAP_STATE = frozenset({"state:sys.path", "state:sys.meta_path", "state:sys.path_hooks",
                         "state:sys.gettrace",
                         "state:sys.getprofile", "state:sys.recursionlimit", "state:sys.switchinterval",
                         "state:sys.dlopenflags", "state:os.environ", "state:os.cwd", "state:logging.root",
                         "state:gc.enabled", "state:gc.threshold", "state:multiprocessing.start_method",
                         "state:socket.default_timeout", "state:faulthandler"})


# Keys whose value is per thread (numpy's error state lives in a context variable): read in the main thread
# only, where the contribution's modules are imported.
THREAD_LOCAL = frozenset({"state:numpy.errstate", "state:signal.mask", "state:decimal.context"}) | \
    torch_state.THREAD_LOCAL


def cheap(key: str) -> bool:
    """A key that costs a dictionary look-up or two to re-read (the locate pass reads it on every line)."""
    return key.startswith(("mod:", "cls:", "sysmod:", "obj:", "cobj:", "kw:", "cell:", "ccell:",
                           "fn:")) or \
        key in CHEAP_STATE or key in torch_state.CHEAP or key in stdlib_state.CHEAP


def _config_modules() -> Iterable[tuple[str, Any]]:
    """torch's config modules (`torch._dynamo.config`, ...): their values live behind `get_config_copy`."""
    for name, mod in list(sys.modules.items()):
        config = type(mod).__name__ == "ConfigModuleInstance"
        getter = getattr(mod, "get_config_copy", None) if config else None
        if callable(getter):
            yield name, getter


def _config(name: str) -> Any:
    mod = sys.modules.get(name)
    getter = getattr(mod, "get_config_copy", None)
    if getter is None:
        return MISSING
    try:
        return repr(sorted(getter().items()))
    except Exception as exc:
        return f"<error {type(exc).__name__}>"


def _skip(name: str, module: Any, skip: Callable[[str], bool]) -> bool:
    return not isinstance(module, types.ModuleType) or skip(name)


MAX_BOX = 5000


def _bookkeeping(value: Any) -> bool:
    """The interpreter's own tables (sys.modules has its own keys; the rest are caches)."""
    lc = sys.modules.get("linecache")
    return value is sys.modules or value is sys.path_importer_cache or value is sys.path or (
        lc is not None and value is getattr(lc, "cache", None))


def _key_text(k: Any) -> str:
    if isinstance(k, str):
        return _exact(k)
    if isinstance(k, type):  # a dispatch table's key: named, with its identity (two classes of one name)
        return f"<type {getattr(k, '__module__', '?')}.{getattr(k, '__qualname__', '?')} {id(k)}>"
    return f"<{type(k).__name__} {id(k)}>"


def _box(value: Any) -> Any:
    """A module-level dict, list or set (a registry) by content identity: an in-place update
    (`operator.setitem(table, k, v)`, `.update`, `.append`) changes it."""
    try:
        if len(value) > MAX_BOX:
            return None
        if isinstance(value, dict):  # (key text, value identity): what was added or replaced can be named
            return frozenset((_key_text(k), id(v)) for k, v in value.items())
        return (len(value), hash(tuple(map(id, value))))
    except Exception:
        return None


# not classes: a table of classes made on demand (ctypes' pointer types) is a cache
_BEHAVIOUR = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, staticmethod, classmethod,
              functools.partial)


def _behaviour_table(value: Any) -> bool:
    """A private or class-held container that holds behaviour (a dispatch table: `copy._deepcopy_dispatch`,
    `pickle._Pickler.dispatch`): boxed like a public registry. One that holds only data (a library's cache
    of compiled patterns, of instances) is not: it changes as the library works."""
    if type(value) is dict:
        values: Iterable[Any] = value.values()
    elif type(value) in (list, set):
        values = value
    else:
        return False
    try:
        if len(value) > MAX_BOX:
            return False
        return any(isinstance(v, _BEHAVIOUR) for v in values)
    except Exception:
        return False


MAX_INSTANCE_ATTRS = 200
_PLAIN = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
          staticmethod, classmethod, property)


def _instance_dict(value: Any) -> list[tuple[str, Any]] | None:
    """The attributes of a plain object held by a module (not a module, class or function), if small."""
    if isinstance(value, _PLAIN):
        return None
    try:
        state = object.__getattribute__(value, "__dict__")
    except (AttributeError, TypeError):
        return _slots(value)
    if type(state) is not dict or len(state) > MAX_INSTANCE_ATTRS:
        return None
    return [(k, v) for k, v in state.items() if isinstance(k, str)] + (_slots(value) or [])


def _slots(value: Any) -> list[tuple[str, Any]] | None:
    """The slot values of an instance (a `uuid.UUID` has no __dict__): `object.__setattr__` past its guard."""
    out: list[tuple[str, Any]] = []
    for klass in type(value).__mro__:
        names = klass.__dict__.get("__slots__", ())
        for name in (names,) if isinstance(names, str) else names if isinstance(names, (tuple, list)) else ():
            if isinstance(name, str) and name not in ("__dict__", "__weakref__") and \
                    type(klass.__dict__.get(name)) is types.MemberDescriptorType:
                try:
                    out.append((name, klass.__dict__[name].__get__(value, type(value))))
                except AttributeError:
                    continue
    return out or None


def _fn_attrs(value: Any) -> Any:
    """A plain function's names, doc and own attributes by identity (`functools.update_wrapper` renames it,
    sets `__wrapped__` and its doc; `f.__qualname__ = ...`, `f.x = 1`): None for any other value."""
    if type(value) is not types.FunctionType:
        return None
    d = value.__dict__
    return (id(value.__name__), id(value.__qualname__), id(value.__doc__), id(value.__module__),
            frozenset((k, id(v)) for k, v in d.items()) if d else None)


def _kwdefaults(value: Any) -> Any:
    """A plain function's keyword defaults by identity (`json.dumps.__kwdefaults__['sort_keys'] = True`)."""
    if type(value) is not types.FunctionType:
        return None
    kw = value.__kwdefaults__
    return tuple((k, id(v)) for k, v in kw.items()) if type(kw) is dict else None


_WITH_CELLS = (types.FunctionType, staticmethod, classmethod)


def _cells(value: Any) -> Any:
    """The callables in a shared function's closure cells, by identity (`ChainMap.__repr__`'s wrapped
    `user_function` replaced through `cell_contents`, which no audit event shows); None without one. Only
    callables: a library's own counter or flag in a cell (`nonlocal`) is its bookkeeping."""
    value = getattr(value, "__func__", value) if type(value) in (staticmethod, classmethod) else value
    if type(value) is not types.FunctionType or not value.__closure__:
        return None
    out = []
    for var, cell in zip(value.__code__.co_freevars, value.__closure__, strict=False):
        try:
            contents = cell.cell_contents
        except ValueError:
            continue
        if callable(contents):
            out.append((var, id(contents)))
    return tuple(out) or None


def _abstract_mark(value: Any) -> bool:
    """Whether an ABC's class attribute is marked abstract: a plain function, or one under a property,
    classmethod or staticmethod, flagged `__isabstractmethod__` (read on the functions only: no descriptor or
    `__getattr__` of the contribution runs)."""
    if type(value) is property:
        funcs: tuple[Any, ...] = (value.fget, value.fset, value.fdel)
    elif type(value) in (classmethod, staticmethod):
        funcs = (value.__func__,)
    else:
        funcs = (value,)
    return any(type(f) is types.FunctionType and getattr(f, "__isabstractmethod__", False) is True
               for f in funcs)


_DUNDER_TABLES = ("__all__", "__path__")  # `from m import *` and where a package's submodules come from


def module_state(name: str, module: types.ModuleType) -> Snapshot:
    """The attributes of one foreign module and of the classes it defines."""
    out: Snapshot = {}
    try:
        items = list(vars(module).items())
    except TypeError:
        return out
    for attr, value in items:
        if attr == "__warningregistry__":
            continue
        out[f"mod:{name}:{attr}"] = value
        kw = _kwdefaults(value)
        if kw is not None:  # a keyword default changed in place keeps the function's identity
            out[f"kw:{name}:{attr}"] = kw
        if type(value) is types.FunctionType:  # its names, doc, own attributes (changed in place)
            out[f"fn:{name}:{attr}"] = _fn_attrs(value)
        cells = _cells(value) if type(value) is types.FunctionType and value.__closure__ else None
        if cells is not None:
            out[f"cell:{name}:{attr}"] = cells
        state = _instance_dict(value)
        if state is not None:  # a module-level singleton (a config object): its attributes by identity
            for iattr, ivalue in state:
                if attr == "__spec__" and iattr == "_initializing":
                    continue  # the import system's own flag, flipped by any (lazy) import of the module
                out[f"obj:{name}:{attr}:{iattr}"] = ivalue
        if type(value) in (dict, list, set) and attr != "__builtins__" and not _bookkeeping(value) and (
                not attr.startswith("_") or attr in _DUNDER_TABLES or _behaviour_table(value)):
            box = _box(value)
            if box is not None:
                out[f"box:{name}:{attr}"] = box
        if isinstance(value, type) and value.__dict__.get("__module__") == name and attr == value.__name__:
            abstract = "_abc_impl" in value.__dict__
            for cattr, cvalue in list(value.__dict__.items()):
                if cattr not in ("__dict__", "__weakref__", "_abc_impl"):
                    out[f"cls:{name}:{attr}:{cattr}"] = cvalue
                    ccells = _cells(cvalue) if type(cvalue) in _WITH_CELLS else None
                    if ccells is not None:
                        out[f"ccell:{name}:{attr}:{cattr}"] = ccells
                    if abstract and _abstract_mark(cvalue):
                        out[f"abs:{name}:{attr}:{cattr}"] = True  # `abc.abstractmethod` on an ABC's method
                    if type(cvalue) in (dict, list, set) and _behaviour_table(cvalue):
                        box = _box(cvalue)  # a class's dispatch table changed in place
                        if box is not None:
                            out[f"cbox:{name}:{attr}:{cattr}"] = box
                    elif not cattr.startswith("__") and type(cvalue).__module__ == name:
                        # an instance of the module's own class held by a class (logging.Logger.manager):
                        # its attributes by identity
                        cstate = _instance_dict(cvalue)
                        for iattr, ivalue in cstate or ():
                            out[f"cobj:{name}:{attr}:{cattr}:{iattr}"] = ivalue
    return out


def take(skip: Callable[[str], bool]) -> Snapshot:
    """Everything: the foreign modules (not `skip`ped), their classes, and the global switches."""
    snap: Snapshot = {}
    for name, module in list(sys.modules.items()):
        if not _skip(name, module, skip):
            snap.update(module_state(name, module))
    for key, get in STATE.items():
        try:
            snap[f"state:{key}"] = get()
        except Exception as exc:
            snap[f"state:{key}"] = f"<error {type(exc).__name__}>"
    for name, _ in _config_modules():
        if not skip(name):
            snap[f"state:config:{name}"] = _config(name)
    return snap


def value_of(key: str) -> Any:
    """Re-read one key of a snapshot."""
    kind, _, rest = key.partition(":")
    if kind == "state":
        if rest.startswith("config:"):
            return _config(rest[len("config:"):])
        get = STATE.get(rest)
        return get() if get is not None else MISSING
    if kind == "sysmod":
        return sys.modules.get(rest, MISSING)
    if kind in ("mod", "box", "kw", "cell", "fn"):
        name, _, attr = rest.rpartition(":")
        module = sys.modules.get(name)
        value = vars(module).get(attr, MISSING) if module is not None else MISSING
        if kind == "kw":
            return _kwdefaults(value) if value is not MISSING else MISSING
        if kind == "fn":
            fn = _fn_attrs(value) if value is not MISSING else None
            return fn if fn is not None else MISSING
        if kind == "cell":
            cells = _cells(value) if value is not MISSING else None
            return cells if cells is not None else MISSING
        return value if kind == "mod" or value is MISSING else _box(value)
    if kind == "cobj":
        name, cls_name, holder, attr = rest.split(":", 3)
        module = sys.modules.get(name)
        cls = vars(module).get(cls_name, MISSING) if module is not None else MISSING
        obj = cls.__dict__.get(holder, MISSING) if isinstance(cls, type) else MISSING
        state = _instance_dict(obj) if obj is not MISSING else None
        return dict(state).get(attr, MISSING) if state is not None else MISSING
    if kind == "obj":
        name, holder, attr = rest.split(":", 2)
        module = sys.modules.get(name)
        obj = vars(module).get(holder, MISSING) if module is not None else MISSING
        state = _instance_dict(obj) if obj is not MISSING else None
        return dict(state).get(attr, MISSING) if state is not None else MISSING
    if kind == "abs":
        name, cls_name, attr = rest.split(":", 2)
        module = sys.modules.get(name)
        cls = vars(module).get(cls_name, MISSING) if module is not None else MISSING
        value = cls.__dict__.get(attr, MISSING) if isinstance(cls, type) else MISSING
        return True if _abstract_mark(value) else MISSING
    if kind in ("cls", "cbox", "ccell"):
        name, cls_name, attr = rest.split(":", 2)
        module = sys.modules.get(name)
        cls = vars(module).get(cls_name, MISSING) if module is not None else MISSING
        value = cls.__dict__.get(attr, MISSING) if isinstance(cls, type) else MISSING
        if kind == "ccell":
            cells = _cells(value) if value is not MISSING else None
            return cells if cells is not None else MISSING
        return value if kind == "cls" or value is MISSING else _box(value)
    return MISSING


def same(key: str, before: Any, after: Any) -> bool:
    if before is after:
        return True
    if key.startswith(("state:", "box:", "cbox:", "kw:", "cell:", "ccell:", "fn:")):
        try:
            return bool(before == after)
        except Exception:
            return False
    return False


def diff(before: Snapshot, after: Snapshot) -> list[str]:
    """Keys whose value changed, appeared or went away (a foreign module imported meanwhile is not a diff:
    only the keys of modules present in `before` count, plus every state key)."""
    modules_before = {k.split(":", 2)[1] for k in before if not k.startswith("state:")}
    changed = []
    for key in sorted(set(before) | set(after)):
        if not key.startswith("state:") and key.split(":", 2)[1] not in modules_before:
            continue
        b, a = before.get(key, MISSING), after.get(key, MISSING)
        if not same(key, b, a):
            changed.append(key)
    return changed


def describe(value: Any) -> str:
    """A short, safe text for a value in a finding."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 160 else text[:157] + "..."
