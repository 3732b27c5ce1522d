"""The contract between a contribution and `fasttrack collect`.

The harness, not the contribution, owns correctness checking and timing. A contribution only *describes*
its work; fasttrack drives it. The manifest's `[evidence]` table names these entry points
(`module:callable`, importable with the contribution's parent directory on sys.path):

* `kernel_tests`: pytest files. Tests that take the `envelope_point` fixture (a dict with the plain keys
  `gpu`, `tp`, `batch`, `context`, `dtype`) are parametrized by fasttrack's pytest plugin over the grid
  `fasttrack collect` passes (`--fasttrack-grid FILE`). Without a grid the plugin skips them with a reason.
  Such a test reports its numbers through the `fasttrack_record` fixture:
  `fasttrack_record(max_error=..., tolerance=..., **extra_numbers)`.

* `benchmark`: a callable `(point: dict) -> BenchmarkCase` (below), or None when the point is not
  benchmarkable on this machine (the collector records that as not run).

* `evals`: a callable `(device: str) -> list[dict]`; each dict has `name`, `value`, `threshold`,
  `direction` ("max": value must be <= threshold, "min": value must be >= threshold) and optional `detail`.

This module has no torch import so CI can type-check it; tensors are typed as `Any`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class BenchmarkCase(Protocol):
    """One benchmark point: variants that compute the same function on the same inputs.

    - `variants`: name -> callable(inputs) -> output tensor. Must contain "stock" (the baseline) and the
      candidate(s), e.g. "fused"; may contain "compile" (torch.compile of stock). Each callable must be
      CUDA-graph capturable (static shapes; it may allocate only inside the captured region).
    - `make_inputs(seed)`: fresh activation inputs (the harness makes new ones for every timed iteration
      and copies them into the graph's static input buffers outside the timed region).
    - `static_inputs`: the buffers the variants read (the harness copies fresh values into them).
    - `bytes_moved(variant, inputs)`: bytes a variant must move through HBM for one call (weights actually
      touched + KV read + activations), for the bandwidth-vs-roofline figure.
    - `tolerance`: (atol, rtol) for checking each variant's timed outputs against stock's.
    - `layers`: how many distinct layers one call runs (the harness divides by it).
    """

    variants: Mapping[str, Callable[[Any], Any]]
    static_inputs: Any
    tolerance: tuple[float, float]
    layers: int

    def make_inputs(self, seed: int) -> Any: ...

    def load_inputs(self, fresh: Any) -> None:
        """Copy `fresh` (from make_inputs) into `static_inputs` in place."""
        ...

    def bytes_moved(self, variant: str) -> float: ...
