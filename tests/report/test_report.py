"""The report from fixture records of every task type: values, verdict, HTML, missing stages."""
from __future__ import annotations

import base64
import csv
import dataclasses
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from featx.stats import metrics as M
from featx.errors import FeatxError
from featx.runs.schema import Record, new_record
from featx.runs.records import record_dir, run_dir, write_record
from featx.report.write import write_report
from featx.report.collected import collect
from featx.report.verdict import verdict

KEY = "a" * 64
CONTROL_KEY = "b" * 64


@pytest.mark.parametrize("same_errors, expected", [(True, "lightgbm"), (False, "logistic")])
def test_a_lead_is_judged_by_its_paired_difference_on_the_selection_rows(tmp_path, same_errors, expected):
    """Two heads on one feature set that err on the same rows: a 1-point lead on 1,000 dev rows
    is far beyond the paired difference's standard error (~0.3 points), though within the top
    score's own (1.2 here): the lead is real. With errors on unrelated rows it is noise."""
    import dataclasses

    import numpy as np

    from featx.runs.choice import frozen_choice

    rng = np.random.default_rng(0)
    truth = rng.integers(0, 4, 1000)

    def scores(wrong):
        guess = np.where(wrong, (truth + 1) % 4, truth)
        out = np.full((len(truth), 4), 0.1, dtype=np.float32)
        out[np.arange(len(truth)), guess] = 0.7
        return out

    top_wrong = np.zeros(1000, bool)
    top_wrong[rng.choice(1000, 100, replace=False)] = True  # dev accuracy 0.90
    if same_errors:
        other_wrong = top_wrong.copy()
        other_wrong[rng.choice(np.flatnonzero(~top_wrong), 10, replace=False)] = True  # 0.89
    else:
        other_wrong = np.zeros(1000, bool)
        other_wrong[rng.choice(1000, 110, replace=False)] = True  # 0.89, errors elsewhere
    y = labels(300)
    made = []
    for head, wrong, dev in (("lightgbm", top_wrong, 0.90), ("logistic", other_wrong, 0.89)):
        record = fake("probe", "multiclass", "mean@5", head, 0, selection=dev, selection_se=0.012, n_features=384)
        record, predictions = with_predictions(record, predictions_for(y, 0.8, len(made)))
        made.append((record, dataclasses.replace(predictions, selection_truth=truth,
                                                 selection_scores=scores(wrong))))
    write_pairs(tmp_path / "runs", made)
    inputs = collect(tmp_path / "runs", "fx")
    assert frozen_choice(inputs.main).record.head == "logistic"  # one SE of the top score: 0.012
    choice = frozen_choice(inputs.main, tmp_path / "runs")
    assert choice.record.head == expected and choice.top.head == "lightgbm"
    text = verdict(inputs, tmp_path / "runs").text
    if expected == "logistic":
        assert choice.paired and "within one standard error of the paired difference" in text, text
    assert inputs.choice.record is choice.record or inputs.choice.record == choice.record


def fake(stage: str, task: str, features: str, head: str, primary_value: float, *,
         selection: float | None = None, init: str = "pretrained", key: str = KEY, seed_std: float = 0.0,
         **fields) -> Record:
    """A record as a probe or a fine-tune writes it, with these numbers (and any other `fields`)."""
    names = M.NAMES[task]
    primary = M.PRIMARY[task]
    metrics = {k: (primary_value if k == primary else _within(k, round(primary_value * 0.9, 4))) for k in names}
    pooling, _, layers = features.partition("@")
    record = new_record(
        stage=stage, pipeline="fx", cache_key=key, task=task, features=features,
        pooling=pooling.removeprefix("finetune:"), layers=[int(x) for x in layers.split("+")] if layers else [6],
        head=head, init=init, protocol={"name": "dev" if stage == "probe" else "finetune",
                                        "select_on": "dev", "report_on": "test"},
        hyperparameters={}, search=[{"params": {}, "score": selection if selection is not None else primary_value}],
        seeds=[0], primary_metric=primary, metrics=metrics,
        metrics_std={k: seed_std for k in names}, per_seed=[metrics], threshold=None,
        n_train=100, n_eval=50, fit_seconds=1.5, predict_seconds=0.01,
        backbone_forward_passes=1000 if stage == "probe" else 40000,
        extract_seconds=10.0 if stage == "probe" else None, cache_bytes=5_000_000,
        **({"config_hash": "c" * 16} if stage == "probe" else {"run_hash": "f" * 64}),
        **({} if stage == "probe" else {
            "wall_seconds": 120.0, "epochs": 3, "steps": 30, "best_epoch": 3, "learning_rate": 2e-5,
            "curve": {"loss": [[10, 1.0], [20, 0.6], [30, 0.4]],
                      "select": [[1, selection or primary_value], [2, primary_value], [3, primary_value]]}}))
    return dataclasses.replace(record, **fields)


def _within(metric: str, value: float) -> float:
    """`value` moved into the metric's range (a record of values outside it is refused)."""
    from featx.runs.fields import METRIC_RANGES

    low, high = METRIC_RANGES[metric]
    return min(max(value, low), high)


def agreeing(values: dict) -> dict:
    """A one-seed record's metric fields for `values`, the metrics its predictions give."""
    return {"metrics": values, "metrics_std": {k: 0.0 if v == v else v for k, v in values.items()},
            "per_seed": [values]}


def write_all(runs: Path, records: list[Record]) -> None:
    for record in records:
        write_record(record_dir(runs, record), record)


class Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs)["src"])


@pytest.mark.parametrize("task", ["binary", "multiclass", "multilabel", "regression"])
def test_report_of_every_task_type(tmp_path, task):
    records = [fake("probe", task, f"mean@{layer}", "logistic", 0.70 + 0.02 * layer) for layer in range(4)]
    records += [fake("probe", task, "cls@3", "mlp", 0.75, seed_std=0.01),
                fake("probe", task, "mean@3", "lightgbm", 0.99, selection=0.60),  # best on test, not on dev
                fake("finetune", task, "finetune:pooler", "linear", 0.80),
                fake("probe", task, "mean@3", "logistic", 0.40, init="random", key=CONTROL_KEY)]
    write_all(tmp_path / "runs", records)
    paths = write_report(tmp_path / "runs", tmp_path / "reports", "fx")
    assert set(paths) == {"md", "html", "csv", "json", "index", "latest"} and all(p.is_file() for p in paths.values())

    with open(paths["csv"]) as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(records)
    for record in records:
        row = next(r for r in table if r["features"] == record.features and r["head"] == record.shown_head
                   and r["init"] == record.init)
        for name, value in record.metrics.items():
            assert float(row[f"metric:{name}"]) == pytest.approx(value)
    control = next(r for r in table if r["init"] == "random")
    assert control["features"] == "mean@3"

    judged = verdict(collect(tmp_path / "runs", "fx"))
    # the frozen side is picked by its dev score (mean@3 logistic: 0.76), not its test score
    assert judged.frozen.features == "mean@3" and judged.frozen.head == "logistic"
    assert judged.quality_ratio == pytest.approx(0.76 / 0.80)
    assert judged.compute_ratio == pytest.approx(1000 / 40000)
    assert "95.0% of the fine-tuned" in judged.text and "1/40 of the compute" in judged.text
    assert "0.7600 vs 0.8000" in judged.text

    markdown = paths["md"].read_text()
    # On a regression task the logistic head is Ridge: the report names it so.
    assert judged.text in markdown and f"| mean@3 | {judged.frozen.shown_head} | pretrained |" in markdown
    assert judged.frozen.shown_head == ("ridge" if task == "regression" else "logistic")
    html_text = paths["html"].read_text()
    assert "`" not in html_text  # commands are set as <code>, never as literal backticks
    parser = Images()
    parser.feed(html_text)
    assert len(parser.sources) == 4  # layers, heads, training curve, cost
    for source in parser.sources:
        assert source.startswith("data:image/png;base64,")
        assert base64.b64decode(source.split(",", 1)[1]).startswith(b"\x89PNG")


def test_missing_finetune_is_reported_not_fatal(tmp_path):
    write_all(tmp_path / "runs", [fake("probe", "binary", "mean@6", "logistic", 0.7)])
    paths = write_report(tmp_path / "runs", tmp_path / "reports", "fx")
    text = paths["md"].read_text()
    assert "No fine-tune record yet" in text and "`make finetune PIPELINE=" in text
    parser = Images()
    parser.feed(paths["html"].read_text())
    assert parser.sources  # the plots that can be drawn still are


def test_missing_probe_is_reported(tmp_path):
    write_all(tmp_path / "runs", [fake("finetune", "regression", "finetune:mean", "linear", 0.8)])
    text = write_report(tmp_path / "runs", tmp_path / "reports", "fx")["md"].read_text()
    assert "No probe records yet" in text


def test_no_records_at_all_is_a_clear_error(tmp_path):
    with pytest.raises(FeatxError, match="make probe"):
        write_report(tmp_path / "runs", tmp_path / "reports", "fx")


def test_negative_scores_give_a_difference_not_a_ratio(tmp_path):
    write_all(tmp_path / "runs", [fake("probe", "binary", "mean@6", "logistic", -0.1),
                                  fake("finetune", "binary", "finetune:pooler", "linear", 0.2)])
    judged = verdict(collect(tmp_path / "runs", "fx"))
    assert judged.quality_ratio is None and "difference -0.3000" in judged.text


def test_report_imports_no_torch(tmp_path):
    import subprocess

    write_all(tmp_path / "runs", [fake("probe", "binary", "mean@6", "logistic", 0.7)])
    code = ("import sys; from featx.report.write import write_report; "
            f"write_report({str(tmp_path / 'runs')!r}, {str(tmp_path / 'rep')!r}, 'fx'); "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


# ---------------------------------------------------------------------------------------------
# The verdict on stored predictions: paired bootstrap, lower bounds, baselines


def predictions_for(y, correct: float, seed: int, k: int = 4):
    """Multiclass probabilities that are right on about `correct` of the rows."""
    import numpy as np

    from featx.runs.records import Predictions

    rng = np.random.default_rng(seed)
    guess = np.where(rng.random(len(y)) < correct, y, (y + 1 + rng.integers(0, k - 1, len(y))) % k)
    scores = np.full((len(y), k), 0.1 / (k - 1))
    scores[np.arange(len(y)), guess] = 0.9
    return Predictions(np.array([f"t{i}" for i in range(len(y))]), y, scores[None], 0.5)


def with_predictions(record: Record, predictions) -> tuple[Record, object]:
    from featx.stats import metrics as M

    values = M.evaluate(record.task, predictions.labels, predictions.scores[0], predictions.threshold)
    return dataclasses.replace(record, **agreeing(values)), predictions


def write_pairs(runs: Path, pairs) -> None:
    for record, predictions in pairs:
        write_record(record_dir(runs, record), record, predictions)


def labels(n: int, seed: int = 0):
    import numpy as np

    return np.random.default_rng(seed).integers(0, 4, n)


@pytest.mark.parametrize("n, tuned_correct, expected", [
    (600, 0.80, "No measurable difference"),  # the same quality: the interval covers zero
    (600, 0.97, "Fine-tuning pays"),          # measurably better fine-tune
    (30, 0.90, "the interval is wide"),       # 30 rows cannot tell 0.80 from 0.90
])
def test_verdict_rests_on_a_paired_bootstrap(tmp_path, n, tuned_correct, expected):
    y = labels(n)
    frozen = with_predictions(fake("probe", "multiclass", "mean@3", "logistic", 0), predictions_for(y, 0.80, 1))
    tuned = with_predictions(fake("finetune", "multiclass", "finetune:pooler", "linear", 0, converged=True),
                             predictions_for(y, tuned_correct, 2))
    write_pairs(tmp_path / "runs", [frozen, tuned])
    judged = verdict(collect(tmp_path / "runs", "fx"), tmp_path / "runs")
    assert expected in judged.text, judged.text
    assert f"same {n:,} test rows" in judged.text
    comparison = judged.comparison
    assert comparison["n"] == n and comparison["difference_ci"][0] <= comparison["difference"] <= comparison["difference_ci"][1]
    assert comparison["difference"] == pytest.approx(frozen[0].metrics["accuracy"] - tuned[0].metrics["accuracy"])


@pytest.mark.parametrize("converged", [True, False])
def test_too_few_test_rows_give_no_verdict_and_no_nan(tmp_path, converged):
    y = labels(4)
    frozen = with_predictions(fake("probe", "multiclass", "mean@3", "logistic", 0), predictions_for(y, 0.25, 1))
    lexical = with_predictions(fake("probe", "multiclass", "text", "tfidf", 0, baseline="lexical"),
                               predictions_for(y, 1.0, 3))
    tuned = with_predictions(fake("finetune", "multiclass", "finetune:pooler", "linear", 0, converged=converged,
                                  stopped_by=None if converged else "max_epochs"),
                             predictions_for(y, 1.0, 2))
    write_pairs(tmp_path / "runs", [frozen, lexical, tuned])
    text = verdict(collect(tmp_path / "runs", "fx"), tmp_path / "runs").text
    assert text.startswith("No verdict:") and "4 test rows" in text and "data.test_fraction" in text, text
    assert "nan" not in text.lower() and "pays" not in text and "good enough" not in text


def test_a_fine_tune_that_did_not_converge_is_a_lower_bound(tmp_path):
    y = labels(800)
    frozen = with_predictions(fake("probe", "multiclass", "mean@3", "logistic", 0), predictions_for(y, 0.92, 1))
    tuned = with_predictions(fake("finetune", "multiclass", "finetune:pooler", "linear", 0, converged=False,
                                  stopped_by="budget"), predictions_for(y, 0.50, 2))
    write_pairs(tmp_path / "runs", [frozen, tuned])
    text = verdict(collect(tmp_path / "runs", "fx"), tmp_path / "runs").text
    # It leads with the fine-tune being unfinished and the command that continues it; no ratio.
    assert text.startswith("The fine-tune did not converge: its wall-time cap") and "lower bound" in text
    assert "continue it with `featx finetune" in text and "of the fine-tuned" not in text
    assert "beat the fine-tune" not in text and "Frozen features lead the unfinished fine-tune" in text
    assert "  " not in text and ". ." not in text and ", but The" not in text


def majority_of(y):
    """The majority baseline's record and predictions: the class priors on every row."""
    import numpy as np

    from featx.runs.records import Predictions

    priors = np.bincount(y, minlength=4) / len(y)
    predictions = Predictions(np.array([f"t{i}" for i in range(len(y))]), y, np.tile(priors, (len(y), 1))[None], 0.5)
    return with_predictions(fake("probe", "multiclass", "text", "majority", 0, baseline="majority"), predictions)


def test_a_fine_tune_no_better_than_the_majority_class_is_no_baseline(tmp_path):
    # A fine-tune collapsed to one class was recorded converged, and the verdict said "Frozen
    # features beat the fine-tune here: keep them" at 186% of its accuracy.
    y = labels(600)
    frozen = with_predictions(fake("probe", "multiclass", "mean@3", "logistic", 0), predictions_for(y, 0.80, 1))
    tuned = with_predictions(fake("finetune", "multiclass", "finetune:pooler", "linear", 0, converged=True,
                                  hyperparameters={"learning_rates": [1e-4]}), majority_of(y)[1])
    write_pairs(tmp_path / "runs", [frozen, tuned, majority_of(y)])
    judged = verdict(collect(tmp_path / "runs", "fx"), tmp_path / "runs")
    text = judged.text
    assert text.startswith("No verdict against the fine-tune: it is not measurably better than predicting "
                           "the majority class"), text
    assert "beat the fine-tune" not in text and "of the fine-tuned" not in text and judged.quality_ratio is None
    assert "finetune.learning_rates=[1e-05,2e-05,3e-05,5e-05]" in text and "frozen features (mean, layer 3" in text
    assert "The frozen choice is not measurably better" not in text


def test_the_advice_for_a_fine_tune_that_learned_nothing_follows_from_how_it_stopped(tmp_path):
    """A tiny model's collapsed fine-tune was told to rerun with its own `finetune.max_epochs=2`:
    a run a cap stopped is continued by its own command; a converged one needs other rates (a
    larger epoch cap alone retrains nothing: the cap is not part of a finished run's identity)."""
    y = labels(600)
    frozen = with_predictions(fake("probe", "multiclass", "mean@3", "logistic", 0), predictions_for(y, 0.80, 1))
    cases = ((dict(converged=False, stopped_by="max_epochs", continue_with="featx finetune p.toml finetune.max_epochs=8"),
              "a cap stopped it while it was still improving: too few epochs",
              "Continue it with `featx finetune p.toml finetune.max_epochs=8`."),
             (dict(converged=True, hyperparameters={"learning_rates": [3e-5, 1e-4]}),
              "a run collapsed to one class, or learning rates that did not suit",
              "finetune.learning_rates=[1e-05,2e-05,5e-05]"))
    for k, (fields, reason, rerun) in enumerate(cases):
        tuned = with_predictions(fake("finetune", "multiclass", "finetune:pooler", "linear", 0,
                                      **({"hyperparameters": {"learning_rates": [1e-4]}} | fields)), majority_of(y)[1])
        runs = tmp_path / str(k)
        write_pairs(runs, [frozen, tuned, majority_of(y)])
        text = verdict(collect(runs, "fx"), runs).text
        assert reason in text and rerun in text, text


def test_a_frozen_choice_no_better_than_the_majority_class_is_said(tmp_path):
    y = labels(600)
    frozen = with_predictions(fake("probe", "multiclass", "mean@3", "logistic", 0), predictions_for(y, 0.26, 1))
    tuned = with_predictions(fake("finetune", "multiclass", "finetune:pooler", "linear", 0, converged=True),
                             predictions_for(y, 0.90, 2))
    write_pairs(tmp_path / "runs", [frozen, tuned, majority_of(y)])
    text = verdict(collect(tmp_path / "runs", "fx"), tmp_path / "runs").text
    assert "Fine-tuning pays" in text and "The frozen choice is not measurably better than predicting the majority class" in text
    write_pairs(tmp_path / "alone", [frozen, majority_of(y)])  # no fine-tune yet: said as well
    text = verdict(collect(tmp_path / "alone", "fx"), tmp_path / "alone").text
    assert "No fine-tune record yet" in text and "The frozen choice is not measurably better" in text


def test_regression_targets_nothing_predicts_get_no_verdict_at_a_correlation_floor_of_zero(tmp_path):
    """The mean baseline's Pearson is undefined (a constant prediction), so the floor was skipped:
    on random targets, frozen Pearson -0.05 and the fine-tune's -0.03 read "no measurable
    difference: frozen features are as good"."""
    def at(stage, features, head, value, ci, **fields):
        record = fake(stage, "regression", features, head, value, **fields)
        return dataclasses.replace(record, metrics_ci={"pearson": ci})

    frozen = at("probe", "mean@4", "logistic", -0.0509, [-0.2901, 0.1854])
    tuned = at("finetune", "finetune:mean", "linear", -0.0307, [-0.2563, 0.2039], converged=True,
               hyperparameters={"learning_rates": [1e-4]})
    mean = dataclasses.replace(fake("probe", "regression", "text", "majority", float("nan"), baseline="majority"),
                               metrics={"mse": 0.87, "mae": 0.7, "r2": -0.01, "pearson": float("nan"),
                                        "spearman": float("nan")})
    write_all(tmp_path / "runs", [frozen, tuned, mean])
    judged = verdict(collect(tmp_path / "runs", "fx"))
    assert judged.text.startswith("No verdict against the fine-tune: it is not measurably better than predicting "
                                  "the training mean (pearson -0.0307 [-0.2563, 0.2039], against 0"), judged.text
    assert "collapsed to a constant" in judged.text and judged.quality_ratio is None
    assert "The frozen choice is not measurably better than predicting the training mean" in judged.text
    good = at("probe", "mean@4", "logistic", 0.83, [0.79, 0.86])  # its interval above 0: no floor said
    write_all(tmp_path / "good", [good, mean])
    assert "not measurably better" not in verdict(collect(tmp_path / "good", "fx")).text


def test_test_rows_whose_text_train_holds_are_said(tmp_path):
    y = labels(100)
    frozen = with_predictions(fake("probe", "multiclass", "mean@3", "logistic", 0,
                                   extraction={"in_train": {"dev": 3, "test": 25}}), predictions_for(y, 0.8, 1))
    write_pairs(tmp_path / "runs", [frozen])
    text = verdict(collect(tmp_path / "runs", "fx"), tmp_path / "runs").text
    assert "25 of the 50 test rows (50%) have a text that train holds too" in text, text
    table = write_report(tmp_path / "runs", tmp_path / "reports", "fx")["md"].read_text()
    assert "rows whose text train holds too: dev 3, test 25" in table


def test_a_binary_f1_names_its_positive_class_and_warns_when_it_is_the_common_one(tmp_path):
    # F1 of "legit" (96% of rows) read 0.98 for models that never predicted "fraud".
    labels_of = {"positive": "legit", "negative": "fraud", "positive_train": 0.96, "positive_report": 0.96}
    frozen = fake("probe", "binary", "mean@3", "logistic", 0.98, primary_metric="f1", labels=labels_of)
    write_all(tmp_path / "runs", [frozen])
    text = verdict(collect(tmp_path / "runs", "fx"), tmp_path / "runs").text
    assert "f1 is the F1 of the positive class 'legit'" in text and "the common one (96% of the test rows)" in text
    assert 'data.label_names = ["legit", "fraud"]' in text, text
    table = write_report(tmp_path / "runs", tmp_path / "reports", "fx")["md"].read_text()
    assert "Positive class: 'legit' (against 'fraud'; 96% of train, 96% of the reported rows)" in table
    rare = dataclasses.replace(frozen, labels=labels_of | {"positive_report": 0.04})
    write_all(tmp_path / "rare", [rare])
    text = verdict(collect(tmp_path / "rare", "fx"), tmp_path / "rare").text
    assert "positive class 'legit'" in text and "the common one" not in text


def test_lexical_baseline_within_the_interval_is_said(tmp_path):
    y = labels(500)
    frozen = with_predictions(fake("probe", "multiclass", "mean@3", "logistic", 0), predictions_for(y, 0.85, 1))
    lexical = with_predictions(fake("probe", "multiclass", "text", "tfidf", 0, baseline="lexical"),
                               predictions_for(y, 0.86, 3))
    majority = with_predictions(fake("probe", "multiclass", "text", "majority", 0, baseline="majority"),
                                predictions_for(y, 0.25, 4))
    write_pairs(tmp_path / "runs", [frozen, lexical, majority])
    judged = verdict(collect(tmp_path / "runs", "fx"), tmp_path / "runs")
    assert judged.frozen.head == "logistic"  # baselines are never the frozen side
    assert "adds nothing measurable" in judged.text
    table = write_report(tmp_path / "runs", tmp_path / "reports", "fx")["md"].read_text()
    assert "baseline: TF-IDF" in table and "baseline: majority" in table


def test_predictions_of_other_rows_are_not_compared(tmp_path):
    frozen = with_predictions(fake("probe", "multiclass", "mean@3", "logistic", 0), predictions_for(labels(100), 0.8, 1))
    other = predictions_for(labels(100, seed=5), 0.9, 2)
    tuned = with_predictions(fake("finetune", "multiclass", "finetune:pooler", "linear", 0), other)
    write_pairs(tmp_path / "runs", [frozen, tuned])
    judged = verdict(collect(tmp_path / "runs", "fx"), tmp_path / "runs")
    assert judged.comparison is None and "No interval" in judged.text


def test_tampered_predictions_are_refused(tmp_path):
    from featx.runs.records import read_predictions

    y = labels(50)
    record, predictions = with_predictions(fake("probe", "multiclass", "mean@3", "logistic", 0),
                                           predictions_for(y, 0.8, 1))
    stored = write_record(run_dir(tmp_path, "fx", KEY), record, predictions)
    saved = run_dir(tmp_path, "fx", KEY) / stored.predictions["file"]
    saved.write_bytes(saved.read_bytes()[:-8])
    with pytest.raises(FeatxError, match="does not match the hash"):
        read_predictions(run_dir(tmp_path, "fx", KEY), stored)


def test_lexical_baseline_measurably_better_is_said(tmp_path):
    y = labels(800)
    frozen = with_predictions(fake("probe", "multiclass", "mean@3", "logistic", 0), predictions_for(y, 0.60, 1))
    lexical = with_predictions(fake("probe", "multiclass", "text", "tfidf", 0, baseline="lexical"),
                               predictions_for(y, 0.90, 3))
    write_pairs(tmp_path / "runs", [frozen, lexical])
    judged = verdict(collect(tmp_path / "runs", "fx"), tmp_path / "runs")
    assert judged.lexical["difference_ci"][1] < 0
    assert "does measurably better" in judged.text and "lose to word and character n-grams" in judged.text
    assert "within the interval" not in judged.text and "adds nothing measurable" not in judged.text


def test_the_frozen_side_is_the_simplest_within_one_standard_error(tmp_path):
    from featx.runs.choice import frozen_choice

    y = labels(300)
    logistic = fake("probe", "multiclass", "mean@4", "logistic", 0, selection=0.428,
                    selection_se=0.015, n_features=384)
    lightgbm = fake("probe", "multiclass", "sentence@6", "lightgbm", 0, selection=0.433,
                    selection_se=0.015, n_features=384)
    wide = fake("probe", "multiclass", "mean@3+4+5+6", "logistic", 0, selection=0.431,
                selection_se=0.015, n_features=1536)
    far = fake("probe", "multiclass", "mean@1", "logistic", 0, selection=0.40,
               selection_se=0.015, n_features=384)
    pairs = [with_predictions(r, predictions_for(y, 0.8, i)) for i, r in enumerate([logistic, lightgbm, wide, far])]
    write_pairs(tmp_path / "runs", pairs)
    inputs = collect(tmp_path / "runs", "fx")
    choice = frozen_choice(inputs.main)
    # lightgbm has the top score, but three are within 0.015 of it: the simplest head, then the
    # fewest features
    assert choice.top.head == "lightgbm" and choice.within == 3
    assert (choice.record.features, choice.record.head) == ("mean@4", "logistic")
    text = verdict(inputs, tmp_path / "runs").text
    assert "the simplest of the 3 configurations within one standard error (0.0150)" in text
    assert "0.4330 (sentence@6 lightgbm)" in text
    # without a standard error (older records) the top score wins, as before
    assert frozen_choice([dataclasses.replace(r, selection_se=None) for r in inputs.main]).record.head == "lightgbm"


def test_an_undefined_selection_score_is_never_the_choice(tmp_path):
    """LightGBM on 36 training rows predicts a constant: its dev Pearson is NaN, which compares
    false with every score, so whichever record came first won and the verdict read
    "pearson = nan"; the fine-tune alike. Never chosen now, in any order, and verdict.json holds
    null for it (bare NaN tokens are no JSON)."""
    import json

    from featx.runs.choice import best_tuned, frozen_choice, selection_score
    from featx.report.render import rows

    nan = float("nan")
    probes = [fake("probe", "regression", "mean@1", "lightgbm", nan, selection=nan, selection_se=0.01, n_features=32),
              fake("probe", "regression", "mean@2", "logistic", 0.8, selection=0.90, selection_se=0.01, n_features=32),
              fake("probe", "regression", "mean@1", "logistic", 0.7, selection=0.80, selection_se=0.01, n_features=32)]
    for order in (probes, probes[::-1], probes[1:] + probes[:1]):
        assert (frozen_choice(order).record.features, frozen_choice(order).record.head) == ("mean@2", "logistic")
    tunes = [fake("finetune", "regression", "finetune:cls", "linear", nan, selection=nan, learning_rate=1e-5),
             fake("finetune", "regression", "finetune:cls", "linear", 0.6, selection=0.7, learning_rate=2e-5)]
    assert selection_score(best_tuned(tunes, "pearson")) == 0.7 == selection_score(best_tuned(tunes[::-1], "pearson"))
    assert frozen_choice(probes[:1]) is None
    write_pairs(tmp_path / "runs", [(r, None) for r in probes[:1]])
    inputs = collect(tmp_path / "runs", "fx")
    assert verdict(inputs).text.startswith("No verdict: every frozen probe's selection score is undefined")
    write_pairs(tmp_path / "runs", [(r, None) for r in probes[1:]])
    inputs = collect(tmp_path / "runs", "fx")
    # the report's rows name the regression's logistic head by its model, Ridge
    assert [(r["features"], r["head"]) for r in rows(inputs)] == [("mean@2", "ridge"), ("mean@1", "ridge"),
                                                                   ("mean@1", "lightgbm")]
    paths = write_report(tmp_path / "runs", tmp_path / "reports", "fx")
    json.loads(paths["json"].read_text(), parse_constant=lambda c: pytest.fail(f"{c} in verdict.json"))


def test_each_verdict_ends_with_the_command_that_acts_on_it(tmp_path):
    import dataclasses

    from featx.config.load import pipeline_from_dict

    pipeline = dataclasses.replace(pipeline_from_dict({"name": "fx", "data": {"builtin": "trec"}}),
                                   source="pipelines/fx.toml", overrides=("model.name=./m",))
    y = labels(600)
    frozen = with_predictions(fake("probe", "multiclass", "mean@3", "logistic", 0), predictions_for(y, 0.60, 1))
    tuned = with_predictions(fake("finetune", "multiclass", "finetune:pooler", "linear", 0, converged=True),
                             predictions_for(y, 0.95, 2))
    write_pairs(tmp_path / "runs", [frozen, tuned])
    text = verdict(collect(tmp_path / "runs", "fx"), tmp_path / "runs", pipeline).text
    assert text.endswith("Next: use the fine-tuned model, "
                         "`featx export pipelines/fx.toml exported --finetuned model.name=./m`.")
    write_pairs(tmp_path / "runs", [with_predictions(tuned[0], predictions_for(y, 0.60, 1))])
    text = verdict(collect(tmp_path / "runs", "fx"), tmp_path / "runs", pipeline).text
    assert text.endswith("Next: predict with the frozen choice, "
                         "`featx predict pipelines/fx.toml new.csv model.name=./m`.")
    close = with_predictions(fake("probe", "multiclass", "mean@3", "logistic", 0), predictions_for(y, 0.86, 3))
    write_pairs(tmp_path / "runs", [close, tuned])
    text = verdict(collect(tmp_path / "runs", "fx"), tmp_path / "runs", pipeline).text
    assert "come close" in text and text.endswith(
        "Next: iterate with the frozen choice, `featx predict pipelines/fx.toml new.csv model.name=./m`; "
        "for the last points, `featx export pipelines/fx.toml exported --finetuned model.name=./m`."), text


def test_metrics_far_from_one_are_printed_with_their_digits():
    """Targets near 1e-6 printed every row's MSE as 0.0000, the baseline's too: nothing could be
    compared; near 1e9 the MSE ran to a dozen digits."""
    from featx.runs.schema import metric_text

    assert metric_text(0.8903) == "0.8903" and metric_text(0.0) == "0.0000"
    assert metric_text(3.2e-12) == "3.2e-12" and metric_text(-4e-7) == "-4e-07"
    assert metric_text(2.5e13) == "2.5e+13" and metric_text(float("nan")) == "nan"


def test_a_spread_of_seeds_alike_to_rounding_is_no_spread_in_either_table(project):
    """The probe's terminal table printed `0.6671±1.11e-16` for seeds that agreed to the last bit
    but the order of a sum; both tables now print a spread by one rule."""
    import dataclasses

    from featx.probe.stage import format_table
    from featx.runs.schema import spread_text
    from tests.finished_project import runs

    assert spread_text(1.11e-16, 0.6671) == "" and spread_text(None, 0.6671) == "" and spread_text(0.0, 0.5) == ""
    assert spread_text(0.0123, 0.6671) == " ± 0.0123" and spread_text(float("nan"), 0.5) == ""
    from featx.runs.records import read_records

    record = next(r for r in read_records(runs(project)) if not r.baseline)
    noisy = dataclasses.replace(record, metrics_std={k: 1.11e-16 for k in record.metrics})
    assert "e-16" not in format_table([noisy]) and "±" not in format_table([noisy])


def test_a_regression_fine_tune_near_the_training_mean_is_no_baseline_whatever_its_correlation(tmp_path):
    """Red team: a fine-tune whose loss stayed flat predicted the training mean to within 1e-3
    of the targets' spread, Pearson 0.89 with them, and the verdict said frozen features reach
    96% of it (and to export it). Its squared error, paired with the mean's, settles it."""
    import numpy as np

    from featx.stats import metrics as M
    from featx.runs.records import Predictions

    rng = np.random.default_rng(0)
    y = rng.normal(size=400)
    ids = np.array([f"t{i}" for i in range(len(y))])

    def regression(stage, features, head, predicted, **fields):
        values = M.evaluate("regression", y, predicted)
        ci = [values["pearson"] - 0.05, min(1.0, values["pearson"] + 0.05)]
        record = dataclasses.replace(fake(stage, "regression", features, head, 0, **fields), **agreeing(values),
                                     metrics_ci={"pearson": ci})
        return record, Predictions(ids, y, predicted[None], 0.5)

    frozen = regression("probe", "mean@4", "logistic", 0.8 * y + 0.5 * rng.normal(size=len(y)))
    mean = regression("probe", "text", "majority", np.full(len(y), 0.05), baseline="majority")
    mean = (dataclasses.replace(mean[0], metrics=mean[0].metrics | {"pearson": float("nan")}, metrics_ci={}), mean[1])
    flat = regression("finetune", "finetune:mean", "linear", 0.05 + 1e-3 * (y + 0.4 * rng.normal(size=len(y))),
                      converged=True, hyperparameters={"learning_rates": [1e-3]})
    write_pairs(tmp_path / "flat", [frozen, mean, flat])
    judged = verdict(collect(tmp_path / "flat", "fx"), tmp_path / "flat")
    assert flat[0].metrics["pearson"] > 0.85 and judged.quality_ratio is None
    assert judged.text.startswith("No verdict against the fine-tune: it is not measurably better than predicting "
                                  "the training mean (pearson"), judged.text
    assert "but a squared error of" in judged.text and "of the fine-tuned" not in judged.text
    good = regression("finetune", "finetune:mean", "linear", y + 0.3 * rng.normal(size=len(y)),
                      converged=True, hyperparameters={"learning_rates": [3e-5]})
    write_pairs(tmp_path / "good", [frozen, mean, good])
    judged = verdict(collect(tmp_path / "good", "fx"), tmp_path / "good")
    assert "not measurably better" not in judged.text and judged.quality_ratio is not None


def test_an_interval_with_a_bound_of_zero_is_printed(tmp_path):
    """Red team: two functions named _finite in report.py, the later (a NaN filter) replacing
    the test, so a bound of exactly 0.0 dropped the interval from report.md and report.html."""
    from featx.report.render import table_rows

    row = {"features": "mean@2", "head": "ridge", "init": "pretrained", "protocol": "dev", "primary": -0.0066,
           "primary_std": 1.1e-16, "primary_ci_low": -0.0126, "primary_ci_high": 0.0, "selection": 0.1,
           "primary_metric": "mcc", "metric:mcc": -0.0066, "baseline": None, "converged": None,
           "train_seconds": 1.0, "backbone_forward_passes": 1, "cache_mb": 1.0}
    _, cells = table_rows([row])
    assert "-0.0066 [-0.0126, 0.0000]" in cells[0], cells[0]  # no ± for seeds alike to rounding


def test_the_no_training_cosine_is_judged_by_its_order_alone():
    """The cosine row's predictions are cosines, not targets: their squared error says nothing."""
    from featx.report.comparisons import _squared_floor

    mean = dataclasses.replace(fake("probe", "regression", "text", "majority", 0, baseline="majority"),
                               metrics={"mse": 1.0, "pearson": float("nan")})
    cosine = dataclasses.replace(fake("probe", "regression", "sentence@6", "identity", 0),
                                 metrics={"mse": 7.5, "pearson": 0.8})
    assert _squared_floor(None, cosine, [mean], None) is None
    assert _squared_floor(None, dataclasses.replace(cosine, head="logistic"), [mean], None) == \
        {"correlation": True, "squared": (7.5, 1.0)}
    fitted = dataclasses.replace(cosine, head="logistic", metrics={"mse": 0.4, "pearson": 0.8})
    assert _squared_floor(None, fitted, [mean], None) is None


def test_the_compute_share_is_never_rounded_into_another():
    """Red team: 1,320 against 1,720 forward passes (0.77) was "1/1 of the compute"."""
    from featx.report.verdict import _fraction

    assert [_fraction(r) for r in (0.025, 0.1, 0.767, 0.6, 0.95, 1.3)] == ["1/40", "1/10", "77%", "60%", "95%", "1.3x"]


def test_a_record_of_an_older_featx_matches_the_cache_settings_it_was_made_with(project):
    """A key a later featx added (data.drop_in_train) is absent from older records: they were made
    as its default, and still count as this data's records (the random-init control among them)."""
    from featx.report.collected import _same_cache_settings
    from featx.runs.records import read_records
    from tests.finished_project import runs

    record = read_records(runs(project))[0]
    older = dataclasses.replace(record, configuration=record.configuration | {
        "data": {k: v for k, v in record.configuration["data"].items() if k != "drop_in_train"}})
    assert _same_cache_settings(older, project, record.configuration["model"]["init"])
    changed = dataclasses.replace(project, data=dataclasses.replace(project.data, drop_in_train=True))
    assert not _same_cache_settings(older, changed, record.configuration["model"]["init"])
