"""A learning curve's numbers: the power-law fit against scipy's own, the crossover rule on
constructed curves, and intervals that hold a crossing known in advance."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq, curve_fit

from featx.stats.curve import (BudgetPredictions, analyse, crossing, fit_power_law, frozen_ahead_until,
                               measured_crossover, power_law)

N = np.array([16, 32, 64, 128, 256, 512, 1024, 2048], float)


@pytest.mark.parametrize("a, b, c", [(0.9, 2.0, 0.5), (0.75, 0.6, 0.3), (0.6, 5.0, 0.9)])
def test_the_fit_recovers_a_known_curve_as_scipy_does(a, b, c):
    score = power_law(N, a, b, c)
    fit = fit_power_law(N, score, np.full(len(N), 0.01))
    (sa, sb, sc), _ = curve_fit(power_law, N, score, p0=(a + 0.05, b * 1.5, c * 0.7), maxfev=20_000)
    assert fit["a"] == pytest.approx(a, abs=1e-4) and fit["a"] == pytest.approx(sa, abs=1e-4)
    assert fit["b"] == pytest.approx(sb, rel=1e-3) and fit["c"] == pytest.approx(sc, rel=1e-3)
    assert fit["supported"] and fit["chi2"] < 1e-6


def test_a_fit_of_noise_around_a_line_it_cannot_follow_is_not_supported():
    score = np.array([0.5, 0.7, 0.5, 0.7, 0.5, 0.7, 0.5, 0.7])
    fit = fit_power_law(N, score, np.full(len(N), 0.01))
    assert fit is not None and not fit["supported"]
    assert fit_power_law(N[:2], score[:2]) is None  # fewer budgets than parameters


def test_the_crossing_of_two_fitted_curves():
    frozen, tuned = {"a": 0.8, "b": 0.6, "c": 0.3}, {"a": 0.93, "b": 2.0, "c": 0.45}
    truth = brentq(lambda n: power_law(n, **tuned) - power_law(n, **frozen), 2, 1e5)
    assert crossing(frozen, tuned, 1, 1e5) == pytest.approx(truth, rel=0.01)
    assert crossing(tuned, frozen, 1, 1e5) == math.inf  # frozen overtakes: not a crossover
    assert crossing(frozen, {"a": 0.99, "b": 0.0, "c": 0.5}, 1, 1e5) == -math.inf  # tuned ahead everywhere


def _rows(lows_highs):
    return [{"size": 8 * 2 ** i, "rows": 16 * 2 ** i, "difference": {"ci": list(ci)}} for i, ci in enumerate(lows_highs)]


@pytest.mark.parametrize("intervals, crossover, ahead", [
    # crossing: measurably better from the third budget on
    ([(-0.2, -0.1), (-0.05, 0.03), (0.01, 0.06), (0.04, 0.1)], (32, 16), 8),
    # never: no budget, or not the last, is above zero
    ([(-0.2, -0.1), (-0.1, 0.02), (-0.04, 0.03)], None, 8),
    ([(-0.1, 0.1), (0.02, 0.05), (-0.01, 0.04)], None, None),
    # ahead at the smallest budget already
    ([(0.01, 0.1), (0.05, 0.1)], ("smallest", None), None),
    # noisy: above zero, then not, then above: measurably better only from the last run of budgets
    ([(0.01, 0.05), (-0.02, 0.04), (0.02, 0.06), (0.03, 0.08)], (32, 16), None),
])
def test_the_crossover_rule(intervals, crossover, ahead):
    rows = _rows(intervals)
    found = measured_crossover(rows)
    if crossover is None:
        assert found is None
    elif crossover[0] == "smallest":
        assert found["at_smallest"] and found["size"] == 8 and found["after_size"] is None
    else:
        assert (found["size"], found["after_size"]) == crossover and not found["at_smallest"]
    until = frozen_ahead_until(rows)
    assert (until and until["size"]) == ahead


def _predictions(y: np.ndarray, accuracy: float, rng) -> tuple[np.ndarray, float]:
    """Binary scores right on a share `accuracy` of the rows (exactly, at random rows)."""
    right = np.zeros(len(y), bool)
    right[rng.permutation(len(y))[:int(round(accuracy * len(y)))]] = True
    predicted = np.where(right, y, 1 - y)
    return np.where(predicted == 1, 0.9, 0.1)[None].astype(np.float64), 0.5


def _curve(frozen: dict, tuned: dict, seed: int, draws=(5, 5, 5, 3, 3, 1, 1, 1), n_test=2000, spread=0.0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n_test)
    budgets = []
    for i, d in enumerate(draws):
        rows = int(N[i])
        jitter = lambda: rng.normal(0, spread)  # noqa: E731  the draw's own luck
        budgets.append(BudgetPredictions(rows // 2, rows, i == len(draws) - 1,
                                         [_predictions(y, power_law(rows, **frozen) + jitter(), rng) for _ in range(d)],
                                         [_predictions(y, power_law(rows, **tuned) + jitter(), rng) for _ in range(d)]))
    return analyse("binary", "accuracy", y, budgets, seed=seed)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_known_crossing_lies_in_the_reported_interval(seed):
    frozen, tuned = {"a": 0.8, "b": 0.6, "c": 0.3}, {"a": 0.93, "b": 2.0, "c": 0.45}
    truth = brentq(lambda n: power_law(n, **tuned) - power_law(n, **frozen), 2, 1e5)  # about 68 rows
    curve = _curve(frozen, tuned, seed)
    fitted = curve["fitted_crossing"]
    assert fitted["supported"] and fitted["ci"][0] <= truth <= fitted["ci"][1], (truth, fitted)
    assert not fitted["extrapolated"]
    # Measured: frozen ahead at the smallest budgets, tuned from a budget past the crossing on.
    assert curve["frozen_ahead_until"]["rows"] < truth < curve["crossover"]["rows"]
    low, high = curve["fits"]["tuned"]["a_ci"]
    assert low <= 0.93 <= high


def test_curves_that_never_cross_have_no_crossover_and_no_crossing():
    curve = _curve({"a": 0.9, "b": 0.5, "c": 0.4}, {"a": 0.85, "b": 0.5, "c": 0.4}, seed=0)
    assert curve["crossover"] is None and curve["fitted_crossing"]["rows"] is None
    assert curve["frozen_ahead_until"] is not None and curve["frozen_ahead_until"]["rows"] == N[-1]


def test_noisy_draws_widen_the_intervals_and_the_doubling_is_an_extrapolation():
    quiet = _curve({"a": 0.8, "b": 0.6, "c": 0.3}, {"a": 0.93, "b": 2.0, "c": 0.45}, seed=3)
    noisy = _curve({"a": 0.8, "b": 0.6, "c": 0.3}, {"a": 0.93, "b": 2.0, "c": 0.45}, seed=3, spread=0.03)
    width = lambda c: np.diff(c["budgets"][0]["difference"]["ci"])[0]  # noqa: E731  5 draws of 16 rows
    assert width(noisy) > width(quiet)
    doubling = quiet["doubling"]
    assert doubling["extrapolated"] and doubling["to_rows"] == 2 * N[-1]
    expected = power_law(2 * N[-1], 0.93, 2.0, 0.45) - power_law(N[-1], 0.93, 2.0, 0.45)
    assert math.isclose(doubling["tuned"]["gain"], expected, abs_tol=0.01)


def test_an_undefined_draw_leaves_its_budget_to_the_defined_ones():
    """A draw whose metric its rows leave undefined (a constant prediction's correlation) is left
    out of its budget's mean, in the point value and in every resample, instead of making the
    budget, the fits and the crossing undefined."""
    rng = np.random.default_rng(0)
    y = rng.normal(size=400)
    budgets = []
    for i, rows in enumerate((16, 32, 64, 128, 256)):
        quality = 1 - 4 / np.sqrt(rows)
        side = lambda q: (((q * y + (1 - q) * rng.normal(size=400))[None]), 0.5)  # noqa: E731
        frozen = [side(quality) for _ in range(3)]
        if i == 0:
            frozen[1] = (np.zeros((1, 400)), 0.5)  # constant: pearson undefined
        budgets.append(BudgetPredictions(rows, rows, i == 4, frozen, [side(quality + 0.05) for _ in range(3)]))
    curve = analyse("regression", "pearson", y, budgets)
    first = curve["budgets"][0]["frozen"]
    assert math.isnan(first["per_draw"][1]) and math.isfinite(first["value"])
    assert all(math.isfinite(v) for v in first["ci"]) and curve["fits"]["frozen"] is not None


def test_a_lead_of_the_fine_tune_that_ends_before_the_full_split_is_found():
    from featx.stats.curve import tuned_ahead_until

    rows = _rows([(0.01, 0.06), (0.09, 0.16), (0.06, 0.12), (-0.004, 0.05)])  # TREC coarse's shape
    assert measured_crossover(rows) is None and frozen_ahead_until(rows) is None
    assert tuned_ahead_until(rows) == {"size": 32, "rows": 64}


def test_a_curve_still_rising_at_its_largest_budget_is_not_extrapolated():
    """Scores climbing by the same step per doubling fit a power law only with a plateau above 1
    (TREC fine's frozen side fitted a = 2.0): the plateau is held at the ceiling and the fit is not
    supported, so nothing beyond the budgets is read off it."""
    score = 0.40 + 0.08 * np.log2(N / N[0])  # 0.40 .. 0.96, no sign of saturation
    fit = fit_power_law(N, score, np.full(len(N), 0.005))
    assert fit is not None and fit["a"] <= 1.0 and not fit["supported"]
