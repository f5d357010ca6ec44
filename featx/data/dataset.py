"""Datasets: a pipeline's [data] -> `Dataset` (per split: ids, texts or text pairs, labels, kept
columns), and predict's new texts -> `Inputs`. No torch.

Every input is read once into one row store (featx.data.rows): a 100-row file and a 100M-row
file take the same path, and a split's texts are read back from the store when a stage asks for
them. Then the labels are decoded (featx.data.labels), the rows of one file split as the task
allows (featx.data.splits), and the ids checked unique.
"""
from __future__ import annotations

import dataclasses
import filecmp
import functools
import hashlib
import itertools
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from featx.data import files as files_, formats, labels as L, rules
from featx.data.columns import JSON_BLOCK, json_pieces
from featx.data.lines import LINE_BREAK, InMemory
from featx.data.rows import Reader, Roles, TooManyLabels
from featx.data.splits import SPLITS, check_own_split, drop_in_train, label_assignment, stratified_assignment
from featx.data.store import Values
from featx.errors import FeatxError, shown
from featx.stats.duplicates import SAME_TEXT
from featx.tasks import TASKS

log = logging.getLogger("featx")


@dataclass(frozen=True)
class Split:
    """One split: row-aligned ids, texts (and second texts for pairs), labels, kept columns.

    labels: binary/multiclass (n,) int64 class indices; multilabel (n, n_labels) uint8;
    regression (n, n_targets) float64 on the original scale. Texts, ids and kept values are
    sequences of str: lists, or columns of the row store read from disk when asked.
    """
    name: str
    ids: Sequence
    texts: Sequence
    text_pairs: Sequence | None
    labels: np.ndarray
    columns: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows) -> "Split":
        """The split restricted to `rows` (positions), in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        pick = lambda values: values.subset(rows) if hasattr(values, "subset") else [values[i] for i in rows]  # noqa: E731
        return Split(self.name, pick(self.ids), pick(self.texts),
                     None if self.text_pairs is None else pick(self.text_pairs), self.labels[rows],
                     {k: pick(v) for k, v in self.columns.items()})

    def fingerprint(self) -> str:
        """sha256 of everything the cache depends on: ids, texts, pairs, labels and kept columns."""
        return self._digests[0]

    def texts_digest(self) -> str:
        """sha256 of the texts and second texts: what the vectors depend on (featx.cache.reuse)."""
        return self._digests[1]

    @functools.cached_property
    def _digests(self) -> tuple[str, str]:
        """(fingerprint, texts digest), in one pass and once (the rows never change)."""
        h, texts = hashlib.sha256(), hashlib.sha256()
        h.update(self.name.encode())
        for piece in json_pieces(self.ids):
            h.update(piece)
        for part in (self.texts, self.text_pairs or []):
            for piece in json_pieces(part):
                h.update(piece)
                texts.update(piece)
        h.update(str(self.labels.dtype).encode() + repr(self.labels.shape).encode())
        h.update(np.ascontiguousarray(self.labels))
        for name in sorted(self.columns):  # kept columns are cached too: another kept column, another cache
            h.update(json.dumps(["keep", name]).encode())
            for piece in json_pieces(self.columns[name]):
                h.update(piece)
        return h.hexdigest(), texts.hexdigest()


class Numbered(Values):
    """Ids made of a prefix and row numbers ("train-0", "row-17")."""

    def __init__(self, prefix: str, numbers: np.ndarray):
        self.prefix, self.numbers = prefix, np.asarray(numbers, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, key):
        if isinstance(key, slice):
            return [f"{self.prefix}{n}" for n in self.numbers[key].tolist()]
        return f"{self.prefix}{int(self.numbers[key])}"

    def arrow_blocks(self):
        """The ids as Arrow string arrays of at most JSON_BLOCK each (see `Column.arrow_blocks`)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        for start in range(0, len(self), JSON_BLOCK):
            numbers = pc.cast(pa.array(self.numbers[start:start + JSON_BLOCK]), pa.string())
            yield pc.binary_join_element_wise(self.prefix, numbers, "")

    def subset(self, rows) -> "Numbered":
        return Numbered(self.prefix, self.numbers[rows])


@dataclass(frozen=True)
class Dataset:
    name: str
    task: str
    label_names: tuple[str, ...]
    """Class names (binary, multiclass), label names (multilabel) or target names (regression)."""
    splits: dict[str, Split]
    source: str
    """Where the rows came from (files or built-in), for messages and the cache's metadata."""
    files: tuple[str, ...] = ()
    """The files read (a later stage knows the cache is still this data's when none changed)."""
    dropped_empty: dict[str, int] = field(default_factory=dict)
    """Rows data.drop_empty dropped per split ("all": of one file featx split itself)."""
    dropped_in_train: dict[str, int] = field(default_factory=dict)
    """Dev and test rows data.drop_in_train dropped, per split."""

    @property
    def pairs(self) -> bool:
        return next(iter(self.splits.values())).text_pairs is not None

    def fingerprint(self) -> str:
        return dataset_fingerprint(self.task, self.label_names,
                                   [(name, split.fingerprint()) for name, split in self.splits.items()])


def dataset_fingerprint(task: str, label_names, splits: list[tuple[str, str]]) -> str:
    """sha256 of the task, the label names and each split's fingerprint."""
    h = hashlib.sha256(json.dumps([task, list(label_names)]).encode())
    for name, fingerprint in splits:
        h.update(f"{name}:{fingerprint}".encode())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# A pipeline's [data] -> Dataset


def load_dataset(cfg, name: str = "dataset", *, folder: Path | None = None) -> Dataset:
    """Read, validate, split and encode the dataset a pipeline describes. Its rows are stored in
    `folder` (the cache's folder when a stage extracts; the system's temporary folder else)."""
    if cfg.builtin is not None:
        builtin = formats.BUILTINS[cfg.builtin]()
        parts = {None: [builtin.source]}
        task, keep, id_column = cfg.task or builtin.task, cfg.keep or builtin.keep, cfg.id or "id"
        if cfg.label_names is not None and TASKS[task].regression:
            raise FeatxError(f"data.label_names names the classes of one label column, and built-in "
                             f"{shown(cfg.builtin)} is a regression (targets, not classes): unset "
                             "data.label_names")
        cfg = dataclasses.replace(cfg, label=cfg.label or builtin.label)
        source, files = f"builtin:{cfg.builtin}", (str(builtin.source.path), *_data_files(cfg))
    else:
        check_splits_apart(cfg)
        given = {"train": cfg.train, "dev": cfg.dev, "test": cfg.test}
        specs = ({None: cfg.path or cfg.train} if cfg.path is not None or not (cfg.dev or cfg.test)
                 else {s: f for s, f in given.items() if f})
        parts = {s: [src for p in _paths(f) for src in formats.sources(Path(p), cfg)] for s, f in specs.items()}
        task, keep, id_column = cfg.task, cfg.keep or (), cfg.id
        source = ", ".join(" + ".join(str(src.path) for src in srcs) for srcs in parts.values())
        files = tuple(_data_files(cfg))
    fixed = L.read_label_names(cfg.label_names)
    roles = Roles.of(cfg, keep, id_column, len(fixed or ()))
    reader, read = _read(cfg, roles, parts, task, folder)
    try:
        dataset = _assemble(cfg, name, task, roles, reader, read, fixed, source)
    except BaseException:
        reader.store.discard()
        raise
    return dataclasses.replace(dataset, files=files)


def _read(cfg, roles: Roles, parts: dict, task: str | None, folder: Path | None):
    """(the reader, its parts) of every split's files: labels as codes of their distinct values,
    or as numbers for a regression, several label columns, or more distinct values than
    classes with the task unset (then read again)."""
    several = len(roles.labels) > 1
    # A regex picks the label out of each raw value: one match per distinct value, coded.
    targets = (bool(task is not None and TASKS[task].regression) or several) and roles.label_regex is None
    for attempt in range(2):
        reader = Reader(roles, drop_empty=cfg.drop_empty, targets=targets, folder=folder,
                        label_sets=roles.label_sep is not None or bool(task and TASKS[task].thresholded))
        try:
            read = {s: reader.read(s, srcs) for s, srcs in parts.items()}
        except TooManyLabels:
            reader.store.discard()
            if task is not None or roles.label_regex is not None or roles.named:
                raise FeatxError(f"column {shown(roles.labels[0])} holds more than {reader.labels.limit:,} distinct "
                                 "labels: too many classes to train; check data.label, or set data.task = "
                                 "\"regression\" if these are numbers") from None
            targets = True
            continue
        except BaseException:
            reader.store.discard()
            raise
        reader.finish()
        return reader, read
    raise AssertionError("unreachable")


def _assemble(cfg, name: str, task, roles: Roles, reader: Reader, read: dict, fixed, source: str) -> Dataset:
    labels = _labels(reader, roles, read)
    positions = {s: np.arange(p.start, p.stop) for s, p in read.items()}
    if None in read:  # one file: split by its column, or by featx
        one = read[None]
        if roles.split is not None:
            codes = _split_codes(reader, one)
            positions = {s: positions[None][codes == k] for k, s in enumerate(SPLITS) if (codes == k).any()}
        else:
            task = task or L.infer_task(labels)
            assignment = _own_split(task, labels, cfg)
            positions = {s: np.flatnonzero(assignment == k) for k, s in enumerate(SPLITS) if (assignment == k).any()}
    if "train" not in positions or not len(positions["train"]):
        raise FeatxError(f"{source}: the training split is empty")
    before = dict(positions)  # a dropped row's neighbours keep their numbers (`_numbering`)
    in_train = drop_in_train(reader.store, roles.pair is not None, positions, cfg.max_rows) if cfg.drop_in_train else {}
    for split in ("dev", "test"):  # a file of a header only (or of rows drop_empty dropped)
        if split in positions and not len(positions[split]):
            given = read[split].path if split in read else source
            raise FeatxError(f"{given}: the {split} split holds no rows"
                             + (" (data.drop_empty dropped them all)" if reader.dropped.get(split) else "")
                             + (" (data.drop_in_train dropped them all: train holds every text)"
                                if in_train.get(split) else "")
                             + f"; give it rows, or leave data.{split} unset (the probe then "
                             "chooses by cross-validation on train)")
    task = task or L.infer_task(labels, positions["train"])
    ordered = {s: positions[s] for s in SPLITS if s in positions}
    names, encoded = L.encode(task, labels, ordered, fixed, first=cfg.max_rows)
    if roles.id is not None:
        _check_unique_ids(reader, ordered)
    splits = {s: _split(s, reader, roles, rows[:cfg.max_rows], encoded[s],
                        numbered=_numbering(s, read, rows, before[s])) for s, rows in ordered.items()}
    if reader.dropped:
        log.warning("data.drop_empty: dropped %d row(s) with an empty or missing text (%s)",
                    sum(reader.dropped.values()), ", ".join(f"{s} {n}" for s, n in reader.dropped.items()))
    if len(reader.store) > 100_000:
        log.info("read %s (%s rows) into a row store: texts are read back from it when needed",
                 source, f"{len(reader.store):,}")
    if in_train:
        log.warning("data.drop_in_train: dropped %s whose text train holds too (%s)",
                    " and ".join(f"{n:,} {s} row(s)" for s, n in in_train.items()), SAME_TEXT)
    return Dataset(name, task, tuple(names), splits, source, dropped_empty=dict(reader.dropped),
                   dropped_in_train=in_train)


def _labels(reader: Reader, roles: Roles, read: dict) -> L.Labels:
    """The labels the reader kept, data.label_regex's group taken of each."""
    parts = list(read.values())
    if reader.targets:
        blocks = [b for p in parts for b in p.codes]
        targets = np.concatenate(blocks) if blocks else np.zeros((0, len(roles.labels)))
        codes, values = None, []
    else:
        codes, values, targets = np.concatenate([p.labels for p in parts]), reader.labels.values, None
    zero_one = targets is not None and bool(np.isin(targets, (0.0, 1.0)).all()) and reader.plain_zero_one
    labels = L.Labels(roles.labels, codes, values, targets, reader.where, reader.raw, label_sep=roles.label_sep,
                      named=roles.named, zero_one=zero_one)
    return labels if roles.label_regex is None else L.with_regex(labels, roles.label_regex)


def _split_codes(reader: Reader, part) -> np.ndarray:
    """Each row's split from its split column (0 train, 1 dev, 2 test; the reader checked the
    names)."""
    table = np.array([SPLITS.index(rules.SPLIT_ALIASES[str(v).strip().lower()]) for v in reader.split_names.values],
                     np.int8)
    return table[part.split_codes] if len(part) else np.zeros(0, np.int8)


def _own_split(task: str, labels: L.Labels, cfg) -> np.ndarray:
    """featx's seeded split of one file, stratified as the task allows."""
    if TASKS[task].thresholded:
        assignment = label_assignment(task, L.label_matrix(labels), cfg.dev_fraction, cfg.test_fraction,
                                      cfg.split_seed)
    else:
        assignment = stratified_assignment(L.strata(task, labels), cfg.dev_fraction, cfg.test_fraction,
                                           cfg.split_seed)
    check_own_split(assignment, cfg)
    return assignment


def _numbering(split: str, read: dict, rows: np.ndarray, before: np.ndarray) -> tuple[str, np.ndarray]:
    """How rows without an id column are named: featx's own split of one file keeps each row's
    number in the file ("row-17"); a split's own file or split column numbers it in the split,
    as it was before data.drop_in_train (`before`: the split's rows then), so that an id names
    the same row of the file either way."""
    if None in read and read[None].split_codes is None:
        return "row-", rows - read[None].start
    return f"{split}-", np.searchsorted(before, rows)


def _split(name: str, reader: Reader, roles: Roles, rows: np.ndarray, labels: np.ndarray, *, numbered) -> Split:
    store = reader.store
    ids = store.column("id", rows) if roles.id is not None else Numbered(numbered[0], numbered[1][:len(rows)])
    pairs = store.column("pair", rows) if roles.pair is not None else None
    kept = {k: store.column(f"keep:{k}", rows) for k in roles.keep}
    return Split(name, ids, store.column("text", rows), pairs, labels, kept)


def _check_unique_ids(reader: Reader, splits: dict[str, np.ndarray]) -> None:
    """Ids are unique over every split: the first repeated one (splits in order) is named with
    the row that had it first."""
    order = np.concatenate(list(splits.values()))
    hashes = reader.store.hashes("id", order)
    ranked = np.argsort(hashes, kind="stable")
    same = np.flatnonzero(hashes[ranked][1:] == hashes[ranked][:-1])
    if not len(same):
        return
    seen: dict[str, int] = {}
    candidates = sorted(set(ranked[same].tolist()) | set(ranked[same + 1].tolist()))
    values = reader.store.take("id", order[candidates])
    for k, value in zip(candidates, values):
        if value in seen:
            first, second = reader.where([order[seen[value]], order[k]])
            raise FeatxError(f"duplicate id {shown(value)}: {first} and {second}; ids must be unique (fix the "
                             "data or unset data.id to number the rows)")
        seen[value] = k


def listed_files(cfg) -> set[str] | None:
    """The data files the pipeline's [data] names now (a folder's as listed now, a saved
    dataset's names file, a label_names file); None for a built-in (its files ship with featx)."""
    if cfg.builtin is not None:
        return None
    return set(_data_files(cfg))


def _paths(spec) -> list[str]:
    """The paths of a configured data.path, train, dev or test: one, several, or none."""
    return [spec] if isinstance(spec, str) else list(spec or ())


def _data_files(cfg) -> list[str]:
    """The files [data] names: each path's data files (a folder's as listed now, a saved dataset's
    names file), then a data.label_names file."""
    return [str(f) for spec in (cfg.path, cfg.train, cfg.dev, cfg.test) for p in _paths(spec)
            for f in (*files_.folder_files(Path(p)), *files_.names_file(Path(p)))] + \
        ([cfg.label_names] if isinstance(cfg.label_names, str) else [])  # (a tuple is the names themselves)


def check_splits_apart(cfg) -> None:
    """data.train, dev and test are files of their own, and no split lists a file twice (or
    beside its copy): the test rows would be training rows, or every row read twice."""
    def same(x: Path, y: Path) -> bool:  # bytes compared only for files of one size
        return x.samefile(y) or (x.stat().st_size == y.stat().st_size and filecmp.cmp(x, y, shallow=False))

    listed = {s: [(f, Path(p).is_file()) for p in _paths(v) for f in files_.folder_files(Path(p)) if f.is_file()]
              for s, v in (("path", cfg.path), ("train", cfg.train), ("dev", cfg.dev), ("test", cfg.test))}
    for split, files in listed.items():
        for i, (x, x_listed) in enumerate(files):
            for y, y_listed in files[i + 1:]:
                one = x.samefile(y)
                if one or (x_listed and y_listed and same(x, y)):
                    raise FeatxError(f"data.{split} lists the same file twice ({x}"
                                     + ("" if one else f" and its copy {y}") + "): every row would "
                                     "be read twice; list each file (or folder) once")
    for a, b in itertools.combinations(SPLITS, 2):
        for x, _ in listed[a]:
            for y, _ in listed[b]:
                if same(x, y):
                    raise FeatxError(f"data.{a} and data.{b} hold the same file ({x}"
                                     + ("" if x.samefile(y) else f" and its copy {y}") + f"): the {b} rows "
                                     f"would be {a} rows; give each split its own rows")


# ---------------------------------------------------------------------------------------------
# New texts to predict on (labels optional)


@dataclass(frozen=True)
class Inputs:
    """Rows to predict: ids, texts (and pairs), and their labels when the file has them."""
    ids: Sequence
    texts: Sequence
    text_pairs: Sequence | None
    labels: np.ndarray | None
    """Encoded like the cache's labels (class indices, 0/1 rows, targets); None when absent."""
    source: str


def read_inputs(cfg, path: str, *, task: str, label_names, pairs: bool) -> Inputs:
    """Read a file of new texts with the pipeline's column settings; `path` "-" reads one text
    per line from stdin. Labels are read and checked against the cache's names when present."""
    if path == "-":
        if pairs:
            raise FeatxError("this pipeline classifies text pairs; stdin gives single texts: pass "
                             "a file with both columns")
        # Lines end at \n, \r\n or \r, whatever the stream's own newline setting.
        texts = [t for t in LINE_BREAK.split(files_.stdin_text()) if t.strip()]
        src = InMemory(Path("<stdin>"), ["text"], [{"text": t} for t in texts], list(range(1, len(texts) + 1)))
        cfg = dataclasses.replace(cfg, text="text", text_pair=None, id=None)
    else:
        known = Path(path).suffix.lower() in files_.SUFFIX_FORMATS
        src = formats.sources(Path(path), dataclasses.replace(cfg, format=None if known else cfg.format))[0]
    columns = _columns(src)
    id_column = cfg.id if cfg.id in columns else ("id" if "id" in columns else None)
    configured = Roles.of(cfg, (), id_column)
    if path != "-" and Path(path).suffix.lower() == ".txt" and configured.text not in columns:
        raise FeatxError(f"{path} was read as a tab-separated table whose first line is its header "
                         f"(so its column is {shown(columns[0] if columns else '')}, not "
                         f"{shown(configured.text)}). For one text per line, pass it on stdin: featx "
                         f"predict PIPELINE - < {path}")
    has_labels = all(c in columns for c in configured.labels)
    roles = dataclasses.replace(configured, pair=configured.pair if pairs else None,
                                labels=configured.labels if has_labels else (), split=None)
    regression = TASKS[task].regression or len(roles.labels) > 1
    reader = Reader(roles, drop_empty=False, targets=regression, label_sets=True, empties_listed=False)
    try:
        part = reader.read("input", [src])
        reader.finish()
        if not len(part):
            raise FeatxError(f"{src.path} holds no rows to predict")
        rows = np.arange(part.start, part.stop)
        if id_column:  # an id twice makes the predictions' rows ambiguous to join back
            _check_unique_ids(reader, {"input": rows})
        labels = None
        if has_labels:
            encoded = _labels(reader, roles, {"input": part})
            _, out = L.encode(task, encoded, {"input": rows}, tuple(label_names),
                              positions=cfg.label_names is not None, fit=False)
            labels = out["input"]
    except BaseException:
        reader.store.discard()
        raise
    store = reader.store
    ids = store.column("id", rows) if id_column else Numbered("row-", np.arange(len(rows)))
    return Inputs(ids, store.column("text", rows), store.column("pair", rows) if roles.pair else None, labels,
                  str(src.path))


def _columns(src) -> list[str]:
    """A source's columns (a JSONL file's are its records' keys: read to know them)."""
    if not src.columns:
        for _ in src.blocks([]):
            pass
    return src.columns
