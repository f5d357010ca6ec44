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
    Y = np.asarray(Y)
    Y = Y.reshape(len(Y), int(np.prod(Y.shape[1:]))) != 0  # (n, L) bool; n = 0 too
    n, n_labels = Y.shape
    k = len(sizes)
    if sum(sizes) != n or min(sizes) < 0:
        raise ValueError(f"part sizes {list(sizes)} do not add up to the {n} rows")
    # The draws, their order and their shapes are part of the result (splits and folds are
    # cache keys): a tie-break per row and part, each label's rows in a random order, a
    # tie-break per label, the order in which rows without a label fill the room left.
    rng = np.random.default_rng(seed)
    share = np.asarray(sizes, dtype=np.float64) / max(n, 1)  # (k,)
    counts = Y.sum(axis=0)  # (L,)
    wanted = counts[:, None] * share[None, :]  # (L, k) rows of label l part j wants at the start
    tie = rng.random((n, k))  # (n, k)
    rows_of = [rng.permutation(np.flatnonzero(Y[:, l])) for l in range(n_labels)]
    label_tie = rng.random(n_labels)  # (L,)
    # Each row's labels as one flat array sliced by row (CSR), from one pass over Y.
    label_rows, flat_labels = np.nonzero(Y)  # (nnz,) (nnz,), by row
    label_start = np.concatenate([[0], np.cumsum(np.bincount(label_rows, minlength=n))])  # (n + 1,)
    # A part's want of a label only ever falls by one, so it is its start after `taken` steps.
    taken = np.zeros((n_labels, k), dtype=np.int64)  # rows of label l placed in part j so far
    left = counts.astype(np.int64)  # (L,) unassigned rows per label
    room = np.asarray(sizes, dtype=np.int64)  # (k,)
    part = np.full(n, -1, dtype=np.int64)
    # While one label's rows are placed only its own want and the parts' room change, so its
    # rows are placed at once, and the other labels of those rows counted after them.
    while True:
        pending = np.flatnonzero(left > 0)
        if not len(pending):
            break
        # The rarest label first, then the lowest tie (a stable sort: the first on a full tie).
        label = pending[np.lexsort((label_tie[pending], left[pending]))[0]]
        rows = rows_of[label]
        rows = rows[part[rows] < 0]  # (m,) its unassigned rows, in their random order
        chosen = _greedy_parts(wanted[label], taken[label], room, tie, rows)  # (m,)
        part[rows] = chosen
        room -= np.bincount(chosen, minlength=k)
        # Every label of those rows now has one row more in its part and one fewer unassigned.
        starts = label_start[rows]
        lengths = label_start[rows + 1] - starts  # (m,)
        at = np.arange(lengths.sum()) + np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
        labels = flat_labels[at]  # (their labels,) row by row
        taken += np.bincount(labels * k + np.repeat(chosen, lengths),
                             minlength=n_labels * k).reshape(n_labels, k)
        left -= np.bincount(labels, minlength=n_labels)
    free = rng.permutation(np.flatnonzero(part < 0))  # rows without a label fill the room left
    part[free] = np.repeat(np.arange(k), room)
    return part


def _greedy_parts(want: np.ndarray, taken: np.ndarray, room: np.ndarray, tie: np.ndarray,
                  rows: np.ndarray) -> np.ndarray:
    """The parts that one label's `rows` get, taken in order, one at a time: each to the open
    part with the highest (want, room, tie[row]), whose want and room then fall by one.

    want[j] is what part j wanted at the start, before taken[j] rows came; room (k,) the room
    left. Part j's successive keys (want - t, room - t) fall strictly, so the rows take the m
    highest of all parts' keys in sorted order (a merge of k falling runs), computed at once.
    Only keys equal in (want, room) are ordered by the rows: such a run holds one key per part,
    and its rows take those parts in turn, each the one of highest tie among those left (the
    first on a full tie, as max() has it).
    """
    m, k = len(rows), len(room)
    if m <= FEW_ROWS:
        return _one_at_a_time(want, taken, room, tie, rows)
    slot_want, slot_room, slot_part = [], [], []
    for j in range(k):
        s = int(min(room[j], m))
        slot_want.append(_countdown(float(want[j]), int(taken[j]), int(taken[j]) + s))
        slot_room.append(room[j] - np.arange(s))
        slot_part.append(np.full(s, j))
    order = np.lexsort((-np.concatenate(slot_room), -np.concatenate(slot_want)))
    w = np.concatenate(slot_want)[order]  # (S,) keys, highest first
    r = np.concatenate(slot_room)[order]
    p = np.concatenate(slot_part)[order]
    chosen = p[:m].copy()
    first = np.flatnonzero(np.concatenate([[True], (w[1:] != w[:-1]) | (r[1:] != r[:-1])]))
    run = np.diff(np.append(first, len(w)))  # length of each run of equal keys
    tied = (run > 1) & (first < m)
    first, run = first[tied], run[tied]
    if not len(first):
        return chosen
    members = np.zeros((len(first), k), dtype=bool)  # (G, k) parts of each tied run
    for t in range(run.max()):
        has = np.flatnonzero(run > t)
        members[has, p[first[has] + t]] = True
    for t in range(run.max()):
        turn = np.flatnonzero((run > t) & (first + t < m))  # runs whose t-th row is one of ours
        at = first[turn] + t
        pick = np.where(members[turn], tie[rows[at]], -1.0).argmax(axis=1)  # ties lie in [0, 1)
        chosen[at] = pick
        members[turn, pick] = False
    return chosen


FEW_ROWS = 16  # below this many rows numpy's per-call cost outweighs a loop over them


def _one_at_a_time(want: np.ndarray, taken: np.ndarray, room: np.ndarray, tie: np.ndarray,
                   rows: np.ndarray) -> np.ndarray:
    """_greedy_parts row by row, as the paper places them."""
    want = [_countdown(float(w), int(t), int(t) + 1)[0] for w, t in zip(want.tolist(), taken.tolist())]
    room = room.tolist()
    chosen = []
    for row_tie in tie[rows].tolist():
        j = max((j for j in range(len(room)) if room[j] > 0), key=lambda j: (want[j], room[j], row_tie[j]))
        want[j] -= 1
        room[j] -= 1
        chosen.append(j)
    return np.array(chosen, dtype=np.int64)


def _countdown(x: float, start: int, stop: int) -> np.ndarray:
    """x after start, ..., stop - 1 subtractions of one, each rounded as `x -= 1` rounds it:
    below one the steps are not exact, so x - t could differ in the last bit and turn a tie."""
    if stop <= start:
        return np.zeros(0)
    steps = np.ones(stop)
    steps[0] = x
    return np.subtract.accumulate(steps)[start:]


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
