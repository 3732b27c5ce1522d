"""The MLA decode stage as vLLM 0.33 runs it on an H200: FlashInfer's FA3 MLA (FLASHINFER_MLA).

vLLM's sm90 MLA order is FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA (`vllm/platforms/cuda.py`,
`_get_backend_priorities`). The first two ship only as compiled extensions of vLLM's own wheel (built for
torch 2.14; the GPU box has 2.11), so the first of vLLM's list that runs here is FlashInfer 0.7.2.post1's
planned MLA wrapper (the version vLLM 0.33 pins) with `backend="fa3"`.

One `MLADecodeAttention` is one step's attention metadata: planned once on the host from the block table and
sequence lengths (the plan copies them to the host, as vLLM's metadata builder does before the graph
replays), then `run(q, kv_cache)` launches only device work and is CUDA-graph capturable.

On CPU (CI), and at shapes FlashInfer's MLA is not built for (the tiny test config, also on a GPU), the same
stage runs a torch reference attention over the same paged cache (fp32 softmax, bf16 out), so the baseline's
plumbing, shapes, TP sharding and the guard's fallback are tested without a GPU.
`flashinfer` is imported lazily (the `gpu` extra of pyproject).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

WORKSPACE_BYTES = 128 * 1024 * 1024
BACKEND = "fa3"
# kernel-name patterns by which a captured graph shows FlashInfer's FA3 MLA (policy: FLASHINFER_MLA)
# (seen on the H200: flashinfer::mla::hopper::BatchMLAPageAttentionHopperKernel<...>)
KERNEL_PATTERNS = ["*BatchMLAPageAttention*", "*flashinfer*mla*"]

FLASHINFER_SHAPES = frozenset({(512, 64)})  # (head_dim_ckv, head_dim_kpe) FlashInfer's MLA is built for

_WORKSPACES: dict[str, Any] = {}


def _workspace(device: torch.device) -> torch.Tensor:
    """One 128 MiB FlashInfer workspace per device (vLLM's backend shares one across layers)."""
    import torch

    key = str(device)
    ws = _WORKSPACES.get(key)
    if ws is None:
        ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        _WORKSPACES[key] = ws
    return ws


class MLADecodeAttention:
    """Planned latent MQA decode over a paged [blocks, page, kv_lora + rope] cache."""

    def __init__(
        self,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        *,
        num_heads: int,
        kv_lora_rank: int,
        rope_dim: int,
        page_size: int,
        sm_scale: float,
        backend: str = BACKEND,
    ) -> None:
        import torch

        self.num_heads, self.kv_lora_rank, self.rope_dim = num_heads, kv_lora_rank, rope_dim
        self.page_size, self.sm_scale = page_size, float(sm_scale)
        self.device = block_table.device
        self.batch = int(seq_lens.shape[0])
        lens = [int(s) for s in seq_lens.tolist()]  # host copy at plan time (outside any graph)
        self.seq_lens_host = lens
        self.block_table = block_table
        self.seq_lens = seq_lens
        # FlashInfer's MLA kernels take the DeepSeek/K3 latent shape only (512 + 64); other (tiny test)
        # shapes run the torch reference attention, on the GPU too
        fits = (kv_lora_rank, rope_dim) in FLASHINFER_SHAPES
        self.backend = backend if self.device.type == "cuda" and fits else "torch"
        if self.backend == "torch":
            self._wrapper = None
            return
        from flashinfer.mla import BatchMLAPagedAttentionWrapper  # type: ignore[import-not-found]
        from flashinfer.mla._batch_mla._contracts import MLAPlanMetadata  # type: ignore[import-not-found]

        dev = self.device
        npages = [(n + page_size - 1) // page_size for n in lens]
        indptr = [0]
        for n in npages:
            indptr.append(indptr[-1] + n)
        bt = block_table.to(torch.int32)
        indices = torch.cat([bt[b, : npages[b]] for b in range(self.batch)]).contiguous()
        self._qo_indptr = torch.arange(self.batch + 1, dtype=torch.int32, device=dev)
        self._kv_indptr = torch.tensor(indptr, dtype=torch.int32, device=dev)
        self._kv_indices = indices
        self._kv_lens = seq_lens.to(torch.int32).contiguous()
        self._wrapper = BatchMLAPagedAttentionWrapper(_workspace(dev), backend=backend)
        self._wrapper.plan(
            metadata=MLAPlanMetadata.csr(self._qo_indptr, self._kv_indptr, self._kv_indices, self._kv_lens),
            num_heads=num_heads,
            head_dim_ckv=kv_lora_rank,
            head_dim_kpe=rope_dim,
            page_size=page_size,
            causal=False,
            sm_scale=self.sm_scale,
            q_data_type=torch.bfloat16,
            kv_data_type=torch.bfloat16,
        )

    @classmethod
    def for_batch(cls, cfg: Any, block_table: torch.Tensor, seq_lens: torch.Tensor,
                  sm_scale: float | None = None) -> MLADecodeAttention:
        return cls(
            block_table,
            seq_lens,
            num_heads=cfg.local_heads,
            kv_lora_rank=cfg.kv_lora_rank,
            rope_dim=cfg.qk_rope_head_dim,
            page_size=cfg.block_size,
            sm_scale=cfg.softmax_scale if sm_scale is None else sm_scale,
        )

    def matches(self, block_table: torch.Tensor, seq_lens: torch.Tensor) -> bool:
        """Planned for these very tensors (identity: a plan is per step's metadata)."""
        return block_table is self.block_table and seq_lens is self.seq_lens

    def run(self, q: torch.Tensor, kv_cache: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """q [B, H, kv_lora + rope] bf16 -> latent output [B, H, kv_lora] bf16."""
        if self._wrapper is not None:
            if out is None:
                res: torch.Tensor = self._wrapper.run(query=q, kv_cache=kv_cache)
                return res
            self._wrapper.run(query=q, kv_cache=kv_cache, out=out)
            return out
        return self._torch_run(q, kv_cache, out)

    def _torch_run(self, q: torch.Tensor, kv_cache: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
        import torch

        kvl, page = self.kv_lora_rank, self.page_size
        res = out if out is not None else q.new_empty((q.shape[0], q.shape[1], kvl))
        for b, n in enumerate(self.seq_lens_host):
            nb = (n + page - 1) // page
            blocks = self.block_table[b, :nb].long()
            ctx = kv_cache[blocks].reshape(-1, kv_cache.shape[-1])[:n].float()  # [n, kvl + rope]
            s = (q[b].float() @ ctx.T) * self.sm_scale
            p = torch.softmax(s, dim=-1)
            res[b] = (p @ ctx[:, :kvl]).to(res.dtype)
        return res


_PLANS: dict[tuple[Any, ...], tuple[Any, Any, MLADecodeAttention]] = {}
_MAX_PLANS = 64


def for_batch(cfg: Any, batch: Any) -> MLADecodeAttention:
    """The batch's planned attention (`batch.attn`), else the plan made earlier for the very same block table
    and sequence lengths (same tensors, unmodified since: torch's version counter), else a fresh plan (a host
    copy: not inside a CUDA graph, so a caller that captures runs one eager step first, as vLLM's
    metadata builder plans before each replay)."""
    attn = getattr(batch, "attn", None)
    bt, sl = batch.block_table, batch.seq_lens
    if isinstance(attn, MLADecodeAttention) and attn.matches(bt, sl):
        return attn
    key = (id(bt), bt._version, id(sl), sl._version, cfg.local_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim,
           cfg.block_size, float(cfg.softmax_scale))
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is bt and hit[1] is sl:
        return hit[2]
    plan = MLADecodeAttention.for_batch(cfg, bt, sl)
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.pop(next(iter(_PLANS)))
    _PLANS[key] = (bt, sl, plan)  # holds the tensors: their ids cannot be reused while the entry lives
    return plan
