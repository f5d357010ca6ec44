"""A learning curve's numbers: each budget's frozen and tuned scores with the paired difference,
a saturating power law fitted to each side, and where the tuned side becomes measurably better.
No torch; no sentence (`featx.report.curve` writes them).

Every prediction of the curve is on the same test rows, so one set of bootstrap resamples of
those rows (`featx.stats.bootstrap.shared_samples`) scores all of them: a budget's difference,
the fits and the crossing keep the pairing. A budget drawn several times averages its draws,
and each resample also redraws the draws (with replacement), so the interval carries how much
the choice of rows moves the score, not only how many test rows there are.

The fit is score = a - b * n^-c (a the plateau, b >= 0, c > 0) over training rows n, by
scipy's least squares weighted by each budget's standard error. It is trusted for a claim beyond
the measured budgets (the crossing when no budget shows it, what doubling the labels adds) only
when it is `supported`: four budgets or more, and residuals within the budgets' noise.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from featx.stats import bootstrap

# Resamples refitted for the fits' intervals (each is two least-squares fits).
FIT_RESAMPLES = 200
# A fit is supported when its reduced chi-square (residuals in standard errors) is at most this.
MAX_CHI2 = 4.0
MIN_FIT_BUDGETS = 4
# The crossing is looked for between the smallest budget / SPAN and the largest x SPAN rows.
SPAN = 16.0


@dataclass(frozen=True)
class BudgetPredictions:
    """One budget's predictions on the test rows: per draw, the frozen side's and the tuned
    side's ((S, n, ...) score stack, threshold)."""
    size: int
    rows: int
    full: bool
    frozen: list
    tuned: list


def power_law(n, a: float, b: float, c: float):
    return a - b * np.power(n, -c)


# Every primary metric is at most 1 (accuracy, F1, MCC, AUC, correlations, r2): a plateau above it
# is a curve the data cannot bound.
CEILING = 1.0


def fit_power_law(n: np.ndarray, score: np.ndarray, sigma: np.ndarray | None = None) -> dict | None:
    """a, b, c of score = a - b * n^-c (a <= CEILING, b >= 0, 0 < c <= 3) by weighted least squares,
    with the reduced chi-square and whether the fit is `supported`: four budgets or more,
    residuals within the noise, and a plateau below the ceiling (one at it means the budgets
    show no saturation: nothing beyond them can be read off the fit). None when it cannot be
    fitted (fewer than three budgets, a non-finite score, or no convergence)."""
    from scipy.optimize import OptimizeWarning, curve_fit

    n, score = np.asarray(n, float), np.asarray(score, float)
    if len(n) < 3 or not np.isfinite(score).all():
        return None
    sigma = None if sigma is None else np.maximum(np.asarray(sigma, float), 1e-4)
    start = (min(float(score.max()) + 0.01, CEILING - 1e-3),
             max(1e-3, float(score.max() - score.min())) * float(n.min()) ** 0.5, 0.5)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            (a, b, c), _ = curve_fit(power_law, n, score, p0=start, sigma=sigma, absolute_sigma=True,
                                     bounds=([-np.inf, 0.0, 1e-3], [CEILING, np.inf, 3.0]), maxfev=20_000)
    except (RuntimeError, ValueError):
        return None
    residual = (score - power_law(n, a, b, c)) / (sigma if sigma is not None else 1.0)
    dof = len(n) - 3
    chi2 = float(np.sum(residual ** 2) / dof) if dof > 0 and sigma is not None else None
    supported = len(n) >= MIN_FIT_BUDGETS and chi2 is not None and chi2 <= MAX_CHI2 and a < CEILING - 1e-4
    return {"a": float(a), "b": float(b), "c": float(c), "chi2": chi2, "supported": bool(supported)}


def crossing(frozen: dict, tuned: dict, low: float, high: float) -> float:
    """The fewest rows in [low, high] from which the fitted tuned curve stays above the fitted
    frozen one: -inf when it is above across the range, +inf when it is not above at its end."""
    grid = np.geomspace(low, high, 400)
    gap = power_law(grid, tuned["a"], tuned["b"], tuned["c"]) - power_law(grid, frozen["a"], frozen["b"], frozen["c"])
    ahead = gap > 0
    if ahead.all():
        return -math.inf
    if not ahead[-1]:
        return math.inf
    last_behind = int(np.flatnonzero(~ahead)[-1])
    # Between the last grid point behind and the first ahead, linear in log n.
    x0, x1, g0, g1 = np.log(grid[last_behind]), np.log(grid[last_behind + 1]), gap[last_behind], gap[last_behind + 1]
    return float(np.exp(x0 + (x1 - x0) * (-g0) / (g1 - g0)))


def analyse(task: str, metric: str, y: np.ndarray, budgets: list[BudgetPredictions], *, groups=None,
            n_resamples: int = bootstrap.N_RESAMPLES, seed: int = 0) -> dict:
    """The curve's numbers (JSON values): per budget both sides and the difference with their
    intervals; the fits; the crossover measured on the budgets and the fitted crossing; the
    budgets up to which the frozen side is ahead; what doubling the largest budget's rows adds."""
    flat = [p for b in budgets for side in (b.frozen, b.tuned) for p in side]
    samples = bootstrap.shared_samples(task, metric, y, flat, n_resamples=n_resamples, seed=seed, groups=groups)
    values = np.array([_point(task, metric, y, p) for p in flat])  # NaN where the rows leave it undefined
    distinct_groups = bootstrap.distinct_rows(groups, len(y))
    distinct = len(y) if distinct_groups is None else int(distinct_groups.max()) + 1
    rng = np.random.default_rng([seed, 1])
    rows, sides, at = [], {"frozen": [], "tuned": []}, 0
    for budget in budgets:
        d = len(budget.frozen)
        f_points, t_points = values[at:at + d], values[at + d:at + 2 * d]
        f_draws, t_draws = samples[at:at + d], samples[at + d:at + 2 * d]  # (D, B)
        at += 2 * d
        # Each resample redraws the draws too: a weight per draw, how often it was drawn.
        weight = rng.multinomial(d, np.full(d, 1 / d), size=samples.shape[1]).T.astype(float)  # (D, B)
        f_mean, t_mean = _weighted(f_draws, weight), _weighted(t_draws, weight)  # (B,)
        sides["frozen"].append(f_mean)
        sides["tuned"].append(t_mean)
        rows.append({"size": budget.size, "rows": budget.rows, "full": budget.full, "draws": d,
                     "frozen": _side(f_points, f_mean, distinct), "tuned": _side(t_points, t_mean, distinct),
                     "difference": _side(t_points - f_points, t_mean - f_mean, distinct)})
    n = np.array([b.rows for b in budgets], float)
    fits, refits = {}, {}
    for side, parts in sides.items():
        stacked = np.stack(parts)  # (budgets, B)
        fits[side], refits[side] = _fit(n, np.array([r[side]["value"] for r in rows]), stacked)
    return {"metric": metric, "budgets": rows, "fits": fits, "crossover": measured_crossover(rows),
            "frozen_ahead_until": frozen_ahead_until(rows), "tuned_ahead_until": tuned_ahead_until(rows),
            "fitted_crossing": _fitted_crossing(n, fits, refits),
            "doubling": _doubling(n, fits, refits)}


def _weighted(draws: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """(B,): each resample's mean over the draws it drew (`weight`: how often), of those whose
    metric is defined there; NaN where none is."""
    defined = np.isfinite(draws)  # (D, B)
    total = np.where(defined, weight, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, np.where(defined, draws * weight, 0.0).sum(axis=0) / total, np.nan)


def _point(task: str, metric: str, y: np.ndarray, prediction) -> float:
    stack, threshold = prediction
    ones = np.ones((1, len(y)))
    return float(bootstrap.metric_samples(task, ones, np.asarray(y), stack, threshold, metric=metric)[metric][0])


def _side(points: np.ndarray, samples: np.ndarray, distinct: int) -> dict:
    """A budget's side (or difference): the mean over its draws where defined (NaN when none
    is), its interval, standard error and each draw's value."""
    finite = samples[np.isfinite(samples)]
    defined = points[np.isfinite(points)]
    return {"value": float(np.mean(defined)) if len(defined) else math.nan,
            "ci": bootstrap.percentile_interval(samples, distinct),
            "se": float(np.std(finite, ddof=1)) if len(finite) > 1 else None,
            "per_draw": [float(v) for v in points]}


def measured_crossover(rows: list[dict]) -> dict | None:
    """The smallest budget from which the tuned side is measurably better (the difference's
    interval above zero there and at every larger budget), or None."""
    above = [r["difference"]["ci"][0] > 0 for r in rows]
    if not above or not above[-1]:
        return None
    first = len(above)
    while first > 0 and above[first - 1]:
        first -= 1
    before = rows[first - 1] if first > 0 else None
    return {"size": rows[first]["size"], "rows": rows[first]["rows"],
            "after_size": None if before is None else before["size"], "at_smallest": first == 0}


def frozen_ahead_until(rows: list[dict]) -> dict | None:
    """The largest budget up to which the frozen side is measurably better (the difference's
    interval below zero there and at every smaller budget), or None."""
    return _ahead_until(rows, [r["difference"]["ci"][1] < 0 for r in rows])


def tuned_ahead_until(rows: list[dict]) -> dict | None:
    """The largest budget up to which the tuned side is measurably better (the difference's
    interval above zero there and at every smaller budget), or None: with a crossover, every
    budget; without one, where the fine-tune's lead ends before the full split."""
    return _ahead_until(rows, [r["difference"]["ci"][0] > 0 for r in rows])


def _ahead_until(rows: list[dict], ahead: list[bool]) -> dict | None:
    last = 0
    while last < len(ahead) and ahead[last]:
        last += 1
    return None if last == 0 else {"size": rows[last - 1]["size"], "rows": rows[last - 1]["rows"]}


def _fit(n: np.ndarray, points: np.ndarray, samples: np.ndarray) -> tuple[dict | None, list]:
    """The fit of the budgets' values, weighted by their standard errors, with the plateau's
    interval; and the refits of the first FIT_RESAMPLES resamples (`samples`: (budgets, B))."""
    keep = np.isfinite(points)  # a budget its rows leave undefined is left out of the fit
    n, points, samples = n[keep], points[keep], samples[keep]
    se = np.nanstd(samples, axis=1, ddof=1) if samples.shape[1] > 1 else None
    fit = fit_power_law(n, points, se)
    if fit is None:
        return None, []
    refits = [fit_power_law(n, samples[:, b], se) for b in range(min(FIT_RESAMPLES, samples.shape[1]))]
    plateaus = np.array([r["a"] for r in refits if r is not None])
    fit["a_ci"] = bootstrap.percentile_interval(plateaus) if len(plateaus) >= 0.9 * len(refits) else [math.nan] * 2
    return fit, refits


def _fitted_crossing(n: np.ndarray, fits: dict, refits: dict) -> dict | None:
    """Where the fitted curves cross (tuned ahead from there on: `crossing`), with its interval
    over the refits, each resample's crossing counted even when it lies beyond an end of the
    range (then the interval is open there); `extrapolated` when it lies outside the budgets."""
    if fits["frozen"] is None or fits["tuned"] is None:
        return None
    low, high = n.min() / SPAN, n.max() * SPAN
    point = crossing(fits["frozen"], fits["tuned"], low, high)
    pairs = [(f, t) for f, t in zip(refits["frozen"], refits["tuned"]) if f is not None and t is not None]
    found = np.array([crossing(f, t, low, high) for f, t in pairs])
    # Too few refits to speak for the resamples: no interval (as percentile_interval asks).
    enough = len(pairs) >= 0.9 * max(1, len(refits["frozen"]))
    ci = [float(v) for v in np.percentile(found, [2.5, 97.5], method="nearest")] if enough else [math.nan, math.nan]
    supported = fits["frozen"]["supported"] and fits["tuned"]["supported"]
    inside = math.isfinite(point) and n.min() <= point <= n.max()
    return {"rows": point if math.isfinite(point) else None, "side": _beyond(point), "ci": ci,
            "extrapolated": math.isfinite(point) and not inside, "supported": bool(supported)}


def _beyond(point: float) -> str | None:
    """Which way a crossing lies outside the range it is looked for in (None: inside it)."""
    return None if math.isfinite(point) else ("tuned ahead throughout" if point < 0 else "no crossing in range")


def _doubling(n: np.ndarray, fits: dict, refits: dict) -> dict | None:
    """What each fitted side gains from the largest budget's rows to twice as many (an
    extrapolation: given only where both fits are supported)."""
    top = float(n.max())
    if any(fit is None or not fit["supported"] for fit in fits.values()):
        return None

    def gain(f: dict) -> float:
        return float(power_law(2 * top, f["a"], f["b"], f["c"]) - power_law(top, f["a"], f["b"], f["c"]))
    out = {}
    for side, fit in fits.items():
        gains = np.array([gain(f) for f in refits[side] if f is not None])
        enough = len(gains) >= 0.9 * max(1, len(refits[side]))
        out[side] = {"gain": gain(fit), "ci": bootstrap.percentile_interval(gains) if enough else [math.nan] * 2}
    return out | {"from_rows": int(top), "to_rows": int(2 * top), "extrapolated": True}
