"""A record's numbers are what featx could have written: each metric within its range, counts and
seconds not negative, and, where the record has predictions, its metrics (mean over seeds, their
spread, each seed's) what those predictions give; predictions hold finite scores. Anything else
is refused as a damaged record, by `read_predictions` and by the report, naming the file and the
fix; the report never shows the number."""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math

import numpy as np
import pytest

from featx.errors import FeatxError
from featx.report.write import write_report
from featx.runs.fields import METRIC_RANGES
from featx.runs.records import Predictions, read_predictions, read_record, record_dir, record_name, write_json, \
    write_record
from featx.runs.schema import record_json
from featx.stats import metrics as M
from featx.tasks import TASKS
from tests.generated import refused
from tests.report.test_report import fake


def _written(tmp_path, task: str = "multiclass", seeds: int = 3):
    """A multi-seed probe record and its predictions as the probe writes them: metrics the mean
    of each seed's, metrics_std their spread, per_seed each seed's."""
    rng = np.random.default_rng(0)
    n, k = 45, 3
    y = rng.integers(0, k, n) if task == "multiclass" else rng.normal(size=n)
    if task == "multiclass":
        scores = rng.dirichlet(np.ones(k), size=(seeds, n))  # (S, n, k)
        scores[:, np.arange(n), y] += rng.random((seeds, n)) * 2  # mostly right
        scores /= scores.sum(axis=2, keepdims=True)
    else:
        scores = y[None] + rng.normal(size=(seeds, n))
    per_seed = [M.evaluate(task, y, s) for s in scores]
    stacked = {m: np.array([e[m] for e in per_seed]) for m in per_seed[0]}
    record = fake("probe", task, "mean@3", "logistic", 0.5, seeds=list(range(seeds)), per_seed=per_seed,
                  metrics={m: float(np.mean(v)) for m, v in stacked.items()},
                  metrics_std={m: float(np.std(v)) for m, v in stacked.items()})
    predictions = Predictions(np.array([f"t{i}" for i in range(n)]), y, scores, 0.5)
    stored = write_record(record_dir(tmp_path / "runs", record), record, predictions)
    return stored, record_dir(tmp_path / "runs", stored) / record_name(stored.features, stored.head)


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_a_genuine_multi_seed_record_agrees_with_its_predictions(tmp_path, task):
    stored, path = _written(tmp_path, task)
    predictions = read_predictions(path.parent, read_record(path))
    assert predictions.scores.shape[0] == 3 and len(stored.per_seed) == 3
    assert write_report(tmp_path / "runs", tmp_path / "reports", "fx")["md"].is_file()


@pytest.mark.parametrize("edit, said", [
    (lambda r: r["metrics"].update(accuracy=0.999), "its metrics.accuracy is 0.999, its predictions give"),
    (lambda r: r["metrics"].update(mcc=r["metrics"]["mcc"] + 1e-4), "its metrics.mcc is"),
    (lambda r: r["metrics_std"].update(accuracy=0.0), "its metrics_std.accuracy is 0"),
    (lambda r: r["per_seed"][1].update(macro_f1=0.99), "its per_seed[1].macro_f1 is 0.99"),
    (lambda r: r.update(per_seed=r["per_seed"][:1]), "it records 1 seed(s), its predictions hold 3"),
])
def test_a_record_whose_metrics_its_predictions_do_not_give_is_refused(tmp_path, edit, said):
    _, path = _written(tmp_path)
    raw = json.loads(path.read_text())
    edit(raw)
    write_json(path, raw)
    record = read_record(path)  # the record's values are each possible: only its predictions say otherwise
    with pytest.raises(FeatxError) as error:
        read_predictions(path.parent, record)
    message = str(error.value)
    assert said in message and "mean@3/logistic" in message and message.endswith("rerun featx probe"), message
    refused("disagrees with its own predictions", write_report, tmp_path / "runs", tmp_path / "reports", "fx")
    assert not (tmp_path / "reports").exists() or "0.9990" not in "".join(
        p.read_text() for p in (tmp_path / "reports").rglob("*.md"))


def _probe(**fields) -> dict:
    return record_json(fake("probe", "binary", "mean@6", "logistic", 0.7)) | fields


@pytest.mark.parametrize("change, said", [
    (lambda r: r["metrics"].update(accuracy=1.5), "'metrics.accuracy' is 1.5, outside accuracy's range [0, 1]"),
    (lambda r: r["metrics"].update(roc_auc=-0.1), "outside roc_auc's range [0, 1]"),
    (lambda r: r["metrics"].update(mcc=-1.2), "outside mcc's range [-1, 1]"),
    (lambda r: r["metrics"].update(mcc=math.inf), "outside mcc's range"),
    (lambda r: r["per_seed"][0].update(f1=2.0), "'per_seed[0].f1' is 2.0"),
    (lambda r: r.update(metrics_ci={"mcc": [0.2, 1.3]}), "'metrics_ci.mcc' is 1.3"),
    (lambda r: r.update(metrics_ci={"mcc": [0.6, 0.4]}), "not an interval (its low end above its high end)"),
    (lambda r: r.update(selection_score=1.7), "'selection_score' is 1.7, outside mcc's range"),
    (lambda r: r["metrics_std"].update(mcc=-0.01), "'metrics_std.mcc' is -0.01, not a finite number of zero"),
    (lambda r: r.update(n_eval=-5), "'n_eval' is -5"),
    (lambda r: r.update(n_train=-1), "'n_train' is -1"),
    (lambda r: r.update(fit_seconds=-2.0), "'fit_seconds' is -2.0"),
    (lambda r: r.update(cache_bytes=-1), "'cache_bytes' is -1"),
    (lambda r: r.update(selection_se=math.nan), "'selection_se' is nan"),
    (lambda r: r.update(threshold=1.5), "'threshold' is 1.5, not a probability"),
])
def test_an_impossible_value_is_refused(tmp_path, change, said):
    raw = _probe()
    change(raw)
    with pytest.raises(FeatxError, match="is malformed") as error:
        read_record(write_json(tmp_path / "r.json", raw))
    assert said in str(error.value), str(error.value)


@pytest.mark.parametrize("task, metrics", [
    ("regression", {"r2": -40.0, "mse": 1e12, "mae": 0.0, "pearson": -1.0, "spearman": math.nan}),
    ("binary", {"accuracy": 1.0, "f1": math.nan, "mcc": -1.0, "roc_auc": 0.0}),
])
def test_values_at_the_ends_of_their_ranges_and_undefined_ones_are_read(tmp_path, task, metrics):
    raw = record_json(fake("probe", task, "mean@6", "logistic", 0.5)) | {"metrics": metrics, "per_seed": [metrics]}
    assert read_record(write_json(tmp_path / "r.json", raw)).metrics.keys() == metrics.keys()


def test_every_metric_has_a_range():
    assert {m for task in TASKS.values() for m in task.metrics} <= set(METRIC_RANGES)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_predictions_with_a_score_that_is_not_finite_are_refused(tmp_path, bad):
    stored, path = _written(tmp_path)
    scores = read_predictions(path.parent, stored)
    moved = scores.scores.copy()
    moved[1, 7, 0] = bad
    buffer = io.BytesIO()
    np.savez(buffer, ids=scores.ids, labels=scores.labels, scores=moved, threshold=np.float64(0.5))
    (path.parent / stored.predictions["file"]).write_bytes(buffer.getvalue())
    crafted = dataclasses.replace(stored, predictions=stored.predictions | {
        "sha256": hashlib.sha256(buffer.getvalue()).hexdigest()})  # tied by its hash, as a crafted pair is
    write_json(path, record_json(crafted))
    with pytest.raises(FeatxError, match="not a finite number") as error:
        read_predictions(path.parent, crafted)
    assert stored.predictions["file"] in str(error.value) and "rerun the stage" in str(error.value)
    refused("not a finite number", write_report, tmp_path / "runs", tmp_path / "reports", "fx")
