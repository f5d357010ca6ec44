"""Splits a probe cannot score: a single-class dev or test split where the metric is undefined
(refused by the probe and the fine-tune, with the metric that would work named), and more folds
than training rows."""
from __future__ import annotations

import pytest

from featx.cache.extract import extract
from featx.config.load import pipeline_from_dict
from featx.errors import FeatxError
from featx.finetune.stage import run_finetune
from featx.probe.stage import run_probe
from tests.conftest import classification_rows, write_rows
from tests.generated import refused


@pytest.mark.parametrize("single, task, metric", [("test", "binary", None), ("dev", "binary", None),
                                                  ("test", "multiclass", "mcc")])
def test_a_split_where_the_metric_is_undefined_gives_no_verdict(tmp_path, make_pipeline, single, task, metric):
    """A single-class dev or test split: MCC would be 0 by convention for every candidate (a
    flat 0, "converged"), and the verdict would rest on it."""
    rows = classification_rows(90)
    if task == "binary":
        rows = [r | {"label": "animal" if r["label"] == "animal" else "other"} for r in rows]
    split = ["train"] * 60 + ["dev"] * 15 + ["test"] * 15
    rows = [r | {"split": s} for r, s in zip(rows, split)]
    for r in rows:
        if r["split"] == single:
            r["label"] = "animal"
    pipeline = make_pipeline({"path": str(write_rows(tmp_path / "one.csv", rows)), "split_column": "split"},
                             probe={"metric": metric} if metric else {},
                             finetune={"max_epochs": 1, "learning_rates": [1e-4]})
    extract(pipeline)
    refused(f"the {single} split holds a single class \\('animal'\\): mcc is undefined", run_probe, pipeline)
    refused(f"the {single} split holds a single class \\('animal'\\): mcc is undefined", run_finetune, pipeline)
    with pytest.raises(FeatxError, match="probe.metric = 'accuracy'"):
        run_probe(pipeline)


def test_a_regression_probe_with_more_folds_than_rows(built, tmp_path):
    rows = [{"id": f"r{i}", "text": " ".join(["cat", "dog", "sat"][: 1 + i % 3]), "y": float(i)} for i in range(8)]
    rows = [r | {"split": "test" if i >= 6 else "train"} for i, r in enumerate(rows)]
    write_rows(tmp_path / "reg.csv", rows)
    pipeline = pipeline_from_dict({"name": "reg", "data_dir": str(tmp_path / "data"), "progress": False,
                                   "data": {"path": str(tmp_path / "reg.csv"), "label": "y", "task": "regression",
                                            "split_column": "split"},
                                   "model": {"name": str(built / "bert")},
                                   "probe": {"heads": ["logistic"], "sweep": False, "baselines": [], "folds": 10,
                                             "n_jobs": 1}})
    extract(pipeline)
    refused("probe.folds = 10 with 6 training rows leaves a fold of one row", run_probe, pipeline)
