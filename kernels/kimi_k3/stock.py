"""The guard's fallback (`[fallback] stock_path`): the engine's own stock layer, re-exported.

What runs outside the envelope is exactly what vLLM runs (`baselines.vllm.kimi_k3.stock`); claims are
measured against that baseline through the policy, never against this re-export.
"""

from baselines.vllm.kimi_k3.stock import forward, forward_with_aux

__all__ = ["forward", "forward_with_aux"]
