"""Parquet files and the Arrow files of a Hugging Face `save_to_disk` folder, read a record batch
at a time (ClassLabel codes read as their class names). No torch.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from featx.data import explain
from featx.data.files import BATCH_ROWS, Block
from featx.data.columns import blank, is_string_array
from featx.data.rules import class_key, is_missing
from featx.errors import FeatxError, shown


class Columnar:
    """A Parquet file, or one Arrow file of a `save_to_disk` folder (`names`: its ClassLabel
    columns' class names, read instead of their codes), a record batch at a time."""

    def __init__(self, path: Path, *, arrow: bool, names: dict | None = None):
        self.path, self.arrow, self.names = path, arrow, names or {}
        self.columns = [str(c) for c in self._schema().names]

    def where(self, records: list[int]) -> list[str]:
        return [f"{self.path}, row {r + 1}" for r in records]

    def _schema(self):
        import pyarrow as pa

        try:
            if self.arrow:
                with pa.memory_map(str(self.path)) as f:
                    return _ipc_reader(f).schema
            import pyarrow.parquet as pq

            return pq.read_schema(self.path)
        except (pa.ArrowException, OSError) as exc:
            raise self._unreadable(exc, "; save the dataset again with Dataset.save_to_disk" if self.arrow
                                   else "") from None

    def blocks(self, wanted: list[str]):
        import pyarrow as pa

        at = 0
        try:
            for batch in self._batches():
                explain.utf8(self, batch, at)  # every string column's, used or not
                for column, names in self.names.items():
                    if column in batch.schema.names:
                        explain.class_codes(self, column, batch.column(column), names, at)
                values = {c: self._plain(c, batch.column(c)) for c in wanted}
                yield Block(values, np.arange(at, at + batch.num_rows, dtype=np.int64))
                at += batch.num_rows
        except (pa.ArrowException, OSError) as exc:
            raise self._unreadable(exc) from None

    def _unreadable(self, exc: Exception, fix: str = "") -> FeatxError:
        return FeatxError(f"{self.path}: cannot read as {'an Arrow file' if self.arrow else 'Parquet'} "
                          f"({str(exc)[:300]}){fix}")

    def _batches(self):
        import pyarrow as pa

        if self.arrow:
            with pa.OSFile(str(self.path)) as f:  # read, not mapped: its pages are not held in memory
                reader = _ipc_reader(f)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) \
                    if isinstance(reader, pa.ipc.RecordBatchFileReader) else reader
                for batch in batches:
                    for k in range(0, batch.num_rows, BATCH_ROWS):
                        yield batch.slice(k, BATCH_ROWS)
            return
        import pyarrow.parquet as pq

        with pq.ParquetFile(self.path, pre_buffer=False) as parquet:
            if parquet.metadata.num_row_groups:
                yield from parquet.iter_batches(batch_size=BATCH_ROWS, use_threads=False)

    def _plain(self, column: str, values):
        """A column as featx reads a cell: nothing there (a null, NaN, a blank string) is missing,
        at any depth; a ClassLabel code is its class name (-1, "no label", is missing); a
        Parquet integer column with a null holds floats (as pandas reads it). Strings and
        numbers stay Arrow arrays; the rest is Python."""
        import pyarrow as pa
        import pyarrow.compute as pc

        names = self.names.get(column)
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        kind = values.type
        if names is None and is_string_array(values):
            return pc.if_else(pa.array(blank(values)), pa.scalar(None, kind), values)
        if names is None and pa.types.is_floating(kind):
            return pc.if_else(pc.is_nan(values), pa.scalar(None, kind), values)
        if names is None and pa.types.is_integer(kind):
            return values.cast(pa.float64()) if values.null_count and not self.arrow else values
        out = []
        for value in values.to_pylist():
            if names is not None and isinstance(value, list):
                value = [names[v] for v in value]
            elif names is not None and isinstance(value, int) and not isinstance(value, bool):
                value = None if value == -1 else names[value]
            out.append(_missing_as_none(value))
        return out


def _missing_as_none(value):
    """A cell with nothing there (a null, NaN, a blank string) as None, in lists and dicts too."""
    if isinstance(value, list):
        return [_missing_as_none(v) for v in value]
    if isinstance(value, dict):
        return {k: _missing_as_none(v) for k, v in value.items()}
    return None if is_missing(value) else value


def _ipc_reader(source):
    """The IPC stream format `datasets` writes, else the file format."""
    import pyarrow as pa

    try:
        return pa.ipc.open_stream(source)
    except pa.ArrowInvalid:
        source.seek(0)
        return pa.ipc.open_file(source)


def arrow_names(folder: Path) -> dict[str, list[str]]:
    """{column: class names} of a saved dataset's ClassLabel columns (alone or in a Sequence),
    from its dataset_info.json. Two names that featx reads as one class are refused: two codes
    would be one class."""
    try:
        features = json.loads((folder / "dataset_info.json").read_text()).get("features") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    out = {}
    for column, spec in features.items() if isinstance(features, dict) else ():
        inner = spec.get("feature", spec) if isinstance(spec, dict) and spec.get("_type") in (
            "Sequence", "List", "LargeList") else spec
        if isinstance(inner, dict) and inner.get("_type") == "ClassLabel" and isinstance(inner.get("names"), list):
            names = out[str(column)] = [str(n) for n in inner["names"]]
            same: dict[str, list[str]] = {}
            for name in names:
                same.setdefault(class_key(name), []).append(name)
            repeated = [group for group in same.values() if len(group) > 1]
            if repeated:
                raise FeatxError(f"{folder / 'dataset_info.json'}: the ClassLabel names of column {shown(column)} "
                                 f"{' and '.join(map(shown, repeated[0]))} are one class as featx reads labels "
                                 "(a name written twice, numbers of the same value, spaces around a name), so "
                                 "two codes would be one class; give each class a name of its own and save the "
                                 "dataset again")
    return out
