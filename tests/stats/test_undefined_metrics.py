"""A metric the rows cannot define is NaN, never 0 by a convention: the MCC of one true class,
an F1 without a positive on either side, the r2 or a correlation of a constant target; the
bootstrap says the same of each resample. A constant prediction on rows of two classes keeps the
MCC of 0 the majority baseline sets as the floor."""
from __future__ import annotations

import math

import numpy as np
import pytest

from featx.stats import bootstrap as BS
from featx.stats import metrics as M

ONE_CLASS = np.zeros(8, dtype=np.int64)


@pytest.mark.parametrize("task, y, scores, undefined, defined", [
    # Labelled input of one class (featx predict printed "mcc: 0.0000").
    ("binary", ONE_CLASS, np.full(8, 0.2), {"mcc", "f1", "roc_auc"}, {"accuracy": 1.0}),
    ("binary", ONE_CLASS, np.array([0.9] + [0.2] * 7), {"mcc", "roc_auc"}, {"f1": 0.0, "accuracy": 0.875}),
    ("multiclass", np.full(8, 2), np.eye(3)[[2] * 7 + [1]], {"mcc"}, {"accuracy": 0.875}),
    ("multilabel", np.zeros((8, 3), dtype=np.uint8), np.full((8, 3), 0.1),
     {"micro_f1", "macro_f1", "macro_roc_auc"}, {"subset_accuracy": 1.0}),
    ("regression", np.full((8, 1), 3.0), np.linspace(2, 4, 8)[:, None], {"r2", "pearson", "spearman"}, {}),
    ("regression", np.linspace(2, 4, 8)[:, None], np.full((8, 1), 3.0), {"pearson", "spearman"}, {}),
])
def test_metrics_the_rows_cannot_define_are_nan(task, y, scores, undefined, defined):
    got = M.evaluate(task, y, scores)
    assert {name for name, value in got.items() if math.isnan(value)} == undefined, got
    for name, value in defined.items():
        assert got[name] == pytest.approx(value)
    every_row = BS.metric_samples(task, np.ones((1, len(y))), y, scores[None])
    assert {name for name, values in every_row.items() if math.isnan(values[0])} == undefined


def test_a_constant_prediction_of_two_true_classes_scores_an_mcc_of_0():
    y = np.array([0, 1, 0, 1, 1])
    assert M.evaluate("binary", y, np.full(5, 0.9))["mcc"] == 0.0
    assert M.evaluate("multiclass", y, np.eye(2)[[1] * 5])["mcc"] == 0.0


def test_a_resample_of_one_target_value_has_no_r2():
    y = np.array([[1.0], [2.0], [3.0], [4.0]])
    W = np.array([[0.0, 4, 0, 0], [1, 1, 1, 1]])  # the first draws the value 2 four times
    r2 = BS.metric_samples("regression", W, y, (y + 0.1)[None])["r2"]
    assert math.isnan(r2[0]) and r2[1] == pytest.approx(M.evaluate("regression", y, y + 0.1)["r2"])
