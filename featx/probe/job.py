"""One probe job: a head on one feature set, from the cache to its record. It loads the job's
data, selects the hyperparameters (featx/probe/search.py), fits every seed, evaluates on the report
split and builds the record and predictions (not written: the stage, featx/probe/stage.py, writes
them). Never touches torch.
"""
from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featx.stats import bootstrap
from featx.heads import registry as H
from featx.stats import metrics as M
from featx.cache.reader import Cache
from featx.config.pipeline import ProbeConfig
from featx.errors import FeatxError
from featx.heads.pairs import combine
from featx.runs.schema import Record, new_record
from featx.runs.records import Predictions, cache_facts, probe_config_hash
from featx.runs.headfiles import save_heads
from featx.probe.search import Protocol, choose_protocol, cv_folds, cv_protocol, select, selection_splits, warmed
from featx.tasks import TASKS
from featx.heads.varying import constant_labels


@dataclass(frozen=True)
class Features:
    pooling: str
    layers: tuple[int, ...]
    combine: str = "joint"
    """A text pair's vectors: joint (the pair encoded together, or a single text's vector), or
    a `featx.heads.pairs` combination of its two texts encoded alone (bi, cos)."""

    @property
    def name(self) -> str:
        if not self.layers:
            return self.pooling  # "text": the baselines read the texts
        vectors = f"{self.pooling}@{'+'.join(map(str, self.layers))}"
        return vectors if self.combine == "joint" else f"{self.combine}:{vectors}"


# The baselines' input: the texts (or pairs), not a backbone vector.
TEXT = Features("text", ())


@dataclass
class Problem:
    """One (features, head) job's data, loaded from the cache."""
    task: str
    names: list[str]
    protocol: Protocol
    X: np.ndarray
    y: np.ndarray
    X_dev: np.ndarray | None
    y_dev: np.ndarray | None
    X_report: np.ndarray
    y_report: np.ndarray
    ids_report: np.ndarray
    base: dict
    """The record fields every head on these features shares (from the cache)."""
    sentence: dict | None
    groups_report: np.ndarray
    """The report split's groups of identical rows (`Cache.row_groups`): its intervals resample
    the distinct rows."""
    text_pair: bool
    """Whether the cache's rows are text pairs (bound into each saved head with the label names)."""


def _inputs(cache: Cache, split: str, features: Features) -> np.ndarray:
    if features == TEXT:
        texts, pairs = cache.texts(split), cache.text_pairs(split)
        return texts if pairs is None else np.stack([texts, pairs], axis=1)  # (n,) or (n, 2)
    if features.combine != "joint":
        return combine(features.combine, *cache.pair_features(split, features.pooling, list(features.layers)))
    return cache.features(split, features.pooling, list(features.layers))


def load_problem(cache_path: str | Path, features: Features, head: str, cfg: ProbeConfig,
                 pipeline: str | None = None, budget: dict | None = None) -> Problem:
    """The job's data. With `budget` (a learning curve's point: featx.curve), the head trains on
    the training rows `budget["train_rows"]` only, and its protocol is the one those rows allow."""
    with Cache(cache_path) as cache:
        task, names = cache.task, cache.label_names
        load = lambda split: (_inputs(cache, split, features), cache.labels(split))  # noqa: E731
        X, y = load("train")
        if budget is not None:
            X, y = X[budget["train_rows"]], y[budget["train_rows"]]
        protocol = choose_protocol(cfg.protocol, cache.splits, cfg.folds, len(y), cfg.cv_max_rows)
        M.check_trainable(task, y, names)
        protocol = cv_protocol(task, y, protocol, cfg.folds)
        X_report, y_report = load(protocol.report_on)
        X_dev, y_dev = load("dev") if protocol.name == "dev" else (None, None)
        # Every split a head reads, not train alone (a head's own check says only "Input X contains NaN").
        for split, inputs in (("train", X), (protocol.report_on, X_report), ("dev", X_dev)):
            if features != TEXT and inputs is not None and not np.isfinite(inputs).all():
                raise FeatxError(f"{Path(cache_path).name}: the {split} {features.name} vectors hold NaN or "
                                 "infinity; delete the cache and rerun featx extract (with extract.store_dtype "
                                 "= \"float32\" if the activations overflow float16)")
        stats = cache.meta.get("extract_stats") or {}
        baseline = H.HEADS[head].baseline
        base = dict(stage="probe", pipeline=pipeline or cache.meta.get("pipeline_name"),
                    config_hash=probe_config_hash(cfg), cache_key=cache.key, task=task, features=features.name,
                    pooling=features.pooling, layers=list(features.layers), combine=features.combine,
                    head=head,
                    init=cache.meta.get("init"), baseline=baseline, n_train=len(y), n_eval=len(y_report),
                    # The cost side of the comparison: every probe shares one extraction pass
                    # (a baseline on the texts costs none).
                    backbone_forward_passes=0 if baseline else int(stats.get("rows_total", 0)),
                    extract_seconds=None if baseline else stats.get("seconds"),
                    cache_bytes=Path(cache_path).stat().st_size, reused=None, heads=None, **cache_facts(cache.meta),
                    label_budget=None if budget is None else budget["record"])
        return Problem(task, names, protocol, X, y, X_dev, y_dev, X_report, y_report,
                       cache.ids(protocol.report_on), base, cache.meta.get("sentence_pooling"),
                       cache.row_groups(protocol.report_on), bool(cache.meta.get("text_pair")))


def _prepared(head: str, p: Problem):
    """(transformer or None, X, X_dev, X_report): a head's unsupervised features (TF-IDF) are
    fitted on the training inputs once, not once per candidate."""
    prepare = H.HEADS[head].prepare
    if prepare is None:
        return None, p.X, p.X_dev, p.X_report
    transformer = prepare()
    return (transformer, transformer.fit_transform(p.X),
            None if p.X_dev is None else transformer.transform(p.X_dev), transformer.transform(p.X_report))


def _saved(transformer, estimator):
    """What is saved and predicts from raw inputs: the transformer and the head as one Pipeline."""
    from sklearn.pipeline import Pipeline as SkPipeline

    return estimator if transformer is None else SkPipeline([("features", transformer), ("head", estimator)])


def fit_selected(cache_path: str | Path, features: Features, head: str, cfg: ProbeConfig,
                 threads: int = 1):
    """The head fitted on train with the hyperparameters the protocol selects (first seed)."""
    from threadpoolctl import threadpool_limits

    p = load_problem(cache_path, features, head, cfg)
    if p.protocol.name == "mteb":
        raise FeatxError("a head for LP-FT is selected with the dev or cv protocol, not mteb")
    transformer, X, X_dev, _ = _prepared(head, p)
    with threadpool_limits(threads):
        chosen = select(head=head, task=p.task, n_classes=len(p.names), X=X, y=p.y, X_dev=X_dev, y_dev=p.y_dev,
                        protocol=p.protocol, cfg=cfg, metric=M.primary(p.task, cfg.metric), threads=threads)
        fitted = chosen.fitted or H.fit(warmed(head, p.task, chosen.params, start=chosen.start, y=p.y,
                                               seed=cfg.seeds[0], threads=threads), X, p.y)
        return _saved(transformer, fitted)


def probe_one(cache_path: str | Path, features: Features, head: str, cfg: ProbeConfig, *,
              pipeline: str | None = None, threads: int = 1, heads_dir: Path | None = None,
              budget: dict | None = None) -> tuple[Record, Predictions]:
    """Train and evaluate one head on one feature set (`budget`: `load_problem`); returns its
    record (not written) and the report split's predictions it was computed from."""
    from threadpoolctl import threadpool_limits

    p = load_problem(cache_path, features, head, cfg, pipeline, budget)
    task, names, protocol = p.task, p.names, p.protocol
    if protocol.name == "mteb":
        fields, stack = _mteb(task=task, X=p.X, y=p.y, X_report=p.X_report, y_report=p.y_report, groups=p.groups_report,
                              n_classes=len(names), protocol=protocol, cfg=cfg)
        fields["hyperparameters"]["normalized"] = bool(
            features.pooling == "sentence" and p.sentence and p.sentence.get("normalize"))
        return new_record(**p.base, **fields), _predictions(p, task, stack, 0.5)
    metric = M.primary(task, cfg.metric)
    start = time.perf_counter()
    with threadpool_limits(threads):
        transformer, X, X_dev, X_report = _prepared(head, p)
        selection = select(head=head, task=task, n_classes=len(names), X=X, y=p.y, X_dev=X_dev, y_dev=p.y_dev,
                           protocol=protocol, cfg=cfg, metric=metric, threads=threads)
        chosen, threshold, fitted = selection.params, selection.threshold, selection.fitted
        per_seed, stack, predict_seconds, fitted_heads = [], [], 0.0, []
        for seed in cfg.seeds:
            if seed != cfg.seeds[0] and H.HEADS[head].deterministic:
                per_seed.append(per_seed[0])  # the seed cannot change this head: same fit, same scores
                stack.append(stack[0])
                continue
            if fitted is None or seed != cfg.seeds[0]:  # from the search's fit, for a head that warm-starts
                fitted = H.fit(warmed(head, task, chosen, start=selection.start, y=p.y, seed=seed,
                                      threads=threads), X, p.y)
            t = time.perf_counter()
            scores = H.predict_scores(fitted, X_report, task, len(names))
            predict_seconds += time.perf_counter() - t
            per_seed.append(M.evaluate(task, p.y_report, scores, threshold))
            stack.append(scores)
            if heads_dir is not None:
                fitted_heads.append((seed, _saved(transformer, fitted)))
            fitted = None
    fit_seconds = time.perf_counter() - start - predict_seconds
    predictions = dataclasses.replace(
        _predictions(p, task, np.stack(stack), threshold), selection_truth=np.asarray(selection.truth),
        selection_scores=np.asarray(selection.scores, dtype=TASKS[task].score_dtype()))
    record = new_record(
        **p.base, protocol=vars(protocol) | {"select_on": selection.select_on} | (
            {"folds": cv_folds(task, p.y, cfg.folds)} if protocol.name == "cv" else {}),
        hyperparameters=chosen, search=selection.search, selection_score=selection.score, seeds=list(cfg.seeds), primary_metric=metric,
        # How far apart candidates must be before the selection split can tell them apart: the
        # report chooses among records within one standard error of the best (docs/verdict.md).
        selection_se=bootstrap.standard_error(task, metric, selection.truth, selection.scores, threshold),
        n_features=int(X.shape[1]) if X.ndim == 2 else None,
        **_aggregate(per_seed), metrics_ci=bootstrap.intervals(task, predictions.labels, predictions.scores,
                                                               predictions.threshold, groups=p.groups_report),
        threshold=threshold if TASKS[task].thresholded else None,
        fit_seconds=round(fit_seconds, 3), predict_seconds=round(predict_seconds, 4),
        **_label_fields(p, protocol, cfg))
    if heads_dir is not None:  # saved once the record exists: each head names its record and back
        record = dataclasses.replace(record, heads=save_heads(heads_dir, record, fitted_heads, label_names=p.names,
                                                              text_pair=p.text_pair))
    return record, predictions


def _label_fields(p: Problem, protocol: Protocol, cfg: ProbeConfig) -> dict:
    """Binary records name their positive class (the second label), whose F1 `f1` is, with its
    share of train and of the report split. Multilabel records say over which labels they are computed: `labels` (constant in
    train, averaged over by the report split's macro metrics) and `selection_labels`, per
    selection split (each fold, the held-out part, or dev), how many labels varied in the
    rows fitted on (the others were predicted as their constant) and how many had a positive
    among the held rows (the labels that split could score)."""
    if TASKS[p.task].n_classes == 2:  # f1 is the positive class's: which one, and how common
        return {"labels": {"positive": p.names[1], "negative": p.names[0],
                           "positive_train": float(np.mean(p.y == 1)) if len(p.y) else None,
                           "positive_report": float(np.mean(p.y_report == 1)) if len(p.y_report) else None}}
    if not TASKS[p.task].thresholded:
        return {}
    per_split = []
    for fit_rows, held_rows in selection_splits(p.task, p.y, protocol, cfg.folds, cfg.seeds[0]):
        y_fit = p.y if fit_rows is None else p.y[fit_rows]
        y_held = p.y_dev if held_rows is None else p.y[held_rows]
        per_split.append({"rows_fitted": len(y_fit), "rows_held": len(y_held),
                          "labels_fitted": int(constant_labels(y_fit)[0].sum()),
                          "labels_scored": int(len(M.macro_labels(y_held)[0]))})
    return {"labels": M.label_summary(p.y, p.y_report, p.names), "selection_labels": per_split}


def _predictions(p: Problem, task: str, stack: np.ndarray, threshold: float) -> Predictions:
    return Predictions(p.ids_report, p.y_report, stack.astype(TASKS[task].score_dtype()), threshold)


def _aggregate(per_seed: list[dict]) -> dict:
    names = list(per_seed[0])
    values = {k: np.array([m[k] for m in per_seed], dtype=float) for k in names}
    return {"metrics": {k: float(np.mean(v)) for k, v in values.items()},
            "metrics_std": {k: float(np.std(v)) for k, v in values.items()},
            "per_seed": per_seed}


def undersample(y: np.ndarray, order: np.ndarray, per_label: int) -> list[int]:
    """The first `per_label` rows of each label in `order` (all of a label's rows if fewer)."""
    taken, picked = defaultdict(int), []
    for i in order:
        if taken[y[i]] < per_label:
            picked.append(int(i))
            taken[y[i]] += 1
    return picked


def _mteb(*, task: str, X: np.ndarray, y: np.ndarray, X_report: np.ndarray, y_report: np.ndarray, groups: np.ndarray,
          n_classes: int, protocol: Protocol, cfg: ProbeConfig) -> tuple[dict, np.ndarray]:
    """MTEB's classification evaluator (mteb 2.x `AbsTaskClassification`): for each of n
    experiments, shuffle the carried list of training indices with a fresh
    `RandomState(seed)`, keep the first k rows of each label, fit
    LogisticRegression(max_iter=100, random_state=seed) on the unscaled vectors; average.
    Returns the record's fields (but the cache's) and the experiments' scores (E, n, ...)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    if not TASKS[task].classes:
        raise FeatxError(f"the mteb protocol is MTEB's classification evaluator: binary or "
                         f"multiclass tasks only, this one is {task}")
    order = list(range(len(y)))  # shuffled in place every experiment, as MTEB does
    per_experiment, stack, start = [], [], time.perf_counter()
    for _ in range(cfg.mteb_experiments):
        np.random.RandomState(cfg.mteb_seed).shuffle(order)
        picked = undersample(y, order, cfg.mteb_samples_per_label)
        classifier = LogisticRegression(random_state=cfg.mteb_seed, max_iter=100)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # max_iter=100 is MTEB's choice
            classifier.fit(X[picked], y[picked])
        scores = H.predict_scores(classifier, X_report, task, n_classes)
        per_experiment.append(M.evaluate(task, y_report, scores))
        stack.append(scores)
    stack = np.stack(stack)
    return dict(protocol=vars(protocol) | {"experiments": cfg.mteb_experiments,
                                           "samples_per_label": cfg.mteb_samples_per_label},
                hyperparameters={"max_iter": 100, "scaling": False}, search=[],
                seeds=[cfg.mteb_seed], primary_metric="accuracy", **_aggregate(per_experiment),
                metrics_ci=bootstrap.intervals(task, y_report, stack, groups=groups), threshold=None,
                n_train_sampled=len(picked), fit_seconds=round(time.perf_counter() - start, 3),
                predict_seconds=None), stack
