"""Thinning keeps a series' shape: its first and last points, its spikes, at most the points asked for."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learnerkit.scheduler.series.thinning import thin


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 20_000), points=st.integers(10, 3000), seed=st.integers(0, 2**32 - 1))
def test_the_points_kept_are_few_ordered_and_include_both_ends_and_extremes(n: int, points: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 1e6, n))
    y = rng.normal(size=n)
    kept = thin(x, y, points)
    assert len(kept) == n if n <= points else len(kept) <= points
    assert np.all(np.diff(kept) > 0), "indices ascending, none twice"
    if n:
        assert kept[0] == 0 and kept[-1] == n - 1
        assert kept.min() >= 0 and kept.max() < n
        assert y[kept].min() == y.min() and y[kept].max() == y.max()


def test_every_point_is_kept_when_there_are_no_more_than_asked() -> None:
    x = np.arange(500, dtype=np.float64)
    assert thin(x, np.sin(x), 500).tolist() == list(range(500))


def test_spikes_up_and_down_survive_a_thousandfold_thinning() -> None:
    rng = np.random.default_rng(7)
    n = 1_000_000
    x = np.arange(n, dtype=np.float64)
    y = rng.normal(0, 1, n)
    # One spike in every 25th of the series' 1000 buckets, anywhere in it: LTTB keeps one point a bucket.
    spikes = np.arange(0, n, n // 40) + rng.integers(0, n // 1000, 40)
    y[spikes[:20]] = 50.0
    y[spikes[20:]] = -50.0
    kept = set(thin(x, y, 1000).tolist())
    assert set(spikes.tolist()) <= kept
    assert len(kept) <= 1000


def test_a_wavy_decay_keeps_its_shape_within_a_hundredth() -> None:
    x = np.arange(100_000, dtype=np.float64)
    y = np.exp(-x / 20_000) + 0.01 * np.sin(x / 50)
    kept = thin(x, y, 2000)
    drawn = np.interp(x, x[kept], y[kept])  # the chart joins the points it gets by straight lines
    assert np.abs(drawn - y).max() < 0.01


def test_fewer_than_ten_points_is_refused() -> None:
    with pytest.raises(ValueError, match="points: at least 10"):
        thin(np.arange(10.0), np.arange(10.0), 9)
