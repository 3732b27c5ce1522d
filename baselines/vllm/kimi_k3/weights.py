"""Weights of one Kimi K3 MLA decoder layer (one TP rank), in the one layout every path reads.

Torch linear convention throughout: `y = x @ W.T`, W is `[out, in]`.

| field | shape (per rank) | dtype |
|---|---|---|
| input_norm | [H] | bf16 |
| w_qkv_a_g | [q_lora + kv_lora + rope + local_heads*v, H] (q_a, kv_a latent, kv_a key, gate) | bf16 |
| q_a_norm | [q_lora] | bf16 |
| kv_a_norm | [kv_lora] | bf16 |
| w_q_b | [local_heads*(nope+rope), q_lora] (per head: nope rows then rope rows) | bf16 |
| w_kv_b | [local_heads*(nope+v), kv_lora] (per head: W_UK rows (nope) then W_UV rows (v)) | bf16 |
| w_o | [H, local_heads*v] | bf16 |
| post_norm | [H] | bf16 |
| router | [E, H] | bf16 |
| e_score_correction_bias | [E] | fp32 |
| latent_down | [latent, H] | bf16 |
| w13 | [E, 2*inter_rank, latent] (gate rows then up rows) | bf16 |
| w2 | [E, latent, inter_rank] | bf16 |
| routed_norm | [latent] | bf16 |
| latent_up | [H, latent] | bf16 |
| shared_w13 | [2*shared_rank, H] (gate rows then up rows) | bf16 |
| shared_w2 | [H, shared_rank] | bf16 |

Derived forms are computed once and cached on the object (`derived(name, fn)`), never by mutating a field:
`w_uk_t` [local_heads, nope, kv_lora] and `w_uv` [local_heads, kv_lora, v] (vLLM's absorbed W_UK_T / W_UV).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .config import K3LayerConfig

if TYPE_CHECKING:
    import torch

WEIGHT_FIELDS = (
    "input_norm",
    "w_qkv_a_g",
    "q_a_norm",
    "kv_a_norm",
    "w_q_b",
    "w_kv_b",
    "w_o",
    "post_norm",
    "router",
    "e_score_correction_bias",
    "latent_down",
    "w13",
    "w2",
    "routed_norm",
    "latent_up",
    "shared_w13",
    "shared_w2",
)


def expected_shapes(cfg: K3LayerConfig) -> dict[str, tuple[int, ...]]:
    h, lh = cfg.hidden, cfg.local_heads
    return {
        "input_norm": (h,),
        "w_qkv_a_g": (cfg.qkv_a_g_rows, h),
        "q_a_norm": (cfg.q_lora_rank,),
        "kv_a_norm": (cfg.kv_lora_rank,),
        "w_q_b": (lh * cfg.qk_head_dim, cfg.q_lora_rank),
        "w_kv_b": (lh * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank),
        "w_o": (h, lh * cfg.v_head_dim),
        "post_norm": (h,),
        "router": (cfg.n_routed_experts, h),
        "e_score_correction_bias": (cfg.n_routed_experts,),
        "latent_down": (cfg.latent, h),
        "w13": (cfg.n_routed_experts, 2 * cfg.routed_inter, cfg.latent),
        "w2": (cfg.n_routed_experts, cfg.latent, cfg.routed_inter),
        "routed_norm": (cfg.latent,),
        "latent_up": (h, cfg.latent),
        "shared_w13": (2 * cfg.shared_inter, h),
        "shared_w2": (h, cfg.shared_inter),
    }


@dataclass(eq=False)
class K3LayerWeights:
    cfg: K3LayerConfig
    input_norm: torch.Tensor
    w_qkv_a_g: torch.Tensor
    q_a_norm: torch.Tensor
    kv_a_norm: torch.Tensor
    w_q_b: torch.Tensor
    w_kv_b: torch.Tensor
    w_o: torch.Tensor
    post_norm: torch.Tensor
    router: torch.Tensor
    e_score_correction_bias: torch.Tensor
    latent_down: torch.Tensor
    w13: torch.Tensor
    w2: torch.Tensor
    routed_norm: torch.Tensor
    latent_up: torch.Tensor
    shared_w13: torch.Tensor
    shared_w2: torch.Tensor
    _derived: dict[str, object] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        shapes = expected_shapes(self.cfg)
        for name in WEIGHT_FIELDS:
            t = getattr(self, name)
            if tuple(t.shape) != shapes[name]:
                raise ValueError(f"weight {name}: shape {tuple(t.shape)}, expected {shapes[name]}")
            if not t.is_contiguous():
                raise ValueError(f"weight {name} must be contiguous")
        if str(self.e_score_correction_bias.dtype) != "torch.float32":
            raise ValueError("e_score_correction_bias must be float32")

    # ---- access --------------------------------------------------------------------------------------
    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name in WEIGHT_FIELDS:
            yield name, getattr(self, name)

    @property
    def device(self) -> torch.device:
        return self.w_o.device

    @property
    def dtype(self) -> torch.dtype:
        return self.w_o.dtype

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for _, t in self.tensors())

    def derived(self, name: str, fn: Callable[[K3LayerWeights], object]) -> object:
        """A derived form computed once from the shared weights (never written back into them)."""
        if name not in self._derived:
            self._derived[name] = fn(self)
        return self._derived[name]

    @property
    def w_uk_t(self) -> torch.Tensor:
        """[local_heads, nope, kv_lora]: q_nope @ w_uk_t[h] gives the absorbed latent query of head h."""
        out = self.derived("w_uk_t", _split_uk_t)
        return out  # type: ignore[return-value]

    @property
    def w_uv(self) -> torch.Tensor:
        """[local_heads, kv_lora, v]: latent attention output @ w_uv[h] gives head h's value output."""
        out = self.derived("w_uv", _split_uv)
        return out  # type: ignore[return-value]

    def to(self, device: str | torch.device, dtype: torch.dtype | None = None) -> K3LayerWeights:
        """A copy on another device/dtype (the fp32 bias stays fp32)."""
        kwargs: dict[str, object] = {}
        for name, t in self.tensors():
            if name == "e_score_correction_bias":
                kwargs[name] = t.to(device=device)
            else:
                kwargs[name] = t.to(device=device, dtype=dtype or t.dtype)
        return K3LayerWeights(cfg=self.cfg, **kwargs)  # type: ignore[arg-type]

    # ---- construction --------------------------------------------------------------------------------
    @classmethod
    def random(
        cls,
        cfg: K3LayerConfig,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | None = None,
        seed: int = 0,
    ) -> K3LayerWeights:
        """Random weights scaled so activations stay O(1) through the layer.

        Linear weights are N(0, 1/fan_in); norm weights are 1 + N(0, 0.1^2) (so a path that drops or
        mis-indexes a norm weight is caught); the router correction bias is N(0, 0.02^2) in fp32 (of the
        order of the gaps between sigmoid scores, so it changes which experts win). Tensors are drawn
        directly in `dtype` on `device`, expert by expert, so the ~59 GB of real-shape experts need no fp32
        temporary.
        """
        import torch

        dtype = dtype or torch.bfloat16
        dev = torch.device(device)
        gen = torch.Generator(device=dev)
        gen.manual_seed(seed)
        shapes = expected_shapes(cfg)

        def normal(shape: tuple[int, ...], std: float, mean: float = 0.0) -> torch.Tensor:
            t = torch.empty(shape, device=dev, dtype=dtype)
            if len(shape) == 3:  # per expert: bounded temporaries inside normal_
                for e in range(shape[0]):
                    t[e].normal_(mean, std, generator=gen)
            else:
                t.normal_(mean, std, generator=gen)
            return t

        def lin(name: str) -> torch.Tensor:
            shape = shapes[name]
            return normal(shape, 1.0 / math.sqrt(shape[-1]))

        def norm(name: str) -> torch.Tensor:
            return normal(shapes[name], 0.1, mean=1.0)

        bias = torch.empty(shapes["e_score_correction_bias"], device=dev, dtype=torch.float32)
        bias.normal_(0.0, 0.02, generator=gen)
        return cls(
            cfg=cfg,
            input_norm=norm("input_norm"),
            w_qkv_a_g=lin("w_qkv_a_g"),
            q_a_norm=norm("q_a_norm"),
            kv_a_norm=norm("kv_a_norm"),
            w_q_b=lin("w_q_b"),
            w_kv_b=lin("w_kv_b"),
            w_o=lin("w_o"),
            post_norm=norm("post_norm"),
            router=lin("router"),
            e_score_correction_bias=bias,
            latent_down=lin("latent_down"),
            w13=lin("w13"),
            w2=lin("w2"),
            routed_norm=norm("routed_norm"),
            latent_up=lin("latent_up"),
            shared_w13=lin("shared_w13"),
            shared_w2=lin("shared_w2"),
        )

    def replace(self, **changes: torch.Tensor) -> K3LayerWeights:
        """A new weights object with some tensors swapped (derived forms are recomputed)."""
        kwargs = {name: getattr(self, name) for name in WEIGHT_FIELDS}
        kwargs.update(changes)
        return dataclasses.replace(self, _derived={}, **kwargs)


def _split_uk_t(w: K3LayerWeights) -> torch.Tensor:
    c = w.cfg
    kv_b = w.w_kv_b.view(c.local_heads, c.qk_nope_head_dim + c.v_head_dim, c.kv_lora_rank)
    return kv_b[:, : c.qk_nope_head_dim, :].contiguous()  # [lh, nope, kv_lora]


def _split_uv(w: K3LayerWeights) -> torch.Tensor:
    c = w.cfg
    kv_b = w.w_kv_b.view(c.local_heads, c.qk_nope_head_dim + c.v_head_dim, c.kv_lora_rank)
    return kv_b[:, c.qk_nope_head_dim :, :].transpose(1, 2).contiguous()  # [lh, kv_lora, v]
