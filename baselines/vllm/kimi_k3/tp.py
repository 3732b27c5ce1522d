"""Tensor parallelism for the K3 decode layer: the rank's group, its collectives, and peer buffers.

One process per GPU (torchrun), `torch.distributed` initialised by the caller. `TPGroup` is what both paths
receive through `DecodeBatch.tp` (None means TP 1, no communication):

- stock uses `all_reduce_` (NCCL on GPU, gloo on CPU), as an engine's row-parallel linears do;
- fused uses `PeerBuffer`s: a buffer every rank writes its own slice/partial into, plus a view of every
  rank's buffer readable from this rank's kernels, and `publish()` which makes the local writes visible to
  the peers (a barrier). Two transports:

  * "peer" (CUDA): torch symmetric memory. Each rank's buffer is mapped into its peers' address space, so
    a kernel reads a peer's partial directly over NVLink; `publish()` is the symmetric-memory barrier
    kernel (a device-side signal exchange, CUDA-graph capturable, no host sync).
  * "copy" (any backend, used on CPU/gloo in CI and as a CUDA fallback): `publish()` all-gathers every
    rank's buffer into local copies, which the same kernels then read. The TP logic (who computes which
    rows, what is reduced where, the folded add + norm) is identical; only the transport differs.

Buffer reuse is safe with one barrier between each write and the next write of the same buffer by any
rank: every layer publishes its buffers in a fixed order, so a rank can only overwrite buffer X after the
barrier of the buffer published after X, which its peers pass only once they have read X.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

Transport = Literal["peer", "copy"]


@dataclass
class PeerBuffer:
    """One exchange buffer: `local` (this rank writes it) and `views[r]` (rank r's buffer, readable here)."""

    name: str
    local: torch.Tensor
    views: list[torch.Tensor]
    _publish: Any = field(repr=False)

    def publish(self) -> None:
        """After this rank's writes to `local` (on the current stream): make every rank's buffer readable."""
        self._publish()


@dataclass
class TPGroup:
    """This process's place in the tensor-parallel group."""

    rank: int
    world: int
    group: Any = None  # torch.distributed ProcessGroup (None: the default group)
    transport: Transport = "copy"
    _buffers: dict[str, PeerBuffer] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.world < 1 or not 0 <= self.rank < self.world:
            raise ValueError(f"bad TP rank {self.rank} of {self.world}")

    @classmethod
    def from_env(cls, transport: Transport | None = None, group: Any = None) -> TPGroup:
        """The group of the initialised default process group (torchrun). CUDA tensors use "peer"."""
        import torch
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialised (launch with torchrun)")
        if transport is None:
            transport = "peer" if dist.get_backend(group) == "nccl" and torch.cuda.is_available() else "copy"
        return cls(
            rank=dist.get_rank(group), world=dist.get_world_size(group), group=group, transport=transport
        )

    # ---- stock: collectives ------------------------------------------------------------------------------
    def all_reduce_(self, t: torch.Tensor) -> torch.Tensor:
        """Sum `t` over the group, in place (NCCL/gloo), and return it."""
        import torch.distributed as dist

        if self.world > 1:
            dist.all_reduce(t, group=self.group)
        return t

    def all_agree(self, ok: bool) -> bool:
        """True only when every rank passes `ok` (a MIN all-reduce: a host call at set-up, not per step)."""
        import torch
        import torch.distributed as dist

        if self.world == 1:
            return ok
        dev = (
            torch.device("cuda", torch.cuda.current_device())
            if dist.get_backend(self.group) == "nccl"
            else None
        )
        flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=dev)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.group)
        return bool(int(flag.item()) == 1)

    # ---- fused: peer buffers -----------------------------------------------------------------------------
    def buffer(
        self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> PeerBuffer:
        """The exchange buffer `name` (created collectively on first use: every rank must ask in the same
        order with the same shape; reused while shape/dtype/device match)."""
        buf = self._buffers.get(name)
        if (
            buf is not None
            and tuple(buf.local.shape) == tuple(shape)
            and buf.local.dtype == dtype
            and buf.local.device == device
        ):
            return buf
        buf = (
            self._make_peer(name, shape, dtype, device)
            if self.transport == "peer"
            else self._make_copy(name, shape, dtype, device)
        )
        self._buffers[name] = buf
        return buf

    def _make_copy(
        self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> PeerBuffer:
        import torch
        import torch.distributed as dist

        views = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.world)]
        local = views[self.rank]
        group = self.group

        def publish() -> None:
            if self.world > 1:
                dist.all_gather(views, local.clone(), group=group)

        return PeerBuffer(name, local, views, publish)

    def _make_peer(
        self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> PeerBuffer:
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        local = symm_mem.empty(shape, dtype=dtype, device=device)
        local.zero_()
        group = self.group if self.group is not None else dist.group.WORLD
        if group is None:
            raise RuntimeError("torch.distributed is not initialised")
        handle = symm_mem.rendezvous(local, group.group_name)
        views = [
            local if r == self.rank else handle.get_buffer(r, tuple(shape), dtype) for r in range(self.world)
        ]

        def publish() -> None:
            handle.barrier(channel=0)

        return PeerBuffer(name, local, views, publish)


def shard_weights(full: Any, rank: int, tp: int) -> Any:
    """Rank `rank`'s shard of TP-1 weights `full` (a K3LayerWeights), laid out as vLLM shards a layer: heads
    (q_b, kv_b, o_proj columns, gate rows) and expert / shared intermediates split; the q_a|kv_a rows, norms,
    router, latent down/up projections replicated."""
    import dataclasses

    import torch

    from .weights import K3LayerWeights

    cfg = full.cfg
    if cfg.tp != 1:
        raise ValueError("shard_weights takes TP-1 (full) weights")
    scfg = dataclasses.replace(cfg, tp=tp)
    lh, qk, nope, v = scfg.local_heads, cfg.qk_head_dim, cfg.qk_nope_head_dim, cfg.v_head_dim
    h0, h1 = rank * lh, (rank + 1) * lh
    ni, si = scfg.routed_inter, scfg.shared_inter
    i0, s0 = rank * ni, rank * si
    qkv = full.w_qkv_a_g
    gate = qkv[cfg.qkv_a_rows :].view(cfg.num_heads, v, cfg.hidden)[h0:h1].reshape(lh * v, cfg.hidden)
    w13, sw13 = full.w13, full.shared_w13
    inter, sinter = cfg.routed_inter, cfg.shared_inter
    return K3LayerWeights(
        cfg=scfg,
        input_norm=full.input_norm.clone(),
        w_qkv_a_g=torch.cat([qkv[: cfg.qkv_a_rows], gate]).contiguous(),
        q_a_norm=full.q_a_norm.clone(),
        kv_a_norm=full.kv_a_norm.clone(),
        w_q_b=full.w_q_b.view(cfg.num_heads, qk, -1)[h0:h1].reshape(lh * qk, -1).contiguous(),
        w_kv_b=full.w_kv_b.view(cfg.num_heads, nope + v, -1)[h0:h1].reshape(lh * (nope + v), -1).contiguous(),
        w_o=full.w_o[:, h0 * v : h1 * v].contiguous(),
        post_norm=full.post_norm.clone(),
        router=full.router.clone(),
        e_score_correction_bias=full.e_score_correction_bias.clone(),
        latent_down=full.latent_down.clone(),
        w13=torch.cat([w13[:, i0 : i0 + ni], w13[:, inter + i0 : inter + i0 + ni]], dim=1).contiguous(),
        w2=full.w2[:, :, i0 : i0 + ni].contiguous(),
        routed_norm=full.routed_norm.clone(),
        latent_up=full.latent_up.clone(),
        shared_w13=torch.cat([sw13[s0 : s0 + si], sw13[sinter + s0 : sinter + s0 + si]]).contiguous(),
        shared_w2=full.shared_w2[:, s0 : s0 + si].contiguous(),
    )
