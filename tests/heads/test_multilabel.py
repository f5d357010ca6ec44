"""Multilabel with rare labels: every head sets constant labels aside, the macro metrics say
over which labels they run (featx.stats.metrics and featx.stats.bootstrap alike), splits are iteratively
stratified, and the whole pipeline runs on a long tail (labels with 0, 1 and 2 positive rows
per fold, a label only the test rows have)."""
from __future__ import annotations

import csv
import json
import random

import numpy as np
import pytest
from sklearn import metrics as skm

from featx.stats import bootstrap as BS
from featx.heads import registry as H
from featx.stats import metrics as M
from featx.config import pipeline as config
from featx.heads.boosting import LightGBMClassifierHead
from featx.config.pipeline import DataConfig
from featx.data import load_dataset
from featx.errors import FeatxError
from featx.heads.lexical import LexicalFeatures
from featx.heads.logistic import MultilabelLogistic
from featx.heads.varying import CONSTANT_LOGIT
from tests.conftest import WORDS, write_rows

# Label j of the unit problems: 0 and 1 common, 2 one positive row, 3 never, 4 always present.
NEVER, ALWAYS, ONE = 3, 4, 2
MARKERS = ("cat", "dog", "bird")  # the words of labels 0, 1 and 2 in the texts baselines read


def rare_problem(n: int, seed: int):
    """(features (n, 8), texts (n,), labels (n, 5)): labels 0 and 1 are in the features and the
    words; label 2 has one positive row; 3 is never present, 4 always."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 8))
    Y = np.zeros((n, 5), dtype=np.uint8)
    Y[:, 0], Y[:, 1] = X[:, 0] > 0, X[:, 1] > 0.3
    Y[rng.integers(n), ONE] = 1
    Y[:, ALWAYS] = 1
    X[:, :3] += (Y[:, :3] * 2.0 - 1) * 2
    filler = [w for w in WORDS if w not in MARKERS]
    texts = np.array([" ".join([MARKERS[j] for j in range(3) if Y[i, j]] + list(rng.choice(filler, 4)))
                      for i in range(n)], dtype=object)
    return X, texts, Y


def fitted(head: str, X, texts, Y, X_new, texts_new):
    """(fitted head, scores of the new rows): a baseline reads the texts through its prepared
    TF-IDF features, as the probe gives them."""
    params = H.HEADS[head].grid("multilabel")[0]
    if H.HEADS[head].baseline:
        prepare = H.HEADS[head].prepare
        features = prepare().fit(texts) if prepare else None
        X, X_new = ((texts, texts_new) if features is None
                    else (features.transform(texts), features.transform(texts_new)))
    estimator = H.fit(H.build(head, "multilabel", params), X, Y)
    return estimator, H.predict_scores(estimator, X_new, "multilabel", Y.shape[1])


@pytest.mark.parametrize("head", [h for h in H.HEADS if h not in config.ZERO_TRAINING])
def test_every_multilabel_head_predicts_a_constant_label_as_its_constant(head):
    X, texts, Y = rare_problem(240, seed=0)
    X_new, texts_new, Y_new = rare_problem(120, seed=1)
    _, scores = fitted(head, X, texts, Y, X_new, texts_new)
    assert scores.shape == (120, 5) and np.isfinite(scores).all()
    assert ((scores >= 0) & (scores <= 1)).all()
    assert (scores[:, NEVER] == 0).all() and (scores[:, ALWAYS] == 1).all()  # exactly, no estimator
    assert 0 < scores[:, ONE].max() < 1  # a label of one row varies: it is fitted
    if head != "majority":  # the common labels are learned
        assert skm.roc_auc_score(Y_new[:, 0], scores[:, 0]) > 0.8


@pytest.mark.parametrize("head", [h for h in H.HEADS if h not in config.ZERO_TRAINING])
@pytest.mark.parametrize("varying", [0, 1])
def test_heads_with_a_single_or_no_varying_label(head, varying):
    X, texts, Y = rare_problem(200, seed=2)
    Y = Y[:, [0, NEVER, ALWAYS]] if varying else Y[:, [NEVER, ALWAYS]]
    _, scores = fitted(head, X, texts, Y, X[:50], texts[:50])
    assert scores.shape == (50, Y.shape[1])
    np.testing.assert_array_equal(scores[:, -2:], np.tile([0.0, 1.0], (50, 1)))
    if varying and head == "majority":  # the prior of the one label that varies
        np.testing.assert_allclose(scores[:, 0], Y[:, 0].mean())
    elif varying:
        assert 0 < scores[:, 0].min() < scores[:, 0].max() < 1


def test_constant_labels_leave_the_joint_logistic_fit_of_the_others_unchanged():
    X, _, Y = rare_problem(300, seed=3)
    varying = [0, 1, ONE]
    full = MultilabelLogistic(C=0.5).fit(X, Y)
    alone = MultilabelLogistic(C=0.5).fit(X, Y[:, varying])
    np.testing.assert_allclose(full.coef_[varying], alone.coef_, atol=1e-6)
    assert full.varying_.tolist() == [True, True, True, False, False]
    assert not full.coef_[[NEVER, ALWAYS]].any()  # a constant label: no weights, a finite logit
    assert full.intercept_[NEVER] == -CONSTANT_LOGIT and full.intercept_[ALWAYS] == CONSTANT_LOGIT
    warm = MultilabelLogistic(C=0.5, warm_start=True).fit(X, Y)
    iterations = warm.set_params(C=0.6).fit(X, Y).n_iter_
    assert iterations < full.n_iter_  # the path still warm-starts with labels set aside


def test_lightgbm_keeps_a_lone_positive_in_its_fitting_part():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    y = np.zeros(30, dtype=int)
    y[7] = 1
    for seed in range(30):  # a tenth of the rows is held out: some seeds draw the positive row
        head = LightGBMClassifierHead(n_estimators=20, random_state=seed).fit(X, y)
        assert head.model_.n_classes_ == 2 and head.predict_proba(X).shape == (30, 2)


def test_a_path_step_reaches_the_estimator_inside_the_wrappers():
    estimator = H.build("tfidf", "multilabel", {"C": 1.0})
    assert H.step("tfidf", "multilabel", {"C": 10.0}, previous=estimator) is estimator
    assert estimator.estimator.estimator.C == 10.0


# ---------------------------------------------------------------------------------------------
# Metrics: over which labels the macro averages run, the same in featx.stats.metrics and the bootstrap


def rare_truth(n: int = 90, seed: int = 0):
    """Labels with 0, 1, 2 and every positive row, and two common ones; noisy scores."""
    rng = np.random.default_rng(seed)
    y = np.zeros((n, 6), dtype=np.uint8)
    y[:, 0], y[:, 1] = rng.random(n) < 0.4, rng.random(n) < 0.2
    y[rng.integers(n), 3] = 1
    y[rng.choice(n, 2, replace=False), 4] = 1
    y[:, 5] = 1
    scores = np.clip(0.5 * y + rng.random((n, 6)) * 0.6, 0, 1)
    return y, scores


def test_macro_metrics_average_over_the_labels_that_have_them():
    y, scores = rare_truth()
    m = M.evaluate("multilabel", y, scores, threshold=0.5)
    present, both = M.macro_labels(y)
    assert present.tolist() == [0, 1, 3, 4, 5] and both.tolist() == [0, 1, 3, 4]
    assert m["macro_f1"] == pytest.approx(skm.f1_score(y, scores >= 0.5, labels=present, average="macro"))
    aucs = [skm.roc_auc_score(y[:, j], scores[:, j]) for j in both]
    assert m["macro_roc_auc"] == pytest.approx(np.mean(aucs))
    assert m["micro_f1"] == pytest.approx(skm.f1_score(y, scores >= 0.5, average="micro"))
    summary = M.label_summary(y[:, [0, 1, 2, 2, 4, 5]], y, list("abcdef"))
    assert summary == {"total": 6, "constant_in_train": ["c", "d", "f"], "macro_f1": 5, "macro_roc_auc": 4}
    assert np.isnan(M.evaluate("multilabel", np.zeros((4, 2)), np.zeros((4, 2)))["macro_f1"])


def test_bootstrap_resamples_follow_the_same_conventions_on_rare_labels():
    y, scores = rare_truth(60, seed=1)
    rng = np.random.default_rng(5)
    W = BS.counts(len(y), 40, rng)  # many resamples draw neither row of the rare labels
    samples = BS.metric_samples("multilabel", W, y, scores[None], 0.45)
    for b in range(len(W)):
        rows = np.repeat(np.arange(len(y)), W[b].astype(int))
        for name, value in M.evaluate("multilabel", y[rows], scores[rows], 0.45).items():
            assert samples[name][b] == pytest.approx(value, abs=1e-9, nan_ok=True), (name, b)


def test_a_label_absent_from_train_is_no_error_but_no_varying_label_is():
    y, _ = rare_truth()
    M.check_trainable("multilabel", y[:, [0, 2, 5]], ["a", "never", "always"])
    with pytest.raises(FeatxError, match="every label is never .or always. present.*never, always"):
        M.check_trainable("multilabel", y[:, [2, 5]], ["never", "always"])


# ---------------------------------------------------------------------------------------------
# Splits


def tag_rows(counts: dict[str, int], n: int, seed: int = 0, start: int = 0) -> list[dict]:
    """n rows whose `tags` hold each label on `counts[label]` rows (random rows), texts of words."""
    rng = random.Random(seed)
    tags = [[] for _ in range(n)]
    for label, count in counts.items():
        for i in rng.sample(range(n), count):
            tags[i].append(label)
    # JSONL lists: a row may carry no label at all (an empty CSV field reads as a missing label).
    words = lambda tag: [t.split("-")[0] for t in tag] + rng.sample(WORDS[20:], 3)  # noqa: E731
    return [{"id": f"r{start + i}", "text": " ".join(words(tag)), "tags": tag} for i, tag in enumerate(tags)]


def test_a_single_file_is_split_by_iterative_stratification(tmp_path):
    rows = tag_rows({"cat": 120, "dog": 40, "bird": 20, "fish": 1}, 400)
    path = write_rows(tmp_path / "tags.jsonl", rows)
    data = load_dataset(DataConfig(path=str(path), label="tags", id="id"))
    assert data.task == "multilabel"
    assert {k: len(v) for k, v in data.splits.items()} == {"train": 320, "dev": 40, "test": 40}
    names = list(data.label_names)
    for label, count in {"cat": 120, "dog": 40, "bird": 20}.items():
        for split, share in (("train", 0.8), ("dev", 0.1), ("test", 0.1)):
            got = int(data.splits[split].labels[:, names.index(label)].sum())
            assert abs(got - share * count) <= 1, (label, split, got)  # every label in proportion
    assert data.splits["train"].labels[:, names.index("fish")].sum() == 1  # a lone row trains


def test_a_label_only_the_test_rows_have_is_kept(tmp_path):
    train = write_rows(tmp_path / "train.jsonl", tag_rows({"cat": 30, "dog": 10}, 60))
    test = write_rows(tmp_path / "test.jsonl", tag_rows({"cat": 5, "owl": 2}, 20, start=100))
    data = load_dataset(DataConfig(train=str(train), test=str(test), label="tags", id="id"))
    owl = list(data.label_names).index("owl")
    assert data.splits["train"].labels[:, owl].sum() == 0 and data.splits["test"].labels[:, owl].sum() == 2


# ---------------------------------------------------------------------------------------------
# The whole pipeline on a long tail


def long_tail_files(tmp_path):
    """train.jsonl (150 rows) and test.jsonl (40): three common labels with their own words, one
    of 2 and one of 1 training row, one only the test rows have."""
    train = tag_rows({"cat": 60, "dog": 45, "bird": 30, "fish-two": 2, "pond-one": 1}, 150, seed=1)
    test = tag_rows({"cat": 16, "dog": 12, "bird": 8, "fish-two": 1, "tree-test-only": 2}, 40, seed=2,
                    start=1000)
    return write_rows(tmp_path / "train.jsonl", train), write_rows(tmp_path / "test.jsonl", test)


def test_long_tail_extract_probe_finetune_report_predict(make_pipeline, tmp_path):
    from featx.cache.extract import extract
    from featx.finetune.stage import run_finetune
    from featx.serve.predict import predict_file
    from featx.probe.stage import run_probe
    from featx.report.write import write_report

    train, test = long_tail_files(tmp_path)
    pipeline = make_pipeline({"train": str(train), "test": str(test), "label": "tags", "id": "id"},
                             extract={"poolings": ["mean"]},
                             probe={"heads": ["logistic", "mlp", "lightgbm"], "poolings": ["mean"],
                                    "layers": ["last"], "sweep": False, "n_jobs": 2},
                             finetune={"max_epochs": 1, "learning_rates": [1e-4], "head_input": "cls"})
    extract(pipeline)
    records = {r.head: r for r in run_probe(pipeline)}
    assert set(records) == {"logistic", "mlp", "lightgbm", "majority", "tfidf"}
    names = ["bird", "cat", "dog", "fish-two", "pond-one", "tree-test-only"]
    for head, record in records.items():
        assert record.protocol["name"] == "cv" and record.task == "multilabel"
        assert record.labels == {"total": 6, "constant_in_train": ["tree-test-only"],
                                    "macro_f1": 5, "macro_roc_auc": 5}, head
        folds = record.selection_labels
        assert len(folds) == 5 and sum(f["rows_held"] for f in folds) == 150
        # the one-row label is fitted in the 4 folds that train on its row, never in the fifth
        assert sorted(f["labels_fitted"] for f in folds) == [4, 5, 5, 5, 5], head
        # the 2-row label is scored in two folds, the 1-row label in a third: none scores all
        assert sorted(f["labels_scored"] for f in folds) == [3, 3, 4, 4, 4], head
        assert 0 <= record.metrics["micro_f1"] <= 1
    assert records["tfidf"].metrics["micro_f1"] > 0.9  # the label words give the common labels away
    tune = run_finetune(pipeline)
    assert tune.labels["constant_in_train"] == ["tree-test-only"] and tune.threshold is not None
    assert tune.truncated == {"max_length": 256, "train": 0, "select": 0, "report": 0}
    report = write_report(pipeline.runs_dir, pipeline.reports_dir, pipeline.name, pipeline)
    text = report["md"].read_text()
    assert "macro_f1 averages over the 5 of 6 labels with a positive test row" in text
    assert "predicted as that constant by every head: tree-test-only" in text
    new = write_rows(tmp_path / "new.csv", [{"id": r["id"], "text": r["text"]}
                                             for r in map(json.loads, test.read_text().splitlines())])
    for head in ("mean@2/logistic", "mean@2/mlp", "mean@2/lightgbm", "text/majority", "text/tfidf", None):
        result = predict_file(pipeline, str(new), head=head, finetuned=head is None, out=tmp_path / "p.jsonl")
        predicted = [json.loads(line)["prediction"] for line in result["out"].read_text().splitlines()]
        assert len(predicted) == 40 and all(isinstance(p, list) and set(p) <= set(names) for p in predicted)
        assert not any("tree-test-only" in p for p in predicted), head  # never in train: never predicted
    jsonl = predict_file(pipeline, str(new), head="text/tfidf", out=tmp_path / "p.jsonl")["out"]
    listed = [json.loads(line)["prediction"] for line in jsonl.read_text().splitlines()]
    with open(predict_file(pipeline, str(new), head="text/tfidf", out=tmp_path / "p.csv")["out"], newline="") as f:
        joined = [row["prediction"] for row in csv.DictReader(f)]
    assert [p.split(",") if p else [] for p in joined] == listed  # CSV: the same lists, comma-joined
    assert any(len(p) > 1 for p in listed)


def test_the_mlp_fits_where_its_early_stopping_split_cannot_be_made():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4))
    lone = np.array([0, 1] * 19 + [2, 1])  # a class of one row: no stratified split holds it
    for y in (lone, np.array([0, 1] * 4), np.eye(2, dtype=int)[[0, 1] * 4]):  # 8 rows: 1 held out
        head = H.build("mlp", "multilabel" if y.ndim == 2 else "multiclass", {"alpha": 1e-4})
        H.fit(head, X[:len(y)], y)
        mlp = head[-1].estimator_ if y.ndim == 2 else head[-1]
        assert mlp.early_stopping is True and mlp.n_iter_ > 0  # the caller's parameter, unchanged


def test_many_rare_labels_reach_low_thresholds_and_weak_penalties():
    from sklearn.linear_model import LogisticRegression

    y = np.zeros((200, 4), dtype=np.uint8)
    y[::10] = 1
    scores = np.where(y == 1, 0.03, 0.005) + np.random.default_rng(0).random(y.shape) * 0.004
    assert M.choose_threshold(y, scores) < 0.05  # a linear head's small probabilities of rare labels
    assert [c["C"] for c in H.HEADS["tfidf"].grid("multilabel")] == [1.0, 10.0, 100.0, 1000.0]
    _, texts, Y = rare_problem(300, seed=4)
    X = LexicalFeatures().fit(texts).transform(texts)
    dual = H.fit(H.build("tfidf", "multilabel", {"C": 100.0}), X, Y).predict_proba(X)
    for j in (0, 1, ONE):  # liblinear's dual coordinate descent reaches the primal optimum
        primal = LogisticRegression(C=100.0, solver="liblinear", tol=1e-6).fit(X, Y[:, j])
        np.testing.assert_allclose(dual[:, j], primal.predict_proba(X)[:, 1], atol=0.02)


def test_lp_ft_folds_a_probe_with_constant_labels_into_finite_weights():
    from featx.finetune.modeling import fold_probe

    X, _, Y = rare_problem(200, seed=5)
    probe = H.fit(H.build("logistic", "multilabel", {"C": 1.0}), X, Y)
    weight, bias = fold_probe(probe, "multilabel", X.shape[1], None)
    assert np.isfinite(weight).all() and np.isfinite(bias).all()
    logits = X @ weight.T + bias  # the fine-tune head's start: the probe's decisions
    np.testing.assert_allclose(1 / (1 + np.exp(-logits[:, :3])), probe.predict_proba(X)[:, :3], atol=1e-6)
    assert (logits[:, NEVER] < -20).all() and (logits[:, ALWAYS] > 20).all()


def test_multilabel_data_without_any_label_is_one_clear_error(tmp_path):
    path = write_rows(tmp_path / "empty.jsonl", [{"text": f"t {i}", "tags": []} for i in range(9)])
    with pytest.raises(FeatxError, match="no label at all"):
        load_dataset(DataConfig(path=str(path), label="tags", task="multilabel"))
    with pytest.raises(FeatxError, match="no label at all"):
        M.check_trainable("multilabel", np.zeros((5, 0)), [])
