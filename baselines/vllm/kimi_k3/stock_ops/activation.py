# Triton kernels are untyped (tl types): relax mypy's strict defaults for this module only.
# mypy: disallow-untyped-defs=False, disallow-untyped-decorators=False
# mypy: disallow-incomplete-defs=False, warn-return-any=False
"""Elementwise kernels of the stock path: SiTU-and-mul (vLLM's `situ_and_mul`, one kernel) and the MLA output
gate `attn * sigmoid(gate)` (vLLM compiles it into one kernel)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._runtime import launcher, register, use_triton


@triton.jit
def _tanh(x):
    # tanh(x) = 1 - 2 / (exp(2x) + 1): exact limits at +-inf, absolute error ~1e-7 near 0.
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)


@triton.jit
def _situ_and_mul_kernel(
    X, Y, D, stride_x, stride_y, beta: tl.constexpr, linear_beta: tl.constexpr, BLOCK: tl.constexpr
):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < D
    g = tl.load(X + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(X + row * stride_x + D + offs, mask=mask, other=0.0).to(tl.float32)
    act = beta * _tanh(g / beta) * tl.sigmoid(g)
    up = linear_beta * _tanh(u / linear_beta)
    tl.store(Y + row * stride_y + offs, (act * up).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _gate_mul_kernel(A, G, Y, D, stride_a, stride_g, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < D
    a = tl.load(A + row * stride_a + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + row * stride_g + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride_y + offs, (a * tl.sigmoid(g)).to(Y.dtype.element_ty), mask=mask)


_BLOCK = 1024


def _situ_launch(x: torch.Tensor, beta: float, linear_beta: float) -> torch.Tensor:
    m, d2 = x.shape
    d = d2 // 2
    y = torch.empty((m, d), dtype=x.dtype, device=x.device)
    if m == 0:
        return y
    launcher(_situ_and_mul_kernel, x)[(m, triton.cdiv(d, _BLOCK))](
        x, y, d, x.stride(0), y.stride(0), beta, linear_beta, BLOCK=_BLOCK, num_warps=4
    )
    return y


@register("situ_and_mul")
def _situ_op(x: torch.Tensor, beta: float, linear_beta: float) -> torch.Tensor:
    return _situ_launch(x, beta, linear_beta)


def _gate_launch(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    m, d = a.shape
    y = torch.empty((m, d), dtype=a.dtype, device=a.device)
    if m == 0:
        return y
    launcher(_gate_mul_kernel, a)[(m, triton.cdiv(d, _BLOCK))](
        a, g, y, d, a.stride(0), g.stride(0), y.stride(0), BLOCK=_BLOCK, num_warps=4
    )
    return y


@register("gate_sigmoid_mul")
def _gate_op(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return _gate_launch(a, g)


def situ_and_mul(x: torch.Tensor, beta: float, linear_beta: float) -> torch.Tensor:
    """[M, 2D] (gate | up) -> [M, D]: beta*tanh(g/beta)*sigmoid(g) * linear_beta*tanh(u/linear_beta)."""
    if x.is_cuda:
        return torch.ops.kimi_k3_stock.situ_and_mul(x, beta, linear_beta)
    if use_triton(x):
        return _situ_launch(x, beta, linear_beta)
    d = x.shape[-1] // 2
    g, u = x[:, :d].float(), x[:, d:].float()
    out = beta * torch.tanh(g / beta) * torch.sigmoid(g) * (linear_beta * torch.tanh(u / linear_beta))
    return out.to(x.dtype)


def gate_sigmoid_mul(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """a * sigmoid(g); g may be a strided column slice."""
    if a.is_cuda:
        return torch.ops.kimi_k3_stock.gate_sigmoid_mul(a, g)
    if use_triton(a):
        return _gate_launch(a, g)
    return (a.float() * torch.sigmoid(g.float())).to(a.dtype)
