"""Writing a cache: creating or resuming `<name>.partial`, writing rows, finalizing, the
writer's lock and the disk checks. Imports no torch.

The schema (the layout, the key, the checks, the checksums) is told in `featx.cache.schema`;
reading a finished cache is `featx.cache.reader`'s.

Crash safety: a cache is built in `<name>.partial` (itself first prepared under
`<name>.partial.init`, renamed once every dataset exists). All datasets are contiguous and
allocated at creation (their disk blocks too; one of zero rows, an empty split, has none and
no offset), so during extraction only raw bytes change, never HDF5 metadata, and no write can
fail for disk space: a SIGKILL cannot corrupt the file's structure. Rows are written with
pwrite at their offsets; the done mask that claims them is set after them, every `flush_rows`
rows or `flush_seconds`. The partial file is fsynced and
renamed to its final name only when every row is done, so a final name always means a
complete cache.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from featx.cache.schema import (SINGLES, CacheSpec, attrs_crc32, check_compatible, crc32, create,
                               datasets, decode_attr, partial_path)
from featx.data import Split
from featx.errors import FeatxError
from featx.files import exclusive, open_nofollow, own_file, refuse_link, utc_now

FINALIZE_HEADROOM = 1 << 20  # bytes free that finalizing a cache may need, with margin


# ---------------------------------------------------------------------------------------------
# Locking: one writer per cache


def being_written(path: Path) -> bool:
    """Whether a process holds the writer lock of the cache at `path` now (a shared lock, tried
    and let go at once, conflicts only with a writer's)."""
    try:
        fd = open_nofollow(path.with_name(f".{path.name}.lock"), os.O_RDONLY)
    except OSError:
        return False  # never locked: no lock file
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def writer_lock(path: Path):
    """Hold the exclusive lock for writing the cache at `path` (`featx.files.exclusive`)."""
    return exclusive(path.with_name(f".{path.name}.lock"), f"writing the cache {path.name}",
                     "wait for it to finish (its rows are kept), or stop it and rerun to resume")


# ---------------------------------------------------------------------------------------------
# Writing


class CacheWriter:
    """Creates or resumes `<path>.partial`; rows are written at their original positions.

    HDF5 only creates the file and writes attributes. Rows go straight to the contiguous,
    pre-allocated datasets' bytes with `pwrite`: no HDF5 hyperslab machinery (several times
    slower and holding the GIL: bench/HISTORY.md), and unlike a memory map, no written page ever counts in this process's
    resident memory. Within a block (`begin_block`), rows are gathered in memory and each
    flush writes them as a few long runs, not one call per row.
    """

    def __init__(self, path: Path, file: h5py.File):
        self.path = path
        self.file = file
        self.fd = open_nofollow(partial_path(path), os.O_RDWR)
        poolings = json.loads(file.attrs["poolings"])
        self.layout: dict[str, dict[str, tuple[int, np.dtype, tuple]]] = {}
        for split in _groups(file):
            names = [n for n in file[split] if n in ("n_tokens", "truncated", "done") or n in poolings]
            self.layout[split] = {n: _layout(file[split][n]) for n in names}
        self.done = {split: self._read(split, "done") for split in self.layout}
        self._pending: dict[str, list[np.ndarray]] = {}  # rows on disk, not yet claimed by `done`
        self._pending_rows = 0
        self._block: _Block | None = None
        self._last_flush = time.monotonic()

    @classmethod
    def open(cls, path: Path, spec: CacheSpec, info: dict, splits: list[Split], hidden: int, *,
             rows: dict[str, np.ndarray] | None = None, singles: Split | None = None,
             pair_rows: dict[str, np.ndarray] | None = None) -> "CacheWriter":
        """Resume the partial file for this key if there is one, else create it. `rows` (per
        split, global row indices) marks a shard of a distributed run: stored beside the
        vectors so rank 0 can assemble them. `singles` (a pair task's distinct texts) and
        `pair_rows` (per split, (n, 2) rows of `singles`) come with `spec.singles`."""
        partial = partial_path(path)
        refuse_link(path, "where featx writes the cache")
        refuse_link(partial, "where featx writes the cache")
        if partial.exists():
            own_file(partial)  # h5py opens it by name: a hard link or a FIFO there is refused first
            try:
                file = h5py.File(partial, "r+")
            except OSError as exc:
                raise FeatxError(
                    f"the partial cache {partial} cannot be opened ({exc}); it is damaged beyond "
                    "resuming: delete it and rerun featx extract") from None
            try:
                check_compatible(file, spec.key(), partial)
                return cls(path, file)
            except FeatxError:
                file.close()
                raise
            except (RuntimeError, KeyError, ValueError, TypeError, OSError) as exc:
                file.close()  # its attributes or datasets are not what featx writes
                raise FeatxError(f"the partial cache {partial} is damaged ({type(exc).__name__}: "
                                 f"{str(exc)[:200]}); delete it and rerun featx extract") from None
        if spec.singles != (singles is not None):
            raise ValueError("a cache spec with singles needs the singles split, and only then")
        groups = splits + ([singles] if singles is not None else [])
        _check_disk_space(path.parent, _estimate_bytes(spec, groups, hidden))
        init = partial.with_name(partial.name + ".init")
        try:
            if os.path.lexists(init):  # a leftover of a killed run (unlinking a link never follows it)
                os.unlink(init)
            # "x": created new (O_EXCL), so a link planted at the name is refused, not truncated.
            with h5py.File(init, "x") as file:
                create(file, spec, info, splits, hidden, rows=rows, singles=singles, pair_rows=pair_rows)
            # Give every byte of the file its disk blocks now (reading as zeros: the done mask
            # starts empty), so no later write can fail for space or land in a sparse hole.
            fd = open_nofollow(init, os.O_RDWR)
            try:
                os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
            finally:
                os.close(fd)
        except OSError as exc:  # the disk filled up while the file was being allocated
            init.unlink(missing_ok=True)
            raise _write_error(exc, path) from None
        os.replace(init, partial)  # a `.partial` always holds every dataset
        return cls(path, h5py.File(partial, "r+"))

    def _read(self, split: str, name: str) -> np.ndarray:
        offset, dtype, shape = self.layout[split][name]
        data = os.pread(self.fd, int(np.prod(shape)) * dtype.itemsize, offset)
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()

    def _read_rows(self, split: str, name: str, lo: int, hi: int) -> np.ndarray:
        """Rows [lo, hi) of a dataset as they are in the file, in a writable array."""
        offset, dtype, shape = self.layout[split][name]
        out = np.empty((hi - lo,) + tuple(shape[1:]), dtype=dtype)
        row_bytes = out[0].nbytes if len(out) else 0
        got = os.preadv(self.fd, [memoryview(out).cast("B")], offset + lo * row_bytes) if out.size else 0
        if got != out.nbytes:
            raise RuntimeError(f"{split}/{name}: read {got} of {out.nbytes} bytes")
        return out

    def _write(self, split: str, name: str, runs: list[tuple[int, int, int]], order: np.ndarray,
               values: np.ndarray) -> None:
        """Write `values[order]` as runs of consecutive rows: (first row, start, stop) each."""
        offset, dtype, shape = self.layout[split][name]
        data = np.ascontiguousarray(np.asarray(values, dtype=dtype)[order]).reshape(len(order), -1)
        row_bytes = data.shape[1] * dtype.itemsize
        try:
            for row, begin, end in runs:
                os.pwrite(self.fd, data[begin:end], offset + row * row_bytes)
        except OSError as exc:
            raise _write_error(exc, self.path) from None

    def _write_spans(self, split: str, name: str, rows: np.ndarray, source: np.ndarray, base: int) -> None:
        """Write the sorted `rows` of a dataset from `source` (row r at `source[r - base]`), as
        spans of whole rows: neighbours fewer than GAP_BYTES apart share one pwrite, the rows
        between them written with the bytes `source` holds for them (what the file holds, or
        rows not claimed by `done` yet)."""
        offset, dtype, shape = self.layout[split][name]
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        data = source.reshape(len(source), -1)
        try:
            for lo, hi in _spans(rows, GAP_BYTES // row_bytes):
                os.pwrite(self.fd, data[lo - base:hi - base], offset + lo * row_bytes)
        except OSError as exc:
            raise _write_error(exc, self.path) from None

    @staticmethod
    def _runs(rows: np.ndarray) -> tuple[list[tuple[int, int, int]], np.ndarray]:
        """Sort `rows`; cut them into runs of consecutive indices (one pwrite per run)."""
        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        cuts = [0, *(np.flatnonzero(np.diff(ordered) != 1) + 1).tolist(), len(ordered)]
        starts = ordered[cuts[:-1]].tolist()
        return [(row, a, b) for row, a, b in zip(starts, cuts[:-1], cuts[1:])], order

    def count(self, dataset: str) -> int:
        """Sum of a per-row dataset (`truncated`, `done`) over every split."""
        return int(sum(self._read(s, dataset).sum() for s in self.layout))

    def pending(self, split: str) -> np.ndarray:
        """Row indices of `split` whose vectors are not written yet."""
        return np.flatnonzero(self.done[split] == 0)

    def row_bytes(self, split: str) -> int:
        """Bytes one row of `split` takes in a block's buffers (every dataset but `done`)."""
        return sum(int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
                   for name, (_, dtype, shape) in self.layout[split].items() if name != "done")

    def begin_block(self, split: str, lo: int, hi: int) -> None:
        """Gather the rows [lo, hi) of `split` in memory from now on: `write` puts them in the
        block's buffers and `flush` writes what it gathered as long runs, then claims it in the
        done mask. Rows an earlier run finished are read back first, so a run that covers them
        rewrites their own bytes. Ends the block before (flushing it)."""
        self.end_block()
        keep = bool(self.done[split][lo:hi].any())
        buffers = {}
        for name, (_, dtype, shape) in self.layout[split].items():
            if name != "done":
                buffers[name] = (self._read_rows(split, name, lo, hi) if keep else
                                 np.zeros((hi - lo,) + tuple(shape[1:]), dtype=dtype))
        self._block = _Block(split, lo, hi, buffers)

    def end_block(self) -> None:
        """Flush the open block, if any, and free its buffers."""
        if self._block is not None:
            self.flush()
            self._block = None

    def write(self, split: str, rows: np.ndarray, pooled: dict[str, np.ndarray],
              n_tokens: np.ndarray, truncated: np.ndarray) -> None:
        """Store one batch. `rows` are original positions; `pooled[p]` is (B, n_layers, H).
        Rows of the open block are gathered in memory until the next flush; others are
        written at once."""
        rows = np.asarray(rows)
        if not len(rows):  # (a split with no rows: nothing to write)
            return
        block = self._block
        if (block is not None and block.split == split
                and rows.min() >= block.lo and rows.max() < block.hi):
            at = rows - block.lo
            for pooling, values in pooled.items():
                block.buffers[pooling][at] = values
            block.buffers["n_tokens"][at] = n_tokens
            block.buffers["truncated"][at] = truncated
            block.pending.append(rows)
        else:
            runs, order = self._runs(rows)
            for pooling, values in pooled.items():
                self._write(split, pooling, runs, order, values)
            self._write(split, "n_tokens", runs, order, n_tokens)
            self._write(split, "truncated", runs, order, truncated)
            self._pending.setdefault(split, []).append(rows)
        self._pending_rows += len(rows)

    def maybe_flush(self, every_rows: int, every_seconds: float) -> None:
        if (self._pending_rows >= every_rows
                or time.monotonic() - self._last_flush >= every_seconds):
            self.flush()

    def flush(self) -> None:
        """Write the open block's gathered rows, then mark every row written since the last
        flush as done.

        The rows' bytes are in the kernel's page cache the moment `pwrite` returns, so a
        process that dies (SIGKILL, OOM) loses nothing the done mask claims; the file is
        fsynced once, when complete.
        """
        block = self._block
        if block is not None and block.pending:
            rows = np.sort(np.concatenate(block.pending))
            for name, buffer in block.buffers.items():
                self._write_spans(block.split, name, rows, buffer, block.lo)
            self._pending.setdefault(block.split, []).append(rows)
            block.pending = []
        for split, parts in self._pending.items():
            rows = np.sort(np.concatenate(parts))
            self.done[split][rows] = 1
            self._write_spans(split, "done", rows, self.done[split], 0)
        self._pending.clear()
        self._pending_rows = 0
        self._last_flush = time.monotonic()

    def finalize(self) -> Path:
        """Mark complete and rename to the final name (only if every row is done)."""
        self.flush()
        for split, done in self.done.items():
            missing = int((done == 0).sum())
            if missing:
                raise RuntimeError(f"finalize with {missing} rows of {split!r} not done")
        # The closing attributes need a few KiB of new metadata: refuse before touching the
        # file rather than fail half-way through HDF5's metadata write.
        free = shutil.disk_usage(self.path.parent).free
        if free < FINALIZE_HEADROOM:
            raise FeatxError(
                f"the disk is full ({free} bytes free) just before finishing {partial_path(self.path)}: "
                "every row is computed and kept; free some space and rerun the same command (it "
                "only finalizes)")
        for split in self.layout:  # what a reader checks the bytes against, from now on
            for name, ds in datasets(self.file[split]):
                if "crc32" in ds.attrs and h5py.check_string_dtype(ds.dtype) is not None:
                    continue  # written once, with its crc32, when the file was created
                ds.attrs["crc32"] = crc32(ds, lambda offset, size: os.pread(self.fd, size, offset))
        self.file.flush()
        os.fsync(self.fd)  # durable before it gets the name that says complete
        os.close(self.fd)
        self.fd = -1  # closed once: a second close could hit a descriptor another thread opened since
        self.file.attrs["complete"] = True
        self.file.attrs["completed"] = utc_now()
        self.file.attrs["attrs_crc32"] = attrs_crc32({k: decode_attr(v) for k, v in self.file.attrs.items()})
        self.file.close()
        os.replace(partial_path(self.path), self.path)
        return self.path

    def close(self) -> None:
        if self.fd >= 0:  # not yet closed by finalize
            os.close(self.fd)
            self.fd = -1
        if self.file.id.valid:
            self.file.close()


@dataclass
class _Block:
    """Rows [lo, hi) of one split gathered in memory: a buffer per dataset (`done` aside)."""
    split: str
    lo: int
    hi: int
    buffers: dict[str, np.ndarray]
    pending: list[np.ndarray] = field(default_factory=list)
    """Rows written into the buffers since the last flush."""


# A flush writes rows that are a few KiB apart in one pwrite, the rows between included: a
# memcpy of 16 KiB into the page cache costs about what one more system call does.
GAP_BYTES = 1 << 14


def _spans(rows: np.ndarray, max_gap: int) -> list[tuple[int, int]]:
    """[start, stop) spans covering the sorted `rows`, joining neighbours at most `max_gap`
    rows apart."""
    if not len(rows):
        return []
    cuts = np.flatnonzero(np.diff(rows) > max_gap + 1) + 1
    starts = rows[np.concatenate([[0], cuts])]
    stops = rows[np.concatenate([cuts - 1, [len(rows) - 1]])] + 1
    return list(zip(starts.tolist(), stops.tolist()))


def _layout(ds: h5py.Dataset) -> tuple[int, np.dtype, tuple]:
    """(file offset, dtype, shape) of a contiguous, allocated dataset's bytes."""
    if ds.size == 0 and ds.chunks is None:
        # Zero rows (a split, or a torchrun rank's share of one, that is empty): HDF5 allocates
        # no storage, so there is no offset; no byte is ever read or written there.
        return 0, ds.dtype, ds.shape
    offset = ds.id.get_offset()
    if offset is None or ds.chunks is not None:
        raise RuntimeError(f"{ds.name} is not a contiguous allocated dataset")
    return offset, ds.dtype, ds.shape


def partial_finished(path: Path, splits: list[str]) -> bool:
    """True when the partial file has every row done (a run killed just before the rename)."""
    partial = partial_path(path)
    if not partial.exists():
        return False
    own_file(partial)
    try:
        with h5py.File(partial, "r") as f:
            return all(bool(f[s]["done"][...].all()) for s in splits)
    except (OSError, KeyError):
        return False  # CacheWriter.open reports a damaged file, with the fix


def _estimate_bytes(spec: CacheSpec, splits: list[Split], hidden: int) -> int:
    """Bytes of the vectors and texts of every group (splits, singles), with some margin."""
    rows = sum(len(s.texts) for s in splits)
    per_row = sum(len(v) for v in spec.layers.values()) * hidden * np.dtype(spec.store_dtype).itemsize
    # A split's texts are in the row store (featx.data.store): their size is known without reading them.
    text = sum(s.texts.nbytes if hasattr(s.texts, "nbytes") else sum(map(len, s.texts)) for s in splits) * 2
    return rows * (per_row + 16) + text + (1 << 20)


def _check_disk_space(folder: Path, needed: int) -> None:
    """Refuse up front when the cache cannot fit. Free space is checked, then the bytes are
    really reserved (posix_fallocate on a scratch file, released at once): HDF5 must never
    meet a full disk half-way through writing its metadata (it can crash the process)."""
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if free < needed * 1.05:
        raise FeatxError(
            f"not enough disk space in {folder}: the cache needs {needed / 1e9:.2f} GB, "
            f"{free / 1e9:.2f} GB are free; free some space, or store fewer poolings/layers or "
            "extract.store_dtype = \"float16\"")
    # Named by process and thread: two extractions in one process may check one folder at once.
    scratch = folder / f".featx-reserve-{os.getpid()}-{threading.get_ident()}"
    try:
        if os.path.lexists(scratch):  # a leftover, or a planted link: removed, never followed
            os.unlink(scratch)
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, needed)
        finally:
            os.close(fd)
    except OSError as exc:
        raise FeatxError(
            f"the disk is full (or a file-size limit applies): {needed / 1e6:.1f} MB could not be "
            f"reserved in {folder} ({exc.strerror}); free some space and rerun the same command") from None
    finally:
        scratch.unlink(missing_ok=True)


def _write_error(exc: OSError, path: Path) -> FeatxError:
    full = exc.errno == errno.ENOSPC or "No space" in str(exc) or "file write failed" in str(exc)
    what = "the disk is full" if full else f"writing failed ({exc})"
    return FeatxError(f"{what} while writing {partial_path(path)}; rows already flushed are kept: "
                      "free some space and rerun the same command to resume")


def _groups(file: h5py.File) -> list[str]:
    """The groups of rows extraction writes: the splits, and a pair task's singles."""
    return json.loads(file.attrs["splits"]) + ([SINGLES] if SINGLES in file else [])
