"""The labelled-row budgets of a learning curve and the nested, stratified subsets drawn for them.
No torch.

A classification curve counts its budgets per class (8, 16, 32, ... rows of each class; a class
with fewer rows gives all it has), a regression or multilabel curve in rows (64, 128, 256, ...);
the ladder doubles until the full training split, which is its last rung. Small budgets are
drawn several times (their scores vary most), larger ones once.

Each draw orders the training rows once, and every budget of that draw takes a prefix of the
order: a budget's rows hold every smaller budget's rows of the same draw (nested), so the curve
moves because rows were added, not because other rows were drawn. Within a class the order is a
seeded permutation; in rows, the strata (target quantiles, or each row's rarest label) are
interleaved in proportion, so that every prefix holds each stratum's share.
"""
from __future__ import annotations

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


def ladder(unit: str, largest: int, *, budgets: tuple[int, ...] = (), draws: tuple[int, ...] = (5, 3),
           until: tuple[int, ...] = ()) -> list[Rung]:
    """The rungs below `largest` (the largest class's training rows, or all training rows) and the
    full split: `budgets` when given, else doubling from FIRST[unit]. A rung up to until[i]
    (default DRAWS_UNTIL[unit]) is drawn draws[i] times (the first such i); a larger one once."""
    sizes = sorted({int(b) for b in budgets}) if budgets else _doubling(FIRST[unit], largest)
    table = list(zip(until or DRAWS_UNTIL[unit], draws))
    rungs = [Rung(size, next((d for bound, d in table if size <= bound), 1)) for size in sizes if size < largest]
    return rungs + [Rung(largest, 1, full=True)]


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
