"""The ridge scout: exactly ridge regression on standardised inputs against the labels'
indicator columns, its path reusing one eigendecomposition, and the staged grid built on it."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.preprocessing import StandardScaler

from featx.config.pipeline import ProbeConfig
from featx.probe.stage import heads_for
from featx.heads.ridge import RidgeClassifierHead
from featx.probe.search import choose_protocol
from tests.report.test_report import fake


def _problem(seed=0, n=300, d=10, k=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.1, 10, d) + rng.normal(size=d)  # unscaled, uncentred
    y = (X[:, :k] * rng.normal(size=k)).argmax(axis=1)
    return X.astype(np.float32), y


@pytest.mark.parametrize("alpha", [0.1, 10.0, 1000.0])
def test_decisions_are_ridge_on_standardised_one_hot_targets(alpha):
    X, y = _problem()
    head = RidgeClassifierHead(alpha=alpha).fit(X, y)
    Z = StandardScaler().fit(X).transform(X).astype(np.float64)
    Y = np.eye(4)[y]
    reference = Ridge(alpha=alpha).fit(Z, Y)
    # each class's decision centred on its mean (no class prior): Ridge's minus its intercept's prior
    np.testing.assert_allclose(head.decision_function(X), reference.predict(Z) - Y.mean(axis=0), atol=1e-6)
    proba = head.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    # decisions are the calibrated logits' argmax: T d + one offset per class
    logits = head.temperature_ * head.decision_function(X) + head.offset_
    assert (head.predict(X) == logits.argmax(axis=1)).all()
    assert 0.05 < head.temperature_ < 60


def test_the_calibration_is_the_least_training_log_loss_of_its_softmax():
    from scipy.optimize import minimize
    from scipy.special import log_softmax

    X, y = _problem()
    head = RidgeClassifierHead(alpha=1.0).fit(X, y)
    decision, Y = head.decision_function(X), np.eye(4)[y]

    def loss(theta):  # written plainly: mean -log p(true class) of softmax(T d + b)
        return -(Y * log_softmax(np.exp(theta[0]) * decision + theta[1:], axis=1)).sum(axis=1).mean()

    ours = np.concatenate([[np.log(head.temperature_)], head.offset_])
    best = minimize(loss, ours, method="L-BFGS-B", bounds=[(-3.0, 4.0)] + [(-50.0, 50.0)] * 4,
                    options={"ftol": 1e-15, "gtol": 1e-10})
    assert loss(ours) == pytest.approx(best.fun, abs=1e-6)


def test_multilabel_decisions_keep_each_labels_prior():
    X, y = _problem(1)
    Y = np.stack([y == 0, y == 1, np.zeros_like(y), np.ones_like(y)], axis=1).astype(int)
    head = RidgeClassifierHead(alpha=1.0).fit(X, Y)
    Z = StandardScaler().fit(X).transform(X).astype(np.float64)
    reference = Ridge(alpha=1.0).fit(Z, Y[:, :2].astype(float))
    np.testing.assert_allclose(head.decision_function(X)[:, :2], reference.predict(Z), atol=1e-6)
    proba = head.predict_proba(X)
    assert (proba[:, 2] == 0).all() and (proba[:, 3] == 1).all()  # constant labels, exactly
    assert ((proba[:, :2] > 0) & (proba[:, :2] < 1)).all()


def test_the_path_reuses_one_decomposition_and_equals_fresh_fits(monkeypatch):
    X, y = _problem(2)
    calls = []
    real = np.linalg.eigh
    monkeypatch.setattr(np.linalg, "eigh", lambda a: calls.append(1) or real(a))
    warm = RidgeClassifierHead(warm_start=True)
    for alpha in (0.1, 1.0, 10.0, 100.0):
        warm.set_params(alpha=alpha).fit(X, y)
        fresh = RidgeClassifierHead(alpha=alpha).fit(X, y)
        np.testing.assert_allclose(warm.coef_, fresh.coef_, atol=1e-10)
    assert len(calls) == 1 + 4  # the path's one, and one per fresh fit
    warm.set_params(alpha=1.0).fit(X[:200], y[:200])  # other rows: decomposed again
    np.testing.assert_allclose(warm.coef_, RidgeClassifierHead(alpha=1.0).fit(X[:200], y[:200]).coef_,
                               atol=1e-10)
    assert "_cache" not in warm.__getstate__()  # a saved head keeps no reference to training rows


def test_a_copy_of_a_fit_goes_on_along_the_path_without_decomposing_again(monkeypatch):
    """The search goes past a grid's edge from a copy of the edge's fit: the copy shares the
    decomposition of the same rows (and decomposes rows of its own when refitted on other rows);
    the original is left as it was."""
    import copy

    from featx.probe import search
    from featx.config.pipeline import ProbeConfig

    X, y = _problem(3)
    calls = []
    real = np.linalg.eigh
    monkeypatch.setattr(np.linalg, "eigh", lambda a: calls.append(1) or real(a))
    edge = RidgeClassifierHead(alpha=0.1, warm_start=True).fit(X, y)
    before = edge.coef_.copy()
    beyond = copy.deepcopy(edge).set_params(alpha=0.01).fit(X, y)
    assert len(calls) == 1
    np.testing.assert_allclose(beyond.coef_, RidgeClassifierHead(alpha=0.01).fit(X, y).coef_, atol=1e-10)
    np.testing.assert_array_equal(edge.coef_, before)
    import pickle

    assert "_cache" not in pickle.loads(pickle.dumps(edge)).__dict__  # a worker's result leaves it behind
    assert "_cache" in edge.__dict__  # ... and the head pickled keeps it
    copy.deepcopy(edge).fit(X[:200], y[:200])
    assert len(calls) == 3  # the copy on other rows, and the fresh fit above
    # In a search whose low edge wins, the extension is one more cheap step of the same path.
    calls.clear()
    chosen = search.select(head="ridge", task="multiclass", n_classes=4, X=X[:240], y=y[:240],
                           X_dev=X[240:], y_dev=y[240:], protocol=search.Protocol("dev", "dev", "test"),
                           cfg=ProbeConfig(), metric="accuracy", threads=1)
    assert len(calls) == 1, chosen.search


def test_a_constant_column_is_left_alone_as_standard_scaler_does():
    X, y = _problem(3)
    X[:, 4] = 7.0
    head = RidgeClassifierHead(alpha=1.0).fit(X, y)
    assert np.isfinite(head.coef_).all() and np.allclose(head.coef_[4], 0.0)


def test_regression_runs_ridge_once_named_logistic():
    assert heads_for("regression", ProbeConfig()) == (("logistic", "mlp", "lightgbm"), "logistic")
    assert heads_for("multiclass", ProbeConfig()) == (("ridge", "logistic", "mlp", "lightgbm"), "ridge")


def test_cv_compares_candidates_on_the_first_fold_and_scores_the_choice_out_of_fold():
    from featx.stats import metrics as M
    from featx.probe.search import select, selection_splits

    X, y = _problem(4, n=400)
    cfg = ProbeConfig(folds=4)
    protocol = choose_protocol("cv", ["train", "test"], 4)
    chosen = select(head="ridge", task="multiclass", n_classes=4, X=X, y=y, X_dev=None, y_dev=None,
                    protocol=protocol, cfg=cfg, metric="accuracy", threads=1)
    splits = selection_splits("multiclass", y, protocol, 4, 0)
    assert len(chosen.scores) == len(chosen.truth) == len(y)  # every training row, out of fold
    # the chosen candidate refitted on each fold predicts exactly the scores recorded for it
    for fit_rows, held_rows in splits:
        head = RidgeClassifierHead(**chosen.params).fit(X[fit_rows], y[fit_rows])
        # (the first fold's scores come from the path, whose calibration starts from the last
        # penalty's: the same optimum to the solver's tolerance)
        np.testing.assert_allclose(chosen.scores[held_rows], head.predict_proba(X[held_rows]), atol=1e-3)
    assert chosen.score == pytest.approx(M.evaluate("multiclass", y, chosen.scores, 0.5)["accuracy"])
    # the search's scores are the first fold's: on its held rows only
    first = splits[0][1]
    best = max(c["score"] for c in chosen.search if "score" in c)
    assert best == pytest.approx(M.evaluate("multiclass", y[first], chosen.scores[first], 0.5)["accuracy"])


def test_the_second_stage_takes_the_runner_up_in_a_near_tie():
    from featx.probe.job import Features
    from featx.probe.stage import _second_stage_features

    first = [(Features("mean", (i,)), "ridge") for i in range(4)]

    def scout(layer, score, se=0.01):
        return fake("probe", "multiclass", f"mean@{layer}", "ridge", 0.5, selection_score=score, selection_se=se)

    near = _second_stage_features([scout(0, 0.70), scout(1, 0.795), scout(2, 0.80)], first)
    assert [f.name for f in near] == ["mean@2", "mean@1"]
    clear = _second_stage_features([scout(0, 0.70), scout(1, 0.75), scout(2, 0.80)], first)
    assert [f.name for f in clear] == ["mean@2"]
    # a tie goes to the earlier feature set of the plan, whichever record came first
    tied = _second_stage_features([scout(3, 0.80, 0.0), scout(1, 0.80, 0.0)], first)
    assert [f.name for f in tied] == ["mean@1", "mean@3"]


def test_a_near_tie_is_judged_on_the_paired_difference_when_the_predictions_are_stored(monkeypatch, tmp_path):
    from featx.runs import choice
    from featx.runs import records as R
    from featx.probe.job import Features
    from featx.probe.stage import _second_stage_features

    first = [(Features("mean", (i,)), "ridge") for i in range(2)]
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 3, 2000)
    right = np.eye(3)[truth] * 0.8 + 0.1  # every row right
    wrong = np.roll(right, 1, axis=1)
    # the runner-up is the best wrong on 1% more rows: a gap of 0.01 within the score's own error
    # (about 0.01 on 2,000 rows) but far beyond the error of a difference on 20 rows
    same = np.where((np.arange(2000) < 300)[:, None], wrong, right)
    worse = np.where((np.arange(2000) < 320)[:, None], wrong, right)
    unrelated = np.where((np.arange(2000) >= 1680)[:, None], wrong, right)  # 320 other rows

    def scout(layer, score):
        return fake("probe", "multiclass", f"mean@{layer}", "ridge", 0.5, selection_score=score, selection_se=0.011)

    def stored(runner_up):
        def read(directory, record):
            found = same if record.features == "mean@1" else runner_up
            return R.Predictions(np.arange(3), np.arange(3), np.zeros((1, 3, 3)), 0.5, truth, found)
        return read

    scouts = [scout(0, 0.84), scout(1, 0.85)]
    monkeypatch.setattr(choice, "read_predictions", stored(worse))
    assert [f.name for f in _second_stage_features(scouts, first, tmp_path)] == ["mean@1"]
    monkeypatch.setattr(choice, "read_predictions", stored(unrelated))
    assert [f.name for f in _second_stage_features(scouts, first, tmp_path)] == ["mean@1", "mean@0"]
    # without stored predictions, the best's own error judges, as before
    assert [f.name for f in _second_stage_features(scouts, first)] == ["mean@1", "mean@0"]


def test_an_imbalanced_binary_task_decides_as_well_as_its_majority():
    from sklearn.linear_model import RidgeClassifier

    rng = np.random.default_rng(5)
    X = rng.normal(size=(2000, 20))
    y = (rng.random(2000) < 0.03).astype(int)
    X[:, 0] += y  # weakly informative: the majority class is the right answer for most rows
    head = RidgeClassifierHead(alpha=1.0).fit(X, y)
    reference = RidgeClassifier(alpha=1.0).fit(StandardScaler().fit_transform(X), y)
    assert (head.predict(X) == y).mean() >= (reference.predict(StandardScaler().fit(X).transform(X)) == y).mean()
    assert (head.predict(X) == y).mean() >= 1 - y.mean()
    assert head.predict_proba(X)[:, 1].mean() < 0.2  # probabilities that read as the 3% it is


def test_a_warm_refit_on_an_array_changed_in_place_decomposes_again():
    X, y = _problem(6)
    head = RidgeClassifierHead(warm_start=True).fit(X, y)
    X *= 3.0
    X[:, 0] += np.random.default_rng(6).normal(size=len(X)).astype(X.dtype)
    head.fit(X, y)
    np.testing.assert_allclose(head.coef_, RidgeClassifierHead().fit(X, y).coef_, atol=1e-10)


def test_a_scout_scoring_nan_ranks_last_and_never_hides_the_best():
    from featx.probe.job import Features
    from featx.probe.stage import _second_stage_features

    first = [(Features("mean", (i,)), "ridge") for i in range(3)]

    def scout(layer, score):
        return fake("probe", "multiclass", f"mean@{layer}", "ridge", 0.5, selection_score=score, selection_se=0.01)

    nan = float("nan")
    assert [f.name for f in _second_stage_features([scout(1, 0.70), scout(0, nan), scout(2, 0.80)], first)] \
        == ["mean@2"]
    # every scout NaN: the plan's first feature set, whichever record came first
    assert [f.name for f in _second_stage_features([scout(2, nan), scout(0, nan)], first)] == ["mean@0"]


def probed(features, head, score, scout=False, task="multiclass", protocol="cv"):
    """A probe record of these features, head and selection score (a scout's or not)."""
    return fake("probe", task, features, head, 0.5, created="2026-12-01T00:00:00+00:00",
                protocol={"name": protocol, "select_on": protocol, "report_on": "test"}, selection_score=score,
                selection_se=0.01, n_features=384, scout=scout)


def test_the_verdict_chooses_among_the_second_stage_not_the_scout():
    from featx.runs.choice import frozen_choice

    records = [probed("mean@4", "ridge", 0.80, scout=True), probed("mean@5", "ridge", 0.79, scout=True),
               probed("mean@4", "logistic", 0.77), probed("mean@4", "mlp", 0.78)]
    chosen = frozen_choice(records)
    assert (chosen.record.features, chosen.record.head) == ("mean@4", "mlp")
    # a grid of scouts only (nothing else ran): the scouts are what there is
    only = frozen_choice(records[:2])
    assert only.record.head == "ridge"


def test_a_ridge_scout_clearly_ahead_of_every_answering_head_answers():
    # 60 classes of 7 rows: the ridge scout scored 1.0 on dev and test, the logistic head on
    # the same features 0.36, and the verdict said the backbone lost to TF-IDF's 1.0.
    from featx.runs.choice import frozen_choice

    records = [probed("mean@0", "ridge", 1.0, scout=True, protocol="dev"),
               probed("mean@1", "ridge", 1.0, scout=True, protocol="dev"),
               probed("mean@0", "logistic", 0.357, protocol="dev")]
    chosen = frozen_choice(records)
    assert (chosen.record.features, chosen.record.head) == ("mean@0", "ridge")  # on the answered features
    records[0] = probed("mean@0", "ridge", 0.37, scout=True, protocol="dev")  # ahead by noise: only ranks
    assert frozen_choice(records).record.head == "logistic"


def test_a_scout_that_is_an_answering_head_stays_a_candidate_on_the_answered_features():
    # On a regression task logistic (Ridge) is the scout: dropping its records left the MLP,
    # 0.77 test Pearson beside the Ridge's 0.99, and a verdict that TF-IDF beat the backbone.
    from featx.runs.choice import frozen_choice

    regression = dict(task="regression", protocol="dev")
    records = [probed("mean@2", "logistic", 0.99, scout=True, **regression),
               probed("cls@2", "logistic", 0.995, scout=True, **regression),
               probed("mean@2", "mlp", 0.79, **regression), probed("mean@2", "lightgbm", 0.80, **regression)]
    chosen = frozen_choice(records)
    # the scout on the features the second stage ran on wins; on other features it only ranked
    assert (chosen.record.features, chosen.record.head) == ("mean@2", "logistic")
