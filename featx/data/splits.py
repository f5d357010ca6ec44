"""Assigning rows to train / dev / test by a seeded split stratified as the task allows
(classes, label sets, target deciles): featx's own split of one file, and the fine-tune's
held-out rows (`label_assignment`); the held rows whose text train holds, dropped on request
(`drop_in_train`). No torch.
"""
from __future__ import annotations

import logging

import numpy as np

from featx.errors import FeatxError
from featx.stats.duplicates import row_hashes
from featx.stats.stratify import iterative_assignment, proportional_sizes
from featx.tasks import TASKS

SPLITS = ("train", "dev", "test")
log = logging.getLogger("featx")


def check_own_split(assignment: np.ndarray, cfg) -> None:
    """featx's own split of one file must leave test rows (none: no verdict can be scored, which
    the probe would find only after the whole extraction) and says when dev got none (the probe
    then chooses by cross-validation). Twelve rows of twelve classes all stay in train: every
    class keeps its first row there."""
    counts = np.bincount(assignment, minlength=len(SPLITS))

    def why(split: str, fraction: float) -> str:
        return (f"featx split the data's {len(assignment):,} rows itself and none went to {split} (data."
                f"{split}_fraction = {fraction}): every class keeps a row in train, so with classes of a row "
                "or two, or very few rows, none are left over")

    if cfg.test_fraction > 0 and counts[2] == 0:
        raise FeatxError(why("test", cfg.test_fraction) + "; give more rows per class, or the test rows "
                         "yourself (data.test, or a split column named by data.split)")
    if cfg.dev_fraction > 0 and counts[1] == 0:
        log.warning(why("dev", cfg.dev_fraction) + "; the probe chooses by cross-validation on train instead")


def label_assignment(task: str, labels: np.ndarray, dev_fraction: float, test_fraction: float,
                     seed: int) -> np.ndarray:
    """0/1/2 (train/dev/test) per row of encoded labels, stratified as the task allows: by class,
    by iterative stratification of multilabel rows (featx.stats.stratify: a label's first row goes
    to train, its next ones to dev and test, in proportion), regression rows at random. The
    sizes are round(n x fraction)."""
    if TASKS[task].thresholded:
        sizes = proportional_sizes(len(labels), (dev_fraction, test_fraction))
        return iterative_assignment(labels, sizes, seed).astype(np.int8)
    strata = labels if TASKS[task].classes else np.zeros(len(labels), dtype=int)
    return stratified_assignment(strata, dev_fraction, test_fraction, seed)


def stratified_assignment(strata: np.ndarray, dev_fraction: float, test_fraction: float,
                          seed: int) -> np.ndarray:
    """0/1/2 (train/dev/test) per row: each stratum shuffled (seeded) and cut in proportion.

    The split sizes are round(n x fraction) overall; each stratum gets its proportional share,
    the remainders going to the strata with the largest fractional parts, and every stratum
    keeps at least one training row. Written by hand because scikit-learn's stratified
    splitters refuse strata with one member, which real label distributions have.
    """
    rng = np.random.default_rng(seed)
    if strata.size and strata.dtype.kind in "iu" and 0 <= strata.min() and strata.max() < 1 << 16:
        strata = strata.astype(np.uint16)  # numpy sorts 16-bit keys stably by radix: the same order, faster
    values, sizes = np.unique(strata, return_counts=True)
    out = np.zeros(len(strata), dtype=np.int8)
    quotas = {}
    for code, fraction in ((2, test_fraction), (1, dev_fraction)):
        exact = sizes * fraction
        quota = np.floor(exact).astype(int)
        spare = int(round(len(strata) * fraction)) - quota.sum()
        tie_break = rng.random(len(sizes))
        for j in sorted(range(len(sizes)), key=lambda j: (-(exact[j] - quota[j]), tie_break[j]))[:max(spare, 0)]:
            quota[j] += 1
        quotas[code] = quota
    # Each stratum's rows in increasing order, as np.flatnonzero(strata == value) gives them, from
    # one stable sort, not a comparison of every row per stratum.
    order = np.argsort(strata, kind="stable")
    ends = np.cumsum(sizes)
    for j in range(len(values)):
        members = rng.permutation(order[ends[j] - sizes[j]:ends[j]])
        n_test = min(quotas[2][j], len(members) - 1)
        n_dev = min(quotas[1][j], len(members) - 1 - n_test)
        out[members[:n_test]] = 2
        out[members[n_test:n_test + n_dev]] = 1
    return out


def drop_in_train(store, pairs: bool, positions: dict[str, np.ndarray], max_rows: int | None = None) -> dict[str, int]:
    """data.drop_in_train: the dev and test rows (`positions`: each split's rows of the row
    store) whose text, and second text of a pair, a training row has too (of train's first
    `max_rows`: the rows the cache keeps), compared as the cache counts them (`row_hashes`),
    taken out of `positions`; returns how many per split that lost rows."""
    def hashes(rows: np.ndarray) -> np.ndarray:
        return row_hashes(store.column("text", rows), store.column("pair", rows) if pairs else None)
    train = np.unique(hashes(positions["train"][:max_rows]))
    dropped = {}
    for split in ("dev", "test"):
        if split in positions:
            held = np.isin(hashes(positions[split]), train)
            if held.any():
                positions[split], dropped[split] = positions[split][~held], int(held.sum())
    return dropped
