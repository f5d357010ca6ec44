"""A dataset's rows on disk: string columns in an Arrow IPC file, written a block at a time and
read back by row position. No torch.

Every input format is read once into one store (featx.data.rows); a split is the store's
columns at its rows' positions (`Column`). The file lives in a temporary folder and is removed
as soon as it is written: the open handle keeps it readable, and nothing is left behind by a
process that is killed. Batches are read, not memory-mapped, so memory stays flat at any size
(the last batch read is kept decoded, for reads in increasing order).
"""
from __future__ import annotations

import bisect
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

BATCH_ROWS = 1 << 16  # rows per stored batch: a read decodes one at a time


class RowStore:
    """Named columns of equal length, appended in blocks, then read by position."""

    def __init__(self, folder: Path | None = None):
        # Created new (O_EXCL) and written through its own descriptor: no write follows a link.
        fd, name = tempfile.mkstemp(prefix=".featx-rows-", suffix=".arrow.partial", dir=folder)
        self._file = os.fdopen(fd, "wb")
        self.path = Path(name)
        self._writer = None
        self._pending: list[dict] = []
        self._pending_rows = 0
        self._starts = [0]  # first row of each batch, then the total
        self._reader = None
        self._lock = threading.Lock()
        self._cached: tuple | None = None  # (batch, column, values as a list)
        self.nbytes: dict[str, int] = {}

    def __len__(self) -> int:
        return self._starts[-1] + self._pending_rows

    def append(self, columns: dict) -> None:
        """A block of rows: {name: pyarrow array}, every block naming the same columns."""
        n = len(next(iter(columns.values())))
        if n:
            self._pending.append(columns)
            self._pending_rows += n
        if self._pending_rows >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if not self._pending:
            return
        names = list(self._pending[0])
        batch = pa.RecordBatch.from_arrays(
            [pa.concat_arrays([block[c] for block in self._pending]) for c in names], names=names)
        if self._writer is None:
            self._writer = pa.ipc.new_file(pa.PythonFile(self._file, mode="w"), batch.schema)
        self._writer.write_batch(batch)
        for name, column in zip(names, batch.columns):
            buffers = column.buffers()
            self.nbytes[name] = self.nbytes.get(name, 0) + (buffers[-1].size if buffers[-1] is not None else 0)
        self._starts.append(self._starts[-1] + batch.num_rows)
        self._pending, self._pending_rows = [], 0

    def finish(self) -> "RowStore":
        """Written: open it for reading and remove its name (the handle keeps it)."""
        import pyarrow as pa

        self._flush()
        if self._writer is not None:
            self._writer.close()
            self._file.flush()
            self._reader = pa.ipc.open_file(pa.OSFile(str(self.path)))
        self._file.close()
        self.path.unlink(missing_ok=True)
        return self

    def discard(self) -> None:
        """Let go of the store (the data was refused): its file removed, finished or not."""
        if self._reader is None and self._writer is not None and not self._file.closed:
            self._writer.close()
        self._file.close()
        self._reader = None
        self.path.unlink(missing_ok=True)

    def _values(self, batch: int, name: str) -> list:
        with self._lock:
            if self._cached is None or self._cached[:2] != (batch, name):
                self._cached = (batch, name, self._reader.get_batch(batch).column(name).to_pylist())
            return self._cached[2]

    def read(self, name: str, start: int, stop: int) -> list:
        """The values of rows [start, stop) of column `name`."""
        out: list = []
        while start < stop:
            batch = bisect.bisect_right(self._starts, start) - 1
            end = min(stop, self._starts[batch + 1])
            values = self._values(batch, name)
            out.extend(values[start - self._starts[batch]:end - self._starts[batch]])
            start = end
        return out

    def _by_batch(self, positions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions as int64, their stable sorting order, the batch of each in that order)."""
        positions = np.asarray(positions, dtype=np.int64)
        order = np.argsort(positions, kind="stable")
        return positions, order, np.searchsorted(self._starts, positions[order], side="right") - 1

    def take(self, name: str, positions: np.ndarray) -> list:
        """The values at `positions` (any order), each batch decoded once."""
        positions, order, batches = self._by_batch(positions)
        out: list = [None] * len(positions)
        for batch in np.unique(batches):
            values = self._values(int(batch), name)
            first = self._starts[batch]
            for k in order[batches == batch]:
                out[k] = values[positions[k] - first]
        return out

    def hashes(self, name: str, positions: np.ndarray) -> np.ndarray:
        """(n,) int64: Python's hash of each value at `positions` (equal values, equal hashes,
        within this process), read a batch at a time."""
        out = np.empty(len(positions), np.int64)
        for start in range(0, len(positions), BATCH_ROWS):
            values = self.take(name, positions[start:start + BATCH_ROWS])
            out[start:start + len(values)] = np.fromiter(map(hash, values), np.int64, count=len(values))
        return out

    def arrow(self, name: str, positions: np.ndarray):
        """The values at `positions` (any order) as one Arrow array, nothing decoded to Python."""
        import pyarrow as pa

        positions, order, batches = self._by_batch(positions)
        with self._lock:
            parts = [self._reader.get_batch(int(b)).column(name).take(
                pa.array(positions[order[batches == b]] - self._starts[b])) for b in np.unique(batches)]
        if not parts:
            return pa.array([], pa.string())
        joined = pa.concat_arrays(parts)
        if (np.diff(order) == 1).all():  # already in order (a split's rows usually are)
            return joined
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return joined.take(pa.array(inverse))

    def column(self, name: str, positions: np.ndarray | None = None) -> "Column":
        return Column(self, name, np.arange(len(self)) if positions is None else positions)


class Values(Sequence):
    """A sequence of str made when read, equal to a sequence of the same values (a list, another
    column)."""

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return not isinstance(other, str) and len(other) == len(self) and all(a == b for a, b in zip(self, other))

    __hash__ = None


class Column(Values):
    """A column of the store at some rows' positions: a sequence of str read from disk."""

    def __init__(self, store: RowStore, name: str, positions: np.ndarray):
        self.store, self.name, self.positions = store, name, np.asarray(positions, dtype=np.int64)
        # Contiguous rows (a split of its own file) are read as ranges.
        self._first = int(self.positions[0]) if len(self.positions) else 0
        self._contiguous = bool(len(self.positions) == 0 or
                                self.positions[-1] - self._first == len(self.positions) - 1 and
                                (np.diff(self.positions) == 1).all())

    def __repr__(self) -> str:
        return f"column {self.name!r} of {len(self):,} rows"

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def nbytes(self) -> int:
        """About the bytes of its values (their share of the column's): for disk estimates."""
        total = len(self.store)
        return self.store.nbytes.get(self.name, 0) * len(self) // max(total, 1)

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step == 1 and self._contiguous:
                return self.store.read(self.name, self._first + start, self._first + max(start, stop))
            return self.store.take(self.name, self.positions[key])
        i = int(key)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"row {key} of {len(self)}")
        return self.store.take(self.name, self.positions[i:i + 1])[0]

    def __iter__(self):
        for start in range(0, len(self), BATCH_ROWS):
            yield from self[start:start + BATCH_ROWS]

    def take(self, rows) -> list:
        """The values at `rows` (positions within the column, any order)."""
        return self.store.take(self.name, self.positions[np.asarray(rows, dtype=np.int64)])

    def arrow_blocks(self):
        """The values as Arrow arrays of at most BATCH_ROWS each, in order (for whole-column
        passes that need no Python string: the fingerprint)."""
        for start in range(0, len(self), BATCH_ROWS):
            yield self.store.arrow(self.name, self.positions[start:start + BATCH_ROWS])

    def subset(self, rows) -> "Column":
        """The column at `rows` only (nothing read)."""
        return Column(self.store, self.name, self.positions[np.asarray(rows, dtype=np.int64)])
