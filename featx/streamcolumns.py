"""Parquet files and saved Hugging Face datasets read in a stream (see featx.stream). No torch.

    ColumnarSource  a Parquet file, a folder of Parquet shards, or a Hugging Face `save_to_disk`
                    folder (Arrow IPC files; ClassLabel codes read as their names): a batch of
                    rows at a time, only the columns asked for, read by pyarrow as featx.readers
                    reads them whole (Parquet through pandas, Arrow with to_pylist): strings,
                    integers, floats and booleans alike; a null, or a column of another type,
                    is the exact reader's (`stream.Fallback`)

Parquet row groups before a torchrun rank's rows are not read; an Arrow file's record batches
are read in order (the IPC stream format has no index), through a plain file, not a memory map,
so that its pages are not held.
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from featx import stream
from featx.readers import arrow_names, holds_strings, is_missing

BATCH_ROWS = 1 << 16  # rows of a Parquet or Arrow file converted at a time


@dataclass(frozen=True)
class ColumnarSource:
    """A Parquet file, or a folder's Parquet shards or saved Arrow files (`arrow`), read a batch
    of rows at a time; the rows of its files one after the other, as featx.readers joins them."""
    kind: ClassVar[str] = "columnar"  # how featx.spans shares it: by rows
    path: Path
    files: tuple[Path, ...]
    arrow: bool
    columns: tuple[str, ...]
    states: tuple[tuple[int, int, int], ...]
    names: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """A saved dataset's ClassLabel columns and their class names (its codes are read as these)."""
    span: tuple[int, int] | None = None
    """Only the rows [start, stop) of the files joined (a torchrun rank's share)."""
    drop: tuple[str, ...] = ()
    """Text columns whose missing or blank value drops the row (data.drop_empty, `stream.Source.drop`)."""

    @classmethod
    def of(cls, path: Path, files: tuple[Path, ...], *, arrow: bool) -> "ColumnarSource":
        if not arrow and importlib.util.find_spec("pandas") is None:
            raise stream.Fallback("no pandas")  # the whole-file reader says Parquet needs it
        found = [_columns(f, arrow) for f in files]
        if any(c != found[0] for c in found) or len(set(found[0])) != len(found[0]):
            raise stream.Fallback("files whose columns differ, or a column named twice")
        names = arrow_names(path) if arrow else {}
        return cls(path, files, arrow, found[0], tuple(stream._state(f) for f in files),
                   tuple((c, tuple(v)) for c, v in names.items()))

    @property
    def nbytes(self) -> int:
        return sum(state[0] for state in self.states)

    def reading(self) -> list:
        return ["arrow" if self.arrow else "parquet", [f.name for f in self.files]]

    def rows(self) -> int:
        """Rows of every file (the Parquet footers; an Arrow file's batches, memory-mapped)."""
        return sum(_rows(f, self.arrow) for f in self.files)

    def batches(self, columns: list[str]):
        """Record batches of `columns`, of the rows of its span that `drop` keeps."""
        yield from stream.kept_batches(self._records, columns, self.drop)

    def _records(self, columns: list[str]):
        """Record batches of `columns` (at most BATCH_ROWS rows), of the rows of its span."""
        import pyarrow as pa

        stream.check_states(self)
        lo, hi = self.span or (0, None)
        first = 0  # the number of the first row of the file at hand (needed for a span only)
        try:
            for path in self.files:
                for skipped, batch in _file_batches(path, self.arrow, columns, lo - first):
                    at = first + skipped  # the number of the batch's first row
                    if hi is not None and at >= hi:
                        return
                    begin = max(lo, at) - at
                    end = batch.num_rows if hi is None else min(hi - at, batch.num_rows)
                    for k in range(begin, end, BATCH_ROWS):
                        yield batch.slice(k, min(BATCH_ROWS, end - k))
                if self.span is not None:
                    first += _rows(path, self.arrow)
        except (pa.ArrowException, OSError) as exc:  # the whole-file reader says what is wrong
            raise stream.Fallback(f"pyarrow: {str(exc)[:200]}") from None

    def parse(self, wanted: stream.Wanted) -> stream.Parsed:
        import pyarrow as pa
        import pyarrow.compute as pc

        columns = wanted.columns
        if any(c not in self.columns for c in columns):
            raise stream.Fallback("a configured column is missing")  # the reader lists the columns
        if any(c in dict(self.names) for c in (wanted.id, *(wanted.labels if wanted.targets else ()))):
            raise stream.Fallback("ids or targets in a ClassLabel column")
        kept = stream.Pass(wanted)
        n = nbytes = 0
        # The other string columns too, for their UTF-8 only: the whole-file reader converts
        # every column, and refuses a string that is not UTF-8 in any of them.
        others = [c for c in _string_columns(self.files, self.arrow) if c not in columns]
        # Every ClassLabel column's codes too, used or not: the whole-file reader reads each as
        # its names and refuses a code outside them (featx.readers).
        coded = {c: names for c, names in self.names if c in self.columns}
        read = columns + others + [c for c in coded if c not in columns and c not in others]
        try:
            for raw in self._records(read):
                for other in others:  # in the rows data.drop_empty drops too, as read whole
                    raw.column(other).validate(full=True)
                for name, names in coded.items():
                    _check_codes(raw.column(read.index(name)), names)
                batch = kept.drop(raw, self.drop, wanted.split)
                column = lambda name: batch.column(columns.index(name))  # noqa: E731
                for text in wanted.texts:
                    texts = _scalars(column(text), strings=True)
                    if stream._has_blank(texts) or stream.has_nul(texts):
                        raise stream.Fallback("an empty text or a NUL byte")
                    if text == wanted.text:
                        nbytes += pc.sum(pc.binary_length(texts)).as_py() or 0
                if wanted.targets:
                    kept.add_targets(np.stack([_targets(_scalars(column(c)), wanted.plain) for c in wanted.labels],
                                              axis=1))
                if wanted.id is not None:
                    ids = _scalars(column(wanted.id))
                    if pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type):
                        ids.validate(full=True)
                        if stream._has_blank(ids) or stream.has_nul(ids):
                            raise stream.Fallback("an empty id or a NUL byte")
                    kept.add_ids(stream.string_hashes(ids))  # Fallback on floats and booleans
                for name in wanted.keep:
                    _check_kept(column(name))
                if wanted.blank_labels and not wanted.targets and stream._has_blank(_strings(column(wanted.labels[0]))):
                    # A blank string is a null to the whole-file reader (pandas, to_pylist): a missing
                    # label, even where data.label_sep reads a blank field as no labels.
                    raise stream.Fallback("a blank label")
                for name, codes, as_str in ((None if wanted.targets else wanted.labels[0], kept.labels, False),
                                            (wanted.split, kept.splits, True)):
                    if name is not None and name != wanted.split and _is_list(column(name).type):
                        codes.add_encoded(*_label_lists(column(name), dict(self.names).get(name)))
                    elif name is not None:
                        encoded = pc.dictionary_encode(_scalars(column(name)))
                        named = [self._named(name, v) for v in encoded.dictionary.to_pylist()]
                        codes.add_encoded([str(v) for v in named] if as_str else named, stream._indices(encoded))
                n += batch.num_rows
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, UnicodeError) as exc:
            raise stream.Fallback(f"pyarrow: {str(exc)[:200]}") from None
        return kept.parsed(self, n, nbytes)

    def _named(self, column: str, value):
        """featx.readers' rule: a ClassLabel code is its class name, -1 ("no label") a missing
        label (None); a code outside them `_check_codes` sent to that reader."""
        names = dict(self.names).get(column)
        if names is None or not isinstance(value, int) or isinstance(value, bool):
            return value
        if value == -1:
            return None
        return names[value] if 0 <= value < len(names) else value  # (pass 1 refused the others)

    def values(self, column: str, assignment: np.ndarray | None, code: int):
        record = 0
        for batch in self.batches([column]):
            # Strings (a text, an id), or integers (an id; str() of each, as stream.IdColumn reads them)
            yield stream.select(_scalars(batch.column(0)), assignment, code, record).to_pylist()
            record += batch.num_rows

    def kept(self, column: str, assignment: np.ndarray | None, code: int):
        """A kept column's values as featx.readers and featx.labels keep a row's: a null, a
        blank string or NaN is missing, "" (pandas and to_pylist); a ClassLabel code its name
        (-1 missing); str() of any other value."""
        record = 0
        for batch in self.batches([column]):
            named = (None if is_missing(v) else self._named(column, v)
                     for v in stream.select(batch.column(0), assignment, code, record).to_pylist())
            yield ["" if v is None else v if type(v) is str else str(v) for v in named]
            record += batch.num_rows


def _is_list(kind) -> bool:
    import pyarrow as pa

    return pa.types.is_list(kind) or pa.types.is_large_list(kind)


def _label_lists(values, names: tuple[str, ...] | None) -> tuple[list[list], np.ndarray]:
    """A column of label lists (a multilabel row's labels, or a saved dataset's Sequence of
    ClassLabel codes) as its distinct lists and each row's index into them: the lists featx.readers
    gives (pandas' arrays or to_pylist, codes read as their names, which `_check_codes` checked
    first). Lists of strings or integers only, without a null or a blank or NUL string: anything
    the label checks would report is the exact reader's to name (`stream.Fallback`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    inner = values.type.value_type
    strings = pa.types.is_string(inner) or pa.types.is_large_string(inner)
    if values.null_count or not (strings or pa.types.is_integer(inner)):
        raise stream.Fallback(f"a column of {values.type}, or with nulls")
    flat = values.flatten()  # the values of this batch's lists alone (a slice's offsets kept)
    if flat.null_count:
        raise stream.Fallback("a null in a list of labels")
    if strings:
        flat.validate(full=True)
        if stream._has_blank(flat) or stream.has_nul(flat):
            raise stream.Fallback("a blank label or a NUL byte in a list of labels")
    # Each row's list as one string, its labels joined by NUL (a NUL in a label was refused
    # above), coded by pyarrow: no Python per row. An empty list is the empty string.
    # (A batch's labels are far fewer than 2 GB: plain lists of plain strings, the kernel's type.)
    encoded = pc.dictionary_encode(pc.binary_join(values.cast(pa.list_(pa.string())), "\x00"))
    distinct = [key.split("\x00") if key else [] for key in encoded.dictionary.to_pylist()]
    if not strings:
        distinct = [[int(v) for v in labels] for labels in distinct]
        if names is not None:
            distinct = [[names[v] for v in labels] for labels in distinct]
    return distinct, stream._indices(encoded)


def _check_codes(values, names: tuple[str, ...]) -> None:
    """A saved dataset's ClassLabel column as featx.readers reads it: integer codes in
    0..n-1, or -1 (no label) and nulls alone; a Sequence of them, codes in 0..n-1 only. Fallback
    on anything else: that reader names the row, or reads what is no code."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    listed = _is_list(values.type) or pa.types.is_fixed_size_list(values.type)  # Sequence(..., length=k)
    if listed:
        values = values.flatten()
        if values.null_count:
            raise stream.Fallback("a null in a Sequence of ClassLabel codes")
    if not pa.types.is_integer(values.type):
        raise stream.Fallback(f"a ClassLabel column of {values.type}")
    lowest = 0 if listed else -1  # -1 or 0..n-1 are the integers in [-1, n) (min and max skip nulls)
    if len(values) > values.null_count and not lowest <= pc.min(values).as_py() <= pc.max(values).as_py() < len(names):
        raise stream.Fallback("a ClassLabel code outside its names")


def _check_kept(values) -> None:
    """A kept column (data.keep) as the whole-file reader keeps it: strings (nulls among them
    kept as ""), valid UTF-8 and without NUL; or integers, floats or booleans without nulls (a
    null makes pandas read integers as floats, "3.0"). Fallback otherwise: that reader's."""
    import pyarrow as pa

    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        values.validate(full=True)  # UTF-8 (pyarrow.ArrowInvalid otherwise)
        if stream.has_nul(values.drop_null()):
            raise stream.Fallback("a NUL byte in a kept column")
    else:
        _scalars(values)  # integers, floats or booleans without nulls, or Fallback


def _targets(values, plain: bool) -> np.ndarray:
    """A column of numbers (or of numbers written as strings) as float64 regression targets, as
    featx.labels.as_number reads each (a boolean is 0 or 1)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return stream.string_targets(values, plain=plain)
    # Unsafe: an integer past 2^53 rounds to the nearest float, as Python's float() rounds it.
    return stream.float_values(pc.cast(values, pa.float64(), safe=False))


def _strings(values):
    """The string values of a column (dictionary-decoded); an empty array for one of numbers."""
    import pyarrow as pa

    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    return values if pa.types.is_string(values.type) or pa.types.is_large_string(values.type) else values.slice(0, 0)


def _scalars(values, strings: bool = False):
    """A column of strings, integers, floats or booleans without nulls, dictionary-decoded (as
    pandas and to_pylist give them); anything else (nulls, dates, lists...) is the exact reader's."""
    import pyarrow as pa

    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    kinds = (pa.types.is_string, pa.types.is_large_string)
    if not strings:
        kinds += (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean)
    if values.null_count or not any(kind(values.type) for kind in kinds):
        raise stream.Fallback(f"a column of {values.type}, or with nulls")
    if strings:
        values.validate(full=True)  # UTF-8 (pyarrow.ArrowInvalid otherwise)
    return values


def _columns(path: Path, arrow: bool) -> tuple[str, ...]:
    """The columns featx.readers sees: an Arrow file's, or what pandas makes of a Parquet
    schema (its stored index columns are the frame's index, not columns)."""
    import pyarrow as pa

    try:
        if arrow:
            with pa.memory_map(str(path)) as source:
                return tuple(_ipc_reader(source).schema.names)
        import pyarrow.parquet as pq

        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        raise stream.Fallback(f"pyarrow: {str(exc)[:200]}") from None
    index = []
    if schema.metadata and b"pandas" in schema.metadata:
        try:
            index = [c for c in json.loads(schema.metadata[b"pandas"])["index_columns"] if isinstance(c, str)]
        except (ValueError, KeyError, TypeError):
            raise stream.Fallback("pandas metadata featx cannot read") from None
    return tuple(c for c in schema.names if c not in index)


def _string_columns(files: tuple[Path, ...], arrow: bool) -> list[str]:
    """The columns whose values hold strings (strings, or lists, structs or dictionaries of them)
    in any of the files, from their schemas."""
    import pyarrow as pa

    found: dict[str, None] = {}
    try:
        for path in files:
            if arrow:
                with pa.memory_map(str(path)) as source:
                    schema = _ipc_reader(source).schema
            else:
                import pyarrow.parquet as pq

                schema = pq.read_schema(path)
            found |= {field.name: None for field in schema if holds_strings(field.type)}
    except (pa.ArrowException, OSError) as exc:
        raise stream.Fallback(f"pyarrow: {str(exc)[:200]}") from None
    return list(found)


def _ipc_reader(source):
    """featx.readers' order: the IPC stream format `datasets` writes, else the file format."""
    import pyarrow as pa

    try:
        return pa.ipc.open_stream(source)
    except pa.ArrowInvalid:
        source.seek(0)
        return pa.ipc.open_file(source)


def _rows(path: Path, arrow: bool) -> int:
    import pyarrow as pa

    if arrow:
        with pa.memory_map(str(path)) as source:  # batches' bodies stay unread
            reader = _ipc_reader(source)
            if isinstance(reader, pa.ipc.RecordBatchFileReader):
                return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
            return sum(batch.num_rows for batch in reader)
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def _file_batches(path: Path, arrow: bool, columns: list[str], skip: int):
    """(rows before it in the file, record batch) of one file, from the batch holding row
    `skip` on (Parquet: its row groups before it are not read)."""
    import pyarrow as pa

    at = 0
    if arrow:
        with pa.OSFile(str(path)) as source:  # read, not mapped: its pages are not held in memory
            reader = _ipc_reader(source)
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) \
                if isinstance(reader, pa.ipc.RecordBatchFileReader) else reader
            for batch in batches:
                if at + batch.num_rows > skip:
                    yield at, batch.select(columns)
                at += batch.num_rows
        return
    import pyarrow.parquet as pq

    # Without pre-buffering and threads, pyarrow holds about a batch of the row group (2M rows:
    # its pool's peak 21 MB instead of 82, process 141 MB instead of 233, and no slower).
    with pq.ParquetFile(path, pre_buffer=False) as parquet:
        groups = []
        for g in range(parquet.metadata.num_row_groups):
            rows = parquet.metadata.row_group(g).num_rows
            if not groups and at + rows <= skip:
                at += rows  # a group wholly before row `skip`, unread
            else:
                groups.append(g)
        if not groups:
            return  # (iter_batches reads every row group when given none)
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=groups, columns=columns,
                                          use_threads=False):
            yield at, batch
            at += batch.num_rows
