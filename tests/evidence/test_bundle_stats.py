"""Median ratio + seeded bootstrap CI used to recompute claims from raw samples."""

from __future__ import annotations

import random

import pytest

from fasttrack.evidence import stats as stats_module
from fasttrack.evidence.stats import median, median_ratio_ci, quantile

# median_ratio_ci(noisy(100, 100, 3), noisy(70, 100, 4), resamples=2000) with numpy's seeded generator (numpy
# 1.24+ keeps the PCG64 stream of Generator.integers stable): a change here is a change of every verdict's CI.
PINNED_INTERVAL = (1.4093160576203194, 1.4311879683926627)


def noisy(center: float, n: int, seed: int, sd: float = 0.03) -> list[float]:
    rng = random.Random(seed)
    return [center * (1 + rng.gauss(0, sd)) for _ in range(n)]


def test_median_and_quantile() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.25) == 2.0
    assert quantile([1.0, 2.0], 0.5) == 1.5
    with pytest.raises(ValueError):
        median([])


def test_ratio_ci_covers_the_true_ratio_and_is_seeded() -> None:
    stock, fused = noisy(100.0, 200, 1), noisy(50.0, 200, 2)
    a = median_ratio_ci(stock, fused, resamples=1000)
    b = median_ratio_ci(stock, fused, resamples=1000)
    assert a == b  # same samples, same interval
    assert a.low < a.ratio < a.high
    assert a.low < 2.0 < a.high
    assert a.high - a.low < 0.1


def test_there_is_one_bootstrap_whatever_is_installed() -> None:
    # A claim near its threshold must not flip between machines: the interval is a pure function of the
    # samples and the seed (pinned here against a value computed once, so a second random stream fails).
    stock, fused = noisy(100.0, 100, 3), noisy(70.0, 100, 4)
    est = median_ratio_ci(stock, fused, resamples=2000)
    assert not hasattr(stats_module, "_bootstrap_python")
    assert est == median_ratio_ci(list(stock), list(fused), resamples=2000)
    assert (est.low, est.high) == pytest.approx(PINNED_INTERVAL, rel=1e-9)


def test_noisier_samples_give_wider_intervals() -> None:
    tight = median_ratio_ci(noisy(100, 50, 5, 0.01), noisy(80, 50, 6, 0.01), resamples=1000)
    loose = median_ratio_ci(noisy(100, 50, 5, 0.2), noisy(80, 50, 6, 0.2), resamples=1000)
    assert (loose.high - loose.low) > 3 * (tight.high - tight.low)


def test_higher_confidence_gives_a_lower_lower_bound() -> None:
    s, f = noisy(100, 40, 7, 0.1), noisy(60, 40, 8, 0.1)
    assert median_ratio_ci(s, f, confidence=0.99).low < median_ratio_ci(s, f, confidence=0.8).low


def test_outliers_do_not_move_the_median_ratio() -> None:
    stock, fused = noisy(100, 101, 9, 0.01), noisy(50, 101, 10, 0.01)
    base = median_ratio_ci(stock, fused, resamples=500)
    fused_with_outliers = list(fused)
    fused_with_outliers[:5] = [0.001] * 5  # a few impossibly fast samples cannot carry a claim
    moved = median_ratio_ci(stock, fused_with_outliers, resamples=500)
    assert moved.ratio == pytest.approx(base.ratio, rel=0.02)


@pytest.mark.parametrize(("base", "cand", "kw"), [
    ([1.0], [1.0, 2.0], {}),
    ([1.0, 2.0], [1.0, -1.0], {}),
    ([1.0, float("nan")], [1.0, 2.0], {}),
    ([1.0, 2.0], [1.0, 2.0], {"confidence": 1.0}),
    ([1.0, 2.0], [1.0, 2.0], {"resamples": 0}),
])
def test_bad_inputs_raise_value_error(base: list[float], cand: list[float], kw: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        median_ratio_ci(base, cand, **kw)  # type: ignore[arg-type]


def test_large_sample_count_is_fast_with_numpy() -> None:
    import time

    stock, fused = noisy(100, 5000, 11), noisy(50, 5000, 12)
    t0 = time.perf_counter()
    est = median_ratio_ci(stock, fused, resamples=2000)
    assert time.perf_counter() - t0 < 10.0
    assert est.low < 2.0 < est.high
