"""The labelled-row budgets of a learning curve and the nested, stratified subsets drawn for them.
No torch.

A classification curve counts its budgets per class (8, 16, 32, ... rows of each class; a class
with fewer rows gives all it has), a regression or multilabel curve in rows (64, 128, 256, ...);
the ladder doubles until the full training split, which is its last rung. Small budgets are
drawn several times (their scores vary most), larger ones once, within a cost: the points'
expected work, draws included, at most `max_cost` times the full split's (`ladder`).

Each draw orders the training rows once, and every budget of that draw takes a prefix of the
order: a budget's rows hold every smaller budget's rows of the same draw (nested), so the curve
moves because rows were added, not because other rows were drawn. Within a class the order is a
seeded permutation; in rows, the strata (target quantiles, or each row's rarest label) are
interleaved in proportion, so that every prefix holds each stratum's share.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from featx.tasks import TASKS

UNITS = ("per_class", "rows")
# Where an automatic ladder starts, per unit.
FIRST = {"per_class": 8, "rows": 64}
# The largest budget of each entry of curve.draws, per unit; larger budgets are drawn once.
DRAWS_UNTIL = {"per_class": (32, 128), "rows": (256, 1024)}
# Target quantile strata of a regression's rows.
QUANTILES = 10


@dataclass(frozen=True)
class Rung:
    """One budget of the ladder: `size` rows of each class (per_class) or rows in all."""
    size: int
    draws: int
    full: bool = False
    """The whole training split (its size is the largest class's rows, or all rows)."""


def unit_of(task: str) -> str:
    """Single-label classes are counted per class; multilabel rows and targets in rows."""
    return "per_class" if TASKS[task].classes else "rows"


def ladder(unit: str, counts: np.ndarray, *, budgets: tuple[int, ...] = (), draws: tuple[int, ...] = (5, 3),
           until: tuple[int, ...] = (), max_cost: float = 2.0,
           work: Callable[[int], float] = float) -> list[Rung]:
    """The rungs below the full split and the full split. `counts`: the training rows of each
    class (per_class), or one count, all rows (rows).

    `budgets` when given, else doubling from FIRST[unit], each rung at least SPACING times fewer
    rows than the next (with a long tail of small classes, per-class budgets past the small
    classes' size add few rows: such a rung costs a fine-tune and shows little). A rung up to
    until[i] (default DRAWS_UNTIL[unit]) is drawn draws[i] times (the first such i), a larger
    one once. Then, while the rungs' work (draws included) passes `max_cost` times the full
    split's, the largest budget drawn more than once loses a draw, or, with one draw each, an
    automatic ladder loses its largest rung, and the work a lost rung leaves gives the smallest
    budgets their draws back: an automatic ladder's points cost at most `max_cost` full-split
    points (budgets given stay, each drawn once at least).
    `work(rows)`: the expected work of a point training on `rows` rows (default: the rows; a
    fine-tune on fewer rows trains more epochs, which featx.curve.stage's estimate counts)."""
    counts = np.asarray(counts, np.int64)
    largest, total = int(counts.max()), int(counts.sum())
    sizes = sorted({int(b) for b in budgets if b < largest}) if budgets else _doubling(FIRST[unit], largest)
    if not budgets:
        sizes = _spaced(sizes, counts, total)
    table = list(zip(until or DRAWS_UNTIL[unit], draws))
    drawn = {size: next((d for bound, d in table if size <= bound), 1) for size in sizes}
    cost = {size: work(rows_at(counts, size)) for size in sizes}
    cap, wanted = max_cost * work(total), dict(drawn)

    def spent() -> float:
        return sum(drawn[k] * cost[k] for k in sizes)
    while sizes and spent() > cap:
        several = [k for k in sizes if drawn[k] > 1]
        if several:
            drawn[max(several)] -= 1
        elif budgets:
            break  # the sizes asked for stay, each drawn once
        else:
            sizes = sizes[:-1]
    # What a dropped rung left: the smallest budgets get draws back, one each in turn.
    added = True
    while added:
        added = False
        for k in sizes:
            if drawn[k] < wanted[k] and spent() + cost[k] <= cap:
                drawn[k], added = drawn[k] + 1, True
    return [Rung(size, drawn[size]) for size in sizes] + [Rung(largest, 1, full=True)]


def rows_at(counts: np.ndarray, size: int) -> int:
    """The rows a budget of `size` takes: min(size, rows) of each class (one count: all rows)."""
    return int(np.minimum(counts, size).sum())


# A rung of an automatic ladder has at least this many times fewer rows than the next one.
SPACING = 1.5


def _spaced(sizes: list[int], counts: np.ndarray, total: int) -> list[int]:
    """`sizes` without those whose rows are within SPACING of the next kept rung's (the full split
    first), from the top down."""
    kept, above = [], total
    for size in reversed(sizes):
        rows = rows_at(counts, size)
        if rows * SPACING <= above:
            kept.append(size)
            above = rows
    return kept[::-1]


def _doubling(first: int, largest: int) -> list[int]:
    sizes, size = [], first
    while size < largest:
        sizes.append(size)
        size *= 2
    return sizes


def strata(task: str, y: np.ndarray) -> np.ndarray:
    """(n,) int: each training row's stratum. Classes are their own strata; a regression's rows
    fall in quantile bins of the first target; a multilabel row in the stratum of its rarest
    label (rows without a label, one more)."""
    y = np.asarray(y)
    if TASKS[task].classes:
        return y.astype(np.int64)
    if TASKS[task].regression:
        target = y.reshape(len(y), -1)[:, 0]
        edges = np.quantile(target, np.linspace(0, 1, QUANTILES + 1)[1:-1]) if len(target) else []
        return np.searchsorted(edges, target, side="right").astype(np.int64)
    Y = y.reshape(len(y), -1) != 0  # (n, L)
    frequency = Y.sum(axis=0)  # (L,)
    rarity = np.where(Y, frequency[None, :], np.iinfo(np.int64).max)  # (n, L)
    return np.where(Y.any(axis=1), rarity.argmin(axis=1), Y.shape[1]).astype(np.int64)


def positions(strata_: np.ndarray, unit: str, seed: int, draw: int) -> np.ndarray:
    """(n,) int: each row's place in draw `draw`'s order; a budget of size k takes the rows whose
    place is below k. per_class: the place within the row's class; rows: the place in one order
    that interleaves the strata in proportion."""
    rng = np.random.default_rng([seed, draw])
    n = len(strata_)
    shuffled = rng.permutation(n)  # (n,)
    # Rows by stratum, each stratum in the shuffled order; a row's rank within its stratum.
    order = shuffled[np.argsort(strata_[shuffled], kind="stable")]  # (n,)
    _, first, sizes = np.unique(strata_[order], return_index=True, return_counts=True)
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - np.repeat(first, sizes)
    if unit == "per_class":
        return rank
    # The r-th of a stratum of m rows comes at (r + u) / m of the way: every prefix holds about
    # its share of each stratum, and u (uniform, seeded) breaks ties between strata at random.
    size = np.empty(n, np.int64)
    size[order] = np.repeat(sizes, sizes)
    key = (rank + rng.random(n)) / size  # (n,)
    place = np.empty(n, np.int64)
    place[np.argsort(key, kind="stable")] = np.arange(n)
    return place


def subset(places: np.ndarray, size: int) -> np.ndarray:
    """The rows (sorted positions) of a budget of `size` in one draw (`positions`)."""
    return np.flatnonzero(places < size)
