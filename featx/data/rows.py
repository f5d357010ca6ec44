"""A dataset's files read into one row store, every value judged where it enters. No torch.

Each configured split's files (or the one file featx splits) are read a block at a time
(featx.data.formats). In each block the texts, second texts, ids, kept values, labels and split
names are checked once per column, vectorised where the block is Arrow; the first row that
breaks a rule is judged again by featx.data.rules, which gives its message. Texts, ids and kept
values go to the store (featx.data.store); a label is kept as the code of its distinct raw value
(`Codes`), or as numbers (`targets`), and a split name as its split's code.

A file that cannot be parsed is an error at once. A row's error waits until every file is read,
then comes in the order a reader of whole files gives: the rows with no text (all of them, in
one message), then the first row that breaks another rule.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from featx.data import columns as C
from featx.data import rules
from featx.data.store import RowStore
from featx.errors import FeatxError, shown

# Rows an empty-text error names; the total is always given.
EMPTY_SHOWN = 20
# Distinct label values kept as codes: more are no classes (a regression's targets are read as
# numbers instead). Label sets are coded by their whole field, which may be far more distinct.
MAX_CLASSES, MAX_LABEL_SETS = 100_000, 5_000_000


class TooManyLabels(Exception):
    """More distinct labels than classes may have: read them again as numbers."""


@dataclass(frozen=True)
class Roles:
    """Which column plays which role (data.text, text_pair, label, id, split_column, keep)."""
    text: str
    pair: str | None
    labels: tuple[str, ...]
    id: str | None
    split: str | None
    keep: tuple[str, ...]
    label_sep: str | None
    label_regex: str | None
    named: int = 0
    """How many names data.label_names gives (0: unset)."""

    @classmethod
    def of(cls, cfg, keep, id_column: str | None, named: int = 0) -> "Roles":
        label = cfg.label if cfg.label is not None else "label"
        labels = (label,) if isinstance(label, str) else tuple(label)
        return cls(cfg.text or "text", cfg.text_pair, labels, id_column, cfg.split_column,
                   tuple(dict.fromkeys(keep)), cfg.label_sep, cfg.label_regex, named)

    @property
    def texts(self) -> tuple[str, ...]:
        return (self.text,) if self.pair is None else (self.text, self.pair)

    def required(self) -> list[tuple[str, str]]:
        """(column, data.<role>) of every column read, the texts first."""
        roles = [(self.text, "text"), (self.pair, "text_pair"), (self.id, "id"), (self.split, "split_column")]
        roles += [(c, "label") for c in self.labels] + [(c, "keep") for c in self.keep]
        return [(c, role) for c, role in roles if c is not None]

    def read(self) -> list[str]:
        return list(dict.fromkeys(c for c, _ in self.required()))


def value_key(value) -> tuple:
    """A distinct value as featx's rules tell them apart: by type and value (JSON's 1, 1.0 and
    true are equal in Python, not to featx); a list (a row's labels) by its JSON text."""
    if isinstance(value, (list, dict)):
        return type(value), json.dumps(value, ensure_ascii=False, default=repr, sort_keys=False)
    if isinstance(value, float) and value != value:
        return float, "nan"
    return type(value), value


class Codes:
    """Each row's code of its value among the distinct values, first appearance first."""

    def __init__(self, limit: int):
        self.limit = limit
        self.index: dict = {}
        self.values: list = []

    def code(self, values: list) -> np.ndarray:
        out = np.empty(len(values), np.int32)
        index = self.index
        for i, value in enumerate(values):
            key = value_key(value)
            c = index.get(key)
            if c is None:
                c = index[key] = len(self.values)
                self.values.append(value)
            out[i] = c
        if len(self.values) > self.limit:
            raise TooManyLabels
        return out

    def code_arrow(self, values) -> np.ndarray:
        """Codes of a string array: its distinct values coded once, by pyarrow."""
        import pyarrow.compute as pc

        encoded = pc.dictionary_encode(values)
        local = self.code(encoded.dictionary.to_pylist())
        return local[encoded.indices.to_numpy(zero_copy_only=False)]


@dataclass
class Part:
    """One configured split's rows (None: the one file featx splits itself) in the store."""
    name: str | None
    start: int
    stop: int = 0
    path: str = ""
    """Its files, joined by " + " (for messages)."""
    codes: list = field(default_factory=list)
    """Per block, each row's label code (or (n, T) float64 targets)."""
    splits: list = field(default_factory=list)
    """Per block, each row's split code from the split column."""

    def __len__(self) -> int:
        return self.stop - self.start

    @property
    def labels(self) -> np.ndarray:
        return np.concatenate(self.codes) if self.codes else np.zeros(0, np.int32)

    @property
    def split_codes(self) -> np.ndarray | None:
        return np.concatenate(self.splits) if self.splits else None


class Reader:
    """Reads parts into one store, the labels as codes or (`targets`) as numbers."""

    def __init__(self, roles: Roles, *, drop_empty: bool, targets: bool, label_sets: bool,
                 empties_listed: bool = True, folder=None):
        self.roles, self.drop_empty, self.targets = roles, drop_empty, targets
        self.empties_listed = empties_listed  # else a row with no text is a row's error (predict)
        self.plain_zero_one = True  # targets: every value a plain 0 or 1 (several columns: multilabel)
        self.store = RowStore(folder)
        self.sources: list = []
        self.labels = Codes(MAX_LABEL_SETS if label_sets else MAX_CLASSES)
        self.split_names = Codes(MAX_CLASSES)
        self.empty: list[tuple[int, int, str]] = []  # (source, record, states) of the first rows with no text
        self.n_empty = 0
        self.error: str | None = None  # the first other row's error, in reading order
        self.dropped: dict[str, int] = {}

    def read(self, name: str | None, sources: list) -> Part:
        part = Part(name, len(self.store), path=" + ".join(str(src.path) for src in sources))
        for k, source in enumerate(sources):
            if k and source.columns and source.columns != sources[0].columns:
                raise FeatxError(f"{source.path} has columns {source.columns}, but {sources[0].path} has "
                                 f"{sources[0].columns}; files of one split must match")
            self.sources.append(source)
            code = len(self.sources) - 1
            known = bool(source.columns)
            if known:
                self._require(source)
            for block in source.blocks(self.roles.read()):
                self._add(part, code, source, block)
            if not known:
                self._require(source)
        part.stop = len(self.store)
        return part

    def _require(self, source) -> None:
        for column, role in self.roles.required():
            if not source.columns:
                raise FeatxError(f"{source.path} holds no rows (so no column {shown(column)}, configured as "
                                 f"data.{role}); give it rows, or leave the file out of [data]")
            if column not in source.columns:
                raise FeatxError(f"{source.path}: no column {shown(column)} (configured as data.{role}); "
                                 f"the columns are: {', '.join(shown(c) for c in source.columns[:30])}"
                                 f"{_delimiter_hint(source.columns)}{_normalisation_hint(column, source.columns)}")

    def _add(self, part: Part, code: int, source, block) -> None:
        import pyarrow as pa

        values, records = block.values, block.records
        blank = np.zeros(len(records), bool)
        for column in self.roles.texts:
            blank |= C.blank(values[column])
        if blank.any() and (self.drop_empty or self.empties_listed):
            self._blank_rows(part, code, source, block, blank)
            keep = ~blank
            values = {c: C.filtered(v, keep) for c, v in values.items()}
            records = records[keep]
        if not len(records):
            return
        if self.error is None:
            self._judge(source, values, records)
        if self.error is not None or self.empty:
            return  # the data is refused: only its other files' parse errors are still read for
        roles = self.roles
        stored = {"text": C.strings(values[roles.text])}
        if roles.pair is not None:
            stored["pair"] = C.strings(values[roles.pair])
        if roles.id is not None:
            stored["id"] = C.strings(values[roles.id])
        for column in roles.keep:
            stored[f"keep:{column}"] = C.kept(values[column])
        stored["_source"] = pa.array(np.full(len(records), code, np.int32))
        stored["_record"] = pa.array(records)
        self.store.append(stored)
        if roles.labels:
            part.codes.append(self._labels(values))
        if roles.split is not None:
            part.splits.append(self.split_names.code([str(v) for v in C.python(values[roles.split])]))

    def _labels(self, values) -> np.ndarray:
        columns = self.roles.labels
        if not self.targets:
            raw = values[columns[0]]
            return self.labels.code_arrow(raw) if C.is_string_array(raw) else self.labels.code(C.python(raw))
        if self.plain_zero_one:
            self.plain_zero_one = all(C.plain_zero_one(values[c]) for c in columns)
        return np.stack([C.numbers(values[c]) for c in columns], axis=1)

    def _blank_rows(self, part: Part, code: int, source, block, blank: np.ndarray) -> None:
        """Rows with no text: counted per split under data.drop_empty, else named in one error."""
        rows = np.flatnonzero(blank)
        if self.drop_empty:
            if part.name is not None:
                names = [part.name] * len(rows)
            elif self.roles.split is not None:
                raw = C.python(block.values[self.roles.split])
                where = source.where([int(block.records[i]) for i in rows])
                names = [rules.split_name(raw[i], w, self.roles.split) for i, w in zip(rows, where)]
            else:
                names = ["all"] * len(rows)
            for name in names:
                self.dropped[name] = self.dropped.get(name, 0) + 1
            return
        self.n_empty += len(rows)
        named = self.roles.texts
        for i in rows[:max(0, EMPTY_SHOWN - len(self.empty))]:
            raw = {c: C.value_at(block.values[c], i) for c in named}
            states = ", ".join(("missing" if raw[c] is None else "empty") + (f" {shown(c)}" if len(named) > 1 else "")
                               for c in named if rules.is_missing(raw[c]))
            self.empty.append((code, int(block.records[i]), states))

    def _judge(self, source, values: dict, records: np.ndarray) -> None:
        """The first row of the block that breaks a rule, judged again by featx.data.rules."""
        bad = np.zeros(len(records), bool)
        roles = self.roles
        for column in roles.texts:
            bad |= C.bad_texts(values[column]) | (C.blank(values[column]) if not self.empties_listed else False)
        if roles.id is not None:
            bad |= C.bad_ids(values[roles.id])
        for column in roles.labels:
            bad |= C.bad_labels(values[column], roles.label_sep is not None)
        for column in roles.keep:
            bad |= C.bad_kept(values[column])
        if roles.split is not None:
            bad |= C.bad_splits(values[roles.split])
        if not bad.any():
            return
        i = int(np.argmax(bad))
        row = {c: C.value_at(v, i) for c, v in values.items()}
        where = source.where([int(records[i])])[0]
        try:
            for column in roles.texts:
                rules.text(row[column], where, column)
            if roles.id is not None:
                rules.row_id(row[roles.id], where, roles.id)
            for column in roles.labels:
                rules.present(row[column], where, column, blank_is_empty_set=roles.label_sep is not None)
            for column in roles.keep:
                rules.kept(row[column], where, column)
            if roles.split is not None:
                rules.split_name(row[roles.split], where, roles.split)
        except FeatxError as exc:
            self.error = str(exc)

    def finish(self) -> None:
        """The rows' errors, in the order a reader of whole files gives them; else the store is
        finished for reading."""
        error = self._empty_message() if self.empty else self.error
        if error is not None:
            self.store.discard()
            raise FeatxError(error)
        self.store.finish()

    def _empty_message(self) -> str:
        places: dict[str, list[str]] = {}
        by_source: dict[int, list[tuple[int, str]]] = {}
        for code, record, states in self.empty:
            by_source.setdefault(code, []).append((record, states))
        for code, rows in by_source.items():
            source = self.sources[code]
            for (record, states), where in zip(rows, source.where([r for r, _ in rows])):
                path, _, line = where.rpartition(", row ")
                places.setdefault(path, []).append(f"{line} ({states})")
        total = self.n_empty
        listed = "; ".join(f"{path}, row{'s' if len(rows) > 1 else ''} {', '.join(rows)}" for path, rows in places.items())
        more = f" (the first {EMPTY_SHOWN} of {total:,})" if total > EMPTY_SHOWN else ""
        column = " or ".join(shown(c) for c in self.roles.texts)
        return (f"{total:,} row{'s' if total > 1 else ''} with no text (the text is empty or missing in column "
                f"{column}): {listed}{more}. Fill in or remove {'these rows' if total > 1 else 'the row'}, or set "
                "`drop_empty = true` in [data] (or data.drop_empty=true) to drop every such row; the cache "
                "then says how many rows were dropped per split")

    def where(self, positions) -> list[str]:
        """"file, row N" of rows of the store (their sources' numbering)."""
        positions = np.asarray([int(p) for p in positions], np.int64)
        sources = self.store.take("_source", positions)
        records = self.store.take("_record", positions)
        return [self.sources[s].where([r])[0] for s, r in zip(sources, records)]

    def raw(self, position: int, column: str):
        """The value of `column` of a row of the store as its file holds it: the file is read
        again up to the row (an error's message quotes it)."""
        source = self.sources[self.store.take("_source", [position])[0]]
        record = self.store.take("_record", [position])[0]
        for block in source.blocks([column]):
            hit = np.flatnonzero(block.records == record)
            if len(hit):
                return C.python(block.values[column])[int(hit[0])]
        return None


def _delimiter_hint(columns: list[str]) -> str:
    """A header read as one column that holds another separator: the file uses that one."""
    if len(columns) != 1:
        return ""
    for mark, name in ((";", "semicolon"), ("\t", "tab"), ("|", "pipe")):
        if mark in columns[0]:
            written = "\\t" if mark == "\t" else mark  # as TOML writes it
            return (f". The header looks {name}-separated: set data.delimiter = \"{written}\" in [data] "
                    f"(or override it: 'data.delimiter={written}')")
    return ""


def _normalisation_hint(column: str, columns) -> str:
    """When the missing name equals a column's up to Unicode normalisation (NFC against NFD, a
    look-alike width) and invisible format characters, which print the same: say which."""
    import unicodedata

    def key(name: str) -> str:
        return unicodedata.normalize("NFKC", "".join(c for c in name if unicodedata.category(c) != "Cf"))
    twins = [c for c in columns if key(c) == key(column)]
    return (f"; {shown(twins[0])} differs from it only in Unicode normalisation or invisible characters "
            "(they print the same): copy the header's name into the pipeline") if twins else ""
