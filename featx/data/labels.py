"""Labels as read -> the task, the label names and each split's encoded labels. No torch.

The reader (featx.data.rows) keeps a label as the code of its distinct raw value, or, for a
regression or several label columns, as numbers. Every rule (featx.data.rules) is asked once per
distinct value, not once per row; a value it refuses is named by the first row that holds it.

    binary / multiclass   (n,) int64 class indices, the names sorted naturally
    multilabel            (n, n_labels) uint8, the names those of train (and of dev or test,
                          kept: the models predict them absent) or data.label_names
    regression            (n, n_targets) float64 on the original scale
"""
from __future__ import annotations

import itertools
import logging
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from featx.data import rules
from featx.files import read_bytes
from featx.errors import FeatxError, shown
from featx.tasks import TASKS

log = logging.getLogger("featx")

# Integer labels with at most this many distinct values are inferred as classes, not targets.
MAX_INFERRED_CLASSES = 20
# Distinct values that are not numbers in a column of numbers: a missing-value marker or two
# ("NA", "nan", "?"), not a set of class names.
FEW_NAMES = 2
INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")  # an integer as class_key writes one ("007" is a code)


@dataclass(frozen=True)
class Labels:
    """Every row's label as read: `codes` into `values` (distinct raw values), or `targets`."""
    columns: tuple[str, ...]
    codes: np.ndarray | None
    values: list
    targets: np.ndarray | None
    locate: Callable
    """Row positions -> their "file, row N"."""
    raw: Callable
    """(row position, column) -> the raw value as the file holds it (read again: errors only)."""
    label_sep: str | None = None
    named: int = 0
    zero_one: bool = False
    """Targets mode: whether every value is a plain 0 or 1 (several columns: multilabel)."""

    def distinct(self, rows: np.ndarray | None = None) -> tuple[list[int], list]:
        """(codes, their values) of the distinct labels of `rows` (None: all), first row first."""
        codes = self.codes if rows is None else self.codes[rows]
        if not len(codes):
            return [], []
        if len(self.values) <= 1 << 16:  # numpy sorts 16-bit keys stably by radix: 6x int64's speed
            codes = codes.astype(np.uint16)
        found, first = np.unique(codes, return_index=True)
        order = found[np.argsort(first, kind="stable")].tolist()
        return order, [self.values[c] for c in order]

    def first_row(self, codes, rows: np.ndarray | None = None) -> int:
        """The position of the first of `rows` (None: all) whose code is in `codes`."""
        positions = np.arange(len(self.codes)) if rows is None else np.asarray(rows)
        hit = np.isin(self.codes[positions], list(codes))
        return int(positions[np.argmax(hit)])


def with_regex(labels: Labels, pattern: str) -> Labels:
    """data.label_regex's group of each distinct raw label (a blank field of a data.label_sep
    column is a row with no labels: nothing to match)."""
    column = labels.columns[0]

    def group(value, where):
        if labels.label_sep is not None and isinstance(value, str) and not value.strip():
            return ""
        return rules.regex_group(pattern, value, where, column)
    judged = _judged(labels, None, group)
    return replace(labels, values=[judged[c] for c in range(len(labels.values))])


# ---------------------------------------------------------------------------------------------
# The task


def infer_task(labels: Labels, rows: np.ndarray | None = None, *, warn: bool = True) -> str:
    """binary / multiclass for strings or few integers, regression for other numbers, multilabel
    for lists or a label separator; several label columns: 0/1 -> multilabel, else regression;
    with data.label_names one label column is classes, whatever its values. `rows`: whose labels
    decide (None: all)."""
    column = labels.columns[0]
    if labels.codes is None:  # read as numbers: several columns, or more distinct than classes
        if len(labels.columns) > 1:
            return "multilabel" if labels.zero_one else "regression"
        return "regression"
    codes, values = labels.distinct(rows)
    if labels.label_sep is not None or any(isinstance(v, list) for v in values):
        fractions = [x for v in values if isinstance(v, list) for x in v if isinstance(x, float) and not x.is_integer()]
        if fractions:
            raise FeatxError(f"column {shown(column)} holds lists of numbers such as {shown(fractions[0])}, and "
                             "data.task is not set: lists are read as sets of labels (multilabel). For "
                             "several regression targets give one column per target (data.label = "
                             "[\"a\", \"b\"]); for label ids set data.task = \"multilabel\"")
        return "multilabel"
    numbers = [rules.as_number(v, plain=True) for v in values]
    if all(n is not None for n in numbers) and not labels.named:
        distinct = set(numbers)
        if all(n.is_integer() for n in distinct):
            if len(distinct) <= MAX_INFERRED_CLASSES:
                # Counted as classes, not numbers: JSON's true and 1 are one number, two classes.
                return "binary" if len({rules.class_key(v) for v in values}) <= 2 else "multiclass"
            if warn:
                log.warning("column %r holds %d distinct integers: read as a regression target (more than "
                            "%d); if they are classes, set data.task = \"multiclass\"", column,
                            len(distinct), MAX_INFERRED_CLASSES)
        return "regression"
    if labels.named:  # three names of which train has two: multiclass, not binary
        return "binary" if labels.named == 2 else "multiclass"
    _numbers_among_names(labels, codes, values, numbers, rows)
    return "binary" if len({rules.class_key(v) for v in values}) <= 2 else "multiclass"


def _numbers_among_names(labels: Labels, codes, values, numbers, rows) -> None:
    """Numbers with a fraction beside at most FEW_NAMES other values ("NA" where R's write.csv
    leaves a missing score) are refused with the fix: read as classes, every distinct number
    would be a class. Integers beside a name or two are classes (CLINC's intents and "oos")."""
    distinct = {n for n in numbers if n is not None}
    names = {rules.class_key(v) for v, n in zip(values, numbers) if n is None}
    if not names or len(names) > FEW_NAMES or len(distinct) < 3 or all(n.is_integer() for n in distinct):
        return
    k = next(i for i, n in enumerate(numbers) if n is None)
    at = labels.locate([labels.first_row([codes[k]], rows)])[0]
    raise FeatxError(
        f"column {shown(labels.columns[0])} holds {len(distinct)} distinct numbers, such as {shown(min(distinct))}, "
        f"and {len(names)} other value(s), such as {shown(values[k])} ({at}): read as they are, every distinct "
        "number would be a class. For a regression target set data.task = \"regression\" (each row whose "
        "target is not a number is then named: fill it in or remove the row); if these are class names, set "
        "data.task = \"multiclass\"")


# ---------------------------------------------------------------------------------------------
# Names and encoding


def read_label_names(spec) -> tuple[str, ...] | None:
    """data.label_names: a tuple of names, or a file of one name a line (blank lines skipped, a
    byte-order mark dropped). A name given twice or a blank name is an error: the position and
    the name of one class would be two classes of one name."""
    if spec is None:
        return None
    where = "data.label_names"
    if isinstance(spec, tuple):
        names = spec
    else:
        path = Path(spec)
        if not path.exists():
            raise FeatxError(f"data.label_names file {spec!r} not found; give a list or a file with one "
                             "name per line")
        where = f"data.label_names file {spec!r}"
        try:  # a regular file of bounded size: a FIFO or a device is refused, never read
            text = read_bytes(path, "the data.label_names file (one name per line)").decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise FeatxError(f"{where} is not UTF-8 (byte {exc.start}: {exc.reason}); save it as "
                             "UTF-8") from None
        names = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not names:
        raise FeatxError(f"{where} holds no name; give one name per class or label (or leave "
                         "data.label_names unset)")
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name.strip():
            raise FeatxError(f"{where}: name {i} is {shown(name)}, which is no name; give every class "
                             "or label a name")
        key = rules.class_key(name)  # as a label is read: "neg " names "neg", "1.0" names "1"
        if first.setdefault(key, i) != i:
            raise FeatxError(f"{where} names {shown(key)} twice (positions {first[key]} and {i}); "
                             "give each class or label one name")
    return tuple(first)


def index_of(task: str, names: tuple[str, ...], *, positions: bool) -> dict[str, int]:
    """Each name's index; with data.label_names (`positions`) a label may also be written as its
    position in the names, unless a name is another name's position (then by name only)."""
    index = {n: i for i, n in enumerate(names)}
    collide = any(INTEGER.fullmatch(n) and int(n) != i and 0 <= int(n) < len(names) for i, n in enumerate(names))
    if positions and not TASKS[task].regression and not collide:
        index = {str(i): i for i in range(len(names))} | index
    return index


def encode(task: str, labels: Labels, splits: dict[str, np.ndarray], names: tuple[str, ...] | None = None,
           *, positions: bool | None = None, fit: bool = True,
           first: int | None = None) -> tuple[tuple[str, ...], dict[str, np.ndarray]]:
    """(names, per split its rows' encoded labels). `splits`: each split's row positions, train
    first. `names`: data.label_names, else train's are fitted; `positions`: a label may be
    written as its position in them (default: when names are given). Only each split's `first`
    rows are encoded (data.max_rows); the names are every training row's."""
    given = names is not None if positions is None else positions
    if TASKS[task].regression:
        return labels.columns, {s: _targets(labels, rows[:first]) for s, rows in splits.items()}
    if TASKS[task].thresholded:
        return _label_sets(labels, splits, names, given, first)
    return _classes(task, labels, splits, names, given, first, fit)


def _check_classes(task: str, names: tuple[str, ...]) -> None:
    if TASKS[task].classes and len(names) < 2:
        raise FeatxError(f"the training split has a single class ({', '.join(map(repr, names))}); "
                         "a classifier needs at least two: fix the labels or the split")
    if TASKS[task].n_classes not in (None, len(names)):
        raise FeatxError(f"data.task is {task} but the training labels have {len(names)} "
                         f"classes: {list(names)[:10]}; use multiclass or fix the labels")


REFUSED = object()


def _judged(labels: Labels, rows: np.ndarray | None, rule, known=None, split: str = "", names=(),
            given: bool = False) -> dict[int, object]:
    """{code: rule(value, "")} of the distinct values of `rows` (None: all), each value judged
    once. The first of `rows` whose value the rule refuses, or whose result `known` does not
    know, is named (a reader of whole rows meets them in this order)."""
    judged = {}
    for c in labels.distinct(rows)[0]:
        try:
            judged[c] = rule(labels.values[c], "")
        except FeatxError:
            judged[c] = REFUSED
    bad = {c for c, v in judged.items() if v is REFUSED or known is not None and not known(v)}
    if bad:
        row = labels.first_row(bad, rows)
        c = int(labels.codes[row])
        if judged[c] is REFUSED:
            rule(labels.values[c], labels.locate([row])[0])
        missing = judged[c] if isinstance(judged[c], str) else next(x for x in judged[c] if not known([x]))
        _unknown(labels, missing, row, split, names, given)
    return judged


def _classes(task, labels: Labels, splits, fixed, given: bool, first, fit: bool = True):
    column = labels.columns[0]
    rule = lambda v, w: rules.class_name(v, w, column)  # noqa: E731
    if fixed is None:
        train = _judged(labels, splits["train"], rule)
        names = tuple(sorted(set(train.values()), key=rules.natural_key))
    else:
        names = fixed
    if fit:
        _check_classes(task, names)
    index = index_of(task, names, positions=given)
    out = {}
    for split, rows in splits.items():
        rows = rows[:first]
        judged = _judged(labels, rows, rule, lambda v: v in index, split, names, given)
        table = np.full(len(labels.values), -1, np.int64)
        for c, key in judged.items():
            table[c] = index[key]
        out[split] = table[labels.codes[rows]]
    return names, out


def _unknown(labels: Labels, label: str, row: int, split: str, names, given: bool) -> None:
    where = f"{labels.locate([row])[0]}, column {shown(labels.columns[0])}"
    if given:
        raise FeatxError(f"{where}: label {shown(label)} in the {split} split is none of data.label_names, by name "
                         f"or by position 0..{len(names) - 1} (the names: {', '.join(list(names)[:20])}); add it to "
                         "the names, or fix the row")
    raise FeatxError(f"{where}: label {shown(label)} in the {split} split never appears in train (the labels the "
                     f"task knows: {', '.join(list(names)[:20])}); remove the row or add training examples of that label")


def _set_rule(labels: Labels):
    """A value's set of labels (rules.label_set)."""
    return lambda v, w: rules.label_set(v, labels.columns, labels.label_sep, w)


def _zero_one(labels: Labels, rows: np.ndarray) -> np.ndarray:
    """Several 0/1 label columns as (n, L) uint8; a value other than 0 or 1 named by its row."""
    values = labels.targets[rows]
    bad = ~np.isin(values, (0.0, 1.0))
    if bad.any():
        i, j = np.argwhere(bad)[0]
        row, column = int(rows[i]), labels.columns[j]
        raw = labels.raw(row, column)
        rules.label_set([raw if c == column else 0 for c in labels.columns], labels.columns, None,
                        labels.locate([row])[0])
    return values.astype(np.uint8)


def _label_sets(labels: Labels, splits, fixed, given: bool, first):
    if len(labels.columns) > 1:
        return labels.columns, {s: _zero_one(labels, rows[:first]) for s, rows in splits.items()}
    if fixed is None:
        sets = {s: _judged(labels, rows, _set_rule(labels)) for s, rows in splits.items()}
        seen = {x for labels_of in sets["train"].values() for x in labels_of}
        elsewhere = {x for s, found in sets.items() if s != "train" for labels_of in found.values() for x in labels_of} - seen
        if elsewhere:
            log.info("%d label(s) of the dev or test rows never appear in train (%s): kept as "
                     "labels the models predict absent", len(elsewhere),
                     ", ".join(sorted(elsewhere, key=rules.natural_key)[:10]))
        names = tuple(sorted(seen | elsewhere, key=rules.natural_key))
    else:
        names = fixed
    if not names:
        raise FeatxError("the multilabel data has no label at all (every row's label set is "
                         "empty); fix the label column or data.label_sep")
    index = index_of("multilabel", names, positions=given)
    rule, out = _set_rule(labels), {}
    for split, rows in splits.items():
        rows = rows[:first]
        judged = _judged(labels, rows, rule, lambda v: all(x in index for x in v), split, names, given)
        out[split] = set_matrix({c: sorted({index[x] for x in s}) for c, s in judged.items()},
                                len(names), labels.codes[rows])
    return names, out


def set_matrix(columns: dict[int, list[int]], width: int, codes: np.ndarray) -> np.ndarray:
    """(len(codes), width) uint8: row i holds 1 in the columns of its code's set, scattered row
    by row (there may be as many distinct sets as rows)."""
    size = np.zeros(max(columns, default=-1) + 1, np.int64)
    for c, cols in columns.items():
        size[c] = len(cols)
    flat_of = {c: cols for c, cols in columns.items()}
    starts = np.concatenate([[0], np.cumsum(size)])[:-1]
    flat = np.fromiter(itertools.chain.from_iterable(flat_of.get(c, []) for c in range(len(size))), np.int64,
                       count=int(size.sum()))
    per_row = size[codes] if len(codes) else np.zeros(0, np.int64)
    within = np.arange(int(per_row.sum())) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    matrix = np.zeros((len(codes), width), np.uint8)
    matrix[np.repeat(np.arange(len(codes)), per_row), flat[np.repeat(starts[codes], per_row) + within]] = 1
    return matrix


def _targets(labels: Labels, rows: np.ndarray) -> np.ndarray:
    """(n, T) float64 targets; the first that is not a finite number in range named by its row."""
    if labels.targets is not None:
        values = labels.targets[rows]
    else:
        numbers = np.array([rules.as_target(v) for v in labels.values], np.float64).reshape(-1, 1)
        values = numbers[labels.codes[rows]] if len(labels.values) else np.zeros((len(rows), 1))
    size = np.abs(values)
    bad = ~np.isfinite(values) | (size > rules.MAX_TARGET) | ((size < rules.MIN_TARGET) & (size > 0))
    if bad.any():
        i, j = np.argwhere(bad)[0]
        row, column = int(rows[i]), labels.columns[j]
        raw = labels.raw(row, column) if labels.targets is not None else labels.values[int(labels.codes[row])]
        where = labels.locate([row])[0]
        if isinstance(raw, list) and len(raw) != 1:
            raise FeatxError(
                f"{where}, column {shown(column)}: {len(raw)} regression targets in one field, the task has "
                f"{len(labels.columns)} ({', '.join(labels.columns)}); give one column per target "
                "(data.label = [\"a\", \"b\"])")
        rules.target(raw[0] if isinstance(raw, list) else raw, where, column)
    return values


# ---------------------------------------------------------------------------------------------
# What featx's own split of one file stratifies by


def strata(task: str, labels: Labels) -> np.ndarray:
    """Per row: its class key (binary, multiclass) or the decile of its first target (regression)."""
    if TASKS[task].regression:
        if labels.targets is not None:
            first = labels.targets[:, 0]
        else:
            numbers = np.array([rules.as_target(rules.as_list(v)[0]) if rules.as_list(v) else np.nan
                                for v in labels.values])
            first = numbers[labels.codes] if len(labels.values) else np.zeros(0)
        values = np.where(np.isfinite(first), first, 0.0)
        return np.searchsorted(np.quantile(values, np.linspace(0, 1, 11)[1:-1]), values)
    keys = [rules.class_key(v) for v in labels.values]
    rank = {k: i for i, k in enumerate(sorted(set(keys)))}
    return np.array([rank[k] for k in keys], np.int64)[labels.codes]


def label_matrix(labels: Labels) -> np.ndarray:
    """(n, L) 0/1 label sets of every row, the labels in sorted order (featx's own split of a
    multilabel file deals them out)."""
    if len(labels.columns) > 1:
        matrix = _zero_one(labels, np.arange(len(labels.targets)))
        used = sorted(np.flatnonzero(matrix.any(axis=0)).tolist(), key=lambda j: labels.columns[j])
        return matrix[:, used]
    sets = _judged(labels, None, _set_rule(labels))
    names = {n: j for j, n in enumerate(sorted({x for s in sets.values() for x in s}))}
    return set_matrix({c: sorted({names[x] for x in s}) for c, s in sets.items()}, len(names), labels.codes)
