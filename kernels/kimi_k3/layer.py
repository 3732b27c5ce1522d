"""The layer object that dispatches one decode step between the fused path and the engine's stock path.

The step API (`DecodeBatch`, `DecodeMeta`, `Workspace`, `random_batch`) is the engine's, from
`baselines.vllm.kimi_k3.decode` (re-exported here); `fused.forward(cfg, weights, batch)` has stock's exact
signature and output. No path reads a device value on the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from baselines.vllm.kimi_k3.config import K3LayerConfig
from baselines.vllm.kimi_k3.decode import (
    DecodeBatch,
    DecodeMeta,
    ForwardFn,
    GraphMode,
    Workspace,
    random_batch,
)
from baselines.vllm.kimi_k3.weights import K3LayerWeights

if TYPE_CHECKING:
    import torch

    from baselines.vllm.kimi_k3.tp import TPGroup

    from .guard import Guard

__all__ = [
    "DecodeBatch",
    "DecodeMeta",
    "ForwardFn",
    "GraphMode",
    "KimiK3DecodeLayer",
    "Workspace",
    "random_batch",
]


def _load_fused() -> ForwardFn | None:
    try:
        from . import fused
    except ImportError:
        return None
    fn = getattr(fused, "forward", None)
    return fn if callable(fn) else None


@dataclass
class KimiK3DecodeLayer:
    """One K3 MLA decoder layer: owns its weights and workspaces; per call the guard picks the path."""

    cfg: K3LayerConfig
    weights: K3LayerWeights
    guard: Guard | None = None
    workspace: Workspace = field(default_factory=Workspace)
    fused_forward: ForwardFn | None = None
    stock_forward: ForwardFn | None = None
    tp: TPGroup | None = None
    last_path: str = field(default="", init=False)
    # False when some TP rank failed its own static check at set-up (`agree_across_ranks`)
    peers_agree: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        if self.weights.cfg != self.cfg:
            raise ValueError("weights were built for another config")
        if self.guard is None:
            from .guard import default_guard

            self.guard = default_guard()
        if self.stock_forward is None:
            from . import stock

            self.stock_forward = stock.forward
        if self.fused_forward is None:
            self.fused_forward = _load_fused()
        if (self.tp.world if self.tp is not None else 1) != self.cfg.tp:
            raise ValueError(f"weights are a TP-{self.cfg.tp} shard; the layer's TP group has "
                             f"{self.tp.world if self.tp is not None else 1} ranks")
        # at TP > 1 the fused path needs the ranks' agreement first (`agree_across_ranks`)
        self.peers_agree = self.tp is None or self.tp.world == 1

    def agree_across_ranks(self, device_meta: DecodeMeta) -> bool:
        """Once, at set-up (a collective: every rank calls it): can every rank take the fused path at all?

        Per call the guard decides from host facts that the scheduler gives every rank identically (batch,
        context, dtype, graph mode, prefill rows, query length). What can differ between ranks is static:
        this rank's device (capability, name) and whether its fused build imported. Those are checked here
        on each rank and combined with a MIN all-reduce, so one rank failing makes every rank fall back
        (reason "peer_rank" on the ranks that passed themselves), and no rank can enter a fused collective
        that a stock-path peer never joins."""
        assert self.guard is not None
        local_ok = self.fused_forward is not None and self.guard.envelope.device_ok(device_meta)
        self.peers_agree = self.tp.all_agree(local_ok) if self.tp is not None else True
        return self.peers_agree

    def forward(
        self,
        hidden: torch.Tensor,
        residual: torch.Tensor,
        kv_cache: torch.Tensor,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        meta: DecodeMeta,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.guard is not None and self.stock_forward is not None
        batch = DecodeBatch(hidden, residual, kv_cache, block_table, seq_lens, meta, self.workspace, self.tp)
        decision = self.guard.decide(
            meta, fused_available=self.fused_forward is not None, peers_agree=self.peers_agree
        )
        if decision.use_fused and self.fused_forward is not None:
            self.last_path = "fused"
            return self.fused_forward(self.cfg, self.weights, batch)
        self.last_path = "stock"
        return self.stock_forward(self.cfg, self.weights, batch)

    __call__ = forward
