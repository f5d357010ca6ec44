"""Iterative stratification of multilabel rows (Sechidis, Tsoumakas & Vlahavas 2011). No torch.

Stratifying multilabel rows by one key (their rarest label, their label set) leaves a rare
label wherever its few rows happen to fall. The iterative algorithm deals with labels, rarest
first: each row of the label with the fewest rows still unassigned goes to the part that
wants that label most (its share of the label's rows minus what it already has), ties to the
part with the most room left, then at random (seeded). Rows without a label fill the room
that is left. A label with one row goes to the largest part; among k equal parts (folds) a
label with m rows reaches min(m, k) of them.

One change to the paper, so that parts have exactly the sizes asked for (k folds of equal
size, a held-out part of a stated number of rows): a part with no room left takes no more
rows. scikit-multilearn lets a part overflow instead; the label distribution is the same but
for the last few rows.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def proportional_sizes(n: int, fractions: Sequence[float]) -> list[int]:
    """Row counts for parts after the first: round(n x fraction) each; the first part takes
    the rest (the training part keeps what rounding leaves)."""
    later = [int(round(n * f)) for f in fractions]
    return [n - sum(later)] + later


def iterative_assignment(Y: np.ndarray, sizes: Sequence[int], seed: int) -> np.ndarray:
    """The part (0 .. len(sizes) - 1) of each row of the 0/1 label matrix Y (n, L), so that part
    j holds exactly sizes[j] rows and every label's rows are spread in proportion to the sizes
    as far as the counts allow."""
    Y = np.asarray(Y).reshape(len(Y), -1) != 0  # (n, L) bool
    n, n_labels = Y.shape
    k = len(sizes)
    if sum(sizes) != n or min(sizes) < 0:
        raise ValueError(f"part sizes {list(sizes)} do not add up to the {n} rows")
    rng = np.random.default_rng(seed)
    share = np.asarray(sizes, dtype=np.float64) / max(n, 1)  # (k,)
    counts = Y.sum(axis=0)  # (L,)
    # Plain Python lists in the per-row loop: a row touches a handful of labels and k parts,
    # where numpy's per-call overhead would cost more than the arithmetic.
    wanted = (counts[:, None] * share[None, :]).tolist()  # (L, k) rows of label l part j still wants
    room = list(sizes)
    tie = rng.random((n, k)).tolist()  # a seeded tie-break per row and part
    labels_of = [np.flatnonzero(row).tolist() for row in Y]
    rows_of = [rng.permutation(np.flatnonzero(Y[:, l])).tolist() for l in range(n_labels)]
    left = counts.astype(np.int64).tolist()  # unassigned rows per label
    label_tie = rng.random(n_labels).tolist()
    part = np.full(n, -1, dtype=np.int64)
    while True:
        pending = [l for l in range(n_labels) if left[l] > 0]
        if not pending:
            break
        label = min(pending, key=lambda l: (left[l], label_tie[l]))  # the rarest label first
        want = wanted[label]
        for row in rows_of[label]:
            if part[row] >= 0:
                continue
            open_parts = [j for j in range(k) if room[j] > 0]
            j = max(open_parts, key=lambda j: (want[j], room[j], tie[row][j]))
            part[row] = j
            room[j] -= 1
            for other in labels_of[row]:
                wanted[other][j] -= 1
                left[other] -= 1
    free = rng.permutation(np.flatnonzero(part < 0))  # rows without a label fill the room left
    part[free] = np.repeat(np.arange(k), room)
    return part


def iterative_folds(Y: np.ndarray, folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(training rows, held-out rows) of `folds` folds of (as near as can be) equal size."""
    n = len(Y)
    sizes = [n // folds + (j < n % folds) for j in range(folds)]
    part = iterative_assignment(Y, sizes, seed)
    return [(np.flatnonzero(part != j), np.flatnonzero(part == j)) for j in range(folds)]


def iterative_holdout(Y: np.ndarray, held: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, `held` held-out rows), sorted."""
    part = iterative_assignment(Y, [len(Y) - held, held], seed)
    return np.flatnonzero(part == 0), np.flatnonzero(part == 1)
