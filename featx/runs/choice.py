"""The choice among run records: which probe the verdict (and predict) stands for, and which
fine-tune.

`selection_score` is what a record was chosen by; `frozen_choice` applies the one-standard-error
rule among the backbone probes (paired on their stored selection predictions when there are
some), `best_tuned` takes the fine-tune with the best selection score. Reads records and their
predictions (`featx.runs.records`); writes nothing.
"""
from __future__ import annotations

import math

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featx.errors import FeatxError
from featx.runs.schema import Record
from featx.runs.records import read_predictions, record_dir


def selection_score(record: Record) -> float:
    """The score a record's configuration was chosen by: its chosen candidate's on dev, out of
    fold or on the held-out rows, or the fine-tune's best epoch on its selection split (-inf
    when there is none)."""
    if record.selection_score is not None:
        return float(record.selection_score)
    # A fine-tune's: the best candidate of its search, or of its curve (a skipped one has no score).
    scores = [c["score"] for c in record.search if "score" in c] + [value for _, value in (record.curve or {"select": []})["select"]]
    scores = [s for s in scores if isinstance(s, (int, float)) and s == s]  # no None, no NaN
    return max(scores) if scores else float("-inf")


@dataclass(frozen=True)
class FrozenChoice:
    """How the verdict's frozen configuration was chosen among the backbone probes."""
    record: Record
    """The chosen probe."""
    top: Record
    """The probe with the highest selection score."""
    se: float
    """The standard error the chosen probe was judged by: of its paired difference from the
    top on the selection rows (`paired`), else of the top selection score."""
    within: int
    """How many probes the selection rows cannot tell apart from the top."""
    paired: bool = False
    """Whether differences were judged paired, on both probes' stored selection predictions."""


def frozen_choice(records: list[Record], runs_dir: str | Path | None = None) -> FrozenChoice | None:
    """The frozen configuration the verdict stands for, by the one-standard-error rule: among
    the backbone probes (no baseline, not the mteb check) of the newest metric (a verdict never
    compares an accuracy with an MCC) that the selection rows cannot tell apart from the best,
    the simplest head (no training, then linear and MLP heads alike, then trees), then the
    fewest features, then the higher score. Many candidates within noise of each other make the maximum an optimistic,
    unstable pick; the simplest of them is as good as the selection split can tell, and
    steadier.

    "Cannot tell apart": with `runs_dir` (where the records' predictions are), a probe whose
    gap to the best is within one bootstrap standard error of the *paired* difference on the
    same selection rows; two heads on the same features err on the same rows, so a small lead
    can be real, while two unrelated candidates need a larger one. Without stored selection
    predictions (older records), within one standard error of the best score itself."""
    from featx.heads.registry import HEADS

    backbone = [r for r in records if r.stage == "probe" and r.protocol["name"] != "mteb"
                and not r.baseline]
    # The staged grid's scout ranks feature sets; the heads fitted on the ones it ranked first
    # answer: a scout's selection score can lead by noise (TREC fine under cv: the ridge scout
    # first out of fold, 4 points under the logistic head and the MLP on test).
    # A scout that is itself a head asked to answer (on a regression task `logistic`, Ridge, runs
    # as the scout) stays a candidate on the feature sets the second stage answered on; the ridge
    # classifier only ranks, unless it is clearly ahead of every head that answered (by more than
    # three times either's standard error: on 60 classes of 7 rows it scores 1.0 on dev and test,
    # the logistic head on the same features 0.36).
    if any(not r.scout for r in backbone):
        answered = {r.features for r in backbone if not r.scout}
        answers = [r for r in backbone if not r.scout or (r.head != "ridge" and r.features in answered)]
        ahead = [r for r in backbone if r.scout and r.head == "ridge" and r.features in answered
                 and _clearly_ahead(r, answers)]
        backbone = answers + ahead
    if not backbone:
        return None
    primary = max(backbone, key=lambda r: r.created).primary_metric
    # A probe whose selection score is undefined (NaN: a constant prediction on the selection
    # rows, as LightGBM's on 36 training rows) is no candidate: NaN compares false with every
    # score, so whichever record came first would win.
    probes = [r for r in backbone if r.primary_metric == primary and math.isfinite(selection_score(r))]
    if not probes:
        return None
    # Ties are broken by names, never by fit times: a pick must not depend on machine load.
    top = min(probes, key=lambda r: (-selection_score(r), r.features, r.head))
    se_top = top.selection_se or 0.0
    ses = _paired_ses(top, probes, runs_dir, primary, bound=2.5 * se_top) if runs_dir is not None else {}
    judged = {id(r): ses.get(id(r), se_top) for r in probes}
    within = [r for r in probes if selection_score(top) - selection_score(r) <= judged[id(r)] or r is top]
    simplest = lambda r: (HEADS[r.head].complexity if r.head in HEADS else len(HEADS),  # noqa: E731
                          r.n_features or float("inf"), -selection_score(r), r.features, r.head)
    chosen = min(within, key=simplest)
    paired = chosen is not top and id(chosen) in ses
    return FrozenChoice(chosen, top, judged[id(chosen)] if chosen is not top else se_top, len(within), paired)


def rule_text(choice: FrozenChoice) -> str:
    """How `choice` was made, in one clause for a table's footer (the verdict says it at length)."""
    top, split = choice.top, choice.record.protocol["select_on"]
    if top is choice.record:
        return (f"the best score on {split}, with no simpler head within one standard error of it; test "
                "scores choose nothing")
    return (f"the simplest head whose score on {split} is within one standard error of the best "
            f"({top.features} {top.shown_head}, {selection_score(top):.4f}); test scores choose nothing")


def _clearly_ahead(scout: Record, answers: list[Record]) -> bool:
    """Whether `scout` leads the best of `answers` of its metric by more than the larger
    of their selection standard errors, three times (a lead by noise is what dropped scouts)."""
    rivals = [r for r in answers if r.primary_metric == scout.primary_metric and math.isfinite(selection_score(r))]
    score = selection_score(scout)
    if not rivals or not math.isfinite(score):
        return False
    best = max(rivals, key=selection_score)
    if scout.selection_se is None or best.selection_se is None:  # no error to judge the lead by
        return False
    return score - selection_score(best) > 3 * max(scout.selection_se, best.selection_se)


def _paired_ses(top: Record, probes: list[Record], runs_dir, metric: str, bound: float) -> dict[int, float]:
    """{id(record): standard error of (top - record) on the shared selection rows}, for the
    probes whose gap to the top is below `bound` and whose selection predictions are stored on
    the same rows as the top's (same protocol, same labels)."""
    mine = stored_selection(record_dir(runs_dir, top), top)
    if mine is None:
        return {}
    out = {}
    for record in probes:
        gap = selection_score(top) - selection_score(record)
        if record is top or not 0 < gap <= bound or record.protocol != top.protocol:
            continue
        se = selection_difference_se(top, metric, mine, stored_selection(record_dir(runs_dir, record), record))
        if se is not None:
            out[id(record)] = se
    return out


def stored_selection(directory: Path, record: Record):
    """A record's stored predictions (in its configuration folder) when they hold its selection
    rows' scores, else None."""
    try:
        found = read_predictions(directory, record)
    except FeatxError:
        return None
    return found if found.selection_scores is not None else None


def selection_difference_se(top: Record, metric: str, mine, theirs) -> float | None:
    """Bootstrap standard error of `metric` of `mine` minus `theirs` (stored selection
    predictions, `stored_selection`) on their selection rows; None when either is missing, the
    rows differ, or too few resamples define it."""
    from featx.stats import bootstrap

    if mine is None or theirs is None or not np.array_equal(theirs.selection_truth, mine.selection_truth):
        return None
    return bootstrap.difference_se(top.task, metric, mine.selection_truth,
                                   (mine.selection_scores, mine.threshold),
                                   (theirs.selection_scores, theirs.threshold))


def best_frozen(records: list[Record], runs_dir: str | Path | None = None) -> Record | None:
    """The chosen frozen probe (`frozen_choice`), or None when there is none."""
    choice = frozen_choice(records, runs_dir)
    return None if choice is None else choice.record


def best_tuned(records: list[Record], metric: str) -> Record | None:
    """The fine-tune with the best selection score, in `metric`."""
    tunes = [r for r in records if r.stage == "finetune" and r.primary_metric == metric
             and math.isfinite(selection_score(r))]  # NaN: none better, none worse (`frozen_choice`)
    return max(tunes, key=lambda r: (selection_score(r), r.created)) if tunes else None
