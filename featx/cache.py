"""The HDF5 cache: schema, resumable writes, reads. Imports no torch (a test keeps it so).

One file per cache key, `<cache_dir>/<key[:16]>.h5`. Layout:

    /                       attrs: the key and everything it covers, plus provenance
    /<split>/ids            (n,)   str
    /<split>/text           (n,)   str           (and text_pair for pairs)
    /<split>/labels         (n,) int64 | (n, L) uint8 | (n, T) float64
    /<split>/columns/<c>    (n,)   str           kept extra columns (TREC's fine label)
    /<split>/n_tokens       (n,)   int32         tokens after truncation
    /<split>/truncated      (n,)   bool
    /<split>/done           (n,)   uint8         rows whose vectors are written (resume)
    /<split>/<pooling>      (n, n_layers, hidden) float16|float32, attr `layers`
    /<split>/pair_rows      (n, 2) int64        text pairs: the rows of /singles holding each text
    /singles/text           (m,)   str          text pairs: every distinct text of either column
    /singles/n_tokens, truncated, done, <pooling>   as a split's, for each text encoded alone

Crash safety: a cache is built in `<name>.partial` (itself first prepared under
`<name>.partial.init`, renamed once every dataset exists). All datasets are contiguous and
allocated at creation (their disk blocks too), so during extraction only raw bytes change,
never HDF5 metadata, and no write can fail for disk space: a SIGKILL cannot corrupt the
file's structure. Rows are written with pwrite at their offsets; the done mask that claims
them is set after them, every `flush_rows` rows or `flush_seconds`. The partial file is fsynced and
renamed to its final name only when every row is done, so a final name always means a
complete cache.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import h5py
import numpy as np

from featx.config import resolve_layers
from featx.data import Split
from featx.errors import FeatxError
from featx.files import loads_json, open_nofollow, refuse_link, utc_now
from featx.stream import Column
from featx.tasks import TASKS
from featx.version import __version__

# 2: a crc32 per dataset, metadata checked against the key; 3: and a crc32 of the attributes;
# 4: text pairs also store each text encoded alone (/singles)
SCHEMA_VERSION = 4
SINGLES = "singles"  # the group of single-text vectors of a pair task (not a split)
KEY_CHARS = 16
FINALIZE_HEADROOM = 1 << 20  # bytes free that finalizing a cache may need, with margin


@dataclass(frozen=True)
class CacheSpec:
    """Everything the cached numbers depend on; its hash is the cache key."""
    model_fingerprint: str
    init: str
    init_seed: int | None
    max_length: int
    layers: dict[str, tuple[int, ...]]
    """Per pooling, the hidden-state indices stored (pooler: the last layer only)."""
    compute_dtype: str
    store_dtype: str
    dataset_fingerprint: str
    singles: bool = False
    """Text pairs: every distinct text is also encoded alone (the bi-encoder features)."""
    prompt: str | None = None
    """The text put before every text encoded (sentence-transformers' prompt), if any."""
    model_revision: str | None = None
    """The hub revision asked for (model.revision)."""
    attention: str = "auto"
    """The attention implementation asked for (extract.attention)."""
    libraries: dict | None = None
    """Versions the numbers depend on beside the files: transformers, tokenizers (and
    sentence-transformers for its embedding)."""

    @property
    def poolings(self) -> tuple[str, ...]:
        return tuple(self.layers)

    def key(self) -> str:
        fields = asdict(self) | {"layers": {p: list(v) for p, v in self.layers.items()},
                                 "schema": SCHEMA_VERSION}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def cache_path(cache_dir: str | Path, spec: CacheSpec) -> Path:
    return Path(cache_dir) / f"{spec.key()[:KEY_CHARS]}.h5"


def partial_path(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


# ---------------------------------------------------------------------------------------------
# Locking: one writer per cache


@contextlib.contextmanager
def writer_lock(path: Path):
    """Hold an exclusive lock for writing the cache at `path`; a second writer gets a clear error.

    flock is released by the kernel when the process dies, so a SIGKILLed run never leaves a
    stale lock. The lock file stays (removing it would race with a process about to lock it).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = path.with_name(f".{path.name}.lock")
    fd = open_nofollow(lock_path, os.O_RDWR | os.O_CREAT, 0o644)  # a planted link is never written through
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            raise FeatxError(
                f"another featx process ({holder}) is writing the cache {path.name}; wait for it to "
                "finish (its rows are kept), or stop it and rerun to resume") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {os.uname().nodename}".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the flock


# ---------------------------------------------------------------------------------------------
# Writing


class CacheWriter:
    """Creates or resumes `<path>.partial`; rows are written at their original positions.

    HDF5 only creates the file and writes attributes. Rows go straight to the contiguous,
    pre-allocated datasets' bytes with `pwrite`: no HDF5 hyperslab machinery (8x slower and
    holding the GIL), and unlike a memory map, no written page ever counts in this process's
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
    def open(cls, path: Path, spec: CacheSpec, info: dict, splits: list[Split], hidden: int,
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
                _create(file, spec, info, splits, hidden, rows, singles, pair_rows)
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
        block = self._block
        if (block is not None and block.split == split and len(rows)
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
            for name, ds in _datasets(self.file[split]):
                ds.attrs["crc32"] = _crc32(ds, lambda offset, size: os.pread(self.fd, size, offset))
        self.file.flush()
        os.fsync(self.fd)  # durable before it gets the name that says complete
        os.close(self.fd)
        self.file.attrs["complete"] = True
        self.file.attrs["completed"] = utc_now()
        self.file.attrs["attrs_crc32"] = _attrs_crc32({k: _decode_attr(v) for k, v in self.file.attrs.items()})
        self.file.close()
        os.replace(partial_path(self.path), self.path)
        return self.path

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass  # already closed by finalize
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


def _datasets(group: h5py.Group):
    """(name, dataset) of every dataset of a split, kept columns included."""
    found = []
    group.visititems(lambda name, obj: found.append((name, obj)) if isinstance(obj, h5py.Dataset) else None)
    return found


CRC_BLOCK = 1 << 24
CRC_STRINGS = 1 << 16  # string values per block: the crc of the values joined by NUL, a block at a time


def _attrs_crc32(meta: dict) -> int:
    """crc32 of every decoded root attribute but itself, canonically encoded: the attributes no
    key or dataset shape pins (`n_layers`, which decides what layer -1 is; `featx_version`,
    `created`) cannot be edited unseen either."""
    items = {k: v for k, v in meta.items() if k != "attrs_crc32"}
    return zlib.crc32(json.dumps(items, sort_keys=True, default=repr).encode("utf-8", "surrogatepass"))


def _crc32(ds: h5py.Dataset, pread) -> int:
    """crc32 of a dataset's content: the raw bytes of a contiguous numeric dataset (read in
    blocks with `pread(offset, size)`, ~2 GB/s), the UTF-8 of a string dataset's values."""
    if h5py.check_string_dtype(ds.dtype) is not None:  # read a block of values at a time
        crc, strings = 0, ds.asstr()
        for start in range(0, len(ds), CRC_STRINGS):
            part = "\x00".join(strings[start:start + CRC_STRINGS].tolist())
            crc = zlib.crc32(("\x00" if start else "").encode() + part.encode("utf-8", "surrogatepass"), crc)
        return crc
    offset, size = ds.id.get_offset(), ds.id.get_storage_size()
    if offset is None or ds.chunks is not None:
        return zlib.crc32(np.ascontiguousarray(ds[...]).tobytes())
    crc = 0
    for start in range(0, size, CRC_BLOCK):
        crc = zlib.crc32(pread(offset + start, min(CRC_BLOCK, size - start)), crc)
    return crc


def _layout(ds: h5py.Dataset) -> tuple[int, np.dtype, tuple]:
    """(file offset, dtype, shape) of a contiguous, allocated dataset's bytes."""
    offset = ds.id.get_offset()
    if offset is None or ds.chunks is not None:
        raise RuntimeError(f"{ds.name} is not a contiguous allocated dataset")
    return offset, ds.dtype, ds.shape


def partial_finished(path: Path, splits: list[str]) -> bool:
    """True when the partial file has every row done (a run killed just before the rename)."""
    partial = partial_path(path)
    if not partial.exists():
        return False
    try:
        with h5py.File(partial, "r") as f:
            return all(bool(f[s]["done"][...].all()) for s in splits)
    except (OSError, KeyError):
        return False  # CacheWriter.open reports a damaged file, with the fix


def _create(file: h5py.File, spec: CacheSpec, info: dict, splits: list[Split], hidden: int,
            rows: dict[str, np.ndarray] | None, singles: Split | None = None,
            pair_rows: dict[str, np.ndarray] | None = None):
    # Early allocation and no timestamps: after this, writes never touch HDF5 metadata.
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    # No fill values written (they would be written twice, zeros then vectors, and their
    # write-back competes with the compute); `CacheWriter.open` allocates the blocks instead.
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    attrs = {"schema_version": SCHEMA_VERSION, "featx_version": __version__, "key": spec.key(),
             "complete": False, "created": utc_now(), "poolings": list(spec.poolings),
             "layers": {p: list(v) for p, v in spec.layers.items()},
             **{k: v for k, v in asdict(spec).items() if k != "layers"}, **info,
             "splits": [s.name for s in splits]}
    for name, value in attrs.items():
        if value is not None:  # HDF5 has no null: an absent attribute reads back as None
            file.attrs[name] = _encode_attr(value)
    for split in splits:
        n = len(split.ids)
        group = file.create_group(split.name)
        group.attrs["fingerprint"] = split.fingerprint()
        group.attrs["n_rows"] = n
        _strings(group, "ids", split.ids)
        _strings(group, "text", split.texts)
        if split.text_pairs is not None:
            _strings(group, "text_pair", split.text_pairs)
        group.create_dataset("labels", data=split.labels)
        if pair_rows is not None:
            group.create_dataset("pair_rows", data=np.asarray(pair_rows[split.name], dtype=np.int64))
        for column, values in split.columns.items():
            _strings(group, f"columns/{column}", values)
        _create_vectors(group, spec, n, hidden, dcpl, None if rows is None else rows[split.name])
    if singles is not None:
        group = file.create_group(SINGLES)
        group.attrs["n_rows"] = len(singles.texts)
        _strings(group, "text", singles.texts)
        _create_vectors(group, spec, len(singles.texts), hidden, dcpl,
                        None if rows is None else rows[SINGLES])
    file.flush()


STRINGS_BLOCK = 1 << 16  # values converted and written at a time: bounded memory at any size


def _strings(group: h5py.Group, name: str, values) -> None:
    """A (n,) string dataset of `values` (any sequence of str), written a block at a time."""
    ds = group.create_dataset(name, shape=(len(values),), dtype=h5py.string_dtype())
    for start in range(0, len(values), STRINGS_BLOCK):
        ds[start:start + STRINGS_BLOCK] = np.array(values[start:start + STRINGS_BLOCK], dtype=object)


def _create_vectors(group: h5py.Group, spec: CacheSpec, n: int, hidden: int, dcpl,
                    rows: np.ndarray | None) -> None:
    """The per-row datasets extraction writes (and, in a shard, the global rows they are)."""
    if rows is not None:
        group.create_dataset("rows", data=np.asarray(rows, dtype=np.int64))
    for name, dtype, shape in [("n_tokens", "i4", (n,)), ("truncated", "?", (n,)),
                               ("done", "u1", (n,))]:
        group.create_dataset(name, shape=shape, dtype=dtype, dcpl=dcpl, track_times=False)
    for pooling, layers in spec.layers.items():
        ds = group.create_dataset(pooling, shape=(n, len(layers), hidden),
                                  dtype=np.dtype(spec.store_dtype), dcpl=dcpl, track_times=False)
        ds.attrs["layers"] = np.array(layers, dtype=np.int32)


def _estimate_bytes(spec: CacheSpec, splits: list[Split], hidden: int) -> int:
    """Bytes of the vectors and texts of every group (splits, singles), with some margin."""
    rows = sum(len(s.texts) for s in splits)
    per_row = sum(len(v) for v in spec.layers.values()) * hidden * np.dtype(spec.store_dtype).itemsize
    # A streamed split's texts are still in its file: their size is bounded by its share of it.
    text = sum(s.texts.nbytes if isinstance(s.texts, Column) else sum(map(len, s.texts)) for s in splits) * 2
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
    scratch = folder / f".featx-reserve-{os.getpid()}"
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


def _encode_attr(value):
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    if isinstance(value, str):
        return str(value)  # plain str: h5py cannot store str subclasses such as TorchVersion
    return value


def _groups(file: h5py.File) -> list[str]:
    """The groups of rows extraction writes: the splits, and a pair task's singles."""
    return json.loads(file.attrs["splits"]) + ([SINGLES] if SINGLES in file else [])


def _check_meta(file: h5py.File, meta: dict, path: Path) -> None:
    """A finished cache's attributes must be what featx wrote: of the right types, hashing to
    the key (the spec) and to the dataset fingerprint (task, label names, splits), and
    describing datasets that are there with the shapes they claim."""
    from featx.data import dataset_fingerprint

    def damaged(what: str) -> FeatxError:
        return FeatxError(f"{path} is damaged or was edited: {what}. Delete it and rerun featx extract")

    names = lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)  # noqa: E731
    for attr in ("poolings", "splits", "label_names"):
        if not names(meta.get(attr)):
            raise damaged(f"its {attr!r} attribute is not a list of names ({meta.get(attr)!r})")
    layers = meta.get("layers")
    if not (isinstance(layers, dict) and set(layers) == set(meta["poolings"]) and all(
            isinstance(v, list) and v and all(isinstance(i, int) for i in v) for v in layers.values())):
        raise damaged(f"its 'layers' attribute does not list the layers of {meta['poolings']}")
    absent = [s for s in meta["splits"] if s not in file or not isinstance(file[s], h5py.Group)]
    if absent:
        raise damaged(f"its splits attribute names {absent}, which the file does not hold")
    if not isinstance(meta.get("task"), str) or meta["task"] not in TASKS or not all(isinstance(meta.get(k), int) and meta[k] >= (k != "n_layers")
                                                 for k in ("n_layers", "hidden_size", "max_length")):
        raise damaged("its task, n_layers, hidden_size or max_length attribute is not valid")
    try:
        spec = CacheSpec(model_fingerprint=meta["model_fingerprint"], init=meta["init"],
                         init_seed=meta.get("init_seed"), max_length=meta["max_length"],
                         layers={p: tuple(v) for p, v in layers.items()},
                         compute_dtype=meta["compute_dtype"], store_dtype=meta["store_dtype"],
                         dataset_fingerprint=meta["dataset_fingerprint"], singles=meta["singles"],
                         prompt=meta.get("prompt"), model_revision=meta.get("model_revision"),
                         attention=meta["attention"], libraries=meta.get("libraries"))
        splits = [(s, str(file[s].attrs["fingerprint"])) for s in meta["splits"]]
        key = spec.key()
    except KeyError as exc:
        raise damaged(f"its {exc} attribute is missing") from None
    except (TypeError, ValueError) as exc:
        raise damaged(f"an attribute has an impossible value ({exc})") from None
    if key != meta.get("key"):
        raise damaged("its attributes (model, layers, dtypes, max length, dataset) do not hash to its key")
    if dataset_fingerprint(meta["task"], meta["label_names"], splits) != meta["dataset_fingerprint"]:
        raise damaged("its task, label names or split fingerprints are not the ones its key covers")
    if meta["singles"] is not (SINGLES in file):
        raise damaged(f"its 'singles' attribute ({meta['singles']!r}) does not say whether it holds "
                      "the /singles group")
    groups = [s for s, _ in splits] + ([SINGLES] if meta["singles"] else [])
    for split in groups:
        group = file[split]
        n = group.attrs.get("n_rows")
        for name, ds in _datasets(group):
            if not isinstance(n, (int, np.integer)) or ds.shape[0] != n:
                raise damaged(f"{split}/{name} has {ds.shape[0]} rows, the split says {n}")
        for pooling, stored in layers.items():
            if pooling not in group:
                raise damaged(f"the split {split!r} has no {pooling!r} vectors")
            ds = group[pooling]
            if ds.shape[1:] != (len(stored), meta["hidden_size"]) or list(ds.attrs.get("layers", [])) != stored:
                raise damaged(f"{split}/{pooling} does not hold the layers {stored} it should")
        required = ("text", "n_tokens", "truncated", "done") + (
            () if split == SINGLES else ("ids", "labels") + (("pair_rows",) if meta["singles"] else ()))
        for name in required:
            if name not in group:
                raise damaged(f"the split {split!r} has no {name!r} dataset")
        if split != SINGLES and meta["singles"] and group["pair_rows"].shape[1:] != (2,):
            raise damaged(f"{split}/pair_rows is not (rows, 2)")


def check_compatible(file: h5py.File, key: str | None, path: Path) -> None:
    """Refuse files from another schema, or whose key is not the one expected."""
    version = file.attrs.get("schema_version")
    if version != SCHEMA_VERSION:
        raise FeatxError(
            f"{path} was written with cache schema {version} (featx "
            f"{file.attrs.get('featx_version', '?')}); this featx {__version__} reads schema "
            f"{SCHEMA_VERSION}: rerun featx extract to rebuild it (the old file is left as is)")
    if key is not None and file.attrs.get("key") != key:
        raise FeatxError(f"{path} holds cache key {str(file.attrs.get('key'))[:KEY_CHARS]}, not "
                         f"{key[:KEY_CHARS]} that this pipeline needs; it was renamed or copied by "
                         "hand: delete it and rerun featx extract")


# ---------------------------------------------------------------------------------------------
# Reading


class Cache:
    """A complete cache opened for reading: metadata, features, labels, ids. No torch.

    >>> cache = Cache("data/cache/0123456789abcdef.h5")
    >>> X = cache.features("train", pooling="mean", layer=-1)        # (n, hidden) float32
    >>> X4 = cache.features("train", pooling="cls", layer="last4")   # (n, 4 * hidden)
    """

    def __init__(self, path: str | Path, key: str | None = None):
        self.path = Path(path).expanduser()
        if self.path.name.endswith((".partial", ".init")):
            raise FeatxError(f"{self.path} is a partial cache (an extraction is running or was "
                             "interrupted); rerun featx extract to finish it")
        if self.path.suffix == ".toml":
            raise FeatxError(f"{self.path} is a pipeline file, not a cache: use "
                             f"featx.open_cache(pipeline={str(self.path)!r})")
        if self.path.is_dir():
            raise FeatxError(f"{self.path} is a directory; give the cache file in it (a "
                             "<key>.h5 under data/cache) or featx.open_cache(pipeline=...)")
        if not self.path.is_file():
            partial = partial_path(self.path)
            hint = (" (an unfinished .partial exists: rerun featx extract to finish it)"
                    if partial.exists() else " (run featx extract first)")
            raise FeatxError(f"cache {self.path} not found{hint}")
        try:
            self.file = h5py.File(self.path, "r")
        except OSError as exc:
            raise FeatxError(f"{self.path} is not a readable HDF5 file ({exc}); it is truncated or "
                             "corrupt: delete it and rerun featx extract") from None
        try:
            check_compatible(self.file, key, self.path)
            complete = self.file.attrs.get("complete")
            if not isinstance(complete, (bool, np.bool_)) or not complete:
                raise FeatxError(f"{self.path} is not marked complete; rerun featx extract")
            self.meta = {k: _decode_attr(v) for k, v in self.file.attrs.items()}
            _check_meta(self.file, self.meta, self.path)
            if self.meta.get("attrs_crc32") != _attrs_crc32(self.meta):  # last: the checks above name what changed
                raise FeatxError(f"{self.path} is damaged or was edited: its attributes do not match "
                                 "the checksum written when it was finished. Delete it and rerun "
                                 "featx extract")
        except BaseException:
            self.file.close()
            raise
        # One read-only mapping of the whole (finished, never rewritten) file, made on first
        # use and kept: a fresh mapping per call re-faults every page it touches, which cost
        # as much as the copy itself on a layer sweep.
        self._mapped: np.memmap | None = None
        self._verified: set[str] = set()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self._mapped = None
        if self.file.id.valid:
            self.file.close()

    def verify(self) -> dict[str, int]:
        """Check every dataset against the crc32 written when the cache was finished; returns
        {dataset: bytes checked}. A mismatch is an error naming the dataset."""
        checked = {}
        for split in self.splits + ([SINGLES] if self.has_singles else []):
            for name, ds in _datasets(self._group(split)):
                self._verify(split, name)
                checked[f"{split}/{name}"] = int(ds.id.get_storage_size())
        return checked

    def _verify(self, split: str, name: str) -> h5py.Dataset:
        """The dataset, checked against its crc32 once per open cache: a read of changed bytes
        is an error, never different numbers."""
        ds = self._group(split)[name]
        if f"{split}/{name}" not in self._verified:
            if self._mapped is None:
                self._mapped = np.memmap(self.path, dtype=np.uint8, mode="r")
            mapped = self._mapped
            try:
                found = _crc32(ds, lambda offset, size: memoryview(mapped[offset:offset + size]))
            except (OSError, ValueError, UnicodeError) as exc:  # HDF5 cannot even read it back
                raise FeatxError(f"{self.path}: {split}/{name} cannot be read ({exc}): the file was "
                                 "damaged. Delete it and rerun featx extract") from None
            if found != ds.attrs.get("crc32"):
                raise FeatxError(f"{self.path}: {split}/{name} does not match the checksum written when "
                                 "the cache was finished: the file was changed or damaged since. "
                                 "Delete it and rerun featx extract")
            self._verified.add(f"{split}/{name}")
        return ds

    def __repr__(self) -> str:
        if not self.file.id.valid:
            return f"Cache({str(self.path)!r}, closed)"
        return (f"Cache({str(self.path)!r}, model={self.meta.get('model_name')!r}, "
                f"task={self.task!r}, splits={ {s: self.n_rows(s) for s in self.splits} }, "
                f"poolings={ {p: list(self.layers(p)) for p in self.poolings} })")

    # metadata
    @property
    def key(self) -> str:
        return self.meta["key"]

    @property
    def task(self) -> str:
        return self.meta["task"]

    @property
    def label_names(self) -> list[str]:
        return self.meta["label_names"]

    @property
    def splits(self) -> list[str]:
        return self.meta["splits"]

    @property
    def poolings(self) -> list[str]:
        return self.meta["poolings"]

    def layers(self, pooling: str) -> tuple[int, ...]:
        self._check("pooling", pooling, self.poolings)
        return tuple(self.meta["layers"][pooling])

    def n_rows(self, split: str) -> int:
        return int(self._group(split).attrs["n_rows"])

    # row data, each checked against its crc32 on first read
    def ids(self, split: str) -> np.ndarray:
        return self._verify(split, "ids").asstr()[...]

    def texts(self, split: str) -> np.ndarray:
        return self._verify(split, "text").asstr()[...]

    def text_pairs(self, split: str) -> np.ndarray | None:
        return self._verify(split, "text_pair").asstr()[...] if "text_pair" in self._group(split) else None

    def labels(self, split: str) -> np.ndarray:
        labels = self._verify(split, "labels")[...]
        if not TASKS[self.task].valid_labels(labels, len(self.label_names)):
            raise FeatxError(f"{self.path}: the {split} labels do not fit the task ({self.task}, "
                             f"{len(self.label_names)} label names): the cache was damaged or edited. "
                             "Delete it and rerun featx extract")
        return labels

    def column(self, split: str, name: str) -> np.ndarray:
        group = self._group(split)
        kept = list(group["columns"]) if "columns" in group else []
        self._check("kept column", name, kept)
        return self._verify(split, f"columns/{name}").asstr()[...]

    def n_tokens(self, split: str) -> np.ndarray:
        return self._verify(split, "n_tokens")[...]

    def truncated(self, split: str) -> np.ndarray:
        return self._verify(split, "truncated")[...]

    def features(self, split: str, pooling: str = "mean", layer=-1,
                 dtype=np.float32) -> np.ndarray:
        """(n, hidden) vectors of one layer, or (n, k * hidden) for k layers concatenated.

        `layer`: a hidden-state index (0 = embeddings, -1 = the model's last layer), a list of
        indices, or "last", "last4", "all". `dtype=None` keeps the stored dtype.
        """
        view = self._features_view(split, pooling, layer)
        return _copy_out(view, np.dtype(dtype or view.dtype))

    @property
    def has_singles(self) -> bool:
        """Whether this text-pair cache also holds each text encoded alone (`pair_features`)."""
        return bool(self.meta.get("singles"))

    def pair_features(self, split: str, pooling: str = "mean", layer=-1,
                      dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
        """(u, v): the vectors of each pair's first and second text, each text encoded alone
        (as a bi-encoder embeds it), (n, hidden) or (n, k * hidden) each, in the split's order.
        `featx.pairs` combines them ([u, v, |u - v|, u * v], the cosine)."""
        if not self.has_singles:
            raise FeatxError(f"{self.path.name} holds no single-text vectors: "
                             + ("it is not a text-pair cache" if self.text_pairs(self.splits[0]) is None
                                else "it was extracted with extract.pair_singles = false; rerun "
                                     "featx extract without it"))
        rows = self._verify(split, "pair_rows")[...]  # (n, 2)
        m = int(self.file[SINGLES].attrs["n_rows"])
        if rows.ndim != 2 or rows.shape[1] != 2 or rows.size and (rows.min() < 0 or rows.max() >= m):
            raise FeatxError(f"{self.path}: {split}/pair_rows points outside the {m} single texts: "
                             "the cache was damaged or edited. Delete it and rerun featx extract")
        view = self._features_view(SINGLES, pooling, layer)
        dtype = np.dtype(dtype or view.dtype)
        # Fancy indexing of the mapped view reads only the rows the split needs.
        return (np.asarray(view[rows[:, 0]], dtype=dtype, order="C"),
                np.asarray(view[rows[:, 1]], dtype=dtype, order="C"))

    def _features_view(self, group: str, pooling: str, layer) -> np.ndarray:
        self._check("pooling", pooling, self.poolings)
        stored = self.layers(pooling)
        positions = [stored.index(i) for i in self.layer_indices(pooling, layer)]
        return self._layer_view(self._verify(group, pooling), positions)

    def layer_indices(self, pooling: str, layer=-1) -> list[int]:
        """The stored hidden-state indices `layer` names for `pooling` (an error lists them)."""
        stored = self.layers(pooling)
        n = int(self.meta["n_layers"])
        if isinstance(layer, str) and layer == "all":  # every layer stored for this pooling
            return list(stored)
        integer = lambda i: isinstance(i, (int, np.integer)) and not isinstance(i, bool)  # noqa: E731
        if isinstance(layer, str) or integer(layer):
            wanted = list(resolve_layers(layer if isinstance(layer, str) else int(layer), n))
        elif isinstance(layer, (list, tuple)) and layer and all(integer(i) for i in layer):
            wanted = [resolve_layers(int(i), n)[0] for i in layer]  # the caller's order: the concatenation's
        else:
            raise FeatxError(f"layer {layer!r} is not a layer: give an index (0 = embeddings, -1 = "
                             f"last), a non-empty list of indices, or one of 'last', 'last4', 'all'")
        missing = [i for i in wanted if i not in stored]
        if missing:
            raise FeatxError(f"{self.path.name}: pooling {pooling!r} has no layer(s) {missing}; "
                             f"stored layers: {list(stored)} (0 = embeddings, {n} = last)")
        return wanted

    def _layer_view(self, ds: h5py.Dataset, positions: list[int]) -> np.ndarray:
        """(n, len(positions) * hidden) without copying when it can: consecutive layers of a
        contiguous, uncompressed dataset are a strided view of the mapped file, far faster
        than HDF5's hyperslab read of some layers out of (n, n_layers, hidden)."""
        offset = ds.id.get_offset()
        n = ds.shape[0]
        if offset is None or ds.chunks is not None or ds.compression is not None:
            return ds[:, sorted(positions), :][:, np.argsort(np.argsort(positions)), :].reshape(n, -1)
        if self._mapped is None:
            self._mapped = np.memmap(self.path, dtype=np.uint8, mode="r")
        mapped = np.ndarray(ds.shape, dtype=ds.dtype, buffer=self._mapped, offset=offset)
        first = positions[0]
        if positions == list(range(first, first + len(positions))):
            return mapped[:, first:first + len(positions), :].reshape(n, -1)
        return mapped[:, positions, :].reshape(n, -1)

    def _group(self, split: str) -> h5py.Group:
        if not self.file.id.valid:
            raise FeatxError(f"the cache {self.path.name} was closed; open it again (featx.open_cache)")
        if split == SINGLES and self.has_singles:  # not a split: no labels; features() reads it
            return self.file[SINGLES]
        self._check("split", split, self.splits)
        return self.file[split]

    def _check(self, what: str, value, choices) -> None:
        if value not in choices:
            raise FeatxError(f"{self.path.name} has no {what} {value!r}; it has: "
                             f"{', '.join(map(str, choices))}")


# Conversions (float16 stored -> float32 out) run at ~0.6 G elements/s per core in numpy: cut
# into blocks of rows converted on a few threads (numpy releases the GIL in casts), each block
# small enough to stay in cache between the read and the write.
_COPY_BLOCK_BYTES = 1 << 20
_COPY_THREADS = min(4, os.cpu_count() or 1)
_copy_pool: ThreadPoolExecutor | None = None


def _forget_copy_pool() -> None:
    global _copy_pool
    _copy_pool = None  # a forked child has none of the parent's threads: start its own


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_copy_pool)


def _copy_out(view: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A C-ordered copy of `view` in `dtype`, read and converted in one pass."""
    global _copy_pool
    if dtype == view.dtype or view.nbytes < 2 * _COPY_BLOCK_BYTES or _COPY_THREADS < 2:
        return np.array(view, dtype=dtype, order="C")
    out = np.empty(view.shape, dtype=dtype)
    step = max(1, _COPY_BLOCK_BYTES // max(1, view[0].nbytes))
    if _copy_pool is None:
        _copy_pool = ThreadPoolExecutor(_COPY_THREADS, thread_name_prefix="featx-read")
    list(_copy_pool.map(lambda i: np.copyto(out[i:i + step], view[i:i + step]),
                        range(0, len(view), step)))
    return out


def _decode_attr(value):
    """Attributes as written by `_encode_attr`: lists and dicts are JSON text."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return loads_json(value)
        except ValueError:  # not JSON after all: left as text, which the checks refuse by name
            return value
    return value
