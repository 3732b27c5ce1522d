"""Child side: torch's process-wide switches, read through torch's own getters (the `state:torch.*` keys).

One table, enumerable: every `torch._C` setter of a global (or main-thread) switch that has a getter readable
on CPU without side effects is here, as `path(args)` from `torch` (an attribute path when it has no
parentheses). Beside it, readers for what is not one call: the random generators' full state (a digest of
the bytes, CPU and every CUDA device once CUDA is initialised), the torch-function and dispatch mode stacks
and the infra modes (depth and identity), autograd's default saved-tensor hooks, the JIT switches that only
have a setter returning the old value (set and put back), an open forward-AD level, autocast's dtype and
on/off for every device type, the JIT emit hooks, the flush-denormal mode. docs/effect-trace.md lists them.

Setters with no getter (so no key; named in docs/effect-trace.md): `_set_print_stack_traces_on_fatal_signal`,
`_set_cached_tensors_enabled`, `_debug_set_autodiff_subgraph_inlining`, `_jit_set_logging_stream`,
`_jit_set_onnx_log_output_stream`, `_jit_set_utf8_decoding_ignore`, `_logging_set_logger`,
`_set_worker_signal_handlers` (C signal handlers), `_stash_obj_in_tls` (keyed by the caller's string).
"""

from __future__ import annotations

import ast
import hashlib
import sys
from collections.abc import Callable
from typing import Any

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<missing>"})()

# `path(args)` from `torch`; args are Python literals. The first block is the keys the trace had before
# (their names are kept); the rest is the `_C` family, by area.
SWITCHES: tuple[str, ...] = (
    "backends.cuda.matmul.allow_tf32", "backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "backends.cuda.matmul.allow_bf16_reduced_precision_reduction", "backends.cudnn.allow_tf32",
    "backends.cudnn.enabled", "backends.cudnn.benchmark", "backends.cudnn.deterministic",
    "backends.mkldnn.enabled", "backends.opt_einsum.enabled", "backends.cuda.flash_sdp_enabled()",
    "backends.cuda.mem_efficient_sdp_enabled()", "backends.cuda.math_sdp_enabled()",
    "backends.cuda.cudnn_sdp_enabled()", "are_deterministic_algorithms_enabled()",
    "is_deterministic_algorithms_warn_only_enabled()", "get_default_dtype()", "get_default_device()",
    "get_float32_matmul_precision()", "get_num_threads()", "get_num_interop_threads()", "is_grad_enabled()",
    "is_warn_always_enabled()", "_C._jit_texpr_fuser_enabled()", "_C._get_graph_executor_optimize()",
    "_C._jit_can_fuse_on_cpu()", "is_inference_mode_enabled()", "is_anomaly_enabled()",
    "_C._get_cudnn_allow_tf32()", "_C._get_cublas_allow_tf32()", "_C._jit_get_inline_everything_mode()",
    # determinism, precision, math backends
    "_C._get_deterministic_fill_uninitialized_memory()",
    "_C._get_cpu_allow_fp16_reduced_precision_reduction()",
    "_C._get_cublas_allow_fp16_accumulation()", "_C._get_cudnn_depthwise_kernel()",
    "_C._get_mkldnn_deterministic()", "_C._get_nnpack_enabled()",
    "_C._get_miopen_immediate()", "_C._get_qengine()", "_C._get_blas_preferred_backend()",
    "_C._get_linalg_preferred_backend()", "_C._get_rocm_fa_preferred_backend()",
    "_C._get_fp32_precision_getter('generic', 'all')",
    *(f"_C._get_fp32_precision_getter('{b}', '{o}')" for b in ("cuda", "mkldnn")
      for o in ("all", "matmul", "conv", "rnn")),
    # scaled-dot-product attention and the MHA fast path
    "_C._get_sdp_priority_order()", "_C._get_math_sdp_allow_fp16_bf16_reduction()",
    "_C._get_fa3_sdp_enabled()", "_C._get_overrideable_sdp_enabled()", "backends.mha.get_fastpath_enabled()",
    # autograd
    "_C._get_autograd_fallback_mode()", "_C._is_fwd_grad_enabled()", "is_anomaly_check_nan_enabled()",
    "_C._is_view_replay_enabled()", "_C._is_multithreading_enabled()",
    "_C._is_grad_layout_enforcement_enabled()", "_C._warn_on_accumulate_grad_stream_mismatch()",
    "_C._override_stale_capture_stream()", "_C._autograd._saved_tensors_hooks_is_enabled()",
    "_C._autograd._saved_tensors_hooks_get_disabled_error_message()", "_C._autograd._profiler_enabled()",
    "_C._autograd._profiler_type()", "is_autocast_cache_enabled()",
    # dispatch, torch-function and tracing state
    "_C._dispatch_tls_local_include_set()", "_C._dispatch_tls_local_exclude_set()",
    "_C._get_torch_function_state()", "_C._is_torch_function_enabled()",
    "_C._is_torch_function_all_disabled()", "_C._is_torch_function_mode_enabled()",
    "_C._meta_in_tls_dispatch_include()", "_C._only_lift_cpu_tensors()",
    "_C._get_dtensor_allow_implicit_replication()", "_C._are_functorch_transforms_active()",
    "_C._functorch.get_dynamic_layer_stack_depth()", "_C._functorch.maybe_current_level()",
    "_C._functorch.get_inplace_requires_grad_allowed()",
    "_C._functorch.get_single_level_autograd_function_allowed()",
    # sparse, warnings, threads, allocators, names
    "_C._check_sparse_tensor_invariants()", "_C._get_backcompat_broadcast_warn()",
    "_C._get_backcompat_keepdim_warn()", "_C._get_warnAlways()", "_C._get_thread_name()",
    "_C._is_default_mobile_cpu_allocator_set()", "_C._get_privateuse1_backend_name()",
    "_C._get_sm_carveout_experimental()", "_C._get_graph_exec_group()",
    # the JIT
    "_C._jit_llga_enabled()", "_C._jit_is_onnx_log_enabled()",
    "_C._jit_symbolic_shapes_test_mode_enabled()", "_C._jit_get_te_cuda_pointwise_block_count()",
    "_C._jit_get_te_cuda_pointwise_block_size()", "_C._jit_get_te_cuda_pointwise_loop_levels()",
    "_C._jit_get_te_generate_block_code()", "_C._jit_get_te_must_use_llvm_cpu()",
    "_C._jit_texpr_dynamic_shape_enabled()", "_C._jit_texpr_reductions_enabled()",
    "_C._jit_texpr_fallback_allowed()", "_C._jit_get_tracer_state_warn()", "_C._jit_get_num_profiled_runs()",
    "_C._jit_get_logging_option()", "_C._debug_get_fusion_group_inlining()",
)

# Per-thread values (read in the main thread only, where the contribution's modules are imported).
_THREAD = ("is_grad_enabled()", "is_inference_mode_enabled()", "_C._is_fwd_grad_enabled()",
           "_C._is_view_replay_enabled()", "_C._is_multithreading_enabled()", "is_autocast_cache_enabled()",
           "_C._autograd._saved_tensors_hooks_is_enabled()",
           "_C._autograd._saved_tensors_hooks_get_disabled_error_message()",
           "_C._autograd._profiler_enabled()",
           "_C._autograd._profiler_type()", "_C._dispatch_tls_local_include_set()",
           "_C._dispatch_tls_local_exclude_set()", "_C._get_torch_function_state()",
           "_C._is_torch_function_enabled()", "_C._is_torch_function_all_disabled()",
           "_C._is_torch_function_mode_enabled()", "_C._meta_in_tls_dispatch_include()",
           "_C._are_functorch_transforms_active()", "_C._functorch.get_dynamic_layer_stack_depth()",
           "_C._functorch.maybe_current_level()", "_C._functorch.get_inplace_requires_grad_allowed()",
           "_C._functorch.get_single_level_autograd_function_allowed()",
           "_C._get_thread_name()")


def _parse(entry: str) -> tuple[list[str], tuple[Any, ...] | None]:
    """`a.b.c(1, 'x')` -> (['a', 'b', 'c'], (1, 'x')); an attribute path has args None."""
    path, paren, rest = entry.partition("(")
    args: tuple[Any, ...] | None = None
    if paren:
        inner = rest[:-1].strip()
        args = tuple(ast.literal_eval(f"({inner},)")) if inner else ()
    return path.split("."), args


def _resolve(parts: list[str]) -> Any:
    obj: Any = sys.modules.get("torch")
    if obj is None:
        return MISSING
    for part in parts:
        obj = getattr(obj, part, MISSING)
        if obj is MISSING:
            return MISSING
    return obj


def _switch(entry: str) -> Callable[[], Any]:
    parts, args = _parse(entry)

    def get() -> Any:
        try:  # a module property's getter may raise too (cuDNN's allow_tf32 after mixed TF32 APIs)
            obj = _resolve(parts)
            if obj is MISSING:
                return obj
            return repr(obj if args is None else obj(*args))
        except Exception as exc:  # a switch that cannot be read on this build, or in this state
            return f"<error {type(exc).__name__}>"

    return get


def _read(get: Callable[[Any], Any]) -> Callable[[], Any]:
    def read() -> Any:
        t = sys.modules.get("torch")
        if t is None:
            return MISSING
        try:
            return get(t)
        except Exception as exc:
            return f"<error {type(exc).__name__}>"

    return read


def _digest(state: Any) -> str:
    """A generator state (a uint8 tensor) by a digest of all its bytes (not a sum: two bytes swapped are
    another stream with the same sum)."""
    data = state.numpy().tobytes() if "numpy" in sys.modules else bytes(state.tolist())
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _rng(t: Any) -> Any:
    """The default CPU generator (state and seed), and each CUDA device's once CUDA is initialised (reading
    them does not initialise it)."""
    gen = t.default_generator
    out: list[Any] = [("cpu", _digest(gen.get_state()), gen.initial_seed())]
    cuda = sys.modules.get("torch.cuda")
    if cuda is not None and cuda.is_initialized():
        out += [(f"cuda:{i}", _digest(g.get_state()), g.initial_seed())
                for i, g in enumerate(cuda.default_generators)]
    return tuple(out)


def _function_modes(t: Any) -> Any:
    """The torch-function mode stack (depth and which objects): a mode pushed and not popped stays in force
    for every later torch call."""
    c = t._C
    return tuple(id(c._get_function_stack_at(i)) for i in range(c._len_torch_function_stack()))


def _dispatch_modes(t: Any) -> Any:
    """The dispatch mode stack, and the infra modes (fake, proxy, functional) beside it."""
    c = t._C
    stack = tuple(id(c._get_dispatch_stack_at(i)) for i in range(c._len_torch_dispatch_stack()))
    keys = sorted(c._TorchDispatchModeKey.__members__.items())
    infra = tuple((k, id(m)) for k, m in ((k, c._get_dispatch_mode(v)) for k, v in keys) if m is not None)
    return (stack, infra)


def _saved_hooks(t: Any) -> Any:
    """autograd's default saved-tensor hooks (`saved_tensors_hooks` entered and not left): the top pair."""
    top = t._C._autograd._top_saved_tensors_default_hooks(True)
    return None if top is None else tuple(map(id, top))


def _returns_old(name: str, probe: Any) -> Callable[[Any], Any]:
    """A JIT switch whose only setter returns the old value: set to `probe`, put the old value back."""

    def get(t: Any) -> Any:
        setter = getattr(t._C, name, None)
        if setter is None:
            return MISSING
        old = setter(probe)
        setter(old)
        return repr(old)

    return get


def _dual_level(t: Any) -> Any:
    """A forward-AD level left open (`torch._C._enter_dual_level()`): only one may exist, so entering one
    fails while the PR's is open; otherwise the probe's level is closed again at once."""
    try:
        level = t._C._enter_dual_level()
    except RuntimeError:
        return "open"
    t._C._exit_dual_level(level=level)
    return "none"


def _autocast_nesting(t: Any) -> Any:
    """autocast's nesting count (raised and lowered again: the C counters have no other side effect)."""
    level = t.autocast_increment_nesting() - 1
    t.autocast_decrement_nesting()
    return level


AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "hpu", "mps", "xla", "ipu", "mtia", "maia", "privateuseone")


def _autocast(t: Any) -> Any:
    return [(d, t.is_autocast_enabled(d)) for d in ("cpu", "cuda")]


def _autocast_dtypes(t: Any) -> Any:
    out = []
    for d in AUTOCAST_DEVICES:
        try:
            out.append((d, repr(t.get_autocast_dtype(d)), t.is_autocast_enabled(d)))
        except (RuntimeError, ValueError):
            continue
    return tuple(out)


def _emit_hooks(t: Any) -> Any:
    """Whether the JIT's emit hooks are set (the getter wraps them anew on each call: not by identity)."""
    return tuple(h is None for h in t._C._jit_get_emit_hooks())


def _flush_denormal(t: Any) -> Any:
    """torch.set_flush_denormal has no getter: a denormal double reads 0 when it is on (this thread)."""
    return t.tensor([1e-323], dtype=t.float64).item() == 0.0


def _cuda(t: Any) -> Any:
    """CUDA-only switches, read only once CUDA is initialised (reading must not initialise it)."""
    cuda = sys.modules.get("torch.cuda")
    if cuda is None or not cuda.is_initialized():
        return MISSING
    c = t._C
    names = ("_cuda_get_sync_debug_mode", "_cuda_tunableop_is_enabled", "_cuda_tunableop_tuning_is_enabled")
    return tuple((n, repr(getattr(c, n)())) for n in names if hasattr(c, n))


READERS: dict[str, Callable[[Any], Any]] = {
    "torch.autocast": lambda t: repr(_autocast(t)),
    "torch.flush_denormal": _flush_denormal,
    "torch.rng": _rng,
    "torch.function_modes": _function_modes,
    "torch.dispatch_modes": _dispatch_modes,
    "torch.saved_tensors_hooks": _saved_hooks,
    "torch.jit.profiling_executor": _returns_old("_jit_set_profiling_executor", True),
    "torch.jit.profiling_mode": _returns_old("_jit_set_profiling_mode", True),
    "torch.jit.fusion_strategy": _returns_old("_jit_set_fusion_strategy", [("STATIC", 2)]),
    "torch.jit.autocast_mode": _returns_old("_jit_set_autocast_mode", True),
    "torch.jit.emit_hooks": _emit_hooks,
    "torch.forward_ad_level": _dual_level,
    "torch.autocast_nesting": _autocast_nesting,
    "torch.autocast_dtypes": _autocast_dtypes,
    "torch.cuda_switches": _cuda,
}

STATE: dict[str, Callable[[], Any]] = {
    **{f"torch.{s}": _switch(s) for s in SWITCHES},
    **{k: _read(v) for k, v in READERS.items()},
}

THREAD_LOCAL = frozenset({f"state:torch.{s}" for s in _THREAD} | {
    "state:torch.flush_denormal", "state:torch.autocast", "state:torch.function_modes",
    "state:torch.dispatch_modes", "state:torch.saved_tensors_hooks",
    "state:torch.autocast_nesting", "state:torch.autocast_dtypes"})

# An attribute switch (a module property over one C getter) is cheap enough to re-read on every line.
CHEAP = frozenset(f"state:torch.{s}" for s in SWITCHES if "(" not in s)
