"""Datasets: files (or a built-in) -> `(ids, texts | text pairs, labels, task)` per split. No torch.

It owns the `Split` and `Dataset` a cache is built from and their fingerprints, the assembly of
one from a pipeline's [data] (whole, or large files and folders in a stream), and predict's reading
of new texts. The parts are featx.readers (files -> tables), featx.builtin (built-in datasets),
featx.labels (rows and labels, checked) and featx.splits (rows -> train / dev / test).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from featx import spans, stream, streamformats, streamlabels
from featx.builtin import BUILTINS
from featx.config import DataConfig
from featx.errors import FeatxError, shown
from featx.labels import (SPLIT_ALIASES, Columns, LabelEncoder, check_unique_ids, class_key, dropped_per_split,
                          empty_message, infer_task, read_label_names)
from featx.readers import SUFFIX_FORMATS, Table, folder_files, names_file, read_table, read_tables
from featx.splits import SPLITS, check_own_split, label_assignment, split_single, stratified_assignment
from featx.tasks import TASKS

log = logging.getLogger("featx")


@dataclass(frozen=True)
class Split:
    """One split: row-aligned ids, texts (and second texts for pairs), labels, kept columns.

    labels: binary/multiclass (n,) int64 class indices; multilabel (n, n_labels) uint8;
    regression (n, n_targets) float64 on the original scale.
    """
    name: str
    ids: list[str]
    texts: list[str]
    text_pairs: list[str] | None
    labels: np.ndarray
    columns: dict[str, list[str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows) -> "Split":
        """The split restricted to `rows` (positions), in that order."""
        pick = lambda values: (values.take(rows) if isinstance(values, stream.Lazy)  # noqa: E731
                               else [values[i] for i in rows])
        return Split(self.name, pick(self.ids), pick(self.texts),
                     None if self.text_pairs is None else pick(self.text_pairs), self.labels[rows],
                     {k: pick(v) for k, v in self.columns.items()})

    def fingerprint(self) -> str:
        """sha256 of everything the cache depends on: ids, texts, pairs, labels. Computed once
        (the rows never change; a streamed split would read its file again)."""
        if "_fingerprint" not in self.__dict__:
            # A streamed split says how its own is computed (data._fingerprint).
            self.__dict__["_fingerprint"] = self.__dict__.pop("_fingerprint_of", self._hash)()
        return self.__dict__["_fingerprint"]

    def with_fingerprint(self, fingerprint) -> "Split":
        """This split, its fingerprint given instead of hashed from its rows: a str, or how to
        compute it when first asked for (rows read from elsewhere that are known to be these, or
        a streamed file's digest). The split is frozen; the fingerprint is a cache of it."""
        self.__dict__["_fingerprint_of" if callable(fingerprint) else "_fingerprint"] = fingerprint
        return self

    def _hash(self) -> str:
        h = hashlib.sha256()
        h.update(self.name.encode())
        for part in (self.ids, self.texts, self.text_pairs or []):
            for piece in json_pieces(part):
                h.update(piece)
        h.update(str(self.labels.dtype).encode() + repr(self.labels.shape).encode())
        h.update(np.ascontiguousarray(self.labels))  # the array's bytes, not a copy of them
        # The kept columns are stored in the cache too: keep = ["fine"] after keep = [] (or an
        # edited kept value) is another cache, not the first one lacking them. Nothing is added
        # without them, so such caches keep their keys.
        for name in sorted(self.columns):
            h.update(json.dumps(["keep", name]).encode())
            for piece in json_pieces(self.columns[name]):
                h.update(piece)
        return h.hexdigest()


JSON_BLOCK = 1 << 16


def json_pieces(values):
    """The UTF-8 of `json.dumps(list(values), ensure_ascii=False)`, a block of values at a time
    (the same bytes, never the whole text of millions of rows at once)."""
    if not len(values):
        yield b"[]"
        return
    for start in range(0, len(values), JSON_BLOCK):
        inner = json.dumps(list(values[start:start + JSON_BLOCK]), ensure_ascii=False)[1:-1]
        yield (", " if start else "[").encode() + inner.encode("utf-8")
    yield b"]"


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
    """Rows dropped for an empty or missing text (data.drop_empty), per split ("all": rows of one
    file featx split itself, dropped before the split)."""

    @property
    def pairs(self) -> bool:
        return next(iter(self.splits.values())).text_pairs is not None

    def fingerprint(self) -> str:
        return dataset_fingerprint(self.task, self.label_names,
                                   [(name, split.fingerprint()) for name, split in self.splits.items()])


def dataset_fingerprint(task: str, label_names, splits: list[tuple[str, str]]) -> str:
    """sha256 of the task, the label names and each split's fingerprint (a cache checks its own
    metadata against it on open)."""
    h = hashlib.sha256(json.dumps([task, list(label_names)]).encode())
    for name, fingerprint in splits:
        h.update(f"{name}:{fingerprint}".encode())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Tables -> Dataset


def load_dataset(cfg: DataConfig, name: str = "dataset") -> Dataset:
    """Read, validate, split and encode the dataset a pipeline describes."""
    if cfg.builtin is not None:
        if cfg.builtin not in BUILTINS:
            raise FeatxError(f"unknown built-in dataset {shown(cfg.builtin)}; choose one of: "
                             + ", ".join(repr(b) for b in BUILTINS))
        builtin = BUILTINS[cfg.builtin]()
        tables = {None: builtin.table}
        task, keep, source = cfg.task or builtin.task, cfg.keep or builtin.keep, f"builtin:{cfg.builtin}"
        if cfg.label_names is not None and TASKS[task].regression:  # DataConfig checks a task given
            raise FeatxError(f"data.label_names names the classes of one label column, and built-in "
                             f"{shown(cfg.builtin)} is a regression (targets, not classes): unset "
                             "data.label_names")
        files = (builtin.table.path,)
        id_column = cfg.id or "id"
        cfg = dataclasses.replace(cfg, label=cfg.label or builtin.label)
    else:
        check_splits_apart(cfg)
        if _streamable(cfg):
            try:
                return _load_streamed(cfg, name)
            except stream.Fallback as why:
                log.debug("reading the data whole (not streamed): %s", why)
        files = {"train": cfg.train, "dev": cfg.dev, "test": cfg.test}
        if cfg.path is not None or not (cfg.dev or cfg.test):
            tables = {None: read_tables(cfg.path or cfg.train, cfg)}
        else:
            tables = {s: read_tables(f, cfg) for s, f in files.items() if f}
        task, keep, id_column = cfg.task, cfg.keep or (), cfg.id
        source = ", ".join(t.path for t in tables.values())
        files = tuple(str(f) for spec in (cfg.path, cfg.train, cfg.dev, cfg.test) if spec
                      for p in ([spec] if isinstance(spec, str) else spec)
                      for f in (*folder_files(Path(p)), *names_file(Path(p))))
    columns = Columns.from_config(cfg, keep, id_column)
    empty = {s: columns.empty_rows(t) for s, t in tables.items()}
    if any(empty.values()) and not cfg.drop_empty:
        raise FeatxError(empty_message(tables, empty, columns))
    raw = {s: columns.extract(t, skip=set(empty[s])) for s, t in tables.items()}
    dropped = dropped_per_split(tables, empty, columns)
    if dropped:
        log.warning("data.drop_empty: dropped %d row(s) with an empty or missing text (%s)",
                    sum(dropped.values()), ", ".join(f"{s} {n}" for s, n in dropped.items()))
    if None in raw:  # one file: split by column or by a seeded stratified split
        if columns.split is None:
            # featx splits the file itself: the task is every row's, not the training part's,
            # which the split seed drew (21 distinct integers, the 21st on one row: regression
            # under some seeds, and under others that row's class missing from train, an error).
            task = task or infer_task(raw[None], columns)
        raw = split_single(raw[None], cfg, columns, task)
    for split_name, rows in raw.items():  # no id column: number the rows of each split file
        if rows.ids and rows.ids[0] is None:
            rows.ids = [f"{split_name}-{i}" for i in range(len(rows.ids))]
    if "train" not in raw or not raw["train"].ids:
        raise FeatxError(f"{source}: the training split is empty")
    for split_name in ("dev", "test"):  # a file of a header only (or of rows drop_empty dropped)
        if split_name in raw and not raw[split_name].ids:
            given = tables[split_name].path if split_name in tables else source
            raise FeatxError(f"{given}: the {split_name} split holds no rows"
                             + (" (data.drop_empty dropped them all)" if dropped.get(split_name) else "")
                             + f"; give it rows, or leave data.{split_name} unset (the probe then "
                             "chooses by cross-validation on train)")
    task = task or infer_task(raw["train"], columns)
    encoder = LabelEncoder.fit(raw["train"], columns, task, cfg,
                               others=[rows for name, rows in raw.items() if name != "train"])
    splits = {}
    for split_name in SPLITS:
        if split_name not in raw:
            continue
        rows = raw[split_name]
        if cfg.max_rows is not None:
            rows = rows.head(cfg.max_rows)
        splits[split_name] = Split(split_name, rows.ids, rows.texts, rows.pairs,
                                   encoder.encode(rows, split_name), rows.kept)
    check_unique_ids(raw)
    if isinstance(cfg.label_names, str):
        files += (cfg.label_names,)
    return Dataset(name, task, encoder.names, splits, source, files, dropped)


# ---------------------------------------------------------------------------------------------
# Large files, read in a stream (featx.stream, featx.streamformats)


def listed_files(cfg: DataConfig) -> set[str] | None:
    """The data files the pipeline's [data] names now (a folder's as they are listed now, with a
    saved dataset's names file and a label_names file), as `Dataset.files` holds them; None for a
    built-in (its files ship with featx). A later stage compares them with those extract read:
    a shard added to a folder is no change of the files extract read."""
    if cfg.builtin is not None:
        return None
    files = {str(f) for spec in (cfg.path, cfg.train, cfg.dev, cfg.test) if spec
             for p in ([spec] if isinstance(spec, str) else spec)
             for f in (*folder_files(Path(p)), *names_file(Path(p)))}
    return files | ({cfg.label_names} if isinstance(cfg.label_names, str) else set())


def check_splits_apart(cfg: DataConfig) -> None:
    """data.train, dev and test are files of their own: one file (or a copy of it) given as two
    splits made the test rows training rows, and the verdict scored on what the models fit."""
    import filecmp

    given = {s: [f for spec in ([v] if isinstance(v, str) else v) for f in folder_files(Path(spec)) if f.is_file()]
             for s, v in (("train", cfg.train), ("dev", cfg.dev), ("test", cfg.test)) if v}
    same = lambda x, y: x.samefile(y) or (  # noqa: E731 (bytes compared only for files of one size)
        x.stat().st_size == y.stat().st_size and filecmp.cmp(x, y, shallow=False))
    # Within one split: a file listed twice, in a folder listed beside it, or beside its copy,
    # made every row two rows, which featx's own split then put in train and test alike. Bytes
    # are compared for the files listed themselves only: two empty shards of a folder are alike.
    for split, v in (("path", cfg.path), ("train", cfg.train), ("dev", cfg.dev), ("test", cfg.test)):
        specs = [Path(f) for f in ([v] if isinstance(v, str) else v or ())]
        files = [(f, spec.is_file()) for spec in specs for f in folder_files(spec) if f.is_file()]
        for i, (x, x_listed) in enumerate(files):
            for y, y_listed in files[i + 1:]:
                one = x.samefile(y)
                if one or (x_listed and y_listed and same(x, y)):
                    raise FeatxError(f"data.{split} lists the same file twice ({x}"
                                     + ("" if one else f" and its copy {y}") + "): every row would "
                                     "be read twice; list each file (or folder) once")
    splits = list(given)
    for i, a in enumerate(splits):
        for b in splits[i + 1:]:
            for x in given[a]:
                for y in given[b]:
                    if same(x, y):
                        raise FeatxError(f"data.{a} and data.{b} hold the same file ({x}"
                                         + ("" if x.samefile(y) else f" and its copy {y}") + f"): the {b} rows "
                                         f"would be {a} rows; give each split its own rows")


def _streamable(cfg: DataConfig) -> bool:
    """Whether `_load_streamed` may read this configuration (the files' size and content
    decide next): one file or folder per split of texts (or text pairs), an id column or none,
    kept columns or none, and class labels, label sets or regression targets (several label
    columns: not classes, nor a data.label_regex, which pass 1 applies to one column's distinct
    values), and pyarrow installed."""
    if importlib.util.find_spec("pyarrow") is None:
        return False
    single = [cfg.path] if cfg.path is not None else [cfg.train, cfg.dev, cfg.test]
    task = None if cfg.task is None else TASKS[cfg.task]
    one_label = cfg.label is None or isinstance(cfg.label, str)
    return (cfg.builtin is None and all(f is None or isinstance(f, str) for f in single)
            and (one_label or task is None or not task.classes)
            and (one_label or cfg.label_regex is None))


def _passes(cfg: DataConfig, columns: Columns) -> list[stream.Wanted]:
    """How pass 1 reads the labels, in the order to try: as codes of their distinct values
    (classes, or label sets; a task unset may turn out a regression of few distinct values),
    then, past the classes' limit with the task unset, as numbers; as numbers at once for a
    regression or several label columns (plain numbers when the task is inferred from them).
    With data.label_regex only as codes: the class is the regex's group of a raw label, which
    no number read from the file is."""
    task = None if cfg.task is None else TASKS[cfg.task]
    wanted = stream.Wanted(columns.text, columns.labels, pair=columns.pair, id=columns.id,
                           blank_labels=columns.label_sep is not None, keep=columns.keep,
                           label_sets=columns.label_sep is not None or (task is not None and task.thresholded))
    if columns.label_regex is not None:
        return [wanted]
    if (task is not None and task.regression) or len(columns.labels) > 1:
        return [dataclasses.replace(wanted, targets=True, plain=task is None)]
    if task is None and columns.label_sep is None:
        return [wanted, dataclasses.replace(wanted, targets=True, plain=True)]
    return [wanted]


def _for(wanted: stream.Wanted, cfg: DataConfig, split) -> stream.Wanted:
    """What to read of the file of `split` (None: one file, whose split column featx reads)."""
    return dataclasses.replace(wanted, split=cfg.split_column if split is None else None)


def _load_streamed(cfg: DataConfig, name: str) -> Dataset:
    """The Dataset of large files (featx.stream): the same ids, texts, labels and splits as the
    whole-file reader builds from them; its fingerprint is the files' bytes' (`_fingerprint`).
    stream.Fallback for anything that reader must report or read."""
    sources = streamformats.sources_of(cfg)
    passes = _passes(cfg, Columns.from_config(cfg, cfg.keep or (), cfg.id))
    for k, wanted in enumerate(passes):
        try:
            parsed = {s: src.parse(_for(wanted, cfg, s)) for s, src in sources.items()}
            break
        except stream.TooManyLabels:
            if k == len(passes) - 1:
                raise
    # Each file's digest when a fingerprint is first asked for (a load that needs no key reads
    # no more of the file), then kept for its other splits.
    digests = {s: functools.cache(functools.partial(spans.digest, src)) for s, src in sources.items()}
    return _streamed(cfg, name, parsed, digests)[0]


@dataclass(frozen=True)
class Share:
    """A torchrun rank's share of a streamed dataset (`load_share`)."""
    dataset: Dataset
    """Every row: ids, labels, fingerprint, as one process reads them (texts stay in the files)."""
    mine: Dataset
    """This rank's rows only: its texts are read from its own bytes of each file."""
    offsets: dict[str, int]
    """Per split, where this rank's rows begin among the split's rows."""


def load_share(cfg: DataConfig, name: str, rank: int, size: int, gather) -> Share | None:
    """This rank's contiguous share of the rows of large files, each rank parsing only about
    1/size of every file (`spans.share_of`: byte ranges of CSV/TSV, JSONL and label-text, rows
    of Parquet and Arrow) and the ranks exchanging what the split and the classes need: per row
    a label code (or its targets), a split code and an id's hash, never a text. `gather` is the
    collective that returns every rank's value (torch.distributed.all_gather_object).

    None, alike on every rank, when the data is not streamed or cannot be cut with certainty:
    every rank then reads it whole (`load_dataset`, which streams what it can).

    None for data.max_rows too: each split's first rows lie in the first ranks' bytes, so the
    other ranks' shares would hold no row of a split and rank 0 would compute them all. Every
    rank streams the file alone instead (pass 1 over all of it, the texts of the first rows
    only), and the ranks deal those rows."""
    check_splits_apart(cfg)
    if not _streamable(cfg) or cfg.max_rows is not None:
        return None
    try:
        everyone = spans.agreed(gather, lambda: streamformats.sources_of(cfg))
        sources = everyone[rank]  # each its own (a host may hold its own copy, at the same path)
        for s, src in sources.items():
            sizes = {tuple(state[0] for state in other[s].states) for other in everyone}
            if len(sizes) > 1:
                raise FeatxError(f"the ranks see different files at {src.path} (sizes "
                                 f"{sorted(sizes)}): give every host the same files, or put them "
                                 "where every host reads them")
        cut = {s: spans.share_of(src, rank, size, gather) for s, src in sources.items()}
        if None in cut.values():
            return None
        passes = _passes(cfg, Columns.from_config(cfg, cfg.keep or (), cfg.id))
        for k, wanted in enumerate(passes):
            last = k == len(passes) - 1

            def parse(s, src, wanted=wanted, last=last):
                try:
                    return dataclasses.replace(src, span=cut[s]).parse(_for(wanted, cfg, s))
                except stream.TooManyLabels:
                    if last:
                        raise
                    return None  # every rank reads its share again, as numbers
            parts = {s: spans.agreed(gather, lambda s=s, src=src: parse(s, src)) for s, src in sources.items()}
            if any(part is None for p in parts.values() for part in p):
                continue
            try:  # the same on every rank (each merges every rank's parts)
                parsed = {s: spans.merge(p, sources[s], stream.label_limit(wanted)) for s, p in parts.items()}
                break
            except stream.TooManyLabels:
                if last:
                    raise
        digests = {s: spans.digest(src, rank, size, gather) for s, src in sources.items()}
        first = {s: sum(q.n for q in p[:rank]) for s, p in parts.items()}
        share = {s: (dataclasses.replace(src, span=cut[s]), first[s], first[s] + parts[s][rank].n,
                     parts[s][rank].nbytes) for s, src in sources.items()}
        dataset, mine, offsets = _streamed(cfg, name, parsed, digests, share)
    except stream.Fallback as why:
        log.debug("the data is read whole by every rank (not sharded): %s", why)
        return None
    return Share(dataset, mine, offsets)


def _streamed(cfg: DataConfig, name: str, parsed: dict, digests: dict, share: dict | None = None):
    """(whole Dataset, this rank's Dataset or None, per split the rank's first row) from pass 1
    over every file (`parsed`, whole-file codes or targets) and their digests. `share`: per
    file, this rank's span Source and its records [lo, hi)."""
    columns = Columns.from_config(cfg, cfg.keep or (), cfg.id)
    if any(isinstance(v, str) and ("\n" in v or "\r" in v) for p in parsed.values() for v in p.labels):
        # A label of several lines: most likely a quote never closed, the rest of the file read
        # as one value, which the whole-file reader names (featx.readers.read_delimited).
        raise stream.Fallback("a label holding a line break")
    if columns.label_regex is not None:  # once per distinct raw label, not per row
        parsed = {s: streamlabels.extracted(p, columns) for s, p in parsed.items()}
        columns = dataclasses.replace(columns, label_regex=None)  # the labels are its groups now
    if columns.id is not None:  # featx.labels.check_unique_ids, over every split: by the ids' hashes
        hashes = np.sort(np.concatenate([p.ids for p in parsed.values()]))
        if (hashes[1:] == hashes[:-1]).any():
            raise stream.Fallback("two ids of one hash")  # the same id twice, named with its rows, or not
    parts, numbered = _stream_splits(cfg, columns, parsed)
    # Per split, which records of its file are its rows (None: all of them).
    mask = {split: None if a is None else a == code for split, (p, a, code) in parts.items()}
    # As read whole: every record's labels when featx splits one file itself, else train's.
    seeded = None in parsed and parsed[None].splits is None
    task = cfg.task or (streamlabels.task_of(parsed[None], None, columns) if seeded
                        else streamlabels.task_of(parts["train"][0], mask["train"], columns))
    fixed = _label_names(cfg)
    # data.max_rows: as read whole, the names are fitted on every row, only the first are encoded.
    if TASKS[task].classes:
        names, labels = streamlabels.class_labels(task, parts, mask, fixed, first=cfg.max_rows)
    elif TASKS[task].thresholded:
        names, labels = streamlabels.label_sets(parts, mask, columns, fixed, first=cfg.max_rows)
    elif TASKS[task].regression:
        names, labels = columns.labels, streamlabels.regression_labels(parts, mask)
    else:
        raise stream.Fallback(f"task {task}")
    if cfg.max_rows is not None:  # each split's first rows
        parts, labels = _first_rows(parts, labels, cfg.max_rows)
    whole, mine, offsets = {}, {}, {}
    for split in SPLITS:
        if split not in parts:
            continue
        p, a, code = parts[split]
        key = None if None in parsed else split  # the file the split's rows are in
        by_record = numbered == "record"
        whole[split] = _stream_split(split, p.source, columns, a, code, labels=labels[split], records=p.n,
                                     nbytes=p.nbytes, by_record=by_record)
        reading = p.source.reading() + [columns.text]
        reading += [["pair", columns.pair]] if columns.pair is not None else []
        reading += [["id", columns.id]] if columns.id is not None else []
        reading += [["keep", list(columns.keep)]] if columns.keep else []  # the cache stores them
        # A kept ClassLabel column's values are its names (dataset_info.json), not the Arrow files' bytes.
        named = {k: list(v) for k, v in getattr(p.source, "names", ()) if k in columns.keep}
        reading += [["keep names", named]] if named else []
        _fingerprint(whole[split], digests[key], a, code, reading=reading)
        if share is not None:
            source, lo, hi, nbytes = share[key]
            offsets[split] = lo if a is None else int((a[:lo] == code).sum())
            count = hi - lo if a is None else int((a[lo:hi] == code).sum())
            rows = labels[split][offsets[split]:offsets[split] + count]
            mine[split] = _stream_split(split, source, columns, None if a is None else a[lo:hi], code,
                                        labels=rows, records=hi - lo, nbytes=nbytes, by_record=by_record,
                                        start=lo if by_record else offsets[split])
            # A shard's splits are never compared with a file's: a name, not a pass over its texts.
            mine[split].with_fingerprint(f"{whole[split].fingerprint()}:rows-{offsets[split]}+{len(rows)}")
    dropped = _dropped(parsed, columns)
    if dropped:  # as read whole
        log.warning("data.drop_empty: dropped %d row(s) with an empty or missing text (%s)",
                    sum(dropped.values()), ", ".join(f"{s} {n}" for s, n in dropped.items()))
    # As the whole-file reader names them: a folder's files joined by " + ", the splits' by ", ".
    source = ", ".join(" + ".join(str(f) for f in p.source.files) for p in parsed.values())
    paths = tuple(str(f) for p in parsed.values() for f in (*p.source.files, *names_file(p.source.path)))
    paths += (cfg.label_names,) if isinstance(cfg.label_names, str) else ()  # as read whole: its names are data
    log.info("read %s in a stream (%s rows): texts stay in the files until the cache holds them",
             source, f"{sum(len(s) for s in whole.values()):,}")
    make = lambda splits: Dataset(name, task, names, splits, source, paths, dropped)  # noqa: E731
    return make(whole), (make(mine) if share is not None else None), offsets


def _dropped(parsed: dict, columns: Columns) -> dict[str, int]:
    """The records data.drop_empty dropped (`stream.Parsed.dropped`), per split as the whole-file
    reader counts them (`dropped_per_split`): a split file's under its split, a split column's
    under the split they name, one file featx splits itself under "all"."""
    counts: dict[str, int] = {}
    for split, p in parsed.items():
        for value, n in p.dropped.items():
            if split is None and columns.split is not None:
                name = SPLIT_ALIASES.get(value.strip().lower())
                if name is None:
                    raise stream.Fallback("a dropped row's split value featx does not know")  # named with its row
            else:
                name = split or "all"
            counts[name] = counts.get(name, 0) + n
    return counts


def _label_names(cfg: DataConfig) -> tuple[str, ...] | None:
    """data.label_names (a list, or a file of one name a line), read as LabelEncoder.fit reads
    it; Fallback for a file that is not there, or names it refuses (a name twice, a blank
    name, a file not UTF-8): the whole-file reader reports them, in its turn."""
    try:
        return read_label_names(cfg.label_names)
    except FeatxError:
        raise stream.Fallback("data.label_names refused") from None


def _stream_splits(cfg: DataConfig, columns: Columns, parsed: dict):
    """(per split (Parsed, its records' split codes or None, its code), how rows are numbered):
    one file split as the whole-file reader splits it, or one file per split."""
    if None not in parsed:
        if any(p.n == 0 for p in parsed.values()):
            raise stream.Fallback("a split file of no rows")  # the whole-file reader says so
        return {split: (p, None, 0) for split, p in parsed.items()}, "split"
    one = parsed[None]
    if one.splits is not None:  # the split column's values -> 0 train, 1 dev, 2 test
        known = [SPLIT_ALIASES.get(v.strip().lower()) for v in one.split_values]
        if None in known:
            raise stream.Fallback("a split value featx does not know")  # named with its row
        assignment = np.array([SPLITS.index(k) for k in known], dtype=np.int8)[one.splits]
    else:  # featx.splits.split_single: strata of the task of every row's labels
        # As featx.splits.split_single: every row's task, to stratify by (its warning, once, is
        # the caller's, which keeps the same task).
        task = cfg.task or streamlabels.task_of(one, None, columns, warn=False)
        if TASKS[task].thresholded:  # iterative stratification over the label sets
            assignment = label_assignment(task, streamlabels.split_matrix(one, columns), cfg.dev_fraction,
                                          cfg.test_fraction, cfg.split_seed)
        else:
            if TASKS[task].classes and one.codes is not None:
                keys = [class_key(v) for v in one.labels]
                rank = {k: i for i, k in enumerate(sorted(set(keys)))}
                strata = np.array([rank[k] for k in keys], dtype=one.codes.dtype)[one.codes]
            elif TASKS[task].regression:  # deciles of the first target (featx.splits._strata)
                values = streamlabels.targets(one)[:, 0]
                strata = np.searchsorted(np.quantile(values, np.linspace(0, 1, 11)[1:-1]), values)
            else:
                raise stream.Fallback(f"task {task}")
            assignment = stratified_assignment(strata, cfg.dev_fraction, cfg.test_fraction, cfg.split_seed)
        check_own_split(assignment, cfg)
    parts = {split: (one, assignment, code) for code, split in enumerate(SPLITS) if (assignment == code).any()}
    if "train" not in parts:
        raise stream.Fallback("no training rows")  # the whole-file reader says so
    return parts, "record" if one.splits is None else "split"


def _first_rows(parts: dict, labels: dict, max_rows: int) -> tuple[dict, dict]:
    """(parts, labels) of only each split's first `max_rows` rows (data.max_rows), as the
    whole-file reader keeps them. The records past them get split code -1, no split's: its
    Column reads no text of theirs, and its fingerprint (which hashes the codes) is not the
    whole split's. A split's own file is given codes (all 0, then -1) only when it holds more."""
    cut = {}  # id of a Parsed -> its records' codes, each split's records past its first at -1
    for split, (p, a, code) in parts.items():
        if a is None and p.n <= max_rows:
            continue
        # One file's splits share one array of codes (an int8 per record, as pass 1 already holds).
        codes = cut.setdefault(id(p), np.zeros(p.n, np.int8) if a is None else a.copy())
        codes[np.flatnonzero(codes == code)[max_rows:]] = -1
    return ({split: (p, cut.get(id(p), a), code) for split, (p, a, code) in parts.items()},
            {split: rows[:max_rows].copy() for split, rows in labels.items()})  # not a view of all


def _stream_split(split: str, source, columns: Columns, assignment, code: int, *, labels: np.ndarray,
                  records: int, nbytes: int, by_record: bool, start: int = 0) -> Split:
    """A Split whose texts (and second texts, ids and kept columns) are read from `source`, a
    block at a time, or whose ids are numbered. `records`: how many records `assignment` (or
    the split) covers, holding at most `nbytes` of text. One file split by featx numbers its
    rows in the file (`by_record`); a split's own file or column, in the split."""
    n = len(labels)
    share = nbytes * n // max(records, 1)  # its records' share of the bytes (for disk estimates)
    if columns.id is not None:
        ids = stream.IdColumn(source, columns.id, assignment, code, n, nbytes=share)
    elif by_record:
        ids = stream.RowIds("row-", assignment, code, n, start=start)
    else:
        ids = stream.RowIds(f"{split}-", None, 0, n, start=start)
    pairs = None if columns.pair is None else stream.Column(source, columns.pair, assignment, code, n, nbytes=share)
    kept = {k: stream.KeptColumn(source, k, assignment, code, n, nbytes=share) for k in columns.keep}
    return Split(split, ids, stream.Column(source, columns.text, assignment, code, n, nbytes=share), pairs, labels,
                 kept)


def _fingerprint(split: Split, file_digest, assignment, code: int, *, reading: list) -> None:
    """A streamed split's fingerprint: the digest of its file's bytes (`spans.digest`, which any
    number of ranks compute alike without reading the whole file each), how its texts are read
    from them (`reading`: the format, its options, the text column), which rows of the file
    are its (`assignment`), and its labels. Not the whole-file reader's hash of ids and texts,
    which one pass over every text would take: the same file read whole has another key.
    `file_digest`: the digest, or how to compute it when first asked for."""
    def compute() -> str:
        digest = file_digest() if callable(file_digest) else file_digest
        h = hashlib.sha256(json.dumps(["stream-2", split.name, digest, code, reading]).encode())
        if assignment is not None:
            h.update(np.ascontiguousarray(assignment))
        h.update(str(split.labels.dtype).encode() + repr(split.labels.shape).encode())
        h.update(np.ascontiguousarray(split.labels))
        return h.hexdigest()
    split.with_fingerprint(compute)


# ---------------------------------------------------------------------------------------------
# New texts to predict on (labels optional)


@dataclass(frozen=True)
class Inputs:
    """Rows to predict: ids, texts (and pairs), and their labels when the file has them."""
    ids: list[str]
    texts: list[str]
    text_pairs: list[str] | None
    labels: np.ndarray | None
    """Encoded like the cache's labels (class indices, 0/1 rows, targets); None when absent."""
    source: str


def read_inputs(cfg: DataConfig, path: str, *, task: str, label_names, pairs: bool) -> Inputs:
    """Read a file of new texts with the pipeline's column settings; `path` "-" reads one text
    per line from stdin. Labels are read and checked against the cache's names when present."""
    import sys

    if path == "-":
        texts = [line.rstrip("\n") for line in sys.stdin if line.strip()]
        if pairs:
            raise FeatxError("this pipeline classifies text pairs; stdin gives single texts: pass "
                             "a file with both columns")
        table = Table("<stdin>", ["text"], [{"text": t} for t in texts], list(range(1, len(texts) + 1)))
        cfg = dataclasses.replace(cfg, text="text", text_pair=None, id=None)
    else:
        suffix_known = Path(path).suffix.lower() in SUFFIX_FORMATS
        table = read_table(path, dataclasses.replace(cfg, format=None if suffix_known else cfg.format))
    if not table.rows:
        raise FeatxError(f"{table.path} holds no rows to predict")
    id_column = cfg.id if cfg.id in table.columns else ("id" if "id" in table.columns else None)
    configured = Columns.from_config(cfg, (), id_column)
    if path != "-" and Path(path).suffix.lower() == ".txt" and configured.text not in table.columns:
        raise FeatxError(f"{path} was read as a tab-separated table whose first line is its header "
                         f"(so its column is {shown(table.columns[0] if table.columns else '')}, not "
                         f"{shown(configured.text)}). For one text per line, pass it on stdin: featx "
                         f"predict PIPELINE - < {path}")
    has_labels = all(c in table.columns for c in configured.labels)
    # Labels only when the file has them, no split column, a second text only for a pair pipeline.
    columns = dataclasses.replace(configured, pair=configured.pair if pairs else None,
                                  labels=configured.labels if has_labels else (), split=None)
    rows = columns.extract(table)
    if id_column:  # as in a dataset: an id twice makes the predictions' rows ambiguous to join back
        check_unique_ids({"input": rows})
    ids = rows.ids if id_column else [f"row-{i}" for i in range(len(rows.texts))]
    labels = None
    if has_labels:
        labels = LabelEncoder.from_names(task, tuple(label_names), columns,
                                         positions=cfg.label_names is not None).encode(rows, "input")
    return Inputs(ids, rows.texts, rows.pairs, labels, table.path)
