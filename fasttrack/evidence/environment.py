"""What machine the evidence came from: GPUs, driver, CUDA, torch, triton, Python, clocks (read-only), links.

Every probe is read-only (``nvidia-smi --query-gpu``, ``nvidia-smi topo -m``, ``nvidia-smi nvlink --status``,
``torch.cuda.can_device_access_peer``; clocks are read, never set) and
tolerant: a missing tool or library leaves its field None with a note in ``extra``, never an exception. On a
machine without CUDA the environment names the CPU backend (``gpu_name = "cpu"``, compute capability
``0.0``): such a bundle can only ever support points whose hardware is ``cpu``.
"""

from __future__ import annotations

import platform
import shutil
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

CPU_NAME = "cpu"
CPU_CAPABILITY = "0.0"
SMI_FIELDS = ("name", "driver_version", "compute_cap", "clocks.sm", "clocks.mem", "clocks.max.sm",
              "clocks.max.mem", "memory.total", "power.limit", "persistence_mode")
SMI_TIMEOUT_S = 20
NVLINK_STATUS_MAX_CHARS = 8000


@dataclass
class Hardware:
    """The hardware present, as the collector matches it against the manifest's envelope."""

    name: str
    compute_capability: str
    count: int
    backend: str  # "cuda" | "cpu"

    def matches(self, name: str, compute_capability: str) -> bool:
        return (name.strip().lower() == self.name.strip().lower()
                and compute_capability.strip() == self.compute_capability)


@dataclass
class EnvironmentInfo:
    gpu_name: str
    gpu_count: int
    compute_capability: str
    python: str
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    clocks: dict[str, str | int | float | bool | None] = field(default_factory=dict)
    interconnect: str | None = None
    l2_bytes: int | None = None
    copy_bandwidth_bytes_per_s: float | None = None
    read_bandwidth_bytes_per_s: float | None = None
    extra: dict[str, str | int | float | bool | None] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def detect_hardware() -> Hardware:
    """The first CUDA device's name and capability (all devices must be the same kind), or the CPU."""
    try:
        import torch
    except ImportError:
        return Hardware(CPU_NAME, CPU_CAPABILITY, 0, "cpu")
    if not torch.cuda.is_available():
        return Hardware(CPU_NAME, CPU_CAPABILITY, 0, "cpu")
    count = torch.cuda.device_count()
    name = torch.cuda.get_device_name(0)
    major, minor = torch.cuda.get_device_capability(0)
    return Hardware(name, f"{major}.{minor}", count, "cuda")


def _run(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def parse_smi_query(text: str) -> list[dict[str, str]]:
    """Rows of `nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits`."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(SMI_FIELDS):
            continue
        rows.append(dict(zip(SMI_FIELDS, values, strict=True)))
    return rows


def _number(text: str | None) -> int | float | str | None:
    if text is None or text in ("", "[N/A]", "N/A", "[Not Supported]"):
        return None
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() else value


def _read_kernel() -> Any:
    """A Triton kernel that only streams its input (one partial sum per program): the read roofline."""
    import triton
    import triton.language as tl

    # No annotations naming module globals (`Any`): @triton.jit resolves them and refuses the kernel.
    @triton.jit  # type: ignore[untyped-decorator]
    def stream_read(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):  # type: ignore[no-untyped-def]
        pid = tl.program_id(0)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        base = pid.to(tl.int64) * BLOCK * ITERS
        for i in range(ITERS):
            offs = base + i * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
        tl.store(out_ptr + pid, tl.sum(acc, axis=0))

    return stream_read


def measure_read_bandwidth(nbytes: int = 4 << 30, repeats: int = 10) -> tuple[float | None, str]:
    """Bytes read per second by a kernel that only reads (median of `repeats`), and how it was measured:
    a Triton streaming kernel where Triton runs, else torch.sum (which reads a little slower)."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "no CUDA device"
    n = nbytes // 2
    x = torch.ones(n, dtype=torch.bfloat16, device="cuda")
    block, iters = 4096, 16
    grid = (n + block * iters - 1) // (block * iters)
    out = torch.empty(grid, dtype=torch.float32, device="cuda")
    how = "triton streaming read (bf16, one partial sum per program)"
    try:
        kernel = _read_kernel()

        def run() -> None:
            kernel[(grid,)](x, out, n, BLOCK=block, ITERS=iters, num_warps=8)

        run()
    except Exception as exc:  # no Triton here: torch's reduction reads the same bytes
        how = f"torch.sum (triton unavailable: {type(exc).__name__})"

        def run() -> None:
            torch.sum(x, dtype=torch.float32)

        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        event: Any = torch.cuda.Event
        start, end = event(enable_timing=True), event(enable_timing=True)
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    times.sort()
    median = times[len(times) // 2]
    return (2.0 * n / median if median > 0 else None), how


def measure_copy_bandwidth(nbytes: int = 1 << 30, repeats: int = 10) -> float | None:
    """Device-to-device copy bandwidth (bytes read + written per second), median of `repeats` copies."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    src.random_(0, 255)
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        event: Any = torch.cuda.Event
        start, end = event(enable_timing=True), event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    del src, dst
    torch.cuda.empty_cache()
    times.sort()
    median = times[len(times) // 2]
    return 2.0 * nbytes / median if median > 0 else None


def _truncate(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f"\n... (truncated at {limit} of {len(text)} chars)"


def peer_access(count: int, can_access: Callable[[int, int], bool] | None) -> str | None:
    """`torch.cuda.can_device_access_peer` over every ordered pair, as text ("0->1 yes, 1->0 yes")."""
    if can_access is None or count < 2:
        return None
    pairs = []
    for a in range(count):
        for b in range(count):
            if a == b:
                continue
            try:
                ok = "yes" if can_access(a, b) else "no"
            except Exception as exc:  # a driver refusing the query: recorded, not raised
                ok = f"unknown ({type(exc).__name__})"
            pairs.append(f"{a}->{b} {ok}")
    return ", ".join(pairs)


def capture_links(count: int, run: Callable[[list[str]], str | None] = _run,
                  can_access: Callable[[int, int], bool] | None = None) -> tuple[str | None, dict[str, Any]]:
    """How several GPUs are linked: (interconnect text, extra entries). Read-only and tolerant: a missing
    `nvidia-smi` or a refused query is recorded as unavailable, never raised.

    interconnect: `nvidia-smi topo -m`; without it, torch's peer-access matrix (so a tp > 1 bundle still says
    whether the GPUs reach each other directly). extra: `nvlink_status` (`nvidia-smi nvlink --status`,
    truncated), `peer_access` (the matrix), and `topology` / `nvlink` notes when a tool gave nothing.
    """
    extra: dict[str, Any] = {}
    if count < 2:
        return None, extra
    topo = run(["nvidia-smi", "topo", "-m"])
    nvlink = run(["nvidia-smi", "nvlink", "--status"])
    peers = peer_access(count, can_access)
    if peers is not None:
        extra["peer_access"] = peers
    if nvlink and nvlink.strip():
        extra["nvlink_status"] = _truncate(nvlink, NVLINK_STATUS_MAX_CHARS)
    else:
        extra["nvlink"] = "not available (`nvidia-smi nvlink --status` gave nothing)"
    if topo and topo.strip():
        return _truncate(topo, 60000), extra
    extra["topology"] = "not available (`nvidia-smi topo -m` gave nothing)"
    if peers is not None:
        text = f"nvidia-smi topo -m unavailable; peer access (torch.cuda.can_device_access_peer): {peers}"
        return text, extra
    return None, extra


def capture_environment(measure_bandwidth: bool = True) -> EnvironmentInfo:
    hw = detect_hardware()
    info = EnvironmentInfo(gpu_name=hw.name, gpu_count=hw.count, compute_capability=hw.compute_capability,
                           python=platform.python_version())
    info.extra["hostname"] = socket.gethostname()
    info.extra["platform"] = platform.platform()
    info.extra["backend"] = hw.backend
    try:
        import torch

        info.torch = torch.__version__
        info.cuda = torch.version.cuda
        if hw.backend == "cuda":
            props = torch.cuda.get_device_properties(0)
            info.l2_bytes = int(getattr(props, "L2_cache_size", 0)) or None
            info.extra["multiprocessors"] = int(props.multi_processor_count)
            info.extra["memory_bytes"] = int(props.total_memory)
            names = {torch.cuda.get_device_name(i) for i in range(hw.count)}
            if len(names) > 1:
                info.extra["mixed_gpus"] = ", ".join(sorted(names))
    except ImportError:
        info.extra["torch"] = "not installed"
    try:
        import triton

        info.triton = str(triton.__version__)
    except ImportError:
        info.triton = None
    if hw.backend == "cuda":
        smi = _run(["nvidia-smi", "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits"])
        rows = parse_smi_query(smi) if smi else []
        if rows:
            first = rows[0]
            info.driver = first["driver_version"]
            info.clocks = {
                "sm_mhz": _number(first["clocks.sm"]),
                "mem_mhz": _number(first["clocks.mem"]),
                "sm_max_mhz": _number(first["clocks.max.sm"]),
                "mem_max_mhz": _number(first["clocks.max.mem"]),
                "power_limit_w": _number(first["power.limit"]),
                "persistence_mode": first["persistence_mode"],
            }
        else:
            info.extra["nvidia_smi"] = "not available"
        if hw.count > 1:
            try:
                import torch

                can_access: Callable[[int, int], bool] | None = torch.cuda.can_device_access_peer
            except (ImportError, AttributeError):
                can_access = None
            info.interconnect, links = capture_links(hw.count, _run, can_access)
            info.extra.update(links)
        if measure_bandwidth:
            try:
                info.copy_bandwidth_bytes_per_s = measure_copy_bandwidth()
            except RuntimeError as exc:  # out of memory on a busy card: no number rather than a wrong one
                info.extra["copy_bandwidth"] = f"not measured: {exc}"
            try:
                info.read_bandwidth_bytes_per_s, info.extra["read_bandwidth"] = measure_read_bandwidth()
            except RuntimeError as exc:
                info.extra["read_bandwidth"] = f"not measured: {exc}"
    return info
