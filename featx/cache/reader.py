"""Reading a complete cache (`Cache`): metadata, features, labels, ids, each dataset checked
against its checksum on first read. Imports no torch (a test keeps it so).

The schema (the layout, the key, the checks that a file is a cache) is told in
`featx.cache.schema`; writing a cache is `featx.cache.writer`'s.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import numpy as np

from featx.cache.schema import (SINGLES, attrs_crc32, check_compatible, check_meta, crc32, datasets,
                               decode_attr, partial_path)
from featx.config.pipeline import resolve_layers
from featx.cpus import available
from featx.errors import FeatxError
from featx.stats.duplicates import row_groups
from featx.files import regular_file
from featx.tasks import TASKS


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
        if self.path.exists() and not self.path.is_file():  # a FIFO would block h5py's open
            regular_file(self.path, "the cache")
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
            self.meta = {k: decode_attr(v) for k, v in self.file.attrs.items()}
            check_meta(self.file, self.meta, self.path)
            if self.meta.get("attrs_crc32") != attrs_crc32(self.meta):  # last: the checks above name what changed
                raise FeatxError(f"{self.path} is damaged or was edited: its attributes do not match "
                                 "the checksum written when it was finished. Delete it and rerun "
                                 "featx extract")
        except BaseException:
            self.file.close()
            raise
        # One read-only mapping of the whole (finished, never rewritten) file, made on first
        # use and kept: a fresh mapping per call re-faults every page it touches, which costs
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
            for name, ds in datasets(self._group(split)):
                self._verify(split, name, any_dataset=True)
                checked[f"{split}/{name}"] = int(ds.id.get_storage_size())
        return checked

    def _verify(self, split: str, name: str, any_dataset: bool = False) -> h5py.Dataset:
        """The dataset, checked against its crc32 once per open cache: a read of changed bytes
        is an error, never different numbers. The single texts' group holds only vectors for
        the caller (`any_dataset`: verify's own pass): asking it for ids, labels or pair rows is an
        error that names the splits."""
        if split == SINGLES and not any_dataset and name not in self.poolings:
            raise FeatxError(f"{SINGLES!r} is not a split: it holds each distinct text of the pairs encoded "
                             f"alone, read through pair_features(split); it has no {name}. The splits: "
                             f"{', '.join(self.splits)}")
        ds = self._group(split)[name]
        if f"{split}/{name}" not in self._verified:
            if self._mapped is None:
                self._mapped = np.memmap(self.path, dtype=np.uint8, mode="r")
            mapped = self._mapped
            try:
                found = crc32(ds, lambda offset, size: memoryview(mapped[offset:offset + size]))
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

    def row_groups(self, split: str) -> np.ndarray:
        """(n,) int64: each row's group, numbered in the order the groups first appear; the rows of
        a group repeat one text (and pair) up to case, Unicode form, format characters and spacing
        (`featx.stats.duplicates.text_key`), and the bootstrap draws them as one row."""
        return row_groups(self.texts(split), self.text_pairs(split))

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
        `featx.heads.pairs` combines them ([u, v, |u - v|, u * v], the cosine)."""
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
        offset = ds.id.get_offset()  # None for a split of no rows: HDF5 gives it no storage
        n, width = ds.shape[0], len(positions) * ds.shape[2]  # (a width, not -1: no rows have one too)
        if offset is None or ds.chunks is not None or ds.compression is not None:
            return ds[:, sorted(positions), :][:, np.argsort(np.argsort(positions)), :].reshape(n, width)
        if self._mapped is None:
            self._mapped = np.memmap(self.path, dtype=np.uint8, mode="r")
        mapped = np.ndarray(ds.shape, dtype=ds.dtype, buffer=self._mapped, offset=offset)
        first = positions[0]
        if positions == list(range(first, first + len(positions))):
            return mapped[:, first:first + len(positions), :].reshape(n, width)
        return mapped[:, positions, :].reshape(n, width)

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


# Conversions (float16 stored -> float32 out) are slow on one core in numpy: cut into blocks
# of rows converted on a few threads (numpy releases the GIL in casts), each block small enough
# to stay in cache between the read and the write.
_COPY_BLOCK_BYTES = 1 << 20
_COPY_THREADS = min(4, available())
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
