"""The decode-step API both paths share, and the layer object that dispatches between them.

`stock.forward(cfg, weights, batch)` and `fused.forward(cfg, weights, batch)` have this exact signature and
return `(hidden_out [B, H], residual_out [B, H])` with vLLM's residual convention:

    residual_out = hidden + residual          (fused add + RMSNorm)
    x = RMSNorm(residual_out) -> MLA attention -> o_proj
    residual_out = x + residual_out; x = RMSNorm(residual_out)   (fused add + RMSNorm)
    hidden_out = latent MoE(x)                (not yet added: the next layer's add + RMSNorm does that)

The step also writes the new token's cached latent ([kv_lora | rope] = kv_a_norm(kv_c) | k_pe) into the paged
cache at position `seq_lens[b] - 1` of row b. Everything a path allocates is either allocated inside forward
(fine under CUDA-graph capture) or taken from `batch.workspace`; no path reads a device value on the host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .config import K3LayerConfig
from .weights import K3LayerWeights

if TYPE_CHECKING:
    import torch

    from .guard import Guard
    from .tp import TPGroup

GraphMode = Literal["full", "piecewise", "none"]
ForwardFn = Callable[[K3LayerConfig, K3LayerWeights, "DecodeBatch"], "tuple[torch.Tensor, torch.Tensor]"]


@dataclass(frozen=True)
class DecodeMeta:
    """Host-side facts about one step, known to the scheduler without touching the device."""

    batch: int
    max_context: int
    num_prefill_rows: int = 0
    tp: int = 1
    dtype: str = "bfloat16"
    graph_mode: GraphMode = "full"
    device_capability: tuple[int, int] = (9, 0)
    # torch.cuda.get_device_name(); None when the caller does not know it (the guard then checks the
    # capability only).
    device_name: str | None = None
    # Query rows per request (1 + speculative draft tokens). 1 = plain decode.
    query_len: int = 1

    @classmethod
    def for_device(
        cls,
        batch: int,
        max_context: int,
        device: torch.device | str,
        *,
        tp: int = 1,
        dtype: str = "bfloat16",
        graph_mode: GraphMode = "full",
        num_prefill_rows: int = 0,
        query_len: int = 1,
    ) -> DecodeMeta:
        """Fill the device facts from the CUDA runtime (host queries only, no synchronisation)."""
        import torch

        dev = torch.device(device)
        if dev.type == "cuda":
            cap = torch.cuda.get_device_capability(dev)
            name: str | None = torch.cuda.get_device_name(dev)
        else:
            cap, name = (0, 0), "cpu"
        return cls(
            batch=batch,
            max_context=max_context,
            num_prefill_rows=num_prefill_rows,
            tp=tp,
            dtype=dtype,
            graph_mode=graph_mode,
            device_capability=(int(cap[0]), int(cap[1])),
            device_name=name,
            query_len=query_len,
        )


class Workspace:
    """Preallocated scratch buffers, keyed by name; a buffer is reused while its shape/dtype/device match.

    Under CUDA graphs a workspace must be filled (first call) before capture or inside the same capture
    that replays it; buffers are never freed while the workspace lives.
    """

    def __init__(self) -> None:
        self._bufs: dict[str, torch.Tensor] = {}

    def get(
        self,
        name: str,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
    ) -> torch.Tensor:
        import torch

        buf = self._bufs.get(name)
        if buf is None or tuple(buf.shape) != shape or buf.dtype != dtype or buf.device != device:
            buf = torch.empty(shape, dtype=dtype, device=device)
            self._bufs[name] = buf
        return buf

    def __contains__(self, name: str) -> bool:
        return name in self._bufs

    def __len__(self) -> int:
        return len(self._bufs)


@dataclass
class DecodeBatch:
    """One decode step's device tensors plus its host-side facts.

    - hidden [B, H], residual [B, H] (bf16)
    - kv_cache [num_blocks, block_size, kv_lora + rope] (bf16, paged latent cache; written in place)
    - block_table [B, max_blocks] int32 (block ids of each row; unused entries may hold any valid id)
    - seq_lens [B] int32: context length INCLUDING the token being decoded
    """

    hidden: torch.Tensor
    residual: torch.Tensor
    kv_cache: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    meta: DecodeMeta
    workspace: Workspace | None = None
    # The tensor-parallel group (None: TP 1). With tp.world > 1 the weights are this rank's shard and every
    # rank calls forward with the same hidden/residual (replicated activations, as in vLLM).
    tp: TPGroup | None = None

    @property
    def batch(self) -> int:
        return int(self.hidden.shape[0])

    def scratch(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A workspace buffer when the batch carries a workspace, else a fresh allocation."""
        import torch

        if self.workspace is not None:
            return self.workspace.get(name, shape, dtype, self.hidden.device)
        return torch.empty(shape, dtype=dtype, device=self.hidden.device)


def random_batch(
    cfg: K3LayerConfig,
    seq_lens: list[int],
    device: str | torch.device = "cpu",
    seed: int = 0,
    *,
    poison: bool = True,
    spare_blocks: int = 2,
    graph_mode: GraphMode = "full",
    meta: DecodeMeta | None = None,
) -> DecodeBatch:
    """A decode batch with a random paged latent cache (tests, benchmarks, evals), built on `device`.

    Row b owns ceil(seq_lens[b] / block_size) blocks, scattered over the pool in a shuffled order. Cached
    positions < seq_len - 1 hold N(0, 1) values; with `poison`, every other cache entry (the slot the step
    must write, the tail of each row's last block, and `spare_blocks` unused blocks) holds NaN, and
    block-table entries past a row's last block point at a poisoned spare block, so a path that reads
    anything it should not produces NaN.
    """
    import torch

    if any(s < 1 for s in seq_lens):
        raise ValueError("every seq_len must be >= 1 (it includes the token being decoded)")
    dev = torch.device(device)
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    bsz, page = len(seq_lens), cfg.block_size
    nblocks = [(s + page - 1) // page for s in seq_lens]
    max_blocks = max(nblocks, default=1)
    used = sum(nblocks)
    total = used + max(spare_blocks, 1)
    perm = torch.randperm(total, generator=gen)
    spare = perm[used:]
    table = torch.empty((bsz, max_blocks), dtype=torch.int32)
    bad = torch.ones((total, page), dtype=torch.bool)  # slots that hold no valid token
    start = 0
    for b, (s, nb) in enumerate(zip(seq_lens, nblocks, strict=True)):
        blocks = perm[start : start + nb]
        start += nb
        table[b, :nb] = blocks.to(torch.int32)
        table[b, nb:] = int(spare[b % len(spare)])
        valid = torch.zeros(nb * page, dtype=torch.bool)
        valid[: s - 1] = True  # the slot at s - 1 is the one this step writes
        bad[blocks] = ~valid.view(nb, page)
    dgen = torch.Generator(device=dev)
    dgen.manual_seed(seed)
    cache = torch.empty((total, page, cfg.kv_cache_dim), dtype=torch.bfloat16, device=dev)
    cache.normal_(0.0, 1.0, generator=dgen)
    cache[bad.to(dev)] = float("nan") if poison else 0.0
    hidden = torch.randn((bsz, cfg.hidden), generator=dgen, device=dev).to(torch.bfloat16)
    residual = torch.randn((bsz, cfg.hidden), generator=dgen, device=dev).to(torch.bfloat16)
    if meta is None:
        meta = DecodeMeta(batch=bsz, max_context=max(seq_lens, default=0), tp=cfg.tp, graph_mode=graph_mode)
    return DecodeBatch(
        hidden=hidden,
        residual=residual,
        kv_cache=cache,
        block_table=table.to(dev),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=dev),
        meta=meta,
    )


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
