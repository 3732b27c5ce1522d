# Triton kernels are untyped (tl types): relax mypy's strict defaults for this module only.
# mypy: disallow-untyped-defs=False, disallow-untyped-decorators=False
# mypy: disallow-incomplete-defs=False, warn-return-any=False
"""RMSNorm kernels of the stock path, one launch each (like vLLM's `rms_norm`, `fused_add_rms_norm` and the
K3 `fused_q_kv_rmsnorm` that normalises the q and kv latents in one kernel). One program per row."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._runtime import launcher, next_pow2, register, use_triton


@triton.jit
def _rms_norm_kernel(X, W, Y, N, stride_x, stride_y, eps: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    var = tl.sum(x * x, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride_y + offs, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _fused_add_rms_norm_kernel(
    X, R, W, Y, R_OUT, N, stride_x, stride_r, stride_y, stride_ro, eps: tl.constexpr, BLOCK: tl.constexpr
):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(R + row * stride_r + offs, mask=mask, other=0.0).to(tl.float32)
    z = x + r
    tl.store(R_OUT + row * stride_ro + offs, z.to(R_OUT.dtype.element_ty), mask=mask)
    var = tl.sum(z * z, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride_y + offs, (z * rstd * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _q_kv_rms_norm_kernel(
    QKV,
    WQ,
    WK,
    QO,
    KO,
    NQ,
    NK,
    stride_in,
    stride_qo,
    stride_ko,
    eps: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    row = tl.program_id(0)
    part = tl.program_id(1)
    if part == 0:
        oq = tl.arange(0, BLOCK_Q)
        mq = oq < NQ
        xq = tl.load(QKV + row * stride_in + oq, mask=mq, other=0.0).to(tl.float32)
        rq = 1.0 / tl.sqrt(tl.sum(xq * xq, axis=0) / NQ + eps)
        wq = tl.load(WQ + oq, mask=mq, other=0.0).to(tl.float32)
        tl.store(QO + row * stride_qo + oq, (xq * rq * wq).to(QO.dtype.element_ty), mask=mq)
    else:
        ok = tl.arange(0, BLOCK_K)
        mk = ok < NK
        xk = tl.load(QKV + row * stride_in + NQ + ok, mask=mk, other=0.0).to(tl.float32)
        rk = 1.0 / tl.sqrt(tl.sum(xk * xk, axis=0) / NK + eps)
        wk = tl.load(WK + ok, mask=mk, other=0.0).to(tl.float32)
        tl.store(KO + row * stride_ko + ok, (xk * rk * wk).to(KO.dtype.element_ty), mask=mk)


def _warps(block: int) -> int:
    return 8 if block >= 4096 else 4


def _rms_norm_launch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    m, n = x.shape
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return y
    block = next_pow2(n)
    launcher(_rms_norm_kernel, x)[(m,)](
        x, weight, y, n, x.stride(0), y.stride(0), eps, BLOCK=block, num_warps=_warps(block)
    )
    return y


@register("rms_norm")
def _rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _rms_norm_launch(x, weight, eps)


def _fused_add_rms_norm_launch(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.shape
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    r_out = torch.empty((m, n), dtype=residual.dtype, device=x.device)
    if m == 0:
        return y, r_out
    block = next_pow2(n)
    launcher(_fused_add_rms_norm_kernel, x)[(m,)](
        x,
        residual,
        weight,
        y,
        r_out,
        n,
        x.stride(0),
        residual.stride(0),
        y.stride(0),
        r_out.stride(0),
        eps,
        BLOCK=block,
        num_warps=_warps(block),
    )
    return y, r_out


@register("fused_add_rms_norm")
def _fused_add_rms_norm_op(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return _fused_add_rms_norm_launch(x, residual, weight, eps)


def _q_kv_rms_norm_launch(
    qkv: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    m = qkv.shape[0]
    nq, nk = wq.shape[0], wk.shape[0]
    qo = torch.empty((m, nq), dtype=qkv.dtype, device=qkv.device)
    ko = torch.empty((m, nk), dtype=qkv.dtype, device=qkv.device)
    if m == 0:
        return qo, ko
    bq, bk = next_pow2(nq), next_pow2(nk)
    launcher(_q_kv_rms_norm_kernel, qkv)[(m, 2)](
        qkv,
        wq,
        wk,
        qo,
        ko,
        nq,
        nk,
        qkv.stride(0),
        qo.stride(0),
        ko.stride(0),
        eps,
        BLOCK_Q=bq,
        BLOCK_K=bk,
        num_warps=4,
    )
    return qo, ko


@register("q_kv_rms_norm")
def _q_kv_rms_norm_op(
    qkv: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return _q_kv_rms_norm_launch(qkv, wq, wk, eps)


# ---- public API ------------------------------------------------------------------------------------------
def _torch_rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if x.is_cuda:
        return torch.ops.kimi_k3_stock.rms_norm(x, weight, eps)
    if use_triton(x):
        return _rms_norm_launch(x, weight, eps)
    return _torch_rms(x, weight, eps)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(RMSNorm(x + residual) * weight, x + residual) in one kernel."""
    if x.is_cuda:
        out = torch.ops.kimi_k3_stock.fused_add_rms_norm(x, residual, weight, eps)
        return out[0], out[1]
    if use_triton(x):
        return _fused_add_rms_norm_launch(x, residual, weight, eps)
    z = x.float() + residual.float()
    zf = z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return zf.to(x.dtype), z.to(residual.dtype)


def q_kv_rms_norm(
    qkv: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of columns [0, nq) with wq and [nq, nq + nk) with wk of a (possibly wider) [M, *] tensor."""
    if qkv.is_cuda:
        out = torch.ops.kimi_k3_stock.q_kv_rms_norm(qkv, wq, wk, eps)
        return out[0], out[1]
    if use_triton(qkv):
        return _q_kv_rms_norm_launch(qkv, wq, wk, eps)
    nq, nk = wq.shape[0], wk.shape[0]
    return _torch_rms(qkv[:, :nq], wq, eps), _torch_rms(qkv[:, nq : nq + nk], wk, eps)
