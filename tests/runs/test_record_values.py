"""Records read back hold only values featx writes: a field naming a head, a pooling, a task, a
metric, a file and so on holds one of those, or the record is refused with an error that names
the file, the field and what featx writes there; the report never shows the value. Generated:
any text in a closed-set field is accepted exactly when it is one of the set."""
from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from featx.errors import FeatxError
from featx.report.write import write_report
from featx.runs.records import read_record, write_json
from featx.runs.schema import record_json
from tests.generated import examples, refused
from tests.report.test_report import fake, write_all

SETTINGS = examples(200, 40)
SCRIPT = "<script>alert(1)</script>"


def probe() -> dict:
    return record_json(fake("probe", "binary", "mean@6", "logistic", 0.7))


def tuned() -> dict:
    return record_json(fake("finetune", "binary", "finetune:mean", "linear", 0.8, converged=True,
                            stopped_by="patience", device="cpu", checkpoint="lr-2e-05/best.safetensors"))


def read(tmp_path, raw: dict):
    return read_record(write_json(tmp_path / "r.json", raw))


@pytest.mark.parametrize("field, value, said", [
    ("head", f"logistic{SCRIPT}", "not one of identity, ridge, logistic"),
    ("task", "binary ", "not one of binary, multiclass, multilabel, regression"),
    ("init", "random<b>", "not one of pretrained, random"),
    ("combine", "sum", "not one of joint, bi, cos"),
    ("baseline", "lexical2", "not one of null, lexical, majority"),
    ("pooling", "mean]", "not one of cls, mean, max, pooler, sentence, text"),
    ("features", f"mean@6{SCRIPT}", "not 'mean@6', the name its pooling, layers and combine give"),
    ("features", "cls@6", "not 'mean@6'"),
    ("layers", [6, -1], "not a list of layer indices"),
    ("layers", [6.5], "not a list of layer indices"),
    ("primary_metric", "f1", None),  # one of the task's: accepted
    ("pipeline", f"fx{SCRIPT}", "not a pipeline name"),
    ("cache_key", "a" * 63 + "<", "not a cache key"),
    ("config_hash", "c c", "not a hash"),
    ("created", f"2026-01-01T00:00:00+00:00{SCRIPT}", "not a UTC time"),
    ("created", "2026-13-45T00:00:00+00:00", "not a UTC time"),
    ("featx_version", "1.0 <b>", "not a featx version"),
    ("predictions", {"file": "../../../etc/passwd", "sha256": "0" * 64}, "'predictions' is"),
    ("predictions", {"file": "x.scores.npz", "sha256": "0" * 64, "more": 1}, "'predictions' is"),
    ("heads", [{"seed": 0, "file": "../h.safetensors", "sha256": "0" * 64}], "'heads' is"),
    ("hyperparameters", {"C": SCRIPT}, "'hyperparameters' holds {'C': '<script>"),
    ("hyperparameters", {"<C>": 1.0}, "'hyperparameters' holds {'<C>': 1.0}"),
    ("search", [{"params": {"C": 1.0}, "score": 0.5, "note": "[click](javascript:alert(1))"}], "'search' holds"),
    ("selection_labels", [{"rows_fitted": SCRIPT}], "'selection_labels' holds"),
])
def test_a_probe_record_holding_a_value_featx_does_not_write_is_refused(tmp_path, field, value, said):
    raw = probe() | {field: value}
    if said is None:
        assert getattr(read(tmp_path, raw), field) == value
        return
    with pytest.raises(FeatxError, match=re.escape(f"run record {tmp_path / 'r.json'} is malformed (")) as error:
        read(tmp_path, raw)
    assert said in str(error.value) and str(error.value).endswith("delete it and rerun featx probe"), str(error.value)
    if field in ("head", "task", "init", "combine", "baseline", "pooling", "features"):
        assert f"'{field}' is" in str(error.value)


@pytest.mark.parametrize("change, said", [
    (lambda r: r["protocol"].update(name="dev<b>"), "not one of dev, cv, holdout, mteb, finetune"),
    (lambda r: r["protocol"].update(report_on="train"), "not one of dev, test"),
    (lambda r: r["protocol"].update(select_on=f"dev{SCRIPT}"), "'select_on' is"),
    (lambda r: r["protocol"].update(select_on="dev\n# Verdict: fine-tune"), "'select_on' is"),
    (lambda r: r["protocol"].update(folds="5"), "folds is '5', not a count"),
    (lambda r: r["protocol"].update(extra=1), "its protocol holds 'extra'"),
    (lambda r: r["metrics"].update({"f2": 0.5}), "names the metric 'f2'"),
    (lambda r: r["metrics"].update({"accuracy": "0.5"}), "holds '0.5' for accuracy"),
    (lambda r: r["metrics_std"].update({SCRIPT: 0.0}), "names the metric"),
    (lambda r: r["metrics_ci"].update({"accuracy": ["<b>", 1.0]}), "not a number or null"),
    (lambda r: r["per_seed"].append({"accuracy": SCRIPT}), "'per_seed' holds"),
])
def test_a_record_s_sections_hold_only_what_featx_writes(tmp_path, change, said):
    raw = probe()
    change(raw)
    with pytest.raises(FeatxError, match="is malformed") as error:
        read(tmp_path, raw)
    assert said in str(error.value), str(error.value)


@pytest.mark.parametrize("field, value, said", [
    ("head", "linear<i>", "not one of linear, lp-ft or an architecture's"),
    ("head", "os.system", "not one of linear, lp-ft"),
    ("pooling", "sentence", "not one of model, pooler, cls, mean"),
    ("features", "finetune:cls", "not 'finetune:mean'"),
    ("stopped_by", "patience<b>", "not one of null, patience, max_epochs, budget, diverged, halving"),
    ("device", "cuda; rm -rf", "not a torch device"),
    ("checkpoint", "../../../home/user/.ssh/id_rsa", "not a path inside the record's folder"),
    ("checkpoint", "/etc/passwd", "not a path inside the record's folder"),
    ("checkpoint_sha256", "xyz", "not a sha256"),
    ("continue_with", "featx finetune p.toml`; rm -rf ~`", "not a featx command"),
    ("run_hash", "f" * 63 + "/", "not a hash"),
    ("curve", {"loss": [[10, "1.0"]], "select": [[1, 0.8]]}, "a curve that is not numbers"),
    ("curve", {"loss": [[10, 1.0]], "select": [[1, 0.8]], "kept": SCRIPT}, "'curve' holds"),
    ("search", [{"params": {"learning_rate": 2e-5}, "curve": [[1, {"x": 1}]]}], "a curve that is not numbers"),
    ("search", [{"params": {"learning_rate": 2e-5}, "curve": [[1, "0.8"]]}], "a curve that is not numbers"),
    ("budget", {"max_epochs": 3, "max_seconds": None, "machine_dependent": "<i>"}, "'budget' holds"),
])
def test_a_fine_tune_record_holding_a_value_featx_does_not_write_is_refused(tmp_path, field, value, said):
    with pytest.raises(FeatxError, match="is malformed") as error:
        read(tmp_path, tuned() | {field: value})
    assert said in str(error.value) and str(error.value).endswith("delete it and rerun featx finetune")


def test_the_names_featx_writes_are_accepted(tmp_path):
    from featx.heads.registry import HEADS

    read(tmp_path, tuned() | {"head": "BertForSequenceClassification", "pooling": "model",
                              "features": "finetune:model", "continue_with": "featx finetune 'my pipe.toml' "
                              "finetune.max_epochs=8", "device": "cuda:0"})
    for head in HEADS:
        for task in ("binary", "regression"):
            read(tmp_path, record_json(fake("probe", task, "bi:sentence@0+3+12", head, 0.5, combine="bi",
                                            pooling="sentence", layers=[0, 3, 12])))
    read(tmp_path, record_json(fake("probe", "multiclass", "text", "tfidf", 0.5, baseline="lexical",
                                    protocol={"name": "cv", "select_on": "2-fold cv on train (probe.folds = 5: a "
                                              "class has 2 rows)", "report_on": "dev", "folds": 2})))


@SETTINGS
@given(field=st.sampled_from(["head", "task", "init", "combine", "pooling", "primary_metric"]),
       value=st.one_of(st.text(max_size=12), st.sampled_from(["logistic", "mlp-torch", "random", "bi", "cls",
                                                              "accuracy", "f1", "regression", "text"])))
def test_any_text_in_a_closed_field_is_read_exactly_when_featx_writes_it(tmp_path, field, value):
    from featx.config.rules import INITS, PAIR_FEATURES, POOLING_NAMES
    from featx.heads.registry import HEADS
    from featx.tasks import TASKS

    raw = probe() | {field: value}
    if field == "pooling":
        raw["features"] = "text" if value == "text" else f"{value}@6"
    if field == "combine" and value != "joint":
        raw["features"] = f"{value}:mean@6"
    accepted = {"head": HEADS, "task": ("binary",), "init": INITS, "combine": PAIR_FEATURES,
                "pooling": POOLING_NAMES + ("text",), "primary_metric": TASKS["binary"].metrics}[field]
    if value in accepted:
        assert getattr(read(tmp_path, raw), field) == value
    else:
        with pytest.raises(FeatxError, match="is malformed"):
            read(tmp_path, raw)


def test_a_record_naming_a_script_never_reaches_the_report(tmp_path):
    record = fake("probe", "binary", "mean@6", "logistic", 0.7)
    write_all(tmp_path / "runs", [record, fake("probe", "binary", "mean@3", "mlp", 0.6)])
    path = next((tmp_path / "runs").rglob("mean@6__logistic.json"))
    write_json(path, json.loads(path.read_text()) | {"head": f"logistic{SCRIPT}"})
    refused(r"malformed \('head' is 'logistic<script>", write_report, tmp_path / "runs", tmp_path / "reports", "fx")
    assert not any(SCRIPT in p.read_text() for p in (tmp_path / "reports").rglob("*") if p.is_file())
