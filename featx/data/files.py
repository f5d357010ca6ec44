"""Input files: which files a configured path names (a file, a folder of Parquet shards, a
Hugging Face `save_to_disk` folder), their format and encoding, and the `Block` every format's
reader yields. No torch.
"""
from __future__ import annotations

import codecs
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featx.data import explain
from featx.errors import FeatxError, shown

# Bytes of a file decoded at a time (a block of lines).
BLOCK_BYTES = 1 << 20
# Rows of a Parquet, Arrow or in-memory source converted at a time.
BATCH_ROWS = 1 << 16
# The format a file's suffix names (data.format unset).
SUFFIX_FORMATS = {".csv": "csv", ".tsv": "tsv", ".txt": "tsv", ".jsonl": "jsonl", ".json": "jsonl",
                  ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
PARQUET_SUFFIXES = (".parquet", ".pq")  # a folder's shards
# Byte-order marks of the encodings a spreadsheet or Windows editor saves ("Unicode text" is UTF-16).
BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
        (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"), (codecs.BOM_UTF8, "utf-8"))


@dataclass
class Block:
    values: dict
    """Per column read: a pyarrow array, or a list of Python values."""
    records: np.ndarray
    """(n,) int64: each row's record number in its file (0-based, in `where`'s numbering)."""


# ---------------------------------------------------------------------------------------------
# Files and folders


def format_of(path: Path, fmt: str | None) -> str:
    if fmt is not None:
        return fmt
    try:
        return SUFFIX_FORMATS[path.suffix.lower()]
    except KeyError:
        raise FeatxError(f"cannot tell the format of {str(path)!r} from its suffix; set data.format "
                         "to one of: csv, tsv, jsonl, parquet") from None


def folder_kind(path: Path) -> str | None:
    """What a data folder holds: "arrow" (a Hugging Face Dataset's `save_to_disk`: state.json
    and data-*.arrow), "parquet" (shards), or None (not a data folder featx reads)."""
    if (path / "state.json").is_file() and any(path.glob("*.arrow")):
        return "arrow"
    if any(p.suffix.lower() in PARQUET_SUFFIXES for p in path.iterdir() if p.is_file()):
        return "parquet"
    return None


def folder_files(path: Path) -> list[Path]:
    """The data files of a path: itself, or a folder's Arrow files as its `save_to_disk`
    state.json lists them, or its Parquet shards by name; anything else is refused."""
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
        return sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in PARQUET_SUFFIXES)
    if (path / "state.json").is_file() and (path / "dataset_info.json").is_file():
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
    """[dataset_info.json] of a `save_to_disk` folder: its ClassLabel names are data too."""
    info = path / "dataset_info.json"
    return [info] if path.is_dir() and folder_kind(path) == "arrow" and info.is_file() else []


def _holds(folder: Path) -> str:
    inside = sorted(p.name for p in folder.iterdir() if p.is_file())[:5]
    return f" (it holds {', '.join(inside)}{', ...' if len(inside) == 5 else ''})" if inside else ""


def check_file(path: Path) -> None:
    if path.is_dir():
        raise FeatxError(f"data file {str(path)!r} is a folder, not a file; give the file itself{_holds(path)}")
    if path.exists() and not path.is_file():
        raise FeatxError(f"data file {str(path)!r} is not a regular file (a device, a pipe or a socket); "
                         "give a data file (for stdin, featx predict takes -)")
    if not path.is_file():
        hint = "" if path.parent.is_dir() else f" (the folder {str(path.parent)!r} does not exist either)"
        raise FeatxError(f"data file {str(path)!r} not found{hint}; check the path in the pipeline "
                         "(relative paths start at the directory featx runs from)")
    with open(path, "rb") as f:
        head = f.read(8)
    packed = next((name for magic, name in COMPRESSED.items() if head.startswith(magic)), None)
    if packed is not None:
        raise FeatxError(f"data file {str(path)!r} is {packed}-compressed; featx reads plain CSV, TSV, "
                         "JSONL and label-text files (and Parquet, compressed inside): decompress it "
                         "first (for example `gunzip -k`, `unzstd`, `unxz`) and point the pipeline at "
                         "the result")


# The first bytes of the compressed files a data file may arrive as.
COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd",
              b"PK\x03\x04": "zip"}


def encoding_of(path: Path, encoding: str) -> tuple[str, int]:
    """(the codec to read `path` with, bytes of a byte-order mark to skip): a UTF-16/32 mark is
    unambiguous (refused beside another data.encoding), a file half NUL bytes is UTF-16 saved
    without one, and UTF-8's mark is no part of the first column's name."""
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        raise FeatxError(f"unknown data.encoding {shown(encoding)}") from None
    with open(path, "rb") as f:
        head = f.read(4000)
    default = name == "utf-8"
    bom = next(((mark, codec) for mark, codec in BOMS if head.startswith(mark)), None)
    if bom is not None and bom[1] != "utf-8" and not name.startswith(("utf-16", "utf-32")):
        family = bom[1][:6]
        if not default:
            raise FeatxError(f"{path} starts with a {family.upper()} byte-order mark, but data.encoding is "
                             f"{shown(encoding)}: set data.encoding = \"{family}\" (or leave it unset)")
        return bom[1], len(bom[0])
    if bom is not None and name in ("utf-16", "utf-32", "utf-8"):
        return bom[1], len(bom[0])
    if head.count(b"\x00") > len(head) // 4 and not name.startswith(("utf-16", "utf-32")):
        raise FeatxError(f"{path} is not {encoding}: a quarter of its bytes are NUL, as in UTF-16 text "
                         "saved without a byte-order mark; set data.encoding = \"utf-16-le\" (or "
                         "\"utf-16-be\")")
    return name, 0


def decoded_blocks(path: Path, encoding: tuple[str, int]):
    """The file's text a block at a time, from after its byte-order mark; a byte the codec
    refuses is an error naming its line and the option to set."""
    codec, skip = encoding
    decoder = codecs.getincrementaldecoder(codec)()
    with open(path, "rb") as f:
        f.seek(skip)
        while True:
            data = f.read(BLOCK_BYTES)
            try:
                text = decoder.decode(data, final=not data)
            except UnicodeDecodeError:
                explain.decode_error(path, codec, skip)
                raise
            if text:
                yield text
            if not data:
                return


def stdin_text() -> str:
    """stdin decoded as UTF-8 from its bytes (a BOM dropped), whatever the terminal's locale says;
    bytes that are not UTF-8 are one error naming where."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text stream put in place of stdin (a notebook, a test)
        return sys.stdin.read()
    data = buffer.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise FeatxError(f"stdin is not UTF-8 text: byte {exc.start:,} (line {line}) is "
                         f"{data[exc.start:exc.start + 1]!r}; convert it first (iconv -f <its encoding> -t "
                         "utf-8) or pass a file with data.encoding set") from None
