"""The part of a series a chart asks for: a range of its axis, thinned to at most so many points."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from learnerkit.scheduler.errors import InvalidRequestError
from learnerkit.scheduler.series.history import Axis, Series
from learnerkit.scheduler.series.thinning import MIN_POINTS, thin

DEFAULT_POINTS = 2000
MAX_POINTS = 5000
"""What a chart a few thousand pixels wide can draw: more points than pixels add bytes, not detail."""


@dataclass(frozen=True)
class SeriesWindow:
    name: str
    axis: Axis
    total: int
    """The series' points along this axis."""
    in_range: int
    """Its points in the range asked for; more than ``len(x)`` when they were thinned."""
    x: list[float]
    y: list[float]
    first: float | None
    """The axis' first and last value over the whole series (for a chart to zoom out to); None when empty."""
    last: float | None


def window(series: Series, axis: Axis, *, start: float | None, end: float | None, points: int) -> SeriesWindow:
    """The points of ``series`` with ``start <= x <= end`` (either open), thinned to ``points`` at most;
    `InvalidRequestError` naming the parameter that is wrong."""
    for field, value in (("from", start), ("to", end)):
        if value is not None and not math.isfinite(value):
            raise InvalidRequestError(f"{field}: a finite number; got {value}")
    if start is not None and end is not None and start > end:
        raise InvalidRequestError(f"from: must not be after to; got from={start:g}, to={end:g}")
    if not MIN_POINTS <= points <= MAX_POINTS:
        raise InvalidRequestError(f"points: from {MIN_POINTS} to {MAX_POINTS}; got {points}")
    column = series.along(axis)
    low = 0 if start is None else int(np.searchsorted(column.x, start, side="left"))
    high = len(column.x) if end is None else int(np.searchsorted(column.x, end, side="right"))
    x, y = column.x[low:high], column.y[low:high]
    kept = thin(x, y, points)
    return SeriesWindow(
        name=series.name,
        axis=axis,
        total=len(column.x),
        in_range=len(x),
        x=x[kept].tolist(),
        y=y[kept].tolist(),
        first=float(column.x[0]) if len(column.x) else None,
        last=float(column.x[-1]) if len(column.x) else None,
    )
