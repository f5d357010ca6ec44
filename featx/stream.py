"""Large files read in a stream, a block of rows at a time. No torch.

`featx.data.load_dataset` reads a file whole into Python lists; past `STREAM_BYTES` a file (or
folder) of texts (or text pairs), ids or none, and class labels, label sets or regression
targets is read with these pieces instead (data.py assembles them):

    Source          one input and how to read it a block at a time: here a CSV/TSV file (parsed by
                    pyarrow, every field a string); featx.streamformats holds JSONL, label-text,
                    Parquet and saved Hugging Face datasets. Each has `parse` (pass 1), `values`
                    (a column's values again, a block at a time), `files` and `states`
    parse           pass 1 (`Wanted`: what of each record): every row checked; per row only a
                    label code (int16) and a split column's code (int8), or its regression
                    targets (float64), and its id's 8-byte hash, never a text (`Codes` numbers
                    the distinct values; `Pass` keeps a source's blocks)
    Column, IdColumn, KeptColumn, RowIds
                    sequences of str that read the file again (or number rows) when asked, a
                    block at a time: the fingerprint, the cache's text datasets and the
                    extraction's windows each read them in order

Anything pass 1 finds wrong, or any file it cannot parse, raises `Fallback`: data.py's exact
reader reads the file again and names the row and the fix, so a bad file gives one error
message, whatever the path.
"""
from __future__ import annotations

import functools
import io
import json
import logging
import operator
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from featx.errors import FeatxError
from featx.labels import MAX_TARGET, MIN_TARGET, PLAIN_NUMBER

log = logging.getLogger("featx")

STREAM_BYTES = 64 << 20  # files this large or larger are streamed, smaller ones read whole
# Bytes of the file pyarrow parses at a time. Its read-ahead holds about 40 blocks: at 4 MiB
# its pool peaked at 150 MB against 40 MB, for no faster a read (docs/benchmarks.md, Scale).
BLOCK_BYTES = 1 << 20
# pyarrow refuses a record longer than a block: a pass meeting one starts again with blocks 4x
# larger (skipping the rows it gave), up to this; a record longer still is the exact reader's.
MAX_BLOCK_BYTES = 16 << 20


# What str.strip() strips (str.isspace()): a text of only these is empty, in both readers. Written
# out, since finding them (every code point tested) took 0.4 s a process; tests/test_stream.py
# checks it against this Python's str.isspace().
WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
              "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


def threshold() -> int:
    """STREAM_BYTES, or the environment's FEATX_STREAM_BYTES (0 streams every file that can be:
    how the torchrun tests share a small file between ranks)."""
    raw = os.environ.get("FEATX_STREAM_BYTES")
    if raw is None:
        return STREAM_BYTES
    if not (raw.strip().isascii() and raw.strip().isdigit()):  # "²".isdigit(), but int("²") fails
        raise FeatxError(f"FEATX_STREAM_BYTES={raw!r} is not a number of bytes: set it to a whole "
                         "number (0 streams every file that can be) or unset it")
    return int(raw)


class Fallback(Exception):
    """The file needs the exact reader (data.py): something to report, or not streamable."""


class TooManyLabels(Fallback):
    """More distinct labels than classes may have: with the task unset, pass 1 reads them again
    as numbers (`Wanted.targets`), a regression's targets."""


@dataclass(frozen=True)
class Wanted:
    """What pass 1 reads of each record: the columns, and how its labels are kept."""
    text: str
    labels: tuple[str, ...]
    split: str | None = None
    pair: str | None = None
    """A second text, checked as the text is."""
    id: str | None = None
    """Ids: present, storable, kept as 8-byte hashes (`string_hashes`) that data.py checks unique."""
    targets: bool = False
    """The labels as regression targets, float64 per record and column (`Parsed.targets`),
    instead of codes of their distinct values."""
    plain: bool = False
    """Targets only written as plain numbers (featx.labels.PLAIN_NUMBER): the task is inferred
    from them, which reads "007" as a class code."""
    blank_labels: bool = False
    """A blank label is a row's empty set of labels (data.label_sep), not a missing one."""
    label_sets: bool = False
    """The labels are label sets (data.label_sep, or a multilabel task): their distinct fields
    may far outnumber any classes (`label_limit`)."""
    keep: tuple[str, ...] = ()
    """Columns kept beside the labels (data.keep): present, storable, nothing of them held."""

    @property
    def texts(self) -> tuple[str, ...]:
        return (self.text,) if self.pair is None else (self.text, self.pair)

    @property
    def columns(self) -> list[str]:
        """Every column read, once each, in a fixed order."""
        return list(dict.fromkeys(c for c in (*self.texts, *self.labels, self.split, self.id, *self.keep)
                                  if c is not None))


@dataclass(frozen=True)
class Source:
    """A delimited file and how pyarrow parses it as featx's csv reader does: every field a
    string, nothing read as null ("NA" is a class name, "" an empty field), a header row."""
    kind: ClassVar[str] = "delimited"  # how featx.spans shares it: byte ranges cut between records
    path: Path
    delimiter: str
    quoting: str
    columns: tuple[str, ...]
    state: tuple[int, int, int]
    """(size, modification time in ns, inode) when first read: every later pass checks it."""
    span: tuple[int, int] | None = None
    """Only the records in bytes [start, stop) of the file (a torchrun rank's share, cut at
    record boundaries by `span_of`), read after the header line; None: every record."""
    drop: tuple[str, ...] = ()
    """Text columns whose empty value drops the record (data.drop_empty): every pass sees only
    the others, so records are numbered as the whole-file reader numbers its kept rows."""

    @property
    def files(self) -> tuple[Path, ...]:
        return (self.path,)

    @property
    def states(self) -> tuple[tuple[int, int, int], ...]:
        return (self.state,)

    @property
    def nbytes(self) -> int:
        """Bytes of its records (of its span): a bound on their texts' bytes."""
        return self.state[0] if self.span is None else self.span[1] - self.span[0]

    def reading(self) -> list:
        """What picks the texts out of the bytes (the fingerprint covers it, beside the bytes)."""
        return ["csv", self.delimiter, self.quoting]

    def parse(self, wanted: Wanted) -> "Parsed":
        return parse(self, wanted)

    def values(self, column: str, assignment: np.ndarray | None, code: int):
        """Lists of the str values of `column` of the records whose split code is `code` (every
        record when `assignment` is None), a block at a time, in file order."""
        record = 0
        for batch in self.batches([column]):
            yield select(batch.column(0), assignment, code, record).to_pylist()
            record += batch.num_rows

    def kept(self, column: str, assignment: np.ndarray | None, code: int):
        """A kept column's values, as `values` (every CSV field is a string, never missing)."""
        return self.values(column, assignment, code)

    def batches(self, columns: list[str]):
        """Record batches of `columns`, in file order: the records `drop` keeps."""
        yield from kept_batches(self._records, columns, self.drop)

    def _records(self, columns: list[str]):
        """Record batches of `columns` (every record), in file order."""
        import pyarrow as pa

        check_states(self)  # a pass over other rows than the first one read
        block, given = BLOCK_BYTES, 0  # rows yielded so far
        while True:
            try:
                seen = 0
                for batch in self._reader(columns, block):
                    if seen + batch.num_rows > given:
                        yield batch.slice(given - seen) if given > seen else batch
                        given = seen + batch.num_rows
                    seen += batch.num_rows
                return
            except pa.ArrowInvalid as exc:
                if "straddl" not in str(exc) or block >= MAX_BLOCK_BYTES:
                    raise
                block = min(4 * block, MAX_BLOCK_BYTES)
                log.debug("%s: a record longer than a block; reading it again in blocks of %d bytes",
                          self.path, block)

    def _reader(self, columns: list[str], block: int):
        import pyarrow as pa
        import pyarrow.csv as pv

        quoted = self.quoting != "none"
        return pv.open_csv(
            self.path if self.span is None else io.BufferedReader(_SpanFile(self.path, self.span)),
            read_options=pv.ReadOptions(block_size=block, use_threads=True),
            parse_options=pv.ParseOptions(delimiter=self.delimiter, quote_char='"' if quoted else False,
                                          double_quote=quoted, newlines_in_values=quoted,
                                          ignore_empty_lines=True),
            convert_options=pv.ConvertOptions(column_types={c: pa.string() for c in self.columns},
                                              include_columns=columns, strings_can_be_null=False,
                                              quoted_strings_can_be_null=False, null_values=[]))


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
        left = self._n  # the first n (data.max_rows): the file is read no further than they go
        if not left:
            return
        for block in self._blocks():
            if len(block) >= left:
                yield from block[:left]
                return
            yield from block
            left -= len(block)

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

    def take(self, rows) -> list:
        """The values at `rows` (positions, in any order) as a list, read in one pass from the
        start in increasing order (a rank's dealt rows, which `_range` alone would read whole
        into memory), then put in the order asked."""
        if self._whole is None:
            self._restart()
        rows = np.asarray(rows, dtype=np.int64)
        out: list = [None] * len(rows)
        for k in np.argsort(rows, kind="stable"):
            out[k] = self._range(int(rows[k]), int(rows[k]) + 1)[0]
        return out


class Column(Lazy):
    """One string column of the rows of a split: the file's records whose split code is
    `code` (every record when `assignment` is None), read again at each pass."""

    def __init__(self, source: Source, column: str, assignment: np.ndarray | None, code: int, n: int, *,
                 nbytes: int):
        self.source, self.column, self.assignment, self.code = source, column, assignment, code
        self.nbytes = nbytes  # at most this many bytes of text (the file's share): for disk estimates
        super().__init__(n)

    def __repr__(self) -> str:
        return f"column {self.column!r} of {self.source.path}"

    def _blocks(self):
        for values in self.source.values(self.column, self.assignment, self.code):
            if len(values):
                yield values


class IdColumn(Column):
    """A split's ids read from its file's id column: each value as featx.labels reads it, str()
    of it (JSON's and Parquet's integers are ids too)."""

    def _blocks(self):
        for values in super()._blocks():
            yield [v if type(v) is str else str(v) for v in values]


class KeptColumn(Column):
    """A split's values of a kept column (data.keep), each as featx.labels keeps a row's: str()
    of it, "" for a missing one (what is missing is the source's reader's: `Source.kept`)."""

    def _blocks(self):
        for values in self.source.kept(self.column, self.assignment, self.code):
            if len(values):
                yield values


class RowIds(Lazy):
    """The ids `data.py` numbers rows with: f"{prefix}{i}", i the record's position in the file
    (a split of one file keeps its records' numbers) or in its split."""

    def __init__(self, prefix: str, assignment: np.ndarray | None, code: int, n: int, start: int = 0):
        self.prefix, self.assignment, self.code = prefix, assignment, code
        self.start = start  # the number of the first (a rank's share begins past the others')
        super().__init__(n)

    def _blocks(self, size: int = 1 << 16):
        total = self._n if self.assignment is None else len(self.assignment)
        for begin in range(0, total, size):
            numbers = np.arange(begin, min(total, begin + size)) + self.start
            if self.assignment is not None:
                numbers = numbers[self.assignment[begin:begin + size] == self.code]
            if len(numbers):
                yield [f"{self.prefix}{i}" for i in numbers.tolist()]


@dataclass
class Parsed:
    """Pass 1 over one file: per record the code of its label (and of its split column's value),
    the distinct raw values they index, or its regression targets; its id's hash; never the texts."""
    source: Source
    n: int
    codes: np.ndarray | None     # (n,) int16 (int32 past 32,767 labels) index into `labels`; None: targets
    labels: list                 # distinct raw label values (str; JSON's and Arrow's may be numbers or booleans), first appearance first
    splits: np.ndarray | None    # (n,) int8 index into `split_values`, from the split column
    split_values: list[str]      # distinct values of the split column, as str
    nbytes: int = 0              # at most this many bytes of text in its records (disk estimates)
    targets: np.ndarray | None = None  # (n, n_targets) float64, finite, when read as targets (Wanted.targets)
    ids: np.ndarray | None = None      # (n,) uint64 hashes of the ids (Wanted.id)
    dropped: dict = field(default_factory=dict)  # records data.drop_empty dropped, by split column value ("": none)


class Pass:
    """What pass 1 keeps of the records of one source, a block at a time (`add_*`), and the
    Parsed it makes of them (`parsed`)."""

    def __init__(self, wanted: Wanted):
        self.wanted = wanted
        self.labels, self.splits = label_codes(label_limit(wanted)), split_codes()
        self._targets: list[np.ndarray] = []
        self._ids: list[np.ndarray] = []
        self.dropped: dict[str, int] = {}  # split column's value ("" without one) -> records dropped

    def drop(self, batch, drop: tuple[str, ...], split: str | None):
        """`batch` (of every column) less the records whose text in a `drop` column is empty
        (data.drop_empty), counted by their split column's value."""
        blank = blank_records(batch, drop)
        if blank is None:
            return batch
        values = (batch.column(split).filter(_arrow_mask(blank)).to_pylist() if split is not None
                  else [""] * int(blank.sum()))
        self.count_dropped(values)
        return batch.filter(_arrow_mask(~blank))

    def count_dropped(self, split_values: list) -> None:
        for value in split_values:
            key = "" if value is None else str(value)
            self.dropped[key] = self.dropped.get(key, 0) + 1

    def add_targets(self, block: np.ndarray) -> None:
        """A block's targets, (rows, n_targets) float64: Fallback on any featx.labels refuses."""
        size = np.abs(block)
        if not np.isfinite(block).all() or (size > MAX_TARGET).any() or ((size < MIN_TARGET) & (size > 0)).any():
            raise Fallback("a regression target that is not a finite number, or too large")
        self._targets.append(block)

    def add_ids(self, hashes: np.ndarray) -> None:
        self._ids.append(hashes)

    def parsed(self, source, n: int, nbytes: int) -> "Parsed":
        wanted = self.wanted
        targets = ids = None
        if wanted.targets:
            targets = (np.concatenate(self._targets) if self._targets
                       else np.zeros((0, len(wanted.labels)), np.float64))
        if wanted.id is not None:
            ids = np.concatenate(self._ids) if self._ids else np.zeros(0, np.uint64)
        return Parsed(source, n, None if wanted.targets else self.labels.codes(),
                      [] if wanted.targets else self.labels.values,
                      None if wanted.split is None else self.splits.codes(), self.splits.values, nbytes,
                      targets, ids, dict(self.dropped))


def value_key(value) -> tuple:
    """A distinct value as featx's rules tell them apart: by type and value (JSON's 1, 1.0 and
    true are equal in Python, not to featx: class_key("True") is not "1"); a JSON list (a row's
    labels) by its JSON text."""
    if type(value) is list:
        return list, json.dumps(value, ensure_ascii=False)
    return type(value), value


def key_value(key: tuple):
    """The value of a `value_key`."""
    kind, value = key
    return json.loads(value) if kind is list else value


class Codes:
    """Per row, the code of its value among the distinct values seen so far, first appearance
    first, in the smallest integer type that holds them; at most `limit` distinct values (past
    it, `Fallback` with `what`)."""

    def __init__(self, limit: int, what: str, error: type = Fallback):
        self.limit, self.what, self.error = limit, what, error
        self.index: dict = {}  # value_key(value) -> code: pass 1 may fill it row by row itself
        self._blocks: list[np.ndarray] = []

    @property
    def values(self) -> list:
        return [key_value(key) for key in self.index]

    def add(self, codes) -> None:
        """A block's codes (already into `index`)."""
        if len(self.index) > self.limit:
            raise self.error(f"more than {self.limit:,} distinct {self.what}")
        dtype = np.int8 if self.limit < 2 ** 7 else (np.int16 if len(self.index) < 2 ** 15 else np.int32)
        if self._blocks and self._blocks[0].dtype != dtype:
            self._blocks = [b.astype(dtype) for b in self._blocks]  # the few blocks so far widened
        self._blocks.append(np.asarray(codes, dtype=np.int64).astype(dtype))

    def add_encoded(self, distinct: list, indices: np.ndarray) -> None:
        """A block given as its distinct values and each row's index into them."""
        local = np.array([self.index.setdefault(value_key(v), len(self.index)) for v in distinct], dtype=np.int64)
        self.add(local[indices] if len(indices) else np.zeros(0, np.int64))

    def codes(self) -> np.ndarray:
        dtype = np.int8 if self.limit < 2 ** 7 else np.int16
        return np.concatenate(self._blocks) if self._blocks else np.zeros(0, dtype)


def source_of(path: Path, cfg, fmt: str) -> Source:
    """The Source for a file featx would read with its csv reader, or Fallback."""
    if fmt not in ("csv", "tsv") or not cfg.header or cfg.columns is not None:
        raise Fallback("not a delimited file with a header row")
    if cfg.encoding.replace("_", "-").lower() not in ("utf-8", "utf8"):
        raise Fallback(f"encoding {cfg.encoding}")
    delimiter = {None: "\t" if fmt == "tsv" else ",", "\\t": "\t"}.get(cfg.delimiter, cfg.delimiter)
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    if len(head) == 1 << 16 and b"\n" not in head and b"\r" not in head:
        raise Fallback("a header line longer than 64 KiB")  # the exact reader checks all of it
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or head[:4000].count(b"\x00"):
        raise Fallback("UTF-16 or NUL bytes")  # data.py names the encoding to set
    import csv
    import io

    if len(delimiter.encode()) != 1:
        raise Fallback("a delimiter pyarrow cannot take (one ASCII byte)")
    first = head.decode("utf-8-sig", errors="replace").split("\n", 1)[0].rstrip("\r")
    try:
        header = next(csv.reader(io.StringIO(first), delimiter=delimiter,
                                 quoting=csv.QUOTE_NONE if cfg.quoting == "none" else csv.QUOTE_MINIMAL), [])
    except csv.Error:  # lines ended by a lone carriage return, say: the exact reader's to read
        raise Fallback("a header line the csv module cannot split") from None
    columns = tuple(c.strip() for c in header)
    if not columns or any(not c for c in columns) or len(set(columns)) != len(columns) \
            or any(c != raw for c, raw in zip(columns, header)):
        raise Fallback("a header cell that is empty, repeated or padded")  # data.py's rules apply
    return Source(path, delimiter, cfg.quoting, columns, _state(path))


# Arrow to numpy and back without pyarrow's Python-object conversions (`pa.array`, `pa.scalar`,
# `Array.to_numpy`): each of those imports pandas where it is installed, 0.4-1 s of a process
# that reads a file in 1-3 s.


def _has_blank(values) -> bool:
    """Whether a string array holds a value that is empty or only whitespace. Only a value that
    starts with whitespace can be all whitespace: those alone are trimmed (trimming every value
    copied every text)."""
    import pyarrow.compute as pc

    if not len(values):
        return False
    parts = _string_parts(values)
    if parts is None:
        if pc.min(pc.binary_length(values)).as_py() == 0:
            return True
        lead = pc.is_in(pc.utf8_slice_codeunits(values, 0, 1), value_set=_whitespace())
        if not pc.any(lead).as_py():
            return False
    else:  # the same, on the buffers (no array of first characters made)
        offsets, data = parts
        if (offsets[1:] == offsets[:-1]).any():
            return True
        first = _lead_bytes(offsets, data)
        if not first.any():
            return False
        lead = _arrow_mask(first)
    return pc.min(pc.utf8_length(pc.utf8_trim(values.filter(lead), WHITESPACE))).as_py() == 0


# Whether a byte can begin a whitespace character's UTF-8 (an ASCII space, or the first byte of
# U+0085, U+00A0, U+1680, U+2000..U+3000): a value beginning with one is trimmed to be sure.
_SPACE_LEADS = np.zeros(256, dtype=bool)
_SPACE_LEADS[[c.encode("utf-8")[0] for c in WHITESPACE]] = True


def _lead_bytes(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """(n,) bool: the non-empty values (`_string_parts`) whose first byte may begin whitespace."""
    starts = offsets[:-1]
    out = np.zeros(len(starts), dtype=bool)
    full = offsets[1:] > starts
    out[full] = _SPACE_LEADS[data[starts[full]]]
    return out


def _string_parts(values) -> tuple[np.ndarray, np.ndarray] | None:
    """(offsets (n + 1,), bytes) of a string array without nulls, as numpy views of its buffers;
    None for any other array (the pyarrow kernels read it)."""
    import pyarrow as pa

    if values.null_count or not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        return None
    _, offsets, data = values.buffers()
    dtype = np.dtype(np.int64 if pa.types.is_large_string(values.type) else np.int32)
    offsets = np.frombuffer(offsets, dtype=dtype, count=len(values) + 1, offset=values.offset * dtype.itemsize)
    return offsets, (np.zeros(0, np.uint8) if data is None else np.frombuffer(data, dtype=np.uint8))


def blank_mask(values) -> np.ndarray:
    """(n,) bool: which values of a string array are missing (null), empty or only whitespace,
    as featx.readers.is_missing reads a text: what data.drop_empty drops. Only values that
    start with whitespace are trimmed, as in `_has_blank`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        raise Fallback(f"a text column of {values.type}")  # the whole-file reader's to report
    out = np.zeros(len(values), dtype=bool)
    if not len(values):
        return out
    if values.null_count:
        out[_nonzero(values.is_null())] = True
        values = values.fill_null("")
    out[_nonzero(pc.equal(pc.binary_length(values), 0))] = True
    parts = _string_parts(values)
    if parts is None:
        lead = pc.is_in(pc.utf8_slice_codeunits(values, 0, 1), value_set=_whitespace())
        where = _nonzero(lead)
    else:
        first = _lead_bytes(*parts)
        where, lead = np.flatnonzero(first), _arrow_mask(first)
    if len(where):
        trimmed = pc.utf8_length(pc.utf8_trim(values.filter(lead), WHITESPACE))
        out[where[_nonzero(pc.equal(trimmed, 0))]] = True
    return out


def blank_records(batch, drop: tuple[str, ...]) -> np.ndarray | None:
    """(n,) bool: the records of `batch` whose value in a `drop` column is blank (`blank_mask`);
    None when there is none."""
    if not drop:
        return None
    blank = np.zeros(batch.num_rows, dtype=bool)
    for column in drop:
        blank |= blank_mask(batch.column(batch.schema.get_field_index(column)))
    return blank if blank.any() else None


def kept_batches(records, columns: list[str], drop: tuple[str, ...]):
    """The batches of `columns` that `records(columns)` yields, less the records whose text in
    a `drop` column is blank (data.drop_empty: read beside them, then left out)."""
    read = list(dict.fromkeys([*columns, *drop]))
    for batch in records(read):
        blank = blank_records(batch, drop)
        if blank is not None:
            batch = batch.filter(_arrow_mask(~blank))
        if len(read) > len(columns):
            batch = batch.select(columns)
        yield batch


def _nonzero(mask) -> np.ndarray:
    """Positions where an Arrow boolean array is true, as numpy (`to_numpy` imports pandas)."""
    import pyarrow.compute as pc

    where = pc.indices_nonzero(mask)
    return np.frombuffer(where.buffers()[1], dtype=np.uint64, count=len(where),
                         offset=where.offset * 8).astype(np.int64)


@functools.cache
def _whitespace():
    """WHITESPACE as an Arrow array of one-character strings (built from buffers: `pa.array`
    imports pandas)."""
    import pyarrow as pa

    encoded = [c.encode() for c in WHITESPACE]
    offsets = np.cumsum([0] + [len(e) for e in encoded]).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), len(encoded), [None, pa.py_buffer(offsets.tobytes()),
                                                             pa.py_buffer(b"".join(encoded))])


def has_nul(values) -> bool:
    """Whether a string array holds a NUL byte."""
    return holds(values, b"\x00")


def holds(values, *needles: bytes) -> bool:
    """Whether a string array's values hold any of `needles` (bytes of one byte, so never across
    two values): a memchr over its bytes (pyarrow's match_substring, a substring search per
    value, took longer than parsing the file)."""
    parts = _string_parts(values) if len(values) else None
    if parts is None:
        import pyarrow.compute as pc

        return bool(len(values)) and any(pc.any(pc.match_substring(values, n.decode())).as_py() for n in needles)
    offsets, data = parts
    data = data[offsets[0]:offsets[-1]].tobytes()
    return any(data.find(n) >= 0 for n in needles)


def _indices(encoded) -> np.ndarray:
    """The indices of a dictionary-encoded array without nulls, as numpy (a view of its buffer)."""
    indices = encoded.indices
    dtype = np.dtype(f"int{indices.type.bit_width}")
    return np.frombuffer(indices.buffers()[1], dtype=dtype, count=len(indices),
                         offset=indices.offset * dtype.itemsize)


def _arrow_mask(mask: np.ndarray):
    """A numpy bool array as an Arrow boolean array (bits, least significant first)."""
    import pyarrow as pa

    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(np.packbits(mask, bitorder="little"))])


def _state(path: Path) -> tuple[int, int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


def parse(source: Source, wanted: Wanted) -> Parsed:
    """Pass 1: check every text (present, not only whitespace, no NUL), label (present), id
    (present, no NUL) and kept value (no NUL), code the labels and split values (or read the
    targets, hash the ids); Fallback on anything the exact reader must report."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = wanted.columns
    if any(c not in source.columns for c in columns):
        raise Fallback("a configured column is missing")  # data.py lists the columns there are
    kept = Pass(wanted)
    n, last, multiline = 0, None, False
    try:
        # Every column, though only `wanted` are used: pyarrow checks the UTF-8 of the columns it
        # converts, and the whole-file reader refuses a byte that is not UTF-8 in any of them
        # (in a row data.drop_empty drops too).
        for raw in source._records(list(source.columns)):
            batch, last = kept.drop(raw, source.drop, wanted.split), raw
            if source.quoting != "none" and not multiline:
                multiline = any(holds(column, b"\n", b"\r") for column in raw.columns)
            for text in wanted.texts:
                texts = batch.column(text)
                if _has_blank(texts) or has_nul(texts):
                    raise Fallback("an empty text or a NUL byte")
            if wanted.targets:
                kept.add_targets(np.stack([string_targets(batch.column(c), plain=wanted.plain)
                                           for c in wanted.labels], axis=1))
            else:
                values = batch.column(wanted.labels[0])
                if (not wanted.blank_labels and _has_blank(values)) or has_nul(values):
                    raise Fallback("a missing label or a NUL byte")
                encoded = pc.dictionary_encode(values)
                kept.labels.add_encoded(encoded.dictionary.to_pylist(), _indices(encoded))
            if wanted.id is not None:
                ids = batch.column(wanted.id)
                if _has_blank(ids) or has_nul(ids):
                    raise Fallback("a missing id or a NUL byte")
                kept.add_ids(string_hashes(ids))
            if any(has_nul(batch.column(k)) for k in wanted.keep):
                raise Fallback("a NUL byte in a kept column")
            if wanted.split is not None:
                names = pc.dictionary_encode(batch.column(wanted.split))
                kept.splits.add_encoded(names.dictionary.to_pylist(), _indices(names))
            n += batch.num_rows
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowKeyError, UnicodeError) as exc:  # data.py names the row
        raise Fallback(f"pyarrow: {str(exc)[:200]}") from None
    if last is not None and last.num_rows and source.quoting != "none" and _runs_to_the_end(source, last):
        raise Fallback("a quote never closed")  # the whole-file reader names its row
    if multiline:
        _check_quotes_close(source)
    elif last is not None and source.quoting != "none":
        _check_last_line(source)
    return kept.parsed(source, n, source.nbytes)


def _check_last_line(source: Source) -> None:
    """Fallback when the last record, a line of its own (no value held a line break), opens a
    quote it never closes, the file ending without a line break ('last row,"a'): pyarrow reads
    it as 'a', the whole-file reader names the row."""
    import csv

    end = source.state[0] if source.span is None else source.span[1]
    with open(source.path, "rb") as f:
        f.seek(max(0, end - 1))
        if end == 0 or f.read(1) in (b"\n", b"\r"):
            return
        tail, at = b"", end
        while at > 0 and b"\n" not in tail and b"\r" not in tail:  # back to the line's start
            step = min(at, 1 << 16)
            at -= step
            f.seek(at)
            tail = f.read(step) + tail
    line = tail[max(tail.rfind(b"\n"), tail.rfind(b"\r")) + 1:]
    try:
        for _ in csv.reader([line.decode("utf-8", errors="replace")], delimiter=source.delimiter, strict=True):
            pass
    except csv.Error as exc:
        raise Fallback(f"the last line, by the strict csv reader: {exc}") from None


def _check_quotes_close(source: Source) -> None:
    """Fallback unless the strict csv module reads the records too: a quote opening a text ('"the
    cat') and closed only lines later by a quote inside another row's text ('was "great"')
    made the rows between one value, which pyarrow reads as the lenient csv module does; what
    tells it apart is text after the closing quote, which pyarrow's values do not show. Run
    only when some value holds a line break (about 200 MB/s); the whole-file reader names the
    lines, or reads text after a closing quote on one line ('"a"b') as it always has."""
    import collections
    import csv

    csv.field_size_limit(2**31 - 1)  # as featx.readers reads: a long text is not an error
    raw = open(source.path, "rb") if source.span is None else io.BufferedReader(_SpanFile(source.path, source.span))
    with io.TextIOWrapper(raw, encoding="utf-8-sig", newline="") as text:
        try:
            collections.deque(csv.reader(text, delimiter=source.delimiter, strict=True), maxlen=0)
        except (csv.Error, UnicodeError) as exc:
            raise Fallback(f"the strict csv reader: {exc}") from None


def _runs_to_the_end(source: Source, batch) -> bool:
    """Whether a value of the last record is the file's (or span's) last bytes, line breaks and
    all: a quote opened and never closed, which pyarrow (as the lenient csv module) reads to the
    end of the file, the rows after it lost, in any column, used or not. A quoted value that is
    closed leaves its closing quote after it; an unquoted one holds no line break."""
    end = source.state[0] if source.span is None else source.span[1]
    for column in batch.columns:
        value = column[batch.num_rows - 1].as_py()
        if isinstance(value, str) and ("\n" in value or "\r" in value):
            raw = value.encode("utf-8")
            if len(raw) <= end:
                with open(source.path, "rb") as f:
                    f.seek(end - len(raw))
                    if f.read(len(raw)) == raw:
                        return True
    return False


# ---------------------------------------------------------------------------------------------
# Regression targets and ids, a block at a time


# What featx.labels.as_number reads as a number, less what Python's float also takes ("1_0",
# "nan", "inf", non-ASCII digits): those are the exact reader's. Anchored for pyarrow's RE2.
NUMBER = r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?"


def _pattern(plain: bool) -> str:
    return PLAIN_NUMBER.pattern if plain else NUMBER


def string_targets(values, *, plain: bool) -> np.ndarray:
    """A string array's values as float64 (n,), as featx.labels.as_number reads them (stripped,
    then float(); pyarrow's parse rounds as Python's does); Fallback on a value it cannot be
    sure of. `plain`: only plain numbers (the task is then inferred from them)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        raise Fallback(f"targets of {values.type}")
    trimmed = pc.utf8_trim(values, WHITESPACE)
    if not pc.all(pc.match_substring_regex(trimmed, f"^{_pattern(plain)}$")).as_py():
        raise Fallback("a regression target that is not written as a number")
    return float_values(pc.cast(trimmed, pa.float64()))


def float_values(values) -> np.ndarray:
    """A float64 Arrow array without nulls as numpy (a view of its buffer)."""
    return np.frombuffer(values.buffers()[1], dtype=np.float64, count=len(values),
                         offset=values.offset * 8)


def python_target(value, plain: bool) -> float:
    """One JSON (or label-text) value as featx.labels.as_number reads it; ValueError on one it
    would refuse, or that Python's float reads otherwise than `NUMBER` does."""
    if type(value) is bool or type(value) is float:
        return float(value)
    if type(value) is int:
        return float(value) if abs(value) < 2 ** 1023 else float("inf")
    if type(value) is str and re.fullmatch(_pattern(plain), value.strip()):
        return float(value.strip())
    raise ValueError(f"a regression target {type(value).__name__}")


# Odd 64-bit constants: the polynomial's base, and splitmix64's finaliser.
_BASE, _MIX1, _MIX2 = np.uint64(0x100000001B3), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def string_hashes(values) -> np.ndarray:
    """(n,) uint64 hashes of a string array's values (their UTF-8 bytes), the same in every
    process: how pass 1 tells ids apart without holding them. Equal ids, equal hashes; two
    ids of one hash send the file to the exact reader (`Fallback`), which says whether they
    are the same."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if pa.types.is_integer(values.type):
        values = pc.cast(values, pa.string())  # str() of an integer, as the exact reader's id
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        raise Fallback(f"ids of {values.type}")
    if not len(values):
        return np.zeros(0, np.uint64)
    _, offsets, data = values.buffers()
    dtype = np.dtype(np.int64 if pa.types.is_large_string(values.type) else np.int32)
    offsets = np.frombuffer(offsets, dtype=dtype, count=len(values) + 1, offset=values.offset * dtype.itemsize)
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return _hash_bytes(raw[offsets[0]:offsets[-1]], (offsets - offsets[0]).astype(np.int64))


def python_hashes(values: list[str]) -> np.ndarray:
    """`string_hashes` of a list of str."""
    encoded = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return _hash_bytes(np.frombuffer(b"".join(encoded), np.uint8), offsets)


def _hash_bytes(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per string data[offsets[i]:offsets[i+1]]: sum of byte_j * BASE^j mod 2^64 (one prefix
    sum over the block's bytes), its length mixed in, through splitmix64's finaliser."""
    lengths = np.diff(offsets)
    longest = int(lengths.max()) if len(lengths) else 0
    powers = np.ones(max(longest, 1), np.uint64)
    powers[1:] = _BASE
    powers = np.cumprod(powers, dtype=np.uint64)  # BASE^j, wrapping mod 2^64
    position = np.arange(len(data), dtype=np.int64) - np.repeat(offsets[:-1], lengths)
    prefix = np.zeros(len(data) + 1, np.uint64)
    np.cumsum((data.astype(np.uint64) + np.uint64(1)) * powers[position], out=prefix[1:])
    z = (prefix[offsets[1:]] - prefix[offsets[:-1]]) ^ (lengths.astype(np.uint64) * _MIX2)
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


# Distinct label values pass 1 codes: past MAX_CLASSES they are no classes (with the task unset,
# pass 1 reads them again as numbers). Label sets are coded by their whole field ("a|b", or a
# JSON list): 500 labels in sets of 1-3 make 20 million fields, so they go on to
# MAX_LABEL_SETS (the index holds each distinct field once, about 150 bytes).
MAX_CLASSES = 100_000
MAX_LABEL_SETS = 5_000_000


def label_limit(wanted: Wanted) -> int:
    return MAX_LABEL_SETS if wanted.label_sets else MAX_CLASSES


def label_codes(limit: int = MAX_CLASSES) -> Codes:
    return Codes(limit, "labels: not classes", TooManyLabels)


def split_codes() -> Codes:
    return Codes(100, "split names")


def select(values, assignment: np.ndarray | None, code: int, record: int):
    """The values (an Arrow array, or a list) of a block starting at record `record` whose
    split code is `code`; all of them when `assignment` is None."""
    if assignment is None:
        return values
    mine = assignment[record:record + len(values)] == code
    if isinstance(values, list):
        import itertools

        return list(itertools.compress(values, mine))
    return values.filter(_arrow_mask(mine))


def check_states(source) -> None:
    """Refuse a pass over a source whose files changed since pass 1 read them."""
    for path, state in zip(source.files, source.states):
        try:
            now = _state(path)
        except OSError:
            now = None  # removed
        if now != state:
            raise FeatxError(f"{path} changed while featx was reading it (its texts are read again "
                             "from the file, a block at a time); rerun once it stays as it is")


# ---------------------------------------------------------------------------------------------
# A torchrun rank's share of a file (featx.spans finds it): the header, then its records' bytes


class _SpanFile(io.RawIOBase):
    """The file's header line, then only its bytes [start, stop): what pyarrow parses for one
    rank, as if the rank's records were a file of their own."""

    def __init__(self, path: Path, span: tuple[int, int]):
        self._file = open(path, "rb")
        self._pending = self._file.readline()  # the header: pyarrow names the columns from it
        self._file.seek(span[0])
        self._left = span[1] - span[0]

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._pending:
            n = min(len(buffer), len(self._pending))
            buffer[:n], self._pending = self._pending[:n], self._pending[n:]
            return n
        data = self._file.read(min(len(buffer), self._left))
        self._left -= len(data)
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._file.close()
        super().close()
