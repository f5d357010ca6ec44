"""Probing: heads trained on cached features with an honest protocol. Never touches torch.

Protocol (stated in every record):
- dev: fit each candidate on train, choose on dev, report on test.
- cv:  choose by k-fold cross-validation on train (out-of-fold predictions), refit on all of
       train, report on test (or on dev when there is no test split).
- holdout: choose on one held-out part of train, refit on all of train (large train splits).
- mteb: MTEB's classification evaluator, to check featx against leaderboard numbers.
`auto` is dev when dev and test both exist, else cv, or holdout past `cv_max_rows` training
rows. Multilabel decisions use one threshold chosen with the hyperparameters. The default grid
is staged: the first head on every feature set, the others on the best one.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featx import bootstrap
from featx import heads as H
from featx import metrics as M
from featx.cache import Cache
from featx.choice import selection_score
from featx.config import MODEL_POOLINGS, Pipeline, ProbeConfig
from featx.errors import FeatxError
from featx.files import loads_json, utc_now, writable_dir, write_bytes
from featx.headfiles import head_binding, load_head, save_heads
from featx.pairs import combine
from featx.records import (
    OPTIONAL,
    Predictions,
    cache_facts,
    configuration,
    new_record,
    probe_config_hash,
    probe_dir,
    read_predictions,
    read_records,
    read_run_status,
    record_name,
    write_json,
    write_record,
    write_run_status,
)
from featx.stratify import iterative_folds, iterative_holdout
from featx.tasks import TASKS
from featx.version import __version__

log = logging.getLogger("featx")


@dataclass(frozen=True)
class Features:
    pooling: str
    layers: tuple[int, ...]
    combine: str = "joint"
    """A text pair's vectors: joint (the pair encoded together, or a single text's vector), or
    a `featx.pairs` combination of its two texts encoded alone (bi, cos)."""

    @property
    def name(self) -> str:
        if not self.layers:
            return self.pooling  # "text": the baselines read the texts
        vectors = f"{self.pooling}@{'+'.join(map(str, self.layers))}"
        return vectors if self.combine == "joint" else f"{self.combine}:{vectors}"


@dataclass(frozen=True)
class Protocol:
    name: str
    select_on: str
    report_on: str


def choose_protocol(requested: str, splits: list[str], folds: int, n_train: int = 0,
                    cv_max_rows: int = 20_000) -> Protocol:
    report = "test" if "test" in splits else "dev"
    if report not in splits:
        raise FeatxError(f"the cache has only {splits}: probing needs a dev or test split to report on")
    if requested == "mteb":
        return Protocol("mteb", "-", report)
    if requested == "dev" or (requested == "auto" and {"dev", "test"} <= set(splits)):
        if not {"dev", "test"} <= set(splits):
            raise FeatxError(f"probe.protocol = \"dev\" needs dev and test splits; the cache has "
                             f"{splits} (use \"cv\", \"holdout\" or \"auto\")")
        return Protocol("dev", "dev", "test")
    if requested == "holdout" or (requested == "auto" and n_train > cv_max_rows):
        # Past cv_max_rows one held-out split is as good a judge as k folds at 1/k of the cost:
        # the standard error of an accuracy on 2,000+ rows is already about 1 point or less.
        return Protocol("holdout", f"{_holdout_rows(n_train)} rows held out of train", report)
    return Protocol("cv", f"{folds}-fold cv on train", report)


def _holdout_rows(n_train: int) -> int:
    """10% of train, at least 2,000 rows (or half of a small train), at most 10,000."""
    return int(min(10_000, max(min(2_000, n_train // 2), n_train // 10)))


def feature_sets(cache: Cache, cfg: ProbeConfig) -> list[tuple[Features, str]]:
    """(features, head) pairs of the whole grid (every head on every feature set), the layer
    sweep and the baselines, without repeats. `plan_jobs` stages them."""
    first, heads = plan_jobs(cache, cfg)
    features = dict.fromkeys(f for f, h in first if f != TEXT)
    return list(dict.fromkeys(first + [(f, h) for f in features for h in heads]))


def heads_for(task: str, cfg: ProbeConfig) -> tuple[tuple[str, ...], str]:
    """(the heads, the sweep head) a task runs: on a regression task ridge is logistic's model
    (Ridge), so it runs once, named logistic."""
    if not TASKS[task].regression:
        return cfg.heads, cfg.sweep_head
    named = lambda head: "logistic" if head == "ridge" else head  # noqa: E731
    return tuple(dict.fromkeys(map(named, cfg.heads))), named(cfg.sweep_head)


def plan_jobs(cache: Cache, cfg: ProbeConfig) -> tuple[list[tuple[Features, str]], list[str]]:
    """(first-stage jobs, heads of the second stage). Checks that the cache holds every pooling
    and layer asked for (the error lists what it has).

    staged: the first head (ridge) on every feature set, the sweep and the baselines; the
    second stage runs the other heads on the feature set the first stage scored best. full: the
    first stage is every head on every feature set. Under the mteb protocol: MTEB's one
    classifier on the model's own embedding."""
    mteb = cfg.protocol == "mteb"
    poolings = cfg.poolings or (_mteb_poolings(cache) if mteb else tuple(cache.poolings))
    heads, sweep_head = heads_for(cache.task, cfg)
    heads = ("logistic",) if mteb else heads
    scouts = heads if cfg.grid == "full" else heads[:1]
    kinds = pair_kinds(cache, cfg)
    jobs = []
    for layer_spec in cfg.layers:
        for pooling in poolings:
            layers = tuple(cache.layer_indices(pooling, layer_spec))
            if pooling in MODEL_POOLINGS and isinstance(layer_spec, str) and layer_spec != "last":
                continue  # the model's own poolings have only the last layer: nothing to concatenate
            jobs += [(Features(pooling, layers, kind), head) for kind in kinds for head in scouts]
    if "cos" in kinds and TASKS[cache.task].regression and len(cache.label_names) == 1:
        # The zero-training row MTEB reports for STS: the cosine of the model's own embeddings.
        pooling = "sentence" if "sentence" in cache.poolings else "mean"
        jobs.append((Features(pooling, (cache.layers(pooling)[-1],), "cos"), "identity"))
    if cfg.sweep and not mteb:
        if cfg.sweep_pooling in cache.poolings:
            for layer in cache.layers(cfg.sweep_pooling):
                jobs.append((Features(cfg.sweep_pooling, (layer,)), sweep_head))
        else:
            log.info("no layer sweep: the cache has no %r pooling", cfg.sweep_pooling)
    if not mteb:
        # First: the TF-IDF fit is the longest job; started first, the short ones fill the
        # other workers around it instead of waiting behind it at the end.
        jobs = [(TEXT, name) for name in cfg.baselines[::-1]] + jobs
    later = [] if mteb or cfg.grid == "full" else list(heads[1:])
    outputs = len(cache.label_names)
    for head in list(later):
        limit = H.HEADS[head].max_outputs
        if limit is not None and not TASKS[cache.task].regression and outputs > limit:
            later.remove(head)
            log.info("%s is left out of the staged grid: %d %s make it cost classes x rounds x trees, "
                     "more than the backbone pass (it was the weakest head on dense embeddings); "
                     "probe.grid = \"full\" runs it", head, outputs,
                     "classes" if TASKS[cache.task].classes else "labels")
    return list(dict.fromkeys(jobs)), later


def pair_kinds(cache: Cache, cfg: ProbeConfig) -> tuple[str, ...]:
    """The feature sets of each pooling and layer: joint only for single texts (and under the
    mteb protocol); for pairs, those of probe.pair_features the cache can build."""
    if cfg.protocol == "mteb" or cache.text_pairs(cache.splits[0]) is None:
        return ("joint",)
    if cache.has_singles:
        return cfg.pair_features
    kinds = tuple(k for k in cfg.pair_features if k == "joint")
    log.warning("the cache holds no single-text vectors (extract.pair_singles = false): the pair "
                "feature sets %s are left out", [k for k in cfg.pair_features if k != "joint"])
    if not kinds:
        raise FeatxError("probe.pair_features asks only for bi-encoder feature sets, but the cache "
                         "was extracted with extract.pair_singles = false; rerun featx extract "
                         "without it, or add \"joint\" to probe.pair_features")
    return kinds


def _mteb_poolings(cache: Cache) -> tuple[str, ...]:
    if "sentence" in cache.poolings:
        return ("sentence",)
    log.warning("the cache has no `sentence` pooling (the model's own embedding, which MTEB "
                "evaluates); the mteb protocol runs on raw `mean` vectors, so its numbers can "
                "differ from MTEB's")
    return ("mean",)


# The baselines' input: the texts (or pairs), not a backbone vector.
TEXT = Features("text", ())


# ---------------------------------------------------------------------------------------------
# One (features, head): selection, fits over seeds, evaluation


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
    sentence: dict | None


def _inputs(cache: Cache, split: str, features: Features) -> np.ndarray:
    if features == TEXT:
        texts, pairs = cache.texts(split), cache.text_pairs(split)
        return texts if pairs is None else np.stack([texts, pairs], axis=1)  # (n,) or (n, 2)
    if features.combine != "joint":
        return combine(features.combine, *cache.pair_features(split, features.pooling, list(features.layers)))
    return cache.features(split, features.pooling, list(features.layers))


def load_problem(cache_path: str | Path, features: Features, head: str, cfg: ProbeConfig,
                 pipeline: str | None = None) -> Problem:
    with Cache(cache_path) as cache:
        task, names = cache.task, cache.label_names
        protocol = choose_protocol(cfg.protocol, cache.splits, cfg.folds, cache.n_rows("train"),
                                   cfg.cv_max_rows)
        load = lambda split: (_inputs(cache, split, features), cache.labels(split))  # noqa: E731
        X, y = load("train")
        M.check_trainable(task, y, names)
        if features != TEXT and not np.isfinite(X).all():
            raise FeatxError(f"{Path(cache_path).name}: the train {features.name} vectors hold NaN or "
                             "infinity; delete the cache and rerun featx extract (with extract.store_dtype "
                             "= \"float32\" if the activations overflow float16)")
        X_report, y_report = load(protocol.report_on)
        X_dev, y_dev = load("dev") if protocol.name == "dev" else (None, None)
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
                    cache_bytes=Path(cache_path).stat().st_size, reused=None, heads=None, **cache_facts(cache.meta))
        return Problem(task, names, protocol, X, y, X_dev, y_dev, X_report, y_report,
                       cache.ids(protocol.report_on), base, cache.meta.get("sentence_pooling"))


def _prepared(head: str, p: Problem):
    """(transformer or None, X, X_dev, X_report): a head's unsupervised features (TF-IDF) are
    fitted on the training inputs once, not once per candidate."""
    prepare = H.HEADS[head].prepare
    if prepare is None:
        return None, p.X, p.X_dev, p.X_report
    transformer = prepare().fit(p.X)
    return (transformer, transformer.transform(p.X),
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
        chosen = _select(head, p.task, len(p.names), X, p.y, X_dev, p.y_dev, protocol=p.protocol,
                         cfg=cfg, metric=M.primary(p.task, cfg.metric), threads=threads)
        fitted = chosen.fitted or H.fit(H.build(head, p.task, chosen.params, cfg.seeds[0], threads), X, p.y)
        return _saved(transformer, fitted)


def probe_one(cache_path: str | Path, features: Features, head: str, cfg: ProbeConfig, *,
              pipeline: str | None = None, threads: int = 1,
              heads_dir: Path | None = None) -> tuple[dict, Predictions]:
    """Train and evaluate one head on one feature set; returns its record (not written) and
    the report split's predictions it was computed from."""
    from threadpoolctl import threadpool_limits

    p = load_problem(cache_path, features, head, cfg, pipeline)
    task, names, protocol = p.task, p.names, p.protocol
    if protocol.name == "mteb":
        record, stack = _mteb(task, p.X, p.y, p.X_report, p.y_report, cfg, protocol, len(names))
        record["hyperparameters"]["normalized"] = bool(
            features.pooling == "sentence" and p.sentence and p.sentence.get("normalize"))
        return p.base | record, _predictions(p, task, stack, 0.5)
    metric = M.primary(task, cfg.metric)
    start = time.perf_counter()
    with threadpool_limits(threads):
        transformer, X, X_dev, X_report = _prepared(head, p)
        selection = _select(head, task, len(names), X, p.y, X_dev, p.y_dev, protocol=protocol,
                            cfg=cfg, metric=metric, threads=threads)
        chosen, threshold, fitted = selection.params, selection.threshold, selection.fitted
        per_seed, stack, predict_seconds, fitted_heads = [], [], 0.0, []
        for seed in cfg.seeds:
            if seed != cfg.seeds[0] and H.HEADS[head].deterministic:
                per_seed.append(per_seed[0])  # the seed cannot change this head: same fit, same scores
                stack.append(stack[0])
                continue
            if fitted is None or seed != cfg.seeds[0]:
                fitted = H.fit(H.build(head, task, chosen, seed, threads), X, p.y)
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
    record = p.base | new_record(
        protocol=vars(protocol) | ({"folds": cfg.folds} if protocol.name == "cv" else {}),
        hyperparameters=chosen, search=selection.search, selection_score=selection.score, seeds=list(cfg.seeds), primary_metric=metric,
        # How far apart candidates must be before the selection split can tell them apart: the
        # report chooses among records within one standard error of the best (docs/verdict.md).
        selection_se=bootstrap.standard_error(task, metric, selection.truth, selection.scores, threshold),
        n_features=int(X.shape[1]) if X.ndim == 2 else None,
        **_aggregate(per_seed), metrics_ci=_intervals(task, predictions),
        threshold=threshold if TASKS[task].thresholded else None,
        fit_seconds=round(fit_seconds, 3), predict_seconds=round(predict_seconds, 4),
        **_label_fields(p, protocol, cfg))
    if heads_dir is not None:  # saved once the record exists: each head names its record and back
        record["heads"] = save_heads(heads_dir, record, fitted_heads)
    return record, predictions


def _label_fields(p: Problem, protocol: Protocol, cfg: ProbeConfig) -> dict:
    """Multilabel records say over which labels they are computed: `labels` (constant in
    train, averaged over by the report split's macro metrics) and `selection_labels`, per
    selection split (each fold, the held-out part, or dev), how many labels varied in the
    rows fitted on (the others were predicted as their constant) and how many had a positive
    among the held rows (the labels that split could score)."""
    if not TASKS[p.task].thresholded:
        return {}
    per_split = []
    for fit_rows, held_rows in _selection_splits(p.task, p.y, protocol, cfg.folds, cfg.seeds[0]):
        y_fit = p.y if fit_rows is None else p.y[fit_rows]
        y_held = p.y_dev if held_rows is None else p.y[held_rows]
        per_split.append({"rows_fitted": len(y_fit), "rows_held": len(y_held),
                          "labels_fitted": int(H.constant_labels(y_fit)[0].sum()),
                          "labels_scored": int(len(M.macro_labels(y_held)[0]))})
    return {"labels": M.label_summary(p.y, p.y_report, p.names), "selection_labels": per_split}


def _predictions(p: Problem, task: str, stack: np.ndarray, threshold: float) -> Predictions:
    return Predictions(p.ids_report, p.y_report, stack.astype(TASKS[task].score_dtype()), threshold)


def _intervals(task: str, predictions: Predictions) -> dict[str, list[float]]:
    return bootstrap.intervals(task, predictions.labels, predictions.scores, predictions.threshold)


# A path stops after this many candidates in a row score below its best: one dip can be noise.
PATH_PATIENCE = 2
# Candidates tried beyond a regularisation grid's edge when the edge wins (C / 10, C x 10 ...).
EDGE_STEPS = 2


@dataclass
class Selection:
    """What choosing a head's hyperparameters found."""
    params: dict
    threshold: float
    score: float
    """The chosen candidate's selection score: on dev, the held-out rows, or out of fold (cv)."""
    search: list[dict]
    """Every candidate with its selection score (under cv: on the first fold's held rows), or
    `skipped: true`, in grid order."""
    fitted: object | None
    """The chosen candidate fitted on all of train when the protocol fitted it so (dev)."""
    scores: np.ndarray
    """The chosen candidate's predictions on the selection rows (dev, out of fold, held out)."""
    truth: np.ndarray
    """Those rows' labels."""


def _select(head: str, task: str, n_classes: int, X, y: np.ndarray, X_dev, y_dev, *,
            protocol: Protocol, cfg: ProbeConfig, metric: str, threads: int) -> Selection:
    """Try the candidates of the head's grid; the best on dev, out of fold, or on the held-out
    rows wins.

    A convex head walks its grid as a regularisation path: each fit starts from the previous
    candidate's solution (scikit-learn's warm start), which costs a fraction of fresh fits.
    The path stops once PATH_PATIENCE candidates in a row score below its best (on dev, the
    held-out rows, or under cv the first fold's held rows), or once one scores clearly below it
    (`_clearly_below`): along C the selection score rises to one peak and falls, and the weakly regularised end is the costliest to fit (C = 100 was
    half the TF-IDF cost on GoEmotions). The candidates it skipped are listed with
    `skipped: true`. When an edge of a
    path's grid wins, the path goes on past it (EDGE_STEPS candidates at most, while they
    improve): a winning edge says the grid stopped too early."""
    seed = cfg.seeds[0]
    splits = _selection_splits(task, y, protocol, cfg.folds, seed)
    # Under cv the candidates are compared on the first fold (one fit each, as the holdout
    # protocol does) and only the chosen one is fitted on the other folds: its out-of-fold score
    # over every training row is what records, and the verdict, compare. Scoring every candidate
    # on every fold cost k times the fits; on TREC fine it chose the same hyperparameters
    # (docs/benchmarks.md).
    search_splits = splits[:1]
    rows = None if protocol.name == "dev" else splits[0][1]
    truth = y_dev if rows is None else y[rows]

    def walk(grid: list[dict]) -> list[dict]:
        tried = _walk(head, task, n_classes, grid, X, y, X_dev, search_splits, seed=seed, threads=threads,
                      stop_early=H.HEADS[head].path, metric=metric, truth=truth, rows=rows)
        for candidate in tried:
            if candidate["held"] is not None:
                if rows is not None:
                    candidate["held"] = candidate["held"][rows]
                candidate["scored"] = candidate["scored"] or _score(task, truth, candidate["held"], metric)
        return tried

    tried = walk(list(H.HEADS[head].grid(task)))
    for side in ((0, -1) if H.HEADS[head].path else ()):
        for step in range(1, EDGE_STEPS + 1):
            best = _best(tried)
            beyond = _beyond([c["params"] for c in tried], side)
            if best != (0 if side == 0 else len(tried) - 1) or beyond is None:
                break
            extra = walk([beyond])
            for candidate in extra:
                candidate["extension"] = step  # chosen only if strictly better than those nearer the grid
            tried = extra + tried if side == 0 else tried + extra
            if _best(tried) == best + (side == 0):  # no better past the edge: the grid was enough
                break
    best = tried[_best(tried)]
    search = [{"params": c["params"], "skipped": True} if c["held"] is None else
              {"params": c["params"], "score": c["scored"][0], "threshold": c["scored"][1]} for c in tried]
    if len(search_splits) == len(splits):
        return Selection(best["params"], best["scored"][1], best["scored"][0], search, best["fitted"],
                         best["held"], truth)
    held = _out_of_fold(head, task, n_classes, best["params"], best["held"], X, y, splits, seed=seed,
                        threads=threads)
    score, threshold = _score(task, y, held, metric)
    return Selection(best["params"], threshold, score, search, None, held, y)


def _out_of_fold(head: str, task: str, n_classes: int, params: dict, first: np.ndarray, X, y, splits, *,
                 seed: int, threads: int) -> np.ndarray:
    """The chosen candidate's predictions on every training row, each from the fold that held it
    out: `first` (the first fold's, from the search) and a fresh fit per other fold."""
    held = np.zeros((len(y),) + first.shape[1:])
    held[splits[0][1]] = first
    for fit_rows, held_rows in splits[1:]:
        estimator = H.fit(H.build(head, task, params, seed, threads), X[fit_rows], y[fit_rows])
        held[held_rows] = H.predict_scores(estimator, X[held_rows], task, n_classes)
    return held


def _walk(head: str, task: str, n_classes: int, grid: list[dict], X, y, X_dev, splits, *, seed: int,
          threads: int, stop_early: bool, metric: str, truth, rows) -> list[dict]:
    """Fit `grid` along each selection split: per candidate its params, its predictions on the
    held rows (all of train for folds; None when the path stopped before it), its fit on all
    of train (the dev protocol) and its score when the path stop had to compute it.

    Candidate by candidate, each on every split (one warm-started estimator per split), so a
    path stops on its selection score whatever the protocol: after a candidate's last fold, its
    out-of-fold score is known (`truth`: the selection rows' labels; `rows`: the held-out part's
    rows, or None)."""
    tried = [{"params": params, "held": None, "fitted": None, "scored": None} for params in grid]
    estimators = [None] * len(splits)
    # Each split's rows, sliced once (cv sizes: a few copies of a small X; holdout: one).
    parts = [((X, y) if fit is None else (X[fit], y[fit]), X_dev if held is None else X[held])
             for fit, held in splits]
    path_best, below, best_held = None, 0, None
    for candidate in tried:
        for j, (train_rows, held_rows) in enumerate(splits):
            (X_fit, y_fit), X_held = parts[j]
            estimators[j] = H.step(head, task, candidate["params"], seed, threads, previous=estimators[j])
            H.fit(estimators[j], X_fit, y_fit)
            scores = H.predict_scores(estimators[j], X_held, task, n_classes)
            if held_rows is None:  # the dev protocol: keep the fit, it may be the chosen one
                candidate["held"] = scores
                candidate["fitted"] = copy.deepcopy(estimators[j]) if H.HEADS[head].path else estimators[j]
            else:
                if candidate["held"] is None:
                    candidate["held"] = np.zeros((len(y),) + scores.shape[1:])
                candidate["held"][held_rows] = scores
        if stop_early:
            held = candidate["held"] if rows is None else candidate["held"][rows]
            candidate["scored"] = _score(task, truth, held, metric)
            value = candidate["scored"][0]
            if path_best is None or _better(value, path_best):
                path_best, below, best_held = value, 0, (held, candidate["scored"][1])
            elif value < path_best - TIE:  # past the peak (NaN never stops the path)
                below += 1
                if below >= PATH_PATIENCE or _clearly_below(task, metric, truth, best_held,
                                                            (held, candidate["scored"][1]), path_best - value):
                    break
    return tried


def _clearly_below(task: str, metric: str, truth, best: tuple, candidate: tuple, gap: float) -> bool:
    """Whether a candidate's gap to the path's best is more than two standard errors of their
    paired difference on the selection rows: past the peak for sure, not a dip of noise. The
    path's weak end costs the most (GoEmotions' multilabel TF-IDF: C = 100 took most of its
    610 s, after C = 10 had scored 2.6 points under C = 1)."""
    se = bootstrap.difference_se(task, metric, truth, best, candidate)
    return se is not None and gap > 2 * se


def _best(tried: list[dict]) -> int:
    """The position of the best scored candidate: among equals, the one nearest the grid (a
    candidate past its edge counts only when strictly better), then the first."""
    best = None
    for j, candidate in enumerate(tried):
        if candidate["scored"] is None:
            continue
        if best is None or _better(candidate["scored"][0], tried[best]["scored"][0]) or (
                not _better(tried[best]["scored"][0], candidate["scored"][0])
                and candidate.get("extension", 0) < tried[best].get("extension", 0)):
            best = j
    return best


def _beyond(grid: list[dict], side: int) -> dict | None:
    """The candidate one step past the grid's low (side 0) or high (side -1) end, for a grid of
    one numeric hyperparameter in constant ratio (C in 1e-3 .. 10: 1e-4 or 100)."""
    keys = {tuple(params) for params in grid}
    if len(grid) < 2 or len(keys) != 1 or len(next(iter(keys))) != 1:
        return None
    (key,) = next(iter(keys))
    values = [params[key] for params in grid]
    if not all(isinstance(v, (int, float)) and v > 0 for v in values):
        return None
    ratio = values[1] / values[0]
    return {key: float(values[0] / ratio if side == 0 else values[-1] * ratio)}


def _score(task: str, truth: np.ndarray, scores: np.ndarray, metric: str) -> tuple[float, float]:
    """(the selection score, the multilabel threshold chosen with it, 0.5 otherwise)."""
    threshold = M.choose_threshold(truth, scores) if TASKS[task].thresholded else 0.5
    return M.evaluate(task, truth, scores, threshold)[metric], threshold


# Scores closer than this are a tie (a correlation is invariant to a ridge's shrinkage, and its
# value then differs between candidates only in rounding): the earlier candidate keeps it.
TIE = 1e-9


def _better(value: float, than: float) -> bool:
    return not np.isnan(value) and (np.isnan(than) or value > than + TIE)


def _selection_splits(task, y, protocol: Protocol, folds: int, seed: int) -> list[tuple]:
    """(train rows, held rows) per split; (None, None) for the dev protocol (all of train, dev).
    Classes are stratified, multilabel rows iteratively stratified (rare labels reach as many
    folds as they have rows), regression targets split at random."""
    from sklearn.model_selection import KFold, StratifiedKFold, train_test_split

    if protocol.name == "dev":
        return [(None, None)]
    if TASKS[task].thresholded:
        if protocol.name == "holdout":
            return [iterative_holdout(y, _holdout_rows(len(y)), seed)]
        return iterative_folds(y, folds, seed)
    classes = TASKS[task].classes
    if protocol.name == "holdout":
        rows = np.arange(len(y))
        counts = np.bincount(y) if classes else None
        stratify = y if classes and counts[counts > 0].min() >= 2 else None
        fit, held = train_test_split(rows, test_size=_holdout_rows(len(y)), random_state=seed,
                                     stratify=stratify)
        return [(np.sort(fit), np.sort(held))]
    if classes:
        smallest = min(int(c) for c in np.bincount(y) if c > 0)
        if smallest < 2:
            raise FeatxError("a class has a single training example; cross-validation needs at "
                             "least two per class (add examples, or give a dev split)")
        splitter = StratifiedKFold(min(folds, smallest), shuffle=True, random_state=seed)
    else:
        if folds > len(y):
            raise FeatxError(f"probe.folds = {folds} is more than the {len(y)} training rows: lower "
                             f"probe.folds (at most {len(y)}) or give more rows")
        splitter = KFold(folds, shuffle=True, random_state=seed)
    return list(splitter.split(np.zeros(len(y)), y))


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


def _mteb(task, X, y, X_report, y_report, cfg: ProbeConfig, protocol: Protocol,
          n_classes) -> tuple[dict, np.ndarray]:
    """MTEB's classification evaluator (mteb 2.x `AbsTaskClassification`): for each of n
    experiments, shuffle the carried list of training indices with a fresh
    `RandomState(seed)`, keep the first k rows of each label, fit
    LogisticRegression(max_iter=100, random_state=seed) on the unscaled vectors; average.
    Returns the record's fields and the experiments' scores (E, n, ...)."""
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
    return new_record(protocol=vars(protocol) | {"experiments": cfg.mteb_experiments,
                                                 "samples_per_label": cfg.mteb_samples_per_label},
                      hyperparameters={"max_iter": 100, "scaling": False}, search=[],
                      seeds=[cfg.mteb_seed], primary_metric="accuracy", **_aggregate(per_experiment),
                      metrics_ci=bootstrap.intervals(task, y_report, stack), threshold=None,
                      n_train_sampled=len(picked), fit_seconds=round(time.perf_counter() - start, 3),
                      predict_seconds=None), stack


# ---------------------------------------------------------------------------------------------
# The probe stage


def run_probe(pipeline: Pipeline) -> list[dict]:
    """Probe the pipeline's cache with its grid, layer sweep and baselines; write records;
    return them."""
    from featx.progress import progress

    from featx.plan import find_cache

    cfg = pipeline.probe
    path = find_cache(pipeline)
    with Cache(path) as cache:
        first, later = plan_jobs(cache, cfg)
        (scout, *_), sweep_head = heads_for(cache.task, cfg)
        # Fail before forking workers: an unusable protocol, training split or selection split.
        protocol = choose_protocol(cfg.protocol, cache.splits, cfg.folds, cache.n_rows("train"),
                                   cfg.cv_max_rows)
        M.check_trainable(cache.task, cache.labels("train"), cache.label_names)
        metric = "accuracy" if protocol.name == "mteb" else M.primary(cache.task, cfg.metric)
        M.check_defined(cache.task, metric, {s: cache.labels(s) for s in dict.fromkeys(
            [protocol.report_on] + (["dev"] if protocol.name == "dev" else []))}, cache.label_names)
        _warn_constant_labels(cache)
        directory = writable_dir(probe_dir(pipeline.runs_dir, pipeline.name, cache.key, probe_config_hash(cfg)),
                                 root=pipeline.root)
    finished = finished_run(directory, cfg)
    if finished is not None:
        log.info("reused the %d records of the finished identical probe run (this configuration, this "
                 "cache) in %s; delete that folder to probe again", len(finished), directory)
        return finished
    heads_dir = directory / "heads" if cfg.save_heads else None
    store = Baselines(pipeline.baselines_dir, pipeline.root, path, cfg, pipeline.name)
    total = len(first) + len(later)
    # The baselines read no vector and decide nothing the second stage needs: they run beside
    # it, not before it (the TF-IDF fit is the longest job; a second stage that waited for it
    # left a worker idle for its whole length).
    baselines = [job for job in first if job[0] == TEXT] if later else []
    first = [job for job in first if job not in baselines]
    log.info("probing %s: %d (features, head) fits%s", path.name, total,
             f" (then {len(later)} heads on the best of the first {len(first)}: one feature set, or "
             f"two in a near tie)" if later else "")
    start = time.perf_counter()
    records: list[dict] = []
    settings = configuration(pipeline, "probe")
    # What this run will write: the report tells an interrupted run from a finished one by it.
    manifest = {"config_hash": probe_config_hash(cfg), "planned": total, "finished": False}
    write_run_status(directory, manifest)
    with progress(total=total, enabled=pipeline.progress, desc="probe", unit="fit") as bar:
        for stage in (first, None):
            if stage is None:  # the second stage: the other heads on the best feature set
                # The scout head's rows (not the no-training cosine, not the baselines).
                scouted = [r for r in records if r["head"] == scout]
                stage = list(baselines)
                if later and scouted:
                    for chosen in _second_stage_features(scouted, first):
                        stage += [(chosen, head) for head in later]
                    log.info("second stage on %s: %s", " and ".join(dict.fromkeys(
                        f.name for f, h in stage if f != TEXT)), ", ".join(later))
                if not stage:
                    break
                # Known only now: the second stage runs on one feature set or two.
                manifest["planned"] = bar.total = len(records) + len(stage)
                write_run_status(directory, manifest)
            reused = [(features, head) for features, head in stage if features == TEXT
                      and store.reuse(head, directory, heads_dir, settings)]
            for features, head in reused:
                records.append(store.reused[head])
                bar.update(1)
            for record, predictions in _run_jobs([j for j in stage if j not in reused], path, cfg,
                                                 pipeline.name, heads_dir):
                record["configuration"] = settings
                write_record(directory, record, predictions)
                if record["baseline"]:
                    store.keep(record, predictions, heads_dir)
                records.append(record)
                bar.update(1)
    if cfg.sweep:
        _write_sweep(directory, records, cfg.sweep_pooling, sweep_head)
    write_run_status(directory, manifest | {"planned": len(records), "finished": True})
    _remove_stale(directory, records)
    log.info("probe done in %.1f s; records in %s", time.perf_counter() - start, directory)
    return records


def _second_stage_features(scouted: list[dict], first: list[tuple[Features, str]]) -> list[Features]:
    """The scout's best feature set, and its runner-up when the selection rows cannot tell the
    two apart (within the best's standard error): a scout ranks, and a near tie is the
    scout's noise, not the heads' (TREC fine under cv: `mean@4` 0.7721, `mean@5` 0.7717; the
    MLP was 5 points better on test on the second). Ties go to the earlier feature set of the
    plan (the last layer first), so the choice never depends on which fit finished first."""
    order = {f.name: i for i, (f, _) in enumerate(first)}
    ranked = sorted(scouted, key=lambda r: (-selection_score(r), order.get(r["features"], 0)))
    best = ranked[:1]
    if len(ranked) > 1 and selection_score(ranked[0]) - selection_score(ranked[1]) <= (ranked[0]["selection_se"] or 0.0):
        best.append(ranked[1])
    return [Features(r["pooling"], tuple(r["layers"]), r["combine"]) for r in best]


def finished_run(directory: Path, cfg: ProbeConfig) -> list[dict] | None:
    """The records of this configuration's last run when it finished and left every record (with
    its heads, when heads are to be saved), else None: an identical probe is not fitted twice."""
    status = read_run_status(directory, probe_config_hash(cfg))
    if status is None or status.get("finished") is not True:
        return None
    try:
        records = read_records(directory)
    except FeatxError:
        return None  # a damaged record: the run is redone, and its records replaced
    if len(records) != status.get("planned") or any(r["config_hash"] != status["config_hash"] for r in records):
        return None
    if cfg.save_heads and any(r["heads"] is None for r in records if r["protocol"]["name"] != "mteb"):
        return None  # made with probe.save_heads = false: fitted again, to save them
    return records


def _remove_stale(directory: Path, records: list[dict]) -> None:
    """After a finished run, the files of its configuration that it did not write: records of an
    earlier run of the same configuration whose staged second stage chose other features, or the
    fits of a run interrupted before; never anything of another configuration (in its own folder)."""
    keep = set()
    for record in records:
        name = record_name(record["features"], record["head"])
        keep |= {name, name.removesuffix(".json") + ".scores.npz"}
        keep |= {entry["file"] for entry in (OPTIONAL | record)["heads"] or []}
    stale = [p for pattern in ("*__*.json", "*__*.scores.npz", "heads/*__*") for p in directory.glob(pattern)
             if p.name not in keep and not p.name.startswith(".")]
    for path in stale:
        path.unlink()  # unlinking a planted link removes the link, never what it points to
    if stale:
        log.info("removed %d file(s) of an earlier run of this configuration that this run replaced", len(stale))


class Baselines:
    """The baselines' records kept per data, so a probe of the same data (another model,
    pooling or head grid) reuses them instead of fitting them again: they read the texts and
    labels, never the backbone's vectors. A stored baseline is reused only when the data
    fingerprint, the baseline's settings (its estimator's every parameter, its grid, the probe's
    protocol, folds, seeds and metric) and the featx and scikit-learn versions are all the
    ones it was fitted under; its record then says `reused` (when and for which cache it was
    fitted), and its heads are rebound to the new record. Anything unreadable is fitted again.

        <data_dir>/baselines/<key[:16]>/text__<head>.json (+ .scores.npz), heads/
    """

    def __init__(self, root: Path, data_dir: Path, cache_path: Path, cfg: ProbeConfig, pipeline: str):
        self.root, self.data_dir, self.cache_path, self.cfg, self.pipeline = root, data_dir, cache_path, cfg, pipeline
        with Cache(cache_path) as cache:
            self.task, self.fingerprint = cache.task, cache.meta["dataset_fingerprint"]
        self.reused: dict[str, dict] = {}

    def folder(self, head: str) -> Path:
        import sklearn

        spec = H.HEADS[head]
        estimator = H.build(head, self.task, spec.grid(self.task)[0])
        settings = {"data": self.fingerprint, "head": head, "grid": spec.grid(self.task),
                    "estimator": estimator.get_params(deep=True),
                    "features": spec.prepare().get_params() if spec.prepare else None,
                    "probe": {k: getattr(self.cfg, k) for k in ("protocol", "folds", "cv_max_rows", "seeds", "metric")},
                    "versions": [__version__, sklearn.__version__]}
        key = hashlib.sha256(json.dumps(settings, sort_keys=True, default=repr).encode()).hexdigest()
        return self.root / key[:16]

    def reuse(self, head: str, directory: Path, heads_dir: Path | None, settings: dict) -> bool:
        """Whether `head`'s stored record was written into `directory` (kept in `self.reused`)."""
        folder = self.folder(head)
        try:
            stored = [r for r in read_records(folder) if r["head"] == head] if folder.is_dir() else []
            if not stored or (heads_dir is not None and not stored[0]["heads"]):
                return False
            # The record as written (read_records fills in every optional field for readers).
            old = loads_json((folder / record_name(TEXT.name, head)).read_text())
            predictions = read_predictions(folder, old)
            fitted = [(e["seed"], load_head(folder / "heads" / e["file"], sha256=e["sha256"],
                                            binding=head_binding(old, e["seed"])))
                      for e in (stored[0]["heads"] if heads_dir is not None else [])]
        except (FeatxError, OSError, ValueError) as exc:
            log.info("%s: the stored baseline cannot be reused (%s); fitting it again", head, exc)
            return False
        with Cache(self.cache_path) as cache:
            record = old | {"pipeline": self.pipeline, "config_hash": probe_config_hash(self.cfg),
                            "cache_key": cache.key, "init": cache.meta.get("init"),
                            "cache_bytes": self.cache_path.stat().st_size, "created": utc_now(),
                            "configuration": settings, **cache_facts(cache.meta),
                            "reused": {"created": old["created"], "pipeline": old["pipeline"],
                                       "cache_key": old["cache_key"]}}
        record.pop("predictions", None)
        record["heads"] = None if heads_dir is None else save_heads(heads_dir, record, fitted)
        write_record(directory, record, predictions)
        log.info("%s: the same data and settings were fitted on %s; that baseline is reused", head,
                 old["created"])
        self.reused[head] = record
        return True

    def keep(self, record: dict, predictions: Predictions, heads_dir: Path | None) -> None:
        """Store a freshly fitted baseline (its record, predictions and heads) for later probes."""
        folder = writable_dir(self.folder(record["head"]), root=self.data_dir)
        kept = copy.deepcopy(record)
        kept.pop("predictions", None)
        for entry in record["heads"] or []:  # None: probe.save_heads = false
            write_bytes(folder / "heads" / entry["file"], (heads_dir / entry["file"]).read_bytes())
        write_record(folder, kept, predictions)


def _warn_constant_labels(cache: Cache) -> None:
    if not TASKS[cache.task].thresholded:
        return
    train = cache.labels("train")
    constant = M.label_summary(train, train, cache.label_names)["constant_in_train"]
    if constant:
        log.warning("%d of %d labels are never (or always) present in the training split: every head "
                    "predicts them as that constant (%s%s)", len(constant), len(cache.label_names),
                    ", ".join(constant[:10]), ", ..." if len(constant) > 10 else "")


def _run_jobs(jobs: list[tuple[Features, str]], path: Path, cfg: ProbeConfig, pipeline: str,
              heads_dir: Path | None):
    """probe_one over the jobs in parallel processes: probe.n_jobs of them (default one per
    core), each with its share of the cores as threads."""
    from joblib import Parallel, delayed

    cores = os.cpu_count() or 1
    planned = cfg.n_jobs or cores
    workers = max(1, min(planned, len(jobs)))
    # The share of the configured processes, not of this stage's job count: a stage of one job
    # (the MLP past 20 classes) once ran on every core's thread, and BLAS threads that spin on a
    # shared machine made it 10x slower (TREC fine, 2 cores at a load of 5-7: the MLP fit 17 s
    # with 2 threads, 1.5-2 s with one; the logistic fit 19-25 s against 0.6 s). Fits also stay
    # the same whatever the stage's size (threads change the products' rounding).
    threads = max(1, cores // planned)
    tasks = (delayed(probe_one)(str(path), features, head, cfg, pipeline=pipeline, threads=threads,
                                heads_dir=heads_dir) for features, head in jobs)
    return Parallel(n_jobs=workers, return_as="generator")(tasks)


def _write_sweep(directory: Path, records: list[dict], pooling: str, head: str) -> None:
    curve = sorted((r for r in records if r["pooling"] == pooling and r["head"] == head
                    and len(r["layers"]) == 1), key=lambda r: r["layers"][0])
    write_json(directory / f"sweep-{pooling}-{head}.json", {
        "pooling": pooling, "head": head,
        "primary_metric": curve[0]["primary_metric"] if curve else None,
        "curve": [{"layer": r["layers"][0], "mean": r["metrics"][r["primary_metric"]],
                   "std": r["metrics_std"][r["primary_metric"]]} for r in curve]})


def format_table(records: list[dict], runs_dir=None) -> str:
    """Records -> a fixed-width text table: features x head, every metric (mean ± std over
    seeds), the primary one's 95% bootstrap interval; `*` marks the frozen choice's row."""
    from featx.choice import frozen_choice

    if not records:
        return "(no records)"
    task = records[0]["task"]
    names = list(M.NAMES[task])
    choice = frozen_choice(records, runs_dir)
    rows = [["", "features", "head", "protocol", *names, "95% interval", "fit s"]]
    for r in sorted(records, key=lambda r: (r["stage"] != "probe", bool(r.get("baseline")),
                                            r["features"], r["head"])):
        primary = r["primary_metric"]
        cells = []
        for k in names:
            value = r["metrics"].get(k, float("nan"))
            std = r["metrics_std"].get(k, 0.0)
            cells.append(f"{value:.4f}" + (f"±{std:.4f}" if std else ""))
        low, high = (r.get("metrics_ci") or {}).get(primary) or (float("nan"), float("nan"))
        rows.append(["*" if choice is not None and r is choice.record else "", r["features"], r["head"],
                     r["protocol"]["name"], *cells, f"[{low:.4f}, {high:.4f}]", f"{r.get('fit_seconds') or 0:.1f}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    first = records[0]
    footer = (f"(primary metric: {first['primary_metric']}, the interval's, on {first['n_eval']} "
              f"{first['protocol']['report_on']} rows"
              + (f"; * the frozen choice, {choice.record['features']} {choice.record['head']}, chosen on "
                 f"{choice.record['protocol']['select_on']})" if choice is not None else ")"))
    return "\n".join(lines) + "\n" + footer
