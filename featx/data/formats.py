"""Input formats: the reader of each (`READERS`) and the sources of a configured path. No torch.

    Delimited   CSV/TSV (featx.data.delimited: pyarrow.csv, every field a string)
    Lines       JSONL and `label text...` lines (featx.data.lines: Python's json)
    Columnar    Parquet files and saved Hugging Face datasets (featx.data.columnar)
    InMemory    a built-in dataset's rows (featx.data.lines)

Each yields `Block`s (featx.data.files): per column a pyarrow array or a list of Python values,
and each row's record number in its file, which `where` turns into "file, row N". Values are
judged by featx.data.rows; what a fast reader refused is explained by featx.data.explain.
"""
from __future__ import annotations

from pathlib import Path

from featx.data.columnar import Columnar, arrow_names
from featx.data.delimited import Delimited
from featx.data.files import check_file, encoding_of, folder_files, folder_kind, format_of
from featx.data.lines import Lines


def _delimited(path: Path, cfg, fmt: str) -> Delimited:
    delimiter = {None: "\t" if fmt == "tsv" else ",", "\\t": "\t"}.get(cfg.delimiter, cfg.delimiter)
    return Delimited(path, encoding_of(path, cfg.encoding), delimiter=delimiter, quoting=cfg.quoting,
                     names=None if cfg.header else tuple(cfg.columns or ()))


READERS = {
    "csv": _delimited, "tsv": _delimited,
    "jsonl": lambda path, cfg, fmt: Lines(path, fmt, encoding_of(path, cfg.encoding)),
    "label-text": lambda path, cfg, fmt: Lines(path, fmt, encoding_of(path, cfg.encoding)),
    "parquet": lambda path, cfg, fmt: Columnar(path, arrow=False),
}


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
