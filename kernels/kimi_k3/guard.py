"""The envelope guard: per call, from host-side facts only, fused path or stock fallback.

The envelope is read from this contribution's `fasttrack.toml` (the single source of truth, parsed with
tomllib at import; fasttrack itself is not imported). Every fallback is counted in the Prometheus counter
`fasttrack_kimi_k3_fallback_total{reason=...}` and logged once per reason (first occurrence, per guard).
The guard never touches a tensor, so it costs no device synchronisation and is safe under graph capture.
"""

from __future__ import annotations

import logging
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from .layer import DecodeMeta

MANIFEST_PATH = Path(__file__).resolve().parent / "fasttrack.toml"
METRIC_NAME = "fasttrack_kimi_k3_fallback_total"
LOG = logging.getLogger("kimi_k3.guard")

# Every reason label the guard can emit, in the order it checks them.
REASONS = (
    "fused_unavailable",
    "peer_rank",
    "gpu",
    "tp",
    "dtype",
    "graph_mode",
    "mixed_prefill",
    "spec_width",
    "batch",
    "context",
)


@dataclass(frozen=True)
class Envelope:
    gpu_names: frozenset[str]
    capabilities: frozenset[tuple[int, int]]
    tp: frozenset[int]
    batch_min: int
    batch_max: int
    context_min: int
    context_max: int
    dtypes: frozenset[str]
    cuda_graph: str
    spec_decode_widths: frozenset[int]
    mixed_prefill_decode: bool

    @classmethod
    def from_manifest(cls, path: Path = MANIFEST_PATH) -> Envelope:
        with path.open("rb") as f:
            data: dict[str, Any] = tomllib.load(f)
        env = data["envelope"]
        caps = set()
        for hw in env["hardware"]:
            major, minor = str(hw["compute_capability"]).split(".")
            caps.add((int(major), int(minor)))
        return cls(
            gpu_names=frozenset(str(hw["name"]) for hw in env["hardware"]),
            capabilities=frozenset(caps),
            tp=frozenset(int(t) for t in env["tp"]),
            batch_min=int(env["batch"]["min"]),
            batch_max=int(env["batch"]["max"]),
            context_min=int(env["context"]["min"]),
            context_max=int(env["context"]["max"]),
            dtypes=frozenset(str(d) for d in env["dtypes"]),
            cuda_graph=str(env["cuda_graph"]),
            spec_decode_widths=frozenset(int(w) for w in env.get("spec_decode_widths", [1])),
            mixed_prefill_decode=bool(env.get("mixed_prefill_decode", False)),
        )

    def device_ok(self, meta: DecodeMeta) -> bool:
        """The device facts of `meta` (capability, name) are inside the envelope."""
        return meta.device_capability in self.capabilities and (
            meta.device_name is None or meta.device_name in self.gpu_names
        )

    def reason_outside(self, meta: DecodeMeta) -> str | None:
        """The first reason `meta` lies outside the envelope, or None when it lies inside."""
        if not self.device_ok(meta):
            return "gpu"
        if meta.tp not in self.tp:
            return "tp"
        if meta.dtype not in self.dtypes:
            return "dtype"
        if meta.graph_mode != self.cuda_graph:
            return "graph_mode"
        if meta.num_prefill_rows > 0 and not self.mixed_prefill_decode:
            return "mixed_prefill"
        if meta.query_len not in self.spec_decode_widths:
            return "spec_width"
        if not self.batch_min <= meta.batch <= self.batch_max:
            return "batch"
        if not self.context_min <= meta.max_context <= self.context_max:
            return "context"
        return None


ENVELOPE = Envelope.from_manifest()


class Decision(NamedTuple):
    use_fused: bool
    reason: str | None


class Guard:
    """Decides per call; counts and logs fallbacks. Pass a `CollectorRegistry` to isolate tests."""

    def __init__(
        self,
        envelope: Envelope | None = None,
        registry: Any = None,
        logger: logging.Logger | None = None,
    ) -> None:
        from prometheus_client import REGISTRY, Counter

        self.envelope = envelope or ENVELOPE
        self.log = logger or LOG
        self.counter = Counter(
            METRIC_NAME,
            "Kimi K3 decode-layer calls that fell back to the stock path, by reason",
            ["reason"],
            registry=REGISTRY if registry is None else registry,
        )
        self._logged: set[str] = set()
        self._lock = threading.Lock()

    def check(self, meta: DecodeMeta, fused_available: bool = True, peers_agree: bool = True) -> Decision:
        """The decision without side effects. `peers_agree` is False when another TP rank's own device facts
        or fused build failed the envelope at set-up (`KimiK3DecodeLayer.agree_across_ranks`): then this
        rank must fall back too, or the fused rank would wait forever in a collective stock never joins."""
        if not fused_available:
            return Decision(False, "fused_unavailable")
        reason = self.envelope.reason_outside(meta)
        if reason is None and not peers_agree:
            reason = "peer_rank"
        return Decision(reason is None, reason)

    def decide(self, meta: DecodeMeta, fused_available: bool = True, peers_agree: bool = True) -> Decision:
        decision = self.check(meta, fused_available, peers_agree)
        if decision.reason is not None:
            self.counter.labels(reason=decision.reason).inc()
            with self._lock:
                first = decision.reason not in self._logged
                self._logged.add(decision.reason)
            if first:
                self.log.warning(
                    "kimi_k3: falling back to the stock decode layer: reason=%s (batch=%d context=%d tp=%d "
                    "dtype=%s graph=%s prefill_rows=%d query_len=%d capability=%s gpu=%s); "
                    "counted in %s, logged once per reason",
                    decision.reason,
                    meta.batch,
                    meta.max_context,
                    meta.tp,
                    meta.dtype,
                    meta.graph_mode,
                    meta.num_prefill_rows,
                    meta.query_len,
                    meta.device_capability,
                    meta.device_name,
                    METRIC_NAME,
                )
        return decision


_DEFAULT: Guard | None = None
_DEFAULT_LOCK = threading.Lock()


def default_guard() -> Guard:
    """The process-wide guard, registered in prometheus_client's default registry (created once)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = Guard()
        return _DEFAULT


def decide(meta: DecodeMeta, fused_available: bool = True, peers_agree: bool = True) -> Decision:
    """Module-level entry point (`[fallback] guard` in the manifest)."""
    return default_guard().decide(meta, fused_available, peers_agree)
