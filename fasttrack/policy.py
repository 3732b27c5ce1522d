"""The policy: which paths are a model's own, which shared zones are off limits, the envelope's bounds and
what evidence must show. Loaded from `policies/<engine>.toml`; every field is validated here."""

from __future__ import annotations

import re
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

import pathspec
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fasttrack.loading import load_toml_model

POLICY_SCHEMA_VERSION = 1
MODEL_PLACEHOLDER = "{model}"
MODEL_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ZoneKind(StrEnum):
    """What touching a zone means for a fast-track PR."""

    MODEL_LOCAL = "model-local"  # the target model's own code: allowed
    FORBIDDEN = "forbidden"  # shared paths a fast-track PR may never touch (sampling, KV cache, ...)
    INELIGIBLE = "ineligible"  # shared code that sends the PR to normal review (layers, build, CI)
    JUDGE = "judge"  # the judge itself: policy, allowed signers, workflows, fasttrack
    HOOK = "hook"  # files outside the model root where only declared small edits are allowed


class ZoneSpec(Strict):
    name: str = Field(min_length=1, max_length=64)
    kind: Literal["forbidden", "ineligible", "judge"]
    description: str = ""
    patterns: list[str] = Field(min_length=1)
    # Matched before the model's own roots (as judge zones are): for files that change how the PR itself is
    # read (.gitattributes, .gitmodules), wherever they sit. Other zones yield to the model's roots.
    wins_over_model_roots: bool = False

    @cached_property
    def spec(self) -> pathspec.GitIgnoreSpec:
        return pathspec.GitIgnoreSpec.from_lines(self.patterns)


class HookSpec(Strict):
    """A file outside the model root where specific one-line edits are allowed, checked per hunk."""

    name: str
    path: str
    description: str = ""
    # Regexes (with {model} substituted, escaped) that every added or removed line must match in full.
    allowed_lines: list[str] = Field(min_length=1)
    # Multi-line regexes (lines joined with "\n") for entries that span several lines; every run of
    # consecutive added (or removed) lines must split into whole matches of allowed_lines/allowed_blocks.
    allowed_blocks: list[str] = Field(default_factory=list)
    # Most added + removed lines in the file.
    max_changed_lines: int = Field(default=4, ge=1, le=100)
    # Python hook files: a dict key on an added line may not map to a different value anywhere else in the
    # file (an added entry may not shadow another model's registration).
    added_keys_unique: bool = False

    def line_patterns(self, model: str) -> list[re.Pattern[str]]:
        return [re.compile(p.replace(MODEL_PLACEHOLDER, re.escape(model))) for p in self.allowed_lines]

    def block_patterns(self, model: str) -> list[re.Pattern[str]]:
        return [re.compile(p.replace(MODEL_PLACEHOLDER, re.escape(model))) for p in self.allowed_blocks]

    @field_validator("allowed_lines", "allowed_blocks")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for p in patterns:
            try:
                re.compile(p.replace(MODEL_PLACEHOLDER, "model"))
            except re.error as exc:
                raise ValueError(f"bad regex {p!r}: {exc}") from None
        return patterns


class ModelLayout(Strict):
    """Where model units live in the engine tree."""

    # gitwildmatch patterns with {model}: the paths a fast-track PR for {model} may change.
    local_roots: list[str] = Field(min_length=1)
    # The import package of a model-local unit, e.g. "vllm.models.{model}".
    package: str
    # Directory holding model-local packages (each child directory is one model unit).
    packages_dir: str
    # Packages under packages_dir that are not a model (shared helpers such as vllm/models/common).
    shared_packages: list[str] = Field(default_factory=list)
    # Directory of older single-file model units (vllm/model_executor/models/<name>.py).
    legacy_dir: str | None = None
    # Non-model helper modules inside legacy_dir (utils, interfaces, registry, ...).
    legacy_shared: list[str] = Field(default_factory=list)
    # The architecture registry file, read statically.
    registry: str | None = None
    # A new directory under packages_dir is a new model only when the head's registry maps an architecture to
    # it; may a PR that adds a new model be fast-tracked? (No by default: a new model gets a full review.)
    new_models_eligible: bool = False

    def local_spec(self, model: str) -> pathspec.GitIgnoreSpec:
        return pathspec.GitIgnoreSpec.from_lines(
            [p.replace(MODEL_PLACEHOLDER, model) for p in self.local_roots]
        )

    @field_validator("local_roots")
    @classmethod
    def _roots_name_model(cls, roots: list[str]) -> list[str]:
        for r in roots:
            if MODEL_PLACEHOLDER not in r:
                raise ValueError(f"root {r!r} must contain {MODEL_PLACEHOLDER}")
        return roots


class BlastRadiusSpec(Strict):
    """How the import graph is cut so the blast radius stays small and true."""

    root_package: str = "vllm"
    # Hub modules (fnmatch patterns over module names): call-in points that exist to reach every model (the
    # registry). A hub that imports changed model code is listed but is not a leak (no FT111); a changed hub's
    # importers are counted, not listed.
    hub_modules: list[str] = Field(default_factory=list)
    # Follow imports made inside functions (lazy imports)? They run whenever the function does, so the default
    # follows them; the radius stays small because it stops at the first importer outside the model root
    # (measured on vLLM 0.33: docs/blast-radius.md).
    include_lazy_imports: bool = True
    exclude_type_checking_imports: bool = True
    max_witnesses: int = Field(default=50, ge=1, le=10_000)
    # Module-level calls and decorators (fnmatch over the dotted callee as written) that change nothing when a
    # module is imported: a changed module whose import-time code is only these (and imports, defs, classes,
    # constants) does not "act at import" (fasttrack.confinement.import_effects), so a unit running it only
    # through a parent package's __init__ is named in the radius, not an error (FT114).
    inert_import_calls: list[str] = Field(default_factory=lambda: [
        "init_logger", "*.init_logger", "logging.getLogger", "getLogger", "TypeVar", "typing.TypeVar",
        "ParamSpec", "typing.ParamSpec", "NewType", "typing.NewType", "namedtuple", "collections.namedtuple",
        "os.environ.get", "os.getenv", "field", "dataclasses.field", "dataclass", "dataclasses.dataclass",
        "frozenset", "set", "dict", "list", "tuple", "int", "float", "str", "bool", "object", "range",
        "staticmethod", "classmethod", "property", "abstractmethod", "abc.abstractmethod", "overload",
        "typing.overload", "final", "typing.final", "functools.cache", "functools.lru_cache", "cache",
        "lru_cache", "functools.wraps", "functools.cached_property", "cached_property", "contextmanager",
        "contextlib.contextmanager", "enum.auto", "auto", "unique", "enum.unique", "torch.device",
        "torch.dtype", "triton.jit", "triton.autotune", "triton.heuristics", "triton.Config", "tl.constexpr",
        "triton.language.constexpr", "torch.compile", "torch.no_grad", "torch.inference_mode",
        "cute.jit", "cute.kernel", "cute.struct", "cutlass.Constexpr", "cutlass.const_expr",
        # queries: platform checks, feature probes
        "current_platform.is_*", "current_platform.get_*", "current_platform.has_*",
        "*.current_platform.is_*",
        "importlib.util.find_spec", "find_spec", "hasattr", "isinstance", "issubclass", "callable", "len",
        "is_torch_equal_or_newer", "*.is_torch_equal_or_newer", "has_triton_kernels", "*.has_*",
    ])


class EscapesSpec(Strict):
    """How escapes (FT12x) are judged. Patterns are fnmatch globs over resolved dotted names (`*` spans
    dots). The defaults match vLLM 0.33's registries; see docs/escapes-and-envelope.md."""

    # Callables that register into a global registry: always FT124 when called from a contribution.
    registry_callables: list[str] = Field(default_factory=lambda: [
        "vllm.*ModelRegistry.register_model",
        "vllm.model_executor.*custom_op.CustomOp.register*",
        "vllm.model_executor.*custom_op.PluggableLayer.register*",
        "vllm.v1.attention.backends.registry.register_backend",
        "vllm.v1.attention.backends.registry.*BackendEnum.register",
        "vllm.v1.attention.backends.mla.prefill.registry.register_mla_prefill_backend",
        "vllm.v1.attention.backends.mla.prefill.registry.*BackendEnum.register",
        "vllm.model_executor.layers.quantization.register_quantization_config",
        "vllm.model_executor.model_loader.register_model_loader",
        "vllm.model_executor.kernels.linear.register_linear_kernel",
        "vllm.distributed.kv_transfer.kv_connector.factory.KVConnectorFactory.register_connector",
        "vllm.distributed.ec_transfer.ec_connector.factory.*.register_connector",
        "vllm.transformers_utils.config.register_config_parser",
        "vllm.config.cache.register_kv_cache_dtype",
        "vllm.v1.kv_cache_spec_registry.register_kv_cache_spec",
        "vllm.ir.*.register_*",
        "vllm.triton_utils.dispatcher.register_kernels",
        "vllm.tool_parsers.*Manager.register_*",
        "vllm.reasoning.*Manager.register_*",
        "vllm.lora.resolver.*.register_resolver",
        "vllm.utils.registry.*.register",
        "torch.serialization.add_safe_globals",
        "torch.utils._pytree.register_*",
        "transformers.Auto*.register",
    ])
    # A foreign callable named like this (`register`, `register_*`) is a registration too, unless its
    # first argument is a local object (registering onto an instance, e.g. register_parametrization).
    registration_prefixes: list[str] = Field(default_factory=lambda: ["register"])
    # Registrations model code legitimately makes for its own classes: not flagged while what they
    # register is the contribution's own (a decorated class, an own name); flagged on foreign objects.
    allowed_registrations: list[str] = Field(default_factory=lambda: [
        "vllm.multimodal*.MULTIMODAL_REGISTRY.register_processor",
        "vllm.model_executor.warmup.*.register_*warmup*",
        "vllm.*.register_warmup",  # a warm-up shape for a shared JIT kernel: compile time, not behaviour
        "atexit.register",
        "faulthandler.register",
    ])
    # Writes that are idiomatic and not a patch (ctypes prototypes on shared function pointers).
    allowed_writes: list[str] = Field(default_factory=lambda: [
        "ctypes.*.restype", "ctypes.*.argtypes", "ctypes.*.errcheck",
    ])
    # Helpers that define a torch op in the engine's namespace (FT125 judges the op name they get).
    op_registrars: list[str] = Field(default_factory=lambda: [
        "vllm.utils.torch_utils.direct_register_custom_op",
        "vllm.utils.direct_register_custom_op",
    ])
    engine_op_namespace: str = "vllm"
    # torch.library.Library objects of the engine that contributions may reach by import.
    engine_libraries: dict[str, str] = Field(default_factory=lambda: {
        "vllm.utils.torch_utils.vllm_lib": "vllm",
        "vllm.ir.op.vllm_ir_torch_lib": "vllm_ir",
    })
    # Op namespaces shared by the engine where a new op is own if its name starts with `<own ns>_`
    # (vLLM's convention for model ops, e.g. torch.ops.vllm.kimi_k3_fused_moe).
    shared_op_namespaces: list[str] = Field(default_factory=lambda: ["vllm"])
    # Packages whose modules, loaded by a literal string (importlib.import_module("vllm.x")), are hidden
    # from the import graph and so from the blast radius: FT126 warns. Computed names always warn.
    hidden_import_roots: list[str] = Field(default_factory=lambda: ["vllm"])
    # Modules whose attributes are process-wide flags (writes are FT123, like environment changes).
    global_flag_modules: list[str] = Field(default_factory=lambda: [
        "torch.backends", "torch._dynamo.config", "torch._inductor.config", "torch._functorch.config",
    ])
    # Calls that change process-wide state (FT123: error at import time, warning inside functions).
    global_flag_calls: list[str] = Field(default_factory=lambda: [
        "os.putenv", "os.unsetenv", "os.chdir",
        "torch.set_default_dtype", "torch.set_default_device", "torch.set_default_tensor_type",
        "torch.set_float32_matmul_precision", "torch.use_deterministic_algorithms",
        "torch.set_num_threads", "torch.manual_seed", "torch.cuda.manual_seed_all",
        "random.seed", "numpy.random.seed",
    ])
    # Process-wide state is an allow-list (FT146): a call matching `global_state_calls` (the families of
    # calls that change state every model shares: torch's C-level and backend switches, compiler configs,
    # signals, subprocesses, native libraries, multiprocessing, logging and warnings configuration, the
    # garbage collector, sockets, files) is an error unless `allowed_global_calls` lists it;
    # `scoped_global_calls` are context managers that restore what they change, allowed as `with` items.
    global_state_calls: list[str] = Field(default_factory=lambda: [
        "torch._C.*", "torch.backends.*", "torch._dynamo.*", "torch._inductor.*", "torch._functorch.*",
        "torch._logging.*", "torch.set_*", "torch.use_deterministic_algorithms", "torch.seed",
        "torch.cuda.set_*", "torch.cuda.memory.*", "torch.cuda.manual_seed*", "torch.random.*",
        "torch.autograd.set_*", "torch.autograd.*anomaly*", "torch.nn.attention.*", "torch.fx.wrap",
        "torch.multiprocessing.set_*", "torch.distributed.*init_process_group",
        "signal.*", "subprocess.*", "ctypes.*", "_ctypes.*", "multiprocessing.set_*",
        "multiprocessing.*.set_*",
        "gc.*", "site.*", "socket.*", "urllib.request.*", "http.client.*", "pty.*", "resource.set*",
        "faulthandler.*", "logging.*", "warnings.*", "threading.*", "shutil.*", "sysconfig.*",
        "importlib.invalidate_caches", "sys.set*", "sys._set*", "sys.remote_exec", "sys.activate_*",
        "os.system", "os.popen", "os.exec*", "os.spawn*", "os.posix_spawn*", "os.fork*", "os.kill*",
        "os.remove", "os.unlink", "os.rename", "os.renames", "os.replace", "os.symlink", "os.link",
        "os.mkdir", "os.makedirs", "os.rmdir", "os.removedirs", "os.chmod", "os.chown", "os.truncate",
        "os.umask", "os.set*", "os.nice", "os.sched_set*", "os.register_at_fork", "os.open", "os.write",
        "os.mkfifo", "os.startfile", "copyreg.*", "locale.set*", "asyncio.set_*", "codecs.register*",
        "logging.loggers.*",
        # code from data: unpickling and marshalled code run whatever the bytes say
        "pickle.load*", "pickle.Unpickler", "marshal.load*", "runpy.*", "torch.hub.*", "dill.load*",
        "cloudpickle.load*", "torch.ops.*.py_impl", "torch._ops.*",
        # source text run by an interpreter object (code.InteractiveInterpreter().runsource(text))
        "code.*", "codeop.*",
        # more process-wide state: numpy's error and print modes and RNG, stdlib RNG, decimal, mimetypes,
        # tracemalloc, stdio descriptors, exiting the interpreter
        "numpy.set*", "numpy.seterr*", "numpy.random.seed", "numpy.random.set_state", "random.setstate",
        "decimal.setcontext", "mimetypes.add_type", "mimetypes.init", "tracemalloc.start", "os.dup2",
        "os.close", "os.closerange", "os._exit", "sys.exit", "builtins.exit", "builtins.quit",
        # compiler stance and graph rules, triton's active driver, TorchScript state, python kernels of ops
        "torch.compiler.*", "torch.jit._state.*", "triton.runtime.driver.*", "torch.ops.*.py_kernels.*",
        # the decimal context of the thread; profilers and monitoring hook every frame of the process
        "decimal.context.*", "cProfile.*", "profile.*", "_lsprof.*", "sys.monitoring.*", "bdb.*", "pdb.*",
        # processes, whatever module starts them (a pool or a Process is a process: fail closed on the
        # package, allow its read-only getters below)
        "multiprocessing.*", "torch.multiprocessing.*", "asyncio.create_subprocess_*", "asyncio.subprocess.*",
        "concurrent.futures.process.*", "concurrent.futures.ProcessPoolExecutor",
        # the interpreter's argument and option lists, changed in place
        "sys.argv.*", "sys.orig_argv.*", "sys.warnoptions.*", "sys._xoptions.*",
        # another library's logging configuration (transformers.logging.set_verbosity_error(), ...)
        "*.logging.set_*", "*.logging.disable*", "*.logging.enable*", "*.logging.add_handler",
        "*.logging.remove_handler", "*.logging.reset_*", "*.logging.captureWarnings",
        # torch's global registries: fx side-effect set and wrapped globals, the weights_only unpickler's
        # allow-list, serialization packages, global module hooks
        "torch.fx.*has_side_effect", "torch.fx.*wrap", "torch.serialization.add_safe_globals",
        "torch.serialization.clear_safe_globals", "torch.serialization.register_package",
        "torch.serialization.set_*", "torch.overrides.*push*",
        "torch.utils._python_dispatch.*push*", "torch._C._push_*", "torch._C._pop_*",
        # files written by a library (where the policy's `file_writer_calls` say so) and temp files in the
        # shared temp directory
        "tempfile.mkstemp", "tempfile.mkdtemp", "tempfile.mktemp", "tempfile.*Temporary*",
        "pathlib.*.write_*", "pathlib.*.touch", "pathlib.*.unlink", "pathlib.*.mkdir", "pathlib.*.rmdir",
        "pathlib.*.rename", "pathlib.*.replace", "pathlib.*.symlink_to", "pathlib.*.hardlink_to",
        "pathlib.*.chmod", "pathlib.*.lchmod",
        # hostile review 22, fail closed by family: every `os` call (the reads are allowed below; `os.open`
        # is judged by its flags), the process's stdio streams, descriptors and memory maps, the clock and
        # time zone, limits, byte-compilation and in-place file rewriting, other process starters and
        # network clients, the global RNGs by their instances, CUDA runtime switches and profilers, grad and
        # forward-AD modes by their modules, another library's global switches, methods of objects a
        # library call made (`psutil.Process(pid).kill()` is named `psutil.Process().kill`)
        "os.*", "sys.stdout.*", "sys.stderr.*", "sys.stdin.*", "sys.__stdout__.*", "sys.__stderr__.*",
        "sys.__stdin__.*", "fcntl.*", "mmap.*", "termios.*", "tty.*", "time.tzset", "time.clock_set*",
        "resource.*", "py_compile.*", "compileall.*", "fileinput.*", "webbrowser.*", "pexpect.*",
        "_posixsubprocess.*", "_thread.*", "psutil.*", "requests.*", "urllib3.*", "httpx.*", "aiohttp.*",
        "ftplib.*", "smtplib.*", "poplib.*", "imaplib.*", "telnetlib.*", "xmlrpc.*", "socketserver.*",
        "http.server.*", "asyncio.open_*connection", "asyncio.start_*server", "asyncio.streams.*",
        "asyncio.get*loop().set_*", "asyncio.get*loop().add_signal_handler", "asyncio.get*loop().close",
        "asyncio.get*loop().stop", "random._inst.*", "random.Random.seed", "random.Random.setstate",
        "numpy.random.mtrand.*", "numpy.random.RandomState.seed", "numpy.random.RandomState.set_state",
        "torch.default_generator.*", "torch.cuda.default_generators*", "*.set_seed", "*.seed_everything",
        "torch.cuda.tunable.*", "torch.cuda.change_current_allocator", "torch.cuda.reset_*",
        "torch.cuda.profiler.*", "torch.cuda.cudart().*", "torch.profiler.*", "torch.autograd.profiler.*",
        "torch.autograd.forward_ad.*", "torch.autograd.grad_mode.*", "*.disable_caching", "*.enable_caching",
        "*.set_verbosity*", "*.disable_progress_bar*", "*.enable_progress_bar*",
        "atexit._*", "atexit.unregister", "tracemalloc.*", "distutils.*", "setuptools.*", "io.*.reconfigure",
        "_io.*.reconfigure", "io.*.detach", "_io.*.detach", "torch.Generator.manual_seed",
        "torch.Generator.seed", "torch.Generator.set_state", "random.Random.__init__",
        "random.Random.__setstate__", "numpy.random.RandomState.__init__",
        "numpy.random.RandomState.__setstate__",
        # hostile review 23: context managers that swap process-wide state while their block runs (every
        # other thread sees it: the stdio streams, the working directory), process-wide caches cleared
        "contextlib.redirect_*", "contextlib.chdir", "re.purge", "re._compile.cache_clear", "fnmatch._purge",
        "linecache.clearcache", "linecache.checkcache", "sys._clear_*", "typing._cleanups*",
    ])
    # Library calls that write a file to the destination they are given (FT146 unless every argument is an
    # in-memory buffer made here: `io.BytesIO()`/`io.StringIO()`); fnmatch over the dotted name. The last
    # patterns close the family by name: a foreign `save`/`save_*`/`*_save`/`savez*`/`savetxt`/`tofile`
    # writes a file whatever package it is in.
    file_writer_calls: list[str] = Field(default_factory=lambda: [
        "torch.save", "torch.serialization.save", "torch.jit.save", "torch.export.save", "torch.onnx.export",
        "numpy.save*", "numpy.*.tofile", "safetensors.*save*", "pickle.dump", "marshal.dump",
        "sqlite3.connect", "sqlite3.dbapi2.connect",
        "*.save", "*.save_*", "*_save", "*.savez*", "*.savetxt", "*.tofile", "*.to_file", "*.dump_to_file",
        "*.write_file",
        # hostile review 22: more writers by name (plots, data frames, traces, archives extracted, event
        # files, JSON into a handle)
        "*.savefig", "*.to_csv", "*.to_parquet", "*.to_pickle", "*.to_hdf", "*.to_feather", "*.to_excel",
        "*.to_netcdf", "*.export_chrome_trace", "*.export_stacks", "*.export_memory_timeline",
        "*.extractall", "*().extract", "json.dump", "torch.utils.tensorboard.*", "*.SummaryWriter",
        "tensorboardX.*",
    ])
    # Callables taking a file mode (FT146 when it writes: `w`, `a`, `x`, `+`, or dbm's `c`/`n`; a computed
    # mode fails closed): name -> (position of the mode argument, the mode when none is given).
    file_openers: dict[str, tuple[int, str]] = Field(default_factory=lambda: {
        "builtins.open": (1, "r"), "io.open": (1, "r"), "codecs.open": (1, "r"), "os.fdopen": (1, "r"),
        "io.FileIO": (1, "r"), "_io.FileIO": (1, "r"), "zipfile.ZipFile": (1, "r"),
        "zipfile.PyZipFile": (1, "r"), "tarfile.open": (1, "r"), "tarfile.TarFile": (1, "r"),
        "gzip.open": (1, "rb"), "gzip.GzipFile": (1, "rb"), "bz2.open": (1, "rb"), "bz2.BZ2File": (1, "r"),
        "lzma.open": (1, "rb"), "lzma.LZMAFile": (1, "r"), "h5py.File": (1, "r"),
        "numpy.memmap": (2, "r+"), "numpy.lib.format.open_memmap": (1, "r+"), "wave.open": (1, "rb"),
        "logging.FileHandler": (1, "a"), "logging.handlers.*FileHandler": (1, "a"),
        "dbm.open": (1, "r"), "dbm.*.open": (1, "r"), "shelve.open": (1, "c"),
        "pathlib.*Path.open": (1, "r"),
    })
    allowed_global_calls: list[str] = Field(default_factory=lambda: [
        "torch._C.*_get*", "torch._C.*_is_*", "torch._C._has_*", "torch.backends.*.is_*",
        "torch.backends.*_enabled", "torch.backends.*.get_*", "torch.backends.*.version",
        "torch._dynamo.is_compiling", "torch._dynamo.disable", "torch._dynamo.mark_*",
        "torch._dynamo.maybe_mark_*", "torch._dynamo.graph_break", "torch._dynamo.*.mark_*",
        "torch._dynamo.*.maybe_mark_*", "torch._dynamo.*.disable", "torch.nn.attention.SDPBackend*",
        "torch.cuda.memory.memory_*", "torch.cuda.memory.max_memory_*", "torch.cuda.memory.mem_get_info",
        "logging.getLogger", "logging.get*", "logging.Logger*", "logging.Handler*", "logging.Formatter*",
        "warnings.warn", "warnings.warn_explicit", "warnings.catch_warnings",
        "threading.Thread", "threading.Lock", "threading.RLock", "threading.Event", "threading.Condition",
        "threading.Semaphore", "threading.BoundedSemaphore", "threading.local", "threading.current_thread",
        "threading.get_ident", "threading.get_native_id", "threading.main_thread", "threading.active_count",
        "shutil.which", "shutil.disk_usage", "shutil.get_terminal_size", "gc.collect", "gc.isenabled",
        "gc.is_tracked", "signal.getsignal", "signal.Signals", "signal.strsignal", "signal.valid_signals",
        # ctypes: values, their sizes and addresses (ints: kernel-launch argument packing in vLLM's own
        # K3 code). Pointers (`pointer`, `POINTER`, `cast`) and a type's `from_address` reach any memory of
        # the process with no audit event (a write through a pointer's index edits an interned string):
        # FT146, not granted to model code (`from_address` read into a new value at once is spared).
        "ctypes.sizeof", "ctypes.byref", "ctypes.Structure", "ctypes.Union", "ctypes.alignment",
        "ctypes.addressof", "ctypes.util.find_library", "ctypes.get_errno", "ctypes.string_at",
        *(f"ctypes.c_{t}" for t in (
            "bool", "byte", "char", "char_p", "double", "float", "int", "int8", "int16", "int32", "int64",
            "long", "longdouble", "longlong", "short", "size_t", "ssize_t", "ubyte", "uint", "uint8",
            "uint16",
            "uint32", "uint64", "ulong", "ulonglong", "ushort", "void_p", "wchar", "wchar_p")),
        "sysconfig.get_*", "multiprocessing.get_*", "site.get*",
        "torch.compiler.is_*", "torch.compiler.disable", "torch.compiler.assume_constant_result",
        "torch.compiler.cudagraph_mark_step_begin", "triton.runtime.driver.active.*get_*",
        "sys.monitoring.get_*", "decimal.context.create_decimal*", "decimal.context.copy",
        # messages to a shared logger are fine; configuring it is not
        "logging.loggers.*.debug", "logging.loggers.*.info", "logging.loggers.*.warning",
        "logging.loggers.*.warning_once", "logging.loggers.*.info_once", "logging.loggers.*.debug_once",
        "logging.loggers.*.error", "logging.loggers.*.exception", "logging.loggers.*.critical",
        "logging.loggers.*.log", "logging.loggers.*.isEnabledFor", "logging.loggers.*.getEffectiveLevel",
        "multiprocessing.get_*", "multiprocessing.cpu_count", "multiprocessing.current_process",
        "multiprocessing.parent_process", "multiprocessing.active_children", "torch.multiprocessing.get_*",
        "sys.argv.index", "sys.argv.count", "sys.argv.copy", "sys.argv.__getitem__", "sys.argv.__len__",
        "sys.argv.__contains__", "*.logging.get_*",
        # the reads of the families above (hostile review 22); the module's constants as values
        "os.environ", "os.environb", "os.sep", "os.linesep", "os.name", "os.curdir", "os.pardir",
        "os.extsep", "os.altsep", "os.pathsep", "os.devnull", "os.defpath", "os.error", "os.path.*",
        "os.get*",
        "os.environ.get", "os.environ.copy", "os.environ.items", "os.environ.keys",
        "os.environ.values", "os.environ.__getitem__", "os.environ.__contains__", "os.cpu_count",
        "os.process_cpu_count", "os.access", "os.stat", "os.lstat", "os.fstat", "os.statvfs", "os.fstatvfs",
        "os.listdir", "os.listxattr", "os.scandir", "os.walk", "os.fwalk", "os.fspath", "os.fsencode",
        "os.fsdecode", "os.readlink", "os.urandom", "os.strerror", "os.sched_getaffinity",
        "os.sched_get_priority_*", "os.uname", "os.times", "os.isatty", "os.device_encoding", "os.sysconf",
        "os.confstr", "os.pathconf", "os.fpathconf", "os.major", "os.minor", "os.makedev", "os.read",
        "os.pread", "os.readv", "os.preadv", "os.fsync", "os.fdatasync", "os.pipe", "os.pipe2", "os.dup",
        "os.memfd_create", "os.waitstatus_to_exitcode", "os.W*", "os.PathLike", "os.DirEntry",
        "os.terminal_size", "os.stat_result", "os.samestat", "os.ctermid", "os.ttyname", "os.cpu_count",
        # methods of the plain values (bytes, str, lists, stat results) those reads return
        "os.urandom().*", "os.get*().*", "os.environ.get().*", "os.path.*().*", "os.fspath().*",
        "os.fsencode().*", "os.fsdecode().*", "os.readlink().*", "os.strerror().*", "os.uname().*",
        "os.stat().*", "os.lstat().*", "os.fstat().*", "os.listdir().*", "os.cpu_count().*",
        "sys.std*.write", "sys.std*.flush", "sys.std*.isatty", "sys.std*.fileno", "sys.std*.writable",
        "sys.std*.readable", "sys.std*.seekable", "sys.std*.read*", "sys.__std*__.write",
        "sys.__std*__.flush", "sys.__std*__.isatty", "sys.__std*__.fileno", "resource.get*",
        "_thread.get_ident", "_thread.get_native_id", "_thread.allocate_lock", "_thread.LockType",
        "_thread.RLock", "psutil.cpu_count", "psutil.virtual_memory", "psutil.swap_memory",
        "psutil.pid_exists", "psutil.Process", "psutil.Process().memory_info", "psutil.Process().name",
        "psutil.Process().cpu_affinity_get", "psutil.boot_time", "psutil.net_if_addrs", "psutil.disk_usage",
        "psutil.cpu_percent", "torch.default_generator.initial_seed", "torch.default_generator.get_state",
        "torch.default_generator.device", "torch.cuda.tunable.is_*", "torch.cuda.tunable.get_*",
        "torch.cuda.cudart().cudaHostRegister", "torch.cuda.cudart().cudaHostUnregister",
        "torch.cuda.cudart().cudaGetErrorString", "torch.cuda.cudart().cudaMemGetInfo",
        "torch.profiler.ProfilerActivity*", "torch.profiler.schedule", "torch.profiler.ProfilerAction*",
        "torch.autograd.forward_ad.make_dual", "torch.autograd.forward_ad.unpack_dual",
        "torch.autograd.grad_mode.is_*", "tracemalloc.get_*", "tracemalloc.is_tracing",
        "tracemalloc.take_snapshot", "tracemalloc.Snapshot*", "tracemalloc.Filter",
        "tracemalloc.DomainFilter",
    ])
    scoped_global_calls: list[str] = Field(default_factory=lambda: [
        "torch._dynamo.config.patch", "torch._inductor.config.patch", "torch._functorch.config.patch",
        "torch.nn.attention.sdpa_kernel", "torch.backends.cuda.sdp_kernel", "torch.backends.*.flags",
        "torch.set_grad_enabled", "torch.autograd.set_grad_enabled", "torch._dynamo.config.*patch*",
        "warnings.catch_warnings", "torch.autograd.detect_anomaly", "torch.autograd.set_detect_anomaly",
        "torch.profiler.profile", "torch.profiler.record_function", "torch.autograd.profiler.profile",
        "torch.autograd.profiler.record_function", "torch.autograd.profiler.emit_nvtx",
        "torch.autograd.forward_ad.dual_level", "torch.autograd.grad_mode.no_grad",
        "torch.autograd.grad_mode.enable_grad", "torch.autograd.grad_mode.set_grad_enabled",
        "torch.autograd.grad_mode.inference_mode", "torch.autograd.grad_mode.set_multithreading_enabled",
        "torch.cuda.profiler.profile",
    ])
    # Engine accessors (fnmatch over the called dotted name): functions handing model code the engine's
    # own shared objects (the current VllmConfig, the forward context, the process groups). What they
    # return is the engine's: reading it is fine, writing to it (attributes, items, setattr, in-place
    # updates, directly or through aliases and helpers) is FT120/FT121 like a write to an engine module.
    engine_accessors: list[str] = Field(default_factory=lambda: [
        "vllm.config*.get_current_vllm_config", "vllm.config*.get_current_vllm_config_or_none",
        "vllm.config*.get_cached_compilation_config", "vllm.config*.get_layers_from_vllm_config",
        "vllm.forward_context.get_forward_context", "vllm.distributed*.get_*_group",
        "vllm.distributed*.get_ec_transfer",
    ])
    # The one write the engine asks layers to make into state reached from an accessor: a layer registering
    # itself in the compilation config's static forward context (`cc.static_forward_context[prefix] = self`
    # in a method, as every vLLM attention layer does). Allowed only as `<container>[key] = self` with
    # `self` the method's own instance; any other value, a delete or an in-place method stays an error.
    # fnmatch patterns over the container's dotted name as the scan spells it (`<accessor>().<path>`). A
    # model's `vllm_config` parameter is the current VllmConfig (the engine sets it while it builds the
    # model): `vllm_config.<path>` is matched as `vllm.config.get_current_vllm_config().<path>`.
    engine_self_registrations: list[str] = Field(default_factory=lambda: [
        "vllm.config*.get_current_vllm_config().compilation_config.static_forward_context",
        "vllm.config*.get_current_vllm_config_or_none().compilation_config.static_forward_context",
        "vllm.config*.get_cached_compilation_config().static_forward_context",
    ])
    # Parameters of model code that the engine fills with its own objects: the VllmConfig a model's
    # `__init__(self, vllm_config, prefix)` gets, the HF config and the sub-configs handed down to layers.
    # In model code (files of the contribution's own packages) a parameter named like these (fnmatch over
    # the name) or annotated with a type matching `engine_parameter_types` (fnmatch over the resolved dotted
    # name of any part of the annotation) is the engine's object: writes through it (attributes, items,
    # setattr, in-place and mutating methods; directly, through aliases, `self.<attr>` or helpers) are
    # FT120/FT121 like a write to an engine module. In a method of a class deriving from an engine class,
    # `*args`/`**kwargs` hold the engine's objects too.
    engine_parameter_names: list[str] = Field(default_factory=lambda: [
        "vllm_config", "config", "hf_config", "hf_text_config", "text_config", "vision_config",
        "model_config", "cache_config", "parallel_config", "scheduler_config", "device_config",
        "load_config", "attention_config", "kernel_config", "mamba_config", "lora_config",
        "speculative_config", "quant_config", "compilation_config", "multimodal_config",
        "observability_config", "kv_transfer_config", "structured_outputs_config", "offload_config",
        "additional_config", "forward_context", "attn_metadata",
    ])
    engine_parameter_types: list[str] = Field(default_factory=lambda: [
        "vllm.config*.*Config", "vllm.config*.VllmConfig", "vllm.transformers_utils.config*.*Config",
        "vllm.transformers_utils.configs.*", "vllm.model_executor.layers.quantization*.*Config",
        "vllm.forward_context.ForwardContext", "vllm.distributed*.GroupCoordinator",
        "transformers.*Config", "transformers.configuration_utils.*",
    ])
    # gitwildmatch patterns of code that does not run when the engine serves (tests, benchmarks): their
    # escapes are warnings, unless a non-test changed file imports them.
    test_paths: list[str] = Field(default_factory=lambda: [
        "tests/**", "**/tests/**", "**/test_*.py", "**/*_test.py", "**/conftest.py",
        "benchmarks/**", "**/benchmarks/**",
    ])


class EnvelopeBounds(Strict):
    """What a contribution's envelope may declare at most."""

    max_hardware_kinds: int = Field(ge=1, le=16)
    known_hardware: dict[str, str]  # GPU name -> compute capability, e.g. "NVIDIA H200" -> "9.0"
    tp_sizes: list[int] = Field(min_length=1)
    nvlink_domain: int = Field(ge=1)
    allow_pipeline_parallel: bool = False
    allow_expert_parallel: bool = False
    max_batch: int = Field(ge=1)
    max_context: int = Field(ge=1)
    dtypes: list[str] = Field(min_length=1)
    cuda_graph_modes: list[str] = Field(min_length=1)
    max_spec_decode_width: int = Field(default=8, ge=1)
    max_grid_points: int = Field(default=4096, ge=1)


class ToleranceCap(Strict):
    """The loosest element-wise check allowed for one dtype: |out - ref| <= atol + rtol * |ref|, and the
    largest relative error a kernel test may accept (`fasttrack_record(tolerance=...)`)."""

    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)
    record: float = Field(ge=0)


class EvalBound(Strict):
    max: float | None = None
    min: float | None = None


class AuditSettings(Strict):
    """How far a maintainer's re-run (`fasttrack audit`) may land from the contributor's figures."""

    median_tolerance: float = Field(default=0.10, gt=0, lt=1, description="relative, per variant median")
    ratio_tolerance: float = Field(default=0.08, gt=0, lt=1, description="relative, candidate/stock ratio")
    max_age_days: int = Field(default=365, ge=1)
    # Agreeing signed audits by a maintainer (an allowed signer other than the statement's) a bundle needs
    # before its claims count (FT348). 0: audits are shown when present, not required.
    required: int = Field(default=0, ge=0, le=100)


class SeparationSettings(Strict):
    """The engine's own pass (docs/baseline-contract.md): stock timed in a process that never imported the
    contribution, against stock timed beside the candidates in the contribution's process (FT347)."""

    stock_agreement: float = Field(default=0.05, gt=0, lt=1,
                                   description="the largest relative difference of the two stock medians")


class BackendSpec(Strict):
    """One implementation of a stage, recognised by the kernel names a captured graph shows."""

    name: str = Field(min_length=1, max_length=64)
    kernel_patterns: list[str] = Field(min_length=1)  # fnmatch, case-insensitive, on demangled names


class StageBackends(Strict):
    """For one stage of a layer on one compute capability: the engine's accepted backends, in the engine's
    order of preference, and backends that are never the engine's choice there."""

    stage: str = Field(min_length=1, max_length=64)
    compute_capability: str = Field(pattern=r"^\d{1,2}\.\d$")
    accepted: list[BackendSpec] = Field(min_length=1)
    rejected: list[BackendSpec] = Field(default_factory=list)


class BaselineSpec(Strict):
    """The engine side's stock path and fp32 oracle for one model (docs/baseline-contract.md)."""

    root: str = Field(min_length=1, description="repository-relative directory of the baseline package")
    case: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$", description="module:callable")
    oracle: Literal["fp32"] = "fp32"
    stages: list[StageBackends] = Field(default_factory=list)

    def stages_for(self, compute_capability: str) -> list[StageBackends]:
        return [s for s in self.stages if s.compute_capability == compute_capability]


class EvidenceRequirements(Strict):
    """What a bundle must show (the evidence rules read these)."""

    allowed_signers: str  # repository-relative path of an ssh allowed_signers file
    namespace: str = "fasttrack-evidence"
    required_batches: list[int] = Field(default_factory=lambda: [1, 2])
    min_samples: int = Field(default=20, ge=1)
    bootstrap_resamples: int = Field(default=2000, ge=100)
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    max_plausible_speedup: float = Field(default=10.0, gt=1.0)
    # Peak memory bandwidth (bytes/s) per GPU name: a measurement above it is a finding.
    peak_bandwidth: dict[str, float] = Field(default_factory=dict)
    sanitizer_not_run: Literal["warning", "error"] = "warning"
    max_age_days: int = Field(default=90, ge=1)
    # The engine's yardstick (docs/baseline-contract.md): the largest tolerance any check may use, per dtype
    # of the compared outputs. A kernel test's `fasttrack_record(tolerance=...)`, the timed accuracy check
    # and the oracle check are all capped by the row for the point's dtype; a dtype without a row fails.
    tolerance_caps: dict[str, ToleranceCap] = Field(default_factory=dict)
    # Bounds on model-level eval thresholds, by eval name: a "max" eval's threshold may not exceed `max`, a
    # "min" eval's may not fall below `min`. An eval the policy does not bound is a finding (FT345).
    eval_bounds: dict[str, EvalBound] = Field(default_factory=dict)
    # A variant's bandwidth may exceed the bandwidth measured on the same machine by at most this factor
    # (read-dominated kernels beat a copy, which counts a read and a write).
    bandwidth_margin: float = Field(default=1.10, ge=1.0, le=2.0)
    # Stock below this fraction of the measured roofline at a claimed point is a slow yardstick (FT343).
    min_stock_bandwidth_fraction: float = Field(default=0.25, ge=0.0, le=1.0)
    slow_stock: Literal["warning", "error"] = "warning"
    # Stock below this fraction anywhere means `bytes_moved` is implausibly small (FT344, an error).
    min_plausible_bandwidth_fraction: float = Field(default=0.01, ge=0.0, le=1.0)
    audit: AuditSettings = Field(default_factory=lambda: AuditSettings())
    separation: SeparationSettings = Field(default_factory=lambda: SeparationSettings())
    # Digests of the evidence harness (`python -m fasttrack.evidence.harness`) whose statements are accepted:
    # the released fasttrack's. A statement without one of them is FT402 (an empty list accepts none).
    accepted_harness_digests: list[Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]] = Field(
        default_factory=list)


class Policy(Strict):
    schema_version: Literal[1]
    engine: str
    engine_version: str
    models: ModelLayout
    zones: list[ZoneSpec]
    hooks: list[HookSpec] = Field(default_factory=list)
    blast_radius: BlastRadiusSpec = Field(default_factory=BlastRadiusSpec)
    envelope: EnvelopeBounds
    evidence: EvidenceRequirements
    escapes: EscapesSpec = Field(default_factory=EscapesSpec)
    # Per model: the engine-side baseline every claim is measured against (docs/baseline-contract.md).
    baselines: dict[str, BaselineSpec] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _unique_zone_names(self) -> Policy:
        names = [z.name for z in self.zones]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"duplicate zone names: {sorted(dupes)}")
        return self

    def hook_for(self, path: str) -> HookSpec | None:
        for hook in self.hooks:
            if hook.path == path:
                return hook
        return None


class Zone(BaseModel):
    """The classification of one path."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: ZoneKind
    model: str | None = None  # for model-local paths: which model's root it is in


def load_policy(path: Path) -> Policy:
    return load_toml_model(path, Policy, "policy")
