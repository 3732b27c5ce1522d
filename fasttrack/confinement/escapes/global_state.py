"""Process-wide state (FT146, and FT123 for the environment and global flags): the policy's allow-list of
state calls, files written, threads started at import time, scoped switches entered by hand, and
state-changing callables handed on as values."""

from __future__ import annotations

import ast

from fasttrack.confinement.escapes.base import CheckBase
from fasttrack.confinement.escapes.common import (
    _INTERPRETER_HOOKS,
    _MUTATORS,
    _THREAD_STARTS,
    _WRITERS,
    GLOBAL_STATE,
    MONKEYPATCH,
    SETATTR,
    _arg,
    _dotted_literal,
    _matches,
    mutating_method,
    state_like_receiver,
)
from fasttrack.confinement.escapes.fds import on_own_fd
from fasttrack.confinement.escapes.scope import (
    _BOUND,
    _INSTANCE,
    _METHODCALLER,
    _OF_FOREIGN,
    _THREAD_REF,
    _Ref,
    _Scope,
)

# Mode letters that write: open()'s w/a/x/+ and dbm's c (create) / n (new).
_WRITE_MODE = frozenset("waxc+n")
_MODE_TEXT = frozenset("rwaxbtcnU+")
# Objects made by these calls hold their bytes in memory: a writer handed one writes no file.
_IN_MEMORY = frozenset({f"{_OF_FOREIGN}io.BytesIO>", f"{_OF_FOREIGN}io.StringIO>",
                        f"{_OF_FOREIGN}_io.BytesIO>", f"{_OF_FOREIGN}_io.StringIO>"})


# Context managers that call a method of the object they wrap when the block ends.
_CLOSERS = {"contextlib.closing": "close", "contextlib.aclosing": "aclose"}
# Calls that map a file into memory, writable (the file changes with the tensor) when `shared` is true.
_SHARED_MAPPINGS = ("torch.from_file", "torch.*Storage.from_file", "torch.storage.*Storage.from_file")

# `os.open` flags that neither create, truncate nor write
_READ_FLAGS = frozenset({"O_RDONLY", "O_CLOEXEC", "O_NONBLOCK", "O_NOFOLLOW", "O_DIRECTORY", "O_NOCTTY",
                         "O_BINARY", "O_NOATIME", "O_PATH", "O_LARGEFILE", "O_NOINHERIT"})


_NATIVE_MEMORY_METHODS = frozenset({"from_address"})


def _writes(mode: str) -> bool:
    return any(c in _WRITE_MODE for c in mode)


def _mode_like(node: ast.expr | None) -> str | None:
    """A string literal that reads as a file mode ('w', 'rb', 'a+'), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value and \
            set(node.value) <= _MODE_TEXT:
        return node.value
    return None


class GlobalStateChecks(CheckBase):
    """Process-wide state: FT146 (and FT123 for the environment and global flags)."""

    def _check_thread_start(self, node: ast.Call, scope: _Scope, import_time: bool) -> None:
        """A thread (or pool) started at import time keeps running beside the engine after the import."""
        if not isinstance(node.func, ast.Attribute) or node.func.attr not in _THREAD_STARTS or \
                self.resolve(node.func.value, scope) != _THREAD_REF:
            return
        if not import_time:
            key = self._enclosing_function(scope)
            if key is not None:
                self.thread_starts.setdefault(key, node)  # judged where the function is called
        else:
            self.report(GLOBAL_STATE, node, f"starts a thread at import time (`.{node.func.attr}()` on a "
                        "thread or thread pool): it outlives the import and runs beside the engine in every "
                        "process that imports the model (start it from the model's code at run time)",
                        target=f"<thread>.{node.func.attr}")

    def _check_import_time_thread_calls(self) -> None:
        """An own function that starts a thread (itself or through further own calls), called at import
        time, starts it at import time."""
        changed = True
        while changed:
            changed = False
            for _call, scope, key in self.own_calls:
                caller = self._enclosing_function(scope)
                if key in self.thread_starts and caller is not None and caller not in self.thread_starts:
                    self.thread_starts[caller] = self.thread_starts[key]
                    changed = True
        for call, _, key in self.own_calls:
            start = self.thread_starts.get(key)
            if start is not None and id(call) in self.import_time_calls:
                shown = key.rsplit(".", 1)[-1]
                self.report(GLOBAL_STATE, call, f"calls `{shown}` at import time, which starts a thread "
                            f"(line {getattr(start, 'lineno', '?')}): it outlives the import and runs "
                            "beside the engine (start it from the model's code at run time)",
                            target="<thread>.start")

    def _check_native_memory(self, node: ast.Call, scope: _Scope) -> None:
        """`T.from_address(n)` on any receiver (a ctypes type, an array type `(c_char * 4)`, the model's own
        `Structure` subclass): an object over memory at an address the code chose, which reaches any object
        of the process with no audit event the trace could see. The name is ctypes' own: fail closed on it,
        whatever the scan can tell of the receiver."""
        name = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2 and \
                isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            name = node.args[1].value  # `getattr(T, 'from_address')`
        if name is None and not isinstance(node.func, ast.Attribute):
            ref = self.resolve(node.func, scope)  # `operator.methodcaller('from_address', n)(T)`
            if ref is not None and ref.origin == "local" and ref.qualname.startswith(_METHODCALLER):
                name = ref.qualname[len(_METHODCALLER):-1]
        if name in _NATIVE_MEMORY_METHODS and not self._copied_out(node, scope):
            self.report(GLOBAL_STATE, node, f"reaches `.{name}(...)`: a ctypes object over memory at an "
                        "address the code chose reaches any object of the process (model code may not use "
                        "raw memory; keep data in tensors or own objects)", target=name)

    def _copied_out(self, node: ast.Call, scope: _Scope) -> bool:
        """`encoded += (c_ubyte * 128).from_address(p)`, `bytes(T.from_address(p))`, `a + T.from_address(p)`:
        the object over raw memory is only read into a new value, right where it is made (vLLM's own K3 code
        reads a TMA descriptor so). Bound to a name, passed on or written through, it is not provably
        read; nor is it beside an instance of an own class, whose `__add__` / `__radd__` is handed the raw
        object."""
        parent = self._parent(node)
        if isinstance(parent, ast.AugAssign) and parent.value is node and isinstance(parent.target, ast.Name):
            return True
        if isinstance(parent, ast.BinOp):
            other = self.resolve(parent.left if parent.right is node else parent.right, scope)
            return other is None or not (other.origin == "own" or other.qualname.startswith(_INSTANCE))
        return isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and \
            parent.func.id in ("bytes", "bytearray") and parent.args[:1] == [node] and not parent.keywords

    def _check_manual_enter(self, node: ast.Call, scope: _Scope) -> None:
        """`torch.no_grad().__enter__()` or `stack.enter_context(cm)` outside a `with`: a scoped switch
        (grad mode, a TorchFunctionMode, a config patch) entered and never left is process-wide."""
        if not isinstance(node.func, ast.Attribute):
            return
        attr = node.func.attr
        if attr in ("__enter__", "__aenter__"):
            cm: ast.expr | None = node.func.value
        elif attr in ("enter_context", "enter_async_context"):
            cm = node.args[0] if node.args else None
        else:
            return
        if not isinstance(cm, ast.Call):
            return
        maker = self.resolve(cm.func, scope)
        if maker is not None and not self.foreign(maker):
            made = self._made_by_own_function(maker)
            if made is not None:  # `def quiet(): return redirect_stdout(...)`, then `quiet().__enter__()`
                maker = _Ref("import", made)
        if maker is None or not (self.foreign(maker) or (
                maker.origin == "own" and self._has_foreign_base(maker.qualname))):
            return  # an own context manager (whose bases are all own) changes only the model's state
        context = self._context(node)
        if attr.startswith("__") and any(p in context for p in ("def __enter__", "def __aenter__")):
            return  # an own context manager entering the one it wraps
        if not attr.startswith("__") and "with " in context:
            return  # an ExitStack used inside a with block is closed with it
        self.report(GLOBAL_STATE, node, f"enters `{maker.qualname}` by `.{attr}()` outside a `with` block: "
                    "what it switches on (grad mode, a dispatch mode, a config patch) is never restored "
                    "and changes every model", target=maker.qualname)

    def _made_by_own_function(self, maker: _Ref) -> str | None:
        """The foreign callable whose result an own function (of this file, or of another own module)
        returns, or the foreign object it returns: what calling it hands out is not the contribution's."""
        if maker.origin == "own" and maker.qualname in self.functions and maker.qualname not in self.classes:
            return self.returned_maker(maker.qualname)
        if maker.origin == "import" and self.is_own(maker.qualname) and self.cross is not None:
            return self.cross.returned_maker(maker.qualname, self.module)
        return None

    def _has_foreign_base(self, cls: str) -> bool:
        """An own class deriving (through own classes) from a class of another package (TorchFunctionMode,
        TorchDispatchMode, a library's context manager): entering it runs that package's `__enter__`."""
        for c in self._own_bases(cls):
            for node, outer in self.classes.get(c, []):
                for b in node.bases:
                    r = self.resolve(b, outer)
                    if r is None or (r.origin == "import" and not self.is_own(r.qualname)):
                        return True
        return False

    def _in_memory(self, node: ast.Call, scope: _Scope) -> bool:
        """A writer call handed an in-memory buffer made here (`io.BytesIO()`) or sqlite's `':memory:'`."""
        for v in [*node.args, *(k.value for k in node.keywords)]:
            if isinstance(v, ast.Constant) and v.value == ":memory:":
                return True
            r = self.resolve(v, scope)
            if r is not None and r.qualname in _IN_MEMORY:
                return True
        return False

    def _constant_mode(self, mode: ast.expr, scope: _Scope) -> str | None:
        """A file mode that is provably one of some literals (`'r' if c else 'rb'`): a writing one of them
        when there is one (judged as that), else one of the reads; None when it is computed."""
        modes = self.constant_strings(mode, scope)
        if modes is None:
            return None
        return next((m for m in sorted(modes) if _writes(m)), min(modes))

    def _opens_memory(self, node: ast.Call, scope: _Scope) -> bool:
        """`gzip.GzipFile(fileobj=io.BytesIO(), mode='wb')`, `zipfile.ZipFile(io.BytesIO(), 'w')`: an opener
        whose file is an in-memory buffer made here, with no file name beside it, writes no file."""
        if not self._in_memory(node, scope) or any(k.arg is None for k in node.keywords) or \
                any(isinstance(a, ast.Starred) for a in node.args):
            return False
        path = _arg(node, 0, "filename", "file", "name")
        if path is None or (isinstance(path, ast.Constant) and path.value is None):
            return True
        r = self.resolve(path, scope)
        return r is not None and r.qualname in _IN_MEMORY

    def _check_open_method(self, node: ast.Call, scope: _Scope) -> None:
        """`pathlib.Path(p).open('w')`, `path.open(mode='a')`: a method `open` on an object the scan does not
        resolve to an import (that is judged by `file_openers`), given a writing mode."""
        if not isinstance(node.func, ast.Attribute) or node.func.attr != "open":
            return
        callee = self.resolve(node.func, scope)
        if callee is not None and (callee.origin == "import" or self.is_own(callee.qualname)):
            return
        receiver = self.resolve(node.func.value, scope)
        path_like = receiver is not None and receiver.qualname.startswith(f"{_OF_FOREIGN}pathlib.")
        keyword = next((k.value for k in node.keywords if k.arg == "mode"), None)
        if keyword is not None:
            lit = self._constant_mode(keyword, scope)
        elif any(isinstance(a, ast.Starred) for a in node.args[:2]) or \
                any(k.arg is None for k in node.keywords):
            lit = None  # `p.open(*('w',))`, `p.open(**kw)`: a hidden mode fails closed
        elif path_like and node.args:
            lit = _dotted_literal(node.args[0])
        else:
            lit = next((m for m in map(_mode_like, node.args[:2]) if m is not None), "r")
        if lit is None or _writes(lit):
            self.report(GLOBAL_STATE, node, f"calls `.open()` with mode {lit or '<computed>'!r}: writes to "
                        "the file system, outside the contribution (a `.pth` or a module file changes every "
                        "process)", target=".open")

    def _check_writer_values(self, node: ast.Call, scope: _Scope) -> None:
        """`functools.reduce(setattr, ...)`, `map(setattr, mods, ...)`: a writer handed on as a value writes
        to objects the scan cannot follow. (Also runs the per-call `.open(mode)` check: analyser.py calls
        this for every call.)"""
        self._check_open_method(node, scope)
        callee = self.resolve(node.func, scope)
        skip_first = callee is not None and callee.qualname == "functools.partial"
        values = [*node.args, *(k.value for k in node.keywords)]
        for i, v in enumerate(values):
            if skip_first and i == 0:
                continue
            r = self.resolve(v.value if isinstance(v, ast.Starred) else v, scope)
            if r is not None and r.origin == "import" and self._deferred_state_call(r.qualname):
                to = callee.qualname if callee is not None and callee.qualname else "a call"
                self.report(GLOBAL_STATE, v, f"passes `{r.qualname}` as a value to "
                            f"`{to.removeprefix('builtins.')}`: it changes process-wide state when that "
                            "code calls it later (at exit, in a thread, per element)", target=r.qualname)
                continue
            if r is not None and r.origin == "import" and self._handed_on_mutator(r.qualname, v):
                continue
            if r is not None and r.origin == "import" and r.qualname in _WRITERS - {"builtins.vars"}:
                to = callee.qualname if callee is not None and callee.qualname else "a call"
                self.report(SETATTR, v, f"passes `{r.qualname.removeprefix('builtins.')}` as a value to "
                            f"`{to.removeprefix('builtins.')}`: what it writes to cannot be checked",
                            target=r.qualname)

    def _handed_on_mutator(self, q: str, value: ast.expr) -> bool:
        """`map(sys.path.append, xs)`, `atexit.register(sys.path.append, p)`, `weakref.finalize(o,
        os.environ.update, d)`: a mutating method bound to foreign state, handed on as a value, writes that
        state when whatever it was given calls it (per element, at exit, in a thread): judged as the write
        itself, wherever it is passed. (An unbound method, `map(list.append, ...)`, writes its arguments.)"""
        receiver, _, method = q.rpartition(".")
        if not receiver or not mutating_method(method) or self.is_own(receiver) or receiver == "builtins" \
                or receiver.startswith("builtins.") or receiver in self.module_imports or \
                receiver.rsplit(".", 1)[-1][:1].isupper():
            return False  # (a module's function, `defaultdict(set)`; an unbound method: its argument's)
        code = self._classify(receiver)
        if code is None and not self._engine_state(receiver) and not state_like_receiver(
                receiver, self.settings.hidden_import_roots, self.module_imports):
            return False
        # (when it runs is not known: judged as at import time, an error)
        self._report_write(value, receiver, "hands on", code or MONKEYPATCH, True,
                           f"`.{method}` passed as a value: it mutates the object when called later")
        return True

    def _deferred_state_call(self, q: str) -> bool:
        """A function (snake_case last part: not a constant or a class) that changes process-wide state,
        handed on as a value instead of being called here."""
        last = q.rsplit(".", 1)[-1]
        if not last[:1].islower() or not last.isidentifier() or self.is_own(q):  # (`os.environ[k]`: an item)
            return False
        s = self.settings
        if q in _INTERPRETER_HOOKS or _matches(q, s.global_flag_calls):
            return True
        if q.startswith("os.environ.") and last in _MUTATORS:
            return True
        return _matches(q, s.global_state_calls) and not _matches(q, s.allowed_global_calls) \
            and not _matches(q, s.scoped_global_calls)

    def _made_method(self, callee: _Ref | None) -> str | None:
        """The name a method of an object a foreign call made is judged under: `psutil.Process(1).kill` is
        `psutil.Process().kill`, `asyncio.get_event_loop().set_debug` is `asyncio.get_event_loop().set_debug`
        (the policy's patterns name such methods with `()`). None for anything else."""
        if callee is None or callee.origin != "local" or not callee.qualname.startswith(_BOUND):
            return None
        maker, _, method = callee.qualname[len(_BOUND):-1].rpartition(".")
        s = self.settings
        if not maker or self.is_own(maker) or (_matches(maker, s.global_state_calls) and
                                               not _matches(maker, s.allowed_global_calls)):
            return None  # (a maker that is itself a state call is reported where it is called)
        return f"{maker}().{method}"

    @staticmethod
    def _read_only_flags(node: ast.Call) -> bool:
        """`os.open(p, os.O_RDONLY | os.O_CLOEXEC)`: flags spelled as `os.O_*` constants that only read."""
        flags = _arg(node, 1, "flags")
        if flags is None:
            return False
        parts: list[ast.expr] = []
        todo = [flags]
        while todo:
            n = todo.pop()
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr):
                todo += [n.left, n.right]
            else:
                parts.append(n)
        return all(isinstance(p, ast.Attribute) and isinstance(p.value, ast.Name) and p.value.id == "os" and
                   p.attr in _READ_FLAGS for p in parts)

    def _check_global_state(self, node: ast.Call, q: str, scope: _Scope, import_time: bool) -> bool:
        """Process-wide state is an allow-list: a call the policy's `global_state_calls` recognises (torch
        switches, signals, subprocesses, native libraries, ...) is FT146 unless `allowed_global_calls`
        lists it, or it is a `scoped_global_calls` context manager used as a `with` item."""
        s = self.settings
        if q in _CLOSERS and node.args and not isinstance(node.args[0], ast.Starred):
            # `contextlib.closing(obj)` calls `obj.close()` when its block ends: judged as that call (on
            # `sys.stdout`, a shared stream, it closes the process's stdout)
            method = ast.Attribute(value=node.args[0], attr=_CLOSERS[q], ctx=ast.Load())
            close = ast.copy_location(ast.Call(func=method, args=[], keywords=[]), node)
            self._kept.append(close)
            self._check_call(close, scope, import_time)
            return True
        if _matches(q, _SHARED_MAPPINGS):
            shared = _arg(node, 1, "shared")
            hidden = any(isinstance(a, ast.Starred) for a in node.args[:2]) or \
                any(k.arg is None for k in node.keywords)
            if hidden or (shared is not None and not (isinstance(shared, ast.Constant) and
                                                      shared.value in (False, None, 0))):
                self.report(GLOBAL_STATE, node, f"calls `{q}` with `shared` not provably False: the file is "
                            "mapped writable (MAP_SHARED), so a write to the tensor writes the file (model "
                            "code may not write files; map it with `shared=False`)", target=q)
            return True
        opener = next((v for k, v in s.file_openers.items() if _matches(q, (k,))), None)
        if opener is not None:
            pos, default = opener
            mode = _arg(node, pos, "mode", "flag")
            hidden = any(isinstance(a, ast.Starred) for a in node.args[:pos + 1]) or \
                any(k.arg is None for k in node.keywords)  # `open(*args)`, `open(p, **kw)`: fail closed
            lit = None if mode is None and hidden else default if mode is None else \
                self._constant_mode(mode, scope)
            if (lit is None or _writes(lit)) and not self._opens_memory(node, scope):
                self.report(GLOBAL_STATE, node, f"opens a file for writing (`{q.removeprefix('builtins.')}`, "
                            f"mode {lit or '<computed>'!r}): model code may not write files (a `.pth` in "
                            "site-packages or a module file changes every process)", target=q)
            return True
        if _matches(q, s.file_writer_calls) and not _matches(q, s.allowed_global_calls) and \
                not self._in_memory(node, scope):
            self.report(GLOBAL_STATE, node, f"calls `{q}`, which writes a file to the destination it is "
                        "given: model code may not write files (pass an `io.BytesIO()` made here to keep it "
                        "in memory)", target=q)
            return True
        if _matches(q, s.allowed_global_calls) or not _matches(q, s.global_state_calls):
            return False
        if q == "os.open" and self._read_only_flags(node):
            return True
        if on_own_fd(self, node, q, scope):
            return True  # a descriptor of the contribution's own (its pipe): nothing shared (fds.py)
        if id(node) in self.with_items and _matches(q, s.scoped_global_calls):
            return True
        if q.startswith("warnings.") and "with warnings.catch_warnings(" in self._context(node):
            return True  # a filter inside catch_warnings() is restored when the block ends
        if q.startswith(("pickle.", "marshal.", "runpy.", "torch.hub.", "dill.", "cloudpickle.", "code.",
                         "codeop.")):
            self.report(GLOBAL_STATE, node, f"calls `{q}`: runs code that comes from data (unpickled, "
                        "marshalled, downloaded or source text), which the scan cannot check", target=q)
            return True
        scoped = " (allowed only as a `with` item)" if _matches(q, s.scoped_global_calls) else ""
        self.report(GLOBAL_STATE, node, f"calls `{q}`{scoped}: changes process-wide state that every model "
                    "shares, which the policy's allow-list does not grant model code", target=q)
        return True
