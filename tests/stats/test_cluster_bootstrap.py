"""Repeated test rows are one observation: the bootstrap draws groups of identical rows, each with
all its copies, so 20 rows repeated 10 times are as uncertain as 20 rows; with no row repeated,
the draws are exactly the row bootstrap's."""
from __future__ import annotations

import numpy as np
import pytest

from featx.errors import FeatxError
from featx.stats import bootstrap as BS
from tests.stats.test_bootstrap import problem


@pytest.mark.parametrize("task", ["binary", "multiclass", "multilabel", "regression"])
def test_without_repeated_rows_every_number_is_the_row_bootstraps(task):
    rng = np.random.default_rng(5)
    y, scores = problem(task, 90, rng)
    _, other = problem(task, 90, rng)
    metric = {"binary": "mcc", "multiclass": "mcc", "multilabel": "micro_f1", "regression": "pearson"}[task]
    for groups in (np.arange(90), 7 * np.arange(90)[::-1], np.arange(90, dtype=np.uint32)):  # any distinct ids
        same = np.testing.assert_equal  # exactly equal, NaN where NaN
        same(BS.intervals(task, y, scores[None], groups=groups), BS.intervals(task, y, scores[None]))
        same(BS.paired(task, metric, y, (scores[None], 0.4), (other[None], 0.4), groups=groups),
             BS.paired(task, metric, y, (scores[None], 0.4), (other[None], 0.4)))
        assert BS.standard_error(task, metric, y, scores, groups=groups) == BS.standard_error(task, metric, y, scores)
        assert BS.difference_se(task, metric, y, (scores, 0.4), (other, 0.4), groups=groups) == \
            BS.difference_se(task, metric, y, (scores, 0.4), (other, 0.4))


@pytest.mark.parametrize("layout", ["tiled", "each row ten times", "shuffled"])
def test_twenty_rows_repeated_ten_times_are_as_uncertain_as_twenty_rows(layout):
    """Red team: 20 distinct test rows repeated 10 times read "mcc 0.8000 [0.7099, 0.8796] on
    200 test rows"; resampling the 20 distinct rows gives about [0.5, 1.0]."""
    y = np.array([0, 1] * 10)
    scores = np.where(y == 1, 0.9, 0.1)
    scores[[0, 1]] = [0.9, 0.1]  # two errors: mcc 0.8
    copies = {"tiled": np.tile(np.arange(20), 10), "each row ten times": np.repeat(np.arange(20), 10),
              "shuffled": np.random.default_rng(0).permutation(np.tile(np.arange(20), 10))}[layout]
    groups = copies * 13 + 5  # any integer per distinct row
    rows = BS.intervals("binary", y, scores[None])["mcc"]
    repeated = BS.intervals("binary", y[copies], scores[copies][None], groups=groups)["mcc"]
    naive = BS.intervals("binary", y[copies], scores[copies][None])["mcc"]
    assert repeated == pytest.approx(rows, abs=1e-12)  # every metric here is a ratio: ten copies weigh alike
    assert repeated[0] < 0.55 and repeated[1] == pytest.approx(1.0)
    assert naive[1] - naive[0] < 0.5 * (repeated[1] - repeated[0])  # what the row bootstrap claimed
    other = np.full(20, 0.9)
    paired = BS.paired("binary", "accuracy", y[copies], (scores[copies][None], 0.5), (other[copies][None], 0.5),
                       groups=groups)
    plain = BS.paired("binary", "accuracy", y, (scores[None], 0.5), (other[None], 0.5))
    assert paired["n"] == 200 and paired["distinct"] == 20 and "distinct" not in plain
    assert paired["difference_ci"] == pytest.approx(plain["difference_ci"], abs=1e-12)


def test_too_few_distinct_rows_give_no_interval_however_often_they_repeat():
    y = np.tile([0, 1, 0, 1], 50)
    scores = np.tile([0.2, 0.8, 0.6, 0.9], 50)
    groups = np.tile(np.arange(4), 50)
    assert all(np.isnan(BS.intervals("binary", y, scores[None], groups=groups)["accuracy"]))
    assert all(np.isfinite(BS.intervals("binary", y, scores[None])["accuracy"]))  # 200 rows, counted as rows
    assert all(np.isnan(BS.paired("binary", "accuracy", y, (scores[None], 0.5), (scores[None] / 2, 0.5),
                                  groups=groups)["difference_ci"]))


@pytest.mark.parametrize("groups", [np.zeros(5), np.arange(4), np.arange(10).reshape(5, 2), ["a"] * 5])
def test_groups_that_are_not_one_integer_per_row_are_refused(groups):
    with pytest.raises(FeatxError, match="one integer per row"):
        BS.intervals("binary", np.array([0, 1, 0, 1, 0]), np.full((1, 5), 0.5), groups=groups)
