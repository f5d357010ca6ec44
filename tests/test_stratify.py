"""Iterative stratification: exact part sizes, rare labels spread over parts, seeded."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.model_selection import KFold

from featx.stratify import iterative_assignment, iterative_folds, iterative_holdout, proportional_sizes


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
