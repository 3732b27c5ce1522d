"""The contract between a contribution and `fasttrack collect`.

The harness, not the contribution, owns correctness checking and timing. A contribution only *describes*
its work; fasttrack drives it. The manifest's `[evidence]` table names these entry points
(`module:callable`, importable with the contribution's parent directory on sys.path):

* `kernel_tests`: pytest files (or node ids), run from the contribution directory. Tests that take the
  `envelope_point` fixture (a dict with the plain keys `gpu`, `tp`, `batch`, `context`, `dtype`) are
  parametrized by fasttrack's pytest plugin over the grid `fasttrack collect` passes (`--fasttrack-grid FILE`:
  the envelope's points for the hardware present). Without a grid the plugin skips them with a reason.
  Such a test reports its numbers through the `fasttrack_record` fixture:
  `fasttrack_record(max_error=..., tolerance=..., **extra_numbers)`; an error above its tolerance (or NaN)
  fails the test. `sanitizer_tests` are run the same way under compute-sanitizer, at the smallest point
  (tp 1 only).

* Tensor parallel (points with tp = n > 1; they need n GPUs, otherwise they are recorded as not collected):
  at tp > 1 your test runs as n processes launched by torchrun; RANK/WORLD_SIZE/LOCAL_RANK are set;
  initialise the process group yourself (nccl) and use cuda:LOCAL_RANK. Only the tests that take
  `envelope_point` run there (over the tp-n points); each rank records its own result, and a test passes at
  a point only if it passed on every rank (max_error: the max over ranks). The benchmark worker runs the
  same way, but fasttrack initialises the default process group (nccl, the device set to LOCAL_RANK) before
  importing your module: `benchmark(point)` is called on every rank and may use it (e.g. build its TP group
  from the default group). Every rank must return a case with the same variants, drive the same collectives
  in the same order in every variant and in `make_inputs`-independent shapes; the protocol replays the
  ranks' graphs in lockstep (same seeds, same order, a rendezvous before every timed replay), takes the
  element-wise max of the ranks' samples, and rejects the point if a check fails on any rank.
  `bytes_moved(variant)` is what THIS rank's GPU moves (its shard). Evals run at tp 1 only.

* `benchmark`: a callable `candidates(baseline, point: dict) -> {name: callable}` (docs/baseline-contract.md):
  the contribution's candidate variants, built on `baseline.state`, each `callable(inputs) -> output` with the
  engine stock's output structure. The baseline (stock, extra engine-side variants such as torch.compile of
  stock, the fp32 oracle, the inputs, the byte count) is the policy's `[baselines.<model>] case`, imported by
  the harness from the engine root before the contribution is; the names `stock`, `oracle` and the extra
  baselines' are reserved; the tolerance is the policy's cap for the baseline's dtype. An empty or invalid
  mapping is recorded as the contribution's failure at that point (FT341). It is imported in a worker
  process *after* the protocol has taken its own references to the timers and snapshotted the baseline's
  modules and torch's switches; replacing a timer, a baseline function or a switch is a rejection.

* `evals`: a callable `(device: str) -> list[dict]` (`device` is "cuda" or "cpu"); each dict has `name`,
  `value`, `threshold`, `direction` ("max": value must be <= threshold, "min": value must be >= threshold)
  and optional `detail` (a string or a JSON object) and `point`. `lm_eval_results` lists
  lm-evaluation-harness result JSON files (relative to the contribution); their metrics are recorded.

What the timing protocol (`fasttrack.evidence.timing`) does with the composed case (the engine's variants and
the candidates), so a contribution author knows what will be checked: every variant is first run eagerly on a
fresh input and compared with the baseline's fp32 oracle; then warmed up and captured in a CUDA graph reading
`static_inputs`; before every timed replay the variant's outputs are poisoned (NaN), fresh inputs are drawn
with a new seed and loaded, the L2 is flushed and the persisting-L2 window reset; after it the inputs must be
unchanged and the output must match stock computed eagerly on a clone of the same inputs (within the policy's
tolerance). Variants are interleaved in both orders; one profiled replay per variant records its kernels. The
`BenchmarkCase` protocol below is the composed case's shape (`fasttrack.evidence.baseline.ComposedCase`); a
contribution does not write one.

This module has no torch import so CI can type-check it; tensors are typed as `Any`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class BenchmarkCase(Protocol):
    """One benchmark point: variants that compute the same function on the same inputs.

    - `variants`: name -> callable(inputs) -> output (a tensor, or a tuple/list/dict of tensors; plain
      `torch.Tensor`s, not subclasses). Must contain "stock" (the baseline) and the candidate(s), e.g.
      "fused"; may contain "compile" (torch.compile of stock). Each callable must be CUDA-graph capturable
      (static shapes, no host synchronization; it may allocate only inside the captured region), must do
      all its work on the calling stream (or join its side streams back to it), must not keep results
      from one call to the next, and must not write to its inputs.
    - `static_inputs`: the buffers the variants read (the harness copies fresh values into them).
    - `tolerance`: (atol, rtol) for checking each variant's timed outputs against stock's on the same
      inputs: |out - ref| <= atol + rtol * |ref| element-wise.
    - `layers`: how many distinct layers one call runs (kernel counts are divided by it).
    """

    variants: Mapping[str, Callable[[Any], Any]]
    static_inputs: Any
    tolerance: tuple[float, float]
    layers: int

    def make_inputs(self, seed: int) -> Any:
        """Fresh activation inputs, a pure function of `seed` (different seeds, different inputs)."""
        ...

    def load_inputs(self, fresh: Any) -> None:
        """Copy `fresh` (from make_inputs) into `static_inputs` in place."""
        ...

    def bytes_moved(self, variant: str) -> float:
        """Bytes `variant` must move through HBM for one call (weights actually touched + KV read +
        activations): the numerator of the bandwidth-vs-roofline figure."""
        ...
