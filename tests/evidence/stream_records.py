"""A bench record as the timing worker sends it over the result stream, for the stream tests."""

from __future__ import annotations

from typing import Any

from fasttrack.evidence.measurement import CaseResult, ProtocolFacts, VariantResult

POINT = {"gpu": "cpu", "tp": 1, "batch": 1, "context": 8, "dtype": "float32"}


def stream_record(samples: dict[str, list[float]]) -> dict[str, Any]:
    """A point's record at POINT with these samples per variant (CPU protocol, JSON form)."""
    facts = ProtocolFacts(backend="cpu", timer="perf_counter", graph_replay=False, l2_flush_bytes=1,
                          persisting_l2_reset=False, fresh_inputs=True, device_sync="none",
                          orders=[list(samples)], iterations=2, warmup=0, seed_base=0)
    return CaseResult(point=POINT, status="ok", protocol=facts,
                      variants={n: VariantResult(samples_us=list(s)) for n, s in samples.items()}
                      ).model_dump(mode="json")
