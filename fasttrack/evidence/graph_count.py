"""Kernels per step, read from a captured CUDA graph, and the CUDA runtime calls the timing protocol needs.

The CUDA runtime is reached through ctypes on the ``libcudart`` that torch already loaded in this process
(found in ``/proc/self/maps``), so the calls act on the same primary context torch uses. Nothing here imports
torch; nothing here runs at import time. On a machine without CUDA, `CudaRuntime.load()` raises
`CudaUnavailable` and callers record "not measured" instead of a number.

Node counting walks the graph (``cudaGraphGetNodes``), classifies nodes (``cudaGraphNodeGetType``) and
descends into child-graph nodes. The walk itself is a pure function over three callables, so it is
unit-tested on CPU.

Kernel nodes are split into compute kernels (``kernel``) and collectives (``collective``: NCCL kernels, torch
symmetric-memory kernels, vLLM's custom all-reduce), by the kernel's name, read through the driver
(``cuGraphKernelNodeGetParams`` + ``cuFuncGetName`` / ``cuKernelGetName``, CUDA 12.3+). Where a name cannot
be read the kernel counts as compute (and the variant's collective count is unknown, never 0).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import re
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


# Collective kernels, by the function's own name (the last component of its qualified name):
#   NCCL: ncclDevKernel_AllReduce_Sum_bf16_RING_LL, ncclKernel_..., ncclDevKernel_Generic, ...
#   torch symmetric memory (c10d/symm_mem, CUDASymmetricMemory.cu and CUDASymmetricMemoryOps.cu, torch 2.x):
#     barrier_kernel, put_signal_kernel, wait_signal_kernel, one_shot_all_reduce_kernel,
#     two_shot_all_reduce_kernel, multimem_all_reduce_kernel, multimem_one_shot_reduce_kernel,
#     multimem_all_gather_kernel, ...
#   vLLM custom all-reduce: cross_device_reduce_1stage / cross_device_reduce_2stage.
# A kernel in a `symmetric_memory` / `symm_mem` namespace counts as a collective too.
COLLECTIVE_NAME = re.compile(
    r"^(nccl(Dev)?Kernel\w*"
    r"|(barrier|put_signal|wait_signal|put|get|signal)_kernel"
    r"|(multimem|one_shot|two_shot)_\w*kernel\w*"
    r"|\w*symm_mem\w*"
    r"|cross_device_reduce_\w+)$"
)
COLLECTIVE_NAMESPACES = frozenset({"symmetric_memory", "symm_mem"})


def _parse_source_name(name: str) -> tuple[list[str], str]:
    """A plain or demangled name (``void ns::f<int>(float*)``): (enclosing scopes, function name)."""
    depth, kept = 0, []
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            kept.append(ch)
    text = "".join(kept).split("(", 1)[0].strip()
    text = text.split()[-1] if text.split() else text
    parts = [p for p in text.split("::") if p]
    return (parts[:-1], parts[-1]) if parts else ([], name)


def kernel_identifier(name: str) -> tuple[list[str], str]:
    """(enclosing namespaces / classes, function name) of a kernel symbol: Itanium-mangled (``_Z...``, what
    cuFuncGetName returns for CUDA C++ kernels), demangled, or plain (Triton kernels)."""
    if not name.startswith("_Z"):
        return _parse_source_name(name)
    i, parts = 2, []

    def ident(at: int) -> tuple[str, int] | None:
        j = at
        while j < len(name) and name[j].isdigit():
            j += 1
        if j == at:
            return None
        n = int(name[at:j])
        if n <= 0 or j + n > len(name):
            return None
        return name[j:j + n], j + n

    if name[i:i + 1] == "L":
        i += 1
    if name[i:i + 1] == "N":
        i += 1
        while i < len(name) and name[i] in "rVKRO":
            i += 1
        while i < len(name):
            if name.startswith("St", i):
                parts.append("std")
                i += 2
            elif name[i] == "L":
                i += 1
            elif name[i].isdigit():
                got = ident(i)
                if got is None:
                    break
                parts.append(got[0])
                i = got[1]
            else:
                break
    else:
        got = ident(i)
        if got is not None:
            parts.append(got[0])
    if not parts:
        return [], name
    return parts[:-1], parts[-1]


def is_collective(name: str) -> bool:
    """Whether a kernel (by its symbol name) is a collective rather than compute."""
    scopes, base = kernel_identifier(name)
    return bool(COLLECTIVE_NAME.match(base)) or any(s in COLLECTIVE_NAMESPACES for s in scopes)


@dataclass(frozen=True)
class GraphCount:
    """Nodes of one captured call, by type; child graphs are flattened into their parents' counts.

    Kernel nodes are ``kernel`` (compute) or ``collective`` (see `is_collective`) when their names can be
    read; `collective_names` counts the collectives by function name; `unnamed` counts kernel nodes whose
    name could not be read (they count as compute).
    """

    by_type: dict[str, int]
    policy_windows: tuple[str, ...] = field(default=())  # kernel nodes carrying a persisting access window
    collective_names: dict[str, int] = field(default_factory=dict)
    unnamed: int = 0

    @property
    def kernels(self) -> int:
        return self.by_type.get("kernel", 0)

    @property
    def collectives(self) -> int:
        return self.by_type.get("collective", 0)

    @property
    def names_known(self) -> bool:
        """Every kernel node's name was read, so the collective count is exact."""
        return self.unnamed == 0


def count_nodes(
    root: int,
    get_nodes: Callable[[int], list[int]],
    get_type: Callable[[int], int],
    get_child: Callable[[int], int],
    inspect_kernel: Callable[[int], str | None] | None = None,
    kernel_name: Callable[[int], str | None] | None = None,
) -> GraphCount:
    """Count the nodes of graph `root` by type, descending into child graphs (up to MAX_DEPTH levels).

    `inspect_kernel(node)` may return a description of something wrong with a kernel node (a persisting-L2
    access-policy window); those descriptions are collected in `policy_windows`. `kernel_name(node)` gives
    a kernel node's symbol name (None when it cannot be read): collectives are then counted apart.
    """
    counts: Counter[str] = Counter()
    flagged: list[str] = []
    collectives: Counter[str] = Counter()
    unnamed = 0

    def walk(graph: int, depth: int) -> None:
        nonlocal unnamed
        if depth > MAX_DEPTH:
            raise CudaCallError(f"child graphs nested deeper than {MAX_DEPTH} levels")
        for node in get_nodes(graph):
            kind = get_type(node)
            if kind == CHILD_GRAPH:
                counts["graph"] += 1
                walk(get_child(node), depth + 1)
                continue
            label = NODE_TYPES.get(kind, f"type_{kind}")
            if kind == KERNEL:
                if inspect_kernel is not None:
                    problem = inspect_kernel(node)
                    if problem:
                        flagged.append(problem)
                name = kernel_name(node) if kernel_name is not None else None
                if name is None:
                    unnamed += 1
                elif is_collective(name):
                    label = "collective"
                    collectives[kernel_identifier(name)[1]] += 1
            counts[label] += 1

    walk(root, 0)
    return GraphCount(by_type=dict(sorted(counts.items())), policy_windows=tuple(flagged),
                      collective_names=dict(sorted(collectives.items())), unnamed=unnamed)


class _KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (driver API), padded: only `func` and `kern` are read."""

    _fields_ = [
        ("func", ctypes.c_void_p),
        ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("kernelParams", ctypes.c_void_p),
        ("extra", ctypes.c_void_p),
        ("kern", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("_reserved", ctypes.c_char * 128),
    ]


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

    # -- kernel names (driver API) --------------------------------------------------------------------
    _driver_lib: ctypes.CDLL | None = None
    _driver_tried = False

    def _driver(self) -> ctypes.CDLL | None:
        """libcuda (already loaded by the runtime in this process), when it can name kernels."""
        if not self._driver_tried:
            self._driver_tried = True
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError:
                return None
            if hasattr(lib, "cuFuncGetName") and (hasattr(lib, "cuGraphKernelNodeGetParams_v2")
                                                  or hasattr(lib, "cuGraphKernelNodeGetParams")):
                self._driver_lib = lib
        return self._driver_lib

    def kernel_name(self, node: int) -> str | None:
        """A kernel node's symbol name (mangled for CUDA C++), or None when it cannot be read."""
        drv = self._driver()
        if drv is None:
            return None
        params = _KernelNodeParams()
        get = getattr(drv, "cuGraphKernelNodeGetParams_v2", None) or drv.cuGraphKernelNodeGetParams
        if get(ctypes.c_void_p(node), ctypes.byref(params)) != 0:
            return None
        name = ctypes.c_char_p()
        if params.func:
            code = drv.cuFuncGetName(ctypes.byref(name), ctypes.c_void_p(params.func))
        elif params.kern and hasattr(drv, "cuKernelGetName"):
            code = drv.cuKernelGetName(ctypes.byref(name), ctypes.c_void_p(params.kern))
        else:
            return None
        if code != 0 or not name.value:
            return None
        return name.value.decode("utf-8", "replace")

    def count(self, graph: int) -> GraphCount:
        return count_nodes(graph, self.graph_nodes, self.node_type, self.child_graph, self.persisting_window,
                           self.kernel_name)

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
