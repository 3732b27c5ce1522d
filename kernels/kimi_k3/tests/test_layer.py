"""KimiK3DecodeLayer: per call, the guard picks the fused path inside the envelope and the stock path
outside it, visibly."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from prometheus_client import CollectorRegistry  # noqa: E402

from baselines.vllm.kimi_k3.config import K3LayerConfig  # noqa: E402
from baselines.vllm.kimi_k3.weights import K3LayerWeights  # noqa: E402
from kimi_k3 import stock  # noqa: E402
from kimi_k3.guard import ENVELOPE, METRIC_NAME, Guard  # noqa: E402
from kimi_k3.layer import DecodeBatch, KimiK3DecodeLayer, Workspace, random_batch  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_layer_dispatches_through_the_guard(tiny_cfg: K3LayerConfig, tiny_weights: K3LayerWeights) -> None:
    calls: list[str] = []

    def fake_fused(
        cfg: K3LayerConfig, w: K3LayerWeights, batch: DecodeBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append("fused")
        assert batch.workspace is not None
        return stock.forward(cfg, w, batch)

    reg = CollectorRegistry()
    layer = KimiK3DecodeLayer(tiny_cfg, tiny_weights, guard=Guard(registry=reg), fused_forward=fake_fused)
    batch = random_batch(tiny_cfg, [3, 9], seed=2)
    # the guard reads host facts only: declare a context inside the envelope (16384..32768) for this step
    inside = dataclasses.replace(
        batch.meta, batch=ENVELOPE.batch_min, max_context=ENVELOPE.context_min, device_capability=(9, 0),
        device_name="NVIDIA H200",
    )
    out, res = layer(batch.hidden, batch.residual, batch.kv_cache, batch.block_table, batch.seq_lens, inside)
    assert layer.last_path == "fused" and calls == ["fused"]
    mixed = dataclasses.replace(inside, num_prefill_rows=1)
    out2, res2 = layer(batch.hidden, batch.residual, batch.kv_cache, batch.block_table, batch.seq_lens, mixed)
    assert layer.last_path == "stock" and calls == ["fused"]
    assert reg.get_sample_value(METRIC_NAME, {"reason": "mixed_prefill"}) == 1.0
    # same inputs, same (stock) math behind both decisions here
    assert torch.equal(out, out2) and torch.equal(res, res2)
    short = dataclasses.replace(inside, max_context=ENVELOPE.context_min - 1)
    layer(batch.hidden, batch.residual, batch.kv_cache, batch.block_table, batch.seq_lens, short)
    assert layer.last_path == "stock" and calls == ["fused"]
    assert reg.get_sample_value(METRIC_NAME, {"reason": "context"}) == 1.0


def test_layer_rejects_weights_of_another_config(tiny_weights: K3LayerWeights) -> None:
    with pytest.raises(ValueError, match="another config"):
        KimiK3DecodeLayer(K3LayerConfig.tiny(tp=2), tiny_weights, guard=Guard(registry=CollectorRegistry()))


def test_workspace_reuses_matching_buffers() -> None:
    ws = Workspace()
    a = ws.get("x", (2, 3), torch.float32, torch.device("cpu"))
    assert ws.get("x", (2, 3), torch.float32, torch.device("cpu")) is a
    b = ws.get("x", (4, 3), torch.float32, torch.device("cpu"))
    assert b is not a and b.shape == (4, 3) and len(ws) == 1 and "x" in ws
