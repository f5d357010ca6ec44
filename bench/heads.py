"""Heads side by side: the torch heads against scikit-learn's, the TF-IDF baseline against its
previous solver, and every head's fit at a million rows against a tiny-BERT pass over as many.

1. Accuracy and fit time, per dataset (built-in TREC coarse and fine; GoEmotions when
   ../shared/data is present), on one cache (mean of the last layer): each pair of heads runs
   the probe's own selection and refit (`featx.probe.job.probe_one`: the same grid, protocol and
   seed) on the same feature set, alternated over rounds (`FEATX_BENCH_ROUNDS`, default 1;
   first one, then the other, reversed every other round). The accuracy comparison is the
   paired bootstrap (`featx.stats.bootstrap.paired`) of the test primary metric, torch minus
   scikit-learn: "equal" when its 95% interval covers 0. TREC fine is also run under the cv
   protocol (5 folds, no dev split), the case of a held-out many-class set with only train
   and test.
2. TF-IDF: the baseline now against its previous configuration (SAGA multinomial over C in
   1, 10, 100), the same way; selection and test scores of both.
3. Scale (`FEATX_BENCH_SCALE_ROWS`, default 1,000,000; 0 skips it): one fit of every head at the
   middle of its grid, each in its own process stopped at `FEATX_BENCH_SCALE_CAP` seconds
   (default 900), on synthetic features (384 wide, `FEATX_BENCH_SCALE_CLASSES` classes,
   default 20, a linear signal plus noise), against one `featx extract` pass of a tiny BERT
   (hidden 32, 2 layers, one pooling of the last layer) over as many synthetic texts (5-25
   words). The ratio is fit seconds over that pass's seconds.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import ROOT, SHARED, machine, save, scratch_dir, table
from bench.probe import DATASETS as PROBE_DATASETS

# The datasets the probe benchmark measures, up to GoEmotions (the larger ones add no new case).
DATASETS = [d for d in PROBE_DATASETS if d[0] in ("TREC coarse", "TREC fine", "TREC fine, cv", "GoEmotions")]
PAIRS = [("logistic", "logistic-torch"), ("mlp", "mlp-torch"), ("tfidf-previous", "tfidf")]
ROUNDS = int(os.environ.get("FEATX_BENCH_ROUNDS", "1"))
ONLY = [w.strip().lower() for w in os.environ.get("FEATX_BENCH_ONLY", "").split(",") if w.strip()]
SCALE_ROWS = int(os.environ.get("FEATX_BENCH_SCALE_ROWS", "1000000"))
SCALE_CAP_S = int(os.environ.get("FEATX_BENCH_SCALE_CAP", "900"))
SCALE_CLASSES = int(os.environ.get("FEATX_BENCH_SCALE_CLASSES", "20"))
SCALE_WIDTH = 384


def previous_tfidf():
    """The TF-IDF baseline as it was before this benchmark's change, registered under its own
    name in this process only: SAGA multinomial (ridge for regression), C in 1, 10, 100."""
    from sklearn.linear_model import LogisticRegression

    from featx.heads import registry as H
    from featx.heads.lexical import LexicalFeatures
    from featx.tasks import TASKS

    def build(task, seed, threads, C=1.0, alpha=1.0):
        if TASKS[task].classes:
            return LogisticRegression(C=C, solver="saga", tol=1e-3, max_iter=1000, random_state=seed,
                                      warm_start=True)
        return H.HEADS["tfidf"].build(task, seed, threads, C=C, alpha=alpha)

    def grid(task):
        return [{"C": c} for c in (1.0, 10.0, 100.0)] if TASKS[task].classes else H.HEADS["tfidf"].grid(task)

    H.HEADS["tfidf-previous"] = H.Head("tfidf-previous", build, deterministic=False, path=True,
                                       prepare=LexicalFeatures, baseline="lexical", grid=grid)


# ---------------------------------------------------------------------------------------------
# 1 and 2: pairs of heads on real data


def compare(name: str, pipeline_file: str, overrides: list[str], scratch: Path) -> list[dict]:
    from featx.stats import bootstrap
    from featx.cache.reader import Cache
    from featx.config.load import load_pipeline
    from featx.cache.extract import extract
    from featx.stats.metrics import primary
    from featx.probe.job import TEXT, Features, probe_one

    pipeline = load_pipeline(ROOT / pipeline_file, [f"data_dir={scratch / 'data'}", "progress=false",
                                                    'extract.poolings=["mean"]', 'extract.layers="last"',
                                                    *overrides])
    result = extract(pipeline)
    with Cache(result.path) as cache:
        layer = cache.layers("mean")[-1]
        task = cache.task
    cfg = pipeline.probe
    metric = primary(task, cfg.metric)
    rows = []
    from featx.tasks import TASKS

    for before, after in PAIRS:
        if before == "tfidf-previous" and not TASKS[task].classes:
            continue  # the baseline changed for classes only: the same estimator both times
        features = TEXT if before.startswith("tfidf") else Features("mean", (layer,))
        seconds = {before: [], after: []}
        out = {}
        for r in range(ROUNDS):
            for head in ((before, after) if r % 2 == 0 else (after, before)):
                start = time.perf_counter()
                record, predictions = probe_one(result.path, features, head, cfg, threads=1)
                seconds[head].append(time.perf_counter() - start)
                out[head] = (record, predictions)
        (rec_a, pred_a), (rec_b, pred_b) = out[after], out[before]
        comparison = bootstrap.paired(task, metric, pred_a.labels, (pred_a.scores, pred_a.threshold),
                                      (pred_b.scores, pred_b.threshold))
        low, high = comparison["difference_ci"]
        pick = lambda rec: max((c for c in rec.search if "score" in c), key=lambda c: c["score"])  # noqa: E731
        rows.append({"dataset": name, "protocol": rec_a.protocol["name"], "features": features.name,
                     "before": before, "after": after, "metric": metric, "n_test": comparison["n"],
                     "before_s": float(np.median(seconds[before])), "after_s": float(np.median(seconds[after])),
                     "speedup": float(np.median(np.array(seconds[before]) / np.array(seconds[after]))),
                     "before_test": comparison["b"], "after_test": comparison["a"],
                     "difference": comparison["difference"], "difference_ci": [low, high],
                     "equal": bool(low <= 0 <= high),
                     "before_selection": pick(rec_b)["score"], "after_selection": pick(rec_a)["score"],
                     "before_params": rec_b.hyperparameters, "after_params": rec_a.hyperparameters})
        print(json.dumps(rows[-1]), flush=True)
    return rows


# ---------------------------------------------------------------------------------------------
# 3: a million rows


SCALE_HEADS = ["logistic", "logistic-torch", "mlp", "mlp-torch", "lightgbm"]


def synthetic_features(rows: int, classes: int, seed: int = 0):
    """(X (rows, 384) float32, y (rows,)): class centres (the same for every seed) plus noise in
    384 dimensions, the classes about as separable as a sentence embedding's."""
    centres = np.random.default_rng(0).normal(size=(classes, SCALE_WIDTH)).astype(np.float32) * 0.35
    rng = np.random.default_rng(seed + 1)
    y = rng.integers(0, classes, rows)
    X = rng.normal(size=(rows, SCALE_WIDTH)).astype(np.float32)
    X += centres[y]
    return X, y


def child_fit(head: str, rows: int, classes: int) -> dict:
    """One fit of `head` at the middle of its grid on all the cores (its standardisation
    included): the seconds, and the accuracy on another draw of the same classes."""
    from featx.heads import registry as H

    X, y = synthetic_features(rows, classes)
    grid = H.HEADS[head].grid("multiclass")
    params = grid[len(grid) // 2]
    estimator = H.build(head, "multiclass", params, seed=0, threads=os.cpu_count() or 1)
    start = time.perf_counter()
    H.fit(estimator, X, y)
    seconds = time.perf_counter() - start
    X_test, y_test = synthetic_features(20_000, classes, seed=1)
    accuracy = float((estimator.predict(X_test) == y_test).mean())
    return {"head": head, "params": params, "fit_s": seconds, "accuracy_other_draw": accuracy}


def extraction_pass(rows: int, scratch: Path) -> dict:
    """`featx extract` of the scale benchmark's tiny BERT over as many of its synthetic texts,
    in a child process."""
    from bench import scale

    scale.FOLDER.mkdir(parents=True, exist_ok=True)
    model, data = scale.tiny_bert(scale.FOLDER / "tiny-bert"), scale.rows_file(rows)
    seconds, _, _, _ = scale.run_child([sys.executable, "-m", "featx", "-q", "extract",
                                        str(scale.pipeline_file(data, model, scratch / "data"))],
                                       scratch / "extract.log")
    return {"rows": rows, "seconds": seconds}


def scale(scratch: Path) -> dict:
    passed = extraction_pass(SCALE_ROWS, scratch)
    print(json.dumps({"extraction": passed}), flush=True)
    fits = []
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for head in SCALE_HEADS:
        command = [sys.executable, "-c", "import json, sys; from bench.heads import child_fit; "
                   f"print(json.dumps(child_fit({head!r}, {SCALE_ROWS}, {SCALE_CLASSES})))"]
        start = time.perf_counter()
        try:
            done = subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, text=True,
                                  timeout=SCALE_CAP_S)
            fit = json.loads(done.stdout.strip().splitlines()[-1])
        except subprocess.TimeoutExpired:
            fit = {"head": head, "fit_s": None, "stopped_after_s": time.perf_counter() - start}
        fit["x_pass"] = None if fit["fit_s"] is None else fit["fit_s"] / passed["seconds"]
        fits.append(fit)
        print(json.dumps(fit), flush=True)
    return {"extraction": passed, "fits": fits, "classes": SCALE_CLASSES, "width": SCALE_WIDTH}


def run() -> dict:
    previous_tfidf()
    results, at_scale = [], None
    with scratch_dir() as scratch:
        for name, pipeline_file, overrides, shared in DATASETS:
            if ONLY and not any(w in name.lower() for w in ONLY):
                continue
            if shared and not SHARED.is_dir():
                print(f"{name}: skipped (../shared/data is not here)")
                continue
            results += compare(name, pipeline_file, overrides, Path(scratch) / name.replace(" ", "-").replace(",", ""))
        if SCALE_ROWS > 0 and (not ONLY or "scale" in ONLY):
            at_scale = scale(Path(scratch))
    rows = [[r["dataset"], r["protocol"], f"{r['before']} -> {r['after']}", r["before_s"], r["after_s"], r["speedup"],
             r["before_test"], r["after_test"], f"{r['difference']:+.4f} [{r['difference_ci'][0]:+.4f}, {r['difference_ci'][1]:+.4f}]",
             "yes" if r["equal"] else "NO"] for r in results]
    print(table(rows, ["dataset", "protocol", "heads", "fit s before", "after", "speed-up", "test before",
                       "after", "after - before [95%]", "equal"]))
    if at_scale:
        print(f"tiny-BERT extraction of {at_scale['extraction']['rows']:,} rows: {at_scale['extraction']['seconds']:.0f} s")
        print(table([[f["head"], "-" if f["fit_s"] is None else f["fit_s"],
                      f"> {f['stopped_after_s']:.0f} s" if f["fit_s"] is None else f["x_pass"]] for f in at_scale["fits"]],
                    ["head", "fit s", "x pass"]))
    out = {"machine": machine(), "rounds": ROUNDS, "comparisons": results, "scale": at_scale}
    print(f"written to {save('heads', out)}")
    return out
