"""A table's rows -> validated ids, texts (pairs), raw labels and kept columns (`Columns`,
`Rows`), and labels -> a task and its encoding (`infer_task`, `LabelEncoder`). No torch.

It owns what a row's values mean and every check on them (an empty text, a missing id, a label
train never saw), named by file, row and column; reading the files is featx.readers', cutting
rows into splits featx.splits'.
"""
from __future__ import annotations

import logging
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featx.config import DataConfig
from featx.errors import FeatxError, shown
from featx.readers import PLAIN_NUMBER, Table, class_key, is_missing
from featx.tasks import TASKS

log = logging.getLogger("featx")

# Values a split column may hold, mapped to featx's split names.
SPLIT_ALIASES = {"train": "train", "dev": "dev", "validation": "dev", "val": "dev", "test": "test"}
# Integer labels with at most this many distinct values are inferred as classes, not targets.
MAX_INFERRED_CLASSES = 20


@dataclass
class Distinct:
    """What infer_task reads of the rows: their label values (here the distinct ones, which
    decide the task as all of them would)."""
    labels: list


@dataclass
class Rows:
    """Validated rows of one table, before label encoding (labels still raw values)."""
    ids: list[str]
    texts: list[str]
    pairs: list[str] | None
    labels: list
    kept: dict[str, list[str]]
    where: list[str]
    splits: list[str | None]

    def take(self, index) -> "Rows":
        pick = lambda xs: [xs[i] for i in index]  # noqa: E731
        return Rows(pick(self.ids), pick(self.texts), None if self.pairs is None else pick(self.pairs),
                    pick(self.labels), {k: pick(v) for k, v in self.kept.items()},
                    pick(self.where), pick(self.splits))

    def head(self, n: int) -> "Rows":
        return self.take(range(min(n, len(self.ids))))


@dataclass(frozen=True)
class Columns:
    text: str
    pair: str | None
    labels: tuple[str, ...]
    id: str | None
    split: str | None
    keep: tuple[str, ...]
    label_sep: str | None
    label_regex: str | None
    named: int = 0
    """How many names data.label_names gives (0: unset): the labels are classes (or label sets)
    it names, never regression targets, however many distinct integers train has, and as many
    classes as names, however few train has (`infer_task`)."""

    @classmethod
    def from_config(cls, cfg: DataConfig, keep, id_column: str | None) -> "Columns":
        label = cfg.label if cfg.label is not None else "label"
        labels = (label,) if isinstance(label, str) else tuple(label)
        # A column kept twice is kept once: rows.kept is keyed by name, and each row appended
        # its value to the one list twice (a split's kept values were then other rows').
        return cls(cfg.text or "text", cfg.text_pair, labels, id_column, cfg.split_column,
                   tuple(dict.fromkeys(keep)), cfg.label_sep, cfg.label_regex,
                   len(read_label_names(cfg.label_names) or ()))

    def empty_rows(self, table: Table) -> list[int]:
        """Rows whose text (or second text) is empty or missing: listed together in one error, or
        dropped under data.drop_empty."""
        for column, role in ((self.text, "text"), (self.pair, "text_pair")):
            if column is not None:
                table.require(column, role)
        return [i for i, row in enumerate(table.rows)
                if any(is_missing(row.get(c)) for c in (self.text, self.pair) if c is not None)]

    def extract(self, table: Table, skip: set[int] = frozenset()) -> Rows:
        roles = [(self.text, "text"), (self.pair, "text_pair"), (self.id, "id"),
                 (self.split, "split_column")]
        roles += [(c, "label") for c in self.labels] + [(c, "keep") for c in self.keep]
        for column, role in roles:
            if column is not None:
                table.require(column, role)
        rows = Rows([], [], [] if self.pair else None, [], {k: [] for k in self.keep}, [], [])
        for i, row in enumerate(table.rows):
            if i in skip:
                continue
            where = table.where(i)
            rows.where.append(where)
            rows.texts.append(_text(row.get(self.text), where, self.text))
            if self.pair:
                rows.pairs.append(_text(row.get(self.pair), where, self.pair))
            rows.ids.append(None if self.id is None else _id(row.get(self.id), where, self.id))
            labels = [self._label(row.get(c), where, c) for c in self.labels]
            rows.labels.append(labels[0] if len(labels) == 1 else labels)
            for k in self.keep:
                rows.kept[k].append("" if row.get(k) is None else _storable(str(row.get(k)), where, k, "value"))
            rows.splits.append(None if self.split is None else
                               _split_value(row.get(self.split), where, self.split))
        return rows

    def _label(self, value, where: str, column: str):
        if self.label_sep is not None and isinstance(value, str) and not value.strip():
            return ""  # a separated multilabel field that is empty: a row with no labels
        value = _present(value, where, column)
        if self.label_regex is None:
            return value
        # A list's items are matched one by one: matched against the list's repr, a row of two
        # labels became one class (the first match). A data.label_sep field is matched whole, its
        # group then split (docs/pipelines.md: "T:a|b" -> a, b).
        if isinstance(value, list):
            return [self._group(v, where, column) if isinstance(v, (str, int, float)) and not is_missing(v)
                    else v for v in value]  # a null or nested item: label_set names it
        return self._group(value, where, column)

    def _group(self, value, where: str, column: str) -> str:
        match = _search(self.label_regex, str(value), where, column)
        if match is None:
            raise FeatxError(f"{where}, column {shown(column)}: label {shown(value)} does not match "
                             f"data.label_regex {shown(self.label_regex)}")
        if match.group(1) is None:  # an optional group left out: not a class named "None"
            raise FeatxError(f"{where}, column {shown(column)}: label {shown(value)} matches "
                             f"data.label_regex {shown(self.label_regex)} but its group matched nothing "
                             "(an optional group); make the group match every label")
        return match.group(1)


# A label_regex may backtrack catastrophically ("(a|aa)+$"): the `regex` module can stop a match
# after this long, where `re` would hang featx with no message.
REGEX_SECONDS = 1.0


def _search(pattern: str, text: str, where: str, column: str):
    import regex

    try:
        return regex.search(pattern, text, timeout=REGEX_SECONDS)
    except TimeoutError:
        raise FeatxError(f"{where}, column {shown(column)}: data.label_regex {shown(pattern)} took more "
                         f"than {REGEX_SECONDS:g} s on one label ({len(text):,} characters): it "
                         "backtracks catastrophically (nested or overlapping repeats such as (a|aa)+); "
                         "simplify the pattern") from None


def _storable(value: str, where: str, column: str, what: str) -> str:
    """A string HDF5 and the fingerprint can hold: no NUL byte, no lone surrogate."""
    if "\x00" in value:
        raise FeatxError(f"{where}, column {shown(column)}: the {what} holds a NUL byte (\\x00), which no "
                         "text should; remove it from the file")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise FeatxError(f"{where}, column {shown(column)}: the {what} holds a lone surrogate (an "
                         "unpaired \\ud800-\\udfff escape), which is not text; fix the row") from None
    return value


def _text(value, where: str, column: str) -> str:
    if value is None or not isinstance(value, str) or not value.strip():
        state = "missing" if value is None else ("not a string" if not isinstance(value, str) else "empty")
        raise FeatxError(f"{where}, column {shown(column)}: text is {state} (value {shown(value)}); remove the "
                         "row or fill in its text")
    return _storable(value, where, column, "text")


# Rows an empty-text error names; the total is always given.
EMPTY_SHOWN = 20


def empty_message(tables: dict, empty: dict[str | None, list[int]], columns: Columns) -> str:
    """Every row with an empty or missing text, in one message: the first EMPTY_SHOWN by file
    and line, the total, and both fixes."""
    named = [c for c in (columns.text, columns.pair) if c is not None]
    places: dict[str, list[str]] = {}
    total = 0
    for split, rows in empty.items():
        table = tables[split]
        for i in rows:
            total += 1
            if total > EMPTY_SHOWN:
                continue
            row = table.rows[i]
            state = ", ".join(f"{'missing' if row.get(c) is None else 'empty'}"
                              + (f" {shown(c)}" if len(named) > 1 else "") for c in named
                              if is_missing(row.get(c)))
            places.setdefault(table.files[i] if table.files else table.path, []).append(
                f"{table.lines[i]} ({state})")
    listed = "; ".join(f"{path}, row{'s' if len(rows) > 1 else ''} {', '.join(rows)}" for path, rows in places.items())
    more = f" (the first {EMPTY_SHOWN} of {total:,})" if total > EMPTY_SHOWN else ""
    column = " or ".join(shown(c) for c in named)
    return (f"{total:,} row{'s' if total > 1 else ''} with no text (the text is empty or missing in column "
            f"{column}): {listed}{more}. Fill in or remove {'these rows' if total > 1 else 'the row'}, or set "
            "`drop_empty = true` in [data] (or data.drop_empty=true) to drop every such row; the cache "
            "then says how many rows were dropped per split")


def dropped_per_split(tables: dict, empty: dict[str | None, list[int]], columns: Columns) -> dict[str, int]:
    """How many rows data.drop_empty dropped, per split: a split file's rows under its split, a
    split column's rows under the split they name, one file featx splits itself under "all"."""
    counts: Counter = Counter()
    for split, rows in empty.items():
        for i in rows:
            if split is not None:
                counts[split] += 1
            elif columns.split is not None:
                counts[_split_value(tables[split].rows[i].get(columns.split), tables[split].where(i), columns.split)] += 1
            else:
                counts["all"] += 1
    return dict(counts)


def _id(value, where: str, column: str) -> str:
    if is_missing(value):
        raise FeatxError(f"{where}, column {shown(column)}: the id is missing; every row needs a unique id")
    return _storable(str(value), where, column, "id")


def _present(value, where: str, column: str):
    if is_missing(value):
        raise FeatxError(f"{where}, column {shown(column)}: the label is missing (value {shown(value)}); "
                         "remove the row or fill in its label")
    for item in (value if isinstance(value, list) else [value]):
        if isinstance(item, str):
            _storable(item, where, column, "label")
    return value


def _split_value(value, where: str, column: str) -> str:
    key = str(value).strip().lower() if value is not None else ""
    if key not in SPLIT_ALIASES:
        raise FeatxError(f"{where}, column {shown(column)}: split {shown(value)} is not one of "
                         f"{', '.join(SPLIT_ALIASES)}")
    return SPLIT_ALIASES[key]


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


# Regression targets beyond this magnitude overflow squared errors and standardisation; a
# nonzero one below MIN_TARGET underflows them (targets near 1e-307 gave the majority baseline
# an r2 of 1).
MAX_TARGET = 1e100
MIN_TARGET = 1e-100


def as_number(value, plain: bool = False) -> float | None:
    """The value as a number, or None. `plain`: strings count only when written as a plain
    number, so class codes such as "007" stay strings."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int):  # JSON integers are unbounded: 10**400 is an infinite float
        return float(value) if abs(value) < 2 ** 1023 else (math.inf if value > 0 else -math.inf)
    if isinstance(value, float):
        return value
    text = str(value).strip()
    if plain and not PLAIN_NUMBER.fullmatch(text):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _class_name(value, where: str, columns: Columns) -> str:
    """The class of a binary / multiclass label; an empty one (kept only for a multilabel
    separator) is missing here. A list or an object is no class: it was one named by Python's
    repr of it ("['a', 'b']", "{'k': 'a'}"), every distinct set or object a class of its own."""
    _no_bytes(value, where, columns)
    if isinstance(value, (list, dict)):
        fix = ('a list is a row\'s set of labels: set data.task = "multilabel" (or leave data.task unset)'
               if isinstance(value, list) else "give the class as a string or a number")
        raise FeatxError(f"{where}, column {shown(columns.labels[0])}: label {shown(value)} is a "
                         f"{'list' if isinstance(value, list) else 'JSON object'}, not a class; {fix}")
    name = class_key(value)
    if not name:
        raise FeatxError(f"{where}, column {shown(columns.labels[0])}: the label is empty; a class "
                         "needs a name (remove the row or fill in its label)")
    return name


def _no_bytes(value, where: str, columns: Columns) -> None:
    """A Parquet binary column's labels were classes named by Python's repr (b'a')."""
    if isinstance(value, (bytes, bytearray)):
        raise FeatxError(f"{where}, column {shown(columns.labels[0])}: label {value!r} is bytes, not a class "
                         "name; store the column as strings (UTF-8 text)")


def label_set(value, columns: Columns, where: str) -> list[str]:
    if len(columns.labels) > 1:  # one 0/1 column per label
        out = []
        for column, v in zip(columns.labels, value):
            number = as_number(v)
            if number not in (0.0, 1.0):
                raise FeatxError(f"{where}, column {shown(column)}: multilabel columns hold 0 or 1, "
                                 f"got {shown(v)}")
            if number == 1.0:
                out.append(column)
        return out
    _no_bytes(value, where, columns)
    if isinstance(value, list):
        for v in value:
            _no_bytes(v, where, columns)
            # A null among a row's labels (JSON, Parquet) was read as a class named "None".
            if is_missing(v) or isinstance(v, (list, dict)):
                raise FeatxError(f"{where}, column {shown(columns.labels[0])}: the row's list of labels "
                                 f"holds {shown(v)}, which is no label (a null, a blank or a nested "
                                 "value); remove it from the list, or fix the row")
        return [class_key(v) for v in value]
    if isinstance(value, dict):  # split by data.label_sep, Python's repr of it gave labels such as "{'k': 1}"
        raise FeatxError(f"{where}, column {shown(columns.labels[0])}: label {shown(value)} is a JSON object, "
                         "not a row's labels; give them as a list or a string of data.label_sep")
    if columns.label_sep is None:
        raise FeatxError(f"{where}, column {shown(columns.labels[0])}: a multilabel column needs a list "
                         "(JSON) or a separator: set data.label_sep (e.g. \",\")")
    return [class_key(v) for v in str(value).split(columns.label_sep) if v.strip()]


def infer_task(rows: Rows, columns: Columns, *, warn: bool = True) -> str:
    """binary / multiclass for strings or few integers, regression for other numbers, multilabel
    for lists or a label separator; several label columns: 0/1 -> multilabel, else regression;
    with data.label_names (`columns.named`) one label column is classes, whatever its values.
    `warn`: say so when many distinct integers are read as a regression target (a load infers
    the task twice when it splits a file itself, and says it once)."""
    values = rows.labels
    column = columns.labels[0]
    if columns.label_sep is not None or any(isinstance(v, list) and len(columns.labels) == 1 for v in values):
        fractions = [x for v in values if isinstance(v, list) for x in v
                     if isinstance(x, float) and not x.is_integer()]
        if fractions:
            raise FeatxError(f"column {shown(column)} holds lists of numbers such as {shown(fractions[0])}, and "
                             "data.task is not set: lists are read as sets of labels (multilabel). For "
                             "several regression targets give one column per target (data.label = "
                             "[\"a\", \"b\"]); for label ids set data.task = \"multilabel\"")
        return "multilabel"
    flat = [x for v in values for x in as_list(v)]
    numbers = [as_number(x, plain=True) for x in flat]
    if len(columns.labels) > 1:
        return "multilabel" if all(n in (0.0, 1.0) for n in numbers) else "regression"
    # With data.label_names the labels are its classes (names or positions): 50 classes written
    # 0..49 were a regression target, the names silently unused (fractions: a label it lacks).
    if all(n is not None for n in numbers) and not columns.named:
        distinct = set(numbers)
        if all(n.is_integer() for n in distinct):
            if len(distinct) <= MAX_INFERRED_CLASSES:
                # Counted as classes, not numbers: JSON's true and 1 are one number, two classes.
                return "binary" if len({class_key(x) for x in flat}) <= 2 else "multiclass"
            if warn:
                log.warning("column %r holds %d distinct integers: read as a regression target (more than "
                            "%d); if they are classes, set data.task = \"multiclass\"", column,
                            len(distinct), MAX_INFERRED_CLASSES)
        return "regression"
    if columns.named:  # three names of which train has two: multiclass, not binary
        return "binary" if columns.named == 2 else "multiclass"
    _check_numbers_among_names(rows, column, flat, numbers)
    return "binary" if len({class_key(x) for x in flat}) <= 2 else "multiclass"


# Distinct values that are not numbers in a column of numbers: a missing-value marker or two
# ("NA", "nan", "?"), not a set of class names.
FEW_NAMES = 2


def _check_numbers_among_names(rows, column: str, flat: list, numbers: list) -> None:
    """A column of numbers with a missing-value marker or two ("NA" where R's write.csv leaves
    a missing score) was read as classes, every distinct number one: 284 classes for 300
    regression targets, trained and scored without a word. Numbers with a fraction beside at
    most FEW_NAMES other values are refused with the fix; integers beside a name or two are
    classes, however many (CLINC's intents 0..149 beside "oos")."""
    distinct = {n for n in numbers if n is not None}
    names = {class_key(x) for x, n in zip(flat, numbers) if n is None}
    if not names or len(names) > FEW_NAMES or len(distinct) < 3 or all(n.is_integer() for n in distinct):
        return
    first = next(x for x, n in zip(flat, numbers) if n is None)
    where = getattr(rows, "where", None)
    at = next((where[i] for i, v in enumerate(rows.labels) if any(x is first for x in as_list(v))), None) \
        if where is not None else None
    raise FeatxError(
        f"column {shown(column)} holds {len(distinct)} distinct numbers, such as {shown(min(distinct))}, and "
        f"{len(names)} other value(s), such as {shown(first)}" + (f" ({at})" if at else "") + ": read "
        "as they are, every distinct number would be a class. For a regression target set data.task = "
        "\"regression\" (each row whose target is not a number is then named: fill it in or remove the "
        "row); if these are class names, set data.task = \"multiclass\"")


@dataclass
class LabelEncoder:
    task: str
    names: tuple[str, ...]
    columns: Columns
    index: dict[str, int]
    given: bool = False
    """The names are data.label_names (a label is one of them, by name or position), not train's."""

    @classmethod
    def fit(cls, train: Rows, columns: Columns, task: str, cfg: DataConfig,
            others: list[Rows] = ()) -> "LabelEncoder":
        fixed = read_label_names(cfg.label_names)
        if TASKS[task].regression:
            names = columns.labels
        elif TASKS[task].thresholded and len(columns.labels) > 1:
            names = columns.labels
        elif fixed is not None:
            names = fixed
        elif TASKS[task].thresholded:
            # A label of dev or test rows that no training row has is still a label of the task
            # (benchmark splits have them): kept, so its rows count against every model (which
            # can only predict it absent), never dropped from the test set nor an error.
            seen = {x for v, w in zip(train.labels, train.where) for x in label_set(v, columns, w)}
            elsewhere = {x for rows in others for v, w in zip(rows.labels, rows.where)
                         for x in label_set(v, columns, w)} - seen
            if elsewhere:
                log.info("%d label(s) of the dev or test rows never appear in train (%s): kept as "
                         "labels the models predict absent", len(elsewhere),
                         ", ".join(sorted(elsewhere, key=natural_key)[:10]))
            names = tuple(sorted(seen | elsewhere, key=natural_key))
        else:
            seen = {_class_name(v, w, columns) for v, w in zip(train.labels, train.where)}
            names = tuple(sorted(seen, key=natural_key))
        encoder = cls.from_names(task, tuple(names), columns, positions=fixed is not None)
        if TASKS[task].thresholded and not names:
            raise FeatxError("the multilabel data has no label at all (every row's label set is "
                             "empty); fix the label column or data.label_sep")
        if TASKS[task].classes and len(names) < 2:
            raise FeatxError(f"the training split has a single class ({', '.join(map(repr, names))}); "
                             "a classifier needs at least two: fix the labels or the split")
        if TASKS[task].n_classes not in (None, len(names)):
            raise FeatxError(f"data.task is {task} but the training labels have {len(names)} "
                             f"classes: {list(names)[:10]}; use multiclass or fix the labels")
        return encoder

    @classmethod
    def from_names(cls, task: str, names: tuple[str, ...], columns: Columns, *,
                   positions: bool) -> "LabelEncoder":
        """The encoder of known names (fitted, or a cache's); `positions`: data.label_names was
        given, so a class or label may also be written as its position in the names."""
        index = {n: i for i, n in enumerate(names)}
        if positions and not TASKS[task].regression and not _positions_collide(names):
            # Labels are integer positions in the names list (GoEmotions' "2,17").
            index = {str(i): i for i in range(len(names))} | index
        return cls(task, names, columns, index, given=positions)

    def encode(self, rows: Rows, split: str) -> np.ndarray:
        if TASKS[self.task].regression:
            out = np.empty((len(rows.labels), len(self.names)), dtype=np.float64)
            for i, (value, where) in enumerate(zip(rows.labels, rows.where)):
                values = as_list(value)
                if len(values) != len(self.names):
                    raise FeatxError(
                        f"{where}, column {shown(self.names[0])}: {len(values)} regression targets in one "
                        f"field, the task has {len(self.names)} ({', '.join(self.names)}); give one "
                        "column per target (data.label = [\"a\", \"b\"])")
                for j, (column, v) in enumerate(zip(self.names, values)):
                    number = None if isinstance(v, (list, dict)) else as_number(v)
                    if number is None or not math.isfinite(number):
                        raise FeatxError(f"{where}, column {shown(column)}: regression target {shown(v)} "
                                         "is not a finite number")
                    if abs(number) > MAX_TARGET or 0 < abs(number) < MIN_TARGET:
                        raise FeatxError(f"{where}, column {shown(column)}: regression target {shown(v)} is "
                                         f"outside {MIN_TARGET:g} <= |target| <= {MAX_TARGET:g} (0 aside); "
                                         "rescale the target (e.g. its logarithm, or a unit that "
                                         "brings it near 1) so squared errors stay finite and nonzero")
                    out[i, j] = number
            return out
        if TASKS[self.task].thresholded:
            out = np.zeros((len(rows.labels), len(self.names)), dtype=np.uint8)
            for i, (value, where) in enumerate(zip(rows.labels, rows.where)):
                for label in label_set(value, self.columns, where):
                    out[i, self._lookup(label, where, split)] = 1
            return out
        out = np.empty(len(rows.labels), dtype=np.int64)
        for i, (value, where) in enumerate(zip(rows.labels, rows.where)):
            out[i] = self._lookup(_class_name(value, where, self.columns), where, split)
        return out

    def _lookup(self, label: str, where: str, split: str) -> int:
        if label not in self.index and self.given:  # not "never appears in train": train is not asked
            raise FeatxError(
                f"{where}, column {shown(self.columns.labels[0])}: label {shown(label)} in the {split} split "
                f"is none of data.label_names, by name or by position 0..{len(self.names) - 1} (the names: "
                f"{', '.join(list(self.names)[:20])}); add it to the names, or fix the row")
        if label not in self.index:
            raise FeatxError(
                f"{where}, column {shown(self.columns.labels[0])}: label {shown(label)} in the {split} split "
                f"never appears in train (the labels the task knows: {', '.join(list(self.names)[:20])}); remove "
                "the row or add training examples of that label")
        return self.index[label]


def natural_key(name: str):
    number = as_number(name)
    if number is None or math.isnan(number):  # a class "nan" among numbers: its place was set order's
        return (1, 0.0, name)
    return (0, number, name)


def _positions_collide(names: tuple[str, ...]) -> bool:
    """Whether a name is the position of another name: then a label is read as a name only. Names
    "1".."5" over labels 0..4 read 1 as the name "1" and 0 as position 0, one class, and each
    other label one class off. A number that is its own position, or past the last, is no
    other name's position."""
    return any(INTEGER.fullmatch(n) and int(n) != i and 0 <= int(n) < len(names) for i, n in enumerate(names))


INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")  # an integer as class_key writes one ("007" is a code)


def read_label_names(spec) -> tuple[str, ...] | None:
    """data.label_names: a tuple of names, or a file of one name a line (blank lines skipped, a
    byte-order mark dropped). A name given twice or a blank name is an error: the position and
    the name of one class were two classes of one name (labels 0 and 2 of ("a", "b", "a")), and
    no label reads as a blank name."""
    if spec is None:
        return None
    where = "data.label_names"
    if isinstance(spec, tuple):
        names = spec
    else:
        path = Path(spec)
        if not path.is_file():
            raise FeatxError(f"data.label_names file {spec!r} not found; give a list or a file with one "
                             "name per line")
        where = f"data.label_names file {spec!r}"
        try:
            text = path.read_text(encoding="utf-8-sig")  # a BOM was read into the first name
        except UnicodeDecodeError as exc:
            raise FeatxError(f"{where} is not UTF-8 (byte {exc.start}: {exc.reason}); save it as "
                             "UTF-8") from None
        names = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not names:  # was "the training split has a single class ()"
        raise FeatxError(f"{where} holds no name; give one name per class or label (or leave "
                         "data.label_names unset)")
    first: dict[str, int] = {}  # each name's position (not a scan of those before: many names)
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name.strip():
            raise FeatxError(f"{where}: name {i} is {shown(name)}, which is no name; give every class "
                             "or label a name")
        # As a label is read (trimmed, class_key): "neg " named no label, and names "+1" and "-1"
        # none of the labels "+1" (read "1"); "1" and "1.0" name one class.
        key = class_key(name)
        if first.setdefault(key, i) != i:
            raise FeatxError(f"{where} names {shown(key)} twice (positions {first[key]} and {i}); "
                             "give each class or label one name")
    return tuple(first)


def check_unique_ids(raw: dict[str, Rows]) -> None:
    seen: dict[str, str] = {}
    for rows in raw.values():
        for row_id, where in zip(rows.ids, rows.where):
            if row_id in seen:
                raise FeatxError(f"duplicate id {shown(row_id)}: {seen[row_id]} and {where}; ids must be "
                                 "unique (fix the data or unset data.id to number the rows)")
            seen[row_id] = where
