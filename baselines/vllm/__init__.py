"""Baselines for vLLM 0.33: per model, the layer as vLLM runs it on the target GPU."""
