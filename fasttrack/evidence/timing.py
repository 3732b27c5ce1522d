"""The timing protocol fasttrack owns: how a contribution's BenchmarkCase is measured and checked.

The contribution only *describes* its work (variants, fresh inputs, bytes moved); this module runs it. For
every timed replay of every variant:

1. the variant's output buffers are poisoned (NaN / sentinel), so an output the replay did not write shows;
2. fresh inputs are drawn (`make_inputs` with a seed never used before) and loaded into the static buffers,
   and the load is checked (a `load_inputs` that does nothing would time a fixed input);
3. caches are flushed by writing a buffer at least twice the L2 size, the persisting-L2 carve-out is checked
   to be 0 and the persisting lines are reset; the whole device is synchronized (all outside the timed
   region);
4. the replay is timed (CUDA events around a CUDA-graph replay, the whole device synchronized before the
   events are read; on the CPU backend, perf_counter around the call), with the protocol's own references to
   the timer functions, taken before any contribution code is imported;
5. the inputs are checked against a pristine copy (a variant may not mutate them), and the output is checked
   against stock computed eagerly on a clone of the same inputs (accuracy in the mode that is timed).

Variants are interleaved in both orders (stock, fused, ... then ..., fused, stock). Raw samples are kept.
Before the loop the case itself is checked: inputs must depend on the seed, stock's output must depend on
the inputs (a constant function would let a constant output pass). After it, the timer functions must be the
ones the protocol saw before the contribution was imported, and (CUDA) the persisting-L2 carve-out must still
be 0 and no captured kernel may carry a persisting access-policy window.

Backends: `CpuBackend` (perf_counter, no graphs; the bookkeeping and anti-gaming tests run on it in CI) and
`CudaBackend` (graphs, events, L2 flush, persisting-L2 reset, kernel count from the graph).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from typing import Protocol as TypingProtocol

from fasttrack.evidence.measurement import (
    Accuracy,
    AccuracyResult,
    CaseResult,
    Measurement,
    OracleCheck,
    OracleResult,
    Protocol,
    ProtocolFacts,
    RankInfo,
    RankSummary,
    Variant,
    VariantResult,
    per_layer,
)

# The protocol's own references to the clocks, taken when this module is first imported (collect imports it
# before any contribution module). Calls below go through these, never through `time.<name>` at call time.
_PERF_NS = time.perf_counter_ns
_WATCHED_TIME_FUNCS = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns",
                       "process_time", "process_time_ns", "thread_time", "thread_time_ns")

STOCK = "stock"
MIN_FLUSH_BYTES_CPU = 1 << 20


# ------------------------------------------------------------------------------------------------ results
# The measurement schema lives in `fasttrack.evidence.measurement` (one schema from the worker to the bundle).
__all__ = ["Accuracy", "AccuracyResult", "CaseResult", "Measurement", "OracleCheck", "OracleResult",
           "Protocol", "ProtocolFacts", "RankInfo", "RankSummary", "Variant", "VariantResult"]


class Recorder(TypingProtocol):
    """Where each measurement goes the moment it is taken (`fasttrack.evidence.stream.PointRecorder`: to the
    collector, before any other contribution code runs), so a record rewritten later in this process's
    memory no longer matches what was measured."""

    def declare(self, names: list[str]) -> None: ...

    def sample(self, name: str, device_us: float, wall_us: float | None) -> None: ...

    def check(self, name: str, ok: bool, reason: str | None, error: float | None = None) -> None: ...

    def oracle(self, name: str, ok: bool, error: float | None, atol: float, rtol: float,
               reason: str | None) -> None: ...


@dataclass(frozen=True)
class ProtocolSettings:
    iterations: int = 30  # timed replays per variant
    warmup: int = 3  # untimed replays per variant (after capture)
    seed_base: int = 20_250_000
    max_failures_per_variant: int = 5  # stop timing a variant after this many failed checks

    def __post_init__(self) -> None:
        if self.iterations < 2:
            raise ValueError("iterations must be >= 2 (both orders)")
        if self.warmup < 0:
            raise ValueError("warmup must be >= 0")


class CaseRejected(Exception):
    """The case cannot be measured honestly; the message is the reason recorded."""


# ------------------------------------------------------------------------------------------- timer guard
class TimerGuard:
    """Remembers the identity of timer functions and tells which ones were replaced since.

    `snapshot()` is called before contribution code is imported; `changed()` after each case. A cheat that
    monkeypatches `time.perf_counter` or `torch.cuda.Event.elapsed_time` is reported by name. The protocol
    times through its own saved references, so the numbers stay honest even then; the case is rejected.
    """

    def __init__(self) -> None:
        self._watched: list[tuple[str, Any, str, Any]] = []

    def watch(self, label: str, owner: Any, attr: str) -> None:
        self._watched.append((label, owner, attr, _static(owner, attr)))

    def snapshot(self, extra: Iterable[tuple[str, Any, str]] = ()) -> TimerGuard:
        import sys

        for name in _WATCHED_TIME_FUNCS:
            if hasattr(time, name):
                self.watch(f"time.{name}", time, name)
        this = sys.modules[__name__]
        self.watch(f"{__name__}._PERF_NS", this, "_PERF_NS")
        for label, owner, attr in extra:
            self.watch(label, owner, attr)
        return self

    def changed(self) -> list[str]:
        return [label for label, owner, attr, ref in self._watched if _static(owner, attr) is not ref]


def _static(owner: Any, attr: str) -> Any:
    """What `owner.attr` is bound to, without running a descriptor (a classmethod makes a new bound method
    at every lookup; a replaced one is a new object in the class's dict)."""
    import inspect

    return inspect.getattr_static(owner, attr, None)


_CODE_ATTRS = ("__code__", "__defaults__", "__kwdefaults__")


def _function_targets(label: str, fn: Any) -> list[tuple[str, Any, str]]:
    """A function's code and defaults (`f.__code__ = other.__code__` keeps the function's identity)."""
    inner = getattr(fn, "__func__", fn)  # classmethod / staticmethod
    return [(f"{label}.{a}", inner, a) for a in _CODE_ATTRS if hasattr(inner, a)]


def harness_targets(modules: Iterable[Any], instances: Iterable[tuple[str, Any]] = ()
                    ) -> list[tuple[str, Any, str]]:
    """What a timer guard watches of the harness itself, besides the clocks: every function and class of
    `modules` (the timing protocol, the result stream, the worker), every method of those classes and their
    code, every callable or socket an instance of `instances` (the backend, the stream client) holds, and
    the encoder and socket methods a frame goes through. A patch of any of them by contribution code (the
    stream client's `sample`, the backend's saved event reference) is named by `changed()`. In-process
    contribution code that also rewrites the guard (or its saved references) is not stopped by this: that
    is the limit of any check made in the process that hosts the contribution (docs/evidence-collection.md).
    """
    import json
    import socket
    import types

    out: list[tuple[str, Any, str]] = [("json.dumps", json, "dumps"),
                                       ("json.JSONEncoder.encode", json.JSONEncoder, "encode"),
                                       ("json.JSONEncoder.iterencode", json.JSONEncoder, "iterencode"),
                                       ("socket.socket.sendall", socket.socket, "sendall"),
                                       ("socket.socket.makefile", socket.socket, "makefile")]
    kinds = (types.FunctionType, classmethod, staticmethod, property)
    for mod in modules:
        name = getattr(mod, "__name__", "?")
        for attr, value in sorted(vars(mod).items()):
            if isinstance(value, types.FunctionType) and value.__module__ == mod.__name__:
                out.append((f"{name}.{attr}", mod, attr))
                out += _function_targets(f"{name}.{attr}", value)
            elif isinstance(value, type) and value.__module__ == mod.__name__:
                out.append((f"{name}.{attr}", mod, attr))
                for meth, fn in sorted(vars(value).items()):
                    if isinstance(fn, kinds):
                        out.append((f"{name}.{attr}.{meth}", value, meth))
                        if not isinstance(fn, property):
                            out += _function_targets(f"{name}.{attr}.{meth}", fn)
    for label, obj in instances:
        for attr, value in sorted(vars(obj).items()):
            if callable(value) or isinstance(value, socket.socket) or hasattr(value, "readline"):
                out.append((f"{label}.{attr}", obj, attr))
    return out


# -------------------------------------------------------------------------------------- tensor tree tools
def _torch() -> Any:
    import torch

    return torch


def tensors_of(tree: Any) -> list[Any]:
    """The tensors in a nested structure of tensors / lists / tuples / dicts, in a stable order."""
    torch = _torch()
    out: list[Any] = []

    def walk(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, Mapping):
            for k in sorted(x, key=str):
                walk(x[k])
        elif isinstance(x, list | tuple):
            for v in x:
                walk(v)

    walk(tree)
    return out


def clone_tree(tree: Any) -> Any:
    torch = _torch()
    if isinstance(tree, torch.Tensor):
        return tree.detach().clone()
    if isinstance(tree, Mapping):
        return {k: clone_tree(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(clone_tree(v) for v in tree)
    return tree


def _same_bits(a: Any, b: Any) -> bool:
    torch = _torch()
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        both_nan = torch.isnan(a) & torch.isnan(b)
        return bool(((a == b) | both_nan).all())
    return bool(torch.equal(a, b))


def trees_equal(a: Any, b: Any) -> bool:
    ta, tb = tensors_of(a), tensors_of(b)
    return len(ta) == len(tb) and all(_same_bits(x, y) for x, y in zip(ta, tb, strict=True))


def poison_tree(tree: Any) -> None:
    """Overwrite outputs with values a correct kernel never leaves behind (NaN; integer max for integers)."""
    torch = _torch()
    for t in tensors_of(tree):
        if t.is_floating_point() or t.is_complex():
            t.fill_(float("nan"))
        elif t.dtype != torch.bool:
            t.fill_(torch.iinfo(t.dtype).max)


@dataclass(frozen=True)
class Comparison:
    max_abs_error: float
    ok: bool
    reason: str | None = None


def compare(out: Any, ref: Any, atol: float, rtol: float) -> Comparison:
    """out vs ref, element-wise |out - ref| <= atol + rtol * |ref|; NaN only where ref has NaN."""
    torch = _torch()
    to, tr = tensors_of(out), tensors_of(ref)
    if not to:
        return Comparison(math.inf, False, "the variant returned no tensor")
    if len(to) != len(tr):
        return Comparison(math.inf, False, f"returned {len(to)} tensor(s), stock returns {len(tr)}")
    worst = 0.0
    for i, (o, r) in enumerate(zip(to, tr, strict=True)):
        if tuple(o.shape) != tuple(r.shape):
            why = f"output {i} has shape {tuple(o.shape)}, stock {tuple(r.shape)}"
            return Comparison(math.inf, False, why)
        od = o.detach().to(torch.float64) if not o.is_complex() else o.detach().to(torch.complex128)
        rd = r.detach().to(od.device, dtype=od.dtype)
        o_nan, r_nan = torch.isnan(od), torch.isnan(rd)
        if bool((o_nan & ~r_nan).any()):
            n = int((o_nan & ~r_nan).sum())
            return Comparison(math.inf, False, f"output {i} has {n} NaN element(s) where stock has none "
                                               "(unwritten or poisoned output)")
        diff = (od - rd).abs()
        diff = torch.where(o_nan & r_nan, torch.zeros_like(diff), diff)
        bound = atol + rtol * rd.abs()
        bound = torch.where(r_nan, torch.ones_like(bound), bound)
        err = float(diff.max()) if diff.numel() else 0.0
        worst = max(worst, err)
        if bool((diff > bound).any()):
            bad = int((diff > bound).sum())
            return Comparison(worst, False, f"output {i}: {bad} of {diff.numel()} elements outside "
                                            f"atol={atol} rtol={rtol} (max abs error {err:.3g})")
    return Comparison(worst, True)


# ------------------------------------------------------------------------------------------------ backends
@dataclass
class Timing:
    device_us: float
    wall_us: float | None


@dataclass
class Prepared:
    """A variant made ready to replay: the graph (CUDA) or the callable (CPU), and its output buffers."""

    name: str
    fn: Callable[[Any], Any]
    output: Any = None
    handle: Any = None
    violations: list[str] = field(default_factory=list)
    # Collective kernels in the captured graph by name; None where kernel names could not be read.
    collectives: dict[str, int] | None = None


class Backend(ABC):
    name: Literal["cuda", "cpu"]
    timer: str
    graph_replay: bool
    device_sync: str
    l2_flush_bytes: int
    persisting_l2_reset: bool
    notes: list[str]
    # Tensor parallel: set by `enable_distributed` in every rank of a torchrun launch.
    rank: int = 0
    world_size: int = 1
    _dist: Any = None
    _all_reduce: Any = None
    _token: Any = None

    def enable_distributed(self, dist: Any, rank: int, world_size: int, device: Any) -> None:
        """Run in lockstep with the other ranks of the initialised default process group `dist`.

        Keeps its own reference to `dist.all_reduce` (taken before contribution code is imported). From then
        on `rendezvous()` ends every `before_timed`, and `agree()` makes control-flow decisions collective.
        """
        self._dist = dist
        self._all_reduce = dist.all_reduce
        self.rank, self.world_size = int(rank), int(world_size)
        self._token = _torch().zeros(1, dtype=_torch().int32, device=device)
        self.notes = [*self.notes, f"rank {self.rank} of {self.world_size} (torchrun); a "
                      f"{self._rendezvous_kind()} rendezvous across ranks right before every timed replay"]

    def _rendezvous_kind(self) -> str:
        return "device-side (1-element all_reduce on the timing stream)"

    def rendezvous(self) -> None:
        """Every rank reaches this point before any of them starts the timed replay (no-op on one rank)."""
        if self.world_size > 1:
            self._token.zero_()
            self._all_reduce(self._token)

    def agree(self, ok: bool) -> bool:
        """True only if `ok` on every rank (a collective: every rank must call it, in the same order)."""
        if self.world_size <= 1:
            return ok
        flag = _torch().ones(1, dtype=_torch().int32, device=self._token.device) * int(bool(ok))
        self._all_reduce(flag, op=self._dist.ReduceOp.MIN)
        return bool(int(flag.item()))

    @abstractmethod
    def prepare(self, name: str, fn: Callable[[Any], Any], static_inputs: Any) -> Prepared:
        """Warm up and capture (CUDA) a variant reading `static_inputs`. Raises on failure."""

    @abstractmethod
    def replay_untimed(self, prepared: Prepared, static_inputs: Any) -> None: ...

    @abstractmethod
    def before_timed(self) -> list[str]:
        """Flush caches, reset persisting L2, synchronize; returns violations seen (a raised carve-out)."""

    @abstractmethod
    def timed(self, prepared: Prepared, static_inputs: Any) -> Timing: ...

    def kernel_count(self, prepared: Prepared) -> tuple[dict[str, int] | None, list[str]]:
        """(graph nodes by type, violations); (None, []) where the backend cannot count."""
        return None, []

    def final_checks(self) -> list[str]:
        return []

    def profile(self, prepared: Prepared) -> dict[str, float] | None:
        """Device time per kernel name (us) over one replay, or None where the backend cannot tell."""
        return None

    def release(self, prepared: Prepared) -> None:
        prepared.handle = None
        prepared.output = None

    def guard_targets(self) -> list[tuple[str, Any, str]]:
        return []


def _cpu_cache_bytes() -> int:
    """The last-level cache size from sysfs (0 when unknown)."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = os.listdir(base)
    except OSError:
        return 0
    for entry in entries:
        try:
            with open(os.path.join(base, entry, "size"), encoding="ascii") as fh:
                text = fh.read().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * mult)
    return best


class CpuBackend(Backend):
    """The protocol's bookkeeping on CPU: perf_counter timing, no graphs, a cache-sized write as the flush."""

    name: Literal["cuda", "cpu"] = "cpu"
    timer = "time.perf_counter_ns (saved reference)"
    graph_replay = False
    device_sync = "none (CPU; threads left running by a variant are a violation)"
    persisting_l2_reset = False

    def __init__(self, flush_bytes: int | None = None) -> None:
        if flush_bytes is None:
            flush_bytes = max(2 * _cpu_cache_bytes(), 32 << 20)
        self.l2_flush_bytes = max(int(flush_bytes), MIN_FLUSH_BYTES_CPU)
        self._flush = bytearray(self.l2_flush_bytes)
        self._flush_value = 0
        self._clock = _PERF_NS
        self.notes = ["CPU backend: for tests of the protocol's bookkeeping; not GPU evidence"]

    def prepare(self, name: str, fn: Callable[[Any], Any], static_inputs: Any) -> Prepared:
        devices = sorted({str(t.device) for t in tensors_of(static_inputs) if t.device.type != "cpu"})
        if devices:  # perf_counter around asynchronous device work would time only the launches
            raise CaseRejected(f"the CPU backend cannot time inputs on {', '.join(devices)}")
        prepared = Prepared(name=name, fn=fn)
        prepared.output = fn(static_inputs)  # a first call checks the variant runs at all
        return prepared

    def replay_untimed(self, prepared: Prepared, static_inputs: Any) -> None:
        prepared.output = prepared.fn(static_inputs)

    def before_timed(self) -> list[str]:
        self._flush_value = (self._flush_value + 1) & 0xFF
        self._flush[:] = bytes([self._flush_value]) * len(self._flush)
        self.rendezvous()
        return []

    def _rendezvous_kind(self) -> str:
        return "host-side (gloo all_reduce)"

    def timed(self, prepared: Prepared, static_inputs: Any) -> Timing:
        before = set(threading.enumerate())
        t0 = self._clock()
        prepared.output = prepared.fn(static_inputs)
        t1 = self._clock()
        left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if left:
            prepared.violations.append(
                f"variant {prepared.name!r} left {len(left)} thread(s) running after it returned "
                "(work moved off the timed path, the CPU analogue of a side stream)"
            )
        return Timing(device_us=(t1 - t0) / 1000.0, wall_us=None)


class CudaBackend(Backend):
    """CUDA graphs + CUDA events, L2 flush, persisting-L2 reset, kernel count from the captured graph."""

    name: Literal["cuda", "cpu"] = "cuda"
    timer = "cuda events (saved references) around CUDAGraph.replay"
    graph_replay = True
    device_sync = "torch.cuda.synchronize (cudaDeviceSynchronize: all streams) before reading events"

    def __init__(self, device: int = 0, flush_bytes: int | None = None, capture_warmup: int = 2) -> None:
        import torch

        from fasttrack.evidence.graph_count import CudaRuntime, CudaUnavailable, library_note

        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available")
        self._torch = torch
        self._device = torch.device("cuda", device)
        torch.cuda.set_device(self._device)
        # Our own references, taken before contribution code runs (guard_targets lists them too).
        self._event_cls: Any = torch.cuda.Event
        self._record = torch._C._CudaEventBase.record
        self._elapsed = torch._C._CudaEventBase.elapsed_time
        self._sync = torch._C._cuda_synchronize
        self._replay = torch._C._CUDAGraph.replay
        self._graph_cls = torch.cuda.CUDAGraph
        self._clock = _PERF_NS
        self._capture_warmup = capture_warmup
        props = torch.cuda.get_device_properties(self._device)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 0))
        self.l2_flush_bytes = int(flush_bytes) if flush_bytes else max(4 * self.l2_bytes, 256 << 20)
        if self.l2_bytes and self.l2_flush_bytes < 2 * self.l2_bytes:
            raise ValueError(f"flush buffer {self.l2_flush_bytes} B is under twice the L2 "
                             f"({self.l2_bytes} B)")
        self._flush = torch.empty(self.l2_flush_bytes, dtype=torch.uint8, device=self._device)
        self._flush_value = 0
        self.notes: list[str] = []
        try:
            self._rt: Any = CudaRuntime.load()
            self._rt.set_persisting_l2_limit(0)
            self._rt.reset_persisting_l2()
            self.persisting_l2_reset = True
            self.notes.append(f"CUDA runtime via ctypes: {library_note(self._rt.path)}")
        except (CudaUnavailable, RuntimeError) as exc:
            self._rt = None
            self.persisting_l2_reset = False
            self.notes.append(f"persisting-L2 reset and graph node count unavailable: {exc}")
        self._sync()

    def guard_targets(self) -> list[tuple[str, Any, str]]:
        torch = self._torch
        return [
            ("torch.cuda.Event", torch.cuda, "Event"),
            ("torch.cuda.Event.record", torch.cuda.Event, "record"),
            ("torch.cuda.Event.elapsed_time", torch.cuda.Event, "elapsed_time"),
            ("torch.cuda.Event.synchronize", torch.cuda.Event, "synchronize"),
            ("torch._C._CudaEventBase.record", torch._C._CudaEventBase, "record"),
            ("torch._C._CudaEventBase.elapsed_time", torch._C._CudaEventBase, "elapsed_time"),
            ("torch.cuda.synchronize", torch.cuda, "synchronize"),
            ("torch._C._cuda_synchronize", torch._C, "_cuda_synchronize"),
            ("torch.cuda.CUDAGraph.replay", torch.cuda.CUDAGraph, "replay"),
            ("torch._C._CUDAGraph.replay", torch._C._CUDAGraph, "replay"),
        ]

    def prepare(self, name: str, fn: Callable[[Any], Any], static_inputs: Any) -> Prepared:
        torch = self._torch
        side = torch.cuda.Stream(device=self._device)
        side.wait_stream(torch.cuda.current_stream(self._device))
        with torch.cuda.stream(side):  # JIT compilation, autotuning and allocator warm-up, before capture
            for _ in range(self._capture_warmup):
                fn(static_inputs)
        saved = torch.cuda.current_stream(self._device)
        saved.wait_stream(side)
        self._sync()
        graph = self._graph_cls(keep_graph=True)
        capture = torch.cuda.Stream(device=self._device)
        capture.wait_stream(saved)
        torch.cuda.set_stream(capture)
        try:  # torch.cuda.graph() would leave the capture stream current if capture_end raised
            graph.capture_begin()
            try:
                output = fn(static_inputs)
            except BaseException:
                with contextlib.suppress(Exception):
                    graph.capture_end()
                raise
            graph.capture_end()
        finally:
            torch.cuda.set_stream(saved)
        if hasattr(graph, "instantiate"):
            graph.instantiate()
        self._sync()
        return Prepared(name=name, fn=fn, output=output, handle=graph)

    def replay_untimed(self, prepared: Prepared, static_inputs: Any) -> None:
        self._replay(prepared.handle)
        self._sync()

    def before_timed(self) -> list[str]:
        violations: list[str] = []
        self._flush_value = (self._flush_value % 250) + 1
        self._flush.fill_(self._flush_value)  # writes every byte: evicts the L2
        self._sync()
        if self._rt is not None:
            limit = self._rt.persisting_l2_limit()
            if limit != 0:
                violations.append(f"the persisting-L2 carve-out was raised to {limit} bytes during the run")
                self._rt.set_persisting_l2_limit(0)
            self._rt.reset_persisting_l2()
        self._sync()
        # Tensor parallel: a 1-element all_reduce enqueued on the timing stream after the flush and the input
        # load and before the start event, so every rank's start event fires only once all ranks have
        # arrived (host skew between the ranks is not timed). The graphs hold collectives: lockstep matters.
        self.rendezvous()
        return violations

    def timed(self, prepared: Prepared, static_inputs: Any) -> Timing:
        start = self._event_cls(enable_timing=True)
        end = self._event_cls(enable_timing=True)
        stream = self._torch.cuda.current_stream(self._device)
        w0 = self._clock()
        self._record(start, stream)
        self._replay(prepared.handle)
        self._record(end, stream)
        self._sync()  # the whole device, every stream, before the events are read
        w1 = self._clock()
        ms = float(self._elapsed(start, end))
        return Timing(device_us=ms * 1000.0, wall_us=(w1 - w0) / 1000.0)

    def kernel_count(self, prepared: Prepared) -> tuple[dict[str, int] | None, list[str]]:
        if self._rt is not None:
            counted = self._rt.count(int(prepared.handle.raw_cuda_graph()))
            prepared.collectives = dict(counted.collective_names) if counted.names_known else None
            return counted.by_type, [f"variant {prepared.name!r}: {w}" for w in counted.policy_windows]
        return self._profiler_count(prepared), []

    def _profiler_count(self, prepared: Prepared) -> dict[str, int] | None:
        """Fallback: kernels launched by one replay, as torch.profiler sees them."""
        from torch.profiler import ProfilerActivity, profile

        self._sync()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            self._replay(prepared.handle)
            self._sync()
        kernels = [e for e in prof.events() if getattr(e, "device_type", None) is not None
                   and str(e.device_type).endswith("CUDA") and "memcpy" not in e.name.lower()
                   and "memset" not in e.name.lower()]
        return {"kernel": len(kernels)} if kernels else None

    def profile(self, prepared: Prepared) -> dict[str, float] | None:
        """One replay under torch.profiler (CUPTI): device time per kernel name, summed over launches. The
        L2 is flushed first, like a timed replay. Collectives are included under their own names."""
        from torch.profiler import ProfilerActivity, profile

        self.before_timed()
        try:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                self._replay(prepared.handle)
                self._sync()
        except Exception:  # a profiler that cannot run here leaves the figure unknown, never made up
            return None
        times: dict[str, float] = {}
        for e in prof.events():
            if not str(getattr(e, "device_type", "")).endswith("CUDA"):
                continue
            us = float(getattr(e, "device_time", None) or getattr(e, "cuda_time", 0.0) or 0.0)
            key = str(e.name)[:512]
            times[key] = round(times.get(key, 0.0) + us, 3)
        return times or None

    def final_checks(self) -> list[str]:
        if self._rt is None:
            return []
        limit = self._rt.persisting_l2_limit()
        return [f"the persisting-L2 carve-out is {limit} bytes after the run (expected 0)"] if limit else []

    def release(self, prepared: Prepared) -> None:
        graph = prepared.handle
        prepared.handle = None
        prepared.output = None
        if graph is not None:
            graph.reset()
        self._torch.cuda.empty_cache()


def make_backend(kind: Literal["cuda", "cpu"], flush_bytes: int | None = None, device: int = 0) -> Backend:
    """The backend for `kind`; `device` is the CUDA device (a tensor-parallel rank's LOCAL_RANK)."""
    if kind == "cuda":
        return CudaBackend(device=device, flush_bytes=flush_bytes)
    return CpuBackend(flush_bytes=flush_bytes)


# ---------------------------------------------------------------------------------------------- protocol
def check_case_shape(case: Any) -> tuple[dict[str, Callable[[Any], Any]], float, float, int]:
    """The case's variants, tolerance and layers, or CaseRejected naming what is wrong."""
    variants = getattr(case, "variants", None)
    if not isinstance(variants, Mapping) or not variants:
        raise CaseRejected("the case has no `variants` mapping")
    if STOCK not in variants:
        raise CaseRejected("the case has no 'stock' variant (the baseline every variant is checked against)")
    if len(variants) < 2 and getattr(case, "engine_only", False) is not True:
        raise CaseRejected("the case has only the stock variant: nothing to compare")
    for name, fn in variants.items():
        if not isinstance(name, str) or not callable(fn):
            raise CaseRejected(f"variant {name!r} is not a named callable")
    for method in ("make_inputs", "load_inputs", "bytes_moved"):
        if not callable(getattr(case, method, None)):
            raise CaseRejected(f"the case has no callable `{method}`")
    tol = getattr(case, "tolerance", None)
    try:
        atol, rtol = (float(tol[0]), float(tol[1]))  # type: ignore[index]
    except (TypeError, ValueError, IndexError):
        raise CaseRejected(f"tolerance must be (atol, rtol), got {tol!r}") from None
    if not (math.isfinite(atol) and math.isfinite(rtol) and atol >= 0 and rtol >= 0):
        raise CaseRejected(f"tolerance must be finite and >= 0, got {(atol, rtol)}")
    layers = getattr(case, "layers", 1)
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        raise CaseRejected(f"layers must be a positive integer, got {layers!r}")
    order = [STOCK, *sorted(n for n in variants if n != STOCK)]
    return {n: variants[n] for n in order}, atol, rtol, layers


def orders_for(names: list[str]) -> list[list[str]]:
    """Both orders: stock first, then stock last (ABBA when there is one candidate)."""
    return [list(names), list(reversed(names))]


def schedule(names: list[str], iterations: int) -> list[str]:
    """The interleaved sequence of timed replays: rounds alternate between the two orders."""
    orders = orders_for(names)
    seq: list[str] = []
    for r in range(iterations):
        seq.extend(orders[r % 2])
    return seq


class _Seeds:
    def __init__(self, base: int) -> None:
        self._next = base

    def __call__(self) -> int:
        self._next += 1
        return self._next


def _check_inputs_and_signal(case: Any, stock: Callable[[Any], Any], seeds: _Seeds) -> None:
    """Reject cases whose inputs ignore the seed or whose stock output ignores the inputs."""
    a, b = case.make_inputs(seeds()), case.make_inputs(seeds())
    if not tensors_of(a):
        raise CaseRejected("make_inputs returned no tensor")
    if trees_equal(a, b):
        raise CaseRejected("make_inputs returned identical inputs for two different seeds "
                           "(a fixed input lets a constant output pass)")
    out_a, out_b = stock(clone_tree(a)), stock(clone_tree(b))
    if not tensors_of(out_a):
        raise CaseRejected("stock returned no tensor")
    if trees_equal(out_a, out_b):
        raise CaseRejected("stock's output is the same for two different inputs: the case cannot tell a "
                           "correct kernel from a constant one")


def _load_fresh(case: Any, seeds: _Seeds) -> Any:
    fresh = case.make_inputs(seeds())
    pristine = clone_tree(fresh)
    case.load_inputs(fresh)
    if not trees_equal(case.static_inputs, pristine):
        raise CaseRejected("load_inputs did not copy the fresh inputs into static_inputs")
    return pristine


def run_case(
    case: Any,
    backend: Backend,
    settings: ProtocolSettings,
    point: Mapping[str, Any],
    guard: TimerGuard | None = None,
    progress: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] = lambda _m: None,
    recorder: Recorder | None = None,
) -> CaseResult:
    """Measure one BenchmarkCase at one envelope point. Never raises for a bad case: it is recorded.

    Tensor parallel (`backend.world_size > 1`): every rank runs this with the same settings, seeds and
    order; each decision that changes what is replayed next (a rejection, a variant that cannot be
    prepared, a variant stopped after failed checks) is agreed across ranks first (`backend.agree`), so
    the ranks replay their graphs, which hold collectives, in lockstep.
    """
    pt = dict(point)
    dist_info: dict[str, Any] = {"world_size": backend.world_size,
                                 "rank": backend.rank if backend.world_size > 1 else None}
    shape_error: str | None = None
    try:
        variants, atol, rtol, layers = check_case_shape(case)
    except CaseRejected as exc:
        shape_error = str(exc)
    if not backend.agree(shape_error is None):
        return CaseResult(point=pt, status="rejected", **dist_info,
                          reasons=[shape_error or "another rank rejected the case's shape"])
    names = list(variants)
    if recorder is not None:
        recorder.declare(names)
    facts = Protocol(
        backend=backend.name, timer="cuda-event" if backend.name == "cuda" else "perf_counter",
        timer_detail=backend.timer, graph_replay=backend.graph_replay,
        l2_flush_bytes=backend.l2_flush_bytes, persisting_l2_reset=backend.persisting_l2_reset,
        fresh_inputs=True, poisoned_outputs=True, pristine_input_check=True,
        streams_synchronized=backend.name == "cuda", device_sync=backend.device_sync,
        orders=orders_for(names), iterations=settings.iterations, warmup=settings.warmup,
        seed_base=settings.seed_base, notes=list(backend.notes)[:64],
    )
    origins = getattr(case, "origins", {}) or {}
    result = CaseResult(point=pt, status="ok", protocol=facts, layers=layers, **dist_info,
                        variants={n: Variant(origin=origins.get(n)) for n in names},
                        accuracy={n: Accuracy(atol=atol, rtol=rtol, ok=True, checked=0, failures=0)
                                  for n in names})
    seeds = _Seeds(settings.seed_base)
    stock = variants[STOCK]
    prepared: dict[str, Prepared] = {}
    reasons: list[str] = []
    try:
        def check_and_load() -> None:
            _check_inputs_and_signal(case, stock, seeds)
            _load_fresh(case, seeds)

        _agreed_step(backend, check_and_load)
        if callable(getattr(case, "oracle", None)):
            def oracle_step() -> None:
                _oracle_check(case, variants, seeds, atol, rtol, result, recorder)

            _agreed_step(backend, oracle_step)
            _load_fresh(case, seeds)
        for name in names:
            error: Exception | None = None
            try:
                prepared[name] = backend.prepare(name, variants[name], case.static_inputs)
            except Exception as exc:  # a variant that cannot be captured is not timed
                error = exc
            if backend.agree(error is None):
                continue
            if isinstance(error, CaseRejected):
                raise error
            if error is not None:
                msg = f"variant {name!r} could not be prepared: {type(error).__name__}: {error}"
            else:  # prepared here, not on another rank: drop it here too (the ranks replay the same graphs)
                backend.release(prepared.pop(name))
                msg = f"variant {name!r} could not be prepared on another rank (see that rank's result)"
            result.variants[name].error = msg[:8192]
            result.accuracy[name] = Accuracy(atol=atol, rtol=rtol, ok=False, checked=0, failures=0,
                                             reason=msg[:4096])
            reasons.append(msg)
            if name == STOCK:
                raise CaseRejected(msg) from None
        live = [n for n in names if n in prepared]

        def warm_up() -> None:
            for name in live:  # warm-up replays with fresh inputs, untimed
                for _ in range(settings.warmup):
                    _load_fresh(case, seeds)
                    backend.replay_untimed(prepared[name], case.static_inputs)

        _agreed_step(backend, warm_up)
        sequence = [n for n in schedule(names, settings.iterations) if n in prepared]
        stopped: set[str] = set()
        for step, name in enumerate(sequence):
            if name in stopped:
                continue
            prep = prepared[name]
            def one_step(prep: Prepared = prep) -> None:
                acc = result.accuracy[prep.name]
                before = acc.failures
                try:
                    _timed_step(case, backend, prep, stock, seeds, atol, rtol, result, reasons, recorder)
                finally:
                    if recorder is not None:
                        failed = acc.failures != before
                        recorder.check(prep.name, not failed, acc.reason if failed else None,
                                       acc.max_abs_error)

            _agreed_step(backend, one_step)
            failures = result.accuracy[name].failures or 0
            if not backend.agree(failures < settings.max_failures_per_variant):
                stopped.add(name)
                log(f"{name}: stopped after {failures} failed checks"
                    + ("" if failures >= settings.max_failures_per_variant else " on another rank"))
            if progress is not None:
                progress(step + 1, len(sequence))
        for name, prep in prepared.items():
            nodes, problems = backend.kernel_count(prep)
            reasons.extend(problems)
            vr = result.variants[name]
            if nodes is not None:
                vr.graph_nodes = nodes
                vr.kernels_per_step = per_layer(nodes.get("kernel", 0), layers)
                if prep.collectives is not None or nodes.get("collective"):
                    vr.collectives_per_step = per_layer(nodes.get("collective", 0), layers)
                    vr.collective_kernels = dict(list((prep.collectives or {}).items())[:4096])
            vr.bytes_moved = _bytes_moved(case, name)
            reasons.extend(prep.violations)
        for name in live:  # every rank profiles the same replays in the same order (they hold collectives)
            if name in prepared and name not in stopped:
                result.variants[name].kernel_times_us = _kernel_times(backend.profile(prepared[name]))
        reasons.extend(backend.final_checks())
    except CaseRejected as exc:
        reasons.append(str(exc))
    except Exception as exc:  # the contribution's code raised: recorded, never a crash of collect
        reasons.append(f"the case raised {type(exc).__name__}: {exc}")
    finally:
        for prep in prepared.values():
            try:
                backend.release(prep)
            except Exception as exc:
                log(f"release of {prep.name} failed: {exc}")
    if guard is not None:
        for label in guard.changed():
            reasons.append(f"{label} was replaced while contribution code ran (timer monkeypatching)")
    reasons.extend(f"variant {n!r}: {a.reason}" for n, a in result.accuracy.items() if not a.ok and a.reason
                   and f"variant {n!r}: {a.reason}" not in reasons and a.reason not in reasons)
    result.reasons = _dedupe(reasons)
    if result.reasons:
        result.status = "rejected"
    return result


def _oracle_check(case: Any, variants: Mapping[str, Callable[[Any], Any]], seeds: _Seeds, atol: float,
                  rtol: float, result: CaseResult, recorder: Recorder | None = None) -> None:
    """Every variant (stock included) on one fresh input, eagerly, against the baseline's fp32 oracle on
    the same input, under the policy's tolerance. Run by the harness at every point it measures. Each
    outcome goes to the recorder (the collector) before the next variant runs: a record rewritten later in
    this process's memory no longer matches it."""
    pristine = case.make_inputs(seeds())
    ref = case.oracle(clone_tree(pristine))
    for name, fn in variants.items():
        try:
            out = fn(clone_tree(pristine))
        except Exception as exc:
            check = OracleCheck(atol=atol, rtol=rtol, ok=False,
                                reason=f"raised {type(exc).__name__}: {exc}"[:2000])
            out = None
        else:
            cmp = compare(out, ref, atol, rtol)
            err = cmp.max_abs_error if math.isfinite(cmp.max_abs_error) else None
            check = OracleCheck(max_abs_error=err, atol=atol, rtol=rtol, ok=cmp.ok,
                                reason=None if cmp.ok else (cmp.reason or "mismatch")[:2000])
        if recorder is not None:
            recorder.oracle(name, check.ok, check.max_abs_error, check.atol, check.rtol, check.reason)
        result.oracle[name] = check
        if out is not None:
            poison_tree(out)


def _agreed_step(backend: Backend, step: Callable[[], None]) -> None:
    """Run `step`; on several ranks, all of them learn whether it failed on any (and all stop together)."""
    error: Exception | None = None
    try:
        step()
    except Exception as exc:
        error = exc
    if not backend.agree(error is None):
        if error is not None:
            raise error
        raise CaseRejected("another rank failed here (its own result says why); this rank stopped with it")


def _lockstep_reference(backend: Backend, stock: Callable[[Any], Any], pristine: Any) -> None:
    """On several ranks, every rank runs stock's eager reference at every step (it may hold collectives)."""
    if backend.world_size > 1:
        with contextlib.suppress(Exception):
            stock(clone_tree(pristine))


def _dedupe(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def _bytes_moved(case: Any, name: str) -> float | None:
    try:
        value = float(case.bytes_moved(name))
    except Exception:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _kernel_times(times: dict[str, float] | None) -> dict[str, float] | None:
    """A profile in the schema's bounds: names cut at 512 characters (times of names cut alike are added),
    at most 4096 names."""
    if times is None:
        return None
    out: dict[str, float] = {}
    for name, us in times.items():
        key = str(name)[:512]
        if key in out or len(out) < 4096:
            out[key] = out.get(key, 0.0) + max(float(us), 0.0)
    return out


def _fail(acc: Accuracy, reason: str, err: float | None = None) -> None:
    acc.ok = False
    acc.failures = (acc.failures or 0) + 1
    if acc.reason is None:
        acc.reason = reason[:4096]
    if err is not None and math.isfinite(err):
        acc.max_abs_error = max(acc.max_abs_error, err)


def _timed_step(case: Any, backend: Backend, prep: Prepared, stock: Callable[[Any], Any], seeds: _Seeds,
                atol: float, rtol: float, result: CaseResult, reasons: list[str],
                recorder: Recorder | None = None) -> None:
    acc = result.accuracy[prep.name]
    vr = result.variants[prep.name]
    poison_tree(prep.output)  # before loading: an output aliasing the inputs is overwritten by the load
    pristine = _load_fresh(case, seeds)
    reasons.extend(backend.before_timed())
    try:
        t = backend.timed(prep, case.static_inputs)
    except Exception as exc:
        _fail(acc, f"raised {type(exc).__name__} during a timed replay: {exc}")
        _lockstep_reference(backend, stock, pristine)
        return
    device_us, wall_us = round(t.device_us, 4), None if t.wall_us is None else round(t.wall_us, 4)
    if device_us > 0:
        if recorder is not None:  # to the collector now, before any other contribution code runs
            recorder.sample(prep.name, device_us, wall_us)
        vr.samples_us.append(device_us)
        if wall_us is not None:
            vr.put_samples("samples_wall_us", [*vr.samples().get("samples_wall_us", []), wall_us])
    else:  # below the timer's resolution: no number is invented, the replay is not counted as a sample
        reasons.append(f"variant {prep.name!r}: sample(s) of zero length (below the timer's resolution) "
                       "were dropped")
    acc.checked += 1
    odd = [type(x).__name__ for x in tensors_of(prep.output) if type(x) is not _torch().Tensor]
    if odd:
        kinds = ", ".join(sorted(set(odd)))
        _fail(acc, f"returned a tensor subclass ({kinds}): outputs must be plain tensors, "
                   "a lazy subclass can defer its work past the timer")
        _lockstep_reference(backend, stock, pristine)
        return
    out = clone_tree(prep.output)
    if not trees_equal(case.static_inputs, pristine):
        _fail(acc, "mutated its inputs during the timed replay "
                   "(the reference is computed on a pristine copy)")
    ref = stock(clone_tree(pristine))
    cmp = compare(out, ref, atol, rtol)
    if cmp.ok:
        acc.max_abs_error = max(acc.max_abs_error, cmp.max_abs_error)
    else:
        _fail(acc, f"timed output does not match stock on the same inputs: {cmp.reason}", cmp.max_abs_error)
    poison_tree(ref)  # freed reference memory holds nothing a later variant could reuse
    del ref, out
