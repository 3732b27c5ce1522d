"""Kernels per step, read from a captured CUDA graph, and the CUDA runtime calls the timing protocol needs.

The CUDA runtime is reached through ctypes on the ``libcudart`` that torch already loaded in this process
(found in ``/proc/self/maps``), so the calls act on the same primary context torch uses. Nothing here imports
torch; nothing here runs at import time. On a machine without CUDA, `CudaRuntime.load()` raises
`CudaUnavailable` and callers record "not measured" instead of a number.

Node counting walks the graph (``cudaGraphGetNodes``), classifies nodes (``cudaGraphNodeGetType``) and
descends into child-graph nodes. The walk itself is a pure function over three callables, so it is
unit-tested on CPU.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

# enum cudaGraphNodeType (CUDA 12/13 runtime headers)
NODE_TYPES: dict[int, str] = {
    0x00: "kernel",
    0x01: "memcpy",
    0x02: "memset",
    0x03: "host",
    0x04: "graph",
    0x05: "empty",
    0x06: "wait_event",
    0x07: "event_record",
    0x08: "ext_semaphore_signal",
    0x09: "ext_semaphore_wait",
    0x0A: "mem_alloc",
    0x0B: "mem_free",
    0x0C: "batch_memop",
    0x0D: "conditional",
}
CHILD_GRAPH = 0x04
KERNEL = 0x00
CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
CUDA_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1
CUDA_ACCESS_PROPERTY_PERSISTING = 2
CUDA_DEV_ATTR_L2_CACHE_SIZE = 38
CUDA_DEV_ATTR_PERSISTING_L2_CACHE_MAX_SIZE = 108
MAX_DEPTH = 8


class CudaUnavailable(RuntimeError):
    """No usable CUDA runtime in this process."""


class CudaCallError(RuntimeError):
    """A CUDA runtime call returned an error code."""


@dataclass(frozen=True)
class GraphCount:
    """Nodes of one captured call, by type; child graphs are flattened into their parents' counts."""

    by_type: dict[str, int]
    policy_windows: tuple[str, ...] = field(default=())  # kernel nodes carrying a persisting access window

    @property
    def kernels(self) -> int:
        return self.by_type.get("kernel", 0)


def count_nodes(
    root: int,
    get_nodes: Callable[[int], list[int]],
    get_type: Callable[[int], int],
    get_child: Callable[[int], int],
    inspect_kernel: Callable[[int], str | None] | None = None,
) -> GraphCount:
    """Count the nodes of graph `root` by type, descending into child graphs (up to MAX_DEPTH levels).

    `inspect_kernel(node)` may return a description of something wrong with a kernel node (a persisting-L2
    access-policy window); those descriptions are collected in `policy_windows`.
    """
    counts: Counter[str] = Counter()
    flagged: list[str] = []

    def walk(graph: int, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise CudaCallError(f"child graphs nested deeper than {MAX_DEPTH} levels")
        for node in get_nodes(graph):
            kind = get_type(node)
            if kind == CHILD_GRAPH:
                counts["graph"] += 1
                walk(get_child(node), depth + 1)
                continue
            counts[NODE_TYPES.get(kind, f"type_{kind}")] += 1
            if kind == KERNEL and inspect_kernel is not None:
                problem = inspect_kernel(node)
                if problem:
                    flagged.append(problem)

    walk(root, 0)
    return GraphCount(by_type=dict(sorted(counts.items())), policy_windows=tuple(flagged))


class _AccessPolicyWindow(ctypes.Structure):
    _fields_ = [
        ("base_ptr", ctypes.c_void_p),
        ("num_bytes", ctypes.c_size_t),
        ("hitRatio", ctypes.c_float),
        ("hitProp", ctypes.c_int),
        ("missProp", ctypes.c_int),
    ]


def _loaded_cudart_paths(maps: Iterable[str]) -> list[str]:
    out: list[str] = []
    for line in maps:
        parts = line.split()
        if parts and "libcudart.so" in parts[-1] and parts[-1] not in out:
            out.append(parts[-1])
    return out


def _candidate_libraries() -> list[str]:
    found: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            found += _loaded_cudart_paths(fh)
    except OSError:
        pass
    for pattern in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        found.append(pattern)
    lib = ctypes.util.find_library("cudart")
    if lib:
        found.append(lib)
    for root in ("/usr/local/cuda/lib64", os.environ.get("CUDA_HOME", "") + "/lib64"):
        found += sorted(glob.glob(os.path.join(root, "libcudart.so*")))
    return found


class CudaRuntime:
    """The few CUDA runtime entry points the protocol uses, through ctypes."""

    def __init__(self, lib: ctypes.CDLL, path: str) -> None:
        self._lib = lib
        self.path = path
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        lib.cudaGetErrorString.argtypes = [ctypes.c_int]

    @classmethod
    def load(cls) -> CudaRuntime:
        errors: list[str] = []
        for candidate in _candidate_libraries():
            try:
                lib = ctypes.CDLL(candidate)
            except OSError as exc:
                errors.append(f"{candidate}: {exc}")
                continue
            if hasattr(lib, "cudaGraphGetNodes"):
                return cls(lib, candidate)
        raise CudaUnavailable("no libcudart could be loaded" + (f" ({errors[0]})" if errors else ""))

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            msg = self._lib.cudaGetErrorString(code)
            text = msg.decode("utf-8", "replace") if msg else "unknown error"
            raise CudaCallError(f"{what} failed: CUDA error {code} ({text})")

    # -- graphs ------------------------------------------------------------------------------------------
    def graph_nodes(self, graph: int) -> list[int]:
        n = ctypes.c_size_t(0)
        self._check(self._lib.cudaGraphGetNodes(ctypes.c_void_p(graph), None, ctypes.byref(n)),
                    "cudaGraphGetNodes")
        if n.value == 0:
            return []
        arr = (ctypes.c_void_p * n.value)()
        self._check(self._lib.cudaGraphGetNodes(ctypes.c_void_p(graph), arr, ctypes.byref(n)),
                    "cudaGraphGetNodes")
        return [int(p or 0) for p in arr[: n.value]]

    def node_type(self, node: int) -> int:
        out = ctypes.c_int(-1)
        self._check(self._lib.cudaGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(out)),
                    "cudaGraphNodeGetType")
        return out.value

    def child_graph(self, node: int) -> int:
        out = ctypes.c_void_p(0)
        self._check(self._lib.cudaGraphChildGraphNodeGetGraph(ctypes.c_void_p(node), ctypes.byref(out)),
                    "cudaGraphChildGraphNodeGetGraph")
        return int(out.value or 0)

    def persisting_window(self, node: int) -> str | None:
        """Describe a persisting-L2 access-policy window set on a kernel node, or None."""
        if not hasattr(self._lib, "cudaGraphKernelNodeGetAttribute"):
            return None
        buf = ctypes.create_string_buffer(128)  # cudaLaunchAttributeValue is a 64-byte union
        code = self._lib.cudaGraphKernelNodeGetAttribute(
            ctypes.c_void_p(node), ctypes.c_int(CUDA_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW), buf
        )
        if code != 0:
            return None
        win = _AccessPolicyWindow.from_buffer(buf)
        if win.num_bytes and win.hitRatio > 0 and win.hitProp == CUDA_ACCESS_PROPERTY_PERSISTING:
            return (f"kernel node with a persisting access-policy window of {win.num_bytes} bytes "
                    f"(hitRatio {win.hitRatio:.2f})")
        return None

    def count(self, graph: int) -> GraphCount:
        return count_nodes(graph, self.graph_nodes, self.node_type, self.child_graph, self.persisting_window)

    # -- persisting L2 -----------------------------------------------------------------------------------
    def persisting_l2_limit(self) -> int:
        out = ctypes.c_size_t(0)
        limit = ctypes.c_int(CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE)
        self._check(self._lib.cudaDeviceGetLimit(ctypes.byref(out), limit),
                    "cudaDeviceGetLimit(cudaLimitPersistingL2CacheSize)")
        return int(out.value)

    def set_persisting_l2_limit(self, value: int) -> None:
        limit = ctypes.c_int(CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE)
        self._check(self._lib.cudaDeviceSetLimit(limit, ctypes.c_size_t(value)),
                    "cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize)")

    def reset_persisting_l2(self) -> None:
        self._check(self._lib.cudaCtxResetPersistingL2Cache(), "cudaCtxResetPersistingL2Cache")

    def device_attribute(self, attr: int, device: int = 0) -> int:
        out = ctypes.c_int(0)
        code = self._lib.cudaDeviceGetAttribute(ctypes.byref(out), ctypes.c_int(attr), ctypes.c_int(device))
        self._check(code, "cudaDeviceGetAttribute")
        return int(out.value)


def library_note(path: str) -> str:
    """A short name for the runtime library used, for the protocol record."""
    return Path(path).name
