"""The probe's protocols and hyperparameter selection under them: which rows choose a head's
hyperparameters, which report, and the search along the head's grid. What a job loads and
records is featx/probe/job.py's; planning and the stage are featx/probe/stage.py's. Never touches torch.

Protocol (stated in every record):
- dev: fit each candidate on train, choose on dev, report on test.
- cv:  choose by k-fold cross-validation on train (out-of-fold predictions), refit on all of
       train, report on test (or on dev when there is no test split).
- holdout: choose on one held-out part of train, refit on all of train (large train splits).
- mteb: MTEB's classification evaluator, to check featx against leaderboard numbers.
`auto` is dev when dev and test both exist, else cv, or holdout past `cv_max_rows` training
rows. Multilabel decisions use one threshold chosen with the hyperparameters.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from featx.stats import bootstrap
from featx.heads import registry as H
from featx.stats import metrics as M
from featx.config.pipeline import ProbeConfig
from featx.errors import FeatxError
from featx.stats.stratify import iterative_folds, iterative_holdout
from featx.tasks import TASKS


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


def cv_folds(task: str, y: np.ndarray, folds: int) -> int:
    """The folds cv runs: probe.folds, or fewer on classes where the smallest has fewer training
    rows (each fold holds a row of every class)."""
    if not TASKS[task].classes or len(y) == 0:
        return folds
    return max(1, min(folds, min(int(c) for c in np.bincount(y) if c > 0)))


def cv_protocol(task: str, y: np.ndarray, protocol: Protocol, folds: int) -> Protocol:
    """`protocol`, its select_on naming the folds cv runs when a small class cut them (so the
    record and the verdict never say "5-fold cv" over 2 folds)."""
    runs = cv_folds(task, y, folds)
    if protocol.name != "cv" or runs == folds or runs < 2:
        return protocol
    return Protocol("cv", f"{runs}-fold cv on train (probe.folds = {folds}: a class has {runs} "
                    "training rows)", protocol.report_on)


def _holdout_rows(n_train: int) -> int:
    """10% of train, at least 2,000 rows (or half of a small train), at most 10,000."""
    return int(min(10_000, max(min(2_000, n_train // 2), n_train // 10)))


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
    select_on: str
    """The rows `score` is on, in words: the protocol's, or the first fold's for a baseline
    under cv."""
    search: list[dict]
    """Every candidate with its selection score (under cv: on the first fold's held rows), or
    `skipped: true`, in grid order."""
    fitted: object | None
    """The chosen candidate fitted on all of train when the protocol fitted it so (dev)."""
    start: object | None
    """Under cv and holdout, for a head that warm-starts (`Head.warm`): the chosen candidate
    fitted on the first selection split, the final fit's starting point; else None."""
    scores: np.ndarray
    """The chosen candidate's predictions on the selection rows (dev, out of fold, held out)."""
    truth: np.ndarray
    """Those rows' labels."""


def select(*, head: str, task: str, n_classes: int, X: np.ndarray | sparse.csr_matrix, y: np.ndarray,
           X_dev: np.ndarray | sparse.csr_matrix | None, y_dev: np.ndarray | None, protocol: Protocol,
           cfg: ProbeConfig, metric: str, threads: int) -> Selection:
    """Try the candidates of the head's grid; the best on dev, out of fold, or on the held-out
    rows wins.

    A convex head walks its grid as a regularisation path: each fit starts from the previous
    candidate's solution (scikit-learn's warm start), which costs a fraction of fresh fits.
    The path stops once PATH_PATIENCE candidates in a row score below its best (on dev, the
    held-out rows, or under cv the first fold's held rows), or once one scores clearly below it
    (`_clearly_below`): along C the selection score rises to one peak and falls, and the weakly
    regularised end is the costliest to fit (bench/HISTORY.md, Probe cost). The candidates it
    skipped are listed with `skipped: true`. When an edge of a path's grid wins, the path goes
    on past it (EDGE_STEPS candidates at most, while they improve): a winning edge says the grid
    stopped too early."""
    seed = cfg.seeds[0]
    splits = selection_splits(task, y, protocol, cfg.folds, seed)
    # Under cv the candidates are compared on the first fold (one fit each, as the holdout
    # protocol does) and only the chosen one is fitted on the other folds: its out-of-fold score
    # over every training row is what records, and the verdict, compare. Scoring every candidate
    # on every fold costs k times the fits, and on TREC fine chooses the same hyperparameters
    # (bench/HISTORY.md).
    fit_rows, rows = splits[0]  # rows: the selection rows of train; None under dev (all of train, dev)
    truth = y_dev if rows is None else y[rows]
    X_fit, y_fit = (X, y) if fit_rows is None else (X[fit_rows], y[fit_rows])
    X_held = X_dev if rows is None else X[rows]
    search = _Search(_Head(head, task, n_classes, seed, threads), H.HEADS[head], X_fit, y_fit, X_held,
                     truth=truth, rows=rows, metric=metric)
    tried = search.fit_grid(list(search.spec.grid(task)))
    if search.spec.path:
        tried = _past_edges(search, tried)
    return _chosen(search, tried, splits, X, y, protocol)


@dataclass
class Tried:
    """One candidate of a search on the first selection split."""
    params: dict
    held: np.ndarray | None = None
    """Its predictions on the held rows, float64; None when a path stopped before it."""
    fitted: object | None = None
    """Its fit, kept when the chosen one is not refitted (dev) or later fits warm-start from it."""
    scored: tuple[float, float] | None = None
    """Its (selection score, threshold) on the held rows."""
    extension: int = 0
    """How many steps past the grid's edge it lies (0: on the grid)."""
    within_noise: bool = False
    """Past the edge and above the edge's score by less than their paired noise: not chosen."""

    def listed(self) -> dict:
        """The candidate as the record lists it."""
        if self.held is None:
            return {"params": self.params, "skipped": True}
        return ({"params": self.params, "score": self.scored[0], "threshold": self.scored[1]}
                | ({"within_noise": True} if self.within_noise else {}))


@dataclass(frozen=True)
class _Search:
    """Where a search fits and scores its candidates: the first selection split's training rows
    (`X_fit`, `y_fit`) and held rows (`X_held`, labelled `truth`; `rows`, their positions in
    train, is None under dev, whose held rows are dev's), and the metric that chooses."""
    head: _Head
    spec: H.Head
    X_fit: np.ndarray | sparse.csr_matrix
    y_fit: np.ndarray
    X_held: np.ndarray | sparse.csr_matrix
    truth: np.ndarray
    rows: np.ndarray | None
    metric: str

    def fit_grid(self, grid: list[dict], start=None) -> list[Tried]:
        """`_fit_in_order` along `grid` from `start`'s fit; every candidate fitted is scored on
        the held rows (a path's were scored as it went)."""
        # Under dev each fit is on all of train: the chosen one is kept, not refitted. Otherwise a
        # head that warm-starts keeps its candidates' fits as starting points for the later ones.
        tried = _fit_in_order(self.head, grid, self.X_fit, self.y_fit, self.X_held,
                              keep_fitted=self.rows is None or self.spec.warm, stop_early=self.spec.path,
                              metric=self.metric, truth=self.truth, start=start)
        for candidate in tried:
            if candidate.held is not None:
                candidate.scored = candidate.scored or _score(self.head.task, self.truth, candidate.held, self.metric)
        return tried


def _past_edges(search: _Search, tried: list[Tried]) -> list[Tried]:
    """`tried`, extended past the low and then the high edge of a path's grid while that edge
    wins: EDGE_STEPS candidates at most on each side, until one past the edge stops improving."""
    task, metric, truth = search.head.task, search.metric, search.truth
    for side in (0, -1):
        for step in range(1, EDGE_STEPS + 1):
            best = _best(tried)
            beyond = _beyond([c.params for c in tried], side)
            if best != (0 if side == 0 else len(tried) - 1) or beyond is None:
                break
            # A head that warm-starts goes on from the edge's own fit, one step along its path
            # (ridge: the same rows' decomposition, not a second one).
            extra = search.fit_grid([beyond], start=tried[best].fitted if search.spec.warm else None)
            for candidate in extra:
                candidate.extension = step  # chosen only if clearly better than those nearer the grid
                # Above the edge, but by less than a standard error: noise, not chosen (one below
                # it is not chosen anyway, and is no "within noise" of it).
                above = candidate.scored[0] - tried[best].scored[0] > TIE
                candidate.within_noise = above and not _clearly_above(task, metric, truth, tried[best], candidate)
            tried = extra + tried if side == 0 else tried + extra
            if _best(tried) == best + (side == 0):  # no better past the edge: the grid was enough
                break
    return tried


def _chosen(search: _Search, tried: list[Tried], splits: list[tuple], X, y: np.ndarray,
            protocol: Protocol) -> Selection:
    """The Selection of the best of `tried`: under cv (but for a baseline) scored out of fold,
    the chosen candidate fitted on the other folds."""
    best = tried[_best(tried)]
    listed = [c.listed() for c in tried]
    fitted, start = (best.fitted, None) if search.rows is None else (None, best.fitted)
    if len(splits) == 1 or search.spec.baseline is not None:
        # A baseline's selection score is compared with no other record's on the selection rows
        # (the verdict pairs its test predictions): under cv, the first fold's score stands for
        # it, without k - 1 more fits of its costliest candidate.
        select_on = protocol.select_on if len(splits) == 1 else f"the first fold of {protocol.select_on}"
        return Selection(best.params, best.scored[1], best.scored[0], select_on, listed, fitted,
                         start, best.held, search.truth)
    held = _out_of_fold(search.head, best.params, X, y, splits, first=best.held)
    score, threshold = _score(search.head.task, y, held, search.metric)
    return Selection(best.params, threshold, score, protocol.select_on, listed, None, start, held, y)


@dataclass(frozen=True)
class _Head:
    """The head a search fits and how: what builds, warm-starts and scores every candidate."""
    name: str
    task: str
    n_classes: int
    seed: int
    threads: int


def _out_of_fold(head: _Head, params: dict, X, y, splits, *, first: np.ndarray) -> np.ndarray:
    """The chosen candidate's predictions on every training row, each from the fold that held it
    out: `first` (the first fold's, from the search) and a fresh fit per other fold. Not from
    `start`'s solution: it was fitted on the first fold's training rows, which hold the other
    folds' held rows, and a solver stopping on its tolerance near that start keeps what it
    learnt of them (random labels at C = 100: 0.84 out-of-fold accuracy from it, 0.50 fresh)."""
    held = np.zeros((len(y),) + first.shape[1:])
    held[splits[0][1]] = first
    for fit_rows, held_rows in splits[1:]:
        estimator = H.fit(H.build(head.name, head.task, params, head.seed, head.threads),
                          X[fit_rows], y[fit_rows])
        held[held_rows] = H.predict_scores(estimator, X[held_rows], head.task, head.n_classes)
    return held


def warmed(head: str, task: str, params: dict, *, start, y: np.ndarray, seed: int, threads: int):
    """An estimator for `params` to fit on rows labelled `y`: a copy of `start` (the same head
    and hyperparameters, fitted on other rows), whose fit begins at its solution, when it has
    the same classes; else a fresh one."""
    if start is not None:
        final = start[-1] if hasattr(start, "steps") else start
        classes = getattr(final, "classes_", None)
        if not TASKS[task].classes or classes is None or np.array_equal(classes, np.unique(y)):
            return copy.deepcopy(start)
    return H.build(head, task, params, seed, threads)


def _fit_in_order(head: _Head, grid: list[dict], X_fit, y_fit, X_held, *, keep_fitted: bool, stop_early: bool,
          metric: str, truth, start=None) -> list[Tried]:
    """Fit `grid` in order on one selection split: per candidate its params, its predictions on
    the held rows `X_held` (None when the path stopped before it), its fit when `keep_fitted`,
    and its score when the path stop had to compute it (`truth`: the held rows' labels).

    One estimator goes along the grid, so a path head warm-starts each fit from the previous
    candidate's solution and stops on its selection score; `start`, a fit of the same head on the
    same rows, is where it begins (a copy: the candidate it was stays as it is)."""
    tried = [Tried(params) for params in grid]
    estimator = None if start is None else copy.deepcopy(start)
    path_best, below, best_held = None, 0, None
    for candidate in tried:
        estimator = H.step(head.name, head.task, candidate.params, head.seed, head.threads,
                           previous=estimator)
        H.fit(estimator, X_fit, y_fit)
        scores = H.predict_scores(estimator, X_held, head.task, head.n_classes)
        # float64, as the out-of-fold predictions it may become part of (`_out_of_fold`)
        candidate.held = np.asarray(scores, dtype=np.float64)
        if keep_fitted:  # a path's estimator goes on to the next candidate: this one's fit is a copy
            candidate.fitted = copy.deepcopy(estimator) if H.HEADS[head.name].path else estimator
        if stop_early:
            held = candidate.held
            candidate.scored = _score(head.task, truth, held, metric)
            value = candidate.scored[0]
            if path_best is None or _better(value, path_best):
                path_best, below, best_held = value, 0, (held, candidate.scored[1])
            elif value < path_best - TIE:  # past the peak (NaN never stops the path)
                below += 1
                if below >= PATH_PATIENCE or _clearly_below(head.task, metric, truth, best_held,
                                                            (held, candidate.scored[1]),
                                                            gap=path_best - value):
                    break
    return tried


def _clearly_below(task: str, metric: str, truth, best: tuple, candidate: tuple, *, gap: float) -> bool:
    """Whether a candidate's gap to the path's best is more than two standard errors of their
    paired difference on the selection rows: past the peak for sure, not a dip of noise. The
    path's weak end costs the most, so a clear drop stops it before that end (GoEmotions'
    multilabel TF-IDF: bench/HISTORY.md, Probe cost)."""
    se = bootstrap.difference_se(task, metric, truth, best, candidate)
    return se is not None and gap > 2 * se


def _clearly_above(task: str, metric: str, truth, edge: Tried, candidate: Tried) -> bool:
    """Whether a candidate past the grid's edge beats the edge by more than one standard error
    of their paired difference on the selection rows. Within it the two are one pick of noise,
    and the grid's own candidate stands (the one-standard-error rule's choice): on a flat top
    the path would otherwise go on to its weakest penalty, the costliest fit, for a gain no
    rows can show (TF-IDF on 78 classes: bench/HISTORY.md, Probe cost)."""
    gap = candidate.scored[0] - edge.scored[0]
    if not gap > TIE:
        return False
    se = bootstrap.difference_se(task, metric, truth, (candidate.held, candidate.scored[1]),
                                 (edge.held, edge.scored[1]))
    return se is None or gap > se


def _best(tried: list[Tried]) -> int:
    """The position of the best scored candidate: among equals, the one nearest the grid (a
    candidate past its edge counts only when clearly better, `_clearly_above`), then the first."""
    best = None
    for j, candidate in enumerate(tried):
        if candidate.scored is None or candidate.within_noise:
            continue
        if best is None or _better(candidate.scored[0], tried[best].scored[0]) or (
                not _better(tried[best].scored[0], candidate.scored[0])
                and candidate.extension < tried[best].extension):
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


def selection_splits(task, y, protocol: Protocol, folds: int, seed: int) -> list[tuple]:
    """(train rows, held rows) per split; (None, None) for the dev protocol (all of train, dev).
    Classes are stratified, multilabel rows iteratively stratified (rare labels reach as many
    folds as they have rows), regression targets split at random."""
    from sklearn.model_selection import KFold, StratifiedKFold, train_test_split

    if protocol.name == "dev":
        return [(None, None)]
    if protocol.name == "holdout" and _holdout_rows(len(y)) < 2:
        raise FeatxError(f"probe.protocol = \"holdout\" holds out half of the {len(y)} training rows, "
                         "fewer than the 2 a score needs (a correlation, a threshold): give at least 4 "
                         "training rows, or use probe.protocol = \"cv\"")
    if TASKS[task].thresholded:
        if protocol.name == "holdout":
            return [iterative_holdout(y, _holdout_rows(len(y)), seed)]
        return iterative_folds(y, folds, seed)
    classes = TASKS[task].classes
    if protocol.name == "holdout":
        rows, size = np.arange(len(y)), _holdout_rows(len(y))
        counts = np.bincount(y)[np.bincount(y) > 0] if classes else None
        # Stratified where scikit-learn can: two rows of every class, and as many classes as
        # either part has rows (3,000 classes of 7 rows each are more than a 10% holdout's).
        stratify = y if classes and counts.min() >= 2 and min(size, len(y) - size) >= len(counts) else None
        fit, held = train_test_split(rows, test_size=size, random_state=seed, stratify=stratify)
        return [(np.sort(fit), np.sort(held))]
    if classes:
        runs = cv_folds(task, y, folds)
        if runs < 2:
            raise FeatxError("a class has a single training example; cross-validation needs at "
                             "least two per class (add examples, or give a dev split)")
        splitter = StratifiedKFold(runs, shuffle=True, random_state=seed)
    else:
        if folds >= len(y):  # the first fold's held rows choose, by a correlation: two at least
            raise FeatxError(f"probe.folds = {folds} with {len(y)} training rows leaves a fold of one row "
                             "(or none), and a regression's hyperparameters are chosen by a correlation "
                             "on the first fold's rows, which needs two: lower probe.folds (at most "
                             f"{len(y) - 1}) or give more rows")
        splitter = KFold(folds, shuffle=True, random_state=seed)
    return list(splitter.split(np.zeros(len(y)), y))
