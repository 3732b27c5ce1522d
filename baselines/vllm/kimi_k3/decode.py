"""The decode-step API of the K3 MLA layer as the engine calls it: host facts (`DecodeMeta`), scratch
(`Workspace`), one step's device tensors (`DecodeBatch`) and random test/benchmark batches (`random_batch`).

`stock.forward(cfg, weights, batch)` (and any candidate path) takes a `DecodeBatch` and returns
`(hidden_out [B, H], residual_out [B, H])` with vLLM's residual convention:

    residual_out = hidden + residual          (fused add + RMSNorm)
    x = RMSNorm(residual_out) -> MLA attention -> o_proj
    residual_out = x + residual_out; x = RMSNorm(residual_out)   (fused add + RMSNorm)
    hidden_out = latent MoE(x)                (not yet added: the next layer's add + RMSNorm does that)

The step also writes the new token's cached latent ([kv_lora | rope] = kv_a_norm(kv_c) | k_pe) into the paged
cache at position `seq_lens[b] - 1` of row b. `DecodeBatch.attn` carries the step's planned MLA decode
(`attention.MLADecodeAttention`), as vLLM's attention metadata builder plans its backend per step on the host
before the graph replays; a batch without one plans on the fly (a host copy: not capturable).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .config import K3LayerConfig
from .weights import K3LayerWeights

if TYPE_CHECKING:
    import torch

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
    # The step's planned MLA decode (attention.MLADecodeAttention) or None (planned on first use)
    attn: Any = None

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
    positions < seq_len - 1 hold N(0, 1) values; with `poison`, the slot the step must write and the tail of
    each row's last block hold 1e4 (finite: a kernel may load and mask them), the `spare_blocks` unused
    blocks hold NaN, and block-table entries past a row's last block point at a poisoned spare block, so a
    path that reads anything it should not produces NaN or a swamped softmax.
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
    own_tail = torch.zeros((total, page), dtype=torch.bool)  # a row's own blocks, past its valid tokens
    start = 0
    for b, (s, nb) in enumerate(zip(seq_lens, nblocks, strict=True)):
        blocks = perm[start : start + nb]
        start += nb
        table[b, :nb] = blocks.to(torch.int32)
        table[b, nb:] = int(spare[b % len(spare)])
        valid = torch.zeros(nb * page, dtype=torch.bool)
        valid[: s - 1] = True  # the slot at s - 1 is the one this step writes
        bad[blocks] = ~valid.view(nb, page)
        own_tail[blocks] = ~valid.view(nb, page)
    dgen = torch.Generator(device=dev)
    dgen.manual_seed(seed)
    cache = torch.empty((total, page, cfg.kv_cache_dim), dtype=torch.bfloat16, device=dev)
    cache.normal_(0.0, 1.0, generator=dgen)
    cache[bad.to(dev)] = float("nan") if poison else 0.0
    if poison:
        # Inside a row's own pages a paged attention kernel may load the slots past the row's length and mask
        # them (FlashInfer's FA3 MLA does: vLLM's pages hold stale data there), so those slots get a large
        # finite sentinel: masked, it changes nothing; read as a token, it swamps the softmax. Blocks no row
        # owns stay NaN.
        cache[own_tail.to(dev)] = 1.0e4
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
