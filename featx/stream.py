"""Large CSV/TSV files read in a stream (pyarrow): splits whose texts stay in the file. No torch.

`featx.data.load_dataset` reads a file whole into Python lists; past `STREAM_BYTES` a plain
CSV/TSV of texts and class labels is read here instead, a block of rows at a time:

    pass 1 (here)   every column parsed by pyarrow, checked with vectorised kernels; per row
                    only a label code (int16/int32) and, for one file, a split code (int8)
    splits          the same seeded stratified split as data.py, by those codes
    texts, ids      `Column`s: sequences of str that read the file again when asked, a block
                    at a time (the fingerprint, the cache's text datasets, the extraction's
                    windows each read them in order)

The Dataset it returns equals the one `data.py` builds from the same file (same ids, texts,
labels, split; so the same fingerprint and cache key). Anything pass 1 finds wrong, or any
file pyarrow cannot parse, is read again by `data.py`'s exact reader, which names the row
and the fix: one error message, whatever the path.
"""
from __future__ import annotations

import importlib.util
import logging
import operator
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featx.errors import FeatxError

log = logging.getLogger("featx")

STREAM_BYTES = 64 << 20  # files this large or larger are streamed, smaller ones read whole
BLOCK_BYTES = 1 << 20    # bytes of the file pyarrow parses at a time (its read-ahead holds several)
# What str.strip() strips (str.isspace()): a text of only these is empty, in both readers.
WHITESPACE = "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())


class Fallback(Exception):
    """The file needs the exact reader (data.py): something to report, or not streamable."""


@dataclass(frozen=True)
class Source:
    """A delimited file and how pyarrow parses it as featx's csv reader does: every field a
    string, nothing read as null ("NA" is a class name, "" an empty field), a header row."""
    path: Path
    delimiter: str
    quoting: str
    columns: tuple[str, ...]
    state: tuple[int, int, int]
    """(size, modification time in ns, inode) when first read: every later pass checks it."""

    def batches(self, columns: list[str]):
        """Record batches of `columns`, in file order."""
        import pyarrow as pa
        import pyarrow.csv as pv

        if _state(self.path) != self.state:  # a pass over other rows than the first one read
            raise FeatxError(f"{self.path} changed while featx was reading it (its texts are read "
                             "again from the file, a block at a time); rerun once it stays as it is")

        quoted = self.quoting != "none"
        reader = pv.open_csv(
            self.path,
            read_options=pv.ReadOptions(block_size=BLOCK_BYTES, use_threads=True),
            parse_options=pv.ParseOptions(delimiter=self.delimiter, quote_char='"' if quoted else False,
                                          double_quote=quoted, newlines_in_values=quoted,
                                          ignore_empty_lines=True),
            convert_options=pv.ConvertOptions(column_types={c: pa.string() for c in self.columns},
                                              include_columns=columns, strings_can_be_null=False,
                                              quoted_strings_can_be_null=False, null_values=[]))
        for batch in reader:
            yield batch


class Lazy(Sequence):
    """A sequence of n str produced a block at a time by `_blocks()` (lists, in order).

    Reads in increasing order (slices one after the other, or rows in increasing order) go
    through the blocks once, holding one block; a read from the start again begins a new pass;
    any other read backwards reads the whole sequence into memory once (a fine-tune's shuffled
    rows), as `data.py` would have held it."""

    def __init__(self, n: int):
        self._n = n
        self._whole: list | None = None
        self._restart()

    def _blocks(self):
        raise NotImplementedError

    def _restart(self) -> None:
        self._stream = self._blocks()
        self._block: list = []
        self._first = 0  # position of self._block[0]

    def __len__(self) -> int:
        return self._n

    def __iter__(self):
        if self._whole is not None:
            yield from self._whole
            return
        for block in self._blocks():
            yield from block

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self._n)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return self._range(start, max(start, stop))
        i = operator.index(key)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"row {key} of {self._n}")
        return self._range(i, i + 1)[0]

    def _range(self, start: int, stop: int) -> list:
        if self._whole is not None:
            return self._whole[start:stop]
        if start < self._first:
            if start == 0:
                self._restart()
            else:
                log.debug("rows read out of order: %d rows read into memory", self._n)
                self._whole = list(self)
                return self._whole[start:stop]
        out: list = []
        while start < stop:
            end = self._first + len(self._block)
            if start < end:
                out.extend(self._block[start - self._first:min(stop, end) - self._first])
                start = min(stop, end)
                continue
            block = next(self._stream, None)
            if block is None:
                raise FeatxError(f"{self} ended after {end} of its {self._n} rows: its file changed "
                                 "while featx was reading it; rerun once it stays as it is")
            self._first, self._block = end, block
        return out


class Column(Lazy):
    """One string column of the rows of a split: the file's records whose split code is
    `code` (every record when `assignment` is None), read again at each pass."""

    def __init__(self, source: Source, column: str, assignment: np.ndarray | None, code: int, n: int,
                 nbytes: int):
        self.source, self.column, self.assignment, self.code = source, column, assignment, code
        self.nbytes = nbytes  # at most this many bytes of text (the file's share): for disk estimates
        super().__init__(n)

    def __repr__(self) -> str:
        return f"column {self.column!r} of {self.source.path}"

    def _blocks(self):
        import pyarrow as pa
        import pyarrow.compute as pc

        record = 0
        for batch in self.source.batches([self.column]):
            values = batch.column(0)
            if self.assignment is not None:
                mine = self.assignment[record:record + len(values)] == self.code
                values = pc.filter(values, pa.array(mine))
            record += batch.num_rows
            if len(values):
                yield values.to_pylist()


class RowIds(Lazy):
    """The ids `data.py` numbers rows with: f"{prefix}{i}", i the record's position in the file
    (a split of one file keeps its records' numbers) or in its split."""

    def __init__(self, prefix: str, assignment: np.ndarray | None, code: int, n: int):
        self.prefix, self.assignment, self.code = prefix, assignment, code
        super().__init__(n)

    def _blocks(self, size: int = 1 << 16):
        total = self._n if self.assignment is None else len(self.assignment)
        for begin in range(0, total, size):
            numbers = np.arange(begin, min(total, begin + size))
            if self.assignment is not None:
                numbers = numbers[self.assignment[begin:begin + size] == self.code]
            if len(numbers):
                yield [f"{self.prefix}{i}" for i in numbers.tolist()]


@dataclass
class Parsed:
    """Pass 1 over one file: per record its label code (and split code, from a split column),
    the distinct raw labels; never the texts."""
    source: Source
    n: int
    codes: np.ndarray            # (n,) int16 (int32 past 32,767 labels) index into `labels`
    labels: list[str]            # distinct raw label values, first appearance first
    splits: np.ndarray | None    # (n,) int8 split codes from the split column (0 train, 1 dev, 2 test)


def source_of(path: Path, cfg, fmt: str) -> Source:
    """The Source for a file featx would read with its csv reader, or Fallback."""
    if fmt not in ("csv", "tsv") or not cfg.header or cfg.columns is not None:
        raise Fallback("not a delimited file with a header row")
    if cfg.encoding.replace("_", "-").lower() not in ("utf-8", "utf8"):
        raise Fallback(f"encoding {cfg.encoding}")
    delimiter = {None: "\t" if fmt == "tsv" else ",", "\\t": "\t"}.get(cfg.delimiter, cfg.delimiter)
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or head[:4000].count(b"\x00"):
        raise Fallback("UTF-16 or NUL bytes")  # data.py names the encoding to set
    import csv
    import io

    first = head.decode("utf-8-sig", errors="replace").split("\n", 1)[0].rstrip("\r")
    header = next(csv.reader(io.StringIO(first), delimiter=delimiter,
                             quoting=csv.QUOTE_NONE if cfg.quoting == "none" else csv.QUOTE_MINIMAL), [])
    columns = tuple(c.strip() for c in header)
    if not columns or any(not c for c in columns) or len(set(columns)) != len(columns) \
            or any(c != raw for c, raw in zip(columns, header)):
        raise Fallback("a header cell that is empty, repeated or padded")  # data.py's rules apply
    return Source(path, delimiter, cfg.quoting, columns, _state(path))


def _state(path: Path) -> tuple[int, int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


def parse(source: Source, text: str, label: str, split_column: str | None) -> Parsed:
    """Pass 1: check every text (present, not only whitespace, no NUL) and label (present),
    code the labels and split names; Fallback on anything data.py must report."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = [c for c in (text, label, split_column) if c is not None]
    if any(c not in source.columns for c in wanted):
        raise Fallback("a configured column is missing")  # data.py lists the columns there are
    index: dict[str, int] = {}
    codes, splits = [], []
    split_index: dict[str, int] = {}
    n = 0
    try:
        for batch in source.batches(wanted):
            texts = batch.column(wanted.index(text))
            if pc.any(pc.equal(pc.utf8_length(pc.utf8_trim(texts, WHITESPACE)), 0)).as_py() \
                    or pc.any(pc.match_substring(texts, "\x00")).as_py():
                raise Fallback("an empty text or a NUL byte")
            labels = batch.column(wanted.index(label))
            if pc.any(pc.equal(pc.utf8_length(pc.utf8_trim(labels, WHITESPACE)), 0)).as_py() \
                    or pc.any(pc.match_substring(labels, "\x00")).as_py():
                raise Fallback("a missing label or a NUL byte")
            encoded = pc.dictionary_encode(labels)
            local = np.array([index.setdefault(v, len(index)) for v in encoded.dictionary.to_pylist()],
                             dtype=np.int32)
            if len(index) >= 2 ** 15 and codes and codes[0].dtype == np.int16:
                codes = [c.astype(np.int32) for c in codes]  # past int16: the few blocks so far widened
            codes.append(local.astype(np.int16 if len(index) < 2 ** 15 else np.int32)[
                encoded.indices.to_numpy(zero_copy_only=False)])
            if split_column is not None:
                names = pc.dictionary_encode(batch.column(wanted.index(split_column)))
                local = np.array([split_index.setdefault(_split_code(v), len(split_index))
                                  for v in names.dictionary.to_pylist()], dtype=np.int8)
                splits.append(local[names.indices.to_numpy(zero_copy_only=False)])
            n += batch.num_rows
            if len(index) > 100_000:
                raise Fallback("more than 100,000 distinct labels: not classes")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowKeyError, UnicodeError) as exc:  # data.py names the row
        raise Fallback(f"pyarrow: {str(exc)[:200]}") from None
    names = {code: name for name, code in split_index.items()}
    split_codes = None
    if split_column is not None:  # codes -> featx's split order (0 train, 1 dev, 2 test)
        from featx.data import SPLITS

        order = np.array([SPLITS.index(names[c]) for c in range(len(names))], dtype=np.int8)
        split_codes = order[np.concatenate(splits)] if splits else np.zeros(0, np.int8)
    return Parsed(source, n, np.concatenate(codes) if codes else np.zeros(0, np.int16),
                  list(index), split_codes)


def _split_code(value: str) -> str:
    from featx.data import SPLIT_ALIASES

    key = value.strip().lower()
    if key not in SPLIT_ALIASES:
        raise Fallback("a split value that is not one featx knows")
    return SPLIT_ALIASES[key]


def streamable(cfg) -> bool:
    """Whether `load` may read this configuration (the file's size and content decide next)."""
    if importlib.util.find_spec("pyarrow") is None:
        return False
    single = [cfg.path] if cfg.path is not None else [cfg.train, cfg.dev, cfg.test]
    return (cfg.builtin is None and all(f is None or isinstance(f, str) for f in single)
            and cfg.text_pair is None and (cfg.label is None or isinstance(cfg.label, str))
            and cfg.label_sep is None and cfg.label_regex is None and cfg.label_names is None
            and not cfg.keep and cfg.max_rows is None and cfg.id is None
            and cfg.task in (None, "binary", "multiclass"))


def load(cfg, name: str, fmt_of) -> "Dataset":
    """The Dataset of a large CSV/TSV (see the module's docstring), or Fallback."""
    from featx import data as D

    if cfg.path is not None or not (cfg.dev or cfg.test):
        files = {None: cfg.path or cfg.train}
    else:
        files = {s: f for s, f in (("train", cfg.train), ("dev", cfg.dev), ("test", cfg.test)) if f}
    sizes = {s: Path(f).stat().st_size for s, f in files.items() if Path(f).is_file()}
    if len(sizes) != len(files) or sum(sizes.values()) < STREAM_BYTES:
        raise Fallback("small or missing files")
    if cfg.split_column is not None and None not in files:
        raise Fallback("a split column beside split files")
    text, label = cfg.text or "text", cfg.label if cfg.label is not None else "label"
    parsed = {s: parse(source_of(Path(f), cfg, cfg.format or fmt_of(Path(f))), text, label,
                       cfg.split_column if s is None else None) for s, f in files.items()}
    columns = D._Columns.from_config(cfg, (), None)
    task = cfg.task
    if None in parsed:  # one file: split it as data.py does
        one = parsed[None]
        if one.splits is not None:
            assignment = one.splits
        else:
            task = task or D._infer_task(_Distinct(one.labels), columns)
            if task not in ("binary", "multiclass"):
                raise Fallback(f"task {task}")
            keys = [D._class_key(v) for v in one.labels]
            rank = {k: i for i, k in enumerate(sorted(set(keys)))}
            strata = np.array([rank[k] for k in keys], dtype=one.codes.dtype)[one.codes]
            assignment = D.stratified_assignment(strata, cfg.dev_fraction, cfg.test_fraction, cfg.split_seed)
            del strata
        parts = {split: (one, assignment, code) for code, split in enumerate(D.SPLITS)
                 if (assignment == code).any()}
        numbered = "record" if one.splits is None else "split"
    else:
        parts = {split: (p, None, 0) for split, p in parsed.items()}
        numbered = "split"
    if "train" not in parts:
        raise Fallback("no training rows")  # data.py says the training split is empty
    # Per split, its rows' label codes (2 bytes a row: the only per-row data besides the split codes)
    in_split = {split: (p.codes if a is None else p.codes[a == code]) for split, (p, a, code) in parts.items()}
    train_values = [parts["train"][0].labels[c] for c in np.unique(in_split["train"])]
    task = task or D._infer_task(_Distinct(train_values), columns)
    if task not in ("binary", "multiclass"):
        raise Fallback(f"task {task}")
    names = tuple(sorted({D._class_key(v) for v in train_values}, key=D._natural_key))
    if len(names) < 2 or (task == "binary" and len(names) != 2):
        raise Fallback("too few or too many classes")  # data.py says which
    index = {n: i for i, n in enumerate(names)}
    splits = {}
    for split in D.SPLITS:
        if split not in parts:
            continue
        p, a, code = parts[split]
        lookup = np.array([index.get(D._class_key(v), -1) for v in p.labels], dtype=np.int64)
        labels = lookup[in_split.pop(split)]
        if (labels < 0).any():
            raise Fallback("a label of dev or test that train lacks")  # data.py names the row
        n = len(labels)
        prefix = "row-" if numbered == "record" else f"{split}-"
        ids = RowIds(prefix, a, code, n) if numbered == "record" else RowIds(prefix, None, 0, n)
        share = p.source.path.stat().st_size * n // max(p.n, 1)
        splits[split] = D.Split(split, ids, Column(p.source, text, a, code, n, share), None, labels)
    paths = [str(f) for f in files.values()]
    log.info("read %s in a stream (%s rows): texts stay in the file until the cache holds them",
             ", ".join(paths), f"{sum(len(s) for s in splits.values()):,}")
    return D.Dataset(name, task, names, splits, ", ".join(paths), tuple(str(Path(f)) for f in paths))


@dataclass
class _Distinct:
    """What data._infer_task reads of the rows: their label values (here: the distinct ones,
    which decide the task as all of them would)."""
    labels: list
