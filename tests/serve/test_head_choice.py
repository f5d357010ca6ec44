"""Which head predict uses: never another run's head for a record without one, never a head its
record does not name, not the default head of an interrupted probe (killed or not), and a
fine-tune of another configuration is named with the override that selects it."""
from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest

from featx.config.load import load_pipeline
from featx.errors import FeatxError
from featx.probe.stage import run_probe
from featx.serve.predict import load_predictor
from tests.conftest import run_featx
from tests.finished_project import pipeline_toml, runs
from tests.generated import FIGURES, refused


def test_a_record_without_its_head_never_pairs_with_another_runs_head(project):
    first = load_predictor(project, "mean@2/logistic").scores(["the cat sat"])
    other = dataclasses.replace(project, probe=dataclasses.replace(project.probe, heads=("logistic",),
                                                                      save_heads=False, folds=3, protocol="cv"))
    run_probe(other)  # in its own folder: the first configuration's records and heads stay
    refused("save_heads = false", load_predictor, other, "mean@2/logistic")
    np.testing.assert_array_equal(load_predictor(project, "mean@2/logistic").scores(["the cat sat"]), first)
    assert first.shape == (1, 3)


def test_a_probe_killed_between_saving_heads_and_writing_records(project, monkeypatch):
    from featx.probe import stage as probe

    from featx.runs.records import run_status_path

    expected = load_predictor(project, "mean@2/logistic").scores(["the cat sat"])
    status = run_status_path(runs(project))  # an unfinished run of this configuration: fitted again
    status.write_text(json.dumps(json.loads(status.read_text()) | {"finished": False}))

    real = probe.write_record

    def killed(directory, record, predictions=None):
        if record.head == "logistic":
            raise KeyboardInterrupt  # the moment after the logistic head was saved, before its record
        return real(directory, record, predictions)
    monkeypatch.setattr(probe, "write_record", killed)
    with pytest.raises(KeyboardInterrupt):
        run_probe(project)
    refused("not the head its record names", load_predictor(project, "mean@2/logistic").scores, ["the cat sat"])
    monkeypatch.undo()
    run_probe(project)  # the fix it names
    np.testing.assert_allclose(load_predictor(project, "mean@2/logistic").scores(["the cat sat"]), expected)


def test_predict_refuses_the_default_head_of_an_interrupted_probe(project, caplog):
    import logging

    from featx.runs.records import run_status_path

    status = run_status_path(runs(project))
    status.write_text(json.dumps(json.loads(status.read_text()) | {"finished": False, "planned": 9}))
    refused("interrupted", load_predictor, project)
    with caplog.at_level(logging.WARNING, logger="featx"):
        assert load_predictor(project, "mean@2/logistic")  # a head named by hand: said, not refused
    assert "interrupted" in caplog.text
    # a later run of another configuration does not hide it
    other = dataclasses.replace(project, probe=dataclasses.replace(project.probe, heads=("logistic",), metric="mcc"))
    run_probe(other)
    refused("interrupted", load_predictor, project)


@pytest.mark.slow  # a featx process, killed
def test_predict_after_a_probe_killed_by_sigkill(project, tmp_path):
    import time

    other = dataclasses.replace(project, probe=dataclasses.replace(project.probe, metric="macro_f1", baselines=("majority", "tfidf")))
    toml = pipeline_toml(tmp_path, other)
    status = runs(other)  # the new configuration's own folder
    before = {p: p.stat().st_mtime_ns for p in status.glob("*.json")}
    child = run_featx("probe", str(toml), wait=False)
    while child.poll() is None:  # killed once it has written a record of the new configuration
        if any(p not in before or p.stat().st_mtime_ns != before[p] for p in status.glob("*__*.json")):
            child.kill()
            break
        time.sleep(0.01)
    child.wait()
    if child.returncode == 0:
        pytest.skip("the probe finished before it could be killed")
    refused("interrupted", load_predictor, load_pipeline(toml))
    result = run_featx("predict", str(toml), str(project.data.path))
    assert result.returncode == 2 and "interrupted" in result.stderr and "Traceback" not in result.stderr


def test_a_fine_tune_of_another_configuration_is_named_with_its_overrides(project):
    other = dataclasses.replace(project, finetune=dataclasses.replace(project.finetune, weight_decay=0.05))
    with pytest.raises(FeatxError, match="finetune.weight_decay=0.01") as caught:
        load_predictor(other, finetuned=True)
    FIGURES["checks"]["the override that selects another fine-tune"] += 1
    override = re.search(r"finetune\.weight_decay=[0-9.]+[0-9]", str(caught.value)).group(0)
    chosen = load_pipeline(pipeline_toml(project.root.parent, other), [override])
    assert load_predictor(chosen, finetuned=True).manifest.kind == "finetuned"
