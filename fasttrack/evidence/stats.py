"""Speedups recomputed from raw samples: the ratio of medians (baseline / candidate) with a seeded
percentile-bootstrap confidence interval.

Each bootstrap round resamples the baseline and the candidate samples independently, with replacement, and
takes the ratio of their medians; the interval is the (1-c)/2 and (1+c)/2 quantiles of those ratios. The
seed is fixed, so the same samples always give the same interval on every machine: there is one bootstrap
(numpy's seeded generator, vectorised in bounded chunks; numpy is a hard dependency), so a claim near its
threshold cannot pass on one machine and fail on another because they drew different random streams.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_SEED = 20261130
_CHUNK_ELEMENTS = 4_000_000


@dataclass(frozen=True)
class RatioEstimate:
    """`ratio` = median(baseline) / median(candidate): above 1 means the candidate is faster."""

    ratio: float
    low: float
    high: float
    confidence: float
    resamples: int
    n_baseline: int
    n_candidate: int


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    s = sorted(values)
    mid = len(s) // 2
    return float(s[mid]) if len(s) % 2 else (s[mid - 1] + s[mid]) / 2.0


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of already sorted values (numpy's default method)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def median_ratio_ci(baseline: Sequence[float], candidate: Sequence[float], *, resamples: int = 2000,
                    confidence: float = 0.95, seed: int = DEFAULT_SEED) -> RatioEstimate:
    """Ratio of medians with a bootstrap CI. Samples must be positive; at least 2 on each side."""
    if len(baseline) < 2 or len(candidate) < 2:
        raise ValueError("need at least 2 samples on each side")
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be between 0 and 1")
    if resamples < 1:
        raise ValueError("resamples must be positive")
    if any(not (math.isfinite(x) and x > 0) for x in (*baseline, *candidate)):
        raise ValueError("samples must be positive finite numbers")
    ratios = _bootstrap(baseline, candidate, resamples, seed)
    ratios.sort()
    tail = (1.0 - confidence) / 2.0
    return RatioEstimate(
        ratio=median(baseline) / median(candidate),
        low=quantile(ratios, tail),
        high=quantile(ratios, 1.0 - tail),
        confidence=confidence,
        resamples=resamples,
        n_baseline=len(baseline),
        n_candidate=len(candidate),
    )


def _bootstrap(baseline: Sequence[float], candidate: Sequence[float], resamples: int,
               seed: int) -> list[float]:
    # numpy (~0.1 s to import) is loaded by the one function that uses it: a verify run without evidence,
    # which imports this module with every rule, never does.
    import numpy as np

    rng = np.random.default_rng(seed)

    def medians(values: Sequence[float]) -> object:
        arr = np.asarray(values, dtype=np.float64)
        rows = max(1, _CHUNK_ELEMENTS // len(arr))
        parts = []
        for start in range(0, resamples, rows):
            n = min(rows, resamples - start)
            parts.append(np.median(arr[rng.integers(0, len(arr), size=(n, len(arr)))], axis=1))
        return np.concatenate(parts)

    ratio = np.asarray(medians(baseline)) / np.asarray(medians(candidate))
    return [float(x) for x in ratio]
