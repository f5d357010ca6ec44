"""Where predictions go: a regular file in a format featx writes (chosen by `--format` or the
suffix), or stdout (`-`); never one of the pipeline's inputs (its data and pipeline files,
predict's input, the model folder, featx's own files in the data directory), and never a FIFO,
a device or a link. Every check runs before a row is embedded. `write_table` writes the
predictions whole: a file is renamed into place, stdout gets the same bytes.
"""
from __future__ import annotations

import csv
import io
import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from featx.errors import FeatxError, check_choice
from featx.files import kind_of

OUTPUT_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
                  ".parquet": "parquet", ".pq": "parquet"}
FORMAT_NAMES = ("csv", "tsv", "jsonl", "parquet")
STDOUT = "-"
# Names of a process's streams rather than of files, whatever they resolve to (/dev/stdout is
# a link to /proc/self/fd/1, which is a link to the terminal, a pipe or the file stdout goes to).
STREAMS = ("/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty")
STREAM_ROOTS = (Path("/dev/fd"), Path("/proc"))


@dataclass(frozen=True)
class Output:
    """Where predictions are written: `path` (None for stdout) in `kind` (one of FORMAT_NAMES)."""
    path: Path | None
    kind: str

    def __str__(self) -> str:
        return STDOUT if self.path is None else str(self.path)


def check_output(out: str | Path, format: str | None, pipeline, source: str, manifest) -> Output:
    """Where `out` writes, checked before a row is embedded: stdout for "-"; otherwise a new or
    regular file that is none of the pipeline's inputs, in a known format, in a writable folder."""
    from featx.files import refuse_link, writable_dir

    if format is not None:
        check_choice(format, FORMAT_NAMES, "--format")
    if str(out) == STDOUT:
        return Output(None, _parquet_ready(format or "csv"))
    out = Path(out)
    _refuse_special(out)
    refuse_inputs(out, pipeline_inputs(pipeline, manifest, source, pipeline.root / "predictions"), "--out")
    if out.is_dir():
        raise FeatxError(f"--out {str(out)!r} is a folder; give a file name (e.g. {str(out / 'predictions.csv')!r})")
    by_suffix = OUTPUT_FORMATS.get(out.suffix.lower())
    if format is None and by_suffix is None:
        raise FeatxError(f"--out {str(out)!r}: featx writes predictions as "
                         f"{', '.join(sorted(OUTPUT_FORMATS))}, chosen by the suffix (or by --format); "
                         f"{out.suffix or 'no suffix'} is none of them")
    if format is not None and by_suffix not in (None, format):
        raise FeatxError(f"--out {str(out)!r} ends in {out.suffix}, a {by_suffix} suffix, and --format is "
                         f"{format}: drop --format or give the file a .{format} suffix")
    refuse_link(out, "where featx would write the predictions")
    root = pipeline.root if out.parent.resolve() == (pipeline.root / "predictions").resolve() else None
    writable_dir(out.parent, "the output folder", root=root)
    return Output(out, _parquet_ready(format or by_suffix))


def _parquet_ready(kind: str) -> str:
    from importlib.util import find_spec

    if kind == "parquet" and (find_spec("pandas") is None or find_spec("pyarrow") is None):
        raise FeatxError("Parquet output needs pandas and pyarrow; write .csv or .jsonl")
    return kind


def _refuse_special(out: Path) -> None:
    """A FIFO, a device or a socket, or a name of a process's stream (/dev/stdout, /dev/fd/N,
    /proc/...: links to a descriptor), is no file: featx writes a whole file and renames it into
    place, which such a path cannot take. Stdout is `-`."""
    try:
        info = os.stat(out)
    except OSError:
        info = None
    absolute = out.absolute()
    stream = str(absolute) in STREAMS or any(root in absolute.parents or root in resolved(out, "--out").parents
                                             for root in STREAM_ROOTS)
    if stream or (info is not None and not stat.S_ISREG(info.st_mode) and not stat.S_ISDIR(info.st_mode)):
        kind = "a name of a process's stream" if stream else kind_of(info)
        raise FeatxError(f"--out {str(out)!r} is {kind}, not a regular file: featx writes predictions "
                         "to a file (whole, then renamed into place); to write them to stdout, use --out -")


# ---------------------------------------------------------------------------------------------
# The pipeline's inputs, which no output may replace


def pipeline_inputs(pipeline, manifest, source: str | None = None,
                    outputs: Path | None = None) -> list[tuple[str, Path, Path | None]]:
    """What predicting with `pipeline` reads or featx keeps, as (what it is, its path, the
    folder inside it the caller may write to, or None): predict's input file, the pipeline
    file, its data files and folders, a label_names file, the model folder, and the data
    directory (its cache, records and reports; `outputs` is the one folder of it written to)."""
    data = pipeline.data
    named = [("predict's input file", source)] if source not in (None, STDOUT) else []
    named += [("the pipeline file", pipeline.source)]
    named += [(f"data.{key}, a data file of the pipeline", spec) for key in ("path", "train", "dev", "test")
              for spec in _specs(getattr(data, key))]
    if isinstance(data.label_names, str):
        named.append(("data.label_names, the file of the pipeline's label names", data.label_names))
    named.append(("the model folder", manifest.model_path))
    inputs = [(what, Path(path).expanduser(), None) for what, path in named if path]
    return inputs + [("the data directory, where featx keeps its cache, records and reports", pipeline.root,
                      outputs)]


def _specs(value) -> tuple[str, ...]:
    return () if value is None else (value,) if isinstance(value, str) else tuple(value)


def refuse_inputs(target: Path, inputs: list[tuple[str, Path, Path | None]], what: str) -> None:
    """`target` (a file or folder about to be written) is none of `inputs` and lies inside none of
    them (apart from an input's own output folder): compared as resolved paths (every link on the
    way followed) and, for a file with other names (a hard link), by device and inode."""
    written = resolved(target, what)
    try:
        info = os.stat(target)
    except OSError:
        info = None
    for name, path, outputs in inputs:
        place = resolved(path, name)
        if outputs is not None and (resolved(outputs, name) == written or resolved(outputs, name) in written.parents):
            continue
        if written == place or place in written.parents:
            where = "is" if written == place else "is inside"
        elif any(written == t or t in written.parents for t in _linked_targets(path)):
            where = "is where a link in" if path.is_dir() else "is what"
            name += " points (a file or folder it reads through a symbolic link)"
        elif info is not None and info.st_nlink > 1 and _same_inode(path, info):
            where = "is another name (a hard link) of" + (" a file in" if path.is_dir() else "")
        else:
            continue
        raise FeatxError(f"{what} {str(target)!r} {where} {name} ({path}): writing there would replace "
                         "what featx reads; choose a place outside it"
                         + (f" (or inside {outputs}, the default)" if outputs is not None else ""))


def resolved(path: Path, what: str) -> Path:
    """`path` with every symbolic link on the way followed; a link that loops is an error
    naming `what` the path is."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # a loop: RuntimeError up to Python 3.12, OSError from 3.13
        raise FeatxError(f"{what} {str(path)!r} goes through a symbolic link that loops (a link to "
                         "itself, or two to each other): remove the link and rerun") from None


def _linked_targets(path: Path) -> list[Path]:
    """Where the symbolic links at or below `path` lead (a Hugging Face cache's snapshot holds
    links into its blobs, outside the snapshot's folder), each resolved."""
    links = [path] if path.is_symlink() else []
    if path.is_dir():
        for folder, dirs, files in os.walk(path):
            links += [Path(folder, n) for n in dirs + files if os.path.islink(os.path.join(folder, n))]
    targets = []
    for link in links:
        try:
            targets.append(link.resolve())
        except (RuntimeError, OSError):
            continue  # a loop leads nowhere a write could land
    return targets


def _same_inode(path: Path, info: os.stat_result) -> bool:
    """Whether `path`, or a file anywhere below it, is the file `info` describes."""
    if path.is_file():
        found = path.stat()
        return (found.st_dev, found.st_ino) == (info.st_dev, info.st_ino)
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                found = os.stat(os.path.join(folder, name))
            except OSError:
                continue
            if (found.st_dev, found.st_ino) == (info.st_dev, info.st_ino):
                return True
    return False


# ---------------------------------------------------------------------------------------------
# Writing


def write_table(output: Output, table: dict[str, list], label_sep: str = ",") -> None:
    """JSONL and Parquet keep a multilabel row's labels as a list; CSV and TSV join them with
    the pipeline's data.label_sep (default ","), the form featx reads them back in. A file is
    written whole and renamed into place; stdout gets the same bytes."""
    from featx.files import atomic_write

    if output.path is None:
        if output.kind == "parquet":
            buffer = io.BytesIO()
            _parquet(table, buffer)
            sys.stdout.buffer.write(buffer.getvalue())
        else:
            _text(sys.stdout, output.kind, table, label_sep)
        sys.stdout.flush()
        return

    def write(tmp: Path) -> None:
        if output.kind == "parquet":
            _parquet(table, tmp)
            return
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            _text(f, output.kind, table, label_sep)
    atomic_write(output.path, write)


def _parquet(table: dict[str, list], target) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(table), str(target) if isinstance(target, Path) else target)


def _text(f, kind: str, table: dict[str, list], label_sep: str) -> None:
    columns = list(table)
    rows = zip(*(table[c] for c in columns))
    if kind == "jsonl":
        for row in rows:
            f.write(json.dumps(dict(zip(columns, row)), ensure_ascii=False) + "\n")
        return
    joined = lambda cell: label_sep.join(cell) if isinstance(cell, list) else cell  # noqa: E731
    writer = csv.writer(f, delimiter="\t" if kind == "tsv" else ",")
    writer.writerow(columns)
    writer.writerows([joined(cell) for cell in row] for row in rows)
