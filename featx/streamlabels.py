"""Pass 1's labels (featx.stream: codes of the distinct labels, or numbers) -> the task, the
label names and each split's encoded labels, exactly as featx.labels gives them read whole
(`infer_task`, `LabelEncoder`, featx.splits' label matrix). No torch.

    extracted        data.label_regex applied to the distinct labels: its group, each one's class
    task_of          the task infer_task gives some records' labels
    class_labels     binary / multiclass: class names, (n,) int64 class indices per split
    label_sets       multilabel: label names, (n, n_labels) uint8 per split
    regression_labels  (n, n_targets) float64 per split
    split_matrix     the label matrix one file's iterative stratification deals with

`parts` are per split (Parsed, its records' split codes or None, its code), `mask` per split
which records of its file are its rows (None: all). Anything featx.labels would report, or
that pass 1 kept too little of to tell, raises stream.Fallback: the whole-file reader names it.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
import math

import numpy as np

from featx import stream, streamformats
from featx.errors import FeatxError
from featx.labels import (MAX_INFERRED_CLASSES, MAX_TARGET, Columns, Distinct, LabelEncoder, as_number, class_key,
                          infer_task, label_set, natural_key)
from featx.tasks import TASKS

log = logging.getLogger("featx")


def extracted(p: stream.Parsed, columns: Columns) -> stream.Parsed:
    """The pass 1 whose distinct labels are data.label_regex's group of each, as
    featx.labels (`Columns._label`) reads a row's: one match per distinct raw label, not per row
    (two raw labels of one group keep two codes of one value, which every reader of them
    allows). Fallback on a label it refuses (missing, not matched, a match that runs too long)
    or whose group matched nothing: the whole-file reader names the row."""
    if p.codes is None:
        raise stream.Fallback("data.label_regex over labels not coded by pass 1")
    try:
        labels = [columns._label(v, "", columns.labels[0]) for v in p.labels]
    except FeatxError:
        raise stream.Fallback("a label data.label_regex refuses") from None  # named with its row
    if any(label is None for label in labels):
        raise stream.Fallback("a data.label_regex group that matched nothing")
    return dataclasses.replace(p, labels=labels)


def class_labels(task: str, parts: dict, mask: dict, fixed: tuple[str, ...] | None = None,
                 first: int | None = None) -> tuple[tuple[str, ...], dict[str, np.ndarray]]:
    """(class names, per split its rows' class indices (n,) int64) of labels coded by pass 1.
    `fixed`: data.label_names, the names instead of train's (`index_of`). `first`: only each
    split's first rows are encoded (data.max_rows), the names still every training row's: a
    label past them that train lacks is never looked up, as read whole."""
    if any(p.codes is None for p, _, _ in parts.values()):
        raise stream.Fallback("classes among more distinct labels than pass 1 codes")
    for p, _, _ in parts.values():
        streamformats.check_labels(p.labels)  # JSON's, Parquet's and Arrow's labels may be anything
    # Per split, its rows' label codes: 2 bytes a row, with the split codes all that is held per row.
    in_split = {split: p.codes if mask[split] is None else p.codes[mask[split]] for split, (p, _, _) in parts.items()}
    train = parts["train"][0]
    names = fixed if fixed is not None else \
        tuple(sorted({class_key(train.labels[c]) for c in _present(in_split["train"])}, key=natural_key))
    if len(names) < 2 or TASKS[task].n_classes not in (None, len(names)):
        raise stream.Fallback("too few or too many classes")  # the whole-file reader says which
    index = index_of(task, names, fixed is not None)
    labels = {}
    for split, (p, _, _) in parts.items():
        labels[split] = np.array([index.get(class_key(v), -1) for v in p.labels], dtype=np.int64)[in_split[split][:first]]
        if (labels[split] < 0).any():
            raise stream.Fallback("a label train (or data.label_names) lacks")  # named with its row
    return names, labels


def index_of(task: str, names: tuple[str, ...], positions: bool) -> dict[str, int]:
    """Each name's index, as LabelEncoder.from_names gives it: with data.label_names
    (`positions`), a label may also be written as its position in the names."""
    return LabelEncoder.from_names(task, names, None, positions=positions).index


def label_sets(parts: dict, mask: dict, columns: Columns, fixed: tuple[str, ...] | None = None,
               first: int | None = None) -> tuple[tuple[str, ...], dict[str, np.ndarray]]:
    """(label names, per split its rows' 0/1 label sets (n, n_labels) uint8), as
    LabelEncoder.fit and encode give them: one 0/1 column per label column, or the labels of
    lists or `label_sep` fields, train's and (kept, logged) those only dev or test have; or
    `fixed`, data.label_names (not for label columns, which name the labels). `first`: only
    each split's first rows are encoded (data.max_rows), the names still every row's."""
    files = {id(p): p for p, _, _ in parts.values()}  # one file's pass 1 serves all its splits: once each
    if len(columns.labels) > 1:
        matrices = {k: _zero_one(p) for k, p in files.items()}
        return columns.labels, {split: (matrices[id(p)] if mask[split] is None else matrices[id(p)][mask[split]])[:first]
                                for split, (p, _, _) in parts.items()}
    sets = {k: _sets_of(p, columns) for k, p in files.items()}
    present = {split: _present(p.codes if mask[split] is None else p.codes[mask[split]])
               for split, (p, _, _) in parts.items()}
    if fixed is None:
        train = parts["train"][0]
        seen = {x for c in present["train"] for x in sets[id(train)][c]}
        elsewhere = {x for split, (p, _, _) in parts.items() if split != "train"
                     for c in present[split] for x in sets[id(p)][c]} - seen
        if elsewhere:
            log.info("%d label(s) of the dev or test rows never appear in train (%s): kept as "
                     "labels the models predict absent", len(elsewhere),
                     ", ".join(sorted(elsewhere, key=natural_key)[:10]))
    names = fixed if fixed is not None else tuple(sorted(seen | elsewhere, key=natural_key))
    if not names:
        raise stream.Fallback("no label at all")  # the whole-file reader says so
    index = index_of("multilabel", names, fixed is not None)
    labels, columns_of = {}, {k: _set_columns(s, index) for k, s in sets.items()}
    for split, (p, _, _) in parts.items():
        codes = (p.codes if mask[split] is None else p.codes[mask[split]])[:first]
        if any(x not in index for c in _present(codes) for x in sets[id(p)][c]):
            raise stream.Fallback("a label data.label_names lacks")  # named with its row
        labels[split] = _set_matrix(columns_of[id(p)], len(names), codes)  # (n, n_labels): each row its value's set
    return names, labels


def _sets_of(p: stream.Parsed, columns: Columns) -> list[list[str]]:
    """Per distinct label of a pass 1, its labels as featx.labels reads a row's (a blank
    `label_sep` field: none); Fallback on any it reports."""
    if p.codes is None:
        raise stream.Fallback("label sets among more distinct values than pass 1 codes")
    try:
        return [label_set(columns._label(v, "", columns.labels[0]), columns, "") for v in p.labels]
    except FeatxError:
        raise stream.Fallback("a label featx.labels refuses") from None  # named with its row


def _set_columns(sets: list[list[str]], index: dict) -> tuple[np.ndarray, np.ndarray]:
    """(sizes (len(sets),), flat columns) of each set's labels: set j's columns (`index`: a
    label's; with data.label_names a name and its position are two keys of one) are
    flat[sum(sizes[:j]) :][: sizes[j]]."""
    columns = [sorted({index[x] for x in labels if x in index}) for labels in sets]
    sizes = np.fromiter(map(len, columns), dtype=np.int64, count=len(columns))
    return sizes, np.fromiter(itertools.chain.from_iterable(columns), dtype=np.int64, count=int(sizes.sum()))


def _set_matrix(set_columns: tuple[np.ndarray, np.ndarray], n_labels: int, codes: np.ndarray) -> np.ndarray:
    """(len(codes), n_labels) uint8: row i holds 1 in the columns of set codes[i]
    (`_set_columns`). Scattered row by row, not through a (sets, n_labels) matrix: label sets may
    be as many distinct fields as there are rows."""
    sizes, flat = set_columns
    per_row = sizes[codes]  # (n,) labels of each row
    # Row i's columns are flat[starts[codes[i]]:][:per_row[i]], the rows' one after the other.
    within = np.arange(int(per_row.sum())) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    matrix = np.zeros((len(codes), n_labels), dtype=np.uint8)
    matrix[np.repeat(np.arange(len(codes)), per_row),
           flat[np.repeat((np.cumsum(sizes) - sizes)[codes], per_row) + within]] = 1
    return matrix


def _zero_one(p: stream.Parsed) -> np.ndarray:
    """The (n, n_labels) uint8 label sets of several label columns read as numbers; Fallback on
    a value other than 0 or 1 (featx.labels.label_set names it)."""
    if p.targets is None or not np.isin(p.targets, (0.0, 1.0)).all():
        raise stream.Fallback("a multilabel column's value other than 0 or 1")
    return p.targets.astype(np.uint8)


def split_matrix(one: stream.Parsed, columns: Columns) -> np.ndarray:
    """featx.splits._label_matrix of every record: its label sets, the labels any record has
    in sorted order (what the iterative stratification deals with)."""
    if len(columns.labels) > 1:
        matrix = _zero_one(one)
        used = sorted(np.flatnonzero(matrix.any(axis=0)).tolist(), key=lambda j: columns.labels[j])
        return matrix[:, used]
    sets = _sets_of(one, columns)
    names = sorted({x for labels in sets for x in labels})
    return _set_matrix(_set_columns(sets, {n: j for j, n in enumerate(names)}), len(names), one.codes)


def _present(codes: np.ndarray) -> np.ndarray:
    """The distinct codes among `codes` (small non-negative integers), in increasing order."""
    return np.flatnonzero(np.bincount(codes)) if len(codes) else np.zeros(0, np.int64)


def targets(p: stream.Parsed) -> np.ndarray:
    """(n, n_targets) float64 regression targets of a pass 1: read as numbers, or the numbers of
    its coded distinct labels (as featx.labels.as_number reads them); Fallback on any that is
    not a finite number."""
    if p.targets is not None:
        return p.targets
    numbers = [None if isinstance(v, (list, dict)) else as_number(v) for v in p.labels]
    if any(x is None or not math.isfinite(x) for x in numbers):
        raise stream.Fallback("a regression target that is not a finite number")  # named with its row
    return np.array(numbers, dtype=np.float64).reshape(-1, 1)[p.codes]


def task_of(p: stream.Parsed, mask, columns: Columns, *, warn: bool = True) -> str:
    """The task featx.labels.infer_task gives the labels of the records of `mask` (None: all),
    and its warning of many distinct integers read as a regression target, if `warn`."""
    if p.codes is not None:  # (every distinct label has a record)
        values = p.labels if mask is None else [p.labels[c] for c in _present(p.codes[mask])]
        try:
            return infer_task(Distinct(values), columns, warn=warn)
        except FeatxError:  # lists of fractions: the whole-file reader says what to set
            raise stream.Fallback("a task infer_task refuses") from None
    targets = p.targets if mask is None else p.targets[mask]  # plain numbers (stream.Wanted.plain)
    if len(columns.labels) > 1:
        return "multilabel" if np.isin(targets, (0.0, 1.0)).all() else "regression"
    if columns.named:  # classes (infer_task), among more distinct labels than pass 1 codes
        raise stream.Fallback("data.label_names over more distinct labels than pass 1 codes")
    distinct = np.unique(targets[:, 0])
    if len(distinct) <= MAX_INFERRED_CLASSES:
        return infer_task(Distinct(distinct.tolist()), columns)
    if warn and (distinct == np.floor(distinct)).all():
        log.warning("column %r holds %d distinct integers: read as a regression target (more than "
                    "%d); if they are classes, set data.task = \"multiclass\"", columns.labels[0], len(distinct),
                    MAX_INFERRED_CLASSES)
    return "regression"


def regression_labels(parts: dict, mask: dict) -> dict[str, np.ndarray]:
    """Per split, its rows' targets (n, n_targets) float64, as LabelEncoder.encode gives them."""
    found = {id(p): targets(p) for p, _, _ in parts.values()}  # one file's, once for its splits
    if any((np.abs(t) > MAX_TARGET).any() for t in found.values()):
        raise stream.Fallback("a regression target beyond the limit")  # named with its row
    return {split: found[id(p)] if mask[split] is None else found[id(p)][mask[split]]
            for split, (p, _, _) in parts.items()}
