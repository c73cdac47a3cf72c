"""How far a sweep's fit may be believed, and what a sweep page may lead with (issue 26).

A least-squares polynomial through three to five cases is a guess beyond them: two identical
sweeps up to 2,000 consumers gave 4.5 s and 6.8 s "at 100K". So a fit is drawn only with its
95 % prediction interval (the band a new case at that size would fall in, given the scatter
of the measured ones around the fit), a fit with no residual degrees of freedom (as many
cases as coefficients) is not drawn at all, and the headline never shows a fitted number
beyond REACH times the largest measured size: the measured cases lead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import isfinite, sqrt
from typing import Any

import numpy as np

from results_contract.headline import HeadlineP99, of_case

LEVEL = 0.95
"""The prediction interval's coverage."""
REACH = 2
"""A fitted value is a headline number only up to REACH × the largest measured consumers."""


@dataclass(frozen=True)
class FitBand:
    """A sweep fit (sweep-summary.json `fits`) with what its prediction interval needs."""

    coefficients: tuple[float, ...]
    xs: tuple[float, ...]
    scale: float
    pinv: Any  # (XᵀX)⁻¹Xᵀ of the scaled design matrix, shape (degree + 1, n)
    s: float  # residual standard deviation
    t: float  # Student t quantile at LEVEL with n - p degrees of freedom

    @property
    def largest(self) -> float:
        return max(self.xs)

    def value(self, x: float) -> float:
        return sum(c * x**k for k, c in enumerate(self.coefficients))

    def interval(self, x: float) -> tuple[float, float]:
        """The LEVEL prediction interval of one new case at `x` consumers."""
        row = np.array([(x / self.scale) ** k for k in range(len(self.coefficients))])
        # x0ᵀ(XᵀX)⁻¹x0 = |pinv(X)ᵀ x0|², without forming the badly conditioned XᵀX.
        leverage = float(np.sum((self.pinv.T @ row) ** 2))
        half = self.t * self.s * sqrt(1.0 + leverage)
        y = self.value(x)
        return y - half, y + half


def fit_band(fit: Mapping[str, Any] | None) -> FitBand | None:
    """The fit with its interval, or None when it has none: missing, or no residual degree of
    freedom (a line through two cases, a quadratic through three: they fit exactly, noise
    included, and say nothing about their error)."""
    if not fit:
        return None
    coefficients = tuple(float(c) for c in fit.get("coefficients") or ())
    points = [(float(x), float(y)) for x, y in fit.get("points") or []]
    p = len(coefficients)
    if not p or len(points) - p < 1:
        return None
    xs = np.array([x for x, _ in points])
    ys = np.array([y for _, y in points])
    scale = float(max(abs(xs).max(), 1.0))
    design = np.vander(xs / scale, p, increasing=True)
    fitted = np.array([sum(c * x**k for k, c in enumerate(coefficients)) for x in xs])
    dof = len(points) - p
    s = sqrt(float(np.sum((ys - fitted) ** 2)) / dof)
    # Student's t quantile from scipy.special, imported here: `scipy.stats` (the same
    # `t.ppf`) took 0.8-1.0 CPU-s to import, in every process that imports reports.render
    # (each pytest process, `bench run`, `bench report`), `scipy.special` 0.4.
    from scipy.special import stdtrit

    t = float(stdtrit(dof, 0.5 + LEVEL / 2))
    if not (isfinite(s) and isfinite(t)):
        return None
    return FitBand(coefficients, tuple(xs), scale, np.linalg.pinv(design), s, t)


@dataclass(frozen=True)
class SeriesHeadline:
    """What a sweep page leads with for one series: its largest measured case, then the fit
    at REACH × that size with its interval (None without an interval)."""

    name: str
    case: Mapping[str, Any]
    p99: HeadlineP99
    fit_at: float | None = None
    fit_value: float | None = None
    fit_interval: tuple[float, float] | None = None


def series_headline(
    name: str, cases: Sequence[Mapping[str, Any]], fit: Mapping[str, Any] | None
) -> SeriesHeadline | None:
    measured = [c for c in cases if isinstance(c.get("consumers"), int | float)]
    if not measured:
        return None
    largest = max(measured, key=lambda c: (c["consumers"], c.get("connection_time_s") is not None))
    band = fit_band(fit)
    if band is None:
        return SeriesHeadline(name, largest, of_case(largest))
    at = REACH * band.largest
    return SeriesHeadline(name, largest, of_case(largest), at, band.value(at), band.interval(at))
