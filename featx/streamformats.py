"""Large files of other formats read in a stream, as featx.stream reads CSV/TSV. No torch.

    LineSource      JSONL and `label text...` files: a block of whole lines at a time, split as
                    featx.readers splits the whole text (JSONL at line feeds and carriage
                    returns, label-text by str.splitlines; blank lines skipped);
                    each JSON line parsed by Python's json, with the readers' rules
    ColumnarSource  Parquet files and saved Hugging Face datasets (featx.streamcolumns)
    sources_of      the Sources of a pipeline's [data] (CSV/TSV files: featx.stream.source_of)

JSON is parsed by Python, not pyarrow.json: pyarrow reads `1` and `1.0` of one column alike and
accepts lines Python's json refuses (several objects on a line, raw control characters), where
the whole-file reader must give the same rows or the same error. Every value the readers would
report (a bad line, a repeated key, a missing or empty field, a NUL, a lone surrogate) raises
`stream.Fallback`, and that reader names the row.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from featx import stream
from featx.errors import FeatxError
from featx.readers import (folder_files, folder_kind, format_from_suffix, is_missing, json_lines,
                           label_and_text)
from featx.streamcolumns import ColumnarSource


def sources_of(cfg) -> dict:
    """The files or folders of `cfg` (a DataConfig) to stream, per split (key None: one that
    featx splits itself), when together they reach the threshold; or Fallback."""
    if cfg.path is not None or not (cfg.dev or cfg.test):
        files = {None: Path(cfg.path or cfg.train)}
    else:
        files = {s: Path(f) for s, f in (("train", cfg.train), ("dev", cfg.dev), ("test", cfg.test)) if f}
    sizes = [_size(path) for path in files.values()]
    if -1 in sizes or sum(sizes) < stream.threshold():
        raise stream.Fallback("small or missing files, or not data folders")  # the reader says which
    sources = {s: source_for(path, cfg, cfg.format) for s, path in files.items()}
    if cfg.drop_empty:  # every pass then sees the rows the whole-file reader keeps
        drop = tuple(c for c in (cfg.text or "text", cfg.text_pair) if c is not None)
        sources = {s: dataclasses.replace(src, drop=drop) for s, src in sources.items()}
    return sources


def _size(path: Path) -> int:
    """Bytes of a file, or of a folder's data files; -1: missing, not a regular file, or a
    folder featx does not read."""
    try:
        if path.is_file():
            return path.stat().st_size
        return sum(f.stat().st_size for f in folder_files(path)) if path.is_dir() else -1
    except (FeatxError, OSError):
        return -1


def source_for(path: Path, cfg, fmt: str | None):
    """The Source of a configured file or folder (`fmt`: data.format), or Fallback."""
    if path.is_dir():
        try:
            files, kind = folder_files(path), folder_kind(path)
        except FeatxError as exc:  # the whole-file reader says what the folder holds
            raise stream.Fallback(str(exc)) from None
        if kind == "parquet" and fmt not in (None, "parquet"):
            raise stream.Fallback(f"Parquet shards read as {fmt}")
        return ColumnarSource.of(path, tuple(files), arrow=kind == "arrow")
    if fmt is None:
        try:
            fmt = format_from_suffix(path)
        except FeatxError as exc:
            raise stream.Fallback(str(exc)) from None
    if fmt == "parquet":
        return ColumnarSource.of(path, (path,), arrow=False)
    if fmt in ("jsonl", "label-text"):
        return LineSource.of(path, cfg, fmt)
    return stream.source_of(path, cfg, fmt)


# ---------------------------------------------------------------------------------------------
# JSONL and label-text


class _Repeated(Exception):
    pass


def _unique(pairs):
    """featx.readers' rule: a key twice in one object (at any depth) is an error."""
    record = dict(pairs)
    if len(record) != len(pairs):
        raise _Repeated
    return record


_STRICT = json.JSONDecoder(object_pairs_hook=_unique)
_ABSENT = object()  # a key a record does not have
# Escapes that can put a NUL or a lone surrogate into a parsed string: a block without them needs
# no per-text check (raw NULs and surrogates are not valid JSON text, nor valid UTF-8).
_RISKY = re.compile(rb"\\u(0000|[dD][89a-fA-F])")


@dataclass(frozen=True)
class LineSource:
    """A UTF-8 file of one record a line: a JSON object (`jsonl`) or `label text...`
    (`label-text`), read a block of whole lines at a time."""
    kind: ClassVar[str] = "lines"  # how featx.spans shares it: byte ranges cut after a line feed
    path: Path
    fmt: str
    state: tuple[int, int, int]
    span: tuple[int, int] | None = None
    """Only the lines in bytes [start, stop) (a torchrun rank's share, cut just after line feeds)."""
    drop: tuple[str, ...] = ()
    """Text keys whose missing or blank value drops the record (data.drop_empty, `stream.Source.drop`)."""

    @classmethod
    def of(cls, path: Path, cfg, fmt: str) -> "LineSource":
        if cfg.encoding.replace("_", "-").lower() not in ("utf-8", "utf8"):
            raise stream.Fallback(f"encoding {cfg.encoding}")
        with open(path, "rb") as f:
            head = f.read(4000)
        if head.startswith((b"\xff\xfe", b"\xfe\xff")) or head.count(b"\x00"):
            raise stream.Fallback("UTF-16 or NUL bytes")  # the reader names the encoding to set
        return cls(path, fmt, stream._state(path))

    @property
    def files(self) -> tuple[Path, ...]:
        return (self.path,)

    @property
    def states(self) -> tuple[tuple[int, int, int], ...]:
        return (self.state,)

    @property
    def nbytes(self) -> int:
        return self.state[0] if self.span is None else self.span[1] - self.span[0]

    def reading(self) -> list:
        return [self.fmt]

    def lines(self):
        """(the block's bytes, its non-blank lines), in file order, less the records `drop`
        drops."""
        for data, lines, _, _ in self._lines():
            yield data, lines

    def _lines(self):
        """(the block's bytes, its non-blank lines `drop` keeps, those it drops, the kept JSON
        lines decoded (None: not decoded yet, or not a JSON object)), in file order: the lines
        featx.readers gets from the whole decoded text, since a block ends just after a line
        feed (which always ends a line, and a CRLF is never cut). Under `drop` each JSON line is
        decoded once, here, for every use."""
        stream.check_states(self)
        start, stop = self.span or (0, self.state[0])
        for offset, data in _line_blocks(self.path, start, stop):
            text = data.decode("utf-8-sig" if offset == 0 else "utf-8")  # a BOM is no part of a line
            split = json_lines(text) if self.fmt == "jsonl" else text.splitlines()
            lines = [line for line in split if line and not line.isspace()]
            if not self.drop:
                yield data, lines, [], None
                continue
            records = [self._record(line) for line in lines]
            blank = [self._blank(line, record) for line, record in zip(lines, records)]
            yield (data, [line for line, b in zip(lines, blank) if not b],
                   [record for record, b in zip(records, blank) if b],
                   [record for record, b in zip(records, blank) if not b])

    def _record(self, line: str):
        """A JSON line decoded (None: not JSON, or not a label-text file's; pass 1 refuses it)."""
        if self.fmt != "jsonl":
            return None
        try:
            return _STRICT.decode(line)
        except (ValueError, RecursionError, _Repeated):
            return None

    def _blank(self, line: str, record) -> bool:
        """Whether a record's text (a `drop` key's value) is missing, as featx.readers reads it
        (a JSON null, NaN, a blank string, an absent key; a label with no text). A line that is
        not a JSON object is kept, for pass 1 to refuse."""
        if self.fmt != "jsonl":
            return is_missing(label_and_text(line)[1])
        return type(record) is dict and any(is_missing(record.get(key)) for key in self.drop)

    def parse(self, wanted: stream.Wanted) -> stream.Parsed:
        kept = stream.Pass(wanted)
        n = 0
        seen: set[str] = set()  # the kept keys some record has (read whole: a column of the file)
        try:
            for data, lines, dropped, records in self._lines():
                if dropped:  # counted by their split value, as read whole
                    kept.count_dropped([record.get(wanted.split) for record in dropped]
                                       if wanted.split is not None else [""] * len(dropped))
                if self.fmt == "jsonl":
                    block = _jsonl_block(lines, wanted, kept, careful=_RISKY.search(data) is not None, seen=seen,
                                         records=records)
                else:
                    block = _label_text_block(data, lines, wanted, kept)
                if wanted.targets:
                    kept.add_targets(np.array(block.targets, dtype=np.float64).reshape(len(lines), len(wanted.labels)))
                else:
                    kept.labels.add(block.codes)
                if wanted.id is not None:
                    kept.add_ids(stream.python_hashes(block.ids))
                if wanted.split is not None:
                    kept.splits.add(block.places)
                n += len(lines)
        except (ValueError, RecursionError, KeyError, TypeError, _Repeated) as exc:  # UnicodeError is a ValueError
            raise stream.Fallback(f"{self.fmt}: {type(exc).__name__} {str(exc)[:200]}") from None
        if self.fmt == "jsonl" and not set(wanted.keep) <= seen:
            raise stream.Fallback("a kept key in no record")  # the whole-file reader lists the columns
        return kept.parsed(self, n, self.nbytes)

    def values(self, column: str, assignment: np.ndarray | None, code: int, *, absent: bool = False):
        """`column`'s values (`absent`: None for a record without the key) of the records whose
        split code is `code`, a block at a time."""
        record = 0
        for _, lines, _, records in self._lines():
            mine = stream.select(lines, assignment, code, record)
            if self.fmt != "jsonl":
                yield [label_and_text(line)[1] for line in mine]
            else:
                decoded = (map(json.loads, mine) if records is None
                           else stream.select(records, assignment, code, record))
                yield [r.get(column) for r in decoded] if absent else [r[column] for r in decoded]
            record += len(lines)

    def kept(self, column: str, assignment: np.ndarray | None, code: int):
        """A kept column's values as featx.labels keeps a JSON row's: str() of each, "" for a
        null or a record without the key."""
        for values in self.values(column, assignment, code, absent=True):
            yield ["" if v is None else v if type(v) is str else str(v) for v in values]


@dataclass
class _Block:
    """What pass 1 keeps of a block of lines: per line its label code (or targets), split
    code and id."""
    codes: list = field(default_factory=list)
    targets: list = field(default_factory=list)
    places: list = field(default_factory=list)
    ids: list = field(default_factory=list)


def _jsonl_block(lines: list[str], wanted: stream.Wanted, kept: stream.Pass, *, careful: bool,
                 seen: set[str], records: list | None = None) -> _Block:
    """Pass 1 over a block of JSON lines (`records`: those already decoded, None where not), the
    distinct labels and split values put in `kept`'s codes; an exception at anything
    featx.readers or featx.labels reports."""
    decode, key, target = _STRICT.decode, stream.value_key, stream.python_target
    labels, splits = kept.labels.index, kept.splits.index
    texts, label, split, id_, plain = wanted.texts, wanted.labels[0], wanted.split, wanted.id, wanted.plain
    targets = wanted.labels if wanted.targets else None
    out = _Block()
    for k, line in enumerate(lines):
        record = records[k] if records is not None and records[k] is not None else decode(line)
        if type(record) is not dict:
            raise TypeError("a line that is not a JSON object")
        for text in texts:
            value = record[text]
            if type(value) is not str or not value or value.isspace():
                raise TypeError("a missing or empty text, or one that is not a string")
            if careful:
                _check_storable(value)
        if targets is None:
            out.codes.append(labels.setdefault(key(record[label]), len(labels)))
        else:
            out.targets.extend(target(record[c], plain) for c in targets)
        if id_ is not None:
            value = record[id_]
            if type(value) is not str and type(value) is not int:
                raise TypeError("an id that is not a string or an integer")
            value = str(value)
            if not value or value.isspace():
                raise TypeError("an empty id")
            if careful:
                _check_storable(value)
            out.ids.append(value)
        if split is not None:
            out.places.append(splits.setdefault(key(str(record[split])), len(splits)))
        for column in wanted.keep:  # a record without the key: "", as read whole
            value = record.get(column, _ABSENT)
            if value is _ABSENT:
                continue
            seen.add(column)
            if careful and type(value) is str:  # str() of another value escapes a NUL or surrogate
                _check_storable(value)
    return out


def _label_text_block(data: bytes, lines: list[str], wanted: stream.Wanted, kept: stream.Pass) -> _Block:
    """Pass 1 over a block of `label text...` lines (featx.readers' columns "label", "text")."""
    if (wanted.texts, wanted.labels, wanted.split, wanted.id, wanted.keep) != (("text",), ("label",), None, None, ()):
        raise KeyError("label-text files have the columns label and text only")
    if b"\x00" in data:  # every character of a non-blank line is in its label or its text
        raise ValueError("a NUL byte")
    labels, out = kept.labels.index, _Block()
    for line in lines:
        name, rest = label_and_text(line)
        if not rest or rest.isspace():
            raise ValueError("a line with no text")
        if wanted.targets:
            out.targets.append(stream.python_target(name, wanted.plain))
        else:
            out.codes.append(labels.setdefault((str, name), len(labels)))
    return out


def _check_storable(value: str) -> None:
    """featx.labels' rule for a text or label: no NUL, no lone surrogate (a ValueError)."""
    if "\x00" in value:
        raise ValueError("a NUL")
    value.encode("utf-8")  # UnicodeEncodeError on a lone surrogate


def check_labels(values: list) -> None:
    """The distinct labels of a pass 1 (any format's), checked as featx.labels checks each row's:
    present (no null, NaN or blank string), a scalar (a list or an object is not a class), no NUL
    or lone surrogate; Fallback otherwise."""
    for value in values:
        if is_missing(value) or isinstance(value, (list, dict)):
            raise stream.Fallback("a missing label, or one that is not a single value")
        if isinstance(value, str):
            try:
                _check_storable(value)
            except ValueError:
                raise stream.Fallback("a label with a NUL or a lone surrogate") from None


def _line_blocks(path: Path, start: int, stop: int):
    """(offset, bytes) of [start, stop), about BLOCK_BYTES at a time, each block ending just
    after a line feed (but the last); a line longer than a block is read whole."""
    with open(path, "rb") as f:
        f.seek(start)
        pending, at = bytearray(), start
        while start < stop:
            data = f.read(min(stream.BLOCK_BYTES, stop - start))
            if not data:
                raise FeatxError(f"{path} is shorter than when featx first read it; rerun once it "
                                 "stays as it is")
            start += len(data)
            cut = len(data) if start >= stop else data.rfind(b"\n") + 1
            if not cut:  # inside a line longer than a block
                pending += data
                continue
            pending += data[:cut]
            yield at, bytes(pending)
            at += len(pending)
            pending = bytearray(data[cut:])
