"""A learning curve's budgets and subsets: the ladder doubles to the full split, small budgets
are drawn more often, and each draw's subsets are nested and stratified."""
from __future__ import annotations

import numpy as np
import pytest

from featx.stats import ladder


def test_the_ladder_doubles_to_the_full_split_with_more_draws_at_small_budgets():
    counts = np.array([1000, 1000, 900, 800, 700, 600])  # 5,000 rows: the draws take 1.95 splits
    rungs = ladder.ladder("per_class", counts)
    assert [(r.size, r.draws, r.full) for r in rungs] == [
        (8, 5, False), (16, 5, False), (32, 5, False), (64, 3, False), (128, 3, False), (256, 1, False),
        (512, 1, False), (1000, 1, True)]
    rows = ladder.ladder("rows", np.array([10_000]))
    assert [r.size for r in rows] == [64, 128, 256, 512, 1024, 2048, 4096, 10_000]
    assert [r.draws for r in rows] == [5, 5, 5, 3, 3, 1, 1, 1]


def test_a_rung_that_adds_few_rows_is_left_out():
    # 47 classes, most of them small: past 32 per class a doubling adds few rows.
    counts = np.array([900, 700, 500] + [40] * 14 + [10] * 30)
    sizes = [r.size for r in ladder.ladder("per_class", counts, draws=(1,))]
    rows = [ladder.rows_at(counts, k) for k in sizes]
    assert all(b >= 1.5 * a for a, b in zip(rows, rows[1:])) and sizes[-1] == 900


def test_draws_and_rungs_give_way_to_the_cost_cap():
    counts = np.array([300, 300])
    rungs = ladder.ladder("per_class", counts)
    cost = sum(r.draws * ladder.rows_at(counts, r.size) for r in rungs[:-1])
    assert cost <= 2.0 * counts.sum() and rungs[0].draws == 5  # the costliest rungs lost draws first
    assert sum(r.draws * ladder.rows_at(counts, r.size) for r in ladder.ladder("per_class", counts, max_cost=0.5)[:-1]) \
        <= 0.5 * counts.sum()


def test_the_cost_cap_counts_the_expected_work_of_a_point_not_its_rows():
    counts = np.array([1000, 1000, 900, 800, 700, 600])  # 5,000 rows
    by_rows = ladder.ladder("per_class", counts)
    # A fine-tune on a few rows trains many epochs of few steps: every point costs at least 20%
    # of the full split's work here, so fewer draws and rungs fit in twice the full work.
    work = lambda rows: max(rows, 1000.0)  # noqa: E731
    rungs = ladder.ladder("per_class", counts, work=work)
    spent = sum(r.draws * work(ladder.rows_at(counts, r.size)) for r in rungs[:-1])
    assert spent <= 2.0 * work(5000) and sum(r.draws for r in rungs) < sum(r.draws for r in by_rows)
    # The largest budgets lose their draws first: the smallest, whose scores vary most, keep theirs.
    three = ladder.ladder("per_class", counts, work=work, max_cost=3.0)
    assert [r.draws for r in three[:3]] == [5, 2, 1] and all(a.draws >= b.draws for a, b in zip(three, three[1:]))


def test_the_work_a_dropped_rung_leaves_draws_the_smallest_budgets_again():
    counts = np.array([5000])  # rows: 64, 128, ..., 2048, then the full 5,000
    work = lambda rows: 1500.0 + rows  # noqa: E731  every point costs 1,500 more than its rows
    rungs = ladder.ladder("rows", counts, work=work, max_cost=2.0)
    spent = sum(r.draws * work(ladder.rows_at(counts, r.size)) for r in rungs[:-1])
    # One draw each costs 13,032 > 2 x 6,500: 2,048 goes, and its work draws 64 and 128 again.
    assert [(r.size, r.draws) for r in rungs] == [(64, 2), (128, 2), (256, 1), (512, 1), (1024, 1), (5000, 1)]
    assert spent <= 2.0 * work(5000)


def test_a_given_ladder_keeps_budgets_below_the_full_split_and_its_own_draws():
    rungs = ladder.ladder("per_class", np.array([100, 100]), budgets=(50, 10, 400), draws=(4, 2), until=(10, 50))
    assert [(r.size, r.draws, r.full) for r in rungs] == [(10, 4, False), (50, 2, False), (100, 1, True)]
    capped = ladder.ladder("per_class", np.array([100, 100]), budgets=(50, 90), max_cost=0.5)
    assert [(r.size, r.draws) for r in capped] == [(50, 1), (90, 1), (100, 1)]  # asked for: kept, drawn once


def test_a_split_smaller_than_the_first_budget_is_one_full_rung():
    assert ladder.ladder("per_class", np.array([5, 3])) == [ladder.Rung(5, 1, full=True)]


def _classes(counts) -> np.ndarray:
    return np.repeat(np.arange(len(counts)), counts)


@pytest.mark.parametrize("draw", [0, 3])
def test_per_class_budgets_take_each_class_up_to_the_budget_nested(draw):
    y = np.random.default_rng(1).permutation(_classes([100, 40, 5]))
    places = ladder.positions(ladder.strata("multiclass", y), "per_class", seed=7, draw=draw)
    previous = np.array([], np.int64)
    for size in (8, 16, 32, 64, 100):
        rows = ladder.subset(places, size)
        assert np.bincount(y[rows], minlength=3).tolist() == [min(size, n) for n in (100, 40, 5)]
        assert set(previous) <= set(rows)  # nested: a budget holds every smaller one's rows
        previous = rows
    assert len(ladder.subset(places, 100)) == len(y)


def test_draws_differ_and_a_seed_repeats_its_draws():
    y = _classes([50, 50])
    strata = ladder.strata("binary", y)
    first = ladder.subset(ladder.positions(strata, "per_class", seed=0, draw=0), 8)
    again = ladder.subset(ladder.positions(strata, "per_class", seed=0, draw=0), 8)
    other = ladder.subset(ladder.positions(strata, "per_class", seed=0, draw=1), 8)
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    assert not np.array_equal(first, ladder.subset(ladder.positions(strata, "per_class", seed=1, draw=0), 8))


@pytest.mark.parametrize("task", ["regression", "multilabel"])
def test_row_budgets_hold_each_stratum_in_proportion_at_every_prefix(task):
    rng = np.random.default_rng(0)
    if task == "regression":
        y = rng.normal(size=(2000, 1))
    else:  # a rare label (5%) beside a common one
        y = np.stack([rng.random(2000) < 0.05, rng.random(2000) < 0.6], axis=1).astype(np.uint8)
    strata = ladder.strata(task, y)
    places = ladder.positions(strata, "rows", seed=0, draw=0)
    assert sorted(places.tolist()) == list(range(2000))
    shares = np.bincount(strata) / len(strata)
    previous = np.array([], np.int64)
    for size in (64, 128, 256, 512):
        rows = ladder.subset(places, size)
        assert len(rows) == size and set(previous) <= set(rows)
        counts = np.bincount(strata[rows], minlength=len(shares))
        assert np.all(np.abs(counts - shares * size) <= 1.0 + 1e-9), (size, counts, shares * size)
        previous = rows


def test_a_multilabel_row_is_in_the_stratum_of_its_rarest_label():
    y = np.array([[1, 1, 0], [0, 1, 0], [0, 0, 0], [1, 0, 1]], np.uint8)  # label counts 2, 2, 1
    assert ladder.strata("multilabel", y).tolist() == [0, 1, 3, 2]
