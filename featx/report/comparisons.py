"""The numbers a verdict rests on beyond the records' own: the paired bootstrap of two records'
stored predictions, and whether a record clears the floor a constant prediction sets (the
majority class, or the training mean). Writes no sentence: `featx.report.verdict` does.
"""
from __future__ import annotations

import math

import numpy as np

from featx.errors import FeatxError
from featx.runs.schema import Record
from featx.report.collected import Collected
from featx.tasks import TASKS

# Metrics a constant prediction leaves undefined, whose floor is 0.
CORRELATIONS = frozenset({"pearson", "spearman"})

# The least share of what its correlation explains (r^2 of the mean's squared error) that a
# prediction must remove to be read as predicting the targets (`_squared_floor`).
MIN_SQUARED_GAIN = 0.1


def floor_not_cleared(collected: Collected, record: Record, primary: str, runs_dir) -> dict | None:
    """The majority baseline's score and the comparison with it, when `record` is not measurably
    above it: no higher on the point value, or a paired interval of the gain reaching 0. None
    when it is above it, or when there is no majority record with a defined score to compare.
    A fine-tune collapsed to one class (its loss flat at ln K: a known failure of BERT on small
    data, or a learning rate that did not suit) reads as a baseline otherwise, and frozen
    features "beat" it."""
    majority = [r for r in collected.main if r.baseline == "majority" and r.primary_metric == primary]
    value = metric_value(record, primary)
    if primary in CORRELATIONS and (not majority or not math.isfinite(metric_value(majority[0], primary))):
        # A constant prediction (the training mean) has no correlation: its floor is 0, and a
        # score is above it when its own interval is. Without this floor, random targets at
        # Pearson -0.05 would read "no measurable difference: frozen features are as good".
        ci = record.metrics_ci[primary]
        low = ci[0] if ci and ci[0] is not None and math.isfinite(ci[0]) else None
        if value > 0 and (low is None or low > 0):
            return _squared_floor(collected, record, majority, runs_dir)
        return {"correlation": True}
    if not majority or not math.isfinite(m := metric_value(majority[0], primary)):
        return None
    comparison = paired_bootstrap(collected, record, majority[0], primary, runs_dir)
    if value > m and (comparison is None or not all(math.isfinite(v) for v in comparison["difference_ci"])
                      or comparison["difference_ci"][0] > 0):
        return None
    return {"value": m, "comparison": comparison, "regression": TASKS[record.task].regression}


def _squared_floor(collected: Collected, record: Record, majority: list[Record], runs_dir) -> dict | None:
    """A correlation above 0 from predictions not measurably closer to the targets than the
    training mean's. Pearson ignores the scale; the squared error does not: a fine-tune whose
    loss stays flat can predict the mean to within 1e-3 of the targets' spread, correlate 0.89
    with them, and would otherwise read as a baseline that frozen features reach 96% of.
    Predictions r-correlated with the targets and fitted to their scale remove about r^2 of the
    mean's squared error (1 - r^2 left); such near-constant ones remove far less (0.0004 of it
    at r = 0.89), which a paired bootstrap still finds measurable on enough rows. So the gain
    must be measurable (the paired bootstrap of the two squared errors, where the predictions
    are there to pair) and at least a tenth of r^2: a prediction shrunk to under about 5% of
    its fitted scale fails it."""
    if record.head == "identity":  # the no-training cosine row: on its own scale, judged by order alone
        return None
    mse, r = record.metrics["mse"], record.metrics["pearson"]
    mean = majority[0].metrics["mse"] if majority else None
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (mse, mean, r)) or mean <= 0:
        return None
    comparison = paired_bootstrap(collected, record, majority[0], "mse", runs_dir)
    high = comparison["difference_ci"][1] if comparison is not None else None
    measurable = high < 0 if high is not None and math.isfinite(high) else mse < mean
    if measurable and 1 - mse / mean >= MIN_SQUARED_GAIN * r * r:
        return None
    return {"correlation": True, "squared": (mse, mean)}


def paired_bootstrap(collected: Collected, a: Record, b: Record, metric: str, runs_dir) -> dict | None:
    """featx.stats.bootstrap.paired on the two records' stored predictions, resampling the
    distinct rows when some repeat another (`collected.repeats`); None when either is missing or
    they are not predictions of the same rows."""
    from featx.stats import bootstrap
    from featx.runs.records import read_predictions, record_dir

    if runs_dir is None or a.task != b.task:
        return None
    try:
        pa = read_predictions(record_dir(runs_dir, a), a)
        pb = read_predictions(record_dir(runs_dir, b), b)
    except FeatxError:
        return None
    if not (np.array_equal(pa.ids, pb.ids) and np.array_equal(pa.labels, pb.labels)):
        return None
    repeats = collected.repeats
    groups = repeats.groups_of(pa.ids) if repeats is not None else None
    if groups is None and repeats is not None and repeats.repeated:
        return None  # not the rows whose repeats were counted: resampled as rows, copies would count
    result = bootstrap.paired(a.task, metric, pa.labels, (pa.scores, pa.threshold),
                              (pb.scores, pb.threshold), groups=groups)
    return result | {"split": a.protocol["report_on"]}


def metric_value(record: Record, metric: str) -> float:
    """The record's `metric` (NaN where it is undefined: `parse_record`)."""
    return record.metrics[metric]
