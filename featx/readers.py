"""Reading data files into tables: CSV/TSV, JSONL, `label text` lines, Parquet, and folders of
Parquet shards or a Hugging Face `save_to_disk` dataset, each a `Table` of raw rows. No torch.

It owns the files' formats, encodings and shapes; what a row's values mean (texts, ids, labels,
splits) is featx.labels', and the built-in datasets are featx.builtin's. Every error names the
file and the row, and says what to do. Row numbers are 1-based line numbers in the file (for
JSONL and Parquet: record numbers), so an editor can jump to them.
"""
from __future__ import annotations

import codecs
import csv
import io
import json
import logging
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import numpy as np

from featx.config import DataConfig
from featx.errors import FeatxError, shown

log = logging.getLogger("featx")


@dataclass
class Table:
    path: str
    columns: list[str]
    rows: list[dict]
    lines: list[int]
    """Line (or record) number of each row in the file, for error messages."""
    files: list[str] | None = None
    """Per-row file name, when the table joins several files."""

    def where(self, i: int) -> str:
        return f"{self.files[i] if self.files else self.path}, row {self.lines[i]}"

    @classmethod
    def concat(cls, tables: list["Table"]) -> "Table":
        if len(tables) == 1:
            return tables[0]
        for t in tables[1:]:
            if t.columns != tables[0].columns:
                raise FeatxError(f"{t.path} has columns {t.columns}, but {tables[0].path} has "
                                 f"{tables[0].columns}; files of one split must match")
        return cls(" + ".join(t.path for t in tables), tables[0].columns,
                   [r for t in tables for r in t.rows], [n for t in tables for n in t.lines],
                   [t.path for t in tables for _ in t.rows])

    def require(self, column: str, role: str) -> None:
        if not self.columns and not self.rows:  # an empty JSONL or label-text file: no column, as no row
            raise FeatxError(f"{self.path} holds no rows (so no column {shown(column)}, configured as "
                             f"data.{role}); give it rows, or leave the file out of [data]")
        if column not in self.columns:
            raise FeatxError(
                f"{self.path}: no column {shown(column)} (configured as data.{role}); "
                f"the columns are: {', '.join(shown(c) for c in self.columns[:30])}{_delimiter_hint(self.columns)}")


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


def read_tables(paths: str | tuple[str, ...], cfg: DataConfig) -> Table:
    """One table from a file, or from several files with the same columns (CoLA's two devs); a
    folder of Parquet shards or a Hugging Face dataset saved with `save_to_disk` is its files."""
    return Table.concat([table for p in ([paths] if isinstance(paths, str) else paths)
                         for table in _read_spec(Path(p), cfg)])


def _read_spec(path: Path, cfg: DataConfig) -> list[Table]:
    """The tables of one configured path: a file's, or each data file's of a folder."""
    if not path.is_dir():
        return [read_table(path, cfg)]
    files = folder_files(path)
    if folder_kind(path) == "arrow":
        names = arrow_names(path)
        return [_read_arrow(f, names) for f in files]
    return [read_table(f, cfg) for f in files]


def folder_kind(path: Path) -> str | None:
    """What a data folder holds: "arrow" (a Hugging Face Dataset's `save_to_disk`: state.json
    and data-*.arrow), "parquet" (shards), or None (not a data folder featx reads)."""
    if (path / "state.json").is_file() and any(path.glob("*.arrow")):
        return "arrow"
    if any(p.suffix.lower() in (".parquet", ".pq") for p in path.iterdir() if p.is_file()):
        return "parquet"
    return None


def folder_files(path: Path) -> list[Path]:
    """The data files of a folder, in their order: the Arrow files a `save_to_disk` state.json
    lists, or every Parquet shard by name. Anything else is refused with what the folder holds."""
    if not path.is_dir():
        return [path]
    kind = folder_kind(path)
    if kind == "arrow":
        try:
            listed = [e["filename"] for e in json.loads((path / "state.json").read_text())["_data_files"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise FeatxError(f"{path}/state.json is not a Hugging Face save_to_disk state ({exc}); save "
                             "the dataset again with Dataset.save_to_disk") from None
        files = [path / name for name in listed]
        missing = [str(f) for f in files if not f.is_file() or f.parent != path]
        if missing or not files:
            raise FeatxError(f"{path}: state.json lists Arrow files that are not in the folder "
                             f"({', '.join(missing[:3]) or 'none listed'}); save the dataset again")
        return files
    if kind == "parquet":
        return sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in (".parquet", ".pq"))
    if (path / "state.json").is_file() and (path / "dataset_info.json").is_file():
        # `save_to_disk` of no rows writes no Arrow file: not "a folder that holds no dataset"
        raise FeatxError(f"{path}: a Hugging Face save_to_disk dataset with no Arrow file (saved with no "
                         "rows?); give it rows, or leave it out of [data]")
    if (path / "dataset_dict.json").is_file():
        splits = [p.name for p in sorted(path.iterdir()) if p.is_dir()]
        raise FeatxError(f"{path} is a Hugging Face DatasetDict ({', '.join(splits)}): give each split's "
                         f"folder, e.g. data.train = \"{path / (splits[0] if splits else 'train')}\" "
                         "(and data.dev, data.test)")
    raise FeatxError(f"data file {str(path)!r} is a folder, not a file, and holds no Parquet shards or "
                     f"Hugging Face save_to_disk dataset; give the file itself{_holds(path)}")


def names_file(path: Path) -> list[Path]:
    """[dataset_info.json] of a `save_to_disk` folder that has one, else []: the class names its
    ClassLabel codes are read as are data too (a later stage's check of the files, beside the
    Arrow files, sees them edited)."""
    info = path / "dataset_info.json"
    return [info] if path.is_dir() and folder_kind(path) == "arrow" and info.is_file() else []


def _holds(folder: Path) -> str:
    """The first files of a folder, " (it holds a, b, ...)", for an error that names it."""
    inside = sorted(p.name for p in folder.iterdir() if p.is_file())[:5]
    return f" (it holds {', '.join(inside)}{', ...' if len(inside) == 5 else ''})" if inside else ""


# A number written plainly: "7", "-1.5", "2e3"; not "007" (a code) nor "nan" or "inf".
PLAIN_NUMBER = re.compile(r"[+-]?((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def class_key(value) -> str:
    """Canonical class name: 1, "1" and "1.0" are the same class; "007" and "7" are not; a
    boolean (JSON, Parquet) is "True" / "False", as a CSV of booleans spells it. Integers are
    compared exactly: through a float, 2**53 and 2**53 + 1 (or "1.0000000000000001" and "1",
    "1e-400" and "0") were one class, named after neither."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        value = repr(value)  # JSON's 1e-07 is the "0.0000001" a CSV writes (below); nan, inf as they are
    text = str(value).strip()
    match = PLAIN_NUMBER.fullmatch(text)
    if match is None:
        return text
    if match.group(2) and match.group(3) is None and match.group(4) is None and len(text) < 300:  # "+7", "-0"
        return str(int(text))
    if math.isfinite(float(text)):  # (so at most about 309 digits before the point)
        exact = Decimal(text)
        if exact == exact.to_integral_value():
            return str(int(exact))
        # "1.5", "1.50" and "+1.5" are one class, named "1.5" (compared exactly, as integers are).
        exact = exact.normalize()
        return format(exact, "f") if exact.adjusted() > -20 else str(exact).lower()
    return text


def arrow_names(folder: Path) -> dict[str, list[str]]:
    """{column: class names} of a saved dataset's ClassLabel columns (alone or in a Sequence,
    one label list per row), from its dataset_info.json: labels are read as their names."""
    try:
        features = json.loads((folder / "dataset_info.json").read_text()).get("features") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    out = {}
    for column, spec in features.items() if isinstance(features, dict) else ():
        inner = spec.get("feature", spec) if isinstance(spec, dict) and spec.get("_type") in (
            "Sequence", "List", "LargeList") else spec
        if isinstance(inner, dict) and inner.get("_type") == "ClassLabel" and isinstance(inner.get("names"), list):
            out[str(column)] = [str(n) for n in inner["names"]]
            # Two codes read as one class: a name written twice (datasets itself refuses that), or
            # names featx's label rules read as one class ("1" and "1.0", "pos" and " pos").
            same: dict[str, list[str]] = {}
            for name in out[str(column)]:
                same.setdefault(class_key(name), []).append(name)
            repeated = [names for names in same.values() if len(names) > 1]
            if repeated:
                raise FeatxError(f"{folder / 'dataset_info.json'}: the ClassLabel names of column {shown(column)} "
                                 f"{' and '.join(map(shown, repeated[0]))} are one class as featx reads labels "
                                 "(a name written twice, numbers of the same value, spaces around a name), so "
                                 "two codes would be one class; give each class a name of its own and save the "
                                 "dataset again")
    return out


def _read_arrow(path: Path, names: dict[str, list[str]]) -> Table:
    """One Arrow file of a `save_to_disk` dataset (the IPC stream format `datasets` writes, or
    the file format): rows as JSON would give them, ClassLabel codes as their names."""
    try:
        import pyarrow as pa
    except ImportError:
        raise FeatxError(f"{path}: a saved Hugging Face dataset needs pyarrow (pip install pyarrow)") from None
    try:
        with pa.memory_map(str(path)) as source:
            try:
                table = pa.ipc.open_stream(source).read_all()
            except pa.ArrowInvalid:
                source.seek(0)
                table = pa.ipc.open_file(source).read_all()
    except (pa.ArrowException, OSError) as exc:
        raise FeatxError(f"{path}: cannot read as an Arrow file ({exc}); save the dataset again "
                         "with Dataset.save_to_disk") from None

    def named(column: str, value, row: int):
        table_names = names.get(column)
        if table_names is None or value is None:
            return value
        if value == -1 and isinstance(value, int):
            return None  # ClassLabel's "no label" (GLUE's test splits): a missing label, not the last name
        listed = isinstance(value, list)  # a Sequence of ClassLabel codes: one row's labels
        codes = value if listed else [value] if isinstance(value, int) and not isinstance(value, bool) else []
        wrong = [v for v in codes if not (isinstance(v, int) and 0 <= v < len(table_names))]
        if wrong:
            # Python's names[-1] or names[-2] silently read the last class (but one), and a code
            # past the names was a class of that number beside them: another class than the file's.
            raise FeatxError(f"{path}, row {row}, column {shown(column)}: ClassLabel code {wrong[0]!r} is none "
                             f"of the column's {len(table_names)} class names; save the dataset again with "
                             + ("every code of a row's labels in 0..n-1" if listed else
                                "every code in 0..n-1 (or -1, no label)"))
        if listed:
            return [table_names[v] for v in value]
        if isinstance(value, str):
            return value  # stored as its name already
        if not isinstance(value, int) or isinstance(value, bool):
            # A float code (1.0) was read as the class "1" beside the names, never as one of them.
            raise FeatxError(f"{path}, row {row}, column {shown(column)}: {value!r} is not a ClassLabel code (an "
                             f"integer in 0..{len(table_names) - 1}); save the dataset again with integer codes")
        return table_names[value]
    try:
        rows = [{str(k): named(str(k), _plain(v), i) for k, v in r.items()}
                for i, r in enumerate(table.to_pylist(), start=1)]
    except UnicodeDecodeError:
        _check_utf8(path, table)  # names the row
        raise
    return Table(str(path), [str(c) for c in table.column_names], rows, list(range(1, len(rows) + 1)))


def _check_utf8(path: Path, table) -> None:
    """Refuse a string that is not UTF-8 (a writer that does not validate its strings leaves
    them) by its row and column, where converting the table raised a UnicodeDecodeError: in a
    string column, or one whose values hold strings (a list of labels, a struct, a dictionary)."""
    import pyarrow as pa

    for name, column in zip(table.column_names, table.columns):
        if not holds_strings(column.type):
            continue
        at = 0
        for chunk in column.chunks:
            try:
                chunk.validate(full=True)
            except pa.ArrowInvalid:
                for i in range(len(chunk)):  # a slice's own values (a list's child array is whole)
                    try:
                        chunk.slice(i, 1).to_pylist()
                    except (UnicodeDecodeError, pa.ArrowInvalid):
                        raise FeatxError(f"{path}, row {at + i + 1}, column {shown(str(name))}: bytes that are "
                                         "not valid UTF-8 text; write the file again from valid strings") from None
            at += len(chunk)


def holds_strings(kind) -> bool:
    """Whether an Arrow type's values hold strings: a string, or a list, struct, map or
    dictionary of them, at any depth."""
    import pyarrow as pa

    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return True
    if pa.types.is_dictionary(kind):
        return holds_strings(kind.value_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return holds_strings(kind.value_type)
    if pa.types.is_map(kind):
        return holds_strings(kind.key_type) or holds_strings(kind.item_type)
    if pa.types.is_struct(kind):
        return any(holds_strings(kind.field(i).type) for i in range(kind.num_fields))
    return False


def read_table(path: str | Path, cfg: DataConfig) -> Table:
    path = Path(path)
    if path.is_dir():
        raise FeatxError(f"data file {str(path)!r} is a folder, not a file; give the file itself{_holds(path)}")
    if path.exists() and not path.is_file():
        raise FeatxError(f"data file {str(path)!r} is not a regular file (a device, a pipe or a socket); "
                         "give a data file (for stdin, featx predict takes -)")
    if not path.is_file():
        hint = "" if path.parent.is_dir() else f" (the folder {str(path.parent)!r} does not exist either)"
        raise FeatxError(f"data file {str(path)!r} not found{hint}; check the path in the pipeline "
                         "(relative paths start at the directory featx runs from)")
    fmt = cfg.format or format_from_suffix(path)
    if fmt == "parquet":
        return _read_parquet(path)
    text = decode(path, cfg.encoding)
    if fmt == "jsonl":
        return _read_jsonl(path, text)
    if fmt == "label-text":
        return _read_label_text(path, text)
    delimiter = {None: "\t" if fmt == "tsv" else ",", "\\t": "\t"}.get(cfg.delimiter, cfg.delimiter)
    return read_delimited(path, text, cfg, delimiter=delimiter)


# The format a file's suffix names (data.format unset).
SUFFIX_FORMATS = {".csv": "csv", ".tsv": "tsv", ".txt": "tsv", ".jsonl": "jsonl", ".json": "jsonl",
                  ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}


def format_from_suffix(path: Path) -> str:
    try:
        return SUFFIX_FORMATS[path.suffix.lower()]
    except KeyError:
        raise FeatxError(f"cannot tell the format of {str(path)!r} from its suffix; set data.format "
                         "to one of: csv, tsv, jsonl, parquet") from None


# Byte-order marks of the encodings a spreadsheet or Windows editor saves ("Unicode text" is UTF-16).
BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"))


def decode(path: Path, encoding: str) -> str:
    data = path.read_bytes()
    default = encoding.replace("_", "-").lower() in ("utf-8", "utf8")
    bom = next((name for mark, name in BOMS if data.startswith(mark)), None)
    if bom is not None and codecs.lookup(encoding).name not in ("utf-16", "utf-32"):
        if not default:
            raise FeatxError(f"{path} starts with a {bom.upper()} byte-order mark, but data.encoding is "
                             f"{shown(encoding)}: set data.encoding = \"{bom}\" (or leave it unset)")
        log.info("%s is %s (its byte-order mark says so); reading it as such", path, bom.upper())
        encoding = bom  # the mark is unambiguous, and the codec strips it
    elif data[:4000].count(b"\x00") > len(data[:4000]) // 4 and codecs.lookup(encoding).name not in ("utf-16", "utf-32", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"):
        # every other byte NUL: UTF-16 saved without a mark (it decodes as UTF-8 full of NULs)
        raise FeatxError(f"{path} is not {encoding}: a quarter of its bytes are NUL, as in UTF-16 text "
                         "saved without a byte-order mark; set data.encoding = \"utf-16-le\" (or "
                         "\"utf-16-be\")")
    elif default:
        encoding = "utf-8-sig"  # a byte-order mark is not part of the first column's name
    try:
        return data.decode(encoding)
    except LookupError:
        raise FeatxError(f"unknown data.encoding {shown(encoding)}") from None
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise FeatxError(
            f"{path}, line {line}: bytes {shown(data[exc.start:exc.end])} are not valid {encoding}; set "
            "data.encoding to the file's encoding (e.g. \"latin-1\" or \"cp1252\")") from None


# A text can be a whole document: lift the csv module's 128 KiB field limit.
csv.field_size_limit(2**31 - 1)


def read_delimited(path: Path, text: str, cfg: DataConfig, delimiter: str) -> Table:
    try:
        return _read_delimited(path, text, cfg, delimiter, strict=True)
    except _Lenient:  # text after a closing quote ('"a"b'): read as the csv module always has
        return _read_delimited(path, text, cfg, delimiter, strict=False)


class _Lenient(Exception):
    """The strict csv reader refused what the lenient one reads."""


def _read_delimited(path: Path, text: str, cfg: DataConfig, delimiter: str, strict: bool) -> Table:
    quoting = csv.QUOTE_NONE if cfg.quoting == "none" else csv.QUOTE_MINIMAL
    source = io.StringIO(text, newline="")
    consumed: list[str] = []  # the lenient reader's lines of the record it is reading

    def recorded():
        for raw in source:
            consumed.append(raw)
            yield raw

    reader = csv.reader(source if strict else recorded(), delimiter=delimiter, quoting=quoting, strict=strict)
    columns = list(cfg.columns) if cfg.columns else None
    header_fields = None
    rows, lines = [], []
    line = 1
    for fields in _csv_rows(reader, path, lambda: line, strict):
        start, line = line, reader.line_num + 1
        if not strict:
            _check_lenient(consumed, path, start, delimiter, quoting)
            consumed.clear()
        if not fields or fields == [""]:  # blank line
            continue
        if columns is None:
            if not cfg.header:
                raise FeatxError(f"{path} has no header row (data.header = false); name its "
                                 "columns with data.columns = [...]")
            columns = [c.strip() for c in fields]
            header_fields = len(columns)
            while len(columns) > 1 and not columns[-1]:  # a spreadsheet's empty trailing header cells
                columns.pop()
            _check_unique_columns(columns, f"{path}, header row")
            continue
        if header_fields is not None and len(columns) < len(fields) <= header_fields:
            extra = [i for i in range(len(columns), len(fields)) if fields[i].strip()]
            if extra:
                raise FeatxError(f"{path}, row {start}: a value in column {extra[0] + 1}, whose header "
                                 "cell is empty; name the column or remove the value")
            fields = fields[:len(columns)]
        if cfg.header and cfg.columns is None and len(fields) != len(columns):
            raise FeatxError(
                f"{path}, row {start}: {len(fields)} fields but the header has {len(columns)}; "
                f"check the delimiter (data.delimiter, now {delimiter!r}) and data.quoting (now "
                f"{shown(cfg.quoting)})")
        if len(fields) < len(columns):
            raise FeatxError(f"{path}, row {start}: {len(fields)} fields, expected at least "
                             f"{len(columns)} ({', '.join(columns)})")
        rows.append(dict(zip(columns, fields)))
        lines.append(start)
    if columns is None:
        raise FeatxError(f"{path} is empty")
    return Table(str(path), columns, rows, lines)


def _check_lenient(raw: list[str], path: Path, start: int, delimiter: str, quoting: int) -> None:
    """A record the lenient reader read over several lines must not hold a quoted value that
    spans a line break and has text after its closing quote. Text after a closing quote on one
    line ('"a"b') is read as the csv module always has; but a quote opening a text ('"the cat')
    and closed only lines later by a quote inside another row's text ('was "great"') merged the
    rows between into one value, other rows' labels in it, and the rows were gone unsaid."""
    if len(raw) < 2 or quoting == csv.QUOTE_NONE:
        return
    broken = _broken_quoted_value(''.join(raw), delimiter)
    if broken:
        raise FeatxError(
            f"{path}, lines {start}-{start + len(raw) - 1}: a quote opens a value on line {start + broken[0]} "
            f"and the quote that closes it is {broken[1]} line(s) later, with text after it, so these lines "
            "would be read as one row; if quotes are text in this file, set data.quoting = \"none\", "
            "else quote the value whole (a quote inside a quoted value is written twice)")


def _broken_quoted_value(record: str, delimiter: str) -> tuple[int, int] | None:
    """(line of its opening quote within the record, lines it spans) of the first quoted value
    that holds a line break and is followed by text other than spaces before the next
    delimiter or line end: what only a quote closed in the wrong place gives."""
    i, n, at_start, line = 0, len(record), True, 0
    while i < n:
        c = record[i]
        if at_start and c == '"':
            j, breaks = i + 1, 0
            while j < n:
                if record[j] == '"':
                    if record[j + 1:j + 2] == '"':  # a quote written twice: one quote of the text
                        j += 2
                        continue
                    break
                if record[j] == "\n" or (record[j] == "\r" and record[j + 1:j + 2] != "\n"):
                    breaks += 1
                j += 1
            k = j + 1
            while k < n and record[k] not in (delimiter, "\r", "\n") and record[k].isspace():
                k += 1
            if breaks and k < n and record[k] not in (delimiter, "\r", "\n"):
                return line, breaks
            line += breaks
            i, at_start = j + 1, False
            continue
        if c == "\n" or (c == "\r" and record[i + 1:i + 2] != "\n"):
            line += 1
        at_start = c in (delimiter, "\r", "\n")
        i += 1
    return None


def _check_unique_columns(columns, where: str) -> None:
    repeated = sorted({c for c in columns if list(columns).count(c) > 1})
    if repeated:
        raise FeatxError(f"{where}: column name(s) {repeated} appear more than once; which one holds "
                         "the data is ambiguous: rename the columns")


def _csv_rows(reader, path: Path, start, strict: bool):
    """The reader's records; `start()`: the line the next one begins on."""
    try:
        yield from reader
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):
            # The lenient reader made the rest of the file one value: rows lost, and a class
            # named after them when the quote was in the label column.
            raise FeatxError(f"{path}, row {start()}: a quote opens a value there and is never closed, so "
                             f"the value would run to the end of the file (line {reader.line_num}); "
                             "close the quote (a quote inside a quoted value is written twice), or "
                             "set data.quoting = \"none\" if quotes are text") from None
        if strict:
            raise _Lenient from None
        raise FeatxError(f"{path}, line {reader.line_num}: not valid CSV/TSV ({exc}); check the "
                         "delimiter and data.quoting") from None


def json_lines(text: str) -> list[str]:
    """A JSONL text's lines: split at line feeds and carriage returns only. str.splitlines also
    splits at U+2028, U+0085 and other characters json.dumps(ensure_ascii=False) writes raw
    inside a string: a valid line was refused as "not valid JSON"."""
    return JSON_LINE_BREAK.split(text)


JSON_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _read_jsonl(path: Path, text: str) -> Table:
    rows, lines, columns = [], [], {}
    for number, line in enumerate(json_lines(text), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line, object_pairs_hook=_unique_keys)
        except json.JSONDecodeError as exc:
            raise FeatxError(f"{path}, row {number}: not valid JSON ({exc.msg}); each line must "
                             "be one JSON object") from None
        except RecursionError:
            raise FeatxError(f"{path}, row {number}: the JSON is nested thousands deep; each line must "
                             "be one flat JSON object (text, label, ...)") from None
        except _RepeatedKey as exc:
            raise FeatxError(f"{path}, row {number}: key {shown(exc.args[0])} appears twice in one object; "
                             "which value holds the data is ambiguous: fix the row") from None
        except ValueError as exc:  # an integer of thousands of digits, which Python will not convert
            raise FeatxError(f"{path}, row {number}: a JSON value Python will not read ({str(exc).split(':')[0]}): "
                             "write a number of that many digits as a string, or fix the row") from None
        if not isinstance(record, dict):
            raise FeatxError(f"{path}, row {number}: expected a JSON object, got "
                             f"{type(record).__name__}")
        columns.update(dict.fromkeys(record))
        rows.append(record)
        lines.append(number)
    return Table(str(path), list(columns), rows, lines)


class _RepeatedKey(Exception):
    pass


def _unique_keys(pairs):
    keys = [k for k, _ in pairs]
    for key in keys:
        if keys.count(key) > 1:
            raise _RepeatedKey(key)
    return dict(pairs)


def _read_label_text(path: Path, text: str) -> Table:
    """`label text...` per line: the first whitespace-separated word is the label (TREC, SST-2's
    labeled test file)."""
    rows, lines = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        label, rest = label_and_text(line)
        rows.append({"label": label, "text": rest})
        lines.append(number)
    return Table(str(path), ["label", "text"], rows, lines)


def label_and_text(line: str) -> tuple[str, str]:
    """A label-text line's label (its first word) and text (after the one whitespace character
    that ends the word: a space or a tab; the tab was read into the label)."""
    line = line.strip()
    end = next((i for i, c in enumerate(line) if c.isspace()), len(line))
    return line[:end], line[end + 1:]


def _read_parquet(path: Path) -> Table:
    try:
        import pandas as pd
    except ImportError:
        raise FeatxError(f"{path}: Parquet needs pandas and pyarrow (pip install pandas pyarrow), "
                         "or convert the file to CSV/JSONL") from None
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises many types for unreadable files
        _check_parquet_utf8(path)  # a string that is not UTF-8 fails pandas' conversion too
        raise FeatxError(f"{path}: cannot read as Parquet ({exc})") from None
    if any(name is not None for name in frame.index.names) and not set(frame.index.names) & set(frame.columns):
        # df.set_index("id").to_parquet(): the ids are a column of the file that pandas reads back
        # as its index, so data.id = "id" found "no column 'id'". A column like any other here.
        frame = frame.reset_index()
    try:
        rows = [{str(k): _plain(v) for k, v in r.items()} for r in frame.to_dict("records")]
    except UnicodeDecodeError:
        _check_parquet_utf8(path)
        raise
    return Table(str(path), [str(c) for c in frame.columns], rows, list(range(1, len(rows) + 1)))


def _check_parquet_utf8(path: Path) -> None:
    """`_check_utf8` on the file read as Arrow (no conversion to Python): names the row of a
    string that is not UTF-8; nothing when the file itself cannot be read (the caller says so)."""
    try:
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    except Exception:  # noqa: BLE001 - pyarrow raises many types for unreadable files
        return
    _check_utf8(path, table)


def _plain(value):
    """A Parquet cell as the Python value JSON would give: list<...> cells arrive as numpy arrays
    (a list of labels, not the text "['a' 'b']"), numbers and booleans as numpy scalars, an empty
    cell as NaN or None."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        value = value.item()
    return None if is_missing(value) else value


def is_missing(value) -> bool:
    """Nothing there: None (a JSON null, an empty Parquet cell), a float NaN, or an empty field.
    A string such as "NA" or "none" is a value (a class may be called that)."""
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and not value.strip()
