"""Child side: the traced interpreter (runs inside the sandbox as `_fasttrack_trace.child`).

`main(spec_path)` reads the spec the parent wrote, pre-imports what the contribution names (so their own
import-time state is the baseline, not an effect), snapshots the interpreter, installs the engine stand-ins
and a PEP 578 audit hook, imports every target module, snapshots again and streams one JSON line per event
to the parent's pipe as it happens (an event already sent cannot be taken back by the code under trace).
With `locate` keys (the second pass) a line tracer over the contribution's frames re-reads those keys and
names the line after which each one changed.
"""

from __future__ import annotations

import _codecs
import _hashlib
import _json
import _lsprof
import _posixsubprocess
import _thread
import atexit
import builtins
import codecs
import contextlib
import functools
import gc
import importlib
import json
import operator
import os
import subprocess
import sys
import threading
import time
import traceback
import types
import weakref
from collections.abc import Callable, Generator
from typing import Any

from . import snapshot, standins, stdlib_state, torch_state

# Audit events that leave the sandbox or reach native code: blocked (the hook raises) and reported.
ESCAPES = ("socket.", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
           "os.forkpty", "os.kill", "os.killpg", "pty.spawn", "signal.pthread_kill", "ctypes.dlopen",
           "ctypes.dlsym", "ctypes.call_function", "urllib.Request", "http.client.connect", "ftplib.",
           "smtplib.", "poplib.", "imaplib.", "nntplib.", "telnetlib.", "webbrowser.open",
           "resource.setrlimit",
           "resource.prlimit", "os.startfile", "winreg.", "mmap.__new__", "sqlite3.connect",
           # raw memory: an object's bytes read or written through its address (`from_address`)
           "ctypes.cdata", "ctypes.string_at", "ctypes.wstring_at")
# Imported again after the hook is installed, these would hand out the originals of what the trace replaced.
NO_REIMPORT = ("_posixsubprocess", "_thread", "_codecs")
# Filesystem writes: allowed inside the sandbox's writable directories only.
FS_WRITES = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.symlink", "os.link", "os.chmod",
             "os.chown",
             "os.truncate", "os.utime", "os.chflags", "os.lchmod", "os.lchown", "os.setxattr",
             "os.removexattr", "shutil.rmtree", "shutil.move", "shutil.copyfile", "shutil.copytree",
             "shutil.chown", "os.listxattr")
# Changes of interpreter-wide state the hook sees directly: reported, not blocked.
INTERPRETER = ("sys.settrace", "sys.setprofile", "sys.addaudithook", "setopencodehook", "os.putenv",
               "os.unsetenv", "os.chdir", "_thread.start_new_thread", "os.setuid", "os.setgid",
               "sys._clear_type_cache",
               "cpython.PyInterpreterState_Clear", "os.register_at_fork")
# Reaching objects the contribution was not handed (how a patch finds its target without naming it).
INTROSPECTION = ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
                 "sys._current_exceptions", "marshal.loads", "code.__new__", "function.__new__",
                 "sys.setrecursionlimit")
WALKS = ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames")
FRAME_ATTRS = ("tb_frame", "gi_frame", "cr_frame", "ag_frame")
FRAME_HELPERS = ("currentframe", "stack", "getouterframes", "getinnerframes", "trace", "walk_stack",
                 "walk_tb")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
# After the imports, threads the contribution started get this long (in all) to finish before the "after"
# snapshot (their effects are then diffs like any other); one still running then is itself a finding.
SETTLE_S = 1.0
MAX_BLAMES = 8  # lines named per changed key after the first


# Bound before any code under trace runs: a PR that patches `json.dumps` or `os.write` cannot silence us.
_ENCODE = json.JSONEncoder(default=repr).encode
_WRITE = os.write
# The report's channel uses only C functions bound here (the json module's Python layer could be patched).
_HMAC = _hashlib.hmac_digest
_C_ENCODE = _json.make_encoder(None, repr, _json.encode_basestring_ascii, None, ": ", ", ", False, False,
                               True)
_THREAD_INIT = threading.Thread.__init__
_THREAD_START = threading.Thread.start
_ATEXIT_REGISTER = atexit.register
_FINALIZE_INIT = weakref.finalize.__init__
_START_NEW = _thread.start_new_thread
_PROFILER = _lsprof.Profiler
_PROFILE_KEY = "state:sys.getprofile"
_CODECS_REGISTER = _codecs.register
_MAIN = threading.main_thread()
MISSING_SENTINEL: Any = object()
_CURRENT = threading.current_thread  # per-thread state is keyed by the Thread (an ident is reused)
_WRAPPED: dict[types.CodeType, str] = {}  # the child's wrappers (`_watch_deferred`) -> what they wrap
_BOOTSTRAP_INNER = threading.Thread._bootstrap_inner.__code__  # type: ignore[attr-defined]
# Everything the tracer installs into shared state (its finder, loaders, trace functions, the stand-ins'
# recorder, the wrappers of `_watch_deferred`) is a thin gate that holds no reference to the tracer: it raises
# this audit event, and the tracer's audit hook (referenced only by the interpreter's hook list, which no
# Python API hands out) serves it. See `Tracer.serve` for why its state is then out of the contribution's
# reach.
GATE = "cpython._gate"


def _gate(op: str, args: tuple[Any, ...], _audit: Any = sys.audit, _list: Any = list,
          _event: str = GATE) -> Any:
    """Ask the tracer (through its audit hook) to do `op`; what it answers, else None (no hook yet).
    Dependencies are positional defaults (a tuple: not changeable in place, and `__defaults__` cannot be
    set: the guard refuses writes to the tracer's own functions)."""
    box = _list()
    _audit(_event, op, args, box)
    return box[0] if box else None


class Sandboxed(PermissionError):
    """What the hook raises for a blocked operation."""


class Tracer:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.fd: int = spec["fd"]
        self.files: dict[str, str] = spec["contribution_files"]  # sandbox path -> path shown in findings
        self.own_prefixes: tuple[str, ...] = tuple(spec["own_prefixes"])
        self.writable = tuple(os.path.realpath(d) for d in spec["writable"])
        self.active = False
        self.busy = False
        self.imported: set[str] = set()
        self.baselines: snapshot.Snapshot = {}
        self.finder = standins.EngineFinder(spec["engine_roots"], spec["own_files"], spec["own_dirs"])
        # The finders' tables are reachable (they are on sys.meta_path): the tracer decides with its own.
        self.engine_roots: tuple[str, ...] = tuple(spec["engine_roots"])
        self.missing_checked: dict[str, bool] = {}  # top-level name -> really missing on this machine
        self.finders_before: tuple[Any, ...] = ()  # sys.meta_path before the tracer's finders went in
        self.names_before: frozenset[str] = frozenset()  # sys.modules' names then
        self.loaders: dict[int, tuple[Any, Any]] = {}  # id of a `_Baseline` -> (it, the loader it wraps)
        self.peeking = False  # the hook is looking at the stack itself
        self.found: dict[str, Any] = {}  # name -> the spec a real finder gave for it during the trace
        self.lasts: dict[Any, tuple[str, int] | None] = {}  # per thread: the contribution's last line
        self.origins: dict[int, tuple[str, int] | None] = {}  # id of a Thread -> the line that made it
        self.join_left = SETTLE_S  # locate pass: seconds left for running started threads to their end
        self.exits: list[tuple[tuple[str, int] | None, Any]] = []  # exit hooks registered during the trace
        self.watch: dict[str, Any] = {}
        self.blame: dict[str, tuple[str, int] | None] = {}
        self.absorbed: set[str] = set()
        self.depth = 0  # foreign imports in progress
        self.base: snapshot.Snapshot = {}  # pass 1: the state as it would be had the PR done nothing
        self.pending: dict[str, Any] = {}  # pass 1: keys the PR changed before a later import ran
        self.pre: snapshot.Snapshot = {}
        self.imports_absorbed = 0
        self.indirect: dict[str, str] = {}
        self.more: dict[str, list[list[Any]]] = {}  # later changes of a blamed key: [path, line, indirect]
        self.calling = ""
        self.in_foreign = 0
        self.seen: set[tuple[types.CodeType, int]] = set()  # locate: lines already run
        self.preexisting: set[int] = set()  # ids of the objects of the "before" snapshot (kept alive by it)
        self.sending = False  # a line is being written
        self.raw_threads: list[tuple[tuple[str, int] | None, Any]] = []  # (line, lock released at its end)
        self.chan: Callable[[tuple[bool, bytes]], Any] = lambda request: None  # `_channel`'s send
        self.tampered: list[str] = []  # the tracer's own objects found changed (and put back) during the pass
        self.own_exit = False  # an `atexit` hook of the contribution's making was registered
        self.verify: Callable[[], list[str]] = list  # `_verifier`'s check, once the baseline is taken

    def checkpoint(self) -> None:
        """Compare the tracer's own objects with their baseline now (after code under trace ran)."""
        changed = self.verify()
        if changed:
            self.tamper(changed)

    def tamper(self, names: list[str]) -> None:
        """The tracer's own objects were changed (and have been put back): an error at the contribution's
        innermost line on the stack (the line whose event found it), and the pass cannot be trusted."""
        self.tampered.extend(names)
        busy, self.busy = self.busy, True
        try:
            path, line, _ = self.where()
            self.send({"kind": "introspection", "target": "the tracer's own objects",
                       "detail": "changed while traced (put back): " + ", ".join(sorted(set(names))[:6]),
                       "path": path, "line": line})
        finally:
            self.busy = busy

    # ------------------------------------------------------------------------------------ reporting
    def send(self, event: dict[str, Any]) -> None:
        data = _ENCODE(event).encode("utf-8", "replace")
        self.sending = True
        try:
            self.chan((False, data))
        finally:
            self.sending = False

    def where(self) -> tuple[str | None, int | None, bool]:
        """The innermost frame of the contribution on the current stack, and whether a foreign module's
        own import runs between it and the event (then the event is that module's, not the PR's)."""
        frame: types.FrameType | None = sys._getframe(2)
        inside_import = False
        while frame is not None:
            if frame.f_code is _EXEC_MODULE and frame.f_locals.get("self") is self:
                inside_import = True
            path = self.files.get(frame.f_code.co_filename)
            if path is not None:
                return path, frame.f_lineno, inside_import
            frame = frame.f_back
        return None, None, inside_import

    def here(self) -> tuple[str, int] | None:
        """The contribution's innermost line on the current stack (the line that registers a deferred call
        or starts a thread), else the line that started the current thread."""
        frame: types.FrameType | None = sys._getframe(1)
        while frame is not None:
            path = self.files.get(frame.f_code.co_filename)
            if path is not None:
                return path, frame.f_lineno
            frame = frame.f_back
        return self.origin()

    def origin(self) -> tuple[str, int] | None:
        """The line that made the current thread, when the contribution made it."""
        return self.origins.get(id(_CURRENT())) if self.origins else None

    def record(self, kind: str, target: str, detail: str = "", **extra: Any) -> None:
        if not self.active or self.busy:
            return
        self.busy = True
        try:
            path, line, inside_import = self.where()
            if inside_import and kind not in ("escape", "fs-write"):
                return  # a library's own import-time work, which runs whoever imports it
            self.send({"kind": kind, "target": target, "detail": detail, "path": path, "line": line, **extra})
        finally:
            self.busy = False

    # ----------------------------------------------------------------------------------- ownership
    def owned(self, name: str) -> bool:
        return name in self.spec["own_files"] or name in self.spec["own_dirs"] or any(
            name == p or name.startswith(p + ".") for p in self.own_prefixes)

    def skip(self, name: str) -> bool:
        """Modules that are not shared state: the contribution's own, the stand-ins, the tracer itself."""
        return (self.owned(name) or name == "__main__" or name.startswith("_fasttrack_trace")
                or self.standin(name))

    def standin(self, name: str) -> bool:
        """A stand-in module: a name under the engine's roots (the tracer's own copy), or a package this
        machine really lacks (asked of the finders that were there before the tracer's: a name that the
        finder's reachable tables say is missing but that imports is not skipped)."""
        if name in self.names_before:
            return False  # a module that was there before the trace is never a stand-in
        if any(name == r or name.startswith(r + ".") for r in self.engine_roots):
            return True
        top = name.partition(".")[0]
        if top not in self.finder.standins:
            return False
        known = self.missing_checked.get(top)
        if known is None:
            busy, self.busy = self.busy, True
            try:
                known = not any(_finds(f, top) for f in self.finders_before)
            finally:
                self.busy = busy
            self.missing_checked[top] = known
        return known

    def frame_grab(self) -> bool:
        """`sys._getframe` called by the contribution, or by a helper that hands the frame back to it
        (`inspect.currentframe`, `inspect.stack`, `traceback.walk_stack`, ...); not logging's own
        `findCaller`, which keeps the frame to itself."""
        frame = sys._getframe(3)  # this, the hook's body, the hook, then the caller of sys._getframe
        if frame is None:
            return False
        if frame.f_code.co_filename in self.files:
            return True
        if frame.f_code.co_name in FRAME_HELPERS and frame.f_back is not None:
            return frame.f_back.f_code.co_filename in self.files
        return False

    def direct_caller_is_contribution(self) -> bool:
        frame = sys._getframe(3)  # this, the hook's body, the hook (`_hook`), then the caller
        return frame is not None and frame.f_code.co_filename in self.files

    # ------------------------------------------------------------------------------------- the hook
    def writes_outside(self, path: Any) -> bool:
        if isinstance(path, int):
            return False
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return True
        if real in ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom", "/dev/random"):
            return False
        return not any(real == d or real.startswith(d + os.sep) for d in self.writable)

    def blocked(self, kind: str, target: str, detail: str) -> None:
        """Report a blocked operation whatever `active` and `busy` say (code under trace can set both, and
        code of the contribution can run while the tracer is busy, e.g. a `__repr__` it describes), then
        block it."""
        if self.busy and self.sending:
            raise Sandboxed(f"fasttrack trace: {target} is not allowed")
        busy, self.busy = self.busy, True
        try:
            path, line, _ = self.where()
            self.send({"kind": kind, "target": target, "detail": detail, "path": path, "line": line})
        finally:
            self.busy = busy
        raise Sandboxed(f"fasttrack trace: {target} is not allowed")

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event == GATE:
            if len(args) == 3 and type(args[1]) is tuple and type(args[2]) is list:
                self.serve(args[0], args[1], args[2])
            return
        # Blocked from the moment the hook is installed, whether or not the tracer is `active` or `busy`:
        # after that the tracer's own code writes no file, starts nothing and loads no native code.
        if event == "open":
            path, mode, flags = (*args, None, None, None)[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS)
            if writing and self.writes_outside(path):
                self.blocked("fs-write", str(path), f"open for writing (mode {mode!r})")
            if _process_memory(path):
                self.blocked("escape", str(path), "the process's memory read through /proc")
            return
        if event.startswith(FS_WRITES):
            paths = [a for a in args if isinstance(a, (str, bytes, os.PathLike))]
            if any(self.writes_outside(p) for p in paths) or not paths:
                self.blocked("fs-write", " ".join(map(str, paths)) or event, event)
            return
        if event.startswith(ESCAPES):
            self.blocked("escape", event, _args(args))
        if event == "import" and args and args[0] in NO_REIMPORT:
            self.blocked("escape", f"import {args[0]}", "imported again while traced")
        if self.busy and not self.peeking and (event.startswith(WALKS) or event == "sys._getframe" or (
                event == "object.__getattr__" and len(args) > 1 and args[1] in FRAME_ATTRS)):
            # Code of the contribution run by the tracer's own work (a `__lt__` its snapshot's sort calls, a
            # `__repr__` it describes) would find the tracer's frames, and its state in them: refused.
            self.peeking = True
            try:
                grab = (self.where()[0] is not None) if event.startswith(WALKS) else (
                    self.frame_grab() if event == "sys._getframe" else self.direct_caller_is_contribution())
            finally:
                self.peeking = False
            if grab:
                self.blocked("introspection", event if event != "object.__getattr__" else str(args[1]),
                             "a frame or an object walk while the tracer was at work")
            return
        if not self.active or self.busy:
            return
        if event == "import":
            self.imported.add(str(args[0]))
            return
        if event.startswith(INTERPRETER):
            if event == "sys.settrace" and sys._getframe(2).f_code is _BOOTSTRAP_INNER and \
                    getattr(threading, "_trace_hook", None) is _trace_global:
                return  # a thread starting under the locate pass's own tracer (threading.settrace)
            if event == "os.putenv" and len(args) == 2 and os.environb.get(args[0]) == args[1]:
                return  # the value it already has (a library re-asserting its cache directory)
            self.record("interpreter", event, _args(args))
            if event in ("sys.settrace", "sys.setprofile", "sys.addaudithook"):
                raise Sandboxed(f"fasttrack trace: {event} is not allowed")  # it would blind the trace
            return
        if event == "sys._getframe" or (event == "object.__getattr__" and len(args) > 1
                                        and args[1] in FRAME_ATTRS):
            self.busy = True  # the checks below take frames themselves
            try:
                grab = self.frame_grab() if event == "sys._getframe" else self.direct_caller_is_contribution()
            finally:
                self.busy = False
            if grab:
                self.record("introspection", event if event == "sys._getframe" else str(args[1]),
                            "a frame reached")
            return
        if event.startswith(INTROSPECTION):
            # a walk of every object or every thread's frames: the contribution's anywhere on the stack (a
            # library helper that calls it for the contribution hands over the same objects)
            if event != "sys.setrecursionlimit" and not (
                    self.direct_caller_is_contribution() or event.startswith(WALKS)):
                return
            self.record("introspection" if event != "sys.setrecursionlimit" else "interpreter", event,
                        _args(args))
            return
        if event in ("compile", "exec") and self.direct_caller_is_contribution():
            self.record("dynamic-code", event, _args(args[:1]))
            return
        if event == "object.__setattr__" or event == "object.__delattr__":
            obj = args[0]
            if id(obj) not in self.preexisting:
                return  # an object made during the trace (a namedtuple's class, a wrapper's __doc__)
            owner = getattr(obj, "__module__", None) or getattr(obj, "__name__", "")
            if not self.owned(str(owner)):
                self.record("foreign-write", f"{owner}.{getattr(obj, '__qualname__', '?')}.{args[1]}", event)

    # ---------------------------------------------------------------------------- import baselines
    # ------------------------------------------------------------------------------------ the gates
    def serve(self, op: Any, args: tuple[Any, ...], box: list[Any]) -> None:
        """What a gate asks (see GATE). Why the contribution cannot reach the tracer's state:
        - the tracer is referenced by `main`'s frame, by the audit hook list (no Python API lists hooks)
          and by nothing it installs: every callable it puts into shared state is a gate (a module-level
          function or a `_Finder`/`_Baseline` holding no tracer), checked by tests/test_trace_reach.py's
          walk over `__closure__` cells, `__self__`, `__globals__`, defaults and containers;
        - a frame (`sys._getframe`, `tb_frame`, `gi_frame`, ...) and a gc walk are audited: the
          contribution's is reported (FT134) before the object is handed over, and while the tracer is at
          work (code of the contribution it calls: a `__lt__`, a `__repr__`) it is refused;
        - a gate called by the contribution itself does only what the tracer would do anyway: a lookup,
          a record (one more finding), an import by a loader the tracer wrapped (checked by identity here,
          not by the wrapper's attributes); the trace functions take real frames only.
        What stays open (the tool's module globals, reachable through a gate's `__globals__`, changed and
        put back before the end) is listed in tests/test_trace_reach.py."""
        if op == "find" and len(args) == 3:
            box.append(self.find_spec(*args))
        elif op == "exec" and len(args) == 2:
            entry = self.loaders.get(id(args[0]))
            if entry is None or entry[0] is not args[0]:
                raise ImportError("fasttrack trace: not a loader of this trace")
            self.exec_wrapped(entry[1], args[1])
            box.append(True)
        elif op == "record" and len(args) == 3:
            self.record(str(args[0]), str(args[1]), str(args[2]))
        elif op == "trace" and len(args) == 4 and type(args[1]) is types.FrameType:
            which, frame, event, arg = args
            fn = self.trace_local if which == 1 else self.trace_foreign if which == 2 else self.trace_global
            box.append(fn(frame, str(event), arg))
        elif op in _DEFERRED and len(args) >= 1:
            _DEFERRED[op](self, *args)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        """First on sys.meta_path (through `_Finder`): a foreign module imported during the trace is
        snapshotted right after its own code ran, so what the contribution does to it later is a diff."""
        if not isinstance(name, str) or self.skip(name) or \
                any(name == r or name.startswith(r + ".") for r in self.engine_roots):
            return None
        for finder in sys.meta_path:
            if isinstance(finder, (_Finder, standins.EngineFinder, standins.MissingFinder)) \
                    or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                self.found[name] = spec  # an import by any route (importlib.import_module raises no event)
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    wrapper = _Baseline(spec.loader)
                    self.loaders[id(wrapper)] = (wrapper, spec.loader)
                    spec.loader = wrapper  # type: ignore[assignment]
                return spec
        return None

    def exec_wrapped(self, loader: Any, module: types.ModuleType) -> None:
        """A wrapped loader's `exec_module`: run the real loader, then snapshot the module it made."""
        outer = self.depth == 0 and self.active
        profiler = None
        if outer:
            if not self.spec.get("locate"):
                # whether any code of the contribution runs from the "pre" snapshot to the end of the import
                # (an own __del__ the import or the snapshot itself triggers, `absorbed_by_import.py`): then
                # what changes meanwhile is not the library's own work. A C profiler (no Python call per
                # event); the locate pass traces those frames anyway.
                busy, self.busy = self.busy, True
                try:
                    profiler = _PROFILER()
                    profiler.enable(False, False)
                finally:
                    self.busy = busy
            self.import_started(profiling=profiler is not None)
        self.depth += 1
        try:
            loader.exec_module(module)
        finally:
            self.depth -= 1
            ran = False
            if profiler is not None:
                busy, self.busy = self.busy, True
                try:
                    profiler.disable()
                    ran = any(getattr(e.code, "co_filename", None) in self.files for e in profiler.getstats())
                finally:
                    self.busy = busy
            self.checkpoint()  # code under trace may have run inside that import (an own __del__)
            self.baseline(module.__name__, module)
            if outer:
                self.import_finished(contribution_ran=ran)

    def baseline(self, name: str, module: types.ModuleType) -> None:
        busy, self.busy = self.busy, True
        try:
            self.baselines.update(snapshot.module_state(name, module))
        finally:
            self.busy = busy

    def import_started(self, profiling: bool = False) -> None:
        """A foreign import begins at top level: what changed since the baseline is the PR's so far
        (`profiling`: the tracer's own profiler is on, which the "pre" snapshot does not count)."""
        if self.watch:
            self.check(indirect=self.calling if self.in_foreign else "")
            return
        if self.spec.get("locate"):
            return
        busy, self.busy = self.busy, True
        try:
            self.pre = snapshot.take(self.skip)
            if profiling and _PROFILE_KEY in self.base:
                self.pre[_PROFILE_KEY] = self.base[_PROFILE_KEY]
            for key in snapshot.diff(self.base, self.pre):
                if key.startswith("state:") and _unreadable(self.pre.get(key)):
                    continue  # its getter failed on the module being imported (`logging.root`, half made)
                self.pending.setdefault(key, self.base.get(key, snapshot.MISSING))
        finally:
            self.busy = busy

    def import_finished(self, contribution_ran: bool = False) -> None:
        """What the foreign import changed is that library's own doing: it becomes the baseline (unless code
        of the contribution ran inside it: then it is the PR's, as if changed before the import)."""
        if self.watch:
            self.check(absorb=True)
            return
        if self.spec.get("locate"):
            return
        busy, self.busy = self.busy, True
        try:
            post = snapshot.take(self.skip)
            known: set[str] = set()
            if contribution_ran:  # the modules there before this import (not the one it makes)
                known = {k.split(":", 2)[1] for k in self.base if not k.startswith("state:")}
            for key in snapshot.diff(self.pre, post):
                if contribution_ran and (key.startswith("state:") or key.split(":", 2)[1] in known):
                    self.pending.setdefault(key, self.pre.get(key, snapshot.MISSING))
                elif key not in self.pending:
                    self.base[key] = post.get(key, snapshot.MISSING)
            for key, value in post.items():
                self.base.setdefault(key, value)
            self.imports_absorbed += 1
        finally:
            self.busy = busy

    # --------------------------------------------------------------------------- the locate pass
    def ours(self, frame: types.FrameType | None) -> bool:
        """A frame of the contribution, or of code it made from text (`exec`: `<string>`) it runs."""
        while frame is not None:
            name = frame.f_code.co_filename
            if name in self.files:
                return True
            if not (name.startswith("<") and not name.startswith("<frozen")):
                return False
            frame = frame.f_back
        return False

    def trace_global(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if self.ours(frame):
            self.check()
            return _trace_local
        if self.origins and self.origin() is not None:
            # A thread the contribution started, running foreign code (a Timer calling `setattr`): what
            # changed since its last call is blamed on the line that started it.
            self.check()
            return None
        caller = frame.f_back
        if self.depth == 0 and self.ours(caller):
            # A foreign function called by the PR: what changed before it ran is the PR's own doing;
            # what changes while it runs is "indirect" (checked when it returns).
            self.check()
            frame.f_trace_lines = False
            self.calling = _WRAPPED.get(frame.f_code) or (
                str(frame.f_globals.get("__name__", "?")) + "." + frame.f_code.co_qualname)
            self.in_foreign += 1
            return _trace_foreign
        return None

    def trace_foreign(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "return":
            self.in_foreign -= 1
            if self.depth == 0:
                self.check(indirect=self.calling)
        return None

    def trace_local(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        # On a line seen before (a loop), only the cheap keys: the dearer ones are re-read on new lines
        # and at call boundaries, so a loop over gc.get_objects() stays fast.
        where = (frame.f_code, frame.f_lineno)
        repeat = event == "line" and where in self.seen
        self.seen.add(where)
        self.check(cheap_only=repeat)
        if event == "line":
            path = self.files.get(frame.f_code.co_filename)
            if path is not None:
                self.lasts[_CURRENT()] = (path, frame.f_lineno)
        return _trace_local

    def check(self, absorb: bool = False, indirect: str = "", cheap_only: bool = False) -> None:
        """Compare the watched keys with their last value: a change is blamed on the contribution's last
        line, or (`absorb`, at the end of a foreign module's own import) taken as the new baseline."""
        if self.busy or not self.watch:
            return
        self.busy = True
        try:
            for key in list(self.watch):
                if cheap_only and not snapshot.cheap(key):
                    continue  # re-read on new lines and when a foreign call starts and returns
                if key in snapshot.THREAD_LOCAL and _CURRENT() is not _MAIN:
                    continue
                try:
                    now = snapshot.value_of(key)
                except Exception:
                    continue  # unreadable now (its module half imported, `logging.root`): read again later
                base = self.watch[key]
                if not snapshot.same(key, base, now):
                    if absorb:
                        self.watch[key] = now
                        self.absorbed.add(key)
                    elif key not in self.blame:
                        self.blame[key] = self.lasts.get(_CURRENT()) or self.origin()
                        if indirect:
                            self.indirect[key] = indirect
                        self.watch[key] = now  # still watched: a later line may change it again
                    else:
                        more = self.more.setdefault(key, [])
                        where = self.lasts.get(_CURRENT()) or self.origin()
                        if len(more) < MAX_BLAMES and where is not None:
                            more.append([where[0], where[1], indirect])
                        self.watch[key] = now
        finally:
            self.busy = False


# The wrappers below are gates installed into shared state: what they call is a positional default or (for
# one that takes `*args`) a constant of its code (`standins.with_constants`), never a global: the module's
# globals are reachable through any of them (`__globals__`) and changeable without an audit event.
def _thread_init(thread: threading.Thread, *args: Any, **kwargs: Any) -> None:
    init: Any = "_ft:init"
    gate: Any = "_ft:gate"
    init(thread, *args, **kwargs)
    gate("thread-init", (thread,))


def _thread_start(thread: threading.Thread, _gate: Any = _gate, _start: Any = _THREAD_START) -> None:
    _gate("thread-start", (thread,))
    _start(thread)
    _gate("thread-started", (thread,))


def _atexit_register(func: Any, *args: Any, **kwargs: Any) -> Any:
    gate: Any = "_ft:gate"
    frame: Any = "_ft:frame"
    register: Any = "_ft:register"
    gate("exit", (frame(1).f_code.co_filename, lambda: func(*args, **kwargs), func))
    return register(func, *args, **kwargs)


def _finalize_init(self: Any, obj: Any, func: Any, /, *args: Any, **kwargs: Any) -> None:
    init: Any = "_ft:init"
    gate: Any = "_ft:gate"
    frame: Any = "_ft:frame"
    init(self, obj, func, *args, **kwargs)
    gate("exit", (frame(1).f_code.co_filename, self))


def _fork_exec(*args: Any, **kwargs: Any) -> Any:  # no audit event: a process would start unseen
    gate: Any = "_ft:gate"
    error: Any = "_ft:error"
    gate("fork-exec", (args[:1],))
    raise error("fasttrack trace: _posixsubprocess.fork_exec is not allowed")


standins.with_constants(_thread_init, init=_THREAD_INIT, gate=_gate)
standins.with_constants(_atexit_register, gate=_gate, frame=sys._getframe, register=_ATEXIT_REGISTER)
standins.with_constants(_finalize_init, init=_FINALIZE_INIT, gate=_gate, frame=sys._getframe)
standins.with_constants(_fork_exec, gate=_gate, error=Sandboxed)


def _start_new_thread(function: Any, args: Any = (), kwargs: Any = None, _gate: Any = _gate,
                      _start: Any = _START_NEW, _lock: Any = _thread.allocate_lock) -> int:
    # below `threading`: not in threading.enumerate(), so settled here (and, in the locate pass, run to its
    # end right away, so what it changes is blamed on the line that started it)
    finished = _lock()
    finished.acquire()

    def run(*a: Any, **k: Any) -> None:
        try:
            function(*a, **k)
        finally:
            finished.release()

    ident: int = _start(run, tuple(args), dict(kwargs or {}))
    _gate("raw-thread", (finished,))
    return ident


def _codecs_register(search: Any, _gate: Any = _gate, _register: Any = _CODECS_REGISTER) -> None:
    _gate("codecs", (search,))  # a search function runs later, on any uncached codec name
    _register(search)


# Process-wide switches with no getter to snapshot: every call is recorded (at the contribution's line).
_NO_GETTER = (("faulthandler", "register"), ("faulthandler", "dump_traceback_later"),
              ("signal", "siginterrupt"), ("os", "setsid"), ("os", "setpgid"), ("os", "setpgrp"),
              # hooks every forked worker runs (C state, no reader, no audit event)
              ("os", "register_at_fork"), ("posix", "register_at_fork"))


def _recording(target: str, original: Any) -> Callable[..., Any]:
    def recorded(*args: Any, **kwargs: Any) -> Any:
        gate: Any = "_ft:gate"
        call: Any = "_ft:call"
        name: Any = "_ft:target"
        gate("note", (name, args))
        return call(*args, **kwargs)

    return standins.with_constants(recorded, gate=_gate, call=original, target=target)  # type: ignore[no-any-return]


def _on_note(tracer: Tracer, target: Any, args: Any = ()) -> None:
    if tracer.active:
        tracer.record("interpreter", str(target), _args(args if isinstance(args, tuple) else ()))


def _on_thread_made(tracer: Tracer, thread: Any) -> None:
    if tracer.active and (where := tracer.here()) is not None:
        tracer.origins[id(thread)] = where  # the line that made it (and handed it its target)


def _on_thread_start(tracer: Tracer, thread: Any) -> None:
    if tracer.active and id(thread) not in tracer.origins and (where := tracer.here()) is not None:
        tracer.origins[id(thread)] = where


def _on_thread_started(tracer: Tracer, thread: Any) -> None:
    if tracer.watch and id(thread) in tracer.origins and isinstance(thread, threading.Thread):
        # locate pass: run it to its end (within the budget) before the contribution's next line, so what
        # it changes is blamed on its own lines or the line that made it, never on a later one
        began = time.monotonic()
        thread.join(max(0.0, tracer.join_left))
        tracer.join_left -= time.monotonic() - began


def _on_exit(tracer: Tracer, filename: Any, hook: Any = None, func: Any = None) -> None:
    # registered by the contribution's own line, not by a library it called
    if tracer.active and filename in tracer.files and callable(hook):
        tracer.exits.append((tracer.here(), hook))
    if tracer.active and func is not None and _made_by(tracer, func):
        tracer.own_exit = True  # an exit hook of the contribution's making, whoever registered it


def _on_raw_thread(tracer: Tracer, finished: Any) -> None:
    if tracer.active and hasattr(finished, "acquire"):
        tracer.raw_threads.append((tracer.here(), finished))
        if tracer.watch:
            began = time.monotonic()
            if finished.acquire(timeout=max(0.0, tracer.join_left)):
                finished.release()
            tracer.join_left -= time.monotonic() - began


def _on_codecs(tracer: Tracer, search: Any) -> None:
    if tracer.active:
        tracer.record("interpreter", "codecs.register", _args((search,)))


def _on_fork_exec(tracer: Tracer, args: Any) -> None:
    tracer.blocked("escape", "_posixsubprocess.fork_exec", _args(args if isinstance(args, tuple) else ()))


_DEFERRED: dict[str, Callable[..., None]] = {
    "thread-init": _on_thread_made, "thread-start": _on_thread_start, "thread-started": _on_thread_started,
    "exit": _on_exit, "raw-thread": _on_raw_thread, "codecs": _on_codecs, "fork-exec": _on_fork_exec,
    "note": _on_note}


def _watch_deferred() -> None:
    """Threads and exit hooks the contribution leaves behind, with the line that made each: `Thread.start`
    (a Timer too), `atexit.register` and `weakref.finalize` are wrapped before the "before" snapshot (so
    putting the originals back is itself a diff). The wrappers are gates (no reference to the tracer)."""
    _posixsubprocess.fork_exec = _fork_exec
    if hasattr(subprocess, "_fork_exec"):
        subprocess._fork_exec = _fork_exec
    _thread.start_new_thread = _thread.start_new = _start_new_thread
    codecs.register = _codecs.register = _codecs_register
    for module_name, attr in _NO_GETTER:
        module = importlib.import_module(module_name)
        original = getattr(module, attr, None)
        if original is not None:
            setattr(module, attr, _recording(f"{module_name}.{attr}", original))
    _WRAPPED.update({_thread_init.__code__: "threading.Thread.__init__",
                     _thread_start.__code__: "threading.Thread.start",
                     _atexit_register.__code__: "atexit.register",
                     _finalize_init.__code__: "weakref.finalize.__init__"})
    threading.Thread.__init__ = _thread_init  # type: ignore[method-assign,assignment]
    threading.Thread.start = _thread_start  # type: ignore[method-assign,assignment]
    atexit.register = _atexit_register  # type: ignore[assignment]
    weakref.finalize.__init__ = _finalize_init  # type: ignore[method-assign]


def _settle(tracer: Tracer, before: set[int]) -> None:
    """Let the threads the contribution started finish (SETTLE_S in all), then run the exit hooks it
    registered (what `atexit` and `weakref.finalize` would run at exit, which the trace never reaches), each
    blamed on the line that registered it. A thread still running stays in the snapshot's thread list."""
    deadline = time.monotonic() + SETTLE_S
    for thread in threading.enumerate():
        left = deadline - time.monotonic()
        if thread.ident in before or thread is threading.current_thread() or left <= 0:
            continue
        thread.join(left)
    for where, finished in list(tracer.raw_threads):  # threads started below `threading`
        if finished.acquire(timeout=max(0.0, deadline - time.monotonic())):
            finished.release()
        else:
            tracer.lasts[_CURRENT()] = where
            tracer.record("interpreter", "_thread.start_new_thread",
                          "a thread started at import is still running")
    # A cycle of the contribution's objects (an own __del__ or a weakref callback in it) would be collected
    # by the engine's next full collection: collect now, inside the trace.
    gc.collect()
    tracer.check()
    me = _CURRENT()
    for where, hook in list(tracer.exits):
        tracer.lasts[me] = where
        with contextlib.suppress(BaseException):  # a failing exit hook's effects still count
            hook()
        tracer.check()
    tracer.check()


def _shutdown(tracer: Tracer) -> None:
    """What the engine's interpreter runs when it tears the contribution's modules down: the `__del__` of an
    object of the contribution's own class held by one of its module globals (`KEEP = _K()`), which the trace
    (it ends with os._exit) would never reach. Each is called now, with the tracer active, and what it
    changes is blamed on the line that binds the global (the locate pass does not trace into it)."""
    me = _CURRENT()
    for name, module in list(sys.modules.items()):
        path = tracer.files.get(str(getattr(module, "__file__", None)))
        if path is None or not tracer.owned(name):
            continue
        for attr, value in list(vars(module).items()):
            finalizer: Any = getattr(type(value), "__del__", None)
            code = getattr(finalizer, "__code__", None)
            if code is None or getattr(code, "co_filename", None) not in tracer.files:
                continue
            tracer.lasts[me] = (path, _binding_line(str(module.__file__), attr))
            tracer.active = False
            sys.settrace(None)
            tracer.active = True
            with contextlib.suppress(BaseException):  # a failing __del__'s effects still count
                finalizer(value)
            tracer.check()


def _binding_line(file: str, name: str) -> int:
    """The first top-level statement of a module's source that binds `name` (0: none found)."""
    import ast

    try:
        with open(file, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return 0
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
            return node.lineno
    return 0


class _Baseline:
    """A loader wrapper (a gate): `exec_module` asks the tracer to run the loader it wrapped (the tracer's
    own record of it, not `_loader`, which anyone may change) and to snapshot the module it made."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType, _gate: Any = _gate) -> None:
        if _gate("exec", (self, module)) is None:  # before the tracer's hook is in
            self._loader.exec_module(module)


class _Finder:
    """The tracer's place on sys.meta_path (a gate)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None, _gate: Any = _gate) -> Any:
        return _gate("find", (name, path, target))


def _trace_global(frame: Any, event: str, arg: Any, _gate: Any = _gate) -> Any:
    return _gate("trace", (0, frame, event, arg))


def _trace_local(frame: Any, event: str, arg: Any, _gate: Any = _gate) -> Any:
    return _gate("trace", (1, frame, event, arg))


def _trace_foreign(frame: Any, event: str, arg: Any, _gate: Any = _gate) -> Any:
    return _gate("trace", (2, frame, event, arg))


def _record_gate(kind: str, target: str, detail: str, _gate: Any = _gate) -> None:
    _gate("record", (kind, target, detail))


_EXEC_MODULE = Tracer.exec_wrapped.__code__


def _channel(fd: int, key: bytes, main_code: types.CodeType, final_code: types.CodeType, main_ident: int,
             _hmac: Any = _HMAC, _write: Any = os.write, _frame: Any = sys._getframe,
             _ident: Any = threading.get_ident, _type: Any = type, _bytes: Any = bytes,
             _tuple: Any = tuple) -> Generator[None, Any, None]:
    """The report's only writer: each line `<hmac> <seq> <flag> <json>`, the HMAC-SHA256 of the rest under the
    parent's key (which lives only in this generator's frame: the guard blocks `gi_frame` and
    `gc.get_referents` on it), so a line written to the pipe by anyone else (`os.write` on the fd) fails the
    trace. `flag` P (privileged: the `done` and `located` events, which end the report or clear a finding) is
    given only when `_send_final` is called straight from the one running `main` at the bottom of the main
    thread's stack; anything else is U. Everything it uses is bound as a default (no globals, no builtins
    looked up at run time); no exception leaves it (a traceback would show its frame)."""
    seq = 0
    while True:
        try:
            request = yield
            if _type(request) is not _tuple:
                continue
            privileged, data = request
            if _type(data) is not _bytes:
                continue
            flag = b"U"
            if privileged is True and _ident() == main_ident:
                caller = _frame(1)
                outer = caller.f_back
                bottom = outer.f_back if outer is not None else None
                if caller.f_code is final_code and outer is not None and outer.f_code is main_code and \
                        bottom is not None and bottom.f_back is None and \
                        bottom.f_code.co_filename == "<string>":
                    flag = b"P"
            head = b"%d %s " % (seq, flag)
            line = _hmac(key, head + data, "sha256").hex().encode() + b" " + head + data + b"\n"
            seq += 1
            while line:
                line = line[_write(fd, line):]
        except GeneratorExit:
            return
        except BaseException:
            continue


def _send_final(chan: Callable[[tuple[bool, bytes]], Any], event: dict[str, Any], _enc: Any = _C_ENCODE,
                _join: Any = "".join) -> None:
    """A privileged event (`done`, `located`): called only by `main`, with references it bound before any
    code under trace ran."""
    chan((True, _join(_enc(event, 0)).encode("utf-8", "replace")))


def _guard(gen: Any, tool_ids: frozenset[int], _exc: Any = Sandboxed, _id: Any = id, _tuple: Any = tuple,
           _type: Any = type) -> Callable[[str, tuple[Any, ...]], None]:
    """A second audit hook, referenced by nothing but the interpreter: no frame of the report's channel
    (`gi_frame`, `gc.get_referents`), and no `__code__`/`__defaults__`/... of the tracer's own functions
    replaced."""

    def guard(event: str, args: tuple[Any, ...], _gen: Any = gen, _ids: frozenset[int] = tool_ids,
              _exc: Any = _exc, _id: Any = _id, _tuple: Any = _tuple, _type: Any = _type) -> None:
        if event == "object.__getattr__":
            if args and args[0] is _gen:
                raise _exc("fasttrack trace: the report's channel is not open to inspection")
        elif event == "gc.get_referents":
            for objs in args:
                for o in (objs if _type(objs) is _tuple else (objs,)):
                    if o is _gen:
                        raise _exc("fasttrack trace: the report's channel is not open to inspection")
        elif event in ("object.__setattr__", "object.__delattr__") and args and _id(args[0]) in _ids:
            raise _exc("fasttrack trace: the tracer's own functions cannot be changed")

    return guard


# Frequent events whose handling reads only the child's own module, classes and instance, `snapshot`'s
# globals (`describe`) and the builtins: checked against those only (`_watchlist(light=True)`). The rest
# (the gates above all, whose work takes snapshots) against everything.
_LIGHT_EVENTS = frozenset({"sys._getframe", "open", "import", "compile", "exec", "marshal.loads",
                           "object.__setattr__", "object.__delattr__", "os.listdir", "os.scandir"})


def _hook(tracer: Tracer, verify: tuple[Callable[[], list[str]], Callable[[], list[str]]]
          ) -> Callable[[str, tuple[Any, ...]], None]:
    """The tracer's audit hook (referenced by nothing but the interpreter). Events it does nothing with
    (`id()`, attribute reads other than a frame's) return at once; before any other, the tracer's own objects
    (its modules' globals, classes and tables, the builtins: reachable through any gate's `__globals__` and
    changeable without an audit event) are compared with their baseline, put back and reported if changed,
    so the tracer never acts on a swapped global (tests/test_trace_reach.py, `recorders_swap.py` and its
    variants). Its own decisions use only what is bound here."""

    def hook(event: str, args: tuple[Any, ...], _body: Any = tracer.hook, _verify: Any = verify[0],
             _light: Any = verify[1], _light_events: frozenset[str] = _LIGHT_EVENTS,
             _tamper: Any = tracer.tamper, _fast: frozenset[str] = frozenset({"builtins.id"}),
             _attr: str = "object.__getattr__", _frames: tuple[str, ...] = FRAME_ATTRS,
             _gate_event: str = GATE,
             _len: Any = len, _type: Any = type, _tuple: Any = tuple) -> None:
        if event in _fast or (event == _attr and not (_len(args) > 1 and args[1] in _frames)):
            return
        if not (event == _gate_event and _len(args) == 3 and args[0] == "trace"):  # the locate pass's line
            # tracer: checked at every other event (what it re-reads after a swap is blamed on a later line)
            changed = _light() if event in _light_events else _verify()
            if changed:
                _tamper(changed)
        _body(event, args)

    # CPython runs audit hooks with tracing and profiling off unless the hook says `__cantrace__`: what the
    # tracer does inside it includes running a foreign module's import (`exec_wrapped`), during which code of
    # the contribution can run (an own __del__ it triggers, `absorbed_by_import.py`): the tracer's profiler
    # (pass 1) and the locate pass's line tracer must see it.
    hook.__cantrace__ = True  # type: ignore[attr-defined]
    return hook


def _tool_ids(modules: list[types.ModuleType]) -> frozenset[int]:
    """The ids of the tracer's own functions (module-level, methods, static and class methods)."""
    out: set[int] = set()
    for mod in modules:
        for value in list(vars(mod).values()):
            own_class = isinstance(value, type) and \
                str(getattr(value, "__module__", "")).startswith("_fasttrack_trace")
            if own_class:
                out.add(id(value))  # its methods cannot be replaced either
            items = list(vars(value).values()) if own_class else [value]
            for v in items:
                v = getattr(v, "__func__", v)
                if isinstance(v, types.FunctionType):
                    out.add(id(v))
    return frozenset(out)


# Attributes of the tracer that stay the same objects for the whole pass (their contents may change).
_FIXED = ("spec", "fd", "files", "own_prefixes", "writable", "finder", "chan", "baselines", "watch", "blame",
          "absorbed", "pending", "base", "more", "indirect", "lasts", "origins", "exits", "raw_threads",
          "tampered")


def _integrity_baseline(tracer: Tracer, modules: list[types.ModuleType]) -> tuple[Any, ...]:
    """What the tracer's own code looks up at run time, captured before any code under trace runs: the
    builtins, its own modules' globals and classes (every name: one added there shadows a builtin), and the
    tracer's fixed attributes. `_tampered` compares them at the end."""
    watched: list[tuple[str, Any, bool]] = [("builtins", vars(builtins), False)]
    for mod in modules:
        watched.append((mod.__name__, vars(mod), True))
        for value in list(vars(mod).values()):
            if isinstance(value, type) and value.__dict__.get("__module__") == mod.__name__:
                watched.append((f"{mod.__name__}.{value.__qualname__}", value.__dict__, True))
    state = vars(tracer)
    out = [(name, live, exact, tuple(live.items())) for name, live, exact in watched]
    out.append(("tracer", state, False, tuple((k, state[k]) for k in _FIXED)))
    return tuple(out), frozenset(k for k, v in vars(Tracer).items() if callable(v)), tracer


def _tampered(baseline: tuple[Any, ...], _missing: Any = MISSING_SENTINEL, _len: Any = len,
              _vars: Any = vars) -> list[str]:
    """What of `_integrity_baseline` code under trace changed (uses no global and no builtin looked up at run
    time: a replaced builtin cannot hide itself from it)."""
    watched, methods, tracer = baseline
    out: list[str] = []
    for name, live, exact, items in watched:
        for k, v in items:
            if live.get(k, _missing) is not v:
                out.append(f"{name}.{k}")
        if exact and _len(live) != _len(items):
            out.append(f"{name} (a name added or removed)")
    for k in _vars(tracer):
        if k in methods:
            out.append(f"tracer.{k} (shadows its method)")
    return out


def _watchlist(baseline: tuple[Any, ...], modules: list[types.ModuleType]) -> tuple[Any, ...]:
    """What `_verifier` compares at every event the tracer acts on: `_integrity_baseline`'s namespaces (with
    the class each class namespace belongs to, to put it back), the contents of the tool modules' own
    containers (`_DEFERRED`, `snapshot.STATE`, ...) and the closure cells of its functions (a registry
    getter's `where`), each as (name, live object, kind, owner, keys, values)."""
    watched, _methods, tracer = baseline
    owners: dict[str, type] = {}  # the name `_integrity_baseline` gives a class's namespace -> the class
    functions: list[tuple[str, Any]] = []
    containers: list[tuple[str, Any]] = []
    for mod in modules:
        for attr, value in list(vars(mod).items()):
            if isinstance(value, type) and value.__dict__.get("__module__") == mod.__name__:
                owners[f"{mod.__name__}.{value.__qualname__}"] = value
                functions += [(f"{mod.__name__}.{attr}.{k}", getattr(v, "__func__", v))
                              for k, v in list(value.__dict__.items())]
            elif type(value) in (dict, list, set) and attr not in _CHANGING:
                containers.append((f"{mod.__name__}.{attr}", value))
                if type(value) is dict:
                    functions += [(f"{mod.__name__}.{attr}[{k!r}]", v) for k, v in list(value.items())]
            functions.append((f"{mod.__name__}.{attr}", value))
    out: list[tuple[Any, ...]] = []
    for name, live, exact, items in watched:
        kind = "tracer" if live is vars(tracer) else "class" if type(live) is types.MappingProxyType else \
            "dict" if exact else "open"
        out.append((name, live, kind, owners.get(name), tuple(k for k, _ in items),
                    tuple(v for _, v in items)))
    seen = {id(live) for _, live, _, _ in watched}
    for name, live in containers:
        if id(live) in seen:
            continue  # a module's `__builtins__` (the builtins, watched above)
        seen.add(id(live))
        items = tuple(live.items()) if type(live) is dict else tuple((None, v) for v in live)
        out.append((name, live, type(live).__name__, None, tuple(k for k, _ in items),
                    tuple(v for _, v in items)))
    cells: list[tuple[Any, Any]] = []
    for _name, fn in functions:
        for cell in getattr(fn, "__closure__", None) or () if isinstance(fn, types.FunctionType) else ():
            with contextlib.suppress(ValueError):
                cells.append((cell, cell.cell_contents))
    out.append(("closure cells", tuple(c for c, _ in cells), "cells", None, (), tuple(v for _, v in cells)))
    out.append(("tracer", vars(tracer), "shadow", None, (), frozenset(_methods)))
    return tuple(out)


# Containers of the tool's modules that it fills as it runs (not compared by `_verifier`).
_CHANGING = frozenset({"_WRAPPED"})


def _verifier(watch: tuple[Any, ...], _is: Any = operator.is_, _all: Any = all, _map: Any = map,
              _len: Any = len, _zip: Any = zip, _getter: Any = operator.attrgetter("cell_contents"),
              _set_attr: Any = setattr, _type_set: Any = type.__setattr__, _type_del: Any = type.__delattr__,
              _missing: Any = MISSING_SENTINEL, _list: Any = list, _set: Any = set,
              _suppress: Any = contextlib.suppress) -> Callable[[], list[str]]:
    """A check of `_watchlist` that is cheap when nothing changed (identity compares in C): what changed is
    put back at once, before the tracer acts on it, and named (the caller reports it: an error). The check
    and everything it uses are bound here: it reads no global and no builtin at run time."""

    def changed(_watch: Any = watch) -> list[str]:
        out: list[str] = []
        for name, live, kind, owner, keys, values in _watch:
            if kind == "cells":
                if _all(_map(_is, _map(_getter, live), values)):
                    continue
                for cell, v in _zip(live, values):
                    if _getter(cell) is not v:
                        out.append(name)
                        cell.cell_contents = v
                continue
            if kind == "shadow":
                if values.isdisjoint(live):
                    continue
                for k in [k for k in values if k in live]:
                    out.append(f"tracer.{k} (shadows its method)")
                    del live[k]
                continue
            if kind in ("list", "set"):
                if _len(live) == _len(values) and (_all(_map(_is, live, values)) if kind == "list"
                                                   else live == _set(values)):
                    continue
                out.append(name)
                if kind == "list":
                    live[:] = values
                else:
                    live.clear()
                    live.update(values)
                continue
            if kind != "tracer" and _len(live) == _len(keys) and _all(_map(_is, live.values(), values)) and \
                    _all(_map(_is, live.keys(), keys)):
                continue
            exact = kind in ("dict", "class")
            for k, v in _zip(keys, values):
                if live.get(k, _missing) is not v:
                    out.append(f"{name}.{k}")
                    if kind == "class":
                        with _suppress(Exception):
                            _type_set(owner, k, v)
                    else:
                        live[k] = v
            if exact and _len(live) != _len(keys):
                extra = [k for k in _list(live) if k not in keys]
                for k in extra:
                    out.append(f"{name}.{k} (added)")
                    if kind == "class":
                        with _suppress(Exception):
                            _type_del(owner, k)
                    else:
                        del live[k]
        return out

    return changed


def _unreadable(value: Any) -> bool:
    """What `snapshot.take` stores for a getter that raised."""
    return type(value) is str and value.startswith("<error ")


def _finds(finder: Any, name: str) -> bool:
    find = getattr(finder, "find_spec", None)
    try:
        return find is not None and find(name, None) is not None
    except Exception:
        return True  # cannot tell: not taken for missing (then not skipped)


def _process_memory(path: Any) -> bool:
    """`/proc/<pid>/mem` (any spelling: self, thread-self, a task) and /dev/mem: reading the process's memory
    reads the tracer's too."""
    if isinstance(path, int):
        return False
    try:
        real = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return True
    return real in ("/dev/mem", "/dev/kmem", "/dev/port") or (real.startswith("/proc/") and
                                                              real.rsplit("/", 1)[-1] == "mem")


def _args(args: tuple[Any, ...]) -> str:
    return snapshot.describe(args)


def _preimport(names: list[str]) -> list[str]:
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except BaseException:
            failed.append(name)
    return failed


def _sys_modules_effects(tracer: Tracer, before: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name, module in before.items():
        if tracer.skip(name):
            continue
        now = sys.modules.get(name, snapshot.MISSING)
        if now is not module:
            out.append({"key": f"sysmod:{name}", "target": f"sys.modules[{name!r}]",
                        "detail": "removed" if now is snapshot.MISSING else "replaced"})
    for name in sys.modules.keys() - before.keys():
        if tracer.skip(name):
            continue
        module = sys.modules[name]
        spec = getattr(module, "__spec__", None)
        imported = name in tracer.imported or (name in tracer.found and spec is tracer.found[name])
        if not imported or getattr(spec, "name", None) != name:
            out.append({"key": f"sysmod:{name}", "target": f"sys.modules[{name!r}]",
                        "detail": "inserted without an import"})
        elif getattr(module, "__file__", None) in tracer.files:
            out.append({"key": f"sysmod:{name}", "target": f"sys.modules[{name!r}]",
                        "detail": "a foreign module's name bound to the contribution's code"})
    return out


def _made_by(tracer: Tracer, value: Any) -> bool:
    """Whether a value is the contribution's own making (a function, class or wrapper of one)."""
    for _ in range(8):
        inner = (getattr(value, "__func__", None) or getattr(value, "func", None)
                 or getattr(value, "fget", None))
        if inner is None or inner is value:
            break
        value = inner
    code = getattr(value, "__code__", None)
    if code is not None and getattr(code, "co_filename", None) in tracer.files:
        return True
    if not isinstance(value, type):
        return False
    if tracer.owned(str(value.__dict__.get("__module__", ""))):
        return True
    # a class made with type() under another module's name: its own functions' code says whose it is
    return any(getattr(getattr(v, "__code__", None), "co_filename", None) in tracer.files
               for v in list(value.__dict__.values()))


def _own_entries(tracer: Tracer, key: str) -> bool:
    """A registry diff (box:, cbox:) whose added or replaced entries hold the contribution's own values
    (`copyreg.pickle(complex, own_reducer)`): not the owning library's bookkeeping."""
    kind, _, rest = key.partition(":")
    if kind == "box":
        name, _, attr = rest.rpartition(":")
        container = vars(sys.modules[name]).get(attr) if name in sys.modules else None
    else:
        name, holder, attr = rest.split(":", 2)
        cls = vars(sys.modules[name]).get(holder) if name in sys.modules else None
        container = cls.__dict__.get(attr) if isinstance(cls, type) else None
    values: list[Any] = []
    if isinstance(container, dict) and type(container) is dict:
        values = list(container.values())
    elif isinstance(container, (list, set)) and type(container) in (list, set):
        values = list(container)
    return any(_made_by(tracer, v) for v in values[:5000] if id(v) not in tracer.preexisting)


def _replaced_function(key: str, before: snapshot.Snapshot, after: snapshot.Snapshot) -> bool:
    """A closure-cell or attribute key (`cell:`, `ccell:`, `fn:`) of a function that was itself replaced (or
    added, or removed): its `mod:`/`cls:` key speaks for it (those keys are for changes in place)."""
    if key.startswith("cell:"):
        holder = "mod:" + key[len("cell:"):]
    elif key.startswith("fn:"):
        holder = "mod:" + key[len("fn:"):]
    elif key.startswith("ccell:"):
        holder = "cls:" + key[len("ccell:"):]
    else:
        return False
    return before.get(holder, snapshot.MISSING) is not after.get(holder, snapshot.MISSING)


def _submodule_binding(key: str, value: Any) -> bool:
    if not key.startswith("mod:") or not isinstance(value, types.ModuleType):
        return False
    name, _, attr = key[4:].rpartition(":")
    return value.__name__ == f"{name}.{attr}"


def _resolve(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def _fused(answer: Any) -> bool:
    """The guard's answer: a bool, or a record whose `use_fused` (or first field) is one."""
    value = getattr(answer, "use_fused", MISSING_SENTINEL)
    if value is MISSING_SENTINEL:
        value = answer[0] if type(answer) is tuple and answer else answer
    if type(value) is not bool:
        raise TypeError(f"the guard's answer {snapshot.describe(answer)} is not a bool")
    return value


def _call_entries(calls: dict[str, Any], files: dict[str, str]) -> list[dict[str, Any]]:
    """Call what the manifest's `[trace]` names, after the imports and with the tracer active (what the calls
    do is recorded and attributed as at import): the smoke callable, then the guard at each point."""
    out: list[dict[str, Any]] = []
    smoke, guard, make_input = calls.get("smoke"), calls.get("guard"), calls.get("guard_input")
    if isinstance(smoke, str) and smoke:
        out.append(_call_one("smoke", lambda: _resolve(smoke)(), None, files))
    if isinstance(guard, str) and guard and isinstance(make_input, str) and make_input:
        for name, point in calls.get("points") or []:
            out.append(_call_one(str(name), functools.partial(_ask, guard, make_input, dict(point)), point,
                                 files))
    return out


def _ask(guard: str, make_input: str, point: dict[str, Any]) -> bool:
    return _fused(_resolve(guard)(_resolve(make_input)(point)))


def _call_one(name: str, call: Callable[[], Any], point: Any, files: dict[str, str]) -> dict[str, Any]:
    rec: dict[str, Any] = {"name": name, "point": snapshot.describe(point) if point is not None else ""}
    try:
        answer = call()
    except BaseException as exc:  # SystemExit and KeyboardInterrupt from the code under trace too
        at = [(files.get(fr.filename), fr.lineno) for fr in traceback.extract_tb(exc.__traceback__)
              if fr.filename in files]
        path, line = at[-1] if at else (None, None)
        rec.update(returned=False, detail=snapshot.describe(f"{type(exc).__name__}: {exc}"), path=path,
                   line=line)
        return rec
    rec["returned"] = True
    if point is not None:
        rec["fused"] = answer is True
    return rec


def _read_spec(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        spec: dict[str, Any] = json.load(f)
    os.unlink(path)
    return spec


def _await_plan(spec_path: str) -> dict[str, Any]:
    """A prestarted child: wait for the parent's word on stdin, then read the full spec it wrote beside the
    first (tmp/plan.json). stdin is /dev/null from then on, as for a child started with its plan; EOF
    without the word (the parent gave the child up) ends it here, before any code of the contribution."""
    word = sys.stdin.buffer.readline()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if word != b"go\n":
        os._exit(0)
    return _read_spec(os.path.join(os.path.dirname(spec_path), "plan.json"))


def main(spec_path: str) -> None:
    stdlib_state.fork_sentinel()  # first, while the process is small
    spec = _read_spec(spec_path)
    stack: list[str] = []
    failed_stack: list[str] = []
    if "prestart" in spec:
        # Started before the plan was known: import the engine stack now (nothing of the contribution is
        # in the sandbox yet), then take the plan, whose pre-imports must begin with exactly this stack.
        stack = list(spec["prestart"])
        failed_stack = _preimport(stack)
        spec = _await_plan(spec_path)
        if spec["preimport"][:len(stack)] != stack:
            raise SystemExit("the plan's pre-imports do not begin with the stack this child imported")
    tracer = Tracer(spec)
    gen = _channel(tracer.fd, bytes.fromhex(spec.pop("token", "")), main.__code__, _send_final.__code__,
                   threading.get_ident())
    next(gen)
    chan = tracer.chan = gen.send
    final = _send_final
    started = time.monotonic()
    failed_pre = failed_stack + _preimport(spec["preimport"][len(stack):])
    stdlib_state.seal()  # stdin: a pipe of empty lines (a read shows); sysconfig's caches filled
    sys.path[:] = [p for p in sys.path if not p.startswith(spec["tool_dir"])]
    tracer.finders_before = tuple(sys.meta_path)
    tracer.names_before = frozenset(sys.modules)
    sys.meta_path.insert(0, _Finder())
    missing = standins.install(_record_gate, tracer.finder)
    _watch_deferred()
    threads_before = {t.ident or 0 for t in threading.enumerate()}
    before_modules = dict(sys.modules)
    before = snapshot.take(tracer.skip)
    tracer.preexisting = {id(v) for v in before.values()}
    tracer.base = dict(before)
    locate: list[str] = spec.get("locate", [])
    tool = [sys.modules[__name__], snapshot, torch_state, stdlib_state, standins]
    integrity = _integrity_baseline(tracer, tool)
    watch = _watchlist(integrity, tool)
    tracer.verify = full = _verifier(watch)
    # the light check: the builtins, the tracer, this module's globals, classes and tables, snapshot's globals
    light = _verifier(tuple(e for e in watch if e[0] in ("builtins", "tracer", __name__, snapshot.__name__)
                            or e[0].startswith(f"{__name__}.")))
    sys.addaudithook(_guard(gen, _tool_ids(tool)))
    sys.addaudithook(_hook(tracer, (full, light)))
    tampered = _tampered
    del tool
    for name in [n for n in sys.modules if n.startswith("_fasttrack_trace")]:
        del sys.modules[name]  # not reachable by name (the tracer keeps its modules alive)
    if locate:
        for key in locate:
            tracer.watch[key] = before.get(key, snapshot.MISSING) if not key.startswith("sysmod:") else \
                before_modules.get(key[7:], snapshot.MISSING)
        sys.settrace(_trace_global)
        threading.settrace(_trace_global)
    tracer.active = True
    for name in spec["targets"]:
        if locate:
            tracer.active = False
            sys.settrace(_trace_global)  # again: a module before this one may have cleared it
            tracer.active = True
        try:
            importlib.import_module(name)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from the code under trace too
            tracer.active = False
            tb = traceback.extract_tb(exc.__traceback__)
            at = [(spec["contribution_files"].get(fr.filename), fr.lineno) for fr in tb
                  if fr.filename in spec["contribution_files"]]
            path, line = at[-1] if at else (None, None)
            tracer.send({"kind": "import-error", "target": name, "path": path, "line": line,
                         "detail": snapshot.describe(f"{type(exc).__name__}: {exc}")})
            tracer.active = True
    if locate:
        tracer.active = False
        sys.settrace(_trace_global)  # a module may have cleared it
        tracer.active = True
    calls = _call_entries(spec.get("calls") or {}, spec["contribution_files"])
    tracer.checkpoint()
    _settle(tracer, threads_before)
    _shutdown(tracer)
    changed = tampered(integrity)
    tracer.checkpoint()
    tracer.active = False
    sys.settrace(None)
    threading.settrace(None)
    tracer.busy = True
    if locate:
        for key in locate:
            blamed = tracer.blame.get(key)
            final(chan, {"kind": "located", "key": key, "changed": key in tracer.blame,
                         "absorbed": key in tracer.absorbed, "indirect": tracer.indirect.get(key, ""),
                         "also": tracer.more.get(key, []),
                         "path": blamed[0] if blamed else None, "line": blamed[1] if blamed else None})
    else:
        after = snapshot.take(tracer.skip)
        base = dict(tracer.baselines)
        base.update(tracer.base)
        base.update(tracer.pending)
        for key in sorted(set(snapshot.diff(base, after)) | set(tracer.pending)):
            value = after.get(key, snapshot.MISSING)
            if _submodule_binding(key, value) or key.endswith(":__warningregistry__") or \
                    _replaced_function(key, base, after):
                continue
            if not key.startswith("state:") and key.split(":", 2)[1] not in sys.modules:
                continue  # a module that left sys.modules (a failed import): its sys.modules key says so
            old = base.get(key, snapshot.MISSING)
            own = _made_by(tracer, value) or (key.startswith(("box:", "cbox:")) and _own_entries(tracer, key))
            own = own or (key == "state:atexit.callbacks" and tracer.own_exit)
            event: dict[str, Any] = {"kind": "state-diff", "key": key, "before": snapshot.describe(old),
                                     "after": snapshot.describe(value), "own_value": own}
            if isinstance(old, (tuple, frozenset)) and isinstance(value, (tuple, frozenset)):
                event["added"] = sorted((v for v in value if v not in old), key=repr)[:50]
                event["removed"] = sorted((v for v in old if v not in value), key=repr)[:50]
            tracer.send(event)
        for ev in _sys_modules_effects(tracer, before_modules):
            tracer.send({"kind": "state-diff", **ev})
    changed += tampered(integrity)
    tracer.checkpoint()
    changed += tracer.tampered
    final(chan, {"kind": "done", "seconds": round(time.monotonic() - started, 3),
                 "tampered": sorted(set(changed)), "preimport_failed": failed_pre,
                 "missing": sorted(missing.missing),
                 "imports_absorbed": tracer.imports_absorbed, "calls": calls,
                 "standins": len(tracer.finder.standins), "imported": len(tracer.imported)})
    os._exit(0)  # no atexit handler or thread of the code under trace runs after the report
