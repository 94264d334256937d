"""Thinning a series to what a chart can draw, keeping its shape: MinMaxLTTB (tsdownsample, docs/dependencies.md).

LTTB (Largest-Triangle-Three-Buckets, Steinarsson 2013) keeps, per bucket of the series, the point that makes
the largest triangle with its neighbours' picks: peaks, dips and the first and last points survive, flat stretches
are left out. MinMaxLTTB first keeps each small bucket's minimum and maximum and runs LTTB over those alone,
which is as faithful on real series and an order of magnitude faster (tsdownsample's Rust, in parallel): a
million points thin in a few milliseconds. LTTB keeps one point a bucket, not always the bucket's extreme, so the
series' own minimum and maximum are added to what it keeps: a chart never hides how high or low a series went.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from tsdownsample import MinMaxLTTBDownsampler

MIN_POINTS = 10
"""Both ends, both extremes and a few points between."""

_DOWNSAMPLER = MinMaxLTTBDownsampler()  # type: ignore[no-untyped-call]  # tsdownsample has no annotations


def thin(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], points: int) -> npt.NDArray[np.intp]:
    """The indices of at most ``points`` of the series to draw, in order: every index when it has no more, else the
    first, the last, the minimum, the maximum and the points of largest effect between. ``x`` is sorted, ascending;
    ``y`` finite."""
    if points < MIN_POINTS:
        raise ValueError(f"points: at least {MIN_POINTS}; got {points}")
    if len(x) <= points:
        return np.arange(len(x), dtype=np.intp)
    picked = _DOWNSAMPLER.downsample(x, y, n_out=points - 2, parallel=len(x) >= 1_000_000)
    return np.union1d(np.asarray(picked, dtype=np.intp), [np.argmin(y), np.argmax(y)]).astype(np.intp)
