"""Heads named by what they fit on the task: on a regression task `logistic` is Ridge and shows
as `ridge`, while records keep the registry's name and `--head .../ridge` finds them."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from featx.errors import FeatxError
from featx.heads.registry import shown_head
from featx.serve.manifest import _choose
from featx.tasks import TASKS


@pytest.mark.parametrize("task", list(TASKS))
def test_a_head_is_shown_by_what_it_fits_on_the_task(task):
    regression = TASKS[task].regression
    assert shown_head("logistic", task) == ("ridge" if regression else "logistic")
    assert shown_head("logistic-torch", task) == ("ridge-torch" if regression else "logistic-torch")
    assert shown_head("mlp", task) == "mlp" and shown_head("tfidf", task) == "tfidf"


def _probe(features, head, task):
    return SimpleNamespace(stage="probe", features=features, head=head, shown_head=shown_head(head, task),
                           created="2026-12-07", protocol={"name": "dev"})


def test_predict_takes_a_head_as_the_report_or_the_records_name_it():
    pipeline = SimpleNamespace(source="p.toml", runs_dir="runs")
    regression = [_probe("mean@5", "logistic", "regression"), _probe("mean@5", "mlp", "regression")]
    for name in ("mean@5/ridge", "mean@5/logistic"):
        assert _choose(regression, name, False, pipeline).head == "logistic"
    classes = [_probe("mean@5", "logistic", "multiclass"), _probe("mean@5", "ridge", "multiclass")]
    assert _choose(classes, "mean@5/ridge", False, pipeline).head == "ridge"
    assert _choose(classes, "mean@5/logistic", False, pipeline).head == "logistic"
    with pytest.raises(FeatxError, match=r"these exist: mean@5/mlp, mean@5/ridge"):
        _choose(regression, "mean@5/lightgbm", False, pipeline)
