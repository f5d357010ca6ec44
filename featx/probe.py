"""Probing: heads trained on cached features with an honest protocol. Never touches torch.

Protocol (stated in every record):
- dev: fit each candidate on train, choose on dev, report on test.
- cv:  choose by k-fold cross-validation on train (out-of-fold predictions), refit on all of
       train, report on test (or on dev when there is no test split).
- mteb: MTEB's classification evaluator, to check featx against leaderboard numbers.
`auto` is dev when dev and test both exist, cv otherwise. Multilabel decisions use one
threshold chosen with the hyperparameters (on dev, or out of fold).
"""
from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featx import heads as H
from featx import metrics as M
from featx.cache import Cache
from featx.config import Pipeline, ProbeConfig
from featx.errors import FeatxError
from featx.records import new_record, record_name, run_dir, save_head, write_json, write_record

log = logging.getLogger("featx")


@dataclass(frozen=True)
class Features:
    pooling: str
    layers: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.pooling}@{'+'.join(map(str, self.layers))}"


@dataclass(frozen=True)
class Protocol:
    name: str
    select_on: str
    report_on: str


def choose_protocol(requested: str, splits: list[str], folds: int) -> Protocol:
    report = "test" if "test" in splits else "dev"
    if report not in splits:
        raise FeatxError(f"the cache has only {splits}: probing needs a dev or test split to report on")
    if requested == "mteb":
        return Protocol("mteb", "-", report)
    if requested == "dev" or (requested == "auto" and {"dev", "test"} <= set(splits)):
        if not {"dev", "test"} <= set(splits):
            raise FeatxError(f"probe.protocol = \"dev\" needs dev and test splits; the cache has "
                             f"{splits} (use \"cv\" or \"auto\")")
        return Protocol("dev", "dev", "test")
    return Protocol("cv", f"{folds}-fold cv on train", report)


def feature_sets(cache: Cache, cfg: ProbeConfig) -> list[tuple[Features, str]]:
    """(features, head) pairs of the probe grid and the layer sweep, without repeats; checks
    that the cache holds every pooling and layer asked for (the error lists what it has)."""
    jobs = []
    for layer_spec in cfg.layers:
        for pooling in cfg.poolings:
            layers = tuple(cache.layer_indices(pooling, layer_spec))
            if pooling == "pooler" and isinstance(layer_spec, str) and layer_spec != "last":
                continue  # the pooler has only the last layer: no concatenation to probe
            jobs += [(Features(pooling, layers), head) for head in cfg.heads]
    if cfg.sweep:
        for layer in cache.layers(cfg.sweep_pooling):
            jobs.append((Features(cfg.sweep_pooling, (layer,)), cfg.sweep_head))
    return list(dict.fromkeys(jobs))


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
    base: dict


def load_problem(cache_path: str | Path, features: Features, head: str, cfg: ProbeConfig) -> Problem:
    with Cache(cache_path) as cache:
        task, names = cache.task, cache.label_names
        protocol = choose_protocol(cfg.protocol, cache.splits, cfg.folds)
        load = lambda split: (cache.features(split, features.pooling, list(features.layers)),  # noqa: E731
                              cache.labels(split))
        X, y = load("train")
        M.check_trainable(task, y, names)
        X_report, y_report = load(protocol.report_on)
        X_dev, y_dev = load("dev") if protocol.name == "dev" else (None, None)
        stats = cache.meta.get("extract_stats") or {}
        base = dict(stage="probe", pipeline=cache.meta.get("pipeline_name"), cache_key=cache.key,
                    task=task, features=features.name, pooling=features.pooling,
                    layers=list(features.layers), head=head, init=cache.meta.get("init"),
                    n_train=len(y), n_eval=len(y_report),
                    # The cost side of the comparison: every probe shares one extraction pass.
                    backbone_forward_passes=int(stats.get("rows_total", 0)),
                    extract_seconds=stats.get("seconds"), cache_bytes=Path(cache_path).stat().st_size)
    return Problem(task, names, protocol, X, y, X_dev, y_dev, X_report, y_report, base)


def fit_selected(cache_path: str | Path, features: Features, head: str, cfg: ProbeConfig,
                 threads: int = 1):
    """The head fitted on train with the hyperparameters the protocol selects (first seed)."""
    from threadpoolctl import threadpool_limits

    p = load_problem(cache_path, features, head, cfg)
    if p.protocol.name == "mteb":
        raise FeatxError("a head for LP-FT is selected with the dev or cv protocol, not mteb")
    with threadpool_limits(threads):
        chosen, _, _, fitted = _select(head, p.task, len(p.names), p.X, p.y, p.X_dev, p.y_dev,
                                       p.protocol, cfg, M.primary(p.task, cfg.metric), threads)
        return fitted if fitted is not None else H.fit(H.build(head, p.task, chosen, cfg.seeds[0], threads),
                                                       p.X, p.y)


def probe_one(cache_path: str | Path, features: Features, head: str, cfg: ProbeConfig, *,
              threads: int = 1, heads_dir: Path | None = None) -> dict:
    """Train and evaluate one head on one feature set; returns its record (not written)."""
    from threadpoolctl import threadpool_limits

    p = load_problem(cache_path, features, head, cfg)
    task, names, protocol, X, y = p.task, p.names, p.protocol, p.X, p.y
    if protocol.name == "mteb":
        return p.base | _mteb(task, X, y, p.X_report, p.y_report, cfg, protocol, len(names))
    metric = M.primary(task, cfg.metric)
    start = time.perf_counter()
    with threadpool_limits(threads):
        chosen, threshold, search, fitted = _select(head, task, len(names), X, y, p.X_dev, p.y_dev,
                                                    protocol, cfg, metric, threads)
        per_seed, predict_seconds = [], 0.0
        for seed in cfg.seeds:
            if seed != cfg.seeds[0] and H.HEADS[head].deterministic:
                per_seed.append(per_seed[0])  # the seed cannot change this head: same fit, same scores
                continue
            if fitted is None or seed != cfg.seeds[0]:
                fitted = H.fit(H.build(head, task, chosen, seed, threads), X, y)
            t = time.perf_counter()
            scores = H.predict_scores(fitted, p.X_report, task, len(names))
            predict_seconds += time.perf_counter() - t
            per_seed.append(M.evaluate(task, p.y_report, scores, threshold))
            if heads_dir is not None:
                save_head(fitted, heads_dir / record_name(features.name, f"{head}__seed{seed}")
                          .replace(".json", ".joblib"))
            fitted = None
    fit_seconds = time.perf_counter() - start - predict_seconds
    return p.base | new_record(
        protocol=vars(protocol) | ({"folds": cfg.folds} if protocol.name == "cv" else {}),
        hyperparameters=chosen, search=search, seeds=list(cfg.seeds), primary_metric=metric,
        **_aggregate(per_seed), threshold=threshold if task == "multilabel" else None,
        fit_seconds=round(fit_seconds, 3), predict_seconds=round(predict_seconds, 4))


def _select(head, task, n_classes, X, y, X_dev, y_dev, protocol, cfg, metric, threads):
    """Try every candidate of the head's grid; return the best (on dev or out of fold)."""
    seed = cfg.seeds[0]
    search, best, best_fit = [], None, None
    for params in H.HEADS[head].grid(task):
        if protocol.name == "dev":
            estimator = H.fit(H.build(head, task, params, seed, threads), X, y)
            scores, target = H.predict_scores(estimator, X_dev, task, n_classes), y_dev
        else:
            estimator = None
            scores, target = _out_of_fold(head, task, n_classes, params, X, y, cfg.folds, seed, threads), y
        threshold = M.choose_threshold(target, scores) if task == "multilabel" else 0.5
        value = M.evaluate(task, target, scores, threshold)[metric]
        search.append({"params": params, "score": value, "threshold": threshold})
        if best is None or _better(value, best["score"]):
            best, best_fit = search[-1], estimator
    return best["params"], best["threshold"], search, best_fit


def _better(value: float, than: float) -> bool:
    return not np.isnan(value) and (np.isnan(than) or value > than)


def _out_of_fold(head, task, n_classes, params, X, y, folds, seed, threads) -> np.ndarray:
    from sklearn.model_selection import KFold, StratifiedKFold

    if task in ("binary", "multiclass"):
        smallest = min(int(c) for c in np.bincount(y) if c > 0)
        if smallest < 2:
            raise FeatxError("a class has a single training example; cross-validation needs at "
                             "least two per class (add examples, or give a dev split)")
        splitter = StratifiedKFold(min(folds, smallest), shuffle=True, random_state=seed)
    else:
        splitter = KFold(folds, shuffle=True, random_state=seed)
    out = None
    for train, held_out in splitter.split(X, y):
        estimator = H.fit(H.build(head, task, params, seed, threads), X[train], y[train])
        scores = H.predict_scores(estimator, X[held_out], task, n_classes)
        if out is None:
            out = np.zeros((len(y),) + scores.shape[1:])
        out[held_out] = scores
    return out


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


def _mteb(task, X, y, X_report, y_report, cfg: ProbeConfig, protocol: Protocol, n_classes) -> dict:
    """MTEB's logRegClassificationEvaluator: for each of n experiments, shuffle the training
    indices (one RandomState, carried across experiments as MTEB does), keep the first k rows
    of each label, fit LogisticRegression(max_iter=100) on the unscaled vectors; average."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    if task not in ("binary", "multiclass"):
        raise FeatxError(f"the mteb protocol is MTEB's classification evaluator: binary or "
                         f"multiclass tasks only, this one is {task}")
    rng = np.random.RandomState(cfg.mteb_seed)
    order = np.arange(len(y))
    per_experiment, start = [], time.perf_counter()
    for _ in range(cfg.mteb_experiments):
        rng.shuffle(order)
        picked = undersample(y, order, cfg.mteb_samples_per_label)
        classifier = LogisticRegression(random_state=cfg.mteb_seed, max_iter=100)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # max_iter=100 is MTEB's choice
            classifier.fit(X[picked], y[picked])
        scores = H.predict_scores(classifier, X_report, task, n_classes)
        per_experiment.append(M.evaluate(task, y_report, scores))
    return new_record(protocol=vars(protocol) | {"experiments": cfg.mteb_experiments,
                                                 "samples_per_label": cfg.mteb_samples_per_label},
                      hyperparameters={"max_iter": 100, "scaling": False}, search=[],
                      seeds=[cfg.mteb_seed], primary_metric="accuracy", **_aggregate(per_experiment),
                      threshold=None, n_train_sampled=len(picked),
                      fit_seconds=round(time.perf_counter() - start, 3), predict_seconds=None)


# ---------------------------------------------------------------------------------------------
# The probe stage


def run_probe(pipeline: Pipeline) -> list[dict]:
    """Probe the pipeline's cache with its grid and layer sweep; write records; return them."""
    from joblib import Parallel, delayed
    from tqdm.auto import tqdm

    from featx.plan import make_plan

    cfg = pipeline.probe
    path = make_plan(pipeline).find_cache()
    with Cache(path) as cache:
        jobs = feature_sets(cache, cfg)
        choose_protocol(cfg.protocol, cache.splits, cfg.folds)  # fail before forking workers
        M.check_trainable(cache.task, cache.labels("train"), cache.label_names)
        directory = run_dir(pipeline.runs_dir, cache.key)
    cores = os.cpu_count() or 1
    workers = min(cfg.n_jobs or cores, len(jobs))
    threads = max(1, cores // workers)  # processes x threads = cores: no oversubscription
    heads_dir = directory / "heads" if cfg.save_heads else None
    log.info("probing %s: %d (features, head) fits in %d process(es) x %d thread(s)",
             path.name, len(jobs), workers, threads)
    start = time.perf_counter()
    tasks = (delayed(probe_one)(str(path), features, head, cfg, threads=threads, heads_dir=heads_dir)
             for features, head in jobs)
    records = []
    for record in tqdm(Parallel(n_jobs=workers, return_as="generator")(tasks), total=len(jobs),
                       disable=not pipeline.progress, desc="probe", unit="fit"):
        write_record(directory, record)
        records.append(record)
    if cfg.sweep:
        _write_sweep(directory, records, cfg)
    log.info("probe done in %.1f s; records in %s", time.perf_counter() - start, directory / "probe")
    return records


def _write_sweep(directory: Path, records: list[dict], cfg: ProbeConfig) -> None:
    curve = sorted((r for r in records if r["pooling"] == cfg.sweep_pooling and r["head"] == cfg.sweep_head
                    and len(r["layers"]) == 1), key=lambda r: r["layers"][0])
    write_json(directory / "probe" / f"sweep-{cfg.sweep_pooling}-{cfg.sweep_head}.json", {
        "pooling": cfg.sweep_pooling, "head": cfg.sweep_head,
        "primary_metric": curve[0]["primary_metric"] if curve else None,
        "curve": [{"layer": r["layers"][0], "mean": r["metrics"][r["primary_metric"]],
                   "std": r["metrics_std"][r["primary_metric"]]} for r in curve]})


def format_table(records: list[dict]) -> str:
    """Records -> a fixed-width text table: features x head, primary metric mean ± std."""
    if not records:
        return "(no records)"
    task = records[0]["task"]
    names = list(M.NAMES[task])
    rows = [["features", "head", "protocol", *names, "fit s"]]
    for r in sorted(records, key=lambda r: (r["stage"] != "probe", r["features"], r["head"])):
        primary = r["primary_metric"]
        cells = []
        for k in names:
            value = r["metrics"].get(k, float("nan"))
            std = r["metrics_std"].get(k, 0.0)
            text = f"{value:.4f}" + (f"±{std:.4f}" if std else "")
            cells.append(f"*{text}" if k == primary else text)
        rows.append([r["features"], r["head"], r["protocol"]["name"], *cells,
                     f"{r.get('fit_seconds') or 0:.1f}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + f"\n(* primary metric: {records[0]['primary_metric']})"
