"""The engine's yardstick at collection time: the policy's baseline, the contribution's candidates, one case.

`fasttrack collect`'s bench worker builds every benchmark point from two sides (docs/baseline-contract.md):

* the **baseline** (`policy.baselines[model].case`, imported from the engine root, never from the
  contribution): stock, the fp32 oracle, extra engine-side variants (torch.compile of stock), the inputs,
  the weights and KV cache (`state`), the byte count, the dtype;
* the **candidates** (`manifest [evidence] benchmark`): `candidates(baseline, point) -> {name: callable}`
  built on `baseline.state`.

`compose` checks both against the contract and joins them into one case the timing protocol measures, with
the policy's tolerance cap for the baseline's dtype. `YardstickGuard` snapshots what stock's speed depends on
(every function and class of the modules the baseline imported, torch's global switches) before any
contribution code runs; what changed after is a rejection of the point (a contribution that slows stock down
or changes a switch stock relies on is cheating the yardstick).

This module is part of the harness (its digest is bound into every statement); it imports no torch at import.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STOCK = "stock"
ORACLE = "oracle"
RESERVED = frozenset({STOCK, ORACLE})
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")

# torch's process-wide switches stock's speed or numerics depend on: (label, dotted path from `torch`).
TORCH_SWITCHES: tuple[str, ...] = (
    "backends.cuda.matmul.allow_tf32",
    "backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    "backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "backends.cudnn.allow_tf32",
    "backends.cudnn.benchmark",
    "backends.cudnn.deterministic",
    "backends.cudnn.enabled",
)
TORCH_CALLS: tuple[str, ...] = (
    "get_float32_matmul_precision",
    "are_deterministic_algorithms_enabled",
    "get_default_dtype",
    "backends.cuda.flash_sdp_enabled",
    "backends.cuda.mem_efficient_sdp_enabled",
    "backends.cuda.math_sdp_enabled",
    "backends.cuda.preferred_blas_library",
    "_C._len_torch_function_stack",  # a mode pushed by the contribution runs inside every torch call
    "_C._len_torch_dispatch_stack",
    "_C._is_torch_function_mode_enabled",
)
# Dispatch keys whose kernels for an existing operator decide stock's speed (an `aten::mm` CPU or CUDA kernel
# registered by a contribution through torch.library replaces the engine's for stock as well).
DISPATCH_KEYS = frozenset({
    "CPU", "CUDA", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
    "CompositeExplicitAutogradNonFunctional", "Autograd", "AutogradCPU", "AutogradCUDA", "AutogradOther",
    "BackendSelect", "AutocastCPU", "AutocastCUDA", "QuantizedCPU", "QuantizedCUDA", "SparseCPU",
    "SparseCUDA", "NestedTensorCPU", "NestedTensorCUDA", "PythonDispatcher", "Python",
})
# torch namespaces whose callables a baseline calls at every step (a replaced one slows stock down).
TORCH_NAMESPACES: tuple[str, ...] = ("torch", "torch.nn.functional", "torch.distributed")


class ContractError(Exception):
    """The baseline or the candidates do not follow docs/baseline-contract.md (the point is rejected)."""


class MachineCannotRun(Exception):
    """The baseline has no case for this point on this machine (not a fault of the contribution)."""


def resolve(entry: str, search_dir: Path) -> Callable[..., Any]:
    """Import `module:callable` with `search_dir` first on sys.path."""
    if ":" not in entry:
        raise ContractError(f"entry point {entry!r} must look like module:callable")
    module_name, _, attr = entry.partition(":")
    if str(search_dir) not in sys.path:
        sys.path.insert(0, str(search_dir))
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ContractError(f"{entry} is not callable")
    return target  # type: ignore[no-any-return]


def import_package_tree(module_name: str) -> list[str]:
    """Import `module_name`'s package and every submodule under it (so a lazy submodule cannot be patched
    before the snapshot exists). Returns the names imported; a submodule that fails to import is skipped
    (e.g. a GPU-only module on a CPU machine) — it is then imported, if at all, after the snapshot and is
    not watched, which the guard's `unwatched` reports."""
    top = module_name.split(".")[0]
    root = importlib.import_module(top)
    names = [top]
    for info in pkgutil.walk_packages(getattr(root, "__path__", []), prefix=top + "."):
        try:
            importlib.import_module(info.name)
        except Exception:  # a submodule that cannot import here is not watched (reported)
            continue
        names.append(info.name)
    return names


def _lookup(root: Any, dotted: str) -> Any:
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _callables(namespace: Mapping[str, Any]) -> dict[str, int]:
    """Identity of the functions and classes in a namespace (other values may change legitimately)."""
    return {k: id(v) for k, v in list(namespace.items())
            if isinstance(v, type | types.FunctionType | types.BuiltinFunctionType | types.MethodType
                          | types.BuiltinMethodType)}


@dataclass
class YardstickGuard:
    """Identity of every function and class in the watched modules, and torch's switches, at snapshot."""

    prefixes: tuple[str, ...]
    functions: dict[str, dict[str, int]] = field(default_factory=dict)
    switches: dict[str, Any] = field(default_factory=dict)
    watched: set[str] = field(default_factory=set)
    instance: Any = None
    instance_held: dict[str, Any] = field(default_factory=dict)

    dispatch: dict[str, str] = field(default_factory=dict)

    def snapshot(self, instance: Any = None) -> YardstickGuard:
        """Take the snapshot; with `instance` (the point's baseline) also what that object holds: its
        class, every attribute, its state's attributes and tensors (a candidate that rebinds
        `baseline.stock`, swaps `__class__`, or gives stock other weights is changing the yardstick)."""
        self.functions = self._namespaces()
        self.watched = {name.split("::", 1)[0] for name in self.functions}
        self.switches = self._read_switches()
        self.dispatch = dispatch_table()
        self.instance = instance
        self.instance_held = instance_facts(instance) if instance is not None else {}
        return self

    def _namespaces(self) -> dict[str, dict[str, int]]:
        """module name -> its functions and classes; `module::Class` -> the class's own functions (a method
        replaced on a class leaves the class object itself unchanged)."""
        out: dict[str, dict[str, int]] = {}
        for name, mod in list(sys.modules.items()):
            if mod is None or not self._watched(name):
                continue
            ns = vars(mod)
            out[name] = _callables(ns)
            if name in TORCH_NAMESPACES:
                continue  # torch's own classes are too many to watch; torch.Tensor is (see switches)
            for attr, value in list(ns.items()):
                if isinstance(value, type) and getattr(value, "__module__", None) == name:
                    out[f"{name}::{attr}"] = _callables(vars(value))
        return out

    def _watched(self, name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in self.prefixes) or name in TORCH_NAMESPACES

    @staticmethod
    def _read_switches() -> dict[str, Any]:
        torch = sys.modules.get("torch")
        out: dict[str, Any] = {}
        if torch is None:
            return out
        for path in TORCH_SWITCHES:
            try:
                out[path] = repr(_lookup(torch, path))
            except Exception:
                continue
        for path in TORCH_CALLS:
            try:
                out[path + "()"] = repr(_lookup(torch, path)())
            except Exception:
                continue
        out["sys.gettrace()"] = repr(sys.gettrace())  # a tracer that runs only in the engine's frames
        out["sys.getprofile()"] = repr(sys.getprofile())
        tensor = getattr(torch, "Tensor", None)
        if tensor is not None:
            out["Tensor.__dict__"] = tuple(sorted(_callables(vars(tensor)).items()))
        return out

    def changed(self) -> list[str]:
        """What differs from the snapshot: replaced or removed functions and classes, changed switches."""
        out: list[str] = []
        current = self._namespaces()
        for name, before in self.functions.items():
            now = current.get(name)
            if now is None:
                out.append(f"{name.replace('::', '.')} is no longer importable as it was (removed from "
                           "sys.modules or replaced)")
                continue
            for attr, ident in before.items():
                if now.get(attr) != ident:
                    what = "removed" if attr not in now else "replaced"
                    out.append(f"{name.replace('::', '.')}.{attr} was {what}")
        if self.dispatch:
            now_dispatch = dispatch_table(self.dispatch)
            moved = sorted(op for op, text in self.dispatch.items() if now_dispatch.get(op) != text)
            out += [f"a kernel of the operator {op} was registered or replaced (torch.library)"
                    for op in moved[:20]]
        if self.instance is not None:
            now_facts = instance_facts(self.instance)
            diff = sorted(k for k in set(self.instance_held) | set(now_facts)
                          if self.instance_held.get(k) != now_facts.get(k)
                          and not _new_state_entry(k, self.instance_held))
            out += [f"{k} was rebound, replaced or added on the baseline's instance" for k in diff[:20]]
            if len(diff) > 20:
                out.append(f"... and {len(diff) - 20} more of the baseline's attributes")
        now_switches = self._read_switches()
        for key, value in self.switches.items():
            if key == "Tensor.__dict__":
                if now_switches.get(key) != value:
                    out.append("a method of torch.Tensor was replaced or removed")
            elif now_switches.get(key) != value:
                out.append(f"torch.{key} changed from {value} to {now_switches.get(key)}")
        return out

    def unwatched(self) -> list[str]:
        """Modules under the watched prefixes imported after the snapshot (not guarded)."""
        return sorted(name for name in list(sys.modules)
                      if name not in self.watched and any(name == p or name.startswith(p + ".")
                                                          for p in self.prefixes))


def dispatch_table(ops: Iterable[str] | None = None) -> dict[str, str]:
    """operator -> the registrations of its speed-relevant dispatch keys, for every operator registered now
    (or `ops`). An operator the contribution adds is not in the snapshot, so its own custom ops are fine."""
    torch = sys.modules.get("torch")
    c = getattr(torch, "_C", None) if torch is not None else None
    if c is None or not hasattr(c, "_dispatch_get_all_op_names") or not hasattr(c, "_dispatch_dump"):
        return {}
    out: dict[str, str] = {}
    for op in list(ops) if ops is not None else list(c._dispatch_get_all_op_names()):
        try:
            text = c._dispatch_dump(op)
        except Exception:  # an operator removed since: recorded as gone
            out[op] = "<gone>"
            continue
        out[op] = "\n".join(line for line in str(text).splitlines()
                            if line.split(":", 1)[0].strip() in DISPATCH_KEYS)
    return out


INSTANCE_FACTS_LIMIT = 50_000
PRIMITIVES = (int, float, str, bytes, bool, type(None))
INSTANCE_DEPTH_LIMIT = 10


def _tensor_fact(t: Any) -> tuple[Any, ...]:
    try:
        where: tuple[Any, ...] = (t.data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()))
    except Exception:  # a tensor without storage (meta, sparse): its identity and kind only
        where = ()
    return ("tensor", id(t), id(type(t)), str(t.dtype), str(t.device), *where)


def _new_state_entry(path: str, held: dict[str, Any]) -> bool:
    """True for an entry the candidates added to a dict inside the baseline's state that already existed
    (`baseline.state.weights._derived['fused.folded']`, the engine's cache of derived forms), or anything
    under such an entry. The engine ran stock before the snapshot, so every entry stock reads was there
    already: replacing or removing one is still tampering, and so is anything added to the baseline's own
    attributes (`extra_baselines`, `static_inputs`) or a new attribute anywhere."""
    if path in held or not path.startswith("baseline.state."):
        return False
    for i, ch in enumerate(path):
        if ch != "]":
            continue
        entry = path[: i + 1]  # a prefix ending in a subscript: `...[key]`
        container = entry[: entry.rindex("[")]
        keyed = entry[len(container) + 1:][:1] in ("'", '"')  # a dict's string key, not a list's index
        if keyed and entry not in held and container in held:
            return True
    return False


def instance_facts(obj: Any) -> dict[str, Any]:
    """What an engine-side object holds, by path (`baseline.state.weight`): the identity and class of every
    attribute, reached through dicts, lists, tuples, objects of the baseline's own package and torch
    modules; tensors by identity, storage, shape, stride, dtype and device (their values may change: a
    KV-cache write, an input load). Objects of other libraries are recorded by identity, not entered."""
    torch = sys.modules.get("torch")
    tensor_type = getattr(torch, "Tensor", None) if torch is not None else None
    module_type = getattr(getattr(torch, "nn", None), "Module", None) if torch is not None else None
    package = type(obj).__module__.split(".")[0]
    out: dict[str, Any] = {}
    seen: set[int] = set()
    stack: list[tuple[str, Any, int]] = [("baseline", obj, 0)]
    while stack and len(out) < INSTANCE_FACTS_LIMIT:
        path, x, depth = stack.pop()
        if tensor_type is not None and isinstance(x, tensor_type):
            out[path] = _tensor_fact(x)
            continue
        if isinstance(x, PRIMITIVES):
            out[path] = (type(x).__name__, repr(x)[:200])
            continue
        out[path] = (id(x), id(type(x)))
        if id(x) in seen or depth >= INSTANCE_DEPTH_LIMIT:
            continue
        seen.add(id(x))
        children: list[tuple[str, Any]] = []
        if isinstance(x, dict):
            children = [(f"{path}[{k!r}]", v) for k, v in list(x.items())]
        elif isinstance(x, list | tuple):  # an engine-side log (numbers appended as it runs) may grow
            children = [(f"{path}[{i}]", v) for i, v in enumerate(x) if not isinstance(v, PRIMITIVES)]
        elif hasattr(x, "__dict__") and not isinstance(x, type | types.ModuleType) and (
                type(x).__module__.split(".")[0] == package
                or (module_type is not None and isinstance(x, module_type))):
            children = [(f"{path}.{k}", v) for k, v in list(vars(x).items())]
        stack.extend((p, v, depth + 1) for p, v in children)
    return out


def engine_method(baseline: Any, name: str) -> Callable[..., Any]:
    """`baseline.<name>` as the baseline's class defines it (an attribute set on the instance cannot stand in
    for it); an instance attribute only where the class has none."""
    attr = getattr(type(baseline), name, None)
    if attr is not None and hasattr(attr, "__get__"):
        bound: Callable[..., Any] = attr.__get__(baseline, type(baseline))
        return bound
    fn: Callable[..., Any] = getattr(baseline, name)
    return fn


@dataclass
class Cap:
    atol: float
    rtol: float
    record: float


@dataclass
class ComposedCase:
    """One benchmark point as the timing protocol measures it: the engine's variants and the candidates,
    the engine's inputs, tolerance and byte count."""

    baseline: Any
    variants: dict[str, Callable[[Any], Any]]
    origins: dict[str, str]  # variant -> "engine" | "contribution"
    tolerance: tuple[float, float]
    layers: int
    dtype: str
    static: Any = None  # the baseline's static_inputs as they were when the case was composed
    methods: dict[str, Callable[..., Any]] = field(default_factory=dict)  # as the baseline's class has them
    engine_only: bool = False  # the engine's own pass: stock (and the engine's variants) alone

    def __post_init__(self) -> None:
        if self.static is None:
            self.static = self.baseline.static_inputs
        for name in ("make_inputs", "load_inputs", "bytes_moved", "oracle"):
            self.methods.setdefault(name, engine_method(self.baseline, name))

    @property
    def static_inputs(self) -> Any:
        return self.static

    def make_inputs(self, seed: int) -> Any:
        return self.methods["make_inputs"](seed)

    def load_inputs(self, fresh: Any) -> None:
        self.methods["load_inputs"](fresh)

    def bytes_moved(self, variant: str) -> float:
        """The engine's figure for the layer, the same for every variant (a candidate cannot shrink it)."""
        return float(self.methods["bytes_moved"]())

    def oracle(self, inputs: Any) -> Any:
        return self.methods["oracle"](inputs)


def _check_name(name: Any, reserved: Iterable[str]) -> str:
    if not isinstance(name, str) or not name or len(name) > 64 or not set(name) <= NAME_CHARS:
        raise ContractError(f"candidate name {name!r} must be 1-64 characters of a-z, 0-9, '_' and '-'")
    if name in reserved:
        raise ContractError(f"candidate name {name!r} is reserved for the engine's side")
    return name


def check_baseline(baseline: Any, where: str) -> None:
    """Raise ContractError naming what `baseline` lacks (the engine side's own bug, reported as such)."""
    for attr in ("stock", "oracle", "make_inputs", "load_inputs", "bytes_moved"):
        if not callable(getattr(baseline, attr, None)):
            raise ContractError(f"the baseline {where} has no callable `{attr}`")
    for attr in ("static_inputs", "state", "dtype"):
        if not hasattr(baseline, attr):
            raise ContractError(f"the baseline {where} has no `{attr}`")
    layers = getattr(baseline, "layers", 1)
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        raise ContractError(f"the baseline {where} has layers={layers!r}; it must be a positive integer")
    extra = getattr(baseline, "extra_baselines", {}) or {}
    if not isinstance(extra, Mapping) or not all(isinstance(k, str) and callable(v)
                                                 for k, v in extra.items()):
        raise ContractError(f"the baseline {where}: extra_baselines must map names to callables")


class _EngineOnly:
    """The candidates of the engine's own pass: none (see `no_candidates`)."""

    def __repr__(self) -> str:
        return "ENGINE_ONLY"


ENGINE_ONLY: Any = _EngineOnly()


def no_candidates(baseline: Any, point: Any) -> Any:
    """The candidates entry of the engine-only pass: stock and the engine's extra variants alone, in a
    process that never imports the contribution."""
    del baseline, point
    return ENGINE_ONLY


def compose(baseline: Any, candidates: Any, caps: Mapping[str, Cap], where: str,
            engine_pass: bool = False) -> ComposedCase:
    """The case the protocol measures, or ContractError saying which side broke the contract. Only the
    engine pass (`engine_pass`) composes a case without candidates (`no_candidates`)."""
    check_baseline(baseline, where)
    extra: Mapping[str, Callable[[Any], Any]] = dict(getattr(baseline, "extra_baselines", {}) or {})
    dtype = str(baseline.dtype)
    cap = caps.get(dtype)
    if cap is None:
        raise ContractError(f"the policy has no tolerance cap for dtype {dtype!r} "
                            "([evidence.tolerance_caps]): nothing may be checked without one")
    if not (math.isfinite(cap.atol) and math.isfinite(cap.rtol)):
        raise ContractError(f"the policy's tolerance cap for {dtype!r} is not finite")
    engine_only = candidates is ENGINE_ONLY and engine_pass
    if engine_only:
        candidates = {}
    elif not isinstance(candidates, Mapping) or not candidates:
        got = type(candidates).__name__
        raise ContractError(f"the contribution's candidates entry returned {got}, not a non-empty mapping "
                            "of name -> callable")
    reserved = RESERVED | set(extra)
    variants: dict[str, Callable[[Any], Any]] = {STOCK: engine_method(baseline, STOCK)}
    origins = {STOCK: "engine"}
    for name, fn in extra.items():
        _check_name(name, RESERVED)
        variants[name] = fn
        origins[name] = "engine"
    for name, fn in candidates.items():
        _check_name(name, reserved)
        if not callable(fn):
            raise ContractError(f"candidate {name!r} is not callable")
        variants[name] = fn
        origins[name] = "contribution"
    return ComposedCase(baseline=baseline, variants=variants, origins=origins,
                        tolerance=(float(cap.atol), float(cap.rtol)),
                        layers=int(getattr(baseline, "layers", 1)), dtype=dtype, engine_only=engine_only)


def engine_prefixes(case_entry: str) -> tuple[str, ...]:
    """The module prefixes the guard watches for a baseline entry (`baselines.vllm.kimi_k3.case:f` ->
    `baselines`), plus the third-party kernel libraries engines use."""
    top = case_entry.split(":", 1)[0].split(".")[0]
    return (top, "flashinfer")
