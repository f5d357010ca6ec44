"""Iterative stratification: exact part sizes, rare labels spread over parts, seeded."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.model_selection import KFold

from featx.stats.stratify import iterative_assignment, iterative_folds, iterative_holdout, proportional_sizes


def long_tail(n: int = 2000, n_labels: int = 40, seed: int = 1) -> np.ndarray:
    """(n, L) 0/1 labels whose frequencies fall as a power law, with labels of 1, 2 and 3 rows."""
    rng = np.random.default_rng(seed)
    Y = (rng.random((n, n_labels)) < 0.5 / np.arange(1, n_labels + 1) ** 1.3).astype(np.uint8)
    for j, count in zip(range(n_labels - 3, n_labels), (1, 2, 3)):
        Y[:, j] = 0
        Y[rng.choice(n, count, replace=False), j] = 1
    return Y


def test_every_label_is_spread_in_proportion_where_random_folds_are_not():
    Y = long_tail()
    part = iterative_assignment(Y, [400] * 5, seed=0)
    assert np.bincount(part).tolist() == [400] * 5
    per_part = np.stack([Y[part == j].sum(axis=0) for j in range(5)], axis=1)  # (L, 5)
    share = Y.sum(axis=0)[:, None] / 5
    assert np.abs(per_part - share).max() <= 1.0  # within one row of its share, every label
    random = np.zeros(len(Y), dtype=int)
    for j, (_, held) in enumerate(KFold(5, shuffle=True, random_state=0).split(Y)):
        random[held] = j
    per_random = np.stack([Y[random == j].sum(axis=0) for j in range(5)], axis=1)
    assert np.abs(per_random - share).max() > 5


def test_a_label_of_m_rows_reaches_m_folds():
    Y = long_tail()
    folds = iterative_folds(Y, 5, seed=0)
    for count, column in zip((1, 2, 3), range(37, 40)):
        reached = sum(Y[held, column].any() for _, held in folds)
        assert reached == count, (count, reached)


def test_a_single_row_label_goes_to_the_largest_part():
    Y = long_tail()
    sizes = proportional_sizes(len(Y), (0.1, 0.1))
    assert sizes == [1600, 200, 200]
    for seed in range(5):
        part = iterative_assignment(Y, sizes, seed)
        assert part[Y[:, 37] == 1].tolist() == [0]
        assert np.bincount(part).tolist() == sizes


def test_seeded_and_sizes_exact_with_rows_without_labels():
    Y = long_tail(n=303)
    Y[::3] = 0  # a third of the rows carry no label
    a, b = iterative_assignment(Y, [203, 50, 50], 7), iterative_assignment(Y, [203, 50, 50], 7)
    assert np.array_equal(a, b) and not np.array_equal(a, iterative_assignment(Y, [203, 50, 50], 8))
    assert np.bincount(a).tolist() == [203, 50, 50]
    fit, held = iterative_holdout(Y, 31, seed=0)
    assert len(held) == 31 and sorted(np.concatenate([fit, held]).tolist()) == list(range(303))
    folds = iterative_folds(np.zeros((11, 3)), 3, seed=0)  # no label at all: a plain random split
    assert [len(h) for _, h in folds] == [4, 4, 3]


def test_sizes_must_cover_the_rows():
    with pytest.raises(ValueError, match="do not add up"):
        iterative_assignment(np.zeros((10, 2)), [5, 4], 0)


def _reference_assignment(Y: np.ndarray, sizes: list[int], seed: int) -> np.ndarray:
    """The row-at-a-time loop iterative_assignment replaced (featx 2026-12-02), frozen: splits
    and folds are cache keys, so the fast code must give the very same parts."""
    Y = np.asarray(Y).reshape(len(Y), -1) != 0
    n, n_labels = Y.shape
    k = len(sizes)
    rng = np.random.default_rng(seed)
    share = np.asarray(sizes, dtype=np.float64) / max(n, 1)
    counts = Y.sum(axis=0)
    wanted = (counts[:, None] * share[None, :]).tolist()
    room = list(sizes)
    tie = rng.random((n, k)).tolist()
    labels_of = [np.flatnonzero(row).tolist() for row in Y]
    rows_of = [rng.permutation(np.flatnonzero(Y[:, l])).tolist() for l in range(n_labels)]
    left = counts.astype(np.int64).tolist()
    label_tie = rng.random(n_labels).tolist()
    part = np.full(n, -1, dtype=np.int64)
    while True:
        pending = [l for l in range(n_labels) if left[l] > 0]
        if not pending:
            break
        label = min(pending, key=lambda l: (left[l], label_tie[l]))
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
    free = rng.permutation(np.flatnonzero(part < 0))
    part[free] = np.repeat(np.arange(k), room)
    return part


def _label_matrices(rng: np.random.Generator):
    """Label matrices of every shape the fast code special-cases: one row, one label, a hundred
    labels, rows without labels, no label at all, dense rows (a part's want goes below zero,
    where subtracting one is inexact), long tails (labels of one or two rows)."""
    yield np.zeros((7, 3), dtype=np.uint8)
    yield np.ones((1, 1), dtype=np.uint8)
    yield np.zeros((5, 0), dtype=np.uint8)
    yield rng.random(40) < 0.5  # one label, as a vector
    for n in (2, 9, 60, 500, 2000):
        for n_labels in (1, 4, 100):
            yield rng.random((n, n_labels)) < 0.5  # dense
            long_tail_rows = rng.random((n, n_labels)) < 0.4 / np.arange(1, n_labels + 1) ** 1.2
            long_tail_rows[rng.random(n) < 0.2] = False  # a fifth of the rows without a label
            yield long_tail_rows.astype(np.uint8)


def _part_sizes(rng: np.random.Generator, n: int):
    """Equal folds (ties between parts on want and room), a train/dev/test split, uneven and
    empty parts."""
    for k in (2, 3, 5):
        yield [n // k + (j < n % k) for j in range(k)]
    yield proportional_sizes(n, (0.1, 0.1))
    cuts = np.sort(rng.integers(0, n + 1, 4))
    yield np.diff(np.concatenate([[0], cuts, [n]])).tolist()  # five uneven parts, some maybe empty
    yield [n, 0]


def test_the_fast_assignment_gives_the_parts_of_the_row_at_a_time_loop():
    rng = np.random.default_rng(0)
    checked = 0
    for Y in _label_matrices(rng):
        for sizes in _part_sizes(rng, len(Y)):
            for seed in (0, 1) if len(Y) <= 500 else (0,):
                expected = _reference_assignment(Y, sizes, seed)
                assert np.array_equal(iterative_assignment(Y, sizes, seed), expected), \
                    (Y.shape, sizes, seed)
                checked += 1
    assert checked > 200


def test_no_rows_no_parts():
    assert iterative_assignment(np.zeros((0, 3)), [0, 0, 0], 0).shape == (0,)


def test_countdown_rounds_as_subtracting_one_at_a_time():
    from featx.stats.stratify import _countdown

    for x in (0.3 * 7, 0.1 * 3, 1 / 3, 12.7, -0.45):  # below one, x - t may differ in the last bit
        steps, value = [], x
        for _ in range(30):
            steps.append(value)
            value -= 1
        assert _countdown(x, 4, 30).tolist() == steps[4:]
        assert _countdown(x, 5, 5).tolist() == []
