"""Declared tables of what stdlib (and common library) callables do to the objects they are handed, beyond
returning a value (hostile review 24): pure data, read by transformers.py, named.py and fds.py.

- `TRANSFORMERS`: class and function transformers that rewrite their argument in place (`dataclass(C)` adds
  `__eq__` and sets `__hash__ = None` on C itself; `typing.final(f)` sets `f.__final__`; `typing.overload(f)`
  files f in typing's shared registry). Handed something the contribution does not own, each is a write.
- `CODE_RUNNERS`: callables that compile and run a string argument as Python code (`timeit`'s stmt/setup,
  `trace.Trace().run`): judged like `exec` of that text.
- `MODULE_TABLES`: lower-case module-level containers of the stdlib (`keyword.kwlist`) that in-place
  methods edit for every user of the module (upper-case and private ones are caught by name).
- `MODULE_STATE_SETTERS`: functions that write a stdlib module's own shared state (`calendar.setfirstweekday`
  writes the module's calendar instance `calendar.c`).
- `SHARED_RESULTS`: calls that return a module's shared object rather than a copy (`sysconfig.
  get_config_vars()` is the module's cache dict): writes to the result write the module's state.
- `FD_MAKERS` / `FD_CALLS`: calls that make a file descriptor of the caller's own, and `os` calls that act
  only on the descriptor they are given (so on the contribution's own pipe they touch nothing shared).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Transformer:
    """A callable that mutates an argument: `positions` (index or keyword name) of the mutated argument
    when it is called directly; `factory`: called without a positional argument (or, with `always_factory`,
    however it is called) it returns a decorator that mutates the argument the decorator is applied to."""

    what: str
    positions: tuple[int | str, ...] = (0,)
    factory: bool = False
    always_factory: bool = False


_DATACLASS = Transformer("adds `__init__`/`__eq__`/`__repr__` to the class and sets `__hash__ = None` (or a "
                         "raising `__setattr__` when frozen)", (0, "cls"), factory=True)
_ATTRS = Transformer("rewrites the class into an attrs class", (0, "maybe_cls", "cls"), factory=True)

TRANSFORMERS: dict[str, Transformer] = {
    "dataclasses.dataclass": _DATACLASS,
    "dataclasses._process_class": Transformer("is dataclass's worker: it rewrites the class", (0, "cls")),
    "pydantic.dataclasses.dataclass": _DATACLASS,
    "attr.s": _ATTRS, "attr.attrs": _ATTRS, "attr.define": _ATTRS, "attr.mutable": _ATTRS,
    "attr.frozen": _ATTRS, "attrs.define": _ATTRS, "attrs.mutable": _ATTRS, "attrs.frozen": _ATTRS,
    "functools.total_ordering": Transformer("adds the missing ordering methods to the class", (0, "cls")),
    "typing.final": Transformer("sets `__final__` on it", (0, "f")),
    "typing_extensions.final": Transformer("sets `__final__` on it", (0, "f")),
    "typing.override": Transformer("sets `__override__` on it", (0, "method")),
    "typing_extensions.override": Transformer("sets `__override__` on it", (0, "arg", "method")),
    "typing.no_type_check": Transformer("sets `__no_type_check__` on it and on its methods", (0, "arg")),
    "typing_extensions.no_type_check": Transformer("sets `__no_type_check__` on it", (0, "arg")),
    "typing.overload": Transformer("files it in typing's shared overload registry", (0, "func")),
    "typing_extensions.overload": Transformer("files it in the shared overload registry", (0, "func")),
    "typing.runtime_checkable": Transformer("marks the protocol class runtime-checkable", (0, "cls")),
    "typing_extensions.runtime_checkable": Transformer("marks the protocol class runtime-checkable",
                                                       (0, "cls")),
    "typing.dataclass_transform": Transformer("sets `__dataclass_transform__` on the class it decorates",
                                              (), always_factory=True),
    "typing_extensions.dataclass_transform": Transformer("sets `__dataclass_transform__` on the class",
                                                         (), always_factory=True),
    "warnings.deprecated": Transformer("rewrites the class's `__new__`/`__init_subclass__` (or wraps and "
                                       "marks the function)", (), always_factory=True),
    "typing_extensions.deprecated": Transformer("rewrites the class's `__new__`/`__init_subclass__`", (),
                                                always_factory=True),
    "abc.abstractmethod": Transformer("sets `__isabstractmethod__` on it", (0, "funcobj")),
    "abc.abstractclassmethod": Transformer("sets `__isabstractmethod__` on it", (0, "callable")),
    "abc.abstractstaticmethod": Transformer("sets `__isabstractmethod__` on it", (0, "callable")),
    "abc.update_abstractmethods": Transformer("recomputes the class's `__abstractmethods__` (it may become "
                                              "uninstantiable)", (0, "cls")),
    "enum.global_enum": Transformer("rewrites the enum's `__repr__`/`__str__` and copies its members into "
                                    "its module's globals", (0, "cls")),
    "inspect.markcoroutinefunction": Transformer("marks the function a coroutine function", (0, "func")),
    "types.coroutine": Transformer("rewrites a generator function's `__code__` flags in place", (0, "func")),
    "unittest.mock.seal": Transformer("seals the mock (its attributes can no longer be made)", (0, "mock")),
    "dataclasses._set_new_attribute": Transformer("sets the named attribute on the class", (0, "cls")),
    "dataclasses._set_qualname": Transformer("rewrites the function's `__qualname__`", (1, "value")),
    "pydantic.with_config": Transformer("sets `__pydantic_config__` on the class it decorates", (),
                                        always_factory=True),
    "pydantic.config.with_config": Transformer("sets `__pydantic_config__` on the class it decorates", (),
                                               always_factory=True),
    "pydantic.dataclasses.rebuild_dataclass": Transformer("rebuilds the class's validator and schema in "
                                                          "place", (0, "cls")),
    "pydantic.rebuild_dataclass": Transformer("rebuilds the class's validator and schema in place",
                                              (0, "cls")),
    "_abc._abc_register": Transformer("files a virtual subclass in the ABC's shared registry", (0, "self")),
    "_abc._reset_registry": Transformer("empties the ABC's shared registry", (0, "self")),
    "_abc._reset_caches": Transformer("empties the ABC's shared caches", (0, "self")),
    "abc._abc_register": Transformer("files a virtual subclass in the ABC's shared registry", (0, "self")),
}

# callables compiling and running a string argument as code: name -> the argument positions / keywords
CODE_RUNNERS: dict[str, tuple[int | str, ...]] = {
    "timeit.timeit": (0, "stmt", 1, "setup"), "timeit.repeat": (0, "stmt", 1, "setup"),
    "timeit.Timer": (0, "stmt", 1, "setup"), "trace.Trace.run": (0, "cmd"),
    "trace.Trace.runctx": (0, "cmd"), "bdb.Bdb.run": (0, "cmd"), "bdb.Bdb.runeval": (0, "expr"),
    "bdb.Bdb.runctx": (0, "cmd"), "pdb.Pdb.run": (0, "cmd"), "profile.Profile.run": (0, "cmd"),
    "profile.Profile.runctx": (0, "cmd"), "cProfile.Profile.run": (0, "cmd"),
    "cProfile.Profile.runctx": (0, "cmd"), "timeit.main": (0, "args"),
    "dataclasses._create_fn": (2, "body"),
}
# callables that call what a dotted name (or the data) they are handed names: name -> what they do; fail
# closed (what a computed or even a literal name calls is not scanned)
NAME_CALLERS: dict[str, str] = {
    "unittest.TestLoader.loadTestsFromName": "calls the object the dotted name names",
    "unittest.TestLoader.loadTestsFromNames": "calls the objects the dotted names name",
    "unittest.loader.TestLoader.loadTestsFromName": "calls the object the dotted name names",
    "unittest.loader.TestLoader.loadTestsFromNames": "calls the objects the dotted names name",
    "unittest.defaultTestLoader.loadTestsFromName": "calls the object the dotted name names",
    "unittest.defaultTestLoader.loadTestsFromNames": "calls the objects the dotted names name",
    "unittest.loader.defaultTestLoader.loadTestsFromName": "calls the object the dotted name names",
    "unittest.loader.defaultTestLoader.loadTestsFromNames": "calls the objects the dotted names name",
    "unittest.main": "imports and runs the tests its arguments name",
    "unittest.TestProgram": "imports and runs the tests its arguments name",
    "pickle._Unpickler": "unpickles (calls any callable the data names)",
    "pickle._loads": "unpickles (calls any callable the data names)",
    "pickle._load": "unpickles (calls any callable the data names)",
}
# doctest's runners: they run the examples in the docstrings of the object (position) they are handed, or of
# a whole module / file (None: whatever they run cannot be read here)
DOCTEST_RUNNERS: dict[str, int | None] = {
    "doctest.run_docstring_examples": 0, "doctest.testmod": None, "doctest.testfile": None,
    "doctest.DocTestSuite": None, "doctest.DocFileSuite": None, "doctest.debug": None,
    "doctest.debug_src": None, "doctest.DocTestRunner.run": None, "doctest.DebugRunner.run": None,
    "doctest.DocTestRunner.run_examples": None,
}

MODULE_TABLES = frozenset({
    "keyword.kwlist", "keyword.softkwlist", "mimetypes.types_map", "mimetypes.common_types",
    "mimetypes.encodings_map", "mimetypes.suffix_map", "mimetypes.knownfiles", "html.entities.html5",
    "html.entities.name2codepoint", "html.entities.codepoint2name", "html.entities.entitydefs",
    "http.client.responses", "locale.locale_alias", "locale.windows_locale",
    "locale.locale_encoding_alias", "errno.errorcode", "encodings.aliases.aliases", "token.tok_name",
    "token.EXACT_TOKEN_TYPES", "opcode.opname", "opcode.opmap", "dis.opname", "dis.opmap",
    "copyreg.dispatch_table", "urllib.parse.uses_relative", "urllib.parse.uses_netloc",
    "urllib.parse.uses_params", "urllib.parse.uses_query", "urllib.parse.uses_fragment",
    "urllib.parse.non_hierarchical", "email.charset.CHARSETS", "email.charset.ALIASES",
    "email.charset.CODEC_MAP", "imghdr.tests", "sndhdr.tests",
    "linecache.cache", "inspect.modulesbyfile", "inspect._filesbymodname", "xml.dom.domreg.registered",
    "xml.dom.domreg.well_known_implementations", "calendar.mdays", "tokenize.endpats",
    "tokenize.single_quoted", "tokenize.triple_quoted",
})

MODULE_STATE_SETTERS: dict[str, str] = {
    "calendar.setfirstweekday": "the module's shared calendar (`calendar.c`) every `calendar.*` call uses",
    "email.charset.add_charset": "email's shared charset table",
    "email.charset.add_alias": "email's shared charset alias table",
    "email.charset.add_codec": "email's shared codec table",
    "gettext.install": "`builtins._` (every module's `_`)",
    "gettext.textdomain": "gettext's process-wide current domain",
    "gettext.bindtextdomain": "gettext's process-wide domain table",
    "xml.etree.ElementTree.register_namespace": "ElementTree's shared namespace prefix table",
    "xml.dom.registerDOMImplementation": "xml.dom's shared implementation registry",
    "unittest.installHandler": "the process's SIGINT handler",
    "unittest.removeHandler": "the process's SIGINT handler",
    "cgitb.enable": "`sys.excepthook`",
    "readline.*": "the process's line editor state (history, completer, key bindings)",
    "typing.clear_overloads": "typing's shared overload registry (every `typing.get_overloads`)",
    "typing_extensions.clear_overloads": "the shared overload registry (every `get_overloads`)",
    "*._abc_registry_clear": "the ABC's shared virtual-subclass registry",
    "*._abc_caches_clear": "the ABC's shared subclass caches",
}

# calls returning a module's shared object (a cache, a class): name -> (what the result is, whether only
# when called without arguments: `get_config_vars('A')` is a new list of values)
SHARED_RESULTS: dict[str, tuple[str, bool]] = {
    "sysconfig.get_config_vars": ("sysconfig._CONFIG_VARS", True),
    "distutils.sysconfig.get_config_vars": ("distutils.sysconfig._config_vars", True),
    "logging.getLoggerClass": ("logging.Logger", False),
    "logging.getLogRecordFactory": ("logging.LogRecord", False),
    "codecs.lookup": ("codecs._cache[*]", False),
}

# calls making a descriptor of the caller's own (the result, or each element of it)
FD_MAKERS = frozenset({"os.pipe", "os.pipe2", "os.open", "os.dup", "os.memfd_create", "os.eventfd",
                       "pty.openpty", "os.openpty", "socket.socketpair"})
# `os` calls acting only on the descriptor they are handed first
FD_CALLS = frozenset({"os.write", "os.writev", "os.pwrite", "os.pwritev", "os.close", "os.set_blocking",
                      "os.set_inheritable", "os.lseek", "os.fsync", "os.fdatasync", "os.eventfd_write"})

# reads of the process's stdin (the engine's input: a read consumes it), by name
STDIN_READERS = ("builtins.input", "getpass.getpass", "sys.stdin.*read*", "sys.__stdin__.*read*",
                 "sys.stdin.buffer.*", "sys.__stdin__.buffer.*", "sys.stdin.__next__", "sys.stdin.detach")
# reads of a descriptor they are handed first: of one the contribution did not make (0: stdin), fail closed
FD_READS = frozenset({"os.read", "os.readv", "os.pread", "os.preadv", "os.eventfd_read"})
# openers taking a path or a descriptor first, and the paths that are the process's shared streams and
# terminal: `open(0)`, `open('/dev/stdin')`, `os.open('/proc/self/fd/0', ...)` are stdin
FD_OPENERS = frozenset({"builtins.open", "io.open", "_io.open", "os.fdopen", "io.FileIO", "_io.FileIO",
                        "codecs.open", "os.open"})
SHARED_STREAM_PATHS = ("/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/console", "/dev/fd/",
                       "/dev/pts/", "/proc/self/fd/", "/proc/thread-self/fd/")
